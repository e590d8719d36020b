/* SPDX-License-Identifier: MIT */
/*
 * Safe points judged from the whole stack (safepoint.h says what passes and why). The
 * stack is the target's, read live through /proc/PID/mem, and walked with the unwinder the
 * collectors use (target/unwind.h): nothing the target put there can make the walk loop or
 * read beyond what it asks for, and a walk that does not reach the root is "not safe".
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "elfsym.h"
#include "procmaps.h"
#include "procsyms.h"
#include "u64map.h"
#include "safepoint.h"

/*
 * Public C library functions that, while blocked in their system call, hold no state of
 * the C library that a remote mmap/mprotect/pthread_create needs: they are called by the
 * program, wait, and return. (Their insides may be several frames deep: pthread_cond_wait
 * waits in a futex helper; that is still pthread_cond_wait.) Names that a given libc does
 * not have are skipped.
 */
static const char *const leaf_functions[] = {
	/* I/O and sockets */
	"read", "write", "readv", "writev", "pread", "pread64", "pwrite", "pwrite64",
	"preadv", "preadv64", "pwritev", "pwritev64", "recv", "recvfrom", "recvmsg",
	"recvmmsg", "send", "sendto", "sendmsg", "sendmmsg", "accept", "accept4", "connect",
	"open", "open64", "openat", "openat64", "close", "fsync", "fdatasync", "lseek",
	"lseek64", "fstat", "fstat64", "fstatat", "fstatat64", "__fxstat64", "__fxstatat64",
	"stat", "stat64", "lstat", "lstat64", "__xstat64", "__lxstat64", "statx",
	"ioctl", "flock", "lockf", "lockf64", "sync_file_range", "msgrcv", "msgsnd",
	/* waiting */
	"poll", "ppoll", "select", "pselect", "epoll_wait", "epoll_pwait", "epoll_pwait2",
	"nanosleep", "clock_nanosleep", "usleep", "sleep", "pause", "sigsuspend",
	"sigtimedwait", "sigwaitinfo", "sigwait", "wait", "waitpid", "wait3", "wait4",
	"waitid", "sched_yield", "syscall",
	/* threads: these wait with only the program's own mutex (or none) in hand */
	"pthread_cond_wait", "pthread_cond_timedwait", "pthread_cond_clockwait",
	"pthread_mutex_lock", "pthread_mutex_timedlock", "pthread_mutex_clocklock",
	"pthread_rwlock_rdlock", "pthread_rwlock_wrlock", "pthread_rwlock_timedrdlock",
	"pthread_rwlock_timedwrlock", "pthread_rwlock_clockrdlock", "pthread_rwlock_clockwrlock",
	"pthread_join", "pthread_timedjoin_np", "pthread_clockjoin_np", "pthread_barrier_wait",
	"sem_wait", "sem_timedwait", "sem_clockwait", "__new_sem_wait",
};

static const char *const libc_globs[] = {
	"libc.so.6", "libc.so", "libc-2.*.so", "libc.musl-*", "ld-musl-*",
	"libpthread.so.0", "libpthread-*.so", "libdl.so.2", "libdl-*.so",
};
static const char *const loader_globs[] = { "ld-linux*.so*", "ld-2.*.so" };

struct sp_range {
	uint64_t start, end;
};

struct sp_ranges {
	struct sp_range *v;
	size_t n, cap;
};

struct safepoint {
	pid_t pid;
	int mem_fd;
	struct proc_syms *ps;
	struct unwind_tables *uw;
	struct sp_ranges libc, loader, leaf;
	uint64_t pcs[SAFEPOINT_MAX_FRAMES];
	struct sp_frame frames[SAFEPOINT_MAX_FRAMES];
	/* the stack from %rsp up, read in one go while the thread is stopped: most of the
	 * walk's reads come from here instead of a pread each */
	uint8_t stack[SAFEPOINT_STACK_COPY];
	uint64_t stack_at, stack_len;
	/* modules whose unwind tables are read (keys): reading them is slow (libtorch's
	 * .eh_frame is tens of MB), so never while a thread is stopped. A walk that meets a
	 * module not read yet stops there; the module's pc waits in pending for
	 * safepoint__warm(), called once the thread runs again. */
	struct u64map warm;
	uint64_t pending[32];
	size_t npending;
	bool warming;
};

static int ranges_add(struct sp_ranges *r, uint64_t start, uint64_t end)
{
	if (r->n == r->cap) {
		size_t ncap = r->cap ? r->cap * 2 : 16;
		struct sp_range *nv = reallocarray(r->v, ncap, sizeof(*nv));

		if (!nv)
			return -ENOMEM;
		r->v = nv;
		r->cap = ncap;
	}
	r->v[r->n++] = (struct sp_range){ start, end };
	return 0;
}

