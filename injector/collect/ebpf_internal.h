/* SPDX-License-Identifier: MIT */
/* What the eBPF loader files (injector/ebpf*.c) share; not for the rest of the injector. */
#ifndef AIPROF_EBPF_INTERNAL_H
#define AIPROF_EBPF_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>
#include <linux/types.h>

#include "u64map.h"
#include "bpf/stack.h"
#include "bpf/syscalls.h"
#include "target/python.h"
#include "target/unwind.h"
#include "ebpf.h"
#include "ebpf_stacks.h"
#include "ebpf_symbols.h"

struct bpf_object;
struct bpf_link;
struct bpf_program;
struct ring_buffer;
struct cpu_bpf;
struct offcpu_bpf;
struct syscalls_bpf;
struct tasks_bpf;
struct task_dump;
struct follow_bpf;

#ifndef PIDFD_THREAD
#define PIDFD_THREAD O_EXCL  /* Linux 6.9: a pidfd for a thread (<fcntl.h>) */
#endif

enum ebpf_collector { EC_CPU, EC_OFFCPU, EC_SYSCALLS, EC_PYTHON, EC_TASKS, EC_FOLLOW, EC__N };

#define EBPF_MAX_FOLLOWED 256     /* processes the targets start that one window follows */
#define EBPF_FOLLOW_NEWS_MAX (2 * EBPF_MAX_FOLLOWED)
/* a forked CPython gives its thread its new id in its after-fork handlers: look again soon */
#define FOLLOW_PY_AGAIN_NS (15 * 1000 * 1000)
#define PY_RETRY_FIRST_NS (50 * 1000 * 1000)     /* an interpreter starting up: looked at */
#define PY_RETRY_MAX_NS (1600 * 1000 * 1000)     /* again, at most this far apart */

#define EBPF_SHARED_MAPS 5
#define EBPF_RINGBUF_BYTES (16u << 20)  /* the ring buffer every collector writes into */

struct ebpf_cpu_ev {
	uint64_t ts;
	uint32_t tid, cpu;
	uint32_t stack;
	uint32_t leaf;            /* frame id of the innermost frame (the event's name) */
	uint8_t gil;              /* enum ebpf_py_gil */
};

struct ebpf_off_ev {
	uint64_t ts, dur;
	uint32_t tid;
	uint32_t stack;
	uint32_t state;
	int32_t syscall;
	uint32_t wchan;           /* frame id of the kernel function it waited in, or UINT32_MAX */
	bool open_at_end;         /* still blocked when the window closed */
	bool began_before;        /* ...and since before the window began (ts = its start) */
	bool site_stacks;         /* its stacks are its thread's last record's at its site (taken
				   * in the second before, not for this block) */
	bool ended_in_pause;      /* begun before a pause of the collector (--budget), ended in
				   * it: kernel stack and user pc only (OFFCPU_F_ENDED_IN_PAUSE) */
	uint64_t blocked_ns;      /* how long it has been blocked, before the window too */
};

/* A site of a thread's off-CPU records (bpf/offcpu.h): the stacks of its last record there,
 * which the blocks at it in the next second get */
struct ebpf_off_site {
	uint32_t tid;
	uint32_t stack;
	uint32_t wchan;
	uint64_t key;
};

struct ebpf_sys_ev {
	uint64_t ts, dur;
	int64_t ret;
	uint64_t bytes, file_size;
	uint32_t tid, nr;
	int64_t fd;               /* -1 when the call has no fd argument */
	bool bytes_unknown;       /* a flush whose file's writes were not all seen (switch mode) */
	bool site;                /* a syscall_site_event: the file of its thread's last record
				   * of the call with that first argument, timed until it got
				   * the CPU back, no ret */
	char *target;             /* file path, "pipe:[ino]", socket description; NULL if none */
};

struct ebpf_sys_stat {
	uint32_t nr;
	uint64_t count, total_ns, max_ns, slow, untimed, limited, site;
	uint32_t hist[SYSCALL_HIST];
};

struct ebpf_tid {
	uint32_t tid;
	char comm[16];
	/* its on-CPU samples as a Python thread whose GIL state was read: holding it, not */
	uint32_t gil_held, gil_not_held;
};

