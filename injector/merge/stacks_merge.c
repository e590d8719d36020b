/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <jansson.h>

#include "analyze/findings.h"
#include "jsonw.h"
#include "readfile.h"
#include "stacks_merge.h"

#define SCHEMA_IN "aiprof.stacks/v1"
#define SCHEMA_OUT "aiprof.stacks-merge/v1"
#define MAX_FRAMES 512
#define MAX_RANKS 65536

/* One thread of a process, as its dump has it. */
struct sm_thread {
	long tid;
	char *state, *syscall;
	double blocked_s;         /* -1 if not said */
	char **frames;            /* innermost first (kernel frames end in "_[k]") */
	size_t nframes;
	const char *collective;   /* innermost collective frame (into frames), NULL */
	const char *py_frame;     /* innermost Python frame, NULL */
};

/* One process of one dump: a rank. */
struct sm_rank {
	char *label;              /* "rank 3", or "host:pid" without a RANK */
	char *src;
	int rank, pid;
	char *host;
	struct sm_thread *th;     /* every thread of its dump */
	size_t nth;
	const struct sm_thread *t;/* the one that stands for the rank (stacks_merge__run) */
	size_t group;
};

/* what stands for a rank with no thread, and for every rank before the run */
static const struct sm_thread no_thread = { .tid = -1, .blocked_s = -1 };

struct sm_group {
	size_t *ranks;            /* indexes into m->r */
	size_t n;
	size_t first;             /* the rank whose stack stands for the group */
	bool in_collective;
};

struct stacks_merge {
	struct sm_rank *r;
	size_t nr, capr;
	struct sm_group *g;
	size_t ng;
	size_t *outliers;         /* indexes into r */
	size_t nout;
	enum { V_NONE, V_NOT_ARRIVED, V_MINORITY } verdict;
	size_t lead;              /* the group the others are compared with */
};

static bool is_kernel(const char *f)
{
	size_t n = strlen(f);

	return n > 4 && strcmp(f + n - 4, "_[k]") == 0;
}

int stacks_merge__new(struct stacks_merge **ret)
{
	*ret = calloc(1, sizeof(**ret));
	return *ret ? 0 : -ENOMEM;
}

static void thread_free(struct sm_thread *t)
{
	free(t->state);
	free(t->syscall);
	for (size_t i = 0; i < t->nframes; i++)
		free(t->frames[i]);
	free(t->frames);
}

static void rank_free(struct sm_rank *r)
{
	free(r->label);
	free(r->src);
	free(r->host);
	for (size_t i = 0; i < r->nth; i++)
		thread_free(&r->th[i]);
	free(r->th);
}

void stacks_merge__free(struct stacks_merge *m)
{
	if (!m)
		return;
	for (size_t i = 0; i < m->nr; i++)
		rank_free(&m->r[i]);
	free(m->r);
	for (size_t i = 0; i < m->ng; i++)
		free(m->g[i].ranks);
	free(m->g);
	free(m->outliers);
	free(m);
}

bool stacks_merge__is_dump(const char *path)
{
	char *text = NULL;
	size_t len = 0;
	json_t *j;
	bool yes;

	if (readfile(path, 64 << 20, READFILE_REGULAR, &text, &len) < 0)
		return false;
	j = json_loadb(text, len, 0, NULL);
	free(text);
	yes = j && json_is_object(j) &&
	      json_is_string(json_object_get(j, "schema")) &&
	      strcmp(json_string_value(json_object_get(j, "schema")), SCHEMA_IN) == 0;
	json_decref(j);
	return yes;
}

static char *dup_str(json_t *v)
{
	return json_is_string(v) ? strdup(json_string_value(v)) : NULL;
}

#define MAX_THREADS 4096

