# SPDX-License-Identifier: MIT
"""End to end on the real Kubernetes (../shared/k8s: kube-apiserver, scheduler, kubelet,
containerd, runc): `kubectl apply -f` a ProfilingSession → the real controller makes an injector
pod → the real kubelet runs it (the injector image built from this tree) next to the target
container → aiprof injects into the trainer in that container and uploads to radosgw → the
controller reads the termination message into the status. Checked as a user would: kubectl, the
bucket, the status; and on the node, what containerd ran. No GPU: the trainer image carries the
fake CUDA/NCCL/ibverbs/CUPTI libraries."""
import json
import os

from e2e.chain import INJECTOR_IMAGE, gunzip_json, injector_image_layout, sha256

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

    # the injector pod the controller made ran on the target's node and ended well
    inj = env.injector_pods("slow-step")
    assert len(inj) == 1
    assert inj[0]["spec"]["nodeName"] == target["spec"]["nodeName"] == env.chain.node
    ctr = inj[0]["spec"]["containers"][0]
    assert ctr["args"][:3] == ["profile", "--container-id", target_cid]
    # the real node, this machine's kernel; SYS_ADMIN for the kernel's BPF statistics (the
    # window's cost, a budget)
    r = env.kubectl("get", "nodes", "-o", "wide")
    assert r.returncode == 0 and env.chain.node in r.stdout and "Ready" in r.stdout, r.stdout + r.stderr
    assert os.uname().release in r.stdout
    assert "SYS_ADMIN" in ctr["securityContext"]["capabilities"]["add"]
    cs = inj[0]["status"]["containerStatuses"][0]
    term = cs["state"]["terminated"]
    assert term["exitCode"] == 0 and term["reason"] == "Completed", cs
    assert cs["containerID"].startswith("containerd://")
    assert cs["image"].endswith(INJECTOR_IMAGE), cs["image"]
    assert json.loads(term["message"])["artifacts"], term["message"]
    # containerd ran the image's aiprof: the pod's command `aiprof`, found on the image's PATH
    # where injector/Dockerfile puts it (its ENTRYPOINT)
    spec = env.container_spec(cs["containerID"].split("://", 1)[1])
    _, entrypoint = injector_image_layout()
    assert spec["process"]["args"][:2] == ["aiprof", "profile"], spec["process"]["args"]
    path = next(e for e in spec["process"]["env"] if e.startswith("PATH=")).split("=", 1)[1].split(":")
    assert os.path.basename(entrypoint[0]) == "aiprof" and os.path.dirname(entrypoint[0]) in path, (entrypoint, path)
    # with the pod's capabilities and nothing more, in the node's pid namespace (hostPID)
    assert sorted(spec["process"]["capabilities"]["effective"]) == ["CAP_BPF", "CAP_PERFMON", "CAP_SYS_ADMIN",
                                                                     "CAP_SYS_PTRACE"]
    pidns = {n["type"]: n.get("path") for n in spec["linux"]["namespaces"]}.get("pid", "absent")
    assert pidns == "absent" or os.readlink(pidns) == os.readlink("/proc/self/ns/pid"), pidns
    # the S3 credentials reached it as files of the Secret volume, never as env literals
    assert not [e for e in spec["process"]["env"] if e.startswith(("AWS_ACCESS_KEY_ID=", "AWS_SECRET_ACCESS_KEY="))]
    assert "AIPROF_S3_SECRET_DIR=/var/run/secrets/aiprof/s3" in spec["process"]["env"]
    assert [m for m in spec["mounts"] if m["destination"] == "/var/run/secrets/aiprof/s3"], spec["mounts"]
    # the node's unwind rules, shared by every injector on it: the host's directory
    assert [m for m in spec["mounts"] if m["destination"] == "/var/cache/aiprof/unwind" and
            m["source"] == "/var/cache/aiprof/unwind"], spec["mounts"]

    # artifacts in the bucket, byte-identical to the manifest, listed in the status
    by_name = check_artifacts_in_bucket(env, st, "trainer-0")
    # under the namespace, the session and its UID (a session made again keeps the last run)
    prefix = f"e2e/{env.ns}/slow-step/{s['metadata']['uid']}/trainer-0/"
    assert by_name["timeline.json.gz"]["url"] == f"s3://{env.rgw.bucket}/{prefix}timeline.json.gz"
    summary = json.loads(env.get_object(by_name["summary.json"]["url"]))
    assert summary["ebpf"]["unwinding"]["tables"]["shared"]["dir"] == "/var/cache/aiprof/unwind", \
        summary["ebpf"]["unwinding"]["tables"]
    # what the window cost, measured in the pod as on the command line
    assert summary["ebpf"]["cost"]["measured"], summary["ebpf"]["cost"]
    assert summary["ebpf"]["cost"]["bpf_runs"] > 0, summary["ebpf"]["cost"]
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
    assert st["targets"][0]["state"] == "Succeeded" and st["targets"][0]["node"] == env.chain.node

    # the target was never restarted and runs on
    pod = env.get_pod("trainer-0")
    assert pod["status"]["phase"] == "Running"
    assert pod["status"]["containerStatuses"][0]["containerID"] == target_cid
    assert pod["status"]["containerStatuses"][0]["restartCount"] == 0
    assert env.container_running("trainer-0", "trainer")
    # no credential anywhere a user can read
    for path in (f"/api/v1/namespaces/{env.ns}/pods", f"/apis/aiprof.io/v1alpha1/namespaces/{env.ns}/profilingsessions",
                 f"/api/v1/namespaces/{env.ns}/events"):
        assert env.rgw.secret.encode() not in env.kube.get(path).raw, path


