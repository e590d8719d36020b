#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""The injector's peak memory against the window's length (issue 13).

A target makes 100,000 hooked calls a second (tests/bench/sync_loop on the fake runtime);
`aiprof profile` records windows of growing length, with every collector (the library's and
the eBPF ones), inside a cgroup whose memory limit is 256 MiB, as an injector pod's would be.
Each must complete (not be OOM-killed); past the event budget events are summed, not kept
(summary.json event_budget), so every call shows up in the counts; and its peak RSS must not
grow with the window.

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


def make_cgroup(tag):
    """A memory cgroup limited to LIMIT: (procs file, peak reader, cleanup)."""
    name = f"aiprof-bench-mem-{os.getpid()}-{tag}"
    v1 = "/sys/fs/cgroup/memory"
    if os.path.isdir(v1):
        d = os.path.join(v1, name)
        os.mkdir(d)
        with open(os.path.join(d, "memory.limit_in_bytes"), "w") as f:
            f.write(str(LIMIT))
        peak = os.path.join(d, "memory.max_usage_in_bytes")
    else:
        d = os.path.join("/sys/fs/cgroup", name)
        os.mkdir(d)
        with open(os.path.join(d, "memory.max"), "w") as f:
            f.write(str(LIMIT))
        peak = os.path.join(d, "memory.peak")

    def read_peak():
        with open(peak) as f:
            return int(f.read()) / (1 << 20)
    return os.path.join(d, "cgroup.procs"), read_peak, lambda: os.rmdir(d)


def run_window(seconds, out):
    # its rate lines go to a file: a pipe nobody reads would stop it after a minute
    log = out + ".loop"
    procs_file, read_peak, cleanup = make_cgroup(seconds)
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
               f"--pid {loop.pid} -d {seconds}s -q -o {out}")
        r = subprocess.run(["sh", "-c", cmd], capture_output=True, text=True, timeout=seconds + 600)
        rss = [line for line in r.stderr.splitlines() if line.startswith("maxrss_kb=")]
        assert r.returncode == 0 and rss, f"window {seconds}s: exit {r.returncode}: {r.stderr[-2000:]}"
        with open(os.path.join(out, "summary.json")) as f:
            s = json.load(f)
        t = s["targets"][0]
        # nothing lost uncounted: every call the loop made is kept, summed or counted as dropped
        made = t["events"] + t["dropped_events"]
        assert made >= 0.9 * RATE * seconds, (seconds, t["events"], t["dropped_events"])
        kept = t["events"] - t["summed_events"]
        samples = sum(x.get("cpu_samples", 0) for x in s.get("ebpf", {}).get("targets", []))
        return (int(rss[-1].split("=")[1]) / 1024, read_peak(), kept, t["summed_events"],
                t["dropped_events"], samples)
    finally:
        loop.kill()
        loop.wait()
        cleanup()


def main():
    windows = [int(a) for a in sys.argv[1:]] or [5, 20, 60]
    rows = []
    with tempfile.TemporaryDirectory() as d:
        for w in windows:
            rows.append((w, *run_window(w, os.path.join(d, str(w)))))
    print(f"aiprof's memory against window length, {RATE} calls/s, memory limit {LIMIT >> 20} MiB")
    print(f"{'window s':>9} {'events kept':>12} {'summed':>12} {'dropped':>9} {'cpu samples':>12} "
          f"{'peak RSS MiB':>13} {'cgroup peak MiB':>16}")
    for w, rss, cg, kept, summed, dropped, samples in rows:
        print(f"{w:>9} {kept:>12} {summed:>12} {dropped:>9} {samples:>12} {rss:>13.1f} {cg:>16.1f}")
    print(f"longest / shortest window: peak RSS {rows[-1][1] / rows[0][1]:.2f}, "
          f"cgroup peak {rows[-1][2] / rows[0][2]:.2f}")
    print("(the cgroup peak is what the memory limit holds against: aiprof's pages and the "
          "kernel memory charged to it, the BPF maps among them)")


if __name__ == "__main__":
    main()
