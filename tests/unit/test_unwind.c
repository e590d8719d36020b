/* SPDX-License-Identifier: MIT */
/*
 * injector/target/unwind.c over this very process: a call chain built without frame
 * pointers (this file is compiled with -fomit-frame-pointer, one function uses alloca so
 * that its CFA is rbp-based) is captured as the eBPF collectors capture a thread — its
 * registers and a copy of its stack — and walked by CFI back to _start; then hostile
 * stacks, JIT code crossed by a frame pointer, and a copy that is too short. With the rules
 * shared through a directory (uwshare.h), the walk is the same: cold, warm (every row from
 * the shared file, no module decoded here) and over a damaged file; a directory others could
 * write is refused, and old files are collected.
 */
#include <alloca.h>
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <dirent.h>
#include <fcntl.h>
#include <elf.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <cmocka.h>
#include "injector/collect/ebpf_symbols.h"
#include "injector/target/unwind.h"

#define COPY_BYTES 16384
#define NOINLINE __attribute__((noinline, noclone))

struct snap {
	struct unwind_regs regs;
	uint8_t stack[COPY_BYTES];
	size_t bytes;
};

struct env {
	struct symbolizer *z;
	struct proc_symbolizer *ps;
	const struct snap *s;
	size_t limit;             /* bytes of s->stack the walk may read */
};

static bool snap_read(void *arg, uint64_t addr, uint64_t *ret)
{
	const struct env *v = arg;
	uint64_t sp = v->s->regs.r[UW_RSP];

	if (addr < sp || addr - sp > v->limit || v->limit - (addr - sp) < 8)
		return false;
	memcpy(ret, v->s->stack + (addr - sp), 8);
	return true;
}

static int snap_code(void *arg, uint64_t pc, struct unwind_code *ret)
{
	const struct env *v = arg;

	return proc_symbolizer__code(v->ps, pc, ret);
}

/* The registers at this point of the caller's frame, and the stack above them. */
#define CAPTURE(s) do {                                                                  \
	uint64_t *r_ = (s)->regs.r;                                                      \
	__asm__ volatile("lea 0(%%rip), %%rax\n\t" "mov %%rax, 128(%0)\n\t"             \
			 "mov %%rsp, 56(%0)\n\t" "mov %%rbp, 48(%0)\n\t"                 \
			 "mov %%rbx, 24(%0)\n\t" "mov %%r12, 96(%0)\n\t"                 \
			 "mov %%r13, 104(%0)\n\t" "mov %%r14, 112(%0)\n\t"               \
			 "mov %%r15, 120(%0)\n\t"                                        \
			 : : "r"(r_) : "rax", "memory");                                 \
	(s)->regs.valid = 1u << UW_RIP | 1u << UW_RSP | 1u << UW_RBP | 1u << UW_RBX |    \
		1u << UW_R12 | 1u << UW_R13 | 1u << UW_R14 | 1u << UW_R15;               \
	copy_stack(s);                                                                   \
} while (0)

/* raw stack, redzones and all: not for AddressSanitizer's eyes */
__attribute__((no_sanitize("address")))
static NOINLINE void copy_stack(struct snap *s)
{
	/* our own stack from the captured sp up: readable to the top of the mapping */
	uint64_t sp = s->regs.r[UW_RSP];
	size_t n = 0;

	while (n < COPY_BYTES) {
		size_t page = 4096 - ((sp + n) & 4095);

		if (page > COPY_BYTES - n)
			page = COPY_BYTES - n;
		if (msync((void *)((sp + n) & ~4095ULL), 4096, MS_ASYNC) < 0)
			break;  /* past the top of the stack */
		for (size_t i = 0; i < page; i++)
			s->stack[n + i] = ((const volatile uint8_t *)(uintptr_t)(sp + n))[i];
		n += page;
	}
	s->bytes = n;
}

static volatile int sink;

static NOINLINE int uw_leaf(struct snap *s, volatile char *p, int n)
{
	volatile char buf[200];

	buf[n % 200] = p[0];
	CAPTURE(s);
	return buf[n % 200] + 1;
}

