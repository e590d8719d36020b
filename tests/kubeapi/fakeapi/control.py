# SPDX-License-Identifier: MIT
"""The control API: plain HTTP with JSON bodies on 127.0.0.1, for tests only. It plays the
kubelet, reads the request log, compacts history, cuts watches and injects faults. Nothing
here is part of the Kubernetes API; clients under test never see it."""
import json
import re
import traceback
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from .util import APIError, dumps


class ControlServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, addr, api):
        self.api = api
        super().__init__(addr, ControlHandler)


def _need(body, *keys):
    for k in keys:
        if body.get(k) in (None, ""):
            raise APIError(400, "BadRequest", f"control: {k} is required")
    return [body[k] for k in keys]


class ControlHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, fmt, *args):
        pass

    def do_GET(self):
        self._serve("GET")

    def do_POST(self):
        self._serve("POST")

    def do_DELETE(self):
        self._serve("DELETE")

    def _reply(self, code, obj):
        data = dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _serve(self, method):
        url = urllib.parse.urlsplit(self.path)
        query = {k: v[-1] for k, v in urllib.parse.parse_qs(url.query).items()}
        n = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(n) if n else b""
        try:
            body = json.loads(raw) if raw.strip() else {}
            out = self._route(method, url.path.rstrip("/") or "/", query, body)
            self._reply(200, out if out is not None else {})
        except APIError as e:
            self._reply(e.code, e.status())
        except (ValueError, KeyError, TypeError) as e:
            self._reply(400, {"error": f"control: bad request: {e!r}"})
        except Exception as e:
            traceback.print_exc()
            self._reply(500, {"error": repr(e)})

    def _route(self, method, path, q, b):
        api = self.server.api
        reg = api.registry
        st = reg.store
        if path == "/info" and method == "GET":
            return api.info()
        if path == "/requests":
            if method == "DELETE":
                with api.lock:
                    api.requests.clear()
                return {}
            since = int(q.get("since", 0))
            with api.lock:
                reqs = [r for r in api.requests if r["seq"] > since]
            for k in ("verb", "resource", "namespace", "name", "subresource", "user", "method"):
                if k in q:
                    reqs = [r for r in reqs if (r.get(k) or "") == q[k]]
            if "path" in q:
                rx = re.compile(q["path"])
                reqs = [r for r in reqs if rx.search(r["path"])]
            last = api.requests[-1]["seq"] if api.requests else 0
            return {"requests": reqs, "last": last}
        if path == "/faults":
            if method == "POST":
                from .server import Fault
                f = Fault(b)
                with api.lock:
                    api.faults.append(f)
                return {"id": f.id}
            if method == "DELETE":
                with api.lock:
                    api.faults.clear()
                return {}
            with api.lock:
                return {"faults": [f.describe() for f in api.faults]}
        m = re.match(r"^/faults/(\d+)$", path)
        if m and method == "DELETE":
            with api.lock:
                api.faults[:] = [f for f in api.faults if f.id != int(m.group(1))]
            return {}
        if path == "/compact" and method == "POST":
            return {"compacted": str(st.compact(b.get("resourceVersion")))}
        if path == "/watches" and method == "GET":
            with api.lock:
                return {"watches": [w.describe() for w in api.watches.values()]}
        if path == "/watches/cut" and method == "POST":
            mode = b.get("mode", "close")
            if mode not in ("close", "reset"):
                raise APIError(400, "BadRequest", "control: mode is close or reset")
            rx = re.compile(b.get("path") or "")
            n = 0
            with api.lock:
                for w in api.watches.values():
                    if rx.search(w.path):
                        w.cut = mode
                        n += 1
            with st.changed:
                st.changed.notify_all()
            return {"cut": n}
        if path == "/watches/bookmark" and method == "POST":
            with st.changed:
                st.bookmark_epoch += 1
                st.changed.notify_all()
            return {}
        if path == "/settings" and method == "POST":
            if "bookmarkInterval" in b:
                api.bookmark_interval = float(b["bookmarkInterval"])
            if "historyLimit" in b:
                with st.lock:
                    st.history_limit = int(b["historyLimit"])
            if "podGracefulDelete" in b:
                reg.pod_graceful = bool(b["podGracefulDelete"])
            if "autoRun" in b:
                reg.auto_run = bool(b["autoRun"])
                reg.request_full_pass()
            if "gc" in b:
                reg.gc_enabled = bool(b["gc"])
            if "rvWait" in b:
                reg.rv_wait = float(b["rvWait"])
            if "watchTimeout" in b:
                api.watch_timeout = None if b["watchTimeout"] is None else float(b["watchTimeout"])
            with st.changed:
                st.changed.notify_all()
            return {}
        if path == "/authz/deny":
            if method == "POST":
                rule = {k: b[k] for k in ("user", "verb", "group", "resource", "subresource", "namespace",
                                          "name", "path") if k in b}
                with api.lock:
                    api.denies.append(rule)
                return {"rules": len(api.denies)}
            if method == "DELETE":
                with api.lock:
                    api.denies.clear()
                return {}
        if path == "/tokens/rotate" and method == "POST":
            api.rotate_sa_token(keep_old=b.get("keepOld", True))
            return {"tokenFile": api.sa_dir + "/token"}
        if path.startswith("/kubelet/") and method == "POST":
            ns, name = _need(b, "namespace", "name")
            what = path[len("/kubelet/"):]
            if what == "status":
                o = reg.kubelet_status(ns, name, b.get("status") or {})
            elif what == "run":
                o = reg.kubelet_run(ns, name, b.get("podIP"))
            elif what == "terminate":
                o = reg.kubelet_terminate(ns, name, b.get("container"), b.get("exitCode", 0), b.get("reason"),
                                          b.get("message", ""), bool(b.get("ephemeral")), b.get("signal"))
            elif what == "ephemeral-run":
                o = reg.kubelet_ephemeral_run(ns, name, _need(b, "container")[0])
            elif what == "confirm-delete":
                o = reg.kubelet_confirm_delete(ns, name)
            elif what == "logs":
                c = _need(b, "container")[0]
                with reg.lock:
                    reg.pod_logs[(ns, name, c)] = reg.pod_logs.get((ns, name, c), "") + b.get("text", "")
                return {}
            else:
                raise APIError(404, "NotFound", f"control: no such kubelet action {what}")
            return {"resourceVersion": o["metadata"].get("resourceVersion")}
        if path == "/objects" and method == "GET":
            with st.lock:
                objs = [o for (k, ns, n), o in sorted(st.objects.items()) if not q.get("key") or k == q["key"]]
            return {"resourceVersion": str(st.rv), "items": objs}
        raise APIError(404, "NotFound", f"control: no route {method} {path}")


