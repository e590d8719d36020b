# SPDX-License-Identifier: MIT
"""aiprof profile --container-id / --container-name / --match / --termination-log: the
injector's side of the controller's contract (controller/README.md).

Real processes in real cgroups named like containers (a 64-hex directory under
/sys/fs/cgroup/<hierarchy>/, as runc names a container's cgroup), a real runc container when
tests/runc can make one, and a real radosgw for the upload paths. Each test removes the
cgroups it made (after moving its own processes back to the root) and kills its processes
by PID.
"""
import hashlib
import json
import os
import secrets
import subprocess
import sys
import time

import pytest

from conftest import (AIPROF, BUILD, TRAINER, events, load_summary, load_timeline,
                      require_root, run_aiprof, start_trainer)

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "runc"))
from test_s3 import rgw  # noqa: E402,F401  (the radosgw fixture, started once per module)

EXIT_USAGE, EXIT_NO_TARGET, EXIT_OUTPUT = 2, 3, 7
TRAINER_ARGS = ["--ranks", "2", "--run-seconds", "90", "--batch-bytes", str(1 << 20)]
CGROUP_ROOT = "/sys/fs/cgroup"
HIERARCHIES = {"v1": "pids", "v2": "unified"}


def hierarchy_path(version):
    """The cgroup hierarchy of this version on this host (v2 alone, or hybrid)."""
    if version == "v2" and os.path.exists(os.path.join(CGROUP_ROOT, "cgroup.controllers")):
        return CGROUP_ROOT
    path = os.path.join(CGROUP_ROOT, HIERARCHIES[version])
    if not os.path.exists(os.path.join(path, "cgroup.procs")):
        pytest.skip(f"no cgroup {version} hierarchy at {path}")
    return path


class Cgroup:
    """A cgroup directory this test made; remove() moves what is in it back to the
    hierarchy's root (where the test's processes came from) and removes the directory."""

    def __init__(self, root, name):
        self.root, self.path = root, os.path.join(root, name)
        os.mkdir(self.path)

    def add(self, pid):
        with open(os.path.join(self.path, "cgroup.procs"), "w") as f:
            f.write(str(pid))

    def remove(self):
        for _ in range(50):
            with open(os.path.join(self.path, "cgroup.procs")) as f:
                pids = f.read().split()
            for pid in pids:
                try:
                    with open(os.path.join(self.root, "cgroup.procs"), "w") as f:
                        f.write(pid)
                except OSError:
                    pass         # exited meanwhile
            try:
                os.rmdir(self.path)
                return
            except OSError:
                time.sleep(0.1)
        raise AssertionError(f"cannot remove {self.path}")


@pytest.fixture
def cgroups():
    made = []

    def make(version, name=None):
        cg = Cgroup(hierarchy_path(version), name or secrets.token_hex(32))
        made.append(cg)
        return cg
    yield make
    for cg in reversed(made):
        cg.remove()


def read_termination(path):
    """The message as the kubelet hands it over: at most 4096 bytes, JSON."""
    data = open(path, "rb").read()
    assert 0 < len(data) <= 4096, len(data)
    return json.loads(data)


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        h.update(f.read())
    return h.hexdigest()


def local_files(outdir):
    found = {}
    for d, _, files in os.walk(outdir):
        for name in files:
            if not name.startswith("."):
                full = os.path.join(d, name)
                found[os.path.relpath(full, outdir)] = full
    return found


def assert_lists_local_artifacts(msg, outdir):
    files = local_files(outdir)
    assert {a["name"] for a in msg["artifacts"]} == set(files)
    assert {"summary.json", "timeline.json.gz", "report.html"} <= set(files)
    for a in msg["artifacts"]:
        assert a["size"] == os.path.getsize(files[a["name"]]), a
        assert a["sha256"] == sha256_file(files[a["name"]]), a
        assert "url" not in a     # stayed on this machine: no object URL to give


def start_process(procs, argv, cg=None, ready=None):
    p, _ = procs.start(argv, ready=ready, stdin=subprocess.PIPE)
    if cg:
        cg.add(p.pid)
    return p


