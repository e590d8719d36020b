/* SPDX-License-Identifier: MIT */
/*
 * profile.pb.gz: the eBPF collectors' stacks and the GPU launches' call stacks in pprof's
 * profile.proto (github.com/google/pprof, proto/profile.proto), what `go tool pprof`,
 * Pyroscope/Grafana, Parca and the OpenTelemetry profiles signal read. One sample per stack,
 * with four values, weighted as the flame graphs are: on-CPU samples (count), on-CPU time
 * (samples x the sampling period, nanoseconds), off-CPU time (nanoseconds), and the GPU
 * launches as gpu.folded weighs them (gpu_time/nanoseconds of their kernels with CUPTI, else
 * gpu_launches/count); the default is on-CPU time, or the GPU's without eBPF stacks. Frames
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
#include "launch_stacks.h"
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

/* ---- the profile ------------------------------------------------------------------------ */

#define NVALUES 4                 /* samples, cpu, off_cpu, gpu */
#define FRAME_MAX 2048            /* a longer frame name is cut (folded text) */

struct pp {
	struct membuf prof, sub, sub2;
	struct strtab st;
	struct u64map fn_of_name;     /* string index of a frame's full name -> function id */
	uint64_t nfn;
};

/* The function (= location) id of the frame named name[0..len), emitted when first met. */
static uint64_t fn_id(struct pp *x, const char *name, size_t len)
{
	char buf[FRAME_MAX];
	struct frame_parts p;
	int64_t si = str_of(&x->st, name, len);
	uint64_t id;

	if (si < 0)
		return 0;
	if (u64map_get(&x->fn_of_name, (uint64_t)si, &id))
		return id;
	id = ++x->nfn;
	if (u64map_put(&x->fn_of_name, (uint64_t)si, id) < 0)
		x->prof.failed = true;
	if (len >= sizeof(buf))
		len = sizeof(buf) - 1;
	memcpy(buf, name, len);
	buf[len] = 0;
	split_frame(buf, &p);
	/* Function: id, name, system_name, filename */
	pb_int(&x->sub, 1, id);
	pb_int(&x->sub, 2, (uint64_t)str_of(&x->st, p.name, p.name_len));
	pb_int(&x->sub, 3, (uint64_t)str_of(&x->st, p.name, p.name_len));
	if (p.file)
		pb_int(&x->sub, 4, (uint64_t)str_of(&x->st, p.file, p.file_len));
	pb_msg(&x->prof, 5, &x->sub);
	/* Location: id, line { function_id, line } */
	pb_int(&x->sub, 1, id);
	pb_int(&x->sub2, 1, id);
	pb_int(&x->sub2, 2, (uint64_t)p.line);
	pb_msg(&x->sub, 4, &x->sub2);
	pb_msg(&x->prof, 4, &x->sub);
	return id;
}

/* A sample: locations leaf first (ids[] is root first), the values, and the labels pid and
 * comm from the root frame "comm-pid". */
static void sample(struct pp *x, const uint64_t *ids, size_t n, const uint64_t v[NVALUES],
		   const char *root, size_t root_len)
{
	const char *dash = NULL;

	for (size_t i = n; i-- > 0;)
		if (ids[i])
			pb_varint(&x->sub2, ids[i]);
	pb_msg(&x->sub, 1, &x->sub2);
	for (size_t i = 0; i < NVALUES; i++)
		pb_varint(&x->sub2, v[i]);
	pb_msg(&x->sub, 2, &x->sub2);
	for (size_t i = root_len; i-- > 0;)
		if (root[i] == '-') {
			dash = root + i;
			break;
		}
	if (dash && (size_t)(dash - root) + 1 < root_len) {
		struct membuf lab = { 0 };
		char num[24];
		size_t k = root_len - (size_t)(dash - root) - 1;

		if (k >= sizeof(num))
			k = sizeof(num) - 1;
		memcpy(num, dash + 1, k);
		num[k] = 0;
		pb_int(&lab, 1, (uint64_t)str(&x->st, "pid"));
		pb_int(&lab, 3, strtoull(num, NULL, 10));
		pb_msg(&x->sub, 3, &lab);
		pb_int(&lab, 1, (uint64_t)str(&x->st, "comm"));
		pb_int(&lab, 2, (uint64_t)str_of(&x->st, root, (size_t)(dash - root)));
		pb_msg(&x->sub, 3, &lab);
		if (lab.failed)
			x->prof.failed = true;
		membuf_free(&lab);
	}
	pb_msg(&x->prof, 2, &x->sub);
}

