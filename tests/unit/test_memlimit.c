/* SPDX-License-Identifier: MIT */
/*
 * injector/target/memlimit.c: the memory limit a process runs under, read from a cgroup tree laid
 * out as the kernel does (v1 memory controller, v2, the hybrid "unified" mount), with the
 * smallest limit up the tree winning.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <cmocka.h>
#include "injector/target/memlimit.h"

static char root[] = "/tmp/aiprof-memlimit-XXXXXX";

static void put(const char *rel, const char *content)
{
	char path[512], dir[512], *slash;
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", root, rel);
	snprintf(dir, sizeof(dir), "%s", path);
	for (slash = strchr(dir + strlen(root) + 1, '/'); slash; slash = strchr(slash + 1, '/')) {
		*slash = 0;
		mkdir(dir, 0755);
		*slash = '/';
	}
	f = fopen(path, "w");
	assert_non_null(f);
	fputs(content, f);
	fclose(f);
}

static int setup(void **state)
{
	(void)state;
	if (!mkdtemp(root))
		return -1;
	put("memory/kubepods/pod1/memory.limit_in_bytes", "9223372036854771712\n");   /* none */
	put("memory/kubepods/pod1/ctr/memory.limit_in_bytes", "268435456\n");
	put("memory/kubepods/memory.limit_in_bytes", "1073741824\n");
	put("svc/a/memory.max", "max\n");
	put("svc/memory.max", "536870912\n");
	put("unified/hy/memory.max", "134217728\n");
	put("garbage/memory.max", "lots\n");
	return 0;
}

static int teardown(void **state)
{
	char cmd[600];

	(void)state;
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
	return system(cmd) == 0 ? 0 : -1;
}

static uint64_t limit_of(const char *proc_cgroup)
{
	uint64_t v = 0;

	assert_int_equal(memlimit_parse(root, proc_cgroup, &v), 0);
	return v;
}

static void test_limits(void **state)
{
	(void)state;
	/* v1: the container's own limit, below its pod's and the tree's */
	assert_int_equal(limit_of("4:memory:/kubepods/pod1/ctr\n0::/\n"), 268435456);
	/* v1, a folder without a limit of its own: the nearest one above */
	assert_int_equal(limit_of("4:memory:/kubepods/pod1\n"), 1073741824);
	/* v2: "max" is none, the parent's counts */
	assert_int_equal(limit_of("0::/svc/a\n"), 536870912);
	/* hybrid: v2's tree under unified/ */
	assert_int_equal(limit_of("4:memory:/\n0::/hy\n"), 134217728);
	/* nothing set, nothing readable, nonsense */
	assert_int_equal(limit_of("0::/\n"), UINT64_MAX);
	assert_int_equal(limit_of("0::/garbage\n"), UINT64_MAX);
	assert_int_equal(limit_of("no colons here\n4:memory\n::\n"), UINT64_MAX);
	assert_int_equal(limit_of(""), UINT64_MAX);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_limits, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
