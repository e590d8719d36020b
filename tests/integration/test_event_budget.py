# SPDX-License-Identifier: MIT
"""Memory flat in the window's length (issue 13): past a process's event budget, events are
summed rather than kept, so the counts, the summary's tables and the flame graphs still cover
the whole window while the timeline keeps the budget's worth.

AIPROF_EVENT_BUDGET sets the budget to a few events here; in production it comes from the
memory aiprof may use (its container's limit).
"""
import gzip
import json
import os

from conftest import BUILD, load_summary, require_root, run_aiprof

SYNC_LOOP = os.path.join(BUILD, "tests", "bench", "sync_loop")
BUDGET = 50


def test_past_the_budget_events_are_summed_not_lost(procs, tmp_path):
    require_root()
    p, line = procs.start([SYNC_LOOP, "30"], ready="ready")
    pid = int(line.split("pid=")[1].split()[0])
    out = tmp_path / "out"
    env = dict(os.environ, AIPROF_EVENT_BUDGET=str(BUDGET))
    r = run_aiprof(["profile", "--pid", str(pid), "-d", "3s", "-o", str(out)], env=env)
    assert r.returncode == 0, r.stderr
    assert "kept whole" in r.stderr and "event_budget" in r.stderr, r.stderr
    s = load_summary(out)

    budget = s["event_budget"]
    assert budget["events_per_process"] == BUDGET
    assert budget["kept"] == BUDGET
    assert budget["summed"] > 100 * BUDGET, budget       # a busy loop of hooked calls
    assert 0 <= budget["kept_until_s"] < s["window"]["duration_s"]
    assert "timeline" in budget["note"]
    assert s["events"] == budget["kept"] + budget["summed"]
    t = s["targets"][0]
    assert t["summed_events"] == budget["summed"] and t["events"] == s["events"]
    assert t["rejected_records"] == 0

    # every call is a cudaStreamSynchronize (a few events are the library's own status): the
    # table counts all of them, not the budget's worth
    syncs = {x["api"]: x["count"] for x in s["synchronization"]}
    assert syncs.get("cudaStreamSynchronize") == s["counts"]["cuda_api"], syncs
    assert s["events"] - 10 < syncs["cudaStreamSynchronize"] <= s["events"], (syncs, s["events"])

    # the timeline keeps the budget's worth
    with gzip.open(out / "timeline.json.gz", "rt") as f:
        tl = json.load(f)
    api = [e for e in tl["traceEvents"] if e.get("cat") == "cuda_api"]
    assert 0 < len(api) <= BUDGET

    # eBPF events too: on-CPU samples all counted and in the flame graph, a budget's worth
    # kept for the timeline
    e = s.get("ebpf", {})
    if e.get("state") == "on" and "cpu" in e.get("collectors", []):
        assert e["events_per_process"] == BUDGET
        samples = sum(x["cpu_samples"] for x in e["targets"])
        assert samples > BUDGET, e                         # a busy loop for 3 s at 99 Hz
        assert e["events_summed"] > 0
        cpu = [x for x in tl["traceEvents"] if x.get("cat") == "cpu_sample"]
        assert len(cpu) <= BUDGET
        with open(out / "stacks.folded") as f:
            folded = sum(int(line.rsplit(" ", 1)[1]) for line in f if line.strip())
        assert folded == samples
