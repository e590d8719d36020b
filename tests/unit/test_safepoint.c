/* SPDX-License-Identifier: MIT */
/*
 * injector/attach/safepoint.c: which stopped threads may be made to call into libc.
 * The verdict over classified frames, then the whole judgment on real stopped children:
 * blocked in read() from the program (safe), blocked in wait4 under system() (a libc
 * function that holds its state: not safe), blocked in read() inside a signal handler
 * (not safe), and running the program's own code (safe).
 */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <fcntl.h>
#include <unistd.h>
#include <cmocka.h>

#include "attach/safepoint.h"

#define A { SP_APP, false }
#define L { SP_LIBC, false }
#define LEAF { SP_LIBC, true }
#define LD { SP_LOADER, false }
#define JIT { SP_OTHER, false }

static bool verdict(const struct sp_frame *f, size_t n, bool in_syscall, char *why)
{
	return safepoint_verdict(f, n, UNWIND_END_ROOT, 0, in_syscall, true, why, 160);
}

static void test_verdict(void **state)
{
	char why[160];
	/* main thread blocked in read() from the program: read, app..., start frames, _start */
	const struct sp_frame read_main[] = { LEAF, A, A, L, L, A };
	/* a thread in pthread_cond_wait: futex helper, pthread_cond_wait, app, start_thread, clone3 */
	const struct sp_frame cond[] = { L, LEAF, A, A, L, L };
	/* running the program's code */
	const struct sp_frame running[] = { A, A, L, L };
	/* malloc's arena lock: the futex wait is libc's, the function the program called is not
	 * on the list */
	const struct sp_frame in_malloc[] = { L, L, A, L, L };
	/* the loader blocked in openat while it maps a library: its own syscall wrapper */
	const struct sp_frame loader_open[] = { LD, LD, L, A, L, L, A };
	/* a constructor running under dlopen */
	const struct sp_frame ctor[] = { A, LD, LD, L, A, L, L, A };
	/* a signal handler: the program's handler above libc's trampoline */
	const struct sp_frame handler[] = { LEAF, A, L, A, L, L };
	/* a qsort callback */
	const struct sp_frame callback[] = { A, L, A, L, L };
	/* stopped at _start after an exec: libc has not started */
	const struct sp_frame at_start[] = { A };
	const struct sp_frame jit[] = { JIT, A, L, L };

	(void)state;
	assert_true(verdict(read_main, 6, true, why));
	assert_true(verdict(cond, 6, true, why));
	assert_true(verdict(running, 4, false, why));
	assert_false(verdict(in_malloc, 5, true, why));
	assert_non_null(strstr(why, "C library function"));
	assert_false(verdict(read_main, 6, false, why));           /* libc code, running */
	assert_non_null(strstr(why, "running C library code"));
	assert_false(verdict(loader_open, 7, true, why));
	assert_non_null(strstr(why, "dynamic loader"));
	assert_false(verdict(ctor, 8, false, why));
	assert_non_null(strstr(why, "dynamic loader"));
	assert_false(verdict(handler, 6, true, why));
	assert_false(verdict(callback, 5, false, why));
	assert_false(verdict(at_start, 1, false, why));
	assert_non_null(strstr(why, "not started"));
	assert_false(verdict(jit, 4, false, why));
	/* a walk that did not reach the root, or needed frame-pointer guesses, proves nothing */
	assert_false(safepoint_verdict(read_main, 6, UNWIND_END_UNKNOWN_CODE, 0, true, true, why,
				       sizeof(why)));
	assert_false(safepoint_verdict(read_main, 6, UNWIND_END_ROOT, 1, true, true, why,
				       sizeof(why)));
	/* a syscall that is not on the list */
	assert_false(safepoint_verdict(read_main, 6, UNWIND_END_ROOT, 0, true, false, why,
				       sizeof(why)));
	assert_false(safepoint_verdict(NULL, 0, UNWIND_END_ROOT, 0, false, true, why, sizeof(why)));
}

/* ---- real stopped children -------------------------------------------------------------- */

