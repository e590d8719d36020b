# SPDX-License-Identifier: MIT
"""Shared helpers for the integration tests: real processes, real ptrace, real files.

Every process a test starts is tracked by PID and stopped by PID at teardown.
"""
import gzip
import json
import os
import signal
import subprocess
import time

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.path.join(ROOT, os.environ.get("BUILD", "build"))
# AIPROF_BIN: another build of the injector (tests/run.sh runs some tests with the ASan one)
AIPROF = os.environ.get("AIPROF_BIN") or os.path.join(BUILD, "aiprof")
LIBAIPROF = os.path.join(BUILD, "libaiprof.so")

# The unwind rules aiprof shares across runs (--unwind-cache): in a directory of this test
# session's, removed at its end, instead of the machine's /var/cache/aiprof/unwind.
if "AIPROF_UNWIND_CACHE" not in os.environ:
    import tempfile
    UNWIND_CACHE_BASE = tempfile.mkdtemp(prefix="aiprof-test-uwc-")
    os.environ["AIPROF_UNWIND_CACHE"] = os.path.join(UNWIND_CACHE_BASE, "unwind")
else:
    UNWIND_CACHE_BASE = None
TRAINER = os.path.join(BUILD, "tests", "workloads", "trainer")


_TASK_WORK = []


def kernel_task_work():
    """(True, "") if the running kernel takes a task work scheduled from a sched_switch
    program, else (False, the verifier's words or why it was not asked): the tests' own
    probe (tests/workloads/task_work_probe.bpf.c, loaded by bpftool in a mount namespace of
    its own with a bpffs there, never attached), not what aiprof says it did."""
    if _TASK_WORK:
        return _TASK_WORK[0]
    obj = os.path.join(BUILD, "tests", "workloads", "task_work_probe.bpf.o")
    got = (False, "no probe object (built without eBPF)")
    if os.path.exists(obj):
        r = subprocess.run(["unshare", "-m", "sh", "-c",
                            'd=$(mktemp -d) && mount -t bpf bpf "$d" && '
                            'bpftool prog loadall "$1" "$d/p"; rc=$?; umount "$d"; '
                            'rmdir "$d"; exit $rc', "sh", obj],
                           capture_output=True, text=True, timeout=60)
        with open(obj, "rb") as f:
            has_prog = b"tp_btf/sched_switch" in f.read()
        if not has_prog:
            got = (False, "the build kernel's BTF has no struct bpf_task_work")
        elif r.returncode == 0:
            got = (True, "")
        else:
            why = [ln for ln in r.stderr.splitlines()
                   if "callback" in ln or "not allowed" in ln or "unknown func" in ln]
            got = (False, "; ".join(why) or r.stderr.strip()[-300:])
    _TASK_WORK.append(got)
    return got


def require_root():
    if os.geteuid() != 0:
        pytest.skip("needs root (ptrace of other users' processes, namespaces)")


class Procs:
    """Processes started by one test; all of them are killed by PID at the end."""

    def __init__(self):
        self.procs = []

    def start(self, argv, ready=None, timeout=20, **kw):
        kw.setdefault("stdout", subprocess.PIPE)
        kw.setdefault("stderr", subprocess.PIPE)
        kw.setdefault("text", True)
        p = subprocess.Popen(argv, **kw)
        self.procs.append(p)
        if ready:
            deadline = time.monotonic() + timeout
            line = ""
            while time.monotonic() < deadline:
                line = p.stdout.readline()
                if not line:
                    break
                if line.startswith(ready):
                    return p, line.strip()
            raise AssertionError(f"{argv[0]} did not print {ready!r} (last: {line!r}, rc={p.poll()})")
        return p, None

    def cleanup(self):
        for p in self.procs:
            if p.poll() is None:
                try:
                    os.kill(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
            for f in (p.stdout, p.stderr):
                if f:
                    f.close()


@pytest.fixture
def procs():
    p = Procs()
    yield p
    p.cleanup()


def run_aiprof(args, timeout=120, **kw):
    kw.setdefault("capture_output", True)
    kw.setdefault("text", True)
    return subprocess.run([AIPROF] + list(args), timeout=timeout, **kw)


def start_trainer(procs, *args, env=None, wrap=None):
    argv = [TRAINER] + list(args)
    if wrap:
        argv = list(wrap) + argv
    p, line = procs.start(argv, ready="ready", env=env)
    pid = int(line.split("pid=")[1].split()[0])
    return p, pid


def finish(p, timeout=120):
    out, err = p.communicate(timeout=timeout)
    return p.returncode, out, err


def checksum_of(out):
    for line in out.splitlines():
        if line.startswith("checksum="):
            return line.split("=", 1)[1].strip()
    raise AssertionError(f"no checksum line in {out!r}")


def load_timeline(outdir):
    with gzip.open(os.path.join(outdir, "timeline.json.gz"), "rt") as f:
        return json.load(f)


def load_summary(outdir):
    with open(os.path.join(outdir, "summary.json")) as f:
        return json.load(f)


def events(tl, cat=None, name=None):
    return [e for e in tl["traceEvents"]
            if e.get("ph") != "M" and (cat is None or e.get("cat") == cat)
            and (name is None or e.get("name") == name)]


def fd_count(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


def rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


def thread_states(pid):
    """State letter of every thread: 't' means stopped by a tracer."""
    states = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                states[int(tid)] = f.read().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            pass
    return states


def pytest_sessionfinish(session, exitstatus):
    """Stops the real Kubernetes (tests/k8s/realk8s.py) if a test started it; removes the
    session's unwind cache."""
    import shutil
    import sys
    if UNWIND_CACHE_BASE:
        shutil.rmtree(UNWIND_CACHE_BASE, ignore_errors=True)
    sys.path.insert(0, os.path.join(ROOT, "tests", "k8s"))
    import realk8s
    realk8s.stop_shared()
