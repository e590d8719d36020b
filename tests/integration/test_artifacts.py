# SPDX-License-Identifier: MIT
"""The artifacts a person opens: the timeline passes a Chrome Trace Event schema check,
stays within its size budget, and report.html renders in headless Chromium with the
findings in it."""
import gzip
import json
import os
import re
import shutil
import subprocess
import tempfile
from collections import defaultdict

import pytest

from conftest import BUILD, ROOT, load_summary, load_timeline, require_root, run_aiprof, start_trainer

CATEGORIES = {"cuda_api", "cuda_kernel", "cuda_memcpy", "cuda_memory", "nccl", "rdma",
              "syscall", "cpu_sample", "offcpu", "python",
              "aiprof"}   # aiprof's own marks: the budget's pauses
BENCH = os.path.join(BUILD, "tests", "bench", "bench_artifacts")
PY_LAUNCH = os.path.join(ROOT, "tests", "workloads", "py_launch.py")
LIBPYLAUNCH = os.path.join(BUILD, "tests", "workloads", "libpylaunch.so")
LIBPYLAUNCH_NOFP = os.path.join(BUILD, "tests", "workloads", "libpylaunch_nofp.so")


def check_timeline(tl):
    """Schema: every event has ph/ts/pid/tid and a known category, metadata names its
    track, flows pair up, timestamps never go back within a track."""
    last = {}
    flows = defaultdict(lambda: {"s": 0, "f": 0})
    counts = defaultdict(int)
    for e in tl["traceEvents"]:
        assert {"ph", "ts", "pid", "tid"} <= set(e), e
        if e["ph"] == "M":
            assert e["name"] in ("process_name", "thread_name", "process_sort_index"), e
            assert "args" in e
            continue
        assert e["ph"] in ("X", "i", "s", "f"), e
        assert e.get("cat") in CATEGORIES, e
        assert isinstance(e["name"], str) and e["name"], e
        if e["ph"] == "X":
            assert e["dur"] >= 0, e
        if e["ph"] in ("s", "f"):
            flows[e["id"]][e["ph"]] += 1
            if e["ph"] == "f":
                assert e.get("bp") == "e", e
        track = (e["pid"], e["tid"])
        assert e["ts"] >= last.get(track, 0), (track, last.get(track), e)
        last[track] = e["ts"]
        counts[e["cat"]] += 1
    for fid, n in flows.items():
        assert n == {"s": 1, "f": 1}, (fid, n)
    assert tl["otherData"]["clock"].startswith("CLOCK_MONOTONIC")
    return counts, len(flows)


def test_timeline_schema_on_the_trainer(procs, tmp_path):
    require_root()
    p, pid = start_trainer(procs, "--ranks", "2", "--run-seconds", "60")
    out = tmp_path / "o"
    r = run_aiprof(["profile", "--pid", str(pid), "-d", "2s", "-o", str(out)])
    assert r.returncode == 0, r.stderr
    tl = load_timeline(out)
    counts, _ = check_timeline(tl)
    for cat in ("cuda_api", "cuda_memcpy", "nccl"):
        assert counts[cat] > 0, counts
    names = {e["args"]["name"] for e in tl["traceEvents"]
             if e["ph"] == "M" and e["name"] == "thread_name"}
    assert any("[rank 0]" in n for n in names) and any("[rank 1]" in n for n in names), names
    s = load_summary(out)
    assert s["timeline"]["events_aggregated"] == 0
    assert s["timeline"]["bytes"] <= 50 << 20


