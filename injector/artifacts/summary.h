/* SPDX-License-Identifier: MIT */
/* summary.json (summary.c, summary_diag.c): the window's figures for programs. */
#ifndef AIPROF_SUMMARY_H
#define AIPROF_SUMMARY_H

struct profile;

/* Writes the summary of p to path. 0 or a negative errno. */
int summary_write(const struct profile *p, const char *path);

#endif
