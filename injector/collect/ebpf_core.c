/* SPDX-License-Identifier: MIT */
/*
 * What the eBPF collectors share (ebpf_internal.h): per-target data, stacks from kernel-side
 * blocks to frame ids, and the maps the first loaded object owns and the others reuse.
 * Below the collectors (ebpf_cpu.c, ebpf_offcpu.c, ebpf_syscalls.c) and their driver
 * (ebpf.c): it calls neither.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include <sys/syscall.h>

#include "bpf/tasks.h"
#include "log.h"
#include "ebpf_internal.h"
#include "timeutil.h"
#include "ebpf_kallsyms.h"

#ifndef AIPROF_NO_EBPF
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <bpf/btf.h>
#endif

/* ---- shared helpers ------------------------------------------------------------------- */

struct ebpf_tdata *ebpf_tdata_of(struct ebpf *e, uint32_t tgid)
{
	for (size_t i = 0; i < e->nt; i++)
		if ((uint32_t)e->t[i].pid == tgid)
			return &e->t[i];
	return NULL;
}

void ebpf_follow_note(struct ebpf *e, pid_t pid, pid_t parent, uint64_t ns, bool execd)
{
	if (!e->news) {
		e->news = calloc(EBPF_FOLLOW_NEWS_MAX, sizeof(*e->news));
		if (!e->news)
			return;
	}
	if (e->nnews < EBPF_FOLLOW_NEWS_MAX)
		e->news[e->nnews++] = (struct ebpf_proc_note){ .pid = pid, .parent = parent,
							       .ns = ns, .execd = execd };
}

struct ebpf_tid *ebpf_note_tid(struct ebpf_tdata *td, uint32_t tid, const char *comm)
{
	for (size_t i = td->ntids; i-- > 0;)
		if (td->tids[i].tid == tid) {
			memcpy(td->tids[i].comm, comm, sizeof(td->tids[i].comm));
			td->tids[i].comm[15] = 0;
			return &td->tids[i];
		}
	if (td->ntids == td->captids) {
		size_t ncap = td->captids ? td->captids * 2 : 16;
		struct ebpf_tid *nv = realloc(td->tids, ncap * sizeof(*nv));

		if (!nv)
			return NULL;
		td->tids = nv;
		td->captids = ncap;
	}
	td->tids[td->ntids] = (struct ebpf_tid){ .tid = tid };
	memcpy(td->tids[td->ntids].comm, comm, sizeof(td->tids[td->ntids].comm));
	td->tids[td->ntids].comm[15] = 0;
	return &td->tids[td->ntids++];
}

bool ebpf__exit_of(const struct ebpf *e, pid_t pid, int *ret_status, uint64_t *ret_ns)
{
	for (size_t i = 0; e && i < e->nt; i++)
		if (e->t[i].pid == pid && e->t[i].exited) {
			*ret_status = e->t[i].exit_status;
			*ret_ns = e->t[i].exit_ns;
			return true;
		}
	return false;
}

const char *ebpf__thread_name(const struct ebpf *e, pid_t pid, uint32_t tid)
{
	for (size_t i = 0; e && i < e->nt; i++)
		if (e->t[i].pid == pid)
			return ebpf_pyname_of(&e->t[i], tid);
	return NULL;
}

bool ebpf_tid_is_ours(struct ebpf_tdata *td, uint32_t tid)
{
	for (size_t i = 0; i < td->nown; i++)
		if (td->own[i] == tid) {
			td->own_records++;
			return true;
		}
	return false;
}

void ebpf_exclude_thread_records(struct ebpf *e, pid_t pid, pid_t tid)
{
	struct ebpf_tdata *td = e && tid > 0 ? ebpf_tdata_of(e, (uint32_t)pid) : NULL;
	size_t k;

	if (!td || td->nown == sizeof(td->own) / sizeof(td->own[0]))
		return;
	for (size_t i = 0; i < td->nown; i++)
		if (td->own[i] == (uint32_t)tid)
			return;
	td->own[td->nown++] = (uint32_t)tid;
	/* what came before it was known: out of the events kept and the stacks' weights */
	for (size_t i = k = 0; i < td->ncpu; i++)
		if (td->cpu[i].tid == (uint32_t)tid) {
			stack_store__sub(&e->stacks, td->cpu[i].stack, STACK_CPU, 1);
			td->cpu_samples--;
			td->own_records++;
		} else {
			td->cpu[k++] = td->cpu[i];
		}
	td->ncpu = k;
	for (size_t i = k = 0; i < td->noff; i++)
		if (td->off[i].tid == (uint32_t)tid) {
			uint64_t us = td->off[i].dur / 1000;

			stack_store__sub(&e->stacks, td->off[i].stack, STACK_OFFCPU, us ? us : 1);
			td->own_records++;
		} else {
			td->off[k++] = td->off[i];
		}
	td->noff = k;
	for (size_t i = k = 0; i < td->nsys; i++)
		if (td->sys[i].tid == (uint32_t)tid) {
			free(td->sys[i].target);
			td->own_records++;
		} else {
			td->sys[k++] = td->sys[i];
		}
	td->nsys = k;
	for (size_t i = k = 0; i < td->ntids; i++)
		if (td->tids[i].tid != (uint32_t)tid)
			td->tids[k++] = td->tids[i];
	td->ntids = k;
}

bool ebpf_keep_event(const struct ebpf *e, struct ebpf_tdata *td)
{
	if (!e->opts.max_events || td->ncpu + td->noff + td->nsys < e->opts.max_events)
		return true;
	td->summed++;
	return false;
}

/* ---- targets ------------------------------------------------------------------------- */

