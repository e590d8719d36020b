# SPDX-License-Identifier: MIT
"""The processes the targets start are followed (issue 17).

A real PyTorch DataLoader (Debian's python3-torch) with num_workers=2, not persistent: its
workers are forked anew every epoch, some before the window and some during it, and worker 1
is planted slow (slow_fetch(): 40 ms per sample). Each worker's CPU samples and Python frames
must be under its own process, linked to its parent; the DataLoaderStall finding must name a
worker of the planted slow kind. A target that forks and execs a C program: the child's
samples under the program's name, with its symbols. --no-follow: the target alone. A
followed child that exits gives up its place: a process the kernel hands its pid to during
the window is not recorded.
"""
import gzip
import json
import os
import subprocess
import textwrap
import time

import pytest

from conftest import (AIPROF, BUILD, ROOT, TRAINER, checksum_of, events, load_summary,
                      load_timeline, require_root, run_aiprof)
from test_ebpf import folded

PYTHON = "/usr/bin/python3"
LOADER = os.path.join(ROOT, "tests", "workloads", "torch_loader.py")
HOT = os.path.join(BUILD, "tests", "workloads", "hot_functions")
BLOCKING = os.path.join(BUILD, "tests", "workloads", "blocking_io")
PY_LAUNCH = os.path.join(ROOT, "tests", "workloads", "py_launch.py")


def pid_of(line):
    return int(line.split("pid=")[1].split()[0])


def profile(pid, out, *extra, duration="3s", collectors="cpu,offcpu,python"):
    r = run_aiprof(["profile", "--pid", str(pid), "--duration", duration, "--collectors",
                    collectors, "-o", str(out), "-q"] + list(extra))
    assert r.returncode == 0, r.stderr
    return load_summary(str(out))


def roots(stacks):
    """{pid: [stacks]} by the root frame "comm-pid"."""
    out = {}
    for s, c in stacks:
        out.setdefault(int(s[0].rsplit("-", 1)[1]), []).append((s, c))
    return out


@pytest.mark.skipif(not os.path.exists("/usr/lib/python3/dist-packages/torch/__init__.py"),
                    reason="needs Debian's python3-torch")
def test_dataloader_workers_followed(procs, tmp_path):
    require_root()
    _, line = procs.start([PYTHON, "-u", LOADER, "--slow-worker", "1"], ready="ready",
                          timeout=60)
    pid = pid_of(line)
    import time
    time.sleep(2.5)      # an epoch in progress: workers that exist before the window
    s = profile(pid, tmp_path, duration="4s")
    eb = s["ebpf"]
    assert eb["follow"]["on"] and eb["follow"]["not_followed"] == 0, eb["follow"]
    kids = [t for t in eb["targets"] if t.get("parent") == pid]
    assert any(t.get("started_before_window") for t in kids), kids
    during = [t for t in kids if "started_after_ms" in t]
    assert len(during) >= 2, kids      # a new epoch's two workers, forked in the window

    # each worker's samples and Python frames under its own process
    stacks = roots(folded(tmp_path))
    busy = [t for t in kids if t["cpu_samples"] >= 10]
    assert len(busy) >= 2, kids
    for t in busy:
        assert t["python"]["with_python_frames_share"] >= 0.8, t
        mine = stacks[t["pid"]]
        assert sum(c for st, c in mine if any(f.startswith("decode_sample (") for f in st)) \
            >= 0.5 * t["cpu_samples"], (t, mine[:3])
        assert any(any(f.startswith("_worker_loop (") for f in st) for st, _ in mine), mine[:3]
    # the training process itself does not decode: the workers' frames are not mixed in
    assert not any(any(f.startswith("decode_sample (") for f in st) for st, _ in stacks.get(pid, []))

    # the timeline: a track per worker, named with its parent
    with gzip.open(tmp_path / "timeline.json.gz") as f:
        tl = json.load(f)
    names = {e["pid"]: e["args"] for e in tl["traceEvents"] if e.get("name") == "process_name"}
    for t in kids:
        assert names[t["pid"]]["parent"] == pid and f"started by {pid}" in names[t["pid"]]["name"]
    assert any(e.get("cat") == "cpu_sample" and e["pid"] == busy[0]["pid"] for e in tl["traceEvents"])

    # the stall, and the planted slow worker named
    stall = [f for f in s["findings"] if f["category"] == "DataLoaderStall"]
    assert len(stall) == 1, s["findings"]
    ev = stall[0]["evidence"]
    assert ev["slowest_worker_in"].startswith("slow_fetch ("), ev
    slow = ev["slowest_worker"]
    off = roots(folded(tmp_path, "offcpu.folded"))
    assert any(any(f.startswith("slow_fetch (") for f in st) for st, _ in off[slow]), off[slow][:3]
    assert f"worker pid {slow} is the busiest" in stall[0]["summary"]


