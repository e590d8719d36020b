/* SPDX-License-Identifier: MIT */
/*
 * Decoding CPython's structures out of another process's memory: thread states, code
 * objects (name, file, first line, line table), strings. Pure: all memory comes through
 * a reader callback, so the same code runs on a live target (process_vm_readv) and on a
 * test's or fuzzer's buffer. Every read is bounded and checked; garbage in gives an error,
 * never a crash (tests/fuzz/fuzz_pyframes.c).
 */
#ifndef AIPROF_EBPF_PYFRAMES_H
#define AIPROF_EBPF_PYFRAMES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <linux/types.h>

#include "bpf/stack.h"
#include "pyoffsets.h"

/* Reads len bytes at addr of the target into buf: 0, or a negative errno (-EFAULT). */
typedef int (*py_read_fn)(void *ctx, uint64_t addr, void *buf, size_t len);

struct py_reader {
	py_read_fn read;
	void *ctx;
};

#define PY_STR_MAX      512        /* bytes of UTF-8 kept of a name or file name */
#define PY_LINETABLE_MAX (1u << 20)
#define PY_THREADS_MAX  4096       /* thread states walked per interpreter */
#define PY_INTERPS_MAX  64

/*
 * A str object as UTF-8 into buf (NUL-terminated, truncated to len). Compact strings of
 * every kind (ASCII, Latin-1, UCS-2, UCS-4); anything else is -EINVAL.
 */
int py_read_str(const struct py_reader *r, const struct py_version_offsets *o, uint64_t addr,
		char *buf, size_t len);

struct py_code {
	char qualname[PY_STR_MAX];
	char filename[PY_STR_MAX];
	int firstlineno;
	uint8_t *linetable;        /* malloc'd; free with py_code__clear() */
	size_t linetable_len;
	uint64_t bytecode;         /* address of the first code unit (co_code_adaptive) */
};

/*
 * Reads the code object at addr. code_type is the address of PyCode_Type in the target:
 * an object of any other type is -EINVAL (a frame's code pointer can be stale). The
 * qualified name falls back to co_name. Returns 0 or a negative errno; on failure *ret is
 * left empty (nothing to free).
 */
int py_read_code(const struct py_reader *r, const struct py_version_offsets *o,
		 uint64_t code_type, uint64_t addr, struct py_code *ret);
void py_code__clear(struct py_code *c);

/*
 * The source line of the instruction at byte offset addr of a code object's bytecode,
 * from its location table (the 3.11+ format, PEP 626/657). -1 if the table says the
 * instruction has no line or addr is beyond it.
 */
int py_linetable_line(const uint8_t *tab, size_t len, int firstlineno, uint64_t addr);

struct py_tstate {
	uint64_t tstate;           /* PyThreadState * */
	uint64_t native_tid;       /* gettid() of the thread, in the target's pid namespace */
};

/*
 * Every thread state of every interpreter reachable from _PyRuntime at runtime. Fills at
 * most max entries; *ret_n is how many. Thread states whose interp pointer does not point
 * back at their interpreter are skipped (a torn read). A list that could not be read to
 * its end (a thread state freed under the walk) is walked again, a few times: -EAGAIN if
 * it never was, with what was read in out. Otherwise 0, or the first read error if not
 * even the interpreter list could be read.
 */
int py_list_threads(const struct py_reader *r, const struct py_version_offsets *o,
		    uint64_t runtime, struct py_tstate *out, size_t max, size_t *ret_n);

/*
 * The frames of the thread whose PyThreadState is at tstate, innermost first, exactly as
 * the BPF walker (bpf/pystack.bpf.h) records them: for a thread that is not running (one
 * still asleep when the window closes). Returns how many were written to out (at most
 * max); *ret_status is an enum ebpf_py_status. With outer (a power of two, at most max) the
 * walk goes on to EBPF_PY_WALK_MAX frames: the first max - outer are kept in order, the last
 * outer in a ring after them (the innermost of those at max - outer + *ret_cut % outer),
 * and *ret_cut counts those between; with outer 0 a stack deeper than max is TRUNCATED.
 */
size_t py_walk_frames(const struct py_reader *r, const struct py_version_offsets *o,
		      uint64_t tstate, struct ebpf_py_frame *out, size_t max, size_t outer,
		      uint32_t *ret_cut, uint32_t *ret_status);

/*
 * The `threading` name of the thread whose PyThreadState is at tstate (its Thread's _name,
 * "CustomThreadName-3"), as UTF-8 into buf: read from the first local (self) of its
 * outermost frame, Thread._bootstrap in threading.py, and that object's instance values or
 * dict. -ENOENT for a thread threading did not start (the main thread, a thread of C code)
 * or one not yet in _bootstrap; another negative errno when something read was not what
 * it should be (nothing is guessed: a wrong offset gives no name, never a wrong one).
 */
int py_thread_name(const struct py_reader *r, const struct py_version_offsets *o,
		   uint64_t code_type, uint64_t tstate, char *buf, size_t len);

/*
 * The name of the interpreter's main thread (threading._main_thread: "MainThread", or what
 * the program renamed it to) and its native tid, found from _PyRuntime through
 * sys.modules["threading"]. -ENOTSUP where the version's interp->modules offset is not
 * known; -ENOENT before threading was imported; another negative errno for what was not
 * what it should be.
 */
int py_main_thread(const struct py_reader *r, const struct py_version_offsets *o,
		   uint64_t runtime, uint64_t *ret_tid, char *buf, size_t len);

/* "qualname (file:line)", or "qualname (file)" when line < 0, into buf; with short_name
 * the qualified name's last part (the function's own name: "<listcomp>" for
 * "f.<locals>.<listcomp>", "run" for "Thread.run"), as most Python profilers print it. */
void py_format_frame(const struct py_code *c, int line, bool short_name, char *buf, size_t len);
/* The last dotted part of a qualified name (a pointer into it). */
const char *py_short_name(const char *qualname);

#endif
