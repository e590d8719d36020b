/* SPDX-License-Identifier: MIT */
/*
 * Loader hooks: dlopen / dlmopen patch the modules they bring in as soon as the real
 * call returns; dlsym / dlvsym hand out our hook when asked for a symbol we hook (so
 * NCCL's ibverbs wrappers or a driver loaded through dlsym are seen too).
 *
 * Calling the real dlopen from a wrapper changes who the caller is, and glibc uses the
 * caller for three things: its DT_RPATH / DT_RUNPATH when the name has no '/', $ORIGIN
 * in the name, and the link-map namespace. A bare "libfoo.so" that the caller finds
 * through RUNPATH=$ORIGIN/../lib (cuDNN and PyTorch load their sub-libraries this way)
 * would not be found from libaiprof.so. So when the caller has a search path, or the
 * name has a '$', or the caller lives in another namespace, we do the caller's part of
 * the search ourselves and pass the real dlopen an absolute path:
 *   already loaded (RTLD_NOLOAD)  ->  [RUNPATH: LD_LIBRARY_PATH wins]  ->  the caller's
 *   RUNPATH, or its RPATH and the executable's RPATH  ->  plain dlopen(name) (cache,
 *   default directories, and glibc's own error message).
 * A directory whose candidate the loader rejects (wrong ELF class) is skipped, as glibc
 * does. RPATHs of the caller's own loaders are not walked.
 *
 * dlsym(RTLD_NEXT, ...) also depends on the caller: an assembly entry jumps straight to
 * the real dlsym for RTLD_NEXT, so the return address the loader sees is the caller's.
 */
#include <dlfcn.h>
#include <fcntl.h>
#include <limits.h>
#include <link.h>
#include <string.h>
#include <unistd.h>

#include "preload.h"

typedef void *(*dlopen_fn)(const char *, int);
typedef void *(*dlmopen_fn)(Lmid_t, const char *, int);

/* ---- dlsym / dlvsym ---------------------------------------------------------------- */

/* The definitions our own references bind to: what the caller would get. */
__attribute__((used)) void *g_dlsym_next = (void *)dlsym;
__attribute__((used)) void *g_dlvsym_next = (void *)dlvsym;

void *hook_dlsym(void *handle, const char *name);
void *hook_dlvsym(void *handle, const char *name, const char *version);

__asm__(
	".text\n"
	".p2align 4\n"
	".globl hook_dlsym\n"
	".hidden hook_dlsym\n"
	".type hook_dlsym, @function\n"
	"hook_dlsym:\n"
	"	endbr64\n"
	"	cmpq $-1, %rdi\n"                 /* RTLD_NEXT */
	"	je 1f\n"
	"	jmp hook_dlsym_c\n"
	"1:	jmp *g_dlsym_next(%rip)\n"
	".size hook_dlsym, .-hook_dlsym\n"
	".p2align 4\n"
	".globl hook_dlvsym\n"
	".hidden hook_dlvsym\n"
	".type hook_dlvsym, @function\n"
	"hook_dlvsym:\n"
	"	endbr64\n"
	"	cmpq $-1, %rdi\n"
	"	je 2f\n"
	"	jmp hook_dlvsym_c\n"
	"2:	jmp *g_dlvsym_next(%rip)\n"
	".size hook_dlvsym, .-hook_dlvsym\n");

/* Our hook for `name` if `found` is the very definition that hook wraps. */
static void *substitute(const char *name, void *found)
{
	int id;

	if (!found || !g_active)
		return found;
	id = hook_lookup_name(name);
	if (id < 0 || !hook_fn(id))
		return found;
	if (hook_real_get(id) != found)
		return found;   /* another copy of the library: not ours to wrap */
	return hook_fn(id);
}

__attribute__((used)) void *hook_dlsym_c(void *handle, const char *name)
{
	return substitute(name, dlsym(handle, name));
}

__attribute__((used)) void *hook_dlvsym_c(void *handle, const char *name, const char *version)
{
	return substitute(name, dlvsym(handle, name, version));
}

/* ---- the caller's search path --------------------------------------------------------- */

struct caller {
	struct link_map *lm;
	Lmid_t ns;
	const char *rpath;      /* DT_RPATH (only used when there is no DT_RUNPATH) */
	const char *runpath;
	char origin[PATH_MAX];
	bool origin_ok;
};

static void dyn_paths(const struct link_map *lm, const char **rpath, const char **runpath)
{
	const ElfW(Dyn) *d = lm->l_ld;
	uintptr_t strtab = 0, rp = 0, rup = 0;
	bool have_rp = false, have_rup = false;

	*rpath = *runpath = NULL;
	if (!d)
		return;
	for (; d->d_tag != DT_NULL; d++) {
		if (d->d_tag == DT_STRTAB)
			strtab = d->d_un.d_ptr;
		else if (d->d_tag == DT_RPATH) {
			rp = d->d_un.d_val;
			have_rp = true;
		} else if (d->d_tag == DT_RUNPATH) {
			rup = d->d_un.d_val;
			have_rup = true;
		}
	}
	if (!strtab)
		return;
	if (lm->l_addr && strtab < lm->l_addr)
		strtab += lm->l_addr;
	if (have_rp)
		*rpath = (const char *)(strtab + rp);
	if (have_rup)
		*runpath = (const char *)(strtab + rup);
}