static void read_comm(pid_t pid, char *buf, size_t len)
{
	char p[64];
	FILE *f;

	snprintf(p, sizeof(p), "/proc/%d/comm", pid);
	f = fopen(p, "re");
	if (!f || !fgets(buf, (int)len, f))
		snprintf(buf, len, "pid%d", pid);
	if (f)
		fclose(f);
	buf[strcspn(buf, "\n")] = 0;
}

int ebpf_tdata_init(struct ebpf *e, struct ebpf_tdata *td, pid_t pid, const char *comm)
{
	char root[64];
	int r;

	td->pid = pid;
	if (comm)
		snprintf(td->comm, sizeof(td->comm), "%s", comm);
	else
		read_comm(td->pid, td->comm, sizeof(td->comm));
	snprintf(root, sizeof(root), "%s-%d", td->comm, (int)td->pid);
	r = stack_store__frame(&e->stacks, root);
	if (r < 0)
		return r;
	td->root = (uint32_t)r;
	r = symbolizer__proc(e->symz, td->pid, &td->syms);
	if (r == -ENOMEM)
		return r;
	if (r < 0)
		td->syms = NULL;  /* gone already: its frames stay [unknown] */
	if (e->opts.collectors & EBPF_COLLECT_PYTHON)
		return ebpf_py_find(e, td);
	return 0;
}

int ebpf_py_find(struct ebpf *e, struct ebpf_tdata *td)
{
	int pfd = ebpf_shared_map_fd(e, "py_procs"), r;
	uint32_t key = (uint32_t)td->pid;
	uint64_t now = now_monotonic_ns();

	td->py_retry_ns = 0;
	r = py_proc__new(td->pid, td->py_why, sizeof(td->py_why), &td->py);
	if (r == -ENOMEM)
		return r;
	if (r < 0) {
		td->py = NULL;
		if (r == -EAGAIN) {
			/* a rank exec'd a moment ago: its interpreter has no thread yet */
			td->py_retry_every = td->py_retry_every ?
				(td->py_retry_every * 2 < PY_RETRY_MAX_NS ? td->py_retry_every * 2 :
				 PY_RETRY_MAX_NS) : PY_RETRY_FIRST_NS;
			td->py_retry_ns = now + td->py_retry_every;
		}
		return 0;
	}
	td->py_retry_every = 0;
	log_debug("pid %d: python %s, frames read with offsets from %s", td->pid,
		  py_proc__version(td->py), py_proc__offsets_source(td->py));
	/* before the programs load, fill_maps() does this */
	if (pfd >= 0 && bpf_map_update_elem(pfd, &key, &py_proc__offsets(td->py)->bpf, BPF_ANY) == 0)
		ebpf_py_refresh(e, td);
	return 0;
}

void ebpf_py_retry_due(struct ebpf *e, uint64_t now)
{
	for (size_t i = 0; i < e->nt; i++) {
		struct ebpf_tdata *td = &e->t[i];

		if (!td->py && td->py_retry_ns && now >= td->py_retry_ns && !td->exited &&
		    ebpf_py_find(e, td) == 0 && td->py)
			td->py_found_late_ns = now;
	}
}

/* ---- stacks: kernel-side blocks -> frame ids --------------------------------------------- */

#define UC_FLAGS_SHIFT 32
#define UC_EVAL (1ULL << 40)
#define UC_ROOT (1ULL << 41)

static bool is_thread_root(const char *name)
{
	static const char *const roots[] = {
		"_start", "__libc_start_main", "__libc_start_call_main", "start_thread", "clone",
		"clone3", "__clone", "__clone3", "__clone_internal", "thread_start",
	};

	for (size_t i = 0; i < sizeof(roots) / sizeof(roots[0]); i++)
		if (strcmp(name, roots[i]) == 0)
			return true;
	return false;
}

/* frame id | flags for a user address; UINT64_MAX on ENOMEM */
static uint64_t user_frame(struct ebpf *e, struct ebpf_tdata *td, uint64_t addr)
{
	char name[512];
	uint64_t v;
	int flags, id;

	if (u64map_get(&td->ucache, addr, &v))
		return v;
	flags = td->syms ? proc_symbolizer__lookup(td->syms, addr, name, sizeof(name)) : 0;
	if (!td->syms)
		snprintf(name, sizeof(name), "[unknown]");
	if (flags < 0)
		return UINT64_MAX;
	id = stack_store__frame(&e->stacks, name);
	if (id < 0)
		return UINT64_MAX;
	v = (uint64_t)id | (uint64_t)flags << UC_FLAGS_SHIFT;
	if ((flags & USYM_NAMED) && strncmp(name, "_PyEval_EvalFrame", 17) == 0)
		v |= UC_EVAL;
	if ((flags & USYM_NAMED) && is_thread_root(name))
		v |= UC_ROOT;
	/* an address in no mapping is not kept: a library mapped since is found when the
	 * symbolizer reads the maps again (at most every 200 ms), and its hot addresses must
	 * not stay unknown for the rest of the window */
	if ((flags & USYM_MAPPED) && u64map_put(&td->ucache, addr, v) < 0)
		return UINT64_MAX;
	return v;
}

/* frame id | in_sched_text << 32 for a kernel address; UINT64_MAX on ENOMEM */
static uint64_t kernel_frame(struct ebpf *e, uint64_t addr)
{
	const struct ksyms *ks = symbolizer__ksyms(e->symz);
	const struct ksym *s;
	char name[256];
	uint64_t v;
	int id;

	if (u64map_get(&e->kcache, addr, &v))
		return v;
	s = ks ? ksyms__find(ks, addr) : NULL;
	if (s && s->module && strcmp(s->module, "bpf") != 0)
		snprintf(name, sizeof(name), "%s [%s]_[k]", s->name, s->module);
	else if (s)
		snprintf(name, sizeof(name), "%s_[k]", s->name);
	else
		snprintf(name, sizeof(name), "[kernel]_[k]");
	id = stack_store__frame(&e->stacks, name);
	if (id < 0)
		return UINT64_MAX;
	v = (uint64_t)id | (uint64_t)(ksyms__in_sched_text(ks, addr) ? 1 : 0) << 32;
	if (u64map_put(&e->kcache, addr, v) < 0)
		return UINT64_MAX;
	return v;
}

