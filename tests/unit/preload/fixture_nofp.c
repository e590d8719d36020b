/* SPDX-License-Identifier: MIT */
/*
 * libfixture_nofp.so: callers built without frame pointers (-fomit-frame-pointer), the
 * way Debian builds CPython, glibc and libtorch. nofp_inner() also keeps a value that is
 * no frame in %rbp across its call, as optimised code using %rbp as a general register
 * does, so a frame-pointer walk from the launch ends there; the CFI tables still lead
 * through nofp_inner and nofp_outer to their callers.
 */
#include "fixture.h"

void *volatile nofp_ra_inner, *volatile nofp_ra_outer;

__attribute__((noinline)) int nofp_inner(const void *func, int n)
{
	int r = 0;

	nofp_ra_inner = __builtin_return_address(0);
	for (int i = 0; i < n; i++) {
		/* %rbp: a small number, far outside any stack (restored at the return) */
		__asm__ volatile("mov $0x4321, %%rbp" ::: "rbp");
		r |= caller_launch(func, 1, 32);
	}
	return r;
}

__attribute__((noinline)) int nofp_outer(const void *func, int n)
{
	int r;

	nofp_ra_outer = __builtin_return_address(0);
	r = nofp_inner(func, n);
	__asm__ volatile("" ::: "memory");
	return r + 1;
}
