#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""What a profile costs real PyTorch jobs (issue 31), measured side by side in one run.

For each job of tests/workloads/real_jobs.py — a 2-rank DDP job over gloo, a DataLoader with
2 forked workers, a BLAS-bound step, an inference-style request loop over a local socket —
started once and left running (using both cores of this machine): PAIRS pairs of windows of
WINDOW seconds, one unprofiled and one under `aiprof profile` with the default collectors,
the order alternating from pair to pair. Per window: the job's iteration rate (its own
"it t= n=" lines) and the CPU time of its processes (the ranks, the loader's workers:
/proc/PID/stat of the job's process tree). Per profiled window, from summary.json's
ebpf.cost: the time the kernel charged to aiprof's BPF programs (run_time_ns, every program,
every CPU) as a share of the job's own CPU time in that window, and the programs' runs.

Printed per job: the median over pairs of rate(profiled)/rate(unprofiled), the median of the
CPU-time-per-iteration ratio, the median BPF share, the share of the window a budget paused
the off-CPU and syscall collectors, and the programs that cost most. With --burners N (make
bench runs 0 and 2), N `yes >/dev/null` processes run beside the job for the whole
measurement (started and stopped by their PIDs); --profile-args "--budget 1%" (make bench
runs it too) passes options to `aiprof profile`.

    /usr/bin/python3 tests/bench/bench_cost.py [--jobs ddp,loader,blas,serve] [--pairs 5]
                                                [--window 3] [--burners 0] [--profile-args A]
