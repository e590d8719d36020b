/* SPDX-License-Identifier: MIT */
/*
 * ptrace injection of libaiprof.so into a running x86_64 process.
 *
 * Strategy, and why it is safe for multi-threaded targets:
 *
 *  1. Only ONE thread of the target is ever stopped (PTRACE_SEIZE + PTRACE_INTERRUPT);
 *     every other thread keeps running, so locks they hold are released as usual.
 *  2. The stopped thread must not be inside the state the code we make it run needs
 *     (malloc arenas and the thread's tcache, the stack cache, the loader's TLS tables)
 *     nor half-way through any other libc function. We only proceed at a *safe point*,
 *     judged from the thread's whole stack walked by CFI (safepoint.h): blocked in an
 *     allow-listed syscall inside a public libc function that holds no libc state there
 *     (read, poll, pthread_cond_wait, ...), or running the program's own code; no libc,
 *     loader or signal frame between there and the thread's start frames; and a walk
 *     that reaches the root. Otherwise we let it run for a millisecond and look again.
 *     (The syscall alone is not enough: the loader blocks in openat and read while it
 *     maps a library, and the program's code runs under dlopen as constructors. Before
 *     this, a table of libc's mappings that silently filled up with libpthreadpool's took
 *     a thread inside malloc for "application code": 1 in 6 attaches during `import
 *     torch` aborted the process in sysmalloc.)
 *  3. At the safe point the hijacked thread only makes short calls: mmap + mprotect of
 *     two pages, memfd_create and pthread_create. The dlopen itself —
 *     slow, and running our constructors — happens on the NEW thread, so the target's
 *     own thread is stopped for well under a millisecond. The new thread runs a tiny
 *     position-independent stub (below) that dlopens /proc/self/fd/N, closes the memfd,
 *     reports through the data page, waits for our acknowledgement and finally
 *     tail-calls munmap on its own two pages, so nothing is left behind.
 *  4. General-purpose and extended (AVX) register state are saved and restored, so the
 *     interrupted code — including an interrupted syscall, which restarts — continues
 *     exactly where it was.
 *  5. The thread never depends on the injector to get home. Every remote call returns
 *     into a small *return path* (`cave` below) written into the unused tail of an
 *     executable page of one of the target's own modules, whose data — the thread's
 *     registers as they were, its AVX state, its scheduling policy — sits on the thread's
 *     stack below the red zone. The return path first sends the thread a signal whose
 *     disposition is to be ignored (SIGURG, SIGWINCH, SIGCHLD, or one the process set to
 *     SIG_IGN; not blocked by the thread): for a traced thread that is a stop where the
 *     injector reads the result, suppresses the signal and sets up the next call; without
 *     a tracer the kernel drops it. (Where every such signal is caught or blocked, the
 *     marker is the same tgkill with signal 0, and calls run under PTRACE_SYSCALL, which
 *     stops at each of their syscalls: slower, as safe.) Past the marker, the path
 *     restores everything and jumps back to where the thread was; the last call's return
 *     takes that way too. So if the injector vanishes at any instant — SIGKILL, OOM, a
 *     deleted pod — the thread finishes what it was doing and goes home: a tracer's exit
 *     detaches its tracees (we never set PTRACE_O_EXITKILL, which would kill them
 *     instead), a thread stopped with a call's registers runs that call to its end, and
 *     one stopped at the marker runs the rest of the path. A call that outlives its timeout is not abandoned with
 *     the thread inside it: the thread is let go and finishes the call, then the path.
 *     Other signals that arrive during a call are passed on, so the target's handlers run
 *     as they would have.
 *  6. Each remote call is a round trip through the scheduler; on a node whose cores are
 *     all busy (data loaders!) every wake-up can wait milliseconds. While the thread is
 *     running our calls, it and the injector run SCHED_FIFO; the thread's policy is put
 *     back as each call returns (and by the return path itself, if the injector is gone),
 *     and pthread_create runs unboosted (the loader thread would inherit it). Where
 *     real-time scheduling is not allowed (a cgroup without RT budget) this is skipped.
 *
 * If the target's libc has no pthread_create (glibc < 2.34 without libpthread loaded)
 * the dlopen runs on the hijacked thread itself (INJECT_PTRACE_DIRECT): still at a safe
 * point, only the stop is longer.
 */
#include <ctype.h>
#include <dirent.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/ptrace.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/user.h>
#include <sys/wait.h>
#include <unistd.h>
#include <sched.h>

#include "event.h"
#include "procmaps.h"
#include "procsyms.h"
#include "readfile.h"
#include "timeutil.h"
#include "target/target.h"
#include "inject.h"
#include "cave.h"
#include "safepoint.h"
#include "seccomp.h"
#include "session.h"

#ifndef __x86_64__
#error "the injector supports x86_64 targets only for now"
#endif

#define INJECT_LIB_MAX (1u << 30)  /* a library larger than this is not libaiprof.so */

/* ---- the worker stub, copied into the target --------------------------------------- */

/* Offsets into the data page the stub reads and writes (struct stub_data below). */
#define SD_DLOPEN   0
#define SD_DLERROR  8
#define SD_CLOSE    16
#define SD_MUNMAP   24
#define SD_MAPBASE  32
#define SD_MAPLEN   40
#define SD_HANDLE   48
#define SD_ERRPTR   56
#define SD_FD       64
#define SD_DONE     68
#define SD_ACK      72
#define SD_SPIN     76
#define SD_TS       80
#define SD_THREAD   96
#define SD_PATH     104
#define SD_NAME     168
#define SD_SELF     200
#define SD_DETACH   208
#define SD_TID      216

#define STR_(x) #x
#define STR(x) STR_(x)

struct stub_data {
	uint64_t dlopen_fn, dlerror_fn, close_fn, munmap_fn;
	uint64_t map_base, map_len;
	uint64_t handle, errptr;
	int32_t fd;
	uint32_t done, ack, spin;
	struct { int64_t sec, nsec; } ts;
	uint64_t thread;
	char path[64];
	char name[32];
	uint64_t self_fn, detach_fn;
	uint32_t tid, pad;          /* the worker's gettid(), in the target's namespace */
};
_Static_assert(offsetof(struct stub_data, dlopen_fn) == SD_DLOPEN, "stub layout");
_Static_assert(offsetof(struct stub_data, dlerror_fn) == SD_DLERROR, "stub layout");
_Static_assert(offsetof(struct stub_data, close_fn) == SD_CLOSE, "stub layout");
_Static_assert(offsetof(struct stub_data, munmap_fn) == SD_MUNMAP, "stub layout");
_Static_assert(offsetof(struct stub_data, map_base) == SD_MAPBASE, "stub layout");
_Static_assert(offsetof(struct stub_data, map_len) == SD_MAPLEN, "stub layout");
_Static_assert(offsetof(struct stub_data, handle) == SD_HANDLE, "stub layout");
_Static_assert(offsetof(struct stub_data, errptr) == SD_ERRPTR, "stub layout");
_Static_assert(offsetof(struct stub_data, fd) == SD_FD, "stub layout");
_Static_assert(offsetof(struct stub_data, done) == SD_DONE, "stub layout");
_Static_assert(offsetof(struct stub_data, ack) == SD_ACK, "stub layout");
_Static_assert(offsetof(struct stub_data, spin) == SD_SPIN, "stub layout");
_Static_assert(offsetof(struct stub_data, ts) == SD_TS, "stub layout");
_Static_assert(offsetof(struct stub_data, thread) == SD_THREAD, "stub layout");
_Static_assert(offsetof(struct stub_data, path) == SD_PATH, "stub layout");
_Static_assert(offsetof(struct stub_data, name) == SD_NAME, "stub layout");
_Static_assert(offsetof(struct stub_data, self_fn) == SD_SELF, "stub layout");
_Static_assert(offsetof(struct stub_data, detach_fn) == SD_DETACH, "stub layout");
_Static_assert(offsetof(struct stub_data, tid) == SD_TID, "stub layout");

/*
 * void *worker(struct stub_data *d) — runs on the thread pthread_create made. Only
 * %rbx-relative addressing, so it works wherever it is copied. Kept in .rodata: the
 * injector never executes it.
 */
