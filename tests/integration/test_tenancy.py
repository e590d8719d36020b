# SPDX-License-Identifier: MIT
"""What a session's author can and cannot make aiprof-controller do on a shared cluster
(issue 15), against the REAL Kubernetes API server, with the tenant's requests made as a
tenant (impersonation of a user bound to a namespaced Role):

- a session in a namespace the admin denies (kube-system by default) ends TargetDenied and
  nothing is created there;
- a process.match pattern whose bounded repeats would expand to gigabytes is refused at
  once (InvalidSpec), costing the controller next to no CPU or memory, and the controller
  still stops cleanly on SIGTERM;
- a pod put under the injector's name by someone else (the tenant replacing the injector
  pod with one of their own, same labels and ownerReference) is not accepted: its forged
  result never reaches the status;
- sessions name the admin's ClusterProfilingStorage: their own endpoint and Secret
  (spec.output.s3) are refused, and so are storages not made for their namespace or with a
  plain-http endpoint;
- the injector pods of those sessions run in the operator's namespace with the admin's
  Secret, where the tenant has no verbs (`kubectl auth can-i` says no), and leave with the
  session;
- a namespace enforcing Pod Security baseline gets the API server's reason in the status.

The fixtures and helpers are test_controller.py's (the real API server, played nodes and
kubelet, one namespace and controller per test)."""
import base64
import json
import os
import signal
import time

import pytest

from test_controller import (GROUP, api, condition, env, events, get_session,  # noqa: F401
                             injector_pods, make_pod, make_session, result, terminate,
                             wait_for, wait_injector, wait_phase)

BOMB = "((a{1,32767}){1,32767}){1,32767}"       # regcomp() of this grew a controller to 5.1 GB
TENANT = "alice@team-a"


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


def tenant(e):
    """Grants TENANT what a team usually gets in its own namespace (sessions, pods, exec,
    no Secrets) and returns request headers that act as TENANT."""
    ns, kube = e["ns"], e["kube"]
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": "team"},
            "rules": [{"apiGroups": ["aiprof.io"], "resources": ["profilingsessions"],
                       "verbs": ["get", "list", "watch", "create", "delete"]},
                      {"apiGroups": [""], "resources": ["pods", "pods/exec", "pods/log"],
                       "verbs": ["get", "list", "watch", "create", "delete"]}]}
    assert kube.post(f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/roles", role).status == 201
    binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
               "metadata": {"name": "team"},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "team"},
               "subjects": [{"kind": "User", "name": TENANT, "apiGroup": "rbac.authorization.k8s.io"}]}
    assert kube.post(f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings",
                     binding).status == 201
    return {"Impersonate-User": TENANT}


def test_denied_namespace(env):
    """The admin's list (--denied-namespaces; kube-system and the controller's own by
    default): a session there fails TargetDenied, with an Event, and no pod is made."""
    env["controller"]("--denied-namespaces", f"kube-system,{env['ns']}")
    make_pod(env)
    make_session(env)
    st = wait_phase(env, "Failed")["status"]
    assert condition(st, "Failed")["reason"] == "TargetDenied", st
    assert f"namespace '{env['ns']}' may not be profiled" in st["message"], st["message"]
    assert wait_for(lambda: events(env, "TargetDenied"), 10, "the event")[0]["type"] == "Warning"
    assert injector_pods(env) == []


def test_kube_system_denied_by_default(env):
    """With no --denied-namespaces, kube-system is denied: a controller watching it refuses
    a session there (made by the admin: a tenant cannot even create one) and adds nothing to
    the system pod it names."""
    kube = env["kube"]
    env["controller"]("--namespace", "kube-system")     # the later --namespace wins
    name = f"deny-{env['ns'][-4:]}"
    s = {"apiVersion": "aiprof.io/v1alpha1", "kind": "ProfilingSession", "metadata": {"name": name},
         "spec": {"targets": {"podName": "kube-apiserver-x"}, "duration": "5s",
                  "output": {"s3": {"endpoint": "https://s3.example.com", "bucket": "profiles",
                                    "secretRef": {"name": "s3-creds"}}}}}
    path = f"{GROUP}/namespaces/kube-system/profilingsessions"
    assert kube.post(path, s).status == 201
    try:
        st = wait_for(lambda: (kube.get(f"{path}/{name}").json.get("status") or {})
                      .get("phase") == "Failed" and kube.get(f"{path}/{name}").json["status"], 15,
                      "the session in kube-system to fail")
        assert condition(st, "Failed")["reason"] == "TargetDenied", st
        pods = kube.get("/api/v1/namespaces/kube-system/pods",
                        query={"labelSelector": "aiprof.io/session"}).json["items"]
        assert pods == []
    finally:
        kube.delete(f"{path}/{name}")
        wait_for(lambda: kube.get(f"{path}/{name}").status == 404, 15, "the session gone")


