/* SPDX-License-Identifier: MIT */
/* Call stacks at kernel launches -> folded stacks; see launch_stacks.h. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "u64map.h"
#include "model/names.h"
#include "model/profile.h"
#include "target/python.h"
#include "collect/ebpf_stacks.h"
#include "collect/ebpf_symbols.h"
#include "analyze/analysis.h"
#include "analyze/diagnosis.h"
#include "launch_stacks.h"
#include "membuf.h"

#define MAX_NATIVE 64     /* native frames per stack (the library sends at most 64) */

static bool by_gpu_time(const struct profile *p)
{
	const struct analysis *a = p->diag ? p->diag->analysis : NULL;

	return a && a->gpu_timing;
}

/* one CUPTI kernel record, found by the correlation id of its launch */
struct kern {
	uint64_t corr, ns;
	uint32_t name_id;
	bool used;
};

static int kern_cmp(const void *x, const void *y)
{
	const struct kern *a = x, *b = y;

	return a->corr < b->corr ? -1 : a->corr > b->corr;
}

/* *hint: where the last one was; launches come mostly in correlation order */
static struct kern *kern_find(struct kern *k, size_t n, uint64_t corr, size_t *hint)
{
	struct kern key = { .corr = corr }, *hit;

	if (!corr)
		return NULL;
	for (size_t i = *hint; i < n && i < *hint + 2; i++)
		if (k[i].corr == corr) {
			*hint = i + 1;
			return &k[i];
		}
	hit = bsearch(&key, k, n, sizeof(*k), kern_cmp);
	if (hit)
		*hint = (size_t)(hit - k) + 1;
	return hit;
}

/* The target's kernel records sorted by correlation (uncorrelated ones at the front). */
static int kerns_of(const struct target *t, struct kern **ret, size_t *ret_n)
{
	struct kern *k = malloc((t->store.n + 1) * sizeof(*k));
	size_t n = 0;

	if (!k)
		return -ENOMEM;
	for (size_t i = 0; i < t->store.n; i++) {
		const struct aiprof_event *e = &t->store.v[i];

		if (e->type == AIPROF_EV_GPU_KERNEL)
			k[n++] = (struct kern){ e->u.gpu.correlation, e->dur, e->u.gpu.name_id, false };
	}
	qsort(k, n, sizeof(*k), kern_cmp);
	*ret = k;
	*ret_n = n;
	return 0;
}

void launch_stacks_count(const struct profile *p, struct launch_stacks_stats *st)
{
	memset(st, 0, sizeof(*st));
	st->by_gpu_time = by_gpu_time(p);
	for (size_t ti = 0; ti < p->ntargets; ti++) {
		const struct target *t = &p->targets[ti];

		for (size_t i = 0; i < t->store.n; i++) {
			const struct aiprof_event *e = &t->store.v[i];

			if (e->type == AIPROF_EV_CUDA_LAUNCH) {
				const char *text = e->u.launch.stack_id ?
					event_store__string(&t->store, e->u.launch.stack_id) : NULL;

				st->launches++;
				st->launches_with_stack += text != NULL;
				st->launches_stack_cfi += text && text[0] == '@';
			} else if (e->type == AIPROF_EV_GPU_KERNEL) {
				st->kernels++;
				if (st->by_gpu_time)
					st->total += e->dur;
			}
		}
	}
	if (!st->by_gpu_time)
		st->total = st->launches;
}

struct tstacks {
	struct stack_store *ss;
	struct proc_symbolizer *ps;   /* NULL: the process is gone, frames stay unnamed */
	struct py_proc *py;           /* its CPython, opened on the first stack with Python */
	bool py_tried;
	/* frame ids (root first) of each stack string id, filled on first use */
	uint32_t *off, *len;          /* by string id; len UINT32_MAX = not resolved yet */
	size_t nids;
	uint32_t *pool;
	size_t npool, cappool;
};

static bool is_thread_root(const char *name)
{
	static const char *const roots[] = { "start_thread", "clone", "clone3", "__clone",
					     "__clone3", "_start", "__libc_start_main",
					     "__libc_start_call_main" };

	for (size_t i = 0; i < sizeof(roots) / sizeof(roots[0]); i++)
		if (strcmp(name, roots[i]) == 0)
			return true;
	return false;
}

/*
 * Native frames (innermost first, interpreter-loop frames marked) and Python frames
 * (innermost first, segment ends marked), as the eBPF collectors read theirs (ebpf.c),
 * merged by stack_merge() into frame ids, root first.
 */
