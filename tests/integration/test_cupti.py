# SPDX-License-Identifier: MIT
"""GPU-side timing through CUPTI, end to end, on the test doubles.

`trainer --cupti` loads the fake libcupti.so.13 (tests/doubles/fake_cupti.c) at start, as a
framework linking CUPTI does; libaiprof.so finds it already loaded, subscribes, and turns
its activity records into GPU kernel and copy events on "GPU d stream s" tracks, with a
flow arrow from each launch. The double's records carry the simulated GPU's timing
(tests/doubles/gpu_sim.h): a kernel takes max(5 us, grid x block x 1 ns), a pinned 1 MiB
host-to-device copy 5 us + 1 MiB / 12 GB/s.
"""
import os
import subprocess

import pytest

from conftest import (LIBAIPROF, TRAINER, checksum_of, events, finish, load_summary, load_timeline,
                      require_root, run_aiprof, start_trainer)

BATCH = 1 << 20
RANKS = 2
TRAINER_ARGS = ["--ranks", str(RANKS), "--steps", "150", "--batch-bytes", str(BATCH)]
TRAINER_KERNELS = {"sgemm_fwd_kernel", "relu_fwd_kernel", "sgemm_bwd_kernel",
                   "relu_bwd_kernel", "fused_layernorm_kernel", "adam_update_kernel"}
GPU_TRACK_BASE = 1000000        # injector/artifacts/timeline.c: tid = base + device * 1000 + stream
KERNEL_FLOOR_US = 5.0
COPY_LATENCY_US = 5.0
PINNED_BYTES_PER_US = 12e9 / 1e6
# Launches whose kernels still ran when recording stopped have no kernel record (CUPTI
# hands them back without an end time); at most about a step's worth per rank.
MAX_IN_FLIGHT = RANKS * 8
# Work enqueued in the microseconds between CUPTI starting (stopping) to record and the
# hooks starting (stopping) to push correlation ids has a record but no correlation.
MAX_UNCORRELATED = RANKS * 2


