# SPDX-License-Identifier: MIT
"""aiprof-controller against the REAL Kubernetes API server (v1.32, ../shared/k8s through
tests/k8s/realk8s.py): everything goes through the API as a cluster would see it. Its pods are
bound to Node objects no kubelet serves, and the test plays that kubelet through the API server
(tests/k8s/played.py): it runs pods, terminates containers with the termination message the
injector writes, and confirms graceful deletions. What a real server does not do on demand — a
watch cut mid-stream, a watch told its resourceVersion is gone (410) — is made by a fault
proxy in front of it (tests/k8s/apifaults.py).

Each test gets its own namespace and its own controller process(es) scoped to it (--namespace),
so tests never see each other's objects. Processes are stopped by PID."""
import base64
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import uuid

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("BUILD", "build")
CONTROLLER = os.path.join(ROOT, BUILD, "aiprof-controller")
sys.path.insert(0, os.path.join(ROOT, "tests", "kubeapi"))
sys.path.insert(0, os.path.join(ROOT, "tests", "k8s"))

from fakeapi.client import Kube  # noqa: E402  (a small REST client; nothing of the double)
from harness import (LEASE_RELAXED, ControllerProcess, controller_args, wait_for,  # noqa: E402
                     ws_connect, ws_recv)
import played  # noqa: E402
import realk8s  # noqa: E402
from apifaults import ApiFaults  # noqa: E402

pytestmark = [
    pytest.mark.skipif(not os.path.exists(CONTROLLER), reason=f"{CONTROLLER} not built"),
]

GROUP = "/apis/aiprof.io/v1alpha1"
SECRET_ID = "AKIA" + "TESTONLY" + "EXAMPLE7"
SECRET_KEY = "wJalrXUtnFEMI/K7MDENG/bPxRfiCY" + "TESTONLYKEY"


PLAYED_NODES = ("node-0", "node-1", "node-2", "node-3")


@pytest.fixture(scope="module")
def api():
    """The real API server, with the CRDs applied and the played nodes registered."""
    c = realk8s.require()
    c.apply_crds(os.path.join(ROOT, "crds"))
    c.ensure_namespace("aiprof-system")
    kube = played.admin_client(c)
    ctl = played.PlayedControl(c, kube)
    for n in PLAYED_NODES:
        ctl.node(n)
    ctl.cordon(c.node)
    # the Kata pods' class (the server refuses a pod whose RuntimeClass does not exist)
    r = kube.post("/apis/node.k8s.io/v1/runtimeclasses", {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
                                                          "metadata": {"name": "kata-qemu"}, "handler": "kata-qemu"})
    assert r.status in (201, 409), r
    tmp = tempfile.mkdtemp(prefix="aiprof-ctl-")
    yield {"kube": kube, "ctl": ctl, "ep": {"kubeconfig": c.kubeconfig, "server": c.api_url}, "tmp": tmp,
           "cluster": c}
    ctl.cordon(c.node, False)
    kube.delete("/apis/node.k8s.io/v1/runtimeclasses/kata-qemu")
    for n in PLAYED_NODES:
        kube.delete(f"/api/v1/nodes/{n}")


class Controller(ControllerProcess):
    """One aiprof-controller process; its log is kept in a file."""

    def __init__(self, api, ns, *extra, env=None, name="ctl", kubeconfig=True, inline_s3=True,
                 lease=LEASE_RELAXED):
        self.api = api
        if kubeconfig is True:
            kubeconfig = api["ep"]["kubeconfig"]
        args = controller_args(CONTROLLER, ns, *extra, kubeconfig=kubeconfig or None,
                               target_wait="3s", grace="3s", injector_image="aiprof/aiprof:test",
                               identity=f"{name}-{os.getpid()}", inline_s3=inline_s3, lease=lease)
        e = dict(os.environ)
        e.pop("KUBECONFIG", None)
        e.update(env or {})
        super().__init__(args, os.path.join(api["tmp"], f"{ns}-{name}-{uuid.uuid4().hex[:6]}.log"), e)
        self.wait_port()

    def leader(self):
        return self.metric("aiprof_leader") == 1

    def kill(self, sig=signal.SIGTERM):
        """SIGTERM: a graceful stop (releases the lease; exits 0). SIGKILL: a crash."""
        rc = self.stop(sig)
        if rc is None:
            raise AssertionError("the controller did not stop within 15 s of SIGTERM")
        if sig == signal.SIGTERM:
            assert rc == 0, f"exit status {rc}: {self.text()[-2000:]}"


@pytest.fixture
def env(api, request):
    """A fresh namespace with a Secret, on the real API server; controller(...) starts a
    controller scoped to it. The played kubelet confirms its pods' deletions."""
    for n in PLAYED_NODES:
        api["ctl"].node(n)                  # a fresh heartbeat: the nodes stay Ready
    yield from make_env(api, request)


def make_env(api, request):
    ns = "t-" + re.sub(r"[^a-z0-9]", "", request.node.name.lower())[-40:] + "-" + uuid.uuid4().hex[:4]
    kube, ctl = api["kube"], api["ctl"]
    assert kube.post("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                            "metadata": {"name": ns}}).status == 201
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s3-creds"},
              "data": {"AWS_ACCESS_KEY_ID": base64.b64encode(SECRET_ID.encode()).decode(),
                       "AWS_SECRET_ACCESS_KEY": base64.b64encode(SECRET_KEY.encode()).decode()}}
    assert kube.post(f"/api/v1/namespaces/{ns}/secrets", secret).status == 201
    started = []

    def controller(*extra, **kw):
        c = Controller(api, ns, *extra, **kw)
        started.append(c)
        return c

    e = {"ns": ns, "kube": kube, "ctl": ctl, "controller": controller, "api": api}
    halt = ctl.start_reaper(ns) if hasattr(ctl, "start_reaper") else None
    yield e
    if halt:
        halt()
    for c in started:
        if c.p.poll() is None:
            c.kill()
    release_namespace(kube, ns)
    for c in started:
        assert SECRET_KEY not in c.text() and SECRET_ID not in c.text(), "a credential in the log"


def release_namespace(kube, ns):
    """What a test left in its namespace, gone once its controllers stopped: a controller
    that watches every namespace (the chart's, in test_realk8s) would act on it later.
    Sessions and policies lose their finalizers (nobody is left to honour them), pods go at
    once (played nodes have no kubelet to confirm a graceful deletion), then the namespace."""
    for plural in ("profilingsessions", "profilingpolicies"):
        r = kube.get(f"{GROUP}/namespaces/{ns}/{plural}")
        for o in (r.json or {}).get("items", []) if r.status == 200 else []:
            if o["metadata"].get("finalizers"):
                kube.patch(f"{GROUP}/namespaces/{ns}/{plural}/{o['metadata']['name']}",
                           {"metadata": {"finalizers": None}})
            kube.delete(f"{GROUP}/namespaces/{ns}/{plural}/{o['metadata']['name']}")
    now = {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0}
    kube.delete(f"/api/v1/namespaces/{ns}/pods", now)
    kube.delete("/api/v1/namespaces/aiprof-system/pods?labelSelector=aiprof.io%2Fsession-namespace%3D"
                + ns, now)
    kube.delete(f"/api/v1/namespaces/{ns}")


