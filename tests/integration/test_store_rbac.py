# SPDX-License-Identifier: MIT
"""The chart's RBAC with the in-cluster store on (its default) is no wider than with it off
(issue 30): the same grants but for the store's own ConfigMaps — no pods create/delete and
no finalizers outside the injector namespace, which only inline S3 (allowInlineS3, the admin's
choice) brings. The grants are what `helm template` renders; that the controller needs no
more is measured against the real API server's audit log in test_realk8s.py and shown for a
store session end to end in test_tenancy.py."""
from test_install import INJ_NS, granted, render


def grants_by_namespace(docs):
    """{(namespace or "*", group, resource, verb)} of every Role and ClusterRole bound."""
    out = set()
    for d in docs:
        if d["kind"] not in ("Role", "ClusterRole"):
            continue
        where = d["metadata"].get("namespace") or "*"
        for g, r, v in granted([d]):
            out.add((where, g, r, v))
    return out


def test_the_store_adds_only_its_configmaps():
    on, off = grants_by_namespace(render()), grants_by_namespace(render("store.enabled=false"))
    assert on - off == {("*", "", "configmaps", v) for v in ("get", "list", "create")}, sorted(on - off)
    assert off <= on
    # pods are made and deleted in the injector namespace only; no finalizers are needed
    writes = {(w, r, v) for w, g, r, v in on if r == "pods" and v in ("create", "delete")}
    assert writes == {(INJ_NS, "pods", "create"), (INJ_NS, "pods", "delete")}, writes
    assert not [x for x in on if x[2] == "profilingsessions/finalizers"]


def test_inline_s3_is_what_brings_pods_into_tenants_namespaces():
    inline = grants_by_namespace(render("controller.allowInlineS3=true"))
    assert ("*", "", "pods", "create") in inline
    assert ("*", "aiprof.io", "profilingsessions/finalizers", "update") in inline
