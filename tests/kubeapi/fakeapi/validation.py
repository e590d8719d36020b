# SPDX-License-Identifier: MIT
"""CRD validation rules (`x-kubernetes-validations`, CEL) for the API double — a test double.

The real API server compiles each rule with cel-go and evaluates it with `self` bound to the
value at the rule's schema node, after the structural schema's own checks; a rule that is
false gives one cause `<path>: Invalid value: "<schema type>": <message>` in the 422 Invalid
answer (`<path>` extended by the rule's `fieldPath`; `reason` may make it Forbidden or
Required). A rule that cannot be evaluated (a field that is not there) is an error with
"evaluating rule" in it. Values that did not change on an update are not re-checked
(validation ratcheting, on by default since 1.30).

This evaluator supports exactly the subset of CEL the aiprof CRDs use and refuses anything
else when the rule is compiled (UnsupportedRule, which names the construct), so a new rule
cannot silently pass:

  literals: int, double, string ('...' or "..."), true, false, null, [list]
  names: self (no oldSelf: transition rules are refused)
  operators: ! - * / % + - == != < <= > >= in && || ?:   member access a.b, index a[i]
  macros: has(a.b), e.all(x, p), e.exists(x, p), e.exists_one(x, p)
  functions: size(x) / x.size(), duration(string), int(x), string(x),
             s.startsWith(t), s.endsWith(t), s.contains(t), s.matches(re)

Semantics follow the CEL spec where the subset meets it: `&&`/`||` absorb errors when the
other side decides; `==` between different types is false; ints and durations do not mix.
"""
import re

from .util import FieldError, invalid


class UnsupportedRule(Exception):
    """The rule uses CEL this double does not implement."""


class EvalError(Exception):
    """A runtime CEL error (no such key, type mismatch)."""


# ---------------------------------------------------------------- lexer

_TOKEN = re.compile(r"""
    (?P<ws>\s+)
  | (?P<num>\d+\.\d+|\d+)
  | (?P<str>'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")
  | (?P<id>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<op>&&|\|\||==|!=|<=|>=|[-+*/%!<>?:.,()\[\]])
""", re.X)

_ESC = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", "'": "'", '"': '"'}


def _unescape(s):
    out, i = [], 0
    while i < len(s):
        c = s[i]
        if c == "\\":
            i += 1
            if i >= len(s) or s[i] not in _ESC:
                raise UnsupportedRule(f"string escape \\{s[i:i + 1]}")
            out.append(_ESC[s[i]])
        else:
            out.append(c)
        i += 1
    return "".join(out)


def _tokens(src):
    pos, out = 0, []
    while pos < len(src):
        m = _TOKEN.match(src, pos)
        if not m:
            raise UnsupportedRule(f"character {src[pos]!r} at offset {pos}")
        pos = m.end()
        kind = m.lastgroup
        if kind == "ws":
            continue
        text = m.group()
        if kind == "str":
            out.append(("str", _unescape(text[1:-1])))
        elif kind == "num":
            out.append(("num", float(text) if "." in text else int(text)))
        else:
            out.append((kind, text))
    out.append(("end", None))
    return out


# ---------------------------------------------------------------- parser (to tuples)

_MACROS = {"all", "exists", "exists_one"}
_METHODS = {"size", "startsWith", "endsWith", "contains", "matches"}
_FUNCS = {"size", "duration", "int", "string"}
_RESERVED = {"oldSelf": "transition rules (oldSelf)"}


