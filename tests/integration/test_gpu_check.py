# SPDX-License-Identifier: MIT
"""The check on a real GPU (tests/gpu/): what can be made sure of on a machine without one.

The workload is built by `make` for the GPUs the check is meant for; the check, run where
there is no GPU, says so and skips; and its own code runs end to end on the test doubles
(`--doubles`), so a GPU machine finds a check that works.
"""
import os
import struct
import subprocess

import pytest

from conftest import BUILD, require_root

CHECK = os.path.join(os.path.dirname(__file__), "..", "gpu", "gpu_check.py")
GPU_TRAIN = os.path.join(BUILD, "gpu", "gpu_train")
FATBIN_MAGIC = 0xBA55ED50


def fatbin_entries(path):
    """(kind, arch) of each entry of the program's .nv_fatbin: kind 1 PTX, 2 ELF (SASS)."""
    blob = path + ".fatbin"
    subprocess.run(["objcopy", "-O", "binary", "--only-section=.nv_fatbin", path, blob], check=True)
    with open(blob, "rb") as f:
        d = f.read()
    os.unlink(blob)
    out, off = set(), 0
    while off + 16 <= len(d):
        magic, _, hsz, fsz = struct.unpack_from("<IHHQ", d, off)
        if magic != FATBIN_MAGIC:
            break
        p, end = off + hsz, off + hsz + fsz
        while p + 32 <= end:
            kind, _, ehs, size = struct.unpack_from("<HHIQ", d, p)
            out.add((kind, struct.unpack_from("<I", d, p + 28)[0]))
            p += ehs + size
        off = end
    return out


def needed(path):
    r = subprocess.run(["readelf", "-d", path], capture_output=True, text=True, check=True)
    return {line.split("[")[1].split("]")[0] for line in r.stdout.splitlines() if "(NEEDED)" in line}


def run_check(tmp_path, *args):
    env = {k: v for k, v in os.environ.items() if k not in ("OUT", "CUDA_INJECTION64_PATH")}
    return subprocess.run(["python3", CHECK, "--build", BUILD, "--out", str(tmp_path), *args],
                          capture_output=True, text=True, timeout=600, env=env)


def test_workload_built_for_a100_and_h100():
    if not os.path.exists(GPU_TRAIN):
        pytest.skip("nvcc was not found at build time: tests/gpu's workload is not built")
    entries = fatbin_entries(GPU_TRAIN)
    assert {(2, 80), (2, 90), (1, 90)} <= entries, entries
    libs = needed(GPU_TRAIN)
    assert "libcudart.so.13" in libs and "libnccl.so.2" in libs, libs
    assert "libcuda.so.1" not in libs       # the runtime loads the driver, as nvcc's default
    assert "libcupti.so.13" in needed(os.path.join(BUILD, "gpu", "libcupti_holder.so"))


def test_check_skips_without_a_gpu(tmp_path):
    r = run_check(tmp_path)
    lines = r.stdout.splitlines()
    if not lines or not lines[0].startswith("SKIP gpu_check:"):
        pytest.skip("this machine has a GPU: the check ran for real\n" + r.stdout[-2000:])
    assert r.returncode == 0, r.stdout + r.stderr
    assert "this check runs on a machine with an NVIDIA GPU" in lines[0]
    assert lines[-1] == "gpu_check: 0 passed, 0 failed, 1 skipped"
    assert not any(line.startswith(("PASS", "FAIL")) for line in lines)


def test_check_runs_end_to_end_on_the_doubles(tmp_path):
    """Every check passes on the doubles, whose GPU is simulated: the check itself works."""
    require_root()
    if not os.path.exists(GPU_TRAIN):
        pytest.skip("nvcc was not found at build time: tests/gpu's workload is not built")
    r = run_check(tmp_path, "--doubles")
    assert r.returncode == 0, r.stdout + r.stderr
    results = [line.split(":")[0].split() for line in r.stdout.splitlines()
               if line.startswith(("PASS ", "FAIL ", "SKIP "))]
    assert results and all(status == "PASS" for status, _ in results), r.stdout
    names = {name for _, name in results}
    assert {"cupti_source", "kernel_names", "launch_flows", "clock_alignment", "memcpy_kinds", "pinned_pageable",
            "nccl_linked", "gpu_memory", "overhead", "clean_detach", "second_session", "ebpf_method",
            "other_subscriber", "other_subscriber_unharmed", "killed_injector"} <= names, names
    for f in ("gpu_check.json", "summary.json", "timeline.json.gz"):
        assert os.path.exists(tmp_path / f), f
