/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "api.h"
#include "kjson.h"
#include "kpod.h"
#include "ktime.h"
#include "common/utf8.h"

/*
 * A packed container: [state u8][flags u8][exit_code i32 LE][name\0][container_id\0]
 * and, with PK_FULL in flags, [reason\0][message\0][started_at i64][finished_at i64].
 *
 * Two passes over the same code: the first (base == NULL) measures, the second fills one
 * allocation.
 */
#define PK_FULL 1u

struct packer {
	unsigned char *base;
	size_t off;
};

static uint32_t pk_bytes(struct packer *p, const void *src, size_t n)
{
	uint32_t at = (uint32_t)p->off;

	if (p->base && n)
		memcpy(p->base + p->off, src, n);
	p->off += n;
	return at;
}

static uint32_t pk_strn(struct packer *p, const char *s, size_t n)
{
	uint32_t at = pk_bytes(p, s ? s : "", s ? n : 0);

	pk_bytes(p, "", 1);
	return at;
}

static uint32_t pk_str(struct packer *p, const char *s)
{
	return pk_strn(p, s, s ? strlen(s) : 0);
}

static int64_t time_of(const json_t *j, const char *path)
{
	const char *s = kj_str(j, path);
	int64_t ns = 0;

	if (s && ktime_parse(s, &ns) < 0)
		ns = 0;
	return ns;
}

/* Packs the spec entry with the matching entry of statuses (by name). */
static void pack_container(struct packer *p, const json_t *spec, const json_t *statuses,
			   bool full)
{
	const char *name = kj_str(spec, "name");
	const json_t *st = NULL, *e, *state;
	unsigned char hdr[6] = { KC_UNKNOWN, full ? PK_FULL : 0 };
	const char *reason = NULL, *message = NULL;
	int32_t exit_code = 0;
	size_t i, mlen = 0;

	json_array_foreach(statuses, i, e) {
		const char *n = kj_str(e, "name");

		if (n && name && strcmp(n, name) == 0) {
			st = e;
			break;
		}
	}
	state = kj_get(st, "state");
	if (json_is_object(kj_get(state, "terminated"))) {
		hdr[0] = KC_TERMINATED;
		reason = kj_str(state, "terminated.reason");
		message = kj_str(state, "terminated.message");
		exit_code = (int32_t)json_integer_value(kj_get(state, "terminated.exitCode"));
	} else if (json_is_object(kj_get(state, "running"))) {
		hdr[0] = KC_RUNNING;
	} else if (json_is_object(kj_get(state, "waiting"))) {
		hdr[0] = KC_WAITING;
		reason = kj_str(state, "waiting.reason");
	}
	memcpy(hdr + 2, &exit_code, 4);
	pk_bytes(p, hdr, sizeof(hdr));
	pk_str(p, name);
	pk_str(p, kj_str(st, "containerID"));
	if (!full)
		return;
	if (message) {
		mlen = strlen(message);
		/* cut at a character's boundary: the message goes on into a status */
		mlen = utf8_cut(message, mlen, KPOD_TERM_MESSAGE_MAX);
	}
	pk_str(p, reason);
	pk_strn(p, message, mlen);
	{
		int64_t t[2] = {
			hdr[0] == KC_TERMINATED ? time_of(state, "terminated.startedAt") :
						  time_of(state, "running.startedAt"),
			time_of(state, "terminated.finishedAt"),
		};

		pk_bytes(p, t, sizeof(t));
	}
}

static uint16_t pack_containers(struct packer *p, const json_t *specs, const json_t *statuses,
				bool own, bool ephemeral)
{
	size_t n = json_is_array(specs) ? json_array_size(specs) : 0, i;
	const json_t *e;

	if (n > UINT16_MAX)
		n = UINT16_MAX;
	for (i = 0; i < n; i++) {
		const char *name;

		e = json_array_get(specs, i);
		name = kj_str(e, "name");
		pack_container(p, e, json_is_array(statuses) ? statuses : NULL,
			       own || (ephemeral && name && strncmp(name, EPHEMERAL_PREFIX,
								    strlen(EPHEMERAL_PREFIX)) == 0));
	}
	return (uint16_t)n;
}

/* The uid of the ownerReference with controller: true, or NULL. */
static const char *controller_owner_uid(const json_t *j)
{
	const json_t *o;
	size_t i;

	json_array_foreach(kj_get(j, "metadata.ownerReferences"), i, o)
		if (json_is_true(json_object_get(o, "controller")))
			return kj_str(o, "uid");
	return NULL;
}