static int g_pipe[2];

static void on_usr1(int sig)
{
	char c;

	(void)sig;
	(void)read(g_pipe[0], &c, 1);   /* blocks inside the handler */
}

static volatile unsigned long g_spin;

enum child_kind { CHILD_READ, CHILD_SYSTEM, CHILD_HANDLER, CHILD_SPIN };

static pid_t start_child(enum child_kind k)
{
	pid_t pid;
	char c;

	assert_int_equal(pipe(g_pipe), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		switch (k) {
		case CHILD_READ:
			(void)read(g_pipe[0], &c, 1);
			break;
		case CHILD_SYSTEM:
			(void)system("exec sleep 30");
			break;
		case CHILD_HANDLER:
			signal(SIGUSR1, on_usr1);
			raise(SIGUSR1);
			break;
		case CHILD_SPIN:
			for (;;)
				g_spin++;
		}
		_exit(0);
	}
	usleep(200 * 1000);     /* into its wait */
	return pid;
}

static bool judge_child(pid_t pid, char *where, size_t len)
{
	struct user_regs_struct g;
	struct unwind_regs ur = { .valid = (1u << UW_NREGS) - 1 };
	struct safepoint *sp = NULL;
	char path[64];
	int status, fd;
	bool ok;

	assert_int_equal(ptrace(PTRACE_SEIZE, pid, NULL, NULL), 0);
	assert_int_equal(ptrace(PTRACE_INTERRUPT, pid, NULL, NULL), 0);
	assert_int_equal(waitpid(pid, &status, __WALL), pid);
	assert_int_equal(ptrace(PTRACE_GETREGS, pid, NULL, &g), 0);
	ur.r[UW_RAX] = g.rax; ur.r[UW_RDX] = g.rdx; ur.r[UW_RCX] = g.rcx; ur.r[UW_RBX] = g.rbx;
	ur.r[UW_RSI] = g.rsi; ur.r[UW_RDI] = g.rdi; ur.r[UW_RBP] = g.rbp; ur.r[UW_RSP] = g.rsp;
	ur.r[UW_R8] = g.r8; ur.r[UW_R9] = g.r9; ur.r[UW_R10] = g.r10; ur.r[UW_R11] = g.r11;
	ur.r[UW_R12] = g.r12; ur.r[UW_R13] = g.r13; ur.r[UW_R14] = g.r14; ur.r[UW_R15] = g.r15;
	ur.r[UW_RIP] = g.rip;
	snprintf(path, sizeof(path), "/proc/%d/mem", pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	assert_true(fd >= 0);
	assert_int_equal(safepoint__new(pid, fd, &sp), 0);
	where[0] = 0;
	ok = safepoint__judge(sp, &ur, (long)g.orig_rax >= 0, true, where, len);
	/* the first look stops at modules whose tables are not read yet: read, look again */
	for (int i = 0; i < 16 && !ok && safepoint__warm(sp) > 0; i++) {
		where[0] = 0;
		ok = safepoint__judge(sp, &ur, (long)g.orig_rax >= 0, true, where, len);
	}
	safepoint__free(sp);
	close(fd);
	ptrace(PTRACE_DETACH, pid, NULL, NULL);
	kill(pid, SIGKILL);
	waitpid(pid, &status, 0);
	close(g_pipe[0]);
	close(g_pipe[1]);
	return ok;
}

static void test_real_stacks(void **state)
{
	char where[192];

	(void)state;
	if (geteuid() != 0) {
		skip();
		return;
	}
	assert_true(judge_child(start_child(CHILD_READ), where, sizeof(where)));
	assert_non_null(strstr(where, "frames"));
	assert_false(judge_child(start_child(CHILD_SYSTEM), where, sizeof(where)));
	assert_non_null(strstr(where, "C library function"));
	assert_false(judge_child(start_child(CHILD_HANDLER), where, sizeof(where)));
	assert_true(judge_child(start_child(CHILD_SPIN), where, sizeof(where)));
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_verdict),
		cmocka_unit_test(test_real_stacks),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
