# SPDX-License-Identifier: MIT
"""What a window cost (issue 31, first part): summary.json's ebpf.cost and the report's line,
from the kernel's own BPF statistics (run_time_ns of every program aiprof loaded, turned on
with BPF_ENABLE_STATS for the window only) against the target's CPU time.

Workload: tests/workloads/blocking_io.c (a thread reading a pipe, one fsyncing a file: context
switches and slow syscalls), profiled with the off-CPU and syscall collectors."""
import json
import os
import re
import subprocess
import time

from conftest import AIPROF, BUILD, kernel_task_work, load_summary, require_root
from test_ebpf import cpu_seconds

BLOCKING = os.path.join(BUILD, "tests", "workloads", "blocking_io")
COLLECTORS = ["--collectors", "cpu,offcpu,syscalls"]


def holds_stats_fd(pid):
    """Whether pid holds a BPF_ENABLE_STATS fd (the statistics are on while one is open
    anywhere; kernel.bpf_stats_enabled shows only what the sysctl itself set)."""
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") == "anon_inode:bpf-stats":
                    return True
            except OSError:
                pass
    except OSError:
        pass
    return False


def test_window_cost_in_summary_and_report(procs, tmp_path):
    require_root()
    p, _ = procs.start([BLOCKING, "--dir", str(tmp_path), "--seconds", "120"], ready="ready")
    before = cpu_seconds(p.pid)
    out = tmp_path / "out"
    a = subprocess.Popen([AIPROF, "profile", "--pid", str(p.pid), "-d", "3s", *COLLECTORS,
                          "-o", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # on while the window is open, off before the artifacts are written (the statistics cost
    # every BPF program of the node two clock reads a run: only while recording); the fd
    # goes with the injector's process however it ends
    seen = []       # (CLOCK_MONOTONIC ns, on)
    deadline = time.monotonic() + 20
    while a.poll() is None and time.monotonic() < deadline:
        seen.append((time.monotonic_ns(), holds_stats_fd(a.pid)))
        time.sleep(0.02)
    _, err = a.communicate(timeout=60)
    after = cpu_seconds(p.pid)
    assert a.returncode == 0, err
    assert any(on for _, on in seen), "the statistics were never on during the window"
    # off once the window closed (the injector may exit within a poll of that: then there is
    # no later reading at all), not still on while the artifacts are written
    end = load_summary(out)["window"]["end_monotonic_ns"]
    late = [t for t, on in seen if on and t > end + 200_000_000]
    assert not late, f"the statistics still on {(late[-1] - end) / 1e6:.0f} ms after the window closed"

    c = load_summary(out)["ebpf"]["cost"]
    print(json.dumps({k: v for k, v in c.items() if k != "programs"}))
    assert c["measured"] is True, c
    assert 2.9 <= c["window_s"] <= 4, c
    progs = {x["name"]: x for x in c["programs"]}
    # every program listed adds up to the totals; the collectors asked for are there and ran
    assert sum(x["ns"] for x in c["programs"]) == c["bpf_ns"] and sum(x["runs"] for x in c["programs"]) == c["bpf_runs"]
    off = [x for n, x in progs.items() if n.startswith("offcpu_switch")]
    sys_ = [x for n, x in progs.items() if n.startswith("sys_")]
    assert off and off[0]["runs"] > 0 and off[0]["ns"] > 0, progs
    assert sys_, progs
    summary = load_summary(out)
    if "sys_switch" in progs:
        # both collectors at context switches: one sched_switch program, the syscall half
        # its tail call, counted in it (the kernel's statistics see one run per switch)
        assert progs["sys_switch"].get("tail_call_of") == off[0]["name"], progs
        assert progs["sys_switch"]["runs"] == 0, progs
        assert "tail call" in summary["ebpf"]["scope"]["syscalls"], summary["ebpf"]["scope"]
    else:
        assert sum(x["runs"] for x in sys_) > 0, progs
    # the syscall collector ran all the same: the fsyncs are there
    assert summary["ebpf"]["slow_syscall_events"] > 0, summary["ebpf"]
    assert "cpu_sample" in progs, progs
    # a context switch at least for every off-CPU record the window kept
    assert off[0]["runs"] >= summary["ebpf"]["offcpu_events"], (off, summary["ebpf"]["offcpu_events"])
    # the targets' CPU: within what the test itself read around the window
    assert 0 < c["targets_cpu_s"] <= after - before + 0.02, (c["targets_cpu_s"], before, after)
    want = c["bpf_ns"] * 1e6 / (c["targets_cpu_s"] * 1e9)
    assert abs(c["bpf_share_of_targets_cpu_ppm"] - want) <= max(2, want * 0.01), (c, want)
    # the report says it in one line
    html = (out / "report.html").read_text()
    m = re.search(r'<p class="note" id="cost">Cost of this window: aiprof\'s BPF programs ran '
                  r'([0-9.]+) s of CPU in the ([0-9.]+) s window \((\d+) runs', html)
    assert m, html[:3000]
    assert abs(float(m.group(1)) - c["bpf_ns"] / 1e9) < 0.001 and int(m.group(3)) == c["bpf_runs"]


def test_syscalls_alone_run_their_own_switch_program(procs, tmp_path):
    """Without the off-CPU collector there is no program to chain to: the syscall collector's
    sched_switch program is attached and runs, counted under its own name."""
    require_root()
    p, _ = procs.start([BLOCKING, "--dir", str(tmp_path), "--seconds", "120"], ready="ready")
    out = tmp_path / "out"
    r = subprocess.run([AIPROF, "profile", "--pid", str(p.pid), "-d", "2s", "--collectors",
                        "cpu,syscalls", "-o", str(out)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    s = load_summary(out)
    progs = {x["name"]: x for x in s["ebpf"]["cost"]["programs"]}
    tw, why = kernel_task_work()
    if not tw:
        import pytest
        assert "sys_switch" not in progs and "sys_exit" in progs, progs
        pytest.skip(f"syscalls in trace mode here: this kernel refuses a task work from "
                    f"sched_switch ({why})")
    assert progs["sys_switch"]["runs"] > 0 and "tail_call_of" not in progs["sys_switch"], progs
    assert not any(n.startswith("offcpu_switch") for n in progs), progs
    assert "tail call" not in s["ebpf"]["scope"]["syscalls"]
    assert s["ebpf"]["slow_syscall_events"] > 0, s["ebpf"]


def test_cost_not_measured_says_why_and_the_window_goes_on(procs, tmp_path):
    """Without CAP_SYS_ADMIN the statistics cannot be turned on: the window records as before
    and the summary and report say the cost was not measured, and why."""
    require_root()
    p, _ = procs.start([BLOCKING, "--dir", str(tmp_path), "--seconds", "120"], ready="ready")
    out = tmp_path / "out"
    r = subprocess.run(["capsh", "--drop=cap_sys_admin", "--", "-c",
                        f"exec {AIPROF} profile --pid {p.pid} -d 1s {' '.join(COLLECTORS)} "
                        f"--budget 1% -o {out}"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    s = load_summary(out)
    c = s["ebpf"]["cost"]
    assert c["measured"] is False and "CAP_SYS_ADMIN" in c["reason"], c
    # nor can a budget be kept: it says so, and the window records as without one
    b = s["ebpf"]["budget"]
    assert b["set"] and b["measured"] is False and "CAP_SYS_ADMIN" in b["reason"], b
    assert "Budget: not kept (the cost could not be measured)" in (out / "report.html").read_text()
    assert s["ebpf"]["offcpu_events"] > 0, s["ebpf"]
    assert "Cost of this window: not measured (the kernel&#39;s BPF statistics could not be turned on" \
        in (out / "report.html").read_text() or \
        "Cost of this window: not measured (the kernel's BPF statistics could not be turned on" \
        in (out / "report.html").read_text()


def test_cost_benchmark_runs_on_a_real_job(tmp_path):
    """`make bench`'s cost benchmark, one short pair on the request loop (real PyTorch): its
    figures come from the window's summary (the BPF share is measured, not assumed)."""
    require_root()
    try:
        subprocess.run(["/usr/bin/python3", "-c", "import torch"], check=True, capture_output=True, timeout=120)
    except (subprocess.CalledProcessError, FileNotFoundError):
        import pytest
        pytest.skip("no python3-torch")
    bench = os.path.join(os.path.dirname(__file__), "..", "bench", "bench_cost.py")
    r = subprocess.run(["/usr/bin/python3", bench, "--jobs", "serve", "--pairs", "1", "--window", "1"],
                       capture_output=True, text=True, timeout=300, env=dict(os.environ, BUILD=BUILD))
    assert r.returncode == 0, r.stdout + r.stderr
    m = re.search(r"^bench_cost: job=serve burners=0 rate_ratio=([0-9.]+) bpf_share_pct=([0-9.]+) "
                  r"injector_share_pct=([0-9.]+)", r.stdout, re.M)
    assert m, r.stdout
    assert float(m.group(1)) > 0 and float(m.group(2)) > 0 and float(m.group(3)) > 0, r.stdout
