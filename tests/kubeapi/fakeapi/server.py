# SPDX-License-Identifier: MIT
"""The HTTPS front end of the double: authentication, routing, content negotiation, watch
streams, injected faults, and a log of every request for tests to assert on."""
import collections
import itertools
import json
import os
import random
import re
import secrets
import select
import socket
import ssl
import struct
import sys
import threading
import time
import traceback
import urllib.parse
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from . import discovery as D
from . import pki, protobuf
from .profiling import Profiles
from .kinds import CustomResources
from .registry import APPLY, JSONP, MERGE, SMP, Ctx, Registry, parse_rv
from .util import (APIError, bad_request, dumps, expired, forbidden_field, invalid_object, loads_strict,
                   parse_bool, too_large_rv)

try:
    import yaml
except ImportError:     # YAML bodies need python3-yaml (scripts/install-deps.sh)
    yaml = None

MAX_BODY = 3 * 1024 * 1024
NAMESPACE_SUBRESOURCES = ("status", "finalize")
PUBLIC_PATHS = ("/healthz", "/livez", "/readyz", "/version", "/version/")


class WatchInfo:
    ids = itertools.count(1)

    def __init__(self, user, path, query, resource, bookmarks):
        self.id = next(WatchInfo.ids)
        self.user, self.path, self.query, self.resource = user, path, query, resource
        self.bookmarks = bookmarks
        self.started = time.time()
        self.events_sent = 0
        self.cut = None          # None, "close" or "reset"

    def describe(self):
        return {"id": self.id, "user": self.user, "path": self.path, "query": self.query,
                "resource": self.resource, "allowWatchBookmarks": self.bookmarks,
                "started": self.started, "eventsSent": self.events_sent}


class Fault:
    ids = itertools.count(1)

    def __init__(self, spec):
        self.id = next(Fault.ids)
        self.method = (spec.get("method") or "").upper() or None
        self.verb = spec.get("verb") or None
        self.path = re.compile(spec.get("path") or "")
        self.query = re.compile(spec["query"]) if spec.get("query") else None
        self.user = spec.get("user")
        self.times = int(spec.get("times", 1))
        self.action = spec.get("action", "error")      # error | drop | reset | delay
        self.code = int(spec.get("code", 500))
        self.reason = spec.get("reason")
        self.message = spec.get("message")
        self.delay = float(spec.get("delay", 0))
        self.after = bool(spec.get("after", False))     # do the work, then fail the answer
        self.retry_after = spec.get("retryAfterSeconds")
        self.hits = 0
        self.spec = spec

    def matches(self, method, verb, path, query, user):
        if self.times == 0:
            return False
        if self.method and self.method != method:
            return False
        if self.verb and self.verb != verb:
            return False
        if self.user and self.user != user:
            return False
        if not self.path.search(path):
            return False
        if self.query and not self.query.search(query):
            return False
        return True

    def error(self):
        reasons = {400: "BadRequest", 401: "Unauthorized", 403: "Forbidden", 404: "NotFound",
                   405: "MethodNotAllowed", 409: "Conflict", 410: "Expired", 422: "Invalid",
                   429: "TooManyRequests", 500: "InternalError", 503: "ServiceUnavailable",
                   504: "Timeout"}
        reason = self.reason or reasons.get(self.code, "")
        msg = self.message or {409: "Operation cannot be fulfilled: the object has been modified; please "
                                    "apply your changes to the latest version and try again",
                               429: "Too many requests, please try again later.",
                               500: "Internal error occurred: injected fault",
                               503: "The server is currently unable to handle the request",
                               504: "Timeout: request did not complete within requested timeout"}.get(
                                   self.code, f"injected fault {self.code}")
        details, headers = None, {}
        if self.retry_after is not None:
            details = {"retryAfterSeconds": int(self.retry_after)}
            headers["Retry-After"] = str(int(self.retry_after))
        return APIError(self.code, reason, msg, details, headers)

    def describe(self):
        return dict(self.spec, id=self.id, hits=self.hits, left=self.times)


