/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <jansson.h>
#include "digest.h"
#include "httpauth.h"
#include "strbuf.h"
#include "timeutil.h"

#define TOKEN_REVIEWS "/apis/authentication.k8s.io/v1/tokenreviews"
#define ACCESS_REVIEWS "/apis/authorization.k8s.io/v1/subjectaccessreviews"
#define BUCKETS 1024                    /* a power of two */
#define NIL UINT32_MAX
#define WHY_MAX 384
#define ATTR_FIELD_MAX 200

struct httpauth_user {
	atomic_int refs;
	char *subject;          /* {"user","uid","groups","extra"}: a SubjectAccessReview's spec */
	uint8_t key[HTTPAUTH_KEY_LEN];  /* of the token it was reviewed for */
	char name[256];         /* the user name, printable */
};

/* One cached answer (or one under review), keyed by SHA-256. */
struct entry {
	uint8_t key[HTTPAUTH_KEY_LEN];
	bool done;
	enum httpauth_verdict v;
	struct httpauth_user *user;     /* an authenticated token's */
	char why[WHY_MAX];
	uint64_t expires_ns, used_ns;
	uint32_t next;                  /* the next entry of its bucket, or of the free list */
};

struct job {
	uint8_t key[HTTPAUTH_KEY_LEN];
	bool token;                     /* a TokenReview, else a SubjectAccessReview */
	char *body;                     /* the request; a TokenReview's holds the token */
	char forbidden[WHY_MAX];        /* an access review's 403 text, less the server's reason */
};

struct httpauth {
	struct httpauth_config cfg;
	struct kube_client *kc;
	pthread_t thread;
	bool running;
	atomic_bool stop;
	pthread_mutex_t lock;           /* everything below */
	pthread_cond_t cond;
	struct entry *e;                /* HTTPAUTH_CACHE, used up to n_e */
	uint32_t n_e, free_head;
	uint32_t bucket[BUCKETS];
	struct job q[HTTPAUTH_QUEUE];
	size_t q_head, q_len;
};

/* ---- users ------------------------------------------------------------------------------ */

const char *httpauth_user__name(const struct httpauth_user *u)
{
	return u->name;
}

struct httpauth_user *httpauth_user__ref(struct httpauth_user *u)
{
	atomic_fetch_add(&u->refs, 1);
	return u;
}

void httpauth_user__unref(struct httpauth_user *u)
{
	if (!u || atomic_fetch_sub(&u->refs, 1) != 1)
		return;
	free(u->subject);
	free(u);
}

/* ---- the pure part ---------------------------------------------------------------------- */

int httpauth__bearer(const char *header, char *tok, size_t toklen)
{
	const char *p = header;
	size_t n;

	if (!p)
		return -ENOENT;
	p += strspn(p, " \t");
	if (!*p)
		return -ENOENT;
	if (strncasecmp(p, "bearer", 6) != 0 || (p[6] != ' ' && p[6] != '\t'))
		return -EINVAL;
	p += 6;
	p += strspn(p, " \t");
	for (n = 0; p[n] > 0x20 && p[n] < 0x7f; n++)
		;
	if (n == 0 || p[n + strspn(p + n, " \t")] != '\0')
		return -EINVAL;
	if (n > HTTPAUTH_TOKEN_MAX || n >= toklen)
		return -E2BIG;
	memmove(tok, p, n);
	tok[n] = '\0';
	return 0;
}

/* A JSON string's body: '"' and '\\' escaped (a token is visible ASCII). */
static void add_escaped(struct strbuf *b, const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (s[i] == '"' || s[i] == '\\')
			strbuf_addc(b, '\\');
		strbuf_addc(b, s[i]);
	}
}

char *httpauth__token_review(const char *token)
{
	return httpauth__token_review_for(token, NULL);
}

