# SPDX-License-Identifier: MIT
"""The end-to-end chain, with real parts: the Kubernetes API double (tests/kubeapi, HTTPS), the
real build/aiprof-controller, the real kubectl, Ceph radosgw (tests/s3/radosgw.sh) and runc
containers started by the kubelet double (e2e/kubelet.py) for one node, "node-e2e".

Chain: one API server, one radosgw, one kubelet (the tests share one per pytest session).
Env: a namespace with the S3 Secret, and the controllers scoped to it (--namespace). Every
process is stopped by its PID and every container by the runc id it was created with."""
import base64
import gzip
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
BUILD = os.path.join(ROOT, os.environ.get("BUILD", "build"))
CONTROLLER = os.path.join(BUILD, "aiprof-controller")
AIPROF = os.path.join(BUILD, "aiprof")
LIBAIPROF = os.path.join(BUILD, "libaiprof.so")
TRAINER = os.path.join(BUILD, "tests", "workloads", "trainer")
DOUBLES = os.path.join(BUILD, "tests", "doubles")
KUBECTL = "/usr/bin/kubectl"
NODE = "node-e2e"
INJECTOR_IMAGE = "aiprof/injector:e2e"
TRAINER_IMAGE = "aiprof-e2e/trainer:e2e"
GROUP = "/apis/aiprof.io/v1alpha1"

for d in (ROOT, os.path.join(ROOT, "tests", "kubeapi"), os.path.join(ROOT, "tests", "s3"),
          os.path.join(ROOT, "tests", "runc")):
    if d not in sys.path:
        sys.path.insert(0, d)

import harness  # noqa: E402
import runcenv  # noqa: E402
import s3env  # noqa: E402
from fakeapi.client import Kube, launch  # noqa: E402
from e2e.kubelet import Image, Kubelet  # noqa: E402


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


def images(store):
    """The image contents the kubelet double knows: the injector image (injector_image_layout;
    the BPF programs are inside aiprof as skeletons) and the trainer image: the test trainer with
    the fake CUDA/NCCL/ibverbs libraries beside it (its RUNPATH is $ORIGIN/../doubles) and the fake
    CUPTI in doubles/cupti. Both are
    snapshots of the build taken when the chain starts."""
    doubles = {f"/opt/trainer/doubles/{f}": os.path.join(DOUBLES, f) for f in sorted(os.listdir(DOUBLES))
               if ".so" in f} if os.path.isdir(DOUBLES) else {}
    cupti = os.path.join(DOUBLES, "cupti")      # the fake CUPTI (`trainer --cupti` loads it)
    if os.path.isdir(cupti):
        doubles.update({f"/opt/trainer/doubles/cupti/{f}": os.path.join(cupti, f) for f in sorted(os.listdir(cupti))
                        if ".so" in f})
    doubles["/opt/trainer/workloads/trainer"] = TRAINER
    files, entrypoint = injector_image_layout()
    return {
        INJECTOR_IMAGE: Image(files, entrypoint=entrypoint).snapshot(os.path.join(store, "injector")),
        TRAINER_IMAGE: Image(doubles, entrypoint=["/opt/trainer/workloads/trainer"],
                             workdir="/").snapshot(os.path.join(store, "trainer")),
    }


def wait_for(fn, timeout=30.0, what="condition", interval=0.1):
    """harness.wait_for with the chain's longer default (containers start slowly)."""
    return harness.wait_for(fn, timeout, what, interval)


def missing():
    """Why the chain cannot run here (None when it can)."""
    if os.geteuid() != 0:
        return "the end-to-end chain runs as root (runc, ptrace, eBPF)"
    for p in (CONTROLLER, AIPROF, LIBAIPROF, TRAINER, KUBECTL):
        if not os.path.exists(p):
            return f"{p} is missing (make -j2; kubectl: scripts/install-deps.sh)"
    if not runcenv.runc_available():
        return "runc is not installed (scripts/install-deps.sh)"
    absent = s3env.missing_ceph()
    if absent:
        return "Ceph radosgw is not installed (missing " + ", ".join(absent) + "): scripts/install-deps.sh"
    return None


