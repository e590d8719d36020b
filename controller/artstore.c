/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "api.h"
#include "artstore.h"
#include "storeurl.h"
#include "strbuf.h"

#define SA_PREFIX "system:serviceaccount:"
#define EXTRA_POD_NAME "authentication.kubernetes.io/pod-name"
#define EXTRA_POD_UID "authentication.kubernetes.io/pod-uid"

/* ---- names -------------------------------------------------------------------------------- */

bool artstore__dns_name(const char *s, bool dots)
{
	size_t n = strlen(s);

	/* a label: no dots, at most 63; a subdomain as the injector's client checks it */
	return store_k8s_name_ok(s, n) && (dots || (n <= ARTSTORE_NS_MAX && !strchr(s, '.')));
}

bool artstore__valid_name(const char *name)
{
	return store_name_ok(name);
}

/* The path segment at *p (up to the next '/') into out (outlen > its length); *p moves past
 * the '/'. false when there is no '/' after it or it does not fit. */
static bool segment(const char **p, char *out, size_t outlen)
{
	const char *slash = strchr(*p, '/');
	size_t n;

	if (!slash)
		return false;
	n = (size_t)(slash - *p);
	if (n >= outlen)
		return false;
	memcpy(out, *p, n);
	out[n] = '\0';
	*p = slash + 1;
	return true;
}

int artstore__parse_path(const char *uri, struct artstore_path *ret, char *why, size_t whylen)
{
	static const size_t route_len = sizeof(ARTSTORE_ROUTE) - 1;
	struct artstore_path a;
	const char *p = uri;

	if (strncmp(uri, ARTSTORE_ROUTE, route_len) != 0) {
		snprintf(why, whylen, "not an artifact's path: PUT %s{namespace}/{session}/{name}",
			 ARTSTORE_ROUTE);
		return -EINVAL;
	}
	p += route_len;
	if (!segment(&p, a.ns, sizeof(a.ns)) || !artstore__dns_name(a.ns, false)) {
		snprintf(why, whylen, "the path's namespace is not a namespace name");
		return -EINVAL;
	}
	if (!segment(&p, a.session, sizeof(a.session)) || !artstore__dns_name(a.session, true)) {
		snprintf(why, whylen, "the path's session is not an object name");
		return -EINVAL;
	}
	if (!artstore__valid_name(p)) {
		snprintf(why, whylen, "the artifact's name must be 1 to %d characters of "
			 "[A-Za-z0-9._/-] without an empty, '.' or '..' component",
			 ARTSTORE_NAME_MAX);
		return -EINVAL;
	}
	snprintf(a.name, sizeof(a.name), "%s", p);
	*ret = a;
	return 0;
}

int artstore__parse_sha256(const char *hex, uint8_t out[SHA256_LEN])
{
	return hex_decode(hex, out, SHA256_LEN);
}

void artstore__cm_name(const char *session_uid, const char *name, size_t chunk,
		       char out[ARTSTORE_CM_NAME_MAX + 1])
{
	char buf[ARTSTORE_UID_MAX * 2 + ARTSTORE_NAME_MAX + 2], hex[SHA256_HEX_LEN + 1];
	uint8_t h[SHA256_LEN];
	int n = snprintf(buf, sizeof(buf), "%s/%s", session_uid, name);

	sha256(buf, n < 0 ? 0 : (size_t)n >= sizeof(buf) ? sizeof(buf) - 1 : (size_t)n, h);
	hex_encode(h, SHA256_LEN, hex);
	snprintf(out, ARTSTORE_CM_NAME_MAX + 1, "aiprof-%.12s-%zu", hex, chunk);
}

size_t artstore__chunks(uint64_t size)
{
	return size == 0 ? 1 : (size_t)((size + ARTSTORE_CHUNK_MAX - 1) / ARTSTORE_CHUNK_MAX);
}

/* ---- what is stored ----------------------------------------------------------------------- */