/* A Python thread's `threading` name (py_thread_name()), by host tid. */
struct ebpf_pyname {
	uint32_t tid;
	uint8_t tries;            /* reads that found none (PYNAME_TRIES at most) */
	bool found;
	uint64_t tstate;          /* the thread state read (a tid reused is read anew) */
	char name[64];
};

/* One thread as the task iterator saw it (ebpf_tasks.c). */
struct ebpf_thread {
	uint32_t tid;
	char comm[16];
	uint32_t state;           /* 0 runnable, 1 S, 2 D, 4/8 stopped/traced */
	bool on_cpu;              /* running as it was read: its user stack may be torn */
	int32_t syscall;          /* the syscall it is in, -1 if none */
	uint64_t for_ns;          /* asleep: since it went to sleep; runnable: since it was last
				   * switched in; 0 if the kernel does not say */
	uint32_t stack;           /* stack id (frames root first) */
	uint32_t wchan;           /* frame id of the kernel function it waits in, or UINT32_MAX */
	bool whole;               /* the native stack reached the thread's first frame */
	uint8_t gil;              /* enum ebpf_py_gil, as its Python frames were read */
};

/* Everything recorded for one target process. */
/* --mode wall: a thread as the last tick saw it (ebpf_wall.c) */
struct ebpf_wall_thread {
	uint32_t tid;
	uint32_t pcount;          /* its switch count when its stack was unwound */
	uint64_t last_arrival;    /* and when it had last been switched in then */
	uint32_t stack;           /* that stack; UINT32_MAX: none yet */
	uint64_t base_ns;         /* when its off-CPU time was last given to a sample */
	uint64_t base_run_ns;     /* its CPU time then */
};

struct ebpf_tdata {
	pid_t pid;
	pid_t parent;             /* followed: the target that started it; 0 for a given target */
	uint64_t started_ns;      /* followed: when it was forked (CLOCK_MONOTONIC) */
	bool execd;               /* it exec'd a new program during the window */
	bool exited;              /* its last thread exited during the window: */
	int exit_status;          /* ...as wait(2) gives it */
	uint64_t exit_ns;         /* ...when (CLOCK_MONOTONIC) */
	uint64_t py_soon_ns;      /* read its Python threads again then (a fresh child's
				   * interpreter renames its thread after the fork); 0: no */
	uint32_t root;            /* frame id of the "comm-pid" root frame */
	char comm[16];
	/* ebpf_cost.c: its CPU time in clock ticks as the window opened (cpu_base: read then;
	 * a process added later started in the window) and as last read */
	uint64_t cpu_ticks0, cpu_ticks;
	bool cpu_base, cpu_read;
	struct proc_symbolizer *syms;
	struct u64map ucache;     /* user address -> frame id | USYM flags << 32 | eval << 40 */
	/* --mode wall (ebpf_wall.c): per thread seen, tid -> index in wall[] */
	struct ebpf_wall_thread *wall;
	size_t nwall, capwall;
	struct u64map wall_idx;
	struct py_proc *py;
	char py_why[256];         /* why there are no Python frames, when py is NULL */
	uint64_t py_retry_ns;     /* its interpreter was starting up: look again then */
	uint64_t py_retry_every;  /* ...doubling from PY_RETRY_FIRST_NS to PY_RETRY_MAX_NS */
	uint64_t py_found_late_ns; /* when it was found so, 0: at once */
	struct u64map pycache;    /* hash(code, instr) -> frame id + 1, 0 = not a code object */
	struct u64map pythreads;  /* host tids currently in the py_threads map */
	struct ebpf_pyname *pynames;  /* its Python threads' names, as first read */
	size_t npynames, cappynames;
	struct ebpf_tid *tids;
	size_t ntids, captids;
	uint32_t own[4];          /* aiprof's threads in it (host tids): their records are
				   * left out (ebpf__exclude_thread) */
	size_t nown;
	uint64_t own_records;     /* records of those threads left out */