class _Parser:
    def __init__(self, src):
        self.t = _tokens(src)
        self.i = 0

    def peek(self, v=None):
        k, t = self.t[self.i]
        return t if v is None else (k in ("op", "id") and t == v)

    def take(self, v=None):
        k, t = self.t[self.i]
        if v is not None and not (k in ("op", "id") and t == v):
            raise UnsupportedRule(f"expected {v!r}, found {t!r}")
        self.i += 1
        return k, t

    def parse(self):
        e = self.cond()
        if self.t[self.i][0] != "end":
            raise UnsupportedRule(f"unexpected {self.t[self.i][1]!r}")
        return e

    def cond(self):
        c = self.binary(0)
        if self.peek("?"):
            self.take("?")
            a = self.cond()
            self.take(":")
            b = self.cond()
            return ("?:", c, a, b)
        return c

    _LEVELS = (("||",), ("&&",), ("==", "!=", "<", "<=", ">", ">=", "in"), ("+", "-"), ("*", "/", "%"))

    def binary(self, level):
        if level == len(self._LEVELS):
            return self.unary()
        left = self.binary(level + 1)
        while any(self.peek(op) for op in self._LEVELS[level]):
            _, op = self.take()
            right = self.binary(level + 1)
            left = (op, left, right)
            if level == 2 and any(self.peek(o) for o in self._LEVELS[2]):
                raise UnsupportedRule("chained comparison")
        return left

    def unary(self):
        if self.peek("!"):
            self.take()
            return ("!", self.unary())
        if self.peek("-"):
            self.take()
            return ("neg", self.unary())
        return self.member()

    def args(self):
        self.take("(")
        out = []
        if not self.peek(")"):
            out.append(self.cond())
            while self.peek(","):
                self.take(",")
                out.append(self.cond())
        self.take(")")
        return out

    def member(self):
        e = self.primary()
        while True:
            if self.peek("."):
                self.take(".")
                k, name = self.take()
                if k != "id":
                    raise UnsupportedRule(f"member name {name!r}")
                if self.peek("("):
                    if name in _MACROS:
                        self.take("(")
                        kv, var = self.take()
                        if kv != "id":
                            raise UnsupportedRule(f"{name}() needs a variable name")
                        self.take(",")
                        pred = self.cond()
                        self.take(")")
                        e = ("macro", name, e, var, pred)
                    elif name in _METHODS:
                        e = ("call", name, [e] + self.args())
                    else:
                        raise UnsupportedRule(f"method {name}()")
                else:
                    e = (".", e, name)
            elif self.peek("["):
                self.take("[")
                idx = self.cond()
                self.take("]")
                e = ("[]", e, idx)
            else:
                return e

    def primary(self):
        k, t = self.take()
        if k == "num" or k == "str":
            return ("lit", t)
        if k == "op" and t == "(":
            e = self.cond()
            self.take(")")
            return e
        if k == "op" and t == "[":
            items = []
            if not self.peek("]"):
                items.append(self.cond())
                while self.peek(","):
                    self.take(",")
                    items.append(self.cond())
            self.take("]")
            return ("list", items)
        if k == "id":
            if t in ("true", "false"):
                return ("lit", t == "true")
            if t == "null":
                return ("lit", None)
            if t in _RESERVED:
                raise UnsupportedRule(_RESERVED[t])
            if self.peek("("):
                if t == "has":
                    a = self.args()
                    if len(a) != 1 or a[0][0] != ".":
                        raise UnsupportedRule("has() needs one field selection such as has(self.x)")
                    return ("has", a[0][1], a[0][2])
                if t not in _FUNCS:
                    raise UnsupportedRule(f"function {t}()")
                return ("call", t, self.args())
            return ("var", t)
        raise UnsupportedRule(f"unexpected {t!r}")


_CACHE = {}


def compile_rule(src):
    """Parse a rule once; raises UnsupportedRule for CEL outside the subset."""
    if src not in _CACHE:
        _CACHE[src] = _Parser(src).parse()
    return _CACHE[src]


# ---------------------------------------------------------------- evaluation

class Duration:
    __slots__ = ("ns",)

    def __init__(self, ns):
        self.ns = ns

    def __eq__(self, o):
        return isinstance(o, Duration) and o.ns == self.ns

    def __hash__(self):
        return hash(self.ns)


_DUR_UNIT = {"h": 3600 * 10**9, "m": 60 * 10**9, "s": 10**9, "ms": 10**6, "us": 10**3, "µs": 10**3, "ns": 1}
_DUR = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(h|ms|m|s|us|µs|ns)")


