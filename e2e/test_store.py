# SPDX-License-Identifier: MIT
"""No S3 anywhere, on the real Kubernetes: `kubectl aiprof profile pod/trainer-0` creates the
session, the real controller (with --store-url, its HTTP endpoint on the node's bridge address,
where the kit's pods reach the host) makes the injector pod, the injector sends its artifacts
to the controller with its pod-bound token, the controller keeps them as ConfigMaps owned by
the session, and the plugin fetches them through the API server into a folder: byte-identical to
what the injector wrote (the manifest's SHA-256s, and the status's). `kubectl aiprof get` fetches
them again; deleting the session deletes them."""
import hashlib
import json
import os
import socket
import subprocess

from e2e.chain import ROOT, wait_for

TRAINER_RUN = ["--ranks", "2", "--run-seconds", "300", "--pageable"]
PLUGIN = os.path.join(ROOT, "controller", "kubectl-aiprof")


def free_port(ip):
    with socket.socket() as s:
        s.bind((ip, 0))
        return s.getsockname()[1]


def plugin(env, *args, timeout=240, extra_env=None):
    e = env.chain.cluster.kubectl_env()
    e.update(extra_env or {})
    return subprocess.run(["bash", PLUGIN, "-n", env.ns, *args], capture_output=True, text=True,
                          timeout=timeout, env=e)


def store_controller(env):
    ip = env.chain.node_ip
    port = free_port(ip)
    env.controller("--metrics-addr", f"{ip}:{port}", "--http-auth", "kubernetes",
                   "--store-url", f"http://{ip}:{port}")
    return port


