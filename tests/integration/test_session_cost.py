# SPDX-License-Identifier: MIT
"""spec.cost of a ProfilingSession (recordRate, budgetPercent: the injector's --record-rate and
--budget; docs/session-cost-fields.md) against a REAL Kubernetes API server (v1.32,
../shared/k8s through tests/k8s/realk8s.py), end to end from what a user writes to the
injector's command line:

- the server refuses what the CRDs' schema and CEL rules refuse, with their messages, in a
  session and in a policy's session template, and takes every edge of the ranges;
- the controller (built binary, a host process with the admin's kubeconfig, watching one
  namespace, as test_realk8s.py's no-CEL test runs it) passes the fields to `aiprof profile`
  in the node-agent pod (runc target), the ephemeral container (Kata target) and the pod of a
  session a ProfilingPolicy made; an injector with eBPF collectors gets SYS_ADMIN (the kernel's BPF statistics: the window's cost, a budget);
- `kubectl aiprof profile --record-rate N --budget PCT` (the real plugin and the kit's
  kubectl) writes those fields, and refuses bad or hostile values before it calls the cluster.

The targets are pods on a Node no kubelet serves, whose status the test writes as the kubelet
would (tests/k8s/played.py); the real kubelet runs the e2e chain (e2e/)."""
import json
import os
import subprocess
import sys
import uuid

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "k8s"))
sys.path.insert(0, os.path.join(ROOT, "tests", "kubeapi"))

import played  # noqa: E402
import realk8s  # noqa: E402
from harness import wait_for  # noqa: E402

CRDS = os.path.join(ROOT, "crds")
CONTROLLER = os.path.join(ROOT, os.environ.get("BUILD", "build"), "aiprof-controller")
PLUGIN = os.path.join(ROOT, "controller", "kubectl-aiprof")
API = "aiprof.io/v1alpha1"
NODE = "node-played-cost"
RANGE_MSG = """must be from 0.001% to 100% of the targets' CPU, such as "1%" or "0.5%\""""
S3 = {"s3": {"bucket": "profiles", "secretRef": {"name": "s3-creds"}}}


@pytest.fixture(scope="module")
def k8s():
    c = realk8s.require()
    c.apply_crds(CRDS)
    ns = f"cost-{uuid.uuid4().hex[:6]}"
    c.ensure_namespace(ns)
    yield c, ns
    if not c.started:       # stopped already (pytest -x stops the session before this)
        return
    # the played node's pods have no kubelet to confirm their deletion: force them
    c.kubectl("delete", "pods", "--all", "-n", ns, "--grace-period=0", "--force", "--wait=false")
    c.kubectl("delete", "namespace", ns, "--wait=false")


def session(ns, name, cost, **spec):
    return {"apiVersion": API, "kind": "ProfilingSession", "metadata": {"name": name, "namespace": ns},
            "spec": {"targets": {"podName": "trainer-0"}, "duration": "2s", "output": S3, "cost": cost, **spec}}


def policy(ns, name, cost):
    return {"apiVersion": API, "kind": "ProfilingPolicy", "metadata": {"name": name, "namespace": ns},
            "spec": {"selector": {"matchLabels": {"job": "p"}}, "trigger": {},
                     "sessionTemplate": {"spec": {"duration": "2s", "output": S3, "cost": cost}}}}


def refused(c, obj):
    """The server's causes for refusing obj (a create, dry run: nothing is stored; a create,
    not a server-side apply, which refuses a value of the wrong type before validation, in
    words of its own), or None if it took it."""
    r = c.kubectl("create", "--dry-run=server", "-f", "-", input=json.dumps(obj))
    if r.returncode == 0:
        return None
    head = f'The {obj["kind"]} "{obj["metadata"]["name"]}" is invalid: '
    assert head in r.stderr, r.stderr
    return r.stderr.split(head, 1)[1].strip()


