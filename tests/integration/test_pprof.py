# SPDX-License-Identifier: MIT
"""profile.pb.gz, read by a real reader: Debian's Go toolchain's `go tool pprof` (issue 19).

The same top functions with the same weights as stacks.folded (on-CPU samples),
offcpu.folded (off-CPU time) and gpu.folded (the GPU launches, by their kernels' GPU time);
Python frames as functions with their files and lines; the modules as mappings with their
build-ids.
"""
import json
import os
import re
import shutil
import subprocess

import pytest

from conftest import BUILD, ROOT, load_summary, require_root, run_aiprof, start_trainer
from test_artifacts import load_folded, profile_trainer_with_cupti
from test_ebpf import folded

HOT = os.path.join(BUILD, "tests", "workloads", "hot_functions")
BLOCKING = os.path.join(BUILD, "tests", "workloads", "blocking_io")
PYNESTED = os.path.join(ROOT, "tests", "workloads", "python_nested.py")

def pprof(*args):
    if not shutil.which("go"):
        pytest.fail("go is missing: scripts/install-deps.sh installs golang-go")
    r = subprocess.run(["go", "tool", "pprof"] + list(args), capture_output=True, text=True,
                       timeout=120, env=dict(os.environ, HOME=os.environ.get("HOME", "/root")))
    assert r.returncode == 0, r.stderr
    return r.stdout


def top(path, index):
    """{function: flat} from `go tool pprof -top -sample_index=INDEX -unit=...`."""
    out = pprof("-top", "-nodecount=1000", "-nodefraction=0", f"-sample_index={index}",
                "-unit=" + ("minimum" if index == "samples" else "us"), path)
    rows = {}
    for line in out.splitlines():
        m = re.match(r"\s*([\d.]+)(\w*)\s+[\d.]+%\s+[\d.]+%\s+[\d.]+\w*\s+[\d.]+%\s+(.*)$", line)
        if m:
            rows[m.group(3).strip()] = float(m.group(1))
    return rows


def leaf_weights(stacks):
    w = {}
    for s, c in stacks:
        leaf = s[-1][:-4] if s[-1].endswith("_[k]") else s[-1]
        w[leaf] = w.get(leaf, 0) + c
    return w


def start(procs, argv):
    p, line = procs.start(argv, ready="ready")
    return int(line.split("pid=")[1].split()[0])


def test_same_top_functions_as_the_folded_stacks(procs, tmp_path):
    require_root()
    pid = start(procs, [HOT, "--seconds", "30"])
    r = run_aiprof(["profile", "--pid", str(pid), "--duration", "2s", "-o", str(tmp_path), "-q"])
    assert r.returncode == 0, r.stderr
    path = str(tmp_path / "profile.pb.gz")
    want = leaf_weights(folded(tmp_path))
    got = top(path, "samples")
    best = sorted(want, key=want.get, reverse=True)[:5]
    assert sum(want.values()) >= 100
    for f in best:
        assert got.get(f) == want[f], (f, got.get(f), want[f], sorted(got.items())[:10])
    # on-CPU time: samples x the sampling period (99 Hz)
    cpu = top(path, "cpu")
    assert abs(cpu[best[0]] - want[best[0]] * 1e6 / 99) <= 0.02 * cpu[best[0]], (cpu[best[0]], want[best[0]])
    raw = pprof("-raw", path)
    # mapping + build-id (CI once saw only [vdso] here: the symbolizer's view and its
    # modules, for whoever looks next)
    assert re.search(r"hot_functions.*[0-9a-f]{40}", raw), (
        raw[raw.find("Mappings"):], json.dumps(load_summary(str(tmp_path))["ebpf"]["targets"])[:3000])


def test_off_cpu_time_and_python_frames(procs, tmp_path):
    require_root()
    pid = start(procs, [BLOCKING])
    r = run_aiprof(["profile", "--pid", str(pid), "--duration", "2s", "--collectors",
                    "offcpu", "-o", str(tmp_path / "b"), "-q"])
    assert r.returncode == 0, r.stderr
    want = leaf_weights(folded(tmp_path / "b", "offcpu.folded"))   # microseconds
    got = top(str(tmp_path / "b" / "profile.pb.gz"), "off_cpu")
    best = max(want, key=want.get)
    assert abs(got[best] - want[best]) <= 1 + 0.001 * want[best], (best, got.get(best), want[best])

    pid = start(procs, ["/usr/bin/python3", "-u", PYNESTED])
    r = run_aiprof(["profile", "--pid", str(pid), "--duration", "2s", "--collectors",
                    "cpu,python", "-o", str(tmp_path / "p"), "-q"])
    assert r.returncode == 0, r.stderr
    raw = pprof("-raw", str(tmp_path / "p" / "profile.pb.gz"))
    # a Python function with its file and line, as `go tool pprof -raw` lists locations
    assert re.search(r"\b\w+ " + re.escape(PYNESTED) + r":\d+", raw), raw[:3000]


def test_gpu_launches_weighted_as_the_gpu_flame_graph(procs, tmp_path):
    """The launches' call stacks, weighted by their kernels' GPU time (CUPTI): per kernel
    (the leaf, as in gpu.folded) the same nanoseconds; with the library collectors alone
    (no eBPF stacks) the file is still written, the GPU's sample type the default."""
    out = tmp_path / "gpu"
    profile_trainer_with_cupti(procs, out)
    want = {}
    for frames, w in load_folded(out / "gpu.folded"):
        want[frames[-1]] = want.get(frames[-1], 0) + w      # ns
    got = top(str(out / "profile.pb.gz"), "gpu_time")       # us
    assert want and sum(want.values()) > 0
    for kernel, ns in want.items():
        assert abs(got.get(kernel, 0) * 1000 - ns) <= max(1000, 0.001 * ns), (kernel, got, want)
    # the launches' callers are functions of the profile too, under the API call
    raw = pprof("-raw", str(out / "profile.pb.gz"))
    assert "gpu_time/nanoseconds" in raw and "cudaLaunchKernel" in raw, raw[:2000]

    p, pid = start_trainer(procs, "--ranks", "2", "--run-seconds", "60", "--cupti")
    r = run_aiprof(["profile", "--pid", str(pid), "-d", "2s", "--no-ebpf", "-o",
                    str(tmp_path / "lib"), "-q"])
    assert r.returncode == 0, r.stderr
    raw = pprof("-raw", str(tmp_path / "lib" / "profile.pb.gz"))
    kinds = raw.split("Samples:", 1)[1].splitlines()[1]
    assert re.search(r"gpu_(time/nanoseconds|launches/count)\[dflt\]", kinds), kinds