def test_fork_exec_followed_and_no_follow(procs, tmp_path):
    require_root()
    script = tmp_path / "spawner.py"
    script.write_text(textwrap.dedent(f"""
        import os, subprocess, sys, time
        print("ready pid=%d" % os.getpid(), flush=True)
        while True:
            for i in range(3):
                k = os.fork()           # a forked interpreter, then another program
                if k == 0:
                    os.execv({HOT!r}, [{HOT!r}, "--seconds", "0.2"])
                os.waitpid(k, 0)
            p = subprocess.Popen([{HOT!r}, "--seconds", "1"], stdout=subprocess.DEVNULL)
            p.wait()
    """))
    _, line = procs.start([PYTHON, "-u", str(script)], ready="ready")
    pid = pid_of(line)
    # python too: os.fork()'s child is an interpreter until its exec, whose CPython is
    # read again for a while (an exec of another program left that pending: a crash)
    s = profile(pid, tmp_path / "on", duration="2s", collectors="cpu,python")
    eb = s["ebpf"]
    kids = [t for t in eb["targets"] if t.get("parent") == pid]
    # (a child forked from Python as the window closed may not have exec'd yet)
    assert kids and sum(t["comm"] != "hot_functions" for t in kids) <= 1, kids
    assert any(t.get("execd") for t in kids), kids
    stacks = roots(folded(tmp_path / "on"))
    hot = [(st, c) for k in kids for st, c in stacks.get(k["pid"], [])]
    # (about 2 s of a busy child at 99 Hz; beside CI's load it gets a share of a core)
    assert sum(c for _, c in hot) >= 20, hot[:3]
    assert hot[0][0][0].startswith("hot_functions-"), hot[0]
    # its own symbols, read after the exec: its "hot" thread's functions (its other thread
    # spends its time in the kernel)
    assert sum(c for st, c in hot if "hot_a" in st) > sum(c for st, c in hot if "hot_b" in st) > 0
    assert sum(c for st, c in hot if "hot_a" in st or "hot_b" in st) >= 0.3 * sum(c for _, c in hot)

    s = profile(pid, tmp_path / "off", "--no-follow", duration="1s", collectors="cpu")
    eb = s["ebpf"]
    assert not eb["follow"]["on"] and eb["follow"]["processes"] == 0, eb["follow"]
    assert [t["pid"] for t in eb["targets"]] == [pid]
    assert set(roots(folded(tmp_path / "off"))) <= {pid}


