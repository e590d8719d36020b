/* SPDX-License-Identifier: MIT */
/*
 * common/elfsym.c and common/procsyms.c against real files: this test's own executable
 * (built with a .symtab), the system's libc.so.6, hand-made ELF headers, a statically linked
 * program built on the spot when gcc and libc.a are there, and live processes (this one, a
 * fork of it, the static program).
 */
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <setjmp.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>
#include "elfsym.h"
#include "procmaps.h"
#include "procsyms.h"

extern char **environ;

/* Functions whose addresses the tests symbolize. Called through a volatile pointer so they
 * are kept out of line. */
__attribute__((noinline, used)) static int probe_target(int x)
{
	return x * 3 + (x >> 2) + 7;
}

__attribute__((noinline, used)) int elfsym_test_global(int x);
int elfsym_test_global(int x)
{
	return probe_target(x) - 1;
}

/* A C symbol with a C++ name, to see demangling end to end. */
int cxx_named(int x) __asm__("_ZN6aiprof4demoEi");
__attribute__((noinline, used)) int cxx_named(int x)
{
	return x ^ 0x5a;
}

static int (*volatile keep[])(int) = { probe_target, elfsym_test_global, cxx_named };

static uint64_t addr_of(const void *p)
{
	return (uint64_t)(uintptr_t)p;
}

static void *libc_handle(void)
{
	/* dlsym on libc's own handle: under ASan, RTLD_DEFAULT would find the sanitizer's
	 * interceptors of dlopen/pthread_create first. */
	void *h = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);

	assert_non_null(h);
	return h;
}

/* The load bias of the module containing addr in this process. */
static uint64_t self_bias(const struct elf_file *f, uint64_t addr)
{
	struct maps *m = NULL;
	const struct maps_entry *e;
	uint64_t bias = 0;

	assert_int_equal(maps__read(getpid(), &m), 0);
	e = maps__find_addr(m, addr);
	assert_non_null(e);
	assert_int_equal(elf_file__load_bias(f, e, &bias), 0);
	maps__free(m);
	return bias;
}

static void test_open_self(void **state)
{
	struct elf_file *f = NULL;
	const struct elf_info *info;
	uint64_t vaddr = 0, size = 0, bias;
	const char *name = NULL;
	uint64_t off = 99;
	int fd;

	assert_int_equal(elf_file__open("/proc/self/exe", &f), 0);
	info = elf_file__info(f);
	assert_int_equal(info->elf_class, ELFCLASS64);
	assert_int_equal(info->machine, EM_X86_64);
	assert_true(elf_info__is_x86_64(info));
	assert_true(info->type == ET_DYN || info->type == ET_EXEC);
	assert_true(info->has_interp);
	assert_true(info->has_dynamic);
	assert_non_null(info->interp);
	assert_non_null(strstr(info->interp, "ld-linux"));
	assert_true(info->has_symtab);
	assert_true(strlen(info->build_id) >= 16);
	assert_true(info->n_loads >= 2);
	for (size_t i = 0; i < info->n_loads; i++)
		assert_true(info->loads[i].memsz >= info->loads[i].filesz);

	bias = self_bias(f, addr_of(probe_target));

	/* A local (static) function: only in .symtab. */
	assert_int_equal(elf_file__find_symbol(f, "probe_target", &vaddr, &size), 0);
	assert_true(bias + vaddr == addr_of(probe_target));
	assert_true(size > 4);
	assert_int_equal(elf_file__find_symbol(f, "elfsym_test_global", &vaddr, NULL), 0);
	assert_true(bias + vaddr == addr_of(elfsym_test_global));

	assert_int_equal(elf_file__symbolize(f, addr_of(probe_target) - bias, &name, &off), 0);
	assert_string_equal(name, "probe_target");
	assert_int_equal(off, 0);
	assert_int_equal(elf_file__symbolize(f, addr_of(probe_target) - bias + 3, &name, &off), 0);
	assert_string_equal(name, "probe_target");
	assert_int_equal(off, 3);
	assert_int_equal(elf_file__symbolize(f, addr_of(cxx_named) - bias, &name, &off), 0);
	assert_string_equal(name, "_ZN6aiprof4demoEi");
	assert_int_equal(elf_file__symbolize(f, 0, &name, &off), -ENOENT);

	assert_int_equal(elf_file__find_symbol(f, "no_such_symbol_anywhere", &vaddr, NULL), -ENOENT);
	assert_int_equal(elf_file__find_symbol(f, "", &vaddr, NULL), -EINVAL);
	assert_int_equal(elf_file__find_symbol(f, "probe_target@", &vaddr, NULL), -EINVAL);
	elf_file__free(f);
	elf_file__free(NULL);

	/* open_fd works on a dup: the caller's fd stays open and usable. */
	fd = open("/proc/self/exe", O_RDONLY | O_CLOEXEC);
	assert_true(fd >= 0);
	f = NULL;
	assert_int_equal(elf_file__open_fd(fd, &f), 0);
	assert_int_equal(elf_file__find_symbol(f, "probe_target", NULL, NULL), 0);
	elf_file__free(f);
	assert_true(fcntl(fd, F_GETFD) >= 0);
	assert_int_equal(lseek(fd, 0, SEEK_CUR), 0);
	close(fd);
}

