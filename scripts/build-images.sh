#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
#
# The controller and injector images without a container engine or a registry: a Debian 12
# root made by debootstrap (--variant=minbase, the packages controller/Dockerfile and
# injector/Dockerfile install, security updates applied), this build tree's binaries copied
# in where the Dockerfiles put them, assembled into an OCI image with umoci and exported as
# a docker-archive with skopeo (what `ctr images import`, `docker load` and `podman load` read).
#
#   scripts/build-images.sh            (make images runs it when no docker/podman answers)
#
# Out (OUT, default build/images): oci/ (an OCI layout, tags injector and controller),
# aiprof-injector.tar and aiprof-controller.tar tagged $IMAGE_REPO/aiprof-{injector,
# controller}:$IMAGE_TAG, and each image's Debian package list (*.packages). Reproducible as far
# as Debian's archive allows: every file's time and the images' creation time are
# SOURCE_DATE_EPOCH (default: the last commit's time), so two builds from the same packages
# give the same image; the package list says which versions went in. Versions are not pinned:
# a pin breaks the build each time Debian ships a security update, and the update belongs in
# the image.
#
# Needs root (debootstrap, chroot) and debootstrap, umoci and skopeo (scripts/install-deps.sh
# installs them). The binaries must be built (make) first.
set -euo pipefail

here="$(cd "$(dirname "$0")/.." && pwd)"
BUILD="${BUILD:-build}"
OUT="${OUT:-$BUILD/images}"
IMAGE_REPO="${IMAGE_REPO:-aiprof}"
IMAGE_TAG="${IMAGE_TAG:-$(sed -n 's/^appVersion: *"\(.*\)"/\1/p' "$here/charts/aiprof/Chart.yaml")}"
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
SECURITY="${DEBIAN_SECURITY_MIRROR:-http://deb.debian.org/debian-security}"
SUITE=bookworm
EPOCH="${SOURCE_DATE_EPOCH:-$(git -C "$here" log -1 --format=%ct 2>/dev/null || echo 0)}"

# what the Dockerfiles' final stages install (keep in step with them)
INJECTOR_PACKAGES="ca-certificates libcurl4 libjansson4 libssl3 libelf1 libdw1 zlib1g libbpf1 libstdc++6"
CONTROLLER_PACKAGES="ca-certificates libcurl4 libjansson4 libyaml-0-2 libwebsockets17 libssl3 tzdata"

die() {
	echo "make images: $*" >&2
	exit 2
}

[ "$(id -u)" -eq 0 ] || die "debootstrap and chroot need root: run it as root (or use docker/podman: ENGINE=docker make images)"
for t in debootstrap umoci skopeo; do
	command -v "$t" >/dev/null || die "$t is missing: apt-get install debootstrap umoci skopeo (scripts/install-deps.sh installs them), or use docker/podman (ENGINE=docker make images)"
done
for f in "$BUILD/aiprof" "$BUILD/libaiprof.so" "$BUILD/aiprof-controller"; do
	[ -f "$f" ] || die "$f is not built: run make first"
done

work="$OUT/work"
rm -rf "$work" "$OUT/oci"
mkdir -p "$work" "$OUT/debs"
created="$(date -u -d "@$EPOCH" +%Y-%m-%dT%H:%M:%SZ)"

# The base both images share: minbase, CA certificates, Debian's updates and security fixes.
base="$work/base"
echo "images: debootstrap $SUITE into $base"
debootstrap --variant=minbase --include=ca-certificates --cache-dir="$(realpath "$OUT/debs")" \
	"$SUITE" "$base" "$MIRROR" >"$work/debootstrap.log" 2>&1 ||
	die "debootstrap failed (last lines of $work/debootstrap.log):
$(tail -5 "$work/debootstrap.log")"
cat >"$base/etc/apt/sources.list" <<EOF
deb $MIRROR $SUITE main
deb $MIRROR $SUITE-updates main
deb $SECURITY $SUITE-security main
EOF
apt_in() {
	chroot "$1" env DEBIAN_FRONTEND=noninteractive LC_ALL=C apt-get -q -o Dpkg::Use-Pty=0 "${@:2}"
}
apt_in "$base" update >"$work/apt.log" 2>&1 || die "apt-get update in the image root failed: see $work/apt.log"
apt_in "$base" -y upgrade >>"$work/apt.log" 2>&1 || die "apt-get upgrade in the image root failed: see $work/apt.log"

