/* SPDX-License-Identifier: MIT */
/*
 * `aiprof merge`: aligns the ranks' clocks (merge_align.c), finds what only the ranks
 * together show (Straggler, NcclHang), and writes the merged timeline.json.gz, summary.json
 * (schema aiprof.merge/v1, README "Multi-rank merge") and manifest.json, into a folder or
 * uploaded with manifest.json last. See merge.h.
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>
#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include "digest.h"
#include "log.h"
#include "s3.h"
#include "s3url.h"
#include "artifacts/termlog.h"
#include "artifacts/upload.h"
#include "merge.h"
#include "stacks_merge.h"

#ifndef AIPROF_VERSION
#define AIPROF_VERSION "0.1.0"
#endif

#define PID_SHIFT 22           /* merged pid = (source index + 1) << 22 | original pid */

/* Rule thresholds (README "Multi-rank merge"). */
#define STRAG_MIN_LATE_NS     5000000ULL  /* lateness into a collective that counts */
#define STRAG_MIN_OF_PERIOD   0.10        /* ... and this share of the step period */
#define STRAG_MIN_SHARE       0.75        /* of all ranks' lateness */
#define STRAG_MIN_LATE_SHARE  0.20        /* of the matched collectives */
#define STRAG_MIN_COLLECTIVES 5
#define STRAG_MIN_COST        0.05        /* of the matched span, lost by the others */
#define STRAG_CRITICAL_PERIOD 0.25        /* median lateness of the step period */
#define HANG_MIN_NS           200000000ULL
#define HANG_PERIOD_FACTOR    10.0
#define HANG_BLOCKED_SHARE    0.5         /* of the silence, in one wait */

struct rank_state {
	struct merge_source s;
	bool aligned;                 /* has a clock offset from the collectives */
	int64_t offset_ns;            /* subtracted from its times */
	struct merge_fit fit;
	bool gpu;                     /* aligned on GPU kernel ends (else host call ends) */
	long newpid;                  /* merged pid of its world process */
	/* lateness over the collectives every aligned rank has */
	uint64_t *late;
	size_t nlate, late_count, last_arrivals;
	double late_sum_ns;
	bool tied_;                   /* scratch of tie_clock_groups */
};

struct merge {
	struct rank_state *r;
	size_t n;
	size_t ref;                   /* index of the reference rank; n when none has collectives */
	size_t complete;              /* collectives matched on every aligned rank */
	size_t aligned;
	uint64_t skew_p50, skew_max;  /* |end - median end of the collective|, over ranks x collectives */
	size_t skew_n;                /* collectives seen on at least two aligned ranks */
	uint64_t spread_p50, spread_max; /* max - min end of a collective over the ranks */
	uint64_t period_ns;           /* step period of the reference rank's collectives */
	size_t skew_gpu;              /* of skew_n, compared on GPU kernel ends */
	json_t *findings, *warnings;
};

