/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "b64.h"
#include "kubeconfig.h"
#include "readfile.h"
#include "yamljson.h"

#define KUBECONFIG_MAX (4u << 20)

static void wipe_free(char *p, size_t len)
{
	if (p) {
		explicit_bzero(p, len);
		free(p);
	}
}

void kube_config__free(struct kube_config *c)
{
	if (!c)
		return;
	free(c->server);
	free(c->ca_file);
	free(c->ca_data);
	free(c->cert_file);
	free(c->key_file);
	free(c->cert_data);
	wipe_free(c->key_data, c->key_len);
	wipe_free(c->token, c->token ? strlen(c->token) : 0);
	free(c->token_file);
	free(c->tls_server_name);
	free(c->namespace);
	free(c->source);
	free(c);
}

/* The entry named name in docs[i][list] (a list of {name, <field>: {...}}), first file first. */
static const json_t *find_named(json_t *const *docs, size_t n, const char *list,
				const char *field, const char *name, size_t *ret_doc)
{
	for (size_t i = 0; i < n; i++) {
		const json_t *arr = json_object_get(docs[i], list), *e;
		size_t k;

		if (!json_is_array(arr))
			continue;
		json_array_foreach(arr, k, e) {
			const json_t *nm = json_object_get(e, "name");

			if (json_is_string(nm) && strcmp(json_string_value(nm), name) == 0) {
				const json_t *v = json_object_get(e, field);

				*ret_doc = i;
				return json_is_object(v) ? v : NULL;
			}
		}
	}
	return NULL;
}

static const char *get_str(const json_t *o, const char *key)
{
	const json_t *v = json_object_get(o, key);

	return json_is_string(v) && json_string_length(v) > 0 ? json_string_value(v) : NULL;
}

/* A path from a kubeconfig: absolute, or relative to the file's folder. */
static int resolve_path(const char *dir, const char *p, char **ret)
{
	char *s = NULL;

	if (p[0] == '/' || !dir || !dir[0])
		s = strdup(p);
	else if (asprintf(&s, "%s/%s", dir, p) < 0)
		s = NULL;
	if (!s)
		return -ENOMEM;
	*ret = s;
	return 0;
}

static int decode_data(const char *what, const char *b64, char **ret, size_t *ret_len,
		       char *msg, size_t msglen)
{
	uint8_t *out = NULL;
	size_t n = 0;
	int r = b64_decode(b64, strlen(b64), &out, &n);

	if (r == -EINVAL)
		snprintf(msg, msglen, "%s is not valid base64", what);
	if (r < 0)
		return r;
	*ret = (char *)out;
	*ret_len = n;
	return 0;
}

static int dup_or_null(const char *s, char **ret)
{
	if (!s) {
		*ret = NULL;
		return 0;
	}
	*ret = strdup(s);
	return *ret ? 0 : -ENOMEM;
}