	struct ebpf_cpu_ev *cpu;
	size_t ncpu, capcpu;
	struct ebpf_off_ev *off;
	size_t noff, capoff;
	struct ebpf_sys_ev *sys;
	size_t nsys, capsys;
	uint64_t summed;                  /* events past opts.max_events: not kept whole */
	uint64_t cpu_samples;             /* every on-CPU sample, kept whole or not */
	struct ebpf_sys_stat *stats;
	size_t nstats;
	struct ebpf_thread *threads;      /* the last ebpf__threads() */
	size_t nthreads, capthreads;
	uint32_t threads_ended;           /* ...of the last read: in its iterator, gone before
					   * their Python frames were read (not shown) */

	/* stack quality, over CPU samples */
	uint64_t samples_user;            /* with a user stack */
	uint64_t samples_truncated;       /* ...that did not reach a thread's first frame */
	uint64_t samples_kernel_cut;      /* kernel stacks at their maximum depth: marked */
	uint64_t samples_py_cut;          /* Python stacks with frames not shown: marked */
	uint64_t samples_kernel;          /* with kernel frames */
	uint64_t samples_py_thread;       /* of threads that run Python */
	uint64_t samples_py;              /* ...with Python frames merged in */
	uint64_t samples_py_interleaved;  /* ...placed at _PyEval_EvalFrame* frames */
	/* native stacks (CPU samples and off-CPU records together): how they were walked */
	uint64_t stacks_fp;               /* walked by frame pointers (they reached a thread's
					   * first frame, or CFI got no further, or no copy) */
	uint64_t stacks_cfi;              /* unwound by CFI from the stack copy */
	uint64_t unwind_ends[UNWIND_END__N];  /* of stacks_cfi, why the walk ended */
	uint64_t unwind_fp_frames;        /* frames of stacks_cfi crossed by frame pointer */
	uint64_t offcpu_count, offcpu_total_ns, offcpu_emitted;  /* kernel-side totals */
	uint64_t offcpu_limited, offcpu_limited_ns;  /* long blocks past the record rate (and
						      * aggregated ones whose site's record was lost) */
	struct ebpf_off_site *sites;      /* its threads' off-CPU sites, and their index by */
	size_t nsites, capsites;          /* u64_hash2(tid, key) */
	struct u64map site_idx;
	struct u64map sys_sites;          /* u64_hash2(tid, (nr, arg0)) -> index in sys[] of the
					   * last slow-call record there */
	uint64_t offcpu_site_stacks, offcpu_site_stacks_ns;  /* blocks with their site's stacks */
};

struct ebpf_cost_base {
	uint32_t id;                      /* the program's kernel id */
	uint64_t runs, ns;
};