json_t *artstore__configmap(const struct artstore_artifact *a, size_t chunk)
{
	size_t n = artstore__chunks(a->size), off = chunk * ARTSTORE_CHUNK_MAX;
	size_t len = a->size - off < ARTSTORE_CHUNK_MAX ? a->size - off : ARTSTORE_CHUNK_MAX;
	char name[ARTSTORE_CM_NAME_MAX + 1], size[24], part[48], *b64;
	json_t *cm;

	if (chunk >= n)
		return NULL;
	b64 = malloc(4 * ((len + 2) / 3) + 1);
	if (!b64)
		return NULL;
	base64_encode(a->data + off, len, b64);
	artstore__cm_name(a->session_uid, a->name, chunk, name);
	snprintf(size, sizeof(size), "%zu", a->size);
	snprintf(part, sizeof(part), "%zu/%zu", chunk, n);
	/* no blockOwnerDeletion: that would need update on the session's finalizers
	 * (OwnerReferencesPermissionEnforcement); the garbage collector deletes them either way */
	cm = json_pack("{s:s,s:s,s:{s:s,s:s,s:{s:s,s:s,s:s},s:{s:s,s:s,s:s,s:s,s:s},"
		       "s:[{s:s,s:s,s:s,s:s,s:b}]},s:b,s:{s:s}}",
		       "apiVersion", "v1", "kind", "ConfigMap",
		       "metadata", "name", name, "namespace", a->ns,
		       "labels", LABEL_MANAGED_BY, MANAGED_BY, ARTSTORE_LABEL_ARTIFACT, "true",
		       LABEL_SESSION_UID, a->session_uid,
		       "annotations", ARTSTORE_ANN_SESSION, a->session, ARTSTORE_ANN_NAME, a->name,
		       ARTSTORE_ANN_SHA256, a->sha256, ARTSTORE_ANN_SIZE, size,
		       ARTSTORE_ANN_CHUNK, part,
		       "ownerReferences", "apiVersion", AIPROF_API_VERSION, "kind", SESSION_KIND,
		       "name", a->session, "uid", a->session_uid, "controller", 1,
		       "immutable", 1, "binaryData", "data", b64);
	free(b64);
	return cm;
}

char *artstore__answer(const struct artstore_artifact *a)
{
	json_t *j = json_pack("{s:s,s:I,s:s,s:[]}", "name", a->name, "size", (json_int_t)a->size,
			      "sha256", a->sha256, "configMaps");
	json_t *list = json_object_get(j, "configMaps");
	char *out = NULL;
	size_t n = artstore__chunks(a->size);

	for (size_t i = 0; j && i < n; i++) {
		char name[ARTSTORE_CM_NAME_MAX + 1];

		artstore__cm_name(a->session_uid, a->name, i, name);
		if (json_array_append_new(list, json_string(name)) < 0)
			goto out;
	}
	if (j)
		out = json_dumps(j, JSON_COMPACT);
out:
	json_decref(j);
	return out;
}

/* ---- what the API server says --------------------------------------------------------------- */

/* The first string of extra[key] (a list of strings), or NULL. */
static const char *extra_value(const json_t *extra, const char *key)
{
	return json_string_value(json_array_get(json_object_get(extra, key), 0));
}

static bool has_audience(const json_t *auds)
{
	size_t i;
	json_t *v;

	json_array_foreach(auds, i, v)
		if (json_is_string(v) && strcmp(json_string_value(v), ARTSTORE_AUDIENCE) == 0)
			return true;
	return false;
}

static bool copy_str(char *dst, size_t dstlen, const char *s)
{
	if (!s || !*s || strlen(s) >= dstlen)
		return false;
	memcpy(dst, s, strlen(s) + 1);
	return true;
}

