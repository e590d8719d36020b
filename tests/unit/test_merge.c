/* SPDX-License-Identifier: MIT */
/*
 * The clock-offset estimator of `aiprof merge` (injector/merge/merge_align.c) on synthetic ranks
 * with known offsets, jitter, wake-up delays and windows that start at different
 * collectives; and the reader of a rank's artifacts (injector/merge/merge_read.c) on small
 * timelines.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "injector/merge/merge.h"

#define NS_PER_MS 1000000ULL

static uint64_t rng = 0x9e3779b97f4a7c15ULL;

static uint64_t rnd(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

/*
 * One job seen by two ranks: n collectives on a shared timeline, two per step (a gradient
 * all-reduce and a 4-byte one) with a jittered step period. Rank x's clock reads offset_ns
 * more, its window starts `skip` collectives later, and its ends carry wake-up delays.
 */
static void make_job(struct merge_coll *ref, size_t n, struct merge_coll *x, size_t skip, int64_t offset_ns,
		     uint64_t jitter_ns, uint64_t wake_ns)
{
	uint64_t t = 5000 * NS_PER_MS;

	for (size_t i = 0; i < n; i++) {
		uint64_t dur = i % 2 ? 50000 : 3 * NS_PER_MS;
		uint64_t end = t + dur;

		ref[i] = (struct merge_coll){ t, end + (wake_ns ? rnd() % wake_ns : 0), i % 2 ? 4 : 2097152, 0, 0 };
		if (i >= skip) {
			uint64_t xs = t + 1000 + rnd() % 2000;   /* enters a little later */

			x[i - skip] = (struct merge_coll){ (uint64_t)((int64_t)xs + offset_ns),
							  (uint64_t)((int64_t)end + offset_ns) +
							  (wake_ns ? rnd() % wake_ns : 0), ref[i].sig, 0, 0 };
		}
		t = end + (i % 2 ? 30 * NS_PER_MS : 2 * NS_PER_MS) + (jitter_ns ? rnd() % jitter_ns : 0);
	}
}

static void assert_near(int64_t got, int64_t want, int64_t tol)
{
	if (got > want + tol || got < want - tol)
		fail_msg("offset %lld ns, expected %lld +- %lld", (long long)got, (long long)want, (long long)tol);
}

static void test_same_windows_offset_recovered(void **state)
{
	struct merge_coll ref[200], x[200];
	struct merge_fit f;

	make_job(ref, 200, x, 0, 123456789, 500000, 0);
	assert_int_equal(merge_fit_offset(ref, 200, x, 200, &f), 0);
	assert_true(f.ok);
	assert_int_equal(f.shift, 0);
	assert_int_equal(f.matched, 200);
	assert_int_equal(f.offset_ns, 123456789);
	assert_int_equal(f.mad_ns, 0);
	assert_false(f.ambiguous);
}

static void test_window_starting_later_and_clock_behind(void **state)
{
	struct merge_coll ref[300], x[300];
	struct merge_fit f;

	/* x's window starts 7 collectives later, its clock is 2.5 s behind (many periods) */
	make_job(ref, 300, x, 7, -2500000000LL, 800000, 0);
	assert_int_equal(merge_fit_offset(ref, 300, x, 293, &f), 0);
	assert_true(f.ok);
	assert_int_equal(f.shift, 7);
	assert_int_equal(f.matched, 293);
	assert_int_equal(f.offset_ns, -2500000000LL);
	assert_false(f.ambiguous);
}

static void test_reference_starting_later(void **state)
{
	struct merge_coll ref[300], x[300];
	struct merge_fit f;

	/* the other way round: x's window holds 4 collectives before ref's first */
	make_job(x, 300, ref, 4, 777777, 800000, 0);
	assert_int_equal(merge_fit_offset(ref, 296, x, 300, &f), 0);
	assert_true(f.ok);
	assert_int_equal(f.shift, -4);
	assert_int_equal(f.offset_ns, -777777);
}

static void test_wakeup_delays(void **state)
{
	struct merge_coll ref[400], x[400];
	struct merge_fit f;

	/* both ranks' ends late by up to 40 us at random: the offset within the noise */
	make_job(ref, 400, x, 3, 987654321, 600000, 40000);
	assert_int_equal(merge_fit_offset(ref, 400, x, 397, &f), 0);
	assert_true(f.ok);
	assert_int_equal(f.shift, 3);
	assert_near(f.offset_ns, 987654321, 8000);
	assert_true(f.mad_ns < 20000);
}

static void test_one_clock_takes_the_shift_whose_ends_meet(void **state)
{
	struct merge_coll ref[300], x[300];
	struct merge_fit f;

	/* two ranks on one host, a metronome of a job (no step jitter) on a loaded machine (each
	 * end up to 4 ms late): the ends fit as well one step off as at the right shift, but on
	 * the shared clock only the right one puts them together */
	make_job(ref, 300, x, 9, 0, 0, 4 * NS_PER_MS);
	assert_int_equal(merge_fit_offset(ref, 300, x, 291, &f), 0);
	assert_true(f.ok);
	assert_true(f.ambiguous);
	assert_int_equal(merge_fit_same_clock(ref, 300, x, 291, &f), 0);
	assert_true(f.ok);
	assert_true(f.same_clock);
	assert_int_equal(f.shift, 9);
	assert_int_equal(f.offset_ns, 0);
	assert_int_equal(f.matched, 291);
	assert_false(f.ambiguous);
	/* the next numbering is a step (about 35 ms) away */
	assert_true(f.runner_up_mad_ns > 20 * NS_PER_MS);

	/* a long window (screened shifts) likewise */
	{
		static struct merge_coll lref[9000], lx[9000];

		make_job(lref, 9000, lx, 37, 0, 0, 4 * NS_PER_MS);
		assert_int_equal(merge_fit_same_clock(lref, 9000, lx, 9000 - 37, &f), 0);
		assert_int_equal(f.shift, 37);
		assert_int_equal(f.offset_ns, 0);
		assert_false(f.ambiguous);
	}
}

