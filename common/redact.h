/* SPDX-License-Identifier: MIT */
/*
 * A profiled process's command line as aiprof shows it (summary.json, its log, the
 * termination message, a controller's status): values that look like secrets are replaced
 * by "[redacted]" — the value of an option whose name says password, passwd, token, secret,
 * credential or key (`--password=V`, `--api-key V`, `-token=V`), of an environment-style
 * argument whose name does (`AWS_SECRET_ACCESS_KEY=V`, `HF_TOKEN=V`), of a JSON member whose
 * name does (`--config={"api_key": "V"}`), of a short option with an attached value whose
 * letter is p (`-pV`, as mysql takes a password), and the password of a URL's user info
 * (`https://user:V@host`). What a process is (its program, its other
 * arguments) stays readable.
 */
#ifndef AIPROF_REDACT_H
#define AIPROF_REDACT_H

#include <stddef.h>
#include <sys/types.h>

/* In place, on a space-joined command line (NUL-terminated, at most size bytes with the NUL):
 * each space-separated word is an argument (a value with spaces is redacted only up to its
 * first space: give redact_argv() the arguments when they are at hand). */
void redact_cmdline(char *s, size_t size);

/*
 * The arguments argv[0..len) (NUL-separated, as /proc/PID/cmdline holds them) redacted and
 * joined by spaces into out (NUL-terminated, at most size bytes with the NUL; what does not
 * fit is cut). Each argument is one value, spaces included. Returns the length.
 */
size_t redact_argv(const char *argv, size_t len, char *out, size_t size);

/* redact_argv() of the file at path (a /proc/PID/cmdline, its first 8 KiB): the length, or
 * -errno (out then ""). */
ssize_t redact_cmdline_file(const char *path, char *out, size_t size);

#endif
