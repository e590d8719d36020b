/* SPDX-License-Identifier: MIT */
/* Looking at a target process before and while profiling it: may we, and who is it. */
#include <dirent.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "procstat.h"
#include "procsyms.h"
#include "readfile.h"
#include "redact.h"
#include "target.h"

#define CAP_SYS_PTRACE_BIT 19

/* The number of "Key:" in /proc/PID/status, or -1. */
static long long status_field(pid_t pid, const char *key, int base)
{
	long long v;

	return procstatus_number(pid, key, base, &v) == 0 ? v : -1;
}

static char process_state(pid_t pid)
{
	char path[64], buf[512], *rp;

	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	if (readfile_buf(path, buf, sizeof(buf)) < 0)
		return 0;
	rp = strrchr(buf, ')');
	return rp && rp[1] == ' ' ? rp[2] : 0;
}

bool target_status_has_shstk(const char *status)
{
	static const char key[] = "\nx86_Thread_features:";
	const char *p = status ? strstr(status, key) : NULL;

	if (!p)
		return false;
	for (p += sizeof(key) - 1; *p && *p != '\n';) {
		size_t n;

		p += strspn(p, " \t");
		n = strcspn(p, " \t\n");
		if (n == 5 && strncmp(p, "shstk", 5) == 0)
			return true;
		p += n;
	}
	return false;
}

bool target_exited(pid_t pid)
{
	char state = process_state(pid);

	return state == 0 || state == 'Z' || state == 'X';
}

int target_preflight(pid_t pid, char *msg, size_t len)
{
	struct proc_syms *ps = NULL;
	struct proc_target pt;
	char path[64];
	struct stat st;
	char state;
	int r;

	if (pid <= 0) {
		snprintf(msg, len, "invalid pid %d", pid);
		return -ESRCH;
	}
	if (pid == getpid()) {
		snprintf(msg, len, "pid %d is aiprof itself", pid);
		return -EINVAL;
	}
	snprintf(path, sizeof(path), "/proc/%d", pid);
	if (stat(path, &st) < 0) {
		snprintf(msg, len, "no process with pid %d (if it runs in a container, give the pid "
			 "as the host sees it)", pid);
		return -ESRCH;
	}
	state = process_state(pid);
	if (state == 'Z' || state == 'X') {
		snprintf(msg, len, "pid %d has exited (zombie)", pid);
		return -ESRCH;
	}
	r = proc_syms__new(pid, &ps);
	if (r == -EACCES || r == -EPERM) {
		target_explain_eperm(pid, msg, len);
		return -EPERM;
	}
	if (r < 0) {
		snprintf(msg, len, "cannot read the memory map of pid %d: %s", pid, strerror(-r));
		return r == -ENOENT ? -ESRCH : r;
	}
	r = proc_syms__target(ps, &pt);
	if (r == -EACCES || r == -EPERM) {
		target_explain_eperm(pid, msg, len);
		r = -EPERM;
		goto out;
	}
	if (r == -ENOENT) {
		snprintf(msg, len, "pid %d is a kernel thread; there is nothing to inject into", pid);
		r = -ENOEXEC;
		goto out;
	}
	if (r < 0) {
		snprintf(msg, len, "cannot read the executable of pid %d: %s", pid, strerror(-r));
		goto out;
	}
	if (!pt.x86_64) {
		snprintf(msg, len, "pid %d is a %s %s process; aiprof injects into 64-bit x86_64 "
			 "processes only", pid, pt.elf_class == ELFCLASS32 ? "32-bit" : "64-bit",
			 pt.machine == EM_386 ? "i386" : pt.machine == EM_AARCH64 ? "aarch64" :
			 pt.machine == EM_X86_64 ? "x86_64" : "non-x86");
		r = -EPROTONOSUPPORT;
		goto out;
	}
	if (pt.is_static || pt.libc == PROC_LIBC_NONE) {
		snprintf(msg, len, "pid %d is a statically linked binary (no dynamic loader, no "
			 "shared libc), so libaiprof.so cannot be loaded into it; profile it with "
			 "the eBPF method instead (--method ebpf, or auto)", pid);
		r = -ENOEXEC;
		goto out;
	}
	r = 0;
out:
	proc_syms__free(ps);
	return r;
}

