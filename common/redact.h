/* SPDX-License-Identifier: MIT */
/*
 * A profiled process's command line as aiprof shows it (summary.json, its log, the
 * termination message, a controller's status): values that look like secrets are replaced
 * by "[redacted]" — the value of an option whose name says password, passwd, token, secret,
 * credential or key (`--password=V`, `--api-key V`, `-token=V`), of an environment-style
 * argument whose name does (`AWS_SECRET_ACCESS_KEY=V`, `HF_TOKEN=V`), and the password of a
 * URL's user info (`https://user:V@host`). What a process is (its program, its other
 * arguments) stays readable.
 */
#ifndef AIPROF_REDACT_H
#define AIPROF_REDACT_H

#include <stddef.h>

/* In place, on a space-joined command line (NUL-terminated, at most size bytes with the NUL). */
void redact_cmdline(char *s, size_t size);

#endif
