# SPDX-License-Identifier: MIT
"""Every case aiprof refuses gets a clear message and its own exit code, and the
target is left untouched."""
import os
import subprocess
import time

import pytest

from conftest import AIPROF, load_summary, run_aiprof, require_root, start_trainer, thread_states

EXIT_USAGE, EXIT_NO_TARGET, EXIT_PERMISSION, EXIT_UNSUPPORTED = 2, 3, 4, 5


def build(tmp_path, name, src, *flags):
    path = tmp_path / name
    srcfile = tmp_path / (name + (".S" if src.lstrip().startswith(".globl") else ".c"))
    srcfile.write_text(src)
    subprocess.run(["gcc", *flags, "-o", str(path), str(srcfile)], check=True)
    return str(path)


def assert_untouched(pid):
    with open(f"/proc/{pid}/maps") as f:
        assert "libaiprof" not in f.read()
    assert not any(s in ("t", "T") for s in thread_states(pid).values())


def assert_auto_chose_ebpf(pid, out, reason):
    """--method auto (the default) records pid with the eBPF method, saying why (reason)
    in the summary and on stderr, and loads nothing into it."""
    r = run_aiprof(["profile", "--pid", str(pid), "-d", "300ms", "-o", str(out)])
    assert r.returncode == 0, r.stderr
    t = load_summary(out)["targets"][0]
    assert t["method"] == "ebpf" and reason in t["method_reason"], t
    assert "--method auto: recording with the eBPF method" in r.stderr, r.stderr
    assert_untouched(pid)


def test_usage_errors():
    r = run_aiprof(["profile"])
    assert r.returncode == EXIT_USAGE and "--pid" in r.stderr
    r = run_aiprof(["profile", "--pid", "12x"])
    assert r.returncode == EXIT_USAGE and "not a comma-separated list" in r.stderr
    r = run_aiprof(["profile", "--pid", "1", "--duration", "soon"])
    assert r.returncode == EXIT_USAGE and "--duration" in r.stderr
    r = run_aiprof(["bogus"])
    assert r.returncode == EXIT_USAGE and "unknown command" in r.stderr
    r = run_aiprof(["profile", "--help"])
    assert r.returncode == 0 and "Exit codes" in r.stdout


def test_no_such_pid():
    p = subprocess.Popen(["true"])
    p.wait()
    r = run_aiprof(["profile", "--pid", str(p.pid), "-d", "100ms"])
    assert r.returncode == EXIT_NO_TARGET, r.stderr
    assert f"no process with pid {p.pid}" in r.stderr


def test_no_permission_names_the_capability(procs, tmp_path):
    require_root()
    p, pid = start_trainer(procs, "--ranks", "1", "--run-seconds", "30")
    r = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                        "--inh-caps=-all", "--bounding-set=-all", AIPROF, "profile",
                        "--pid", str(pid), "-d", "100ms", "-o", str(tmp_path / "x")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == EXIT_PERMISSION, (r.returncode, r.stderr)
    assert "CAP_SYS_PTRACE" in r.stderr and "permission denied" in r.stderr
    assert_untouched(pid)


def test_already_traced(procs, tmp_path):
    require_root()
    p, pid = start_trainer(procs, "--ranks", "1", "--run-seconds", "30")
    tracer, _ = procs.start(["strace", "-f", "-o", "/dev/null", "-p", str(pid)])
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with open(f"/proc/{pid}/status") as f:
            if "TracerPid:\t0" not in f.read():
                break
        time.sleep(0.02)
    r = run_aiprof(["profile", "--method", "ptrace", "--pid", str(pid), "-d", "100ms", "-o",
                    str(tmp_path / "x")])
    assert r.returncode == EXIT_PERMISSION, r.stderr
    assert f"already traced by pid {tracer.pid}" in r.stderr
    # the default, --method auto: records it from outside instead, and says why
    r = run_aiprof(["profile", "--pid", str(pid), "-d", "500ms", "-o", str(tmp_path / "y")])
    assert r.returncode == 0, r.stderr
    assert "--method auto: recording with the eBPF method" in r.stderr, r.stderr
    t = load_summary(tmp_path / "y")["targets"][0]
    assert t["method"] == "ebpf" and f"already traced by pid {tracer.pid}" in t["method_reason"], t


