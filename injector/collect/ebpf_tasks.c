/* SPDX-License-Identifier: MIT */
/*
 * Every thread of the targets, read on demand, user half (kernel half: bpf/tasks.bpf.c,
 * shared struct: bpf/tasks.h). A BPF task iterator writes one record per target thread
 * when its fd is read: no thread is stopped, nothing is loaded into the target. A thread
 * that was on a CPU as it was read is read again a few times, 2 ms apart, to catch it off
 * its CPU (its saved registers and its stack then agree); if it never leaves, it is kept
 * as it was, marked on_cpu.
 */
#ifndef AIPROF_NO_EBPF
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "bpf/tasks.h"
#include "tasks.skel.h"
#include "ebpf_internal.h"
#include "procstat.h"

#define TASKS_TRIES 10
#define TASKS_RETRY_NS (2 * 1000 * 1000)

static int ebpf_tasks__open(struct ebpf *e)
{
	struct bpf_object_open_opts oo = { .sz = sizeof(oo), .btf_custom_path = e->opts.btf_path };
	struct tasks_bpf *skel;
	int r;

	skel = tasks_bpf__open_opts(&oo);
	if (!skel) {
		r = -errno;
		snprintf(e->why[EC_TASKS], sizeof(e->why[EC_TASKS]), "cannot open the task "
			 "iterator: %s", strerror(-r));
		return r;
	}
	bpf_map__set_max_entries(skel->maps.events, EBPF_RINGBUF_BYTES);
	r = ebpf_share_maps(e, skel->obj);
	if (r == 0)
		r = tasks_bpf__load(skel);
	if (r < 0) {
		snprintf(e->why[EC_TASKS], sizeof(e->why[EC_TASKS]), "the kernel refused the "
			 "sleepable task iterator (Linux 5.18 or later): %s", strerror(-r));
		tasks_bpf__destroy(skel);
		return r;
	}
	ebpf_loaded(e, skel->obj);
	e->tasks = skel;
	return 0;
}

static int ebpf_tasks__attach(struct ebpf *e)
{
	int r;

	e->tasks_link = bpf_program__attach_iter(e->tasks->progs.dump_task, NULL);
	if (!e->tasks_link) {
		r = -errno;
		snprintf(e->why[EC_TASKS], sizeof(e->why[EC_TASKS]), "cannot attach the task "
			 "iterator: %s", strerror(-r));
		return r;
	}
	snprintf(e->scope[EC_TASKS], sizeof(e->scope[EC_TASKS]), "on demand (an iterator "
		 "over the targets' threads, read when a dump is taken)");
	return 0;
}

static bool ebpf_tasks__is_on(const struct ebpf *e)
{
	return e->tasks != NULL;
}

static void ebpf_tasks__set_running(struct ebpf *e, bool on)
{
	(void)e;
	(void)on;
}

static void ebpf_tasks__record(struct ebpf *e, struct ebpf_tdata *td, const void *data,
			       size_t size)
{
	(void)td;
	(void)data;
	(void)size;
	e->bad_records++;   /* its records come from the iterator, never the ring buffer */
}

static void ebpf_tasks__destroy(struct ebpf *e)
{
	bpf_link__destroy(e->tasks_link);
	e->tasks_link = NULL;
	tasks_bpf__destroy(e->tasks);
	e->tasks = NULL;
}

const struct ebpf_collector_ops ebpf_tasks_ops = {
	.id = EC_TASKS,
	.flag = EBPF_COLLECT_TASKS,
	.rec_type = EBPF_REC_TASK,
	.open = ebpf_tasks__open,
	.attach = ebpf_tasks__attach,
	.is_on = ebpf_tasks__is_on,
	.set_running = ebpf_tasks__set_running,
	.record = ebpf_tasks__record,
	.destroy = ebpf_tasks__destroy,
};

struct threads_pass {
	unsigned pending;         /* on a CPU, or ran since they were read: for the next pass */
	bool last;                /* the last pass: keep them as they are */
	struct kept_dump *kept;   /* copies, symbolized once every pass is done */
	size_t nkept, capkept;
	bool *refreshed;          /* per target: its interpreter's threads read again this pass */
};

struct kept_dump {
	struct ebpf_tdata *td;
	struct task_dump *d;
	bool torn;                /* ran between its read and its Python frames' (last pass) */
};

static bool have_thread(const struct threads_pass *p, const struct ebpf_tdata *td, uint32_t tid)
{
	for (size_t i = 0; i < p->nkept; i++)
		if (p->kept[i].td == td && p->kept[i].d->hdr.tid == tid)
			return true;
	return false;
}

/*
 * A thread's record, its Python frames read right after it (the interpreter's thread list
 * read again for a thread it did not have), then checked: a thread gone meanwhile is
 * counted, not shown (the frames read may not be its own); one that ran since its record
 * was taken is read again in the next pass (its native and Python frames would be of two
 * moments), or on the last pass kept and marked.
 */
