/* SPDX-License-Identifier: MIT */
/*
 * On-CPU sampling, user half (kernel half: bpf/cpu.bpf.c, shared structs: bpf/cpu.h).
 * A cpu-clock perf event on every thread of the targets (inherited by the threads they
 * start later) at the requested frequency, each running the sampling program: nobody else
 * is interrupted. Where the kernel refuses per-thread events, one event per online CPU
 * instead (every task sampled, the program drops the others). Records become cpu_sample
 * timeline events and stacks.folded lines.
 */
#ifndef AIPROF_NO_EBPF
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <linux/perf_event.h>
#include <sys/syscall.h>
#include <bpf/libbpf.h>

#include "bpf/cpu.h"
#include "cpu.skel.h"
#include "ebpf_internal.h"
#include "log.h"
#include "procstat.h"
#include "timeutil.h"
#include "uprobes.h"

/* per-thread events, all targets together; past it, the per-CPU events are cheaper */
#define CPU_MAX_THREAD_EVENTS 4096
/* rounds of /proc/PID/task while threads keep appearing before giving up on per-thread */
#define CPU_THREAD_SCANS 16
/*
 * A per-thread cpu-clock event is taken off the CPU and put back at every context switch of
 * its thread (its timer cancelled and started again): about 1 us of the thread's own CPU a
 * switch here (tests/bench/bench_sampler.py: two threads passing a byte over pipes, ~300,000
 * switches a second, ran 17% slower), none of it in the BPF statistics. Targets that switch more than this many times
 * a second, all their threads together (about 0.2% of a core), get one event per CPU
 * instead, which costs each CPU of the node a sample's interrupt 99 times a second whatever
 * runs there. Their rate is measured between the collector's open and its attach, at least
 * CPU_SWITCH_MEASURE_NS apart.
 */
#define CPU_PER_CPU_SWITCHES 2000
#define CPU_SWITCH_MEASURE_NS (50 * NSEC_PER_MSEC)

/*
 * tid >= 0: that thread, on any CPU, and the threads it starts later (inherit; also the
 * processes it forks when following them, else not where the kernel knows inherit_thread:
 * Linux 5.13); tid -1: every task on that CPU.
 */
static int perf_open(pid_t tid, int cpu, uint32_t freq, bool follow)
{
	struct perf_event_attr a = {
		.type = PERF_TYPE_SOFTWARE,
		.config = PERF_COUNT_SW_CPU_CLOCK,
		.size = sizeof(a),
		.freq = 1,
		.sample_freq = freq,
		.inherit = tid >= 0,
		/* following: the processes it forks are sampled from their start too */
		.inherit_thread = tid >= 0 && !follow,
	};
	int fd = (int)syscall(SYS_perf_event_open, &a, tid, cpu, -1, PERF_FLAG_FD_CLOEXEC);

	if (fd < 0 && errno == EINVAL && a.inherit_thread) {
		a.inherit_thread = 0;   /* older kernel: forked children are sampled and dropped */
		fd = (int)syscall(SYS_perf_event_open, &a, tid, cpu, -1, PERF_FLAG_FD_CLOEXEC);
	}
	return fd;
}

/* The targets' context switches so far: the third field of each thread's schedstat (the
 * times it was put on a CPU), all threads of all targets */
static uint64_t targets_switches(const struct ebpf *e)
{
	uint64_t total = 0;

	for (size_t i = 0; i < e->nt; i++) {
		char path[64];
		struct dirent *de;
		DIR *d;

		snprintf(path, sizeof(path), "/proc/%d/task", (int)e->t[i].pid);
		d = opendir(path);
		if (!d)
			continue;
		while ((de = readdir(d))) {
			uint64_t n;

			if (de->d_name[0] >= '0' && de->d_name[0] <= '9' &&
			    procsched_switches(e->t[i].pid, de->d_name, &n) == 0)
				total += n;
		}
		closedir(d);
	}
	return total;
}