char *httpauth__token_review_for(const char *token, const char *audience)
{
	static const char head[] = "{\"apiVersion\":\"authentication.k8s.io/v1\",\"kind\":"
				   "\"TokenReview\",\"spec\":{";
	struct strbuf b = STRBUF_INIT;
	size_t n = strlen(token), alen = audience ? strlen(audience) : 0;

	/* room for all of it up front: no realloc leaves a copy of the token behind */
	if (strbuf_reserve(&b, sizeof(head) + 2 * alen + 2 * n + 32) < 0)
		return NULL;
	strbuf_adds(&b, head);
	if (audience) {
		strbuf_adds(&b, "\"audiences\":[\"");
		add_escaped(&b, audience, alen);
		strbuf_adds(&b, "\"],");
	}
	strbuf_adds(&b, "\"token\":\"");
	add_escaped(&b, token, n);
	strbuf_adds(&b, "\"}}");
	return strbuf__steal(&b);
}

char *httpauth__access_review(const struct httpauth_user *u, const struct httpauth_attr *at)
{
	json_t *spec = json_loads(u->subject, 0, NULL), *attrs, *review;
	char *out = NULL;

	if (!spec)
		return NULL;
	if (at->path)
		attrs = json_pack("{s:s,s:s}", "path", at->path, "verb", at->verb);
	else
		attrs = json_pack("{s:s,s:s,s:s,s:s}", "namespace", at->ns, "verb", at->verb, "group",
				  at->group, "resource", at->resource);
	if (attrs && json_object_set_new(spec, at->path ? "nonResourceAttributes" :
					 "resourceAttributes", attrs) == 0) {
		review = json_pack("{s:s,s:s,s:O}", "apiVersion", "authorization.k8s.io/v1", "kind",
				   "SubjectAccessReview", "spec", spec);
		if (review)
			out = json_dumps(review, JSON_COMPACT);
		json_decref(review);
	}
	json_decref(spec);
	return out;
}

/* The kind's status object of an answer, or NULL when body is not a kind. *ret_doc: the
 * parsed document (decref it) when the status is returned. */
static json_t *review_status(const char *body, size_t len, const char *kind, json_t **ret_doc)
{
	json_t *doc = json_loadb(body, len, 0, NULL), *st;
	const char *k;

	if (!doc)
		return NULL;
	k = json_string_value(json_object_get(doc, "kind"));
	st = json_object_get(doc, "status");
	if ((k && strcmp(k, kind) != 0) || !json_is_object(st)) {
		json_decref(doc);
		return NULL;
	}
	*ret_doc = doc;
	return st;
}

/* What a SubjectAccessReview needs of TokenReview status.user: name, uid, string groups,
 * extra values that are lists of strings. */
static json_t *subject_of(const json_t *user)
{
	json_t *s = json_pack("{s:s}", "user", json_string_value(json_object_get(user, "username")));
	json_t *groups = json_array(), *extra = json_object(), *v, *e;
	const char *uid = json_string_value(json_object_get(user, "uid")), *k;
	size_t i;

	json_array_foreach(json_object_get(user, "groups"), i, v)
		if (json_is_string(v))
			json_array_append(groups, v);
	json_object_foreach(json_object_get(user, "extra"), k, v) {
		json_t *list = json_array();

		json_array_foreach(v, i, e)
			if (json_is_string(e))
				json_array_append(list, e);
		json_object_set_new(extra, k, list);
	}
	if (s && uid)
		json_object_set_new(s, "uid", json_string(uid));
	if (s && json_array_size(groups))
		json_object_set(s, "groups", groups);
	if (s && json_object_size(extra))
		json_object_set(s, "extra", extra);
	json_decref(groups);
	json_decref(extra);
	return s;
}

static int new_user(const json_t *user, const uint8_t key[HTTPAUTH_KEY_LEN],
		    struct httpauth_user **ret)
{
	const char *name = json_string_value(json_object_get(user, "username"));
	struct httpauth_user *u;
	json_t *s;

	if (!name || !*name)
		return -EPROTO;
	u = calloc(1, sizeof(*u));
	s = subject_of(user);
	if (u && s)
		u->subject = json_dumps(s, JSON_COMPACT);
	json_decref(s);
	if (!u || !u->subject) {
		free(u);
		return -ENOMEM;
	}
	atomic_init(&u->refs, 1);
	memcpy(u->key, key, HTTPAUTH_KEY_LEN);
	str_printable(u->name, sizeof(u->name), name);
	*ret = u;
	return 0;
}