/* frame id + 1 of a Python frame, 0 if it is not one (a shim, or not a code object) */
static uint32_t py_frame(struct ebpf *e, struct ebpf_tdata *td, uint64_t code, uint64_t instr)
{
	uint64_t key = u64_hash2(code, instr), v;
	char name[1200];
	int id;

	if (u64map_get(&td->pycache, key, &v))
		return (uint32_t)v;
	if (py_proc__frame(td->py, code, instr, name, sizeof(name)) < 0) {
		v = 0;
	} else {
		id = stack_store__frame(&e->stacks, name);
		v = id < 0 ? 0 : (uint64_t)id + 1;
	}
	u64map_put(&td->pycache, key, v);
	return (uint32_t)v;
}

/* USYM flags of the outermost of the first nn user frames (already in the cache) */
static unsigned user_frame_flags(struct ebpf_tdata *td, const struct ebpf_stacks *st, size_t nn)
{
	uint64_t addr = nn > 1 ? st->uips[nn - 1] - 1 : st->uips[0], v = 0;

	u64map_get(&td->ucache, addr, &v);
	return (unsigned)(v >> UC_FLAGS_SHIFT) & 0xff;
}

/* ---- CFI unwinding over a record's stack copy ----------------------------------------- */

struct ucopy_target {
	const struct ebpf_ucopy *uc;
	struct proc_symbolizer *syms;
};

static bool ucopy_read(void *arg, uint64_t addr, uint64_t *ret)
{
	const struct ucopy_target *u = arg;
	uint64_t sp = u->uc->regs[UW_RSP];

	if (addr < sp || addr - sp > u->uc->bytes || u->uc->bytes - (addr - sp) < 8)
		return false;
	memcpy(ret, u->uc->data + (addr - sp), 8);
	return true;
}

static int ucopy_code(void *arg, uint64_t pc, struct unwind_code *ret)
{
	const struct ucopy_target *u = arg;

	return proc_symbolizer__code(u->syms, pc, ret);
}

const struct ebpf_ucopy *ebpf_ucopy_of(struct ebpf *e, const void *data, size_t size,
				       size_t fixed)
{
	const struct ebpf_ucopy *uc;

	if (size < fixed + EBPF_UCOPY_HDR)
		return NULL;
	uc = (const void *)((const char *)data + fixed);
	if (uc->bytes > EBPF_UCOPY_MAX || size < fixed + EBPF_UCOPY_HDR + uc->bytes) {
		e->bad_records++;
		return NULL;
	}
	return uc;
}

/* Frames by CFI into pcs; 0 frames when there is nothing to unwind with. -ENOMEM. */
static int unwind_copy(struct ebpf *e, struct ebpf_tdata *td, const struct ebpf_ucopy *uc,
		       uint64_t *pcs, size_t max, struct unwind_result *ret)
{
	struct ucopy_target u = { .uc = uc, .syms = td->syms };
	struct unwind_target tgt = { .read = ucopy_read, .code = ucopy_code, .arg = &u };
	struct unwind_regs regs = { .valid = (1u << UW_NREGS) - 1 };

	*ret = (struct unwind_result){ .end = UNWIND_END_BAD_FRAME };
	if (!e->uw || !td->syms || !uc->regs[UW_RIP])
		return 0;
	memcpy(regs.r, uc->regs, sizeof(regs.r));
	return unwind_stack(e->uw, &tgt, &regs, pcs, max, ret);
}

/*
 * User frames of ips[0..n) (ips[0] exact, the others return addresses) into native/eval,
 * stopping at the first address that is not code. Returns the count, or -ENOMEM;
 * *ret_root: stopped at a named thread root, *ret_bad: stopped at a non-code address.
 */
static int user_frames(struct ebpf *e, struct ebpf_tdata *td, const uint64_t *ips, size_t n,
		       uint32_t *native, bool *eval, bool *ret_root, bool *ret_bad)
{
	size_t nn = 0;

	*ret_root = *ret_bad = false;
	for (size_t i = 0; i < n; i++) {
		/* return addresses point after the call: look up the call itself */
		uint64_t v = user_frame(e, td, i ? ips[i] - 1 : ips[i]);

		if (v == UINT64_MAX)
			return -ENOMEM;
		if (!((v >> UC_FLAGS_SHIFT) & USYM_MAPPED)) {
			*ret_bad = true;
			break;
		}
		if ((v >> UC_FLAGS_SHIFT) & USYM_OURS)
			continue;       /* a hook of ours between the program and what it called */
		native[nn] = (uint32_t)v;
		eval[nn] = (v & UC_EVAL) != 0;
		nn++;
		if (v & UC_ROOT) {
			*ret_root = true;
			break;
		}
	}
	return (int)nn;
}

/* The frame of a mark of what a stack does not show: "[... N ...]" (a frame of its own, so
 * that a flame graph shows the cut where it is) */
static int mark_frame(struct ebpf *e, const char *fmt, unsigned n)
{
	char name[80];

	snprintf(name, sizeof(name), fmt, n);
	return stack_store__frame(&e->stacks, name);
}

/* The slots of st->py innermost first: the inner ones, then the ring of outer ones from
 * its innermost (bpf/stack.h). Returns how many. */
