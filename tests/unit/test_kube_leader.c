/* SPDX-License-Identifier: MIT */
/*
 * Leader election that fences (controller/leader.c) and the kube client's write gate
 * (controller/kubeclient.c): the timing rules, the round deadline, a write refused or cut
 * short by the gate, a leader whose right to act runs out on its own clock when its API
 * server stops answering, one that steps down when the Lease names another holder, and the
 * release on a graceful stop — against a small Lease server in this process.
 */
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <cmocka.h>
#include <jansson.h>
#include "common/timeutil.h"
#include "controller/kubeclient.h"
#include "controller/leader.h"

#define MS NSEC_PER_MSEC
#define S NSEC_PER_SEC

/* ---- the pure part -------------------------------------------------------------------- */

static int check(uint64_t lease, uint64_t renew, uint64_t retry, char *msg, size_t len)
{
	struct leader_config cfg = { .lease_duration_ns = lease, .renew_deadline_ns = renew,
				     .retry_period_ns = retry };

	msg[0] = '\0';
	return leader__check_timing(&cfg, msg, len);
}

static void test_check_timing(void **state)
{
	char msg[512];

	(void)state;
	assert_int_equal(check(15 * S, 10 * S, 2 * S, msg, sizeof(msg)), 0);   /* the defaults */
	assert_int_equal(check(3 * S, 2 * S, 500 * MS, msg, sizeof(msg)), 0);  /* the tests' */
	assert_int_equal(check(1 * S, 0, 0, msg, sizeof(msg)), -EINVAL);

	/* the Lease keeps whole seconds: 2.5 s would be read back as 2 */
	assert_int_equal(check(2500 * MS, 1 * S, 200 * MS, msg, sizeof(msg)), -EINVAL);
	assert_non_null(strstr(msg, "--lease-duration 2500 ms: give whole seconds"));
	assert_int_equal(check(500 * MS, 200 * MS, 50 * MS, msg, sizeof(msg)), -EINVAL);

	/* the leader must stop acting a margin before anyone may take over */
	assert_int_equal(check(3 * S, 2500 * MS, 500 * MS, msg, sizeof(msg)), -EINVAL);
	assert_non_null(strstr(msg, "--renew-deadline 2500 ms must end at least 1000 ms before "
				    "--lease-duration 3000 ms"));
	assert_int_equal(check(15 * S, 15 * S, 2 * S, msg, sizeof(msg)), -EINVAL);
	assert_int_equal(check(15 * S, 20 * S, 2 * S, msg, sizeof(msg)), -EINVAL);

	/* a failed renewal must be tried once more before the deadline */
	assert_int_equal(check(15 * S, 10 * S, 6 * S, msg, sizeof(msg)), -EINVAL);
	assert_non_null(strstr(msg, "--renew-deadline 10000 ms must be at least twice "
				    "--retry-period 6000 ms"));
	assert_int_equal(check(15 * S, 10 * S, 10 * S, msg, sizeof(msg)), -EINVAL);
	assert_int_equal(check(15 * S, 10 * S, 5 * S, msg, sizeof(msg)), 0);
}

static void test_round_deadline(void **state)
{
	struct leader_config cfg = { .lease_duration_ns = 3 * S, .renew_deadline_ns = 2 * S,
				     .retry_period_ns = 500 * MS };

	(void)state;
	/* a candidate's round: its own renew deadline */
	assert_int_equal(leader__round_deadline_ns(&cfg, 100 * S, false, 0), 102 * S);
	assert_int_equal(leader__round_deadline_ns(&cfg, 100 * S, false, 99 * S), 102 * S);
	/* the leader's: no later than its right to act, which the last renewal set */
	assert_int_equal(leader__round_deadline_ns(&cfg, 100 * S, true, 101 * S), 101 * S);
	assert_int_equal(leader__round_deadline_ns(&cfg, 100 * S, true, 99 * S), 99 * S);
	assert_int_equal(leader__round_deadline_ns(&cfg, 100 * S, true, 105 * S), 102 * S);
}

static void test_decide_dates_changes(void **state)
{
	struct lease_record r = { .duration_s = 3 };

	(void)state;
	snprintf(r.holder, sizeof(r.holder), "other");
	/* seen changing at 10 s: not before 13 s */
	assert_int_equal(leader__decide(&r, "me", 10 * S, 12999 * MS), LEADER_WAIT);
	assert_int_equal(leader__decide(&r, "me", 10 * S, 13 * S), LEADER_TAKE);
	r.holder[0] = '\0';                                   /* released: at once */
	assert_int_equal(leader__decide(&r, "me", 10 * S, 10 * S), LEADER_TAKE);
}

