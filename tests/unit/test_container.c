/* SPDX-License-Identifier: MIT */
/*
 * injector/target/container.c: container ids as Kubernetes gives them, /proc/PID/cgroup lines of
 * cgroup v1, v2 and hybrid hosts with the cgroupfs and systemd drivers, and the choice of
 * targets (over a fake /proc tree, so the rule is checked without real processes).
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>
#include "injector/target/container.h"

#define ID "3f4e2a1b9c8d7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f"
#define ID2 "0000000000000000000000000000000000000000000000000000000000000001"

static void test_id_parse(void **state)
{
	char id[CONTAINER_ID_MAX + 1], why[512];
	static const char *const bad[] = {
		"", "containerd://", "containerd://abc", "containerd://" ID "0",
		"containerd://3F4E2A1B9C8D7E6F5A4B3C2D1E0F9A8B7C6D5E4F3A2B1C0D9E8F7A6B5C4D3E2F",
		"cri-o://" ID "/x", "rkt://" ID, "://" ID, "docker:/" ID, "..", ".", "a/b", "a b",
		"id\n", "containerd://" ID " ",
	};

	(void)state;
	assert_int_equal(container_id__parse("containerd://" ID, id, sizeof(id), why,
					     sizeof(why)), 0);
	assert_string_equal(id, ID);
	assert_int_equal(container_id__parse("cri-o://" ID, id, sizeof(id), why, sizeof(why)), 0);
	assert_string_equal(id, ID);
	assert_int_equal(container_id__parse("docker://" ID, id, sizeof(id), why, sizeof(why)), 0);
	assert_string_equal(id, ID);
	assert_int_equal(container_id__parse(ID, id, sizeof(id), why, sizeof(why)), 0);
	assert_string_equal(id, ID);
	/* runc's own ids */
	assert_int_equal(container_id__parse("aiprof-e2e_1.2+x", id, sizeof(id), why,
					     sizeof(why)), 0);
	assert_string_equal(id, "aiprof-e2e_1.2+x");
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		strcpy(id, "untouched");
		if (container_id__parse(bad[i], id, sizeof(id), why, sizeof(why)) != -EINVAL)
			fail_msg("accepted '%s'", bad[i]);
		assert_string_equal(id, "untouched");
		assert_non_null(strstr(why, "--container-id"));
	}
	container_id__parse("rkt://" ID, id, sizeof(id), why, sizeof(why));
	assert_non_null(strstr(why, "unknown runtime 'rkt://'"));
	container_id__parse("containerd://abc", id, sizeof(id), why, sizeof(why));
	assert_non_null(strstr(why, "64 lower-case hex digits"));
}

static void test_cgroup_line(void **state)
{
	struct cgroup_line l;
	static const char *const bad[] = { "", ":", "0:", "0::", "x::/", "0::a", "-1::/",
					   "::/", "0:/", "1:cpu", "99999999999999999999999::/" };

	(void)state;
	assert_int_equal(cgroup_line__parse("0::/kubepods/x", 14, &l), 0);
	assert_int_equal(l.hierarchy, 0);
	assert_int_equal(l.controllers_len, 0);
	assert_int_equal(l.path_len, 11);
	assert_memory_equal(l.path, "/kubepods/x", 11);
	assert_int_equal(cgroup_line__parse("4:cpu,cpuacct:/a:b", 18, &l), 0);
	assert_int_equal(l.hierarchy, 4);
	assert_int_equal(l.controllers_len, 11);
	assert_memory_equal(l.controllers, "cpu,cpuacct", 11);
	assert_int_equal(l.path_len, 4);  /* a ':' in the path is part of it */
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		if (cgroup_line__parse(bad[i], strlen(bad[i]), &l) != -EINVAL)
			fail_msg("accepted '%s'", bad[i]);
}

static bool names(const char *path, const char *id)
{
	return cgroup_path__names_container(path, strlen(path), id);
}

