# SPDX-License-Identifier: MIT
"""End to end: `kubectl apply -f` a ProfilingSession → the real controller makes an injector pod
→ the kubelet double runs it with runc next to the target container → aiprof injects into the
trainer in that container and uploads to radosgw → the controller reads the termination
message into the status. Checked as a user would: kubectl, the bucket, the status."""
import json
import os

from e2e.chain import gunzip_json, sha256

# pageable host buffers: a planted problem the diagnosis must name (PageableMemcpy)
TRAINER_RUN = ["--ranks", "2", "--run-seconds", "300", "--pageable"]


def check_artifacts_in_bucket(env, st, target):
    """The status lists the target's artifacts; the bucket has them byte-identical to the
    manifest (sha256 and size), and the manifest agrees with the status."""
    arts = [a for a in st["artifacts"] if a.get("target") == target]
    names = {a["name"] for a in arts}
    assert {"timeline.json.gz", "summary.json", "manifest.json"} <= names, names
    by_name = {a["name"]: a for a in arts}
    manifest = json.loads(env.get_object(by_name["manifest.json"]["url"]))
    listed = {a["name"]: a for a in manifest["artifacts"]}
    assert {"timeline.json.gz", "summary.json"} <= set(listed), listed
    for name, m in listed.items():
        url = by_name["manifest.json"]["url"].rsplit("/", 1)[0] + "/" + name
        data = env.get_object(url)
        assert sha256(data) == m["sha256"] and len(data) == m["size"], name
        if name in by_name:
            assert by_name[name]["sha256"] == m["sha256"] and by_name[name]["size"] == m["size"], name
    for a in arts:          # every listed artifact is really there, as listed
        data = env.get_object(a["url"])
        assert sha256(data) == a["sha256"] and len(data) == a["size"], a["name"]
    return by_name


def test_session_by_pod_name(env):
    env.controller()
    env.pod("trainer-0", TRAINER_RUN)
    target = env.wait_running("trainer-0")
    target_cid = target["status"]["containerStatuses"][0]["containerID"]
    env.session("slow-step", {"podName": "trainer-0", "container": "trainer"}, duration="3s")
    s, seen = env.wait_phase("slow-step", ("Succeeded", "Failed"), timeout=120)
    st = s["status"]
    assert st["phase"] == "Succeeded", json.dumps(st)[:3000] + env.debug()
    assert "Profiling" in seen or "Uploading" in seen or "Injecting" in seen, seen

    # what `kubectl get profilingsessions` prints
    r = env.kubectl("get", "profilingsessions")
    assert r.returncode == 0, r.stderr
    row = next(line for line in r.stdout.splitlines() if line.startswith("slow-step"))
    assert "Succeeded" in row, r.stdout

    # the injector pod the controller made ran as a container next to the target and ended well
    inj = env.injector_pods("slow-step")
    assert len(inj) == 1
    ctr = inj[0]["spec"]["containers"][0]
    assert ctr["args"][:3] == ["profile", "--container-id", target_cid]
    # the node the kubelet double registered reports this machine's kernel (>= 5.8 here): no SYS_ADMIN
    r = env.kubectl("get", "nodes", "-o", "wide")
    assert r.returncode == 0 and "node-e2e" in r.stdout and "Ready" in r.stdout, r.stdout + r.stderr
    assert os.uname().release in r.stdout
    assert "SYS_ADMIN" not in ctr["securityContext"]["capabilities"]["add"]
    cs = inj[0]["status"]["containerStatuses"][0]
    term = cs["state"]["terminated"]
    assert term["exitCode"] == 0 and term["reason"] == "Completed"
    assert cs["containerID"].startswith("containerd://")
    assert json.loads(term["message"])["artifacts"], term["message"]
    # it ran the injector image's aiprof, where injector/Dockerfile puts it
    run = env.chain.kubelet.container_of(env.ns, inj[0]["metadata"]["name"], "injector")
    with open(os.path.join(run.bundle, "config.json")) as f:
        cfg = json.load(f)
    assert cfg["process"]["args"][:2] == ["aiprof", "profile"]
    # with the pod's capabilities and nothing more, in the node's pid namespace (hostPID)
    assert sorted(cfg["process"]["capabilities"]["effective"]) == ["CAP_BPF", "CAP_PERFMON", "CAP_SYS_PTRACE"]
    assert "pid" not in {n["type"] for n in cfg["linux"]["namespaces"]}
    # the S3 credentials reached it as files of the Secret volume, never as env literals
    assert not [e for e in cfg["process"]["env"] if e.startswith(("AWS_ACCESS_KEY_ID=", "AWS_SECRET_ACCESS_KEY="))]
    assert "AIPROF_S3_SECRET_DIR=/var/run/secrets/aiprof/s3" in cfg["process"]["env"]
    usr = next(m for m in cfg["mounts"] if m["destination"] == "/usr")
    assert usr["type"] == "overlay" and os.path.exists(usr["options"][0].split("=")[1].split(":")[0] + "/bin/aiprof")

    # artifacts in the bucket, byte-identical to the manifest, listed in the status
    by_name = check_artifacts_in_bucket(env, st, "trainer-0")
    prefix = f"e2e/{env.ns}/slow-step/trainer-0/"
    assert by_name["timeline.json.gz"]["url"] == f"s3://{env.rgw.bucket}/{prefix}timeline.json.gz"
    summary = json.loads(env.get_object(by_name["summary.json"]["url"]))
    tl = gunzip_json(env.get_object(by_name["timeline.json.gz"]["url"]))
    launches = [e for e in tl["traceEvents"] if e.get("name") == "cudaLaunchKernel"]
    assert launches, "no kernel launches in the timeline"
    colls = [e for e in tl["traceEvents"] if e.get("cat") == "nccl"]
    assert {e["args"]["rank"] for e in colls} == {0, 1}
    # the findings of the summary are the status's findings
    want = sorted(f["category"] for f in summary.get("findings") or [])
    got = sorted(f["category"] for f in st.get("findings") or [] if f.get("target") == "trainer-0")
    assert got == want, (got, want)
    assert "PageableMemcpy" in got, got
    assert st["findingCount"] == len(st.get("findings") or [])
    assert st["targets"][0]["state"] == "Succeeded" and st["targets"][0]["node"] == "node-e2e"

    # the target was never restarted and runs on
    pod = env.get_pod("trainer-0")
    assert pod["status"]["phase"] == "Running"
    assert pod["status"]["containerStatuses"][0]["containerID"] == target_cid
    ctr = env.chain.kubelet.container_of(env.ns, "trainer-0", "trainer")
    assert ctr.running()
    # no credential anywhere a user can read
    for path in (f"/api/v1/namespaces/{env.ns}/pods", f"/apis/aiprof.io/v1alpha1/namespaces/{env.ns}/profilingsessions",
                 f"/api/v1/namespaces/{env.ns}/events"):
        assert env.rgw.secret.encode() not in env.kube.get(path).raw, path


