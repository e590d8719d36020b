/* SPDX-License-Identifier: MIT */
/*
 * The dlopen() hook, in a process that does not link the fixture: a module loaded
 * before the library that defines its symbols gets patched once the definer arrives;
 * a dlopen() from a module with DT_RUNPATH / DT_RPATH still finds what only that path
 * can find, although the real dlopen() is now called from libaiprof.so.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include "preload/got.h"
#include "preload/harness.h"

static void *g_lib;
static struct aiprof_ring_hdr *g_h;

static bool in_lib(const void *p)
{
	return h_same_module(p, dlsym(g_lib, "aiprof_preload_build"));
}

static void *load(const char *rel, int mode)
{
	char path[PATH_MAX];
	void *h = dlopen(h_build_path(rel, path, sizeof(path)), mode);

	if (!h)
		print_error("dlopen %s: %s\n", path, dlerror());
	return h;
}

static int group_setup(void **state)
{
	g_lib = h_load_lib();
	if (!g_lib || !(g_h = h_ring()))
		return -1;
	return 0;
}

static void test_definer_loaded_later(void **state)
{
	void *early = load("tests/unit/preload/libfixture_early.so", RTLD_LAZY | RTLD_LOCAL);
	int (*early_memset)(void *, size_t);
	struct aiprof_event ev[16];
	void **slot;
	char buf[64];

	assert_non_null(early);
	early_memset = (int (*)(void *, size_t))dlsym(early, "fixture_early_memset");
	assert_non_null(early_memset);
	slot = got_slot("libfixture_early.so", "cudaMemset", R_X86_64_JUMP_SLOT);
	assert_non_null(slot);
	/* nobody defines cudaMemset yet: the slot is left at its PLT stub */
	assert_true(h_same_module(*slot, early_memset));

	assert_non_null(load("tests/unit/preload/libfixture_cuda.so", RTLD_NOW | RTLD_GLOBAL));
	/* the dlopen hook patched it before dlopen returned */
	assert_true(in_lib(*slot));

	assert_int_equal(h_enable(g_h, AIPROF_COLLECT_CUDA), 0);
	h_drain(g_h, ev, 16, true);
	assert_int_equal(early_memset(buf, sizeof(buf)), 0);
	assert_int_equal(h_drain(g_h, ev, 16, false), 1);
	assert_int_equal(ev[0].type, AIPROF_EV_CUDA_MEMSET);
	assert_int_equal(ev[0].u.memcpy.dst, (uintptr_t)buf);
	assert_int_equal(ev[0].u.memcpy.bytes, sizeof(buf));
	assert_int_equal(h_disable(g_h), 0);
}

static void check_search(const char *loader, const char *dep)
{
	void *(*rp_open)(const char *);
	void *h, *dh;
	int (*value)(void);
	char origin_name[128];

	/* control: from here (no search path) the dependency cannot be found */
	h = dlopen(dep, RTLD_NOW);
	assert_null(h);

	h = load(loader, RTLD_NOW | RTLD_LOCAL);
	assert_non_null(h);
	rp_open = (void *(*)(const char *))dlsym(h, "fixture_rp_open");
	assert_non_null(rp_open);
	assert_true(in_lib(*got_slot(loader + strlen("tests/unit/preload/"), "dlopen",
				     R_X86_64_JUMP_SLOT)));

	dh = rp_open(dep);
	assert_non_null(dh);
	value = (int (*)(void))dlsym(dh, "fixture_rpdep_value");
	assert_non_null(value);
	assert_int_equal(value(), 42);

	/* already loaded: found by name again; $ORIGIN in the name means the loader's dir */
	assert_ptr_equal(rp_open(dep), dh);
	snprintf(origin_name, sizeof(origin_name), "$ORIGIN/rp/%s", dep);
	assert_ptr_equal(rp_open(origin_name), dh);
}

static void test_runpath(void **state)
{
	check_search("tests/unit/preload/libfixture_runpath.so", "libfixture_rpdep.so");
}

static void test_rpath(void **state)
{
	check_search("tests/unit/preload/libfixture_rpath.so", "libfixture_rpdep2.so");
}

static void test_old_symbol_version(void **state)
{
	void *h = load("tests/unit/preload/libfixture_oldver.so", RTLD_LAZY | RTLD_LOCAL);
	void *(*old_open)(const char *);
	void **slot = got_slot("libfixture_oldver.so", "dlopen", R_X86_64_JUMP_SLOT);
	char path[PATH_MAX];

	assert_non_null(h);
	assert_non_null(slot);
	/* never called, so still lazy: patched because dlopen@GLIBC_2.2.5 is the same function */
	assert_true(in_lib(*slot));
	old_open = (void *(*)(const char *))dlsym(h, "fixture_oldver_open");
	assert_non_null(old_open(h_build_path("tests/unit/preload/rp/libfixture_rpdep.so", path,
					      sizeof(path))));
}

static void test_missing_library_error(void **state)
{
	void *(*rp_open)(const char *);
	void *h = load("tests/unit/preload/libfixture_runpath.so", RTLD_NOW | RTLD_LOCAL);
	const char *err;

	rp_open = (void *(*)(const char *))dlsym(h, "fixture_rp_open");
	dlerror();
	assert_null(rp_open("libaiprof_no_such_library.so"));
	err = dlerror();
	assert_non_null(err);
	assert_non_null(strstr(err, "libaiprof_no_such_library.so"));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_definer_loaded_later),
		cmocka_unit_test(test_runpath),
		cmocka_unit_test(test_rpath),
		cmocka_unit_test(test_old_symbol_version),
		cmocka_unit_test(test_missing_library_error),
	};

	return cmocka_run_group_tests(tests, group_setup, NULL);
}
