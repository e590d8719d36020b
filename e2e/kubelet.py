# SPDX-License-Identifier: MIT
"""A TEST DOUBLE of the kubelet for one node, running pods as runc containers.

It speaks to the API server (tests/kubeapi, over HTTPS) only as a kubelet does: it registers
its Node (node info of this machine: kernel, OS, runc), lists and watches the pods bound to its
node (fieldSelector spec.nodeName=NODE), reads the Secrets their volumes and env refer to, and
writes pod status through the pods/status subresource. It also plays the scheduler of this
one-node cluster: every unbound pod whose nodeSelector fits is bound to the node through
pods/binding, as kube-scheduler does. Nothing
is short-cut through the double's control API. Containers run with runc (tests/runc/runcenv.py).

What it does for a pod:
- images are looked up in a table given at start (image name → the files of its root
  filesystem, laid over the node's /usr as a read-only overlay layer, entrypoint, env): no
  registry here. An unknown image leaves the
  container waiting with reason ErrImagePull.
- command/args/env/workingDir as Kubernetes defines them: `command` replaces the image's
  entrypoint, `args` its arguments; env `value`, `valueFrom.secretKeyRef` (the Secret read from
  the API), `valueFrom.fieldRef` (metadata.name/namespace/uid, spec.nodeName, status.hostIP,
  status.podIP); `$(VAR)` references expanded.
- volumes: `secret` (materialised as files, items and defaultMode honoured), `hostPath`,
  `emptyDir`, `projected` (serviceAccountToken → the API double's service-account token,
  configMap kube-root-ca.crt → its CA, downwardAPI); mounted read-only when the mount says so.
- securityContext: capabilities (runtime default set, `drop`, `add`; privileged = all),
  allowPrivilegeEscalation: false → no_new_privs, runAsUser/runAsGroup, readOnlyRootFilesystem.
  No seccomp profile is applied to any container (RuntimeDefault is not emulated).
- namespaces. There is no CNI on this machine and the S3 server (radosgw) listens on the node's
  loopback, so pods share the node's network namespace, except *target* pods: a pod that is
  not hostNetwork and not made by aiprof (no `aiprof.io/session-uid` label) gets a sandbox
  (a pause-like container holding its own network, IPC and UTS namespaces, as a pod sandbox
  does; only `lo` inside, so no podIP is reported for it; the node's services it must reach —
  the S3 endpoint — are relayed from 127.0.0.1:PORT inside it to the node's 127.0.0.1:PORT by
  PodNetworkRoute, `service_ports`). Every container has its own mount
  namespace and root filesystem, and its own pid namespace unless `hostPID` (the node's) or
  `shareProcessNamespace` (the sandbox's). An ephemeral container joins, by /proc/PID/ns path,
  the pid namespace of its `targetContainerName` and the pod's network/IPC/UTS namespaces.
- status like a kubelet: phase, hostIP, podIP (node-network pods: the node's 127.0.0.1),
  startTime, conditions, containerStatuses / ephemeralContainerStatuses with containerID
  `containerd://<runc id>`, state waiting/running/terminated (exitCode, signal, reason
  Completed/Error/StartError, startedAt, finishedAt, and the termination message read from
  terminationMessagePath — at most 4096 bytes; FallbackToLogsOnError takes the log's tail).
- restartPolicy: containers are never restarted (every pod is run as restartPolicy Never);
  activeDeadlineSeconds is enforced (phase Failed, reason DeadlineExceeded).
- deletion: SIGTERM, then SIGKILL after the pod's grace period (capped at `grace_cap`
  seconds), then `runc delete`. A pod already Succeeded/Failed when first seen is left alone.
"""
import base64
import ctypes
import json
import os
import queue
import re
import shutil
import socket
import sys
import threading
import time
import traceback
from datetime import datetime, timezone

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "runc"))
from runcenv import DEFAULT_CAPS, Bind, RuncError  # noqa: E402