int kube_config__resolve(json_t *const *docs, const char *const *dirs, size_t n,
			 const char *context, struct kube_config **ret, char *msg, size_t msglen)
{
	struct kube_config *c = NULL;
	const json_t *ctx, *cluster, *user;
	const char *cluster_name, *user_name, *s, *ns;
	size_t di = 0, cdi = 0, udi = 0;
	int err;

	msg[0] = '\0';
	if (!context) {
		for (size_t i = 0; i < n && !context; i++)
			context = get_str(docs[i], "current-context");
		if (!context) {
			snprintf(msg, msglen, "no current-context, and no context was named");
			return -ENOENT;
		}
	}
	ctx = find_named(docs, n, "contexts", "context", context, &di);
	if (!ctx) {
		snprintf(msg, msglen, "no context named '%.100s'", context);
		return -ENOENT;
	}
	cluster_name = get_str(ctx, "cluster");
	user_name = get_str(ctx, "user");
	if (!cluster_name) {
		snprintf(msg, msglen, "context '%.100s' names no cluster", context);
		return -EINVAL;
	}
	cluster = find_named(docs, n, "clusters", "cluster", cluster_name, &cdi);
	if (!cluster) {
		snprintf(msg, msglen, "no cluster named '%.100s'", cluster_name);
		return -ENOENT;
	}
	user = NULL;
	if (user_name) {
		user = find_named(docs, n, "users", "user", user_name, &udi);
		if (!user) {
			snprintf(msg, msglen, "no user named '%.100s'", user_name);
			return -ENOENT;
		}
	}

	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	err = -ENOMEM;
	s = get_str(cluster, "server");
	if (!s || (strncmp(s, "https://", 8) != 0 && strncmp(s, "http://", 7) != 0)) {
		snprintf(msg, msglen, "cluster '%.100s' has no http(s):// server", cluster_name);
		err = -EINVAL;
		goto fail;
	}
	c->server = strdup(s);
	if (!c->server)
		goto fail;
	while (strlen(c->server) > 8 && c->server[strlen(c->server) - 1] == '/')
		c->server[strlen(c->server) - 1] = '\0';
	c->insecure = json_truthy(json_object_get(cluster, "insecure-skip-tls-verify"));
	if ((s = get_str(cluster, "certificate-authority-data"))) {
		err = decode_data("certificate-authority-data", s, &c->ca_data, &c->ca_len, msg, msglen);
		if (err < 0)
			goto fail;
	} else if ((s = get_str(cluster, "certificate-authority"))) {
		err = resolve_path(dirs ? dirs[cdi] : NULL, s, &c->ca_file);
		if (err < 0)
			goto fail;
	}
	err = dup_or_null(get_str(cluster, "tls-server-name"), &c->tls_server_name);
	if (err < 0)
		goto fail;

	if (user) {
		const char *ddir = dirs ? dirs[udi] : NULL;

		if (json_object_get(user, "exec") || json_object_get(user, "auth-provider")) {
			snprintf(msg, msglen, "user '%.100s' uses an exec or auth-provider plugin, which "
				 "aiprof-controller does not run: use a token or a client certificate",
				 user_name);
			err = -ENOTSUP;
			goto fail;
		}
		if ((s = get_str(user, "client-certificate-data"))) {
			err = decode_data("client-certificate-data", s, &c->cert_data, &c->cert_len,
					  msg, msglen);
		} else if ((s = get_str(user, "client-certificate"))) {
			err = resolve_path(ddir, s, &c->cert_file);
		}
		if (err < 0)
			goto fail;
		if ((s = get_str(user, "client-key-data"))) {
			err = decode_data("client-key-data", s, &c->key_data, &c->key_len, msg, msglen);
		} else if ((s = get_str(user, "client-key"))) {
			err = resolve_path(ddir, s, &c->key_file);
		}
		if (err < 0)
			goto fail;
		if ((c->cert_data || c->cert_file) != (c->key_data || c->key_file)) {
			snprintf(msg, msglen, "user '%.100s' has a client certificate without a key, or "
				 "a key without a certificate", user_name);
			err = -EINVAL;
			goto fail;
		}
		err = dup_or_null(get_str(user, "token"), &c->token);
		if (err < 0)
			goto fail;
		if (!c->token && (s = get_str(user, "tokenFile"))) {
			err = resolve_path(ddir, s, &c->token_file);
			if (err < 0)
				goto fail;
		}
		if (get_str(user, "username") || get_str(user, "password")) {
			snprintf(msg, msglen, "user '%.100s' uses basic authentication, which the API "
				 "server no longer accepts: use a token or a client certificate",
				 user_name);
			err = -ENOTSUP;
			goto fail;
		}
	}
	ns = get_str(ctx, "namespace");
	c->namespace = strdup(ns ? ns : "default");
	if (!c->namespace || asprintf(&c->source, "context %.100s", context) < 0) {
		c->source = NULL;
		err = -ENOMEM;
		goto fail;
	}
	*ret = c;
	return 0;
fail:
	kube_config__free(c);
	return err;
}

int kube_config__load_kubeconfig(const char *paths, const char *context,
				 struct kube_config **ret, char *msg, size_t msglen)
{
	json_t *docs[16] = { NULL };
	char *dirs[16] = { NULL };
	char *list = NULL, *p, *next, *first = NULL;
	size_t n = 0, npaths = 0;
	struct kube_config *c = NULL;
	int err = 0;