static void test_libc_versions(void **state)
{
	struct maps *m = NULL;
	struct maps_module mod;
	struct elf_file *f = NULL;
	void *h = libc_handle();
	uint64_t bias = 0, b2, vaddr, size, memcpy_default, memcpy_old;
	const char *name;
	uint64_t off;
	static const char *const syms[] = { "dlopen", "pthread_create", "dlsym", "malloc" };

	assert_int_equal(maps__read(getpid(), &m), 0);
	assert_int_equal(maps__find_module(m, "libc.so.6", &mod), 0);
	assert_int_equal(elf_file__open(mod.path, &f), 0);
	assert_true(elf_info__is_x86_64(elf_file__info(f)));
	assert_true(elf_file__info(f)->has_dynsym);
	assert_int_equal(elf_file__load_bias(f, &m->v[mod.first], &bias), 0);
	assert_true(bias == mod.load_start);  /* an ET_DYN whose first PT_LOAD is at 0 */
	/* Every mapping of it agrees on the bias. */
	for (size_t i = mod.first; i <= mod.last; i++)
		if (maps_entry__same_file(&m->v[mod.first], &m->v[i]) &&
		    elf_file__load_bias(f, &m->v[i], &b2) == 0)
			assert_true(b2 == bias);

	for (size_t i = 0; i < sizeof(syms) / sizeof(syms[0]); i++) {
		void *want = dlsym(h, syms[i]);

		assert_non_null(want);
		assert_int_equal(elf_file__find_symbol(f, syms[i], &vaddr, &size), 0);
		if (bias + vaddr != addr_of(want))
			fail_msg("%s: computed %#llx, dlsym says %p", syms[i],
				 (unsigned long long)(bias + vaddr), want);
		assert_true(size > 0);
		assert_int_equal(elf_file__symbolize(f, vaddr, &name, &off), 0);
		assert_string_equal(name, syms[i]);
		assert_int_equal(off, 0);
	}

	/* Both versions of pthread_create can be asked for by name. */
	assert_int_equal(elf_file__find_symbol(f, "pthread_create@@GLIBC_2.34", &vaddr, NULL), 0);
	assert_int_equal(elf_file__find_symbol(f, "pthread_create@GLIBC_2.2.5", &vaddr, NULL), 0);
	assert_int_equal(elf_file__find_symbol(f, "pthread_create@GLIBC_9.99", &vaddr, NULL), -ENOENT);

	/* memcpy: the default version is an IFUNC, the 2.2.5 one a plain function. */
	assert_int_equal(elf_file__find_symbol(f, "memcpy", &memcpy_default, NULL), ELF_SYM_IFUNC);
	assert_int_equal(elf_file__find_symbol(f, "memcpy@GLIBC_2.14", &vaddr, NULL), ELF_SYM_IFUNC);
	assert_true(vaddr == memcpy_default);
	assert_int_equal(elf_file__find_symbol(f, "memcpy@GLIBC_2.2.5", &memcpy_old, NULL), 0);
	assert_true(memcpy_old != memcpy_default);

	/* Something that is in the middle of a function. */
	assert_int_equal(elf_file__find_symbol(f, "dlopen", &vaddr, &size), 0);
	assert_int_equal(elf_file__symbolize(f, vaddr + size - 1, &name, &off), 0);
	assert_string_equal(name, "dlopen");
	assert_true(off == size - 1);

	elf_file__free(f);
	maps__free(m);
	dlclose(h);
}

