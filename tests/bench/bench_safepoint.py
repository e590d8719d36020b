#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""What judging safe points from the whole stack costs an injection, measured side by side.

Fresh real Python processes (tests/workloads/py_waiters.py: three threads blocked in
clock_nanosleep, a futex and pause) and real PyTorch ones past their import
(tests/workloads/torch_startup.py) are injected; `stopped_us` (the time aiprof held the
target's thread stopped, over every stop) and `safe_point_attempts` come from summary.json.
With BASELINE_BUILD=DIR (another build of aiprof, say the commit before), the two builds
inject alternately into identical fresh processes and the ratio of their medians is printed.

    BUILD=build BASELINE_BUILD=/tmp/old/build /usr/bin/python3 tests/bench/bench_safepoint.py 12
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
BASE = os.environ.get("BASELINE_BUILD")
PY = "/usr/bin/python3"
WORK = os.path.join(ROOT, "tests", "workloads")
KINDS = {
    "python, 3 blocked threads": ([PY, os.path.join(WORK, "py_waiters.py")], "ready", 0.3),
    "torch, training": ([PY, os.path.join(WORK, "torch_startup.py"), "--steps", "100000"], None, 3.0),
}


def inject(build, argv, ready, settle, out):
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        if ready:
            assert p.stdout.readline().startswith(ready)
        time.sleep(settle)
        r = subprocess.run([os.path.join(build, "aiprof"), "profile", "--pid", str(p.pid), "-d",
                            "200ms", "-q", "--no-ebpf", "-o", out], capture_output=True, text=True,
                           env=dict(os.environ, AIPROF_LIB=os.path.join(build, "libaiprof.so")))
        assert r.returncode == 0, r.stderr
        with open(os.path.join(out, "summary.json")) as f:
            t = json.load(f)["targets"][0]
        return t["stopped_us"], t["safe_point_attempts"]
    finally:
        p.kill()
        p.wait()


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 8
    builds = [("this build", BUILD)] + ([("baseline", BASE)] if BASE else [])
    with tempfile.TemporaryDirectory() as tmp:
        for kind, (argv, ready, settle) in KINDS.items():
            res = {name: [] for name, _ in builds}
            att = {name: [] for name, _ in builds}
            for i in range(n):
                for name, b in (builds if i % 2 == 0 else builds[::-1]):
                    us, a = inject(b, argv, ready, settle, os.path.join(tmp, f"{name}{i}"))
                    res[name].append(us)
                    att[name].append(a)
            line = [f"{kind}:"]
            for name, _ in builds:
                line.append(f"{name} stop median {statistics.median(res[name]):.0f} us "
                            f"(attempts median {statistics.median(att[name]):.0f})")
            if BASE:
                line.append(f"ratio {statistics.median(res['this build']) / statistics.median(res['baseline']):.2f}")
            print("  ".join(line), flush=True)


if __name__ == "__main__":
    main()