static int keep_thread(struct ebpf *e, struct ebpf_tdata *td, struct task_dump *d, void *arg)
{
	struct threads_pass *p = arg;
	size_t ti = (size_t)(td - e->t), rec;
	uint64_t count = 0;
	char tid[16];
	bool torn = false;
	int r;

	if (have_thread(p, td, d->hdr.tid))
		return 0;
	if (!ebpf_task_settled(d) && !p->last) {
		p->pending++;
		return 0;
	}
	if (td->py) {
		ebpf_py_know_thread(e, td, d->hdr.tid, &p->refreshed[ti]);
		ebpf_py_walk_asleep(td, d->hdr.tid, &d->st);
	}
	snprintf(tid, sizeof(tid), "%u", d->hdr.tid);
	r = procsched_switches(td->pid, tid, &count);
	if (r == -ENOENT) {
		td->threads_ended++;
		return 0;
	}
	if (r == 0 && (uint32_t)count != d->pcount && !d->on_cpu) {
		if (!p->last) {
			p->pending++;
			return 0;
		}
		torn = true;
	}
	if (p->nkept == p->capkept) {
		size_t ncap = p->capkept ? p->capkept * 2 : 16;
		struct kept_dump *nv = reallocarray(p->kept, ncap, sizeof(*nv));

		if (!nv)
			return -ENOMEM;
		p->kept = nv;
		p->capkept = ncap;
	}
	rec = sizeof(*d) - sizeof(d->u) + EBPF_UCOPY_HDR + d->u.bytes;
	p->kept[p->nkept].d = malloc(rec);
	if (!p->kept[p->nkept].d)
		return -ENOMEM;
	memcpy(p->kept[p->nkept].d, d, rec);
	p->kept[p->nkept].td = td;
	p->kept[p->nkept++].torn = torn;
	return 0;
}

/* A kept record into its process's thread list, symbolized */
static int add_thread(struct ebpf *e, const struct kept_dump *k)
{
	struct ebpf_tdata *td = k->td;
	const struct task_dump *d = k->d;
	struct ebpf_thread *t;
	uint32_t wchan = UINT32_MAX;
	bool whole = false;
	int id;

	if (td->nthreads == td->capthreads) {
		size_t ncap = td->capthreads ? td->capthreads * 2 : 16;
		struct ebpf_thread *nv = reallocarray(td->threads, ncap, sizeof(*nv));

		if (!nv)
			return -ENOMEM;
		td->threads = nv;
		td->capthreads = ncap;
	}
	id = ebpf_stack_of_dump(e, td, d, true, &wchan, &whole);
	if (id < 0)
		return id;
	t = &td->threads[td->nthreads++];
	*t = (struct ebpf_thread){
		.tid = d->hdr.tid, .state = d->state, .on_cpu = d->on_cpu != 0 || k->torn,
		.syscall = d->syscall, .for_ns = ebpf_task_for_ns(d), .stack = (uint32_t)id,
		.wchan = d->state ? wchan : UINT32_MAX, .whole = whole,
		.gil = (uint8_t)(d->st.py_gil <= EBPF_PY_GIL_NOT_HELD ? d->st.py_gil : 0),
	};
	memcpy(t->comm, d->hdr.comm, sizeof(t->comm));
	t->comm[15] = 0;
	return 0;
}

int ebpf__threads(struct ebpf *e)
{
	struct threads_pass p = { 0 };
	size_t n = 0;
	int r = 0;

	if (!e || !e->tasks_link)
		return -ENOTSUP;
	p.refreshed = calloc(e->nt ? e->nt : 1, sizeof(*p.refreshed));
	if (!p.refreshed)
		return -ENOMEM;
	for (size_t i = 0; i < e->nt; i++) {
		e->t[i].nthreads = 0;
		e->t[i].threads_ended = 0;
		if (e->t[i].py)
			ebpf_py_refresh(e, &e->t[i]);
	}
	for (int pass = 0; pass < TASKS_TRIES; pass++) {
		p.pending = 0;
		p.last = pass == TASKS_TRIES - 1;
		memset(p.refreshed, 0, e->nt * sizeof(*p.refreshed));
		r = ebpf_tasks_each(e, keep_thread, &p);
		if (r < 0 || !p.pending)
			break;
		nanosleep(&(struct timespec){ .tv_nsec = TASKS_RETRY_NS }, NULL);
	}
	for (size_t i = 0; i < p.nkept; i++) {
		if (r >= 0)
			r = add_thread(e, &p.kept[i]);
		free(p.kept[i].d);
	}
	free(p.kept);
	free(p.refreshed);
	if (r < 0)
		return r;
	for (size_t i = 0; i < e->nt; i++)
		n += e->t[i].nthreads;
	return (int)n;
}
#endif