static void test_demangle(void **state)
{
	char *s;

	s = symbol_demangle("_ZN3foo3barEv");
	assert_non_null(s);
	assert_string_equal(s, "foo::bar()");
	free(s);
	s = symbol_demangle("_ZN3foo3barEv@@GLIBCXX_3.4");
	assert_non_null(s);
	assert_string_equal(s, "foo::bar()@@GLIBCXX_3.4");
	free(s);
	/* a kernel nvcc gave internal linkage, as CUPTI names it (NCCL's one-rank reduction) */
	s = symbol_demangle("__nv_static_32__b4148644_10_onerank_cu_fdf47990__ZN43_GLOBAL__N__"
			    "b4148644_10_onerank_cu_fdf4799013oneRankReduceI13FuncPreMulSumIfEEEvPvS3_mmb");
	assert_non_null(s);
	assert_string_equal(s, "void (anonymous namespace)::oneRankReduce<FuncPreMulSum<float> >"
			    "(void*, void*, unsigned long, unsigned long, bool)");
	free(s);
	assert_null(symbol_demangle("__nv_static_32__short_"));
	assert_null(symbol_demangle("__nv_static_99999999999999999999999__x"));
	assert_null(symbol_demangle("main"));
	/* nvcc's host stub of a kernel, as the symboliser prints it and as the symbol table has it */
	s = device_stub_kernel("__device_stub__Z16scale_add_kernelPfPKffi(float*, float const*, float, int)");
	assert_non_null(s);
	assert_string_equal(s, "scale_add_kernel(float*, float const*, float, int)");
	free(s);
	s = device_stub_kernel("_Z41__device_stub__Z16scale_add_kernelPfPKffiPfPKffi");
	assert_non_null(s);
	assert_string_equal(s, "scale_add_kernel(float*, float const*, float, int)");
	free(s);
	assert_null(device_stub_kernel("relu_fwd_kernel"));
	assert_null(device_stub_kernel("__device_stub__"));
	assert_null(device_stub_kernel("__device_stub__Zgarbage(int)"));
	assert_null(device_stub_kernel(NULL));
	assert_null(symbol_demangle("_Z"));
	assert_null(symbol_demangle("_Zx!garbage"));
	assert_null(symbol_demangle(NULL));
}

/* A minimal static x86_64 executable: one PT_LOAD and a build-id note, no sections. */
struct mini_elf64 {
	Elf64_Ehdr eh;
	Elf64_Phdr ph[2];
	Elf64_Nhdr nh;
	char name[4];
	unsigned char desc[20];
	unsigned char code[12];
};

static void mini_elf64_init(struct mini_elf64 *e)
{
	memset(e, 0, sizeof(*e));
	memcpy(e->eh.e_ident, ELFMAG, SELFMAG);
	e->eh.e_ident[EI_CLASS] = ELFCLASS64;
	e->eh.e_ident[EI_DATA] = ELFDATA2LSB;
	e->eh.e_ident[EI_VERSION] = EV_CURRENT;
	e->eh.e_type = ET_EXEC;
	e->eh.e_machine = EM_X86_64;
	e->eh.e_version = EV_CURRENT;
	e->eh.e_entry = 0x400000 + offsetof(struct mini_elf64, code);
	e->eh.e_phoff = offsetof(struct mini_elf64, ph);
	e->eh.e_ehsize = sizeof(Elf64_Ehdr);
	e->eh.e_phentsize = sizeof(Elf64_Phdr);
	e->eh.e_phnum = 2;
	e->ph[0] = (Elf64_Phdr) {
		.p_type = PT_LOAD, .p_flags = PF_R | PF_X, .p_offset = 0, .p_vaddr = 0x400000,
		.p_paddr = 0x400000, .p_filesz = sizeof(*e), .p_memsz = sizeof(*e),
		.p_align = 0x1000,
	};
	e->ph[1] = (Elf64_Phdr) {
		.p_type = PT_NOTE, .p_flags = PF_R, .p_offset = offsetof(struct mini_elf64, nh),
		.p_vaddr = 0x400000 + offsetof(struct mini_elf64, nh),
		.p_filesz = sizeof(e->nh) + sizeof(e->name) + sizeof(e->desc),
		.p_memsz = sizeof(e->nh) + sizeof(e->name) + sizeof(e->desc), .p_align = 4,
	};
	e->nh = (Elf64_Nhdr) { .n_namesz = 4, .n_descsz = 20, .n_type = NT_GNU_BUILD_ID };
	memcpy(e->name, "GNU", 4);
	for (unsigned i = 0; i < sizeof(e->desc); i++)
		e->desc[i] = (unsigned char)(0xa0 + i);
}

