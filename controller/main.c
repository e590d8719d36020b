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
#include "controller.h"
#include "httpd.h"
#include "kubeconfig.h"
#include "leader.h"
#include "log.h"
#include "timeutil.h"

static volatile sig_atomic_t stop_signal;

static void on_signal(int sig)
{
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
		"  --workers N              sessions reconciled in parallel (default 4)\n"
		"  --injector-image IMAGE   the aiprof injector image\n"
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
		"  --default-s3-secret NAME  (a Secret looked up in each session's namespace by\n"
		"                           name; the controller never reads it)\n"
		"  --leader-elect / --no-leader-elect\n"
		"                           run as one of several replicas (default on)\n"
		"  --lease-namespace NS     the Lease's namespace (default: the configuration's)\n"
		"  --lease-name NAME        default aiprof-controller\n"
		"  --lease-duration D       default 15s; --renew-deadline D default 10s;\n"
		"  --retry-period D         default 2s\n"
		"  --identity ID            this replica (default: hostname_pid)\n"
		"  --watch-timeout D        server-side watch timeout (default 5-10m at random)\n"
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
	OPT_S3_REGION, OPT_S3_SECRET,
};

static int duration_opt(const char *name, const char *v, uint64_t *ret)
{
	if (parse_duration_ns(v, ret) < 0 || *ret == 0) {
		log_error("--%s '%s' is not a duration such as 30s or 2m", name, v);
		return -EINVAL;
	}
	return 0;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "kubeconfig", required_argument, NULL, OPT_KUBECONFIG },
		{ "context", required_argument, NULL, OPT_CONTEXT },
		{ "namespace", required_argument, NULL, OPT_NAMESPACE },
		{ "metrics-addr", required_argument, NULL, OPT_METRICS },
		{ "workers", required_argument, NULL, OPT_WORKERS },
		{ "injector-image", required_argument, NULL, OPT_IMAGE },
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
		{ "verbose", no_argument, NULL, 'v' },
		{ "quiet", no_argument, NULL, 'q' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *kubeconfig = NULL, *context = NULL, *ns = NULL, *metrics = ":8080";
	const char *lease_ns = NULL, *lease_name = "aiprof-controller", *identity_opt = NULL;
	const char *sa_dir = NULL;
	struct controller_config cc = {
		.workers = 4,
		.rc = {
			.inj = { .image = "aiprof/aiprof:latest", .grace_ns = 120 * NSEC_PER_SEC },
			.target_wait_ns = 60 * NSEC_PER_SEC,
		},
	};
	struct leader_config lc = {
		.lease_duration_ns = 15 * NSEC_PER_SEC, .renew_deadline_ns = 10 * NSEC_PER_SEC,
		.retry_period_ns = 2 * NSEC_PER_SEC,
	};
	struct app app = { .leader_elect = true };
	struct kube_config *kcfg = NULL;
	struct httpd_handlers hh = {
		.ready = http_ready, .metrics = http_metrics, .snapshot = http_snapshot,
		.log = hook_log, .ctx = &app,
	};
	struct session_s3_defaults s3d = { 0 };
	json_t *merge_sel = json_object(), *merge_tol = json_array();
	char msg[512], identity[300], host[256] = "localhost";
	uint64_t wt = 0;
	int c, r, ret = 1;
	struct sigaction sa = { .sa_handler = on_signal };

	log_set_prefix("aiprof-controller");
	while ((c = getopt_long(argc, argv, "vqh", opts, NULL)) != -1) {
		switch (c) {
		case OPT_KUBECONFIG: kubeconfig = optarg; break;
		case OPT_CONTEXT: context = optarg; break;
		case OPT_NAMESPACE: ns = optarg; break;
		case OPT_METRICS: metrics = optarg; break;
		case OPT_WORKERS: {
			char *end;
			long n = strtol(optarg, &end, 10);

			if (*end || n < 1 || n > 64) {
				log_error("--workers '%s' is not a number from 1 to 64", optarg);
				return 2;
			}
			cc.workers = (unsigned)n;
			break;
		}
		case OPT_IMAGE: cc.rc.inj.image = optarg; break;
		case OPT_PULL:
			if (strcmp(optarg, "Always") && strcmp(optarg, "IfNotPresent") &&
			    strcmp(optarg, "Never")) {
				log_error("--image-pull-policy: use Always, IfNotPresent or Never");
				return 2;
			}
			cc.rc.inj.pull_policy = optarg;
			break;
		case OPT_PRIORITY: cc.rc.inj.priority_class = optarg; break;
		case OPT_GRACE:
			if (duration_opt("grace", optarg, &cc.rc.inj.grace_ns) < 0)
				return 2;
			break;
		case OPT_TARGET_WAIT:
			if (duration_opt("target-wait", optarg, &cc.rc.target_wait_ns) < 0)
				return 2;
			break;
		case OPT_LE: app.leader_elect = true; break;
		case OPT_NO_LE: app.leader_elect = false; break;
		case OPT_LEASE_NS: lease_ns = optarg; break;
		case OPT_LEASE_NAME: lease_name = optarg; break;
		case OPT_LEASE_DUR:
			if (duration_opt("lease-duration", optarg, &lc.lease_duration_ns) < 0)
				return 2;
			break;
		case OPT_RENEW:
			if (duration_opt("renew-deadline", optarg, &lc.renew_deadline_ns) < 0)
				return 2;
			break;
		case OPT_RETRY:
			if (duration_opt("retry-period", optarg, &lc.retry_period_ns) < 0)
				return 2;
			break;
		case OPT_IDENTITY: identity_opt = optarg; break;
		case OPT_WATCH_TIMEOUT:
			if (duration_opt("watch-timeout", optarg, &wt) < 0)
				return 2;
			cc.watch_timeout_s = (long)((wt + NSEC_PER_SEC - 1) / NSEC_PER_SEC);
			break;
		case OPT_SA_DIR: sa_dir = optarg; break;
		case OPT_MERGE_SEL:
		case OPT_MERGE_TOL:
			r = c == OPT_MERGE_SEL ?
			    injspec__add_node_selector(merge_sel, optarg, msg, sizeof(msg)) :
			    injspec__add_toleration(merge_tol, optarg, msg, sizeof(msg));
			if (r < 0) {
				log_error("%s", r == -ENOMEM ? "out of memory" : msg);
				goto usage_err;
			}
			break;
		case OPT_S3_ENDPOINT: s3d.endpoint = optarg; break;
		case OPT_S3_BUCKET: s3d.bucket = optarg; break;
		case OPT_S3_PREFIX: s3d.prefix = optarg; break;
		case OPT_S3_REGION: s3d.region = optarg; break;
		case OPT_S3_SECRET: s3d.secret = optarg; break;
		case 'v': log_set_max_level(LOG_DEBUG); break;
		case 'q': log_set_max_level(LOG_WARNING); break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (optind < argc) {
		log_error("unexpected argument '%s'", argv[optind]);
		usage(stderr);
		return 2;
	}
	if (lc.renew_deadline_ns >= lc.lease_duration_ns || lc.retry_period_ns >= lc.renew_deadline_ns) {
		log_error("leader election needs retry-period < renew-deadline < lease-duration");
		goto usage_err;
	}
	if (!merge_sel || !merge_tol) {
		log_error("out of memory");
		goto usage_err;
	}
	r = session__set_s3_defaults(&s3d, msg, sizeof(msg));
	if (r < 0) {
		log_error("%s", r == -ENOMEM ? "out of memory" : msg);
		goto usage_err;
	}
	if (session__s3_defaults_url())
		log_info("sessions without spec.output.s3 upload to %s%s%s%s%s",
			 session__s3_defaults_url(), s3d.endpoint ? " at " : "",
			 s3d.endpoint ? s3d.endpoint : "", s3d.secret ? " with Secret " : "",
			 s3d.secret ? s3d.secret : "");
	cc.rc.inj.merge_node_selector = merge_sel;
	cc.rc.inj.merge_tolerations = merge_tol;

	/* two malloc arenas: many threads, a small steady footprint */
	mallopt(M_ARENA_MAX, 2);
	signal(SIGPIPE, SIG_IGN);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);

	if (!kubeconfig)
		kubeconfig = getenv("KUBECONFIG");
	if (kubeconfig && kubeconfig[0])
		r = kube_config__load_kubeconfig(kubeconfig, context, &kcfg, msg, sizeof(msg));
	else
		r = kube_config__in_cluster(sa_dir, NULL, NULL, &kcfg, msg, sizeof(msg));
	if (r < 0) {
		log_error_errno(r, "Cannot configure the Kubernetes client: %s", msg);
		ret = 2;
		goto out;
	}
	log_info("API server %s (%s)%s", kcfg->server, kcfg->source,
		 kcfg->insecure ? ": TLS verification OFF (insecure-skip-tls-verify)" : "");

	gethostname(host, sizeof(host) - 1);
	snprintf(identity, sizeof(identity), "%s", identity_opt ? identity_opt : "");
	if (!identity_opt)
		snprintf(identity, sizeof(identity), "%.200s_%d", host, (int)getpid());
	cc.kube = kcfg;
	cc.namespace = ns;
	cc.identity = identity;
	cc.hooks = (struct controller_hooks){ .log = hook_log, .feed = hook_feed, .ctx = &app };

	r = httpd__new(metrics, &hh, &app.http);
	if (r < 0) {
		log_error_errno(r, "Cannot listen on %s: %m", metrics);
		goto out;
	}
	r = controller__new(&cc, &app.ctl);
	if (r < 0) {
		log_error_errno(r, "Cannot set up the controller: %m");
		goto out;
	}
	r = httpd__start(app.http);
	if (r < 0) {
		log_error_errno(r, "Cannot start the HTTP server: %m");
		goto out;
	}
	log_info("serving /healthz /readyz /metrics /ws/sessions on %s (port %d)", metrics,
		 httpd__port(app.http));

	if (app.leader_elect) {
		lc.kube = kcfg;
		lc.namespace = lease_ns ? lease_ns : ns ? ns : kcfg->namespace;
		lc.name = lease_name;
		lc.identity = identity;
		lc.log = hook_log;
		r = leader__new(&lc, &app.leader);
		if (r == 0)
			r = leader__start(app.leader);
		if (r < 0) {
			log_error_errno(r, "Cannot start leader election: %m");
			goto out;
		}
		log_info("waiting for the lease %s/%s as %s", lc.namespace, lc.name, identity);
		while (!stop_signal && !leader__is_leader(app.leader))
			sleep_ns(50 * NSEC_PER_MSEC);
		if (stop_signal) {
			ret = 0;
			goto out;
		}
	}
	r = controller__start(app.ctl);
	if (r < 0) {
		log_error_errno(r, "Cannot start the controller: %m");
		goto out;
	}
	atomic_store(&app.started, true);
	log_info("reconciling ProfilingSessions in %s with %u workers", ns ? ns : "all namespaces",
		 cc.workers);
	while (!stop_signal) {
		if (app.leader && leader__lost(app.leader)) {
			log_error("lost leadership: stopping so that a fresh start can stand by");
			goto out;
		}
		sleep_ns(100 * NSEC_PER_MSEC);
	}
	log_info("signal %d: stopping", (int)stop_signal);
	ret = 0;
out:
	controller__stop(app.ctl);
	leader__free(app.leader);     /* releases the lease after the workers stopped */
	controller__free(app.ctl);
	httpd__free(app.http);
	kube_config__free(kcfg);
	json_decref(merge_sel);
	json_decref(merge_tol);
	session__set_s3_defaults(NULL, msg, sizeof(msg));
	return ret;
usage_err:
	json_decref(merge_sel);
	json_decref(merge_tol);
	return 2;
}
