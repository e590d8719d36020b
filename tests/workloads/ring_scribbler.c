// SPDX-License-Identifier: MIT
/*
 * ring_scribbler PID MODE: damages the event ring libaiprof.so made in process PID, through
 * /proc/PID/fd — the same shared memory the target's own code can write — the way a hostile
 * or broken target could, while an injector reads it. Stop the target (SIGSTOP) first so its
 * own hooks do not overwrite the planted slots. Prints what it did; exit 0, or 1 with why.
 *
 *   strings   commit string chunks the consumer must refuse: total 0 with a far offset, an
 *             offset past total, a later chunk announcing a larger total, ids out of range
 *   types     commit records of unknown types and APIs
 *   random    random bytes over every slot (the consumer must not trust any of them)
 *   geometry  a huge nslots and a tail far away in the header (the consumer must keep its own)
 *   truncate  try to shrink the memfd (the seal must refuse it); prints "truncate: refused"
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "event.h"
#include "ring.h"
#include "ring_forge.h"

static int open_ring(int pid, struct stat *st)
{
	char dir[64], link[300], target[300];
	struct dirent *de;
	int fd = -1;
	DIR *d;

	snprintf(dir, sizeof(dir), "/proc/%d/fd", pid);
	d = opendir(dir);
	if (!d)
		return -1;
	while ((de = readdir(d)) && fd < 0) {
		ssize_t n;

		snprintf(link, sizeof(link), "%s/%s", dir, de->d_name);
		n = readlink(link, target, sizeof(target) - 1);
		if (n <= 0)
			continue;
		target[n] = 0;
		if (strstr(target, "/memfd:" AIPROF_RING_MEMFD) == target)
			fd = open(link, O_RDWR | O_CLOEXEC);
	}
	closedir(d);
	if (fd >= 0 && fstat(fd, st) < 0) {
		close(fd);
		fd = -1;
	}
	return fd;
}

/* Commits `e` at the consumer's next position + i, as a producer would. */
static void plant(struct aiprof_ring_hdr *h, uint32_t nslots, uint64_t i, struct aiprof_event *e)
{
	uint64_t pos = atomic_load(&h->tail) + i;
	struct aiprof_event *slot = &ring__slots(h)[pos & (nslots - 1)];

	memcpy((char *)slot + sizeof(slot->seq), (char *)e + sizeof(e->seq), sizeof(*e) - sizeof(e->seq));
	atomic_store(&slot->seq, pos + 1);
}

int main(int argc, char **argv)
{
	struct aiprof_ring_hdr *h;
	struct stat st;
	uint32_t nslots;
	uint64_t n = 0;
	int pid, fd;

	if (argc != 3) {
		fprintf(stderr, "usage: ring_scribbler PID strings|types|random|geometry|truncate\n");
		return 2;
	}
	pid = atoi(argv[1]);
	fd = open_ring(pid, &st);
	if (fd < 0) {
		fprintf(stderr, "ring_scribbler: no aiprof ring in pid %d: %s\n", pid, strerror(errno));
		return 1;
	}
	if (strcmp(argv[2], "truncate") == 0) {
		if (ftruncate(fd, 4096) == 0) {
			printf("truncate: shrunk to 4096 bytes\n");
			return 0;
		}
		printf("truncate: refused (%s)\n", strerror(errno));
		return 0;
	}
	h = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (h == MAP_FAILED) {
		fprintf(stderr, "ring_scribbler: mmap: %s\n", strerror(errno));
		return 1;
	}
	nslots = h->nslots;
	if (strcmp(argv[2], "strings") == 0) {
		struct aiprof_event e[] = {
			forge_str_chunk(1000001, 60000, 0, 'A'),    /* total 0, far offset */
			forge_str_chunk(1000002, 300, 200, 'A'),    /* offset past total */
			forge_str_chunk(1000003, 0, 10, 'A'),       /* a 10-byte string... */
			forge_str_chunk(1000003, 80, 60000, 'A'),   /* ...then a chunk claiming 60000 */
			forge_str_chunk(0, 0, 10, 'A'),             /* id 0 */
			forge_str_chunk(0xfffffff0u, 0, 10, 'A'),   /* an id past every table */
		};
		for (; n < sizeof(e) / sizeof(e[0]); n++)
			plant(h, nslots, n, &e[n]);
	} else if (strcmp(argv[2], "types") == 0) {
		struct aiprof_event e;

		memset(&e, 0, sizeof(e));
		for (; n < 8; n++) {
			e.type = (uint16_t)(n % 2 ? AIPROF_EV__MAX + n : AIPROF_EV_CUDA_LAUNCH);
			e.api = (uint16_t)(n % 2 ? AIPROF_API_cudaLaunchKernel : AIPROF_API__MAX + n);
			plant(h, nslots, n, &e);
		}
	} else if (strcmp(argv[2], "random") == 0) {
		FILE *r = fopen("/dev/urandom", "re");
		size_t bytes = (size_t)nslots * sizeof(struct aiprof_event);

		if (!r || fread(ring__slots(h), 1, bytes, r) != bytes) {
			fprintf(stderr, "ring_scribbler: /dev/urandom: %s\n", strerror(errno));
			return 1;
		}
		fclose(r);
		n = nslots;
	} else if (strcmp(argv[2], "geometry") == 0) {
		h->nslots = 0x7fffffffu;
		atomic_store(&h->tail, 0x123456789abcdefull);
		atomic_store(&h->head, 0xfedcba987654321ull);
		n = 1;
	} else {
		fprintf(stderr, "ring_scribbler: unknown mode %s\n", argv[2]);
		return 2;
	}
	printf("%s: %llu slot(s) written\n", argv[2], (unsigned long long)n);
	return 0;
}
