# SPDX-License-Identifier: MIT
"""The diagnosis on the test trainer: each planted fault yields exactly its finding (and no
other finding of severity warning or above); the clean trainer yields none.

SyncCheckpoint and DataLoaderStall are built on the eBPF collectors' slow syscalls and
off-CPU intervals, NcclHang is confirmed by them: those tests skip with the reason when the
collectors cannot run here.
"""
import os
import signal
import subprocess
import time

import pytest

from conftest import AIPROF, load_summary, require_root, run_aiprof, start_trainer

WINDOW = "3s"


def profile_fault(procs, tmp_path, fault, *extra, window=WINDOW):
    require_root()
    args = ["--ranks", "2", "--run-seconds", "60"] + list(extra)
    if fault:
        args += ["--fault", fault]
    p, pid = start_trainer(procs, *args)
    out = tmp_path / (fault or "clean")
    r = run_aiprof(["profile", "--pid", str(pid), "-d", window, "-o", str(out)])
    assert r.returncode == 0, r.stderr
    assert p.poll() is None, "the trainer died while profiled"
    return load_summary(out), r.stderr


def serious(summary):
    return sorted({f["category"] for f in summary["findings"]
                   if f["severity"] in ("warning", "critical")})


def need_waits(summary):
    if summary.get("ebpf", {}).get("state") != "on" or \
            not {"offcpu", "syscalls"} & set(summary["ebpf"].get("collectors", [])):
        pytest.skip("eBPF off-CPU/syscall collectors not running here: "
                    + "; ".join(summary.get("not_collected", [])))


def check_only(summary, category):
    assert serious(summary) == [category], summary["findings"]
    for f in summary["findings"]:
        assert f["remedy"] and f["summary"] and f["evidence"], f
        assert all(isinstance(v, (int, float, str)) for v in f["evidence"].values())


def test_clean_trainer_has_no_findings(procs, tmp_path):
    s, _ = profile_fault(procs, tmp_path, None)
    assert s["schema"] == "aiprof.summary/v2"
    assert s["findings"] == [], s["findings"]


def test_pageable_memcpy(procs, tmp_path):
    s, _ = profile_fault(procs, tmp_path, "pageable-memcpy")
    check_only(s, "PageableMemcpy")
    ev = s["findings"][0]["evidence"]
    assert ev["share_of_window"] >= 0.05 and ev["bytes"] >= 16 << 20


def test_small_kernels(procs, tmp_path):
    s, _ = profile_fault(procs, tmp_path, "small-kernels")
    check_only(s, "SmallKernels")
    ev = s["findings"][0]["evidence"]
    assert ev["launches_per_s"] >= 2000 and ev["small_share"] >= 0.5


def test_sync_checkpoint(procs, tmp_path):
    s, _ = profile_fault(procs, tmp_path, "sync-checkpoint")
    need_waits(s)
    check_only(s, "SyncCheckpoint")
    f = s["findings"][0]
    assert f["rank"] == 0  # the trainer checkpoints on rank 0
    assert "rank0.ckpt" in f["evidence"]["top_wait"]
    assert f["evidence"]["flushes"] > 0


def test_dataloader_stall(procs, tmp_path):
    s, _ = profile_fault(procs, tmp_path, "dataloader-stall")
    need_waits(s)
    check_only(s, "DataLoaderStall")
    assert any("read" in f["evidence"]["top_wait"] for f in s["findings"])


def test_straggler(procs, tmp_path):
    s, _ = profile_fault(procs, tmp_path, "straggler")
    check_only(s, "Straggler")
    f = s["findings"][0]
    assert f["rank"] == 1  # --fault-rank defaults to the last rank
    assert f["evidence"]["median_lateness_ms"] >= 5


def test_excessive_sync(procs, tmp_path):
    s, _ = profile_fault(procs, tmp_path, "excessive-sync")
    check_only(s, "ExcessiveSync")
    assert s["findings"][0]["evidence"]["syncs_per_launch"] >= 0.9


def test_memory_growth(procs, tmp_path):
    s, _ = profile_fault(procs, tmp_path, "memory-growth")
    check_only(s, "GpuMemoryGrowth")
    assert s["findings"][0]["evidence"]["unfreed_bytes"] >= 64 << 20


def test_nccl_hang_in_a_window_ended_early(procs, tmp_path):
    """The hang strikes inside the window, after a second of normal steps (SIGUSR2 a second
    after aiprof starts recording, however slow the machine); the window is cut short with ^C
    2 s after that."""
    require_root()
    p, pid = start_trainer(procs, "--ranks", "2", "--run-seconds", "60", "--fault", "nccl-hang",
                           "--fault-step", "usr2")
    out = tmp_path / "hang"
    a = subprocess.Popen([AIPROF, "profile", "--pid", str(pid), "-d", "60s", "-o", str(out)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    procs.procs.append(a)
    seen = []
    for line in a.stderr:
        seen.append(line)
        if "recording" in line:
            break
    assert any("recording" in line for line in seen), "".join(seen)
    time.sleep(1)
    os.kill(pid, signal.SIGUSR2)
    time.sleep(2)
    os.kill(a.pid, signal.SIGINT)
    stdout, stderr = a.communicate(timeout=60)
    stderr = "".join(seen) + stderr
    assert a.returncode == 0, stderr
    assert "ended early" in stderr
    s = load_summary(out)
    assert s["window"]["duration_s"] < 30
    check_only(s, "NcclHang")
    f = s["findings"][0]
    # confirmed (critical) when off-CPU data shows the ranks blocked, else a warning
    offcpu = s.get("ebpf", {}).get("state") == "on" and "offcpu" in s["ebpf"].get("collectors", [])
    assert f["severity"] == ("critical" if offcpu else "warning"), (f, s.get("ebpf"))
    assert f["evidence"]["expected_call"] == "ncclAllReduce"
    assert f["evidence"]["outstanding_s"] >= 1
    assert set(f["evidence"]["silent_ranks"].split(",")) == {"0", "1"}
