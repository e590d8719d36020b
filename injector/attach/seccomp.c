/* SPDX-License-Identifier: MIT */
/* A target's seccomp state, before a remote call; see seccomp.h. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "readfile.h"
#include "seccomp.h"

/* The decimal number after "\nKEY:" in s[0..len) (spaces and tabs before it), or -1. */
static long field_number(const char *s, size_t len, const char *key)
{
	size_t k = strlen(key);

	for (size_t at = 0; at + k + 1 < len; at++) {
		long v = 0;
		size_t i;
		int digits = 0;

		if ((at && s[at - 1] != '\n') || memcmp(s + at, key, k) || s[at + k] != ':')
			continue;
		for (i = at + k + 1; i < len && (s[i] == ' ' || s[i] == '\t'); i++)
			;
		for (; i < len && s[i] >= '0' && s[i] <= '9' && digits < 9; i++, digits++)
			v = v * 10 + (s[i] - '0');
		if (!digits || (i < len && s[i] != '\n'))
			return -1;
		return v;
	}
	return -1;
}

int seccomp_status_parse(const char *status, size_t len, int *ret_filters)
{
	long mode = field_number(status, len, "Seccomp"), n;

	n = field_number(status, len, "Seccomp_filters");
	*ret_filters = n > 0 ? (int)n : 0;
	return mode >= 0 && mode <= 2 ? (int)mode : -1;
}

int seccomp_refuse_remote_call(pid_t pid, char *msg, size_t msglen)
{
	static const char *const what[] = { "", "strict mode (SECCOMP_MODE_STRICT)",
					     "a filter (SECCOMP_MODE_FILTER)" };
	char path[96];
	struct dirent *de;
	DIR *d;
	int r = 0;

	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	d = opendir(path);
	if (!d)
		return 0;       /* gone or unreadable: the attach says so */
	while (r == 0 && (de = readdir(d))) {
		char *st = NULL;
		size_t len = 0;
		int mode, filters;

		if (de->d_name[0] < '0' || de->d_name[0] > '9')
			continue;
		snprintf(path, sizeof(path), "/proc/%d/task/%.16s/status", (int)pid, de->d_name);
		if (readfile(path, 1 << 16, 0, &st, &len) < 0)
			continue;
		mode = seccomp_status_parse(st, len, &filters);
		free(st);
		if (mode <= 0)
			continue;
		if (mode == 2)
			snprintf(msg, msglen, "thread %s of pid %d runs under seccomp with %s (%d "
				 "installed): a system call of the remote call that loads libaiprof.so "
				 "could be trapped or kill the process, so nothing is injected; use "
				 "--method ebpf (or auto), which makes no call in the process", de->d_name,
				 (int)pid, what[mode], filters);
		else
			snprintf(msg, msglen, "thread %s of pid %d runs under seccomp %s: any "
				 "system call but read, write and exit would kill it, so nothing is "
				 "injected; use --method ebpf (or auto), which makes no call in the "
				 "process", de->d_name, (int)pid, what[mode]);
		r = -EPROTONOSUPPORT;
	}
	closedir(d);
	return r;
}
