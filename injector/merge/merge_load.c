/* SPDX-License-Identifier: MIT */
/*
 * Loading one rank's artifacts for `aiprof merge` from a folder or an s3:// prefix:
 * timeline.json.gz (gunzipped here, at most 2 GiB) and summary.json (at most 64 MiB), then
 * parsed by merge_read.c.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"
#include "s3.h"
#include "s3url.h"
#include "merge.h"

#define TIMELINE_MAX (2048ULL << 20)  /* decompressed */
#define SUMMARY_MAX  (64U << 20)
#define STACKS_MAX   (64U << 20)

/* ---- loading from a folder or s3:// --------------------------------------------------- */

static int read_file(const char *path, size_t max, char **ret, size_t *ret_len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	struct stat st;
	char *buf;
	size_t len = 0;

	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0 || (size_t)st.st_size > max) {
		close(fd);
		return -EFBIG;
	}
	buf = malloc((size_t)st.st_size + 1);
	if (!buf) {
		close(fd);
		return -ENOMEM;
	}
	while (len < (size_t)st.st_size) {
		ssize_t n = read(fd, buf + len, (size_t)st.st_size - len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		len += (size_t)n;
	}
	close(fd);
	buf[len] = 0;
	*ret = buf;
	*ret_len = len;
	return 0;
}

/* One artifact of src: DIR/name, or the object PREFIX/name. */
static int fetch(const char *src, const char *name, size_t max, struct s3_client *s3, char **ret,
		 size_t *ret_len, char *why, size_t whylen)
{
	struct s3_location loc = { 0 };
	struct s3_error err = { 0 };
	char path[4200];
	int r;

	if (!s3url_is_s3(src)) {
		snprintf(path, sizeof(path), "%s/%s", src, name);
		r = read_file(path, max, ret, ret_len);
		snprintf(why, whylen, "%s", r == -EFBIG ? "too large" : strerror(-r));
		return r;
	}
	if (!s3) {
		snprintf(why, whylen, "no S3 client");
		return -EINVAL;
	}
	r = s3_location__parse(src, &loc);
	if (r < 0) {
		snprintf(why, whylen, "not a valid s3://BUCKET/PREFIX");
		return r;
	}
	snprintf(path, sizeof(path), "%s%s%s", loc.prefix, loc.prefix[0] ? "/" : "", name);
	r = s3_client__get_buffer(s3, loc.bucket, path, max, ret, ret_len, &err);
	if (r == -ENOENT)
		snprintf(why, whylen, "no such object s3://%s/%s", loc.bucket, path);
	else if (r == -EFBIG)
		snprintf(why, whylen, "too large");
	else if (r < 0)
		s3_error__describe(&err, NULL, why, whylen);
	s3_location__clear(&loc);
	return r;
}

int merge_source__load(struct merge_source *s, const char *src, struct s3_client *s3, char *msg, size_t msglen)
{
	char *gz = NULL, *tl = NULL, *sum = NULL, why[600] = "";
	size_t gz_len = 0, tl_len = 0, sum_len = 0;
	int r;

	memset(s, 0, sizeof(*s));
	r = fetch(src, "timeline.json.gz", TIMELINE_MAX / 4, s3, &gz, &gz_len, why, sizeof(why));
	if (r < 0) {
		snprintf(msg, msglen, "%s: %s timeline.json.gz (%s)%s", src, r == -ENOENT ? "no" : "cannot read",
			 why, r == -ENOENT ? ": give the output folder or s3:// prefix of one rank's `aiprof "
			 "profile` (did that rank's profile fail?)" : "");
		return r;
	}
	r = merge_gunzip((const unsigned char *)gz, gz_len, TIMELINE_MAX, &tl, &tl_len);
	free(gz);
	if (r < 0) {
		snprintf(msg, msglen, "%s: timeline.json.gz: %s", src, r == -EBADMSG ? "not complete gzip data" :
			 r == -EFBIG ? "larger than 2 GiB uncompressed" : strerror(-r));
		return r;
	}
	r = fetch(src, "summary.json", SUMMARY_MAX, s3, &sum, &sum_len, why, sizeof(why));
	if (r < 0) {
		snprintf(msg, msglen, "%s: %s summary.json (%s): the rank's artifacts are incomplete", src,
			 r == -ENOENT ? "no" : "cannot read", why);
		free(tl);
		return r;
	}
	r = merge_source__parse(s, src, tl, tl_len, sum, sum_len, msg, msglen);
	free(sum);
	if (r < 0)
		return r;
	/* optional: windows without the task iterator have none */
	r = fetch(src, "stacks.json", STACKS_MAX, s3, &s->stacks, &s->stacks_len, why, sizeof(why));
	if (r < 0 && r != -ENOENT)
		log_warning("%s: stacks.json not read (%s): the ranks are not grouped by stack", src,
			    why);
	return 0;
}