struct ebpf {
	struct ebpf_opts opts;
	uint32_t on;                      /* EBPF_COLLECT_* that are running */
	char why[EC__N][256];             /* per collector, why it is off (if asked for) */
	/* per collector that runs, what triggers its programs: "task" (only the targets'
	 * threads), or "global (why)" (every task on the node; the tgid filter drops the rest) */
	char scope[EC__N][640];
	struct cpu_bpf *cpu;
	struct offcpu_bpf *off;
	bool off_task_work;              /* off-CPU records completed by bpf_task_work */
	char task_work_why[320];          /* why this kernel refused bpf_task_work; "" if not */
	struct {                          /* --mode wall (ebpf_wall.c) */
		uint64_t period_ns, next_ns;
		uint64_t ticks, late, failed;     /* ticks run; missed (late); iterator errors */
		uint64_t samples, sampled_us;     /* off-CPU samples, the time they stand for */
		uint64_t unwound, reused, unread; /* stacks unwound; taken from the tick before
						   * (the thread had not run); not readable */
		uint64_t unread_us;               /* the time of the samples not readable */
		uint64_t ns;                      /* the injector's CPU time in the ticks */
	} wall;
	struct syscalls_bpf *sys;
	bool sys_switch;                 /* syscalls from context switches, not raw_syscalls */
	uint32_t py_walk_max;            /* Python frames the BPF walker reads at most */
	bool sys_chained;                /* and sys_switch runs as a tail call of the off-CPU
					  * collector's sched_switch program (ebpf_switch_chain) */
	struct tasks_bpf *tasks;
	struct bpf_link *tasks_link;
	int shared_fd[EBPF_SHARED_MAPS];  /* targets, py_procs, py_threads, events, switch_next;
					   * -1 until loaded */
	struct bpf_link **perf_links;     /* the CPU sampler's events: per target thread, or per CPU */
	int *perf_fds;
	pid_t *perf_tids;                 /* the thread of each event; -1 for a CPU's */
	int nperf, capperf;
	struct ring_buffer *rb;
	struct symbolizer *symz;
	struct stack_store stacks;
	struct stack_tree tree;
	struct u64map kcache;             /* kernel address -> frame id | in_sched_text << 32 */
	struct unwind_tables *uw;         /* CFI of every module, NULL without stack copies */
	char uw_share_why[256];           /* why the rules are not shared ("": they are, or
					   * no directory was given) */
	struct ebpf_tdata *t;
	size_t nt, capt;                  /* capt: the given targets + EBPF_MAX_FOLLOWED */
	struct follow_bpf *follow;
	uint64_t follow_full;             /* children not followed: the limit was reached */
	struct ebpf_proc_note *news;      /* follow notes not yet taken (ebpf__follow_news) */
	size_t nnews, news_read;
	struct py_tstate *tstates;        /* scratch for reading Python thread lists */
	uint64_t start_ns, end_ns, next_tick_ns;
	uint64_t records, foreign, lost, bad_records;
	uint64_t tw_map_full;             /* task works not scheduled: their map was full */
	/* ebpf_cost.c: the kernel's BPF statistics on while recording (-1: not by us), each
	 * program's counts as the window opened, the result */
	int cost_stats_fd;
	uint64_t cost_self0_ns;           /* this process's CPU time as the window opened */
	struct ebpf_cost_base *cost_base;
	size_t ncost_base;
	struct ebpf_cost cost;
	uint64_t cpu_foreign;             /* sampler runs on a non-target thread (0 when "task") */
	/* the targets' context switches as the CPU sampler was opened, and a second from then
	 * to its attach: past CPU_PER_CPU_SWITCHES one event per CPU (ebpf_cpu.c) */
	uint64_t cpu_sw0, cpu_sw0_ns, cpu_switches_per_s;
	bool stopped;
};

/*
 * The scope of the tracepoint collectors (offcpu: sched_switch, and sys_exit without
 * bpf_task_work; syscalls: sched_switch, or raw_syscalls with --all-syscalls or without
 * bpf_task_work). A BPF program on a tracepoint runs for every task: attached through a
 * perf event opened for a task or a cgroup it is still put on the tracepoint itself (the
 * perf event's filter only decides which samples reach its buffer), and there are no
 * kprobes or trampolines here to hook the targets' code paths instead.
 */
#define EBPF_SCOPE_TRACEPOINT "global (the kernel runs a tracepoint's BPF programs for " \
	"every task, whatever task or cgroup the perf event was opened for; the tgid filter " \
	"drops the other processes"
#define EBPF_SCOPE_SYSCALLS_TAIL ", and while raw_syscalls is traced every task's system " \
	"calls take the kernel's slow path)"

/* ebpf_cost.c: at ebpf__start() (after the last target was added), at each tick, at
 * ebpf__stop() (recording off, before the last records); ebpf_cost_free() in ebpf__free() */
void ebpf_cost_begin(struct ebpf *e);
void ebpf_cost_tick(struct ebpf *e);
void ebpf_cost_end(struct ebpf *e);
/* ebpf_cost_end() counts the collectors' own timing of their task works' callbacks (the
 * kernel's statistics do not see them: ebpf_offcpu_tw_ns() and the like) with the programs',
 * as offcpu_tw and sys_tw. ebpf_budget_*() are called beside ebpf_cost_*() by ebpf.c. */
/* The targets' totals of what the record rate left unrecorded into e->cost (after the
 * collectors' finish). */
void ebpf_cost_unrecorded(struct ebpf *e);
void ebpf_cost_free(struct ebpf *e);
/* The BPF time of the window so far (programs and task works), by the kernel's statistics;
 * 0 when they are off. */
uint64_t ebpf_cost_bpf_ns_now(struct ebpf *e);
/* The targets' CPU time in the window so far (clock-tick resolution), as last read. */
uint64_t ebpf_cost_targets_ns_now(const struct ebpf *e);