/* The targets' switches a second since the collector was opened */
static uint64_t targets_switch_rate(struct ebpf *e)
{
	uint64_t dt = now_monotonic_ns() - e->cpu_sw0_ns, n;

	if (dt < CPU_SWITCH_MEASURE_NS) {
		sleep_ns(CPU_SWITCH_MEASURE_NS - dt);
		dt = CPU_SWITCH_MEASURE_NS;
	}
	n = targets_switches(e);
	dt = now_monotonic_ns() - e->cpu_sw0_ns;
	return n > e->cpu_sw0 && dt ? (uint64_t)((double)(n - e->cpu_sw0) * 1e9 / (double)dt) : 0;
}

static int ebpf_cpu__open(struct ebpf *e)
{
	struct bpf_object_open_opts oo = { .sz = sizeof(oo), .btf_custom_path = e->opts.btf_path };
	struct cpu_bpf *skel;
	int fd, r;

	e->cpu_sw0 = targets_switches(e);
	e->cpu_sw0_ns = now_monotonic_ns();

	/* probe: can we sample at all? (perf_event_paranoid, no perf support in a VM) */
	fd = perf_open(-1, 0, e->opts.frequency_hz, false);
	if (fd < 0) {
		r = -errno;
		snprintf(e->why[EC_CPU], sizeof(e->why[EC_CPU]), "cannot open a cpu-clock perf event "
			 "at %u Hz: %s", e->opts.frequency_hz, strerror(-r));
		return r;
	}
	close(fd);
	skel = cpu_bpf__open_opts(&oo);
	if (!skel) {
		r = -errno;
		snprintf(e->why[EC_CPU], sizeof(e->why[EC_CPU]), "cannot open the CPU sampler: %s",
			 strerror(-r));
		return r;
	}
	skel->rodata->want_python = (e->opts.collectors & EBPF_COLLECT_PYTHON) != 0;
	skel->rodata->ucopy_max = e->opts.unwind_stack_bytes;
	bpf_map__set_max_entries(skel->maps.events, EBPF_RINGBUF_BYTES);
	r = ebpf_share_maps(e, skel->obj);
	if (r == 0)
		r = cpu_bpf__load(skel);
	if (r < 0) {
		snprintf(e->why[EC_CPU], sizeof(e->why[EC_CPU]), "the kernel refused the CPU "
			 "sampler: %s", strerror(-r));
		cpu_bpf__destroy(skel);
		return r;
	}
	ebpf_loaded(e, skel->obj);
	e->cpu = skel;
	return 0;
}

static void cpu_detach_all(struct ebpf *e)
{
	for (int i = 0; i < e->nperf; i++) {
		if (e->perf_links[i])
			bpf_link__destroy(e->perf_links[i]);  /* closes its perf event too */
		else if (e->perf_fds[i] >= 0)
			close(e->perf_fds[i]);
	}
	free(e->perf_links);
	free(e->perf_fds);
	free(e->perf_tids);
	e->perf_links = NULL;
	e->perf_fds = NULL;
	e->perf_tids = NULL;
	e->nperf = e->capperf = 0;
}

/* Opens the sampling event of tid (-1: of cpu) and attaches the program. 0 or -errno. */
static int cpu_add_event(struct ebpf *e, pid_t tid, int cpu)
{
	struct bpf_link *l;
	int fd, r;

	if (e->nperf == e->capperf) {
		int ncap = e->capperf ? e->capperf * 2 : 64;
		struct bpf_link **nl = realloc(e->perf_links, (size_t)ncap * sizeof(*nl));
		int *nf;
		pid_t *nt;

		if (!nl)
			return -ENOMEM;
		e->perf_links = nl;
		nf = realloc(e->perf_fds, (size_t)ncap * sizeof(*nf));
		if (!nf)
			return -ENOMEM;
		e->perf_fds = nf;
		nt = realloc(e->perf_tids, (size_t)ncap * sizeof(*nt));
		if (!nt)
			return -ENOMEM;
		e->perf_tids = nt;
		e->capperf = ncap;
	}
	fd = perf_open(tid, cpu, e->opts.frequency_hz,
		       (e->opts.collectors & EBPF_COLLECT_FOLLOW) != 0);
	if (fd < 0)
		return -errno;
	l = bpf_program__attach_perf_event(e->cpu->progs.cpu_sample, fd);
	if (!l) {
		r = -errno;
		close(fd);
		return r;
	}
	e->perf_links[e->nperf] = l;
	e->perf_fds[e->nperf] = fd;
	e->perf_tids[e->nperf] = tid;
	e->nperf++;
	return 0;
}

