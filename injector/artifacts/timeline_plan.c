/* SPDX-License-Identifier: MIT */
/* The order and folding of one target's timeline events; see timeline_plan.h. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jsonw.h"
#include "model/profile.h"
#include "collect/ebpf.h"
#include "ebpf_artifacts.h"
#include "timeline_plan.h"

/* Rough uncompressed size of one written event, by type (measured on the trainer). */
static uint64_t est_bytes(const struct aiprof_event *e)
{
	switch (e->type) {
	case AIPROF_EV_CUDA_LAUNCH: return 300;
	case AIPROF_EV_CUDA_MEMCPY: case AIPROF_EV_CUDA_MEMSET: return 250;
	case AIPROF_EV_NCCL_COLL: return 320;
	case AIPROF_EV_GPU_KERNEL: return 260;
	default: return 220;
	}
}
#define EST_AGG_BYTES 260

static bool has_category(const struct aiprof_event *e)
{
	return e->type != AIPROF_EV_NONE && e->type != AIPROF_EV_STRING &&
	       e->type != AIPROF_EV_LIB_STATUS && e->type < AIPROF_EV__MAX;
}

static uint64_t mix(uint64_t h, uint64_t v)
{
	h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
	return h;
}

/* identity of an event for folding: what a person would call "the same call again" */
static uint64_t event_key(const struct aiprof_event *e)
{
	uint64_t h = mix(e->type, e->api);

	switch (e->type) {
	case AIPROF_EV_CUDA_LAUNCH:
		h = mix(h, e->u.launch.func);
		h = mix(h, e->u.launch.name_id);
		h = mix(h, e->u.launch.stream);
		for (int i = 0; i < 3; i++)
			h = mix(mix(h, e->u.launch.grid[i]), e->u.launch.block[i]);
		break;
	case AIPROF_EV_CUDA_MEMCPY:
	case AIPROF_EV_CUDA_MEMSET:
		h = mix(mix(mix(h, e->u.memcpy.kind), e->u.memcpy.bytes), e->u.memcpy.flags);
		h = mix(h, e->u.memcpy.stream);
		break;
	case AIPROF_EV_CUDA_SYNC:
		h = mix(mix(h, e->u.sync.kind), e->u.sync.handle);
		break;
	case AIPROF_EV_CUDA_ALLOC:
	case AIPROF_EV_CUDA_FREE:
		h = mix(mix(h, e->u.mem.kind), e->u.mem.bytes);
		break;
	case AIPROF_EV_NCCL_COLL:
		h = mix(mix(h, e->u.nccl.comm), e->u.nccl.bytes);
		break;
	case AIPROF_EV_IBV:
		h = mix(mix(h, e->u.ibv.length), e->u.ibv.qp_num);
		break;
	case AIPROF_EV_GPU_KERNEL:
	case AIPROF_EV_GPU_MEMCPY:
		h = mix(mix(mix(h, e->u.gpu.name_id), e->u.gpu.stream), e->u.gpu.device);
		h = mix(mix(h, e->u.gpu.kind), e->u.gpu.bytes);
		for (int i = 0; i < 3; i++)
			h = mix(mix(h, e->u.gpu.grid[i]), e->u.gpu.block[i]);
		break;
	default:
		break;
	}
	return h;
}

static uint32_t gpu_track(const struct aiprof_event *e)
{
	return TL_GPU_TRACK_BASE + e->u.gpu.device * 1000 + (e->u.gpu.stream % 1000);
}

static bool is_gpu(const struct aiprof_event *e)
{
	return e->type == AIPROF_EV_GPU_KERNEL || e->type == AIPROF_EV_GPU_MEMCPY;
}

/* ns tid -> host tid, with a one-entry cache (events come in runs per thread) */
struct tidcache {
	uint32_t ns, host;
	bool valid;
};

static uint32_t host_tid(const struct target *t, struct tidcache *c, uint32_t ns)
{
	if (!c->valid || c->ns != ns) {
		c->ns = ns;
		c->host = target_host_tid(t, ns);
		c->valid = true;
	}
	return c->host;
}

