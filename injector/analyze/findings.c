/* SPDX-License-Identifier: MIT */
/*
 * The finding rules. Each rule reads the analysis (analysis.h) and, for the ones about
 * blocked threads, the waits; each emits at most a few findings with the numbers that made
 * it fire. Thresholds are in the one table below; nothing else in this file is a tuning
 * constant.
 *
 * Definitions the rules share:
 *   training thread  a thread that issued kernel launches or NCCL collectives
 *   GPU idle         with CUPTI: no kernel of that thread in flight on the GPU; with
 *                    API-level timing only: the thread is not inside a CUDA/NCCL call
 *                    (a thread blocked in its own sync or copy is waiting *for* the GPU)
 *   share            a time as a fraction of the window
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "model/names.h"
#include "model/profile.h"
#include "target/target.h"
#include "analysis.h"
#include "findings.h"

#define MIB (1024.0 * 1024.0)

enum th_id {
	TH_PAGEABLE_WARN, TH_PAGEABLE_CRIT, TH_PAGEABLE_MIN_BYTES, TH_STAGING_GAP,
	TH_SMALL_RATE, TH_SMALL_SHARE, TH_SMALL_THREADS, TH_SMALL_NS, TH_SMALL_BUSY, TH_SMALL_CRIT_RATE,
	TH_CKPT_WARN, TH_CKPT_CRIT, TH_CKPT_MIN_NS, TH_EPISODE_GAP,
	TH_LOADER_WARN, TH_LOADER_CRIT, TH_LOADER_MIN_WAITS,
	TH_HANG_MIN_NS, TH_HANG_FACTOR, TH_HANG_BLOCKED,
	TH_STRAG_MIN_NS, TH_STRAG_REL, TH_STRAG_SHARE, TH_STRAG_WINDOW, TH_STRAG_LATE_SHARE, TH_STRAG_MIN_COLLS, TH_STRAG_CRIT_REL,
	TH_SYNC_RATE, TH_SYNC_PER_LAUNCH,
	TH_GROWTH_MIN_BYTES, TH_GROWTH_MIN_ALLOCS, TH_GROWTH_SPREAD, TH_GROWTH_CRIT_RATE,
	TH__N
};

/*
 * THE thresholds. A finding has to be worth someone's time: each number is set where the
 * effect on step time is clearly measurable, and below the planted faults of the test
 * trainer by a wide margin while far above what its clean configuration shows.
 */
static const struct finding_threshold_row thresholds[TH__N] = {
	/* Pageable copies run at a fraction of pinned bandwidth (staged through a bounce
	 * buffer, and they block the host even when issued async). 5% of a training thread's
	 * time is where pinning pays back visibly; 20% means copies dominate the step. */
	[TH_PAGEABLE_WARN] = { "PageableMemcpy", "warn_share", 0.05, "of the window",
		"a training thread spends at least this share of the window in pageable host<->device copies" },
	[TH_PAGEABLE_CRIT] = { "PageableMemcpy", "critical_share", 0.20, "of the window",
		"copies from pageable memory dominate the step" },
	/* scalars (loss.item()) are latency, not bandwidth: ignore windows that move little */
	[TH_PAGEABLE_MIN_BYTES] = { "PageableMemcpy", "min_bytes", 16.0 * MIB, "bytes",
		"less pageable traffic than this is latency-bound and not worth pinning" },
	/* device-to-host copies right before file writes are a checkpoint's staging, and
	 * belong to SyncCheckpoint */
	[TH_STAGING_GAP] = { "PageableMemcpy", "checkpoint_staging_gap", 1e9, "ns",
		"a pageable copy followed within this time by a file write, with no launch in between, is checkpoint staging" },

	/* A launch costs the host 3-10 us. Past ~2000 launches/s per thread a thread spends
	 * a noticeable share of its time launching; if most kernels are tiny the GPU finishes
	 * each before the next arrives: the launch-bound, batch-too-small signature. */
	[TH_SMALL_RATE] = { "SmallKernels", "min_launches_per_s", 2000, "launches/s",
		"launch rate of one thread above which launch overhead matters" },
	[TH_SMALL_SHARE] = { "SmallKernels", "min_small_share", 0.5, "of launches",
		"share of its launches that must be small kernels" },
	/* 4096 threads fill under 2% of an A100 (108 SMs x 2048 resident threads) */
	[TH_SMALL_THREADS] = { "SmallKernels", "small_kernel_threads", 4096, "threads",
		"API-level timing: a launch of at most grid x block threads is small" },
	/* 20 us: a kernel this short is of the order of its own launch latency */
	[TH_SMALL_NS] = { "SmallKernels", "small_kernel_ns", 20000, "ns",
		"CUPTI timing: a kernel shorter than this is small" },
	[TH_SMALL_BUSY] = { "SmallKernels", "max_gpu_busy", 0.6, "of the window",
		"CUPTI timing: only when the thread's kernels keep the GPU busy less than this" },
	[TH_SMALL_CRIT_RATE] = { "SmallKernels", "critical_launches_per_s", 10000, "launches/s",
		"a thread launching this often with mostly small kernels is launch-bound" },

	/* A checkpoint on the training thread stops training for its whole duration. 5% of
	 * the window is e.g. a 0.5 s save every 10 s; 20% is a fifth of all training time. */
	[TH_CKPT_WARN] = { "SyncCheckpoint", "warn_share", 0.05, "of the window",
		"a training thread blocked in file writes/fsync while the GPU idles" },
	[TH_CKPT_CRIT] = { "SyncCheckpoint", "critical_share", 0.20, "of the window",
		"checkpointing takes a fifth of the training thread's time" },
	[TH_CKPT_MIN_NS] = { "SyncCheckpoint", "min_blocked_ns", 50e6, "ns",
		"less blocked time than this in the window is noise" },
	[TH_EPISODE_GAP] = { "SyncCheckpoint", "episode_gap_ns", 100e6, "ns",
		"waits closer than this form one episode (one checkpoint, one batch)" },

	/* Input pipelines should hide behind compute; a training thread that waits for data
	 * a tenth of the time while the GPU idles has an input-bound step. */
	[TH_LOADER_WARN] = { "DataLoaderStall", "warn_share", 0.10, "of the window",
		"a training thread blocked waiting for data (read/recv/poll/futex) while the GPU idles" },
	[TH_LOADER_CRIT] = { "DataLoaderStall", "critical_share", 0.30, "of the window",
		"the step is dominated by waiting for input" },
	[TH_LOADER_MIN_WAITS] = { "DataLoaderStall", "min_waits", 3, "waits",
		"fewer separate waits than this is not a pattern" },

	/* A collective normally takes ms; NCCL's own watchdog waits minutes. Within a window
	 * of seconds: outstanding for 1 s and 20x the thread's own step period or slowest
	 * collective is no longer a slow step. */
	[TH_HANG_MIN_NS] = { "NcclHang", "min_outstanding_ns", 1e9, "ns",
		"a rank silent (no CUDA/NCCL call returned) for at least this long until the window ended" },
	[TH_HANG_FACTOR] = { "NcclHang", "period_factor", 20, "x",
		"and at least this many times its collective period or slowest collective" },
	[TH_HANG_BLOCKED] = { "NcclHang", "min_blocked_share", 0.9, "of the silence",
		"off-CPU data must show the thread blocked this much of its silence (critical)" },

	/* Every other rank waits for the last one at each collective. A collective entered
	 * 5 ms (and a tenth of the collective period) after the first rank is late; a rank
	 * that causes three quarters of all such waiting, costing the others 5% of the window,
	 * is a straggler, not noise. Time the late rank spent waiting for data or in file
	 * writes is explained by those rules and not counted. Steps with several collectives
	 * (a vote, gradient buckets) are fine: only the late ones count. */
	[TH_STRAG_MIN_NS] = { "Straggler", "min_lateness_ns", 5e6, "ns",
		"unexplained lateness into a collective that counts" },
	[TH_STRAG_REL] = { "Straggler", "min_lateness_of_period", 0.10, "of the step period",
		"and at least this share of the period between collectives" },
	[TH_STRAG_SHARE] = { "Straggler", "min_share_of_lateness", 0.75, "of all ranks' lateness",
		"one rank causes at least this share of all waiting at collectives: consistently the same rank" },
	[TH_STRAG_LATE_SHARE] = { "Straggler", "min_late_share", 0.2, "of collectives",
		"late into at least a fifth of the matched collectives (a step may hold several, only the first shows it)" },
	[TH_STRAG_WINDOW] = { "Straggler", "min_share_of_window", 0.05, "of the window",
		"the others lose at least this share of the window waiting for it" },
	[TH_STRAG_MIN_COLLS] = { "Straggler", "min_collectives", 5, "collectives",
		"matched collectives needed to judge, and late collectives to report" },
	[TH_STRAG_CRIT_REL] = { "Straggler", "critical_lateness_of_period", 0.25, "of the step period",
		"median lateness at which every rank loses a quarter of its time" },

	/* One sync per step is normal (loss to the host). A sync per launch serialises host
	 * and GPU: the GPU idles while the host prepares each next kernel. */
	[TH_SYNC_RATE] = { "ExcessiveSync", "min_syncs_per_s", 50, "syncs/s",
		"device/stream synchronisations per second on one thread" },
	[TH_SYNC_PER_LAUNCH] = { "ExcessiveSync", "min_syncs_per_launch", 0.9, "syncs/launch",
		"about one synchronisation per kernel launch" },

	/* Allocations that are never freed, spread over the window, end in an OOM; a one-off
	 * allocation (a new buffer) is not growth. */
	[TH_GROWTH_MIN_BYTES] = { "GpuMemoryGrowth", "min_unfreed_bytes", 64.0 * MIB, "bytes",
		"device memory allocated in the window and not freed" },
	[TH_GROWTH_MIN_ALLOCS] = { "GpuMemoryGrowth", "min_unfreed_allocations", 4, "allocations",
		"separate allocations not freed: repeated, not one-off" },
	[TH_GROWTH_SPREAD] = { "GpuMemoryGrowth", "min_spread", 0.5, "of the window",
		"the unfreed allocations span at least this share of the window" },
	[TH_GROWTH_CRIT_RATE] = { "GpuMemoryGrowth", "critical_bytes_per_s", 100.0 * MIB, "bytes/s",
		"fills an 80 GB GPU in under 15 minutes" },
};

