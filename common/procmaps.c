/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include "procmaps.h"
#include "readfile.h"

#define DELETED_SUFFIX " (deleted)"
#define MAPS_MAX_BYTES (256u << 20)  /* far beyond any real process; stops runaway reads */

/* A cursor over one line: [p, end). */
struct cursor {
	const char *p, *end;
};

static int parse_hex(struct cursor *c, uint64_t *ret)
{
	uint64_t v = 0;
	const char *start = c->p;

	for (; c->p < c->end; c->p++) {
		char ch = *c->p;
		unsigned d;

		if (ch >= '0' && ch <= '9')
			d = (unsigned)(ch - '0');
		else if (ch >= 'a' && ch <= 'f')
			d = (unsigned)(ch - 'a' + 10);
		else if (ch >= 'A' && ch <= 'F')
			d = (unsigned)(ch - 'A' + 10);
		else
			break;
		if (v > (UINT64_MAX >> 4))
			return -EINVAL;
		v = (v << 4) | d;
	}
	if (c->p == start)
		return -EINVAL;
	*ret = v;
	return 0;
}

static int parse_dec(struct cursor *c, uint64_t *ret)
{
	uint64_t v = 0;
	const char *start = c->p;

	for (; c->p < c->end && *c->p >= '0' && *c->p <= '9'; c->p++) {
		unsigned d = (unsigned)(*c->p - '0');

		if (v > (UINT64_MAX - d) / 10)
			return -EINVAL;
		v = v * 10 + d;
	}
	if (c->p == start)
		return -EINVAL;
	*ret = v;
	return 0;
}

static int expect_char(struct cursor *c, char ch)
{
	if (c->p >= c->end || *c->p != ch)
		return -EINVAL;
	c->p++;
	return 0;
}

/* One or more blanks. */
static int skip_blanks(struct cursor *c)
{
	const char *start = c->p;

	while (c->p < c->end && (*c->p == ' ' || *c->p == '\t'))
		c->p++;
	return c->p == start ? -EINVAL : 0;
}

static int parse_perms(struct cursor *c, unsigned *ret_prot, bool *ret_shared)
{
	unsigned prot = 0;

	if (c->end - c->p < 4)
		return -EINVAL;
	if (c->p[0] == 'r')
		prot |= PROT_READ;
	else if (c->p[0] != '-')
		return -EINVAL;
	if (c->p[1] == 'w')
		prot |= PROT_WRITE;
	else if (c->p[1] != '-')
		return -EINVAL;
	if (c->p[2] == 'x')
		prot |= PROT_EXEC;
	else if (c->p[2] != '-')
		return -EINVAL;
	if (c->p[3] != 's' && c->p[3] != 'p')
		return -EINVAL;
	*ret_shared = c->p[3] == 's';
	*ret_prot = prot;
	c->p += 4;
	return 0;
}

/* Parses one line (without its '\n') into *e; e->path is malloc'd or NULL. */
static int parse_line(const char *line, size_t len, struct maps_entry *e)
{
	struct cursor c = { line, line + len };
	struct maps_entry tmp = { 0 };
	uint64_t major, minor;
	int r;

	if ((r = parse_hex(&c, &tmp.start)) < 0 || (r = expect_char(&c, '-')) < 0 ||
	    (r = parse_hex(&c, &tmp.end)) < 0 || (r = skip_blanks(&c)) < 0 ||
	    (r = parse_perms(&c, &tmp.prot, &tmp.shared)) < 0 || (r = skip_blanks(&c)) < 0 ||
	    (r = parse_hex(&c, &tmp.offset)) < 0 || (r = skip_blanks(&c)) < 0 ||
	    (r = parse_hex(&c, &major)) < 0 || (r = expect_char(&c, ':')) < 0 ||
	    (r = parse_hex(&c, &minor)) < 0 || (r = skip_blanks(&c)) < 0 ||
	    (r = parse_dec(&c, &tmp.inode)) < 0)
		return r;
	if (tmp.start >= tmp.end || major > UINT32_MAX || minor > UINT32_MAX)
		return -EINVAL;
	tmp.dev_major = (uint32_t)major;
	tmp.dev_minor = (uint32_t)minor;

	if (c.p < c.end) {
		/* The path is everything after the padding, spaces included. */
		if ((r = skip_blanks(&c)) < 0)
			return r;
		if (c.p < c.end) {
			tmp.path = strndup(c.p, (size_t)(c.end - c.p));
			if (!tmp.path)
				return -ENOMEM;
		}
	}
	*e = tmp;
	return 0;
}

static int cmp_entry(const void *a, const void *b)
{
	const struct maps_entry *x = a, *y = b;

	if (x->start != y->start)
		return x->start < y->start ? -1 : 1;
	if (x->end != y->end)
		return x->end < y->end ? -1 : 1;
	return 0;
}

void maps__free(struct maps *m)
{
	if (!m)
		return;
	for (size_t i = 0; i < m->n; i++)
		free(m->v[i].path);
	free(m->v);
	free(m);
}