static int push_item(struct tl_plan *pl, uint64_t ts, uint32_t track, enum tl_kind k, uint32_t ix)
{
	if (pl->n == pl->cap) {
		size_t ncap = pl->cap ? pl->cap * 2 : 1024;
		struct tl_item *nv = realloc(pl->items, ncap * sizeof(*nv));

		if (!nv)
			return -ENOMEM;
		pl->items = nv;
		pl->cap = ncap;
	}
	pl->items[pl->n++] = (struct tl_item){ ts, track, (uint32_t)k << 30 | ix };
	return 0;
}

int tl_sink_plan(void *ctx, const char *buf, size_t len)
{
	struct tl_plan *pl = ctx;

	if (pl->ext_len + len + 1 > pl->ext_cap) {
		size_t ncap = pl->ext_cap ? pl->ext_cap : 65536;
		char *nv;

		while (ncap < pl->ext_len + len + 1)
			ncap *= 2;
		nv = realloc(pl->ext, ncap);
		if (!nv)
			return -ENOMEM;
		pl->ext = nv;
		pl->ext_cap = ncap;
	}
	memcpy(pl->ext + pl->ext_len, buf, len);
	pl->ext_len += len;
	pl->ext[pl->ext_len] = 0;
	return 0;
}

/*
 * The top-level "ph", "tid" and "ts" of one JSON object on a line. Strings are skipped
 * with their escapes, so a frame name cannot fake a key. Returns false when the line is
 * not an object this can read.
 */
static bool scan_line(const char *s, size_t n, char *ph, uint32_t *tid, uint64_t *ts_ns)
{
	int depth = 0;
	bool got_tid = false;

	*ph = 0;
	*ts_ns = 0;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];

		if (c == '"') {
			size_t start = ++i;

			while (i < n && s[i] != '"')
				i += s[i] == '\\' ? 2 : 1;
			if (i >= n)
				return false;
			/* a key of the top-level object? */
			if (depth == 1 && i + 1 < n && s[i + 1] == ':') {
				size_t klen = i - start;
				const char *v = s + i + 2;

				if (klen == 2 && memcmp(s + start, "ph", 2) == 0 && v[0] == '"') {
					*ph = v[1];
				} else if (klen == 3 && memcmp(s + start, "tid", 3) == 0) {
					*tid = (uint32_t)strtoul(v, NULL, 10);
					got_tid = true;
				} else if (klen == 2 && memcmp(s + start, "ts", 2) == 0) {
					char *end;
					unsigned long long us = strtoull(v, &end, 10);
					uint64_t frac = 0;
					int digits = 0;

					if (*end == '.')
						for (end++; *end >= '0' && *end <= '9' && digits < 3; end++, digits++)
							frac = frac * 10 + (uint64_t)(*end - '0');
					for (; digits < 3; digits++)
						frac *= 10;
					*ts_ns = (uint64_t)us * 1000 + frac;
				}
			}
			continue;
		}
		if (c == '{' || c == '[')
			depth++;
		else if (c == '}' || c == ']')
			depth--;
	}
	return *ph && (got_tid || *ph == 'M');
}

static int capture_ebpf(struct tl_plan *pl, const struct target *t, struct ebpf *e)
{
	struct jsonw *w;
	int r;

	if (!e)
		return 0;
	w = jsonw__new(tl_sink_plan, pl);
	if (!w)
		return -ENOMEM;
	ebpf_timeline_write_target(w, e, t);
	r = jsonw__finish(w);
	if (r < 0)
		return r;
	for (size_t i = 0; i < pl->ext_len;) {
		size_t j = i;
		char ph;
		uint32_t tid = 0;
		uint64_t ts = 0;

		while (j < pl->ext_len && pl->ext[j] != '\n')
			j++;
		if (j > i && scan_line(pl->ext + i, j - i, &ph, &tid, &ts)) {
			if (pl->nlines == pl->caplines) {
				size_t ncap = pl->caplines ? pl->caplines * 2 : 256;
				struct tl_line *nv = realloc(pl->lines, ncap * sizeof(*nv));

				if (!nv)
					return -ENOMEM;
				pl->lines = nv;
				pl->caplines = ncap;
			}
			pl->lines[pl->nlines] = (struct tl_line){ i, j - i };
			/* metadata first: track 0, time 0 */
			r = push_item(pl, ph == 'M' ? 0 : ts, ph == 'M' ? 0 : tid, TL_LINE,
				      (uint32_t)pl->nlines);
			if (r < 0)
				return r;
			pl->nlines++;
			pl->estimate_bytes += j - i + 2;
		}
		if (j < pl->ext_len)
			pl->ext[j] = 0;
		i = j + 1;
	}
	return 0;
}

