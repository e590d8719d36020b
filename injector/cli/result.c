/* SPDX-License-Identifier: MIT */
/* How every command ends: its first error and its termination message; see cli.h. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "artifacts/termlog.h"
#include "cli.h"

int cli_fail(struct cli_result *res, int rc, int err, const char *fmt, ...)
{
	char msg[TERM_ERROR_MAX];
	va_list ap;

	if (err)
		errno = err < 0 ? -err : err;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	log_error("%s", msg);
	if (!res->error[0])
		snprintf(res->error, sizeof(res->error), "%s", msg);
	return rc;
}

/* --termination-log's value, taken before the options are parsed (NULL when not given). */
static const char *termination_log_arg(int argc, char **argv)
{
	const char *path = NULL;

	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--") == 0)
			break;
		if (strcmp(argv[i], "--termination-log") == 0 && i + 1 < argc)
			path = argv[++i];
		else if (strncmp(argv[i], "--termination-log=", 18) == 0)
			path = argv[i] + 18;
	}
	return path && *path ? path : NULL;
}

static void write_termination(const char *path, const char *command, struct cli_result *res,
			      int rc)
{
	struct termination *t = res->term;
	int r = 0;

	if (res->outdir[0] && res->uploaded)
		r = termlog_uploaded_artifacts(t, res->outdir);
	else if (res->outdir[0] && !res->to_s3)
		r = termlog_local_artifacts(t, res->outdir);
	if (r < 0)
		log_warning_errno(r, "the termination message lists no artifacts: cannot read "
				  "them back from %s: %m", res->outdir);
	termlog_count(t, "exit_code", (uint64_t)rc);
	if (rc != EXIT_OK && !res->error[0])
		snprintf(res->error, sizeof(res->error), "aiprof %s exited with code %d", command, rc);
	snprintf(t->error, sizeof(t->error), "%s", res->error);
	r = termlog_write(path, t);
	if (r < 0)
		log_error_errno(r, "cannot write the termination message to %s: %m", path);
}

int cli_run(int argc, char **argv, const char *command,
	    int (*body)(int argc, char **argv, struct cli_result *res))
{
	const char *path = termination_log_arg(argc, argv);
	struct cli_result res = { .term = NULL };
	int rc;

	if (path) {
		res.term = calloc(1, sizeof(*res.term));
		if (!res.term)
			return log_error_errno(ENOMEM, "out of memory"), EXIT_FAILURE_;
	}
	rc = body(argc, argv, &res);
	if (path)
		write_termination(path, command, &res, rc);
	free(res.term);
	return rc;
}
