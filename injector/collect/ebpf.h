/* SPDX-License-Identifier: MIT */
/*
 * The eBPF collectors of `aiprof profile`: on-CPU samples and off-CPU intervals with
 * kernel, native and Python stacks, and system calls, for the target processes only (the
 * filter is in the kernel). Works next to the interception library or without it.
 *
 *   ebpf__new()   open -> configure -> feature-probe -> load -> attach (recording off)
 *   ebpf__start() recording on           ebpf__poll()  while recording (every few ms)
 *   ebpf__stop()  recording off, last records, kernel-side totals, symbols resolved
 *   ebpf__free()
 *
 * The artifact builders read the results (artifacts/ebpf_artifacts.h) through ebpf_timeline_write(),
 * ebpf_summary_write() and ebpf_folded_write().
 */
#ifndef AIPROF_EBPF_H
#define AIPROF_EBPF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct jsonw;
struct target;

enum {
	EBPF_COLLECT_CPU = 1u << 0,       /* on-CPU sampling */
	EBPF_COLLECT_OFFCPU = 1u << 1,    /* blocked time from sched_switch */
	EBPF_COLLECT_SYSCALLS = 1u << 2,  /* syscall latency, slow calls with their files */
	EBPF_COLLECT_PYTHON = 1u << 3,    /* Python frames in the stacks of the two above */
	EBPF_COLLECT_TASKS = 1u << 4,     /* every thread's state and stacks, read on demand
					   * (ebpf__threads(); with offcpu: the threads still
					   * asleep when the window closes) */
	EBPF_COLLECT_FOLLOW = 1u << 5,    /* the processes the targets start, recorded too */
	EBPF_COLLECT_ALL = 0xfu,
};

struct ebpf_opts {
	uint32_t collectors;              /* EBPF_COLLECT_* */
	uint32_t frequency_hz;            /* on-CPU samples per second per CPU; default 99 */
	uint64_t offcpu_min_ns;           /* shortest block recorded; default 1 ms */
	uint64_t slow_syscall_ns;         /* a call at least this long is an event; default 1 ms */
	const char *btf_path;             /* NULL: $AIPROF_VMLINUX_BTF, else /sys/kernel/btf/vmlinux */
	bool no_follow;                   /* do not record the processes the targets start */
	bool wall;                        /* --mode wall: the threads off their CPU sampled too,
					   * at frequency_hz (ebpf_wall.c) */
	bool all_syscalls;                /* every syscall through raw_syscalls (every task's
					   * calls on the kernel's slow path), not only those
					   * that gave up the CPU */
	uint32_t unwind_stack_bytes;      /* user stack copied per stack for CFI unwinding, at
					   * most EBPF_UCOPY_MAX; 0: frame pointers only */
	const char *unwind_cache;         /* directory of the unwind rules shared on the node
					   * (target/uwshare.h); NULL: not shared */
	uint32_t record_rate;             /* per target thread a second, at most this many
					   * off-CPU records and slow-call records, each, and
					   * (switch mode) a tenth as many short calls timed;
					   * past it they are counted in the kernel, not
					   * recorded; blocks and calls of EBPF_RECORD_ALWAYS_NS
					   * or more always are; and EBPF_SITE_FRESH_NS. 0: no
					   * limit, no sites */
	uint32_t budget_ppm;              /* --budget: the share of the targets' CPU the BPF
					   * programs may take (parts per million; 0: none, --budget
					   * off), kept by lowering record_rate, then pausing the
					   * off-CPU and syscall collectors (ebpf_budget.c) */
	size_t max_events;                /* per target, kept whole for the timeline (0: no cap);
					   * past it events count in the flame graphs and totals
					   * only, so memory stays flat however long the window */
};

#define EBPF_DEFAULT_FREQUENCY 99
#define EBPF_UNWIND_STACK_BYTES 16384     /* --unwind cfi: the most the kernel side copies */
#define EBPF_MAX_FREQUENCY 10000
#define EBPF_DEFAULT_RECORD_RATE 100      /* --record-rate */
#define EBPF_RECORD_ALWAYS_NS 10000000ull /* 10 ms: at most 100 a second per thread anyway */
#define EBPF_SITE_FRESH_NS 1000000000ull  /* with a record rate: a thread's long block under
					   * EBPF_RECORD_ALWAYS_NS at a site (syscall, user pc and
					   * sp, first argument, innermost Python frames) it
					   * recorded less than this ago gets that record's stacks,
					   * none taken for it (bpf/offcpu.h) */