/* One thread of a dump into t: 0, -EINVAL (msg says why), -ENOMEM. */
static int add_thread(struct sm_thread *t, json_t *j, const char *src, int pid, char *msg,
		      size_t msglen)
{
	json_t *frames = json_object_get(j, "frames"), *f, *b = json_object_get(j, "blocked_s");
	json_t *tid = json_object_get(j, "tid");
	size_t i;

	*t = (struct sm_thread){ .blocked_s = -1, .tid = json_is_integer(tid) ?
				 (long)json_integer_value(tid) : -1 };
	if (!json_is_object(j) || (frames && !json_is_array(frames))) {
		snprintf(msg, msglen, "%s: pid %d: a thread that is not an object with frames", src,
			 pid);
		return -EINVAL;
	}
	if (json_array_size(frames) > MAX_FRAMES) {
		snprintf(msg, msglen, "%s: pid %d: more than %d frames", src, pid, MAX_FRAMES);
		return -EINVAL;
	}
	t->state = dup_str(json_object_get(j, "state"));
	t->syscall = dup_str(json_object_get(j, "syscall"));
	if (json_is_number(b))
		t->blocked_s = json_number_value(b);
	if (json_array_size(frames)) {
		t->frames = calloc(json_array_size(frames), sizeof(*t->frames));
		if (!t->frames)
			return -ENOMEM;
	}
	json_array_foreach(frames, i, f) {
		json_t *name = json_object_get(f, "name"), *kind = json_object_get(f, "kind");
		const char *k = json_string_value(kind);
		char buf[2100];

		if (!json_is_string(name)) {
			snprintf(msg, msglen, "%s: pid %d: a frame without a name", src, pid);
			return -EINVAL;
		}
		/* kernel frames as the collectors name them, so that one predicate fits both */
		snprintf(buf, sizeof(buf), "%.2048s%s", json_string_value(name),
			 k && strcmp(k, "kernel") == 0 ? "_[k]" : "");
		t->frames[t->nframes] = strdup(buf);
		if (!t->frames[t->nframes])
			return -ENOMEM;
		t->nframes++;
	}
	for (i = 0; i < t->nframes; i++) {
		if (!t->collective && findings_is_collective_frame(t->frames[i]))
			t->collective = t->frames[i];
		if (!t->py_frame && strstr(t->frames[i], ".py:"))
			t->py_frame = t->frames[i];
	}
	return 0;
}

static int add_process(struct stacks_merge *m, const char *src, const char *host, json_t *p,
		       int rank_hint, char *msg, size_t msglen)
{
	json_t *pid = json_object_get(p, "pid"), *rank = json_object_get(p, "rank");
	json_t *threads = json_object_get(p, "threads"), *t;
	struct sm_rank r = { .rank = -1, .t = &no_thread };
	char label[300];
	size_t i;
	int err = -EINVAL;

	if (!json_is_integer(pid) || !json_is_array(threads) || (rank && !json_is_null(rank) &&
	    !json_is_integer(rank))) {
		snprintf(msg, msglen, "%s: a process without a pid, threads or a numeric rank", src);
		return -EINVAL;
	}
	if (m->nr >= MAX_RANKS || json_array_size(threads) > MAX_THREADS) {
		snprintf(msg, msglen, "%s: more than %d processes or %d threads", src, MAX_RANKS,
			 MAX_THREADS);
		return -EINVAL;
	}
	r.pid = (int)json_integer_value(pid);
	if (json_is_integer(rank) && json_integer_value(rank) >= 0 &&
	    json_integer_value(rank) < (1 << 24))
		r.rank = (int)json_integer_value(rank);
	else if (rank_hint >= 0 && rank_hint < (1 << 24))
		r.rank = rank_hint;
	if (r.rank >= 0)
		snprintf(label, sizeof(label), "rank %d", r.rank);
	else
		snprintf(label, sizeof(label), "%.200s:%d", host, r.pid);
	r.label = strdup(label);
	r.src = strdup(src);
	r.host = strdup(host);
	if (json_array_size(threads)) {
		r.th = calloc(json_array_size(threads), sizeof(*r.th));
		if (!r.th)
			goto nomem;
	}
	json_array_foreach(threads, i, t) {
		err = add_thread(&r.th[r.nth], t, src, r.pid, msg, msglen);
		r.nth++;
		if (err == -ENOMEM)
			goto nomem;
		if (err < 0)
			goto fail;
	}
	if (!r.label || !r.src || !r.host)
		goto nomem;
	if (m->nr == m->capr) {
		size_t ncap = m->capr ? m->capr * 2 : 16;
		struct sm_rank *nv = reallocarray(m->r, ncap, sizeof(*nv));

		if (!nv)
			goto nomem;
		m->r = nv;
		m->capr = ncap;
	}
	m->r[m->nr++] = r;
	return 0;
nomem:
	rank_free(&r);
	snprintf(msg, msglen, "out of memory");
	return -ENOMEM;
fail:
	rank_free(&r);
	return -EINVAL;
}

