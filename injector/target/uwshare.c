/* SPDX-License-Identifier: MIT */
/* Unwind rules shared across the injectors of a node; see uwshare.h. */
#include <dirent.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "readfile.h"
#include "u64map.h"
#include "uwshare.h"

#define UWS_MAGIC "AIPRUWS1"
#define UWS_VERSION 1u
#define UWS_PROBES 16             /* slots tried from an address's place */
#define UWS_TMP_AGE_S 3600        /* an unfinished file this old was left by a crash */

struct uws_header {
	char magic[8];
	uint32_t version, nslots;
	uint64_t salt;
	uint8_t digest[UWS_DIGEST_LEN];
	uint8_t pad[8];
};

struct uws_slot {
	uint64_t key;             /* vaddr + 1; 0: free */
	struct uws_rule rule;
	uint32_t check;           /* 0 until the rule is complete */
	uint32_t pad;
};

_Static_assert(sizeof(struct uws_header) == 64, "uws header size");
_Static_assert(sizeof(struct uws_rule) == 48, "uws rule size");
_Static_assert(sizeof(struct uws_slot) == 64, "uws slot size");

#define UWS_FILE_BYTES (sizeof(struct uws_header) + (size_t)UWS_SLOTS * sizeof(struct uws_slot))

struct uws_file {
	uint8_t digest[UWS_DIGEST_LEN];
	void *map;                /* NULL: this module is not shared */
	struct uws_slot *slots;
	uint64_t salt;
};

struct uws_image {
	uint8_t digest[UWS_DIGEST_LEN];
	void *map;                /* NULL: none to be had */
	size_t len;
};