# One image's root: the base, its packages, then what a slim image leaves out.
image_root() {
	local dir="$1" packages="$2"

	cp -a "$base" "$dir"
	# shellcheck disable=SC2086
	apt_in "$dir" install -y --no-install-recommends $packages >>"$work/apt.log" 2>&1 ||
		die "apt-get install $packages failed: see $work/apt.log"
	chroot "$dir" dpkg-query -W -f '${Package} ${Version}\n' >"$dir.packages"
	apt_in "$dir" clean >/dev/null 2>&1
	rm -rf "$dir"/var/lib/apt/lists/* "$dir"/var/cache/* "$dir"/var/log/* "$dir"/tmp/* \
		"$dir"/usr/share/man/* "$dir"/usr/share/info/* "$dir"/usr/share/locale/* \
		"$dir"/etc/machine-id "$dir"/etc/hostname
	find "$dir/usr/share/doc" -mindepth 2 ! -name copyright ! -type d -delete 2>/dev/null || true
	: >"$dir/etc/resolv.conf"       # the runtime mounts its own
}

# The image from a root: one layer, the config, every time SOURCE_DATE_EPOCH.
oci_image() {
	local dir="$1" tag="$2"
	shift 2

	find "$dir" -exec touch -h -d "@$EPOCH" {} +
	[ -d "$OUT/oci" ] || umoci init --layout "$OUT/oci"
	umoci new --image "$OUT/oci:$tag"
	umoci insert --image "$OUT/oci:$tag" --history.created "$created" \
		--history.created_by "scripts/build-images.sh" "$dir" /
	umoci config --image "$OUT/oci:$tag" --created "$created" --history.created "$created" \
		--history.created_by "scripts/build-images.sh (config)" --architecture amd64 --os linux \
		--author aiprof "$@"
}

# Checks the root runs what it holds (a library missing from the package list shows here).
runs() {
	local dir="$1"
	shift

	chroot "$dir" "$@" >/dev/null 2>"$work/run.err" ||
		die "'$*' does not run in the image root: $(head -c 400 "$work/run.err")"
}

echo "images: injector root"
inj="$work/injector"
image_root "$inj" "$INJECTOR_PACKAGES"
install -D -m 0755 "$BUILD/aiprof" "$inj/usr/bin/aiprof"
strip "$inj/usr/bin/aiprof"
# aiprof looks for the library next to itself, then in ../lib/aiprof/
install -D -m 0644 "$BUILD/libaiprof.so" "$inj/usr/lib/aiprof/libaiprof.so"
runs "$inj" /usr/bin/aiprof version
oci_image "$inj" injector --config.entrypoint /usr/bin/aiprof

echo "images: controller root"
ctl="$work/controller"
image_root "$ctl" "$CONTROLLER_PACKAGES"
install -D -m 0755 "$BUILD/aiprof-controller" "$ctl/usr/bin/aiprof-controller"
strip "$ctl/usr/bin/aiprof-controller"
runs "$ctl" /usr/bin/aiprof-controller --help
# non-root, as the chart's securityContext expects; GnuTLS comes in only through libcurl
oci_image "$ctl" controller --config.entrypoint /usr/bin/aiprof-controller \
	--config.user 65532:65532 --config.env GNUTLS_NO_IMPLICIT_INIT=1 --config.exposedports 8080/tcp

umoci gc --layout "$OUT/oci"
for name in injector controller; do
	ref="$IMAGE_REPO/aiprof-$name:$IMAGE_TAG"
	rm -f "$OUT/aiprof-$name.tar"
	skopeo copy --quiet "oci:$OUT/oci:$name" "docker-archive:$OUT/aiprof-$name.tar:$ref"
	cp "$work/$name.packages" "$OUT/aiprof-$name.packages"
	echo "images: $ref -> $OUT/aiprof-$name.tar ($(du -m "$OUT/aiprof-$name.tar" | cut -f1) MB)"
done
rm -rf "$work"
