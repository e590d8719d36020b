/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for injector/artifacts/threads_dump.c, what `aiprof stacks` prints of the
 * threads ebpf__threads() read: every name in it is the target's to choose (process and thread
 * comm via prctl, threading names, frame names from its symbols and Python code objects), and
 * the numbers come from the kernel's view of a task the target controls (state bits, syscall
 * number, how long).
 * The input is read as a list of processes, each a list of threads with those fields and a
 * stack of frames named by input bytes (interned by the real stack store). Both outputs are
 * written: the JSON must parse and hold every thread; the text must reach a terminal with no
 * control character but '\n', no DEL, no C1 control, and be valid UTF-8.
 * FUZZ_SOURCES: injector/artifacts/threads_dump.c injector/artifacts/framename.c injector/collect/ebpf_stacks.c injector/collect/ebpf_names.c common/jsonw.c common/blobtab.c common/u64map.c common/utf8.c
 * FUZZ_LIBS: -ljansson -lz
 * FUZZ_ARGS: -max_len=4096
 */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "artifacts/threads_dump.h"
#include "collect/ebpf_internal.h"
#include "utf8.h"

#define CHECK(x) do { if (!(x)) __builtin_trap(); } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* td->py is always NULL here: nothing calls it */
const char *py_proc__version(const struct py_proc *p)
{
	(void)p;
	__builtin_trap();
}

struct in {
	const uint8_t *p;
	size_t n;
};

static uint32_t take(struct in *in, size_t bytes)
{
	uint32_t v = 0;

	for (size_t i = 0; i < bytes; i++) {
		v = v << 8 | (in->n ? *in->p : 0);
		if (in->n) {
			in->p++;
			in->n--;
		}
	}
	return v;
}

/* A name of up to 31 input bytes, NUL-terminated in buf. */
static void name(struct in *in, char *buf, size_t cap)
{
	size_t len = take(in, 1) % 32;

	if (len >= cap)
		len = cap - 1;
	if (len > in->n)
		len = in->n;
	memcpy(buf, in->p, len);
	buf[len] = 0;
	in->p += len;
	in->n -= len;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct in in = { data, size };
	struct ebpf e;
	struct dump_meta m = { .taken_at = "2026-12-02T00:00:00Z", .host = "fuzz", .took_ns = 1234567 };
	int ranks[4];
	size_t nthreads = 0, tlen = 0, jlen = 0;
	char *text = NULL, *js = NULL;
	FILE *f;

	memset(&e, 0, sizeof(e));
	stack_store__init(&e.stacks);
	e.nt = take(&in, 1) % 4;
	e.t = calloc(e.nt ? e.nt : 1, sizeof(*e.t));
	CHECK(e.t);
	m.ranks = ranks;
	m.nranks = take(&in, 1) % 5;
	for (size_t i = 0; i < 4; i++)
		ranks[i] = (int)(int8_t)take(&in, 1);
	for (size_t i = 0; i < e.nt; i++) {
		struct ebpf_tdata *td = &e.t[i];

		td->pid = (pid_t)take(&in, 4);
		td->parent = (pid_t)take(&in, 2);
		name(&in, td->comm, sizeof(td->comm));
		td->nthreads = take(&in, 1) % 6;
		td->threads = calloc(td->nthreads ? td->nthreads : 1, sizeof(*td->threads));
		CHECK(td->threads);
		/* the names the program gave its threads (threading's): the target's bytes too */
		td->pynames = calloc(td->nthreads ? td->nthreads : 1, sizeof(*td->pynames));
		CHECK(td->pynames);
		for (size_t k = 0; k < td->nthreads; k++) {
			struct ebpf_thread *t = &td->threads[k];
			uint32_t frames[9];
			size_t nf = 1 + take(&in, 1) % 8;
			char fn[32];

			t->tid = take(&in, 4);
			name(&in, t->comm, sizeof(t->comm));
			t->state = take(&in, 4);
			t->on_cpu = take(&in, 1) & 1;
			t->syscall = (int32_t)take(&in, 4);
			t->for_ns = (uint64_t)take(&in, 4) << (take(&in, 1) % 33);
			t->whole = take(&in, 1) & 1;
			t->gil = (uint8_t)(take(&in, 1) % 3);
			if (take(&in, 1) & 1) {
				struct ebpf_pyname *pn = &td->pynames[td->npynames++];

				pn->tid = t->tid;
				pn->found = true;
				name(&in, pn->name, sizeof(pn->name));
			}
			for (size_t j = 0; j < nf; j++) {
				int id;

				name(&in, fn, sizeof(fn));
				id = stack_store__frame(&e.stacks, fn);
				CHECK(id >= 0);
				frames[j] = (uint32_t)id;
			}
			t->wchan = take(&in, 1) & 1 ? frames[nf - 1] : UINT32_MAX;
			t->stack = (uint32_t)stack_store__stack(&e.stacks, frames, nf);
			nthreads++;
		}
	}

	f = open_memstream(&js, &jlen);
	CHECK(f);
	CHECK(threads_dump_write_json_file(f, &e, &m) == 0);
	CHECK(fclose(f) == 0);
	{
		json_error_t err;
		json_t *j = json_loadb(js, jlen, 0, &err), *procs;
		size_t seen = 0, i;
		json_t *p;

		CHECK(j);
		procs = json_object_get(j, "processes");
		CHECK(json_array_size(procs) == e.nt);
		json_array_foreach(procs, i, p)
			seen += json_array_size(json_object_get(p, "threads"));
		CHECK(seen == nthreads);
		json_decref(j);
	}

	f = open_memstream(&text, &tlen);
	CHECK(f);
	threads_dump_write_text(f, &e, &m);
	CHECK(fclose(f) == 0);
	CHECK(utf8_valid(text, tlen));
	for (size_t i = 0; i < tlen; i++) {
		unsigned char c = (unsigned char)text[i];

		CHECK(c == '\n' || (c >= 0x20 && c != 0x7f));
		/* C1 controls: U+0080..U+009F, 0xC2 0x80..0x9F in UTF-8 */
		CHECK(!(c == 0xc2 && i + 1 < tlen && (unsigned char)text[i + 1] >= 0x80 &&
			(unsigned char)text[i + 1] <= 0x9f));
	}

	free(js);
	free(text);
	for (size_t i = 0; i < e.nt; i++) {
		free(e.t[i].threads);
		free(e.t[i].pynames);
	}
	free(e.t);
	stack_store__clear(&e.stacks);
	return 0;
}
