# SPDX-License-Identifier: MIT
"""A real PyTorch job that hangs, through a ProfilingSession (issue 16).

Two pods run a real two-rank torch.distributed job on the gloo backend (Debian's python3 and
python3-torch from the node, read-only hostPath mounts over the trainer image; host network,
so that the ranks meet on loopback: the node has no pod network between pods). Rank 1 stops
before an all_reduce, rank 0 waits in it. A session over both pods, started after the hang:
each rank's stacks.json shows where its training thread is, and the merge pod names rank 1 as
the rank that never arrived."""
import json
import os
import socket

import pytest

from e2e.chain import ROOT, TRAINER_IMAGE, merged_artifacts, wait_for
from e2e.test_multirank import run_session

TORCH = "/usr/lib/python3/dist-packages/torch/distributed"


def torch_rank_pod(env, name, rank, port):
    workloads = os.path.join(ROOT, "tests", "workloads")
    spec = {
        "restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
        "automountServiceAccountToken": False, "hostNetwork": True,
        "containers": [{
            "name": "trainer", "image": TRAINER_IMAGE, "imagePullPolicy": "Never",
            "command": ["/usr/bin/python3", "-u", "/workloads/gloo_hang.py", "--port", str(port)],
            "env": [{"name": "RANK", "value": str(rank)}, {"name": "GLOO_SOCKET_IFNAME", "value": "lo"},
                    {"name": "HOME", "value": "/tmp"}],
            "volumeMounts": [{"name": "usr", "mountPath": "/usr", "readOnly": True},
                             # Debian's BLAS and LAPACK are chosen through alternatives
                             {"name": "alternatives", "mountPath": "/etc/alternatives", "readOnly": True},
                             {"name": "workloads", "mountPath": "/workloads", "readOnly": True}],
        }],
        "volumes": [{"name": "usr", "hostPath": {"path": "/usr", "type": "Directory"}},
                    {"name": "alternatives", "hostPath": {"path": "/etc/alternatives", "type": "Directory"}},
                    {"name": "workloads", "hostPath": {"path": workloads, "type": "Directory"}}],
    }
    env.apply({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": name, "namespace": env.ns, "labels": {"job": "gloo", "rank": str(rank)}},
               "spec": spec})


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.skipif(not os.path.isdir(TORCH), reason="needs Debian's python3-torch on the node")
def test_gloo_hang_named_through_a_session(env):
    env.controller()
    port = free_port()
    pods = ["gloo-0", "gloo-1"]
    for r, name in enumerate(pods):
        torch_rank_pod(env, name, r, port)
    for name in pods:
        env.wait_running(name)
    wait_for(lambda: all("ready pid=" in env.logs(p) for p in pods), 120, "both ranks to be ready",
             interval=0.5)
    st, _ = run_session(env, "gloo", "gloo", 2, duration="2s", timeout=240)
    assert st["phase"] == "Succeeded", json.dumps(st)[:3000] + env.debug()

    # each rank's stacks.json, from the bucket
    for r, pod in enumerate(pods):
        arts = {a["name"]: a for a in st["artifacts"] if a.get("target") == pod}
        assert "stacks.json" in arts, sorted(arts)
        d = json.loads(env.get_object(arts["stacks.json"]["url"]))
        (p,) = d["processes"]
        assert p["rank"] == r
        names = [[f["name"] for f in t["frames"]] for t in p["threads"]]
        waits = any(any(f.startswith("all_reduce (") for f in n) and any(f.startswith("c10d::") for f in n)
                    for n in names)
        assert waits == (r == 0), (r, names)
    # the merge pod names the rank that never arrived, with its stack
    m = merged_artifacts(st)
    summary = json.loads(env.get_object(m["summary.json"]["url"]))
    hang = [f for f in summary["findings"] if f["category"] == "NcclHang"]
    assert len(hang) == 1 and hang[0]["not_arrived"] == ["rank 1"], summary["findings"]
    assert any(f.startswith("evaluate_forever (") for f in hang[0]["evidence"]["rank 1"]), hang
    assert any(f["category"] == "NcclHang" for f in st.get("findings") or []), st.get("findings")