static bool cpu_has_thread(const struct ebpf *e, pid_t tid)
{
	for (int i = 0; i < e->nperf; i++)
		if (e->perf_tids[i] == tid)
			return true;
	return false;
}

/*
 * One pass over /proc/PID/task: an event on every thread that has none yet. Returns how
 * many were added (a process that is gone adds none), or -errno.
 */
static int cpu_scan_threads(struct ebpf *e, pid_t pid)
{
	char path[64];
	struct dirent *de;
	DIR *d;
	int added = 0, r = 0;

	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	d = opendir(path);
	if (!d)
		return errno == ENOENT || errno == ESRCH ? 0 : -errno;
	while ((de = readdir(d))) {
		char *end;
		long tid = strtol(de->d_name, &end, 10);

		if (de->d_name[0] < '0' || de->d_name[0] > '9' || *end || tid <= 0)
			continue;
		if (cpu_has_thread(e, (pid_t)tid))
			continue;
		if (e->nperf >= CPU_MAX_THREAD_EVENTS) {
			r = -E2BIG;
			break;
		}
		r = cpu_add_event(e, (pid_t)tid, -1);
		if (r == -ESRCH) {          /* it exited meanwhile */
			r = 0;
			continue;
		}
		if (r < 0)
			break;
		added++;
	}
	closedir(d);
	return r < 0 ? r : added;
}

/*
 * An event on every thread of every target. Threads started after their parent's event
 * inherit it; the ones started while we scan are caught by the next pass, until a pass
 * finds none. 0 or -errno (E2BIG: too many threads, EAGAIN: they never stopped appearing).
 */
static int cpu_attach_threads(struct ebpf *e)
{
	perf_raise_nofile();         /* two descriptors per thread: perf event, link */
	for (int pass = 0; pass < CPU_THREAD_SCANS; pass++) {
		int added = 0;

		for (size_t i = 0; i < e->nt; i++) {
			int r = cpu_scan_threads(e, e->t[i].pid);

			if (r < 0)
				return r;
			added += r;
		}
		if (!added)
			return 0;
	}
	return -EAGAIN;
}

static int cpu_attach_cpus(struct ebpf *e)
{
	int n = libbpf_num_possible_cpus(), r;

	if (n <= 0)
		return n < 0 ? n : -ENODEV;
	for (int cpu = 0; cpu < n; cpu++) {
		r = cpu_add_event(e, -1, cpu);
		if (r == -ENODEV)
			continue;  /* possible but not online */
		if (r < 0)
			return r;
	}
	return 0;
}

static int ebpf_cpu__attach(struct ebpf *e)
{
	const char *force = getenv("AIPROF_EBPF_CPU_SCOPE");  /* "global": the fallback, for tests */
	char reason[160];
	int r;

	e->cpu_switches_per_s = targets_switch_rate(e);
	if (force && strcmp(force, "global") == 0) {
		snprintf(reason, sizeof(reason), "AIPROF_EBPF_CPU_SCOPE=global");
	} else if (!(force && strcmp(force, "task") == 0) &&
		   e->cpu_switches_per_s > CPU_PER_CPU_SWITCHES) {
		snprintf(reason, sizeof(reason), "the targets switch %llu times a second, and an "
			 "event per thread costs each switch of it ~1 us",
			 (unsigned long long)e->cpu_switches_per_s);
	} else {
		r = cpu_attach_threads(e);
		if (r == 0) {
			snprintf(e->scope[EC_CPU], sizeof(e->scope[EC_CPU]), "task");
			return 0;
		}
		if (r == -E2BIG)
			snprintf(reason, sizeof(reason), "the targets have more than %d threads",
				 CPU_MAX_THREAD_EVENTS);
		else if (r == -EAGAIN)
			snprintf(reason, sizeof(reason), "the targets kept starting threads while "
				 "they were being attached");
		else
			snprintf(reason, sizeof(reason), "the kernel refused a per-thread cpu-clock "
				 "event: %s", strerror(-r));
		cpu_detach_all(e);
	}
	r = cpu_attach_cpus(e);
	if (r < 0) {
		snprintf(e->why[EC_CPU], sizeof(e->why[EC_CPU]), "cannot attach the CPU sampler: %s",
			 strerror(-r));
		return r;
	}
	snprintf(e->scope[EC_CPU], sizeof(e->scope[EC_CPU]), "global (%s: every CPU is "
		 "sampled and samples of other processes are dropped in the kernel)", reason);
	return 0;
}

