/* SPDX-License-Identifier: MIT */
/*
 * aiprof-controller: reconciles ProfilingSessions through the Kubernetes API.
 * The top level: flags, configuration, the threads' lifecycle, signals, logging.
 */
#include <errno.h>
#include <getopt.h>
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "artstore.h"
#include "s3url.h"
#include "controller.h"
#include "httpd.h"
#include "kubeconfig.h"
#include "leader.h"
#include "log.h"
#include "timeutil.h"

static volatile sig_atomic_t stop_signal;

static unsigned shutdown_timeout_s = 10;

/* A stop that overran --shutdown-timeout: leave now (async-signal-safe). */
static void on_alarm(int sig)
{
	static const char msg[] = "aiprof-controller: not stopped within --shutdown-timeout of the "
				  "signal: exiting now\n";

	(void)sig;
	if (write(STDERR_FILENO, msg, sizeof(msg) - 1) < 0)
		_exit(1);
	_exit(1);
}

/* The first SIGTERM/SIGINT asks for a clean stop and arms the watchdog: the process is gone
 * by --shutdown-timeout whatever its threads are doing (a standby takes the lease once it
 * expires). */
static void on_signal(int sig)
{
	if (!stop_signal && shutdown_timeout_s)
		alarm(shutdown_timeout_s);
	stop_signal = sig;
}

static void usage(FILE *out)
{
	fprintf(out,
		"Usage: aiprof-controller [options]\n"
		"Reconciles aiprof.io/v1alpha1 ProfilingSessions: resolves the target pods, runs the\n"
		"injector next to them, and writes the result into the session's status.\n\n"
		"  --kubeconfig PATH        kubeconfig file(s), ':'-separated (default: $KUBECONFIG,\n"
		"                           else the in-cluster service account)\n"
		"  --context NAME           kubeconfig context (default: current-context)\n"
		"  --namespace NS           watch one namespace (default: all)\n"
		"  --metrics-addr ADDR      /healthz /readyz /metrics /ws/sessions (default :8080;\n"
		"                           port 0 picks a free one, printed at start)\n"
		"  --http-auth MODE         who may read /metrics and /ws/sessions: kubernetes\n"
		"                           (default: 'Authorization: Bearer <token>', checked with a\n"
		"                           TokenReview; /metrics needs get on the non-resource URL\n"
		"                           /metrics, the feed shows the namespaces where the token\n"
		"                           may list profilingsessions) or none (only with a loopback\n"
		"                           --metrics-addr such as 127.0.0.1:8080)\n"
		"  --max-ws-clients N       /ws/sessions clients at once (default 100; more get 503)\n"
		"  --max-connections N      HTTP connections at once (default 256, or --max-ws-clients\n"
		"                           + 16 if more; more are closed as they come)\n"
		"  --store-url URL          the in-cluster artifact store (PUT /v1/artifacts/NS/\n"
		"                           SESSION/NAME on this endpoint, docs/artifact-store.md) as\n"
		"                           injector pods reach it, such as\n"
		"                           http://aiprof-metrics.aiprof-system.svc:8080: sessions\n"
		"                           with no S3 store their artifacts as ConfigMaps; the\n"
		"                           store is served with --http-auth=kubernetes only\n"
		"  --store-max-file-bytes N one artifact at most (default 16Mi; Ki, Mi, Gi; more: 413)\n"
		"  --store-max-session-bytes N\n"
		"                           a session's artifacts at most (default 64Mi)\n"
		"  --store-max-namespace-bytes N\n"
		"                           every session's artifacts of one namespace at most,\n"
		"                           finished sessions' included (default 256Mi)\n"
		"  --store-max-namespace-sessions N\n"
		"                           sessions of one namespace with artifacts in the store\n"
		"                           at most (default 20)\n"
		"  --store-upload-timeout DURATION\n"
		"                           one upload, headers to the last byte, at most\n"
		"                           (default 5m; slower: closed)\n"
		"  --store-max-age DURATION a session in the store with no ttlSecondsAfterFinished\n"
		"                           is deleted, its artifacts with it, that long after it\n"
		"                           finished (default 168h)\n"
		"  --workers N              sessions reconciled in parallel (default 4)\n"
		"  --injector-image IMAGE   the aiprof injector image\n"
		"  --injector-namespace NS  where injector and merge pods of sessions that use the\n"
		"                           admin's storage run, with its Secret (default\n"
		"                           $POD_NAMESPACE, the controller's own; without either,\n"
		"                           each session's namespace); sessions that give their own\n"
		"                           spec.output.s3 keep theirs in their namespace\n"
		"  --image-pull-policy P    Always, IfNotPresent (default) or Never\n"
		"  --priority-class NAME    priorityClassName of injector pods\n"
		"  --grace DURATION         time beyond a session's duration for injection, build and\n"
		"                           upload before its deadline (default 2m)\n"
		"  --target-wait DURATION   how long targets may take to exist and run (default 60s)\n"
		"  --merge-node-selector KEY=VALUE\n"
		"                           nodeSelector of merge pods (repeat for more)\n"
		"  --merge-toleration KEY[=VALUE][:EFFECT]\n"
		"                           a toleration of merge pods (repeat for more); injector\n"
		"                           pods run on their target's node and tolerate every taint\n"
		"  --default-s3-bucket B    where sessions without spec.output.s3 upload; with\n"
		"  --default-s3-endpoint URL, --default-s3-prefix P, --default-s3-region R and\n"
		"  --default-s3-secret NAME  (a Secret looked up in the injector namespace by\n"
		"                           name; the controller never reads it)\n"
		"  --leader-elect / --no-leader-elect\n"
		"                           run as one of several replicas (default on)\n"
		"  --lease-namespace NS     the Lease's namespace (default: the configuration's)\n"
		"  --lease-name NAME        default aiprof-controller\n"
		"  --lease-duration D       default 15s (whole seconds); --renew-deadline D default\n"
		"                           10s, at least 1s shorter: a leader not renewed by then\n"
		"                           stops acting (every write refused) and exits 1;\n"
		"  --retry-period D         default 2s, at most half the renew deadline\n"
		"  --identity ID            this replica (default: hostname_pid)\n"
		"  --watch-timeout D        server-side watch timeout (default 5-10m at random)\n"
		"  --allow-inline-s3        let sessions give spec.output.s3 (their own endpoint,\n"
		"                           bucket and Secret); off: only the admin's storage\n"
		"                           (spec.output.storageRef) and the defaults\n"
		"  --max-sessions-per-namespace N\n"
		"                           sessions of one namespace running at once; later ones\n"
		"                           wait Pending (default: no limit)\n"
		"  --denied-namespaces LIST namespaces whose sessions are refused (TargetDenied),\n"
		"                           ','-separated (default kube-system,kube-public,\n"
		"                           kube-node-lease and $POD_NAMESPACE, the controller's own)\n"
		"  --shutdown-timeout D     exit this long after SIGTERM even if work is still\n"
		"                           stopping (default 10s; 0: wait for it)\n"
		"  --service-account-dir D  in-cluster credentials folder (default\n"
		"                           " KUBE_SA_DIR ")\n"
		"  -v, --verbose            debug logs;  -q, --quiet  warnings and errors only\n"
		"  -h, --help\n");
}