__asm__(
	".pushsection .rodata\n"
	".globl aiprof_worker_stub\n"
	".globl aiprof_worker_stub_end\n"
	"aiprof_worker_stub:\n"
	"	push %rbx\n"
	"	mov %rdi, %rbx\n"
	"	mov $186, %eax\n"                          /* SYS_gettid: who we are, for the */
	"	syscall\n"                                 /* injector to leave out of the data */
	"	mov %eax, " STR(SD_TID) "(%rbx)\n"
	"	call *" STR(SD_SELF) "(%rbx)\n"            /* pthread_detach(pthread_self()) */
	"	mov %rax, %rdi\n"
	"	call *" STR(SD_DETACH) "(%rbx)\n"
	"	lea " STR(SD_PATH) "(%rbx), %rdi\n"
	"	mov $2, %esi\n"                             /* RTLD_NOW */
	"	call *" STR(SD_DLOPEN) "(%rbx)\n"
	"	mov %rax, " STR(SD_HANDLE) "(%rbx)\n"
	"	test %rax, %rax\n"
	"	jnz 1f\n"
	"	mov " STR(SD_DLERROR) "(%rbx), %rax\n"
	"	test %rax, %rax\n"
	"	jz 1f\n"
	"	call *%rax\n"
	"	mov %rax, " STR(SD_ERRPTR) "(%rbx)\n"
	"1:\n"
	"	mov " STR(SD_FD) "(%rbx), %edi\n"
	"	call *" STR(SD_CLOSE) "(%rbx)\n"
	"	movl $1, " STR(SD_DONE) "(%rbx)\n"
	"2:\n"                                          /* wait for the injector's ack */
	"	cmpl $0, " STR(SD_ACK) "(%rbx)\n"
	"	jne 3f\n"
	"	lea " STR(SD_TS) "(%rbx), %rdi\n"
	"	xor %esi, %esi\n"
	"	mov $35, %eax\n"                            /* SYS_nanosleep */
	"	syscall\n"
	"	decl " STR(SD_SPIN) "(%rbx)\n"
	"	jnz 2b\n"
	"3:\n"
	"	mov " STR(SD_MAPBASE) "(%rbx), %rdi\n"
	"	mov " STR(SD_MAPLEN) "(%rbx), %rsi\n"
	"	mov " STR(SD_MUNMAP) "(%rbx), %rax\n"
	"	pop %rbx\n"
	"	jmp *%rax\n"                                /* munmap returns to start_thread */
	"aiprof_worker_stub_end:\n"
	".popsection\n");

extern const unsigned char aiprof_worker_stub[], aiprof_worker_stub_end[];

/* ---- the return path, copied into the target ------------------------------------------ */

/*
 * Where a remote call returns to (see 5. above). Position independent and addressed from
 * %rsp only, so every injection writes the same bytes, wherever they go. On entry %rsp is
 * E, 64-byte aligned, and the data sits above it at the CV_* offsets; the thread's resume
 * %rip is at its resume %rsp - CV_RIP_BELOW, under the red zone.
 */
#define CV_REGS      64      /* struct cave_regs */
#define CV_FLAGS     208     /* CVF_* */
#define CV_SCHED     216     /* struct kernel_sched_attr, 56 bytes */
#define CV_RFBM      272     /* the components xrstor restores (edx:eax) */
#define CV_TGID      280     /* the marker's tgkill(tgid, tid, sig) */
#define CV_TID       284
#define CV_SIG       288
#define CV_XSAVE     320     /* the XSAVE image from PTRACE_GETREGSET, 64-byte aligned */
#define CV_RIP_BELOW 136     /* resume rip at resume rsp - 136: below the 128-byte red zone */
#define CVF_XSTATE   1
#define CVF_SCHED    2
#define CV_MARKER_NR 234     /* SYS_tgkill */

struct cave_regs {           /* the thread as it resumes, in this order */
	uint64_t rax, rbx, rcx, rdx, rsi, rdi, rbp, r8, r9, r10, r11, r12, r13, r14, r15;
	uint64_t rsp, rflags, rip;
};
_Static_assert(CV_REGS + sizeof(struct cave_regs) <= CV_FLAGS, "cave layout");

#define CR(field) STR(CV_REGS) "+" STR(field) "(%rsp)"
#define CR_RAX    0
#define CR_RBX    8
#define CR_RCX    16
#define CR_RDX    24
#define CR_RSI    32
#define CR_RDI    40
#define CR_RBP    48
#define CR_R8     56
#define CR_R9     64
#define CR_R10    72
#define CR_R11    80
#define CR_R12    88
#define CR_R13    96
#define CR_R14    104
#define CR_R15    112
#define CR_RSP    120
#define CR_RFLAGS 128
_Static_assert(offsetof(struct cave_regs, r15) == CR_R15, "cave layout");
_Static_assert(offsetof(struct cave_regs, rflags) == CR_RFLAGS, "cave layout");

__asm__(
	".pushsection .rodata\n"
	".globl aiprof_cave\n"
	".globl aiprof_cave_marker\n"
	".globl aiprof_cave_end\n"
	"aiprof_cave:\n"
	"	mov %rax, %r10\n"                          /* the call's result, for the injector */
	"	mov " STR(CV_TGID) "(%rsp), %edi\n"
	"	mov " STR(CV_TID) "(%rsp), %esi\n"
	"	mov " STR(CV_SIG) "(%rsp), %edx\n"
	"	mov $" STR(CV_MARKER_NR) ", %eax\n"
	"	syscall\n"                                 /* the marker: the injector stops here */
	"aiprof_cave_marker:\n"
	"	testq $" STR(CVF_SCHED) ", " STR(CV_FLAGS) "(%rsp)\n"
	"	jz 1f\n"
	"	mov $314, %eax\n"                          /* sched_setattr(0, &attr, 0) */
	"	xor %edi, %edi\n"
	"	lea " STR(CV_SCHED) "(%rsp), %rsi\n"
	"	xor %edx, %edx\n"
	"	syscall\n"
	"1:	testq $" STR(CVF_XSTATE) ", " STR(CV_FLAGS) "(%rsp)\n"
	"	jz 2f\n"
	"	mov " STR(CV_RFBM) "(%rsp), %eax\n"
	"	mov " STR(CV_RFBM) "+4(%rsp), %edx\n"
	"	xrstor " STR(CV_XSAVE) "(%rsp)\n"
	"2:	pushq " CR(CR_RFLAGS) "\n"                 /* the address is taken before the push */
	"	popfq\n"
	"	mov " CR(CR_RAX) ", %rax\n"
	"	mov " CR(CR_RBX) ", %rbx\n"
	"	mov " CR(CR_RCX) ", %rcx\n"
	"	mov " CR(CR_RDX) ", %rdx\n"
	"	mov " CR(CR_RSI) ", %rsi\n"
	"	mov " CR(CR_RDI) ", %rdi\n"
	"	mov " CR(CR_RBP) ", %rbp\n"
	"	mov " CR(CR_R8) ", %r8\n"
	"	mov " CR(CR_R9) ", %r9\n"
	"	mov " CR(CR_R10) ", %r10\n"
	"	mov " CR(CR_R11) ", %r11\n"
	"	mov " CR(CR_R12) ", %r12\n"
	"	mov " CR(CR_R13) ", %r13\n"
	"	mov " CR(CR_R14) ", %r14\n"
	"	mov " CR(CR_R15) ", %r15\n"
	"	mov " CR(CR_RSP) ", %rsp\n"                /* last: nothing after it reads the data */
	"	jmp *-" STR(CV_RIP_BELOW) "(%rsp)\n"
	"aiprof_cave_end:\n"
	".popsection\n");

extern const unsigned char aiprof_cave[], aiprof_cave_marker[], aiprof_cave_end[];

#define STUB_PAGE   4096UL
#define STUB_LEN    (2 * STUB_PAGE)   /* code page, then data page */

/* ---- scheduling boost while stopped -------------------------------------------------- */

/* the kernel's struct sched_attr (sched_setattr(2)); glibc 2.36 has no wrapper */
struct kernel_sched_attr {
	uint32_t size, sched_policy;
	uint64_t sched_flags;
	int32_t sched_nice;
	uint32_t sched_priority;
	uint64_t sched_runtime, sched_deadline, sched_period;
	uint32_t sched_util_min, sched_util_max;
};

struct sched_saved {
	bool valid;
	struct kernel_sched_attr attr;
};

static void sched_boost(pid_t tid, struct sched_saved *saved)
{
	struct kernel_sched_attr fifo = { .size = sizeof(fifo), .sched_policy = SCHED_FIFO,
				   .sched_priority = 1 };

	memset(saved, 0, sizeof(*saved));
	if (syscall(SYS_sched_getattr, tid, &saved->attr, sizeof(saved->attr), 0) < 0)
		return;
	if (saved->attr.sched_policy != SCHED_OTHER && saved->attr.sched_policy != SCHED_BATCH)
		return; /* already special: leave it alone */
	saved->valid = syscall(SYS_sched_setattr, tid, &fifo, 0) == 0;
}

static void sched_restore(pid_t tid, struct sched_saved *saved)
{
	if (saved->valid)
		(void)syscall(SYS_sched_setattr, tid, &saved->attr, 0);
	saved->valid = false;
}

/* ---- target description ------------------------------------------------------------- */

struct target_funcs {
	uint64_t dlopen, dlerror, close, munmap, mmap, mprotect, syscall;
	uint64_t pthread_create, pthread_detach, pthread_self;
	uint64_t rearm, rearm_error;   /* a dormant copy's aiprof_rearm(), 0 if none to wake */
	uint64_t restore_rt;           /* glibc's sigreturn trampoline, 0 if not found */
};