#define TH(id) (thresholds[id].value)

const char *const finding_categories[FINDING_CATEGORIES] = {
	"PageableMemcpy", "SmallKernels", "SyncCheckpoint", "DataLoaderStall",
	"NcclHang", "Straggler", "ExcessiveSync", "GpuMemoryGrowth", "TargetDied",
};

static const char *const remedies[FINDING_CATEGORIES] = {
	/* PageableMemcpy */
	"Copy from page-locked (pinned) host memory: DataLoader(pin_memory=True) and "
	"tensor.to(device, non_blocking=True), or cudaMallocHost/cudaHostRegister for your own "
	"buffers; then the copy runs at full bandwidth and overlaps compute.",
	/* SmallKernels */
	"The GPU is launch-bound: raise the batch size (or micro-batch) until kernels run "
	"longer than their launch, fuse small ops (torch.compile, fused optimizers), or capture "
	"the step in a CUDA graph so one launch replays many kernels.",
	/* SyncCheckpoint */
	"Checkpoint asynchronously: copy the state to pinned host memory, then write it from a "
	"background thread or process (torch.distributed.checkpoint.async_save), write less "
	"often, or shard the checkpoint across ranks; avoid an fsync per chunk.",
	/* DataLoaderStall */
	"The input pipeline cannot keep up: use more DataLoader workers (num_workers), "
	"prefetch (prefetch_factor, persistent_workers=True), move decoding/augmentation off "
	"the training thread or to the GPU, and cache or stage remote data locally.",
	/* NcclHang */
	"A rank never reached the collective the others are waiting in. Find it from the "
	"ranks listed (their last call and what they block in); run with NCCL_DEBUG=INFO and a "
	"collective timeout (TORCH_NCCL_ASYNC_ERROR_HANDLING=1, timeout=) so the job fails "
	"instead of hanging, and check for rank-dependent control flow around collectives.",
	/* Straggler */
	"One rank arrives late at every collective and all others wait for it: look at what "
	"that rank does before its collectives (host work, a .item()/sync, logging, a slower "
	"node or GPU), balance the work, or move the extra work off the critical path.",
	/* ExcessiveSync */
	"Remove per-kernel synchronisation: drop cudaDeviceSynchronize/torch.cuda.synchronize "
	"and .item()/.cpu() calls from the inner loop, use events or non_blocking copies, and "
	"synchronise once per step (or per logging interval).",
	/* GpuMemoryGrowth */
	"Device memory grows without frees: look for tensors kept alive across steps (lists of "
	"losses without .detach()/.item(), caches, hooks); free or reuse buffers; watch "
	"torch.cuda.memory_allocated() per step.",
	/* TargetDied */
	"A process of the job ended during the window: its signal or exit code, and what "
	"aiprof was doing in it, are in the evidence. Look at the job's own log for the "
	"reason (an OOM kill, a failed assertion, a launcher tearing its ranks down); if aiprof "
	"was injecting when it died, report it with the summary.json: that is aiprof's bug.",
};

const struct finding_threshold_row *findings_thresholds(size_t *n)
{
	*n = TH__N;
	return thresholds;
}

void findings_analysis_opts(struct analysis_opts *o)
{
	o->tiny_threads = (uint64_t)TH(TH_SMALL_THREADS);
	o->short_kernel_ns = (uint64_t)TH(TH_SMALL_NS);
}

const char *finding_severity_name(enum finding_severity s)
{
	return s == SEV_CRITICAL ? "critical" : s == SEV_WARNING ? "warning" : "info";
}

/* ---- waits ------------------------------------------------------------------------------- */

static const char *keep(struct wait_list *l, const char *s)
{
	char *c;

	if (!s)
		return NULL;
	if (l->nstrs == l->capstrs) {
		size_t ncap = l->capstrs ? l->capstrs * 2 : 64;
		char **nv = realloc(l->strs, ncap * sizeof(*nv));

		if (!nv)
			return NULL;
		l->strs = nv;
		l->capstrs = ncap;
	}
	c = strdup(s);
	if (c)
		l->strs[l->nstrs++] = c;
	return c;
}

int findings_add_waits(struct wait_list *l, const struct thread_wait *w, size_t n)
{
	size_t n0 = l->n, s0 = l->nstrs;

	for (size_t i = 0; i < n; i++) {
		struct thread_wait c = w[i];

		if (l->n == l->cap) {
			size_t ncap = l->cap ? l->cap * 2 : 256;
			struct thread_wait *nv = realloc(l->v, ncap * sizeof(*nv));

			if (!nv)
				goto fail;
			l->v = nv;
			l->cap = ncap;
		}
		c.name = keep(l, w[i].name ? w[i].name : "blocked");
		c.path = w[i].path ? keep(l, w[i].path) : NULL;
		c.api_frame = w[i].api_frame ? keep(l, w[i].api_frame) : NULL;
		c.collective = w[i].collective ? keep(l, w[i].collective) : NULL;
		c.py_frame = w[i].py_frame ? keep(l, w[i].py_frame) : NULL;
		c.stack = w[i].stack ? keep(l, w[i].stack) : NULL;
		if (!c.name || (w[i].path && !c.path) || (w[i].api_frame && !c.api_frame) ||
		    (w[i].collective && !c.collective) || (w[i].py_frame && !c.py_frame) ||
		    (w[i].stack && !c.stack))
			goto fail;
		l->v[l->n++] = c;
	}
	return 0;
fail:
	while (l->nstrs > s0)
		free(l->strs[--l->nstrs]);
	l->n = n0;
	return -ENOMEM;
}

void wait_list__clear(struct wait_list *l)
{
	for (size_t i = 0; i < l->nstrs; i++)
		free(l->strs[i]);
	free(l->strs);
	free(l->v);
	free(l->procs);
	free(l->unrecorded);
	memset(l, 0, sizeof(*l));
}

static bool name_in(const char *name, const char *const *set)
{
	for (; *set; set++)
		if (strcmp(name, *set) == 0)
			return true;
	return false;
}

/* a path that names a file (not a pipe, socket, device or pseudo file) */
static bool is_file_path(const char *p)
{
	return p && p[0] == '/' && strncmp(p, "/dev/", 5) != 0 && strncmp(p, "/proc/", 6) != 0 &&
	       strncmp(p, "/sys/", 5) != 0;
}

enum wait_class findings_wait_class(const struct thread_wait *w)
{
	/* calls that make data durable: a file write whatever the path says */
	static const char *const flush[] = {
		"fsync", "fdatasync", "sync_file_range", "msync", "sync", "syncfs", NULL };
	/* calls that write or finish a file when their object is a file */
	static const char *const writes[] = {
		"write", "pwrite64", "writev", "pwritev", "pwritev2", "rename", "renameat",
		"renameat2", "ftruncate", "fallocate", "close", "copy_file_range", "sendfile",
		"io_submit", NULL };
	/* calls that wait for something to arrive */
	static const char *const data[] = {
		"read", "pread64", "readv", "preadv", "preadv2", "recvfrom", "recvmsg", "recvmmsg",
		"poll", "ppoll", "select", "pselect6", "epoll_wait", "epoll_pwait", "epoll_pwait2",
		"futex", "futex_waitv", "wait4", "waitid", "msgrcv", "semop", "semtimedop",
		"io_getevents", "io_pgetevents", "io_uring_enter", "accept", "accept4", "mq_timedreceive",
		NULL };
	const char *n = w->name ? w->name : "";

	if (w->kind == WAIT_OFFCPU && w->state == 'R')
		return WC_PREEMPTED;
	if (name_in(n, flush))
		return WC_FILE_WRITE;
	if (name_in(n, writes))
		return is_file_path(w->path) ? WC_FILE_WRITE : WC_OTHER;
	if (name_in(n, data))
		return WC_DATA_WAIT;
	return WC_OTHER;
}

/* ---- building findings ------------------------------------------------------------------- */

static struct finding *add_finding(struct findings *f, int cat, enum finding_severity sev)
{
	struct finding *x;