static void test_outliers_do_not_move_the_offset(void **state)
{
	struct merge_coll ref[200], x[200];
	struct merge_fit f;

	make_job(ref, 200, x, 0, 5000000, 400000, 0);
	/* every 8th end on x is 3 ms late (a descheduled thread) */
	for (size_t i = 0; i < 200; i += 8)
		x[i].end_ns += 3 * NS_PER_MS;
	assert_int_equal(merge_fit_offset(ref, 200, x, 200, &f), 0);
	assert_int_equal(f.shift, 0);
	assert_int_equal(f.offset_ns, 5000000);
}

static void test_numbered_collectives_survive_lost_events(void **state)
{
	struct merge_coll ref[200], x[200];
	struct merge_fit f;
	size_t n = 0;

	make_job(ref, 200, x, 0, 42000000, 700000, 0);
	/* ref's library has counted since long before; x's since this window; x lost five
	 * events (a full ring) at different places */
	for (size_t i = 0; i < 200; i++) {
		ref[i].seq = 100000 + i;
		if (i != 20 && i != 21 && i != 90 && i != 150 && i != 151) {
			x[n] = x[i];
			x[n++].seq = 1 + i;
		}
	}
	assert_int_equal(merge_fit_offset(ref, 200, x, n, &f), 0);
	assert_true(f.ok);
	assert_int_equal(f.shift, 99999);
	assert_int_equal(f.matched, 195);
	assert_int_equal(f.offset_ns, 42000000);
	assert_int_equal(f.mad_ns, 0);

	/* the same without numbers: matched by order, the losses shift what follows them */
	for (size_t i = 0; i < n; i++)
		x[i].seq = 0;
	assert_int_equal(merge_fit_offset(ref, 200, x, n, &f), 0);
	assert_true(!f.ok || f.mad_ns > 0 || f.matched < 195);
}

static void test_long_windows_are_screened(void **state)
{
	static struct merge_coll ref[9000], x[9000];
	struct merge_fit f;

	/* beyond 4096 collectives the shifts are screened on a sample first: same answer */
	make_job(ref, 9000, x, 37, -123456789012LL, 900000, 30000);
	assert_int_equal(merge_fit_offset(ref, 9000, x, 9000 - 37, &f), 0);
	assert_true(f.ok);
	assert_int_equal(f.shift, 37);
	assert_int_equal(f.matched, 9000 - 37);
	assert_near(f.offset_ns, -123456789012LL, 5000);
	assert_false(f.ambiguous);
}

static void test_signatures_must_agree(void **state)
{
	struct merge_coll ref[100], x[100];
	struct merge_fit f;

	make_job(ref, 100, x, 0, 0, 300000, 0);
	/* another job: every collective of another size */
	for (size_t i = 0; i < 100; i++)
		x[i].sig = 12345;
	assert_int_equal(merge_fit_offset(ref, 100, x, 100, &f), 0);
	assert_false(f.ok);
}

static void test_perfectly_periodic_is_ambiguous(void **state)
{
	struct merge_coll ref[100], x[100];
	struct merge_fit f;

	make_job(ref, 100, x, 0, 1000, 0, 0);
	assert_int_equal(merge_fit_offset(ref, 100, x, 100, &f), 0);
	assert_true(f.ok);
	assert_true(f.ambiguous);
	assert_int_equal(f.mad_ns, 0);
}

static void test_nothing_to_match(void **state)
{
	struct merge_coll ref[10], x[10];
	struct merge_fit f;

	make_job(ref, 10, x, 0, 0, 100000, 0);
	assert_int_equal(merge_fit_offset(ref, 10, x, 0, &f), 0);
	assert_false(f.ok);
	assert_int_equal(merge_fit_offset(ref, 0, x, 10, &f), 0);
	assert_false(f.ok);
	/* a single collective each: matched, offset from that one */
	assert_int_equal(merge_fit_offset(ref, 1, x, 1, &f), 0);
	assert_true(f.ok);
	assert_int_equal(f.offset_ns, 0);
}

static void test_median_and_quantiles(void **state)
{
	int64_t v[] = { 9, -3, 7, 7, 1, 100, -50 };
	uint64_t q[] = { 5, 1, 4, 2, 3 };
	uint64_t one[] = { 42 };

	assert_int_equal(merge_median_i64(v, 7), 7);
	assert_int_equal(merge_median_i64(v, 0), 0);
	assert_int_equal(merge_quantile_u64(q, 5, 0.5), 3);
	assert_int_equal(merge_quantile_u64(q, 5, 1.0), 5);
	assert_int_equal(merge_quantile_u64(q, 5, 0.0), 1);
	assert_int_equal(merge_quantile_u64(one, 1, 0.5), 42);
}