def test_the_server_refuses_bad_cost_with_the_crds_message(k8s):
    c, ns = k8s
    for budget in ("150%", "100.01", "101", "0", "0%", "0.0", "0.0009%", "0.000999"):
        got = refused(c, session(ns, "b", {"budgetPercent": budget}))
        assert got == f'spec.cost.budgetPercent: Invalid value: "string": {RANGE_MSG}', (budget, got)
        got = refused(c, policy(ns, "p", {"budgetPercent": budget}))
        assert got == f'spec.sessionTemplate.spec.cost.budgetPercent: Invalid value: "string": {RANGE_MSG}', \
            (budget, got)
    # not the grammar: the schema's pattern (the rule, guarded, adds nothing)
    for budget in ("1e-3", "one percent", " 1", "1%%", ".5", "1.", "-1", "1%;touch x"):
        got = refused(c, session(ns, "b", {"budgetPercent": budget}))
        assert got.startswith(f'spec.cost.budgetPercent: Invalid value: "{budget}": spec.cost.budgetPercent in body '
                              "should match '^[0-9]+(\\.[0-9]+)?%?$'"), (budget, got)
        assert RANGE_MSG not in got, got
    got = refused(c, session(ns, "b", {"budgetPercent": "0.000000000000001"}))
    assert "spec.cost.budgetPercent: Too long: may not be more than 16 bytes" in got, got
    got = refused(c, session(ns, "b", {"budgetPercent": 1}))
    assert 'spec.cost.budgetPercent: Invalid value: "integer": spec.cost.budgetPercent in body must be of type ' \
           'string: "integer"' in got, got
    got = refused(c, session(ns, "b", {"recordRate": 1000001}))
    assert "spec.cost.recordRate: Invalid value: 1000001: spec.cost.recordRate in body should be less than or " \
           "equal to 1000000" in got, got
    got = refused(c, session(ns, "b", {"recordRate": -1}))
    assert "spec.cost.recordRate: Invalid value: -1: spec.cost.recordRate in body should be greater than or " \
           "equal to 0" in got, got
    got = refused(c, policy(ns, "p", {"recordRate": 1000001}))
    assert "spec.sessionTemplate.spec.cost.recordRate: Invalid value: 1000001" in got, got
    # the edges are taken, in both
    for cost in ({"budgetPercent": "0.001"}, {"budgetPercent": "100%"}, {"budgetPercent": "100.000"},
                 {"budgetPercent": "0.5"}, {"budgetPercent": "007.5%"}, {"recordRate": 0},
                 {"recordRate": 1000000, "budgetPercent": "1%"}, {}):
        assert refused(c, session(ns, "ok", cost)) is None, cost
        assert refused(c, policy(ns, "ok", cost)) is None, cost


def args_have(args, flag, value):
    return any(args[i] == flag and args[i + 1] == value for i in range(len(args) - 1))


def test_the_controller_passes_cost_to_the_injector(k8s, tmp_path, procs):
    c, ns = k8s
    if not os.path.exists(CONTROLLER):
        pytest.skip(f"{CONTROLLER} not built")
    kube = played.admin_client(c)
    kubelet = played.PlayedControl(c, kube)
    kubelet.node(NODE)
    made_kata = c.get("runtimeclass", "kata") is None
    if made_kata:
        c.apply({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": "kata"},
                 "handler": "kata"})

    def pod(name, job="x", **spec):
        c.apply({"apiVersion": "v1", "kind": "Pod",
                 "metadata": {"name": name, "namespace": ns, "labels": {"job": job}},
                 "spec": {"nodeName": NODE, "containers": [{"name": "trainer", "image": "t"}], **spec}})
        kubelet.kubelet("run", ns, name)

    def injector(session_name):
        items = c.get("pods", "-n", ns, "-l", f"aiprof.io/session={session_name}")["items"]
        return items[0]["spec"]["containers"][0] if items else None

    log_path = tmp_path / "controller.log"
    log = open(log_path, "w")
    p, _ = procs.start([CONTROLLER, "--kubeconfig", c.kubeconfig, "--namespace", ns, "--no-leader-elect",
                        "--metrics-addr", "127.0.0.1:0", "--injector-image", "aiprof/aiprof:test",
                        "--allow-inline-s3", "--default-s3-bucket", "profiles"],   # the plugin's sessions
                       stdout=log, stderr=subprocess.STDOUT, env=c.kubectl_env())
    halt = kubelet.start_reaper(ns)
    try:
        pod("rank-0")
        pod("kata-0", runtimeClassName="kata")
        pod("policy-0", job="p")
        # runc: the node-agent pod
        c.apply(session(ns, "runc", {"recordRate": 25, "budgetPercent": "0.5%"}, targets={"podName": "rank-0"}))
        ctr = wait_for(lambda: injector("runc"), 30, "the injector pod of 'runc'")
        args = ctr["args"]
        assert args_have(args, "--record-rate", "25") and args_have(args, "--budget", "0.5%"), args
        assert "SYS_ADMIN" in ctr["securityContext"]["capabilities"]["add"], ctr["securityContext"]
        # Kata: the ephemeral container, which builds the same command line
        c.apply(session(ns, "kata", {"recordRate": 0}, targets={"podName": "kata-0"}))

        def ephemeral():
            eph = c.get("pod", "kata-0", "-n", ns)["spec"].get("ephemeralContainers") or []
            return next((e for e in eph if e["name"].startswith("aiprof-")), None)
        ctr = wait_for(ephemeral, 30, "the ephemeral injector in kata-0")
        assert args_have(ctr["args"], "--record-rate", "0") and "--budget" not in ctr["args"], ctr["args"]
        # no budget: the window's cost is measured all the same, by the same statistics
        assert "SYS_ADMIN" in ctr["securityContext"]["capabilities"]["add"], ctr["securityContext"]
        # a session a policy made from its template (trigger annotation)
        c.apply(policy(ns, "on-demand", {"recordRate": 7, "budgetPercent": "2%"}))
        c.kubectl("annotate", "pod", "policy-0", "-n", ns, "aiprof.io/profile-now=1", ok=True)

        def made():
            return [x for x in c.get("profilingsessions", "-n", ns)["items"]
                    if (x["metadata"].get("ownerReferences") or [{}])[0].get("kind") == "ProfilingPolicy"]
        s = wait_for(made, 30, "a session made by the policy")[0]
        assert s["spec"]["cost"] == {"recordRate": 7, "budgetPercent": "2%"}, s["spec"]
        ctr = wait_for(lambda: injector(s["metadata"]["name"]), 30, "the injector pod of the policy's session")
        assert args_have(ctr["args"], "--record-rate", "7") and args_have(ctr["args"], "--budget", "2%"), ctr["args"]
        # the plugin, through to the injector: it creates the session and waits (cut short
        # here by --timeout: the played injector never ends)
        r = plugin(c, ns, tmp_path, "profile", "pod/rank-0", "--name", "plugged", "--duration", "2s",
                   "--record-rate", "40", "--budget", "0.25%", "--timeout", "1s")
        assert r.returncode == 4 and b"session plugged created" in r.stderr, r.stderr[-2000:]
        assert c.get("profilingsession", "plugged", "-n", ns)["spec"]["cost"] == {"recordRate": 40,
                                                                                 "budgetPercent": "0.25%"}
        ctr = wait_for(lambda: injector("plugged"), 30, "the injector pod of 'plugged'")
        assert args_have(ctr["args"], "--record-rate", "40") and args_have(ctr["args"], "--budget", "0.25%"), \
            ctr["args"]
        assert p.poll() is None, log_path.read_text(errors="replace")[-3000:]
    except AssertionError as e:
        raise AssertionError(f"{e}\ncontroller log:\n{log_path.read_text(errors='replace')[-4000:]}") from None
    finally:        # the controller is stopped by PID (procs); the pods go with the namespace
        log.close()
        halt()
        c.kubectl("delete", "node", NODE, "--wait=false")
        if made_kata:
            c.kubectl("delete", "runtimeclass", "kata", "--wait=false")


