/* SPDX-License-Identifier: MIT */
/*
 * regcheck: a target that notices when an injection leaves it anything but exactly as it
 * was (tests/integration/test_kill_safety.py). It runs until killed and exits 1 with a
 * message on the first thing it finds wrong:
 *
 *  - the main thread alternates between (a) a loop written in assembly that holds known
 *    values in %rbx, %rbp, %r12-%r15 and %ymm8-%ymm15 and checks them on every turn — the
 *    thread a ptrace injection finds "in application code" — and (b) blocking reads of a
 *    pipe that another thread feeds a byte every 300 us, each of which must return some
 *    bytes or fail with EINTR (a restart gone wrong shows as -512 and friends);
 *  - a sleeper thread's absolute clock_nanosleep must return 0 or EINTR;
 *  - a storm thread sends SIGUSR1 to every thread every 200 us (SA_RESTART handler that
 *    counts), and SIGALRM arrives at 1 kHz from a timer.
 *
 * --catch-quiet-signals: handlers for SIGURG, SIGWINCH, SIGCHLD and every signal it
 * inherited as ignored, so that no signal whose action is to be ignored is left uncaught (the injector's return path then cannot
 * use one as its marker and falls back to PTRACE_SYSCALL).
 *
 * Prints "ready" once everything runs. Exits 0 only if asked to (SIGTERM).
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static int pipefd[2];
static _Atomic int stop;
static _Atomic unsigned long handled;
static pid_t tids[3];

static void on_signal(int sig)
{
	(void)sig;
	atomic_fetch_add_explicit(&handled, 1, memory_order_relaxed);
}

static void on_term(int sig)
{
	(void)sig;
	atomic_store(&stop, 1);
}

static void fail(const char *what, long v)
{
	fprintf(stderr, "regcheck: %s (%ld)\n", what, v);
	_exit(1);
}

static const uint64_t pattern[4] __attribute__((aligned(32))) = {
	0x0123456789abcdefULL, 0xfedcba9876543210ULL, 0x5a5a5a5aa5a5a5a5ULL, 0x0f1e2d3c4b5a6978ULL,
};

/*
 * Loads the pattern and spins `turns` times checking %rbx, %rbp, %r12-%r15 and
 * %ymm8-%ymm15 on each turn. Returns 0, or the turn count left when a check failed.
 */
static long hold_registers(long turns)
{
	long left;

	__asm__ volatile(
		"push %%rbp\n"
		"vmovdqa (%[p]), %%ymm8\n"
		"vmovdqa %%ymm8, %%ymm9\n"
		"vmovdqa %%ymm8, %%ymm10\n"
		"vmovdqa %%ymm8, %%ymm11\n"
		"vmovdqa %%ymm8, %%ymm12\n"
		"vmovdqa %%ymm8, %%ymm13\n"
		"vmovdqa %%ymm8, %%ymm14\n"
		"vmovdqa %%ymm8, %%ymm15\n"
		"movabs $0x1111111111111111, %%rbx\n"
		"movabs $0x2222222222222222, %%rbp\n"
		"movabs $0x3333333333333333, %%r12\n"
		"movabs $0x4444444444444444, %%r13\n"
		"movabs $0x5555555555555555, %%r14\n"
		"movabs $0x6666666666666666, %%r15\n"
		"1:\n"
		"movabs $0x1111111111111111, %%rax\n"
		"cmp %%rax, %%rbx\n"
		"jne 2f\n"
		"movabs $0x2222222222222222, %%rax\n"
		"cmp %%rax, %%rbp\n"
		"jne 2f\n"
		"movabs $0x3333333333333333, %%rax\n"
		"cmp %%rax, %%r12\n"
		"jne 2f\n"
		"movabs $0x4444444444444444, %%rax\n"
		"cmp %%rax, %%r13\n"
		"jne 2f\n"
		"movabs $0x5555555555555555, %%rax\n"
		"cmp %%rax, %%r14\n"
		"jne 2f\n"
		"movabs $0x6666666666666666, %%rax\n"
		"cmp %%rax, %%r15\n"
		"jne 2f\n"
		"vpxor (%[p]), %%ymm8, %%ymm0\n"
		"vpxor (%[p]), %%ymm9, %%ymm1\n"
		"vpor %%ymm1, %%ymm0, %%ymm0\n"
		"vpxor (%[p]), %%ymm10, %%ymm1\n"
		"vpor %%ymm1, %%ymm0, %%ymm0\n"
		"vpxor (%[p]), %%ymm11, %%ymm1\n"
		"vpor %%ymm1, %%ymm0, %%ymm0\n"
		"vpxor (%[p]), %%ymm12, %%ymm1\n"
		"vpor %%ymm1, %%ymm0, %%ymm0\n"
		"vpxor (%[p]), %%ymm13, %%ymm1\n"
		"vpor %%ymm1, %%ymm0, %%ymm0\n"
		"vpxor (%[p]), %%ymm14, %%ymm1\n"
		"vpor %%ymm1, %%ymm0, %%ymm0\n"
		"vpxor (%[p]), %%ymm15, %%ymm1\n"
		"vpor %%ymm1, %%ymm0, %%ymm0\n"
		"vptest %%ymm0, %%ymm0\n"
		"jnz 2f\n"
		"dec %[n]\n"
		"jnz 1b\n"
		"2:\n"
		"vzeroupper\n"
		"pop %%rbp\n"
		: [n] "=c"(left)
		: "0"(turns), [p] "r"(pattern)
		: "rax", "rbx", "r12", "r13", "r14", "r15", "xmm0", "xmm1", "xmm8", "xmm9", "xmm10",
		  "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "cc", "memory");
	return left;
}

static void *feeder(void *arg)
{
	struct timespec ts = { 0, 300000 };

	(void)arg;
	tids[0] = (pid_t)syscall(SYS_gettid);
	while (!atomic_load(&stop)) {
		if (write(pipefd[1], "x", 1) != 1 && errno != EINTR && errno != EAGAIN)
			fail("feeder write", errno);
		nanosleep(&ts, NULL);
	}
	close(pipefd[1]);       /* the main thread's read ends, whichever thread took SIGTERM */
	return NULL;
}

static void *sleeper(void *arg)
{
	struct timespec t;

	(void)arg;
	tids[1] = (pid_t)syscall(SYS_gettid);
	clock_gettime(CLOCK_MONOTONIC, &t);
	while (!atomic_load(&stop)) {
		int r;

		t.tv_nsec += 2000000;
		if (t.tv_nsec >= 1000000000) {
			t.tv_sec++;
			t.tv_nsec -= 1000000000;
		}
		do
			r = clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &t, NULL);
		while (r == EINTR);
		if (r != 0)
			fail("clock_nanosleep", r);
	}
	return NULL;
}

