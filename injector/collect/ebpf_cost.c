/* SPDX-License-Identifier: MIT */
/*
 * What a window cost (ebpf.h, struct ebpf_cost): the kernel's BPF run-time statistics,
 * turned on for the window with BPF_ENABLE_STATS (they stay on only while its fd is open:
 * a killed injector leaves them off), read for every BPF program this process holds an fd
 * of (the collectors', the uprobes', the GPU probes'), before and after; and the targets'
 * own CPU time over the same window from /proc/PID/stat.
 */
#ifndef AIPROF_NO_EBPF
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <bpf/bpf.h>
#include <linux/bpf.h>

#include "ebpf_internal.h"
#include "log.h"
#include "procstat.h"
#include "readfile.h"
#include "timeutil.h"

/* Calls fn(e, info) for each BPF program this process has an fd of, once per program (the
 * first fd seen of its id). */
static void for_each_prog(struct ebpf *e, void (*fn)(struct ebpf *, const struct bpf_prog_info *,
						     void *), void *ctx)
{
	uint32_t seen[256];
	size_t nseen = 0;
	DIR *d = opendir("/proc/self/fd");
	struct dirent *de;

	if (!d)
		return;
	while ((de = readdir(d))) {
		char path[64], link[64];
		struct bpf_prog_info info;
		uint32_t len = sizeof(info);
		ssize_t n;
		int fd;
		bool dup = false;

		if (de->d_name[0] < '0' || de->d_name[0] > '9')
			continue;
		fd = atoi(de->d_name);
		if (fd == dirfd(d))
			continue;
		snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
		n = readlink(path, link, sizeof(link) - 1);
		if (n <= 0)
			continue;
		link[n] = 0;
		if (strcmp(link, "anon_inode:bpf-prog") != 0)
			continue;
		memset(&info, 0, sizeof(info));
		if (bpf_obj_get_info_by_fd(fd, &info, &len) < 0)
			continue;
		for (size_t i = 0; i < nseen; i++)
			dup |= seen[i] == info.id;
		if (dup)
			continue;
		if (nseen < sizeof(seen) / sizeof(seen[0]))
			seen[nseen++] = info.id;
		fn(e, &info, ctx);
	}
	closedir(d);
}

static int cpu_ticks_of(pid_t pid, uint64_t *ret)
{
	char path[64], *s = NULL;
	size_t len = 0;
	int r;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	if (readfile(path, 4096, 0, &s, &len) < 0)
		return -1;
	r = procstat_cpu_ticks(s, len, ret);
	free(s);
	return r;
}

static void read_targets(struct ebpf *e, bool base)
{
	for (size_t i = 0; i < e->nt; i++) {
		struct ebpf_tdata *td = &e->t[i];
		uint64_t v;

		if (cpu_ticks_of(td->pid, &v) < 0)
			continue;       /* gone: its last reading stands */
		if (base && !td->cpu_base) {
			td->cpu_ticks0 = v;
			td->cpu_base = true;
		}
		td->cpu_ticks = v;
		td->cpu_read = true;
	}
}

static void note_base(struct ebpf *e, const struct bpf_prog_info *info, void *ctx)
{
	(void)ctx;
	struct ebpf_cost_base *b = realloc(e->cost_base, (e->ncost_base + 1) * sizeof(*b));

	if (!b)
		return;
	e->cost_base = b;
	b[e->ncost_base++] = (struct ebpf_cost_base){ .id = info->id, .runs = info->run_cnt,
						       .ns = info->run_time_ns };
}

static void cost_add(struct ebpf *e, const char *name, uint64_t runs, uint64_t ns)
{
	struct ebpf_cost *c = &e->cost;

	if (!c->measured)
		return;
	c->bpf_runs += runs;
	c->bpf_ns += ns;
	if (c->nprogs < EBPF_COST_PROGS) {
		struct ebpf_cost_prog *p = &c->progs[c->nprogs++];

		snprintf(p->name, sizeof(p->name), "%s", name);
		p->runs = runs;
		p->ns = ns;
	}
}

/* info's runs and ns since the window opened (all of them if it was loaded since) */
static void since_base(const struct ebpf *e, const struct bpf_prog_info *info, uint64_t *ret_runs,
		       uint64_t *ret_ns)
{
	uint64_t runs = info->run_cnt, ns = info->run_time_ns;

	for (size_t i = 0; i < e->ncost_base; i++)
		if (e->cost_base[i].id == info->id) {
			runs = runs >= e->cost_base[i].runs ? runs - e->cost_base[i].runs : 0;
			ns = ns >= e->cost_base[i].ns ? ns - e->cost_base[i].ns : 0;
			break;
		}
	*ret_runs = runs;
	*ret_ns = ns;
}

static void add_ns(struct ebpf *e, const struct bpf_prog_info *info, void *ctx)
{
	uint64_t runs, ns;

	since_base(e, info, &runs, &ns);
	*(uint64_t *)ctx += ns;
}

uint64_t ebpf_cost_bpf_ns_now(struct ebpf *e)
{
	uint64_t ns = 0;

	if (!e->cost.measured)
		return 0;
	for_each_prog(e, add_ns, &ns);
	return ns + ebpf_offcpu_tw_ns(e) + ebpf_syscalls_tw_ns(e);
}