/* ---- reading a rank's artifacts ------------------------------------------------------- */

/* x's first `drop` collectives lose their kernel records; then x (397, 3 later) is fit to ref (400). */
static void fit_without_kernels(const struct merge_coll *ref, struct merge_coll *x, size_t drop, struct merge_fit *f)
{
	for (size_t i = 0; i < drop; i++)
		x[i].gpu_end_ns = 0;
	assert_int_equal(merge_fit_offset(ref, 400, x, 397, f), 0);
	assert_true(f->ok);
	assert_int_equal(f->shift, 3);
}

static void test_gpu_kernel_ends_preferred(void **state)
{
	struct merge_coll ref[400], x[400];
	struct merge_fit f;

	/* host ends late by up to 100 us at random (wake-up after an asynchronous collective),
	 * the kernels' ends exact: the offset comes from the kernels, to the ns */
	make_job(ref, 400, x, 3, 987654321, 600000, 0);
	for (size_t i = 0; i < 400; i++) {
		ref[i].gpu_end_ns = ref[i].end_ns;
		ref[i].end_ns += rnd() % 100000;
		if (i < 397) {
			x[i].gpu_end_ns = x[i].end_ns;
			x[i].end_ns += rnd() % 100000;
		}
	}
	/* a few collectives without a kernel record (before CUPTI was on) */
	fit_without_kernels(ref, x, 10, &f);
	assert_true(f.gpu);
	assert_int_equal(f.offset_ns, 987654321);
	assert_int_equal(f.mad_ns, 0);
	assert_int_equal(f.matched, 387);
	assert_int_equal(f.gpu_matched, 387);

	/* most of x's collectives without a kernel: the host ends of all, within their noise */
	fit_without_kernels(ref, x, 300, &f);
	assert_false(f.gpu);
	assert_int_equal(f.matched, 397);
	assert_near(f.offset_ns, 987654321, 20000);
	assert_true(f.mad_ns > 5000);
}

static const char summary_ok[] =
	"{\"schema\":\"aiprof.summary/v2\",\"window\":{\"start_monotonic_ns\":1000000,"
	"\"end_monotonic_ns\":9000000},\"origin\":{\"pod\":\"trainer-1\",\"host\":\"node-b\","
	"\"session\":\"train/s1\"},\"ebpf\":{\"collectors\":[\"cpu\",\"offcpu\"]},\"findings\":[]}";

static char *dup(const char *s)
{
	char *d = strdup(s);

	assert_non_null(d);
	return d;
}

/* Parses timeline tl with summary_ok into *s, which must succeed. */
static void parse_ok(struct merge_source *s, const char *tl)
{
	char msg[512] = "";

	if (merge_source__parse(s, "src", dup(tl), strlen(tl), summary_ok, strlen(summary_ok), msg, sizeof(msg)))
		fail_msg("%s", msg);
}

static void test_read_world_communicator(void **state)
{
	static const char tl[] =
		"{\"traceEvents\":[\n"
		"{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":7,\"tid\":0,\"ts\":0,\"args\":{\"name\":\"t\"}},\n"
		"{\"ph\":\"X\",\"cat\":\"nccl\",\"name\":\"ncclAllReduce\",\"pid\":7,\"tid\":8,\"ts\":2000.5,\"dur\":10,"
		"\"args\":{\"op\":\"AllReduce\",\"bytes\":64,\"rank\":1,\"nranks\":4,\"comm\":\"0xa\"}},\n"
		"{\"ph\":\"X\",\"cat\":\"nccl\",\"name\":\"ncclAllReduce\",\"pid\":7,\"tid\":8,\"ts\":2100,\"dur\":10,"
		"\"args\":{\"op\":\"AllReduce\",\"bytes\":64,\"rank\":0,\"nranks\":2,\"comm\":\"0xb\"}},\n"
		"{\"ph\":\"X\",\"cat\":\"nccl\",\"name\":\"ncclAllReduce\",\"pid\":7,\"tid\":8,\"ts\":1000,\"dur\":10,"
		"\"args\":{\"op\":\"AllReduce\",\"bytes\":64,\"rank\":1,\"nranks\":4,\"comm\":\"0xa\"}},\n"
		"{\"ph\":\"X\",\"cat\":\"cuda_api\",\"name\":\"cudaStreamSynchronize\",\"pid\":7,\"tid\":8,\"ts\":3000,"
		"\"dur\":500,\"args\":{}},\n"
		"{\"ph\":\"X\",\"cat\":\"offcpu\",\"name\":\"futex: futex_do_wait\",\"pid\":7,\"tid\":8,\"ts\":4000,"
		"\"dur\":4000,\"sf\":3,\"args\":{}}\n"
		"],\"stackFrames\":{\"1\":{\"name\":\"trainer-7\"},\"2\":{\"name\":\"pncclAllReduce\",\"parent\":\"1\"},"
		"\"3\":{\"name\":\"[libc.so.6]\",\"parent\":\"2\"}},"
		"\"otherData\":{\"window_start_ns\":500000,\"window_end_ns\":9500000}}";
	struct merge_source s;

	parse_ok(&s, tl);
	assert_int_equal(s.nev, 6);
	assert_int_equal(s.rank, 1);
	assert_int_equal(s.nranks, 4);
	assert_string_equal(s.comm, "0xa");
	assert_int_equal(s.ncoll, 2);
	assert_int_equal(s.coll[0].start_ns, 1000000);   /* sorted by start */
	assert_int_equal(s.coll[1].start_ns, 2000500);
	assert_int_equal(s.coll[1].end_ns, 2010500);
	assert_int_equal(s.last_api_end_ns, 3500000);
	assert_int_equal(s.win_start_ns, 500000);         /* the timeline's window wins */
	assert_int_equal(s.win_end_ns, 9500000);
	assert_string_equal(s.pod, "trainer-1");
	assert_string_equal(s.host, "node-b");
	assert_string_equal(s.session, "train/s1");
	assert_true(s.offcpu_known);
	assert_int_equal(s.nwaits, 1);
	assert_true(s.waits[0].in_nccl);
	merge_source__clear(&s);
}

