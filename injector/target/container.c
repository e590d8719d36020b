/* SPDX-License-Identifier: MIT */
/* A container's processes from /proc/PID/cgroup, and which of them to profile. */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "procmaps.h"
#include "readfile.h"
#include "container.h"

static const char *const id_prefixes[] = { "containerd://", "cri-o://", "docker://" };

static bool is_hex64(const char *s, size_t n)
{
	if (n != 64)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return false;
	return true;
}

int container_id__parse(const char *arg, char *id, size_t idlen, char *why, size_t whylen)
{
	const char *s = arg, *sep;
	size_t n;

	if (whylen)
		why[0] = 0;
	sep = strstr(arg, "://");
	if (sep) {
		bool known = false;

		for (size_t i = 0; i < sizeof(id_prefixes) / sizeof(id_prefixes[0]); i++)
			if (strncmp(arg, id_prefixes[i], strlen(id_prefixes[i])) == 0) {
				known = true;
				s = arg + strlen(id_prefixes[i]);
			}
		if (!known) {
			snprintf(why, whylen, "--container-id '%.64s': unknown runtime '%.*s://'; "
				 "give the id as the pod's status.containerStatuses[].containerID "
				 "shows it (containerd://, cri-o:// or docker://) or the bare id",
				 arg, (int)(sep - arg > 32 ? 32 : sep - arg), arg);
			return -EINVAL;
		}
		if (!is_hex64(s, strlen(s))) {
			snprintf(why, whylen, "--container-id '%.100s': after '%.*s' a container id "
				 "is 64 lower-case hex digits (as in the pod's "
				 "status.containerStatuses[].containerID)", arg,
				 (int)(s - arg), arg);
			return -EINVAL;
		}
	}
	n = strlen(s);
	if (n == 0 || n > CONTAINER_ID_MAX || n + 1 > idlen || strcmp(s, ".") == 0 ||
	    strcmp(s, "..") == 0 || strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
					  "0123456789_+.-") != n) {
		snprintf(why, whylen, "--container-id '%.100s'%s is not a container id: use "
			 "<runtime>://<64 hex digits> as the pod's status shows it, or a bare id of "
			 "letters, digits and _+.- (at most %d)", arg, n > 100 ? "..." : "",
			 CONTAINER_ID_MAX);
		return -EINVAL;
	}
	memcpy(id, s, n + 1);
	return 0;
}

int cgroup_line__parse(const char *line, size_t len, struct cgroup_line *ret)
{
	const char *c1 = memchr(line, ':', len), *c2;
	char *end;
	char num[24];

	if (!c1 || c1 == line || (size_t)(c1 - line) >= sizeof(num))
		return -EINVAL;
	c2 = memchr(c1 + 1, ':', len - (size_t)(c1 + 1 - line));
	if (!c2)
		return -EINVAL;
	memcpy(num, line, (size_t)(c1 - line));
	num[c1 - line] = 0;
	if (!isdigit((unsigned char)num[0]))
		return -EINVAL;
	errno = 0;
	ret->hierarchy = strtoul(num, &end, 10);
	if (errno || *end)
		return -EINVAL;
	ret->controllers = c1 + 1;
	ret->controllers_len = (size_t)(c2 - c1 - 1);
	ret->path = c2 + 1;
	ret->path_len = len - (size_t)(c2 + 1 - line);
	if (ret->path_len == 0 || ret->path[0] != '/' || memchr(ret->path, 0, ret->path_len))
		return -EINVAL;
	return 0;
}

static bool component_names(const char *c, size_t n, const char *id, size_t idn)
{
	static const char scope[] = ".scope";
	const size_t sl = sizeof(scope) - 1;

	if (n == idn && memcmp(c, id, n) == 0)
		return true;
	if (n > sl && memcmp(c + n - sl, scope, sl) == 0)
		n -= sl;
	if (n < idn + 2 || c[n - idn - 1] != '-' || memcmp(c + n - idn, id, idn) != 0)
		return false;
	/* CRI-O's container monitor runs next to the container, not in it */
	if (n >= idn + 7 && memcmp(c + n - idn - 7, "conmon", 6) == 0)
		return false;
	return true;
}

bool cgroup_path__names_container(const char *path, size_t len, const char *id)
{
	size_t idn = strlen(id), i = 0;

	if (idn == 0)
		return false;
	while (i < len) {
		size_t j = i;

		while (j < len && path[j] != '/')
			j++;
		if (j > i && component_names(path + i, j - i, id, idn))
			return true;
		i = j + 1;
	}
	return false;
}

