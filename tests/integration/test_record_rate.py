# SPDX-License-Identifier: MIT
"""The record rate (issue 31): per target thread a second, at most --record-rate off-CPU
records, slow-syscall records and short calls timed; what comes past it is counted in the
kernel (no stacks, no task work) and said in summary.json (ebpf.record_rate, per target
offcpu.blocks_not_recorded, syscalls[].slow_not_recorded and .untimed), in the off-CPU flame
graph (one frame with their time) and in the report. Blocks and calls of 10 ms or more are
always recorded.

Workload: tests/workloads/wait_rates.py (a thread sleeping 2 ms at a time, one 30 ms at a
time, two passing a byte over a socket pair)."""
import os
import re

from conftest import load_summary, load_timeline, events, require_root, run_aiprof
from test_ebpf import folded, kv

WAITS = os.path.join(os.path.dirname(__file__), "..", "workloads", "wait_rates.py")
FRAME = "[blocks past the record rate: counted, not unwound]"


def start(procs):
    p, line = procs.start(["/usr/bin/python3", WAITS], ready="ready")
    return {k: int(v) for k, v in kv(line).items()}


def profile(info, out, rate):
    r = run_aiprof(["profile", "--pid", str(info["pid"]), "-d", "3s", "--collectors",
                    "offcpu,syscalls", "--record-rate", str(rate), "-o", str(out)])
    assert r.returncode == 0, r.stderr
    return load_summary(out), load_timeline(out)


def test_past_the_rate_counted_not_recorded(procs, tmp_path):
    require_root()
    info = start(procs)
    rate = 40
    s, tl = profile(info, tmp_path, rate)
    eb = s["ebpf"]
    rr = eb["record_rate"]
    window = eb["cost"]["window_s"]
    print(rr, window)
    assert rr["per_thread_per_s"] == rate and rr["always_recorded_us"] == 10_000, rr
    # the 2 ms sleeper: about 400 long blocks a second, at most the bucket's worth recorded
    # (a full bucket to start with, then the rate); the rest counted
    bound = rate + rate * window + 5
    # (what the rate applies to: under 10 ms, and not a sleep read as the window closed)
    short_off = [e for e in events(tl, "offcpu") if e["tid"] == info["short_tid"] and
                 e["dur"] < 10_000 and not e["args"].get("still_blocked_at_end")]
    short_sys = [e for e in events(tl, "syscall") if e["tid"] == info["short_tid"] and
                 e["dur"] < 10_000]
    assert 0 < len(short_off) <= bound, (len(short_off), bound)
    assert 0 < len(short_sys) <= bound, (len(short_sys), bound)
    assert rr["offcpu_blocks_not_recorded"] >= 100, rr
    assert rr["slow_syscalls_not_recorded"] >= 100, rr
    # the 30 ms sleeper: every block recorded, whatever the rate
    long_off = [e for e in events(tl, "offcpu") if e["tid"] == info["long_tid"] and
                e["args"].get("syscall") == "clock_nanosleep" and e["dur"] >= 25_000]
    assert len(long_off) >= 0.5 * window / 0.031, (len(long_off), window)
    # ping/pong: thousands of short waits in read(), no more timed than the rate allows
    t = eb["targets"][0]
    table = {x["name"]: x for x in t["syscalls"]}
    assert table["recvfrom"]["untimed"] + table.get("read", {"untimed": 0})["untimed"] > 1000 \
        or rr["syscalls_untimed"] > 1000, table
    assert rr["syscalls_untimed"] == t["syscalls_untimed"] and \
        rr["slow_syscalls_not_recorded"] == t["slow_syscalls_not_recorded"], (rr, t)
    sleeps = table["clock_nanosleep"]
    assert sleeps["slow"] >= sleeps["slow_not_recorded"] + len(short_sys), sleeps
    # the per-target totals still count every block
    off = t["offcpu"]
    assert off["blocks_not_recorded"] == rr["offcpu_blocks_not_recorded"], (off, rr)
    assert off["blocks"] >= off["blocks_not_recorded"] + off["events"], off
    # their time in the off-CPU flame graph, under one frame that says what it is
    lines = [(f, w) for f, w in folded(tmp_path, "offcpu.folded") if f[-1] == FRAME]
    assert len(lines) == 1, lines
    assert abs(lines[0][1] - rr["offcpu_not_recorded_us"]) <= 1, (lines, rr)
    html = (tmp_path / "report.html").read_text()
    m = re.search(r"Past the record rate \((\d+) a second per thread\), counted and not "
                  r"recorded: (\d+) off-CPU blocks", html)
    assert m and int(m.group(1)) == rate and int(m.group(2)) == rr["offcpu_blocks_not_recorded"], \
        html[:3000]


