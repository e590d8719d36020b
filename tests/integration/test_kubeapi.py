# SPDX-License-Identifier: MIT
"""The Kubernetes API server double (tests/kubeapi/) checked against the API conventions, not
against the controller: real kubectl (apply, get, get -w, patch, delete) and raw REST over
HTTPS with a bearer token. One double for the module, on 127.0.0.1, stopped by PID; each test
works in its own namespace.

What is checked: authentication (401 Status), discovery and OpenAPI for kubectl, CRDs and the
custom resources they define (defaulting, pruning, validation, printer columns), list+watch
from a resourceVersion sees exactly the later changes, 410 Expired after compaction (watch,
exact list, continue token), 409 on a stale update, the status subresource, generation,
finalizers, bookmarks, paging with consistent snapshots, selectors, the three patch formats
and server-side apply, pods with the stand-in kubelet and ephemeral containers, events in both
APIs, leases, secrets, namespace deletion, garbage collection, and the control API's faults.
"""
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time

import pytest

from conftest import ROOT

sys.path.insert(0, os.path.join(ROOT, "tests", "kubeapi"))
from fakeapi.client import Control, Kube, launch  # noqa: E402

KUBECTL = shutil.which("kubectl") or "/usr/bin/kubectl"
CRDS = os.path.join(ROOT, "crds")
S = "/apis/aiprof.io/v1alpha1"
MERGE, JSONP, SMP = "application/merge-patch+json", "application/json-patch+json", "application/strategic-merge-patch+json"


class Api:
    def __init__(self, proc, ep, workdir):
        self.proc, self.ep, self.workdir = proc, ep, workdir
        self.kube = Kube(ep["server"], ep["ca"], ep["token"])
        self.ctl = Control(ep["control"])
        self.kubeconfig = ep["kubeconfig"]
        self.cache = os.path.join(workdir, "kubectl-cache")

    def kubectl(self, *args, ok=True, input=None, timeout=30, context=None):
        argv = [KUBECTL, "--kubeconfig", self.kubeconfig, "--cache-dir", self.cache]
        if context:
            argv += ["--context", context]
        r = subprocess.run(argv + list(args), capture_output=True, text=True, input=input, timeout=timeout)
        if ok and r.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} failed ({r.returncode}): {r.stderr}")
        return r

    def kubectl_bg(self, procs, *args):
        argv = [KUBECTL, "--kubeconfig", self.kubeconfig, "--cache-dir", self.cache] + list(args)
        p, _ = procs.start(argv)
        return p

    def namespace(self, name):
        r = self.kube.post("/api/v1/namespaces", {"metadata": {"name": name}})
        assert r.status == 201, r
        return name

    def session(self, ns, name, spec=None, **meta):
        body = {"apiVersion": "aiprof.io/v1alpha1", "kind": "ProfilingSession",
                "metadata": dict({"name": name}, **meta),
                "spec": spec or {"targets": {"podName": "trainer-0"}, "duration": "10s"}}
        r = self.kube.post(f"{S}/namespaces/{ns}/profilingsessions", body)
        assert r.status == 201, r
        return r.json

    def pod(self, ns, name, node="node-a", labels=None, **spec):
        body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels or {}},
                "spec": dict({"nodeName": node, "restartPolicy": "Never",
                              "containers": [{"name": "trainer", "image": "python:3.11"}]}, **spec)}
        r = self.kube.post(f"/api/v1/namespaces/{ns}/pods", body)
        assert r.status == 201, r
        return r.json


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    if not os.path.exists(KUBECTL):
        pytest.skip("kubectl is not installed")
    if importlib.util.find_spec("yaml") is None:
        pytest.skip("python3-yaml is not installed (scripts/install-deps.sh)")
    d = str(tmp_path_factory.mktemp("fakeapi"))
    p, ep = launch(d, "--rv-wait", "0.5")
    try:
        a = Api(p, ep, d)
        a.kubectl("apply", "-f", CRDS)
        yield a
    finally:
        if p.poll() is None:
            os.kill(p.pid, signal.SIGKILL)
        p.wait(timeout=10)
        p.stdout.close()
        p.stderr.close()


def assert_status(r, code, reason):
    assert r.status == code, r
    st = r.json
    assert st["kind"] == "Status" and st["apiVersion"] == "v1" and st["status"] == "Failure", st
    assert st["code"] == code and st["reason"] == reason, st
    assert st["message"], st
    return st


def watch_list(api, path, **query):
    """All events of a watch that ends by itself (timeoutSeconds)."""
    return list(api.kube.watch(path, query))


# ============================================================ authentication, discovery

def test_authentication(api):
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic Zm9vOmJhcg=="}):
        k = Kube(api.ep["server"], api.ep["ca"])
        r = k.get("/api/v1/namespaces", headers=headers)
        assert_status(r, 401, "Unauthorized")
    r = api.kubectl("--token", "wrong", "get", "ns", ok=False)
    assert r.returncode != 0 and "Unauthorized" in r.stderr
    # a client certificate (CN/O = user/group) and the service-account token file work too
    assert "default" in api.kubectl("get", "ns", context="fakeapi-cert").stdout
    assert "default" in api.kubectl("get", "ns", context="fakeapi-sa").stdout
    old = open(os.path.join(api.ep["serviceAccountDir"], "token")).read()
    api.ctl.rotate_token(keep_old=False)
    assert open(os.path.join(api.ep["serviceAccountDir"], "token")).read() != old
    assert_status(Kube(api.ep["server"], api.ep["ca"], old).get("/api/v1/namespaces"), 401, "Unauthorized")
    assert "default" in api.kubectl("get", "ns", context="fakeapi-sa").stdout   # re-read tokenFile
    reqs = api.ctl.requests(resource="namespaces", verb="list")
    assert {r["user"] for r in reqs} >= {"aiprof-admin", "system:serviceaccount:aiprof-system:aiprof-controller"}


def test_discovery_and_openapi(api):
    assert "Server Version: v1.32.0" in api.kubectl("version").stdout
    res = api.kubectl("api-resources").stdout
    for line in ("pods", "secrets", "events", "namespaces", "leases", "customresourcedefinitions"):
        assert line in res
    row = next(l for l in res.splitlines() if l.startswith("profilingsessions"))
    assert row.split()[1:] == ["profs", "aiprof.io/v1alpha1", "true", "ProfilingSession"]
    r = api.kube.get(f"{S}")
    assert {x["name"] for x in r.json["resources"]} >= {"profilingsessions", "profilingsessions/status",
                                                       "profilingpolicies", "profilingpolicies/status"}
    idx = api.kube.get("/openapi/v3").json["paths"]
    assert "apis/aiprof.io/v1alpha1" in idx and "api/v1" in idx
    out = api.kubectl("explain", "profilingsessions.spec.injection").stdout
    assert "mode" in out and "EphemeralContainer" in out
    # unknown resources are the mux's plain-text 404, as on a real server
    r = api.kube.get("/apis/aiprof.io/v1alpha1/namespaces/default/nonesuch")
    assert r.status == 404 and r.raw == b"404 page not found\n"


# ============================================================ kubectl on custom resources