	if (f->n == f->cap) {
		size_t ncap = f->cap ? f->cap * 2 : 8;
		struct finding *nv = realloc(f->v, ncap * sizeof(*nv));

		if (!nv)
			return NULL;
		f->v = nv;
		f->cap = ncap;
	}
	x = &f->v[f->n++];
	memset(x, 0, sizeof(*x));
	x->category = finding_categories[cat];
	x->remedy = remedies[cat];
	x->severity = sev;
	x->rank = -1;
	return x;
}

static struct evidence *ev_add(struct finding *x, const char *key, enum evidence_type t)
{
	struct evidence *e;

	if (x->nev >= FINDING_MAX_EVIDENCE)
		return NULL;
	e = &x->ev[x->nev++];
	memset(e, 0, sizeof(*e));
	snprintf(e->key, sizeof(e->key), "%s", key);
	e->type = t;
	return e;
}

static void ev_u64(struct finding *x, const char *key, uint64_t v)
{
	struct evidence *e = ev_add(x, key, EV_U64);

	if (e)
		e->u = v;
}

static void ev_dbl(struct finding *x, const char *key, double v)
{
	struct evidence *e = ev_add(x, key, EV_DOUBLE);

	if (e)
		e->d = v;
}

static int ev_str(struct finding *x, const char *key, const char *v)
{
	struct evidence *e = ev_add(x, key, EV_STR);

	if (!e)
		return 0;
	e->s = strdup(v ? v : "");
	if (!e->s) {
		x->nev--;
		return -ENOMEM;
	}
	return 0;
}

static void where(struct finding *x, const struct an_thread *th)
{
	x->pid = th->pid;
	x->tid = th->tid;
	x->rank = th->rank;
}

static double ms(uint64_t ns)
{
	return (double)ns / 1e6;
}

static double round3(double v)
{
	return (double)(int64_t)(v * 1000.0 + (v >= 0 ? 0.5 : -0.5)) / 1000.0;
}

static bool is_training(const struct an_thread *th)
{
	return th->launches > 0 || th->collectives > 0;
}

static void thread_label(const struct an_thread *th, char *buf, size_t len)
{
	if (th->rank >= 0)
		snprintf(buf, len, "rank %d (pid %d, tid %u)", th->rank, th->pid, th->tid);
	else
		snprintf(buf, len, "thread %u of pid %d", th->tid, th->pid);
}

struct ctx {
	const struct profile *p;
	const struct analysis *a;
	const struct wait_list *w;
	struct findings *f;
	uint64_t win;
	uint64_t *hang_from;       /* per analysis thread: waits after this belong to a hang */
};

/* ---- per-thread wait accounting ---------------------------------------------------------- */

/* Of [from, to): the time the waits' collectors recorded (--budget's pauses left out). */
static uint64_t recorded_ns(const struct ctx *x, uint64_t from, uint64_t to)
{
	uint64_t off = 0;

	if (to <= from)
		return 0;
	for (size_t i = 0; x->w && i < x->w->nunrecorded; i++) {
		uint64_t s = x->w->unrecorded[i].start > from ? x->w->unrecorded[i].start : from;
		uint64_t e = x->w->unrecorded[i].end < to ? x->w->unrecorded[i].end : to;

		if (e > s)
			off += e - s;
	}
	return off < to - from ? to - from - off : 0;
}

/* "the window" or "the 1.1 s of the window recorded (--budget paused the collectors for 1.9 s)",
 * of the window's recorded time rec: what a wait's share is of */
static const char *of_what(const struct ctx *x, uint64_t rec, char *buf, size_t len)
{
	if (rec >= x->win)
		return "the window";
	snprintf(buf, len, "the %.1f s of the window recorded (--budget paused the collectors for %.1f s)",
		 (double)rec / 1e9, (double)(x->win - rec) / 1e9);
	return buf;
}

static void ev_recorded(struct finding *f, const struct ctx *x, uint64_t rec)
{
	if (rec < x->win) {
		ev_dbl(f, "recorded_s", round3((double)rec / 1e9));
		ev_dbl(f, "paused_by_budget_s", round3((double)(x->win - rec) / 1e9));
	}
}

struct reason {
	const char *name, *path;
	uint64_t ns, count;
	bool sys;                 /* from slow-syscall records (which name the file) */
};

struct class_time {
	uint64_t blocked_ns;      /* union of the class's waits, GPU idle, in the window */
	uint64_t raw_ns;          /* union, whether or not the GPU idled */
	uint64_t waits, episodes, longest_episode_ns, bytes, flushes;
	uint64_t *durs;           /* each wait's duration, for the median */
	struct reason top;
};

static int span_push(struct an_span **v, size_t *n, size_t *cap, uint64_t s, uint64_t e)
{
	if (*n == *cap) {
		size_t ncap = *cap ? *cap * 2 : 32;
		struct an_span *nv = realloc(*v, ncap * sizeof(*nv));

		if (!nv)
			return -ENOMEM;
		*v = nv;
		*cap = ncap;
	}
	(*v)[(*n)++] = (struct an_span){ s, e };
	return 0;
}

/* the thread's busy time: its CUDA/NCCL calls and (CUPTI) its kernels */
static int busy_spans(const struct an_thread *th, struct an_span **ret, size_t *n)
{
	struct an_span *v = malloc((th->napi + th->ngpu + 1) * sizeof(*v));

	if (!v)
		return -ENOMEM;
	memcpy(v, th->api, th->napi * sizeof(*v));
	if (th->ngpu)
		memcpy(v + th->napi, th->gpu, th->ngpu * sizeof(*v));
	*n = an_spans_merge(v, th->napi + th->ngpu);
	*ret = v;
	return 0;
}

/*
 * Time thread th spent blocked in waits of class c between lo and hi, not inside its own
 * CUDA/NCCL calls (and with CUPTI, not while its kernels ran). Waits whose stack shows a
 * CUDA/NCCL frame are inside a call the library has not reported yet (a hung collective).
 */
static int class_time(const struct ctx *x, const struct an_thread *th, enum wait_class c,
		      uint64_t lo, uint64_t hi, struct class_time *ret)
{
	struct an_span *v = NULL, *busy = NULL;
	size_t n = 0, cap = 0, nbusy = 0, nd = 0;
	struct reason *rs = NULL;
	size_t nrs = 0;
	uint64_t ep_start = 0, ep_end = 0;
	int r = 0;

	memset(ret, 0, sizeof(*ret));
	if (!x->w || hi <= lo)
		return 0;
	ret->durs = malloc((x->w->n + 1) * sizeof(uint64_t));
	rs = calloc(x->w->n + 1, sizeof(*rs));
	if (!ret->durs || !rs) {
		r = -ENOMEM;
		goto out;
	}
	r = busy_spans(th, &busy, &nbusy);
	if (r < 0)
		goto out;
	for (size_t i = 0; i < x->w->n; i++) {
		const struct thread_wait *w = &x->w->v[i];
		uint64_t s = w->ts, e = w->ts + w->dur, idle;
		size_t k;

		if (w->pid != th->pid || w->tid != th->tid || w->api_frame ||
		    findings_wait_class(w) != c)
			continue;
		if (s < lo)
			s = lo;
		if (e > hi)
			e = hi;
		if (e <= s)
			continue;
		/* entirely inside the thread's own CUDA/NCCL calls: waiting for the GPU or a peer */
		idle = an_spans_uncovered(busy, nbusy, s, e);
		if (!idle)
			continue;
		if (span_push(&v, &n, &cap, s, e) < 0) {
			r = -ENOMEM;
			goto out;
		}
		if (w->kind == WAIT_SYSCALL) {
			ret->waits++;
			ret->durs[nd++] = e - s;
			if (strncmp(w->name, "write", 5) == 0 || strncmp(w->name, "pwrite", 6) == 0)
				ret->bytes += w->bytes;
			if (strcmp(w->name, "fsync") == 0 || strcmp(w->name, "fdatasync") == 0 ||
			    strcmp(w->name, "sync_file_range") == 0)
				ret->flushes++;
		}
		for (k = 0; k < nrs; k++)
			if (rs[k].sys == (w->kind == WAIT_SYSCALL) && strcmp(rs[k].name, w->name) == 0 &&
			    (rs[k].path == w->path || (rs[k].path && w->path && strcmp(rs[k].path, w->path) == 0)))
				break;
		if (k == nrs)
			rs[nrs++] = (struct reason){ .name = w->name, .path = w->path,
						     .sys = w->kind == WAIT_SYSCALL };
		rs[k].ns += idle;
		rs[k].count++;
	}
	/* off-CPU-only waits (no slow-syscall record) still count as waits */
	if (!ret->waits) {
		for (size_t i = 0; i < n; i++)
			ret->durs[nd++] = v[i].end - v[i].start;
		ret->waits = n;
	}
	n = an_spans_merge(v, n);
	for (size_t i = 0; i < n; i++) {
		ret->raw_ns += v[i].end - v[i].start;
		ret->blocked_ns += an_spans_uncovered(busy, nbusy, v[i].start, v[i].end);
		if (!ret->episodes || v[i].start > ep_end + (uint64_t)TH(TH_EPISODE_GAP)) {
			ret->episodes++;
			ep_start = v[i].start;
		}
		ep_end = v[i].end;
		if (ep_end - ep_start > ret->longest_episode_ns)
			ret->longest_episode_ns = ep_end - ep_start;
	}
	/* The top reason from the slow-syscall records where there are any: an off-CPU block
	 * inside such a call is the same wait, once more and without the file it was for (the
	 * two tallies came out within 1% of each other on the checkpointing trainer) */
	for (size_t k = 0; k < nrs; k++)
		if ((rs[k].sys && !ret->top.sys) ||
		    (rs[k].sys == ret->top.sys && rs[k].ns > ret->top.ns))
			ret->top = rs[k];
	if (nd) {
		/* keep the count of durations in 'waits' consistent with durs */
		ret->waits = nd;
	}
out:
	free(v);
	free(busy);
	free(rs);
	return r;
}