int stacks_merge__add(struct stacks_merge *m, const char *src, const char *text, size_t len,
		      char *msg, size_t msglen)
{
	return stacks_merge__add_ranked(m, src, text, len, -1, msg, msglen);
}

int stacks_merge__add_ranked(struct stacks_merge *m, const char *src, const char *text,
			     size_t len, int rank_hint, char *msg, size_t msglen)
{
	json_error_t err;
	json_t *j = json_loadb(text, len, 0, &err), *procs, *p, *schema;
	const char *host;
	size_t i, nranks = 0;
	int r = 0;

	if (!j || !json_is_object(j)) {
		snprintf(msg, msglen, "%s: not a JSON object (%s)", src, j ? "" : err.text);
		json_decref(j);
		return -EINVAL;
	}
	schema = json_object_get(j, "schema");
	procs = json_object_get(j, "processes");
	host = json_string_value(json_object_get(j, "host"));
	if (!json_is_string(schema) || strcmp(json_string_value(schema), SCHEMA_IN) != 0 ||
	    !json_is_array(procs)) {
		snprintf(msg, msglen, "%s: not an 'aiprof stacks --format json' dump (%s)", src,
			 SCHEMA_IN);
		json_decref(j);
		return -EINVAL;
	}
	json_array_foreach(procs, i, p) {
		if (!json_is_object(p)) {
			snprintf(msg, msglen, "%s: a process that is not an object", src);
			json_decref(j);
			return -EINVAL;
		}
		nranks += !json_object_get(p, "parent");
	}
	json_array_foreach(procs, i, p) {
		/* a process a rank started (a DataLoader worker) is not a rank */
		if (json_object_get(p, "parent"))
			continue;
		r = add_process(m, src, host ? host : "?", p, nranks == 1 ? rank_hint : -1, msg,
				msglen);
		if (r < 0)
			break;
	}
	json_decref(j);
	return r;
}

/* Two ranks are at the same place when their stacks, kernel frames aside, are equal. */
static bool same_place(const struct sm_thread *a, const struct sm_thread *b)
{
	size_t i = 0, k = 0;

	for (;;) {
		while (i < a->nframes && is_kernel(a->frames[i]))
			i++;
		while (k < b->nframes && is_kernel(b->frames[k]))
			k++;
		if (i == a->nframes || k == b->nframes)
			return i == a->nframes && k == b->nframes;
		if (strcmp(a->frames[i], b->frames[k]) != 0)
			return false;
		i++;
		k++;
	}
}

static int rank_order(const void *x, const void *y, void *ctx)
{
	const struct sm_rank *r = ctx;
	const struct sm_rank *a = &r[*(const size_t *)x], *b = &r[*(const size_t *)y];

	if (a->rank != b->rank)
		return a->rank < b->rank ? -1 : 1;
	return strcmp(a->label, b->label);
}

/* Frames two stacks share from their outermost end, kernel frames aside. */
static size_t common_roots(const struct sm_thread *a, const struct sm_thread *b)
{
	size_t i = a->nframes, k = b->nframes, n = 0;

	while (i && k && !strcmp(a->frames[i - 1], b->frames[k - 1])) {
		n += !is_kernel(a->frames[i - 1]);
		i--;
		k--;
	}
	return n;
}

