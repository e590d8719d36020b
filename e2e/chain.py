# SPDX-License-Identifier: MIT
"""The end-to-end chain on a REAL Kubernetes: the kit of ../shared/k8s (kube-apiserver v1.32,
controller manager, scheduler, and one real kubelet on containerd + runc; tests/k8s/realk8s.py
starts it once per test process), the real build/aiprof-controller (a host process with the
admin kubeconfig, or a pod installed by the Helm chart), the real kubectl, Ceph radosgw
(tests/s3/radosgw.sh) and images built from this build tree (e2e/images.py) and imported into
the node's containerd: the injector and controller images as their Dockerfiles lay them out, and
a trainer image (the test trainer with the fake CUDA/NCCL/ibverbs/CUPTI libraries: no GPU here).

What is not a stock cluster's, because of the kit's network (../shared/k8s/README.md, "Limits":
no kube-proxy, no DNS; pods reach the host only at the bridge address, the node's InternalIP):

- radosgw listens on 127.0.0.1. Pods (the injector pods the controller makes are not
  hostNetwork) reach it through `S3Forward`, a byte-for-byte TCP forwarder of this process bound
  to the node's bridge address only, so sessions name the endpoint http://<node IP>:<port>. Bytes
  are forwarded unchanged, so the SigV4 signature over the Host header holds.
- a controller that runs as a pod reaches the API server only with host networking and
  KUBERNETES_SERVICE_HOST/PORT pointing at 127.0.0.1:<API port> (`Env.helm_controller`). A
  user's cluster needs neither.

Chain: one cluster, one radosgw, one forwarder, the images (shared by the tests of a pytest
session). Env: a namespace with the S3 Secret and the controllers scoped to it (--namespace);
its end deletes the namespace and waits for its pods to be gone. Every process started here is
stopped by its PID; every thread is joined. AIPROF_E2E_KEEP=1 keeps the chain's folder
(controller logs, image tarballs); AIPROF_TEST_K8S_KEEP=1 the cluster's state dir (its logs)."""
import base64
import gzip
import hashlib
import json
import os
import re
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
BUILD = os.path.join(ROOT, os.environ.get("BUILD", "build"))
CONTROLLER = os.path.join(BUILD, "aiprof-controller")
AIPROF = os.path.join(BUILD, "aiprof")
LIBAIPROF = os.path.join(BUILD, "libaiprof.so")
TRAINER = os.path.join(BUILD, "tests", "workloads", "trainer")
DOUBLES = os.path.join(BUILD, "tests", "doubles")
HELM = os.path.join(BUILD, "tools", "helm", "helm")
CHART = os.path.join(ROOT, "charts", "aiprof")
with open(os.path.join(CHART, "Chart.yaml")) as _f:
    APP_VERSION = re.search(r'^appVersion: *"(.*)"', _f.read(), re.M).group(1)
# what `make images` builds (scripts/build-images.sh), under the names the chart uses
IMAGES = os.path.join(BUILD, "images")
INJECTOR_IMAGE = f"aiprof/aiprof-injector:{APP_VERSION}"
CONTROLLER_IMAGE = f"aiprof/aiprof-controller:{APP_VERSION}"
TRAINER_IMAGE = "aiprof-e2e/trainer:e2e"
GROUP = "/apis/aiprof.io/v1alpha1"

for d in (ROOT, os.path.join(ROOT, "tests", "kubeapi"), os.path.join(ROOT, "tests", "s3"),
          os.path.join(ROOT, "tests", "k8s")):
    if d not in sys.path:
        sys.path.insert(0, d)

import harness  # noqa: E402
import played  # noqa: E402
import realk8s  # noqa: E402
import s3env  # noqa: E402
from e2e import images as imagebuild  # noqa: E402


def injector_image_layout():
    """(files {container path: host path}, entrypoint) of the injector image, read from
    injector/Dockerfile's `COPY --from=build /src/build/X DEST` lines and ENTRYPOINT, so that the
    container runs what the image holds where the image holds it; without a Dockerfile, the
    layout controller/README.md describes (aiprof on PATH, libaiprof.so in ../lib/aiprof)."""
    files, entrypoint = {}, None
    path = os.path.join(ROOT, "injector", "Dockerfile")
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                m = re.match(r"\s*COPY\s+--from=\S+\s+/src/build/(\S+)\s+(/\S+)\s*$", line)
                if m:
                    files[m.group(2)] = os.path.join(BUILD, m.group(1))
                m = re.match(r"\s*ENTRYPOINT\s+(\[.*\])\s*$", line)
                if m:
                    entrypoint = json.loads(m.group(1))
    if not files:
        files = {"/usr/bin/aiprof": AIPROF, "/usr/lib/aiprof/libaiprof.so": LIBAIPROF}
        entrypoint = ["/usr/bin/aiprof"]
    return files, entrypoint or []


