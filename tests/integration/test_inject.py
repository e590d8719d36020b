# SPDX-License-Identifier: MIT
"""aiprof profile --pid on a process that is already running (issue: live injection).

The trainer is started normally — no LD_PRELOAD, no env var — and must finish with the
same checksum as an unprofiled run.
"""
import os
import subprocess
import threading
import time

import pytest

from conftest import (AIPROF, LIBAIPROF, TRAINER, checksum_of, events, fd_count, finish,
                      load_summary, load_timeline, require_root, rss_kb, run_aiprof,
                      start_trainer, thread_states)

BATCH = 1 << 20
TRAINER_ARGS = ["--ranks", "2", "--steps", "150", "--batch-bytes", str(BATCH)]


@pytest.fixture(scope="module")
def reference_checksum():
    r = subprocess.run([TRAINER] + TRAINER_ARGS, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    return checksum_of(r.stdout)


class StopWatcher:
    """Samples the target's thread states; records the longest run of 'traced-stop'."""

    def __init__(self, pid):
        self.pid, self.longest, self.running = pid, 0.0, True
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        since = None
        while self.running:
            try:
                stopped = any(s in ("t", "T") for s in thread_states(self.pid).values())
            except (FileNotFoundError, ProcessLookupError):
                break
            now = time.monotonic()
            if stopped and since is None:
                since = now
            elif not stopped and since is not None:
                self.longest = max(self.longest, now - since)
                since = None
            time.sleep(0.0005)

    def stop(self):
        self.running = False
        self.thread.join()
        return self.longest


def assert_trainer_timeline(tl, nranks=2):
    launches = events(tl, "cuda_api", "cudaLaunchKernel")
    assert launches, "no kernel launches recorded"
    names = {e["args"]["kernel"] for e in launches}
    assert {"sgemm_fwd_kernel", "relu_bwd_kernel", "adam_update_kernel"} <= names, names
    for e in launches:
        assert all(v >= 1 for v in e["args"]["grid"] + e["args"]["block"]), e
    drv = events(tl, "cuda_api", "cuLaunchKernel")
    assert "fused_layernorm_kernel" in {e["args"]["kernel"] for e in drv}
    copies = events(tl, "cuda_memcpy")
    h2d = [e for e in copies if e["args"]["kind"] == "HtoD"]
    d2h = [e for e in copies if e["args"]["kind"] == "DtoH"]
    assert any(e["args"]["bytes"] == BATCH for e in h2d), sorted({e["args"]["bytes"] for e in h2d})
    assert d2h, "no device-to-host copies"
    assert all(e["args"]["host_memory"] in ("pinned", "pageable") for e in h2d + d2h)
    coll = events(tl, "nccl", "ncclAllReduce")
    assert coll, "no allreduce recorded"
    for e in coll:
        a = e["args"]
        assert a["op"] == "AllReduce" and a["datatype"] == "float32" and a["redop"] == "sum"
        assert a["bytes"] == a["count"] * 4 and a["bytes"] > 0
        assert a["nranks"] == nranks and 0 <= a["rank"] < nranks
    assert {e["args"]["rank"] for e in coll} == set(range(nranks))
    for e in events(tl):
        assert {"ph", "ts", "pid", "tid", "cat", "name"} <= set(e), e


def test_profile_running_trainer(procs, tmp_path, reference_checksum):
    require_root()
    p, pid = start_trainer(procs, *TRAINER_ARGS)
    with open(f"/proc/{pid}/environ", "rb") as f:
        assert b"LD_PRELOAD" not in f.read()
    with open(f"/proc/{pid}/maps") as f:
        assert "libaiprof" not in f.read()
    watcher = StopWatcher(pid)
    out = tmp_path / "out"
    r = run_aiprof(["profile", "--pid", str(pid), "--duration", "3s", "-o", str(out)])
    longest_stop = watcher.stop()
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str(out)

    tl = load_timeline(out)
    assert_trainer_timeline(tl)
    s = load_summary(out)
    t = s["targets"][0]
    assert t["pid"] == pid and t["injection"] == "ptrace" and t["state"] == "profiled"
    assert 0 < t["stopped_us"] < 1e6
    assert "stopped for" in r.stderr
    # nothing we could observe stopped the target for longer than aiprof measured (+ sampling slack)
    assert longest_stop <= t["stopped_us"] / 1e6 + 0.02, (longest_stop, t["stopped_us"])
    # no GPU here: CUPTI cannot run, the summary says so and why
    assert t["gpu_timing"]["source"] == "api" and t["gpu_timing"]["reason"]

    rc, stdout, stderr = finish(p)
    assert rc == 0, stderr
    assert checksum_of(stdout) == reference_checksum
    # the library stayed loaded but idle
    assert s["counts"]["nccl"] > 0


def lib_copies(pid):
    """The distinct copies of libaiprof.so mapped in pid (by inode)."""
    with open(f"/proc/{pid}/maps") as f:
        return {line.split()[4] for line in f if "libaiprof.so" in line}


def test_second_attach_wakes_the_released_library(procs, tmp_path):
    """After a window the library is dormant; the next one wakes that copy, loads none."""
    require_root()
    p, pid = start_trainer(procs, "--ranks", "2", "--steps", "200")
    r1 = run_aiprof(["profile", "--pid", str(pid), "-d", "1s", "-o", str(tmp_path / "a")])
    assert r1.returncode == 0, r1.stderr
    assert load_summary(tmp_path / "a")["targets"][0]["detached"] == "released"
    r2 = run_aiprof(["profile", "--pid", str(pid), "-d", "1s", "-o", str(tmp_path / "b")])
    assert r2.returncode == 0, r2.stderr
    t = load_summary(tmp_path / "b")["targets"][0]
    assert t["injection"] == "ptrace-woken" and t["detached"] == "released", t
    assert events(load_timeline(tmp_path / "b"), "nccl", "ncclAllReduce")
    with open(f"/proc/{pid}/maps") as f:
        maps = f.read()
    # loaded once, from a memfd: nothing was written into the target's filesystem
    assert len(lib_copies(pid)) == 1, lib_copies(pid)
    assert maps.count("/memfd:libaiprof.so") >= 1 and "/libaiprof.so" not in maps.replace("/memfd:libaiprof.so", "")
    assert finish(p)[0] == 0


def test_ld_preload_at_start(procs, tmp_path, reference_checksum):
    require_root()
    env = dict(os.environ, LD_PRELOAD=LIBAIPROF)
    p, pid = start_trainer(procs, *TRAINER_ARGS, env=env)
    r = run_aiprof(["profile", "--pid", str(pid), "-d", "2s", "-o", str(tmp_path / "o")])
    assert r.returncode == 0, r.stderr
    assert load_summary(tmp_path / "o")["targets"][0]["injection"] == "already-loaded"
    assert_trainer_timeline(load_timeline(tmp_path / "o"))
    rc, out, err = finish(p)
    assert rc == 0 and checksum_of(out) == reference_checksum


def test_target_in_other_pid_and_mount_namespace(procs, tmp_path, reference_checksum):
    require_root()
    p, _ = procs.start(["unshare", "--pid", "--mount", "--fork", "--mount-proc", TRAINER]
                       + TRAINER_ARGS, ready="ready")
    # the trainer is pid 1 in its namespace; find its host pid through unshare's child
    deadline = time.monotonic() + 10
    host_pid = None
    while time.monotonic() < deadline and host_pid is None:
        for child in open(f"/proc/{p.pid}/task/{p.pid}/children").read().split():
            host_pid = int(child)
        time.sleep(0.01)
    assert host_pid, "no child of unshare"
    assert os.readlink(f"/proc/{host_pid}/ns/pid") != os.readlink("/proc/self/ns/pid")
    assert os.readlink(f"/proc/{host_pid}/ns/mnt") != os.readlink("/proc/self/ns/mnt")
    out = tmp_path / "ns"
    r = run_aiprof(["profile", "--pid", str(host_pid), "-d", "3s", "-o", str(out)])
    assert r.returncode == 0, r.stderr
    tl = load_timeline(out)
    assert_trainer_timeline(tl)
    # thread ids in the timeline are host tids of the target
    tids = {e["tid"] for e in events(tl, "nccl")}
    assert all(os.path.exists(f"/proc/{host_pid}/task/{t}") or t > 1 for t in tids)
    rc, stdout, stderr = finish(p)
    assert rc == 0, stderr
    assert checksum_of(stdout) == reference_checksum


def test_many_attach_detach_cycles_under_signals_and_malloc(procs, tmp_path):
    """200 attach/detach cycles on a multi-threaded trainer with a signal storm."""
    require_root()
    p, pid = start_trainer(procs, "--ranks", "2", "--stress", "--run-seconds", "600")
    r = run_aiprof(["profile", "--pid", str(pid), "-d", "100ms", "-o", str(tmp_path / "first")])
    assert r.returncode == 0, r.stderr
    time.sleep(0.3)
    fds0, rss0 = fd_count(pid), rss_kb(pid)
    for i in range(200):
        r = run_aiprof(["profile", "--pid", str(pid), "-d", "20ms", "-q",
                        "-o", str(tmp_path / "cycle")], timeout=30)
        assert r.returncode == 0, (i, r.stderr)
        assert p.poll() is None, f"target died after cycle {i}"
    time.sleep(0.3)
    fds1, rss1 = fd_count(pid), rss_kb(pid)
    assert fds1 <= fds0, (fds0, fds1)
    # RSS may move with the workload's own allocations; it must not grow with the cycles
    assert rss1 <= rss0 + 4096, (rss0, rss1)
    assert any(e for e in events(load_timeline(tmp_path / "cycle")))
    assert p.poll() is None


def test_fresh_injections_under_signal_storm(procs, tmp_path):
    """The ptrace path itself, repeated on fresh multi-threaded targets taking signals."""
    require_root()
    for i in range(15):
        p, pid = start_trainer(procs, "--ranks", "2", "--stress", "--run-seconds", "60")
        r = run_aiprof(["profile", "--pid", str(pid), "-d", "200ms", "-o", str(tmp_path / f"f{i}")])
        assert r.returncode == 0, (i, r.stderr)
        assert load_summary(tmp_path / f"f{i}")["targets"][0]["injection"] == "ptrace"
        time.sleep(0.2)
        assert p.poll() is None, f"target died after injection {i}: {p.stderr.read()}"
        assert not any(s in ("t", "T") for s in thread_states(pid).values())
        # the scheduling boost used while stopped is undone
        assert all(os.sched_getscheduler(tid) == os.SCHED_OTHER for tid in thread_states(pid))
        p.kill()
        p.wait()
