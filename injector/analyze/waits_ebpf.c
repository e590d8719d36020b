/* SPDX-License-Identifier: MIT */
/*
 * The bridge from the eBPF collectors' records to struct thread_wait (findings.h): slow
 * system calls with their file and bytes, and off-CPU intervals with the call they blocked
 * in and, from their stack, whether they were inside a CUDA or NCCL function. It reads the
 * collectors' internal state and is the only file outside injector/ebpf*.c that does.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collect/ebpf_internal.h"
#include "analysis.h"
#include "diagnosis.h"

/* A CUDA runtime/driver or NCCL entry point (not a kernel frame, not Python). */
static bool is_api_frame(const char *s)
{
	size_t n = strlen(s);

	if (n > 4 && strcmp(s + n - 4, "_[k]") == 0)
		return false;
	if (strncmp(s, "nccl", 4) == 0 || strncmp(s, "pnccl", 5) == 0 || strncmp(s, "cuda", 4) == 0)
		return true;
	return s[0] == 'c' && s[1] == 'u' && s[2] >= 'A' && s[2] <= 'Z';
}

/* The innermost frame of stack that pred accepts (native first), or NULL. */
static const char *innermost(const struct ebpf *e, uint32_t stack, bool (*pred)(const char *))
{
	size_t n = 0;
	const uint32_t *f = stack_store__stack_frames(&e->stacks, stack, &n);

	for (size_t i = n; f && i-- > 1;) {
		const char *name = stack_store__frame_name(&e->stacks, f[i]);

		if (name && pred(name))
			return name;
	}
	return NULL;
}

static bool is_py_frame(const char *s)
{
	return strstr(s, ".py:") != NULL;
}

/* The stack as text for a finding's evidence: innermost first, at most 32 frames. */
static void stack_text(const struct ebpf *e, uint32_t stack, char *buf, size_t len)
{
	size_t n = 0, used = 0, shown = 0;
	const uint32_t *f = stack_store__stack_frames(&e->stacks, stack, &n);

	buf[0] = 0;
	for (size_t i = n; f && i-- > 1 && shown < 32 && used + 1 < len; shown++) {
		const char *name = stack_store__frame_name(&e->stacks, f[i]);
		int k = snprintf(buf + used, len - used, "%s%s", used ? " <- " : "", name ? name : "?");

		if (k < 0)
			break;
		used += (size_t)k < len - used ? (size_t)k : len - used - 1;
	}
}

static const char *api_frame_of(const struct ebpf *e, uint32_t stack)
{
	size_t n = 0;
	const uint32_t *f = stack_store__stack_frames(&e->stacks, stack, &n);

	for (size_t i = n; f && i-- > 0;) {
		const char *name = stack_store__frame_name(&e->stacks, f[i]);

		if (name && is_api_frame(name))
			return name;
	}
	return NULL;
}

int waits_from_ebpf(struct ebpf *e, struct wait_list *out, uint64_t counts[4])
{
	char nb[32], wb[200], stk[4096];

	memset(counts, 0, 4 * sizeof(uint64_t));
	if (!e || !(e->on & (EBPF_COLLECT_OFFCPU | EBPF_COLLECT_SYSCALLS)))
		return -ENODATA;
	out->offcpu_known = e->on & EBPF_COLLECT_OFFCPU;
	if (e->cost.budget.npause_spans) {
		const struct ebpf_budget *b = &e->cost.budget;

		out->unrecorded = calloc(b->npause_spans, sizeof(*out->unrecorded));
		if (!out->unrecorded)
			return -ENOMEM;
		for (size_t i = 0; i < b->npause_spans; i++)
			out->unrecorded[out->nunrecorded++] = (struct an_span){ b->pause_spans[i].from_ns,
				b->pause_spans[i].to_ns ? b->pause_spans[i].to_ns : e->end_ns };
	}
	for (size_t t = 0; t < e->nt; t++) {
		const struct ebpf_tdata *td = &e->t[t];

		if (td->parent) {
			struct wait_proc *nv = reallocarray(out->procs, out->nprocs + 1, sizeof(*nv));

			if (!nv)
				return -ENOMEM;
			out->procs = nv;
			out->procs[out->nprocs++] = (struct wait_proc){ .pid = td->pid,
				.parent = td->parent, .started_ns = td->started_ns };
		}

		counts[0] += td->nsys;
		counts[1] += td->ncpu;
		counts[2] += td->noff;
		for (size_t i = 0; i < td->nsys; i++) {
			const struct ebpf_sys_ev *s = &td->sys[i];
			struct thread_wait w = {
				.pid = td->pid, .tid = s->tid, .ts = s->ts, .dur = s->dur,
				.kind = WAIT_SYSCALL, .name = ebpf_syscall_name(s->nr, nb, sizeof(nb)),
				.path = s->target, .bytes = s->bytes,
			};

			if (findings_add_waits(out, &w, 1) < 0)
				return -ENOMEM;
		}
		for (size_t i = 0; i < td->noff; i++) {
			const struct ebpf_off_ev *o = &td->off[i];
			struct thread_wait w = {
				.pid = td->pid, .tid = o->tid, .ts = o->ts, .dur = o->dur,
				.kind = WAIT_OFFCPU, .open_at_end = o->open_at_end,
				.state = o->state == 0 ? 'R' : ebpf_state_letter(o->state)[0],
				.api_frame = api_frame_of(e, o->stack),
				.began_before = o->began_before, .blocked_ns = o->blocked_ns,
			};

			w.py_frame = innermost(e, o->stack, is_py_frame);
			if (o->open_at_end) {
				/* what a hang in progress is reported with */
				w.collective = innermost(e, o->stack, findings_is_collective_frame);
				stack_text(e, o->stack, stk, sizeof(stk));
				w.stack = stk;
			}

			if (o->syscall >= 0) {
				w.name = ebpf_syscall_name((uint32_t)o->syscall, nb, sizeof(nb));
			} else if (o->wchan != UINT32_MAX) {
				const char *wc = stack_store__frame_name(&e->stacks, o->wchan);
				size_t wl = strlen(wc);

				if (wl > 4 && strcmp(wc + wl - 4, "_[k]") == 0)
					wl -= 4;
				snprintf(wb, sizeof(wb), "%.*s", (int)wl, wc);
				w.name = wb;
			}
			if (findings_add_waits(out, &w, 1) < 0)
				return -ENOMEM;
		}
	}
	return 0;
}