/* ---- a Lease server: one thread, one request per connection ---------------------------- */

struct lease_srv {
	int fd, port;
	pthread_t t;
	atomic_bool hang, stop;
	atomic_bool steal;              /* the next GET finds the lease held by "other" */
	atomic_int lease_puts, other_writes;
	char *lease;                    /* the object, as last written; NULL: none */
	int rv;
};

static int read_request(int c, char *buf, size_t cap, char **body)
{
	size_t n = 0, want = 0;
	char *end, *cl;
	ssize_t r;

	for (;;) {
		r = read(c, buf + n, cap - 1 - n);
		if (r <= 0)
			return -1;
		n += (size_t)r;
		buf[n] = '\0';
		end = strstr(buf, "\r\n\r\n");
		if (!end)
			continue;
		cl = strcasestr(buf, "\r\nContent-Length: ");
		want = (size_t)(end + 4 - buf) + (cl ? strtoul(cl + 18, NULL, 10) : 0);
		if (n >= want || n + 1 >= cap)
			break;
	}
	*body = end + 4;
	return 0;
}

static void answer(int c, const char *status, const char *body)
{
	char out[8192];
	int n = snprintf(out, sizeof(out), "HTTP/1.1 %s\r\nContent-Type: application/json\r\n"
			 "Content-Length: %zu\r\nConnection: close\r\n\r\n%s", status, strlen(body), body);

	if (write(c, out, (size_t)n) < 0)
		n = 0;
}

/* Keeps a written lease with the next resourceVersion (holder: as written, or "other"). */
static void store_lease(struct lease_srv *s, const char *body, const char *holder)
{
	json_t *j = json_loads(body, 0, NULL);
	char rv[16];

	assert_non_null(j);
	if (holder)
		json_object_set_new(json_object_get(j, "spec"), "holderIdentity", json_string(holder));
	snprintf(rv, sizeof(rv), "%d", ++s->rv);
	json_object_set_new(json_object_get(j, "metadata"), "resourceVersion", json_string(rv));
	free(s->lease);
	s->lease = json_dumps(j, JSON_COMPACT);
	json_decref(j);
}

static void serve_one(struct lease_srv *s, int c)
{
	char buf[16384], *body;
	bool lease;

	if (read_request(c, buf, sizeof(buf), &body) < 0)
		return;
	while (atomic_load(&s->hang) && !atomic_load(&s->stop))
		sleep_ns(10 * MS);           /* a server that stopped answering */
	lease = strstr(buf, "/leases") != NULL;
	if (lease && s->lease && atomic_exchange(&s->steal, false))
		store_lease(s, s->lease, "other");
	if (strncmp(buf, "GET ", 4) == 0) {
		if (lease && !s->lease)
			answer(c, "404 Not Found", "{\"kind\":\"Status\",\"reason\":\"NotFound\",\"code\":404}");
		else
			answer(c, "200 OK", lease ? s->lease : "{}");
		return;
	}
	if (!lease) {
		atomic_fetch_add(&s->other_writes, 1);
		answer(c, "200 OK", "{}");
		return;
	}
	atomic_fetch_add(&s->lease_puts, 1);
	store_lease(s, body, NULL);
	answer(c, strncmp(buf, "POST ", 5) == 0 ? "201 Created" : "200 OK", s->lease);
}

static void *lease_serve(void *arg)
{
	struct lease_srv *s = arg;

	while (!atomic_load(&s->stop)) {
		struct pollfd p = { .fd = s->fd, .events = POLLIN };
		int c;

		if (poll(&p, 1, 50) <= 0)
			continue;
		c = accept4(s->fd, NULL, NULL, SOCK_CLOEXEC);
		if (c < 0)
			continue;
		serve_one(s, c);
		close(c);
	}
	return NULL;
}

