/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "readfile.h"
#include "ebpf_kallsyms.h"

#define KSYMS_MAX_FILE (256u << 20)   /* refuse to read more than this */
#define KSYMS_PAST_LAST (1u << 20)

struct ksyms {
	struct ksym *v;           /* sorted by addr */
	size_t n, cap;
	char *names;              /* every name and module, NUL-separated */
	size_t names_len, names_cap;
	uint64_t sched_start, sched_end;
};

void ksyms__free(struct ksyms *ks)
{
	if (!ks)
		return;
	free(ks->v);
	free(ks->names);
	free(ks);
}

size_t ksyms__count(const struct ksyms *ks)
{
	return ks ? ks->n : 0;
}

/* Appends n bytes and a NUL to the name pool; returns the offset, or -1 on ENOMEM. */
static long pool_add(struct ksyms *ks, const char *s, size_t n)
{
	long off;

	if (ks->names_len + n + 1 > ks->names_cap) {
		size_t ncap = ks->names_cap ? ks->names_cap : 1 << 16;
		char *nv;

		while (ks->names_len + n + 1 > ncap)
			ncap *= 2;
		nv = realloc(ks->names, ncap);
		if (!nv)
			return -1;
		ks->names = nv;
		ks->names_cap = ncap;
	}
	off = (long)ks->names_len;
	memcpy(ks->names + ks->names_len, s, n);
	ks->names[ks->names_len + n] = 0;
	ks->names_len += n + 1;
	return off;
}

static int hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

static int cmp_ksym(const void *a, const void *b)
{
	const struct ksym *x = a, *y = b;

	if (x->addr != y->addr)
		return x->addr < y->addr ? -1 : 1;
	/* same address: keep the one that is not a padding stub (__pfx_) first */
	return (strncmp(x->name, "__pfx_", 6) == 0) - (strncmp(y->name, "__pfx_", 6) == 0);
}

/*
 * One line: "ADDR TYPE NAME[\t[MODULE]]". Returns 1 if a symbol was added, 0 if the line
 * was skipped, -ENOMEM. Names and modules are stored as pool offsets until the end.
 */
static int parse_line(struct ksyms *ks, const char *p, const char *end)
{
	uint64_t addr = 0;
	const char *name, *name_end, *mod = NULL, *mod_end = NULL;
	int digits = 0, h;
	long noff, moff = -1;
	char type;

	while (p < end && (h = hexval(*p)) >= 0) {
		if (++digits > 16)
			return 0;
		addr = addr << 4 | (uint64_t)h;
		p++;
	}
	if (!digits || p + 3 > end || *p != ' ')
		return 0;
	type = p[1];
	if (p[2] != ' ')
		return 0;
	p += 3;
	if (type != 't' && type != 'T' && type != 'w' && type != 'W')
		return 0;
	name = p;
	while (p < end && *p != '\t' && *p != ' ') {
		if ((unsigned char)*p <= ' ' || *p == 0x7f)
			return 0;  /* kallsyms names are printable */
		p++;
	}
	name_end = p;
	if (name_end == name)
		return 0;
	if (p < end && *p == '\t' && p + 1 < end && p[1] == '[') {
		mod = p + 2;
		mod_end = memchr(mod, ']', (size_t)(end - mod));
		if (!mod_end || mod_end == mod)
			mod = NULL;
		for (const char *q = mod; mod && q < mod_end; q++)
			if ((unsigned char)*q <= ' ' || *q == 0x7f)
				mod = NULL;
	}
	if (name_end - name == 18 && memcmp(name, "__sched_text_start", 18) == 0)
		ks->sched_start = addr;
	else if (name_end - name == 16 && memcmp(name, "__sched_text_end", 16) == 0)
		ks->sched_end = addr;
	if (!addr)
		return 0;
	noff = pool_add(ks, name, (size_t)(name_end - name));
	if (noff < 0)
		return -ENOMEM;
	if (mod) {
		moff = pool_add(ks, mod, (size_t)(mod_end - mod));
		if (moff < 0)
			return -ENOMEM;
	}
	if (ks->n == ks->cap) {
		size_t ncap = ks->cap ? ks->cap * 2 : 4096;
		struct ksym *nv = realloc(ks->v, ncap * sizeof(*nv));

		if (!nv)
			return -ENOMEM;
		ks->v = nv;
		ks->cap = ncap;
	}
	/* offsets + 1 in the pointer fields; turned into pointers once the pool stops moving */
	ks->v[ks->n++] = (struct ksym){ .addr = addr, .name = (const char *)(uintptr_t)(noff + 1),
					.module = (const char *)(uintptr_t)(moff + 1) };
	return 1;
}

int ksyms__parse(const char *text, size_t len, struct ksyms **ret)
{
	struct ksyms *ks;
	const char *p = text, *end = text + len;
	int r;

	if (!ret || (!text && len))
		return -EINVAL;
	ks = calloc(1, sizeof(*ks));
	if (!ks)
		return -ENOMEM;
	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		const char *le = nl ? nl : end;

		r = parse_line(ks, p, le);
		if (r < 0)
			goto fail;
		p = nl ? nl + 1 : end;
	}
	if (!ks->n) {
		r = -ENOENT;
		goto fail;
	}
	for (size_t i = 0; i < ks->n; i++) {
		uintptr_t no = (uintptr_t)ks->v[i].name, mo = (uintptr_t)ks->v[i].module;

		ks->v[i].name = ks->names + (no - 1);
		ks->v[i].module = mo ? ks->names + (mo - 1) : NULL;
	}
	qsort(ks->v, ks->n, sizeof(*ks->v), cmp_ksym);
	if (ks->sched_end <= ks->sched_start)
		ks->sched_start = ks->sched_end = 0;
	*ret = ks;
	return 0;
fail:
	ksyms__free(ks);
	return r;
}

int ksyms__load(const char *path, struct ksyms **ret)
{
	char *buf = NULL;
	size_t len = 0;
	int r;

	r = readfile(path ? path : "/proc/kallsyms", KSYMS_MAX_FILE, 0, &buf, &len);
	if (r < 0)
		return r;
	r = ksyms__parse(buf, len, ret);
	free(buf);
	return r;
}

const struct ksym *ksyms__find(const struct ksyms *ks, uint64_t addr)
{
	size_t lo = 0, hi;

	if (!ks || !ks->n || addr < ks->v[0].addr)
		return NULL;
	hi = ks->n;
	while (hi - lo > 1) {
		size_t mid = lo + (hi - lo) / 2;

		if (ks->v[mid].addr <= addr)
			lo = mid;
		else
			hi = mid;
	}
	if (lo == ks->n - 1 && addr - ks->v[lo].addr > KSYMS_PAST_LAST)
		return NULL;
	while (lo > 0 && ks->v[lo - 1].addr == ks->v[lo].addr)
		lo--;  /* aliases: the first in sort order (not a __pfx_ stub) */
	return &ks->v[lo];
}

bool ksyms__in_sched_text(const struct ksyms *ks, uint64_t addr)
{
	return ks && ks->sched_end && addr >= ks->sched_start && addr < ks->sched_end;
}

const struct ksym *ksyms__find_name(const struct ksyms *ks, const char *name)
{
	for (size_t i = 0; ks && name && i < ks->n; i++)
		if (strcmp(ks->v[i].name, name) == 0)
			return &ks->v[i];
	return NULL;
}
