# SPDX-License-Identifier: MIT
"""The record rate (issue 31): per target thread a second, at most --record-rate off-CPU
records, slow-syscall records and short calls timed; what comes past it is counted in the
kernel (no stacks, no task work) and said in summary.json (ebpf.record_rate, per target
offcpu.blocks_not_recorded, syscalls[].slow_not_recorded and .untimed), in the off-CPU flame
graph (one frame with their time) and in the report. Blocks and calls of 10 ms or more are
always recorded. A long block at a site its thread recorded in the last second is not
given stacks again: it is an event with that record's stacks (ebpf.record_rate.offcpu_site_stack_blocks);
a slow call at a site (syscall, first argument, user pc) its thread recorded one at in the last
second is an event with that record's path, timed until it got the CPU back
(slow_syscalls_site_events).

Workload: tests/workloads/wait_rates.py (a thread sleeping 2 ms at a time, one 30 ms at a
time, two passing a byte over a socket pair, one sleeping 2 ms from 64 Python functions in
turn, one from two)."""
import os
import re

import pytest

from conftest import (events, kernel_task_work, load_summary, load_timeline, require_root,
                      run_aiprof)
from test_ebpf import folded, kv, stack_frames

WAITS = os.path.join(os.path.dirname(__file__), "..", "workloads", "wait_rates.py")
FRAME = "[blocks past the record rate: counted, not unwound]"


def start(procs):
    p, line = procs.start(["/usr/bin/python3", WAITS], ready="ready")
    return {k: int(v) for k, v in kv(line).items()}