static int resolve(struct tstacks *ts, const struct target *t, const char *text, uint32_t *out,
		   size_t *ret_n)
{
	uint64_t pc[MAX_NATIVE], pyf[EBPF_PY_MAX][2];
	uint32_t native[MAX_NATIVE], py[EBPF_PY_MAX];
	bool eval[MAX_NATIVE], seg_end[EBPF_PY_MAX];
	size_t n, npy, nn = 0, np = 0;
	struct stack_merge_in in;

	launch_stack_parse(text, pc, MAX_NATIVE, &n, pyf, EBPF_PY_MAX, &npy);
	for (size_t i = 0; i < n; i++) {
		char name[512];
		int flags = 0, id;

		/* a return address: the call is the instruction before it */
		if (ts->ps)
			flags = proc_symbolizer__lookup(ts->ps, pc[i] - 1, name, sizeof(name));
		if (flags < 0)
			return flags;
		if (!flags) {
			/* not in an executable mapping: a broken chain, nothing above is real */
			if (ts->ps)
				break;
			snprintf(name, sizeof(name), "0x%llx", (unsigned long long)pc[i]);
		}
		id = stack_store__frame(ts->ss, name);
		if (id < 0)
			return id;
		native[nn] = (uint32_t)id;
		eval[nn] = (flags & USYM_NAMED) && strncmp(name, "_PyEval_EvalFrame", 17) == 0;
		nn++;
		if ((flags & USYM_NAMED) && is_thread_root(name))
			break;
	}
	if (npy && !ts->py_tried) {
		char why[256];

		ts->py_tried = true;
		if (py_proc__new(t->pid, why, sizeof(why), &ts->py) < 0)
			ts->py = NULL;
	}
	for (size_t i = 0; ts->py && i < npy; i++) {
		const struct py_version_offsets *o = py_proc__offsets(ts->py);
		uint64_t fl = pyf[i][1];
		uint32_t owner = (uint32_t)(fl >> EBPF_PY_OWNER_SHIFT) & 0xff;
		char name[1200];
		int id;

		if (o->owner_shim_min != PY_OWNER_NO_SHIM && owner >= o->owner_shim_min) {
			if (np)
				seg_end[np - 1] = true;
			continue;
		}
		if (py_proc__frame(ts->py, pyf[i][0], fl & EBPF_PY_INSTR_MASK, name, sizeof(name)) < 0)
			continue;   /* not a code object */
		id = stack_store__frame(ts->ss, name);
		if (id < 0)
			return id;
		py[np] = (uint32_t)id;
		seg_end[np] = (fl >> EBPF_PY_ENTRY_SHIFT) & 1;
		np++;
	}
	in = (struct stack_merge_in){ .native = native, .native_eval = eval, .nn = nn,
				      .py = py, .py_seg_end = seg_end, .np = np,
				      .root = UINT32_MAX };
	*ret_n = stack_merge(&in, out, STACK_MAX_FRAMES);
	return 0;
}

/* The frames of stack string `sid` as frame ids, root first (cached per id). */
static int stack_frames(struct tstacks *ts, const struct target *t, uint32_t sid,
			const uint32_t **ret, size_t *ret_n)
{
	uint32_t ids[STACK_MAX_FRAMES];
	size_t k = 0;
	int r;

	if (sid >= ts->nids) {
		size_t nn = ts->nids ? ts->nids : 256;
		uint32_t *no, *nl;

		while (nn <= sid)
			nn *= 2;
		no = realloc(ts->off, nn * sizeof(*no));
		if (!no)
			return -ENOMEM;
		ts->off = no;
		nl = realloc(ts->len, nn * sizeof(*nl));
		if (!nl)
			return -ENOMEM;
		ts->len = nl;
		for (size_t i = ts->nids; i < nn; i++)
			ts->len[i] = UINT32_MAX;
		ts->nids = nn;
	}
	if (ts->len[sid] != UINT32_MAX)
		goto done;
	r = resolve(ts, t, event_store__string(&t->store, sid), ids, &k);
	if (r < 0)
		return r;
	if (ts->npool + k > ts->cappool) {
		size_t nc = ts->cappool ? ts->cappool * 2 : 1024;
		uint32_t *np;

		while (nc < ts->npool + k)
			nc *= 2;
		np = realloc(ts->pool, nc * sizeof(*np));
		if (!np)
			return -ENOMEM;
		ts->pool = np;
		ts->cappool = nc;
	}
	ts->off[sid] = (uint32_t)ts->npool;
	ts->len[sid] = (uint32_t)k;
	if (k)          /* a stack string with no frame (a target's garbage) adds none */
		memcpy(ts->pool + ts->npool, ids, k * sizeof(*ids));
	ts->npool += k;
done:
	*ret = ts->pool + ts->off[sid];
	*ret_n = ts->len[sid];
	return 0;
}