static size_t py_order(const struct ebpf_stacks *st, uint32_t *order)
{
	size_t nf = st->py_frames < EBPF_PY_MAX ? st->py_frames : EBPF_PY_MAX;

	for (size_t k = 0; k < nf; k++)
		order[k] = k < EBPF_PY_INNER || !st->py_cut ? (uint32_t)k :
			   EBPF_PY_INNER + (uint32_t)((st->py_cut + k - EBPF_PY_INNER) &
						      (EBPF_PY_OUTER - 1));
	return nf;
}

/* ebpf_stack_from(), and whether the native part reached the thread's first frame */
static int stack_build(struct ebpf *e, struct ebpf_tdata *td, const struct ebpf_stacks *st,
		       const struct ebpf_ucopy *uc, bool offcpu, bool count, uint32_t *ret_leaf,
		       uint32_t *ret_wchan, bool *ret_whole)
{
	uint32_t kernel[EBPF_KSTACK_MAX], native[UNWIND_MAX_FRAMES], py[EBPF_PY_MAX + 2];
	bool eval[UNWIND_MAX_FRAMES], seg_end[EBPF_PY_MAX + 2];
	uint32_t out[STACK_MAX_FRAMES], wchan = UINT32_MAX, kernel_cut = 0, native_cut = 0;
	uint64_t pcs[UNWIND_MAX_FRAMES];
	size_t nk = 0, nn = 0, np = 0, nkr, nur, n, py_cut_at = 0;
	bool truncated = false, reached_root = false, any_eval = false, bad, fp_whole;
	bool py_cut = false;
	struct stack_merge_in in;
	int id, r;

	nkr = st->kstack_bytes > 0 ? (size_t)st->kstack_bytes / 8 : 0;
	nur = st->ustack_bytes > 0 ? (size_t)st->ustack_bytes / 8 : 0;
	if (nkr > EBPF_KSTACK_MAX)
		nkr = EBPF_KSTACK_MAX;
	if (nur > EBPF_USTACK_MAX)
		nur = EBPF_USTACK_MAX;

	/*
	 * kernel: the first frame below the scheduler is what an off-CPU thread waits in. A
	 * stack taken in the thread's own context starts in this program's tracepoint: drop
	 * down to the scheduler. One taken of a sleeping thread (bpf_get_task_stack, /proc)
	 * already leaves the scheduler out: its first frame is the wait.
	 */
	{
		size_t first = 0;
		bool in_sched = false;

		if (offcpu) {
			for (first = 0; first < nkr; first++) {
				uint64_t v = kernel_frame(e, st->kips[first]);

				if (v != UINT64_MAX && (v >> 32))
					break;
			}
			if (first == nkr)
				first = 0;
			in_sched = true;  /* wchan: the first frame that is not the scheduler's */
		}
		for (size_t i = first; i < nkr; i++) {
			uint64_t v = kernel_frame(e, st->kips[i]);

			if (v == UINT64_MAX)
				return -ENOMEM;
			if (in_sched && !(v >> 32)) {
				in_sched = false;
				wchan = (uint32_t)v;
			}
			kernel[nk++] = (uint32_t)v;
		}
	}

	/*
	 * user: the frame-pointer chain first, stopped at the first address that is not code
	 * (where the chain broke). Where it reached a named thread root it is the whole stack;
	 * otherwise the stack copy, if any, is unwound by CFI, and whichever walk got further
	 * is kept.
	 */
	r = user_frames(e, td, (const uint64_t *)st->uips, nur, native, eval, &reached_root, &truncated);
	if (r < 0)
		return r;
	nn = (size_t)r;
	/*
	 * A chain that ended by itself (no garbage address, not cut at the maximum depth) in
	 * the C library ended where glibc starts threads and main(): start_thread() and
	 * __libc_start_call_main() are not in its dynamic symbols, so they cannot be named.
	 */
	fp_whole = reached_root || (nn >= 2 && !truncated && nur < EBPF_USTACK_MAX &&
				    (user_frame_flags(td, st, nn) & USYM_LIBC));
	/*
	 * The fast path: a whole frame-pointer chain is kept when its first step agrees with
	 * the leaf's CFI (one cached lookup): a leaf that set up no frame (a libc syscall
	 * wrapper) would have lost its caller, and a lone libc leaf whose frame pointer led
	 * nowhere is not a whole chain.
	 */
	if (fp_whole && uc && e->uw) {
		struct unwind_result ur;

		if (unwind_copy(e, td, uc, pcs, 2, &ur) < 0)
			return -ENOMEM;
		if (ur.n < 2 || pcs[1] != st->uips[1])
			fp_whole = false;
	}
	if (!fp_whole && uc && e->uw) {
		struct unwind_result ur;
		uint32_t cnative[UNWIND_MAX_FRAMES];
		bool ceval[UNWIND_MAX_FRAMES], croot;
		size_t cn;

		if (unwind_copy(e, td, uc, pcs, UNWIND_MAX_FRAMES, &ur) < 0)
			return -ENOMEM;
		r = user_frames(e, td, pcs, ur.n, cnative, ceval, &croot, &bad);
		if (r < 0)
			return r;
		cn = (size_t)r;
		if (cn && (ur.end == UNWIND_END_ROOT || croot || cn > nn)) {
			memcpy(native, cnative, cn * sizeof(*native));
			memcpy(eval, ceval, cn * sizeof(*eval));
			nn = cn;
			reached_root = ur.end == UNWIND_END_ROOT || croot;
			truncated = !reached_root;
			td->stacks_cfi++;
			td->unwind_ends[ur.end]++;
			td->unwind_fp_frames += ur.fp_frames;
			goto user_done;
		}
	}
	if (nn && !reached_root && !truncated && nur < EBPF_USTACK_MAX &&
	    ((user_frame_flags(td, st, nn) & USYM_LIBC)))
		reached_root = true;
	if (nn && !reached_root)
		truncated = true;
	if (nn)
		td->stacks_fp++;
user_done:
	for (size_t i = 0; i < nn; i++)
		any_eval |= eval[i];

	/* Python: frames of code objects, segment ends where a C-level call began */
	if (td->py && st->py_frames && st->py_status != EBPF_PY_ST_NONE) {
		const struct py_version_offsets *o = py_proc__offsets(td->py);
		uint32_t order[EBPF_PY_MAX];
		size_t nf = py_order(st, order);

		for (size_t k = 0; k < nf; k++) {
			const struct ebpf_py_frame *pf = &st->py[order[k]];
			uint64_t fl = pf->instr_flags;
			uint32_t owner = (uint32_t)(fl >> EBPF_PY_OWNER_SHIFT) & 0xff;
			uint32_t f;

			if (k == EBPF_PY_INNER && st->py_cut) {
				/* the frames walked between the inner and the outer ones */
				r = mark_frame(e, "[... %u Python frames not shown]", st->py_cut);
				if (r < 0)
					return r;
				py_cut_at = np + 1;
				py[np] = (uint32_t)r;
				seg_end[np++] = false;
			}
			if (o->owner_shim_min != PY_OWNER_NO_SHIM && owner >= o->owner_shim_min) {
				if (np)
					seg_end[np - 1] = true;
				continue;
			}
			f = py_frame(e, td, pf->code, fl & EBPF_PY_INSTR_MASK);
			if (!f)
				continue;
			py[np] = f - 1;
			seg_end[np] = (fl >> EBPF_PY_ENTRY_SHIFT) & 1;
			np++;
		}
		if (st->py_status == EBPF_PY_ST_TRUNCATED || st->py_status == EBPF_PY_ST_READ_ERROR) {
			/* the outermost frames are not known: said where they would be */
			r = st->py_status == EBPF_PY_ST_TRUNCATED ?
				mark_frame(e, "[... Python frames past %u not read]",
					   (unsigned)st->py_frames + st->py_cut) :
				mark_frame(e, "[... Python frames not readable]", 0);
			if (r < 0)
				return r;
			py[np] = (uint32_t)r;
			seg_end[np++] = true;
		}
		py_cut = st->py_cut || st->py_status == EBPF_PY_ST_TRUNCATED ||
			 st->py_status == EBPF_PY_ST_READ_ERROR;
	}
	/* the kernel's stack at its maximum depth: its outer frames may be cut */
	if (nkr == EBPF_KSTACK_MAX) {
		r = mark_frame(e, "[... kernel frames not shown]", 0);
		if (r < 0)
			return r;
		kernel_cut = (uint32_t)r + 1;
	}
	/* a user stack that did not reach its thread's first frame, or none of whose frames
	 * is in a known mapping (code generated at run time, a library mapped since) */
	if ((nn && !reached_root) || (!nn && nur)) {
		r = mark_frame(e, nn ? "[... native frames not unwound]" :
				       "[... user code in no known mapping]", 0);
		if (r < 0)
			return r;
		native_cut = (uint32_t)r + 1;
		truncated = true;
	}

	in = (struct stack_merge_in){
		.kernel = kernel, .nk = nk, .native = native, .native_eval = eval, .nn = nn,
		.py = py, .py_seg_end = seg_end, .np = np, .root = td->root,
		.py_cut_at = py_cut_at, .kernel_cut = kernel_cut, .native_cut = native_cut,
	};
	n = stack_merge(&in, out, STACK_MAX_FRAMES);
	id = stack_store__stack(&e->stacks, out, n);
	if (id < 0)
		return id;
	if (ret_whole)
		*ret_whole = nn && reached_root && !truncated && !py_cut && !kernel_cut;
	if (count) {
		if (nn || nur) {
			td->samples_user++;
			td->samples_truncated += truncated;
		}
		td->samples_kernel += nk > 0;
		td->samples_kernel_cut += kernel_cut != 0;
		if (st->py_status != EBPF_PY_ST_NONE) {
			td->samples_py_thread++;
			td->samples_py_cut += py_cut;
			td->samples_py += np > 0;
			td->samples_py_interleaved += np > 0 && any_eval;
		}
	}
	if (ret_leaf)
		*ret_leaf = n ? out[n - 1] : td->root;
	if (ret_wchan)
		*ret_wchan = wchan;
	return id;
}