/* Directory of the running executable (what $ORIGIN means in its own paths). */
static bool exe_origin(char *buf, size_t len)
{
	ssize_t r = readlink("/proc/self/exe", buf, len - 1);
	char *slash;

	if (r <= 0)
		return false;
	buf[r] = '\0';
	slash = strrchr(buf, '/');
	if (!slash)
		return false;
	if (slash == buf)
		slash[1] = '\0';
	else
		*slash = '\0';
	return true;
}

/* $ORIGIN of the caller: the directory of the path it was loaded from. */
static void origin_of(struct caller *c)
{
	const char *name = c->lm->l_name;
	char *slash;
	size_t n, cl;

	if (!name || !name[0]) {
		c->origin_ok = exe_origin(c->origin, sizeof(c->origin));
		return;
	}
	if (name[0] == '/') {
		n = strnlen(name, sizeof(c->origin) - 1);
		memcpy(c->origin, name, n);
		c->origin[n] = '\0';
	} else {
		if (!getcwd(c->origin, sizeof(c->origin)))
			return;
		cl = strlen(c->origin);
		n = strlen(name);
		if (cl + 1 + n >= sizeof(c->origin))
			return;
		c->origin[cl] = '/';
		memcpy(c->origin + cl + 1, name, n + 1);
	}
	slash = strrchr(c->origin, '/');
	if (!slash)
		return;
	if (slash == c->origin)
		slash[1] = '\0';
	else
		*slash = '\0';
	c->origin_ok = true;
}

static bool caller_get(const void *addr, struct caller *c)
{
	Dl_info info;

	memset(c, 0, sizeof(*c));
	c->ns = LM_ID_BASE;
	if (!dladdr1(addr, &info, (void **)&c->lm, RTLD_DL_LINKMAP) || !c->lm)
		return false;
	if (dlinfo(c->lm, RTLD_DI_LMID, &c->ns) != 0) {
		(void)dlerror();
		c->ns = LM_ID_BASE;
	}
	dyn_paths(c->lm, &c->rpath, &c->runpath);
	return true;
}

/*
 * Copies `in` (length `len`) to `out`, replacing $ORIGIN / ${ORIGIN}. Returns false for
 * other dynamic string tokens ($LIB, $PLATFORM) or when it does not fit.
 */
static bool expand_origin(const char *in, size_t len, const struct caller *c, char *out,
			  size_t outsz)
{
	size_t o = 0;

	for (size_t i = 0; i < len;) {
		const char *tok = NULL;
		size_t toklen = 0;

		if (in[i] == '$') {
			if (len - i >= 7 && memcmp(in + i, "$ORIGIN", 7) == 0 &&
			    (len - i == 7 || !(in[i + 7] == '_' || (in[i + 7] >= 'A' &&
								       in[i + 7] <= 'Z'))))
				toklen = 7;
			else if (len - i >= 9 && memcmp(in + i, "${ORIGIN}", 9) == 0)
				toklen = 9;
			else
				return false;
			if (!c->origin_ok)
				return false;
			tok = c->origin;
		}
		if (tok) {
			size_t tl = strlen(tok);

			if (o + tl >= outsz)
				return false;
			memcpy(out + o, tok, tl);
			o += tl;
			i += toklen;
		} else {
			if (o + 1 >= outsz)
				return false;
			out[o++] = in[i++];
		}
	}
	out[o] = '\0';
	return true;
}

static void *do_open(bool mopen, Lmid_t ns, const char *file, int mode)
{
	if (mopen) {
		dlmopen_fn m = (dlmopen_fn)hook_real_get(HOOK_ID_dlmopen);

		return m ? m(ns, file, mode) : NULL;
	}
	dlopen_fn o = (dlopen_fn)hook_real_get(HOOK_ID_dlopen);

	return o ? o(file, mode) : NULL;
}

/* Tries dir/file for each dir of the colon-separated `list`. */
static void *open_in_dirs(const char *list, const struct caller *c, const char *file,
			  bool mopen, Lmid_t ns, int mode, bool probe_only, bool *exists)
{
	char dir[PATH_MAX], path[PATH_MAX];
	size_t flen = strlen(file);

	while (list && *list) {
		const char *end = strchr(list, ':');
		size_t len = end ? (size_t)(end - list) : strlen(list);
		void *h;

		if (len == 0) {
			dir[0] = '.';
			dir[1] = '\0';
		} else if (!expand_origin(list, len, c, dir, sizeof(dir))) {
			goto next;
		}
		if (strlen(dir) + 1 + flen >= sizeof(path))
			goto next;
		memcpy(path, dir, strlen(dir));
		path[strlen(dir)] = '/';
		memcpy(path + strlen(dir) + 1, file, flen + 1);
		if (access(path, F_OK) != 0)
			goto next;
		if (probe_only) {
			*exists = true;
			return NULL;
		}
		h = do_open(mopen, ns, path, mode);
		if (h)
			return h;
		(void)dlerror();        /* not loadable (e.g. wrong class): keep looking */
next:
		list = end ? end + 1 : NULL;
	}
	return NULL;
}