class FakeAPIServer:
    """The double. start() generates the PKI and kubeconfig under workdir and serves HTTPS on
    127.0.0.1:port and the control API on 127.0.0.1:control_port (0: any free port)."""

    def __init__(self, workdir, port=0, control_port=0, token=None, bookmark_interval=60.0,
                 history_limit=2000, pod_graceful=False, gc=True, anonymous=False, auto_run=False,
                 namespace="default", sa_namespace="aiprof-system", sa_name="aiprof-controller",
                 rv_wait=3.0, watch_timeout=None, log=None, profile=None):
        self.profiles = Profiles(profile) if profile else None
        self.workdir = os.path.abspath(workdir)
        self.port, self.control_port = port, control_port
        self.token = token or secrets.token_hex(24)
        self.sa_token = "sa-" + secrets.token_hex(24)
        self.old_sa_tokens = set()
        self.sa_user = f"system:serviceaccount:{sa_namespace}:{sa_name}"
        self.sa_namespace = sa_namespace
        self.namespace = namespace
        self.bookmark_interval = float(bookmark_interval)
        self.anonymous = anonymous
        self.watch_timeout = watch_timeout           # default for watches without timeoutSeconds
        self.registry = Registry(pod_graceful=pod_graceful, gc=gc, rv_wait=rv_wait, profiles=self.profiles)
        self.registry.store.history_limit = history_limit
        self.registry.auto_run = auto_run
        self.log = log
        self.lock = threading.Lock()
        self.requests = collections.deque(maxlen=20000)
        self.seq = itertools.count(1)
        self.faults = []
        self.denies = []
        self.watches = {}
        self.httpd = self.control = None

    # ---------------------------------------------------------------- lifecycle
    def start(self):
        pki.make_pki(self.workdir)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.load_cert_chain(os.path.join(self.workdir, "server.crt"), os.path.join(self.workdir, "server.key"))
        ctx.load_verify_locations(os.path.join(self.workdir, "ca.crt"))
        ctx.verify_mode = ssl.CERT_OPTIONAL
        ctx.set_alpn_protocols(["http/1.1"])
        self.httpd = TLSServer(("127.0.0.1", self.port), APIHandler, ctx, self)
        self.port = self.httpd.server_address[1]
        from .control import ControlServer
        self.control = ControlServer(("127.0.0.1", self.control_port), self)
        self.control_port = self.control.server_address[1]
        self.sa_dir = pki.write_service_account(self.workdir, self.sa_token, self.sa_namespace)
        self.kubeconfig = pki.write_kubeconfig(self.workdir, self.url, self.token,
                                               os.path.join(self.sa_dir, "token"), self.namespace)
        self.ca_file = os.path.join(self.workdir, "ca.crt")
        with open(os.path.join(self.workdir, "token"), "w") as f:
            f.write(self.token)
        self.registry.start()
        for srv, name in ((self.httpd, "https"), (self.control, "control")):
            threading.Thread(target=srv.serve_forever, name=name, daemon=True).start()
        info = self.info()
        tmp = os.path.join(self.workdir, ".endpoints.json")
        with open(tmp, "w") as f:
            json.dump(info, f, indent=2)
        os.replace(tmp, os.path.join(self.workdir, "endpoints.json"))
        return self

    def stop(self):
        self.registry.stop()
        for srv in (self.httpd, self.control):
            if srv:
                srv.shutdown()
                srv.server_close()
        if self.profiles:
            self.profiles.dump()

    @property
    def url(self):
        return f"https://127.0.0.1:{self.port}"

    @property
    def control_url(self):
        return f"http://127.0.0.1:{self.control_port}"

    def info(self):
        st = self.registry.store
        return {"server": self.url, "control": self.control_url, "kubeconfig": self.kubeconfig,
                "ca": self.ca_file, "token": self.token, "tokenFile": os.path.join(self.workdir, "token"),
                "serviceAccountDir": self.sa_dir, "serviceAccountUser": self.sa_user,
                "resourceVersion": str(st.rv), "compactedResourceVersion": str(st.compacted),
                "pid": os.getpid(), "workdir": self.workdir}

    # ---------------------------------------------------------------- auth
    def authenticate(self, handler):
        """(user, groups) or raise 401."""
        auth = handler.headers.get("Authorization", "")
        bad = False
        if auth:
            scheme, _, cred = auth.partition(" ")
            cred = cred.strip()
            if scheme.lower() == "bearer" and cred:
                if secrets.compare_digest(cred, self.token):
                    return "aiprof-admin", ["system:masters", "system:authenticated"]
                if secrets.compare_digest(cred, self.sa_token) or cred in self.old_sa_tokens:
                    return self.sa_user, ["system:serviceaccounts", f"system:serviceaccounts:{self.sa_namespace}",
                                          "system:authenticated"]
            bad = True
        cert = handler.connection.getpeercert() if hasattr(handler.connection, "getpeercert") else None
        if cert:
            subj = {k: v for rdn in cert.get("subject", ()) for k, v in rdn}
            groups = [v for rdn in cert.get("subject", ()) for k, v in rdn if k == "organizationName"]
            return subj.get("commonName", ""), groups + ["system:authenticated"]
        if bad or not self.anonymous:
            raise APIError(401, "Unauthorized", "Unauthorized")
        return "system:anonymous", ["system:unauthenticated"]

    def authorize(self, user, groups, info, path):
        if user == "system:anonymous" and path not in PUBLIC_PATHS:
            if info is None:
                raise APIError(403, "Forbidden", f'forbidden: User "system:anonymous" cannot get path "{path}"',
                               {})
        for rule in self.denies:
            if info is None:
                if rule.get("path") and re.search(rule["path"], path) and rule.get("user", user) == user:
                    raise APIError(403, "Forbidden", f'forbidden: User "{user}" cannot get path "{path}"', {})
                continue
            if all(rule.get(k) in (None, "*", v) for k, v in (
                    ("user", user), ("verb", info["verb"]), ("group", info["group"]),
                    ("resource", info["resource"]), ("subresource", info.get("subresource") or ""),
                    ("namespace", info.get("namespace") or ""), ("name", info.get("name") or ""))) and not rule.get("path"):
                self._forbid(user, info)
        if user == "system:anonymous" and info is not None:
            self._forbid(user, info)

    @staticmethod
    def _forbid(user, info):
        res = info["resource"] + (f"/{info['subresource']}" if info.get("subresource") else "")
        where = f' in the namespace "{info["namespace"]}"' if info.get("namespace") else " at the cluster scope"
        why = f'User "{user}" cannot {info["verb"]} resource "{res}" in API group "{info["group"]}"{where}'
        q = f"{info['resource']}.{info['group']}" if info["group"] else info["resource"]
        subject = f'{q} "{info["name"]}"' if info.get("name") else q
        d = {"group": info["group"], "kind": info["resource"]}
        if info.get("name"):
            d["name"] = info["name"]
        if not info["group"]:
            del d["group"]
        raise APIError(403, "Forbidden", f"{subject} is forbidden: {why}", d)

    def rotate_sa_token(self, keep_old=True):
        with self.lock:
            if keep_old:
                self.old_sa_tokens.add(self.sa_token)
            else:
                self.old_sa_tokens.clear()
            self.sa_token = "sa-" + secrets.token_hex(24)
            pki.write_service_account(self.workdir, self.sa_token, self.sa_namespace)
        return self.sa_token

    # ---------------------------------------------------------------- faults, log
    def take_fault(self, method, verb, path, query, user):
        with self.lock:
            for f in self.faults:
                if f.matches(method, verb, path, query, user):
                    f.times -= 1 if f.times > 0 else 0
                    f.hits += 1
                    return f
        return None

    def record(self, entry):
        with self.lock:
            entry["seq"] = next(self.seq)
            self.requests.append(entry)
        if self.log:
            self.log.write(f"{entry['code']} {entry['method']} {entry['path']}"
                           f"{'?' + entry['rawQuery'] if entry['rawQuery'] else ''} user={entry['user']}\n")
            self.log.flush()


