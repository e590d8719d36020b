/* SPDX-License-Identifier: MIT */
/* injector/analyze/analysis.c: metrics over synthetic windows with known answers. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <cmocka.h>

#include "injector/analyze/analysis.h"
#include "tests/unit/synth_profile.h"

#define T0 (1000 * MS)

static struct analysis *analyse(struct synth *s)
{
	struct analysis_opts o = { .tiny_threads = 4096, .short_kernel_ns = 20000 };
	struct analysis *a = NULL;

	assert_int_equal(analysis__new(&s->p, &o, &a), 0);
	assert_non_null(a);
	return a;
}

static void test_spans(void **state)
{
	struct an_span v[] = { { 50, 60 }, { 10, 20 }, { 15, 30 }, { 30, 35 }, { 70, 70 } };
	size_t n = an_spans_merge(v, 5);

	assert_int_equal(n, 2);
	assert_int_equal(v[0].start, 10);
	assert_int_equal(v[0].end, 35);
	assert_int_equal(v[1].start, 50);
	assert_int_equal(v[1].end, 60);
	assert_int_equal(an_spans_uncovered(v, n, 0, 100), 100 - 25 - 10);
	assert_int_equal(an_spans_uncovered(v, n, 12, 14), 0);
	assert_int_equal(an_spans_uncovered(v, n, 30, 55), 15 + 0);
	assert_int_equal(an_spans_uncovered(v, 0, 5, 9), 4);
	assert_int_equal(an_spans_uncovered(v, n, 9, 9), 0);
}

/* CUPTI kernels: busy % per stream, the stream's rank through the launch's correlation */
static void test_gpu_busy_per_stream(void **state)
{
	struct synth s;
	struct analysis *a;

	synth_init(&s, 1, T0, T0 + 100 * MS);
	synth_thread(&s.t[0], 11, "rank0");
	synth_string(&s.t[0], 1, "gemm");
	synth_string(&s.t[0], 2, "ncclDevKernel_AllReduce");
	synth_coll(&s.t[0], 11, T0 + 1 * MS, 10000, 3, 4, 4096);
	for (int i = 0; i < 10; i++) {
		/* stream 7: 10 kernels of 3 ms = 30%; stream 8: 10 x 1 ms, overlapping half */
		synth_launch(&s.t[0], 11, T0 + (uint64_t)i * 10 * MS, 5000, 1, 1024, 256, 100 + i);
		synth_gpu_kernel(&s.t[0], T0 + (uint64_t)i * 10 * MS + 1 * MS, 3 * MS, 1, 7, 100 + i);
		synth_gpu_kernel(&s.t[0], T0 + (uint64_t)i * 10 * MS + 3500000, 1 * MS, 2, 8, 0);
	}
	a = analyse(&s);
	assert_true(a->gpu_timing);
	assert_int_equal(a->nstreams, 2);
	for (size_t i = 0; i < a->nstreams; i++) {
		if (a->streams[i].stream == 7) {
			assert_int_equal(a->streams[i].busy_ns, 30 * MS);
			assert_true(a->streams[i].busy_pct > 29.99 && a->streams[i].busy_pct < 30.01);
			assert_int_equal(a->streams[i].rank, 3);
			assert_int_equal(a->streams[i].tid, 11);
		} else {
			assert_int_equal(a->streams[i].stream, 8);
			assert_int_equal(a->streams[i].busy_ns, 10 * MS);
			assert_int_equal(a->streams[i].rank, -1);
		}
	}
	/* top kernel by GPU time; overlap: each 1 ms NCCL kernel overlaps 0.5 ms of gemm */
	assert_string_equal(a->kernels[0].name, "gemm");
	assert_int_equal(a->kernels[0].gpu_ns, 30 * MS);
	assert_int_equal(a->kernels[0].gpu_count, 10);
	assert_true(a->overlap_known);
	assert_int_equal(a->comm_ns, 10 * MS);
	assert_int_equal(a->overlap_ns, 5 * MS);
	assert_int_equal(a->threads[0].gpu_kernels, 10);
	assert_int_equal(a->threads[0].short_kernels, 0);
	analysis__free(a);
	synth_free_all(&s);
}