struct app {
	struct controller *ctl;
	struct httpd *http;
	struct leader *leader;
	bool leader_elect;
	atomic_bool started;
};

static void hook_log(void *ctx, int level, const char *msg)
{
	(void)log_internal((enum log_level)level, 0, "%s", msg);
}

static void hook_feed(void *ctx, const char *json, size_t len)
{
	struct app *a = ctx;

	httpd__broadcast(a->http, json, len);
}

static bool http_ready(void *ctx, char *why, size_t whylen)
{
	struct app *a = ctx;

	if (a->leader_elect && a->leader && !leader__is_leader(a->leader)) {
		snprintf(why, whylen, "standby: another replica holds the lease");
		return true;
	}
	if (!atomic_load(&a->started) || !controller__synced(a->ctl)) {
		snprintf(why, whylen, "caches not synced yet");
		return false;
	}
	return true;
}

static void http_metrics(void *ctx, struct strbuf *b)
{
	struct app *a = ctx;
	long pages = 0, rss = 0;
	FILE *f;

	strbuf_addf(b, "# HELP aiprof_leader 1 if this replica holds the lease.\n"
		    "# TYPE aiprof_leader gauge\naiprof_leader %d\n",
		    !a->leader_elect || (a->leader && leader__is_leader(a->leader)));
	if (atomic_load(&a->started))
		controller__metrics(a->ctl, b);
	f = fopen("/proc/self/statm", "re");
	if (f) {
		if (fscanf(f, "%ld %ld", &pages, &rss) != 2)
			rss = 0;
		fclose(f);
	}
	strbuf_addf(b, "# HELP process_resident_memory_bytes Resident memory size in bytes.\n"
		    "# TYPE process_resident_memory_bytes gauge\nprocess_resident_memory_bytes %ld\n",
		    rss * sysconf(_SC_PAGESIZE));
}

static void http_snapshot(void *ctx, struct strbuf *b)
{
	struct app *a = ctx;

	if (atomic_load(&a->started))
		controller__snapshot(a->ctl, b);
}

