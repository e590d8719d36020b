#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The check on a real GPU: profiles tests/gpu/gpu_train live with `aiprof profile` and
checks what only a real GPU, driver, CUPTI and NCCL can show (tests/gpu/README.md).

    python3 tests/gpu/gpu_check.py [--build DIR] [--out DIR]

One line per check ("PASS name: ...", "FAIL name: ...", "SKIP name: ..."), then
"gpu_check: N passed, N failed, N skipped". Exit 0 when nothing failed (a machine without
a GPU skips everything and exits 0), 1 otherwise. What was measured goes to
OUT/gpu_check.json (OUT: --out, else $OUT, else BUILD/gpu/out), with the first session's
summary.json and timeline.json.gz beside it.

Needs only Python's standard library, the build of this tree (make && make gpu-bundle) and,
on the GPU machine, the NVIDIA driver, libcudart.so.13, libcupti.so.13 and libnccl.so.2
(found in the usual CUDA folders, the loader's cache and Python's nvidia-* wheels).
"""
import argparse
import bisect
import ctypes
import glob
import gzip
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
GPU_TRACK_BASE = 1000000        # injector/artifacts/timeline.c: tid = base + device * 1000 + stream
WORKLOAD_KERNELS = ("scale_add_kernel", "fill_kernel", "square_sum_kernel")
PINNED_BYTES = 4 << 20          # gpu_train: the pinned host->device copy
PAGEABLE_BYTES = 3 << 20        # gpu_train: the pageable host->device copy
ALLOC_BYTES = 8 << 20           # gpu_train --alloc-bytes
COMMS = 2
WINDOW_S = 4
MAX_STEP_RATIO = 1.5            # step time while recording / before: the overhead allowed
MAX_AFTER_RATIO = 1.2           # step time after the detach / before: what the detach must give back
# On the doubles the simulated GPU computes its kernels on this host's CPU, and a plain spin loop
# here runs from 11 to 21 ms per pass from one second to the next with nothing else running: a
# step's time follows the host, not aiprof. There only a gross slowdown is judged.
DOUBLES_MAX_RATIO = 2.5
CUPTI_MULTIPLE_SUBSCRIBERS = 39  # CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED
KILLS = 10                      # fresh processes whose injection aiprof is killed in

results = []                    # (status, name, detail)
figures = {}


def report(status, name, detail):
    results.append((status, name, detail))
    print(f"{status} {name}: {detail}", flush=True)


def check(name, ok, detail):
    report("PASS" if ok else "FAIL", name, detail)
    return ok


# ---- the machine ------------------------------------------------------------------------

def probe_driver(libcuda="libcuda.so.1"):
    """(device facts) from libcuda, or (None, why) where there is no usable GPU."""
    try:
        cu = ctypes.CDLL(libcuda)
    except OSError as e:
        return None, f"no NVIDIA driver (libcuda.so.1: {e})"
    if cu.cuInit(0) != 0:
        return None, "cuInit failed: the driver has no usable device"
    n, ver = ctypes.c_int(0), ctypes.c_int(0)
    if cu.cuDeviceGetCount(ctypes.byref(n)) != 0 or n.value < 1:
        return None, "the driver reports no CUDA device"
    cu.cuDriverGetVersion(ctypes.byref(ver))
    dev, name = ctypes.c_int(0), ctypes.create_string_buffer(256)
    major, minor = ctypes.c_int(0), ctypes.c_int(0)
    cu.cuDeviceGet(ctypes.byref(dev), 0)
    cu.cuDeviceGetName(name, 256, dev)
    cu.cuDeviceGetAttribute(ctypes.byref(major), 75, dev)   # COMPUTE_CAPABILITY_MAJOR
    cu.cuDeviceGetAttribute(ctypes.byref(minor), 76, dev)
    return {"devices": n.value, "driver_cuda_version": f"{ver.value // 1000}.{ver.value % 1000 // 10}",
            "driver_cuda_version_code": ver.value, "name": name.value.decode(errors="replace"),
            "compute_capability": f"{major.value}.{minor.value}"}, ""


def library_dirs():
    dirs = [d for d in os.environ.get("LD_LIBRARY_PATH", "").split(":") if d]
    dirs += ["/usr/local/cuda/lib64", "/usr/local/cuda/lib", "/usr/local/cuda/extras/CUPTI/lib64"]
    for pat in ("/opt/*/.venv/lib/python3*/site-packages/nvidia/*/lib",
                "/usr/local/lib/python3*/dist-packages/nvidia/*/lib",
                "/usr/lib/python3*/dist-packages/nvidia/*/lib",
                "/usr/local/lib/python3*/site-packages/nvidia/*/lib",
                "/opt/conda/lib/python3*/site-packages/nvidia/*/lib",
                "/usr/local/cuda-*/lib64", "/usr/local/cuda-*/lib",
                "/usr/local/cuda-*/extras/CUPTI/lib64"):
        dirs += sorted(glob.glob(pat))
    try:
        out = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, timeout=20).stdout
        dirs += [os.path.dirname(line.split("=>")[-1].strip()) for line in out.splitlines() if "=>" in line]
    except (OSError, subprocess.SubprocessError):
        pass
    seen, ordered = set(), []
    for d in dirs:
        if d not in seen and os.path.isdir(d):
            seen.add(d)
            ordered.append(d)
    return ordered


def find_libraries(names):
    found = {}
    for d in library_dirs():
        for n in names:
            if n not in found and os.path.exists(os.path.join(d, n)):
                found[n] = os.path.realpath(os.path.join(d, n))
    return found


# ---- the workload ---------------------------------------------------------------------------

WORKLOAD_ARGS = []


class Workload:
    def __init__(self, build, env, log_dir, tag):
        self.stdout_path = os.path.join(log_dir, f"{tag}.stdout")
        self.stderr_path = os.path.join(log_dir, f"{tag}.stderr")
        self.out, self.err = open(self.stdout_path, "w"), open(self.stderr_path, "w")
        self.p = subprocess.Popen([os.path.join(build, "gpu", "gpu_train"), "--seconds", "120",
                                   "--comms", str(COMMS), "--alloc-bytes", str(ALLOC_BYTES)] + WORKLOAD_ARGS,
                                  stdout=self.out, stderr=self.err, env=env)
        self.pid = self.p.pid

    def lines(self):
        with open(self.stdout_path) as f:
            return f.read().splitlines()

    def stderr(self):
        with open(self.stderr_path) as f:
            return f.read()

    def steps(self):
        out = []
        for line in self.lines():
            parts = line.split()
            if len(parts) == 4 and parts[0] == "step":
                out.append((int(parts[2]), int(parts[3])))
        return out

    def wait_for(self, pred, timeout):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if pred(self.lines()):
                return True
            if self.p.poll() is not None:
                return pred(self.lines())
            time.sleep(0.1)
        return False

    def probe(self):
        """SIGUSR1: the workload tries to subscribe to CUPTI between two steps."""
        before = sum(1 for line in self.lines() if line.startswith("probe "))
        os.kill(self.pid, signal.SIGUSR1)
        self.wait_for(lambda ls: sum(1 for line in ls if line.startswith("probe ")) > before, 30)
        probes = [line for line in self.lines() if line.startswith("probe ")]
        if len(probes) <= before:
            return None, "no answer from the workload"
        line = probes[-1]
        try:
            return int(line.split()[1].split("=")[1]), line
        except (IndexError, ValueError):
            return None, line

    def stop(self):
        if self.p.poll() is None:
            os.kill(self.pid, signal.SIGTERM)
        try:
            rc = self.p.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.p.kill()
            rc = self.p.wait()
        self.out.close()
        self.err.close()
        return rc


def profile(build, pid, out, duration, *extra):
    env = dict(os.environ, LD_LIBRARY_PATH=os.path.join(build, "gpu", "hostlib"))
    t0 = time.monotonic()
    r = subprocess.run([os.path.join(build, "aiprof"), "profile", "--pid", str(pid), "-d", duration,
                        "--no-ebpf", "-o", out, *extra], capture_output=True, text=True, env=env, timeout=180)
    wall = time.monotonic() - t0
    summary = timeline = None
    if r.returncode == 0:
        with open(os.path.join(out, "summary.json")) as f:
            summary = json.load(f)
        with gzip.open(os.path.join(out, "timeline.json.gz"), "rt") as f:
            timeline = json.load(f)
    return r, summary, timeline, wall


def events(tl, cat=None, ph="X"):
    return [e for e in tl["traceEvents"] if e.get("ph") == ph and (cat is None or e.get("cat") == cat)]


def median_ms(xs):
    return statistics.median(xs) / 1e6 if xs else float("nan")


# ---- the checks --------------------------------------------------------------------------

def check_session(tl, summary, target):
    """Everything one CUPTI session's artifacts must show."""
    gt = target.get("gpu_timing", {})
    check("cupti_source", gt.get("source") == "cupti", f"gpu_timing {gt}")

    kernels = [e for e in events(tl, "cuda_kernel") if e["tid"] >= GPU_TRACK_BASE]
    names = sorted({e["name"] for e in kernels})
    figures["kernel_names"] = names[:40]
    ours = {k: [e for e in kernels if k in e["name"]] for k in WORKLOAD_KERNELS}
    check("kernel_names", all(ours.values()),
          f"{len(kernels)} kernels, names: {', '.join(n[:60] for n in names[:8])}")
    durs = {k: statistics.median([e["dur"] for e in v]) for k, v in ours.items() if v}
    figures["kernel_median_us"] = durs
    bad = [e for e in kernels if not e["dur"] > 0 or e["dur"] > 1e6]
    check("kernel_durations", not bad and bool(durs),
          "median GPU us " + ", ".join(f"{k} {v:.1f}" for k, v in durs.items())
          + (f"; {len(bad)} with a duration <= 0 or > 1 s" if bad else ""))

    launches = {e["args"]["correlation"]: e for e in events(tl, "cuda_api")
                if "correlation" in e.get("args", {}) and "kernel" in e["args"]}
    flows_s = [e for e in tl["traceEvents"] if e.get("ph") == "s"]
    flows_f = [e for e in tl["traceEvents"] if e.get("ph") == "f"]
    mine = [e for v in ours.values() for e in v]
    linked = [e for e in mine if e["args"].get("correlation") in launches]
    wrong_name = [e for e in linked if e["args"]["correlation"] in launches
                  and e["name"] != launches[e["args"]["correlation"]]["args"]["kernel"]]
    early = [e for e in linked if e["ts"] < launches[e["args"]["correlation"]]["ts"]]
    frac = len(linked) / len(mine) if mine else 0
    figures["launch_kernel_linked_fraction"] = round(frac, 4)
    check("launch_flows", frac >= 0.9 and len(flows_f) >= len(linked) * 0.9 and not wrong_name and not early,
          f"{len(linked)}/{len(mine)} workload kernels tied to their launch, {len(flows_s)} flow starts, "
          f"{len(flows_f)} ends, {len(wrong_name)} with another name than their launch, "
          f"{len(early)} starting before their launch")
    if wrong_name:
        e = wrong_name[0]
        print(f"     e.g. kernel {e['name']!r} launch {launches[e['args']['correlation']]['args']['kernel']!r}")

    # CUPTI's clock put on CLOCK_MONOTONIC: a kernel runs after its launch began and is done
    # when the first stream synchronisation after its launch returns
    syncs = sorted((e for e in events(tl, "cuda_api") if e["name"] == "cudaStreamSynchronize"),
                   key=lambda e: e["ts"])
    sync_ts = [e["ts"] for e in syncs]
    start_margin, end_margin = [], []
    for e in linked:
        launch = launches[e["args"]["correlation"]]
        i = bisect.bisect_left(sync_ts, launch["ts"])
        start_margin.append(e["ts"] - launch["ts"])
        if i < len(syncs):
            end_margin.append(syncs[i]["ts"] + syncs[i]["dur"] - (e["ts"] + e["dur"]))
    figures["launch_to_kernel_start_us"] = {"min": min(start_margin, default=None),
                                            "median": statistics.median(start_margin) if start_margin else None}
    figures["kernel_end_to_sync_return_us"] = {"min": min(end_margin, default=None),
                                               "median": statistics.median(end_margin) if end_margin else None}
    check("clock_alignment", bool(end_margin) and min(start_margin) >= 0 and min(end_margin) >= -2,
          f"{len(end_margin)} kernels: launch -> kernel start at least {min(start_margin, default=0):.1f} us, "
          f"kernel end -> the next stream sync's return at least {min(end_margin, default=0):.1f} us "
          "(both must be >= 0: one clock)")

    copies = [e for e in events(tl, "cuda_memcpy") if e["tid"] >= GPU_TRACK_BASE]
    kinds = sorted({e["args"].get("kind") for e in copies})
    check("memcpy_kinds", {"HtoD", "DtoH", "DtoD"} <= set(kinds),
          f"{len(copies)} GPU copies, kinds {kinds}")
    hm = {}
    for e in copies:
        if e["args"].get("kind") == "HtoD" and e["args"].get("bytes") in (PINNED_BYTES, PAGEABLE_BYTES):
            hm.setdefault(e["args"]["bytes"], set()).add(e["args"].get("host_memory"))
    figures["htod_host_memory"] = {str(k): sorted(map(str, v)) for k, v in hm.items()}
    check("pinned_pageable", hm.get(PINNED_BYTES) == {"pinned"} and hm.get(PAGEABLE_BYTES) == {"pageable"},
          f"GPU records: 4 MiB pinned buffer -> {sorted(map(str, hm.get(PINNED_BYTES, [])))}, "
          f"3 MiB pageable buffer -> {sorted(map(str, hm.get(PAGEABLE_BYTES, [])))}")

    nccl_calls = [e for e in events(tl, "nccl") if e["name"] == "ncclAllReduce" and e["args"].get("correlation")]
    by_corr = {}
    for e in events(tl, "cuda_kernel") + copies:
        if e["tid"] >= GPU_TRACK_BASE and e["args"].get("correlation"):
            by_corr.setdefault(e["args"]["correlation"], []).append(e)
    with_gpu = [c for c in nccl_calls if c["args"]["correlation"] in by_corr]
    nccl_kernels = [e for e in kernels if "nccl_op" in e["args"]]
    frac = len(with_gpu) / len(nccl_calls) if nccl_calls else 0
    figures["nccl_calls_with_gpu_work"] = round(frac, 4)
    figures["nccl_kernel_names"] = sorted({e["name"] for e in nccl_kernels})[:10]
    check("nccl_linked", frac >= 0.9 and bool(nccl_kernels),
          f"{len(with_gpu)}/{len(nccl_calls)} all-reduce calls have their GPU work; "
          f"{len(nccl_kernels)} kernels name their NCCL call "
          f"({', '.join(figures['nccl_kernel_names'][:2])})")

    mem = [e for e in events(tl, "cuda_memory") if e["args"].get("bytes") == ALLOC_BYTES]
    allocs = [e for e in mem if e["name"] == "cudaMalloc"]
    frees = [e for e in tl["traceEvents"] if e.get("cat") == "cuda_memory" and e.get("name") == "cudaFree"]
    check("gpu_memory", len(allocs) > 10 and len(frees) > 10,
          f"{len(allocs)} cudaMalloc of 8 MiB, {len(frees)} cudaFree; "
          f"summary gpu_memory {json.dumps(summary.get('gpu_memory', {}))[:160]}")
    return tl["otherData"]["window_start_ns"], tl["otherData"]["window_end_ns"]


