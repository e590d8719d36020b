/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include "api.h"
#include "artupload.h"
#include "httpauth.h"

#define TOKEN_REVIEWS "/apis/authentication.k8s.io/v1/tokenreviews"
#define META_LIST "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"
#define META_ONE "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1"
#define WHY_MAX 512

struct artupload {
	struct artupload_config cfg;
	struct kube_client *kc;
	pthread_t thread;
	bool running;
	atomic_bool stop;
	pthread_mutex_t lock;           /* the queue */
	pthread_cond_t cond;
	struct artupload_req *head, *tail;
	size_t n_queued;
};

/* ---- requests ----------------------------------------------------------------------------- */

struct artupload_req *artupload_req__new(const struct artstore_path *path, const char *token,
					 size_t len)
{
	struct artupload_req *r = calloc(1, sizeof(*r));

	if (!r)
		return NULL;
	r->token = strdup(token);
	r->body = malloc(len ? len : 1);
	if (!r->token || !r->body) {
		artupload_req__unref(r);
		return NULL;
	}
	atomic_init(&r->refs, 1);
	r->path = *path;
	return r;
}

static void wipe_token(struct artupload_req *r)
{
	if (!r->token)
		return;
	explicit_bzero(r->token, strlen(r->token));
	free(r->token);
	r->token = NULL;
}

void artupload_req__unref(struct artupload_req *r)
{
	if (!r || atomic_fetch_sub(&r->refs, 1) > 1)
		return;
	wipe_token(r);
	free(r->body);
	free(r->answer);
	free(r);
}

bool artupload_req__done(struct artupload_req *r)
{
	return atomic_load(&r->done);
}

/* ---- the checks ---------------------------------------------------------------------------- */