def parse_duration(s):
    """Go's time.ParseDuration, as CEL's duration() takes it."""
    src = s
    neg = s.startswith("-")
    s = s.lstrip("+-")
    if s == "0":
        return Duration(0)
    if not s:
        raise EvalError(f'invalid duration "{src}"')
    total, pos = 0, 0
    while pos < len(s):
        m = _DUR.match(s, pos)
        if not m:
            raise EvalError(f'time: invalid duration "{src}"')
        total += round(float(m.group(1)) * _DUR_UNIT[m.group(2)])
        pos = m.end()
    return Duration(-total if neg else total)


def _type(v):
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, int):
        return "int"
    if isinstance(v, float):
        return "double"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "list"
    if isinstance(v, dict):
        return "map"
    if isinstance(v, Duration):
        return "google.protobuf.Duration"
    return "null_type"


def _no_overload(op, *vals):
    return EvalError(f"no such overload: {op}({', '.join(_type(v) for v in vals)})")


def _num(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _eq(a, b):
    if _num(a) and _num(b):
        return a == b
    if _type(a) != _type(b):
        return False
    return a == b


def _order(op, a, b):
    if _num(a) and _num(b) or (_type(a) == _type(b) and _type(a) == "string"):
        x, y = a, b
    elif isinstance(a, Duration) and isinstance(b, Duration):
        x, y = a.ns, b.ns
    else:
        raise _no_overload(op, a, b)
    return {"<": x < y, "<=": x <= y, ">": x > y, ">=": x >= y}[op]


def _bool(v, what):
    if not isinstance(v, bool):
        raise EvalError(f"no matching overload for {what} applied to '{_type(v)}'")
    return v


def _eval(e, env):
    op = e[0]
    if op == "lit":
        return e[1]
    if op == "var":
        if e[1] not in env:
            raise EvalError(f"undeclared reference to '{e[1]}'")
        return env[e[1]]
    if op == "list":
        return [_eval(x, env) for x in e[1]]
    if op == ".":
        obj = _eval(e[1], env)
        if not isinstance(obj, dict):
            raise EvalError(f"type '{_type(obj)}' does not support field selection")
        if e[2] not in obj:
            raise EvalError(f"no such key: {e[2]}")
        return obj[e[2]]
    if op == "has":
        obj = _eval(e[1], env)
        if not isinstance(obj, dict):
            raise EvalError(f"invalid type for field selection: {_type(obj)}")
        return e[2] in obj
    if op == "[]":
        obj, idx = _eval(e[1], env), _eval(e[2], env)
        if isinstance(obj, list) and isinstance(idx, int) and not isinstance(idx, bool):
            if not 0 <= idx < len(obj):
                raise EvalError(f"index out of bounds: {idx}")
            return obj[idx]
        if isinstance(obj, dict) and isinstance(idx, str):
            if idx not in obj:
                raise EvalError(f"no such key: {idx}")
            return obj[idx]
        raise _no_overload("_[_]", obj, idx)
    if op in ("&&", "||"):
        short = op == "||"          # the value that decides
        err = None
        for side in (e[1], e[2]):
            try:
                v = _bool(_eval(side, env), op)
            except EvalError as x:
                err = err or x
                continue
            if v == short:
                return short
        if err:
            raise err
        return not short
    if op == "!":
        return not _bool(_eval(e[1], env), "!")
    if op == "?:":
        return _eval(e[2] if _bool(_eval(e[1], env), "?:") else e[3], env)
    if op == "neg":
        v = _eval(e[1], env)
        if isinstance(v, Duration):
            return Duration(-v.ns)
        if not _num(v):
            raise _no_overload("-_", v)
        return -v
    if op == "macro":
        _, name, target, var, pred = e
        coll = _eval(target, env)
        if isinstance(coll, dict):
            items = list(coll.keys())
        elif isinstance(coll, list):
            items = coll
        else:
            raise _no_overload(name, coll)
        results = []
        for it in items:
            sub = dict(env)
            sub[var] = it
            results.append(_bool(_eval(pred, sub), name))
        if name == "all":
            return all(results)
        if name == "exists":
            return any(results)
        return sum(results) == 1
    if op == "call":
        return _call(e[1], [_eval(a, env) for a in e[2]])
    a, b = _eval(e[1], env), _eval(e[2], env)
    if op == "==":
        return _eq(a, b)
    if op == "!=":
        return not _eq(a, b)
    if op in ("<", "<=", ">", ">="):
        return _order(op, a, b)
    if op == "in":
        if isinstance(b, list):
            return any(_eq(a, x) for x in b)
        if isinstance(b, dict):
            return a in b
        raise _no_overload("@in", a, b)
    if op == "+":
        if isinstance(a, Duration) and isinstance(b, Duration):
            return Duration(a.ns + b.ns)
        if (_type(a), _type(b)) in (("int", "int"), ("double", "double"), ("string", "string"), ("list", "list")):
            return a + b
        raise _no_overload("_+_", a, b)
    if op in ("-", "*", "/", "%"):
        if isinstance(a, Duration) and isinstance(b, Duration) and op == "-":
            return Duration(a.ns - b.ns)
        if _type(a) != _type(b) or _type(a) not in ("int", "double"):
            raise _no_overload(f"_{op}_", a, b)
        if op in ("/", "%") and b == 0:
            raise EvalError("division by zero" if op == "/" else "modulus by zero")
        if op == "-":
            return a - b
        if op == "*":
            return a * b
        if isinstance(a, int):
            q = abs(a) // abs(b) * (1 if (a >= 0) == (b >= 0) else -1)
            return q if op == "/" else a - b * q
        return a / b if op == "/" else _no_overload("_%_", a, b)
    raise UnsupportedRule(f"operator {op}")


def _call(name, args):
    if name == "size" and len(args) == 1:
        v = args[0]
        if isinstance(v, (str, list, dict)):
            return len(v)
        raise _no_overload("size", v)
    if name == "duration" and len(args) == 1:
        if not isinstance(args[0], str):
            raise _no_overload("duration", *args)
        return parse_duration(args[0])
    if name == "int" and len(args) == 1:
        v = args[0]
        if isinstance(v, Duration):
            return v.ns
        if _num(v):
            return int(v)
        if isinstance(v, str) and re.fullmatch(r"-?\d+", v):
            return int(v)
        raise _no_overload("int", v)
    if name == "string" and len(args) == 1:
        v = args[0]
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, (str, int, float)):
            return str(v)
        raise _no_overload("string", v)
    if name in ("startsWith", "endsWith", "contains", "matches") and len(args) == 2:
        s, t = args
        if not isinstance(s, str) or not isinstance(t, str):
            raise _no_overload(name, s, t)
        if name == "startsWith":
            return s.startswith(t)
        if name == "endsWith":
            return s.endswith(t)
        if name == "contains":
            return t in s
        try:
            return re.search(t, s) is not None
        except re.error as x:
            raise EvalError(f"invalid regular expression {t!r}: {x}") from None
    raise UnsupportedRule(f"{name}() with {len(args)} arguments")


