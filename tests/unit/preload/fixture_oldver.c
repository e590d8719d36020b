/* SPDX-License-Identifier: MIT */
/* libfixture_oldver.so: binds dlopen@GLIBC_2.2.5 (as binaries built against glibc < 2.34
 * do), lazily: libaiprof must see that this version is the function it wraps. */
#include <dlfcn.h>

void *fixture_old_dlopen_impl(const char *name, int mode) __asm__("dlopen");
__asm__(".symver dlopen, dlopen@GLIBC_2.2.5");

void *fixture_oldver_open(const char *name)
{
	void *h = fixture_old_dlopen_impl(name, RTLD_NOW | RTLD_LOCAL);

	__asm__ volatile("" ::: "memory");
	return h;
}
