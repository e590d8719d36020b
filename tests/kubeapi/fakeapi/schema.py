# SPDX-License-Identifier: MIT
"""Decoding request bodies the way the API server does.

Built-in kinds: a compact description of the Go types (Typed) drives decoding — wrong JSON
types are 400 BadRequest, unknown fields are dropped with a warning (or 400 with
fieldValidation=Strict), metav1.Time and MicroTime are parsed and re-serialised in UTC.

Custom resources: the CRD's structural OpenAPI v3 schema drives pruning (unknown fields are
dropped), defaulting, and validation (422 Invalid with one cause per failing field).
"""
import base64
import binascii
import re
import string

from .patch import ListMeta
from .util import (FieldError, bad_request, deepcopy, duplicate, fmt_microtime, fmt_time, invalid,
                   not_supported, parse_time, required)


class DecodeError(Exception):
    pass


# ---------------------------------------------------------------- typed (built-in kinds)

class Typed:
    """A Go type: kind is one of string, int, bool, number, time, microtime, intorstring,
    quantity, any (any JSON value, kept as is), anyobj (any JSON object), object, list, map."""

    def __init__(self, kind, struct=None, fields=None, item=None):
        self.kind = kind
        self.struct = struct
        self.fields = fields or {}
        self.item = item


STR, INT, BOOL, NUM = Typed("string"), Typed("int"), Typed("bool"), Typed("number")
BYTES = Typed("bytes")
_B64 = set(string.ascii_letters + string.digits + "+/=")
TIME, MICRO = Typed("time"), Typed("microtime")
IOS, QTY = Typed("intorstring"), Typed("quantity")
ANY, ANYOBJ = Typed("any"), Typed("anyobj")


def obj(struct, **fields):
    return Typed("object", struct, fields)


def lst(item):
    return Typed("list", item=item)


def mp(item):
    return Typed("map", item=item)


SMAP = mp(STR)
_GO = {"string": "string", "int": "int64", "bool": "bool", "number": "float64",
       "time": "v1.Time", "microtime": "v1.MicroTime", "object": "struct", "list": "slice",
       "map": "map", "quantity": "resource.Quantity", "intorstring": "intstr.IntOrString"}


def _json_kind(v):
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, (int, float)):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "array"
    if isinstance(v, dict):
        return "object"
    return "null"


def decode_typed(value, t, unknown, path="", struct=""):
    """Return value decoded as type t; unknown field paths are appended to `unknown` and
    dropped. Raises DecodeError for a value of the wrong JSON type."""
    if value is None:
        return None
    k = t.kind

    def wrong():
        where = f"Go struct field {struct}.{path}" if struct else "Go value"
        raise DecodeError(f"json: cannot unmarshal {_json_kind(value)} into {where} "
                          f"of type {_GO.get(k, k)}")
    if k == "any":
        return deepcopy(value)
    if k == "anyobj":
        if not isinstance(value, dict):
            wrong()
        return deepcopy(value)
    if k == "string":
        if not isinstance(value, str):
            wrong()
        return value
    if k == "int":
        if isinstance(value, bool) or not isinstance(value, (int, float)) or \
                (isinstance(value, float) and not value.is_integer()):
            wrong()
        return int(value)
    if k == "number":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            wrong()
        return value
    if k == "bool":
        if not isinstance(value, bool):
            wrong()
        return value
    if k in ("time", "microtime"):
        try:
            ts = parse_time(value, micro=(k == "microtime"))
        except ValueError as e:
            raise DecodeError(str(e)) from None
        return fmt_microtime(ts) if k == "microtime" else fmt_time(ts)
    if k == "bytes":
        if not isinstance(value, str):
            wrong()
        try:
            base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            bad = next((i for i, ch in enumerate(value) if ch not in _B64), len(value))
            raise DecodeError(f"illegal base64 data at input byte {bad}") from None
        return value
    if k in ("intorstring", "quantity"):
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            wrong()
        return value
    if k == "list":
        if not isinstance(value, list):
            wrong()
        # Go's message names the field path without list indexes: PodSpec.spec.containers.name
        return [decode_typed(v, t.item, unknown, path, struct) for v in value]
    if k == "map":
        if not isinstance(value, dict):
            wrong()
        return {mk: decode_typed(mv, t.item, unknown, path, struct) for mk, mv in value.items()}
    if k == "object":
        if not isinstance(value, dict):
            wrong()
        out = {}
        for fk, fv in value.items():
            ft = t.fields.get(fk)
            sub = f"{path}.{fk}" if path else fk
            if ft is None:
                unknown.append(sub)
                continue
            dv = decode_typed(fv, ft, unknown, sub, t.struct or struct)
            if dv is not None:
                out[fk] = dv
        return out
    raise AssertionError(k)


