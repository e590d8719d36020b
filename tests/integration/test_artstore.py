# SPDX-License-Identifier: MIT
"""The controller's in-cluster artifact store (docs/artifact-store.md; controller/artstore.h,
artupload.h, httpd.c) against the REAL Kubernetes API server (v1.32, tests/k8s/realk8s.py):
the uploader's token is a real pod-bound service-account token (TokenRequest with
--bound-object-kind Pod, audience aiprof.io/artifacts), reviewed by the real TokenReview
API; the pod is one that looks exactly as controller/injspec.c makes an injector of the
session in the injector namespace (labels, no ownerReference: none crosses namespaces),
recorded in the session's status as the injector of its target, and that stays Pending (no
node matches it); the ConfigMaps are created by the real API server and deleted with the session by its real
garbage collector (the kit runs the controller manager).

The controller here runs under the chart's RBAC (its objects applied, the chart's service
account's token in a kubeconfig): the grants the store needs are the chart's. It watches a
namespace of its own (it leaves the test's sessions alone), with leader election off; its log
is kept in a file, checked for the tokens, and it is stopped by its PID. Everything talks to
loopback only."""
import base64
import hashlib
import http.client
import json
import os
import re
import subprocess
import sys
import time
import uuid

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("BUILD", "build")
CONTROLLER = os.path.join(ROOT, BUILD, "aiprof-controller")
sys.path.insert(0, os.path.join(ROOT, "tests", "kubeapi"))
sys.path.insert(0, os.path.join(ROOT, "tests", "k8s"))

from harness import ControllerProcess, wait_for  # noqa: E402
import played  # noqa: E402
import realk8s  # noqa: E402
from test_install import INJ_NS, RELEASE_NS, one, render  # noqa: E402

pytestmark = [pytest.mark.skipif(not os.path.exists(CONTROLLER), reason=f"{CONTROLLER} not built")]

GROUP = "/apis/aiprof.io/v1alpha1"
AUDIENCE = "aiprof.io/artifacts"
CHUNK = 768 * 1024
MAX_FILE = 2 * 1024 * 1024              # --store-max-file-bytes 2Mi
MAX_SESSION = 3 * 1024 * 1024           # --store-max-session-bytes 3Mi


def sanitized():
    """An ASan build (BUILD=build-san) keeps freed memory in quarantine: no bound on RSS."""
    with open(CONTROLLER, "rb") as f:
        return b"__asan_init" in f.read()


def apply_chart_rbac(c, made):
    """The chart's RBAC objects (its defaults) applied to the real server; what was not there
    before goes to the front of made (to delete, in order). Returns the rendered docs."""
    docs = render()
    for d in docs:
        if d["kind"] in ("Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"):
            where = ["-n", d["metadata"]["namespace"]] if d["metadata"].get("namespace") else []
            if c.get(d["kind"].lower(), d["metadata"]["name"], *where) is None:
                made.insert(0, [d["kind"].lower(), d["metadata"]["name"], *where])
            c.apply(d, ns=d["metadata"].get("namespace"))
    return docs


@pytest.fixture(scope="module")
def k8s(tmp_path_factory):
    c = realk8s.require()
    c.apply_crds(os.path.join(ROOT, "crds"))
    made = []                           # what this module made (and so deletes)
    if c.get("namespace", RELEASE_NS) is None:
        c.ensure_namespace(RELEASE_NS)
        made.append(["namespace", RELEASE_NS])
    docs = apply_chart_rbac(c, made)
    sa_token = c.token(RELEASE_NS, one(docs, "ServiceAccount")["metadata"]["name"], seconds=1800)
    kubeconfig = c.kubeconfig_for(str(tmp_path_factory.mktemp("sa") / "kubeconfig"), sa_token)
    yield {"cluster": c, "kube": played.admin_client(c, "aiprof-tests-artstore/1"),
           "admin": played.admin_token(c.kubeconfig), "kubeconfig": kubeconfig, "sa_token": sa_token}
    for what in made:
        c.kubectl("delete", *what, "--wait=false")


