#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Cost of the eBPF collectors to the process they watch, measured side by side in one run.

Two identical targets — tests/workloads/python_nested.py under /usr/bin/python3: pure-Python
work, a 4 KiB pwrite + pread per iteration and a 1 ms sleep every 100 iterations (~5000
syscalls/s in all), so that every collector (CPU samples with Python frames, off-CPU,
syscalls) has something to record — run at the same time and report their iteration count
and their own CPU time every 100 ms. Round after round, `aiprof profile` (all collectors,
99 Hz) records one of them while the other runs unobserved; the roles alternate. Over each
recording window (as summary.json reports it: loading, attaching and writing are outside):

    slowdown = throughput of the unobserved twin / throughput of the observed one

The twins are pinned to the same CPU, so they share it fairly and see the same machine
noise; alternating cancels what differs between them; the geometric mean over the rounds
is printed. "throughput" is iterations per second of wall time; per second of the target's
own CPU time is printed too (what the collectors cost inside the target, without the
scheduler's share noise of a busy machine). Also prints the artifact bytes per second of
window.

    /usr/bin/python3 tests/bench/bench_ebpf.py [--rounds 8] [--window 4] [--quick]
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.path.join(ROOT, os.environ.get("BUILD", "build"))
AIPROF = os.path.join(BUILD, "aiprof")
WORKLOAD = os.path.join(ROOT, "tests", "workloads", "python_nested.py")
WORK = ["--report", "--io", "--sleep-every", "100", "--work", "5000"]


class Target:
    def __init__(self, seconds, cpu):
        # both twins on one CPU: they share it fairly, and whatever else runs on the machine
        # takes from both alike
        self.p = subprocess.Popen(["/usr/bin/python3", WORKLOAD, *WORK, "--seconds", str(seconds)],
                                  stdout=subprocess.PIPE, text=True,
                                  preexec_fn=lambda: os.sched_setaffinity(0, {cpu}))
        line = self.p.stdout.readline()
        assert line.startswith("ready pid="), line
        self.pid = int(line.split("=")[1])
        os.set_blocking(self.p.stdout.fileno(), False)
        self.samples = []  # (t_ns, iters, cpu_ns)

    def drain(self):
        for line in self.p.stdout:
            if line.startswith("rate "):
                kv = dict(x.split("=") for x in line.split()[1:])
                self.samples.append((int(kv["t"]), int(kv["iters"]), int(kv["cpu"])))

    def rates(self, t0, t1):
        """(iterations per wall second, per CPU second) between the first and last report
        inside [t0, t1], or None."""
        inside = [s for s in self.samples if t0 <= s[0] <= t1]
        if len(inside) < 2:
            return None
        (a, ia, ca), (b, ib, cb) = inside[0], inside[-1]
        if ib == ia or cb == ca:
            return None
        return (ib - ia) / ((b - a) / 1e9), (ib - ia) / ((cb - ca) / 1e9)

    def stop(self):
        self.p.kill()
        self.p.wait()


def gmean(xs):
    return math.exp(statistics.mean(math.log(x) for x in xs))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=int(os.environ.get("BENCH_ROUNDS", "8")))
    ap.add_argument("--window", type=float, default=float(os.environ.get("BENCH_WINDOW", "4")))
    ap.add_argument("--quick", action="store_true", help="4 rounds of 3 s (for the tests)")
    ap.add_argument("--collectors", default="all")
    a = ap.parse_args()
    if a.quick:
        a.rounds, a.window = 4, 3.0
    a.rounds += a.rounds % 2  # alternation needs pairs
    life = a.rounds * (a.window + 6) + 20
    cpu = max(os.sched_getaffinity(0))
    twins = [Target(life, cpu), Target(life, cpu)]
    wall, cpu, bps, sizes, sys_rate, samples = [], [], [], {}, [], []
    try:
        time.sleep(1.0)  # both warm
        with tempfile.TemporaryDirectory() as d:
            for i in range(a.rounds):
                seen, other = twins[i % 2], twins[1 - i % 2]
                out = os.path.join(d, str(i))
                r = subprocess.run([AIPROF, "profile", "--pid", str(seen.pid), "-d", f"{a.window}s",
                                    "--collectors", a.collectors, "-q", "-o", out],
                                   capture_output=True, text=True, timeout=120)
                assert r.returncode == 0, r.stderr
                with open(os.path.join(out, "summary.json")) as f:
                    s = json.load(f)
                assert s["ebpf"]["state"] == "on", s["ebpf"]
                w0, w1 = s["window"]["start_monotonic_ns"], s["window"]["end_monotonic_ns"]
                et = s["ebpf"]["targets"][0]
                sys_rate.append(sum(x["count"] for x in et.get("syscalls", [])) / ((w1 - w0) / 1e9))
                samples.append(et.get("cpu_samples", 0) / ((w1 - w0) / 1e9))
                time.sleep(0.3)
                for t in twins:
                    t.drain()
                rs, ro = seen.rates(w0, w1), other.rates(w0, w1)
                assert rs and ro, "a target stopped reporting"
                wall.append(ro[0] / rs[0])
                cpu.append(ro[1] / rs[1])
                total = 0
                for name in os.listdir(out):
                    n = os.path.getsize(os.path.join(out, name))
                    sizes.setdefault(name, []).append(n / ((w1 - w0) / 1e9))
                    total += n
                bps.append(total / ((w1 - w0) / 1e9))
    finally:
        for t in twins:
            t.stop()
    print(f"target: python_nested.py {' '.join(WORK)} under /usr/bin/python3; {a.rounds} rounds "
          f"of {a.window:g} s, `aiprof profile --collectors {a.collectors}` at 99 Hz on one twin")
    print(f"observed twin: {statistics.mean(sys_rate):.0f} syscalls/s, "
          f"{statistics.mean(samples):.0f} CPU samples/s recorded")
    print("slowdown per round (wall): " + " ".join(f"{x:.3f}" for x in wall))
    print("slowdown per round (cpu):  " + " ".join(f"{x:.3f}" for x in cpu))
    print(f"throughput unobserved/observed: {gmean(wall):.4f} per wall second, "
          f"{gmean(cpu):.4f} per CPU second of the target (target <= 1.01)")
    print(f"artifacts: {statistics.mean(bps) / 1024:.1f} KiB per second of window (" +
          ", ".join(f"{k} {statistics.mean(v) / 1024:.1f}" for k, v in sorted(sizes.items())) + ")")
    print(f"bench_ebpf: ratio={gmean(wall):.4f} cpu_ratio={gmean(cpu):.4f} "
          f"bytes_per_s={statistics.mean(bps):.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
