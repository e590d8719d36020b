/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "procstat.h"
#include "readfile.h"

/* The last ')' of the line (the name's end), or NULL. */
static const char *name_end(const char *stat, size_t len)
{
	const char *p = NULL;

	for (const char *q = stat; q < stat + len; q++)
		if (*q == ')')
			p = q;
	return p;
}

/* The number of field `want` (>= 3) of the line, counted from the last ')'. */
static int field_u64(const char *stat, size_t len, unsigned want, uint64_t *ret)
{
	const char *p = name_end(stat, len), *end = stat + len;
	unsigned field = 2;
	uint64_t v = 0;

	if (!p)
		return -1;
	for (p++; p < end && field < want; p++)
		if (*p == ' ')
			field++;
	if (field != want || p >= end || *p < '0' || *p > '9')
		return -1;
	for (; p < end && *p >= '0' && *p <= '9'; p++) {
		if (v > (UINT64_MAX - 9) / 10)
			return -1;
		v = v * 10 + (uint64_t)(*p - '0');
	}
	*ret = v;
	return 0;
}

int procstat_cpu_ticks(const char *stat, size_t len, uint64_t *ret)
{
	uint64_t u, s;

	if (field_u64(stat, len, 14, &u) < 0 || field_u64(stat, len, 15, &s) < 0 ||
	    u > UINT64_MAX - s)
		return -1;
	*ret = u + s;
	return 0;
}

int procstat_exit_status(const char *stat, size_t len)
{
	const char *p = name_end(stat, len);
	uint64_t v;

	/* ") S ..." : only a zombie's (state Z or X) status is its exit status */
	if (!p || stat + len - p < 3 || p[1] != ' ' || (p[2] != 'Z' && p[2] != 'X'))
		return -1;
	if (field_u64(stat, len, 52, &v) < 0 || v > 0xffff)
		return -1;      /* not a wait(2) status */
	return (int)v;
}

const char *procstatus_value(const char *text, size_t len, const char *key, size_t *ret_len)
{
	size_t klen = strlen(key);
	const char *p = text, *end = text + len;

	while (p < end) {
		const char *nl = memchr(p, '\n', (size_t)(end - p)), *eol = nl ? nl : end;

		if ((size_t)(eol - p) > klen && memcmp(p, key, klen) == 0 && p[klen] == ':') {
			const char *v = p + klen + 1;

			while (v < eol && (*v == ' ' || *v == '\t'))
				v++;
			*ret_len = (size_t)(eol - v);
			return v;
		}
		p = eol + 1;
	}
	return NULL;
}

int procstatus_text_number(const char *text, size_t len, const char *key, int base,
			   long long *ret)
{
	char num[32], *endp;
	const char *v = procstatus_value(text, len, key, &len);
	size_t n = 0;
	long long x;

	if (!v)
		return -ENODATA;
	while (n < len && n + 1 < sizeof(num) && v[n] != ' ' && v[n] != '\t') {
		num[n] = v[n];
		n++;
	}
	num[n] = 0;
	errno = 0;
	x = strtoll(num, &endp, base);
	if (!n || endp == num || errno)
		return -ENODATA;
	*ret = x;
	return 0;
}

ssize_t procstatus_read(pid_t pid, char *buf, size_t size)
{
	char path[64];
	ssize_t got;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	got = readfile_buf(path, buf, size);
	return got == -ENOENT ? -ESRCH : got;
}

int procstatus_number(pid_t pid, const char *key, int base, long long *ret)
{
	char buf[4096];
	ssize_t got = procstatus_read(pid, buf, sizeof(buf));

	return got < 0 ? (int)got : procstatus_text_number(buf, (size_t)got, key, base, ret);
}

int procsched_switches(pid_t pid, const char *tid, uint64_t *ret)
{
	char path[96], buf[128];
	unsigned long long run, wait, n;
	ssize_t len;

	snprintf(path, sizeof(path), "/proc/%d/task/%.16s/schedstat", (int)pid, tid);
	len = readfile_buf(path, buf, sizeof(buf));
	if (len < 0)
		return len == -ESRCH ? -ENOENT : (int)len;
	if (sscanf(buf, "%llu %llu %llu", &run, &wait, &n) != 3)
		return len ? -EINVAL : -ENOENT;   /* a thread that exited as it was read */
	*ret = n;
	return 0;
}

int timens_monotonic_offset(const char *text, size_t len, int64_t *ret)
{
	static const char key[] = "monotonic";
	size_t i = 0;

	while (i < len) {
		const char *line = text + i, *nl = memchr(line, '\n', len - i);
		size_t n = nl ? (size_t)(nl - line) : len - i;
		char buf[96];
		long long secs, nsecs;
		char tail;

		i += n + 1;
		if (n < sizeof(key) || n >= sizeof(buf) || memcmp(line, key, sizeof(key) - 1) ||
		    (line[sizeof(key) - 1] != ' ' && line[sizeof(key) - 1] != '\t'))
			continue;
		memcpy(buf, line + sizeof(key) - 1, n - (sizeof(key) - 1));
		buf[n - (sizeof(key) - 1)] = '\0';
		/* the kernel bounds both: |s| within a few hundred years, 0 <= ns < 1e9 */
		if (sscanf(buf, "%lld %lld %c", &secs, &nsecs, &tail) != 2 || nsecs < 0 ||
		    nsecs >= 1000000000LL || secs > INT64_MAX / 1000000000LL - 1 ||
		    secs < INT64_MIN / 1000000000LL + 1)
			continue;
		*ret = (int64_t)secs * 1000000000LL + nsecs;
		return 0;
	}
	return -ENODATA;
}

int proc_timens_monotonic(pid_t pid, int64_t *ret)
{
	char path[64], buf[256];
	ssize_t len;

	snprintf(path, sizeof(path), "/proc/%d/timens_offsets", (int)pid);
	len = readfile_buf(path, buf, sizeof(buf));
	if (len == -ENOENT) {
		char dir[32];

		/* no such file in a live process: a kernel without time namespaces */
		snprintf(dir, sizeof(dir), "/proc/%d", (int)pid);
		if (access(dir, F_OK) < 0)
			return -ESRCH;
		*ret = 0;
		return 0;
	}
	if (len < 0)
		return (int)len;
	return timens_monotonic_offset(buf, (size_t)len, ret) < 0 ? -EINVAL : 0;
}