int artstore__parse_review(const char *body, size_t len, struct artstore_pod *ret, char *why,
			   size_t whylen)
{
	json_t *doc = json_loadb(body, len, 0, NULL);
	const json_t *st = json_object_get(doc, "status"), *user = json_object_get(st, "user");
	const char *kind = json_string_value(json_object_get(doc, "kind"));
	const char *uname = json_string_value(json_object_get(user, "username"));
	const json_t *extra = json_object_get(user, "extra");
	struct artstore_pod p;
	char err[256];
	int r = 0;

	if (!json_is_object(st) || (kind && strcmp(kind, "TokenReview") != 0)) {
		r = -EPROTO;
	} else if (!json_is_true(json_object_get(st, "authenticated"))) {
		str_printable(err, sizeof(err), json_string_value(json_object_get(st, "error")));
		snprintf(why, whylen, "the Kubernetes API server did not accept the token for "
			 "audience %s%s%s", ARTSTORE_AUDIENCE, err[0] ? ": " : "", err);
		r = -EKEYREJECTED;
	} else if (!has_audience(json_object_get(st, "audiences"))) {
		snprintf(why, whylen, "the token is not one for audience %s", ARTSTORE_AUDIENCE);
		r = -EKEYREJECTED;
	} else {
		const char *sa = uname && strncmp(uname, SA_PREFIX, sizeof(SA_PREFIX) - 1) == 0 ?
				 uname + sizeof(SA_PREFIX) - 1 : NULL;
		size_t nslen = sa ? strcspn(sa, ":") : 0;

		if (!sa || nslen == 0 || nslen > ARTSTORE_NS_MAX || sa[nslen] != ':' ||
		    !copy_str(p.name, sizeof(p.name), extra_value(extra, EXTRA_POD_NAME)) ||
		    !copy_str(p.uid, sizeof(p.uid), extra_value(extra, EXTRA_POD_UID))) {
			snprintf(why, whylen, "the token is not bound to a pod (a projected "
				 "service-account token of the injector pod is)");
			r = -EPERM;
		} else {
			memcpy(p.ns, sa, nslen);
			p.ns[nslen] = '\0';
			*ret = p;
		}
	}
	json_decref(doc);
	return r;
}

static const char *label(const json_t *meta, const char *key)
{
	const char *v = json_string_value(json_object_get(json_object_get(meta, "labels"), key));

	return v ? v : "";
}

static bool owned_by(const json_t *meta, const char *uid)
{
	size_t i;
	json_t *o;

	json_array_foreach(json_object_get(meta, "ownerReferences"), i, o) {
		const char *k = json_string_value(json_object_get(o, "kind"));
		const char *u = json_string_value(json_object_get(o, "uid"));
		const char *v = json_string_value(json_object_get(o, "apiVersion"));

		if (k && u && v && strcmp(k, SESSION_KIND) == 0 && strcmp(u, uid) == 0 &&
		    strcmp(v, AIPROF_API_VERSION) == 0)
			return true;
	}
	return false;
}

int artstore__check_injector(const char *pod, size_t len, const char *pod_ns, const char *ns,
			     const char *session, const char *session_uid, const char *pod_uid,
			     const char *name_, char *why, size_t whylen)
{
	const char *slash = strchr(name_, '/');
	size_t tlen = slash ? (size_t)(slash - name_) : 0;
	json_t *doc = json_loadb(pod, len, 0, NULL);
	const json_t *meta = json_object_get(doc, "metadata");
	const char *uid = json_string_value(json_object_get(meta, "uid"));
	const char *pns = json_string_value(json_object_get(meta, "namespace"));
	char name[ARTSTORE_OBJ_MAX + 1];
	/* beside its session, the GC's ownerReference; across namespaces, none can be */
	bool beside = strcmp(pod_ns, ns) == 0;
	int r = -EPERM;

	if (!json_is_object(meta) || !uid || !pns) {
		r = -EPROTO;
		goto out;
	}
	str_printable(name, sizeof(name), json_string_value(json_object_get(meta, "name")));
	if (strcmp(uid, pod_uid) != 0)
		snprintf(why, whylen, "pod %s/%s is not the pod the token was made for (another "
			 "UID)", pod_ns, name);
	else if (strcmp(pns, pod_ns) != 0)
		snprintf(why, whylen, "the token's pod is not in namespace %s, where this "
			 "controller runs injectors", pod_ns);
	else if (strcmp(label(meta, LABEL_COMPONENT), COMPONENT_INJECTOR) != 0 ||
		 strcmp(label(meta, LABEL_MANAGED_BY), MANAGED_BY) != 0)
		snprintf(why, whylen, "pod %s/%s is not an aiprof injector", pod_ns, name);
	else if (strcmp(label(meta, LABEL_SESSION), session) != 0 ||
		 strcmp(label(meta, LABEL_SESSION_UID), session_uid) != 0 ||
		 strcmp(label(meta, LABEL_SESSION_NS), ns) != 0 ||
		 (beside && !owned_by(meta, session_uid)))
		snprintf(why, whylen, "pod %s/%s is not an injector of session %s/%s", pod_ns,
			 name, ns, session);
	else if (!tlen || strlen(label(meta, LABEL_TARGET_POD)) != tlen ||
		 strncmp(label(meta, LABEL_TARGET_POD), name_, tlen) != 0)
		/* an injector writes under its own target's name only */
		snprintf(why, whylen, "pod %s/%s is the injector of target %s, not of the target "
			 "this artifact's name starts with", pod_ns, name,
			 label(meta, LABEL_TARGET_POD));
	else
		r = 0;
out:
	json_decref(doc);
	return r;
}