def profile(info, out, rate):
    r = run_aiprof(["profile", "--pid", str(info["pid"]), "-d", "3s", "--collectors",
                    "offcpu,syscalls,python", "--record-rate", str(rate), "--budget", "off",
                    "-o", str(out)])
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
    # the 64-site waiter: about 400 long blocks and slow calls a second at more sites than a
    # thread keeps, so none is put on an earlier record; at most the bucket's worth recorded
    # (a full bucket to start with, then the rate), the rest counted
    bound = rate + rate * window + 5
    # (what the rate applies to: under 10 ms, and not a sleep read as the window closed)
    def short_events(cat, tid):
        return [e for e in events(tl, cat) if e["tid"] == tid and e["dur"] < 10_000 and
                not e["args"].get("still_blocked_at_end")]
    many_off = short_events("offcpu", info["many_tid"])
    assert 0 < len(many_off) <= bound, (len(many_off), bound)
    assert rr["offcpu_blocks_not_recorded"] >= 100, rr
    many_sys = [e for e in short_events("syscall", info["many_tid"]) if "site" not in e["args"]]
    assert 0 < len(many_sys) <= bound, (len(many_sys), bound)
    assert rr["slow_syscalls_not_recorded"] >= 100, rr
    # the 2 ms sleeper waits at one site: its stacks taken about once a second, every other
    # block an event with those stacks; every other slow call counted
    once_a_second = window / (rr["site_fresh_us"] / 1e6) + 3
    short_all = short_events("offcpu", info["short_tid"])
    short_off = [e for e in short_all if e["args"].get("stack") != "site"]
    assert 1 <= len(short_off) <= once_a_second, (len(short_off), rr)
    assert len(short_all) - len(short_off) >= 100 * window, (len(short_all), len(short_off))
    own = {e["sf"] for e in events(tl, "offcpu") if e["tid"] == info["short_tid"] and
           e["args"].get("stack") != "site"}
    assert {e["sf"] for e in short_all} <= own, "a site's blocks have its record's stacks"
    short_sys_all = short_events("syscall", info["short_tid"])
    short_sys = [e for e in short_sys_all if "site" not in e["args"]]
    sys_site = [e for e in events(tl, "syscall") if "site" in e["args"]]
    if kernel_task_work()[0]:
        assert 1 <= len(short_sys) <= once_a_second, (len(short_sys), rr)
        assert rr["slow_syscalls_site_events"] >= 100 * window, rr
        # the others are events too, timed until they got the CPU back, no ret
        assert len(sys_site) == rr["slow_syscalls_site_events"], (len(sys_site), rr)
        assert all(e["dur"] >= 1000 and "ret" not in e["args"] for e in sys_site), sys_site[:3]
    else:
        # every call traced (no task work from sched_switch here): a slow call is timed to
        # its return, so none is a site's; past the rate they are counted, not recorded
        assert 0 < len(short_sys) <= bound and not sys_site, (len(short_sys), bound, rr)
        assert rr["slow_syscalls_site_events"] == 0, rr
    site = [e for e in events(tl, "offcpu") if e["args"].get("stack") == "site"]
    assert rr["offcpu_site_stack_blocks"] == len(site) >= 100 * window, (rr, len(site))
    off = eb["targets"][0]["offcpu"]
    assert off["site_stack_blocks"] == rr["offcpu_site_stack_blocks"] and \
        off["site_stack_us"] == rr["offcpu_site_stack_us"], (off, rr)
    assert abs(sum(e["dur"] for e in site) - rr["offcpu_site_stack_us"]) <= len(site), rr
    # every block's time is in the off-CPU flame graph: the events' and those past the rate
    # (within a microsecond each of rounding)
    total = sum(w for _, w in folded(tmp_path, "offcpu.folded"))
    recorded = sum(e["dur"] for e in events(tl, "offcpu"))
    slack = len(events(tl, "offcpu")) + 10
    assert abs(total - (recorded + rr["offcpu_not_recorded_us"])) <= slack, (total, recorded, rr)
    # one C call site, two Python ones: each its own site, each with its half of the time
    a = sum(w for f, w in folded(tmp_path, "offcpu.folded") if any(x.startswith("wait_a ") for x in f))
    b = sum(w for f, w in folded(tmp_path, "offcpu.folded") if any(x.startswith("wait_b ") for x in f))
    assert a > 0 and b > 0 and 0.7 < a / b < 1.4, (a, b)
    # the 30 ms sleeper: every block recorded, whatever the rate
    long_off = [e for e in events(tl, "offcpu") if e["tid"] == info["long_tid"] and
                e["args"].get("syscall") == "clock_nanosleep" and e["dur"] >= 25_000]
    assert len(long_off) >= 0.5 * window / 0.031, (len(long_off), window)
    # ping/pong: thousands of short waits in read(), no more timed than the rate allows
    t = eb["targets"][0]
    table = {x["name"]: x for x in t["syscalls"]}
    tw = kernel_task_work()[0]
    if tw:
        assert table["recvfrom"]["untimed"] + table.get("read", {"untimed": 0})["untimed"] > 1000 \
            or rr["syscalls_untimed"] > 1000, table
    else:
        # every call traced: each one timed and counted
        assert table["recvfrom"]["count"] > 1000 and rr["syscalls_untimed"] == 0, (table, rr)
    assert rr["syscalls_untimed"] == t["syscalls_untimed"] and \
        rr["slow_syscalls_not_recorded"] == t["slow_syscalls_not_recorded"], (rr, t)
    sleeps = table["clock_nanosleep"]
    assert sleeps["slow"] >= sleeps["slow_not_recorded"] + sleeps["slow_site_events"] + \
        len(short_sys), sleeps
    assert t["slow_syscalls_site_events"] == rr["slow_syscalls_site_events"] >= \
        sleeps["slow_site_events"] and (sleeps["slow_site_events"] > 0) == tw, (t, rr)
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
    m = re.search(r"(\d+) off-CPU blocks \(([0-9.]+) s\) came at a site their thread had "
                  r"recorded in the last second: they have that record's stacks", html)
    assert m and int(m.group(1)) == rr["offcpu_site_stack_blocks"], html[:3000]
    m = re.search(r"(\d+) slow syscalls came at a site \(file, user pc\) their thread had "
                  r"recorded one at in the last second: they have that record's file", html)
    if tw:
        assert m and int(m.group(1)) == rr["slow_syscalls_site_events"], html[:3000]
    else:
        assert not m, m.group(0)    # none is a site's where every call is traced