static bool have_cap(int bit)
{
	long long caps = status_field(getpid(), "CapEff", 16);

	return caps >= 0 && (caps >> bit) & 1;
}

void target_explain_eperm(pid_t pid, char *msg, size_t len)
{
	long long tracer = status_field(pid, "TracerPid", 10);
	long long target_uid = status_field(pid, "Uid", 10);
	char scope_buf[16] = "";
	int scope = -1;

	if (readfile_buf("/proc/sys/kernel/yama/ptrace_scope", scope_buf, sizeof(scope_buf)) > 0)
		scope = atoi(scope_buf);
	if (tracer > 0) {
		snprintf(msg, len, "permission denied: pid %d is already traced by pid %lld (a "
			 "debugger or another profiler); detach it first", pid, tracer);
	} else if (!have_cap(CAP_SYS_PTRACE_BIT)) {
		snprintf(msg, len, "permission denied attaching to pid %d: aiprof lacks "
			 "CAP_SYS_PTRACE%s (run it as root, or grant the SYS_PTRACE capability to "
			 "its container)", pid,
			 target_uid >= 0 && (uid_t)target_uid != geteuid() ?
			 " and runs as a different user than the target" :
			 scope >= 1 ? " and kernel.yama.ptrace_scope restricts ptrace" : "");
	} else if (scope == 3) {
		snprintf(msg, len, "permission denied attaching to pid %d: "
			 "kernel.yama.ptrace_scope=3 forbids ptrace entirely; use the eBPF-only "
			 "method", pid);
	} else {
		snprintf(msg, len, "permission denied attaching to pid %d although aiprof has "
			 "CAP_SYS_PTRACE: a security module (seccomp, AppArmor, SELinux) or a user "
			 "namespace boundary blocks ptrace", pid);
	}
}

static int start_ticks(pid_t pid, unsigned long long *ret)
{
	char path[64], buf[1024];
	const char *p;
	ssize_t n;

	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	n = readfile_buf(path, buf, sizeof(buf));
	if (n < 0)
		return (int)n;
	p = strrchr(buf, ')');          /* comm may hold spaces and parentheses */
	if (!p || sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u %*d %*d %*d "
			 "%*d %*d %*d %llu", ret) != 1)
		return -EINVAL;
	return 0;
}

bool target_same_process(const struct target *t)
{
	unsigned long long now;

	if (t->pidfd >= 0 && syscall(SYS_pidfd_send_signal, t->pidfd, 0, NULL, 0) < 0)
		return false;   /* the process we chose has exited */
	return start_ticks(t->pid, &now) == 0 && now == t->start_ticks;
}

void target_read_identity(struct target *t)
{
	char path[64], buf[256];

	/* the pidfd first, then the start time: if the pid was reused in between, the start
	 * time is the newcomer's and the pidfd still the first's, so the two disagree later */
	t->pidfd = (int)syscall(SYS_pidfd_open, t->pid, 0);
	if (t->pidfd < 0)
		t->pidfd = -1;          /* before Linux 5.3: the start time alone */
	if (start_ticks(t->pid, &t->start_ticks) < 0)
		t->start_ticks = 0;

	snprintf(path, sizeof(path), "/proc/%d/comm", t->pid);
	if (readfile_buf(path, buf, sizeof(buf)) > 0) {
		buf[strcspn(buf, "\n")] = 0;
		snprintf(t->comm, sizeof(t->comm), "%s", buf);
	} else {
		snprintf(t->comm, sizeof(t->comm), "pid%d", t->pid);
	}
	snprintf(path, sizeof(path), "/proc/%d/cmdline", t->pid);
	/* it is shown (summary.json, the log): redacted argument by argument */
	redact_cmdline_file(path, t->cmdline, sizeof(t->cmdline));
}

