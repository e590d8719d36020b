/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <regex.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "api.h"
#include "digest.h"
#include "kjson.h"
#include "ktime.h"
#include "recheck.h"
#include "s3url.h"
#include "session.h"
#include "timeutil.h"

static const char *const phase_names[PHASE__MAX] = {
	[PHASE_NONE] = "", [PHASE_PENDING] = "Pending", [PHASE_INJECTING] = "Injecting",
	[PHASE_PROFILING] = "Profiling", [PHASE_UPLOADING] = "Uploading",
	[PHASE_SUCCEEDED] = "Succeeded", [PHASE_FAILED] = "Failed",
};

const char *session_phase_name(enum session_phase p)
{
	return p < PHASE__MAX ? phase_names[p] : "";
}

enum session_phase session_phase_parse(const char *s)
{
	for (int i = 1; s && i < PHASE__MAX; i++)
		if (strcmp(s, phase_names[i]) == 0)
			return (enum session_phase)i;
	return PHASE_NONE;
}

static void spec_clear(struct session_spec *sp)
{
	free(sp->pod_name);
	label_selector__clear(&sp->selector);
	free(sp->target_namespace);
	free(sp->container);
	free(sp->process_match);
	free(sp->collectors);
	free(sp->storage_ref);
	session__s3_clear(&sp->s3);
}

void session__s3_clear(struct session_s3 *o)
{
	free(o->endpoint);
	free(o->bucket);
	free(o->prefix);
	free(o->region);
	free(o->secret_name);
	free(o->key_id_key);
	free(o->secret_key_key);
	free(o->token_key);
	memset(o, 0, sizeof(*o));
}

struct session *session__ref(struct session *s)
{
	atomic_fetch_add(&s->refs, 1);
	return s;
}

void session__unref(struct session *s)
{
	if (!s || atomic_fetch_sub(&s->refs, 1) != 1)
		return;
	free(s->key);
	free(s->ns);
	free(s->name);
	free(s->uid);
	free(s->rv);
	json_decref(s->finalizers);
	free(s->policy_uid);
	spec_clear(&s->spec);
	json_decref(s->status);
	free(s);
}

void session__short_id(const char *uid, const char *salt, char out[11])
{
	uint8_t h[SHA256_LEN];
	char hex[SHA256_HEX_LEN + 1];
	char buf[512];
	int n = snprintf(buf, sizeof(buf), "%s/%s", uid, salt ? salt : "");

	sha256(buf, n < 0 ? 0 : (size_t)n >= sizeof(buf) ? sizeof(buf) - 1 : (size_t)n, h);
	hex_encode(h, SHA256_LEN, hex);
	memcpy(out, hex, 10);
	out[10] = '\0';
}

/* RFC 1123 label (container names) or subdomain (object names): [a-z0-9]([-a-z0-9.]*) */
static bool dns_name(const char *s, size_t max, bool dots)
{
	size_t n = strlen(s);

	if (n == 0 || n > max)
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];

		if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
		      (dots && c == '.')))
			return false;
	}
	return s[0] != '-' && s[n - 1] != '-' && s[0] != '.' && s[n - 1] != '.';
}

static bool secret_key_name(const char *s)
{
	size_t n = strlen(s);

	if (n == 0 || n > 253)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
		      (s[i] >= '0' && s[i] <= '9') || s[i] == '-' || s[i] == '_' || s[i] == '.'))
			return false;
	return true;
}

/* The spec is invalid: spec_msg says why. Returns -EINVAL. */
__attribute__((format(printf, 2, 3)))
static int invalid(struct session *s, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(s->spec_msg, sizeof(s->spec_msg), fmt, ap);
	va_end(ap);
	return -EINVAL;
}

static int dupstr(const char *v, char **ret)
{
	if (!v)
		return 0;
	*ret = strdup(v);
	return *ret ? 0 : -ENOMEM;
}

/* Is name one of the comma-separated collectors of list? */
static bool collector_listed(const char *list, const char *name)
{
	size_t n = strlen(name);

	for (const char *p = list; p && *p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL)
		if (strncmp(p, name, n) == 0 && (p[n] == ',' || p[n] == '\0'))
			return true;
	return false;
}

