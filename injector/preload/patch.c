/* SPDX-License-Identifier: MIT */
/*
 * GOT patching. For every loaded module (dl_iterate_phdr) we read PT_DYNAMIC, walk its
 * JUMP_SLOT and GLOB_DAT relocations and point the slots of hooked symbols at our hooks.
 *
 * Safety rules, in the order a rescan applies them:
 *  - A module is only touched once it is *complete*: we take a reference with
 *    dlopen(name, RTLD_NOLOAD), which waits for any dlopen() in flight on another thread
 *    (the loader lock is held through relocation and constructors), and check that the
 *    handle is the same object. A module that a concurrent dlopen() is still relocating
 *    is never patched (its RELRO page would be made read-only again under the loader).
 *  - Reading and writing slots happens inside dl_iterate_phdr() callbacks, which hold the
 *    loader's write lock, so no module can be unmapped underneath us. If dlpi_subs
 *    changes between the phases of a pass, the pass restarts.
 *  - A slot is patched only if it holds the real function we resolved, or the module's
 *    own lazy-binding PLT stub (then only if the symbol version matches), or a hook of
 *    another copy of libaiprof. A slot bound to some other definition (a second copy of
 *    the library, an interposer's wrapper) or holding 0 (weak undefined) is left alone.
 *  - Slots in read-only pages (RELRO) are made writable for the store and restored to
 *    the protection /proc/self/maps reported; the 8-byte store itself is atomic.
 * All of this runs under g_patch_lock; the dlopen() hook only try-locks it (a dlopen()
 * from a constructor holds the loader lock, and the control thread may hold g_patch_lock
 * while waiting for the loader lock), and leaves the work to the control thread.
 */
#include <dlfcn.h>
#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "elfdyn.h"
#include "preload.h"

void *hook_real[HOOK__COUNT];

static const char *const hook_names[HOOK__COUNT] = {
#define HOOK(name, group) [HOOK_ID_##name] = #name,
#include "hooks.def"
#undef HOOK
};

static const uint8_t hook_groups[HOOK__COUNT] = {
#define HOOK(name, group) [HOOK_ID_##name] = HOOK_GROUP_##group,
#include "hooks.def"
#undef HOOK
};

static void *hook_fns[HOOK__COUNT];
static char hook_real_ver[HOOK__COUNT][40];   /* version of the resolved definition */
static uintptr_t hook_def_base[HOOK__COUNT];   /* the module it came from (base, phdr) */
static const void *hook_def_phdr[HOOK__COUNT];
static uint16_t hook_sorted[HOOK__COUNT];      /* ids sorted by name */
static _Atomic uint64_t hook_fail_adds[HOOK__COUNT]; /* dlpi_adds at the last miss */

struct seg {
	uintptr_t start, end;
};

struct slotrec {
	void **slot;
	uint16_t id;
};

struct module {
	uintptr_t base;
	const void *phdr;
	char *name;
	struct seg segs[16];
	unsigned nsegs;
	struct elf_dyn dyn;
	struct slotrec *slots;
	uint32_t nslots, capslots;
	uint64_t scanned_resolve_gen;   /* g_resolve_gen when relocations were last scanned */
	bool dyn_ok;
	bool present;
	bool complete;
	bool scanned;
	bool skip;                      /* vDSO, this library, another copy of it */
	bool is_aiprof;
	bool has_unresolved;            /* references a hook whose definer is not loaded */
};

static pthread_mutex_t g_patch_lock = PTHREAD_MUTEX_INITIALIZER;
static struct module *g_mods;
static size_t g_nmods, g_capmods;
static uint64_t g_adds, g_subs;        /* dl_iterate_phdr counters at the last pass */
static uint64_t g_resolve_gen;         /* bumped whenever a hook gets resolved */
static bool g_dormant;                 /* after fork(): never patch again */

const char *hook_name(enum hook_id id)
{
	return (unsigned)id < HOOK__COUNT ? hook_names[id] : "?";
}

void *hook_fn(enum hook_id id)
{
	return (unsigned)id < HOOK__COUNT ? hook_fns[id] : NULL;
}