def make_pod(e, name="trainer-0", node="node-1", run=True, labels=None, runtime_class=None):
    spec = {"nodeName": node, "containers": [{"name": "trainer", "image": "pytorch:test"},
                                             {"name": "sidecar", "image": "busybox"}]}
    if runtime_class:
        spec["runtimeClassName"] = runtime_class
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": name, "labels": labels or {"job": "llama"}}, "spec": spec}
    r = e["kube"].post(f"/api/v1/namespaces/{e['ns']}/pods", pod)
    assert r.status == 201, r
    if run:
        e["ctl"].kubelet("run", e["ns"], name)
    return r.json


def make_session(e, name="slow-step", targets=None, duration="30s", **spec):
    s = {"apiVersion": "aiprof.io/v1alpha1", "kind": "ProfilingSession",
         "metadata": {"name": name},
         "spec": {"targets": targets or {"podName": "trainer-0", "container": "trainer"},
                  "duration": duration,
                  "output": {"s3": {"endpoint": "https://s3.example.com", "bucket": "profiles",
                                    "prefix": "team-a", "region": "us-east-1",
                                    "secretRef": {"name": "s3-creds"}}}}}
    s["spec"].update(spec)
    r = e["kube"].post(f"{GROUP}/namespaces/{e['ns']}/profilingsessions", s)
    assert r.status == 201, r
    return r.json


def get_session(e, name="slow-step"):
    r = e["kube"].get(f"{GROUP}/namespaces/{e['ns']}/profilingsessions/{name}")
    return r.json if r.status == 200 else None


def phase(e, name="slow-step"):
    s = get_session(e, name)
    return ((s or {}).get("status") or {}).get("phase")


def wait_phase(e, want, name="slow-step", timeout=15):
    """The session once its phase is want (a name, or a tuple of names any of which does)."""
    wants = want if isinstance(want, tuple) else (want,)
    seen = []                                   # the phases on the way, for the failure

    def reached():
        p = phase(e, name)
        if not seen or seen[-1] != p:
            seen.append(p)
        return p in wants
    try:
        wait_for(reached, timeout, f"{name} to be {want}")
    except AssertionError as err:
        st = (get_session(e, name) or {}).get("status")
        raise AssertionError(f"{err}; phases seen {seen}; status {json.dumps(st)[:1500]}") from None
    return get_session(e, name)


def injector_pods(e, session=None):
    items = e["kube"].get(f"/api/v1/namespaces/{e['ns']}/pods",
                          query={"labelSelector": "aiprof.io/session-uid"}).json["items"]
    if session:
        items = [p for p in items if p["metadata"]["labels"].get("aiprof.io/session") == session]
    return items


def wait_injector(e, session="slow-step"):
    return wait_for(lambda: (injector_pods(e, session) or [None])[0], 15, "an injector pod")


def result(name, url, size=1234):
    return {"name": name, "url": url, "size": size, "sha256": hashlib.sha256(name.encode()).hexdigest()}


def terminate(e, pod, message, exit_code=0, container="injector", ephemeral=False):
    e["ctl"].kubelet("terminate", e["ns"], pod, container=container, exitCode=exit_code,
                     message=json.dumps(message) if isinstance(message, dict) else message,
                     reason="Completed" if exit_code == 0 else "Error", ephemeral=ephemeral)


def events(e, reason=None):
    items = e["kube"].get(f"/api/v1/namespaces/{e['ns']}/events").json["items"]
    return [x for x in items if reason is None or x.get("reason") == reason]


def condition(status, type_):
    return next((c for c in status.get("conditions", []) if c["type"] == type_), None)


def count_requests(e, method, path_rx):
    """Requests the controller (not the test) made."""
    reqs = e["ctl"].requests(method=method)
    return sum(1 for r in reqs if re.search(path_rx, r["path"]) and
               r.get("userAgent", "").startswith("aiprof-controller"))


def no_credentials_anywhere(e):
    """Credentials never appear in pods' specs, sessions, or events."""
    kube, ns = e["kube"], e["ns"]
    for path in (f"/api/v1/namespaces/{ns}/pods", f"{GROUP}/namespaces/{ns}/profilingsessions",
                 f"/api/v1/namespaces/{ns}/events"):
        text = kube.get(path).raw
        text = text.decode() if isinstance(text, bytes) else text
        assert SECRET_KEY not in text and SECRET_ID not in text, path
    for pod in injector_pods(e):
        for c in pod["spec"]["containers"] + pod["spec"].get("ephemeralContainers", []):
            for v in c.get("env", []):
                if v["name"] in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
                    assert "value" not in v, f"literal credential env {v['name']}"


def start_profiling(env, duration="30s", running=("Profiling",)):
    """A session on trainer-0 whose injector runs (one of the phases running); returns the
    injector pod's name."""
    make_session(env, duration=duration)
    name = wait_injector(env)["metadata"]["name"]
    env["ctl"].kubelet("run", env["ns"], name)
    wait_phase(env, running)
    return name


def known_to_1_25(pod):
    """The pod spec the controller wrote uses only fields Kubernetes 1.25 knows (the oldest
    release the install supports; test_install.py checks the shipped objects the same way).
    The spec as the server returns it: its defaults are old fields too."""
    from test_install import kube_types_1_25
    unknown = kube_types_1_25().unknown_fields({"apiVersion": "v1", "kind": "Pod", "spec": pod["spec"]})
    assert not unknown, f"{pod['metadata']['name']}: fields Kubernetes 1.25 does not know: {unknown}"


def fault_proxy(env):
    """A fault proxy in front of the real API server (tests/k8s/apifaults.py) and a kubeconfig
    that goes through it; stop the proxy at the end."""
    proxy = ApiFaults(env["api"]["cluster"]).start()
    return proxy, proxy.kubeconfig(os.path.join(env["api"]["tmp"], f"{env['ns']}-proxy.kubeconfig"))


def run_to_success(env, inj, session="slow-step", artifacts=None):
    """Plays injector pod inj from start to a clean end with its artifacts; the session must
    then be Succeeded."""
    env["ctl"].kubelet("run", env["ns"], inj)
    if artifacts is None:
        artifacts = [result("timeline.json.gz", "s3://profiles/t/timeline.json.gz")]
    terminate(env, inj, {"artifacts": artifacts})
    return wait_phase(env, "Succeeded", name=session, timeout=30)


def delete_target(env, pod="trainer-0"):
    assert env["kube"].delete(f"/api/v1/namespaces/{env['ns']}/pods/{pod}",
                              {"kind": "DeleteOptions", "apiVersion": "v1",
                               "gracePeriodSeconds": 0}).status == 200


# ---------------------------------------------------------------------------------------- tests