int ebpf_stack_from(struct ebpf *e, struct ebpf_tdata *td, const struct ebpf_stacks *st,
		    const struct ebpf_ucopy *uc, bool offcpu, bool count, uint32_t *ret_leaf,
		    uint32_t *ret_wchan)
{
	return stack_build(e, td, st, uc, offcpu, count, ret_leaf, ret_wchan, NULL);
}

void ebpf_py_walk_asleep(struct ebpf_tdata *td, uint32_t tid, struct ebpf_stacks *st)
{
	uint64_t tstate;

	st->py_frames = 0;
	st->py_cut = 0;
	st->py_status = EBPF_PY_ST_NONE;
	st->py_gil = EBPF_PY_GIL_UNKNOWN;
	if (td->py && u64map_get(&td->pythreads, tid, &tstate))
		py_proc__walk(td->py, tstate, st);
}

int ebpf_stack_of_dump(struct ebpf *e, struct ebpf_tdata *td, const struct task_dump *d,
		       bool py_walked, uint32_t *ret_wchan, bool *ret_whole)
{
	struct ebpf_stacks st;

	memcpy(&st, &d->st, sizeof(st));
	if (!py_walked)
		ebpf_py_walk_asleep(td, d->hdr.tid, &st);
	return stack_build(e, td, &st, d->u.regs[UW_RIP] ? &d->u : NULL, d->state != 0, false,
			   NULL, ret_wchan, ret_whole);
}