static void test_handmade_static(void **state)
{
	struct mini_elf64 img;
	struct elf_file *f = NULL;
	const struct elf_info *info;
	struct maps_entry e = { .start = 0x400000, .end = 0x401000, .prot = PROT_READ | PROT_EXEC };
	uint64_t bias = 1;

	mini_elf64_init(&img);
	assert_int_equal(elf_file__open_mem(&img, sizeof(img), &f), 0);
	info = elf_file__info(f);
	assert_true(elf_info__is_x86_64(info));
	assert_int_equal(info->type, ET_EXEC);
	assert_false(info->has_interp);
	assert_false(info->has_dynamic);
	assert_null(info->interp);
	assert_false(info->has_dynsym);
	assert_false(info->has_symtab);
	assert_string_equal(info->build_id, "a0a1a2a3a4a5a6a7a8a9aaabacadaeafb0b1b2b3");
	assert_int_equal(info->n_loads, 1);
	assert_true(info->loads[0].vaddr == 0x400000);
	assert_int_equal(info->loads[0].prot, PROT_READ | PROT_EXEC);

	assert_int_equal(elf_file__load_bias(f, &e, &bias), 0);
	assert_true(bias == 0);
	e.start = 0x7f0000400000ull;
	assert_int_equal(elf_file__load_bias(f, &e, &bias), 0);
	assert_true(bias == 0x7f0000000000ull);
	e.offset = 0x10000;  /* no PT_LOAD there */
	assert_int_equal(elf_file__load_bias(f, &e, &bias), -ENOENT);

	assert_int_equal(elf_file__find_symbol(f, "main", NULL, NULL), -ENOENT);
	assert_int_equal(elf_file__symbolize(f, 0x400010, NULL, NULL), -ENOENT);
	elf_file__free(f);

	/* Program headers pointing past the end: opens, reports no segments. */
	img.eh.e_phoff = 0x7fffff00;
	f = NULL;
	assert_int_equal(elf_file__open_mem(&img, sizeof(img), &f), 0);
	assert_int_equal(elf_file__info(f)->n_loads, 0);
	elf_file__free(f);
}

static char tmpdir[] = "/tmp/aiprof-elfsym-XXXXXX";

static int setup_tmpdir(void **state)
{
	return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown_tmpdir(void **state)
{
	char cmd_path[PATH_MAX];
	static const char *const files[] = { "elf32", "static.c", "static", "garbage" };

	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
		snprintf(cmd_path, sizeof(cmd_path), "%s/%s", tmpdir, files[i]);
		unlink(cmd_path);
	}
	rmdir(tmpdir);
	return 0;
}

static void write_file(const char *path, const void *buf, size_t len)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0755);

	assert_true(fd >= 0);
	assert_int_equal(write(fd, buf, len), (ssize_t)len);
	assert_int_equal(close(fd), 0);
}

