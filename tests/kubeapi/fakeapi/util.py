# SPDX-License-Identifier: MIT
"""Errors as Kubernetes Status objects, field errors, time formats, small JSON helpers."""
import datetime
import json
import re


def deepcopy(o):
    # JSON values only: faster than copy.deepcopy and never shares a list or dict
    if isinstance(o, dict):
        return {k: deepcopy(v) for k, v in o.items()}
    if isinstance(o, list):
        return [deepcopy(v) for v in o]
    return o


def dumps(o):
    return json.dumps(o, separators=(",", ":"), ensure_ascii=False)


def loads_strict(data):
    """Parse JSON, returning (value, duplicate field paths)."""
    dups = []

    def hook(pairs):
        d = {}
        for k, v in pairs:
            if k in d:
                dups.append(k)
            d[k] = v
        return d
    return json.loads(data, object_pairs_hook=hook), dups


# ---------------------------------------------------------------- time

def utcnow():
    return datetime.datetime.now(datetime.timezone.utc)


def fmt_time(t):
    """metav1.Time on the wire: RFC 3339, UTC, whole seconds."""
    return t.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def fmt_microtime(t):
    """metav1.MicroTime on the wire: RFC 3339, UTC, exactly six fraction digits."""
    return t.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


_RFC3339 = re.compile(r"^(\d{4})-(\d{2})-(\d{2})[Tt](\d{2}):(\d{2}):(\d{2})(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$")


def parse_time(s, micro=False):
    """Parse the way the API server decodes metav1.Time (RFC 3339, any fraction) or
    metav1.MicroTime (layout 2006-01-02T15:04:05.000000Z07:00: exactly six fraction digits).
    Returns an aware datetime; raises ValueError with a message like Go's."""
    if not isinstance(s, str):
        raise ValueError("not a string")
    m = _RFC3339.match(s)
    layout = "2006-01-02T15:04:05.000000Z07:00" if micro else "2006-01-02T15:04:05Z07:00"
    if not m:
        raise ValueError(f'parsing time "{s}" as "{layout}": cannot parse')
    frac = m.group(7) or ""
    if micro and len(frac) != 7:
        raise ValueError(f'parsing time "{s}" as "{layout}": cannot parse '
                         f'"{s[19:]}" as ".000000"')
    y, mo, d, h, mi, sec = (int(m.group(i)) for i in range(1, 7))
    us = int((frac[1:] + "000000")[:6]) if frac else 0
    tz = m.group(8)
    if tz in ("Z", "z"):
        off = datetime.timezone.utc
    else:
        sign = 1 if tz[0] == "+" else -1
        off = datetime.timezone(sign * datetime.timedelta(hours=int(tz[1:3]), minutes=int(tz[4:6])))
    try:
        return datetime.datetime(y, mo, d, h, mi, sec, us, tzinfo=off)
    except ValueError as e:
        raise ValueError(f'parsing time "{s}": {e}') from None


def human_duration(seconds):
    """Age as kubectl shows it: 45s, 3m20s, 17m, 5h10m, 3d4h, 2y30d."""
    s = int(seconds)
    if s < -1:
        return "<invalid>"
    if s < 0:
        return "0s"
    if s < 120:
        return f"{s}s"
    m = s // 60
    if m < 10:
        return f"{m}m" if s % 60 == 0 else f"{m}m{s % 60}s"
    if m < 180:
        return f"{m}m"
    h = s // 3600
    if h < 8:
        return f"{h}h" if m % 60 == 0 else f"{h}h{m % 60}m"
    if h < 48:
        return f"{h}h"
    if h < 24 * 8:
        return f"{h // 24}d" if h % 24 == 0 else f"{h // 24}d{h % 24}h"
    if h < 24 * 365 * 2:
        return f"{h // 24}d"
    if h < 24 * 365 * 8:
        dy = (h // 24) % 365
        return f"{h // 24 // 365}y" if dy == 0 else f"{h // 24 // 365}y{dy}d"
    return f"{h // 24 // 365}y"


# ---------------------------------------------------------------- errors

class APIError(Exception):
    """An error answered as a meta/v1 Status object."""

    def __init__(self, code, reason, message, details=None, headers=None):
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message
        self.details = details
        self.headers = headers or {}

    def status(self):
        return status_object(self.code, self.reason, self.message, self.details)


def status_object(code, reason, message, details=None):
    st = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
          "message": message, "reason": reason, "code": code}
    if not reason:
        del st["reason"]
    if details:
        st["details"] = details
    return st


def qualified(resource, group):
    return f"{resource}.{group}" if group else resource


def not_found(resource, group, name):
    return APIError(404, "NotFound", f'{qualified(resource, group)} "{name}" not found',
                    _details(name, group, resource))


def already_exists(resource, group, name):
    return APIError(409, "AlreadyExists", f'{qualified(resource, group)} "{name}" already exists',
                    _details(name, group, resource))


def conflict(resource, group, name, why="the object has been modified; please apply your "
             "changes to the latest version and try again"):
    return APIError(409, "Conflict", f'Operation cannot be fulfilled on {qualified(resource, group)} '
                    f'"{name}": {why}', _details(name, group, resource))


def bad_request(message):
    return APIError(400, "BadRequest", message)


def forbidden(resource, group, name, why):
    q = qualified(resource, group)
    subject = f'{q} "{name}"' if name else q
    return APIError(403, "Forbidden", f"{subject} is forbidden: {why}", _details(name, group, resource))


def expired(message):
    return APIError(410, "Expired", message)


