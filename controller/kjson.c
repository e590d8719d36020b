/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "kjson.h"

void kjson_split__init(struct kjson_split *s, enum kjson_mode mode, kjson_item_fn fn, void *ctx)
{
	memset(s, 0, sizeof(*s));
	s->mode = mode;
	s->fn = fn;
	s->ctx = ctx;
}

void kjson_split__release(struct kjson_split *s)
{
	free(s->buf.s);
	free(s->meta.s);
	s->buf = (struct strbuf)STRBUF_INIT;
	s->meta = (struct strbuf)STRBUF_INIT;
}

static int emit(struct kjson_split *s)
{
	int r;

	if (strbuf_err(&s->buf))
		return -ENOMEM;
	r = s->fn ? s->fn(s->ctx, s->buf.s, s->buf.len) : 0;
	s->items++;
	s->buf.len = 0;
	if (s->buf.cap > 256u << 10) {   /* do not keep a huge buffer for small items */
		free(s->buf.s);
		s->buf = (struct strbuf)STRBUF_INIT;
	}
	return r;
}

/* Appends the run [start, end) to the piece being captured. */
static int capture(struct kjson_split *s, const char *start, const char *end)
{
	struct strbuf *b = s->cap == CAP_META ? &s->meta : &s->buf;
	size_t max = s->cap == CAP_META ? KJSON_META_MAX : KJSON_ITEM_MAX;

	if (s->cap == CAP_NONE || end <= start)
		return 0;
	if (b->len + (size_t)(end - start) > max)
		return -E2BIG;
	strbuf_add(b, start, (size_t)(end - start));
	return strbuf_err(b);
}

int kjson_split__feed(struct kjson_split *s, const char *buf, size_t len)
{
	const char *p = buf, *end = buf + len, *run = buf;
	int r = 0;

	if (s->err)
		return s->err;
	for (; p < end; p++) {
		char c = *p;

		if (s->in_str) {
			if (s->esc) {
				s->esc = false;
			} else if (c == '\\') {
				s->esc = true;
			} else if (c == '"') {
				s->in_str = false;
				if (s->key_str) {
					s->key_str = false;
					continue;
				}
			}
			if (s->key_str && s->keylen < sizeof(s->key) - 1)
				s->key[s->keylen++] = c;
			continue;
		}
		switch (c) {
		case '"':
			s->in_str = true;
			if (s->mode == KJSON_LIST && s->depth == 1 && s->expect_key) {
				s->key_str = true;
				s->keylen = 0;
				s->expect_key = false;
			}
			break;
		case '{':
		case '[':
			if (s->depth == 0) {
				if (c != '{' || (s->mode == KJSON_LIST && s->seen_top)) {
					r = -EBADMSG;
					goto out;
				}
				s->seen_top = true;
				if (s->mode == KJSON_STREAM) {
					s->cap = CAP_ITEM;
					run = p;
				} else {
					s->expect_key = true;
				}
			} else if (s->mode == KJSON_LIST && s->depth == 1) {
				s->key[s->keylen] = '\0';
				if (c == '[' && strcmp(s->key, "items") == 0) {
					s->in_items = true;
				} else if (c == '{' && strcmp(s->key, "metadata") == 0) {
					s->cap = CAP_META;
					s->meta.len = 0;
					run = p;
				}
			} else if (s->mode == KJSON_LIST && s->depth == 2 && s->in_items) {
				if (c != '{') {
					r = -EBADMSG;
					goto out;
				}
				s->cap = CAP_ITEM;
				run = p;
			}
			if (++s->depth > 10000) {
				r = -EBADMSG;
				goto out;
			}
			break;
		case '}':
		case ']':
			if (s->depth == 0) {
				r = -EBADMSG;
				goto out;
			}
			s->depth--;
			if ((s->mode == KJSON_STREAM && s->depth == 0) ||
			    (s->mode == KJSON_LIST && s->depth == 2 && s->cap == CAP_ITEM)) {
				r = capture(s, run, p + 1);
				if (r < 0)
					goto out;
				s->cap = CAP_NONE;
				r = emit(s);
				if (r < 0)
					goto out;
				run = p + 1;
			} else if (s->mode == KJSON_LIST && s->depth == 1) {
				if (s->cap == CAP_META) {
					r = capture(s, run, p + 1);
					if (r < 0)
						goto out;
					s->cap = CAP_NONE;
				}
				s->in_items = false;
			}
			break;
		case ',':
			if (s->mode == KJSON_LIST && s->depth == 1)
				s->expect_key = true;
			break;
		case ' ':
		case '\t':
		case '\r':
		case '\n':
		case ':':
			break;
		default:
			/* a scalar: fine inside objects; not between pieces or as an item */
			if (s->depth == 0 || (s->mode == KJSON_LIST && s->depth == 2 && s->in_items)) {
				r = -EBADMSG;
				goto out;
			}
			break;
		}
	}
	r = capture(s, run, end);
out:
	if (r < 0)
		s->err = r;
	return r;
}

