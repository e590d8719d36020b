/* SPDX-License-Identifier: MIT */
/*
 * Parsing one rank's artifacts for `aiprof merge` (read by merge_load.c from a folder or an
 * s3:// prefix): the timeline and summary.json. Outside input (a bucket anyone with write access can fill):
 * every size is bounded, the timeline is split into events by a small scanner that only
 * trusts what jansson then validates, and tests/fuzz/fuzz_merge.c feeds it garbage.
 *
 * The timeline is kept as text: the merged timeline copies each event with its pid, ts and
 * ids rewritten, so a rank's 50 MiB timeline is never held as a jansson tree at once.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <zlib.h>

#include "merge.h"

#define FRAME_DEPTH  512

/* ---- a structural scanner: spans of JSON values, validated later by jansson ------------ */

static size_t skip_ws(const char *b, size_t n, size_t i)
{
	while (i < n && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r'))
		i++;
	return i;
}

/* Index just past the value starting at b[i], or SIZE_MAX when it is cut short. */
static size_t skip_value(const char *b, size_t n, size_t i)
{
	size_t depth = 0;
	bool in_str = false;

	if (i >= n)
		return SIZE_MAX;
	if (b[i] != '{' && b[i] != '[' && b[i] != '"') {
		while (i < n && !strchr(",}] \t\r\n", b[i]) && b[i])
			i++;
		return i;
	}
	for (; i < n; i++) {
		char c = b[i];

		if (in_str) {
			if (c == '\\')
				i++;
			else if (c == '"') {
				in_str = false;
				if (depth == 0)
					return i + 1;
			}
			continue;
		}
		if (c == '"')
			in_str = true;
		else if (c == '{' || c == '[')
			depth++;
		else if (c == '}' || c == ']') {
			if (depth == 0)
				return SIZE_MAX;
			if (--depth == 0)
				return i + 1;
		}
	}
	return SIZE_MAX;
}

/* Into the object or array that opens at i with `open`: the first non-blank after it, *empty
 * when `close` comes at once; SIZE_MAX when i is not at `open`. */
static size_t enter(const char *b, size_t n, size_t i, char open, char close, bool *empty)
{
	if (i >= n || b[i] != open)
		return SIZE_MAX;
	i = skip_ws(b, n, i + 1);
	*empty = i < n && b[i] == close;
	return i;
}

/* After an item that ends at e in an object or array closed by `close`: 1 with *i at the next
 * item, 0 at the close, -EBADMSG at anything else. */
static int next_item(const char *b, size_t n, size_t e, char close, size_t *i)
{
	size_t k = skip_ws(b, n, e);

	if (k < n && b[k] == ',') {
		*i = skip_ws(b, n, k + 1);
		return 1;
	}
	return k < n && b[k] == close ? 0 : -EBADMSG;
}

/* The end of the value at i when it starts with first, else SIZE_MAX. */
static size_t value_at(const char *b, size_t n, size_t i, char first)
{
	return i < n && b[i] == first ? skip_value(b, n, i) : SIZE_MAX;
}

int merge_json_members(const char *b, size_t n, int (*fn)(void *ctx, const struct merge_member *m), void *ctx)
{
	bool empty;
	size_t i = enter(b, n, skip_ws(b, n, 0), '{', '}', &empty);

	if (i == SIZE_MAX)
		return -EBADMSG;
	if (empty)
		return 0;
	for (;;) {
		struct merge_member m;
		size_t e;
		int r;

		e = value_at(b, n, i, '"');
		if (e == SIZE_MAX)
			return -EBADMSG;
		m.key = b + i + 1;
		m.key_len = e - i - 2;
		i = skip_ws(b, n, e);
		if (i >= n || b[i] != ':')
			return -EBADMSG;
		i = skip_ws(b, n, i + 1);
		e = skip_value(b, n, i);
		if (e == SIZE_MAX || e == i)
			return -EBADMSG;
		m.off = i;
		m.len = e - i;
		r = fn(ctx, &m);
		if (r < 0)
			return r;
		r = next_item(b, n, e, '}', &i);
		if (r <= 0)
			return r;
	}
}

static bool key_is(const struct merge_member *m, const char *k)
{
	return m->key_len == strlen(k) && memcmp(m->key, k, m->key_len) == 0;
}

/* ---- the timeline --------------------------------------------------------------------- */

struct nccl_ev {
	long pid, tid;
	char comm[40];
	int rank, nranks;
	uint64_t start, end, sig, seq;
	uint64_t corr;          /* the CUPTI correlation id of its kernel, 0 none */
};

struct kernel_ev {              /* a GPU kernel that names its NCCL call */
	long pid;
	uint64_t corr, end;
};

struct thr {
	long pid, tid;
	uint64_t last_api_end;
};

struct offcpu_ev {
	long pid, tid;
	uint64_t ts, dur;
	long sf;
	char name[96];
};

struct scan {
	struct merge_source *s;
	const char *tl;
	size_t events_off, events_len, frames_off, frames_len, other_off, other_len;
	bool have_events;
	struct nccl_ev *nc;
	size_t nnc, capnc;
	struct thr *th;
	size_t nth, capth;
	struct offcpu_ev *oc;
	size_t noc, capoc;
	struct kernel_ev *kn;
	size_t nkn, capkn;
};

#define PUSH(arr, n, cap, val)                                                        \
	({                                                                            \
		int r_ = 0;                                                           \
		if ((n) == (cap)) {                                                   \
			size_t c_ = (cap) ? (cap) * 2 : 64;                           \
			void *p_ = realloc((arr), c_ * sizeof(*(arr)));               \
			if (!p_)                                                      \
				r_ = -ENOMEM;                                         \
			else {                                                        \
				(arr) = p_;                                           \
				(cap) = c_;                                           \
			}                                                             \
		}                                                                     \
		if (!r_)                                                              \
			(arr)[(n)++] = (val);                                         \
		r_;                                                                   \
	})

static int top_member(void *ctx, const struct merge_member *m)
{
	struct scan *sc = ctx;

	if (key_is(m, "traceEvents")) {
		sc->events_off = m->off;
		sc->events_len = m->len;
		sc->have_events = true;
	} else if (key_is(m, "stackFrames")) {
		sc->frames_off = m->off;
		sc->frames_len = m->len;
	} else if (key_is(m, "otherData")) {
		sc->other_off = m->off;
		sc->other_len = m->len;
	}
	return 0;
}

/* us with ns decimals -> ns; false for a value that is not a time (negative, NaN, beyond
 * int64 ns). Beyond 104 days of uptime a double no longer holds every ns: 2 ns steps. */
static bool us_to_ns(const json_t *v, uint64_t *ret)
{
	double d;

	if (!json_is_number(v))
		return false;
	d = json_number_value(v);
	if (!(d >= 0 && d < 9.0e15))
		return false;
	*ret = (uint64_t)merge_round(d * 1000.0);
	return true;
}

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
	const unsigned char *b = p;

	for (size_t i = 0; i < n; i++)
		h = (h ^ b[i]) * 0x100000001b3ULL;
	return h;
}