# ==================================================================== HTTP plumbing

class TLSServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 64

    def __init__(self, addr, handler, ctx, api):
        self.ctx, self.api = ctx, api
        super().__init__(addr, handler)

    def finish_request(self, request, client_address):
        if self.api.profiles:
            return self.api.profiles.run(self._finish_request, request, client_address)
        return self._finish_request(request, client_address)

    def _finish_request(self, request, client_address):
        request.settimeout(30)
        try:
            tls = self.ctx.wrap_socket(request, server_side=True)
        except (ssl.SSLError, OSError):
            return
        tls.settimeout(None)
        try:
            self.RequestHandlerClass(tls, client_address, self)
        finally:
            try:
                tls.close()
            except OSError:
                pass

    def handle_error(self, request, client_address):
        exc = sys.exc_info()[1]
        if isinstance(exc, (ConnectionError, ssl.SSLError, TimeoutError, OSError)):
            return
        super().handle_error(request, client_address)


def _parse_accept(accept):
    out = []
    for part in (accept or "").split(","):
        part = part.strip()
        if not part:
            continue
        fields = [x.strip() for x in part.split(";")]
        params = {}
        for p in fields[1:]:
            k, _, v = p.partition("=")
            params[k.strip()] = v.strip()
        out.append((fields[0].lower(), params))
    return out


def negotiate(accept, allow_transform):
    """('json'|'yaml'|'table'|'partial', version) for an Accept header, or raise 406."""
    ranges = _parse_accept(accept)
    if not ranges:
        return ("json", None)
    for mt, params in ranges:
        as_ = params.get("as")
        if as_:
            if not allow_transform or params.get("g") != "meta.k8s.io" or params.get("v") not in ("v1", "v1beta1"):
                continue
            if as_ == "Table":
                return ("table", params["v"])
            if as_ in ("PartialObjectMetadata", "PartialObjectMetadataList"):
                return ("partial", params["v"])
            continue
        if mt in ("application/json", "*/*", "application/*", "application/json-seq"):
            return ("json", None)
        if mt == "application/yaml":
            return ("yaml", None)
    raise APIError(406, "NotAcceptable", "only the following media types are accepted: application/json, "
                   "application/yaml, application/vnd.kubernetes.protobuf")


class Dropped(Exception):
    pass


class APIHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "fakeapi"
    sys_version = ""
    timeout = 300

    def log_message(self, fmt, *args):
        pass

    # every verb goes through one place
    def do_GET(self):
        self._serve("GET")

    def do_POST(self):
        self._serve("POST")

    def do_PUT(self):
        self._serve("PUT")

    def do_PATCH(self):
        self._serve("PATCH")

    def do_DELETE(self):
        self._serve("DELETE")

    @property
    def api(self):
        return self.server.api

    # ---------------------------------------------------------------- request plumbing
    def _read_body(self):
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            data = bytearray()
            while True:
                line = self.rfile.readline(65537)
                n = int(line.split(b";")[0].strip() or b"0", 16)
                if n == 0:
                    while self.rfile.readline(65537) not in (b"\r\n", b"\n", b""):
                        pass
                    break
                data += self.rfile.read(n)
                self.rfile.readline(3)
                if len(data) > MAX_BODY:
                    raise APIError(413, "RequestEntityTooLarge", f"Request entity too large: limit is {MAX_BODY}")
            return bytes(data)
        n = int(self.headers.get("Content-Length") or 0)
        if n > MAX_BODY:
            self.rfile.read(n)
            raise APIError(413, "RequestEntityTooLarge", f"Request entity too large: limit is {MAX_BODY}")
        return self.rfile.read(n) if n else b""

    def _send(self, code, body, ctype="application/json", headers=None):
        f, self._after_fault = self._after_fault, None
        if f is not None:       # the work is done; the answer is lost or replaced
            if f.action in ("drop", "reset"):
                self._reset()
            if f.action == "error":
                e = f.error()
                code, body, ctype, headers = e.code, dumps(e.status()), "application/json", e.headers
        if isinstance(body, str):
            body = body.encode()
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Audit-Id", self._audit_id)
        self.send_header("Cache-Control", "no-cache, private")
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        for w in self._warnings + (self._cur_ctx.warnings if self._cur_ctx else []):
            self.send_header("Warning", '299 - ' + json.dumps(w))
        # headers and body in one write: one TLS record, one segment
        self._headers_buffer.append(b"\r\n")
        self._headers_buffer.append(body)
        self.flush_headers()
        self._code = code

    def _send_obj(self, code, obj, fmt=("json", None), headers=None):
        if fmt[0] == "yaml" and yaml is not None:
            self._send(code, yaml.safe_dump(obj, sort_keys=False), "application/yaml", headers)
        else:
            ctype = "application/json"
            if fmt[0] == "table" and obj.get("kind") == "Table":
                ctype = f"application/json;as=Table;v={fmt[1]};g=meta.k8s.io"
            self._send(code, dumps(obj), ctype, headers)

    def _send_error(self, e):
        self._after_fault = None
        st = e.status()
        if getattr(e, "list_meta", None):
            st["metadata"] = e.list_meta
        self._send(e.code, dumps(st), "application/json", e.headers)

    def _reset(self):
        """Close the connection with a TCP RST and no answer."""
        try:
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.connection.close()
        except OSError:
            pass
        self.close_connection = True
        raise Dropped()

    def _serve(self, method):
        # a random (version 4) UUID without a getrandom() call per request
        self._audit_id = str(uuid.UUID(int=random.getrandbits(128), version=4))
        self._warnings = []
        self._cur_ctx = None
        self._after_fault = None
        self._code = 0
        self._body_obj = None
        self._info = None
        self._user = ""
        self._fault = None
        started = time.time()
        url = urllib.parse.urlsplit(self.path)
        path, raw_query = url.path, url.query
        query = {k: v[-1] for k, v in urllib.parse.parse_qs(raw_query, keep_blank_values=True).items()}
        body = b""
        try:
            try:
                body = self._read_body() if method in ("POST", "PUT", "PATCH", "DELETE") else b""
                user, groups = self.api.authenticate(self)
                self._user = user
                self._route(method, path, query, raw_query, body, groups)
            except APIError as e:
                self._send_error(e)
            except Dropped:
                return
            except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
                self.close_connection = True
                return
            except Exception as e:      # a bug in the double: say so, loudly
                traceback.print_exc()
                self._send_error(APIError(500, "InternalError", f"Internal error occurred: fakeapi: {e!r}"))
        finally:
            if self._body_obj is None and body.strip():
                self._body_obj = _best_effort_parse(body)
            info = self._info or {}
            self.api.record({
                "time": started, "method": method, "path": path, "rawQuery": raw_query, "query": query,
                "verb": info.get("verb", ""), "group": info.get("group"), "version": info.get("version"),
                "resource": info.get("resource"), "subresource": info.get("subresource"),
                "namespace": info.get("namespace"), "name": info.get("name"), "user": self._user,
                "code": self._code, "contentType": self.headers.get("Content-Type", ""),
                "accept": self.headers.get("Accept", ""), "userAgent": self.headers.get("User-Agent", ""),
                "body": self._body_obj, "fault": self._fault.id if self._fault else None,
                "warnings": self._warnings + (self._cur_ctx.warnings if self._cur_ctx else [])})

    # ---------------------------------------------------------------- routing
    def _route(self, method, path, query, raw_query, body, groups):
        api, reg = self.api, self.api.registry
        info = request_info(method, path, query)
        self._info = info
        api.authorize(self._user, groups, info, path)
        verb = info["verb"] if info else method.lower()
        fault = api.take_fault(method, verb, path, raw_query, self._user)
        if fault:
            self._fault = fault
            if fault.delay:
                time.sleep(fault.delay)
            if fault.after:
                self._after_fault = fault
            elif fault.action in ("drop", "reset"):
                self._reset()
            elif fault.action == "error":
                raise fault.error()
        if info is None:
            return self._non_resource(method, path, query)
        rt = reg.resource(info["group"], info["version"], info["resource"])
        if rt is None or (info["namespace"] is not None and not rt.namespaced) or \
                (info["subresource"] and info["subresource"] not in rt.subresources):
            return self._send(404, "404 page not found\n", "text/plain; charset=utf-8")
        if rt.namespaced and info["namespace"] is None and (info["name"] or method != "GET"):
            if info["name"]:
                return self._send(404, "404 page not found\n", "text/plain; charset=utf-8")
            raise APIError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")
        if method not in ("GET",) and info["subresource"] == "log":
            raise APIError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")
        self._handle_resource(method, info, rt, query, body)

    def _non_resource(self, method, path, query):
        reg = self.api.registry
        if method != "GET":
            raise APIError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")
        p = path.rstrip("/") or "/"
        if p in ("/healthz", "/livez", "/readyz"):
            return self._send(200, "ok", "text/plain; charset=utf-8")
        if p == "/version":
            return self._send_obj(200, D.K8S_VERSION)
        if p == "/api":
            negotiate(self.headers.get("Accept"), False)
            return self._send_obj(200, D.core_versions(f"127.0.0.1:{self.api.port}"))
        if p == "/apis":
            negotiate(self.headers.get("Accept"), False)
            return self._send_obj(200, D.group_list(reg))
        m = re.match(r"^/apis/([^/]+)$", p)
        if m:
            vs = reg.group_versions().get(m.group(1))
            if vs:
                return self._send_obj(200, dict(D.group_doc(m.group(1), vs), kind="APIGroup", apiVersion="v1"))
        m = re.match(r"^/(?:api/(v1)|apis/([^/]+)/([^/]+))$", p)
        if m:
            group, version = (m.group(2) or ""), (m.group(1) or m.group(3))
            if reg.types_in(group, version):
                return self._send_obj(200, D.resource_list(reg, group, version))
        if p == "/openapi/v3":
            return self._send_obj(200, D.v3_index(reg))
        m = re.match(r"^/openapi/v3/(?:api/(v1)|apis/([^/]+)/([^/]+))$", p)
        if m:
            group, version = (m.group(2) or ""), (m.group(1) or m.group(3))
            if reg.types_in(group, version):
                return self._send_obj(200, D.gv_document(reg, group, version))
        return self._send(404, "404 page not found\n", "text/plain; charset=utf-8")

    # ---------------------------------------------------------------- resources
    def _ctx(self, query, dups=()):
        fv = query.get("fieldValidation", "Warn") or "Warn"
        if fv not in ("Ignore", "Warn", "Strict"):
            raise bad_request(f'fieldValidation: Unsupported value: "{fv}": supported values: '
                              '"Ignore", "Strict", "Warn"')
        dry = query.get("dryRun")
        if dry not in (None, "", "All"):
            raise bad_request(f'dryRun: Unsupported value: "{dry}": supported values: "All"')
        manager = query.get("fieldManager")
        if manager is not None and len(manager) > 128:
            raise bad_request("fieldManager: Too long: may not be more than 128 bytes")
        if not manager:
            ua = self.headers.get("User-Agent", "")
            manager = ua.split("/")[0].strip() if ua else "unknown"
        self._cur_ctx = Ctx(user=self._user, manager=manager, validation=fv, dry_run=dry == "All",
                            duplicates=dups, force=parse_bool(query.get("force", "false"), "force"))
        return self._cur_ctx

    def _parse_body(self, body, ctype, allow_yaml=True):
        ctype = (ctype or "application/json").split(";")[0].strip().lower()
        if ctype == protobuf.CONTENT_TYPE and self._info and self._info["group"] == "":
            v = protobuf.decode(body, self._info["version"], None)
            self._body_obj = v
            return v, []
        if ctype not in ("application/json", "application/yaml", APPLY, MERGE, JSONP, SMP):
            raise APIError(415, "UnsupportedMediaType", "the body of the request was in an unknown format - "
                           "accepted media types include: application/json, application/yaml")
        if not body.strip():
            raise bad_request("the body of the request was empty")
        if ctype in ("application/yaml", APPLY) and allow_yaml:
            if yaml is None:
                raise APIError(415, "UnsupportedMediaType", "YAML bodies need python3-yaml in the double")
            try:
                v = yaml.safe_load(body)
            except yaml.YAMLError as e:
                raise bad_request(f"error converting YAML to JSON: {e}") from None
            self._body_obj = v
            return v, []
        try:
            v, dups = loads_strict(body)
        except (ValueError, UnicodeDecodeError) as e:
            raise bad_request(f"json parse error: {e}") from None
        self._body_obj = v
        return v, dups

    def _handle_resource(self, method, info, rt, query, body):
        reg = self.api.registry
        ns, name, sub, version, verb = info["namespace"], info["name"], info["subresource"], info["version"], info["verb"]
        fmt = negotiate(self.headers.get("Accept"), method == "GET")
        now = reg.now()
        if verb == "watch":
            return self._watch(rt, version, ns, name, query, fmt)
        if verb == "get" and sub == "log":
            return self._pod_log(ns, name, query)
        if verb == "get":
            o = reg.get(rt, version, ns, name, query.get("resourceVersion", ""))
            if fmt[0] == "table":
                return self._send_obj(200, D.table(rt, version, [o], query.get("includeObject", "Metadata"),
                                                   {"resourceVersion": o["metadata"].get("resourceVersion", "")},
                                                   now, fmt[1]), fmt)
            if fmt[0] == "partial":
                return self._send_obj(200, D.partial_metadata(o, fmt[1]))
            return self._send_obj(200, o, fmt)
        if verb == "list":
            limit = _int_param(query, "limit", 0)
            items, rv, cont, remaining = reg.list(
                rt, version, ns, query.get("labelSelector", ""), query.get("fieldSelector", ""), limit,
                query.get("continue", ""), query.get("resourceVersion", ""), query.get("resourceVersionMatch", ""))
            lm = {"resourceVersion": rv}
            if cont:
                lm["continue"] = cont
            if remaining is not None:
                lm["remainingItemCount"] = remaining
            if fmt[0] == "table":
                return self._send_obj(200, D.table(rt, version, items, query.get("includeObject", "Metadata"),
                                                   lm, now, fmt[1], parse_bool(query.get("noHeaders", "false"), "noHeaders")), fmt)
            if fmt[0] == "partial":
                return self._send_obj(200, {"kind": "PartialObjectMetadataList", "apiVersion": f"meta.k8s.io/{fmt[1]}",
                                            "metadata": lm, "items": [D.partial_metadata(o, fmt[1]) for o in items]})
            if not isinstance(rt, CustomResources):
                items = [{k: v for k, v in o.items() if k not in ("apiVersion", "kind")} for o in items]
            return self._send_obj(200, {"kind": rt.list_kind, "apiVersion": rt.api_version(version),
                                        "metadata": lm, "items": items}, fmt)
        if sub == "binding" and verb != "create":
            raise APIError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")
        if verb == "create" and sub == "binding":     # what the scheduler posts
            obj, _ = self._parse_body(body, self.headers.get("Content-Type"))
            code, out = reg.bind_pod(rt, ns, name, obj)
            return self._send_obj(code, out, fmt)
        if verb == "create":
            obj, dups = self._parse_body(body, self.headers.get("Content-Type"))
            ctx = self._ctx(query, dups)
            code, out = reg.create(rt, version, ns, obj, ctx)
            return self._send_obj(code, out, fmt)
        if verb == "update":
            obj, dups = self._parse_body(body, self.headers.get("Content-Type"))
            ctx = self._ctx(query, dups)
            code, out = reg.update(rt, version, ns, name, obj, ctx, sub)
            return self._send_obj(code, out, fmt)
        if verb == "patch":
            ptype = (self.headers.get("Content-Type") or "").split(";")[0].strip().lower()
            if ptype not in (MERGE, JSONP, SMP, APPLY):
                accepted = [JSONP, MERGE, APPLY] + ([SMP] if rt.smp else [])
                raise APIError(415, "UnsupportedMediaType", "the body of the request was in an unknown format - "
                               "accepted media types include: " + ", ".join(accepted))
            if ptype == SMP and rt.smp is None:
                raise APIError(415, "UnsupportedMediaType", "the body of the request was in an unknown format - "
                               f"accepted media types include: {JSONP}, {MERGE}, {APPLY}")
            if query.get("force") and ptype != APPLY:
                raise bad_request("force: Forbidden: may not be specified for non-apply patch")
            parsed, dups = self._parse_body(body, ptype)
            ctx = self._ctx(query, dups)
            if ptype == APPLY and not query.get("fieldManager"):
                ctx.manager = None
            code, out = reg.patch(rt, version, ns, name, ptype, body, ctx, sub, parsed)
            return self._send_obj(code, out, fmt)
        if verb in ("delete", "deletecollection"):
            opts = {}
            if body.strip():
                opts, _ = self._parse_body(body, self.headers.get("Content-Type"))
                if not isinstance(opts, dict):
                    raise bad_request("DeleteOptions must be an object")
            for k in ("propagationPolicy",):
                if k in query:
                    opts[k] = query[k]
            if "gracePeriodSeconds" in query:
                opts["gracePeriodSeconds"] = _int_param(query, "gracePeriodSeconds", 0)
            if "orphanDependents" in query:
                opts["orphanDependents"] = parse_bool(query["orphanDependents"], "orphanDependents")
            if opts.get("dryRun"):
                query = dict(query, dryRun="All")
            ctx = self._ctx(query)
            if verb == "delete":
                code, out = reg.delete(rt, version, ns, name, opts, ctx)
            else:
                code, out = reg.delete_collection(rt, version, ns, query.get("labelSelector", ""),
                                                  query.get("fieldSelector", ""), opts, ctx)
            return self._send_obj(code, out, fmt)
        raise APIError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")

    def _pod_log(self, ns, name, query):
        reg = self.api.registry
        pod = reg.get(reg.builtin[("", "pods")], "v1", ns, name)
        names = [c["name"] for c in (pod.get("spec") or {}).get("containers") or []] + \
            [c["name"] for c in (pod.get("spec") or {}).get("ephemeralContainers") or []]
        c = query.get("container")
        if not c:
            if len(pod["spec"].get("containers") or []) != 1:
                raise bad_request(f"a container name must be specified for pod {name}, choose one of: [{' '.join(names)}]")
            c = names[0]
        if c not in names:
            raise bad_request(f"container {c} is not valid for pod {name}")
        return self._send(200, reg.pod_logs.get((ns, name, c), ""), "text/plain")

    # ---------------------------------------------------------------- watch
    def _write_chunk(self, data):
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

    def _client_gone(self):
        try:
            r, _, _ = select.select([self.connection], [], [], 0)
            if not r:
                return False
            if isinstance(self.connection, ssl.SSLSocket) and self.connection.pending():
                return False
            self.connection.settimeout(0.2)
            try:
                data = self.connection.recv(1)
            finally:
                self.connection.settimeout(None)
            return not data
        except (ssl.SSLWantReadError, socket.timeout):
            return False
        except (OSError, ValueError):
            return True

    def _watch(self, rt, version, ns, name, query, fmt):
        api, reg = self.api, self.api.registry
        store = reg.store
        fsel = query.get("fieldSelector", "")
        if name:        # a watch on one object is a watch on a field selector
            fsel = f"metadata.name={name}" + ("," + fsel if fsel else "")
        ls, fs = reg.selectors(rt, query.get("labelSelector", ""), fsel)
        rv = query.get("resourceVersion", "") or ""
        rv_match = query.get("resourceVersionMatch", "")
        bookmarks = parse_bool(query.get("allowWatchBookmarks", "false"), "allowWatchBookmarks")
        send_initial = query.get("sendInitialEvents")
        send_initial = None if send_initial is None else parse_bool(send_initial, "sendInitialEvents")
        if send_initial is not None:
            errs = []
            if rv_match != "NotOlderThan":
                errs.append(forbidden_field("resourceVersionMatch", "sendInitialEvents requires setting "
                                            "resourceVersionMatch to NotOlderThan"))
            if send_initial and not bookmarks:
                errs.append(forbidden_field("allowWatchBookmarks", "sendInitialEvents requires setting "
                                            "allowWatchBookmarks to true"))
            if errs:
                raise invalid_object("ListOptions", "meta.k8s.io", "", errs)
        elif rv_match:
            raise invalid_object("ListOptions", "meta.k8s.io", "", [forbidden_field(
                "resourceVersionMatch", "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided")])
        if _int_param(query, "timeoutSeconds", 0) > 0:
            timeout = _int_param(query, "timeoutSeconds", 0)
        elif api.watch_timeout is not None:      # 0 or absent: the server's own limit
            timeout = api.watch_timeout
        else:
            timeout = random.uniform(1800, 3600)     # as the API server's --min-request-timeout does
        nsk = ns if (rt.namespaced and ns) else None
        skey = rt.storage_key
        initial, error, future = [], None, 0
        if rv not in ("", "0"):
            future = parse_rv(rv)
        replay_state = send_initial or (send_initial is None and rv in ("", "0"))
        with store.lock:
            if not send_initial and rv not in ("", "0") and future < store.compacted:
                error = expired(f"too old resource version: {future} ({store.compacted + 1})")
        info = WatchInfo(self._user, self.path, query, rt.gr, bookmarks)
        self.send_response(200)
        ctype = "application/json"
        if fmt[0] == "table":
            ctype = f"application/json;as=Table;v={fmt[1]};g=meta.k8s.io"
        self.send_header("Content-Type", ctype)
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Audit-Id", self._audit_id)
        self.send_header("Cache-Control", "no-cache, private")
        self.end_headers()
        self._code = 200
        with api.lock:
            api.watches[info.id] = info

        def emit(type_, o):
            if type_ in ("BOOKMARK", "ERROR"):
                obj = o
            elif fmt[0] == "table":
                obj = D.table(rt, version, [rt.from_storage(o, version)], query.get("includeObject", "Metadata"),
                              {"resourceVersion": o["metadata"].get("resourceVersion", "")}, reg.now(), fmt[1])
            elif fmt[0] == "partial":
                obj = D.partial_metadata(rt.from_storage(o, version), fmt[1])
            else:
                obj = rt.view(o, version)
            self._write_chunk((dumps({"type": type_, "object": obj}) + "\n").encode())
            info.events_sent += 1

        def bookmark(at_rv, initial_end=False):
            md = {"resourceVersion": str(at_rv)}
            if initial_end:
                md["annotations"] = {"k8s.io/initial-events-end": "true"}
            if fmt[0] == "table":
                obj = {"kind": "Table", "apiVersion": f"meta.k8s.io/{fmt[1]}", "metadata": md,
                       "columnDefinitions": None, "rows": None}
            elif fmt[0] == "partial":
                obj = {"kind": "PartialObjectMetadata", "apiVersion": f"meta.k8s.io/{fmt[1]}", "metadata": md}
            else:
                obj = {"kind": rt.kind, "apiVersion": rt.api_version(version), "metadata": md}
            emit("BOOKMARK", obj)

        end, cut = "close", False
        try:
            if error is not None:
                emit("ERROR", error.status())
                return
            # a resourceVersion the server has not reached yet: wait a little, then say so in
            # the stream, as the watch cache does
            with store.changed:
                deadline = time.monotonic() + reg.rv_wait
                while store.rv < future and time.monotonic() < deadline:
                    store.changed.wait(max(0.01, deadline - time.monotonic()))
                if store.rv < future:
                    error = too_large_rv(future, store.rv)
                elif replay_state:
                    start = store.rv
                    initial = [o for o in store.list(skey, nsk) if reg.matches(rt, o, ls, fs)]
                else:
                    start = future or store.rv
            if error is not None:
                emit("ERROR", error.status())
                return
            for o in initial:
                emit("ADDED", o)
            if send_initial:
                bookmark(start, initial_end=True)
            pos = start
            deadline = time.monotonic() + timeout
            next_bm = time.monotonic() + api.bookmark_interval
            epoch, bm_epoch = store.cut_epoch, store.bookmark_epoch
            while True:
                evs, head, gone, want_bm, done = None, pos, False, False, False
                with store.changed:
                    while True:
                        if info.cut or store.cut_epoch != epoch:
                            end = info.cut or store.cut_mode
                            done = cut = True
                            break
                        if pos < store.compacted:
                            gone = True
                            break
                        if store.rv > pos:
                            break
                        t = time.monotonic()
                        if t >= deadline:
                            done = True
                            break
                        if bookmarks and (t >= next_bm or store.bookmark_epoch != bm_epoch):
                            want_bm = True
                            break
                        if self._client_gone():
                            end = "gone"
                            done = True
                            break
                        store.changed.wait(max(0.01, min(deadline - t, 1.0, (next_bm - t) if bookmarks else 1.0)))
                    if not done and not gone:
                        head = store.rv
                        evs = store.events_after(pos)
                    compacted = store.compacted
                    bm_epoch = store.bookmark_epoch
                if gone:
                    emit("ERROR", expired(f"too old resource version: {pos} ({compacted + 1})").status())
                    return
                if done:
                    if end == "close" and bookmarks and not cut:
                        bookmark(pos)          # the last word of a watch that timed out
                    return
                for ev in evs or ():
                    if ev.skey != skey or (nsk is not None and ev.ns != nsk):
                        continue
                    new_ok = ev.type != "DELETED" and reg.matches(rt, ev.obj, ls, fs)
                    old_ok = ev.prev is not None and reg.matches(rt, ev.prev, ls, fs)
                    if ev.type == "ADDED" and new_ok:
                        emit("ADDED", ev.obj)
                    elif ev.type == "MODIFIED":
                        if new_ok and old_ok:
                            emit("MODIFIED", ev.obj)
                        elif new_ok:
                            emit("ADDED", ev.obj)
                        elif old_ok:
                            emit("DELETED", ev.obj)
                    elif ev.type == "DELETED" and old_ok:
                        emit("DELETED", ev.obj)
                pos = max(pos, head)
                if want_bm or (bookmarks and time.monotonic() >= next_bm):
                    bookmark(pos)
                    next_bm = time.monotonic() + api.bookmark_interval
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError, OSError):
            end = "gone"
        finally:
            with api.lock:
                api.watches.pop(info.id, None)
            if end == "reset":
                self._reset_quiet()
            elif end == "gone":
                self.close_connection = True
            else:
                try:
                    self.wfile.write(b"0\r\n\r\n")
                except OSError:
                    pass
                if cut:     # as when the API server goes away: the connection goes too
                    self.close_connection = True

    def _reset_quiet(self):
        try:
            self._reset()
        except Dropped:
            pass


