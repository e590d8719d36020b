/* SPDX-License-Identifier: MIT */
/*
 * A session is the injector's side of one target process's ring: found through
 * /proc/PID/fd, mapped from outside, driven by the control words in its header.
 */
#ifndef AIPROF_SESSION_H
#define AIPROF_SESSION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include "event.h"
#include "model/event_store.h"

struct session;

/*
 * Finds and maps the ring of the library loaded in pid, waiting up to wait_ns for the
 * library's constructor to create it. -ENOENT if there is none, -EPROTO if its
 * version does not match this injector.
 */
int session__open(pid_t pid, uint64_t wait_ns, struct session **ret);
void session__free(struct session *s);   /* stops recording if still on; NULL-safe */
/*
 * Has pid a live copy of the library: a ring of its own (not one inherited across fork(),
 * whose copy went dormant in the child)? Looks once, without waiting.
 */
bool session__live(pid_t pid);

/* Discards stale events, then turns recording on for `collectors` (AIPROF_COLLECT_*). */
int session__start(struct session *s, uint32_t collectors);
/* Keeps the library recording (it idles itself when heartbeats stop for 5 s). */
void session__heartbeat(struct session *s);
/* Moves committed events into the store; returns how many. */
size_t session__drain(struct session *s, struct event_store *store);
/* The process exec'd: the library behind the ring went with the old program, so
 * session__stop() does not wait for its answer. */
void session__orphan(struct session *s);
/* Turns recording off and drains what producers were still writing. */
void session__stop(struct session *s, struct event_store *store);
/*
 * After the last drain: tells the library the window is over, so that its control thread
 * exits and its ring's fd is closed (nothing of ours is left running in the process), and
 * waits up to 500 ms for it to say so. 0 when it did, -ETIMEDOUT, -ESRCH when the process
 * is gone or exec'd, -EALREADY for a copy LD_PRELOAD loaded (it stays live). The session reads no more events after this.
 */
int session__release(struct session *s);

const struct aiprof_ring_hdr *session__hdr(const struct session *s);
/* The host tid of the library's control thread, waiting up to wait_ns for it to start;
 * 0 if it did not say. */
pid_t session__ctl_tid(struct session *s, uint64_t wait_ns);

#endif
