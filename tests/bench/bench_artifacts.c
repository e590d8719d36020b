/* SPDX-License-Identifier: MIT */
/*
 * bench_artifacts: how fast aiprof turns a recorded window into its artifacts. Builds a
 * synthetic window (default 5 M events: 8 ranks as threads of one process, each step an
 * H2D copy, kernel launches with their call stacks and CUPTI kernel records, an
 * all-reduce and a stream sync, over 10 s), then times, on one core, the diagnosis
 * (analysis + findings), the timeline (sorting, size budget, gzip), the summary and the
 * report (flame graphs, report.html). Prints events/s per CPU second of the building
 * thread (the one-core figure: it is single-threaded, and on a shared machine the wall
 * clock also counts other processes' time), events/s by the wall clock, and the output
 * size per event.
 *
 *   bench_artifacts [--events N] [--ranks R] [--out DIR] [--budget-mb MB]
 *
 * --out keeps the artifacts in DIR (tests check their schema); otherwise a temporary
 * folder is used and removed. --budget-mb sets the timeline's per-rank budget (0 = none).
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "injector/analyze/diagnosis.h"
#include "injector/model/profile.h"
#include "injector/artifacts/report.h"
#include "tests/unit/synth_profile.h"
#include "injector/artifacts/timeline.h"
#include "injector/artifacts/summary.h"

#define KERNELS 6
#define T0 (1000ULL * 1000 * MS)

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* CPU seconds of this (the building) thread */
static double cpu_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static off_t file_size(const char *dir, const char *name)
{
	char p[4200];
	struct stat st;

	snprintf(p, sizeof(p), "%s/%s", dir, name);
	return stat(p, &st) == 0 ? st.st_size : 0;
}

#define STACK_ID0 100   /* string ids of the launch stacks */

int main(int argc, char **argv);

/* events per step per rank: copy + KERNELS x (launch + kernel) + collective + sync */
#define EVENTS_PER_STEP (1 + 2 * KERNELS + 2)