def test_session_succeeds_with_artifacts(env):
    c = env["controller"]()
    make_pod(env)
    s = make_session(env)
    inj = wait_injector(env)
    name = inj["metadata"]["name"]
    known_to_1_25(inj)

    # the injector: on the target's node, host pid namespace, least capabilities, secret refs
    spec = inj["spec"]
    assert spec["nodeName"] == "node-1"
    assert spec["hostPID"] is True
    assert spec["restartPolicy"] == "Never"
    assert spec["automountServiceAccountToken"] is False
    ctr = spec["containers"][0]
    caps = ctr["securityContext"]["capabilities"]
    assert caps["drop"] == ["ALL"] and sorted(caps["add"]) == ["BPF", "PERFMON", "SYS_ADMIN", "SYS_PTRACE"]
    assert ctr["securityContext"].get("privileged") is False
    target_cid = env["kube"].get(f"/api/v1/namespaces/{env['ns']}/pods/trainer-0").json[
        "status"]["containerStatuses"][0]["containerID"]
    assert ctr["args"][:3] == ["profile", "--container-id", target_cid]
    assert f"s3://profiles/team-a/{env['ns']}/slow-step/{s['metadata']['uid']}/trainer-0" in ctr["args"]
    vol = next(v for v in spec["volumes"] if v["name"] == "s3-credentials")
    assert vol["secret"]["secretName"] == "s3-creds"
    assert {"name": "AIPROF_S3_SECRET_DIR", "value": "/var/run/secrets/aiprof/s3"} in ctr["env"]
    # the node's unwind rules, shared by its injectors (aiprof --unwind-cache's default)
    vol = next(v for v in spec["volumes"] if v["name"] == "unwind-cache")
    assert vol["hostPath"] == {"path": "/var/cache/aiprof/unwind", "type": "DirectoryOrCreate"}
    assert {"name": "unwind-cache", "mountPath": "/var/cache/aiprof/unwind"} in ctr["volumeMounts"]
    md = inj["metadata"]
    assert md["labels"]["aiprof.io/session-uid"] == s["metadata"]["uid"]
    assert md["ownerReferences"][0]["uid"] == s["metadata"]["uid"]
    assert wait_phase(env, "Injecting")["metadata"]["finalizers"] == ["aiprof.io/cleanup"]

    # the kubelet runs it, then it exits with its result
    env["ctl"].kubelet("run", env["ns"], name)
    wait_phase(env, "Profiling")
    url = f"s3://profiles/team-a/{env['ns']}/slow-step/{s['metadata']['uid']}/trainer-0"
    terminate(env, name, {"artifacts": [result("timeline.json.gz", url + "/timeline.json.gz"),
                                        result("summary.json", url + "/summary.json", 99)],
                          "summary": {"processes": 1, "events": 4242, "dropped": 0},
                          "findings": [{"category": "PageableMemcpy", "severity": "warning"}]})
    st = wait_phase(env, "Succeeded")["status"]
    assert [a["name"] for a in st["artifacts"]] == ["timeline.json.gz", "summary.json"]
    assert st["artifacts"][0]["url"] == url + "/timeline.json.gz"
    assert st["artifacts"][1]["size"] == 99
    assert st["findings"] == [{"target": "trainer-0", "category": "PageableMemcpy",
                               "severity": "Warning"}]
    assert st["observedGeneration"] == 1 and st["targetCount"] == 1 and st["findingCount"] == 1
    assert st["targets"][0]["state"] == "Succeeded" and st["targets"][0]["node"] == "node-1"
    assert condition(st, "Complete")["status"] == "True"
    assert st["completionTime"] >= st["startTime"]
    # Events are recorded asynchronously (as client-go's recorder does): they follow shortly
    reasons = wait_for(lambda: (lambda r: r if {"InjectorCreated", "Succeeded"} <= set(r) else None)(
        {x["reason"]: x["type"] for x in events(env)}), 10, "the events")
    assert reasons.get("InjectorCreated") == "Normal" and reasons.get("Succeeded") == "Normal"
    assert len(injector_pods(env)) == 1
    assert count_requests(env, "POST", rf"/namespaces/{env['ns']}/pods$") == 1
    no_credentials_anywhere(env)
    wait_for(lambda: c.metric('aiprof_sessions{phase="Succeeded"}') == 1, 5, "the phase metric")


def test_target_missing(env):
    env["controller"]()
    make_session(env, targets={"podName": "ghost"})
    st = wait_phase(env, "Pending")["status"]
    assert condition(st, "TargetsResolved")["reason"] == "TargetNotFound"
    st = wait_phase(env, "Failed", timeout=10)["status"]       # --target-wait 3s
    assert condition(st, "Failed")["reason"] == "TargetNotFound"
    assert "ghost" in st["message"]
    assert injector_pods(env) == []
    assert wait_for(lambda: events(env, "TargetNotFound"), 10, "the event")[0]["type"] == "Warning"


def test_target_in_another_namespace(env):
    env["controller"]()
    make_pod(env)
    make_session(env, targets={"podName": "trainer-0", "namespace": "kube-system"})
    st = wait_phase(env, "Failed")["status"]
    assert condition(st, "Failed")["reason"] == "TargetOutsideNamespace", st
    assert "own namespace" in st["message"]
    assert injector_pods(env) == []
    assert count_requests(env, "POST", rf"/namespaces/{env['ns']}/pods$") == 0


def test_injector_fails(env):
    env["controller"]()
    make_pod(env)
    make_session(env)
    name = wait_injector(env)["metadata"]["name"]
    env["ctl"].kubelet("run", env["ns"], name)
    terminate(env, name, {"error": "pid 7: permission denied: the injector needs CAP_SYS_PTRACE"},
              exit_code=4)
    st = wait_phase(env, "Failed")["status"]
    assert condition(st, "Failed")["reason"] == "InjectorFailed"
    assert "CAP_SYS_PTRACE" in st["message"] and "code 4" in st["message"]
    assert st["targets"][0]["state"] == "Failed"
    assert wait_for(lambda: any(x["type"] == "Warning" for x in events(env, "InjectorFailed")), 10, "the event")


def test_deadline(env):
    """An injector that runs and never ends: the duration plus the grace after its creation
    the session fails DeadlineExceeded and the injector is removed. Whether the Profiling
    phase is seen in between depends on how loaded the machine is (the deadline counts from
    the pod's creation), so the test does not wait for it."""
    env["controller"]("--grace", "9s")
    make_pod(env)
    make_session(env, duration="1s")
    name = wait_injector(env)["metadata"]["name"]
    env["ctl"].kubelet("run", env["ns"], name)
    st = wait_phase(env, "Failed", timeout=30)["status"]
    assert condition(st, "Failed")["reason"] == "DeadlineExceeded"
    assert "no result within the duration plus grace (10s)" in st["targets"][0]["message"], st
    wait_for(lambda: not injector_pods(env), 10, "the injector pod to be deleted")