int artstore__check_session(const char *obj, size_t len, const char *pod_uid, const char *name_,
			    char uid[ARTSTORE_UID_MAX + 1], char *why, size_t whylen)
{
	json_t *doc = json_loadb(obj, len, 0, NULL);
	const json_t *meta = json_object_get(doc, "metadata"), *st = json_object_get(doc, "status");
	const char *phase = json_string_value(json_object_get(st, "phase"));
	const char *sname = json_string_value(json_object_get(meta, "name"));
	const char *recorded = NULL;
	char target[ARTSTORE_OBJ_MAX + 1], shown[ARTSTORE_OBJ_MAX + 1];
	size_t tlen = strcspn(name_, "/"), i;
	json_t *t;
	int r = -EPERM;

	if (!json_is_object(meta) || !copy_str(uid, ARTSTORE_UID_MAX + 1,
					       json_string_value(json_object_get(meta, "uid")))) {
		r = -EPROTO;
		goto out;
	}
	str_printable(shown, sizeof(shown), sname);
	if (tlen >= sizeof(target))
		tlen = sizeof(target) - 1;
	memcpy(target, name_, tlen);
	target[tlen] = '\0';
	json_array_foreach(json_object_get(st, "targets"), i, t) {
		const char *pod = json_string_value(json_object_get(t, "pod"));

		if (pod && strcmp(pod, target) == 0)
			recorded = json_string_value(json_object_get(t, "injectorUID"));
	}
	if (phase && (strcmp(phase, "Succeeded") == 0 || strcmp(phase, "Failed") == 0)) {
		snprintf(why, whylen, "session %s has finished (%s): the store takes a session's "
			 "artifacts only while it runs", shown, phase);
	} else if (!recorded || !*recorded) {
		/* the status is written after the pod is made: an early upload retries */
		snprintf(why, whylen, "the status of session %s names no injector of target %s "
			 "yet: try again", shown, target);
		r = -EAGAIN;
	} else if (strcmp(recorded, pod_uid) != 0) {
		snprintf(why, whylen, "the token's pod is not the injector session %s recorded "
			 "for target %s (status.targets[].injectorUID)", shown, target);
	} else {
		r = 0;
	}
out:
	json_decref(doc);
	return r;
}

/* An annotation of an object's metadata, or NULL. */
static const char *annotation(const json_t *obj, const char *key)
{
	return json_string_value(json_object_get(json_object_get(json_object_get(obj, "metadata"),
								  "annotations"), key));
}

static bool sha256_hex(const char *s)
{
	uint8_t b[SHA256_LEN];

	return s && artstore__parse_sha256(s, b) == 0;
}

/* aiprof.io/size's value into *v: digits only. */
static bool size_value(const char *sz, uint64_t *v)
{
	char *end;

	if (!sz || sz[0] < '0' || sz[0] > '9')
		return false;
	*v = strtoull(sz, &end, 10);
	return !*end;
}

/* Adds v to *total (saturating) the first time key is seen: 0, or -ENOMEM. */
static int count_once(json_t *seen, const char *key, uint64_t v, uint64_t *total)
{
	if (json_object_get(seen, key))
		return 0;               /* the artifact's other chunks */
	if (json_object_set_new(seen, key, json_true()) < 0)
		return -ENOMEM;
	*total = v > UINT64_MAX - *total ? UINT64_MAX : *total + v;
	return 0;
}

