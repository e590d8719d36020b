/* SPDX-License-Identifier: MIT */
/*
 * Workload for the CPU sampler: thread "hot" spends CPU time in hot_a() and hot_b() in a
 * 3:1 ratio (measured in thread CPU time, so preemption does not skew it); thread
 * "sysheavy" spends its time in the kernel, reading /dev/urandom with a raw syscall.
 * Prints "ready pid=N hot_tid=N sys_tid=N" once both run; runs for --seconds (default 60).
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define A_NS 30000000ULL  /* per round: 30 ms in hot_a, 10 ms in hot_b */
#define B_NS 10000000ULL

static volatile uint64_t sink;
static volatile pid_t hot_tid, sys_tid;

static uint64_t thread_cpu_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

/*
 * Each call is ~tens of microseconds of integer work; the time check is in the caller.
 * The volatile local gives each function a stack frame, hence a frame pointer: GCC 12
 * leaves it out of leaf functions that need no stack, -fno-omit-frame-pointer or not.
 */
__attribute__((noinline)) static uint64_t hot_a(uint64_t x)
{
	volatile uint64_t keep = x;

	for (int i = 0; i < 20000; i++)
		x = x * 6364136223846793005ULL + 1442695040888963407ULL;
	keep = x;
	return keep;
}

__attribute__((noinline)) static uint64_t hot_b(uint64_t x)
{
	volatile uint64_t keep = x;

	for (int i = 0; i < 20000; i++)
		x = x * 2862933555777941757ULL + 3037000493ULL;
	keep = x;
	return keep;
}

__attribute__((noinline)) static void *hot_loop(void *arg)
{
	uint64_t x = 1;

	(void)arg;
	hot_tid = (pid_t)syscall(SYS_gettid);
	for (;;) {
		uint64_t t0 = thread_cpu_ns();

		while (thread_cpu_ns() - t0 < A_NS)
			x = hot_a(x);
		t0 = thread_cpu_ns();
		while (thread_cpu_ns() - t0 < B_NS)
			x = hot_b(x);
		sink = x;
	}
	return NULL;
}

static inline long raw_read(int fd, void *buf, size_t n)
{
	long ret;

	__asm__ volatile("syscall" : "=a"(ret) : "a"((long)SYS_read), "D"((long)fd), "S"(buf),
			 "d"(n) : "rcx", "r11", "memory");
	return ret;
}

__attribute__((noinline)) static void sys_spin(int fd, char *buf, size_t n)
{
	volatile int done = 0;  /* a stack frame, hence a frame pointer (see hot_a) */

	for (int i = 0; i < 64; i++)
		if (raw_read(fd, buf, n) < 0)
			abort();
	done = 1;
	(void)done;
}

__attribute__((noinline)) static void *sys_loop(void *arg)
{
	static char buf[1 << 16];
	int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);

	(void)arg;
	if (fd < 0)
		abort();
	sys_tid = (pid_t)syscall(SYS_gettid);
	for (;;)
		sys_spin(fd, buf, sizeof(buf));
	return NULL;
}

int main(int argc, char **argv)
{
	int seconds = 60;
	pthread_t a, b;

	for (int i = 1; i + 1 < argc; i++)
		if (strcmp(argv[i], "--seconds") == 0)
			seconds = atoi(argv[i + 1]);
	if (pthread_create(&a, NULL, hot_loop, NULL) || pthread_create(&b, NULL, sys_loop, NULL))
		return 1;
	pthread_setname_np(a, "hot");
	pthread_setname_np(b, "sysheavy");
	while (!hot_tid || !sys_tid)
		usleep(1000);
	printf("ready pid=%d hot_tid=%d sys_tid=%d\n", (int)getpid(), (int)hot_tid, (int)sys_tid);
	fflush(stdout);
	sleep((unsigned)seconds);
	return 0;
}