static void synthesize(struct synth *s, uint64_t events, int ranks)
{
	static const char *const names[KERNELS] = { "sgemm_fwd_kernel", "relu_fwd_kernel",
		"sgemm_bwd_kernel", "relu_bwd_kernel", "adam_update_kernel", "layernorm_kernel" };
	uint64_t steps = events / EVENTS_PER_STEP / (uint64_t)ranks;
	uint64_t window = 10000 * MS, period = steps ? window / steps : window;
	struct target *t = &s->t[0];
	uint64_t corr = 1;

	synth_init(s, 1, T0, T0 + window);
	/* this process, so the launch stacks (return addresses in this program) have names */
	t->pid = getpid();
	for (int i = 0; i < KERNELS; i++) {
		char stack[128];

		synth_string(t, (uint32_t)i + 1, names[i]);
		/* as libaiprof sends them: return addresses, innermost first (distinct per kernel) */
		snprintf(stack, sizeof(stack), "%lx,%lx,%lx", (unsigned long)((uintptr_t)synthesize + 8 + 4 * i),
			 (unsigned long)((uintptr_t)file_size + 8), (unsigned long)((uintptr_t)main + 8));
		synth_string(t, (uint32_t)(STACK_ID0 + i), stack);
	}
	for (int r = 0; r < ranks; r++) {
		char nm[16];

		snprintf(nm, sizeof(nm), "rank%d", r);
		synth_thread(t, 100 + (uint32_t)r, nm);
	}
	/* interleaved by step, as the ring delivers them */
	for (uint64_t k = 0; k < steps; k++) {
		for (int r = 0; r < ranks; r++) {
			uint32_t tid = 100 + (uint32_t)r;
			uint64_t base = T0 + k * period + (uint64_t)r * 1000;
			uint64_t gpu = base + period / 10;

			synth_memcpy(t, tid, base, 20000, AIPROF_MEMCPY_H2D, 8 << 20, true, true);
			for (int i = 0; i < KERNELS; i++) {
				uint64_t ts = base + 30000 + (uint64_t)i * 5000;
				uint64_t kd = period / (KERNELS * 3);

				synth_launch(t, tid, ts, 3000, (uint32_t)i + 1, 4096, 256, corr);
				t->store.v[t->store.n - 1].u.launch.stack_id = (uint32_t)(STACK_ID0 + i);
				synth_gpu_kernel(t, gpu, kd, (uint32_t)i + 1, (uint32_t)r + 7, corr);
				gpu += kd + 2000;
				corr++;
			}
			synth_coll(t, tid, base + period / 2, period / 8, r, ranks, 1 << 20);
			synth_sync(t, tid, base + period / 2 + period / 8 + 10000, period / 4, false);
		}
	}
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "events", required_argument, NULL, 'e' },
		{ "ranks", required_argument, NULL, 'r' },
		{ "out", required_argument, NULL, 'o' },
		{ "budget-mb", required_argument, NULL, 'b' },
		{}
	};
	uint64_t events = 5000000;
	int ranks = 8, c, r;
	char dir[4096] = "", path[4200];
	bool keep = false;
	struct synth s;
	struct timeline_stats tl = { 0 };
	double t0, c0, t_diag, t_tl, t_sum, t_rep, wall, cpu;
	off_t gz, sum;

	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 'e': events = strtoull(optarg, NULL, 10); break;
		case 'r': ranks = atoi(optarg); break;
		case 'o': snprintf(dir, sizeof(dir), "%s", optarg); keep = true; break;
		case 'b': setenv("AIPROF_TIMELINE_BUDGET_MB", optarg, 1); break;
		default:
			fprintf(stderr, "usage: bench_artifacts [--events N] [--ranks R] [--out DIR] "
				"[--budget-mb MB]\n");
			return 2;
		}
	}
	if (ranks < 1 || ranks > 64 || events < 1000) {
		fprintf(stderr, "bench_artifacts: need 1..64 ranks and at least 1000 events\n");
		return 2;
	}
	if (!keep) {
		snprintf(dir, sizeof(dir), "/tmp/aiprof-bench-XXXXXX");
		if (!mkdtemp(dir)) {
			perror("mkdtemp");
			return 1;
		}
	} else if (mkdir(dir, 0755) < 0 && errno != EEXIST) {
		perror(dir);
		return 1;
	}
	synthesize(&s, events, ranks);
	events = s.t[0].store.n;
	s.p.outdir = dir;
	s.p.timeline = &tl;
	snprintf(s.p.ebpf_reason, sizeof(s.p.ebpf_reason), "synthetic window");

	c0 = cpu_s();
	t0 = now_s();
	r = diagnosis__new(&s.p, &s.p.diag);
	t_diag = now_s() - t0;
	if (r < 0) {
		fprintf(stderr, "diagnosis: %s\n", strerror(-r));
		return 1;
	}
	snprintf(path, sizeof(path), "%s/timeline.json.gz", dir);
	t0 = now_s();
	r = timeline_write(&s.p, path);
	t_tl = now_s() - t0;
	if (r < 0) {
		fprintf(stderr, "timeline: %s\n", strerror(-r));
		return 1;
	}
	snprintf(path, sizeof(path), "%s/summary.json", dir);
	t0 = now_s();
	r = summary_write(&s.p, path);
	t_sum = now_s() - t0;
	if (r < 0) {
		fprintf(stderr, "summary: %s\n", strerror(-r));
		return 1;
	}
	t0 = now_s();
	r = report_write(&s.p, dir, path, sizeof(path));
	t_rep = now_s() - t0;
	if (r < 0) {
		fprintf(stderr, "report: %s\n", strerror(-r));
		return 1;
	}
	cpu = cpu_s() - c0;
	wall = t_diag + t_tl + t_sum + t_rep;
	gz = file_size(dir, "timeline.json.gz");
	sum = file_size(dir, "summary.json");
	printf("bench_artifacts: %llu events, %d ranks, 10 s window\n", (unsigned long long)events, ranks);
	printf("  diagnosis (analysis + findings) %.3f s, timeline %.3f s, summary %.3f s, "
	       "report (flame graphs, html) %.3f s\n", t_diag, t_tl, t_sum, t_rep);
	printf("  throughput: %.2f M events/s per CPU second of the building thread (target >= 2), "
	       "%.2f M events/s wall (%.0f%% of the wall time on CPU)\n", (double)events / cpu / 1e6,
	       (double)events / wall / 1e6, 100.0 * cpu / wall);
	printf("  timeline: %.1f MB uncompressed (budget %.0f MB), %.2f MB gzip: %.1f bytes/event "
	       "uncompressed, %.2f bytes/event compressed\n", (double)tl.bytes / 1e6,
	       (double)tl.budget_bytes / 1e6, (double)gz / 1e6, (double)tl.bytes / (double)events,
	       (double)gz / (double)events);
	printf("  aggregated: %llu of %llu events into %llu slices%s; flows %llu; summary %.1f KB; "
	       "findings %zu\n", (unsigned long long)tl.events_aggregated,
	       (unsigned long long)tl.events_in, (unsigned long long)tl.aggregate_slices,
	       tl.bucket_ns ? " (time buckets)" : "", (unsigned long long)tl.flows,
	       (double)sum / 1e3, s.p.diag->findings->n);
	/* per CPU second is the one-core figure: wall time also counts other processes */
	printf("events_per_cpu_s=%.0f events_per_wall_s=%.0f bytes_per_event=%.2f\n",
	       (double)events / cpu, (double)events / wall, (double)gz / (double)events);
	diagnosis__free(s.p.diag);
	synth_free_all(&s);
	if (!keep) {
		static const char *const made[] = { "summary.json", "timeline.json.gz", "gpu.folded",
						     "flamegraph-gpu.svg", "report.html" };

		for (size_t i = 0; i < sizeof(made) / sizeof(made[0]); i++) {
			snprintf(path, sizeof(path), "%s/%s", dir, made[i]);
			unlink(path);
		}
		rmdir(dir);
	}
	return 0;
}
