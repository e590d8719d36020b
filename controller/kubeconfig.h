/* SPDX-License-Identifier: MIT */
/*
 * Where the API server is and how to authenticate: a kubeconfig file (current context or a
 * named one: server, CA file or data, client certificate and key as files or data, bearer
 * token or tokenFile, insecure-skip-tls-verify, tls-server-name, namespace) or the in-cluster
 * service account (KUBERNETES_SERVICE_HOST/PORT, the token that the kubelet rotates, ca.crt,
 * namespace). TLS verification is on unless a kubeconfig says insecure-skip-tls-verify.
 *
 * Exec and auth-provider plugins are refused with a message: the controller does not run
 * programs named by a file. Never puts a token or a key into msg.
 */
#ifndef AIPROF_KUBECONFIG_H
#define AIPROF_KUBECONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <jansson.h>

#define KUBE_SA_DIR "/var/run/secrets/kubernetes.io/serviceaccount"

struct kube_config {
	char *server;           /* "https://host:port", no trailing '/' */
	char *ca_file;          /* PEM bundle to trust, or NULL */
	char *ca_data;          /* PEM bytes (certificate-authority-data decoded), or NULL */
	size_t ca_len;
	char *cert_file, *key_file;   /* client certificate and key (PEM), or NULL */
	char *cert_data, *key_data;   /* the same as bytes, or NULL; key_data is wiped on free */
	size_t cert_len, key_len;
	char *token;            /* a fixed bearer token, or NULL; wiped on free */
	char *token_file;       /* a bearer token re-read whenever the file changes, or NULL */
	char *tls_server_name;  /* name to verify the server's certificate against, or NULL */
	bool insecure;          /* insecure-skip-tls-verify: no certificate verification */
	char *namespace;        /* the context's namespace, or the service account's; never NULL */
	char *source;           /* for messages: "kubeconfig /root/.kube/config, context kind" */
};

void kube_config__free(struct kube_config *c);  /* NULL-safe */

/*
 * Resolves a kubeconfig already parsed into docs[0..n) (YAML documents as JSON, in the order
 * of KUBECONFIG's list; the first file to name a cluster, user or context wins, as kubectl
 * merges them); dirs[i] is the folder relative paths of docs[i] resolve against. context
 * NULL: the first non-empty current-context. Returns 0 and *ret (caller frees with
 * kube_config__free()), -ENOENT (no such context/cluster/user), -EINVAL (missing server,
 * bad base64, bad value), -ENOTSUP (exec / auth-provider), -ENOMEM; msg says which.
 */
int kube_config__resolve(json_t *const *docs, const char *const *dirs, size_t n,
			 const char *context, struct kube_config **ret, char *msg, size_t msglen);

/*
 * Loads the kubeconfig files in paths (a ':'-separated list as in KUBECONFIG; missing files
 * in a list of several are skipped, as kubectl does) and resolves it. Returns what
 * kube_config__resolve() returns, or the error of reading or parsing a file.
 */
int kube_config__load_kubeconfig(const char *paths, const char *context,
				 struct kube_config **ret, char *msg, size_t msglen);

/*
 * The in-cluster configuration: server from host and port (KUBERNETES_SERVICE_HOST/PORT when
 * NULL; IPv6 literals are bracketed), token_file = sa_dir/token, ca_file = sa_dir/ca.crt,
 * namespace from sa_dir/namespace ("default" if unreadable). sa_dir NULL: KUBE_SA_DIR.
 * Returns 0, -ENOENT (not in a cluster: no host or no token file), -ENOMEM.
 */
int kube_config__in_cluster(const char *sa_dir, const char *host, const char *port,
			    struct kube_config **ret, char *msg, size_t msglen);

#endif