def test_rate_zero_records_every_block(procs, tmp_path):
    require_root()
    info = start(procs)
    s, tl = profile(info, tmp_path, 0)
    rr = s["ebpf"]["record_rate"]
    assert rr["per_thread_per_s"] == 0 and "no limit" in rr["what"], rr
    assert rr["offcpu_blocks_not_recorded"] == rr["slow_syscalls_not_recorded"] == \
        rr["syscalls_untimed"] == rr["offcpu_site_stack_blocks"] == \
        rr["slow_syscalls_site_events"] == 0, rr
    assert rr["site_fresh_us"] == 0 and rr["sites"].startswith("none"), rr
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
    extra = ["--budget", budget] if budget else []     # None: none (the default)
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
    off, _ = budget_run(info, tmp_path / "off", "off", duration="1s")
    assert off["ebpf"]["budget"] == {"set": False}
    assert b["set"] and b["measured"] and b["target_ppm"] == 5000, b
    assert b["pauses"] >= 1 and b["paused_s"] >= 1.0, b
    assert b["window_share_ppm"] == s["ebpf"]["cost"]["bpf_share_of_targets_cpu_ppm"], b
    assert b["kept"] == (b["window_share_ppm"] <= 5000), b
    assert b["window_share_ppm"] < 0.5 * free["ebpf"]["cost"]["bpf_share_of_targets_cpu_ppm"], \
        (b, free["ebpf"]["cost"])
    # each pause on the timeline, as long as the summary says
    pauses = [e for e in events(tl, "aiprof") if "paused by the budget" in e["name"]]
    assert len(pauses) == b["pauses"], (pauses, b)
    assert abs(sum(e["dur"] for e in pauses) / 1e6 - b["paused_s"]) <= 0.05, (pauses, b)
    # and nothing of the paused collectors begins and ends inside one: what began in a
    # pause was still on as it ended (the resume's seed) or as the window closed
    for p in pauses:
        inside = [e for e in events(tl, "offcpu") + events(tl, "syscall")
                  if p["ts"] < e["ts"] and e["ts"] + e["dur"] < p["ts"] + p["dur"] - 1e3 and
                  not e["args"].get("still_blocked_at_end")]
        assert not inside, (p, inside[:3])
    html = (tmp_path / "budget" / "report.html").read_text()
    assert re.search(r"Budget 0\.5% of the targets' CPU: (not )?kept \([0-9.]+%\); record rate "
                     r"lowered to \d+ a second per thread, off-CPU and syscall collectors paused "
                     r"\d+ times", html), html[:3000]


def test_waits_begun_or_ended_in_a_pause_are_recorded(procs, tmp_path):
    """A thread that sleeps 0.3 s at a time, beside the switching threads that make the
    budget pause the collectors: a sleep that began while they were paused and ended after
    they resumed is recorded whole (its start read from the scheduler as the pause ended),
    off-CPU and as a slow call; a sleep that began before a pause and ended in it is
    recorded whole, off-CPU (marked as such, with the kernel stack it waited in, read as the
    pause began, and its user stack) and as a slow call: each thread asleep as a pause
    begins gets a task work of its own that records its wait as it ends."""
    require_root()
    tw, why = kernel_task_work()
    if not tw:
        pytest.skip(f"a wait is recorded across a pause by a task work, which this kernel "
                    f"refuses from sched_switch ({why}); "
                    f"test_no_wait_longer_than_a_pause_is_lost checks what is said then")
    info = start(procs)
    s, tl = budget_run(info, tmp_path, "2%", duration="6s")
    b = s["ebpf"]["budget"]
    pauses = [(e["ts"], e["ts"] + e["dur"]) for e in events(tl, "aiprof") if "paused by the budget" in e["name"]]
    assert b["pauses"] >= 2 and len(pauses) == b["pauses"], (b, pauses)

    def begun_in_pause(e):
        # (a sleep still on as the window closes is read then by the task iterator, cut there)
        return any(a < e["ts"] < z for a, z in pauses) and not e["args"].get("still_blocked_at_end")

    def ended_in_pause(e):
        return any(e["ts"] < a < e["ts"] + e["dur"] < z for a, z in pauses)
    mine = [e for e in events(tl, "offcpu") if e["tid"] == info["nap_tid"]]
    naps = [e for e in mine if begun_in_pause(e)]
    calls = [e for e in events(tl, "syscall") if e["tid"] == info["nap_tid"] and begun_in_pause(e)]
    ended = [e for e in mine if e["args"].get("ended_in_pause")]
    print({k: v for k, v in b.items() if k != "changes"}, len(naps), len(calls), len(ended))
    assert naps and all(280e3 <= e["dur"] <= 360e3 for e in naps), (naps, pauses)
    assert calls and all(e["name"].startswith("clock_nanosleep") and 280e3 <= e["dur"] <= 360e3
                         for e in calls), (calls, pauses)
    assert b["sleeps_begun_in_pauses"] >= len(naps) and b["calls_begun_in_pauses"] >= len(calls), b
    # ended in a pause: as long as the naps, where the pauses say, in the kernel's sleep
    assert ended and all(280e3 <= e["dur"] <= 360e3 and ended_in_pause(e) for e in ended), \
        (ended, pauses)
    # a pause longer than a nap has a nap end in it, of one begun before it (unless the
    # thread was between two naps as the pause began); the window's last pause is not ended
    long_pauses = [(a, z) for a, z in pauses[:-1] if z - a > 350e3]
    with_end = [p for p in long_pauses if any(p[0] < e["ts"] + e["dur"] < p[1] for e in ended)]
    assert len(with_end) >= max(1, len(long_pauses) - 1), (long_pauses, ended)
    assert all(e["args"].get("ended_in_pause") for e in mine if ended_in_pause(e)), (mine, pauses)
    # the kernel stack it waited in (read as the pause began) and its user stack (read by
    # its own task work on its way back to user space): the same as a nap recorded whole
    assert all(e["args"].get("wchan") == "hrtimer_nanosleep" and
               e["args"].get("syscall") == "clock_nanosleep" and
               "clock_nanosleep" in stack_frames(tl, e["sf"]) for e in ended), \
        [(e["args"], stack_frames(tl, e["sf"])) for e in ended]
    assert b["sleeps_ended_in_pauses"] >= len(ended), b
    # and as slow calls, timed by the task work each got as the pause began
    ended_calls = [e for e in events(tl, "syscall") if e["tid"] == info["nap_tid"] and ended_in_pause(e)]
    assert ended_calls and all(e["name"].startswith("clock_nanosleep") and 280e3 <= e["dur"] <= 360e3
                               for e in ended_calls), (ended_calls, pauses)
    assert len(ended_calls) >= len(with_end), (ended_calls, with_end)
    assert b["calls_ended_in_pauses"] >= len(ended_calls), b
    assert "sleeps_ended_in_pauses_unmeasured" in b, b


