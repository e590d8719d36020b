#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""What a profile costs the processes that are NOT profiled, measured side by side in one run.

A bystander — tests/bench/getppid_loop.c, getppid() as fast as it can, pinned to the last CPU —
prints its ns per call every 50 ms for the whole run. A target — tests/workloads/
python_nested.py (pure Python, a 4 KiB pwrite + pread per iteration, a 1 ms sleep every 100),
pinned with aiprof to the first CPU, so that neither takes the bystander's CPU — is recorded
round after round in each mode below, with an idle gap of the same length (no aiprof running)
before each recording:

    ratio = ns/call of the bystander inside the recording windows (as summary.json reports
            them) / ns/call inside the idle gaps

(ns/call: the 20th percentile of its 50 ms samples, since other load on the machine only
ever makes a sample read higher; the ratio of the medians is printed next to it).

Modes: `--collectors cpu,python` (per-thread sampling events: the bystander is never
interrupted), `cpu,offcpu,python` (sched_switch is global, but with bpf_task_work no syscall
tracepoint), the same with offcpu completed at sys_exit (older kernels), `syscalls` alone
(the calls that gave up the CPU, read at the target's own context switches), the same with
`--all-syscalls` (raw_syscalls: every task's syscalls on the slow path), all collectors, all
collectors with `--method ebpf`; see summary.json's ebpf.scope.

Then the same for uprobes: a second sync_loop (cudaStreamSynchronize() on the fake runtime,
both processes map the same libcudart) is the bystander while `--method ebpf --collectors
cuda` records the first; the target's own ns per call shows the probes are hit.

Run as root: `/usr/bin/python3 tests/bench/bench_bystander.py [--rounds 3] [--window 3]`.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.path.join(ROOT, os.environ.get("BUILD", "build"))
AIPROF = os.path.join(BUILD, "aiprof")
GETPPID = os.path.join(BUILD, "tests", "bench", "getppid_loop")
SYNC = os.path.join(BUILD, "tests", "bench", "sync_loop")
WORKLOAD = os.path.join(ROOT, "tests", "workloads", "python_nested.py")
WORK = ["--io", "--sleep-every", "100", "--work", "5000"]
# name, arguments, environment
MODES = [
    ("--collectors cpu,python", ["--collectors", "cpu,python"], {}),
    ("--collectors cpu,offcpu,python", ["--collectors", "cpu,offcpu,python"], {}),
    # what offcpu cost before bpf_task_work, and still costs on older kernels: sys_exit
    ("  the same, offcpu by sys_exit", ["--collectors", "cpu,offcpu,python"],
     {"AIPROF_EBPF_OFFCPU_TASK_WORK": "0"}),
    ("--collectors syscalls", ["--collectors", "syscalls"], {}),
    # every call seen: raw_syscalls, what the syscall collector cost before (and still does
    # on a kernel without bpf_task_work)
    ("  the same, --all-syscalls", ["--collectors", "syscalls", "--all-syscalls"], {}),
    ("all collectors", [], {}),
    ("all collectors, --method ebpf", ["--method", "ebpf"], {}),
]


class Loop:
    """A process printing "rate t=<ns> ns_per_call=<x>"; its samples are kept with their time."""

    def __init__(self, argv, cpu):
        self.p = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True,
                                  preexec_fn=lambda: os.sched_setaffinity(0, {cpu}))
        line = self.p.stdout.readline()
        assert line.startswith("ready pid="), line
        self.pid = int(line.split("=")[1])
        self.samples = []
        self.t = threading.Thread(target=self._read, daemon=True)
        self.t.start()

    def _read(self):
        for line in self.p.stdout:
            if line.startswith("rate "):
                kv = dict(x.split("=") for x in line.split()[1:])
                self.samples.append((int(kv["t"]), float(kv["ns_per_call"])))

    def level(self, spans):
        """The 20th percentile of its 50 ms samples inside spans: a sample during which other
        load on the machine preempted the loop only reads higher, so the low quantile is
        the undisturbed cost per call (the median is printed next to it)."""
        xs = sorted(v for t, v in list(self.samples) if any(a <= t <= b for a, b in spans))
        assert len(xs) >= 5, f"too few samples ({len(xs)})"
        return xs[len(xs) // 5], statistics.median(xs)

    def stop(self):
        if self.p.poll() is None:
            self.p.kill()   # by its own PID
        self.p.wait()


def record(pid, extra, window, out, cpu, env=None):
    r = subprocess.run([AIPROF, "profile", "--pid", str(pid), "-d", f"{window}s", "-q",
                        "-o", out, *extra], capture_output=True, text=True, timeout=120,
                       env={**os.environ, **(env or {})},
                       preexec_fn=lambda: os.sched_setaffinity(0, {cpu}))
    assert r.returncode == 0, r.stderr
    with open(os.path.join(out, "summary.json")) as f:
        s = json.load(f)
    return s, (s["window"]["start_monotonic_ns"], s["window"]["end_monotonic_ns"])


def idle(window):
    t0 = time.monotonic_ns()
    time.sleep(window)
    return (t0 + 100_000_000, time.monotonic_ns())


def rounds_of(bystander, target_pid, extra, rounds, window, d, tag, cpu, env=None):
    """Alternating idle gap / recording; returns (idle median, recording median, summaries)."""
    quiet, busy, sums = [], [], []
    for i in range(rounds):
        quiet.append(idle(window))
        s, span = record(target_pid, extra, window, os.path.join(d, f"{tag}-{i}"), cpu, env)
        busy.append(span)
        sums.append(s)
    quiet.append(idle(window))
    time.sleep(0.2)
    return bystander.level(quiet), bystander.level(busy), sums


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=int(os.environ.get("BENCH_ROUNDS", "3")))
    ap.add_argument("--window", type=float, default=float(os.environ.get("BENCH_WINDOW", "3")))
    a = ap.parse_args()
    if os.geteuid() != 0:
        print("bench_bystander: needs root (eBPF, uprobes)", file=sys.stderr)
        return 2
    cpus = sorted(os.sched_getaffinity(0))
    work_cpu, by_cpu = cpus[0], cpus[-1]
    life = (len(MODES) + 1) * a.rounds * (2 * a.window + 8) + 30
    results = []
    loops = []
    try:
        with tempfile.TemporaryDirectory() as d:
            target = Loop(["/usr/bin/python3", WORKLOAD, *WORK, "--seconds", str(life)], work_cpu)
            loops.append(target)
            by = Loop([GETPPID, str(life)], by_cpu)
            loops.append(by)
            time.sleep(1.0)
            for m, (name, extra, env) in enumerate(MODES):
                q, b, sums = rounds_of(by, target.pid, extra, a.rounds, a.window, d,
                                       f"mode{m}", work_cpu, env)
                scope = sums[-1]["ebpf"].get("scope", {})
                results.append((name, q, b, scope))
            by.stop()
            target.stop()

            # uprobes: both loops map the same fake libcudart; only one is recorded
            utarget = Loop([SYNC, str(a.rounds * (2 * a.window + 8) + 20)], work_cpu)
            loops.append(utarget)
            uby = Loop([SYNC, str(a.rounds * (2 * a.window + 8) + 20)], by_cpu)
            loops.append(uby)
            time.sleep(0.5)
            quiet, busy = [], []
            for i in range(a.rounds):
                quiet.append(idle(a.window))
                s, span = record(utarget.pid, ["--method", "ebpf", "--collectors", "cuda"],
                                 a.window, os.path.join(d, f"uprobe-{i}"), work_cpu)
                busy.append(span)
            quiet.append(idle(a.window))
            time.sleep(0.2)
            probes = s["targets"][0].get("uprobes", {}).get("probes", "?")
            uq, ub = uby.level(quiet)[0], uby.level(busy)[0]
            tq, tb = utarget.level(quiet)[0], utarget.level(busy)[0]
    finally:
        for lp in loops:
            lp.stop()

    print(f"bystander: getppid() in a loop pinned to CPU {by_cpu}; target: python_nested.py "
          f"{' '.join(WORK)} and aiprof pinned to CPU {work_cpu}; {a.rounds} windows of "
          f"{a.window:g} s per mode, each after an idle gap as long")
    for name, (q, qm), (b, bm), scope in results:
        sc = ", ".join(f"{k}: {v.split(' (')[0]}" for k, v in sorted(scope.items()))
        print(f"  {name:30s} idle {q:6.1f} ns/call, recording {b:6.1f} ns/call: ratio "
              f"{b / q:.3f} (medians {qm:.1f} -> {bm:.1f}: {bm / qm:.3f}); scope: {sc}")
    print(f"  uprobes (--method ebpf --collectors cuda, {probes} probes in the target): the "
          f"bystander's cudaStreamSynchronize {uq:.1f} -> {ub:.1f} ns/call, ratio {ub / uq:.3f}; "
          f"the target's own {tq:.1f} -> {tb:.1f} ns/call")
    for name, (q, _), (b, _), scope in results:
        if name.startswith("  "):   # what an opt-in or an older kernel costs: no target
            print(f"bench_bystander: {name.strip()}: ratio={b / q:.4f} (for comparison)")
            continue
        ok = "ok" if b / q <= 1.05 else "MISSED"
        print(f"bench_bystander: {name}: ratio={b / q:.4f} (target <= 1.05: {ok})")
    print(f"bench_bystander: uprobes: ratio={ub / uq:.4f} "
          f"(target <= 1.05: {'ok' if ub / uq <= 1.05 else 'MISSED'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