enum {
	OPT_KUBECONFIG = 0x100, OPT_CONTEXT, OPT_NAMESPACE, OPT_METRICS, OPT_WORKERS, OPT_IMAGE,
	OPT_PULL, OPT_PRIORITY, OPT_GRACE, OPT_TARGET_WAIT, OPT_LE, OPT_NO_LE, OPT_LEASE_NS,
	OPT_LEASE_NAME, OPT_LEASE_DUR, OPT_RENEW, OPT_RETRY, OPT_IDENTITY, OPT_WATCH_TIMEOUT,
	OPT_SA_DIR, OPT_MERGE_SEL, OPT_MERGE_TOL, OPT_S3_ENDPOINT, OPT_S3_BUCKET, OPT_S3_PREFIX,
	OPT_S3_REGION, OPT_S3_SECRET, OPT_DENIED_NS, OPT_SHUTDOWN_TIMEOUT, OPT_INLINE_S3,
	OPT_MAX_PER_NS, OPT_INJ_NS,
};

/* the artifact store's (artstore.h) */
enum { OPT_STORE_URL = 0x300, OPT_STORE_FILE, OPT_STORE_SESSION, OPT_STORE_AGE, OPT_STORE_NS_BYTES,
       OPT_STORE_NS_SESSIONS, OPT_STORE_TIMEOUT };

/* the HTTP endpoint's (httpd.h) */
enum { OPT_HTTP_AUTH = 0x200, OPT_MAX_WS, OPT_MAX_CONNS };

static const struct option long_opts[] = {
	{ "kubeconfig", required_argument, NULL, OPT_KUBECONFIG },
	{ "context", required_argument, NULL, OPT_CONTEXT },
	{ "namespace", required_argument, NULL, OPT_NAMESPACE },
	{ "metrics-addr", required_argument, NULL, OPT_METRICS },
	{ "http-auth", required_argument, NULL, OPT_HTTP_AUTH },
	{ "max-ws-clients", required_argument, NULL, OPT_MAX_WS },
	{ "max-connections", required_argument, NULL, OPT_MAX_CONNS },
	{ "workers", required_argument, NULL, OPT_WORKERS },
	{ "injector-image", required_argument, NULL, OPT_IMAGE },
	{ "injector-namespace", required_argument, NULL, OPT_INJ_NS },
	{ "image-pull-policy", required_argument, NULL, OPT_PULL },
	{ "priority-class", required_argument, NULL, OPT_PRIORITY },
	{ "grace", required_argument, NULL, OPT_GRACE },
	{ "target-wait", required_argument, NULL, OPT_TARGET_WAIT },
	{ "leader-elect", no_argument, NULL, OPT_LE },
	{ "no-leader-elect", no_argument, NULL, OPT_NO_LE },
	{ "lease-namespace", required_argument, NULL, OPT_LEASE_NS },
	{ "lease-name", required_argument, NULL, OPT_LEASE_NAME },
	{ "lease-duration", required_argument, NULL, OPT_LEASE_DUR },
	{ "renew-deadline", required_argument, NULL, OPT_RENEW },
	{ "retry-period", required_argument, NULL, OPT_RETRY },
	{ "identity", required_argument, NULL, OPT_IDENTITY },
	{ "watch-timeout", required_argument, NULL, OPT_WATCH_TIMEOUT },
	{ "service-account-dir", required_argument, NULL, OPT_SA_DIR },
	{ "merge-node-selector", required_argument, NULL, OPT_MERGE_SEL },
	{ "merge-toleration", required_argument, NULL, OPT_MERGE_TOL },
	{ "default-s3-endpoint", required_argument, NULL, OPT_S3_ENDPOINT },
	{ "default-s3-bucket", required_argument, NULL, OPT_S3_BUCKET },
	{ "default-s3-prefix", required_argument, NULL, OPT_S3_PREFIX },
	{ "default-s3-region", required_argument, NULL, OPT_S3_REGION },
	{ "default-s3-secret", required_argument, NULL, OPT_S3_SECRET },
	{ "denied-namespaces", required_argument, NULL, OPT_DENIED_NS },
	{ "allow-inline-s3", no_argument, NULL, OPT_INLINE_S3 },
	{ "max-sessions-per-namespace", required_argument, NULL, OPT_MAX_PER_NS },
	{ "shutdown-timeout", required_argument, NULL, OPT_SHUTDOWN_TIMEOUT },
	{ "store-url", required_argument, NULL, OPT_STORE_URL },
	{ "store-max-file-bytes", required_argument, NULL, OPT_STORE_FILE },
	{ "store-max-session-bytes", required_argument, NULL, OPT_STORE_SESSION },
	{ "store-max-namespace-bytes", required_argument, NULL, OPT_STORE_NS_BYTES },
	{ "store-max-namespace-sessions", required_argument, NULL, OPT_STORE_NS_SESSIONS },
	{ "store-upload-timeout", required_argument, NULL, OPT_STORE_TIMEOUT },
	{ "store-max-age", required_argument, NULL, OPT_STORE_AGE },
	{ "verbose", no_argument, NULL, 'v' },
	{ "quiet", no_argument, NULL, 'q' },
	{ "help", no_argument, NULL, 'h' },
	{ NULL, 0, NULL, 0 },
};

