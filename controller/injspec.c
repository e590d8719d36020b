/* SPDX-License-Identifier: MIT */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "api.h"
#include "injspec.h"
#include "timeutil.h"

void injspec__pod_name(const struct session *s, const char *target_pod,
		       char out[INJECTOR_POD_NAME_MAX + 1])
{
	char id[11];
	size_t n = strlen(s->name);

	session__short_id(s->uid, target_pod, id);
	if (n > 40)
		n = 40;
	while (n > 0 && (s->name[n - 1] == '-' || s->name[n - 1] == '.'))
		n--;
	snprintf(out, INJECTOR_POD_NAME_MAX + 1, "aiprof-%.*s-%s", (int)n, s->name, id);
}

void injspec__ephemeral_name(const struct session *s, char out[32])
{
	char id[11];

	session__short_id(s->uid, "", id);
	snprintf(out, 32, EPHEMERAL_PREFIX "%s", id);
}

void injspec__merge_pod_name(const struct session *s, char out[INJECTOR_POD_NAME_MAX + 1])
{
	char id[11];
	size_t n = strlen(s->name);

	session__short_id(s->uid, "/merge", id);
	if (n > 36)
		n = 36;
	while (n > 0 && (s->name[n - 1] == '-' || s->name[n - 1] == '.'))
		n--;
	snprintf(out, INJECTOR_POD_NAME_MAX + 1, "aiprof-%.*s-merge-%s", (int)n, s->name, id);
}

const char *injspec__pods_namespace(const struct injector_config *cfg, const struct session *s)
{
	/* one rule: only a session that gives its own spec.output.s3 (which the admin allowed
	 * with --allow-inline-s3) has its pods beside it; the admin's storage and the in-cluster
	 * store put them where tenants have no verbs */
	bool admins = s->spec.storage_ref || s->spec.s3_defaulted || s->spec.in_cluster;

	return cfg->ns && cfg->ns[0] && admins ? cfg->ns : s->ns;
}

/* The metadata both pods share: the session's labels and, in the session's own namespace,
 * its controlling ownerReference (the API server's garbage collector deletes the pod with
 * the session); across namespaces the controller's finalizer does that. */
static json_t *pod_metadata(const struct injector_config *cfg, const struct session *s,
			    const char *name, const char *component)
{
	const char *ns = injspec__pods_namespace(cfg, s);
	json_t *m = json_pack("{s:s,s:s,s:{s:s,s:s,s:s,s:s,s:s}}", "name", name, "namespace", ns,
			      "labels", LABEL_SESSION_UID, s->uid, LABEL_SESSION, s->name,
			      LABEL_SESSION_NS, s->ns, LABEL_COMPONENT, component,
			      LABEL_MANAGED_BY, MANAGED_BY);

	if (m && strcmp(ns, s->ns) == 0 &&
	    json_object_set_new(m, "ownerReferences",
				json_pack("[{s:s,s:s,s:s,s:s,s:b,s:b}]", "apiVersion",
					  AIPROF_API_VERSION, "kind", SESSION_KIND, "name", s->name,
					  "uid", s->uid, "controller", 1, "blockOwnerDeletion", 1))) {
		json_decref(m);
		return NULL;
	}
	return m;
}

int injspec__output_url(const struct injector_config *cfg, const struct session *s,
			const char *target_pod, char **ret)
{
	const struct session_s3 *o = &s->spec.s3;
	char *u;

	if (s->spec.in_cluster) {
		const char *b = cfg->store_url ? cfg->store_url : "";
		size_t n = strlen(b);

		while (n && b[n - 1] == '/')
			n--;
		if (asprintf(&u, "%.*s/v1/artifacts/%s/%s/%s", (int)n, b, s->ns, s->name,
			     target_pod) < 0)
			return -ENOMEM;
		*ret = u;
		return 0;
	}
	/* the UID too: a session made again under the same name writes beside the last run */
	if (asprintf(&u, "s3://%s/%s%s%s/%s/%s/%s", o->bucket, o->prefix ? o->prefix : "",
		     o->prefix && o->prefix[0] ? "/" : "", s->ns, s->name, s->uid, target_pod) < 0)
		return -ENOMEM;
	*ret = u;
	return 0;
}