def test_profile_a_pod_without_s3(env, tmp_path):
    store_controller(env)
    env.pod("trainer-0", TRAINER_RUN)
    target = env.wait_running("trainer-0")
    out = tmp_path / "out"
    r = plugin(env, "profile", "pod/trainer-0", "-c", "trainer", "--duration", "3s", "--name", "quick",
               "-o", str(out))
    print(r.stderr + r.stdout)               # what a user sees (pytest -s)
    assert r.returncode == 0, r.stdout + r.stderr + env.debug()
    # progress was shown (not a terminal here: one line per phase), then the report and findings
    assert "quick: Profiling" in r.stderr or "quick: Uploading" in r.stderr, r.stderr
    assert f"report: {out}/trainer-0/report.html" in r.stdout, r.stdout
    assert "PageableMemcpy" in r.stdout, r.stdout

    s = env.get_session("quick")
    st = s["status"]
    assert st["phase"] == "Succeeded"
    assert "output" not in s["spec"]
    arts = {a["name"]: a for a in st["artifacts"] if a.get("target") == "trainer-0"}
    assert {"summary.json", "timeline.json.gz", "manifest.json", "report.html"} <= set(arts), arts
    # byte-identical to what the injector wrote: its manifest's SHA-256s, and the status's
    man = json.loads((out / "trainer-0" / "manifest.json").read_bytes())
    for m in man["artifacts"]:
        data = (out / "trainer-0" / m["name"]).read_bytes()
        assert hashlib.sha256(data).hexdigest() == m["sha256"] and len(data) == m["size"], m["name"]
    for name, a in arts.items():
        data = (out / "trainer-0" / name).read_bytes()
        assert hashlib.sha256(data).hexdigest() == a["sha256"], name
    summary = json.loads((out / "trainer-0" / "summary.json").read_bytes())
    assert summary["targets"], summary

    # stored as ConfigMaps owned by the session, labelled with its UID
    cms = env.kube.get(f"/api/v1/namespaces/{env.ns}/configmaps",
                       query={"labelSelector": f"aiprof.io/session-uid={s['metadata']['uid']}"}).json["items"]
    assert cms
    for cm in cms:
        assert cm["metadata"]["ownerReferences"][0]["uid"] == s["metadata"]["uid"]
        assert cm.get("immutable") is True

    # the injector had no S3 credentials and a token bound to it for the store alone
    inj = env.injector_pods("quick")[0]
    vols = {v["name"]: v for v in inj["spec"]["volumes"]}
    assert "s3-credentials" not in vols
    src = vols["aiprof-store-token"]["projected"]["sources"][0]["serviceAccountToken"]
    assert src["audience"] == "aiprof.io/artifacts"

    # fetched again later, the same bytes; -o json for scripts
    again = tmp_path / "again"
    r = plugin(env, "get", "quick", "-o", str(again))
    assert r.returncode == 0, r.stdout + r.stderr
    for m in man["artifacts"]:
        assert (again / "trainer-0" / m["name"]).read_bytes() == (out / "trainer-0" / m["name"]).read_bytes()
    # a co-tenant's ConfigMap with the session's label and a hostile chunk count (issue 30): named
    # and ignored, nothing run, the controller's ConfigMaps fetched as before
    env.apply({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "a-decoy", "labels": {"aiprof.io/session-uid": s["metadata"]["uid"]},
                            "annotations": {"aiprof.io/artifact-name": "trainer-0/manifest.json",
                                            "aiprof.io/chunk": "0/BASH_VERSINFO[$(touch $AIPROF_PWNED)]"}},
               "data": {"x": "y"}})
    pwned = tmp_path / "PWNED"
    r = plugin(env, "get", "quick", "-o", str(tmp_path / "decoyed"), extra_env={"AIPROF_PWNED": str(pwned)})
    assert not pwned.exists(), r.stderr
    assert r.returncode == 0 and 'ignored ConfigMap "a-decoy"' in r.stderr, r.stdout + r.stderr
    for m in man["artifacts"]:
        assert (tmp_path / "decoyed" / "trainer-0" / m["name"]).read_bytes() == (out / "trainer-0" / m["name"]).read_bytes()
    assert env.kubectl("delete", "configmap", "a-decoy").returncode == 0
    r = plugin(env, "get", "quick", "-o", str(again), "--format", "json")
    assert r.returncode == 0, r.stderr
    j = json.loads(r.stdout)
    assert j["phase"] == "Succeeded" and j["fetched"] == len(arts) and j["dir"] == str(again), r.stdout

    # what its threads do now, with nothing loaded into it (a 1 s session with uprobes)
    r = plugin(env, "stacks", "pod/trainer-0", "-c", "trainer", "--name", "now", "-o", str(tmp_path / "now"))
    print(r.stdout[:3000] + r.stderr)
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.startswith("== trainer-0\nProcess "), r.stdout[:500]
    assert "\nThread " in r.stdout and (" blocked for " in r.stdout or " running for " in r.stdout), r.stdout[:2000]
    now = env.get_session("now")
    assert now["spec"]["injection"]["method"] == "EBPFOnly", now["spec"]
    assert (tmp_path / "now" / "trainer-0" / "stacks.json").exists()

    # the target was never restarted
    pod = env.get_pod("trainer-0")
    assert pod["status"]["containerStatuses"][0]["containerID"] == target["status"]["containerStatuses"][0]["containerID"]
    assert pod["status"]["containerStatuses"][0]["restartCount"] == 0

    # deleting the session deletes what it stored (the garbage collector)
    r = plugin(env, "delete", "quick")
    assert r.returncode == 0, r.stderr
    wait_for(lambda: not env.kube.get(f"/api/v1/namespaces/{env.ns}/configmaps", query={
        "labelSelector": f"aiprof.io/session-uid={s['metadata']['uid']}"}).json["items"], 60,
        "the session's ConfigMaps to be garbage-collected")


def test_plugin_refuses_what_it_cannot_do(env, tmp_path):
    r = plugin(env, "profile", "trainer-0")
    assert r.returncode == 2 and "pod/NAME" in r.stderr, r.stderr
    r = plugin(env, "profile", "pod/absent")
    assert r.returncode == 3 and "pod absent not found" in r.stderr, r.stderr
    r = plugin(env, "profile", "pod/x", "--duration", "soon")
    assert r.returncode == 2 and "--duration" in r.stderr, r.stderr
    r = plugin(env, "get", "nosuch")
    assert r.returncode == 3, r.stderr