def unknown_paths_with_index(value, t, path=""):
    """Unknown fields with list indexes in their paths (for messages): spec.containers[0].foo."""
    out = []
    if t.kind == "object" and isinstance(value, dict):
        for fk, fv in value.items():
            sub = f"{path}.{fk}" if path else fk
            ft = t.fields.get(fk)
            if ft is None:
                out.append(sub)
            else:
                out += unknown_paths_with_index(fv, ft, sub)
    elif t.kind == "list" and isinstance(value, list):
        for i, v in enumerate(value):
            out += unknown_paths_with_index(v, t.item, f"{path}[{i}]")
    elif t.kind == "map" and isinstance(value, dict):
        for mk, mv in value.items():
            out += unknown_paths_with_index(mv, t.item, f"{path}[{mk}]")
    return out


# ObjectMeta is shared by every kind, including custom resources.
OWNER_REF = obj("OwnerReference", apiVersion=STR, kind=STR, name=STR, uid=STR, controller=BOOL,
                blockOwnerDeletion=BOOL)
OBJECT_META = obj("ObjectMeta", name=STR, generateName=STR, namespace=STR, selfLink=STR, uid=STR,
                  resourceVersion=STR, generation=INT, creationTimestamp=TIME,
                  deletionTimestamp=TIME, deletionGracePeriodSeconds=INT, labels=SMAP,
                  annotations=SMAP, ownerReferences=lst(OWNER_REF), finalizers=lst(STR),
                  managedFields=lst(ANYOBJ))


# ---------------------------------------------------------------- structural schemas (CRs)

def _type_ok(v, typ, schema):
    if schema.get("x-kubernetes-int-or-string"):
        return (isinstance(v, (int, str)) and not isinstance(v, bool)) or \
            (isinstance(v, float) and v.is_integer())
    if typ == "object":
        return isinstance(v, dict)
    if typ == "array":
        return isinstance(v, list)
    if typ == "string":
        return isinstance(v, str)
    if typ == "boolean":
        return isinstance(v, bool)
    if typ == "integer":
        return not isinstance(v, bool) and (isinstance(v, int) or (isinstance(v, float) and v.is_integer()))
    if typ == "number":
        return not isinstance(v, bool) and isinstance(v, (int, float))
    return True


def _jtype(v):
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int) or (isinstance(v, float) and v.is_integer()):
        return "integer"
    if isinstance(v, float):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "array"
    if isinstance(v, dict):
        return "object"
    return "null"


ROOT_KEEP = ("apiVersion", "kind", "metadata")


def prune(value, schema, unknown, path="", root=False):
    """Drop fields the schema does not specify (recording their paths). Returns the pruned
    value. x-kubernetes-preserve-unknown-fields keeps unknown fields; additionalProperties
    describes map values; embedded resources keep apiVersion/kind/metadata."""
    if schema is None:
        return value
    if isinstance(value, dict):
        props = schema.get("properties")
        addl = schema.get("additionalProperties")
        preserve = schema.get("x-kubernetes-preserve-unknown-fields")
        embedded = schema.get("x-kubernetes-embedded-resource")
        out = {}
        for k, v in value.items():
            sub = f"{path}.{k}" if path else k
            if (root or embedded) and k in ROOT_KEEP:
                out[k] = v
            elif props is not None and k in props:
                out[k] = prune(v, props[k], unknown, sub)
            elif isinstance(addl, dict):
                out[k] = prune(v, addl, unknown, sub)
            elif addl is True or preserve:
                out[k] = v
            else:
                unknown.append(sub)
        return out
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [prune(v, schema["items"], unknown, f"{path}[{i}]") for i, v in enumerate(value)]
    return value


