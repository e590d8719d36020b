/* SPDX-License-Identifier: MIT */
/*
 * The clock offset between two ranks from their collectives (contract in merge.h). Pure:
 * no I/O, no clock; unit-tested in tests/unit/test_merge.c.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "merge.h"

/* k-th smallest of v[0..n) (reorders v): quickselect with a three-way partition. */
static int64_t select_i64(int64_t *v, size_t n, size_t k)
{
	long l = 0, r = (long)n - 1, kk = (long)k;

	while (r > l) {
		int64_t p = v[l + (r - l) / 2], t;
		long lt = l, gt = r, i = l;

		while (i <= gt) {
			if (v[i] < p) {
				t = v[lt], v[lt] = v[i], v[i] = t;
				lt++, i++;
			} else if (v[i] > p) {
				t = v[gt], v[gt] = v[i], v[i] = t;
				gt--;
			} else {
				i++;
			}
		}
		/* v[l..lt) < p, v[lt..gt] == p, v(gt..r] > p */
		if (kk < lt)
			r = lt - 1;
		else if (kk > gt)
			l = gt + 1;
		else
			return p;
	}
	return v[kk];
}

int64_t merge_median_i64(int64_t *v, size_t n)
{
	return n ? select_i64(v, n, n / 2) : 0;
}

uint64_t merge_quantile_u64(uint64_t *v, size_t n, double q)
{
	size_t k;

	if (!n)
		return 0;
	if (q < 0)
		q = 0;
	if (q > 1)
		q = 1;
	k = (size_t)(q * (double)(n - 1) + 0.5);
	/* values are durations far below INT64_MAX; select on the same bits */
	for (size_t i = 0; i < n; i++)
		if (v[i] > INT64_MAX)
			v[i] = INT64_MAX;
	return (uint64_t)select_i64((int64_t *)v, n, k);
}

void merge_coll_number(struct merge_coll *v, size_t n)
{
	bool ok = n > 0 && v[0].seq > 0 && v[n - 1].seq >= v[0].seq && v[n - 1].seq - v[0].seq <= 4 * n + 1000;

	for (size_t i = 1; i < n && ok; i++)
		ok = v[i].seq > v[i - 1].seq;
	if (!ok)
		for (size_t i = 0; i < n; i++)
			v[i].seq = i + 1;
}

/* The pairs of ref and x whose numbers differ by shift, in order (two pointers). */
static size_t pairs_at(const struct merge_coll *ref, size_t nref, const struct merge_coll *x, size_t nx, long shift,
		       size_t *pi, size_t *pj)
{
	size_t i = 0, j = 0, n = 0;

	while (i < nref && j < nx) {
		long a = (long)ref[i].seq, b = (long)x[j].seq + shift;

		if (a == b) {
			pi[n] = i++;
			pj[n++] = j++;
		} else if (a < b) {
			i++;
		} else {
			j++;
		}
	}
	return n;
}

/* The median of d[0..n) into *off, and the median absolute deviation from it (tmp: scratch
 * of n). */
static uint64_t median_and_mad(const int64_t *d, int64_t *tmp, size_t n, int64_t *off)
{
	memcpy(tmp, d, n * sizeof(*d));
	*off = merge_median_i64(tmp, n);
	for (size_t k = 0; k < n; k++)
		tmp[k] = d[k] > *off ? d[k] - *off : *off - d[k];
	return (uint64_t)merge_median_i64(tmp, n);
}

static uint64_t abs_u64(int64_t v)
{
	return v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
}

#define SCREEN_FROM    4096   /* longer sequences: shifts are screened on a sample first */
#define SCREEN_SAMPLES 128
#define SCREEN_KEEP    8

/* ref index with that seq, or SIZE_MAX */
static size_t find_seq(const struct merge_coll *v, size_t n, long seq)
{
	size_t lo = 0, hi = n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if ((long)v[mid].seq < seq)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo < n && (long)v[lo].seq == seq ? lo : SIZE_MAX;
}

/*
 * For long sequences: the SCREEN_KEEP shifts whose sampled end differences agree best (an
 * evenly spaced sample of x, looked up in ref by number; on one clock: whose median
 * difference is nearest 0), so the full evaluation runs on a few shifts instead of all of
 * them. Returns how many were kept.
 */
static size_t screen_shifts(const struct merge_coll *ref, size_t nref, const struct merge_coll *x, size_t nx,
			    size_t need, bool same_clock, long *keep)
{
	uint64_t kept_mad[SCREEN_KEEP];
	size_t nkeep = 0, stride = nx / SCREEN_SAMPLES ? nx / SCREEN_SAMPLES : 1;
	int64_t d[SCREEN_SAMPLES + 1], res[SCREEN_SAMPLES + 1];

	for (long shift = (long)ref[0].seq - (long)x[nx - 1].seq; shift <= (long)ref[nref - 1].seq - (long)x[0].seq;
	     shift++) {
		size_t m = 0, n = 0, bad = 0, sampled = 0;
		int64_t off;
		uint64_t mad;

		for (size_t j = 0; j < nx && sampled < SCREEN_SAMPLES; j += stride, sampled++) {
			size_t i = find_seq(ref, nref, (long)x[j].seq + shift);

			if (i == SIZE_MAX)
				continue;
			m++;
			if (ref[i].sig != x[j].sig)
				bad++;
			else
				d[n++] = (int64_t)(x[j].end_ns - ref[i].end_ns);
		}
		/* the sample's share of matches stands for the overlap */
		if (!sampled || m * nx < need * sampled || bad > m / 10 || n == 0)
			continue;
		mad = median_and_mad(d, res, n, &off);
		if (same_clock)
			mad = abs_u64(off);
		if (nkeep < SCREEN_KEEP) {
			keep[nkeep] = shift;
			kept_mad[nkeep++] = mad;
		} else {
			size_t worst = 0;

			for (size_t k = 1; k < nkeep; k++)
				if (kept_mad[k] > kept_mad[worst])
					worst = k;
			if (mad < kept_mad[worst]) {
				keep[worst] = shift;
				kept_mad[worst] = mad;
			}
		}
	}
	return nkeep;
}

