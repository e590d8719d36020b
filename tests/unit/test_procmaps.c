/* SPDX-License-Identifier: MIT */
/* common/procmaps.c: /proc/PID/maps parsing, lookups and module grouping. */
#include <errno.h>
#include <gnu/libc-version.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <cmocka.h>
#include "procmaps.h"

static const char sample[] =
	"55e0c9a00000-55e0c9a02000 r--p 00000000 08:01 1311 /usr/bin/prog\n"
	"55e0c9a02000-55e0c9a07000 r-xp 00002000 08:01 1311 /usr/bin/prog\n"
	"55e0c9a07000-55e0c9a09000 r--p 00007000 08:01 1311 /usr/bin/prog\n"
	"55e0c9a09000-55e0c9a0a000 rw-p 00009000 08:01 1311 /usr/bin/prog\n"
	"55e0cb000000-55e0cb021000 rw-p 00000000 00:00 0                          [heap]\n"
	"7f0000000000-7f0000028000 r--p 00000000 08:01 2222                       /usr/lib/x86_64-linux-gnu/libc.so.6\n"
	"7f0000028000-7f000019d000 r-xp 00028000 08:01 2222                       /usr/lib/x86_64-linux-gnu/libc.so.6\n"
	"7f000019d000-7f00001f5000 r--p 0019d000 08:01 2222                       /usr/lib/x86_64-linux-gnu/libc.so.6\n"
	"7f00001f5000-7f00001f6000 ---p 001f5000 08:01 2222                       /usr/lib/x86_64-linux-gnu/libc.so.6\n"
	"7f00001f6000-7f00001fa000 r--p 001f5000 08:01 2222                       /usr/lib/x86_64-linux-gnu/libc.so.6\n"
	"7f00001fa000-7f00001fc000 rw-p 001f9000 08:01 2222                       /usr/lib/x86_64-linux-gnu/libc.so.6\n"
	"7f00001fc000-7f0000209000 rw-p 00000000 00:00 0 \n"
	"7f0000300000-7f0000301000 r-xp 00000000 00:05 77 /memfd:libaiprof.so (deleted)\n"
	"7f0000400000-7f0000401000 rw-s 00001000 103:02 4242 /home/me/My Documents/data file.bin\n"
	"7f0000500000-7f0000501000 r-xp 00000000 08:01 9 /opt/old/libfoo.so (deleted)\n"
	"7f0000600000-7f0000601000 r--p 00000000 08:01 2222 /usr/lib/x86_64-linux-gnu/libc.so.6\n"
	"7f0000601000-7f0000602000 r-xp 00001000 08:01 2222 /usr/lib/x86_64-linux-gnu/libc.so.6\n"
	"7ffd1e3c1000-7ffd1e3e2000 rw-p 00000000 00:00 0                          [stack]\n"
	"7ffd1e3f8000-7ffd1e3fa000 r-xp 00000000 00:00 0                          [vdso]\n"
	"ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0                  [vsyscall]";

static void test_parse_well_formed(void **state)
{
	struct maps *m = NULL;
	const struct maps_entry *e;

	assert_int_equal(maps__parse(sample, strlen(sample), &m), 0);
	assert_int_equal(m->n, 20);

	e = &m->v[0];
	assert_true(e->start == 0x55e0c9a00000ull && e->end == 0x55e0c9a02000ull);
	assert_int_equal(e->prot, PROT_READ);
	assert_false(e->shared);
	assert_int_equal(e->offset, 0);
	assert_int_equal(e->dev_major, 8);
	assert_int_equal(e->dev_minor, 1);
	assert_int_equal(e->inode, 1311);
	assert_string_equal(e->path, "/usr/bin/prog");

	assert_int_equal(m->v[1].prot, PROT_READ | PROT_EXEC);
	assert_int_equal(m->v[1].offset, 0x2000);
	assert_int_equal(m->v[3].prot, PROT_READ | PROT_WRITE);
	assert_string_equal(m->v[4].path, "[heap]");
	assert_int_equal(m->v[8].prot, 0);
	assert_null(m->v[11].path);  /* anonymous, even with a trailing blank */
	assert_string_equal(m->v[12].path, "/memfd:libaiprof.so (deleted)");

	e = &m->v[13];
	assert_true(e->shared);
	assert_int_equal(e->dev_major, 0x103);
	assert_int_equal(e->dev_minor, 2);
	assert_string_equal(e->path, "/home/me/My Documents/data file.bin");

	assert_string_equal(m->v[14].path, "/opt/old/libfoo.so (deleted)");
	assert_string_equal(m->v[17].path, "[stack]");
	assert_string_equal(m->v[18].path, "[vdso]");
	e = &m->v[19];  /* last line, no newline */
	assert_true(e->start == 0xffffffffff600000ull && e->end == 0xffffffffff601000ull);
	assert_int_equal(e->prot, PROT_EXEC);
	assert_string_equal(e->path, "[vsyscall]");

	assert_false(maps_entry__is_file(&m->v[4]));
	assert_false(maps_entry__is_file(&m->v[11]));
	assert_true(maps_entry__is_file(&m->v[12]));
	assert_true(maps_entry__same_file(&m->v[5], &m->v[10]));
	assert_false(maps_entry__same_file(&m->v[0], &m->v[5]));
	maps__free(m);
}

