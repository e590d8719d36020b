/* SPDX-License-Identifier: MIT */
/* Lookups over a recorded target: its threads' host tids, its kernels' names. */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "elfsym.h"
#include "procsyms.h"
#include "u64map.h"
#include "profile.h"

uint32_t target_host_tid(const struct target *t, uint32_t ns_tid)
{
	for (size_t i = 0; i < t->nthreads; i++)
		if (t->threads[i].ns_tid == ns_tid)
			return t->threads[i].host_tid ? t->threads[i].host_tid : ns_tid;
	return ns_tid;
}

/* ---- kernel names from host stubs, cached per (pid, address) ------------------------- */

/* Names by address, each address's names chained across processes (pid). */
struct kname {
	pid_t pid;
	uint64_t addr;
	char *name;
	size_t next;                  /* index + 1 of the next name at this address; 0: none */
};

static struct kname *knames;
static size_t nknames, capknames;
static struct u64map kheads;      /* address -> index + 1 of its latest name */

static const char *kcache_get(pid_t pid, uint64_t addr)
{
	uint64_t i;

	if (!u64map_get(&kheads, addr, &i))
		return NULL;
	for (; i; i = knames[i - 1].next)
		if (knames[i - 1].pid == pid)
			return knames[i - 1].name;
	return NULL;
}

/* Keeps name (taken over, freed on failure); 0 or -ENOMEM. */
static int kcache_put(pid_t pid, uint64_t addr, char *name)
{
	uint64_t head = 0;

	if (nknames == capknames) {
		size_t ncap = capknames ? capknames * 2 : 256;
		struct kname *nv = realloc(knames, ncap * sizeof(*nv));

		if (!nv)
			goto fail;
		knames = nv;
		capknames = ncap;
	}
	(void)u64map_get(&kheads, addr, &head);
	if (u64map_put(&kheads, addr, nknames + 1) < 0)
		goto fail;
	knames[nknames++] = (struct kname){ pid, addr, name, (size_t)head };
	return 0;
fail:
	free(name);
	return -ENOMEM;
}

const char *launch_kernel_name(const struct target *t, const struct aiprof_event *e)
{
	const char *s;
	char buf[512];
	char *plus;

	if (e->u.launch.name_id) {
		s = event_store__string(&t->store, e->u.launch.name_id);
		if (s)
			return s;
	}
	if (e->api != AIPROF_API_cudaLaunchKernel || !t->syms)
		return "[unknown]";
	s = kcache_get(t->pid, e->u.launch.func);
	if (s)
		return s;
	if (proc_syms__symbolize(t->syms, e->u.launch.func, buf, sizeof(buf)) < 0)
		snprintf(buf, sizeof(buf), "[unknown 0x%llx]", (unsigned long long)e->u.launch.func);
	plus = strstr(buf, "+0x");
	if (e->flags & AIPROF_EV_F_LAUNCH_CALLER) {
		/* an address inside the stub that launched by handle: the stub names it */
		char *k;

		if (plus)
			*plus = 0;
		k = device_stub_kernel(buf);
		if (k) {
			snprintf(buf, sizeof(buf), "%s", k);
			free(k);
		}
	} else if (plus && strcmp(plus, "+0x0") == 0) {
		/* a host stub is the start of its function: drop the "+0x0" */
		*plus = 0;
	}
	{
		char *copy = strdup(buf);

		if (!copy)
			return "[unknown]";
		return kcache_put(t->pid, e->u.launch.func, copy) < 0 ? "[unknown]" : copy;
	}
}

/* A launch whose name comes from its address (not an id the library sent), not yet known. */
static bool needs_name(const struct target *t, const struct aiprof_event *e)
{
	if (e->type != AIPROF_EV_CUDA_LAUNCH || e->api != AIPROF_API_cudaLaunchKernel)
		return false;
	if (e->u.launch.name_id && event_store__string(&t->store, e->u.launch.name_id))
		return false;
	return !kcache_get(t->pid, e->u.launch.func);
}

static void name_launch(struct target *t, const struct aiprof_event *e, bool *refreshed)
{
	struct proc_sym s;

	if (!needs_name(t, e))
		return;
	/* in none of the maps we read: a library loaded since then, read them again once */
	if (proc_syms__symbolize_info(t->syms, e->u.launch.func, &s) == -ENOENT && !*refreshed) {
		*refreshed = true;
		(void)proc_syms__refresh(t->syms);
	}
	(void)launch_kernel_name(t, e);
}

void target_name_launches(struct target *t)
{
	bool refreshed = false;

	if (!t->syms && proc_syms__new(t->pid, &t->syms) < 0) {
		t->syms = NULL;
		return;
	}
	for (; t->named_events < t->store.n; t->named_events++)
		name_launch(t, &t->store.v[t->named_events], &refreshed);
	for (; t->named_totals < t->store.over.n; t->named_totals++) {
		const struct event_total *o = &t->store.over.v[t->named_totals];
		struct aiprof_event e = { .type = o->type, .api = o->api, .flags = o->flags };

		if (o->type != AIPROF_EV_CUDA_LAUNCH || (o->key & EVENT_TOTAL_NAMED))
			continue;
		e.u.launch.func = o->key;
		name_launch(t, &e, &refreshed);
	}
}
