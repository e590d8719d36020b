# SPDX-License-Identifier: MIT
"""PATCH bodies: JSON merge patch (RFC 7386), JSON patch (RFC 6902), strategic merge patch
(Kubernetes directives), and the field sets behind server-side apply (managedFields)."""
import json

from .util import APIError, bad_request, deepcopy, dumps


class ListMeta:
    """How a list merges: keys=(k1,...) for a list of objects merged by key, primitive=True for
    a set of scalars merged by value, neither for an atomic list (replaced whole)."""

    def __init__(self, keys=None, item=None, primitive=False):
        self.keys = tuple(keys) if keys else ()
        self.item = item or {}
        self.primitive = primitive


def keyed(key, item=None):
    return ListMeta((key,), item)


def pset():
    return ListMeta(primitive=True)


def _sub(meta, k):
    return meta.get(k) if isinstance(meta, dict) else None


# ---------------------------------------------------------------- merge patch

def merge_patch(target, patch):
    if not isinstance(patch, dict):
        return deepcopy(patch)
    out = deepcopy(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out


# ---------------------------------------------------------------- JSON patch

class _Unprocessable(Exception):
    pass


def _ptr(path):
    if path == "":
        return []
    if not path.startswith("/"):
        raise _Unprocessable(f'invalid JSON pointer "{path}"')
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _walk(doc, parts, create=False):
    cur = doc
    for p in parts:
        if isinstance(cur, dict):
            if p not in cur:
                raise _Unprocessable(f"doc is missing path: \"/{'/'.join(parts)}\"")
            cur = cur[p]
        elif isinstance(cur, list):
            try:
                i = int(p)
            except ValueError:
                raise _Unprocessable(f"invalid array index {p!r}") from None
            if not 0 <= i < len(cur):
                raise _Unprocessable(f"array index out of bounds: {i}")
            cur = cur[i]
        else:
            raise _Unprocessable(f"doc is missing path: \"/{'/'.join(parts)}\"")
    return cur


def _add(doc, parts, value):
    if not parts:
        return value
    parent = _walk(doc, parts[:-1])
    last = parts[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        if last == "-":
            parent.append(value)
        else:
            try:
                i = int(last)
            except ValueError:
                raise _Unprocessable(f"invalid array index {last!r}") from None
            if not 0 <= i <= len(parent):
                raise _Unprocessable(f"array index out of bounds: {i}")
            parent.insert(i, value)
    else:
        raise _Unprocessable(f"add operation does not apply: doc is missing path: \"/{'/'.join(parts)}\"")
    return doc


def _remove(doc, parts):
    if not parts:
        raise _Unprocessable("cannot remove the whole document")
    parent = _walk(doc, parts[:-1])
    last = parts[-1]
    if isinstance(parent, dict):
        if last not in parent:
            raise _Unprocessable(f"remove operation does not apply: doc is missing path: \"/{'/'.join(parts)}\"")
        return parent.pop(last)
    if isinstance(parent, list):
        try:
            i = int(last)
        except ValueError:
            raise _Unprocessable(f"invalid array index {last!r}") from None
        if not 0 <= i < len(parent):
            raise _Unprocessable(f"remove operation does not apply: array index out of bounds: {i}")
        return parent.pop(i)
    raise _Unprocessable(f"remove operation does not apply: doc is missing path: \"/{'/'.join(parts)}\"")


def json_patch(doc, ops):
    """Apply RFC 6902 operations. A malformed patch is 400, one that does not apply is 422."""
    if not isinstance(ops, list):
        raise bad_request("json: cannot unmarshal object into Go value of type jsonpatch.Patch")
    doc = deepcopy(doc)
    try:
        for op in ops:
            if not isinstance(op, dict) or "op" not in op or "path" not in op:
                raise bad_request("the JSON patch is malformed: every operation needs op and path")
            kind, parts = op["op"], _ptr(op["path"])
            if kind in ("add", "replace", "test") and "value" not in op:
                raise bad_request(f"the JSON patch is malformed: {kind} operation needs a value")
            if kind == "add":
                doc = _add(doc, parts, deepcopy(op["value"]))
            elif kind == "remove":
                _remove(doc, parts)
            elif kind == "replace":
                _walk(doc, parts)  # must exist
                if parts:
                    _remove(doc, parts)
                doc = _add(doc, parts, deepcopy(op["value"]))
            elif kind in ("move", "copy"):
                src = _ptr(op.get("from", ""))
                value = deepcopy(_walk(doc, src))
                if kind == "move":
                    _remove(doc, src)
                doc = _add(doc, parts, value)
            elif kind == "test":
                if _walk(doc, parts) != op["value"]:
                    raise _Unprocessable(f"testing value /{'/'.join(parts)} failed: test failed")
            else:
                raise bad_request(f'Unexpected kind: {kind}')
    except _Unprocessable as e:
        raise APIError(422, "Invalid", str(e)) from None
    return doc


# ---------------------------------------------------------------- strategic merge patch

_DELETE = object()


def _strip(v):
    """A patch value with its directives removed (used where the value is taken whole)."""
    if isinstance(v, dict):
        return {k: _strip(x) for k, x in v.items() if not k.startswith("$")}
    if isinstance(v, list):
        return [_strip(x) for x in v if not (isinstance(x, dict) and "$patch" in x and len(x) == 1)]
    return v


def strategic_merge(orig, patch, meta):
    if not isinstance(patch, dict):
        raise bad_request("strategic merge patch: the patch must be a JSON object")
    r = _smp_map(orig if isinstance(orig, dict) else {}, patch, meta)
    return {} if r is _DELETE else r


def _smp_map(orig, patch, meta):
    directive = patch.get("$patch")
    if directive == "replace":
        return _strip({k: v for k, v in patch.items() if k != "$patch"})
    if directive == "delete":
        return _DELETE
    if directive is not None:
        raise bad_request(f"Unknown patch type: {directive}")
    out = deepcopy(orig)
    for k, v in patch.items():
        if k.startswith("$"):
            continue
        m = _sub(meta, k)
        if v is None:
            out.pop(k, None)
        elif isinstance(v, dict):
            cur = out.get(k)
            r = _smp_map(cur if isinstance(cur, dict) else {}, v, m if isinstance(m, dict) else None)
            if r is _DELETE:
                out.pop(k, None)
            else:
                out[k] = r
        elif isinstance(v, list) and isinstance(m, ListMeta) and (m.keys or m.primitive):
            cur = out.get(k)
            out[k] = _smp_list(cur if isinstance(cur, list) else [], v, m, k)
        else:
            out[k] = _strip(v)
    for k, v in patch.items():
        if k.startswith("$deleteFromPrimitiveList/"):
            f = k.split("/", 1)[1]
            if isinstance(out.get(f), list):
                out[f] = [x for x in out[f] if x not in v]
    for k, v in patch.items():
        if k.startswith("$setElementOrder/"):
            f = k.split("/", 1)[1]
            if isinstance(out.get(f), list):
                out[f] = _reorder(out[f], v, _sub(meta, f))
    if "$retainKeys" in patch:
        keep = set(patch["$retainKeys"] or [])
        out = {k: v for k, v in out.items() if k in keep}
    return out


def _key_of(item, keys):
    return tuple(item.get(k) for k in keys) if isinstance(item, dict) else None


def _smp_list(orig, patch, m, field):
    if m.primitive:
        if any(isinstance(x, dict) and x.get("$patch") == "replace" for x in patch):
            return [x for x in patch if not isinstance(x, dict)]
        out = list(orig)
        for x in patch:
            if isinstance(x, dict):
                continue
            if x not in out:
                out.append(x)
        return out
    if any(isinstance(x, dict) and x.get("$patch") == "replace" for x in patch):
        return [_strip(x) for x in patch if not (isinstance(x, dict) and x.get("$patch") == "replace")]
    out = deepcopy(orig)
    for x in patch:
        if not isinstance(x, dict):
            raise bad_request(f"strategic merge patch: {field}: expected a list of objects")
        if any(k not in x for k in m.keys):
            raise bad_request(f"map: {dumps(x)} does not contain declared merge key: {m.keys[0]}")
        key = _key_of(x, m.keys)
        if x.get("$patch") == "delete":
            out = [y for y in out if _key_of(y, m.keys) != key]
            continue
        for i, y in enumerate(out):
            if _key_of(y, m.keys) == key:
                r = _smp_map(y, x, m.item)
                if r is _DELETE:
                    out.pop(i)
                else:
                    out[i] = r
                break
        else:
            r = _smp_map({}, x, m.item)
            if r is not _DELETE:
                out.append(r)
    return out


def _reorder(items, order, m):
    def key(x):
        if isinstance(m, ListMeta) and m.keys and isinstance(x, dict):
            return _key_of(x, m.keys)
        return dumps(x)
    wanted = [key(o) for o in order]
    ranked = {k: i for i, k in enumerate(wanted)}
    listed = sorted((x for x in items if key(x) in ranked), key=lambda x: ranked[key(x)])
    rest = [x for x in items if key(x) not in ranked]
    return listed + rest


# ---------------------------------------------------------------- field sets (managedFields)

def leaf_fields(obj, meta, prefix=()):
    """{path: value} for every leaf of obj. A path is a tuple of ("f", name), ("k", json of the
    key fields) or ("v", json of a set member); atomic lists and empty objects are leaves."""
    out = {}
    if not isinstance(obj, dict):
        return out
    for k, v in obj.items():
        p = prefix + (("f", k),)
        m = _sub(meta, k)
        if isinstance(v, dict) and v:
            out.update(leaf_fields(v, m if isinstance(m, dict) else None, p))
        elif isinstance(v, list) and isinstance(m, ListMeta) and m.keys and \
                all(isinstance(x, dict) and all(kk in x for kk in m.keys) for x in v):
            for x in v:
                kp = p + (("k", dumps({kk: x[kk] for kk in m.keys})),)
                sub = leaf_fields(x, m.item, kp)
                out.update(sub if sub else {kp: x})
        elif isinstance(v, list) and isinstance(m, ListMeta) and m.primitive:
            for x in v:
                out[p + (("v", dumps(x)),)] = x
        else:
            out[p] = v
    return out


def encode_fields(paths):
    """A set of paths as a FieldsV1 object."""
    root = {}
    for path in sorted(paths):
        node = root
        for kind, name in path:
            node = node.setdefault(f"{kind}:{name}", {})
    _mark_elements(root)
    return root


def _mark_elements(node):
    for k, v in node.items():
        if k.startswith("k:") and v:
            v.setdefault(".", {})
        _mark_elements(v)


def decode_fields(fv1, prefix=()):
    out = set()
    if not isinstance(fv1, dict):
        return out
    for k, v in fv1.items():
        if k == ".":
            continue
        kind, _, name = k.partition(":")
        p = prefix + ((kind, name),)
        if isinstance(v, dict) and any(x != "." for x in v):
            out |= decode_fields(v, p)
        else:
            out.add(p)
    return out


def remove_path(obj, path):
    """Remove the leaf at path (and the list element when it ends at a key)."""
    cur = obj
    for i, (kind, name) in enumerate(path):
        last = i == len(path) - 1
        if kind == "f":
            if not isinstance(cur, dict) or name not in cur:
                return
            if last:
                del cur[name]
                return
            cur = cur[name]
        elif kind == "k":
            if not isinstance(cur, list):
                return
            want = json.loads(name)
            idx = next((j for j, x in enumerate(cur) if isinstance(x, dict) and
                        all(x.get(kk) == vv for kk, vv in want.items())), None)
            if idx is None:
                return
            if last:
                cur.pop(idx)
                return
            cur = cur[idx]
        elif kind == "v":
            if isinstance(cur, list):
                v = json.loads(name)
                if v in cur:
                    cur.remove(v)
            return


def apply_merge(current, applied, meta):
    """The merge step of server-side apply: objects merge, keyed lists merge by key, sets
    union, everything else is replaced by the applied value."""
    if not isinstance(applied, dict) or not isinstance(current, dict):
        return deepcopy(applied)
    out = deepcopy(current)
    for k, v in applied.items():
        m = _sub(meta, k)
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = apply_merge(out[k], v, m if isinstance(m, dict) else None)
        elif isinstance(v, list) and isinstance(m, ListMeta) and isinstance(out.get(k), list) and \
                (m.keys or m.primitive):
            if m.primitive:
                out[k] = list(out[k]) + [x for x in v if x not in out[k]]
            else:
                merged = deepcopy(out[k])
                for x in v:
                    key = _key_of(x, m.keys)
                    for i, y in enumerate(merged):
                        if _key_of(y, m.keys) == key:
                            merged[i] = apply_merge(y, x, m.item)
                            break
                    else:
                        merged.append(deepcopy(x))
                out[k] = merged
        else:
            out[k] = deepcopy(v)
    return out
