/* SPDX-License-Identifier: MIT */
/*
 * --budget: the share of the targets' CPU time aiprof's BPF programs may take, kept while
 * recording from the cost the kernel's statistics measure (ebpf_cost.c). At every tick
 * (a fifth of a second) the share of the time since the last one is compared with the
 * budget:
 *   over it      where the records are a good part of the cost (their task works took a
 *                quarter of the BPF time of the tick at least), the record rate goes down
 *                (a quarter each time, to 1 a second per thread) while that helps (the
 *                share fell by a third at least since the last step); where they are not,
 *                or it does not help — the cost is in the programs that run at every
 *                context switch — the off-CPU and syscall collectors are paused (their
 *                per-switch programs detached) for as long as brings the average to 90%
 *                of the budget (the margin: a tick runs at full cost before each
 *                decision), from 250 ms to 1 s, then resumed and measured again;
 *   under half   the record rate goes back up (twice each time) to what was asked.
 * While paused nothing new is recorded by them. As they resume, their seed iterators give
 * the threads asleep since the pause their sleep's or call's start (ebpf_throttle): a wait
 * that began in a pause and ends after it is recorded whole. A sleep that began before a
 * pause and ended in it is recorded by the off-CPU seed, its end from the scheduler's
 * account, with the kernel stack and user pc its hold iterator read as the pause began
 * (offcpu.bpf.c: end_held) — unless the thread switched again after it (its end is not
 * known: counted, dropped). A call begun before a pause, asleep in it as the pause began,
 * gets a task work then (syscalls.bpf.c: sys_hold): if it ends in the pause it is timed and
 * recorded at its end all the same. A sleep or call begun and ended in a pause is not
 * seen. What was done is in ebpf_cost.budget: each change, the pauses and their time.
 */
#ifndef AIPROF_NO_EBPF
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ebpf_internal.h"
#include "log.h"
#include "timeutil.h"

#define BUDGET_EVERY_NS 200000000ull     /* a decision at each tick (200 ms) */
#define BUDGET_MIN_CPU_NS 20000000ull    /* the targets used less: nothing to compare with */
#define BUDGET_PAUSE_MIN_NS 250000000ull
/* the longest pause: a wait longer is recorded whole whenever it begins (it cannot begin
 * and end in one pause) */
#define BUDGET_PAUSE_MAX_NS 1000000000ull
#define BUDGET_RATE_FROM 1000            /* the rate the budget starts from without a limit */
#define BUDGET_AIM 0.9                   /* of the budget: where a pause brings the average */

/* The collectors set as b says; returns when that was done (a pause begins once their
 * programs are detached, and ends once they are attached again) */
static uint64_t apply(struct ebpf *e, uint32_t share_ppm)
{
	struct ebpf_budget *b = &e->cost.budget;
	uint64_t now;

	ebpf_offcpu_throttle(e, b->rate, b->paused);
	ebpf_syscalls_throttle(e, b->rate, b->paused);
	now = now_monotonic_ns();
	if (b->rate && (!b->lowest_rate || b->rate < b->lowest_rate))
		b->lowest_rate = b->rate;
	b->changes_total++;
	if (b->nchanges < EBPF_BUDGET_CHANGES)
		b->changes[b->nchanges++] = (struct ebpf_budget_change){
			.t_ns = now - e->start_ns, .share_ppm = share_ppm,
			.record_rate = b->rate, .paused = b->paused };
	log_debug("budget: %u ppm of the targets' CPU in the last half second; record rate %u, "
		  "%s", share_ppm, b->rate, b->paused ? "off-CPU and syscalls paused" : "running");
	return now;
}

/* A pause begins (to 0) or the last one ends. A pause not noted for want of memory is
 * still in paused_ns and the changes. */
static void note_pause(struct ebpf_budget *b, uint64_t from, uint64_t to)
{
	if (!to) {
		if (b->npause_spans == b->cappause_spans_) {
			size_t ncap = b->cappause_spans_ ? b->cappause_spans_ * 2 : 16;
			struct ebpf_pause *nv = reallocarray(b->pause_spans, ncap, sizeof(*nv));

			if (!nv)
				return;
			b->pause_spans = nv;
			b->cappause_spans_ = ncap;
		}
		b->pause_spans[b->npause_spans++] = (struct ebpf_pause){ .from_ns = from };
	} else if (b->npause_spans && !b->pause_spans[b->npause_spans - 1].to_ns) {
		b->pause_spans[b->npause_spans - 1].to_ns = to;
	}
}

