# SPDX-License-Identifier: MIT
"""Installing and running aiprof on a REAL Kubernetes API server (v1.32, ../shared/k8s, through
tests/k8s/realk8s.py): the CRDs, the kustomize base and the Helm chart as a user installs them
(`kubectl apply --server-side`, `helm install`), the examples and every invalid file against the
server's own schema and CEL validation, the status subresource and printer columns, and the
controller under the chart's RBAC with the real authorizer, its requests read from the API
server's audit log.

What is not real here, and why: the controller runs as a host process with the service
account's token (it would run the same in its pod, which needs an image), and its pods go to a
Node object no kubelet serves ("node-played"), whose pods' status the test writes through the
API server as the kubelet would (tests/k8s/played.py): that is how the test gives an injector a
termination message without a GPU job to profile. The real kubelet runs the e2e chain
(e2e/)."""
import glob
import json
import re
import os
import shutil
import subprocess
import sys
import time

import pytest
import yaml

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "k8s"))
sys.path.insert(0, os.path.join(ROOT, "tests", "kubeapi"))

import played  # noqa: E402
import realk8s  # noqa: E402
from harness import wait_for  # noqa: E402
from test_install import (BASE, CHART, CONTROLLER, CRDS, EXAMPLES, INJ_NS, INVALID, POLICY_GRANTS,  # noqa: E402
                          RELEASE_NS, UNOBSERVED, container_args, example_docs, granted, notes,
                          notes_session, one, rbac_allows, render)

NOT_CHECKED = ('<nil>: Invalid value: "null": some validation rules were not checked because the '
               'object was invalid; correct the existing errors to complete validation')
PLAYED_NODE = "node-played"


@pytest.fixture(scope="module")
def k8s():
    return realk8s.require()


def no_warnings(r, what):
    text = r.stdout + r.stderr
    assert "Warning:" not in text and "WARNING" not in text and not any(
        line.startswith("W") and line[1:5].isdigit() for line in text.splitlines()), f"{what} warned:\n{text}"


def established(k8s, crd):
    c = k8s.get("crd", crd)
    return c and any(x["type"] == "Established" and x["status"] == "True" for x in c["status"].get("conditions", []))


def ensure_crds(k8s):
    if not all(established(k8s, c) for c in ("profilingsessions.aiprof.io", "profilingpolicies.aiprof.io",
                                             "clusterprofilingstorages.aiprof.io")):
        k8s.apply_crds(CRDS)


def ensure_ns(k8s, *names):
    k8s.ensure_namespace(*names)


# ------------------------------------------------------------------------------ installing

def test_kustomize_base_installs_server_side_without_warnings(k8s):
    r = k8s.kubectl("apply", "--server-side", "-k", BASE, ok=True)
    no_warnings(r, "kubectl apply --server-side -k manifests/base")
    for crd in ("profilingsessions.aiprof.io", "profilingpolicies.aiprof.io"):
        wait_for(lambda: established(k8s, crd), 30, f"{crd} to be Established")
    dep = k8s.get("deployment", "aiprof", "-n", RELEASE_NS)
    assert dep["spec"]["template"]["spec"]["serviceAccountName"] == "aiprof-controller"
    # the same again is a no-op, not a conflict
    no_warnings(k8s.kubectl("apply", "--server-side", "-k", BASE, ok=True), "re-apply")
    # leave the CRDs and the namespace to the chart's install below; the rest goes
    docs = [d for d in render() if d["kind"] != "CustomResourceDefinition"]
    for d in docs:      # the injectors' Namespace takes its Role with it
        args = ["delete", d["kind"].lower(), d["metadata"]["name"], "--wait=true", "--timeout=60s",
                "--ignore-not-found"]
        if d["metadata"].get("namespace"):
            args += ["-n", d["metadata"]["namespace"]]
        k8s.kubectl(*args, ok=True)


