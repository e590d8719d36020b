# SPDX-License-Identifier: MIT
"""`make images` on this machine, with no container engine and no registry but Debian's
(scripts/build-images.sh: debootstrap, umoci, skopeo): both images build, each runs its
program under runc from the OCI bundle umoci unpacks (the injector `aiprof version`, the
controller `aiprof-controller --help` as its non-root user), they hold the packages the
Dockerfiles install, carry the chart's names, and every file's time is SOURCE_DATE_EPOCH.
The e2e chain (e2e/chain.py `make_images()`) then runs these same images on the real node."""
import json
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
import uuid

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.path.join(ROOT, os.environ.get("BUILD", "build"))
IMAGES = os.path.join(BUILD, "images")
with open(os.path.join(ROOT, "charts", "aiprof", "Chart.yaml")) as f:
    APP_VERSION = re.search(r'^appVersion: *"(.*)"', f.read(), re.M).group(1)


def run(argv, ok=True, **kw):
    r = subprocess.run(argv, capture_output=True, text=True, timeout=kw.pop("timeout", 120), **kw)
    if ok and r.returncode != 0:
        raise AssertionError(f"{' '.join(argv)} exited {r.returncode}:\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}")
    return r


@pytest.fixture(scope="module")
def images():
    for tool in ("debootstrap", "umoci", "skopeo", "runc"):
        if not shutil.which(tool):
            pytest.fail(f"{tool} is missing: scripts/install-deps.sh installs it")
    epoch = "1700000000"
    run(["make", "-s", "images"], cwd=ROOT, timeout=1200,
        env={**os.environ, "BUILD": os.path.relpath(BUILD, ROOT), "SOURCE_DATE_EPOCH": epoch})
    return int(epoch)


def unpack(name, where):
    bundle = os.path.join(where, name)
    run(["umoci", "unpack", "--image", f"{IMAGES}/oci:{name}", bundle])
    with open(os.path.join(bundle, "config.json")) as f:
        return bundle, json.load(f)


def runc(bundle, cfg, args):
    """args run in the bundle as its image says (user, env), without a terminal."""
    cfg["process"]["args"] = args
    cfg["process"]["terminal"] = False
    with open(os.path.join(bundle, "config.json"), "w") as f:
        json.dump(cfg, f)
    # runc run removes the container when its process exits
    return run(["runc", "run", "-b", bundle, f"aiprof-images-{uuid.uuid4().hex[:8]}"], ok=False, timeout=60)


@pytest.mark.parametrize("name,args,expect,user,packages", [
    ("injector", ["/usr/bin/aiprof", "version"], f"aiprof {APP_VERSION}", 0, ["libbpf1", "libcurl4", "libelf1"]),
    ("controller", ["/usr/bin/aiprof-controller", "--help"], "--injector-namespace", 65532,
     ["libwebsockets17", "libyaml-0-2", "tzdata"]),
])
def test_image_runs_under_runc(images, name, args, expect, user, packages):
    tmp = tempfile.mkdtemp(prefix="aiprof-images-")
    try:
        bundle, cfg = unpack(name, tmp)
        assert cfg["process"]["args"] == [args[0]], cfg["process"]["args"]     # the entrypoint
        assert cfg["process"]["user"]["uid"] == user
        r = runc(bundle, cfg, args)
        assert r.returncode == 0, r.stderr
        assert expect in r.stdout + r.stderr, r.stdout + r.stderr
        # every file of the layer carries SOURCE_DATE_EPOCH
        for p in (args[0], "/etc/os-release", "/usr/share/doc"):
            assert int(os.lstat(os.path.join(bundle, "rootfs", p.lstrip("/"))).st_mtime) == images, p
        with open(os.path.join(bundle, "rootfs", "etc", "os-release")) as f:
            assert 'VERSION_CODENAME=bookworm' in f.read()
    finally:
        shutil.rmtree(tmp)
    # the Debian packages that went in, as the Dockerfile's final stage installs them
    with open(os.path.join(IMAGES, f"aiprof-{name}.packages")) as f:
        got = dict(line.split(" ", 1) for line in f.read().splitlines())
    assert set(packages) <= set(got), sorted(got)
    # the docker-archive carries the name the chart uses, for `ctr images import`/`docker load`
    with tarfile.open(os.path.join(IMAGES, f"aiprof-{name}.tar")) as t:
        manifest = json.load(t.extractfile("manifest.json"))
    ref = f"aiprof/aiprof-{name}:{APP_VERSION}"
    assert manifest[0]["RepoTags"] in ([ref], [f"docker.io/{ref}"]), manifest     # the same name


def test_missing_tools_are_named():
    """Without debootstrap (or umoci, skopeo) the builder says which and how to get it."""
    empty = tempfile.mkdtemp(prefix="aiprof-notools-")
    try:
        for tool in ("bash", "dirname", "sed", "id", "git", "date"):
            os.symlink(shutil.which(tool), os.path.join(empty, tool))
        r = run(["bash", "scripts/build-images.sh"], ok=False, cwd=ROOT, env={"PATH": empty})
        assert r.returncode == 2, r.stderr
        assert "debootstrap is missing: apt-get install debootstrap umoci skopeo" in r.stderr, r.stderr
        r = run(["make", "-s", "images", "ENGINE=no-such-engine"], ok=False, cwd=ROOT)
        assert r.returncode == 2 and "ENGINE=no-such-engine, but 'no-such-engine info' fails" in r.stderr, r.stderr
    finally:
        shutil.rmtree(empty)