static NOINLINE int uw_alloca(struct snap *s, int n)
{
	volatile char *a = alloca((size_t)n);   /* a variable frame: CFA through rbp */

	a[0] = (char)n;
	return uw_leaf(s, a, n) + 2;
}

static NOINLINE int uw_outer(struct snap *s, int n)
{
	volatile long big[64];

	big[n % 64] = n;
	sink = uw_alloca(s, n + 16);
	return (int)big[n % 64];
}

static void env_open(struct env *v, const struct snap *s)
{
	*v = (struct env){ .s = s, .limit = s->bytes };
	assert_int_equal(symbolizer__new(&v->z), 0);
	assert_int_equal(symbolizer__proc(v->z, getpid(), &v->ps), 0);
}

static void env_close(struct env *v)
{
	symbolizer__free(v->z);
}

static int walk(struct unwind_tables *t, struct env *v, const struct unwind_regs *regs,
		uint64_t *pcs, size_t max, struct unwind_result *res)
{
	struct unwind_target tgt = { .read = snap_read, .code = snap_code, .arg = v };

	return unwind_stack(t, &tgt, regs, pcs, max, res);
}

/* Name of frame i as the collectors name it (return addresses looked up at pc - 1). */
static void frame_name(struct env *v, const uint64_t *pcs, size_t i, char *buf, size_t len)
{
	proc_symbolizer__lookup(v->ps, i ? pcs[i] - 1 : pcs[i], buf, len);
}

static NOINLINE void test_walks_to_start(void **state)
{
	static struct snap s;
	struct unwind_tables *t;
	struct unwind_result res;
	struct unwind_stats st;
	uint64_t pcs[UNWIND_MAX_FRAMES];
	char name[128];
	int at_leaf = -1, at_alloca = -1, at_outer = -1, at_test = -1, at_main = -1;
	struct env v;

	(void)state;
	uw_outer(&s, 40);
	env_open(&v, &s);
	assert_int_equal(unwind_tables__new(0, &t), 0);
	assert_int_equal(walk(t, &v, &s.regs, pcs, UNWIND_MAX_FRAMES, &res), 0);
	for (size_t i = 0; i < res.n; i++) {
		frame_name(&v, pcs, i, name, sizeof(name));
		if (strcmp(name, "uw_leaf") == 0 && at_leaf < 0)
			at_leaf = (int)i;
		if (strcmp(name, "uw_alloca") == 0 && at_alloca < 0)
			at_alloca = (int)i;
		if (strcmp(name, "uw_outer") == 0 && at_outer < 0)
			at_outer = (int)i;
		if (strcmp(name, "test_walks_to_start") == 0 && at_test < 0)
			at_test = (int)i;
		if (strcmp(name, "main") == 0 && at_main < 0)
			at_main = (int)i;
		if (res.end != UNWIND_END_ROOT)
			print_message("frame %zu: %s\n", i, name);
	}
	assert_int_equal(res.end, UNWIND_END_ROOT);
	assert_int_equal(res.fp_frames, 0);
	/* every frame, in order, up to main() and the C library's start of the process */
	assert_int_equal(at_leaf, 0);
	assert_int_equal(at_alloca, 1);
	assert_int_equal(at_outer, 2);
	assert_true(at_test > at_outer);
	assert_true(at_main > at_test);
	assert_true((size_t)at_main < res.n - 1);

	/* a second walk of the same stack is served from the cache, same result */
	{
		uint64_t pcs2[UNWIND_MAX_FRAMES];
		struct unwind_result res2;
		struct unwind_stats st1;

		unwind_tables__stats(t, &st1);
		assert_int_equal(walk(t, &v, &s.regs, pcs2, UNWIND_MAX_FRAMES, &res2), 0);
		assert_int_equal(res2.n, res.n);
		assert_memory_equal(pcs2, pcs, res.n * sizeof(*pcs));
		unwind_tables__stats(t, &st);
		assert_int_equal(st.cache_hits - st1.cache_hits, res.n);
	}
	assert_true(st.modules >= 2);               /* this program and libc at least */
	assert_true(st.cfi_bytes > 0);
	assert_true(st.frames_cached >= res.n);
	assert_true(st.frames_cache_bytes > 0);

	/* max frames: cut there, and said so */
	assert_int_equal(walk(t, &v, &s.regs, pcs, 2, &res), 0);
	assert_int_equal(res.n, 2);
	assert_int_equal(res.end, UNWIND_END_MAX_DEPTH);

	/* a copy too short for the outer frames ends the walk there, and says so */
	v.limit = 64;
	assert_int_equal(walk(t, &v, &s.regs, pcs, UNWIND_MAX_FRAMES, &res), 0);
	assert_int_equal(res.end, UNWIND_END_STACK);
	assert_true(res.n >= 1 && res.n <= 2);
	unwind_tables__free(t);
	env_close(&v);
}

