/* SPDX-License-Identifier: MIT */
/*
 * `aiprof profile`: attach to running processes, record for a window, detach, write the
 * artifacts. The target keeps running throughout; only one of its threads is stopped,
 * briefly, the first time the library is loaded.
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <regex.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "event.h"
#include "log.h"
#include "procsyms.h"
#include "redact.h"
#include "timeutil.h"
#include "model/profile.h"
#include "target/container.h"
#include "target/memlimit.h"
#include "target/target.h"
#include "attach/inject.h"
#include "attach/session.h"
#include "collect/ebpf.h"
#include "collect/uprobes.h"
#include "analyze/diagnosis.h"
#include "artifacts/report.h"
#include "artifacts/summary.h"
#include "artifacts/termlog.h"
#include "artifacts/timeline.h"
#include "artifacts/upload.h"
#include "cli.h"

#define MAX_TARGETS 256

static volatile sig_atomic_t stop_requested;

static void on_stop_signal(int sig)
{
	(void)sig;
	stop_requested = 1;
}

/* What the run ends with, for --termination-log: the first error, and the results. */
struct outcome {
	char error[TERM_ERROR_MAX];
	struct termination *term;   /* counts and findings collected on the way; may be NULL */
	const char *outdir;         /* artifacts written there (NULL until they are) */
	bool to_s3;                 /* -o s3://: only what was uploaded counts as artifacts */
	bool uploaded;              /* and uploaded (outdir/manifest.json lists them) */
};

/* Logs the error, keeps the first one for the termination message, returns rc. errno is
 * set from err (a negative errno, or 0) for %m. */
__attribute__((format(printf, 4, 5)))
static int fail(struct outcome *oc, int rc, int err, const char *fmt, ...)
{
	char msg[TERM_ERROR_MAX];
	va_list ap;

	if (err)
		errno = err < 0 ? -err : err;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	log_error("%s", msg);
	if (!oc->error[0])
		snprintf(oc->error, sizeof(oc->error), "%s", msg);
	return rc;
}

static void usage(FILE *out)
{
	fprintf(out,
		"Usage: aiprof profile --pid PID[,PID...] [OPTIONS]\n"
		"       aiprof profile --container-id ID | --container-name NAME [--match REGEX]\n"
		"                      [OPTIONS]\n\n"
		"Attaches to running processes, records CUDA, NCCL and RDMA activity for a\n"
		"window, detaches, and writes timeline.json.gz and summary.json; with eBPF also\n"
		"CPU and off-CPU stacks (Python frames merged) and syscalls, and stacks.folded.\n\n"
		"Options:\n"
		"  -p, --pid PID[,PID...]     processes to profile (host pids)\n"
		"      --container-id ID      the processes of a container, found by their cgroup\n"
		"                             (containerd://<64 hex>, cri-o://, docker://, or a\n"
		"                             bare id); run in the host's pid namespace\n"
		"      --container-name NAME  from an ephemeral container: the processes it sees\n"
		"                             that are not in its own cgroup (nor the pause process)\n"
		"      --match REGEX          with a container: profile the processes whose command\n"
		"                             line matches (POSIX extended); default: those that\n"
		"                             loaded libcuda/libcudart, else the main process\n"
		"      --termination-log PATH write the result for Kubernetes (aiprof.termination/v1:\n"
		"                             artifacts, counts, findings, error) on every exit\n"
		"  -d, --duration DURATION    window length: 5s (default), 500ms, 2m\n"
		"  -o, --output DIR|s3://BUCKET/PREFIX\n"
		"                             artifact folder (default ./aiprof-out/<UTC time>/);\n"
		"                             with s3:// they are built there, then uploaded\n"
		"                             (manifest.json last; see 'aiprof upload --help')\n"
		"      --collectors LIST      cuda,nccl,rdma,cupti (library) and cpu,offcpu,\n"
		"                             syscalls,python (eBPF), or all (default all);\n"
		"                             no-launch-stacks: launches without call stacks\n"
		"      --frequency HZ         on-CPU samples per second (default 99)\n"
		"      --offcpu-min DUR       shortest off-CPU interval recorded (default 1ms)\n"
		"      --slow-syscall DUR     a syscall this long is an event (default 1ms)\n"
		"      --no-ebpf              library only: no eBPF collectors\n"
		"      --method METHOD        how CUDA, NCCL and RDMA calls are seen: ptrace (default)\n"
		"                             loads libaiprof.so into the process; ebpf puts uprobes\n"
		"                             on its libraries instead: nothing is loaded into it and\n"
		"                             it is never stopped (summary.json lists what it misses)\n"
		"      --lib PATH             libaiprof.so to inject (default: next to aiprof,\n"
		"                             or $AIPROF_LIB)\n"
		"      --inject-timeout DUR   how long to look for a safe point (default 5s)\n"
		"  -v, --verbose              more detail on stderr\n"
		"  -q, --quiet                only errors on stderr\n"
		"  -h, --help                 this help\n\n"
		"Exit codes: 0 ok, 2 usage, 3 no such process, 4 permission denied,\n"
		"5 unsupported target (static binary, no libc, not x86_64), 6 injection or\n"
		"collection failed, 7 artifacts could not be written, 1 anything else.\n");
}

