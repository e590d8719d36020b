# SPDX-License-Identifier: MIT
"""Multi-rank sessions end to end on the real node: N target pods (one container each, placed by
the scheduler, one trainer process per rank forming one communicator through the fake NCCL over
a /dev/shm that is one hostPath folder for all ranks), a session whose selector matches them all
→ one injector pod per target pod, artifacts per rank, and the merged timeline of the
controller's merge pod (`aiprof merge`, placed by the real scheduler) with every rank on one
clock."""
import json

import pytest

from e2e.chain import gunzip_json, merged_artifacts, residual_skew, sha256
from e2e.test_e2e import check_artifacts_in_bucket


def condition(st, type_):
    return next((c for c in st.get("conditions") or [] if c["type"] == type_), None)


def run_session(env, name, job, n, duration="3s", timeout=150):
    env.session(name, {"selector": {"matchLabels": {"job": job}}, "container": "trainer"}, duration=duration)
    s, seen = env.wait_phase(name, ("Succeeded", "Failed"), timeout=timeout)
    return s["status"], seen


def merged_summary(env, st):
    m = merged_artifacts(st)
    assert "timeline.json.gz" in m and "summary.json" in m, (
        f"no merged artifacts in the status (condition Merged: {condition(st, 'Merged')}); "
        f"artifacts: {[(a.get('target'), a['name']) for a in st.get('artifacts') or []]}")
    return json.loads(env.get_object(m["summary.json"]["url"])), gunzip_json(env.get_object(m["timeline.json.gz"]["url"]))


def finding_names_rank(summary, category, rank):
    """The merged summary has a `category` finding that names `rank`."""
    for f in summary.get("findings") or []:
        if f.get("category") == category and f.get("rank") == rank:
            return f
    return None


@pytest.mark.parametrize("n", [2, 4])
def test_selector_over_ranks_with_merged_timeline(env, n):
    env.controller()
    # --cupti: the fake CUPTI reports each collective's kernel, as CUPTI does on a GPU, so the
    # merge aligns the ranks on the kernels' ends (the shared moment of a collective)
    pods = env.ranks(n, "llama", "--cupti")
    st, _ = run_session(env, "all-ranks", "llama", n)
    assert st["phase"] == "Succeeded", json.dumps(st)[:3000] + env.debug()
    assert st["targetCount"] == n
    assert sorted(t["pod"] for t in st["targets"]) == pods
    assert all(t["state"] == "Succeeded" for t in st["targets"])
    inj = env.injector_pods("all-ranks")
    assert sorted(p["metadata"]["labels"]["aiprof.io/target-pod"] for p in inj
                  if p["spec"].get("hostPID")) == pods, "one injector per rank"
    for r, pod in enumerate(pods):
        by_name = check_artifacts_in_bucket(env, st, pod)
        tl = gunzip_json(env.get_object(by_name["timeline.json.gz"]["url"]))
        colls = [e for e in tl["traceEvents"] if e.get("cat") == "nccl" and e.get("ph") == "X"]
        assert colls, f"{pod}: no collectives"
        assert {e["args"]["rank"] for e in colls} == {r} and {e["args"]["nranks"] for e in colls} == {n}
    summary, tl = merged_summary(env, st)
    # the merge pod ran where the real scheduler put it (its Scheduled event; the pod itself
    # may already be gone once the session has ended)
    r = env.kubectl("get", "events", "--field-selector", "reason=Scheduled", "-o", "json")
    scheduled = {e["involvedObject"]["name"]: e["message"] for e in json.loads(r.stdout)["items"]
                 if "-merge-" in e["involvedObject"]["name"]}
    assert len(scheduled) == 1 and all(env.chain.node in m for m in scheduled.values()), scheduled
    cond = condition(st, "Merged")
    assert cond and cond["status"] == "True", cond
    for a in merged_artifacts(st).values():
        assert sha256(env.get_object(a["url"])) == a["sha256"], a["name"]
    # all ranks in the merged timeline, each its own process group named after its rank
    names = [e["args"]["name"] for e in tl["traceEvents"] if e.get("ph") == "M" and e.get("name") == "process_name"]
    for r in range(n):
        assert any(f"rank {r}" in x for x in names), names
    assert summary["schema"] == "aiprof.merge/v1" and summary["aligned_ranks"] == n
    skew = residual_skew(summary)
    assert skew["collectives"] > 0, skew
    # every rank ran on this node's one CLOCK_MONOTONIC (one boot, no time namespace): the
    # merge knows it and applies no offset, matching the collectives' numbering only; the
    # residual skew (spread of matched collective ends) on their kernel ends is <= 50 us
    assert summary["alignment"]["basis"] == "gpu_kernel_end", summary["alignment"]
    offsets = {r["rank"]: r["offset_us"] for r in summary["ranks"]}
    assert all(r["aligned"] for r in summary["ranks"]) and len(offsets) == n, summary["ranks"]
    assert sorted(r["clock"] for r in summary["ranks"]) == ["reference"] + ["shared"] * (n - 1), summary["ranks"]
    assert set(offsets.values()) == {0}, offsets
    assert skew["p50"] <= 50, skew
    print(f"{n} ranks: offsets {offsets} us; residual skew {skew}")


def test_straggler_rank_found(env):
    env.controller()
    env.ranks(2, "strag", "--fault", "straggler", "--fault-rank", "1")
    st, _ = run_session(env, "straggler", "strag", 2)
    assert st["phase"] == "Succeeded", json.dumps(st)[:3000] + env.debug()
    summary, _ = merged_summary(env, st)
    assert finding_names_rank(summary, "Straggler", 1), summary.get("findings")
    assert any(f["category"] == "Straggler" and f.get("target") == "merged" for f in st.get("findings") or []), \
        st.get("findings")


def test_rank_never_enters_collective(env):
    env.controller()
    # a step takes 30-60 ms here: rank 1 stops 6-12 s after start, inside the 14 s window that
    # starts as soon as the ranks are up, so that collectives are seen before the hang and the
    # silence after it is long enough (>= 10 step periods)
    pods = env.ranks(2, "hang", "--fault", "nccl-hang", "--fault-rank", "1", "--fault-step", "200")
    st, _ = run_session(env, "hang", "hang", 2, duration="14s")
    assert "never enters the all-reduce" in env.logs(pods[1], "trainer")
    summary, _ = merged_summary(env, st)
    assert finding_names_rank(summary, "NcclHang", 1), summary.get("findings")
    assert any(f["category"] == "NcclHang" for f in st.get("findings") or []), st.get("findings")
    # the ranks' stacks.json as their windows closed say the same: rank 0's training thread
    # waits in ncclAllReduce, rank 1's is in pause() under train_step (issue 16)
    hang = next(f for f in summary["findings"] if f["category"] == "NcclHang")
    assert hang["evidence"].get("stacks_not_arrived") == ["rank 1"], hang