bool session__needs_ebpf(const struct session *s)
{
	static const char *const ebpf[] = { "cpu", "offcpu", "syscalls", "python" };
	const struct session_spec *sp = &s->spec;
	bool any = false;

	for (size_t i = 0; i < sizeof(ebpf) / sizeof(ebpf[0]); i++)
		any |= collector_listed(sp->collectors, ebpf[i]);
	return sp->method == METHOD_EBPF_ONLY || !sp->collectors || any;
}

static int parse_collectors(struct session *s, const json_t *c)
{
	static const char *const known[] = { "cpu", "offcpu", "python", "cuda", "cupti", "nccl",
					     "rdma", "syscalls" };
	char list[128] = "";
	size_t off = 0;
	const char *k;
	json_t *v;

	if (!c || json_is_null(c))
		return 0;
	if (!json_is_object(c))
		return invalid(s, "spec.collectors must be an object such as {cpu: {}, "
			       "cuda: {}}");
	json_object_foreach((json_t *)c, k, v) {
		bool ok = false, on;

		for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++)
			ok |= strcmp(k, known[i]) == 0;
		if (!ok)
			return invalid(s, "spec.collectors.%.40s: unknown collector (known: cpu, "
				       "offcpu, python, cuda, cupti, nccl, rdma, syscalls)", k);
		on = !json_is_false(v) && !json_is_false(json_object_get(v, "enabled"));
		if (!json_is_object(v) && !json_is_boolean(v) && !json_is_null(v))
			return invalid(s, "spec.collectors.%.40s must be an object", k);
		if (strcmp(k, "cpu") == 0 && json_is_object(v)) {
			json_t *hz = json_object_get(v, "frequencyHz");

			if (hz && (!json_is_integer(hz) || json_integer_value(hz) < 1 ||
				   json_integer_value(hz) > 10000))
				return invalid(s, "spec.collectors.cpu.frequencyHz must be from 1 "
					       "to 10000");
			s->spec.cpu_hz = hz ? (unsigned)json_integer_value(hz) : 0;
		}
		if (on)
			off += (size_t)snprintf(list + off, sizeof(list) - off, "%s%s", off ? "," : "",
						k);
	}
	if (!off)
		return invalid(s, "spec.collectors turns every collector off");
	s->spec.collectors = strdup(list);
	return s->spec.collectors ? 0 : -ENOMEM;
}

/*
 * Whether t is a budget spec.cost.budgetPercent may give: digits, an optional fraction, an
 * optional '%' ("1%", "0.5", "007.50%"), at most SESSION_BUDGET_LEN_MAX characters, from
 * 0.001 to 100 — the CRD's pattern and rule, a part of what `aiprof profile --budget` takes
 * (which also reads "1e0" or " 1" through strtod). Exact: no floating point, no locale.
 */
static bool budget_percent_ok(const char *t)
{
	unsigned long long whole = 0;
	unsigned thousandths = 0;
	bool frac_nonzero = false;
	size_t n = strlen(t), i = 0, digits;

	if (n == 0 || n > SESSION_BUDGET_LEN_MAX)
		return false;
	for (digits = 0; t[i] >= '0' && t[i] <= '9'; i++, digits++)
		whole = whole * 10 + (unsigned)(t[i] - '0');    /* <= 16 digits: no overflow */
	if (!digits)
		return false;
	if (t[i] == '.') {
		for (i++, digits = 0; t[i] >= '0' && t[i] <= '9'; i++, digits++) {
			if (digits < 3)
				thousandths = thousandths * 10 + (unsigned)(t[i] - '0');
			frac_nonzero |= t[i] != '0';
		}
		if (!digits)
			return false;
		for (; digits < 3; digits++)
			thousandths *= 10;
	}
	if (t[i] == '%')
		i++;
	if (t[i])
		return false;
	if (whole > 100 || (whole == 100 && frac_nonzero))
		return false;
	return whole > 0 || thousandths > 0;
}