static bool ranges_have(const struct sp_ranges *r, uint64_t a)
{
	for (size_t i = 0; i < r->n; i++)
		if (a >= r->v[i].start && a < r->v[i].end)
			return true;
	return false;
}

static bool matches_any(const char *path, const char *const *globs, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (maps_path__matches(path, globs[i]))
			return true;
	return false;
}

/* The leaf functions that one libc-class module defines, as runtime ranges. */
static int add_leaf_functions(struct safepoint *sp, const struct maps *m,
			      const struct maps_module *mod)
{
	struct elf_file *elf = NULL;
	uint64_t bias = 0, key;

	for (size_t i = mod->first; i <= mod->last && !elf; i++)
		if ((m->v[i].prot & PROT_EXEC) &&
		    proc_syms__code(sp->ps, m->v[i].start, &elf, &bias, &key) < 0)
			elf = NULL;
	if (!elf)
		return 0;       /* unreadable: none of its functions is a safe leaf */
	for (size_t i = 0; i < sizeof(leaf_functions) / sizeof(leaf_functions[0]); i++) {
		uint64_t vaddr, size;
		int r = elf_file__find_symbol(elf, leaf_functions[i], &vaddr, &size);

		if (r != 0 || !size)
			continue;       /* absent, or an IFUNC resolver: not the code that runs */
		r = ranges_add(&sp->leaf, bias + vaddr, bias + vaddr + size);
		if (r < 0)
			return r;
	}
	return 0;
}

static int classify_modules(struct safepoint *sp)
{
	const struct maps *m = proc_syms__maps(sp->ps);
	struct maps_module mod;
	size_t pos = 0;
	int r;

	sp->libc.n = sp->loader.n = sp->leaf.n = 0;
	while (maps__next_module(m, &pos, &mod) == 0) {
		bool libc = matches_any(mod.path, libc_globs, sizeof(libc_globs) / sizeof(libc_globs[0]));
		bool loader = !libc && matches_any(mod.path, loader_globs,
						   sizeof(loader_globs) / sizeof(loader_globs[0]));

		if (libc) {
			r = ranges_add(&sp->libc, mod.start, mod.end);
			if (r >= 0)
				r = add_leaf_functions(sp, m, &mod);
		} else if (loader) {
			r = ranges_add(&sp->loader, mod.start, mod.end);
		} else {
			r = 0;
		}
		if (r < 0)
			return r;
	}
	return 0;
}

static int mem_code(void *arg, uint64_t pc, struct unwind_code *ret);
int safepoint__warm(struct safepoint *sp);

/*
 * Before any thread is stopped: every executable module's ELF opened, and the unwind tables
 * of those on every stack (the C library and the loader, whose frames start each thread,
 * and the executable) read, so that a stop costs the walk alone.
 */
static int prepare_modules(struct safepoint *sp)
{
	const struct maps *m = proc_syms__maps(sp->ps);
	bool exe_seen = false;

	sp->npending = 0;
	for (size_t i = 0; i < m->n; i++) {
		const struct maps_entry *e = &m->v[i];
		struct elf_file *elf;
		uint64_t bias, key;

		if (!(e->prot & PROT_EXEC) || !maps_entry__is_file(e) ||
		    proc_syms__code(sp->ps, e->start, &elf, &bias, &key) < 0)
			continue;
		if ((!exe_seen || ranges_have(&sp->libc, e->start) || ranges_have(&sp->loader, e->start)) &&
		    sp->npending < sizeof(sp->pending) / sizeof(sp->pending[0]))
			sp->pending[sp->npending++] = e->start;
		exe_seen = true;
	}
	return safepoint__warm(sp) < 0 ? -ENOMEM : 0;
}

int safepoint__new(pid_t pid, int mem_fd, struct safepoint **ret)
{
	struct safepoint *sp = calloc(1, sizeof(*sp));
	int r;

	if (!sp)
		return -ENOMEM;
	sp->pid = pid;
	sp->mem_fd = mem_fd;
	r = proc_syms__new(pid, &sp->ps);
	if (r >= 0)
		r = unwind_tables__new(0, &sp->uw);
	if (r >= 0)
		r = classify_modules(sp);
	if (r >= 0)
		r = prepare_modules(sp);
	if (r < 0) {
		safepoint__free(sp);
		return r;
	}
	*ret = sp;
	return 0;
}

void safepoint__free(struct safepoint *sp)
{
	if (!sp)
		return;
	unwind_tables__free(sp->uw);
	u64map_clear(&sp->warm);
	proc_syms__free(sp->ps);
	free(sp->libc.v);
	free(sp->loader.v);
	free(sp->leaf.v);
	free(sp);
}

