# SPDX-License-Identifier: MIT
"""Whole native stacks without frame pointers (issue 16: CFI unwinding).

Debian's python3 and python3-torch are built without frame pointers. A real PyTorch training
loop is profiled twice in one run, first with --unwind fp, then with the default (cfi): the
stacks must reach the thread's first frame, and the ATen/c10 frames must sit between the
Python frames and the leaves. Off-CPU stacks of Python threads blocked in a sleep and in a
futex must show their callers up to the start of the process or thread. Shared through a
cache directory, a second run takes its rows from the first run's files, and walks the same
stacks as a run that shares nothing.
"""
import errno
import json
import os
import subprocess

import pytest

from conftest import ROOT, load_summary, require_root, run_aiprof
from test_ebpf import folded

TORCH_TRAIN = os.path.join(ROOT, "tests", "workloads", "torch_train.py")
PYNESTED = os.path.join(ROOT, "tests", "workloads", "python_nested.py")
WAITERS = os.path.join(ROOT, "tests", "workloads", "py_waiters.py")
PYTHON = "/usr/bin/python3"
NATIVE_TORCH = ("at::", "c10::", "torch::")


def is_py(frame):
    return ".py:" in frame


def torch_under_python(frames):
    """ATen/c10/torch frames below (called from) the innermost Python frame."""
    py = [i for i, f in enumerate(frames) if is_py(f)]
    return bool(py) and any(f.startswith(NATIVE_TORCH) for f in frames[py[-1] + 1:])


def profile(pid, out, *extra, collectors="cpu,python", duration="3s"):
    r = run_aiprof(["profile", "--pid", str(pid), "--duration", duration, "--collectors",
                    collectors, "-o", str(out), "-q"] + list(extra))
    assert r.returncode == 0, r.stderr
    return load_summary(str(out))["ebpf"]


def has_torch():
    return os.path.exists("/usr/lib/python3/dist-packages/torch/__init__.py")


@pytest.mark.skipif(not has_torch(), reason="needs Debian's python3-torch")
def test_torch_training_loop_stacks_whole(procs, tmp_path):
    require_root()
    _, line = procs.start([PYTHON, "-u", TORCH_TRAIN, "--seconds", "60"], ready="ready",
                          timeout=60)
    pid = int(line.split("pid=")[1])

    fp = profile(pid, tmp_path / "fp", "--unwind", "fp", duration="2s")
    cfi = profile(pid, tmp_path / "cfi", "--unwind-cache", "none")

    # frame pointers alone: cut in nearly every sample (this is what CFI has to fix)
    assert fp["unwinding"]["method"] == "fp"
    assert fp["truncated_stack_share"] > 0.5, fp
    # CFI: the native stacks reach _start / start_thread
    uw = cfi["unwinding"]
    assert uw["method"] == "cfi"
    assert cfi["cpu_samples"] >= 150, cfi
    assert cfi["truncated_stack_share"] <= 0.05, uw
    assert uw["stacks_cfi"] > 0 and uw["ends"]["root"] >= 0.95 * uw["stacks_cfi"], uw
    # the tables: libtorch, libpython and libc among the modules, their size reported
    t = uw["tables"]
    assert t["modules"] >= 3 and t["cfi_section_bytes"] > 1 << 20, t
    assert 0 < t["frames_cached"] <= t["frames_cache_max"], t
    assert t["modules_decoded"] >= 3 and t["modules_from_shared_image"] == 0, t
    assert "none" in t["shared"]["off"], t

    stacks = folded(tmp_path / "cfi")
    total = sum(c for _, c in stacks)
    with_py = sum(c for s, c in stacks if any(is_py(f) for f in s))
    under = sum(c for s, c in stacks if torch_under_python(s))
    assert with_py >= 0.9 * total, (with_py, total)
    assert under >= 0.8 * total, (under, total)
    # the interpreter's own frames below the Python frames: the process's start at the root
    assert sum(c for s, c in stacks if "Py_BytesMain" in s) >= 0.9 * total
    # and the BLAS leaves are reached through ATen: some sample shows the GEMM under it
    assert any(torch_under_python(s) and "gemm" in s[-1].lower() for s, _ in stacks), \
        [s[-3:] for s, _ in stacks[:20]]


@pytest.mark.skipif(not has_torch(), reason="needs Debian's python3-torch")
def test_tables_shared_between_runs(procs, tmp_path):
    """Two aiprof runs on one machine, one cache directory: the first copies the modules'
    .eh_frame into it and puts the rows it decodes there; the second reads its rows from
    there (no module decoded from its own file) and its stacks are as whole."""
    require_root()
    _, line = procs.start([PYTHON, "-u", TORCH_TRAIN, "--seconds", "60"], ready="ready",
                          timeout=60)
    pid = int(line.split("pid=")[1])
    cache = tmp_path / "cache" / "unwind"
    runs = [profile(pid, tmp_path / f"run{i}", "--unwind-cache", str(cache), duration="2s")
            for i in range(2)]
    for eb in runs:
        assert eb["truncated_stack_share"] <= 0.05, eb["unwinding"]
        assert eb["unwinding"]["tables"]["shared"]["dir"] == str(cache)
    first, second = (eb["unwinding"]["tables"] for eb in runs)
    assert first["shared"]["images_built"] >= 3 and first["shared"]["inserts"] > 0, first
    # every module from its shared copy, but one with no file (the vDSO, when a sample
    # lands in it): read from the target's memory
    assert first["modules_from_memory"] <= 1, first
    assert first["modules_from_shared_image"] + first["modules_from_memory"] == \
        first["modules_decoded"] >= 3, first
    # the modules the first run met are not copied again (the second may meet a few more)
    assert second["shared"]["images"] - second["shared"]["images_built"] >= 3, second
    sh = second["shared"]
    assert sh["hits"] >= 0.8 * (sh["hits"] + sh["misses"]) and sh["rejected"] == 0, second
    # what a miss still decodes comes from the shared copy, never the module's own file
    assert second["modules_from_shared_image"] + second["modules_from_memory"] == \
        second["modules_decoded"], second
    assert second["frames_cache_bytes"] < 4096, second
    # nobody else may write there
    assert oct(os.stat(cache).st_mode & 0o777) == "0o700"
    files = os.listdir(cache)
    assert all(oct(os.stat(cache / f).st_mode & 0o777) == "0o600" for f in files), files
    assert {f.rsplit(".", 1)[1] for f in files} == {"uws", "cfi"}, files