"""
import argparse
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
JOBS = os.path.join(ROOT, "tests", "workloads", "real_jobs.py")
PY = "/usr/bin/python3"


def tree_cpu_ns(roots):
    """CPU time (user + system) of the processes roots and all their descendants now."""
    kids, cpu = {}, {}
    hz = os.sysconf("SC_CLK_TCK")
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        kids.setdefault(int(fields[1]), []).append(int(d))
        cpu[int(d)] = (int(fields[11]) + int(fields[12])) * 1_000_000_000 // hz
    total, pending, seen = 0, list(roots), set()
    while pending:
        p = pending.pop()
        if p in seen:
            continue
        seen.add(p)
        total += cpu.get(p, 0)
        pending += kids.get(p, [])
    return total


class Job:
    def __init__(self, name, port, err):
        """err: where the job's stderr goes (a loader's workers complain when killed)."""
        self.name = name
        self.procs = []
        env = dict(os.environ)
        if name == "ddp":
            for rank in (1, 0):     # rank 0 reports; both are the job
                e = dict(env, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE="2",
                         RANK=str(rank), LOCAL_RANK=str(rank))
                self.procs.append(subprocess.Popen([PY, JOBS, "ddp"], env=e, text=True, stderr=err,
                                                   stdout=subprocess.PIPE if rank == 0 else subprocess.DEVNULL))
        else:
            self.procs.append(subprocess.Popen([PY, JOBS, name], text=True, stdout=subprocess.PIPE,
                                               stderr=err))
        self.reporter = self.procs[-1]
        line = self.reporter.stdout.readline()
        if not line.startswith("ready pid="):
            self.stop()
            err.seek(0)
            raise AssertionError(f"{name} did not start: {line!r} {err.read()[-2000:]}")
        os.set_blocking(self.reporter.stdout.fileno(), False)
        self.pids = [p.pid for p in self.procs]
        self.samples = []       # (t_ns, n)

    def drain(self):
        for line in self.reporter.stdout:
            if line.startswith("it "):
                kv = dict(x.split("=") for x in line.split()[1:])
                self.samples.append((int(kv["t"]), int(kv["n"])))

    def rate(self, t0, t1):
        self.drain()
        inside = [s for s in self.samples if t0 <= s[0] <= t1]
        if len(inside) < 2 or inside[-1][1] == inside[0][1]:
            return None, 0
        (a, na), (b, nb) = inside[0], inside[-1]
        return (nb - na) / ((b - a) / 1e9), nb - na

    def stop(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
            p.wait()


def window(job, seconds, profile, out, extra=()):
    """(iterations per second, job CPU ns per iteration, summary or None) of one window."""
    if not profile:
        c0, t0 = tree_cpu_ns(job.pids), time.monotonic_ns()
        time.sleep(seconds)
        c1, t1 = tree_cpu_ns(job.pids), time.monotonic_ns()
        s = None
    else:
        c0 = tree_cpu_ns(job.pids)
        r = subprocess.run([AIPROF, "profile", "--pid", ",".join(map(str, job.pids)), "-d", f"{seconds}s",
                            "-q", "-o", out, *extra], capture_output=True, text=True, timeout=300)
        c1 = tree_cpu_ns(job.pids)
        assert r.returncode == 0, r.stderr
        with open(os.path.join(out, "summary.json")) as f:
            s = json.load(f)
        t0, t1 = s["window"]["start_monotonic_ns"], s["window"]["end_monotonic_ns"]
    time.sleep(0.2)
    rate, n = job.rate(t0, t1)
    assert rate, f"{job.name}: no progress in the window"
    # the CPU read around the whole command when profiled: attach and artifacts included,
    # so the per-iteration figure leans against aiprof
    return rate, (c1 - c0) / max(n, 1), s


def bench(name, pairs, seconds, port, tmp, extra=()):
    err = open(os.path.join(tmp, f"{name}.stderr"), "w+")
    job = Job(name, port, err)
    rows = []
    try:
        time.sleep(2)           # warm: workers forked, gloo connected, caches filled
        for i in range(pairs):
            order = (False, True) if i % 2 == 0 else (True, False)
            got = {}
            for prof in order:
                got[prof] = window(job, seconds, prof, os.path.join(tmp, f"{name}-{i}"), extra)
            (r0, c0, _), (r1, c1, s) = got[False], got[True]
            cost = s["ebpf"].get("cost", {})
            rows.append((r1 / r0, c1 / c0, cost, s["ebpf"].get("budget")))
    finally:
        job.stop()
        err.close()
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", default="ddp,loader,blas,serve")
    ap.add_argument("--pairs", type=int, default=int(os.environ.get("BENCH_PAIRS", "5")))
    ap.add_argument("--window", type=float, default=float(os.environ.get("BENCH_WINDOW", "3")))
    ap.add_argument("--burners", type=int, default=0)
    ap.add_argument("--profile-args", default="", help="more `aiprof profile` options, e.g. '--budget 1%'")
    a = ap.parse_args()
    extra = a.profile_args.split()
    burners = [subprocess.Popen(["yes"], stdout=subprocess.DEVNULL) for _ in range(a.burners)]
    results = {}
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for k, name in enumerate(a.jobs.split(",")):
                results[name] = bench(name, a.pairs, a.window, 29640 + k, tmp, extra)
    finally:
        for b in burners:
            b.kill()
            b.wait()
    print(f"{a.pairs} pairs of {a.window:g} s windows per job, alternating; default collectors"
          f"{' with ' + a.profile_args if a.profile_args else ''}; {a.burners} CPU burner(s) beside")
    print(f"{'job':8} {'rate prof/unprof':>17} {'CPU/iter prof/unprof':>21} {'BPF share of job CPU':>21} "
          f"{'injector CPU/job CPU':>21} {'BPF runs/s':>11} {'paused':>10}  most costly programs")
    for name, rows in results.items():
        shares = [r[2].get("bpf_share_of_targets_cpu_ppm", 0) / 1e4 for r in rows if r[2].get("measured")]
        runs = [r[2]["bpf_runs"] / max(r[2]["window_s"], 1e-3) for r in rows if r[2].get("measured")]
        inj = [100 * r[2]["injector_cpu_s"] / r[2]["targets_cpu_s"] for r in rows
               if r[2].get("measured") and r[2].get("targets_cpu_s")]
        progs = {}
        for r in rows:
            for p in r[2].get("programs", []):
                progs[p["name"]] = progs.get(p["name"], 0) + p["ns"]
        paused = [100 * (r[3].get("paused_s") or 0) / max(r[2].get("window_s") or 0, 1e-3) for r in rows
                  if r[3] and r[3].get("set") and r[2].get("measured")]
        top = sorted(progs.items(), key=lambda x: -x[1])[:3]
        tot = sum(progs.values()) or 1
        print(f"{name:8} {statistics.median(r[0] for r in rows):17.4f} "
              f"{statistics.median(r[1] for r in rows):21.4f} "
              f"{(f'{statistics.median(shares):.2f}%' if shares else 'not measured'):>21} "
              f"{(f'{statistics.median(inj):.2f}%' if inj else '-'):>21} "
              f"{(statistics.median(runs) if runs else 0):11.0f} "
              f"{(f'{statistics.median(paused):.0f}%' if paused else 'no budget'):>10}  " +
              ", ".join(f"{n} {100 * v / tot:.0f}%" for n, v in top))
        print(f"bench_cost: job={name} burners={a.burners} rate_ratio={statistics.median(r[0] for r in rows):.4f} "
              f"bpf_share_pct={statistics.median(shares) if shares else -1:.3f} "
              f"injector_share_pct={statistics.median(inj) if inj else -1:.3f} "
              f"paused_pct={statistics.median(paused) if paused else -1:.1f} "
              f"rate_ratios={','.join(f'{r[0]:.3f}' for r in rows)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