static int cmp_hook_name(const void *a, const void *b)
{
	return strcmp(hook_names[*(const uint16_t *)a], hook_names[*(const uint16_t *)b]);
}

/* Quick reject: every hooked name starts with "cu", "nc", "ib", "dl" or "__cu". */
static bool maybe_hooked(const char *n)
{
	if (n[0] == '_' && n[1] == '_')
		n += 2;
	return (n[0] == 'c' && n[1] == 'u') || (n[0] == 'n' && n[1] == 'c') ||
	       (n[0] == 'i' && n[1] == 'b') || (n[0] == 'd' && n[1] == 'l');
}

int hook_lookup_name(const char *name)
{
	size_t lo = 0, hi = HOOK__COUNT;

	if (!name || !maybe_hooked(name))
		return -1;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		int c = strcmp(name, hook_names[hook_sorted[mid]]);

		if (c == 0)
			return hook_sorted[mid];
		if (c < 0)
			hi = mid;
		else
			lo = mid + 1;
	}
	return -1;
}

void *hook_substitute(void *fn, enum hook_group group)
{
	if (!fn)
		return fn;
	for (unsigned id = 0; id < HOOK__COUNT; id++) {
		if (hook_groups[id] != group || !hook_fns[id])
			continue;
		if (hook_real_get(id) == fn)
			return hook_fns[id];
	}
	return fn;
}

/* ---- symbol resolution ------------------------------------------------------------- */

static const Elf64_Dyn *phdr_dynamic(const struct dl_phdr_info *info)
{
	for (unsigned i = 0; i < info->dlpi_phnum; i++)
		if (info->dlpi_phdr[i].p_type == PT_DYNAMIC)
			return (const Elf64_Dyn *)(info->dlpi_addr + info->dlpi_phdr[i].p_vaddr);
	return NULL;
}

/* The module's dynamic section read within its loaded extent (its PT_LOAD segments): a
 * table that points elsewhere reads as absent (elfdyn.h). */
static int parse_module(const struct dl_phdr_info *info, struct elf_dyn *d)
{
	uintptr_t lo = UINTPTR_MAX, hi = 0;

	for (unsigned i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *p = &info->dlpi_phdr[i];

		if (p->p_type != PT_LOAD)
			continue;
		if (info->dlpi_addr + p->p_vaddr < lo)
			lo = info->dlpi_addr + p->p_vaddr;
		if (info->dlpi_addr + p->p_vaddr + p->p_memsz > hi)
			hi = info->dlpi_addr + p->p_vaddr + p->p_memsz;
	}
	if (lo >= hi)
		return -ENOENT;
	return elf_dyn__parse_bounded(d, info->dlpi_addr, phdr_dynamic(info), lo, hi);
}

static bool is_vdso_name(const char *name)
{
	return name && (strncmp(name, "linux-vdso", 10) == 0 ||
			strncmp(name, "linux-gate", 10) == 0);
}

/* The address of a definition, calling the resolver of an IFUNC. */
static void *def_addr(const struct elf_sym_def *def)
{
	if (def->type == STT_GNU_IFUNC)
		return ((void *(*)(void))def->addr)();
	return (void *)def->addr;
}

static bool dyn_is_aiprof(const struct elf_dyn *d)
{
	struct elf_sym_def def;

	return elf_dyn__lookup(d, "aiprof_preload_build", &def);
}

static void set_real(enum hook_id id, void *addr, const char *version, uintptr_t base,
		     const void *phdr)
{
	void *expected = NULL;

	if (!addr)
		return;
	hook_def_base[id] = base;
	hook_def_phdr[id] = phdr;
	/* The version is only read under g_patch_lock by the patcher; write it first. */
	if (version) {
		size_t n = strnlen(version, sizeof(hook_real_ver[id]) - 1);
		memcpy(hook_real_ver[id], version, n);
		hook_real_ver[id][n] = '\0';
	}
	if (__atomic_compare_exchange_n(&hook_real[id], &expected, addr, false,
					__ATOMIC_RELEASE, __ATOMIC_ACQUIRE))
		__atomic_fetch_add(&g_resolve_gen, 1, __ATOMIC_RELAXED);
}

