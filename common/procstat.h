/* SPDX-License-Identifier: MIT */
/*
 * /proc/PID/stat, the fields aiprof reads from a line whose process name (field 2, in
 * parentheses) is the target's to choose: it may hold spaces, parentheses and newlines, so
 * fields are counted from the last ')'. And /proc/PID/status, "Key:\tvalue" lines (the
 * kernel escapes a newline in the name, so a key is only ever at a line's start).
 */
#ifndef AIPROF_PROCSTAT_H
#define AIPROF_PROCSTAT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/*
 * The exit status (field 52, as wait(2) gives it) of a process whose stat line is
 * stat[0..len): 0..0xffff for a zombie (state Z or X), -1 for a live process or a line that
 * does not parse. Pure: tests/fuzz/fuzz_procstat.c.
 */
int procstat_exit_status(const char *stat, size_t len);

/*
 * The CPU time the process has had, user and system (fields 14 and 15, in clock ticks of
 * sysconf(_SC_CLK_TCK)), into *ret: 0, or -1 for a line that does not parse. Pure.
 */
int procstat_cpu_ticks(const char *stat, size_t len, uint64_t *ret);

/*
 * The value of "key:" in the status text text[0..len): a pointer to its first character
 * after the blanks, and in *ret_len its length up to the line's end; NULL when no line
 * starts with it. Pure: tests/fuzz/fuzz_procstat.c.
 */
const char *procstatus_value(const char *text, size_t len, const char *key, size_t *ret_len);

/* The number at the start of "key:" in the status text text[0..len), in base 10 or 16, into
 * *ret: 0, or -ENODATA (no such key, or no number there). Pure. */
int procstatus_text_number(const char *text, size_t len, const char *key, int base,
			   long long *ret);

/* /proc/PID/status into buf (NUL-terminated): its length, or -ESRCH (no such process) or
 * another -errno */
ssize_t procstatus_read(pid_t pid, char *buf, size_t size);

/*
 * The number at the start of "key:" of /proc/PID/status (the first one, where there are
 * several: Uid, NSpid), in base 10 or 16, into *ret. 0; -ESRCH: no such process; -ENODATA:
 * no such key or no number there; or another -errno of reading it.
 */
int procstatus_number(pid_t pid, const char *key, int base, long long *ret);

/*
 * How many times thread tid (its name in /proc/PID/task/) of process pid was put on a CPU:
 * the third field of its schedstat, into *ret. 0; -ENOENT: no such thread (any more);
 * another -errno when the kernel does not say (no CONFIG_SCHED_INFO).
 */
int procsched_switches(pid_t pid, const char *tid, uint64_t *ret);

/*
 * The CLOCK_MONOTONIC offset of a time namespace from the text of its
 * /proc/PID/timens_offsets, text[0..len) ("monotonic <s> <ns>" lines), in nanoseconds into
 * *ret: 0, or -ENODATA when no line of it parses. Pure: tests/fuzz/fuzz_procstat.c.
 */
int timens_monotonic_offset(const char *text, size_t len, int64_t *ret);

/*
 * Process pid's time-namespace CLOCK_MONOTONIC offset into *ret: 0 (also when the kernel has
 * no time namespaces: no file, offset 0), or a negative errno (-ESRCH: no such process).
 */
int proc_timens_monotonic(pid_t pid, int64_t *ret);

#endif
