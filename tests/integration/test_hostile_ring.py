# SPDX-License-Identifier: MIT
"""The profiled process is untrusted: its event ring is shared memory it can write. While
`aiprof profile` records the trainer, tests/workloads/ring_scribbler damages the ring through
/proc/PID/fd (the same memory the target's own code could write): string chunks that lie about
their length and offset, records of unknown types, random bytes over every slot, a huge slot
count and a far tail in the header, and an attempt to shrink the memfd under the reader. The
injector must not crash, hang or be misled: it finishes its window, writes its artifacts, and
counts what it refused in summary.json (`rejected_records`)."""
import json
import os
import signal
import subprocess
import time

import pytest

from conftest import AIPROF, BUILD, load_summary, require_root, start_trainer
from test_container import assert_lists_local_artifacts, read_termination

SCRIBBLER = os.path.join(BUILD, "tests", "workloads", "ring_scribbler")


def scribble(pid, mode):
    r = subprocess.run([SCRIBBLER, str(pid), mode], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    return r.stdout


@pytest.mark.parametrize("mode", ["strings", "types", "random", "geometry", "truncate"])
def test_a_target_that_scribbles_its_ring(procs, tmp_path, mode):
    require_root()
    trainer, pid = start_trainer(procs, "--ranks", "1", "--run-seconds", "60")
    out = tmp_path / "out"
    termlog = tmp_path / "termination-log"
    prof, _ = procs.start([AIPROF, "profile", "--pid", str(pid), "--duration", "4s", "--no-ebpf",
                           "-o", str(out), "--termination-log", str(termlog)],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    # recording has begun once the library answers: give it the attach, then damage the ring
    # with the trainer stopped, so its own hooks do not overwrite what is planted
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and not os.path.exists(f"/proc/{pid}/maps"):
        time.sleep(0.1)
    time.sleep(1.5)
    os.kill(pid, signal.SIGSTOP)
    try:
        said = scribble(pid, mode)
        time.sleep(0.5)                 # the injector drains what was planted
    finally:
        if mode in ("random", "geometry"):
            # the target's own producers now read a damaged header or slots: that is its
            # business; end it, and the injector ends its window where the target went
            os.kill(pid, signal.SIGKILL)
        else:
            os.kill(pid, signal.SIGCONT)
    try:
        _, err = prof.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        raise AssertionError(f"aiprof hung after the ring was damaged ({mode})") from None
    assert prof.returncode == 0, f"aiprof exited {prof.returncode} after {mode}: {err[-3000:]}"
    summary = load_summary(out)
    t = summary["targets"][0]
    if mode == "strings":
        # five lie (the first chunk of the 10-byte string is sound, the one after it is not)
        assert t["rejected_records"] == 5, json.dumps(t)[:2000]
    elif mode == "types":
        assert t["rejected_records"] >= 8, json.dumps(t)[:2000]
    elif mode == "truncate":
        assert "truncate: refused" in said, said
        assert t["events"] > 0, json.dumps(t)[:2000]
    assert (out / "timeline.json.gz").exists()
    # the termination message, written last (under ASan too: it reads what the run left)
    term = read_termination(termlog)
    assert term["summary"]["exit_code"] == 0, term
    assert_lists_local_artifacts(term, out)