struct resolve_one {
	const char *name;
	struct elf_sym_def def;
	bool found;
};

static int resolve_one_cb(struct dl_phdr_info *info, size_t size, void *data)
{
	struct resolve_one *ro = data;
	struct elf_dyn d;

	if (is_vdso_name(info->dlpi_name))
		return 0;
	if (parse_module(info, &d) < 0)
		return 0;
	if (dyn_is_aiprof(&d))
		return 0;
	if (elf_dyn__lookup(&d, ro->name, &ro->def)) {
		ro->found = true;
		return 1;
	}
	return 0;
}

static int counters_cb(struct dl_phdr_info *info, size_t size, void *data);

struct counters {
	uint64_t adds, subs;
};

/* Looks `name` up in every module; caches misses per dlpi_adds in *fail_adds. */
static void *resolve_by_name(const char *name, _Atomic uint64_t *fail_adds)
{
	struct resolve_one ro = { .name = name };
	struct counters c = { 0 };

	/* Nothing was loaded since the last miss: do not walk every module again. */
	dl_iterate_phdr(counters_cb, &c);
	if (c.adds == atomic_load_explicit(fail_adds, memory_order_relaxed))
		return NULL;
	dl_iterate_phdr(resolve_one_cb, &ro);
	if (!ro.found) {
		atomic_store_explicit(fail_adds, c.adds, memory_order_relaxed);
		return NULL;
	}
	return def_addr(&ro.def);
}

void *hook_resolve(enum hook_id id)
{
	void *p, *expected = NULL;

	p = __atomic_load_n(&hook_real[id], __ATOMIC_ACQUIRE);
	if (p)
		return p;
	p = resolve_by_name(hook_names[id], &hook_fail_adds[id]);
	if (!p)
		return NULL;
	if (__atomic_compare_exchange_n(&hook_real[id], &expected, p, false,
					__ATOMIC_RELEASE, __ATOMIC_ACQUIRE))
		__atomic_fetch_add(&g_resolve_gen, 1, __ATOMIC_RELAXED);
	else
		p = expected;
	return p;
}

void *lazy_sym_get_slow(struct lazy_sym *s)
{
	void *p = resolve_by_name(s->name, &s->fail_adds), *expected = NULL;

	if (p && !atomic_compare_exchange_strong(&s->p, &expected, p))
		p = expected;
	return p;
}

/* ---- module table ------------------------------------------------------------------ */

static struct module *module_find(uintptr_t base, const void *phdr)
{
	for (size_t i = 0; i < g_nmods; i++)
		if (g_mods[i].base == base && g_mods[i].phdr == phdr)
			return &g_mods[i];
	return NULL;
}

static void module_free(struct module *m)
{
	free(m->name);
	free(m->slots);
}

static bool in_module(const struct module *m, uintptr_t a)
{
	for (unsigned i = 0; i < m->nsegs; i++)
		if (a >= m->segs[i].start && a < m->segs[i].end)
			return true;
	return false;
}

static bool in_aiprof_module(uintptr_t a)
{
	for (size_t i = 0; i < g_nmods; i++)
		if (g_mods[i].present && g_mods[i].is_aiprof && in_module(&g_mods[i], a))
			return true;
	return false;
}

struct pass {
	uint64_t adds, subs;
	bool oom;
	bool aborted;
	unsigned nnew;
};

