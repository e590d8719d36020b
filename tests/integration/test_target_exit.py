"""aiprof profile when the process it records exits mid-window (its pod deleted, say): the
window is cut there, the artifacts of what was recorded until then are written, the exit code
is 0, and the termination message says so (summary window_cut=1, processes_exited,
window_end_unix_ms, a window_ms shorter than the one asked for)."""
import os
import signal
import subprocess
import time

from conftest import (AIPROF, events, load_summary, load_timeline, require_root,
                      start_trainer)
from test_container import assert_lists_local_artifacts, read_termination

WINDOW_S = 120


def wait_for_text(path, text, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if os.path.exists(path) and text in open(path).read():
            return
        time.sleep(0.1)
    raise AssertionError(f"{text!r} not in {path}: {open(path).read() if os.path.exists(path) else ''}")


def test_target_killed_mid_window(procs, tmp_path):
    require_root()
    p, pid = start_trainer(procs, "--ranks", "1", "--run-seconds", "300", "--batch-bytes",
                           str(1 << 20))
    out, term, log = tmp_path / "out", tmp_path / "termination-log", tmp_path / "stderr"
    with open(log, "w") as err:
        prof, _ = procs.start([AIPROF, "profile", "--pid", str(pid), "-d", f"{WINDOW_S}s", "-v",
                               "-o", str(out), "--termination-log", str(term)],
                              stdout=subprocess.PIPE, stderr=err)
    started = time.monotonic()
    wait_for_text(log, "recording 1 process", 60)
    time.sleep(2)                       # something to record
    killed_ms = time.time() * 1000
    os.kill(pid, signal.SIGKILL)
    p.wait(timeout=10)
    prof.wait(timeout=60)               # well before the 120 s window's end
    assert time.monotonic() - started < WINDOW_S - 30
    stderr = open(log).read()
    assert prof.returncode == 0, stderr
    assert "window cut after" in stderr and "exited" in stderr, stderr

    # the artifacts of the cut window, listed with their checksums
    msg = read_termination(term)
    assert "error" not in msg, msg
    assert_lists_local_artifacts(msg, out)
    s = msg["summary"]
    assert s["window_cut"] == 1 and s["processes_exited"] == 1, s
    assert s["exit_code"] == 0
    assert 1000 <= s["window_ms"] < WINDOW_S * 1000, s
    # the cut is noticed within a few polls of the kill (generous: a loaded machine)
    assert killed_ms - 1000 <= s["window_end_unix_ms"] <= killed_ms + 20000, (s, killed_ms)
    summary = load_summary(out)
    assert summary["events"] == s["events"] > 0
    tl = load_timeline(out)
    assert {e["pid"] for e in events(tl, "cuda_api")} == {pid}
    # kernels launched through host stubs keep their names: they were read while it lived
    names = {e["args"]["kernel"] for e in events(tl, "cuda_api", "cudaLaunchKernel")}
    assert {"sgemm_fwd_kernel", "sgemm_bwd_kernel"} <= names, names
    assert not any(n.startswith("[unknown") for n in names), names


def test_window_not_cut_while_the_target_lives(procs, tmp_path):
    """The control: a target that lives through the window has no cut in its message."""
    require_root()
    _, pid = start_trainer(procs, "--ranks", "1", "--run-seconds", "300", "--batch-bytes",
                           str(1 << 20))
    out, term = tmp_path / "out", tmp_path / "termination-log"
    r = subprocess.run([AIPROF, "profile", "--pid", str(pid), "-d", "2s", "--no-ebpf", "-o",
                        str(out), "--termination-log", str(term)], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    s = read_termination(term)["summary"]
    assert "window_cut" not in s and "processes_exited" not in s and "window_end_unix_ms" not in s, s
    assert s["window_ms"] >= 2000
