#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Cost of a traced CUDA call: a uprobe pair (`aiprof profile --method ebpf`) against
libaiprof's hook (`--method ptrace`), side by side on one loop of cudaStreamSynchronize()
on an idle stream of the fake runtime (tests/bench/sync_loop.c, ~50 ns a call).

The loop prints its ns per call every 50 ms; each method records it for a window, and the
figure is the median of the windows inside it against the median of the windows before
and after. This is why the launch hooks take the call stack in-process (README,
"GPU-launch flame graph"): an eBPF stack per launch would pay at least the uprobe pair.
Run as root: `/usr/bin/python3 tests/bench/bench_uprobe_vs_hook.py`.
"""
import json
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.path.join(ROOT, os.environ.get("BUILD", "build"))
AIPROF = os.path.join(BUILD, "aiprof")
LOOP = os.path.join(BUILD, "tests", "bench", "sync_loop")
WINDOW_S = 3


def main():
    if os.geteuid() != 0:
        print("bench_uprobe_vs_hook: needs root (uprobes, ptrace)", file=sys.stderr)
        return 2
    p = subprocess.Popen([LOOP, "60"], stdout=subprocess.PIPE, text=True)
    rates = []   # (t_ns, ns_per_call)
    pid = int(p.stdout.readline().split("pid=")[1])

    def reader():
        for line in p.stdout:
            if line.startswith("rate "):
                kv = dict(x.split("=") for x in line.split()[1:])
                rates.append((int(kv["t"]), float(kv["ns_per_call"])))

    th = threading.Thread(target=reader, daemon=True)
    th.start()
    results = {}
    try:
        for name, args in (("uprobe pair (--method ebpf)", ["--method", "ebpf"]),
                           ("libaiprof hook (--method ptrace)", ["--method", "ptrace"])):
            time.sleep(1.5)
            out = f"/tmp/aiprof-bench-uvh-{os.getpid()}-{len(results)}"
            t0 = time.monotonic_ns()
            r = subprocess.run([AIPROF, "profile", "--pid", str(pid), "-d", f"{WINDOW_S}s",
                                "--collectors", "cuda", "-o", out],
                               capture_output=True, text=True, timeout=300)
            if r.returncode != 0:
                print(r.stderr, file=sys.stderr)
                return 1
            with open(os.path.join(out, "summary.json")) as f:
                s = json.load(f)
            shutil.rmtree(out, ignore_errors=True)
            w0, w1 = s["window"]["start_monotonic_ns"], s["window"]["end_monotonic_ns"]
            # windows wholly inside the recording, and the second before the command
            inside = [v for t, v in rates if w0 + 1e8 < t < w1]
            before = [v for t, v in rates if t0 - 1.2e9 < t < t0]
            calls = sum(c["count"] for c in s.get("synchronization", []))
            results[name] = (statistics.median(before), statistics.median(inside),
                             calls / ((w1 - w0) / 1e9))
        time.sleep(1.0)
    finally:
        p.kill()
        p.wait()
    print("ns per cudaStreamSynchronize() on an idle stream (median of 50 ms windows)")
    for name, (before, inside, rate) in results.items():
        print(f"  {name:34s} {before:8.1f} before, {inside:8.1f} recording: {inside - before:+8.1f} ns "
              f"per call ({rate / 1e6:.2f} M calls/s recorded)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
