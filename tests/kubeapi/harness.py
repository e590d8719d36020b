# SPDX-License-Identifier: MIT
"""What the controller's integration tests (tests/integration) and the end-to-end chain (e2e/)
both do around the API double: wait for a condition, stop the double, and run one
aiprof-controller process scoped to a namespace with its log in a file, its metrics port read
from that log. Processes are stopped by their PID."""
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


def http_get(port, path, timeout=5):
    """(status, body) of a GET on 127.0.0.1:port (the controller's metrics and feed server)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
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


def controller_args(binary, ns, *extra, kubeconfig=None, target_wait, grace, injector_image,
                    identity):
    """The command line both suites run the controller with: scoped to ns (its lease there
    too, short), metrics on an ephemeral loopback port, two workers, verbose."""
    args = [binary, "--namespace", ns, "--metrics-addr", "127.0.0.1:0", "--workers", "2",
            "--target-wait", target_wait, "--grace", grace, "--lease-namespace", ns,
            "--lease-duration", "3s", "--renew-deadline", "2s", "--retry-period", "500ms",
            "--injector-image", injector_image, "--identity", identity, "-v", *extra]
    if kubeconfig:
        args[1:1] = ["--kubeconfig", kubeconfig]
    return args


class ControllerProcess:
    """One aiprof-controller process; stdout and stderr go to log_path."""

    def __init__(self, args, log_path, env):
        self.log_path = log_path
        self.log = open(log_path, "w")
        self.p = subprocess.Popen(args, stdout=self.log, stderr=subprocess.STDOUT, env=env)
        self.port = None

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

    def http(self, path):
        """(status, body) of a GET on the metrics port."""
        return http_get(self.port, path)

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