def test_session_by_ephemeral_container(env):
    """The ephemeral-container path the controller takes for Kata pods. The real node has no
    Kata runtime handler (a pod with runtimeClassName kata would never start), so the session
    asks for `injection.mode: EphemeralContainer` on a runc pod: the controller adds an
    ephemeral container to the target pod (no node-agent pod), the real kubelet starts it in the
    target container's pid namespace and the pod's network namespace, with the S3 credentials
    resolved from the Secret into its env.

    The target pod mounts the S3 Secret itself. Kubernetes before 1.33 does not let the node
    read a Secret that only an ephemeral container refers to (the node authorizer's graph
    misses references added by the ephemeralcontainers subresource: kubernetes/kubernetes
    #114984, fixed by #129670): the kubelet then fails to start the container with "failed to
    sync secret cache" and the session ends DeadlineExceeded. This kit is v1.32, so the pod
    makes the reference the authorizer needs."""
    env.controller()
    env.pod("trainer-k", TRAINER_RUN, secret_volume="s3-creds")
    env.wait_running("trainer-k")
    env.session("eph", {"podName": "trainer-k", "container": "trainer"}, duration="2s",
                injection={"mode": "EphemeralContainer"})
    s, _ = env.wait_phase("eph", ("Succeeded", "Failed"), timeout=120)
    st = s["status"]
    assert st["phase"] == "Succeeded", json.dumps(st)[:3000] + env.debug()
    assert st["targets"][0]["mode"] == "EphemeralContainer" and st["targets"][0]["runtime"] == "runc", st["targets"]
    assert env.injector_pods("eph") == [], "an ephemeral-container target gets no node-agent pod"
    pod = env.get_pod("trainer-k")
    eph = pod["spec"]["ephemeralContainers"]
    assert len(eph) == 1 and eph[0]["targetContainerName"] == "trainer"
    assert "--container-name" in eph[0]["args"]
    for v in eph[0]["env"]:
        assert "value" not in v or not v["name"].startswith("AWS_SECRET"), v
    es = pod["status"]["ephemeralContainerStatuses"][0]
    assert es["state"]["terminated"]["exitCode"] == 0, es
    # containerd ran it in the target's pid namespace and the pod's network namespace
    target_cid = env.container_id("trainer-k", "trainer")
    target = env.container_spec(target_cid)
    spec = env.container_spec(es["containerID"].split("://", 1)[1])
    joined = {n["type"]: n.get("path") for n in spec["linux"]["namespaces"]}
    tns = {n["type"]: n.get("path") for n in target["linux"]["namespaces"]}
    assert joined["pid"] == f"/proc/{env.container_pid(target_cid)}/ns/pid", (joined, tns)
    assert joined["network"] and joined["network"] == tns["network"], (joined, tns)
    # the Secret's values came in through env valueFrom, resolved by the kubelet
    assert f"AWS_SECRET_ACCESS_KEY={env.rgw.secret}" in spec["process"]["env"]
    check_artifacts_in_bucket(env, st, "trainer-k")
    # the target runs on, never restarted
    assert env.container_running("trainer-k", "trainer")