/* Calls fn for each line of text; stops at the first non-zero return. Empty lines (the
 * trailing newline) are skipped. -EINVAL for a malformed line. */
static int each_line(const char *text, size_t len,
		     int (*fn)(const struct cgroup_line *l, void *ctx), void *ctx)
{
	size_t i = 0;

	while (i < len) {
		const char *nl = memchr(text + i, '\n', len - i);
		size_t n = nl ? (size_t)(nl - (text + i)) : len - i;
		struct cgroup_line l;
		int r;

		if (n) {
			if (cgroup_line__parse(text + i, n, &l) < 0)
				return -EINVAL;
			r = fn(&l, ctx);
			if (r)
				return r;
		}
		i += n + 1;
	}
	return 0;
}

static int line_names_id(const struct cgroup_line *l, void *ctx)
{
	return cgroup_path__names_container(l->path, l->path_len, ctx) ? 1 : 0;
}

int cgroup_file__in_container(const char *text, size_t len, const char *id)
{
	return each_line(text, len, line_names_id, (void *)id);
}

struct key_pick {
	const struct cgroup_line *chosen;
	struct cgroup_line first, systemd, v2;
	bool have_first, have_systemd, have_v2;
};

static int line_key(const struct cgroup_line *l, void *ctx)
{
	struct key_pick *k = ctx;

	if (!k->have_first) {
		k->first = *l;
		k->have_first = true;
	}
	if (l->hierarchy == 0 && l->controllers_len == 0 && !k->have_v2) {
		k->v2 = *l;
		k->have_v2 = true;
	}
	if (l->controllers_len == 12 && memcmp(l->controllers, "name=systemd", 12) == 0 &&
	    !k->have_systemd) {
		k->systemd = *l;
		k->have_systemd = true;
	}
	return 0;
}

int cgroup_file__key(const char *text, size_t len, char *key, size_t keylen)
{
	struct key_pick k = { 0 };
	const struct cgroup_line *l;
	int r = each_line(text, len, line_key, &k);

	if (r < 0)
		return r;
	l = k.have_v2 ? &k.v2 : k.have_systemd ? &k.systemd : k.have_first ? &k.first : NULL;
	if (!l)
		return -EINVAL;
	if (l->path_len + 1 > keylen)
		return -ENAMETOOLONG;
	memcpy(key, l->path, l->path_len);
	key[l->path_len] = 0;
	return 0;
}

static int cmp_pid(const void *a, const void *b)
{
	pid_t x = *(const pid_t *)a, y = *(const pid_t *)b;

	return (x > y) - (x < y);
}

struct pidvec {
	pid_t *v;
	size_t n, cap;
};