int safepoint__refresh(struct safepoint *sp)
{
	int r = proc_syms__refresh(sp->ps);

	return r < 0 ? r : classify_modules(sp);
}

bool safepoint__in_libc(const struct safepoint *sp, uint64_t addr)
{
	return ranges_have(&sp->libc, addr) || ranges_have(&sp->loader, addr);
}

/* ---- the verdict ------------------------------------------------------------------ */

static const char *code_name(enum sp_code c)
{
	switch (c) {
	case SP_LIBC:   return "a C library function (a callback or a handler under it)";
	case SP_LOADER: return "the dynamic loader (dlopen or a constructor under it)";
	case SP_OTHER:  return "code with no file behind it";
	default:        return "the program";
	}
}

bool safepoint_verdict(const struct sp_frame *f, size_t n, enum unwind_end end,
		       size_t fp_frames, bool in_syscall, bool syscall_ok, char *why,
		       size_t whylen)
{
	size_t i = 0, j, base = 0;

	if (n == 0 || end != UNWIND_END_ROOT) {
		snprintf(why, whylen, "its stack does not walk to its root (%s)",
			 n == 0 ? "no frame" : unwind_end_name(end));
		return false;
	}
	if (fp_frames) {
		snprintf(why, whylen, "its stack walks only with frame-pointer guesses");
		return false;
	}
	if (in_syscall && !syscall_ok) {
		snprintf(why, whylen, "blocked in a system call that may hold C library state");
		return false;
	}
	switch (f[0].code) {
	case SP_LIBC:
		if (!in_syscall) {
			snprintf(why, whylen, "running C library code");
			return false;
		}
		while (i < n && f[i].code == SP_LIBC)
			i++;
		if (!f[i - 1].leaf_ok) {
			snprintf(why, whylen, "blocked inside a C library function that may hold "
				 "its state");
			return false;
		}
		break;
	case SP_LOADER:
		snprintf(why, whylen, "inside the dynamic loader");
		return false;
	case SP_OTHER:
		snprintf(why, whylen, "in code with no file behind it (vDSO or JIT)");
		return false;
	default:
		break;
	}
	/* the start frames: libc's, with at most the executable's _start outside them */
	j = n;
	if (j > i && f[j - 1].code == SP_APP)
		j--;
	while (j > i && f[j - 1].code == SP_LIBC) {
		j--;
		base++;
	}
	if (!base) {
		snprintf(why, whylen, "no C library start frame under it (the C library has not "
			 "started yet)");
		return false;
	}
	for (size_t k = i; k < j; k++)
		if (f[k].code != SP_APP) {
			snprintf(why, whylen, "%s is on its stack (frame %zu of %zu)",
				 code_name(f[k].code), k, n);
			return false;
		}
	why[0] = 0;
	return true;
}

/* ---- walking the live stack --------------------------------------------------------- */

static bool mem_read(void *arg, uint64_t addr, uint64_t *ret)
{
	const struct safepoint *sp = arg;

	if (addr >= sp->stack_at && addr - sp->stack_at <= sp->stack_len &&
	    sp->stack_len - (addr - sp->stack_at) >= sizeof(*ret)) {
		memcpy(ret, sp->stack + (addr - sp->stack_at), sizeof(*ret));
		return true;
	}
	return pread(sp->mem_fd, ret, sizeof(*ret), (off_t)addr) == (ssize_t)sizeof(*ret);
}

/* As much of the stack from rsp up as the copy holds; a read that runs past the stack's
 * mapping gets what the kernel gives (a short count), or the rest of rsp's page. */
static void copy_stack(struct safepoint *sp, uint64_t rsp)
{
	uint64_t at = rsp & ~7ULL;
	ssize_t n = pread(sp->mem_fd, sp->stack, sizeof(sp->stack), (off_t)at);

	if (n <= 0)
		n = pread(sp->mem_fd, sp->stack, 4096 - (at & 4095), (off_t)at);
	sp->stack_at = at;
	sp->stack_len = n > 0 ? (uint64_t)n : 0;
}

static int mem_code(void *arg, uint64_t pc, struct unwind_code *ret)
{
	struct safepoint *sp = arg;
	struct elf_file *elf;
	uint64_t bias, key;
	int r = proc_syms__code(sp->ps, pc, &elf, &bias, &key);

	if (r < 0)
		return r;
	if (!sp->warming && !u64map_get(&sp->warm, key, NULL)) {
		if (sp->npending < sizeof(sp->pending) / sizeof(sp->pending[0]))
			sp->pending[sp->npending++] = pc;
		return -EAGAIN;         /* not while the thread is stopped */
	}
	*ret = (struct unwind_code){ .elf = elf_file__libelf(elf), .fd = elf_file__fd(elf),
				     .key = key, .bias = bias };
	return 0;
}