/*
 * The thread that stands for each rank: one waiting in a collective (the one with Python
 * frames first: the caller, not the library's worker); for a rank with none, the thread
 * whose stack shares the most outer frames with a collective thread of another rank (where
 * that rank's training thread is instead), else its main thread.
 */
static void choose_threads(struct stacks_merge *m)
{
	const struct sm_thread *ref = NULL;

	for (size_t i = 0; i < m->nr; i++) {
		const struct sm_thread *pick = NULL;

		for (size_t k = 0; k < m->r[i].nth; k++) {
			const struct sm_thread *t = &m->r[i].th[k];

			if (t->collective && (!pick || (t->py_frame && !pick->py_frame)))
				pick = t;
		}
		m->r[i].t = pick ? pick : &no_thread;
		if (pick && (!ref || (pick->py_frame && !ref->py_frame)))
			ref = pick;
	}
	for (size_t i = 0; i < m->nr; i++) {
		const struct sm_thread *pick = NULL;
		size_t best = 0;

		if (m->r[i].t->collective)
			continue;
		for (size_t k = 0; k < m->r[i].nth; k++) {
			const struct sm_thread *t = &m->r[i].th[k];
			size_t c = ref ? common_roots(t, ref) : 0;

			if (t->tid == m->r[i].pid && !pick)
				pick = t;
			if (c > best) {
				best = c;
				pick = t;
			}
		}
		if (!pick && m->r[i].nth)
			pick = &m->r[i].th[0];
		m->r[i].t = pick ? pick : &no_thread;
	}
}

int stacks_merge__run(struct stacks_merge *m)
{
	size_t ncoll = 0, best = 0;

	choose_threads(m);

	m->g = calloc(m->nr ? m->nr : 1, sizeof(*m->g));
	m->outliers = calloc(m->nr ? m->nr : 1, sizeof(*m->outliers));
	if (!m->g || !m->outliers)
		return -ENOMEM;
	for (size_t i = 0; i < m->nr; i++) {
		size_t g;

		for (g = 0; g < m->ng; g++)
			if (same_place(m->r[m->g[g].first].t, m->r[i].t))
				break;
		if (g == m->ng) {
			m->g[g] = (struct sm_group){ .first = i,
						     .in_collective = m->r[i].t->collective != NULL };
			m->g[g].ranks = calloc(m->nr, sizeof(size_t));
			if (!m->g[g].ranks)
				return -ENOMEM;
			m->ng++;
		}
		m->g[g].ranks[m->g[g].n++] = i;
		m->r[i].group = g;
	}
	for (size_t g = 0; g < m->ng; g++) {
		qsort_r(m->g[g].ranks, m->g[g].n, sizeof(size_t), rank_order, m->r);
		m->g[g].first = m->g[g].ranks[0];
		ncoll += m->g[g].in_collective;
		if (m->g[g].n > m->g[best].n)
			best = g;
	}
	m->verdict = V_NONE;
	if (ncoll && ncoll < m->ng) {
		/* some wait in a collective, the others are elsewhere: they never arrived */
		m->verdict = V_NOT_ARRIVED;
		for (size_t g = 0; g < m->ng; g++)
			if (m->g[g].in_collective && (!m->g[m->lead].in_collective ||
						      m->g[g].n > m->g[m->lead].n))
				m->lead = g;
		for (size_t i = 0; i < m->nr; i++)
			if (!m->r[i].t->collective)
				m->outliers[m->nout++] = i;
	} else if (m->ng > 1 && 2 * m->g[best].n > m->nr) {
		m->verdict = V_MINORITY;
		m->lead = best;
		for (size_t i = 0; i < m->nr; i++)
			if (m->r[i].group != best)
				m->outliers[m->nout++] = i;
	}
	if (m->nout)
		qsort_r(m->outliers, m->nout, sizeof(size_t), rank_order, m->r);
	return 0;
}

