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
 * leader__decide() is the pure part (tests/unit/test_kube_leader.c).
 */
#ifndef AIPROF_LEADER_H
#define AIPROF_LEADER_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include "kubeconfig.h"

struct leader_config {
	const struct kube_config *kube;
	const char *namespace;
	const char *name;               /* the Lease's name */
	const char *identity;           /* this candidate */
	uint64_t lease_duration_ns;     /* 15 s */
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

struct leader;

int leader__new(const struct leader_config *cfg, struct leader **ret);
int leader__start(struct leader *l);           /* the election thread */
bool leader__is_leader(struct leader *l);
bool leader__lost(struct leader *l);           /* was leader, could not renew in time */
/* Stops the thread; releases the lease if held. NULL-safe. */
void leader__free(struct leader *l);

#endif