static enum sp_code code_of(const struct safepoint *sp, uint64_t pc)
{
	const struct maps_entry *e = maps__find_addr(proc_syms__maps(sp->ps), pc);

	if (ranges_have(&sp->libc, pc))
		return SP_LIBC;
	if (ranges_have(&sp->loader, pc))
		return SP_LOADER;
	if (!e || !maps_entry__is_file(e))
		return SP_OTHER;
	return SP_APP;
}

/*
 * The walk stopped at a module not read yet: the others it would meet are most likely
 * those the stack copy's words point into (return addresses), so they are read in the same
 * go and the next look gets to the root.
 */
static void pending_from_stack(struct safepoint *sp)
{
	const struct maps *m = proc_syms__maps(sp->ps);

	/* nothing is opened here (the thread is stopped): mappings only; safepoint__warm()
	 * finds the modules and skips those read already */
	for (uint64_t off = 0; off + 8 <= sp->stack_len &&
	     sp->npending < sizeof(sp->pending) / sizeof(sp->pending[0]); off += 8) {
		const struct maps_entry *e;
		uint64_t w;
		bool dup = false;

		memcpy(&w, sp->stack + off, sizeof(w));
		e = w > 4096 ? maps__find_addr(m, w) : NULL;
		if (!e || !(e->prot & PROT_EXEC) || !maps_entry__is_file(e))
			continue;
		for (size_t i = 0; i < sp->npending && !dup; i++)
			dup = maps__find_addr(m, sp->pending[i]) == e;
		if (!dup)
			sp->pending[sp->npending++] = w - 1;
	}
}

bool safepoint__judge(struct safepoint *sp, const struct unwind_regs *regs, bool in_syscall,
		      bool syscall_ok, char *where, size_t wherelen)
{
	struct unwind_target tgt = { .read = mem_read, .code = mem_code, .arg = sp };
	struct unwind_result res;
	size_t len = strlen(where);
	char why[160];
	bool ok;

	sp->npending = 0;
	copy_stack(sp, regs->r[UW_RSP]);
	if (unwind_stack(sp->uw, &tgt, regs, sp->pcs, SAFEPOINT_MAX_FRAMES, &res) < 0) {
		snprintf(where + len, wherelen - len, ": out of memory walking its stack");
		return false;
	}
	if (sp->npending) {
		pending_from_stack(sp);
		snprintf(where + len, wherelen - len, ": its stack runs through a module whose "
			 "unwind tables are read first, with the thread running");
		return false;
	}
	for (size_t i = 0; i < res.n; i++) {
		uint64_t pc = i ? sp->pcs[i] - 1 : sp->pcs[i];

		sp->frames[i].code = code_of(sp, pc);
		sp->frames[i].leaf_ok = sp->frames[i].code == SP_LIBC && ranges_have(&sp->leaf, pc);
	}
	ok = safepoint_verdict(sp->frames, res.n, res.end, res.fp_frames, in_syscall,
			       syscall_ok, why, sizeof(why));
	if (ok)
		snprintf(where + len, wherelen - len, ", %zu frames", res.n);
	else
		snprintf(where + len, wherelen - len, ": %s", why);
	return ok;
}

static bool no_read(void *arg, uint64_t addr, uint64_t *ret)
{
	(void)arg;
	(void)addr;
	(void)ret;
	return false;
}

int safepoint__warm(struct safepoint *sp)
{
	struct unwind_target tgt = { .read = no_read, .code = mem_code, .arg = sp };
	size_t n = sp->npending, warmed = 0;
	int r = 0;

	sp->warming = true;
	for (size_t i = 0; i < n && r >= 0; i++) {
		/* a one-frame walk at the module's pc: the unwinder reads its tables (the step
		 * after that fails, there being no stack to read) */
		struct unwind_regs regs = { .valid = 1u << UW_RIP | 1u << UW_RSP };
		struct unwind_result res;
		struct elf_file *elf;
		uint64_t pc1, bias, key;

		if (proc_syms__code(sp->ps, sp->pending[i], &elf, &bias, &key) < 0 ||
		    u64map_get(&sp->warm, key, NULL))
			continue;
		regs.r[UW_RIP] = sp->pending[i];
		regs.r[UW_RSP] = 8;
		r = unwind_stack(sp->uw, &tgt, &regs, &pc1, 1, &res);
		if (r >= 0)
			r = u64map_put(&sp->warm, key, 1);
		warmed += r >= 0;
	}
	sp->warming = false;
	sp->npending = 0;
	return r < 0 ? r : (int)warmed;
}
