# SPDX-License-Identifier: MIT
"""Clients for tests: Kube (the REST API over HTTPS, standard library only), Control (the
double's control API), and launch() to start the double as a process.

    p, ep = launch(workdir)            # ep: endpoints.json (server, control, kubeconfig, ca, token)
    kube = Kube(ep["server"], ep["ca"], ep["token"])
    ctl = Control(ep["control"])
    ...
    os.kill(p.pid, signal.SIGKILL)     # the caller stops what it started, by PID
"""
import http.client
import json
import os
import ssl
import subprocess
import time
import urllib.parse
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
LAUNCHER = os.path.join(os.path.dirname(HERE), "run_fakeapi.py")


def launch(workdir, *args, python="/usr/bin/python3", timeout=30, **popen_kw):
    """Start the double; returns (Popen, endpoints dict) once it prints its ready line."""
    popen_kw.setdefault("stdout", subprocess.PIPE)
    popen_kw.setdefault("stderr", subprocess.PIPE)
    popen_kw.setdefault("text", True)
    p = subprocess.Popen([python, LAUNCHER, "--dir", workdir, *args], **popen_kw)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = p.stdout.readline()
        if not line:
            break
        if line.startswith("ready "):
            with open(os.path.join(workdir, "endpoints.json")) as f:
                return p, json.load(f)
    err = p.stderr.read() if p.poll() is not None else ""
    p.kill()
    p.wait()
    raise RuntimeError(f"fakeapi did not start (rc={p.returncode}): {err[-2000:]}")


class Response:
    def __init__(self, status, headers, body):
        self.status, self.headers, self.raw = status, headers, body
        ctype = headers.get("Content-Type", "")
        self.json = None
        if body and ctype.startswith("application/json"):
            self.json = json.loads(body)

    def __repr__(self):
        return f"<Response {self.status} {self.raw[:200]!r}>"


class Kube:
    """Just enough of a Kubernetes REST client: bearer token or client certificate."""

    def __init__(self, server, ca_file, token=None, cert=None, key=None, user_agent="fakeapi-tests/1",
                 keep_alive=False):
        """keep_alive: reuse one connection for every request (an object per thread then)."""
        self.keep_alive = keep_alive
        self._kept = None
        u = urllib.parse.urlsplit(server)
        self.host, self.port = u.hostname, u.port
        self.ctx = ssl.create_default_context(cafile=ca_file)
        if cert:
            self.ctx.load_cert_chain(cert, key)
        self.token = token
        self.user_agent = user_agent

    def _conn(self, timeout=30):
        return http.client.HTTPSConnection(self.host, self.port, context=self.ctx, timeout=timeout)

    def _headers(self, content_type=None, accept="application/json", extra=None):
        h = {"Accept": accept, "User-Agent": self.user_agent}
        if self.token:
            h["Authorization"] = f"Bearer {self.token}"
        if content_type:
            h["Content-Type"] = content_type
        h.update(extra or {})
        return h

    def request(self, method, path, body=None, content_type="application/json", query=None,
                accept="application/json", headers=None, timeout=30):
        if query:
            path += ("&" if "?" in path else "?") + urllib.parse.urlencode(query)
        data = None
        if body is not None:
            data = body if isinstance(body, (bytes, str)) else json.dumps(body)
            if isinstance(data, str):
                data = data.encode()
        hdrs = self._headers(content_type if data is not None else None, accept, headers)
        if self.keep_alive:
            for attempt in (0, 1):
                if self._kept is None:
                    self._kept = self._conn(timeout)
                try:
                    self._kept.request(method, path, body=data, headers=hdrs)
                    r = self._kept.getresponse()
                    out = Response(r.status, dict(r.getheaders()), r.read())
                except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                    self.close()        # the server closed an idle connection: once more on a new one
                    if attempt:
                        raise
                    continue
                if r.will_close:
                    self.close()
                return out
        c = self._conn(timeout)
        try:
            c.request(method, path, body=data, headers=hdrs)
            r = c.getresponse()
            return Response(r.status, dict(r.getheaders()), r.read())
        finally:
            c.close()

    def close(self):
        if self._kept is not None:
            self._kept.close()
            self._kept = None

    def get(self, path, **kw):
        return self.request("GET", path, **kw)

    def post(self, path, body, **kw):
        return self.request("POST", path, body, **kw)

    def put(self, path, body, **kw):
        return self.request("PUT", path, body, **kw)

    def patch(self, path, body, patch_type="application/merge-patch+json", **kw):
        return self.request("PATCH", path, body, content_type=patch_type, **kw)

    def delete(self, path, body=None, **kw):
        return self.request("DELETE", path, body, **kw)

    def watch(self, path, query=None, timeout=30, accept="application/json"):
        """Yield watch events ({"type", "object"}) until the server ends the stream."""
        q = dict(query or {}, watch="true")
        path += ("&" if "?" in path else "?") + urllib.parse.urlencode(q)
        c = self._conn(timeout)
        try:
            c.request("GET", path, headers=self._headers(accept=accept))
            r = c.getresponse()
            if r.status != 200:
                raise RuntimeError(f"watch {path}: {r.status} {r.read()[:500]!r}")
            while True:
                line = r.readline()
                if not line:
                    return
                if line.strip():
                    yield json.loads(line)
        finally:
            c.close()


class Control:
    """The double's control API."""

    def __init__(self, url):
        self.url = url.rstrip("/")

    def call(self, verb, path, body=None, /, **query):
        url = self.url + path
        if query:
            url += "?" + urllib.parse.urlencode(query)
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(url, data=data, method=verb,
                                     headers={"Content-Type": "application/json"} if data else {})
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return json.loads(r.read() or b"{}")
        except urllib.error.HTTPError as e:
            raise RuntimeError(f"control {verb} {path}: {e.code} {e.read()[:500]!r}") from None

    def info(self):
        return self.call("GET", "/info")

    def requests(self, since=0, **filters):
        return self.call("GET", "/requests", since=since, **filters)["requests"]

    def clear_requests(self):
        return self.call("DELETE", "/requests")

    def fault(self, **spec):
        """path (regex), method, verb, query (regex), user, times, action (error|drop|reset|
        delay), code, reason, message, delay, after, retryAfterSeconds."""
        return self.call("POST", "/faults", spec)["id"]

    def clear_faults(self):
        return self.call("DELETE", "/faults")

    def compact(self, resource_version=None):
        body = {} if resource_version is None else {"resourceVersion": resource_version}
        return self.call("POST", "/compact", body)["compacted"]

    def watches(self):
        return self.call("GET", "/watches")["watches"]

    def cut_watches(self, mode="close", path=""):
        return self.call("POST", "/watches/cut", {"mode": mode, "path": path})["cut"]

    def bookmark_now(self):
        return self.call("POST", "/watches/bookmark", {})

    def settings(self, **kw):
        return self.call("POST", "/settings", kw)

    def deny(self, **rule):
        return self.call("POST", "/authz/deny", rule)

    def clear_denies(self):
        return self.call("DELETE", "/authz/deny")

    def rotate_token(self, keep_old=True):
        return self.call("POST", "/tokens/rotate", {"keepOld": keep_old})

    def kubelet(self, action, namespace, name, **kw):
        """action: status (status={...}), run, terminate (container, exitCode, reason, message,
        ephemeral, signal), ephemeral-run (container), confirm-delete, logs (container, text)."""
        return self.call("POST", f"/kubelet/{action}", dict(kw, namespace=namespace, name=name))

    def objects(self, key=None):
        return self.call("GET", "/objects", **({"key": key} if key else {}))

