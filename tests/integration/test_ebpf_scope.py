# SPDX-License-Identifier: MIT
"""What a profile costs the processes that are not profiled (issue 20): which collectors are
triggered by the targets only and which by every task, as summary.json's ebpf.scope and
stderr say, and that a busy process nobody asked for is never interrupted by the CPU sampler.
"""
import json
import os
import re
import subprocess
import sys
import time

from conftest import (AIPROF, BUILD, events, kernel_task_work, load_summary, load_timeline,
                      require_root, run_aiprof)
from test_ebpf import BLOCKING, disk_dir, folded, kv  # noqa: F401 (disk_dir: a fixture)

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
    assert eb["cpu_target_switches_per_s"] <= 2000, eb["cpu_target_switches_per_s"]
    # the tracepoint collectors cannot be limited to the targets: said, with the reason
    for c in ("offcpu", "syscalls"):
        assert scope[c].startswith("global (") and "tracepoint" in scope[c], scope
        # but neither needs a syscall tracepoint (Linux 6.18's bpf_task_work), where the
        # kernel takes a task work from sched_switch
        assert ("no syscall tracepoint" in scope[c]) == kernel_task_work()[0], scope
    for c in ("offcpu", "syscalls"):
        # (one line for the collectors of one reason)
        assert re.search(rf"eBPF ([a-z]+, )*{c}(, [a-z]+)*: attached for every process on this "
                         r"machine", r.stderr), r.stderr
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


PINGPONG = r"""
import os, socket, threading
a, b = socket.socketpair()
def peer():
    while True:
        b.sendall(b.recv(1))
threading.Thread(target=peer, daemon=True).start()
print(f"ready pid={os.getpid()}", flush=True)
while True:
    a.sendall(b"x")
    a.recv(1)
"""


def test_cpu_sampler_per_cpu_for_targets_that_switch_a_lot(procs, tmp_path):
    """Targets that switch thousands of times a second (two threads passing a byte) get one
    sampler event per CPU: an event per thread would be taken off the CPU and put back at
    each of their switches, at their own cost. Said, with the rate; forced per thread with
    AIPROF_EBPF_CPU_SCOPE=task, the rate is measured all the same."""
    require_root()
    _, line = procs.start([sys.executable, "-c", PINGPONG], ready="ready")
    pid = int(line.split("=")[1])
    got = {}
    for how, env in (("auto", {}), ("task", {"AIPROF_EBPF_CPU_SCOPE": "task"})):
        out = tmp_path / how
        r = run_aiprof(["profile", "--pid", str(pid), "-d", "2s", "-o", str(out),
                        "--collectors", "cpu"], env={**os.environ, **env})
        assert r.returncode == 0, r.stderr
        got[how] = (load_summary(out)["ebpf"], r.stderr, load_timeline(out))
    eb, err, tl = got["auto"]
    assert eb["cpu_target_switches_per_s"] > 2000, eb
    assert eb["scope"]["cpu"].startswith(
        f"global (the targets switch {eb['cpu_target_switches_per_s']} times a second"), eb["scope"]
    assert "eBPF cpu: attached for every process on this machine" in err, err
    # the target's samples are all there, no one else's
    assert {e["pid"] for e in tl["traceEvents"]} == {pid}
    assert len(events(tl, "cpu_sample")) >= 50, len(events(tl, "cpu_sample"))
    eb, err, tl = got["task"]
    assert eb["scope"]["cpu"] == "task" and eb["cpu_target_switches_per_s"] > 2000, eb
    assert len(events(tl, "cpu_sample")) >= 50


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
    # (a kernel that refuses a task work from sched_switch: sys_exit both times, said so)
    tw, why = kernel_task_work()
    for how, env in (("task work", {}), ("sys_exit", {"AIPROF_EBPF_OFFCPU_TASK_WORK": "0"})):
        out = tmp_path / how.replace(" ", "_")
        r = run_aiprof(["profile", "--pid", str(pid), "-d", "2s", "-o", str(out),
                        "--collectors", "offcpu,python"], env={**os.environ, **env})
        assert r.returncode == 0, r.stderr
        eb = load_summary(out)["ebpf"]
        used = how == "task work" and tw
        assert ("bpf_task_work" in eb["scope"]["offcpu"]) == used, eb["scope"]
        assert ("slow path" in eb["scope"]["offcpu"]) == (not used), eb["scope"]
        if how == "task work":
            assert (eb["task_work"] == "used") if tw else why.split("; ")[0] in eb["task_work"], eb
        stacks = folded(out, "offcpu.folded")
        waits = sum(c for s, c in stacks if "waiter (<string>:5)" in s and
                    "clock_nanosleep" in ";".join(s))
        got[how] = (eb["offcpu_events"], waits)
        # every 50 ms sleep of 2 s is a record, each with the wait's Python frame
        assert 30 <= eb["offcpu_events"] <= 45, (how, eb)
        assert waits >= 30 * 50000 * 0.8, (how, stacks[:3])
    assert abs(got["task work"][0] - got["sys_exit"][0]) <= 4, got


