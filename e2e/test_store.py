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


def plugin(env, *args, timeout=240):
    e = env.chain.cluster.kubectl_env()
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


def test_chart_installed_controller_stores_without_s3(env, tmp_path):
    """The quick start's path: the controller as the chart installs it (its RBAC, its
    --store-url, store.url pointed at the node since the kit has no cluster DNS), profiled with
    the plugin, artifacts checked against the injector's manifest."""
    env.helm_controller(store_on_node=True)
    env.pod("trainer-0", TRAINER_RUN)
    env.wait_running("trainer-0")
    out = tmp_path / "out"
    r = plugin(env, "profile", "pod/trainer-0", "--duration", "2s", "--name", "chart", "-o", str(out))
    assert r.returncode == 0, r.stdout + r.stderr + env.helm_logs()[-4000:] + env.debug()
    man = json.loads((out / "trainer-0" / "manifest.json").read_bytes())
    assert {"summary.json", "timeline.json.gz", "report.html"} <= {m["name"] for m in man["artifacts"]}
    for m in man["artifacts"]:
        data = (out / "trainer-0" / m["name"]).read_bytes()
        assert hashlib.sha256(data).hexdigest() == m["sha256"], m["name"]
    assert f"report: {out}/trainer-0/report.html" in r.stdout, r.stdout