def test_target_deleted_mid_session(env):
    """The target pod deleted while profiled: its node-agent injector is left to end the
    window and upload; the target ends Failed/TargetDeleted with what it uploaded listed."""
    env["controller"]()
    make_pod(env)
    name = start_profiling(env)
    delete_target(env)

    def deleted_seen():
        t = ((get_session(env) or {}).get("status") or {}).get("targets") or [{}]
        return t[0].get("reason") == "TargetDeleted"
    wait_for(deleted_seen, 15, "the status to say the target was deleted")
    st = get_session(env)["status"]
    t = st["targets"][0]
    assert st["phase"] == "Profiling" and t["state"] == "Profiling", st
    assert "ending the window and uploading" in t["message"], t
    assert t["container"] == "trainer" and t["node"] == "node-1", t
    assert wait_for(lambda: events(env, "TargetDeleted"), 10, "the TargetDeleted event")
    time.sleep(1)
    assert [p["metadata"]["name"] for p in injector_pods(env)] == [name], "the injector was stopped"

    base = f"s3://profiles/team-a/{env['ns']}/slow-step/{get_session(env)['metadata']['uid']}/trainer-0"
    arts = [result("timeline.json.gz", f"{base}/timeline.json.gz"),
            result("summary.json", f"{base}/summary.json", 99)]
    cut_ms = int(time.time() * 1000) - 500
    terminate(env, name, {"artifacts": arts, "findings": [{"category": "SyncCheckpoint",
                                                           "severity": "warning"}],
                          "summary": {"window_ms": 4000, "window_cut": 1, "processes_exited": 1,
                                      "window_end_unix_ms": cut_ms}})
    st = wait_phase(env, "Failed")["status"]
    t = st["targets"][0]
    assert t["state"] == "Failed" and t["reason"] == "TargetDeleted", t
    cut = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(cut_ms // 1000))
    assert f"the window was cut at {cut} after 4s of 30s; kept the 2 artifacts" in t["message"], t
    assert t["container"] == "trainer" and t["node"] == "node-1", t
    assert condition(st, "Failed")["reason"] == "TargetDeleted"
    assert "trainer-0 was deleted" in st["message"]
    assert [(a["target"], a["name"], a["url"], a["sha256"]) for a in st["artifacts"]] == \
        [("trainer-0", a["name"], a["url"], a["sha256"]) for a in arts]
    assert [f["category"] for f in st["findings"]] == ["SyncCheckpoint"]
    # the finished injector pod is kept (its logs), as for any finished injector
    assert [p["metadata"]["name"] for p in injector_pods(env)] == [name]
    no_credentials_anywhere(env)


def test_target_deleted_and_injector_never_finishes(env):
    """The deadline still holds after the target went: an injector still running then is deleted."""
    # the grace long enough that a loaded machine still sees the injector run (Profiling)
    # before the deadline (1 s + 3 s, then 1 s + 9 s failed it straight from Injecting in CI)
    env["controller"]("--grace", "20s")
    make_pod(env)
    # a window shorter than the controller's reaction on a loaded machine may be over when
    # it first sees the injector run: Uploading says it runs then (CI saw that)
    start_profiling(env, duration="1s", running=("Profiling", "Uploading"))
    delete_target(env)
    st = wait_phase(env, "Failed", timeout=40)["status"]
    assert condition(st, "Failed")["reason"] == "DeadlineExceeded", st
    assert st["targets"][0]["node"] == "node-1"
    wait_for(lambda: not injector_pods(env), 10, "the injector pod to be deleted")


def test_session_without_output_takes_the_defaults(env):
    """--default-s3-*: a session without spec.output.s3 uploads where the controller says,
    with the default Secret referenced (never read); one with its own output keeps it."""
    env["controller"]("--default-s3-endpoint", "https://minio.example.com:9000",
                      "--default-s3-bucket", "team-profiles", "--default-s3-prefix", "aiprof",
                      "--default-s3-region", "eu-west-1", "--default-s3-secret", "s3-creds")
    make_pod(env)
    s = {"apiVersion": "aiprof.io/v1alpha1", "kind": "ProfilingSession",
         "metadata": {"name": "slow-step"},
         "spec": {"targets": {"podName": "trainer-0", "container": "trainer"}, "duration": "30s"}}
    assert env["kube"].post(f"{GROUP}/namespaces/{env['ns']}/profilingsessions", s).status == 201
    inj = wait_injector(env)
    c = inj["spec"]["containers"][0]
    uid = inj["metadata"]["labels"]["aiprof.io/session-uid"]
    assert f"s3://team-profiles/aiprof/{env['ns']}/slow-step/{uid}/trainer-0" in c["args"], c["args"]
    env_vars = {v["name"]: v.get("value") for v in c["env"]}
    assert env_vars.get("AWS_ENDPOINT_URL_S3") == "https://minio.example.com:9000", env_vars
    assert [v["secret"]["secretName"] for v in inj["spec"]["volumes"] if "secret" in v] == ["s3-creds"]
    st = wait_for(lambda: (get_session(env) or {}).get("status"), 10, "a status")
    cond = condition(st, "OutputDefaulted")
    assert cond and cond["status"] == "True" and cond["reason"] == "ControllerDefaults", st
    assert "bucket team-profiles" in cond["message"] and "secretRef s3-creds" in cond["message"]
    assert wait_for(lambda: events(env, "DefaultsApplied"), 10, "the DefaultsApplied event")
    no_credentials_anywhere(env)

    # a session with its own output takes none of the defaults
    make_session(env, name="own")
    own = wait_injector(env, "own")
    args = own["spec"]["containers"][0]["args"]
    uid = own["metadata"]["labels"]["aiprof.io/session-uid"]
    assert f"s3://profiles/team-a/{env['ns']}/own/{uid}/trainer-0" in args, args
    st = wait_for(lambda: (get_session(env, "own") or {}).get("status"), 10, "a status")
    assert condition(st, "OutputDefaulted") is None


def test_session_without_output_and_no_defaults(env):
    env["controller"]()
    make_pod(env)
    s = {"apiVersion": "aiprof.io/v1alpha1", "kind": "ProfilingSession",
         "metadata": {"name": "slow-step"},
         "spec": {"targets": {"podName": "trainer-0"}, "duration": "30s"}}
    assert env["kube"].post(f"{GROUP}/namespaces/{env['ns']}/profilingsessions", s).status == 201
    st = wait_phase(env, "Failed")["status"]
    assert condition(st, "Failed")["reason"] == "InvalidSpec"
    assert "spec.output.storageRef is required" in st["message"] and "--default-s3-bucket" in st["message"]
    assert not injector_pods(env)


def test_bad_default_flags_are_refused(api):
    for args, needle in ((["--default-s3-bucket", "team-profiles", "--default-s3-endpoint", "ftp://x"],
                          "--default-s3-endpoint 'ftp://x' is not an http(s)://host[:port] URL"),
                         (["--default-s3-secret", "s3-creds"], "need --default-s3-bucket too"),
                         (["--merge-toleration", "gpu:Sometimes"], "is not NoSchedule"),
                         (["--merge-node-selector", "pool"], "use KEY=VALUE")):
        r = subprocess.run([CONTROLLER, "--kubeconfig", api["ep"]["kubeconfig"], *args],
                           capture_output=True, text=True, timeout=30)
        assert r.returncode == 2 and needle in r.stderr, (args, r.stderr)


def test_merge_pod_scheduling_flags(env):
    env["controller"]("--merge-node-selector", "kubernetes.io/os=linux",
                      "--merge-toleration", "nvidia.com/gpu:NoSchedule")
    pods = rank_session(env, n=2)
    finish_ranks(env, pods)
    mp = wait_for(lambda: (merge_pods(env) or [None])[0], 15, "the merge pod")
    assert mp["spec"]["nodeSelector"] == {"kubernetes.io/os": "linux"}
    # ours, plus what the API server's DefaultTolerationSeconds admission adds
    assert mp["spec"]["tolerations"][0] == {"key": "nvidia.com/gpu", "operator": "Exists",
                                            "effect": "NoSchedule"}, mp["spec"]["tolerations"]
    assert all(t["key"].startswith("node.kubernetes.io/") for t in mp["spec"]["tolerations"][1:])


def test_session_deleted_mid_run(env):
    env["controller"]()
    make_pod(env)
    start_profiling(env)
    assert env["kube"].delete(f"{GROUP}/namespaces/{env['ns']}/profilingsessions/slow-step").status == 200
    wait_for(lambda: get_session(env) is None, 10, "the session to be gone (finalizer removed)")
    wait_for(lambda: not injector_pods(env), 10, "the injector pod to be deleted")


def test_controller_restarted_mid_session(env):
    c1 = env["controller"](name="first")
    make_pod(env)
    make_session(env)
    name = wait_injector(env)["metadata"]["name"]
    wait_phase(env, "Injecting")
    c1.kill(signal.SIGKILL)                   # no chance to release the lease
    env["ctl"].kubelet("run", env["ns"], name)
    c2 = env["controller"](name="second")
    wait_for(c2.leader, 20, "the new controller to take the lease")  # lease 8 s
    wait_phase(env, "Profiling")
    terminate(env, name, {"artifacts": [result("timeline.json.gz", "s3://profiles/t/timeline.json.gz")]})
    wait_phase(env, "Succeeded")
    # found by its label and name: never a second injector
    assert len(injector_pods(env)) == 1
    assert count_requests(env, "POST", rf"/namespaces/{env['ns']}/pods$") == 1


def test_watch_cut_and_410(env):
    """Through a fault proxy in front of the real API server (tests/k8s/apifaults.py): a watch
    reset mid-stream is resumed from the last resourceVersion; a watch answered 410 Expired
    (what the server says for a resourceVersion compacted away) makes the controller list
    again. Sessions made before and after are both carried through."""
    proxy, kc = fault_proxy(env)
    try:
        c = env["controller"]("--watch-timeout", "60s", kubeconfig=kc)
        make_pod(env)
        # long windows: the faults below take a while on a loaded machine, and a session past
        # its duration plus grace ends DeadlineExceeded (its injector pod deleted)
        make_session(env, name="before", duration="300s")
        wait_injector(env, "before")
        wait_for(lambda: c.metric('aiprof_relists_total{resource="pods"}') == 1, 5, "first list")
        wait_for(lambda: proxy.requests(path=rf"/namespaces/{env['ns']}/profilingsessions$") and
                 any(r["watch"] for r in proxy.requests(path="profilingsessions$")), 10, "a session watch")
        # a reset connection: the controller resumes from its resourceVersion
        assert proxy.cut_watches("reset") >= 2
        wait_for(lambda: c.metric('aiprof_watch_restarts_total{resource="profilingsessions"}') >= 1,
                 10, "a watch restart")
        relists = c.metric('aiprof_relists_total{resource="profilingsessions"}')
        # the next session watch is told its resourceVersion is gone: 410 -> relist
        make_pod(env, name="trainer-1")
        fid = proxy.expire_watches(rf"/namespaces/{env['ns']}/profilingsessions\?", times=1)
        wait_for(lambda: proxy.cut_watches("close") and
                 any(r["fault"] == fid for r in proxy.requests()), 10, "a watch answered 410")
        wait_for(lambda: c.metric('aiprof_relists_total{resource="profilingsessions"}') > relists, 15,
                 "a relist after 410 Expired")
        make_session(env, name="after", targets={"podName": "trainer-1", "container": "trainer"},
                     duration="300s")
        wait_injector(env, "after")
        for n in ("before", "after"):
            inj = injector_pods(env, n)[0]["metadata"]["name"]
            run_to_success(env, inj, n, artifacts=[])
        assert len(injector_pods(env)) == 2
    finally:
        proxy.stop()


def test_conflict_on_every_status_write_then_recovery(env):
    """Every status write answered 409 Conflict for a while (through the fault proxy): the
    controller re-reads and retries with backoff — not in a hot loop — and the session ends
    Succeeded once the writes go through again."""
    proxy, kc = fault_proxy(env)
    try:
        c = env["controller"](kubeconfig=kc)
        make_pod(env)
        status = rf"/namespaces/{env['ns']}/profilingsessions/slow-step/status"
        proxy.fault(status, method="PATCH", action="error", code=409, times=10 ** 6)
        make_session(env)
        inj = wait_injector(env)["metadata"]["name"]
        time.sleep(4)
        refused = [r for r in proxy.requests(method="PATCH", path=status + "$") if r["fault"]]
        # backoff from a few ms up: about 35 writes here; a hot loop would make thousands
        assert 2 <= len(refused) <= 60, f"{len(refused)} status writes in 4 s of 409s"
        assert (get_session(env).get("status") or {}).get("phase") in (None, "", "Pending")
        proxy.clear_faults()
        run_to_success(env, inj)
        assert len(injector_pods(env)) == 1 and c.p.poll() is None
    finally:
        proxy.stop()


def test_api_server_hangs_then_comes_back(env):
    """The API server stops answering (every request of the test's namespace hangs — its lease
    too — and open watches are cut into the hang): the leader cannot renew its lease within
    the renew deadline, says so and exits non-zero rather than act without it (its Deployment
    starts it again); once the server answers again a fresh controller takes the session made
    during the hang through to Succeeded, with one injector."""
    proxy, kc = fault_proxy(env)
    try:
        first = env["controller"](kubeconfig=kc, name="first")
        make_pod(env)
        wait_for(lambda: first.metric('aiprof_relists_total{resource="pods"}') == 1, 10, "first list")
        proxy.fault(rf"/namespaces/{env['ns']}/", action="hang", times=10 ** 6)
        proxy.cut_watches("close")
        make_session(env)                   # through the real server directly, as any client
        rc = first.p.wait(timeout=20)       # renew deadline 6 s (harness.LEASE_RELAXED)
        assert rc != 0 and "lost the lease" in first.text() and "could not renew it" in first.text(), first.text()
        assert not injector_pods(env), "an injector was made while the API server hung"
        proxy.clear_faults()
        second = env["controller"](kubeconfig=kc, name="second")
        inj = wait_for(lambda: (injector_pods(env) or [None])[0], 30, "an injector after the hang")["metadata"]["name"]
        run_to_success(env, inj)
        assert len(injector_pods(env)) == 1 and second.p.poll() is None
    finally:
        proxy.stop()


def test_two_replicas_one_leader(env):
    a = env["controller"](name="a")
    wait_for(a.leader, 10, "a to lead")
    b = env["controller"](name="b")
    time.sleep(1.5)
    assert a.leader() and not b.leader()
    code, body = b.http("/readyz")
    assert code == 200 and "standby" in body
    make_pod(env)
    make_session(env, name="one")
    wait_injector(env, "one")
    time.sleep(1)
    assert count_requests(env, "POST", rf"/namespaces/{env['ns']}/pods$") == 1
    a.kill(signal.SIGKILL)
    wait_for(b.leader, 20, "b to take over")  # lease 8 s after a's last renewal
    make_pod(env, name="trainer-1")
    make_session(env, name="two", targets={"podName": "trainer-1"})
    wait_injector(env, "two")
    lease = env["kube"].get(f"/apis/coordination.k8s.io/v1/namespaces/{env['ns']}/leases/aiprof-controller").json
    assert lease["spec"]["holderIdentity"].startswith("b-")
    assert lease["spec"]["leaseTransitions"] >= 1
    assert len(injector_pods(env)) == 2
    # a graceful stop releases the lease for the next replica at once
    b.kill(signal.SIGTERM)
    wait_for(lambda: env["kube"].get(f"/apis/coordination.k8s.io/v1/namespaces/{env['ns']}/leases/"
                                     "aiprof-controller").json["spec"].get("holderIdentity") in ("", None),
             5, "the lease released")


def test_kata_target_gets_ephemeral_container(env):
    env["controller"]()
    make_pod(env, runtime_class="kata-qemu")
    make_session(env)
    pod = wait_for(lambda: (lambda p: p if p["spec"].get("ephemeralContainers") else None)(
        env["kube"].get(f"/api/v1/namespaces/{env['ns']}/pods/trainer-0").json), 15,
        "an ephemeral container")
    ec = pod["spec"]["ephemeralContainers"][0]
    known_to_1_25(pod)
    assert ec["name"].startswith("aiprof-") and ec["targetContainerName"] == "trainer"
    envs = {v["name"]: v for v in ec["env"]}
    assert envs["AWS_SECRET_ACCESS_KEY"]["valueFrom"]["secretKeyRef"] == {
        "name": "s3-creds", "key": "AWS_SECRET_ACCESS_KEY"}
    assert "value" not in envs["AWS_ACCESS_KEY_ID"]
    assert injector_pods(env) == []
    st = wait_phase(env, "Injecting")["status"]
    assert st["targets"][0]["runtime"] == "kata-qemu"
    env["ctl"].kubelet("ephemeral-run", env["ns"], "trainer-0", container=ec["name"])
    wait_phase(env, "Profiling")
    terminate(env, "trainer-0", {"artifacts": [result("timeline.json.gz", "s3://profiles/k/t.json.gz")]},
              container=ec["name"], ephemeral=True)
    assert wait_phase(env, "Succeeded")["status"]["artifacts"][0]["name"] == "timeline.json.gz"
    assert len(env["kube"].get(f"/api/v1/namespaces/{env['ns']}/pods/trainer-0").json["spec"][
        "ephemeralContainers"]) == 1
    no_credentials_anywhere(env)


def test_kata_target_deleted_mid_session(env):
    """An ephemeral container dies with its pod: the status says its recording was lost with
    it, and still says where it ran."""
    env["controller"]()
    make_pod(env, runtime_class="kata-qemu")
    make_session(env)
    pod = wait_for(lambda: (lambda p: p if p["spec"].get("ephemeralContainers") else None)(
        env["kube"].get(f"/api/v1/namespaces/{env['ns']}/pods/trainer-0").json), 15,
        "an ephemeral container")
    env["ctl"].kubelet("ephemeral-run", env["ns"], "trainer-0",
                       container=pod["spec"]["ephemeralContainers"][0]["name"])
    wait_phase(env, "Profiling")
    delete_target(env)
    st = wait_phase(env, "Failed")["status"]
    t = st["targets"][0]
    assert t["reason"] == "TargetDeleted" and "lost with the pod" in t["message"], t
    assert (t["mode"], t["runtime"], t["node"], t["container"]) == \
        ("EphemeralContainer", "kata-qemu", "node-1", "trainer"), t
    assert not st["artifacts"]


def make_cluster_object(e, path, obj):
    """A cluster-scoped object (Node, RuntimeClass) named after the test's namespace, deleted
    at the end of the test by the caller."""
    r = e["kube"].post(path, obj)
    assert r.status == 201, r
    return r.json


def test_runtime_class_handler_decides_the_injection(env):
    """The RuntimeClass's handler (not its name) decides: kata and kata-qemu handlers get an
    ephemeral container, another handler a node-agent pod."""
    sfx = env["ns"][-4:]
    classes = {f"sandboxed-{sfx}": "kata", f"secure-{sfx}": "kata-qemu", f"gvisor-{sfx}": "runsc"}
    for name, handler in classes.items():
        make_cluster_object(env, "/apis/node.k8s.io/v1/runtimeclasses", {
            "apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": name},
            "handler": handler})
    try:
        env["controller"]()
        for i, name in enumerate(classes):
            make_pod(env, name=f"pod-{i}", runtime_class=name)
            make_session(env, name=f"s-{i}", targets={"podName": f"pod-{i}", "container": "trainer"})
        for i, (name, handler) in enumerate(classes.items()):
            st = wait_phase(env, "Injecting", f"s-{i}")["status"]
            t = st["targets"][0]
            assert t["runtime"] == handler, t
            pod = env["kube"].get(f"/api/v1/namespaces/{env['ns']}/pods/pod-{i}").json
            if handler.startswith("kata"):
                assert t["mode"] == "EphemeralContainer"
                assert [c["targetContainerName"] for c in pod["spec"]["ephemeralContainers"]] == ["trainer"]
                assert injector_pods(env, f"s-{i}") == []
            else:
                assert t["mode"] == "NodeAgent" and not pod["spec"].get("ephemeralContainers")
                assert len(injector_pods(env, f"s-{i}")) == 1
    finally:
        for name in classes:
            env["kube"].delete(f"/apis/node.k8s.io/v1/runtimeclasses/{name}")


