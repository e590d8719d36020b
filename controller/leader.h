/* SPDX-License-Identifier: MIT */
/*
 * Leader election on a coordination.k8s.io/v1 Lease, as client-go does it: a candidate takes
 * the lease when it is free or its holder has not renewed it for leaseDurationSeconds (timed
 * on the candidate's own clock from when it last saw the record change, so clocks need not
 * agree), the leader renews every retry period, and a leader that cannot renew within the
 * renew deadline steps down. Every write carries the resourceVersion it read, so two
 * candidates never both win. On shutdown the leader releases the lease (holder emptied) so a
 * standby takes over at once.
 *
 * Fencing: the leader may act until the start of its last successful renewal round plus the
 * renew deadline, on its own monotonic clock (leader__may_act(): the time runs out by itself,
 * whatever the election thread is doing). A candidate takes the lease no sooner than
 * leaseDurationSeconds after it saw that renewal, which began before it could be seen; so
 * with renew deadline + LEADER_MARGIN_NS <= lease duration (leader__check_timing()) the old
 * leader has stopped acting at least LEADER_MARGIN_NS before a new one can begin. Every
 * request of a round has the time left to that deadline as its timeout, so a slow or hung API
 * server cannot stretch a round past it; leader__fence_writes() stops every other write of
 * the process at the same instant (kube_client__set_write_gate()).
 *
 * leader__decide(), leader__check_timing() and leader__round_deadline_ns() are the pure part
 * (tests/unit/test_kube_leader.c).
 */
#ifndef AIPROF_LEADER_H
#define AIPROF_LEADER_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "kubeconfig.h"

/* How long before a new leader can begin the old one has stopped acting, at the least. */
#define LEADER_MARGIN_NS 1000000000ULL

struct leader_config {
	const struct kube_config *kube;
	const char *namespace;
	const char *name;               /* the Lease's name */
	const char *identity;           /* this candidate */
	uint64_t lease_duration_ns;     /* 15 s; whole seconds (leaseDurationSeconds) */
	uint64_t renew_deadline_ns;     /* 10 s */
	uint64_t retry_period_ns;       /* 2 s */
	void (*log)(void *ctx, int level, const char *msg);
	void *ctx;
};

/* The lease as read. */
struct lease_record {
	char holder[256];
	int64_t duration_s;
	char renew_time[40];            /* as the server has it: changes mean the holder lives */
	int64_t transitions;
};

enum leader_decision {
	LEADER_WAIT,                    /* someone else holds a live lease */
	LEADER_RENEW,                   /* ours: renew it */
	LEADER_TAKE,                    /* free or expired: take it (transitions + 1) */
};

/*
 * observed_ns: monotonic time this candidate last saw the record change (the caller updates it
 * whenever holder or renew_time differ from what it saw before); now_ns: monotonic now.
 */
enum leader_decision leader__decide(const struct lease_record *r, const char *identity,
				    uint64_t observed_ns, uint64_t now_ns);

/*
 * Refuses timings under which a leader could still act once another may take the lease:
 * the lease duration must be whole seconds (the Lease stores leaseDurationSeconds), the renew
 * deadline end LEADER_MARGIN_NS before it, and leave room for two renewal attempts (renew
 * deadline >= 2 x retry period). Returns 0, or -EINVAL with why in msg (naming the flags).
 */
int leader__check_timing(const struct leader_config *cfg, char *msg, size_t msglen);

/*
 * When the requests of a round that began at round_start_ns must be over (monotonic ns): for
 * the leader, the end of its right to act (act_until_ns), for a candidate the round's own
 * renew deadline (a take that comes back later than that is worth nothing).
 */
uint64_t leader__round_deadline_ns(const struct leader_config *cfg, uint64_t round_start_ns,
				   bool leading, uint64_t act_until_ns);

struct leader;

int leader__new(const struct leader_config *cfg, struct leader **ret);
int leader__start(struct leader *l);           /* the election thread */
/* Whether this process may act as the leader now: cheap, any thread (monotonic clock and an
 * atomic). Turns false at the renew deadline by itself. leader__is_leader() is the same. */
bool leader__may_act(struct leader *l);
bool leader__is_leader(struct leader *l);
/* How much longer it may act, ns; 0: not at all. */
uint64_t leader__act_left_ns(struct leader *l);
bool leader__lost(struct leader *l);           /* was leader, could not renew in time */
/* From now until leader__free(), every write of every kube client of the process but the
 * lease's own needs leader__may_act() (kube_client__set_write_gate()). Call it before the
 * threads that write start. */
void leader__fence_writes(struct leader *l);
/* Stops the thread; releases the lease while it may still act; lifts the write fence.
 * NULL-safe. */
void leader__free(struct leader *l);

#endif