static void test_api_only(void **state)
{
	struct synth s;
	struct analysis *a;

	synth_init(&s, 1, T0, T0 + 100 * MS);
	synth_thread(&s.t[0], 11, "t");
	synth_string(&s.t[0], 1, "few");
	synth_string(&s.t[0], 2, "many");
	for (int i = 0; i < 3; i++)
		synth_launch(&s.t[0], 11, T0 + (uint64_t)i * MS, 50000, 1, 100000, 256, 0);
	for (int i = 0; i < 7; i++)
		synth_launch(&s.t[0], 11, T0 + 10 * MS + (uint64_t)i * MS, 1000, 2, 1, 64, 0);
	a = analyse(&s);
	assert_false(a->gpu_timing);
	assert_false(a->overlap_known);
	assert_int_equal(a->nstreams, 0);
	assert_int_equal(a->nkernels, 2);
	assert_string_equal(a->kernels[0].name, "many");     /* by launches */
	assert_int_equal(a->kernels[0].launches, 7);
	assert_int_equal(a->threads[0].launches, 10);
	assert_int_equal(a->threads[0].tiny_launches, 7);
	assert_int_equal(a->counts[0], 10);
	analysis__free(a);
	synth_free_all(&s);
}

static void test_copies(void **state)
{
	struct synth s;
	struct analysis *a;
	bool seen_pageable = false, seen_pinned = false;

	synth_init(&s, 1, T0, T0 + 100 * MS);
	synth_thread(&s.t[0], 11, "t");
	/* 4 x 3 MB pageable synchronous in 1 ms each: 3 GB/s; pinned async never blocks */
	for (int i = 0; i < 4; i++) {
		synth_memcpy(&s.t[0], 11, T0 + (uint64_t)i * 2 * MS, 1 * MS, AIPROF_MEMCPY_H2D, 3000000,
			     false, false);
		synth_memcpy(&s.t[0], 11, T0 + 50 * MS + (uint64_t)i * MS, 10000, AIPROF_MEMCPY_H2D, 3000000,
			     true, true);
	}
	a = analyse(&s);
	for (size_t i = 0; i < a->ncopies; i++) {
		const struct an_copy *c = &a->copies[i];

		assert_string_equal(c->kind, "HtoD");
		if (strcmp(c->host_memory, "pageable") == 0) {
			seen_pageable = true;
			assert_int_equal(c->count, 4);
			assert_int_equal(c->blocking_count, 4);
			assert_int_equal(c->blocking_bytes, 12000000);
			assert_int_equal(c->blocking_ns, 4 * MS);
		} else {
			seen_pinned = true;
			assert_string_equal(c->host_memory, "pinned");
			assert_int_equal(c->blocking_count, 0);
			assert_int_equal(c->bytes, 12000000);
		}
	}
	assert_true(seen_pageable && seen_pinned);
	analysis__free(a);
	synth_free_all(&s);
}

/* rank 1 enters every collective 10 ms after rank 0; blocking collectives end together */
static void fill_ranks(struct synth *s, int skip_first_of_rank1, size_t ntargets)
{
	synth_init(s, ntargets, T0, T0 + 1000 * MS);
	synth_thread(&s->t[0], 11, "r0");
	synth_thread(&s->t[ntargets - 1], 12, "r1");
	for (int k = 0; k < 20; k++) {
		uint64_t base = T0 + (uint64_t)k * 40 * MS;

		synth_coll(&s->t[0], 11, base, 12 * MS, 0, 2, 1 << 20);
		if (k >= skip_first_of_rank1)
			synth_coll(&s->t[ntargets - 1], 12, base + 10 * MS, 2 * MS, 1, 2, 1 << 20);
	}
}