def test_static_binary(procs, tmp_path):
    require_root()
    exe = build(tmp_path, "static", "#include <unistd.h>\nint main(){for(;;)pause();}\n",
                "-static", "-O2")
    p, _ = procs.start([exe])
    time.sleep(0.1)
    r = run_aiprof(["profile", "--method", "ptrace", "--pid", str(p.pid), "-d", "100ms", "-o",
                    str(tmp_path / "x")])
    assert r.returncode == EXIT_UNSUPPORTED, r.stderr
    assert "statically linked" in r.stderr and "eBPF" in r.stderr
    assert_untouched(p.pid)
    # --method auto (the default) records it with the eBPF method, saying why
    assert_auto_chose_ebpf(p.pid, tmp_path / "y", "statically linked")


def test_unsupported_arch_32bit(procs, tmp_path):
    require_root()
    src = ".globl _start\n_start:\n1:\tmov $29, %eax\n\tint $0x80\n\tjmp 1b\n"
    try:
        exe = build(tmp_path, "i386", src, "-m32", "-nostdlib", "-static")
    except subprocess.CalledProcessError:
        pytest.skip("no 32-bit toolchain")
    p, _ = procs.start([exe])
    time.sleep(0.1)
    if p.poll() is not None:
        pytest.skip("kernel without IA-32 emulation")
    r = run_aiprof(["profile", "--pid", str(p.pid), "-d", "100ms", "-o", str(tmp_path / "x")])
    assert r.returncode == EXIT_UNSUPPORTED, r.stderr
    assert "32-bit i386" in r.stderr and "x86_64" in r.stderr
    assert_untouched(p.pid)


def test_missing_library_says_how_to_fix(procs, tmp_path):
    r = run_aiprof(["profile", "--method", "ptrace", "--pid", str(os.getpid()), "--lib",
                    str(tmp_path / "nope.so")])
    assert r.returncode == 1 and "AIPROF_LIB" in r.stderr
    # auto: the eBPF method, and why
    require_root()
    p, pid = start_trainer(procs, "--ranks", "1", "--run-seconds", "30")
    r = run_aiprof(["profile", "--pid", str(pid), "-d", "300ms", "--lib", str(tmp_path / "nope.so"),
                    "-o", str(tmp_path / "y")])
    assert r.returncode == 0, r.stderr
    t = load_summary(tmp_path / "y")["targets"][0]
    assert t["method"] == "ebpf" and "nope.so cannot be read" in t["method_reason"], t


def test_target_exits_during_window(procs, tmp_path):
    """A target that ends mid-window keeps what was recorded."""
    require_root()
    p, pid = start_trainer(procs, "--ranks", "2", "--steps", "30")
    out = tmp_path / "o"
    r = run_aiprof(["profile", "--pid", str(pid), "-d", "5s", "-o", str(out)])
    assert p.wait(timeout=60) == 0
    assert r.returncode == 0, r.stderr
    assert (out / "timeline.json.gz").exists() and (out / "summary.json").exists()


# A test double of a sandboxed workload: its only thread installs a seccomp filter that
# kills the whole process on memfd_create(2), a system call of the remote call that loads
# libaiprof.so, and allows everything else; then it waits.
SECCOMP_DOUBLE = r"""
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>
int main(void)
{
	struct sock_filter f[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_memfd_create, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_KILL_PROCESS),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	struct sock_fprog prog = { .len = sizeof(f) / sizeof(f[0]), .filter = f };
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog))
		return 1;
	printf("ready\n");
	fflush(stdout);
	for (;;)
		pause();
}
"""


def test_seccomp_filter_refused_then_ebpf(procs, tmp_path):
    """A target under a seccomp filter is never made to run a remote call (before the
    Seccomp: line was read, the injection's memfd_create killed this one): --method ptrace
    refuses with the reason, --method auto records with the eBPF method and says why."""
    require_root()
    exe = build(tmp_path, "seccomp_double", SECCOMP_DOUBLE, "-O2")
    p, _ = procs.start([exe], ready="ready")
    with open(f"/proc/{p.pid}/status") as f:
        assert "Seccomp:\t2" in f.read()
    r = run_aiprof(["profile", "--method", "ptrace", "--pid", str(p.pid), "-d", "100ms", "-o",
                    str(tmp_path / "x")])
    assert r.returncode == EXIT_UNSUPPORTED, r.stderr
    assert f"of pid {p.pid} runs under seccomp with a filter" in r.stderr, r.stderr
    assert "--method ebpf" in r.stderr, r.stderr
    assert p.poll() is None, "the target died"
    assert_untouched(p.pid)
    assert_auto_chose_ebpf(p.pid, tmp_path / "y", "runs under seccomp with a filter")
    assert p.poll() is None, "the target died"
