/* SPDX-License-Identifier: MIT */
/* The injector's termination message: collected, fitted into 4096 bytes, written. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <jansson.h>

#include "digest.h"
#include "termlog.h"
#include "utf8.h"

void termlog_count(struct termination *t, const char *key, uint64_t value)
{
	struct term_count *c = NULL;

	for (size_t i = 0; i < t->n_summary && !c; i++)
		if (strcmp(t->summary[i].key, key) == 0)
			c = &t->summary[i];
	if (!c) {
		if (t->n_summary >= TERM_MAX_SUMMARY)
			return;
		c = &t->summary[t->n_summary++];
		snprintf(c->key, sizeof(c->key), "%s", key);
	}
	c->value = value;
}

int termlog_finding(struct termination *t, const char *category, const char *severity)
{
	struct term_finding *f;

	if (t->n_findings >= TERM_MAX_FINDINGS)
		return -E2BIG;
	f = &t->findings[t->n_findings++];
	snprintf(f->category, sizeof(f->category), "%s", category);
	snprintf(f->severity, sizeof(f->severity), "%s", severity);
	return 0;
}

/* SHA-256 (hex) and size of a file. */
static int hash_file(const char *path, char hex[SHA256_HEX_LEN + 1], uint64_t *size)
{
	uint8_t d[SHA256_LEN];
	int fd = open(path, O_RDONLY | O_CLOEXEC), r;

	if (fd < 0)
		return -errno;
	r = sha256_fd(fd, d, size);
	close(fd);
	if (r < 0)
		return r;
	hex_encode(d, sizeof(d), hex);
	return 0;
}

static int cmp_artifact(const void *a, const void *b)
{
	return strcmp(((const struct term_artifact *)a)->name,
		      ((const struct term_artifact *)b)->name);
}

struct walk {
	struct termination *t;
	char root[PATH_MAX];
	size_t found;
};

static int add_file(struct walk *w, const char *path, const char *rel)
{
	struct term_artifact *a;
	int r;

	w->found++;
	if (w->t->n_artifacts >= TERM_MAX_ARTIFACTS || strlen(rel) >= sizeof(a->name))
		return 0;
	a = &w->t->artifacts[w->t->n_artifacts];
	r = hash_file(path, a->sha256, &a->size);
	if (r < 0)
		return r;
	memcpy(a->name, rel, strlen(rel) + 1);
	w->t->n_artifacts++;
	return 0;
}

static int walk_dir(struct walk *w, const char *rel, int depth)
{
	char path[PATH_MAX], sub[PATH_MAX];
	DIR *d;
	struct dirent *de;
	int r = 0;

	if (depth > 8)
		return 0;
	snprintf(path, sizeof(path), "%s%s%s", w->root, rel[0] ? "/" : "", rel);
	d = opendir(path);
	if (!d)
		return -errno;
	while (!r && (de = readdir(d))) {
		struct stat st;
		char full[PATH_MAX];

		if (de->d_name[0] == '.')
			continue;
		snprintf(sub, sizeof(sub), "%s%s%s", rel, rel[0] ? "/" : "", de->d_name);
		snprintf(full, sizeof(full), "%s/%s", w->root, sub);
		if (lstat(full, &st) < 0)
			continue;
		if (S_ISDIR(st.st_mode))
			r = walk_dir(w, sub, depth + 1);
		else if (S_ISREG(st.st_mode))
			r = add_file(w, full, sub);
	}
	closedir(d);
	return r;
}

int termlog_local_artifacts(struct termination *t, const char *dir)
{
	struct walk w = { .t = t };
	size_t before = t->n_artifacts;
	int r;

	if (!realpath(dir, w.root))
		return -errno;
	r = walk_dir(&w, "", 0);
	if (r < 0)
		return r;
	qsort(t->artifacts + before, t->n_artifacts - before, sizeof(t->artifacts[0]),
	      cmp_artifact);
	if (w.found > t->n_artifacts - before)
		termlog_count(t, "artifacts_omitted", w.found - (t->n_artifacts - before));
	return (int)w.found;
}

int termlog_uploaded_artifacts(struct termination *t, const char *dir)
{
	char path[PATH_MAX];
	json_t *m = NULL, *arts, *e;
	const char *loc;
	struct term_artifact *a;
	char msha[SHA256_HEX_LEN + 1];
	size_t i, found = 0;
	uint64_t size = 0;
	int r;

	snprintf(path, sizeof(path), "%s/manifest.json", dir);
	r = hash_file(path, msha, &size);
	if (r < 0)
		return r;
	m = json_load_file(path, 0, NULL);
	arts = json_object_get(m, "artifacts");
	loc = json_string_value(json_object_get(m, "location"));
	if (!json_is_array(arts) || !loc) {
		json_decref(m);
		return -EBADMSG;
	}
	if (t->n_artifacts < TERM_MAX_ARTIFACTS) {
		a = &t->artifacts[t->n_artifacts++];
		snprintf(a->name, sizeof(a->name), "manifest.json");
		snprintf(a->url, sizeof(a->url), "%s%smanifest.json", loc,
			 loc[0] && loc[strlen(loc) - 1] == '/' ? "" : "/");
		a->size = size;
		memcpy(a->sha256, msha, sizeof(msha));
	}
	json_array_foreach(arts, i, e) {
		const char *name = json_string_value(json_object_get(e, "name"));
		const char *url = json_string_value(json_object_get(e, "url"));
		const char *sha = json_string_value(json_object_get(e, "sha256"));
		json_t *sz = json_object_get(e, "size");

		found++;
		if (!name || !url || t->n_artifacts >= TERM_MAX_ARTIFACTS ||
		    strlen(name) >= sizeof(a->name) || strlen(url) >= sizeof(a->url))
			continue;
		a = &t->artifacts[t->n_artifacts++];
		memcpy(a->name, name, strlen(name) + 1);
		memcpy(a->url, url, strlen(url) + 1);
		a->size = json_is_integer(sz) ? (uint64_t)json_integer_value(sz) : 0;
		snprintf(a->sha256, sizeof(a->sha256), "%s", sha && strlen(sha) == 64 ? sha : "");
	}
	json_decref(m);
	if (found + 1 > t->n_artifacts)
		termlog_count(t, "artifacts_omitted", found + 1 - t->n_artifacts);
	return (int)found + 1;
}