int kjson_split__finish(struct kjson_split *s)
{
	if (s->err)
		return s->err;
	if (s->depth != 0 || s->in_str || (s->mode == KJSON_LIST && !s->seen_top))
		return s->err = -EBADMSG;
	return 0;
}

int kjson_split__list_meta(const struct kjson_split *s, char **ret_rv, char **ret_continue)
{
	json_t *m = s->meta.len ? json_loadb(s->meta.s, s->meta.len, 0, NULL) : NULL;
	const char *rv = kj_str(m, "resourceVersion"), *cont = kj_str(m, "continue");
	char *a = strdup(rv ? rv : ""), *b = strdup(cont ? cont : "");

	json_decref(m);
	if (!a || !b) {
		free(a);
		free(b);
		return -ENOMEM;
	}
	*ret_rv = a;
	*ret_continue = b;
	return 0;
}

json_t *kj_get(const json_t *j, const char *path)
{
	char key[128];

	while (j && *path) {
		size_t n = strcspn(path, ".");

		if (n >= sizeof(key) || !json_is_object(j))
			return NULL;
		memcpy(key, path, n);
		key[n] = '\0';
		j = json_object_get(j, key);
		path += n;
		if (*path == '.')
			path++;
	}
	return (json_t *)j;
}

const char *kj_str(const json_t *j, const char *path)
{
	const json_t *v = kj_get(j, path);

	return json_is_string(v) ? json_string_value(v) : NULL;
}

int kwatch_event__parse(const char *json, size_t len, struct kwatch_event *ev)
{
	static const char *const names[] = {
		[KWATCH_ADDED] = "ADDED", [KWATCH_MODIFIED] = "MODIFIED",
		[KWATCH_DELETED] = "DELETED", [KWATCH_BOOKMARK] = "BOOKMARK",
		[KWATCH_ERROR] = "ERROR",
	};
	json_t *j = json_loadb(json, len, 0, NULL), *obj;
	const char *type = kj_str(j, "type"), *rv;
	int err = -EBADMSG;

	memset(ev, 0, sizeof(*ev));
	if (!type)
		goto fail;
	obj = json_object_get(j, "object");
	if (!json_is_object(obj))
		goto fail;
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		if (strcmp(type, names[i]) != 0)
			continue;
		ev->type = (enum kwatch_type)i;
		rv = kj_str(obj, "metadata.resourceVersion");
		snprintf(ev->rv, sizeof(ev->rv), "%s", rv ? rv : "");
		if (ev->type == KWATCH_ERROR) {
			char *dump = json_dumps(obj, JSON_COMPACT);

			kube_status__parse(dump, dump ? strlen(dump) : 0, 0, &ev->status);
			free(dump);
		} else if (ev->type != KWATCH_BOOKMARK && (!kj_str(obj, "metadata.name"))) {
			goto fail;
		}
		ev->object = json_incref(obj);
		err = 0;
		break;
	}
fail:
	json_decref(j);
	return err;
}

void kwatch_event__release(struct kwatch_event *ev)
{
	json_decref(ev->object);
	ev->object = NULL;
}