static int fit(const struct merge_coll *ref_in, size_t nref, const struct merge_coll *x_in, size_t nx,
	       bool same_clock, struct merge_fit *ret)
{
	long keep[SCREEN_KEEP];
	size_t nkeep = 0;
	bool screened;
	size_t most = nref < nx ? nref : nx, need;
	int64_t *d = NULL, *res = NULL;
	size_t *pi = NULL, *pj = NULL;
	struct merge_coll *ref = NULL, *x = NULL;
	struct merge_fit best = { .ok = false, .runner_up_mad_ns = UINT64_MAX };
	uint64_t second = UINT64_MAX, best_score = UINT64_MAX;
	int r = -ENOMEM;

	*ret = best;
	if (most == 0)
		return 0;
	/* a match of a few collectives at the far ends of two windows fits anything: only
	 * shifts that overlap at least half of the shorter sequence count */
	need = most < MERGE_MIN_MATCHED ? most : MERGE_MIN_MATCHED;
	if (need < (most + 1) / 2)
		need = (most + 1) / 2;
	d = malloc(most * sizeof(*d));
	res = malloc(most * sizeof(*res));
	pi = malloc(most * sizeof(*pi));
	pj = malloc(most * sizeof(*pj));
	ref = malloc(nref * sizeof(*ref));
	x = malloc(nx * sizeof(*x));
	if (!d || !res || !pi || !pj || !ref || !x)
		goto out;
	memcpy(ref, ref_in, nref * sizeof(*ref));
	memcpy(x, x_in, nx * sizeof(*x));
	merge_coll_number(ref, nref);
	merge_coll_number(x, nx);
	screened = most > SCREEN_FROM;
	if (screened)
		nkeep = screen_shifts(ref, nref, x, nx, need, same_clock, keep);
	for (long shift = (long)ref[0].seq - (long)x[nx - 1].seq, cand = 0;
	     screened ? cand < (long)nkeep : shift <= (long)ref[nref - 1].seq - (long)x[0].seq; shift++, cand++) {
		size_t m, n = 0, ngpu = 0, bad = 0, limit;
		bool gpu;
		int64_t off;
		uint64_t mad, score;

		if (screened)
			shift = keep[cand];
		m = pairs_at(ref, nref, x, nx, shift, pi, pj);

		if (m < need)
			continue;
		limit = m / 10;
		for (size_t k = 0; k < m; k++) {
			const struct merge_coll *a = &ref[pi[k]], *b = &x[pj[k]];

			if (a->sig != b->sig) {
				if (++bad > limit)
					break;
				continue;
			}
			ngpu += a->gpu_end_ns && b->gpu_end_ns;
			n++;
		}
		if (bad > limit || n < need)
			continue;
		/* the GPU ends where enough pairs have them: the host ends carry wake-up noise */
		gpu = ngpu >= need && 2 * ngpu >= n;
		n = 0;
		for (size_t k = 0; k < m; k++) {
			const struct merge_coll *a = &ref[pi[k]], *b = &x[pj[k]];

			if (a->sig != b->sig)
				continue;
			if (!gpu)
				d[n++] = (int64_t)(b->end_ns - a->end_ns);
			else if (a->gpu_end_ns && b->gpu_end_ns)
				d[n++] = (int64_t)(b->gpu_end_ns - a->gpu_end_ns);
		}
		mad = median_and_mad(d, res, n, &off);
		/* one clock: the true offset is 0, and a wrong shift's is a step period */
		score = same_clock ? abs_u64(off) : mad;
		if (!best.ok || score < best_score || (score == best_score && n > best.matched)) {
			if (best.ok && best_score < second)
				second = best_score;
			best_score = score;
			best = (struct merge_fit){ .ok = true, .offset_ns = same_clock ? 0 : off, .shift = shift,
						   .matched = n, .mad_ns = mad, .gpu = gpu, .gpu_matched = ngpu,
						   .same_clock = same_clock };
		} else if (score < second) {
			second = score;
		}
	}
	if (best.ok) {
		best.runner_up_mad_ns = second;
		/* a wrong shift is off by a step period: its residuals are the step-time jitter,
		 * normally far above the spread of one collective's end across ranks (on one
		 * clock: its median end difference is a period, the right one's about 0) */
		best.ambiguous = second != UINT64_MAX && second <= 2 * best_score + 10000;
	}
	*ret = best;
	r = 0;
out:
	free(d);
	free(res);
	free(pi);
	free(pj);
	free(ref);
	free(x);
	return r;
}

int merge_fit_offset(const struct merge_coll *ref, size_t nref, const struct merge_coll *x, size_t nx,
		     struct merge_fit *ret)
{
	return fit(ref, nref, x, nx, false, ret);
}

int merge_fit_same_clock(const struct merge_coll *ref, size_t nref, const struct merge_coll *x, size_t nx,
			 struct merge_fit *ret)
{
	return fit(ref, nref, x, nx, true, ret);
}