/* The answer: a plain-text line (code != 201). Returns code. */
static unsigned say(struct artupload_req *r, unsigned code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static unsigned say(struct artupload_req *r, unsigned code, const char *fmt, ...)
{
	va_list ap;
	char *s = NULL;

	va_start(ap, fmt);
	if (vasprintf(&s, fmt, ap) < 0)
		s = NULL;
	va_end(ap);
	free(r->answer);
	r->answer = s;
	r->ctype = "text/plain";
	r->code = s ? code : 500;
	return r->code;
}

/* A failed request to the API server: 503 (try again) for no answer, 429 or 5xx; 500 for
 * an answer that says this controller may not (RBAC) or the request is wrong. */
static unsigned api_failed(struct artupload_req *r, const char *what, int err,
			   const struct kube_status *st)
{
	bool retry = st->code == 0 || st->code == 429 || st->code >= 500 || err == -ECANCELED;

	if (st->code)
		return say(r, retry ? 503 : 500, "%s: the Kubernetes API server answered %d %s: "
			   "%s%s", what, st->code, st->reason, st->message, retry ? ": try again" : "");
	return say(r, 503, "%s: the Kubernetes API server is not answering (%s): try again",
		   what, st->message);
}

static int call(struct artupload *u, const char *method, const char *path, const char *accept,
		const char *body, size_t len, char **ret_body, size_t *ret_len,
		struct kube_status *st)
{
	memset(st, 0, sizeof(*st));
	return u->cfg.request(u->cfg.request_ctx, method, path, accept, body, len, ret_body,
			      ret_len, st);
}

/* Where the injectors of r's session run: the injector namespace (injspec__pods_namespace():
 * every store session's), or the session's own when the controller has none. */
static const char *pods_ns(const struct artupload *u, const struct artupload_req *r)
{
	return u->cfg.injector_ns && u->cfg.injector_ns[0] ? u->cfg.injector_ns : r->path.ns;
}

/* Who the token is: 0 and the pod, else the answer is set. The token is wiped here. */
static int review(struct artupload *u, struct artupload_req *r, struct artstore_pod *pod)
{
	struct kube_status st;
	char *body = httpauth__token_review_for(r->token, ARTSTORE_AUDIENCE), *resp = NULL;
	char why[WHY_MAX];
	size_t len = 0;
	int err;

	wipe_token(r);
	if (!body)
		return -say(r, 500, "out of memory");
	err = call(u, "POST", TOKEN_REVIEWS, NULL, body, strlen(body), &resp, &len, &st);
	explicit_bzero(body, strlen(body));
	free(body);
	if (err < 0)
		return -api_failed(r, "the token's review failed", err, &st);
	err = artstore__parse_review(resp, len, pod, why, sizeof(why));
	free(resp);
	if (err == -EKEYREJECTED)
		return -say(r, 401, "unauthorized: %s", why);
	if (err == -EPERM)
		return -say(r, 403, "forbidden: %s", why);
	if (err < 0)
		return -say(r, 503, "the answer to the token's review is not a TokenReview: try "
			    "again");
	if (strcmp(pod->ns, pods_ns(u, r)) != 0)
		return -say(r, 403, "forbidden: the token is of a pod of namespace %s; this "
			    "controller runs the injectors of session %s/%s in %s", pod->ns,
			    r->path.ns, r->path.session, pods_ns(u, r));
	return 0;
}

/* Whether the session runs and recorded the token's pod as the injector of the target the
 * name starts with; its UID into uid: 0, else the answer is set. */
static int check_session(struct artupload *u, struct artupload_req *r,
			 const struct artstore_pod *pod, char uid[ARTSTORE_UID_MAX + 1])
{
	struct kube_status st;
	char path[512], why[WHY_MAX], *resp = NULL;
	size_t len = 0;
	int err;

	snprintf(path, sizeof(path), SESSION_API_PREFIX "/namespaces/%s/" SESSION_RESOURCE "/%s",
		 r->path.ns, r->path.session);
	err = call(u, "GET", path, NULL, NULL, 0, &resp, &len, &st);
	if (err == -ENOENT)
		return -say(r, 404, "not found: no session %s/%s", r->path.ns, r->path.session);
	if (err < 0)
		return -api_failed(r, "cannot read the session", err, &st);
	err = artstore__check_session(resp, len, pod->uid, r->path.name, uid, why, sizeof(why));
	free(resp);
	if (err == -EPERM)
		return -say(r, 403, "forbidden: %s", why);
	if (err == -EAGAIN)
		return -say(r, 503, "%s", why);
	return err < 0 ? -say(r, 503, "the session's answer has no UID: try again") : 0;
}

/* Whether the token's pod is an injector of the session: 0, else the answer is set. */
static int check_pod(struct artupload *u, struct artupload_req *r, const struct artstore_pod *pod,
		     const char *uid)
{
	struct kube_status st;
	char path[512], why[WHY_MAX], *resp = NULL;
	size_t len = 0;
	int err;

	snprintf(path, sizeof(path), "/api/v1/namespaces/%s/pods/%s", pods_ns(u, r), pod->name);
	err = call(u, "GET", path, META_ONE, NULL, 0, &resp, &len, &st);
	if (err == -ENOENT)
		return -say(r, 403, "forbidden: the token's pod %s/%s is gone", pods_ns(u, r),
			    pod->name);
	if (err < 0)
		return -api_failed(r, "cannot read the token's pod", err, &st);
	err = artstore__check_injector(resp, len, pods_ns(u, r), r->path.ns, r->path.session,
				       uid, pod->uid, r->path.name, why, sizeof(why));
	free(resp);
	if (err == -EPERM)
		return -say(r, 403, "forbidden: %s", why);
	return err < 0 ? -say(r, 503, "the pod's answer is not a pod: try again") : 0;
}

/* What the namespace keeps in the store for its other sessions (finished ones too: their
 * ConfigMaps live until the session is deleted) against the namespace's bounds, with this
 * session's others bytes and the new artifact: 0, else the answer is set. */
static int check_namespace(struct artupload *u, struct artupload_req *r,
			   const struct artstore_artifact *a, uint64_t others)
{
	struct kube_status st;
	char path[512], *resp = NULL;
	uint64_t bytes = 0, total;
	size_t sessions = 0;
	size_t len = 0;
	int err;

	if (!u->cfg.max_ns_bytes && !u->cfg.max_ns_sessions)
		return 0;
	snprintf(path, sizeof(path), "/api/v1/namespaces/%s/configmaps?labelSelector=%s",
		 r->path.ns, ARTSTORE_LABEL_ARTIFACT_QUERY);
	err = call(u, "GET", path, META_LIST, NULL, 0, &resp, &len, &st);
	if (err < 0)
		return -api_failed(r, "cannot list the namespace's artifacts", err, &st);
	err = artstore__ns_usage(resp, len, a->session_uid, &bytes, &sessions);
	free(resp);
	if (err < 0)
		return -say(r, 503, "the list of the namespace's ConfigMaps cannot be read: try again");
	total = bytes + others + a->size;
	if (u->cfg.max_ns_bytes && total > u->cfg.max_ns_bytes)
		return -say(r, 413, "payload too large: namespace %s keeps %" PRIu64 " bytes of "
			    "artifacts of %zu other sessions in the store; with this one %" PRIu64
			    ", over --store-max-namespace-bytes %" PRIu64 ": delete finished sessions "
			    "(kubectl delete profilingsession -n %s NAME: their artifacts go with "
			    "them), give the session spec.output (S3), or ask the admin to raise "
			    "the bound", r->path.ns, bytes, sessions, total, u->cfg.max_ns_bytes,
			    r->path.ns);
	if (u->cfg.max_ns_sessions && !others && sessions >= u->cfg.max_ns_sessions)
		return -say(r, 413, "payload too large: namespace %s keeps the artifacts of %zu "
			    "sessions in the store already, the most --store-max-namespace-sessions "
			    "allows: delete finished sessions (kubectl delete profilingsession -n %s "
			    "NAME), give the session spec.output (S3), or ask the admin to raise "
			    "the bound", r->path.ns, sessions, r->path.ns);
	return 0;
}

/* What the session holds already, against the bounds: 0, else the answer is set. */
static int check_stored(struct artupload *u, struct artupload_req *r,
			const struct artstore_artifact *a)
{
	struct kube_status st;
	char path[512], existing[SHA256_HEX_LEN + 1], *resp = NULL;
	uint64_t others = 0;
	size_t len = 0;
	int err;

	snprintf(path, sizeof(path), "/api/v1/namespaces/%s/configmaps?labelSelector="
		 "aiprof.io%%2Fsession-uid%%3D%s", r->path.ns, a->session_uid);
	err = call(u, "GET", path, META_LIST, NULL, 0, &resp, &len, &st);
	if (err < 0)
		return -api_failed(r, "cannot list the session's artifacts", err, &st);
	err = artstore__stored(resp, len, a->name, &others, existing);
	free(resp);
	if (err < 0)
		return -say(r, 503, "the list of the session's ConfigMaps cannot be read: try again");
	if (existing[0] && strcmp(existing, a->sha256) != 0)
		return -say(r, 409, "conflict: %s is stored already with SHA-256 %s", a->name,
			    existing);
	if (others + a->size > u->cfg.max_session)
		return -say(r, 413, "payload too large: the session's artifacts would take %" PRIu64
			    " bytes, over --store-max-session-bytes %" PRIu64, others + a->size,
			    u->cfg.max_session);
	return check_namespace(u, r, a, others);
}

/* One ConfigMap: 0 once stored (by us or an earlier try of the same bytes), else the
 * answer is set. */
static int create_chunk(struct artupload *u, struct artupload_req *r,
			const struct artstore_artifact *a, size_t i)
{
	char path[512], name[ARTSTORE_CM_NAME_MAX + 1], sha[SHA256_HEX_LEN + 1], *body, *resp = NULL;
	json_t *cm = artstore__configmap(a, i);
	struct kube_status st;
	size_t len = 0;
	int err;

	body = cm ? json_dumps(cm, JSON_COMPACT) : NULL;
	json_decref(cm);
	if (!body)
		return -say(r, 500, "out of memory");
	snprintf(path, sizeof(path), "/api/v1/namespaces/%s/configmaps", a->ns);
	err = call(u, "POST", path, NULL, body, strlen(body), NULL, NULL, &st);
	free(body);
	if (err == 0)
		return 0;
	if (err != -EEXIST)
		return -api_failed(r, "cannot create the artifact's ConfigMap", err, &st);
	artstore__cm_name(a->session_uid, a->name, i, name);
	snprintf(path, sizeof(path), "/api/v1/namespaces/%s/configmaps/%s", a->ns, name);
	err = call(u, "GET", path, META_ONE, NULL, 0, &resp, &len, &st);
	if (err < 0)
		return -api_failed(r, "cannot read the artifact's ConfigMap", err, &st);
	err = artstore__cm_sha256(resp, len, sha);
	free(resp);
	if (err == 0 && strcmp(sha, a->sha256) == 0)
		return 0;
	return -say(r, 409, "conflict: ConfigMap %s/%s exists and holds other bytes than %s",
		    a->ns, name, a->name);
}

/* ARTUPLOAD_CHECK: who uploads, before the body is read (the body is not touched: the
 * service thread may be filling it). code stays 0 when the upload may go on. */
static void check(struct artupload *u, struct artupload_req *r)
{
	struct artstore_pod pod;

	r->code = 0;
	if (review(u, r, &pod) < 0 || check_session(u, r, &pod, r->session_uid) < 0 ||
	    check_pod(u, r, &pod, r->session_uid) < 0)
		r->session_uid[0] = '\0';
}

/* ARTUPLOAD_STORE: the body against its checksum and the bounds, then the ConfigMaps. */
static void store(struct artupload *u, struct artupload_req *r)
{
	struct artstore_artifact a = {
		.ns = r->path.ns, .session = r->path.session, .name = r->path.name,
		.session_uid = r->session_uid, .data = r->body, .size = r->len,
	};
	uint8_t h[SHA256_LEN];
	size_t n = artstore__chunks(r->len);

	sha256(r->body, r->len, h);
	hex_encode(h, SHA256_LEN, a.sha256);
	if (strcasecmp(a.sha256, r->sha256) != 0) {
		say(r, 400, "bad request: the body's SHA-256 is %s, not %s as X-Aiprof-Sha256 says",
		    a.sha256, r->sha256);
		return;
	}
	if (r->len > u->cfg.max_file) {
		say(r, 413, "payload too large: %zu bytes, over --store-max-file-bytes %" PRIu64,
		    r->len, u->cfg.max_file);
		return;
	}
	if (check_stored(u, r, &a) < 0)
		return;
	for (size_t i = 0; i < n; i++)
		if (create_chunk(u, r, &a, i) < 0)
			return;
	free(r->answer);
	r->answer = artstore__answer(&a);
	r->ctype = "application/json";
	r->code = r->answer ? 201 : say(r, 500, "out of memory");
}

/* ---- the worker ---------------------------------------------------------------------------- */

/* Called with the lock held. */
static struct artupload_req *pop(struct artupload *u)
{
	struct artupload_req *r = u->head;

	if (r) {
		u->head = r->next;
		if (!u->head)
			u->tail = NULL;
		r->next = NULL;
		r->queued = false;
		u->n_queued--;
	}
	return r;
}

void artupload__cancel(struct artupload *u, struct artupload_req *r)
{
	struct artupload_req **at, *prev = NULL;
	bool found = false;

	pthread_mutex_lock(&u->lock);
	for (at = &u->head; r->queued && *at; prev = *at, at = &(*at)->next) {
		if (*at != r)
			continue;
		*at = r->next;
		if (u->tail == r)
			u->tail = prev;
		r->next = NULL;
		r->queued = false;
		u->n_queued--;
		found = true;
		break;
	}
	pthread_mutex_unlock(&u->lock);
	if (found)
		artupload_req__unref(r);        /* the worker's reference: it never sees r */
}

size_t artupload__queued(struct artupload *u)
{
	size_t n;

	pthread_mutex_lock(&u->lock);
	n = u->n_queued;
	pthread_mutex_unlock(&u->lock);
	return n;
}

bool artupload__run_one(struct artupload *u)
{
	struct artupload_req *r;

	pthread_mutex_lock(&u->lock);
	r = pop(u);
	pthread_mutex_unlock(&u->lock);
	if (!r)
		return false;
	if (r->phase == ARTUPLOAD_CHECK)
		check(u, r);
	else if (r->session_uid[0])
		store(u, r);
	else
		say(r, 500, "the upload was not checked before it was stored");
	wipe_token(r);
	atomic_store(&r->done, true);
	if (u->cfg.wake)
		u->cfg.wake(u->cfg.ctx);
	artupload_req__unref(r);
	return true;
}

static void *worker(void *arg)
{
	struct artupload *u = arg;

	for (;;) {
		pthread_mutex_lock(&u->lock);
		while (!u->head && !atomic_load(&u->stop))
			pthread_cond_wait(&u->cond, &u->lock);
		pthread_mutex_unlock(&u->lock);
		if (atomic_load(&u->stop))
			return NULL;
		artupload__run_one(u);
	}
}

void artupload__submit(struct artupload *u, struct artupload_req *r)
{
	atomic_store(&r->done, false);
	atomic_fetch_add(&r->refs, 1);
	pthread_mutex_lock(&u->lock);
	r->next = NULL;
	r->queued = true;
	u->n_queued++;
	if (u->tail)
		u->tail->next = r;
	else
		u->head = r;
	u->tail = r;
	pthread_cond_signal(&u->cond);
	pthread_mutex_unlock(&u->lock);
}

static int kube_request(void *ctx, const char *method, const char *path, const char *accept,
			const char *body, size_t len, char **ret_body, size_t *ret_len,
			struct kube_status *st)
{
	int err;

	kube_client__set_accept(ctx, accept);
	err = kube_client__request(ctx, method, path, NULL, body, len, ret_body, ret_len, st);
	kube_client__set_accept(ctx, NULL);
	return err;
}

int artupload__new(const struct artupload_config *cfg, struct artupload **ret)
{
	struct artupload *u = calloc(1, sizeof(*u));
	int r;

	if (!u)
		return -ENOMEM;
	u->cfg = *cfg;
	if (!u->cfg.request) {
		r = kube_client__new(cfg->kube, &u->kc);
		if (r < 0) {
			free(u);
			return r;
		}
		kube_client__set_stop(u->kc, &u->stop);
		kube_client__set_timeout_ms(u->kc, ARTUPLOAD_TIMEOUT_MS);
		kube_client__skip_write_gate(u->kc);
		u->cfg.request = kube_request;
		u->cfg.request_ctx = u->kc;
	}
	pthread_mutex_init(&u->lock, NULL);
	pthread_cond_init(&u->cond, NULL);
	*ret = u;
	return 0;
}

int artupload__start(struct artupload *u)
{
	int r = pthread_create(&u->thread, NULL, worker, u);

	if (r)
		return -r;
	u->running = true;
	return 0;
}

void artupload__free(struct artupload *u)
{
	struct artupload_req *r;

	if (!u)
		return;
	if (u->running) {
		pthread_mutex_lock(&u->lock);
		atomic_store(&u->stop, true);
		pthread_cond_signal(&u->cond);
		pthread_mutex_unlock(&u->lock);
		pthread_join(u->thread, NULL);
	}
	while ((r = pop(u)))
		artupload_req__unref(r);
	kube_client__free(u->kc);
	pthread_cond_destroy(&u->cond);
	pthread_mutex_destroy(&u->lock);
	free(u);
}