uint64_t ebpf_task_for_ns(const struct task_dump *d)
{
	uint64_t since = d->state ? d->stopped_at : d->last_arrival;

	return since && d->hdr.ts > since ? d->hdr.ts - since : 0;
}

#ifndef AIPROF_NO_EBPF

/* ---- shared maps ------------------------------------------------------------------------ */

bool ebpf_task_storage_of(int map_fd, uint32_t tid, void *value)
{
	int pfd = (int)syscall(SYS_pidfd_open, (pid_t)tid, PIDFD_THREAD);
	bool ok;

	if (pfd < 0)
		return false;
	ok = bpf_map_lookup_elem(map_fd, &pfd, value) == 0;
	close(pfd);
	return ok;
}

void ebpf_task_works_cancel(struct bpf_object *obj, const char *map_name)
{
	struct bpf_map *m = bpf_object__find_map_by_name(obj, map_name);
	uint32_t key, next;
	int fd = m ? bpf_map__fd(m) : -1;

	if (fd < 0)
		return;
	/* deleting while walking: always take the first key left */
	while (bpf_map_get_next_key(fd, NULL, &next) == 0) {
		key = next;
		if (bpf_map_delete_elem(fd, &key) != 0)
			break;
	}
}

/* Runs the task iterator p to its end (it writes nothing): once per resume or pause. */
static void run_seed(const char *what, struct bpf_program *p)
{
	struct bpf_link *l = bpf_program__attach_iter(p, NULL);
	char buf[64];
	int fd;

	if (!l) {
		log_warning("%s collector: cannot run %s at a pause or its end (--budget): %s: the "
			    "waits begun or ended in the pause are not recorded", what,
			    bpf_program__name(p), strerror(errno));
		return;
	}
	fd = bpf_iter_create(bpf_link__fd(l));
	if (fd >= 0) {
		while (read(fd, buf, sizeof(buf)) > 0)
			;
		close(fd);
	} else {
		log_warning("%s collector: cannot run %s at a pause or its end (--budget): %s", what,
			    bpf_program__name(p), strerror(errno));
	}
	bpf_link__destroy(l);
}

void ebpf_throttle(const char *what, const struct ebpf_knobs *k, uint32_t rate, bool paused)
{
	__atomic_store_n(k->rate, rate, __ATOMIC_RELAXED);
	if (paused == *k->paused)
		return;
	if (paused)
		__atomic_fetch_add(k->epoch, 1, __ATOMIC_RELAXED);
	__atomic_store_n(k->paused, paused, __ATOMIC_RELAXED);
	for (size_t i = 0; i < 3; i++) {
		struct bpf_link **l = k->links[i];

		if (!k->progs[i] || !bpf_program__autoload(k->progs[i]))
			continue;       /* a tail call, or not loaded: the other way runs */
		if (paused) {
			bpf_link__destroy(*l);
			*l = NULL;
		} else if (!*l) {
			*l = bpf_program__attach(k->progs[i]);
			if (!*l)
				log_warning("%s collector: %s could not be attached again after a "
					    "pause (--budget): %s", what,
					    bpf_program__name(k->progs[i]), strerror(errno));
		}
	}
	if (!paused && k->seed)
		run_seed(what, k->seed);
	if (paused && k->hold)
		run_seed(what, k->hold);
}

bool ebpf_kernel_has_task_work(const char *btf_path)
{
	/* the running kernel's answer, once: a parse of its BTF is ~6 ms of CPU, and two
	 * collectors ask */
	static int running_has = -1;
	struct btf *btf;
	int has = btf_path ? -1 : __atomic_load_n(&running_has, __ATOMIC_RELAXED);

	if (has >= 0)
		return has;
	btf = btf_path ? btf__parse(btf_path, NULL) : btf__load_vmlinux_btf();
	if (!btf)
		return false;
	has = btf__find_by_name_kind(btf, "bpf_task_work_schedule_resume_impl", BTF_KIND_FUNC) > 0;
	btf__free(btf);
	if (!btf_path)
		__atomic_store_n(&running_has, has, __ATOMIC_RELAXED);
	return has;
}

/* the verifier's own words on the last program it refused, in this thread */
static __thread char verifier_why[256];

/*
 * From a verifier log: its last lines before the statistics ("verification time ..."),
 * where it says why it refused the program; instruction lines ("12: (85) call ...") and
 * state dumps are skipped. At most two lines, joined by "; ".
 */
void ebpf_verifier_reason(const char *log, char *out, size_t len)
{
	const char *end = strstr(log, "\nverification time");
	const char *lines[2] = { NULL, NULL };
	size_t lens[2] = { 0, 0 }, got = 0;

	out[0] = 0;
	if (!end)
		end = log + strlen(log);
	while (end > log && got < 2) {
		const char *b = end;
		size_t l;

		while (b > log && b[-1] != '\n')
			b--;
		l = (size_t)(end - b);
		if (l && !(b[0] >= '0' && b[0] <= '9') && b[0] != ';' && b[0] != '(' &&
		    strncmp(b, "from ", 5) != 0 && strncmp(b, "-- ", 3) != 0 &&
		    strncmp(b, "processed ", 10) != 0 && strncmp(b, "stack depth", 11) != 0 &&
		    strncmp(b, "verification time", 17) != 0) {
			lines[1 - got] = b;
			lens[1 - got] = l;
			got++;
		} else if (got) {
			break;  /* only the block of reason lines at the end */
		}
		if (b == log)
			break;
		end = b - 1;
	}
	for (size_t i = 0, n = 0; i < 2; i++)
		if (lines[i] && n < len)
			n += (size_t)snprintf(out + n, len - n, "%s%.*s", n ? "; " : "",
					      (int)(lens[i] > 200 ? 200 : lens[i]), lines[i]);
}