size_t stacks_merge__outliers(const struct stacks_merge *m)
{
	return m->nout;
}

/* "rank 0, rank 2" of the ranks at idx[0..n) */
static void labels(const struct stacks_merge *m, const size_t *idx, size_t n, char *buf,
		   size_t len)
{
	size_t used = 0;

	buf[0] = 0;
	for (size_t i = 0; i < n && used + 1 < len; i++) {
		int k = snprintf(buf + used, len - used, "%s%s", i ? ", " : "", m->r[idx[i]].label);

		if (k < 0)
			break;
		used += (size_t)k < len - used ? (size_t)k : len - used - 1;
	}
}

static void finding_summary(const struct stacks_merge *m, char *buf, size_t len)
{
	const struct sm_thread *lead = m->r[m->g[m->lead].first].t;
	char who[1024], where_[1024];

	labels(m, m->outliers, m->nout, who, sizeof(who));
	labels(m, m->g[m->lead].ranks, m->g[m->lead].n, where_, sizeof(where_));
	if (m->verdict == V_NOT_ARRIVED)
		snprintf(buf, len, "%s never arrived at the collective %s wait%s in: %s%s%s%s.",
			 who, where_, m->g[m->lead].n == 1 ? "s" : "", lead->collective,
			 lead->py_frame ? " (called from " : "", lead->py_frame ? lead->py_frame : "",
			 lead->py_frame ? ")" : "");
	else
		snprintf(buf, len, "%s %s not where the other ranks are (%s: %s).", who,
			 m->nout == 1 ? "is" : "are", where_,
			 lead->py_frame ? lead->py_frame : lead->nframes ? lead->frames[0] : "?");
}

static void write_frames(struct jsonw *w, const struct sm_thread *r)
{
	jsonw_arr_open(w);
	for (size_t i = 0; i < r->nframes; i++)
		jsonw_str(w, r->frames[i]);
	jsonw_arr_close(w);
}

int stacks_merge__write_json(const struct stacks_merge *m, FILE *f)
{
	struct jsonw *w = jsonw__new(jsonw_sink_file, f);
	char buf[4096];

	if (!w)
		return -ENOMEM;
	jsonw_obj_open(w);
	jsonw_kv_str(w, "schema", SCHEMA_OUT);
	jsonw_key(w, "ranks");
	jsonw_arr_open(w);
	for (size_t i = 0; i < m->nr; i++) {
		const struct sm_rank *r = &m->r[i];

		jsonw_obj_open(w);
		jsonw_kv_str(w, "label", r->label);
		if (r->rank >= 0)
			jsonw_kv_int(w, "rank", r->rank);
		jsonw_kv_str(w, "host", r->host);
		jsonw_kv_int(w, "pid", r->pid);
		jsonw_kv_str(w, "source", r->src);
		jsonw_kv_uint(w, "group", r->group);
		if (r->t->state)
			jsonw_kv_str(w, "state", r->t->state);
		if (r->t->syscall)
			jsonw_kv_str(w, "syscall", r->t->syscall);
		if (r->t->blocked_s >= 0)
			jsonw_kv_double(w, "blocked_s", r->t->blocked_s);
		jsonw_kv_bool(w, "in_collective", r->t->collective != NULL);
		jsonw_obj_close(w);
	}
	jsonw_arr_close(w);
	jsonw_key(w, "groups");
	jsonw_arr_open(w);
	for (size_t g = 0; g < m->ng; g++) {
		const struct sm_thread *r = m->r[m->g[g].first].t;

		jsonw_obj_open(w);
		jsonw_key(w, "ranks");
		jsonw_arr_open(w);
		for (size_t i = 0; i < m->g[g].n; i++)
			jsonw_str(w, m->r[m->g[g].ranks[i]].label);
		jsonw_arr_close(w);
		jsonw_kv_bool(w, "in_collective", m->g[g].in_collective);
		if (r->collective)
			jsonw_kv_str(w, "collective_frame", r->collective);
		if (r->py_frame)
			jsonw_kv_str(w, "python_frame", r->py_frame);
		jsonw_key(w, "stack");
		write_frames(w, r);
		jsonw_obj_close(w);
	}
	jsonw_arr_close(w);
	jsonw_key(w, "findings");
	jsonw_arr_open(w);
	if (m->nout) {
		jsonw_obj_open(w);
		jsonw_kv_str(w, "category", m->verdict == V_NOT_ARRIVED ? "NcclHang" : "Straggler");
		jsonw_kv_str(w, "severity", m->verdict == V_NOT_ARRIVED ? "critical" : "warning");
		finding_summary(m, buf, sizeof(buf));
		jsonw_kv_str(w, "summary", buf);
		jsonw_key(w, "not_arrived");
		jsonw_arr_open(w);
		for (size_t i = 0; i < m->nout; i++)
			jsonw_str(w, m->r[m->outliers[i]].label);
		jsonw_arr_close(w);
		jsonw_key(w, "evidence");
		jsonw_obj_open(w);
		for (size_t i = 0; i < m->nout; i++) {
			jsonw_key(w, m->r[m->outliers[i]].label);
			write_frames(w, m->r[m->outliers[i]].t);
		}
		jsonw_obj_close(w);
		jsonw_obj_close(w);
	}
	jsonw_arr_close(w);
	jsonw_obj_close(w);
	jsonw_newline(w);
	return jsonw__finish(w);
}