def test_helm_install_and_uninstall_on_the_real_api_server(k8s):
    ensure_ns(k8s, RELEASE_NS)
    env = k8s.kubectl_env()
    r = subprocess.run([helm_bin(), "install", "aiprof", CHART, "-n", RELEASE_NS, "--kubeconfig", k8s.kubeconfig,
                        "--set", "controller.replicas=1"],
                       capture_output=True, text=True, timeout=180, env=env)
    assert r.returncode == 0, r.stderr
    no_warnings(r, "helm install")
    assert "STATUS: deployed" in r.stdout and "rollout status deployment/aiprof" in r.stdout  # NOTES printed
    try:
        for d in render("controller.replicas=1"):
            args = [d["kind"].lower(), d["metadata"]["name"]]
            if d["metadata"].get("namespace"):
                args += ["-n", d["metadata"]["namespace"]]
            got = k8s.get(*args)
            assert got, f"helm install did not create {d['kind']} {d['metadata']['name']}"
            assert got["metadata"]["labels"].get("app.kubernetes.io/managed-by") == "Helm"
    finally:
        r = subprocess.run([helm_bin(), "uninstall", "aiprof", "-n", RELEASE_NS, "--kubeconfig", k8s.kubeconfig,
                            "--wait", "--timeout", "60s"], capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr
    assert k8s.get("deployment", "aiprof", "-n", RELEASE_NS) is None
    # the CRDs stay (helm never deletes what crds/ installed), and so do the users' sessions
    assert established(k8s, "profilingsessions.aiprof.io")


def helm_bin():
    from test_install import helm_path
    return helm_path()


def test_crds_apply_server_side_without_warnings(k8s):
    r = k8s.kubectl("apply", "--server-side", "--force-conflicts", "-f", CRDS, ok=True)
    no_warnings(r, "kubectl apply --server-side -f crds/")
    for crd in ("profilingsessions.aiprof.io", "profilingpolicies.aiprof.io"):
        c = k8s.get("crd", crd)
        assert established(k8s, crd)
        # the server kept the schema whole: it is structural and every rule compiled
        for cond in c["status"]["conditions"]:
            assert not (cond["type"] == "NonStructuralSchema" and cond["status"] == "True"), cond


# ----------------------------------------------------------------- validation at apply time

def test_examples_apply_and_invalid_ones_are_refused_by_the_server(k8s):
    ensure_crds(k8s)
    ensure_ns(k8s, *sorted({d["metadata"]["namespace"] for _, d in example_docs() if "namespace" in d["metadata"]}))
    k8s.kubectl("delete", "--ignore-not-found", "--wait=true", "-f", EXAMPLES, ok=True)
    # as most users will: `kubectl apply`, later `kubectl apply --server-side` (kubectl then
    # moves the objects' field ownership over; an empty object such as `cpu: {}` makes that
    # step fail in kubectl 1.32, so the examples write `{enabled: true}`)
    r = k8s.kubectl("apply", "-f", EXAMPLES, ok=True)
    no_warnings(r, "kubectl apply of the examples")
    for _, d in example_docs():
        assert f"{d['kind'].lower()}.aiprof.io/{d['metadata']['name']} created" in r.stdout, r.stdout
    for _ in range(2):
        r = k8s.kubectl("apply", "--server-side", "-f", EXAMPLES, ok=True)
        no_warnings(r, "kubectl apply --server-side of the examples")
        for _, d in example_docs():
            assert f"{d['kind'].lower()}.aiprof.io/{d['metadata']['name']} serverside-applied" in r.stdout, r.stdout
    header = k8s.kubectl("get", "profs", "-n", "train", ok=True).stdout.splitlines()[0].split()
    assert header == ["NAME", "PHASE", "TARGETS", "FINDINGS", "AGE"]
    wide = k8s.kubectl("get", "profs", "-n", "train", "-o", "wide", ok=True).stdout.splitlines()[0].split()
    assert wide[-1] == "MESSAGE", wide
    files = sorted(glob.glob(os.path.join(INVALID, "*.yaml")))
    assert len(files) >= 12
    for path in files:
        with open(path[:-5] + ".expected") as f:
            want = [line for line in f.read().splitlines() if line]
        with open(path) as f:
            doc = yaml.safe_load(f)
        ensure_ns(k8s, doc["metadata"].get("namespace") or "default")
        r = k8s.kubectl("apply", "--server-side", "-f", path)
        assert r.returncode != 0, f"{os.path.basename(path)} was accepted by the real API server"
        head = f'The {doc["kind"]} "{doc["metadata"]["name"]}" is invalid: '
        text = r.stderr.replace("Error from server (Invalid): ", "")
        assert head in text, text
        causes = text.split(head, 1)[1].strip()
        got = [c.lstrip("* ") for c in causes.splitlines()] if causes.startswith("*") else [causes]
        # where the schema refuses a value the server skips the rules and says so in one more cause
        extra = [c for c in got if c not in want]
        assert not [w for w in want if w not in got] and extra in ([], [NOT_CHECKED]), \
            f"{os.path.basename(path)}:\n got: {got}\nwant: {want}"


def test_status_subresource_printer_columns_and_rule_ratcheting(k8s):
    ensure_crds(k8s)
    ensure_ns(k8s, "train")
    s = {"apiVersion": "aiprof.io/v1alpha1", "kind": "ProfilingSession",
         "metadata": {"name": "ratchet", "namespace": "train"},
         "spec": {"targets": {"podName": "trainer-0"}, "duration": "10s"}}
    k8s.apply(s)
    base = ["-n", "train", "profilingsession", "ratchet"]
    # a patch that breaks a rule is refused like a create
    r = k8s.kubectl("patch", *base, "--type=merge", "-p", '{"spec":{"duration":"25h"}}')
    assert r.returncode != 0 and "spec.duration" in r.stderr and "must be from 1ms to 24h" in r.stderr, r.stderr
    r = k8s.kubectl("patch", *base, "--type=merge", "-p", '{"spec":{"targets":{"selector":{"matchLabels":{"a":"b"}}}}}')
    assert r.returncode != 0 and "exactly one of podName and selector" in r.stderr, r.stderr
    # status is a subresource: written there, ignored on the main resource
    k8s.kubectl("patch", *base, "--subresource=status", "--type=merge", "-p",
                '{"status":{"phase":"Profiling","message":"recording 1 process","targetCount":1,"findingCount":2}}', ok=True)
    k8s.kubectl("patch", *base, "--type=merge", "-p", '{"status":{"phase":"Failed"}}', ok=True)
    got = k8s.get(*base)
    assert got["status"]["phase"] == "Profiling" and got["spec"]["duration"] == "10s"
    # defaults the schema declares are filled in by the server
    assert got["spec"]["injection"]["mode"] == "Auto" and got["spec"]["injection"]["method"] == "Ptrace", got["spec"]
    row = [line for line in k8s.kubectl("get", "profs", "-n", "train", "-o", "wide", ok=True).stdout.splitlines()
           if line.startswith("ratchet ")][0].split()
    assert row[1:4] == ["Profiling", "1", "2"] and row[-3:] == ["recording", "1", "process"], row
    k8s.kubectl("delete", *base, "--wait=false", ok=True)


def test_without_cel_the_controller_refuses_what_the_rules_would(k8s, tmp_path):
    """A server that does not evaluate the CRDs' CEL rules (older than 1.25, or the feature
    off) accepts every invalid session the rules would refuse: the controller refuses each of
    them itself, Failed with reason InvalidSpec and a message that says what is wrong. Served
    here by the real server with the session CRD's rules taken out (put back whole after)."""
    if not os.path.exists(CONTROLLER):
        pytest.skip(f"{CONTROLLER} not built")
    from test_policy import strip_cel
    ensure_crds(k8s)
    with open(os.path.join(CRDS, "profilingsession.yaml")) as f:
        crd = yaml.safe_load(f)
    strip_cel(crd)
    k8s.apply(crd, "--force-conflicts")
    ns = "no-cel"
    ensure_ns(k8s, ns)
    log = open(tmp_path / "controller.log", "w")
    p = subprocess.Popen([CONTROLLER, "--kubeconfig", k8s.kubeconfig, "--namespace", ns, "--no-leader-elect",
                          "--metrics-addr", "127.0.0.1:0", "--injector-image", "aiprof/aiprof:test",
                          "--allow-inline-s3"],     # the files' spec.output.s3 rules too
                         stdout=log, stderr=subprocess.STDOUT, env=k8s.kubectl_env())
    try:
        through = {}
        for path in sorted(glob.glob(os.path.join(INVALID, "*.yaml"))):
            with open(path) as f:
                doc = yaml.safe_load(f)
            if doc["kind"] != "ProfilingSession":
                continue
            doc["metadata"]["namespace"] = ns
            if k8s.apply(doc, ok=False).returncode == 0:   # refused by the schema proper: already tested
                through[doc["metadata"]["name"]] = os.path.basename(path)
        assert len(through) >= 7, through
        for name, file in through.items():
            def failed():
                st = (k8s.get("profilingsession", name, "-n", ns) or {}).get("status") or {}
                return st if st.get("phase") == "Failed" else None
            st = wait_for(failed, 30, f"{file}: the controller to fail the session")
            cond = next(c for c in st["conditions"] if c["type"] == "Failed")
            assert cond["reason"] == "InvalidSpec" and st["message"].startswith("spec"), (file, st["message"])
            # the message names the same thing the rule's message does
            with open(os.path.join(INVALID, file[:-5] + ".expected")) as f:
                field = f.read().split(":", 1)[0].replace("spec.", "")
            parts = [x for x in re.split(r"[.\[\]]", field) if x and not x.isdigit()]
            assert field == "spec" or any(x in st["message"] for x in parts[-2:]), (file, field, st["message"])
    finally:
        p.terminate()
        p.wait(timeout=15)
        log.close()
        k8s.kubectl("apply", "--server-side", "--force-conflicts", "-f", os.path.join(CRDS, "profilingsession.yaml"),
                    ok=True)
        k8s.kubectl("delete", "namespace", ns, "--wait=false")


def test_the_session_the_install_notes_print_is_accepted(k8s):
    ensure_crds(k8s)
    ensure_ns(k8s, "train")
    n = notes("s3.bucket=profiles", "s3.endpoint=https://s3.example.com", "s3.region=us-east-1")
    text = notes_session(n).replace("{podName: POD}", "{podName: trainer-0}")
    r = k8s.kubectl("apply", "--server-side", "-n", "train", "-f", "-", input=text, ok=True)
    assert "profilingsession.aiprof.io/first-look serverside-applied" in r.stdout
    no_warnings(r, "the notes' session")


# ---------------------------------------------------------- the controller under real RBAC

def artifact(name, url):
    import hashlib
    return {"name": name, "url": url, "size": 1234, "sha256": hashlib.sha256(name.encode()).hexdigest()}


def test_controller_under_the_charts_rbac_on_the_real_api_server(k8s, tmp_path):
    """The chart's RBAC objects applied to the real server; the controller, with the chart's
    arguments and the chart's service account's token, takes sessions through their life (one
    that succeeds and is deleted by its TTL, one deleted while it runs, one for a Kata pod, two
    ranks and their merge, one made by a policy's trigger annotation, one in the in-cluster
    store whose injector runs in the injector namespace too). The audit log shows
    every request it made: none refused by the real authorizer, none writing a field the CRDs
    do not declare, and every grant of the chart used (or listed with its reason)."""
    if not os.path.exists(CONTROLLER):
        pytest.skip(f"{CONTROLLER} not built")
    docs = render()
    ensure_crds(k8s)
    ensure_ns(k8s, RELEASE_NS)
    rbac = [d for d in docs if d["kind"] in ("Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding",
                                             "Role", "RoleBinding")]
    for d in rbac:
        k8s.apply(d, ns=d["metadata"].get("namespace"))
    ns = "rbac-real"
    ensure_ns(k8s, ns)
    # the storage's Secret: in the injector namespace for the injector pods there, and in the
    # Kata target's namespace for its ephemeral container
    for where in (ns, INJ_NS):
        k8s.kubectl("delete", "secret", "s3-creds", "-n", where, "--ignore-not-found", ok=True)
        k8s.kubectl("create", "secret", "generic", "s3-creds", "-n", where, "--from-literal=AWS_ACCESS_KEY_ID=k",
                    "--from-literal=AWS_SECRET_ACCESS_KEY=s", ok=True)
    k8s.apply({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": "kata"}, "handler": "kata"})
    # the chart turns inline spec.output.s3 off: sessions name the admin's storage
    k8s.apply({"apiVersion": "aiprof.io/v1alpha1", "kind": "ClusterProfilingStorage",
               "metadata": {"name": "rbac-real"},
               "spec": {"namespaces": [ns], "s3": {"bucket": "profiles", "secretRef": {"name": "s3-creds"}}}})
    kube = played.admin_client(k8s)
    kubelet = played.PlayedControl(k8s, kube)
    kubelet.node(PLAYED_NODE)
    kubelet.cordon(k8s.node)            # the merge pod waits for the played kubelet
    sa = one(docs, "ServiceAccount")["metadata"]["name"]
    user = f"system:serviceaccount:{RELEASE_NS}:{sa}"
    sa_dir = tmp_path / "serviceaccount"
    sa_dir.mkdir()
    (sa_dir / "token").write_text(k8s.token(RELEASE_NS, sa))
    shutil.copy(k8s.ca_file, sa_dir / "ca.crt")
    (sa_dir / "namespace").write_text(RELEASE_NS)
    args = [a for a in container_args(docs) if not a.startswith("--metrics-addr")]
    args = [a if not a.startswith(("--grace", "--target-wait")) else a.split("=")[0] + "=5s" for a in args]
    env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
    env.update(KUBERNETES_SERVICE_HOST="127.0.0.1", KUBERNETES_SERVICE_PORT=k8s.api_url.rsplit(":", 1)[1])
    since = k8s.audit_offset()
    log_path = tmp_path / "controller.log"
    log = open(log_path, "w")
    p = subprocess.Popen([CONTROLLER, *args, "--metrics-addr", "127.0.0.1:0", "--service-account-dir", str(sa_dir)],
                         stdout=log, stderr=subprocess.STDOUT, env=env)

    def logtext():
        return log_path.read_text(errors="replace")

    def pod(name, job="x", **spec):
        k8s.apply({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns, "labels": {"job": job}},
                   "spec": {"nodeName": PLAYED_NODE, "containers": [{"name": "trainer", "image": "t"}], **spec}})
        kubelet.kubelet("run", ns, name)

    def session(name, target, **spec):
        targets = {"podName": target} if isinstance(target, str) else {"selector": {"matchLabels": target}}
        k8s.apply({"apiVersion": "aiprof.io/v1alpha1", "kind": "ProfilingSession",
                   "metadata": {"name": name, "namespace": ns},
                   "spec": {"targets": targets, "duration": "2s", **spec,
                            "output": {"storageRef": {"name": "rbac-real"}}}})

    def injectors(session_name):
        # in the injector namespace (the chart's --injector-namespace), none in the tenant's
        assert not k8s.get("pods", "-n", ns, "-l", "aiprof.io/session-uid")["items"]
        items = k8s.get("pods", "-n", INJ_NS, "-l",
                        f"aiprof.io/session={session_name},aiprof.io/session-namespace={ns}")["items"]
        return sorted(i["metadata"]["name"] for i in items if not i["metadata"].get("deletionTimestamp"))

    def succeed(pod_name, url, names=("timeline.json.gz",)):
        kubelet.kubelet("run", INJ_NS, pod_name)
        kubelet.kubelet("terminate", INJ_NS, pod_name, exitCode=0, message=json.dumps(
            {"artifacts": [artifact(n, f"{url}/{n}") for n in names]}))

    def sess(name):
        return k8s.get("profilingsession", name, "-n", ns)

    def phase(name):
        s = sess(name)
        return (s.get("status") or {}).get("phase") if s else "gone"

    halts = [kubelet.start_reaper(ns), kubelet.start_reaper(INJ_NS)]
    try:
        wait_for(lambda: p.poll() is not None or "leader" in logtext().lower(), 30, "leadership")
        assert p.poll() is None, logtext()[-3000:]
        pod("rank-0")
        pod("rank-1")
        pod("kata-0", runtimeClassName="kata")
        session("done", "rank-0", ttlSecondsAfterFinished=1)
        session("cancelled", "rank-1")
        session("kata", "kata-0")
        done = wait_for(lambda: injectors("done"), 30, "the injector of 'done'")[0]
        spec = k8s.get("pod", done, "-n", INJ_NS)["spec"]
        assert spec["hostPID"] is True and spec["nodeName"] == PLAYED_NODE, spec
        succeed(done, f"s3://profiles/{ns}/done")
        wait_for(lambda: phase("done") == "gone", 60, "'done' to succeed and be deleted by its TTL")
        # a session with no S3 anywhere uses the in-cluster store (the chart's default): its
        # injector too runs in the injector namespace, under the same grants (issue 30)
        pod("store-0")
        k8s.apply({"apiVersion": "aiprof.io/v1alpha1", "kind": "ProfilingSession",
                   "metadata": {"name": "in-store", "namespace": ns},
                   "spec": {"targets": {"podName": "store-0"}, "duration": "2s"}})
        in_store = wait_for(lambda: injectors("in-store"), 30, "the injector of 'in-store'")[0]
        args = k8s.get("pod", in_store, "-n", INJ_NS)["spec"]["containers"][0]["args"]
        assert "/v1/artifacts/" in args[args.index("-o") + 1], args
        succeed(in_store, args[args.index("-o") + 1])
        wait_for(lambda: phase("in-store") == "Succeeded", 60, "'in-store' to succeed")
        wait_for(lambda: injectors("cancelled"), 30, "the injector of 'cancelled'")
        k8s.kubectl("delete", "profilingsession", "cancelled", "-n", ns, "--wait=false", ok=True)
        wait_for(lambda: phase("cancelled") == "gone" and not injectors("cancelled"), 60,
                 "'cancelled' and its injector to go (finalizer)")
        pod("m-0", job="m")
        pod("m-1", job="m")
        session("ranks", {"job": "m"})
        ranks = wait_for(lambda: len(injectors("ranks")) == 2 and injectors("ranks"), 30, "two rank injectors")
        for i, name in enumerate(ranks):
            succeed(name, f"s3://profiles/{ns}/ranks/m-{i}", ("timeline.json.gz", "summary.json"))
        merge = wait_for(lambda: [n for n in injectors("ranks") if n not in ranks], 30, "the merge pod")[0]
        succeed(merge, f"s3://profiles/{ns}/ranks/merged")
        wait_for(lambda: phase("ranks") == "Succeeded" and any(
            c["type"] == "Merged" and c["status"] == "True" for c in sess("ranks")["status"]["conditions"]),
            60, "'ranks' merged and Succeeded")
        # what a user sees: the Events of the session, from the real API server
        reasons = {e["reason"] for e in k8s.get("events", "-n", ns, "--field-selector",
                                                "involvedObject.name=ranks")["items"]}
        assert {"InjectorCreated", "Merged"} & reasons, reasons
        k8s.apply({"apiVersion": "aiprof.io/v1alpha1", "kind": "ProfilingPolicy",
                   "metadata": {"name": "on-demand", "namespace": ns},
                   "spec": {"selector": {"matchLabels": {"job": "x"}}, "trigger": {},
                            "sessionTemplate": {"spec": {"duration": "2s", "output": {
                                "storageRef": {"name": "rbac-real"}}}}}})
        k8s.kubectl("annotate", "pod", "rank-0", "-n", ns, "aiprof.io/profile-now=1", ok=True)
        wait_for(lambda: [x for x in k8s.get("profilingsessions", "-n", ns)["items"]
                          if (x["metadata"].get("ownerReferences") or [{}])[0].get("kind") == "ProfilingPolicy"],
                 30, "a session made by the policy")
        wait_for(lambda: (k8s.get("profilingpolicy", "on-demand", "-n", ns).get("status") or {}).get("triggers"),
                 30, "the policy's status")
        wait_for(lambda: any(c["name"].startswith("aiprof-") for c in
                             k8s.get("pod", "kata-0", "-n", ns)["spec"].get("ephemeralContainers", [])),
                 30, "an ephemeral injector in kata-0")
        assert p.poll() is None, logtext()[-3000:]
    except AssertionError as e:
        state = {n: (sess(n) or {}).get("status") for n in ("done", "in-store", "cancelled", "kata", "ranks")}
        raise AssertionError(f"{e}\nsessions: {json.dumps(state)[:3000]}\ncontroller log:\n{logtext()[-4000:]}") from None
    finally:
        if p.poll() is None:
            p.terminate()
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        log.close()
        for halt in halts:
            halt()
        kubelet.cordon(k8s.node, False)
        k8s.kubectl("delete", "pods", "-n", INJ_NS, "-l", f"aiprof.io/session-namespace={ns}",
                    "--grace-period=0", "--force", "--wait=false")
        k8s.kubectl("delete", "namespace", ns, "--wait=false")
        k8s.kubectl("delete", "clusterprofilingstorage", "rbac-real", "--wait=false")

    time.sleep(1.5)  # the audit backend writes in batches
    reqs, _ = k8s.audit(user, since)
    assert reqs, "no request as the chart's service account in the audit log"
    refused = sorted({(e["verb"], e["objectRef"].get("apiGroup", ""), e["objectRef"].get("resource"),
                       e["objectRef"].get("subresource", ""), e["responseStatus"].get("code"),
                       e["objectRef"].get("namespace"), e["objectRef"].get("name"))
                      for e in reqs if e["responseStatus"].get("code") in (401, 403)}, key=str)
    assert not refused, f"the real authorizer refused calls the controller made under the chart's RBAC: {refused}"
    warned = sorted({w for e in reqs for w in (e.get("annotations") or {}).values() if "unknown field" in w})
    assert not warned, f"the CRDs do not declare fields the controller writes: {warned}"
    as_log = [{"verb": e["verb"], "group": e["objectRef"].get("apiGroup", ""),
               "resource": e["objectRef"].get("resource", ""), "subresource": e["objectRef"].get("subresource", ""),
               "namespace": e["objectRef"].get("namespace"), "name": e["objectRef"].get("name")}
              for e in reqs if e.get("objectRef")]
    denied = sorted({(r["verb"], r["group"], r["resource"], r["subresource"]) for r in as_log
                     if r["resource"] and not rbac_allows(docs, user, r)}, key=str)
    assert not denied, f"calls the chart's rules do not name (the server allowed them some other way): {denied}"
    used = {(r["group"], r["resource"] + (f"/{r['subresource']}" if r["subresource"] else ""), r["verb"])
            for r in as_log if r["resource"]}
    grants = granted(docs)
    with open(os.path.join(ROOT, "controller", "controller.c")) as f:
        in_code = {("aiprof.io", "profilingsessions", "get")} if "refresh_session" in f.read() else set()
    with open(os.path.join(ROOT, "controller", "policy_ctl.c")) as f:
        if "refresh_policy" in f.read():
            in_code.add(("aiprof.io", "profilingpolicies", "get"))
    unused = grants - used - in_code - set(UNOBSERVED)
    assert not unused, f"the chart grants what the controller never called on the real server: {sorted(unused)}"
    assert POLICY_GRANTS <= used | in_code
