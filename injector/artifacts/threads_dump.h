/* SPDX-License-Identifier: MIT */
/* `aiprof stacks` output: the threads ebpf__threads() read, as text and as JSON. */
#ifndef AIPROF_THREADS_DUMP_H
#define AIPROF_THREADS_DUMP_H

#include <stdint.h>
#include <stdio.h>

struct jsonw;
struct ebpf;

#define THREADS_DUMP_SCHEMA "aiprof.stacks/v1"

struct dump_meta {
	const char *taken_at;     /* UTC, ISO 8601 */
	const char *host;
	uint64_t took_ns;         /* how long reading the threads took */
	const int *ranks;         /* per target (e->t order): its RANK, -1 if none; may be NULL */
	size_t nranks;            /* entries of ranks (processes past them: no rank) */
};

void threads_dump_write_json(struct jsonw *w, const struct ebpf *e, const struct dump_meta *m);
void threads_dump_write_text(FILE *out, const struct ebpf *e, const struct dump_meta *m);

#endif