static int collect_cb(struct dl_phdr_info *info, size_t size, void *data)
{
	struct pass *ps = data;
	const void *phdr = info->dlpi_phdr;
	struct module *m = module_find(info->dlpi_addr, phdr);

	ps->adds = info->dlpi_adds;
	ps->subs = info->dlpi_subs;
	if (m) {
		m->present = true;
		return 0;
	}
	if (g_nmods == g_capmods) {
		size_t cap = g_capmods ? g_capmods * 2 : 64;
		struct module *n = realloc(g_mods, cap * sizeof(*n));

		if (!n) {
			ps->oom = true;
			return 1;
		}
		g_mods = n;
		g_capmods = cap;
	}
	m = &g_mods[g_nmods];
	memset(m, 0, sizeof(*m));
	m->base = info->dlpi_addr;
	m->phdr = phdr;
	m->name = strdup(info->dlpi_name ? info->dlpi_name : "");
	if (!m->name) {
		ps->oom = true;
		return 1;
	}
	for (unsigned i = 0; i < info->dlpi_phnum && m->nsegs < ARRAY_SIZE(m->segs); i++) {
		const ElfW(Phdr) *p = &info->dlpi_phdr[i];

		if (p->p_type != PT_LOAD)
			continue;
		m->segs[m->nsegs].start = info->dlpi_addr + p->p_vaddr;
		m->segs[m->nsegs].end = info->dlpi_addr + p->p_vaddr + p->p_memsz;
		m->nsegs++;
	}
	m->dyn_ok = parse_module(info, &m->dyn) == 0;
	m->present = true;
	m->skip = is_vdso_name(m->name) || !m->dyn_ok;
	if (m->dyn_ok && dyn_is_aiprof(&m->dyn)) {
		m->is_aiprof = true;
		m->skip = true;
	}
	if (m->skip || !m->name[0])
		m->complete = true;     /* the main program cannot be mid-load */
	g_nmods++;
	ps->nnew++;
	return 0;
}

/* Waits out a dlopen() in flight and checks the module is the object we think it is. */
static bool module_pin_check(const struct module *m)
{
	struct link_map *lm = NULL;
	void *h = dlopen(m->name, RTLD_NOLOAD | RTLD_LAZY);
	bool ok = false;

	if (!h) {
		(void)dlerror();
		return false;
	}
	if (dlinfo(h, RTLD_DI_LINKMAP, &lm) == 0 && lm && lm->l_addr == m->base)
		ok = true;
	dlclose(h);
	(void)dlerror();
	return ok;
}

/* ---- resolution over the module table ---------------------------------------------- */

static int resolve_cb(struct dl_phdr_info *info, size_t size, void *data)
{
	struct pass *ps = data;
	struct module *m;

	if (info->dlpi_subs != ps->subs) {
		ps->aborted = true;
		return 1;
	}
	m = module_find(info->dlpi_addr, info->dlpi_phdr);
	if (!m || !m->complete || m->skip)
		return 0;
	for (unsigned id = 0; id < HOOK__COUNT; id++) {
		struct elf_sym_def def;

		if (__atomic_load_n(&hook_real[id], __ATOMIC_RELAXED) || !hook_fns[id])
			continue;
		if (elf_dyn__lookup(&m->dyn, hook_names[id], &def))
			set_real(id, def_addr(&def), def.version, m->base, m->phdr);
	}
	return 0;
}

/* ---- writing slots ----------------------------------------------------------------- */

struct maps_ent {
	uintptr_t start, end;
	int prot;
};

struct maps {
	struct maps_ent *e;
	size_t n;
	bool loaded, failed;
};

static void maps_free(struct maps *mp)
{
	free(mp->e);
	memset(mp, 0, sizeof(*mp));
}

static uintptr_t parse_hex(const char **p)
{
	uintptr_t v = 0;

	for (;; (*p)++) {
		char c = **p;

		if (c >= '0' && c <= '9')
			v = v * 16 + (uintptr_t)(c - '0');
		else if (c >= 'a' && c <= 'f')
			v = v * 16 + (uintptr_t)(c - 'a' + 10);
		else
			return v;
	}
}