int httpauth__parse_token_review(const char *body, size_t len, const uint8_t key[HTTPAUTH_KEY_LEN],
				 struct httpauth_user **ret_user, char *why, size_t whylen)
{
	json_t *doc = NULL, *st = review_status(body, len, "TokenReview", &doc);
	char err[256];
	int r;

	if (!st)
		return -EPROTO;
	if (json_is_true(json_object_get(st, "authenticated"))) {
		r = new_user(json_object_get(st, "user"), key, ret_user);
		json_decref(doc);
		return r < 0 ? r : HTTPAUTH_ALLOW;
	}
	str_printable(err, sizeof(err), json_string_value(json_object_get(st, "error")));
	snprintf(why, whylen, "the Kubernetes API server did not accept the token%s%s",
		 err[0] ? ": " : "", err);
	json_decref(doc);
	return HTTPAUTH_UNAUTHENTICATED;
}

int httpauth__parse_access_review(const char *body, size_t len, char *why, size_t whylen)
{
	json_t *doc = NULL, *st = review_status(body, len, "SubjectAccessReview", &doc);
	bool allowed;

	if (!st)
		return -EPROTO;
	allowed = json_is_true(json_object_get(st, "allowed"));
	str_printable(why, whylen, allowed ? "" : json_string_value(json_object_get(st, "reason")));
	json_decref(doc);
	return allowed ? HTTPAUTH_ALLOW : HTTPAUTH_DENY;
}

void httpauth__forbidden(const struct httpauth_user *u, const struct httpauth_attr *at,
			 char *buf, size_t len)
{
	if (at->path)
		snprintf(buf, len, "user \"%s\" cannot %s path \"%s\": a ClusterRole rule "
			 "{nonResourceURLs: [\"%s\"], verbs: [\"%s\"]} bound to it grants that "
			 "(the aiprof chart's <release>-metrics-reader)", u->name, at->verb,
			 at->path, at->path, at->verb);
	else if (at->ns[0])
		snprintf(buf, len, "user \"%s\" cannot %s %s.%s in namespace \"%s\"", u->name,
			 at->verb, at->resource, at->group, at->ns);
	else
		snprintf(buf, len, "user \"%s\" cannot %s %s.%s at the cluster scope", u->name,
			 at->verb, at->resource, at->group);
}

void httpauth__key(const char *token, uint8_t key[HTTPAUTH_KEY_LEN])
{
	sha256(token, strlen(token), key);
}

/* The key of "may the user of ukey do at": not a token's key (that hashes no NUL byte). */
static void access_key(const uint8_t ukey[HTTPAUTH_KEY_LEN], const struct httpauth_attr *at,
		       uint8_t key[HTTPAUTH_KEY_LEN])
{
	const char *f[] = { at->verb, at->path, at->group, at->resource, at->ns };
	char buf[8 + HTTPAUTH_KEY_LEN + 5 * (ATTR_FIELD_MAX + 2)];
	size_t n = sizeof("access");

	memcpy(buf, "access", n);
	memcpy(buf + n, ukey, HTTPAUTH_KEY_LEN);
	n += HTTPAUTH_KEY_LEN;
	for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++) {
		size_t l = f[i] ? strnlen(f[i], ATTR_FIELD_MAX) : 0;

		buf[n++] = f[i] ? '+' : '-';
		memcpy(buf + n, f[i] ? f[i] : "", l);
		n += l;
		buf[n++] = '\0';
	}
	sha256(buf, n, key);
}

/* ---- the cache (called with the lock held) ----------------------------------------------- */

static uint32_t *bucket_of(struct httpauth *a, const uint8_t key[HTTPAUTH_KEY_LEN])
{
	uint32_t h;

	memcpy(&h, key, sizeof(h));
	return &a->bucket[h & (BUCKETS - 1)];
}

static struct entry *find(struct httpauth *a, const uint8_t key[HTTPAUTH_KEY_LEN])
{
	for (uint32_t i = *bucket_of(a, key); i != NIL; i = a->e[i].next)
		if (memcmp(a->e[i].key, key, HTTPAUTH_KEY_LEN) == 0)
			return &a->e[i];
	return NULL;
}