def drop_nulls(value, schema):
    """Null for a field that is not nullable is removed (the API server does this before
    defaulting)."""
    if not isinstance(schema, dict):
        return value
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        addl = schema.get("additionalProperties") if isinstance(schema.get("additionalProperties"), dict) else None
        out = {}
        for k, v in value.items():
            sub = props.get(k, addl)
            if v is None and sub is not None and not sub.get("nullable"):
                continue
            out[k] = drop_nulls(v, sub) if sub is not None else v
        return out
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [drop_nulls(v, schema["items"]) for v in value]
    return value


def apply_defaults(value, schema):
    if not isinstance(schema, dict):
        return value
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        out = dict(value)
        for k, sub in props.items():
            if k not in out and "default" in sub:
                out[k] = deepcopy(sub["default"])
        for k, v in list(out.items()):
            if k in props:
                out[k] = apply_defaults(v, props[k])
            elif isinstance(schema.get("additionalProperties"), dict):
                out[k] = apply_defaults(v, schema["additionalProperties"])
        return out
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [apply_defaults(v, schema["items"]) for v in value]
    return value


_DATE_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:?\d{2})$")


def validate(value, schema, path):
    """Field errors of value against an OpenAPI v3 (structural) schema."""
    errs = []
    if not isinstance(schema, dict):
        return errs
    if value is None:
        if schema.get("nullable"):
            return errs
        if "type" in schema:
            errs.append(FieldError("TypeInvalid", path, "null", f'{path} in body must be of type {schema["type"]}: "null"'))
        return errs
    typ = schema.get("type")
    if typ and not _type_ok(value, typ, schema):
        jt = _jtype(value)
        errs.append(FieldError("TypeInvalid", path, jt, f'{path} in body must be of type {typ}: "{jt}"'))
        return errs
    if "enum" in schema and value not in schema["enum"]:
        errs.append(not_supported(path, value, schema["enum"]))
    if isinstance(value, str):
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            errs.append(FieldError("TooLong", path, detail=f'may not be more than {schema["maxLength"]} bytes'))
        if "minLength" in schema and len(value) < schema["minLength"]:
            errs.append(invalid(path, value, f'{path} in body should be at least {schema["minLength"]} chars long'))
        if "pattern" in schema and not re.search(schema["pattern"], value):
            errs.append(invalid(path, value, f"{path} in body should match '{schema['pattern']}'"))
        if schema.get("format") == "date-time" and not _DATE_TIME.match(value):
            errs.append(invalid(path, value, f'{path} in body must be of type date-time: "{value}"'))
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if "minimum" in schema:
            if schema.get("exclusiveMinimum") and value <= schema["minimum"]:
                errs.append(invalid(path, value, f'{path} in body should be greater than {schema["minimum"]}'))
            elif value < schema["minimum"]:
                errs.append(invalid(path, value, f'{path} in body should be greater than or equal to {schema["minimum"]}'))
        if "maximum" in schema:
            if schema.get("exclusiveMaximum") and value >= schema["maximum"]:
                errs.append(invalid(path, value, f'{path} in body should be less than {schema["maximum"]}'))
            elif value > schema["maximum"]:
                errs.append(invalid(path, value, f'{path} in body should be less than or equal to {schema["maximum"]}'))
    if isinstance(value, list):
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            errs.append(FieldError("TooMany", path, len(value), f'must have at most {schema["maxItems"]} items'))
        if "minItems" in schema and len(value) < schema["minItems"]:
            errs.append(invalid(path, len(value), f'{path} in body should have at least {schema["minItems"]} items'))
        items = schema.get("items")
        for i, v in enumerate(value):
            errs += validate(v, items, f"{path}[{i}]")
        lt = schema.get("x-kubernetes-list-type")
        if lt == "set":
            seen = []
            for i, v in enumerate(value):
                if v in seen:
                    errs.append(duplicate(f"{path}[{i}]", v))
                seen.append(v)
        elif lt == "map":
            keys = schema.get("x-kubernetes-list-map-keys") or []
            seen = []
            for i, v in enumerate(value):
                if isinstance(v, dict):
                    k = {kk: v.get(kk) for kk in keys}
                    if k in seen:
                        errs.append(duplicate(f"{path}[{i}]", k))
                    seen.append(k)
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        for r in schema.get("required") or []:
            if r not in value:
                errs.append(required(f"{path}.{r}"))
        for k, v in value.items():
            if k in props:
                errs += validate(v, props[k], f"{path}.{k}")
            elif isinstance(schema.get("additionalProperties"), dict):
                errs += validate(v, schema["additionalProperties"], f"{path}.{k}")
        if "maxProperties" in schema and len(value) > schema["maxProperties"]:
            errs.append(FieldError("TooMany", path, len(value), f'must have at most {schema["maxProperties"]} items'))
        if "minProperties" in schema and len(value) < schema["minProperties"]:
            errs.append(invalid(path, len(value), f'{path} in body should have at least {schema["minProperties"]} properties'))
    jt = _jtype(value)
    if "oneOf" in schema:
        n = sum(1 for s in schema["oneOf"] if not validate(value, s, path))
        if n != 1:
            errs.append(invalid(path, jt, f"{path} in body must validate one and only one schema (oneOf)"))
    if "anyOf" in schema:
        if not any(not validate(value, s, path) for s in schema["anyOf"]):
            errs.append(invalid(path, jt, f"{path} in body must validate at least one schema (anyOf)"))
    for s in schema.get("allOf") or []:
        errs += validate(value, s, path)
    if "not" in schema and not validate(value, schema["not"], path):
        errs.append(invalid(path, jt, f"{path} in body must not validate the schema (not)"))
    return errs