class Chain:
    """The session-wide parts."""

    def __init__(self):
        self.tmp = tempfile.mkdtemp(prefix="aiprof-e2e-")
        self.api_proc = None
        self.rgw = None
        self.runc = None
        self.kubelet = None

    def start(self):
        self.rgw = s3env.Radosgw().start()
        self.api_proc, self.ep = launch(os.path.join(self.tmp, "api"), "--bookmark-interval", "1",
                                        "--log", os.path.join(self.tmp, "api.log"))
        self.kubeconfig = self.ep["kubeconfig"]
        self.kube = Kube(self.ep["server"], self.ep["ca"], self.ep["token"], user_agent="kubelet/e2e-double")
        r = kubectl(self, "apply", "-f", os.path.join(ROOT, "crds"))
        assert r.returncode == 0, r.stderr
        self.runc = runcenv.RuncEnv(os.path.join(self.tmp, "runc"))
        self.kubelet = Kubelet(self.kube, NODE, self.runc, images(os.path.join(self.tmp, "images")), os.path.join(self.tmp, "kubelet"),
                               sa_dir=os.path.join(self.tmp, "api", "serviceaccount"),
                               ca_file=self.ep["ca"], grace_cap=3.0,
                               service_ports=[int(self.rgw.hostport.rsplit(":", 1)[1])]).start()
        return self

    def stop(self):
        if self.kubelet:
            self.kubelet.stop()
        if self.runc:
            self.runc.cleanup(keep_files=True)
        if self.api_proc:
            harness.stop_api(self.api_proc)
        if self.rgw:
            self.rgw.stop()
        # logs, bundles and image snapshots: kept for a look with AIPROF_E2E_KEEP=1
        if os.environ.get("AIPROF_E2E_KEEP") == "1":
            print(f"e2e: kept {self.tmp}")
        else:
            shutil.rmtree(self.tmp, ignore_errors=True)


def kubectl(chain, *args, timeout=60, input=None):
    return subprocess.run([KUBECTL, "--kubeconfig", chain.kubeconfig, *args], capture_output=True,
                          text=True, timeout=timeout, input=input)


class Controller(harness.ControllerProcess):
    """One aiprof-controller process scoped to a namespace; log kept in a file."""

    def __init__(self, chain, ns, *extra):
        args = harness.controller_args(CONTROLLER, ns, *extra, kubeconfig=chain.kubeconfig,
                                       target_wait="30s", grace="40s",
                                       injector_image=INJECTOR_IMAGE,
                                       identity=f"e2e-{uuid.uuid4().hex[:6]}")
        env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG" and not k.startswith("AWS_")}
        super().__init__(args, os.path.join(chain.tmp, f"{ns}-controller-{uuid.uuid4().hex[:6]}.log"), env)


def new_env(chain, ns):
    """A namespace with the S3 credentials Secret."""
    r = kubectl(chain, "create", "namespace", ns)
    assert r.returncode == 0, r.stderr
    e = Env(chain, ns)
    e.secret()
    return e


def end_env(e):
    """Stops its controllers, deletes the namespace and waits for the kubelet to stop its pods.
    Returns the controllers' logs."""
    chain, ns = e.chain, e.ns
    for c in e.controllers:
        c.stop()
    for kind, name in e.cluster_objects:
        kubectl(chain, "delete", kind, name, "--wait=false")
    kubectl(chain, "delete", "namespace", ns, "--wait=false")
    wait_for(lambda: all(r.gone for r in list(chain.kubelet.pods.values()) if r.ns == ns), 30,
             f"the kubelet to stop the pods of {ns}")
    return [c.text() for c in e.controllers]


