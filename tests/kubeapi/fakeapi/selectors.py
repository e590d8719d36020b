# SPDX-License-Identifier: MIT
"""Label selectors, field selectors, and the JSONPath subset that CRD printer columns and
selectable fields use."""
import json
import re

from .util import bad_request, check_label_value, check_qualified_name


# ---------------------------------------------------------------- label selectors

def _split_top(s, sep=","):
    """Split on sep outside parentheses."""
    parts, depth, cur = [], 0, []
    for ch in s:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == sep and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    parts.append("".join(cur))
    return parts


_SET_RE = re.compile(r"^\s*([^\s!=()]+)\s+(in|notin)\s*\((.*)\)\s*$")
_OP_RE = re.compile(r"^\s*([^\s!=()]+)\s*(==|!=|=)\s*([^\s=!(),]*)\s*$")
_EXISTS_RE = re.compile(r"^\s*(!?)\s*([^\s!=(),]+)\s*$")


class LabelSelector:
    """Parsed ?labelSelector=: equality (=, ==, !=) and set-based (in, notin, key, !key)."""

    def __init__(self, text):
        self.text = text or ""
        self.reqs = []
        if not self.text.strip():
            return
        for part in _split_top(self.text):
            self.reqs.append(self._parse(part))

    @staticmethod
    def _key(k):
        err = check_qualified_name(k)
        if err:
            raise bad_request(f'unable to parse requirement: <nil>: Invalid value: "{k}": {err}')
        return k

    @staticmethod
    def _value(v):
        err = check_label_value(v)
        if err:
            raise bad_request(f'unable to parse requirement: values[0]: Invalid value: "{v}": {err}')
        return v

    def _parse(self, part):
        m = _SET_RE.match(part)
        if m:
            key, op, vals = m.group(1), m.group(2), m.group(3)
            values = [self._value(v.strip()) for v in vals.split(",")] if vals.strip() else []
            if not values and op == "in":
                raise bad_request("unable to parse requirement: for 'in', 'notin' operators, values set can't be empty")
            return (self._key(key), op, set(values))
        m = _OP_RE.match(part)
        if m:
            key, op, val = m.group(1), m.group(2), m.group(3)
            return (self._key(key), "!=" if op == "!=" else "=", {self._value(val)})
        m = _EXISTS_RE.match(part)
        if m:
            return (self._key(m.group(2)), "!" if m.group(1) else "exists", set())
        raise bad_request(f"unable to parse requirement: found '{part.strip()}', expected: identifier")

    def empty(self):
        return not self.reqs

    def matches(self, labels):
        labels = labels or {}
        for key, op, vals in self.reqs:
            has = key in labels
            v = labels.get(key)
            if op == "=" and not (has and v in vals):
                return False
            if op == "!=" and has and v in vals:
                return False
            if op == "in" and not (has and v in vals):
                return False
            if op == "notin" and has and v in vals:
                return False
            if op == "exists" and not has:
                return False
            if op == "!" and has:
                return False
        return True


# ---------------------------------------------------------------- field selectors

def _unescape_split(s, seps):
    """Split s on unescaped separators; backslash escapes \\, \\= \\, ."""
    out, cur, i = [], [], 0
    while i < len(s):
        ch = s[i]
        if ch == "\\" and i + 1 < len(s):
            cur.append(s[i + 1])
            i += 2
            continue
        if ch in seps:
            out.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
        i += 1
    out.append("".join(cur))
    return out


