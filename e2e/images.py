# SPDX-License-Identifier: MIT
"""The test trainer's container image for the end-to-end chain, built without a container
engine: one layer of files copied from the build tree and this host, written as a
docker-archive tarball (manifest.json, the image config, the layer tar) that containerd imports
(`ctr images import`, tests/k8s/realk8s.py `Cluster.import_image`). (The injector and
controller images are the product's own, from `make images`: e2e/chain.py `make_images()`.)

The trainer image: build/tests/workloads/trainer at /opt/trainer/workloads/trainer with the
fake CUDA/NCCL/ibverbs libraries in /opt/trainer/doubles and the fake CUPTI in
/opt/trainer/doubles/cupti (its RUNPATH is $ORIGIN/../doubles).

No Debian base: the image holds exactly the shared-library closure of its ELF files as `ldd`
resolves it on this host (Debian 12) plus the dynamic loader, at their paths below /usr with the
usrmerge links /lib, /lib64 → usr/..., so that the binaries run in an otherwise empty root.
Files are written with mtime 0, owner 0:0 and sorted, so the same build gives the same image
id; the config's rootfs.diff_ids is the sha256 of the uncompressed layer, as the format asks."""
import hashlib
import io
import json
import os
import re
import subprocess
import tarfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def ldd_closure(paths):
    """{absolute path in the image: host file} of the shared libraries the ELF files `paths` need
    (ldd's transitive answer) and the dynamic loader. A library is placed at its directory's real
    path (/lib/x86_64-linux-gnu → /usr/lib/x86_64-linux-gnu) under the name ldd printed (the
    soname), holding the bytes of the file the soname link points to."""
    out = {}
    for p in paths:
        r = subprocess.run(["ldd", p], capture_output=True, text=True, timeout=30)
        if r.returncode != 0:
            if "not a dynamic executable" in r.stdout + r.stderr:
                continue
            raise RuntimeError(f"ldd {p}: {r.stderr.strip()}")
        for line in r.stdout.splitlines():
            m = re.match(r"\s*(\S+)\s+=>\s+(/\S+)\s+\(", line) or re.match(r"\s*(/\S+)\s+\(", line)
            if not m:
                continue        # linux-vdso.so.1, or "not found" (raised below)
            host = m.group(m.lastindex)
            if os.path.realpath(host).startswith(ROOT + os.sep):
                continue        # a library of the build tree itself: the image places those
            dest = os.path.join(os.path.realpath(os.path.dirname(host)), os.path.basename(host))
            out[dest] = os.path.realpath(host)
        if "not found" in r.stdout:
            raise RuntimeError(f"ldd {p}: a library is not found:\n{r.stdout}")
    return out


def _tarinfo(name, **kw):
    ti = tarfile.TarInfo(name.lstrip("/"))
    ti.mtime, ti.uid, ti.gid, ti.uname, ti.gname = 0, 0, 0, "", ""
    for k, v in kw.items():
        setattr(ti, k, v)
    return ti


def layer(files, dirs=(), links=None):
    """The bytes of one layer tar: files {image path: host path} (mode kept, 0755 for
    executables, 0644 else), extra directories {path: mode}, symlinks {path: target}. Every
    parent directory is listed first, as image layers are written."""
    links = dict(links or {})
    dirs = dict(dirs or {})
    for p in list(files) + list(dirs) + list(links):
        d = os.path.dirname(p)
        while d not in ("/", ""):
            if not any(d == x or d.startswith(x + "/") for x in links):
                dirs.setdefault(d, 0o755)
            d = os.path.dirname(d)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as t:
        entries = [(p, "d") for p in dirs] + [(p, "l") for p in links] + [(p, "f") for p in files]
        for path, kind in sorted(entries):
            if kind == "d":
                t.addfile(_tarinfo(path, type=tarfile.DIRTYPE, mode=dirs[path]))
            elif kind == "l":
                t.addfile(_tarinfo(path, type=tarfile.SYMTYPE, linkname=links[path], mode=0o777))
            else:
                with open(files[path], "rb") as f:
                    data = f.read()
                mode = 0o755 if os.stat(files[path]).st_mode & 0o111 else 0o644
                t.addfile(_tarinfo(path, size=len(data), mode=mode), io.BytesIO(data))
    return buf.getvalue()


def docker_archive(out_path, tag, layer_bytes, config):
    """Writes a docker-archive tarball of one layer; returns the image id (sha256 of the
    config). config: the image config's `config` part (Entrypoint, Env, User, ...)."""
    diff_id = "sha256:" + hashlib.sha256(layer_bytes).hexdigest()
    cfg = {"architecture": "amd64", "os": "linux", "created": "1970-01-01T00:00:00Z",
           "config": config, "rootfs": {"type": "layers", "diff_ids": [diff_id]},
           "history": [{"created": "1970-01-01T00:00:00Z", "created_by": "e2e/images.py"}]}
    cfg_bytes = json.dumps(cfg, sort_keys=True, separators=(",", ":")).encode()
    image_id = hashlib.sha256(cfg_bytes).hexdigest()
    layer_name = diff_id.split(":")[1] + "/layer.tar"
    manifest = [{"Config": image_id + ".json", "RepoTags": [tag], "Layers": [layer_name]}]
    with tarfile.open(out_path, "w", format=tarfile.PAX_FORMAT) as t:
        for name, data in ((image_id + ".json", cfg_bytes), (layer_name, layer_bytes),
                           ("manifest.json", json.dumps(manifest).encode())):
            t.addfile(_tarinfo(name, size=len(data), mode=0o644), io.BytesIO(data))
    return "sha256:" + image_id


# the usrmerge links of Debian 12 (ldd prints /lib/..., /lib64/ld-linux-x86-64.so.2)
USRMERGE = {"/lib": "usr/lib", "/lib64": "usr/lib64", "/bin": "usr/bin", "/sbin": "usr/sbin"}
BASE_DIRS = {"/tmp": 0o1777, "/etc": 0o755, "/dev": 0o755, "/proc": 0o755, "/sys": 0o755}


def _image(out_path, tag, files, config, extra_dirs=None):
    closure = ldd_closure([h for h in files.values() if _is_elf(h)])
    everything = dict(closure)
    everything.update(files)
    dirs = dict(BASE_DIRS)
    dirs.update(extra_dirs or {})
    return docker_archive(out_path, tag, layer(everything, dirs, USRMERGE), config)


def _is_elf(path):
    with open(path, "rb") as f:
        return f.read(4) == b"\x7fELF"


def trainer_image(out_path, tag, files):
    """files: {image path: host path} (e2e/chain.py trainer_files())."""
    return _image(out_path, tag, files,
                  {"Entrypoint": ["/opt/trainer/workloads/trainer"], "WorkingDir": "/",
                   "Env": ["PATH=/usr/bin:/bin"]})