struct ebpf;

/*
 * What the window cost, from the kernel's own accounting (BPF_ENABLE_STATS, as bpftool's
 * run_time_ns): every run of every BPF program this process loaded, on every CPU, while
 * recording — a tracepoint's programs run at every context switch and syscall on the node,
 * the targets' and every other task's — against the targets' own CPU time (utime + stime
 * of each target process, followed children included) in the same window.
 */
#define EBPF_COST_PROGS 32
#define EBPF_BUDGET_CHANGES 32

/* One step of the budget (ebpf_cost.budget.changes): at t_ns into the window, the share
 * the last half second had, and what the collectors were set to. */
struct ebpf_budget_change {
	uint64_t t_ns;
	uint32_t share_ppm;
	uint32_t record_rate;             /* 0: no limit */
	bool paused;
};

struct ebpf_budget {
	uint32_t ppm;                     /* 0: no budget */
	bool kept_by_measure;             /* false: the cost could not be measured (why) */
	uint32_t rate;                    /* what the collectors are set to now */
	uint32_t lowest_rate;
	bool paused;
	uint32_t pauses;
	uint64_t paused_ns;               /* the off-CPU and syscall collectors paused, in all */
	uint64_t last_t, last_bpf, last_cpu, last_tw, pause_since, pause_until, resumed_at;
	uint32_t share_at_step;           /* the share when the rate was last lowered */
	uint32_t share_paused;            /* the share while the collectors were last paused */
	size_t nchanges;                  /* listed; changes_total counts every one */
	uint64_t changes_total;
	struct ebpf_budget_change changes[EBPF_BUDGET_CHANGES];
	struct ebpf_pause { uint64_t from_ns, to_ns; } *pause_spans; /* every pause, CLOCK_MONOTONIC
					   * (to_ns 0: it lasts); not capped like changes[] */
	size_t npause_spans, cappause_spans_;
	uint64_t seeded_sleeps, seeded_calls; /* begun in a pause, still on at its end: their
					   * start read from the scheduler then (recorded) */
	uint64_t sleeps_ended_in_pauses;  /* begun before a pause, ended in it: recorded at its
					   * end (kernel stack and user pc only) */
	uint64_t sleeps_ended_unseen;     /* ...whose end could not be told (the thread ran and
					   * slept again in the pause): not recorded */
	uint64_t pause_max_ns;            /* the longest a pause lasts */
	bool ends_in_pauses_recorded;     /* waits that end in a pause are recorded (task works):
					   * every one longer than pause_max_ns is */
	uint64_t calls_ended_in_pauses;   /* calls on as a pause began (given a task work then)
					   * that ended in it: timed and recorded */
};
struct ebpf_cost_prog {
	char name[16];                    /* the program's name as the kernel keeps it */
	uint64_t runs, ns;
	char tail_call_of[16];            /* "": its own runs; else it runs only as a tail call
					   * of this program, whose runs and time include it */
};
struct ebpf_cost {
	bool measured;
	char why[256];                    /* why not, when !measured */
	uint64_t window_ns;
	uint64_t bpf_ns, bpf_runs;        /* all programs together, their task works' callbacks
					   * included (which the kernel's statistics leave out:
					   * the collectors time them, progs[] names them *_tw) */
	uint64_t targets_cpu_ns;          /* clock-tick resolution (10 ms at USER_HZ 100) */
	uint64_t injector_cpu_ns;         /* this process's own CPU time in the window (its
					   * reading of the records, unwinding, symbols): the
					   * node's too, on the targets' CPUs or beside them */
	/* what the record rate left unrecorded (summary.json ebpf.record_rate), all targets */
	uint32_t record_rate;
	uint64_t offcpu_not_recorded, offcpu_not_recorded_ns, slow_not_recorded, untimed;
	/* long blocks at a site their thread had recorded within EBPF_SITE_FRESH_NS: events
	 * with that record's stacks, none taken for them */
	uint64_t offcpu_site_stacks, offcpu_site_stacks_ns;
	uint64_t slow_site;               /* slow calls at a site just recorded: events with
					   * that record's file (syscall_site_event) */
	struct ebpf_budget budget;
	size_t nprogs;                    /* programs listed; past EBPF_COST_PROGS they are
					   * counted in bpf_ns and bpf_runs only */
	struct ebpf_cost_prog progs[EBPF_COST_PROGS];
};

