/* SPDX-License-Identifier: MIT */
/*
 * Finding a container's processes, for `aiprof profile --container-id` (a node-agent pod in
 * the host's pid namespace) and `--container-name` (an ephemeral container that shares the
 * target container's pid namespace), and choosing which of them to profile.
 *
 * Container ids. Kubernetes reports a container as "<runtime>://<id>" (containerd://,
 * cri-o://, docker://); those runtimes' ids are 64 lower-case hex digits. A bare id is
 * accepted too (runc's own ids: [A-Za-z0-9_+.-], up to 1024 characters).
 *
 * Membership. A process belongs to a container when a component of its cgroup path, in any
 * hierarchy of /proc/PID/cgroup (cgroup v2 "0::/path", or the v1 lines of a hybrid host),
 * names the id: the component is the id itself (cgroupfs driver:
 * /kubepods/burstable/pod<uid>/<id>), or, without a ".scope" suffix, ends in "-<id>"
 * (systemd driver: cri-containerd-<id>.scope, crio-<id>.scope, docker-<id>.scope). CRI-O's
 * monitor, crio-conmon-<id>.scope, is not the container. Processes in a sub-cgroup of the
 * container's cgroup belong to it.
 *
 * Choice (DESIGN.md, spec.targets.process): the processes whose command line matches
 * --match if given; else every process of the container that has libcuda or libcudart
 * mapped; else the container's main process: the one whose parent is not in the container
 * (the oldest, if several: `kubectl exec` sessions are also children of the runtime shim).
 */
#ifndef AIPROF_CONTAINER_H
#define AIPROF_CONTAINER_H

#include <regex.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#define CONTAINER_ID_MAX 1024

/*
 * Parses a container id as Kubernetes or a user gives it. Writes the bare id into id
 * (idlen >= CONTAINER_ID_MAX + 1). Returns 0, or -EINVAL with why saying what is wrong
 * and what an id looks like.
 */
int container_id__parse(const char *arg, char *id, size_t idlen, char *why, size_t whylen);

/* One line of /proc/PID/cgroup: "hierarchy-ID:controller-list:cgroup-path". Pointers
 * into the parsed text, not NUL-terminated. */
struct cgroup_line {
	unsigned long hierarchy;     /* 0 for cgroup v2 */
	const char *controllers;     /* "" for v2, "cpu,cpuacct", "name=systemd" */
	size_t controllers_len;
	const char *path;            /* starts with '/' */
	size_t path_len;
};

/* Parses one line (without its '\n'). Returns 0 or -EINVAL. */
int cgroup_line__parse(const char *line, size_t len, struct cgroup_line *ret);

/* Whether the cgroup path path[0..len) names container id (the rule above). */
bool cgroup_path__names_container(const char *path, size_t len, const char *id);

/*
 * Whether the text of a /proc/PID/cgroup file (len bytes, need not be NUL-terminated) puts
 * the process in container id: 1 yes, 0 no, -EINVAL when a line is malformed.
 */
int cgroup_file__in_container(const char *text, size_t len, const char *id);

/*
 * The cgroup a process is in, as one string to compare processes by: the v2 path when the
 * file has a "0::" line, else the "name=systemd" hierarchy's, else the first line's.
 * Returns 0, -EINVAL (malformed or empty), or -ENAMETOOLONG.
 */
int cgroup_file__key(const char *text, size_t len, char *key, size_t keylen);

/*
 * The processes under proc_root ("/proc") whose cgroup names container id; *ret (caller
 * frees) is sorted by pid. Returns 0 with *n possibly 0, or a negative errno when proc_root
 * cannot be read.
 */
int container__find_by_id(const char *proc_root, const char *id, pid_t **ret, size_t *n);

/*
 * For an ephemeral container: the processes under proc_root that are not in our own
 * cgroup (that of the calling process), not ourselves, not the pod sandbox's pause process
 * (comm "pause"), and not kernel threads or zombies (empty command line).
 */
int container__find_others(const char *proc_root, pid_t **ret, size_t *n);

enum container_rule {
	CONTAINER_RULE_MATCH,  /* --match REGEX */
	CONTAINER_RULE_CUDA,   /* libcuda / libcudart mapped */
	CONTAINER_RULE_MAIN,   /* the container's main process */
};

const char *container_rule__name(enum container_rule r);

/* One process's parent link: pid, its parent, its start time (clock ticks since boot). */
struct proc_link {
	pid_t pid, ppid;
	unsigned long long start;
};

/* Every process of proc_root with its parent link; *ret freed by the caller with free().
 * 0, -ENOMEM, or the error opening proc_root. */
int container__proc_links(const char *proc_root, struct proc_link **ret, size_t *ret_n);

/*
 * The descendants of roots alive now (their children, the children's children, ...), by
 * the parent links of proc_root/PID/stat, each started no earlier than its parent; the roots
 * themselves are not listed. Writes up to max pids to out and returns how many.
 */
size_t container__descendants(const char *proc_root, const pid_t *roots, size_t nroots,
			      pid_t *out, size_t max);

/* The parent of pid and its start time (clock ticks since boot), from
 * proc_root/PID/stat. 0, the read error, or -EINVAL for a line that does not parse. */
int container__parent_and_start(const char *proc_root, pid_t pid, pid_t *ppid,
				unsigned long long *start);

/*
 * Chooses the targets among pids[0..n) by the rule in the header comment (match may be
 * NULL). Writes at most max pids into out, *nout, and the rule that chose them. Returns 0,
 * or -ESRCH when none qualifies (a --match that matches nothing, or every process gone).
 */
int container__choose(const char *proc_root, const pid_t *pids, size_t n, const regex_t *match,
		      pid_t *out, size_t max, size_t *nout, enum container_rule *rule);

/* The command line of a process under proc_root with NULs as spaces ("" when unreadable). */
void container__cmdline(const char *proc_root, pid_t pid, char *buf, size_t len);

#endif
