#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""What unwinding by CFI costs a training loop, measured side by side in one run.

A real PyTorch training loop (tests/bench/torch_steps.py, Debian's python3-torch, one
thread, pinned to the last CPU) reports its step time every 20 steps. It is recorded round
after round with `--collectors cpu,offcpu,python` at 99 Hz, once with `--unwind fp` and once
with the default `--unwind cfi` (aiprof pinned to the first CPU), with an idle gap of the
same length before each; the order of the two alternates between rounds.

    ratio = step time inside the cfi windows / inside the fp windows   (target: <= 1.01)

(step time: the 20th percentile of the 20-step batches in the windows of a mode, since
other load on the machine only ever makes a batch slower; the ratio to the idle gaps is
printed too). The cfi windows share their unwind rules through a cache directory of the
run's own (cold in the first round, as for the first injector on a node, warm after). Then
what the tables cost: summary.json's unwinding.tables of the last cfi window, aiprof's peak
RSS with each method, and its peak private memory (Pss_Anon and Private_Dirty of
/proc/PID/smaps_rollup, read every 50 ms) with `--unwind-cache none` next to a warm cache
directory: what each further injector on a node costs.

Run as root: `/usr/bin/python3 tests/bench/bench_unwind.py [--rounds 4] [--window 3]`.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.path.join(ROOT, os.environ.get("BUILD", "build"))
AIPROF = os.path.join(BUILD, "aiprof")
STEPS = os.path.join(ROOT, "tests", "bench", "torch_steps.py")
MODES = {"fp": ["--unwind", "fp"], "cfi": []}   # cfi: --unwind-cache added in main()


class Steps:
    def __init__(self, cpu):
        self.p = subprocess.Popen(["/usr/bin/python3", "-u", STEPS], stdout=subprocess.PIPE,
                                  text=True, preexec_fn=lambda: os.sched_setaffinity(0, {cpu}))
        line = self.p.stdout.readline()
        assert line.startswith("ready pid="), line
        self.pid = int(line.split("=")[1])
        self.samples = []   # (t_ns, ns per step)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.p.stdout:
            kv = dict(x.split("=") for x in line.split()[1:])
            self.samples.append((int(kv["t"]), int(kv["ns"]) / int(kv["n"])))

    def between(self, t0, t1):
        return [v for t, v in self.samples if t0 <= t <= t1]

    def stop(self):
        self.p.kill()
        self.p.wait()