/*
 * Prepares the collectors for these host pids; nothing is recorded until ebpf__start().
 * Returns 0 and *ret (free with ebpf__free()) when at least one collector is attached,
 * else a negative errno and, in why, the reason in words ("the kernel has no BTF ...").
 * Collectors that could not start while others did are listed by ebpf_summary_write().
 */
int ebpf__new(const struct ebpf_opts *o, const pid_t *pids, size_t npids, struct ebpf **ret,
	      char *why, size_t whylen);
void ebpf__start(struct ebpf *e);
/* Consumes what the kernel side has recorded; keeps the Python thread map current. */
void ebpf__poll(struct ebpf *e);
void ebpf__stop(struct ebpf *e);
void ebpf__free(struct ebpf *e);  /* NULL-safe; detaches everything */

/*
 * Reads every thread of the targets now: state, how long it has been asleep or running,
 * the syscall it is in, kernel, native and Python frames. Nothing is stopped or loaded into
 * the targets. Needs EBPF_COLLECT_TASKS. Returns the number of threads (read by the
 * writers in artifacts/ebpf_artifacts.h), or -errno (-ENOTSUP without the tasks
 * collector).
 */
int ebpf__threads(struct ebpf *e);
/* The window's cost once ebpf__stop() ran; NULL before, or without eBPF. */
const struct ebpf_cost *ebpf__cost(const struct ebpf *e);

/* Collectors that ran, as EBPF_COLLECT_* bits. */
uint32_t ebpf__collectors(const struct ebpf *e);
/*
 * What triggers a running collector's programs (one EBPF_COLLECT_* bit): "task" (the
 * targets' threads only) or "global (why)" (every task on the node; the in-kernel tgid
 * filter drops what is not a target). NULL when that collector does not run.
 */
const char *ebpf__scope(const struct ebpf *e, uint32_t collector);
/*
 * Why the kernel refused bpf_task_work to the off-CPU and syscall collectors, which then
 * complete their records at sys_exit and trace raw_syscalls (every task's system calls on
 * the kernel's slow path); NULL if it did not.
 */
const char *ebpf__task_work_refused(const struct ebpf *e);
/* What runs, in words ("cpu at 99 Hz, offcpu from 1ms, python 3.11.2 in pid 42"). */
const char *ebpf__describe(const struct ebpf *e, char *buf, size_t len);

/* A process the follower took in (a target's child: forked in the window, or already
 * there when it began), or the exec of one. */
struct ebpf_proc_note {
	pid_t pid;
	pid_t parent;                     /* the target that started it; 0: a given target
					   * (only its exec is noted) */
	uint64_t ns;                      /* when (CLOCK_MONOTONIC) */
	bool execd;                       /* it exec'd: a new program in that pid */
};

/* The notes since the last call, oldest first, up to max of them; the rest stay for the
 * next call. */
size_t ebpf__follow_news(struct ebpf *e, struct ebpf_proc_note *out, size_t max);

/*
 * tid of pid is aiprof's own (the library's control thread, the thread that loaded it):
 * its records are left out of every artifact from now on, and those already kept are
 * taken out. No-op for a pid that is not recorded, or a tid of 0.
 */
void ebpf__exclude_thread(struct ebpf *e, pid_t pid, pid_t tid);

/* Whether pid's last thread exited during the window (the kernel's exit tracepoint): its
 * wait(2) status and when (CLOCK_MONOTONIC). false if not seen (or not followed). */
bool ebpf__exit_of(const struct ebpf *e, pid_t pid, int *ret_status, uint64_t *ret_ns);

/* The name the program gave thread tid (host tid) of pid: for CPython, its `threading`
 * name ("CustomThreadName-3"), as first read in the window. NULL if none is known. */
const char *ebpf__thread_name(const struct ebpf *e, pid_t pid, uint32_t tid);


#endif