static void warn(struct merge *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void warn(struct merge *m, const char *fmt, ...)
{
	char buf[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	log_warning("%s", buf);
	json_array_append_new(m->warnings, json_string(buf));
}

static const char *rank_pod(const struct rank_state *r)
{
	const char *l = r->s.label, *slash;
	size_t n = strlen(l);

	if (r->s.pod)
		return r->s.pod;
	while (n > 1 && l[n - 1] == '/')
		n--;
	for (slash = l + n; slash > l && slash[-1] != '/'; slash--)
		;
	return slash;   /* the last path segment (may keep a trailing '/': shown as is) */
}

static void rank_name(const struct rank_state *r, char *buf, size_t len)
{
	char pod[256];
	const char *p = rank_pod(r);
	size_t n = strcspn(p, "/");

	snprintf(pod, sizeof(pod), "%.*s", (int)(n < 200 ? n : 200), p);
	if (r->s.rank >= 0)
		snprintf(buf, len, "rank %d (%s%s%s)", r->s.rank, pod, r->s.host ? "/" : "", r->s.host ? r->s.host : "");
	else
		snprintf(buf, len, "rank ? (%s%s%s)", pod, r->s.host ? "/" : "", r->s.host ? r->s.host : "");
}

static uint64_t corr(const struct rank_state *r, uint64_t t)
{
	int64_t v = (int64_t)t - r->offset_ns;

	return v > 0 ? (uint64_t)v : 0;
}

/* ---- checks ---------------------------------------------------------------------------- */

static int check_sources(struct merge *m, char *msg, size_t len)
{
	for (size_t i = 0; i < m->n; i++) {
		const struct merge_source *a = &m->r[i].s;

		for (size_t j = i + 1; j < m->n; j++) {
			const struct merge_source *b = &m->r[j].s;

			if (a->session && b->session && strcmp(a->session, b->session) != 0) {
				snprintf(msg, len, "ranks from different sessions: %s is from session '%s', %s from '%s'; "
					 "merge the ranks of one session", a->label, a->session, b->label, b->session);
				return -EINVAL;
			}
			if (a->nranks > 0 && b->nranks > 0 && a->nranks != b->nranks) {
				snprintf(msg, len, "ranks from different jobs: %s has %d ranks in its largest communicator, "
					 "%s has %d; merge the ranks of one job", a->label, a->nranks, b->label, b->nranks);
				return -EINVAL;
			}
			if (a->rank >= 0 && a->rank == b->rank) {
				snprintf(msg, len, "%s and %s are both rank %d of %d: the same rank given twice, or ranks "
					 "from different jobs/sessions", a->label, b->label, a->rank, a->nranks);
				return -EINVAL;
			}
		}
	}
	return 0;
}

static int cmp_rank(const void *x, const void *y)
{
	const struct rank_state *a = x, *b = y;
	int ra = a->s.rank < 0 ? INT_MAX : a->s.rank, rb = b->s.rank < 0 ? INT_MAX : b->s.rank;

	return ra < rb ? -1 : ra > rb;
}

/* ---- alignment ------------------------------------------------------------------------- */

/* How many of x's world collectives have a GPU kernel end. */
static size_t gpu_ends(const struct rank_state *x)
{
	size_t n = 0;

	for (size_t j = 0; j < x->s.ncoll; j++)
		n += x->s.coll[j].gpu_end_ns != 0;
	return n;
}

/* Whether a and b's windows read one clock: one kernel boot, one time namespace offset. */
static bool same_clock(const struct merge_source *a, const struct merge_source *b)
{
	return a->boot_id[0] && !strcmp(a->boot_id, b->boot_id) && a->timens_known && b->timens_known &&
	       a->timens_ns == b->timens_ns;
}

static int align(struct merge *m)
{
	char name[300];
	int r;

	m->ref = m->n;
	for (size_t i = 0; i < m->n; i++) {
		if (m->r[i].s.ncoll) {
			m->ref = i;
			break;
		}
	}
	for (size_t i = 0; i < m->n; i++) {
		struct rank_state *x = &m->r[i];

		rank_name(x, name, sizeof(name));
		if (!x->s.ncoll) {
			warn(m, "%s (%s) made no NCCL collective in its window: its clock cannot be aligned with "
			     "the others; it is merged unaligned (offset 0)", name, x->s.label);
			continue;
		}
		if (i == m->ref) {
			x->aligned = true;
			x->fit = (struct merge_fit){ .ok = true, .matched = x->s.ncoll };
			continue;
		}
		r = (same_clock(&m->r[m->ref].s, &x->s) ? merge_fit_same_clock : merge_fit_offset)(
			m->r[m->ref].s.coll, m->r[m->ref].s.ncoll, x->s.coll, x->s.ncoll, &x->fit);
		if (r < 0)
			return r;
		if (!x->fit.ok) {
			warn(m, "%s (%s): none of its %zu collectives could be matched with the reference rank's "
			     "(different operations, or windows that hardly overlap); merged unaligned (offset 0)",
			     name, x->s.label, x->s.ncoll);
			continue;
		}
		x->aligned = true;
		x->offset_ns = x->fit.offset_ns;
		x->gpu = x->fit.gpu;
		if (x->fit.ambiguous && x->fit.same_clock)
			warn(m, "%s: the match of its collectives with the reference rank's is ambiguous although "
			     "they share a clock (another numbering puts their ends %.1f us apart in the median): "
			     "steps shorter than the ranks' spread; the closest match was taken", name,
			     (double)x->fit.runner_up_mad_ns / 1e3);
		else if (x->fit.ambiguous)
			warn(m, "%s: the match of its collectives with the reference rank's is ambiguous (best fit "
			     "%.1f us, another shift %.1f us): a very regular workload; the best-agreeing "
			     "match was taken", name, (double)x->fit.mad_ns / 1e3, (double)x->fit.runner_up_mad_ns / 1e3);
	}
	for (size_t i = 0; i < m->n; i++) {
		m->aligned += m->r[i].aligned;
		/* the reference is on the GPU basis when some rank was aligned on it */
		if (i != m->ref && m->r[i].aligned && m->r[i].gpu && m->ref < m->n)
			m->r[m->ref].gpu = true;
	}
	/* a rank that could not be aligned on the kernels while the reference has them */
	if (m->ref < m->n && 2 * gpu_ends(&m->r[m->ref]) >= m->r[m->ref].s.ncoll)
		for (size_t i = 0; i < m->n; i++)
			if (i != m->ref && m->r[i].aligned && !m->r[i].gpu) {
				rank_name(&m->r[i], name, sizeof(name));
				warn(m, "%s (%s) was aligned on the host ends of its collective calls: %zu of its %zu "
				     "collectives have a GPU kernel record (CUPTI unavailable in it?); its offset "
				     "carries the host's wake-up noise", name, m->r[i].s.label, gpu_ends(&m->r[i]),
				     m->r[i].s.ncoll);
			}
	return 0;
}

/* The end of x's collective j on the basis it was aligned on; 0 when it has none there. */
static uint64_t coll_end(const struct rank_state *x, long j)
{
	return x->gpu ? x->s.coll[j].gpu_end_ns : x->s.coll[j].end_ns;
}

/* Index of collective g (the reference rank's numbering) on rank x, or -1. */
static long coll_at(const struct rank_state *x, long g)
{
	long want = g - x->fit.shift, lo = 0, hi = (long)x->s.ncoll - 1;

	if (!x->aligned)
		return -1;
	while (lo <= hi) {
		long mid = lo + (hi - lo) / 2, v = (long)x->s.coll[mid].seq;

		if (v == want)
			return mid;
		if (v < want)
			lo = mid + 1;
		else
			hi = mid - 1;
	}
	return -1;
}

/* The numbers of x's first and last collectives, in the reference rank's numbering. */
static long first_g(const struct rank_state *x)
{
	return (long)x->s.coll[0].seq + x->fit.shift;
}

static long last_g(const struct rank_state *x)
{
	return (long)x->s.coll[x->s.ncoll - 1].seq + x->fit.shift;
}

static uint64_t step_period(const struct merge_source *s)
{
	int64_t *d = malloc((s->ncoll + 1) * sizeof(*d));
	size_t n = 0;
	uint64_t p;

	if (!d)
		return 0;
	/* the period of each signature (one op of one size recurs once a step) */
	for (size_t i = 0; i < s->ncoll; i++) {
		for (size_t j = i + 1; j < s->ncoll; j++) {
			if (s->coll[j].sig == s->coll[i].sig) {
				d[n++] = (int64_t)(s->coll[j].start_ns - s->coll[i].start_ns);
				break;
			}
		}
	}
	p = (uint64_t)merge_median_i64(d, n);
	free(d);
	return p;
}

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

	return x < y ? -1 : x > y;
}

/* The i-th of sorted v[0..n] without v[p]. */
static int64_t other_at(const int64_t *v, size_t p, size_t i)
{
	return i < p ? v[i] : v[i + 1];
}

/*
 * Ranks that read one clock (same_clock) move as one: each gets the median of their refined
 * offsets (tmp: scratch of m->n), so the reference's clock-mates keep offset 0 and another
 * host's ranks keep one offset between them.
 */
static void tie_clock_groups(struct merge *m, int64_t *next, int64_t *tmp)
{
	for (size_t i = 0; i < m->n; i++) {
		size_t n = 0;
		int64_t med;

		if (!m->r[i].aligned || m->r[i].tied_)
			continue;
		for (size_t k = i; k < m->n; k++)
			if (m->r[k].aligned && (k == i || same_clock(&m->r[i].s, &m->r[k].s)))
				tmp[n++] = next[k];
		med = merge_median_i64(tmp, n);
		for (size_t k = i; k < m->n; k++)
			if (m->r[k].aligned && (k == i || same_clock(&m->r[i].s, &m->r[k].s))) {
				next[k] = med;
				m->r[k].tied_ = true;
			}
	}
	for (size_t i = 0; i < m->n; i++)
		m->r[i].tied_ = false;
}

/*
 * With more than two ranks, each rank's offset is refined against the consensus of the
 * others (the median of their corrected ends of the same collective) rather than against
 * the reference alone, whose own wake-up noise would otherwise go into every offset. The
 * reference keeps offset 0, and so do the ranks on its clock (tie_clock_groups).
 */
static int refine_offsets(struct merge *m, long gmin, long gmax)
{
	int64_t *d = malloc(((size_t)(gmax - gmin) + 1) * sizeof(*d)), *o = malloc((m->n + 1) * sizeof(*o));
	int64_t *next = calloc(m->n + 1, sizeof(*next));

	if (!d || !o || !next) {
		free(d);
		free(o);
		free(next);
		return -ENOMEM;
	}
	for (int iter = 0; iter < 4 && m->aligned > 2; iter++) {
		for (size_t i = 0; i < m->n; i++) {
			const struct rank_state *x = &m->r[i];
			size_t nd = 0;

			next[i] = x->offset_ns;
			if (!x->aligned)
				continue;
			for (long g = gmin; g <= gmax; g++) {
				long j = coll_at(x, g);
				size_t no = 0;

				if (j < 0 || !coll_end(x, j))
					continue;
				/* against the others' ends on the same basis */
				for (size_t k = 0; k < m->n; k++) {
					const struct rank_state *y = &m->r[k];
					long jk = coll_at(y, g);

					if (k != i && jk >= 0 && y->s.coll[jk].sig == x->s.coll[j].sig)
						if (x->gpu ? y->gpu && y->s.coll[jk].gpu_end_ns : !y->gpu)
							o[no++] = (int64_t)coll_end(y, jk) - y->offset_ns;
				}
				if (no)
					d[nd++] = (int64_t)coll_end(x, j) - merge_median_i64(o, no);
			}
			if (nd >= MERGE_MIN_MATCHED)
				next[i] = merge_median_i64(d, nd);
		}
		tie_clock_groups(m, next, o);
		for (size_t i = 0; i < m->n; i++)
			if (m->r[i].aligned)
				m->r[i].offset_ns = next[i] - next[m->ref];
	}
	free(d);
	free(o);
	free(next);
	return 0;
}

static int analyse_collectives(struct merge *m)
{
	long gmin = LONG_MAX, gmax = LONG_MIN;
	uint64_t *spread = NULL, *resid = NULL;
	int64_t *ends = NULL;
	size_t nspread = 0, nresid = 0, total = 0;

	if (m->ref == m->n)
		return 0;
	m->period_ns = step_period(&m->r[m->ref].s);
	for (size_t i = 0; i < m->n; i++) {
		const struct rank_state *x = &m->r[i];

		if (!x->aligned)
			continue;
		if (first_g(x) < gmin)
			gmin = first_g(x);
		if (last_g(x) > gmax)
			gmax = last_g(x);
	}
	if (refine_offsets(m, gmin, gmax) < 0)
		return -ENOMEM;
	for (size_t i = 0; i < m->n; i++)
		total += m->r[i].aligned ? m->r[i].s.ncoll : 0;
	spread = malloc((size_t)(gmax - gmin + 1) * sizeof(*spread));
	resid = malloc((total + 1) * sizeof(*resid));
	ends = malloc((m->n + 1) * sizeof(*ends));
	for (size_t i = 0; i < m->n && spread && resid && ends; i++) {
		m->r[i].late = calloc((size_t)(gmax - gmin + 1), sizeof(uint64_t));
		if (!m->r[i].late)
			break;
	}
	if (!spread || !resid || !ends || (m->n && !m->r[m->n - 1].late)) {
		free(spread);
		free(resid);
		free(ends);
		return -ENOMEM;
	}
	for (long g = gmin; g <= gmax; g++) {
		uint64_t emin = UINT64_MAX, emax = 0, smin = UINT64_MAX, smax = 0, sig = 0;
		size_t present = 0, last = 0;
		bool same = true, gpu = true;

		/* GPU kernel ends when every rank that has the collective has one */
		for (size_t i = 0; i < m->n; i++) {
			long j = coll_at(&m->r[i], g);

			if (j >= 0 && !m->r[i].s.coll[j].gpu_end_ns)
				gpu = false;
		}
		for (size_t i = 0; i < m->n; i++) {
			const struct rank_state *x = &m->r[i];
			long j = coll_at(x, g);
			uint64_t s, e;

			if (j < 0)
				continue;
			s = corr(x, x->s.coll[j].start_ns);
			e = corr(x, gpu ? x->s.coll[j].gpu_end_ns : x->s.coll[j].end_ns);
			ends[present] = (int64_t)e;
			if (present++ == 0)
				sig = x->s.coll[j].sig;
			else if (x->s.coll[j].sig != sig)
				same = false;
			emin = e < emin ? e : emin;
			emax = e > emax ? e : emax;
			smin = s < smin ? s : smin;
			if (s >= smax) {
				smax = s;
				last = i;
			}
		}
		if (present < 2 || !same)
			continue;
		spread[nspread++] = emax - emin;
		m->skew_gpu += gpu;
		/* each rank's end against the median end of the others (leave one out: with two
		 * ranks, each one's residual is the whole gap between them) */
		qsort(ends, present, sizeof(*ends), cmp_i64);
		for (size_t p = 0; p < present; p++) {
			size_t mo = present - 1;
			int64_t med = mo % 2 ? other_at(ends, p, mo / 2)
					     : (other_at(ends, p, mo / 2 - 1) + other_at(ends, p, mo / 2)) / 2;

			resid[nresid++] = ends[p] > med ? (uint64_t)(ends[p] - med) : (uint64_t)(med - ends[p]);
		}
		if (present != m->aligned)
			continue;
		m->complete++;
		for (size_t i = 0; i < m->n; i++) {
			struct rank_state *x = &m->r[i];
			long j = coll_at(x, g);

			if (j < 0)
				continue;
			x->late[x->nlate++] = corr(x, x->s.coll[j].start_ns) - smin;
			x->late_sum_ns += (double)(corr(x, x->s.coll[j].start_ns) - smin);
		}
		m->r[last].last_arrivals++;
	}
	m->skew_n = nspread;
	if (nspread) {
		m->spread_max = merge_quantile_u64(spread, nspread, 1.0);
		m->spread_p50 = merge_quantile_u64(spread, nspread, 0.5);
		m->skew_max = merge_quantile_u64(resid, nresid, 1.0);
		m->skew_p50 = merge_quantile_u64(resid, nresid, 0.5);
	}
	free(spread);
	free(resid);
	free(ends);
	return 0;
}

/* ---- findings -------------------------------------------------------------------------- */

static json_t *finding(struct merge *m, const char *category, const char *severity, const struct rank_state *x,
		       const char *summary, json_t *evidence, const char *remedy)
{
	json_t *f = json_pack("{s:s,s:s,s:s,s:o,s:s}", "category", category, "severity", severity, "summary", summary,
			      "evidence", evidence ? evidence : json_object(), "remedy", remedy);

	if (f && x) {
		char name[300];

		rank_name(x, name, sizeof(name));
		json_object_set_new(f, "rank", json_integer(x->s.rank));
		json_object_set_new(f, "source", json_string(x->s.label));
		json_object_set_new(f, "rank_name", json_string(name));
	}
	if (f)
		json_array_append_new(m->findings, f);
	return f;
}

static void rule_straggler(struct merge *m)
{
	double total = 0, late_min;
	size_t worst = m->n;
	uint64_t first = UINT64_MAX, lastend = 0;

	if (m->aligned < 2 || m->complete < STRAG_MIN_COLLECTIVES)
		return;
	late_min = (double)STRAG_MIN_LATE_NS;
	if (STRAG_MIN_OF_PERIOD * (double)m->period_ns > late_min)
		late_min = STRAG_MIN_OF_PERIOD * (double)m->period_ns;
	for (size_t i = 0; i < m->n; i++) {
		struct rank_state *x = &m->r[i];

		total += x->late_sum_ns;
		x->late_count = 0;
		for (size_t k = 0; k < x->nlate; k++)
			x->late_count += (double)x->late[k] >= late_min;
		if (x->aligned && (worst == m->n || x->late_sum_ns > m->r[worst].late_sum_ns))
			worst = i;
	}
	/* the span the matched collectives cover, on the reference clock */
	for (size_t i = 0; i < m->n; i++) {
		const struct rank_state *x = &m->r[i];

		if (!x->aligned)
			continue;
		if (corr(x, x->s.coll[0].start_ns) < first)
			first = corr(x, x->s.coll[0].start_ns);
		if (corr(x, x->s.coll[x->s.ncoll - 1].end_ns) > lastend)
			lastend = corr(x, x->s.coll[x->s.ncoll - 1].end_ns);
	}
	if (worst == m->n || total <= 0)
		return;
	{
		struct rank_state *x = &m->r[worst];
		double share = x->late_sum_ns / total, late_share = (double)x->late_count / (double)m->complete;
		double cost = x->late_sum_ns / (double)(lastend > first ? lastend - first : 1);
		uint64_t *v = malloc((x->nlate + 1) * sizeof(*v)), med;
		size_t n = 0;
		char summary[700], name[300];
		bool critical;

		if (!v)
			return;
		for (size_t k = 0; k < x->nlate; k++)
			if ((double)x->late[k] >= late_min)
				v[n++] = x->late[k];
		med = merge_quantile_u64(v, n, 0.5);
		free(v);
		if (share < STRAG_MIN_SHARE || late_share < STRAG_MIN_LATE_SHARE || x->late_count < STRAG_MIN_COLLECTIVES ||
		    cost < STRAG_MIN_COST)
			return;
		critical = m->period_ns && (double)med >= STRAG_CRITICAL_PERIOD * (double)m->period_ns;
		rank_name(x, name, sizeof(name));
		snprintf(summary, sizeof(summary),
			 "%s is the straggler: last into %zu of %zu matched collectives, by a median %.1f ms "
			 "(step period %.1f ms); it causes %.0f%% of all ranks' waiting at collectives, "
			 "%.0f%% of the time the others spend in the window.",
			 name, x->late_count, m->complete, (double)med / 1e6, (double)m->period_ns / 1e6, 100 * share,
			 100 * cost);
		finding(m, "Straggler", critical ? "critical" : "warning", x, summary,
			json_pack("{s:i,s:I,s:I,s:f,s:f,s:f,s:f,s:f}", "straggler_rank", x->s.rank,
				  "late_collectives", (json_int_t)x->late_count, "matched_collectives",
				  (json_int_t)m->complete, "median_lateness_us", (double)merge_round((double)med / 1e3),
				  "step_period_us", (double)merge_round((double)m->period_ns / 1e3), "share_of_lateness",
				  (double)merge_round(share * 1000) / 1000, "late_share", (double)merge_round(late_share * 1000) / 1000,
				  "others_waiting_share", (double)merge_round(cost * 1000) / 1000),
			"Look at this rank's work before its collectives (its own flame graph and timeline): "
			"data loading, host-side work, a slower GPU or node; balance the work or move it off "
			"the critical path.");
	}
}

/* Is the rank, silent since `from` (its own clock), blocked inside a collective? 1 yes,
 * 0 blocked elsewhere, -1 unknown (no off-CPU data). what: the wait. */
static int blocked_in_collective(const struct rank_state *x, uint64_t from, uint64_t to, char *what, size_t len)
{
	const struct merge_wait *best = NULL;
	uint64_t best_cov = 0;
	char sc[32];

	snprintf(what, len, "unknown (no off-CPU data)");
	if (x->s.hang_blocked_in[0] && strcasestr(x->s.hang_blocked_in, "nccl")) {
		snprintf(what, len, "%s", x->s.hang_blocked_in);
		return 1;
	}
	for (size_t k = 0; k < x->s.nwaits; k++) {
		const struct merge_wait *w = &x->s.waits[k];
		uint64_t s = w->ts_ns > from ? w->ts_ns : from, e = w->ts_ns + w->dur_ns < to ? w->ts_ns + w->dur_ns : to;

		if (e > s && e - s > best_cov) {
			best_cov = e - s;
			best = w;
		}
	}
	if (!best || (double)best_cov < HANG_BLOCKED_SHARE * (double)(to - from)) {
		if (x->s.offcpu_known)
			snprintf(what, len, "running or runnable (not blocked most of the silence)");
		return x->s.offcpu_known ? 0 : -1;
	}
	snprintf(what, len, "%s", best->what);
	if (best->in_nccl)
		return 1;
	/* No NCCL frame (a C library without frame pointers ends the stack early): a rank
	 * blocked in a collective waits on a synchronisation primitive or the network. */
	snprintf(sc, sizeof(sc), "%.*s", (int)strcspn(best->what, ":"), best->what);
	if (!strcmp(sc, "futex") || !strcmp(sc, "poll") || !strcmp(sc, "ppoll") || !strncmp(sc, "epoll_", 6) ||
	    !strcmp(sc, "sched_yield") || !strcmp(sc, "select") || !strcmp(sc, "pselect6") || !strcmp(sc, "-"))
		return 1;
	return 0;
}

static void rule_nccl_hang(struct merge *m)
{
	uint64_t threshold = HANG_MIN_NS;
	long maxg = LONG_MIN;
	uint64_t maxg_start = UINT64_MAX;
	char missing[512] = "", blocked[1024] = "", missing_ranks[256] = "", blocked_ranks[256] = "";
	size_t nstuck = 0, nmissing = 0, nblocked = 0, nunknown = 0;
	bool behind = false;
	char what[256], name[300];
	json_t *ev;

	if (m->aligned < 2)
		return;
	if (HANG_PERIOD_FACTOR * (double)m->period_ns > (double)threshold)
		threshold = (uint64_t)(HANG_PERIOD_FACTOR * (double)m->period_ns);
	for (size_t i = 0; i < m->n; i++) {
		const struct rank_state *x = &m->r[i];
		long g = x->aligned ? last_g(x) : LONG_MIN;

		if (g > maxg)
			maxg = g;
	}
	for (size_t i = 0; i < m->n; i++) {
		const struct rank_state *x = &m->r[i];
		long j = coll_at(x, maxg);

		if (j >= 0 && corr(x, x->s.coll[j].start_ns) < maxg_start)
			maxg_start = corr(x, x->s.coll[j].start_ns);
		if (x->aligned && x->s.win_end_ns > x->s.last_api_end_ns &&
		    x->s.win_end_ns - x->s.last_api_end_ns >= threshold)
			nstuck++;
	}
	if (!nstuck)
		return;
	/* a rank behind by a collective while it was still observed: the ranks that made that
	 * collective entered it (asynchronous NCCL: the call returned) */
	for (size_t i = 0; i < m->n; i++) {
		const struct rank_state *x = &m->r[i];

		if (x->aligned && last_g(x) < maxg &&
		    corr(x, x->s.win_end_ns) >= maxg_start + threshold)
			behind = true;
	}
	for (size_t i = 0; i < m->n; i++) {
		const struct rank_state *x = &m->r[i];
		long g = x->aligned ? last_g(x) : LONG_MIN;
		bool silent = x->s.win_end_ns > x->s.last_api_end_ns && x->s.win_end_ns - x->s.last_api_end_ns >= threshold;
		int in_coll = -1;
		size_t l;

		if (!x->aligned)
			continue;
		rank_name(x, name, sizeof(name));
		if (g < maxg) {
			/* the others entered collective maxg (and it returned: asynchronous NCCL);
			 * this rank was still observed a hang threshold later and never did */
			if (corr(x, x->s.win_end_ns) < maxg_start + threshold)
				continue;   /* its window ended first: no evidence either way */
			snprintf(what, sizeof(what), "after collective #%ld it made %s", g,
				 silent ? "no further CUDA/NCCL call" : "other calls, no collective");
			in_coll = 0;
		} else if (behind) {
			snprintf(what, sizeof(what), "entered collective #%ld (the call returned), then %s", g,
				 silent ? "made no further CUDA/NCCL call" : "other calls");
			in_coll = 1;
		} else if (silent) {
			in_coll = blocked_in_collective(x, x->s.last_api_end_ns, x->s.win_end_ns, what, sizeof(what));
		} else {
			snprintf(what, sizeof(what), "still running (CUDA calls, no collective)");
			in_coll = 0;
		}
		if (in_coll == 1) {
			nblocked++;
			l = strlen(blocked);
			snprintf(blocked + l, sizeof(blocked) - l, "%s%s: %s", l ? "; " : "", name, what);
			l = strlen(blocked_ranks);
			snprintf(blocked_ranks + l, sizeof(blocked_ranks) - l, "%s%d", l ? "," : "", x->s.rank);
		} else if (in_coll == 0) {
			nmissing++;
			l = strlen(missing);
			snprintf(missing + l, sizeof(missing) - l, "%s%s: %s", l ? "; " : "", name, what);
			l = strlen(missing_ranks);
			snprintf(missing_ranks + l, sizeof(missing_ranks) - l, "%s%d", l ? "," : "", x->s.rank);
		} else {
			nunknown++;
		}
	}
	{
		char summary[1400];
		bool named = nmissing > 0 && nblocked > 0;

		if (named)
			snprintf(summary, sizeof(summary),
				 "NCCL hang: rank%s %s never entered the collective that rank%s %s %s blocked in "
				 "(silent for at least %.1f s before the window ended). Never entered: %s. Blocked: %s.",
				 nmissing > 1 ? "s" : "", missing_ranks, nblocked > 1 ? "s" : "", blocked_ranks,
				 nblocked > 1 ? "are" : "is", (double)threshold / 1e9, missing, blocked);
		else
			snprintf(summary, sizeof(summary),
				 "NCCL hang: %zu rank%s stopped making progress (silent for at least %.1f s before the "
				 "window ended), but which rank did not enter the collective cannot be told%s.",
				 nstuck, nstuck > 1 ? "s" : "", (double)threshold / 1e9,
				 nunknown ? " (no off-CPU data for some ranks: run with the offcpu collector)" : "");
		ev = json_pack("{s:s,s:s,s:s,s:s,s:I,s:f}", "never_entered_ranks", named ? missing_ranks : "unknown",
			       "blocked_ranks", blocked_ranks, "never_entered", missing, "blocked_in", blocked,
			       "last_matched_collective", (json_int_t)maxg, "threshold_s", (double)threshold / 1e9);
		finding(m, "NcclHang", named ? "critical" : "warning", NULL, summary, ev,
			"Find why the rank that never arrived stopped (its own timeline and off-CPU flame "
			"graph show where it is blocked); set NCCL_DEBUG=INFO and collective timeouts "
			"(TORCH_NCCL_ASYNC_ERROR_HANDLING, a watchdog) so a hang fails fast.");
		if (named && nmissing == 1) {
			for (size_t i = 0; i < m->n; i++) {
				json_t *f = json_array_get(m->findings, json_array_size(m->findings) - 1);
				char lbl[16];

				snprintf(lbl, sizeof(lbl), "%d", m->r[i].s.rank);
				if (m->r[i].aligned && !strcmp(lbl, missing_ranks)) {
					json_object_set_new(f, "rank", json_integer(m->r[i].s.rank));
					json_object_set_new(f, "source", json_string(m->r[i].s.label));
				}
			}
		}
	}
}

/* ---- the merged timeline --------------------------------------------------------------- */

struct gzout {
	gzFile gz;
	int err;
	char *buf;
	size_t cap;
};

static void gz_put(struct gzout *o, const char *s, size_t n)
{
	if (!o->err && n && gzwrite(o->gz, s, (unsigned)n) != (int)n)
		o->err = -EIO;
}

static void gz_puts(struct gzout *o, const char *s)
{
	gz_put(o, s, strlen(s));
}

static void gz_json(struct gzout *o, const json_t *j)
{
	size_t need = json_dumpb(j, o->buf, o->cap, JSON_COMPACT | JSON_ENCODE_ANY | JSON_REAL_PRECISION(16));

	if (need > o->cap) {
		char *p = realloc(o->buf, need + 4096);

		if (!p) {
			o->err = -ENOMEM;
			return;
		}
		o->buf = p;
		o->cap = need + 4096;
		need = json_dumpb(j, o->buf, o->cap, JSON_COMPACT | JSON_ENCODE_ANY | JSON_REAL_PRECISION(16));
	}
	if (!need) {
		o->err = o->err ? o->err : -EINVAL;
		return;
	}
	gz_put(o, o->buf, need);
}

static json_t *prefixed(size_t idx, const json_t *v)
{
	char buf[128];

	if (json_is_integer(v))
		snprintf(buf, sizeof(buf), "r%zu.%lld", idx, (long long)json_integer_value(v));
	else if (json_is_string(v))
		snprintf(buf, sizeof(buf), "r%zu.%.100s", idx, json_string_value(v));
	else
		return NULL;
	return json_string(buf);
}

/* A non-metadata event copied as text with pid, ts, id and sf rewritten (it was validated
 * by jansson when it was read): no tree built, nothing reformatted. */
struct rewrite {
	struct gzout *o;
	const char *ev;
	size_t idx;
	int64_t offset_ns;
	bool first;
};

static int rewrite_member(void *ctx, const struct merge_member *mb)
{
	struct rewrite *w = ctx;
	const char *v = w->ev + mb->off;
	char buf[96];

	gz_puts(w->o, w->first ? "{\"" : ",\"");
	w->first = false;
	gz_put(w->o, mb->key, mb->key_len);
	gz_puts(w->o, "\":");
	if (mb->key_len == 3 && !memcmp(mb->key, "pid", 3)) {
		long pid = strtol(v, NULL, 10);

		snprintf(buf, sizeof(buf), "%ld", ((long)(w->idx + 1) << PID_SHIFT) | (pid & ((1L << PID_SHIFT) - 1)));
		gz_puts(w->o, buf);
	} else if (mb->key_len == 2 && !memcmp(mb->key, "ts", 2)) {
		int64_t ns = merge_round(strtod(v, NULL) * 1000.0) - w->offset_ns;

		if (ns < 0)
			ns = 0;
		snprintf(buf, sizeof(buf), "%lld.%03lld", (long long)(ns / 1000), (long long)(ns % 1000));
		gz_puts(w->o, buf);
	} else if ((mb->key_len == 2 && !memcmp(mb->key, "id", 2)) || (mb->key_len == 2 && !memcmp(mb->key, "sf", 2))) {
		snprintf(buf, sizeof(buf), "\"r%zu.", w->idx);
		gz_puts(w->o, buf);
		if (v[0] == '"')
			gz_put(w->o, v + 1, mb->len - 1);
		else {
			gz_put(w->o, v, mb->len);
			gz_puts(w->o, "\"");
		}
	} else {
		gz_put(w->o, v, mb->len);
	}
	return w->o->err;
}

static int write_rank_events(struct merge *m, size_t idx, struct gzout *o, bool *first)
{
	struct rank_state *x = &m->r[idx];
	char name[300];
	json_error_t jerr;

	rank_name(x, name, sizeof(name));
	for (size_t k = 0; k < x->s.nev && !o->err; k++) {
		const char *ph, *mname;
		json_t *e, *v;
		long pid;

		if (!x->s.ev[k].meta) {
			struct rewrite rw = { o, x->s.tl + x->s.ev[k].off, idx, x->offset_ns, true };

			if (!*first)
				gz_puts(o, ",\n");
			*first = false;
			if (merge_json_members(rw.ev, x->s.ev[k].len, rewrite_member, &rw) < 0)
				return o->err ? o->err : -EBADMSG;
			gz_puts(o, "}");
			continue;
		}
		/* metadata: the process names and order are the merge's */
		e = json_loadb(x->s.tl + x->s.ev[k].off, x->s.ev[k].len, 0, &jerr);
		ph = json_string_value(json_object_get(e, "ph"));
		mname = json_string_value(json_object_get(e, "name"));
		pid = (long)json_integer_value(json_object_get(e, "pid"));
		if (!e || !ph) {
			json_decref(e);
			return -EBADMSG;   /* was validated on reading */
		}
		json_object_set_new(e, "pid", json_integer(((long)(idx + 1) << PID_SHIFT) | (pid & ((1L << PID_SHIFT) - 1))));
		if (mname && !strcmp(mname, "process_name")) {
			json_t *args = json_object_get(e, "args");
			const char *orig = json_string_value(json_object_get(args, "name"));
			char buf[700];

			if (pid == x->s.pid || x->s.pid == 0)
				snprintf(buf, sizeof(buf), "%s", name);
			else
				snprintf(buf, sizeof(buf), "%s: %s", name, orig ? orig : "process");
			json_object_set_new(e, "args", json_pack("{s:s}", "name", buf));
		} else if (mname && !strcmp(mname, "process_sort_index")) {
			json_object_set_new(e, "args", json_pack("{s:I}", "sort_index",
								 (json_int_t)idx * 16 + (pid == x->s.pid ? 0 : 1)));
		}
		if ((v = json_object_get(e, "id")) && (v = prefixed(idx, v)))
			json_object_set_new(e, "id", v);
		if ((v = json_object_get(e, "sf")) && (v = prefixed(idx, v)))
			json_object_set_new(e, "sf", v);
		if (!*first)
			gz_puts(o, ",\n");
		*first = false;
		gz_json(o, e);
		json_decref(e);
	}
	return o->err;
}

static int write_timeline(struct merge *m, const char *dir)
{
	char path[4200];
	struct gzout o = { 0 };
	bool first = true, ffirst = true;
	json_t *other;
	int r = 0;

	snprintf(path, sizeof(path), "%s/timeline.json.gz", dir);
	o.gz = gzopen(path, "wb6");
	if (!o.gz)
		return errno ? -errno : -ENOMEM;
	gz_puts(&o, "{\"traceEvents\":[\n");
	for (size_t i = 0; i < m->n && !o.err; i++)
		r = write_rank_events(m, i, &o, &first);
	gz_puts(&o, "\n],\"stackFrames\":{");
	for (size_t i = 0; i < m->n && !o.err && r == 0; i++) {
		const char *key;
		json_t *f;

		json_object_foreach(m->r[i].s.frames, key, f) {
			json_t *c = json_deep_copy(f), *p;
			char k[140];

			if (!c) {
				o.err = -ENOMEM;
				break;
			}
			if ((p = json_object_get(c, "parent")) && (p = prefixed(i, p)))
				json_object_set_new(c, "parent", p);
			snprintf(k, sizeof(k), "r%zu.%.100s", i, key);
			gz_puts(&o, ffirst ? "\n" : ",\n");
			ffirst = false;
			{
				json_t *ks = json_string(k);

				gz_json(&o, ks);
				json_decref(ks);
			}
			gz_puts(&o, ":");
			gz_json(&o, c);
			json_decref(c);
		}
	}
	gz_puts(&o, "},\"displayTimeUnit\":\"ms\",\"otherData\":");
	other = json_pack("{s:s,s:s,s:I}", "producer", "aiprof merge",
			  "clock", "CLOCK_MONOTONIC of the reference rank, microseconds; the other ranks' times are "
			  "shifted by the offsets in summary.json",
			  "ranks", (json_int_t)m->n);
	if (other) {
		if (m->ref < m->n)
			json_object_set_new(other, "reference_rank", json_integer(m->r[m->ref].s.rank));
		gz_json(&o, other);
		json_decref(other);
	}
	gz_puts(&o, "}\n");
	if (gzclose(o.gz) != Z_OK && !o.err)
		o.err = -EIO;
	free(o.buf);
	return r ? r : o.err;
}

/* ---- summary.json (aiprof.merge/v1) and manifest.json ------------------------------------ */

static double us(uint64_t ns)
{
	return (double)merge_round((double)ns) / 1e3;
}

static const char *basis(const struct merge *m)
{
	size_t gpu = 0;

	for (size_t i = 0; i < m->n; i++)
		gpu += m->r[i].aligned && m->r[i].gpu;
	return m->aligned < 2 ? "none" : gpu == m->aligned ? "gpu_kernel_end" : gpu ? "mixed" : "host_call_end";
}

/* compared: whether another rank was aligned with it (else it has no alignment basis) */
static json_t *rank_json(const struct rank_state *x, size_t idx, bool compared, bool is_ref)
{
	char name[300];
	uint64_t *v = malloc((x->nlate + 1) * sizeof(*v)), med = 0, mx = 0;
	double mean = 0;
	json_t *j, *own = json_array(), *f;
	size_t i;

	if (v) {
		memcpy(v, x->late, x->nlate * sizeof(*v));
		med = merge_quantile_u64(v, x->nlate, 0.5);
		mx = merge_quantile_u64(v, x->nlate, 1.0);
		free(v);
	}
	if (x->nlate)
		mean = x->late_sum_ns / (double)x->nlate;
	rank_name(x, name, sizeof(name));
	json_array_foreach(json_object_get(x->s.summary, "findings"), i, f) {
		json_t *c = json_object_get(f, "category"), *s = json_object_get(f, "severity"),
		       *t = json_object_get(f, "summary");

		if (json_is_string(c))
			json_array_append_new(own, json_pack("{s:O,s:O*,s:O*}", "category", c, "severity", s,
							     "summary", t));
	}
	j = json_pack("{s:i,s:i,s:s,s:s,s:s?,s:s?,s:s?,s:I,s:I,s:I,s:I,s:b,s:s?,s:s?,s:I,s:f,s:I,s:I,s:f,s:b,s:f,"
		      "s:f,s:f,s:f,s:f,s:I,s:I,s:o}",
		      "rank", x->s.rank, "nranks", x->s.nranks, "name", name, "source", x->s.label,
		      "pod", x->s.pod, "host", x->s.host, "session", x->s.session,
		      "pid", (json_int_t)(((long)(idx + 1) << PID_SHIFT) | (x->s.pid & ((1L << PID_SHIFT) - 1))),
		      "original_pid", (json_int_t)x->s.pid, "tid", (json_int_t)x->s.tid,
		      "collectives", (json_int_t)x->s.ncoll, "aligned", x->aligned,
		      "alignment_basis", !x->aligned || !compared ? NULL : x->gpu ? "gpu_kernel_end" : "host_call_end",
		      "clock", !x->aligned || !compared ? NULL : is_ref ? "reference" : x->fit.same_clock ? "shared" : "fitted",
		      "gpu_kernel_ends", (json_int_t)gpu_ends(x),
		      "offset_us", (double)x->offset_ns / 1e3, "shift", (json_int_t)x->fit.shift,
		      "matched", (json_int_t)x->fit.matched, "fit_mad_us", us(x->fit.mad_ns),
		      "ambiguous", x->fit.ambiguous,
		      "window_start_us", us(corr(x, x->s.win_start_ns)), "window_end_us", us(corr(x, x->s.win_end_ns)),
		      "median_lateness_us", us(med), "mean_lateness_us", (double)merge_round(mean) / 1e3, "max_lateness_us", us(mx),
		      "late_collectives", (json_int_t)x->late_count, "last_arrivals", (json_int_t)x->last_arrivals,
		      "findings", own);
	return j;
}

static json_t *build_summary(struct merge *m)
{
	char created[32];
	time_t now = time(NULL);
	struct tm tm;
	json_t *ranks = json_array();

	gmtime_r(&now, &tm);
	strftime(created, sizeof(created), "%Y-%m-%dT%H:%M:%SZ", &tm);
	for (size_t i = 0; i < m->n; i++)
		json_array_append_new(ranks, rank_json(&m->r[i], i, m->aligned > 1, i == m->ref));
	return json_pack("{s:s,s:s,s:s,s:i,s:I,s:o,s:{s:s,s:s,s:I,s:I,s:I,s:{s:f,s:f,s:I},s:{s:f,s:f}},s:f,s:O,s:O}",
		      "schema", "aiprof.merge/v1", "aiprof_version", AIPROF_VERSION, "created", created,
		      "reference_rank", m->ref < m->n ? m->r[m->ref].s.rank : -1,
		      "aligned_ranks", (json_int_t)m->aligned, "ranks", ranks,
		      "alignment", "method", "collective end times (GPU kernel ends where the ranks have them, "
		      "else host call ends): median offset over collectives matched by number in the world "
		      "communicator; a rank on the reference rank's clock (same kernel boot and time namespace: "
		      "rank clock \"shared\") keeps offset 0 and only its collectives' numbering is matched",
		      "basis", basis(m),
		      "collectives_matched_all_ranks", (json_int_t)m->complete,
		      "collectives_compared", (json_int_t)m->skew_n,
		      "collectives_compared_on_gpu", (json_int_t)m->skew_gpu,
		      "residual_skew_us", "p50", us(m->skew_p50), "max", us(m->skew_max), "collectives",
		      (json_int_t)m->skew_n, "end_spread_us", "p50", us(m->spread_p50), "max", us(m->spread_max),
		      "step_period_us", us(m->period_ns), "findings", m->findings, "warnings", m->warnings);
}

static int write_summary(struct merge *m, const char *dir)
{
	char path[4200];
	json_t *j = build_summary(m);
	int r;

	if (!j)
		return -ENOMEM;
	snprintf(path, sizeof(path), "%s/summary.json", dir);
	r = json_dump_file(j, path, JSON_INDENT(1) | JSON_REAL_PRECISION(12)) < 0 ? -EIO : 0;
	json_decref(j);
	return r;
}

static int write_local_manifest(const char *dir)
{
	static const char *names[] = { "summary.json", "timeline.json.gz" };
	json_t *arts = json_array(), *j;
	char path[4200], created[32], hex[SHA256_LEN * 2 + 1];
	uint64_t total = 0;
	time_t now = time(NULL);
	struct tm tm;
	int r = 0;

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		uint8_t d[SHA256_LEN];
		uint64_t size = 0;
		int fd;

		snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
		fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0 || sha256_fd(fd, d, &size) < 0) {
			r = -errno ? -errno : -EIO;
			if (fd >= 0)
				close(fd);
			json_decref(arts);
			return r;
		}
		close(fd);
		hex_encode(d, sizeof(d), hex);
		json_array_append_new(arts, json_pack("{s:s,s:I,s:s,s:s}", "name", names[i], "size", (json_int_t)size,
						      "sha256", hex, "content_type",
						      i ? "application/gzip" : "application/json"));
		total += size;
	}
	gmtime_r(&now, &tm);
	strftime(created, sizeof(created), "%Y-%m-%dT%H:%M:%SZ", &tm);
	j = json_pack("{s:s,s:s,s:s,s:o,s:I}", "schema", "aiprof.manifest/v1", "created", created, "location", dir,
		      "artifacts", arts, "total_bytes", (json_int_t)total);
	snprintf(path, sizeof(path), "%s/manifest.json", dir);
	r = j && json_dump_file(j, path, JSON_INDENT(1)) == 0 ? 0 : -EIO;
	json_decref(j);
	return r;
}