SESSION_YAML = """apiVersion: aiprof.io/v1alpha1
kind: ProfilingSession
metadata:
  name: llama-slow-step
  namespace: {ns}
spec:
  targets:
    podName: trainer-0
    container: trainer
  duration: {duration}
  output:
    s3: {{bucket: profiles, prefix: team-a/, secretRef: {{name: s3-creds}}}}
"""


def test_kubectl_apply_get_patch_delete(api):
    ns = api.namespace("t-kubectl")
    out = api.kubectl("apply", "-f", "-", input=SESSION_YAML.format(ns=ns, duration="10s")).stdout
    assert "profilingsession.aiprof.io/llama-slow-step created" in out
    o = json.loads(api.kubectl("get", "-n", ns, "profs", "llama-slow-step", "-o", "json").stdout)
    assert o["metadata"]["generation"] == 1
    assert o["spec"]["injection"] == {"mode": "Auto", "method": "Ptrace"}          # CRD defaults
    assert "unchanged" in api.kubectl("apply", "-f", "-", input=SESSION_YAML.format(ns=ns, duration="10s")).stdout
    assert "configured" in api.kubectl("apply", "-f", "-", input=SESSION_YAML.format(ns=ns, duration="20s")).stdout
    api.kubectl("patch", "-n", ns, "profs", "llama-slow-step", "--type", "merge", "-p", '{"spec":{"duration":"45s"}}')
    api.kubectl("patch", "-n", ns, "profs", "llama-slow-step", "--subresource", "status", "--type", "merge",
                "-p", '{"status":{"phase":"Profiling","targetCount":2,"findingCount":1}}')
    o = json.loads(api.kubectl("get", "-n", ns, "profs", "llama-slow-step", "-o", "json").stdout)
    assert (o["metadata"]["generation"], o["spec"]["duration"], o["status"]["phase"]) == (3, "45s", "Profiling")
    table = api.kubectl("get", "-n", ns, "profilingsessions").stdout.splitlines()
    assert table[0].split() == ["NAME", "PHASE", "TARGETS", "FINDINGS", "AGE"]
    assert table[1].split()[:4] == ["llama-slow-step", "Profiling", "2", "1"]
    y = api.kubectl("get", "-n", ns, "profs", "-o", "yaml").stdout
    assert "kind: List" in y and "phase: Profiling" in y
    # kubectl patch's default (strategic merge) is not for custom resources: 415
    r = api.kubectl("patch", "-n", ns, "profs", "llama-slow-step", "-p", '{"spec":{"duration":"1m"}}', ok=False)
    assert r.returncode != 0 and "application/strategic-merge-patch+json is not supported" in r.stderr
    r = api.kubectl("patch", "-n", ns, "profs", "llama-slow-step", "--type", "merge",
                    "-p", '{"spec":{"injection":{"mode":"Bogus"}}}', ok=False)
    assert 'spec.injection.mode: Unsupported value: "Bogus"' in r.stderr
    # the CRD declares no selectableFields (a 1.30+ field): a field selector on the phase is
    # refused as the real server refuses it
    r = api.kubectl("get", "-n", ns, "profs", "--field-selector", "status.phase=Profiling", ok=False)
    assert r.returncode != 0 and "field label not supported: status.phase" in r.stderr, r.stderr
    r = api.kubectl("get", "-n", ns, "profs", "--field-selector", "metadata.name=llama-slow-step")
    assert "llama-slow-step" in r.stdout
    assert "deleted" in api.kubectl("delete", "-n", ns, "profs", "llama-slow-step").stdout
    r = api.kubectl("get", "-n", ns, "profs", "llama-slow-step", ok=False)
    assert 'profilingsessions.aiprof.io "llama-slow-step" not found' in r.stderr


def test_kubectl_create_sends_protobuf(api):
    assert api.kubectl("create", "namespace", "t-create").stdout.strip() == "namespace/t-create created"
    api.kubectl("create", "secret", "generic", "s3-creds", "-n", "t-create",
                "--from-literal=AWS_ACCESS_KEY_ID=AKIA1", "--from-literal=AWS_SECRET_ACCESS_KEY=s3cr3t")
    posts = api.ctl.requests(method="POST", namespace="t-create")
    assert posts[-1]["contentType"] == "application/vnd.kubernetes.protobuf"
    s = api.kube.get("/api/v1/namespaces/t-create/secrets/s3-creds").json
    assert s["type"] == "Opaque" and s["data"] == {"AWS_ACCESS_KEY_ID": "QUtJQTE=", "AWS_SECRET_ACCESS_KEY": "czNjcjN0"}
    assert api.kube.get("/api/v1/namespaces/t-create").json["metadata"]["labels"] == {
        "kubernetes.io/metadata.name": "t-create"}
    out = api.kubectl("create", "namespace", "t-dry", "--dry-run=server", "-o", "name").stdout
    assert out.strip() == "namespace/t-dry"
    assert_status(api.kube.get("/api/v1/namespaces/t-dry"), 404, "NotFound")


def test_kubectl_get_watch_streams(api, procs):
    ns = api.namespace("t-kwatch")
    api.session(ns, "s1")
    w1 = api.kubectl_bg(procs, "get", "-n", ns, "profilingsessions", "--watch")
    w2 = api.kubectl_bg(procs, "get", "-n", ns, "pods", "-w")
    deadline = time.monotonic() + 10
    while len(api.ctl.watches()) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    api.kube.patch(f"{S}/namespaces/{ns}/profilingsessions/s1/status", {"status": {"phase": "Injecting"}})
    api.pod(ns, "trainer-0")
    api.ctl.kubelet("run", ns, "trainer-0")
    api.kube.delete(f"{S}/namespaces/{ns}/profilingsessions/s1")
    time.sleep(0.5)
    for p in (w1, w2):
        os.kill(p.pid, signal.SIGTERM)
        p.wait(timeout=10)
    o1, o2 = w1.stdout.read().splitlines(), w2.stdout.read().splitlines()
    assert o1[0].split() == ["NAME", "PHASE", "TARGETS", "FINDINGS", "AGE"]
    # the listed row, the status change, the deletion
    rows = [l.split() for l in o1[1:]]
    assert [r[0] for r in rows] == ["s1"] * 3 and [r[1] for r in rows[1:]] == ["Injecting"] * 2
    assert len(rows[0]) == 2          # no phase yet: NAME and AGE only
    assert o2[0].split() == ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    assert o2[-1].split()[:3] == ["trainer-0", "1/1", "Running"]


# ============================================================ list + watch semantics