static void test_elf32_and_garbage(void **state)
{
	Elf32_Ehdr eh = { 0 };
	char path[PATH_MAX];
	struct elf_file *f = NULL;
	const struct elf_info *info;
	static const char text[] = "#!/bin/sh\necho not an elf\n";

	memcpy(eh.e_ident, ELFMAG, SELFMAG);
	eh.e_ident[EI_CLASS] = ELFCLASS32;
	eh.e_ident[EI_DATA] = ELFDATA2LSB;
	eh.e_ident[EI_VERSION] = EV_CURRENT;
	eh.e_type = ET_EXEC;
	eh.e_machine = EM_386;
	eh.e_version = EV_CURRENT;
	eh.e_ehsize = sizeof(eh);
	snprintf(path, sizeof(path), "%s/elf32", tmpdir);
	write_file(path, &eh, sizeof(eh));

	assert_int_equal(elf_file__open(path, &f), 0);
	info = elf_file__info(f);
	assert_int_equal(info->elf_class, ELFCLASS32);
	assert_int_equal(info->machine, EM_386);
	assert_false(elf_info__is_x86_64(info));
	assert_int_equal(info->n_loads, 0);
	assert_string_equal(info->build_id, "");
	elf_file__free(f);

	snprintf(path, sizeof(path), "%s/garbage", tmpdir);
	write_file(path, text, sizeof(text) - 1);
	f = NULL;
	assert_int_equal(elf_file__open(path, &f), -ENOEXEC);
	assert_null(f);
	assert_int_equal(elf_file__open_mem(text, sizeof(text) - 1, &f), -ENOEXEC);
	assert_int_equal(elf_file__open_mem(&eh, 4, &f), -ENOEXEC);  /* truncated header */
	assert_int_equal(elf_file__open_mem(text, 0, &f), -ENOEXEC);
	assert_int_equal(elf_file__open("/nonexistent/libc.so.6", &f), -ENOENT);
	assert_int_equal(elf_file__open("/dev/null", &f), -ENOEXEC);  /* not a regular file */
	assert_int_equal(elf_file__open(tmpdir, &f), -ENOEXEC);
	assert_null(f);
}

static int read_whole(const char *path, unsigned char **ret, size_t *ret_len)
{
	struct stat st;
	unsigned char *buf;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0 || fstat(fd, &st) < 0 || st.st_size <= 0)
		return -1;
	buf = malloc((size_t)st.st_size);
	assert_non_null(buf);
	assert_int_equal(pread(fd, buf, (size_t)st.st_size, 0), st.st_size);
	close(fd);
	*ret = buf;
	*ret_len = (size_t)st.st_size;
	return 0;
}

/* Not fuzzing, but the same idea in every test run (and under ASan): flipped bytes in the
 * headers and tables of a real file must never crash the reader. */
static void test_corrupted_copies(void **state)
{
	unsigned char *orig = NULL, *buf;
	size_t len = 0;
	uint32_t seed = 12345;
	const Elf64_Ehdr *eh;

	assert_int_equal(read_whole("/proc/self/exe", &orig, &len), 0);
	buf = malloc(len);
	assert_non_null(buf);
	eh = (const Elf64_Ehdr *)orig;

	for (int iter = 0; iter < 300; iter++) {
		struct elf_file *f = NULL;
		const char *name;
		uint64_t v, off;

		memcpy(buf, orig, len);
		for (int k = 0; k < 12; k++) {
			size_t pos;

			seed = seed * 1103515245u + 12345u;
			/* Half in the ELF/program headers, half in the section headers. */
			if (k & 1 || eh->e_shoff >= len)
				pos = (seed >> 8) % (len < 4096 ? len : 4096);
			else
				pos = (size_t)eh->e_shoff + (seed >> 8) % (len - (size_t)eh->e_shoff);
			buf[pos] ^= (unsigned char)(1u << ((seed >> 4) & 7));
		}
		if (elf_file__open_mem(buf, len, &f) < 0)
			continue;
		(void)elf_file__find_symbol(f, "probe_target", &v, NULL);
		(void)elf_file__find_symbol(f, "memcpy@GLIBC_2.14", &v, NULL);
		for (uint64_t a = 0; a < 0x8000; a += 0x400)
			(void)elf_file__symbolize(f, a, &name, &off);
		elf_file__free(f);
	}
	free(buf);
	free(orig);
}

/* --- live processes --- */

static pid_t start_child(const char *exe, int *ret_fd)
{
	int p[2];
	pid_t pid;
	char c;

	assert_int_equal(pipe2(p, O_CLOEXEC), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		if (exe) {
			char *argv[] = { (char *)exe, NULL };

			dup2(p[1], 1);
			execve(exe, argv, environ);
			_exit(127);
		}
		if (write(p[1], "x", 1) != 1)
			_exit(1);
		for (;;)
			pause();
	}
	close(p[1]);
	assert_int_equal(read(p[0], &c, 1), 1);  /* it is up, past exec */
	*ret_fd = p[0];
	return pid;
}

static void stop_child(pid_t pid, int fd)
{
	kill(pid, SIGKILL);
	waitpid(pid, NULL, 0);
	close(fd);
}