static int pidvec_push(struct pidvec *p, pid_t pid)
{
	if (p->n == p->cap) {
		size_t cap = p->cap ? p->cap * 2 : 16;
		pid_t *v = realloc(p->v, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		p->v = v;
		p->cap = cap;
	}
	p->v[p->n++] = pid;
	return 0;
}

/* Calls keep(pid, cgroup text) for each process under proc_root; collects those it keeps. */
static int scan(const char *proc_root, bool (*keep)(const char *root, pid_t pid,
						   const char *cg, size_t len, void *ctx),
		void *ctx, pid_t **ret, size_t *n)
{
	DIR *d = opendir(proc_root);
	struct pidvec out = { 0 };
	struct dirent *de;
	char path[PATH_MAX], cg[8192];
	int err = 0;

	if (!d)
		return -errno;
	while ((de = readdir(d))) {
		char *end;
		long pid = strtol(de->d_name, &end, 10);
		ssize_t len;

		if (*end || pid <= 0 || pid > INT_MAX)
			continue;
		snprintf(path, sizeof(path), "%s/%ld/cgroup", proc_root, pid);
		len = readfile_buf(path, cg, sizeof(cg));
		if (len < 0)
			continue;  /* gone meanwhile */
		if (keep(proc_root, (pid_t)pid, cg, (size_t)len, ctx)) {
			err = pidvec_push(&out, (pid_t)pid);
			if (err)
				break;
		}
	}
	closedir(d);
	if (err) {
		free(out.v);
		return err;
	}
	if (out.n)
		qsort(out.v, out.n, sizeof(*out.v), cmp_pid);
	*ret = out.v;
	*n = out.n;
	return 0;
}

static bool keep_in_container(const char *root, pid_t pid, const char *cg, size_t len,
			      void *ctx)
{
	(void)root;
	(void)pid;
	return cgroup_file__in_container(cg, len, ctx) == 1;
}

int container__find_by_id(const char *proc_root, const char *id, pid_t **ret, size_t *n)
{
	return scan(proc_root, keep_in_container, (void *)id, ret, n);
}

void container__cmdline(const char *proc_root, pid_t pid, char *buf, size_t len)
{
	char path[PATH_MAX];
	ssize_t n;

	snprintf(path, sizeof(path), "%s/%d/cmdline", proc_root, (int)pid);
	n = readfile_buf(path, buf, len);
	if (n < 0) {
		buf[0] = 0;
		return;
	}
	while (n > 0 && buf[n - 1] == 0)
		n--;
	for (ssize_t i = 0; i < n; i++)
		if (buf[i] == 0)
			buf[i] = ' ';
	buf[n] = 0;
}

static void read_comm(const char *proc_root, pid_t pid, char *buf, size_t len)
{
	char path[PATH_MAX];
	ssize_t n;

	snprintf(path, sizeof(path), "%s/%d/comm", proc_root, (int)pid);
	n = readfile_buf(path, buf, len);
	if (n < 0)
		n = 0;
	while (n > 0 && buf[n - 1] == '\n')
		n--;
	buf[n] = 0;
}

struct others_ctx {
	char own[4096];
	pid_t self;
};

static bool keep_other(const char *root, pid_t pid, const char *cg, size_t len, void *ctx)
{
	struct others_ctx *o = ctx;
	char key[4096], comm[32], cmd[8];

	if (pid == o->self)
		return false;
	if (cgroup_file__key(cg, len, key, sizeof(key)) == 0 && strcmp(key, o->own) == 0)
		return false;
	read_comm(root, pid, comm, sizeof(comm));
	if (strcmp(comm, "pause") == 0)
		return false;
	container__cmdline(root, pid, cmd, sizeof(cmd));
	return cmd[0] != 0;
}

int container__find_others(const char *proc_root, pid_t **ret, size_t *n)
{
	struct others_ctx o = { .self = getpid() };
	char path[PATH_MAX], cg[8192];
	ssize_t len;
	int r;

	snprintf(path, sizeof(path), "%s/self/cgroup", proc_root);
	len = readfile_buf(path, cg, sizeof(cg));
	if (len < 0)
		return (int)len;
	r = cgroup_file__key(cg, (size_t)len, o.own, sizeof(o.own));
	if (r < 0)
		return r;
	return scan(proc_root, keep_other, &o, ret, n);
}

const char *container_rule__name(enum container_rule r)
{
	switch (r) {
	case CONTAINER_RULE_MATCH: return "match";
	case CONTAINER_RULE_CUDA: return "cuda";
	case CONTAINER_RULE_MAIN: return "main";
	}
	return "?";
}

static bool loaded_cuda(const char *proc_root, pid_t pid)
{
	static const char *const globs[] = { "libcuda.so*", "libcudart.so*", "libcudart-*.so*" };
	char path[PATH_MAX];
	char *text = NULL;
	size_t cap = 0, len = 0;
	struct maps *m = NULL;
	bool found = false;
	int fd;

	snprintf(path, sizeof(path), "%s/%d/maps", proc_root, (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	for (;;) {
		ssize_t n;

		if (len + 4096 > cap) {
			char *t = realloc(text, cap ? cap * 2 : 65536);

			if (!t)
				goto out;
			text = t;
			cap = cap ? cap * 2 : 65536;
		}
		n = read(fd, text + len, cap - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		len += (size_t)n;
	}
	if (maps__parse(text, len, &m) < 0)
		goto out;
	for (size_t i = 0; i < m->n && !found; i++)
		for (size_t g = 0; m->v[i].path && g < sizeof(globs) / sizeof(globs[0]); g++)
			if (maps_path__matches(m->v[i].path, globs[g]))
				found = true;
out:
	maps__free(m);
	free(text);
	close(fd);
	return found;
}

int container__parent_and_start(const char *proc_root, pid_t pid, pid_t *ppid,
				unsigned long long *start)
{
	char path[PATH_MAX], buf[4096];
	const char *p;
	ssize_t n;

	snprintf(path, sizeof(path), "%s/%d/stat", proc_root, (int)pid);
	n = readfile_buf(path, buf, sizeof(buf));
	if (n < 0)
		return (int)n;
	p = strrchr(buf, ')');
	if (!p)
		return -EINVAL;
	/* after "pid (comm)": state ppid pgrp session tty_nr tpgid flags minflt cminflt majflt
	 * cmajflt utime stime cutime cstime priority nice num_threads itrealvalue starttime */
	{
		char state;
		int pp;

		if (sscanf(p + 1, " %c %d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d "
			   "%*d %*d %*d %llu", &state, &pp, start) != 3)
			return -EINVAL;
		*ppid = pp;
	}
	return 0;
}

int container__proc_links(const char *proc_root, struct proc_link **ret, size_t *ret_n)
{
	struct proc_link *v = NULL;
	size_t n = 0, cap = 0;
	struct dirent *de;
	DIR *d = opendir(proc_root);

	if (!d)
		return -errno;
	while ((de = readdir(d))) {
		char *end;
		long pid = strtol(de->d_name, &end, 10);
		struct proc_link l = { .pid = (pid_t)pid };

		if (pid <= 0 || *end ||
		    container__parent_and_start(proc_root, l.pid, &l.ppid, &l.start) < 0)
			continue;
		if (n == cap) {
			size_t ncap = cap ? cap * 2 : 512;
			struct proc_link *nv = reallocarray(v, ncap, sizeof(*nv));

			if (!nv) {
				closedir(d);
				free(v);
				return -ENOMEM;
			}
			v = nv;
			cap = ncap;
		}
		v[n++] = l;
	}
	closedir(d);
	*ret = v;
	*ret_n = n;
	return 0;
}

size_t container__descendants(const char *proc_root, const pid_t *roots, size_t nroots,
			      pid_t *out, size_t max)
{
	struct proc_link *v = NULL;
	size_t n = 0, nout = 0;

	if (container__proc_links(proc_root, &v, &n) < 0)
		return 0;
	/* breadth first from the roots: out[] is the queue; a child must have started no
	 * earlier than its parent (never a pid the parent's number was reused for) */
	for (size_t q = 0; q < nroots + nout && nout < max; q++) {
		pid_t parent = q < nroots ? roots[q] : out[q - nroots];
		unsigned long long pstart = 0;

		for (size_t i = 0; i < n; i++)
			if (v[i].pid == parent)
				pstart = v[i].start;
		for (size_t i = 0; i < n && nout < max; i++) {
			bool seen = false;

			if (v[i].ppid != parent || v[i].start < pstart)
				continue;
			for (size_t k = 0; k < nroots && !seen; k++)
				seen = roots[k] == v[i].pid;
			for (size_t k = 0; k < nout && !seen; k++)
				seen = out[k] == v[i].pid;
			if (!seen)
				out[nout++] = v[i].pid;
		}
	}
	free(v);
	return nout;
}

int container__choose(const char *proc_root, const pid_t *pids, size_t n, const regex_t *match,
		      pid_t *out, size_t max, size_t *nout, enum container_rule *rule)
{
	char cmd[4096];
	size_t k = 0;
	pid_t main_pid = 0;
	unsigned long long main_start = 0;

	*nout = 0;
	if (match) {
		*rule = CONTAINER_RULE_MATCH;
		for (size_t i = 0; i < n && k < max; i++) {
			container__cmdline(proc_root, pids[i], cmd, sizeof(cmd));
			if (cmd[0] && regexec(match, cmd, 0, NULL, 0) == 0)
				out[k++] = pids[i];
		}
		*nout = k;
		return k ? 0 : -ESRCH;
	}
	*rule = CONTAINER_RULE_CUDA;
	for (size_t i = 0; i < n && k < max; i++)
		if (loaded_cuda(proc_root, pids[i]))
			out[k++] = pids[i];
	if (k) {
		*nout = k;
		return 0;
	}
	*rule = CONTAINER_RULE_MAIN;
	for (size_t i = 0; i < n; i++) {
		pid_t ppid = 0;
		unsigned long long start = 0;
		bool inside = false;

		if (container__parent_and_start(proc_root, pids[i], &ppid, &start) < 0)
			continue;
		for (size_t j = 0; j < n && !inside; j++)
			inside = pids[j] == ppid;
		if (inside)
			continue;
		if (!main_pid || start < main_start || (start == main_start && pids[i] < main_pid)) {
			main_pid = pids[i];
			main_start = start;
		}
	}
	if (!main_pid || max == 0)
		return -ESRCH;
	out[0] = main_pid;
	*nout = 1;
	return 0;
}