/* ---- the command ----------------------------------------------------------------------- */

/* Checks that the loaded sources belong together, aligns and analyses them. Returns 0,
 * -EINVAL (msg says why), -ENOMEM. */
/*
 * The ranks grouped by the stack of their main thread as their windows closed (each rank's
 * stacks.json): the ones in no collective while others wait in one never arrived. Seen
 * without any collective recorded (a hang that began before the windows, a backend with no
 * hooks such as gloo). Next to a hook-based NcclHang it becomes that finding's evidence.
 */
static void rule_stacks(struct merge *m)
{
	struct stacks_merge *sm = NULL;
	json_t *f, *hang = NULL, *v;
	char msg[512];
	size_t i;

	for (i = 0; i < m->n; i++)
		if (!m->r[i].s.stacks)
			return;
	if (m->n < 2 || stacks_merge__new(&sm) < 0)
		return;
	for (i = 0; i < m->n; i++)
		if (stacks_merge__add_ranked(sm, m->r[i].s.label, m->r[i].s.stacks,
					     m->r[i].s.stacks_len, m->r[i].s.rank, msg,
					     sizeof(msg)) < 0) {
			warn(m, "the ranks are not grouped by stack: %s", msg);
			goto out;
		}
	if (stacks_merge__run(sm) < 0)
		goto out;
	f = stacks_merge__finding(sm);
	if (!f)
		goto out;
	json_array_foreach(m->findings, i, v)
		if (!strcmp(json_string_value(json_object_get(v, "category")) ?: "", "NcclHang"))
			hang = v;
	if (hang) {
		json_object_set(json_object_get(hang, "evidence"), "stacks_not_arrived",
				json_object_get(f, "not_arrived"));
		json_decref(f);
		goto out;
	}
	json_object_set_new(f, "remedy", json_string("Find why the ranks that never arrived "
			    "stopped (their stacks are in the evidence); set collective timeouts so "
			    "that a hang fails fast instead of waiting forever."));
	json_array_append_new(m->findings, f);
out:
	stacks_merge__free(sm);
}

