/* SPDX-License-Identifier: MIT */
/*
 * The eBPF collectors' part of timeline.json.gz and the folded stacks:
 *   cpu_sample  instant events ("i", thread scope) named after the innermost frame
 *   offcpu      X events, dur = time blocked, named after why (syscall: kernel function)
 *   syscall     X events for slow calls: name, fd, path, bytes (not for a flush
 *               whose writes were not all seen), ret
 * Stacks are not repeated per event: "sf" points into the top-level stackFrames table
 * (Chrome Trace Event format), one node per distinct call path.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "jsonw.h"
#include "model/profile.h"
#include "collect/ebpf_internal.h"
#include "ebpf_artifacts.h"
#include "trace_json.h"

static void sf(struct jsonw *w, struct ebpf *e, uint32_t stack)
{
	int64_t node = stack_tree__leaf(&e->tree, &e->stacks, stack);

	if (node > 0)
		jsonw_kv_uint(w, "sf", (uint64_t)node);
}

static bool library_knows(const struct target *t, uint32_t tid)
{
	for (size_t i = 0; i < t->nthreads; i++)
		if (t->threads[i].host_tid == tid || (!t->threads[i].host_tid && t->threads[i].ns_tid == tid))
			return true;
	return false;
}

static void off_name(struct ebpf *e, const struct ebpf_off_ev *o, char *buf, size_t len)
{
	char nb[32];
	const char *sc = o->syscall >= 0 ? ebpf_syscall_name((uint32_t)o->syscall, nb, sizeof(nb)) : NULL;
	const char *wc = o->wchan != UINT32_MAX ? stack_store__frame_name(&e->stacks, o->wchan) : NULL;
	size_t wl = wc ? strlen(wc) : 0;

	if (wc && wl > 4 && strcmp(wc + wl - 4, "_[k]") == 0)
		wl -= 4;
	if (sc && wc)
		snprintf(buf, len, "%s: %.*s", sc, (int)wl, wc);
	else if (sc)
		snprintf(buf, len, "%s", sc);
	else if (wc)
		snprintf(buf, len, "%.*s", (int)wl, wc);
	else
		snprintf(buf, len, "blocked");
}

/* td's events; t is its target (threads the library named are not named again), NULL for
 * a followed process. */
