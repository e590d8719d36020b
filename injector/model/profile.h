/* SPDX-License-Identifier: MIT */
/*
 * What one `aiprof profile` run collected: its window and, per target process, how it
 * was attached and the events it produced. The artifact builders read only this.
 */
#ifndef AIPROF_PROFILE_H
#define AIPROF_PROFILE_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include "event_store.h"
#include "inject_report.h"

struct proc_syms;
struct proc_symbolizer;
struct uprobe_session;
struct ebpf;
struct diagnosis;
struct timeline_stats;

struct tid_name {
	uint32_t ns_tid;    /* as the library saw it */
	uint32_t host_tid;  /* as the host sees it (0 if it exited before we looked) */
	char comm[16];
};

struct target {
	pid_t pid;                      /* host pid */
	pid_t parent;                   /* started by this target during the window (the
					 * follower's news), 0 for a process chosen */
	uint64_t started_ns;            /* then: when the follower saw it (its fork); for a
					 * target chosen attached again: its exec */
	bool execd_after_attach;        /* then: it exec'd, and a later entry of the same pid
					 * records the new program */
	int pidfd;                      /* held from the moment it was chosen; -1 without pidfds */
	unsigned long long start_ticks; /* its start time (/proc/PID/stat), with pidfd its identity */
	char comm[16];
	char cmdline[256];
	struct inject_report inj;
	struct session *session;
	bool uprobe_method;             /* --method ebpf: uprobes, nothing loaded into it */
	char method_reason[640];        /* --method auto: why this method for this process */
	struct uprobe_session *uprobes; /* --method ebpf, once attached */
	struct event_store store;
	struct proc_syms *syms;         /* for kernel names from host stubs */
	struct proc_symbolizer *psyms;  /* its code, held while it lives (borrowed: the run's
					 * symbolizer, cli/profile.c): the launch stacks' frames
					 * are named after it exits; NULL: looked up at the end */
	size_t named_events, named_totals; /* store.v and store.over.v named up to here */
	struct tid_name *threads;
	size_t nthreads;
	/* library status copied from the ring header at the end of the window */
	uint32_t cupti_state;
	char cupti_reason[192];
	uint32_t hooks_patched, modules_seen;
	/* after the window (ptrace method): 1 the library confirmed it went dormant (its
	 * control thread exited, its ring's fd closed), 2 it stays (LD_PRELOAD loaded it),
	 * 3 the process ended or exec'd first, -1 it did not answer, 0 not asked */
	int released;
	/* it ended during the window (or the injection): its wait(2) status, when, and what
	 * aiprof was doing in it ("injecting: mmap", "recording", ...) */
	bool died;
	int exit_status;
	uint64_t exit_ns;
	char died_during[96];
	pid_t own_tids[2];              /* aiprof's threads in it (loader, control): left out
					 * of its data; 0 where none */
	int error;                      /* 0, or the negative errno that stopped this target */
	char message[512];
};

/* The processes the targets started, attached during the window (cli/late.h). */
struct late_stats {
	bool on;                        /* attaching them was possible in this window */
	unsigned offered;               /* processes named by the follower */
	unsigned attached, failed;
	unsigned gone;                  /* exited before they were attached */
	unsigned died;                  /* died while they were being attached (named, kept) */
	unsigned over;                  /* not attached: LATE_MAX was reached */
	unsigned execd_after;           /* exec'd after they were attached: attached again */
	unsigned window_ended;          /* still waiting their turn as the window closed
					 * (LATE_WORKERS attaches at once): never attached */
	char last_failure[640];         /* "pid N: why" of the last that failed */
};

/* Which clock the window's times are on: ranks whose windows share it need no fitted offset
 * (injector/merge). */
struct clock_domain {
	char boot_id[40];               /* the kernel's boot id; "" when it could not be read */
	int64_t timens_ns;              /* the targets' time-namespace CLOCK_MONOTONIC offset */
	bool timens_known;              /* every target's was read, and they are all the same */
};

struct profile {
	struct target *targets;
	size_t ntargets;
	uint64_t start_ns, end_ns;      /* CLOCK_MONOTONIC */
	uint64_t start_realtime_ns;
	struct clock_domain clock;
	uint64_t requested_ns;
	const char *outdir;
	struct ebpf *ebpf;              /* the eBPF collectors' results; NULL when they did not run */
	char ebpf_reason[256];          /* why not, when ebpf is NULL */
	struct diagnosis *diag;         /* analysis + findings (diagnosis.h); NULL if not computed */
	struct timeline_stats *timeline; /* when set, timeline_write() reports its size here */
	struct late_stats late;
};

/* The host tid of a library tid (pid namespace); ns_tid itself when it is not known. */
uint32_t target_host_tid(const struct target *t, uint32_t ns_tid);

/* Kernel name of a launch event ("[unknown]" if it cannot be found); cached. */
const char *launch_kernel_name(const struct target *t, const struct aiprof_event *e);

/*
 * Names the launches stored since the last call, while the process can still be read: a
 * target that exits before the window ends keeps its kernels' names. Reads its maps on
 * the first call, and again when an address lies in none of them (a library loaded since).
 */
void target_name_launches(struct target *t);

#endif
