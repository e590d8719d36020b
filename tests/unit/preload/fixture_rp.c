/* SPDX-License-Identifier: MIT */
/* libfixture_runpath.so / libfixture_rpath.so: dlopen() a bare name that only their
 * DT_RUNPATH / DT_RPATH ($ORIGIN/rp) can find, through a GOT slot libaiprof hooks. */
#include <dlfcn.h>

void *fixture_rp_open(const char *name)
{
	void *h = dlopen(name, RTLD_NOW | RTLD_LOCAL);

	/* not a tail call: the loader must see this module as the caller */
	__asm__ volatile("" ::: "memory");
	return h;
}
