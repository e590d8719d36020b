/* SPDX-License-Identifier: MIT */
/*
 * Uploading an artifact folder to S3-compatible storage (the `aiprof upload` command is
 * cli/upload.c).
 *
 * The contract that makes a short-lived injector lose nothing:
 *   1. every regular file under DIR (recursively; names starting with '.' and a top-level
 *      manifest.json are left out) is hashed, and DIR/manifest.json is written: each
 *      artifact's name, object key, URL, size and SHA-256;
 *   2. every artifact is uploaded (multipart above the threshold, parts in parallel, each
 *      request retried with backoff when another try can help), with its SHA-256 stored as
 *      object metadata x-amz-meta-sha256;
 *   3. manifest.json is uploaded LAST: its presence in the bucket means the upload is
 *      complete, and its checksums let anyone verify the objects;
 *   4. nothing in DIR is removed unless o->delete_after is set, and then only after the
 *      server confirmed manifest.json.
 */
#ifndef AIPROF_UPLOAD_H
#define AIPROF_UPLOAD_H

#include <getopt.h>
#include <stdbool.h>
#include <stddef.h>
#include "s3.h"

struct upload_opts {
	struct s3_settings s3;        /* endpoint, region, secret folder, CA bundle, addressing:
	                               * what is not set here comes from the environment */
	struct s3_client_opts client; /* part size, threshold, parallelism, timeouts, retries */
	bool delete_after;            /* remove the uploaded files (and emptied folders) once
	                               * manifest.json is confirmed */
	bool skip_existing;           /* HEAD each object first; one with the same size and
	                               * x-amz-meta-sha256 is not sent again (resuming) */
	bool quiet;                   /* no progress lines (retries are still reported) */
	const struct s3_hooks *hooks; /* tests only (clock, sleep); NULL for the real ones */
};

/* Defaults: environment-driven S3 settings, 16 MiB parts from 16 MiB on, 4 in parallel,
 * 6 tries per request, 30 s stall timeout, Content-MD5, keep local files, no HEAD. */
void upload_opts__init(struct upload_opts *o);

/*
 * Uploads the artifact folder dir to s3url ("s3://bucket/prefix"), following the contract
 * above. Logs progress (log_info) and retries (log_warning), but not the failure: on failure
 * it returns a negative errno and msg holds one line that says what failed, what to check,
 * that the local folder was kept, and the `aiprof upload DIR s3://...` command that resumes.
 * On success msg says what was uploaded where. Never puts a credential in msg or a log.
 *
 * Returns 0; -EINVAL for a bad s3url or S3 configuration (bad endpoint, region, CA bundle,
 * secret folder); -ENOKEY when no credentials were found; -ENODATA when dir has no files;
 * else the errno of the local or remote failure (-EACCES 403, -ENOENT 404 / no such folder,
 * -ETIMEDOUT, -ECONNRESET, -ECONNREFUSED, -EBUSY throttled, -EIO 5xx, -ESTALE a file changed
 * during the upload, ...).
 *
 * How `aiprof profile -o s3://...` uses it: write the artifacts into a local staging folder
 * (e.g. ./aiprof-out/<UTC time>/), then
 *     r = upload_artifacts(staging, s3url, &o, msg, sizeof(msg));
 *     if (r < 0) { log_error("%s", msg); return EXIT_OUTPUT; }
 *     log_info("%s", msg);
 */
int upload_artifacts(const char *dir, const char *s3url, const struct upload_opts *o,
		     char *msg, size_t msglen);


/*
 * The upload flags, for another command's getopt_long table (`aiprof profile` can splice
 * UPLOAD_LONG_OPTIONS into its own and pass unknown option values to
 * upload_opts__parse_option()). Values start at UPLOAD_OPT_FIRST, clear of short options.
 */
enum {
	UPLOAD_OPT_FIRST = 0x5300,
	UPLOAD_OPT_ENDPOINT = UPLOAD_OPT_FIRST,
	UPLOAD_OPT_REGION,
	UPLOAD_OPT_SECRET_DIR,
	UPLOAD_OPT_CA_BUNDLE,
	UPLOAD_OPT_PATH_STYLE,
	UPLOAD_OPT_VIRTUAL_HOSTED,
	UPLOAD_OPT_PART_SIZE,
	UPLOAD_OPT_THRESHOLD,
	UPLOAD_OPT_PARALLEL,
	UPLOAD_OPT_MAX_ATTEMPTS,
	UPLOAD_OPT_STALL_TIMEOUT,
	UPLOAD_OPT_CONNECT_TIMEOUT,
	UPLOAD_OPT_OBJECT_TIMEOUT,
	UPLOAD_OPT_CHECKSUM,
	UPLOAD_OPT_DELETE_AFTER,
	UPLOAD_OPT_FORCE,
	UPLOAD_OPT_LAST,
};

#define UPLOAD_LONG_OPTIONS \
	{ "endpoint-url", required_argument, NULL, UPLOAD_OPT_ENDPOINT }, \
	{ "region", required_argument, NULL, UPLOAD_OPT_REGION }, \
	{ "secret-dir", required_argument, NULL, UPLOAD_OPT_SECRET_DIR }, \
	{ "ca-bundle", required_argument, NULL, UPLOAD_OPT_CA_BUNDLE }, \
	{ "path-style", no_argument, NULL, UPLOAD_OPT_PATH_STYLE }, \
	{ "virtual-hosted", no_argument, NULL, UPLOAD_OPT_VIRTUAL_HOSTED }, \
	{ "part-size", required_argument, NULL, UPLOAD_OPT_PART_SIZE }, \
	{ "multipart-threshold", required_argument, NULL, UPLOAD_OPT_THRESHOLD }, \
	{ "parallel", required_argument, NULL, UPLOAD_OPT_PARALLEL }, \
	{ "max-attempts", required_argument, NULL, UPLOAD_OPT_MAX_ATTEMPTS }, \
	{ "stall-timeout", required_argument, NULL, UPLOAD_OPT_STALL_TIMEOUT }, \
	{ "connect-timeout", required_argument, NULL, UPLOAD_OPT_CONNECT_TIMEOUT }, \
	{ "object-timeout", required_argument, NULL, UPLOAD_OPT_OBJECT_TIMEOUT }, \
	{ "checksum", required_argument, NULL, UPLOAD_OPT_CHECKSUM }, \
	{ "delete-after", no_argument, NULL, UPLOAD_OPT_DELETE_AFTER }, \
	{ "force", no_argument, NULL, UPLOAD_OPT_FORCE }

/* The help text of those flags, one per line, indented by two spaces. */
extern const char upload_options_help[];

/*
 * Applies one option from UPLOAD_LONG_OPTIONS. Returns 0; -ENOENT when opt is not an upload
 * option; -EINVAL with msg set for a bad value. arg must outlive o (getopt's optarg does).
 */
int upload_opts__parse_option(struct upload_opts *o, int opt, const char *arg, char *msg,
			      size_t msglen);

#endif