/* The eBPF collectors' stacks, one sample each. */
static int cpu_samples(struct pp *x, const struct ebpf *e, uint64_t period)
{
	const struct stack_store *ss = &e->stacks;
	size_t nframes = stack_store__nframes(ss), nstacks = stack_store__nstacks(ss);
	uint64_t *fn_of = calloc(nframes + 1, sizeof(*fn_of));   /* frame id -> function id */
	uint64_t *ids = NULL;
	size_t cap = 0;

	if (!fn_of)
		return -ENOMEM;
	for (uint32_t s = 0; s < nstacks; s++) {
		uint64_t cpu = stack_store__weight(ss, s, STACK_CPU);
		uint64_t off = stack_store__weight(ss, s, STACK_OFFCPU);
		uint64_t v[NVALUES] = { cpu, cpu * period, off * 1000, 0 };
		size_t n = 0;
		const uint32_t *f = stack_store__stack_frames(ss, s, &n);
		const char *root;

		if ((!cpu && !off) || !f || !n)
			continue;
		if (n > cap) {
			uint64_t *ni = reallocarray(ids, n, sizeof(*ids));

			if (!ni) {
				free(ids);
				free(fn_of);
				return -ENOMEM;
			}
			ids = ni;
			cap = n;
		}
		for (size_t i = 0; i < n; i++) {
			const char *name;

			ids[i] = 0;
			if (f[i] >= nframes)
				continue;
			if (!fn_of[f[i]]) {
				name = stack_store__frame_name(ss, f[i]);
				fn_of[f[i]] = fn_id(x, name, strlen(name));
			}
			ids[i] = fn_of[f[i]];
		}
		root = stack_store__frame_name(ss, f[0]);
		sample(x, ids, n, v, root, strlen(root));
	}
	free(ids);
	free(fn_of);
	return 0;
}

/* gpu.folded's lines ("comm-pid;...;api;kernel WEIGHT"), one sample each. */
static void gpu_samples(struct pp *x, const struct membuf *folded)
{
	const char *p = folded->p, *end = folded->p + folded->len;
	uint64_t ids[STACK_MAX_FRAMES + 8];

	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p)), *sp, *f;
		uint64_t v[NVALUES] = { 0 };
		size_t n = 0;

		if (!nl)
			nl = end;
		for (sp = nl; sp > p && sp[-1] != ' '; sp--)
			;
		if (sp > p + 1) {
			v[3] = strtoull(sp, NULL, 10);
			for (f = p; f < sp - 1 && n < sizeof(ids) / sizeof(ids[0]);) {
				const char *semi = memchr(f, ';', (size_t)(sp - 1 - f));
				const char *fe = semi ? semi : sp - 1;

				ids[n++] = fn_id(x, f, (size_t)(fe - f));
				f = fe + 1;
			}
			if (n && v[3]) {
				const char *re = memchr(p, ';', (size_t)(sp - 1 - p));

				sample(x, ids, n, v, p, (size_t)((re ? re : sp - 1) - p));
			}
		}
		p = nl + 1;
	}
}


/* A program rather than a library or a kernel-made mapping ([vdso]): as pprof guesses the
 * main binary */
