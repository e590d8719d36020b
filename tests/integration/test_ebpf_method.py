# SPDX-License-Identifier: MIT
"""aiprof profile --method ebpf (issue: eBPF-only method, for when ptrace is not allowed).

Uprobes on the target's own libcudart/libcuda/libnccl/libibverbs: nothing may be loaded
into the trainer, it is never stopped, its result is unchanged, and the timeline carries
the same categories and arguments the interception library would have written, minus what
the summary lists under "limits".
"""
import os
import subprocess
import sys
import threading
import time

import pytest

from conftest import (AIPROF, BUILD, TRAINER, checksum_of, events, finish, load_summary,
                      load_timeline, require_root, run_aiprof, start_trainer,
                      thread_states)

BATCH = 1 << 20
GRAD = BATCH // 4                       # the trainer's default --grad-bytes
TRAINER_ARGS = ["--ranks", "2", "--steps", "200", "--batch-bytes", str(BATCH)]
CUDART = os.path.join(BUILD, "tests", "doubles", "libcudart.so.13")

# the trainer's kernels (tests/workloads/trainer.c: compute(), train_step())
# what libaiprof.so writes, and so what this method must write; the eBPF collectors of
# bpf/module.mk (cpu_sample, offcpu, syscall, python) run alongside by default
API_CATS = {"cuda_api", "cuda_kernel", "cuda_memcpy", "cuda_memory", "nccl", "rdma"}

GRIDS = {
    "sgemm_fwd_kernel": [8192, 4, 1], "relu_fwd_kernel": [4096, 1, 1],
    "sgemm_bwd_kernel": [8192, 6, 1], "relu_bwd_kernel": [4096, 1, 1],
    "adam_update_kernel": [8192, 1, 1],
}