static void fill(struct packer *p, const json_t *j, struct kpod *pod)
{
	const char *ns = kj_str(j, "metadata.namespace"), *name = kj_str(j, "metadata.name");
	const json_t *labels = kj_get(j, "metadata.labels"), *v, *del;
	const json_t *annotations = kj_get(j, "metadata.annotations");
	const char *suid = json_string_value(json_object_get(labels, LABEL_SESSION_UID));
	size_t nl = 0, na = 0;
	struct kpod hdr = { .o_key = 0 };
	uint32_t at;
	const char *k;

	pk_bytes(p, &hdr, sizeof(hdr));
	/* "ns/name": the name is the tail of the key */
	at = pk_bytes(p, ns, strlen(ns));
	pk_bytes(p, "/", 1);
	hdr.o_key = at;
	hdr.o_name = pk_str(p, name);
	hdr.o_ns = pk_str(p, ns);
	hdr.o_rv = pk_str(p, kj_str(j, "metadata.resourceVersion"));
	hdr.o_node = pk_str(p, kj_str(j, "spec.nodeName"));
	hdr.o_runtime_class = pk_str(p, kj_str(j, "spec.runtimeClassName"));
	hdr.o_phase = pk_str(p, kj_str(j, "status.phase"));
	hdr.o_session_uid = pk_str(p, suid);
	hdr.o_session_name = pk_str(p, json_string_value(json_object_get(labels, LABEL_SESSION)));
	hdr.o_session_ns = pk_str(p, suid ? json_string_value(json_object_get(labels,
									     LABEL_SESSION_NS)) : NULL);
	hdr.o_uid = pk_str(p, suid ? kj_str(j, "metadata.uid") : NULL);
	hdr.o_owner_uid = pk_str(p, suid ? controller_owner_uid(j) : NULL);
	del = kj_get(j, "metadata.deletionTimestamp");
	hdr.deleting = del && !json_is_null(del);
	hdr.host_pid = json_is_true(kj_get(j, "spec.hostPID"));
	hdr.o_labels = (uint32_t)p->off;
	json_object_foreach((json_t *)labels, k, v) {
		if (!json_is_string(v) || nl >= KPOD_MAX_LABELS)
			continue;
		pk_str(p, k);
		pk_str(p, json_string_value(v));
		nl++;
	}
	hdr.n_labels = (uint16_t)nl;
	/* then the aiprof.io/ annotations (ProfilingPolicy triggers), ended by an empty key */
	json_object_foreach((json_t *)annotations, k, v) {
		if (!json_is_string(v) || na >= KPOD_MAX_ANNOTATIONS ||
		    strncmp(k, KPOD_ANNOTATION_PREFIX, strlen(KPOD_ANNOTATION_PREFIX)) != 0 ||
		    strlen(json_string_value(v)) > KPOD_ANNOTATION_VALUE_MAX)
			continue;
		pk_str(p, k);
		pk_str(p, json_string_value(v));
		na++;
	}
	pk_bytes(p, "", 1);
	hdr.o_containers = (uint32_t)p->off;
	hdr.n_containers = pack_containers(p, kj_get(j, "spec.containers"),
					   kj_get(j, "status.containerStatuses"), suid != NULL, false);
	hdr.o_ephemeral = (uint32_t)p->off;
	hdr.n_ephemeral = pack_containers(p, kj_get(j, "spec.ephemeralContainers"),
					  kj_get(j, "status.ephemeralContainerStatuses"), false, true);
	hdr.size = (uint32_t)p->off;
	if (pod)
		memcpy(pod, &hdr, sizeof(hdr));
}

int kpod__from_json(const json_t *j, struct kpod **ret)
{
	struct packer p = { NULL, 0 };
	struct kpod *pod;

	if (!json_is_object(j) || !kj_str(j, "metadata.name") || !kj_str(j, "metadata.namespace"))
		return -EINVAL;
	fill(&p, j, NULL);
	if (p.off > UINT32_MAX)
		return -E2BIG;
	pod = malloc(p.off);
	if (!pod)
		return -ENOMEM;
	p.base = (unsigned char *)pod;
	p.off = 0;
	fill(&p, j, pod);
	atomic_init(&pod->refs, 1);
	*ret = pod;
	return 0;
}

