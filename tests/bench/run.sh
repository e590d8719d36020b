#!/usr/bin/env bash
# `make bench`: benchmarks that print ratios measured side by side in one run.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${BUILD:-build}
echo "== hook overhead (ns per hooked call)"
"$BUILD/tests/bench/bench_hooks"
echo "== artifact build: synthetic 5 M event window (diagnosis, timeline, summary, report)"
"$BUILD/tests/bench/bench_artifacts"
echo "== a traced CUDA call: uprobe pair (--method ebpf) vs libaiprof hook (--method ptrace)"
BUILD=$BUILD /usr/bin/python3 tests/bench/bench_uprobe_vs_hook.py
echo "== injection"
BUILD=$BUILD /usr/bin/python3 tests/bench/bench_inject.py
echo "== safe points judged from the whole stack: ptrace stop per injection into real Python and PyTorch processes (BASELINE_BUILD=DIR: side by side with another build)"
BUILD=$BUILD /usr/bin/python3 tests/bench/bench_safepoint.py 6
echo "== injector peak RSS against window length, 100k calls/s, 256 MiB memory limit"
BUILD=$BUILD /usr/bin/python3 tests/bench/bench_memory.py
echo "== S3 upload: 256 MiB to radosgw, aiprof vs awscli"
BUILD=$BUILD /usr/bin/python3 tests/bench/bench_s3.py
echo "== what a profile costs real PyTorch jobs (DDP over gloo, DataLoader workers, BLAS, a request loop), default collectors: rate profiled/unprofiled, BPF time from bpf_stats as a share of the job's CPU"
BUILD=$BUILD /usr/bin/python3 tests/bench/bench_cost.py
echo "== the same with two CPU burners beside the job"
BUILD=$BUILD /usr/bin/python3 tests/bench/bench_cost.py --burners 2
echo "== the same with --budget 1% (the off-CPU and syscall collectors paused as needed)"
BUILD=$BUILD /usr/bin/python3 tests/bench/bench_cost.py --profile-args "--budget 1%"
echo "== the CPU sampler's events on a target switching ~300,000 times a second: per thread against per CPU"
BUILD=$BUILD /usr/bin/python3 tests/bench/bench_sampler.py
echo "== the CPU sampler against perf record --call-graph dwarf at 99 Hz on real PyTorch jobs: overhead and whole stacks"
BUILD=$BUILD /usr/bin/python3 tests/bench/bench_perf.py
echo "== eBPF collectors: throughput ratio with all collectors at 99 Hz vs off"
BUILD=$BUILD /usr/bin/python3 tests/bench/bench_ebpf.py
echo "== aiprof stacks of a quiet 11-thread Python process: wall time against the 150 ms goal, cfi and fp"
BUILD=$BUILD /usr/bin/python3 tests/bench/bench_stacks.py
echo "== native stacks by CFI: a PyTorch training loop's step time, --unwind cfi vs fp at 99 Hz; unwind tables"
BUILD=$BUILD /usr/bin/python3 tests/bench/bench_unwind.py
echo "== what a profile costs processes that are not profiled: getppid() of a bystander, idle vs recording"
BUILD=$BUILD /usr/bin/python3 tests/bench/bench_bystander.py
echo "== controller: 1,000 sessions at once against the API double; RSS with 10,000 pods cached"
BUILD=$BUILD /usr/bin/python3 tests/bench/bench_controller.py || echo "controller benchmark: a target was missed (figures above)"
echo "== aiprof merge: 1, 2, 4 ranks as processes; merge time and residual clock skew"
BUILD=$BUILD /usr/bin/python3 tests/bench/bench_merge.py
echo "== end to end: kubectl apply -> Succeeded for 1, 2, 4 ranks in runc containers; merged timeline's residual clock skew"
BUILD=$BUILD /usr/bin/python3 e2e/bench_e2e.py
