# SPDX-License-Identifier: MIT
"""`kubectl aiprof` (controller/kubectl-aiprof) treats what the cluster says as untrusted input
(issue 30), against the REAL Kubernetes API server (v1.32, tests/k8s/realk8s.py) with the kit's
real kubectl and the real plugin.

The sessions and their ConfigMaps are made here as objects on the API server, as the controller
makes them (the status through the status subresource; the ConfigMaps named, annotated, labelled
and owned as controller/artstore.c does): what is under test is what the plugin does with them,
and the injector chain that would write them is e2e/test_store.py's. Beside them, what a co-tenant
who may create ConfigMaps in the namespace, or a target that names its threads, can plant: a
decoy ConfigMap with the session's label and a hostile aiprof.io/chunk
(`0/BASH_VERSINFO[$(touch ...)]`, which today's plugin ran), a ConfigMap squatting on the name the
store would give a chunk, artifact names with shell metacharacters, and terminal escapes in the
status's message, targets and findings and in stacks.txt.

What a user checks: the marker file the hostile text would create is never there, the exit code
and the message say what was refused, the genuine artifacts are fetched byte-identical, and the
terminal gets every escape written as \\xNN (no ESC, BEL, CR or C1 byte reaches stdout/stderr).

AIPROF_TEST_PLUGIN runs another plugin file (an old one, to see these tests fail on it)."""
import base64
import hashlib
import json
import os
import re
import subprocess
import sys
import time
import uuid

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "k8s"))

import realk8s  # noqa: E402

PLUGIN = os.environ.get("AIPROF_TEST_PLUGIN") or os.path.join(ROOT, "controller", "kubectl-aiprof")
API = "profilingsessions.aiprof.io"
CHUNK = 768 * 1024                      # controller/artstore.h ARTSTORE_CHUNK_MAX
STORE = "http://10.0.0.1:8080/v1/artifacts"  # never reached: the plugin reads the API server
# every control character but tab and newline: C0, DEL, and C1 in UTF-8 (must never reach a
# terminal raw)
CONTROLS = "".join(chr(c) for c in [*range(0, 9), *range(11, 32), *range(127, 160)])
HOSTILE = "\x1b]0;owned\x07\x1b[2J\r\x1b[31mRED\x08\x7f\u009b2J"


@pytest.fixture(scope="module")
def k8s():
    c = realk8s.require()
    c.apply_crds(os.path.join(ROOT, "crds"))
    ns = f"plugin-{uuid.uuid4().hex[:6]}"
    c.ensure_namespace(ns)
    yield c, ns
    c.kubectl("delete", "namespace", ns, "--wait=false")


def kubectl(c, ns, *args, input=None):
    return c.kubectl("-n", ns, *args, ok=True, input=input)


def plugin_env(c, tmp_path):
    e = c.kubectl_env()
    e["PATH"] = c.bin + os.pathsep + e.get("PATH", "")
    e["KUBECTL"] = c.kubectl_bin
    e["TMPDIR"] = str(tmp_path / "tmp")
    os.makedirs(e["TMPDIR"], exist_ok=True)
    e["AIPROF_PWNED"] = str(tmp_path / "PWNED")   # where the hostile text would touch
    return e


def plugin(c, ns, tmp_path, *args, timeout=120):
    return subprocess.run(["bash", PLUGIN, "-n", ns, *args], capture_output=True, timeout=timeout,
                          env=plugin_env(c, tmp_path), cwd=str(tmp_path))


def assert_no_raw_escapes(r):
    for stream in (r.stdout, r.stderr):
        raw = sorted({x for x in stream if (x < 32 and x not in (9, 10)) or x == 127})
        raw += re.findall(rb"\xc2[\x80-\x9f]", stream)
        assert not raw, (raw, stream[-3000:])


def cm_name(uid, name, chunk):
    """controller/artstore.c artstore__cm_name()."""
    return f"aiprof-{hashlib.sha256(f'{uid}/{name}'.encode()).hexdigest()[:12]}-{chunk}"


