/* SPDX-License-Identifier: MIT */
/*
 * The diagnosis: rules over one recorded window that name a known cause of low GPU
 * utilisation (the categories of Gao et al., ICSE 2024) with the numbers that support it
 * and what to do about it. Input is the profile, its analysis and the waits of threads
 * (blocked system calls and off-CPU intervals, from the eBPF collectors). The thresholds
 * live in one table in findings.c, each with its reasoning.
 */
#ifndef AIPROF_FINDINGS_H
#define AIPROF_FINDINGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct profile;
struct analysis;

/* ---- waits: what threads were blocked in -------------------------------------------------- */

enum wait_kind {
	WAIT_SYSCALL = 0,   /* a slow system call: name, path (its file), bytes */
	WAIT_OFFCPU = 1,    /* time off CPU: name = the syscall it blocked in, or the kernel
			     * function it waited in */
};

struct thread_wait {
	pid_t pid;
	uint32_t tid;             /* host tid */
	uint64_t ts, dur;         /* CLOCK_MONOTONIC ns */
	enum wait_kind kind;
	const char *name;         /* "fsync", "read", "futex_do_wait", ... */
	const char *path;         /* file path, "pipe:[ino]", a socket; NULL if none */
	uint64_t bytes;           /* bytes the call moved (syscalls), 0 otherwise */
	char state;               /* off-CPU: 'S', 'D', 'R' (preempted) ...; 0 for syscalls */
	const char *api_frame;    /* innermost CUDA/NCCL frame of its stack, NULL if none */
	bool open_at_end;         /* still blocked when the window closed */
	bool began_before;        /* off-CPU: ...and since before the window began */
	uint64_t blocked_ns;      /* off-CPU: how long it has been blocked, before the window too */
	const char *collective;   /* innermost collective frame of its stack (NCCL, gloo, c10d,
				   * or a stream/event/device sync), NULL if none */
	const char *py_frame;     /* innermost Python frame of its stack, NULL if none */
	const char *stack;        /* its stack as text, innermost first (evidence); NULL */
};

/* A list of waits that owns copies of their strings. */
/* A process a target started during the window (a DataLoader worker, say), followed. */
struct wait_proc {
	pid_t pid, parent;
	uint64_t started_ns;      /* when it was forked, CLOCK_MONOTONIC */
};

struct wait_list {
	struct thread_wait *v;
	size_t n, cap;
	bool offcpu_known;        /* off-CPU intervals were recorded (not only slow syscalls) */
	struct wait_proc *procs;  /* the followed processes, with their parents */
	size_t nprocs;
	char **strs;
	size_t nstrs, capstrs;
	/* where in the window the collectors recorded nothing (--budget paused them), sorted:
	 * the waits' shares are of the time they recorded */
	struct an_span *unrecorded;
	size_t nunrecorded;
};

/* Is this frame name (as the collectors write it: kernel frames end in "_[k]", Python
 * frames are "qualname (file.py:line)") where a collective waits: NCCL, gloo, c10d's
 * process groups, or a stream/event/device sync? */
bool findings_is_collective_frame(const char *name);

/* Appends copies of n waits (strings copied too). 0 or -ENOMEM (nothing added then). */
int findings_add_waits(struct wait_list *l, const struct thread_wait *w, size_t n);
void wait_list__clear(struct wait_list *l);

/* ---- findings ------------------------------------------------------------------------------ */

enum finding_severity { SEV_INFO = 0, SEV_WARNING = 1, SEV_CRITICAL = 2 };

enum evidence_type { EV_U64, EV_DOUBLE, EV_STR };

struct evidence {
	char key[32];
	enum evidence_type type;
	uint64_t u;
	double d;
	char *s;
};

#define FINDING_MAX_EVIDENCE 16

struct finding {
	const char *category;     /* "PageableMemcpy", ... (static) */
	enum finding_severity severity;
	char summary[320];        /* one sentence with the key numbers */
	const char *remedy;       /* static text */
	pid_t pid;                /* where, when it is one process/thread (0 otherwise) */
	uint32_t tid;
	int32_t rank;             /* -1 when not about a rank */
	struct evidence ev[FINDING_MAX_EVIDENCE];
	size_t nev;
};

struct findings {
	struct finding *v;
	size_t n, cap;
	bool waits_known;         /* the wait-based rules had data (eBPF ran) */
	char waits_why[256];      /* why not */
};

/* The rule categories, in report order. */
#define FINDING_CATEGORIES 9
extern const char *const finding_categories[FINDING_CATEGORIES];

const char *finding_severity_name(enum finding_severity s);

/*
 * Runs every rule. waits may be NULL when the eBPF collectors did not run (why_no_waits
 * then says why); the wait-based rules then report nothing and say so. *ret is freed with
 * findings__free(). 0 or -ENOMEM.
 */
int findings__run(const struct profile *p, const struct analysis *a, const struct wait_list *waits,
		  const char *why_no_waits, struct findings **ret);
void findings__free(struct findings *f);   /* NULL-safe */

/* Options for analysis__new() that match the rules' thresholds. */
struct analysis_opts;
void findings_analysis_opts(struct analysis_opts *o);

/* The thresholds as "name", value, unit, reason rows (README and report). */
struct finding_threshold_row {
	const char *category, *name;
	double value;
	const char *unit, *why;
};
const struct finding_threshold_row *findings_thresholds(size_t *n);

/* Wait classes the rules use (exposed for tests). */
enum wait_class { WC_OTHER = 0, WC_FILE_WRITE, WC_DATA_WAIT, WC_PREEMPTED };
enum wait_class findings_wait_class(const struct thread_wait *w);

#endif