static int item_cmp(const void *x, const void *y)
{
	const struct tl_item *a = x, *b = y;

	if (a->ts != b->ts)
		return a->ts < b->ts ? -1 : 1;
	return a->ref < b->ref ? -1 : a->ref > b->ref;
}

static int u32_cmp(const void *x, const void *y)
{
	uint32_t a = *(const uint32_t *)x, b = *(const uint32_t *)y;

	return a < b ? -1 : a > b;
}

/* groups items by track (ascending), stable, then sorts each track by time */
static int sort_items(struct tl_plan *pl)
{
	uint32_t *tracks = NULL;
	size_t ntracks = 0, *start = NULL;
	struct tl_item *out = NULL;
	uint32_t last = UINT32_MAX;
	int r = -ENOMEM;

	if (pl->n < 2)
		return 0;
	/* distinct tracks: few; a sorted array and binary search */
	for (size_t i = 0; i < pl->n; i++) {
		uint32_t tr = pl->items[i].track;
		size_t lo = 0, hi = ntracks;

		if (tr == last)
			continue;
		last = tr;
		while (lo < hi) {
			size_t mid = (lo + hi) / 2;

			if (tracks[mid] < tr)
				lo = mid + 1;
			else
				hi = mid;
		}
		if (lo < ntracks && tracks[lo] == tr)
			continue;
		{
			uint32_t *nv = realloc(tracks, (ntracks + 1) * sizeof(*nv));

			if (!nv)
				goto out;
			tracks = nv;
		}
		memmove(tracks + lo + 1, tracks + lo, (ntracks - lo) * sizeof(*tracks));
		tracks[lo] = tr;
		ntracks++;
	}
	start = calloc(ntracks + 1, sizeof(*start));
	out = malloc(pl->n * sizeof(*out));
	if (!start || !out)
		goto out;
	for (size_t i = 0; i < pl->n; i++) {
		uint32_t *p = bsearch(&pl->items[i].track, tracks, ntracks, sizeof(*tracks), u32_cmp);

		start[(size_t)(p - tracks) + 1]++;
	}
	for (size_t k = 0; k < ntracks; k++)
		start[k + 1] += start[k];
	{
		size_t *pos = malloc((ntracks + 1) * sizeof(*pos));

		if (!pos)
			goto out;
		memcpy(pos, start, (ntracks + 1) * sizeof(*pos));
		for (size_t i = 0; i < pl->n; i++) {
			uint32_t *p = bsearch(&pl->items[i].track, tracks, ntracks, sizeof(*tracks), u32_cmp);

			out[pos[p - tracks]++] = pl->items[i];
		}
		free(pos);
	}
	for (size_t k = 0; k < ntracks; k++) {
		struct tl_item *v = out + start[k];
		size_t n = start[k + 1] - start[k];
		bool sorted = true;

		for (size_t i = 1; i < n && sorted; i++)
			sorted = item_cmp(&v[i - 1], &v[i]) <= 0;
		if (!sorted)
			qsort(v, n, sizeof(*v), item_cmp);
	}
	free(pl->items);
	pl->items = out;
	pl->cap = pl->n;
	out = NULL;
	r = 0;
out:
	free(tracks);
	free(start);
	free(out);
	return r;
}

static int new_agg(struct tl_plan *pl, const struct tl_agg *a, uint32_t *ret)
{
	if (pl->nagg == pl->capagg) {
		size_t ncap = pl->capagg ? pl->capagg * 2 : 256;
		struct tl_agg *nv = realloc(pl->aggs, ncap * sizeof(*nv));

		if (!nv)
			return -ENOMEM;
		pl->aggs = nv;
		pl->capagg = ncap;
	}
	pl->aggs[pl->nagg] = *a;
	*ret = (uint32_t)pl->nagg++;
	return 0;
}