static int merge_prepare(struct merge *m, char *msg, size_t len)
{
	int r = check_sources(m, msg, len);

	if (r < 0)
		return r;
	qsort(m->r, m->n, sizeof(*m->r), cmp_rank);
	if (m->n && m->r[0].s.nranks > 0 && m->n < (size_t)m->r[0].s.nranks)
		warn(m, "%zu of the job's %d ranks were given: the merge covers those only", m->n, m->r[0].s.nranks);
	r = align(m);
	if (r == 0)
		r = analyse_collectives(m);
	if (r < 0) {
		snprintf(msg, len, "out of memory");
		return r;
	}
	rule_nccl_hang(m);
	rule_straggler(m);
	rule_stacks(m);
	return 0;
}

static void merge_clear(struct merge *m);

int merge_analyse(struct merge_source *srcs, size_t n, json_t **ret, char *msg, size_t msglen)
{
	struct merge m = { .findings = json_array(), .warnings = json_array() };
	int r = -ENOMEM;

	m.r = calloc(n + 1, sizeof(*m.r));
	if (m.r && m.findings && m.warnings) {
		for (size_t i = 0; i < n; i++) {
			m.r[i].s = srcs[i];
			memset(&srcs[i], 0, sizeof(srcs[i]));
		}
		m.n = n;
		r = merge_prepare(&m, msg, msglen);
		if (r == 0) {
			*ret = build_summary(&m);
			r = *ret ? 0 : -ENOMEM;
		}
	}
	merge_clear(&m);
	return r;
}

