/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for the CFI unwinder: what a target controls, its stack and its ELF
 * files. Mode byte 0: hostile registers and stack over this program's own (real) CFI;
 * mode 1: a hostile ELF file as the module of every pc, walked over a hostile stack.
 * A walk must end, within its bounds, reading only what the callbacks give it.
 * FUZZ_SOURCES: injector/target/unwind.c injector/target/uwshare.c common/u64map.c common/elfsym.c common/procmaps.c common/readfile.c common/digest.c
 * FUZZ_LIBS: -ldw -lelf -lz -lcrypto
 * FUZZ_ARGS: -max_len=65536
 */
#include <link.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include "elfsym.h"
#include "injector/target/unwind.h"

#define CHECK(x) do { if (!(x)) __builtin_trap(); } while (0)
#define MAX_FRAMES 64

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct fz {
	const uint8_t *stack;
	size_t len;
	uint64_t sp;
	struct elf_file *elf;     /* the module of every pc in mode 1; else this program */
	uint64_t bias, lo, hi;
	size_t reads;
};

static bool fz_read(void *arg, uint64_t addr, uint64_t *ret)
{
	struct fz *f = arg;

	f->reads++;
	if (addr < f->sp || addr - f->sp > f->len || f->len - (addr - f->sp) < 8)
		return false;
	memcpy(ret, f->stack + (addr - f->sp), 8);
	return true;
}

static int fz_code(void *arg, uint64_t pc, struct unwind_code *ret)
{
	struct fz *f = arg;

	if (!f->elf || pc < f->lo || pc >= f->hi)
		return -2;  /* -ENOENT */
	*ret = (struct unwind_code){ .elf = elf_file__libelf(f->elf), .key = 1, .bias = f->bias };
	return 0;
}

static int first_object(struct dl_phdr_info *info, size_t sz, void *arg)
{
	uint64_t *bias = arg;

	(void)sz;
	*bias = info->dlpi_addr;
	return 1;
}

static struct elf_file *self_elf;
static uint64_t self_bias, self_lo, self_hi;

static void self_open(void)
{
	const struct elf_info *info;

	if (self_elf)
		return;
	CHECK(elf_file__open("/proc/self/exe", &self_elf) == 0);
	dl_iterate_phdr(first_object, &self_bias);
	info = elf_file__info(self_elf);
	self_lo = UINT64_MAX;
	for (size_t i = 0; i < info->n_loads; i++) {
		if (info->loads[i].vaddr + self_bias < self_lo)
			self_lo = info->loads[i].vaddr + self_bias;
		if (info->loads[i].vaddr + info->loads[i].memsz + self_bias > self_hi)
			self_hi = info->loads[i].vaddr + info->loads[i].memsz + self_bias;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct unwind_regs regs = { .valid = (1u << UW_NREGS) - 1 };
	struct unwind_tables *t = NULL;
	struct unwind_target tgt;
	struct unwind_result res;
	uint64_t pcs[MAX_FRAMES];
	struct fz f = { 0 };
	size_t hdr = 1 + sizeof(regs.r);

	if (size < hdr)
		return 0;
	memcpy(regs.r, data + 1, sizeof(regs.r));
	if (data[0] & 1) {
		/* the rest: 2 bytes of stack length, the stack, then the ELF file */
		size_t slen;

		if (size < hdr + 2)
			return 0;
		slen = (size_t)data[hdr] | (size_t)data[hdr + 1] << 8;
		if (slen > size - hdr - 2)
			slen = size - hdr - 2;
		f.stack = data + hdr + 2;
		f.len = slen;
		if (elf_file__open_mem(data + hdr + 2 + slen, size - hdr - 2 - slen, &f.elf) < 0)
			return 0;
		f.bias = 0;
		f.lo = 0;
		f.hi = UINT64_MAX;
		/* pcs near where non-PIE executables put their code */
		regs.r[UW_RIP] = 0x400000 + (regs.r[UW_RIP] & 0xffff);
	} else {
		self_open();
		f.stack = data + hdr;
		f.len = size - hdr;
		f.elf = self_elf;
		f.bias = self_bias;
		f.lo = self_lo;
		f.hi = self_hi;
		/* a pc inside this program half of the time, so that its CFI is exercised */
		if (regs.r[UW_RIP] & 1)
			regs.r[UW_RIP] = self_lo + (regs.r[UW_RIP] >> 1) % (self_hi - self_lo);
	}
	f.sp = regs.r[UW_RSP];
	tgt = (struct unwind_target){ .read = fz_read, .code = fz_code, .arg = &f };
	CHECK(unwind_tables__new(16, &t) == 0);
	CHECK(unwind_stack(t, &tgt, &regs, pcs, MAX_FRAMES, &res) == 0);
	CHECK(res.n <= MAX_FRAMES);
	CHECK(res.fp_frames <= res.n);
	CHECK((unsigned)res.end < UNWIND_END__N);
	unwind_tables__free(t);
	if (f.elf != self_elf)
		elf_file__free(f.elf);
	return 0;
}