/* level 1: runs of identical consecutive events on a track */
static int fold_runs(struct tl_plan *pl, const struct target *t)
{
	size_t o = 0;

	pl->estimate_bytes = 0;
	for (size_t i = 0; i < pl->n;) {
		struct tl_item it = pl->items[i];
		const struct aiprof_event *e;
		uint64_t key, end;
		size_t j = i + 1;

		if (tl_item_kind(&it) != TL_EVENT) {
			pl->estimate_bytes += tl_item_kind(&it) == TL_LINE ?
				pl->lines[tl_item_index(&it)].len + 2 : EST_AGG_BYTES;
			pl->items[o++] = it;
			i++;
			continue;
		}
		e = &t->store.v[tl_item_index(&it)];
		key = event_key(e);
		end = e->ts + e->dur;
		while (j < pl->n && pl->items[j].track == it.track &&
		       tl_item_kind(&pl->items[j]) == TL_EVENT) {
			const struct aiprof_event *q = &t->store.v[tl_item_index(&pl->items[j])];

			if (q->ts > end + TL_RUN_GAP_NS || event_key(q) != key)
				break;
			if (q->ts + q->dur > end)
				end = q->ts + q->dur;
			j++;
		}
		if (j - i == 1) {
			pl->estimate_bytes += est_bytes(e);
			pl->items[o++] = it;
		} else {
			struct tl_agg a = { .first = tl_item_index(&it), .count = (uint32_t)(j - i),
					    .distinct = 1, .start = e->ts, .end = end, .min_ns = UINT64_MAX };
			uint32_t ax;

			for (size_t k = i; k < j; k++) {
				const struct aiprof_event *q = &t->store.v[tl_item_index(&pl->items[k])];

				a.busy_ns += q->dur;
				if (q->dur < a.min_ns)
					a.min_ns = q->dur;
				if (q->dur > a.max_ns)
					a.max_ns = q->dur;
			}
			if (new_agg(pl, &a, &ax) < 0)
				return -ENOMEM;
			pl->events_aggregated += j - i;
			pl->estimate_bytes += EST_AGG_BYTES;
			pl->items[o++] = (struct tl_item){ it.ts, it.track, (uint32_t)TL_AGG << 30 | ax };
		}
		i = j;
	}
	pl->n = o;
	return 0;
}

/* level 2: everything of a track in one time bucket becomes one slice */
static int fold_buckets(struct tl_plan *pl, const struct target *t, uint64_t bucket)
{
	size_t o = 0;

	pl->estimate_bytes = 0;
	for (size_t i = 0; i < pl->n;) {
		struct tl_item it = pl->items[i];
		uint64_t b = it.ts / bucket;
		struct tl_agg a = { .min_ns = UINT64_MAX, .start = it.ts };
		uint64_t best = 0, prev_key = 0;
		size_t j = i;
		uint32_t ax;

		if (tl_item_kind(&it) == TL_LINE) {
			pl->estimate_bytes += pl->lines[tl_item_index(&it)].len + 2;
			pl->items[o++] = it;
			i++;
			continue;
		}
		while (j < pl->n && pl->items[j].track == it.track &&
		       tl_item_kind(&pl->items[j]) != TL_LINE && pl->items[j].ts / bucket == b) {
			const struct tl_item *q = &pl->items[j];
			uint32_t first, count;
			uint64_t s, e, busy, mn, mx, key;

			if (tl_item_kind(q) == TL_AGG) {
				const struct tl_agg *g = &pl->aggs[tl_item_index(q)];

				first = g->first;
				count = g->count;
				s = g->start;
				e = g->end;
				busy = g->busy_ns;
				mn = g->min_ns;
				mx = g->max_ns;
			} else {
				const struct aiprof_event *ev = &t->store.v[tl_item_index(q)];

				first = tl_item_index(q);
				count = 1;
				s = ev->ts;
				e = ev->ts + ev->dur;
				busy = mn = mx = ev->dur;
			}
			key = event_key(&t->store.v[first]);
			if (j == i || key != prev_key)
				a.distinct++;
			prev_key = key;
			if (busy >= best || j == i) {
				best = busy;
				a.first = first;
			}
			a.count += count;
			a.busy_ns += busy;
			if (e > a.end)
				a.end = e;
			if (mn < a.min_ns)
				a.min_ns = mn;
			if (mx > a.max_ns)
				a.max_ns = mx;
			(void)s;
			j++;
		}
		if (j - i == 1) {
			pl->items[o++] = it;
			pl->estimate_bytes += tl_item_kind(&it) == TL_AGG ? EST_AGG_BYTES :
					      est_bytes(&t->store.v[tl_item_index(&it)]);
			i = j;
			continue;
		}
		/* the slice ends where the track's next item starts */
		if (j < pl->n && pl->items[j].track == it.track && a.end > pl->items[j].ts)
			a.end = pl->items[j].ts;
		if (new_agg(pl, &a, &ax) < 0)
			return -ENOMEM;
		for (size_t k = i; k < j; k++)
			if (tl_item_kind(&pl->items[k]) == TL_EVENT)
				pl->events_aggregated++;
		pl->estimate_bytes += EST_AGG_BYTES;
		pl->items[o++] = (struct tl_item){ it.ts, it.track, (uint32_t)TL_AGG << 30 | ax };
		i = j;
	}
	pl->n = o;
	return 0;
}

