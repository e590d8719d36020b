/* SPDX-License-Identifier: MIT */
/*
 * The controller's API plumbing: controller/kubeclient.c against a small HTTP server in this
 * process (bearer token from a rotating file, Status errors, streaming), controller/kjson.c
 * (list and watch splitting at every chunk size), controller/kpod.c, controller/selector.c,
 * controller/ktime.c, rv_compare(), leader__decide().
 */
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <cmocka.h>
#include "controller/informer.h"
#include "controller/kjson.h"
#include "controller/kpod.h"
#include "controller/ktime.h"
#include "controller/kubeclient.h"
#include "controller/leader.h"
#include "controller/selector.h"

/* ---- a one-thread HTTP/1.1 server: answers from a script, records what it got ----------- */

struct srv {
	int fd, port;
	pthread_t t;
	char token[64];              /* the only accepted bearer token */
	char last_auth[128];
	char last_line[256];
	int requests;
};

static void *serve(void *arg)
{
	struct srv *s = arg;

	for (;;) {
		int c = accept4(s->fd, NULL, NULL, SOCK_CLOEXEC);
		char buf[8192], *auth, out[4096], want[128];
		ssize_t n = 0, r;
		const char *status, *body;

		if (c < 0)
			return NULL;
		for (;;) {                    /* one request per connection (Connection: close) */
			r = read(c, buf + n, sizeof(buf) - 1 - (size_t)n);
			if (r <= 0)
				break;
			n += r;
			buf[n] = '\0';
			if (strstr(buf, "\r\n\r\n"))
				break;
		}
		buf[n] = '\0';
		s->requests++;
		snprintf(s->last_line, sizeof(s->last_line), "%.*s", (int)strcspn(buf, "\r"), buf);
		auth = strcasestr(buf, "\r\nAuthorization: ");
		snprintf(s->last_auth, sizeof(s->last_auth), "%.*s",
			 auth ? (int)strcspn(auth + 2, "\r") : 0, auth ? auth + 2 : "");
		snprintf(want, sizeof(want), "Authorization: Bearer %s", s->token);
		if (strcmp(s->last_auth, want) != 0) {
			status = "401 Unauthorized";
			body = "{\"kind\":\"Status\",\"apiVersion\":\"v1\",\"status\":\"Failure\","
			       "\"message\":\"Unauthorized\",\"reason\":\"Unauthorized\",\"code\":401}";
		} else if (strstr(s->last_line, "/conflict")) {
			status = "409 Conflict";
			body = "{\"kind\":\"Status\",\"status\":\"Failure\",\"message\":\"the object has "
			       "been modified\",\"reason\":\"Conflict\",\"code\":409}";
		} else if (strstr(s->last_line, "/exists")) {
			status = "409 Conflict";
			body = "{\"kind\":\"Status\",\"reason\":\"AlreadyExists\",\"code\":409}";
		} else if (strstr(s->last_line, "/gone")) {
			status = "410 Gone";
			body = "{\"kind\":\"Status\",\"reason\":\"Expired\",\"message\":\"too old\",\"code\":410}";
		} else if (strstr(s->last_line, "/plain500")) {
			status = "500 Internal Server Error";
			body = "oops\x01";
		} else if (strstr(s->last_line, "/watch")) {
			status = "200 OK";
			body = "{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":\"a\",\"resourceVersion\":\"5\"}}}\n"
			       "{\"type\":\"BOOKMARK\",\"object\":{\"metadata\":{\"resourceVersion\":\"7\"}}}\n";
		} else {
			status = "200 OK";
			body = "{\"ok\":true}";
		}
		n = snprintf(out, sizeof(out), "HTTP/1.1 %s\r\nContent-Type: application/json\r\n"
			     "Content-Length: %zu\r\nConnection: close\r\n\r\n%s", status, strlen(body), body);
		if (write(c, out, (size_t)n) < 0)
			n = 0;
		close(c);
	}
}