def evaluate(src, self_value):
    """Evaluate one rule with `self` bound; returns a bool, raises EvalError/UnsupportedRule."""
    v = _eval(compile_rule(src), {"self": self_value})
    if not isinstance(v, bool):
        raise EvalError(f"rule evaluated to {_type(v)}, not bool")
    return v


# ---------------------------------------------------------------- over a schema

_FIELD_PATH = re.compile(r"^(\.[A-Za-z_][A-Za-z0-9_]*)+$")
_REASONS = {None: "Invalid", "FieldValueInvalid": "Invalid", "FieldValueForbidden": "Forbidden",
            "FieldValueRequired": "Required"}


def rules_of(schema, path=""):
    """Every (path, rule dict) of a schema, for a test that compiles them all."""
    out = []
    if not isinstance(schema, dict):
        return out
    for r in schema.get("x-kubernetes-validations") or []:
        out.append((path, r))
    for k, sub in (schema.get("properties") or {}).items():
        out += rules_of(sub, f"{path}.{k}" if path else k)
    if isinstance(schema.get("additionalProperties"), dict):
        out += rules_of(schema["additionalProperties"], f"{path}[*]")
    if isinstance(schema.get("items"), dict):
        out += rules_of(schema["items"], f"{path}[*]")
    return out


def check_rule(rule):
    """Raises UnsupportedRule when the double cannot evaluate the rule the way the server would."""
    for k in rule:
        if k not in ("rule", "message", "fieldPath", "reason"):
            raise UnsupportedRule(f"x-kubernetes-validations field {k!r}")
    if rule.get("reason") not in _REASONS:
        raise UnsupportedRule(f"reason {rule.get('reason')!r}")
    if rule.get("fieldPath") and not _FIELD_PATH.match(rule["fieldPath"]):
        raise UnsupportedRule(f"fieldPath {rule['fieldPath']!r} (only .a.b selections)")
    compile_rule(rule.get("rule") or "")