/* spec.cost: what `aiprof profile --record-rate` and `--budget` get (docs/session-cost-fields.md) */
static int parse_cost(struct session *s, const json_t *c)
{
	struct session_spec *sp = &s->spec;
	const json_t *rate, *budget;

	if (!c || json_is_null(c))
		return 0;
	if (!json_is_object(c))
		return invalid(s, "spec.cost must be an object such as {recordRate: 100, "
			       "budgetPercent: \"1%%\"}");
	rate = json_object_get(c, "recordRate");
	budget = json_object_get(c, "budgetPercent");
	if (rate && !json_is_null(rate)) {
		if (!json_is_integer(rate) || json_integer_value(rate) < 0 ||
		    json_integer_value(rate) > SESSION_RECORD_RATE_MAX)
			return invalid(s, "spec.cost.recordRate must be a whole number of records a "
				       "second per thread from 0 (every record) to %d; leave it out "
				       "for the injector's default (100)", SESSION_RECORD_RATE_MAX);
		sp->record_rate = (int32_t)json_integer_value(rate);
	}
	if (budget && !json_is_null(budget)) {
		if (!json_is_string(budget))
			return invalid(s, "spec.cost.budgetPercent must be a string such as \"1%%\" "
				       "or \"0.5%%\" (quoted in YAML)");
		if (!budget_percent_ok(json_string_value(budget)))
			return invalid(s, "spec.cost.budgetPercent '%.20s' is not a share of the "
				       "targets' CPU from 0.001%% to 100%%: write it as \"1%%\" or "
				       "\"0.5%%\"", json_string_value(budget));
		snprintf(sp->budget, sizeof(sp->budget), "%s", json_string_value(budget));
	}
	return 0;
}

/* --default-s3-*: spec.output.s3 as it would be written; NULL when not set. */
static json_t *s3_defaults;
static char s3_defaults_url[1200];
static bool inline_s3_allowed;
static bool store_available;

void session__set_store(bool available)
{
	store_available = available;
}

void session__set_inline_s3(bool allowed)
{
	inline_s3_allowed = allowed;
}

static int parse_s3(struct session *s, const json_t *o);

int session__set_s3_defaults(const struct session_s3_defaults *d, char *why, size_t whylen)
{
	struct session probe;
	json_t *o;
	int r;

	json_decref(s3_defaults);
	s3_defaults = NULL;
	s3_defaults_url[0] = '\0';
	if (!d || !d->bucket || !d->bucket[0]) {
		if (d && ((d->endpoint && d->endpoint[0]) || (d->prefix && d->prefix[0]) ||
			  (d->region && d->region[0]) || (d->secret && d->secret[0]))) {
			snprintf(why, whylen, "--default-s3-endpoint, -prefix, -region and -secret "
				 "need --default-s3-bucket too");
			return -EINVAL;
		}
		return 0;
	}
	o = json_pack("{s:s}", "bucket", d->bucket);
	if (!o)
		return -ENOMEM;
	if ((d->endpoint && d->endpoint[0] &&
	     json_object_set_new(o, "endpoint", json_string(d->endpoint))) ||
	    (d->prefix && d->prefix[0] && json_object_set_new(o, "prefix", json_string(d->prefix))) ||
	    (d->region && d->region[0] && json_object_set_new(o, "region", json_string(d->region))) ||
	    (d->secret && d->secret[0] &&
	     json_object_set_new(o, "secretRef", json_pack("{s:s}", "name", d->secret)))) {
		json_decref(o);
		return -ENOMEM;
	}
	memset(&probe, 0, sizeof(probe));
	r = parse_s3(&probe, o);
	if (r == -EINVAL) {
		/* "spec.output.s3.endpoint 'x' is not ..." -> "--default-s3-endpoint 'x' is not ..." */
		const char *m = probe.spec_msg, *f = strncmp(m, "spec.output.s3.", 15) == 0 ? m + 15 :
			m;

		if (strncmp(m, "spec.output.s3: ", 16) == 0)
			snprintf(why, whylen, "--default-s3-bucket and --default-s3-prefix: %s", m + 16);
		else if (strncmp(f, "secretRef.name", 14) == 0)
			snprintf(why, whylen, "--default-s3-secret '%.100s' is not a Secret name (a DNS "
				 "subdomain: lower-case letters, digits, '-' and '.')", d->secret);
		else
			snprintf(why, whylen, "--default-s3-%s", f);
	}
	spec_clear(&probe.spec);
	if (r < 0) {
		json_decref(o);
		return r;
	}
	s3_defaults = o;
	snprintf(s3_defaults_url, sizeof(s3_defaults_url), "s3://%s/%s", d->bucket,
		 d->prefix ? d->prefix : "");
	return 0;
}

const char *session__s3_defaults_url(void)
{
	return s3_defaults ? s3_defaults_url : NULL;
}