static void drop(struct httpauth *a, struct entry *e)
{
	uint32_t idx = (uint32_t)(e - a->e), *link = bucket_of(a, e->key);

	while (*link != idx)
		link = &a->e[*link].next;
	*link = e->next;
	httpauth_user__unref(e->user);
	memset(e, 0, sizeof(*e));
	e->next = a->free_head;
	a->free_head = idx;
}

/* The answer to give up for a new one: an expired one, else the least recently used.
 * Reviews under way stay (there are at most HTTPAUTH_QUEUE + 1 of them). */
static struct entry *victim(struct httpauth *a, uint64_t now)
{
	struct entry *best = NULL;

	for (uint32_t i = 0; i < a->n_e; i++) {
		struct entry *e = &a->e[i];

		if (!e->done)
			continue;
		if (e->expires_ns <= now)
			return e;
		if (!best || e->used_ns < best->used_ns)
			best = e;
	}
	return best;
}

/* A new entry under review for key. NULL when every entry is under review. */
static struct entry *insert(struct httpauth *a, const uint8_t key[HTTPAUTH_KEY_LEN], uint64_t now)
{
	struct entry *e;
	uint32_t idx, *b;

	if (a->free_head == NIL && a->n_e < HTTPAUTH_CACHE) {
		a->e[a->n_e].next = a->free_head;
		a->free_head = a->n_e++;
	}
	if (a->free_head == NIL) {
		e = victim(a, now);
		if (!e)
			return NULL;
		drop(a, e);
	}
	idx = a->free_head;
	e = &a->e[idx];
	a->free_head = e->next;
	memcpy(e->key, key, HTTPAUTH_KEY_LEN);
	e->used_ns = now;
	b = bucket_of(a, key);
	e->next = *b;
	*b = idx;
	return e;
}

/* The cached answer for key: a live entry, or NULL (an expired one is dropped). */
static struct entry *lookup(struct httpauth *a, const uint8_t key[HTTPAUTH_KEY_LEN], uint64_t now)
{
	struct entry *e = find(a, key);

	if (e && e->done && e->expires_ns <= now) {
		drop(a, e);
		e = NULL;
	}
	if (e)
		e->used_ns = now;
	return e;
}

static enum httpauth_verdict answer(const struct entry *e, struct httpauth_user **ret_user,
				    char *why, size_t whylen)
{
	if (!e->done) {
		snprintf(why, whylen, "a review is under way");
		return HTTPAUTH_PENDING;
	}
	snprintf(why, whylen, "%s", e->why);
	if (e->v == HTTPAUTH_ALLOW && ret_user)
		*ret_user = httpauth_user__ref(e->user);
	return e->v;
}

/* Queues job j for key (whose entry it makes). BUSY when the queue is full. */
static enum httpauth_verdict submit(struct httpauth *a, const uint8_t key[HTTPAUTH_KEY_LEN],
				    struct job *j, char *why, size_t whylen)
{
	uint64_t now = a->cfg.now_ns();

	if (a->q_len == HTTPAUTH_QUEUE || !insert(a, key, now)) {
		snprintf(why, whylen, "%d reviews are under way already: try again", HTTPAUTH_QUEUE);
		return HTTPAUTH_BUSY;
	}
	memcpy(j->key, key, HTTPAUTH_KEY_LEN);
	a->q[(a->q_head + a->q_len++) % HTTPAUTH_QUEUE] = *j;
	pthread_cond_signal(&a->cond);
	snprintf(why, whylen, "a review is under way");
	return HTTPAUTH_PENDING;
}

/* ---- asking ----------------------------------------------------------------------------- */

static enum httpauth_verdict out_of_memory(char *why, size_t whylen)
{
	snprintf(why, whylen, "out of memory");
	return HTTPAUTH_ERROR;
}