static uint64_t median_u64(uint64_t *v, size_t n)
{
	if (!n)
		return 0;
	for (size_t i = 1; i < n; i++) {
		uint64_t k = v[i];
		size_t j = i;

		for (; j > 0 && v[j - 1] > k; j--)
			v[j] = v[j - 1];
		v[j] = k;
	}
	return v[n / 2];
}

static uint64_t thread_hi(const struct ctx *x, size_t ti)
{
	return x->hang_from[ti] ? x->hang_from[ti] : x->a->window_end;
}

/* ---- rules ------------------------------------------------------------------------------- */

/* NcclHang first: time a hung rank spends blocked is the hang's, not anyone else's. */
static int rule_nccl_hang(struct ctx *x)
{
	const struct analysis *a = x->a;
	const uint64_t end = a->window_end;
	char ranks[256] = "", blocked[512] = "", lastcall[256] = "";
	size_t nsilent = 0, nconfirmed = 0;
	uint64_t min_silence = UINT64_MAX, threshold_max = 0;
	const struct an_thread *first = NULL;
	uint16_t expect = 0;
	double expect_share = 0;
	struct finding *f;

	for (size_t i = 0; i < a->nthreads; i++) {
		const struct an_thread *th = &a->threads[i];
		uint64_t period = th->coll_period_ns > th->coll_p99_ns ? th->coll_period_ns : th->coll_p99_ns;
		uint64_t threshold = (uint64_t)(TH(TH_HANG_FACTOR) * (double)period);
		uint64_t silence, covered = 0;
		const char *why = NULL;
		char lbl[80];
		size_t len;

		if (!th->collectives || !th->alive_at_end || th->last_end >= end)
			continue;
		if (threshold < (uint64_t)TH(TH_HANG_MIN_NS))
			threshold = (uint64_t)TH(TH_HANG_MIN_NS);
		silence = end - th->last_end;
		if (silence < threshold)
			continue;
		/* is it blocked for that time? */
		if (x->w && x->w->offcpu_known) {
			struct an_span *v = NULL;
			size_t n = 0, cap = 0;
			uint64_t longest = 0;

			for (size_t k = 0; k < x->w->n; k++) {
				const struct thread_wait *w = &x->w->v[k];
				uint64_t s = w->ts > th->last_end ? w->ts : th->last_end;
				uint64_t e = w->ts + w->dur < end ? w->ts + w->dur : end;

				if (w->pid != th->pid || w->tid != th->tid || w->kind != WAIT_OFFCPU ||
				    w->state == 'R' || e <= s)
					continue;
				if (span_push(&v, &n, &cap, s, e) < 0) {
					free(v);
					return -ENOMEM;
				}
				if (e - s > longest) {
					longest = e - s;
					why = w->api_frame ? w->api_frame : w->name;
				}
			}
			n = an_spans_merge(v, n);
			for (size_t k = 0; k < n; k++)
				covered += v[k].end - v[k].start;
			free(v);
			/* running on CPU all that time: busy elsewhere (evaluation?), not hung */
			if ((double)covered < TH(TH_HANG_BLOCKED) * (double)silence)
				continue;
			nconfirmed++;
		}
		x->hang_from[i] = th->last_end;
		nsilent++;
		if (!first)
			first = th;
		if (silence < min_silence)
			min_silence = silence;
		if (threshold > threshold_max)
			threshold_max = threshold;
		if (th->next_after_last_share > expect_share) {
			expect = th->next_after_last;
			expect_share = th->next_after_last_share;
		}
		thread_label(th, lbl, sizeof(lbl));
		len = strlen(ranks);
		snprintf(ranks + len, sizeof(ranks) - len, "%s%d", len ? "," : "", th->rank);
		len = strlen(blocked);
		snprintf(blocked + len, sizeof(blocked) - len, "%s%s: %s", len ? "; " : "", lbl,
			 why ? why : "unknown (no off-CPU data)");
		len = strlen(lastcall);
		snprintf(lastcall + len, sizeof(lastcall) - len, "%srank %d: %s", len ? "; " : "",
			 th->rank, api_name(th->last_api));
	}
	if (nsilent) {
		const char *next = expect ? api_name(expect) : "unknown";

		f = add_finding(x->f, 4, nconfirmed ? SEV_CRITICAL : SEV_WARNING);
		if (!f)
			return -ENOMEM;
		where(f, first);
		if (nsilent > 1)
			f->tid = 0;
		snprintf(f->summary, sizeof(f->summary),
			 "%zu rank%s (%s) stopped making progress %.1f s before the window ended%s; "
			 "the next call expected from earlier steps is %s (%.0f%% of the time).",
			 nsilent, nsilent == 1 ? "" : "s", ranks, (double)min_silence / 1e9,
			 nconfirmed ? ", blocked the whole time" : " (blocked? no off-CPU data to confirm)",
			 next, 100.0 * expect_share);
		ev_str(f, "silent_ranks", ranks);
		ev_dbl(f, "outstanding_s", round3((double)min_silence / 1e9));
		ev_dbl(f, "threshold_s", round3((double)threshold_max / 1e9));
		ev_str(f, "expected_call", next);
		ev_dbl(f, "expected_call_share", round3(expect_share));
		ev_str(f, "last_completed_call", lastcall);
		ev_str(f, "blocked_in", blocked);
		ev_u64(f, "ranks_blocked", nconfirmed);
	}
	/* a collective that did return, but took longer than a hang threshold */
	for (size_t i = 0; i < a->nnccl; i++) {
		if (a->nccl[i].max_ns < (uint64_t)TH(TH_HANG_MIN_NS))
			continue;
		f = add_finding(x->f, 4, SEV_WARNING);
		if (!f)
			return -ENOMEM;
		snprintf(f->summary, sizeof(f->summary),
			 "A %s collective was outstanding for %.1f s before it completed.",
			 a->nccl[i].op, (double)a->nccl[i].max_ns / 1e9);
		ev_str(f, "op", a->nccl[i].op);
		ev_dbl(f, "longest_s", round3((double)a->nccl[i].max_ns / 1e9));
		ev_u64(f, "count", a->nccl[i].count);
	}
	return 0;
}

/*
 * A hang in progress, seen from the stacks alone: threads blocked for the whole window,
 * and since before it, in a collective (NCCL, gloo, c10d) or a GPU sync. Their hooks never
 * saw the call start, so rule_nccl_hang() cannot; a thread it already reported is skipped.
 * One finding per process: the thread with Python frames (the caller) leads, the library's
 * own threads waiting in the same collective are listed with it.
 */
static bool stuck_in_collective(const struct ctx *x, const struct thread_wait *w)
{
	const struct analysis *a = x->a;

	if (w->kind != WAIT_OFFCPU || !w->began_before || !w->open_at_end || !w->collective ||
	    w->state == 'R')
		return false;
	for (size_t i = 0; i < a->nthreads; i++)
		if (a->threads[i].pid == w->pid && a->threads[i].tid == w->tid && x->hang_from[i])
			return false;
	return true;
}

/*
 * A frame name made short for a one-sentence summary: a C++ function without its
 * parameters ("c10d::Work::wait"), a Python frame with its file's basename
 * ("all_reduce (distributed_c10d.py:1541)").
 */
static const char *short_frame(const char *name, char *buf, size_t len)
{
	const char *open = strstr(name, " (");
	const char *paren = strchr(name, '(');

	if (open && strstr(open, ".py:")) {
		const char *slash = strrchr(open, '/');

		snprintf(buf, len, "%.*s (%s", (int)(open - name), name, slash ? slash + 1 : open + 2);
	} else if (paren && paren != name && name[0] != '[') {
		snprintf(buf, len, "%.*s", (int)(paren - name), name);
	} else {
		snprintf(buf, len, "%s", name);
	}
	return buf;
}

static bool pid_in(const pid_t *v, size_t n, pid_t pid)
{
	for (size_t i = 0; i < n; i++)
		if (v[i] == pid)
			return true;
	return false;
}

/*
 * The other profiled processes, not in any collective (stuck[0..nstuck) are): for the
 * ranks of one job, those that never arrived. Each with where its last wait of the window
 * was: its latest with a Python frame, else its latest. One pass over the waits.
 */
