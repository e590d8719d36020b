/* SPDX-License-Identifier: MIT */
/*
 * CPython in a target process, seen from outside: which version, where its runtime state
 * is, which offsets apply, its threads' PyThreadStates, and names for the (code object,
 * instruction) pairs the BPF walker records. No USDT, no change to the interpreter: only
 * symbols (_PyRuntime, Py_Version, PyCode_Type) and reads of its memory.
 */
#ifndef AIPROF_EBPF_PYTHON_H
#define AIPROF_EBPF_PYTHON_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "pyframes.h"

struct py_proc;

/*
 * Looks for CPython in pid. Returns 0 and *ret (free with py_proc__free()); -ENOENT if
 * the process has no CPython; -EPROTONOSUPPORT for a version the offsets table does not
 * cover, a free-threaded build, or offsets that do not match what is in memory; -EAGAIN for
 * an interpreter with no thread state yet (starting up: try again later); another
 * negative errno if it could not be read. On failure `why` says what, in words.
 */
int py_proc__new(pid_t pid, char *why, size_t whylen, struct py_proc **ret);
void py_proc__free(struct py_proc *p);  /* NULL-safe */

const char *py_proc__version(const struct py_proc *p);         /* "3.11.2" */
const char *py_proc__offsets_source(const struct py_proc *p);  /* "table" or "_Py_DebugOffsets" */
const struct py_version_offsets *py_proc__offsets(const struct py_proc *p);

/* The interpreter's thread states now (tids as the target sees them). */
int py_proc__threads(struct py_proc *p, struct py_tstate *out, size_t max, size_t *ret_n);

/* The `threading` name of the thread with this PyThreadState and native tid (in the
 * target's pid namespace): py_thread_name(), or for the main thread py_main_thread(). */
int py_proc__thread_name(struct py_proc *p, uint64_t tstate, uint64_t native_tid, char *buf,
			 size_t len);

/* The frames of a thread that is not running into st's py part, as the BPF walker would
 * record them (bpf/stack.h: the inner frames, the outer ones, py_cut between). */
void py_proc__walk(struct py_proc *p, uint64_t tstate, struct ebpf_stacks *st);

/* Frames named by their function's own name ("<listcomp>") instead of the qualified one
 * ("f.<locals>.<listcomp>", the default), from now on, for every process. */
void py_set_short_names(bool on);

/*
 * "qualname (file:line)" for a frame the BPF walker recorded. Code objects are read once
 * and cached. -EINVAL if code is not a code object (then the frame is not shown).
 */
int py_proc__frame(struct py_proc *p, uint64_t code, uint64_t instr, char *buf, size_t len);

#endif