static int add_str(json_t *arr, const char *s)
{
	return json_array_append_new(arr, json_string(s));
}

static json_t *injector_args(const struct injector_config *cfg,
			     const struct injector_target *t, bool ephemeral)
{
	const struct session_spec *sp = &t->s->spec;
	json_t *a = json_array();
	char *url = NULL;
	char hz[16], rate[16];
	int r = 0;

	if (!a || injspec__output_url(cfg, t->s, kpod__name(t->pod), &url) < 0)
		goto fail;
	r |= add_str(a, "profile");
	if (ephemeral) {
		r |= add_str(a, "--container-name");
		r |= add_str(a, t->container);
	} else {
		r |= add_str(a, "--container-id");
		r |= add_str(a, t->container_id);
	}
	r |= add_str(a, "--duration");
	r |= add_str(a, sp->duration);
	r |= add_str(a, "-o");
	r |= add_str(a, url);
	if (sp->process_match) {
		r |= add_str(a, "--match");
		r |= add_str(a, sp->process_match);
	}
	if (sp->collectors) {
		r |= add_str(a, "--collectors");
		r |= add_str(a, sp->collectors);
	}
	if (sp->cpu_hz) {
		snprintf(hz, sizeof(hz), "%u", sp->cpu_hz);
		r |= add_str(a, "--frequency");
		r |= add_str(a, hz);
	}
	if (sp->record_rate >= 0) {
		snprintf(rate, sizeof(rate), "%d", (int)sp->record_rate);
		r |= add_str(a, "--record-rate");
		r |= add_str(a, rate);
	}
	if (sp->budget[0]) {
		r |= add_str(a, "--budget");
		r |= add_str(a, sp->budget);
	}
	if (sp->method == METHOD_EBPF_ONLY) {
		r |= add_str(a, "--method");
		r |= add_str(a, "ebpf");
	}
	r |= add_str(a, "--termination-log");
	r |= add_str(a, "/dev/termination-log");
	if (r)
		goto fail;
	free(url);
	return a;
fail:
	free(url);
	json_decref(a);
	return NULL;
}

static json_t *env_var(const char *name, const char *value)
{
	return json_pack("{s:s,s:s}", "name", name, "value", value);
}

static json_t *env_secret(const char *name, const char *secret, const char *key)
{
	return json_pack("{s:s,s:{s:{s:s,s:s}}}", "name", name, "valueFrom", "secretKeyRef",
			 "name", secret, "key", key);
}

static json_t *injector_env(const struct injector_target *t, bool ephemeral)
{
	const struct session_s3 *o = &t->s->spec.s3;
	json_t *env = json_array();
	int r = 0;

	if (!env)
		return NULL;
	r |= json_array_append_new(env, env_var("AIPROF_SESSION", t->s->key));
	r |= json_array_append_new(env, env_var("AIPROF_TARGET_POD", kpod__name(t->pod)));
	r |= json_array_append_new(env, env_var("AIPROF_TARGET_CONTAINER", t->container));
	if (o->endpoint)
		r |= json_array_append_new(env, env_var("AWS_ENDPOINT_URL_S3", o->endpoint));
	if (o->region)
		r |= json_array_append_new(env, env_var("AWS_REGION", o->region));
	if (o->secret_name && !ephemeral) {
		r |= json_array_append_new(env, env_var("AIPROF_S3_SECRET_DIR", INJECTOR_SECRET_DIR));
	} else if (o->secret_name) {
		r |= json_array_append_new(env, env_secret("AWS_ACCESS_KEY_ID", o->secret_name,
							   o->key_id_key));
		r |= json_array_append_new(env, env_secret("AWS_SECRET_ACCESS_KEY", o->secret_name,
							   o->secret_key_key));
		if (o->token_key)
			r |= json_array_append_new(env, env_secret("AWS_SESSION_TOKEN",
								   o->secret_name, o->token_key));
	}
	if (r) {
		json_decref(env);
		return NULL;
	}
	return env;
}