def test_sys_admin_with_ebpf_on_every_kernel(env):
    """SYS_ADMIN goes with the eBPF collectors on every node: before Linux 5.8 for eBPF
    itself (no CAP_BPF, CAP_PERFMON), on any for the kernel's BPF statistics, which measure
    the window's cost and keep a budget. Neither node is asked its kernel."""
    sfx = env["ns"][-4:]
    kernels = {f"old-{sfx}": "5.4.0-150-generic", f"new-{sfx}": "6.8.0-45-generic"}
    for node, kv in kernels.items():
        make_cluster_object(env, "/api/v1/nodes", {
            "apiVersion": "v1", "kind": "Node", "metadata": {"name": node},
            "status": {"nodeInfo": {"kernelVersion": kv, "kubeletVersion": "v1.32.0"},
                       "conditions": [{"type": "Ready", "status": "True"}]}})
    try:
        env["controller"]()
        for i, node in enumerate(kernels):
            make_pod(env, name=f"pod-{i}", node=node)
            make_session(env, name=f"s-{i}", targets={"podName": f"pod-{i}", "container": "trainer"})
        for i, node in enumerate(kernels):
            inj = wait_injector(env, f"s-{i}")
            assert inj["spec"]["nodeName"] == node
            caps = inj["spec"]["containers"][0]["securityContext"]["capabilities"]
            want = ["BPF", "PERFMON", "SYS_PTRACE", "SYS_ADMIN"]
            assert sorted(caps["add"]) == sorted(want), (node, caps)
    finally:
        for node in kernels:
            env["kube"].delete(f"/api/v1/nodes/{node}")


