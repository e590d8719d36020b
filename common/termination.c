/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <jansson.h>
#include "termination.h"

static bool charset(const char *s, const char *extra)
{
	for (; *s; s++) {
		char c = *s;

		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      strchr(extra, c)))
			return false;
	}
	return true;
}

static bool copy_checked(char *dst, size_t dstlen, const json_t *v, const char *extra,
			 bool required)
{
	const char *s;

	if (!v || json_is_null(v))
		return !required;
	if (!json_is_string(v))
		return false;
	s = json_string_value(v);
	if (strlen(s) == 0 || strlen(s) >= dstlen || strlen(s) != json_string_length(v) ||
	    !charset(s, extra))
		return false;
	memcpy(dst, s, strlen(s) + 1);
	return true;
}

static bool valid_url(const char *u)
{
	if (strncmp(u, "s3://", 5) != 0 && strncmp(u, "https://", 8) != 0 &&
	    strncmp(u, "http://", 7) != 0)
		return false;
	for (const char *p = u; *p; p++)
		if ((unsigned char)*p <= 0x20 || (unsigned char)*p >= 0x7f || *p == '"' ||
		    *p == '\\' || *p == '<' || *p == '>')
			return false;
	return true;
}

static bool valid_sha256(const char *s)
{
	if (strlen(s) != 64)
		return false;
	for (; *s; s++)
		if (!((*s >= '0' && *s <= '9') || (*s >= 'a' && *s <= 'f')))
			return false;
	return true;
}

#define FAIL(e, ...) do { snprintf(why, whylen, __VA_ARGS__); err = (e); goto fail; } while (0)

int termination__parse(const char *msg, size_t len, struct termination *t, char *why,
		       size_t whylen)
{
	json_t *j = NULL, *arts, *sum, *finds, *e, *v;
	const char *k;
	size_t i;
	int err = 0;

	memset(t, 0, sizeof(*t));
	if (whylen)
		why[0] = '\0';
	if (len > TERMINATION_MAX) {
		snprintf(why, whylen, "the termination message is longer than %d bytes",
			 TERMINATION_MAX);
		return -E2BIG;
	}
	j = json_loadb(msg, len, JSON_ALLOW_NUL, NULL);
	if (!json_is_object(j))
		FAIL(-EBADMSG, "the termination message is not a JSON object");

	arts = json_object_get(j, "artifacts");
	if (arts && !json_is_null(arts)) {
		if (!json_is_array(arts) || json_array_size(arts) > TERM_MAX_ARTIFACTS)
			FAIL(-EINVAL, "artifacts must be a list of at most %d", TERM_MAX_ARTIFACTS);
		json_array_foreach(arts, i, e) {
			struct term_artifact *a = &t->artifacts[t->n_artifacts];
			const json_t *size = json_object_get(e, "size");

			if (!json_is_object(e))
				FAIL(-EINVAL, "artifacts[%zu] is not an object", i);
			if (!copy_checked(a->name, sizeof(a->name), json_object_get(e, "name"), "._/-",
					  true) || a->name[0] == '/' || strstr(a->name, ".."))
				FAIL(-EINVAL, "artifacts[%zu].name is missing or has characters a name "
				     "cannot have", i);
			v = json_object_get(e, "url");
			if (v && !json_is_null(v)) {
				if (!json_is_string(v) || json_string_length(v) >= sizeof(a->url) ||
				    strlen(json_string_value(v)) != json_string_length(v) ||
				    !valid_url(json_string_value(v)))
					FAIL(-EINVAL, "artifacts[%zu].url is not an s3:// or https:// "
					     "URL", i);
				memcpy(a->url, json_string_value(v), json_string_length(v) + 1);
			}
			if (size && !json_is_null(size)) {
				if (!json_is_integer(size) || json_integer_value(size) < 0)
					FAIL(-EINVAL, "artifacts[%zu].size is not a byte count", i);
				a->size = (uint64_t)json_integer_value(size);
			}
			v = json_object_get(e, "sha256");
			if (v && !json_is_null(v)) {
				if (!json_is_string(v) || !valid_sha256(json_string_value(v)))
					FAIL(-EINVAL, "artifacts[%zu].sha256 is not 64 lower-case hex "
					     "digits", i);
				memcpy(a->sha256, json_string_value(v), 65);
			}
			t->n_artifacts++;
		}
	}

	sum = json_object_get(j, "summary");
	if (sum && !json_is_null(sum)) {
		if (!json_is_object(sum))
			FAIL(-EINVAL, "summary must be an object of counts");
		json_object_foreach(sum, k, v) {
			struct term_count *c;

			if (!json_is_integer(v) || json_integer_value(v) < 0)
				continue;               /* not a count: a newer injector's detail */
			if (t->n_summary >= TERM_MAX_SUMMARY)
				FAIL(-EINVAL, "summary has more than %d counts", TERM_MAX_SUMMARY);
			c = &t->summary[t->n_summary];
			if (strlen(k) == 0 || strlen(k) >= sizeof(c->key) || !charset(k, "_"))
				FAIL(-EINVAL, "summary has a key that is not [A-Za-z0-9_]{1,63}");
			memcpy(c->key, k, strlen(k) + 1);
			c->value = (uint64_t)json_integer_value(v);
			t->n_summary++;
		}
	}

	finds = json_object_get(j, "findings");
	if (finds && !json_is_null(finds)) {
		if (!json_is_array(finds) || json_array_size(finds) > TERM_MAX_FINDINGS)
			FAIL(-EINVAL, "findings must be a list of at most %d", TERM_MAX_FINDINGS);
		json_array_foreach(finds, i, e) {
			struct term_finding *f = &t->findings[t->n_findings];

			if (!json_is_object(e) ||
			    !copy_checked(f->category, sizeof(f->category),
					  json_object_get(e, "category"), "._-", true) ||
			    !copy_checked(f->severity, sizeof(f->severity),
					  json_object_get(e, "severity"), "._-", false))
				FAIL(-EINVAL, "findings[%zu] needs a category (and a severity) of "
				     "[A-Za-z0-9._-]", i);
			/* the CRD's enum: Info, Warning, Critical */
			if (!strcasecmp(f->severity, "warning") || !strcasecmp(f->severity, "warn"))
				memcpy(f->severity, "Warning", 8);
			else if (!strcasecmp(f->severity, "critical") || !strcasecmp(f->severity, "error"))
				memcpy(f->severity, "Critical", 9);
			else
				memcpy(f->severity, "Info", 5);
			t->n_findings++;
		}
	}

	v = json_object_get(j, "error");
	if (v && !json_is_null(v)) {
		const char *s;
		size_t n, o = 0;

		if (!json_is_string(v))
			FAIL(-EINVAL, "error must be a string");
		s = json_string_value(v);
		n = json_string_length(v);
		for (size_t x = 0; x < n; x++) {
			unsigned char c = (unsigned char)s[x];

			if (o + 1 >= sizeof(t->error)) {
				/* truncated: do not end inside a UTF-8 sequence */
				size_t b = o;

				while (b > 0 && ((unsigned char)t->error[b - 1] & 0xc0) == 0x80)
					b--;
				if (b > 0 && ((unsigned char)t->error[b - 1] & 0xc0) == 0xc0)
					o = b - 1;
				break;
			}
			t->error[o++] = c < 0x20 || c == 0x7f ? ' ' : (char)c;
		}
		t->error[o] = '\0';
		if (!t->error[0] && n)
			memcpy(t->error, "(empty)", 8);
	}
	json_decref(j);
	return 0;
fail:
	json_decref(j);
	memset(t, 0, sizeof(*t));
	return err;
}