/* The command line. The strings point into argv; merge_sel and merge_tol are owned (freed
 * by options_free()) and lent to cc.rc.inj once the options are checked. */
struct options {
	const char *kubeconfig, *context, *ns, *metrics, *sa_dir;
	enum httpd_auth http_auth;
	unsigned max_ws, max_conns;     /* 0: the default */
	uint64_t store_max_file, store_max_session, store_max_ns_bytes, store_upload_timeout_ns;
	unsigned store_max_ns_sessions;
	const char *lease_ns, *lease_name, *identity;   /* identity: NULL for hostname_pid */
	bool leader_elect;
	struct controller_config cc;
	struct leader_config lc;
	struct session_s3_defaults s3d;
	json_t *merge_sel, *merge_tol;
	char denied[1024];              /* --denied-namespaces, or the default list */
	bool denied_set;
};

static void options_init(struct options *o)
{
	*o = (struct options){
		.metrics = ":8080", .lease_name = "aiprof-controller", .leader_elect = true,
		.cc = {
			.workers = 4,
			.rc = {
				.inj = { .image = "aiprof/aiprof:latest",
					 .grace_ns = 120 * NSEC_PER_SEC },
				.target_wait_ns = 60 * NSEC_PER_SEC,
				.store_max_age_ns = 168 * 3600 * NSEC_PER_SEC,
			},
		},
		.lc = {
			.lease_duration_ns = 15 * NSEC_PER_SEC,
			.renew_deadline_ns = 10 * NSEC_PER_SEC, .retry_period_ns = 2 * NSEC_PER_SEC,
		},
		.merge_sel = json_object(), .merge_tol = json_array(),
		.store_max_file = ARTSTORE_MAX_FILE_BYTES,
		.store_max_session = ARTSTORE_MAX_SESSION_BYTES,
		.store_max_ns_bytes = ARTSTORE_MAX_NS_BYTES,
		.store_max_ns_sessions = ARTSTORE_MAX_NS_SESSIONS,
		.store_upload_timeout_ns = HTTPD_STORE_UPLOAD_TIMEOUT_S * NSEC_PER_SEC,
	};
}

static void options_free(struct options *o)
{
	json_decref(o->merge_sel);
	json_decref(o->merge_tol);
}

static int duration_opt(const char *name, const char *v, uint64_t *ret)
{
	if (parse_duration_ns(v, ret) < 0 || *ret == 0) {
		log_error("--%s '%s' is not a duration such as 30s or 2m", name, v);
		return -EINVAL;
	}
	return 0;
}

static int workers_opt(const char *v, unsigned *ret)
{
	char *end;
	long n = strtol(v, &end, 10);

	if (*end || n < 1 || n > 64) {
		log_error("--workers '%s' is not a number from 1 to 64", v);
		return -EINVAL;
	}
	*ret = (unsigned)n;
	return 0;
}

/* --max-ws-clients, --max-connections: 1 to 100000. */
static int limit_opt(const char *name, const char *v, unsigned *ret)
{
	char *end;
	long n = strtol(v, &end, 10);

	if (*end || n < 1 || n > 100000) {
		log_error("--%s '%s' is not a number from 1 to 100000", name, v);
		return -EINVAL;
	}
	*ret = (unsigned)n;
	return 0;
}

/* --store-max-*-bytes: N, or N with Ki, Mi or Gi; 1 byte to 1 GiB (the bodies are held in
 * memory while they are stored). */
static int bytes_opt(const char *name, const char *v, uint64_t *ret)
{
	static const struct { const char *suffix; unsigned shift; } units[] = {
		{ "", 0 }, { "Ki", 10 }, { "Mi", 20 }, { "Gi", 30 },
	};
	char *end = NULL;
	unsigned long long n;

	errno = 0;
	n = v[0] >= '0' && v[0] <= '9' ? strtoull(v, &end, 10) : 0;
	for (size_t i = 0; n && !errno && i < sizeof(units) / sizeof(units[0]); i++) {
		if (strcmp(end, units[i].suffix) != 0 || n > (1ull << 30) >> units[i].shift)
			continue;
		*ret = (uint64_t)n << units[i].shift;
		return 0;
	}
	log_error("--%s '%s' is not a size from 1 to 1Gi (bytes, or a number with Ki, Mi or Gi)",
		  name, v);
	return -EINVAL;
}

/* --store-url: http(s)://host[:port] (the injectors' -o is it, less a trailing '/', and
 * "/v1/artifacts/..."; their parser, common/storeurl.c, takes no other path). Sessions with
 * no S3 then use the store (session__set_store). */
static int store_url_opt(struct options *o, const char *v)
{
	struct s3_endpoint ep = { 0 };

	if (s3_endpoint__parse(v, &ep) < 0) {
		log_error("--store-url '%.200s': give http(s)://HOST[:PORT], with no path (how "
			  "injector pods reach this controller's HTTP endpoint)", v);
		return -EINVAL;
	}
	s3_endpoint__clear(&ep);
	o->cc.rc.inj.store_url = v;
	session__set_store(true);
	return 0;
}