def test_tenant_cannot_read_secrets(env):
    """The tenant of these tests has no Secret access of its own (the line the next tests
    rely on): the API server says so."""
    h = tenant(env)
    r = env["kube"].get(f"/api/v1/namespaces/{env['ns']}/secrets/s3-creds", headers=h)
    assert r.status == 403, r


def test_regex_bomb_refused_at_once(env):
    """The issue's pattern, in a session made by the tenant: refused (InvalidSpec, saying
    why) while the controller spends under 100 ms of CPU and no memory on it; then SIGTERM
    stops the controller cleanly."""
    h = tenant(env)
    c = env["controller"]()
    make_pod(env)
    time.sleep(1)                               # started, listed, idle
    cpu0, rss0 = cpu_seconds(c.p.pid), rss_kib(c.p.pid)
    s = {"apiVersion": "aiprof.io/v1alpha1", "kind": "ProfilingSession", "metadata": {"name": "bomb"},
         "spec": {"targets": {"podName": "trainer-0", "process": {"match": BOMB}}, "duration": "5s",
                  "output": {"s3": {"endpoint": "https://s3.example.com", "bucket": "profiles",
                                    "secretRef": {"name": "s3-creds"}}}}}
    r = env["kube"].post(f"{GROUP}/namespaces/{env['ns']}/profilingsessions", s, headers=h)
    assert r.status == 201, r
    st = wait_phase(env, "Failed", name="bomb", timeout=10)["status"]
    cpu1, rss1 = cpu_seconds(c.p.pid), rss_kib(c.p.pid)
    assert condition(st, "Failed")["reason"] == "InvalidSpec", st
    assert "process.match is refused" in st["message"] and "bounded repeats" in st["message"], st
    assert injector_pods(env) == []
    # the controller's whole CPU over that second or so (lease renewals, watches included)
    assert cpu1 - cpu0 < 0.1, f"{cpu1 - cpu0:.3f} s of CPU"
    assert rss1 - rss0 < 4096, f"RSS grew {rss1 - rss0} KiB"
    t0 = time.monotonic()
    c.kill(signal.SIGTERM)                      # exits 0 within 15 s or fails
    assert time.monotonic() - t0 < 10


def test_forged_injector_pod_is_not_accepted(env):
    """The tenant deletes the injector pod of their session and puts their own pod under its
    name, with the same labels and ownerReference, ending with a forged result — while the
    controller is down (restarted), so that it cannot tell from the deletion: it recorded
    the UID of the injector it saw, so the look-alike is not accepted — the target fails
    InjectorNameTaken, the forged artifact never reaches the status, and the look-alike is
    left alone: not stopped with the failed session's injectors while it runs."""
    h = tenant(env)
    kube, ns = env["kube"], env["ns"]
    c = env["controller"]()
    make_pod(env)
    make_session(env)
    inj = wait_injector(env)
    name = inj["metadata"]["name"]
    st = wait_for(lambda: ((get_session(env).get("status") or {}).get("targets") or [{}])[0]
                  .get("injectorUID"), 10, "the injector's UID in the status")
    assert st == inj["metadata"]["uid"]
    c.kill(signal.SIGTERM)
    r = kube.delete(f"/api/v1/namespaces/{ns}/pods/{name}",
                    {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0}, headers=h)
    assert r.status == 200, r
    wait_for(lambda: kube.get(f"/api/v1/namespaces/{ns}/pods/{name}").status == 404, 10, "gone")
    md = inj["metadata"]
    forged = {"apiVersion": "v1", "kind": "Pod",
              "metadata": {"name": name, "labels": md["labels"], "annotations": md.get("annotations", {}),
                           "ownerReferences": md["ownerReferences"]},
              "spec": {"nodeName": inj["spec"]["nodeName"], "restartPolicy": "Never",
                       "containers": [{"name": "injector", "image": "busybox"}]}}
    r = kube.post(f"/api/v1/namespaces/{ns}/pods", forged, headers=h)
    assert r.status == 201, r
    env["ctl"].kubelet("run", ns, name)
    env["controller"]()
    st = wait_phase(env, "Failed", timeout=15)["status"]
    t = st["targets"][0]
    assert t["reason"] == "InjectorNameTaken", t
    assert "not this session's injector" in t["message"], t
    # a failed session stops its injectors that still run: not the look-alike, which runs
    time.sleep(1)
    assert kube.get(f"/api/v1/namespaces/{ns}/pods/{name}").json["metadata"]["uid"] == r.json["metadata"]["uid"]
    terminate(env, name, {"artifacts": [result("timeline.json.gz", "s3://evil/forged/timeline.json.gz")]})
    time.sleep(1)
    st = get_session(env)["status"]
    assert st["phase"] == "Failed" and st["targets"][0]["reason"] == "InjectorNameTaken", st
    assert not [a for a in st.get("artifacts") or [] if "forged" in a["url"]], st["artifacts"]
    assert kube.get(f"/api/v1/namespaces/{ns}/pods/{name}").json["metadata"]["uid"] == r.json["metadata"]["uid"]