static void test_cgroup_path(void **state)
{
	(void)state;
	/* cgroupfs driver (containerd, CRI-O), v1 and v2 */
	assert_true(names("/kubepods/burstable/pod1234-5678/" ID, ID));
	assert_true(names("/kubepods/besteffort/pod1/" ID "/", ID));
	/* systemd driver */
	assert_true(names("/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-"
			  "pod12_34.slice/cri-containerd-" ID ".scope", ID));
	assert_true(names("/kubepods.slice/kubepods-pod1.slice/crio-" ID ".scope", ID));
	assert_true(names("/system.slice/docker-" ID ".scope", ID));
	/* a sub-cgroup of the container's (a nested init.scope, a cgroup namespace) */
	assert_true(names("/kubepods/pod1/" ID "/init.scope", ID));
	/* plain docker and runc directories */
	assert_true(names("/docker/" ID, ID));
	assert_true(names("/" ID, ID));
	/* not the container */
	assert_false(names("/kubepods.slice/crio-conmon-" ID ".scope", ID));
	assert_false(names("/kubepods/pod1/" ID2, ID));
	assert_false(names("/kubepods/pod1/" ID "0", ID));     /* longer id */
	assert_false(names("/kubepods/pod1/x" ID, ID));        /* no separator */
	assert_false(names("/kubepods/pod" ID, ID));
	assert_false(names("/kubepods/pod1/cri-containerd-" ID ".slice", ID));
	assert_false(names("/", ID));
	assert_false(names("/a", ""));
	/* the id is a whole component, not a prefix of one */
	assert_false(names("/kubepods/pod1/3f4e2a1b9c8d", ID));
	assert_false(names("/kubepods/pod1/" ID, "3f4e2a1b9c8d"));
}

static void test_cgroup_file(void **state)
{
	static const char hybrid[] =
		"12:pids:/kubepods/burstable/pod1/" ID "\n"
		"11:memory:/kubepods/burstable/pod1/" ID "\n"
		"1:name=systemd:/kubepods/burstable/pod1/" ID "\n"
		"0::/\n";
	static const char v2[] = "0::/kubepods.slice/cri-containerd-" ID ".scope\n";
	static const char host[] = "9:name=systemd:/\n4:memory:/process_api/ab\n0::/\n";
	static const char v1only[] = "4:memory:/x/" ID2 "\n2:cpu:/y";
	char key[256];

	(void)state;
	assert_int_equal(cgroup_file__in_container(hybrid, sizeof(hybrid) - 1, ID), 1);
	assert_int_equal(cgroup_file__in_container(v2, sizeof(v2) - 1, ID), 1);
	assert_int_equal(cgroup_file__in_container(host, sizeof(host) - 1, ID), 0);
	/* one hierarchy is enough (a v1 controller the runtime put it in) */
	assert_int_equal(cgroup_file__in_container(v1only, sizeof(v1only) - 1, ID2), 1);
	assert_int_equal(cgroup_file__in_container("", 0, ID), 0);
	assert_int_equal(cgroup_file__in_container("garbage\n", 8, ID), -EINVAL);
	/* not NUL-terminated: the length is the end */
	assert_int_equal(cgroup_file__in_container(v2, 20, ID), 0);

	assert_int_equal(cgroup_file__key(hybrid, sizeof(hybrid) - 1, key, sizeof(key)), 0);
	assert_string_equal(key, "/");                       /* the v2 line wins */
	assert_int_equal(cgroup_file__key(v1only, sizeof(v1only) - 1, key, sizeof(key)), 0);
	assert_string_equal(key, "/x/" ID2);                 /* else the first line */
	assert_int_equal(cgroup_file__key("3:cpu:/a\n1:name=systemd:/b\n", 27, key, sizeof(key)),
			 0);
	assert_string_equal(key, "/b");                      /* else name=systemd */
	assert_int_equal(cgroup_file__key("", 0, key, sizeof(key)), -EINVAL);
	assert_int_equal(cgroup_file__key(v2, sizeof(v2) - 1, key, 8), -ENAMETOOLONG);
}

/* ---- a fake /proc --------------------------------------------------------------------- */

static char root[PATH_MAX];

static void put(int pid, const char *file, const char *text, size_t len)
{
	char path[PATH_MAX];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%d", root, pid);
	mkdir(path, 0755);
	snprintf(path, sizeof(path), "%s/%d/%s", root, pid, file);
	f = fopen(path, "w");
	assert_non_null(f);
	assert_int_equal(fwrite(text, 1, len, f), len);
	fclose(f);
}