static json_t *security_context(const struct injector_target *t)
{
	/* the least the collectors asked for need: library collectors only -> ptrace alone;
	 * with eBPF, SYS_ADMIN too: on a kernel without CAP_BPF for eBPF itself, and on any for
	 * the window's cost and a budget (spec.cost.budgetPercent): the injector measures and
	 * keeps them by the kernel's BPF statistics, which BPF_ENABLE_STATS turns on with
	 * CAP_SYS_ADMIN alone (without, neither is done and summary.json says why) */
	bool ebpf = session__needs_ebpf(t->s);
	json_t *add = ebpf ? json_pack("[ssss]", "SYS_PTRACE", "BPF", "PERFMON", "SYS_ADMIN") :
			     json_pack("[s]", "SYS_PTRACE");

	if (!add)
		return NULL;
	/* ptrace, bpf and perf_event_open are outside the runtimes' default seccomp profiles */
	return json_pack("{s:b,s:I,s:{s:[s],s:o},s:{s:s}}", "privileged", 0, "runAsUser",
			 (json_int_t)0, "capabilities", "drop", "ALL", "add", add,
			 "seccompProfile", "type", "Unconfined");
}

static json_t *container(const struct injector_config *cfg, const struct injector_target *t,
			 const char *name, bool ephemeral)
{
	json_t *args = injector_args(cfg, t, ephemeral), *env = injector_env(t, ephemeral);
	json_t *sc = security_context(t), *c = NULL;

	if (!args || !env || !sc)
		goto fail;
	c = json_pack("{s:s,s:s,s:s,s:[s],s:O,s:O,s:O,s:s,s:s}", "name", name, "image", cfg->image,
		      "imagePullPolicy", cfg->pull_policy ? cfg->pull_policy : "IfNotPresent",
		      "command", "aiprof", "args", args, "env", env, "securityContext", sc,
		      "terminationMessagePath", "/dev/termination-log",
		      "terminationMessagePolicy", "File");
	if (!c)
		goto fail;
	if (ephemeral) {
		if (json_object_set_new(c, "targetContainerName", json_string(t->container)))
			goto fail;
	} else {
		json_t *res = json_pack("{s:{s:s,s:s},s:{s:s}}", "requests", "cpu", "100m", "memory",
					"128Mi", "limits", "memory", "1Gi");

		if (!res || json_object_set_new(c, "resources", res))
			goto fail;
		json_t *mounts = json_pack("[{s:s,s:s}]", "name", "unwind-cache", "mountPath",
					   INJECTOR_UNWIND_CACHE);

		if (!mounts || json_object_set_new(c, "volumeMounts", mounts))
			goto fail;
		if (t->s->spec.s3.secret_name &&
		    json_array_insert_new(mounts, 0, json_pack("{s:s,s:s,s:b}", "name",
							       "s3-credentials", "mountPath",
							       INJECTOR_SECRET_DIR, "readOnly", 1)))
			goto fail;
		if (t->s->spec.in_cluster &&
		    json_array_insert_new(mounts, 0, json_pack("{s:s,s:s,s:b}", "name",
							       STORE_TOKEN_VOLUME, "mountPath",
							       STORE_TOKEN_DIR, "readOnly", 1)))
			goto fail;
	}
	json_decref(args);
	json_decref(env);
	json_decref(sc);
	return c;
fail:
	json_decref(c);
	json_decref(args);
	json_decref(env);
	json_decref(sc);
	return NULL;
}