static void redact_one(char *s, size_t size, const char *secret)
{
	static const char mark[] = "[redacted]";
	size_t n = strlen(secret), m = sizeof(mark) - 1;
	char *p;

	if (n < 4)
		return;  /* too short to be a credential, and would mangle ordinary words */
	for (char *from = s; (p = strstr(from, secret)); from = p + m) {
		size_t tail = strlen(p + n);

		if ((size_t)(p - s) + m + 1 > size) {
			*p = 0;  /* no room for the mark: cut the text here */
			return;
		}
		if ((size_t)(p - s) + m + tail + 1 > size)
			tail = size - 1 - (size_t)(p - s) - m;
		memmove(p + m, p + n, tail);
		memcpy(p, mark, m);
		p[m + tail] = 0;
	}
}

void termlog_redact(char *s, size_t size)
{
	static const char *const names[] = { "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
					     "AWS_ACCESS_KEY_ID" };
	const char *dir = getenv("AIPROF_S3_SECRET_DIR");

	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		const char *v = getenv(names[i]);
		char buf[4096], path[PATH_MAX];
		ssize_t n;
		int fd;

		if (v)
			redact_one(s, size, v);
		if (!dir || !*dir)
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
		fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			continue;
		n = read(fd, buf, sizeof(buf) - 1);
		close(fd);
		if (n <= 0)
			continue;
		buf[n] = 0;
		buf[strcspn(buf, "\r\n")] = 0;  /* as the S3 settings read it: the first line */
		redact_one(s, size, buf);
	}
}

/* artifacts_omitted (what was already left out, e.g. past TERM_MAX_ARTIFACTS) + more */
static void count_omitted(struct termination *t, uint64_t more)
{
	uint64_t omitted = more;

	for (size_t i = 0; i < t->n_summary; i++)
		if (strcmp(t->summary[i].key, "artifacts_omitted") == 0)
			omitted += t->summary[i].value;
	termlog_count(t, "artifacts_omitted", omitted);
}

/*
 * What goes first when the message is too long: artifacts from the last, but the manifest
 * (it lists them all, with their checksums); then the findings (summary.json has them);
 * then the manifest; then the error text is shortened.
 */
int termlog_fit(struct termination *t, char *buf, size_t len)
{
	int n;
	size_t keep;

	/* the error quotes the target (its argv, its paths): anything, and one byte that is
	 * not UTF-8 would cost the whole message (jansson refuses the string) */
	utf8_fix(t->error, sizeof(t->error));
	n = termination__format(t, buf, len);

	if (n != -E2BIG)
		return n;
	keep = t->n_artifacts && strcmp(t->artifacts[0].name, "manifest.json") == 0 ? 1 : 0;
	while (n == -E2BIG && t->n_artifacts > keep) {
		t->n_artifacts--;
		count_omitted(t, 1);
		n = termination__format(t, buf, len);
	}
	if (n == -E2BIG && t->n_findings) {
		termlog_count(t, "findings_omitted", t->n_findings);
		t->n_findings = 0;
		n = termination__format(t, buf, len);
	}
	if (n == -E2BIG && t->n_artifacts) {
		count_omitted(t, t->n_artifacts);
		t->n_artifacts = 0;
		n = termination__format(t, buf, len);
	}
	/* only the error text and the counts are left: shorten the text */
	for (size_t cut = strlen(t->error); n == -E2BIG && cut > 16; ) {
		cut = cut > 64 ? cut - 64 : 16;
		/* at a character's boundary, never inside one */
		memcpy(t->error + utf8_cut(t->error, strlen(t->error), cut - 3), "...", 4);
		n = termination__format(t, buf, len);
	}
	return n;
}

int termlog_write(const char *path, struct termination *t)
{
	char buf[TERMINATION_MAX];
	int fd, n, err = 0;
	size_t off = 0;

	termlog_redact(t->error, sizeof(t->error));
	n = termlog_fit(t, buf, sizeof(buf));
	if (n < 0)
		return n;
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return -errno;
	while (off < (size_t)n) {
		ssize_t w = write(fd, buf + off, (size_t)n - off);

		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0) {
			err = -errno;
			break;
		}
		off += (size_t)w;
	}
	if (close(fd) < 0 && !err)
		err = -errno;
	return err;
}