def merge_pods(e):
    return [p for p in injector_pods(e) if p["metadata"]["labels"].get("app.kubernetes.io/component") ==
            "aiprof-merge"]


def rank_session(env, n=3, name="slow-step"):
    """n ranks selected by label, each injector run and terminated with its timeline."""
    for i in range(n):
        make_pod(env, name=f"rank-{i}", node=f"node-{i}", labels={"job": "llama", "rank": str(i)})
    make_pod(env, name="other", labels={"job": "bert"})
    make_session(env, name=name, targets={"selector": {"matchLabels": {"job": "llama"}}, "container": "trainer"})
    pods = wait_for(lambda: (lambda p: p if len(p) == n else None)(injector_pods(env, name)), 15,
                    f"{n} injectors")
    assert sorted(p["spec"]["nodeName"] for p in pods) == [f"node-{i}" for i in range(n)]
    return pods


def finish_ranks(env, pods, failed=()):
    for p in pods:
        uid = p["metadata"]["labels"]["aiprof.io/session-uid"]
        base = f"s3://profiles/team-a/{env['ns']}/slow-step/{uid}"
        rank = p["metadata"]["labels"]["aiprof.io/target-pod"]
        env["ctl"].kubelet("run", env["ns"], p["metadata"]["name"])
        if rank in failed:
            terminate(env, p["metadata"]["name"], {"error": "target exited"}, exit_code=1)
        else:
            terminate(env, p["metadata"]["name"], {"artifacts": [
                result("timeline.json.gz", f"{base}/{rank}/timeline.json.gz")]})
    return base


