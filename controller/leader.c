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
	bool running;
	atomic_bool stop, leading, lost;
	struct lease_record seen;
	uint64_t observed_ns;
	uint64_t last_renew_ns;
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
	kube_client__set_timeout_ms(l->kc, (long)(cfg->retry_period_ns / NSEC_PER_MSEC) + 2000);
	*ret = l;
	return 0;
}

/* GETs the lease into l->seen; -ENOENT when there is none. */
static int read_lease(struct leader *l, uint64_t now)
{
	struct kube_status st;
	struct lease_record rec = { .duration_s = 0 };
	char path[600], *body = NULL;
	size_t len = 0;
	json_t *j;
	const char *v;
	int r;

	snprintf(path, sizeof(path), "/apis/coordination.k8s.io/v1/namespaces/%s/leases/%s",
		 l->cfg.namespace, l->cfg.name);
	r = kube_client__request(l->kc, "GET", path, NULL, NULL, 0, &body, &len, &st);
	if (r < 0)
		return r;
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
	r = kube_client__request(l->kc, create ? "POST" : "PUT", path, NULL, body, strlen(body),
				 NULL, NULL, &st);
	free(body);
	if (r < 0 && r != -ESTALE && r != -EEXIST)
		llog(l, 1, "lease %s/%s: %s", l->cfg.namespace, l->cfg.name, st.message);
	return r;
}

/* One round: returns true if this candidate holds the lease afterwards. */
static bool try_acquire_or_renew(struct leader *l)
{
	uint64_t now = now_monotonic_ns();
	int64_t dur_s = (int64_t)(l->cfg.lease_duration_ns / NSEC_PER_SEC);
	enum leader_decision d;
	int r = read_lease(l, now);

	if (dur_s < 1)
		dur_s = 1;
	if (r == -ENOENT) {
		l->acquire_ns = (int64_t)now_realtime_ns();
		l->exists = false;
		return write_lease(l, l->cfg.identity, dur_s, 0, true) == 0;
	}
	if (r < 0)
		return false;
	d = leader__decide(&l->seen, l->cfg.identity, l->observed_ns, now);
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

static void *run(void *arg)
{
	struct leader *l = arg;

	while (!atomic_load(&l->stop)) {
		bool ok = try_acquire_or_renew(l);
		uint64_t now = now_monotonic_ns();

		if (ok) {
			l->last_renew_ns = now;
			if (!atomic_load(&l->leading)) {
				atomic_store(&l->leading, true);
				llog(l, 3, "became the leader (lease %s/%s, identity %s)",
				     l->cfg.namespace, l->cfg.name, l->cfg.identity);
			}
		} else if (atomic_load(&l->leading) &&
			   now - l->last_renew_ns > l->cfg.renew_deadline_ns) {
			atomic_store(&l->leading, false);
			atomic_store(&l->lost, true);
			llog(l, 0, "lost the lease %s/%s: could not renew it within %llu ms",
			     l->cfg.namespace, l->cfg.name,
			     (unsigned long long)(l->cfg.renew_deadline_ns / NSEC_PER_MSEC));
			break;
		}
		nap(l, l->cfg.retry_period_ns);
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

bool leader__is_leader(struct leader *l)
{
	return atomic_load(&l->leading);
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
	if (atomic_load(&l->leading)) {
		/* release: an empty holder lets a standby take over without waiting */
		if (read_lease(l, now_monotonic_ns()) == 0 &&
		    strcmp(l->seen.holder, l->cfg.identity) == 0 &&
		    write_lease(l, "", 1, l->seen.transitions, false) == 0)
			llog(l, 3, "released the lease %s/%s", l->cfg.namespace, l->cfg.name);
	}
	kube_client__free(l->kc);
	free(l);
}