/* Reads /proc/self/maps (address range and rwx of every mapping). */
static int maps_load(struct maps *mp)
{
	size_t cap = 1 << 16, len = 0;
	char *buf = malloc(cap);
	int fd = -1, r = -ENOMEM;

	if (!buf)
		goto fail;
	fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		r = -errno;
		goto fail;
	}
	for (;;) {
		ssize_t n;

		if (len + 4096 > cap) {
			char *nb = realloc(buf, cap * 2);

			if (!nb) {
				r = -ENOMEM;
				goto fail;
			}
			buf = nb;
			cap *= 2;
		}
		n = read(fd, buf + len, cap - len - 1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			r = -errno;
			goto fail;
		}
		if (n == 0)
			break;
		len += (size_t)n;
	}
	buf[len] = '\0';
	for (const char *p = buf; *p;) {
		struct maps_ent ent;
		const char *nl = strchr(p, '\n');

		ent.start = parse_hex(&p);
		if (*p == '-') {
			p++;
			ent.end = parse_hex(&p);
			if (*p == ' ' && p[1] && p[2] && p[3]) {
				ent.prot = (p[1] == 'r' ? PROT_READ : 0) |
					   (p[2] == 'w' ? PROT_WRITE : 0) |
					   (p[3] == 'x' ? PROT_EXEC : 0);
				if (mp->n % 256 == 0) {
					struct maps_ent *ne = realloc(mp->e, (mp->n + 256) * sizeof(*ne));

					if (!ne) {
						r = -ENOMEM;
						goto fail;
					}
					mp->e = ne;
				}
				mp->e[mp->n++] = ent;
			}
		}
		if (!nl)
			break;
		p = nl + 1;
	}
	close(fd);
	free(buf);
	mp->loaded = true;
	return 0;
fail:
	if (fd >= 0)
		close(fd);
	free(buf);
	mp->failed = true;
	return r;
}

/* Current protection of the page holding `a`, -1 if unknown. */
static int maps_prot(struct maps *mp, uintptr_t a)
{
	if (!mp->loaded && !mp->failed)
		(void)maps_load(mp);
	for (size_t i = 0; i < mp->n; i++)
		if (a >= mp->e[i].start && a < mp->e[i].end)
			return mp->e[i].prot;
	return -1;
}

static int got_write(struct maps *mp, void **slot, void *val)
{
	long pg = sysconf(_SC_PAGESIZE);
	uintptr_t page = (uintptr_t)slot & ~((uintptr_t)pg - 1);
	int prot = maps_prot(mp, (uintptr_t)slot);

	if (prot < 0)
		return -EFAULT;
	if (prot & PROT_WRITE) {
		__atomic_store_n(slot, val, __ATOMIC_RELEASE);
		return 0;
	}
	if (mprotect((void *)page, (size_t)pg, prot | PROT_WRITE) < 0)
		return -errno;
	__atomic_store_n(slot, val, __ATOMIC_RELEASE);
	if (mprotect((void *)page, (size_t)pg, prot) < 0)
		return -errno;  /* left writable: harmless for us, report it */
	return 0;
}

/* ---- patching ---------------------------------------------------------------------- */

struct scan_ctx {
	struct module *m;
	struct maps *maps;
	int err;
};

static bool module_has_slot(const struct module *m, void **slot)
{
	for (uint32_t i = 0; i < m->nslots; i++)
		if (m->slots[i].slot == slot)
			return true;
	return false;
}

static int module_add_slot(struct module *m, void **slot, enum hook_id id)
{
	if (m->nslots == m->capslots) {
		uint32_t cap = m->capslots ? m->capslots * 2 : 8;
		struct slotrec *n = realloc(m->slots, cap * sizeof(*n));

		if (!n)
			return -ENOMEM;
		m->slots = n;
		m->capslots = cap;
	}
	m->slots[m->nslots].slot = slot;
	m->slots[m->nslots].id = (uint16_t)id;
	m->nslots++;
	return 0;
}

/*
 * A lazy slot asks for name@version while we resolved name@@default: patch it only if
 * the definer's name@version is the very same function (dlopen@GLIBC_2.2.5 is
 * dlopen@@GLIBC_2.34 in glibc >= 2.34; a real ABI break would be a different address).
 * An interposer without symbol versions (ASan's dlopen) satisfies any version.
 */
static bool version_is_real(enum hook_id id, const char *version, void *real)
{
	const struct module *def = module_find(hook_def_base[id], hook_def_phdr[id]);
	struct elf_sym_def sym;

	if (!def || !def->present || !def->dyn_ok)
		return false;
	/* the loader binds a versioned reference to an unversioned, non-hidden definition */
	if (!def->dyn.versym || !hook_real_ver[id][0])
		return true;
	if (!elf_dyn__lookup_version(&def->dyn, hook_names[id], version, &sym))
		return false;
	return def_addr(&sym) == real;
}

