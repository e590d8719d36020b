#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""The injector's peak memory against the window's length (issue 13).

A target makes 100,000 hooked calls a second (tests/bench/sync_loop on the fake runtime);
`aiprof profile` records windows of growing length inside a cgroup whose memory limit is
256 MiB, as an injector pod's would be. Each must complete (not be OOM-killed), count what
it could not keep in `dropped_events`, and its peak RSS must not grow with the window.

    /usr/bin/python3 tests/bench/bench_memory.py [WINDOW_S ...]     (default 5 20 60)
"""
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.path.join(ROOT, os.environ.get("BUILD", "build"))
AIPROF = os.path.join(BUILD, "aiprof")
LOOP = os.path.join(BUILD, "tests", "bench", "sync_loop")
LIMIT = 256 << 20
RATE = 100_000


def make_cgroup():
    """A memory cgroup limited to LIMIT: (procs file, cleanup)."""
    name = f"aiprof-bench-mem-{os.getpid()}"
    v1 = "/sys/fs/cgroup/memory"
    if os.path.isdir(v1):
        d = os.path.join(v1, name)
        os.mkdir(d)
        with open(os.path.join(d, "memory.limit_in_bytes"), "w") as f:
            f.write(str(LIMIT))
    else:
        d = os.path.join("/sys/fs/cgroup", name)
        os.mkdir(d)
        with open(os.path.join(d, "memory.max"), "w") as f:
            f.write(str(LIMIT))
    return os.path.join(d, "cgroup.procs"), lambda: os.rmdir(d)


def run_window(procs_file, seconds, out):
    # its rate lines go to a file: a pipe nobody reads would stop it after a minute
    log = out + ".loop"
    with open(log, "w") as f:
        loop = subprocess.Popen([LOOP, str(seconds + 60), str(RATE)], stdout=f)
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            with open(log) as f:
                if f.readline().startswith("ready"):
                    break
            time.sleep(0.05)
        time.sleep(0.5)
        cmd = (f"echo $$ > {procs_file} && exec /usr/bin/time -f 'maxrss_kb=%M' {AIPROF} profile "
               f"--pid {loop.pid} -d {seconds}s --no-ebpf -q -o {out}")
        r = subprocess.run(["sh", "-c", cmd], capture_output=True, text=True, timeout=seconds + 600)
        rss = [line for line in r.stderr.splitlines() if line.startswith("maxrss_kb=")]
        assert r.returncode == 0 and rss, f"window {seconds}s: exit {r.returncode}: {r.stderr[-2000:]}"
        with open(os.path.join(out, "summary.json")) as f:
            t = json.load(f)["targets"][0]
        # nothing lost uncounted: every call the loop made is kept or counted as dropped
        made = t["events"] + t["dropped_events"]
        assert made >= 0.9 * RATE * seconds, (seconds, t["events"], t["dropped_events"])
        return int(rss[-1].split("=")[1]) / 1024, t["events"], t["dropped_events"]
    finally:
        loop.kill()
        loop.wait()


def main():
    windows = [int(a) for a in sys.argv[1:]] or [5, 20, 60]
    procs_file, cleanup = make_cgroup()
    rows = []
    try:
        with tempfile.TemporaryDirectory() as d:
            for w in windows:
                rows.append((w, *run_window(procs_file, w, os.path.join(d, str(w)))))
    finally:
        cleanup()
    print(f"aiprof peak RSS against window length, {RATE} calls/s, memory limit {LIMIT >> 20} MiB")
    print(f"{'window s':>9} {'events kept':>12} {'dropped':>12} {'peak RSS MiB':>13}")
    for w, rss, kept, dropped in rows:
        print(f"{w:>9} {kept:>12} {dropped:>12} {rss:>13.1f}")
    print(f"peak RSS, longest / shortest window: {rows[-1][1] / rows[0][1]:.2f}")


if __name__ == "__main__":
    main()
