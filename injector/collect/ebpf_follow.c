/* SPDX-License-Identifier: MIT */
/*
 * Following the processes the targets start, user half (kernel half: bpf/follow.bpf.c,
 * shared struct: bpf/follow.h). The kernel side has already put a new child into the
 * target filter when its record arrives here; this side gives it its own per-process data
 * (symbols, CPython, the interpreter's threads) so that its records land under its own pid
 * and track, with the parent it came from. A target that execs gets its symbols and
 * interpreter read again.
 */
#ifndef AIPROF_NO_EBPF
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "bpf/follow.h"
#include "follow.skel.h"
#include "ebpf_internal.h"

static int ebpf_follow__open(struct ebpf *e)
{
	struct bpf_object_open_opts oo = { .sz = sizeof(oo), .btf_custom_path = e->opts.btf_path };
	struct follow_bpf *skel;
	int r;

	skel = follow_bpf__open_opts(&oo);
	if (!skel) {
		r = -errno;
		snprintf(e->why[EC_FOLLOW], sizeof(e->why[EC_FOLLOW]), "cannot open the process "
			 "follower: %s", strerror(-r));
		return r;
	}
	skel->rodata->max_followed = EBPF_MAX_FOLLOWED;
	bpf_map__set_max_entries(skel->maps.events, EBPF_RINGBUF_BYTES);
	r = ebpf_share_maps(e, skel->obj);
	if (r == 0)
		r = follow_bpf__load(skel);
	if (r < 0) {
		snprintf(e->why[EC_FOLLOW], sizeof(e->why[EC_FOLLOW]), "the kernel refused the "
			 "process follower: %s", strerror(-r));
		follow_bpf__destroy(skel);
		return r;
	}
	ebpf_loaded(e, skel->obj);
	e->follow = skel;
	return 0;
}

static int ebpf_follow__attach(struct ebpf *e)
{
	int r = follow_bpf__attach(e->follow);

	if (r < 0)
		snprintf(e->why[EC_FOLLOW], sizeof(e->why[EC_FOLLOW]), "cannot attach to "
			 "sched_process_fork and sched_process_exec: %s", strerror(-r));
	else
		snprintf(e->scope[EC_FOLLOW], sizeof(e->scope[EC_FOLLOW]), "global (every fork "
			 "and exec on the node runs the program; the tgid filter drops the other "
			 "processes')");
	return r;
}

static bool ebpf_follow__is_on(const struct ebpf *e)
{
	return e->follow != NULL;
}

static void ebpf_follow__set_running(struct ebpf *e, bool on)
{
	if (!e->follow)
		return;
	e->follow->bss->running = on;
	if (!on)
		e->lost += __atomic_exchange_n(&e->follow->bss->lost, 0, __ATOMIC_RELAXED);
}

/* A child of a target: its own data, its interpreter's frames readable at once. */
static void followed(struct ebpf *e, const struct follow_event *f)
{
	struct ebpf_tdata *td, *parent = ebpf_tdata_of(e, f->parent);
	int pfd = ebpf_shared_map_fd(e, "py_procs");

	if (ebpf_tdata_of(e, f->hdr.tgid))
		return;   /* seen already (a pid reused within the window is the same slot) */
	if (e->nt >= e->capt) {
		e->follow_full++;
		return;
	}
	td = &e->t[e->nt];
	if (ebpf_tdata_init(e, td, (pid_t)f->hdr.tgid, f->hdr.comm) < 0)
		return;
	e->nt++;
	td->parent = (pid_t)f->parent;
	td->started_ns = f->hdr.ts;
	ebpf_follow_note(e, td->pid, td->parent, f->hdr.ts, false);
	if (!td->py && parent && parent->py)
		snprintf(td->py_why, sizeof(td->py_why), "%s", "its CPython was not found after the fork");
	/* ebpf_tdata_init() found its CPython and gave the walker its offsets */
	if (td->py && pfd >= 0)
		td->py_soon_ns = f->hdr.ts + FOLLOW_PY_AGAIN_NS;
}

/* A target exec'd: what was read of its old program is of no use for the new one. */
static void execd(struct ebpf *e, struct ebpf_tdata *td, const struct follow_event *f)
{
	int pfd = ebpf_shared_map_fd(e, "py_procs");
	uint32_t key = f->hdr.tgid;
	char root[64];
	int id;

	td->execd = true;
	ebpf_follow_note(e, td->pid, td->parent, f->hdr.ts, true);
	snprintf(td->comm, sizeof(td->comm), "%s", f->hdr.comm);
	snprintf(root, sizeof(root), "%s-%d", td->comm, (int)td->pid);
	id = stack_store__frame(&e->stacks, root);
	if (id >= 0)
		td->root = (uint32_t)id;   /* its stacks from now on, under its new name */
	u64map_clear(&td->ucache);
	u64map_clear(&td->wall_idx);
	td->nwall = 0;
	u64map_clear(&td->pycache);
	td->npynames = 0;               /* its threads are the new program's */
	py_proc__free(td->py);
	td->py = NULL;
	td->py_soon_ns = 0;             /* the fork's interpreter is gone */
	if (pfd >= 0)
		bpf_map_delete_elem(pfd, &key);
	/* the same view, its maps read anew: an exec loop does not pile up views */
	if (td->syms ? proc_symbolizer__reread(td->syms) < 0 :
	    symbolizer__proc(e->symz, td->pid, &td->syms) < 0)
		td->syms = NULL;
	/* a new interpreter has no thread yet: looked at again until it has (py_retry_ns) */
	td->py_retry_every = 0;
	if (e->opts.collectors & EBPF_COLLECT_PYTHON)
		(void)ebpf_py_find(e, td);
}

static void ebpf_follow__record(struct ebpf *e, struct ebpf_tdata *td, const void *data,
				size_t size)
{
	const struct follow_event *f = data;

	if (size < sizeof(*f)) {
		e->bad_records++;
		return;
	}
	switch (f->kind) {
	case FOLLOW_FORK:
		followed(e, f);
		break;
	case FOLLOW_EXEC:
		if (td)
			execd(e, td, f);
		break;
	case FOLLOW_FULL:
		e->follow_full++;
		break;
	case FOLLOW_EXIT:
		if (td && !td->exited) {
			td->exited = true;
			td->exit_status = (int)f->parent;
			td->exit_ns = f->hdr.ts;
		}
		break;
	default:
		e->bad_records++;
	}
}

static void ebpf_follow__destroy(struct ebpf *e)
{
	follow_bpf__destroy(e->follow);
	e->follow = NULL;
}

const struct ebpf_collector_ops ebpf_follow_ops = {
	.id = EC_FOLLOW,
	.flag = EBPF_COLLECT_FOLLOW,
	.rec_type = EBPF_REC_FOLLOW,
	.open = ebpf_follow__open,
	.attach = ebpf_follow__attach,
	.is_on = ebpf_follow__is_on,
	.set_running = ebpf_follow__set_running,
	.record = ebpf_follow__record,
	.destroy = ebpf_follow__destroy,
};
#endif