def tenant_kubeconfig(env, tmp_path):
    """A kubeconfig for a tenant of env.ns: the admin's, impersonating a user bound to a Role
    of that namespace alone — what a team usually has: make, delete and exec into its pods,
    read its ConfigMaps, sessions. Returns (path, user)."""
    import yaml
    user = f"tenant-{env.ns}"
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "tenant"},
            "rules": [{"apiGroups": [""], "resources": ["pods/log", "configmaps", "events"],
                       "verbs": ["get", "list", "watch"]},
                      {"apiGroups": [""], "resources": ["pods", "pods/exec"],
                       "verbs": ["get", "list", "watch", "create", "delete"]},
                      {"apiGroups": ["aiprof.io"], "resources": ["profilingsessions"],
                       "verbs": ["get", "list", "watch", "create", "delete", "patch"]}]}
    binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "tenant"},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "tenant"},
               "subjects": [{"kind": "User", "name": user, "apiGroup": "rbac.authorization.k8s.io"}]}
    env.apply(role)
    env.apply(binding)
    with open(env.chain.cluster.kubeconfig) as f:
        kc = yaml.safe_load(f)
    for u in kc["users"]:
        u["user"]["as"] = user
    path = tmp_path / "tenant.kubeconfig"
    path.write_text(yaml.safe_dump(kc))
    path.chmod(0o600)
    return str(path), user


def test_chart_installed_controller_stores_without_s3(env, tmp_path):
    """The quick start's path: the controller as the chart installs it (its RBAC, its
    --store-url, store.url pointed at the node since the kit has no cluster DNS), profiled with
    the plugin by a tenant who may exec into every pod of the namespace and nothing outside it,
    artifacts checked against the injector's manifest. Issue 30: the store session's
    node-agent injector (hostPID, uid 0, ptrace and BPF) never appears in the tenant's
    namespace — it runs in the chart's injector namespace, where `kubectl auth can-i create
    pods/exec` says no to the tenant (on the main before, it ran in the tenant's namespace)."""
    import threading
    env.helm_controller(store_on_node=True)
    env.pod("trainer-0", TRAINER_RUN)
    env.wait_running("trainer-0")
    kubeconfig, user = tenant_kubeconfig(env, tmp_path)
    seen_in_ns, stop = set(), threading.Event()

    def watch_tenant_ns():                  # "never": looked at every 0.2 s while the plugin runs
        while not stop.wait(0.2):
            items = env.kube.get(f"/api/v1/namespaces/{env.ns}/pods",
                                 query={"labelSelector": "aiprof.io/session-uid"}).json.get("items", [])
            seen_in_ns.update(p["metadata"]["name"] for p in items)
    watcher = threading.Thread(target=watch_tenant_ns, daemon=True)
    watcher.start()
    out = tmp_path / "out"
    try:
        r = plugin(env, "profile", "pod/trainer-0", "--duration", "2s", "--name", "chart", "-o", str(out),
                   extra_env={"KUBECONFIG": kubeconfig})
    finally:
        stop.set()
        watcher.join()
    assert r.returncode == 0, r.stdout + r.stderr + env.helm_logs()[-4000:] + env.debug()
    assert seen_in_ns == set(), f"aiprof pods in the tenant's namespace: {sorted(seen_in_ns)}"
    assert [p["metadata"]["name"] for p in env.injector_pods("chart")
            if p["metadata"]["namespace"] == env.ns] == []
    for ns, want in ((env.ns, "yes"), (env.inj_ns, "no")):
        c = env.chain.cluster.kubectl("auth", "can-i", "create", "pods", "--subresource=exec", "-n", ns,
                                      kubeconfig=kubeconfig)
        assert c.stdout.strip() == want, (ns, c.stdout, c.stderr)
    man = json.loads((out / "trainer-0" / "manifest.json").read_bytes())
    assert {"summary.json", "timeline.json.gz", "report.html"} <= {m["name"] for m in man["artifacts"]}
    for m in man["artifacts"]:
        data = (out / "trainer-0" / m["name"]).read_bytes()
        assert hashlib.sha256(data).hexdigest() == m["sha256"], m["name"]
    assert f"report: {out}/trainer-0/report.html" in r.stdout, r.stdout