def injector_pod(name, session, uid, labels=None, target="trainer-0", owned=False):
    """A pod as controller/injspec.c labels the injector of target pod `target` of the session
    (owned: with the ownerReference it has beside its session), Pending for good: no node has
    the label it selects."""
    meta = {"name": name, "labels": labels if labels is not None else {
        "aiprof.io/session-uid": uid, "aiprof.io/session": session["metadata"]["name"],
        "aiprof.io/target-pod": target,
        "aiprof.io/session-namespace": session["metadata"]["namespace"],
        "app.kubernetes.io/component": "aiprof-injector",
        "app.kubernetes.io/managed-by": "aiprof-controller"}}
    if owned:
        meta["ownerReferences"] = [{"apiVersion": "aiprof.io/v1alpha1", "kind": "ProfilingSession",
                                    "name": session["metadata"]["name"], "uid": uid,
                                    "controller": True, "blockOwnerDeletion": True}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {"nodeSelector": {"aiprof.io/test-no-such-node": "none"},
                     "containers": [{"name": "injector", "image": "aiprof/aiprof:test"}]}}


@pytest.fixture(scope="module")
def env(k8s, tmp_path_factory):
    """A namespace with a session S whose injector pods (of targets trainer-0 and trainer-1)
    run in the chart's injector namespace, as the controller makes them, and are recorded in
    S's status (phase Profiling, written here: the controller watches another namespace);
    in S's namespace another pod O and a look-alike F the tenant made (the injector's labels,
    an ownerReference to S); tokens of each; and one controller with small bounds (a second,
    with --http-auth none, made on demand)."""
    c, kube = k8s["cluster"], k8s["kube"]
    tag = uuid.uuid4().hex[:6]
    ns, idle = f"as-{tag}", f"as-idle-{tag}"
    for n in (ns, idle):
        assert kube.post("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                "metadata": {"name": n}}).status == 201
    started = []
    try:
        wait_for(lambda: kube.get(f"/api/v1/namespaces/{ns}/serviceaccounts/default").status == 200,
                 30, "the namespace's default service account")
        r = kube.post(f"{GROUP}/namespaces/{ns}/profilingsessions", {
            "apiVersion": "aiprof.io/v1alpha1", "kind": "ProfilingSession", "metadata": {"name": "s1"},
            "spec": {"targets": {"podName": "trainer-0"}, "duration": "30s"}})
        assert r.status == 201, r
        session = r.json
        uid = session["metadata"]["uid"]
        pods, where = {}, {}
        for name, pns, labels, target, owned in (
                (f"aiprof-s1-{tag}-0", INJ_NS, None, "trainer-0", False),
                (f"aiprof-s1-{tag}-1", INJ_NS, None, "trainer-1", False),
                # made by the admin's hand in the injector namespace, never recorded
                (f"aiprof-s1-{tag}-x", INJ_NS, None, "trainer-0", False),
                ("other", ns, {"app": "other"}, None, False),
                ("forged", ns, None, "trainer-0", True)):
            r = kube.post(f"/api/v1/namespaces/{pns}/pods", injector_pod(name, session, uid, labels, target, owned))
            assert r.status == 201, r
            pods[name], where[name] = r.json["metadata"]["uid"], pns
        r = kube.patch(f"{GROUP}/namespaces/{ns}/profilingsessions/s1/status", {"status": {
            "phase": "Profiling", "targets": [
                {"pod": "trainer-0", "container": "trainer", "injectorUID": pods[f"aiprof-s1-{tag}-0"]},
                {"pod": "trainer-1", "container": "trainer", "injectorUID": pods[f"aiprof-s1-{tag}-1"]}]}})
        assert r.status == 200, r

        def token(pod, audience=AUDIENCE):
            return c.kubectl("create", "token", "default", "-n", where[pod], "--audience", audience,
                             "--bound-object-kind", "Pod", "--bound-object-name", pod,
                             "--bound-object-uid", pods[pod], "--duration", "600s", ok=True).stdout.strip()

        def controller(*flags):
            args = [CONTROLLER, "--kubeconfig", k8s["kubeconfig"], "--no-leader-elect", "--namespace", idle,
                    "--metrics-addr", "127.0.0.1:0", "--injector-image", "aiprof/aiprof:test",
                    "--injector-namespace", INJ_NS,
                    "--store-url", "http://127.0.0.1:8080", "--store-max-file-bytes", "2Mi",
                    "--store-max-session-bytes", "3Mi", *flags]
            e = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
            p = ControllerProcess(args, str(tmp_path_factory.mktemp("ctl") / "controller.log"), e)
            started.append(p)
            p.wait_port()
            return p

        e = {"ns": ns, "kube": kube, "cluster": c, "session": session, "uid": uid,
             "token": token(f"aiprof-s1-{tag}-0"), "other_token": token("other"),
             "token_1": token(f"aiprof-s1-{tag}-1"), "forged_token": token("forged"),
             "unrecorded_token": token(f"aiprof-s1-{tag}-x"),
             "wrong_audience": token(f"aiprof-s1-{tag}-0", audience="not-aiprof"),
             "controller": controller}
        first = controller()
        e["port"], e["controller_pid"] = first.port, first.p.pid
        yield e
        for p in started:
            rc = p.stop()
            text = p.text()
            assert rc == 0, f"the controller exited {rc}: {text[-2000:]}"
            for t in (e["token"], e["token_1"], e["other_token"], e["wrong_audience"], e["forged_token"],
                      e["unrecorded_token"], k8s["admin"], k8s["sa_token"]):
                assert t not in text, "a token in the controller's log"
    finally:
        for p in started:
            p.stop()
        c.kubectl("delete", "pods", "-n", INJ_NS, "-l", f"aiprof.io/session-namespace={ns}",
                  "--grace-period=0", "--force", "--wait=false")
        for n in (ns, idle):
            c.kubectl("delete", "namespace", n, "--wait=false")


def put(port, path, body, token=None, sha=None, length=None, send_body=True):
    """(status, headers, text) of a PUT; sha None: the body's; length: a Content-Length other
    than the body's (send_body False: the headers alone)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.putrequest("PUT", path, skip_accept_encoding=True)
    conn.putheader("Content-Length", str(len(body) if length is None else length))
    conn.putheader("X-Aiprof-Sha256", sha if sha is not None else hashlib.sha256(body).hexdigest())
    if token:
        conn.putheader("Authorization", f"Bearer {token}")
    conn.endheaders()
    if send_body:
        conn.send(body)
    r = conn.getresponse()
    out = (r.status, {k.lower(): v for k, v in r.getheaders()}, r.read().decode(errors="replace"))
    conn.close()
    return out


def stored(e):
    r = e["kube"].get(f"/api/v1/namespaces/{e['ns']}/configmaps?labelSelector=aiprof.io%2Fsession-uid%3D{e['uid']}")
    assert r.status == 200, r
    return r.json["items"]


def joined(items, name):
    """An artifact's bytes, joined from its ConfigMaps in chunk order, and its annotations."""
    mine = [cm for cm in items if cm["metadata"]["annotations"]["aiprof.io/artifact-name"] == name]
    mine.sort(key=lambda cm: int(cm["metadata"]["annotations"]["aiprof.io/chunk"].split("/")[0]))
    data = b"".join(base64.b64decode(cm.get("binaryData", {}).get("data", "")) for cm in mine)
    return data, mine


def test_store_answers_and_stores(env):
    port, ns = env["port"], env["ns"]
    url = f"/v1/artifacts/{ns}/s1/trainer-0/timeline.json.gz"
    big = os.urandom(CHUNK + 250_000)       # two ConfigMaps
    sha = hashlib.sha256(big).hexdigest()

    st, hdr, text = put(port, url, big, env["token"])
    assert st == 201, text
    ans = json.loads(text)
    assert ans["name"] == "trainer-0/timeline.json.gz" and ans["size"] == len(big) and ans["sha256"] == sha
    want = hashlib.sha256(f"{env['uid']}/trainer-0/timeline.json.gz".encode()).hexdigest()[:12]
    assert ans["configMaps"] == [f"aiprof-{want}-0", f"aiprof-{want}-1"]

    data, cms = joined(stored(env), "trainer-0/timeline.json.gz")
    assert data == big, "the chunks joined are not the bytes sent"
    assert [cm["metadata"]["name"] for cm in cms] == ans["configMaps"]
    for i, cm in enumerate(cms):
        m = cm["metadata"]
        assert m["labels"] == {"app.kubernetes.io/managed-by": "aiprof-controller",
                               "aiprof.io/artifact": "true", "aiprof.io/session-uid": env["uid"]}
        assert m["annotations"] == {"aiprof.io/session": "s1", "aiprof.io/artifact-name": "trainer-0/timeline.json.gz",
                                    "aiprof.io/sha256": sha, "aiprof.io/size": str(len(big)),
                                    "aiprof.io/chunk": f"{i}/2"}
        assert [(o["kind"], o["name"], o["uid"], o["apiVersion"]) for o in m["ownerReferences"]] == \
            [("ProfilingSession", "s1", env["uid"], "aiprof.io/v1alpha1")]
        assert cm["immutable"] is True
        assert len(base64.b64decode(cm["binaryData"]["data"])) <= CHUNK

    # a retry is safe; another body under the name is not
    st, _, text = put(port, url, big, env["token"])
    assert st == 201, text
    other = os.urandom(1000)
    st, _, text = put(port, url, other, env["token"])
    assert st == 409 and "conflict" in text, (st, text)
    # the checksum is checked
    st, _, text = put(port, f"/v1/artifacts/{ns}/s1/trainer-0/a.txt", b"abc", env["token"], sha="0" * 64)
    assert st == 400 and "SHA-256" in text, (st, text)
    st, _, text = put(port, f"/v1/artifacts/{ns}/s1/trainer-0/a.txt", b"abc", env["token"], sha="xyz")
    assert st == 400 and "X-Aiprof-Sha256" in text, (st, text)
    # who uploads
    st, hdr, text = put(port, f"/v1/artifacts/{ns}/s1/trainer-0/a.txt", b"abc")
    assert st == 401 and hdr.get("www-authenticate", "").startswith("Bearer"), (st, text)
    st, _, text = put(port, f"/v1/artifacts/{ns}/s1/trainer-0/a.txt", b"abc", env["wrong_audience"])
    assert st == 401 and AUDIENCE in text, (st, text)
    st, _, text = put(port, f"/v1/artifacts/{ns}/s1/trainer-0/a.txt", b"abc", env["other_token"])
    assert st == 403 and f"this controller runs the injectors of session {ns}/s1 in {INJ_NS}" in text, (st, text)
    # an injector writes under its own target's name only
    st, _, text = put(port, f"/v1/artifacts/{ns}/s1/trainer-0/a.txt", b"abc", env["token_1"])
    assert st == 403 and "not the injector session s1 recorded for target trainer-0" in text, (st, text)
    st, _, text = put(port, f"/v1/artifacts/{ns}/nosuch/trainer-0/a.txt", b"abc", env["token"])
    assert st == 404, (st, text)
    # the token's namespace is the path's
    st, _, text = put(port, f"/v1/artifacts/default/s1/trainer-0/a.txt", b"abc", env["token"])
    assert st in (403, 404), (st, text)
    # bad names (libwebsockets resolves '.' and '..' components of a path, as HTTP servers
    # do, before the name is seen: docs/artifact-store.md)
    for bad in ("a:b", "sp%20ace", "x" * 201, "trainer-0/"):
        st, _, text = put(port, f"/v1/artifacts/{ns}/s1/{bad}", b"abc", env["token"])
        assert st == 400 and "name" in text, (bad, st, text)
    st, _, text = put(port, f"/v1/artifacts/{ns}/S1/x", b"abc", env["token"])
    assert st == 400 and "session" in text, (st, text)
    # bounds: the file's before its body is read; the session's total
    st, _, text = put(port, f"/v1/artifacts/{ns}/s1/trainer-0/huge", b"", env["token"], length=MAX_FILE + 1,
                      send_body=False)
    assert st == 413 and "--store-max-file-bytes" in text, (st, text)
    second = os.urandom(MAX_FILE)            # 1,036,432 + 2 MiB <= 3 MiB: stored
    st, _, text = put(port, f"/v1/artifacts/{ns}/s1/trainer-0/stacks.folded", second, env["token"])
    assert st == 201, (st, text)
    st, _, text = put(port, f"/v1/artifacts/{ns}/s1/trainer-0/summary.json", os.urandom(100_000), env["token"])
    assert st == 413 and "--store-max-session-bytes" in text, (st, text)
    # an empty artifact is one ConfigMap
    st, _, text = put(port, f"/v1/artifacts/{ns}/s1/trainer-0/empty", b"", env["token"])
    assert st == 201 and len(json.loads(text)["configMaps"]) == 1, (st, text)
    data, _ = joined(stored(env), "trainer-0/stacks.folded")
    assert data == second
    # every answer is counted
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", "/metrics", headers={"Authorization": f"Bearer {played.admin_token(env['cluster'].kubeconfig)}"})
    metrics = conn.getresponse().read().decode()
    assert re.search(r'^aiprof_artifact_uploads_total\{code="201"\} 4$', metrics, re.M), metrics
    assert re.search(r"^aiprof_artifact_uploads_in_flight 0$", metrics, re.M)


def test_only_the_injector_the_session_recorded_uploads(env):
    """Issue 30: the store binds an upload to the session's own injector. A pod the tenant
    made in their namespace with the injector's labels, an ownerReference to the session and
    a projected token for the store's audience gets 403, as does a look-alike in the injector
    namespace that the session's status never recorded; the recorded injector is refused too
    once the session has finished. Nothing of theirs is stored."""
    port, ns, kube = env["port"], env["ns"], env["kube"]
    url = f"/v1/artifacts/{ns}/s1/trainer-0/forged.json"
    st, _, text = put(port, url, b"{}", env["forged_token"])
    assert st == 403 and f"the token is of a pod of namespace {ns}" in text, (st, text)
    st, _, text = put(port, url, b"{}", env["unrecorded_token"])
    assert st == 403 and "not the injector session s1 recorded for target trainer-0" in text, (st, text)
    status = f"{GROUP}/namespaces/{ns}/profilingsessions/s1/status"
    assert kube.patch(status, {"status": {"phase": "Succeeded"}}).status == 200
    try:
        st, _, text = put(port, url, b"{}", env["token"])
        assert st == 403 and "has finished (Succeeded)" in text, (st, text)
    finally:
        assert kube.patch(status, {"status": {"phase": "Profiling"}}).status == 200
    assert not [cm for cm in stored(env)
                if cm["metadata"]["annotations"]["aiprof.io/artifact-name"] == "trainer-0/forged.json"]


def test_uploads_at_once_are_bounded(env):
    """Four uploads whose bodies have not come yet hold the four places: a fifth is answered
    503 with Retry-After; once they went away, uploads are taken again."""
    port, ns = env["port"], env["ns"]
    # a token that is not one is refused before the body is read: it holds no place while it
    # would send slowly (each answer below comes with no body sent)
    for i in range(6):
        st, _, text = put(port, f"/v1/artifacts/{ns}/s1/trainer-0/slow-{i}", b"", "not-a-token",
                          length=1000, send_body=False)
        assert st == 401, (st, text)
    st, _, text = put(port, f"/v1/artifacts/{ns}/s1/trainer-0/slow", b"", env["other_token"],
                      length=1000, send_body=False)
    assert st == 403, (st, text)
    held = []
    for i in range(4):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        conn.putrequest("PUT", f"/v1/artifacts/{ns}/s1/trainer-0/held-{i}", skip_accept_encoding=True)
        conn.putheader("Content-Length", "100")
        conn.putheader("X-Aiprof-Sha256", "0" * 64)
        conn.putheader("Authorization", f"Bearer {env['token']}")
        conn.endheaders()
        held.append(conn)
    wait_for(lambda: put(port, f"/v1/artifacts/{ns}/s1/trainer-0/fifth", b"5", env["token"])[0] == 503,
             10, "the fifth upload to be refused")
    st, hdr, text = put(port, f"/v1/artifacts/{ns}/s1/trainer-0/fifth", b"5", env["token"])
    assert st == 503 and hdr.get("retry-after") and "uploads are under way" in text, (st, hdr, text)
    for conn in held:
        conn.close()
    wait_for(lambda: put(port, f"/v1/artifacts/{ns}/s1/trainer-0/fifth", b"5", env["token"])[0] != 503,
             10, "the places to be given back")
    st, _, text = put(port, f"/v1/artifacts/{ns}/s1/trainer-0/fifth", b"5", env["token"])
    assert st in (201, 413), (st, text)       # 413 once the earlier test filled the session


def test_a_file_at_the_default_bound(env):
    """16 MiB (the default --store-max-file-bytes) to a controller with the default bounds: 22
    ConfigMaps, joined back exactly. Prints the time the PUT took and the controller's peak
    RSS (VmHWM), which holds the body once and one ConfigMap's JSON at a time."""
    p = env["controller"]("--store-max-file-bytes", "16Mi", "--store-max-session-bytes", "64Mi")
    body = os.urandom(16 << 20)
    t0 = time.monotonic()
    st, _, text = put(p.port, f"/v1/artifacts/{env['ns']}/s1/trainer-0/big.bin", body, env["token"])
    took = time.monotonic() - t0
    assert st == 201, (st, text)
    assert len(json.loads(text)["configMaps"]) == 22
    data, _ = joined(stored(env), "trainer-0/big.bin")
    assert data == body
    with open(f"/proc/{p.p.pid}/status") as f:
        hwm = next(int(line.split()[1]) for line in f if line.startswith("VmHWM:"))
    print(f"16 MiB stored as 22 ConfigMaps in {took:.2f} s; controller peak RSS {hwm / 1024:.1f} MiB")
    assert sanitized() or hwm < 200 * 1024, f"peak RSS {hwm} KiB"


def test_the_injectors_client_uploads_a_folder(env, tmp_path):
    """`aiprof upload DIR http://.../v1/artifacts/NS/SESSION/POD` (injector/artifacts/
    storeput.c, the client injector pods run) against this endpoint: every file, then the
    manifest, each stored under POD/ and joined back exactly."""
    # the client is not what is tested here: the plain build's (an ASan build of it may lag)
    aiprof = os.environ.get("AIPROF_BIN") or os.path.join(ROOT, "build", "aiprof")
    if not os.path.exists(aiprof):
        pytest.skip(f"{aiprof} not built")
    p = env["controller"]("--store-max-file-bytes", "16Mi", "--store-max-session-bytes", "64Mi")
    out = tmp_path / "out"
    (out / "flame").mkdir(parents=True)
    files = {"summary.json": b'{"findings":[]}', "flame/cpu.svg": os.urandom(CHUNK + 10), "stacks.folded": b"a;b 1\n"}
    for name, data in files.items():
        (out / name).write_bytes(data)
    token_file = tmp_path / "token"
    token_file.write_text(env["token_1"])       # the injector of trainer-1
    r = subprocess.run([aiprof, "upload", str(out), f"http://127.0.0.1:{p.port}/v1/artifacts/{env['ns']}/s1/trainer-1"],
                       capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, AIPROF_STORE_TOKEN_FILE=str(token_file)))
    assert r.returncode == 0, r.stdout + r.stderr
    items = stored(env)
    names = {cm["metadata"]["annotations"]["aiprof.io/artifact-name"] for cm in items}
    assert {f"trainer-1/{n}" for n in files} | {"trainer-1/manifest.json"} <= names, names
    for name, data in files.items():
        assert joined(items, f"trainer-1/{name}")[0] == data, name
    manifest = json.loads(joined(items, "trainer-1/manifest.json")[0])
    assert manifest, manifest