def storage(e, name, namespaces, endpoint="https://s3.corp.example:9000", **extra):
    """A ClusterProfilingStorage made by the admin (removed by the caller)."""
    body = {"apiVersion": "aiprof.io/v1alpha1", "kind": "ClusterProfilingStorage",
            "metadata": {"name": name},
            "spec": {"namespaces": namespaces,
                     "s3": {"endpoint": endpoint, "bucket": "corp-profiles", "prefix": "k8s",
                            "region": "eu-west-1", "secretRef": {"name": "s3-creds"}}, **extra}}
    r = e["kube"].post(f"{GROUP}/clusterprofilingstorages", body)
    assert r.status == 201, r
    return name


def tenant_session(e, h, name, output):
    s = {"apiVersion": "aiprof.io/v1alpha1", "kind": "ProfilingSession", "metadata": {"name": name},
         "spec": {"targets": {"podName": "trainer-0", "container": "trainer"}, "duration": "30s",
                  "output": output}}
    r = e["kube"].post(f"{GROUP}/namespaces/{e['ns']}/profilingsessions", s, headers=h)
    assert r.status == 201, r
    return r.json


def test_storage_chosen_by_the_admin(env):
    """Inline s3 off (the default): the tenant's session names the admin's storage and gets
    its endpoint, bucket, prefix (then namespace, session, UID) and Secret; a session giving
    its own endpoint and Secret is refused before anything runs; a storage not made for the
    namespace, or one with a plain-http endpoint, fails the session with a clear reason."""
    h = tenant(env)
    ns, kube, tag = env["ns"], env["kube"], env["ns"][-4:]
    made = []
    try:
        made.append(storage(env, f"corp-{tag}", [ns]))
        made.append(storage(env, f"other-{tag}", ["team-b"]))
        made.append(storage(env, f"plain-{tag}", ["*"], endpoint="http://10.1.2.3:7480"))
        env["controller"](inline_s3=False)
        make_pod(env)

        s = tenant_session(env, h, "by-ref", {"storageRef": {"name": f"corp-{tag}"}})
        inj = wait_injector(env, "by-ref")
        c = inj["spec"]["containers"][0]
        assert f"s3://corp-profiles/k8s/{ns}/by-ref/{s['metadata']['uid']}/trainer-0" in c["args"], c["args"]
        env_vars = {v["name"]: v.get("value") for v in c["env"]}
        assert env_vars.get("AWS_ENDPOINT_URL_S3") == "https://s3.corp.example:9000", env_vars
        assert [v["secret"]["secretName"] for v in inj["spec"]["volumes"] if "secret" in v] == ["s3-creds"]

        # the attack of the issue: any endpoint (plain http), any Secret, any key
        tenant_session(env, h, "inline", {"s3": {"endpoint": "http://collector.evil:80", "bucket": "loot",
                                                 "secretRef": {"name": "default-token",
                                                               "accessKeyIDKey": "token"}}})
        st = wait_phase(env, "Failed", name="inline")["status"]
        assert condition(st, "Failed")["reason"] == "InvalidSpec", st
        assert "spec.output.s3 is turned off" in st["message"] and "storageRef" in st["message"], st
        assert injector_pods(env, "inline") == []

        tenant_session(env, h, "not-ours", {"storageRef": {"name": f"other-{tag}"}})
        st = wait_phase(env, "Failed", name="not-ours")["status"]
        assert condition(st, "Failed")["reason"] == "StorageDenied", st
        assert f"is not for namespace '{ns}'" in st["message"], st

        tenant_session(env, h, "plain", {"storageRef": {"name": f"plain-{tag}"}})
        st = wait_phase(env, "Failed", name="plain")["status"]
        assert condition(st, "Failed")["reason"] == "StorageInvalid", st
        assert "plain http" in st["message"], st

        tenant_session(env, h, "missing", {"storageRef": {"name": f"nowhere-{tag}"}})
        st = wait_phase(env, "Pending", name="missing")["status"]
        assert "not found" in st["message"], st
        st = wait_phase(env, "Failed", name="missing", timeout=15)["status"]     # --target-wait 3s
        assert condition(st, "Failed")["reason"] == "StorageNotFound", st
        assert injector_pods(env, "plain") == injector_pods(env, "not-ours") == \
            injector_pods(env, "missing") == []
    finally:
        for n in made:
            kube.delete(f"{GROUP}/clusterprofilingstorages/{n}")