def test_no_wait_longer_than_a_pause_is_lost(procs, tmp_path):
    """Under a budget that pauses the collectors again and again, a thread that sleeps 1.2 s
    at a time (longer than the longest pause, 1 s) has every sleep of the window recorded,
    end to end, off-CPU and as clock_nanosleep calls: summary.json says so
    (waits_over_s_always_recorded)."""
    require_root()
    info = start(procs)
    s, tl = budget_run(info, tmp_path, "1%", duration="6s")
    b = s["ebpf"]["budget"]
    pauses = [e for e in events(tl, "aiprof") if "paused by the budget" in e["name"]]
    tw, why = kernel_task_work()
    if not tw:
        # no task work from sched_switch here: what a pause can lose is said, and why
        assert b["pauses"] >= 3 and b["waits_over_s_always_recorded"] is None, b
        assert "ended in it (bpf_task_work is not used here" in b["waits_not_recorded"], b
        assert why.split("; ")[0] in s["ebpf"]["task_work"], (why, s["ebpf"]["task_work"])
        return
    assert b["pauses"] >= 3 and b["waits_over_s_always_recorded"] == 1.0, b
    assert all(e["dur"] <= 1.0e6 + 50e3 for e in pauses), pauses
    ends = {}
    for cat in ("offcpu", "syscall"):
        mine = sorted((e for e in events(tl, cat) if e["tid"] == info["doze_tid"]),
                      key=lambda e: e["ts"])
        whole = [e for e in mine if not e["args"].get("still_blocked_at_end")
                 and not e["args"].get("blocked_before_window")]
        # the window is 6 s: its sleeps, but the first (begun before it) and the last
        # (cut by its end) are all there, one after another, each 1.2 s
        assert len(whole) >= 3 and all(1.15e6 <= e["dur"] <= 1.3e6 for e in whole), (cat, mine)
        gaps = [b_["ts"] - (a["ts"] + a["dur"]) for a, b_ in zip(whole, whole[1:])]
        assert all(g < 50e3 for g in gaps), (cat, gaps, mine, pauses)
        ends[cat] = whole[-1]["ts"] + whole[-1]["dur"]
    # and the sleep it is in as the window closes, even in a pause begun after that sleep
    last = [e for e in events(tl, "offcpu") if e["tid"] == info["doze_tid"]
            and e["args"].get("still_blocked_at_end")]
    assert len(last) == 1 and abs(last[0]["ts"] - ends["offcpu"]) < 50e3, (last, pauses)


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
