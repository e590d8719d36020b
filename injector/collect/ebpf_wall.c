/* SPDX-License-Identifier: MIT */
/*
 * --mode wall: the targets' threads that are off their CPU, sampled at the CPU sampler's
 * rate (what py-spy calls --idle). At each tick the task iterator (bpf/tasks.bpf.c) reads
 * every target thread; each one that is not on a CPU (asleep, stopped, or runnable and
 * waiting for one) is a wall sample of its stack, weighed by the time it spent off its CPU
 * since its last sample (the clock less the CPU time the kernel counted for it), so a
 * thread's samples add up to its time off the CPU, however short each wait. The threads on
 * a CPU are the CPU sampler's. A thread that has not run since
 * the tick before (its switch count and the moment it was last switched in unchanged) is
 * where it was: its stack is taken from then, not unwound again.
 */
#ifndef AIPROF_NO_EBPF
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ebpf_internal.h"
#include "bpf/tasks.h"
#include "timeutil.h"

struct wall_pass {
	uint64_t now;             /* this tick, CLOCK_MONOTONIC ns */
	bool *refreshed;          /* per target: its interpreter's threads read again */
};

/* tid's entry in td's list, made (without a stack) if it has none; NULL on ENOMEM */
static struct ebpf_wall_thread *wall_thread(struct ebpf_tdata *td, uint32_t tid, bool *fresh)
{
	uint64_t i;

	*fresh = false;
	if (u64map_get(&td->wall_idx, tid, &i) && i < td->nwall && td->wall[i].tid == tid)
		return &td->wall[i];
	if (td->nwall == td->capwall) {
		size_t ncap = td->capwall ? td->capwall * 2 : 16;
		struct ebpf_wall_thread *nv = reallocarray(td->wall, ncap, sizeof(*nv));

		if (!nv)
			return NULL;
		td->wall = nv;
		td->capwall = ncap;
	}
	if (u64map_put(&td->wall_idx, tid, td->nwall) < 0)
		return NULL;
	td->wall[td->nwall] = (struct ebpf_wall_thread){ .tid = tid, .stack = UINT32_MAX };
	*fresh = true;
	return &td->wall[td->nwall++];
}

/*
 * One thread at a tick. Its off-CPU time since it was last given to a sample is what the
 * clock says went by less the CPU time it got meanwhile (the kernel's count, exact): a
 * thread off its CPU now is a sample of that time at the stack it is at; one on its CPU is
 * the CPU sampler's, and its off-CPU time so far waits for the next tick that finds it off
 * (its own wakeup, or the injector's, preempting it at a tick skews no total). A thread
 * seen for the first time is only noted.
 */
static int wall_sample(struct ebpf *e, struct ebpf_tdata *td, struct task_dump *d, void *arg)
{
	struct wall_pass *p = arg;
	size_t ti = (size_t)(td - e->t);
	struct ebpf_wall_thread *w;
	uint64_t off, ran;
	uint32_t wchan = UINT32_MAX;
	bool whole = false, fresh;
	int id;

	w = wall_thread(td, d->hdr.tid, &fresh);
	if (!w)
		return -ENOMEM;
	if (fresh || d->run_ns < w->base_run_ns) {
		w->base_ns = p->now;
		w->base_run_ns = d->run_ns;
		return 0;
	}
	if (d->on_cpu)
		return 0;         /* the CPU sampler's */
	ran = d->run_ns - w->base_run_ns;
	off = p->now - w->base_ns > ran ? p->now - w->base_ns - ran : 0;
	w->base_ns = p->now;
	w->base_run_ns = d->run_ns;
	if (off < 1000)
		return 0;         /* it ran the whole time: nothing off its CPU to weigh */
	/* not switched in since its stack was unwound: the same count and the same moment of
	 * its last arrival (a thread that reuses the tid of one that ended has another) */
	if (w->stack != UINT32_MAX && d->last_arrival && w->pcount == d->pcount &&
	    w->last_arrival == d->last_arrival) {
		id = (int)w->stack;
		e->wall.reused++;
	} else {
		/* a thread the interpreter's list did not have yet: read again, once a tick */
		ebpf_py_know_thread(e, td, d->hdr.tid, p->refreshed ? &p->refreshed[ti] : NULL);
		id = ebpf_stack_of_dump(e, td, d, false, &wchan, &whole);
		if (id == -ENOMEM)
			return id;
		if (id < 0) {
			e->wall.unread++;
			e->wall.unread_us += off / 1000;
			return 0;
		}
		w->stack = (uint32_t)id;
		w->pcount = d->pcount;
		w->last_arrival = d->last_arrival;
		e->wall.unwound++;
	}
	e->wall.samples++;
	e->wall.sampled_us += off / 1000;
	return stack_store__add(&e->stacks, (uint32_t)id, STACK_WALL, off / 1000);
}

/* this thread's CPU time, user and system (the iterator's BPF program runs in it) */
static uint64_t thread_cpu_ns(void)
{
	struct timespec ts;

	if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts) < 0)
		return 0;
	return (uint64_t)ts.tv_sec * NSEC_PER_SEC + (uint64_t)ts.tv_nsec;
}

void ebpf_wall_begin(struct ebpf *e, uint64_t now)
{
	if (!e->opts.wall)
		return;
	e->wall.period_ns = NSEC_PER_SEC / (e->opts.frequency_hz ? e->opts.frequency_hz : 1);
	e->wall.next_ns = now + e->wall.period_ns;
}

void ebpf_wall_tick(struct ebpf *e, uint64_t now)
{
	struct wall_pass p = { .now = now };
	uint64_t t0;
	int r;

	if (!e->opts.wall || !e->tasks_link || now < e->wall.next_ns)
		return;
	/* on the period's grid; ticks that came too late for it are counted, and the time
	 * between is in the next samples all the same */
	e->wall.next_ns += e->wall.period_ns;
	if (e->wall.next_ns <= now) {
		e->wall.late += (now - e->wall.next_ns) / e->wall.period_ns + 1;
		e->wall.next_ns = now + e->wall.period_ns;
	}
	p.refreshed = calloc(e->nt ? e->nt : 1, sizeof(*p.refreshed));
	t0 = thread_cpu_ns();
	r = ebpf_tasks_each(e, wall_sample, &p);
	e->wall.ns += thread_cpu_ns() - t0;
	e->wall.ticks++;
	if (r < 0)
		e->wall.failed++;
	free(p.refreshed);
}
#endif
