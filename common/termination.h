/* SPDX-License-Identifier: MIT */
/*
 * The injector's result, as it writes it to /dev/termination-log before exiting and as the
 * controller reads it back from the container's terminated state (schema
 * "aiprof.termination/v1", documented in controller/README.md):
 *
 *   {"artifacts":[{"name":"timeline.json.gz","url":"s3://b/p/timeline.json.gz",
 *                  "size":123,"sha256":"<64 hex>"}],
 *    "summary":{"processes":1,"events":1234,"dropped":0},
 *    "findings":[{"category":"SyncCheckpoint","severity":"warning"}],
 *    "error":"what went wrong, when it did"}
 *
 * All members are optional; unknown members are ignored (newer injectors). The whole message
 * stays under TERMINATION_MAX bytes (the kubelet truncates at 4096). The parser is strict
 * about what it passes on to a session's status: names, URLs, categories and severities are
 * checked against small character sets, the error text has control characters replaced and
 * is truncated. Outside input: tests/fuzz/fuzz_termination.c.
 */
#ifndef AIPROF_TERMINATION_H
#define AIPROF_TERMINATION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TERMINATION_MAX 4096
#define TERM_MAX_ARTIFACTS 24
#define TERM_MAX_FINDINGS 24
#define TERM_MAX_SUMMARY 24
#define TERM_URL_MAX 1100
#define TERM_ERROR_MAX 512

struct term_artifact {
	char name[128];          /* [A-Za-z0-9._/-], no "..", not starting with '/' */
	char url[TERM_URL_MAX];  /* s3://... or https://..., printable, no spaces; "" (absent
	                          * from the message) when the artifact stayed in a local
	                          * folder (`aiprof profile -o DIR`, never the controller's) */
	uint64_t size;           /* bytes */
	char sha256[65];         /* 64 lower-case hex, or "" when not given */
};

struct term_finding {
	char category[64];       /* [A-Za-z0-9._-] */
	char severity[16];       /* Info, Warning or Critical (the CRD's enum): the message's
	                          * info/warning/critical/error in any case; anything else Info */
};

struct term_count {
	char key[64];            /* [A-Za-z0-9_] */
	uint64_t value;
};

struct termination {
	struct term_artifact artifacts[TERM_MAX_ARTIFACTS];
	size_t n_artifacts;
	struct term_count summary[TERM_MAX_SUMMARY];
	size_t n_summary;
	struct term_finding findings[TERM_MAX_FINDINGS];
	size_t n_findings;
	char error[TERM_ERROR_MAX];   /* "" when no error */
};

/*
 * Parses msg[0..len). Returns 0 and fills *t (which the caller allocates: it is ~40 KB),
 * -E2BIG (longer than TERMINATION_MAX), -EBADMSG (not a JSON object), -EINVAL (a member of
 * the wrong type or with characters it cannot have, too many entries); why says which.
 * *t is zeroed first.
 */
int termination__parse(const char *msg, size_t len, struct termination *t, char *why,
		       size_t whylen);

/*
 * Writes t as a compact message into buf (NUL-terminated). Returns the length, or -E2BIG
 * when it would not fit in min(len, TERMINATION_MAX) bytes (the writer's cue to drop
 * findings or artifacts it can list elsewhere, such as in manifest.json).
 */
int termination__format(const struct termination *t, char *buf, size_t len);

#endif
