#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Benchmarks of live injection, measured side by side in one run.

1. ptrace stop time per injection: inject into fresh trainers, read `stopped_us` from
   summary.json (aiprof measures it around every ptrace stop of the target's thread).
2. step-time ratio profiled/unprofiled: two trainers run at the same time, one of them
   profiled for its whole run; then the roles swap. The ratio of mean step times is
   computed per pair and the median reported, so machine noise hits both sides alike.
"""
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
TRAINER = os.path.join(BUILD, "tests", "workloads", "trainer")


def start_trainer(*args):
    p = subprocess.Popen([TRAINER, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    assert line.startswith("ready"), line
    return p, int(line.split("pid=")[1].split()[0])


def step_ms(p):
    out, err = p.communicate(timeout=300)
    assert p.returncode == 0, err
    for line in (out + err).splitlines():
        if line.startswith("step_ms_mean="):
            return float(line.split("=")[1])
    raise AssertionError("no step_ms_mean")


def stop_times(n):
    res = []
    with tempfile.TemporaryDirectory() as d:
        for i in range(n):
            p, pid = start_trainer("--ranks", "2", "--run-seconds", "30")
            try:
                r = subprocess.run([AIPROF, "profile", "--pid", str(pid), "-d", "100ms", "-q",
                                    "-o", f"{d}/{i}"], capture_output=True, text=True, timeout=60)
                assert r.returncode == 0, r.stderr
                with open(f"{d}/{i}/summary.json") as f:
                    res.append(json.load(f)["targets"][0]["stopped_us"])
            finally:
                p.kill()
                p.wait()
    return res


def step_ratio(pairs, steps, extra=()):
    ratios = []
    with tempfile.TemporaryDirectory() as d:
        for i in range(pairs):
            a, apid = start_trainer("--ranks", "2", "--steps", str(steps))
            b, bpid = start_trainer("--ranks", "2", "--steps", str(steps))
            profiled, plain, ppid = (a, b, apid) if i % 2 == 0 else (b, a, bpid)
            prof = subprocess.Popen([AIPROF, "profile", "--pid", str(ppid), "-d", "600s", "-q",
                                     *extra, "-o", f"{d}/{i}"], stdout=subprocess.DEVNULL,
                                    stderr=subprocess.PIPE, text=True)
            t_plain, t_prof = step_ms(plain), step_ms(profiled)
            prof.terminate()  # ends the window early; artifacts are still written
            prof.wait(timeout=120)
            ratios.append(t_prof / t_plain)
    return ratios


def main():
    n = int(os.environ.get("BENCH_INJECTIONS", "10"))
    st = stop_times(n)
    print(f"ptrace stop per injection: median {statistics.median(st):.0f} us, "
          f"max {max(st):.0f} us over {n} injections (target <= 5000 us)")
    pairs = int(os.environ.get("BENCH_PAIRS", "4"))
    steps = int(os.environ.get("BENCH_STEPS", "150"))
    for label, extra in (("library only (--no-ebpf)", ("--no-ebpf",)),
                         ("library + all eBPF collectors", ())):
        r = step_ratio(pairs, steps, extra)
        print(f"trainer step time profiled/unprofiled, {label}: median ratio "
              f"{statistics.median(r):.4f} over {pairs} side-by-side pairs "
              f"({', '.join(f'{x:.4f}' for x in r)}) (target <= 1.01)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
