# SPDX-License-Identifier: MIT
"""The eBPF collectors (issue: CPU and off-CPU stacks with Python frames, syscalls).

Each test starts its own workload, profiles it, and checks what a user would: the CPU split
between two known functions in stacks.folded, kernel frames of a syscall-heavy thread,
Python function names in order, the off-CPU time and slow-syscall events of a thread that
reads a pipe and one that fsyncs a file (path and bytes), and that no other process shows
up. Workloads: tests/workloads/hot_functions.c, blocking_io.c, python_nested.py.
"""
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile

import pytest

from conftest import (AIPROF, BUILD, ROOT, TRAINER, events, kernel_task_work, load_summary,
                      load_timeline, require_root,
                      run_aiprof, start_trainer)

WORKLOADS = os.path.join(BUILD, "tests", "workloads")
HOT = os.path.join(WORKLOADS, "hot_functions")
BLOCKING = os.path.join(WORKLOADS, "blocking_io")
PYNESTED = os.path.join(ROOT, "tests", "workloads", "python_nested.py")
EBPF_ONLY = ["--collectors", "cpu,offcpu,syscalls,python"]


def cpu_seconds(pid):
    """CPU time (user + system) the process has used so far, in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def kv(line):
    return dict(x.split("=", 1) for x in line.split()[1:])


def folded(outdir, name="stacks.folded"):
    """[(frames, count)] from a folded-stacks file."""
    out = []
    with open(os.path.join(outdir, name)) as f:
        for line in f:
            stack, count = line.rstrip("\n").rsplit(" ", 1)
            out.append((stack.split(";"), int(count)))
    return out


def stack_frames(tl, sf):
    """Frame names of a timeline stack (stackFrames node id), root first."""
    frames, node = [], str(sf)
    while node:
        f = tl["stackFrames"][node]
        frames.append(f["name"])
        node = f.get("parent")
    return frames[::-1]


def assert_only(tl, pid, tids):
    for e in tl["traceEvents"]:
        assert e["pid"] == pid, e
        if e.get("cat") in ("cpu_sample", "offcpu", "syscall"):
            assert e["tid"] in tids, e


def tids_of(pid):
    return {int(t) for t in os.listdir(f"/proc/{pid}/task")}


@pytest.fixture
def disk_dir():
    """A folder on a real filesystem (fsync on tmpfs returns at once): inside the build."""
    d = tempfile.mkdtemp(prefix="ebpf-io-", dir=BUILD)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def test_cpu_split_kernel_frames_and_no_foreign_pids(procs, tmp_path):
    require_root()
    p, line = procs.start([HOT, "--seconds", "60"], ready="ready")
    info = kv(line)
    pid, hot_tid, sys_tid = int(info["pid"]), int(info["hot_tid"]), int(info["sys_tid"])
    # a process nobody asked for, that sleeps, reads pipes and fsyncs all the time (what
    # the off-CPU and syscall programs see): it must not show up anywhere
    _, other = procs.start([BLOCKING, "--dir", str(tmp_path), "--chunk", "65536", "--seconds", "60"],
                           ready="ready")
    other_pid = int(kv(other)["pid"])
    out = tmp_path / "out"
    # 499 Hz: enough samples for the split even when the machine is busy and the thread
    # gets a fraction of a CPU (the split is in the thread's CPU time, whatever its share)
    r = run_aiprof(["profile", "--pid", str(pid), "-d", "4s", "-o", str(out), "--frequency", "499"]
                   + EBPF_ONLY)
    assert r.returncode == 0, r.stderr
    tids = tids_of(pid)

    st = folded(out)
    assert st and all(frames[0] == f"hot_functions-{pid}" for frames, _ in st), st[:3]
    a = sum(n for frames, n in st if "hot_a" in frames)
    b = sum(n for frames, n in st if "hot_b" in frames)
    assert a + b >= 100, (a, b)
    share = a / (a + b)
    print(f"hot_a share {share:.3f} of {a + b} samples (expected 0.75)")
    assert 0.65 <= share <= 0.85, (a, b)
    # the caller is there too: frame pointers walked from the leaf up
    assert any(frames[-2:] == ["hot_loop", "hot_a"] for frames, _ in st)

    tl = load_timeline(out)
    assert_only(tl, pid, tids)
    assert other_pid not in {e["pid"] for e in tl["traceEvents"]}
    assert not any(str(other_pid) in frames[0] for frames, _ in st)
    sys_samples = [e for e in events(tl, "cpu_sample") if e["tid"] == sys_tid]
    assert len(sys_samples) >= 20
    with_kernel = [e for e in sys_samples if any(f.endswith("_[k]") for f in stack_frames(tl, e["sf"]))]
    assert len(with_kernel) >= 0.8 * len(sys_samples), (len(with_kernel), len(sys_samples))
    assert any("sys_spin" in " ".join(stack_frames(tl, e["sf"])) and
               any("read" in f and f.endswith("_[k]") for f in stack_frames(tl, e["sf"]))
               for e in with_kernel)
    assert {e["tid"] for e in events(tl, "cpu_sample")} <= {hot_tid, sys_tid, pid}

    s = load_summary(out)
    eb = s["ebpf"]
    assert eb["state"] == "on" and {"cpu", "offcpu", "syscalls"} <= set(eb["collectors"])
    assert eb["foreign_records"] == 0
    assert eb["targets"][0]["pid"] == pid and eb["targets"][0]["cpu_samples"] >= 200
    assert 0 <= eb["truncated_stack_share"] <= 1
    assert not any("eBPF" in n for n in s["not_collected"])
    # eBPF only: nothing was injected
    with open(f"/proc/{pid}/maps") as f:
        assert "libaiprof" not in f.read()
    # the build-ids of what was sampled are in the artifacts
    mods = {m["path"]: m["build_id"] for m in eb["targets"][0]["modules"]}
    assert re.fullmatch(r"[0-9a-f]{40}", mods[HOT]), mods


def python_interpreters():
    found = [("debian", "/usr/bin/python3")]
    for v in ("3.11.7", "3.12.1", "3.13.0"):
        for py in glob.glob(os.path.expanduser(f"~/.pyenv/versions/{v}/bin/python{v[:4]}")):
            found.append((v, py))
    return found


@pytest.mark.parametrize("name,python", python_interpreters(), ids=[n for n, _ in python_interpreters()])
def test_python_frames_in_order(procs, tmp_path, name, python):
    require_root()
    p, line = procs.start([python, PYNESTED, "--seconds", "60"], ready="ready")
    pid = int(kv(line)["pid"])
    out = tmp_path / "out"
    cpu0 = cpu_seconds(pid)
    r = run_aiprof(["profile", "--pid", str(pid), "-d", "3s", "-o", str(out),
                    "--collectors", "cpu,python"])
    cpu = cpu_seconds(pid) - cpu0
    assert r.returncode == 0, r.stderr
    version = subprocess.run([python, "-c", "import platform; print(platform.python_version())"],
                             capture_output=True, text=True).stdout.strip()
    s = load_summary(out)
    py = s["ebpf"]["targets"][0]["python"]
    assert py.get("version") == version, py

    st = folded(out)
    total = sum(n for _, n in st)
    in_order = merged = 0
    for frames, n in st:
        idx = {}
        for i, f in enumerate(frames):
            for fn in ("outer", "middle", "inner"):
                if f.startswith(fn + " (") and f.endswith(")") and "python_nested.py:" in f:
                    idx.setdefault(fn, i)
        if len(idx) == 3 and idx["outer"] < idx["middle"] < idx["inner"]:
            in_order += n
            # native frames on top of the Python ones (the interpreter, a C function)
            if any(not f.endswith(".py)") and ".py:" not in f for f in frames[idx["inner"] + 1:]):
                merged += n
    print(f"python {version}: {in_order}/{total} samples with outer>middle>inner, "
          f"{merged} with native frames merged on top")
    # a loaded machine gives the workload less CPU: expect samples for the CPU it got
    assert total >= min(50, 0.5 * 99 * cpu), (total, cpu)
    assert total >= 10, total
    assert in_order >= 0.9 * total, (in_order, total, st[:5])
    assert merged >= 0.1 * total, (merged, total)


LATE_LIB = r"""
import ctypes, os, random, sys, time
# a copy of a library python3 does not link (nor ctypes load): a new file, mapped only when
# loaded; no shutil, whose import loads libz and libbz2
with open("/lib/x86_64-linux-gnu/libbz2.so.1.0", "rb") as f, open(sys.argv[1], "wb") as g:
    g.write(f.read())
