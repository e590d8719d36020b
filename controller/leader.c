/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <jansson.h>
#include "kjson.h"
#include "ktime.h"
#include "kubeclient.h"
#include "leader.h"
#include "timeutil.h"

struct leader {
	struct leader_config cfg;
	struct kube_client *kc;
	pthread_t thread;
	bool running, fenced;
	atomic_bool stop, lost;
	_Atomic uint64_t act_until_ns;  /* may act while monotonic now < this; 0: does not lead */
	/* the election thread's own (the caller's after leader__free() joined it) */
	bool leading;
	uint64_t deadline_ns;           /* the current round's requests end by then */
	struct lease_record seen;
	uint64_t observed_ns;
	char rv[64];
	bool exists;
	int64_t acquire_ns;             /* acquireTime we wrote, wall clock */
};

enum leader_decision leader__decide(const struct lease_record *r, const char *identity,
				    uint64_t observed_ns, uint64_t now_ns)
{
	uint64_t dur = (uint64_t)(r->duration_s > 0 ? r->duration_s : 15) * NSEC_PER_SEC;

	if (r->holder[0] && strcmp(r->holder, identity) == 0)
		return LEADER_RENEW;
	if (r->holder[0] && observed_ns + dur > now_ns)
		return LEADER_WAIT;
	return LEADER_TAKE;
}

__attribute__((format(printf, 3, 4)))
static int refuse(char *msg, size_t msglen, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, msglen, fmt, ap);
	va_end(ap);
	return -EINVAL;
}

int leader__check_timing(const struct leader_config *cfg, char *msg, size_t msglen)
{
	unsigned long long lease_ms = cfg->lease_duration_ns / NSEC_PER_MSEC;
	unsigned long long renew_ms = cfg->renew_deadline_ns / NSEC_PER_MSEC;
	unsigned long long retry_ms = cfg->retry_period_ns / NSEC_PER_MSEC;

	if (cfg->lease_duration_ns < NSEC_PER_SEC || cfg->lease_duration_ns % NSEC_PER_SEC)
		return refuse(msg, msglen, "--lease-duration %llu ms: give whole seconds, at least "
			      "1s (the Lease stores leaseDurationSeconds)", lease_ms);
	if (cfg->retry_period_ns == 0 || cfg->retry_period_ns > cfg->renew_deadline_ns / 2)
		return refuse(msg, msglen, "--renew-deadline %llu ms must be at least twice "
			      "--retry-period %llu ms, so that a failed renewal is tried again "
			      "before the deadline", renew_ms, retry_ms);
	if (cfg->renew_deadline_ns > cfg->lease_duration_ns - LEADER_MARGIN_NS)
		return refuse(msg, msglen, "--renew-deadline %llu ms must end at least %llu ms "
			      "before --lease-duration %llu ms: the leader acts until its renew "
			      "deadline, another replica may take the lease once its duration is "
			      "over", renew_ms, LEADER_MARGIN_NS / NSEC_PER_MSEC, lease_ms);
	return 0;
}

uint64_t leader__round_deadline_ns(const struct leader_config *cfg, uint64_t round_start_ns,
				   bool leading, uint64_t act_until_ns)
{
	uint64_t own = round_start_ns + cfg->renew_deadline_ns;

	return leading && act_until_ns < own ? act_until_ns : own;
}

__attribute__((format(printf, 3, 4)))
static void llog(struct leader *l, int level, const char *fmt, ...)
{
	char buf[512];
	va_list ap;

	if (!l->cfg.log)
		return;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	l->cfg.log(l->cfg.ctx, level, buf);
}

int leader__new(const struct leader_config *cfg, struct leader **ret)
{
	struct leader *l = calloc(1, sizeof(*l));
	int r;

	if (!l)
		return -ENOMEM;
	l->cfg = *cfg;
	r = kube_client__new(cfg->kube, &l->kc);
	if (r < 0) {
		free(l);
		return r;
	}
	kube_client__skip_write_gate(l->kc);          /* the lease's writes keep the gate open */
	*ret = l;
	return 0;
}

/* One request of the current round, with the time left to l->deadline_ns as its timeout;
 * -ETIMEDOUT without sending when none is left. */
static int lease_request(struct leader *l, const char *method, const char *path,
			 const char *body, char **ret_body, size_t *ret_len, struct kube_status *st)
{
	uint64_t now = now_monotonic_ns();
	uint64_t left_ms = l->deadline_ns > now ? (l->deadline_ns - now) / NSEC_PER_MSEC : 0;

	if (left_ms == 0) {
		memset(st, 0, sizeof(*st));
		snprintf(st->message, sizeof(st->message), "no time left before the renew deadline");
		return -ETIMEDOUT;
	}
	kube_client__set_timeout_ms(l->kc, (long)left_ms);
	return kube_client__request(l->kc, method, path, NULL, body, body ? strlen(body) : 0,
				    ret_body, ret_len, st);
}

