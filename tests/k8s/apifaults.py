# SPDX-License-Identifier: MIT
"""A fault proxy in front of the REAL API server: the faults a real server does not make on
demand, made on the way to and from one.

    proxy = ApiFaults(cluster).start()     # https://127.0.0.1:PORT, the API server's certificate
    proxy.kubeconfig(path)                 # the admin kubeconfig, pointed at the proxy
    proxy.cut_watches("reset")             # every open watch: RST (or "close": a clean end)
    proxy.expire_watches(path_rx, times=1) # the next watch answers 410 Expired, as the server
                                           # does for a resourceVersion compacted away
    proxy.fault(path_rx, method="POST", action="drop", times=1)
                                           # forward, then reset instead of the answer
    proxy.fault(path_rx, method="PUT", action="delay", delay=8, times=10)
                                           # a slow server: forward 8 s late, whether or not
                                           # the client still waits (the server does the work)
    proxy.requests(...)                    # what went through: method, path, code, fault,
                                           # time (came in), answered (the server's first
                                           # byte: its work done), done (answer passed on;
                                           # None if not, as when the client left)
    proxy.stop()

It listens on 127.0.0.1 with the API server's own certificate and key (the kit's PKI: valid
for 127.0.0.1, signed by the cluster CA), so a kubeconfig's CA and token work through it
unchanged; requests are forwarded one per upstream connection with `Connection: close`, the
answers streamed back as they come (watches included). Everything else is the real server's."""
import json
import os
import re
import socket
import ssl
import struct
import threading
import time


def _status(code, reason, message):
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
            "reason": reason, "code": code}


