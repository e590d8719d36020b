/* SPDX-License-Identifier: MIT */
/* What the eBPF loader files (injector/ebpf*.c) share; not for the rest of the injector. */
#ifndef AIPROF_EBPF_INTERNAL_H
#define AIPROF_EBPF_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>
#include <linux/types.h>

#include "bpf/stack.h"
#include "bpf/syscalls.h"
#include "ebpf.h"
#include "ebpf_map.h"
#include "ebpf_python.h"
#include "ebpf_stacks.h"
#include "ebpf_symbols.h"

struct bpf_object;
struct bpf_link;
struct ring_buffer;
struct cpu_bpf;
struct offcpu_bpf;
struct syscalls_bpf;

enum ebpf_collector { EC_CPU, EC_OFFCPU, EC_SYSCALLS, EC_PYTHON, EC__N };

#define EBPF_SHARED_MAPS 4
#define EBPF_RINGBUF_BYTES (16u << 20)  /* the ring buffer every collector writes into */

struct ebpf_cpu_ev {
	uint64_t ts;
	uint32_t tid, cpu;
	uint32_t stack;
	uint32_t leaf;            /* frame id of the innermost frame (the event's name) */
};

struct ebpf_off_ev {
	uint64_t ts, dur;
	uint32_t tid;
	uint32_t stack;
	uint32_t state;
	int32_t syscall;
	uint32_t wchan;           /* frame id of the kernel function it waited in, or UINT32_MAX */
	bool open_at_end;         /* still blocked when the window closed */
};

struct ebpf_sys_ev {
	uint64_t ts, dur;
	int64_t ret;
	uint64_t bytes, file_size;
	uint32_t tid, nr;
	int64_t fd;               /* -1 when the call has no fd argument */
	char *target;             /* file path, "pipe:[ino]", socket description; NULL if none */
};

struct ebpf_sys_stat {
	uint32_t nr;
	uint64_t count, total_ns, max_ns, slow;
	uint32_t hist[SYSCALL_HIST];
};

struct ebpf_tid {
	uint32_t tid;
	char comm[16];
};

/* Everything recorded for one target process. */
struct ebpf_tdata {
	pid_t pid;
	uint32_t root;            /* frame id of the "comm-pid" root frame */
	char comm[16];
	struct proc_symbolizer *syms;
	struct u64map ucache;     /* user address -> frame id | USYM flags << 32 | eval << 40 */
	struct py_proc *py;
	char py_why[256];         /* why there are no Python frames, when py is NULL */
	struct u64map pycache;    /* hash(code, instr) -> frame id + 1, 0 = not a code object */
	struct u64map pythreads;  /* host tids currently in the py_threads map */
	struct ebpf_tid *tids;
	size_t ntids, captids;

	struct ebpf_cpu_ev *cpu;
	size_t ncpu, capcpu;
	struct ebpf_off_ev *off;
	size_t noff, capoff;
	struct ebpf_sys_ev *sys;
	size_t nsys, capsys;
	struct ebpf_sys_stat *stats;
	size_t nstats;

	/* stack quality, over CPU samples */
	uint64_t samples_user;            /* with a user stack */
	uint64_t samples_truncated;       /* ...that did not reach a thread's first frame */
	uint64_t samples_kernel;          /* with kernel frames */
	uint64_t samples_py_thread;       /* of threads that run Python */
	uint64_t samples_py;              /* ...with Python frames merged in */
	uint64_t samples_py_interleaved;  /* ...placed at _PyEval_EvalFrame* frames */
	uint64_t offcpu_count, offcpu_total_ns, offcpu_emitted;  /* kernel-side totals */
};