json_t *injspec__ephemeral_container(const struct injector_config *cfg,
				     const struct injector_target *t)
{
	char name[32];

	injspec__ephemeral_name(t->s, name);
	return container(cfg, t, name, true);
}

/* The S3 Secret as a volume of the credential files injector/artifacts/upload.h reads. */
static json_t *secret_volumes(const struct session_s3 *o)
{
	json_t *items = json_pack("[{s:s,s:s},{s:s,s:s}]", "key", o->key_id_key, "path",
				  "AWS_ACCESS_KEY_ID", "key", o->secret_key_key, "path",
				  "AWS_SECRET_ACCESS_KEY");

	if (!items)
		return NULL;
	if (o->token_key &&
	    json_array_append_new(items, json_pack("{s:s,s:s}", "key", o->token_key, "path",
						   "AWS_SESSION_TOKEN"))) {
		json_decref(items);
		return NULL;
	}
	return json_pack("[{s:s,s:{s:s,s:o,s:I}}]", "name", "s3-credentials", "secret",
			 "secretName", o->secret_name, "items", items, "defaultMode",
			 (json_int_t)0400);
}

json_t *injspec__node_agent_pod(const struct injector_config *cfg, const struct injector_target *t)
{
	const struct session *s = t->s;
	const struct session_s3 *o = &s->spec.s3;
	char name[INJECTOR_POD_NAME_MAX + 1];
	json_t *pod = NULL, *c, *spec, *vols = NULL, *meta;
	json_int_t deadline = (json_int_t)((s->spec.duration_ns + cfg->grace_ns + NSEC_PER_SEC - 1) /
					   NSEC_PER_SEC);
	char target[600];

	injspec__pod_name(s, kpod__name(t->pod), name);
	snprintf(target, sizeof(target), "%s/%s/%s", s->ns, kpod__name(t->pod), t->container);
	c = container(cfg, t, INJECTOR_CONTAINER, false);
	if (!c)
		return NULL;
	meta = pod_metadata(cfg, s, name, COMPONENT_INJECTOR);
	if (!meta || json_object_set_new(json_object_get(meta, "labels"), LABEL_TARGET_POD,
					 json_string(kpod__name(t->pod))) ||
	    json_object_set_new(meta, "annotations", json_pack("{s:s}", "aiprof.io/target",
								 target))) {
		json_decref(meta);
		json_decref(c);
		return NULL;
	}
	pod = json_pack("{s:s,s:s,s:o,s:{s:s,s:b,s:s,s:b,s:b,s:I,s:I,s:[{s:s}],s:[o]}}",
			"apiVersion", "v1", "kind", "Pod", "metadata", meta,
			"spec",
			"nodeName", kpod__node(t->pod), "hostPID", 1, "restartPolicy", "Never",
			"automountServiceAccountToken", 0, "enableServiceLinks", 0,
			"activeDeadlineSeconds", deadline, "terminationGracePeriodSeconds",
			(json_int_t)10, "tolerations", "operator", "Exists", "containers", c);
	if (!pod)
		return NULL;           /* json_pack stole c */
	spec = json_object_get(pod, "spec");
	if (cfg->priority_class &&
	    json_object_set_new(spec, "priorityClassName", json_string(cfg->priority_class)))
		goto fail;
	vols = o->secret_name ? secret_volumes(o) : json_array();
	/* the store's proof of who uploads: a token bound to this pod, for the store alone */
	if (vols && s->spec.in_cluster &&
	    json_array_append_new(vols, json_pack("{s:s,s:{s:[{s:{s:s,s:I,s:s}}],s:I}}", "name",
						  STORE_TOKEN_VOLUME, "projected", "sources",
						  "serviceAccountToken", "audience",
						  STORE_TOKEN_AUDIENCE, "expirationSeconds",
						  (json_int_t)STORE_TOKEN_SECONDS, "path", "token",
						  "defaultMode", (json_int_t)0400)))
		goto fail;
	if (!vols || json_object_set_new(spec, "volumes", vols) ||
	    json_array_append_new(vols, json_pack("{s:s,s:{s:s,s:s}}", "name", "unwind-cache",
						  "hostPath", "path", INJECTOR_UNWIND_CACHE,
						  "type", "DirectoryOrCreate")))
		goto fail;
	return pod;
fail:
	json_decref(pod);
	return NULL;
}

