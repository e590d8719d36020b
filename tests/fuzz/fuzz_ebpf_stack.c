/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for the eBPF record decoders' common part, ebpf_stack_from() and
 * ebpf_ucopy_of() (injector/collect/ebpf_core.c): the stack block every CPU, off-CPU and
 * syscall record carries (kernel and user pcs, byte counts the kernel side reports, Python
 * frames read from the target, a copy of the user stack with registers), any bytes at all, as
 * this process's own record. A stack id comes back or an error; nothing is read past the
 * record.
 * FUZZ_SOURCES: injector/collect/ebpf_core.c injector/collect/ebpf_names.c injector/collect/ebpf_stacks.c injector/collect/ebpf_symbols.c injector/collect/ebpf_kallsyms.c injector/target/unwind.c injector/target/uwshare.c injector/target/python.c injector/target/pyoffsets.c common/u64map.c common/elfsym.c common/procmaps.c common/readfile.c common/digest.c common/blobtab.c common/log.c common/timeutil.c common/procsyms.c common/strbuf.c injector/target/pyframes.c common/targetfile.c common/procstat.c injector/target/container.c
 * FUZZ_LIBS: -lbpf -ldw -lelf -lz -lcrypto
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "collect/ebpf_internal.h"

#define CHECK(x) do { if (!(x)) __builtin_trap(); } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct ebpf *e;

static void setup(void)
{
	e = calloc(1, sizeof(*e));
	CHECK(e);
	stack_store__init(&e->stacks);
	CHECK(symbolizer__new(&e->symz) == 0);
	CHECK(unwind_tables__new(0, &e->uw) == 0);
	e->t = calloc(1, sizeof(*e->t));
	CHECK(e->t);
	e->nt = 1;
	CHECK(ebpf_tdata_init(e, &e->t[0], getpid(), "fuzz") == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct ebpf_stacks *st;
	const struct ebpf_ucopy *uc;
	uint32_t leaf = 0, wchan = 0;
	uint8_t *rec;
	int id;

	if (!e)
		setup();
	if (size < 1)
		return 0;
	/* the record: a fixed part (the stacks) and, after it, perhaps a stack copy */
	rec = calloc(1, sizeof(*st) + size);
	if (!rec)
		return 0;
	memcpy(rec, data + 1, size - 1 < sizeof(*st) ? size - 1 : sizeof(*st));
	if (size - 1 > sizeof(*st))
		memcpy(rec + sizeof(*st), data + 1 + sizeof(*st), size - 1 - sizeof(*st));
	st = (struct ebpf_stacks *)rec;
	uc = ebpf_ucopy_of(e, rec, sizeof(*st) + (size - 1 > sizeof(*st) ? size - 1 - sizeof(*st) : 0),
			   sizeof(*st));
	id = ebpf_stack_from(e, &e->t[0], st, uc, data[0] & 1, data[0] & 2, &leaf, &wchan);
	CHECK(id < 0 || (size_t)id < stack_store__nstacks(&e->stacks));
	free(rec);
	return 0;
}