def test_watch_from_resource_version_sees_exactly_later_changes(api):
    ns = api.namespace("t-watch")
    for n in ("a", "b", "c"):
        api.session(ns, n, labels={"app": "x"})
    lst = api.kube.get(f"{S}/namespaces/{ns}/profilingsessions").json
    rv0 = lst["metadata"]["resourceVersion"]
    assert [i["metadata"]["name"] for i in lst["items"]] == ["a", "b", "c"]
    assert all(i["kind"] == "ProfilingSession" for i in lst["items"])
    api.session(ns, "d", labels={"app": "x"})
    api.kube.patch(f"{S}/namespaces/{ns}/profilingsessions/a", {"spec": {"duration": "1m"}})
    api.kube.delete(f"{S}/namespaces/{ns}/profilingsessions/b")
    api.kube.patch(f"{S}/namespaces/{ns}/profilingsessions/c", {"metadata": {"labels": {"app": "y"}}})
    api.session(ns, "e", labels={"app": "y"})
    api.kube.patch(f"{S}/namespaces/{ns}/profilingsessions/e", {"metadata": {"labels": {"app": "x"}}})
    evs = watch_list(api, f"{S}/namespaces/{ns}/profilingsessions", resourceVersion=rv0, timeoutSeconds=1)
    got = [(e["type"], e["object"]["metadata"]["name"]) for e in evs]
    assert got == [("ADDED", "d"), ("MODIFIED", "a"), ("DELETED", "b"), ("MODIFIED", "c"), ("ADDED", "e"),
                   ("MODIFIED", "e")]
    rvs = [int(e["object"]["metadata"]["resourceVersion"]) for e in evs]
    assert rvs == sorted(rvs) and len(set(rvs)) == len(rvs) and rvs[0] > int(rv0)
    # resume from the middle: only what came after
    evs2 = watch_list(api, f"{S}/namespaces/{ns}/profilingsessions", resourceVersion=str(rvs[2]), timeoutSeconds=1)
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in evs2] == got[3:]
    # with a label selector, objects leaving or entering the selection are DELETED / ADDED
    evs3 = watch_list(api, f"{S}/namespaces/{ns}/profilingsessions", resourceVersion=rv0, timeoutSeconds=1,
                      labelSelector="app=x")
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in evs3] == [
        ("ADDED", "d"), ("MODIFIED", "a"), ("DELETED", "b"), ("DELETED", "c"), ("ADDED", "e")]
    # no resourceVersion: the current state as ADDED events first
    evs4 = watch_list(api, f"{S}/namespaces/{ns}/profilingsessions", timeoutSeconds=1)
    assert sorted(e["object"]["metadata"]["name"] for e in evs4) == ["a", "c", "d", "e"]
    assert {e["type"] for e in evs4} == {"ADDED"}


def test_compacted_history_is_410(api):
    ns = api.namespace("t-gone")
    for n in ("a", "b", "c"):
        api.session(ns, n)
    path = f"{S}/namespaces/{ns}/profilingsessions"
    first = api.kube.get(path, query={"limit": 1}).json
    assert first["metadata"]["continue"] and first["metadata"]["remainingItemCount"] == 2
    rv0 = first["metadata"]["resourceVersion"]
    api.kube.patch(f"{path}/a", {"spec": {"duration": "2m"}})
    compacted = api.ctl.compact()
    assert int(compacted) > int(rv0)
    evs = watch_list(api, path, resourceVersion=rv0, timeoutSeconds=1)
    assert len(evs) == 1 and evs[0]["type"] == "ERROR"
    st = evs[0]["object"]
    assert (st["kind"], st["code"], st["reason"]) == ("Status", 410, "Expired")
    assert st["message"].startswith(f"too old resource version: {rv0}")
    r = api.kube.get(path, query={"resourceVersion": rv0, "resourceVersionMatch": "Exact"})
    assert_status(r, 410, "Expired")
    r = api.kube.get(path, query={"limit": 1, "continue": first["metadata"]["continue"]})
    st = assert_status(r, 410, "Expired")
    assert st["metadata"]["continue"]        # the inconsistent continuation the server offers
    # the recovery the conventions prescribe: relist, then watch from the new resourceVersion
    lst = api.kube.get(path).json
    api.kube.patch(f"{path}/b", {"spec": {"duration": "3m"}})
    evs = watch_list(api, path, resourceVersion=lst["metadata"]["resourceVersion"], timeoutSeconds=1)
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in evs] == [("MODIFIED", "b")]


def test_paging_is_a_consistent_snapshot_and_selectors(api):
    ns = api.namespace("t-page")
    for i, node in enumerate(["node-a", "node-b", "node-a", "node-b", "node-a"]):
        api.pod(ns, f"p{i}", node=node, labels={"rank": str(i), "job": "llama" if i < 4 else "other"})
    path = f"/api/v1/namespaces/{ns}/pods"
    page = api.kube.get(path, query={"limit": 2}).json
    names = [p["metadata"]["name"] for p in page["items"]]
    assert "kind" not in page["items"][0]           # items of built-in lists carry no TypeMeta
    api.pod(ns, "p-late", node="node-a")             # created between pages: not in this list
    api.kube.delete(f"{path}/p4")                    # deleted between pages: still in this list
    while page["metadata"].get("continue"):
        page = api.kube.get(path, query={"limit": 2, "continue": page["metadata"]["continue"]}).json
        names += [p["metadata"]["name"] for p in page["items"]]
    assert names == ["p0", "p1", "p2", "p3", "p4"]
    sel = lambda **q: [p["metadata"]["name"] for p in api.kube.get(path, query=q).json["items"]]  # noqa: E731
    assert sel(fieldSelector="spec.nodeName=node-a") == ["p-late", "p0", "p2"]
    assert sel(fieldSelector="spec.nodeName=node-a,metadata.name!=p0") == ["p-late", "p2"]
    assert sel(labelSelector="job=llama,rank in (1,3)") == ["p1", "p3"]
    assert sel(labelSelector="job,rank notin (0,1)") == ["p2", "p3"]
    assert sel(labelSelector="!job") == ["p-late"]
    assert_status(api.kube.get(path, query={"fieldSelector": "spec.foo=x"}), 400, "BadRequest")
    assert_status(api.kube.get(path, query={"labelSelector": "a in (x"}), 400, "BadRequest")
    assert api.kubectl("get", "pods", "-A", "--field-selector", "spec.nodeName=node-b", "-o", "name").stdout.split() \
        == ["pod/p1", "pod/p3"]


def test_future_resource_version_and_list_options(api):
    far = str(10 ** 9)
    st = assert_status(api.kube.get("/api/v1/namespaces/default/pods", query={"resourceVersion": far}), 504, "Timeout")
    assert st["details"]["causes"][0]["reason"] == "ResourceVersionTooLarge"
    # a watch says so in the stream, as the watch cache does
    evs = watch_list(api, "/api/v1/namespaces/default/pods", resourceVersion=far, timeoutSeconds=5)
    assert [e["type"] for e in evs] == ["ERROR"] and evs[0]["object"]["code"] == 504
    assert evs[0]["object"]["message"].startswith(f"Too large resource version: {far}, current: ")
    st = assert_status(api.kube.get("/api/v1/namespaces/default/pods", query={"resourceVersionMatch": "Exact"}),
                       422, "Invalid")
    assert st["message"] == ('ListOptions.meta.k8s.io "" is invalid: resourceVersionMatch: Forbidden: '
                             'resourceVersionMatch is forbidden unless resourceVersion is provided')