def structural_errors(schema, path, root=True):
    """Why a CRD schema is not structural (the checks that matter for serving it)."""
    errs = []
    if not isinstance(schema, dict):
        return [required(path)]
    special = schema.get("x-kubernetes-int-or-string") or schema.get("x-kubernetes-preserve-unknown-fields")
    if not schema.get("type") and not special:
        errs.append(required(f"{path}.type", "must not be empty for specified object fields"
                             if not root else "must not be empty at the root"))
    if root and schema.get("type") not in (None, "object"):
        errs.append(invalid(f"{path}.type", schema.get("type"), "must be object at the root"))
    for k, sub in (schema.get("properties") or {}).items():
        errs += structural_errors(sub, f"{path}.properties[{k}]", False)
    if isinstance(schema.get("items"), dict):
        errs += structural_errors(schema["items"], f"{path}.items", False)
    if isinstance(schema.get("additionalProperties"), dict):
        errs += structural_errors(schema["additionalProperties"], f"{path}.additionalProperties", False)
    if schema.get("properties") and isinstance(schema.get("additionalProperties"), (dict, bool)) and \
            schema.get("additionalProperties") is not False:
        errs.append(FieldError("Forbidden", f"{path}.additionalProperties",
                               detail="additionalProperties and properties are mutual exclusive"))
    return errs


def list_meta_from_schema(schema):
    """Merge metadata for server-side apply from x-kubernetes-list-type / list-map-keys."""
    if not isinstance(schema, dict):
        return None
    if schema.get("type") == "array" or "items" in schema:
        lt = schema.get("x-kubernetes-list-type")
        item = list_meta_from_schema(schema.get("items"))
        if lt == "map":
            return ListMeta(schema.get("x-kubernetes-list-map-keys") or [], item if isinstance(item, dict) else {})
        if lt == "set":
            return ListMeta(primitive=True)
        return None
    props = schema.get("properties")
    if props:
        out = {}
        for k, sub in props.items():
            m = list_meta_from_schema(sub)
            if m:
                out[k] = m
        return out
    return None


def decode_error(kind, version, err):
    return bad_request(f'{kind} in version "{version}" cannot be handled as a {kind}: {err}')
