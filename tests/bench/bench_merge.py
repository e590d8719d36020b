#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""`aiprof merge` for 1, 2 and 4 ranks: N one-rank trainer processes (fake CUDA/NCCL), each
profiled by its own `aiprof profile --pid` for WINDOW seconds (all at once, as one injector
per pod), then merged (median of 3 runs). Prints, per N (and for 2 ranks of the launch-heavy
trainer, --fault small-kernels, for large timelines): the events merged, the merge's wall
and CPU time and its throughput per CPU second, the merge time as a share of the window, the
residual skew (p50/max, each rank's collective end against the others' median end) and, since
all ranks share this machine's clock, the largest recovered offset (truth: 0). The trainers
load the (fake) CUPTI, so the merge aligns on the collectives' GPU kernel ends; beside it, the
same ranks merged with their kernel records removed (the host-call-end fallback): skew p50 and
max |offset| on that basis.

    BUILD=build /usr/bin/python3 tests/bench/bench_merge.py [--window 5] [--ranks 1,2,4]
Run as root (ptrace). Every process it starts is stopped by PID."""
import argparse
import gzip
import json
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.path.join(ROOT, os.environ.get("BUILD", "build"))
AIPROF = os.path.join(BUILD, "aiprof")
TRAINER = os.path.join(BUILD, "tests", "workloads", "trainer")


def start_ranks(base, n, extra=()):
    procs = [subprocess.Popen([TRAINER, "--rank", str(i), "--world", str(n), "--nccl-id-file",
                               os.path.join(base, "nccl-id"), "--run-seconds", "120", "--cupti", *extra],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
             for i in range(n)]
    pids = []
    for p in procs:
        for line in p.stdout:
            if line.startswith("ready pid="):
                pids.append(int(line.split("=")[1]))
                break
        else:
            raise SystemExit(f"trainer did not start (rc={p.poll()})")
    return procs, pids


def stop(procs):
    for p in procs:
        if p.poll() is None:
            os.kill(p.pid, signal.SIGKILL)
        p.wait()
        if p.stdout:
            p.stdout.close()


def profile(base, pids, window):
    profs = [subprocess.Popen([AIPROF, "profile", "--pid", str(pid), "-d", f"{window}s", "-q", "--no-ebpf",
                               "-o", os.path.join(base, f"rank{i}")],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
             for i, pid in enumerate(pids)]
    for p in profs:
        _, err = p.communicate(timeout=300)
        if p.returncode != 0:
            raise SystemExit(f"aiprof profile failed: {err}")
    return [os.path.join(base, f"rank{i}") for i in range(len(pids))]


def merge_once(base, dirs, k):
    out = os.path.join(base, f"merged{k}")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    r = subprocess.run([AIPROF, "merge", "-q", "-o", out, *dirs], capture_output=True, text=True)
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if r.returncode != 0:
        raise SystemExit(f"aiprof merge failed: {r.stderr}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    with open(os.path.join(out, "summary.json")) as f:
        return wall, cpu, json.load(f), os.path.getsize(os.path.join(out, "timeline.json.gz"))


def without_kernels(base, dirs):
    """Copies of the rank folders without GPU kernel records (ranks without CUPTI)."""
    out = []
    for i, d in enumerate(dirs):
        dst = os.path.join(base, f"host{i}")
        shutil.copytree(d, dst)
        with gzip.open(os.path.join(d, "timeline.json.gz"), "rt") as f:
            tl = json.load(f)
        tl["traceEvents"] = [e for e in tl["traceEvents"] if e.get("cat") != "cuda_kernel"]
        with gzip.open(os.path.join(dst, "timeline.json.gz"), "wt") as f:
            json.dump(tl, f)
        out.append(dst)
    return out


def events_in(dirs):
    n = 0
    for d in dirs:
        with open(os.path.join(d, "summary.json")) as f:
            s = json.load(f)
        n += s["timeline"]["events_written"]
    return n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--window", type=float, default=5.0)
    ap.add_argument("--ranks", default="1,2,4")
    a = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("bench_merge: run as root (ptrace)")
    print(f"bench_merge: {a.window:g} s windows, trainer ranks as processes, {os.cpu_count()} CPUs")
    print(f"{'ranks':>5} {'events':>8} {'merge wall s':>12} {'merge CPU s':>11} {'M ev/CPU s':>10} "
          f"{'% of window':>11} {'basis':>14} {'skew p50 us':>11} {'skew max us':>11} {'max |offset| us':>15} "
          f"{'host-end skew p50 us':>20} {'host-end max |offset| us':>24}")
    cases = [(int(x), "", ()) for x in a.ranks.split(",")]
    cases.append((2, " launch-heavy", ("--fault", "small-kernels")))
    for n, label, extra in cases:
        base = tempfile.mkdtemp(prefix=f"aiprof-bench-merge-{n}-")
        procs = []
        try:
            procs, pids = start_ranks(base, n, extra)
            dirs = profile(base, pids, a.window)
            stop(procs)
            procs = []
            runs = [merge_once(base, dirs, k) for k in range(3)]
            wall = statistics.median(r[0] for r in runs)
            cpu = statistics.median(r[1] for r in runs)
            s = runs[0][2]
            ev = events_in(dirs)
            skew = s["alignment"]["residual_skew_us"]
            off = max(abs(x["offset_us"]) for x in s["ranks"])
            p50 = f"{skew['p50']:.1f}" if skew["collectives"] else "n/a"
            mx = f"{skew['max']:.1f}" if skew["collectives"] else "n/a"
            h = merge_once(base, without_kernels(base, dirs), "host")[2]
            hskew = h["alignment"]["residual_skew_us"]
            hp50 = f"{hskew['p50']:.1f}" if hskew["collectives"] else "n/a"
            hoff = max(abs(x["offset_us"]) for x in h["ranks"])
            print(f"{n:>5} {ev:>8} {wall:>12.3f} {cpu:>11.3f} {ev / max(cpu, 1e-6) / 1e6:>10.2f} "
                  f"{100 * wall / a.window:>10.1f}% {s['alignment']['basis']:>14} {p50:>11} {mx:>11} {off:>15.1f} "
                  f"{hp50:>20} {hoff:>24.1f}{label}")
            sys.stdout.flush()
        finally:
            stop(procs)
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