/*
 * JIT code (an anonymous executable page) with a frame pointer: one frame-pointer step
 * crosses it to the return address, and CFI takes over from there. Without a usable frame
 * pointer the walk ends at it as unknown code.
 */
static void test_jit_frame(void **state)
{
	static struct snap s, j;
	struct unwind_tables *t;
	struct unwind_result res;
	uint64_t pcs[UNWIND_MAX_FRAMES];
	char name[128];
	void *page;
	struct env v;

	(void)state;
	uw_outer(&s, 8);
	page = mmap(NULL, 4096, PROT_READ | PROT_EXEC, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	assert_true(page != MAP_FAILED);
	/* j: a JIT frame of 32 bytes below s's leaf: [rbp] = s's rbp, [rbp+8] = s's pc */
	j.regs = s.regs;
	j.regs.r[UW_RSP] = s.regs.r[UW_RSP] - 32;
	j.regs.r[UW_RBP] = s.regs.r[UW_RSP] - 16;
	j.regs.r[UW_RIP] = (uint64_t)(uintptr_t)page + 100;
	memcpy(j.stack + 16, &s.regs.r[UW_RBP], 8);
	memcpy(j.stack + 24, &s.regs.r[UW_RIP], 8);
	memcpy(j.stack + 32, s.stack, s.bytes - 32);
	j.bytes = s.bytes;

	env_open(&v, &j);
	assert_int_equal(unwind_tables__new(0, &t), 0);
	assert_int_equal(walk(t, &v, &j.regs, pcs, UNWIND_MAX_FRAMES, &res), 0);
	assert_int_equal(res.fp_frames, 1);
	assert_true(res.n >= 4);
	assert_int_equal(pcs[0], j.regs.r[UW_RIP]);
	/* the frame the JIT code "returns" to: the address just after the captured pc */
	assert_int_equal(pcs[1], s.regs.r[UW_RIP]);
	frame_name(&v, pcs, 2, name, sizeof(name));
	assert_string_equal(name, "uw_alloca");

	j.regs.r[UW_RBP] = 0;
	assert_int_equal(walk(t, &v, &j.regs, pcs, UNWIND_MAX_FRAMES, &res), 0);
	assert_int_equal(res.n, 1);
	assert_int_equal(res.end, UNWIND_END_UNKNOWN_CODE);
	unwind_tables__free(t);
	env_close(&v);
	munmap(page, 4096);
}

/* Garbage where the stack should be: every walk ends, within bounds, never at a root it
 * did not reach. */
static void test_hostile_stacks(void **state)
{
	static struct snap s, h;
	struct unwind_tables *t;
	struct unwind_result res;
	uint64_t pcs[UNWIND_MAX_FRAMES], text[4];
	unsigned seed = 12345;
	struct env v;

	(void)state;
	uw_outer(&s, 3);
	text[0] = s.regs.r[UW_RIP];
	text[1] = (uint64_t)(uintptr_t)&uw_outer;
	text[2] = (uint64_t)(uintptr_t)&memcpy;
	text[3] = (uint64_t)(uintptr_t)&getpid;
	env_open(&v, &h);
	assert_int_equal(unwind_tables__new(64, &t), 0);   /* a small cache: evictions too */
	for (int round = 0; round < 300; round++) {
		h.regs = s.regs;
		h.bytes = s.bytes;
		v.limit = h.bytes;
		for (size_t i = 0; i < h.bytes / 8; i++) {
			uint64_t w;
			unsigned k = (unsigned)rand_r(&seed);

			switch (k % 4) {
			case 0: w = text[(k >> 4) % 4] + ((k >> 8) % 64); break;  /* code-like */
			case 1: w = h.regs.r[UW_RSP] + ((k >> 4) % 4096);  break; /* stack-like */
			case 2: w = 0; break;
			default: w = ((uint64_t)rand_r(&seed) << 32) | (unsigned)rand_r(&seed);
			}
			memcpy(h.stack + 8 * i, &w, 8);
		}
		if (round % 3 == 0)
			h.regs.r[UW_RIP] = text[round % 4];
		assert_int_equal(walk(t, &v, &h.regs, pcs, UNWIND_MAX_FRAMES, &res), 0);
		assert_true(res.n <= UNWIND_MAX_FRAMES);
		assert_true(res.end < UNWIND_END__N);
	}
	/* a zeroed stack: the leaf's return address is 0, which is not a root */
	h.regs = s.regs;
	memset(h.stack, 0, sizeof(h.stack));
	assert_int_equal(walk(t, &v, &h.regs, pcs, UNWIND_MAX_FRAMES, &res), 0);
	assert_int_equal(res.n, 1);
	assert_int_equal(res.end, UNWIND_END_BAD_FRAME);
	unwind_tables__free(t);
	env_close(&v);
}

/* Removes dir and the files in it. */
static void remove_tree(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	char path[512];

	while (d && (de = readdir(d))) {
		if (de->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		unlink(path);
	}
	if (d)
		closedir(d);
	rmdir(dir);
}

/* Calls damage(fd) on every .uws file in dir, opened read-write; returns how many. */
static size_t each_rules_file(const char *dir, void (*damage)(int fd))
{
	DIR *d = opendir(dir);
	struct dirent *de;
	size_t n = 0;

	assert_non_null(d);
	while ((de = readdir(d))) {
		char path[512];
		int fd;

		if (!strstr(de->d_name, ".uws"))
			continue;
		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		fd = open(path, O_RDWR);
		assert_true(fd >= 0);
		damage(fd);
		close(fd);
		n++;
	}
	closedir(d);
	return n;
}

/* The rules overwritten with a pattern: keys and header kept, rules garbled. */
static void garble_rules(int fd)
{
	char junk[4096];

	for (size_t i = 0; i < sizeof(junk); i++)
		junk[i] = (char)(i % 64 < 8 ? 0 : 0x5a + i);
	for (off_t at = 64; at < 1 << 20; at += sizeof(junk)) {
		char cur[4096];

		assert_int_equal(pread(fd, cur, sizeof(cur), at), (ssize_t)sizeof(cur));
		for (size_t i = 0; i < sizeof(cur); i++)
			if (i % 64 >= 8)
				cur[i] = junk[i];
		assert_int_equal(pwrite(fd, cur, sizeof(cur), at), (ssize_t)sizeof(cur));
	}
}

/* The header's version field bumped: a file of another version. */
static void bump_version(int fd)
{
	uint32_t version = 0;

	assert_int_equal(pread(fd, &version, 4, 8), 4);
	version += 100;
	assert_int_equal(pwrite(fd, &version, 4, 8), 4);
}

static void shared_walk(const char *dir, struct env *v, const struct snap *s, uint64_t *pcs,
			struct unwind_result *res, struct unwind_stats *st)
{
	struct unwind_tables *t;
	char why[256];

	assert_int_equal(unwind_tables__new(0, &t), 0);
	assert_int_equal(unwind_tables__share(t, dir, why, sizeof(why)), 0);
	assert_int_equal(walk(t, v, &s->regs, pcs, UNWIND_MAX_FRAMES, res), 0);
	unwind_tables__stats(t, st);
	unwind_tables__free(t);
}

static NOINLINE void test_shared_rules_same_walk(void **state)
{
	static struct snap s;
	static uint64_t want[UNWIND_MAX_FRAMES], got[UNWIND_MAX_FRAMES];   /* off the copied stack */
	char base[] = "/tmp/aiprof-uwshare-XXXXXX", dir[128], why[256];
	struct unwind_result rw, rg;
	struct unwind_tables *t;
	struct unwind_stats st;
	struct env v;

	(void)state;
	uw_outer(&s, 24);
	env_open(&v, &s);
	assert_non_null(mkdtemp(base));
	snprintf(dir, sizeof(dir), "%s/unwind", base);

	assert_int_equal(unwind_tables__new(0, &t), 0);             /* unshared: the reference */
	assert_int_equal(walk(t, &v, &s.regs, want, UNWIND_MAX_FRAMES, &rw), 0);
	unwind_tables__free(t);
	assert_int_equal(rw.end, UNWIND_END_ROOT);

	/* cold: decoded here (from the images it makes of the modules' .eh_frame), shared */
	shared_walk(dir, &v, &s, got, &rg, &st);
	assert_int_equal(rg.n, rw.n);
	assert_int_equal(rg.end, rw.end);
	assert_memory_equal(got, want, rw.n * sizeof(*want));
	assert_true(st.shared);
	assert_int_equal(st.share.inserts, rw.n);
	assert_true(st.share.images_built >= 2 && st.modules_from_image >= 2);

	/* warm: every row from the shared file, no module's CFI read here */
	shared_walk(dir, &v, &s, got, &rg, &st);
	assert_int_equal(rg.n, rw.n);
	assert_memory_equal(got, want, rw.n * sizeof(*want));
	assert_int_equal(st.share.hits, rw.n);
	assert_int_equal(st.modules_decoded, 0);
	assert_int_equal(st.share.images_built, 0);

	/* damaged rules read as misses: decoded again, the same walk */
	assert_true(each_rules_file(dir, garble_rules) >= 2);
	shared_walk(dir, &v, &s, got, &rg, &st);
	assert_int_equal(rg.n, rw.n);
	assert_memory_equal(got, want, rw.n * sizeof(*want));
	assert_int_equal(st.share.hits, 0);
	assert_int_equal(st.share.rejected, rw.n);
	assert_true(st.modules_decoded >= 2);
	assert_int_equal(st.frames_cached, rw.n);   /* kept here: the damaged rows stay */

	/* files of another version (a header that does not match): made anew, then shared */
	assert_true(each_rules_file(dir, bump_version) >= 2);
	shared_walk(dir, &v, &s, got, &rg, &st);
	assert_int_equal(rg.n, rw.n);
	assert_memory_equal(got, want, rw.n * sizeof(*want));
	assert_true(st.share.files >= 2);
	assert_int_equal(st.share.inserts, rw.n);
	shared_walk(dir, &v, &s, got, &rg, &st);
	assert_int_equal(st.share.hits, rw.n);

	/* a directory someone else could write: refused, with what to do */
	assert_int_equal(chmod(dir, 0777), 0);
	assert_int_equal(unwind_tables__new(0, &t), 0);
	assert_int_equal(unwind_tables__share(t, dir, why, sizeof(why)), -EPERM);
	assert_non_null(strstr(why, "only it can write"));
	assert_null(unwind_tables__share_dir(t));
	unwind_tables__free(t);
	assert_int_equal(chmod(dir, 0700), 0);

	remove_tree(dir);
	rmdir(base);
	env_close(&v);
}

/* Files not opened for a week and unfinished ones from an hour ago go; recent ones stay. */
static void test_shared_dir_garbage(void **state)
{
	char base[] = "/tmp/aiprof-uwgc-XXXXXX", path[256], why[256];
	const char *names[] = { "old.uws", "old.cfi", "x.tmp.1", "new.uws", "notours.txt" };
	struct timespec old[2] = { { .tv_sec = time(NULL) - 8 * 86400 },
				   { .tv_sec = time(NULL) - 8 * 86400 } };
	struct unwind_tables *t;

	(void)state;
	assert_non_null(mkdtemp(base));
	assert_int_equal(chmod(base, 0700), 0);
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		int fd;

		snprintf(path, sizeof(path), "%s/%s", base, names[i]);
		fd = open(path, O_CREAT | O_WRONLY, 0600);
		assert_true(fd >= 0);
		if (strncmp(names[i], "new", 3) != 0)
			assert_int_equal(futimens(fd, old), 0);
		close(fd);
	}
	assert_int_equal(unwind_tables__new(0, &t), 0);
	assert_int_equal(unwind_tables__share(t, base, why, sizeof(why)), 0);
	unwind_tables__free(t);
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		bool gone = strncmp(names[i], "old", 3) == 0 || names[i][0] == 'x';

		snprintf(path, sizeof(path), "%s/%s", base, names[i]);
		assert_int_equal(access(path, F_OK) != 0, gone);
	}
	remove_tree(base);
}


