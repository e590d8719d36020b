#!/usr/bin/env bash
# `make demo`: start the bundled workloads, attach to them while they run, write artifacts.
#   - the trainer: ranks as threads on test doubles of CUDA/NCCL (no GPU here)
#   - a small real PyTorch training loop on the CPU
# Prints the artifact folder. Stops exactly the processes it started.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
OUT=${AIPROF_DEMO_OUT:-aiprof-out/demo-$(date -u +%Y%m%dT%H%M%SZ)}
DURATION=${AIPROF_DEMO_DURATION:-4s}
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT

wait_ready() { # $1 = fifo-backed log, prints the pid from "ready pid=N"
	local i
	for i in $(seq 1 200); do
		if grep -q '^ready pid=' "$1" 2>/dev/null; then
			sed -n 's/^ready pid=\([0-9]*\).*/\1/p' "$1" | head -1
			return 0
		fi
		sleep 0.05
	done
	echo "demo: workload did not start; see $1" >&2
	return 1
}

tmp=$(mktemp -d)
"$BUILD/tests/workloads/trainer" --ranks 2 --run-seconds 10 >"$tmp/trainer.out" 2>"$tmp/trainer.err" &
pids+=($!)
/usr/bin/python3 tests/workloads/torch_train.py --seconds 10 >"$tmp/torch.out" 2>"$tmp/torch.err" &
pids+=($!)
trainer_pid=$(wait_ready "$tmp/trainer.out")
torch_pid=$(wait_ready "$tmp/torch.out")

echo "demo: trainer pid $trainer_pid, pytorch pid $torch_pid; profiling for $DURATION"
"$BUILD/aiprof" profile --pid "$trainer_pid,$torch_pid" --duration "$DURATION" -o "$OUT"
wait "${pids[@]}"
pids=()
echo "demo: trainer finished: $(grep checksum= "$tmp/trainer.out")"
echo "demo: pytorch finished: $(tail -1 "$tmp/torch.out")"
rm -rf "$tmp"
echo "demo: artifacts in $OUT:"
ls -l "$OUT"
echo "demo: open $OUT/timeline.json.gz in https://ui.perfetto.dev; summary: $OUT/summary.json"
echo "demo: report (open this first): $OUT/report.html"
