/* SPDX-License-Identifier: MIT */
/*
 * libaiprof.so is loaded into processes we did not build: it must load wherever they run,
 * down to glibc 2.17 (manylinux2014, the floor PyTorch's wheels are built for), whatever
 * glibc built it. A library built against glibc 2.34 or later binds dlopen, pthread_create
 * and others to their GLIBC_2.34 versions (the ones that moved from libdl and libpthread into
 * libc), which an older loader refuses ("version `GLIBC_2.34' not found"). So every libc
 * function this library calls is bound here to the oldest version x86-64 glibc exports it
 * under, the one every glibc since has kept. fstat (2.33) and memfd_create (2.27) have no
 * older version: lib.c calls them through syscall(2). Before glibc 2.34 dlopen, dlsym and
 * pthread_create live in libdl.so.2 and libpthread.so.0, which libaiprof.so does not name
 * (from 2.34 on they are empty stubs that minimal images leave out): it loads into such a
 * process when the process has loaded them itself (anything that uses threads or dlopen
 * has); one that has neither is refused by its loader ("undefined symbol"), and
 * `--method auto` records it with uprobes instead. tests/integration/test_glibc.py reads the highest version the library needs
 * and fails above GLIBC_2.17.
 *
 * Force-included into every source of injector/preload/ (module.mk).
 */
#ifndef AIPROF_GLIBC_COMPAT_H
#define AIPROF_GLIBC_COMPAT_H

#include <features.h>           /* __GLIBC__ */

#if defined(__x86_64__) && defined(__GLIBC__)
__asm__(".symver dlopen,dlopen@GLIBC_2.2.5");
__asm__(".symver dlclose,dlclose@GLIBC_2.2.5");
__asm__(".symver dlsym,dlsym@GLIBC_2.2.5");
__asm__(".symver dlvsym,dlvsym@GLIBC_2.2.5");
__asm__(".symver dlerror,dlerror@GLIBC_2.2.5");
__asm__(".symver dlinfo,dlinfo@GLIBC_2.3.3");
__asm__(".symver dladdr1,dladdr1@GLIBC_2.3.3");
__asm__(".symver pthread_create,pthread_create@GLIBC_2.2.5");
__asm__(".symver pthread_mutex_trylock,pthread_mutex_trylock@GLIBC_2.2.5");
__asm__(".symver pthread_attr_getstack,pthread_attr_getstack@GLIBC_2.2.5");
__asm__(".symver pthread_attr_setstacksize,pthread_attr_setstacksize@GLIBC_2.2.5");
__asm__(".symver pthread_getattr_np,pthread_getattr_np@GLIBC_2.2.5");
__asm__(".symver pthread_sigmask,pthread_sigmask@GLIBC_2.2.5");
__asm__(".symver pthread_setname_np,pthread_setname_np@GLIBC_2.12");
#endif

#endif