/* --merge-node-selector / --merge-toleration: one more entry of the merge pods'. */
static int merge_placement_opt(struct options *o, int c, const char *v)
{
	char msg[512];
	int r = c == OPT_MERGE_SEL ? injspec__add_node_selector(o->merge_sel, v, msg, sizeof(msg)) :
		injspec__add_toleration(o->merge_tol, v, msg, sizeof(msg));

	if (r < 0) {
		log_error("%s", r == -ENOMEM ? "out of memory" : msg);
		return -EINVAL;
	}
	return 0;
}

/* --denied-namespaces: namespace names, ','-separated ("" denies none). */
static int denied_opt(struct options *o, const char *arg)
{
	const char *p = arg;

	while (*p) {
		size_t len = strcspn(p, ",");
		bool ok = len >= 1 && len <= 63 && p[0] != '-' && p[len - 1] != '-';

		for (size_t i = 0; i < len; i++)
			ok &= (p[i] >= 'a' && p[i] <= 'z') || (p[i] >= '0' && p[i] <= '9') ||
			      p[i] == '-';
		if (!ok) {
			log_error("--denied-namespaces: '%.*s' is not a namespace name; give names "
				  "separated by ','", (int)(len < 100 ? len : 100), p);
			return -EINVAL;
		}
		p += len + (p[len] == ',');
	}
	if (strlen(arg) >= sizeof(o->denied)) {
		log_error("--denied-namespaces: longer than %zu characters", sizeof(o->denied) - 1);
		return -EINVAL;
	}
	snprintf(o->denied, sizeof(o->denied), "%s", arg);
	o->denied_set = true;
	return 0;
}

/* The default denied namespaces: the system's, the controller's own when it runs in a
 * pod that says which (the chart sets POD_NAMESPACE from the downward API), and the
 * injector namespace (its pods are node root). */
static void default_denied(struct options *o)
{
	const char *own = getenv("POD_NAMESPACE"), *inj = o->cc.rc.inj.ns;

	if (inj && own && strcmp(inj, own) == 0)
		inj = NULL;
	snprintf(o->denied, sizeof(o->denied), "kube-system,kube-public,kube-node-lease%s%.63s%s%.63s",
		 own && *own ? "," : "", own && *own ? own : "", inj ? "," : "", inj ? inj : "");
}

/* A namespace's name: a DNS label (RFC 1123), at most 63 characters. */
static bool namespace_name(const char *v)
{
	size_t n = strlen(v);

	if (n == 0 || n > 63 || v[0] == '-' || v[n - 1] == '-')
		return false;
	for (size_t i = 0; i < n; i++)
		if (!((v[i] >= 'a' && v[i] <= 'z') || (v[i] >= '0' && v[i] <= '9') || v[i] == '-'))
			return false;
	return true;
}

static int injector_ns_opt(struct options *o, const char *arg)
{
	if (!namespace_name(arg)) {
		log_error("--injector-namespace '%.100s': not a namespace name (lower-case letters, "
			  "digits and '-', at most 63)", arg);
		return -EINVAL;
	}
	o->cc.rc.inj.ns = arg;
	return 0;
}

/* One option from getopt_long() (not --help) into o. Returns 0, or -EINVAL once the error
 * is logged. */
