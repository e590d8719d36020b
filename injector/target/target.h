/* SPDX-License-Identifier: MIT */
#ifndef AIPROF_TARGET_H
#define AIPROF_TARGET_H

#include <stddef.h>
#include <stdbool.h>
#include <sys/types.h>
#include "model/profile.h"

/*
 * Checks that pid can be profiled at all before anything touches it. Returns 0, or a
 * negative errno with a message that says what is wrong and what to do:
 *   -ESRCH no such process, -EPERM not allowed, -ENOEXEC static / no libc,
 *   -EPROTONOSUPPORT not an x86_64 process, -EINVAL it is ourselves.
 */
int target_preflight(pid_t pid, char *msg, size_t len);

/* After ptrace said EPERM: works out which permission is missing, into msg. */
void target_explain_eperm(pid_t pid, char *msg, size_t len);

/* Has pid exited (no /proc entry, or a zombie waiting for its parent)? */
bool target_exited(pid_t pid);

/* Fills comm and cmdline of t from /proc, and takes hold of the process: a pidfd and its
 * start time, so that a pid reused by another process later is told apart. */
void target_read_identity(struct target *t);
/* Is t's pid still the process chosen? false once that one has exited, even when its pid
 * now names another (the pidfd says the first is gone, or the start time differs). */
bool target_same_process(const struct target *t);

/* Re-reads /proc/PID/task so library tids (pid namespace) map to host tids and names. */
void target_refresh_threads(struct target *t);
/* The host tid of the thread of pid whose id in the process's own pid namespace is ns_tid;
 * 0 if it has none (it exited). */
pid_t proc_host_tid(pid_t pid, uint32_t ns_tid);
/* The wait(2) status of pid if it is a zombie (field 52 of /proc/PID/stat), else -1. */
int proc_exit_status(pid_t pid);
/* "killed by SIGKILL", "killed by SIGABRT (core dumped)", "exited with code 3" */
void proc_status_text(int status, char *buf, size_t len);

/*
 * Does a /proc/PID/status text say the thread runs with a CET shadow stack (the
 * "x86_Thread_features:" line lists "shstk")? Such a thread's returns are checked against
 * the shadow stack, which knows nothing of a remote call's return address.
 */
bool target_status_has_shstk(const char *status);

/* RANK from the process's environment (torchrun, mpirun and the operators set it), or -1.
 * The rest of the environment is read and wiped, never kept. */
int target_env_rank(pid_t pid);

#endif