def method_not_allowed(message):
    return APIError(405, "MethodNotAllowed", message)


def unsupported_media_type(content_type, accepted):
    return APIError(415, "UnsupportedMediaType",
                    f"the body of the request was in an unknown format - accepted media types "
                    f"include: {', '.join(accepted)}")


def internal_error(message):
    return APIError(500, "InternalError", f"Internal error occurred: {message}",
                    {"causes": [{"message": message}]})


def too_large_rv(requested, current):
    return APIError(504, "Timeout", f"Too large resource version: {requested}, current: {current}",
                    {"causes": [{"reason": "ResourceVersionTooLarge",
                                 "message": "Too large resource version"}],
                     "retryAfterSeconds": 1}, {"Retry-After": "1"})


def _details(name, group, resource):
    d = {}
    if name:
        d["name"] = name
    if group:
        d["group"] = group
    d["kind"] = resource
    return d


def go_repr(v):
    """A value the way field errors print it (Go %q for strings, %v otherwise)."""
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, bool):
        return "true" if v else "false"
    if v is None:
        return "null"
    if isinstance(v, (int, float)):
        return str(v)
    return dumps(v)


class FieldError:
    """One cause of an Invalid (422) answer: field path, type, detail."""
    TYPES = {
        "Required": ("FieldValueRequired", "Required value"),
        "Invalid": ("FieldValueInvalid", "Invalid value"),
        "NotSupported": ("FieldValueNotSupported", "Unsupported value"),
        "Duplicate": ("FieldValueDuplicate", "Duplicate value"),
        "Forbidden": ("FieldValueForbidden", "Forbidden"),
        "NotFound": ("FieldValueNotFound", "Not found"),
        "TooLong": ("FieldValueTooLong", "Too long"),
        "TooMany": ("FieldValueTooMany", "Too many"),
        "TypeInvalid": ("FieldValueTypeInvalid", "Invalid value"),
    }
    _NO_VALUE = object()

    def __init__(self, kind, field, value=_NO_VALUE, detail=""):
        self.kind, self.field, self.value, self.detail = kind, field, value, detail

    def body(self):
        reason, text = self.TYPES[self.kind]
        if self.kind in ("Required", "Forbidden", "TooLong"):
            s = text
        elif self.value is FieldError._NO_VALUE:
            s = text
        else:
            s = f"{text}: {go_repr(self.value)}"
        if self.detail:
            s += f": {self.detail}"
        return s

    def __str__(self):
        return f"{self.field}: {self.body()}"

    def cause(self):
        return {"reason": self.TYPES[self.kind][0], "message": self.body(), "field": self.field}


def required(field, detail=""):
    return FieldError("Required", field, detail=detail)


def invalid(field, value, detail=""):
    return FieldError("Invalid", field, value, detail)


def not_supported(field, value, allowed):
    return FieldError("NotSupported", field, value,
                      "supported values: " + ", ".join(json.dumps(a) for a in allowed))


def duplicate(field, value):
    return FieldError("Duplicate", field, value)


def forbidden_field(field, detail):
    return FieldError("Forbidden", field, detail=detail)


def not_found_field(field, value):
    return FieldError("NotFound", field, value)


def invalid_object(kind, group, name, errs):
    """422 Invalid for a list of FieldError."""
    q = f"{kind}.{group}" if group else kind
    if len(errs) == 1:
        msg = f'{q} "{name}" is invalid: {errs[0]}'
    else:
        msg = f'{q} "{name}" is invalid: [' + ", ".join(str(e) for e in errs) + "]"
    d = {"name": name, "group": group, "kind": kind, "causes": [e.cause() for e in errs]}
    if not group:
        del d["group"]
    return APIError(422, "Invalid", msg, d)


# ---------------------------------------------------------------- names

DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def check_subdomain(v):
    if len(v) > 253:
        return "must be no more than 253 characters"
    if not DNS1123_SUBDOMAIN.match(v):
        return ("a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, "
                "'-' or '.', and must start and end with an alphanumeric character")
    return None


def check_label(v):
    if len(v) > 63:
        return "must be no more than 63 characters"
    if not DNS1123_LABEL.match(v):
        return ("a lowercase RFC 1123 label must consist of lower case alphanumeric characters or "
                "'-', and must start and end with an alphanumeric character")
    return None


def check_qualified_name(k):
    """Label and annotation keys: [prefix/]name."""
    prefix, _, name = k.rpartition("/")
    if "/" in prefix:
        return "a qualified name must consist of alphanumeric characters, '-', '_' or '.', with an optional DNS subdomain prefix and '/'"
    if prefix and check_subdomain(prefix):
        return "prefix part " + check_subdomain(prefix)
    if not name:
        return "name part must be non-empty"
    if len(name) > 63:
        return "name part must be no more than 63 characters"
    if not QUALIFIED_NAME.match(name):
        return ("name part must consist of alphanumeric characters, '-', '_' or '.', and must start "
                "and end with an alphanumeric character")
    return None


def check_label_value(v):
    if len(v) > 63:
        return "must be no more than 63 characters"
    if not LABEL_VALUE.match(v):
        return ("a valid label must be an empty string or consist of alphanumeric characters, '-', "
                "'_' or '.', and must start and end with an alphanumeric character")
    return None


def parse_bool(v, name):
    if v in ("1", "t", "T", "true", "TRUE", "True"):
        return True
    if v in ("0", "f", "F", "false", "FALSE", "False", ""):
        return False
    raise bad_request(f'invalid boolean value for {name}: "{v}"')