/* Whether the slot's current value may be replaced by our hook (see the file comment). */
static bool slot_patchable(const struct module *m, enum hook_id id, void *val, uint32_t type,
			   const char *version)
{
	void *real = __atomic_load_n(&hook_real[id], __ATOMIC_ACQUIRE);

	if (!val || !real)
		return false;
	if (val == real)
		return true;
	if (in_aiprof_module((uintptr_t)val))
		return true;
	if (type == R_X86_64_JUMP_SLOT && in_module(m, (uintptr_t)val)) {
		/* lazy binding: the slot still points at the module's own PLT stub */
		if (version && strcmp(version, hook_real_ver[id]) != 0)
			return version_is_real(id, version, real);
		return true;
	}
	return false;
}

static int scan_got_cb(const struct elf_got_ref *ref, void *data)
{
	struct scan_ctx *sc = data;
	int id = hook_lookup_name(ref->name);
	void *val, *hook;
	int r;

	if (id < 0 || !(hook = hook_fns[id]))
		return 0;
	if (!__atomic_load_n(&hook_real[id], __ATOMIC_ACQUIRE)) {
		sc->m->has_unresolved = true;
		return 0;
	}
	val = __atomic_load_n(ref->slot, __ATOMIC_ACQUIRE);
	if (val == hook) {
		if (!module_has_slot(sc->m, ref->slot) &&
		    module_add_slot(sc->m, ref->slot, id) < 0)
			sc->err = -ENOMEM;
		return 0;
	}
	if (!slot_patchable(sc->m, id, val, ref->type, ref->version))
		return 0;
	if (module_add_slot(sc->m, ref->slot, id) < 0) {
		sc->err = -ENOMEM;
		return 0;
	}
	r = got_write(sc->maps, ref->slot, hook);
	if (r < 0) {
		sc->m->nslots--;
		sc->err = r;
	}
	return 0;
}

/* Re-checks slots patched earlier: lazy binding or the program may have rewritten one. */
static void module_verify(struct module *m, struct maps *mp)
{
	uint32_t w = 0;

	for (uint32_t i = 0; i < m->nslots; i++) {
		struct slotrec s = m->slots[i];
		void *hook = hook_fns[s.id];
		void *val = __atomic_load_n(s.slot, __ATOMIC_ACQUIRE);

		if (val != hook) {
			if (!slot_patchable(m, s.id, val, R_X86_64_JUMP_SLOT, NULL) ||
			    got_write(mp, s.slot, hook) < 0)
				continue;       /* drop it */
		}
		m->slots[w++] = s;
	}
	m->nslots = w;
}

struct patch_pass {
	struct pass *ps;
	struct maps maps;
	int err;
};

static int patch_cb(struct dl_phdr_info *info, size_t size, void *data)
{
	struct patch_pass *pp = data;
	struct module *m;

	if (info->dlpi_subs != pp->ps->subs) {
		pp->ps->aborted = true;
		return 1;
	}
	m = module_find(info->dlpi_addr, info->dlpi_phdr);
	if (!m || !m->complete || m->skip)
		return 0;
	uint64_t gen = __atomic_load_n(&g_resolve_gen, __ATOMIC_RELAXED);

	if (m->scanned)
		module_verify(m, &pp->maps);
	if (!m->scanned || (m->has_unresolved && m->scanned_resolve_gen != gen)) {
		struct scan_ctx sc = { .m = m, .maps = &pp->maps };

		m->has_unresolved = false;
		elf_dyn__for_each_got(&m->dyn, scan_got_cb, &sc);
		m->scanned = true;
		m->scanned_resolve_gen = gen;
		if (sc.err && !pp->err)
			pp->err = sc.err;
	}
	return 0;
}

