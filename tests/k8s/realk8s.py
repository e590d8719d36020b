# SPDX-License-Identifier: MIT
"""A real Kubernetes for the tests: the kit in ../shared/k8s (kube-apiserver, controller
manager, scheduler, kubelet on containerd + runc, v1.32), started once per test process and
stopped by its own stop scripts, which stop exactly the PIDs its start scripts wrote down and
undo what the node changed on the host (bridge, /etc/hosts line, cgroup, mounts).

    c = realk8s.shared()          # starts it on first use (control plane and node)
    c.kubectl("get", "nodes")     # the kit's kubectl (same version as the server)
    realk8s.stop_shared()         # from pytest_sessionfinish: stops it if it was started

Settings, for running two suites side by side: AIPROF_TEST_K8S_STATE (state dir, default
/tmp/aiprof-k8s-test-<uid>), AIPROF_TEST_K8S_PORT_BASE (the API server listens there, the
other components just above it; default 17443), AIPROF_TEST_K8S_BRIDGE and
AIPROF_TEST_K8S_SUBNET (default akt0, 10.246.0.0/24). AIPROF_K8S_KIT points at the kit
(default ../shared/k8s beside the repository). AIPROF_TEST_K8S_KEEP=1 keeps the state dir
(logs) after the stop."""
import atexit
import json
import os
import shutil
import subprocess
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
KIT = os.environ.get("AIPROF_K8S_KIT") or os.path.join(os.path.dirname(ROOT), "shared", "k8s")
PACKAGES = {"etcd": "etcd-server", "containerd": "containerd", "runc": "runc",
            "/usr/lib/cni/bridge": "containernetworking-plugins", "xz": "xz-utils", "ip": "iproute2"}


def missing():
    """Why the real cluster cannot run here (None when it can)."""
    if os.geteuid() != 0:
        return "the real Kubernetes kit runs as root (etcd, containerd, kubelet, a bridge)"
    if not os.path.isfile(os.path.join(KIT, "start-cluster.sh")):
        return f"the Kubernetes kit is not at {KIT} (set AIPROF_K8S_KIT)"
    for exe, pkg in PACKAGES.items():
        if not (os.access(exe, os.X_OK) if exe.startswith("/") else shutil.which(exe)):
            return f"{exe} is missing: install the Debian package {pkg} (scripts/install-deps.sh)"
    return None


def settings():
    base = int(os.environ.get("AIPROF_TEST_K8S_PORT_BASE", "17443"))
    return {
        "AIPROF_K8S_STATE": os.environ.get("AIPROF_TEST_K8S_STATE", f"/tmp/aiprof-k8s-test-{os.getuid()}"),
        "AIPROF_K8S_API_PORT": str(base),
        "AIPROF_K8S_ETCD_PORT": str(base + 1),
        "AIPROF_K8S_ETCD_PEER_PORT": str(base + 2),
        "AIPROF_K8S_KCM_PORT": str(base + 3),
        "AIPROF_K8S_SCHED_PORT": str(base + 4),
        "AIPROF_K8S_KUBELET_PORT": str(base + 5),
        "AIPROF_K8S_KUBELET_HEALTHZ_PORT": str(base + 6),
        "AIPROF_K8S_BRIDGE": os.environ.get("AIPROF_TEST_K8S_BRIDGE", "akt0"),
        "AIPROF_K8S_POD_SUBNET": os.environ.get("AIPROF_TEST_K8S_SUBNET", "10.246.0.0/24"),
    }