static void merge_clear(struct merge *m)
{
	for (size_t i = 0; i < m->n; i++) {
		merge_source__clear(&m->r[i].s);
		free(m->r[i].late);
	}
	free(m->r);
	json_decref(m->findings);
	json_decref(m->warnings);
}

void merge__free(struct merge *m)
{
	if (!m)
		return;
	merge_clear(m);
	free(m);
}

int merge__load(char *const *srcs, size_t n, struct s3_client *s3, struct merge **ret,
		char *msg, size_t len)
{
	struct merge *m = calloc(1, sizeof(*m));
	int r;

	*ret = m;
	if (!m)
		goto nomem;
	m->findings = json_array();
	m->warnings = json_array();
	m->r = calloc(n, sizeof(*m->r));
	if (!m->r || !m->findings || !m->warnings)
		goto nomem;
	for (size_t i = 0; i < n; i++) {
		const struct merge_source *src = &m->r[m->n].s;

		msg[0] = 0;
		r = merge_source__load(&m->r[m->n].s, srcs[i], s3, msg, len);
		m->n++;
		if (r < 0) {
			if (!msg[0])
				snprintf(msg, len, "%s", strerror(-r));
			return r;
		}
		log_info("%s: rank %d of %d, %zu collectives, %zu events", srcs[i], src->rank,
			 src->nranks, src->ncoll, src->nev);
	}
	return merge_prepare(m, msg, len);
nomem:
	snprintf(msg, len, "out of memory");
	return -ENOMEM;
}

int merge__write(struct merge *m, const char *dir, bool local_manifest)
{
	int r = write_timeline(m, dir);

	if (r == 0)
		r = write_summary(m, dir);
	if (r == 0 && local_manifest)
		r = write_local_manifest(dir);
	return r;
}

void merge__stats(const struct merge *m, struct merge_stats *ret)
{
	*ret = (struct merge_stats){
		.ranks = m->n, .aligned = m->aligned, .findings = json_array_size(m->findings),
		.ref_rank = m->ref < m->n ? m->r[m->ref].s.rank : -1, .basis = basis(m),
		.skew_p50 = m->skew_p50, .skew_max = m->skew_max, .skew_n = m->skew_n,
	};
}

bool merge__finding(const struct merge *m, size_t i, const char **category, const char **severity)
{
	json_t *f = json_array_get(m->findings, i);

	if (!f)
		return false;
	*category = json_string_value(json_object_get(f, "category"));
	*severity = json_string_value(json_object_get(f, "severity"));
	return true;
}
