/* SPDX-License-Identifier: MIT */
/*
 * The controller's HTTP endpoint (libwebsockets, one service thread):
 *   GET /healthz       200 "ok" while the process serves
 *   GET /readyz        200 "ok" once ready() says so, else 503 with the reason
 *   GET /metrics       Prometheus text format 0.0.4, from metrics()
 *   GET /ws/sessions   websocket: a snapshot of every session (one JSON text message each),
 *                      then one message per status change, as httpd__broadcast() is called
 * A client that falls more than HTTPD_RING messages behind skips ahead (it gets a
 * {"type":"gap"} message) rather than holding memory for it.
 */
#ifndef AIPROF_HTTPD_H
#define AIPROF_HTTPD_H

#include <stdbool.h>
#include <stddef.h>
#include "strbuf.h"

#define HTTPD_RING 1024

struct httpd_handlers {
	bool (*ready)(void *ctx, char *why, size_t whylen);
	void (*metrics)(void *ctx, struct strbuf *b);
	void (*snapshot)(void *ctx, struct strbuf *b);    /* newline-separated JSON messages */
	void (*log)(void *ctx, int level, const char *msg);
	void *ctx;
};

struct httpd;

/* addr: ":8080", "127.0.0.1:8080", "[::1]:0" (port 0: any free port). Returns 0, -EINVAL
 * (bad address), -EADDRINUSE or -EIO (cannot listen), -ENOMEM. */
int httpd__new(const char *addr, const struct httpd_handlers *h, struct httpd **ret);
int httpd__port(struct httpd *h);                /* the port listened on */
int httpd__start(struct httpd *h);               /* the service thread */
/* Queues a message for every websocket client. Thread-safe. */
void httpd__broadcast(struct httpd *h, const char *json, size_t len);
void httpd__free(struct httpd *h);               /* stops; NULL-safe */

#endif