def test_shared_rules_walk_the_same_stacks(procs, tmp_path):
    """A thread that never moves (stuck in pause() from its start): the dump with shared
    rules, cold and warm, names exactly the frames of the dump that shares nothing, through
    the kernel, the C library and the interpreter (no frame pointers) to the thread's start."""
    require_root()
    _, line = procs.start([PYTHON, "-u", WAITERS], ready="ready")
    pid = int(line.split("pid=")[1].split()[0])
    stuck = int(line.split("stuck=")[1].split()[0])
    cache = tmp_path / "unwind"

    def frames(*extra):
        r = run_aiprof(["stacks", "--pid", str(pid), "--format", "json"] + list(extra))
        assert r.returncode == 0, r.stderr
        (p,) = json.loads(r.stdout)["processes"]
        (t,) = [t for t in p["threads"] if t["tid"] == stuck]
        return [f["name"] for f in t["frames"]]

    want = frames("--unwind-cache", "none")
    assert "pause" in want and any(f.startswith("stuck (") for f in want), want
    assert want[-1] in ("clone3", "__clone3", "[libc.so.6]") and len(want) >= 12, want
    for run in ("cold", "warm"):
        assert frames("--unwind-cache", str(cache)) == want, run
    assert any(n.endswith(".cfi") for n in os.listdir(cache))


def test_offcpu_callers_of_sleep_and_futex(procs, tmp_path):
    require_root()
    _, line = procs.start([PYTHON, "-u", WAITERS], ready="ready")
    pid = int(line.split("pid=")[1].split()[0])
    eb = profile(pid, tmp_path, collectors="offcpu,python", duration="2s")
    uw = eb["unwinding"]
    assert eb["offcpu_events"] >= 100, eb
    assert uw["stacks_cfi"] >= 100 and uw["ends"]["root"] >= 0.95 * uw["stacks_cfi"], uw

    stacks = folded(tmp_path, "offcpu.folded")
    nap = [(s, c) for s, c in stacks if any(f.startswith("nap (") for f in s)]
    wait = [(s, c) for s, c in stacks if any(f.startswith("wait_once (") for f in s)]
    assert nap and wait, [s for s, _ in stacks]
    # main thread: from the C library's start of the process, through the interpreter's
    # main, to the Python frames, to the sleep
    s, _ = max(nap, key=lambda x: x[1])
    assert s[1] == "__libc_start_main" and "Py_BytesMain" in s, s
    assert s.index("Py_BytesMain") < s.index(next(f for f in s if f.startswith("napper (")))
    assert any(f.startswith("clock_nanosleep") for f in s), s
    # the thread: from where the C library starts threads, through the interpreter, to the
    # futex it waits on
    s, _ = max(wait, key=lambda x: x[1])
    assert "Py_BytesMain" not in s, s
    assert s[1] in ("clone3", "__clone3", "[libc.so.6]"), s
    assert any("futex" in f for f in s), s
    assert s.index(next(f for f in s if f.startswith("waiter ("))) > 2, s


def test_full_disk_under_cache_leaves_injector_running(procs, tmp_path):
    """The cache directory on a disk with no room (a 64 KiB tmpfs, smaller than one rules
    file): the injector profiles the window to the end, decodes every row itself, and the
    summary and the log say that the cache could not be used and why. Before the rules files
    were allocated up front, the first slot written into a hole of the sparse shared file
    was a SIGBUS that killed the injector mid-window."""
    require_root()
    mnt = tmp_path / "small"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k,mode=0700", "aiprof-full",
                       str(mnt)]).returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    try:
        proc, _ = procs.start([PYTHON, "-u", PYNESTED, "--seconds", "60"], ready="ready",
                              timeout=30)
        cache = mnt / "unwind"
        out = tmp_path / "out"
        r = run_aiprof(["profile", "--pid", str(proc.pid), "--duration", "2s",
                        "--collectors", "cpu,python", "--unwind-cache", str(cache),
                        "-o", str(out)])
        assert r.returncode == 0, r.stderr
        eb = load_summary(str(out))["ebpf"]
        assert eb["cpu_samples"] > 0, eb
        sh = eb["unwinding"]["tables"]["shared"]
        assert sh["dir"] == str(cache), sh
        assert sh["files"] == 0 and sh["files_failed"] >= 1, sh
        assert sh["files_error"] == os.strerror(errno.ENOSPC), sh
        assert "could not be made (No space left on device)" in r.stderr, r.stderr
        # the stacks are whole all the same: decoded here
        assert eb["truncated_stack_share"] <= 0.05, eb["unwinding"]
        assert proc.poll() is None, "the target died"
    finally:
        subprocess.run(["umount", "-l", str(mnt)])