static int parse_option(struct options *o, int c, const char *arg)
{
	uint64_t wt = 0;

	switch (c) {
	case OPT_KUBECONFIG: o->kubeconfig = arg; break;
	case OPT_CONTEXT: o->context = arg; break;
	case OPT_NAMESPACE: o->ns = arg; break;
	case OPT_METRICS: o->metrics = arg; break;
	case OPT_HTTP_AUTH:
		if (httpd__parse_auth(arg, &o->http_auth) < 0) {
			log_error("--http-auth '%s': use kubernetes or none", arg);
			return -EINVAL;
		}
		break;
	case OPT_MAX_WS: return limit_opt("max-ws-clients", arg, &o->max_ws);
	case OPT_MAX_CONNS: return limit_opt("max-connections", arg, &o->max_conns);
	case OPT_WORKERS: return workers_opt(arg, &o->cc.workers);
	case OPT_IMAGE: o->cc.rc.inj.image = arg; break;
	case OPT_INJ_NS: return injector_ns_opt(o, arg);
	case OPT_PULL:
		if (strcmp(arg, "Always") && strcmp(arg, "IfNotPresent") && strcmp(arg, "Never")) {
			log_error("--image-pull-policy: use Always, IfNotPresent or Never");
			return -EINVAL;
		}
		o->cc.rc.inj.pull_policy = arg;
		break;
	case OPT_PRIORITY: o->cc.rc.inj.priority_class = arg; break;
	case OPT_GRACE: return duration_opt("grace", arg, &o->cc.rc.inj.grace_ns);
	case OPT_TARGET_WAIT: return duration_opt("target-wait", arg, &o->cc.rc.target_wait_ns);
	case OPT_LE: o->leader_elect = true; break;
	case OPT_NO_LE: o->leader_elect = false; break;
	case OPT_LEASE_NS: o->lease_ns = arg; break;
	case OPT_LEASE_NAME: o->lease_name = arg; break;
	case OPT_LEASE_DUR: return duration_opt("lease-duration", arg, &o->lc.lease_duration_ns);
	case OPT_RENEW: return duration_opt("renew-deadline", arg, &o->lc.renew_deadline_ns);
	case OPT_RETRY: return duration_opt("retry-period", arg, &o->lc.retry_period_ns);
	case OPT_IDENTITY: o->identity = arg; break;
	case OPT_WATCH_TIMEOUT:
		if (duration_opt("watch-timeout", arg, &wt) < 0)
			return -EINVAL;
		o->cc.watch_timeout_s = (long)((wt + NSEC_PER_SEC - 1) / NSEC_PER_SEC);
		break;
	case OPT_SA_DIR: o->sa_dir = arg; break;
	case OPT_MERGE_SEL:
	case OPT_MERGE_TOL: return merge_placement_opt(o, c, arg);
	case OPT_S3_ENDPOINT: o->s3d.endpoint = arg; break;
	case OPT_S3_BUCKET: o->s3d.bucket = arg; break;
	case OPT_S3_PREFIX: o->s3d.prefix = arg; break;
	case OPT_S3_REGION: o->s3d.region = arg; break;
	case OPT_S3_SECRET: o->s3d.secret = arg; break;
	case OPT_DENIED_NS: return denied_opt(o, arg);
	case OPT_INLINE_S3: session__set_inline_s3(true); break;
	case OPT_MAX_PER_NS:
		return limit_opt("max-sessions-per-namespace", arg, &o->cc.rc.max_running_per_ns);
	case OPT_SHUTDOWN_TIMEOUT:
		if (duration_opt("shutdown-timeout", arg, &wt) < 0)
			return -EINVAL;
		shutdown_timeout_s = (unsigned)((wt + NSEC_PER_SEC - 1) / NSEC_PER_SEC);
		break;
	case OPT_STORE_URL: return store_url_opt(o, arg);
	case OPT_STORE_FILE: return bytes_opt("store-max-file-bytes", arg, &o->store_max_file);
	case OPT_STORE_SESSION:
		return bytes_opt("store-max-session-bytes", arg, &o->store_max_session);
	case OPT_STORE_NS_BYTES:
		return bytes_opt("store-max-namespace-bytes", arg, &o->store_max_ns_bytes);
	case OPT_STORE_NS_SESSIONS:
		return limit_opt("store-max-namespace-sessions", arg, &o->store_max_ns_sessions);
	case OPT_STORE_TIMEOUT:
		return duration_opt("store-upload-timeout", arg, &o->store_upload_timeout_ns);
	case OPT_STORE_AGE: return duration_opt("store-max-age", arg, &o->cc.rc.store_max_age_ns);
	case 'v': log_set_max_level(LOG_DEBUG); break;
	case 'q': log_set_max_level(LOG_WARNING); break;
	default: usage(stderr); return -EINVAL;
	}
	return 0;
}

/*
 * The command line into o (release with options_free() whatever this returns), checked, and
 * the --default-s3-* values set for every session (session__set_s3_defaults()). Returns 1 to
 * run, 0 when --help said all there is to do, -EINVAL for a usage error, already logged
 * (exit 2).
 */
static int parse_options(int argc, char **argv, struct options *o)
{
	char msg[512];
	int c, r;

	options_init(o);
	while ((c = getopt_long(argc, argv, "vqh", long_opts, NULL)) != -1) {
		if (c == 'h') {
			usage(stdout);
			return 0;
		}
		if (parse_option(o, c, optarg) < 0)
			return -EINVAL;
	}
	if (!o->cc.rc.inj.ns) {
		const char *own = getenv("POD_NAMESPACE");

		if (own && *own && injector_ns_opt(o, own) < 0)
			return -EINVAL;
	}
	if (!o->denied_set)
		default_denied(o);
	o->cc.rc.denied_ns = o->denied;
	if (optind < argc) {
		log_error("unexpected argument '%s'", argv[optind]);
		usage(stderr);
		return -EINVAL;
	}
	if (leader__check_timing(&o->lc, msg, sizeof(msg)) < 0) {
		log_error("leader election: %s", msg);
		return -EINVAL;
	}
	if (!o->merge_sel || !o->merge_tol) {
		log_error("out of memory");
		return -EINVAL;
	}
	r = session__set_s3_defaults(&o->s3d, msg, sizeof(msg));
	if (r < 0) {
		log_error("%s", r == -ENOMEM ? "out of memory" : msg);
		return -EINVAL;
	}
	if (session__s3_defaults_url())
		log_info("sessions without spec.output.s3 upload to %s%s%s%s%s",
			 session__s3_defaults_url(), o->s3d.endpoint ? " at " : "",
			 o->s3d.endpoint ? o->s3d.endpoint : "", o->s3d.secret ? " with Secret " : "",
			 o->s3d.secret ? o->s3d.secret : "");
	if (o->cc.rc.inj.ns)
		log_info("injector and merge pods of sessions that use the admin's storage run in "
			 "namespace %s, with its Secret", o->cc.rc.inj.ns);
	else
		log_warning("injector pods run in each session's namespace (no --injector-namespace, "
			    "no $POD_NAMESPACE): whoever may exec into pods there reaches them");
	o->cc.rc.inj.merge_node_selector = o->merge_sel;
	o->cc.rc.inj.merge_tolerations = o->merge_tol;
	return 1;
}

