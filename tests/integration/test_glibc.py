# SPDX-License-Identifier: MIT
"""libaiprof.so loads into processes of older C libraries (issue 17): it asks for no glibc
symbol version newer than 2.17 (manylinux2014, the floor PyTorch's wheels are built for), and
a trainer built against and run on Debian 11's glibc 2.31 — a root made by `debootstrap
--variant=minbase bullseye`, the trainer and the fake CUDA/NCCL/ibverbs libraries compiled
with that root as the sysroot, run in a runc container (its own mount and pid namespace)
whose /usr is that root's — is profiled with the default method: kernels, copies,
collectives and CPU stacks seen, its checksum the same as without aiprof. The same library
built without glibc_compat.h is refused there, and aiprof says why in the target's loader's
words, which glibc the target runs, and what to do; the target runs on."""
import os
import re
import subprocess
import sys
import time

import pytest

from conftest import (BUILD, LIBAIPROF, ROOT, checksum_of, events, load_summary, load_timeline,
                      require_root, run_aiprof)
from test_inject import TRAINER_ARGS, assert_trainer_timeline

sys.path.insert(0, os.path.join(ROOT, "tests", "runc"))
from runcenv import Bind, RuncEnv, runc_available  # noqa: E402

OLD = os.path.join(BUILD, "glibc231")       # the Debian 11 root and the build against it
MIRROR = os.environ.get("DEBIAN_MIRROR", "http://deb.debian.org/debian")


def versions(path):
    """The GLIBC_x.y versions the ELF file's dynamic symbols ask for, sorted."""
    out = subprocess.run(["objdump", "-T", path], capture_output=True, text=True, check=True).stdout
    found = {tuple(int(x) for x in v.split(".")) for v in re.findall(r"\(?GLIBC_(\d+\.\d+(?:\.\d+)?)\)?", out)}
    return sorted(found)


def test_libaiprof_needs_no_glibc_newer_than_2_17():
    assert versions(LIBAIPROF), "no versioned glibc symbol at all?"
    newest = versions(LIBAIPROF)[-1]
    assert newest <= (2, 17), f"libaiprof.so needs GLIBC_{'.'.join(map(str, newest))}: see " \
        "injector/preload/glibc_compat.h"
    # libdl.so.2 and libpthread.so.0 are not named: images of glibc 2.34+ built as an exact
    # ldd closure lack those empty stubs, and the e2e trainer image is one
    needed = re.findall(r"\(NEEDED\).*\[(.+)\]", subprocess.run(
        ["readelf", "-d", LIBAIPROF], capture_output=True, text=True, check=True).stdout)
    assert not {"libdl.so.2", "libpthread.so.0"} & set(needed), needed