struct ebpf {
	struct ebpf_opts opts;
	uint32_t on;                      /* EBPF_COLLECT_* that are running */
	char why[EC__N][256];             /* per collector, why it is off (if asked for) */
	struct cpu_bpf *cpu;
	struct offcpu_bpf *off;
	struct syscalls_bpf *sys;
	int shared_fd[EBPF_SHARED_MAPS];  /* targets, py_procs, py_threads, events; -1 until loaded */
	struct bpf_link **perf_links;
	int *perf_fds;
	int nperf;
	struct ring_buffer *rb;
	struct symbolizer *symz;
	struct stack_store stacks;
	struct stack_tree tree;
	struct u64map kcache;             /* kernel address -> frame id | in_sched_text << 32 */
	struct ebpf_tdata *t;
	size_t nt;
	struct py_tstate *tstates;        /* scratch for reading Python thread lists */
	uint64_t start_ns, end_ns, next_tick_ns;
	uint64_t records, foreign, lost, bad_records;
	bool stopped;
};

/* ebpf.c */
struct ebpf_tdata *ebpf_tdata_of(struct ebpf *e, uint32_t tgid);
void ebpf_note_tid(struct ebpf_tdata *td, uint32_t tid, const char *comm);
/*
 * Turns a kernel-side stacks block into a stack id of the store (frames root first:
 * "comm-pid", native/Python, kernel). For off-CPU stacks (offcpu) the scheduler's own
 * frames above the waiting function are dropped, and *ret_wchan is that function.
 * Updates td's stack-quality counters when count is set. Returns the stack id, or -errno.
 */
int ebpf_stack_from(struct ebpf *e, struct ebpf_tdata *td, const struct ebpf_stacks *st,
		    bool offcpu, bool count, uint32_t *ret_leaf, uint32_t *ret_wchan);
const char *ebpf_state_letter(uint32_t state);

/* ebpf_cpu.c / ebpf_offcpu.c / ebpf_syscalls.c: one triad each with bpf/NAME.bpf.c */
int ebpf_cpu__open(struct ebpf *e);
int ebpf_cpu__attach(struct ebpf *e);
void ebpf_cpu__set_running(struct ebpf *e, bool on);
void ebpf_cpu__record(struct ebpf *e, struct ebpf_tdata *td, const void *data, size_t size);
void ebpf_cpu__destroy(struct ebpf *e);

int ebpf_offcpu__open(struct ebpf *e);
int ebpf_offcpu__attach(struct ebpf *e);
void ebpf_offcpu__set_running(struct ebpf *e, bool on);
void ebpf_offcpu__record(struct ebpf *e, struct ebpf_tdata *td, const void *data, size_t size);
/* At the end of the window: threads still blocked, and the kernel-side totals. */
void ebpf_offcpu__finish(struct ebpf *e);
void ebpf_offcpu__destroy(struct ebpf *e);

int ebpf_syscalls__open(struct ebpf *e);
int ebpf_syscalls__configure(struct ebpf *e);  /* after load: the per-syscall kinds */
int ebpf_syscalls__attach(struct ebpf *e);
void ebpf_syscalls__set_running(struct ebpf *e, bool on);
void ebpf_syscalls__record(struct ebpf *e, struct ebpf_tdata *td, const void *data, size_t size);
void ebpf_syscalls__finish(struct ebpf *e);     /* reads the per-syscall latency totals */
void ebpf_syscalls__destroy(struct ebpf *e);

/* ebpf_syscalls.c: names and kinds of x86_64 syscall numbers */
const char *ebpf_syscall_name(uint32_t nr, char *buf, size_t len);
uint8_t ebpf_syscall_kind(uint32_t nr);
/* The object of a slow call as text: a path, "pipe:[ino]", "tcp 1.2.3.4:5->6.7.8.9:10"... */
char *ebpf_syscall_target(const struct syscall_event *ev);

/* ebpf.c: before an object's load, point its shared maps at the ones that exist; after,
 * keep references to the ones it created */
int ebpf_share_maps(struct ebpf *e, struct bpf_object *obj);
int ebpf_loaded(struct ebpf *e, struct bpf_object *obj);

#endif
