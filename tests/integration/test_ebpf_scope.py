# SPDX-License-Identifier: MIT
"""What a profile costs the processes that are not profiled (issue 20): which collectors are
triggered by the targets only and which by every task, as summary.json's ebpf.scope and
stderr say, and that a busy process nobody asked for is never interrupted by the CPU sampler.
"""
import os
import sys

from conftest import (BUILD, events, load_summary, load_timeline, require_root, run_aiprof)
from test_ebpf import folded

HOT = os.path.join(BUILD, "tests", "workloads", "hot_functions")
# a target whose busy thread starts 1.5 s after it says ready: after aiprof attached, so
# only an inherited per-thread event can sample it
LATE_THREAD = r"""
import os, sys, threading, time
print(f"ready pid={os.getpid()}", flush=True)
time.sleep(1.5)
def spin():
    print(f"spin tid={threading.get_native_id()}", flush=True)
    x = 0
    while True:
        x += 1
threading.Thread(target=spin, daemon=True).start()
while True:
    time.sleep(0.002)
"""


def start_pair(procs):
    """(target Popen, its pid, the pid of a busy process that is not profiled)."""
    p, line = procs.start([sys.executable, "-c", LATE_THREAD], ready="ready")
    pid = int(line.split("=")[1])
    _, other = procs.start([HOT, "--seconds", "60"], ready="ready")
    other_pid = int(other.split()[1].split("=")[1])
    return p, pid, other_pid


def spin_tid(p):
    line = p.stdout.readline()
    assert line.startswith("spin tid="), line
    return int(line.split("=")[1])


def test_cpu_sampler_runs_on_target_threads_only(procs, tmp_path):
    require_root()
    p, pid, other_pid = start_pair(procs)
    out = tmp_path / "out"
    r = run_aiprof(["profile", "--pid", str(pid), "-d", "4s", "-o", str(out), "--frequency", "199",
                    "--collectors", "cpu,offcpu,syscalls"])
    assert r.returncode == 0, r.stderr
    late = spin_tid(p)
    eb = load_summary(out)["ebpf"]
    scope = eb["scope"]
    assert scope["cpu"] == "task", scope
    # the tracepoint collectors cannot be limited to the targets: said, with the reason
    for c in ("offcpu", "syscalls"):
        assert scope[c].startswith("global (") and "tracepoint" in scope[c], scope
    for c in ("offcpu", "syscalls"):
        assert f"eBPF {c}: attached for every process on this machine" in r.stderr, r.stderr
    assert "eBPF cpu" not in r.stderr
    # hot_functions spun on a CPU the whole window: the sampler never ran in it
    assert eb["cpu_foreign_samples"] == 0, eb
    assert eb["foreign_records"] == 0
    # the thread started during the window is sampled (inherited event), nothing else is
    tl = load_timeline(out)
    samples = events(tl, "cpu_sample")
    assert {e["pid"] for e in tl["traceEvents"]} == {pid}
    assert other_pid not in {e["pid"] for e in tl["traceEvents"]}
    n_late = sum(1 for e in samples if e["tid"] == late)
    assert n_late >= 50, (n_late, len(samples))


def test_cpu_only_profile_touches_no_one_else(procs, tmp_path):
    require_root()
    p, pid, _ = start_pair(procs)
    out = tmp_path / "out"
    r = run_aiprof(["profile", "--pid", str(pid), "-d", "3s", "-o", str(out),
                    "--collectors", "cpu,python"])
    assert r.returncode == 0, r.stderr
    eb = load_summary(out)["ebpf"]
    assert eb["scope"] == {"cpu": "task"}, eb["scope"]
    assert "every process on this machine" not in r.stderr, r.stderr
    assert eb["cpu_foreign_samples"] == 0 and eb["cpu_samples"] > 0, eb


def test_cpu_sampler_fallback_is_global_and_said(procs, tmp_path):
    """Where per-thread events are refused (forced here), one event per CPU: every task is
    sampled and the others are dropped in the kernel; the target's samples are all there."""
    require_root()
    p, pid, other_pid = start_pair(procs)
    out = tmp_path / "out"
    r = run_aiprof(["profile", "--pid", str(pid), "-d", "4s", "-o", str(out), "--frequency", "199",
                    "--collectors", "cpu"], env={**os.environ, "AIPROF_EBPF_CPU_SCOPE": "global"})
    assert r.returncode == 0, r.stderr
    late = spin_tid(p)
    eb = load_summary(out)["ebpf"]
    assert eb["scope"]["cpu"].startswith("global (AIPROF_EBPF_CPU_SCOPE=global"), eb["scope"]
    assert "eBPF cpu: attached for every process on this machine" in r.stderr, r.stderr
    # the busy bystander was interrupted (and dropped): what the per-thread events avoid
    assert eb["cpu_foreign_samples"] > 0, eb
    assert eb["foreign_records"] == 0
    tl = load_timeline(out)
    assert {e["pid"] for e in tl["traceEvents"]} == {pid}
    assert sum(1 for e in events(tl, "cpu_sample") if e["tid"] == late) >= 50


SLEEPER = r"""
import os, time
print(f"ready pid={os.getpid()}", flush=True)
def waiter():
    time.sleep(0.05)
while True:
    waiter()
"""


def test_offcpu_needs_no_syscall_tracepoint(procs, tmp_path):
    """With bpf_task_work (Linux 6.18) a long sleep's record is completed by a task work of
    the sleeping thread's own, not at sys_exit (which puts every task's syscalls on the slow
    path): summary.json says so, and the records are those the sys_exit way gives (forced
    here): the same count, the wait's Python frame and syscall in each stack."""
    require_root()
    _, line = procs.start([sys.executable, "-c", SLEEPER], ready="ready")
    pid = int(line.split("=")[1])
    got = {}
    for how, env in (("task work", {}), ("sys_exit", {"AIPROF_EBPF_OFFCPU_TASK_WORK": "0"})):
        out = tmp_path / how.replace(" ", "_")
        r = run_aiprof(["profile", "--pid", str(pid), "-d", "2s", "-o", str(out),
                        "--collectors", "offcpu,python"], env={**os.environ, **env})
        assert r.returncode == 0, r.stderr
        eb = load_summary(out)["ebpf"]
        assert ("bpf_task_work" in eb["scope"]["offcpu"]) == (how == "task work"), eb["scope"]
        assert ("slow path" in eb["scope"]["offcpu"]) == (how == "sys_exit"), eb["scope"]
        stacks = folded(out, "offcpu.folded")
        waits = sum(c for s, c in stacks if "waiter (<string>:5)" in s and
                    "clock_nanosleep" in ";".join(s))
        got[how] = (eb["offcpu_events"], waits)
        # every 50 ms sleep of 2 s is a record, each with the wait's Python frame
        assert 30 <= eb["offcpu_events"] <= 45, (how, eb)
        assert waits >= 30 * 50000 * 0.8, (how, stacks[:3])
    assert abs(got["task work"][0] - got["sys_exit"][0]) <= 4, got