static int rescan_pass(void)
{
	struct pass ps = { 0 };
	struct patch_pass pp = { .ps = &ps };
	uint32_t patched = 0, seen = 0;
	size_t w = 0;

	for (size_t i = 0; i < g_nmods; i++)
		g_mods[i].present = false;
	dl_iterate_phdr(collect_cb, &ps);
	if (ps.oom)
		return -ENOMEM;

	/* Forget modules that were unloaded. */
	for (size_t i = 0; i < g_nmods; i++) {
		if (!g_mods[i].present) {
			module_free(&g_mods[i]);
			continue;
		}
		g_mods[w++] = g_mods[i];
	}
	g_nmods = w;

	/* After a dlclose() an address may host a different object: check all again. */
	if (ps.subs != g_subs)
		for (size_t i = 0; i < g_nmods; i++)
			if (!g_mods[i].skip && g_mods[i].name[0])
				g_mods[i].complete = false;

	for (size_t i = 0; i < g_nmods; i++)
		if (!g_mods[i].complete)
			g_mods[i].complete = module_pin_check(&g_mods[i]);

	/* New definitions can only come with new modules. */
	if (ps.nnew)
		dl_iterate_phdr(resolve_cb, &ps);
	if (ps.aborted)
		return -EAGAIN;

	dl_iterate_phdr(patch_cb, &pp);
	maps_free(&pp.maps);
	if (ps.aborted)
		return -EAGAIN;

	__atomic_store_n(&g_adds, ps.adds, __ATOMIC_RELAXED);
	__atomic_store_n(&g_subs, ps.subs, __ATOMIC_RELAXED);
	for (size_t i = 0; i < g_nmods; i++) {
		patched += g_mods[i].nslots;
		seen++;
	}
	if (g_ring) {
		atomic_store_explicit(&g_ring->hooks_patched, patched, memory_order_relaxed);
		atomic_store_explicit(&g_ring->modules_seen, seen, memory_order_relaxed);
	}
	return pp.err;
}

int patch__rescan(bool wait)
{
	int r = -EAGAIN;

	if (!g_active)
		return -ENOTCONN;
	if (wait)
		pthread_mutex_lock(&g_patch_lock);
	else if (pthread_mutex_trylock(&g_patch_lock) != 0)
		return -EBUSY;
	if (g_dormant) {
		pthread_mutex_unlock(&g_patch_lock);
		return -ENOTCONN;
	}
	for (int attempt = 0; attempt < 4 && r == -EAGAIN; attempt++)
		r = rescan_pass();
	pthread_mutex_unlock(&g_patch_lock);
	return r;
}

static int counters_cb(struct dl_phdr_info *info, size_t size, void *data)
{
	struct counters *c = data;

	c->adds = info->dlpi_adds;
	c->subs = info->dlpi_subs;
	return 1;
}

bool patch__modules_changed(void)
{
	struct counters c = { 0 };

	dl_iterate_phdr(counters_cb, &c);
	return c.adds != __atomic_load_n(&g_adds, __ATOMIC_RELAXED) ||
	       c.subs != __atomic_load_n(&g_subs, __ATOMIC_RELAXED);
}

static void register_impls(const struct hook_impl *t)
{
	for (; t->fn; t++)
		hook_fns[t->id] = t->fn;
}

int patch__init(void)
{
	for (unsigned i = 0; i < HOOK__COUNT; i++)
		hook_sorted[i] = (uint16_t)i;
	qsort(hook_sorted, HOOK__COUNT, sizeof(hook_sorted[0]), cmp_hook_name);
	register_impls(hook_impls_dl);
	register_impls(hook_impls_cudart);
	register_impls(hook_impls_cuda);
	register_impls(hook_impls_nccl);
	register_impls(hook_impls_ibv);
	return 0;
}

void patch__atfork_child(void)
{
	/* Only the forking thread exists; the lock may be held by a thread that is gone. */
	pthread_mutex_t fresh = PTHREAD_MUTEX_INITIALIZER;

	memcpy(&g_patch_lock, &fresh, sizeof(fresh));
	g_dormant = true;
}

void patch__set_dormant(void)
{
	pthread_mutex_lock(&g_patch_lock);
	g_dormant = true;
	pthread_mutex_unlock(&g_patch_lock);
}

/* The forked child's copy is woken (lib.c aiprof_rearm): its module table and GOT slots are
 * the parent's, still valid in the child's copy of the address space. */
void patch__rearm(void)
{
	pthread_mutex_lock(&g_patch_lock);
	g_dormant = false;
	pthread_mutex_unlock(&g_patch_lock);
}