class FieldSelector:
    """Parsed ?fieldSelector=: field=value, field==value, field!=value, comma-joined."""

    def __init__(self, text):
        self.text = text or ""
        self.reqs = []
        if not self.text.strip():
            return
        for part in _unescape_split_keep(self.text):
            m = re.match(r"^([^=!]+)(==|!=|=)(.*)$", part)
            if not m:
                raise bad_request(f"invalid selector: '{self.text}'; can't understand '{part}'")
            op = "!=" if m.group(2) == "!=" else "="
            self.reqs.append((m.group(1).strip(), op, _unescape(m.group(3))))

    def empty(self):
        return not self.reqs

    def fields(self):
        return [f for f, _, _ in self.reqs]

    def matches(self, values):
        """values: dict field -> string value for the object."""
        for f, op, v in self.reqs:
            actual = values.get(f, "")
            if op == "=" and actual != v:
                return False
            if op == "!=" and actual == v:
                return False
        return True


def _unescape_split_keep(s):
    """Split on unescaped commas, keeping escapes for the value part."""
    out, cur, i = [], [], 0
    while i < len(s):
        if s[i] == "\\" and i + 1 < len(s):
            cur.append(s[i:i + 2])
            i += 2
            continue
        if s[i] == ",":
            out.append("".join(cur))
            cur = []
        else:
            cur.append(s[i])
        i += 1
    out.append("".join(cur))
    return [p for p in out if p != ""]


def _unescape(v):
    return _unescape_split(v, "")[0]


# ---------------------------------------------------------------- JSONPath subset

_TOKEN = re.compile(r"""\.\s*([A-Za-z0-9_\-$/]+)       # .field
                      |\[\s*'([^']*)'\s*\]            # ['field']
                      |\[\s*"([^"]*)"\s*\]            # ["field"]
                      |\[\s*(\*|-?\d+)\s*\]           # [*] or [n]
                      |\[\s*\?\(\s*@\.([A-Za-z0-9_.\-]+)\s*(==|!=)\s*(?:"([^"]*)"|'([^']*)'|(-?\d+|true|false))\s*\)\s*\]
                   """, re.X)


class JSONPath:
    """A JSONPath like .status.phase, .spec.containers[0].name, .items[*].x,
    .status.conditions[?(@.type=="Ready")].status — the forms printer columns use."""

    def __init__(self, expr):
        self.expr = expr
        e = expr.strip()
        if e.startswith("{") and e.endswith("}"):
            e = e[1:-1].strip()
        if e.startswith("$"):
            e = e[1:]
        self.steps = []
        pos = 0
        while pos < len(e):
            m = _TOKEN.match(e, pos)
            if not m:
                raise ValueError(f"unrecognized JSONPath at {e[pos:]!r} in {expr!r}")
            if m.group(1) is not None:
                self.steps.append(("field", m.group(1)))
            elif m.group(2) is not None or m.group(3) is not None:
                self.steps.append(("field", m.group(2) if m.group(2) is not None else m.group(3)))
            elif m.group(4) is not None:
                self.steps.append(("all",) if m.group(4) == "*" else ("index", int(m.group(4))))
            else:
                lit = m.group(7) if m.group(7) is not None else m.group(8)
                if lit is None:
                    raw = m.group(9)
                    lit = json.loads(raw)
                self.steps.append(("filter", m.group(5).split("."), m.group(6), lit))
            pos = m.end()

    def find(self, obj):
        cur = [obj]
        for st in self.steps:
            nxt = []
            for c in cur:
                if st[0] == "field":
                    if isinstance(c, dict) and st[1] in c:
                        nxt.append(c[st[1]])
                elif st[0] == "index":
                    if isinstance(c, list) and -len(c) <= st[1] < len(c):
                        nxt.append(c[st[1]])
                elif st[0] == "all":
                    if isinstance(c, list):
                        nxt.extend(c)
                    elif isinstance(c, dict):
                        nxt.extend(c.values())
                elif st[0] == "filter":
                    if isinstance(c, list):
                        for item in c:
                            v = item
                            for f in st[1]:
                                v = v.get(f) if isinstance(v, dict) else None
                            if (v == st[3]) == (st[2] == "=="):
                                nxt.append(item)
            cur = nxt
        return cur


def value_string(v):
    """A field value as field selectors compare it."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if v is None:
        return ""
    return str(v)
