/* SPDX-License-Identifier: MIT */
/*
 * profile.pb.gz: the eBPF collectors' stacks in pprof's profile.proto (github.com/google/
 * pprof, proto/profile.proto), what `go tool pprof`, Pyroscope/Grafana, Parca and the
 * OpenTelemetry profiles signal read. One sample per stack, with three values, weighted as
 * the flame graphs are: on-CPU samples (count), on-CPU time (samples x the sampling
 * period, nanoseconds) and off-CPU time (nanoseconds); the default is on-CPU time. Frames
 * as functions: Python frames with their file and line, kernel frames in "[kernel]", the
 * process as the outermost frame "comm-pid" (as in stacks.folded) and as the labels pid
 * and comm. The modules the stacks went through are its mappings, with their build-ids.
 * The protobuf is written by hand: a few dozen lines of varints instead of a dependency.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "collect/ebpf_internal.h"
#include "membuf.h"
#include "pprof.h"

/* ---- protobuf ---------------------------------------------------------------------------- */

enum { WT_VARINT = 0, WT_LEN = 2 };

static void pb_varint(struct membuf *b, uint64_t v)
{
	char out[10];
	size_t n = 0;

	do {
		out[n++] = (char)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
		v >>= 7;
	} while (v);
	membuf_put(b, out, n);
}

static void pb_key(struct membuf *b, unsigned field, unsigned wt)
{
	pb_varint(b, (uint64_t)field << 3 | wt);
}

/* An int64/uint64 field; proto3 leaves zero out. */
static void pb_int(struct membuf *b, unsigned field, uint64_t v)
{
	if (!v)
		return;
	pb_key(b, field, WT_VARINT);
	pb_varint(b, v);
}

static void pb_bytes(struct membuf *b, unsigned field, const void *p, size_t n)
{
	pb_key(b, field, WT_LEN);
	pb_varint(b, n);
	if (n)
		membuf_put(b, p, n);
}

/* A nested message built in sub, appended as field, and sub emptied for the next. */
static void pb_msg(struct membuf *b, unsigned field, struct membuf *sub)
{
	pb_bytes(b, field, sub->p, sub->len);
	sub->len = 0;
	if (sub->failed)
		b->failed = true;
}

/* ---- the string table -------------------------------------------------------------------- */

struct strtab {
	struct membuf out;        /* field 6 of Profile, one entry per string, in index order */
	struct u64map index;      /* FNV-1a of the string (+ k past k collisions) -> index + 1 */
	const char **strs;        /* the strings by index, to check collisions */
	char **owned;
	size_t n, cap;
};

static uint64_t fnv(const char *s, size_t n)
{
	uint64_t h = 1469598103934665603ULL;

	for (size_t i = 0; i < n; i++)
		h = (h ^ (unsigned char)s[i]) * 1099511628211ULL;
	return h;
}

/* The index of s[0..n) in the table, added if new; -1 on allocation failure. */
static int64_t str_of(struct strtab *t, const char *s, size_t n)
{
	uint64_t k, v;
	char *copy;

	/* open addressing over the hashes: a different string under k moves on to k + 1 */
	for (k = fnv(s, n); u64map_get(&t->index, k, &v); k++)
		if (strlen(t->strs[v - 1]) == n && memcmp(t->strs[v - 1], s, n) == 0)
			return (int64_t)(v - 1);
	if (t->n == t->cap) {
		size_t ncap = t->cap ? t->cap * 2 : 256;
		const char **ns = reallocarray(t->strs, ncap, sizeof(*ns));
		char **no;

		if (!ns)
			return -1;
		t->strs = ns;
		no = reallocarray(t->owned, ncap, sizeof(*no));
		if (!no)
			return -1;
		t->owned = no;
		t->cap = ncap;
	}
	copy = strndup(s, n);
	if (!copy || u64map_put(&t->index, k, t->n + 1) < 0) {
		free(copy);
		return -1;
	}
	t->strs[t->n] = copy;
	t->owned[t->n] = copy;
	pb_bytes(&t->out, 6, s, n);
	return (int64_t)t->n++;
}

