# SPDX-License-Identifier: MIT
"""Discovery documents (/api, /apis, /apis/G/V), the OpenAPI v3 documents kubectl reads to
learn that the server validates fields itself, and Table rendering for kubectl get."""
import hashlib
import json

from .util import deepcopy

K8S_VERSION = {"major": "1", "minor": "32", "gitVersion": "v1.32.0", "gitCommit": "fakeapi",
               "gitTreeState": "clean", "buildDate": "2024-12-11T00:00:00Z", "goVersion": "go1.23.3",
               "compiler": "gc", "platform": "linux/amd64", "emulationMajor": "1", "emulationMinor": "32",
               "minCompatibilityMajor": "1", "minCompatibilityMinor": "31"}


def _storage_hash(rt, version):
    return hashlib.sha256(f"{rt.group}/{version}/{rt.plural}".encode()).digest()[:8].hex()


def core_versions(server_address):
    return {"kind": "APIVersions", "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}]}


def group_doc(group, versions):
    vs = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
    return {"name": group, "versions": vs, "preferredVersion": vs[0]}


def group_list(reg):
    groups = [group_doc(g, vs) for g, vs in sorted(reg.group_versions().items(), key=_group_order)]
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": groups}


_ORDER = ["events.k8s.io", "coordination.k8s.io", "apiextensions.k8s.io"]


def _group_order(item):
    g = item[0]
    return (0, _ORDER.index(g), g) if g in _ORDER else (1, 0, g)


def resource_list(reg, group, version):
    gv = f"{group}/{version}" if group else version
    res = []
    for rt in reg.types_in(group, version):
        for r in rt.discovery(version):
            if r["name"] == rt.plural:
                r["storageVersionHash"] = _storage_hash(rt, version)
            res.append(r)
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": res}


# ---------------------------------------------------------------- OpenAPI v3

def _gv_path(group, version):
    return f"api/{version}" if not group else f"apis/{group}/{version}"


def _schema_name(rt, version):
    if not rt.group:
        return f"io.k8s.api.core.{version}.{rt.kind}"
    parts = rt.group.split(".")
    return ".".join(reversed(parts)) + f".{version}.{rt.kind}"


_COMMON_PARAMS = ["dryRun", "fieldManager", "fieldValidation"]


def _param(name, where="query", required=False):
    return {"name": name, "in": where, "required": required, "schema": {"type": "string", "uniqueItems": True}}


def gv_document(reg, group, version):
    paths, schemas = {}, {}
    prefix = "/" + _gv_path(group, version)
    for rt in reg.types_in(group, version):
        gvk = {"group": rt.group, "version": version, "kind": rt.kind}
        name = _schema_name(rt, version)
        schemas[name] = rt.openapi_schema(version)
        ref = {"$ref": f"#/components/schemas/{name}"}
        body = {"content": {"application/json": {"schema": ref}, "application/yaml": {"schema": ref}}, "required": True}
        patch_body = {"content": {t: {"schema": {"type": "object"}} for t in (
            "application/json-patch+json", "application/merge-patch+json", "application/apply-patch+yaml")
            + (("application/strategic-merge-patch+json",) if rt.smp else ())}, "required": True}
        resp = {"200": {"description": "OK", "content": {"application/json": {"schema": ref}}}}
        base = prefix + ("/namespaces/{namespace}" if rt.namespaced else "") + f"/{rt.plural}"
        ns_param = [_param("namespace", "path", True)] if rt.namespaced else []

        def op(action, params, extra=None):
            o = {"operationId": f"{action}{rt.kind}", "x-kubernetes-action": action,
                 "x-kubernetes-group-version-kind": gvk, "responses": resp,
                 "parameters": [_param(p) for p in params]}
            if extra:
                o.update(extra)
            return o
        paths[base] = {"parameters": ns_param,
                       "get": op("list", ["labelSelector", "fieldSelector", "limit", "continue", "resourceVersion",
                                          "resourceVersionMatch", "watch", "allowWatchBookmarks",
                                          "sendInitialEvents", "timeoutSeconds"]),
                       "post": op("post", _COMMON_PARAMS, {"requestBody": body}),
                       "delete": op("deletecollection", ["labelSelector", "fieldSelector", "propagationPolicy",
                                                         "gracePeriodSeconds", "dryRun"])}
        item = {"parameters": ns_param + [_param("name", "path", True)],
                "get": op("get", ["resourceVersion"]),
                "put": op("put", _COMMON_PARAMS, {"requestBody": body}),
                "patch": op("patch", _COMMON_PARAMS + ["force"], {"requestBody": patch_body}),
                "delete": op("delete", ["dryRun", "gracePeriodSeconds", "propagationPolicy", "orphanDependents"])}
        paths[base + "/{name}"] = item
        for sub in rt.subresources:
            if sub in ("status", "ephemeralcontainers"):
                paths[base + "/{name}/" + sub] = {
                    "parameters": item["parameters"], "get": op("get", []),
                    "put": op("put", _COMMON_PARAMS, {"requestBody": body}),
                    "patch": op("patch", _COMMON_PARAMS + ["force"], {"requestBody": patch_body})}
    return {"openapi": "3.0.0", "info": {"title": "Kubernetes", "version": K8S_VERSION["gitVersion"]},
            "paths": paths, "components": {"schemas": schemas}}


def v3_index(reg):
    gvs = [("", "v1")]
    for g, vs in reg.group_versions().items():
        gvs += [(g, v) for v in vs]
    out = {}
    for g, v in gvs:
        doc = gv_document(reg, g, v)
        h = hashlib.sha512(json.dumps(doc, sort_keys=True).encode()).hexdigest().upper()[:64]
        out[_gv_path(g, v)] = {"serverRelativeURL": f"/openapi/v3/{_gv_path(g, v)}?hash={h}"}
    return {"paths": out}


# ---------------------------------------------------------------- Tables

def partial_metadata(o, version="v1"):
    return {"kind": "PartialObjectMetadata", "apiVersion": f"meta.k8s.io/{version}",
            "metadata": deepcopy(o.get("metadata") or {})}


def table(rt, version, objs, include_object, list_meta, now, table_version="v1", no_headers=False):
    rows = []
    for o in objs:
        row = {"cells": rt.cells(o, version, now)}
        if include_object == "Object":
            row["object"] = o
        elif include_object != "None":
            row["object"] = partial_metadata(o, table_version)
        rows.append(row)
    out = {"kind": "Table", "apiVersion": f"meta.k8s.io/{table_version}", "metadata": list_meta,
           "columnDefinitions": None if no_headers else rt.columns(version), "rows": rows}
    return out