def test_rate_zero_records_every_block(procs, tmp_path):
    require_root()
    info = start(procs)
    s, tl = profile(info, tmp_path, 0)
    rr = s["ebpf"]["record_rate"]
    assert rr["per_thread_per_s"] == 0 and "no limit" in rr["what"], rr
    assert rr["offcpu_blocks_not_recorded"] == rr["slow_syscalls_not_recorded"] == \
        rr["syscalls_untimed"] == 0, rr
    short_off = [e for e in events(tl, "offcpu") if e["tid"] == info["short_tid"]]
    # far more than a rate of 40 would have let through (about 400 a second)
    assert len(short_off) > 40 * 5, len(short_off)
    assert not [f for f, _ in folded(tmp_path, "offcpu.folded") if f[-1] == FRAME]
    assert "Past the record rate" not in (tmp_path / "report.html").read_text()


def test_bad_record_rate_is_refused():
    for bad in ("-1", "ten", "5x", "2000000", ""):
        r = run_aiprof(["profile", "--pid", "1", "--record-rate", bad, "-d", "1s"])
        assert r.returncode != 0 and "--record-rate" in r.stderr and "records a second" in r.stderr, \
            (bad, r.returncode, r.stderr)


def budget_run(info, out, budget, duration="4s"):
    extra = ["--budget", budget] if budget else []
    r = run_aiprof(["profile", "--pid", str(info["pid"]), "-d", duration, "--collectors",
                    "cpu,offcpu,syscalls", *extra, "-o", str(out)])
    assert r.returncode == 0, r.stderr
    return load_summary(out), load_timeline(out)


def test_budget_pauses_the_per_switch_collectors_and_says_so(procs, tmp_path):
    """--budget 0.5% on a job that switches tens of thousands of times a second: the record
    rate cannot get there (the cost is in the programs run at every switch), so the off-CPU
    and syscall collectors are paused; the window costs a fraction of what the same job's
    window without a budget, measured just before, did; the pauses are in the timeline."""
    require_root()
    info = start(procs)
    free, _ = budget_run(info, tmp_path / "free", None)
    s, tl = budget_run(info, tmp_path / "budget", "0.5%")
    b = s["ebpf"]["budget"]
    print({k: v for k, v in b.items() if k != "changes"}, free["ebpf"]["cost"]["bpf_share_of_targets_cpu_ppm"])
    assert free["ebpf"]["budget"] == {"set": False}
    assert b["set"] and b["measured"] and b["target_ppm"] == 5000, b
    assert b["pauses"] >= 1 and b["paused_s"] >= 1.0, b
    assert b["window_share_ppm"] == s["ebpf"]["cost"]["bpf_share_of_targets_cpu_ppm"], b
    assert b["kept"] == (b["window_share_ppm"] <= 5000), b
    assert b["window_share_ppm"] < 0.5 * free["ebpf"]["cost"]["bpf_share_of_targets_cpu_ppm"], \
        (b, free["ebpf"]["cost"])
    # each pause on the timeline, as long as the summary says
    pauses = [e for e in events(tl, "aiprof") if "paused by --budget" in e["name"]]
    assert len(pauses) == b["pauses"], (pauses, b)
    assert abs(sum(e["dur"] for e in pauses) / 1e6 - b["paused_s"]) <= 0.05, (pauses, b)
    # and nothing of the paused collectors begins inside one (a thread still asleep as the
    # window closes is read by the task iterator then, from the kernel's own accounting)
    for p in pauses:
        inside = [e for e in events(tl, "offcpu") + events(tl, "syscall")
                  if p["ts"] < e["ts"] < p["ts"] + p["dur"] and
                  not e["args"].get("still_blocked_at_end")]
        assert not inside, (p, inside[:3])
    html = (tmp_path / "budget" / "report.html").read_text()
    assert re.search(r"Budget 0\.5% of the targets' CPU: (not )?kept \([0-9.]+%\); record rate "
                     r"lowered to \d+ a second per thread, off-CPU and syscall collectors paused "
                     r"\d+ times", html), html[:3000]


def test_a_budget_the_window_stays_under_changes_nothing(procs, tmp_path):
    require_root()
    info = start(procs)
    s, tl = budget_run(info, tmp_path, "90%", duration="2s")
    b = s["ebpf"]["budget"]
    assert b["set"] and b["kept"] and b["pauses"] == 0 and b["changes_total"] == 0, b
    assert b["final_record_rate"] == 100, b
    assert not [e for e in events(tl, "aiprof") if "paused" in e["name"]]


def test_bad_budget_is_refused():
    for bad in ("0", "0%", "101%", "abc", "-1%", "1%%", ""):
        r = run_aiprof(["profile", "--pid", "1", "--budget", bad, "-d", "1s"])
        assert r.returncode != 0 and "--budget" in r.stderr and "share of the targets' CPU" in r.stderr, \
            (bad, r.returncode, r.stderr)
