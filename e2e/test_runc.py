# SPDX-License-Identifier: MIT
"""The runc helper tests/integration/test_container.py stands on (tests/runc/runcenv.py; the
end-to-end chain itself now runs on the real node's containerd): namespaces new, shared with
the host, or joined by path; exit codes as a runtime reports them; the termination log as the
kubelet reads it; read-only host binds; and a cleanup that leaves nothing behind."""
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "runc"))
import runcenv  # noqa: E402

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or not runcenv.runc_available(),
                                reason="needs root and runc (scripts/install-deps.sh)")
NS = ("pid", "net", "mnt", "ipc", "uts")


def ns_ids(pid):
    return {t: os.readlink(f"/proc/{pid}/ns/{t}") for t in NS}


@pytest.fixture
def renv():
    e = runcenv.RuncEnv()
    yield e
    e.cleanup()


def test_namespaces_new_host_and_joined(renv):
    me = ns_ids(os.getpid())
    a = renv.container(["/usr/bin/sleep", "60"])
    a.start()
    na = ns_ids(a.pid)
    assert all(na[t] != me[t] for t in NS), (na, me)
    assert a.state()["status"] == "running"

    b = renv.container(["/usr/bin/sleep", "60"], namespaces={
        "pid": a.ns_path("pid"), "network": a.ns_path("net"), "ipc": a.ns_path("ipc"), "uts": a.ns_path("uts")})
    b.start()
    nb = ns_ids(b.pid)
    assert {t: nb[t] for t in ("pid", "net", "ipc", "uts")} == {t: na[t] for t in ("pid", "net", "ipc", "uts")}
    assert nb["mnt"] not in (na["mnt"], me["mnt"]), "every container has its own mount namespace"

    c = renv.container(["/usr/bin/sleep", "60"], namespaces={"pid": "host", "network": "host"})
    c.start()
    nc = ns_ids(c.pid)
    assert nc["pid"] == me["pid"] and nc["net"] == me["net"] and nc["mnt"] != me["mnt"]

    with pytest.raises(runcenv.RuncError, match="cannot join a mount namespace"):
        renv.container(["/usr/bin/true"], namespaces={"mount": a.ns_path("mnt")})


def test_exit_codes_and_termination_log(renv):
    big = "x" * 5000
    c = renv.container(["/bin/sh", "-c", f"printf %s {big} > /dev/termination-log; echo out; exit 3"])
    c.start()
    assert c.wait(30) == 3
    assert c.termination_message() == big[:4096], "the kubelet reads at most 4096 bytes"
    assert "out" in c.output()
    k = renv.container(["/usr/bin/sleep", "60"])
    k.start()
    k.kill("KILL")
    assert k.wait(30) == 137 and k.exit_status()["signal"] == 9


def test_host_binds_are_read_only_and_extra_binds_work(renv, tmp_path):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "data").write_text("hello")
    c = renv.container(["/bin/sh", "-c", "cat /data/in/data; touch /usr/bin/aiprof-e2e-x 2>/dev/null && echo WROTE; "
                        "echo w > /rw/out"],
                       binds=[runcenv.Bind(str(tmp_path), "/data"),
                              runcenv.Bind(str(tmp_path / "in"), "/rw", readonly=False)])
    c.start()
    assert c.wait(30) == 0, c.output()
    assert c.output().startswith("hello") and "WROTE" not in c.output()
    assert (tmp_path / "in" / "out").read_text() == "w\n"
    assert not os.path.exists("/usr/bin/aiprof-e2e-x")


def test_start_error_is_reported():
    e = runcenv.RuncEnv()
    try:
        c = e.container(["/no/such/program"])
        with pytest.raises(runcenv.RuncError, match="no such file"):
            c.start()
    finally:
        e.cleanup()


def test_cleanup_leaves_nothing():
    e = runcenv.RuncEnv()
    c = e.container(["/usr/bin/sleep", "60"])
    pid = c.start()
    cg = f"/sys/fs/cgroup/pids/{runcenv.CGROUP_PARENT}/{c.id}"
    assert os.path.isdir(cg) and str(pid) in open(f"{cg}/cgroup.procs").read().split()
    e.cleanup()
    assert not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split()[2] == "Z"
    assert not os.path.exists(cg)
    assert not os.path.exists(e.workdir)


def test_image_root_is_a_read_only_layer_over_usr(renv, tmp_path):
    img = tmp_path / "img"
    (img / "usr" / "bin").mkdir(parents=True)
    (img / "usr" / "bin" / "from-image").write_text("#!/bin/sh\necho image says hi\n")
    (img / "usr" / "bin" / "from-image").chmod(0o755)
    (img / "opt" / "x").mkdir(parents=True)
    c = renv.container(["/bin/sh", "-c", "from-image; ls /opt; test -x /usr/bin/sh && echo host-usr; "
                        "touch /usr/bin/new 2>/dev/null && echo WROTE; true"], image_root=str(img))
    c.start()
    assert c.wait(30) == 0, c.output()
    assert c.output().split() == ["image", "says", "hi", "x", "host-usr"], c.output()
    assert not (img / "usr" / "bin" / "new").exists() and not os.path.exists("/usr/bin/new")