struct tracee {
	pid_t pid, tid;
	int mem_fd;                    /* /proc/PID/mem */
	struct user_regs_struct saved;
	uint8_t xstate[16384] __attribute__((aligned(64)));
	struct iovec xiov;
	bool have_xstate;
	uint64_t stopped_since;
	uint64_t stop_ns;
	uint64_t cave;                 /* the return path in the target, 0: none */
	uint64_t cave_rsp;             /* %rsp on entering it: the data is above */
	uint64_t call_timeout_ns;      /* 0: each call's own */
	int marker_sig;                /* the path's marker signal; 0: PTRACE_SYSCALL instead */
	int held_sig;                  /* the target's, stopped at the marker: passed on next */
	bool in_cave_call;             /* registers are a call's: going home is the path's job */
	bool boost_calls;              /* SCHED_FIFO while a call runs */
	bool released;                 /* let go inside a call: no more calls, no detach */
	const char *doing;             /* what it runs for us now, for a death's account */
	int died_status;               /* the thread ended under us: its wait(2) status, or -1 */
};

static int read_mem(struct tracee *t, uint64_t addr, void *buf, size_t len)
{
	ssize_t n = pread(t->mem_fd, buf, len, (off_t)addr);

	if (n < 0)
		return -errno;
	return (size_t)n == len ? 0 : -EIO;
}

static int write_mem(struct tracee *t, uint64_t addr, const void *buf, size_t len)
{
	ssize_t n = pwrite(t->mem_fd, buf, len, (off_t)addr);

	if (n < 0)
		return -errno;
	return (size_t)n == len ? 0 : -EIO;
}

bool inject_is_loaded(pid_t pid)
{
	struct maps *m = NULL;
	bool found = false;

	if (maps__read(pid, &m) < 0)
		return false;
	for (size_t i = 0; i < m->n && !found; i++) {
		const char *p = m->v[i].path;

		if (p && (strstr(p, "/memfd:" AIPROF_LIB_MEMFD) || strstr(p, "/libaiprof.so")))
			found = true;
	}
	maps__free(m);
	return found;
}

/*
 * The target's glibc version ("2.31"), from the banner its libc carries ("... release version
 * 2.31."), read through the target's own mapping of the file; "" when not found (musl, or
 * the file not readable). For error messages only.
 */
static void target_glibc_version(pid_t pid, char *out, size_t len)
{
	struct maps *m = NULL;

	out[0] = 0;
	if (maps__read(pid, &m) < 0)
		return;
	for (size_t i = 0; i < m->n && !out[0]; i++) {
		const struct maps_entry *e = &m->v[i];
		const char *base = e->path ? strrchr(e->path, '/') : NULL;
		char path[600];
		struct stat st;
		char *buf = NULL;
		ssize_t n = -1;
		int fd;

		base = base ? base + 1 : e->path;
		if (!base || e->offset != 0 || (strncmp(base, "libc.so", 7) && strncmp(base, "libc-", 5)))
			continue;
		/* the file the target mapped, whatever mount namespace it lives in (map_files
		 * wants CAP_SYS_ADMIN; its root, ptrace access, is the fallback). The path is the
		 * target's to change since it mapped it: never block on what is there now (a
		 * FIFO), never follow a last symlink, and read a regular file only. */
		snprintf(path, sizeof(path), "/proc/%d/map_files/%" PRIx64 "-%" PRIx64, pid, e->start,
			 e->end);
		fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
		if (fd < 0 && e->path[0] == '/' &&
		    (size_t)snprintf(path, sizeof(path), "/proc/%d/root%s", pid, e->path) < sizeof(path))
			fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW);
		if (fd < 0)
			continue;
		if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0 &&
		    st.st_size < (64 << 20) &&
		    (buf = malloc((size_t)st.st_size)))
			n = pread(fd, buf, (size_t)st.st_size, 0);
		close(fd);
		if (n > 0)
			cave_glibc_version(buf, (size_t)n, out, len);
		free(buf);
	}
	maps__free(m);
}

/*
 * The message for a library the target's loader refused: its reason (dlerror, when the
 * target has one), the target's glibc, and what to do.
 */
static void load_failed(pid_t pid, bool woken, const char *why, char *msg, size_t msglen)
{
	char ver[32];

	if (woken) {
		snprintf(msg, msglen, "waking the copy of libaiprof.so pid %d inherited across "
			 "fork() failed: %s. Profile it without the library: --method ebpf", pid,
			 why && why[0] ? why : "no reason given");
		return;
	}
	target_glibc_version(pid, ver, sizeof(ver));
	snprintf(msg, msglen, "dlopen in the target failed: %s (the target runs %s%s; libaiprof.so "
		 "needs glibc 2.17 or later). Profile it without loading anything into it: "
		 "--method ebpf", why && why[0] ? why : "its loader gave no reason",
		 ver[0] ? "glibc " : "a C library of unknown version", ver);
}

/* Finds the bytes of `mov $15,%rax; syscall` (x86_64 rt_sigreturn) in libc's text. */
static uint64_t find_restore_rt(pid_t pid, const struct maps *m)
{
	static const unsigned char pat[] = { 0x48, 0xc7, 0xc0, 0x0f, 0x00, 0x00, 0x00, 0x0f, 0x05 };
	char path[64];
	uint64_t found = 0;
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/mem", pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	for (size_t i = 0; i < m->n && !found; i++) {
		const struct maps_entry *e = &m->v[i];
		const char *base;
		unsigned char *buf;
		size_t len = e->end - e->start;

		if (!e->path || !(e->prot & PROT_EXEC))
			continue;
		base = strrchr(e->path, '/');
		base = base ? base + 1 : e->path;
		if (strncmp(base, "libc.so", 7) && strncmp(base, "libc-", 5) &&
		    strncmp(base, "ld-musl", 7))
			continue;
		if (len > (64u << 20))
			continue;
		buf = malloc(len);
		if (!buf)
			continue;
		if (pread(fd, buf, len, (off_t)e->start) == (ssize_t)len) {
			void *hit = memmem(buf, len, pat, sizeof(pat));

			if (hit)
				found = e->start + (uint64_t)((unsigned char *)hit - buf);
		}
		free(buf);
	}
	close(fd);
	return found;
}

static int resolve_funcs(pid_t pid, bool wake, struct target_funcs *f, char *msg,
			 size_t msglen)
{
	static const struct { const char *name; size_t off; bool required; } want[] = {
		{ "dlopen", offsetof(struct target_funcs, dlopen), false },
		{ "dlerror", offsetof(struct target_funcs, dlerror), false },
		{ "close", offsetof(struct target_funcs, close), true },
		{ "munmap", offsetof(struct target_funcs, munmap), true },
		{ "mmap", offsetof(struct target_funcs, mmap), true },
		{ "mprotect", offsetof(struct target_funcs, mprotect), true },
		{ "syscall", offsetof(struct target_funcs, syscall), true },
		{ "pthread_create", offsetof(struct target_funcs, pthread_create), false },
		{ "pthread_detach", offsetof(struct target_funcs, pthread_detach), false },
		{ "pthread_self", offsetof(struct target_funcs, pthread_self), false },
	};
	static const char *const libc_globs[] = { "libc.so*", "libc-*.so", "ld-musl-*" };
	struct proc_syms *ps = NULL;
	struct maps *m = NULL;
	int r;

	memset(f, 0, sizeof(*f));
	r = proc_syms__new(pid, &ps);
	if (r < 0) {
		snprintf(msg, msglen, "cannot read the memory map of pid %d: %s", pid, strerror(-r));
		return r;
	}
	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
		uint64_t addr = 0;

		for (size_t g = 0; g < sizeof(libc_globs) / sizeof(libc_globs[0]) && !addr; g++)
			if (proc_syms__find(ps, libc_globs[g], want[i].name, &addr) != 0)
				addr = 0;
		if (!addr && proc_syms__find(ps, NULL, want[i].name, &addr) != 0)
			addr = 0;
		*(uint64_t *)((char *)f + want[i].off) = addr;
		if (!addr && want[i].required) {
			snprintf(msg, msglen, "pid %d has no '%s' in a loaded libc; aiprof needs a "
				 "dynamically linked glibc or musl process", pid, want[i].name);
			r = -ENOEXEC;
			goto out;
		}
	}
	if (!f->dlopen) {
		/* glibc < 2.34 without libdl loaded still has the private entry point */
		if (proc_syms__find(ps, "libc*", "__libc_dlopen_mode", &f->dlopen) != 0 || !f->dlopen) {
			snprintf(msg, msglen, "pid %d has no dlopen (libdl not loaded and no "
				 "__libc_dlopen_mode): cannot load the library", pid);
			r = -ENOEXEC;
			goto out;
		}
		f->dlerror = 0;
	}
	r = maps__read(pid, &m);
	if (r < 0) {
		snprintf(msg, msglen, "cannot read /proc/%d/maps: %s", pid, strerror(-r));
		goto out;
	}
	f->restore_rt = find_restore_rt(pid, m);
	r = 0;
	/*
	 * The copy a forked child inherited: woken by calling its own aiprof_rearm(), found in
	 * its own symbol table (a copy of another build has its own, or none).
	 */
	if (wake) {
		int w = proc_syms__find(ps, "*" AIPROF_LIB_MEMFD, "aiprof_rearm", &f->rearm);

		if (w == 0)
			w = proc_syms__find(ps, "*" AIPROF_LIB_MEMFD, "aiprof_rearm_error",
					    &f->rearm_error);
		if (w != 0 || !f->rearm) {
			snprintf(msg, msglen, "pid %d has a dormant copy of libaiprof.so, inherited "
				 "across fork() from a process that was profiled, that cannot be woken "
				 "(%s): profile it with --method ebpf", pid, w == -ENOENT ?
				 "a build of an older aiprof" : w < 0 ? strerror(-w) : "not found");
			f->rearm = 0;
			r = -EEXIST;
		}
	}