/* an aggregate's end is also capped by the next item of its track (level 1 cannot overlap) */
static void clip_aggregates(struct tl_plan *pl)
{
	for (size_t i = 0; i + 1 < pl->n; i++) {
		struct tl_item *it = &pl->items[i];

		if (tl_item_kind(it) == TL_AGG && pl->items[i + 1].track == it->track &&
		    tl_item_kind(&pl->items[i + 1]) != TL_LINE) {
			struct tl_agg *a = &pl->aggs[tl_item_index(it)];

			if (a->end > pl->items[i + 1].ts && pl->items[i + 1].ts >= a->start)
				a->end = pl->items[i + 1].ts;
		}
	}
}

static int u64_cmp(const void *x, const void *y)
{
	uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;

	return a < b ? -1 : a > b;
}

struct corr_track {
	uint64_t corr;
	uint32_t track;
};

static int ct_cmp(const void *x, const void *y)
{
	const struct corr_track *a = x, *b = y;

	return a->corr < b->corr ? -1 : a->corr > b->corr;
}

static int add_name(struct tl_plan *pl, uint32_t track, const char *name)
{
	if (pl->nnames == pl->capnames) {
		size_t ncap = pl->capnames ? pl->capnames * 2 : 16;
		struct tl_track_name *nv = realloc(pl->names, ncap * sizeof(*nv));

		if (!nv)
			return -ENOMEM;
		pl->names = nv;
		pl->capnames = ncap;
	}
	pl->names[pl->nnames].track = track;
	snprintf(pl->names[pl->nnames].name, sizeof(pl->names[pl->nnames].name), "%s", name);
	pl->nnames++;
	return 0;
}

static bool ct_sorted(const struct corr_track *v, size_t n)
{
	for (size_t i = 1; i < n; i++)
		if (v[i - 1].corr > v[i].corr)
			return false;
	return true;
}

static bool u64_sorted(const uint64_t *v, size_t n)
{
	for (size_t i = 1; i < n; i++)
		if (v[i - 1] > v[i])
			return false;
	return true;
}

/* track names (the program's own thread names where known) with ranks, and (flows) the
 * pairs written as single events */
