/* SPDX-License-Identifier: MIT */
/*
 * injector/model/event_store.c: what a target's ring delivers is kept within bounds —
 * string chunks that lie are refused and counted, the events one process may leave in
 * memory are capped and the rest summed by what the summary's tables tell apart.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>
#include "event.h"
#include "injector/model/event_store.h"
#include "tests/workloads/ring_forge.h"

static void test_strings_reassembled_and_lies_refused(void **state)
{
	struct event_store s;
	struct aiprof_event e;

	(void)state;
	memset(&s, 0, sizeof(s));
	e = forge_str_chunk(5, 0, 90, 'k');
	event_store__add(&s, &e);
	e = forge_str_chunk(5, 80, 90, 'k');
	event_store__add(&s, &e);
	assert_int_equal(strlen(event_store__string(&s, 5)), 90);
	e = forge_str_chunk(5, 0, 200, 'k');              /* a later chunk announcing another length */
	event_store__add(&s, &e);
	e = forge_str_chunk(6, 60000, 0, 'k');            /* total 0, far offset: was a heap overflow */
	event_store__add(&s, &e);
	e = forge_str_chunk(7, 300, 200, 'k');            /* offset past total */
	event_store__add(&s, &e);
	e = forge_str_chunk(0, 0, 3, 'k');              /* id 0 */
	event_store__add(&s, &e);
	e = forge_str_chunk(EVENT_STORE_MAX_STRING_ID + 1, 0, 3, 'k');
	event_store__add(&s, &e);
	memset(&e, 0, sizeof(e));
	e.type = AIPROF_EV__MAX;                /* an unknown record */
	event_store__add(&s, &e);
	assert_int_equal(s.rejected, 6);
	assert_int_equal(strlen(event_store__string(&s, 5)), 90);
	assert_null(event_store__string(&s, 6));
	assert_int_equal(s.n, 0);
	event_store__clear(&s);
}

static void test_events_capped_and_counted(void **state)
{
	struct event_store s;
	struct aiprof_event e;

	(void)state;
	memset(&s, 0, sizeof(s));
	s.max_events = 1000;
	memset(&e, 0, sizeof(e));
	e.type = AIPROF_EV_CUDA_LAUNCH;
	e.api = AIPROF_API_cudaLaunchKernel;
	e.dur = 3;
	for (int i = 0; i < 2500; i++)
		event_store__add(&s, &e);
	/* the first events kept whole; the rest summed, not lost and not kept */
	assert_int_equal(s.n, 1000);
	assert_int_equal(s.store_drops, 0);
	assert_int_equal(s.over.events, 1500);
	assert_int_equal(s.over.n, 1);
	assert_int_equal(s.over.v[0].count, 1500);
	assert_int_equal(s.over.v[0].dur_ns, 4500);
	assert_true(s.cap <= 1000);
	event_store__clear(&s);
}

/* Past the budget, events are summed by what the summary's tables tell apart. */
static void test_sums_keyed_like_the_tables(void **state)
{
	struct event_store s;
	struct aiprof_event e;
	uint64_t launches_a = 0, launches_b = 0, h2d_bytes = 0, syncs = 0, total = 0;

	(void)state;
	memset(&s, 0, sizeof(s));
	s.max_events = 10;
	for (int i = 0; i < 400; i++) {
		memset(&e, 0, sizeof(e));
		e.ts = 1000 + (uint64_t)i;
		e.dur = 1;
		switch (i % 4) {
		case 0:         /* two kernels by name id, one by host stub address */
		case 1:
			e.type = AIPROF_EV_CUDA_LAUNCH;
			e.api = AIPROF_API_cuLaunchKernel;
			e.u.launch.name_id = i % 8 < 4 ? 7 : 0;
			e.u.launch.func = 0x401000;
			break;
		case 2:
			e.type = AIPROF_EV_CUDA_MEMCPY;
			e.api = AIPROF_API_cudaMemcpyAsync;
			e.u.memcpy.kind = AIPROF_MEMCPY_H2D;
			e.u.memcpy.bytes = 4096;
			break;
		default:
			e.type = AIPROF_EV_CUDA_SYNC;
			e.api = AIPROF_API_cudaStreamSynchronize;
			break;
		}
		event_store__add(&s, &e);
	}
	assert_int_equal(s.n, 10);
	assert_int_equal(s.over.events, 390);
	assert_int_equal(s.over.first_ts, 1010);
	for (size_t i = 0; i < s.over.n; i++) {
		const struct event_total *t = &s.over.v[i];

		total += t->count;
		if (t->type == AIPROF_EV_CUDA_LAUNCH && t->key == (EVENT_TOTAL_NAMED | 7))
			launches_a += t->count;
		else if (t->type == AIPROF_EV_CUDA_LAUNCH && t->key == 0x401000)
			launches_b += t->count;
		else if (t->type == AIPROF_EV_CUDA_MEMCPY && t->key == AIPROF_MEMCPY_H2D)
			h2d_bytes += t->bytes;
		else if (t->type == AIPROF_EV_CUDA_SYNC)
			syncs += t->count;
	}
	assert_int_equal(s.over.n, 4);
	assert_int_equal(total, 390);
	/* i from 10 to 399: launches where i % 4 < 2, split by i % 8 */
	assert_int_equal(launches_a + launches_b, 194);
	assert_int_equal(launches_a, 96);
	assert_int_equal(h2d_bytes, 98 * 4096);
	assert_int_equal(syncs, 98);
	event_store__clear(&s);
}

static void add_string(struct event_store *s, uint32_t id, const char *text)
{
	struct aiprof_event e = forge_str_chunk(id, 0, (uint16_t)strlen(text), 0);

	memcpy(e.u.str.s, text, strlen(text));
	event_store__add(s, &e);
}

/* A kernel's CUPTI / driver name and its launch's symbolised stub read the same. */
static void test_mangled_names_demangled(void **state)
{
	struct event_store s;

	(void)state;
	memset(&s, 0, sizeof(s));
	add_string(&s, 1, "_Z16scale_add_kernelPfPKffi");
	add_string(&s, 2, "0x401000,0x401200");
	add_string(&s, 3, "relu_fwd_kernel");
	add_string(&s, 4, "_Zx!not a mangled name");
	event_store__demangle(&s);
	assert_string_equal(event_store__string(&s, 1),
			    "scale_add_kernel(float*, float const*, float, int)");
	assert_string_equal(event_store__string(&s, 2), "0x401000,0x401200");
	assert_string_equal(event_store__string(&s, 3), "relu_fwd_kernel");
	assert_string_equal(event_store__string(&s, 4), "_Zx!not a mangled name");
	event_store__clear(&s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_strings_reassembled_and_lies_refused),
		cmocka_unit_test(test_events_capped_and_counted),
		cmocka_unit_test(test_sums_keyed_like_the_tables),
		cmocka_unit_test(test_mangled_names_demangled),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