static int64_t str(struct strtab *t, const char *s)
{
	return str_of(t, s, strlen(s));
}

static void strtab_free(struct strtab *t)
{
	for (size_t i = 0; i < t->n; i++)
		free(t->owned[i]);
	free(t->owned);
	free(t->strs);
	u64map_clear(&t->index);
	membuf_free(&t->out);
}

/* ---- frames ------------------------------------------------------------------------------ */

/* A frame name split as pprof wants it: function, file, line. */
struct frame_parts {
	const char *name;
	size_t name_len;
	const char *file;         /* NULL: none */
	size_t file_len;
	int64_t line;
};

static void split_frame(const char *f, struct frame_parts *p)
{
	size_t n = strlen(f);
	const char *open;

	*p = (struct frame_parts){ .name = f, .name_len = n };
	if (n > 4 && strcmp(f + n - 4, "_[k]") == 0) {
		p->name_len = n - 4;
		p->file = "[kernel]";
		p->file_len = 8;
		return;
	}
	/* Python: "qualname (file.py:line)" */
	open = n > 2 && f[n - 1] == ')' ? strstr(f, " (") : NULL;
	if (open && strstr(open, ".py:")) {
		const char *colon = strrchr(open, ':');
		char *end;
		long line = strtol(colon + 1, &end, 10);

		p->name_len = (size_t)(open - f);
		p->file = open + 2;
		p->file_len = (size_t)(colon - p->file);
		if (end == f + n - 1 && line > 0)
			p->line = line;
	}
}