int exit_code_for(int err)
{
	switch (-err) {
	case 0: return EXIT_OK;
	case ESRCH: case ENOENT: return EXIT_NO_TARGET;
	case EPERM: case EACCES: return EXIT_PERMISSION;
	case ENOEXEC: case EPROTONOSUPPORT: return EXIT_UNSUPPORTED;
	case EINVAL: return EXIT_USAGE;
	default: return EXIT_INJECT;
	}
}

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

static int parse_collectors(const char *arg, uint32_t *ret, uint32_t *ret_ebpf)
{
	static const struct { const char *name; uint32_t bit, ebpf; } known[] = {
		{ "cuda", AIPROF_COLLECT_CUDA, 0 }, { "nccl", AIPROF_COLLECT_NCCL, 0 },
		{ "rdma", AIPROF_COLLECT_RDMA, 0 }, { "cupti", AIPROF_COLLECT_CUPTI, 0 },
		{ "cpu", 0, EBPF_COLLECT_CPU }, { "offcpu", 0, EBPF_COLLECT_OFFCPU },
		{ "syscalls", 0, EBPF_COLLECT_SYSCALLS }, { "python", 0, EBPF_COLLECT_PYTHON },
		{ "all", AIPROF_COLLECT_ALL, EBPF_COLLECT_ALL },
		{ "no-launch-stacks", AIPROF_COLLECT_NO_STACKS, 0 },
	};
	uint32_t mask = 0, ebpf_mask = 0;

	for (const char *p = arg; *p;) {
		size_t n = strcspn(p, ",");
		bool ok = false;

		for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++)
			if (strlen(known[i].name) == n && strncmp(p, known[i].name, n) == 0) {
				mask |= known[i].bit;
				ebpf_mask |= known[i].ebpf;
				ok = true;
			}
		if (!ok)
			return -EINVAL;
		p += n;
		if (*p == ',')
			p++;
	}
	if (!(mask & ~AIPROF_COLLECT_NO_STACKS))
		mask = 0;   /* a modifier alone records nothing */
	*ret = mask;
	*ret_ebpf = ebpf_mask;
	return mask | ebpf_mask ? 0 : -EINVAL;
}

static int default_lib_path(char *buf, size_t len)
{
	const char *env = getenv("AIPROF_LIB");
	char exe[PATH_MAX];
	ssize_t n;
	char *slash;

	if (env && *env) {
		snprintf(buf, len, "%s", env);
		return 0;
	}
	n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (n <= 0)
		return -errno;
	exe[n] = 0;
	slash = strrchr(exe, '/');
	if (slash)
		*slash = 0;
	snprintf(buf, len, "%s/libaiprof.so", exe);
	if (access(buf, R_OK) == 0)
		return 0;
	snprintf(buf, len, "%s/../lib/aiprof/libaiprof.so", exe);
	return 0;
}

static int mkdir_p(const char *path)
{
	char buf[PATH_MAX];
	size_t len = strlen(path);

	if (len == 0 || len >= sizeof(buf))
		return -ENAMETOOLONG;
	memcpy(buf, path, len + 1);
	for (char *p = buf + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = 0;
		if (mkdir(buf, 0755) < 0 && errno != EEXIST)
			return -errno;
		*p = '/';
	}
	if (mkdir(buf, 0755) < 0 && errno != EEXIST)
		return -errno;
	return 0;
}

static void copy_lib_status(struct target *t)
{
	const struct aiprof_ring_hdr *h;

	if (!t->session)
		return;
	h = session__hdr(t->session);
	t->cupti_state = atomic_load(&((struct aiprof_ring_hdr *)h)->cupti_state);
	memcpy(t->cupti_reason, h->cupti_reason, sizeof(t->cupti_reason));
	t->cupti_reason[sizeof(t->cupti_reason) - 1] = 0;
	t->hooks_patched = atomic_load(&((struct aiprof_ring_hdr *)h)->hooks_patched);
	t->modules_seen = atomic_load(&((struct aiprof_ring_hdr *)h)->modules_seen);
}

