/* SPDX-License-Identifier: MIT */
/*
 * Reading Kubernetes answers without holding them whole:
 *   - a List ({"metadata":{...},"items":[{...},...]}) is split as it streams in, each item
 *     handed over as its own JSON text, so a list of 10,000 pods never sits in memory;
 *   - a watch (one event object after another, newline-delimited or not) is split into
 *     events, and kwatch_event__parse() reads one.
 * The splitter only tracks strings and nesting; each piece is then parsed by jansson, which
 * checks it. Outside input: tests/fuzz/fuzz_kubejson.c.
 */
#ifndef AIPROF_KJSON_H
#define AIPROF_KJSON_H

#include <stdbool.h>
#include <stddef.h>
#include <jansson.h>
#include "kubeclient.h"
#include "strbuf.h"

#define KJSON_ITEM_MAX (8u << 20)   /* one object (etcd keeps objects under 1.5 MiB) */
#define KJSON_META_MAX (64u << 10)

/* Receives one item or event, len bytes of JSON (not NUL-terminated... but buf[len] is NUL).
 * Returns 0 or -errno to stop. */
typedef int (*kjson_item_fn)(void *ctx, const char *json, size_t len);

enum kjson_mode {
	KJSON_LIST,      /* items of the top-level "items" array; "metadata" kept */
	KJSON_STREAM,    /* every top-level object */
};

struct kjson_split {
	enum kjson_mode mode;
	kjson_item_fn fn;
	void *ctx;
	int depth;
	bool in_str, esc;
	bool expect_key;         /* LIST, depth 1: the next string is a key */
	bool key_str;            /* LIST: inside a depth-1 key string */
	char key[16];            /* LIST: the last depth-1 key (truncated) */
	size_t keylen;
	bool in_items;           /* LIST: inside "items": [...] */
	enum { CAP_NONE, CAP_ITEM, CAP_META } cap;
	bool seen_top;           /* a top-level object started */
	size_t items;            /* pieces handed over */
	struct strbuf buf;       /* the piece being captured */
	struct strbuf meta;      /* LIST: the top-level "metadata" object */
	int err;                 /* sticky */
};

void kjson_split__init(struct kjson_split *s, enum kjson_mode mode, kjson_item_fn fn,
		       void *ctx);
/* Returns 0, -EBADMSG (not the expected shape), -E2BIG (a piece too large), -ENOMEM, or the
 * callback's error. Sticky. */
int kjson_split__feed(struct kjson_split *s, const char *buf, size_t len);
/* LIST: the top-level object is complete. STREAM: no piece is half-read. 0 or -EBADMSG. */
int kjson_split__finish(struct kjson_split *s);
void kjson_split__release(struct kjson_split *s);

/* LIST: metadata.resourceVersion and metadata.continue of the list (malloc'd, "" if absent). */
int kjson_split__list_meta(const struct kjson_split *s, char **ret_rv, char **ret_continue);

enum kwatch_type { KWATCH_ADDED, KWATCH_MODIFIED, KWATCH_DELETED, KWATCH_BOOKMARK,
		   KWATCH_ERROR };

struct kwatch_event {
	enum kwatch_type type;
	json_t *object;          /* owned: the object (ERROR: the Status) */
	char rv[64];             /* object.metadata.resourceVersion, "" if none */
	struct kube_status status; /* ERROR only */
};

/* Parses one watch event. Returns 0 (release with kwatch_event__release()), -EBADMSG. */
int kwatch_event__parse(const char *json, size_t len, struct kwatch_event *ev);
void kwatch_event__release(struct kwatch_event *ev);

/* Short JSON accessors: the string at a '.'-separated path of object keys, or NULL. */
const char *kj_str(const json_t *j, const char *path);
json_t *kj_get(const json_t *j, const char *path);

#endif
