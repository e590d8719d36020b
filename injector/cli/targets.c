/* SPDX-License-Identifier: MIT */
/*
 * What every command that looks at running processes takes (`aiprof profile`, `aiprof
 * stacks`): --pid, or a container's processes by --container-id / --container-name, chosen
 * with --match; and how their native stacks are walked, --unwind.
 */
#include <errno.h>
#include <limits.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "collect/ebpf.h"
#include "log.h"
#include "recheck.h"
#include "redact.h"
#include "target/container.h"
#include "target/python.h"

static int parse_pids(const char *arg, pid_t *pids, size_t max, size_t *n)
{
	const char *p = arg;

	while (*p) {
		char *end;
		long v;

		errno = 0;
		v = strtol(p, &end, 10);
		if (errno || end == p || v <= 0 || v > INT_MAX || (*end && *end != ','))
			return -EINVAL;
		if (*n >= max)
			return -E2BIG;
		pids[(*n)++] = (pid_t)v;
		p = *end ? end + 1 : end;
	}
	return *n ? 0 : -EINVAL;
}

/*
 * --container-id / --container-name: the container's processes, then the ones to profile
 * (container.h). Fills pids; returns an exit code.
 */
static int resolve_container(struct cli_result *oc, const char *id, const char *name,
			     const char *match, pid_t *pids, size_t max, size_t *npids)
{
	const char *what = id[0] ? id : name;
	pid_t *all = NULL;
	size_t n = 0;
	regex_t re;
	bool have_re = false;
	enum container_rule rule;
	char list[512] = "", cmd[256];
	int r, rc = EXIT_OK;

	if (match) {
		char why[256];

		if (recheck(match, why, sizeof(why)) < 0)
			return cli_fail(oc, EXIT_USAGE, 0, "--match '%.256s' is refused: %s", match,
					why);
		r = regcomp(&re, match, REG_EXTENDED | REG_NOSUB);
		if (r) {
			regerror(r, &re, why, sizeof(why));
			return cli_fail(oc, EXIT_USAGE, 0, "--match '%.256s' is not a POSIX extended "
				    "regular expression: %s", match, why);
		}
		have_re = true;
	}
	r = id[0] ? container__find_by_id("/proc", id, &all, &n) :
		    container__find_others("/proc", &all, &n);
	if (r < 0) {
		rc = cli_fail(oc, EXIT_FAILURE_, r, "cannot read the processes in /proc: %m");
		goto out;
	}
	if (n == 0) {
		rc = id[0] ? cli_fail(oc, EXIT_NO_TARGET, 0, "no process of container %s found: no "
				  "/proc/PID/cgroup names it. Check that the container is running "
				  "on this node and that aiprof runs in the host's pid namespace "
				  "(hostPID: true)", id) :
			     cli_fail(oc, EXIT_NO_TARGET, 0, "container %s: no process visible outside "
				  "our own cgroup. An ephemeral container must target it "
				  "(targetContainerName) or the pod must share its process namespace",
				  name);
		goto out;
	}
	r = container__choose("/proc", all, n, have_re ? &re : NULL, pids, max, npids, &rule);
	if (r < 0) {
		for (size_t i = 0; i < n && strlen(list) + 64 < sizeof(list); i++) {
			char path[64];

			/* this goes to the status: redacted argument by argument */
			snprintf(path, sizeof(path), "/proc/%d/cmdline", (int)all[i]);
			redact_cmdline_file(path, cmd, sizeof(cmd));
			snprintf(list + strlen(list), sizeof(list) - strlen(list), "%s%d '%.48s'",
				 i ? ", " : "", all[i], cmd);
		}
		rc = cli_fail(oc, EXIT_NO_TARGET, 0, match ?
			  "container %s: none of its %zu processes has a command line matching "
			  "--match '%s' (they are: %s); correct the expression or leave it out" :
			  "container %s: its %zu processes exited while we looked%s(%s)", what, n,
			  match ? match : " ", list);
		goto out;
	}
	log_info("container %s: %zu process%s; profiling %zu chosen by %s", what, n,
		 n == 1 ? "" : "es", *npids, rule == CONTAINER_RULE_MATCH ? "--match" :
		 rule == CONTAINER_RULE_CUDA ? "CUDA libraries mapped" : "main process");
	if (oc->term) {
		termlog_count(oc->term, "container_processes", n);
	}
out:
	if (have_re)
		regfree(&re);
	free(all);
	return rc;
}

int cli_target_option(struct cli_result *res, struct cli_targets *t, int c, const char *arg)
{
	char why[512];
	int r;

	switch (c) {
	case 'p':
		r = parse_pids(arg, t->pids, CLI_MAX_TARGETS, &t->npids);
		if (r < 0)
			return cli_fail(res, EXIT_USAGE, 0, "--pid '%s' is not a comma-separated list of "
					"process ids%s", arg, r == -E2BIG ? " (at most 256)" : "");
		return EXIT_OK;
	case 'I':
		if (container_id__parse(arg, t->container_id, sizeof(t->container_id), why,
					sizeof(why)) < 0)
			return cli_fail(res, EXIT_USAGE, 0, "%s", why);
		return EXIT_OK;
	case 'K':
		if (!*arg)
			return cli_fail(res, EXIT_USAGE, 0, "--container-name needs the name of the "
					"container");
		t->container_name = arg;
		return EXIT_OK;
	case 'X':
		t->match = arg;
		return EXIT_OK;
	default:
		return CLI_NOT_TARGET_OPTION;
	}
}

int cli_targets_resolve(struct cli_result *res, struct cli_targets *t, const char *command)
{
	if ((t->npids > 0) + !!t->container_id[0] + !!t->container_name > 1)
		return cli_fail(res, EXIT_USAGE, 0, "give one of --pid, --container-id and "
				"--container-name");
	if (t->match && !t->container_id[0] && !t->container_name)
		return cli_fail(res, EXIT_USAGE, 0, "--match chooses among a container's processes: "
				"use it with --container-id or --container-name");
	if (t->container_id[0] || t->container_name) {
		int rc = resolve_container(res, t->container_id, t->container_name, t->match,
					   t->pids, CLI_MAX_TARGETS, &t->npids);

		if (rc != EXIT_OK)
			return rc;
	}
	if (t->npids == 0)
		return cli_fail(res, EXIT_USAGE, 0, "no target: give the processes to %s with "
				"--pid PID[,PID...], --container-id ID or --container-name NAME",
				command);
	return EXIT_OK;
}

const char *cli_unwind_cache(const char *arg)
{
	if (!arg)
		arg = getenv("AIPROF_UNWIND_CACHE");
	if (!arg || !*arg)
		return CLI_UNWIND_CACHE_DEFAULT;
	return strcmp(arg, "none") == 0 ? NULL : arg;
}

int cli_python_names_option(struct cli_result *res, const char *arg)
{
	if (strcmp(arg, "qualified") != 0 && strcmp(arg, "short") != 0)
		return cli_fail(res, EXIT_USAGE, 0, "--python-names '%s': use qualified or short",
				arg);
	py_set_short_names(strcmp(arg, "short") == 0);
	return EXIT_OK;
}

int cli_unwind_option(struct cli_result *res, const char *arg, uint32_t *ret_bytes)
{
	if (strcmp(arg, "cfi") == 0)
		*ret_bytes = EBPF_UNWIND_STACK_BYTES;
	else if (strcmp(arg, "fp") == 0)
		*ret_bytes = 0;
	else
		return cli_fail(res, EXIT_USAGE, 0, "--unwind '%s': use cfi or fp", arg);
	return EXIT_OK;
}