@pytest.fixture(scope="module")
def reference_checksum():
    r = subprocess.run([TRAINER] + TRAINER_ARGS, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return checksum_of(r.stdout)


def model_kernel_us(e):
    g, b = e["args"]["grid"], e["args"]["block"]
    return max(KERNEL_FLOOR_US, g[0] * g[1] * g[2] * b[0] * b[1] * b[2] / 1000.0)


def gpu_track_names(tl):
    return {e["tid"]: e["args"]["name"] for e in tl["traceEvents"]
            if e.get("ph") == "M" and e.get("name") == "thread_name" and e["tid"] >= GPU_TRACK_BASE}


def profile(pid, out, duration="2s"):
    r = run_aiprof(["profile", "--pid", str(pid), "-d", duration, "-o", str(out)])
    assert r.returncode == 0, r.stderr
    return load_summary(out)["targets"][0], load_timeline(out)


def assert_cupti_timeline(tl):
    """Kernels and copies on GPU stream tracks, timed by the model, tied to their launches."""
    window = tl["otherData"]
    w_start, w_end = window["window_start_ns"] / 1e3, window["window_end_ns"] / 1e3
    kernels = [e for e in events(tl, "cuda_kernel") if e["ph"] == "X"]
    # the gradient all-reduces' kernels, launched inside the NCCL calls: each names its call
    nccl = [e for e in kernels if e["name"].startswith("ncclDevKernel_")]
    calls = {(e["args"]["comm"], e["args"]["seq"]): e for e in events(tl, "nccl")
             if e["ph"] == "X" and "seq" in e["args"]}
    assert nccl, "no NCCL kernel events"
    assert any("nccl_comm" in k["args"] for k in nccl), "no NCCL kernel linked to its call"
    for k in nccl:
        if "nccl_comm" not in k["args"]:
            # a call that was already running when the window opened (a second session on a
            # busy machine) was not recorded, so its kernel has no call to name: then it was
            # launched before every call recorded in its process
            first = min((c["args"]["correlation"] for c in calls.values()
                         if c["pid"] == k["pid"] and "correlation" in c["args"]), default=None)
            assert first is None or k["args"]["correlation"] < first, (k, first)
            continue
        call = calls[(k["args"]["nccl_comm"], k["args"]["nccl_seq"])]
        assert call["args"]["correlation"] == k["args"]["correlation"], (k, call)
        assert k["args"]["nccl_op"] == call["args"]["op"] and k["name"].startswith(f"ncclDevKernel_{call['args']['op']}_")
    kernels = [e for e in kernels if e not in nccl]
    assert kernels, "no GPU kernel events"
    assert {e["name"] for e in kernels} == TRAINER_KERNELS
    tracks = gpu_track_names(tl)
    assert all(e["tid"] >= GPU_TRACK_BASE for e in kernels)
    # one non-blocking stream per rank, each its own track
    assert len({e["tid"] for e in kernels}) == RANKS
    for e in kernels:
        a = e["args"]
        assert tracks[e["tid"]].startswith(f"GPU {a['device']} stream {a['stream']}"), tracks
        assert e["tid"] == GPU_TRACK_BASE + a["device"] * 1000 + a["stream"]
        assert a["kernel"] == e["name"]
        want = model_kernel_us(e)
        assert abs(e["dur"] - want) <= 0.02 * want, (e, want)
        # on the CLOCK_MONOTONIC timeline of the window (recording starts at attach, a
        # little before the window; CUPTI's own timebase is ~1.7e18 ns away from it)
        assert w_start - 10e6 <= e["ts"] and e["ts"] + e["dur"] <= w_end + 1e6, (e, w_start, w_end)
    # a stream runs one thing at a time
    for tid in {e["tid"] for e in kernels}:
        on_track = sorted((e for e in kernels if e["tid"] == tid), key=lambda e: e["ts"])
        for a, b in zip(on_track, on_track[1:]):
            assert b["ts"] >= a["ts"] + a["dur"] - 0.001, (a, b)

    # every kernel: an "f" at the kernel and an "s" at its launch on a CPU thread, same id
    # (matched by place: how ids are spelled is the timeline writer's business)
    launches = {e["args"]["correlation"]: e for e in events(tl, "cuda_api")
                if e["name"] in ("cudaLaunchKernel", "cuLaunchKernel") and e["args"].get("correlation")}
    flows = [e for e in tl["traceEvents"] if e.get("ph") in ("s", "f")]
    starts = {(e["tid"], e["ts"]): e for e in flows if e["ph"] == "s"}
    finishes = {(e["tid"], e["ts"]): e for e in flows if e["ph"] == "f"}
    start_ids = [e["id"] for e in starts.values()]
    assert len(start_ids) == len(set(start_ids)) == sum(1 for e in flows if e["ph"] == "s")
    correlated = [k for k in kernels if k["args"]["correlation"]]
    # the edges of the window scale with how long the control thread waits for a CPU on a
    # busy machine; everything in between must be correlated
    assert len(kernels) - len(correlated) <= max(MAX_UNCORRELATED, len(kernels) // 10), \
        (len(kernels), len(correlated))
    assert len(finishes) == len(correlated)
    for k in correlated:
        launch = launches.get(k["args"]["correlation"])
        assert launch, k
        f, s = finishes.get((k["tid"], k["ts"])), starts.get((launch["tid"], launch["ts"]))
        assert f and s and f["id"] == s["id"], (k, launch, f, s)
        assert launch["tid"] < GPU_TRACK_BASE
        assert launch["args"]["kernel"] == k["name"]
        assert (launch["args"]["grid"], launch["args"]["block"]) == (k["args"]["grid"], k["args"]["block"])
        # causality survives the CUPTI -> CLOCK_MONOTONIC conversion
        assert k["ts"] >= launch["ts"], (k, launch)
    assert len(starts) - len(finishes) <= MAX_IN_FLIGHT
    assert {e["name"] for e in launches.values()} == {"cudaLaunchKernel", "cuLaunchKernel"}

    copies = [e for e in events(tl, "cuda_memcpy") if e["tid"] >= GPU_TRACK_BASE]
    assert {e["args"]["kind"] for e in copies} == {"HtoD", "DtoD", "DtoH"}
    assert sum(1 for e in copies if not e["args"]["correlation"]) <= MAX_UNCORRELATED
    for e in copies:
        assert e["args"]["bytes"] > 0
        assert e["tid"] in {k["tid"] for k in kernels}
    batches = [e for e in copies if e["args"]["kind"] == "HtoD" and e["args"]["bytes"] == BATCH]
    assert batches, sorted({e["args"]["bytes"] for e in copies})
    # pinned or pageable as CUPTI's record says (its srcKind/dstKind), agreeing with the hooks
    assert all(e["args"]["host_memory"] == "pinned" for e in batches), batches[0]
    api_copies = {e["args"]["correlation"]: e for e in events(tl, "cuda_memcpy")
                  if e["tid"] < GPU_TRACK_BASE and e["args"].get("correlation")}
    for e in copies:
        api = api_copies.get(e["args"]["correlation"])
        if e["args"]["kind"] == "DtoD":
            assert e["args"]["host_memory"] == "none", e
        elif api:
            assert e["args"]["host_memory"] == api["args"]["host_memory"] != "unknown", (e, api)
    want = COPY_LATENCY_US + BATCH / PINNED_BYTES_PER_US
    assert all(abs(e["dur"] - want) <= 0.02 * want for e in batches), (batches[0], want)
    return kernels


def test_cupti_gpu_timing(procs, tmp_path, reference_checksum):
    require_root()
    p, pid = start_trainer(procs, "--cupti", *TRAINER_ARGS)
    with open(f"/proc/{pid}/maps") as f:
        assert "/doubles/cupti/libcupti.so.13" in f.read()
    t, tl = profile(pid, tmp_path / "out")
    assert t["gpu_timing"]["source"] == "cupti", t["gpu_timing"]
    kernels = assert_cupti_timeline(tl)
    assert len(kernels) >= 100
    rc, stdout, stderr = finish(p)
    assert rc == 0, stderr
    assert checksum_of(stdout) == reference_checksum


def test_cupti_again_in_a_second_session(procs, tmp_path):
    """aiprof unsubscribes when it detaches; the next session subscribes again."""
    require_root()
    p, pid = start_trainer(procs, "--cupti", *TRAINER_ARGS)
    t1, _ = profile(pid, tmp_path / "a", "1s")
    t2, tl = profile(pid, tmp_path / "b", "1s")
    assert t1["gpu_timing"]["source"] == "cupti" and t2["gpu_timing"]["source"] == "cupti"
    assert t2["injection"] == "ptrace-woken" and t1["detached"] == "released"  # the released copy woken
    assert_cupti_timeline(tl)
    assert finish(p)[0] == 0


def test_second_cupti_subscriber_means_api_timing(procs, tmp_path, reference_checksum):
    """The trainer holds the CUPTI subscription itself, as Kineto or Nsight Systems do."""
    require_root()
    p, pid = start_trainer(procs, "--cupti-subscribe", *TRAINER_ARGS)
    t, tl = profile(pid, tmp_path / "out", "1s")
    assert t["gpu_timing"]["source"] == "api"
    assert "another CUPTI subscriber is active" in t["gpu_timing"]["reason"]
    assert not [e for e in events(tl, "cuda_kernel") if e["ph"] == "X"]
    assert not [e for e in tl["traceEvents"] if e.get("ph") in ("s", "f")]
    launches = events(tl, "cuda_api", "cudaLaunchKernel")
    assert launches and not any("correlation" in e["args"] for e in launches)
    rc, stdout, stderr = finish(p)
    assert rc == 0, stderr
    assert checksum_of(stdout) == reference_checksum


def test_without_cupti_loaded_api_timing(procs, tmp_path):
    """A process that has not loaded CUPTI: aiprof does not pick the double up by itself."""
    require_root()
    p, pid = start_trainer(procs, *TRAINER_ARGS)
    t, tl = profile(pid, tmp_path / "out", "1s")
    assert t["gpu_timing"]["source"] == "api" and t["gpu_timing"]["reason"]
    assert not [e for e in events(tl, "cuda_kernel") if e["ph"] == "X"]
    with open(f"/proc/{pid}/maps") as f:
        assert "/doubles/cupti/" not in f.read()
    assert finish(p)[0] == 0


def test_cupti_with_ld_preload(procs, tmp_path):
    """libaiprof.so preloaded: the trainer's own dlopen of libcupti goes through its hook."""
    require_root()
    env = dict(os.environ, LD_PRELOAD=LIBAIPROF)
    p, pid = start_trainer(procs, "--cupti", *TRAINER_ARGS, env=env)
    t, tl = profile(pid, tmp_path / "out", "1s")
    assert t["injection"] == "already-loaded"
    assert t["gpu_timing"]["source"] == "cupti", t["gpu_timing"]
    assert_cupti_timeline(tl)
    assert finish(p)[0] == 0