def test_children_that_live_a_few_milliseconds_are_named(procs, tmp_path):
    """A child that starts, spins ~20 ms in a Python function and exits, again and again: its
    samples, drained and named after it may have exited, have its functions' names and its
    Python frames, no raw address and no [unknown] frame (its code is read while it lives:
    the maps at its fork and its exec, the ELF files through map_files)."""
    require_root()
    script = tmp_path / "short_children.py"
    script.write_text(textwrap.dedent("""
        import os, subprocess, sys, time
        CHILD = (
            "import time\\n"
            "def spin_in_child(t):\\n"
            "    end = time.monotonic() + t\\n"
            "    while time.monotonic() < end:\\n"
            "        pass\\n"
            "spin_in_child(0.02)\\n")
        print("ready pid=%d" % os.getpid(), flush=True)
        while True:
            subprocess.run([sys.executable, "-c", CHILD])
    """))
    _, line = procs.start([PYTHON, "-u", str(script)], ready="ready")
    pid = pid_of(line)
    s = profile(pid, tmp_path / "out", "--frequency", "999", duration="3s",
                collectors="cpu,python")
    kids = [t for t in s["ebpf"]["targets"] if t.get("parent") == pid]
    # (each lives ~50 ms, most of it the interpreter's start; beside CI's load fewer)
    assert len(kids) >= 5, kids
    stacks = roots(folded(tmp_path / "out"))
    theirs = [(st, c) for k in kids for st, c in stacks.get(k["pid"], [])]
    raw = [(st, c) for st, c in theirs if any(f.startswith("0x") or f == "[unknown]" for f in st)]
    assert not raw, raw[:3]
    spins = sum(c for st, c in theirs if any(f.startswith("spin_in_child (<string>:") for f in st))
    assert spins >= 20, theirs[:3]
    assert sum(1 for k in kids if any("spin_in_child" in ";".join(st)
                                       for st, _ in stacks.get(k["pid"], []))) >= 3, kids


def test_fork_storm_is_bounded(procs, tmp_path):
    """A target that forks without end: at most 256 followed per window, the rest counted,
    and the profile and the target carry on."""
    require_root()
    script = tmp_path / "storm.py"
    script.write_text(textwrap.dedent("""
        import os, sys
        print("ready pid=%d" % os.getpid(), flush=True)
        while True:
            pid = os.fork()
            if pid == 0:
                os._exit(0)
            os.waitpid(pid, 0)
    """))
    p, line = procs.start([PYTHON, "-u", str(script)], ready="ready")
    pid = pid_of(line)
    # (long enough for more than 256 forks beside CI's load: 192 in 2 s were seen)
    s = profile(pid, tmp_path, duration="5s", collectors="cpu,offcpu")
    f = s["ebpf"]["follow"]
    assert f["processes"] == f["max"] == 256 and f["not_followed"] > 0, f
    assert p.poll() is None


