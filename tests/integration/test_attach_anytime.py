# SPDX-License-Identifier: MIT
"""Attaching at any instant of a real program's life never harms it, and leaves nothing.

Real PyTorch programs (tests/workloads/torch_startup.py, and a torchrun-like launcher of
real Python ranks, tests/workloads/torch_launcher.py) are profiled at random instants of
their first seconds: while the interpreter starts, while `import torch` maps libtorch and
runs its constructors, and, through the launcher, while ranks it exec'd during the window
start. Each program checks itself: it must exit 0 with the very loss an unprofiled run
prints. Before the safe points were judged from the whole stack (injector/attach/
safepoint.c), about one attach in six during `import torch` aborted the process in glibc's
sysmalloc.

AIPROF_FAULT_RUNS and AIPROF_FAULT_LAUNCHES set how many (make faults: 200 and 40).
"""
import os
import random
import re
import signal
import subprocess
import sys
import time

from conftest import AIPROF, ROOT, load_summary, load_timeline, require_root, run_aiprof
from test_kill_safety import traced

WORKLOADS = os.path.join(ROOT, "tests", "workloads")
STARTUP = [sys.executable if sys.executable.startswith("/usr/bin/") else "/usr/bin/python3",
           os.path.join(WORKLOADS, "torch_startup.py")]
LAUNCHER = [STARTUP[0], os.path.join(WORKLOADS, "torch_launcher.py")]
RUNS = int(os.environ.get("AIPROF_FAULT_RUNS", "6"))
LAUNCHES = int(os.environ.get("AIPROF_FAULT_LAUNCHES", "2"))
STEPS = "60"


