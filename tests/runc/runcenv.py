# SPDX-License-Identifier: MIT
"""Real containers for the tests, with runc 1.1 (cgroup v1 hybrid on this machine).

    env = RuncEnv()                                   # its own runc --root state folder
    c = env.container(["/opt/trainer/workloads/trainer", "--steps", "100"],
                      binds=[Bind(host_dir, "/opt/trainer")], env={"X": "1"})
    c.start()                                         # runc run -d --pid-file, under a shim
    c.pid, c.ns_path("net"), c.state()["status"]      # host pid of init, /proc/PID/ns/net
    c.kill("TERM"); c.wait(10)                        # -> exit code (128+signal if killed)
    c.termination_message()                           # /dev/termination-log, <= 4096 bytes
    env.cleanup()                                     # kill + delete every container it made

A container gets a fresh root filesystem folder holding the host's /usr read-only (entry by
entry as bind mounts; or, with image_root=DIR, a read-only overlay of DIR/usr over the host's
/usr — an image layer — and DIR's other top-level folders bound at /) and the merged-/usr
symlinks /bin /lib /lib64 /sbin, the /etc files programs need
(loader cache, passwd, hosts, ...), its own /proc, /dev (tmpfs), /dev/shm, /dev/mqueue, /sys
(read-only), plus the caller's binds; /dev/termination-log is a host file bind-mounted
read-write. Namespaces: each of pid, mount, network, ipc, uts is new unless the caller says
"host" (share the namespace of runc's caller) or gives a path to join (/proc/PID/ns/TYPE) —
runc joins pid/net/ipc/uts by path, but cannot join a mount namespace. Containers are only
ever addressed by the ids this object created (64 hex digits, like containerd's); each runs
under tests/runc/shim.py, which waits for its init process and records the exit status.

POSIX shared memory lives in /dev/shm: processes in different containers that share it
(the fake NCCL's communicator) need one host folder bind-mounted there in each (shm_dir=).
"""
import json
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SHIM = os.path.join(HERE, "shim.py")
TERMINATION_LIMIT = 4096        # what the kubelet reads of a termination message
CGROUP_PARENT = "aiprof-e2e"    # every container's cgroup is /aiprof-e2e/<id>
NS_OCI = {"pid": "pid", "mnt": "mount", "net": "network", "ipc": "ipc", "uts": "uts"}
NS_PROC = {v: k for k, v in NS_OCI.items()}
DEFAULT_CAPS = ["CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FSETID", "CAP_FOWNER", "CAP_MKNOD",
                "CAP_NET_RAW", "CAP_SETGID", "CAP_SETUID", "CAP_SETFCAP", "CAP_SETPCAP",
                "CAP_NET_BIND_SERVICE", "CAP_SYS_CHROOT", "CAP_KILL", "CAP_AUDIT_WRITE"]
# the pieces of the host's /etc a program of the host's /usr needs to start and resolve names
ETC_FILES = ["ld.so.cache", "ld.so.conf", "ld.so.conf.d", "passwd", "group", "nsswitch.conf",
             "hosts", "host.conf", "alternatives", "ssl", "ca-certificates", "localtime",
             "mime.types", "protocols", "services"]
# what container runtimes hide or make read-only in /proc and /sys by default
MASKED = ["/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
          "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi",
          "/sys/firmware"]
READONLY = ["/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"]


class RuncError(RuntimeError):
    pass


def runc_available(runc="runc"):
    return shutil.which(runc) is not None


class Bind:
    """A bind mount of a host path (file or folder) at `dest` inside the container."""

    def __init__(self, source, dest, readonly=True):
        self.source, self.dest, self.readonly = os.path.abspath(source), dest, readonly

    def mount(self):
        opts = ["rbind", "ro" if self.readonly else "rw"]
        return {"destination": self.dest, "type": "bind", "source": self.source, "options": opts}


def host_caps(names):
    """Kubernetes capability names (SYS_PTRACE) → OCI (CAP_SYS_PTRACE)."""
    return [n if n.startswith("CAP_") else "CAP_" + n.upper() for n in names]


