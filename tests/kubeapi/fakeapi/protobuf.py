# SPDX-License-Identifier: MIT
"""Request bodies in the Kubernetes protobuf encoding, for the kinds kubectl's typed clients
send that way here (`kubectl create namespace`, `kubectl create secret`): the "k8s\\0" magic,
a runtime.Unknown envelope {typeMeta, raw}, and raw as the object's message. Field numbers are
those of the published generated.proto files. Decoded to the object's JSON form; anything
else is 415, as for a kind the server has no protobuf for."""
import base64
import datetime

from .util import APIError, fmt_time

MAGIC = b"k8s\x00"
CONTENT_TYPE = "application/vnd.kubernetes.protobuf"

TIME = ("time",)
OWNER_REF = {1: ("kind", "string"), 3: ("name", "string"), 4: ("uid", "string"),
             5: ("apiVersion", "string"), 6: ("controller", "bool"), 7: ("blockOwnerDeletion", "bool")}
OBJECT_META = {1: ("name", "string"), 2: ("generateName", "string"), 3: ("namespace", "string"),
               4: ("selfLink", "string"), 5: ("uid", "string"), 6: ("resourceVersion", "string"),
               7: ("generation", "int"), 8: ("creationTimestamp", TIME), 9: ("deletionTimestamp", TIME),
               10: ("deletionGracePeriodSeconds", "int"), 11: ("labels", ("map", "string", "string")),
               12: ("annotations", ("map", "string", "string")), 13: ("ownerReferences", ("repeated", OWNER_REF)),
               14: ("finalizers", ("repeated", "string"))}
KINDS = {
    ("v1", "Namespace"): {1: ("metadata", OBJECT_META), 2: ("spec", {1: ("finalizers", ("repeated", "string"))}),
                          3: ("status", {1: ("phase", "string")})},
    ("v1", "Secret"): {1: ("metadata", OBJECT_META), 2: ("data", ("map", "string", "bytes")),
                       3: ("type", "string"), 4: ("stringData", ("map", "string", "string")),
                       5: ("immutable", "bool")},
}


class _Bad(Exception):
    pass


def _varint(b, i):
    shift = n = 0
    while True:
        if i >= len(b):
            raise _Bad("truncated varint")
        c = b[i]
        i += 1
        n |= (c & 0x7F) << shift
        if not c & 0x80:
            return n, i
        shift += 7
        if shift > 63:
            raise _Bad("varint too long")


def _fields(b):
    """(field number, wire type, value) of each field of a message."""
    i = 0
    while i < len(b):
        key, i = _varint(b, i)
        num, wt = key >> 3, key & 7
        if wt == 0:
            v, i = _varint(b, i)
        elif wt == 2:
            n, i = _varint(b, i)
            if i + n > len(b):
                raise _Bad("truncated field")
            v, i = b[i:i + n], i + n
        elif wt == 1:
            v, i = b[i:i + 8], i + 8
        elif wt == 5:
            v, i = b[i:i + 4], i + 4
        else:
            raise _Bad(f"wire type {wt}")
        yield num, wt, v


def _scalar(t, wt, v):
    if t == "string":
        return v.decode("utf-8")
    if t == "bytes":
        return base64.b64encode(v).decode()
    if t == "bool":
        return bool(v)
    if t == "int":
        return v - (1 << 64) if v >= 1 << 63 else v
    raise _Bad(f"type {t}")


def _time(b):
    secs = nanos = 0
    for num, _, v in _fields(b):
        if num == 1:
            secs = v
        elif num == 2:
            nanos = v
    t = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc) + datetime.timedelta(seconds=secs, microseconds=nanos // 1000)
    return fmt_time(t)


def _message(b, schema):
    out = {}
    for num, wt, v in _fields(b):
        if num not in schema:
            continue
        name, t = schema[num]
        if isinstance(t, dict):
            out[name] = _message(v, t)
        elif t == TIME:
            out[name] = _time(v)
        elif isinstance(t, tuple) and t[0] == "map":
            k = val = None
            for n2, w2, v2 in _fields(v):
                if n2 == 1:
                    k = _scalar(t[1], w2, v2)
                elif n2 == 2:
                    val = _scalar(t[2], w2, v2)
            out.setdefault(name, {})[k] = val if val is not None else ("" if t[2] in ("string", "bytes") else None)
        elif isinstance(t, tuple) and t[0] == "repeated":
            item = _message(v, t[1]) if isinstance(t[1], dict) else _scalar(t[1], wt, v)
            out.setdefault(name, []).append(item)
        else:
            out[name] = _scalar(t, wt, v)
    # Go's JSON leaves out empty optional fields; proto2 from Go writes them all
    return {k: v for k, v in out.items() if v not in ("", 0, False, None, {}) or k in ("data", "stringData")}


def decode(body, want_api_version, want_kind):
    """The object in a protobuf request body, as JSON."""
    if not body.startswith(MAGIC):
        raise APIError(400, "BadRequest", "provided protobuf body does not start with the k8s magic prefix")
    try:
        type_meta, raw = {}, b""
        for num, _, v in _fields(body[len(MAGIC):]):
            if num == 1:
                type_meta = _message(v, {1: ("apiVersion", "string"), 2: ("kind", "string")})
            elif num == 2:
                raw = v
        av, kind = type_meta.get("apiVersion", want_api_version), type_meta.get("kind", want_kind)
        schema = KINDS.get((av, kind))
        if schema is None:
            raise APIError(415, "UnsupportedMediaType", "the body of the request was in an unknown format - "
                           "accepted media types include: application/json, application/yaml")
        obj = {"apiVersion": av, "kind": kind}
        obj.update(_message(raw, schema))
        return obj
    except _Bad as e:
        raise APIError(400, "BadRequest", f"unable to decode protobuf body: {e}") from None