int maps__parse(const char *text, size_t len, struct maps **ret)
{
	struct maps *m = NULL;
	size_t cap = 0;
	bool sorted = true;
	const char *p = text, *end = text + len;
	int r;

	if (!ret || (!text && len))
		return -EINVAL;
	/* A NUL can't be in any field or path; refusing it up front keeps paths C strings. */
	if (len && memchr(text, '\0', len))
		return -EINVAL;

	m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;

	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p));
		size_t linelen = nl ? (size_t)(nl - p) : (size_t)(end - p);

		if (m->n == cap) {
			size_t ncap = cap ? cap * 2 : 64;
			struct maps_entry *nv = reallocarray(m->v, ncap, sizeof(*nv));

			if (!nv) {
				r = -ENOMEM;
				goto fail;
			}
			m->v = nv;
			cap = ncap;
		}
		r = parse_line(p, linelen, &m->v[m->n]);
		if (r < 0)
			goto fail;
		if (m->n > 0 && cmp_entry(&m->v[m->n - 1], &m->v[m->n]) > 0)
			sorted = false;
		m->n++;
		p += linelen + (nl ? 1 : 0);
	}

	/* The kernel prints in address order, without overlaps; a map read in several chunks
	 * while it changed may be neither. Order is restored; overlaps are refused, so that
	 * maps__find_addr() has one answer (maps__read() reads again). */
	if (!sorted)
		qsort(m->v, m->n, sizeof(*m->v), cmp_entry);
	for (size_t i = 1; i < m->n; i++) {
		if (m->v[i].start < m->v[i - 1].end) {
			r = -EINVAL;
			goto fail;
		}
	}
	*ret = m;
	return 0;

fail:
	maps__free(m);
	return r;
}

/* One read of the whole file from its start, parsed. */
static int maps_read_once(int fd, struct maps **ret)
{
	char *buf = NULL;
	size_t len = 0;
	int r;

	if (lseek(fd, 0, SEEK_SET) < 0)
		return -errno;
	r = readfile_fd(fd, MAPS_MAX_BYTES, 0, &buf, &len);
	if (r < 0)
		return r;
	r = maps__parse(buf, len, ret);
	free(buf);
	return r;
}

int maps__read(pid_t pid, struct maps **ret)
{
	char path[64];
	int fd, r;

	if (pid <= 0 || !ret)
		return -EINVAL;
	snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	/* -EINVAL from a kernel-written file means it changed while we read it. */
	for (int attempt = 0; attempt < 3; attempt++) {
		r = maps_read_once(fd, ret);
		if (r != -EINVAL)
			break;
	}
	close(fd);
	return r;
}

const struct maps_entry *maps__find_addr(const struct maps *m, uint64_t addr)
{
	size_t lo = 0, hi;

	if (!m)
		return NULL;
	/* Last entry with start <= addr. */
	hi = m->n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (m->v[mid].start <= addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo == 0)
		return NULL;
	if (addr < m->v[lo - 1].end)
		return &m->v[lo - 1];
	return NULL;
}

bool maps_entry__is_file(const struct maps_entry *e)
{
	return e && e->path && e->path[0] == '/';
}

bool maps_entry__same_file(const struct maps_entry *a, const struct maps_entry *b)
{
	return a->path && b->path && a->inode == b->inode && a->dev_major == b->dev_major &&
	       a->dev_minor == b->dev_minor && strcmp(a->path, b->path) == 0;
}

bool maps_path__matches(const char *path, const char *glob)
{
	const char *base, *slash;
	size_t blen, slen = sizeof(DELETED_SUFFIX) - 1;
	char tmp[NAME_MAX + 1];

	if (!path || !glob)
		return false;
	slash = strrchr(path, '/');
	base = slash ? slash + 1 : path;
	if (fnmatch(glob, base, 0) == 0)
		return true;
	blen = strlen(base);
	if (blen <= slen || strcmp(base + blen - slen, DELETED_SUFFIX) != 0 ||
	    blen - slen >= sizeof(tmp))
		return false;
	memcpy(tmp, base, blen - slen);
	tmp[blen - slen] = '\0';
	return fnmatch(glob, tmp, 0) == 0;
}

int maps__next_module(const struct maps *m, size_t *pos, struct maps_module *ret)
{
	size_t i, j, last;

	if (!m || !pos || !ret)
		return -EINVAL;
	for (i = *pos; i < m->n && !maps_entry__is_file(&m->v[i]); i++)
		;
	if (i >= m->n)
		return -ENOENT;

	last = i;
	for (j = i + 1; j < m->n; j++) {
		const struct maps_entry *e = &m->v[j];

		if (!e->path)
			continue;  /* .bss and friends */
		if (!maps_entry__same_file(&m->v[i], e) || e->offset == 0)
			break;     /* another file, or another load of this one */
		last = j;
	}
	*ret = (struct maps_module) {
		.path = m->v[i].path,
		.first = i,
		.last = last,
		.load_start = m->v[i].start,
		.start = m->v[i].start,
		.end = m->v[last].end,
	};
	*pos = last + 1;
	return 0;
}

int maps__find_module(const struct maps *m, const char *glob, struct maps_module *ret)
{
	struct maps_module mod;
	size_t pos = 0;

	if (!m || !glob || !ret)
		return -EINVAL;
	while (maps__next_module(m, &pos, &mod) == 0) {
		if (maps_path__matches(mod.path, glob)) {
			*ret = mod;
			return 0;
		}
	}
	return -ENOENT;
}