struct kpod *kpod__ref(struct kpod *p)
{
	atomic_fetch_add(&p->refs, 1);
	return p;
}

void kpod__unref(struct kpod *p)
{
	if (p && atomic_fetch_sub(&p->refs, 1) == 1)
		free(p);
}

/* Decodes the container at *pos and moves *pos past it. */
static void decode(const struct kpod *p, uint32_t *pos, struct kcontainer *c)
{
	const unsigned char *b = (const unsigned char *)p + *pos;
	int32_t exit_code;
	const char *s;

	memcpy(&exit_code, b + 2, 4);
	c->state = (enum kcontainer_state)b[0];
	c->exit_code = exit_code;
	s = (const char *)b + 6;
	c->name = s;
	s += strlen(s) + 1;
	c->container_id = s;
	s += strlen(s) + 1;
	c->reason = c->message = "";
	c->started_at = c->finished_at = 0;
	if (b[1] & PK_FULL) {
		int64_t t[2];

		c->reason = s;
		s += strlen(s) + 1;
		c->message = s;
		s += strlen(s) + 1;
		memcpy(t, s, sizeof(t));
		c->started_at = t[0];
		c->finished_at = t[1];
		s += sizeof(t);
	}
	*pos = (uint32_t)(s - (const char *)p);
}

static bool find(const struct kpod *p, uint32_t pos, size_t n, const char *name,
		 struct kcontainer *out)
{
	for (size_t i = 0; i < n; i++) {
		decode(p, &pos, out);
		if (strcmp(out->name, name) == 0)
			return true;
	}
	return false;
}

bool kpod__container(const struct kpod *p, const char *name, struct kcontainer *out)
{
	return find(p, p->o_containers, p->n_containers, name, out);
}

bool kpod__ephemeral(const struct kpod *p, const char *name, struct kcontainer *out)
{
	return find(p, p->o_ephemeral, p->n_ephemeral, name, out);
}

bool kpod__container_at(const struct kpod *p, size_t i, struct kcontainer *out)
{
	uint32_t pos = p->o_containers;

	if (i >= p->n_containers)
		return false;
	for (size_t k = 0; k <= i; k++)
		decode(p, &pos, out);
	return true;
}

const char *kpod__label(const struct kpod *p, const char *key)
{
	const char *s = KPOD_STR(p, o_labels);

	for (size_t i = 0; i < p->n_labels; i++) {
		const char *v = s + strlen(s) + 1;

		if (strcmp(s, key) == 0)
			return v;
		s = v + strlen(v) + 1;
	}
	return NULL;
}

const char *kpod__annotation(const struct kpod *p, const char *key)
{
	const char *s = KPOD_STR(p, o_labels);

	for (size_t i = 0; i < 2u * p->n_labels; i++)
		s += strlen(s) + 1;
	while (*s) {
		const char *v = s + strlen(s) + 1;

		if (strcmp(s, key) == 0)
			return v;
		s = v + strlen(v) + 1;
	}
	return NULL;
}

size_t kpod__labels(const struct kpod *p, struct kv *kv, size_t max)
{
	const char *s = KPOD_STR(p, o_labels);
	size_t i;

	for (i = 0; i < p->n_labels && i < max; i++) {
		kv[i].key = s;
		s += strlen(s) + 1;
		kv[i].value = s;
		s += strlen(s) + 1;
	}
	return i;
}

bool kpod__matches(const struct kpod *p, const struct label_selector *sel)
{
	struct kv kv[KPOD_MAX_LABELS];

	return label_selector__matches(sel, kv, kpod__labels(p, kv, KPOD_MAX_LABELS));
}

bool kpod__differs(const struct kpod *a, const struct kpod *b)
{
	/* the packed labels and containers, byte for byte, and the scalars that matter */
	return !a || a->deleting != b->deleting || strcmp(kpod__node(a), kpod__node(b)) ||
	       strcmp(kpod__phase(a), kpod__phase(b)) || a->n_labels != b->n_labels ||
	       a->n_containers != b->n_containers || a->n_ephemeral != b->n_ephemeral ||
	       a->size - a->o_labels != b->size - b->o_labels ||
	       memcmp(KPOD_STR(a, o_labels), KPOD_STR(b, o_labels), a->size - a->o_labels) != 0;
}