def p20(v):
    v = sorted(v)
    return v[len(v) // 5] if v else float("nan")


def record(pid, mode, window, out):
    t0 = time.monotonic_ns()
    p = subprocess.Popen([AIPROF, "profile", "--pid", str(pid), "--duration", f"{window}s",
                          "--collectors", "cpu,offcpu,python", "-o", out, "-q"] + MODES[mode],
                         stdout=subprocess.DEVNULL, preexec_fn=lambda: os.sched_setaffinity(0, {0}))
    _, status, ru = os.wait4(p.pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, status
    with open(os.path.join(out, "summary.json")) as f:
        s = json.load(f)
    return t0, time.monotonic_ns(), s, ru.ru_maxrss


def private_memory(pid, window, extra, out):
    """aiprof's peak Pss_Anon and Private_Dirty (KiB), read every 50 ms while it runs."""
    p = subprocess.Popen([AIPROF, "profile", "--pid", str(pid), "--duration", f"{window}s",
                          "--collectors", "cpu,offcpu,python", "-o", out, "-q"] + extra,
                         stdout=subprocess.DEVNULL, preexec_fn=lambda: os.sched_setaffinity(0, {0}))
    mem = {"Pss_Anon": 0, "Private_Dirty": 0}
    while p.poll() is None:
        try:
            with open(f"/proc/{p.pid}/smaps_rollup") as f:
                for line in f:
                    k, _, v = line.partition(":")
                    if k in mem:
                        mem[k] = max(mem[k], int(v.split()[0]))
        except (ProcessLookupError, FileNotFoundError):
            break
        time.sleep(0.05)
    assert p.wait() == 0
    return mem


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--window", type=float, default=3)
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("bench_unwind: run as root")
    if not os.path.exists("/usr/lib/python3/dist-packages/torch/__init__.py"):
        print("bench_unwind: skipped (needs Debian's python3-torch)")
        return 0
    ncpu = os.cpu_count() or 1
    st = Steps(ncpu - 1)
    tmp = tempfile.mkdtemp(prefix="bench-unwind-")
    cache = os.path.join(tmp, "unwind-cache")
    MODES["cfi"] = ["--unwind-cache", cache]
    MODES["fp"] = MODES["fp"] + ["--unwind-cache", "none"]
    inside = {m: [] for m in MODES}
    idle, rss, last = [], {m: 0 for m in MODES}, None
    try:
        time.sleep(2)   # warm-up
        for r in range(args.rounds):
            order = ["fp", "cfi"] if r % 2 == 0 else ["cfi", "fp"]
            for mode in order:
                g0 = time.monotonic_ns()
                time.sleep(args.window)
                idle += st.between(g0, time.monotonic_ns())
                out = os.path.join(tmp, f"{mode}-{r}")
                t0, t1, s, maxrss = record(st.pid, mode, args.window, out)
                # the window is inside [t0, t1]: attach and artifacts add a little either side
                inside[mode] += st.between(t0 + int(0.3e9), t1 - int(0.3e9))
                rss[mode] = max(rss[mode], maxrss)
                if mode == "cfi":
                    last = s["ebpf"]
        mem = {name: private_memory(st.pid, args.window, ["--unwind-cache", where],
                                    os.path.join(tmp, f"mem-{name}"))
               for name, where in (("unshared", "none"), ("shared", cache))}
    finally:
        st.stop()
    fp, cfi, base = p20(inside["fp"]), p20(inside["cfi"]), p20(idle)
    print(f"step time (p20 of 20-step batches): idle {base / 1e3:.1f} us, --unwind fp "
          f"{fp / 1e3:.1f} us, --unwind cfi {cfi / 1e3:.1f} us "
          f"({len(inside['fp'])}/{len(inside['cfi'])} batches)")
    print(f"ratio cfi/fp {cfi / fp:.3f} (target <= 1.01); cfi/idle {cfi / base:.3f}, "
          f"fp/idle {fp / base:.3f}; medians: cfi/fp "
          f"{statistics.median(inside['cfi']) / statistics.median(inside['fp']):.3f}")
    uw = last["unwinding"]
    t = uw["tables"]
    print(f"unwinding: {uw['stacks_cfi']} stacks by CFI, ends {uw['ends']}; "
          f"truncated_stack_share {last['truncated_stack_share']:.3f}")
    print(f"tables: {t['modules']} modules, CFI sections {t['cfi_section_bytes'] / 2**20:.1f} "
          f"MiB read, {t['frames_cached']} frames cached in "
          f"{t['frames_cache_bytes'] / 1024:.0f} KiB (at most {t['frames_cache_max']}); "
          f"aiprof peak RSS fp {rss['fp'] / 1024:.0f} MiB, cfi {rss['cfi'] / 1024:.0f} MiB")
    sh = t["shared"]
    print(f"shared rules ({sh['files']} files, {sh['images']} .eh_frame images of "
          f"{sh['image_bytes'] / 2**20:.1f} MiB): {sh['hits']} hits, {sh['misses']} misses; "
          f"modules decoded {t['modules_decoded']}, of them from the shared images "
          f"{t['modules_from_shared_image']}")
    u, w = mem["unshared"], mem["shared"]
    print(f"aiprof peak private memory, cfi: --unwind-cache none Pss_Anon "
          f"{u['Pss_Anon'] / 1024:.1f} MiB, Private_Dirty {u['Private_Dirty'] / 1024:.1f} MiB; "
          f"warm shared cache Pss_Anon {w['Pss_Anon'] / 1024:.1f} MiB, Private_Dirty "
          f"{w['Private_Dirty'] / 1024:.1f} MiB (ratio {w['Pss_Anon'] / u['Pss_Anon']:.2f})")
    # the artifacts a window of this training loop leaves, pprof's beside the folded text
    out = os.path.join(tmp, f"cfi-{args.rounds - 1}")
    sizes = {f: os.path.getsize(os.path.join(out, f)) for f in
             ("profile.pb.gz", "stacks.folded", "offcpu.folded", "stacks.json")
             if os.path.exists(os.path.join(out, f))}
    print("artifact sizes of a %.0f s window: %s" % (args.window, ", ".join(
        f"{f} {n / 1024:.1f} KiB" for f, n in sizes.items())))
    subprocess.run(["rm", "-rf", tmp])
    return 0


if __name__ == "__main__":
    sys.exit(main())