/* A list of ConfigMaps (outside input) into *ret_doc, whose "items" is an array or absent (an
 * empty PartialObjectMetadataList says "items": null): 0, or -EPROTO. */
static int load_list(const char *list, size_t len, json_t **ret_doc)
{
	json_t *doc = json_loadb(list, len, 0, NULL), *items = json_object_get(doc, "items");

	if (!json_is_object(doc) || (!json_is_array(items) && items && !json_is_null(items))) {
		json_decref(doc);
		return -EPROTO;
	}
	*ret_doc = doc;
	return 0;
}

int artstore__stored(const char *list, size_t len, const char *name, uint64_t *ret_others,
		     char existing[SHA256_HEX_LEN + 1])
{
	json_t *doc = NULL, *seen = json_object(), *it;
	uint64_t total = 0;
	int r = load_list(list, len, &doc);
	size_t i;

	if (r < 0)
		goto out;
	if (!seen) {
		r = -ENOMEM;
		goto out;
	}
	existing[0] = '\0';
	json_array_foreach(json_object_get(doc, "items"), i, it) {
		const char *n = annotation(it, ARTSTORE_ANN_NAME), *sz = annotation(it, ARTSTORE_ANN_SIZE);
		const char *sha = annotation(it, ARTSTORE_ANN_SHA256);
		uint64_t v;

		if (!n || !sz)
			continue;       /* not one of ours */
		if (strcmp(n, name) == 0) {
			if (!existing[0] && sha256_hex(sha))
				memcpy(existing, sha, SHA256_HEX_LEN + 1);
			continue;
		}
		if (!size_value(sz, &v))
			continue;
		r = count_once(seen, n, v, &total);
		if (r < 0)
			goto out;
	}
	*ret_others = total;
out:
	json_decref(seen);
	json_decref(doc);
	return r;
}

int artstore__ns_usage(const char *list, size_t len, const char *session_uid,
		       uint64_t *ret_bytes, size_t *ret_sessions)
{
	json_t *doc = NULL, *seen = json_object(), *uids = json_object(), *it;
	uint64_t total = 0;
	int r = load_list(list, len, &doc);
	size_t i;

	if (r < 0)
		goto out;
	if (!seen || !uids) {
		r = -ENOMEM;
		goto out;
	}
	json_array_foreach(json_object_get(doc, "items"), i, it) {
		const char *n = annotation(it, ARTSTORE_ANN_NAME), *sz = annotation(it, ARTSTORE_ANN_SIZE);
		const char *uid = json_string_value(json_object_get(json_object_get(
			json_object_get(it, "metadata"), "labels"), LABEL_SESSION_UID));
		char key[ARTSTORE_UID_MAX + ARTSTORE_NAME_MAX + 2];
		uint64_t v;

		if (!n || !sz || !uid || strcmp(uid, session_uid) == 0 ||
		    strlen(uid) > ARTSTORE_UID_MAX || strlen(n) > ARTSTORE_NAME_MAX)
			continue;       /* not one of ours, or the session's own */
		if (!size_value(sz, &v))
			continue;
		snprintf(key, sizeof(key), "%s/%s", uid, n);
		if (json_object_set_new(uids, uid, json_true()) < 0) {
			r = -ENOMEM;
			goto out;
		}
		r = count_once(seen, key, v, &total);
		if (r < 0)
			goto out;
	}
	*ret_bytes = total;
	*ret_sessions = json_object_size(uids);
out:
	json_decref(uids);
	json_decref(seen);
	json_decref(doc);
	return r;
}

int artstore__cm_sha256(const char *cm, size_t len, char out[SHA256_HEX_LEN + 1])
{
	json_t *doc = json_loadb(cm, len, 0, NULL);
	const char *sha = annotation(doc, ARTSTORE_ANN_SHA256);
	int r = json_is_object(doc) ? 0 : -EPROTO;

	out[0] = '\0';
	if (r == 0 && sha256_hex(sha))
		memcpy(out, sha, SHA256_HEX_LEN + 1);
	json_decref(doc);
	return r;
}
