# SPDX-License-Identifier: MIT
"""Helpers the S3 tests and the S3 benchmark share: start and stop the radosgw harness
(tests/s3/radosgw.sh), run the fault proxy (tests/s3/faultproxy.py), and an independent
S3 client (boto3) to check what aiprof uploaded. Every process started here is stopped by
its PID."""
import hashlib
import os
import shutil
import signal
import subprocess
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
HARNESS = os.path.join(HERE, "radosgw.sh")
PROXY = os.path.join(HERE, "faultproxy.py")
CEPH_BINARIES = ("ceph-mon", "ceph-osd", "radosgw", "radosgw-admin", "ceph", "monmaptool")


def missing_ceph():
    """The Ceph binaries that are not installed (empty when the harness can run)."""
    return [b for b in CEPH_BINARIES if not shutil.which(b)]


class Radosgw:
    """A one-node Ceph cluster with radosgw on 127.0.0.1 (see tests/s3/radosgw.sh)."""

    def __init__(self):
        self.state = tempfile.mkdtemp(prefix="aiprof-rgw-")
        self.env = {}

    def start(self, timeout=120):
        env = dict(os.environ, S3_STATE=self.state)
        p = subprocess.run(["bash", HARNESS, "start"], env=env, capture_output=True,
                           text=True, timeout=timeout)
        if p.returncode != 0:
            self.stop()
            raise RuntimeError(f"radosgw harness failed to start:\n{p.stderr[-4000:]}")
        for line in p.stdout.splitlines():
            k, _, v = line.partition("=")
            if k:
                self.env[k] = v
        return self

    def stop(self):
        env = dict(os.environ, S3_STATE=self.state)
        subprocess.run(["bash", HARNESS, "stop"], env=env, capture_output=True, timeout=60)
        shutil.rmtree(self.state, ignore_errors=True)

    @property
    def endpoint(self):
        return self.env["AWS_ENDPOINT_URL_S3"]

    @property
    def hostport(self):
        return self.endpoint.split("://", 1)[1]

    @property
    def bucket(self):
        return self.env["S3_BUCKET"]

    @property
    def secret(self):
        return self.env["AWS_SECRET_ACCESS_KEY"]

    def client_env(self, **over):
        """The environment for a client: ours without any AWS_* / AIPROF_S3_* of the caller's,
        plus the cluster's credentials and endpoint."""
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("AWS_", "AIPROF_S3_"))}
        for k in ("AWS_ENDPOINT_URL_S3", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY",
                  "AWS_REGION"):
            env[k] = self.env[k]
        for k, v in over.items():
            if v is None:
                env.pop(k, None)
            else:
                env[k] = v
        return env

    def boto3(self):
        import boto3
        import botocore.config
        return boto3.client(
            "s3", endpoint_url=self.endpoint, region_name=self.env["AWS_REGION"],
            aws_access_key_id=self.env["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=self.secret,
            config=botocore.config.Config(s3={"addressing_style": "path"},
                                          retries={"max_attempts": 3, "mode": "standard"}))


class Proxy:
    """tests/s3/faultproxy.py in front of the radosgw, stopped by PID."""

    def __init__(self, upstream, fault="none", match=".", times=1, after=0, stall=30.0):
        fd, self.log = tempfile.mkstemp(prefix="aiprof-proxy-", suffix=".log")
        os.close(fd)
        self.p = subprocess.Popen(
            ["/usr/bin/python3", PROXY, "--upstream", upstream, "--fault", fault,
             "--match", match, "--times", str(times), "--after", str(after),
             "--stall", str(stall), "--log", self.log],
            stdout=subprocess.PIPE, text=True)
        line = self.p.stdout.readline()
        if not line.startswith("listening "):
            self.stop()
            raise RuntimeError(f"fault proxy did not start: {line!r}")
        self.endpoint = "http://" + line.split()[1]

    def lines(self):
        with open(self.log) as f:
            return [line.rstrip("\n") for line in f]

    def faults(self):
        return [line for line in self.lines() if not line.startswith("pass ")]

    def stop(self):
        if self.p.poll() is None:
            os.kill(self.p.pid, signal.SIGKILL)
        self.p.wait(timeout=10)
        self.p.stdout.close()
        try:
            os.unlink(self.log)
        except FileNotFoundError:
            pass


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()