def trainer_files():
    """The trainer image's files: the test trainer with the fake CUDA/NCCL/ibverbs libraries
    beside it (its RUNPATH is $ORIGIN/../doubles) and the fake CUPTI in doubles/cupti."""
    files = {f"/opt/trainer/doubles/{f}": os.path.join(DOUBLES, f) for f in sorted(os.listdir(DOUBLES))
             if re.search(r"\.so(\.\d+)*$", f)}
    cupti = os.path.join(DOUBLES, "cupti")      # the fake CUPTI (`trainer --cupti` loads it)
    if os.path.isdir(cupti):
        files.update({f"/opt/trainer/doubles/cupti/{f}": os.path.join(cupti, f) for f in sorted(os.listdir(cupti))
                      if re.search(r"\.so(\.\d+)*$", f)})
    files["/opt/trainer/workloads/trainer"] = TRAINER
    return files


def make_images():
    """The injector and controller images of `make images` (docker-archive tarballs in
    build/images), built again when a binary is newer than them: {tag: path}."""
    tars = {INJECTOR_IMAGE: os.path.join(IMAGES, "aiprof-injector.tar"),
            CONTROLLER_IMAGE: os.path.join(IMAGES, "aiprof-controller.tar")}
    newest = max(os.path.getmtime(p) for p in (AIPROF, LIBAIPROF, CONTROLLER))
    if not all(os.path.exists(t) and os.path.getmtime(t) >= newest for t in tars.values()):
        r = subprocess.run(["bash", os.path.join(ROOT, "scripts", "build-images.sh")], capture_output=True,
                           text=True, timeout=900, cwd=ROOT,
                           env={**os.environ, "BUILD": BUILD, "OUT": IMAGES, "IMAGE_REPO": "aiprof",
                                "IMAGE_TAG": APP_VERSION})
        if r.returncode != 0:
            raise RuntimeError(f"scripts/build-images.sh failed:\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}")
    return tars


def build_images(out_dir):
    """The three image tarballs (docker-archive) of this build: {tag: path}: the injector and
    controller images from `make images`, the test trainer's built here."""
    os.makedirs(out_dir, exist_ok=True)
    tars = make_images()
    tars[TRAINER_IMAGE] = os.path.join(out_dir, "trainer.tar")
    imagebuild.trainer_image(tars[TRAINER_IMAGE], TRAINER_IMAGE, trainer_files())
    return tars


def wait_for(fn, timeout=30.0, what="condition", interval=0.2):
    """harness.wait_for with the chain's longer default (pods start in seconds)."""
    return harness.wait_for(fn, timeout, what, interval)


def missing():
    """Why the chain cannot run here (None when it can)."""
    if os.geteuid() != 0:
        return "the end-to-end chain runs as root (the real node: containerd, runc, ptrace, eBPF)"
    for p in (CONTROLLER, AIPROF, LIBAIPROF, TRAINER):
        if not os.path.exists(p):
            return f"{p} is missing (make -j2)"
    why = realk8s.missing()
    if why:
        return why
    if not shutil.which("ctr"):
        return "ctr is missing (Debian package containerd)"
    absent = s3env.missing_ceph()
    if absent:
        return "Ceph radosgw is not installed (missing " + ", ".join(absent) + "): scripts/install-deps.sh"
    return None


