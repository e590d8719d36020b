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
	char taken_at[32];        /* UTC, ISO 8601 */
	char host[256];
	uint64_t took_ns;         /* how long reading the threads took */
	const int *ranks;         /* per target (e->t order): its RANK, -1 if none; may be NULL */
	size_t nranks;            /* entries of ranks (processes past them: no rank) */
};

/* m->taken_at and m->host: now, and this machine's name. */
void threads_dump_meta_now(struct dump_meta *m);

void threads_dump_write_json(struct jsonw *w, const struct ebpf *e, const struct dump_meta *m);
/* The JSON, and a newline, into f: 0, -ENOMEM, or -EIO when it could not be written. */
int threads_dump_write_json_file(FILE *f, const struct ebpf *e, const struct dump_meta *m);
void threads_dump_write_text(FILE *out, const struct ebpf *e, const struct dump_meta *m);

#endif