json_t *injspec__merge_pod(const struct injector_config *cfg, const struct session *s,
			   const char *const *sources, size_t n_sources)
{
	const struct session_s3 *o = &s->spec.s3;
	char name[INJECTOR_POD_NAME_MAX + 1], *url = NULL;
	json_t *pod = NULL, *args = NULL, *env = NULL, *c = NULL, *spec, *meta;
	int r = 0;

	injspec__merge_pod_name(s, name);
	if (injspec__output_url(cfg, s, MERGE_TARGET, &url) < 0)
		return NULL;
	args = json_pack("[sssss]", "merge", "-o", url, "--termination-log", "/dev/termination-log");
	free(url);
	env = json_array();
	if (!args || !env)
		goto fail;
	for (size_t i = 0; i < n_sources; i++)
		r |= add_str(args, sources[i]);
	r |= json_array_append_new(env, env_var("AIPROF_SESSION", s->key));
	if (o->endpoint)
		r |= json_array_append_new(env, env_var("AWS_ENDPOINT_URL_S3", o->endpoint));
	if (o->region)
		r |= json_array_append_new(env, env_var("AWS_REGION", o->region));
	if (o->secret_name)
		r |= json_array_append_new(env, env_var("AIPROF_S3_SECRET_DIR", INJECTOR_SECRET_DIR));
	if (r)
		goto fail;
	/* reads and writes object storage only: nothing of the node, no capability */
	c = json_pack("{s:s,s:s,s:s,s:[s],s:O,s:O,s:{s:b,s:b,s:{s:[s]},s:{s:s}},s:{s:{s:s,s:s},s:{s:s}},"
		      "s:s,s:s}",
		      "name", MERGE_CONTAINER, "image", cfg->image,
		      "imagePullPolicy", cfg->pull_policy ? cfg->pull_policy : "IfNotPresent",
		      "command", "aiprof", "args", args, "env", env,
		      "securityContext", "privileged", 0, "allowPrivilegeEscalation", 0,
		      "capabilities", "drop", "ALL", "seccompProfile", "type", "RuntimeDefault",
		      "resources", "requests", "cpu", "100m", "memory", "256Mi", "limits", "memory",
		      "2Gi", "terminationMessagePath", "/dev/termination-log",
		      "terminationMessagePolicy", "File");
	if (!c)
		goto fail;
	if (o->secret_name &&
	    json_object_set_new(c, "volumeMounts",
				json_pack("[{s:s,s:s,s:b}]", "name", "s3-credentials", "mountPath",
					  INJECTOR_SECRET_DIR, "readOnly", 1)))
		goto fail;
	meta = pod_metadata(cfg, s, name, COMPONENT_MERGE);
	if (!meta)
		goto fail;
	pod = json_pack("{s:s,s:s,s:o,s:{s:s,s:b,s:b,s:I,s:I,s:[O]}}",
			"apiVersion", "v1", "kind", "Pod", "metadata", meta,
			"spec", "restartPolicy", "Never", "automountServiceAccountToken", 0,
			"enableServiceLinks", 0, "activeDeadlineSeconds", (json_int_t)MERGE_DEADLINE_S,
			"terminationGracePeriodSeconds", (json_int_t)10, "containers", c);
	if (!pod)
		goto fail;
	spec = json_object_get(pod, "spec");
	if (cfg->priority_class &&
	    json_object_set_new(spec, "priorityClassName", json_string(cfg->priority_class)))
		goto fail;
	if (o->secret_name) {
		json_t *vols = secret_volumes(o);

		if (!vols || json_object_set_new(spec, "volumes", vols))
			goto fail;
	}
	if ((cfg->merge_node_selector && json_object_size(cfg->merge_node_selector) &&
	     json_object_set_new(spec, "nodeSelector", json_deep_copy(cfg->merge_node_selector))) ||
	    (cfg->merge_tolerations && json_array_size(cfg->merge_tolerations) &&
	     json_object_set_new(spec, "tolerations", json_deep_copy(cfg->merge_tolerations))))
		goto fail;
	json_decref(args);
	json_decref(env);
	json_decref(c);
	return pod;
fail:
	json_decref(pod);
	json_decref(args);
	json_decref(env);
	json_decref(c);
	return NULL;
}