static json_t *frames_json(const struct sm_thread *r)
{
	json_t *a = json_array();

	for (size_t i = 0; a && i < r->nframes; i++)
		json_array_append_new(a, json_string(r->frames[i]));
	return a;
}

json_t *stacks_merge__finding(const struct stacks_merge *m)
{
	json_t *f, *names, *ev;
	char buf[4096];

	if (!m->nout)
		return NULL;
	finding_summary(m, buf, sizeof(buf));
	names = json_array();
	ev = json_object();
	for (size_t i = 0; names && ev && i < m->nout; i++) {
		json_array_append_new(names, json_string(m->r[m->outliers[i]].label));
		json_object_set_new(ev, m->r[m->outliers[i]].label, frames_json(m->r[m->outliers[i]].t));
	}
	f = json_pack("{s:s,s:s,s:s,s:o*,s:o*}", "category",
		      m->verdict == V_NOT_ARRIVED ? "NcclHang" : "Straggler", "severity",
		      m->verdict == V_NOT_ARRIVED ? "critical" : "warning", "summary", buf,
		      "not_arrived", names, "evidence", ev);
	return f;
}

/* The first frames of r that are not the kernel's, innermost first. */
static void print_stack(FILE *f, const struct sm_thread *r, size_t max)
{
	size_t shown = 0;

	for (size_t i = 0; i < r->nframes && shown < max; i++)
		if (!is_kernel(r->frames[i])) {
			fprintf(f, "      %s\n", r->frames[i]);
			shown++;
		}
}

void stacks_merge__write_text(const struct stacks_merge *m, FILE *f)
{
	char buf[4096];

	fprintf(f, "%zu rank%s in %zu place%s:\n", m->nr, m->nr == 1 ? "" : "s", m->ng,
		m->ng == 1 ? "" : "s");
	for (size_t g = 0; g < m->ng; g++) {
		labels(m, m->g[g].ranks, m->g[g].n, buf, sizeof(buf));
		fprintf(f, "\n  %s%s:\n", buf, m->g[g].in_collective ? " (in a collective)" : "");
		print_stack(f, m->r[m->g[g].first].t, 16);
	}
	if (m->nout) {
		finding_summary(m, buf, sizeof(buf));
		fprintf(f, "\n%s: %s\n", m->verdict == V_NOT_ARRIVED ? "NcclHang" : "Straggler", buf);
	} else {
		fprintf(f, "\n%s\n", m->ng == 1 ? "Every rank is at the same place." :
			"No place holds most of the ranks: none is named.");
	}
}