static int attach_target(struct target *t, const struct inject_opts *io)
{
	int r;

	r = inject_library(t->pid, io, &t->inj);
	if (r == -EPERM)
		target_explain_eperm(t->pid, t->inj.message, sizeof(t->inj.message));
	if (r < 0) {
		snprintf(t->message, sizeof(t->message), "%s", t->inj.message);
		return r;
	}
	if (t->inj.how == INJECT_PTRACE || t->inj.how == INJECT_PTRACE_DIRECT)
		log_info("pid %d: libaiprof.so loaded, thread %d stopped for %llu us (at %s, "
			 "after %u unsafe stop%s)", t->pid, t->inj.tid,
			 (unsigned long long)(t->inj.stop_ns / NSEC_PER_USEC), t->inj.safe_point,
			 t->inj.unsafe_stops, t->inj.unsafe_stops == 1 ? "" : "s");
	else
		log_info("pid %d: libaiprof.so already loaded, reusing it (no ptrace)", t->pid);
	r = session__open(t->pid, 3 * NSEC_PER_SEC, &t->session);
	if (r < 0) {
		snprintf(t->message, sizeof(t->message), r == -EPROTO ?
			 "pid %d has a libaiprof.so of another version loaded; use the matching "
			 "aiprof, or restart the process to load this one" : r == -EBADMSG ?
			 "pid %d: its event ring is smaller than its header says, or can be shrunk "
			 "under the reader (no seal): refusing to read it; restart the process to "
			 "load this libaiprof.so" :
			 "libaiprof.so is loaded in pid %d but its event ring did not appear (%s)",
			 t->pid, strerror(-r));
		return r == -EPROTO || r == -EBADMSG ? r : -EIO;
	}
	return 0;
}

/* --method ebpf: uprobes on the target's CUDA/NCCL/verbs libraries; recording starts now. */
static int attach_target_uprobes(struct target *t, uint32_t collectors)
{
	char desc[512];
	int r;

	t->uprobe_method = true;
	t->inj.how = INJECT_NONE;
	r = uprobe_session__start(t->pid, collectors, &t->uprobes, t->message,
				  sizeof(t->message));
	if (r < 0)
		return r;
	snprintf(t->cupti_reason, sizeof(t->cupti_reason), "eBPF-only method: API-level "
		 "timing from uprobes (CUPTI needs code inside the process)");
	uprobe_session__describe(t->uprobes, desc, sizeof(desc));
	log_info("pid %d: eBPF method, nothing loaded into the process: %s", t->pid, desc);
	return 0;
}

static void free_targets(struct target *ts, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		uprobe_session__free(ts[i].uprobes);
		session__free(ts[i].session);
		event_store__clear(&ts[i].store);
		proc_syms__free(ts[i].syms);
		free(ts[i].threads);
		if (ts[i].pidfd > 0)
			close(ts[i].pidfd);
	}
	free(ts);
}

static void default_outdir(char *buf, size_t len)
{
	time_t now = time(NULL);
	struct tm tm;
	char stamp[32];

	gmtime_r(&now, &tm);
	strftime(stamp, sizeof(stamp), "%Y%m%dT%H%M%SZ", &tm);
	snprintf(buf, len, "aiprof-out/%s", stamp);
}

/* The eBPF collectors see host pids; from a container's pid namespace ours are others. */
static bool in_host_pid_namespace(void)
{
	struct stat st;

	/* the kernel's PROC_PID_INIT_INO: the initial pid namespace has this inode number */
	return stat("/proc/self/ns/pid", &st) < 0 || st.st_ino == 0xEFFFFFFCu;
}

/*
 * --container-id / --container-name: the container's processes, then the ones to profile
 * (container.h). Fills pids; returns an exit code.
 */
