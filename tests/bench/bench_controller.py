#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""aiprof-controller at scale against the Kubernetes API double (tests/kubeapi):

  1. 10,000 running pods exist before the controller starts; its resident memory once both
     caches are synced (target: <= 15 MB);
  2. 1,000 ProfilingSessions are created at once (8 client threads), each targeting its own
     pod; the time from the first create until every one has its injector pod, as the API
     server's own list shows (target: <= 10 s).

    BUILD=build /usr/bin/python3 tests/bench/bench_controller.py [--pods N] [--sessions N]

Prints one line per measurement and exits 1 when a target is missed."""
import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("BUILD", "build")
sys.path.insert(0, os.path.join(ROOT, "tests", "kubeapi"))
from fakeapi.client import Control, Kube, launch  # noqa: E402
import harness  # noqa: E402

NS = "bench"


def rss_kb(pid, field="VmRSS"):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def cpu_s(pid):
    """User + system CPU seconds the process has used."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def http_get(port, path):
    return harness.http_get(port, path, timeout=10)[1]


def metric(port, name):
    m = re.search(r"^" + re.escape(name) + r" (\S+)$", http_get(port, "/metrics"), re.M)
    return float(m.group(1)) if m else None


def pod_manifest(path, n, targets=None):
    """n pods in a List (the double's --apply creates them at start). The first `targets` are
    bound to a node (the double's stand-in kubelet runs them: they get container IDs), the
    others wait unscheduled (running 10,000 pods in the double takes it minutes)."""
    targets = n if targets is None else targets
    with open(path, "w") as f:
        f.write('{"apiVersion":"v1","kind":"List","items":[\n')
        for i in range(n):
            pod = {"apiVersion": "v1", "kind": "Pod",
                   "metadata": {"name": f"worker-{i}", "namespace": NS,
                                "labels": {"app": "trainer", "job": f"job-{i // 8}",
                                           "rank": str(i % 8),
                                           "role": "target" if i < targets else "filler"},
                                "annotations": {"team": "ml-platform", "note": "x" * 64}},
                   "spec": {"containers": [
                       {"name": "trainer", "image": "pytorch/pytorch:2.3.0",
                        "command": ["python", "train.py", "--rank", str(i % 8)],
                        "env": [{"name": "MASTER_ADDR", "value": "job-0"}],
                        "resources": {"limits": {"nvidia.com/gpu": "8"}}},
                       {"name": "sidecar", "image": "fluent-bit:2"}]}}
            if i < targets:
                pod["spec"]["nodeName"] = f"node-{i % 250}"
            f.write(json.dumps(pod) + ("," if i + 1 < n else "") + "\n")
        f.write("]}\n")


def run_all(threads):
    """Start the threads, wait for them all; the seconds it took."""
    t = time.monotonic()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return time.monotonic() - t