/* LD_LIBRARY_PATH as the loader saw it at start (it never re-reads it). */
static const char *initial_ld_library_path(void)
{
	static char buf[8192];
	static _Atomic int state;       /* 0 unread, 1 read, 2 absent */
	int s = atomic_load_explicit(&state, memory_order_acquire);

	if (s == 0) {
		char env[32768];
		int fd = open("/proc/self/environ", O_RDONLY | O_CLOEXEC);
		ssize_t n = 0, r;

		s = 2;
		if (fd >= 0) {
			while ((size_t)n < sizeof(env) - 1 &&
			       (r = read(fd, env + n, sizeof(env) - 1 - (size_t)n)) > 0)
				n += r;
			close(fd);
		}
		for (ssize_t i = 0; i < n;) {
			const char *e = env + i;
			size_t l = strnlen(e, (size_t)(n - i));

			if (l > 16 && memcmp(e, "LD_LIBRARY_PATH=", 16) == 0 &&
			    l - 16 < sizeof(buf)) {
				memcpy(buf, e + 16, l - 16);
				buf[l - 16] = '\0';
				s = 1;
				break;
			}
			i += (ssize_t)l + 1;
		}
		atomic_store_explicit(&state, s, memory_order_release);
	}
	return s == 1 ? buf : NULL;
}

static const char *main_rpath(void)
{
	void *h = dlopen(NULL, RTLD_LAZY | RTLD_NOLOAD);
	struct link_map *lm = NULL;
	const char *rpath = NULL, *runpath = NULL;

	if (!h)
		return NULL;
	if (dlinfo(h, RTLD_DI_LINKMAP, &lm) == 0 && lm)
		dyn_paths(lm, &rpath, &runpath);
	dlclose(h);
	return runpath ? NULL : rpath;
}

static void *open_as(const void *caller_addr, bool mopen, Lmid_t ns, const char *file, int mode)
{
	char expanded[PATH_MAX];
	struct caller c;
	void *h;

	if (!file || !caller_get(caller_addr, &c))
		return do_open(mopen, ns, file, mode);
	if (!mopen && c.ns != LM_ID_BASE) {
		mopen = true;           /* the caller's namespace, as dlopen() would */
		ns = c.ns;
	}
	if (strchr(file, '$') || (!strchr(file, '/') && (c.rpath || c.runpath)))
		origin_of(&c);
	if (strchr(file, '$') && expand_origin(file, strlen(file), &c, expanded, sizeof(expanded)))
		file = expanded;
	if (strchr(file, '/') || (!c.rpath && !c.runpath))
		return do_open(mopen, ns, file, mode);

	h = do_open(mopen, ns, file, mode | RTLD_NOLOAD);
	if (h)
		return h;
	(void)dlerror();
	if (c.runpath) {
		bool in_ld_path = false;

		open_in_dirs(initial_ld_library_path(), &c, file, mopen, ns, mode, true,
			     &in_ld_path);
		if (in_ld_path)
			return do_open(mopen, ns, file, mode);
		h = open_in_dirs(c.runpath, &c, file, mopen, ns, mode, false, NULL);
	} else {
		h = open_in_dirs(c.rpath, &c, file, mopen, ns, mode, false, NULL);
		if (!h) {
			const char *mr = main_rpath();
			struct caller mc = c;

			if (mr) {
				mc.origin_ok = exe_origin(mc.origin, sizeof(mc.origin));
				h = open_in_dirs(mr, &mc, file, mopen, ns, mode, false, NULL);
			}
		}
	}
	return h ? h : do_open(mopen, ns, file, mode);
}

/* Patches what the call brought in; leaves errno and dlerror() as the call left them. */
static void after_open(void *h)
{
	int saved = errno;

	if (h && g_active && patch__modules_changed())
		(void)patch__rescan(false);     /* busy: the control thread catches up */
	errno = saved;
}

static void *hook_dlopen(const char *file, int mode)
{
	void *h = open_as(__builtin_return_address(0), false, LM_ID_BASE, file, mode);

	after_open(h);
	return h;
}

static void *hook_dlmopen(Lmid_t ns, const char *file, int mode)
{
	void *h = open_as(__builtin_return_address(0), true, ns, file, mode);

	after_open(h);
	return h;
}

const struct hook_impl hook_impls_dl[] = {
#define HOOK(name, group) HOOK_IMPL_IF(group, DL, HOOK_ID_##name, hook_##name)
#include "hooks.def"
#undef HOOK
	{ 0, NULL },
};