/* GETs the lease into l->seen; -ENOENT when there is none. A change is dated when the answer
 * came, not when the question left: a later date only makes a candidate wait longer. */
static int read_lease(struct leader *l)
{
	struct kube_status st;
	struct lease_record rec = { .duration_s = 0 };
	char path[600], *body = NULL;
	size_t len = 0;
	json_t *j;
	const char *v;
	uint64_t now;
	int r;

	snprintf(path, sizeof(path), "/apis/coordination.k8s.io/v1/namespaces/%s/leases/%s",
		 l->cfg.namespace, l->cfg.name);
	r = lease_request(l, "GET", path, NULL, &body, &len, &st);
	if (r < 0)
		return r;
	now = now_monotonic_ns();
	j = json_loadb(body, len, 0, NULL);
	free(body);
	if (!j)
		return -EBADMSG;
	if ((v = kj_str(j, "spec.holderIdentity")))
		snprintf(rec.holder, sizeof(rec.holder), "%s", v);
	if ((v = kj_str(j, "spec.renewTime")))
		snprintf(rec.renew_time, sizeof(rec.renew_time), "%s", v);
	rec.duration_s = json_integer_value(kj_get(j, "spec.leaseDurationSeconds"));
	rec.transitions = json_integer_value(kj_get(j, "spec.leaseTransitions"));
	v = kj_str(j, "metadata.resourceVersion");
	snprintf(l->rv, sizeof(l->rv), "%s", v ? v : "");
	json_decref(j);
	if (!l->exists || strcmp(rec.holder, l->seen.holder) || strcmp(rec.renew_time, l->seen.renew_time))
		l->observed_ns = now;
	l->seen = rec;
	l->exists = true;
	return 0;
}

/* Creates or updates the lease for holder (""= release). */
static int write_lease(struct leader *l, const char *holder, int64_t duration_s,
		       int64_t transitions, bool create)
{
	struct kube_status st;
	char path[600], renew[KTIME_MICRO_LEN], acq[KTIME_MICRO_LEN];
	int64_t now = (int64_t)now_realtime_ns();
	json_t *j;
	char *body;
	int r;

	j = json_pack("{s:s,s:s,s:{s:s,s:s},s:{s:s,s:I,s:s,s:s,s:I}}",
		      "apiVersion", "coordination.k8s.io/v1", "kind", "Lease",
		      "metadata", "name", l->cfg.name, "namespace", l->cfg.namespace,
		      "spec", "holderIdentity", holder, "leaseDurationSeconds", (json_int_t)duration_s,
		      "acquireTime", ktime_format_micro(l->acquire_ns ? l->acquire_ns : now, acq),
		      "renewTime", ktime_format_micro(now, renew),
		      "leaseTransitions", (json_int_t)transitions);
	if (!j)
		return -ENOMEM;
	if (!create && json_object_set_new(json_object_get(j, "metadata"), "resourceVersion",
					   json_string(l->rv))) {
		json_decref(j);
		return -ENOMEM;
	}
	body = json_dumps(j, JSON_COMPACT);
	json_decref(j);
	if (!body)
		return -ENOMEM;
	if (create)
		snprintf(path, sizeof(path), "/apis/coordination.k8s.io/v1/namespaces/%s/leases",
			 l->cfg.namespace);
	else
		snprintf(path, sizeof(path), "/apis/coordination.k8s.io/v1/namespaces/%s/leases/%s",
			 l->cfg.namespace, l->cfg.name);
	r = lease_request(l, create ? "POST" : "PUT", path, body, NULL, NULL, &st);
	free(body);
	if (r < 0 && r != -ESTALE && r != -EEXIST)
		llog(l, 1, "lease %s/%s: %s", l->cfg.namespace, l->cfg.name, st.message);
	return r;
}