static void test_read_links_kernels(void **state)
{
	static const char tl[] =
		"{\"traceEvents\":[\n"
		"{\"ph\":\"X\",\"cat\":\"nccl\",\"name\":\"ncclAllReduce\",\"pid\":7,\"tid\":8,\"ts\":1000,\"dur\":10,"
		"\"args\":{\"op\":\"AllReduce\",\"bytes\":64,\"seq\":1,\"rank\":1,\"nranks\":2,\"comm\":\"0xa\","
		"\"correlation\":41}},\n"
		"{\"ph\":\"X\",\"cat\":\"nccl\",\"name\":\"ncclAllReduce\",\"pid\":7,\"tid\":8,\"ts\":2000,\"dur\":10,"
		"\"args\":{\"op\":\"AllReduce\",\"bytes\":64,\"seq\":2,\"rank\":1,\"nranks\":2,\"comm\":\"0xa\","
		"\"correlation\":42}},\n"
		"{\"ph\":\"X\",\"cat\":\"nccl\",\"name\":\"ncclAllReduce\",\"pid\":7,\"tid\":8,\"ts\":3000,\"dur\":10,"
		"\"args\":{\"op\":\"AllReduce\",\"bytes\":64,\"seq\":3,\"rank\":1,\"nranks\":2,\"comm\":\"0xa\"}},\n"
		/* its kernel, ending after the call returned (asynchronous NCCL) */
		"{\"ph\":\"X\",\"cat\":\"cuda_kernel\",\"name\":\"ncclDevKernel_AllReduce_Sum_f32_RING_LL\",\"pid\":7,"
		"\"tid\":1000013,\"ts\":1005,\"dur\":20.25,\"args\":{\"kernel\":\"k\",\"nccl_op\":\"AllReduce\","
		"\"nccl_seq\":1,\"nccl_comm\":\"0xa\",\"correlation\":41}},\n"
		/* same correlation id in another process: not this call's kernel */
		"{\"ph\":\"X\",\"cat\":\"cuda_kernel\",\"name\":\"ncclDevKernel_AllReduce_Sum_f32_RING_LL\",\"pid\":9,"
		"\"tid\":1000013,\"ts\":2005,\"dur\":20,\"args\":{\"nccl_op\":\"AllReduce\",\"correlation\":42}},\n"
		/* a kernel that names no NCCL call */
		"{\"ph\":\"X\",\"cat\":\"cuda_kernel\",\"name\":\"gemm\",\"pid\":7,\"tid\":1000013,\"ts\":2005,"
		"\"dur\":20,\"args\":{\"correlation\":42}}\n"
		"]}";
	struct merge_source s;

	parse_ok(&s, tl);
	assert_int_equal(s.ncoll, 3);
	assert_int_equal(s.coll[0].end_ns, 1010000);
	assert_int_equal(s.coll[0].gpu_end_ns, 1025250);
	assert_int_equal(s.coll[1].gpu_end_ns, 0);
	assert_int_equal(s.coll[2].gpu_end_ns, 0);
	merge_source__clear(&s);
}

static void test_read_rejects(void **state)
{
	static const struct {
		const char *tl, *sum, *why;
	} bad[] = {
		{ "[1,2]", summary_ok, "traceEvents" },
		{ "{\"traceEvents\":[{\"ph\":\"X\",\"pid\":1,\"tid\":1,\"ts\":-5,\"dur\":1}]}", summary_ok, "malformed" },
		{ "{\"traceEvents\":[{\"ph\":\"X\",\"pid\":\"1\",\"tid\":1,\"ts\":5,\"dur\":1}]}", summary_ok, "malformed" },
		{ "{\"traceEvents\":[{\"ph\":\"X\",\"pid\":1,\"tid\":1,\"ts\":5,\"dur\":1}", summary_ok, "traceEvents" },
		{ "{\"traceEvents\":[]}", "{\"schema\":\"other/v1\"}", "not an aiprof summary" },
		{ "{\"traceEvents\":[]}", "{\"schema\":", "not JSON" },
		{ "{\"traceEvents\":[],\"stackFrames\":[1]}", summary_ok, "stackFrames" },
	};

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct merge_source s;
		char msg[512] = "";

		assert_true(merge_source__parse(&s, "r", dup(bad[i].tl), strlen(bad[i].tl), bad[i].sum,
						strlen(bad[i].sum), msg, sizeof(msg)) < 0);
		if (!strstr(msg, bad[i].why))
			fail_msg("case %zu: '%s' does not say '%s'", i, msg, bad[i].why);
		merge_source__clear(&s);
	}
}

