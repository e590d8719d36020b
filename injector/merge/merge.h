/* SPDX-License-Identifier: MIT */
/*
 * `aiprof merge`: the ranks of one distributed job, each profiled on its own (its own host,
 * its own clock), merged into one timeline on one clock, with cross-rank findings.
 *
 *   aiprof merge -o DIR|s3://B/P [--termination-log F] SRC...
 *
 * Clocks are aligned with the collectives themselves: a blocking collective ends at one
 * shared moment on every rank, so for each rank the offset to the reference rank (the
 * lowest rank number) is the median, over matched collectives, of the difference of their
 * end times. Collectives are matched by order within the world communicator (the largest
 * one a rank uses); since each rank's window may start at a different collective, the
 * shift between the two sequences is searched: the shift whose op/bytes signatures agree
 * and whose end times, once corrected, agree best (smallest median absolute deviation) wins.
 * Where the ranks' libraries numbered their collectives (seq), matching goes by those
 * numbers, so events lost on one rank (a full ring) do not shift the rest of its window.
 * What is left after the correction — the spread of matched collective ends across ranks —
 * is the residual skew, reported as p50 and max.
 *
 * Layout: merge_align.c (the estimator, pure), merge_read.c (reading one rank's artifacts:
 * the parser of outside input, fuzzed by tests/fuzz/fuzz_merge.c), merge.c (analysis,
 * merged artifacts); the command is cli/merge.c.
 */
#ifndef AIPROF_MERGE_H
#define AIPROF_MERGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

/* ---- clock alignment (pure) ------------------------------------------------------------ */

/* One collective of one rank, in that rank's clock. sig: op and size, equal across ranks.
 * seq: its number in the communicator as the rank's library counted (timeline arg "seq"),
 * increasing along the array; 0 in any element: the array's order is used instead.
 * start_ns/end_ns: the host call; gpu_end_ns: the end of the kernel the call launched (a
 * CUPTI kernel record linked to the call by its correlation id), 0 when unknown. */
struct merge_coll {
	uint64_t start_ns, end_ns;
	uint64_t sig;
	uint64_t seq;
	uint64_t gpu_end_ns;
};

struct merge_fit {
	bool ok;                  /* false: fewer than MERGE_MIN_MATCHED collectives overlap */
	int64_t offset_ns;        /* x's clock minus ref's clock: subtract it from x's times */
	long shift;               /* ref seq = x seq + shift (seq: see merge_coll) */
	size_t matched;           /* collectives matched at that shift */
	uint64_t mad_ns;          /* median |residual| of the matched ends after correction */
	bool ambiguous;           /* another shift fits almost as well (periodic, no jitter) */
	uint64_t runner_up_mad_ns;/* the best other shift's MAD (see merge_fit_same_clock),
				   * UINT64_MAX when none */
	bool gpu;                 /* the ends compared were GPU kernel ends (see merge_fit_offset) */
	size_t gpu_matched;       /* matched pairs with a GPU end on both sides */
	bool same_clock;          /* x and ref read one clock: offset_ns is 0, the shift the one
				   * whose ends agree on it best */
};

#define MERGE_MIN_MATCHED 3

/*
 * Finds the shift and offset that put x's collectives on ref's clock (see the file comment).
 * A shift counts only when at least 90% of its matched pairs have equal signatures and at
 * least MERGE_MIN_MATCHED (or min(nref, nx) when smaller, but >= 1) pairs overlap. At a
 * shift where at least that many pairs, and at least half of the pairs, have GPU kernel ends
 * on both sides, only those pairs are compared, on their GPU ends (the shared moment of an
 * asynchronous collective; no host wake-up in it); otherwise the host call ends of all.
 * Returns 0 with *ret filled (ret->ok false when nothing could be matched), -ENOMEM.
 */
int merge_fit_offset(const struct merge_coll *ref, size_t nref, const struct merge_coll *x, size_t nx,
		     struct merge_fit *ret);

/*
 * The same for ranks known to read one clock (one kernel boot, one time namespace): the
 * offset is 0 and only the shift is searched, as the one whose matched ends differ least
 * in their median (a wrong shift's differ by a step period, however regular the steps).
 * runner_up_mad_ns is then the next shift's |median difference|; same_clock is set.
 */
int merge_fit_same_clock(const struct merge_coll *ref, size_t nref, const struct merge_coll *x, size_t nx,
			 struct merge_fit *ret);

/* Makes v's seq usable: when any is 0, not increasing, or spread over more than 4n + 1000
 * numbers, every seq becomes its index + 1. */
void merge_coll_number(struct merge_coll *v, size_t n);

/* Median of v[0..n) (sorts v); 0 for n == 0. Quantile q in [0,1] likewise (nearest rank). */
int64_t merge_median_i64(int64_t *v, size_t n);
uint64_t merge_quantile_u64(uint64_t *v, size_t n, double q);

/* Nearest integer (no libm). */
static inline int64_t merge_round(double x)
{
	return (int64_t)(x >= 0 ? x + 0.5 : x - 0.5);
}

/* ---- one rank's artifacts -------------------------------------------------------------- */