static int links(struct tl_plan *pl, const struct target *t, const struct ebpf *eb, bool flows)
{
	struct corr_track *launch = NULL;
	uint64_t *kern = NULL;
	size_t nl = 0, nk = 0;
	struct { uint32_t track; int32_t rank; } *ranks = NULL;
	size_t nr = 0;
	int32_t lo = -1, hi = -1;
	int r = -ENOMEM;

	launch = malloc((pl->n + 1) * sizeof(*launch));
	kern = malloc((pl->n + 1) * sizeof(*kern));
	ranks = calloc(t->nthreads + 64, sizeof(*ranks));
	if (!launch || !kern || !ranks)
		goto out;
	for (size_t i = 0; i < pl->n; i++) {
		const struct aiprof_event *e;

		if (tl_item_kind(&pl->items[i]) != TL_EVENT)
			continue;
		e = &t->store.v[tl_item_index(&pl->items[i])];
		if (e->type == AIPROF_EV_CUDA_LAUNCH && e->u.launch.correlation)
			launch[nl++] = (struct corr_track){ e->u.launch.correlation, pl->items[i].track };
		else if (e->type == AIPROF_EV_GPU_KERNEL && e->u.gpu.correlation)
			kern[nk++] = e->u.gpu.correlation;
	}
	if (!ct_sorted(launch, nl))
		qsort(launch, nl, sizeof(*launch), ct_cmp);
	if (!u64_sorted(kern, nk))
		qsort(kern, nk, sizeof(*kern), u64_cmp);
	pl->flow_ok = malloc((nk < nl ? nk : nl) * sizeof(uint64_t) + 8);
	if (!pl->flow_ok)
		goto out;
	for (size_t i = 0, j = 0; flows && i < nl && j < nk;) {
		if (launch[i].corr < kern[j]) {
			i++;
		} else if (launch[i].corr > kern[j]) {
			j++;
		} else {
			if (!pl->nflow || pl->flow_ok[pl->nflow - 1] != kern[j])
				pl->flow_ok[pl->nflow++] = kern[j];
			i++;
			j++;
		}
	}
	/* ranks of threads, from their NCCL events */
	{
		struct tidcache tc = { 0 };

		for (size_t i = 0; i < t->store.n; i++) {
			const struct aiprof_event *e = &t->store.v[i];
			uint32_t tid;
			size_t k;

			if ((e->type != AIPROF_EV_NCCL_COLL && e->type != AIPROF_EV_NCCL_INIT) ||
			    e->u.nccl.rank < 0)
				continue;
			tid = host_tid(t, &tc, e->tid);
			for (k = 0; k < nr && ranks[k].track != tid; k++)
				;
			if (k == nr) {
				if (nr == t->nthreads + 64)
					continue;
				nr++;
			}
			ranks[k].track = tid;
			ranks[k].rank = e->u.nccl.rank;
		}
	}
	for (size_t k = 0; k < nr; k++) {
		if (lo < 0 || ranks[k].rank < lo)
			lo = ranks[k].rank;
		if (ranks[k].rank > hi)
			hi = ranks[k].rank;
	}
	pl->first_rank = lo;
	{
		char ranks_s[32] = "", by[32] = "";

		if (lo >= 0 && lo == hi)
			snprintf(ranks_s, sizeof(ranks_s), ", rank %d", lo);
		else if (lo >= 0)
			snprintf(ranks_s, sizeof(ranks_s), ", ranks %d-%d", lo, hi);
		if (t->parent)  /* as the eBPF side names a followed process */
			snprintf(by, sizeof(by), ", started by %d", t->parent);
		snprintf(pl->process_label, sizeof(pl->process_label), "%s (pid %d%s%s)", t->comm,
			 t->pid, ranks_s, by);
	}
	for (size_t i = 0; i < t->nthreads; i++) {
		uint32_t tid = t->threads[i].host_tid ? t->threads[i].host_tid : t->threads[i].ns_tid;
		const char *base = ebpf__thread_name(eb, t->pid, tid);
		char nm[96];

		if (!base)
			base = t->threads[i].comm;
		snprintf(nm, sizeof(nm), "%s", base);
		for (size_t k = 0; k < nr; k++)
			if (ranks[k].track == tid)
				snprintf(nm, sizeof(nm), "%.80s [rank %d]", base, ranks[k].rank);
		if (add_name(pl, tid, nm) < 0)
			goto out;
	}
	/* GPU tracks: device, stream and the rank of the thread that launched onto it */
	for (size_t i = 0; i < pl->n; i++) {
		const struct tl_item *it = &pl->items[i];
		const struct aiprof_event *e;
		char nm[96];
		int32_t rank = -1;

		if (it->track < TL_GPU_TRACK_BASE || (i && pl->items[i - 1].track == it->track) ||
		    tl_item_kind(it) == TL_LINE)
			continue;
		e = &t->store.v[tl_item_kind(it) == TL_AGG ? pl->aggs[tl_item_index(it)].first :
				tl_item_index(it)];
		/* first kernel of the track with a correlation names its launching thread */
		for (size_t j = i; j < pl->n && pl->items[j].track == it->track && rank < 0; j++) {
			const struct tl_item *q = &pl->items[j];
			const struct aiprof_event *g = &t->store.v[tl_item_kind(q) == TL_AGG ?
				pl->aggs[tl_item_index(q)].first : tl_item_index(q)];
			struct corr_track key = { g->u.gpu.correlation, 0 }, *hit;

			if (tl_item_kind(q) == TL_LINE || !g->u.gpu.correlation)
				continue;
			hit = bsearch(&key, launch, nl, sizeof(*launch), ct_cmp);
			if (!hit)
				continue;
			for (size_t k = 0; k < nr; k++)
				if (ranks[k].track == hit->track)
					rank = ranks[k].rank;
			if (j - i > 64)
				break;
		}
		if (rank >= 0)
			snprintf(nm, sizeof(nm), "GPU %u stream %u [rank %d]", e->u.gpu.device,
				 e->u.gpu.stream, rank);
		else
			snprintf(nm, sizeof(nm), "GPU %u stream %u", e->u.gpu.device, e->u.gpu.stream);
		if (add_name(pl, it->track, nm) < 0)
			goto out;
	}
	r = 0;
out:
	free(launch);
	free(kern);
	free(ranks);
	return r;
}