static void setup_process(void)
{
	struct sigaction sa = { .sa_handler = on_signal }, al = { .sa_handler = on_alarm };

	/* two malloc arenas: many threads, a small steady footprint */
	mallopt(M_ARENA_MAX, 2);
	signal(SIGPIPE, SIG_IGN);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGALRM, &al, NULL);
}

/* --kubeconfig, else $KUBECONFIG, else the in-cluster service account. Logs either way. */
static int load_kube_config(const struct options *o, struct kube_config **ret)
{
	const char *kubeconfig = o->kubeconfig ? o->kubeconfig : getenv("KUBECONFIG");
	char msg[512];
	int r;

	if (kubeconfig && kubeconfig[0])
		r = kube_config__load_kubeconfig(kubeconfig, o->context, ret, msg, sizeof(msg));
	else
		r = kube_config__in_cluster(o->sa_dir, NULL, NULL, ret, msg, sizeof(msg));
	if (r < 0)
		return log_error_errno(r, "Cannot configure the Kubernetes client: %s", msg);
	log_info("API server %s (%s)%s", (*ret)->server, (*ret)->source,
		 (*ret)->insecure ? ": TLS verification OFF (insecure-skip-tls-verify)" : "");
	return 0;
}

/* --identity, else hostname_pid. */
static void make_identity(const char *identity_opt, char *out, size_t outlen)
{
	char host[256] = "localhost";

	gethostname(host, sizeof(host) - 1);
	snprintf(out, outlen, "%s", identity_opt ? identity_opt : "");
	if (!identity_opt)
		snprintf(out, outlen, "%.200s_%d", host, (int)getpid());
}

/* The HTTP endpoint's configuration from the flags; -EINVAL (logged) if they do not fit. */
static int serving_config(const struct options *o, const struct kube_config *kcfg,
			  struct httpd_config *hc)
{
	char msg[512];

	*hc = (struct httpd_config){
		.addr = o->metrics, .auth = o->http_auth, .kube = kcfg,
		.max_ws_clients = o->max_ws ? o->max_ws : HTTPD_MAX_WS_CLIENTS,
		.store_max_file = o->store_max_file, .store_max_session = o->store_max_session,
		.store_injector_ns = o->cc.rc.inj.ns,
		.store_max_ns_bytes = o->store_max_ns_bytes,
		.store_max_ns_sessions = o->store_max_ns_sessions,
		.store_upload_timeout_ms = o->store_upload_timeout_ns / 1000000,
	};
	hc->max_connections = o->max_conns ? o->max_conns :
		hc->max_ws_clients + HTTPD_SPARE_CONNECTIONS > HTTPD_MAX_CONNECTIONS ?
		hc->max_ws_clients + HTTPD_SPARE_CONNECTIONS : HTTPD_MAX_CONNECTIONS;
	if (httpd__check(hc, msg, sizeof(msg)) < 0) {
		log_error("%s", msg);
		return -EINVAL;
	}
	if (o->store_max_session < o->store_max_file) {
		log_error("--store-max-session-bytes %llu is less than --store-max-file-bytes %llu",
			  (unsigned long long)o->store_max_session,
			  (unsigned long long)o->store_max_file);
		return -EINVAL;
	}
	if (o->cc.rc.inj.store_url && o->http_auth != HTTPD_AUTH_KUBERNETES)
		log_warning("--store-url with --http-auth=none: the store refuses every upload (403), "
			    "for it checks the uploader's token with the API server");
	return 0;
}

/* The HTTP endpoint and the controller (not started yet), from a checked configuration.
 * Logs what failed. */