out:
	maps__free(m);
	proc_syms__free(ps);
	return r;
}

/* ---- waiting for stops with a deadline ---------------------------------------------- */

/*
 * Waits for the next state change of t->tid. SIGCHLD is blocked by the caller, so a
 * stop of the tracee wakes sigtimedwait(). Returns 0 with *status, or -ETIMEDOUT.
 */
static int wait_tracee(pid_t tid, int *status, uint64_t timeout_ns)
{
	uint64_t deadline = now_monotonic_ns() + timeout_ns;
	sigset_t chld;

	sigemptyset(&chld);
	sigaddset(&chld, SIGCHLD);
	for (;;) {
		pid_t r = waitpid(tid, status, __WALL | WNOHANG);
		uint64_t now;
		struct timespec ts;

		if (r == tid)
			return 0;
		if (r < 0 && errno != EINTR)
			return -errno;
		now = now_monotonic_ns();
		if (now >= deadline)
			return -ETIMEDOUT;
		/*
		 * Re-checked every 2 ms whatever the signal does: the SIGCHLD of a stop that
		 * came between waitpid() and here may have gone to a thread that does not block
		 * it (and been dropped as ignored), or to another late worker waiting for its own
		 * tracee (injector/cli/late.c runs several).
		 */
		ts.tv_sec = 0;
		ts.tv_nsec = (long)(deadline - now < 2000000 ? deadline - now : 2000000);
		(void)sigtimedwait(&chld, NULL, &ts);
	}
}

/* ---- attach, safe point, remote calls ------------------------------------------------ */

static int tracee_attach(struct tracee *t)
{
	int status, r;

	/* no PTRACE_O_EXITKILL: should we die, the kernel detaches the thread, never kills it */
	if (ptrace(PTRACE_SEIZE, t->tid, NULL, (void *)(long)PTRACE_O_TRACESYSGOOD) < 0)
		return -errno;
	if (ptrace(PTRACE_INTERRUPT, t->tid, NULL, NULL) < 0) {
		r = -errno;
		ptrace(PTRACE_DETACH, t->tid, NULL, NULL);
		return r;
	}
	for (;;) {
		r = wait_tracee(t->tid, &status, 2 * NSEC_PER_SEC);
		if (r == -ETIMEDOUT) {
			/* never leave a seized thread behind: it would stop at its next signal */
			ptrace(PTRACE_INTERRUPT, t->tid, NULL, NULL);
			if (wait_tracee(t->tid, &status, NSEC_PER_SEC) == 0 && WIFSTOPPED(status))
				ptrace(PTRACE_DETACH, t->tid, NULL, NULL);
			return r;
		}
		if (r < 0)
			return r;
		if (WIFEXITED(status) || WIFSIGNALED(status)) {
			t->died_status = status;
			return -ESRCH;
		}
		if (!WIFSTOPPED(status))
			continue;
		if ((status >> 16) == PTRACE_EVENT_STOP)
			break;
		/* a signal arrived first: let it be delivered, our interrupt is still pending */
		if (ptrace(PTRACE_CONT, t->tid, NULL, (void *)(long)WSTOPSIG(status)) < 0)
			return -errno;
	}
	t->stopped_since = now_monotonic_ns();
	if (ptrace(PTRACE_GETREGS, t->tid, NULL, &t->saved) < 0)
		return -errno;
	t->xiov.iov_base = t->xstate;
	t->xiov.iov_len = sizeof(t->xstate);
	t->have_xstate = ptrace(PTRACE_GETREGSET, t->tid, (void *)NT_X86_XSTATE, &t->xiov) == 0;
	return 0;
}

/*
 * Lets the thread go home. After a call it sits at the return path's marker, and the path
 * restores it (as it would without us); otherwise its saved state is put back here.
 */
static int tracee_detach(struct tracee *t)
{
	int r = 0;

	if (t->released)
		return 0;               /* it went on its own, inside a call */
	t->stop_ns += now_monotonic_ns() - t->stopped_since;
	if (t->in_cave_call)
		return ptrace(PTRACE_DETACH, t->tid, NULL, (void *)(long)t->held_sig) < 0 ?
		       -errno : 0;
	if (ptrace(PTRACE_SETREGS, t->tid, NULL, &t->saved) < 0)
		r = -errno;
	if (t->have_xstate && ptrace(PTRACE_SETREGSET, t->tid, (void *)NT_X86_XSTATE, &t->xiov) < 0 && !r)
		r = -errno;
	if (ptrace(PTRACE_DETACH, t->tid, NULL, NULL) < 0 && !r)
		r = -errno;
	return r;
}

static bool syscall_is_safe(long nr, uint64_t arg0, const struct safepoint *sp)
{
	switch (nr) {
	case SYS_read: case SYS_write: case SYS_readv: case SYS_writev:
	case SYS_pread64: case SYS_pwrite64: case SYS_poll: case SYS_ppoll:
	case SYS_select: case SYS_pselect6: case SYS_epoll_wait: case SYS_epoll_pwait:
#ifdef SYS_epoll_pwait2
	case SYS_epoll_pwait2:
#endif
	case SYS_nanosleep: case SYS_clock_nanosleep: case SYS_pause:
	case SYS_rt_sigsuspend: case SYS_rt_sigtimedwait: case SYS_wait4: case SYS_waitid:
	case SYS_accept: case SYS_accept4: case SYS_connect: case SYS_recvfrom:
	case SYS_recvmsg: case SYS_recvmmsg: case SYS_sendto: case SYS_sendmsg:
	case SYS_sendmmsg: case SYS_fsync: case SYS_fdatasync: case SYS_sched_yield:
	case SYS_io_getevents: case SYS_openat: case SYS_close: case SYS_fstat:
	case SYS_newfstatat: case SYS_lseek: case SYS_getdents64: case SYS_sync_file_range:
		return true;
	case SYS_futex:
		/* libc's and ld.so's own locks live in their data: a waiter there may hold another */
		return !safepoint__in_libc(sp, arg0);
	default:
		return false;
	}
}

/*
 * true if the saved context is a point where making the thread call into libc is safe;
 * `where` says what the thread was doing.
 */
static bool at_safe_point(struct tracee *t, const struct target_funcs *f,
			  struct safepoint *sp, char *where, size_t len)
{
	const struct user_regs_struct *g = &t->saved;
	long nr = (long)g->orig_rax;
	struct unwind_regs ur = {
		.r = { [UW_RAX] = g->rax, [UW_RDX] = g->rdx, [UW_RCX] = g->rcx, [UW_RBX] = g->rbx,
		       [UW_RSI] = g->rsi, [UW_RDI] = g->rdi, [UW_RBP] = g->rbp, [UW_RSP] = g->rsp,
		       [UW_R8] = g->r8, [UW_R9] = g->r9, [UW_R10] = g->r10, [UW_R11] = g->r11,
		       [UW_R12] = g->r12, [UW_R13] = g->r13, [UW_R14] = g->r14, [UW_R15] = g->r15,
		       [UW_RIP] = g->rip },
		.valid = (1u << UW_NREGS) - 1,
	};

	if (nr >= 0)
		snprintf(where, len, "syscall %ld", nr);
	else
		snprintf(where, len, "%s code", safepoint__in_libc(sp, g->rip) ? "libc" :
			 "application");
	if (!safepoint__judge(sp, &ur, nr >= 0, nr >= 0 && syscall_is_safe(nr, g->rdi, sp),
			      where, len))
		return false;
	if (f->restore_rt) {
		/* a signal frame's return address on the stack: we are inside a handler */
		uint64_t words[1024];
		ssize_t n = pread(t->mem_fd, words, sizeof(words), (off_t)(g->rsp & ~7ULL));

		for (ssize_t i = 0; i < n / (ssize_t)sizeof(words[0]); i++)
			if (words[i] == f->restore_rt) {
				snprintf(where + strlen(where), len - strlen(where), " in a signal handler");
				return false;
			}
	}
	return true;
}

/* ---- the return path: where it goes, what it restores ---------------------------- */

/*
 * Finds room for the return path: the tail of the last page of an executable PT_LOAD
 * segment of one of the target's modules, past the segment's end — mapped executable,
 * never executed or read through that mapping. Writing there (through /proc/PID/mem)
 * gives the process a private copy of that one page. Returns its address or 0.
 */