/* One round, begun at start: returns true if this candidate holds the lease afterwards. */
static bool try_acquire_or_renew(struct leader *l, uint64_t start)
{
	int64_t dur_s = (int64_t)(l->cfg.lease_duration_ns / NSEC_PER_SEC);
	enum leader_decision d;
	int r;

	l->deadline_ns = leader__round_deadline_ns(&l->cfg, start, l->leading,
						   atomic_load(&l->act_until_ns));
	r = read_lease(l);
	if (dur_s < 1)
		dur_s = 1;
	if (r == -ENOENT) {
		l->acquire_ns = (int64_t)now_realtime_ns();
		l->exists = false;
		return write_lease(l, l->cfg.identity, dur_s, 0, true) == 0;
	}
	if (r < 0)
		return false;
	d = leader__decide(&l->seen, l->cfg.identity, l->observed_ns, now_monotonic_ns());
	if (d != LEADER_RENEW && l->leading) {
		/* the record names another holder (or none): whoever wrote it, stop acting now */
		atomic_store(&l->act_until_ns, 0);
		llog(l, 0, "the lease %s/%s is no longer ours (holder '%s')", l->cfg.namespace,
		     l->cfg.name, l->seen.holder);
		return false;
	}
	if (d == LEADER_WAIT)
		return false;
	if (d == LEADER_TAKE)
		l->acquire_ns = (int64_t)now_realtime_ns();
	r = write_lease(l, l->cfg.identity, dur_s,
			l->seen.transitions + (d == LEADER_TAKE ? 1 : 0), false);
	return r == 0;
}

static void nap(struct leader *l, uint64_t ns)
{
	uint64_t end = now_monotonic_ns() + ns;

	while (!atomic_load(&l->stop) && now_monotonic_ns() < end)
		sleep_ns(20 * NSEC_PER_MSEC);
}

/* A round begun at start got or kept the lease: may act until start + renew deadline. */
static void renewed(struct leader *l, uint64_t start)
{
	atomic_store(&l->act_until_ns, start + l->cfg.renew_deadline_ns);
	if (l->leading)
		return;
	l->leading = true;
	llog(l, 3, "became the leader (lease %s/%s, identity %s)", l->cfg.namespace, l->cfg.name,
	     l->cfg.identity);
}

/* Until the next round: the retry period, but a leader short of time tries again at its
 * deadline at the latest (where a round with no time left finds it lost). */
static uint64_t until_next_round(struct leader *l)
{
	uint64_t now = now_monotonic_ns(), until = atomic_load(&l->act_until_ns);

	if (l->leading && until < now + l->cfg.retry_period_ns)
		return until > now ? until - now : 0;
	return l->cfg.retry_period_ns;
}

static void *run(void *arg)
{
	struct leader *l = arg;

	while (!atomic_load(&l->stop)) {
		uint64_t start = now_monotonic_ns();

		if (try_acquire_or_renew(l, start)) {
			renewed(l, start);
		} else if (l->leading && now_monotonic_ns() >= atomic_load(&l->act_until_ns)) {
			l->leading = false;
			atomic_store(&l->lost, true);
			llog(l, 0, "lost the lease %s/%s: could not renew it within %llu ms; stopped "
			     "acting at the renew deadline (writes refused from then on)",
			     l->cfg.namespace, l->cfg.name,
			     (unsigned long long)(l->cfg.renew_deadline_ns / NSEC_PER_MSEC));
			break;
		}
		nap(l, until_next_round(l));
	}
	return NULL;
}

int leader__start(struct leader *l)
{
	int r = pthread_create(&l->thread, NULL, run, l);

	if (r)
		return -r;
	l->running = true;
	return 0;
}

uint64_t leader__act_left_ns(struct leader *l)
{
	uint64_t until = atomic_load(&l->act_until_ns), now = now_monotonic_ns();

	return until > now ? until - now : 0;
}

bool leader__may_act(struct leader *l)
{
	return leader__act_left_ns(l) > 0;
}

bool leader__is_leader(struct leader *l)
{
	return leader__may_act(l);
}

static uint64_t write_gate(void *ctx)
{
	return leader__act_left_ns(ctx);
}

void leader__fence_writes(struct leader *l)
{
	kube_client__set_write_gate(write_gate, l);
	l->fenced = true;
}

bool leader__lost(struct leader *l)
{
	return atomic_load(&l->lost);
}

void leader__free(struct leader *l)
{
	if (!l)
		return;
	if (l->running) {
		atomic_store(&l->stop, true);
		pthread_join(l->thread, NULL);
	}
	if (l->leading && leader__may_act(l)) {
		/* release: an empty holder lets a standby take over without waiting; only while
		 * this replica may still act, as any write */
		l->deadline_ns = atomic_load(&l->act_until_ns);
		if (read_lease(l) == 0 && strcmp(l->seen.holder, l->cfg.identity) == 0 &&
		    write_lease(l, "", 1, l->seen.transitions, false) == 0)
			llog(l, 3, "released the lease %s/%s", l->cfg.namespace, l->cfg.name);
		atomic_store(&l->act_until_ns, 0);
	}
	if (l->fenced)
		kube_client__set_write_gate(NULL, NULL);
	kube_client__free(l->kc);
	free(l);
}