#define UWS_IMAGE_MAX (64ull << 20)     /* CFI sections larger than this are not copied
					 * (libtorch's are 13 MiB) */

struct uws_dir {
	char *path;
	int dfd;
	struct uws_file **files;
	size_t nfiles, capfiles;
	struct uws_image *images;
	size_t nimages, capimages;
	uint64_t image_written;   /* bytes of images this process wrote */
	struct uws_stats st;
};

static void set_why(char *why, size_t whylen, const char *fmt, const char *path, int err)
{
	if (why && whylen) {
		snprintf(why, whylen, fmt, path);
		if (err) {
			size_t n = strlen(why);

			snprintf(why + n, whylen - n, ": %s", strerror(err));
		}
	}
}

struct aged {
	char name[96];
	time_t mtime;
	uint64_t bytes;           /* blocks in use (the rule files are sparse) */
};

static int by_mtime(const void *a, const void *b)
{
	const struct aged *x = a, *y = b;

	return x->mtime < y->mtime ? -1 : x->mtime > y->mtime;
}

static bool ends_with(const char *s, const char *suffix)
{
	size_t n = strlen(s), k = strlen(suffix);

	return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* Removes what is too old, then the least recently opened beyond UWS_MAX_FILES files or
 * UWS_MAX_BYTES of disk. */
static void collect_garbage(int dfd)
{
	int fd = dup(dfd);
	DIR *dir = fd >= 0 ? fdopendir(fd) : NULL;
	struct aged *keep = NULL;
	size_t n = 0, cap = 0;
	uint64_t total = 0;
	time_t now = time(NULL);
	struct dirent *de;

	if (!dir) {
		if (fd >= 0)
			close(fd);
		return;
	}
	while ((de = readdir(dir))) {
		struct stat st;
		bool tmp = strstr(de->d_name, ".tmp.") != NULL;

		if ((!tmp && !ends_with(de->d_name, ".uws") && !ends_with(de->d_name, ".cfi")) ||
		    strlen(de->d_name) >= sizeof(keep->name))
			continue;
		if (fstatat(dfd, de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode) ||
		    st.st_uid != geteuid())
			continue;
		if (now - st.st_mtime > (tmp ? UWS_TMP_AGE_S : UWS_MAX_AGE_S)) {
			unlinkat(dfd, de->d_name, 0);
			continue;
		}
		if (tmp)
			continue;
		if (n == cap) {
			size_t nc = cap ? cap * 2 : 64;
			struct aged *nv = reallocarray(keep, nc, sizeof(*nv));

			if (!nv)
				break;
			keep = nv;
			cap = nc;
		}
		snprintf(keep[n].name, sizeof(keep[n].name), "%s", de->d_name);
		keep[n].mtime = st.st_mtime;
		keep[n++].bytes = (uint64_t)st.st_blocks * 512;
	}
	closedir(dir);
	if (n)
		qsort(keep, n, sizeof(*keep), by_mtime);
	for (size_t i = 0; i < n; i++)
		total += keep[i].bytes;
	for (size_t i = 0; i < n && (n - i > UWS_MAX_FILES || total > UWS_MAX_BYTES); i++) {
		unlinkat(dfd, keep[i].name, 0);
		total -= keep[i].bytes;
	}
	free(keep);
}

int uws_dir__open(const char *path, struct uws_dir **ret, char *why, size_t whylen)
{
	struct uws_dir *d;
	struct stat st;
	int r, dfd;

	*ret = NULL;
	r = mkdir_parents(path, 0700);
	if (r < 0) {
		set_why(why, whylen, "cannot create %s", path, -r);
		return r;
	}
	dfd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dfd < 0) {
		r = -errno;
		set_why(why, whylen, "cannot open %s", path, -r);
		return r;
	}
	if (fstat(dfd, &st) < 0 || st.st_uid != geteuid() || (st.st_mode & 022)) {
		set_why(why, whylen, "%s is not a directory of this user that only it can write "
			"(make it 0700, owned by the user aiprof runs as)", path, 0);
		close(dfd);
		return -EPERM;
	}
	d = calloc(1, sizeof(*d));
	if (!d || !(d->path = strdup(path))) {
		free(d);
		close(dfd);
		return -ENOMEM;
	}
	d->dfd = dfd;
	collect_garbage(dfd);
	*ret = d;
	return 0;
}

void uws_dir__free(struct uws_dir *d)
{
	if (!d)
		return;
	for (size_t i = 0; i < d->nfiles; i++) {
		if (d->files[i]->map)
			munmap(d->files[i]->map, UWS_FILE_BYTES);
		free(d->files[i]);
	}
	free(d->files);
	for (size_t i = 0; i < d->nimages; i++)
		if (d->images[i].map)
			munmap(d->images[i].map, d->images[i].len);
	free(d->images);
	if (d->dfd >= 0)
		close(d->dfd);
	free(d->path);
	free(d);
}

const char *uws_dir__path(const struct uws_dir *d)
{
	return d->path;
}

void uws_dir__stats(const struct uws_dir *d, struct uws_stats *ret)
{
	*ret = d->st;
}

static void hex_name(const uint8_t digest[UWS_DIGEST_LEN], char *out, const char *suffix)
{
	static const char hex[] = "0123456789abcdef";

	for (int i = 0; i < UWS_DIGEST_LEN; i++) {
		out[2 * i] = hex[digest[i] >> 4];
		out[2 * i + 1] = hex[digest[i] & 15];
	}
	strcpy(out + 2 * UWS_DIGEST_LEN, suffix);
}

/* All of buf at off: 0, or -errno (-ENOSPC: a full disk, also for a short write). */
static int pwrite_all(int fd, const void *buf, size_t len, uint64_t off)
{
	ssize_t n = pwrite(fd, buf, len, (off_t)off);

	if (n < 0)
		return -errno;
	return (size_t)n == len ? 0 : -ENOSPC;
}

/* A file of ours, not a link, readable by nobody else. */
static bool ours(int fd, struct stat *st)
{
	return fstat(fd, st) == 0 && S_ISREG(st->st_mode) && st->st_uid == geteuid() &&
	       !(st->st_mode & 077);
}

/*
 * The file `name` written by fill() under a temporary name, then linked into place; the
 * winner's fd if another injector linked its own first. -errno on failure.
 */
static int create_file(struct uws_dir *d, const char *name, int (*fill)(int fd, void *arg),
		       void *arg)
{
	char tmp[128];
	int fd, r;

	snprintf(tmp, sizeof(tmp), "%.16s.tmp.%d", name, (int)getpid());
	fd = openat(d->dfd, tmp, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return -errno;
	r = fill(fd, arg);
	if (r < 0) {
		unlinkat(d->dfd, tmp, 0);
		close(fd);
		return r;
	}
	r = linkat(d->dfd, tmp, d->dfd, name, 0) < 0 ? -errno : 0;
	unlinkat(d->dfd, tmp, 0);
	if (r == 0)
		return fd;
	close(fd);
	if (r != -EEXIST)
		return r;
	fd = openat(d->dfd, name, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
	return fd < 0 ? -errno : fd;
}

/*
 * Every block of a rules file allocated now: slots are written through a shared map, and a
 * store into a hole that the disk has no room for is a SIGBUS, not an error. A file whose
 * blocks are all there (what this writes, what an injector of this version made) is left
 * as it is. -errno (-ENOSPC: a full disk) when the room cannot be had.
 */
static int reserve(int fd)
{
	struct stat st;
	int r;

	if (fstat(fd, &st) == 0 && (uint64_t)st.st_size == UWS_FILE_BYTES &&
	    (uint64_t)st.st_blocks * 512 >= UWS_FILE_BYTES)
		return 0;
	r = posix_fallocate(fd, 0, (off_t)UWS_FILE_BYTES);
	return r ? -r : 0;
}

static int fill_rules(int fd, void *arg)
{
	const uint8_t *digest = arg;
	struct uws_header h = { .version = UWS_VERSION, .nslots = UWS_SLOTS };
	int r;

	memcpy(h.magic, UWS_MAGIC, sizeof(h.magic));
	memcpy(h.digest, digest, UWS_DIGEST_LEN);
	if (getrandom(&h.salt, sizeof(h.salt), 0) != sizeof(h.salt))
		h.salt = (uint64_t)time(NULL) * 0x9e3779b97f4a7c15ull ^ (uint64_t)getpid();
	r = reserve(fd);
	if (r < 0)
		return r;
	return pwrite_all(fd, &h, sizeof(h), 0);
}

/* Maps the file on fd if it is ours, the size it must be, and its header matches; *err:
 * why not, when the disk is why (the file itself is fine). */
static void *map_file(int fd, const uint8_t digest[UWS_DIGEST_LEN], uint64_t *ret_salt, int *err)
{
	const struct uws_header *h;
	struct stat st;
	void *map;

	if (!ours(fd, &st) || (uint64_t)st.st_size != UWS_FILE_BYTES)
		return NULL;
	*err = reserve(fd);       /* a sparse file (an older injector's) would fault */
	if (*err < 0)
		return NULL;
	map = mmap(NULL, UWS_FILE_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (map == MAP_FAILED)
		return NULL;
	h = map;
	if (memcmp(h->magic, UWS_MAGIC, sizeof(h->magic)) || h->version != UWS_VERSION ||
	    h->nslots != UWS_SLOTS || memcmp(h->digest, digest, UWS_DIGEST_LEN)) {
		munmap(map, UWS_FILE_BYTES);
		return NULL;
	}
	*ret_salt = h->salt;
	futimens(fd, NULL);       /* opened now: garbage collection keeps it */
	return map;
}

struct uws_file *uws_dir__file(struct uws_dir *d, const uint8_t digest[UWS_DIGEST_LEN])
{
	char name[2 * UWS_DIGEST_LEN + 8];
	struct uws_file *f;
	int fd, err = 0;

	for (size_t i = 0; i < d->nfiles; i++)
		if (memcmp(d->files[i]->digest, digest, UWS_DIGEST_LEN) == 0)
			return d->files[i]->map ? d->files[i] : NULL;
	if (d->nfiles == d->capfiles) {
		size_t nc = d->capfiles ? d->capfiles * 2 : 16;
		struct uws_file **nv = reallocarray(d->files, nc, sizeof(*nv));

		if (!nv)
			return NULL;
		d->files = nv;
		d->capfiles = nc;
	}
	f = calloc(1, sizeof(*f));
	if (!f)
		return NULL;
	memcpy(f->digest, digest, UWS_DIGEST_LEN);
	d->files[d->nfiles++] = f;      /* kept even when unusable: not tried again */
	hex_name(digest, name, ".uws");
	for (int tries = 0; tries < 2 && !f->map && err == 0; tries++) {
		fd = openat(d->dfd, name, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
		if (fd < 0 && errno == ENOENT)
			fd = create_file(d, name, fill_rules, (void *)digest);
		else if (fd < 0)
			fd = -errno;
		if (fd < 0) {
			err = fd;
			break;
		}
		f->map = map_file(fd, digest, &f->salt, &err);
		close(fd);
		/* another version's (or a damaged) file of ours: made anew once; who has the
		 * old one mapped keeps it */
		if (!f->map && err == 0 && tries == 0 && unlinkat(d->dfd, name, 0) < 0)
			break;
	}
	if (!f->map) {
		d->st.files_failed++;
		if (err < 0)
			d->st.last_errno = -err;
		return NULL;
	}
	f->slots = (struct uws_slot *)((char *)f->map + sizeof(struct uws_header));
	d->st.files++;
	d->st.mapped_bytes += UWS_FILE_BYTES;
	return f;
}

static uint32_t check_of(uint64_t salt, uint64_t key, const struct uws_rule *r)
{
	uint64_t w[sizeof(*r) / 8], h = u64_hash2(salt, key);
	uint32_t c;

	memcpy(w, r, sizeof(w));
	for (size_t i = 0; i < sizeof(w) / 8; i++)
		h = u64_hash2(h, w[i]);
	c = (uint32_t)(h ^ h >> 32);
	return c ? c : 1;
}

bool uws_rule_valid(const struct uws_rule *r)
{
	if (r->zero || r->zero2 || (r->flags & ~(UWS_NO_CFI | UWS_SIGNAL)))
		return false;
	if (r->flags & UWS_NO_CFI)
		return true;
	return r->cfa_reg < UWS_NREGS;
}

static size_t place_of(const struct uws_file *f, uint64_t key)
{
	return (size_t)(u64_hash2(f->salt, key) & (UWS_SLOTS - 1));
}

bool uws_file__get(struct uws_dir *d, struct uws_file *f, uint64_t vaddr, struct uws_rule *ret)
{
	uint64_t key = vaddr + 1;
	size_t at = place_of(f, key);

	for (int i = 0; i < UWS_PROBES; i++, at = (at + 1) & (UWS_SLOTS - 1)) {
		struct uws_slot *s = &f->slots[at];
		uint64_t k = __atomic_load_n(&s->key, __ATOMIC_ACQUIRE);
		uint32_t c;

		if (k == 0)
			break;
		if (k != key)
			continue;
		c = __atomic_load_n(&s->check, __ATOMIC_ACQUIRE);
		memcpy(ret, &s->rule, sizeof(*ret));
		if (c != 0 && c == check_of(f->salt, key, ret) && uws_rule_valid(ret)) {
			d->st.hits++;
			return true;
		}
		d->st.rejected++;
		return false;
	}
	d->st.misses++;
	return false;
}

bool uws_file__put(struct uws_dir *d, struct uws_file *f, uint64_t vaddr,
		   const struct uws_rule *rule)
{
	uint64_t key = vaddr + 1;
	size_t at = place_of(f, key);

	if (vaddr == UINT64_MAX)
		return false;
	for (int i = 0; i < UWS_PROBES; i++, at = (at + 1) & (UWS_SLOTS - 1)) {
		struct uws_slot *s = &f->slots[at];
		uint64_t expected = 0;

		if (__atomic_compare_exchange_n(&s->key, &expected, key, false, __ATOMIC_ACQ_REL,
						__ATOMIC_ACQUIRE)) {
			memcpy(&s->rule, rule, sizeof(*rule));
			__atomic_store_n(&s->check, check_of(f->salt, key, rule), __ATOMIC_RELEASE);
			d->st.inserts++;
			return true;
		}
		if (expected == key) {
			/* another injector took it first: there now if its row holds (a
			 * damaged one does not: the caller keeps its own then) */
			struct uws_rule cur;
			uint32_t c = __atomic_load_n(&s->check, __ATOMIC_ACQUIRE);

			memcpy(&cur, &s->rule, sizeof(cur));
			return c != 0 && c == check_of(f->salt, key, &cur) && uws_rule_valid(&cur);
		}
	}
	d->st.full++;
	return false;
}

/* ---- CFI section images ------------------------------------------------------------------- */

struct image_src {
	int fd;
	const struct uws_section *secs;
	size_t n;
};

static int copy_range(int to, uint64_t to_off, int from, uint64_t from_off, uint64_t len)
{
	char buf[65536];
	int r;

	while (len) {
		size_t want = len < sizeof(buf) ? (size_t)len : sizeof(buf);
		ssize_t got = pread(from, buf, want, (off_t)from_off);

		if (got <= 0)
			return got < 0 ? -errno : -EIO;
		r = pwrite_all(to, buf, (size_t)got, to_off);
		if (r < 0)
			return r;
		from_off += (uint64_t)got;
		to_off += (uint64_t)got;
		len -= (uint64_t)got;
	}
	return 0;
}

/* An ELF file of the sections alone: header, their bytes, .shstrtab, section headers. */
static int fill_image(int fd, void *arg)
{
	const struct image_src *src = arg;
	Elf64_Ehdr eh = { .e_type = ET_DYN, .e_machine = EM_X86_64, .e_version = EV_CURRENT,
			  .e_ehsize = sizeof(Elf64_Ehdr), .e_shentsize = sizeof(Elf64_Shdr) };
	Elf64_Shdr sh[8] = { { 0 } };
	char names[256] = "";
	size_t nlen = 1;
	uint64_t at = sizeof(eh);
	int r;

	if (src->n + 2 > sizeof(sh) / sizeof(sh[0]))
		return -E2BIG;
	memcpy(eh.e_ident, ELFMAG, SELFMAG);
	eh.e_ident[EI_CLASS] = ELFCLASS64;
	eh.e_ident[EI_DATA] = ELFDATA2LSB;
	eh.e_ident[EI_VERSION] = EV_CURRENT;
	for (size_t i = 0; i < src->n; i++) {
		const struct uws_section *x = &src->secs[i];
		size_t k = strlen(x->name) + 1;

		if (nlen + k + sizeof(".shstrtab") > sizeof(names))
			return -E2BIG;
		at = (at + 15) & ~15ull;
		sh[i + 1] = (Elf64_Shdr){ .sh_name = (uint32_t)nlen, .sh_type = x->type,
					  .sh_flags = x->flags, .sh_addr = x->addr, .sh_offset = at,
					  .sh_size = x->size, .sh_addralign = x->align };
		memcpy(names + nlen, x->name, k);
		nlen += k;
		r = copy_range(fd, at, src->fd, x->offset, x->size);
		if (r < 0)
			return r;
		at += x->size;
	}
	sh[src->n + 1] = (Elf64_Shdr){ .sh_name = (uint32_t)nlen, .sh_type = SHT_STRTAB,
				       .sh_offset = at, .sh_addralign = 1 };
	memcpy(names + nlen, ".shstrtab", sizeof(".shstrtab"));
	nlen += sizeof(".shstrtab");
	sh[src->n + 1].sh_size = nlen;
	r = pwrite_all(fd, names, nlen, at);
	if (r < 0)
		return r;
	at = (at + nlen + 7) & ~7ull;
	eh.e_shoff = at;
	eh.e_shnum = (uint16_t)(src->n + 2);
	eh.e_shstrndx = (uint16_t)(src->n + 1);
	r = pwrite_all(fd, sh, eh.e_shnum * sizeof(*sh), at);
	return r < 0 ? r : pwrite_all(fd, &eh, sizeof(eh), 0);
}

/* Maps an image file of ours whose header and section table lie inside it. */
static void *map_image(int fd, size_t *ret_len)
{
	const Elf64_Ehdr *eh;
	struct stat st;
	void *map;

	if (!ours(fd, &st) || st.st_size < (off_t)sizeof(Elf64_Ehdr) ||
	    (uint64_t)st.st_size > UWS_IMAGE_MAX)
		return NULL;
	/* private and writable: libelf may convert in place (it does not for a native ELF);
	 * the pages it only reads stay the page cache's */
	map = mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
	if (map == MAP_FAILED)
		return NULL;
	eh = map;
	if (memcmp(eh->e_ident, ELFMAG, SELFMAG) || eh->e_ident[EI_CLASS] != ELFCLASS64 ||
	    eh->e_shentsize != sizeof(Elf64_Shdr) || eh->e_shoff > (uint64_t)st.st_size ||
	    (uint64_t)eh->e_shnum * sizeof(Elf64_Shdr) > (uint64_t)st.st_size - eh->e_shoff) {
		munmap(map, (size_t)st.st_size);
		return NULL;
	}
	futimens(fd, NULL);
	*ret_len = (size_t)st.st_size;
	return map;
}

const void *uws_dir__image(struct uws_dir *d, const uint8_t digest[UWS_DIGEST_LEN], int fd,
			   const struct uws_section *secs, size_t n, size_t *ret_len)
{
	struct image_src src = { .fd = fd, .secs = secs, .n = n };
	char name[2 * UWS_DIGEST_LEN + 8];
	struct uws_image *im;
	uint64_t total = 0;
	bool built = false;
	int ifd;

	for (size_t i = 0; i < d->nimages; i++)
		if (memcmp(d->images[i].digest, digest, UWS_DIGEST_LEN) == 0) {
			*ret_len = d->images[i].len;
			return d->images[i].map;
		}
	if (d->nimages == d->capimages) {
		size_t nc = d->capimages ? d->capimages * 2 : 16;
		struct uws_image *nv = reallocarray(d->images, nc, sizeof(*nv));

		if (!nv)
			return NULL;
		d->images = nv;
		d->capimages = nc;
	}
	im = &d->images[d->nimages++];      /* kept even when unusable: not tried again */
	*im = (struct uws_image){ 0 };
	memcpy(im->digest, digest, UWS_DIGEST_LEN);
	for (size_t i = 0; i < n; i++)
		total += secs[i].size;
	/* a target's own modules decide these sizes: a bound per image and per run */
	if (!n || total > UWS_IMAGE_MAX - 4096 || d->image_written + total > UWS_WRITE_MAX)
		return NULL;
	hex_name(digest, name, ".cfi");
	for (int tries = 0; tries < 2 && !im->map; tries++) {
		ifd = openat(d->dfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
		if (ifd < 0 && errno == ENOENT && fd >= 0) {
			ifd = create_file(d, name, fill_image, &src);
			built = ifd >= 0;
		}
		if (ifd < 0) {
			d->st.images_failed++;
			if (ifd != -1)
				d->st.last_errno = -ifd;
			return NULL;
		}
		im->map = map_image(ifd, &im->len);
		close(ifd);
		if (!im->map && tries == 0 && unlinkat(d->dfd, name, 0) < 0)
			break;
	}
	if (!im->map)
		return NULL;
	d->st.images++;
	d->st.image_bytes += im->len;
	d->st.images_built += built;
	if (built)
		d->image_written += im->len;
	*ret_len = im->len;
	return im->map;
}
