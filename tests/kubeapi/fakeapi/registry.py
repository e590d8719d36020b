# SPDX-License-Identifier: MIT
"""Generic REST semantics over the store: what create, get, list, update, patch and delete do
to any kind, plus the asynchronous controllers a real control plane runs next to the API
server (garbage collector, namespace and CRD cleanup) and a stand-in kubelet."""
import base64
import datetime
import json
import re
import threading
import time
import uuid

from . import patch as P
from .kinds import BUILTINS, CRD_CLEANUP, CRDs, CustomResources, Namespaces, NewEvents, Pods, rand_suffix
from .selectors import FieldSelector, LabelSelector
from .schema import decode_error
from .storage import Store
from .util import (APIError, FieldError, already_exists, bad_request, conflict, deepcopy, expired,
                   fmt_time, forbidden, forbidden_field, internal_error, invalid_object,
                   method_not_allowed, not_found, not_supported, required, status_object,
                   too_large_rv, unsupported_media_type, utcnow)

APPLY = "application/apply-patch+yaml"
MERGE = "application/merge-patch+json"
JSONP = "application/json-patch+json"
SMP = "application/strategic-merge-patch+json"
SYSTEM_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")


class Ctx:
    """What a write request carries besides its body."""

    def __init__(self, user="system:admin", manager=None, validation="Warn", dry_run=False,
                 duplicates=(), force=False):
        self.user, self.manager, self.validation = user, manager, validation
        self.dry_run, self.duplicates, self.force = dry_run, list(duplicates), force
        self.warnings = []