static void test_read_no_collectives(void **state)
{
	static const char tl[] = "{\"traceEvents\":[{\"ph\":\"X\",\"cat\":\"cuda_api\",\"name\":\"cudaMalloc\","
				 "\"pid\":3,\"tid\":3,\"ts\":1,\"dur\":1,\"args\":{}}]}";
	struct merge_source s;
	char msg[512] = "";

	assert_int_equal(merge_source__parse(&s, "r", dup(tl), strlen(tl), summary_ok, strlen(summary_ok), msg,
					     sizeof(msg)), 0);
	assert_int_equal(s.ncoll, 0);
	assert_int_equal(s.rank, -1);
	assert_int_equal(s.win_end_ns, 9000000);          /* from the summary */
	merge_source__clear(&s);
}


/* ---- the whole analysis on synthetic ranks --------------------------------------------- */

struct fake_rank {
	int rank, nranks;
	int64_t clock;             /* added to every time of this rank: its host's clock */
	const uint64_t *start, *end;
	size_t n;
	uint64_t last_api_end;     /* end of its last CUDA call (0: the last collective's) */
	uint64_t win_end;
	const char *wait;          /* an off-CPU wait from the last call to the window end */
	bool wait_in_nccl;
	const char *session;
	const uint64_t *gpu_end;   /* ends of the collectives' kernels (CUPTI), NULL: none */
	const char *boot_id;       /* its summary's clock_domain (time namespace 0), NULL: none */
};

static void load_fake(struct merge_source *s, const struct fake_rank *f)
{
	char *tl = NULL, *sum = NULL, msg[512] = "";
	size_t tl_len = 0, sum_len = 0;
	FILE *o = open_memstream(&tl, &tl_len);
	uint64_t last = f->last_api_end ? f->last_api_end : f->end[f->n - 1];

	assert_non_null(o);
	fprintf(o, "{\"traceEvents\":[{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":1,\"tid\":0,\"ts\":0,"
		   "\"args\":{\"name\":\"trainer\"}}");
	for (size_t i = 0; i < f->n; i++) {
		fprintf(o, ",\n{\"ph\":\"X\",\"cat\":\"nccl\",\"name\":\"ncclAllReduce\",\"pid\":1,\"tid\":2,"
			   "\"ts\":%.3f,\"dur\":%.3f,\"args\":{\"op\":\"AllReduce\",\"bytes\":4096,\"rank\":%d,"
			   "\"nranks\":%d,\"comm\":\"0x5\",\"correlation\":%zu}}",
			(double)(int64_t)(f->start[i] + f->clock) / 1e3, (double)(f->end[i] - f->start[i]) / 1e3,
			f->rank, f->nranks, i + 1);
		if (f->gpu_end)
			fprintf(o, ",\n{\"ph\":\"X\",\"cat\":\"cuda_kernel\",\"name\":\"ncclDevKernel_AllReduce_Sum_f32_RING_LL\","
				   "\"pid\":1,\"tid\":1000013,\"ts\":%.3f,\"dur\":20,\"args\":{\"nccl_op\":\"AllReduce\","
				   "\"nccl_seq\":%zu,\"nccl_comm\":\"0x5\",\"correlation\":%zu}}",
				(double)(int64_t)(f->gpu_end[i] + f->clock) / 1e3 - 20, i + 1, i + 1);
	}
	fprintf(o, ",\n{\"ph\":\"X\",\"cat\":\"cuda_api\",\"name\":\"cudaMemcpyAsync\",\"pid\":1,\"tid\":2,"
		   "\"ts\":%.3f,\"dur\":1,\"args\":{}}", (double)(int64_t)(last + f->clock) / 1e3 - 0.001);
	if (f->wait)
		fprintf(o, ",\n{\"ph\":\"X\",\"cat\":\"offcpu\",\"name\":\"%s\",\"pid\":1,\"tid\":2,\"ts\":%.3f,"
			   "\"dur\":%.3f,\"sf\":2,\"args\":{}}", f->wait, (double)(int64_t)(last + f->clock) / 1e3,
			(double)(f->win_end - last) / 1e3);
	fprintf(o, "],\"stackFrames\":{\"1\":{\"name\":\"%s\"},\"2\":{\"name\":\"[libc.so.6]\",\"parent\":\"1\"}},"
		   "\"otherData\":{\"window_start_ns\":%lld,\"window_end_ns\":%lld}}",
		f->wait_in_nccl ? "ncclAllReduce" : "train_step", (long long)(f->start[0] + f->clock - 1000000),
		(long long)(f->win_end + f->clock));
	fclose(o);
	o = open_memstream(&sum, &sum_len);
	assert_non_null(o);
	fprintf(o, "{\"schema\":\"aiprof.summary/v2\",\"ebpf\":{\"collectors\":[\"offcpu\"]},\"origin\":"
		   "{\"session\":\"%s\",\"pod\":\"trainer-%d\",\"host\":\"node-%d\"},\"findings\":[]",
		f->session ? f->session : "ns/s", f->rank, f->rank);
	if (f->boot_id)
		fprintf(o, ",\"clock_domain\":{\"boot_id\":\"%s\",\"time_namespace_offset_ns\":0}", f->boot_id);
	fputs("}", o);
	fclose(o);
	if (merge_source__parse(s, "fake", tl, tl_len, sum, sum_len, msg, sizeof(msg)) != 0)
		fail_msg("%s", msg);
	free(sum);
}