def test_pid_of_an_exited_child_given_to_another_process(procs, tmp_path):
    """A target's child exits during the window; the test has the kernel hand its pid to a
    program of its own that blocks in reads and sleeps (ns_last_pid): that program is nobody
    the session follows, and the off-CPU and syscall collectors (global tracepoints,
    filtered by pid) record none of it. (The CPU sampler could not: its events are the
    targets' own, inherited by their children only.)"""
    require_root()
    script = tmp_path / "parent.py"
    script.write_text(textwrap.dedent("""
        import os, sys, time
        print("ready pid=%d" % os.getpid(), flush=True)
        for line in sys.stdin:
            pid = os.fork()
            if pid == 0:
                os._exit(0)
            os.waitpid(pid, 0)          # reaped: the pid is free again
            print("child=%d" % pid, flush=True)
    """))
    p, line = procs.start([PYTHON, "-u", str(script)], ready="ready", stdin=subprocess.PIPE)
    pid = pid_of(line)
    out = tmp_path / "prof"
    prof = subprocess.Popen([AIPROF, "profile", "--pid", str(pid),
                             "--duration", "5s", "--collectors", "offcpu,syscalls", "-o",
                             str(out), "-q"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    procs.procs.append(prof)
    time.sleep(2.0)                     # attached, the window open
    reused = None
    for _ in range(20):
        p.stdin.write("go\n")
        p.stdin.flush()
        child = int(p.stdout.readline().split("child=")[1])
        with open("/proc/sys/kernel/ns_last_pid", "w") as f:
            f.write(str(child - 1))
        h = procs.start([BLOCKING, "--dir", str(tmp_path), "--seconds", "2"], ready="ready")[0]
        if h.pid == child:
            reused = h
            break
        h.kill()
    assert reused, "the kernel never handed the child's pid out again (other forks raced)"
    rc = prof.wait(timeout=60)
    assert rc == 0, prof.stderr.read()
    s = load_summary(str(out))
    kids = [t for t in s["ebpf"]["targets"] if t.get("parent") == pid]
    assert any(t["pid"] == child for t in kids), kids      # it was followed while it lived
    stacks = roots(folded(out, "offcpu.folded"))
    assert pid in stacks and child not in stacks, stacks.get(child, [])[:3]
    assert not any(any(f in ("reader", "feeder", "syncer") for f in st)
                   for st, _ in folded(out, "offcpu.folded"))
    assert not [t for t in s["ebpf"]["targets"] if t["pid"] == child and t.get("comm") ==
                "blocking_io"], s["ebpf"]["targets"]



# a Python process that launches kernels through ctypes (py_launch.py), ready, then waiting
# for a line on its stdin
LAUNCHER_PRELUDE = textwrap.dedent(f"""
    import ctypes, os, sys, time
    sys.path.insert(0, {os.path.dirname(PY_LAUNCH)!r})
    import py_launch
    lib = ctypes.CDLL(py_launch.LIB)
    assert lib.pl_init(0) == 0
    print("ready pid=%d" % os.getpid(), flush=True)
    sys.stdin.readline()
""")


def launch_events(tl, pid, name):
    return [e for e in events(tl, "cuda_api", name) if e["pid"] == pid]


def open_window(procs, pid, out, duration, *extra):
    """aiprof profile on pid, returned once its window is open (it says "recording")."""
    prof = subprocess.Popen([AIPROF, "profile", "--pid", str(pid), "--duration", duration,
                             "-o", str(out)] + list(extra),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    procs.procs.append(prof)
    said = []
    while not said or "recording" not in said[-1]:
        said.append(prof.stderr.readline())
        assert said[-1], "aiprof ended before its window opened: " + "".join(said)
    return prof


def start_in_window(procs, p, pid, out, duration, *extra):
    """Profiles pid while it starts its processes: p waits for a line on its stdin, prints
    "<word> PID..." of what it started, then "done" once they ended. Returns those pids."""
    prof = open_window(procs, pid, out, duration, *extra)
    p.stdin.write("go\n")
    p.stdin.flush()
    started = [int(x) for x in p.stdout.readline().split()[1:]]
    assert p.stdout.readline().strip() == "done"
    _, err = prof.communicate(timeout=120)
    assert prof.returncode == 0, err
    start_in_window.said = err          # for a failure's message
    return started


def test_ranks_started_in_the_window_get_the_library(procs, tmp_path):
    """A launcher (as torchrun is) starts two trainer ranks, one process each, after the
    window opened. Each rank is attached during the window: libaiprof.so loaded into it by
    ptrace once its loader is done (uprobes with --method ebpf), its kernels and all-reduces
    recorded under its own pid
    and track, linked to the launcher; the ranks' checksums are those of an unprofiled run.
    --no-follow attaches nothing but the launcher."""
    require_root()
    rank_args = ["--world", "2", "--steps", "60", "--batch-bytes", "256K"]
    ref = tmp_path / "ref"
    ref.mkdir()
    refs = [subprocess.Popen([TRAINER, "--rank", str(r), "--nccl-id-file", str(ref / "id")]
                             + rank_args, stdout=subprocess.PIPE, text=True) for r in range(2)]
    want = {checksum_of(p.communicate(timeout=120)[0]) for p in refs}
    assert len(want) == 1
    script = tmp_path / "launcher.py"
    script.write_text(textwrap.dedent(f"""
        import os, subprocess, sys, time
        print("ready pid=%d" % os.getpid(), flush=True)
        sys.stdin.readline()
        run = sys.argv[1]
        ps = [subprocess.Popen([{TRAINER!r}, "--rank", str(r), "--nccl-id-file",
                                run + "/id"] + {rank_args!r},
                               stdout=open(run + "/rank%d.out" % r, "w")) for r in range(2)]
        print("ranks " + " ".join(str(p.pid) for p in ps), flush=True)
        for p in ps:
            p.wait()
        print("done", flush=True)
        time.sleep(120)
    """))

    for mode in ("ptrace", "ebpf", "no-follow"):
        follow = mode != "no-follow"
        run = tmp_path / ("run-" + mode)
        run.mkdir()
        p, line = procs.start([PYTHON, "-u", str(script), str(run)], ready="ready",
                              stdin=subprocess.PIPE)
        pid = pid_of(line)
        out = tmp_path / mode
        ranks = start_in_window(procs, p, pid, out, "5s",
                                *{"ptrace": [], "ebpf": ["--method", "ebpf"],
                                  "no-follow": ["--no-follow"]}[mode])
        for r in range(2):
            assert checksum_of((run / ("rank%d.out" % r)).read_text()) in want
        s = load_summary(str(out))
        tl = load_timeline(str(out))
        late = [t for t in s["targets"] if t.get("parent") == pid]
        if not follow:
            assert not late and not s["followed_attach"]["on"], s["followed_attach"]
            assert not [e for e in events(tl) if e["pid"] in ranks]
            continue
        fa = s["followed_attach"]
        assert fa["on"] and fa["attached"] == 2 and fa["failed"] == 0, fa
        assert sorted(t["pid"] for t in late) == sorted(ranks), (late, ranks)
        for t in late:
            assert t["state"] == "profiled" and t["method"] == mode, t
            assert t["injection"] == ("ptrace" if mode == "ptrace" else "none"), t
            assert t["comm"] == "trainer" and t["started_after_ms"] >= 0, t
        seen_ranks = set()
        for rpid in ranks:
            names = {e["args"]["kernel"] for e in launch_events(tl, rpid, "cudaLaunchKernel")}
            assert {"sgemm_fwd_kernel", "adam_update_kernel"} <= names, (rpid, names)
            coll = [e for e in events(tl, "nccl", "ncclAllReduce") if e["pid"] == rpid]
            assert len(coll) >= 20, (rpid, len(coll))
            assert len({e["args"]["rank"] for e in coll}) == 1, rpid
            seen_ranks |= {e["args"]["rank"] for e in coll}
            label = [e["args"]["name"] for e in tl["traceEvents"]
                     if e.get("ph") == "M" and e.get("name") == "process_name"
                     and e["pid"] == rpid]
            assert label and all(f"started by {pid}" in x for x in label), label
        if mode == "ptrace":    # uprobes see the calls, not the communicator's rank
            assert seen_ranks == {0, 1}
        # nothing of the ranks is under the launcher
        assert not launch_events(tl, pid, "cudaLaunchKernel")


def test_forked_children_wake_their_library_and_their_exec_gets_one(procs, tmp_path):
    """A target with the library loaded forks workers that launch kernels: a forked child's
    inherited copy is dormant (the ring is its parent's); it is woken by ptrace (a ring and
    a control thread of its own, no second copy), so the child's launches, with their
    kernel names, are recorded by the library under its own pid, and it lives on. The
    second worker then execs a trainer: the dormant copy went with the old program, so the
    new one gets the library by ptrace (a second entry of the same pid) and its kernels
    are recorded too."""
    require_root()
    script = tmp_path / "forker.py"
    script.write_text(LAUNCHER_PRELUDE + textwrap.dedent(f"""
        kids = []
        for i in range(2):
            k = os.fork()
            if k == 0:
                py_launch.train(lib, 1.5)
                sys.stdout.flush()
                if i == 1:
                    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
                    os.execv({TRAINER!r}, [{TRAINER!r}, "--ranks", "1", "--steps", "40"])
                os._exit(0)
            kids.append(k)
        print("kids " + " ".join(map(str, kids)), flush=True)
        for k in kids:
            assert os.waitpid(k, 0)[1] == 0, k     # the workers live on
        print("done", flush=True)
        time.sleep(120)
    """))
    p, line = procs.start([PYTHON, "-u", str(script)], ready="ready", stdin=subprocess.PIPE)
    pid = pid_of(line)
    out = tmp_path / "prof"
    kids = start_in_window(procs, p, pid, out, "6s")
    assert p.poll() is None
    s = load_summary(str(out))
    tl = load_timeline(str(out))
    late = [t for t in s["targets"] if t.get("parent") == pid]
    assert sorted(t["pid"] for t in late) == sorted(kids + kids[1:]), (late, kids)
    for t in late[:2]:
        # the parent's copy, dormant in them, woken: the library records them; CUPTI is
        # not started where the parent had the driver loaded (it crashed such a child)
        assert t["injection"] == "ptrace-woken" and t["hooks_patched"] > 0, t
        assert t["method"] != "ebpf" and "inherited across fork() woken" in t["method_reason"], t
        assert "does not survive fork()" in t["gpu_timing"]["reason"], t
    for k in kids:
        names = {e["args"]["kernel"] for e in launch_events(tl, k, "cudaLaunchKernel")}
        assert "py_matmul_kernel" in names, (k, names, late, start_in_window.said)
    before, after = [t for t in late if t["pid"] == kids[1]]
    assert before.get("execd_after_attach") and before["comm"] == "python3", before
    assert not after.get("execd_after_attach") and after["comm"] == "trainer", after
    assert after["injection"] == "ptrace" and after["hooks_patched"] > 0, after
    assert s["followed_attach"]["execd_after_attach"] == 1, s["followed_attach"]
    names = {e["args"]["kernel"] for e in launch_events(tl, kids[1], "cudaLaunchKernel")}
    assert {"sgemm_fwd_kernel", "adam_update_kernel"} <= names, names
    assert not launch_events(tl, pid, "cudaLaunchKernel")


@pytest.mark.skipif(not os.path.exists("/usr/lib/python3/dist-packages/torch/__init__.py"),
                    reason="needs Debian's python3-torch")
def test_a_woken_child_forks_and_its_child_is_woken_too(procs, tmp_path):
    """A child whose inherited copy was woken forks in turn once it records: the
    grandchild's copy is dormant again (the ring it inherited is the child's), is woken in
    its turn, and its launches are under its own pid, linked to the child; both live on."""
    require_root()
    script = tmp_path / "grandparent.py"
    script.write_text(LAUNCHER_PRELUDE + textwrap.dedent("""
        k = os.fork()
        if k == 0:
            py_launch.train(lib, 1.0)          # woken meanwhile (50 ms after the fork)
            g = os.fork()
            if g == 0:
                py_launch.train(lib, 1.5)
                os._exit(0)
            print("kids %d %d" % (os.getpid(), g), flush=True)
            py_launch.train(lib, 1.5)
            os._exit(0 if os.waitpid(g, 0)[1] == 0 else 3)
        assert os.waitpid(k, 0)[1] == 0, k     # child and grandchild lived on
        print("done", flush=True)
        time.sleep(120)
    """))
    p, line = procs.start([PYTHON, "-u", str(script)], ready="ready", stdin=subprocess.PIPE)
    pid = pid_of(line)
    out = tmp_path / "prof"
    child, grandchild = start_in_window(procs, p, pid, out, "6s")
    assert p.poll() is None
    s = load_summary(str(out))
    tl = load_timeline(str(out))
    by_pid = {t["pid"]: t for t in s["targets"] if t.get("parent")}
    assert by_pid[child]["parent"] == pid and by_pid[grandchild]["parent"] == child, by_pid
    for k in (child, grandchild):
        assert by_pid[k]["injection"] == "ptrace-woken", by_pid[k]
        names = {e["args"]["kernel"] for e in launch_events(tl, k, "cudaLaunchKernel")}
        assert "py_matmul_kernel" in names, (k, names, start_in_window.said)


def test_target_that_execs_is_attached_again(procs, tmp_path):
    """The process chosen launches kernels from Python, then execs a trainer (as a wrapper
    that execs the real job does): its library went with the old program, so the pid is
    attached again, and the kernels of both programs are recorded under it."""
    require_root()
    script = tmp_path / "wrapper.py"
    script.write_text(LAUNCHER_PRELUDE + textwrap.dedent(f"""
        py_launch.train(lib, 1.0)
        os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
        os.execv({TRAINER!r}, [{TRAINER!r}, "--ranks", "1", "--steps", "40"])
    """))
    p, line = procs.start([PYTHON, "-u", str(script)], ready="ready", stdin=subprocess.PIPE)
    pid = pid_of(line)
    out = tmp_path / "prof"
    prof = open_window(procs, pid, out, "8s")
    p.stdin.write("go\n")
    p.stdin.flush()
    assert p.wait(timeout=60) == 0
    _, err = prof.communicate(timeout=120)
    assert prof.returncode == 0, err
    s = load_summary(str(out))
    tl = load_timeline(str(out))
    mine = [t for t in s["targets"] if t["pid"] == pid]
    assert len(mine) == 2, (mine, s["followed_attach"])
    before, after = mine
    assert before.get("execd_after_attach") and before["comm"] == "python3", before
    assert after["comm"] == "trainer" and after["execd_after_ms"] > 0, after
    assert after["injection"] == "ptrace" and after["hooks_patched"] > 0, after
    names = {e["args"]["kernel"] for e in launch_events(tl, pid, "cudaLaunchKernel")}
    assert {"py_matmul_kernel", "sgemm_fwd_kernel"} <= names, names


CHILD = """
import time
end = time.time() + 3
while time.time() < end:
    sum(range(1000))
"""


def test_a_child_started_just_before_the_window_is_always_recorded(tmp_path):
    """A shell starts a Python child 0-98 ms before `aiprof profile --pid SHELL` (the race
    between reading the process tree and arming the follower), 50 times: the child is a
    target, under the shell, every time."""
    require_root()
    missed, sampled = [], 0
    for i in range(50):
        sh = subprocess.Popen(["bash", "-c", f"{PYTHON} -c '{CHILD}'; sleep 5"],
                              start_new_session=True)
        try:
            time.sleep((2 * i) / 1000)
            out = tmp_path / f"r{i}"
            r = run_aiprof(["profile", "--pid", str(sh.pid), "-d", "300ms",
                            "--collectors", "cpu,python", "-o", str(out), "-q"])
            assert r.returncode == 0, r.stderr
            ts = load_summary(out)["ebpf"]["targets"]
            kids = [t for t in ts if t.get("parent") == sh.pid]
            if not kids:
                missed.append((i, [(t["pid"], t.get("comm")) for t in ts]))
            sampled += any(t.get("cpu_samples", 0) > 0 for t in kids)
        finally:
            os.killpg(sh.pid, 9)   # the shell's own session: the shell and its child
            sh.wait()
    print(f"child recorded in {50 - len(missed)} of 50 runs, with samples in {sampled}")
    assert not missed, missed
    assert sampled >= 40, sampled


LATE_PY = """
import time
def late_busy():
    end = time.time() + 2.5
    while time.time() < end:
        sum(range(1000))
late_busy()
"""


def test_an_interpreter_starting_in_the_window_gets_its_frames(procs, tmp_path):
    """A launcher forks and execs Python 0.5 s into the window (as torchrun starts its
    ranks): at the exec its interpreter has no thread yet; it is looked at again until it
    has, and its samples from then on have their Python frames (before: none for the whole
    window, 'interpreter not initialised')."""
    require_root()
    code = tmp_path / "late.py"
    code.write_text(LATE_PY)
    _, line = procs.start(["bash", "-c", f"echo ready pid=$$; sleep 0.8; {PYTHON} {code}; sleep 5"],
                          ready="ready")
    pid = pid_of(line)
    out = tmp_path / "out"
    profile(pid, out, duration="3s", collectors="cpu,python")
    ts = load_summary(out)["ebpf"]["targets"]
    (kid,) = [t for t in ts if t.get("comm") == "python3"]
    assert kid["python"].get("version", "").startswith("3."), kid["python"]
    assert kid["cpu_samples"] >= 20, kid
    framed = sum(n for st, n in folded(out) if st[0] == f"python3-{kid['pid']}" and
                 any(f.startswith("late_busy (") for f in st))
    assert framed >= 0.8 * kid["cpu_samples"], (framed, kid["cpu_samples"])