static void write_process(struct jsonw *w, struct ebpf *e, struct ebpf_tdata *td,
			  const struct target *t)
{
	char name[256], nb[32];
	const pid_t pid = td->pid;

	for (size_t i = 0; i < td->ntids; i++) {
		const char *nm;

		if (t && library_knows(t, td->tids[i].tid))
			continue;
		jsonw_newline(w);
		jsonw_obj_open(w);
		jsonw_kv_str(w, "ph", "M");
		jsonw_kv_str(w, "name", "thread_name");
		jsonw_kv_int(w, "pid", pid);
		jsonw_kv_uint(w, "tid", td->tids[i].tid);
		jsonw_kv_uint(w, "ts", 0);
		jsonw_key(w, "args");
		jsonw_obj_open(w);
		nm = ebpf_pyname_of(td, td->tids[i].tid);
		jsonw_kv_str(w, "name", nm ? nm : td->tids[i].comm);
		jsonw_obj_close(w);
		jsonw_obj_close(w);
	}
	for (size_t i = 0; i < td->ncpu; i++) {
		const struct ebpf_cpu_ev *c = &td->cpu[i];

		trace_event_begin(w, "i", "cpu_sample", stack_store__frame_name(&e->stacks, c->leaf), pid,
		      c->tid, c->ts);
		jsonw_kv_str(w, "s", "t");
		sf(w, e, c->stack);
		jsonw_key(w, "args");
		jsonw_obj_open(w);
		jsonw_kv_uint(w, "cpu", c->cpu);
		if (c->gil)
			jsonw_kv_bool(w, "gil", c->gil == EBPF_PY_GIL_HELD);
		jsonw_obj_close(w);
		jsonw_obj_close(w);
	}
	for (size_t i = 0; i < td->noff; i++) {
		const struct ebpf_off_ev *o = &td->off[i];

		off_name(e, o, name, sizeof(name));
		trace_event_begin(w, "X", "offcpu", name, pid, o->tid, o->ts);
		jsonw_key(w, "dur");
		jsonw_fixed3(w, o->dur);
		sf(w, e, o->stack);
		jsonw_key(w, "args");
		jsonw_obj_open(w);
		jsonw_kv_str(w, "state", ebpf_state_letter(o->state));
		if (o->syscall >= 0)
			jsonw_kv_str(w, "syscall", ebpf_syscall_name((uint32_t)o->syscall, nb, sizeof(nb)));
		if (o->wchan != UINT32_MAX) {
			const char *wc = stack_store__frame_name(&e->stacks, o->wchan);
			size_t wl = strlen(wc);

			if (wl > 4 && strcmp(wc + wl - 4, "_[k]") == 0)
				wl -= 4;
			jsonw_key(w, "wchan");
			jsonw_strn(w, wc, wl);
		}
		if (o->open_at_end)
			jsonw_kv_bool(w, "still_blocked_at_end", true);
		/* its thread's last record's stacks at the same site, none taken for it */
		if (o->site_stacks)
			jsonw_kv_str(w, "stack", "site");
		/* ended while the budget had the collector paused: no user stack */
		if (o->ended_in_pause)
			jsonw_kv_bool(w, "ended_in_pause", true);
		if (o->began_before) {
			jsonw_kv_bool(w, "blocked_before_window", true);
			jsonw_key(w, "blocked_s");
			jsonw_fixed3(w, o->blocked_ns / 1000000);
		}
		jsonw_obj_close(w);
		jsonw_obj_close(w);
	}
	for (size_t i = 0; i < td->nsys; i++) {
		const struct ebpf_sys_ev *s = &td->sys[i];

		trace_event_begin(w, "X", "syscall", ebpf_syscall_name(s->nr, nb, sizeof(nb)), pid, s->tid, s->ts);
		jsonw_key(w, "dur");
		jsonw_fixed3(w, s->dur);
		jsonw_key(w, "args");
		jsonw_obj_open(w);
		if (s->fd >= 0)
			jsonw_kv_int(w, "fd", s->fd);
		if (s->target)
			jsonw_kv_str(w, "path", s->target);
		if (!s->bytes_unknown)
			jsonw_kv_uint(w, "bytes", s->bytes);
		if (s->file_size)
			jsonw_kv_uint(w, "file_size", s->file_size);
		if (s->site)
			/* the file of its thread's record at the site; dur until the CPU came back */
			jsonw_kv_str(w, "site", "path of the call's last record at this site; "
				     "dur until it got the CPU back; no ret");
		else
			jsonw_kv_int(w, "ret", s->ret);
		jsonw_obj_close(w);
		jsonw_obj_close(w);
	}
}

/*
 * The budget's pauses (--budget), on the process's main thread: while one lasts the off-CPU
 * and syscall collectors record nothing, and the timeline says so where the gap is.
 */
static void write_pauses(struct jsonw *w, const struct ebpf *e, pid_t pid)
{
	const struct ebpf_budget *b = &e->cost.budget;

	for (size_t i = 0; i < b->npause_spans; i++) {
		uint64_t from = b->pause_spans[i].from_ns, to = b->pause_spans[i].to_ns ? b->pause_spans[i].to_ns : e->end_ns;

		trace_event_begin(w, "X", "aiprof", "off-CPU and syscalls not recorded: paused by "
				  "the budget (--budget)", pid, (uint32_t)pid, from);
		jsonw_key(w, "dur");
		jsonw_fixed3(w, to > from ? to - from : 0);
		jsonw_key(w, "args");
		jsonw_obj_open(w);
		jsonw_kv_uint(w, "budget_ppm", b->ppm);
		jsonw_obj_close(w);
		jsonw_obj_close(w);
	}
}

void ebpf_timeline_write_target(struct jsonw *w, struct ebpf *e, const struct target *t)
{
	struct ebpf_tdata *td = e ? ebpf_tdata_of(e, (uint32_t)t->pid) : NULL;

	if (td && !td->parent) {
		write_process(w, e, td, t);
		write_pauses(w, e, td->pid);
	}
}

void ebpf_timeline_write_followed(struct jsonw *w, struct ebpf *e)
{
	char label[96];

	for (size_t i = 0; e && i < e->nt; i++) {
		struct ebpf_tdata *td = &e->t[i];

		if (!td->parent)
			continue;
		snprintf(label, sizeof(label), "%s (pid %d, started by %d)", td->comm, td->pid,
			 td->parent);
		jsonw_newline(w);
		jsonw_obj_open(w);
		jsonw_kv_str(w, "ph", "M");
		jsonw_kv_str(w, "name", "process_name");
		jsonw_kv_int(w, "pid", td->pid);
		jsonw_kv_uint(w, "tid", 0);
		jsonw_kv_uint(w, "ts", 0);
		jsonw_key(w, "args");
		jsonw_obj_open(w);
		jsonw_kv_str(w, "name", label);
		jsonw_kv_int(w, "parent", td->parent);
		jsonw_obj_close(w);
		jsonw_obj_close(w);
		write_process(w, e, td, NULL);
	}
}