class Cluster:
    """One started kit: control plane and node."""

    def __init__(self):
        self.env = dict(os.environ)
        self.env.update(settings())
        self.state = self.env["AIPROF_K8S_STATE"]
        # every request the API server answers, with its user and code, for the RBAC test;
        # the policy lives beside the state dir because the start script creates that afresh
        self.audit_log = os.path.join(self.state, "logs", "audit.log")
        self.audit_policy = self.state.rstrip("/") + "-audit-policy.yaml"
        with open(self.audit_policy, "w") as f:
            f.write("apiVersion: audit.k8s.io/v1\nkind: Policy\nomitStages: [RequestReceived]\n"
                    "rules:\n- level: Metadata\n")
        self.env["AIPROF_K8S_APISERVER_ARGS"] = " ".join(filter(None, [
            self.env.get("AIPROF_K8S_APISERVER_ARGS"), f"--audit-policy-file={self.audit_policy}",
            f"--audit-log-path={self.audit_log}", "--audit-log-format=json", "--audit-log-maxsize=200"]))
        self.started = False
        self.startup_s = None

    def _script(self, name, timeout):
        return subprocess.run([os.path.join(KIT, name)], env=self.env, capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL)

    def start(self):
        # a state dir left by a killed run: its stop script stops what is still running
        if os.path.exists(os.path.join(self.state, "control-plane.pids")) or \
                os.path.exists(os.path.join(self.state, "node.pids")):
            self._script("stop-cluster.sh", 120)
        t0 = time.monotonic()
        r = self._script("start-cluster.sh", 300)
        if r.returncode != 0 and "missing after import" in r.stderr:
            # start-node.sh checks the imported sandbox image with `ctr images ls -q | grep -q`
            # under pipefail: when grep exits at its match before ctr has written every line,
            # ctr dies of SIGPIPE and the check fails with the image present. The start
            # undid itself; once more.
            r = self._script("start-cluster.sh", 300)
        if r.returncode != 0:
            raise AssertionError(f"the real Kubernetes did not start (state {self.state}):\n"
                                 f"{r.stdout[-2000:]}\n{r.stderr[-4000:]}")
        self.started = True
        self.startup_s = time.monotonic() - t0
        with open(os.path.join(self.state, "env")) as f:
            kv = dict(line.rstrip("\n").split("=", 1) for line in f if "=" in line)
        self.kubeconfig = kv["KUBECONFIG"]
        self.cachedir = kv["KUBECACHEDIR"]
        self.api_url = kv["AIPROF_K8S_API_URL"]
        self.kubectl_bin = kv["AIPROF_K8S_KUBECTL"]
        self.node = kv["AIPROF_K8S_NODE_NAME"]
        self.node_ip = kv["AIPROF_K8S_NODE_IP"]
        self.containerd_sock = kv["AIPROF_K8S_CONTAINERD_SOCK"]
        self.snapshotter = kv.get("AIPROF_K8S_SNAPSHOTTER", "overlayfs")
        self.bin = os.path.dirname(self.kubectl_bin)
        self.pki = os.path.join(self.state, "pki")
        self.ca_file = os.path.join(self.pki, "ca.crt")
        return self

    def stop(self):
        if not self.started:
            return
        self.started = False
        r = self._script("stop-cluster.sh", 180)
        if r.returncode != 0:
            raise AssertionError(f"stop-cluster.sh failed:\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}")
        left = self.leftovers()
        if left:
            raise AssertionError(f"the stopped cluster left behind: {left}")
        if os.environ.get("AIPROF_TEST_K8S_KEEP") != "1":
            shutil.rmtree(self.state, ignore_errors=True)
            try:
                os.unlink(self.audit_policy)
            except FileNotFoundError:
                pass

    def leftovers(self):
        """What of this cluster is still on the host after its stop: its bridge, its
        /etc/hosts line, a process it started, a mount below its state dir."""
        out = []
        bridge = self.env["AIPROF_K8S_BRIDGE"]
        if os.path.exists(f"/sys/class/net/{bridge}"):
            out.append(f"bridge {bridge}")
        with open("/etc/hosts") as f:
            if any(line.rstrip().endswith(f"# aiprof-k8s node of {self.state}") for line in f):
                out.append("the /etc/hosts line")
        with open("/proc/self/mountinfo") as f:
            mounts = [line.split()[4] for line in f if line.split()[4].startswith(self.state + "/")]
        out += [f"mount {m}" for m in mounts]
        for pidfile in ("control-plane.pids", "node.pids"):
            try:
                with open(os.path.join(self.state, pidfile)) as f:
                    for line in f:
                        parts = line.split()
                        if len(parts) < 2 or not parts[0].isdigit():
                            continue
                        try:         # the same program, not a later process that got the pid
                            exe = os.readlink(f"/proc/{parts[0]}/exe")
                        except OSError:
                            continue
                        if os.path.basename(exe.replace(" (deleted)", "")) == os.path.basename(parts[1]):
                            out.append(f"process {line.strip()}")
            except FileNotFoundError:
                pass
        return out

    def kubectl_env(self, kubeconfig=None):
        env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG" and not k.startswith("AWS_")}
        env["KUBECONFIG"] = kubeconfig or self.kubeconfig
        env["KUBECACHEDIR"] = self.cachedir
        return env

    def kubectl(self, *args, ok=False, timeout=60, input=None, kubeconfig=None, binary=None):
        """The kit's kubectl (or `binary`) as the cluster admin (or with `kubeconfig`)."""
        r = subprocess.run([binary or self.kubectl_bin, *args], capture_output=True, text=True,
                           timeout=timeout, input=input, env=self.kubectl_env(kubeconfig))
        if ok and r.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args)} exited {r.returncode}:\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}")
        return r

    def get(self, *args):
        """An object or list as JSON (`kubectl get ... -o json`), None when it is not there."""
        r = self.kubectl("get", *args, "-o", "json")
        if r.returncode != 0:
            if "NotFound" in r.stderr or "not found" in r.stderr:
                return None
            raise AssertionError(f"kubectl get {' '.join(args)}: {r.stderr}")
        return json.loads(r.stdout)

    def apply(self, obj, *flags, ns=None, ok=True):
        """kubectl apply --server-side of one object (a dict)."""
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            json.dump(obj, f)
        try:
            argv = ["apply", "--server-side", "-f", f.name, *flags]
            if ns:
                argv += ["-n", ns]
            return self.kubectl(*argv, ok=ok)
        finally:
            os.unlink(f.name)

    def apply_crds(self, *paths):
        """`kubectl apply --server-side` of CRD files or folders (taking over fields another
        manager set), then waits until every CRD is Established."""
        for p in paths:
            self.kubectl("apply", "--server-side", "--force-conflicts", "-f", p, ok=True)
        self.kubectl("wait", "--for=condition=Established", "crd", "--all", "--timeout=60s", ok=True)

    def ensure_namespace(self, *names):
        for n in names:
            if self.get("namespace", n) is None:
                self.kubectl("create", "namespace", n, ok=True)

    def token(self, ns, sa, seconds=3600):
        """A token of a ServiceAccount (TokenRequest), for acting as it."""
        return self.kubectl("create", "token", sa, "-n", ns, f"--duration={seconds}s", ok=True).stdout.strip()

    def kubeconfig_for(self, path, token):
        """A kubeconfig file at path that authenticates with token (a service account's)."""
        cfg = {"apiVersion": "v1", "kind": "Config", "current-context": "sa",
               "clusters": [{"name": "k", "cluster": {"server": self.api_url, "certificate-authority": self.ca_file}}],
               "users": [{"name": "sa", "user": {"token": token}}],
               "contexts": [{"name": "sa", "context": {"cluster": "k", "user": "sa"}}]}
        with open(path, "w") as f:
            json.dump(cfg, f)
        os.chmod(path, 0o600)
        return path

    def import_image(self, tar_path):
        """Imports a docker-archive or OCI tarball into the node's containerd (k8s.io namespace)."""
        argv = ["ctr", "-a", self.containerd_sock, "-n", "k8s.io", "images", "import"]
        if self.snapshotter != "overlayfs":
            argv += ["--snapshotter", self.snapshotter]
        r = subprocess.run(argv + [tar_path], capture_output=True, text=True, timeout=300)
        if r.returncode != 0:
            raise AssertionError(f"ctr images import {tar_path}: {r.stderr[-2000:]}")
        return r.stdout

    def audit(self, user=None, since=0):
        """The API server's audit events (ResponseComplete stage) from byte offset `since`, of
        `user` if given: [(event, ...)], and the offset to read on from."""
        out = []
        with open(self.audit_log, "rb") as f:
            f.seek(since)
            data = f.read()
        end = since + data.rfind(b"\n") + 1
        for line in data[:end - since].splitlines():
            e = json.loads(line)
            if e.get("stage") == "ResponseComplete" and (user is None or e["user"]["username"] == user):
                out.append(e)
        return out, end

    def audit_offset(self):
        try:
            return os.path.getsize(self.audit_log)
        except FileNotFoundError:
            return 0

    def log(self, component):
        try:
            with open(os.path.join(self.state, "logs", f"{component}.log"), errors="replace") as f:
                return f.read()
        except FileNotFoundError:
            return ""


_shared = None


def shared():
    """The process's one cluster, started on first use; stopped by stop_shared() or at exit."""
    global _shared
    if _shared is None:
        why = missing()
        if why:
            raise RuntimeError(why)
        c = Cluster()
        atexit.register(c.stop)
        try:
            c.start()
        except BaseException:
            c.stop()
            raise
        _shared = c
    return _shared


def require():
    """shared() for a pytest fixture: the test is skipped, with the reason, where the cluster
    cannot run here."""
    import pytest
    why = missing()
    if why:
        pytest.skip(why)
    return shared()


def stop_shared():
    global _shared
    if _shared is not None:
        c, _shared = _shared, None
        c.stop()