def test_bookmarks(api):
    ns = api.namespace("t-bookmark")
    api.session(ns, "a")
    api.ctl.settings(bookmarkInterval=0.3)
    try:
        path = f"{S}/namespaces/{ns}/profilingsessions"
        rv = api.kube.get(path).json["metadata"]["resourceVersion"]
        done = []

        def change():
            time.sleep(0.5)
            api.kube.patch(f"{path}/a", {"spec": {"duration": "5m"}})
            done.append(1)
        t = threading.Thread(target=change)
        t.start()
        evs = watch_list(api, path, resourceVersion=rv, allowWatchBookmarks="true", timeoutSeconds=2)
        t.join()
        types = [e["type"] for e in evs]
        assert "MODIFIED" in types and types.count("BOOKMARK") >= 3 and types[-1] == "BOOKMARK"
        for e in evs:
            if e["type"] == "BOOKMARK":
                assert set(e["object"]) == {"kind", "apiVersion", "metadata"}
                assert list(e["object"]["metadata"]) == ["resourceVersion"]
                assert e["object"]["kind"] == "ProfilingSession"
        mod = next(e for e in evs if e["type"] == "MODIFIED")
        assert int(evs[-1]["object"]["metadata"]["resourceVersion"]) >= int(mod["object"]["metadata"]["resourceVersion"])
        # watch-list: the state as ADDED, then a bookmark that says the initial events are over
        evs = watch_list(api, path, sendInitialEvents="true", resourceVersionMatch="NotOlderThan",
                         allowWatchBookmarks="true", timeoutSeconds=1)
        assert evs[0]["type"] == "ADDED" and evs[1]["type"] == "BOOKMARK"
        assert evs[1]["object"]["metadata"]["annotations"] == {"k8s.io/initial-events-end": "true"}
        # without allowWatchBookmarks, none
        assert {e["type"] for e in watch_list(api, path, resourceVersion=rv, timeoutSeconds=1)} == {"MODIFIED"}
    finally:
        api.ctl.settings(bookmarkInterval=60)


def test_cut_watches(api):
    ns = api.namespace("t-cut")
    path = f"{S}/namespaces/{ns}/profilingsessions"
    for mode in ("close", "reset"):
        result = {}

        def run():
            try:
                result["events"] = list(api.kube.watch(path, {"timeoutSeconds": 30}))
                result["end"] = "clean"
            except Exception as e:     # noqa: BLE001 — the error is the point
                result["end"] = type(e).__name__
        t = threading.Thread(target=run)
        t.start()
        deadline = time.monotonic() + 5
        while not any(ns in w["path"] for w in api.ctl.watches()) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert api.ctl.cut_watches(mode=mode, path=ns) == 1
        t.join(5)
        assert not t.is_alive()
        assert result["end"] == ("clean" if mode == "close" else result["end"])
        if mode == "reset":
            assert result["end"] != "clean"


# ============================================================ writes: conflicts, subresources

def test_conflicts_and_errors_are_status_objects(api):
    ns = api.namespace("t-conflict")
    o = api.session(ns, "a")
    path = f"{S}/namespaces/{ns}/profilingsessions/a"
    stale = json.loads(json.dumps(o))
    o["spec"]["duration"] = "1m"
    r = api.kube.put(path, o)
    assert r.status == 200 and int(r.json["metadata"]["resourceVersion"]) > int(stale["metadata"]["resourceVersion"])
    stale["spec"]["duration"] = "2m"
    st = assert_status(api.kube.put(path, stale), 409, "Conflict")
    assert st["details"] == {"name": "a", "group": "aiprof.io", "kind": "profilingsessions"}
    assert "the object has been modified" in st["message"]
    del stale["metadata"]["resourceVersion"]          # custom resources need one on update
    assert_status(api.kube.put(path, stale), 422, "Invalid")
    assert_status(api.kube.post(f"{S}/namespaces/{ns}/profilingsessions", o), 500, "InternalError")   # rv set
    del o["metadata"]["resourceVersion"]
    assert_status(api.kube.post(f"{S}/namespaces/{ns}/profilingsessions", o), 409, "AlreadyExists")
    assert_status(api.kube.get(f"{path}x"), 404, "NotFound")
    st = assert_status(api.kube.post(f"{S}/namespaces/{ns}/profilingsessions",
                                     {"apiVersion": "aiprof.io/v1alpha1", "kind": "ProfilingSession",
                                      "metadata": {"name": "bad"}, "spec": {"targets": {}, "duration": "soon"}}),
                       422, "Invalid")
    fields = sorted(c["field"] for c in st["details"]["causes"])
    assert fields == ["spec.duration", "spec.targets"], st
    assert_status(api.kube.post("/api/v1/namespaces/nonesuch/pods", {"metadata": {"name": "x"}}), 404, "NotFound")
    # a JSON patch test op that fails, a precondition on delete
    assert_status(api.kube.patch(path, [{"op": "test", "path": "/spec/duration", "value": "9h"}], JSONP), 422, "Invalid")
    st = assert_status(api.kube.delete(path, {"preconditions": {"uid": "nope"}}), 409, "Conflict")
    assert "Precondition failed: UID in precondition: nope" in st["message"]


def test_status_subresource_and_generation(api):
    ns = api.namespace("t-status")
    o = api.session(ns, "a")
    path = f"{S}/namespaces/{ns}/profilingsessions/a"
    assert o["metadata"]["generation"] == 1 and "status" not in o
    # writes to the main resource ignore .status
    o["status"] = {"phase": "Succeeded"}
    o["spec"]["duration"] = "1m"
    r = api.kube.put(path, o).json
    assert "status" not in r and r["spec"]["duration"] == "1m" and r["metadata"]["generation"] == 2
    # writes to /status change only .status (and never the generation)
    r["status"] = {"phase": "Profiling", "observedGeneration": 2, "bogus": 1}
    r["spec"]["duration"] = "9m"
    r["metadata"]["labels"] = {"ignored": "yes"}
    resp = api.kube.put(f"{path}/status", r)
    s = resp.json
    assert s["status"] == {"phase": "Profiling", "observedGeneration": 2}          # pruned
    assert resp.headers["Warning"] == '299 - "unknown field \\"status.bogus\\""'
    assert s["spec"]["duration"] == "1m" and "labels" not in s["metadata"] and s["metadata"]["generation"] == 2
    assert_status(api.kube.patch(f"{path}/status", {"status": {"phase": "Sleeping"}}), 422, "Invalid")
    st = assert_status(api.kube.patch(f"{path}/status", {"status": {"bogus": 1}},
                                      query={"fieldValidation": "Strict"}), 400, "BadRequest")
    assert st["message"] == ('ProfilingSession in version "v1alpha1" cannot be handled as a ProfilingSession: '
                             'strict decoding error: unknown field "status.bogus"')
    # metadata changes keep the generation; a no-op write keeps even the resourceVersion
    before = api.kube.get(path).json
    r = api.kube.patch(path, {"metadata": {"labels": {"team": "a"}}}).json
    assert r["metadata"]["generation"] == 2 and r["metadata"]["resourceVersion"] != before["metadata"]["resourceVersion"]
    again = api.kube.patch(path, {"metadata": {"labels": {"team": "a"}}}).json
    assert again["metadata"]["resourceVersion"] == r["metadata"]["resourceVersion"]
    r = api.kube.patch(path, [{"op": "replace", "path": "/spec/duration", "value": "2m"}], JSONP).json
    assert r["metadata"]["generation"] == 3


