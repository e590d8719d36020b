/* SPDX-License-Identifier: MIT */
/*
 * Whether a stopped thread of the target may be made to call into its C library: judged
 * from the thread's whole stack, walked by CFI from its registers, not from the system call
 * it sits in.
 *
 * The remote calls the injector makes on a hijacked thread (mmap, mprotect, memfd_create
 * through syscall(), pthread_create) run libc code that needs malloc (the new thread's TLS
 * and descriptor), the stack cache and the loader's TLS tables. They are safe only where
 * the thread is in none of them, and in no other libc function that might be half-way
 * through changing their state. Where the stack proves it, a call is allowed:
 *
 *   leaf        the innermost frames may be libc's only when the thread is blocked in a
 *               system call of an allow-list and the outermost of those frames lies inside
 *               a public function of the list below (read, poll, pthread_cond_wait, ...):
 *               a function that, blocked there, holds no libc state of its own. A thread
 *               running libc code, or blocked inside any other libc function (opendir,
 *               malloc's arena lock, fopen, getaddrinfo, ...) is not at a safe point.
 *   middle      then only frames of the program and its libraries: no libc, no libpthread,
 *               no libdl, and no dynamic loader anywhere (a thread inside dlopen(), or
 *               running a constructor under it, is not at a safe point), no signal
 *               trampoline (a handler may have interrupted malloc);
 *   base        the outermost frames are libc's thread or process start (start_thread,
 *               clone3, __libc_start_main), with at most the executable's _start below: a
 *               stack with no libc frame there belongs to a process whose C library has not
 *               started (a thread stopped at _start after an exec);
 *   whole       the walk reaches the root the CFI marks, by CFI alone: a stack through JIT
 *               code, code without CFI, or deeper than the walk's bound proves nothing and
 *               is not used.
 *
 * What does not pass is tried again a moment later, or on another thread: blocked
 * threads of a running program pass within milliseconds.
 */
#ifndef AIPROF_SAFEPOINT_H
#define AIPROF_SAFEPOINT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "target/unwind.h"

#define SAFEPOINT_MAX_FRAMES 1024
#define SAFEPOINT_STACK_COPY (64 * 1024)

/* What a frame's pc is, for the verdict. */
enum sp_code {
	SP_APP = 0,       /* the program, its libraries, libpython, libtorch ... */
	SP_LIBC,          /* libc, libpthread, libdl (musl's libc, which is also its loader) */
	SP_LOADER,        /* glibc's dynamic loader (ld-linux*.so*, ld-2.*.so) */
	SP_OTHER,         /* no file behind it: the vDSO, JIT code, anonymous memory */
};

struct sp_frame {
	enum sp_code code;
	bool leaf_ok;     /* SP_LIBC: inside a public function of the leaf allow-list */
};

/*
 * The verdict on one walked stack (pure: tests/unit/test_safepoint.c). frames[0] is the
 * pc, frames[1..] the callers. in_syscall: the thread is blocked in a system call
 * (syscall_ok: one of the allow-list, with a futex word outside libc). true when a remote
 * call into libc is safe; false with why set ("inside the dynamic loader", ...).
 */
bool safepoint_verdict(const struct sp_frame *frames, size_t n, enum unwind_end end,
		       size_t fp_frames, bool in_syscall, bool syscall_ok, char *why,
		       size_t whylen);

struct safepoint;

/* For pid, whose memory mem_fd reads (borrowed). 0 and *ret (free with safepoint__free),
 * -ENOMEM, or the error reading its maps. */
int safepoint__new(pid_t pid, int mem_fd, struct safepoint **ret);
void safepoint__free(struct safepoint *sp);  /* NULL-safe */

/* Re-reads the maps: modules mapped since (a dlopen that finished meanwhile). */
int safepoint__refresh(struct safepoint *sp);

/* true if addr is in the C library or the loader (their code or data, .bss included). */
bool safepoint__in_libc(const struct safepoint *sp, uint64_t addr);

/*
 * Judges the thread whose registers regs are (stopped; in_syscall and syscall_ok as for
 * safepoint_verdict). where gets a one-line account ("syscall 7 under poll, 23 frames").
 */
bool safepoint__judge(struct safepoint *sp, const struct unwind_regs *regs, bool in_syscall,
		      bool syscall_ok, char *where, size_t wherelen);

/*
 * Reads the unwind tables of the modules the last judgment met unread (it said no because
 * of them): call it with the thread running again, never stopped. Returns how many modules,
 * or -ENOMEM.
 */
int safepoint__warm(struct safepoint *sp);

#endif