uint64_t tl_budget_per_rank(void)
{
	const char *s = getenv("AIPROF_TIMELINE_BUDGET_MB");
	char *end;
	unsigned long long v;

	if (!s || !*s)
		return TL_DEFAULT_BUDGET_PER_RANK;
	v = strtoull(s, &end, 10);
	if (*end)
		return TL_DEFAULT_BUDGET_PER_RANK;
	return (uint64_t)v << 20;
}

int tl_plan__build(struct tl_plan *pl, const struct target *t, struct ebpf *e,
		   uint64_t budget_per_rank, uint64_t window_ns)
{
	struct tidcache tc = { 0 };
	size_t nranks = 0, ntracks = 0;
	int r;

	memset(pl, 0, sizeof(*pl));
	pl->first_rank = -1;
	pl->items = malloc((t->store.n + 1) * sizeof(*pl->items));
	if (!pl->items)
		return -ENOMEM;
	pl->cap = t->store.n + 1;
	for (size_t i = 0; i < t->store.n; i++) {
		const struct aiprof_event *ev = &t->store.v[i];

		if (!has_category(ev))
			continue;
		pl->events_in++;
		pl->estimate_bytes += est_bytes(ev);
		r = push_item(pl, ev->ts, is_gpu(ev) ? gpu_track(ev) : host_tid(t, &tc, ev->tid),
			      TL_EVENT, (uint32_t)i);
		if (r < 0)
			return r;
	}
	r = capture_ebpf(pl, t, e);
	if (r < 0)
		return r;
	pl->events_in += pl->nlines;
	r = sort_items(pl);
	if (r < 0)
		return r;
	r = links(pl, t, e, false);
	if (r < 0)
		return r;
	for (size_t i = 0; i < pl->nnames; i++)
		if (pl->names[i].track < TL_GPU_TRACK_BASE && strstr(pl->names[i].name, "[rank "))
			nranks++;
	for (size_t i = 0; i < pl->n; i++)
		if (!i || pl->items[i].track != pl->items[i - 1].track)
			ntracks++;
	pl->budget_bytes = budget_per_rank ? budget_per_rank * (nranks ? nranks : 1) : 0;
	if (pl->budget_bytes && pl->estimate_bytes > pl->budget_bytes) {
		r = fold_runs(pl, t);
		if (r < 0)
			return r;
		if (pl->estimate_bytes > pl->budget_bytes) {
			/* buckets so that one slice per track and bucket fits in the budget */
			/* aim at a quarter of the budget: estimates are rough, and slices
			 * of a track never overlap, so fewer is also easier to read */
			uint64_t slices = pl->budget_bytes / EST_AGG_BYTES / 4;
			uint64_t bucket = slices ? window_ns * (ntracks ? ntracks : 1) / slices : window_ns;

			if (bucket < 10000)
				bucket = 10000;
			pl->bucket_ns = bucket;
			r = fold_buckets(pl, t, bucket);
			if (r < 0)
				return r;
		}
		clip_aggregates(pl);
	}
	/* names again (GPU tracks may now start with an aggregate), and flows between the
	 * launches and kernels that are still single events */
	free(pl->flow_ok);
	pl->flow_ok = NULL;
	pl->nflow = 0;
	free(pl->names);
	pl->names = NULL;
	pl->nnames = pl->capnames = 0;
	return links(pl, t, e, true);
}