class S3Forward:
    """A TCP forwarder bound to (bind_ip, an ephemeral port) that copies bytes both ways to
    upstream "127.0.0.1:PORT" (radosgw, or the fault proxy in front of it): how pods on the
    kit's bridge reach a server of the host that listens on loopback. One thread accepts; two per
    connection copy. stop() closes every socket and joins every thread."""

    def __init__(self, bind_ip, upstream):
        host, port = upstream.rsplit(":", 1)
        self.upstream = (host, int(port))
        self.lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.lsock.bind((bind_ip, 0))
        self.lsock.listen(64)
        self.endpoint = f"http://{bind_ip}:{self.lsock.getsockname()[1]}"
        self.stopping = False
        self.lock = threading.Lock()
        self.socks, self.threads = [], []
        self.thread = threading.Thread(target=self._accept, name="s3-forward", daemon=True)
        self.thread.start()

    def _accept(self):
        while not self.stopping:
            r, _, _ = select.select([self.lsock], [], [], 0.2)
            if not r or self.stopping:
                continue
            try:
                c, _ = self.lsock.accept()
            except OSError:
                continue
            try:
                u = socket.create_connection(self.upstream, timeout=5)
                u.settimeout(None)
            except OSError:
                c.close()           # upstream down: the client sees the connection closed
                continue
            with self.lock:
                self.socks += [c, u]
                for a, b in ((c, u), (u, c)):
                    t = threading.Thread(target=self._pump, args=(a, b), daemon=True)
                    self.threads.append(t)
                    t.start()

    @staticmethod
    def _pump(src, dst):
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                dst.sendall(data)
        except OSError:
            pass
        try:
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    def stop(self):
        self.stopping = True
        self.thread.join(5)
        self.lsock.close()
        with self.lock:
            for s in self.socks:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()
            threads = list(self.threads)
        for t in threads:
            t.join(5)


class Chain:
    """The session-wide parts: the real cluster (shared per process; stopped by
    realk8s.stop_shared()), the imported images, the CRDs, radosgw and its forwarder."""

    def __init__(self):
        self.tmp = tempfile.mkdtemp(prefix="aiprof-e2e-")
        self.rgw = None
        self.s3fwd = None
        self.cluster = None

    def start(self):
        self.cluster = realk8s.shared()
        self.node, self.node_ip = self.cluster.node, self.cluster.node_ip
        self.kubeconfig = self.cluster.kubeconfig
        # the tests' reads: far cheaper than a kubectl process per poll on two cores;
        # everything a user does goes through kubectl
        self.kube = played.admin_client(self.cluster, "aiprof-e2e/1")
        t0 = time.monotonic()
        for tar in build_images(os.path.join(self.tmp, "images")).values():
            self.cluster.import_image(tar)
        self.images_s = time.monotonic() - t0
        self.cluster.apply_crds(os.path.join(ROOT, "crds"))
        self.rgw = s3env.Radosgw().start()
        self.s3fwd = S3Forward(self.node_ip, self.rgw.hostport)
        self.s3_endpoint = self.s3fwd.endpoint
        return self

    def stop(self):
        if self.s3fwd:
            self.s3fwd.stop()
        if self.rgw:
            self.rgw.stop()
        # logs and image tarballs: kept for a look with AIPROF_E2E_KEEP=1
        if os.environ.get("AIPROF_E2E_KEEP") == "1":
            print(f"e2e: kept {self.tmp}")
        else:
            shutil.rmtree(self.tmp, ignore_errors=True)

    def kubectl(self, *args, timeout=60, input=None):
        return self.cluster.kubectl(*args, timeout=timeout, input=input)

    def ctr(self, *args, timeout=30):
        """ctr on the node's containerd (namespace k8s.io, where the kubelet's containers are)."""
        return subprocess.run(["ctr", "-a", self.cluster.containerd_sock, "-n", "k8s.io", *args],
                              capture_output=True, text=True, timeout=timeout)


def kubectl(chain, *args, timeout=60, input=None):
    return chain.kubectl(*args, timeout=timeout, input=input)


class Controller(harness.ControllerProcess):
    """One aiprof-controller host process with the admin kubeconfig, scoped to a namespace;
    log kept in a file."""

    def __init__(self, chain, ns, *extra):
        args = harness.controller_args(CONTROLLER, ns, *extra, kubeconfig=chain.kubeconfig,
                                       target_wait="30s", grace="40s",
                                       injector_image=INJECTOR_IMAGE,
                                       identity=f"e2e-{uuid.uuid4().hex[:6]}")
        args += ["--image-pull-policy", "Never"]
        env = chain.cluster.kubectl_env()
        env.pop("KUBECONFIG", None)
        super().__init__(args, os.path.join(chain.tmp, f"{ns}-controller-{uuid.uuid4().hex[:6]}.log"), env)