class Container:
    """One runc container made by a RuncEnv. Not started until start()."""

    def __init__(self, env, cid, args, *, binds, env_vars, cwd, namespaces, caps, hostname,
                 no_new_privileges, readonly_rootfs, shm_dir, user, termination_log, image_root=None):
        self.image_root = image_root
        self.termination_dest = termination_log
        self.runcenv, self.id, self.args = env, cid, list(args)
        self.dir = os.path.join(env.workdir, cid[:16])
        self.bundle = self.dir
        self.rootfs = os.path.join(self.dir, "rootfs")
        self.log_path = os.path.join(self.dir, "output.log")
        self.status_path = os.path.join(self.dir, "exit.json")
        self.pid_file = os.path.join(self.dir, "init.pid")
        self.termination_log = os.path.join(self.dir, "termination-log") if termination_log else None
        self.pid = None
        self.shim = None
        self.started_at = None
        self.deleted = False
        os.makedirs(self.rootfs)
        self._make_rootfs()
        if self.termination_log:
            open(self.termination_log, "w").close()
        config = self._config(binds, env_vars, cwd, namespaces, caps, hostname, no_new_privileges,
                              readonly_rootfs, shm_dir, user)
        with open(os.path.join(self.dir, "config.json"), "w") as f:
            json.dump(config, f, indent=1)

    # ---- bundle

    def _make_rootfs(self):
        for d in ("proc", "dev", "sys", "etc", "tmp", "usr/local/bin", "usr/local/lib", "run", "var/tmp"):
            os.makedirs(os.path.join(self.rootfs, d), exist_ok=True)
        os.chmod(os.path.join(self.rootfs, "tmp"), 0o1777)
        for top in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
            host = "/" + top
            if os.path.islink(host):                       # merged /usr: bin -> usr/bin
                os.symlink(os.readlink(host), os.path.join(self.rootfs, top))
            elif os.path.isdir(host):
                os.makedirs(os.path.join(self.rootfs, top))

    def _config(self, binds, env_vars, cwd, namespaces, caps, hostname, no_new_privileges,
                readonly_rootfs, shm_dir, user):
        mounts = [
            {"destination": "/proc", "type": "proc", "source": "proc"},
            {"destination": "/dev", "type": "tmpfs", "source": "tmpfs",
             "options": ["nosuid", "strictatime", "mode=755", "size=65536k"]},
            {"destination": "/dev/pts", "type": "devpts", "source": "devpts",
             "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"]},
            {"destination": "/dev/mqueue", "type": "mqueue", "source": "mqueue",
             "options": ["nosuid", "noexec", "nodev"]},
            {"destination": "/sys", "type": "sysfs", "source": "sysfs",
             "options": ["nosuid", "noexec", "nodev", "ro"]},
        ]
        if shm_dir:
            mounts.append(Bind(shm_dir, "/dev/shm", readonly=False).mount())
        else:
            mounts.append({"destination": "/dev/shm", "type": "tmpfs", "source": "shm",
                           "options": ["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"]})
        host_bind = []
        img = self.image_root
        if img and os.path.isdir(os.path.join(img, "usr")):
            # the image's /usr as a layer over the host's: a read-only overlay, no upper layer
            mounts.append({"destination": "/usr", "type": "overlay", "source": "overlay",
                           "options": [f"lowerdir={os.path.join(os.path.abspath(img), 'usr')}:/usr", "ro"]})
        else:   # entry by entry, so that /usr/local stays empty and the image's
            host_bind = [Bind("/usr/" + e, "/usr/" + e) for e in sorted(os.listdir("/usr"))
                         if e != "local" and os.path.isdir("/usr/" + e) and not os.path.islink("/usr/" + e)]
        if img:
            host_bind += [Bind(os.path.join(img, e), "/" + e) for e in sorted(os.listdir(img))
                          if e != "usr" and os.path.isdir(os.path.join(img, e))]
        for top in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
            if os.path.isdir("/" + top) and not os.path.islink("/" + top):
                host_bind.append(Bind("/" + top, "/" + top))
        for name in ETC_FILES:
            if os.path.exists("/etc/" + name):
                host_bind.append(Bind("/etc/" + name, "/etc/" + name))
        mounts += [b.mount() for b in host_bind]
        mounts += [b.mount() for b in binds]
        if self.termination_log:
            mounts.append(Bind(self.termination_log, self.termination_dest, readonly=False).mount())
        ns = []
        for t in ("pid", "mount", "network", "ipc", "uts"):
            how = (namespaces or {}).get(t, "new")
            if how == "host":
                continue
            if how == "new":
                ns.append({"type": t})
            else:
                if t == "mount":
                    raise RuncError("runc cannot join a mount namespace by path")
                ns.append({"type": t, "path": how})
        uid, gid = user
        caps = host_caps(caps)
        proc = {"terminal": False, "user": {"uid": uid, "gid": gid}, "args": self.args,
                "env": [f"{k}={v}" for k, v in env_vars.items()], "cwd": cwd,
                "capabilities": {k: caps for k in ("bounding", "effective", "permitted")},
                "noNewPrivileges": bool(no_new_privileges)}
        if uid == 0:
            proc["capabilities"]["inheritable"] = []
        else:                   # a non-root process keeps its capabilities only as ambient ones
            proc["capabilities"]["inheritable"] = caps
            proc["capabilities"]["ambient"] = caps
        config = {
            "ociVersion": "1.0.2",
            "process": proc,
            "root": {"path": "rootfs", "readonly": bool(readonly_rootfs)},
            "hostname": hostname or self.id[:12],
            "mounts": mounts,
            "linux": {
                "namespaces": ns,
                "cgroupsPath": f"/{CGROUP_PARENT}/{self.id}",
                "resources": {"devices": [{"allow": False, "access": "rwm"}]},
                "maskedPaths": MASKED,
                "readonlyPaths": READONLY,
            },
        }
        if not any(n["type"] == "uts" and "path" not in n for n in ns):
            config.pop("hostname")          # runc refuses a hostname without its own uts namespace
        return config

    # ---- lifecycle

    def start(self, timeout=30):
        """runc run -d under the shim; returns the host pid of the container's init."""
        env = self.runcenv
        log = open(self.log_path, "ab")
        self.shim = subprocess.Popen(
            ["/usr/bin/python3", SHIM, "--runc", env.runc, "--root", env.state, "--bundle", self.bundle,
             "--pid-file", self.pid_file, "--status", self.status_path, "--log", self.log_path, self.id],
            stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
        log.close()
        env.started.append(self)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            st = self.exit_status()
            if st and "runcError" in st:
                raise RuncError(f"runc could not start container {self.id[:12]}: {st['runcError'].strip()}")
            if os.path.exists(self.pid_file) and os.path.getsize(self.pid_file) > 0:
                with open(self.pid_file) as f:
                    self.pid = int(f.read().strip())
                self.started_at = time.time()
                return self.pid
            if self.shim.poll() is not None and not os.path.exists(self.status_path):
                raise RuncError(f"the shim of {self.id[:12]} exited {self.shim.returncode}: {self.output()[-2000:]}")
            time.sleep(0.02)
        raise RuncError(f"container {self.id[:12]} did not start within {timeout}s: {self.output()[-2000:]}")

    def state(self):
        """`runc state` as a dict (status: created, running, stopped), or None when runc has no
        such container (deleted)."""
        r = subprocess.run([self.runcenv.runc, "--root", self.runcenv.state, "state", self.id],
                           capture_output=True, text=True, timeout=30)
        if r.returncode != 0:
            return None
        return json.loads(r.stdout)

    def exit_status(self):
        """The shim's record: {"exitCode", "signal", "finishedAt"} once init ended, else None."""
        try:
            with open(self.status_path) as f:
                return json.load(f)
        except FileNotFoundError:
            return None

    @property
    def exit_code(self):
        st = self.exit_status()
        return None if st is None else st["exitCode"]

    def running(self):
        return self.pid is not None and self.exit_status() is None

    def kill(self, sig="KILL", all_processes=False):
        """runc kill ID SIG (sig: a name without SIG, or a number). Quiet when already stopped."""
        if isinstance(sig, int):
            sig = str(sig)
        args = [self.runcenv.runc, "--root", self.runcenv.state, "kill"]
        if all_processes:
            args.append("--all")
        subprocess.run(args + [self.id, sig], capture_output=True, timeout=30)

    def wait(self, timeout=60):
        """Waits for init to end; returns its exit code (128+N when killed by signal N)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            code = self.exit_code
            if code is not None:
                return code
            time.sleep(0.05)
        raise TimeoutError(f"container {self.id[:12]} still running after {timeout}s")

    def delete(self):
        """runc delete --force: kills what is left and removes the container and its cgroup."""
        if self.deleted or self.pid is None and self.shim is None:
            self.deleted = True
            return
        subprocess.run([self.runcenv.runc, "--root", self.runcenv.state, "delete", "--force", self.id],
                       capture_output=True, timeout=60)
        if self.shim is not None:
            try:
                self.shim.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.kill(self.shim.pid, signal.SIGKILL)
                self.shim.wait()
        self.deleted = True

    # ---- what a kubelet reads

    def output(self):
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()
        except FileNotFoundError:
            return ""

    def termination_message(self):
        """The file the process wrote at /dev/termination-log: at most 4096 bytes, as the kubelet
        reads it (the rest is cut off)."""
        if not self.termination_log:
            return ""
        with open(self.termination_log, "rb") as f:
            return f.read(TERMINATION_LIMIT).decode(errors="replace")

    def ns_path(self, kind):
        """/proc/<init pid>/ns/<kind> (kind: pid, net, ipc, uts, mnt) — to join from another container."""
        if self.pid is None:
            raise RuncError(f"container {self.id[:12]} is not started")
        return f"/proc/{self.pid}/ns/{NS_PROC.get(kind, kind)}"


class RuncEnv:
    """Containers of one test (or one test module). Cleanup removes exactly those."""

    def __init__(self, workdir=None, runc="runc"):
        if not runc_available(runc):
            raise RuncError(f"{runc} is not installed (scripts/install-deps.sh installs it)")
        self.runc = shutil.which(runc)
        self.workdir = workdir or tempfile.mkdtemp(prefix="aiprof-runc-")
        os.makedirs(self.workdir, exist_ok=True)
        self.state = os.path.join(self.workdir, "runc-state")     # runc --root: ours alone
        os.makedirs(self.state, exist_ok=True)
        self.containers = []
        self.started = []

    def container(self, args, *, binds=(), env=None, cwd="/", namespaces=None, caps=None,
                  hostname=None, no_new_privileges=False, readonly_rootfs=False, shm_dir=None,
                  user=(0, 0), termination_log="/dev/termination-log", image_root=None):
        """termination_log: where the host file of termination_message() is mounted (None: none).
        image_root: a folder laid out like an image's root filesystem (see the module's doc).
        namespaces: {"pid"|"mount"|"network"|"ipc"|"uts": "new" (default) | "host" | a path}.
        caps: capability names (SYS_PTRACE or CAP_SYS_PTRACE); default: the runtime default set.
        env: a dict; PATH is added when missing."""
        cid = secrets.token_hex(32)
        env_vars = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
        env_vars.update(env or {})
        c = Container(self, cid, args, binds=list(binds), env_vars=env_vars, cwd=cwd,
                      namespaces=namespaces, caps=DEFAULT_CAPS if caps is None else caps,
                      hostname=hostname, no_new_privileges=no_new_privileges,
                      readonly_rootfs=readonly_rootfs, shm_dir=shm_dir, user=user,
                      termination_log=termination_log, image_root=image_root)
        self.containers.append(c)
        return c

    def cleanup(self, keep_files=False):
        """Kills and deletes every container this env created, then removes its folder."""
        for c in reversed(self.containers):
            try:
                c.delete()
            except Exception:       # noqa: BLE001 - go on with the others
                pass
        for ctl in os.listdir("/sys/fs/cgroup") if os.path.isdir("/sys/fs/cgroup") else []:
            try:
                os.rmdir(os.path.join("/sys/fs/cgroup", ctl, CGROUP_PARENT))
            except OSError:         # absent, or another env's containers are still in it
                pass
        if not keep_files:
            shutil.rmtree(self.workdir, ignore_errors=True)