static struct thr *thread_of(struct scan *sc, long pid, long tid)
{
	struct thr t = { pid, tid, 0 };

	for (size_t i = sc->nth; i-- > 0;)
		if (sc->th[i].pid == pid && sc->th[i].tid == tid)
			return &sc->th[i];
	if (PUSH(sc->th, sc->nth, sc->capth, t) < 0)
		return NULL;
	return &sc->th[sc->nth - 1];
}

/* One event object: remembered by span, and what the analysis needs is picked out. */
static int scan_event(struct scan *sc, size_t off, size_t len)
{
	struct merge_source *s = sc->s;
	struct merge_span sp = { off, len, false };
	json_error_t jerr;
	json_t *e = json_loadb(sc->tl + off, len, 0, &jerr), *args;
	const char *ph, *cat, *name;
	uint64_t ts = 0, dur = 0;
	long pid, tid;
	int r = 0;

	if (!json_is_object(e)) {
		json_decref(e);
		return -EBADMSG;
	}
	ph = json_string_value(json_object_get(e, "ph"));
	cat = json_string_value(json_object_get(e, "cat"));
	name = json_string_value(json_object_get(e, "name"));
	args = json_object_get(e, "args");
	if (!ph || !json_is_integer(json_object_get(e, "pid")) || !json_is_integer(json_object_get(e, "tid")) ||
	    !us_to_ns(json_object_get(e, "ts"), &ts)) {
		json_decref(e);
		return -EBADMSG;
	}
	pid = (long)json_integer_value(json_object_get(e, "pid"));
	sp.meta = strcmp(ph, "M") == 0;
	tid = (long)json_integer_value(json_object_get(e, "tid"));
	if (PUSH(s->ev, s->nev, s->capev_, sp) < 0) {
		r = -ENOMEM;
		goto out;
	}
	if (strcmp(ph, "X") != 0 || !cat || !name)
		goto out;
	if (!us_to_ns(json_object_get(e, "dur"), &dur)) {
		r = -EBADMSG;
		goto out;
	}
	if (!strcmp(cat, "cuda_api") || !strcmp(cat, "cuda_memcpy") || !strcmp(cat, "cuda_memory") ||
	    !strcmp(cat, "nccl")) {
		struct thr *t = thread_of(sc, pid, tid);

		if (!t) {
			r = -ENOMEM;
			goto out;
		}
		if (ts + dur > t->last_api_end)
			t->last_api_end = ts + dur;
	}
	if (!strcmp(cat, "nccl") && json_is_object(args) && json_string_value(json_object_get(args, "op")) &&
	    json_is_integer(json_object_get(args, "nranks"))) {
		struct nccl_ev n = { .pid = pid, .tid = tid, .start = ts, .end = ts + dur };
		const char *comm = json_string_value(json_object_get(args, "comm"));
		const char *op = json_string_value(json_object_get(args, "op"));
		json_int_t bytes = json_integer_value(json_object_get(args, "bytes"));

		n.seq = json_integer_value(json_object_get(args, "seq")) > 0
			? (uint64_t)json_integer_value(json_object_get(args, "seq")) : 0;
		n.corr = json_integer_value(json_object_get(args, "correlation")) > 0
			? (uint64_t)json_integer_value(json_object_get(args, "correlation")) : 0;
		n.rank = (int)json_integer_value(json_object_get(args, "rank"));
		n.nranks = (int)json_integer_value(json_object_get(args, "nranks"));
		snprintf(n.comm, sizeof(n.comm), "%s", comm ? comm : "?");
		n.sig = fnv(fnv(0xcbf29ce484222325ULL, op, strlen(op) + 1), &bytes, sizeof(bytes));
		if (n.nranks > 0 && n.rank >= 0 && n.rank < n.nranks && PUSH(sc->nc, sc->nnc, sc->capnc, n) < 0)
			r = -ENOMEM;
	} else if (!strcmp(cat, "cuda_kernel") && json_is_object(args) &&
		   json_string_value(json_object_get(args, "nccl_op")) &&
		   json_integer_value(json_object_get(args, "correlation")) > 0) {
		struct kernel_ev k = { .pid = pid, .end = ts + dur,
				       .corr = (uint64_t)json_integer_value(json_object_get(args, "correlation")) };

		if (PUSH(sc->kn, sc->nkn, sc->capkn, k) < 0)
			r = -ENOMEM;
	} else if (!strcmp(cat, "offcpu")) {
		struct offcpu_ev o = { .pid = pid, .tid = tid, .ts = ts, .dur = dur, .sf = -1 };
		json_t *sf = json_object_get(e, "sf");

		if (json_is_integer(sf))
			o.sf = (long)json_integer_value(sf);
		else if (json_is_string(sf))
			o.sf = strtol(json_string_value(sf), NULL, 10);
		snprintf(o.name, sizeof(o.name), "%s", name);
		if (PUSH(sc->oc, sc->noc, sc->capoc, o) < 0)
			r = -ENOMEM;
	}
out:
	json_decref(e);
	return r;
}