def new_env(chain, ns):
    """A namespace with the S3 credentials Secret (and its default ServiceAccount, which the
    controller manager creates and admission needs before any pod)."""
    r = kubectl(chain, "create", "namespace", ns)
    assert r.returncode == 0, r.stderr
    e = Env(chain, ns)
    wait_for(lambda: chain.kube.get(f"/api/v1/namespaces/{ns}/serviceaccounts/default").status == 200, 30,
             f"the default ServiceAccount of {ns}")
    e.secret()
    return e


def end_env(e):
    """Deletes the sessions while the controllers still run (their finalizer), stops the
    controllers, uninstalls a Helm release, deletes the namespace and waits for its pods to be
    gone from the node. Returns the controllers' logs."""
    chain, ns = e.chain, e.ns
    logs = []
    if e.controllers or e.helm_release:
        kubectl(chain, "-n", ns, "delete", "profilingsessions", "--all", "--wait=true", "--timeout=30s")
    if e.helm_release:
        logs.append(e.helm_logs())
        subprocess.run([HELM, "uninstall", e.helm_release, "-n", ns],
                       env=e.helm_env(), capture_output=True, text=True, timeout=90)
    # the pods now (the namespace controller would come to them seconds later)
    kubectl(chain, "-n", ns, "delete", "pods", "--all", "--wait=false")
    for c in e.controllers:
        c.stop()
        logs.append(c.text())
    # a session left with its finalizer (no controller to remove it) would hold the namespace
    r = kubectl(chain, "-n", ns, "get", "profilingsessions", "-o", "name")
    for name in r.stdout.split():
        kubectl(chain, "-n", ns, "patch", name, "--type=merge", "-p", '{"metadata":{"finalizers":null}}')
    for kind, name in e.cluster_objects:
        kubectl(chain, "delete", kind, name, "--wait=false")
    kubectl(chain, "delete", "namespace", ns, "--wait=false")
    for f in e.forwards:
        f.stop()
    wait_for(lambda: not chain.kube.get(f"/api/v1/namespaces/{ns}/pods").json.get("items"), 60,
             f"the pods of {ns} to be gone")
    return logs