static int parse_s3(struct session *s, const json_t *o)
{
	struct session_s3 *d = &s->spec.s3;
	const char *bucket = kj_str(o, "bucket"), *prefix = kj_str(o, "prefix");
	const char *endpoint = kj_str(o, "endpoint"), *region = kj_str(o, "region");
	const json_t *ref = json_object_get(o, "secretRef");
	struct s3_location loc = { 0 };
	char url[1100];
	int r;

	if (!o && !bucket)
		return invalid(s, "spec.output.storageRef is required: this controller keeps no "
			       "artifacts in the cluster (start aiprof-controller with --store-url, "
			       "as the chart does, or --default-s3-bucket, the chart's s3.bucket "
			       "value)");
	if (!json_is_object(o) || !bucket)
		return invalid(s, "spec.output.s3.bucket is required: artifacts go to "
			       "S3-compatible storage");
	snprintf(url, sizeof(url), "s3://%s/%s", bucket, prefix ? prefix : "");
	if (strlen(bucket) > 255 || (prefix && strlen(prefix) > S3_PREFIX_MAX) ||
	    s3_location__parse(url, &loc) < 0)
		return invalid(s, "spec.output.s3: '%.80s' and prefix '%.80s' are not a valid "
			       "bucket and prefix", bucket, prefix ? prefix : "");
	if (endpoint) {
		struct s3_endpoint ep = { 0 };

		if (s3_endpoint__parse(endpoint, &ep) < 0) {
			s3_location__clear(&loc);
			return invalid(s, "spec.output.s3.endpoint '%.100s' is not an "
				       "http(s)://host[:port] URL", endpoint);
		}
		s3_endpoint__clear(&ep);
	}
	if (region && (strlen(region) > 64 || !secret_key_name(region))) {
		s3_location__clear(&loc);
		return invalid(s, "spec.output.s3.region '%.64s' is not a region name", region);
	}
	d->bucket = loc.bucket;
	d->prefix = loc.prefix;
	loc.bucket = loc.prefix = NULL;
	if ((r = dupstr(endpoint, &d->endpoint)) < 0 || (r = dupstr(region, &d->region)) < 0)
		return r;
	if (ref && !json_is_null(ref)) {
		const char *name = kj_str(ref, "name");
		const char *ak = kj_str(ref, "accessKeyIDKey"), *sk = kj_str(ref, "secretAccessKeyKey");
		const char *tk = kj_str(ref, "sessionTokenKey");

		if (!name || !dns_name(name, 253, true))
			return invalid(s, "spec.output.s3.secretRef.name must name a Secret in the "
				       "session's namespace");
		if ((ak && !secret_key_name(ak)) || (sk && !secret_key_name(sk)) ||
		    (tk && !secret_key_name(tk)))
			return invalid(s, "spec.output.s3.secretRef: a key name has characters a "
				       "Secret key cannot have");
		if (strcmp(ak ? ak : "AWS_ACCESS_KEY_ID", sk ? sk : "AWS_SECRET_ACCESS_KEY") == 0)
			return invalid(s, "spec.output.s3.secretRef: accessKeyIDKey and "
				       "secretAccessKeyKey must name different keys of the Secret");
		if ((r = dupstr(name, &d->secret_name)) < 0 ||
		    (r = dupstr(ak ? ak : "AWS_ACCESS_KEY_ID", &d->key_id_key)) < 0 ||
		    (r = dupstr(sk ? sk : "AWS_SECRET_ACCESS_KEY", &d->secret_key_key)) < 0 ||
		    (r = dupstr(tk, &d->token_key)) < 0)
			return r;
	}
	return 0;
}

/* Whether spec.namespaces of a storage lists ns (or "*", every namespace). */
static bool storage_lists(const json_t *spec, const char *ns)
{
	const json_t *v;
	size_t i;

	json_array_foreach(json_object_get(spec, "namespaces"), i, v)
		if (json_is_string(v) && (strcmp(json_string_value(v), ns) == 0 ||
					  strcmp(json_string_value(v), "*") == 0))
			return true;
	return false;
}

int session__resolve_storage(const struct session *s, const json_t *storage,
			     struct session_s3 *out, char *why, size_t whylen)
{
	const char *name = kj_str(storage, "metadata.name") ?: "?";
	const json_t *spec = json_object_get(storage, "spec");
	const char *endpoint = kj_str(spec, "s3.endpoint");
	struct session probe;
	int r;