static uint64_t find_cave(struct tracee *t, size_t need)
{
	struct maps *m = NULL;
	uint64_t found = 0;

	if (maps__read(t->pid, &m) < 0)
		return 0;
	for (size_t i = 0; i < m->n && !found; i++) {
		const struct maps_entry *base = &m->v[i];
		Elf64_Ehdr eh;
		Elf64_Phdr ph[CAVE_MAX_PHDRS];

		if (!base->path || base->path[0] != '/' || base->offset != 0 || base->shared)
			continue;
		/* the target's bytes: judged by cave.c (fuzzed) */
		if (read_mem(t, base->start, &eh, sizeof(eh)) < 0 || !cave_ehdr_ok(&eh) ||
		    read_mem(t, base->start + eh.e_phoff, ph, eh.e_phnum * sizeof(ph[0])) < 0)
			continue;
		found = cave_find_in(m, i, &eh, ph, need);
	}
	maps__free(m);
	return found;
}

/* A signal mask line of /proc/PID/task/TID/status ("SigBlk:\t0000000000010000"). */
static uint64_t status_mask(const char *status, const char *key)
{
	const char *p = strstr(status, key);

	return p ? strtoull(p + strlen(key), NULL, 16) : UINT64_MAX;
}

/* The last number of a "NSpid:"-style line: the id in the innermost pid namespace. */
static uint32_t status_ns_id(const char *status, const char *key)
{
	const char *p = strstr(status, key), *eol;
	uint32_t v = 0;

	if (!p)
		return 0;
	p += strlen(key);
	eol = strchr(p, '\n');
	while (*p && (!eol || p < eol)) {
		char *end;
		unsigned long n = strtoul(p, &end, 10);

		if (end == p)
			break;
		v = (uint32_t)n;
		p = end;
	}
	return v;
}

/*
 * The return path's marker signal for this thread: one the kernel drops when nobody
 * traces it — its action is to be ignored and no handler is installed — and that the thread
 * does not block (a blocked signal would never stop it). 0 if there is none. The thread
 * sends it to itself, so *ns_tgid and *ns_tid get its ids in its own pid namespace.
 */
static int marker_signal(const struct tracee *t, uint32_t *ns_tgid, uint32_t *ns_tid)
{
	static const int dfl_ignored[] = { SIGURG, SIGWINCH, SIGCHLD };
	char path[64], *st = NULL;
	uint64_t blk, ign, cgt;
	int sig = 0;

	snprintf(path, sizeof(path), "/proc/%d/task/%d/status", t->pid, t->tid);
	if (readfile(path, 1 << 16, 0, &st, NULL) < 0)
		return 0;
	blk = status_mask(st, "SigBlk:");
	ign = status_mask(st, "SigIgn:");
	cgt = status_mask(st, "SigCgt:");
	*ns_tgid = status_ns_id(st, "NStgid:");
	*ns_tid = status_ns_id(st, "NSpid:");
	free(st);
	if (blk == UINT64_MAX || ign == UINT64_MAX || cgt == UINT64_MAX || !*ns_tgid || !*ns_tid)
		return 0;
#define SIGBIT(n) (1ULL << ((n) - 1))
	for (size_t i = 0; i < sizeof(dfl_ignored) / sizeof(dfl_ignored[0]) && !sig; i++)
		if (!((blk | cgt) & SIGBIT(dfl_ignored[i])))
			sig = dfl_ignored[i];
	/* then one the process ignores: SIGPIPE (commonly), else from the real-time end, away
	 * from the SIGINT/SIGTERM a process might start catching at any moment */
	if (!sig && (ign & SIGBIT(SIGPIPE)) && !((blk | cgt) & SIGBIT(SIGPIPE)))
		sig = SIGPIPE;
	for (int n = 64; n >= 1 && !sig; n--)
		if ((ign & SIGBIT(n)) && !((blk | cgt) & SIGBIT(n)) && n != SIGKILL && n != SIGSTOP &&
		    (n < 32 || n >= SIGRTMIN))     /* 32, 33: the C library's own (cancel, setxid) */
			sig = n;
#undef SIGBIT
	return sig;
}

/* XCR0, what XSAVE state this machine's kernel enabled (x86-64 with OSXSAVE). */
static uint64_t read_xcr0(void)
{
	uint32_t lo, hi;

	__asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
	return ((uint64_t)hi << 32) | lo;
}

#define XFEATURE_XTILEDATA (1ULL << 18)   /* armed by XFD until a process asks for AMX */

/*
 * Writes the return path and its data for the stopped thread: its registers as it must
 * resume (an interrupted syscall set up to restart, as the kernel would), its XSAVE image,
 * its scheduling attributes. From here on every call can end without us.
 */
static int cave_prepare(struct tracee *t, char *msg, size_t msglen)
{
	size_t xs = t->have_xstate ? t->xiov.iov_len : 0;
	uint64_t sp = t->saved.rsp, e, flags = 0, rip;
	struct kernel_sched_attr attr;
	struct cave_regs cr;
	uint8_t *block;
	size_t len;
	int r;

	if (!t->cave)
		return -ENOSPC;
	e = (sp - CV_RIP_BELOW - xs - CV_XSAVE) & ~63ULL;
	len = CV_XSAVE + xs;
	block = calloc(1, len);
	if (!block)
		return -ENOMEM;
	cr = (struct cave_regs){
		.rax = t->saved.rax, .rbx = t->saved.rbx, .rcx = t->saved.rcx,
		.rdx = t->saved.rdx, .rsi = t->saved.rsi, .rdi = t->saved.rdi,
		.rbp = t->saved.rbp, .r8 = t->saved.r8, .r9 = t->saved.r9, .r10 = t->saved.r10,
		.r11 = t->saved.r11, .r12 = t->saved.r12, .r13 = t->saved.r13,
		.r14 = t->saved.r14, .r15 = t->saved.r15, .rsp = sp,
		.rflags = t->saved.eflags, .rip = t->saved.rip,
	};
	if ((int64_t)t->saved.orig_rax >= 0) {
		/* stopped inside a syscall: resume by making it again (arch/x86 signal.c) */
		switch ((int64_t)t->saved.rax) {
		case -512: case -513: case -514:    /* ERESTARTSYS, ERESTARTNOINTR, ERESTARTNOHAND */
			cr.rax = t->saved.orig_rax;
			cr.rip -= 2;
			break;
		case -516:                          /* ERESTART_RESTARTBLOCK */
			cr.rax = SYS_restart_syscall;
			cr.rip -= 2;
			break;
		}
	}
	rip = cr.rip;
	memcpy(block + CV_REGS, &cr, sizeof(cr));
	memset(&attr, 0, sizeof(attr));
	if (t->boost_calls && syscall(SYS_sched_getattr, t->tid, &attr, sizeof(attr), 0) == 0 &&
	    (attr.sched_policy == SCHED_OTHER || attr.sched_policy == SCHED_BATCH)) {
		attr.size = sizeof(attr);
		memcpy(block + CV_SCHED, &attr, sizeof(attr));
		flags |= CVF_SCHED;
	}
	if (xs) {
		uint64_t bv, rfbm;

		memcpy(&bv, t->xstate + 512, sizeof(bv));       /* XSTATE_BV */
		rfbm = (read_xcr0() & ~XFEATURE_XTILEDATA) | (bv & XFEATURE_XTILEDATA);
		memcpy(block + CV_RFBM, &rfbm, sizeof(rfbm));
		memcpy(block + CV_XSAVE, t->xstate, xs);
		flags |= CVF_XSTATE;
	}
	memcpy(block + CV_FLAGS, &flags, sizeof(flags));
	{
		uint32_t who[3] = { 0, 0, 0 };

		t->marker_sig = marker_signal(t, &who[0], &who[1]);
		who[2] = (uint32_t)t->marker_sig;
		memcpy(block + CV_TGID, who, sizeof(who));
	}
	r = write_mem(t, e, block, len);
	free(block);
	if (r >= 0)
		r = write_mem(t, sp - CV_RIP_BELOW, &rip, sizeof(rip));
	if (r < 0) {
		snprintf(msg, msglen, "cannot write aiprof's return path's data on the stack of "
			 "thread %d of pid %d: %s (less than %zu bytes to spare below its stack "
			 "pointer?)", t->tid, t->pid, strerror(-r), len + CV_RIP_BELOW);
		return r;
	}
	t->cave_rsp = e;
	return 0;
}

/*
 * A call outlived its timeout: let the thread go inside it, rather than leave it stopped
 * or take it out mid-call. It finishes the call, returns into the path and goes home.
 */
