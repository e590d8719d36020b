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
    short_off = [e for e in events(tl, "offcpu") if e["tid"] == info["short_tid"]]
    short_sys = [e for e in events(tl, "syscall") if e["tid"] == info["short_tid"]]
    assert 0 < len(short_off) <= bound, (len(short_off), bound)
    assert 0 < len(short_sys) <= bound, (len(short_sys), bound)
    assert rr["offcpu_blocks_not_recorded"] >= 100, rr
    assert rr["slow_syscalls_not_recorded"] >= 100, rr
    # the 30 ms sleeper: every block recorded, whatever the rate
    long_off = [e for e in events(tl, "offcpu") if e["tid"] == info["long_tid"]]
    assert len(long_off) >= 0.5 * window / 0.031, (len(long_off), window)
    assert all(e["dur"] >= 10_000 for e in long_off if not e["args"].get("open_at_end")), \
        sorted(e["dur"] for e in long_off)[:5]
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