def can_i(c8s, where):
    """`kubectl auth can-i create pods/exec -n where --as TENANT`, the real client: yes or no."""
    r = c8s.kubectl("auth", "can-i", "create", "pods/exec", "-n", where, "--as", TENANT)
    assert r.returncode in (0, 1), r.stderr
    return r.stdout.strip()


def operator_namespace(e):
    """A namespace of the admin's for the injector pods (the chart's release namespace),
    with the storage's Secret and a played kubelet confirming deletions there; returns
    (name, a function that removes it)."""
    kube, ops = e["kube"], e["ns"][:55] + "-op"
    assert kube.post("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                            "metadata": {"name": ops}}).status == 201
    secret = kube.get(f"/api/v1/namespaces/{e['ns']}/secrets/s3-creds").json
    secret["metadata"] = {"name": "s3-creds"}
    assert kube.post(f"/api/v1/namespaces/{ops}/secrets", secret).status == 201
    halt = e["ctl"].start_reaper(ops)

    def remove():
        halt()
        kube.delete(f"/api/v1/namespaces/{ops}")
    return ops, remove


def aiprof_pods(e, ns):
    return e["kube"].get(f"/api/v1/namespaces/{ns}/pods",
                         query={"labelSelector": "aiprof.io/session-uid"}).json["items"]


def test_injector_pods_out_of_the_tenants_reach(env):
    """With --injector-namespace (the chart passes its release namespace), the injector pod
    of a session that names the admin's storage runs there, not in the tenant's namespace:
    the tenant, who may exec into every pod of their own namespace, may not there (`kubectl
    auth can-i`, the real client, says no) and does not see it among their pods. It mounts
    the admin's Secret of that namespace, carries the session's namespace, name and UID as
    labels (no ownerReference crosses namespaces), its result reaches the status, and it
    goes with the session: deleted mid-run through the finalizer, and, left behind by a
    session whose finalizer was taken off by hand, when the controller starts."""
    h = tenant(env)
    ns, kube, tag = env["ns"], env["kube"], env["ns"][-4:]
    c8s = env["api"]["cluster"]
    ops, remove = operator_namespace(env)
    made = []
    try:
        made.append(storage(env, f"corp-{tag}", [ns]))
        ctl = env["controller"]("--injector-namespace", ops, inline_s3=False)
        make_pod(env)
        s = tenant_session(env, h, "by-ref", {"storageRef": {"name": f"corp-{tag}"}})
        inj = wait_for(lambda: (aiprof_pods(env, ops) or [None])[0], 15, "an injector pod in the operator's namespace")
        md, name = inj["metadata"], inj["metadata"]["name"]
        assert md["labels"]["aiprof.io/session-namespace"] == ns, md
        assert md["labels"]["aiprof.io/session-uid"] == s["metadata"]["uid"], md
        assert "ownerReferences" not in md, md
        assert [v["secret"]["secretName"] for v in inj["spec"]["volumes"] if "secret" in v] == ["s3-creds"]
        assert injector_pods(env) == []
        seen = kube.get(f"/api/v1/namespaces/{ns}/pods", headers=h).json["items"]
        assert [p["metadata"]["name"] for p in seen] == ["trainer-0"]

        assert can_i(c8s, ns) == "yes"          # the check can say yes: in their own namespace
        assert can_i(c8s, ops) == "no"
        r = kube.get(f"/api/v1/namespaces/{ops}/pods/{name}", headers=h)
        assert r.status == 403, r

        env["ctl"].kubelet("run", ops, name)
        env["ctl"].kubelet("terminate", ops, name, container="injector", exitCode=0, reason="Completed",
                           message=json.dumps({"artifacts": [result("timeline.json.gz", "s3://corp-profiles/k8s/t.json.gz")]}),
                           ephemeral=False)
        st = wait_phase(env, "Succeeded", name="by-ref")["status"]
        assert [a["url"] for a in st["artifacts"]] == ["s3://corp-profiles/k8s/t.json.gz"], st
        assert st["targets"][0]["injectorUID"] == md["uid"]

        # deleted mid-run: the finalizer deletes its pod in the operator's namespace
        tenant_session(env, h, "gone", {"storageRef": {"name": f"corp-{tag}"}})
        wait_for(lambda: [p for p in aiprof_pods(env, ops) if p["metadata"]["labels"]["aiprof.io/session"] == "gone"],
                 15, "the second injector pod")
        assert kube.delete(f"{GROUP}/namespaces/{ns}/profilingsessions/gone", headers=h).status == 200
        wait_for(lambda: get_session(env, "gone") is None, 15, "the session gone (finalizer removed)")
        wait_for(lambda: not [p for p in aiprof_pods(env, ops)
                              if p["metadata"]["labels"]["aiprof.io/session"] == "gone"], 15,
                 "its pod in the operator's namespace deleted")

        # left behind while no controller ran (the finalizer taken off by hand): the next
        # controller deletes it; a pod of a session that still exists stays
        ctl.kill(signal.SIGTERM)
        left = {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "aiprof-ghost-0123456789",
                             "labels": {"aiprof.io/session-uid": "0000-ghost", "aiprof.io/session": "ghost",
                                        "aiprof.io/session-namespace": ns}},
                "spec": {"nodeName": "node-1", "restartPolicy": "Never",
                         "containers": [{"name": "injector", "image": "aiprof/aiprof:test"}]}}
        assert kube.post(f"/api/v1/namespaces/{ops}/pods", left).status == 201
        env["controller"]("--injector-namespace", ops, inline_s3=False)
        wait_for(lambda: [p["metadata"]["name"] for p in aiprof_pods(env, ops)] == [name], 15,
                 "the left-behind pod deleted, the finished session's kept")
    finally:
        for n in made:
            kube.delete(f"{GROUP}/clusterprofilingstorages/{n}")
        remove()