	if (!storage_lists(spec, s->ns)) {
		snprintf(why, whylen, "ClusterProfilingStorage %.100s is not for namespace '%.100s' "
			 "(its spec.namespaces does not list it): ask the cluster's admin to add it",
			 name, s->ns);
		return -EPERM;
	}
	if (endpoint && strncmp(endpoint, "http://", 7) == 0 &&
	    !json_is_true(json_object_get(spec, "allowInsecureEndpoint"))) {
		snprintf(why, whylen, "ClusterProfilingStorage %.100s: spec.s3.endpoint '%.100s' is "
			 "plain http, which would send credentials in the clear: use https, or set "
			 "spec.allowInsecureEndpoint: true", name, endpoint);
		return -EINVAL;
	}
	memset(&probe, 0, sizeof(probe));
	r = parse_s3(&probe, json_object_get(spec, "s3"));
	if (r == -EINVAL) {
		const char *m = probe.spec_msg;

		snprintf(why, whylen, "ClusterProfilingStorage %.100s: spec.s3%s", name,
			 strncmp(m, "spec.output.s3", 14) == 0 ? m + 14 : m);
	}
	if (r == 0) {
		*out = probe.spec.s3;
		memset(&probe.spec.s3, 0, sizeof(probe.spec.s3));
	}
	spec_clear(&probe.spec);
	return r;
}

/* spec.targets: podName or a selector, and the container and process within. */
static int parse_targets(struct session *s, const json_t *targets)
{
	struct session_spec *sp = &s->spec;
	const json_t *sel;
	const char *v;
	char msg[200];
	int r;

	if (!json_is_object(targets))
		return invalid(s, "spec.targets is required: podName or selector");
	v = kj_str(targets, "podName");
	sel = json_object_get(targets, "selector");
	if (sel && json_is_null(sel))
		sel = NULL;
	if (!v == !sel)
		return invalid(s, "spec.targets needs exactly one of podName and selector");
	if (v) {
		if (!dns_name(v, 253, true))
			return invalid(s, "spec.targets.podName '%.100s' is not a pod name", v);
		if ((r = dupstr(v, &sp->pod_name)) < 0)
			return r;
	} else {
		r = label_selector__parse(sel, &sp->selector, msg, sizeof(msg));
		if (r == -EINVAL)
			return invalid(s, "spec.targets.%s", msg);
		if (r < 0)
			return r;
		sp->has_selector = true;
		if (label_selector__empty(&sp->selector))
			return invalid(s, "spec.targets.selector is empty: it would select every pod "
				       "in the namespace");
	}
	if ((v = kj_str(targets, "namespace"))) {
		if ((r = dupstr(v, &sp->target_namespace)) < 0)
			return r;
	}
	if ((v = kj_str(targets, "container"))) {
		if (!dns_name(v, 63, false))
			return invalid(s, "spec.targets.container '%.100s' is not a container name",
				       v);
		if ((r = dupstr(v, &sp->container)) < 0)
			return r;
	}
	if ((v = kj_str(targets, "process.match"))) {
		regex_t re;

		/* measured before regcomp() sees it: a tenant's pattern must not make the
		 * informer build gigabytes of automaton (common/recheck.h) */
		if (strlen(v) > 256)
			return invalid(s, "spec.targets.process.match is longer than 256 characters");
		if (recheck(v, msg, sizeof(msg)) < 0)
			return invalid(s, "spec.targets.process.match is refused: %s", msg);
		if (regcomp(&re, v, REG_EXTENDED | REG_NOSUB) != 0)
			return invalid(s, "spec.targets.process.match is not a regular expression "
				       "(POSIX ERE)");
		regfree(&re);
		if ((r = dupstr(v, &sp->process_match)) < 0)
			return r;
	}
	return 0;
}