/* ebpf_budget.c: --budget, kept at each tick from the cost measured so far */
void ebpf_budget_begin(struct ebpf *e);
void ebpf_budget_tick(struct ebpf *e);
void ebpf_budget_end(struct ebpf *e);
/* The collectors' knobs (ebpf_offcpu.c, ebpf_syscalls.c): records a second per thread
 * (0: no limit), and paused (nothing new begun; what a thread began before and ran since
 * is dropped at its next switch). No-ops for a collector that does not run. */
void ebpf_offcpu_throttle(struct ebpf *e, uint32_t rate, bool paused);
void ebpf_syscalls_throttle(struct ebpf *e, uint32_t rate, bool paused);
/* ebpf_core.c: thread tid's value in a task-storage map, by a thread pidfd (Linux 6.9);
 * false if it has none or there are no thread pidfds */
bool ebpf_task_storage_of(int map_fd, uint32_t tid, void *value);

/* ebpf_core.c: every slot of the task-work map map_name of obj (if it has one) deleted,
 * which cancels the works still pending in them: called as recording stops, so that none of
 * ours runs in a target after the window (a thread held asleep since a pause of the
 * budget's runs its work only when its wait ends, which may be hours later). */
void ebpf_task_works_cancel(struct bpf_object *obj, const char *map_name);

/* ebpf_core.c: a collector's knobs in its BPF globals, and its programs that run at every
 * context switch or syscall (NULL-free; those not loaded are skipped) with their links */
struct ebpf_knobs {
	uint32_t *rate;
	bool *paused;
	uint32_t *epoch;
	struct bpf_program *progs[3];
	struct bpf_link **links[3];
	struct bpf_program *seed;     /* a task iterator run once the programs are back */
	struct bpf_program *hold;     /* one run once they are detached (NULL: none) */
};
/* Sets the rate; pausing bumps the epoch and detaches the programs, resuming attaches them
 * again and runs the seed iterator (the threads that went to sleep meanwhile get their
 * sleep's start; the sleeps that ended meanwhile are recorded), and a pause runs the hold
 * iterator once its programs are detached (the stacks of the sleeps on then); a failure is logged, naming what: the collector. A NULL program is
 * skipped (one that runs as another's tail call: ebpf_switch_chain). */
void ebpf_throttle(const char *what, const struct ebpf_knobs *k, uint32_t rate, bool paused);
/* The sleeps and calls begun in the budget's pauses that their seed iterators started. */
uint64_t ebpf_offcpu_seeded(const struct ebpf *e);
/* The sleeps begun before a pause that ended in it: recorded at the resume, and not
 * recorded (their end not known) */
void ebpf_offcpu_ended_in_pauses(const struct ebpf *e, uint64_t *recorded, uint64_t *unseen);
/* The calls on as a pause began (given a task work then) that ended in it: timed and
 * recorded by that work like any other */
void ebpf_syscalls_ended_in_pauses(const struct ebpf *e, uint64_t *ended);
uint64_t ebpf_syscalls_seeded(const struct ebpf *e);
/* Their task works' callback time so far (bss counters), for the running cost. */
uint64_t ebpf_offcpu_tw_ns(const struct ebpf *e);
uint64_t ebpf_syscalls_tw_ns(const struct ebpf *e);
uint64_t ebpf_offcpu_tw_runs(const struct ebpf *e);
uint64_t ebpf_syscalls_tw_runs(const struct ebpf *e);

/* ebpf_core.c */
struct ebpf_tdata *ebpf_tdata_of(struct ebpf *e, uint32_t tgid);
/* Keeps a follow note for ebpf__follow_news(); past EBPF_FOLLOW_NEWS_MAX untaken notes
 * new ones are dropped. */