/* A label key ([prefix/]name) or value: [A-Za-z0-9._/-], starting and ending alphanumeric
 * (prefix checks are the API server's). */
static bool label_text(const char *v, size_t max, bool may_be_empty)
{
	size_t n = strlen(v);

	if (n == 0)
		return may_be_empty;
	if (n > max || !isalnum((unsigned char)v[0]) || !isalnum((unsigned char)v[n - 1]))
		return false;
	for (size_t i = 0; i < n; i++)
		if (!isalnum((unsigned char)v[i]) && !strchr("._-/", v[i]))
			return false;
	return true;
}

int injspec__add_node_selector(json_t *sel, const char *arg, char *why, size_t whylen)
{
	const char *eq = strchr(arg, '=');
	char key[320];

	if (!eq || (size_t)(eq - arg) >= sizeof(key)) {
		snprintf(why, whylen, "--merge-node-selector '%.100s': use KEY=VALUE, such as "
			 "kubernetes.io/os=linux", arg);
		return -EINVAL;
	}
	snprintf(key, sizeof(key), "%.*s", (int)(eq - arg), arg);
	if (!label_text(key, 316, false) || !label_text(eq + 1, 63, true)) {
		snprintf(why, whylen, "--merge-node-selector '%.100s': the key or value is not a "
			 "label key or value (letters, digits, '.', '_', '-', a '/' after a prefix)",
			 arg);
		return -EINVAL;
	}
	return json_object_set_new(sel, key, json_string(eq + 1)) ? -ENOMEM : 0;
}

int injspec__add_toleration(json_t *tols, const char *arg, char *why, size_t whylen)
{
	static const char *const effects[] = { "NoSchedule", "PreferNoSchedule", "NoExecute" };
	char buf[400], *colon, *eq;
	const char *effect = NULL;
	json_t *t;

	snprintf(buf, sizeof(buf), "%s", arg);
	colon = strrchr(buf, ':');
	if (colon) {
		*colon = '\0';
		for (size_t i = 0; i < 3; i++)
			if (strcmp(colon + 1, effects[i]) == 0)
				effect = effects[i];
		if (!effect) {
			snprintf(why, whylen, "--merge-toleration '%.100s': the effect '%.40s' is not "
				 "NoSchedule, PreferNoSchedule or NoExecute", arg, colon + 1);
			return -EINVAL;
		}
	}
	eq = strchr(buf, '=');
	if (eq)
		*eq = '\0';
	if (strlen(arg) >= sizeof(buf) - 1 || !label_text(buf, 316, false) ||
	    (eq && !label_text(eq + 1, 63, true))) {
		snprintf(why, whylen, "--merge-toleration '%.100s': use KEY[=VALUE][:EFFECT] with a "
			 "taint's key and value, such as nvidia.com/gpu:NoSchedule", arg);
		return -EINVAL;
	}
	t = json_pack("{s:s,s:s}", "key", buf, "operator", eq ? "Equal" : "Exists");
	if (!t || (eq && json_object_set_new(t, "value", json_string(eq + 1))) ||
	    (effect && json_object_set_new(t, "effect", json_string(effect)))) {
		json_decref(t);
		return -ENOMEM;
	}
	return json_array_append_new(tols, t) ? -ENOMEM : 0;
}