/* A job of nranks ranks and n blocking collectives, one per 50 ms step: every rank enters
 * at step start (+ late[rank]), all end 1 ms after the last one entered. */
#define STEPS 40
static uint64_t g_start[4][STEPS], g_end[4][STEPS];

static void make_steps(int nranks, const uint64_t *late)
{
	for (size_t i = 0; i < STEPS; i++) {
		uint64_t t = 10000 * NS_PER_MS + i * 50 * NS_PER_MS + (rnd() % 3000000), last = 0;

		for (int r = 0; r < nranks; r++) {
			g_start[r][i] = t + late[r] + rnd() % 200000;
			last = g_start[r][i] > last ? g_start[r][i] : last;
		}
		for (int r = 0; r < nranks; r++)
			g_end[r][i] = last + NS_PER_MS;
	}
}

static json_t *analyse(struct fake_rank *f, size_t n, int want)
{
	struct merge_source s[4];
	json_t *sum = NULL;
	char msg[512] = "";
	int r;

	for (size_t i = 0; i < n; i++)
		load_fake(&s[i], &f[i]);
	r = merge_analyse(s, n, &sum, msg, sizeof(msg));
	if (r != want)
		fail_msg("merge_analyse: %d (%s)", r, msg);
	if (r < 0)
		for (size_t i = 0; i < n; i++)
			merge_source__clear(&s[i]);
	return sum;
}

static json_t *rank_of(json_t *sum, int rank)
{
	size_t i;
	json_t *x;

	json_array_foreach(json_object_get(sum, "ranks"), i, x)
		if (json_integer_value(json_object_get(x, "rank")) == rank)
			return x;
	fail_msg("rank %d missing", rank);
	return NULL;
}

static json_t *finding_of(json_t *sum, const char *category)
{
	size_t i, n = 0;
	json_t *f, *hit = NULL;

	json_array_foreach(json_object_get(sum, "findings"), i, f) {
		if (!strcmp(json_string_value(json_object_get(f, "category")), category)) {
			hit = f;
			n++;
		}
	}
	return n == 1 ? hit : NULL;
}

static void test_straggler_across_hosts(void **state)
{
	static const uint64_t late[3] = { 0, 0, 15 * NS_PER_MS };
	struct fake_rank f[3];
	json_t *sum, *st;

	make_steps(3, late);
	for (int r = 0; r < 3; r++)
		f[r] = (struct fake_rank){ .rank = r, .nranks = 3, .start = g_start[r], .end = g_end[r], .n = STEPS,
					   .win_end = g_end[0][STEPS - 1] + NS_PER_MS };
	f[1].clock = 3000000000LL;          /* host clocks 3 s ahead, 1.7 s behind */
	f[2].clock = -1700000000LL;
	sum = analyse(f, 3, 0);
	assert_true(json_real_value(json_object_get(rank_of(sum, 1), "offset_us")) == 3000000.0);
	assert_true(json_real_value(json_object_get(rank_of(sum, 2), "offset_us")) == -1700000.0);
	assert_true(json_real_value(json_object_get(json_object_get(json_object_get(sum, "alignment"),
								      "residual_skew_us"), "max")) == 0.0);
	st = finding_of(sum, "Straggler");
	assert_non_null(st);
	assert_int_equal(json_integer_value(json_object_get(st, "rank")), 2);
	assert_null(finding_of(sum, "NcclHang"));
	json_decref(sum);

	/* the same job without the straggler: nothing */
	make_steps(3, (const uint64_t[3]){ 0, 0, 0 });
	sum = analyse(f, 3, 0);
	assert_int_equal(json_array_size(json_object_get(sum, "findings")), 0);
	json_decref(sum);
}

static const char *clock_of(json_t *sum, int rank)
{
	return json_string_value(json_object_get(rank_of(sum, rank), "clock"));
}

static double offset_of(json_t *sum, int rank)
{
	return json_real_value(json_object_get(rank_of(sum, rank), "offset_us"));
}