def test_selector_ranks_get_a_merged_timeline(env):
    """Every rank gets its injector; once all are done, one merge pod (aiprof merge over the
    succeeded ranks' prefixes, nothing of the node, the S3 secret by reference) merges them;
    its result is in the status under target "merged" with condition Merged, and only then is
    the session Succeeded. A controller restarted mid-merge finds the merge pod."""
    c1 = env["controller"](name="first")
    pods = rank_session(env)
    base = finish_ranks(env, pods)
    mp = wait_for(lambda: (merge_pods(env) or [None])[0], 15, "a merge pod")
    known_to_1_25(mp)
    st = wait_phase(env, "Uploading")["status"]
    assert condition(st, "Merged")["status"] == "Unknown" and condition(st, "Merged")["reason"] == "Merging"
    assert not st.get("completionTime")
    uid = get_session(env)["metadata"]["uid"]
    assert mp["metadata"]["labels"]["aiprof.io/session-uid"] == uid
    assert mp["metadata"]["ownerReferences"][0]["uid"] == uid
    spec = mp["spec"]
    assert not spec.get("hostPID") and not spec.get("nodeName") and spec["restartPolicy"] == "Never"
    ctr = spec["containers"][0]
    assert ctr["name"] == "merge" and ctr["image"] == "aiprof/aiprof:test" and ctr["command"] == ["aiprof"]
    assert ctr["args"] == ["merge", "-o", f"{base}/merged", "--termination-log", "/dev/termination-log",
                           f"{base}/rank-0", f"{base}/rank-1", f"{base}/rank-2"], (ctr["args"], st)
    assert ctr["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert next(v for v in spec["volumes"] if v["name"] == "s3-credentials")["secret"]["secretName"] == "s3-creds"
    assert {"name": "AIPROF_S3_SECRET_DIR", "value": "/var/run/secrets/aiprof/s3"} in ctr["env"]
    no_credentials_anywhere(env)

    # a new controller in the middle of the merge: no second merge pod
    c1.kill(signal.SIGKILL)
    c2 = env["controller"](name="second")
    wait_for(c2.leader, 20, "the new controller to take the lease")  # lease 8 s
    env["ctl"].kubelet("run", env["ns"], mp["metadata"]["name"])
    time.sleep(1.0)
    assert phase(env) == "Uploading"
    terminate(env, mp["metadata"]["name"], {
        "artifacts": [result("timeline.json.gz", f"{base}/merged/timeline.json.gz", 5000),
                      result("summary.json", f"{base}/merged/summary.json", 300)],
        "findings": [{"category": "Straggler", "severity": "warning"}]}, container="merge")
    st = wait_phase(env, "Succeeded")["status"]
    assert [t["pod"] for t in st["targets"]] == ["rank-0", "rank-1", "rank-2"]
    merged = [a for a in st["artifacts"] if a["target"] == "merged"]
    assert [(a["name"], a["url"], a["size"]) for a in merged] == [
        ("timeline.json.gz", f"{base}/merged/timeline.json.gz", 5000),
        ("summary.json", f"{base}/merged/summary.json", 300)]
    assert len(st["artifacts"]) == 5
    assert st["findings"] == [{"target": "merged", "category": "Straggler", "severity": "Warning"}]
    m = condition(st, "Merged")
    assert m["status"] == "True" and m["reason"] == "Merged"
    assert condition(st, "Complete")["status"] == "True"
    assert len(merge_pods(env)) == 1
    assert count_requests(env, "POST", rf"/namespaces/{env['ns']}/pods$") == 4
    wait_for(lambda: events(env, "Merged"), 10, "the Merged event")


def test_failed_merge_keeps_the_ranks_results(env):
    """A merge that fails says so in Merged=False; the session whose ranks succeeded still
    succeeds. With one rank failed the merge runs over the other two."""
    env["controller"]()
    pods = rank_session(env)
    base = finish_ranks(env, pods, failed=("rank-1",))
    mp = wait_for(lambda: (merge_pods(env) or [None])[0], 15, "a merge pod")
    args = mp["spec"]["containers"][0]["args"]
    assert args[5:] == [f"{base}/rank-0", f"{base}/rank-2"], (args, get_session(env).get("status"))
    env["ctl"].kubelet("run", env["ns"], mp["metadata"]["name"])
    terminate(env, mp["metadata"]["name"], {"error": "rank-2: timeline.json.gz: no collectives to align on"},
              exit_code=2, container="merge")
    st = wait_phase(env, "Failed")["status"]          # rank-1 failed: the session did
    m = condition(st, "Merged")
    assert m["status"] == "False" and m["reason"] == "MergeFailed"
    assert "no collectives to align on" in m["message"]
    assert condition(st, "Failed")["reason"] == "InjectorFailed"
    assert [a["target"] for a in st["artifacts"]] == ["rank-0", "rank-2"]
    wait_for(lambda: events(env, "MergeFailed"), 10, "the MergeFailed event")


def test_merge_failure_does_not_fail_the_session(env):
    env["controller"]()
    pods = rank_session(env, n=2)
    finish_ranks(env, pods)
    mp = wait_for(lambda: (merge_pods(env) or [None])[0], 15, "a merge pod")
    env["kube"].delete(f"/api/v1/namespaces/{env['ns']}/pods/{mp['metadata']['name']}")
    st = wait_phase(env, "Succeeded")["status"]
    m = condition(st, "Merged")
    assert m["status"] == "False" and m["reason"] == "MergeDeleted", m
    assert len(st["artifacts"]) == 2


def test_merge_look_alike_is_left_alone(env):
    """While the controller is down mid-merge, the merge pod is replaced by one of the same
    name, labels and ownerReference, ending with a forged result: the status recorded the UID
    of the merge pod it saw, so the look-alike's termination message is never read
    (Merged=False MergeNameTaken), the ranks' results stand, and the look-alike is neither
    deleted nor made again."""
    c = env["controller"]()
    pods = rank_session(env, n=2)
    finish_ranks(env, pods)
    mp = wait_for(lambda: (merge_pods(env) or [None])[0], 15, "a merge pod")
    wait_for(lambda: (get_session(env).get("status") or {}).get("mergeUID") == mp["metadata"]["uid"],
             10, "the merge pod's UID in the status")
    assert phase(env) == "Uploading"
    c.kill(signal.SIGKILL)
    kube, ns, name = env["kube"], env["ns"], mp["metadata"]["name"]
    r = kube.delete(f"/api/v1/namespaces/{ns}/pods/{name}",
                    {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0})
    assert r.status == 200, r
    wait_for(lambda: kube.get(f"/api/v1/namespaces/{ns}/pods/{name}").status == 404, 10, "gone")
    forged = {"apiVersion": "v1", "kind": "Pod",
              "metadata": {"name": name, "labels": mp["metadata"]["labels"],
                           "ownerReferences": mp["metadata"]["ownerReferences"]},
              "spec": {"restartPolicy": "Never", "nodeName": "node-0",
                       "containers": [{"name": "merge", "image": "busybox"}]}}
    r = kube.post(f"/api/v1/namespaces/{ns}/pods", forged)
    assert r.status == 201, r
    env["ctl"].kubelet("run", ns, name)
    terminate(env, name, {"artifacts": [result("timeline.json.gz", "s3://evil/forged/timeline.json.gz")]},
              container="merge")
    env["controller"]()
    st = wait_phase(env, "Succeeded")["status"]
    m = condition(st, "Merged")
    assert m["status"] == "False" and m["reason"] == "MergeNameTaken", m
    assert not [a for a in st["artifacts"] if "forged" in a["url"]], st["artifacts"]
    assert [a["target"] for a in st["artifacts"]] == ["rank-0", "rank-1"]
    time.sleep(1)
    assert kube.get(f"/api/v1/namespaces/{ns}/pods/{name}").json["metadata"]["uid"] == r.json["metadata"]["uid"]


def test_in_cluster_token_rotation(env):
    """In-cluster, as in its pod: the service account's token file is replaced (as the kubelet
    does before a projected token expires) and the old token stops working — it was bound to a
    Secret (TokenRequest's bound object) and that Secret is deleted, so the real API server
    refuses it from then on. The controller reads the new file and goes on as the same user."""
    c8s, ns = env["api"]["cluster"], env["ns"]
    sa, user = "aiprof-rotate", f"system:serviceaccount:{ns}:aiprof-rotate"
    c8s.kubectl("create", "serviceaccount", sa, "-n", ns, ok=True)
    c8s.kubectl("create", "clusterrolebinding", f"{ns}-admin", "--clusterrole=cluster-admin",
                f"--serviceaccount={ns}:{sa}", ok=True)
    for name in ("bound-1", "bound-2"):
        c8s.kubectl("create", "secret", "generic", name, "-n", ns, ok=True)

    def token(bound):
        return c8s.kubectl("create", "token", sa, "-n", ns, "--bound-object-kind=Secret",
                           f"--bound-object-name={bound}", "--duration=3600s", ok=True).stdout.strip()

    sa_dir = os.path.join(env["api"]["tmp"], f"{ns}-serviceaccount")
    os.makedirs(sa_dir)

    def write(name, text):            # replaced whole, by rename, as the kubelet's atomic writer
        tmp = os.path.join(sa_dir, f".{name}.tmp")
        with open(tmp, "w") as f:
            f.write(text)
        os.rename(tmp, os.path.join(sa_dir, name))
    first = token("bound-1")
    write("token", first)
    write("namespace", ns)
    with open(c8s.ca_file) as f:
        write("ca.crt", f.read())
    try:
        c = env["controller"]("--service-account-dir", sa_dir, kubeconfig=False,
                              env={"KUBERNETES_SERVICE_HOST": "127.0.0.1",
                                   "KUBERNETES_SERVICE_PORT": c8s.api_url.rsplit(":", 1)[1]})
        assert "in-cluster" in c.text()
        make_pod(env)
        make_session(env, name="one")
        wait_injector(env, "one")
        write("token", token("bound-2"))
        c8s.kubectl("delete", "secret", "bound-1", "-n", ns, ok=True)      # the old token is refused now
        old = Kube(c8s.api_url, c8s.ca_file, first)
        wait_for(lambda: old.get(f"/api/v1/namespaces/{ns}/pods").status == 401, 10, "the old token refused")
        make_pod(env, name="trainer-1")
        make_session(env, name="two", targets={"podName": "trainer-1"})
        wait_injector(env, "two")
        posts = [r for r in env["ctl"].requests(method="POST") if r["path"] == f"/api/v1/namespaces/{ns}/pods"
                 and r["userAgent"].startswith("aiprof-controller")]
        assert {r["user"] for r in posts} == {user} and len(posts) == 2, posts
        assert c.p.poll() is None, c.text()[-2000:]
    finally:
        c8s.kubectl("delete", "clusterrolebinding", f"{ns}-admin")


def test_http_metrics_and_websocket_feed(env):
    c = env["controller"]()
    make_pod(env)
    make_session(env, name="first")
    wait_injector(env, "first")
    wait_phase(env, "Injecting", "first")      # the status write follows the injector's create
    assert c.http("/healthz") == (200, "ok\n")
    wait_for(lambda: c.http("/readyz")[0] == 200, 5, "ready")
    code, body = c.http("/metrics")
    assert code == 200
    for name in ("aiprof_reconciles_total", "aiprof_reconcile_errors_total", "aiprof_workqueue_depth",
                 'aiprof_watch_restarts_total{resource="pods"}', 'aiprof_sessions{phase="Injecting"}',
                 "aiprof_leader", "process_resident_memory_bytes"):
        assert re.search("^" + re.escape(name) + r" \d", body, re.M), name
    assert "# TYPE aiprof_reconciles_total counter" in body
    assert c.http("/nope")[0] == 404

    ws, refused = ws_connect(c.port, token=c.token)
    assert ws, refused
    op, msg = ws_recv(ws)                      # the snapshot first
    assert op == 1
    first = json.loads(msg)
    assert first["name"] == "first" and first["phase"] == "Injecting"
    make_session(env, name="second", targets={"podName": "trainer-0"})
    seen = set()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not ("second", "Injecting") in seen:
        try:
            op, msg = ws_recv(ws)
        except TimeoutError:
            raise AssertionError(f"no feed message after {sorted(seen)}; status "
                                 f"{(get_session(env, 'second') or {}).get('status')}") from None
        m = json.loads(msg)
        seen.add((m["name"], m["phase"]))
    assert ("second", "Injecting") in seen, seen
    ws.close()