static int elsewhere(struct ctx *x, struct finding *f, const pid_t *stuck, size_t nstuck)
{
	struct other { pid_t pid; const struct thread_wait *last; } *o = NULL;
	char buf[1024] = "", brief[160] = "", sb[128];
	size_t used = 0, no = 0, slen;
	int r;

	for (size_t k = 0; k < x->w->n; k++) {
		const struct thread_wait *v = &x->w->v[k];
		size_t j;

		if (v->kind != WAIT_OFFCPU || pid_in(stuck, nstuck, v->pid))
			continue;
		for (j = 0; j < no && o[j].pid != v->pid; j++)
			;
		if (j == no) {
			struct other *nv = reallocarray(o, no + 1, sizeof(*nv));

			if (!nv) {
				free(o);
				return -ENOMEM;
			}
			o = nv;
			o[no++] = (struct other){ .pid = v->pid, .last = v };
		} else if ((v->py_frame && !o[j].last->py_frame) ||
			   (!!v->py_frame == !!o[j].last->py_frame && v->ts > o[j].last->ts)) {
			o[j].last = v;
		}
	}
	for (size_t j = 0; j < no; j++) {
		const struct thread_wait *last = o[j].last;
		int len = snprintf(buf + used, sizeof(buf) - used, "%spid %d: %s in %s",
				   used ? "; " : "", o[j].pid,
				   last->py_frame ? last->py_frame : "native code", last->name);

		slen = strlen(brief);
		snprintf(brief + slen, sizeof(brief) - slen, "%spid %d (%s)", slen ? ", " : "",
			 o[j].pid, last->py_frame ? short_frame(last->py_frame, sb, sizeof(sb)) :
			 last->name);
		if (len > 0)
			used += (size_t)len < sizeof(buf) - used ? (size_t)len : sizeof(buf) - used - 1;
	}
	r = 0;
	if (no) {
		snprintf(f->summary + strlen(f->summary), sizeof(f->summary) - strlen(f->summary),
			 " Not in one: %s.", brief);
		r = ev_str(f, "not_in_collective", buf);
	}
	free(o);
	return r;
}

static int stuck_finding(struct ctx *x, pid_t pid, const pid_t *stuck, size_t nstuck)
{
	const struct analysis *a = x->a;
	const struct thread_wait *lead = NULL;
	const struct an_thread *th = NULL;
	char lbl[80], others[1024] = "", cb[128], pb[128];
	struct finding *f;
	size_t used = 0;

	for (size_t k = 0; k < x->w->n; k++) {
		const struct thread_wait *w = &x->w->v[k];

		if (w->pid != pid || !stuck_in_collective(x, w))
			continue;
		if (!lead || (!lead->py_frame && w->py_frame))
			lead = w;
	}
	for (size_t k = 0; k < x->w->n; k++) {
		const struct thread_wait *w = &x->w->v[k];
		int n;

		if (w->pid != pid || w == lead || !stuck_in_collective(x, w) || used + 1 >= sizeof(others))
			continue;
		n = snprintf(others + used, sizeof(others) - used, "%sthread %u: %s (%.1f s)",
			     used ? "; " : "", w->tid, w->collective, (double)w->blocked_ns / 1e9);
		if (n > 0)
			used += (size_t)n < sizeof(others) - used ? (size_t)n : sizeof(others) - used - 1;
	}
	for (size_t i = 0; i < a->nthreads; i++)
		if (a->threads[i].pid == lead->pid && a->threads[i].tid == lead->tid)
			th = &a->threads[i];
	f = add_finding(x->f, 4, SEV_CRITICAL);
	if (!f)
		return -ENOMEM;
	f->pid = lead->pid;
	f->tid = lead->tid;
	if (th) {
		where(f, th);
		thread_label(th, lbl, sizeof(lbl));
	} else {
		snprintf(lbl, sizeof(lbl), "thread %u of pid %d", lead->tid, lead->pid);
	}
	snprintf(f->summary, sizeof(f->summary),
		 "%s: blocked %.1f s in %s%s%s, since before the window began: a collective that "
		 "is not completing (a rank that never arrived, or a dead peer).", lbl,
		 (double)lead->blocked_ns / 1e9, short_frame(lead->collective, cb, sizeof(cb)),
		 lead->py_frame ? " from " : "",
		 lead->py_frame ? short_frame(lead->py_frame, pb, sizeof(pb)) : "");
	ev_str(f, "collective_frame", lead->collective);
	if (lead->py_frame)
		ev_str(f, "python_frame", lead->py_frame);
	ev_dbl(f, "blocked_s", round3((double)lead->blocked_ns / 1e9));
	ev_dbl(f, "window_s", round3((double)x->win / 1e9));
	ev_str(f, "waits_in", lead->name);
	if (others[0])
		ev_str(f, "other_threads", others);
	if (lead->stack && ev_str(f, "stack", lead->stack) < 0)
		return -ENOMEM;
	return elsewhere(x, f, stuck, nstuck);
}

static int rule_stuck_collective(struct ctx *x)
{
	pid_t *stuck = NULL;
	size_t nstuck = 0;
	int r = 0;

	if (!x->w)
		return 0;
	/* the processes with a thread stuck, each once, in the order first met */
	for (size_t k = 0; k < x->w->n; k++) {
		const struct thread_wait *w = &x->w->v[k];
		pid_t *nv;

		if (!stuck_in_collective(x, w) || pid_in(stuck, nstuck, w->pid))
			continue;
		nv = reallocarray(stuck, nstuck + 1, sizeof(*nv));
		if (!nv) {
			free(stuck);
			return -ENOMEM;
		}
		stuck = nv;
		stuck[nstuck++] = w->pid;
	}
	for (size_t i = 0; i < nstuck && r == 0; i++)
		r = stuck_finding(x, stuck[i], stuck, nstuck);
	free(stuck);
	return r;
}

/* pageable copies of one thread that are not checkpoint staging */
struct pageable {
	uint64_t count, bytes, ns, staged_count, staged_bytes;
};

static bool followed_by_file_write(const struct ctx *x, const struct an_thread *th, uint64_t after,
				   const uint64_t *marks, size_t nmarks)
{
	uint64_t first_write = UINT64_MAX;

	if (!x->w)
		return false;
	for (size_t i = 0; i < x->w->n; i++) {
		const struct thread_wait *w = &x->w->v[i];

		if (w->pid == th->pid && w->tid == th->tid && w->ts >= after &&
		    w->ts - after <= (uint64_t)TH(TH_STAGING_GAP) && w->ts < first_write &&
		    findings_wait_class(w) == WC_FILE_WRITE)
			first_write = w->ts;
	}
	if (first_write == UINT64_MAX)
		return false;
	/* no launch or collective of the thread between the copy and the write */
	for (size_t i = 0; i < nmarks; i++)
		if (marks[i] > after && marks[i] < first_write)
			return false;
	return true;
}

static int rule_pageable(struct ctx *x)
{
	const struct analysis *a = x->a;
	const struct profile *p = x->p;
	struct pageable *pg = calloc(a->nthreads + 1, sizeof(*pg));
	uint64_t pinned_bytes = 0, pinned_ns = 0;
	int r = 0;

	if (!pg)
		return -ENOMEM;
	for (size_t i = 0; i < a->ncopies; i++) {
		if (strcmp(a->copies[i].host_memory, "pinned") == 0 &&
		    (strcmp(a->copies[i].kind, "HtoD") == 0 || strcmp(a->copies[i].kind, "DtoH") == 0)) {
			pinned_bytes += a->copies[i].blocking_bytes;
			pinned_ns += a->copies[i].blocking_ns;
		}
	}
	for (size_t ti = 0; ti < p->ntargets; ti++) {
		const struct target *t = &p->targets[ti];
		uint32_t last_ns_tid = UINT32_MAX;
		const struct an_thread *th = NULL;
		uint64_t *marks = NULL;
		size_t nmarks = 0, capmarks = 0, mark_thread = SIZE_MAX;

		for (size_t i = 0; i < t->store.n; i++) {
			const struct aiprof_event *e = &t->store.v[i];
			const struct aiprof_ev_memcpy *m = &e->u.memcpy;
			size_t thi;

			if (e->type != AIPROF_EV_CUDA_MEMCPY ||
			    (m->kind != AIPROF_MEMCPY_H2D && m->kind != AIPROF_MEMCPY_D2H) ||
			    strcmp(memcpy_host_memory(m), "pageable") != 0)
				continue;
			if (e->tid != last_ns_tid) {
				th = analysis__thread(a, t->pid, target_host_tid(t, e->tid));
				last_ns_tid = e->tid;
			}
			if (!th || !is_training(th))
				continue;
			thi = (size_t)(th - a->threads);
			if (x->w && m->kind == AIPROF_MEMCPY_D2H) {
				if (mark_thread != thi) {
					/* launch and collective starts of this thread */
					nmarks = 0;
					for (size_t k = 0; k < t->store.n; k++) {
						const struct aiprof_event *q = &t->store.v[k];

						if ((q->type != AIPROF_EV_CUDA_LAUNCH &&
						     q->type != AIPROF_EV_NCCL_COLL) || q->tid != e->tid)
							continue;
						if (nmarks == capmarks) {
							size_t nc = capmarks ? capmarks * 2 : 256;
							uint64_t *nv = realloc(marks, nc * sizeof(*nv));

							if (!nv) {
								free(marks);
								free(pg);
								return -ENOMEM;
							}
							marks = nv;
							capmarks = nc;
						}
						marks[nmarks++] = q->ts;
					}
					mark_thread = thi;
				}
				if (followed_by_file_write(x, th, e->ts + e->dur, marks, nmarks)) {
					pg[thi].staged_count++;
					pg[thi].staged_bytes += m->bytes;
					continue;
				}
			}
			pg[thi].count++;
			pg[thi].bytes += m->bytes;
			pg[thi].ns += e->dur;
		}
		free(marks);
	}
	for (size_t i = 0; i < a->nthreads; i++) {
		const struct an_thread *th = &a->threads[i];
		double share = x->win ? (double)pg[i].ns / (double)x->win : 0;
		double bw = pg[i].ns ? (double)pg[i].bytes / (double)pg[i].ns : 0; /* GB/s */
		double pinned_bw = pinned_ns ? (double)pinned_bytes / (double)pinned_ns : 0;
		enum finding_severity sev;
		struct finding *f;
		char lbl[80];

		if (share < TH(TH_PAGEABLE_WARN) || (double)pg[i].bytes < TH(TH_PAGEABLE_MIN_BYTES))
			continue;
		sev = share >= TH(TH_PAGEABLE_CRIT) ? SEV_CRITICAL : SEV_WARNING;
		f = add_finding(x->f, 0, sev);
		if (!f) {
			r = -ENOMEM;
			break;
		}
		where(f, th);
		thread_label(th, lbl, sizeof(lbl));
		snprintf(f->summary, sizeof(f->summary),
			 "%s spends %.1f%% of the window in %llu copies between pageable host memory "
			 "and the GPU (%.0f MiB at %.2f GB/s).", lbl, 100.0 * share,
			 (unsigned long long)pg[i].count, (double)pg[i].bytes / MIB, bw);
		ev_u64(f, "copies", pg[i].count);
		ev_u64(f, "bytes", pg[i].bytes);
		ev_dbl(f, "copy_ms", round3(ms(pg[i].ns)));
		ev_dbl(f, "share_of_window", round3(share));
		ev_dbl(f, "pageable_gbps", round3(bw));
		if (pinned_bw > 0) {
			ev_dbl(f, "pinned_gbps_measured", round3(pinned_bw));
			if (pinned_bw > bw)
				ev_dbl(f, "est_saving_ms", round3(ms(pg[i].ns) -
						ms((uint64_t)((double)pg[i].bytes / pinned_bw))));
		}
		if (pg[i].staged_count)
			ev_u64(f, "checkpoint_staging_copies_excluded", pg[i].staged_count);
	}
	free(pg);
	return r;
}