static void ebpf_cpu__set_running(struct ebpf *e, bool on)
{
	if (!e->cpu)
		return;
	e->cpu->bss->running = on;
	if (!on) {
		e->lost += __atomic_exchange_n(&e->cpu->bss->lost, 0, __ATOMIC_RELAXED);
		e->cpu_foreign += __atomic_exchange_n(&e->cpu->bss->foreign, 0, __ATOMIC_RELAXED);
	}
}

static void ebpf_cpu__record(struct ebpf *e, struct ebpf_tdata *td, const void *data, size_t size)
{
	const struct cpu_sample *s = data;
	struct ebpf_tid *th;
	struct ebpf_cpu_ev *ev;
	uint32_t leaf = 0;
	int id;

	if (size < sizeof(*s)) {
		e->bad_records++;
		return;
	}
	th = ebpf_note_tid(td, s->hdr.tid, s->hdr.comm);
	id = ebpf_stack_from(e, td, &s->st, ebpf_ucopy_of(e, data, size, sizeof(*s)), false, true,
			     &leaf, NULL);
	if (id < 0)
		return;
	/* the thread noted above (its entry stays put: stacks are built with no new tid) */
	if (th && s->st.py_gil == EBPF_PY_GIL_HELD)
		th->gil_held++;
	else if (th && s->st.py_gil == EBPF_PY_GIL_NOT_HELD)
		th->gil_not_held++;
	stack_store__add(&e->stacks, (uint32_t)id, STACK_CPU, 1);
	td->cpu_samples++;
	if (!ebpf_keep_event(e, td))
		return;
	if (td->ncpu == td->capcpu) {
		size_t ncap = td->capcpu ? td->capcpu * 2 : 1024;
		struct ebpf_cpu_ev *nv = realloc(td->cpu, ncap * sizeof(*nv));

		if (!nv)
			return;
		td->cpu = nv;
		td->capcpu = ncap;
	}
	ev = &td->cpu[td->ncpu++];
	*ev = (struct ebpf_cpu_ev){ .ts = s->hdr.ts, .tid = s->hdr.tid, .cpu = s->hdr.cpu,
				    .stack = (uint32_t)id, .leaf = leaf,
				    .gil = (uint8_t)(s->st.py_gil <= EBPF_PY_GIL_NOT_HELD ? s->st.py_gil : 0) };
}

static void ebpf_cpu__destroy(struct ebpf *e)
{
	cpu_detach_all(e);
	cpu_bpf__destroy(e->cpu);
	e->cpu = NULL;
}

static bool ebpf_cpu__is_on(const struct ebpf *e)
{
	return e->cpu != NULL;
}

const struct ebpf_collector_ops ebpf_cpu_ops = {
	.id = EC_CPU,
	.flag = EBPF_COLLECT_CPU,
	.rec_type = EBPF_REC_CPU_SAMPLE,
	.open = ebpf_cpu__open,
	.attach = ebpf_cpu__attach,
	.is_on = ebpf_cpu__is_on,
	.set_running = ebpf_cpu__set_running,
	.record = ebpf_cpu__record,
	.destroy = ebpf_cpu__destroy,
};
#endif