def _one(rule, value, schema, path):
    try:
        check_rule(rule)
    except UnsupportedRule as x:
        return invalid(path or "<root>", _schema_type(schema),
                       f"fakeapi (a test double) cannot evaluate rule {rule.get('rule')!r}: "
                       f"unsupported CEL: {x}")
    try:
        ok = evaluate(rule["rule"], value)
    except EvalError as x:
        return invalid(path or "<root>", _schema_type(schema), f"{x} evaluating rule: {rule['rule']}")
    if ok:
        return None
    msg = rule.get("message") or f"failed rule: {rule['rule']}"
    where = path + (rule.get("fieldPath") or "") if path else (rule.get("fieldPath") or "").lstrip(".")
    kind = _REASONS[rule.get("reason")]
    if kind == "Invalid":
        return invalid(where, _schema_type(schema), msg)
    return FieldError(kind, where, detail=msg)


def _schema_type(schema):
    return schema.get("type") or ("object" if "properties" in schema else "")


_MISSING = object()


def cel_errors(schema, value, old=_MISSING, path=""):
    """Field errors of every rule in schema over value (old: the stored object on an update,
    whose unchanged parts are not re-checked)."""
    errs = []
    if not isinstance(schema, dict) or value is None:
        return errs
    if old is not _MISSING and old == value:
        return errs                       # ratcheting: nothing under here changed
    for r in schema.get("x-kubernetes-validations") or []:
        e = _one(r, value, schema, path)
        if e:
            errs.append(e)
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        addl = schema.get("additionalProperties")
        for k, v in value.items():
            sub = props.get(k, addl if isinstance(addl, dict) else None)
            if sub is None or (not path and k in ("apiVersion", "kind", "metadata")):
                continue
            o = old.get(k, _MISSING) if isinstance(old, dict) else _MISSING
            errs += cel_errors(sub, v, o, f"{path}.{k}" if path else k)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, v in enumerate(value):
            errs += cel_errors(schema["items"], v, _MISSING, f"{path}[{i}]")
    return errs


BLOCKING = ("NotSupported", "Required", "TooLong", "TooMany", "TypeInvalid")


def blocking(errs):
    """Schema errors after which the server does not run CEL, as apiextensions-apiserver's
    hasBlockingErr: a value not in the enum, a required field missing, too long, too many, or
    of the wrong type (a pattern or a minimum is not one of them)."""
    return any(e.kind in BLOCKING or "must be of type" in (e.detail or "") for e in errs)


def validate_custom_resource(schema, obj, old, schema_errs):
    """The hook: CEL errors to append to the structural ones of a custom resource. Where a
    blocking error stops the rules, the real server says so in one more cause."""
    if not schema:
        return []
    if blocking(schema_errs):
        if not rules_in(schema):
            return []
        return [FieldError("Invalid", "<nil>", "null", "some validation rules were not checked because the "
                           "object was invalid; correct the existing errors to complete validation")]
    return cel_errors(schema, obj, old if old is not None else _MISSING)


def rules_in(schema):
    """Does the schema hold any x-kubernetes-validations rule?"""
    if not isinstance(schema, dict):
        return False
    if schema.get("x-kubernetes-validations"):
        return True
    subs = list((schema.get("properties") or {}).values())
    for k in ("items", "additionalProperties"):
        if isinstance(schema.get(k), dict):
            subs.append(schema[k])
    return any(rules_in(x) for x in subs)
