/* SPDX-License-Identifier: MIT */
/*
 * The clock offset between two ranks from their collectives (contract in merge.h). Pure:
 * no I/O, no clock; unit-tested in tests/unit/test_merge.c.
 */
#include <errno.h>
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

int merge_fit_offset(const struct merge_coll *ref, size_t nref, const struct merge_coll *x, size_t nx,
		     struct merge_fit *ret)
{
	size_t most = nref < nx ? nref : nx, need;
	int64_t *d = NULL, *res = NULL;
	struct merge_fit best = { .ok = false, .runner_up_mad_ns = UINT64_MAX };
	uint64_t second = UINT64_MAX;

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
	if (!d || !res) {
		free(d);
		free(res);
		return -ENOMEM;
	}
	for (long shift = -(long)(nx - 1); shift <= (long)nref - 1; shift++) {
		size_t lo = shift < 0 ? (size_t)(-shift) : 0;
		size_t hi = (size_t)((long)nref - shift) < nx ? (size_t)((long)nref - shift) : nx;
		size_t m, n = 0, bad = 0, limit;
		int64_t off;
		uint64_t mad;

		if (hi <= lo)
			continue;
		m = hi - lo;
		if (m < need)
			continue;
		limit = m / 10;
		for (size_t j = lo; j < hi; j++) {
			const struct merge_coll *a = &ref[(size_t)((long)j + shift)];

			if (a->sig != x[j].sig) {
				if (++bad > limit)
					break;
				continue;
			}
			d[n++] = (int64_t)(x[j].end_ns - a->end_ns);
		}
		if (bad > limit || n < need)
			continue;
		memcpy(res, d, n * sizeof(*d));
		off = merge_median_i64(res, n);
		for (size_t k = 0; k < n; k++)
			res[k] = d[k] > off ? d[k] - off : off - d[k];
		mad = (uint64_t)merge_median_i64(res, n);
		if (!best.ok || mad < best.mad_ns || (mad == best.mad_ns && n > best.matched)) {
			if (best.ok && best.mad_ns < second)
				second = best.mad_ns;
			best = (struct merge_fit){ .ok = true, .offset_ns = off, .shift = shift, .matched = n,
						   .mad_ns = mad };
		} else if (mad < second) {
			second = mad;
		}
	}
	free(d);
	free(res);
	if (best.ok) {
		best.runner_up_mad_ns = second;
		/* a wrong shift is off by a step period: its residuals are the step-time jitter,
		 * normally far above the spread of one collective's end across ranks */
		best.ambiguous = second != UINT64_MAX && second <= 2 * best.mad_ns + 10000;
	}
	*ret = best;
	return 0;
}
