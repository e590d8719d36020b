#!/usr/bin/env bash
# `make bench`: benchmarks that print ratios measured side by side in one run.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
echo "== hook overhead (ns per hooked call)"
"$BUILD/tests/bench/bench_hooks"
echo "== injection"
BUILD=$BUILD /usr/bin/python3 tests/bench/bench_inject.py
echo "== S3 upload: 256 MiB to radosgw, aiprof vs awscli"
BUILD=$BUILD /usr/bin/python3 tests/bench/bench_s3.py