static int resolve_container(struct outcome *oc, const char *id, const char *name,
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
		r = regcomp(&re, match, REG_EXTENDED | REG_NOSUB);
		if (r) {
			char why[256];

			regerror(r, &re, why, sizeof(why));
			return fail(oc, EXIT_USAGE, 0, "--match '%s' is not a POSIX extended regular "
				    "expression: %s", match, why);
		}
		have_re = true;
	}
	r = id[0] ? container__find_by_id("/proc", id, &all, &n) :
		    container__find_others("/proc", &all, &n);
	if (r < 0) {
		rc = fail(oc, EXIT_FAILURE_, r, "cannot read the processes in /proc: %m");
		goto out;
	}
	if (n == 0) {
		rc = id[0] ? fail(oc, EXIT_NO_TARGET, 0, "no process of container %s found: no "
				  "/proc/PID/cgroup names it. Check that the container is running "
				  "on this node and that aiprof runs in the host's pid namespace "
				  "(hostPID: true)", id) :
			     fail(oc, EXIT_NO_TARGET, 0, "container %s: no process visible outside "
				  "our own cgroup. An ephemeral container must target it "
				  "(targetContainerName) or the pod must share its process namespace",
				  name);
		goto out;
	}
	r = container__choose("/proc", all, n, have_re ? &re : NULL, pids, max, npids, &rule);
	if (r < 0) {
		for (size_t i = 0; i < n && strlen(list) + 64 < sizeof(list); i++) {
			container__cmdline("/proc", all[i], cmd, sizeof(cmd));
			redact_cmdline(cmd, sizeof(cmd));   /* this goes to the status */
			snprintf(list + strlen(list), sizeof(list) - strlen(list), "%s%d '%.48s'",
				 i ? ", " : "", all[i], cmd);
		}
		rc = fail(oc, EXIT_NO_TARGET, 0, match ?
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

/* How many of the targets we record (no error) have exited. */
static size_t count_exited(const struct target *targets, size_t n)
{
	size_t k = 0;

	for (size_t i = 0; i < n; i++)
		k += !targets[i].error && target_exited(targets[i].pid);
	return k;
}

/*
 * What each target's window may keep: the event and what writing the artifacts needs of it
 * peak at about EVENT_PEAK_BYTES; half of aiprof's memory limit (a container's, a unit's)
 * goes to events, shared by the targets; without a limit, EVENT_STORE_MAX_EVENTS each.
 * The rest is counted as dropped: the window's memory does not grow with its length.
 */
#define EVENT_PEAK_BYTES 192
#define EVENTS_MIN       ((size_t)1 << 16)

static size_t events_budget(size_t ntargets, uint64_t *ret_limit)
{
	uint64_t limit = memlimit_self(), n;

	*ret_limit = limit;
	if (limit == UINT64_MAX)
		return EVENT_STORE_MAX_EVENTS;
	n = limit / 2 / EVENT_PEAK_BYTES / (ntargets ? ntargets : 1);
	if (n < EVENTS_MIN)
		n = EVENTS_MIN;
	if (n > EVENT_STORE_MAX_EVENTS)
		n = EVENT_STORE_MAX_EVENTS;
	log_debug("memory limit %llu MiB: up to %llu events per process",
		  (unsigned long long)(limit >> 20), (unsigned long long)n);
	return (size_t)n;
}

static int profile_run(int argc, char **argv, struct outcome *oc)
{
	static const struct option opts[] = {
		{ "pid", required_argument, NULL, 'p' },
		{ "container-id", required_argument, NULL, 'I' },
		{ "container-name", required_argument, NULL, 'K' },
		{ "match", required_argument, NULL, 'X' },
		{ "termination-log", required_argument, NULL, 'W' },
		{ "duration", required_argument, NULL, 'd' },
		{ "output", required_argument, NULL, 'o' },
		{ "collectors", required_argument, NULL, 'C' },
		{ "lib", required_argument, NULL, 'L' },
		{ "inject-timeout", required_argument, NULL, 'T' },
		{ "frequency", required_argument, NULL, 'F' },
		{ "offcpu-min", required_argument, NULL, 'M' },
		{ "slow-syscall", required_argument, NULL, 'S' },
		{ "no-ebpf", no_argument, NULL, 'N' },
		{ "method", required_argument, NULL, 'm' },
		{ "verbose", no_argument, NULL, 'v' },
		{ "quiet", no_argument, NULL, 'q' },
		{ "help", no_argument, NULL, 'h' },
		{}
	};
	pid_t pids[MAX_TARGETS];
	size_t npids = 0, nok = 0, n_exited = 0;
	uint64_t duration = 5 * NSEC_PER_SEC, next_alive_check = 0, cut_realtime_ns = 0;
	uint32_t collectors = AIPROF_COLLECT_ALL;
	struct inject_opts io = { .timeout_ns = 5 * NSEC_PER_SEC };
	char lib[PATH_MAX], outdir[PATH_MAX] = "", path[PATH_MAX + 32], s3url[PATH_MAX] = "";
	struct profile prof = { 0 };
	struct timeline_stats tl_stats = { 0 };
	struct target *targets = NULL;
	uint64_t mem_limit = UINT64_MAX;
	size_t max_events;
	struct sigaction sa = { .sa_handler = on_stop_signal };
	struct ebpf_opts eo = {
		.collectors = EBPF_COLLECT_ALL, .frequency_hz = EBPF_DEFAULT_FREQUENCY,
		.offcpu_min_ns = NSEC_PER_MSEC, .slow_syscall_ns = NSEC_PER_MSEC,
	};
	struct ebpf *ebpf = NULL;
	char ebpf_why[256] = "";
	bool no_ebpf = false, uprobe_method = false;
	char container_id[CONTAINER_ID_MAX + 1] = "", why[512];
	const char *container_name = NULL, *match = NULL;
	int c, r, first_err = 0, rc;

	optind = 1;
	while ((c = getopt_long(argc, argv, "p:d:o:vqh", opts, NULL)) != -1) {
		switch (c) {
		case 'p':
			r = parse_pids(optarg, pids, MAX_TARGETS, &npids);
			if (r < 0)
				return fail(oc, EXIT_USAGE, 0, "--pid '%s' is not a comma-separated list "
					    "of process ids%s", optarg, r == -E2BIG ? " (at most 256)" : "");
			break;
		case 'I':
			if (container_id__parse(optarg, container_id, sizeof(container_id), why,
						sizeof(why)) < 0)
				return fail(oc, EXIT_USAGE, 0, "%s", why);
			break;
		case 'K':
			if (!*optarg)
				return fail(oc, EXIT_USAGE, 0, "--container-name needs the name of the "
					    "container to profile");
			container_name = optarg;
			break;
		case 'X':
			match = optarg;
			break;
		case 'W':
			break;  /* taken before parsing, so that usage errors are reported too */
		case 'd':
			r = parse_duration_ns(optarg, &duration);
			if (r < 0 || duration == 0)
				return fail(oc, EXIT_USAGE, 0, "--duration '%s' is not a duration such as "
					    "5s, 500ms, 2m or 1h30m", optarg);
			break;
		case 'o':
			snprintf(outdir, sizeof(outdir), "%s", optarg);
			break;
		case 'C':
			if (parse_collectors(optarg, &collectors, &eo.collectors) < 0)
				return fail(oc, EXIT_USAGE, 0, "--collectors '%s': use a comma-separated "
					    "list of cuda, nccl, rdma, cupti, cpu, offcpu, syscalls, python, "
					    "or all", optarg);
			break;
		case 'F': {
			char *end;
			unsigned long hz;

			errno = 0;
			hz = strtoul(optarg, &end, 10);
			if (errno || end == optarg || *end || hz == 0 || hz > EBPF_MAX_FREQUENCY)
				return fail(oc, EXIT_USAGE, 0, "--frequency '%s' is not a sampling rate "
					    "from 1 to %d Hz", optarg, EBPF_MAX_FREQUENCY);
			eo.frequency_hz = (uint32_t)hz;
			break;
		}
		case 'M':
		case 'S':
			if (parse_duration_ns(optarg, c == 'M' ? &eo.offcpu_min_ns :
					      &eo.slow_syscall_ns) < 0)
				return fail(oc, EXIT_USAGE, 0, "--%s '%s' is not a duration such as 1ms "
					    "or 500us", c == 'M' ? "offcpu-min" : "slow-syscall", optarg);
			break;
		case 'N':
			no_ebpf = true;
			break;
		case 'm':
			if (strcmp(optarg, "ebpf") != 0 && strcmp(optarg, "ptrace") != 0)
				return fail(oc, EXIT_USAGE, 0, "--method '%s': use ptrace or ebpf", optarg);
			uprobe_method = strcmp(optarg, "ebpf") == 0;
			break;
		case 'L':
			snprintf(lib, sizeof(lib), "%s", optarg);
			io.lib_path = lib;
			break;
		case 'T':
			if (parse_duration_ns(optarg, &io.timeout_ns) < 0 || io.timeout_ns == 0)
				return fail(oc, EXIT_USAGE, 0, "--inject-timeout '%s' is not a duration "
					    "such as 5s", optarg);
			break;
		case 'v':
			log_set_max_level(LOG_DEBUG);
			break;
		case 'q':
			log_set_max_level(LOG_ERR);
			break;
		case 'h':
			usage(stdout);
			return EXIT_OK;
		default:
			usage(stderr);
			return fail(oc, EXIT_USAGE, 0, "bad command line for aiprof profile (see "
				    "'aiprof profile --help')");
		}
	}
	if (optind < argc)
		return fail(oc, EXIT_USAGE, 0, "unexpected argument '%s'", argv[optind]);
	if ((npids > 0) + !!container_id[0] + !!container_name > 1)
		return fail(oc, EXIT_USAGE, 0, "give one of --pid, --container-id and "
			    "--container-name");
	if (match && !container_id[0] && !container_name)
		return fail(oc, EXIT_USAGE, 0, "--match chooses among a container's processes: "
			    "use it with --container-id or --container-name");
	if (container_id[0] || container_name) {
		rc = resolve_container(oc, container_id, container_name, match, pids, MAX_TARGETS,
				       &npids);
		if (rc != EXIT_OK)
			return rc;
	}
	if (npids == 0)
		return fail(oc, EXIT_USAGE, 0, "no target: give the processes to profile with "
			    "--pid PID[,PID...], --container-id ID or --container-name NAME");
	if (strncmp(outdir, "s3://", 5) == 0) {
		/* artifacts are built in a local staging folder, kept until the upload is confirmed */
		snprintf(s3url, sizeof(s3url), "%s", outdir);
		outdir[0] = 0;
		oc->to_s3 = true;
	}
	if (strncmp(outdir, "file://", 7) == 0)
		memmove(outdir, outdir + 7, strlen(outdir + 7) + 1);
	if (!outdir[0])
		default_outdir(outdir, sizeof(outdir));
	if (!io.lib_path) {
		default_lib_path(lib, sizeof(lib));
		io.lib_path = lib;
	}
	if (!uprobe_method && access(io.lib_path, R_OK) < 0)
		return fail(oc, EXIT_FAILURE_, -errno, "cannot read the interception library %s: "
			    "%m (build it with 'make', or point --lib / AIPROF_LIB at libaiprof.so)",
			    io.lib_path);

	targets = calloc(npids, sizeof(*targets));
	if (!targets)
		return fail(oc, EXIT_FAILURE_, -ENOMEM, "out of memory");
	max_events = events_budget(npids, &mem_limit);
	for (size_t i = 0; i < npids; i++)
		targets[i].store.max_events = max_events;
	for (size_t i = 0; i < npids; i++) {
		char msg[512];

		targets[i].pid = pids[i];
		r = target_preflight(pids[i], msg, sizeof(msg));
		if (r == -ENOEXEC && uprobe_method)
			r = 0;  /* static binary: nothing to dlopen into, but uprobes need nothing */
		if (r < 0) {
			rc = fail(oc, exit_code_for(r), 0, "%s", msg);
			goto out;
		}
		target_read_identity(&targets[i]);
	}
	r = mkdir_p(outdir);
	if (r < 0) {
		rc = fail(oc, EXIT_OUTPUT, r, "cannot create the output folder %s: %m", outdir);
		goto out;
	}

	/* a ^C ends the window early; artifacts are still written */
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);

	for (size_t i = 0; i < npids; i++) {
		struct target *t = &targets[i];

		if (!collectors) {
			/* eBPF collectors only: nothing to inject */
			snprintf(t->cupti_reason, sizeof(t->cupti_reason), "the interception library "
				 "was not injected (--collectors asked for eBPF collectors only)");
			target_refresh_threads(t);
			nok++;
			continue;
		}
		if (!target_same_process(t)) {
			r = -ESRCH;
			snprintf(t->message, sizeof(t->message), "the process chosen exited before we "
				 "attached%s", target_exited(t->pid) ? "" :
				 " (its pid now names another process, which is left alone)");
		} else {
			r = uprobe_method ? attach_target_uprobes(t, collectors) : attach_target(t, &io);
			if (r >= 0 && !target_same_process(t)) {
				/* it exited while we attached, and its pid was taken at once: what we
				 * reached is not what was chosen; record nothing of it */
				r = -ESRCH;
				snprintf(t->message, sizeof(t->message), "the process chosen exited while "
					 "we attached and its pid was reused; nothing of the newcomer is "
					 "recorded");
			}
		}
		if (r < 0) {
			t->error = r;
			fail(oc, 0, 0, "pid %d: %s", t->pid, t->message);
			if (!first_err)
				first_err = r;
			continue;
		}
		target_refresh_threads(t);
		nok++;
	}
	if (nok == 0) {
		rc = exit_code_for(first_err);
		goto out;
	}
	if (no_ebpf || !eo.collectors) {
		snprintf(ebpf_why, sizeof(ebpf_why), no_ebpf ? "disabled by --no-ebpf" :
			 "not requested (--collectors has no cpu, offcpu, syscalls or python)");
	} else if (!in_host_pid_namespace()) {
		snprintf(ebpf_why, sizeof(ebpf_why), "aiprof runs in a pid namespace other than "
			 "the host's (an ephemeral container, say), and the eBPF collectors pick "
			 "their processes by host pid: run it with hostPID (--container-id) for "
			 "CPU, off-CPU and syscall data");
		log_notice("eBPF collectors off: %s", ebpf_why);
	} else {
		pid_t ok_pids[MAX_TARGETS];
		size_t n_ok = 0;

		for (size_t i = 0; i < npids; i++)
			if (!targets[i].error)
				ok_pids[n_ok++] = targets[i].pid;
		r = ebpf__new(&eo, ok_pids, n_ok, &ebpf, ebpf_why, sizeof(ebpf_why));
		if (r < 0)
			log_notice("eBPF collectors off: %s", ebpf_why);
		else
			log_info("eBPF collectors on: %s", ebpf__describe(ebpf, path, sizeof(path)));
	}
	if (!collectors && !ebpf) {
		rc = fail(oc, EXIT_INJECT, 0, "nothing to record: the eBPF collectors are off (%s) "
			  "and --collectors asked for no library collector", ebpf_why);
		goto out;
	}

	prof.start_realtime_ns = now_realtime_ns();
	prof.start_ns = now_monotonic_ns();
	for (size_t i = 0; i < npids; i++)
		if (targets[i].session)
			session__start(targets[i].session, collectors);
	if (ebpf)
		ebpf__start(ebpf);
	log_info("recording %zu process%s for %.3gs", nok, nok == 1 ? "" : "es",
		 (double)duration / 1e9);
	while (!stop_requested && now_monotonic_ns() - prof.start_ns < duration) {
		if (now_monotonic_ns() >= next_alive_check) {
			/* every process we record has exited (its pod deleted, say): nothing more
			 * will come, so the window ends here and what it holds is written */
			next_alive_check = now_monotonic_ns() + 100 * NSEC_PER_MSEC;
			n_exited = count_exited(targets, npids);
			if (n_exited == nok) {
				cut_realtime_ns = now_realtime_ns();
				break;
			}
		}
		for (size_t i = 0; i < npids; i++) {
			if (targets[i].uprobes)
				uprobe_session__drain(targets[i].uprobes, &targets[i].store);
			if (!targets[i].session)
				continue;
			session__drain(targets[i].session, &targets[i].store);
			session__heartbeat(targets[i].session);
		}
		ebpf__poll(ebpf);
		sleep_ns(5 * NSEC_PER_MSEC);
	}
	ebpf__stop(ebpf);
	for (size_t i = 0; i < npids; i++) {
		struct target *t = &targets[i];

		if (t->uprobes) {
			uprobe_session__stop(t->uprobes, &t->store);
			target_refresh_threads(t);
			if (proc_syms__new(t->pid, &t->syms) < 0)
				t->syms = NULL;
			continue;
		}
		if (!t->session) {
			if (!t->error)
				target_refresh_threads(t);
			continue;
		}
		session__stop(t->session, &t->store);
		copy_lib_status(t);
		target_refresh_threads(t);
		if (proc_syms__new(t->pid, &t->syms) < 0)
			t->syms = NULL;
	}
	for (size_t i = 0; i < npids; i++)
		event_store__demangle(&targets[i].store);
	prof.end_ns = now_monotonic_ns();
	if (stop_requested)
		log_notice("window ended early by a signal");
	if (cut_realtime_ns)
		log_notice("window cut after %.3gs of %.3gs: the %zu process%s we recorded exited; "
			   "writing what was recorded until then", (double)(prof.end_ns - prof.start_ns) /
			   1e9, (double)duration / 1e9, nok, nok == 1 ? "" : "es");
	else
		n_exited = count_exited(targets, npids);
	prof.targets = targets;
	prof.ntargets = npids;
	prof.requested_ns = duration;
	prof.outdir = outdir;
	prof.ebpf = ebpf;
	snprintf(prof.ebpf_reason, sizeof(prof.ebpf_reason), "%s", ebpf_why);
	prof.timeline = &tl_stats;
	/* analysis and findings, read by the summary and the report; artifacts without them
	 * are still worth writing */
	r = diagnosis__new(&prof, &prof.diag);
	if (r < 0)
		log_warning_errno(r, "no diagnosis for this window: %m");

	rc = first_err ? exit_code_for(first_err) : EXIT_OK;
	snprintf(path, sizeof(path), "%s/timeline.json.gz", outdir);
	r = timeline_write(&prof, path);
	if (r < 0) {
		rc = fail(oc, EXIT_OUTPUT, r, "cannot write %s: %m", path);
		goto out;
	}
	snprintf(path, sizeof(path), "%s/summary.json", outdir);
	r = summary_write(&prof, path);
	if (r < 0) {
		rc = fail(oc, EXIT_OUTPUT, r, "cannot write %s: %m", path);
		goto out;
	}
	r = ebpf_folded_write(ebpf, outdir);
	if (r < 0) {
		rc = fail(oc, EXIT_OUTPUT, r, "cannot write the folded stacks into %s: %m", outdir);
		goto out;
	}
	r = report_write(&prof, outdir, path, sizeof(path));
	if (r < 0) {
		rc = fail(oc, EXIT_OUTPUT, r, "cannot write the flame graphs and report into %s: %m",
			  outdir);
		goto out;
	}
	oc->outdir = outdir;
	for (size_t i = 0; prof.diag && i < prof.diag->findings->n; i++) {
		const struct finding *f = &prof.diag->findings->v[i];

		log_notice("finding: %s (%s): %s", f->category, finding_severity_name(f->severity),
			   f->summary);
		if (oc->term && termlog_finding(oc->term, f->category,
						finding_severity_name(f->severity)) < 0)
			termlog_count(oc->term, "findings_omitted",
				      prof.diag->findings->n - TERM_MAX_FINDINGS);
	}
	log_notice("report: %s", path);
	{
		uint64_t events = 0, dropped = 0;

		for (size_t i = 0; i < npids; i++) {
			const struct target *t = &targets[i];

			if (t->error)
				continue;
			log_info("pid %d (%s): %zu events, %llu dropped", t->pid, t->comm, t->store.n,
				 (unsigned long long)(t->store.drops + t->store.store_drops));
			if (t->store.max_events && t->store.n >= t->store.max_events)
				log_warning("pid %d: kept the first %zu events, the most one process "
					    "may keep%s; the later ones are counted as dropped. Use a "
					    "shorter --duration to see all of them", t->pid, t->store.n,
					    mem_limit == UINT64_MAX ? "" : " within half of aiprof's "
					    "memory limit");
			events += t->store.n;
			dropped += t->store.drops + t->store.store_drops;
		}
		if (oc->term) {
			termlog_count(oc->term, "processes", nok);
			termlog_count(oc->term, "processes_failed", npids - nok);
			termlog_count(oc->term, "events", events);
			termlog_count(oc->term, "dropped", dropped);
			termlog_count(oc->term, "findings", prof.diag ? prof.diag->findings->n : 0);
			termlog_count(oc->term, "window_ms", (prof.end_ns - prof.start_ns) /
				      NSEC_PER_MSEC);
			if (n_exited)
				termlog_count(oc->term, "processes_exited", n_exited);
			if (cut_realtime_ns) {
				termlog_count(oc->term, "window_cut", 1);
				termlog_count(oc->term, "window_end_unix_ms",
					      cut_realtime_ns / NSEC_PER_MSEC);
			}
		}
	}
	if (s3url[0]) {
		char msg[2048];
		struct upload_opts uo;

		upload_opts__init(&uo);
		uo.quiet = log_get_max_level() < LOG_INFO;
		r = upload_artifacts(outdir, s3url, &uo, msg, sizeof(msg));
		if (r < 0) {
			rc = fail(oc, EXIT_OUTPUT, 0, "%s", msg);
			goto out;
		}
		oc->uploaded = true;
		log_info("%s", msg);
		printf("%s\n", s3url);
	}
	printf("%s\n", outdir);
out:
	diagnosis__free(prof.diag);
	ebpf__free(ebpf);
	free_targets(targets, npids);
	return rc;
}

/* --termination-log's value, taken before the options are parsed (NULL when not given). */
static const char *find_termination_log(int argc, char **argv)
{
	const char *path = NULL;

	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--") == 0)
			break;
		if (strcmp(argv[i], "--termination-log") == 0 && i + 1 < argc)
			path = argv[++i];
		else if (strncmp(argv[i], "--termination-log=", 18) == 0)
			path = argv[i] + 18;
	}
	return path && *path ? path : NULL;
}