def request_info(method, path, query):
    """Parse a resource path the way the API server does; None for a non-resource path."""
    parts = [urllib.parse.unquote(p) for p in path.split("/") if p]
    if len(parts) < 3 or parts[0] not in ("api", "apis"):
        return None
    if parts[0] == "api":
        group, version, rest = "", parts[1], parts[2:]
    else:
        if len(parts) < 4:
            return None
        group, version, rest = parts[1], parts[2], parts[3:]
    watch_prefix = False
    if rest and rest[0] == "watch":
        watch_prefix = True
        rest = rest[1:]
    namespace = None
    if rest and rest[0] == "namespaces" and len(rest) > 2 and rest[2] not in NAMESPACE_SUBRESOURCES:
        namespace = rest[1]
        rest = rest[2:]
    # else /namespaces or /namespaces/NAME[/status|/finalize]: the namespace object itself
    if not rest or len(rest) > 3:
        return None
    resource = rest[0]
    name = rest[1] if len(rest) > 1 else None
    sub = rest[2] if len(rest) > 2 else None
    watch = watch_prefix or parse_bool(query.get("watch", "false"), "watch")
    if method == "GET":
        verb = "watch" if watch else ("get" if name else "list")
    elif method == "POST":
        verb = "create"
        if name and not (resource == "pods" and sub == "binding"):
            raise APIError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")
    elif method == "PUT":
        verb = "update"
    elif method == "PATCH":
        verb = "patch"
    elif method == "DELETE":
        verb = "delete" if name else "deletecollection"
    else:
        raise APIError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")
    if method in ("PUT", "PATCH") and not name:
        raise APIError(405, "MethodNotAllowed", "the server does not allow this method on the requested resource")
    return {"group": group, "version": version, "namespace": namespace, "resource": resource,
            "name": name, "subresource": sub, "verb": verb}


def _best_effort_parse(body):
    """The request body for the log, when the request never got as far as parsing it."""
    try:
        return json.loads(body)
    except ValueError:
        pass
    if yaml is not None:
        try:
            return yaml.safe_load(body)
        except yaml.YAMLError:
            pass
    return body.decode("utf-8", "replace")


def _int_param(query, key, default):
    v = query.get(key)
    if v in (None, ""):
        return default
    try:
        n = int(v)
    except ValueError:
        raise bad_request(f'{key}: Invalid value: "{v}": must be an integer') from None
    if n < 0:
        raise bad_request(f"{key}: Invalid value: {n}: must be greater than or equal to 0")
    return n

