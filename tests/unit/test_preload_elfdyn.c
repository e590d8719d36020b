/* SPDX-License-Identifier: MIT */
/* elfdyn (libaiprof's reader of loaded modules) against this process's own modules. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <dlfcn.h>
#include <errno.h>
#include <gnu/libc-version.h>
#include <link.h>
#include <pthread.h>
#include <string.h>

#include "elfdyn.h"

/* see tests/unit/preload/harness.h */
const char *__asan_default_options(void);
const char *__asan_default_options(void)
{
	return "intercept_tls_get_addr=0";
}

struct find {
	const char *module;     /* substring; "" = the executable */
	struct elf_dyn d;
	bool found;
};

static int find_cb(struct dl_phdr_info *info, size_t size, void *data)
{
	struct find *f = data;
	const char *name = info->dlpi_name ? info->dlpi_name : "";

	if (f->module[0] ? !strstr(name, f->module) : name[0] != '\0')
		return 0;
	for (unsigned i = 0; i < info->dlpi_phnum; i++)
		if (info->dlpi_phdr[i].p_type == PT_DYNAMIC)
			f->found = elf_dyn__parse(&f->d, info->dlpi_addr,
						  (const Elf64_Dyn *)(info->dlpi_addr +
								      info->dlpi_phdr[i].p_vaddr)) == 0;
	return f->found;
}

static struct elf_dyn module(const char *name)
{
	struct find f = { .module = name };

	dl_iterate_phdr(find_cb, &f);
	assert_true(f.found);
	return f.d;
}

static void test_lookup_matches_dlsym(void **state)
{
	struct elf_dyn libc = module("libc.so.6");
	void *h = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
	struct elf_sym_def def;

	assert_non_null(h);
	assert_true(libc.gnu_hash != NULL);
	assert_true(elf_dyn__lookup(&libc, "memfd_create", &def));
	assert_ptr_equal((void *)def.addr, dlsym(h, "memfd_create"));
	assert_string_equal(def.version, "GLIBC_2.27");
	/* two versions; the default one (pthread_cond_wait@@GLIBC_2.3.2) wins */
	assert_true(elf_dyn__lookup(&libc, "pthread_cond_wait", &def));
	assert_ptr_equal((void *)def.addr, dlsym(h, "pthread_cond_wait"));
	assert_string_equal(def.version, "GLIBC_2.3.2");
	assert_false(elf_dyn__lookup(&libc, "no_such_symbol_anywhere", &def));
	dlclose(h);
}

static void test_lookup_by_version(void **state)
{
	struct elf_dyn libc = module("libc.so.6");
	struct elf_sym_def def, old;

	/* glibc >= 2.34: dlopen@GLIBC_2.2.5 and dlopen@@GLIBC_2.34 are one function */
	assert_true(elf_dyn__lookup(&libc, "dlopen", &def));
	assert_string_equal(def.version, "GLIBC_2.34");
	assert_true(elf_dyn__lookup_version(&libc, "dlopen", "GLIBC_2.2.5", &old));
	assert_string_equal(old.version, "GLIBC_2.2.5");
	assert_true(old.addr == def.addr);
	/* a real ABI change: two functions */
	assert_true(elf_dyn__lookup(&libc, "pthread_cond_wait", &def));
	assert_true(elf_dyn__lookup_version(&libc, "pthread_cond_wait", "GLIBC_2.2.5", &old));
	assert_true(old.addr != def.addr);
	assert_false(elf_dyn__lookup_version(&libc, "dlopen", "GLIBC_9.9", &old));
	assert_false(elf_dyn__lookup_version(&libc, "dlopen", NULL, &old));
}

static void test_undefined_is_not_a_definition(void **state)
{
	struct elf_dyn exe = module("");
	struct elf_sym_def def;

	/* the executable imports dlopen; an import is never a definition */
	assert_false(elf_dyn__lookup(&exe, "dlopen", &def));
	assert_false(elf_dyn__lookup(&exe, "pthread_create", &def));
}

struct seen {
	bool dlopen_slot, pthread_create_slot;
	const char *version_ver;
};

static int got_cb(const struct elf_got_ref *ref, void *data)
{
	struct seen *s = data;

	if (strcmp(ref->name, "dlopen") == 0) {
		s->dlopen_slot = true;
		/* lazy PLT slot: either still the stub (in the exe) or libc's dlopen */
		assert_true(ref->type == R_X86_64_JUMP_SLOT || ref->type == R_X86_64_GLOB_DAT);
	}
	if (strcmp(ref->name, "pthread_create") == 0)
		s->pthread_create_slot = true;
	/* not intercepted by sanitizers, so always bound to libc with its version */
	if (strcmp(ref->name, "gnu_get_libc_version") == 0)
		s->version_ver = ref->version;
	assert_false(ref->sym_defined && strcmp(ref->name, "dlopen") == 0);
	return 0;
}

static void test_got_iteration(void **state)
{
	struct elf_dyn exe = module("");
	struct seen s = { 0 };
	void *(*volatile use_dlopen)(const char *, int) = dlopen;
	int (*volatile use_pthread)(pthread_t *, const pthread_attr_t *, void *(*)(void *),
				    void *) = pthread_create;

	(void)use_dlopen;
	(void)use_pthread;
	assert_non_null(gnu_get_libc_version());
	assert_int_equal(elf_dyn__for_each_got(&exe, got_cb, &s), 0);
	assert_true(s.dlopen_slot);
	assert_true(s.pthread_create_slot);
	assert_non_null(s.version_ver);
	assert_string_equal(s.version_ver, "GLIBC_2.2.5");
}

static int stop_cb(const struct elf_got_ref *ref, void *data)
{
	return ++*(int *)data == 3 ? 7 : 0;
}

static void test_got_iteration_stops(void **state)
{
	struct elf_dyn exe = module("");
	int n = 0;

	assert_int_equal(elf_dyn__for_each_got(&exe, stop_cb, &n), 7);
	assert_int_equal(n, 3);
}

static void test_parse_rejects_empty(void **state)
{
	static const Elf64_Dyn only_null[] = { { .d_tag = DT_NULL } };
	struct elf_dyn d;

	assert_int_equal(elf_dyn__parse(&d, 0, NULL), -ENOENT);
	assert_int_equal(elf_dyn__parse(&d, 0x1000, only_null), -ENOENT);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_lookup_matches_dlsym),
		cmocka_unit_test(test_lookup_by_version),
		cmocka_unit_test(test_undefined_is_not_a_definition),
		cmocka_unit_test(test_got_iteration),
		cmocka_unit_test(test_got_iteration_stops),
		cmocka_unit_test(test_parse_rejects_empty),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
