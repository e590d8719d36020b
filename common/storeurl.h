/* SPDX-License-Identifier: MIT */
/*
 * The in-cluster artifact store's URL and names (docs/artifact-store.md), shared by the
 * injector's client (injector/artifacts/storeput.c) and the controller's endpoint. Outside
 * input: tests/fuzz/fuzz_storeurl.c.
 */
#ifndef AIPROF_STOREURL_H
#define AIPROF_STOREURL_H

#include <stdbool.h>
#include <stddef.h>

/* The token file when AIPROF_STORE_TOKEN_FILE is not set: the injector pod's projected
 * service-account token of audience aiprof.io/artifacts (controller/injspec.c mounts it). */
#define STORE_TOKEN_FILE_DEFAULT "/var/run/secrets/aiprof.io/artifacts/token"
#define STORE_TOKEN_MAX 16384
#define STORE_NAME_MAX 200

struct store_dest {
	char *base;             /* "http://h:p/v1/artifacts/ns/session/pod", no trailing '/' */
	char *token_file;
	char *ca_file;          /* https: CA bundle (AIPROF_STORE_CA_FILE); NULL: the system's */
};

/* 1..253 of [a-z0-9.-], alphanumeric at both ends: a Kubernetes object name (a DNS
 * subdomain), of n bytes at s. */
bool store_k8s_name_ok(const char *s, size_t n);

/* True if url starts with http:// or https:// (the cue for the store). */
bool store_url_is_store(const char *url);

/*
 * Parses url (the controller's -o argument) into *d, with the token file and CA bundle from
 * the environment. Returns 0, -EINVAL (why says what is wrong), -ENOMEM.
 */
int store_dest__parse(const char *url, struct store_dest *d, char *why, size_t whylen);
void store_dest__clear(struct store_dest *d);

/* True if name is one the store takes (1..STORE_NAME_MAX of [A-Za-z0-9._/-], no empty,
 * '.' or '..' component, no leading '/'). */
bool store_name_ok(const char *name);

#endif