/* NSpid: host pid first, innermost namespace last */
static void read_nstid(pid_t pid, pid_t tid, uint32_t *host, uint32_t *ns)
{
	char path[96], buf[4096], *p;

	*host = (uint32_t)tid;
	*ns = (uint32_t)tid;
	snprintf(path, sizeof(path), "/proc/%d/task/%d/status", pid, tid);
	if (readfile_buf(path, buf, sizeof(buf)) < 0)
		return;
	p = strstr(buf, "\nNSpid:");
	if (!p)
		return;
	p += 7;
	for (;;) {
		char *end;
		long v = strtol(p, &end, 10);

		if (end == p)
			break;
		*ns = (uint32_t)v;
		p = end;
	}
}

void proc_status_text(int status, char *buf, size_t len)
{
	const char *name;

	if (WIFSIGNALED(status)) {
		name = sigabbrev_np(WTERMSIG(status));
		snprintf(buf, len, "killed by SIG%s%s", name ? name : "?",
			 WCOREDUMP(status) ? " (core dumped)" : "");
	} else {
		snprintf(buf, len, "exited with code %d", WEXITSTATUS(status));
	}
}

int proc_exit_status(pid_t pid)
{
	char path[64], buf[4096];
	int n;

	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	n = readfile_buf(path, buf, sizeof(buf));
	return n > 0 ? procstat_exit_status(buf, (size_t)n) : -1;
}

pid_t proc_host_tid(pid_t pid, uint32_t ns_tid)
{
	char path[64];
	struct dirent *de;
	pid_t found = 0;
	DIR *d;

	snprintf(path, sizeof(path), "/proc/%d/task", pid);
	d = opendir(path);
	if (!d)
		return 0;
	while (!found && (de = readdir(d))) {
		pid_t tid = (pid_t)strtol(de->d_name, NULL, 10);
		uint32_t host, ns;

		if (tid <= 0)
			continue;
		read_nstid(pid, tid, &host, &ns);
		if (ns == ns_tid)
			found = (pid_t)host;
	}
	closedir(d);
	return found;
}

void target_refresh_threads(struct target *t)
{
	char path[64];
	struct dirent *de;
	DIR *d;

	snprintf(path, sizeof(path), "/proc/%d/task", t->pid);
	d = opendir(path);
	if (!d)
		return;
	while ((de = readdir(d))) {
		pid_t tid = (pid_t)strtol(de->d_name, NULL, 10);
		uint32_t host, ns;
		struct tid_name *tn = NULL;
		char cpath[96], comm[32];

		if (tid <= 0 || tid == t->own_tids[0] || tid == t->own_tids[1])
			continue;       /* aiprof's own threads are not the target's */
		read_nstid(t->pid, tid, &host, &ns);
		for (size_t i = 0; i < t->nthreads; i++)
			if (t->threads[i].ns_tid == ns)
				tn = &t->threads[i];
		if (!tn) {
			struct tid_name *nv = realloc(t->threads, (t->nthreads + 1) * sizeof(*nv));

			if (!nv)
				break;
			t->threads = nv;
			tn = &t->threads[t->nthreads++];
			memset(tn, 0, sizeof(*tn));
		}
		tn->ns_tid = ns;
		tn->host_tid = host;
		snprintf(cpath, sizeof(cpath), "/proc/%d/task/%d/comm", t->pid, tid);
		if (readfile_buf(cpath, comm, sizeof(comm)) > 0) {
			comm[strcspn(comm, "\n")] = 0;
			snprintf(tn->comm, sizeof(tn->comm), "%s", comm);
		}
	}
	closedir(d);
}

int target_env_rank(pid_t pid)
{
	char path[64], *buf = NULL;
	size_t len = 0;
	int rank = -1;

	snprintf(path, sizeof(path), "/proc/%d/environ", (int)pid);
	if (readfile(path, 1 << 20, 0, &buf, &len) < 0)
		return -1;
	for (size_t off = 0; off < len; off += strlen(buf + off) + 1) {
		const char *v = buf + off;
		char *end;
		long r;

		if (strncmp(v, "RANK=", 5) != 0)
			continue;
		r = strtol(v + 5, &end, 10);
		if (end != v + 5 && !*end && r >= 0 && r < 1 << 24)
			rank = (int)r;
		break;
	}
	explicit_bzero(buf, len);   /* the rest of the environment may hold a secret */
	free(buf);
	return rank;
}