def syscall_programs_loaded():
    """Names of the loaded BPF programs that trace every task's system calls."""
    r = subprocess.run(["bpftool", "-j", "prog", "show"], capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 0, r.stderr
    return {p.get("name") for p in json.loads(r.stdout)} & {"sys_enter", "sys_exit",
                                                             "offcpu_sys_exit"}


def test_syscalls_need_no_syscall_tracepoint(procs, tmp_path, disk_dir):
    """By default the syscall collector sees the calls that gave up the CPU, at the target's
    own context switches, each completed by a task work of the thread's own: no program on
    raw_syscalls is loaded while it records (so no other process's system calls take the
    kernel's slow path), and the slow pipe reads are the records that --all-syscalls, which
    traces every call, gives: the same calls, path, bytes and return value."""
    require_root()
    _, line = procs.start([BLOCKING, "--dir", disk_dir, "--seconds", "60"], ready="ready")
    info = kv(line)
    pid, reader, pipe_bytes = int(info["pid"]), int(info["reader_tid"]), int(info["pipe_bytes"])
    got = {}
    # (a kernel that refuses a task work from sched_switch: traced both times, and the
    # off-CPU collector on sys_exit too)
    tw = kernel_task_work()[0]
    for how, extra in (("switch", []), ("trace", ["--all-syscalls"])):
        out = tmp_path / how
        p = subprocess.Popen([AIPROF, "profile", "--pid", str(pid), "-d", "3s", "-o", str(out),
                              "--method", "ebpf"] + extra, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        time.sleep(2)     # recording by now (the window is 3 s)
        loaded = syscall_programs_loaded()
        _, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
        switch = how == "switch" and tw
        want = set() if switch else {"sys_enter", "sys_exit"} | (set() if tw else {"offcpu_sys_exit"})
        assert loaded == want, (how, loaded)
        eb = load_summary(out)["ebpf"]
        assert eb["syscalls_counted"] == ("gave_up_cpu" if switch else "every_call")
        assert ("slow path" in eb["scope"]["syscalls"]) == (not switch), eb["scope"]
        reads = [e for e in events(load_timeline(out), "syscall", "read") if e["tid"] == reader]
        # the reader waits ~50 ms in each read: 3 s of them, every one a slow record
        assert 40 <= len(reads) <= 65, (how, len(reads))
        for e in reads:
            assert e["args"]["path"].startswith("pipe:[") and e["args"]["fd"] >= 0, e
            assert e["args"]["bytes"] == e["args"]["ret"] == pipe_bytes, e
            assert 20_000 <= e["dur"] <= 200_000, e     # microseconds
        table = {x["name"]: x for x in eb["targets"][0]["syscalls"]}
        got[how] = (len(reads), table["read"]["count"])
    # the same waits both ways; every call counts only with --all-syscalls
    assert abs(got["switch"][0] - got["trace"][0]) <= 6, got
    assert got["trace"][1] >= got["trace"][0], got
