# SPDX-License-Identifier: MIT
"""The task-work maps of the off-CPU and syscall collectors (bpf/offcpu.bpf.c, syscalls.bpf.c,
16,384 slots each, one per thread whose record a task work completes) are emptied as threads
exit: a window in which more short-lived threads than that sleep in a system call and exit
leaves the maps holding only live threads, and no task work goes unscheduled for want of a
slot (summary.json's task_work_map_full). Before, every slot stayed until the map was full and
the records of the threads after that were lost, silently.

The maps are read with bpftool, found through the map ids in aiprof's own /proc/PID/fdinfo
(other aiprof runs on the machine have maps of the same names)."""
import json
import os
import re
import signal
import subprocess
import time

import pytest

from conftest import AIPROF, kernel_task_work, load_summary, require_root

THREADS = 17000          # more than a map's 16,384 slots
# A workload: after a line on stdin, THREADS threads, 100 at a time, each sleeping 5 ms in
# a system call (a long sleep for the collectors: a task work each) and exiting.
WORKLOAD = r"""
import sys, threading, time
print("ready", flush=True)
sys.stdin.readline()
for b in range(int(sys.argv[1]) // 100):
    ts = [threading.Thread(target=time.sleep, args=(0.005,)) for _ in range(100)]
    [t.start() for t in ts]
    [t.join() for t in ts]
print("done", flush=True)
sys.stdin.readline()
"""
NAMES = ("offcpu_works", "sys_works")


def maps_of(pid):
    """{name: id} of the task-work maps process pid holds."""
    ids = set()
    for fd in os.listdir(f"/proc/{pid}/fdinfo"):
        try:
            with open(f"/proc/{pid}/fdinfo/{fd}") as f:
                m = re.search(r"^map_id:\s*(\d+)", f.read(), re.M)
        except OSError:
            continue
        if m:
            ids.add(int(m.group(1)))
    out = subprocess.run(["bpftool", "-j", "map", "show"], capture_output=True, text=True,
                         check=True).stdout
    return {m["name"]: m["id"] for m in json.loads(out) if m["id"] in ids and
            m.get("name") in NAMES}


def entries(map_id):
    out = subprocess.run(["bpftool", "-j", "map", "dump", "id", str(map_id)],
                         capture_output=True, text=True, check=True).stdout
    return len(json.loads(out))


@pytest.mark.skipif(not kernel_task_work()[0], reason="needs a task work from sched_switch "
                    "(Linux 6.18): " + kernel_task_work()[1])
def test_task_work_slots_go_with_their_threads(procs, tmp_path):
    require_root()
    script = tmp_path / "threads.py"
    script.write_text(WORKLOAD)
    target, _ = procs.start(["/usr/bin/python3", "-u", str(script), str(THREADS)],
                            ready="ready", stdin=subprocess.PIPE)
    out = tmp_path / "out"
    prof, _ = procs.start([AIPROF, "profile", "--pid", str(target.pid), "--duration", "120s",
                           "--collectors", "offcpu,syscalls", "-o", str(out), "-q"])
    deadline = time.monotonic() + 30
    ids = {}
    while len(ids) < len(NAMES) and time.monotonic() < deadline and prof.poll() is None:
        time.sleep(0.2)
        ids = maps_of(prof.pid)
    assert set(ids) == set(NAMES), (ids, prof.poll())
    time.sleep(1)                              # the window is open: the probes attached
    target.stdin.write("go\n")
    target.stdin.flush()
    assert target.stdout.readline().strip() == "done"
    # every thread but the main one has exited: its slot with it
    left = {name: entries(i) for name, i in ids.items()}
    assert all(n <= 8 for n in left.values()), left
    prof.send_signal(signal.SIGINT)            # ends the window; the artifacts are written
    _, err = prof.communicate(timeout=120)
    assert prof.returncode == 0, err
    eb = load_summary(str(out))["ebpf"]
    assert eb["task_work_map_full"] == 0, eb
    target.stdin.write("end\n")
    target.stdin.flush()
