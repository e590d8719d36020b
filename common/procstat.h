/* SPDX-License-Identifier: MIT */
/*
 * /proc/PID/stat, the fields aiprof reads from a line whose process name (field 2, in
 * parentheses) is the target's to choose: it may hold spaces, parentheses and newlines, so
 * fields are counted from the last ')'.
 */
#ifndef AIPROF_PROCSTAT_H
#define AIPROF_PROCSTAT_H

#include <stddef.h>
#include <stdint.h>

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

#endif
