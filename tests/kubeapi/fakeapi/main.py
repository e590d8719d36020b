# SPDX-License-Identifier: MIT
"""Command line: start the double, preload manifests, print one ready line, run until killed."""
import argparse
import os
import signal
import sys
import threading

from .registry import Ctx
from .server import FakeAPIServer
from .util import APIError

try:
    import yaml
except ImportError:
    yaml = None


def preload(server, path):
    """Create every object of a (multi-document) YAML or JSON manifest through the API's own
    create path, as kubectl create would."""
    if yaml is None:
        raise SystemExit("fakeapi: --apply needs python3-yaml (scripts/install-deps.sh)")
    reg = server.registry
    with open(path) as f:
        docs = [d for d in yaml.safe_load_all(f) if d]
    for d in docs:
        items = d.get("items", []) if d.get("kind", "").endswith("List") else [d]
        for o in items:
            av, kind = o.get("apiVersion", ""), o.get("kind", "")
            group, _, version = av.rpartition("/")
            rt = next((t for t in reg.all_types() if t.group == group and t.kind == kind and version in t.versions), None)
            if rt is None:
                raise SystemExit(f"fakeapi: {path}: no resource serves {av} {kind}")
            ns = (o.get("metadata") or {}).get("namespace") or server.namespace
            try:
                reg.create(rt, version, ns if rt.namespaced else None, o, Ctx(manager="fakeapi-preload"))
            except APIError as e:
                raise SystemExit(f"fakeapi: {path}: {e.message}")


def main(argv=None):
    ap = argparse.ArgumentParser(prog="fakeapi", description="A test double of the Kubernetes API server "
                                 "(HTTPS on 127.0.0.1, bearer token, a control API for tests).")
    ap.add_argument("--dir", required=True, help="where ca.crt, kubeconfig, token, serviceaccount/ and endpoints.json go")
    ap.add_argument("--port", type=int, default=int(os.environ.get("FAKEAPI_PORT", 0)), help="HTTPS port (0: any)")
    ap.add_argument("--control-port", type=int, default=int(os.environ.get("FAKEAPI_CONTROL_PORT", 0)),
                    help="control API port (0: any)")
    ap.add_argument("--token", default=os.environ.get("FAKEAPI_TOKEN"), help="admin bearer token (default: random)")
    ap.add_argument("--namespace", default="default", help="namespace of the kubeconfig contexts")
    ap.add_argument("--create-namespace", action="append", default=[], metavar="NS", help="create a namespace at start")
    ap.add_argument("--apply", action="append", default=[], metavar="FILE",
                    help="create the objects in a YAML manifest at start (CRDs, namespaces, pods, ...)")
    ap.add_argument("--bookmark-interval", type=float, default=60.0, help="seconds between watch bookmarks")
    ap.add_argument("--history-limit", type=int, default=2000, help="watch history kept, in events")
    ap.add_argument("--watch-timeout", type=float, default=None,
                    help="end watches without timeoutSeconds after this many seconds (default 30-60 min)")
    ap.add_argument("--pod-graceful-delete", action="store_true",
                    help="pods bound to a node wait for the kubelet (control /kubelet/confirm-delete) when deleted")
    ap.add_argument("--auto-run", action="store_true", help="the stand-in kubelet starts pods bound to a node")
    ap.add_argument("--no-gc", action="store_true", help="no garbage collection of dependents")
    ap.add_argument("--anonymous", action="store_true", help="requests without credentials are system:anonymous "
                    "(403) instead of 401")
    ap.add_argument("--sa-namespace", default="aiprof-system")
    ap.add_argument("--sa-name", default="aiprof-controller")
    ap.add_argument("--rv-wait", type=float, default=3.0,
                    help="how long a request for a future resourceVersion waits before 504")
    ap.add_argument("--log", metavar="FILE", help="append one line per request")
    ap.add_argument("--profile", metavar="FILE", help="cProfile the serving threads; pstats written to FILE "
                    "at SIGTERM")
    a = ap.parse_args(argv)
    log = open(a.log, "a") if a.log else None
    server = FakeAPIServer(a.dir, a.port, a.control_port, a.token, a.bookmark_interval, a.history_limit,
                           a.pod_graceful_delete, not a.no_gc, a.anonymous, a.auto_run, a.namespace,
                           a.sa_namespace, a.sa_name, a.rv_wait, a.watch_timeout, log, a.profile)
    server.start()
    for ns in a.create_namespace:
        try:
            server.registry.create(server.registry.builtin[("", "namespaces")], "v1", None,
                                   {"metadata": {"name": ns}}, Ctx(manager="fakeapi-preload"))
        except APIError as e:
            if e.code != 409:
                raise SystemExit(f"fakeapi: namespace {ns}: {e.message}")
    for path in a.apply:
        preload(server, path)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    print(f"ready {server.url} control={server.control_url} kubeconfig={server.kubeconfig}", flush=True)
    while not stop.wait(3600):
        pass
    server.stop()
    sys.exit(0)