class Registry:
    def __init__(self, store=None, pod_graceful=False, gc=True, rv_wait=3.0, clock=None, profiles=None):
        self.profiles = profiles
        self.store = store or Store()
        self.lock = self.store.lock
        self.pod_graceful = pod_graceful
        self.gc_enabled = gc
        self.rv_wait = rv_wait
        self.clock = clock or utcnow
        self.builtin = {(rt.group, rt.plural): rt for rt in BUILTINS}
        self.crs = {}                       # (group, plural) -> CustomResources
        self.auto_run = False               # stand-in kubelet starts pods bound to a node
        self.pod_logs = {}                  # (ns, pod, container) -> text
        self._wake = threading.Event()
        self._full_pass = True
        self._terminating = set()           # keys of namespaces and CRDs being deleted
        self._types_by_skey = {}
        self._stop = threading.Event()
        self._thread = None
        with self.lock:
            for ns in SYSTEM_NAMESPACES:
                self._create_system_namespace(ns)

    # ================================================================ catalog
    def resource(self, group, version, plural):
        rt = self.builtin.get((group, plural)) or self.crs.get((group, plural))
        if rt is None or version not in rt.versions:
            return None
        return rt

    def all_types(self):
        return list(self.builtin.values()) + list(self.crs.values())

    def group_versions(self):
        """{group: [versions, preferred first]} for discovery, core group excluded."""
        out = {}
        for rt in self.all_types():
            if rt.group == "":
                continue
            vs = out.setdefault(rt.group, [])
            for v in rt.versions:
                if v not in vs:
                    vs.append(v)
        for g, vs in out.items():
            vs.sort(key=_version_priority)
        return out

    def types_in(self, group, version):
        return [rt for rt in self.all_types() if rt.group == group and version in rt.versions]

    def _rebuild_crs(self):
        crs = {}
        for crd in self.store.list(CRDs().storage_key):
            try:
                rt = CustomResources(crd)
            except (KeyError, TypeError):
                continue
            if rt.storage_version:
                crs[(rt.group, rt.plural)] = rt
        self.crs = crs
        self._types_by_skey = {}

    # ================================================================ helpers
    def now(self):
        return self.clock()

    def _create_system_namespace(self, name):
        o = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
        self._stamp_new(Namespaces(), o)
        Namespaces().prepare_create(o)
        rv = self.store.next_rv()
        o["metadata"]["resourceVersion"] = str(rv)
        self.store.commit("ADDED", "/namespaces", "", name, o, rv)

    def _stamp_new(self, rt, o):
        md = o["metadata"]
        md["uid"] = str(uuid.uuid4())
        md["creationTimestamp"] = fmt_time(self.now())
        for k in ("deletionTimestamp", "deletionGracePeriodSeconds", "selfLink"):
            md.pop(k, None)
        if rt.generation:
            md["generation"] = 1
        else:
            md.pop("generation", None)

    def _check_namespace(self, rt, ns, name):
        if not rt.namespaced:
            return
        nso = self.store.get("/namespaces", "", ns)
        if nso is None:
            raise not_found("namespaces", "", ns)
        if nso["metadata"].get("deletionTimestamp"):
            raise forbidden(rt.plural, rt.group, name, f"unable to create new content in namespace {ns} because it is being terminated")

    def _check_body_type(self, rt, version, body, require=False):
        if not isinstance(body, dict):
            raise bad_request(f"{rt.kind} in version \"{version}\" cannot be handled as a {rt.kind}: "
                              "json: cannot unmarshal into Go value of type struct")
        av, kind = body.get("apiVersion"), body.get("kind")
        if require and not kind:
            raise bad_request(f"Object 'Kind' is missing in '{json.dumps(body, separators=(',', ':'))[:200]}'")
        if require and not av:
            raise bad_request(f"Object 'apiVersion' is missing in '{json.dumps(body, separators=(',', ':'))[:200]}'")
        want = rt.api_version(version)
        if av and av != want:
            raise bad_request(f"the API version in the data ({av}) does not match the expected API version ({want})")
        if kind and kind != rt.kind:
            raise bad_request(f'{rt.kind} in version "{version}" cannot be handled as a {rt.kind}: '
                              f'the kind in the data ({kind}) does not match the expected kind ({rt.kind})')

    def _decode(self, rt, version, body, ctx):
        o, unknown = rt.decode(body, version)
        msgs = [f'unknown field "{u}"' for u in unknown] + [f'duplicate field "{d}"' for d in ctx.duplicates]
        if msgs and ctx.validation == "Strict":
            raise decode_error(rt.kind, version, "strict decoding error: " + ", ".join(msgs))
        if msgs and ctx.validation == "Warn":
            ctx.warnings += msgs
        o.setdefault("metadata", {})
        return o

    def _invalid(self, rt, name, errs):
        return invalid_object(rt.qualified_kind(), rt.group, name, errs)

    def _key(self, rt, ns):
        return ns if rt.namespaced else ""

    # ================================================================ managed fields
    @staticmethod
    def _tracked(o, status_only=None):
        """The part of an object field ownership covers."""
        t = {k: v for k, v in o.items() if k not in ("apiVersion", "kind", "metadata")}
        md = o.get("metadata") or {}
        tm = {k: md[k] for k in ("labels", "annotations", "finalizers", "ownerReferences") if md.get(k)}
        if tm:
            t["metadata"] = tm
        return t

    def _entries(self, o):
        out = []
        for e in (o.get("metadata") or {}).get("managedFields") or []:
            out.append([e, P.decode_fields(e.get("fieldsV1"))])
        return out

    def _store_entries(self, o, entries):
        kept = []
        for e, fs in entries:
            if not fs:
                continue
            e = dict(e)
            e["fieldsType"] = "FieldsV1"
            e["fieldsV1"] = P.encode_fields(fs)
            kept.append(e)
        if kept:
            o["metadata"]["managedFields"] = kept
        else:
            o["metadata"].pop("managedFields", None)

    def _track_update(self, rt, version, old, new, manager, subresource):
        if not manager:
            return
        meta = rt.apply_meta
        of = P.leaf_fields(self._tracked(old), meta) if old else {}
        nf = P.leaf_fields(self._tracked(new), meta)
        changed = {p for p, v in nf.items() if p not in of or of[p] != v}
        removed = set(of) - set(nf)
        entries = self._entries(old) if old else []
        for ent in entries:
            ent[1] = ent[1] - changed - removed
        if changed:
            sub = subresource if subresource in ("status",) else None
            for ent in entries:
                e = ent[0]
                if e.get("manager") == manager and e.get("operation") == "Update" and \
                        e.get("apiVersion") == rt.api_version(version) and e.get("subresource") == sub:
                    ent[1] = ent[1] | changed
                    ent[0] = dict(e, time=fmt_time(self.now()))
                    break
            else:
                e = {"manager": manager, "operation": "Update", "apiVersion": rt.api_version(version),
                     "time": fmt_time(self.now())}
                if sub:
                    e["subresource"] = sub
                entries.append([e, changed])
        self._store_entries(new, entries)

    # ================================================================ reads
    def get(self, rt, version, ns, name, rv=""):
        self._wait_rv(rv)
        o = self.store.get(rt.storage_key, self._key(rt, ns), name)
        if o is None:
            raise not_found(rt.plural, rt.group, name)
        return rt.view(o, version)

    def _wait_rv(self, rv):
        if rv in (None, "", "0"):
            return
        r = parse_rv(rv)
        with self.store.changed:
            deadline = time.monotonic() + self.rv_wait
            while self.store.rv < r:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise too_large_rv(r, self.store.rv)
                self.store.changed.wait(left)

    def selectors(self, rt, label_selector, field_selector):
        ls = LabelSelector(label_selector)
        fs = FieldSelector(field_selector)
        ok = set(rt.supported_field_labels())
        if isinstance(rt, NewEvents):     # events.k8s.io: regarding.* spellings too
            ok |= {"regarding.kind", "regarding.namespace", "regarding.name", "regarding.uid", "reportingController"}
        for f in fs.fields():
            if f not in ok:
                raise bad_request(f"field label not supported: {f}")
        return ls, fs

    def matches(self, rt, o, ls, fs):
        if not ls.empty() and not ls.matches((o.get("metadata") or {}).get("labels")):
            return False
        if not fs.empty() and not fs.matches(rt.field_values(o)):
            return False
        return True

    def _admit_runtime_class(self, rt, o, name):
        """The RuntimeClass admission plugin: a pod naming a RuntimeClass that does not exist is
        refused (403), as the real API server does."""
        rc = isinstance(rt, Pods) and (o.get("spec") or {}).get("runtimeClassName")
        if rc and self.store.get(self.builtin[("node.k8s.io", "runtimeclasses")].storage_key, "", rc) is None:
            raise forbidden("pods", "", name, f'pod rejected: RuntimeClass "{rc}" not found')

    def list(self, rt, version, ns, label_selector="", field_selector="", limit=0, cont="", rv="",
             rv_match=""):
        """Returns (items in version form, list resourceVersion, continue token, remaining)."""
        ls, fs = self.selectors(rt, label_selector, field_selector)
        nsk = self._key(rt, ns) if (rt.namespaced and ns) else None
        if rv_match not in ("", "Exact", "NotOlderThan"):
            raise invalid_list_options(not_supported("resourceVersionMatch", rv_match, ["Exact", "NotOlderThan"]))
        if rv_match and rv in ("", None):
            raise invalid_list_options(forbidden_field(
                "resourceVersionMatch", "resourceVersionMatch is forbidden unless resourceVersion is provided"))
        if rv_match and cont:
            raise invalid_list_options(forbidden_field(
                "resourceVersionMatch", "resourceVersionMatch is forbidden when continue is provided"))
        if rv_match == "Exact" and rv == "0":
            raise invalid_list_options(forbidden_field(
                "resourceVersionMatch", 'resourceVersionMatch "exact" is forbidden for resourceVersion "0"'))
        start_after = None
        if cont:
            if rv not in ("", "0", None):
                raise bad_request("specifying resource version is not allowed when using continue")
            snap_rv, start_after = _decode_continue(cont)
            with self.lock:
                if snap_rv >= 0 and snap_rv < self.store.compacted:
                    token = _encode_continue(-1, start_after)
                    e = expired("The provided continue parameter is too old to display a consistent list "
                                "result. You can start a new list without the continue parameter, or use "
                                "the continue token in this response to retrieve the remainder of the "
                                "results. Continuing with the provided token results in an inconsistent "
                                "list - objects that were created, modified, or deleted between the time "
                                "the first chunk was returned and now may show up in the list.")
                    e.list_meta = {"continue": token}
                    raise e
                if snap_rv < 0:
                    snap_rv = self.store.rv
                    items = self.store.list(rt.storage_key, nsk)
                else:
                    items = self.store.snapshot(rt.storage_key, nsk, snap_rv)
        elif rv_match == "Exact" or (rv not in ("", "0", None) and limit and not rv_match):
            r = parse_rv(rv)
            self._wait_rv(rv)
            with self.lock:
                if r < self.store.compacted:
                    raise expired("The resourceVersion for the provided list is too old.")
                items = self.store.snapshot(rt.storage_key, nsk, r)
                snap_rv = r
        else:
            self._wait_rv(rv)
            with self.lock:
                items = self.store.list(rt.storage_key, nsk)
                snap_rv = self.store.rv
            if rv == "0":
                limit = 0          # served from the watch cache: the limit may be ignored
        if start_after is not None:
            items = [o for o in items if _obj_key(o) > start_after]
        items = [o for o in items if self.matches(rt, o, ls, fs)]
        token, remaining = "", None
        if limit and len(items) > limit:
            rest = len(items) - limit
            items = items[:limit]
            token = _encode_continue(snap_rv, _obj_key(items[-1]))
            if ls.empty() and fs.empty():
                remaining = rest
        return [rt.view(o, version) for o in items], str(snap_rv), token, remaining

    # ================================================================ create
    def create(self, rt, version, ns, body, ctx):
        self._check_body_type(rt, version, body, require=isinstance(rt, CustomResources))
        if isinstance(rt, CustomResources) and rt.terminating:
            raise method_not_allowed("create not allowed while custom resource definition is terminating")
        o = self._decode(rt, version, body, ctx)
        with self.lock:
            return 201, self._create_locked(rt, version, ns, o, ctx)

    def _create_locked(self, rt, version, ns, o, ctx, apply_fields=None):
        md = o["metadata"]
        if rt.namespaced:
            if md.get("namespace") and md["namespace"] != ns:
                raise bad_request("the namespace of the provided object does not match the namespace sent on the request")
            md["namespace"] = ns
        else:
            md.pop("namespace", None)
        if md.get("resourceVersion"):
            raise internal_error("resourceVersion should not be set on objects to be created")
        if not md.get("name"):
            if md.get("generateName"):
                for _ in range(8):
                    md["name"] = md["generateName"] + rand_suffix()
                    if self.store.get(rt.storage_key, self._key(rt, ns), md["name"]) is None:
                        break
            else:
                raise self._invalid(rt, "", [required("metadata.name", "name or generateName is required")])
        name = md["name"]
        self._check_namespace(rt, ns, name)
        o = rt.to_storage(o, version)
        o = rt.defaults(o)
        self._stamp_new(rt, o)
        md = o["metadata"]
        md.pop("managedFields", None)
        rt.prepare_create(o)
        errs = rt.validate(o)
        if errs:
            raise self._invalid(rt, name, errs)
        self._admit_runtime_class(rt, o, name)
        if self.store.get(rt.storage_key, self._key(rt, ns), name) is not None:
            raise already_exists(rt.plural, rt.group, name)
        if apply_fields is not None:
            e = {"manager": ctx.manager, "operation": "Apply", "apiVersion": rt.api_version(version),
                 "time": fmt_time(self.now())}
            self._store_entries(o, [[e, apply_fields]])
        else:
            self._track_update(rt, version, None, o, ctx.manager, None)
        if ctx.dry_run:
            return rt.view(o, version)
        rv = self.store.next_rv()
        md["resourceVersion"] = str(rv)
        self.store.commit("ADDED", rt.storage_key, self._key(rt, ns), name, o, rv)
        self._after_write(rt, o)
        return rt.view(o, version)

    # ================================================================ update
    def update(self, rt, version, ns, name, body, ctx, subresource=None):
        self._check_body_type(rt, version, body, require=isinstance(rt, CustomResources))
        o = self._decode(rt, version, body, ctx)
        md = o["metadata"]
        if md.get("name") and md["name"] != name:
            raise bad_request(f"the name of the object ({md['name']}) does not match the name on the URL ({name})")
        if rt.namespaced and md.get("namespace") and md["namespace"] != ns:
            raise bad_request("the namespace of the provided object does not match the namespace sent on the request")
        with self.lock:
            old = self.store.get(rt.storage_key, self._key(rt, ns), name)
            if old is None:
                raise not_found(rt.plural, rt.group, name)
            return 200, self._update_locked(rt, version, ns, name, o, old, ctx, subresource, require_rv=True)

    def _prepare(self, rt, o, old, subresource):
        if subresource == "status":
            return rt.prepare_status(o, old)
        if subresource == "ephemeralcontainers":
            return rt.prepare_ephemeral(o, old)
        if subresource == "finalize":
            return rt.prepare_finalize(o, old)
        rt.prepare_update(o, old)
        return o

    def _update_locked(self, rt, version, ns, name, o, old, ctx, subresource, require_rv,
                       apply_entries=None):
        md = o["metadata"]
        md["name"] = name
        if rt.namespaced:
            md["namespace"] = ns
        want_rv = md.get("resourceVersion")
        want_uid = md.get("uid")
        if want_uid and want_uid != old["metadata"].get("uid"):
            raise conflict(rt.plural, rt.group, name, f"Precondition failed: UID in precondition: {want_uid}, "
                           f"UID in object meta: {old['metadata'].get('uid')}")
        o = rt.to_storage(o, version)
        o = rt.defaults(o)
        new = self._prepare(rt, o, old, subresource)
        nmd, omd = new["metadata"], old["metadata"]
        if want_rv:
            if want_rv != omd.get("resourceVersion"):
                raise conflict(rt.plural, rt.group, name)
        elif require_rv and not rt.allow_unconditional_update:
            raise self._invalid(rt, name, [FieldError("Invalid", "metadata.resourceVersion", "0x0",
                                                      "must be specified for an update")])
        for k in ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds",
                  "generation", "name", "namespace", "managedFields"):
            if k in omd:
                nmd[k] = deepcopy(omd[k])
            else:
                nmd.pop(k, None)
        nmd.pop("selfLink", None)
        if "generateName" in omd:
            nmd["generateName"] = omd["generateName"]
        else:
            nmd.pop("generateName", None)
        if omd.get("deletionTimestamp"):
            added = [f for f in nmd.get("finalizers") or [] if f not in (omd.get("finalizers") or [])]
            if added:
                raise self._invalid(rt, name, [forbidden_field(
                    "metadata.finalizers", "no new finalizers can be added if the object is being deleted, "
                    f"found new finalizers []string{{{', '.join(json.dumps(a) for a in added)}}}")])
        if rt.generation and rt.spec_changed(old, new):
            nmd["generation"] = int(omd.get("generation") or 0) + 1
        errs = rt.validate_update(new, old, subresource)
        if errs:
            raise self._invalid(rt, name, errs)
        if apply_entries is not None:
            self._store_entries(new, apply_entries)
        else:
            self._track_update(rt, version, old, new, ctx.manager, subresource)
        nmd["resourceVersion"] = omd["resourceVersion"]
        if _same(new, old):
            return rt.view(old, version)
        if ctx.dry_run:
            return rt.view(new, version)
        if nmd.get("deletionTimestamp") and not nmd.get("finalizers") and not self._pod_waits(rt, new) \
                and not (isinstance(rt, Namespaces) and (new.get("spec") or {}).get("finalizers")):
            return rt.view(self._remove(rt, new), version)
        rv = self.store.next_rv()
        nmd["resourceVersion"] = str(rv)
        self.store.commit("MODIFIED", rt.storage_key, self._key(rt, ns), name, new, rv)
        self._after_write(rt, new)
        return rt.view(new, version)

    def _pod_waits(self, rt, o):
        """A pod being deleted gracefully stays until the kubelet confirms (grace period 0)."""
        return isinstance(rt, Pods) and int(o["metadata"].get("deletionGracePeriodSeconds") or 0) > 0

    # ================================================================ patch
    def patch(self, rt, version, ns, name, ptype, raw, ctx, subresource=None, parsed=None):
        with self.lock:
            old = self.store.get(rt.storage_key, self._key(rt, ns), name)
            if ptype == APPLY:
                return self._apply_locked(rt, version, ns, name, parsed, old, ctx, subresource)
            if old is None:
                raise not_found(rt.plural, rt.group, name)
            cur = rt.from_storage(old, version)
            if ptype == MERGE:
                if not isinstance(parsed, dict):
                    raise bad_request("error decoding patch: a merge patch must be a JSON object")
                patched = P.merge_patch(cur, parsed)
            elif ptype == JSONP:
                patched = P.json_patch(cur, parsed)
            elif ptype == SMP:
                if rt.smp is None:
                    raise unsupported_media_type(ptype, [JSONP, MERGE, APPLY])
                patched = P.strategic_merge(cur, parsed, rt.smp)
            else:
                raise unsupported_media_type(ptype, [JSONP, MERGE, APPLY] + ([SMP] if rt.smp else []))
            self._check_body_type(rt, version, patched)
            patched.setdefault("apiVersion", rt.api_version(version))
            patched.setdefault("kind", rt.kind)
            o = self._decode(rt, version, patched, ctx)
            if o["metadata"].get("name", name) != name:
                raise bad_request(f"the name of the object ({o['metadata']['name']}) does not match the name on the URL ({name})")
            return 200, self._update_locked(rt, version, ns, name, o, old, ctx, subresource, require_rv=False)

    def _apply_locked(self, rt, version, ns, name, applied, old, ctx, subresource):
        if not ctx.manager:
            raise bad_request("fieldManager is required for apply requests")
        if not isinstance(applied, dict):
            raise bad_request("error decoding YAML: the applied configuration must be an object")
        self._check_body_type(rt, version, applied, require=True)
        amd = applied.get("metadata") or {}
        if amd.get("name") and amd["name"] != name:
            raise bad_request(f"the name of the object ({amd['name']}) does not match the name on the URL ({name})")
        o = self._decode(rt, version, deepcopy(applied), ctx)
        o["metadata"]["name"] = name
        meta = rt.apply_meta
        tracked = self._tracked(o)
        if subresource == "status":
            tracked = {"status": tracked.get("status", {})} if "status" in tracked else {}
        elif rt.status_subresource:
            tracked.pop("status", None)
        afields = P.leaf_fields(tracked, meta)
        aset = set(afields)
        if old is None:
            if subresource:
                raise not_found(rt.plural, rt.group, name)
            return 201, self._create_locked(rt, version, ns, o, ctx, apply_fields=aset)
        cur = rt.from_storage(old, version)
        curf = P.leaf_fields(self._tracked(cur), meta)
        entries = self._entries(old)
        sub = "status" if subresource == "status" else None
        conflicts = []
        for e, fs in entries:
            if e.get("manager") == ctx.manager and e.get("operation") == "Apply" and e.get("subresource") == sub:
                continue
            for p in fs & aset:
                if p in curf and curf[p] != afields[p]:
                    conflicts.append((e, p))
        if conflicts and not ctx.force:
            causes = [{"reason": "FieldManagerConflict",
                       "message": f'conflict with "{e.get("manager")}" using {e.get("apiVersion")}',
                       "field": _path_str(p)} for e, p in conflicts]
            msg = f"Apply failed with {len(conflicts)} conflict{'s' if len(conflicts) > 1 else ''}: " + \
                "; ".join(f"{c['message']}: {c['field']}" for c in causes)
            raise APIError(409, "Conflict", msg, {"name": name, "group": rt.group, "kind": rt.plural,
                                                  "causes": causes})
        if ctx.force:
            for e in entries:
                e[1] = e[1] - {p for _, p in conflicts}
        mine = next((x for x in entries if x[0].get("manager") == ctx.manager and
                     x[0].get("operation") == "Apply" and x[0].get("subresource") == sub), None)
        previously = mine[1] if mine else set()
        others = set().union(*[fs for e, fs in entries if e is not (mine[0] if mine else None)]) \
            if entries else set()
        merged = P.apply_merge(cur, {k: v for k, v in o.items() if k != "metadata"}, meta)
        mmd = merged.setdefault("metadata", {})
        for k in ("labels", "annotations"):
            if k in o["metadata"]:
                mmd[k] = dict(mmd.get(k) or {}, **o["metadata"][k])
        for k in ("finalizers",):
            if k in o["metadata"]:
                mmd[k] = list(mmd.get(k) or []) + [x for x in o["metadata"][k] if x not in (mmd.get(k) or [])]
        if "ownerReferences" in o["metadata"]:
            mmd["ownerReferences"] = P.apply_merge({"r": mmd.get("ownerReferences") or []},
                                                   {"r": o["metadata"]["ownerReferences"]},
                                                   {"r": P.keyed("uid")})["r"]
        kept = aset | others
        for p in sorted(previously - kept, key=len):
            # a keyed list element nobody owns any part of any more goes as a whole
            cut = next((p[:i + 1] for i, (kind, _) in enumerate(p) if kind == "k" and
                        not any(q[:i + 1] == p[:i + 1] for q in kept)), p)
            P.remove_path(merged, cut)
        e = {"manager": ctx.manager, "operation": "Apply", "apiVersion": rt.api_version(version),
             "time": fmt_time(self.now())}
        if sub:
            e["subresource"] = sub
        if mine:
            mine[0], mine[1] = e, aset
        else:
            entries.append([e, aset])
        mmd.pop("resourceVersion", None)
        if amd.get("resourceVersion"):
            mmd["resourceVersion"] = amd["resourceVersion"]
        return 200, self._update_locked(rt, version, ns, name, merged, old, ctx, subresource,
                                        require_rv=False, apply_entries=entries)

    # ================================================================ delete
    def delete(self, rt, version, ns, name, opts, ctx):
        with self.lock:
            old = self.store.get(rt.storage_key, self._key(rt, ns), name)
            if old is None:
                raise not_found(rt.plural, rt.group, name)
            pre = opts.get("preconditions") or {}
            omd = old["metadata"]
            if pre.get("uid") and pre["uid"] != omd.get("uid"):
                raise conflict(rt.plural, rt.group, name, f"Precondition failed: UID in precondition: "
                               f"{pre['uid']}, UID in object meta: {omd.get('uid')}")
            if pre.get("resourceVersion") and pre["resourceVersion"] != omd.get("resourceVersion"):
                raise conflict(rt.plural, rt.group, name, f"Precondition failed: ResourceVersion in "
                               f"precondition: {pre['resourceVersion']}, ResourceVersion in object meta: "
                               f"{omd.get('resourceVersion')}")
            policy = opts.get("propagationPolicy")
            if policy is None and opts.get("orphanDependents") is not None:
                policy = "Orphan" if opts["orphanDependents"] else "Background"
            if policy not in (None, "Orphan", "Background", "Foreground"):
                raise self._invalid(rt, name, [not_supported("propagationPolicy", policy,
                                                             ["Foreground", "Background", "Orphan"])])
            result, deleted = self._delete_obj(rt, old, policy or "Background", opts.get("gracePeriodSeconds"),
                                               ctx.dry_run)
            code = 200
            if not deleted and opts.get("orphanDependents") is False:
                code = 202
            if deleted and not rt.return_deleted_object:
                st = status_object(200, "", "")
                st.update({"status": "Success", "details": {"name": name, "group": rt.group,
                                                            "kind": rt.plural, "uid": omd.get("uid")}})
                for k in ("message", "reason", "code"):
                    st.pop(k, None)
                if not rt.group:
                    del st["details"]["group"]
                return code, st
            return code, rt.from_storage(result, version)

    def _delete_obj(self, rt, old, policy, grace, dry_run=False):
        """Delete now, or mark as being deleted when finalizers (or a kubelet) must act first.
        Returns (object, deleted now)."""
        new = deepcopy(old)
        md = new["metadata"]
        fins = list(md.get("finalizers") or [])
        if policy == "Orphan" and "orphan" not in fins:
            fins = [f for f in fins if f != "foregroundDeletion"] + ["orphan"]
        if policy == "Foreground" and "foregroundDeletion" not in fins:
            fins = [f for f in fins if f != "orphan"] + ["foregroundDeletion"]
        graceful_pod = False
        if isinstance(rt, Pods) and self.pod_graceful and (new.get("spec") or {}).get("nodeName") \
                and (new.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
            g = int(grace) if grace is not None else int((new.get("spec") or {}).get("terminationGracePeriodSeconds", 30))
            cur = md.get("deletionGracePeriodSeconds")
            if g > 0 and (cur is None or g < int(cur)):
                md["deletionGracePeriodSeconds"] = g
                md["deletionTimestamp"] = fmt_time(self.now() + datetime.timedelta(seconds=g))
                graceful_pod = True
            elif g == 0:
                md["deletionGracePeriodSeconds"] = 0
            graceful_pod = graceful_pod or int(md.get("deletionGracePeriodSeconds") or 0) > 0
        ns_fins = isinstance(rt, Namespaces) and (new.get("spec") or {}).get("finalizers")
        if fins or graceful_pod or ns_fins:
            if not md.get("deletionTimestamp"):
                md["deletionTimestamp"] = fmt_time(self.now())
                md["deletionGracePeriodSeconds"] = md.get("deletionGracePeriodSeconds", 0) if graceful_pod else 0
                if rt.generation and int(md.get("generation") or 0) > 0:
                    md["generation"] = int(md["generation"]) + 1
            if fins:
                md["finalizers"] = fins
            if isinstance(rt, Namespaces):
                new.setdefault("status", {})["phase"] = "Terminating"
            if _same(new, old) or dry_run:
                return new, False
            rv = self.store.next_rv()
            md["resourceVersion"] = str(rv)
            self.store.commit("MODIFIED", rt.storage_key, self._key(rt, md.get("namespace", "")), md["name"], new, rv)
            self._after_write(rt, new)
            return new, False
        if dry_run:
            return new, True
        return self._remove(rt, new), True

    def _remove(self, rt, o):
        rv = self.store.next_rv()
        gone = deepcopy(o)
        gone["metadata"]["resourceVersion"] = str(rv)
        self.store.commit("DELETED", rt.storage_key, self._key(rt, gone["metadata"].get("namespace", "")),
                          gone["metadata"]["name"], gone, rv)
        self._after_write(rt, gone, deleted=True)
        return gone

    def delete_collection(self, rt, version, ns, label_selector, field_selector, opts, ctx):
        items, _, _, _ = self.list(rt, version, ns, label_selector, field_selector)
        with self.lock:
            for o in items:
                cur = self.store.get(rt.storage_key, self._key(rt, ns), o["metadata"]["name"])
                if cur is not None:
                    self._delete_obj(rt, cur, opts.get("propagationPolicy") or "Background",
                                     opts.get("gracePeriodSeconds"), ctx.dry_run)
            return 200, {"kind": rt.list_kind, "apiVersion": rt.api_version(version),
                         "metadata": {"resourceVersion": str(self.store.rv)}, "items": items}

    # ================================================================ after writes, controllers
    def _after_write(self, rt, o, deleted=False):
        if isinstance(rt, CRDs):
            self._rebuild_crs()
            self._full_pass = True      # owners of a kind served now or no longer
        self._wake.set()

    def start(self):
        run = self._run if self.profiles is None else lambda: self.profiles.run(self._run)
        self._thread = threading.Thread(target=run, name="controllers", daemon=True)
        self._thread.start()

    def stop(self):
        self._stop.set()
        self._wake.set()

    def request_full_pass(self):
        """Make the controllers look at every object once more (a setting they depend on changed)."""
        self._full_pass = True
        self._wake.set()

    def _run(self):
        while not self._stop.is_set():
            self._wake.wait(0.5)
            self._wake.clear()
            time.sleep(0.02)       # let a burst of writes land first, as real controllers lag
            try:
                for _ in range(1000):
                    with self.lock:
                        if not self._controller_pass():
                            break
            except Exception as e:          # a bug here must not kill the double silently
                import traceback
                traceback.print_exc()
                print(f"fakeapi: controller error: {e}", flush=True)

    def _type_for_skey(self, skey):
        rt = self._types_by_skey.get(skey)
        if rt is None:
            for t in self.all_types():
                if t.storage_key == skey and t.group == (skey.split("/")[0]):
                    rt = self._types_by_skey[skey] = t
                    break
        return rt

    def _controller_pass(self):
        """One round of the namespace, CRD-cleanup and garbage-collection controllers and the
        stand-in kubelet over what changed since the last round (as the real controllers work
        from their informers' events): the objects written, the owners of those, the dependents
        of those deleted, and the namespaces and CRDs being deleted. Returns True if it changed
        anything (what it changed is looked at in the next round)."""
        st = self.store
        dirty = st.take_dirty()
        if self._full_pass:
            self._full_pass = False
            keys = set(st.objects)
        else:
            keys = set()
            for key, uid in dirty.items():
                o = st.objects.get(key)
                if o is None:
                    if uid:
                        keys.update(st.dependents(uid))
                    continue
                keys.add(key)
                for r in o["metadata"].get("ownerReferences") or []:
                    k = st.by_uid.get(r.get("uid")) if isinstance(r, dict) else None
                    if k is not None:
                        keys.add(k)
                if (uid and o["metadata"].get("uid") != uid):
                    keys.update(st.dependents(uid))
            keys |= self._terminating
        changed = False
        for key in sorted(keys, key=lambda k: (k[0], k[1] or "", k[2])):
            o = st.objects.get(key)
            if o is None:
                self._terminating.discard(key)
                continue
            skey, md = key[0], o["metadata"]
            if skey == "/namespaces" and md.get("deletionTimestamp"):
                self._terminating.add(key)
                changed |= bool(self._finish_namespace(o))
                continue
            if skey == CRDs().storage_key and md.get("deletionTimestamp") and CRD_CLEANUP in (md.get("finalizers") or []):
                self._terminating.add(key)
                changed |= bool(self._finish_crd(o))
                continue
            if self.gc_enabled and self._gc_object(skey, o):
                changed = True
                continue
            if self.auto_run and skey == "/pods" and (o.get("spec") or {}).get("nodeName") and \
                    (o.get("status") or {}).get("phase") == "Pending" and not md.get("deletionTimestamp"):
                self.kubelet_run(key[1], key[2])
                changed = True
        return changed or bool(st.dirty)

    def _finish_namespace(self, nso):
        name = nso["metadata"]["name"]
        keys = self.store.namespace_keys(name)
        changed = False
        for skey, ns, oname in keys:
            o = self.store.objects.get((skey, ns, oname))
            rt = self._type_for_skey(skey)
            if o is None or rt is None or o["metadata"].get("deletionTimestamp"):
                continue
            self._delete_obj(rt, o, "Background", None)
            changed = True
        if changed or keys:
            return changed
        if (nso.get("spec") or {}).get("finalizers"):
            new = deepcopy(nso)
            new["spec"]["finalizers"] = []
            rv = self.store.next_rv()
            new["metadata"]["resourceVersion"] = str(rv)
            self.store.commit("MODIFIED", "/namespaces", "", name, new, rv)
            nso = new
        if not nso["metadata"].get("finalizers"):
            self._remove(Namespaces(), nso)
        return True

    def _finish_crd(self, crd):
        rt = self.crs.get((crd["spec"]["group"], crd["spec"]["names"]["plural"]))
        if rt is not None:
            rt.terminating = True
            left = self.store.list(rt.storage_key)
            changed = False
            for o in left:
                if not o["metadata"].get("deletionTimestamp"):
                    self._delete_obj(rt, o, "Background", None)
                    changed = True
            if left:
                return changed
        new = deepcopy(crd)
        new["metadata"]["finalizers"] = [f for f in new["metadata"]["finalizers"] if f != CRD_CLEANUP]
        if new["metadata"]["finalizers"]:
            rv = self.store.next_rv()
            new["metadata"]["resourceVersion"] = str(rv)
            self.store.commit("MODIFIED", CRDs().storage_key, "", new["metadata"]["name"], new, rv)
        else:
            self._remove(CRDs(), new)
        self._rebuild_crs()
        return True

    def _dependents(self, uid):
        out = []
        for key in sorted(self.store.dependents(uid)):
            o = self.store.objects.get(key)
            if o is not None:
                out.append((key, o))
        return out

    def _owner_present(self, ref, dep_ns):
        group = (ref.get("apiVersion") or "").rpartition("/")[0]
        if not any(t.group == group and t.kind == ref.get("kind") for t in self.all_types()):
            return True     # a kind this server does not serve (a StatefulSet, a Job): leave it be
        key = self.store.by_uid.get(ref.get("uid"))
        if key is None:
            return False
        if key[1] and key[1] != dep_ns:
            return False
        return key[2] == ref.get("name")

    def _gc_object(self, skey, o):
        md = o["metadata"]
        rt = self._type_for_skey(skey)
        if rt is None:
            return False
        fins = md.get("finalizers") or []
        if md.get("deletionTimestamp") and "orphan" in fins:
            for (dskey, dns, dname), d in self._dependents(md["uid"]):
                drt = self._type_for_skey(dskey)
                nd = deepcopy(d)
                nd["metadata"]["ownerReferences"] = [r for r in nd["metadata"]["ownerReferences"] if r.get("uid") != md["uid"]]
                if not nd["metadata"]["ownerReferences"]:
                    del nd["metadata"]["ownerReferences"]
                self._system_update(drt, nd)
            self._drop_finalizer(rt, o, "orphan")
            return True
        if md.get("deletionTimestamp") and "foregroundDeletion" in fins:
            deps = self._dependents(md["uid"])
            changed = False
            for (dskey, dns, dname), d in deps:
                if not d["metadata"].get("deletionTimestamp"):
                    self._delete_obj(self._type_for_skey(dskey), d, "Background", None)
                    changed = True
            blocking = [d for _, d in self._dependents(md["uid"]) if any(
                r.get("uid") == md["uid"] and r.get("blockOwnerDeletion") for r in d["metadata"].get("ownerReferences") or [])]
            if not blocking:
                self._drop_finalizer(rt, o, "foregroundDeletion")
                return True
            return changed
        refs = md.get("ownerReferences") or []
        if refs and not md.get("deletionTimestamp"):
            present = [r for r in refs if self._owner_present(r, md.get("namespace", ""))]
            if not present:
                self._delete_obj(rt, o, "Background", None)
                return True
            if len(present) != len(refs):
                nd = deepcopy(o)
                nd["metadata"]["ownerReferences"] = present
                self._system_update(rt, nd)
                return True
        return False

    def _drop_finalizer(self, rt, o, fin):
        nd = deepcopy(o)
        nd["metadata"]["finalizers"] = [f for f in nd["metadata"].get("finalizers") or [] if f != fin]
        if not nd["metadata"]["finalizers"]:
            del nd["metadata"]["finalizers"]
        self._system_update(rt, nd)

    def _system_update(self, rt, new):
        """A write by the control plane itself: no validation, no managed fields."""
        md = new["metadata"]
        if md.get("deletionTimestamp") and not md.get("finalizers") and not self._pod_waits(rt, new) \
                and not (isinstance(rt, Namespaces) and (new.get("spec") or {}).get("finalizers")):
            return self._remove(rt, new)
        rv = self.store.next_rv()
        md["resourceVersion"] = str(rv)
        self.store.commit("MODIFIED", rt.storage_key, self._key(rt, md.get("namespace", "")), md["name"], new, rv)
        self._after_write(rt, new)
        return new

    # ================================================================ pods/binding
    def bind_pod(self, rt, ns, name, binding):
        """POST pods/NAME/binding (a Binding: target.kind Node, target.name): what the scheduler
        does. Sets spec.nodeName of a pod that has none, and the PodScheduled condition."""
        target = (binding or {}).get("target") or {}
        node = target.get("name")
        if not node or target.get("kind", "Node") != "Node":
            raise bad_request("binding: target.name (a Node) is required")
        with self.lock:
            pod = self._pod(ns, name)
            uid = ((binding.get("metadata") or {}).get("uid"))
            if uid and uid != pod["metadata"].get("uid"):
                raise conflict("pods", "", name, f"Precondition failed: UID in precondition: {uid}, "
                               f"UID in object meta: {pod['metadata'].get('uid')}")
            if pod["spec"].get("nodeName"):
                raise conflict("pods/binding", "", name,
                               f'pod {name} is already assigned to node "{pod["spec"]["nodeName"]}"')
            if pod["metadata"].get("deletionTimestamp"):
                raise conflict("pods/binding", "", name, f"pod {name} is being deleted, cannot be assigned to a host")
            pod["spec"]["nodeName"] = node
            st = pod.setdefault("status", {})
            conds = [c for c in st.get("conditions") or [] if c.get("type") != "PodScheduled"]
            conds.append({"type": "PodScheduled", "status": "True", "lastProbeTime": None,
                          "lastTransitionTime": fmt_time(self.now())})
            st["conditions"] = conds
            self._system_update(rt, pod)
        return 201, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}

    # ================================================================ stand-in kubelet
    def _pod(self, ns, name):
        o = self.store.get("/pods", ns, name)
        if o is None:
            raise not_found("pods", "", name)
        return deepcopy(o)

    def kubelet_status(self, ns, name, status_patch):
        """Strategic-merge a PodStatus fragment into the pod's status, as the kubelet's
        status manager does."""
        with self.lock:
            pod = self._pod(ns, name)
            cur = pod.get("status") or {}
            pod["status"] = P.strategic_merge(cur, status_patch, Pods.smp["status"])
            rt = self.builtin[("", "pods")]
            o, _ = rt.decode(pod, "v1")
            o["metadata"] = pod["metadata"]
            return self._system_update(rt, o)

    def kubelet_run(self, ns, name, pod_ip=None, host_ip="10.0.0.1"):
        with self.lock:
            pod = self._pod(ns, name)
            now = fmt_time(self.now())
            spec = pod.get("spec") or {}
            h = abs(hash((ns, name))) % 250 + 2
            statuses = [{"name": c["name"], "ready": True, "restartCount": 0, "started": True,
                         "image": c.get("image", ""), "imageID": "", "containerID": f"containerd://{uuid.uuid4().hex}",
                         "state": {"running": {"startedAt": now}}} for c in spec.get("containers") or []]
            conds = [{"type": t, "status": "True", "lastProbeTime": None, "lastTransitionTime": now}
                     for t in ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled")]
            st = {"phase": "Running", "conditions": conds, "hostIP": host_ip, "hostIPs": [{"ip": host_ip}],
                  "podIP": pod_ip or f"10.244.0.{h}", "podIPs": [{"ip": pod_ip or f"10.244.0.{h}"}],
                  "startTime": now, "containerStatuses": statuses}
            st["qosClass"] = (pod.get("status") or {}).get("qosClass", "BestEffort")
            pod["status"] = st
            return self._system_update(self.builtin[("", "pods")], pod)

    def kubelet_terminate(self, ns, name, container=None, exit_code=0, reason=None, message="",
                          ephemeral=False, signal=None):
        """A container ends: state.terminated with the termination message. When every
        regular container has ended and the pod does not restart, the phase follows."""
        with self.lock:
            pod = self._pod(ns, name)
            spec, st = pod.get("spec") or {}, pod.setdefault("status", {})
            now = fmt_time(self.now())
            field = "ephemeralContainerStatuses" if ephemeral else "containerStatuses"
            decl = spec.get("ephemeralContainers" if ephemeral else "containers") or []
            names = [c["name"] for c in decl]
            if container is None:
                container = names[0] if names else None
            if container not in names:
                raise not_found("containers", "", container or "")
            statuses = st.setdefault(field, [])
            cs = next((c for c in statuses if c.get("name") == container), None)
            if cs is None:
                image = next((c.get("image", "") for c in decl if c["name"] == container), "")
                cs = {"name": container, "image": image, "imageID": "", "restartCount": 0}
                statuses.append(cs)
            started = ((cs.get("state") or {}).get("running") or {}).get("startedAt", now)
            term = {"exitCode": int(exit_code), "reason": reason or ("Completed" if int(exit_code) == 0 else "Error"),
                    "startedAt": started, "finishedAt": now,
                    "containerID": cs.get("containerID") or f"containerd://{uuid.uuid4().hex}"}
            if message:
                term["message"] = message
            if signal is not None:
                term["signal"] = int(signal)
            cs.update({"state": {"terminated": term}, "ready": False, "started": False,
                       "containerID": term["containerID"]})
            if not ephemeral:
                ended = {c["name"]: (c.get("state") or {}).get("terminated") for c in statuses}
                rp = spec.get("restartPolicy", "Always")
                if all(ended.get(n) for n in names) and rp != "Always":
                    failed = any(ended[n]["exitCode"] != 0 for n in names)
                    if rp == "Never" or not failed:
                        st["phase"] = "Failed" if failed else "Succeeded"
                for c in st.get("conditions") or []:
                    if c.get("type") in ("Ready", "ContainersReady"):
                        c.update({"status": "False", "reason": "PodCompleted" if st.get("phase") in ("Succeeded", "Failed") else "ContainersNotReady", "lastTransitionTime": now})
            return self._system_update(self.builtin[("", "pods")], pod)

    def kubelet_ephemeral_run(self, ns, name, container):
        with self.lock:
            pod = self._pod(ns, name)
            decl = {c["name"]: c for c in (pod.get("spec") or {}).get("ephemeralContainers") or []}
            if container not in decl:
                raise not_found("ephemeralcontainers", "", container)
            st = pod.setdefault("status", {})
            statuses = [c for c in st.get("ephemeralContainerStatuses") or [] if c.get("name") != container]
            statuses.append({"name": container, "image": decl[container].get("image", ""), "imageID": "",
                             "restartCount": 0, "ready": False, "started": True,
                             "containerID": f"containerd://{uuid.uuid4().hex}",
                             "state": {"running": {"startedAt": fmt_time(self.now())}}})
            st["ephemeralContainerStatuses"] = statuses
            return self._system_update(self.builtin[("", "pods")], pod)

    def kubelet_confirm_delete(self, ns, name):
        """The kubelet has stopped a pod being deleted gracefully: remove it (grace period 0)."""
        with self.lock:
            pod = self._pod(ns, name)
            if not pod["metadata"].get("deletionTimestamp"):
                raise APIError(409, "Conflict", f'pod "{name}" is not being deleted')
            pod["metadata"]["deletionGracePeriodSeconds"] = 0
            if pod["metadata"].get("finalizers"):
                return self._system_update(self.builtin[("", "pods")], pod)
            return self._remove(self.builtin[("", "pods")], pod)


# ---------------------------------------------------------------- small helpers

def invalid_list_options(err):
    return invalid_object("ListOptions", "meta.k8s.io", "", [err])


def _same(a, b):
    """Equal apart from resourceVersion and managed-field timestamps."""
    def norm(o):
        o = dict(o)
        md = dict(o.get("metadata") or {})
        md.pop("resourceVersion", None)
        mf = md.pop("managedFields", None)
        if mf:
            md["managedFields"] = [{k: v for k, v in e.items() if k != "time"} for e in mf]
        o["metadata"] = md
        return o
    return norm(a) == norm(b)


def _obj_key(o):
    md = o.get("metadata") or {}
    return f"{md.get('namespace', '')}/{md.get('name', '')}"


def _encode_continue(rv, start):
    raw = json.dumps({"v": "meta.k8s.io/v1", "rv": rv, "start": start}, separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def _decode_continue(token):
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        d = json.loads(raw)
        if d.get("v") != "meta.k8s.io/v1":
            raise ValueError("unsupported version")
        return int(d["rv"]), str(d["start"])
    except (ValueError, KeyError, TypeError) as e:
        raise bad_request(f"continue key is not valid: {e}") from None


def parse_rv(rv):
    try:
        r = int(rv)
        if r < 0:
            raise ValueError
        return r
    except (TypeError, ValueError):
        raise bad_request(f'invalid resource version: strconv.ParseUint: parsing "{rv}": invalid syntax') from None


def _path_str(p):
    out = ""
    for kind, name in p:
        if kind == "f":
            out += "." + name
        elif kind == "k":
            out += "[" + ",".join(f"{k}={json.dumps(v)}" for k, v in json.loads(name).items()) + "]"
        else:
            out += f"[={name}]"
    return out


def _version_priority(v):
    m = re.match(r"^v(\d+)(?:(alpha|beta)(\d+))?$", v)
    if not m:
        return (3, 0, 0, v)
    major = int(m.group(1))
    stage = {"alpha": 2, "beta": 1, None: 0}[m.group(2)]
    minor = int(m.group(3) or 0)
    return (stage, -major, -minor, v)