def run_main(build, out_dir, env):
    w = Workload(build, env, out_dir, "workload")
    try:
        if not check("workload_starts", w.wait_for(lambda ls: sum(1 for x in ls if x.startswith("step ")) >= 50, 120),
                     f"pid {w.pid}: {' '.join(w.lines()[:1])}"):
            print(w.stderr()[-2000:])
            return
        time.sleep(2)                           # steps before the window: the baseline
        s1 = os.path.join(out_dir, "session1")

        # the subscriber slot must be aiprof's while it records, and free again afterwards
        during = {}

        def probe_during():
            time.sleep(WINDOW_S / 2 + 1.5)
            during["rc"], during["line"] = w.probe()
        th = threading.Thread(target=probe_during)
        th.start()
        r, summary, tl, wall = profile(build, w.pid, s1, f"{WINDOW_S}s")
        th.join()
        figures["profile_wall_s"] = round(wall, 2)
        if not check("profile", r.returncode == 0, f"aiprof exit {r.returncode} in {wall:.1f} s"
                     + ("" if r.returncode == 0 else f": {r.stderr[-1500:]}")):
            return
        target = summary["targets"][0]
        ws, we = check_session(tl, summary, target)

        time.sleep(2)                           # steps after the window
        rc, line = w.probe()
        check("clean_detach", during.get("rc") == CUPTI_MULTIPLE_SUBSCRIBERS and rc == 0,
              f"while recording: {during.get('line')}; after: {line}")

        steps = w.steps()
        before = [d for t, d in steps if t + d < ws and t > ws - 10e9]
        inside = [d for t, d in steps if t > ws + 0.5e9 and t + d < we]
        after = [d for t, d in steps if t > we + 1e9]
        ratio = median_ms(inside) / median_ms(before) if before and inside else float("nan")
        after_ratio = median_ms(after) / median_ms(before) if before and after else float("nan")
        figures["step_ms"] = {"before": round(median_ms(before), 4), "recording": round(median_ms(inside), 4),
                              "after": round(median_ms(after), 4), "steps": [len(before), len(inside), len(after)]}
        figures["step_ratio_recording"] = round(ratio, 3)
        figures["step_ratio_after"] = round(after_ratio, 3)
        check("overhead", ratio <= MAX_STEP_RATIO and after_ratio <= MAX_AFTER_RATIO,
              f"median step {median_ms(before):.3f} ms before, {median_ms(inside):.3f} recording "
              f"(ratio {ratio:.2f}, allowed {MAX_STEP_RATIO}), {median_ms(after):.3f} after detach "
              f"(ratio {after_ratio:.2f}, allowed {MAX_AFTER_RATIO}); steps {len(before)}/{len(inside)}/{len(after)}")

        s2 = os.path.join(out_dir, "session2")
        r2, summary2, tl2, _ = profile(build, w.pid, s2, "2s")
        ok = r2.returncode == 0
        t2 = summary2["targets"][0] if ok else {}
        k2 = [e for e in events(tl2, "cuda_kernel") if e["tid"] >= GPU_TRACK_BASE] if ok else []
        check("second_session", ok and t2.get("gpu_timing", {}).get("source") == "cupti" and len(k2) > 0,
              f"exit {r2.returncode}, injection {t2.get('injection')}, "
              f"gpu_timing {t2.get('gpu_timing', {}).get('source')}, {len(k2)} kernels"
              + ("" if ok else f": {r2.stderr[-800:]}"))
        check_ebpf_method(build, w.pid, os.path.join(out_dir, "session3"))
    finally:
        rc = w.stop()
        err = w.stderr()
        check("workload_ok", rc == 0 and "want" not in err,
              f"exit {rc} after {len(w.steps())} steps, results checked every step"
              + (f": {err[-800:]}" if rc != 0 else ""))