static void test_parse_empty_and_newlines(void **state)
{
	struct maps *m = NULL;
	const char one[] = "1000-2000 r--p 00000000 00:00 0\n";

	assert_int_equal(maps__parse("", 0, &m), 0);
	assert_int_equal(m->n, 0);
	assert_null(maps__find_addr(m, 0x1000));
	maps__free(m);

	/* Not NUL-terminated: only len bytes count. */
	m = NULL;
	assert_int_equal(maps__parse(one, sizeof(one) - 1, &m), 0);
	assert_int_equal(m->n, 1);
	assert_null(m->v[0].path);
	maps__free(m);

	m = NULL;
	assert_int_equal(maps__parse(one, 20, &m), -EINVAL);  /* cut inside a line */
	assert_null(m);
	maps__free(NULL);
}

static void test_parse_malformed(void **state)
{
	static const char *const bad[] = {
		"\n",
		"1000-2000 r--p 00000000 00:00 0\n\n2000-3000 r--p 00000000 00:00 0\n",
		"1000-2000 r--p 00000000 00:00 0\ngarbage\n",
		"zz-2000 r--p 00000000 00:00 0",
		"1000 2000 r--p 00000000 00:00 0",
		"1000-2000 r--p",
		"1000-2000 r--p 00000000 00:00",
		"1000-2000 r--p 00000000 0000 0",
		"1000-2000 r--p 00000000 00:00 x",
		"1000-2000 r--p 00000000 00:00 0x /lib",
		"1000-2000 r--q 00000000 00:00 0",
		"1000-2000 w--p 00000000 00:00 0",
		"1000-2000 r-p 00000000 00:00 0",
		"2000-1000 r--p 00000000 00:00 0",
		"1000-1000 r--p 00000000 00:00 0",
		"10000000000000000-10000000000000001 r--p 00000000 00:00 0",
		"1000-2000 r--p 00000000 100000000:00 0",
		"1000-2000 r--p 00000000 00:00 99999999999999999999",
		"-2000 r--p 00000000 00:00 0",
		"1000-2000r--p 00000000 00:00 0",
		/* Overlapping ranges (a map that changed while read): one address, two entries. */
		"1000-3000 r--p 00000000 00:00 0\n2000-4000 r--p 00000000 00:00 0\n",
		"5000-6000 r--p 00000000 00:00 0\n1000-5001 r--p 00000000 00:00 0\n",
	};
	static const char nul[] = "1000-2000 r--p 00000000 00:00 0 /a\0b\n";

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct maps *m = NULL;
		int r = maps__parse(bad[i], strlen(bad[i]), &m);

		if (r != -EINVAL)
			fail_msg("accepted malformed line %zu: \"%s\" (r=%d)", i, bad[i], r);
		assert_null(m);
	}
	{
		struct maps *m = NULL;

		assert_int_equal(maps__parse(nul, sizeof(nul) - 1, &m), -EINVAL);
		assert_int_equal(maps__parse(NULL, 1, &m), -EINVAL);
		assert_null(m);
	}
}

static void test_find_addr(void **state)
{
	/* Out of order on purpose: a map read while it changed. */
	static const char text[] =
		"5000-6000 r--p 00000000 00:00 0\n"
		"1000-2000 r--p 00000000 00:00 0\n"
		"3000-4000 r--p 00000000 00:00 0\n";
	struct maps *m = NULL;

	assert_int_equal(maps__parse(text, strlen(text), &m), 0);
	assert_int_equal(m->n, 3);
	assert_true(m->v[0].start == 0x1000 && m->v[1].start == 0x3000 && m->v[2].start == 0x5000);
	assert_null(maps__find_addr(m, 0));
	assert_null(maps__find_addr(m, 0xfff));
	assert_ptr_equal(maps__find_addr(m, 0x1000), &m->v[0]);
	assert_ptr_equal(maps__find_addr(m, 0x1fff), &m->v[0]);
	assert_null(maps__find_addr(m, 0x2000));
	assert_ptr_equal(maps__find_addr(m, 0x3abc), &m->v[1]);
	assert_ptr_equal(maps__find_addr(m, 0x5fff), &m->v[2]);
	assert_null(maps__find_addr(m, 0x6000));
	assert_null(maps__find_addr(m, UINT64_MAX));
	assert_null(maps__find_addr(NULL, 0x1000));
	maps__free(m);
}