enum httpauth_verdict httpauth__authenticate(struct httpauth *a, const uint8_t key[HTTPAUTH_KEY_LEN],
					     const char *token, struct httpauth_user **ret_user,
					     char *why, size_t whylen)
{
	struct job j = { .token = true };
	enum httpauth_verdict v;
	struct entry *e;

	pthread_mutex_lock(&a->lock);
	e = lookup(a, key, a->cfg.now_ns());
	if (e) {
		v = answer(e, ret_user, why, whylen);
	} else if (!token) {
		snprintf(why, whylen, "the token's review is no longer known: connect again");
		v = HTTPAUTH_UNAUTHENTICATED;
	} else if (!(j.body = httpauth__token_review(token))) {
		v = out_of_memory(why, whylen);
	} else {
		v = submit(a, key, &j, why, whylen);
		if (v != HTTPAUTH_PENDING) {
			explicit_bzero(j.body, strlen(j.body));
			free(j.body);
		}
	}
	pthread_mutex_unlock(&a->lock);
	return v;
}

enum httpauth_verdict httpauth__authorize(struct httpauth *a, struct httpauth_user *u,
					  const struct httpauth_attr *at, char *why, size_t whylen)
{
	uint8_t key[HTTPAUTH_KEY_LEN];
	struct job j = { .token = false };
	enum httpauth_verdict v;
	struct entry *e;

	access_key(u->key, at, key);
	pthread_mutex_lock(&a->lock);
	e = lookup(a, key, a->cfg.now_ns());
	if (e) {
		v = answer(e, NULL, why, whylen);
	} else if (!(j.body = httpauth__access_review(u, at))) {
		v = out_of_memory(why, whylen);
	} else {
		httpauth__forbidden(u, at, j.forbidden, sizeof(j.forbidden));
		v = submit(a, key, &j, why, whylen);
		if (v != HTTPAUTH_PENDING)
			free(j.body);
	}
	pthread_mutex_unlock(&a->lock);
	return v;
}

/* ---- the reviewer ----------------------------------------------------------------------- */

static int kube_post(void *ctx, const char *path, const char *body, char **ret_body,
		     struct kube_status *st)
{
	return kube_client__request(ctx, "POST", path, NULL, body, strlen(body), ret_body, NULL, st);
}

/* Does job j: its verdict, why, and an authenticated token's user. */
static enum httpauth_verdict review(struct httpauth *a, const struct job *j,
				    struct httpauth_user **ret_user, char *why, size_t whylen)
{
	const char *kind = j->token ? "TokenReview" : "SubjectAccessReview";
	struct kube_status st = { 0 };
	char *resp = NULL, reason[256] = "";
	int r;

	r = a->cfg.post(a->cfg.post_ctx, j->token ? TOKEN_REVIEWS : ACCESS_REVIEWS, j->body, &resp,
			&st);
	if (r < 0 && st.code)
		snprintf(why, whylen, "the %s failed: %d %s: %s", kind, st.code, st.reason,
			 st.message);
	else if (r < 0)
		snprintf(why, whylen, "the %s failed: %s", kind, st.message);
	if (r < 0)
		return HTTPAUTH_ERROR;
	if (j->token)
		r = httpauth__parse_token_review(resp, strlen(resp), j->key, ret_user, why, whylen);
	else
		r = httpauth__parse_access_review(resp, strlen(resp), reason, sizeof(reason));
	free(resp);
	if (r < 0) {
		snprintf(why, whylen, "the answer to the %s is not one (%s)", kind,
			 r == -ENOMEM ? "out of memory" : "unexpected JSON");
		return HTTPAUTH_ERROR;
	}
	if (r == HTTPAUTH_DENY)
		snprintf(why, whylen, "%s%s%s", j->forbidden, reason[0] ? "; the API server says: " :
			 "", reason);
	else if (r == HTTPAUTH_ALLOW)
		why[0] = '\0';
	return (enum httpauth_verdict)r;
}

static uint64_t ttl_ns(enum httpauth_verdict v)
{
	switch (v) {
	case HTTPAUTH_ALLOW:
		return HTTPAUTH_TTL_YES_S * NSEC_PER_SEC;
	case HTTPAUTH_ERROR:
		return HTTPAUTH_TTL_ERROR_S * NSEC_PER_SEC;
	default:
		return HTTPAUTH_TTL_NO_S * NSEC_PER_SEC;
	}
}

