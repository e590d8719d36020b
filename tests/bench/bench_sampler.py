#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""What the CPU sampler's perf events cost a target that switches a lot, measured side by
side in one run.

tests/bench/pingpong.c (two threads passing a byte over pipes: ~300,000 context switches a
second on this machine) is started once; ROUNDS rounds of three windows of WINDOW seconds in
rotating order: unprofiled, `aiprof profile --collectors cpu --method ebpf` with the sampler
forced to one event per target thread (AIPROF_EBPF_CPU_SCOPE=task), and the same as aiprof
chooses (one event per CPU past 2,000 switches a second). The rate is the round trips a
second inside each window (its first 300 ms left out), from the program's own lines.
Printed: the medians, and each profiled median over the unprofiled one.

    /usr/bin/python3 tests/bench/bench_sampler.py [--rounds 4] [--window 3]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.path.join(ROOT, os.environ.get("BUILD", "build"))
AIPROF = os.path.join(BUILD, "aiprof")
PINGPONG = os.path.join(BUILD, "tests", "bench", "pingpong")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--window", type=float, default=3)
    a = ap.parse_args()
    if os.geteuid() != 0:
        print("bench_sampler: needs root (eBPF)", file=sys.stderr)
        return 1
    p = subprocess.Popen([PINGPONG], stdout=subprocess.PIPE, text=True)
    tmp = tempfile.mkdtemp(prefix="bench_sampler.")
    samples, rates = [], {}
    try:
        assert p.stdout.readline().startswith("ready pid=")
        os.set_blocking(p.stdout.fileno(), False)
        time.sleep(1)
        modes = ["unprofiled", "per thread (forced)", "as chosen"]
        for r in range(a.rounds):
            for i in range(len(modes)):
                mode = modes[(i + r) % len(modes)]
                if mode == "unprofiled":
                    t0 = time.monotonic_ns()
                    time.sleep(a.window)
                    t1 = time.monotonic_ns()
                    chosen = ""
                else:
                    env = dict(os.environ)
                    if mode.startswith("per thread"):
                        env["AIPROF_EBPF_CPU_SCOPE"] = "task"
                    out = os.path.join(tmp, f"{r}-{i}")
                    c = subprocess.run([AIPROF, "profile", "--pid", str(p.pid), "-d", f"{a.window}s",
                                        "-q", "-o", out, "--collectors", "cpu", "--method", "ebpf"],
                                       env=env, capture_output=True, text=True, timeout=120)
                    assert c.returncode == 0, c.stderr
                    with open(os.path.join(out, "summary.json")) as f:
                        s = json.load(f)
                    t0, t1 = s["window"]["start_monotonic_ns"], s["window"]["end_monotonic_ns"]
                    chosen = s["ebpf"]["scope"]["cpu"].split(" (")[0]
                    rates.setdefault(mode + " events", set()).add(chosen)
                time.sleep(0.3)
                for line in p.stdout:
                    kv = dict(x.split("=") for x in line.split()[1:])
                    samples.append((int(kv["t"]), int(kv["n"])))
                inside = [x for x in samples if t0 + 300_000_000 <= x[0] <= t1]
                rate = (inside[-1][1] - inside[0][1]) / ((inside[-1][0] - inside[0][0]) / 1e9)
                rates.setdefault(mode, []).append(rate)
    finally:
        p.kill()
        p.wait()
    base = statistics.median(rates["unprofiled"])
    for mode in ("unprofiled", "per thread (forced)", "as chosen"):
        med = statistics.median(rates[mode])
        events = ", ".join(sorted(rates.get(mode + " events", []))) or "-"
        print(f"{mode:22s} {med:9.0f} round trips/s  ratio {med / base:.3f}  sampler scope: {events}")
        print(f"bench_sampler: mode={mode.split()[0]} rate={med:.0f} ratio={med / base:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