static int scan_events(struct scan *sc)
{
	const char *b = sc->tl + sc->events_off;
	size_t n = sc->events_len, i;
	bool empty;

	i = enter(b, n, skip_ws(b, n, 0), '[', ']', &empty);
	if (i == SIZE_MAX)
		return -EBADMSG;
	if (empty)
		return 0;
	for (;;) {
		size_t e;
		int r;

		e = value_at(b, n, i, '{');
		if (e == SIZE_MAX)
			return -EBADMSG;
		r = scan_event(sc, sc->events_off + i, e - i);
		if (r < 0)
			return r;
		r = next_item(b, n, e, ']', &i);
		if (r <= 0)
			return r;
	}
}

/* Does the stack of frame id sf hold an NCCL function (or a frame in libnccl)? */
static bool stack_in_nccl(json_t *frames, long sf)
{
	char id[32];

	for (int depth = 0; frames && sf >= 0 && depth < FRAME_DEPTH; depth++) {
		json_t *f, *parent;
		const char *name;

		snprintf(id, sizeof(id), "%ld", sf);
		f = json_object_get(frames, id);
		if (!json_is_object(f))
			return false;
		name = json_string_value(json_object_get(f, "name"));
		if (name && strcasestr(name, "nccl"))
			return true;
		parent = json_object_get(f, "parent");
		if (json_is_string(parent))
			sf = strtol(json_string_value(parent), NULL, 10);
		else if (json_is_integer(parent))
			sf = (long)json_integer_value(parent);
		else
			return false;
	}
	return false;
}