def test_pod_security_baseline_says_why(env):
    """A namespace enforcing Pod Security `baseline` refuses the node-agent injector pod
    (hostPID, added capabilities): the target fails InjectorCreateFailed with the API server's
    own words, not a silent wait."""
    r = env["kube"].patch(f"/api/v1/namespaces/{env['ns']}",
                          {"metadata": {"labels": {"pod-security.kubernetes.io/enforce": "baseline"}}})
    assert r.status == 200, r
    env["controller"]()
    make_pod(env)
    make_session(env)
    st = wait_phase(env, "Failed", timeout=20)["status"]
    t = st["targets"][0]
    assert t["reason"] == "InjectorCreateFailed", t
    assert "violates PodSecurity" in t["message"] and "baseline" in t["message"], t
    assert injector_pods(env) == []


def test_sessions_per_namespace_are_limited(env):
    """--max-sessions-per-namespace 1: a second session waits Pending, saying why, until the
    first has ended; then it runs."""
    env["controller"]("--max-sessions-per-namespace", "1")
    make_pod(env)
    make_session(env, name="first")
    first = wait_injector(env, "first")["metadata"]["name"]
    wait_for(lambda: (get_session(env, "first").get("status") or {}).get("startTime"), 10, "first started")
    make_session(env, name="second")
    st = wait_phase(env, "Pending", name="second")["status"]
    assert "1 sessions of namespace" in st["message"] and "--max-sessions-per-namespace" in st["message"], st
    time.sleep(2)
    assert injector_pods(env, "second") == []
    env["ctl"].kubelet("run", env["ns"], first)
    terminate(env, first, {"artifacts": [result("timeline.json.gz", "s3://profiles/x/timeline.json.gz")]})
    wait_phase(env, "Succeeded", name="first")
    wait_injector(env, "second")