/* A process: pid, parent, start time, argv joined by NULs, whether it maps libcudart. */
static void proc(int pid, int ppid, unsigned long long start, const char *cgroup,
		 const char *argv, size_t argv_len, const char *lib)
{
	char stat[512], maps[512];

	snprintf(stat, sizeof(stat), "%d (x y) S %d 1 1 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 "
		 "%llu 1000 10 18446744073709551615\n", pid, ppid, start);
	put(pid, "stat", stat, strlen(stat));
	put(pid, "cgroup", cgroup, strlen(cgroup));
	put(pid, "cmdline", argv, argv_len);
	put(pid, "comm", "x\n", 2);
	snprintf(maps, sizeof(maps),
		 "55d0c0000000-55d0c0001000 r-xp 00000000 08:01 100 /usr/bin/python3.11\n"
		 "%s", lib ? lib : "");
	put(pid, "maps", maps, strlen(maps));
}

#define ARGV(s) s, sizeof(s)

static int setup_proc(void **state)
{
	static const char in[] = "12:pids:/kubepods/pod1/" ID "\n0::/kubepods/pod1/" ID "\n";
	static const char sub[] = "0::/kubepods/pod1/" ID "/init.scope\n";
	static const char other[] = "0::/kubepods/pod1/" ID2 "\n";
	static const char cudart[] =
		"7f0000000000-7f0000100000 r-xp 00000000 08:01 7 /opt/cuda/lib/libcudart.so.13\n";
	static const char cuda[] =
		"7f0000000000-7f0000100000 r-xp 00000000 08:01 8 /usr/lib/libcuda.so.1 (deleted)\n";

	(void)state;
	snprintf(root, sizeof(root), "/tmp/aiprof-test-container-XXXXXX");
	assert_non_null(mkdtemp(root));
	/* the container: a shell started by the shim (pid 50), a launcher, two trainers, a
	 * later `kubectl exec` shell (also the shim's child, started later) */
	proc(100, 50, 1000, in, ARGV("/bin/sh\0-c\0torchrun train.py"), NULL);
	proc(101, 100, 1001, in, ARGV("python3\0-m\0torch.distributed.run\0train.py"), NULL);
	proc(102, 101, 1002, sub, ARGV("python3\0train.py\0--rank\0000"), cudart);
	proc(103, 101, 1002, in, ARGV("python3\0train.py\0--rank\0001"), cuda);
	proc(140, 50, 5000, in, ARGV("/bin/bash"), NULL);
	/* another container of the pod, and its CUDA process */
	proc(200, 60, 900, other, ARGV("python3\0serve.py"), cudart);
	/* for an ephemeral container: the sandbox's pause process, our own container's
	 * processes, a zombie (no command line), and our own cgroup as /proc/self shows it */
	proc(1, 0, 10, "0::/kubepods/pod1/sandbox\n", ARGV("/pause"), NULL);
	put(1, "comm", "pause\n", 6);
	proc(300, 0, 7000, "0::/kubepods/pod1/debugger\n", ARGV("aiprof\0profile"), NULL);
	proc(301, 140, 7001, in, "", 0, NULL);
	{
		char self[PATH_MAX];
		FILE *f;

		snprintf(self, sizeof(self), "%s/self", root);
		mkdir(self, 0755);
		snprintf(self, sizeof(self), "%s/self/cgroup", root);
		f = fopen(self, "w");
		assert_non_null(f);
		fputs("0::/kubepods/pod1/debugger\n", f);
		fclose(f);
	}
	return 0;
}

static int remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)flag;
	(void)ftw;
	return remove(path);
}

static int teardown_proc(void **state)
{
	(void)state;
	/* the folder mkdtemp made for this test, and nothing else */
	return nftw(root, remove_one, 16, FTW_DEPTH | FTW_PHYS);
}