def test_store_needs_kubernetes_auth(env):
    p = env["controller"]("--http-auth", "none")
    st, _, text = put(p.port, f"/v1/artifacts/{env['ns']}/s1/trainer-0/x", b"abc", env["token"])
    assert st == 403 and "--http-auth=kubernetes" in text, (st, text)


def store_session(e, ns, name):
    """A session of namespace ns in the store, running (phase Profiling), whose injector of
    trainer-0 is a pod of the injector namespace its status recorded: (session UID, that
    pod's token for the store)."""
    kube, c = e["kube"], e["cluster"]
    r = kube.post(f"{GROUP}/namespaces/{ns}/profilingsessions", {
        "apiVersion": "aiprof.io/v1alpha1", "kind": "ProfilingSession", "metadata": {"name": name},
        "spec": {"targets": {"podName": "trainer-0"}, "duration": "30s"}})
    assert r.status == 201, r
    session, uid = r.json, r.json["metadata"]["uid"]
    pod = f"aiprof-{name}-{uid[:8]}"
    r = kube.post(f"/api/v1/namespaces/{INJ_NS}/pods", injector_pod(pod, session, uid))
    assert r.status == 201, r
    pod_uid = r.json["metadata"]["uid"]
    r = kube.patch(f"{GROUP}/namespaces/{ns}/profilingsessions/{name}/status", {"status": {
        "phase": "Profiling", "targets": [{"pod": "trainer-0", "container": "trainer", "injectorUID": pod_uid}]}})
    assert r.status == 200, r
    token = c.kubectl("create", "token", "default", "-n", INJ_NS, "--audience", AUDIENCE, "--bound-object-kind",
                      "Pod", "--bound-object-name", pod, "--bound-object-uid", pod_uid, "--duration", "600s",
                      ok=True).stdout.strip()
    return uid, token