@pytest.mark.parametrize("version", ["v1", "v2"])
def test_container_id_profiles_the_cuda_process(procs, tmp_path, cgroups, version):
    require_root()
    cg = cgroups(version)
    cid = os.path.basename(cg.path)
    # the container: a process without CUDA started first, then the trainer
    sleeper = start_process(procs, ["sleep", "300"], cg)
    p, trainer = start_trainer(procs, *TRAINER_ARGS)
    cg.add(trainer)
    # the same program outside the container: must not be touched
    _, decoy = start_trainer(procs, *TRAINER_ARGS)
    out, term = tmp_path / "out", tmp_path / "termination-log"
    r = run_aiprof(["profile", "--container-id", f"containerd://{cid}", "-d", "2s", "-o",
                    str(out), "--termination-log", str(term)])
    assert r.returncode == 0, r.stderr
    summary = load_summary(out)
    assert [t["pid"] for t in summary["targets"]] == [trainer]
    tl = load_timeline(out)
    assert {e["pid"] for e in events(tl, "cuda_api")} == {trainer}
    assert decoy not in {e.get("pid") for e in tl["traceEvents"]}
    assert sleeper.pid not in {e.get("pid") for e in tl["traceEvents"]}
    assert "CUDA libraries mapped" in r.stderr

    msg = read_termination(term)
    assert "error" not in msg
    assert_lists_local_artifacts(msg, out)
    s = msg["summary"]
    assert s["processes"] == 1 and s["processes_failed"] == 0
    assert s["container_processes"] == 2
    assert s["events"] == summary["events"] > 0
    assert s["dropped"] == summary["dropped_events"]
    assert s["findings"] == len(summary["findings"]) == len(msg["findings"])
    assert s["exit_code"] == 0
    # the decoy was never injected: no library mapped in it
    assert "libaiprof" not in open(f"/proc/{decoy}/maps").read()


def test_match_and_main_process(procs, tmp_path, cgroups):
    require_root()
    cg = cgroups("v1")
    cid = os.path.basename(cg.path)
    _, t1 = start_trainer(procs, *TRAINER_ARGS)
    _, t2 = start_trainer(procs, "--ranks", "1", "--run-seconds", "91")
    cg.add(t1)
    cg.add(t2)
    out, term = tmp_path / "m", tmp_path / "term-m"
    r = run_aiprof(["profile", "--container-id", cid, "--match", r"--run-seconds 91$",
                    "-d", "1s", "--no-ebpf", "-o", str(out), "--termination-log", str(term)])
    assert r.returncode == 0, r.stderr
    assert [t["pid"] for t in load_summary(out)["targets"]] == [t2]
    assert read_termination(term)["summary"]["container_processes"] == 2

    # a --match that matches nothing names the processes it looked at
    r = run_aiprof(["profile", "--container-id", cid, "--match", "^python", "-d", "1s",
                    "--termination-log", str(term)])
    assert r.returncode == EXIT_NO_TARGET
    msg = read_termination(term)
    assert "matching --match '^python'" in msg["error"]
    assert f"{t1} '" in msg["error"] and f"{t2} '" in msg["error"]
    assert msg["artifacts"] == []

    # a bad expression is a usage error
    r = run_aiprof(["profile", "--container-id", cid, "--match", "(", "--termination-log",
                    str(term)])
    assert r.returncode == EXIT_USAGE
    assert "is not a POSIX extended regular expression" in read_termination(term)["error"]


def test_main_process_when_no_cuda(procs, tmp_path, cgroups):
    require_root()
    cg = cgroups("v2")
    cid = os.path.basename(cg.path)
    # the main process starts a child once it is in the container (children inherit it)
    script = ("import subprocess, sys\n"
              "sys.stdin.readline()\n"
              "c = subprocess.Popen(['sleep', '300'])\n"
              "print('child', c.pid, flush=True)\n"
              "sys.stdin.readline()\n")
    main = start_process(procs, [sys.executable, "-c", script], cg)
    main.stdin.write("go\n")
    main.stdin.flush()
    child = int(main.stdout.readline().split()[1])
    try:
        out, term = tmp_path / "main", tmp_path / "term-main"
        r = run_aiprof(["profile", "--container-id", f"cri-o://{cid}", "-d", "1s",
                        "--no-ebpf", "-o", str(out), "--termination-log", str(term)])
        assert r.returncode == 0, r.stderr
        assert [t["pid"] for t in load_summary(out)["targets"]] == [main.pid]
        assert "main process" in r.stderr
        msg = read_termination(term)
        assert msg["summary"]["container_processes"] == 2
        assert msg["summary"]["processes"] == 1
    finally:
        os.kill(child, 9)