void ebpf_follow_note(struct ebpf *e, pid_t pid, pid_t parent, uint64_t ns, bool execd);
struct ebpf_tid *ebpf_note_tid(struct ebpf_tdata *td, uint32_t tid, const char *comm);
/* true for a thread of aiprof's own in td (counted in own_records) */
bool ebpf_tid_is_ours(struct ebpf_tdata *td, uint32_t tid);
/* ebpf_syscalls.c: the kernel side leaves tid out of its per-syscall totals too */
void ebpf_syscalls_exclude_tid(struct ebpf *e, uint32_t tid);
/* ebpf_core.c: ebpf__exclude_thread()'s user-space part (the records kept and to come) */
void ebpf_exclude_thread_records(struct ebpf *e, pid_t pid, pid_t tid);
/*
 * Turns a kernel-side stacks block into a stack id of the store (frames root first:
 * "comm-pid", native/Python, kernel). With a stack copy uc (may be NULL) the native part is
 * unwound by CFI unless frame pointers already reached the thread's first frame. For
 * off-CPU stacks (offcpu) the scheduler's own
 * frames above the waiting function are dropped, and *ret_wchan is that function.
 * Updates td's stack-quality counters when count is set. Returns the stack id, or -errno.
 */
int ebpf_stack_from(struct ebpf *e, struct ebpf_tdata *td, const struct ebpf_stacks *st,
		    const struct ebpf_ucopy *uc, bool offcpu, bool count, uint32_t *ret_leaf,
		    uint32_t *ret_wchan);
/* The Python frames of thread tid of td while it is not running, read from the
 * interpreter (py_frames 0 when it has none). */
void ebpf_py_walk_asleep(struct ebpf_tdata *td, uint32_t tid, struct ebpf_stacks *st);
/*
 * The stack copy that follows a record's fixed part of `fixed` bytes, if the record has
 * one whose length agrees with the record's; NULL otherwise (counted as a bad record when
 * the lengths disagree).
 */
const struct ebpf_ucopy *ebpf_ucopy_of(struct ebpf *e, const void *data, size_t size,
				       size_t fixed);
const char *ebpf_state_letter(uint32_t state);
/* May td keep one more event whole (cpu, offcpu, syscall together)? Past the budget it is
 * counted in td->summed; its weight goes into the flame graphs all the same. */
bool ebpf_keep_event(const struct ebpf *e, struct ebpf_tdata *td);
/* Whether the kernel (its BTF at btf_path, NULL: the running one) has bpf_task_work, Linux
 * 6.18: a record completed in the target thread's own context without a syscall tracepoint. */
bool ebpf_kernel_has_task_work(const char *btf_path);
/* The verifier's reason at the end of a program load log, in out (empty if none found). */
void ebpf_verifier_reason(const char *log, char *out, size_t len);
void ebpf_verifier_why_clear(void);
/* Keeps the verifier's reason from a program load log (libbpf's print hook, ebpf.c). */
void ebpf_verifier_why_set(const char *log);
/* --mode wall: the first tick from now; a tick of samples if one is due (ebpf_wall.c) */
void ebpf_wall_begin(struct ebpf *e, uint64_t now);
void ebpf_wall_tick(struct ebpf *e, uint64_t now);
/* A collector's load with bpf_task_work was refused (err): said once, in task_work_why. */
void ebpf_task_work_refused(struct ebpf *e, int err);

/*
 * One collector: ebpf_cpu.c, ebpf_offcpu.c, ebpf_syscalls.c, each a triad with its
 * bpf/NAME.bpf.c. ebpf.c drives them all through this table and nothing else; a collector
 * calls only ebpf_core.c.
 */
struct ebpf_collector_ops {
	enum ebpf_collector id;
	uint32_t flag;                        /* EBPF_COLLECT_* */
	uint32_t rec_type;                    /* EBPF_REC_* of its ring-buffer records */
	/* opens, configures and loads its object; on failure it stays off, why in e->why */
	int (*open)(struct ebpf *e);
	int (*configure)(struct ebpf *e);     /* after load and the shared maps; may be NULL */
	int (*attach)(struct ebpf *e);
	bool (*is_on)(const struct ebpf *e);  /* loaded and not destroyed */
	void (*set_running)(struct ebpf *e, bool on);
	void (*record)(struct ebpf *e, struct ebpf_tdata *td, const void *data, size_t size);
	void (*finish)(struct ebpf *e);       /* at the end of the window; may be NULL */
	void (*destroy)(struct ebpf *e);      /* leaves it off; safe when it is off */
};