/* The file at path copied to dst, then bytes [off, off+n) replaced by b (n 0: a plain copy). */
static void copy_patched(const char *path, const char *dst, off_t off, const void *b, size_t n)
{
	char buf[65536];
	int in = open(path, O_RDONLY | O_CLOEXEC), out;
	ssize_t got;

	assert_true(in >= 0);
	out = open(dst, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	assert_true(out >= 0);
	while ((got = read(in, buf, sizeof(buf))) > 0)
		assert_int_equal(write(out, buf, (size_t)got), got);
	if (n)
		assert_int_equal(pwrite(out, b, n, off), (ssize_t)n);
	close(in);
	close(out);
}

/* The shared key of the module at path: 0 and *d, or the error. */
static int digest_of(const char *path, uint8_t d[UWS_DIGEST_LEN])
{
	int fd = open(path, O_RDONLY | O_CLOEXEC), r;

	assert_true(fd >= 0);
	r = unwind_module_digest(fd, d);
	close(fd);
	return r;
}

/*
 * The key of a module covers its ELF header, not only its CFI bytes: a copy with the same
 * CFI sections and another OS ABI or flags is another module; one that claims another
 * machine (whose rows the shared files cannot hold) is not shared at all; a plain copy is
 * the same module.
 */
static void test_digest_covers_elf_header(void **state)
{
	char base[] = "/tmp/aiprof-uwkey-XXXXXX", copy[128];
	uint8_t genuine[UWS_DIGEST_LEN], other[UWS_DIGEST_LEN];
	const uint8_t osabi = ELFOSABI_FREEBSD, flags[4] = { 1, 0, 0, 0 };
	const uint16_t machine = EM_AARCH64;

	(void)state;
	assert_non_null(mkdtemp(base));
	snprintf(copy, sizeof(copy), "%s/lib.so", base);
	assert_int_equal(digest_of("/proc/self/exe", genuine), 0);

	copy_patched("/proc/self/exe", copy, 0, NULL, 0);
	assert_int_equal(digest_of(copy, other), 0);
	assert_memory_equal(genuine, other, UWS_DIGEST_LEN);

	copy_patched("/proc/self/exe", copy, EI_OSABI, &osabi, 1);
	assert_int_equal(digest_of(copy, other), 0);
	assert_memory_not_equal(genuine, other, UWS_DIGEST_LEN);

	copy_patched("/proc/self/exe", copy, offsetof(Elf64_Ehdr, e_flags), flags, 4);
	assert_int_equal(digest_of(copy, other), 0);
	assert_memory_not_equal(genuine, other, UWS_DIGEST_LEN);

	copy_patched("/proc/self/exe", copy, offsetof(Elf64_Ehdr, e_machine), &machine, 2);
	assert_int_equal(digest_of(copy, other), -ENOTSUP);

	unlink(copy);
	rmdir(base);
}

/*
 * A full disk under the directory: the module's rules file cannot be had, and says why
 * (ENOSPC) instead of a SIGBUS at the first slot written into a hole of a sparse file. A
 * sparse file left by an older injector on that disk is refused the same way.
 */
static char full_disk[] = "/tmp/aiprof-uwfull-XXXXXX";

/* The tmpfs unmounted even when the test failed (a SIGBUS included). */
static int full_disk_teardown(void **state)
{
	(void)state;
	if (umount2(full_disk, MNT_DETACH) == 0)
		rmdir(full_disk);
	return 0;
}

static void test_shared_full_disk(void **state)
{
	char *base = full_disk, dir[128], path[256], why[256];
	uint8_t digest[UWS_DIGEST_LEN] = { 1, 2, 3 }, digest2[UWS_DIGEST_LEN] = { 4, 5, 6 };
	struct uws_rule rule = { .flags = UWS_NO_CFI };
	struct uws_stats st;
	struct uws_dir *d;
	struct uws_file *f;

	(void)state;
	assert_non_null(mkdtemp(base));
	if (mount("aiprof-uwfull", base, "tmpfs", MS_NOSUID | MS_NODEV, "size=256k,mode=0700")) {
		rmdir(base);
		skip();           /* not root here: no tmpfs of our own */
	}
	snprintf(dir, sizeof(dir), "%s/unwind", base);
	assert_int_equal(uws_dir__open(dir, &d, why, sizeof(why)), 0);
	f = uws_dir__file(d, digest);
	for (uint64_t a = 0; f && a < 4 * UWS_SLOTS; a += 4)
		uws_file__put(d, f, a, &rule);       /* without a reservation: a SIGBUS */
	assert_null(f);
	uws_dir__stats(d, &st);
	assert_int_equal(st.files, 0);
	assert_int_equal(st.files_failed, 1);
	assert_int_equal(st.last_errno, ENOSPC);
	uws_dir__free(d);

	/* a sparse file of the right size and header, as an injector before this one left */
	{
		struct { char magic[8]; uint32_t version, nslots; uint64_t salt;
			 uint8_t digest[UWS_DIGEST_LEN]; uint8_t pad[8]; } h = {
			.magic = "AIPRUWS1", .version = 1, .nslots = UWS_SLOTS, .salt = 7 };
		char name[2 * UWS_DIGEST_LEN + 8];
		int fd;

		memcpy(h.digest, digest2, UWS_DIGEST_LEN);
		for (int i = 0; i < UWS_DIGEST_LEN; i++)
			snprintf(name + 2 * i, 3, "%02x", digest2[i]);
		snprintf(path, sizeof(path), "%s/%s.uws", dir, name);
		fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
		assert_true(fd >= 0);
		assert_int_equal(ftruncate(fd, 64 + (off_t)UWS_SLOTS * 64), 0);
		assert_int_equal(pwrite(fd, &h, sizeof(h), 0), (ssize_t)sizeof(h));
		close(fd);
	}
	assert_int_equal(uws_dir__open(dir, &d, why, sizeof(why)), 0);
	f = uws_dir__file(d, digest2);
	for (uint64_t a = 0; f && a < 4 * UWS_SLOTS; a += 4)
		uws_file__put(d, f, a, &rule);
	assert_null(f);
	uws_dir__stats(d, &st);
	assert_int_equal(st.files_failed, 1);
	assert_int_equal(st.last_errno, ENOSPC);
	uws_dir__free(d);

}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_walks_to_start),
		cmocka_unit_test(test_jit_frame),
		cmocka_unit_test(test_hostile_stacks),
		cmocka_unit_test(test_shared_rules_same_walk),
		cmocka_unit_test(test_shared_dir_garbage),
		cmocka_unit_test(test_digest_covers_elf_header),
		cmocka_unit_test_teardown(test_shared_full_disk, full_disk_teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
