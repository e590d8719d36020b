# SPDX-License-Identifier: MIT
"""Failures through the whole chain on the real node. Each ends in a session status that says
what happened, and the artifacts that were complete are kept in the bucket and listed in the
status. Containers are killed through the node's containerd (`ctr tasks kill`), as a crash or an
OOM kill would end them, never through the API; S3 faults come from tests/s3/faultproxy.py in
front of radosgw (reached by the pods through the chain's forwarder on the node's address)."""
import json
import signal
import time

import pytest

import s3env
from e2e.chain import wait_for
from e2e.test_e2e import TRAINER_RUN, check_artifacts_in_bucket


def profiling(env, name="s"):
    """Waits until the session is Profiling and its injector pod's container runs on the node;
    returns (the container's runtime id, the injector pod's name)."""
    env.wait_phase(name, ("Profiling",), timeout=60)
    pod = wait_for(lambda: (env.injector_pods(name) or [None])[0], 30, "the injector pod")
    name_ = pod["metadata"]["name"]

    def running():
        cid = env.container_id(name_, "injector")
        return cid if cid and env.container_pid(cid) else None
    return wait_for(running, 30, "the injector container to run"), name_


def status_text(st):
    return json.dumps(st)


def test_target_pod_deleted_mid_session(env):
    """The target pod is deleted in the middle of a 40 s window: its node-agent injector (a
    pod of its own) notices its process is gone, ends the window there, uploads what it
    recorded and exits; the target ends Failed/TargetDeleted with those artifacts listed."""
    env.controller()
    env.pod("trainer-0", TRAINER_RUN)
    env.wait_running("trainer-0")
    env.session("s", {"podName": "trainer-0"}, duration="40s")
    _, inj = profiling(env)
    time.sleep(3)                       # something recorded before the cut
    r = env.kubectl("delete", "pod", "trainer-0", "--wait=false")
    assert r.returncode == 0, r.stderr
    s, _ = env.wait_phase("s", ("Succeeded", "Failed"), timeout=90)
    st = s["status"]
    t = st["targets"][0]
    assert st["phase"] == "Failed" and t["state"] == "Failed", status_text(st)
    # it says the target went away while it was profiled, when the window was cut, what was kept
    assert t["reason"] == "TargetDeleted", status_text(st)
    assert "trainer-0" in st["message"] and "deleted" in st["message"], st["message"]
    assert "the window was cut at " in t["message"] and "kept the" in t["message"], t["message"]
    # where it ran is still said
    assert t["container"] == "trainer" and t["node"] and t["mode"] == "NodeAgent", t
    # the window really was cut: well short of the 40 s asked for
    assert t["summary"]["window_cut"] == 1 and t["summary"]["processes_exited"] >= 1, t
    assert t["summary"]["window_ms"] < 40000 and t["summary"]["events"] > 0, t
    # what was recorded until the cut is in the bucket, byte-identical to what is listed
    by_name = check_artifacts_in_bucket(env, st, "trainer-0")
    assert by_name["timeline.json.gz"]["size"] > 0
    # the injector ended by itself (exit 0, its message read), the target pod is gone
    pod = env.get_pod(inj)
    term = pod["status"]["containerStatuses"][0]["state"]["terminated"]
    assert term["exitCode"] == 0, term
    wait_for(lambda: not env.get_pod("trainer-0"), 30, "the target pod to be gone")
    wait_for(lambda: not [p for p in env.injector_pods("s") if p["status"].get("phase") == "Running"], 30,
             "the injector to stop")


def test_injector_killed(env):
    env.controller()
    env.pod("trainer-0", TRAINER_RUN)
    env.wait_running("trainer-0")
    env.session("s", {"podName": "trainer-0"}, duration="20s")
    cid, pod = profiling(env)
    env.kill_container(cid)
    s, _ = env.wait_phase("s", ("Succeeded", "Failed"), timeout=60)
    st = s["status"]
    assert st["phase"] == "Failed", status_text(st)
    assert st["targets"][0]["state"] == "Failed"
    assert "137" in st["message"] or "killed" in st["message"].lower(), st["message"]
    assert not st.get("artifacts"), "nothing was uploaded, nothing may be listed"
    inj = env.get_pod(pod)
    term = inj["status"]["containerStatuses"][0]["state"]["terminated"]
    assert term["exitCode"] == 128 + signal.SIGKILL, term
    # the target was not harmed
    assert env.container_running("trainer-0", "trainer")


