# SPDX-License-Identifier: MIT
"""Python threads carry the names the program gave them (issue 32).

A real CPython 3.11 program (tests/workloads/named_threads.py) starts threads named with
threading.Thread(name=...): plain, non-ASCII, with terminal escapes, a Thread subclass,
one whose instance dict was made, one started during the window, the main thread renamed,
and one started by _thread (no threading name). Those names are read from the target's memory (the Thread
that Thread._bootstrap runs, its _name) and appear where a user looks for a thread: the
thread headers of `aiprof stacks` (text and JSON) and the timeline's thread tracks. A
thread without one (the _thread one) keeps its OS name and is given none.
"""
import ast
import json
import os
import subprocess
import sys
import time

from conftest import AIPROF, ROOT, load_timeline, require_root, run_aiprof

WORKLOAD = [sys.executable if sys.executable.startswith("/usr/bin/") else "/usr/bin/python3",
            os.path.join(ROOT, "tests", "workloads", "named_threads.py")]


def start(procs, *args):
    """The workload, once it printed "ready": (its pid, {native tid: name}, the tids of
    threads without a threading name)."""
    p, _ = procs.start(WORKLOAD + list(args))
    names, unnamed = {}, set()
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        line = p.stdout.readline()
        assert line, f"the workload ended: {p.stderr.read()}"
        w = line.split(maxsplit=2)
        if w[0] == "thread":
            names[int(w[1])] = ast.literal_eval(w[2])
        elif w[0] == "bare":
            unnamed.add(int(w[1]))
        elif w[0].startswith("ready"):
            return p, int(line.split("pid=")[1]), names, unnamed
    raise AssertionError("the workload never said ready")


def thread_headers(text):
    """{tid: the header line} of stacks.txt."""
    out = {}
    for line in text.splitlines():
        if line.startswith("Thread "):
            out[int(line.split()[1])] = line
    return out


def test_threading_names_in_stacks(procs, tmp_path):
    require_root()
    p, pid, names, unnamed = start(procs, "--late", "0.2")
    time.sleep(0.6)     # "started-later" too
    line = p.stdout.readline().split(maxsplit=2)
    names[int(line[1])] = ast.literal_eval(line[2])
    assert sorted(names.values()) == sorted(["CustomThreadName-3", "data-loader \u00e9\u4e16",
                                             "evil\x1b[31m\nname", "with-a-dict",
                                             "started-later", "trainer-main"])
    assert names[pid] == "trainer-main"     # the main thread, as the program renamed it
    r = run_aiprof(["stacks", "--pid", str(pid)])
    assert r.returncode == 0, r.stderr
    heads = thread_headers(r.stdout)
    assert set(heads) >= set(names) | unnamed, (heads, names, unnamed)
    for tid, name in names.items():
        if name.isprintable():
            assert heads[tid].startswith(f'Thread {tid} "{name}" ('), heads[tid]
    # a name with escapes reaches the terminal as text: no ESC, no line break of its own
    evil = next(t for t, n in names.items() if "\x1b" in n)
    assert "\x1b" not in r.stdout
    assert heads[evil].startswith(f'Thread {evil} "evil'), heads[evil]
    assert "name\" (" in heads[evil], heads[evil]
    for tid in unnamed:
        assert heads[tid].startswith(f"Thread {tid} (python"), heads[tid]
    # JSON: the names exactly as the program gave them
    r = run_aiprof(["stacks", "--pid", str(pid), "--format", "json"])
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    threads = {t["tid"]: t for pr in doc["processes"] for t in pr["threads"]}
    for tid, name in names.items():
        assert threads[tid].get("python_name") == name, threads[tid]
    for tid in unnamed:
        assert "python_name" not in threads[tid], threads[tid]


def test_threading_names_on_the_timeline(procs, tmp_path):
    require_root()
    p, pid, names, unnamed = start(procs, "--late", "1.5")
    out = tmp_path / "o"
    a = subprocess.Popen([AIPROF, "profile", "--pid", str(pid), "-d", "3s", "-q", "-o", str(out)],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    line = p.stdout.readline().split(maxsplit=2)       # started in the window
    names[int(line[1])] = ast.literal_eval(line[2])
    _, err = a.communicate(timeout=120)
    assert a.returncode == 0, err
    tl = load_timeline(out)
    tracks = {e["tid"]: e["args"]["name"] for e in tl["traceEvents"]
              if e.get("ph") == "M" and e.get("name") == "thread_name" and e.get("pid") == pid}
    for tid, name in names.items():
        assert tracks.get(tid) == name, (tid, name, tracks)
    for tid in unnamed:
        assert tracks.get(tid, "python3").startswith("python3"), (tid, tracks)
