# SPDX-License-Identifier: MIT
"""A kubelet played by the test, through the REAL API server (a double of the kubelet only).

The controller's tests need pods in states a real kubelet reaches only by running real
workloads: an injector container that ended with a given termination message, an ephemeral
container that started. Pods bound to a Node object that no kubelet serves ("played nodes")
stay as the API server keeps them, and the test writes their status through `pods/status` as
the kubelet's status manager does (the same calls, the same validation, the same watch events
the controller sees). Everything else — admission, validation, RBAC, watches, garbage
collection, graceful deletion — is the real API server's.

PlayedControl offers the part of the API double's control API (tests/kubeapi/fakeapi/client.py
`Control`) that a real server can back: `kubelet(...)` and `requests(...)` (from the API
server's audit log). Faults, compaction, cut watches and token rotation stay with the double."""
import json
import os
import threading
import time
import uuid

KERNEL = os.uname().release


def now():
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class PlayedControl:
    def __init__(self, cluster, kube):
        self.cluster, self.kube = cluster, kube
        self.since = cluster.audit_offset()
        self.nodes = set()

    # ------------------------------------------------------------------ nodes

    def node(self, name, kernel=KERNEL, labels=None):
        """A Node object no kubelet serves, Ready, reporting `kernel`."""
        if name not in self.nodes:
            body = {"apiVersion": "v1", "kind": "Node",
                    "metadata": {"name": name, "labels": dict(labels or {}, **{"kubernetes.io/hostname": name})}}
            r = self.kube.post("/api/v1/nodes", body)
            assert r.status in (201, 409), r
            self.nodes.add(name)
        info = {"kernelVersion": kernel, "architecture": "amd64", "operatingSystem": "linux",
                "containerRuntimeVersion": "containerd://1.6.20", "kubeletVersion": "v1.32.13",
                "kubeProxyVersion": "", "osImage": "Debian GNU/Linux 12 (played)", "bootID": "", "machineID": "",
                "systemUUID": ""}
        r = self.kube.patch(f"/api/v1/nodes/{name}/status", {"status": {
            "nodeInfo": info, "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                              "message": "played by the test", "lastHeartbeatTime": now(),
                                              "lastTransitionTime": now()}]}})
        assert r.status == 200, r

    def cordon(self, node, on=True):
        """Marks a (real) node unschedulable, or schedulable again: while the controller's
        tests run, the pods it leaves to the scheduler (merge pods) stay Pending for the
        played kubelet instead of going to the real node's kubelet."""
        r = self.kube.patch(f"/api/v1/nodes/{node}", {"spec": {"unschedulable": True if on else None}})
        assert r.status == 200, r

    # ------------------------------------------------------------------ the kubelet's part

    def _pod(self, ns, name):
        r = self.kube.get(f"/api/v1/namespaces/{ns}/pods/{name}")
        if r.status != 200:
            raise RuntimeError(f"played kubelet: pod {ns}/{name}: {r.status} {r.raw[:300]!r}")
        return r.json

    def _status(self, ns, name, status):
        r = self.kube.patch(f"/api/v1/namespaces/{ns}/pods/{name}/status", {"status": status},
                            patch_type="application/strategic-merge-patch+json")
        if r.status != 200:
            raise RuntimeError(f"played kubelet: status of {ns}/{name}: {r.status} {r.raw[:500]!r}")
        return r.json

    def kubelet(self, action, namespace, name, **kw):
        """The actions of the double's Control.kubelet: status, run, terminate, ephemeral-run,
        confirm-delete."""
        ns = namespace
        if action == "status":
            return self._status(ns, name, kw.get("status") or {})
        pod = self._pod(ns, name)
        spec, st = pod["spec"], pod.get("status") or {}
        t = now()
        if action == "run":
            ip = kw.get("podIP") or f"10.244.0.{abs(hash((ns, name))) % 250 + 2}"
            statuses = [{"name": c["name"], "ready": True, "restartCount": 0, "started": True,
                         "image": c.get("image", ""), "imageID": "", "containerID": f"containerd://{uuid.uuid4().hex}",
                         "state": {"running": {"startedAt": t}}} for c in spec.get("containers") or []]
            conds = [{"type": c, "status": "True", "lastProbeTime": None, "lastTransitionTime": t}
                     for c in ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled")]
            return self._status(ns, name, {"phase": "Running", "conditions": conds, "hostIP": "10.0.0.1",
                                           "podIP": ip, "podIPs": [{"ip": ip}], "startTime": t,
                                           "containerStatuses": statuses})
        if action == "ephemeral-run":
            c = kw["container"]
            decl = {e["name"]: e for e in spec.get("ephemeralContainers") or []}
            if c not in decl:
                raise RuntimeError(f"played kubelet: no ephemeral container {c} in {ns}/{name}")
            statuses = [s for s in st.get("ephemeralContainerStatuses") or [] if s["name"] != c]
            statuses.append({"name": c, "image": decl[c].get("image", ""), "imageID": "", "restartCount": 0,
                             "ready": False, "started": True, "containerID": f"containerd://{uuid.uuid4().hex}",
                             "state": {"running": {"startedAt": t}}})
            return self._status(ns, name, {"ephemeralContainerStatuses": statuses})
        if action == "terminate":
            ephemeral = kw.get("ephemeral", False)
            field = "ephemeralContainerStatuses" if ephemeral else "containerStatuses"
            decl = spec.get("ephemeralContainers" if ephemeral else "containers") or []
            names = [c["name"] for c in decl]
            c = kw.get("container") or (names[0] if names else None)
            if c not in names:
                raise RuntimeError(f"played kubelet: no container {c} in {ns}/{name}")
            code = int(kw.get("exitCode", 0))
            statuses = [dict(s) for s in st.get(field) or []]
            cs = next((s for s in statuses if s["name"] == c), None)
            if cs is None:
                cs = {"name": c, "image": next(x.get("image", "") for x in decl if x["name"] == c), "imageID": "",
                      "restartCount": 0}
                statuses.append(cs)
            started = ((cs.get("state") or {}).get("running") or {}).get("startedAt", t)
            term = {"exitCode": code, "reason": kw.get("reason") or ("Completed" if code == 0 else "Error"),
                    "startedAt": started, "finishedAt": t,
                    "containerID": cs.get("containerID") or f"containerd://{uuid.uuid4().hex}"}
            if kw.get("message"):
                term["message"] = kw["message"]
            if kw.get("signal") is not None:
                term["signal"] = int(kw["signal"])
            cs.update({"state": {"terminated": term}, "ready": False, "started": False,
                       "containerID": term["containerID"]})
            patch = {field: statuses}
            if not ephemeral:
                ended = {s["name"]: (s.get("state") or {}).get("terminated") for s in statuses}
                rp = spec.get("restartPolicy", "Always")
                if all(ended.get(n) for n in names) and rp != "Always":
                    failed = any(ended[n]["exitCode"] != 0 for n in names)
                    if rp == "Never" or not failed:
                        patch["phase"] = "Failed" if failed else "Succeeded"
                        patch["conditions"] = [{"type": x, "status": "False", "reason": "PodCompleted",
                                                "lastProbeTime": None, "lastTransitionTime": t}
                                               for x in ("Ready", "ContainersReady")]
            return self._status(ns, name, patch)
        if action == "confirm-delete":
            if not pod["metadata"].get("deletionTimestamp"):
                raise RuntimeError(f'played kubelet: pod "{name}" is not being deleted')
            r = self.kube.delete(f"/api/v1/namespaces/{ns}/pods/{name}",
                                 {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0})
            assert r.status in (200, 404), r
            return r.json
        raise RuntimeError(f"played kubelet: no action {action}")

    def reap(self, ns):
        """Confirms every graceful pod deletion in ns, as the kubelet does once it has stopped
        the containers (none run on a played node). Returns how many."""
        n = 0
        for p in self.kube.get(f"/api/v1/namespaces/{ns}/pods").json["items"]:
            if p["metadata"].get("deletionTimestamp"):
                self.kubelet("confirm-delete", ns, p["metadata"]["name"])
                n += 1
        return n

    def start_reaper(self, ns, interval=0.25):
        """A thread that confirms pod deletions in ns as they come (what the kubelet does
        within moments for a pod it has stopped); stop it with the returned function."""
        stop = threading.Event()

        def loop():
            while not stop.wait(interval):
                try:
                    self.reap(ns)
                except (RuntimeError, AssertionError, OSError):
                    pass            # the pod went meanwhile, or the server is being stopped

        t = threading.Thread(target=loop, name=f"reaper-{ns}", daemon=True)
        t.start()

        def halt():
            stop.set()
            t.join(5)
        return halt

    # ------------------------------------------------------------------ the request log

    def requests(self, since=0, method=None, **filters):
        """The requests the API server answered since this control was made, from its audit
        log, in the double's request-log shape: method, path (request URI), verb, user,
        userAgent, code."""
        time.sleep(1.2)          # the audit backend writes in batches
        events, _ = self.cluster.audit(since=self.since)
        verbs = {"get": "GET", "list": "GET", "watch": "GET", "create": "POST", "update": "PUT",
                 "patch": "PATCH", "delete": "DELETE", "deletecollection": "DELETE"}
        out = []
        for e in events:
            m = verbs.get(e["verb"], e["verb"].upper())
            if method and m != method:
                continue
            out.append({"method": m, "path": e["requestURI"].split("?", 1)[0], "verb": e["verb"],
                        "user": e["user"]["username"], "userAgent": e.get("userAgent", ""),
                        "code": (e.get("responseStatus") or {}).get("code")})
        return out

    def has(self, capability):
        return capability in ("kubelet", "requests")


def admin_client(cluster, user_agent="aiprof-tests/1"):
    """A REST client of the cluster as its admin (the kit's static token)."""
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "kubeapi"))
    from fakeapi.client import Kube
    return Kube(cluster.api_url, cluster.ca_file, admin_token(cluster.kubeconfig), user_agent=user_agent)


def admin_token(kubeconfig):
    """The static admin token of the kit's kubeconfig."""
    import yaml
    with open(kubeconfig) as f:
        cfg = yaml.safe_load(f)
    return cfg["users"][0]["user"]["token"]


def dump(o):
    return json.dumps(o)[:2000]