void ebpf_verifier_why_clear(void)
{
	verifier_why[0] = 0;
}

void ebpf_verifier_why_set(const char *log)
{
	ebpf_verifier_reason(log, verifier_why, sizeof(verifier_why));
}

void ebpf_task_work_refused(struct ebpf *e, int err)
{
	const char *v = verifier_why;   /* the refused load's reason, in this thread */

	if (e->task_work_why[0] || err == -ENOSYS)
		return;   /* said already; or not built with it (no attempt) */
	snprintf(e->task_work_why, sizeof(e->task_work_why), "this kernel refused a task work "
		 "scheduled from sched_switch (%s)", v[0] ? v : strerror(-err));
}

static const char *const shared_maps[EBPF_SHARED_MAPS] = {
	"targets", "py_procs", "py_threads", "events", "switch_next",
};

int ebpf_share_maps(struct ebpf *e, struct bpf_object *obj)
{
	for (size_t i = 0; i < EBPF_SHARED_MAPS; i++) {
		struct bpf_map *dst = bpf_object__find_map_by_name(obj, shared_maps[i]);
		int r;

		if (!dst || e->shared_fd[i] < 0)
			continue;
		r = bpf_map__reuse_fd(dst, e->shared_fd[i]);
		if (r < 0)
			return r;
	}
	return 0;
}

int ebpf_loaded(struct ebpf *e, struct bpf_object *obj)
{
	/* our own references: the maps outlive whichever object created them */
	for (size_t i = 0; i < EBPF_SHARED_MAPS; i++) {
		struct bpf_map *m = bpf_object__find_map_by_name(obj, shared_maps[i]);

		if (m && e->shared_fd[i] < 0)
			e->shared_fd[i] = fcntl(bpf_map__fd(m), F_DUPFD_CLOEXEC, 3);
	}
	return 0;
}

int ebpf_switch_chain(struct ebpf *e, const struct bpf_program *prog)
{
	uint32_t zero = 0;
	int fd = ebpf_shared_map_fd(e, "switch_next"), pfd = bpf_program__fd(prog);

	/* only while the off-CPU collector is on: the map outlives its object (our fd) */
	if (!e->off || fd < 0 || pfd < 0)
		return -ENOENT;
	if (bpf_map_update_elem(fd, &zero, &pfd, BPF_ANY) < 0)
		return -errno;
	return 0;
}

int ebpf_shared_map_fd(const struct ebpf *e, const char *name)
{
	for (size_t i = 0; i < EBPF_SHARED_MAPS; i++)
		if (strcmp(shared_maps[i], name) == 0)
			return e->shared_fd[i] >= 0 ? e->shared_fd[i] : -ENOENT;
	return -ENOENT;
}

#define PY_THREADS_PER_TICK 4096

/* ---- Python threads ---------------------------------------------------------------------- */

/* ns tid -> host tid for a target in another pid namespace (NSpid of each task). */
static int read_tid_map(pid_t pid, struct u64map *ns_to_host)
{
	char path[64];
	struct dirent *de;
	DIR *d;

	snprintf(path, sizeof(path), "/proc/%d/task", pid);
	d = opendir(path);
	if (!d)
		return -errno;
	while ((de = readdir(d))) {
		char sp[96], buf[4096], *p;
		long host = strtol(de->d_name, NULL, 10), ns = host;
		FILE *f;
		size_t n;

		if (host <= 0)
			continue;
		snprintf(sp, sizeof(sp), "/proc/%d/task/%ld/status", pid, host);
		f = fopen(sp, "re");
		if (!f)
			continue;
		n = fread(buf, 1, sizeof(buf) - 1, f);
		fclose(f);
		buf[n] = 0;
		p = strstr(buf, "\nNSpid:");
		if (p) {
			char *end;

			p += 7;
			for (;;) {
				long v = strtol(p, &end, 10);

				if (end == p)
					break;
				ns = v;
				p = end;
			}
		}
		u64map_put(ns_to_host, (uint64_t)ns, (uint64_t)host);
	}
	closedir(d);
	return 0;
}

static bool same_pid_ns(pid_t pid)
{
	struct stat a, b;
	char p[64];

	snprintf(p, sizeof(p), "/proc/%d/ns/pid", pid);
	if (stat("/proc/self/ns/pid", &a) < 0 || stat(p, &b) < 0)
		return true;
	return a.st_ino == b.st_ino && a.st_dev == b.st_dev;
}

#define PYNAME_TRIES 6        /* refreshes a thread is looked at for a name */
#define PYNAMES_MAX 4096      /* threads named per process */

/* The `threading` name of host thread tid, whose thread state is tstate: read the first
 * times it is seen (a thread not yet in Thread._bootstrap has none yet). */
static void py_name_thread(struct ebpf_tdata *td, uint32_t tid, uint64_t tstate, uint64_t ns_tid)
{
	struct ebpf_pyname *n = NULL;

	for (size_t i = td->npynames; i-- > 0 && !n;)
		if (td->pynames[i].tid == tid)
			n = &td->pynames[i];
	if (n && n->tstate != tstate)
		*n = (struct ebpf_pyname){ .tid = tid };    /* the tid of an ended thread reused */
	if (!n) {
		if (td->npynames == td->cappynames) {
			size_t ncap = td->cappynames ? td->cappynames * 2 : 16;
			struct ebpf_pyname *nv;

			if (ncap > PYNAMES_MAX)
				return;
			nv = realloc(td->pynames, ncap * sizeof(*nv));
			if (!nv)
				return;
			td->pynames = nv;
			td->cappynames = ncap;
		}
		n = &td->pynames[td->npynames++];
		*n = (struct ebpf_pyname){ .tid = tid };
	}
	n->tstate = tstate;
	if (n->found || n->tries >= PYNAME_TRIES)
		return;
	if (py_proc__thread_name(td->py, tstate, ns_tid, n->name, sizeof(n->name)) == 0 &&
	    n->name[0])
		n->found = true;
	else
		n->tries++;
}