print("ready pid=%d" % os.getpid(), flush=True)
while not os.path.exists(sys.argv[2]):   # on the CPU until told: the window's first stacks
    sum(range(1000))
lib = ctypes.CDLL(sys.argv[1])
data = bytes(random.getrandbits(8) for _ in range(1 << 18))
out, n = ctypes.create_string_buffer(len(data) * 2 + 600), ctypes.c_uint()
end = time.time() + 60
while time.time() < end:
    n.value = len(out)
    lib.BZ2_bzBuffToBuffCompress(out, ctypes.byref(n), data, len(data), 9, 0, 30)
"""


def test_library_loaded_in_the_window_is_symbolized(procs, tmp_path):
    """A library the target loads after the window opened (its addresses in no mapping the
    symbolizer read at the start) is named in the stacks: the symbolizer reads the maps again
    when the process's executable mappings changed."""
    require_root()
    script, lib, go = tmp_path / "late_lib.py", tmp_path / "libbz2late.so.1", tmp_path / "go"
    script.write_text(LATE_LIB)
    p, line = procs.start([sys.executable, str(script), str(lib), str(go)], ready="ready")
    pid = int(kv(line)["pid"])
    out = tmp_path / "out"
    a = subprocess.Popen([AIPROF, "profile", "--pid", str(pid), "-d", "4s", "-o", str(out),
                          "--collectors", "cpu"], stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True)
    err = []
    for l in a.stderr:
        err.append(l)
        if "recording" in l:
            go.write_text("")            # the window is open: load it now
            break
    err += a.stderr.readlines()
    assert a.wait(timeout=120) == 0, "".join(err)
    assert go.exists(), "".join(err)
    st = folded(out)
    total = sum(n for _, n in st)
    # its exported functions by name, the others as [libbz2late.so.1]
    late = sum(n for frames, n in st if any("BZ2_" in f or "libbz2late" in f for f in frames))
    bare = sum(n for frames, n in st if len(frames) == 1)
    print(f"{late}/{total} samples in the library loaded in the window, {bare} with no frames")
    assert total >= 20, st[:5]
    # most of the window in it, under load too; an address of it looked up before the maps
    # were read again (at most 200 ms) is not kept unknown for the rest of the window
    assert late >= total / 2, (late, total, sorted(st, key=lambda x: -x[1])[:4])
    assert bare <= 30, (bare, total)