static int cmp_coll(const void *a, const void *b)
{
	const struct merge_coll *x = a, *y = b;

	return x->start_ns < y->start_ns ? -1 : x->start_ns > y->start_ns;
}

static int cmp_kernel(const void *a, const void *b)
{
	const struct kernel_ev *x = a, *y = b;

	if (x->pid != y->pid)
		return x->pid < y->pid ? -1 : 1;
	return x->corr < y->corr ? -1 : x->corr > y->corr;
}

/* The end of the kernel the collective launched (same process, same correlation id), or 0. */
static uint64_t kernel_end(const struct scan *sc, const struct nccl_ev *a)
{
	struct kernel_ev key = { .pid = a->pid, .corr = a->corr }, *k;

	if (!a->corr || !sc->nkn)
		return 0;
	k = bsearch(&key, sc->kn, sc->nkn, sizeof(*sc->kn), cmp_kernel);
	return k ? k->end : 0;
}

/* The world communicator: the largest, then the one with most collectives. */
static int pick_world(struct scan *sc)
{
	struct merge_source *s = sc->s;
	size_t best_n = 0;
	int best_nranks = 0;
	const struct nccl_ev *best = NULL;

	for (size_t i = 0; i < sc->nnc; i++) {
		const struct nccl_ev *a = &sc->nc[i];
		size_t n = 0;

		if (a->nranks < best_nranks)
			continue;
		for (size_t j = 0; j < sc->nnc; j++)
			n += sc->nc[j].pid == a->pid && !strcmp(sc->nc[j].comm, a->comm);
		if (a->nranks > best_nranks || n > best_n) {
			best = a;
			best_n = n;
			best_nranks = a->nranks;
		}
	}
	if (!best)
		return 0;
	s->rank = best->rank;
	s->nranks = best->nranks;
	s->pid = best->pid;
	s->tid = best->tid;
	snprintf(s->comm, sizeof(s->comm), "%s", best->comm);
	s->coll = calloc(best_n, sizeof(*s->coll));
	if (!s->coll)
		return -ENOMEM;
	if (sc->nkn)
		qsort(sc->kn, sc->nkn, sizeof(*sc->kn), cmp_kernel);
	for (size_t j = 0; j < sc->nnc; j++) {
		const struct nccl_ev *a = &sc->nc[j];

		if (a->pid == best->pid && !strcmp(a->comm, best->comm))
			s->coll[s->ncoll++] = (struct merge_coll){ a->start, a->end, a->sig, a->seq,
								   kernel_end(sc, a) };
	}
	qsort(s->coll, s->ncoll, sizeof(*s->coll), cmp_coll);
	merge_coll_number(s->coll, s->ncoll);
	for (size_t i = 0; i < sc->nth; i++)
		if (sc->th[i].pid == s->pid && sc->th[i].tid == s->tid)
			s->last_api_end_ns = sc->th[i].last_api_end;
	for (size_t i = 0; i < sc->noc; i++) {
		const struct offcpu_ev *o = &sc->oc[i];
		struct merge_wait w;

		if (o->pid != s->pid || o->tid != s->tid)
			continue;
		w = (struct merge_wait){ .ts_ns = o->ts, .dur_ns = o->dur, .in_nccl = stack_in_nccl(s->frames, o->sf) };
		snprintf(w.what, sizeof(w.what), "%s", o->name);
		if (PUSH(s->waits, s->nwaits, s->capwaits_, w) < 0)
			return -ENOMEM;
	}
	return 0;
}