def test_inline_s3_turned_off_under_a_running_session(env):
    """The upgrade path: a session that started while inline s3 was allowed runs to its end
    under a controller that no longer allows it; a new one giving spec.output.s3 fails."""
    c = env["controller"]()                             # --allow-inline-s3 (the harness's)
    make_pod(env)
    make_session(env, name="before")
    inj = wait_injector(env, "before")["metadata"]["name"]
    wait_for(lambda: (get_session(env, "before").get("status") or {}).get("startTime"), 10, "started")
    c.kill(signal.SIGTERM)
    env["controller"](inline_s3=False)
    env["ctl"].kubelet("run", env["ns"], inj)
    terminate(env, inj, {"artifacts": [result("timeline.json.gz", "s3://profiles/x/timeline.json.gz")]})
    assert wait_phase(env, "Succeeded", name="before")["status"]["artifacts"]
    make_session(env, name="after")
    st = wait_phase(env, "Failed", name="after")["status"]
    assert "spec.output.s3 is turned off" in st["message"], st


def chart_identity(e, tmp_path):
    """The chart's RBAC objects (its defaults: the in-cluster store on, inline s3 off) applied
    to the real server, and a kubeconfig of the chart's service account: the controller then
    runs with exactly the chart's grants. Returns (kubeconfig, the injector namespace, a
    function that removes what this made)."""
    from test_artstore import apply_chart_rbac
    from test_install import INJ_NS, RELEASE_NS, one
    c8s, made = e["api"]["cluster"], []
    docs = apply_chart_rbac(c8s, made)
    token = c8s.token(RELEASE_NS, one(docs, "ServiceAccount")["metadata"]["name"], seconds=1800)
    kubeconfig = c8s.kubeconfig_for(str(tmp_path / "sa-kubeconfig"), token)

    def remove():
        for what in made:
            c8s.kubectl("delete", *what, "--wait=false")
    return kubeconfig, INJ_NS, remove


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_store_session_injector_stays_out_of_the_tenants_reach(env, tmp_path):
    """Issue 30: with the chart's defaults and no S3 anywhere, a tenant who may exec into every
    pod of their namespace profiles a pod there through the in-cluster store — and the
    node-agent injector (hostPID, uid 0, ptrace and BPF) never appears in their namespace: it
    runs in the injector namespace, where `kubectl auth can-i create pods/exec` says no. The
    injector's side is the real client (`aiprof upload` to the URL the controller put in the
    pod's -o, with a token bound to that pod); the artifact is read back as the tenant, from
    ConfigMaps of their namespace."""
    import subprocess
    import threading
    h = tenant(env)
    ns, kube, c8s = env["ns"], env["kube"], env["api"]["cluster"]
    aiprof = os.environ.get("AIPROF_BIN") or os.path.join(os.path.dirname(__file__), "..", "..",
                                                          os.environ.get("BUILD", "build"), "aiprof")
    if not os.path.exists(aiprof):
        pytest.skip(f"{aiprof} not built")
    # the built-in `view` in their namespace: how a tenant reads the store's ConfigMaps
    assert kube.post(f"/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}/rolebindings", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "view"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
        "subjects": [{"kind": "User", "name": TENANT, "apiGroup": "rbac.authorization.k8s.io"}]}).status == 201
    kubeconfig, inj_ns, remove = chart_identity(env, tmp_path)
    halt = env["ctl"].start_reaper(inj_ns)
    seen_in_ns, stop = [], threading.Event()
    ctl = token = None

    def watch_tenant_ns():              # "never": looked at every 0.2 s while the test runs
        while not stop.wait(0.2):
            seen_in_ns.extend(p["metadata"]["name"] for p in injector_pods(env))
    watcher = threading.Thread(target=watch_tenant_ns, daemon=True)
    watcher.start()
    try:
        # the store's URL must be known when the controller starts: a port chosen here
        from harness import ControllerProcess, controller_args
        from test_controller import CONTROLLER
        port = free_port()
        ctl = ControllerProcess(controller_args(
            CONTROLLER, ns, "--no-leader-elect", "--injector-namespace", inj_ns, "--metrics-addr",
            f"127.0.0.1:{port}", "--store-url", f"http://127.0.0.1:{port}", kubeconfig=kubeconfig,
            target_wait="3s", grace="3s", injector_image="aiprof/aiprof:test",
            identity=f"tenancy-{os.getpid()}", inline_s3=False),
            str(tmp_path / "controller.log"), {k: v for k, v in os.environ.items() if k != "KUBECONFIG"})
        wait_for(lambda: f"(port {port})" in ctl.text() or ctl.p.poll() is not None, 10, "the store's port")
        assert ctl.p.poll() is None, ctl.text()[-2000:]
        make_pod(env)
        s = {"apiVersion": "aiprof.io/v1alpha1", "kind": "ProfilingSession", "metadata": {"name": "in-store"},
             "spec": {"targets": {"podName": "trainer-0", "container": "trainer"}, "duration": "30s"}}
        r = kube.post(f"{GROUP}/namespaces/{ns}/profilingsessions", s, headers=h)
        assert r.status == 201, r
        inj = wait_for(lambda: (aiprof_pods(env, inj_ns) and [p for p in aiprof_pods(env, inj_ns)
                                if p["metadata"]["labels"].get("aiprof.io/session-namespace") == ns] or [None])[0],
                       15, "the store session's injector in the injector namespace")
        md, name = inj["metadata"], inj["metadata"]["name"]
        assert md["labels"]["aiprof.io/session-uid"] == r.json["metadata"]["uid"] and "ownerReferences" not in md
        assert inj["spec"]["hostPID"] is True
        args = inj["spec"]["containers"][0]["args"]
        out_url = args[args.index("-o") + 1]
        assert out_url == f"http://127.0.0.1:{port}/v1/artifacts/{ns}/in-store/trainer-0", args
        wait_for(lambda: ((get_session(env, "in-store").get("status") or {}).get("targets") or [{}])[0]
                 .get("injectorUID") == md["uid"], 15, "the injector's UID in the status")
        env["ctl"].kubelet("run", inj_ns, name)
        wait_phase(env, "Profiling", name="in-store")

        # the injector's upload, as it runs in the pod: its projected token, the real client
        token = c8s.kubectl("create", "token", "default", "-n", inj_ns, "--audience", "aiprof.io/artifacts",
                            "--bound-object-kind", "Pod", "--bound-object-name", name,
                            "--bound-object-uid", md["uid"], "--duration", "600s", ok=True).stdout.strip()
        (tmp_path / "token").write_text(token)
        out = tmp_path / "out"
        out.mkdir()
        summary = json.dumps({"findings": [], "note": os.urandom(8).hex()}).encode()
        (out / "summary.json").write_bytes(summary)
        up = subprocess.run([aiprof, "upload", str(out), out_url], capture_output=True, text=True, timeout=120,
                            env=dict(os.environ, AIPROF_STORE_TOKEN_FILE=str(tmp_path / "token")))
        assert up.returncode == 0, up.stdout + up.stderr
        terminate({**env, "ns": inj_ns}, name,
                  {"artifacts": [result("summary.json", f"{out_url}/summary.json", size=len(summary))]})
        st = wait_phase(env, "Succeeded", name="in-store")["status"]
        assert [a["url"] for a in st["artifacts"]] == [f"{out_url}/summary.json"], st

        # what the tenant gets: the artifact, from ConfigMaps of their own namespace
        cms = kube.get(f"/api/v1/namespaces/{ns}/configmaps", headers=h,
                       query={"labelSelector": f"aiprof.io/session-uid={md['labels']['aiprof.io/session-uid']}"})
        assert cms.status == 200, cms
        mine = [cm for cm in cms.json["items"]
                if cm["metadata"]["annotations"]["aiprof.io/artifact-name"] == "trainer-0/summary.json"]
        assert [base64.b64decode(cm["binaryData"]["data"]) for cm in mine] == [summary]

        assert can_i(c8s, ns) == "yes"          # the check can say yes: in their own namespace
        assert can_i(c8s, inj_ns) == "no"
        assert kube.get(f"/api/v1/namespaces/{inj_ns}/pods/{name}", headers=h).status == 403
    finally:
        stop.set()
        watcher.join()
        if ctl is not None:
            assert ctl.stop() == 0, ctl.text()[-2000:]
            assert token is None or token not in ctl.text(), "the injector's token in the log"
        halt()
        c8s.kubectl("delete", "pods", "-n", inj_ns, "-l", f"aiprof.io/session-namespace={ns}",
                    "--grace-period=0", "--force", "--wait=false")
        remove()
    assert seen_in_ns == [], f"injector pods in the tenant's namespace: {sorted(set(seen_in_ns))}"
