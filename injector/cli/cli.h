/* SPDX-License-Identifier: MIT */
/*
 * The commands of `aiprof`: each parses its options and calls one function per stage of the
 * folders below (profile.c, merge.c, upload.c), and ends the way the controller reads: an
 * exit code and, with --termination-log, the termination message (result.c).
 */
#ifndef AIPROF_CLI_H
#define AIPROF_CLI_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include "artifacts/termlog.h"   /* the exit codes, the termination message */
#include "target/container.h"     /* CONTAINER_ID_MAX */

int cmd_profile(int argc, char **argv);
/* aiprof record [profile options] -- CMD: CMD started and recorded from its first
 * instruction (profile.c) */
int cmd_record(int argc, char **argv);
int cmd_merge(int argc, char **argv);
/* `aiprof upload DIR s3://bucket/prefix [options]`: exit 0, 2 (usage or configuration:
 * bad URL, no credentials) or 7 (the upload failed; the folder is kept). */
int cmd_upload(int argc, char **argv);

/* `aiprof stacks`: every thread of running processes, nothing stopped or loaded. */
int cmd_stacks(int argc, char **argv);

/* The processes a command looks at (targets.c). */
#define CLI_MAX_TARGETS 256
struct cli_targets {
	pid_t pids[CLI_MAX_TARGETS];
	size_t npids;
	char container_id[CONTAINER_ID_MAX + 1];
	const char *container_name, *match;
};

#define CLI_TARGET_LONG_OPTIONS \
	{ "pid", required_argument, NULL, 'p' }, \
	{ "container-id", required_argument, NULL, 'I' }, \
	{ "container-name", required_argument, NULL, 'K' }, \
	{ "match", required_argument, NULL, 'X' }

#define CLI_NOT_TARGET_OPTION (-1)
struct cli_result;
/* Takes option c ('p', 'I', 'K', 'X' of CLI_TARGET_LONG_OPTIONS): EXIT_OK or the exit code
 * of a usage error (said through res); CLI_NOT_TARGET_OPTION for any other option. */
int cli_target_option(struct cli_result *res, struct cli_targets *t, int c, const char *arg);
/*
 * After the options: exactly one way of naming the processes, --match only with a
 * container; a container's processes found and chosen (--match, else those that loaded the
 * CUDA libraries, else the main process) into t->pids. Returns an exit code.
 */
int cli_targets_resolve(struct cli_result *res, struct cli_targets *t, const char *command);
/* --unwind cfi|fp into the bytes of user stack the eBPF side copies (0: frame pointers
 * only). EXIT_OK, or the usage error's exit code. */
int cli_unwind_option(struct cli_result *res, const char *arg, uint32_t *ret_bytes);
/* --python-names qualified|short (py_set_short_names). EXIT_OK, or the usage error's. */
int cli_python_names_option(struct cli_result *res, const char *arg);
#define CLI_PYTHON_NAMES_HELP \
	"      --python-names qualified|short  Python frames by their qualified name\n" \
	"                             (default: 'Model.forward', 'f.<locals>.<listcomp>') or\n" \
	"                             the function's own ('forward', '<listcomp>')\n"

/*
 * Where unwind rules are shared with the node's other injectors (--unwind-cache DIR|none):
 * the default is $AIPROF_UNWIND_CACHE, else CLI_UNWIND_CACHE_DEFAULT; NULL: none.
 */
#define CLI_UNWIND_CACHE_DEFAULT "/var/cache/aiprof/unwind"
const char *cli_unwind_cache(const char *arg);

/* Exit code for a negative errno from target checks or injection. */
int exit_code_for(int err);

/* How a command ended, for its termination message. */
struct cli_result {
	char error[TERM_ERROR_MAX];     /* the first error */
	struct termination *term;       /* counts and findings; NULL without --termination-log */
	char outdir[PATH_MAX];          /* artifacts written there ("" until they are): a copy,
					 * read after the command's own buffers are gone */
	bool to_s3;                     /* -o s3://: only what was uploaded counts as artifacts */
	bool uploaded;                  /* and uploaded (outdir/manifest.json lists them) */
};

/* Logs the error, keeps the first one for the termination message, returns rc. errno is set
 * from err (a negative errno, or 0) for %m. */
__attribute__((format(printf, 4, 5)))
int cli_fail(struct cli_result *res, int rc, int err, const char *fmt, ...);

/*
 * Runs a command's body with res->term allocated when --termination-log PATH was given (it is
 * taken before the options are parsed, so that usage errors are reported too), then writes
 * the termination message: the artifacts (uploaded, or local), the exit code, the first error.
 */
int cli_run(int argc, char **argv, const char *command,
	    int (*body)(int argc, char **argv, struct cli_result *res));

#endif