void ebpf_py_know_thread(struct ebpf *e, struct ebpf_tdata *td, uint32_t tid, bool *refreshed)
{
	uint64_t tstate;

	if (td->py && !u64map_get(&td->pythreads, tid, &tstate) && refreshed && !*refreshed) {
		ebpf_py_refresh(e, td);
		*refreshed = true;
	}
}

void ebpf_py_refresh(struct ebpf *e, struct ebpf_tdata *td)
{
	struct u64map ns_to_host = { 0 }, now = { 0 };
	struct py_tstate *ts;
	int fd = ebpf_shared_map_fd(e, "py_threads");
	bool mapped = !same_pid_ns(td->pid);
	size_t n = 0, pos = 0;
	uint64_t k, v;
	bool torn;
	int r;

	if (!td->py)    /* no CPython (any more: it exec'd another program) */
		return;
	if (!e->tstates)
		e->tstates = calloc(PY_THREADS_PER_TICK, sizeof(*e->tstates));
	ts = e->tstates;
	if (!ts)
		return;
	r = py_proc__threads(td->py, ts, PY_THREADS_PER_TICK, &n);
	/* a list never read to its end (threads came and went under every walk): what was
	 * read is added, nothing is taken away */
	torn = r == -EAGAIN;
	if (r < 0 && !torn)
		return;
	if (mapped)
		read_tid_map(td->pid, &ns_to_host);
	for (size_t i = 0; i < n; i++) {
		uint64_t host = ts[i].native_tid, old;
		struct py_thread pt = { .tstate = ts[i].tstate };
		uint32_t key;

		if (mapped && !u64map_get(&ns_to_host, ts[i].native_tid, &host))
			continue;
		key = (uint32_t)host;
		u64map_put(&now, host, ts[i].tstate);
		py_name_thread(td, key, ts[i].tstate, ts[i].native_tid);
		if ((u64map_get(&td->pythreads, host, &old) && old == ts[i].tstate) || fd < 0)
			continue;
		bpf_map_update_elem(fd, &key, &pt, BPF_ANY);
	}
	/* threads that are gone, or no longer Python's */
	while (u64map_next(&td->pythreads, &pos, &k, &v)) {
		uint32_t key = (uint32_t)k;

		if (u64map_get(&now, k, NULL))
			continue;
		if (torn)
			u64map_put(&now, k, v);
		else if (fd >= 0)
			bpf_map_delete_elem(fd, &key);
	}
	u64map_clear(&td->pythreads);
	td->pythreads = now;
	u64map_clear(&ns_to_host);
}


/* ---- the task iterator's records (ebpf_tasks.c loads it) --------------------------- */

#define TASK_FIXED (sizeof(struct task_dump) - sizeof(struct ebpf_ucopy))

bool ebpf_task_settled(const struct task_dump *d)
{
	return !d->on_cpu;
}

#define TASKS_READ_MAX (64u << 20)

int ebpf_tasks_each(struct ebpf *e, int (*fn)(struct ebpf *e, struct ebpf_tdata *td,
					       struct task_dump *d, void *arg), void *arg)
{
	size_t cap = 2 * sizeof(struct task_dump), len = 0, off;
	char *buf, *nb;
	int fd, r = 0;

	if (!e->tasks_link)
		return -ENOTSUP;
	/* the iterator's "now" is this thread's run time as last accounted: a yield accounts
	 * it up to now */
	sched_yield();
	fd = bpf_iter_create(bpf_link__fd(e->tasks_link));
	if (fd < 0)
		return -errno;
	buf = malloc(cap);
	if (!buf) {
		close(fd);
		return -ENOMEM;
	}
	for (;;) {
		ssize_t n;

		/* every thread read before any is looked at (a snapshot of one moment, not one
		 * stretched by the symbolizing of the first ones), up to TASKS_READ_MAX */
		if (cap - len < sizeof(struct task_dump) && cap < TASKS_READ_MAX) {
			nb = realloc(buf, cap * 2);
			if (!nb) {
				r = -ENOMEM;
				break;
			}
			buf = nb;
			cap *= 2;
		}
		n = read(fd, buf + len, cap - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			r = -errno;
			break;
		}
		len += (size_t)n;
		if (n > 0 && cap < TASKS_READ_MAX)
			continue;
		/* whole records from the front; a partial one waits for the next read */
		for (off = 0; len - off >= TASK_FIXED + EBPF_UCOPY_HDR;) {
			struct task_dump *d = (void *)(buf + off);
			size_t rec;
			struct ebpf_tdata *td;

			if (d->hdr.type != EBPF_REC_TASK || d->u.bytes > EBPF_UCOPY_MAX) {
				e->bad_records++;
				r = -EBADMSG;
				goto out;
			}
			rec = TASK_FIXED + EBPF_UCOPY_HDR + d->u.bytes;
			if (len - off < rec)
				break;
			td = ebpf_tdata_of(e, d->hdr.tgid);
			if (td && td->nown && ebpf_tid_is_ours(td, d->hdr.tid)) {
				/* aiprof's own thread: not one of the target's */
			} else if (td) {
				r = fn(e, td, d, arg);
				if (r < 0)
					goto out;
			} else {
				e->foreign++;
			}
			off += rec;
		}
		memmove(buf, buf + off, len - off);
		len -= off;
		if (n == 0)
			break;
	}
out:
	free(buf);
	close(fd);
	return r;
}

#endif