@pytest.fixture
def quota_ns(env):
    """A namespace of its own (the store's bounds are per namespace), removed after."""
    ns = f"as-q-{uuid.uuid4().hex[:6]}"
    assert env["kube"].post("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                    "metadata": {"name": ns}}).status == 201
    yield ns
    c = env["cluster"]
    c.kubectl("delete", "pods", "-n", INJ_NS, "-l", f"aiprof.io/session-namespace={ns}",
              "--grace-period=0", "--force", "--wait=false")
    c.kubectl("delete", "namespace", ns, "--wait=false")


def test_the_namespace_quota_holds_across_finished_sessions(env, quota_ns):
    """--store-max-namespace-bytes counts every session's artifacts the store keeps in the
    namespace, finished sessions' included (they stay until the session is deleted): 20
    sessions, each uploading 100,000 bytes and then finishing, under a 1 MiB bound — the
    first 10 are stored, the rest get 413 saying what to do, and the namespace never holds
    more than the bound. --store-max-namespace-sessions: a new session past the count of
    sessions with artifacts is refused too."""
    ns, kube = quota_ns, env["kube"]
    p = env["controller"]("--store-max-namespace-bytes", "1Mi", "--store-max-namespace-sessions", "100")
    sessions = [(f"q-{i}", *store_session(env, ns, f"q-{i}")) for i in range(20)]
    codes = []
    for name, uid, token in sessions:
        st, _, text = put(p.port, f"/v1/artifacts/{ns}/{name}/trainer-0/summary.json", os.urandom(100_000), token)
        codes.append(st)
        if st == 413:
            assert "--store-max-namespace-bytes 1048576" in text and "delete finished sessions" in text, text
        else:
            assert st == 201, (st, text)
        # the window is over: the session finished, its artifacts stay
        assert kube.patch(f"{GROUP}/namespaces/{ns}/profilingsessions/{name}/status",
                          {"status": {"phase": "Succeeded"}}).status == 200
    assert codes == [201] * 10 + [413] * 10, codes
    r = kube.get(f"/api/v1/namespaces/{ns}/configmaps?labelSelector=aiprof.io%2Fartifact%3Dtrue")
    kept = sum(len(base64.b64decode(cm.get("binaryData", {}).get("data", ""))) for cm in r.json["items"])
    assert kept == 1_000_000 <= 1 << 20, kept
    # the count of sessions: 10 have artifacts; an 11th, new one is refused at 10
    p2 = env["controller"]("--store-max-namespace-sessions", "10")
    _, token = store_session(env, ns, "q-new")
    st, _, text = put(p2.port, f"/v1/artifacts/{ns}/q-new/trainer-0/summary.json", b"{}", token)
    assert st == 413 and "--store-max-namespace-sessions" in text and "10 sessions" in text, (st, text)


def controller_user():
    from test_install import one as one_, render as render_
    sa = one_(render_(), "ServiceAccount")["metadata"]["name"]
    return f"system:serviceaccount:{RELEASE_NS}:{sa}"


def vm(pid):
    with open(f"/proc/{pid}/status") as f:
        return {k: int(v.split()[0]) for k, v in (line.split(":", 1) for line in f) if k in ("VmRSS", "VmHWM")}


def test_dropped_requests_cost_no_reviews(env):
    """A request whose client has gone is taken out of the store worker's queue before any
    TokenReview: 50 headers-only uploads (a valid token, Content-Length 2 MiB), each dropped
    at once, cause at most 4 TokenReviews (the real API server's audit log), and the
    controller's memory stays flat (VmRSS, VmHWM of its PID before and after)."""
    import socket
    port, ns, c = env["port"], env["ns"], env["cluster"]
    put(port, f"/v1/artifacts/{ns}/s1/trainer-0/warm.txt", b"w", env["token"])     # warm
    time.sleep(1.5)
    pid = env["controller_pid"]
    before = vm(pid)
    since = c.audit_offset()
    head = (f"PUT /v1/artifacts/{ns}/s1/trainer-0/dropped HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Content-Length: {MAX_FILE}\r\nX-Aiprof-Sha256: {'0' * 64}\r\n"
            f"Authorization: Bearer {env['token']}\r\n\r\n").encode()
    for _ in range(50):
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        s.sendall(head)
        s.close()
    time.sleep(3)                       # what the worker would still do, and the audit batch
    after = vm(pid)
    reqs, _ = c.audit(controller_user(), since)
    reviews = [e for e in reqs if (e.get("objectRef") or {}).get("resource") == "tokenreviews"]
    print(f"50 dropped uploads: {len(reviews)} TokenReviews; VmRSS {before['VmRSS']} -> {after['VmRSS']} KiB, "
          f"VmHWM {before['VmHWM']} -> {after['VmHWM']} KiB")
    assert len(reviews) <= 4, f"{len(reviews)} TokenReviews for 50 dropped requests"
    assert sanitized() or after["VmRSS"] - before["VmRSS"] < 8 * 1024, (before, after)
    assert sanitized() or after["VmHWM"] - before["VmHWM"] < 8 * 1024, (before, after)
    # and the store still answers
    st, _, text = put(port, f"/v1/artifacts/{ns}/s1/trainer-0/after-drop.txt", b"a", env["token"])
    assert st in (201, 413), (st, text)


def test_trickling_uploads_are_closed_at_the_total_deadline(env):
    """--store-upload-timeout 6s: four uploads that send their body a byte every 2 s (each
    byte resets libwebsockets' own body timeout) hold the four places only until 6 s after
    their headers: then each is closed, however slowly bytes still come, and a fifth upload
    is taken."""
    import socket
    import threading
    ns = env["ns"]
    p = env["controller"]("--store-upload-timeout", "6s")
    head = (f"PUT /v1/artifacts/{ns}/s1/trainer-0/trickle HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Content-Length: 100\r\nX-Aiprof-Sha256: {'0' * 64}\r\n"
            f"Authorization: Bearer {env['token']}\r\n\r\n").encode()
    closed_after = [None] * 4

    def trickle(i):
        s = socket.create_connection(("127.0.0.1", p.port), timeout=30)
        t0 = time.monotonic()
        s.sendall(head)
        try:
            for _ in range(15):             # 30 s of trickling at most
                time.sleep(2)
                s.sendall(b"x")
                s.settimeout(0.01)
                try:
                    if s.recv(4096) == b"":
                        break
                except socket.timeout:
                    pass
                s.settimeout(30)
        except OSError:
            pass
        closed_after[i] = time.monotonic() - t0
        s.close()
    threads = [threading.Thread(target=trickle, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    time.sleep(3)
    st, _, text = put(p.port, f"/v1/artifacts/{ns}/s1/trainer-0/fifth-early", b"5", env["token"])
    assert st == 503 and "uploads are under way" in text, (st, text)
    for t in threads:
        t.join(40)
    print(f"trickling uploads closed after {[round(x, 1) for x in closed_after]} s (deadline 6 s)")
    assert all(x is not None and 5 <= x <= 11 for x in closed_after), closed_after
    st, _, text = put(p.port, f"/v1/artifacts/{ns}/s1/trainer-0/after-trickle", b"5", env["token"])
    assert st in (201, 413), (st, text)
    _, metrics = p.http("/metrics", token=played.admin_token(env["cluster"].kubeconfig))
    assert re.search(r"^aiprof_artifact_uploads_timed_out_total 4$", metrics, re.M), metrics


# last: the module's session s1 is gone after it
def test_deleting_the_session_deletes_its_artifacts(env):
    port, ns, kube = env["port"], env["ns"], env["kube"]
    st, _, text = put(port, f"/v1/artifacts/{ns}/s1/trainer-0/manifest.json", b"{}", env["token"])
    assert st in (201, 413), (st, text)       # the bound may be reached by the test before
    assert stored(env)
    r = kube.delete(f"{GROUP}/namespaces/{ns}/profilingsessions/s1")
    assert r.status in (200, 202), r
    wait_for(lambda: not stored(env), 90, "the garbage collector to delete the session's ConfigMaps")