static void test_clock_groups(void **state)
{
	static const char boot_a[] = "0f0e8c1a-7d2b-4a57-9f43-2b1c9e6d5a01", boot_b[] = "a1b2c3d4-e5f6-4789-8abc-def012345678";
	static const size_t skip[4] = { 0, 5, 2, 7 };
	static uint64_t start[4][STEPS], end[4][STEPS];
	struct fake_rank f[4];
	json_t *sum;

	/* ranks 0 and 1 on host A, 2 and 3 on host B (its clock 2 s ahead); steps of 50-53 ms;
	 * each rank's call ends up to 0.3 ms apart (wake-ups); windows starting at different
	 * collectives */
	for (size_t i = 0; i < STEPS; i++) {
		uint64_t t = 10000 * NS_PER_MS + i * 50 * NS_PER_MS + rnd() % (3 * NS_PER_MS);

		for (int r = 0; r < 4; r++) {
			start[r][i] = t + rnd() % 200000;
			end[r][i] = t + 5 * NS_PER_MS + rnd() % 300000;
		}
	}
	for (int r = 0; r < 4; r++)
		f[r] = (struct fake_rank){ .rank = r, .nranks = 4, .start = start[r] + skip[r], .end = end[r] + skip[r],
					   .n = STEPS - skip[r], .win_end = end[0][STEPS - 1] + NS_PER_MS,
					   .boot_id = r < 2 ? boot_a : boot_b, .clock = r < 2 ? 0 : 2000000000LL };
	sum = analyse(f, 4, 0);
	/* the reference's clock-mate: no offset, only the numbering matched */
	assert_string_equal(clock_of(sum, 0), "reference");
	assert_string_equal(clock_of(sum, 1), "shared");
	assert_true(offset_of(sum, 0) == 0.0 && offset_of(sum, 1) == 0.0);
	assert_int_equal(json_integer_value(json_object_get(rank_of(sum, 1), "shift")), 5);
	/* host B's two ranks: fitted, and one offset between them */
	assert_string_equal(clock_of(sum, 2), "fitted");
	assert_string_equal(clock_of(sum, 3), "fitted");
	assert_true(offset_of(sum, 2) == offset_of(sum, 3));
	assert_true(offset_of(sum, 2) > 2000000.0 - 500 && offset_of(sum, 2) < 2000000.0 + 500);
	assert_int_equal(json_integer_value(json_object_get(rank_of(sum, 3), "shift")), 7);
	json_decref(sum);

	/* a rank whose summary names no clock is fitted, whatever host it ran on */
	f[1].boot_id = NULL;
	sum = analyse(f, 4, 0);
	assert_string_equal(clock_of(sum, 1), "fitted");
	assert_string_equal(clock_of(sum, 2), "fitted");
	json_decref(sum);
}

static void test_hang_asynchronous_collectives(void **state)
{
	struct fake_rank f[3];
	json_t *sum, *h;
	uint64_t end;

	make_steps(3, (const uint64_t[3]){ 0, 0, 0 });
	end = g_end[0][STEPS - 1] + 2000 * NS_PER_MS;
	/* ranks 0 and 2 enqueued collective #40 (asynchronous: it returned) and then blocked;
	 * rank 1 stopped after #39 */
	for (int r = 0; r < 3; r++)
		f[r] = (struct fake_rank){ .rank = r, .nranks = 3, .clock = r * 777777, .start = g_start[r], .end = g_end[r],
					   .n = r == 1 ? STEPS - 1 : STEPS, .win_end = end };
	sum = analyse(f, 3, 0);
	h = finding_of(sum, "NcclHang");
	assert_non_null(h);
	assert_string_equal(json_string_value(json_object_get(json_object_get(h, "evidence"), "never_entered_ranks")),
			    "1");
	assert_int_equal(json_integer_value(json_object_get(h, "rank")), 1);
	json_decref(sum);

	/* rank 1's window ended before the others entered #40: no evidence against it */
	f[1].win_end = g_end[0][STEPS - 2] + 50 * NS_PER_MS;
	sum = analyse(f, 3, 0);
	h = finding_of(sum, "NcclHang");
	assert_non_null(h);
	assert_string_equal(json_string_value(json_object_get(json_object_get(h, "evidence"), "never_entered_ranks")),
			    "unknown");
	json_decref(sum);
}

static void test_hang_blocking_collectives(void **state)
{
	struct fake_rank f[3];
	json_t *sum, *h;
	uint64_t end;

	make_steps(3, (const uint64_t[3]){ 0, 0, 0 });
	end = g_end[0][STEPS - 1] + 1500 * NS_PER_MS;
	for (int r = 0; r < 3; r++)
		f[r] = (struct fake_rank){ .rank = r, .nranks = 3, .start = g_start[r], .end = g_end[r], .n = STEPS,
					   .last_api_end = g_end[r][STEPS - 1] + 5 * NS_PER_MS, .win_end = end,
					   .wait = r == 1 ? "read: pipe_read" : "futex: futex_do_wait",
					   .wait_in_nccl = r != 1 };
	sum = analyse(f, 3, 0);
	h = finding_of(sum, "NcclHang");
	assert_non_null(h);
	assert_string_equal(json_string_value(json_object_get(json_object_get(h, "evidence"), "never_entered_ranks")),
			    "1");
	assert_string_equal(json_string_value(json_object_get(json_object_get(h, "evidence"), "blocked_ranks")), "0,2");
	assert_string_equal(json_string_value(json_object_get(h, "severity")), "critical");
	json_decref(sum);

	/* no off-CPU data: a hang, but whose cannot be told */
	for (int r = 0; r < 3; r++)
		f[r].wait = NULL;
	sum = analyse(f, 3, 0);
	h = finding_of(sum, "NcclHang");
	assert_non_null(h);
	assert_string_equal(json_string_value(json_object_get(h, "severity")), "warning");
	json_decref(sum);
}

/*
 * Asynchronous NCCL: each rank's call returns, and its host end (the next call's return)
 * comes tens to hundreds of us after the kernel; the kernels end together. Aligned on the
 * kernels, the residual skew is the kernels' (0 here), the straggler still named from the
 * host entries; a rank without kernel records falls back to its host ends, with a warning.
 */
