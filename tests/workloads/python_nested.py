# SPDX-License-Identifier: MIT
"""Workload for Python frames: outer() -> middle() -> inner(), the time spent in inner().

Prints "ready pid=N" and runs for --seconds (default 60). With --report, prints
"rate t=<CLOCK_MONOTONIC ns> iters=<total> cpu=<process CPU ns>" every 100 ms, for
throughput benchmarks;
--io adds a small file write + read per iteration and --sleep-every N a 1 ms sleep every N
iterations, so that the syscall and off-CPU collectors have work too.
"""
import argparse
import os
import tempfile
import time


def inner(n):
    s = 0
    for i in range(n):
        s += i * i
    return s


def middle(n):
    return inner(n)


def outer(n):
    return middle(n)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=60)
    ap.add_argument("--work", type=int, default=20000)
    ap.add_argument("--report", action="store_true")
    ap.add_argument("--io", action="store_true")
    ap.add_argument("--sleep-every", type=int, default=0)
    a = ap.parse_args()
    fd = None
    if a.io:
        fd, _path = tempfile.mkstemp(prefix="aiprof-bench-")
        os.unlink(_path)
    print(f"ready pid={os.getpid()}", flush=True)
    end = time.monotonic() + a.seconds
    iters = 0
    next_report = time.monotonic_ns() + 100_000_000
    while time.monotonic() < end:
        outer(a.work)
        iters += 1
        if fd is not None:
            os.pwrite(fd, b"x" * 4096, 0)
            os.pread(fd, 4096, 0)
        if a.sleep_every and iters % a.sleep_every == 0:
            time.sleep(0.001)
        if a.report:
            now = time.monotonic_ns()
            if now >= next_report:
                print(f"rate t={now} iters={iters} cpu={time.process_time_ns()}", flush=True)
                next_report = now + 100_000_000


if __name__ == "__main__":
    main()
