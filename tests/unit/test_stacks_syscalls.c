/* SPDX-License-Identifier: MIT */
/*
 * injector/collect/ebpf_syscalls.c: syscall names and kinds, and how the object of a slow call is
 * described from what the kernel side recorded (dentry components, pipe, socket).
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <cmocka.h>
#include "injector/collect/ebpf_internal.h"

static struct syscall_event *ev_new(void)
{
	struct syscall_event *e = calloc(1, sizeof(*e));

	assert_non_null(e);
	return e;
}

static void expect_target(const struct syscall_event *e, const char *want)
{
	char *t = ebpf_syscall_target(e);

	if (!want) {
		assert_null(t);
		return;
	}
	assert_non_null(t);
	assert_string_equal(t, want);
	free(t);
}

static void test_names_and_kinds(void **state)
{
	char buf[32];

	(void)state;
	assert_string_equal(ebpf_syscall_name(0, buf, sizeof(buf)), "read");
	assert_string_equal(ebpf_syscall_name(74, buf, sizeof(buf)), "fsync");
	assert_string_equal(ebpf_syscall_name(257, buf, sizeof(buf)), "openat");
	assert_string_equal(ebpf_syscall_name(100000, buf, sizeof(buf)), "syscall_100000");
	assert_int_equal(ebpf_syscall_kind(0), SYS_K_FD0);
	assert_int_equal(ebpf_syscall_kind(1), SYS_K_FD0 | SYS_K_WRITES);
	assert_int_equal(ebpf_syscall_kind(74), SYS_K_FD0 | SYS_K_SYNCS);
	assert_int_equal(ebpf_syscall_kind(3), SYS_K_FD0 | SYS_K_CLOSES);
	assert_int_equal(ebpf_syscall_kind(2), SYS_K_PATH0);
	assert_int_equal(ebpf_syscall_kind(257), SYS_K_PATH1);
	assert_int_equal(ebpf_syscall_kind(39), 0);  /* getpid */
	for (uint32_t nr = 0; nr < SYSCALL_NR_MAX; nr++) {
		uint8_t k = ebpf_syscall_kind(nr);

		/* an fd call or a path call, never both; writes and syncs are fd calls */
		assert_false((k & SYS_K_FD0) && (k & (SYS_K_PATH0 | SYS_K_PATH1)));
		if (k & (SYS_K_WRITES | SYS_K_SYNCS | SYS_K_CLOSES))
			assert_true(k & SYS_K_FD0);
	}
}

static void test_dentry_paths(void **state)
{
	struct syscall_event *e = ev_new();

	(void)state;
	expect_target(e, NULL);
	e->path_src = SYS_PATH_DENTRY;
	e->i_mode = S_IFREG | 0644;
	/* /var/tmp/ckpt/model.bin on a filesystem mounted at /var/tmp: "" marks the crossing */
	snprintf(e->comps[0], SYSCALL_NAME_LEN, "%s", "model.bin");
	snprintf(e->comps[1], SYSCALL_NAME_LEN, "%s", "ckpt");
	snprintf(e->comps[2], SYSCALL_NAME_LEN, "%s", "");
	snprintf(e->comps[3], SYSCALL_NAME_LEN, "%s", "tmp");
	snprintf(e->comps[4], SYSCALL_NAME_LEN, "%s", "var");
	e->depth = 5;
	expect_target(e, "/var/tmp/ckpt/model.bin");
	e->path_truncated = 1;
	expect_target(e, ".../var/tmp/ckpt/model.bin");
	e->path_truncated = 0;
	e->depth = 0;
	expect_target(e, "/");
	/* a filesystem's own root dentry is "/" */
	snprintf(e->comps[0], SYSCALL_NAME_LEN, "%s", "x");
	snprintf(e->comps[1], SYSCALL_NAME_LEN, "%s", "/");
	e->depth = 2;
	expect_target(e, "/x");
	/* a component without its NUL (the kernel side cut it) stays in bounds */
	memset(e->comps[0], 'a', SYSCALL_NAME_LEN);
	e->depth = 1;
	{
		char *t = ebpf_syscall_target(e);

		assert_int_equal(strlen(t), 1 + SYSCALL_NAME_LEN);
		free(t);
	}
	/* depth beyond the array is clamped */
	e->depth = 1000;
	free(ebpf_syscall_target(e));
	free(e);
}

static void test_special_files(void **state)
{
	struct syscall_event *e = ev_new();

	(void)state;
	e->path_src = SYS_PATH_DENTRY;
	e->i_mode = S_IFIFO | 0600;
	e->s_magic = 0x50495045;  /* pipefs */
	e->ino = 12345;
	expect_target(e, "pipe:[12345]");
	e->s_magic = 0x09041934;  /* anon_inodefs */
	snprintf(e->comps[0], SYSCALL_NAME_LEN, "%s", "[eventfd]");
	e->depth = 1;
	expect_target(e, "anon_inode:[eventfd]");

	memset(e, 0, sizeof(*e));
	e->path_src = SYS_PATH_DENTRY;
	e->i_mode = S_IFSOCK | 0777;
	e->ino = 77;
	e->sk_family = 2;
	e->sk_proto = 6;
	e->saddr[0] = 10, e->saddr[3] = 1;
	e->daddr[0] = 10, e->daddr[3] = 2;
	e->sport = 40000;
	e->dport = 29500;
	expect_target(e, "tcp 10.0.0.1:40000->10.0.0.2:29500");
	e->sk_family = 10;
	memset(e->saddr, 0, 16);
	memset(e->daddr, 0, 16);
	e->saddr[15] = 1;
	e->daddr[15] = 1;
	e->sk_proto = 17;
	expect_target(e, "udp [::1]:40000->[::1]:29500");
	e->sk_family = 1;
	expect_target(e, "unix socket:[77]");
	e->sk_family = 16;
	expect_target(e, "socket:[77]");

	memset(e, 0, sizeof(*e));
	e->path_src = SYS_PATH_USER;
	snprintf(e->upath, sizeof(e->upath), "%s", "data/shard-0001.tar");
	expect_target(e, "data/shard-0001.tar");
	memset(e->upath, 'p', sizeof(e->upath));  /* no NUL at all */
	{
		char *t = ebpf_syscall_target(e);

		assert_int_equal(strlen(t), sizeof(e->upath));
		free(t);
	}
	free(e);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_names_and_kinds),
		cmocka_unit_test(test_dentry_paths),
		cmocka_unit_test(test_special_files),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