static void check_ranks(struct analysis *a, size_t ncoll)
{
	const struct an_group *g;

	assert_int_equal(a->ngroups, 1);
	g = &a->groups[0];
	assert_int_equal(g->nranks, 2);
	assert_false(g->ambiguous);
	assert_int_equal(g->nm, 2);
	assert_int_equal(g->ncoll, ncoll);
	assert_int_equal(g->period_ns, 40 * MS);
	for (size_t j = 0; j < 2; j++) {
		if (g->m[j].rank == 1) {
			assert_int_equal(g->m[j].lateness_median_ns, 10 * MS);
			assert_int_equal(g->m[j].last_count, ncoll);
			/* entries matched to the same collective: exits 2 ms after entry, together */
			for (size_t k = 0; k < ncoll; k++)
				assert_int_equal(g->m[j].exit[k], g->m[1 - j].exit[k]);
		} else {
			assert_int_equal(g->m[j].lateness_median_ns, 0);
		}
	}
}

static void test_rank_groups(void **state)
{
	struct synth s;
	struct analysis *a;

	fill_ranks(&s, 0, 1);
	a = analyse(&s);
	check_ranks(a, 20);
	analysis__free(a);
	synth_free_all(&s);

	/* rank 1's first two collectives were before its window: aligned by causality */
	fill_ranks(&s, 2, 1);
	a = analyse(&s);
	check_ranks(a, 18);
	analysis__free(a);
	synth_free_all(&s);

	/* ranks in separate processes */
	fill_ranks(&s, 0, 2);
	a = analyse(&s);
	check_ranks(a, 20);
	assert_int_equal(a->nmemory, 2);
	analysis__free(a);
	synth_free_all(&s);
}

static void test_memory_and_syncs(void **state)
{
	struct synth s;
	struct analysis *a;

	synth_init(&s, 1, T0, T0 + 100 * MS);
	synth_thread(&s.t[0], 11, "t");
	synth_mem(&s.t[0], 11, T0 + 1 * MS, true, 0x1000, 100);
	synth_mem(&s.t[0], 11, T0 + 2 * MS, false, 0x1000, 0);
	synth_mem(&s.t[0], 11, T0 + 3 * MS, false, 0x9000, 0);     /* allocated before */
	for (int i = 0; i < 5; i++)
		synth_mem(&s.t[0], 11, T0 + (uint64_t)(10 + 20 * i) * MS, true, 0x100000 * (i + 1), 1 << 20);
	synth_sync(&s.t[0], 11, T0 + 50 * MS, 2 * MS, true);
	synth_sync(&s.t[0], 11, T0 + 60 * MS, 1 * MS, false);
	a = analyse(&s);
	assert_int_equal(a->memory[0].allocs, 6);
	assert_int_equal(a->memory[0].frees, 2);
	assert_int_equal(a->memory[0].unfreed_allocs, 5);
	assert_int_equal(a->memory[0].unfreed_bytes, 5 << 20);
	assert_int_equal(a->memory[0].first_unfreed_ts, T0 + 10 * MS);
	assert_int_equal(a->memory[0].last_unfreed_ts, T0 + 90 * MS);
	assert_int_equal(a->threads[0].syncs, 2);
	assert_int_equal(a->threads[0].device_syncs, 1);
	assert_int_equal(a->threads[0].sync_ns, 3 * MS);
	assert_int_equal(a->nsyncs, 2);
	analysis__free(a);
	synth_free_all(&s);
}

static void test_empty(void **state)
{
	struct synth s;
	struct analysis *a;

	synth_init(&s, 1, T0, T0);
	a = analyse(&s);
	assert_int_equal(a->nthreads, 0);
	assert_int_equal(a->nkernels, 0);
	analysis__free(a);
	analysis__free(NULL);
	synth_free_all(&s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_spans),
		cmocka_unit_test(test_gpu_busy_per_stream),
		cmocka_unit_test(test_api_only),
		cmocka_unit_test(test_copies),
		cmocka_unit_test(test_rank_groups),
		cmocka_unit_test(test_memory_and_syncs),
		cmocka_unit_test(test_empty),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