int termination__format(const struct termination *t, char *buf, size_t len)
{
	json_t *j = json_object(), *arts = json_array(), *finds = json_array(), *sum = json_object();
	char *s = NULL;
	int err = -ENOMEM;
	size_t n, max = len < TERMINATION_MAX ? len : TERMINATION_MAX;

	if (!j || !arts || !finds || !sum)
		goto out;
	for (size_t i = 0; i < t->n_artifacts; i++) {
		const struct term_artifact *a = &t->artifacts[i];
		json_t *o = json_pack("{s:s,s:I}", "name", a->name, "size", (json_int_t)a->size);

		if (!o || (a->url[0] && json_object_set_new(o, "url", json_string(a->url))) ||
		    (a->sha256[0] && json_object_set_new(o, "sha256", json_string(a->sha256))) ||
		    json_array_append_new(arts, o))
			goto out;
	}
	for (size_t i = 0; i < t->n_summary; i++)
		if (json_object_set_new(sum, t->summary[i].key,
					json_integer((json_int_t)t->summary[i].value)))
			goto out;
	for (size_t i = 0; i < t->n_findings; i++) {
		json_t *o = json_pack("{s:s,s:s}", "category", t->findings[i].category, "severity",
				      t->findings[i].severity);

		if (!o || json_array_append_new(finds, o))
			goto out;
	}
	if (json_object_set(j, "artifacts", arts) || json_object_set(j, "summary", sum) ||
	    json_object_set(j, "findings", finds))
		goto out;
	if (t->error[0] && json_object_set_new(j, "error", json_string(t->error)))
		goto out;
	s = json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER);
	if (!s)
		goto out;
	n = strlen(s);
	if (n + 1 > max) {
		err = -E2BIG;
		goto out;
	}
	memcpy(buf, s, n + 1);
	err = (int)n;
out:
	free(s);
	json_decref(j);
	json_decref(arts);
	json_decref(finds);
	json_decref(sum);
	return err;
}