static void test_path_matches(void **state)
{
	assert_true(maps_path__matches("/usr/lib/x86_64-linux-gnu/libc.so.6", "libc.so.6"));
	assert_true(maps_path__matches("/lib/x86_64-linux-gnu/libc-2.31.so", "libc-2.*.so"));
	assert_true(maps_path__matches("/lib/ld-musl-x86_64.so.1", "ld-musl-*"));
	assert_true(maps_path__matches("/usr/lib/libc.so.6 (deleted)", "libc.so.6"));
	assert_true(maps_path__matches("/x/My Lib.so (deleted)", "My Lib.so"));
	assert_true(maps_path__matches("libc.so.6", "libc.so.6"));
	assert_false(maps_path__matches("/usr/lib/libc.so.6.1", "libc.so.6"));
	assert_false(maps_path__matches("/usr/lib/libc.so.6/x", "libc.so.6"));
	assert_false(maps_path__matches("/usr/lib/xlibc.so.6", "libc.so.6"));
	assert_false(maps_path__matches(NULL, "libc.so.6"));
	assert_false(maps_path__matches("/lib/libc.so.6", NULL));
}

static void test_modules(void **state)
{
	struct maps *m = NULL;
	struct maps_module mod;
	size_t pos = 0;

	assert_int_equal(maps__parse(sample, strlen(sample), &m), 0);

	assert_int_equal(maps__next_module(m, &pos, &mod), 0);
	assert_string_equal(mod.path, "/usr/bin/prog");
	assert_int_equal(mod.first, 0);
	assert_int_equal(mod.last, 3);
	assert_true(mod.load_start == 0x55e0c9a00000ull && mod.end == 0x55e0c9a0a000ull);

	/* [heap] is not a module; libc spans its PROT_NONE gap and ends before the .bss. */
	assert_int_equal(maps__next_module(m, &pos, &mod), 0);
	assert_string_equal(mod.path, "/usr/lib/x86_64-linux-gnu/libc.so.6");
	assert_int_equal(mod.first, 5);
	assert_int_equal(mod.last, 10);
	assert_true(mod.load_start == 0x7f0000000000ull);

	assert_int_equal(maps__next_module(m, &pos, &mod), 0);
	assert_string_equal(mod.path, "/memfd:libaiprof.so (deleted)");
	assert_int_equal(maps__next_module(m, &pos, &mod), 0);
	assert_string_equal(mod.path, "/home/me/My Documents/data file.bin");
	assert_int_equal(maps__next_module(m, &pos, &mod), 0);
	assert_string_equal(mod.path, "/opt/old/libfoo.so (deleted)");

	/* A second load of the same file (dlmopen) is a module of its own. */
	assert_int_equal(maps__next_module(m, &pos, &mod), 0);
	assert_string_equal(mod.path, "/usr/lib/x86_64-linux-gnu/libc.so.6");
	assert_int_equal(mod.first, 15);
	assert_int_equal(mod.last, 16);
	assert_int_equal(maps__next_module(m, &pos, &mod), -ENOENT);
	assert_int_equal(maps__next_module(m, &pos, &mod), -ENOENT);

	assert_int_equal(maps__find_module(m, "libc.so.6", &mod), 0);
	assert_int_equal(mod.first, 5);
	assert_int_equal(maps__find_module(m, "libfoo.so", &mod), 0);
	assert_int_equal(mod.first, 14);
	assert_int_equal(maps__find_module(m, "ld-musl-*", &mod), -ENOENT);
	assert_int_equal(maps__find_module(m, "*vdso*", &mod), -ENOENT);  /* not a file */
	maps__free(m);
}

static void test_read_self(void **state)
{
	struct maps *m = NULL;
	struct maps_module mod;
	const struct maps_entry *e;
	char exe[PATH_MAX];
	ssize_t n;
	int on_stack = 0;

	n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	assert_true(n > 0);
	exe[n] = '\0';

	assert_int_equal(maps__read(getpid(), &m), 0);
	assert_true(m->n > 5);
	for (size_t i = 1; i < m->n; i++)
		assert_true(m->v[i - 1].start < m->v[i].start);

	e = maps__find_addr(m, (uint64_t)(uintptr_t)&test_read_self);
	assert_non_null(e);
	assert_true(e->prot & PROT_EXEC);
	assert_string_equal(e->path, exe);

	e = maps__find_addr(m, (uint64_t)(uintptr_t)&on_stack);
	assert_non_null(e);
	assert_non_null(e->path);
	assert_string_equal(e->path, "[stack]");

	assert_int_equal(maps__find_module(m, "libc.so.6", &mod), 0);
	assert_int_equal(m->v[mod.first].offset, 0);
	assert_true(mod.load_start <= (uint64_t)(uintptr_t)&gnu_get_libc_version);
	assert_true(mod.end > (uint64_t)(uintptr_t)&gnu_get_libc_version);
	maps__free(m);

	assert_int_equal(maps__read(0, &m), -EINVAL);
	assert_int_equal(maps__read(INT_MAX, &m), -ENOENT);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_parse_well_formed),
		cmocka_unit_test(test_parse_empty_and_newlines),
		cmocka_unit_test(test_parse_malformed),
		cmocka_unit_test(test_find_addr),
		cmocka_unit_test(test_path_matches),
		cmocka_unit_test(test_modules),
		cmocka_unit_test(test_read_self),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