/* root, middle frames, api (UINT32_MAX: none), kernel -> one weighted stack */
static int add_stack(struct stack_store *ss, uint32_t root, const uint32_t *mid, size_t nmid,
		     uint32_t api, uint32_t kernel, uint64_t w)
{
	uint32_t fr[STACK_MAX_FRAMES + 3];
	size_t n = 0;
	int id;

	fr[n++] = root;
	for (size_t i = 0; i < nmid && i < STACK_MAX_FRAMES; i++)
		fr[n++] = mid[i];
	if (api != UINT32_MAX)
		fr[n++] = api;
	fr[n++] = kernel;
	id = stack_store__stack(ss, fr, n);
	if (id < 0)
		return id;
	return stack_store__add(ss, (uint32_t)id, STACK_CPU, w);
}

/*
 * Launches are summed per (stack string, API, kernel) first, and only each distinct one
 * is resolved and interned: a window holds millions of launches from a few call sites.
 */
struct agg {
	struct u64map ix;             /* key -> index into v */
	struct agg_entry {
		uint32_t sid;         /* stack string id, 0 = no call stack */
		uint32_t api;         /* frame id, UINT32_MAX = none */
		uint32_t kernel;      /* frame id */
		uint64_t w;
	} *v;
	size_t n, cap;
	struct u64map kframe;         /* kernel name key -> frame id */
	uint32_t apiframe[AIPROF_API__MAX];
};

static int agg_add(struct agg *g, uint32_t sid, uint32_t api, uint32_t kernel, uint64_t w)
{
	uint64_t key = u64_hash2((uint64_t)sid << 32 | api, kernel), ix;

	/* the hash is the key: entries are checked, a collision gets its own entry */
	while (u64map_get(&g->ix, key, &ix)) {
		struct agg_entry *x = &g->v[ix];

		if (x->sid == sid && x->api == api && x->kernel == kernel) {
			x->w += w;
			return 0;
		}
		key++;
	}
	if (g->n == g->cap) {
		size_t nc = g->cap ? g->cap * 2 : 64;
		struct agg_entry *nv = realloc(g->v, nc * sizeof(*nv));

		if (!nv)
			return -ENOMEM;
		g->v = nv;
		g->cap = nc;
	}
	if (u64map_put(&g->ix, key, g->n) < 0)
		return -ENOMEM;
	g->v[g->n++] = (struct agg_entry){ sid, api, kernel, w };
	return 0;
}

/* The frame id of a kernel name, memoised under key (a string id or a host stub). */
static int kernel_frame(struct stack_store *ss, struct agg *g, uint64_t key, const char *name,
			uint32_t *ret)
{
	uint64_t v;
	int id;

	if (u64map_get(&g->kframe, key, &v)) {
		*ret = (uint32_t)v;
		return 0;
	}
	id = stack_store__frame(ss, name && name[0] ? name : "[unknown kernel]");
	if (id < 0)
		return id;
	if (u64map_put(&g->kframe, key, (uint64_t)id) < 0)
		return -ENOMEM;
	*ret = (uint32_t)id;
	return 0;
}

static int api_frame(struct stack_store *ss, struct agg *g, uint16_t api, uint32_t *ret)
{
	int id;

	if (api >= AIPROF_API__MAX)
		api = AIPROF_API_NONE;
	if (g->apiframe[api] == UINT32_MAX) {
		id = stack_store__frame(ss, api_name(api));
		if (id < 0)
			return id;
		g->apiframe[api] = (uint32_t)id;
	}
	*ret = g->apiframe[api];
	return 0;
}

#define KEY_STRING (1ull << 63)   /* kernel name keys: string ids, else host stubs */

