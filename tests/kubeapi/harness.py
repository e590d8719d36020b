# SPDX-License-Identifier: MIT
"""What the controller's integration tests (tests/integration) and the end-to-end chain (e2e/)
both do around the API double: wait for a condition, stop the double, and run one
aiprof-controller process scoped to a namespace with its log in a file, its metrics port read
from that log, its /metrics and /ws/sessions read with the bearer token of the configuration
it was started with (those need one: controller/httpd.h). Processes are stopped by their
PID."""
import base64
import hashlib
import os
import re
import signal
import socket
import subprocess
import time


def wait_for(fn, timeout=15.0, what="condition", interval=0.05):
    """fn's first true value; AssertionError (with the last value) after timeout seconds."""
    end = time.monotonic() + timeout
    last = None
    while time.monotonic() < end:
        last = fn()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")


def auth_header(token):
    return f"Authorization: Bearer {token}\r\n" if token else ""


def http_get(port, path, timeout=5, token=None):
    """(status, body) of a GET on 127.0.0.1:port (the controller's metrics and feed server),
    with `token` as the bearer token if given."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\n{auth_header(token)}Connection: close\r\n\r\n".encode())
    data = b""
    while True:
        b = s.recv(65536)
        if not b:
            break
        data += b
        head, _, body = data.partition(b"\r\n\r\n")
        m = re.search(rb"content-length: *(\d+)", head, re.I)
        if m and len(body) >= int(m.group(1)):
            break
    s.close()
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), body.decode()


def stop_api(proc):
    """Stops the API double fakeapi.client.launch() started (by its PID) and closes its pipes."""
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    for f in (proc.stdout, proc.stderr):
        if f:
            f.close()


# Lease duration, renew deadline, retry period. The suites' default leaves a loaded 2-core
# machine's API server 6 s to answer a renewal (a stall past a 2 s deadline made a controller
# stop acting in the middle of a test about something else); the tests that time a handover
# ask for LEASE_SHORT.
LEASE_RELAXED = ("8s", "6s", "1s")
LEASE_SHORT = ("3s", "2s", "500ms")


def controller_args(binary, ns, *extra, kubeconfig=None, target_wait, grace, injector_image,
                    identity, inline_s3=True, lease=LEASE_RELAXED):
    """The command line both suites run the controller with: scoped to ns (its lease there
    too, with the timings lease gives), metrics on an ephemeral loopback port, two workers,
    verbose, sessions allowed their own spec.output.s3 (unless inline_s3 is False)."""
    args = [binary, "--namespace", ns, "--metrics-addr", "127.0.0.1:0", "--workers", "2",
            "--target-wait", target_wait, "--grace", grace, "--lease-namespace", ns,
            "--lease-duration", lease[0], "--renew-deadline", lease[1], "--retry-period", lease[2],
            "--injector-image", injector_image, "--identity", identity, "-v",
            # the suites' sessions give spec.output.s3 (tests/integration/test_tenancy.py
            # checks the storageRef path and that inline s3 is off without this)
            *(["--allow-inline-s3"] if inline_s3 else []), *extra]
    if kubeconfig:
        args[1:1] = ["--kubeconfig", kubeconfig]
    return args


def ws_connect(port, path="/ws/sessions", token=None, timeout=10):
    """A websocket client of the controller's feed: (socket, None) once the server switched
    protocols, else (None, (status, head and body as text)) — a refused upgrade."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    key = base64.b64encode(os.urandom(16)).decode()
    s.sendall((f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
               f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n{auth_header(token)}"
               "Sec-WebSocket-Version: 13\r\n\r\n").encode())
    head = b""
    while b"\r\n\r\n" not in head:
        b = s.recv(1)
        if not b:
            raise EOFError(f"the connection closed after {head!r}")
        head += b
    status = int(head.split()[1])
    if status != 101:
        m = re.search(rb"content-length: *(\d+)", head, re.I)
        body = b""
        while m and len(body) < int(m.group(1)):
            body += s.recv(int(m.group(1)) - len(body))
        s.close()
        return None, (status, (head + body).decode(errors="replace"))
    accept = base64.b64encode(hashlib.sha1((key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").encode()).digest())
    assert accept in head, head
    return s, None


def ws_recv(s):
    """(opcode, payload) of the next frame (text 1, close 8: payload = 2-byte code + reason)."""
    def exact(n):
        b = b""
        while len(b) < n:
            chunk = s.recv(n - len(b))
            if not chunk:
                raise EOFError
            b += chunk
        return b
    h = exact(2)
    n = h[1] & 0x7f
    if n == 126:
        n = int.from_bytes(exact(2), "big")
    elif n == 127:
        n = int.from_bytes(exact(8), "big")
    return h[0] & 0x0f, exact(n)


def config_token(args, env):
    """Where the bearer token of a controller's command line is: ("value", token) from its
    kubeconfig (--kubeconfig, else $KUBECONFIG: the current context's user), ("file", path)
    for a token file (a kubeconfig's tokenFile, in-cluster --service-account-dir), or None."""
    def flag(name):
        for i, a in enumerate(args):
            if a == name and i + 1 < len(args):
                return args[i + 1]
            if a.startswith(name + "="):
                return a.split("=", 1)[1]
        return None
    kubeconfig = flag("--kubeconfig") or (env or {}).get("KUBECONFIG")
    if kubeconfig:
        import yaml
        with open(kubeconfig.split(":")[0]) as f:
            cfg = yaml.safe_load(f)
        ctx = next((c["context"] for c in cfg.get("contexts") or [] if c["name"] == cfg.get("current-context")), {})
        users = cfg.get("users") or []
        user = next((u["user"] for u in users if u["name"] == ctx.get("user")), users[0]["user"] if users else {})
        if user.get("token"):
            return ("value", user["token"])
        return ("file", user["tokenFile"]) if user.get("tokenFile") else None
    sa_dir = flag("--service-account-dir") or "/var/run/secrets/kubernetes.io/serviceaccount"
    return ("file", os.path.join(sa_dir, "token"))


class ControllerProcess:
    """One aiprof-controller process; stdout and stderr go to log_path. http() and metric()
    send the bearer token it was configured with (token= another one)."""

    def __init__(self, args, log_path, env, token=None):
        self.log_path = log_path
        self.log = open(log_path, "w")
        self.p = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT, env=env)
        self.port = None
        self.token_source = ("value", token) if token else config_token(args, env)

    @property
    def token(self):
        """The bearer token now (a token file is read afresh: the kubelet rotates it)."""
        kind, v = self.token_source or (None, None)
        if kind == "file":
            try:
                with open(v) as f:
                    return f.read().strip()
            except OSError:
                return None
        return v

    def text(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def wait_port(self, timeout=10):
        """The metrics port, once the log says which one it bound."""
        def port():
            m = re.search(r"on 127\.0\.0\.1:0 \(port (\d+)\)", self.text())
            if self.p.poll() is not None:
                raise AssertionError(f"controller exited {self.p.returncode}: {self.text()[-2000:]}")
            return m.group(1) if m else None
        self.port = int(wait_for(port, timeout, "the metrics port"))
        return self.port

    def http(self, path, token=None):
        """(status, body) of a GET on the metrics port, with the controller's token (or
        `token`)."""
        return http_get(self.port, path, token=token or self.token)

    def metric(self, name):
        _, body = self.http("/metrics")
        m = re.search(r"^" + re.escape(name) + r" (\S+)$", body, re.M)
        return float(m.group(1)) if m else None

    def stop(self, sig=signal.SIGTERM, timeout=15):
        """Sends sig (if it still runs) and waits; SIGKILL after timeout seconds. Returns the
        exit status, or None when it had to be killed."""
        if self.p.poll() is None:
            os.kill(self.p.pid, sig)
        try:
            return self.p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.kill(self.p.pid, signal.SIGKILL)
            self.p.wait()
            return None
        finally:
            self.log.close()
