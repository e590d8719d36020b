/* SPDX-License-Identifier: MIT */
/* Lookups over a recorded target: its threads' host tids, its kernels' names. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "elfsym.h"
#include "procsyms.h"
#include "profile.h"

uint32_t target_host_tid(const struct target *t, uint32_t ns_tid)
{
	for (size_t i = 0; i < t->nthreads; i++)
		if (t->threads[i].ns_tid == ns_tid)
			return t->threads[i].host_tid ? t->threads[i].host_tid : ns_tid;
	return ns_tid;
}

/* ---- kernel names from host stubs, cached per (pid, address) ------------------------- */

struct kname {
	pid_t pid;
	uint64_t addr;
	char *name;
};

static struct kname *kcache;
static size_t kcache_cap, kcache_n;

static size_t khash(pid_t pid, uint64_t addr)
{
	uint64_t h = (addr ^ ((uint64_t)pid << 32)) * 0x9e3779b97f4a7c15ULL;

	return (size_t)(h >> 17);
}

static const char *kcache_get(pid_t pid, uint64_t addr)
{
	if (!kcache_cap)
		return NULL;
	for (size_t i = khash(pid, addr) & (kcache_cap - 1);; i = (i + 1) & (kcache_cap - 1)) {
		if (!kcache[i].name)
			return NULL;
		if (kcache[i].pid == pid && kcache[i].addr == addr)
			return kcache[i].name;
	}
}

static void kcache_put(pid_t pid, uint64_t addr, char *name)
{
	if ((kcache_n + 1) * 2 > kcache_cap) {
		size_t ncap = kcache_cap ? kcache_cap * 2 : 256;
		struct kname *nv = calloc(ncap, sizeof(*nv));

		if (!nv) {
			free(name);
			return;
		}
		for (size_t i = 0; i < kcache_cap; i++) {
			if (!kcache[i].name)
				continue;
			for (size_t j = khash(kcache[i].pid, kcache[i].addr) & (ncap - 1);;
			     j = (j + 1) & (ncap - 1)) {
				if (!nv[j].name) {
					nv[j] = kcache[i];
					break;
				}
			}
		}
		free(kcache);
		kcache = nv;
		kcache_cap = ncap;
	}
	for (size_t i = khash(pid, addr) & (kcache_cap - 1);; i = (i + 1) & (kcache_cap - 1)) {
		if (!kcache[i].name) {
			kcache[i].pid = pid;
			kcache[i].addr = addr;
			kcache[i].name = name;
			kcache_n++;
			return;
		}
	}
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
		kcache_put(t->pid, e->u.launch.func, copy);
		return copy;
	}
}
