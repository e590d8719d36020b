/* SPDX-License-Identifier: MIT */
/*
 * Workload for the off-CPU and syscall collectors, with numbers a test can check:
 *   "reader"  sleeps in read() on a pipe; "feeder" writes PIPE_BYTES into it every 50 ms
 *   "syncer"  writes --chunks x --chunk bytes to DIR/checkpoint.bin, fsync()s, closes,
 *             sleeps 100 ms, again (a synchronous checkpoint)
 * Prints "ready pid=N reader_tid=N syncer_tid=N pipe_bytes=N fsync_bytes=N path=P".
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define PIPE_BYTES 4096

static int pipefd[2];
static char path[PATH_MAX];
static size_t chunk = 1 << 20, chunks = 4;
static volatile pid_t reader_tid, syncer_tid;

static void *reader(void *arg)
{
	static char buf[1 << 16];

	(void)arg;
	reader_tid = (pid_t)syscall(SYS_gettid);
	for (;;)
		if (read(pipefd[0], buf, sizeof(buf)) < 0 && errno != EINTR)
			abort();
	return NULL;
}

static void *feeder(void *arg)
{
	static char buf[PIPE_BYTES];

	(void)arg;
	memset(buf, 'x', sizeof(buf));
	for (;;) {
		usleep(50000);
		if (write(pipefd[1], buf, sizeof(buf)) != (ssize_t)sizeof(buf))
			abort();
	}
	return NULL;
}

static void *syncer(void *arg)
{
	char *buf = malloc(chunk);

	(void)arg;
	if (!buf)
		abort();
	syncer_tid = (pid_t)syscall(SYS_gettid);
	for (unsigned round = 0;; round++) {
		int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);

		if (fd < 0)
			abort();
		for (size_t i = 0; i < chunks; i++) {
			memset(buf, (int)('a' + (round + i) % 26), chunk);
			if (write(fd, buf, chunk) != (ssize_t)chunk)
				abort();
		}
		if (fsync(fd) < 0)
			abort();
		close(fd);
		usleep(100000);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	const char *dir = "/tmp";
	int seconds = 60;
	pthread_t t[3];

	for (int i = 1; i + 1 < argc; i += 2) {
		if (strcmp(argv[i], "--dir") == 0)
			dir = argv[i + 1];
		else if (strcmp(argv[i], "--chunk") == 0)
			chunk = strtoul(argv[i + 1], NULL, 10);
		else if (strcmp(argv[i], "--chunks") == 0)
			chunks = strtoul(argv[i + 1], NULL, 10);
		else if (strcmp(argv[i], "--seconds") == 0)
			seconds = atoi(argv[i + 1]);
	}
	snprintf(path, sizeof(path), "%s/checkpoint.bin", dir);
	if (pipe2(pipefd, O_CLOEXEC) < 0)
		return 1;
	if (pthread_create(&t[0], NULL, reader, NULL) || pthread_create(&t[1], NULL, feeder, NULL) ||
	    pthread_create(&t[2], NULL, syncer, NULL))
		return 1;
	pthread_setname_np(t[0], "reader");
	pthread_setname_np(t[1], "feeder");
	pthread_setname_np(t[2], "syncer");
	while (!reader_tid || !syncer_tid)
		usleep(1000);
	printf("ready pid=%d reader_tid=%d syncer_tid=%d pipe_bytes=%d fsync_bytes=%zu path=%s\n",
	       (int)getpid(), (int)reader_tid, (int)syncer_tid, PIPE_BYTES, chunk * chunks, path);
	fflush(stdout);
	sleep((unsigned)seconds);
	return 0;
}