def test_unknown_and_malformed_ids(tmp_path):
    require_root()
    term = tmp_path / "term"
    cid = secrets.token_hex(32)
    r = run_aiprof(["profile", "--container-id", f"containerd://{cid}", "-d", "1s",
                    "-o", str(tmp_path / "o"), "--termination-log", str(term)])
    assert r.returncode == EXIT_NO_TARGET
    msg = read_termination(term)
    assert f"no process of container {cid} found" in msg["error"]
    assert "hostPID" in msg["error"]              # what to do
    assert msg["artifacts"] == [] and msg["summary"]["exit_code"] == EXIT_NO_TARGET
    assert not os.path.exists(tmp_path / "o")

    for bad, why in [("containerd://xyz", "64 lower-case hex digits"),
                     (f"rkt://{cid}", "unknown runtime 'rkt://'"),
                     ("a/b", "is not a container id")]:
        r = run_aiprof(["profile", "--container-id", bad, "--termination-log", str(term)])
        assert r.returncode == EXIT_USAGE, bad
        assert why in r.stderr
        assert why in read_termination(term)["error"]
    # usage errors before --termination-log on the command line are reported too
    r = run_aiprof(["profile", "--duration", "soon", "--termination-log", str(term)])
    assert r.returncode == EXIT_USAGE
    assert "--duration 'soon'" in read_termination(term)["error"]
    r = run_aiprof(["profile", "--pid", "1", "--container-id", cid,
                    f"--termination-log={term}"])
    assert r.returncode == EXIT_USAGE
    assert "give one of --pid" in read_termination(term)["error"]


POD = r"""
import ctypes, os, subprocess, sys
# pid 1 of the "pod": the sandbox's pause process, as the kubelet starts it
ctypes.CDLL(None).prctl(15, b"pause", 0, 0, 0)
target_cg, debug_cg, aiprof, trainer = sys.argv[1:5]
aiprof_args = sys.argv[5:]
def join(cg):
    def f():
        with open(os.path.join(cg, "cgroup.procs"), "w") as fh:
            fh.write(str(os.getpid()))
    return f
t = subprocess.Popen([trainer, "--ranks", "2", "--run-seconds", "90"], preexec_fn=join(target_cg),
                     stdout=subprocess.PIPE, text=True)
assert t.stdout.readline().startswith("ready")
a = subprocess.run([aiprof, "profile", "--container-name", "trainer"] + aiprof_args,
                   preexec_fn=join(debug_cg), capture_output=True, text=True)
print("RESULT", a.returncode, t.pid, flush=True)
sys.stderr.write(a.stderr)
t.kill()
t.wait()
"""


def test_container_name_from_an_ephemeral_container(procs, tmp_path, cgroups):
    """An ephemeral container sees the pod's processes in its pid namespace, is in a cgroup
    of its own, and has the sandbox's pause process as pid 1."""
    require_root()
    target, debugger = cgroups("v2"), cgroups("v2")
    out, term = tmp_path / "eph", tmp_path / "term-eph"
    p, _ = procs.start(["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-c",
                        POD, target.path, debugger.path, AIPROF, TRAINER, "-d", "2s", "-o",
                        str(out), "--termination-log", str(term)])
    stdout, stderr = p.communicate(timeout=120)
    line = [x for x in stdout.splitlines() if x.startswith("RESULT")]
    assert line, stderr
    rc, trainer_ns_pid = int(line[0].split()[1]), int(line[0].split()[2])
    assert rc == 0, stderr
    summary = load_summary(out)
    # the trainer alone: not pause (pid 1), not aiprof's own cgroup
    assert [t["pid"] for t in summary["targets"]] == [trainer_ns_pid]
    assert summary["targets"][0]["comm"] == "trainer"
    assert events(load_timeline(out), "nccl")
    # the eBPF collectors select by host pid: off here, and saying why
    assert "pid namespace other than the host's" in json.dumps(summary["ebpf"])
    msg = read_termination(term)
    assert msg["summary"]["processes"] == 1 and msg["summary"]["container_processes"] == 1
    assert_lists_local_artifacts(msg, out)