class Env:
    """One namespace on the chain."""

    def __init__(self, chain, ns):
        self.chain, self.ns = chain, ns
        self.kube, self.rgw = chain.kube, chain.rgw
        self.controllers = []
        self.cluster_objects = []   # (kind, name) of cluster-scoped objects to delete at the end
        self.tmp = os.path.join(chain.tmp, ns)
        os.makedirs(self.tmp)

    def controller(self, *extra):
        c = Controller(self.chain, self.ns, *extra)
        self.controllers.append(c)
        return c

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

    def pod(self, name, trainer_args, labels=None, shm_dir=None, extra_volumes=(), runtime_class=None):
        """A target pod on the node: the trainer (one process) in the trainer image."""
        vols, mounts = [], []
        if shm_dir:
            vols.append({"name": "shm", "hostPath": {"path": shm_dir, "type": "Directory"}})
            mounts.append({"name": "shm", "mountPath": "/dev/shm"})
        for name_, path, mount in extra_volumes:
            vols.append({"name": name_, "hostPath": {"path": path, "type": "Directory"}})
            mounts.append({"name": name_, "mountPath": mount})
        spec = {"nodeName": NODE, "restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
                "automountServiceAccountToken": False,
                "containers": [{"name": "trainer", "image": TRAINER_IMAGE, "args": list(trainer_args),
                                "volumeMounts": mounts}],
                "volumes": vols}
        if runtime_class:
            spec["runtimeClassName"] = runtime_class
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
        os.makedirs(ids)
        pods = [f"{job}-{r}" for r in range(n)]
        for r, name in enumerate(pods):
            self.pod(name, ["--rank", str(r), "--world", str(n), "--nccl-id-file", "/nccl/id",
                           "--run-seconds", str(run_seconds), *trainer_args],
                    labels={"job": job, "rank": str(r)}, shm_dir=shm, extra_volumes=[("nccl", ids, "/nccl")])
        for name in pods:
            self.wait_running(name)
        # every rank has joined the communicator once each has printed "ready"
        kubelet = self.chain.kubelet
        wait_for(lambda: all("ready pid=" in kubelet.container_of(self.ns, p, "trainer").output() for p in pods),
                 60, "every rank to join the communicator")
        return pods

    def get_pod(self, name):
        r = self.kube.get(f"/api/v1/namespaces/{self.ns}/pods/{name}")
        return r.json if r.status == 200 else None

    def wait_running(self, name, timeout=30):
        def ok():
            p = self.get_pod(name)
            return p if p and p["status"].get("phase") == "Running" else None
        return wait_for(ok, timeout, f"pod {name} to run")

    def session(self, name, targets, duration="3s", endpoint=None, secret="s3-creds", prefix="e2e", **spec):
        s = {"apiVersion": "aiprof.io/v1alpha1", "kind": "ProfilingSession",
             "metadata": {"name": name, "namespace": self.ns},
             "spec": {"targets": targets, "duration": duration,
                      "output": {"s3": {"endpoint": endpoint or self.rgw.endpoint, "bucket": self.rgw.bucket,
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
        items = self.kube.get(f"/api/v1/namespaces/{self.ns}/pods",
                              query={"labelSelector": "aiprof.io/session-uid"}).json["items"]
        return [p for p in items if session is None or p["metadata"]["labels"].get("aiprof.io/session") == session]

    def debug(self):
        """What to read when something went wrong: pods, controller log tail, kubelet log tail."""
        out = []
        for p in self.kube.get(f"/api/v1/namespaces/{self.ns}/pods").json["items"]:
            out.append(f"pod {p['metadata']['name']}: {p['status'].get('phase')} "
                       f"{json.dumps(p['status'].get('containerStatuses'))[:1500]}")
            run = self.chain.kubelet.pod_run(self.ns, p["metadata"]["name"])
            if run:
                for n, c in list(run.containers.items()) + list(run.ephemeral.items()):
                    out.append(f"--- {n} output:\n{c.output()[-3000:]}")
        for c in self.controllers:
            out.append("--- controller log:\n" + c.text()[-3000:])
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