/* The last act of `aiprof profile --termination-log PATH`: what happened, for Kubernetes. */
static void write_termination_log(const char *path, struct outcome *oc, int rc)
{
	struct termination *t = oc->term;
	int r = 0;

	if (oc->outdir && oc->uploaded)
		r = termlog_uploaded_artifacts(t, oc->outdir);
	else if (oc->outdir && !oc->to_s3)
		r = termlog_local_artifacts(t, oc->outdir);
	if (r < 0)
		log_warning_errno(r, "the termination message lists no artifacts: cannot read "
				  "them back from %s: %m", oc->outdir);
	termlog_count(t, "exit_code", (uint64_t)rc);
	if (rc != EXIT_OK && !oc->error[0])
		snprintf(oc->error, sizeof(oc->error), "aiprof profile exited with code %d", rc);
	snprintf(t->error, sizeof(t->error), "%s", oc->error);
	r = termlog_write(path, t);
	if (r < 0)
		log_error_errno(r, "cannot write the termination message to %s: %m", path);
}

int cmd_profile(int argc, char **argv)
{
	const char *termlog = find_termination_log(argc, argv);
	struct outcome oc = { .term = NULL };
	int rc;

	if (termlog) {
		oc.term = calloc(1, sizeof(*oc.term));
		if (!oc.term)
			return log_error_errno(ENOMEM, "out of memory"), EXIT_FAILURE_;
	}
	rc = profile_run(argc, argv, &oc);
	if (termlog)
		write_termination_log(termlog, &oc, rc);
	free(oc.term);
	return rc;
}