def test_session_on_kata_pod_by_ephemeral_container(env):
    """A pod whose RuntimeClass is a Kata one gets an ephemeral container (not a node-agent
    pod): the kubelet double starts it in the target container's pid namespace and the pod's
    network/IPC/UTS namespaces (joined by path), with the S3 credentials resolved from the
    Secret into its env. (Here the pod itself still runs in a runc container: no Kata on this
    machine.)"""
    rc = f"kata-{env.ns}"[:63]
    r = env.kubectl("apply", "-f", "-", input=json.dumps({
        "apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "metadata": {"name": rc}, "handler": "kata"}))
    assert r.returncode == 0, r.stderr
    env.cluster_objects.append(("runtimeclass", rc))
    env.controller()
    env.pod("trainer-k", TRAINER_RUN, runtime_class=rc)
    env.wait_running("trainer-k")
    env.session("kata", {"podName": "trainer-k", "container": "trainer"}, duration="2s")
    s, _ = env.wait_phase("kata", ("Succeeded", "Failed"), timeout=120)
    st = s["status"]
    assert st["phase"] == "Succeeded", json.dumps(st)[:3000] + env.debug()
    assert st["targets"][0]["mode"] == "EphemeralContainer" and st["targets"][0]["runtime"] == "kata"
    assert env.injector_pods("kata") == [], "a Kata target gets no node-agent pod"
    pod = env.get_pod("trainer-k")
    eph = pod["spec"]["ephemeralContainers"]
    assert len(eph) == 1 and eph[0]["targetContainerName"] == "trainer"
    assert "--container-name" in eph[0]["args"]
    for v in eph[0]["env"]:
        assert "value" not in v or not v["name"].startswith("AWS_SECRET"), v
    es = pod["status"]["ephemeralContainerStatuses"][0]
    assert es["state"]["terminated"]["exitCode"] == 0, es
    # it ran in the target's pid namespace and the sandbox's network namespace
    kubelet = env.chain.kubelet
    inj = kubelet.container_of(env.ns, "trainer-k", eph[0]["name"], ephemeral=True)
    target = kubelet.container_of(env.ns, "trainer-k", "trainer")
    cfg = json.load(open(os.path.join(inj.bundle, "config.json")))
    joined = {n["type"]: n.get("path") for n in cfg["linux"]["namespaces"]}
    assert joined["pid"] == target.ns_path("pid")
    assert joined["network"] == kubelet.pod_run(env.ns, "trainer-k").sandbox.ns_path("net")
    check_artifacts_in_bucket(env, st, "trainer-k")
