# SPDX-License-Identifier: MIT
"""Deep stacks told truthfully (issue 32): a Python recursion deeper than the frames a stack
keeps keeps its root (`<module>`, `main`) and its innermost frames, and the frames between
are a mark of their own, "[... N Python frames not shown]", counted in summary.json's
ebpf.stack_cuts; a stack deeper than the walk's bound says where the walk stopped; `aiprof
stacks` says whole_stack false for a cut stack and true for a shallow one.
Workload: tests/workloads/py_deep.py (Debian's python3).
"""
import json
import os
import re

from conftest import ROOT, load_summary, require_root, run_aiprof
from test_ebpf import folded

PYTHON = "/usr/bin/python3"
DEEP = os.path.join(ROOT, "tests", "workloads", "py_deep.py")
CUT = re.compile(r"\[\.\.\. (\d+) Python frames not shown\]")


def start_deep(procs, depth, *extra):
    _, line = procs.start([PYTHON, DEEP, "--depth", str(depth), "--seconds", "60"] + list(extra),
                          ready="ready")
    return int(line.split("pid=")[1].split()[0])


def profile(pid, out):
    r = run_aiprof(["profile", "--pid", str(pid), "-d", "3s", "-o", str(out),
                    "--collectors", "cpu,python"])
    assert r.returncode == 0, r.stderr
    return load_summary(out)


def py_frames(frames):
    return [f for f in frames if ".py:" in f or CUT.fullmatch(f) or f.startswith("[... Python")]


def test_deep_python_stack_keeps_its_root_and_marks_the_cut(procs, tmp_path):
    require_root()
    pid = start_deep(procs, 300)
    s = profile(pid, tmp_path / "out")
    st = folded(tmp_path / "out")
    total = sum(n for _, n in st)
    assert total >= 10, st
    good = 0
    for frames, n in st:
        py = py_frames(frames)
        marks = [i for i, f in enumerate(py) if CUT.fullmatch(f)]
        if len(marks) != 1:
            continue
        i = marks[0]
        # root first: <module>, main, then the outer descends; the mark; the inner ones
        # down to spin (301 descends, main, <module>, spin and its generator: 305)
        if not (py[0].startswith("<module> (") and py[1].startswith("main (")):
            continue
        if not any(f.startswith("spin (") for f in py[i + 1:]):
            continue
        cut = int(CUT.fullmatch(py[i]).group(1))
        kept = len(py) - 1
        assert kept == 64, py
        assert 300 <= kept + cut <= 306, (kept, cut)
        good += n
    print(f"{good}/{total} samples rooted at <module> with the cut marked")
    assert good >= 0.9 * total, st[:2]
    cuts = s["ebpf"]["stack_cuts"]
    assert cuts["python_walk_max"] == 1024 and cuts["python_kept_inner"] == 48, cuts
    assert cuts["python_stacks_cut"] >= 0.9 * s["ebpf"]["cpu_samples"], cuts
    assert cuts["python_cut_share"] >= 0.9, cuts
    assert s["ebpf"]["targets"][0]["python_cut_stack_share"] >= 0.9


def test_stack_deeper_than_the_walk_says_where_it_stopped(procs, tmp_path):
    require_root()
    pid = start_deep(procs, 1500)
    s = profile(pid, tmp_path / "out")
    st = folded(tmp_path / "out")
    total = sum(n for _, n in st)
    stopped = 0
    for frames, n in st:
        py = py_frames(frames)
        # the outermost Python frame is the mark of the walk's end, not a <module> it
        # did not reach
        if py and py[0] == "[... Python frames past 1024 not read]" and \
                not any(f.startswith("<module> (") for f in py) and CUT.fullmatch(py[17]):
            stopped += n
    assert total >= 10 and stopped >= 0.9 * total, st[:2]
    assert s["ebpf"]["stack_cuts"]["python_cut_share"] >= 0.9


def dump(pid):
    r = run_aiprof(["stacks", "--pid", str(pid), "--format", "json"])
    assert r.returncode == 0, r.stderr
    (p,) = json.loads(r.stdout)["processes"]
    (t,) = p["threads"]
    return t


def test_aiprof_stacks_marks_a_cut_stack_and_not_a_whole_one(procs):
    require_root()
    deep = start_deep(procs, 300, "--sleep")
    shallow = start_deep(procs, 20, "--sleep")
    t = dump(deep)
    names = [f["name"] for f in t["frames"]]   # innermost first
    cuts = [f["name"] for f in t["frames"] if f["kind"] == "cut"]
    assert t["whole_stack"] is False, names
    assert len(cuts) == 1 and CUT.fullmatch(cuts[0]), cuts
    py = [n for n in names if ".py:" in n]
    assert py[-1].startswith("<module> (") and py[-2].startswith("main ("), py[-3:]
    assert py[0].startswith("spin (") and len(py) == 64, py[:2]
    r = run_aiprof(["stacks", "--pid", str(deep)])
    assert "stack incomplete: where is marked [...]" in r.stdout and cuts[0] in r.stdout, r.stdout

    t = dump(shallow)
    assert t["whole_stack"] is True and not [f for f in t["frames"] if f["kind"] == "cut"], t
    py = [f["name"] for f in t["frames"] if f["kind"] == "python"]
    assert py[-1].startswith("<module> (") and len(py) == 21 + 3, py  # descend(20..0)
