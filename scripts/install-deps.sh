#!/usr/bin/env bash
# Installs the Debian packages aiprof needs to build, test and run its demo.
# Idempotent: packages already present are left alone. Needs root (or sudo).
set -euo pipefail

PACKAGES=(
	# build
	build-essential make pkg-config clang llvm lld libclang-rt-14-dev
	libelf-dev libdw-dev zlib1g-dev libjansson-dev libyaml-dev libcurl4-openssl-dev
	libwebsockets-dev libibverbs-dev libbpf-dev bpftool linux-libc-dev
	# tests
	libcmocka-dev util-linux procps strace python3-pytest python3-yaml
	# end to end (e2e/): containers are started with runc 1.1
	runc
	# make images without a container engine (scripts/build-images.sh)
	debootstrap umoci skopeo
	# the real Kubernetes of ../shared/k8s (tests/k8s/realk8s.py): etcd, containerd + runc,
	# the CNI bridge plugin, its binaries come xz-packed
	etcd-server containerd containernetworking-plugins xz-utils iproute2
	# report.html is rendered in headless Chromium by tests/integration/test_artifacts.py
	chromium
	# S3 upload: libcrypto for SigV4; a real S3 server (Ceph radosgw) and independent clients
	libssl-dev openssl radosgw ceph-mon ceph-osd ceph-common awscli python3-boto3 python3-botocore
	# demo workload: a real PyTorch training loop (CPU)
	python3 python3-torch python3-numpy
	# profile.pb.gz is read back by a real reader, `go tool pprof` (tests/integration/test_pprof.py)
	golang-go
	# install tests (tests/integration/test_install.py): helm comes from an npm package
	# (scripts/fetch-helm.sh), Kubernetes' schemas from kubernetes-models (npm), CRs are
	# checked with jsonschema
	unzip python3-jsonschema
	# ProfilingPolicy time zones (controller/cron.c reads the TZif files)
	tzdata
)
# node and npm: Debian's nodejs + npm unless a node that carries npm is installed already
command -v npm >/dev/null || PACKAGES+=(nodejs npm)

missing=()
for p in "${PACKAGES[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ "${#missing[@]}" -eq 0 ]; then
	echo "install-deps: all ${#PACKAGES[@]} packages present"
else
	SUDO=
	[ "$(id -u)" -eq 0 ] || SUDO=sudo
	echo "install-deps: installing ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	$SUDO apt-get update -q
	$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# Tools from npm, into build/tools (outside git): helm, and the Kubernetes API's JSON-schema
# validators (kubernetes-models) that tests/install/k8s_validate.mjs runs.
here="$(cd "$(dirname "$0")" && pwd)"
bash "$here/fetch-helm.sh" >/dev/null
# the API types of the oldest Kubernetes the install supports (1.25), for the check that no
# object the chart, crds/ or the controller makes uses a field that release does not know
types="$here/../build/tools/k8s-types-1.25"
if [ ! -f "$types/node_modules/kubernetes-types/package.json" ]; then
	mkdir -p "$types"
	npm install --silent --no-audit --no-fund --loglevel=error --prefix "$types" kubernetes-types@1.25.0
fi
models="$here/../build/tools/k8s-models"
if [ ! -f "$models/node_modules/@kubernetes-models/prometheus-operator/package.json" ]; then
	mkdir -p "$models"
	npm install --silent --no-audit --no-fund --loglevel=error --prefix "$models" kubernetes-models@5.1.0 \
		@kubernetes-models/prometheus-operator@6.0.0
fi