@pytest.fixture(scope="module")
def reference_checksum():
    r = subprocess.run([TRAINER] + TRAINER_ARGS, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return checksum_of(r.stdout)


def read_maps(pid):
    with open(f"/proc/{pid}/maps") as f:
        return f.read()


def tids_of(pid):
    return {int(t) for t in os.listdir(f"/proc/{pid}/task")}


class Watcher:
    """While aiprof runs: what the target maps, and whether any thread is ever stopped."""

    def __init__(self, pid):
        self.pid, self.running = pid, True
        self.maps, self.stopped, self.tids = set(), False, set()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        while self.running:
            try:
                for line in read_maps(self.pid).splitlines():
                    parts = line.split(None, 5)
                    if len(parts) == 6:
                        self.maps.add(parts[5])
                states = thread_states(self.pid)
                self.tids |= set(states)
                self.stopped |= any(s in ("t", "T") for s in states.values())
            except (FileNotFoundError, ProcessLookupError):
                break
            time.sleep(0.002)

    def stop(self):
        self.running = False
        self.thread.join()


def api_events(tl, name=None):
    return [e for e in events(tl, name=name) if e.get("cat") in API_CATS]


def assert_nothing_loaded(paths):
    """No interception library, no memfd (libaiprof.so or its event ring) in the target."""
    assert not [p for p in paths if "libaiprof" in p or "memfd:" in p], sorted(paths)


def assert_ebpf_timeline(tl, pid, tids):
    evs = api_events(tl)
    assert evs
    assert {e["pid"] for e in evs} == {pid}
    assert {e["tid"] for e in evs} <= tids, ({e["tid"] for e in evs}, tids)
    for e in evs:
        assert {"ph", "ts", "dur", "pid", "tid", "cat", "name"} <= set(e), e

    # runtime launches: names from the host stubs, dim3 grid/block decoded from registers
    launches = events(tl, "cuda_api", "cudaLaunchKernel")
    assert {e["args"]["kernel"] for e in launches} == set(GRIDS)
    for e in launches:
        a = e["args"]
        assert a["grid"] == GRIDS[a["kernel"]] and a["block"] == [256, 1, 1], e
        assert a["shared_mem"] == 0 and a["result"] == 0, e
    # driver launches: the CUfunction handle, since cuFuncGetName cannot be called
    drv = events(tl, "cuda_api", "cuLaunchKernel")
    assert drv
    for e in drv:
        assert e["args"]["kernel"].startswith("[CUfunction 0x"), e
        assert e["args"]["grid"] == [2048, 4, 1] and e["args"]["block"] == [256, 1, 1], e
    assert len({e["args"]["kernel"] for e in drv}) == 2          # one module per rank

    # copies: bytes and direction; pinned/pageable unknown (allocated before the window)
    copies = events(tl, "cuda_memcpy")
    h2d = [e for e in copies if e["name"] == "cudaMemcpyAsync" and e["args"]["kind"] == "HtoD"]
    d2h = [e for e in copies if e["args"]["kind"] == "DtoH"]
    assert h2d and all(e["args"]["bytes"] == BATCH for e in h2d), h2d[:3]
    assert d2h and all(e["args"]["bytes"] == GRAD for e in d2h), d2h[:3]
    assert all(e["args"]["host_memory"] == "unknown" for e in h2d + d2h)
    assert all(e["args"]["async"] for e in h2d + d2h)
    labels = events(tl, "cuda_memcpy", "cuMemcpyHtoDAsync_v2")
    assert labels and all(e["args"]["bytes"] == 4096 and e["args"]["kind"] == "HtoD"
                          for e in labels)
    assert all(e["args"]["host_memory"] == "none"
               for e in copies if e["args"]["kind"] == "DtoD")

    # the gradient all-reduce
    coll = events(tl, "nccl", "ncclAllReduce")
    assert coll
    for e in coll:
        a = e["args"]
        assert a["op"] == "AllReduce" and a["datatype"] == "float32" and a["redop"] == "sum", a
        assert a["count"] == GRAD // 4 and a["bytes"] == GRAD, a
        # communicators were created before the window: rank unknown, and said so
        assert a["rank"] == -1 and a["nranks"] == -1, a
        assert a["result"] == 0
    assert len({e["tid"] for e in coll}) == 2                     # both ranks
    assert events(tl, "cuda_api", "cudaStreamSynchronize")


def assert_ebpf_summary(t, pid):
    assert t["pid"] == pid and t["state"] == "profiled"
    assert t["method"] == "ebpf" and t["injection"] == "none"
    assert t["stopped_us"] == 0
    assert t["gpu_timing"]["source"] == "api" and "eBPF" in t["gpu_timing"]["reason"]
    limits = " | ".join(t["limits"])
    for what in ("CUPTI", "cuFuncGetName", "pinned", "rank", "ibv_post_send"):
        assert what in limits, (what, t["limits"])
    assert any("communicator was created before the window" in s for s in t["limits"])
    libs = {os.path.basename(m["path"]): m for m in t["uprobes"]["libraries"]}
    assert set(libs) == {"libcudart.so.13", "libcuda.so.1", "libnccl.so.2", "libibverbs.so.1"}
    assert all(m["functions"] > 0 and "error" not in m for m in libs.values()), libs
    assert t["uprobes"]["ring_drops"] == 0 and t["dropped_events"] == 0


def test_ebpf_profiles_trainer_without_loading_anything(procs, tmp_path, reference_checksum):
    require_root()
    p, pid = start_trainer(procs, *TRAINER_ARGS)
    before = read_maps(pid)
    assert_nothing_loaded([before])
    watcher = Watcher(pid)
    out = tmp_path / "out"
    r = run_aiprof(["profile", "--method", "ebpf", "--pid", str(pid), "-d", "3s", "-o", str(out)])
    watcher.stop()
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == str(out)
    assert "nothing loaded into the process" in r.stderr

    # nothing was loaded, then or during the window; no thread was ever stopped
    assert_nothing_loaded(watcher.maps | {read_maps(pid)})
    assert not watcher.stopped
    assert not [f for f in os.listdir(f"/proc/{pid}/fd")
                if "memfd" in os.readlink(f"/proc/{pid}/fd/{f}")]

    tl = load_timeline(out)
    assert_ebpf_timeline(tl, pid, watcher.tids)
    s = load_summary(out)
    assert len(s["targets"]) == 1
    assert_ebpf_summary(s["targets"][0], pid)
    assert s["counts"]["nccl"] > 0 and s["counts"]["cuda_api"] > 0

    rc, stdout, stderr = finish(p)
    assert rc == 0, stderr
    assert checksum_of(stdout) == reference_checksum


def test_ebpf_never_sees_an_unrelated_process(procs, tmp_path):
    """Another trainer on the same library files: its calls never trap, never appear."""
    require_root()
    pa, a = start_trainer(procs, *TRAINER_ARGS)
    pb, b = start_trainer(procs, "--ranks", "3", "--steps", "200", "--batch-bytes", "3M")
    out = tmp_path / "a"
    r = run_aiprof(["profile", "--method", "ebpf", "--pid", str(a), "-d", "2s", "-o", str(out)])
    assert r.returncode == 0, r.stderr
    tl = load_timeline(out)
    evs = api_events(tl)
    assert evs and {e["pid"] for e in evs} == {a}
    assert not {e["tid"] for e in evs} & tids_of(b)
    sizes = {e["args"]["bytes"] for e in events(tl, "cuda_memcpy")}
    assert (3 << 20) not in sizes and (3 << 20) // 4 not in sizes, sizes
    assert {e["args"]["count"] for e in events(tl, "nccl", "ncclAllReduce")} == {GRAD // 4}
    # the breakpoints went into a's memory only: b never even got the kernel's uprobe page
    assert "[uprobes]" in read_maps(a)
    assert "[uprobes]" not in read_maps(b)
    assert finish(pa)[0] == 0 and finish(pb)[0] == 0


def test_ebpf_target_in_other_pid_and_mount_namespace(procs, tmp_path, reference_checksum):
    """The libraries exist only in the target's mount namespace (a private tmpfs)."""
    require_root()
    root = tmp_path / "nsroot"
    root.mkdir()
    doubles = os.path.join(BUILD, "tests", "doubles")
    script = (f"mount -t tmpfs aiprof-test {root} && mkdir {root}/workloads {root}/doubles && "
              f"cp {TRAINER} {root}/workloads/ && cp -a {doubles}/lib*.so* {root}/doubles/ && "
              f"exec {root}/workloads/trainer " + " ".join(TRAINER_ARGS))
    p, _ = procs.start(["unshare", "--pid", "--mount", "--fork", "--mount-proc", "sh", "-c",
                        script], ready="ready")
    deadline = time.monotonic() + 10
    host_pid = None
    while time.monotonic() < deadline and host_pid is None:
        for child in open(f"/proc/{p.pid}/task/{p.pid}/children").read().split():
            host_pid = int(child)
        time.sleep(0.01)
    assert host_pid, "no child of unshare"
    assert os.readlink(f"/proc/{host_pid}/ns/mnt") != os.readlink("/proc/self/ns/mnt")
    lib = f"{root}/doubles/libcudart.so.13"
    assert lib in read_maps(host_pid)
    assert not os.path.exists(lib), "the test needs a library only the target can see"

    tids = tids_of(host_pid)
    out = tmp_path / "ns"
    r = run_aiprof(["profile", "--method", "ebpf", "--pid", str(host_pid), "-d", "3s",
                    "-o", str(out)])
    assert r.returncode == 0, r.stderr
    tl = load_timeline(out)
    # ids in the timeline are host tids, as with ptrace
    assert_ebpf_timeline(tl, host_pid, tids)
    s = load_summary(out)
    assert_ebpf_summary(s["targets"][0], host_pid)
    assert lib in {m["path"] for m in s["targets"][0]["uprobes"]["libraries"]}
    assert_nothing_loaded([read_maps(host_pid)])
    rc, stdout, stderr = finish(p)
    assert rc == 0, stderr
    assert checksum_of(stdout) == reference_checksum


LATE_LOADER = r"""
import ctypes, os, sys, time
print(f"ready pid={os.getpid()}", flush=True)
sys.stdin.readline()
cudart = ctypes.CDLL(sys.argv[1])
dev, pinned = ctypes.c_void_p(), ctypes.c_void_p()
pageable = ctypes.create_string_buffer(4096)
assert cudart.cudaMalloc(ctypes.byref(dev), ctypes.c_size_t(4096)) == 0
for _ in range(150):                      # before and after aiprof notices the library
    cudart.cudaMemcpy(dev, pageable, ctypes.c_size_t(4096), 1)
    time.sleep(0.01)
assert cudart.cudaMallocHost(ctypes.byref(pinned), ctypes.c_size_t(2048)) == 0
for _ in range(50):
    cudart.cudaMemcpy(dev, pinned, ctypes.c_size_t(2048), 1)
    time.sleep(0.01)
print("done", flush=True)
"""


def test_ebpf_library_loaded_during_the_window(procs, tmp_path):
    """A process that dlopens libcudart after the session started is probed from then on;
    pinned memory allocated in the window is reported as such."""
    require_root()
    p, line = procs.start([sys.executable, "-c", LATE_LOADER, CUDART], ready="ready",
                          stdin=subprocess.PIPE)
    pid = int(line.split("pid=")[1])
    assert "libcudart" not in read_maps(pid)
    out = tmp_path / "late"
    a, _ = procs.start([AIPROF, "profile", "--method", "ebpf", "--pid", str(pid), "-d", "4s",
                        "-o", str(out)], ready="aiprof: recording", stderr=subprocess.STDOUT)
    p.stdin.write("go\n")
    p.stdin.flush()
    rc, stdout, _ = finish(a, timeout=60)
    assert rc == 0, stdout
    assert finish(p)[0] == 0

    tl = load_timeline(out)
    copies = events(tl, "cuda_memcpy", "cudaMemcpy")
    pageable = [e for e in copies if e["args"]["bytes"] == 4096]
    pinned = [e for e in copies if e["args"]["bytes"] == 2048]
    assert pageable and pinned, len(copies)
    assert all(e["args"]["kind"] == "HtoD" for e in copies)
    assert all(e["args"]["host_memory"] == "unknown" for e in pageable)
    assert all(e["args"]["host_memory"] == "pinned" for e in pinned)
    allocs = events(tl, "cuda_memory", "cudaMallocHost")
    assert [e["args"]["bytes"] for e in allocs] == [2048]
    libs = load_summary(out)["targets"][0]["uprobes"]["libraries"]
    assert [m["path"] for m in libs] == [CUDART]


# A stand-in runtime whose exported functions call each other, as a real libcudart calls
# into libcuda: one call from the program must stay one event (libaiprof.so counts nesting
# depth; the BPF programs compare stack pointers).
NESTING_LIB = r"""
#include <stddef.h>
__attribute__((noinline)) int cudaMemset(void *p, int v, size_t n)
{
	__asm__ volatile("" ::: "memory");
	return 0;
}
int cudaMemcpy(void *d, const void *s, size_t n, int kind)
{
	cudaMemset(d, 0, n + 1);         /* nested calls through the PLT */
	cudaMemset(d, 0, n + 2);
	return 0;
}
/* cudaMemcpyAsync(d, s, n, kind, stream): a tail call into cudaMemcpy with 2 n */
__asm__(".globl cudaMemcpyAsync\n.type cudaMemcpyAsync,@function\ncudaMemcpyAsync:\n"
	"\tadd %rdx, %rdx\n\tjmp cudaMemcpy@PLT\n.size cudaMemcpyAsync, .-cudaMemcpyAsync\n");
"""

NESTING_CALLER = r"""
import ctypes, os, sys
lib = ctypes.CDLL(sys.argv[1])
print(f"ready pid={os.getpid()}", flush=True)
sys.stdin.readline()
buf = ctypes.create_string_buffer(256)
for _ in range(40):
    lib.cudaMemcpy(buf, buf, ctypes.c_size_t(100), 1)
    lib.cudaMemcpyAsync(buf, buf, ctypes.c_size_t(10), 2, None)
    lib.cudaMemset(buf, 0, ctypes.c_size_t(7))
print("done", flush=True)
sys.stdin.readline()
"""


def test_ebpf_records_only_the_outermost_call(procs, tmp_path):
    require_root()
    lib = tmp_path / "libcudart.so.99"
    src = tmp_path / "nesting.c"
    src.write_text(NESTING_LIB)
    subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", str(lib), str(src)], check=True)
    p, line = procs.start([sys.executable, "-c", NESTING_CALLER, str(lib)], ready="ready",
                          stdin=subprocess.PIPE)
    pid = int(line.split("pid=")[1])
    out = tmp_path / "nest"
    a, _ = procs.start([AIPROF, "profile", "--method", "ebpf", "--pid", str(pid), "-d", "1s",
                        "-o", str(out)], ready="aiprof: recording", stderr=subprocess.STDOUT)
    p.stdin.write("go\n")
    p.stdin.flush()
    assert p.stdout.readline().strip() == "done"
    rc, stdout, _ = finish(a, timeout=60)
    assert rc == 0, stdout
    p.stdin.write("exit\n")
    p.stdin.flush()
    assert finish(p)[0] == 0

    tl = load_timeline(out)
    sizes = {}
    for e in api_events(tl):
        sizes.setdefault(e["name"], []).append(e["args"]["bytes"])
    # the tail call is cudaMemcpyAsync's (10 bytes, not the 20 it passed on); the nested
    # memsets (n + 1, n + 2) never show; the direct ones do
    assert sizes == {"cudaMemcpy": [100] * 40, "cudaMemcpyAsync": [10] * 40,
                     "cudaMemset": [7] * 40}, {k: sorted(set(v)) for k, v in sizes.items()}
    kinds = {e["args"]["kind"] for e in events(tl, "cuda_memcpy", "cudaMemcpyAsync")}
    assert kinds == {"DtoH"}


def test_ebpf_perf_event_uprobes_and_collectors(procs, tmp_path):
    """The path for kernels without multi-uprobe links (one perf event per probe), and
    --collectors: NCCL only."""
    require_root()
    p, pid = start_trainer(procs, *TRAINER_ARGS)
    out = tmp_path / "perf"
    r = run_aiprof(["profile", "--method", "ebpf", "--collectors", "nccl", "--pid", str(pid),
                    "-d", "1s", "-o", str(out)], env=dict(os.environ, AIPROF_EBPF_MULTI="0"))
    assert r.returncode == 0, r.stderr
    tl = load_timeline(out)
    assert {e["cat"] for e in events(tl)} == {"nccl"}
    coll = events(tl, "nccl", "ncclAllReduce")
    assert coll and all(e["args"]["bytes"] == GRAD and e["args"]["datatype"] == "float32"
                        for e in coll)
    t = load_summary(out)["targets"][0]
    assert [os.path.basename(m["path"]) for m in t["uprobes"]["libraries"]] == ["libnccl.so.2"]
    assert_nothing_loaded([read_maps(pid)])
    assert finish(p)[0] == 0


def test_ebpf_refusals():
    require_root()
    r = run_aiprof(["profile", "--method", "gdb", "--pid", "1"])
    assert r.returncode == 2 and "ptrace or ebpf" in r.stderr
    gone = subprocess.Popen(["true"])
    gone.wait()
    r = run_aiprof(["profile", "--method", "ebpf", "--pid", str(gone.pid), "-d", "1s"])
    assert r.returncode == 3, r.stderr