def test_offcpu_and_slow_syscalls_with_paths_and_bytes(procs, tmp_path, disk_dir):
    require_root()
    p, line = procs.start([BLOCKING, "--dir", disk_dir, "--chunk", str(1 << 20), "--chunks", "4",
                           "--seconds", "60"], ready="ready")
    info = kv(line)
    pid, reader, syncer = int(info["pid"]), int(info["reader_tid"]), int(info["syncer_tid"])
    pipe_bytes, fsync_bytes, path = int(info["pipe_bytes"]), int(info["fsync_bytes"]), info["path"]
    out = tmp_path / "out"
    # default collectors: the library is injected too, and both kinds of events coexist
    r = run_aiprof(["profile", "--pid", str(pid), "-d", "3s", "-o", str(out)])
    assert r.returncode == 0, r.stderr
    tl = load_timeline(out)
    assert_only(tl, pid, tids_of(pid))

    # the reader sleeps in read() on the pipe for ~50 ms at a time
    off_reader = [e for e in events(tl, "offcpu") if e["tid"] == reader]
    assert len(off_reader) >= 10, len(off_reader)
    assert all(e["args"]["syscall"] == "read" and "pipe_read" in e["args"]["wchan"]
               for e in off_reader), off_reader[:3]
    durs = sorted(e["dur"] for e in off_reader)
    assert 20_000 <= durs[len(durs) // 2] <= 200_000, durs  # microseconds
    assert all(e["args"]["state"] == "S" for e in off_reader)
    sys_reads = [e for e in events(tl, "syscall", "read") if e["tid"] == reader]
    assert len(sys_reads) >= 10
    assert all(re.fullmatch(r"pipe:\[\d+\]", e["args"]["path"]) for e in sys_reads), sys_reads[:3]
    assert all(e["args"]["bytes"] == pipe_bytes and e["args"]["ret"] == pipe_bytes
               for e in sys_reads), sys_reads[:3]

    # the syncer waits in fsync(): off-CPU there, and slow fsync events naming the file
    off_sync = [e for e in events(tl, "offcpu") if e["tid"] == syncer and
                e["args"].get("syscall") == "fsync"]
    assert off_sync, [e["name"] for e in events(tl, "offcpu") if e["tid"] == syncer]
    # where the kernel refuses a task work from sched_switch (some 6.18 kernels) every call
    # is traced, and said so
    tw, why = kernel_task_work()
    check_fsyncs(tl, syncer, path, fsync_bytes, every_call=not tw)
    # off-CPU stacks: folded, weights in microseconds, the kernel side down to the wait
    off = folded(out, "offcpu.folded")
    assert any("fsync" in ";".join(f) and any("fsync" in x and x.endswith("_[k]") for x in f)
               for f, _ in off)

    s = load_summary(out)
    t = s["targets"][0]
    assert t["injection"] in ("ptrace", "ptrace-direct") and t["state"] == "profiled"
    eb = s["ebpf"]["targets"][0]
    reasons = {x["reason"] for x in eb["offcpu"]["top_reasons"]}
    assert any(x.startswith("read: ") and "pipe_read" in x for x in reasons), reasons
    table = {x["name"]: x for x in eb["syscalls"]}
    assert table["fsync"]["count"] >= 3 and table["fsync"]["slow"] >= 3
    assert table["read"]["count"] >= 10 and table["read"]["max_us"] >= 20_000
    assert eb["offcpu"]["blocks"] >= len(off_reader)
    assert s["ebpf"]["syscalls_counted"] == ("gave_up_cpu" if tw else "every_call"), s["ebpf"]
    if tw:
        assert s["ebpf"]["task_work"] == "used", s["ebpf"]["task_work"]
    else:
        # the kernel's own words, in the summary and on the terminal
        assert why.split("; ")[0] in s["ebpf"]["task_work"], (why, s["ebpf"]["task_work"])
        assert "this kernel refused a task work scheduled from sched_switch (" in r.stderr
        assert "puts every task's system calls on the kernel's slow path" in r.stderr

    # --all-syscalls: every call is seen, so a flush says how many bytes it wrote out
    out = tmp_path / "all"
    r = run_aiprof(["profile", "--pid", str(pid), "-d", "3s", "-o", str(out), "--all-syscalls",
                    "--collectors", "syscalls"])
    assert r.returncode == 0, r.stderr
    check_fsyncs(load_timeline(out), syncer, path, fsync_bytes, every_call=True)
    s = load_summary(out)
    assert s["ebpf"]["syscalls_counted"] == "every_call", s["ebpf"]
    table = {x["name"]: x for x in s["ebpf"]["targets"][0]["syscalls"]}
    # every write is counted now, not only those that gave up the CPU: the syncer's chunks
    # and the feeder's writes to the pipe, one each 50 ms
    assert table["write"]["count"] >= 3 * (fsync_bytes // (1 << 20)) + 30, table["write"]


def check_fsyncs(tl, syncer, path, fsync_bytes, every_call):
    """The syncer's slow fsync events name the file; with every call seen, each says the
    bytes written to it since the one before."""
    fsyncs = [e for e in events(tl, "syscall", "fsync") if e["tid"] == syncer]
    assert len(fsyncs) >= 3, len(fsyncs)
    fsyncs.sort(key=lambda e: e["ts"])
    # (default mode: an fsync at the site its thread recorded one at in the last second is an
    # event with that record's path, timed until it got the CPU back, no ret or size)
    assert [e for e in fsyncs if "site" not in e["args"]], fsyncs
    for i, e in enumerate(fsyncs):
        assert e["args"]["path"] == path, e
        if "site" in e["args"]:
            assert not every_call and "ret" not in e["args"] and "bytes" not in e["args"], e
            assert e["dur"] >= 1000, e
            continue
        if not every_call:
            # the writes that did not give up the CPU were not seen: no byte count
            assert "bytes" not in e["args"], e
        elif i == 0:
            # the writes before the window opened are not seen: the first fsync of the
            # window may count only the part of its chunk written inside it
            assert 0 <= e["args"]["bytes"] <= fsync_bytes, e
        else:
            assert e["args"]["bytes"] == fsync_bytes, e
        assert e["args"]["file_size"] == fsync_bytes and e["args"]["ret"] == 0, e
        assert e["dur"] >= 1000  # the default threshold, 1 ms


def test_ebpf_off_keeps_library_data(procs, tmp_path):
    require_root()
    p, pid = start_trainer(procs, "--ranks", "2", "--run-seconds", "30")
    env = dict(os.environ, AIPROF_VMLINUX_BTF="/nonexistent/vmlinux")
    r = run_aiprof(["profile", "--pid", str(pid), "-d", "1s", "-o", str(tmp_path / "a")], env=env)
    assert r.returncode == 0, r.stderr
    assert "eBPF collectors off" in r.stderr
    s = load_summary(tmp_path / "a")
    assert s["ebpf"]["state"] == "off" and "BTF" in s["ebpf"]["reason"], s["ebpf"]
    assert any("eBPF collectors off" in n and "BTF" in n for n in s["not_collected"])
    assert any(n.startswith("findings") for n in s["not_collected"])
    assert s["counts"]["nccl"] > 0 and events(load_timeline(tmp_path / "a"), "nccl")
    assert not os.path.exists(tmp_path / "a" / "stacks.folded")

    r = run_aiprof(["profile", "--pid", str(pid), "-d", "1s", "-o", str(tmp_path / "b"), "--no-ebpf"])
    assert r.returncode == 0, r.stderr
    s = load_summary(tmp_path / "b")
    assert s["ebpf"] == {"state": "off", "reason": "disabled by --no-ebpf"}
    assert not events(load_timeline(tmp_path / "b"), "cpu_sample")

    # eBPF only and eBPF impossible: nothing to record is an error, not an empty profile
    r = run_aiprof(["profile", "--pid", str(pid), "-d", "1s", "-o", str(tmp_path / "c"),
                    "--collectors", "cpu"], env=env)
    assert r.returncode == 6 and "nothing to record" in r.stderr


def test_cli_flags(procs, tmp_path):
    require_root()
    r = run_aiprof(["profile", "--help"])
    for flag in ("--frequency", "--offcpu-min", "--slow-syscall", "--no-ebpf", "offcpu"):
        assert flag in r.stdout
    for bad in (["--frequency", "0"], ["--frequency", "99x"], ["--offcpu-min", "soon"],
                ["--slow-syscall", "-1"], ["--collectors", "cpu,gpu"]):
        r = run_aiprof(["profile", "--pid", "1"] + bad)
        assert r.returncode == 2, (bad, r.stderr)
    p, line = procs.start([HOT, "--seconds", "60"], ready="ready")
    pid = int(kv(line)["pid"])
    out = tmp_path / "o"
    cpu0 = cpu_seconds(pid)
    r = run_aiprof(["profile", "--pid", str(pid), "-d", "2s", "-o", str(out), "--frequency", "400",
                    "--collectors", "cpu", "--slow-syscall", "50ms"])
    cpu = cpu_seconds(pid) - cpu0
    assert r.returncode == 0, r.stderr
    s = load_summary(out)["ebpf"]
    assert s["frequency_hz"] == 400 and s["collectors"] == ["cpu", "follow"] and s["slow_syscall_us"] == 50000
    # 400 samples per CPU-second the workload got: far more than 99 Hz would give
    # (measured against the CPU time it really had, so a busy machine does not matter)
    assert s["cpu_samples"] > 0.6 * 400 * cpu > 1.5 * 99 * cpu, (s["cpu_samples"], cpu)
    assert not os.path.exists(out / "offcpu.folded")


def test_benchmark_overhead_and_artifact_rate():
    """The benchmark in its quick form (tests/bench/bench_ebpf.py): prints the throughput
    ratio with every collector on at 99 Hz vs off and the artifact bytes per second. The
    target is <= 1.01; the bounds here leave room for a quick run on a busy machine."""
    require_root()
    r = subprocess.run([sys.executable, os.path.join(ROOT, "tests", "bench", "bench_ebpf.py"),
                        "--quick"], capture_output=True, text=True, timeout=170,
                       env=dict(os.environ, BUILD=BUILD))
    print(r.stdout)
    assert r.returncode == 0, r.stderr + r.stdout
    m = re.search(r"bench_ebpf: ratio=([0-9.]+) cpu_ratio=([0-9.]+) bytes_per_s=(\d+)", r.stdout)
    assert m, r.stdout
    assert float(m.group(1)) <= 1.05 and float(m.group(2)) <= 1.03, r.stdout
    assert 0 < int(m.group(3)) < 1_000_000


def profile_script(procs, tmp_path, text, name, duration, collectors, *extra):
    """Runs the Python program text (it prints "ready pid=N"), profiles it: (pid, out dir)."""
    require_root()
    script = tmp_path / name
    script.write_text(text)
    _, line = procs.start(["/usr/bin/python3", str(script)], ready="ready")
    pid = int(kv(line)["pid"])
    out = tmp_path / "out"
    r = run_aiprof(["profile", "--pid", str(pid), "-d", duration, "-o", str(out),
                    "--collectors", collectors] + list(extra))
    assert r.returncode == 0, r.stderr
    return pid, out


LISTCOMP = r"""
import os, sys, time
class Model:
    def forward(self, n):
        return sum([i * i for i in range(n)])
print("ready pid=%d" % os.getpid(), flush=True)
end = time.time() + 60
m = Model()
while time.time() < end:
    m.forward(5000)
"""


@pytest.mark.parametrize("names", ["qualified", "short"])
def test_python_names_qualified_or_short(procs, tmp_path, names):
    """Python 3.11 names a comprehension 'Model.forward.<locals>.<listcomp>'; other Python
    profilers print '<listcomp>': --python-names short gives that, the default the
    qualified name."""
    extra = [] if names == "qualified" else ["--python-names", "short"]
    pid, out = profile_script(procs, tmp_path, LISTCOMP, "lc.py", "2s", "cpu,python", *extra)
    frames = {f for st, _ in folded(out) for f in st if "lc.py:" in f}
    want = ("Model.forward.<locals>.<listcomp> (", "Model.forward (") if names == "qualified" \
        else ("<listcomp> (", "forward (")
    for w in want:
        assert any(f.startswith(w) for f in frames), (w, frames)
    if names == "short":
        assert not any("<locals>" in f or f.startswith("Model.") for f in frames), frames
    # a read is of one instant: the loop at <module> level between two calls is in some of
    # them (CI caught one), so the name is looked for in up to 10
    for _ in range(10):
        s = run_aiprof(["stacks", "--pid", str(pid)] + extra)
        assert s.returncode == 0 and "lc.py:" in s.stdout, s.stderr
        if names == "short":
            assert "<locals>" not in s.stdout and "    Model." not in s.stdout, s.stdout
        if f"    {want[1]}" in s.stdout:
            break
    assert f"    {want[1]}" in s.stdout, s.stdout
    r = run_aiprof(["profile", "--pid", str(pid), "--python-names", "long", "-o",
                    str(tmp_path / "x")])
    assert r.returncode == 2 and "--python-names 'long': use qualified or short" in r.stderr


WALL = r"""
import os, threading, time
def nap():
    while True:
        time.sleep(0.2)
def spin():
    while True:
        sum(range(1000))
threading.Thread(target=nap, daemon=True).start()
print("ready pid=%d" % os.getpid(), flush=True)
spin()
"""


def test_wall_clock_view_of_running_and_sleeping_threads(procs, tmp_path):
    """wall.folded (and flamegraph-wall.svg): each thread's whole window, on a CPU (samples
    x 1/99 s) or off it (its blocks): the napping thread and the spinning one each about the
    window's length, though the napper has almost no CPU samples."""
    _, out = profile_script(procs, tmp_path, WALL, "wall.py", "3s", "cpu,offcpu,python")
    wall = folded(out, "wall.folded")
    window_us = load_summary(out)["window"]["duration_s"] * 1e6
    nap = sum(n for st, n in wall if any(f.startswith("nap (") for f in st))
    spin = sum(n for st, n in wall if any(f.startswith("spin (") for f in st))
    cpu_nap = sum(n for st, n in folded(out) if any(f.startswith("nap (") for f in st))
    print(f"wall us: nap {nap}, spin {spin}; window {window_us:.0f}; nap's CPU samples {cpu_nap}")
    assert 0.7 * window_us <= nap <= 1.1 * window_us, (nap, window_us)
    # (the spinner's time waiting for a CPU is in no block: beside two burners and CI's own
    # work it gets a third of a core or less)
    assert 0.25 * window_us <= spin <= 1.1 * window_us, (spin, window_us)
    assert cpu_nap <= 5
    assert (out / "flamegraph-wall.svg").stat().st_size > 1000


WALL_SAMPLED = r"""
import os, threading, time
def nap_short():
    while True:
        time.sleep(0.0002)      # waits far under --offcpu-min (1 ms)
def sleep_long():
    time.sleep(600)             # one wait, begun before the window, over after it
def spin_forever():
    while True:
        sum(range(1000))
for f in (nap_short, sleep_long, spin_forever):
    threading.Thread(target=f, daemon=True).start()
print("ready pid=%d" % os.getpid(), flush=True)
time.sleep(600)
"""


def test_mode_wall_samples_every_thread_off_its_cpu(procs, tmp_path):
    """--mode wall: a thread that waits 0.2 ms at a time (no block long enough for the off-CPU
    collector), one asleep the whole window and one spinning (off its CPU too on a loaded
    machine, waiting for one) each have about the window's length in wall.folded, with their
    Python frames; without it the short napper has a fraction of that (its blocks are not
    recorded), and summary.json says which view it is."""
    require_root()
    script = tmp_path / "wall_sampled.py"
    script.write_text(WALL_SAMPLED)
    _, line = procs.start(["/usr/bin/python3", str(script)], ready="ready")
    pid = int(kv(line)["pid"])
    got = {}
    for mode in ("wall", "cpu"):
        out = tmp_path / mode
        # (blocks of 50 ms or more: the napper's, 0.2 ms asked, are under that however
        # late a loaded machine wakes it)
        r = run_aiprof(["profile", "--pid", str(pid), "-d", "3s", "-o", str(out), "--mode", mode,
                        "--collectors", "cpu,offcpu,python", "--offcpu-min", "50ms"])
        assert r.returncode == 0, r.stderr
        s = load_summary(out)
        window_us = s["window"]["duration_s"] * 1e6
        wall = folded(out, "wall.folded")
        per = {f: sum(n for st, n in wall if any(x.startswith(f + " (") for x in st))
               for f in ("nap_short", "sleep_long", "spin_forever")}
        print(mode, per, window_us, s["ebpf"]["wall"])
        got[mode] = (per, window_us, s["ebpf"]["wall"])
    per, window_us, w = got["wall"]
    assert w["mode"] == "sampled" and w["frequency_hz"] == 99, w
    for f, us in per.items():
        assert 0.75 * window_us <= us <= 1.15 * window_us, (f, us, window_us, w)
    # every sample is an unwound stack or one taken from the tick before; the long sleeper's
    # is reused (it never ran), so few are unwound
    assert w["samples"] == w["stacks_unwound"] + w["stacks_reused"] > 0, w
    assert w["stacks_reused"] >= 0.5 * w["ticks"], w
    # (ticks at 99 Hz from a loop that also drains the ring: on a loaded machine some late,
    # each counted, their time in the next tick's samples)
    ticks = 99 * window_us / 1e6
    assert 0.5 * ticks <= w["ticks"] and abs(w["ticks"] + w["ticks_late"] - ticks) <= 0.1 * ticks, w
    # the long sleep's stack: its Python frame over the kernel's sleep
    assert any(any(x.startswith("sleep_long (") for x in st) and
               any("nanosleep" in x and x.endswith("_[k]") for x in st)
               for st, _ in folded(tmp_path / "wall", "wall.folded")), "no kernel frames"
    per, window_us, w = got["cpu"]
    assert w["mode"] == "blocks", w
    assert per["nap_short"] <= 0.5 * window_us, per
