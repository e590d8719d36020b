# SPDX-License-Identifier: MIT
"""The API double (tests/kubeapi) against the real API server (v1.32, tests/k8s/realk8s.py):
the same requests to both, the same answers expected — status code, reason, the causes of a
422, the warnings, what is pruned and what is kept. The double remains for the cases a real
server cannot be made to produce (faults, compaction, token rotation, object timestamps); this
test keeps it honest about everything else it is asked: where it accepts what the real server
refuses, a test on the double would pass for a controller that fails on a cluster."""
import json
import os
import shutil
import sys
import tempfile

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "kubeapi"))
sys.path.insert(0, os.path.join(ROOT, "tests", "k8s"))

import played  # noqa: E402
import realk8s  # noqa: E402
from fakeapi.client import Kube, launch  # noqa: E402
from harness import stop_api  # noqa: E402

NS = "conformance"
GROUP = "/apis/aiprof.io/v1alpha1"


@pytest.fixture(scope="module")
def servers():
    c = realk8s.require()
    c.apply_crds(os.path.join(ROOT, "crds"))
    c.ensure_namespace(NS)
    real = played.admin_client(c, "conformance/1")
    tmp = tempfile.mkdtemp(prefix="aiprof-conf-")
    p, ep = launch(os.path.join(tmp, "api"), "--apply", os.path.join(ROOT, "crds", "profilingsession.yaml"),
                   "--apply", os.path.join(ROOT, "crds", "profilingpolicy.yaml"), "--create-namespace", NS)
    double = Kube(ep["server"], ep["ca"], ep["token"], user_agent="conformance/1")
    yield {"real": real, "double": double}
    stop_api(p)
    shutil.rmtree(tmp, ignore_errors=True)
    c.kubectl("delete", "namespace", NS, "--wait=false")


def answer(r):
    """What a client acts on: code, reason, the causes of an Invalid, the warnings."""
    body = r.json or {}
    out = {"code": r.status}
    if body.get("kind") == "Status":
        out["reason"] = body.get("reason")
        causes = (body.get("details") or {}).get("causes")
        if causes:
            out["causes"] = sorted((c.get("field"), c.get("reason")) for c in causes)
    warnings = [v for k, v in r.headers.items() if k.lower() == "warning"]
    out["warnings"] = sorted(w.split(" ", 2)[2].strip('"') for w in warnings)
    return out


def both(servers, method, path, body=None, **kw):
    got = {}
    for name in ("real", "double"):
        r = servers[name].request(method, path, body, **kw)
        got[name] = (answer(r), r.json)
    return got


def same(got, what):
    a, b = got["real"][0], got["double"][0]
    assert a == b, f"{what}: the double answers differently\n  real:   {json.dumps(a)}\n  double: {json.dumps(b)}"
    return got["real"][1], got["double"][1]


def pod(name, **spec):
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"nodeName": "nowhere", "containers": [{"name": "c", "image": "busybox"}], **spec}}


def session(name, **spec):
    return {"apiVersion": "aiprof.io/v1alpha1", "kind": "ProfilingSession", "metadata": {"name": name},
            "spec": {"targets": {"podName": "p"}, "duration": "5s", **spec}}


def test_unknown_fields_strict_warned_and_pruned(servers):
    pods = f"/api/v1/namespaces/{NS}/pods"
    bad = pod("strict-0")
    bad["spec"]["surprise"] = 1
    same(both(servers, "POST", pods + "?fieldValidation=Strict", bad), "an unknown pod field, Strict")
    real, double = same(both(servers, "POST", pods + "?fieldValidation=Warn", dict(bad, metadata={"name": "warn-0"})),
                        "an unknown pod field, Warn")
    assert "surprise" not in real["spec"] and "surprise" not in double["spec"]
    sess = f"{GROUP}/namespaces/{NS}/profilingsessions"
    s = session("pruned-0", whatever={"x": 1})
    real, double = same(both(servers, "POST", sess, s), "an undeclared field of a ProfilingSession")
    assert "whatever" not in real["spec"] and "whatever" not in double["spec"]
    same(both(servers, "POST", sess + "?fieldValidation=Strict", session("strict-1", whatever=1)),
         "an undeclared field of a ProfilingSession, Strict")