static void srv_start(struct srv *s)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(a);

	s->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	assert_true(s->fd >= 0);
	assert_int_equal(bind(s->fd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(listen(s->fd, 16), 0);
	assert_int_equal(getsockname(s->fd, (struct sockaddr *)&a, &len), 0);
	s->port = ntohs(a.sin_port);
	assert_int_equal(pthread_create(&s->t, NULL, serve, s), 0);
}

static void srv_stop(struct srv *s)
{
	shutdown(s->fd, SHUT_RDWR);
	close(s->fd);
	pthread_join(s->t, NULL);
}

static void write_token(const char *path, const char *tok)
{
	char tmp[300];
	FILE *f;

	/* as the kubelet does it: a new file renamed over the old */
	snprintf(tmp, sizeof(tmp), "%s.new", path);
	f = fopen(tmp, "we");
	assert_non_null(f);
	fprintf(f, "%s\n", tok);
	fclose(f);
	assert_int_equal(rename(tmp, path), 0);
}

struct chunks {
	char buf[4096];
	size_t len;
};

static int collect(void *ctx, const char *b, size_t n)
{
	struct chunks *c = ctx;

	memcpy(c->buf + c->len, b, n);
	c->len += n;
	return 0;
}

static void test_client_token_rotation_and_errors(void **state)
{
	struct srv s = { 0 };
	char dir[] = "/tmp/aiprof-kc-XXXXXX", tokfile[300], server[64];
	struct kube_config cfg = { 0 };
	struct kube_client *c = NULL;
	struct kube_status st;
	struct chunks ch = { .len = 0 };
	char *body = NULL;
	size_t len = 0;

	(void)state;
	assert_non_null(mkdtemp(dir));
	snprintf(tokfile, sizeof(tokfile), "%s/token", dir);
	snprintf(s.token, sizeof(s.token), "token-one");
	write_token(tokfile, "token-one");
	srv_start(&s);
	snprintf(server, sizeof(server), "http://127.0.0.1:%d", s.port);
	cfg.server = server;
	cfg.token_file = tokfile;
	assert_int_equal(kube_client__new(&cfg, &c), 0);

	assert_int_equal(kube_client__request(c, "GET", "/api/v1/pods", NULL, NULL, 0, &body, &len,
					      &st), 0);
	assert_string_equal(body, "{\"ok\":true}");
	assert_string_equal(s.last_auth, "Authorization: Bearer token-one");
	free(body);

	/* the kubelet rotated the token: the next request reads the new file */
	snprintf(s.token, sizeof(s.token), "token-two");
	write_token(tokfile, "token-two");
	assert_int_equal(kube_client__request(c, "GET", "/x", NULL, NULL, 0, NULL, NULL, &st), 0);
	assert_string_equal(s.last_auth, "Authorization: Bearer token-two");

	/* Status errors, typed */
	assert_int_equal(kube_client__request(c, "PATCH", "/conflict", "application/merge-patch+json",
					      "{}", 2, NULL, NULL, &st), -ESTALE);
	assert_int_equal(st.code, 409);
	assert_string_equal(st.reason, "Conflict");
	assert_string_equal(st.message, "the object has been modified");
	assert_int_equal(kube_client__request(c, "POST", "/exists", NULL, "{}", 2, NULL, NULL, &st),
			 -EEXIST);
	assert_int_equal(kube_client__request(c, "GET", "/gone", NULL, NULL, 0, NULL, NULL, &st),
			 -ETIME);
	assert_string_equal(st.reason, "Expired");
	assert_int_equal(kube_client__request(c, "GET", "/plain500", NULL, NULL, 0, NULL, NULL, &st),
			 -EIO);
	assert_string_equal(st.message, "oops?");           /* control characters replaced */

	/* a wrong token is refused, and the message never carries it */
	snprintf(s.token, sizeof(s.token), "token-three");
	assert_int_equal(kube_client__request(c, "GET", "/x", NULL, NULL, 0, NULL, NULL, &st),
			 -EKEYREJECTED);
	assert_null(strstr(st.message, "token-two"));

	/* streaming */
	snprintf(s.token, sizeof(s.token), "token-two");
	assert_int_equal(kube_client__stream(c, "/watch?watch=1", collect, &ch, 5, &st), 0);
	assert_int_equal(ch.len, strlen("{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":\"a\","
					 "\"resourceVersion\":\"5\"}}}\n{\"type\":\"BOOKMARK\",\"object\":"
					 "{\"metadata\":{\"resourceVersion\":\"7\"}}}\n"));
	kube_client__free(c);
	srv_stop(&s);

	/* nobody listening */
	assert_int_equal(kube_client__new(&cfg, &c), 0);
	assert_int_equal(kube_client__request(c, "GET", "/x", NULL, NULL, 0, NULL, NULL, &st),
			 -ECONNREFUSED);
	assert_int_equal(st.code, 0);
	kube_client__free(c);
	unlink(tokfile);
	rmdir(dir);
}

static void test_status_parse(void **state)
{
	struct kube_status st;
	static const char nf[] = "{\"kind\":\"Status\",\"reason\":\"NotFound\","
				 "\"message\":\"pods \\\"x\\\" not found\",\"code\":404}";
	static const char ex[] = "{\"kind\":\"Status\",\"code\":410,\"reason\":\"Expired\"}";

	(void)state;
	assert_int_equal(kube_status__parse(nf, sizeof(nf) - 1, 404, &st), -ENOENT);
	assert_string_equal(st.message, "pods \"x\" not found");
	assert_int_equal(kube_status__parse(NULL, 0, 403, &st), -EACCES);
	assert_string_equal(st.reason, "Forbidden");
	assert_string_equal(st.message, "HTTP 403 Forbidden");
	assert_int_equal(kube_errno(422, "Invalid"), -EINVAL);
	assert_int_equal(kube_errno(429, ""), -EBUSY);
	assert_int_equal(kube_errno(504, ""), -ETIMEDOUT);
	assert_int_equal(kube_errno(201, ""), 0);
	/* a watch ERROR event carries its code inside */
	assert_int_equal(kube_status__parse(ex, sizeof(ex) - 1, 0, &st), -ETIME);
}

/* ---- splitting ----------------------------------------------------------------------- */

struct pieces {
	char got[16][512];
	size_t n;
};

static int keep(void *ctx, const char *json, size_t len)
{
	struct pieces *p = ctx;

	assert_true(json[len] == '\0');
	if (p->n < 16)
		snprintf(p->got[p->n++], 512, "%.*s", (int)len, json);
	return 0;
}

static void test_list_split_any_chunking(void **state)
{
	static const char list[] =
		"{\"kind\":\"PodList\",\"apiVersion\":\"v1\",\"metadata\":{\"resourceVersion\":\"42\","
		"\"continue\":\"tok{]\"},\"items\":[{\"metadata\":{\"name\":\"a\",\"note\":\"}]\\\"{\"}},"
		" {\"metadata\":{\"name\":\"b\"},\"x\":[1,[2,{\"y\":3}]]}],\"trailer\":{\"items\":[9]}}";

	(void)state;
	for (size_t step = 1; step <= sizeof(list); step++) {
		struct kjson_split sp;
		struct pieces p = { .n = 0 };
		char *rv = NULL, *cont = NULL;

		kjson_split__init(&sp, KJSON_LIST, keep, &p);
		for (size_t off = 0; off < sizeof(list) - 1; off += step)
			assert_int_equal(kjson_split__feed(&sp, list + off, sizeof(list) - 1 - off < step ?
							   sizeof(list) - 1 - off : step), 0);
		assert_int_equal(kjson_split__finish(&sp), 0);
		assert_int_equal(p.n, 2);
		assert_string_equal(p.got[0], "{\"metadata\":{\"name\":\"a\",\"note\":\"}]\\\"{\"}}");
		assert_string_equal(p.got[1], "{\"metadata\":{\"name\":\"b\"},\"x\":[1,[2,{\"y\":3}]]}");
		assert_int_equal(kjson_split__list_meta(&sp, &rv, &cont), 0);
		assert_string_equal(rv, "42");
		assert_string_equal(cont, "tok{]");
		free(rv);
		free(cont);
		kjson_split__release(&sp);
	}
}

static void test_stream_split_and_events(void **state)
{
	static const char watch[] =
		"{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":\"a\",\"resourceVersion\":\"5\"}}}\n"
		"{\"type\":\"BOOKMARK\",\"object\":{\"metadata\":{\"resourceVersion\":\"7\"}}}"
		"{\"type\":\"ERROR\",\"object\":{\"kind\":\"Status\",\"code\":410,\"reason\":\"Expired\"}}\r\n";
	struct kjson_split sp;
	struct pieces p = { .n = 0 };
	struct kwatch_event ev;

	(void)state;
	kjson_split__init(&sp, KJSON_STREAM, keep, &p);
	for (size_t i = 0; i < sizeof(watch) - 1; i++)
		assert_int_equal(kjson_split__feed(&sp, watch + i, 1), 0);
	assert_int_equal(kjson_split__finish(&sp), 0);
	kjson_split__release(&sp);
	assert_int_equal(p.n, 3);
	assert_int_equal(kwatch_event__parse(p.got[0], strlen(p.got[0]), &ev), 0);
	assert_int_equal(ev.type, KWATCH_ADDED);
	assert_string_equal(ev.rv, "5");
	kwatch_event__release(&ev);
	assert_int_equal(kwatch_event__parse(p.got[1], strlen(p.got[1]), &ev), 0);
	assert_int_equal(ev.type, KWATCH_BOOKMARK);
	assert_string_equal(ev.rv, "7");
	kwatch_event__release(&ev);
	assert_int_equal(kwatch_event__parse(p.got[2], strlen(p.got[2]), &ev), 0);
	assert_int_equal(ev.type, KWATCH_ERROR);
	assert_int_equal(ev.status.code, 410);
	kwatch_event__release(&ev);
	assert_int_equal(kwatch_event__parse("{\"type\":\"ODD\",\"object\":{}}", 27, &ev), -EBADMSG);

	/* shapes that are not a list or a stream of objects */
	kjson_split__init(&sp, KJSON_LIST, keep, &p);
	assert_int_equal(kjson_split__feed(&sp, "{\"items\":[1]}", 13), -EBADMSG);
	kjson_split__release(&sp);
	kjson_split__init(&sp, KJSON_STREAM, keep, &p);
	assert_int_equal(kjson_split__feed(&sp, "[]", 2), -EBADMSG);
	kjson_split__release(&sp);
	kjson_split__init(&sp, KJSON_STREAM, keep, &p);
	assert_int_equal(kjson_split__feed(&sp, "{\"a\":", 5), 0);
	assert_int_equal(kjson_split__finish(&sp), -EBADMSG);     /* cut mid-object */
	kjson_split__release(&sp);
}

/* ---- objects ------------------------------------------------------------------------- */

static void test_kpod(void **state)
{
	static const char pod[] =
		"{\"metadata\":{\"name\":\"aiprof-x\",\"namespace\":\"train\",\"uid\":\"u1\","
		"\"resourceVersion\":\"9\",\"labels\":{\"aiprof.io/session-uid\":\"s-1\","
		"\"aiprof.io/session\":\"slow\",\"n\":5}},"
		"\"spec\":{\"nodeName\":\"n1\",\"runtimeClassName\":\"kata\",\"hostPID\":true,"
		"\"containers\":[{\"name\":\"injector\"}],\"ephemeralContainers\":[{\"name\":\"aiprof-e\"},"
		"{\"name\":\"debug\"}]},\"status\":{\"phase\":\"Succeeded\",\"containerStatuses\":[{"
		"\"name\":\"injector\",\"containerID\":\"containerd://1\",\"state\":{\"terminated\":{"
		"\"exitCode\":3,\"reason\":\"Error\",\"message\":\"{}\",\"startedAt\":\"2024-05-01T12:00:00Z\","
		"\"finishedAt\":\"2024-05-01T12:00:30Z\"}}}],\"ephemeralContainerStatuses\":[{\"name\":"
		"\"debug\",\"state\":{\"terminated\":{\"exitCode\":0,\"message\":\"secret stuff\"}}},"
		"{\"name\":\"aiprof-e\",\"state\":{\"running\":{}}}]}}";
	json_t *j = json_loads(pod, 0, NULL);
	struct kpod *p = NULL, *q = NULL;
	struct kcontainer c;
	int64_t t0;

	(void)state;
	assert_int_equal(kpod__from_json(j, &p), 0);
	json_decref(j);
	assert_string_equal(kpod__key(p), "train/aiprof-x");
	assert_string_equal(kpod__name(p), "aiprof-x");
	assert_string_equal(kpod__ns(p), "train");
	assert_string_equal(kpod__rv(p), "9");
	assert_string_equal(kpod__node(p), "n1");
	assert_string_equal(kpod__phase(p), "Succeeded");
	assert_string_equal(kpod__session_uid(p), "s-1");
	assert_string_equal(kpod__session_name(p), "slow");
	assert_string_equal(kpod__runtime_class(p), "kata");
	assert_true(p->host_pid);
	assert_false(p->deleting);
	assert_int_equal(p->n_labels, 2);                /* the non-string label is dropped */
	assert_true(kpod__container(p, "injector", &c));
	assert_int_equal(c.state, KC_TERMINATED);
	assert_int_equal(c.exit_code, 3);
	assert_string_equal(c.container_id, "containerd://1");
	assert_string_equal(c.reason, "Error");
	assert_string_equal(c.message, "{}");            /* an injector: kept */
	assert_int_equal(ktime_parse("2024-05-01T12:00:30Z", &t0), 0);
	assert_int_equal(c.finished_at, t0);
	assert_true(kpod__ephemeral(p, "debug", &c));
	assert_string_equal(c.message, "");              /* not ours: dropped */
	assert_true(kpod__ephemeral(p, "aiprof-e", &c));
	assert_int_equal(c.state, KC_RUNNING);
	assert_false(kpod__container(p, "nope", &c));
	assert_true(kpod__container_at(p, 0, &c));
	assert_string_equal(c.name, "injector");
	assert_false(kpod__container_at(p, 1, &c));
	assert_string_equal(kpod__label(p, "aiprof.io/session"), "slow");
	assert_null(kpod__label(p, "n"));
	{
		struct label_selector sel;
		char msg[100];
		json_t *sj = json_loads("{\"matchLabels\":{\"aiprof.io/session\":\"slow\"}}", 0, NULL);

		assert_int_equal(label_selector__parse(sj, &sel, msg, sizeof(msg)), 0);
		assert_true(kpod__matches(p, &sel));
		label_selector__clear(&sel);
		json_decref(sj);
	}
	/* the same pod parsed again does not differ; another state does */
	j = json_loads(pod, 0, NULL);
	assert_int_equal(kpod__from_json(j, &q), 0);
	json_decref(j);
	assert_false(kpod__differs(p, q));
	assert_true(kpod__differs(NULL, q));
	kpod__unref(q);
	{
		char other[sizeof(pod)];
		char *at;

		memcpy(other, pod, sizeof(pod));
		at = strstr(other, "\"running\":{}");
		memcpy(at, "\"waiting\":{}", 12);
		j = json_loads(other, 0, NULL);
		assert_int_equal(kpod__from_json(j, &q), 0);
		json_decref(j);
		assert_true(kpod__differs(p, q));
		kpod__unref(q);
	}
	assert_true(p->size < 600);
	kpod__unref(p);
	j = json_loads("{\"metadata\":{\"name\":\"x\"}}", 0, NULL);
	assert_int_equal(kpod__from_json(j, &p), -EINVAL);
	json_decref(j);
}

static void test_selector(void **state)
{
	struct label_selector s;
	struct kv labels[] = { { "job", "llama" }, { "rank", "3" }, { "tier", "gpu" } };
	char msg[200];
	json_t *j = json_loads("{\"matchLabels\":{\"job\":\"llama\"},\"matchExpressions\":["
			       "{\"key\":\"rank\",\"operator\":\"In\",\"values\":[\"2\",\"3\"]},"
			       "{\"key\":\"tier\",\"operator\":\"NotIn\",\"values\":[\"cpu\"]},"
			       "{\"key\":\"tier\",\"operator\":\"Exists\"},"
			       "{\"key\":\"canary\",\"operator\":\"DoesNotExist\"}]}", 0, NULL);

	(void)state;
	assert_int_equal(label_selector__parse(j, &s, msg, sizeof(msg)), 0);
	json_decref(j);
	assert_true(label_selector__matches(&s, labels, 3));
	labels[1].value = "4";
	assert_false(label_selector__matches(&s, labels, 3));
	assert_false(label_selector__matches(&s, labels, 1));
	label_selector__clear(&s);
	j = json_loads("{\"matchExpressions\":[{\"key\":\"a\",\"operator\":\"Exists\",\"values\":[\"x\"]}]}",
		       0, NULL);
	assert_int_equal(label_selector__parse(j, &s, msg, sizeof(msg)), -EINVAL);
	json_decref(j);
}

static void test_time_rv_leader(void **state)
{
	struct lease_record r = { .duration_s = 15 };
	char buf[KTIME_MICRO_LEN];
	int64_t ns;
	const uint64_t S = 1000000000ULL;

	(void)state;
	assert_int_equal(ktime_parse("2024-05-01T12:00:00.5+02:00", &ns), 0);
	assert_string_equal(ktime_format_micro(ns, buf), "2024-05-01T10:00:00.500000Z");
	assert_int_equal(ktime_parse("2024-02-30T00:00:00Z", &ns), -EINVAL);
	assert_int_equal(ktime_parse("9999-01-01T00:00:00Z", &ns), -EINVAL);
	assert_int_equal(ktime_parse("2024-05-01 12:00:00Z", &ns), -EINVAL);

	assert_true(rv_compare("10", "9") > 0);
	assert_true(rv_compare("009", "10") < 0);
	assert_int_equal(rv_compare("abc", "9"), 0);      /* opaque: no order */

	/* free lease: take it; ours: renew; another's, renewed lately: wait; expired: take */
	assert_int_equal(leader__decide(&r, "me", 0, 100 * S), LEADER_TAKE);
	snprintf(r.holder, sizeof(r.holder), "me");
	assert_int_equal(leader__decide(&r, "me", 0, 100 * S), LEADER_RENEW);
	snprintf(r.holder, sizeof(r.holder), "other");
	assert_int_equal(leader__decide(&r, "me", 90 * S, 100 * S), LEADER_WAIT);
	assert_int_equal(leader__decide(&r, "me", 85 * S, 100 * S), LEADER_TAKE);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_client_token_rotation_and_errors),
		cmocka_unit_test(test_status_parse),
		cmocka_unit_test(test_list_split_any_chunking),
		cmocka_unit_test(test_stream_split_and_events),
		cmocka_unit_test(test_kpod),
		cmocka_unit_test(test_selector),
		cmocka_unit_test(test_time_rv_leader),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