static int rule_small_kernels(struct ctx *x)
{
	const struct analysis *a = x->a;

	for (size_t i = 0; i < a->nthreads; i++) {
		const struct an_thread *th = &a->threads[i];
		double rate = x->win ? (double)th->launches * 1e9 / (double)x->win : 0;
		bool cupti = th->gpu_kernels > 0;
		double small = cupti ? (double)th->short_kernels / (double)th->gpu_kernels :
			       th->launches ? (double)th->tiny_launches / (double)th->launches : 0;
		double busy = 0;
		enum finding_severity sev;
		struct finding *f;
		char lbl[80];

		if (rate < TH(TH_SMALL_RATE) || small < TH(TH_SMALL_SHARE))
			continue;
		if (cupti) {
			uint64_t b = 0;

			for (size_t k = 0; k < th->ngpu; k++)
				b += th->gpu[k].end - th->gpu[k].start;
			busy = x->win ? (double)b / (double)x->win : 0;
			if (busy >= TH(TH_SMALL_BUSY))
				continue;
		}
		sev = rate >= TH(TH_SMALL_CRIT_RATE) ? SEV_CRITICAL : SEV_WARNING;
		f = add_finding(x->f, 1, sev);
		if (!f)
			return -ENOMEM;
		where(f, th);
		thread_label(th, lbl, sizeof(lbl));
		snprintf(f->summary, sizeof(f->summary),
			 "%s launches %.0f kernels/s and %.0f%% of them are small (%s): the GPU is "
			 "launch-bound, the classic sign of a batch too small for the GPU.", lbl, rate,
			 100.0 * small, cupti ? "shorter than 20 us on the GPU" : "<= 4096 threads");
		ev_u64(f, "launches", th->launches);
		ev_dbl(f, "launches_per_s", round3(rate));
		ev_dbl(f, "small_share", round3(small));
		ev_str(f, "timing", cupti ? "cupti" : "api");
		if (cupti)
			ev_dbl(f, "gpu_busy_share", round3(busy));
		ev_dbl(f, "launch_api_ms", round3(ms(th->launch_api_ns)));
	}
	return 0;
}

static int rule_waits(struct ctx *x, enum wait_class c)
{
	const struct analysis *a = x->a;
	bool ckpt = c == WC_FILE_WRITE;
	int cat = ckpt ? 2 : 3;

	if (!x->w)
		return 0;
	for (size_t i = 0; i < a->nthreads; i++) {
		const struct an_thread *th = &a->threads[i];
		struct class_time ct;
		double share;
		enum finding_severity sev;
		struct finding *f;
		char lbl[80], top[400], ofw[128];
		uint64_t rec;
		int r;

		if (!is_training(th))
			continue;
		r = class_time(x, th, c, a->window_start, thread_hi(x, i), &ct);
		if (r < 0) {
			free(ct.durs);
			return r;
		}
		rec = recorded_ns(x, a->window_start, a->window_end);
		share = rec ? (double)ct.blocked_ns / (double)rec : 0;
		if (ckpt ? (share < TH(TH_CKPT_WARN) || ct.blocked_ns < (uint64_t)TH(TH_CKPT_MIN_NS)) :
			   (share < TH(TH_LOADER_WARN) || ct.waits < (uint64_t)TH(TH_LOADER_MIN_WAITS))) {
			free(ct.durs);
			continue;
		}
		sev = share >= TH(ckpt ? TH_CKPT_CRIT : TH_LOADER_CRIT) ? SEV_CRITICAL : SEV_WARNING;
		f = add_finding(x->f, cat, sev);
		if (!f) {
			free(ct.durs);
			return -ENOMEM;
		}
		where(f, th);
		thread_label(th, lbl, sizeof(lbl));
		if (ct.top.path)
			snprintf(top, sizeof(top), "%s %s", ct.top.name, ct.top.path);
		else
			snprintf(top, sizeof(top), "%s", ct.top.name ? ct.top.name : "blocked");
		if (ckpt)
			snprintf(f->summary, sizeof(f->summary),
				 "The training thread %s was blocked writing files for %.0f ms (%.1f%% of "
				 "%s) in %llu episode%s while the GPU idled; mostly %s.",
				 lbl, ms(ct.blocked_ns), 100.0 * share, of_what(x, rec, ofw, sizeof(ofw)),
				 (unsigned long long)ct.episodes, ct.episodes == 1 ? "" : "s", top);
		else
			snprintf(f->summary, sizeof(f->summary),
				 "The training thread %s waited for input for %.0f ms (%.1f%% of "
				 "%s) in %llu waits while the GPU idled; mostly %s.",
				 lbl, ms(ct.blocked_ns), 100.0 * share, of_what(x, rec, ofw, sizeof(ofw)),
				 (unsigned long long)ct.waits, top);
		ev_dbl(f, "blocked_ms", round3(ms(ct.blocked_ns)));
		ev_dbl(f, "share_of_window", round3(share));
		ev_recorded(f, x, rec);
		ev_u64(f, ckpt ? "slow_calls" : "waits", ct.waits);
		ev_u64(f, "episodes", ct.episodes);
		ev_dbl(f, "longest_episode_ms", round3(ms(ct.longest_episode_ns)));
		if (ckpt) {
			ev_u64(f, "bytes_in_slow_writes", ct.bytes);
			ev_u64(f, "flushes", ct.flushes);
		} else {
			ev_dbl(f, "median_wait_ms", round3(ms(median_u64(ct.durs, ct.waits))));
		}
		if (ev_str(f, "top_wait", top) < 0) {
			free(ct.durs);
			return -ENOMEM;
		}
		ev_str(f, "gpu_idle_from", a->gpu_timing ? "cupti" : "api (not inside a CUDA/NCCL call)");
		free(ct.durs);
	}
	return 0;
}

/*
 * A process's data waits and life in the window, from its main thread's waits: how long it
 * waited for input (the class WC_DATA_WAIT, merged), and from when to when it was seen.
 */
struct proc_waits {
	uint64_t input_ns, waits, from, to;
	const char *busy_frame;   /* the Python frame of its longest wait that is not for input */
	uint64_t busy_frame_ns;
};

static int main_thread_waits(const struct ctx *x, pid_t pid, uint64_t from,
			     struct proc_waits *ret)
{
	const struct analysis *a = x->a;
	struct an_span *v = NULL;
	size_t n = 0, cap = 0;