def store_configmaps(session, uid, ns, name, data):
    """The ConfigMaps the store keeps artifact `name` in (controller/artstore.c)."""
    n = max(1, (len(data) + CHUNK - 1) // CHUNK)
    out = []
    for i in range(n):
        out.append({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {
                "name": cm_name(uid, name, i), "namespace": ns,
                "labels": {"app.kubernetes.io/managed-by": "aiprof-controller", "aiprof.io/artifact": "true",
                           "aiprof.io/session-uid": uid},
                "annotations": {"aiprof.io/session": session, "aiprof.io/artifact-name": name,
                                "aiprof.io/sha256": hashlib.sha256(data).hexdigest(),
                                "aiprof.io/size": str(len(data)), "aiprof.io/chunk": f"{i}/{n}"},
                "ownerReferences": [{"apiVersion": "aiprof.io/v1alpha1", "kind": "ProfilingSession",
                                     "name": session, "uid": uid, "controller": True}]},
            "immutable": True,
            "binaryData": {"data": base64.b64encode(data[i * CHUNK:(i + 1) * CHUNK]).decode()}})
    return out


def create(c, ns, objs):
    kubectl(c, ns, "create", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": objs}))


def stacks_txt():
    """stacks.txt as `aiprof stacks` writes it, of a target that named a thread with escapes."""
    return ("Process 4242 python3 (2 threads)\n"
            "Thread 4242 python3: sleeping, blocked for 1.2 s\n"
            "  #0 do_nanosleep [kernel]\n"
            f"Thread 4243 {HOSTILE}: running for 0.3 s\n"
            f"  #0 train_step{HOSTILE} (train.py:12)\n"
            f"  #1 every{CONTROLS}control\n").encode()


def artifacts(target="trainer-0"):
    """A target's artifacts and its manifest.json (injector/artifacts/upload.c's layout)."""
    files = {"stacks.txt": stacks_txt(), "summary.json": b'{"targets":[]}\n',
             # over one ConfigMap: stored as two chunks
             "report.html": b"<html>" + os.urandom(CHUNK // 2).hex().encode() + b"</html>\n"}
    lines = [json.dumps({"name": k, "key": f"{target}/{k}", "url": "", "size": len(v),
                         "sha256": hashlib.sha256(v).hexdigest()}, separators=(",", ":"))
             for k, v in files.items()]
    manifest = ('{"created":"2026-01-01T00:00:00Z","location":"","artifacts":[\n'
                + ",\n".join(lines) + '],"total_bytes":0}\n').encode()
    return files, manifest


def make_session(c, ns, name, status_extra=None, objs_before=()):
    """A finished session with one target's artifacts in the store, as the controller leaves it;
    objs_before(uid) are created first (what another user planted). Returns (uid, files)."""
    kubectl(c, ns, "create", "-f", "-", input=json.dumps({
        "apiVersion": "aiprof.io/v1alpha1", "kind": "ProfilingSession", "metadata": {"name": name},
        "spec": {"targets": {"podName": "trainer-0"}, "duration": "2s"}}))
    uid = c.get(API, name, "-n", ns)["metadata"]["uid"]
    files, manifest = artifacts()
    planted = [o for f in objs_before for o in f(uid)]
    if planted:
        create(c, ns, planted)
    squatted = {o["metadata"]["name"] for o in planted}
    stored = []
    for k, v in [*files.items(), ("manifest.json", manifest)]:
        stored += [o for o in store_configmaps(name, uid, ns, f"trainer-0/{k}", v)
                   if o["metadata"]["name"] not in squatted]
    create(c, ns, stored)
    patch_status(c, ns, name, uid, manifest, status_extra)
    return uid, files


def patch_status(c, ns, name, uid, manifest, extra=None):
    st = {"phase": "Succeeded", "targetCount": 1,
          "artifacts": [{"name": "manifest.json", "target": "trainer-0",
                         "url": f"{STORE}/{ns}/{name}/trainer-0/manifest.json", "size": len(manifest),
                         "sha256": hashlib.sha256(manifest).hexdigest()}],
          "targets": [{"pod": "trainer-0", "container": "trainer", "state": "Succeeded"}]}
    for k, v in (extra or {}).items():
        st[k] = st.get(k, []) + v if isinstance(v, list) else v
    kubectl(c, ns, "patch", API, name, "--subresource=status", "--type=merge", "-p", json.dumps({"status": st}))


def decoy(ns, payload):
    """A ConfigMap anyone with create on configmaps can make: the session's label, the
    manifest's artifact name, a hostile chunk annotation, no ownerReference; its name sorts
    before the store's."""
    def make(uid):
        return [{"apiVersion": "v1", "kind": "ConfigMap",
                 "metadata": {"name": f"a-decoy-{uid[:8]}", "namespace": ns, "labels": {"aiprof.io/session-uid": uid},
                              "annotations": {"aiprof.io/artifact-name": "trainer-0/manifest.json",
                                              "aiprof.io/chunk": payload}},
                 "binaryData": {"data": base64.b64encode(b"{}").decode()}}]
    return make


PAYLOAD = "0/BASH_VERSINFO[$(touch $AIPROF_PWNED)]"
HOSTILE_STATUS = {
    "message": f"done {HOSTILE}",
    "targets": [{"pod": f"trainer-1;$(touch $AIPROF_PWNED){HOSTILE}", "container": "x",
                 "state": "Failed", "reason": f"Bad{HOSTILE}", "message": f"`touch $AIPROF_PWNED`{HOSTILE}"}],
    "findings": [{"category": "PageableMemcpy", "severity": "Warning", "target": "trainer-0",
                  "summary": f"thread {HOSTILE} $(touch $AIPROF_PWNED)"}],
}


def test_get_ignores_a_decoy_configmap_and_shows_escapes_escaped(k8s, tmp_path):
    c, ns = k8s
    _, files = make_session(c, ns, "decoy", HOSTILE_STATUS, [decoy(ns, PAYLOAD)])
    out = tmp_path / "out"
    r = plugin(c, ns, tmp_path, "get", "decoy", "-o", str(out))
    err = r.stderr.decode(errors="replace")
    assert not (tmp_path / "PWNED").exists(), "the decoy's aiprof.io/chunk ran a command:\n" + err
    assert r.returncode == 0, err + r.stdout.decode(errors="replace")
    # the decoy is named and ignored; the genuine artifacts are fetched, byte-identical
    assert "ignored ConfigMap \"a-decoy-" in err and "not one the store made" in err, err
    for k, v in files.items():
        assert (out / "trainer-0" / k).read_bytes() == v, k
    # the finding's text from the target is shown, its escapes written out
    text = r.stdout.decode()
    assert "[Warning] PageableMemcpy (trainer-0): thread \\x1b]0;owned\\a\\x1b[2J\\r" in text, text
    assert "$(touch $AIPROF_PWNED)" in text
    assert_no_raw_escapes(r)


def test_get_refuses_a_configmap_squatting_on_the_stores_name(k8s, tmp_path):
    """A ConfigMap made first under the name the store gives the manifest's chunk, with the
    session's ownerReference copied (the API server does not check it) and a hostile chunk: the
    plugin refuses the artifact, says which ConfigMap and why, and runs nothing."""
    c, ns = k8s

    def squat(uid):
        o = store_configmaps("squat", uid, ns, "trainer-0/manifest.json", b"{}")[0]
        o["metadata"]["annotations"]["aiprof.io/chunk"] = PAYLOAD
        return [o]
    uid, _ = make_session(c, ns, "squat", None, [squat])
    out = tmp_path / "out"
    r = plugin(c, ns, tmp_path, "get", "squat", "-o", str(out))
    err = r.stderr.decode(errors="replace")
    assert not (tmp_path / "PWNED").exists(), "the squatter's aiprof.io/chunk ran a command:\n" + err
    assert r.returncode == 7, err
    cm = cm_name(uid, "trainer-0/manifest.json", 0)
    assert f"trainer-0/manifest.json: ConfigMap {cm} is not the store's chunk 0/1 of it" in err, err
    assert "aiprof.io/chunk \"0/BASH_VERSINFO[$(touch $AIPROF_PWNED)]\"" in err, err
    assert "someone else may have made it; not fetched" in err, err
    assert not (out / "trainer-0" / "manifest.json").exists()
    assert_no_raw_escapes(r)


def test_get_refuses_names_and_numbers_that_are_not_aiprofs(k8s, tmp_path):
    """Artifact names with shell metacharacters and escapes, a size that is not a number, a
    digest that is not one: each refused by name (escaped), nothing run, exit 7; the genuine
    target's artifacts are still fetched."""
    c, ns = k8s
    bad = [{"name": "summary.json", "target": "trainer-0",
            "url": f"{STORE}/{ns}/names/trainer-0/$(touch $AIPROF_PWNED){HOSTILE}.json",
            "size": 10, "sha256": "0" * 64},
           {"name": "timeline.json.gz", "target": "trainer-0",
            "url": f"{STORE}/{ns}/names/trainer-0/timeline.json.gz", "sha256": "0" * 64},
           {"name": "flamegraph.svg", "target": "trainer-0",
            "url": f"{STORE}/{ns}/names/trainer-0/flamegraph.svg", "size": 3, "sha256": "f" * 64}]
    _, files = make_session(c, ns, "names", {"artifacts": bad})
    out = tmp_path / "out"
    r = plugin(c, ns, tmp_path, "get", "names", "-o", str(out))
    err = r.stderr.decode(errors="replace")
    assert not (tmp_path / "PWNED").exists(), err
    assert r.returncode == 7, err
    assert "not an URL of its artifacts in the store; skipped" in err and "$(touch $AIPROF_PWNED)\\x1b]0;" in err, err
    assert "trainer-0/timeline.json.gz: listed with size '<nil>'" in err, err
    assert "trainer-0/flamegraph.svg: chunk 1 of 1" in err and "is missing" in err, err
    for k, v in files.items():
        assert (out / "trainer-0" / k).read_bytes() == v, k
    assert_no_raw_escapes(r)


def test_stacks_prints_a_targets_thread_names_escaped(k8s, tmp_path):
    """`kubectl aiprof stacks pod/trainer-0`: the session is made by the plugin; the test then
    plays the controller (ConfigMaps, status) while the plugin waits, a decoy planted beside.
    stacks.txt, whose thread and frame names the target chose, is printed with its escapes
    written out; the Failed target's message too; the spec went through a private folder."""
    c, ns = k8s
    if c.get("pod", "trainer-0", "-n", ns) is None:
        kubectl(c, ns, "create", "-f", "-", input=json.dumps({
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "trainer-0"},
            "spec": {"nodeSelector": {"aiprof.io/no-such-node": "true"},
                     "containers": [{"name": "trainer", "image": "localhost/busybox:1"}]}}))
    p = subprocess.Popen(["bash", PLUGIN, "-n", ns, "stacks", "pod/trainer-0", "-c", "trainer", "--name", "now",
                          "-o", str(tmp_path / "now")], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         env=plugin_env(c, tmp_path), cwd=str(tmp_path))
    try:
        deadline = time.monotonic() + 30
        while c.get(API, "now", "-n", ns) is None:
            assert p.poll() is None and time.monotonic() < deadline, p.communicate(timeout=5)
            time.sleep(0.3)
        s = c.get(API, "now", "-n", ns)
        assert s["spec"]["injection"]["method"] == "EBPFOnly"
        uid = s["metadata"]["uid"]
        files, manifest = artifacts()
        objs = decoy(ns, PAYLOAD)(uid)
        for k, v in [*files.items(), ("manifest.json", manifest)]:
            objs += store_configmaps("now", uid, ns, f"trainer-0/{k}", v)
        create(c, ns, objs)
        patch_status(c, ns, "now", uid, manifest, HOSTILE_STATUS)
        stdout, stderr = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    r = subprocess.CompletedProcess(p.args, p.returncode, stdout, stderr)
    err = stderr.decode(errors="replace")
    assert not (tmp_path / "PWNED").exists(), err
    assert p.returncode == 0, err
    text = stdout.decode()
    assert text.startswith("== trainer-0\nProcess 4242 python3"), text
    assert "Thread 4243 \\x1b]0;owned\\x07\\x1b[2J\\x0d\\x1b[31mRED\\x08\\x7f\\xc2\\x9b2J: running" in text, text
    assert "ignored ConfigMap \"a-decoy-" in err, err
    every = "".join(f"\\x{c:02x}" for c in range(0, 9)) + "".join(f"\\x{c:02x}" for c in range(11, 32)) + \
        "\\x7f" + "".join(f"\\xc2\\x{c:02x}" for c in range(128, 160))
    assert f"  #1 every{every}control\n" in text, text
    assert (tmp_path / "now" / "trainer-0" / "stacks.txt").read_bytes() == files["stacks.txt"]
    assert_no_raw_escapes(r)
    # the spec's temporary file was in a private folder, and nothing is left behind
    assert os.listdir(tmp_path / "tmp") == [], os.listdir(tmp_path / "tmp")


def test_failed_session_shows_the_targets_messages_escaped(k8s, tmp_path):
    c, ns = k8s
    make_session(c, ns, "failed", {**HOSTILE_STATUS, "phase": "Failed"})
    r = plugin(c, ns, tmp_path, "get", "failed", "-o", str(tmp_path / "out"))
    err = r.stderr.decode(errors="replace")
    assert not (tmp_path / "PWNED").exists(), err
    assert r.returncode == 1, err
    assert "failed:\n  trainer-0: Succeeded :" in err, err
    assert "  trainer-1;$(touch $AIPROF_PWNED)\\x1b]0;owned\\a" in err, err
    assert_no_raw_escapes(r)
    # -o json: valid JSON, the target's text kept (C1 controls as \\u escapes), no raw escape
    r = plugin(c, ns, tmp_path, "get", "failed", "-o", str(tmp_path / "out"), "--format", "json")
    assert r.returncode == 1, r.stderr
    j = json.loads(r.stdout)
    assert j["object"]["status"]["message"] == f"done {HOSTILE}"
    assert_no_raw_escapes(r)


def test_plugin_refuses_bad_names_from_the_user(k8s, tmp_path):
    c, ns = k8s
    r = plugin(c, ns, tmp_path, "get", "Bad$(touch $AIPROF_PWNED)")
    assert r.returncode == 2 and b"is not a session name" in r.stderr, r.stderr
    r = plugin(c, "Bad_NS", tmp_path, "list")
    assert r.returncode == 2 and b"not a namespace name" in r.stderr, r.stderr
    assert not (tmp_path / "PWNED").exists()


def test_logs_and_list_show_escapes_escaped(k8s, tmp_path):
    """`kubectl aiprof logs SESSION`: what the injectors wrote (target text among it) on the real
    kubelet, escapes written out; `list` too."""
    c, ns = k8s
    text = f"thread {HOSTILE} every{CONTROLS[1:]}control"      # an environment holds no NUL
    kubectl(c, ns, "create", "-f", "-", input=json.dumps({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "injector-logs", "labels": {"aiprof.io/session": "logsess"}},
        "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 0,
                 "containers": [{"name": "injector", "image": "localhost/busybox:1", "imagePullPolicy": "Never",
                                 "command": ["sh", "-c", 'printf "%s\\n" "$T"'],
                                 "env": [{"name": "T", "value": text}]}]}}))
    deadline = time.monotonic() + 90
    while (c.get("pod", "injector-logs", "-n", ns) or {}).get("status", {}).get("phase") != "Succeeded":
        assert time.monotonic() < deadline, json.dumps(c.get("pod", "injector-logs", "-n", ns).get("status"))
        time.sleep(0.5)
    raw = c.kubectl("-n", ns, "logs", "injector-logs", ok=True).stdout
    assert "\x1b]0;owned" in raw                # the kubelet kept the bytes
    r = plugin(c, ns, tmp_path, "logs", "logsess")
    assert r.returncode == 0, r.stderr
    assert b"thread \\x1b]0;owned\\x07\\x1b[2J\\x0d" in r.stdout, r.stdout
    assert_no_raw_escapes(r)
    make_session(c, ns, "listed", HOSTILE_STATUS)     # its message is a column of `list`
    r = plugin(c, ns, tmp_path, "list", "-o", "wide")
    assert r.returncode == 0 and b"listed" in r.stdout, r.stderr
    assert_no_raw_escapes(r)