static char *dup_str(json_t *o, const char *key)
{
	const char *v = json_string_value(json_object_get(o, key));
	char *d;

	if (!v || !*v || strlen(v) > 253)
		return NULL;
	d = strdup(v);
	/* names and hosts go into track names and messages: printable only */
	for (char *p = d; p && *p; p++)
		if ((unsigned char)*p < 0x20 || *p == 0x7f)
			*p = '?';
	return d;
}

static int parse_summary(struct merge_source *s, const char *text, size_t len, char *msg, size_t msglen)
{
	json_error_t jerr;
	json_t *sum = json_loadb(text, len, 0, &jerr), *origin, *win, *ebpf, *findings, *f;
	const char *schema;
	size_t i;

	if (!json_is_object(sum)) {
		snprintf(msg, msglen, "%s: summary.json is not JSON: line %d: %s", s->label, jerr.line, jerr.text);
		json_decref(sum);
		return -EBADMSG;
	}
	s->summary = sum;
	schema = json_string_value(json_object_get(sum, "schema"));
	if (!schema || strncmp(schema, "aiprof.summary/", 15) != 0) {
		snprintf(msg, msglen, "%s: summary.json is not an aiprof summary (schema '%s'); give each rank's "
			 "`aiprof profile` output folder", s->label, schema ? schema : "(none)");
		return -EINVAL;
	}
	origin = json_object_get(sum, "origin");
	if (json_is_object(origin)) {
		s->pod = dup_str(origin, "pod");
		s->host = dup_str(origin, "host");
		s->session = dup_str(origin, "session");
		s->container = dup_str(origin, "container");
	}
	{
		json_t *cd = json_object_get(sum, "clock_domain");
		const char *b = json_string_value(json_object_get(cd, "boot_id"));
		json_t *tn = json_object_get(cd, "time_namespace_offset_ns");

		/* a boot id is a UUID: anything else is not one to trust as a clock's name */
		if (b && strlen(b) == 36 && strspn(b, "0123456789abcdef-") == 36)
			snprintf(s->boot_id, sizeof(s->boot_id), "%s", b);
		if (json_is_integer(tn)) {
			s->timens_ns = (int64_t)json_integer_value(tn);
			s->timens_known = true;
		}
	}
	win = json_object_get(sum, "window");
	if (!s->win_end_ns && json_is_object(win)) {
		s->win_start_ns = (uint64_t)json_integer_value(json_object_get(win, "start_monotonic_ns"));
		s->win_end_ns = (uint64_t)json_integer_value(json_object_get(win, "end_monotonic_ns"));
	}
	ebpf = json_object_get(sum, "ebpf");
	json_array_foreach(json_object_get(ebpf, "collectors"), i, f)
		if (json_is_string(f) && !strcmp(json_string_value(f), "offcpu"))
			s->offcpu_known = true;
	findings = json_object_get(sum, "findings");
	json_array_foreach(findings, i, f) {
		const char *cat = json_string_value(json_object_get(f, "category"));
		const char *b = json_string_value(json_object_get(json_object_get(f, "evidence"), "blocked_in"));

		if (cat && b && !strcmp(cat, "NcclHang"))
			snprintf(s->hang_blocked_in, sizeof(s->hang_blocked_in), "%s", b);
	}
	return 0;
}