	msg[0] = '\0';
	list = strdup(paths);
	if (!list)
		return -ENOMEM;
	for (p = list; *p; p++)
		npaths += *p == ':';
	npaths++;
	for (p = list; p && n < 16; p = next) {
		char *buf = NULL, *d;
		size_t len = 0;
		char emsg[200];

		next = strchr(p, ':');
		if (next)
			*next++ = '\0';
		if (!*p)
			continue;
		if (!first)
			first = p;
		err = readfile(p, KUBECONFIG_MAX, 0, &buf, &len);
		if (err == -ENOENT && npaths > 1) {
			err = 0;
			continue;
		}
		if (err < 0) {
			snprintf(msg, msglen, "cannot read %.200s: %s", p, strerror(-err));
			goto fail;
		}
		err = yaml_to_json(buf, len, &docs[n], emsg, sizeof(emsg));
		free(buf);
		if (err < 0) {
			snprintf(msg, msglen, "%.200s: %s", p, emsg);
			goto fail;
		}
		d = strdup(p);
		if (!d) {
			err = -ENOMEM;
			goto fail;
		}
		dirs[n] = strdup(dirname(d));
		free(d);
		if (!dirs[n++]) {
			err = -ENOMEM;
			goto fail;
		}
	}
	if (n == 0) {
		snprintf(msg, msglen, "none of the kubeconfig files '%.200s' exists", paths);
		err = -ENOENT;
		goto fail;
	}
	err = kube_config__resolve(docs, (const char *const *)dirs, n, context, &c, msg, msglen);
	if (err < 0)
		goto fail;
	free(c->source);
	if (asprintf(&c->source, "kubeconfig %.200s, context %.100s", first,
		     context ? context : "(current)") < 0) {
		c->source = NULL;
		err = -ENOMEM;
		goto fail;
	}
	*ret = c;
	c = NULL;
fail:
	kube_config__free(c);
	for (size_t i = 0; i < n; i++) {
		json_decref(docs[i]);
		free(dirs[i]);
	}
	free(list);
	return err;
}

int kube_config__in_cluster(const char *sa_dir, const char *host, const char *port,
			    struct kube_config **ret, char *msg, size_t msglen)
{
	struct kube_config *c = NULL;
	char *ns = NULL;
	size_t nslen = 0;
	int err = -ENOMEM;

	msg[0] = '\0';
	if (!sa_dir)
		sa_dir = KUBE_SA_DIR;
	if (!host)
		host = getenv("KUBERNETES_SERVICE_HOST");
	if (!port)
		port = getenv("KUBERNETES_SERVICE_PORT");
	if (!host || !host[0] || !port || !port[0]) {
		snprintf(msg, msglen, "not running in a cluster: KUBERNETES_SERVICE_HOST and "
			 "KUBERNETES_SERVICE_PORT are not set (use --kubeconfig)");
		return -ENOENT;
	}
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	if (asprintf(&c->server, strchr(host, ':') ? "https://[%s]:%s" : "https://%s:%s", host,
		     port) < 0) {
		c->server = NULL;
		goto fail;
	}
	if (asprintf(&c->token_file, "%s/token", sa_dir) < 0) {
		c->token_file = NULL;
		goto fail;
	}
	if (asprintf(&c->ca_file, "%s/ca.crt", sa_dir) < 0) {
		c->ca_file = NULL;
		goto fail;
	}
	if (access(c->token_file, R_OK) < 0) {
		err = -errno;
		snprintf(msg, msglen, "cannot read the service account token %.200s: %s",
			 c->token_file, strerror(errno));
		goto fail;
	}
	if (access(c->ca_file, F_OK) < 0) {
		free(c->ca_file);       /* no ca.crt: the system store */
		c->ca_file = NULL;
	}
	if (asprintf(&c->source, "in-cluster, service account folder %.200s", sa_dir) < 0) {
		c->source = NULL;
		goto fail;
	}
	{
		char path[4096];

		snprintf(path, sizeof(path), "%s/namespace", sa_dir);
		if (readfile(path, 253, 0, &ns, &nslen) == 0) {
			while (nslen && (ns[nslen - 1] == '\n' || ns[nslen - 1] == ' '))
				ns[--nslen] = '\0';
		}
	}
	c->namespace = ns && nslen ? ns : strdup("default");
	if (c->namespace != ns)
		free(ns);
	ns = NULL;
	if (!c->namespace)
		goto fail;
	*ret = c;
	return 0;
fail:
	kube_config__free(c);
	return err;
}