static uint64_t ns_per_tick(void)
{
	long hz = sysconf(_SC_CLK_TCK);

	return 1000000000ull / (uint64_t)(hz > 0 ? hz : 100);
}

uint64_t ebpf_cost_targets_ns_now(const struct ebpf *e)
{
	uint64_t ns = 0, tick = ns_per_tick();

	for (size_t i = 0; i < e->nt; i++) {
		const struct ebpf_tdata *td = &e->t[i];
		uint64_t base = td->cpu_base ? td->cpu_ticks0 : 0;

		if (td->cpu_read && td->cpu_ticks >= base)
			ns += (td->cpu_ticks - base) * tick;
	}
	return ns;
}

static void note_end(struct ebpf *e, const struct bpf_prog_info *info, void *ctx)
{
	uint64_t runs, ns;

	(void)ctx;
	since_base(e, info, &runs, &ns);
	char name[sizeof(info->name) + 1];

	snprintf(name, sizeof(name), "%.*s", (int)sizeof(info->name), info->name);
	cost_add(e, name, runs, ns);
	/* the kernel counts a tail call in the program that made it */
	if (e->sys_chained && strcmp(name, "sys_switch") == 0 && e->cost.nprogs &&
	    e->cost.progs[e->cost.nprogs - 1].runs == runs)
		snprintf(e->cost.progs[e->cost.nprogs - 1].tail_call_of,
			 sizeof(e->cost.progs[0].tail_call_of), "%s",
			 e->off_task_work ? "offcpu_switch_t" : "offcpu_switch");
}

static uint64_t self_cpu_ns(void)
{
	struct timespec ts;

	if (clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts) < 0)
		return 0;
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static bool stats_on_already(void)
{
	char *s = NULL;
	size_t len = 0;
	bool on;

	if (readfile("/proc/sys/kernel/bpf_stats_enabled", 64, 0, &s, &len) < 0)
		return false;
	on = len && s[0] == '1';
	free(s);
	return on;
}

void ebpf_cost_begin(struct ebpf *e)
{
	int fd = bpf_enable_stats(BPF_STATS_RUN_TIME);

	e->cost_stats_fd = fd >= 0 ? fd : -1;
	memset(&e->cost, 0, sizeof(e->cost));
	if (fd < 0 && !stats_on_already()) {
		snprintf(e->cost.why, sizeof(e->cost.why), "the kernel's BPF statistics could not "
			 "be turned on (BPF_ENABLE_STATS: %s; it needs CAP_SYS_ADMIN) and "
			 "kernel.bpf_stats_enabled is 0", strerror(errno));
		log_info("window cost: not measured: %s", e->cost.why);
	}
	e->cost.measured = !e->cost.why[0];
	e->cost_self0_ns = self_cpu_ns();
	read_targets(e, true);
	if (e->cost.measured)
		for_each_prog(e, note_base, NULL);
}

void ebpf_cost_tick(struct ebpf *e)
{
	read_targets(e, false);
}

void ebpf_cost_end(struct ebpf *e)
{
	struct ebpf_cost *c = &e->cost;

	c->window_ns = e->end_ns > e->start_ns ? e->end_ns - e->start_ns : 0;
	c->injector_cpu_ns = self_cpu_ns() - e->cost_self0_ns;
	read_targets(e, false);
	c->targets_cpu_ns = ebpf_cost_targets_ns_now(e);
	if (c->measured) {
		for_each_prog(e, note_end, NULL);
		/* set_running(false) left them as the window closed */
		cost_add(e, "offcpu_tw", ebpf_offcpu_tw_runs(e), ebpf_offcpu_tw_ns(e));
		cost_add(e, "sys_tw", ebpf_syscalls_tw_runs(e), ebpf_syscalls_tw_ns(e));
	}
	if (e->cost_stats_fd >= 0)
		close(e->cost_stats_fd);
	e->cost_stats_fd = -1;
}

void ebpf_cost_unrecorded(struct ebpf *e)
{
	struct ebpf_cost *c = &e->cost;

	c->record_rate = e->opts.record_rate;
	for (size_t i = 0; i < e->nt; i++) {
		const struct ebpf_tdata *td = &e->t[i];

		c->offcpu_not_recorded += td->offcpu_limited;
		c->offcpu_not_recorded_ns += td->offcpu_limited_ns;
		c->offcpu_site_stacks += td->offcpu_site_stacks;
		c->offcpu_site_stacks_ns += td->offcpu_site_stacks_ns;
		for (size_t k = 0; k < td->nstats; k++) {
			c->slow_not_recorded += td->stats[k].limited;
			c->slow_site += td->stats[k].site;
			c->untimed += td->stats[k].untimed;
		}
	}
}

void ebpf_cost_free(struct ebpf *e)
{
	if (e->cost_stats_fd >= 0)
		close(e->cost_stats_fd);
	e->cost_stats_fd = -1;
	free(e->cost_base);
	e->cost_base = NULL;
	e->ncost_base = 0;
	free(e->cost.budget.pause_spans);
	e->cost.budget.pause_spans = NULL;
	e->cost.budget.npause_spans = e->cost.budget.cappause_spans_ = 0;
}

const struct ebpf_cost *ebpf__cost(const struct ebpf *e)
{
	return e && e->stopped && e->start_ns ? &e->cost : NULL;   /* started, then stopped */
}
#endif