def test_cel_rules_and_schema_refusals(servers):
    sess = f"{GROUP}/namespaces/{NS}/profilingsessions"
    for name, spec in (("both", {"targets": {"podName": "p", "selector": {"matchLabels": {"a": "b"}}}}),
                       ("long", {"duration": "25h"}),
                       ("words", {"duration": "30 seconds"}),
                       ("mode", {"injection": {"mode": "Sidecar"}}),
                       ("typed", {"duration": 30}),
                       ("no-secret", {"output": {"s3": {"bucket": "b"}}}),
                       ("ebpf-ephemeral", {"injection": {"mode": "EphemeralContainer", "method": "EBPFOnly"}})):
        same(both(servers, "POST", sess, session(name, **spec)), f"session {name}")
    # defaults: filled in the same way
    real, double = same(both(servers, "POST", sess, session("defaults")), "a session with defaults")
    assert real["spec"].get("injection") == double["spec"].get("injection")


def test_immutable_fields_and_admission(servers):
    pods = f"/api/v1/namespaces/{NS}/pods"
    same(both(servers, "POST", pods, pod("imm-0")), "a pod")
    same(both(servers, "PATCH", f"{pods}/imm-0", {"spec": {"nodeName": "elsewhere"}},
              content_type="application/merge-patch+json"), "changing a pod's nodeName")
    same(both(servers, "PATCH", f"{pods}/imm-0", {"spec": {"containers": [{"name": "c", "image": "busybox:2"}]}},
              content_type="application/strategic-merge-patch+json"), "changing a container's image (allowed)")
    same(both(servers, "POST", pods, pod("rc-0", runtimeClassName="no-such-class")), "a pod of a missing RuntimeClass")
    same(both(servers, "POST", "/api/v1/namespaces/no-such-ns/pods", pod("x")), "a pod in a missing namespace")
    rcs = "/apis/node.k8s.io/v1/runtimeclasses"
    same(both(servers, "POST", rcs, {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
                                     "metadata": {"name": "conf-rc"}, "handler": "runc"}), "a RuntimeClass")
    same(both(servers, "PATCH", f"{rcs}/conf-rc", {"handler": "kata"}, content_type="application/merge-patch+json"),
         "changing a RuntimeClass's handler")
    for name in ("real", "double"):
        servers[name].delete(f"{rcs}/conf-rc")


def test_status_subresource_and_conflicts(servers):
    sess = f"{GROUP}/namespaces/{NS}/profilingsessions"
    real, double = same(both(servers, "POST", sess, session("st-0")), "a session")
    # status on the main resource is ignored; on /status it is written
    real, double = same(both(servers, "PATCH", f"{sess}/st-0", {"status": {"phase": "Failed"}},
                             content_type="application/merge-patch+json"), "status through the main resource")
    assert "status" not in real or real["status"].get("phase") != "Failed"
    assert "status" not in double or double["status"].get("phase") != "Failed"
    real, double = same(both(servers, "PATCH", f"{sess}/st-0/status", {"status": {"phase": "Pending"}},
                             content_type="application/merge-patch+json"), "status through /status")
    assert real["status"]["phase"] == double["status"]["phase"] == "Pending"
    # an update with a stale resourceVersion is a 409 Conflict on both
    got = {}
    for name in ("real", "double"):
        cur = servers[name].get(f"{sess}/st-0").json
        stale = dict(cur, metadata=dict(cur["metadata"], resourceVersion=str(int(cur["metadata"]["resourceVersion"]) - 1)))
        r = servers[name].put(f"{sess}/st-0", stale)
        got[name] = (answer(r), r.json)
    same(got, "an update with a stale resourceVersion")