def test_finalizers_and_deletion(api):
    ns = api.namespace("t-final")
    api.session(ns, "a", finalizers=["aiprof.io/cleanup"])
    path = f"{S}/namespaces/{ns}/profilingsessions/a"
    rv = api.kube.get(f"{S}/namespaces/{ns}/profilingsessions").json["metadata"]["resourceVersion"]
    r = api.kube.delete(path)
    assert r.status == 200
    o = r.json
    assert o["metadata"]["deletionTimestamp"] and o["metadata"]["generation"] == 2
    assert api.kube.get(path).status == 200
    assert_status(api.kube.patch(path, {"metadata": {"finalizers": ["aiprof.io/cleanup", "x.io/more"]}}), 422, "Invalid")
    r = api.kube.patch(path, {"metadata": {"finalizers": None}})
    assert r.status == 200
    assert_status(api.kube.get(path), 404, "NotFound")
    evs = watch_list(api, f"{S}/namespaces/{ns}/profilingsessions", resourceVersion=rv, timeoutSeconds=1)
    assert [e["type"] for e in evs] == ["MODIFIED", "DELETED"]
    assert evs[1]["object"]["metadata"]["deletionTimestamp"]
    # without finalizers: gone at once; secrets answer with a Status, custom resources with the object
    api.session(ns, "b")
    assert api.kube.delete(f"{S}/namespaces/{ns}/profilingsessions/b").json["kind"] == "ProfilingSession"
    api.kube.post(f"/api/v1/namespaces/{ns}/secrets", {"metadata": {"name": "s"}})
    st = api.kube.delete(f"/api/v1/namespaces/{ns}/secrets/s").json
    assert st["kind"] == "Status" and st["status"] == "Success" and st["details"]["name"] == "s"