/* spec.duration ("30s", or a number of seconds), and as the injector takes it. */
static int parse_duration(struct session *s, const json_t *dur)
{
	struct session_spec *sp = &s->spec;

	if (json_is_string(dur)) {
		if (parse_duration_ns(json_string_value(dur), &sp->duration_ns) < 0 ||
		    sp->duration_ns < 1000000ULL || sp->duration_ns > SESSION_MAX_DURATION_NS)
			return invalid(s, "spec.duration '%.40s' is not a duration from 1ms to 24h "
				       "(such as 30s, 2m)", json_string_value(dur));
	} else if (json_is_integer(dur)) {
		if (json_integer_value(dur) < 1 || json_integer_value(dur) > 86400)
			return invalid(s, "spec.duration must be from 1 to 86400 seconds");
		sp->duration_ns = (uint64_t)json_integer_value(dur) * NSEC_PER_SEC;
	} else if (dur && !json_is_null(dur)) {
		return invalid(s, "spec.duration must be a duration such as 30s");
	}
	if (sp->duration_ns % NSEC_PER_SEC == 0)
		snprintf(sp->duration, sizeof(sp->duration), "%llus",
			 (unsigned long long)(sp->duration_ns / NSEC_PER_SEC));
	else if (sp->duration_ns % NSEC_PER_MSEC == 0)
		snprintf(sp->duration, sizeof(sp->duration), "%llums",
			 (unsigned long long)(sp->duration_ns / NSEC_PER_MSEC));
	else    /* "1.5ms" reaches the injector exact, not cut to "1ms" */
		snprintf(sp->duration, sizeof(sp->duration), "%lluns",
			 (unsigned long long)sp->duration_ns);
	return 0;
}

/* spec.injection: mode and method; then what they allow with the collectors. */
static int parse_injection(struct session *s, const json_t *inj)
{
	struct session_spec *sp = &s->spec;

	if (inj && !json_is_null(inj)) {
		const char *mode = kj_str(inj, "mode"), *method = kj_str(inj, "method");

		if (!json_is_object(inj))
			return invalid(s, "spec.injection must be an object");
		if (!mode || strcmp(mode, "Auto") == 0)
			sp->mode = INJ_AUTO;
		else if (strcmp(mode, "NodeAgent") == 0)
			sp->mode = INJ_NODE_AGENT;
		else if (strcmp(mode, "EphemeralContainer") == 0)
			sp->mode = INJ_EPHEMERAL;
		else
			return invalid(s, "spec.injection.mode '%.40s': use Auto, NodeAgent or "
				       "EphemeralContainer", mode);
		if (!method || strcmp(method, "Ptrace") == 0)
			sp->method = METHOD_PTRACE;
		else if (strcmp(method, "EBPFOnly") == 0)
			sp->method = METHOD_EBPF_ONLY;
		else
			return invalid(s, "spec.injection.method '%.40s': use Ptrace or EBPFOnly",
				       method);
	}
	/* the CRDs' CEL rules say the same; a server that does not evaluate them (older than
	 * 1.25, or the feature off) lets such a spec through, and it is refused here */
	if (sp->method == METHOD_EBPF_ONLY && sp->mode == INJ_EPHEMERAL)
		return invalid(s, "spec.injection: method EBPFOnly needs mode NodeAgent or Auto: "
			       "an ephemeral container is outside the host's pid namespace, where "
			       "the eBPF collectors cannot select the target");
	if (sp->method == METHOD_EBPF_ONLY && collector_listed(sp->collectors, "cupti"))
		return invalid(s, "spec.collectors.cupti needs injection.method Ptrace: CUPTI runs "
			       "inside the process, and EBPFOnly loads nothing into it");
	return 0;
}

/* spec.output: the storage the admin set up (storageRef), the session's own s3 where the
 * controller allows it, or the controller's defaults. */
static int parse_output(struct session *s, const json_t *out)
{
	struct session_spec *sp = &s->spec;
	const json_t *s3 = json_object_get(out, "s3"), *ref = json_object_get(out, "storageRef");
	const char *name = kj_str(ref, "name");

	s3 = json_is_null(s3) ? NULL : s3;
	ref = json_is_null(ref) ? NULL : ref;
	if (s3 && ref)
		return invalid(s, "spec.output: give storageRef or s3, not both");
	if (ref) {
		if (!name || !dns_name(name, 253, true))
			return invalid(s, "spec.output.storageRef.name must name a "
				       "ClusterProfilingStorage (kubectl get clusterprofilingstorages)");
		return dupstr(name, &sp->storage_ref);
	}
	/* a session that started under a controller that allowed it runs on (an upgrade must
	 * not cut windows); status is the controller's, not the author's */
	if (s3 && !inline_s3_allowed && !kj_str(s->status, "startTime"))
		return invalid(s, "spec.output.s3 is turned off on this cluster: name the storage "
			       "your admin set up with spec.output.storageRef.name (kubectl get "
			       "clusterprofilingstorages); aiprof-controller --allow-inline-s3 turns "
			       "it on");
	if (!s3 && s3_defaults) {
		sp->s3_defaulted = true;
		return parse_s3(s, s3_defaults);
	}
	if (!s3 && store_available) {
		sp->in_cluster = true;
		return 0;
	}
	return parse_s3(s, s3);
}