extern const struct ebpf_collector_ops ebpf_cpu_ops, ebpf_offcpu_ops, ebpf_syscalls_ops,
	ebpf_tasks_ops, ebpf_follow_ops;

/* ebpf_core.c: td set up for pid (its comm read from /proc when comm is NULL), symbols and
 * CPython looked for; 0, or -ENOMEM. */
int ebpf_tdata_init(struct ebpf *e, struct ebpf_tdata *td, pid_t pid, const char *comm);
/* CPython in td's process (once more if it was starting up): td->py, its offsets in the BPF
 * walker's map and its threads read; else td->py_why, and a later look scheduled when its
 * interpreter was still starting (py_retry_ns). 0, or -ENOMEM. */
int ebpf_py_find(struct ebpf *e, struct ebpf_tdata *td);
/* The looks ebpf_py_find() scheduled that are due by now */
void ebpf_py_retry_due(struct ebpf *e, uint64_t now);

/*
 * ebpf_tasks.c: reads the task iterator and calls fn for each record of a target thread,
 * its size checked (the stack copy is d->u, d->u.bytes long). 0, or -errno; -ENOTSUP when
 * the tasks collector is not on. Not during fn: records of threads gone meanwhile.
 */
int ebpf_tasks_each(struct ebpf *e, int (*fn)(struct ebpf *e, struct ebpf_tdata *td,
					       struct task_dump *d, void *arg), void *arg);
/* Whether a record's stack copy may be trusted (the thread was off its CPU). */
bool ebpf_task_settled(const struct task_dump *d);
/* A task iterator record's stacks as a stack id (as ebpf_stack_from(), off-CPU when the
 * thread sleeps, with its Python frames read now unless py_walked: d->st has them already),
 * *ret_whole: the stack reached the thread's first frame and nothing of it is cut. */
int ebpf_stack_of_dump(struct ebpf *e, struct ebpf_tdata *td, const struct task_dump *d,
		       bool py_walked, uint32_t *ret_wchan, bool *ret_whole);
/* How long the record's thread has been asleep (since it last left its CPU) or, running,
 * on its CPU; 0 when the kernel does not say. */
uint64_t ebpf_task_for_ns(const struct task_dump *d);

/* ebpf_names.c: the `threading` name of td's thread tid (host tid), or NULL */
const char *ebpf_pyname_of(const struct ebpf_tdata *td, uint32_t tid);
/* ebpf.c: the target's Python thread states now (td->pythreads, and the BPF map if any) */
void ebpf_py_refresh(struct ebpf *e, struct ebpf_tdata *td);
/* A thread its interpreter's list (td->pythreads) does not have: the list read again,
 * unless *refreshed says it was already in this pass (then set); refreshed NULL: not. */
void ebpf_py_know_thread(struct ebpf *e, struct ebpf_tdata *td, uint32_t tid, bool *refreshed);

/* ebpf_syscalls.c: names and kinds of x86_64 syscall numbers */
const char *ebpf_syscall_name(uint32_t nr, char *buf, size_t len);
uint8_t ebpf_syscall_kind(uint32_t nr);
/* The object of a slow call as text: a path, "pipe:[ino]", "tcp 1.2.3.4:5->6.7.8.9:10"... */
char *ebpf_syscall_target(const struct syscall_event *ev);

/* ebpf_core.c: before an object's load, point its shared maps at the ones that exist;
 * after, keep references to the ones it created. The fd of a shared map by name, or
 * -ENOENT before an object that has it was loaded. */
int ebpf_share_maps(struct ebpf *e, struct bpf_object *obj);
int ebpf_loaded(struct ebpf *e, struct bpf_object *obj);
int ebpf_shared_map_fd(const struct ebpf *e, const char *name);
/* Makes prog (loaded, not attached: a sched_switch program) run at the end of the off-CPU
 * collector's sched_switch program, by a tail call (its map switch_next): one program's
 * dispatch and statistics per context switch for both. 0, or -ENOENT when the off-CPU
 * collector is not on, or -errno. */
int ebpf_switch_chain(struct ebpf *e, const struct bpf_program *prog);

#endif