def test_timeline_flows_and_aggregation_synthetic(tmp_path):
    """CUPTI-style kernels with correlation ids (synthetic window): flows pair up; over
    the size budget events are folded, never dropped silently."""
    if not os.path.exists(BENCH):
        pytest.skip("bench_artifacts not built")
    out = tmp_path / "full"
    r = subprocess.run([BENCH, "--events", "60000", "--ranks", "2", "--out", str(out)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    counts, nflows = check_timeline(load_timeline(out))
    assert nflows > 1000 and counts["cuda_kernel"] > 1000
    s = load_summary(out)
    assert s["timeline"]["events_aggregated"] == 0
    assert s["analysis"]["gpu_timing"] == "cupti"
    assert s["analysis"]["gpu_busy"][0]["busy_pct"] > 0

    small = tmp_path / "budget"
    r = subprocess.run([BENCH, "--events", "300000", "--ranks", "2", "--out", str(small),
                        "--budget-mb", "4"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    check_timeline(load_timeline(small))
    s = load_summary(small)
    t = s["timeline"]
    assert t["events_aggregated"] > 0 and "over the size budget" in t["note"]
    assert t["bytes"] <= t["budget_bytes"], t
    assert t["events_in"] == s["events"]


def test_ten_second_window_stays_within_budget(procs, tmp_path):
    """The launch-heaviest trainer variant, 10 s: at most 50 MB uncompressed per rank."""
    require_root()
    p, pid = start_trainer(procs, "--ranks", "2", "--run-seconds", "60", "--fault", "small-kernels")
    out = tmp_path / "ten"
    r = run_aiprof(["profile", "--pid", str(pid), "-d", "10s", "-o", str(out)], timeout=180)
    assert r.returncode == 0, r.stderr
    s = load_summary(out)
    with gzip.open(out / "timeline.json.gz", "rb") as f:
        size = len(f.read())
    assert size == s["timeline"]["bytes"]
    assert size <= 2 * (50 << 20), size
    if s["timeline"]["events_aggregated"]:
        assert "over the size budget" in s["timeline"]["note"]
    check_timeline(load_timeline(out))


def chromium():
    for name in ("chromium", "chromium-browser"):
        path = shutil.which(name)
        if path:
            return path
    pytest.skip("chromium is not installed (scripts/install-deps.sh installs it)")


def headless(url, *extra):
    profile = tempfile.mkdtemp(prefix="aiprof-chromium-")
    try:
        return subprocess.run([chromium(), "--headless", "--no-sandbox", "--disable-gpu",
                               "--no-first-run", "--disable-background-networking",
                               "--disable-component-update", "--disable-sync",
                               f"--user-data-dir={profile}", "--window-size=1280,2000"]
                              + list(extra) + [url], capture_output=True, text=True, timeout=120)
    finally:
        shutil.rmtree(profile, ignore_errors=True)


def test_report_renders_in_headless_chromium(procs, tmp_path):
    require_root()
    p, pid = start_trainer(procs, "--ranks", "2", "--run-seconds", "60", "--fault", "excessive-sync")
    out = tmp_path / "rep"
    r = run_aiprof(["profile", "--pid", str(pid), "-d", "2s", "-o", str(out)])
    assert r.returncode == 0, r.stderr
    report = out / "report.html"
    assert f"report: {report}" in r.stderr
    for name in ("flamegraph-gpu.svg", "summary.json", "timeline.json.gz"):
        assert (out / name).exists(), name
    s = load_summary(out)
    assert s["findings"]
    shot = tmp_path / "report.png"
    res = headless(f"file://{report}", f"--screenshot={shot}")
    assert shot.exists(), res.stderr
    png = shot.read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 50_000, len(png)
    dom = headless(f"file://{report}", "--dump-dom").stdout
    for f in s["findings"]:
        assert f["category"] in dom
        assert f["remedy"].split(":")[0] in dom
    assert "Open the timeline" in dom and "ui.perfetto.dev" in dom
    # the flame graphs are inline and their script ran without breaking the page
    assert dom.count('class="aiprof-flamegraph"') >= 1
    shutil.copy(shot, os.environ.get("AIPROF_REPORT_SHOT", str(tmp_path / "kept.png")))


def profile_trainer_with_cupti(procs, out):
    """Profiles a 2-rank trainer with the fake CUPTI for 2 s into out: (pid, summary), or
    skips when this trainer or CUPTI cannot give GPU timing."""
    require_root()
    helptext = subprocess.run([os.path.join(BUILD, "tests", "workloads", "trainer"), "--help"],
                              capture_output=True, text=True).stdout
    if "--cupti" not in helptext:
        pytest.skip("this trainer has no fake CUPTI (--cupti)")
    p, pid = start_trainer(procs, "--ranks", "2", "--run-seconds", "60", "--cupti")
    r = run_aiprof(["profile", "--pid", str(pid), "-d", "2s", "-o", str(out)])
    assert r.returncode == 0, r.stderr
    s = load_summary(out)
    if s["analysis"]["gpu_timing"] != "cupti":
        pytest.skip("CUPTI did not start: " + s["targets"][0]["gpu_timing"].get("reason", ""))
    return pid, s


def test_timeline_with_gpu_timing(procs, tmp_path):
    """With CUPTI records (the trainer's fake CUPTI): kernels on GPU stream tracks named
    with their rank, a flow from every launch to its kernel, GPU busy per stream."""
    out = tmp_path / "cupti"
    _, s = profile_trainer_with_cupti(procs, out)
    tl = load_timeline(out)
    counts, nflows = check_timeline(tl)
    assert counts["cuda_kernel"] > 0 and nflows > 0
    assert s["timeline"]["flows"] == nflows
    names = {e["args"]["name"] for e in tl["traceEvents"]
             if e["ph"] == "M" and e["name"] == "thread_name"}
    assert any(n.startswith("GPU 0 stream") and "[rank" in n for n in names), names
    busy = s["analysis"]["gpu_busy"]
    assert busy and all(0 < b["busy_pct"] <= 100 and b["rank"] in (0, 1) for b in busy)
    assert s["analysis"]["top_kernels"]["by"] == "gpu_time"


# ---- the GPU-launch flame graph: CPU call stacks at kernel launches -------------------------

def load_folded(path):
    rows = []
    with open(path) as f:
        for line in f:
            stack, w = line.rstrip("\n").rsplit(" ", 1)
            rows.append((stack.split(";"), int(w)))
    return rows


def in_order(frames, wanted):
    """Whether the frames named in wanted appear in frames in that order (root first);
    a name ending in " (" matches a Python frame "name (file:line)"."""
    it = iter(frames)
    return all(any(f == w or (w.endswith(" (") and f.startswith(w)) for f in it) for w in wanted)


def weight_by_kernel(rows):
    by = defaultdict(int)
    for frames, w in rows:
        by[frames[-1]] += w
    return by


def gpu_title(out):
    svg = (out / "flamegraph-gpu.svg").read_text()
    return svg.split('class="fg-title"', 1)[1].split(">", 1)[1].split("<", 1)[0]


def test_gpu_flamegraph_call_stacks_weighted_by_kernel_time(procs, tmp_path):
    """With CUPTI kernel records: every launch's stack holds the trainer's real callers in
    order under the API and the kernel, and the weights are the kernels' GPU ns: per
    kernel and in total equal to the GPU time summary.json reports."""
    out = tmp_path / "gpu"
    pid, s = profile_trainer_with_cupti(procs, out)
    rows = load_folded(out / "gpu.folded")
    g = s["gpu_flamegraph"]
    assert g["weight"] == "gpu_ns" and g["launches"] > 0
    assert g["launches_with_stack"] == g["launches"], g
    # the callers, root first, and the launch on top
    paths = {
        "sgemm_fwd_kernel": ["rank_main", "train_step", "compute", "cudaLaunchKernel"],
        "relu_bwd_kernel": ["rank_main", "train_step", "compute", "cudaLaunchKernel"],
        "adam_update_kernel": ["rank_main", "train_step", "cudaLaunchKernel"],
        "fused_layernorm_kernel": ["rank_main", "train_step", "cuLaunchKernel"],
    }
    for kernel, callers in paths.items():
        mine = [f for f, _ in rows if f[-1] == kernel and f[1] != "[launch not recorded]"]
        assert mine, (kernel, rows)
        for f in mine:
            assert f[0] == f"trainer-{pid}", f
            assert f[-2] == callers[-1], f
            assert in_order(f, callers), (kernel, f)
            if kernel == "adam_update_kernel" or kernel == "fused_layernorm_kernel":
                assert "compute" not in f, f   # launched by train_step itself
    # no raw address among the trainer's frames (a frame is a name, or [module] where the
    # module has no symbol there, as libc's internal ones)
    raw = [f for fr, _ in rows for f in fr if re.search(r"0x[0-9a-f]{4,}", f)]
    assert not raw, raw[:5]
    # weights: GPU ns, per kernel and in total those of summary.json
    total = sum(w for _, w in rows)
    assert total == g["total"]
    tops = s["analysis"]["top_kernels"]["kernels"]
    assert len(tops) < 20   # all of them, so the sum is the window's kernel time
    assert abs(total - round(sum(k["gpu_us"] for k in tops) * 1000)) <= len(tops)
    by = weight_by_kernel(rows)
    for k in tops:
        assert abs(by[k["name"]] - round(k["gpu_us"] * 1000)) <= 1, (k, by[k["name"]])
    assert "weight: kernel time" in gpu_title(out)


def test_gpu_flamegraph_by_launch_count_without_gpu_timing(procs, tmp_path):
    """Without CUPTI: one per launch, per kernel equal to the launches summary.json counts,
    and the title says so."""
    require_root()
    p, pid = start_trainer(procs, "--ranks", "2", "--run-seconds", "60")
    out = tmp_path / "api"
    r = run_aiprof(["profile", "--pid", str(pid), "-d", "2s", "-o", str(out)])
    assert r.returncode == 0, r.stderr
    s = load_summary(out)
    assert s["analysis"]["gpu_timing"] == "api"
    rows = load_folded(out / "gpu.folded")
    g = s["gpu_flamegraph"]
    assert g["weight"] == "launches"
    assert sum(w for _, w in rows) == g["total"] == g["launches"] == sum(k["launches"] for k in s["kernels"])
    by = weight_by_kernel(rows)
    assert {k["name"]: k["launches"] for k in s["kernels"]} == dict(by)
    for frames, _ in rows:
        assert in_order(frames, ["rank_main", "train_step"]), frames
    assert "weight: launch count" in gpu_title(out)


def test_gpu_flamegraph_of_a_process_that_exits_in_the_window_is_named(procs, tmp_path):
    """`make demo`'s case: the trainer ends inside the window, and its launch stacks are
    symbolized after it is gone: every frame of its callers is named as if it had lived
    (its code was held while it ran), none is a raw address."""
    require_root()
    p, pid = start_trainer(procs, "--ranks", "2", "--run-seconds", "1.5")
    out = tmp_path / "gone"
    r = run_aiprof(["profile", "--pid", str(pid), "-d", "5s", "-o", str(out)])
    assert r.returncode == 0, r.stderr
    p.wait(timeout=30)
    s = load_summary(out)
    assert s["targets"][0].get("exit", {}).get("how") == "exited with code 0", s["targets"][0]
    rows = load_folded(out / "gpu.folded")
    assert rows and s["gpu_flamegraph"]["launches_with_stack"] > 0, s["gpu_flamegraph"]
    raw = [f for fr, _ in rows for f in fr if re.search(r"0x[0-9a-f]{4,}", f)]
    assert not raw, raw[:5]
    for frames, _ in rows:
        if frames[1] != "[launch not recorded]":
            assert in_order(frames, ["rank_main", "train_step"]), frames


def python_interpreters():
    found = [("debian", "/usr/bin/python3")]
    for v in ("3.12.1", "3.13.0"):
        py = os.path.expanduser(f"~/.pyenv/versions/{v}/bin/python{v[:4]}")
        if os.path.exists(py):
            found.append((v, py))
    return found


@pytest.mark.parametrize("name,python", python_interpreters(), ids=[n for n, _ in python_interpreters()])
def test_gpu_flamegraph_python_frames(procs, tmp_path, name, python):
    """A Python training loop launching through a compiled extension: the Python callers
    (file and line) sit below the extension's native frames, in call order."""
    require_root()
    p, line = procs.start([python, PY_LAUNCH, "--lib", LIBPYLAUNCH, "--seconds", "60", "--cupti"],
                          ready="ready")
    pid = int(line.split("pid=")[1])
    out = tmp_path / "py"
    r = run_aiprof(["profile", "--pid", str(pid), "-d", "2s", "-o", str(out)])
    assert r.returncode == 0, r.stderr
    s = load_summary(out)
    rows = [(f, w) for f, w in load_folded(out / "gpu.folded") if f[1] != "[launch not recorded]"]
    want = {
        "py_matmul_kernel": ["main (", "train (", "train_step (", "forward_pass (", "pl_forward",
                             "cudaLaunchKernel"],
        "py_grad_kernel": ["main (", "train (", "train_step (", "backward_pass (", "pl_backward",
                           "cudaLaunchKernel"],
    }
    for kernel, callers in want.items():
        mine = [f for f, _ in rows if f[-1] == kernel]
        assert mine, (kernel, rows)
        for f in mine:
            assert in_order(f, callers), (kernel, f)
            assert f[-2] == "cudaLaunchKernel"
            assert any(x.startswith("forward_pass (") and "py_launch.py:" in x for x in f) or \
                kernel != "py_matmul_kernel", f
    if s["analysis"]["gpu_timing"] == "cupti":
        tops = s["analysis"]["top_kernels"]["kernels"]
        total = sum(w for _, w in load_folded(out / "gpu.folded"))
        assert total == s["gpu_flamegraph"]["total"]
        assert abs(total - round(sum(k["gpu_us"] for k in tops) * 1000)) <= len(tops)


def test_gpu_flamegraph_through_code_without_frame_pointers(procs, tmp_path):
    """Debian's python3 and an extension built without frame pointers (as libtorch is):
    new launch sites are unwound by CFI, so every stack runs from the C library's start
    through the interpreter, the Python frames in place, ctypes and libffi to the
    extension's own functions; --unwind fp, on the same process, loses the extension's
    frames (the test would fail on a frame-pointer walk)."""
    require_root()
    p, line = procs.start(["/usr/bin/python3", PY_LAUNCH, "--lib", LIBPYLAUNCH_NOFP,
                           "--seconds", "60"], ready="ready")
    pid = int(line.split("pid=")[1])
    stacks = {}
    for mode in ("cfi", "fp"):
        out = tmp_path / mode
        r = run_aiprof(["profile", "--pid", str(pid), "-d", "2s", "--unwind", mode, "-o", str(out)])
        assert r.returncode == 0, r.stderr
        g = load_summary(out)["gpu_flamegraph"]
        assert g["launches"] > 0 and g["launches_with_stack"] == g["launches"], g
        stacks[mode] = (g, load_folded(out / "gpu.folded"))
    g, rows = stacks["cfi"]
    # a launch before the library's unwinder was ready is walked by frame pointers (and its
    # call site again later, by CFI)
    assert g["launches_stack_cfi"] >= 0.9 * g["launches"], g
    want = {
        "py_matmul_kernel": ["__libc_start_main", "Py_BytesMain", "main (", "train_step (",
                             "forward_pass (", "ffi_call", "pl_forward", "cudaLaunchKernel"],
        "py_grad_kernel": ["__libc_start_main", "Py_BytesMain", "main (", "train_step (",
                           "backward_pass (", "ffi_call", "pl_backward", "cudaLaunchKernel"],
    }
    for kernel, callers in want.items():
        mine = [(f, w) for f, w in rows if f[-1] == kernel]
        assert mine, (kernel, rows)
        whole = sum(w for f, w in mine if in_order(f, callers) and f[-2] == "cudaLaunchKernel")
        assert whole >= 0.9 * sum(w for _, w in mine), (kernel, mine)
    g, rows = stacks["fp"]
    assert g["launches_stack_cfi"] == 0, g
    assert rows and not any("pl_forward" in f or "pl_backward" in f or "ffi_call" in f
                            for f, _ in rows), rows