def raw_write_rate(ep, n):
    """The double's own write rate: n small pods created in a namespace of their own by 8
    threads, each with one keep-alive connection (no controller involved)."""
    kube = Kube(ep["server"], ep["ca"], ep["token"])
    r = kube.post("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "raw"}})
    assert r.status == 201, r
    bad = []

    def run(idx):
        k = Kube(ep["server"], ep["ca"], ep["token"], keep_alive=True)
        for i in idx:
            r = k.post("/api/v1/namespaces/raw/pods", {
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": f"raw-{i}", "labels": {"aiprof.io/raw": "1"}},
                "spec": {"containers": [{"name": "c", "image": "aiprof/aiprof:bench",
                                         "command": ["aiprof", "profile", "--duration", "60s"]}]}})
            if r.status != 201:
                bad.append(r)
        k.close()
    dt = run_all([threading.Thread(target=run, args=(range(i, n, 8),)) for i in range(8)])
    if bad:
        raise SystemExit(f"raw writes: {len(bad)} failed: {bad[:2]}")
    return n / dt


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pods", type=int, default=10000)
    ap.add_argument("--sessions", type=int, default=1000)
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--raw-writes", type=int, default=2000, help="pod creates for the double's raw rate")
    ap.add_argument("--api-profile", metavar="FILE", help="cProfile the API double; pstats in FILE")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="aiprof-bench-ctl-")
    manifest = os.path.join(tmp, "pods.json")
    pod_manifest(manifest, a.pods, a.sessions)
    t = time.monotonic()
    api, ep = launch(os.path.join(tmp, "api"), "--apply", os.path.join(ROOT, "crds", "profilingsession.yaml"),
                     "--create-namespace", NS, "--apply", manifest, "--auto-run",
                     *(["--profile", os.path.abspath(a.api_profile)] if a.api_profile else []), timeout=600)
    ctl, ctlproc = Control(ep["control"]), None
    try:
        print(f"setup: {a.pods} pods in the API double in {time.monotonic() - t:.1f}s")
        kube = Kube(ep["server"], ep["ca"], ep["token"])
        # once the stand-in kubelet has started every target, injectors stay unstarted
        t = time.monotonic()
        while kube.get(f"/api/v1/namespaces/{NS}/pods", query={
                "labelSelector": "role=target", "fieldSelector": "status.phase!=Running",
                "limit": "1"}).json["items"]:
            if time.monotonic() - t > 600:
                raise SystemExit("the targets did not start")
            time.sleep(0.5)
        ctl.settings(autoRun=False)
        print(f"setup: {a.sessions} target pods running after {time.monotonic() - t:.1f}s more")
        log = open(os.path.join(tmp, "controller.log"), "w")
        ctlproc = subprocess.Popen(
            [os.path.join(ROOT, BUILD, "aiprof-controller"), "--kubeconfig", ep["kubeconfig"],
             # the API double serves no TokenReview: the metrics unauthenticated, on loopback
             "--metrics-addr", "127.0.0.1:0", "--http-auth=none", "--workers", str(a.workers),
             "--no-leader-elect", "--allow-inline-s3",      # the sessions below give output.s3
             "--injector-image", "aiprof/aiprof:bench"],
            stdout=log, stderr=subprocess.STDOUT,
            # GnuTLS comes in through libcurl's RTMP support and is never used: no implicit init
            env=dict(os.environ, GNUTLS_NO_IMPLICIT_INIT="1"))
        port = None
        t = time.monotonic()
        while port is None and time.monotonic() - t < 30:
            time.sleep(0.05)
            with open(log.name) as f:
                m = re.search(r"\(port (\d+)\)", f.read())
            port = int(m.group(1)) if m else None
        # -q hides the port line: fall back to the metrics port from /proc
        if port is None:
            out = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True).stdout
            m = re.search(r"127\.0\.0\.1:(\d+).*pid=%d," % ctlproc.pid, out)
            port = int(m.group(1))
        t = time.monotonic()
        while metric(port, 'aiprof_cached_objects{resource="pods"}') != a.pods:
            if time.monotonic() - t > 120:
                raise SystemExit("the pod cache did not fill")
            time.sleep(0.1)
        sync_s = time.monotonic() - t
        time.sleep(1.0)
        rss = rss_kb(ctlproc.pid)
        print(f"cache: {a.pods} pods listed and cached in {sync_s:.2f}s; controller RSS "
              f"{rss / 1024:.1f} MB (target <= 15 MB)")

        names = [f"bench-{i}" for i in range(a.sessions)]
        errors = []

        def create(chunk):
            k = Kube(ep["server"], ep["ca"], ep["token"], keep_alive=True)
            for n in chunk:
                i = int(n.split("-")[1])
                body = {"apiVersion": "aiprof.io/v1alpha1", "kind": "ProfilingSession",
                        "metadata": {"name": n},
                        "spec": {"targets": {"podName": f"worker-{i}"},
                                 "duration": "60s",
                                 "output": {"s3": {"bucket": "profiles", "prefix": "bench",
                                                   "secretRef": {"name": "s3-creds"}}}}}
                r = k.post(f"/apis/aiprof.io/v1alpha1/namespaces/{NS}/profilingsessions", body)
                if r.status != 201:
                    errors.append(r)
            k.close()
        threads = [threading.Thread(target=create, args=(names[i::8],)) for i in range(8)]
        seq0 = ctl.call("GET", "/requests", since=10**12)["last"]
        cpu0, api_cpu0 = cpu_s(ctlproc.pid), cpu_s(api.pid)
        t0 = time.monotonic()
        created = run_all(threads)
        if errors:
            raise SystemExit(f"{len(errors)} creates failed: {errors[:3]}")
        while metric(port, "aiprof_injectors_created_total") < a.sessions:
            if time.monotonic() - t0 > 400:
                break
            time.sleep(0.05)
        all_s = time.monotonic() - t0
        cpu, api_cpu = cpu_s(ctlproc.pid) - cpu0, cpu_s(api.pid) - api_cpu0
        pods = kube.get(f"/api/v1/namespaces/{NS}/pods",
                        query={"labelSelector": "aiprof.io/session-uid"}).json["items"]
        sessions = {p["metadata"]["labels"]["aiprof.io/session"] for p in pods}
        peak = rss_kb(ctlproc.pid, "VmHWM")
        rss2 = rss_kb(ctlproc.pid)
        print(f"sessions: {a.sessions} created in {created:.2f}s; every one had its injector pod "
              f"{all_s:.2f}s after the first create (target <= 10 s); API list: {len(pods)} "
              f"injector pods for {len(sessions)} sessions")
        print(f"memory: RSS {rss2 / 1024:.1f} MB with {a.pods + len(pods)} pods and {a.sessions} "
              f"sessions cached, peak {peak / 1024:.1f} MB")
        print(f"controller: {metric(port, 'aiprof_reconciles_total'):.0f} reconciles, "
              f"{metric(port, 'aiprof_status_writes_total'):.0f} status writes, "
              f"{metric(port, 'aiprof_conflicts_total'):.0f} conflicts, "
              f"{metric(port, 'aiprof_reconcile_errors_total'):.0f} errors; {cpu:.2f} s of CPU "
              f"for the {a.sessions} sessions (the API double: {api_cpu:.2f} s)")
        writes = {}
        for r in ctl.requests(since=seq0):
            if r["userAgent"].startswith("aiprof-controller") and r["method"] != "GET":
                what = r["resource"] + ("/" + r["subresource"] if r["subresource"] else "")
                writes[f"{r['method']} {what}"] = writes.get(f"{r['method']} {what}", 0) + 1
        n_writes = sum(writes.values())
        raw = raw_write_rate(ep, a.raw_writes)
        print(f"api: the controller sent {n_writes} writes ({', '.join(f'{v} {k}' for k, v in sorted(writes.items()))})")
        print(f"api: raw write rate of the double, same run: {raw:.0f} pod creates/s from 8 keep-alive "
              f"clients -> {n_writes} writes need {n_writes / raw:.1f} s at best; the controller took "
              f"{all_s:.2f} s ({all_s / (n_writes / raw):.2f}x that floor)")
        ok = len(pods) == a.sessions and len(sessions) == a.sessions and all_s <= 10 and rss <= 15 * 1024
        print("bench_controller: " + ("targets met" if ok else "TARGET MISSED"))
        return 0 if ok else 1
    finally:
        try:
            if ctlproc and ctlproc.poll() is None:
                os.kill(ctlproc.pid, signal.SIGTERM)
                try:
                    ctlproc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    print("bench_controller: the controller did not stop within 20 s of SIGTERM")
                    os.kill(ctlproc.pid, signal.SIGKILL)
                    ctlproc.wait()
        finally:
            if a.api_profile:           # the double writes its profile when it stops
                os.kill(api.pid, signal.SIGTERM)
                try:
                    api.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    pass
            if api.poll() is None:
                os.kill(api.pid, signal.SIGKILL)
            api.wait()


if __name__ == "__main__":
    sys.exit(main())
