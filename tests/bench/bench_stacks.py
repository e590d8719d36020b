#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""How long `aiprof stacks` takes on a quiet Python process (issue 32: under 150 ms, median
of 5), and where it goes, side by side in one run.

A Python process with 11 threads (the main one and 10 asleep in time.sleep) is read ROUNDS
times each way, alternating: `aiprof stacks --format json` with CFI unwinding (the default)
and with frame pointers only (--unwind fp). Printed per way: the median wall time of the
command (start to exit, the BPF programs' load included), the median of its own "took_us"
(the read: the iterator, the Python frames, the symbols), its CPU time, and the median wall
time as a share of the 150 ms goal.

    /usr/bin/python3 tests/bench/bench_stacks.py [--rounds 5] [--threads 11]
"""
import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
AIPROF = os.path.join(ROOT, os.environ.get("BUILD", "build"), "aiprof")
GOAL_MS = 150.0
QUIET = """
import os, sys, threading, time
for i in range(int(sys.argv[1]) - 1):
    threading.Thread(target=time.sleep, args=(3600,), daemon=True).start()
print("ready pid=%d" % os.getpid(), flush=True)
time.sleep(3600)
"""


def child_cpu_s():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def one(pid, extra):
    c0, t0 = child_cpu_s(), time.monotonic()
    r = subprocess.run([AIPROF, "stacks", "--pid", str(pid), "--format", "json"] + extra,
                       capture_output=True, text=True)
    wall, cpu = time.monotonic() - t0, child_cpu_s() - c0
    if r.returncode != 0:
        sys.exit(f"aiprof stacks failed: {r.stderr}")
    d = json.loads(r.stdout)
    return wall * 1e3, d["took_us"] / 1e3, cpu * 1e3, len(d["processes"][0]["threads"])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=11)
    a = ap.parse_args()
    p = subprocess.Popen(["/usr/bin/python3", "-c", QUIET, str(a.threads)],
                         stdout=subprocess.PIPE, text=True)
    try:
        pid = int(p.stdout.readline().split("pid=")[1])
        time.sleep(0.5)
        ways = {"cfi": [], "fp": ["--unwind", "fp"]}
        res = {w: [] for w in ways}
        one(pid, [])    # the unwind cache warm, as on a node that ran aiprof before
        for i in range(a.rounds):
            order = list(ways) if i % 2 == 0 else list(ways)[::-1]
            for w in order:
                res[w].append(one(pid, ways[w]))
        print(f"aiprof stacks of a quiet Python process with {a.threads} threads, "
              f"{a.rounds} rounds (medians):")
        print("  unwinding   wall ms   read (took) ms   CPU ms   threads   wall / 150 ms goal")
        for w, v in res.items():
            wall = statistics.median(x[0] for x in v)
            print(f"  {w:<10} {wall:8.1f} {statistics.median(x[1] for x in v):16.1f} "
                  f"{statistics.median(x[2] for x in v):8.1f} {v[0][3]:9d} {wall / GOAL_MS:20.2f}")
    finally:
        p.kill()
        p.wait()


if __name__ == "__main__":
    main()