@pytest.fixture
def proxy(env):
    started = []

    def start(**kw):
        p = s3env.Proxy(env.rgw.hostport, **kw)
        started.append(p)
        # the proxy listens on 127.0.0.1: the injector pods reach it on the node's address
        p.node_endpoint = env.s3_forward(p.endpoint.split("://", 1)[1])
        return p
    yield start
    for p in started:
        p.stop()


def test_s3_unreachable_then_back(env, proxy):
    """The first uploads find the connection reset (S3 unreachable), then it is back: the
    injector's retries carry the session to Succeeded with every artifact."""
    p = proxy(fault="reset", match="^PUT ", times=4)
    env.controller()
    env.pod("trainer-0", TRAINER_RUN)
    env.wait_running("trainer-0")
    env.session("s", {"podName": "trainer-0"}, duration="2s", endpoint=p.node_endpoint)
    s, _ = env.wait_phase("s", ("Succeeded", "Failed"), timeout=120)
    st = s["status"]
    assert st["phase"] == "Succeeded", status_text(st) + env.debug()
    assert len([f for f in p.faults() if f.startswith("reset ")]) == 4, p.lines()
    check_artifacts_in_bucket(env, st, "trainer-0")


def test_wrong_s3_secret(env):
    env.secret("bad-creds", secret_key="wrong" + env.rgw.secret[5:])
    env.controller()
    env.pod("trainer-0", TRAINER_RUN)
    env.wait_running("trainer-0")
    env.session("s", {"podName": "trainer-0"}, duration="1s", secret="bad-creds")
    s, _ = env.wait_phase("s", ("Succeeded", "Failed"), timeout=90)
    st = s["status"]
    text = status_text(st)
    assert st["phase"] == "Failed", text
    assert "403" in text or "SignatureDoesNotMatch" in text or "credential" in text.lower(), text
    assert env.rgw.secret[5:] not in text and env.rgw.secret not in text
    assert not [a for a in st.get("artifacts") or [] if a["url"].startswith("s3://")
                and a["name"] == "manifest.json"], "no upload completed, none may be listed as uploaded"
    assert env.list_keys(f"e2e/{env.ns}/") == [], "bad credentials upload nothing"


def test_controller_restarted_mid_session(env):
    c = env.controller()
    env.pod("trainer-0", TRAINER_RUN)
    env.wait_running("trainer-0")
    env.session("s", {"podName": "trainer-0"}, duration="6s")
    profiling(env)
    c.stop(signal.SIGKILL)                 # a crash, mid-window
    env.controller()
    s, _ = env.wait_phase("s", ("Succeeded", "Failed"), timeout=90)
    st = s["status"]
    assert st["phase"] == "Succeeded", status_text(st) + env.debug()
    assert len(env.injector_pods("s")) == 1, "the restarted controller made a second injector"
    check_artifacts_in_bucket(env, st, "trainer-0")


def test_one_rank_injector_killed_others_kept(env):
    """Two ranks; rank 1's injector is killed mid-window. The session fails and says so, and
    rank 0's complete artifacts are kept in the bucket and listed in the status."""
    env.controller()
    pods = env.ranks(2, "kill")
    env.session("s", {"selector": {"matchLabels": {"job": "kill"}}, "container": "trainer"}, duration="6s")
    env.wait_phase("s", ("Profiling",), timeout=60)

    def injector_of(pod):
        p = next((p for p in env.injector_pods("s") if p["metadata"]["labels"]["aiprof.io/target-pod"] == pod), None)
        cid = p and env.container_id(p["metadata"]["name"], "injector")
        return cid if cid and env.container_pid(cid) else None
    victim = wait_for(lambda: injector_of(pods[1]), 30, "rank 1's injector container")
    wait_for(lambda: injector_of(pods[0]), 30, "rank 0's injector container")
    env.kill_container(victim)
    s, _ = env.wait_phase("s", ("Succeeded", "Failed"), timeout=90)
    st = s["status"]
    assert st["phase"] == "Failed", status_text(st)
    states = {t["pod"]: t for t in st["targets"]}
    assert states[pods[0]]["state"] == "Succeeded" and states[pods[1]]["state"] == "Failed", status_text(st)
    assert "137" in states[pods[1]]["message"], states[pods[1]]
    check_artifacts_in_bucket(env, st, pods[0])
    assert not [a for a in st["artifacts"] if a.get("target") == pods[1]]
