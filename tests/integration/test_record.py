# SPDX-License-Identifier: MIT
"""`aiprof record -- CMD` (issue 32): a command started by aiprof is recorded from its first
instruction. A Python script whose first statement spends 0.4 s in first_thing() and then
exits: its samples are there (a profile attached after a launch would have missed them),
with their Python frames, the command's output and status pass through, and the window
ends when the command exits. Bad command lines are refused with exit 2 before anything
runs."""
import os
import time

from conftest import AIPROF, load_summary, require_root, run_aiprof
from test_ebpf import folded

FIRST = """
import time
def first_thing():
    end = time.time() + 0.4
    while time.time() < end:
        sum(range(1000))
first_thing()
print("done", flush=True)
"""


def test_record_from_the_first_instruction(tmp_path):
    require_root()
    script = tmp_path / "first.py"
    script.write_text(FIRST)
    out = tmp_path / "out"
    t0 = time.monotonic()
    r = run_aiprof(["record", "-o", str(out), "--", "/usr/bin/python3", str(script)])
    took = time.monotonic() - t0
    assert r.returncode == 0, r.stderr
    assert "done" in r.stdout, r.stdout                   # its output, as it is
    assert "the command exited with status 0" in r.stderr, r.stderr
    assert took < 30, took                                # not the 24 h default window
    s = load_summary(out)
    (py,) = [t for t in s["ebpf"]["targets"] if t["comm"] == "python3"]
    assert py["python"].get("version", "").startswith("3."), py["python"]
    first = sum(n for st, n in folded(out) if any(f.startswith("first_thing (") for f in st))
    assert first >= 5, folded(out)[:3]
    assert any(t["method"] == "ebpf" for t in s["targets"]), s["targets"]


def test_record_passes_on_the_commands_failure(tmp_path):
    require_root()
    r = run_aiprof(["record", "-o", str(tmp_path / "f"), "--", "/bin/sh", "-c", "exit 3"])
    assert r.returncode == 0, r.stderr
    assert "the command exited with status 3" in r.stderr, r.stderr
    r = run_aiprof(["record", "-o", str(tmp_path / "g"), "--", str(tmp_path / "no-such")])
    assert "cannot run" in r.stderr and "status 127" in r.stderr, r.stderr


def test_record_refuses_a_bad_command_line(tmp_path):
    marker = tmp_path / "ran"
    for args in (["record"], ["record", "--"], ["record", "--pid", "1", "--", "touch", str(marker)],
                 ["record", "--method", "ptrace", "--", "touch", str(marker)],
                 ["record", "--duration", "soon", "--", "touch", str(marker)]):
        r = run_aiprof(args)
        assert r.returncode == 2, (args, r.returncode, r.stderr)
        assert "exited with status" not in r.stderr, r.stderr
    assert not marker.exists()      # nothing ran


def test_the_command_outlives_a_killed_aiprof(tmp_path):
    """aiprof SIGKILLed while recording: the command runs on to its end (its death signal
    was aiprof's only until it exec'd)."""
    require_root()
    import signal
    import subprocess
    done = tmp_path / "done"
    p = subprocess.Popen([AIPROF, "record", "-o", str(tmp_path / "o"), "--", "/bin/sh", "-c",
                          f"sleep 1.5; touch {done}"], stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 20
    line = ""
    while "recording" not in line and time.monotonic() < deadline:
        line = p.stderr.readline()
    assert "recording" in line, line
    p.send_signal(signal.SIGKILL)
    p.wait()
    end = time.monotonic() + 10
    while not done.exists() and time.monotonic() < end:
        time.sleep(0.1)
    assert done.exists()