static void *storm(void *arg)
{
	struct timespec ts = { 0, 200000 };
	pid_t pid = getpid();

	(void)arg;
	tids[2] = (pid_t)syscall(SYS_gettid);
	while (!atomic_load(&stop)) {
		syscall(SYS_tgkill, pid, pid, SIGUSR1);
		for (int i = 0; i < 2; i++)
			if (tids[i])
				syscall(SYS_tgkill, pid, tids[i], SIGUSR1);
		nanosleep(&ts, NULL);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	struct sigaction sa;
	struct itimerval it = { { 0, 1000 }, { 0, 1000 } };
	pthread_t th[3];
	char buf[64];

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sa.sa_flags = SA_RESTART;
	sigaction(SIGUSR1, &sa, NULL);
	sigaction(SIGALRM, &sa, NULL);
	if (argc > 1 && strcmp(argv[1], "--catch-quiet-signals") == 0) {
		sa.sa_handler = on_signal;
		sa.sa_flags = SA_RESTART;
		sigaction(SIGURG, &sa, NULL);
		sigaction(SIGWINCH, &sa, NULL);
		sigaction(SIGCHLD, &sa, NULL);
		/* and every signal this process inherited as ignored (a CI runner's, nohup's) */
		for (int n = 1; n < NSIG; n++) {
			struct sigaction old;

			if (n != SIGKILL && n != SIGSTOP && sigaction(n, NULL, &old) == 0 &&
			    old.sa_handler == SIG_IGN)
				sigaction(n, &sa, NULL);
		}
	} else if (argc > 1) {
		fprintf(stderr, "usage: regcheck [--catch-quiet-signals]\n");
		return 2;
	}
	sa.sa_handler = on_term;
	sa.sa_flags = 0;
	sigaction(SIGTERM, &sa, NULL);
	if (pipe(pipefd) < 0)
		fail("pipe", errno);
	if (pthread_create(&th[0], NULL, feeder, NULL) || pthread_create(&th[1], NULL, sleeper, NULL) ||
	    pthread_create(&th[2], NULL, storm, NULL))
		fail("pthread_create", 0);
	setitimer(ITIMER_REAL, &it, NULL);
	printf("ready\n");
	fflush(stdout);

	while (!atomic_load(&stop)) {
		long left = hold_registers(2000000);   /* a few ms */
		ssize_t n;

		if (left)
			fail("a register changed under the loop; turns left", left);
		for (int i = 0; i < 5 && !atomic_load(&stop); i++) {
			n = read(pipefd[0], buf, sizeof(buf)); /* SA_RESTART: EINTR only if stopping */
			if (n == 0 && atomic_load(&stop))
				break;
			if (n < 1 && !(n < 0 && errno == EINTR))
				fail("read returned", n < 0 ? -errno : n);
		}
	}
	for (int i = 0; i < 3; i++)
		pthread_join(th[i], NULL);
	printf("ok signals=%lu\n", atomic_load(&handled));
	return 0;
}