static const char *frame_category(const char *name)
{
	size_t n = strlen(name);

	if (n > 4 && strcmp(name + n - 4, "_[k]") == 0)
		return "kernel";
	if (n > 1 && name[n - 1] == ')' && strstr(name, ".py"))
		return "python";
	return "native";
}

void ebpf_timeline_write_frames(struct jsonw *w, struct ebpf *e)
{
	char id[24];

	if (!e)
		return;
	jsonw_key(w, "stackFrames");
	jsonw_obj_open(w);
	for (size_t n = 1; n <= e->tree.n; n++) {
		const char *name = stack_store__frame_name(&e->stacks, e->tree.frame[n]);

		snprintf(id, sizeof(id), "%zu", n);
		jsonw_newline(w);
		jsonw_key(w, id);
		jsonw_obj_open(w);
		jsonw_kv_str(w, "name", name);
		jsonw_kv_str(w, "category", e->tree.parent[n] ? frame_category(name) : "process");
		if (e->tree.parent[n]) {
			snprintf(id, sizeof(id), "%u", e->tree.parent[n]);
			jsonw_kv_str(w, "parent", id);
		}
		jsonw_obj_close(w);
	}
	jsonw_obj_close(w);
}

static int write_one(const struct ebpf *e, const char *dir, const char *name, enum stack_kind k)
{
	char path[4096];
	FILE *f;
	int r;

	snprintf(path, sizeof(path), "%s/%s", dir, name);
	f = fopen(path, "we");
	if (!f)
		return -errno;
	r = stack_store__write_folded(&e->stacks, k, f);
	if (fclose(f) != 0 && !r)
		r = -errno;
	return r;
}

/*
 * wall.folded: where the threads' time went, on a CPU or off it, in microseconds by stack:
 * each CPU sample stands for 1/frequency s; off the CPU, with --mode wall each wall sample
 * for the time since the tick before (every wait, however short), else each off-CPU block
 * for its own time (blocks shorter than --offcpu-min are not recorded, so not in it
 * either: a view made of the two collectors' data).
 */
static int write_wall(const struct ebpf *e, const char *dir)
{
	const struct stack_store *ss = &e->stacks;
	double us_per_sample = 1e6 / (double)(e->opts.frequency_hz ? e->opts.frequency_hz : 1);
	char path[4096];
	FILE *f;
	int r = 0;

	snprintf(path, sizeof(path), "%s/wall.folded", dir);
	f = fopen(path, "we");
	if (!f)
		return -errno;
	for (uint32_t s = 0; s < stack_store__nstacks(ss); s++) {
		uint64_t w = (uint64_t)((double)stack_store__weight(ss, s, STACK_CPU) * us_per_sample +
					0.5) + stack_store__weight(ss, s, e->opts.wall ? STACK_WALL :
								   STACK_OFFCPU);
		size_t n = 0;
		const uint32_t *fr = stack_store__stack_frames(ss, s, &n);

		if (!w || !fr || !n)
			continue;
		for (size_t i = 0; i < n; i++) {
			if (i)
				fputc(';', f);
			fputs(stack_store__frame_name(ss, fr[i]), f);
		}
		fprintf(f, " %llu\n", (unsigned long long)w);
	}
	if (ferror(f))
		r = -EIO;
	if (fclose(f) != 0 && !r)
		r = -errno;
	return r;
}

int ebpf_folded_write(const struct ebpf *e, const char *dir)
{
	int r = 0;

	if (!e)
		return 0;
	if (e->on & EBPF_COLLECT_CPU)
		r = write_one(e, dir, "stacks.folded", STACK_CPU);
	if (!r && (e->on & EBPF_COLLECT_OFFCPU))
		r = write_one(e, dir, "offcpu.folded", STACK_OFFCPU);
	if (!r && (e->on & EBPF_COLLECT_CPU) &&
	    ((e->on & EBPF_COLLECT_OFFCPU) || (e->opts.wall && e->tasks_link)))
		r = write_wall(e, dir);
	return r;
}