static int one_target(const struct target *t, struct symbolizer *z, struct stack_store *ss,
		      bool by_time, struct launch_stacks_stats *st)
{
	struct tstacks ts = { .ss = ss };
	struct agg g = { 0 };
	struct kern *k = NULL;
	size_t nk = 0, hint = 0;
	uint32_t root, none, notrec;
	char rootname[64];
	int r;

	for (size_t i = 0; i < AIPROF_API__MAX; i++)
		g.apiframe[i] = UINT32_MAX;
	/* the code held while it lived (a process that exited in the window is named too);
	 * else its maps as they are now */
	ts.ps = t->psyms;
	if (!ts.ps && z && symbolizer__proc(z, t->pid, &ts.ps) < 0)
		ts.ps = NULL;
	snprintf(rootname, sizeof(rootname), "%s-%d", t->comm, (int)t->pid);
	r = stack_store__frame(ss, rootname);
	if (r < 0)
		return r;
	root = (uint32_t)r;
	r = stack_store__frame(ss, "[no call stack]");
	if (r < 0)
		return r;
	none = (uint32_t)r;
	r = stack_store__frame(ss, "[launch not recorded]");
	if (r < 0)
		return r;
	notrec = (uint32_t)r;
	if (by_time) {
		r = kerns_of(t, &k, &nk);
		if (r < 0)
			return r;
	}
	for (size_t i = 0; i < t->store.n && r >= 0; i++) {
		const struct aiprof_event *e = &t->store.v[i];
		uint32_t sid = 0, api, kf;
		uint64_t w = 1;

		if (e->type != AIPROF_EV_CUDA_LAUNCH)
			continue;
		st->launches++;
		if (e->u.launch.stack_id && event_store__string(&t->store, e->u.launch.stack_id)) {
			sid = e->u.launch.stack_id;
			st->launches_with_stack++;
		}
		if (by_time) {
			struct kern *hit = kern_find(k, nk, e->u.launch.correlation, &hint);

			if (!hit || hit->used)
				continue;   /* its kernel did not run in the window */
			hit->used = true;
			w = hit->ns;
			/* named as summary.json names it */
			r = kernel_frame(ss, &g, KEY_STRING | hit->name_id,
					 event_store__string(&t->store, hit->name_id), &kf);
		} else if (e->u.launch.name_id) {
			r = kernel_frame(ss, &g, KEY_STRING | e->u.launch.name_id,
					 launch_kernel_name(t, e), &kf);
		} else {
			r = kernel_frame(ss, &g, e->u.launch.func & ~KEY_STRING, launch_kernel_name(t, e),
					 &kf);
		}
		if (r >= 0)
			r = api_frame(ss, &g, e->api, &api);
		if (r >= 0 && w)
			r = agg_add(&g, sid, api, kf, w);
		st->total += w;
	}
	for (size_t i = 0; i < g.n && r >= 0; i++) {
		const struct agg_entry *x = &g.v[i];
		const uint32_t *mid = &none;
		size_t nmid = 1;

		if (x->sid) {
			r = stack_frames(&ts, t, x->sid, &mid, &nmid);
			if (r < 0)
				break;
			if (!nmid) {
				mid = &none;
				nmid = 1;
			}
		}
		r = add_stack(ss, root, mid, nmid, x->api, x->kernel, x->w);
	}
	for (size_t i = 0; i < nk && r >= 0; i++) {
		uint32_t kf;

		st->kernels++;
		if (k[i].used)
			continue;
		st->kernels_without_launch++;
		st->total += k[i].ns;
		if (!k[i].ns)
			continue;
		r = kernel_frame(ss, &g, KEY_STRING | k[i].name_id,
				 event_store__string(&t->store, k[i].name_id), &kf);
		if (r >= 0)
			r = add_stack(ss, root, &notrec, 1, UINT32_MAX, kf, k[i].ns);
	}
	free(k);
	u64map_clear(&g.ix);
	u64map_clear(&g.kframe);
	free(g.v);
	py_proc__free(ts.py);
	free(ts.off);
	free(ts.len);
	free(ts.pool);
	return r < 0 ? r : 0;
}

int launch_stacks_folded(const struct profile *p, struct membuf *out,
			 struct launch_stacks_stats *st)
{
	struct symbolizer *z = NULL;
	struct stack_store ss;
	int r = 0;

	memset(st, 0, sizeof(*st));
	st->by_gpu_time = by_gpu_time(p);
	stack_store__init(&ss);
	if (symbolizer__new(&z) < 0)
		z = NULL;   /* frames stay addresses */
	for (size_t ti = 0; ti < p->ntargets && r == 0; ti++)
		r = one_target(&p->targets[ti], z, &ss, st->by_gpu_time, st);
	for (uint32_t id = 0; r == 0 && id < stack_store__nstacks(&ss); id++) {
		uint64_t w = stack_store__weight(&ss, id, STACK_CPU);
		const uint32_t *fr;
		size_t n;

		if (!w)
			continue;
		fr = stack_store__stack_frames(&ss, id, &n);
		for (size_t i = 0; i < n; i++) {
			if (i)
				membuf_put(out, ";", 1);
			membuf_puts(out, stack_store__frame_name(&ss, fr[i]));
		}
		membuf_printf(out, " %llu\n", (unsigned long long)w);
	}
	if (r == 0 && membuf_failed(out))
		r = -ENOMEM;
	stack_store__clear(&ss);
	symbolizer__free(z);
	return r;
}