static void test_find_and_choose(void **state)
{
	pid_t *pids = NULL, out[8];
	size_t n = 0, nout = 0;
	enum container_rule rule;
	regex_t re;

	(void)state;
	assert_int_equal(container__find_by_id(root, ID, &pids, &n), 0);
	assert_int_equal(n, 6);  /* with the zombie */
	assert_int_equal(pids[0], 100);
	assert_int_equal(pids[2], 102);
	assert_int_equal(pids[4], 140);
	assert_int_equal(pids[5], 301);

	/* default: the processes that mapped libcuda / libcudart */
	assert_int_equal(container__choose(root, pids, n, NULL, out, 8, &nout, &rule), 0);
	assert_int_equal(rule, CONTAINER_RULE_CUDA);
	assert_int_equal(nout, 2);
	assert_int_equal(out[0], 102);
	assert_int_equal(out[1], 103);
	/* at most max */
	assert_int_equal(container__choose(root, pids, n, NULL, out, 1, &nout, &rule), 0);
	assert_int_equal(nout, 1);

	/* --match on the command line (arguments joined by spaces) */
	assert_int_equal(regcomp(&re, "train\\.py --rank 1$", REG_EXTENDED | REG_NOSUB), 0);
	assert_int_equal(container__choose(root, pids, n, &re, out, 8, &nout, &rule), 0);
	assert_int_equal(rule, CONTAINER_RULE_MATCH);
	assert_int_equal(nout, 1);
	assert_int_equal(out[0], 103);
	regfree(&re);
	assert_int_equal(regcomp(&re, "^nothing", REG_EXTENDED | REG_NOSUB), 0);
	assert_int_equal(container__choose(root, pids, n, &re, out, 8, &nout, &rule), -ESRCH);
	assert_int_equal(nout, 0);
	regfree(&re);

	/* no CUDA: the main process, the oldest whose parent is outside (not the exec shell) */
	n = 5;
	assert_int_equal(container__choose(root, pids, 2, NULL, out, 8, &nout, &rule), 0);
	assert_int_equal(rule, CONTAINER_RULE_MAIN);
	assert_int_equal(nout, 1);
	assert_int_equal(out[0], 100);
	{
		pid_t only_exec_and_child[] = { 101, 140 };

		/* 101's parent (100) is not in the set given: both qualify, 101 is older */
		assert_int_equal(container__choose(root, only_exec_and_child, 2, NULL, out, 8,
						   &nout, &rule), 0);
		assert_int_equal(out[0], 101);
	}
	free(pids);

	/* an id nobody has */
	pids = NULL;
	assert_int_equal(container__find_by_id(root, "ffff", &pids, &n), 0);
	assert_int_equal(n, 0);
	free(pids);
	assert_int_equal(container__find_by_id("/nonexistent-proc", ID, &pids, &n), -ENOENT);
}

static void test_find_others(void **state)
{
	pid_t *pids = NULL;
	size_t n = 0;
	static const pid_t want[] = { 100, 101, 102, 103, 140, 200 };

	(void)state;
	/* not pause (1), not our own cgroup (300), not the zombie (301) */
	assert_int_equal(container__find_others(root, &pids, &n), 0);
	assert_int_equal(n, sizeof(want) / sizeof(want[0]));
	for (size_t i = 0; i < n; i++)
		assert_int_equal(pids[i], want[i]);
	free(pids);
}

static void test_cmdline(void **state)
{
	char buf[64];

	(void)state;
	container__cmdline(root, 101, buf, sizeof(buf));
	assert_string_equal(buf, "python3 -m torch.distributed.run train.py");
	container__cmdline(root, 101, buf, 10);
	assert_string_equal(buf, "python3 -");
	container__cmdline(root, 999, buf, sizeof(buf));
	assert_string_equal(buf, "");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_id_parse),
		cmocka_unit_test(test_cgroup_line),
		cmocka_unit_test(test_cgroup_path),
		cmocka_unit_test(test_cgroup_file),
		cmocka_unit_test_setup_teardown(test_find_and_choose, setup_proc, teardown_proc),
		cmocka_unit_test_setup_teardown(test_find_others, setup_proc, teardown_proc),
		cmocka_unit_test_setup_teardown(test_cmdline, setup_proc, teardown_proc),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