class ApiFaults:
    def __init__(self, cluster):
        self.cluster = cluster
        u = cluster.api_url.rsplit(":", 1)
        self.up_host, self.up_port = "127.0.0.1", int(u[1])
        self.lock = threading.Lock()
        self.faults = []          # dicts: rx, method, action, code, times, watch
        self.watches = set()      # client sockets of open watch streams
        self.log = []
        self.stopping = False

    # ------------------------------------------------------------------ control

    def start(self):
        self.srv_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.srv_ctx.load_cert_chain(os.path.join(self.cluster.pki, "apiserver.crt"),
                                     os.path.join(self.cluster.pki, "apiserver.key"))
        self.up_ctx = ssl.create_default_context(cafile=self.cluster.ca_file)
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.url = f"https://127.0.0.1:{self.port}"
        threading.Thread(target=self._accept, daemon=True, name="apifaults").start()
        return self

    def stop(self):
        self.stopping = True
        self.sock.close()
        self.cut_watches("close")

    def kubeconfig(self, path):
        """The admin kubeconfig with the proxy as its server."""
        with open(self.cluster.kubeconfig) as f:
            text = f.read()
        with open(path, "w") as f:
            f.write(text.replace(self.cluster.api_url, self.url))
        os.chmod(path, 0o600)
        return path

    def fault(self, path, method=None, action="error", code=500, times=1, watch=None, delay=0.0):
        """The next `times` requests whose path (and query) matches `path` (a regex) and method:
        error (answer a Status with `code`), drop (forward, then reset the connection instead
        of answering), hang (answer nothing until the fault is cleared, then close), delay
        (forward `delay` seconds late — or never, if the proxy stops first — then answer as
        the server does; a client that gave up meanwhile does not stop the request)."""
        f = {"rx": re.compile(path), "method": method, "action": action, "code": code, "times": times,
             "watch": watch, "delay": delay, "id": len(self.faults) + 1}
        with self.lock:
            self.faults.append(f)
        return f["id"]

    def expire_watches(self, path, times=1):
        """The next `times` watches on `path` get what the server answers for a resourceVersion
        compacted away: 200 and one ERROR event with a 410 Expired Status."""
        return self.fault(path, "GET", action="expire", code=410, times=times, watch=True)

    def clear_faults(self):
        with self.lock:
            self.faults = []

    def cut_watches(self, mode="close"):
        """Ends every open watch: "close" (an orderly end) or "reset" (RST). Returns how many."""
        with self.lock:
            socks, self.watches = list(self.watches), set()
        for s in socks:
            try:
                if mode == "reset":
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                else:
                    s.shutdown(socket.SHUT_RDWR)
                s.close()
            except OSError:
                pass
        return len(socks)

    def requests(self, method=None, path=None):
        with self.lock:
            return [r for r in self.log if (method is None or r["method"] == method)
                    and (path is None or re.search(path, r["path"]))]

    # ------------------------------------------------------------------ the proxy

    def _accept(self):
        while not self.stopping:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _take_fault(self, method, target, watch):
        with self.lock:
            for f in self.faults:
                if f["times"] <= 0 or (f["method"] and f["method"] != method):
                    continue
                if f["watch"] is not None and f["watch"] != watch:
                    continue
                if f["rx"].search(target):
                    f["times"] -= 1
                    return f
        return None

    def _serve(self, raw):
        try:
            c = self.srv_ctx.wrap_socket(raw, server_side=True)
        except (ssl.SSLError, OSError):
            raw.close()
            return
        try:
            while True:
                req = _read_request(c)
                if req is None:
                    return
                if not self._one(c, *req):
                    return
        except (OSError, ssl.SSLError, ValueError):
            pass
        finally:
            with self.lock:
                self.watches.discard(c)
            try:
                c.close()
            except OSError:
                pass

    def _one(self, c, method, target, headers, body):
        """Handles one request; False when the client connection is done."""
        watch = "watch=true" in target or "watch=1" in target
        f = self._take_fault(method, target, watch)
        entry = {"method": method, "path": target.split("?", 1)[0], "query": target.partition("?")[2],
                 "watch": watch, "fault": f["id"] if f else None, "action": f["action"] if f else None,
                 "code": None, "time": time.time(), "answered": None, "done": None}
        with self.lock:
            self.log.append(entry)
        if f and f["action"] == "error":
            entry["code"] = f["code"]
            _answer(c, f["code"], _status(f["code"], "InternalError" if f["code"] >= 500 else "Conflict"
                                          if f["code"] == 409 else "BadRequest", "injected by the fault proxy"))
            return True
        if f and f["action"] == "expire":
            entry["code"] = 200
            event = {"type": "ERROR", "object": _status(410, "Expired", "too old resource version: 1 (2)")}
            _answer(c, 200, event, close=True)
            return False
        if f and f["action"] == "hang":
            # no answer while the fault stands; then the connection drops, as when a hung
            # server is restarted
            while not self.stopping and any(x is f for x in self.faults):
                time.sleep(0.1)
            return False
        if f and f["action"] == "delay":
            end = time.monotonic() + f["delay"]
            while not self.stopping and time.monotonic() < end:
                time.sleep(0.05)
            if self.stopping:
                return False
        up = self.up_ctx.wrap_socket(socket.create_connection((self.up_host, self.up_port), timeout=30),
                                     server_hostname="127.0.0.1")
        try:
            head = [f"{method} {target} HTTP/1.1"]
            for k, v in headers:
                if k.lower() not in ("connection", "keep-alive", "proxy-connection"):
                    head.append(f"{k}: {v}")
            head.append("Connection: close")
            up.sendall(("\r\n".join(head) + "\r\n\r\n").encode() + body)
            if f and f["action"] == "drop":
                # the server does the work; the client never hears of it
                up.settimeout(30)
                while up.recv(65536):
                    pass
                entry["code"] = 0
                c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                return False
            if watch:
                up.settimeout(None)
                with self.lock:
                    self.watches.add(c)
            first = True
            while True:
                data = up.recv(65536)
                if not data:
                    break
                if first:
                    # the server has done the work by its first byte: when, whether or not
                    # the client is still there to hear it
                    entry["answered"] = time.time()
                    m = re.match(rb"HTTP/1\.[01] (\d+)", data)
                    entry["code"] = int(m.group(1)) if m else None
                    first = False
                try:
                    c.sendall(data)
                except OSError:
                    if not (f and f["action"] == "delay"):
                        raise
                    up.settimeout(30)   # the client gave up: the server still does the work
            entry["done"] = time.time()
            return False            # the answer ended with the upstream connection: close too
        finally:
            up.close()


def _read_request(c):
    """(method, target, [(header, value)], body) of the next request, None at EOF."""
    buf = b""
    while b"\r\n\r\n" not in buf:
        chunk = c.recv(65536)
        if not chunk:
            return None
        buf += chunk
        if len(buf) > 1 << 20:
            raise ValueError("request head too large")
    head, _, rest = buf.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    method, target, _ = lines[0].split(" ", 2)
    headers = [tuple(x.strip() for x in line.split(":", 1)) for line in lines[1:] if ":" in line]
    n = next((int(v) for k, v in headers if k.lower() == "content-length"), 0)
    if any(k.lower() == "transfer-encoding" and "chunked" in v.lower() for k, v in headers):
        raise ValueError("chunked request bodies are not handled by the fault proxy")
    while len(rest) < n:
        chunk = c.recv(65536)
        if not chunk:
            return None
        rest += chunk
    return method, target, headers, rest[:n]


def _answer(c, code, obj, close=False):
    body = json.dumps(obj).encode() + b"\n"
    head = (f"HTTP/1.1 {code} {'OK' if code == 200 else 'Error'}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n" + ("Connection: close\r\n" if close else "") + "\r\n")
    c.sendall(head.encode() + body)