struct merge_span {
	size_t off, len;          /* one event object inside merge_source.tl */
	bool meta;                /* ph "M" */
};

/* A member of a JSON object as text: key without its quotes, value as it stands. */
struct merge_member {
	const char *key;
	size_t key_len;
	size_t off, len;          /* the value, relative to the object's text */
};

/*
 * Calls fn for each member of the JSON object at b[0..n) (structure only: values are
 * skipped, not validated). Returns 0, -EBADMSG, or fn's negative return.
 */
int merge_json_members(const char *b, size_t n, int (*fn)(void *ctx, const struct merge_member *m), void *ctx);

struct merge_wait {               /* an off-CPU interval of the world thread */
	uint64_t ts_ns, dur_ns;
	bool in_nccl;             /* a frame of its stack is an NCCL function or libnccl */
	char what[96];            /* the event's name, "futex: futex_do_wait" */
};

struct merge_source {
	char *label;              /* the SRC as given */
	char *pod, *host, *session, *container; /* from summary.json "origin", else NULL */
	char *tl;                 /* decompressed timeline JSON (owned) */
	size_t tl_len;
	struct merge_span *ev;
	size_t nev, capev_;
	json_t *frames;           /* "stackFrames" object, or NULL */
	json_t *summary;          /* summary.json */
	uint64_t win_start_ns, win_end_ns;
	char boot_id[40];         /* summary "clock_domain": "" when not known */
	int64_t timens_ns;        /* its time-namespace offset, when timens_known */
	bool timens_known;

	/* the world communicator as this rank sees it */
	int rank, nranks;         /* -1 when the rank made no collective in the window */
	long pid, tid;            /* the thread making them */
	char comm[40];            /* its communicator handle ("0x...") */
	struct merge_coll *coll;  /* in order of start */
	size_t ncoll;
	uint64_t last_api_end_ns; /* end of that thread's last CUDA/NCCL call */
	struct merge_wait *waits; /* its off-CPU intervals */
	size_t nwaits, capwaits_;
	bool offcpu_known;        /* the window had the off-CPU collector */
	char hang_blocked_in[256];/* the rank's own NcclHang evidence "blocked_in", or "" */
	char *stacks;             /* its stacks.json (the threads as its window closed), NULL */
	size_t stacks_len;
};

/*
 * Parses a rank's decompressed timeline (tl, taken over: freed by merge_source__clear even
 * on failure) and summary text into *s (zeroed first; label is copied). Returns 0, or
 * -EBADMSG / -EINVAL with msg saying what is wrong with which file, -ENOMEM.
 */
int merge_source__parse(struct merge_source *s, const char *label, char *tl, size_t tl_len,
			const char *summary, size_t summary_len, char *msg, size_t msglen);

/* Gunzips gz[0..len) into *ret (NUL-terminated, caller frees) of at most max bytes.
 * Returns 0, -EBADMSG (not gzip, or cut short), -EFBIG, -ENOMEM. */
int merge_gunzip(const unsigned char *gz, size_t len, size_t max, char **ret, size_t *ret_len);

struct s3_client;
/* Reads DIR/timeline.json.gz and DIR/summary.json, or the same objects under an s3:// prefix
 * through s3 (which may be NULL when src is a folder). Errors as merge_source__parse, and
 * -ENOENT when a file is missing, with msg naming it. */
int merge_source__load(struct merge_source *s, const char *src, struct s3_client *s3, char *msg,
		       size_t msglen);

void merge_source__clear(struct merge_source *s);

/*
 * The merge without its files: takes over srcs[0..n) (zeroed), checks they belong together,
 * aligns and analyses them, and returns the aiprof.merge/v1 summary (*ret, a new reference).
 * Returns 0, -EINVAL with msg saying why the sources do not go together, -ENOMEM.
 */
int merge_analyse(struct merge_source *srcs, size_t n, json_t **ret, char *msg, size_t msglen);

/* `aiprof merge` */
/* ---- a merge, for the command ---------------------------------------------------------- */

struct merge;

/*
 * Loads every source (a rank's folder or s3:// prefix; s3 may be NULL without s3://), checks
 * that they belong together, aligns their clocks and runs the cross-rank rules. 0, or a
 * negative errno with msg set. *ret is set either way: free it with merge__free().
 */
int merge__load(char *const *srcs, size_t n, struct s3_client *s3, struct merge **ret,
		char *msg, size_t len);
/* timeline.json.gz and summary.json into dir, and manifest.json when local_manifest. */
int merge__write(struct merge *m, const char *dir, bool local_manifest);
void merge__free(struct merge *m);   /* NULL-safe */

/* What the log and the termination message say of a merge. */
struct merge_stats {
	size_t ranks, aligned, findings;
	int ref_rank;                 /* the clock everything is on; -1: no rank had collectives */
	const char *basis;            /* what the clocks were aligned on */
	uint64_t skew_p50, skew_max;  /* residual skew, ns */
	size_t skew_n;                /* collectives it was measured over */
};
void merge__stats(const struct merge *m, struct merge_stats *ret);
/* The i-th cross-rank finding; false past the last. */
bool merge__finding(const struct merge *m, size_t i, const char **category, const char **severity);

#endif