static bool is_main_module(const char *path)
{
	const char *base = strrchr(path, '/');

	base = base ? base + 1 : path;
	return path[0] != '[' && !(strncmp(base, "lib", 3) == 0 && strstr(base, ".so")) &&
	       !strstr(base, ".so.") && !(strlen(base) > 3 && strcmp(base + strlen(base) - 3, ".so") == 0);
}
int pprof_write(const struct profile *prof, const struct ebpf *e, const char *path,
		uint64_t start_realtime_ns, uint64_t duration_ns)
{
	struct pp x = { 0 };
	struct membuf gpu = { 0 };
	struct launch_stacks_stats gst = { 0 };
	bool cpu = e && (ebpf__collectors(e) & (EBPF_COLLECT_CPU | EBPF_COLLECT_OFFCPU));
	uint64_t period = 1000000000ULL / (e && e->opts.frequency_hz ? e->opts.frequency_hz : 99);
	const char *gpu_type;
	gzFile gz = NULL;
	int r = -ENOMEM;

	if (prof && launch_stacks_folded(prof, &gpu, &gst) < 0)
		goto out;
	if (!cpu && !gpu.len)
		return 0;     /* nothing to write: no stacks of either kind */
	gpu_type = gst.by_gpu_time ? "gpu_time" : "gpu_launches";
	str(&x.st, "");   /* index 0 is the empty string */

	/* sample_type: samples/count, cpu/nanoseconds, off_cpu/nanoseconds, the GPU's */
	{
		const char *types[NVALUES][2] = {
			{ "samples", "count" }, { "cpu", "nanoseconds" }, { "off_cpu", "nanoseconds" },
			{ gpu_type, gst.by_gpu_time ? "nanoseconds" : "count" },
		};

		for (size_t i = 0; i < NVALUES; i++) {
			pb_int(&x.sub, 1, (uint64_t)str(&x.st, types[i][0]));
			pb_int(&x.sub, 2, (uint64_t)str(&x.st, types[i][1]));
			pb_msg(&x.prof, 1, &x.sub);
		}
	}
	if (cpu && cpu_samples(&x, e, period) < 0)
		goto out;
	gpu_samples(&x, &gpu);

	/* mappings: the modules the targets' stacks went through, with their build-ids; the
	 * main program first (pprof takes the first mapping for the main binary, and keeps
	 * only it of those no location refers to: [vdso] first hid every other) */
	for (size_t pass = 0, id = 0; pass < 2; pass++)
		for (size_t t = 0; e && t < e->nt; t++) {
			const struct psym_module *mods = NULL;
			size_t nm = e->t[t].syms ? proc_symbolizer__modules(e->t[t].syms, &mods) : 0;

			for (size_t i = 0; i < nm; i++) {
				if (is_main_module(mods[i].path) != (pass == 0))
					continue;
				pb_int(&x.sub, 1, ++id);
				pb_int(&x.sub, 5, (uint64_t)str(&x.st, mods[i].path));
				if (mods[i].build_id[0])
					pb_int(&x.sub, 6, (uint64_t)str(&x.st, mods[i].build_id));
				pb_int(&x.sub, 7, 1);   /* has_functions */
				pb_msg(&x.prof, 3, &x.sub);
			}
		}

	pb_int(&x.prof, 9, start_realtime_ns);
	pb_int(&x.prof, 10, duration_ns);
	if (cpu) {
		pb_int(&x.sub, 1, (uint64_t)str(&x.st, "cpu"));
		pb_int(&x.sub, 2, (uint64_t)str(&x.st, "nanoseconds"));
		pb_msg(&x.prof, 11, &x.sub);
		pb_int(&x.prof, 12, period);
	}
	pb_int(&x.prof, 14, (uint64_t)str(&x.st, cpu ? "cpu" : gpu_type));
	if (x.prof.failed || x.st.out.failed || x.sub.failed || x.sub2.failed)
		goto out;

	gz = gzopen(path, "wb6");
	if (!gz) {
		r = errno ? -errno : -EIO;
		goto out;
	}
	r = 0;
	if ((x.prof.len && gzwrite(gz, x.prof.p, (unsigned)x.prof.len) != (int)x.prof.len) ||
	    (x.st.out.len && gzwrite(gz, x.st.out.p, (unsigned)x.st.out.len) != (int)x.st.out.len))
		r = -EIO;
	if (gzclose(gz) != Z_OK && !r)
		r = -EIO;
out:
	membuf_free(&gpu);
	strtab_free(&x.st);
	u64map_clear(&x.fn_of_name);
	membuf_free(&x.prof);
	membuf_free(&x.sub);
	membuf_free(&x.sub2);
	return r;
}