static void tracee_release(struct tracee *t)
{
	int status;

	t->released = true;
	t->stop_ns += now_monotonic_ns() - t->stopped_since;
	if (ptrace(PTRACE_INTERRUPT, t->tid, NULL, NULL) < 0)
		return;
	while (wait_tracee(t->tid, &status, 10 * NSEC_PER_SEC) == 0) {
		int sig = 0;

		if (!WIFSTOPPED(status))
			return;                 /* it exited */
		if ((status >> 16) == 0 && WSTOPSIG(status) != (SIGTRAP | 0x80) &&
		    WSTOPSIG(status) != t->marker_sig)
			sig = WSTOPSIG(status); /* a signal of the target's: deliver it */
		ptrace(PTRACE_DETACH, t->tid, NULL, (void *)(long)sig);
		return;
	}
	/* no stop within 10 s (a frozen cgroup?): our exit detaches it all the same */
}

/*
 * Calls fn(a[0..5]) on the stopped thread and returns its %rax in *ret. The call returns
 * into the path, whose marker syscall is where we stop it (PTRACE_SYSCALL); from there the
 * next call starts, or the path takes the thread home.
 */
static int remote_call(struct tracee *t, uint64_t fn, const uint64_t a[6], uint64_t timeout_ns,
		       uint64_t *ret)
{
	uint64_t marker = t->cave + (uint64_t)(aiprof_cave_marker - aiprof_cave), deadline;
	enum __ptrace_request resume = t->marker_sig ? PTRACE_CONT : PTRACE_SYSCALL;
	struct user_regs_struct regs = t->saved;
	struct sched_saved boost = { 0 };
	int status, r;

	if (t->released)
		return -ESRCH;
	if (!t->cave_rsp)
		return -EINVAL;
	if (t->call_timeout_ns)
		timeout_ns = t->call_timeout_ns;
	deadline = now_monotonic_ns() + timeout_ns;
	regs.rsp = t->cave_rsp - 8;      /* ABI: %rsp + 8 is 16-byte aligned at entry */
	r = write_mem(t, regs.rsp, &t->cave, sizeof(t->cave));
	if (r < 0)
		return r;
	regs.rip = fn;
	regs.rdi = a[0]; regs.rsi = a[1]; regs.rdx = a[2];
	regs.rcx = a[3]; regs.r8 = a[4]; regs.r9 = a[5];
	regs.rax = 0;
	regs.orig_rax = (unsigned long long)-1; /* not in a syscall: no restart games */
	if (ptrace(PTRACE_SETREGS, t->tid, NULL, &regs) < 0)
		return -errno;
	t->in_cave_call = true;         /* from here, the thread gets home without us */
	if (t->boost_calls)
		sched_boost(t->tid, &boost);
	/* a signal of the target's held at the last marker reaches its handler now */
	if (ptrace(resume, t->tid, NULL, (void *)(long)t->held_sig) < 0) {
		r = -errno;
		goto out;
	}
	t->held_sig = 0;
	for (;;) {
		uint64_t now = now_monotonic_ns();
		siginfo_t si;
		int sig;

		r = now < deadline ? wait_tracee(t->tid, &status, deadline - now) : -ETIMEDOUT;
		if (r == -ETIMEDOUT) {
			sched_restore(t->tid, &boost);
			tracee_release(t);
			return r;
		}
		if (r < 0)
			goto out;
		if (WIFEXITED(status) || WIFSIGNALED(status)) {
			t->died_status = status;
			r = -ESRCH;
			goto out;
		}
		if (!WIFSTOPPED(status))
			continue;
		sig = WSTOPSIG(status);
		if ((status >> 16) == 0 && (sig == (SIGTRAP | 0x80) || sig == t->marker_sig)) {
			/* the marker that ends the call, or (PTRACE_SYSCALL) one of the call's
			 * own syscalls, or someone else's SIGURG: told apart by where it stopped */
			if (ptrace(PTRACE_GETREGS, t->tid, NULL, &regs) < 0) {
				r = -errno;
				goto out;
			}
			if (regs.rip == marker && regs.orig_rax == CV_MARKER_NR) {
				*ret = regs.r10;
				r = 0;
				goto out;
			}
			if (sig == (SIGTRAP | 0x80))
				sig = 0;
		} else if ((status >> 16) == 0 && t->marker_sig &&
			   ptrace(PTRACE_GETREGS, t->tid, NULL, &regs) == 0 &&
			   regs.rip == marker && regs.orig_rax == CV_MARKER_NR) {
			/*
			 * The marker was sent, but a lower-numbered signal of the target's (a
			 * timer's SIGALRM, say) is delivered before it. Passed on now, its handler
			 * would run first and the marker's stop would come inside the handler,
			 * where it cannot be told from a stray one: the call would be missed and
			 * the thread go home under us. The call is done, so stop here and pass
			 * the signal on with the next resume; the marker left pending is a quiet
			 * signal, dropped when it is delivered.
			 */
			t->held_sig = sig;
			*ret = regs.r10;
			r = 0;
			goto out;
		} else if ((status >> 16) == PTRACE_EVENT_STOP) {
			sig = 0;                /* group-stop (SIGSTOP to the process): go on */
		} else if ((sig == SIGSEGV || sig == SIGBUS || sig == SIGILL || sig == SIGFPE) &&
			   ptrace(PTRACE_GETSIGINFO, t->tid, NULL, &si) == 0 && si.si_code > 0) {
			/* the call faulted for real: never delivered; the saved state goes back */
			t->in_cave_call = false;
			r = -EFAULT;
			goto out;
		}
		/* else an ordinary signal for the target: delivered, its handler returns to us */
		if (ptrace(resume, t->tid, NULL, (void *)(long)sig) < 0) {
			r = -errno;
			goto out;
		}
	}
out:
	sched_restore(t->tid, &boost);
	return r;
}

/*
 * AIPROF_REMOTE_CALL_TIMEOUT (a duration) replaces every remote call's own timeout: for
 * testing what happens when a call outlives it (0 or unset: the calls' own).
 */
static int remote_call_timeout(uint64_t *ret_ns, char *msg, size_t msglen)
{
	const char *v = getenv("AIPROF_REMOTE_CALL_TIMEOUT");

	*ret_ns = 0;
	if (!v || !*v)
		return 0;
	if (parse_duration_ns(v, ret_ns) < 0) {
		snprintf(msg, msglen, "AIPROF_REMOTE_CALL_TIMEOUT=%s is not a duration (like 1ms, 2s)", v);
		return -EINVAL;
	}
	return 0;
}

static int call6(struct tracee *t, uint64_t fn, uint64_t a0, uint64_t a1, uint64_t a2,
		 uint64_t a3, uint64_t a4, uint64_t a5, uint64_t *ret)
{
	const uint64_t a[6] = { a0, a1, a2, a3, a4, a5 };

	return remote_call(t, fn, a, NSEC_PER_SEC, ret);
}

/* ---- putting it together -------------------------------------------------------------- */

/* Copies the library into a memfd the target owns: /proc/PID/fd/N opened from here. */
static int fill_target_memfd(pid_t pid, int fd, const void *lib, size_t len)
{
	char path[64];
	size_t off = 0;
	int wfd, r = 0;

	snprintf(path, sizeof(path), "/proc/%d/fd/%d", pid, fd);
	wfd = open(path, O_WRONLY | O_CLOEXEC);
	if (wfd < 0)
		return -errno;
	while (off < len) {
		ssize_t n = write(wfd, (const char *)lib + off, len - off);

		if (n <= 0) {
			r = n < 0 ? -errno : -EIO;
			break;
		}
		off += (size_t)n;
	}
	close(wfd);
	return r;
}

/*
 * Everything done while the thread is stopped at a safe point. On success the stub
 * thread has been started (or, in direct mode, the library is already loaded) and
 * *ret_data holds the data page's address in the target.
 */