void tl_plan__clear(struct tl_plan *pl)
{
	free(pl->items);
	free(pl->aggs);
	free(pl->ext);
	free(pl->lines);
	free(pl->flow_ok);
	free(pl->names);
	memset(pl, 0, sizeof(*pl));
}

const char *tl_plan__track_name(const struct tl_plan *pl, uint32_t track)
{
	for (size_t i = 0; i < pl->nnames; i++)
		if (pl->names[i].track == track)
			return pl->names[i].name;
	return NULL;
}

bool tl_plan__flow_ok(const struct tl_plan *pl, uint64_t correlation)
{
	return pl->nflow && bsearch(&correlation, pl->flow_ok, pl->nflow, sizeof(uint64_t), u64_cmp);
}

void tl_flow_id(char *buf, size_t len, int pid, uint64_t correlation)
{
	snprintf(buf, len, "0x%x%016llx", (unsigned)pid, (unsigned long long)correlation);
}

void tl_plan__write_line(struct jsonw *w, const struct tl_plan *pl, const struct tl_item *it)
{
	const struct tl_line *l = &pl->lines[tl_item_index(it)];

	jsonw_newline(w);
	jsonw_raw(w, pl->ext + l->off);
}

void tl_plan__write_agg(struct jsonw *w, const struct target *t, const struct tl_plan *pl,
			const struct tl_item *it, const char *name, const char *cat)
{
	const struct tl_agg *a = &pl->aggs[tl_item_index(it)];
	char nm[400];

	if (a->distinct > 1)
		snprintf(nm, sizeof(nm), "%s +%u more (%u events)", name, a->distinct - 1, a->count);
	else
		snprintf(nm, sizeof(nm), "%s x%u", name, a->count);
	jsonw_newline(w);
	jsonw_obj_open(w);
	jsonw_kv_str(w, "ph", "X");
	jsonw_kv_str(w, "cat", cat);
	jsonw_kv_str(w, "name", nm);
	jsonw_kv_int(w, "pid", t->pid);
	jsonw_kv_uint(w, "tid", it->track);
	jsonw_key(w, "ts");
	jsonw_fixed3(w, a->start);
	jsonw_key(w, "dur");
	jsonw_fixed3(w, a->end > a->start ? a->end - a->start : 0);
	jsonw_key(w, "args");
	jsonw_obj_open(w);
	jsonw_kv_uint(w, "aggregated_events", a->count);
	jsonw_kv_str(w, "first", name);
	if (a->distinct > 1)
		jsonw_kv_uint(w, "distinct_events", a->distinct);
	jsonw_key(w, "busy_us");
	jsonw_fixed3(w, a->busy_ns);
	jsonw_key(w, "min_dur_us");
	jsonw_fixed3(w, a->min_ns == UINT64_MAX ? 0 : a->min_ns);
	jsonw_key(w, "max_dur_us");
	jsonw_fixed3(w, a->max_ns);
	jsonw_kv_str(w, "why", pl->bucket_ns ? "size budget: one slice per track and time bucket" :
		     "size budget: a run of identical events");
	jsonw_obj_close(w);
	jsonw_obj_close(w);
}