class Env:
    """One namespace on the chain."""

    def __init__(self, chain, ns):
        self.chain, self.ns = chain, ns
        self.kube, self.rgw = chain.kube, chain.rgw
        self.s3_endpoint = chain.s3_endpoint
        self.controllers = []
        self.helm_release = None
        self.inj_ns = None              # the chart's injector namespace, once installed
        self.forwards = []
        self.cluster_objects = []   # (kind, name) of cluster-scoped objects to delete at the end
        self.tmp = os.path.join(chain.tmp, ns)
        os.makedirs(self.tmp)

    def controller(self, *extra):
        c = Controller(self.chain, self.ns, *extra)
        self.controllers.append(c)
        return c

    # ---- the controller installed by the Helm chart

    def helm_env(self):
        env = self.chain.cluster.kubectl_env()
        env.update(HELM_CACHE_HOME=os.path.join(self.tmp, "helm-cache"),
                   HELM_CONFIG_HOME=os.path.join(self.tmp, "helm-config"),
                   HELM_DATA_HOME=os.path.join(self.tmp, "helm-data"))
        return env

    def helm_controller(self, release=None, store_on_node=False, **values):
        """`helm install` of charts/aiprof into this namespace: one replica of the controller
        image imported here, watching this namespace, the injector image, and `values`
        (--set KEY=VALUE); waits until the controller pod is ready.

        The one change to the chart as rendered is made by a post-renderer,
        e2e/helm_kit_network.py: host networking and KUBERNETES_SERVICE_HOST=127.0.0.1 /
        KUBERNETES_SERVICE_PORT=<API port> for the controller pod, because on this kit the API
        server listens on 127.0.0.1 only and there is no kube-proxy to route the `kubernetes`
        Service (../shared/k8s/README.md, "Limits"). A user's cluster needs none of this. With
        host networking the metrics port is the host's, so a free one is picked. The release
        name is unique (the chart's node-reading ClusterRole is named after it) and contains
        "aiprof", so the chart names its objects after the release alone."""
        release = release or f"aiprof-e2e-{uuid.uuid4().hex[:4]}"
        with socket.socket() as s:
            s.bind(("0.0.0.0", 0))
            port = s.getsockname()[1]
        sets = {"controller.image.repository": CONTROLLER_IMAGE.split(":")[0],
                "controller.image.tag": CONTROLLER_IMAGE.split(":")[1],
                "controller.image.pullPolicy": "Never",
                "controller.replicas": "1",
                "controller.watchNamespace": self.ns,
                # the release's namespace is the sessions' here: deny only the system's
                "controller.deniedNamespaces": "{kube-system}",
                "controller.logLevel": "debug",
                "controller.metricsPort": str(port),
                "injector.image.repository": INJECTOR_IMAGE.split(":")[0],
                "injector.image.tag": INJECTOR_IMAGE.split(":")[1],
                "injector.image.pullPolicy": "Never",
                "injector.grace": "40s",
                "injector.targetWait": "30s"}
        if store_on_node:
            # no cluster DNS here: the injector pods reach the host-network controller on the
            # node's address (the chart's default is the metrics Service's DNS name)
            sets["store.url"] = f"http://{self.chain.node_ip}:{port}"
        sets.update(values)
        api_port = self.chain.cluster.api_url.rsplit(":", 1)[1]
        argv = [HELM, "install", release, CHART, "-n", self.ns, "--wait", "--timeout", "90s",
                "--post-renderer", os.path.join(HERE, "helm_kit_network.py"), "--post-renderer-args", api_port]
        for k, v in sets.items():
            argv += ["--set-string" if k.startswith("s3.") else "--set", f"{k}={v}"]
        self.helm_release = release
        r = subprocess.run(argv, env=self.helm_env(), capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, f"helm install: {r.stdout}\n{r.stderr}\n{self.debug()}"
        # the chart made the injector namespace; the admin's Secret goes there, as the
        # install notes say (copied from the test namespace's)
        self.inj_ns = sets.get("injector.namespace") or f"{self.ns}-injectors"
        secret = self.kube.get(f"/api/v1/namespaces/{self.ns}/secrets/s3-creds").json
        secret["metadata"] = {"name": "s3-creds"}
        assert self.kube.post(f"/api/v1/namespaces/{self.inj_ns}/secrets", secret).status == 201
        return port

    def helm_logs(self):
        r = self.kubectl("logs", f"deployment/{self.helm_release}", "--all-containers", "--tail=-1")
        return r.stdout + r.stderr

    # ----

    def kubectl(self, *args, **kw):
        return kubectl(self.chain, "-n", self.ns, *args, **kw)

    def apply(self, obj):
        path = os.path.join(self.tmp, f"{obj['kind'].lower()}-{obj['metadata']['name']}.json")
        with open(path, "w") as f:
            json.dump(obj, f)
        r = self.kubectl("apply", "-f", path)
        assert r.returncode == 0, r.stderr
        return r

    def secret(self, name="s3-creds", key_id=None, secret_key=None):
        e = self.rgw.env
        r = self.kubectl("create", "secret", "generic", name,
                         f"--from-literal=AWS_ACCESS_KEY_ID={key_id or e['AWS_ACCESS_KEY_ID']}",
                         f"--from-literal=AWS_SECRET_ACCESS_KEY={secret_key or e['AWS_SECRET_ACCESS_KEY']}")
        assert r.returncode == 0, r.stderr

    def s3_forward(self, upstream):
        """An endpoint on the node's bridge address for a loopback server (the fault proxy)."""
        f = S3Forward(self.chain.node_ip, upstream)
        self.forwards.append(f)
        return f.endpoint

    def pod(self, name, trainer_args, labels=None, shm_dir=None, extra_volumes=(), secret_volume=None):
        """A target pod: the trainer (one process) in the trainer image; the scheduler places it
        on the node. secret_volume: the name of a Secret the pod mounts (optional: true) at
        /var/run/secrets/e2e, so that the node is allowed to read it (see
        test_session_by_ephemeral_container)."""
        vols, mounts = [], []
        if secret_volume:
            vols.append({"name": "e2e-secret", "secret": {"secretName": secret_volume, "optional": True}})
            mounts.append({"name": "e2e-secret", "mountPath": "/var/run/secrets/e2e", "readOnly": True})
        if shm_dir:
            vols.append({"name": "shm", "hostPath": {"path": shm_dir, "type": "Directory"}})
            mounts.append({"name": "shm", "mountPath": "/dev/shm"})
        for name_, path, mount in extra_volumes:
            vols.append({"name": name_, "hostPath": {"path": path, "type": "Directory"}})
            mounts.append({"name": name_, "mountPath": mount})
        spec = {"restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
                "automountServiceAccountToken": False,
                "containers": [{"name": "trainer", "image": TRAINER_IMAGE, "imagePullPolicy": "Never",
                                "args": list(trainer_args), "volumeMounts": mounts}],
                "volumes": vols}
        pod = {"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": name, "namespace": self.ns, "labels": labels or {"app": "trainer"}},
               "spec": spec}
        self.apply(pod)
        return pod

    def ranks(self, n, job, *trainer_args, run_seconds=300):
        """N pods job-0..job-N-1, labels {job: JOB}; their /dev/shm is one host folder (the fake
        NCCL's shared memory), and /nccl holds the communicator id file rank 0 writes."""
        shm = os.path.join(self.tmp, f"{job}-shm")
        ids = os.path.join(self.tmp, f"{job}-nccl")
        os.makedirs(shm, mode=0o1777)
        os.chmod(shm, 0o1777)
        os.makedirs(ids)
        pods = [f"{job}-{r}" for r in range(n)]
        for r, name in enumerate(pods):
            self.pod(name, ["--rank", str(r), "--world", str(n), "--nccl-id-file", "/nccl/id",
                           "--run-seconds", str(run_seconds), *trainer_args],
                     labels={"job": job, "rank": str(r)}, shm_dir=shm, extra_volumes=[("nccl", ids, "/nccl")])
        for name in pods:
            self.wait_running(name)
        # every rank has joined the communicator once each has printed "ready"
        wait_for(lambda: all("ready pid=" in self.logs(p) for p in pods), 60, "every rank to join the communicator",
                 interval=0.5)
        return pods

    def get_pod(self, name):
        r = self.kube.get(f"/api/v1/namespaces/{self.ns}/pods/{name}")
        return r.json if r.status == 200 else None

    def wait_running(self, name, timeout=60):
        def ok():
            p = self.get_pod(name)
            return p if p and p["status"].get("phase") == "Running" else None
        try:
            return wait_for(ok, timeout, f"pod {name} to run")
        except AssertionError as e:
            raise AssertionError(f"{e}\n{self.debug()}") from None

    def logs(self, pod, container=None, ns=None):
        """What the container printed (`kubectl logs`), "" when there is nothing (yet)."""
        r = kubectl(self.chain, "-n", ns or self.ns, "logs", pod, *(["-c", container] if container else []),
                    "--tail=-1")
        return r.stdout if r.returncode == 0 else ""

    # ---- the containers on the node, as its containerd sees them

    @staticmethod
    def _status(pod, container, ephemeral=False):
        key = "ephemeralContainerStatuses" if ephemeral else "containerStatuses"
        return next((s for s in (pod or {}).get("status", {}).get(key) or [] if s["name"] == container), None)

    def container_id(self, pod, container, ephemeral=False):
        """The runtime's id (no `containerd://`) of a container of a pod, None before it has one."""
        s = self._status(self.get_pod(pod), container, ephemeral)
        cid = s and s.get("containerID")
        return cid.split("://", 1)[1] if cid else None

    def container_spec(self, cid):
        """The OCI runtime spec containerd gave runc for the container (`ctr containers info`)."""
        r = self.chain.ctr("containers", "info", cid)
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)["Spec"]

    def container_pid(self, cid):
        """The host pid of the container's init process (`ctr tasks ls`), None when not running."""
        r = self.chain.ctr("tasks", "ls")
        for line in r.stdout.splitlines()[1:]:
            f = line.split()
            if len(f) >= 3 and f[0] == cid and f[2] == "RUNNING":
                return int(f[1])
        return None

    def kill_container(self, cid, sig="SIGKILL"):
        """Sends sig to the container's processes through containerd (as an OOM kill or a
        crash would end them), not through the API."""
        r = self.chain.ctr("tasks", "kill", "--all", "-s", sig, cid)
        assert r.returncode == 0, r.stderr

    def container_running(self, pod, container):
        """The container runs, as the API and the node's containerd both say."""
        s = self._status(self.get_pod(pod), container)
        if not s or "running" not in s.get("state", {}):
            return False
        return self.container_pid(s["containerID"].split("://", 1)[1]) is not None

    # ---- sessions

    def session(self, name, targets, duration="3s", endpoint=None, secret="s3-creds", prefix="e2e", **spec):
        s = {"apiVersion": "aiprof.io/v1alpha1", "kind": "ProfilingSession",
             "metadata": {"name": name, "namespace": self.ns},
             "spec": {"targets": targets, "duration": duration,
                      "output": {"s3": {"endpoint": endpoint or self.s3_endpoint, "bucket": self.rgw.bucket,
                                        "prefix": prefix, "region": self.rgw.env["AWS_REGION"],
                                        "secretRef": {"name": secret}}}}}
        s["spec"].update(spec)
        self.apply(s)
        return s

    def get_session(self, name):
        r = self.kube.get(f"{GROUP}/namespaces/{self.ns}/profilingsessions/{name}")
        return r.json if r.status == 200 else None

    def kubectl_phase(self, name):
        """The phase as a user sees it: `kubectl get profilingsessions NAME`."""
        r = self.kubectl("get", "profilingsessions", name, "-o", "jsonpath={.status.phase}")
        return r.stdout.strip() if r.returncode == 0 else None

    def wait_phase(self, name, phases, timeout=90):
        phases = (phases,) if isinstance(phases, str) else tuple(phases)
        seen = []

        def ok():
            p = self.kubectl_phase(name)
            if p and (not seen or seen[-1] != p):
                seen.append(p)
            return p in phases
        try:
            wait_for(ok, timeout, f"session {name} to reach {'/'.join(phases)}", interval=0.3)
        except AssertionError as e:
            raise AssertionError(f"{e}; phases seen {seen}; status "
                                 f"{json.dumps((self.get_session(name) or {}).get('status'))[:3000]}\n"
                                 f"{self.debug()}") from None
        return self.get_session(name), seen

    def injector_pods(self, session=None):
        """The sessions' injector (and merge) pods: in the test namespace, and in the chart's
        injector namespace for a Helm-installed controller."""
        items = []
        for ns in (self.ns, self.inj_ns):
            if ns:
                items += self.kube.get(f"/api/v1/namespaces/{ns}/pods",
                                       query={"labelSelector": "aiprof.io/session-uid"}).json["items"]
        return [p for p in items if session is None or p["metadata"]["labels"].get("aiprof.io/session") == session]

    def debug(self):
        """What to read when something went wrong: pods, their containers' output (kubectl
        logs), the controllers' log tails, the namespace's events."""
        out = []
        pods = self.kube.get(f"/api/v1/namespaces/{self.ns}/pods").json["items"]
        if self.inj_ns:
            pods += self.kube.get(f"/api/v1/namespaces/{self.inj_ns}/pods").json.get("items", [])
        for p in pods:
            name = p["metadata"]["name"]
            out.append(f"pod {name}: {p['status'].get('phase')} "
                       f"{json.dumps(p['status'].get('containerStatuses'))[:1500]}")
            for c in p["spec"]["containers"] + (p["spec"].get("ephemeralContainers") or []):
                out.append(f"--- {name}/{c['name']} output:\n"
                           f"{self.logs(name, c['name'], p['metadata']['namespace'])[-3000:]}")
        for c in self.controllers:
            out.append("--- controller log:\n" + c.text()[-3000:])
        if self.helm_release:
            out.append("--- controller (Helm) log:\n" + self.helm_logs()[-3000:])
        r = self.kubectl("get", "events", "--sort-by=.lastTimestamp")
        out.append("--- events:\n" + r.stdout[-3000:])
        kubelet = [line for line in self.chain.cluster.log("kubelet").splitlines() if self.ns in line]
        out.append("--- the kubelet's log, lines naming the namespace:\n" + "\n".join(kubelet[-15:])[-3000:])
        return "\n".join(out)

    # ---- the bucket

    def s3(self):
        return self.rgw.boto3()

    def get_object(self, url):
        assert url.startswith(f"s3://{self.rgw.bucket}/"), url
        key = url.split("/", 3)[3]
        return self.s3().get_object(Bucket=self.rgw.bucket, Key=key)["Body"].read()

    def list_keys(self, prefix):
        r = self.s3().list_objects_v2(Bucket=self.rgw.bucket, Prefix=prefix)
        return sorted(o["Key"] for o in r.get("Contents") or [])


def merged_artifacts(st):
    return {a["name"]: a for a in st.get("artifacts") or [] if a.get("target") == "merged"}


def residual_skew(merged_summary):
    """{p50, max, collectives} in microseconds, from a merged summary.json (aiprof.merge/v1)."""
    return merged_summary["alignment"]["residual_skew_us"]


def sha256(b):
    return hashlib.sha256(b).hexdigest()


def gunzip_json(b):
    return json.loads(gzip.decompress(b))


def b64(s):
    return base64.b64encode(s.encode()).decode()