NODE_IP = "127.0.0.1"
SESSION_LABEL = "aiprof.io/session-uid"
ALL_CAPS = ["CAP_" + c for c in (
    "CHOWN DAC_OVERRIDE DAC_READ_SEARCH FOWNER FSETID KILL SETGID SETUID SETPCAP "
    "LINUX_IMMUTABLE NET_BIND_SERVICE NET_BROADCAST NET_ADMIN NET_RAW IPC_LOCK IPC_OWNER "
    "SYS_MODULE SYS_RAWIO SYS_CHROOT SYS_PTRACE SYS_PACCT SYS_ADMIN SYS_BOOT SYS_NICE "
    "SYS_RESOURCE SYS_TIME SYS_TTY_CONFIG MKNOD LEASE AUDIT_WRITE AUDIT_CONTROL SETFCAP "
    "MAC_OVERRIDE MAC_ADMIN SYSLOG WAKE_ALARM BLOCK_SUSPEND AUDIT_READ PERFMON BPF "
    "CHECKPOINT_RESTORE").split()]


def now_rfc3339(t=None):
    return datetime.fromtimestamp(time.time() if t is None else t, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class Image:
    """What an image would contain — files at their paths in its root filesystem (on top of the
    node's /usr, which stands in for the base image's packages) — entrypoint, env, workdir."""

    def __init__(self, files, entrypoint=(), cmd=(), env=None, workdir="/"):
        self.files = dict(files)          # container path -> host path
        self.entrypoint, self.cmd = list(entrypoint), list(cmd)
        self.env = dict(env or {})
        self.workdir = workdir
        self.root = None

    def snapshot(self, store):
        """Copies the files into `store`, laid out as the image's root filesystem (an image is
        immutable: a rebuild of the tree while the tests run must not change what a container
        runs). Returns self."""
        for dest, src in sorted(self.files.items()):
            copy = os.path.join(store, dest.lstrip("/"))
            os.makedirs(os.path.dirname(copy), exist_ok=True)
            shutil.copy2(src, copy)
        self.root = store
        return self


CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


class PodNetworkRoute:
    """Stands in for the pod network's route to a service on the node (there is no CNI here):
    a socket listening on 127.0.0.1:PORT inside a pod's network namespace, each connection
    relayed to 127.0.0.1:PORT of the node (radosgw). The listening socket is made by a short
    thread that enters the namespace with setns(2) — a thread's own network namespace — and
    leaves; the relay runs in the node's namespace."""

    def __init__(self, netns_path, port):
        self.port, self.closed = port, False
        got = {}

        def listen():
            own = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
            fd = os.open(netns_path, os.O_RDONLY | os.O_CLOEXEC)
            try:
                if _libc.setns(fd, CLONE_NEWNET) != 0:
                    got["error"] = OSError(ctypes.get_errno(), f"setns {netns_path}")
                    return
                try:
                    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                    s.bind(("127.0.0.1", port))
                    s.listen(64)
                    got["sock"] = s
                except OSError as e:
                    got["error"] = e
                finally:
                    if _libc.setns(own, CLONE_NEWNET) != 0:
                        got["stuck"] = True         # this thread ends here anyway
            finally:
                os.close(fd)
                os.close(own)
        t = threading.Thread(target=listen)
        t.start()
        t.join()
        if "error" in got:
            raise got["error"]
        self.sock = got["sock"]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self.closed:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            try:
                u = socket.create_connection(("127.0.0.1", self.port), timeout=10)
                u.settimeout(None)
            except OSError:
                c.close()
                continue
            for a, b in ((c, u), (u, c)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(a, b):
        try:
            while True:
                data = a.recv(65536)
                if not data:
                    break
                b.sendall(data)
        except OSError:
            pass
        finally:
            for x in (a, b):
                try:
                    x.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self):
        self.closed = True
        self.sock.close()


class ContainerConfigError(Exception):
    """A container cannot be created (missing Secret, unknown volume, ...): reason + message."""

    def __init__(self, reason, message):
        super().__init__(message)
        self.reason = reason


class PodRun:
    def __init__(self, pod, workdir):
        self.pod = pod
        self.uid = pod["metadata"]["uid"]
        self.ns, self.name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        self.dir = os.path.join(workdir, self.uid)
        os.makedirs(self.dir, exist_ok=True)
        self.sandbox = None
        self.routes = []            # PodNetworkRoute of an isolated pod
        self.containers = {}        # name -> runc Container (regular)
        self.ephemeral = {}         # name -> runc Container
        self.waiting = {}           # name -> (reason, message)
        self.reported = {}          # name -> last container status dict sent
        self.start_time = None
        self.volumes = None
        self.deadline_exceeded = False
        self.gone = False

    @property
    def isolated(self):
        spec, labels = self.pod["spec"], self.pod["metadata"].get("labels") or {}
        return not spec.get("hostNetwork") and SESSION_LABEL not in labels


class Kubelet:
    """Runs the pods of node `node` (tests: Kubelet(kube, "node-e2e", runcenv, images).start())."""

    def __init__(self, kube, node, runcenv, images, workdir, sa_dir=None, ca_file=None,
                 grace_cap=5.0, log=None, service_ports=()):
        self.kube, self.node, self.runc, self.images = kube, node, runcenv, images
        self.workdir = workdir
        os.makedirs(workdir, exist_ok=True)
        self.sa_dir, self.ca_file = sa_dir, ca_file
        self.grace_cap = grace_cap
        self.service_ports = list(service_ports)   # node loopback ports pods with their own network reach
        self.events = queue.Queue()
        self.pods = {}              # uid -> PodRun
        self.stopping = threading.Event()
        self.errors = []            # unexpected exceptions in the kubelet's threads (tests assert none)
        self.logf = open(log or os.path.join(workdir, "kubelet.log"), "a", buffering=1)
        self.threads = []

    # ---- plumbing

    def log(self, msg):
        self.logf.write(f"{time.strftime('%H:%M:%S')} {msg}\n")

    def register(self):
        """Registers the Node as a kubelet does (a create carrying its status), or refreshes the
        status of an existing one: node info from this machine, Ready."""
        uname = os.uname()
        try:
            with open("/etc/os-release") as f:
                osimg = next((ln.split("=", 1)[1].strip().strip('"') for ln in f if ln.startswith("PRETTY_NAME=")), "")
        except OSError:
            osimg = ""
        t = now_rfc3339()
        status = {
            "capacity": {"cpu": str(os.cpu_count()), "pods": "110"},
            "allocatable": {"cpu": str(os.cpu_count()), "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                            "message": "kubelet double is posting ready status",
                            "lastHeartbeatTime": t, "lastTransitionTime": t}],
            "addresses": [{"type": "InternalIP", "address": NODE_IP}, {"type": "Hostname", "address": self.node}],
            "nodeInfo": {"kernelVersion": uname.release, "osImage": osimg, "operatingSystem": "linux",
                         "architecture": {"x86_64": "amd64", "aarch64": "arm64"}.get(uname.machine, uname.machine),
                         "containerRuntimeVersion": "runc://" + self.runc_version(),
                         "kubeletVersion": "v1.32.0-e2e-double", "kubeProxyVersion": "",
                         "machineID": "", "systemUUID": "", "bootID": ""},
            "runtimeHandlers": [{"name": "runc", "features": {"recursiveReadOnlyMounts": False}}],
        }
        node = {"apiVersion": "v1", "kind": "Node",
                "metadata": {"name": self.node, "labels": {"kubernetes.io/hostname": self.node,
                                                           "kubernetes.io/os": "linux"}},
                "status": status}
        r = self.kube.post("/api/v1/nodes", node)
        if r.status == 409:
            r = self.kube.patch(f"/api/v1/nodes/{self.node}/status", {"status": status},
                                patch_type="application/strategic-merge-patch+json")
        if r.status not in (200, 201):
            raise RuntimeError(f"registering node {self.node}: {r.status} {r.raw[:300]!r}")

    def runc_version(self):
        import subprocess
        out = subprocess.run([self.runc.runc, "--version"], capture_output=True, text=True).stdout
        return out.split()[2] if out.startswith("runc version") else "unknown"

    def start(self):
        self.register()
        for fn in (self._watch_loop, self._sync_loop, self._schedule_loop):
            t = threading.Thread(target=self._guard, args=(fn,), daemon=True, name=fn.__name__)
            t.start()
            self.threads.append(t)
        return self

    def _guard(self, fn):
        try:
            fn()
        except Exception:                       # noqa: BLE001 - recorded, tests check errors
            self.errors.append(traceback.format_exc())
            self.log("thread died: " + traceback.format_exc())

    def stop(self):
        """Stops the loops and every container of every pod it runs (by their runc ids)."""
        self.stopping.set()
        for t in self.threads:
            t.join(timeout=15)
        for run in list(self.pods.values()):
            self._kill_pod(run, grace=0)
        self.logf.close()

    def container_of(self, namespace, pod, container, ephemeral=False):
        """The runc Container running `container` of pod namespace/pod (tests: kill it, ...)."""
        for run in self.pods.values():
            if run.ns == namespace and run.name == pod:
                return (run.ephemeral if ephemeral else run.containers).get(container)
        return None

    def pod_run(self, namespace, pod):
        return next((r for r in self.pods.values() if r.ns == namespace and r.name == pod), None)

    # ---- watch: list, then watch from the list's resourceVersion; relist when the watch ends badly

    def _watch_loop(self):
        sel = f"spec.nodeName={self.node}"
        rv = None
        while not self.stopping.is_set():
            try:
                if rv is None:
                    r = self.kube.get("/api/v1/pods", query={"fieldSelector": sel})
                    if r.status != 200:
                        raise RuntimeError(f"list pods: {r.status}")
                    for p in r.json["items"]:
                        self.events.put(("ADDED", p))
                    rv = r.json["metadata"]["resourceVersion"]
                for ev in self.kube.watch("/api/v1/pods", query={
                        "fieldSelector": sel, "resourceVersion": rv, "allowWatchBookmarks": "true",
                        "timeoutSeconds": "30"}, timeout=10):
                    if self.stopping.is_set():
                        return
                    t, obj = ev["type"], ev["object"]
                    if t == "ERROR":
                        rv = None               # 410 Gone: relist
                        break
                    rv = obj["metadata"]["resourceVersion"]
                    if t != "BOOKMARK":
                        self.events.put((t, obj))
            except (OSError, socket.timeout, RuntimeError, ValueError) as e:
                self.log(f"watch: {e!r}; again")
                time.sleep(0.2)

    # ---- the scheduler's part, for a one-node cluster: bind every unbound pod that fits here

    def _schedule_loop(self):
        sel = "spec.nodeName="
        rv = None
        while not self.stopping.is_set():
            try:
                if rv is None:
                    r = self.kube.get("/api/v1/pods", query={"fieldSelector": sel})
                    if r.status != 200:
                        raise RuntimeError(f"list unbound pods: {r.status}")
                    for p in r.json["items"]:
                        self._bind(p)
                    rv = r.json["metadata"]["resourceVersion"]
                for ev in self.kube.watch("/api/v1/pods", query={
                        "fieldSelector": sel, "resourceVersion": rv, "allowWatchBookmarks": "true",
                        "timeoutSeconds": "30"}, timeout=10):
                    if self.stopping.is_set():
                        return
                    if ev["type"] == "ERROR":
                        rv = None
                        break
                    rv = ev["object"]["metadata"]["resourceVersion"]
                    if ev["type"] in ("ADDED", "MODIFIED"):
                        self._bind(ev["object"])
            except (OSError, socket.timeout, RuntimeError, ValueError) as e:
                self.log(f"scheduler watch: {e!r}; again")
                time.sleep(0.2)

    def _bind(self, pod):
        md, spec = pod["metadata"], pod["spec"]
        if spec.get("nodeName") or md.get("deletionTimestamp"):
            return
        labels = {"kubernetes.io/hostname": self.node, "kubernetes.io/os": "linux"}
        if any(labels.get(k) != v for k, v in (spec.get("nodeSelector") or {}).items()):
            self.log(f"{md['namespace']}/{md['name']}: nodeSelector does not match {self.node}; left Pending")
            return
        r = self.kube.post(f"/api/v1/namespaces/{md['namespace']}/pods/{md['name']}/binding",
                           {"apiVersion": "v1", "kind": "Binding",
                            "metadata": {"name": md["name"], "uid": md["uid"]},
                            "target": {"apiVersion": "v1", "kind": "Node", "name": self.node}})
        self.log(f"{md['namespace']}/{md['name']}: bound to {self.node}: {r.status}")

    # ---- sync: act on pod events, then look at the containers

    def _sync_loop(self):
        while not self.stopping.is_set():
            try:
                t, pod = self.events.get(timeout=0.1)
            except queue.Empty:
                t = None
            if t:
                try:
                    self._on_event(t, pod)
                except Exception:               # noqa: BLE001
                    self.errors.append(traceback.format_exc())
                    self.log("event: " + traceback.format_exc())
            for run in list(self.pods.values()):
                self._check(run)

    def _on_event(self, t, pod):
        uid = pod["metadata"]["uid"]
        run = self.pods.get(uid)
        if t == "DELETED" or pod["metadata"].get("deletionTimestamp"):
            if run and not run.gone:
                self.log(f"{run.ns}/{run.name}: deleted, stopping its containers")
                self._kill_pod(run, grace=pod["spec"].get("terminationGracePeriodSeconds", 30))
                run.gone = True
                if t != "DELETED":          # graceful deletion: the kubelet confirms it
                    self.kube.delete(f"/api/v1/namespaces/{run.ns}/pods/{run.name}",
                                     {"kind": "DeleteOptions", "apiVersion": "v1",
                                      "gracePeriodSeconds": 0, "preconditions": {"uid": uid}})
            return
        if run is None:
            if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                return
            run = PodRun(pod, self.workdir)
            self.pods[uid] = run
            self._start_pod(run)
        else:
            run.pod = pod
            self._start_ephemeral(run)

    # ---- starting

    def _start_pod(self, run):
        spec = run.pod["spec"]
        run.start_time = time.time()
        self.log(f"{run.ns}/{run.name}: starting ({'own network' if run.isolated else 'node network'})")
        try:
            run.volumes = self._volumes(run)
        except ContainerConfigError as e:
            for c in spec["containers"]:
                run.waiting[c["name"]] = (e.reason, str(e))
            self._report(run)
            return
        if run.isolated:
            run.sandbox = self.runc.container(["/usr/bin/sleep", "infinity"], hostname=run.name,
                                              caps=[], termination_log=None,
                                              namespaces={"pid": "new", "network": "new", "ipc": "new",
                                                          "uts": "new"})
            run.sandbox.start()
            for port in self.service_ports:
                run.routes.append(PodNetworkRoute(run.sandbox.ns_path("net"), port))
        for c in spec["containers"]:
            self._start_container(run, c, ephemeral=False)
        self._report(run)

    def _start_ephemeral(self, run):
        started = False
        for c in run.pod["spec"].get("ephemeralContainers") or []:
            if c["name"] in run.ephemeral or c["name"] in run.waiting:
                continue
            self._start_container(run, c, ephemeral=True)
            started = True
        if started:
            self._report(run)

    def _namespaces(self, run, c, ephemeral):
        spec = run.pod["spec"]
        ns = {"mount": "new"}
        if run.sandbox:
            for t, proc in (("network", "net"), ("ipc", "ipc"), ("uts", "uts")):
                ns[t] = run.sandbox.ns_path(proc)
        else:
            ns.update({"network": "host", "uts": "host", "ipc": "host" if spec.get("hostIPC") else "new"})
        if ephemeral and c.get("targetContainerName"):
            target = run.containers.get(c["targetContainerName"])
            if target is None or not target.running():
                raise ContainerConfigError("CreateContainerError",
                                           f"target container {c['targetContainerName']!r} is not running")
            ns["pid"] = target.ns_path("pid")
        elif spec.get("hostPID"):
            ns["pid"] = "host"
        elif spec.get("shareProcessNamespace") and run.sandbox:
            ns["pid"] = run.sandbox.ns_path("pid")
        else:
            ns["pid"] = "new"
        return ns

    def _start_container(self, run, c, ephemeral):
        name = c["name"]
        try:
            image = self.images.get(c.get("image"))
            if image is None:
                raise ContainerConfigError("ErrImagePull", f"image {c.get('image')!r} is not known to this "
                                           f"kubelet double (known: {', '.join(sorted(self.images))})")
            env = self._env(run, c, image)
            args = self._args(c, image, env)
            binds = []
            for m in c.get("volumeMounts") or []:
                src = run.volumes.get(m["name"])
                if src is None:
                    raise ContainerConfigError("CreateContainerConfigError",
                                               f"volume {m['name']!r} is not defined in the pod")
                if m.get("subPath"):
                    src = os.path.join(src, m["subPath"])
                binds.append(Bind(src, m["mountPath"], readonly=bool(m.get("readOnly"))))
            sc = c.get("securityContext") or {}
            caps = self._caps(sc)
            user = (int(sc.get("runAsUser", 0)), int(sc.get("runAsGroup", sc.get("runAsUser", 0))))
            ctr = self.runc.container(
                args, binds=binds, env=env, cwd=c.get("workingDir") or image.workdir,
                namespaces=self._namespaces(run, c, ephemeral), caps=caps, hostname=run.name,
                no_new_privileges=sc.get("allowPrivilegeEscalation") is False and not sc.get("privileged"),
                readonly_rootfs=bool(sc.get("readOnlyRootFilesystem")), user=user, image_root=image.root,
                termination_log=c.get("terminationMessagePath") or "/dev/termination-log")
        except ContainerConfigError as e:
            self.log(f"{run.ns}/{run.name}/{name}: {e.reason}: {e}")
            run.waiting[name] = (e.reason, str(e))
            return
        (run.ephemeral if ephemeral else run.containers)[name] = ctr
        try:
            ctr.start()
            self.log(f"{run.ns}/{run.name}/{name}: started {ctr.id[:12]} pid {ctr.pid}: {' '.join(args)}")
        except RuncError as e:
            self.log(f"{run.ns}/{run.name}/{name}: StartError: {e}")
            ctr.start_error, ctr.start_failed_at = str(e), time.time()

    def _args(self, c, image, env):
        command = c.get("command") or image.entrypoint
        args = c.get("args") if c.get("command") or c.get("args") is not None else image.cmd
        argv = [self._expand(a, env) for a in list(command) + list(args or [])]
        if not argv:
            raise ContainerConfigError("CreateContainerConfigError", "no command specified")
        return argv

    @staticmethod
    def _expand(s, env):
        """$(VAR) → its value when defined; $$(VAR) → $(VAR) (Kubernetes' rule)."""
        def sub(m):
            if m.group(0).startswith("$$"):
                return m.group(0)[1:]
            return env.get(m.group(1), m.group(0))
        return re.sub(r"\$?\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)", sub, s)

    @staticmethod
    def _caps(sc):
        if sc.get("privileged"):
            return ALL_CAPS
        caps = sc.get("capabilities") or {}
        drop = {("CAP_" + d.upper()) if not d.upper().startswith("CAP_") else d.upper()
                for d in caps.get("drop") or []}
        have = [] if "CAP_ALL" in drop else [x for x in DEFAULT_CAPS if x not in drop]
        for a in caps.get("add") or []:
            a = a.upper()
            a = a if a.startswith("CAP_") else "CAP_" + a
            if a == "CAP_ALL":
                return ALL_CAPS
            if a not in have:
                have.append(a)
        return have

    def _secret(self, ns, name):
        r = self.kube.get(f"/api/v1/namespaces/{ns}/secrets/{name}")
        if r.status == 404:
            raise ContainerConfigError("CreateContainerConfigError", f'secret "{name}" not found')
        if r.status != 200:
            raise ContainerConfigError("CreateContainerConfigError", f'secret "{name}": HTTP {r.status}')
        return {k: base64.b64decode(v) for k, v in (r.json.get("data") or {}).items()}

    def _field(self, run, path):
        md, spec = run.pod["metadata"], run.pod["spec"]
        values = {"metadata.name": md["name"], "metadata.namespace": md["namespace"],
                  "metadata.uid": md["uid"], "spec.nodeName": spec.get("nodeName", ""),
                  "spec.serviceAccountName": spec.get("serviceAccountName", ""),
                  "status.hostIP": NODE_IP, "status.podIP": "" if run.isolated else NODE_IP}
        if path not in values:
            raise ContainerConfigError("CreateContainerConfigError", f"unsupported fieldRef {path!r}")
        return values[path]

    def _env(self, run, c, image):
        env = dict(image.env)
        for e in c.get("env") or []:
            if "valueFrom" in e:
                vf = e["valueFrom"]
                if "secretKeyRef" in vf:
                    ref = vf["secretKeyRef"]
                    try:
                        data = self._secret(run.ns, ref["name"])
                    except ContainerConfigError:
                        if ref.get("optional"):
                            continue
                        raise
                    if ref["key"] not in data:
                        if ref.get("optional"):
                            continue
                        raise ContainerConfigError("CreateContainerConfigError",
                                                   f"couldn't find key {ref['key']} in Secret {run.ns}/{ref['name']}")
                    env[e["name"]] = data[ref["key"]].decode()
                elif "fieldRef" in vf:
                    env[e["name"]] = self._field(run, vf["fieldRef"]["fieldPath"])
                else:
                    raise ContainerConfigError("CreateContainerConfigError",
                                               f"env {e['name']}: unsupported valueFrom {sorted(vf)}")
            else:
                env[e["name"]] = self._expand(e.get("value", ""), env)
        return env

    def _write_files(self, d, files, mode):
        os.makedirs(d, exist_ok=True)
        for rel, data in files.items():
            p = os.path.join(d, rel)
            os.makedirs(os.path.dirname(p), exist_ok=True)
            with open(p, "wb") as f:
                f.write(data)
            os.chmod(p, mode)

    def _volumes(self, run):
        out = {}
        for v in run.pod["spec"].get("volumes") or []:
            name = v["name"]
            d = os.path.join(run.dir, "volumes", name)
            if "secret" in v:
                s = v["secret"]
                try:
                    data = self._secret(run.ns, s["secretName"])
                except ContainerConfigError:
                    if s.get("optional"):
                        data = {}
                    else:
                        raise ContainerConfigError("CreateContainerConfigError",
                                                   f'MountVolume.SetUp failed for volume "{name}": secret '
                                                   f'"{s["secretName"]}" not found')
                items = s.get("items")
                files = ({i["path"]: data[i["key"]] for i in items if i["key"] in data} if items else data)
                self._write_files(d, files, s.get("defaultMode", 0o644))
                out[name] = d
            elif "hostPath" in v:
                hp = v["hostPath"]
                if hp.get("type") == "DirectoryOrCreate":
                    os.makedirs(hp["path"], exist_ok=True)
                if not os.path.exists(hp["path"]):
                    raise ContainerConfigError("CreateContainerConfigError",
                                               f"hostPath {hp['path']} does not exist")
                out[name] = hp["path"]
            elif "emptyDir" in v:
                os.makedirs(d, exist_ok=True)
                os.chmod(d, 0o777)
                out[name] = d
            elif "projected" in v:
                files = {}
                for src in v["projected"].get("sources") or []:
                    if "serviceAccountToken" in src and self.sa_dir:
                        with open(os.path.join(self.sa_dir, "token"), "rb") as f:
                            files[src["serviceAccountToken"].get("path", "token")] = f.read()
                    elif "configMap" in src and src["configMap"].get("name") == "kube-root-ca.crt" and self.ca_file:
                        with open(self.ca_file, "rb") as f:
                            files["ca.crt"] = f.read()
                    elif "downwardAPI" in src:
                        for i in src["downwardAPI"].get("items") or []:
                            files[i["path"]] = self._field(run, i["fieldRef"]["fieldPath"]).encode()
                    elif "secret" in src:
                        data = self._secret(run.ns, src["secret"]["name"])
                        files.update(data)
                self._write_files(d, files, v["projected"].get("defaultMode", 0o644))
                out[name] = d
            else:
                raise ContainerConfigError("CreateContainerConfigError",
                                           f"volume {name!r}: kind {sorted(k for k in v if k != 'name')} "
                                           "is not supported by the kubelet double")
        return out

    # ---- watching containers, reporting status

    def _check(self, run):
        if run.gone:
            return
        spec = run.pod["spec"]
        ads = spec.get("activeDeadlineSeconds")
        done = (run.pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")
        if ads and run.start_time and not done and not run.deadline_exceeded and time.time() > run.start_time + ads:
            self.log(f"{run.ns}/{run.name}: activeDeadlineSeconds {ads} exceeded")
            run.deadline_exceeded = True
            self._kill_pod(run, grace=spec.get("terminationGracePeriodSeconds", 30), delete=False)
        self._report(run)

    def _container_status(self, run, spec_c, ctr):
        name = spec_c["name"]
        base = {"name": name, "image": spec_c.get("image", ""), "imageID": "", "restartCount": 0}
        if ctr is None:
            reason, msg = run.waiting.get(name, ("ContainerCreating", ""))
            return dict(base, ready=False, started=False, state={"waiting": {"reason": reason, "message": msg}})
        base["containerID"] = "containerd://" + ctr.id
        start_error = getattr(ctr, "start_error", None)
        started_at = now_rfc3339(ctr.started_at) if ctr.started_at else None
        if start_error:
            term = {"exitCode": 128, "reason": "StartError", "message": start_error[-4096:],
                    "startedAt": now_rfc3339(0), "finishedAt": now_rfc3339(ctr.start_failed_at),
                    "containerID": base["containerID"]}
            return dict(base, ready=False, started=False, state={"terminated": term})
        st = ctr.exit_status()
        if st is None:
            return dict(base, ready=True, started=True, state={"running": {"startedAt": started_at}})
        code = st["exitCode"]
        msg = ctr.termination_message()
        if not msg and code != 0 and spec_c.get("terminationMessagePolicy") == "FallbackToLogsOnError":
            msg = "\n".join(ctr.output().splitlines()[-80:])[-2048:]
        term = {"exitCode": code, "reason": "Completed" if code == 0 else "Error",
                "startedAt": started_at, "finishedAt": now_rfc3339(st["finishedAt"]),
                "containerID": base["containerID"]}
        if st.get("signal"):
            term["signal"] = st["signal"]
        if msg:
            term["message"] = msg
        return dict(base, ready=False, started=False, state={"terminated": term})

    def _report(self, run):
        spec = run.pod["spec"]
        statuses = [self._container_status(run, c, run.containers.get(c["name"])) for c in spec["containers"]]
        eph = [self._container_status(run, c, run.ephemeral.get(c["name"]))
               for c in spec.get("ephemeralContainers") or []]
        states = [next(iter(s["state"])) for s in statuses]
        if all(s == "terminated" for s in states):
            codes = [s["state"]["terminated"]["exitCode"] for s in statuses]
            phase = "Succeeded" if all(c == 0 for c in codes) and not run.deadline_exceeded else "Failed"
        elif all(s == "running" for s in states) and not run.deadline_exceeded:
            phase = "Running"
        elif run.deadline_exceeded:
            phase = "Failed"
        else:
            phase = "Pending" if any(s == "waiting" for s in states) else "Running"
        ready = phase == "Running" and all(s["ready"] for s in statuses)
        key = json.dumps([phase, statuses, eph], sort_keys=True)
        if run.reported.get("key") == key:
            return
        t0 = now_rfc3339(run.start_time)
        cond = lambda typ, ok: {"type": typ, "status": "True" if ok else "False",  # noqa: E731
                                "lastProbeTime": None, "lastTransitionTime": t0}
        status = {"phase": phase, "hostIP": NODE_IP, "hostIPs": [{"ip": NODE_IP}], "startTime": t0,
                  "conditions": [cond("PodScheduled", True), cond("Initialized", True),
                                 cond("ContainersReady", ready), cond("Ready", ready)],
                  "containerStatuses": statuses}
        if not run.isolated:
            status.update(podIP=NODE_IP, podIPs=[{"ip": NODE_IP}])
        if eph:
            status["ephemeralContainerStatuses"] = eph
        if run.deadline_exceeded:
            status.update(reason="DeadlineExceeded",
                          message="Pod was active on the node longer than the specified deadline")
        r = self.kube.patch(f"/api/v1/namespaces/{run.ns}/pods/{run.name}/status", {"status": status},
                            patch_type="application/strategic-merge-patch+json")
        if r.status == 200:
            run.reported["key"] = key
            run.pod = r.json
            self.log(f"{run.ns}/{run.name}: {phase} " +
                     ", ".join(f"{s['name']}={next(iter(s['state']))}" for s in statuses + eph))
        elif r.status == 404:
            run.gone = True
        else:
            self.log(f"{run.ns}/{run.name}: status patch: {r.status} {r.raw[:300]!r}")

    # ---- stopping

    def _kill_pod(self, run, grace, delete=True):
        grace = min(float(grace if grace is not None else 30), self.grace_cap)
        ctrs = list(run.ephemeral.values()) + list(run.containers.values())
        for c in ctrs:
            if c.running():
                c.kill("TERM")
        end = time.monotonic() + grace
        while time.monotonic() < end and any(c.running() for c in ctrs):
            time.sleep(0.05)
        for c in ctrs:
            if c.running():
                c.kill("KILL")
        for c in ctrs:
            if c.pid is not None:
                try:
                    c.wait(10)
                except TimeoutError:
                    pass
        if delete:
            for r in run.routes:
                r.close()
            for c in ctrs + ([run.sandbox] if run.sandbox else []):
                c.delete()
            shutil.rmtree(os.path.join(run.dir, "volumes"), ignore_errors=True)