def kill_children(pid):
    """The launcher's ranks, by pid (its own teardown stops only the launcher)."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            kids = [int(k) for k in f.read().split()]
    except OSError:
        return
    for k in kids:
        try:
            os.kill(k, signal.SIGKILL)
        except ProcessLookupError:
            pass


def result_of(out):
    m = re.findall(r"result=(\S+)", out)
    assert m, f"no result line in {out!r}"
    return m


def reference(argv):
    p = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    return result_of(p.stdout)


def profile(pid, out, duration, *extra):
    return subprocess.Popen([AIPROF, "profile", "--pid", str(pid), "-d", duration, "-q", "-o",
                             str(out), *extra], stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)


def test_attach_at_random_instants_of_a_torch_start(procs, tmp_path):
    require_root()
    steps = ["--steps", "1200"]                 # ~1 s of import, then ~2.5 s of training
    ref = reference(STARTUP + steps)
    rnd = random.Random(29)
    waited = 0
    for i in range(RUNS):
        p, _ = procs.start(STARTUP + steps)
        # the first 3 s; every other attach in the import's first 1.2 s
        time.sleep(rnd.uniform(0.0, 3.0 if i % 2 else 1.2))
        a = profile(p.pid, tmp_path / f"o{i}", "1s")
        out, err = p.communicate(timeout=300)
        _, aerr = a.communicate(timeout=120)
        # the program: alive to its end, the same loss
        assert p.returncode == 0, f"run {i}: the target died ({p.returncode}): {err[-2000:]}"
        assert result_of(out) == ref, f"run {i}: {out!r} != {ref!r}"
        # aiprof: recorded it, or said clearly why not (it ended before the attach)
        if a.returncode == 0:
            t = load_summary(tmp_path / f"o{i}")["targets"][0]
            assert "exit" not in t or t["exit"]["how"] == "exited with code 0", t
            waited += t["safe_point_attempts"] > 1
        else:
            assert "exited" in aerr or "zombie" in aerr or "no process" in aerr, \
                f"run {i}: {aerr}"
    # the attaches met the start-up: some stops found the thread unsafe (in the loader,
    # in libc) and waited for a safe point
    assert RUNS < 6 or waited >= 1, waited


def launch_profiled(procs, args, ref, out, duration, delay, what):
    """The launcher with args, profiled after delay seconds: every rank exited 0 with the
    unprofiled results (ref), aiprof succeeded. Returns the launcher's pid and the ranks'
    summary entries."""
    p, _ = procs.start(LAUNCHER + args, ready="launcher")
    time.sleep(delay)
    a = profile(p.pid, out, duration)
    try:
        lout, err = p.communicate(timeout=300)
    finally:
        kill_children(p.pid)
    _, aerr = a.communicate(timeout=120)
    assert p.returncode == 0, f"{what}: a rank died: {err[-2000:]}"
    assert result_of(lout) == ref, f"{what}: {lout!r} != {ref!r}"   # every rank's result
    assert a.returncode == 0, aerr
    s = load_summary(out)
    ranks = [t for t in s["targets"] if t.get("parent") == p.pid]
    # none died
    for t in ranks:
        assert t["state"] == "profiled", t
        assert t.get("exit", {"how": "exited with code 0"})["how"] == "exited with code 0", t
    return p.pid, s, ranks


def test_attach_to_a_launcher_whose_ranks_start_in_the_window(procs, tmp_path):
    require_root()
    args = ["--ranks", "2", "--steps", STEPS, "--stagger", "0.4"]
    ref = reference(LAUNCHER + args)
    rnd = random.Random(31)
    for i in range(LAUNCHES):
        _, s, ranks = launch_profiled(procs, args, ref, tmp_path / f"l{i}", "6s",
                                      rnd.uniform(0.0, 0.5), f"launch {i}")
        # each rank exec'd in the window was attached
        assert len(ranks) >= 2, (s["followed_attach"], s["targets"])


def aiprof_threads(pid):
    names = []
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/comm") as f:
                names.append(f.read().strip())
        except OSError:
            pass
    return [n for n in names if n.startswith("aiprof")]


def aiprof_fds(pid):
    out = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            link = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if "aiprof" in link:
            out.append(link)
    return out


def test_after_the_window_nothing_of_ours_runs_or_stays_open(procs, tmp_path):
    require_root()
    p, _ = procs.start(STARTUP + ["--steps", "100000"])
    time.sleep(2.5)                                  # past the import: training
    for k in range(2):                               # and again: the woken copy too
        r = run_aiprof(["profile", "--pid", str(p.pid), "-d", "1s", "-q", "-o",
                        str(tmp_path / f"w{k}")])
        assert r.returncode == 0, r.stderr
        t = load_summary(tmp_path / f"w{k}")["targets"][0]
        assert t["injection"] == ("ptrace" if k == 0 else "ptrace-woken"), t
        assert t["detached"] == "released", t
        assert aiprof_threads(p.pid) == [], aiprof_threads(p.pid)
        assert aiprof_fds(p.pid) == [], aiprof_fds(p.pid)
    # and stays so: no wake-ups of ours (the control thread used to wake every second)
    time.sleep(1.5)
    assert aiprof_threads(p.pid) == [] and aiprof_fds(p.pid) == []
    assert p.poll() is None


def test_our_threads_are_in_none_of_the_targets_data(procs, tmp_path):
    """The control thread and the loader thread are left out of every artifact, by tid."""
    require_root()
    p, _ = procs.start([STARTUP[0], os.path.join(WORKLOADS, "py_waiters.py")], ready="ready")
    r = run_aiprof(["profile", "--pid", str(p.pid), "-d", "2s", "-q", "-o", str(tmp_path / "o")])
    assert r.returncode == 0, r.stderr
    s = load_summary(tmp_path / "o")
    et = [t for t in s["ebpf"]["targets"] if t["pid"] == p.pid][0]
    assert et["aiprof_threads"] >= 1, et
    for name in ("stacks.folded", "offcpu.folded", "stacks.json", "stacks.txt"):
        with open(tmp_path / "o" / name) as f:
            text = f.read()
        for word in ("aiprof-ctl", "control_main", "aiprof_ctor", "go_live"):
            assert word not in text, (name, word)
    tl = load_timeline(tmp_path / "o")
    names = {e.get("args", {}).get("name") for e in tl["traceEvents"] if e.get("ph") == "M"}
    assert "aiprof-ctl" not in names, names


def test_a_target_killed_in_the_window_is_named_with_its_signal(procs, tmp_path):
    require_root()
    p, _ = procs.start([STARTUP[0], os.path.join(WORKLOADS, "py_waiters.py")], ready="ready")
    term = tmp_path / "term.json"
    a = profile(p.pid, tmp_path / "o", "4s", "--termination-log", str(term))
    time.sleep(1.5)
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    _, aerr = a.communicate(timeout=120)
    assert a.returncode == 0, aerr
    s = load_summary(tmp_path / "o")
    t = s["targets"][0]
    assert t["exit"]["signal"] == "SIGKILL" and t["exit"]["how"] == "killed by SIGKILL", t
    assert t["exit"]["aiprof_was"].startswith("recording"), t
    died = [f for f in s["findings"] if f["category"] == "TargetDied"]
    assert died and died[0]["severity"] == "critical" and "SIGKILL" in died[0]["summary"], died
    with open(tmp_path / "o" / "report.html") as f:
        assert "killed by SIGKILL" in f.read()
    import json
    with open(term) as f:
        msg = json.load(f)
    assert msg["summary"][f"killed_pid_{p.pid}_signal"] == signal.SIGKILL, msg
    assert msg["summary"]["processes_killed"] == 1, msg
    assert {"category": "TargetDied", "severity": "critical"} in msg["findings"], msg


def test_a_two_rank_ddp_job_over_gloo_attached_at_its_launch(procs, tmp_path):
    """Real torch.distributed DDP, launched as torchrun launches; aiprof follows the ranks."""
    require_root()
    args = ["--ranks", "2", "--script", "ddp_gloo.py", "--port", "29537", "--stagger", "0",
            "--steps", "40"]
    ref = reference(LAUNCHER + args)
    pid, s, ranks = launch_profiled(procs, args, ref, tmp_path / "o", "20s", 0, "DDP")
    assert len(ranks) == 2, s["targets"]
    # every rank recorded, with Python frames
    ebpf_ranks = [t for t in s["ebpf"]["targets"] if t.get("parent") == pid]
    assert len({t["pid"] for t in ebpf_ranks}) == 2, ebpf_ranks
    with open(tmp_path / "o" / "stacks.folded") as f:
        folded = f.read()
    for t in ebpf_ranks:
        mine = [l for l in folded.splitlines() if f"-{t['pid']};" in l]
        assert any("ddp_gloo.py:" in l for l in mine), (t["pid"], mine[:5])


def test_a_target_that_dies_while_injected_is_named_so(procs, tmp_path):
    """Killed while one of its threads is stopped by aiprof: said as such, never 'a call failed'."""
    require_root()
    import json
    for attempt in range(30):
        p, _ = procs.start([STARTUP[0], os.path.join(WORKLOADS, "py_waiters.py")], ready="ready")
        term = tmp_path / f"term{attempt}.json"
        a = profile(p.pid, tmp_path / f"o{attempt}", "1s", "--termination-log", str(term))
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and not traced(p.pid) and a.poll() is None:
            pass
        landed = traced(p.pid)
        os.kill(p.pid, signal.SIGKILL)
        p.wait()
        _, aerr = a.communicate(timeout=120)
        if not landed or "while aiprof was injecting" not in aerr:
            continue        # the kill came before or after the injection: try again
        assert f"pid {p.pid} killed by SIGKILL while aiprof was injecting" in aerr, aerr
        with open(term) as f:
            msg = json.load(f)
        assert "killed by SIGKILL while aiprof was injecting" in msg.get("error", ""), msg
        return
    raise AssertionError("no kill landed inside an injection in 30 tries")


def test_stacks_of_a_launcher_show_its_ranks(procs, tmp_path):
    """`aiprof stacks --pid LAUNCHER` includes what it started; --no-children leaves them out."""
    require_root()
    import json
    p, _ = procs.start(LAUNCHER + ["--ranks", "2", "--steps", "100000", "--stagger", "0"],
                       ready="launcher")
    deadline = time.monotonic() + 20
    kids = []
    while time.monotonic() < deadline and len(kids) < 2:
        with open(f"/proc/{p.pid}/task/{p.pid}/children") as f:
            kids = [int(k) for k in f.read().split()]
        time.sleep(0.05)
    try:
        assert len(kids) == 2, kids
        r = run_aiprof(["stacks", "--pid", str(p.pid), "--format", "json"])
        assert r.returncode == 0, r.stderr
        pids = {q["pid"] for q in json.loads(r.stdout)["processes"]}
        assert pids == {p.pid, *kids}, (pids, kids)
        ranks = {q["pid"]: q["rank"] for q in json.loads(r.stdout)["processes"]}
        assert sorted(ranks[k] for k in kids) == [0, 1], ranks
        r = run_aiprof(["stacks", "--pid", str(p.pid), "--no-children", "--format", "json"])
        assert r.returncode == 0, r.stderr
        assert {q["pid"] for q in json.loads(r.stdout)["processes"]} == {p.pid}
    finally:
        # the ranks are the launcher's children, not ours: stopped by their pids here
        for k in kids:
            try:
                os.kill(k, signal.SIGKILL)
            except ProcessLookupError:
                pass



def test_our_control_thread_is_not_in_the_syscall_table(procs, tmp_path):
    """A one-thread Python program that only sleeps makes no futex call: the control
    thread's one wait a second must not be counted as its."""
    require_root()
    import json
    p, _ = procs.start([STARTUP[0], "-c", "import time\nprint('ready', flush=True)\n"
                        "while True:\n    time.sleep(0.01)\n"], ready="ready")
    r = run_aiprof(["profile", "--pid", str(p.pid), "-d", "3s", "-q", "-o", str(tmp_path / "o")])
    assert r.returncode == 0, r.stderr
    s = load_summary(tmp_path / "o")
    assert "futex" not in json.dumps(s["ebpf"]), \
        [t.get("syscalls") for t in s["ebpf"]["targets"]]
    assert "clock_nanosleep" in json.dumps(s["ebpf"])