static void check_glibc_process(pid_t pid)
{
	struct proc_syms *ps = NULL;
	struct proc_target t;
	struct proc_sym s;
	void *h = libc_handle();
	uint64_t addr = 0;
	char buf[256];
	int stack_var = 0;

	assert_int_equal(proc_syms__new(pid, &ps), 0);
	assert_int_equal(proc_syms__target(ps, &t), 0);
	assert_true(t.x86_64);
	assert_int_equal(t.elf_class, ELFCLASS64);
	assert_int_equal(t.machine, EM_X86_64);
	assert_true(t.has_interp);
	assert_false(t.is_static);
	assert_int_equal(t.libc, PROC_LIBC_GLIBC);
	assert_non_null(strstr(t.libc_path, "libc.so.6"));

	/* A fork has our layout: the addresses must be ours. */
	assert_int_equal(proc_syms__find(ps, "libc.so.6", "dlopen", &addr), 0);
	assert_true(addr == addr_of(dlsym(h, "dlopen")));
	assert_int_equal(proc_syms__find(ps, "libc.so.6", "pthread_create", &addr), 0);
	assert_true(addr == addr_of(dlsym(h, "pthread_create")));
	assert_int_equal(proc_syms__find(ps, "libc*", "memcpy", &addr), ELF_SYM_IFUNC);
	assert_int_equal(proc_syms__find(ps, NULL, "elfsym_test_global", &addr), 0);
	assert_true(addr == addr_of(elfsym_test_global));
	assert_int_equal(proc_syms__find(ps, NULL, "probe_target", &addr), 0);
	assert_true(addr == addr_of(probe_target));
	assert_int_equal(proc_syms__find(ps, "libc.so.6", "elfsym_test_global", &addr), -ENOENT);
	assert_int_equal(proc_syms__find(ps, "no-such-lib.so", "dlopen", &addr), -ENOENT);

	assert_true(proc_syms__symbolize(ps, addr_of(probe_target) + 2, buf, sizeof(buf)) > 0);
	assert_string_equal(buf, "probe_target+0x2");
	proc_syms__symbolize(ps, addr_of(cxx_named), buf, sizeof(buf));
	assert_string_equal(buf, "aiprof::demo(int)+0x0");
	proc_syms__symbolize(ps, addr_of(dlsym(h, "dlopen")), buf, sizeof(buf));
	assert_string_equal(buf, "dlopen+0x0");
	proc_syms__symbolize(ps, 0x10, buf, sizeof(buf));
	assert_string_equal(buf, "[unknown]");
	proc_syms__symbolize(ps, addr_of(&stack_var), buf, sizeof(buf));
	assert_memory_equal(buf, "[stack]+0x", 10);
	/* snprintf's contract: the full length comes back, the text is cut. */
	assert_int_equal(proc_syms__symbolize(ps, addr_of(probe_target), buf, 6), 16);
	assert_string_equal(buf, "probe");

	assert_int_equal(proc_syms__symbolize_info(ps, addr_of(probe_target) + 1, &s), 0);
	assert_non_null(s.module);
	assert_non_null(s.build_id);
	assert_true(strlen(s.build_id) >= 16);
	assert_true(s.elf_read);
	assert_string_equal(s.symbol, "probe_target");
	assert_int_equal(s.symbol_offset, 1);
	assert_int_equal(proc_syms__symbolize_info(ps, 0x10, &s), -ENOENT);

	proc_syms__free(ps);
	dlclose(h);
}

static void test_proc_syms_self(void **state)
{
	check_glibc_process(getpid());
}

static void test_proc_syms_fork(void **state)
{
	int fd;
	pid_t pid = start_child(NULL, &fd);

	check_glibc_process(pid);
	stop_child(pid, fd);
}