	*ret = (struct proc_waits){ .from = from > a->window_start ? from : a->window_start };
	ret->to = ret->from;
	for (size_t k = 0; k < x->w->n; k++) {
		const struct thread_wait *w = &x->w->v[k];
		uint64_t s = w->ts > ret->from ? w->ts : ret->from;
		uint64_t e = w->ts + w->dur < a->window_end ? w->ts + w->dur : a->window_end;

		if (w->pid != pid || w->kind != WAIT_OFFCPU || e <= s)
			continue;
		if (e > ret->to)
			ret->to = e;
		if ((uint32_t)w->pid != w->tid)
			continue;   /* the worker loop runs on the process's main thread */
		if (findings_wait_class(w) != WC_DATA_WAIT) {
			if (w->py_frame && e - s > ret->busy_frame_ns) {
				ret->busy_frame = w->py_frame;
				ret->busy_frame_ns = e - s;
			}
			continue;
		}
		ret->waits++;
		if (span_push(&v, &n, &cap, s, e) < 0) {
			free(v);
			return -ENOMEM;
		}
	}
	n = an_spans_merge(v, n);
	for (size_t k = 0; k < n; k++)
		ret->input_ns += v[k].end - v[k].start;
	free(v);
	return 0;
}

/*
 * DataLoaderStall from the worker processes: a process whose main thread waits for input
 * while processes it started during the window (its DataLoader workers) work. Each worker's
 * busy share is its life in the window less its own waits for input (the index queue); the
 * busiest is the one the others wait for, named with the Python frame it spends its time in.
 * Next to a DataLoaderStall of the same process (a GPU job) it adds that evidence; alone (a
 * CPU job: no GPU idles) it is a finding of its own.
 */
static int rule_loader_workers(struct ctx *x)
{
	if (!x->w)
		return 0;
	for (size_t i = 0; i < x->w->nprocs; i++) {
		pid_t parent = x->w->procs[i].parent;
		struct proc_waits pw, slow = { 0 };
		char list[1024] = "", lbl[64], ofw[128];
		double share, slow_busy = 0;
		uint64_t rec;
		uint64_t slow_busy_ns = 0;
		size_t used = 0, nworkers = 0;
		pid_t slow_pid = 0;
		struct finding *f = NULL;
		bool seen = false;
		int r;

		for (size_t j = 0; j < i && !seen; j++)
			seen = x->w->procs[j].parent == parent;
		if (seen)
			continue;
		for (size_t j = 0; j < x->w->nprocs; j++) {
			const struct wait_proc *c = &x->w->procs[j];
			uint64_t wrec;
			double busy;
			int n;

			if (c->parent != parent)
				continue;
			r = main_thread_waits(x, c->pid, c->started_ns, &pw);
			if (r < 0)
				return r;
			if (pw.to <= pw.from)
				continue;
			wrec = recorded_ns(x, pw.from, pw.to);
			if (!wrec)
				continue;
			nworkers++;
			busy = 1.0 - (double)pw.input_ns / (double)wrec;
			n = snprintf(list + used, sizeof(list) - used, "%spid %d: busy %.0f%% of %.0f ms",
				     used ? "; " : "", c->pid, 100.0 * busy, ms(wrec));
			if (n > 0)
				used += (size_t)n < sizeof(list) - used ? (size_t)n : sizeof(list) - used - 1;
			/* the one the others wait for works longest (not: a worker seen briefly as
			 * it exited, busy for all of those few ms) */
			if ((uint64_t)(busy * (double)wrec) > slow_busy_ns) {
				slow_busy_ns = (uint64_t)(busy * (double)wrec);
				slow_busy = busy;
				slow_pid = c->pid;
				slow = pw;
			}
		}
		if (nworkers < 1)
			continue;
		r = main_thread_waits(x, parent, x->a->window_start, &pw);
		if (r < 0)
			return r;
		rec = recorded_ns(x, x->a->window_start, x->a->window_end);
		share = rec ? (double)pw.input_ns / (double)rec : 0;
		for (size_t k = 0; k < x->f->n; k++)
			if (x->f->v[k].pid == parent && !strcmp(x->f->v[k].category, "DataLoaderStall"))
				f = &x->f->v[k];
		if (!f) {
			if (share < TH(TH_LOADER_WARN) || pw.waits < (uint64_t)TH(TH_LOADER_MIN_WAITS))
				continue;
			f = add_finding(x->f, 3, share >= TH(TH_LOADER_CRIT) ? SEV_CRITICAL : SEV_WARNING);
			if (!f)
				return -ENOMEM;
			f->pid = parent;
			f->tid = (uint32_t)parent;
			snprintf(lbl, sizeof(lbl), "pid %d", parent);
			snprintf(f->summary, sizeof(f->summary),
				 "The main thread of %s waited for its %zu worker process%s for %.0f ms "
				 "(%.1f%% of %s); worker pid %d is the busiest (%.0f%% of its "
				 "time)%s%s.",
				 lbl, nworkers, nworkers == 1 ? "" : "es", ms(pw.input_ns), 100.0 * share,
				 of_what(x, rec, ofw, sizeof(ofw)), slow_pid, 100.0 * slow_busy,
				 slow.busy_frame ? ", mostly in " : "", slow.busy_frame ? slow.busy_frame : "");
			ev_dbl(f, "blocked_ms", round3(ms(pw.input_ns)));
			ev_dbl(f, "share_of_window", round3(share));
			ev_recorded(f, x, rec);
			ev_u64(f, "waits", pw.waits);
		}
		ev_u64(f, "slowest_worker", (uint64_t)slow_pid);
		ev_dbl(f, "slowest_worker_busy_share", round3(slow_busy));
		if (slow.busy_frame && ev_str(f, "slowest_worker_in", slow.busy_frame) < 0)
			return -ENOMEM;
		if (ev_str(f, "workers", list) < 0)
			return -ENOMEM;
	}
	return 0;
}

/* time the thread spent waiting for data or writing files in [lo, hi) */
static int explained_ns(const struct ctx *x, const struct an_thread *th, uint64_t lo, uint64_t hi,
			uint64_t *ret)
{
	struct class_time a, b;
	int r;

	*ret = 0;
	if (!x->w || hi <= lo)
		return 0;
	r = class_time(x, th, WC_DATA_WAIT, lo, hi, &a);
	free(a.durs);
	if (r < 0)
		return r;
	r = class_time(x, th, WC_FILE_WRITE, lo, hi, &b);
	free(b.durs);
	if (r < 0)
		return r;
	*ret = a.raw_ns + b.raw_ns;
	return 0;
}

static int rule_straggler(struct ctx *x)
{
	const struct analysis *a = x->a;

	for (size_t gi = 0; gi < a->ngroups; gi++) {
		const struct an_group *g = &a->groups[gi];
		uint64_t *first = NULL, *un = NULL, *late_sum = NULL, *late_n = NULL, all = 0;
		uint64_t min_late = (uint64_t)TH(TH_STRAG_MIN_NS);
		uint64_t rel = (uint64_t)(TH(TH_STRAG_REL) * (double)g->period_ns);
		int r = 0;

		if (g->ambiguous || g->nm < 2 || g->ncoll < (size_t)TH(TH_STRAG_MIN_COLLS))
			continue;
		if (rel > min_late)
			min_late = rel;
		first = malloc(g->ncoll * sizeof(*first));
		un = malloc(g->ncoll * g->nm * sizeof(*un));
		late_sum = calloc(g->nm, sizeof(*late_sum));
		late_n = calloc(g->nm, sizeof(*late_n));
		if (!first || !un || !late_sum || !late_n) {
			r = -ENOMEM;
			goto next;
		}
		for (size_t k = 0; k < g->ncoll; k++) {
			first[k] = UINT64_MAX;
			for (size_t j = 0; j < g->nm; j++)
				if (g->m[j].entry[k] < first[k])
					first[k] = g->m[j].entry[k];
		}
		/* lateness into each collective, less what waiting for data or file writes
		 * explains (those have their own rules) */
		for (size_t j = 0; j < g->nm; j++) {
			const struct an_rank *m = &g->m[j];
			const struct an_thread *th = &a->threads[m->thread];

			for (size_t k = 0; k < g->ncoll; k++) {
				uint64_t lat = m->entry[k] - first[k], expl = 0, u;

				if (lat >= min_late) {
					r = explained_ns(x, th, m->prev_exit[k] ? m->prev_exit[k] : first[k],
							 m->entry[k], &expl);
					if (r < 0)
						goto next;
				}
				u = lat > expl ? lat - expl : 0;
				un[j * g->ncoll + k] = u;
				if (u >= min_late) {
					late_sum[j] += u;
					late_n[j]++;
					all += u;
				}
			}
		}
		for (size_t j = 0; j < g->nm; j++) {
			const struct an_rank *m = &g->m[j];
			const struct an_thread *th = &a->threads[m->thread];
			double dominance = all ? (double)late_sum[j] / (double)all : 0;
			double lost = x->win ? (double)late_sum[j] / (double)x->win : 0;
			double share = (double)late_n[j] / (double)g->ncoll;
			uint64_t med;
			struct finding *f;
			char lbl[80];

			if (late_n[j] < (uint64_t)TH(TH_STRAG_MIN_COLLS) || dominance < TH(TH_STRAG_SHARE) ||
			    lost < TH(TH_STRAG_WINDOW) || share < TH(TH_STRAG_LATE_SHARE))
				continue;
			/* median over the collectives it was late into */
			{
				uint64_t *v = malloc(late_n[j] * sizeof(*v));
				size_t nv = 0;

				if (!v) {
					r = -ENOMEM;
					goto next;
				}
				for (size_t k = 0; k < g->ncoll; k++)
					if (un[j * g->ncoll + k] >= min_late)
						v[nv++] = un[j * g->ncoll + k];
				med = median_u64(v, nv);
				free(v);
			}
			f = add_finding(x->f, 5, g->period_ns && (double)med >= TH(TH_STRAG_CRIT_REL) *
					(double)g->period_ns ? SEV_CRITICAL : SEV_WARNING);
			if (!f) {
				r = -ENOMEM;
				goto next;
			}
			where(f, th);
			thread_label(th, lbl, sizeof(lbl));
			snprintf(f->summary, sizeof(f->summary),
				 "%s arrives last at its collectives, by %.1f ms (median, %llu of %zu "
				 "collectives): the other rank%s waited %.0f ms for it, %.0f%% of the window.",
				 lbl, ms(med), (unsigned long long)late_n[j], g->ncoll,
				 g->nm == 2 ? "" : "s", ms(late_sum[j]), 100.0 * lost);
			ev_u64(f, "rank", (uint64_t)th->rank);
			ev_u64(f, "nranks", (uint64_t)g->nranks);
			ev_u64(f, "collectives", g->ncoll);
			ev_u64(f, "late_collectives", late_n[j]);
			ev_dbl(f, "late_share", round3(share));
			ev_dbl(f, "median_lateness_ms", round3(ms(med)));
			ev_dbl(f, "others_waited_ms", round3(ms(late_sum[j])));
			ev_dbl(f, "share_of_window_lost", round3(lost));
			ev_dbl(f, "share_of_all_lateness", round3(dominance));
			ev_dbl(f, "collective_period_ms", round3(ms(g->period_ns)));
		}
next:
		free(first);
		free(un);
		free(late_sum);
		free(late_n);
		if (r < 0)
			return r;
	}
	return 0;
}

