/* SPDX-License-Identifier: MIT */
/*
 * The running controller: informers on ProfilingSessions and pods (target pods and the
 * injectors, which are pods too), a work queue of session keys, and workers that gather a
 * session's input from the cache, ask reconcile__plan() what to do, and do it through the
 * API: finalizer and status patches with the resourceVersion as precondition (a 409 is
 * retried on a fresh object), injector pods, ephemeral containers, Events.
 *
 * Library code: it returns errors and reports through the log hooks of the caller
 * (struct controller_hooks), never printing on its own.
 */
#ifndef AIPROF_CONTROLLER_H
#define AIPROF_CONTROLLER_H

#include <stdbool.h>
#include <stdint.h>
#include "kubeconfig.h"
#include "reconcile.h"
#include "strbuf.h"

struct controller_hooks {
	/* A line for the operator's log: level as in log.h (0 error .. 4 debug). */
	void (*log)(void *ctx, int level, const char *msg);
	/* A session's status changed (the websocket feed): compact JSON of one message. */
	void (*feed)(void *ctx, const char *json, size_t len);
	void *ctx;
};

struct controller_config {
	const struct kube_config *kube;
	const char *namespace;        /* watch one namespace, or NULL for all */
	unsigned workers;             /* reconciling in parallel (>= 1) */
	struct reconcile_config rc;
	long watch_timeout_s;         /* 0: 300..600 s at random */
	const char *identity;         /* this replica, for Events' reportingInstance */
	struct controller_hooks hooks;
};

struct controller;

int controller__new(const struct controller_config *cfg, struct controller **ret);
int controller__start(struct controller *c);   /* informers, then workers */
bool controller__synced(struct controller *c); /* both caches listed once */
void controller__stop(struct controller *c);   /* NULL-safe; joins every thread */
void controller__free(struct controller *c);   /* NULL-safe */

/* Prometheus text exposition of the controller's metrics (appended to b). */
void controller__metrics(struct controller *c, struct strbuf *b);
/* The current state of every session as feed messages, one JSON per line (new clients). */
void controller__snapshot(struct controller *c, struct strbuf *b);

#endif