static int start_serving(struct options *o, const struct httpd_config *hc,
			 const struct kube_config *kcfg, const char *identity, struct app *app)
{
	struct httpd_handlers hh = {
		.ready = http_ready, .metrics = http_metrics, .snapshot = http_snapshot,
		.log = hook_log, .ctx = app,
	};
	int r;

	o->cc.kube = kcfg;
	o->cc.namespace = o->ns;
	o->cc.identity = identity;
	o->cc.hooks = (struct controller_hooks){ .log = hook_log, .feed = hook_feed, .ctx = app };
	r = httpd__new(hc, &hh, &app->http);
	if (r < 0)
		return log_error_errno(r, "Cannot listen on %s: %m", o->metrics);
	r = controller__new(&o->cc, &app->ctl);
	if (r < 0)
		return log_error_errno(r, "Cannot set up the controller: %m");
	r = httpd__start(app->http);
	if (r < 0)
		return log_error_errno(r, "Cannot start the HTTP server: %m");
	log_info("serving /healthz /readyz /metrics /ws/sessions on %s (port %d)%s", o->metrics,
		 httpd__port(app->http), o->http_auth == HTTPD_AUTH_NONE ? "" :
		 "; /metrics and /ws/sessions need a Kubernetes bearer token");
	if (o->http_auth == HTTPD_AUTH_KUBERNETES)
		log_info("the artifact store takes PUT /v1/artifacts/... from injector pods (at most "
			 "%llu bytes a file, %llu a session)%s%s",
			 (unsigned long long)o->store_max_file,
			 (unsigned long long)o->store_max_session,
			 o->cc.rc.inj.store_url ? ", reached as " : "",
			 o->cc.rc.inj.store_url ? o->cc.rc.inj.store_url : "");
	return 0;
}

/* Leader election: returns 0 once this replica leads, 1 when a signal came first, -errno. */
static int wait_for_lease(struct options *o, const struct kube_config *kcfg,
			  const char *identity, struct app *app)
{
	struct leader_config *lc = &o->lc;
	int r;

	lc->kube = kcfg;
	lc->namespace = o->lease_ns ? o->lease_ns : o->ns ? o->ns : kcfg->namespace;
	lc->name = o->lease_name;
	lc->identity = identity;
	lc->log = hook_log;
	r = leader__new(lc, &app->leader);
	if (r == 0) {
		leader__fence_writes(app->leader);    /* before the controller's threads start */
		r = leader__start(app->leader);
	}
	if (r < 0)
		return log_error_errno(r, "Cannot start leader election: %m");
	log_info("waiting for the lease %s/%s as %s", lc->namespace, lc->name, identity);
	while (!stop_signal && !leader__is_leader(app->leader))
		sleep_ns(50 * NSEC_PER_MSEC);
	return stop_signal ? 1 : 0;
}

/* Starts the controller and runs until a signal (exit 0) or lost leadership (exit 1). */
static int run(const struct options *o, struct app *app)
{
	int r = controller__start(app->ctl);

	if (r < 0) {
		log_error_errno(r, "Cannot start the controller: %m");
		return 1;
	}
	atomic_store(&app->started, true);
	log_info("reconciling ProfilingSessions in %s with %u workers",
		 o->ns ? o->ns : "all namespaces", o->cc.workers);
	while (!stop_signal) {
		if (app->leader && leader__lost(app->leader)) {
			log_error("lost leadership: stopping so that a fresh start can stand by");
			return 1;
		}
		sleep_ns(100 * NSEC_PER_MSEC);
	}
	log_info("signal %d: stopping", (int)stop_signal);
	return 0;
}

int main(int argc, char **argv)
{
	struct options o;
	struct app app = { 0 };
	struct kube_config *kcfg = NULL;
	struct httpd_config hc;
	char identity[300], msg[512];
	int r, ret = 1;

	log_set_prefix("aiprof-controller");
	r = parse_options(argc, argv, &o);
	if (r <= 0) {
		options_free(&o);
		return r < 0 ? 2 : 0;
	}
	app.leader_elect = o.leader_elect;
	setup_process();
	if (load_kube_config(&o, &kcfg) < 0) {
		ret = 2;
		goto out;
	}
	/* flags that do not fit together are usage errors, as a bad flag is */
	if (serving_config(&o, kcfg, &hc) < 0) {
		ret = 2;
		goto out;
	}
	make_identity(o.identity, identity, sizeof(identity));
	if (start_serving(&o, &hc, kcfg, identity, &app) < 0)
		goto out;
	if (app.leader_elect) {
		r = wait_for_lease(&o, kcfg, identity, &app);
		if (r != 0) {
			ret = r > 0 ? 0 : 1;
			goto out;
		}
	}
	ret = run(&o, &app);
out:
	controller__stop(app.ctl);
	leader__free(app.leader);     /* releases the lease after the workers stopped */
	controller__free(app.ctl);
	httpd__free(app.http);
	kube_config__free(kcfg);
	options_free(&o);
	session__set_s3_defaults(NULL, msg, sizeof(msg));
	return ret;
}