static void lease_srv_start(struct lease_srv *s, char *server, size_t len)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t alen = sizeof(a);

	s->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(s->fd >= 0);
	assert_int_equal(bind(s->fd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(listen(s->fd, 16), 0);
	assert_int_equal(getsockname(s->fd, (struct sockaddr *)&a, &alen), 0);
	s->port = ntohs(a.sin_port);
	snprintf(server, len, "http://127.0.0.1:%d", s->port);
	assert_int_equal(pthread_create(&s->t, NULL, lease_serve, s), 0);
}

static void lease_srv_stop(struct lease_srv *s)
{
	atomic_store(&s->stop, true);
	pthread_join(s->t, NULL);
	close(s->fd);
	free(s->lease);
}

/* ---- the write gate ----------------------------------------------------------------- */

static uint64_t gate_left_ns;

static uint64_t test_gate(void *ctx)
{
	(void)ctx;
	return gate_left_ns;
}

static int post(struct kube_client *c, struct kube_status *st)
{
	return kube_client__request(c, "POST", "/api/v1/namespaces/ns/events", NULL, "{}", 2,
				    NULL, NULL, st);
}

static void test_write_gate(void **state)
{
	struct lease_srv s = { .fd = -1 };
	struct kube_config cfg = { 0 };
	struct kube_client *c = NULL, *own = NULL;
	struct kube_status st;
	char server[64];
	uint64_t t;

	(void)state;
	lease_srv_start(&s, server, sizeof(server));
	cfg.server = server;
	assert_int_equal(kube_client__new(&cfg, &c), 0);
	assert_int_equal(kube_client__new(&cfg, &own), 0);
	kube_client__skip_write_gate(own);
	kube_client__set_write_gate(test_gate, NULL);

	/* not the leader: writes are refused here, reads and the lease's own client go out */
	gate_left_ns = 0;
	assert_int_equal(post(c, &st), -ENOLCK);
	assert_non_null(strstr(st.message, "not the leader (lease lost or not renewed in time)"));
	assert_non_null(strstr(st.message, "POST /api/v1/namespaces/ns/events"));
	assert_int_equal(kube_client__request(c, "DELETE", "/api/v1/x", NULL, NULL, 0, NULL, NULL,
					      &st), -ENOLCK);
	assert_int_equal(atomic_load(&s.other_writes), 0);
	assert_int_equal(kube_client__request(c, "GET", "/api/v1/x", NULL, NULL, 0, NULL, NULL,
					      &st), 0);
	assert_int_equal(post(own, &st), 0);
	assert_int_equal(atomic_load(&s.other_writes), 1);

	/* the leader: the write goes out */
	gate_left_ns = 10 * S;
	assert_int_equal(post(c, &st), 0);
	assert_int_equal(atomic_load(&s.other_writes), 2);

	/* 300 ms left to act and a server that does not answer: the write ends in 300 ms, not
	 * at the client's 30 s timeout */
	gate_left_ns = 300 * MS;
	atomic_store(&s.hang, true);
	t = now_monotonic_ns();
	assert_int_equal(post(c, &st), -ETIMEDOUT);
	t = now_monotonic_ns() - t;
	assert_true(t >= 250 * MS && t < 2 * S);
	atomic_store(&s.hang, false);

	kube_client__set_write_gate(NULL, NULL);
	gate_left_ns = 0;
	assert_int_equal(post(c, &st), 0);                      /* no gate: nothing refused */
	kube_client__free(c);
	kube_client__free(own);
	lease_srv_stop(&s);
}

/* ---- a leader whose API server stops answering --------------------------------------- */

static atomic_bool logged_stopped;

static void test_log(void *ctx, int level, const char *msg)
{
	(void)ctx;
	(void)level;
	if (strstr(msg, "stopped acting at the renew deadline"))
		atomic_store(&logged_stopped, true);
}

/* Waits up to limit for fn(l) to be want; returns how long it took. */
static uint64_t wait_until(bool (*fn)(struct leader *), struct leader *l, bool want,
			   uint64_t limit)
{
	uint64_t t0 = now_monotonic_ns();

	while (fn(l) != want && now_monotonic_ns() - t0 < limit)
		sleep_ns(5 * MS);
	return now_monotonic_ns() - t0;
}

/* A Lease server and a candidate "me" for it: lease 2 s, renew deadline 1 s, retry 200 ms. */
struct rig {
	struct lease_srv s;
	struct kube_config kcfg;
	struct leader_config cfg;
	char server[64];
};

static struct leader *rig_start(struct rig *r)
{
	struct leader *l = NULL;
	char msg[256];

	*r = (struct rig){
		.s = { .fd = -1 },
		.cfg = { .kube = &r->kcfg, .namespace = "ns", .name = "lease", .identity = "me",
			 .lease_duration_ns = 2 * S, .renew_deadline_ns = 1 * S,
			 .retry_period_ns = 200 * MS, .log = test_log },
	};
	atomic_store(&logged_stopped, false);
	lease_srv_start(&r->s, r->server, sizeof(r->server));
	r->kcfg.server = r->server;
	r->kcfg.namespace = "ns";
	assert_int_equal(leader__check_timing(&r->cfg, msg, sizeof(msg)), 0);
	assert_int_equal(leader__new(&r->cfg, &l), 0);
	return l;
}

static void test_leader_stops_acting_at_its_deadline(void **state)
{
	struct rig rig;
	struct lease_srv *s = &rig.s;
	struct leader *l = rig_start(&rig);
	struct kube_client *c = NULL;
	struct kube_status st;
	uint64_t took;
	int puts;

	(void)state;
	leader__fence_writes(l);
	assert_int_equal(kube_client__new(&rig.kcfg, &c), 0);
	assert_false(leader__may_act(l));
	assert_int_equal(post(c, &st), -ENOLCK);                /* not yet the leader */
	assert_int_equal(leader__start(l), 0);

	took = wait_until(leader__may_act, l, true, 3 * S);
	assert_true(took < 3 * S);
	assert_true(leader__is_leader(l));
	assert_true(leader__act_left_ns(l) <= 1 * S);
	assert_int_equal(post(c, &st), 0);                      /* the leader writes */

	/* renewals go on: still the leader well past one renew deadline */
	puts = atomic_load(&s->lease_puts);
	sleep_ns(1500 * MS);
	assert_true(leader__may_act(l) && atomic_load(&s->lease_puts) >= puts + 3);

	/* the server stops answering: the right to act ends within one renew deadline, on the
	 * leader's own clock, and the round in flight ends with it (not a fixed timeout later) */
	atomic_store(&s->hang, true);
	took = wait_until(leader__may_act, l, false, 3 * S);
	assert_true(took <= 1 * S + 100 * MS);
	assert_int_equal(post(c, &st), -ENOLCK);
	took += wait_until(leader__lost, l, true, 3 * S);
	assert_true(took <= 1 * S + 400 * MS);
	assert_true(leader__lost(l) && !leader__is_leader(l));
	assert_true(atomic_load(&logged_stopped));

	atomic_store(&s->hang, false);
	leader__free(l);                     /* lost: nothing to release; the fence is lifted */
	assert_int_equal(post(c, &st), 0);
	kube_client__free(c);
	lease_srv_stop(s);
}

/* The lease names another holder (written by someone else): the leader stops acting at its
 * next round, not at its renew deadline. */
static void test_leader_steps_down_when_the_lease_is_not_its_own(void **state)
{
	struct rig rig;
	struct leader *l = rig_start(&rig);
	uint64_t took;

	(void)state;
	assert_int_equal(leader__start(l), 0);
	assert_true(wait_until(leader__may_act, l, true, 3 * S) < 3 * S);
	atomic_store(&rig.s.steal, true);
	took = wait_until(leader__may_act, l, false, 3 * S);
	assert_true(took <= 600 * MS);                  /* a retry period and a round */
	assert_true(wait_until(leader__lost, l, true, 1 * S) < 1 * S);
	leader__free(l);
	assert_non_null(strstr(rig.s.lease, "\"holderIdentity\":\"other\""));   /* not released */
	lease_srv_stop(&rig.s);
}

/* A graceful stop releases the lease while the leader may still act. */
static void test_leader_releases_on_free(void **state)
{
	struct rig rig;
	struct leader *l = rig_start(&rig);

	(void)state;
	assert_int_equal(leader__start(l), 0);
	assert_true(wait_until(leader__may_act, l, true, 3 * S) < 3 * S);
	leader__free(l);
	assert_non_null(rig.s.lease);
	assert_non_null(strstr(rig.s.lease, "\"holderIdentity\":\"\""));
	assert_false(atomic_load(&logged_stopped));
	lease_srv_stop(&rig.s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_check_timing),
		cmocka_unit_test(test_round_deadline),
		cmocka_unit_test(test_decide_dates_changes),
		cmocka_unit_test(test_write_gate),
		cmocka_unit_test(test_leader_stops_acting_at_its_deadline),
		cmocka_unit_test(test_leader_steps_down_when_the_lease_is_not_its_own),
		cmocka_unit_test(test_leader_releases_on_free),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