def check_ebpf_method(build, pid, out):
    """--method ebpf: uprobes on the real libcudart; launches by handle named by their stub."""
    r, summary, tl, _ = profile(build, pid, out, "2s", "--method", "ebpf")
    if r.returncode != 0:
        report("SKIP", "ebpf_method", f"aiprof --method ebpf exit {r.returncode} (uprobes unavailable "
               f"on this machine?): {r.stderr.strip()[-400:]}")
        return
    # the workload's runtime launches; NCCL's own go to the driver (cuLaunchKernel) and are
    # named by their CUfunction under this method
    launches = [e for e in events(tl, "cuda_api") if e["name"] == "cudaLaunchKernel"]
    named = [e for e in launches if any(k in e["args"]["kernel"] for k in WORKLOAD_KERNELS)]
    driver = [e for e in events(tl, "cuda_api") if e["name"] == "cuLaunchKernel"]
    figures["ebpf_method_launch_names"] = sorted({e["args"]["kernel"] for e in launches})[:10]
    check("ebpf_method", launches and len(named) == len(launches) and
          summary["targets"][0].get("method") == "ebpf",
          f"{len(named)}/{len(launches)} runtime launches seen by uprobes carry their kernel's name "
          f"({', '.join(figures['ebpf_method_launch_names'][:3])}); {len(driver)} driver launches")