def debian11_root():
    """BUILD/glibc231/root: Debian 11 minbase with libc6-dev (made once, kept), its absolute
    library symlinks made relative so that it serves as a sysroot from outside too."""
    root = os.path.join(OLD, "root")
    if not os.path.exists(os.path.join(root, "usr", "lib", "x86_64-linux-gnu", "libc.so")):
        subprocess.run(["rm", "-rf", root], check=True)
        os.makedirs(os.path.join(OLD, "debs"), exist_ok=True)
        r = subprocess.run(["debootstrap", "--variant=minbase", "--include=libc6-dev,libibverbs-dev",
                            f"--cache-dir={os.path.join(OLD, 'debs')}", "bullseye", root, MIRROR],
                           capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    for d in ("usr/lib/x86_64-linux-gnu", "usr/lib64"):
        base = os.path.join(root, d)
        for e in os.listdir(base):
            p = os.path.join(base, e)
            if os.path.islink(p) and os.readlink(p).startswith("/"):
                target = os.readlink(p)
                os.unlink(p)
                os.symlink(os.path.relpath(root + target, base), p)
    return root


@pytest.fixture(scope="module")
def old_trainer():
    """(root, tests dir) of the trainer and its doubles built against glibc 2.31."""
    require_root()
    root = debian11_root()
    build = os.path.join(OLD, "build")
    lib = os.path.join(root, "usr", "lib", "x86_64-linux-gnu")
    cc = f"gcc --sysroot={root} -B{lib} -L{lib}"
    r = subprocess.run(["make", "-s", "-j2", f"BUILD={build}", f"CC={cc}",
                        os.path.join(build, "tests", "workloads", "trainer")],
                       cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    trainer = os.path.join(build, "tests", "workloads", "trainer")
    assert versions(trainer)[-1] <= (2, 31), versions(trainer)
    return root, os.path.join(build, "tests")


def run_in_debian11(env, root, tests):
    """The trainer in a runc container whose /usr is the Debian 11 root's (an image layer over
    the host's: tests/runc/runcenv.py image_root, given that /usr alone)."""
    layer = os.path.join(OLD, "layer")
    os.makedirs(layer, exist_ok=True)
    if not os.path.islink(os.path.join(layer, "usr")):
        os.symlink(os.path.join(root, "usr"), os.path.join(layer, "usr"))
    c = env.container(["/opt/aiprof/tests/workloads/trainer"] + TRAINER_ARGS,
                      binds=[Bind(tests, "/opt/aiprof/tests")], image_root=layer)
    c.start()
    deadline = time.monotonic() + 30
    while "ready" not in c.output() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert "ready" in c.output(), c.output()
    return c


def test_trainer_of_glibc_2_31_is_profiled_with_the_default_method(old_trainer, tmp_path):
    if not runc_available():
        pytest.fail("runc is not installed (scripts/install-deps.sh)")
    root, tests = old_trainer
    env = RuncEnv()
    try:
        # the reference: the same trainer, same container, no aiprof
        c = run_in_debian11(env, root, tests)
        with open(f"/proc/{c.pid}/maps") as f:
            maps = f.read()
        assert "libc-2.31.so" in maps, "the container's C library is not Debian 11's"
        assert c.wait(120) == 0, c.output()
        want = checksum_of(c.output())

        c = run_in_debian11(env, root, tests)
        out = tmp_path / "out"
        r = run_aiprof(["profile", "--pid", str(c.pid), "--duration", "3s", "-o", str(out)])
        assert r.returncode == 0, r.stderr
        t = load_summary(out)["targets"][0]
        assert t["injection"] == "ptrace" and t["state"] == "profiled", t
        tl = load_timeline(out)
        assert_trainer_timeline(tl)
        assert events(tl, "cpu_sample"), "no CPU samples"
        with open(os.path.join(out, "stacks.folded")) as f:
            assert f.read().strip(), "empty stacks.folded"
        assert c.wait(120) == 0, c.output()
        assert checksum_of(c.output()) == want
    finally:
        env.cleanup()


def test_a_library_the_target_refuses_is_explained(old_trainer, tmp_path):
    """libaiprof.so built without injector/preload/glibc_compat.h (so: GLIBC_2.34 symbols),
    next to a copy of aiprof: the Debian 11 trainer's loader refuses it; with --method ptrace
    the error carries the loader's reason, the target's glibc and --method ebpf, exit 6; with
    the default --method auto it is recorded with uprobes instead, the reason in the summary;
    the trainer finishes with its own checksum."""
    if not runc_available():
        pytest.fail("runc is not installed (scripts/install-deps.sh)")
    root, tests = old_trainer
    plain = os.path.join(OLD, "plain")
    r = subprocess.run(["make", "-s", "-j2", f"BUILD={plain}", "PRELOAD_INCLUDES=-I$(CUDA_HOME)/include",
                        os.path.join(plain, "libaiprof.so")], cwd=ROOT, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert versions(os.path.join(plain, "libaiprof.so"))[-1] >= (2, 34)
    aiprof = os.path.join(plain, "aiprof")
    subprocess.run(["cp", os.environ.get("AIPROF_BIN") or os.path.join(BUILD, "aiprof"), aiprof], check=True)
    env = RuncEnv()
    try:
        c = run_in_debian11(env, root, tests)
        r = subprocess.run([aiprof, "profile", "--method", "ptrace", "--pid", str(c.pid), "--duration",
                            "2s", "-o", str(tmp_path / "out")], capture_output=True, text=True, timeout=120)
        assert r.returncode == 6, r.stderr
        assert "dlopen in the target failed: " in r.stderr and "version `GLIBC_2.3" in r.stderr, r.stderr
        assert "the target runs glibc 2.31" in r.stderr and "--method ebpf" in r.stderr, r.stderr
        # the default, --method auto: the same refusal, then the eBPF method, and why
        r = subprocess.run([aiprof, "profile", "--pid", str(c.pid), "--duration", "2s", "-o",
                            str(tmp_path / "auto")], capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        t = load_summary(tmp_path / "auto")["targets"][0]
        assert t["method"] == "ebpf" and "version `GLIBC_2.3" in t["method_reason"], t
        assert events(load_timeline(tmp_path / "auto"), "cuda_api"), "uprobes saw no CUDA call"
        assert c.wait(120) == 0, c.output()
        checksum_of(c.output())
    finally:
        env.cleanup()