static int rule_excessive_sync(struct ctx *x)
{
	const struct analysis *a = x->a;

	for (size_t i = 0; i < a->nthreads; i++) {
		const struct an_thread *th = &a->threads[i];
		double rate = x->win ? (double)th->syncs * 1e9 / (double)x->win : 0;
		double per = th->launches ? (double)th->syncs / (double)th->launches : 0;
		struct finding *f;
		char lbl[80];

		if (!th->launches || rate < TH(TH_SYNC_RATE) || per < TH(TH_SYNC_PER_LAUNCH))
			continue;
		f = add_finding(x->f, 6, SEV_WARNING);
		if (!f)
			return -ENOMEM;
		where(f, th);
		thread_label(th, lbl, sizeof(lbl));
		snprintf(f->summary, sizeof(f->summary),
			 "%s synchronises with the GPU %.0f times/s, %.2f times per kernel launch "
			 "(%llu device-wide): host and GPU take turns instead of overlapping.", lbl, rate,
			 per, (unsigned long long)th->device_syncs);
		ev_u64(f, "syncs", th->syncs);
		ev_u64(f, "device_syncs", th->device_syncs);
		ev_u64(f, "launches", th->launches);
		ev_dbl(f, "syncs_per_s", round3(rate));
		ev_dbl(f, "syncs_per_launch", round3(per));
		ev_dbl(f, "sync_wait_ms", round3(ms(th->sync_ns)));
		ev_dbl(f, "sync_share_of_window", round3(x->win ? (double)th->sync_ns / (double)x->win : 0));
	}
	return 0;
}

/* A target that was killed by a signal, or exited with a failure, during the window. */
static int rule_target_died(struct ctx *x)
{
	for (size_t i = 0; i < x->p->ntargets; i++) {
		const struct target *t = &x->p->targets[i];
		bool sig = WIFSIGNALED(t->exit_status);
		struct finding *f;
		char how[64];

		if (!t->died || (!sig && WEXITSTATUS(t->exit_status) == 0))
			continue;       /* an ordinary exit (a worker that finished) is no finding */
		proc_status_text(t->exit_status, how, sizeof(how));
		f = add_finding(x->f, 8, sig ? SEV_CRITICAL : SEV_WARNING);
		if (!f)
			return -ENOMEM;
		f->pid = t->pid;
		snprintf(f->summary, sizeof(f->summary), "%s (pid %d) %s %.3f s into the window, "
			 "while aiprof was %s.", t->comm, t->pid, how,
			 t->exit_ns > x->p->start_ns ? (double)(t->exit_ns - x->p->start_ns) / 1e9 : 0,
			 t->died_during);
		ev_u64(f, "pid", (uint64_t)t->pid);
		if (ev_str(f, "how", how) < 0 || ev_str(f, "aiprof_was", t->died_during) < 0 ||
		    ev_str(f, "cmdline", t->cmdline) < 0)
			return -ENOMEM;
		if (sig)
			ev_u64(f, "signal", (uint64_t)WTERMSIG(t->exit_status));
		else
			ev_u64(f, "exit_code", (uint64_t)WEXITSTATUS(t->exit_status));
	}
	return 0;
}

static int rule_memory_growth(struct ctx *x)
{
	const struct analysis *a = x->a;

	for (size_t i = 0; i < a->nmemory; i++) {
		const struct an_memory *m = &a->memory[i];
		double spread = x->win ? (double)(m->last_unfreed_ts - m->first_unfreed_ts) /
				(double)x->win : 0;
		double rate = x->win ? (double)m->unfreed_bytes * 1e9 / (double)x->win : 0;
		struct finding *f;

		if ((double)m->unfreed_bytes < TH(TH_GROWTH_MIN_BYTES) ||
		    m->unfreed_allocs < (uint64_t)TH(TH_GROWTH_MIN_ALLOCS) || spread < TH(TH_GROWTH_SPREAD))
			continue;
		f = add_finding(x->f, 7, rate >= TH(TH_GROWTH_CRIT_RATE) ? SEV_CRITICAL : SEV_WARNING);
		if (!f)
			return -ENOMEM;
		f->pid = m->pid;
		snprintf(f->summary, sizeof(f->summary),
			 "pid %d allocated %.0f MiB of device memory in %llu allocations during the "
			 "window and freed none of it: +%.1f MiB/s, an 80 GB GPU fills in %.0f min.",
			 m->pid, (double)m->unfreed_bytes / MIB, (unsigned long long)m->unfreed_allocs,
			 rate / MIB, rate > 0 ? 80e9 / rate / 60 : 0);
		ev_u64(f, "unfreed_allocations", m->unfreed_allocs);
		ev_u64(f, "unfreed_bytes", m->unfreed_bytes);
		ev_dbl(f, "growth_mib_per_s", round3(rate / MIB));
		ev_u64(f, "allocations", m->allocs);
		ev_u64(f, "frees", m->frees);
		ev_u64(f, "largest_unfreed_bytes", m->largest_unfreed);
		ev_dbl(f, "spread_share_of_window", round3(spread));
		ev_dbl(f, "minutes_to_80gb", round3(rate > 0 ? 80e9 / rate / 60 : 0));
	}
	return 0;
}

static int finding_order(const void *x, const void *y)
{
	const struct finding *a = x, *b = y;
	int ca = 0, cb = 0;

	if (a->severity != b->severity)
		return a->severity < b->severity ? 1 : -1;
	for (int i = 0; i < FINDING_CATEGORIES; i++) {
		if (a->category == finding_categories[i])
			ca = i;
		if (b->category == finding_categories[i])
			cb = i;
	}
	if (ca != cb)
		return ca - cb;
	return a->rank - b->rank;
}

int findings__run(const struct profile *p, const struct analysis *a, const struct wait_list *waits,
		  const char *why_no_waits, struct findings **ret)
{
	struct findings *f = calloc(1, sizeof(*f));
	struct ctx x = { .p = p, .a = a, .w = waits, .f = f };
	int r;

	if (!f)
		return -ENOMEM;
	x.win = a->window_end - a->window_start;
	x.hang_from = calloc(a->nthreads + 1, sizeof(*x.hang_from));
	if (!x.hang_from) {
		free(f);
		return -ENOMEM;
	}
	f->waits_known = waits != NULL;
	snprintf(f->waits_why, sizeof(f->waits_why), "%s", waits ? "" :
		 why_no_waits && *why_no_waits ? why_no_waits : "no off-CPU or syscall data");
	r = rule_nccl_hang(&x);
	if (!r)
		r = rule_stuck_collective(&x);
	if (!r)
		r = rule_pageable(&x);
	if (!r)
		r = rule_small_kernels(&x);
	if (!r)
		r = rule_waits(&x, WC_FILE_WRITE);
	if (!r)
		r = rule_waits(&x, WC_DATA_WAIT);
	if (!r)
		r = rule_loader_workers(&x);
	if (!r)
		r = rule_straggler(&x);
	if (!r)
		r = rule_excessive_sync(&x);
	if (!r)
		r = rule_memory_growth(&x);
	if (!r)
		r = rule_target_died(&x);
	free(x.hang_from);
	if (r < 0) {
		findings__free(f);
		return r;
	}
	if (f->n)
		qsort(f->v, f->n, sizeof(*f->v), finding_order);
	*ret = f;
	return 0;
}

void findings__free(struct findings *f)
{
	if (!f)
		return;
	for (size_t i = 0; i < f->n; i++)
		for (size_t k = 0; k < f->v[i].nev; k++)
			if (f->v[i].ev[k].type == EV_STR)
				free(f->v[i].ev[k].s);
	free(f->v);
	free(f);
}