def traced(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            return any(line.startswith("TracerPid:") and line.split()[1] != "0" for line in f)
    except OSError:
        return False


def run_kills(build, out_dir, env, n):
    """aiprof SIGKILLed at random instants of the injection into fresh CUDA processes."""
    rnd, landed, bad = random.Random(18), 0, []
    for i in range(n):
        w = Workload(build, env, out_dir, f"kill{i}")
        try:
            if not w.wait_for(lambda ls: sum(1 for x in ls if x.startswith("step ")) >= 20, 120):
                bad.append(f"{i}: did not start: {w.stderr()[-300:]}")
                continue
            a = subprocess.Popen([os.path.join(build, "aiprof"), "profile", "--pid", str(w.pid), "-d", "1s",
                                  "--no-ebpf", "-q", "-o", os.path.join(out_dir, "kill")],
                                 env=dict(os.environ, LD_LIBRARY_PATH=os.path.join(build, "gpu", "hostlib")),
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            end = time.monotonic() + 10
            while time.monotonic() < end and not traced(w.pid) and a.poll() is None:
                pass
            if traced(w.pid):
                landed += 1
                t = time.monotonic() + rnd.uniform(0, 0.004)
                while time.monotonic() < t:
                    pass
            a.kill()
            a.wait()
            before = len(w.steps())
            time.sleep(1.0)
            if w.p.poll() is not None or len(w.steps()) <= before:
                bad.append(f"{i}: exit {w.p.poll()} after {before} steps: {w.stderr()[-300:]}")
        finally:
            rc = w.stop()
            if rc != 0 and not any(b.startswith(f"{i}:") for b in bad):
                bad.append(f"{i}: exit {rc} at SIGTERM: {w.stderr()[-300:]}")
    figures["kills"] = {"tries": n, "landed_in_injection": landed, "harmed": len(bad)}
    check("killed_injector", not bad and landed >= n // 2,
          f"{n} CUDA processes, aiprof SIGKILLed mid-injection in {landed}: "
          + ("each kept stepping with right results and exited 0" if not bad else "; ".join(bad[:3])))


def run_holder(build, out_dir, env):
    """A second CUPTI tool subscribed first: aiprof records API timing and says why."""
    holder = os.path.join(build, "gpu", "libcupti_holder.so")
    w = Workload(build, dict(env, CUDA_INJECTION64_PATH=holder), out_dir, "holder")
    try:
        if not w.wait_for(lambda ls: sum(1 for x in ls if x.startswith("step ")) >= 50, 120):
            check("other_subscriber", False, f"workload did not start: {w.stderr()[-1500:]}")
            return
        r, summary, tl, _ = profile(build, w.pid, os.path.join(out_dir, "holder"), "2s")
        if not check("other_subscriber_profile", r.returncode == 0, f"aiprof exit {r.returncode}"
                     + ("" if r.returncode == 0 else f": {r.stderr[-1500:]}")):
            return
        gt = summary["targets"][0].get("gpu_timing", {})
        launches = [e for e in events(tl, "cuda_api") if "kernel" in e.get("args", {})]
        kernels = [e for e in events(tl, "cuda_kernel") if e["tid"] >= GPU_TRACK_BASE]
        check("other_subscriber", gt.get("source") == "api" and "another CUPTI subscriber" in gt.get("reason", "")
              and launches and not kernels,
              f"gpu_timing {gt}; {len(launches)} launches recorded from the hooks, {len(kernels)} GPU kernels")
    finally:
        rc = w.stop()
        err = w.stderr()
        held = [x for x in err.splitlines() if x.startswith("cupti_holder: subscribed=")]
        kernels = int(held[-1].split("kernels=")[1]) if held else 0
        figures["holder_kernels"] = kernels
        check("other_subscriber_unharmed", rc == 0 and held and "subscribed=1" in held[-1] and kernels > 0,
              f"workload exit {rc}; {held[-1] if held else 'the holder never reported: ' + err[-600:]}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--build", default=os.path.join(ROOT, os.environ.get("BUILD", "build")))
    ap.add_argument("--out", default=os.environ.get("OUT"))
    ap.add_argument("--keep", action="store_true", help="keep the sessions' folders and logs")
    ap.add_argument("--doubles", action="store_true",
                    help="run the check's own code on the test doubles (tests/doubles): no GPU, "
                         "simulated timing, kernels that compute nothing; proves the check, not aiprof on a GPU")
    args = ap.parse_args()
    build = os.path.abspath(args.build)
    out_dir = os.path.abspath(args.out or os.path.join(build, "gpu", "out"))
    os.makedirs(out_dir, exist_ok=True)
    # every session's artifacts and the workloads' logs; OUT gets the few files worth keeping
    work = tempfile.mkdtemp(prefix="aiprof-gpu-check-")
    try:
        return run(build, out_dir, work, args.doubles)
    finally:
        if args.keep:
            print(f"gpu_check: sessions and logs kept in {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


def run(build, out_dir, work, doubles):

    if doubles:
        dd = os.path.join(build, "tests", "doubles")
        os.environ["LD_LIBRARY_PATH"] = f"{dd}:{dd}/cupti"
        WORKLOAD_ARGS.append("--no-verify")
        global MAX_STEP_RATIO, MAX_AFTER_RATIO
        MAX_STEP_RATIO = MAX_AFTER_RATIO = DOUBLES_MAX_RATIO
        print("gpu_check: on the test doubles: this checks the check, not aiprof on a GPU", flush=True)
        dev, why = probe_driver(os.path.join(dd, "libcuda.so.1"))
    else:
        dev, why = probe_driver()
    if not dev:
        report("SKIP", "gpu_check", f"{why}; this check runs on a machine with an NVIDIA GPU")
        print("gpu_check: 0 passed, 0 failed, 1 skipped")
        return 0
    figures["device"] = dev
    # hostlib (make gpu-bundle) is for a GPU machine without aiprof's libraries; the doubles
    # run here, where they are installed
    need = [os.path.join(build, p) for p in ("aiprof", "libaiprof.so", "gpu/gpu_train",
                                              "gpu/libcupti_holder.so") + (() if doubles else ("gpu/hostlib",))]
    missing = [p for p in need if not os.path.exists(p)]
    libs = find_libraries(["libcudart.so.13", "libcupti.so.13", "libnccl.so.2"])
    figures["libraries"] = libs
    print(f"gpu_check: {dev['name']} (sm_{dev['compute_capability'].replace('.', '')}), driver for CUDA "
          f"{dev['driver_cuda_version']}; {libs}", flush=True)
    ok = check("environment", not missing and len(libs) == 3 and dev["driver_cuda_version_code"] >= 13000,
               "build outputs " + (f"missing: {missing} (run make && make gpu-bundle)" if missing else "present")
               + f"; libraries {sorted(libs)}; the workload needs a driver for CUDA 13.0 or later")
    if ok:
        lib_path = ":".join(dict.fromkeys(os.path.dirname(p) for p in libs.values()))
        env = dict(os.environ, LD_LIBRARY_PATH=lib_path + ":" + os.environ.get("LD_LIBRARY_PATH", ""))
        env.pop("CUDA_INJECTION64_PATH", None)
        run_main(build, work, env)
        run_holder(build, work, env)
        run_kills(build, work, env, KILLS)
        for src, dst in (("session1/summary.json", "summary.json"), ("session1/timeline.json.gz", "timeline.json.gz"),
                         ("workload.stderr", "workload.stderr"), ("holder.stderr", "holder.stderr")):
            if os.path.exists(os.path.join(work, src)):
                shutil.copy(os.path.join(work, src), os.path.join(out_dir, dst))

    passed = sum(1 for s, _, _ in results if s == "PASS")
    failed = sum(1 for s, _, _ in results if s == "FAIL")
    with open(os.path.join(out_dir, "gpu_check.json"), "w") as f:
        json.dump({"results": [{"status": s, "check": n, "detail": d} for s, n, d in results],
                   "figures": figures}, f, indent=2)
    print(f"gpu_check: {passed} passed, {failed} failed, 0 skipped")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
