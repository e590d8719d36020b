/* SPDX-License-Identifier: MIT */
/*
 * injector/model/event_store.c: what a target's ring delivers is kept within bounds —
 * string chunks that lie are refused and counted, the events one process may leave in
 * memory are capped and the rest counted as dropped.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>
#include "event.h"
#include "injector/attach/session.h"
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
	for (int i = 0; i < 2500; i++)
		event_store__add(&s, &e);
	assert_int_equal(s.n, 1000);
	assert_int_equal(s.store_drops, 1500);
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
		cmocka_unit_test(test_mangled_names_demangled),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