bool httpauth__review_one(struct httpauth *a)
{
	struct httpauth_user *user = NULL;
	enum httpauth_verdict v;
	char why[WHY_MAX];
	struct entry *e;
	struct job j;

	pthread_mutex_lock(&a->lock);
	if (!a->q_len) {
		pthread_mutex_unlock(&a->lock);
		return false;
	}
	j = a->q[a->q_head];
	a->q_head = (a->q_head + 1) % HTTPAUTH_QUEUE;
	a->q_len--;
	pthread_mutex_unlock(&a->lock);

	v = review(a, &j, &user, why, sizeof(why));
	explicit_bzero(j.body, strlen(j.body));
	free(j.body);

	pthread_mutex_lock(&a->lock);
	e = find(a, j.key);             /* under review: never given up meanwhile */
	if (e && !e->done) {
		e->done = true;
		e->v = v;
		e->user = user;
		user = NULL;
		snprintf(e->why, sizeof(e->why), "%s", why);
		e->expires_ns = a->cfg.now_ns() + ttl_ns(v);
	}
	pthread_mutex_unlock(&a->lock);
	httpauth_user__unref(user);
	if (a->cfg.wake)
		a->cfg.wake(a->cfg.ctx);
	return true;
}

static void *reviewer(void *arg)
{
	struct httpauth *a = arg;

	for (;;) {
		pthread_mutex_lock(&a->lock);
		while (!a->q_len && !atomic_load(&a->stop))
			pthread_cond_wait(&a->cond, &a->lock);
		pthread_mutex_unlock(&a->lock);
		if (atomic_load(&a->stop))
			return NULL;
		httpauth__review_one(a);
	}
}

/* ---- life -------------------------------------------------------------------------------- */

int httpauth__new(const struct httpauth_config *cfg, struct httpauth **ret)
{
	struct httpauth *a = calloc(1, sizeof(*a));
	int r = -ENOMEM;

	if (!a)
		return -ENOMEM;
	a->cfg = *cfg;
	if (!a->cfg.now_ns)
		a->cfg.now_ns = now_monotonic_ns;
	a->e = calloc(HTTPAUTH_CACHE, sizeof(*a->e));
	if (!a->e)
		goto fail;
	if (!a->cfg.post) {
		r = kube_client__new(cfg->kube, &a->kc);
		if (r < 0)
			goto fail;
		kube_client__set_stop(a->kc, &a->stop);
		kube_client__set_timeout_ms(a->kc, HTTPAUTH_TIMEOUT_MS);
		/* reviews change nothing: a standby replica serves /metrics too */
		kube_client__skip_write_gate(a->kc);
		a->cfg.post = kube_post;
		a->cfg.post_ctx = a->kc;
	}
	a->free_head = NIL;
	for (size_t i = 0; i < BUCKETS; i++)
		a->bucket[i] = NIL;
	pthread_mutex_init(&a->lock, NULL);
	pthread_cond_init(&a->cond, NULL);
	*ret = a;
	return 0;
fail:
	free(a->e);
	free(a);
	return r;
}

int httpauth__start(struct httpauth *a)
{
	int r = pthread_create(&a->thread, NULL, reviewer, a);

	if (r)
		return -r;
	a->running = true;
	return 0;
}

void httpauth__free(struct httpauth *a)
{
	if (!a)
		return;
	if (a->running) {
		pthread_mutex_lock(&a->lock);
		atomic_store(&a->stop, true);
		pthread_cond_signal(&a->cond);
		pthread_mutex_unlock(&a->lock);
		pthread_join(a->thread, NULL);
	}
	for (; a->q_len; a->q_len--, a->q_head = (a->q_head + 1) % HTTPAUTH_QUEUE) {
		char *body = a->q[a->q_head].body;

		explicit_bzero(body, strlen(body));
		free(body);
	}
	for (uint32_t i = 0; i < a->n_e; i++)
		httpauth_user__unref(a->e[i].user);
	kube_client__free(a->kc);
	pthread_cond_destroy(&a->cond);
	pthread_mutex_destroy(&a->lock);
	free(a->e);
	free(a);
}