static void test_proc_syms_refresh(void **state)
{
	struct proc_syms *ps = NULL;
	uint64_t addr = 0;
	void *h, *want;

	assert_int_equal(proc_syms__new(getpid(), &ps), 0);
	if (proc_syms__find(ps, "libresolv.so.2", "ns_parse_ttl", &addr) == 0) {
		proc_syms__free(ps);
		skip();  /* someone loaded it already */
	}
	h = dlopen("libresolv.so.2", RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		proc_syms__free(ps);
		skip();
	}
	want = dlsym(h, "ns_parse_ttl");
	assert_non_null(want);
	assert_int_equal(proc_syms__find(ps, "libresolv.so.2", "ns_parse_ttl", &addr), -ENOENT);
	assert_int_equal(proc_syms__refresh(ps), 0);
	assert_int_equal(proc_syms__find(ps, "libresolv.so.2", "ns_parse_ttl", &addr), 0);
	assert_true(addr == addr_of(want));
	/* Only a hidden (compat) version exists: still found when nothing better is. */
	want = dlvsym(h, "_gethtent", "GLIBC_2.2.5");
	if (want) {
		assert_int_equal(proc_syms__find(ps, "libresolv.so.2", "_gethtent", &addr), 0);
		assert_true(addr == addr_of(want));
	}
	proc_syms__free(ps);
	dlclose(h);

	assert_int_equal(proc_syms__new(INT_MAX, &ps), -ENOENT);
	assert_int_equal(proc_syms__new(0, &ps), -EINVAL);
}

static int run_argv(char *const argv[])
{
	pid_t pid;
	int status;

	if (posix_spawnp(&pid, argv[0], NULL, NULL, argv, environ) != 0)
		return -1;
	if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status))
		return -1;
	return WEXITSTATUS(status);
}

static void test_static_binary(void **state)
{
	static const char src[] =
		"#include <unistd.h>\n"
		"int main(void) { if (write(1, \"x\", 1) != 1) return 1; for (;;) pause(); }\n";
	char src_path[PATH_MAX], exe_path[PATH_MAX];
	struct elf_file *f = NULL;
	const struct elf_info *info;
	struct proc_syms *ps = NULL;
	struct proc_target t;
	const struct maps_entry *e;
	uint64_t addr = 0;
	char buf[128];
	pid_t pid;
	int fd;

	if (access("/usr/lib/x86_64-linux-gnu/libc.a", R_OK) != 0)
		skip();
	snprintf(src_path, sizeof(src_path), "%s/static.c", tmpdir);
	snprintf(exe_path, sizeof(exe_path), "%s/static", tmpdir);
	write_file(src_path, src, sizeof(src) - 1);
	{
		char *argv[] = { "gcc", "-static", "-O1", "-o", exe_path, src_path, NULL };

		if (run_argv(argv) != 0)
			skip();  /* no compiler here: the hand-made ELF test still covers the logic */
	}

	assert_int_equal(elf_file__open(exe_path, &f), 0);
	info = elf_file__info(f);
	assert_true(elf_info__is_x86_64(info));
	assert_false(info->has_interp);
	assert_null(info->interp);
	assert_true(info->has_symtab);
	elf_file__free(f);

	pid = start_child(exe_path, &fd);
	assert_int_equal(proc_syms__new(pid, &ps), 0);
	assert_int_equal(proc_syms__target(ps, &t), 0);
	assert_true(t.x86_64);
	assert_false(t.has_interp);
	assert_true(t.is_static);
	assert_int_equal(t.libc, PROC_LIBC_NONE);
	assert_null(t.libc_path);
	assert_int_equal(proc_syms__find(ps, "libc.so.6", "dlopen", &addr), -ENOENT);
	/* Its own symbols still resolve (from its .symtab), in its own executable mapping. */
	assert_int_equal(proc_syms__find(ps, NULL, "main", &addr), 0);
	e = maps__find_addr(proc_syms__maps(ps), addr);
	assert_non_null(e);
	assert_true(e->prot & PROT_EXEC);
	proc_syms__symbolize(ps, addr, buf, sizeof(buf));
	assert_string_equal(buf, "main+0x0");
	proc_syms__free(ps);
	stop_child(pid, fd);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_open_self),
		cmocka_unit_test(test_libc_versions),
		cmocka_unit_test(test_demangle),
		cmocka_unit_test(test_handmade_static),
		cmocka_unit_test(test_elf32_and_garbage),
		cmocka_unit_test(test_corrupted_copies),
		cmocka_unit_test(test_proc_syms_self),
		cmocka_unit_test(test_proc_syms_fork),
		cmocka_unit_test(test_proc_syms_refresh),
		cmocka_unit_test(test_static_binary),
	};
	(void)keep;
	return cmocka_run_group_tests(tests, setup_tmpdir, teardown_tmpdir);
}