def test_runc_container(tmp_path):
    """A trainer in a real runc container (tests/runc), found by its id from the host."""
    require_root()
    try:
        from runcenv import RuncEnv, Bind, runc_available
    except ImportError:
        pytest.skip("tests/runc is not there")
    if not runc_available():
        pytest.skip("runc is not installed (scripts/install-deps.sh)")
    env = RuncEnv()
    try:
        c = env.container(["/opt/aiprof/tests/workloads/trainer"] + TRAINER_ARGS,
                          binds=[Bind(os.path.join(BUILD, "tests"), "/opt/aiprof/tests")])
        c.start()
        deadline = time.monotonic() + 30
        while "ready" not in c.output() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert "ready" in c.output(), c.output()
        out, term = tmp_path / "runc", tmp_path / "term-runc"
        r = run_aiprof(["profile", "--container-id", f"containerd://{c.id}", "-d", "2s",
                        "-o", str(out), "--termination-log", str(term)])
        assert r.returncode == 0, r.stderr
        summary = load_summary(out)
        assert [t["pid"] for t in summary["targets"]] == [c.pid]
        # the library was loaded across the mount namespace: the trainer's calls are there
        tl = load_timeline(out)
        assert events(tl, "cuda_api") and events(tl, "nccl")
        # and the eBPF collectors followed it by host pid
        assert summary["ebpf"]["state"] == "on", summary["ebpf"]
        assert events(tl, "offcpu")
        msg = read_termination(term)
        assert msg["summary"]["processes"] == 1
        assert_lists_local_artifacts(msg, out)
    finally:
        env.cleanup()


def secret_dir(tmp_path, key_id, secret):
    d = tmp_path / "s3-secret"
    d.mkdir()
    (d / "AWS_ACCESS_KEY_ID").write_text(key_id + "\n")
    (d / "AWS_SECRET_ACCESS_KEY").write_text(secret + "\n")
    return d


def test_upload_and_403(procs, tmp_path, cgroups, rgw):
    """As the controller starts it: credentials as files, the endpoint in the environment."""
    require_root()
    cg = cgroups("v1")
    cid = os.path.basename(cg.path)
    _, trainer = start_trainer(procs, *TRAINER_ARGS)
    cg.add(trainer)
    prefix = f"ns/session-{secrets.token_hex(4)}/pod-0"
    env = rgw.client_env(AWS_ACCESS_KEY_ID=None, AWS_SECRET_ACCESS_KEY=None,
                         AIPROF_SESSION="session", AIPROF_TARGET_POD="pod-0",
                         AIPROF_TARGET_CONTAINER="trainer",
                         AIPROF_S3_SECRET_DIR=str(secret_dir(
                             tmp_path, rgw.env["AWS_ACCESS_KEY_ID"], rgw.secret)))
    term = tmp_path / "term-s3"
    r = run_aiprof(["profile", "--container-id", f"containerd://{cid}", "-d", "1s",
                    "--no-ebpf", "-o", f"s3://{rgw.bucket}/{prefix}", "--termination-log",
                    str(term)], env=env, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    msg = read_termination(term)
    assert "error" not in msg
    assert msg["artifacts"][0]["name"] == "manifest.json"
    s3 = rgw.boto3()
    for a in msg["artifacts"]:
        assert a["url"] == f"s3://{rgw.bucket}/{prefix}/{a['name']}"
        body = s3.get_object(Bucket=rgw.bucket, Key=f"{prefix}/{a['name']}")["Body"].read()
        assert len(body) == a["size"], a
        assert hashlib.sha256(body).hexdigest() == a["sha256"], a
    assert {"summary.json", "timeline.json.gz", "report.html"} <= {
        a["name"] for a in msg["artifacts"]}

    # a wrong secret: 403, said in the message, the secret nowhere
    wrong = rgw.secret[::-1]
    (tmp_path / "w").mkdir()
    env["AIPROF_S3_SECRET_DIR"] = str(secret_dir(tmp_path / "w", rgw.env["AWS_ACCESS_KEY_ID"],
                                                 wrong))
    r = run_aiprof(["profile", "--container-id", f"containerd://{cid}", "-d", "1s",
                    "--no-ebpf", "-o", f"s3://{rgw.bucket}/{prefix}-403", "--termination-log",
                    str(term)], env=env, cwd=tmp_path)
    assert r.returncode == EXIT_OUTPUT
    text = open(term).read()
    msg = json.loads(text)
    assert "403" in msg["error"] or "SignatureDoesNotMatch" in msg["error"], msg["error"]
    assert "secret access key" in msg["error"]     # what to check
    assert wrong not in text and rgw.secret not in text
    assert wrong not in r.stderr + r.stdout
    assert msg["artifacts"] == []                  # nothing was uploaded
    assert msg["summary"]["exit_code"] == EXIT_OUTPUT
    assert msg["summary"]["processes"] == 1