void ebpf_budget_begin(struct ebpf *e)
{
	struct ebpf_budget *b = &e->cost.budget;

	free(b->pause_spans);
	memset(b, 0, sizeof(*b));
	b->ppm = e->opts.budget_ppm;
	b->rate = e->opts.record_rate;
	if (!b->ppm)
		return;
	b->kept_by_measure = e->cost.measured;
	b->pause_max_ns = BUDGET_PAUSE_MAX_NS;
	/* a wait that ends in a pause is recorded by its thread's own task work */
	b->ends_in_pauses_recorded = (!e->off || e->off_task_work) && (!e->sys || e->sys_switch);
	if (!b->kept_by_measure) {
		log_info("--budget: not kept: the window's cost cannot be measured (%s)", e->cost.why);
		return;
	}
	b->last_t = e->start_ns;
	b->resumed_at = e->start_ns;
	b->last_bpf = ebpf_cost_bpf_ns_now(e);
	b->last_cpu = ebpf_cost_targets_ns_now(e);
	b->last_tw = ebpf_offcpu_tw_ns(e) + ebpf_syscalls_tw_ns(e);
}

void ebpf_budget_tick(struct ebpf *e)
{
	struct ebpf_budget *b = &e->cost.budget;
	uint64_t now = now_monotonic_ns(), bpf, cpu, tw, dbpf, dcpu, dtw, pause;
	uint32_t share;

	if (!b->ppm || !b->kept_by_measure || now - b->last_t < BUDGET_EVERY_NS)
		return;
	bpf = ebpf_cost_bpf_ns_now(e);
	cpu = ebpf_cost_targets_ns_now(e);
	dbpf = bpf >= b->last_bpf ? bpf - b->last_bpf : 0;
	dcpu = cpu >= b->last_cpu ? cpu - b->last_cpu : 0;
	tw = ebpf_offcpu_tw_ns(e) + ebpf_syscalls_tw_ns(e);
	dtw = tw >= b->last_tw ? tw - b->last_tw : 0;
	b->last_t = now;
	b->last_bpf = bpf;
	b->last_cpu = cpu;
	b->last_tw = tw;
	share = dcpu ? (uint32_t)(dbpf * 1000000.0 / (double)dcpu > 1e9 ? 1e9 :
				  dbpf * 1000000.0 / (double)dcpu) : 0;
	if (b->paused) {
		if (now < b->pause_until)
			return;
		b->paused = false;
		b->resumed_at = apply(e, share);
		b->paused_ns += b->resumed_at - b->pause_since;
		note_pause(b, 0, b->resumed_at);
		b->share_paused = share;
		return;
	}
	if (dcpu < BUDGET_MIN_CPU_NS)
		return;
	if (share > b->ppm) {
		bool helped = !b->share_at_step || share < b->share_at_step / 3 * 2;
		/* the records' own work (their task works; their stacks at the switch-in cost
		 * about as much again) against the programs every switch runs */
		bool records = dtw * 4 >= dbpf;

		if ((b->rate == 0 || b->rate > 1) && helped && records) {
			b->rate = b->rate == 0 ? BUDGET_RATE_FROM : b->rate / 4 ? b->rate / 4 : 1;
			b->share_at_step = share;
		} else {
			/* on for ran ns at share, off at what the last pause cost (the CPU
			 * sampler's share): off long enough that the average is the budget */
			uint64_t ran = now - b->resumed_at;
			double aim = BUDGET_AIM * b->ppm, room = aim - b->share_paused;

			if (room < b->ppm / 10.0)
				room = b->ppm / 10.0;
			pause = (uint64_t)((double)ran * ((double)share - aim) / room);
			if (pause < BUDGET_PAUSE_MIN_NS)
				pause = BUDGET_PAUSE_MIN_NS;
			if (pause > BUDGET_PAUSE_MAX_NS)
				pause = BUDGET_PAUSE_MAX_NS;
			b->paused = true;
			b->pauses++;
			b->pause_since = apply(e, share);
			b->pause_until = b->pause_since + pause;
			note_pause(b, b->pause_since, 0);
			return;
		}
		apply(e, share);
	} else if (share < b->ppm / 2 && b->rate && b->rate != e->opts.record_rate) {
		uint32_t want = e->opts.record_rate;

		b->rate = b->rate * 2;
		if (want && b->rate >= want)
			b->rate = want;
		else if (!want && b->rate >= BUDGET_RATE_FROM)
			b->rate = 0;
		apply(e, share);
	}
}

void ebpf_budget_end(struct ebpf *e)
{
	struct ebpf_budget *b = &e->cost.budget;

	b->seeded_sleeps = ebpf_offcpu_seeded(e);
	b->seeded_calls = ebpf_syscalls_seeded(e);
	ebpf_offcpu_ended_in_pauses(e, &b->sleeps_ended_in_pauses, &b->sleeps_ended_unseen);
	ebpf_syscalls_ended_in_pauses(e, &b->calls_ended_in_pauses);
	if (b->paused) {
		b->paused_ns += e->end_ns > b->pause_since ? e->end_ns - b->pause_since : 0;
		note_pause(b, 0, e->end_ns > b->pause_since ? e->end_ns : b->pause_since + 1);
	}
}
#endif