def test_owner_references_cascade(api):
    ns = api.namespace("t-gc")
    s = api.session(ns, "a")
    owner = {"apiVersion": "aiprof.io/v1alpha1", "kind": "ProfilingSession", "name": "a",
             "uid": s["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}
    for n in ("inj-1", "inj-2"):
        api.kube.post(f"/api/v1/namespaces/{ns}/pods", {"metadata": {"name": n, "ownerReferences": [owner]},
                                                         "spec": {"containers": [{"name": "c", "image": "x"}]}})
    s2 = api.session(ns, "keep")
    api.kube.post(f"/api/v1/namespaces/{ns}/pods", {"metadata": {"name": "orphan-me", "ownerReferences": [
        dict(owner, name="keep", uid=s2["metadata"]["uid"])]}, "spec": {"containers": [{"name": "c", "image": "x"}]}})
    api.kube.delete(f"{S}/namespaces/{ns}/profilingsessions/a")                        # background
    api.kube.delete(f"{S}/namespaces/{ns}/profilingsessions/keep", {"propagationPolicy": "Orphan"})
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        pods = {p["metadata"]["name"]: p for p in api.kube.get(f"/api/v1/namespaces/{ns}/pods").json["items"]}
        if set(pods) == {"orphan-me"} and "ownerReferences" not in pods["orphan-me"]["metadata"] and \
                api.kube.get(f"{S}/namespaces/{ns}/profilingsessions/keep").status == 404:
            break
        time.sleep(0.05)
    else:
        raise AssertionError(f"garbage collection did not converge: {sorted(pods)}")


def test_namespace_lifecycle(api):
    ns = api.namespace("t-nsdel")
    api.session(ns, "held", finalizers=["aiprof.io/cleanup"])
    api.pod(ns, "p")
    assert api.kube.delete(f"/api/v1/namespaces/{ns}").json["status"]["phase"] == "Terminating"
    deadline = time.monotonic() + 5
    while api.kube.get(f"/api/v1/namespaces/{ns}/pods/p").status != 404 and time.monotonic() < deadline:
        time.sleep(0.05)
    st = assert_status(api.kube.post(f"/api/v1/namespaces/{ns}/pods", {"metadata": {"name": "new"},
                       "spec": {"containers": [{"name": "c", "image": "x"}]}}), 403, "Forbidden")
    assert "because it is being terminated" in st["message"]
    assert api.kube.get(f"/api/v1/namespaces/{ns}").status == 200                    # held by the finalizer
    api.kube.patch(f"{S}/namespaces/{ns}/profilingsessions/held", {"metadata": {"finalizers": []}})
    while api.kube.get(f"/api/v1/namespaces/{ns}").status != 404 and time.monotonic() < deadline + 5:
        time.sleep(0.05)
    assert_status(api.kube.get(f"/api/v1/namespaces/{ns}"), 404, "NotFound")


# ============================================================ patches and apply

POD_YAML = """apiVersion: v1
kind: Pod
metadata:
  name: trainer-0
  namespace: {ns}
  labels: {{app: trainer, rank: "0"}}
spec:
  nodeName: node-a
  restartPolicy: Never
  containers:
  - name: trainer
    image: {image}
    command: [python, train.py]
    env:
    - {{name: A, value: "1"}}
    - {{name: B, value: "2"}}
  - name: sidecar
    image: busybox:1.36
"""


def test_pods_apply_patch_and_immutability(api):
    ns = api.namespace("t-pod")
    api.kubectl("apply", "-f", "-", input=POD_YAML.format(ns=ns, image="python:3.11"))
    p = api.kube.get(f"/api/v1/namespaces/{ns}/pods/trainer-0").json
    assert p["status"] == {"phase": "Pending", "qosClass": "BestEffort"}
    c = p["spec"]["containers"][0]
    assert (c["terminationMessagePath"], c["terminationMessagePolicy"], c["imagePullPolicy"]) == \
        ("/dev/termination-log", "File", "IfNotPresent")
    assert any(v["name"].startswith("kube-api-access-") for v in p["spec"]["volumes"])
    # kubectl apply of a changed image: a strategic merge patch that keys containers by name
    out = api.kubectl("apply", "-f", "-", input=POD_YAML.format(ns=ns, image="python:3.12")).stdout
    assert "configured" in out
    reqs = api.ctl.requests(method="PATCH", namespace=ns, resource="pods")
    assert reqs[-1]["contentType"].startswith(SMP)
    p = api.kube.get(f"/api/v1/namespaces/{ns}/pods/trainer-0").json
    assert [c["image"] for c in p["spec"]["containers"]] == ["python:3.12", "busybox:1.36"]
    assert [e["name"] for e in p["spec"]["containers"][0]["env"]] == ["A", "B"]
    # strategic merge by hand: env keyed by name, $patch: delete, labels merged
    r = api.kube.patch(f"/api/v1/namespaces/{ns}/pods/trainer-0", {
        "metadata": {"labels": {"extra": "1"}},
        "spec": {"containers": [{"name": "trainer", "env": [{"name": "B", "$patch": "delete"}, {"name": "C", "value": "3"}]}]}},
        SMP)
    assert r.status == 422     # env is part of the immutable pod spec
    r = api.kube.patch(f"/api/v1/namespaces/{ns}/pods/trainer-0", {"metadata": {"labels": {"extra": "1"}}}, SMP)
    assert r.json["metadata"]["labels"] == {"app": "trainer", "rank": "0", "extra": "1"}
    st = assert_status(api.kube.patch(f"/api/v1/namespaces/{ns}/pods/trainer-0",
                                      {"spec": {"containers": [{"name": "trainer", "command": ["sh"]}]}}, SMP),
                       422, "Invalid")
    assert "pod updates may not change fields other than" in st["message"]
    r = api.kubectl("apply", "-f", "-", input=POD_YAML.format(ns=ns, image="python:3.12").replace(
        "train.py", "other.py"), ok=False)
    assert r.returncode != 0 and "Forbidden: pod updates may not change fields" in r.stderr
    # unknown fields: dropped with a warning by default, 400 with fieldValidation=Strict
    body = {"metadata": {"name": "typo"}, "spec": {"hostPid": True, "containers": [{"name": "c", "image": "x"}]}}
    r = api.kube.post(f"/api/v1/namespaces/{ns}/pods", body)
    assert r.status == 201 and "hostPid" not in r.json["spec"] and 'unknown field \\"spec.hostPid\\"' in r.headers["Warning"]
    body["metadata"]["name"] = "typo2"
    st = assert_status(api.kube.post(f"/api/v1/namespaces/{ns}/pods", body, query={"fieldValidation": "Strict"}),
                       400, "BadRequest")
    assert st["message"] == 'Pod in version "v1" cannot be handled as a Pod: strict decoding error: unknown field "spec.hostPid"'
    body["spec"] = {"hostPID": "yes", "containers": [{"name": "c", "image": "x"}]}
    st = assert_status(api.kube.post(f"/api/v1/namespaces/{ns}/pods", body), 400, "BadRequest")
    assert "cannot unmarshal string into Go struct field PodSpec.spec.hostPID of type bool" in st["message"]


def test_ephemeral_containers_and_kubelet(api):
    ns = api.namespace("t-kubelet")
    api.pod(ns, "trainer-0")
    pod = f"/api/v1/namespaces/{ns}/pods/trainer-0"
    ec = {"name": "aiprof-injector", "image": "aiprof/injector:dev", "targetContainerName": "trainer",
          "securityContext": {"capabilities": {"add": ["SYS_PTRACE"]}}}
    st = assert_status(api.kube.patch(pod, {"spec": {"ephemeralContainers": [ec]}}, SMP), 422, "Invalid")
    assert "spec: Forbidden: pod updates may not change fields" in st["message"]
    r = api.kube.patch(f"{pod}/ephemeralcontainers", {"spec": {"ephemeralContainers": [ec]}}, SMP)
    assert r.status == 200 and r.json["spec"]["ephemeralContainers"][0]["name"] == "aiprof-injector"
    assert_status(api.kube.patch(f"{pod}/ephemeralcontainers", {"spec": {"ephemeralContainers": [
        dict(ec, name="bad", targetContainerName="nope", ports=[{"containerPort": 80}])]}}, SMP), 422, "Invalid")
    st = assert_status(api.kube.patch(f"{pod}/ephemeralcontainers", [
        {"op": "remove", "path": "/spec/ephemeralContainers/0"}], JSONP), 422, "Invalid")
    assert "may not be removed" in st["message"]
    api.ctl.kubelet("run", ns, "trainer-0")
    api.ctl.kubelet("ephemeral-run", ns, "trainer-0", container="aiprof-injector")
    msg = json.dumps({"artifacts": [{"name": "timeline", "url": "s3://b/p/timeline.json.gz"}], "findings": []})
    api.ctl.kubelet("terminate", ns, "trainer-0", container="aiprof-injector", ephemeral=True, exitCode=0, message=msg)
    p = api.kube.get(pod).json
    es = p["status"]["ephemeralContainerStatuses"][0]
    assert es["state"]["terminated"]["message"] == msg and es["state"]["terminated"]["reason"] == "Completed"
    assert p["status"]["phase"] == "Running"
    rows = api.kubectl("get", "pods", "-n", ns, "--no-headers").stdout.split()
    assert rows[:3] == ["trainer-0", "1/1", "Running"]
    api.ctl.kubelet("terminate", ns, "trainer-0", container="trainer", exitCode=3, message="boom")
    p = api.kube.get(pod).json
    assert p["status"]["phase"] == "Failed"
    assert p["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 3
    assert api.kubectl("get", "pods", "-n", ns, "--no-headers").stdout.split()[:3] == ["trainer-0", "0/1", "Error"]
    api.ctl.kubelet("logs", ns, "trainer-0", container="trainer", text="step 1\nstep 2\n")
    assert api.kubectl("logs", "-n", ns, "trainer-0").stdout == "step 1\nstep 2\n"
    # graceful deletion waits for the kubelet when asked to
    api.ctl.settings(podGracefulDelete=True)
    try:
        api.pod(ns, "slow")
        o = api.kube.delete(f"/api/v1/namespaces/{ns}/pods/slow").json
        assert o["metadata"]["deletionGracePeriodSeconds"] == 30
        assert "Terminating" in api.kubectl("get", "pods", "-n", ns, "slow").stdout
        api.ctl.kubelet("confirm-delete", ns, "slow")
        assert_status(api.kube.get(f"/api/v1/namespaces/{ns}/pods/slow"), 404, "NotFound")
    finally:
        api.ctl.settings(podGracefulDelete=False)


def test_server_side_apply(api):
    ns = api.namespace("t-ssa")
    doc = SESSION_YAML.format(ns=ns, duration="10s")
    assert "serverside-applied" in api.kubectl("apply", "--server-side", "-f", "-", input=doc).stdout
    o = json.loads(api.kubectl("get", "-n", ns, "profs", "llama-slow-step", "-o", "json",
                               "--show-managed-fields").stdout)
    mf = o["metadata"]["managedFields"]
    assert [(m["manager"], m["operation"]) for m in mf] == [("kubectl", "Apply")]
    assert "f:duration" in mf[0]["fieldsV1"]["f:spec"]
    # another manager changes a field the applier owns, then applying again conflicts
    api.kubectl("patch", "-n", ns, "profs", "llama-slow-step", "--type", "merge", "-p", '{"spec":{"duration":"1m"}}')
    r = api.kubectl("apply", "--server-side", "-f", "-", input=doc, ok=False)
    assert r.returncode != 0 and "conflict" in r.stderr.lower() and ".spec.duration" in r.stderr
    api.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", input=doc)
    # a field the applier stops specifying is removed
    api.kubectl("apply", "--server-side", "-f", "-", input=doc.replace("    container: trainer\n", ""))
    o = api.kube.get(f"{S}/namespaces/{ns}/profilingsessions/llama-slow-step").json
    assert o["spec"]["duration"] == "10s" and "container" not in o["spec"]["targets"]
    # apply creates pods too, and status via the status subresource
    r = api.kube.patch(f"{S}/namespaces/{ns}/profilingsessions/llama-slow-step/status",
                       json.dumps({"apiVersion": "aiprof.io/v1alpha1", "kind": "ProfilingSession",
                                   "metadata": {"name": "llama-slow-step"}, "status": {"phase": "Pending"}}),
                       "application/apply-patch+yaml", query={"fieldManager": "aiprof-controller"})
    assert r.status == 200 and r.json["status"]["phase"] == "Pending"
    assert any(m["manager"] == "aiprof-controller" and m.get("subresource") == "status"
               for m in r.json["metadata"]["managedFields"])
    assert_status(api.kube.patch(f"{S}/namespaces/{ns}/profilingsessions/x", "{}", "application/apply-patch+yaml"),
                  400, "BadRequest")       # fieldManager is required


# ============================================================ other kinds

def test_events_leases_secrets(api):
    ns = api.namespace("t-kinds")
    ref = {"apiVersion": "aiprof.io/v1alpha1", "kind": "ProfilingSession", "name": "a", "namespace": ns}
    r = api.kube.post(f"/api/v1/namespaces/{ns}/events", {
        "metadata": {"name": "a.1"}, "involvedObject": ref, "reason": "Injected", "message": "attached to 2 processes",
        "type": "Normal", "source": {"component": "aiprof-controller"}, "count": 1,
        "firstTimestamp": "2024-05-01T10:00:00.123+02:00"})
    assert r.status == 201 and r.json["firstTimestamp"] == "2024-05-01T08:00:00Z"    # metav1.Time: UTC, seconds
    new = {"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "a.2"},
           "eventTime": "2024-05-01T10:00:00.000000Z", "reportingController": "aiprof.io/controller",
           "reportingInstance": "aiprof-controller-0", "action": "Upload", "reason": "Uploaded",
           "regarding": ref, "note": "3 artifacts", "type": "Normal"}
    assert api.kube.post(f"/apis/events.k8s.io/v1/namespaces/{ns}/events", new).status == 201
    core = api.kube.get(f"/api/v1/namespaces/{ns}/events", query={"fieldSelector": "involvedObject.name=a"}).json
    assert [(e["metadata"]["name"], e["reason"], e["message"]) for e in core["items"]] == [
        ("a.1", "Injected", "attached to 2 processes"), ("a.2", "Uploaded", "3 artifacts")]
    newer = api.kube.get(f"/apis/events.k8s.io/v1/namespaces/{ns}/events").json
    assert [e.get("note") for e in newer["items"]] == ["attached to 2 processes", "3 artifacts"]
    assert newer["items"][0]["regarding"]["kind"] == "ProfilingSession"
    bad = dict(new, metadata={"name": "a.3"})
    bad.pop("eventTime")
    st = assert_status(api.kube.post(f"/apis/events.k8s.io/v1/namespaces/{ns}/events", bad), 422, "Invalid")
    assert "eventTime: Required value" in st["message"]
    bad["eventTime"] = "2024-05-01T10:00:00Z"        # MicroTime needs six fraction digits
    assert_status(api.kube.post(f"/apis/events.k8s.io/v1/namespaces/{ns}/events", bad), 400, "BadRequest")
    assert "Injected" in api.kubectl("get", "events", "-n", ns).stdout
    # leases: leader election is create, then update with the resourceVersion as a lock
    lp = f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases"
    lease = {"metadata": {"name": "aiprof-controller"}, "spec": {
        "holderIdentity": "a", "leaseDurationSeconds": 15, "acquireTime": "2024-05-01T10:00:00.000000Z",
        "renewTime": "2024-05-01T10:00:00.000000Z", "leaseTransitions": 0}}
    l1 = api.kube.post(lp, lease).json
    assert_status(api.kube.post(lp, lease), 409, "AlreadyExists")
    l1["spec"]["renewTime"] = "2024-05-01T10:00:05.000000Z"
    l2 = api.kube.put(f"{lp}/aiprof-controller", l1).json
    l1["spec"]["holderIdentity"] = "b"
    assert_status(api.kube.put(f"{lp}/aiprof-controller", l1), 409, "Conflict")
    l2["spec"]["renewTime"] = "2024-05-01T10:00:10Z"
    assert_status(api.kube.put(f"{lp}/aiprof-controller", l2), 400, "BadRequest")
    # secrets: stringData is write-only and lands base64 in data; data must be base64
    sp = f"/api/v1/namespaces/{ns}/secrets"
    s = api.kube.post(sp, {"metadata": {"name": "s3-creds"}, "stringData": {"AWS_ACCESS_KEY_ID": "AKIA1"}}).json
    assert s["data"] == {"AWS_ACCESS_KEY_ID": "QUtJQTE="} and "stringData" not in s and s["type"] == "Opaque"
    assert_status(api.kube.post(sp, {"metadata": {"name": "bad"}, "data": {"k": "not base64!"}}), 400, "BadRequest")


# ============================================================ control API: faults, authz, log

def test_faults_authz_and_request_log(api):
    ns = api.namespace("t-faults")
    o = api.session(ns, "a")
    path = f"{S}/namespaces/{ns}/profilingsessions/a"
    api.ctl.fault(method="PUT", path=f"/namespaces/{ns}/profilingsessions/a$", code=500, times=2)
    for _ in range(2):
        assert_status(api.kube.put(path, o), 500, "InternalError")
    assert api.kube.put(path, o).status == 200
    api.ctl.fault(method="PATCH", path=f"/namespaces/{ns}/", code=409, times=1)
    assert_status(api.kube.patch(path, {"spec": {"duration": "1m"}}), 409, "Conflict")
    # "after": the write happens, the answer is lost
    api.ctl.fault(method="POST", path=f"/namespaces/{ns}/profilingsessions$", code=503, after=True,
                  retryAfterSeconds=1)
    body = {"apiVersion": "aiprof.io/v1alpha1", "kind": "ProfilingSession", "metadata": {"name": "b"},
            "spec": {"targets": {"podName": "x"}}}
    r = api.kube.post(f"{S}/namespaces/{ns}/profilingsessions", body)
    assert_status(r, 503, "ServiceUnavailable")
    assert r.headers["Retry-After"] == "1"
    assert api.kube.get(f"{S}/namespaces/{ns}/profilingsessions/b").status == 200
    api.ctl.fault(method="GET", path=f"/namespaces/{ns}/profilingsessions$", action="reset")
    with pytest.raises(OSError):
        api.kube.get(f"{S}/namespaces/{ns}/profilingsessions")
    api.ctl.deny(verb="list", resource="pods", namespace=ns)
    try:
        r = api.kubectl("get", "pods", "-n", ns, ok=False)
        assert f'pods is forbidden: User "aiprof-admin" cannot list resource "pods" in API group "" in the namespace "{ns}"' in r.stderr
    finally:
        api.ctl.clear_denies()
    reqs = api.ctl.requests(namespace=ns, resource="profilingsessions")
    puts = [r for r in reqs if r["verb"] == "update"]
    assert [r["code"] for r in puts] == [500, 500, 200] and puts[0]["fault"] and not puts[2]["fault"]
    assert puts[0]["body"]["metadata"]["name"] == "a" and puts[0]["user"] == "aiprof-admin"
    assert api.ctl.call("GET", "/faults")["faults"][0]["left"] == 0


def test_crd_schemas_stay_in_step():
    import yaml
    sess = yaml.safe_load(open(os.path.join(CRDS, "profilingsession.yaml")))
    pol = yaml.safe_load(open(os.path.join(CRDS, "profilingpolicy.yaml")))
    sspec = sess["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    tspec = pol["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"][
        "sessionTemplate"]["properties"]["spec"]["properties"]
    assert {k: v for k, v in sspec.items() if k != "targets"} == {k: v for k, v in tspec.items() if k != "targets"}
    for k in ("container", "process"):
        assert tspec["targets"]["properties"][k] == sspec["targets"]["properties"][k]


def test_policy_defaults(api):
    ns = api.namespace("t-policy")
    r = api.kube.post(f"{S}/namespaces/{ns}/profilingpolicies", {
        "apiVersion": "aiprof.io/v1alpha1", "kind": "ProfilingPolicy", "metadata": {"name": "nightly"},
        "spec": {"selector": {"matchLabels": {"job": "llama"}}, "schedule": "0 3 * * *",
                 "sessionTemplate": {"spec": {"duration": "1m"}}}})
    assert r.status == 201, r
    spec = r.json["spec"]
    assert (spec["concurrencyPolicy"], spec["suspend"], spec["successfulSessionsHistoryLimit"],
            spec["failedSessionsHistoryLimit"]) == ("Forbid", False, 3, 1)
    assert spec["sessionTemplate"]["spec"]["injection"] == {"mode": "Auto", "method": "Ptrace"}
    assert_status(api.kube.post(f"{S}/namespaces/{ns}/profilingpolicies", {
        "apiVersion": "aiprof.io/v1alpha1", "kind": "ProfilingPolicy", "metadata": {"name": "never"},
        "spec": {"selector": {}, "sessionTemplate": {"spec": {}}}}), 422, "Invalid")   # schedule or trigger
    out = api.kubectl("get", "profpol", "-n", ns).stdout.splitlines()
    assert out[0].split() == ["NAME", "SCHEDULE", "SUSPEND", "LAST", "SCHEDULE", "AGE"]
    assert out[1].split()[:7] == ["nightly", "0", "3", "*", "*", "*", "false"]



def test_nodes_and_runtime_classes(api):
    """core/v1 Node (a create may carry .status, as the kubelet registers; updates of the main
    resource keep it) and node.k8s.io/v1 RuntimeClass (handler required and immutable)."""
    out = api.kubectl("api-resources", "-o", "wide").stdout
    assert any(l.split()[:2] == ["nodes", "no"] for l in out.splitlines()), out
    assert any(l.split()[:3] == ["runtimeclasses", "node.k8s.io/v1", "false"] for l in out.splitlines()), out
    manifest = """
apiVersion: v1
kind: Node
metadata: {name: gpu-1, labels: {node-role.kubernetes.io/worker: ""}}
status:
  nodeInfo: {kernelVersion: 5.4.0-150-generic, kubeletVersion: v1.32.0}
  conditions: [{type: Ready, status: "True"}]
---
apiVersion: node.k8s.io/v1
kind: RuntimeClass
metadata: {name: kata}
handler: kata-qemu
"""
    api.kubectl("apply", "-f", "-", input=manifest)
    table = api.kubectl("get", "nodes", "gpu-1", "-o", "wide").stdout.splitlines()
    assert table[1].split()[:5] == ["gpu-1", "Ready", "worker", table[1].split()[3], "v1.32.0"]
    assert "5.4.0-150-generic" in table[1]
    assert api.kubectl("get", "node", "gpu-1", "-o", "jsonpath={.status.nodeInfo.kernelVersion}").stdout == \
        "5.4.0-150-generic"
    # the main resource cannot change the status; /status can
    api.kubectl("label", "node", "gpu-1", "zone=a")
    n = api.kube.put("/api/v1/nodes/gpu-1", dict(api.kube.get("/api/v1/nodes/gpu-1").json, status={}))
    assert n.status == 200 and n.json["status"]["nodeInfo"]["kernelVersion"] == "5.4.0-150-generic"
    api.kubectl("patch", "node", "gpu-1", "--subresource", "status", "-p",
                '{"status":{"nodeInfo":{"kernelVersion":"6.8.0"}}}')
    assert api.kube.get("/api/v1/nodes/gpu-1").json["status"]["nodeInfo"]["kernelVersion"] == "6.8.0"
    assert api.kubectl("get", "runtimeclass", "kata", "-o", "jsonpath={.handler}").stdout == "kata-qemu"
    r = api.kubectl("patch", "runtimeclass", "kata", "--type", "merge", "-p", '{"handler":"runc"}', ok=False)
    assert 'handler: Invalid value: "runc": field is immutable' in r.stderr
    r = api.kube.post("/apis/node.k8s.io/v1/runtimeclasses", {"apiVersion": "node.k8s.io/v1",
                                                                "kind": "RuntimeClass", "metadata": {"name": "x"}})
    assert_status(r, 422, "Invalid")
    assert r.json["details"]["causes"][0]["field"] == "handler"
    r = api.kube.get("/apis/node.k8s.io/v1/runtimeclasses/nope")
    assert_status(r, 404, "NotFound")
    assert r.json["message"] == 'runtimeclasses.node.k8s.io "nope" not found'
    # list and watch as for other kinds: a deletion reaches a watch
    events = []
    t = threading.Thread(target=lambda: events.extend(api.kube.watch(
        "/apis/node.k8s.io/v1/runtimeclasses", {"timeoutSeconds": "3"})))
    t.start()
    time.sleep(0.5)
    api.kubectl("delete", "runtimeclass", "kata")
    api.kubectl("delete", "node", "gpu-1")
    t.join()
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [("ADDED", "kata"), ("DELETED", "kata")]
    assert api.kube.get("/api/v1/nodes").json["items"] == []


def test_garbage_collector_looks_at_what_changed(api):
    """The collector works from changes (as the real one, from its informers): a dependent
    whose owner never existed goes; one owned by a kind this server does not serve stays; the
    dependents of an owner deleted long after them go too, with thousands of other objects
    stored."""
    ns = api.namespace("t-gc-changes")
    pod = {"spec": {"containers": [{"name": "c", "image": "x"}]}}
    s = api.session(ns, "owner")
    ghost = {"apiVersion": "aiprof.io/v1alpha1", "kind": "ProfilingSession", "name": "ghost",
             "uid": "00000000-0000-4000-8000-000000000000"}
    job = {"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "11111111-1111-4111-8111-111111111111"}
    real = {"apiVersion": "aiprof.io/v1alpha1", "kind": "ProfilingSession", "name": "owner",
            "uid": s["metadata"]["uid"]}
    for name, ref in (("of-ghost", ghost), ("of-job", job), ("of-owner", real)):
        r = api.kube.post(f"/api/v1/namespaces/{ns}/pods", dict(pod, metadata={"name": name, "ownerReferences": [ref]}))
        assert r.status == 201, r
    for i in range(300):
        assert api.kube.post(f"/api/v1/namespaces/{ns}/pods", dict(pod, metadata={"name": f"filler-{i}"})).status == 201

    def names():
        return {p["metadata"]["name"] for p in api.kube.get(f"/api/v1/namespaces/{ns}/pods").json["items"]
                if not p["metadata"]["name"].startswith("filler-")}
    deadline = time.monotonic() + 5
    while names() != {"of-job", "of-owner"} and time.monotonic() < deadline:
        time.sleep(0.05)
    assert names() == {"of-job", "of-owner"}
    time.sleep(1.0)                        # later passes leave the others alone
    assert names() == {"of-job", "of-owner"}
    api.kube.delete(f"{S}/namespaces/{ns}/profilingsessions/owner")
    deadline = time.monotonic() + 5
    while names() != {"of-job"} and time.monotonic() < deadline:
        time.sleep(0.05)
    assert names() == {"of-job"}
