/* SPDX-License-Identifier: MIT */
/*
 * `aiprof profile --termination-log PATH`: the injector's result for the controller, in the
 * aiprof.termination/v1 schema (common/termination.h), written as the last act of every
 * run, successful or not.
 *
 * What it holds: the artifacts (name, URL, size, SHA-256) as they were uploaded (read back
 * from DIR/manifest.json, itself listed first) or, for a local folder, as they were written
 * (no URL: the controller reads object storage only); summary counts; the findings
 * (category, severity); the error, if any, with every credential the process can see
 * replaced by "[redacted]".
 *
 * Size: the kubelet keeps 4096 bytes. A message that would be longer loses its findings
 * first ("findings_omitted": N), then its artifacts except manifest.json
 * ("artifacts_omitted": N; all are in the manifest), then manifest.json too, and last the
 * tail of the error text.
 */
#ifndef AIPROF_TERMLOG_H
#define AIPROF_TERMLOG_H

#include <stddef.h>
#include <stdint.h>
#include "common/termination.h"

/* Exit codes of the aiprof CLI (documented in --help and README.md). */
enum {
	EXIT_OK = 0,
	EXIT_FAILURE_ = 1,    /* anything not listed below */
	EXIT_USAGE = 2,       /* bad command line */
	EXIT_NO_TARGET = 3,   /* no such process, or it exited */
	EXIT_PERMISSION = 4,  /* not allowed to ptrace the target */
	EXIT_UNSUPPORTED = 5, /* static binary, no libc, not x86_64 */
	EXIT_INJECT = 6,      /* injection or collection failed */
	EXIT_OUTPUT = 7,      /* artifacts could not be written */
};

/* Adds (or replaces) a summary count; silently ignored beyond TERM_MAX_SUMMARY. */
void termlog_count(struct termination *t, const char *key, uint64_t value);

/* Adds a finding; -E2BIG when TERM_MAX_FINDINGS are there already (counted by the caller). */
int termlog_finding(struct termination *t, const char *category, const char *severity);

/*
 * Lists every regular file under dir (recursively, names starting with '.' left out) as an
 * artifact without a URL (name relative to dir), sorted by name. Returns the number of
 * files found (those beyond TERM_MAX_ARTIFACTS are counted in "artifacts_omitted"), or a
 * negative errno.
 */
int termlog_local_artifacts(struct termination *t, const char *dir);

/*
 * Lists what the upload put in the bucket: dir/manifest.json first (its URL next to the
 * others'), then each artifact the manifest names. Returns the count or a negative errno
 * (-ENOENT no manifest, -EBADMSG not one).
 */
int termlog_uploaded_artifacts(struct termination *t, const char *dir);

/* Replaces every occurrence of a credential in s (NUL-terminated) by "[redacted]": the
 * values of AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN and AWS_ACCESS_KEY_ID and of the same
 * files in $AIPROF_S3_SECRET_DIR. */
void termlog_redact(char *s, size_t size);

/*
 * Formats t into buf (at least TERMINATION_MAX bytes), dropping what does not fit as
 * described above (t is changed accordingly: the error made valid UTF-8 first, each byte
 * that is not replaced by '?', and shortened at a character's boundary). Returns the
 * length, or a negative errno.
 */
int termlog_fit(struct termination *t, char *buf, size_t len);

/* termlog_redact() on the error, termlog_fit(), then writes path (truncating it). */
int termlog_write(const char *path, struct termination *t);

#endif