def plugin(c, ns, tmp_path, *args):
    env = c.kubectl_env()
    env["PATH"] = c.bin + os.pathsep + env.get("PATH", "")
    env["KUBECTL"] = c.kubectl_bin
    env["TMPDIR"] = str(tmp_path / "tmp")
    os.makedirs(env["TMPDIR"], exist_ok=True)
    return subprocess.run(["bash", PLUGIN, "-n", ns, *args], capture_output=True, timeout=120, env=env,
                          cwd=str(tmp_path))


def test_the_plugin_refuses_bad_cost_flags_before_the_cluster(k8s, tmp_path):
    c, ns = k8s
    marker = tmp_path / "PWNED"
    bad = [("--record-rate", "1000001"), ("--record-rate", "-1"), ("--record-rate", "1e3"),
           ("--record-rate", "0050"), ("--record-rate", "12 "), ("--record-rate", f"1$(touch {marker})"),
           ("--record-rate", f"a[$(touch {marker})]"),
           ("--budget", "150%"), ("--budget", "0"), ("--budget", "0.0009%"), ("--budget", "1e-3"),
           ("--budget", "0.000000000000001"), ("--budget", "1%%"), ("--budget", f"1%$(touch {marker})"),
           ("--budget", "1;x"), ("--budget", "1\n2"), ("--budget", "\x1b[2J1%")]
    for flag, value in bad:
        # pod/absent: a flag that passed would go on to the cluster and fail there (exit 3)
        r = plugin(c, ns, tmp_path, "profile", "pod/absent", "--name", "never", flag, value)
        err = r.stderr.decode(errors="replace")
        assert r.returncode == 2 and f"error: {flag} '" in err, (flag, value, r.returncode, err)
        assert "\x1b" not in err, err
    assert not marker.exists()
    assert c.get("profilingsession", "never", "-n", ns) is None
    r = plugin(c, ns, tmp_path, "profile", "pod/absent", "--record-rate", "0", "--budget", "100%")
    assert r.returncode == 3 and b"pod absent not found" in r.stderr, r.stderr
    assert b"--record-rate N" in plugin(c, ns, tmp_path, "--help").stdout