static int do_inject(struct tracee *t, const struct target_funcs *f, const void *lib,
		     size_t lib_len, bool *direct, uint64_t *ret_data, char *msg, size_t msglen)
{
	struct stub_data sd;
	uint64_t base = 0, data, fd = (uint64_t)-1, rv;
	size_t stub_len = (size_t)(aiprof_worker_stub_end - aiprof_worker_stub);
	int r;

	t->doing = "mmap";
	r = call6(t, f->mmap, 0, STUB_LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
		  (uint64_t)-1, 0, &base);
	if (r < 0 || base == (uint64_t)MAP_FAILED || base == 0) {
		snprintf(msg, msglen, "mmap in the target failed (%s)", r < 0 ? strerror(-r) : "MAP_FAILED");
		return r < 0 ? r : -ENOMEM;
	}
	data = base + STUB_PAGE;

	memset(&sd, 0, sizeof(sd));
	snprintf(sd.name, sizeof(sd.name), "%s", AIPROF_LIB_MEMFD);
	r = write_mem(t, data, &sd, sizeof(sd));
	if (r < 0)
		goto fail_unmap;
	if (f->rearm)
		goto no_memfd;          /* the library is there, dormant: nothing to load */
	t->doing = "memfd_create";
	r = call6(t, f->syscall, SYS_memfd_create, data + SD_NAME, MFD_CLOEXEC, 0, 0, 0, &fd);
	if (r < 0 || (int64_t)fd < 0) {
		snprintf(msg, msglen, "memfd_create in the target failed (%s)",
			 r < 0 ? strerror(-r) : "kernel refused");
		r = r < 0 ? r : -ENOSYS;
		goto fail_unmap;
	}
	r = fill_target_memfd(t->pid, (int)fd, lib, lib_len);
	if (r < 0) {
		snprintf(msg, msglen, "writing the library into the target's memfd failed: %s",
			 strerror(-r));
		goto fail_close;
	}

no_memfd:
	/* waking a dormant copy: its aiprof_rearm() has dlopen()'s signature */
	sd.dlopen_fn = f->rearm ? f->rearm : f->dlopen;
	sd.dlerror_fn = f->rearm ? f->rearm_error : f->dlerror;
	sd.close_fn = f->close;
	sd.munmap_fn = f->munmap;
	sd.self_fn = f->pthread_self;
	sd.detach_fn = f->pthread_detach;
	sd.map_base = base;
	sd.map_len = STUB_LEN;
	sd.fd = (int32_t)fd;
	sd.spin = 5000;                 /* x 1 ms: how long the stub waits for our ack */
	sd.ts.sec = 0;
	sd.ts.nsec = 1000000;
	snprintf(sd.path, sizeof(sd.path), "/proc/self/fd/%d", (int)fd);
	r = write_mem(t, data, &sd, sizeof(sd));
	if (r >= 0)
		r = write_mem(t, base, aiprof_worker_stub, stub_len);
	if (r < 0)
		goto fail_close;
	t->doing = "mprotect";
	r = call6(t, f->mprotect, base, STUB_PAGE, PROT_READ | PROT_EXEC, 0, 0, 0, &rv);
	if (r < 0 || rv != 0) {
		snprintf(msg, msglen, "mprotect in the target failed; the target may forbid "
			 "executable mappings");
		r = r < 0 ? r : -EACCES;
		goto fail_close;
	}

	/* threads inherit the policy of their creator: no boost from here on */
	t->boost_calls = false;
	if (f->pthread_create && f->pthread_detach && f->pthread_self && !*direct) {
		t->doing = "pthread_create";
		r = call6(t, f->pthread_create, data + SD_THREAD, 0, base, data, 0, 0, &rv);
		if (r < 0 || rv != 0) {
			snprintf(msg, msglen, "pthread_create in the target failed (%s)",
				 r < 0 ? strerror(-r) : strerror((int)rv));
			r = r < 0 ? r : -(int)rv;
			goto fail_close;
		}
		/* the worker owns the pages and the fd now, and detaches itself */
		*ret_data = data;
		return 0;
	}

	/* direct mode: dlopen right here; the stub pages are ours to free */
	*direct = true;
	{
		const uint64_t a[6] = { data + SD_PATH, 2 /* RTLD_NOW */, 0, 0, 0, 0 };

		t->doing = "dlopen";
		r = remote_call(t, sd.dlopen_fn, a, 10 * NSEC_PER_SEC, &rv);
	}
	if (r >= 0 && rv == 0 && sd.dlerror_fn) {
		uint64_t ep = 0;

		if (call6(t, sd.dlerror_fn, 0, 0, 0, 0, 0, 0, &ep) == 0 && ep) {
			char err[256] = "";

			(void)read_mem(t, ep, err, sizeof(err) - 1);
			err[sizeof(err) - 1] = 0;
			load_failed(t->pid, f->rearm != 0, err, msg, msglen);
		}
	}
	if (r >= 0 && rv == 0) {
		if (!msg[0])
			load_failed(t->pid, f->rearm != 0, NULL, msg, msglen);
		r = -EIO;
	}
	if ((int64_t)fd >= 0)
		(void)call6(t, f->close, fd, 0, 0, 0, 0, 0, &rv);
	(void)call6(t, f->munmap, base, STUB_LEN, 0, 0, 0, 0, &rv);
	*ret_data = 0;
	return r;

fail_close:
	t->doing = "cleaning up after a failed call";
	(void)call6(t, f->close, fd, 0, 0, 0, 0, 0, &rv);
fail_unmap:
	(void)call6(t, f->munmap, base, STUB_LEN, 0, 0, 0, 0, &rv);
	return r;
}

/* Waits for the stub thread to report, reads its result, and lets it clean up. */
static int wait_worker(pid_t pid, uint64_t data, bool woken, uint64_t timeout_ns,
		       pid_t *ret_tid, char *msg, size_t msglen)
{
	uint64_t deadline = now_monotonic_ns() + timeout_ns;
	struct tracee t = { .pid = pid, .mem_fd = -1 };
	struct stub_data sd;
	char path[64];
	uint32_t ack = 1;
	int r;

	snprintf(path, sizeof(path), "/proc/%d/mem", pid);
	t.mem_fd = open(path, O_RDWR | O_CLOEXEC);
	if (t.mem_fd < 0)
		return -errno;
	for (;;) {
		r = read_mem(&t, data, &sd, sizeof(sd));
		if (r < 0) {
			snprintf(msg, msglen, "lost track of the loader thread: %s", strerror(-r));
			goto out;
		}
		if (sd.done)
			break;
		if (now_monotonic_ns() > deadline) {
			snprintf(msg, msglen, "%s in the target did not finish within %llu ms; "
				 "it will clean up after itself", woken ? "waking the library" :
				 "dlopen", (unsigned long long)(timeout_ns / NSEC_PER_MSEC));
			r = -ETIMEDOUT;
			goto out;
		}
		sleep_ns(200 * NSEC_PER_USEC);
	}
	if (!sd.handle) {
		char err[256] = "";

		if (sd.errptr && read_mem(&t, sd.errptr, err, sizeof(err) - 1) == 0)
			err[sizeof(err) - 1] = 0;
		else
			err[0] = 0;
		load_failed(pid, woken, err, msg, msglen);
		r = -EIO;
	} else {
		r = 0;
	}
	/* still alive, waiting for the ack: its host tid can be read now */
	if (sd.tid)
		*ret_tid = proc_host_tid(pid, sd.tid);
	(void)write_mem(&t, data + SD_ACK, &ack, sizeof(ack));
out:
	close(t.mem_fd);
	return r;
}

static int list_threads(pid_t pid, pid_t *tids, size_t max, size_t *ret_n)
{
	char path[64];
	struct dirent *de;
	size_t n = 0;
	DIR *d;

	snprintf(path, sizeof(path), "/proc/%d/task", pid);
	d = opendir(path);
	if (!d)
		return -errno;
	tids[n++] = pid; /* main thread first: often idle in a wait */
	while ((de = readdir(d)) && n < max) {
		long tid = strtol(de->d_name, NULL, 10);

		if (tid > 0 && tid != pid)
			tids[n++] = (pid_t)tid;
	}
	closedir(d);
	*ret_n = n;
	return 0;
}

/* One injection under way. */
struct inject_job {
	pid_t pid;
	struct tracee t;
	struct target_funcs funcs;
	struct safepoint *sp;           /* judges each stop (safepoint.h) */
	char *lib;                      /* libaiprof.so's bytes */
	size_t lib_len;
	bool wake;                      /* a forked child's dormant copy: wake it, load nothing */
	bool direct;                    /* dlopen ran on the hijacked thread itself */
	uint64_t data;                  /* the worker's data block, when it runs dlopen */
	uint64_t deadline;
	struct inject_report *rep;
};

/*
 * A process with CET shadow stacks (glibc and kernel enable them where the binary asks) would
 * crash on the first remote call's return: its return address is on the stack but not on the
 * shadow stack. Refused before anything is touched; the uprobe method needs no remote call.
 */
static int refuse_shadow_stack(pid_t pid, struct inject_report *rep)
{
	char path[64], *st = NULL;
	bool shstk;

	snprintf(path, sizeof(path), "/proc/%d/status", pid);
	if (readfile(path, 1 << 16, 0, &st, NULL) < 0)
		return 0;       /* gone or unreadable: the attach says so */
	shstk = target_status_has_shstk(st);
	free(st);
	if (!shstk)
		return 0;
	snprintf(rep->message, sizeof(rep->message), "pid %d runs with CET shadow stacks "
		 "(x86_Thread_features: shstk): a remote call's return would crash it, so nothing "
		 "is injected; use --method ebpf, which loads nothing into the process", pid);
	return -EPROTONOSUPPORT;
}

/* The library read, the target's functions found, its memory opened and the return path
 * written: all before any thread is stopped (the return path is the same for all). */