int merge_source__parse(struct merge_source *s, const char *label, char *tl, size_t tl_len,
			const char *summary, size_t summary_len, char *msg, size_t msglen)
{
	struct scan sc = { .s = s, .tl = tl };
	json_error_t jerr;
	int r;

	memset(s, 0, sizeof(*s));
	s->tl = tl;
	s->tl_len = tl_len;
	s->rank = s->nranks = -1;
	s->label = strdup(label);
	if (!s->label)
		return -ENOMEM;
	r = merge_json_members(tl, tl_len, top_member, &sc);
	if (r < 0 || !sc.have_events) {
		snprintf(msg, msglen, "%s: timeline.json.gz is not a Chrome trace object with \"traceEvents\"%s",
			 label, r < 0 ? " (malformed JSON)" : "");
		r = -EBADMSG;
		goto out;
	}
	if (sc.other_len) {
		json_t *o = json_loadb(tl + sc.other_off, sc.other_len, 0, &jerr);

		s->win_start_ns = (uint64_t)json_integer_value(json_object_get(o, "window_start_ns"));
		s->win_end_ns = (uint64_t)json_integer_value(json_object_get(o, "window_end_ns"));
		json_decref(o);
	}
	if (sc.frames_len) {
		s->frames = json_loadb(tl + sc.frames_off, sc.frames_len, 0, &jerr);
		if (!json_is_object(s->frames)) {
			snprintf(msg, msglen, "%s: timeline.json.gz: \"stackFrames\" is not an object", label);
			r = -EBADMSG;
			goto out;
		}
	}
	r = scan_events(&sc);
	if (r == -EBADMSG)
		snprintf(msg, msglen, "%s: timeline.json.gz: event %zu is malformed (needs ph, integer pid/tid, "
			 "ts/dur in microseconds >= 0)", label, s->nev + 1);
	if (r < 0)
		goto out;
	r = parse_summary(s, summary, summary_len, msg, msglen);
	if (r < 0)
		goto out;
	r = pick_world(&sc);
out:
	if (r == -ENOMEM)
		snprintf(msg, msglen, "%s: out of memory", label);
	free(sc.nc);
	free(sc.th);
	free(sc.oc);
	free(sc.kn);
	return r;
}

void merge_source__clear(struct merge_source *s)
{
	if (!s)
		return;
	free(s->label);
	free(s->pod);
	free(s->host);
	free(s->session);
	free(s->container);
	free(s->stacks);
	free(s->tl);
	free(s->ev);
	json_decref(s->frames);
	json_decref(s->summary);
	free(s->coll);
	free(s->waits);
	memset(s, 0, sizeof(*s));
}

int merge_gunzip(const unsigned char *gz, size_t len, size_t max, char **ret, size_t *ret_len)
{
	z_stream z = { 0 };
	char *buf = NULL;
	size_t cap = 0;
	int zr, r = 0;

	if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK)
		return -ENOMEM;
	z.next_in = (unsigned char *)gz;
	z.avail_in = (uInt)(len < UINT32_MAX ? len : UINT32_MAX);
	do {
		if (z.total_out + 1 >= cap) {
			size_t c = cap ? cap * 2 : (len * 8 > (1U << 20) ? len * 8 : (1U << 20));
			char *p;

			if (c > max + 1)
				c = max + 1;
			if (c <= z.total_out + 1) {
				r = -EFBIG;
				break;
			}
			p = realloc(buf, c);
			if (!p) {
				r = -ENOMEM;
				break;
			}
			buf = p;
			cap = c;
		}
		z.next_out = (unsigned char *)buf + z.total_out;
		z.avail_out = (uInt)(cap - 1 - z.total_out);
		zr = inflate(&z, Z_NO_FLUSH);
		if (zr != Z_OK && zr != Z_STREAM_END) {
			r = zr == Z_MEM_ERROR ? -ENOMEM : -EBADMSG;
			break;
		}
		if (zr == Z_OK && z.avail_in == 0 && z.avail_out != 0) {
			r = -EBADMSG;   /* cut short */
			break;
		}
	} while (zr != Z_STREAM_END);
	if (r == 0) {
		buf[z.total_out] = 0;
		*ret = buf;
		*ret_len = z.total_out;
	} else {
		free(buf);
	}
	inflateEnd(&z);
	return r;
}