int pprof_write(const struct ebpf *e, const char *path, uint64_t start_realtime_ns,
		uint64_t duration_ns)
{
	struct membuf prof = { 0 }, sub = { 0 }, sub2 = { 0 };
	struct strtab st = { 0 };
	const struct stack_store *ss;
	size_t nframes, nstacks;
	uint64_t period, *fn_of = NULL;  /* frame id -> function id (= location id); 0: none */
	gzFile gz = NULL;
	int r = -ENOMEM;

	if (!e)
		return 0;
	ss = &e->stacks;
	nframes = stack_store__nframes(ss);
	nstacks = stack_store__nstacks(ss);
	period = 1000000000ULL / (e->opts.frequency_hz ? e->opts.frequency_hz : 99);
	fn_of = calloc(nframes + 1, sizeof(*fn_of));
	if (!fn_of)
		goto out;
	str(&st, "");     /* index 0 is the empty string */

	/* sample_type: samples/count, cpu/nanoseconds, off_cpu/nanoseconds */
	{
		static const char *const types[][2] = {
			{ "samples", "count" }, { "cpu", "nanoseconds" }, { "off_cpu", "nanoseconds" },
		};

		for (size_t i = 0; i < 3; i++) {
			pb_int(&sub, 1, (uint64_t)str(&st, types[i][0]));
			pb_int(&sub, 2, (uint64_t)str(&st, types[i][1]));
			pb_msg(&prof, 1, &sub);
		}
	}

	/* samples, with their functions and locations as first met */
	for (uint32_t s = 0; s < nstacks; s++) {
		uint64_t cpu = stack_store__weight(ss, s, STACK_CPU);
		uint64_t off = stack_store__weight(ss, s, STACK_OFFCPU);
		size_t n = 0;
		const uint32_t *f = stack_store__stack_frames(ss, s, &n);
		const char *root;
		const char *dash;

		if ((!cpu && !off) || !f || !n)
			continue;
		for (size_t i = 0; i < n; i++) {
			struct frame_parts p;

			if (f[i] >= nframes || fn_of[f[i]])
				continue;
			fn_of[f[i]] = f[i] + 1;
			split_frame(stack_store__frame_name(ss, f[i]), &p);
			/* Function: id, name, system_name, filename */
			pb_int(&sub, 1, fn_of[f[i]]);
			pb_int(&sub, 2, (uint64_t)str_of(&st, p.name, p.name_len));
			pb_int(&sub, 3, (uint64_t)str_of(&st, p.name, p.name_len));
			if (p.file)
				pb_int(&sub, 4, (uint64_t)str_of(&st, p.file, p.file_len));
			pb_msg(&prof, 5, &sub);
			/* Location: id, line { function_id, line } */
			pb_int(&sub, 1, fn_of[f[i]]);
			pb_int(&sub2, 1, fn_of[f[i]]);
			pb_int(&sub2, 2, (uint64_t)p.line);
			pb_msg(&sub, 4, &sub2);
			pb_msg(&prof, 4, &sub);
		}
		/* Sample: location ids leaf first (packed), values (packed), labels */
		for (size_t i = n; i-- > 0;)
			if (f[i] < nframes)
				pb_varint(&sub2, fn_of[f[i]]);
		pb_msg(&sub, 1, &sub2);
		pb_varint(&sub2, cpu);
		pb_varint(&sub2, cpu * period);
		pb_varint(&sub2, off * 1000);
		pb_msg(&sub, 2, &sub2);
		/* the root frame is "comm-pid": labels pid (number) and comm */
		root = stack_store__frame_name(ss, f[0]);
		dash = strrchr(root, '-');
		if (dash && dash[1]) {
			struct membuf lab = { 0 };

			pb_int(&lab, 1, (uint64_t)str(&st, "pid"));
			pb_int(&lab, 3, strtoull(dash + 1, NULL, 10));
			pb_msg(&sub, 3, &lab);
			pb_int(&lab, 1, (uint64_t)str(&st, "comm"));
			pb_int(&lab, 2, (uint64_t)str_of(&st, root, (size_t)(dash - root)));
			pb_msg(&sub, 3, &lab);
			membuf_free(&lab);
		}
		pb_msg(&prof, 2, &sub);
	}

	/* mappings: the modules the targets' stacks went through, with their build-ids */
	{
		uint64_t id = 0;

		for (size_t t = 0; t < e->nt; t++) {
			const struct psym_module *mods = NULL;
			size_t nm = e->t[t].syms ? proc_symbolizer__modules(e->t[t].syms, &mods) : 0;

			for (size_t i = 0; i < nm; i++) {
				pb_int(&sub, 1, ++id);
				pb_int(&sub, 5, (uint64_t)str(&st, mods[i].path));
				if (mods[i].build_id[0])
					pb_int(&sub, 6, (uint64_t)str(&st, mods[i].build_id));
				pb_int(&sub, 7, 1);   /* has_functions */
				pb_msg(&prof, 3, &sub);
			}
		}
	}

	pb_int(&prof, 9, start_realtime_ns);
	pb_int(&prof, 10, duration_ns);
	pb_int(&sub, 1, (uint64_t)str(&st, "cpu"));
	pb_int(&sub, 2, (uint64_t)str(&st, "nanoseconds"));
	pb_msg(&prof, 11, &sub);
	pb_int(&prof, 12, period);
	pb_int(&prof, 14, (uint64_t)str(&st, "cpu"));
	if (prof.failed || st.out.failed || sub.failed || sub2.failed)
		goto out;

	gz = gzopen(path, "wb6");
	if (!gz) {
		r = errno ? -errno : -EIO;
		goto out;
	}
	r = 0;
	if ((prof.len && gzwrite(gz, prof.p, (unsigned)prof.len) != (int)prof.len) ||
	    (st.out.len && gzwrite(gz, st.out.p, (unsigned)st.out.len) != (int)st.out.len))
		r = -EIO;
	if (gzclose(gz) != Z_OK && !r)
		r = -EIO;
out:
	free(fn_of);
	strtab_free(&st);
	membuf_free(&prof);
	membuf_free(&sub);
	membuf_free(&sub2);
	return r;
}