static int prepare_job(struct inject_job *j, const struct inject_opts *opts)
{
	struct inject_report *rep = j->rep;
	char path[64];
	int r;

	r = readfile(opts->lib_path, INJECT_LIB_MAX, READFILE_REGULAR, &j->lib, &j->lib_len);
	if (r < 0) {
		snprintf(rep->message, sizeof(rep->message), "cannot read %s: %s (use --lib or "
			 "AIPROF_LIB to point at libaiprof.so)", opts->lib_path, strerror(-r));
		return r;
	}
	r = refuse_shadow_stack(j->pid, rep);
	if (r < 0)
		return r;
	r = seccomp_refuse_remote_call(j->pid, rep->message, sizeof(rep->message));
	if (r < 0)
		return r;
	r = resolve_funcs(j->pid, j->wake, &j->funcs, rep->message, sizeof(rep->message));
	if (r < 0)
		return r;
	snprintf(path, sizeof(path), "/proc/%d/mem", j->pid);
	j->t.mem_fd = open(path, O_RDWR | O_CLOEXEC);
	if (j->t.mem_fd < 0) {
		r = -errno;
		snprintf(rep->message, sizeof(rep->message), "cannot open %s: %s", path, strerror(errno));
		return r;
	}
	r = safepoint__new(j->pid, j->t.mem_fd, &j->sp);
	if (r < 0) {
		snprintf(rep->message, sizeof(rep->message), "cannot read the modules of pid %d "
			 "to judge its safe points: %s", j->pid, strerror(-r));
		return r;
	}
	j->t.cave = find_cave(&j->t, (size_t)(aiprof_cave_end - aiprof_cave));
	r = j->t.cave ? write_mem(&j->t, j->t.cave, aiprof_cave,
				  (size_t)(aiprof_cave_end - aiprof_cave)) : -ENOSPC;
	if (r < 0)
		snprintf(rep->message, sizeof(rep->message), "%s: without a return path a killed "
			 "aiprof could crash the target, so nothing is injected (--method ebpf needs "
			 "none)", r == -ENOSPC ? "found no room for aiprof's return path in the "
			 "target's executable pages" : "cannot write aiprof's return path into the "
			 "target (/proc/PID/mem refuses writes to code?)");
	return r;
}

/* How the return path's marker stops the thread, for the report. */
static void name_return_path(const struct tracee *t, struct inject_report *rep)
{
	if (t->marker_sig >= SIGRTMIN && t->marker_sig <= SIGRTMAX)
		snprintf(rep->return_path, sizeof(rep->return_path), "SIGRTMIN+%d",
			 t->marker_sig - SIGRTMIN);
	else if (t->marker_sig)
		snprintf(rep->return_path, sizeof(rep->return_path), "SIG%s",
			 sigabbrev_np(t->marker_sig) ? sigabbrev_np(t->marker_sig) : "?");
	else
		snprintf(rep->return_path, sizeof(rep->return_path), "syscall-stops");
}

/* The stopped thread j->t is at a safe point: load the library through it, then let it go. */
static int inject_through(struct inject_job *j)
{
	struct inject_report *rep = j->rep;
	struct sched_saved self_sched = { 0 };
	int r;

	rep->tid = j->t.tid;
	sched_boost(0, &self_sched);
	j->t.boost_calls = true;
	r = cave_prepare(&j->t, rep->message, sizeof(rep->message));
	name_return_path(&j->t, rep);
	if (r >= 0)
		r = do_inject(&j->t, &j->funcs, j->lib, j->lib_len, &j->direct, &j->data,
			      rep->message, sizeof(rep->message));
	if (j->t.released)
		snprintf(rep->message, sizeof(rep->message), "a call in thread %d of pid %d "
			 "outlived its timeout; the thread was let go inside it, finishes it and "
			 "returns to its own code by itself", j->t.tid, j->pid);
	if (tracee_detach(&j->t) < 0 && r >= 0)
		r = -ESRCH;
	sched_restore(0, &self_sched);
	return r;
}

/*
 * Stops the target's threads in turn until one is at a safe point, and injects through it.
 * 1 once injected, or a negative errno with rep->message set (-ETIMEDOUT past the
 * deadline, -ESRCH the process exited, -EPERM not allowed).
 */
static int find_thread_and_inject(struct inject_job *j, uint64_t timeout)
{
	struct inject_report *rep = j->rep;
	pid_t tids[256];
	size_t ntids = 0;
	int r = -ETIMEDOUT;

	while (now_monotonic_ns() < j->deadline) {
		if (list_threads(j->pid, tids, sizeof(tids) / sizeof(tids[0]), &ntids) < 0) {
			snprintf(rep->message, sizeof(rep->message), "pid %d exited", j->pid);
			return -ESRCH;
		}
		for (size_t i = 0; i < ntids && now_monotonic_ns() < j->deadline; i++) {
			j->t.tid = tids[i];
			j->t.doing = "stopping a thread to look for a safe point";
			if (rep->attempts && rep->attempts % 16 == 0)
				(void)safepoint__refresh(j->sp);  /* a dlopen that finished meanwhile */
			r = tracee_attach(&j->t);
			if (r == -ESRCH)
				continue;       /* that thread just exited */
			if (r == -EPERM) {
				snprintf(rep->message, sizeof(rep->message), "permission denied");
				return r;
			}
			if (r < 0) {
				snprintf(rep->message, sizeof(rep->message), "cannot stop thread %d of "
					 "pid %d: %s", j->t.tid, j->pid, strerror(-r));
				return r;
			}
			rep->attempts++;
			if (!at_safe_point(&j->t, &j->funcs, j->sp, rep->safe_point,
					   sizeof(rep->safe_point))) {
				rep->unsafe_stops++;
				tracee_detach(&j->t);
				/* modules its stack runs through, read now that it runs again; tried
				 * again at once */
				if (safepoint__warm(j->sp) > 0) {
					i--;
					continue;
				}
				sleep_ns((500 + (uint64_t)(rand() % 1500)) * NSEC_PER_USEC);
				r = -ETIMEDOUT;
				continue;
			}
			r = inject_through(j);
			return r < 0 ? r : 1;
		}
	}
	if (r == -ESRCH)
		return r;
	snprintf(rep->message, sizeof(rep->message), "no thread of pid %d reached a safe point "
		 "within %llu ms (the last stop: %s); try again, or use a longer --inject-timeout, "
		 "or --method ebpf, which stops nothing", j->pid,
		 (unsigned long long)(timeout / NSEC_PER_MSEC), rep->safe_point);
	return -ETIMEDOUT;
}

int inject_library(pid_t pid, const struct inject_opts *opts, struct inject_report *rep)
{
	uint64_t timeout = opts->timeout_ns ? opts->timeout_ns : 5 * NSEC_PER_SEC;
	uint64_t start = now_monotonic_ns();
	struct inject_job j = { .pid = pid, .t = { .pid = pid, .mem_fd = -1, .died_status = -1 },
				.deadline = start + timeout, .rep = rep };
	sigset_t held, oldmask;
	int r;

	memset(rep, 0, sizeof(*rep));
	rep->started_ns = start;
	rep->died_status = -1;
	r = remote_call_timeout(&j.t.call_timeout_ns, rep->message, sizeof(rep->message));
	if (r < 0)
		return r;
	/*
	 * A live copy is reused. A forked child's copy is dormant (its ring was the parent's):
	 * it is woken, through the same loader thread, by its own aiprof_rearm() in place of
	 * dlopen(). No second copy is loaded beside it: one crashed its control thread in tests.
	 */
	if (inject_is_loaded(pid)) {
		if (session__live(pid)) {
			rep->how = INJECT_ALREADY_LOADED;
			return 0;
		}
		j.wake = true;
	}
	r = prepare_job(&j, opts);
	if (r < 0)
		goto out;
	/*
	 * SIGCHLD is how stops are waited for. ^C and friends are held until the target is
	 * released: not for its safety (the return path sees to that) but so that an
	 * injection interrupted by them still ends cleanly and says so.
	 */
	sigemptyset(&held);
	sigaddset(&held, SIGCHLD);
	sigaddset(&held, SIGINT);
	sigaddset(&held, SIGTERM);
	sigaddset(&held, SIGHUP);
	sigaddset(&held, SIGQUIT);
	sigprocmask(SIG_BLOCK, &held, &oldmask);
	r = find_thread_and_inject(&j, timeout);
	if (r > 0) {
		rep->how = j.wake ? INJECT_PTRACE_WOKEN : j.direct ? INJECT_PTRACE_DIRECT :
			   INJECT_PTRACE;
		r = 0;
		if (!j.direct) {
			uint64_t now = now_monotonic_ns(), left = j.deadline > now ? j.deadline - now : 0;

			r = wait_worker(pid, j.data, j.wake, left + 5 * NSEC_PER_SEC,
					&rep->loader_tid, rep->message, sizeof(rep->message));
		}
		rep->load_ns = now_monotonic_ns() - start;
	}
	rep->stop_ns = j.t.stop_ns;
	if (j.t.died_status >= 0) {
		rep->died_status = j.t.died_status;
		snprintf(rep->died_doing, sizeof(rep->died_doing), "%s", j.t.doing ? j.t.doing : "");
	} else if (r < 0 && (rep->died_status = proc_exit_status(pid)) >= 0) {
		/* gone while the loader thread ran dlopen, or between our calls */
		snprintf(rep->died_doing, sizeof(rep->died_doing), "%s", j.data ?
			 "dlopen on the thread it started" : "the injection");
	}
	sigprocmask(SIG_SETMASK, &oldmask, NULL);
out:
	safepoint__free(j.sp);
	if (j.t.mem_fd >= 0)
		close(j.t.mem_fd);
	free(j.lib);
	return r;
}