/* The spec, validated. Returns 0, -EINVAL (spec_msg says what is wrong), -ENOMEM. */
static int parse_spec(struct session *s, const json_t *spec)
{
	struct session_spec *sp = &s->spec;
	const json_t *ttl;
	int r;

	sp->ttl_s = -1;
	sp->record_rate = -1;
	sp->duration_ns = SESSION_DEFAULT_DURATION_NS;
	snprintf(sp->duration, sizeof(sp->duration), "30s");
	if (!json_is_object(spec))
		return invalid(s, "spec is missing");
	if ((r = parse_targets(s, json_object_get(spec, "targets"))) < 0 ||
	    (r = parse_duration(s, json_object_get(spec, "duration"))) < 0 ||
	    (r = parse_collectors(s, json_object_get(spec, "collectors"))) < 0 ||
	    (r = parse_cost(s, json_object_get(spec, "cost"))) < 0 ||
	    (r = parse_injection(s, json_object_get(spec, "injection"))) < 0)
		return r;
	r = parse_output(s, json_object_get(spec, "output"));
	if (r < 0)
		return r;
	ttl = json_object_get(spec, "ttlSecondsAfterFinished");
	if (json_is_integer(ttl) && json_integer_value(ttl) >= 0 &&
	    json_integer_value(ttl) <= 10LL * 365 * 86400)
		sp->ttl_s = json_integer_value(ttl);
	else if (ttl && !json_is_null(ttl))
		return invalid(s, "spec.ttlSecondsAfterFinished must be a number of seconds from 0 "
			       "to 10 years");
	return 0;
}

int session__from_json(const json_t *j, struct session **ret)
{
	const char *ns = kj_str(j, "metadata.namespace"), *name = kj_str(j, "metadata.name");
	const char *uid = kj_str(j, "metadata.uid"), *rv = kj_str(j, "metadata.resourceVersion");
	const char *created = kj_str(j, "metadata.creationTimestamp");
	const json_t *fin = kj_get(j, "metadata.finalizers"), *del, *status, *e;
	struct session *s;
	size_t i;
	int err = -ENOMEM;

	if (!json_is_object(j) || !ns || !name || !uid || !ns[0] || !name[0] || !uid[0])
		return -EINVAL;
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	atomic_init(&s->refs, 1);
	if (asprintf(&s->key, "%s/%s", ns, name) < 0) {
		s->key = NULL;
		goto fail;
	}
	s->ns = strdup(ns);
	s->name = strdup(name);
	s->uid = strdup(uid);
	s->rv = strdup(rv ? rv : "");
	if (!s->ns || !s->name || !s->uid || !s->rv)
		goto fail;
	s->generation = json_integer_value(kj_get(j, "metadata.generation"));
	if (created)
		(void)ktime_parse(created, &s->created_ns);
	del = kj_get(j, "metadata.deletionTimestamp");
	s->deleting = del && !json_is_null(del);
	if (json_is_array(fin)) {
		s->finalizers = json_deep_copy(fin);
		if (!s->finalizers)
			goto fail;
		json_array_foreach(fin, i, e)
			if (json_is_string(e) && strcmp(json_string_value(e), SESSION_FINALIZER) == 0)
				s->has_finalizer = true;
	}
	json_array_foreach(kj_get(j, "metadata.ownerReferences"), i, e)
		if (json_is_true(json_object_get(e, "controller")) && kj_str(e, "uid") &&
		    kj_str(e, "kind") && strcmp(kj_str(e, "kind"), POLICY_KIND) == 0) {
			s->policy_uid = strdup(kj_str(e, "uid"));
			if (!s->policy_uid)
				goto fail;
			break;
		}
	status = json_object_get(j, "status");
	if (json_is_object(status)) {
		s->status = json_deep_copy(status);
		if (!s->status)
			goto fail;
		s->phase = session_phase_parse(kj_str(status, "phase"));
	}
	err = parse_spec(s, json_object_get(j, "spec"));
	if (err == -EINVAL)
		s->spec_err = err;      /* kept: the reconciler fails the session with spec_msg */
	else if (err < 0)
		goto fail;
	*ret = s;
	return 0;
fail:
	session__unref(s);
	return err;
}
