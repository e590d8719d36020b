#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""aiprof's CPU sampler side by side with the field's reference (issue 31): the same real
PyTorch job (tests/workloads/real_jobs.py), the same rate (99 Hz), in one run:

  none    the job alone
  aiprof  `aiprof profile --collectors cpu,python` (eBPF only: the on-CPU sampler, user
          stacks unwound by CFI from a stack copy, Python frames)
  perf    `perf record -F 99 -g --call-graph dwarf` (Debian's linux-perf: an 8 KiB stack
          copy per sample, unwound by perf report/script afterwards)

ROUNDS rounds of three windows of WINDOW seconds, the order rotating from round to round.
Per profiled window: the job's rate against the unprofiled window of the same round, the
job's CPU per iteration against it, and the profiler's own CPU (aiprof: the injector's CPU
and the BPF time from summary.json's ebpf.cost; perf: the perf record process's CPU, read
from its rusage). Completeness: the share of the samples' native stacks that reach the
thread's first frame (aiprof: 1 - summary.json's truncated_stack_share; perf: the stacks
`perf script` prints whose outermost frame is _start, __libc_start_main, start_thread or
clone). Printed: the medians, and the overhead ratio aiprof / perf (overhead: the job's
extra CPU per iteration plus the profiler's own CPU, as a share of the job's CPU).

    /usr/bin/python3 tests/bench/bench_perf.py [--jobs blas,ddp] [--rounds 5] [--window 3]
"""
import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
from bench_cost import AIPROF, Job, tree_cpu_ns  # noqa: E402

ROOTS = ("_start", "__libc_start_main", "__libc_start_call_main", "start_thread", "clone",
         "clone3", "__clone3", "__GI___clone3", "__clone")


def perf_stacks_whole(data):
    """(stacks, whole) from `perf script` of a perf.data: the native stacks of the samples
    and how many end in a thread's first frame."""
    r = subprocess.run(["perf", "script", "-i", data, "-F", "tid,ip,sym"], capture_output=True,
                       text=True, timeout=600)
    stacks = whole = 0
    last = None
    for line in r.stdout.splitlines() + [""]:
        s = line.strip()
        if not s:
            if last is not None:
                stacks += 1
                whole += any(last == x or last.startswith(x + "+") for x in ROOTS)
            last = None
            continue
        parts = s.split(None, 1)
        if len(parts) == 2 and all(c in "0123456789abcdef" for c in parts[0]):
            last = parts[1].split(" (")[0]
        elif last is None:
            last = ""       # the sample's header line: a stack follows
    return stacks, whole


def window(job, kind, seconds, tmp):
    """(rate, CPU ns per iteration, profiler CPU ns, completeness or None)."""
    pids = ",".join(map(str, job.pids))
    c0 = tree_cpu_ns(job.pids)
    prof_cpu, whole = 0, None
    if kind == "none":
        t0 = time.monotonic_ns()
        time.sleep(seconds)
        t1 = time.monotonic_ns()
    elif kind == "aiprof":
        out = os.path.join(tmp, f"a{time.monotonic_ns()}")
        r = subprocess.run([AIPROF, "profile", "--pid", pids, "-d", f"{seconds}s", "-q",
                            "--collectors", "cpu,python", "--frequency", "99", "-o", out],
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        with open(os.path.join(out, "summary.json")) as f:
            s = json.load(f)
        t0, t1 = s["window"]["start_monotonic_ns"], s["window"]["end_monotonic_ns"]
        cost = s["ebpf"]["cost"]
        prof_cpu = int((cost.get("injector_cpu_s", 0) + cost.get("bpf_cpu_s", 0)) * 1e9)
        whole = 1 - s["ebpf"]["truncated_stack_share"]
        shutil.rmtree(out, ignore_errors=True)
    else:
        data = os.path.join(tmp, "perf.data")
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.monotonic_ns()
        r = subprocess.run(["perf", "record", "-q", "-F", "99", "-g", "--call-graph", "dwarf",
                            "-p", pids, "-o", data, "--", "sleep", str(seconds)],
                           capture_output=True, text=True, timeout=300)
        t1 = time.monotonic_ns()
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        assert r.returncode == 0, r.stderr
        prof_cpu = int(((after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)) * 1e9)
        n, w = perf_stacks_whole(data)
        whole = w / n if n else 0
        os.unlink(data)
    c1 = tree_cpu_ns(job.pids)
    time.sleep(0.2)
    rate, n = job.rate(t0, t1)
    assert rate, f"{job.name}: no progress in the {kind} window"
    return rate, (c1 - c0) / max(n, 1), prof_cpu, (c1 - c0), whole


def bench(name, rounds, seconds, port, tmp):
    err = open(os.path.join(tmp, f"{name}.stderr"), "w+")
    job = Job(name, port, err)
    kinds = ["none", "aiprof", "perf"]
    res = {"aiprof": [], "perf": []}
    try:
        time.sleep(2)
        for i in range(rounds):
            order = kinds[i % 3:] + kinds[:i % 3]
            got = {k: window(job, k, seconds, tmp) for k in order}
            r0, c0 = got["none"][0], got["none"][1]
            for k in ("aiprof", "perf"):
                rate, cpi, pcpu, jcpu, whole = got[k]
                overhead = (cpi - c0) / c0 + pcpu / max(jcpu, 1)
                res[k].append((rate / r0, cpi / c0, pcpu / max(jcpu, 1), overhead, whole))
    finally:
        job.stop()
        err.close()
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", default="blas,ddp")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--window", type=float, default=3)
    a = ap.parse_args()
    if not shutil.which("perf"):
        print("bench_perf: perf is missing (Debian's linux-perf): not run")
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        results = {name: bench(name, a.rounds, a.window, 29660 + k, tmp)
                   for k, name in enumerate(a.jobs.split(","))}
    print(f"{a.rounds} rounds of 3 windows of {a.window:g} s per job (none, aiprof, perf; the "
          f"order rotating), 99 Hz; medians")
    print(f"{'job':6} {'profiler':8} {'rate ratio':>10} {'CPU/iter ratio':>15} {'profiler CPU/job':>17} "
          f"{'overhead':>9} {'whole stacks':>13}")
    for name, res in results.items():
        med = {k: [statistics.median(r[i] for r in v) for i in range(5)] for k, v in res.items()}
        for k, m in med.items():
            print(f"{name:6} {k:8} {m[0]:10.4f} {m[1]:15.4f} {100 * m[2]:16.2f}% {100 * m[3]:8.2f}% "
                  f"{100 * m[4]:12.1f}%")
        ratio = med["aiprof"][3] / med["perf"][3] if med["perf"][3] > 0 else float("nan")
        print(f"bench_perf: job={name} overhead_aiprof_pct={100 * med['aiprof'][3]:.2f} "
              f"overhead_perf_pct={100 * med['perf'][3]:.2f} ratio={ratio:.3f} "
              f"whole_aiprof_pct={100 * med['aiprof'][4]:.1f} whole_perf_pct={100 * med['perf'][4]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