static void test_gpu_kernel_basis(void **state)
{
	static const uint64_t late[3] = { 0, 0, 15 * NS_PER_MS };
	static uint64_t host_end[3][STEPS], gpu_end[STEPS];
	struct fake_rank f[3];
	json_t *sum, *al, *st;
	double off;

	make_steps(3, late);
	for (size_t i = 0; i < STEPS; i++) {
		gpu_end[i] = g_end[0][i];
		for (int r = 0; r < 3; r++)
			host_end[r][i] = g_end[r][i] + 30000 + rnd() % 200000;
	}
	for (int r = 0; r < 3; r++)
		f[r] = (struct fake_rank){ .rank = r, .nranks = 3, .start = g_start[r], .end = host_end[r],
					   .n = STEPS, .win_end = g_end[0][STEPS - 1] + NS_PER_MS, .gpu_end = gpu_end };
	f[1].clock = 3000000000LL;
	f[2].clock = -1700000000LL;
	sum = analyse(f, 3, 0);
	al = json_object_get(sum, "alignment");
	assert_string_equal(json_string_value(json_object_get(al, "basis")), "gpu_kernel_end");
	assert_int_equal(json_integer_value(json_object_get(al, "collectives_compared_on_gpu")), STEPS);
	assert_true(json_real_value(json_object_get(json_object_get(al, "residual_skew_us"), "max")) == 0.0);
	for (int r = 0; r < 3; r++)
		assert_string_equal(json_string_value(json_object_get(rank_of(sum, r), "alignment_basis")),
				    "gpu_kernel_end");
	assert_true(json_real_value(json_object_get(rank_of(sum, 1), "offset_us")) == 3000000.0);
	assert_true(json_real_value(json_object_get(rank_of(sum, 2), "offset_us")) == -1700000.0);
	st = finding_of(sum, "Straggler");
	assert_non_null(st);
	assert_int_equal(json_integer_value(json_object_get(st, "rank")), 2);
	assert_int_equal(json_array_size(json_object_get(sum, "warnings")), 0);
	json_decref(sum);

	/* rank 2 without CUPTI: aligned on its host ends, said so */
	f[2].gpu_end = NULL;
	sum = analyse(f, 3, 0);
	al = json_object_get(sum, "alignment");
	assert_string_equal(json_string_value(json_object_get(al, "basis")), "mixed");
	assert_string_equal(json_string_value(json_object_get(rank_of(sum, 2), "alignment_basis")), "host_call_end");
	assert_string_equal(json_string_value(json_object_get(rank_of(sum, 1), "alignment_basis")), "gpu_kernel_end");
	assert_true(json_real_value(json_object_get(rank_of(sum, 1), "offset_us")) == 3000000.0);
	/* within the host ends' noise (up to 200 us) */
	off = json_real_value(json_object_get(rank_of(sum, 2), "offset_us")) + 1700000.0;
	assert_true(off > -200.0 && off < 200.0);
	assert_non_null(strstr(json_string_value(json_array_get(json_object_get(sum, "warnings"), 0)),
			       "host ends of its collective calls"));
	assert_non_null(finding_of(sum, "Straggler"));
	json_decref(sum);

	/* no rank with kernels: the host basis, as before */
	f[0].gpu_end = f[1].gpu_end = NULL;
	sum = analyse(f, 3, 0);
	assert_string_equal(json_string_value(json_object_get(json_object_get(sum, "alignment"), "basis")),
			    "host_call_end");
	assert_int_equal(json_array_size(json_object_get(sum, "warnings")), 0);
	json_decref(sum);
}

static void test_sources_that_do_not_go_together(void **state)
{
	struct fake_rank f[2];

	make_steps(2, (const uint64_t[2]){ 0, 0 });
	f[0] = (struct fake_rank){ .rank = 0, .nranks = 2, .start = g_start[0], .end = g_end[0], .n = STEPS,
				   .win_end = g_end[0][STEPS - 1], .session = "ns/a" };
	f[1] = (struct fake_rank){ .rank = 1, .nranks = 2, .start = g_start[1], .end = g_end[1], .n = STEPS,
				   .win_end = g_end[0][STEPS - 1], .session = "ns/b" };
	analyse(f, 2, -EINVAL);
	f[1].session = "ns/a";
	f[1].rank = 0;
	analyse(f, 2, -EINVAL);
	f[1].rank = 1;
	f[1].nranks = 4;
	analyse(f, 2, -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_same_windows_offset_recovered),
		cmocka_unit_test(test_window_starting_later_and_clock_behind),
		cmocka_unit_test(test_reference_starting_later),
		cmocka_unit_test(test_wakeup_delays),
		cmocka_unit_test(test_one_clock_takes_the_shift_whose_ends_meet),
		cmocka_unit_test(test_outliers_do_not_move_the_offset),
		cmocka_unit_test(test_clock_groups),
		cmocka_unit_test(test_gpu_kernel_ends_preferred),
		cmocka_unit_test(test_numbered_collectives_survive_lost_events),
		cmocka_unit_test(test_long_windows_are_screened),
		cmocka_unit_test(test_signatures_must_agree),
		cmocka_unit_test(test_perfectly_periodic_is_ambiguous),
		cmocka_unit_test(test_nothing_to_match),
		cmocka_unit_test(test_median_and_quantiles),
		cmocka_unit_test(test_read_world_communicator),
		cmocka_unit_test(test_read_links_kernels),
		cmocka_unit_test(test_read_rejects),
		cmocka_unit_test(test_read_no_collectives),
		cmocka_unit_test(test_straggler_across_hosts),
		cmocka_unit_test(test_hang_asynchronous_collectives),
		cmocka_unit_test(test_hang_blocking_collectives),
		cmocka_unit_test(test_gpu_kernel_basis),
		cmocka_unit_test(test_sources_that_do_not_go_together),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
