/* SPDX-License-Identifier: MIT */
/*
 * `aiprof profile`: attach to running processes, record for a window, detach, write the
 * artifacts. The target keeps running throughout; only one of its threads is stopped,
 * briefly, the first time the library is loaded.
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "event.h"
#include "log.h"
#include "readfile.h"
#include "procstat.h"
#include "procsyms.h"
#include "timeutil.h"
#include "model/profile.h"
#include "target/container.h"
#include "target/memlimit.h"
#include "target/target.h"
#include "attach/inject.h"
#include "attach/session.h"
#include "collect/ebpf.h"
#include "collect/ebpf_symbols.h"
#include "collect/uprobes.h"
#include "analyze/diagnosis.h"
#include "artifacts/ebpf_artifacts.h"
#include "artifacts/pprof.h"
#include "artifacts/report.h"
#include "artifacts/summary.h"
#include "artifacts/termlog.h"
#include "artifacts/threads_dump.h"
#include "artifacts/timeline.h"
#include "artifacts/upload.h"
#include "artifacts/storeput.h"
#include "cli.h"
#include "late.h"

#define MAX_TARGETS CLI_MAX_TARGETS

static volatile sig_atomic_t stop_requested;
/* aiprof record: the pipe its command waits on before its exec, written once recording */
static int record_release_fd = -1;

static void on_stop_signal(int sig)
{
	(void)sig;
	stop_requested = 1;
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
		"  -o, --output DIR|s3://BUCKET/PREFIX|http(s)://CONTROLLER/v1/artifacts/NS/S/POD\n"
		"                             artifact folder (default ./aiprof-out/<UTC time>/);\n"
		"                             with s3:// they are built there, then uploaded\n"
		"                             (manifest.json last; see 'aiprof upload --help');\n"
		"                             http(s):// is the controller's in-cluster store\n"
		"      --collectors LIST      cuda,nccl,rdma,cupti (library) and cpu,offcpu,\n"
		"                             syscalls,python (eBPF), or all (default all);\n"
		"                             no-launch-stacks: launches without call stacks\n"
		"      --frequency HZ         on-CPU samples per second (default 99)\n"
		"      --mode MODE            cpu (default): the off-CPU view is of the blocks of\n"
		"                             --offcpu-min or more; wall: every thread off its CPU\n"
		"                             is sampled too, at the same rate (wall.folded)\n"
		"      --offcpu-min DUR       shortest off-CPU interval recorded (default 1ms)\n"
		"      --slow-syscall DUR     a syscall this long is an event (default 1ms)\n"
		"      --record-rate N        per target thread a second, at most N off-CPU and N\n"
		"                             slow-syscall records (and N/10 short calls timed);\n"
		"                             the rest are counted, not recorded, a wait at a site\n"
		"                             recorded in the last second goes on that record;\n"
		"                             waits of 10ms or more always are recorded (default\n"
		"                             100; 0: every one)\n"
		"      --budget PCT|off       keep aiprof's BPF programs under PCT of the targets'\n"
		"                             CPU (0.5%%, 1%%): the record rate goes down, then the\n"
		"                             off-CPU and syscall collectors pause, as measured\n"
		"                             while recording (needs CAP_SYS_ADMIN); pauses last\n"
		"                             1 s at most, and a wait on as one begins is recorded\n"
		"                             as it ends (summary.json ebpf.budget says what was\n"
		"                             not). Default off: every wait recorded\n"
		"      --all-syscalls         count every syscall of the targets (raw_syscalls:\n"
		"                             every process's syscalls take the kernel's slow\n"
		"                             path meanwhile); default: only the calls that gave\n"
		"                             up the CPU, which costs the other processes nothing\n"
		CLI_PYTHON_NAMES_HELP
		"      --unwind cfi|fp        native stacks: cfi (default) copies 16 KiB of user\n"
		"                             stack per eBPF sample and unwinds it with the\n"
		"                             modules' .eh_frame/.debug_frame where frame pointers\n"
		"                             do not reach the thread's first frame, and walks new\n"
		"                             launch call sites with the process's own unwinder;\n"
		"                             fp: frame pointers only (cheaper, cut without them)\n"
		"      --unwind-cache DIR|none  where unwind rules are shared with the other\n"
		"                             aiprof runs of this machine (default\n"
		"                             $AIPROF_UNWIND_CACHE, else " CLI_UNWIND_CACHE_DEFAULT ")\n"
		"      --no-follow            do not record the processes the targets start during\n"
		"                             the window (DataLoader workers, helpers): by default\n"
		"                             the eBPF collectors follow them, each under its own pid\n"
		"      --no-ebpf              library only: no eBPF collectors\n"
		"      --method METHOD        how CUDA, NCCL and RDMA calls are seen: ptrace loads\n"
		"                             libaiprof.so into the process; ebpf puts uprobes on its\n"
		"                             libraries instead: nothing is loaded into it and it is\n"
		"                             never stopped (summary.json lists what it misses); auto\n"
		"                             (default): ptrace, and ebpf for a process where that\n"
		"                             cannot work or failed (static, a loader that refuses the\n"
		"                             library, ptrace not allowed...), saying why (stderr,\n"
		"                             summary.json method_reason); with --no-ebpf, ptrace only\n"
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
	if (r < 0 && t->inj.died_status >= 0) {
		char how[64];

		/* a death is never silent: what it died of, and what we were doing in it */
		proc_status_text(t->inj.died_status, how, sizeof(how));
		t->died = true;
		t->exit_status = t->inj.died_status;
		t->exit_ns = now_monotonic_ns();
		snprintf(t->died_during, sizeof(t->died_during), "injecting: %s",
			 t->inj.died_doing[0] ? t->inj.died_doing : "the injection");
		snprintf(t->message, sizeof(t->message), "pid %d %s while aiprof was injecting "
			 "(%s, thread %d)", t->pid, how, t->inj.died_doing, t->inj.tid);
		return -ESRCH;
	}
	if (r < 0) {
		snprintf(t->message, sizeof(t->message), "%s", t->inj.message);
		return r;
	}
	if (t->inj.how == INJECT_PTRACE_WOKEN)
		log_info("pid %d: its copy of libaiprof.so, inherited across fork(), woken; "
			 "thread %d stopped for %llu us", t->pid, t->inj.tid,
			 (unsigned long long)(t->inj.stop_ns / NSEC_PER_USEC));
	else if (t->inj.how == INJECT_PTRACE || t->inj.how == INJECT_PTRACE_DIRECT)
		log_info("pid %d: libaiprof.so loaded, thread %d stopped for %llu us (at %s, "
			 "after %u unsafe stop%s)", t->pid, t->inj.tid,
			 (unsigned long long)(t->inj.stop_ns / NSEC_PER_USEC), t->inj.safe_point,
			 t->inj.unsafe_stops, t->inj.unsafe_stops == 1 ? "" : "s");
	else
		log_info("pid %d: libaiprof.so already loaded, reusing it (no ptrace)", t->pid);
	r = session__open(t->pid, 3 * NSEC_PER_SEC, &t->session);
	if (r < 0 && target_exited(t->pid)) {
		snprintf(t->message, sizeof(t->message), "pid %d exited while aiprof attached to "
			 "it (its library was loaded, its ring not yet read)", t->pid);
		return -ESRCH;
	}
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
	/* our threads in it, left out of its data (the loader has exited by now, but its
	 * records of the window may come for a followed process) */
	if (t->inj.how == INJECT_PTRACE || t->inj.how == INJECT_PTRACE_WOKEN)
		t->own_tids[0] = t->inj.loader_tid;
	t->own_tids[1] = session__ctl_tid(t->session, 200 * NSEC_PER_MSEC);
	return 0;
}

/* --method auto gives t the uprobe method, because of why (said on stderr and in the
 * summary). */
static void auto_chose_ebpf(struct target *t, const char *why)
{
	t->uprobe_method = true;
	snprintf(t->method_reason, sizeof(t->method_reason), "auto: the eBPF method (uprobes, "
		 "nothing loaded into the process), because %s", why);
	log_notice("pid %d: --method auto: recording with the eBPF method (uprobes, nothing "
		   "loaded into the process), because %s", t->pid, why);
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

static void free_targets_in(struct target *ts, size_t n)
{
	for (size_t i = 0; ts && i < n; i++) {
		uprobe_session__free(ts[i].uprobes);
		session__free(ts[i].session);
		event_store__clear(&ts[i].store);
		proc_syms__free(ts[i].syms);
		free(ts[i].threads);
		if (ts[i].pidfd > 0)
			close(ts[i].pidfd);
	}
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

/* How many of the targets we record (no error) have exited. */
static size_t count_exited(const struct target *targets, size_t n)
{
	size_t k = 0;

	for (size_t i = 0; i < n; i++)
		k += !targets[i].error && target_exited(targets[i].pid);
	return k;
}

/*
 * What each target's window may keep whole. Writing the artifacts needs, at its peak, about
 * EVENT_PEAK_BYTES per library event and EBPF_EVENT_PEAK_BYTES per eBPF event (its timeline
 * line, its wait for the findings; tests/bench/bench_memory.py, rounded up). Of aiprof's
 * memory limit (a container's, a unit's) 3/8 goes to library events and 1/8 to eBPF events,
 * shared by the targets; without a limit, EVENT_STORE_MAX_EVENTS library and
 * EBPF_EVENTS_UNLIMITED eBPF events each. Past it events are
 * summed, not kept: the window's memory does not grow with its length. AIPROF_EVENT_BUDGET
 * (a number of events) sets both, for tests.
 */
#define EVENT_PEAK_BYTES      192
#define EBPF_EVENT_PEAK_BYTES 2048
#define EVENTS_MIN            ((size_t)1 << 14)
#define EBPF_EVENTS_MIN       ((size_t)1 << 10)
#define EBPF_EVENTS_UNLIMITED ((size_t)1 << 20)    /* without a limit: ~2 GiB at the peak */

static size_t budget_of(uint64_t bytes, uint64_t per_event, size_t ntargets, size_t min)
{
	uint64_t n = bytes / per_event / (ntargets ? ntargets : 1);

	return n < min ? min : n > EVENT_STORE_MAX_EVENTS ? EVENT_STORE_MAX_EVENTS : (size_t)n;
}

static size_t events_budget(size_t ntargets, uint64_t *ret_limit, size_t *ret_ebpf)
{
	const char *env = getenv("AIPROF_EVENT_BUDGET");
	uint64_t limit = memlimit_self();
	size_t n;

	*ret_limit = limit;
	if (env && *env && strtoull(env, NULL, 10) > 0) {
		*ret_ebpf = (size_t)strtoull(env, NULL, 10);
		return *ret_ebpf;
	}
	if (limit == UINT64_MAX) {
		*ret_ebpf = EBPF_EVENTS_UNLIMITED;
		return EVENT_STORE_MAX_EVENTS;
	}
	n = budget_of(limit / 8 * 3, EVENT_PEAK_BYTES, ntargets, EVENTS_MIN);
	*ret_ebpf = budget_of(limit / 8, EBPF_EVENT_PEAK_BYTES, ntargets, EBPF_EVENTS_MIN);
	log_debug("memory limit %llu MiB: up to %zu library and %zu eBPF events per process "
		  "kept whole", (unsigned long long)(limit >> 20), n, *ret_ebpf);
	return n;
}

/* What `aiprof profile` was asked to do: its options, checked. */
struct profile_opts {
	struct cli_targets tg;          /* --pid, --container-id, --container-name, --match */
	uint64_t duration;
	uint32_t collectors;            /* AIPROF_COLLECT_*: the library's; 0 = eBPF only */
	struct inject_opts io;
	struct ebpf_opts eo;
	bool no_ebpf;
	enum { METHOD_AUTO, METHOD_PTRACE, METHOD_EBPF } method;
	int lib_err;                    /* auto: libaiprof.so cannot be read (errno) */
	char lib[PATH_MAX], outdir[PATH_MAX], s3url[PATH_MAX];
	bool help;                      /* --help was given: usage is printed, nothing else */
};

/* One run: the targets, what recorded them, and the window. */
struct run {
	struct profile_opts *o;
	struct cli_result *oc;
	struct target *targets;         /* o->tg.npids chosen, then the late ones */
	size_t ntargets;                /* o->tg.npids + those taken from late */
	struct late *late;              /* attaches the processes the targets start */
	size_t late_max_events;         /* the store of each of those */
	size_t nok, n_exited;           /* chosen, recorded without error; of those, exited */
	int first_err;                  /* the first target's error, for the exit code */
	uint64_t mem_limit;
	uint64_t cut_realtime_ns;       /* when every target had exited, cutting the window */
	struct ebpf *ebpf;
	char ebpf_why[256];
	struct symbolizer *symz;        /* the targets' code, held while they live (t->psyms) */
	uint64_t next_hold_ns;
	struct profile prof;
	struct timeline_stats tl_stats;
	char report[PATH_MAX + 32];
	bool threads_dumped;            /* ebpf__threads() read them as the window closed */
};

/* One option into o; returns EXIT_OK or the usage error's exit code. */
static int parse_option(struct cli_result *oc, struct profile_opts *o, int c, const char *arg)
{
	int r;

	r = cli_target_option(oc, &o->tg, c, arg);
	if (r != CLI_NOT_TARGET_OPTION)
		return r;
	switch (c) {
	case 'W':
		return EXIT_OK;  /* taken before parsing, so that usage errors are reported too */
	case 'd':
		r = parse_duration_ns(arg, &o->duration);
		if (r < 0 || o->duration == 0)
			return cli_fail(oc, EXIT_USAGE, 0, "--duration '%s' is not a duration such as "
				    "5s, 500ms, 2m or 1h30m", arg);
		return EXIT_OK;
	case 'o':
		snprintf(o->outdir, sizeof(o->outdir), "%s", arg);
		return EXIT_OK;
	case 'C':
		if (parse_collectors(arg, &o->collectors, &o->eo.collectors) < 0)
			return cli_fail(oc, EXIT_USAGE, 0, "--collectors '%s': use a comma-separated "
				    "list of cuda, nccl, rdma, cupti, cpu, offcpu, syscalls, python, "
				    "or all", arg);
		return EXIT_OK;
	case 'F': {
		char *end;
		unsigned long hz;

		errno = 0;
		hz = strtoul(arg, &end, 10);
		if (errno || end == arg || *end || hz == 0 || hz > EBPF_MAX_FREQUENCY)
			return cli_fail(oc, EXIT_USAGE, 0, "--frequency '%s' is not a sampling rate "
				    "from 1 to %d Hz", arg, EBPF_MAX_FREQUENCY);
		o->eo.frequency_hz = (uint32_t)hz;
		return EXIT_OK;
	}
	case 'M':
	case 'S':
		if (parse_duration_ns(arg, c == 'M' ? &o->eo.offcpu_min_ns :
				      &o->eo.slow_syscall_ns) < 0)
			return cli_fail(oc, EXIT_USAGE, 0, "--%s '%s' is not a duration such as 1ms "
				    "or 500us", c == 'M' ? "offcpu-min" : "slow-syscall", arg);
		return EXIT_OK;
	case 'R': {
		char *end;
		unsigned long n;

		errno = 0;
		n = strtoul(arg, &end, 10);
		if (errno || end == arg || *end || arg[0] == '-' || n > 1000000)
			return cli_fail(oc, EXIT_USAGE, 0, "--record-rate '%s' is not a number of "
				    "records a second from 0 (no limit) to 1000000", arg);
		o->eo.record_rate = (uint32_t)n;
		return EXIT_OK;
	}
	case 'B': {
		char *end;
		double pct;

		if (!strcmp(arg, "off")) {
			o->eo.budget_ppm = 0;
			return EXIT_OK;
		}
		errno = 0;
		pct = strtod(arg, &end);
		if (*end == '%')
			end++;
		if (errno || end == arg || *end || !(pct >= 0.001 && pct <= 100))
			return cli_fail(oc, EXIT_USAGE, 0, "--budget '%s' is not a share of the "
				    "targets' CPU from 0.001%% to 100%%, such as 1%% or 0.5%%, nor off "
				    "(no budget)", arg);
		o->eo.budget_ppm = (uint32_t)(pct * 10000 + 0.5);
		return EXIT_OK;
	}
	case 'N':
		o->no_ebpf = true;
		return EXIT_OK;
	case 'Q':
		o->eo.no_follow = true;
		return EXIT_OK;
	case 'A':
		o->eo.all_syscalls = true;
		return EXIT_OK;
	case 'G':
		if (strcmp(arg, "wall") == 0)
			o->eo.wall = true;
		else if (strcmp(arg, "cpu") == 0)
			o->eo.wall = false;
		else
			return cli_fail(oc, EXIT_USAGE, 0, "--mode '%s': use cpu or wall", arg);
		return EXIT_OK;
	case 'U':
		return cli_unwind_option(oc, arg, &o->eo.unwind_stack_bytes);
	case 'P':
		return cli_python_names_option(oc, arg);
	case 'Y':
		o->eo.unwind_cache = cli_unwind_cache(arg);
		return EXIT_OK;
	case 'm':
		if (strcmp(arg, "auto") == 0)
			o->method = METHOD_AUTO;
		else if (strcmp(arg, "ptrace") == 0)
			o->method = METHOD_PTRACE;
		else if (strcmp(arg, "ebpf") == 0)
			o->method = METHOD_EBPF;
		else
			return cli_fail(oc, EXIT_USAGE, 0, "--method '%s': use auto, ptrace or ebpf",
					arg);
		return EXIT_OK;
	case 'L':
		snprintf(o->lib, sizeof(o->lib), "%s", arg);
		o->io.lib_path = o->lib;
		return EXIT_OK;
	case 'T':
		if (parse_duration_ns(arg, &o->io.timeout_ns) < 0 || o->io.timeout_ns == 0)
			return cli_fail(oc, EXIT_USAGE, 0, "--inject-timeout '%s' is not a duration such "
				    "as 5s", arg);
		return EXIT_OK;
	case 'v':
		log_set_max_level(LOG_DEBUG);
		return EXIT_OK;
	case 'q':
		log_set_max_level(LOG_ERR);
		return EXIT_OK;
	case 'h':
		usage(stdout);
		o->help = true;
		return EXIT_OK;
	default:
		usage(stderr);
		return cli_fail(oc, EXIT_USAGE, 0, "bad command line for aiprof profile (see 'aiprof "
			    "profile --help')");
	}
}

/* The command line into o, every option checked; returns an exit code. */
static int parse_options(int argc, char **argv, struct cli_result *oc, struct profile_opts *o)
{
	static const struct option opts[] = {
		CLI_TARGET_LONG_OPTIONS,
		{ "termination-log", required_argument, NULL, 'W' },
		{ "duration", required_argument, NULL, 'd' },
		{ "output", required_argument, NULL, 'o' },
		{ "collectors", required_argument, NULL, 'C' },
		{ "lib", required_argument, NULL, 'L' },
		{ "inject-timeout", required_argument, NULL, 'T' },
		{ "frequency", required_argument, NULL, 'F' },
		{ "offcpu-min", required_argument, NULL, 'M' },
		{ "slow-syscall", required_argument, NULL, 'S' },
		{ "record-rate", required_argument, NULL, 'R' },
		{ "budget", required_argument, NULL, 'B' },
		{ "no-ebpf", no_argument, NULL, 'N' },
		{ "unwind", required_argument, NULL, 'U' },
		{ "python-names", required_argument, NULL, 'P' },
		{ "unwind-cache", required_argument, NULL, 'Y' },
		{ "no-follow", no_argument, NULL, 'Q' },
		{ "all-syscalls", no_argument, NULL, 'A' },
		{ "mode", required_argument, NULL, 'G' },
		{ "method", required_argument, NULL, 'm' },
		{ "verbose", no_argument, NULL, 'v' },
		{ "quiet", no_argument, NULL, 'q' },
		{ "help", no_argument, NULL, 'h' },
		{}
	};
	int c, rc;

	*o = (struct profile_opts){
		.duration = 5 * NSEC_PER_SEC,
		.collectors = AIPROF_COLLECT_ALL,
		.io = { .timeout_ns = 5 * NSEC_PER_SEC },
		.eo = { .collectors = EBPF_COLLECT_ALL, .frequency_hz = EBPF_DEFAULT_FREQUENCY,
			.offcpu_min_ns = NSEC_PER_MSEC, .slow_syscall_ns = NSEC_PER_MSEC,
			.record_rate = EBPF_DEFAULT_RECORD_RATE,
			.unwind_stack_bytes = EBPF_UNWIND_STACK_BYTES,
			.unwind_cache = cli_unwind_cache(NULL) },
	};
	optind = 1;
	while ((c = getopt_long(argc, argv, "p:d:o:vqh", opts, NULL)) != -1) {
		rc = parse_option(oc, o, c, optarg);
		if (rc != EXIT_OK || o->help)
			return rc;
	}
	if (optind < argc)
		return cli_fail(oc, EXIT_USAGE, 0, "unexpected argument '%s'", argv[optind]);
	if (o->eo.wall && (o->no_ebpf || !(o->eo.collectors & EBPF_COLLECT_CPU)))
		return cli_fail(oc, EXIT_USAGE, 0, "--mode wall samples with the eBPF cpu collector: "
			    "add cpu to --collectors%s", o->no_ebpf ? " and drop --no-ebpf" : "");
	return EXIT_OK;
}

/* The processes (a container's, chosen), the output folder and the library; an exit code. */
static int resolve_inputs(struct cli_result *oc, struct profile_opts *o)
{
	int rc = cli_targets_resolve(oc, &o->tg, "profile");

	if (rc != EXIT_OK)
		return rc;
	if (strncmp(o->outdir, "s3://", 5) == 0 || store_url_is_store(o->outdir)) {
		/* artifacts are built in a local staging folder, kept until the upload is confirmed */
		snprintf(o->s3url, sizeof(o->s3url), "%s", o->outdir);
		o->outdir[0] = 0;
		oc->to_s3 = true;
	}
	if (strncmp(o->outdir, "file://", 7) == 0)
		memmove(o->outdir, o->outdir + 7, strlen(o->outdir + 7) + 1);
	if (!o->outdir[0])
		default_outdir(o->outdir, sizeof(o->outdir));
	if (!o->io.lib_path) {
		default_lib_path(o->lib, sizeof(o->lib));
		o->io.lib_path = o->lib;
	}
	if (o->method != METHOD_EBPF && access(o->io.lib_path, R_OK) < 0) {
		if (o->method == METHOD_PTRACE)
			return cli_fail(oc, EXIT_FAILURE_, -errno, "cannot read the interception "
				    "library %s: %m (build it with 'make', or point --lib / AIPROF_LIB "
				    "at libaiprof.so)", o->io.lib_path);
		o->lib_err = errno;     /* auto: the eBPF method for every target, saying why */
	}
	return EXIT_OK;
}

/* Can processes the targets start be attached during the window? The follower names them,
 * and the library's collectors are what attaching them is for. */
static bool late_possible(const struct profile_opts *o)
{
	return o->collectors && !o->no_ebpf && !o->eo.no_follow &&
	       (o->eo.collectors & (EBPF_COLLECT_CPU | EBPF_COLLECT_OFFCPU | EBPF_COLLECT_SYSCALLS));
}

/* Can t be profiled at all? A static binary gets the uprobe method where that may be
 * chosen. 0, or a negative errno with the reason in msg. */
static int preflight_one(struct target *t, const struct profile_opts *o, char *msg, size_t len)
{
	int r = target_preflight(t->pid, msg, len);

	if (r == -ENOEXEC && (o->method == METHOD_EBPF ||
			      (o->method == METHOD_AUTO && !o->no_ebpf))) {
		/* static binary: nothing to dlopen into, but uprobes need nothing (and with
		 * eBPF collectors only there is nothing to choose) */
		if (o->method == METHOD_AUTO && o->collectors)
			auto_chose_ebpf(t, msg);
		r = 0;
	}
	return r;
}

/* Every target checked and held (pidfd, start time), the output folder made; an exit code. */
static int prepare_targets(struct run *run)
{
	struct profile_opts *o = run->o;
	size_t max_events;
	int r;

	/* room for the late ones from the start: the array never moves */
	run->targets = calloc(o->tg.npids + LATE_MAX, sizeof(*run->targets));
	if (!run->targets)
		return cli_fail(run->oc, EXIT_FAILURE_, -ENOMEM, "out of memory");
	/* the late ones, if any can come, share one process's budget */
	max_events = events_budget(o->tg.npids + late_possible(o), &run->mem_limit,
				   &o->eo.max_events);
	run->late_max_events = max_events / LATE_MAX < EVENTS_MIN / 4 ? EVENTS_MIN / 4 :
			       max_events / LATE_MAX;
	for (size_t i = 0; i < o->tg.npids; i++) {
		struct target *t = &run->targets[i];
		char msg[512];

		t->store.max_events = max_events;
		t->pid = o->tg.pids[i];
		r = preflight_one(t, o, msg, sizeof(msg));
		if (r < 0)
			return cli_fail(run->oc, exit_code_for(r), 0, "%s", msg);
		target_read_identity(t);
		run->ntargets++;
	}
	r = mkdir_parents(o->outdir, 0755);
	if (r < 0)
		return cli_fail(run->oc, EXIT_OUTPUT, r, "cannot create the output folder %s: %m",
			    o->outdir);
	return EXIT_OK;
}

/* Loads the library into t (or puts uprobes on it): 0, or a negative errno in t->message.
 * --method auto: ptrace injection, and the uprobe method where that cannot work or failed
 * (the target is as it was after a failed injection), the choice in t->method_reason. */
static int attach_one(struct target *t, const struct profile_opts *o)
{
	char ptrace_msg[sizeof(t->message)];
	int r, r2;

	if (!target_same_process(t)) {
		snprintf(t->message, sizeof(t->message), "the process chosen exited before we "
			 "attached%s", target_exited(t->pid) ? "" :
			 " (its pid now names another process, which is left alone)");
		return -ESRCH;
	}
	if (o->method == METHOD_AUTO && o->no_ebpf && !t->uprobe_method) {
		r = attach_target(t, &o->io);   /* --no-ebpf: no uprobes to fall back to */
	} else if (o->method == METHOD_AUTO && o->lib_err && !t->uprobe_method) {
		snprintf(ptrace_msg, sizeof(ptrace_msg), "the interception library %s cannot be "
			 "read: %s", o->io.lib_path, strerror(o->lib_err));
		auto_chose_ebpf(t, ptrace_msg);
		r = attach_target_uprobes(t, o->collectors);
	} else if (o->method == METHOD_EBPF || t->uprobe_method) {
		r = attach_target_uprobes(t, o->collectors);
	} else {
		r = attach_target(t, &o->io);
		if (r >= 0 && o->method == METHOD_AUTO)
			snprintf(t->method_reason, sizeof(t->method_reason), "auto: %s",
				 t->inj.how == INJECT_PTRACE_WOKEN ? "the copy of libaiprof.so it "
				 "inherited across fork() woken by ptrace" :
				 "libaiprof.so loaded by ptrace injection");
		if (r < 0 && r != -ESRCH && o->method == METHOD_AUTO && target_same_process(t)) {
			/* the injection left the process as it was: look at it from outside */
			snprintf(ptrace_msg, sizeof(ptrace_msg), "%s", t->message);
			auto_chose_ebpf(t, ptrace_msg);
			r2 = attach_target_uprobes(t, o->collectors);
			if (r2 < 0) {   /* neither: both reasons, the injection's exit code */
				char ebpf_msg[sizeof(t->message)];

				snprintf(ebpf_msg, sizeof(ebpf_msg), "%s", t->message);
				snprintf(t->message, sizeof(t->message), "%s; and the eBPF method "
					 "failed too: %s", ptrace_msg, ebpf_msg);
			} else {
				t->message[0] = '\0';
				r = 0;
			}
		}
	}
	if (r >= 0 && !target_same_process(t)) {
		/* it exited while we attached, and its pid was taken at once: what we reached is
		 * not what was chosen; record nothing of it */
		snprintf(t->message, sizeof(t->message), "the process chosen exited while we "
			 "attached and its pid was reused; nothing of the newcomer is recorded");
		return -ESRCH;
	}
	return r;
}

/* Attaches to every target; a target that fails is left out. An exit code. */
static int attach_all(struct run *run)
{
	const struct profile_opts *o = run->o;

	for (size_t i = 0; i < o->tg.npids; i++) {
		struct target *t = &run->targets[i];
		int r;

		if (!o->collectors) {
			/* eBPF collectors only: nothing to inject */
			snprintf(t->cupti_reason, sizeof(t->cupti_reason), "the interception library "
				 "was not injected (--collectors asked for eBPF collectors only)");
			target_refresh_threads(t);
			run->nok++;
			continue;
		}
		r = attach_one(t, o);
		if (r < 0) {
			t->error = r;
			cli_fail(run->oc, 0, 0, "pid %d: %s", t->pid, t->message);
			if (!run->first_err)
				run->first_err = r;
			continue;
		}
		target_refresh_threads(t);
		run->nok++;
	}
	return run->nok ? EXIT_OK : exit_code_for(run->first_err);
}

/* On the late thread: a process a target started, attached as the targets were. */
static int attach_late(struct target *t, void *ctx)
{
	const struct profile_opts *o = ctx;
	unsigned long long want = t->start_ticks, start = 0;
	pid_t ppid = 0;
	int r;

	/* still the process the follower saw, held by its pidfd: a child of its parent, or
	 * the target chosen that exec'd (its start time kept); a pid freed and handed to
	 * another process since is left alone */
	target_read_identity(t);
	if (container__parent_and_start("/proc", t->pid, &ppid, &start) < 0 ||
	    (t->parent && ppid != t->parent) || start != t->start_ticks ||
	    (want && start != want)) {
		snprintf(t->message, sizeof(t->message), "it exited before it was attached%s",
			 target_exited(t->pid) ? "" : " (its pid names another process now)");
		return -ESRCH;
	}
	r = preflight_one(t, o, t->message, sizeof(t->message));
	if (r < 0)
		return r;
	r = attach_one(t, o);
	if (r == 0 && t->parent)
		log_info("pid %d (%s, started by %d): attached during the window%s%s", t->pid,
			 t->comm, t->parent, t->uprobe_method ? ", with uprobes" : "",
			 t->inj.how == INJECT_ALREADY_LOADED ? " (its library was loaded already)" :
			 t->inj.how == INJECT_PTRACE_WOKEN ? " (the library it inherited woken)" : "");
	else if (r == 0)
		log_info("pid %d exec'd %s: attached again%s", t->pid, t->comm,
			 t->uprobe_method ? ", with uprobes" : "");
	return r;
}

static void discard_late(struct target *t)
{
	free_targets_in(t, 1);
}

/* the eBPF collectors that attach programs of their own, for what they cost others */
static const struct { const char *name; uint32_t flag; } ebpf_names[] = {
	{ "cpu", EBPF_COLLECT_CPU }, { "offcpu", EBPF_COLLECT_OFFCPU },
	{ "syscalls", EBPF_COLLECT_SYSCALLS },
};

/* The eBPF collectors for the targets attached, or why not (run->ebpf_why). An exit code. */
static int start_ebpf(struct run *run)
{
	const struct profile_opts *o = run->o;
	char desc[1024];
	int r;

	if (o->no_ebpf || !o->eo.collectors) {
		snprintf(run->ebpf_why, sizeof(run->ebpf_why), o->no_ebpf ? "disabled by --no-ebpf" :
			 "not requested (--collectors has no cpu, offcpu, syscalls or python)");
	} else if (!in_host_pid_namespace()) {
		snprintf(run->ebpf_why, sizeof(run->ebpf_why), "aiprof runs in a pid namespace "
			 "other than the host's (an ephemeral container, say), and the eBPF "
			 "collectors pick their processes by host pid: run it with hostPID "
			 "(--container-id) for CPU, off-CPU and syscall data");
		log_notice("eBPF collectors off: %s", run->ebpf_why);
	} else {
		pid_t ok_pids[MAX_TARGETS];
		size_t n_ok = 0;

		for (size_t i = 0; i < o->tg.npids; i++)
			if (!run->targets[i].error)
				ok_pids[n_ok++] = run->targets[i].pid;
		r = ebpf__new(&o->eo, ok_pids, n_ok, &run->ebpf, run->ebpf_why,
			      sizeof(run->ebpf_why));
		if (r < 0)
			log_notice("eBPF collectors off: %s", run->ebpf_why);
		else
			log_info("eBPF collectors on: %s", ebpf__describe(run->ebpf, desc, sizeof(desc)));
		if (r >= 0 && ebpf__task_work_refused(run->ebpf))
			log_warning("eBPF: %s: off-CPU records are completed at sys_exit and system "
				    "calls traced at raw_syscalls instead, which puts every task's "
				    "system calls on the kernel's slow path while the window is open "
				    "(summary.json: ebpf.task_work)", ebpf__task_work_refused(run->ebpf));
		for (size_t i = 0; r >= 0 && i < o->tg.npids; i++)
			for (size_t k = 0; k < 2; k++)
				ebpf__exclude_thread(run->ebpf, run->targets[i].pid,
						     run->targets[i].own_tids[k]);
		/* what the window costs processes that are not profiled (summary.json: ebpf.scope),
		 * one line per reason */
		for (size_t i = 0; run->ebpf && i < sizeof(ebpf_names) / sizeof(ebpf_names[0]); i++) {
			const char *scope = ebpf__scope(run->ebpf, ebpf_names[i].flag);
			char names[64];
			size_t n = 0;
			bool seen = false;

			if (!scope || strncmp(scope, "global", 6) != 0)
				continue;
			for (size_t k = 0; k < i; k++) {
				const char *other = ebpf__scope(run->ebpf, ebpf_names[k].flag);

				seen |= other && strcmp(other, scope) == 0;
			}
			if (seen)
				continue;
			for (size_t k = i; k < sizeof(ebpf_names) / sizeof(ebpf_names[0]); k++) {
				const char *other = ebpf__scope(run->ebpf, ebpf_names[k].flag);

				if (other && strcmp(other, scope) == 0 && n < sizeof(names))
					n += (size_t)snprintf(names + n, sizeof(names) - n, "%s%s",
							      n ? ", " : "", ebpf_names[k].name);
			}
			log_notice("eBPF %s: attached for every process on this machine, not only "
				   "the targets: %s", names, scope);
		}
	}
	if (!o->collectors && !run->ebpf)
		return cli_fail(run->oc, EXIT_INJECT, 0, "nothing to record: the eBPF collectors are "
			    "off (%s) and --collectors asked for no library collector", run->ebpf_why);
	return EXIT_OK;
}

/* What the library records (AIPROF_COLLECT_*). */
static uint32_t lib_collectors(const struct profile_opts *o)
{
	return o->collectors | (o->eo.unwind_stack_bytes ? 0 : AIPROF_COLLECT_FP_STACKS);
}

#define HOLD_EVERY_NS (500 * NSEC_PER_MSEC)

/*
 * The code of a target whose launch stacks are recorded (by the library or by uprobes),
 * held while it lives (collect/ebpf_symbols.h): a process that exits during the window
 * keeps the names of its frames. An entry whose process exec'd since keeps the old
 * program's maps.
 */
static void hold_code(struct run *run, struct target *t)
{
	if ((!t->session && !t->uprobes) || t->error)
		return;
	if (!run->symz && symbolizer__new(&run->symz) < 0) {
		run->symz = NULL;
		return;
	}
	if (!t->psyms) {
		if (t->execd_after_attach || !target_same_process(t) ||
		    symbolizer__proc(run->symz, t->pid, &t->psyms) < 0) {
			t->psyms = NULL;        /* looked up at the end, as before */
			return;
		}
	}
	if (t->execd_after_attach)
		proc_symbolizer__freeze(t->psyms);
	else
		(void)proc_symbolizer__hold(t->psyms, NULL);
}

static void hold_all_code(struct run *run)
{
	for (size_t i = 0; i < run->ntargets; i++)
		hold_code(run, &run->targets[i]);
	run->next_hold_ns = now_monotonic_ns() + HOLD_EVERY_NS;
}

/* The follower's news to the late thread; the processes it attached, into the window. */
static void late_poll(struct run *run)
{
	struct ebpf_proc_note notes[32];
	struct target t;
	size_t n;

	if (!run->late)
		return;
	while ((n = ebpf__follow_news(run->ebpf, notes, sizeof(notes) / sizeof(notes[0]))))
		for (size_t i = 0; i < n; i++) {
			unsigned long long start = 0;

			/* a target chosen that exec'd: attached anew if it was attached at all */
			for (size_t k = 0; !notes[i].parent && k < run->o->tg.npids; k++)
				if (run->targets[k].pid == notes[i].pid && !run->targets[k].error &&
				    (run->targets[k].session || run->targets[k].uprobes))
					start = run->targets[k].start_ticks;
			if (notes[i].parent || start)
				late__offer(run->late, notes[i].pid, notes[i].parent, notes[i].ns,
					    notes[i].execd, start);
		}
	/* at most LATE_MAX come: the array has room for them */
	while (late__take(run->late, &t)) {
		struct target *nt = &run->targets[run->ntargets];

		/* the pid's earlier entry recorded the program it exec'd away from: its ring has
		 * no library any more, and its launches are not named after the new program */
		for (size_t i = 0; i < run->ntargets; i++)
			if (run->targets[i].pid == t.pid && !run->targets[i].execd_after_attach) {
				run->targets[i].execd_after_attach = true;
				if (run->targets[i].session)
					session__orphan(run->targets[i].session);
				if (run->targets[i].psyms)
					proc_symbolizer__freeze(run->targets[i].psyms);
			}
		run->ntargets++;
		*nt = t;
		for (size_t k = 0; k < 2; k++)
			ebpf__exclude_thread(run->ebpf, nt->pid, nt->own_tids[k]);
		nt->store.max_events = run->late_max_events;
		if (nt->session)
			session__start(nt->session, lib_collectors(run->o));
		target_refresh_threads(nt);
		hold_code(run, nt);
	}
}

/* The kernel's boot id and the targets' time namespace: on one boot and one namespace, two
 * windows' CLOCK_MONOTONIC times are the same clock. */
static void read_clock_domain(struct run *run)
{
	struct clock_domain *c = &run->prof.clock;
	char buf[64];
	ssize_t n = readfile_buf("/proc/sys/kernel/random/boot_id", buf, sizeof(buf));
	size_t len = n > 0 ? strcspn(buf, "\n") : 0;

	*c = (struct clock_domain){ .timens_known = run->ntargets > 0 };
	if (len == 36 && strspn(buf, "0123456789abcdef-") >= 36)
		snprintf(c->boot_id, sizeof(c->boot_id), "%.36s", buf);
	else
		log_info("the kernel's boot id is unreadable (%s): aiprof merge will fit this window's "
			 "clock to the other ranks'", n < 0 ? strerror((int)-n) : "not a UUID");
	for (size_t i = 0; i < run->ntargets && c->timens_known; i++) {
		int64_t off;

		if (proc_timens_monotonic(run->targets[i].pid, &off) < 0 || (i && off != c->timens_ns))
			c->timens_known = false;
		else
			c->timens_ns = off;
	}
}

/* The window: drains every source until it ends, a signal stops it or every target exited. */
static void record_window(struct run *run)
{
	const struct profile_opts *o = run->o;
	uint64_t next_alive_check = 0;
	int r;

	read_clock_domain(run);
	run->prof.start_realtime_ns = now_realtime_ns();
	run->prof.start_ns = now_monotonic_ns();
	for (size_t i = 0; i < o->tg.npids; i++)
		if (run->targets[i].session)
			session__start(run->targets[i].session, lib_collectors(o));
	if (run->ebpf)
		ebpf__start(run->ebpf);
	hold_all_code(run);
	if (record_release_fd >= 0) {
		/* aiprof record: the collectors run, the command may exec now */
		if (write(record_release_fd, "g", 1) != 1)
			log_warning("record: cannot tell the command to start: %s", strerror(errno));
		close(record_release_fd);
		record_release_fd = -1;
	}
	run->prof.late.on = run->ebpf && late_possible(o) &&
			    (ebpf__collectors(run->ebpf) & EBPF_COLLECT_FOLLOW);
	if (run->prof.late.on) {
		r = late__new(attach_late, discard_late, run->o, &run->late);
		if (r < 0) {
			run->prof.late.on = false;
			log_notice("the processes the targets start are followed by the eBPF "
				   "collectors only: cannot start the thread that attaches them: %s",
				   strerror(-r));
		}
	}
	log_info("recording %zu process%s for %.3gs", run->nok, run->nok == 1 ? "" : "es",
		 (double)o->duration / 1e9);
	while (!stop_requested && now_monotonic_ns() - run->prof.start_ns < o->duration) {
		if (now_monotonic_ns() >= next_alive_check) {
			/* every process we record has exited (its pod deleted, say): nothing more
			 * will come, so the window ends here and what it holds is written */
			next_alive_check = now_monotonic_ns() + 100 * NSEC_PER_MSEC;
			run->n_exited = count_exited(run->targets, o->tg.npids);
			if (run->n_exited == run->nok) {
				run->cut_realtime_ns = now_realtime_ns();
				break;
			}
		}
		late_poll(run);
		if (now_monotonic_ns() >= run->next_hold_ns)
			hold_all_code(run);
		for (size_t i = 0; i < run->ntargets; i++) {
			struct target *t = &run->targets[i];

			if (t->uprobes)
				uprobe_session__drain(t->uprobes, &t->store);
			if (t->session) {
				session__drain(t->session, &t->store);
				session__heartbeat(t->session);
			}
			if ((t->uprobes || t->session) && !t->execd_after_attach)
				target_name_launches(t);
		}
		ebpf__poll(run->ebpf);
		sleep_ns(5 * NSEC_PER_MSEC);
	}
}

/* Stops recording, takes the last events, and reads what the artifacts need of each target. */
static void stop_window(struct run *run)
{
	const struct profile_opts *o = run->o;

	/* an attach in flight ends first, and what was attached is recorded to the end */
	late__stop(run->late);
	late_poll(run);
	if (run->late) {
		bool on = run->prof.late.on;

		late__stats(run->late, &run->prof.late);
		run->prof.late.on = on;
	}
	ebpf__stop(run->ebpf);
	hold_all_code(run);     /* what was loaded since the last look */
	/* every thread's stacks as the window closes: stacks.json, what `aiprof merge` groups
	 * the ranks by */
	run->threads_dumped = run->ebpf && ebpf__threads(run->ebpf) >= 0;
	for (size_t i = 0; i < run->ntargets; i++) {
		struct target *t = &run->targets[i];

		if (t->uprobes) {
			uprobe_session__stop(t->uprobes, &t->store);
		} else if (t->session) {
			session__stop(t->session, &t->store);
			copy_lib_status(t);
		} else {
			if (!t->error)
				target_refresh_threads(t);
			continue;
		}
		if (t->execd_after_attach)
			continue;       /* its threads and maps are the new program's now */
		target_refresh_threads(t);
		target_name_launches(t);
	}
	/* the window is over: no thread or fd of ours stays behind in any target */
	for (size_t i = 0; i < run->ntargets; i++) {
		struct target *t = &run->targets[i];

		if (!t->session)
			continue;
		switch (session__release(t->session)) {
		case 0:         t->released = 1; break;
		case -EALREADY: t->released = 2; break;
		case -ESRCH:    t->released = 3; break;
		default:        t->released = -1; break;
		}
	}
	for (size_t i = 0; i < run->ntargets; i++) {
		struct target *t = &run->targets[i];
		int st;
		uint64_t ns;

		event_store__demangle(&t->store);
		if (t->died || !ebpf__exit_of(run->ebpf, t->pid, &st, &ns))
			continue;
		/* it ended during the window: how, and what aiprof was doing in it */
		t->died = true;
		t->exit_status = st;
		t->exit_ns = ns;
		snprintf(t->died_during, sizeof(t->died_during), "%s",
			 t->error ? "not attached" :
			 t->inj.started_ns && ns < t->inj.started_ns + t->inj.load_ns ? "injecting" :
			 t->uprobes ? "recording (eBPF method: uprobes, nothing in the process)" :
			 t->session ? "recording (the library's hooks live in it)" :
			 "recording (eBPF collectors only)");
	}
	run->prof.end_ns = now_monotonic_ns();
	if (stop_requested)
		log_notice("window ended early by a signal");
	if (run->cut_realtime_ns)
		log_notice("window cut after %.3gs of %.3gs: the %zu process%s we recorded exited; "
			   "writing what was recorded until then",
			   (double)(run->prof.end_ns - run->prof.start_ns) / 1e9,
			   (double)o->duration / 1e9, run->nok, run->nok == 1 ? "" : "es");
	else
		run->n_exited = count_exited(run->targets, o->tg.npids);
	run->prof.targets = run->targets;
	run->prof.ntargets = run->ntargets;
	run->prof.requested_ns = o->duration;
	run->prof.outdir = o->outdir;
	run->prof.ebpf = run->ebpf;
	snprintf(run->prof.ebpf_reason, sizeof(run->prof.ebpf_reason), "%s", run->ebpf_why);
	run->prof.timeline = &run->tl_stats;
}

/* stacks.json: the threads as the window closed (aiprof.stacks/v1, as `aiprof stacks`), and
 * stacks.txt, the same as `aiprof stacks` prints it (what `kubectl aiprof stacks` shows).
 * path: the folder's path buffer (len bytes), left holding the file that failed. */
static int write_threads_dump(struct run *run, const char *outdir, char *path, size_t len)
{
	int ranks[MAX_TARGETS], r;
	struct dump_meta m = { .ranks = ranks };
	FILE *f;

	threads_dump_meta_now(&m);
	/* in the order of the eBPF targets: the processes that were recorded */
	for (size_t i = 0; i < run->o->tg.npids; i++)
		if (!run->targets[i].error)
			ranks[m.nranks++] = target_env_rank(run->targets[i].pid);
	snprintf(path, len, "%s/stacks.json", outdir);
	f = fopen(path, "we");
	if (!f)
		return -errno;
	r = threads_dump_write_json_file(f, run->ebpf, &m);
	if (fclose(f) != 0 && r == 0)
		r = -errno;
	if (r < 0)
		return r;
	snprintf(path, len, "%s/stacks.txt", outdir);
	f = fopen(path, "we");
	if (!f)
		return -errno;
	threads_dump_write_text(f, run->ebpf, &m);
	if (ferror(f))
		r = -EIO;
	if (fclose(f) != 0 && r == 0)
		r = -errno;
	return r;
}

/* The diagnosis, then every artifact into the output folder; an exit code. */
static int write_artifacts(struct run *run)
{
	const char *outdir = run->o->outdir;
	char *path = run->report;
	size_t len = sizeof(run->report);
	int r;

	/* analysis and findings, read by the summary and the report; artifacts without them
	 * are still worth writing */
	r = diagnosis__new(&run->prof, &run->prof.diag);
	if (r < 0)
		log_warning_errno(r, "no diagnosis for this window: %m");
	snprintf(path, len, "%s/timeline.json.gz", outdir);
	r = timeline_write(&run->prof, path);
	if (r < 0)
		return cli_fail(run->oc, EXIT_OUTPUT, r, "cannot write %s: %m", path);
	snprintf(path, len, "%s/summary.json", outdir);
	r = summary_write(&run->prof, path);
	if (r < 0)
		return cli_fail(run->oc, EXIT_OUTPUT, r, "cannot write %s: %m", path);
	r = ebpf_folded_write(run->ebpf, outdir);
	if (r < 0)
		return cli_fail(run->oc, EXIT_OUTPUT, r, "cannot write the folded stacks into %s: %m",
			    outdir);
	snprintf(path, len, "%s/profile.pb.gz", outdir);
	r = pprof_write(&run->prof, run->ebpf, path, run->prof.start_realtime_ns,
			run->prof.end_ns - run->prof.start_ns);
	if (r < 0)
		return cli_fail(run->oc, EXIT_OUTPUT, r, "cannot write %s: %m", path);
	if (run->threads_dumped) {
		r = write_threads_dump(run, outdir, path, len);
		if (r < 0)
			return cli_fail(run->oc, EXIT_OUTPUT, r, "cannot write %s: %m", path);
	}
	r = report_write(&run->prof, outdir, path, len);
	if (r < 0)
		return cli_fail(run->oc, EXIT_OUTPUT, r, "cannot write the flame graphs and report "
			    "into %s: %m", outdir);
	snprintf(run->oc->outdir, sizeof(run->oc->outdir), "%s", outdir);
	return EXIT_OK;
}

/* The findings and counts, on stderr and into the termination message. */
static void report_results(struct run *run)
{
	const struct diagnosis *d = run->prof.diag;
	struct termination *term = run->oc->term;
	uint64_t events = 0, dropped = 0;

	for (size_t i = 0; d && i < d->findings->n; i++) {
		const struct finding *f = &d->findings->v[i];

		log_notice("finding: %s (%s): %s", f->category, finding_severity_name(f->severity),
			   f->summary);
		if (term && termlog_finding(term, f->category, finding_severity_name(f->severity)) < 0)
			termlog_count(term, "findings_omitted", d->findings->n - TERM_MAX_FINDINGS);
	}
	log_notice("report: %s", run->report);
	for (size_t i = 0; i < run->ntargets; i++) {
		const struct target *t = &run->targets[i];

		if (t->error)
			continue;
		log_info("pid %d (%s): %llu events, %llu dropped", t->pid, t->comm,
			 (unsigned long long)(t->store.n + t->store.over.events),
			 (unsigned long long)(t->store.drops + t->store.store_drops));
		if (t->store.over.events)
			log_notice("pid %d: the first %zu events are kept whole, the most one process "
				   "may keep%s; the %llu after them are in the summary's counts and "
				   "tables, not in the timeline or the diagnosis (summary.json "
				   "event_budget). A shorter --duration keeps all of them", t->pid,
				   t->store.n, run->mem_limit == UINT64_MAX ? "" : " within aiprof's "
				   "memory limit", (unsigned long long)t->store.over.events);
		events += t->store.n + t->store.over.events;
		dropped += t->store.drops + t->store.store_drops;
	}
	if (!term)
		return;
	termlog_count(term, "processes", run->nok);
	{
		uint64_t by_uprobes = 0;

		for (size_t i = 0; i < run->o->tg.npids; i++)
			by_uprobes += !run->targets[i].error && run->targets[i].uprobe_method &&
				      run->o->collectors;
		/* of those, recorded through uprobes (--method ebpf, or auto's choice) */
		if (by_uprobes)
			termlog_count(term, "processes_ebpf_method", by_uprobes);
	}
	termlog_count(term, "processes_failed", run->o->tg.npids - run->nok);
	/* started by the targets, and attached during the window */
	if (run->ntargets > run->o->tg.npids)
		termlog_count(term, "processes_followed", run->ntargets - run->o->tg.npids);
	termlog_count(term, "events", events);
	termlog_count(term, "dropped", dropped);
	termlog_count(term, "findings", d ? d->findings->n : 0);
	termlog_count(term, "window_ms", (run->prof.end_ns - run->prof.start_ns) / NSEC_PER_MSEC);
	if (run->n_exited)
		termlog_count(term, "processes_exited", run->n_exited);
	{
		/* a death is never silent: each process killed by a signal, by pid, in the status */
		uint64_t killed = 0;

		for (size_t i = 0; i < run->ntargets; i++) {
			const struct target *t = &run->targets[i];
			char key[40];

			if (!t->died || !WIFSIGNALED(t->exit_status))
				continue;
			if (killed++ < 4) {
				snprintf(key, sizeof(key), "killed_pid_%d_signal", (int)t->pid);
				termlog_count(term, key, (uint64_t)WTERMSIG(t->exit_status));
			}
		}
		if (killed)
			termlog_count(term, "processes_killed", killed);
	}
	if (run->cut_realtime_ns) {
		termlog_count(term, "window_cut", 1);
		termlog_count(term, "window_end_unix_ms", run->cut_realtime_ns / NSEC_PER_MSEC);
	}
}

/* -o s3://: the folder to object storage, manifest last; an exit code. */
static int upload_results(struct run *run)
{
	char msg[2048];
	struct upload_opts uo;
	int r;

	upload_opts__init(&uo);
	uo.quiet = log_get_max_level() < LOG_INFO;
	r = upload_artifacts(run->o->outdir, run->o->s3url, &uo, msg, sizeof(msg));
	if (r < 0)
		return cli_fail(run->oc, EXIT_OUTPUT, 0, "%s", msg);
	run->oc->uploaded = true;
	log_info("%s", msg);
	printf("%s\n", run->o->s3url);
	return EXIT_OK;
}

/* The stages of one window, from the attached targets to the uploaded artifacts. */
static int run_window(struct run *run)
{
	int rc;

	rc = attach_all(run);
	if (rc == EXIT_OK)
		rc = start_ebpf(run);
	if (rc != EXIT_OK)
		return rc;
	record_window(run);
	stop_window(run);
	rc = write_artifacts(run);
	if (rc != EXIT_OK)
		return rc;
	report_results(run);
	if (run->o->s3url[0]) {
		rc = upload_results(run);
		if (rc != EXIT_OK)
			return rc;
	}
	printf("%s\n", run->o->outdir);
	return run->first_err ? exit_code_for(run->first_err) : EXIT_OK;
}

static int profile_run(int argc, char **argv, struct cli_result *oc)
{
	struct sigaction sa = { .sa_handler = on_stop_signal };
	struct profile_opts *o;
	struct run run = { .oc = oc, .mem_limit = UINT64_MAX };
	int rc;

	o = calloc(1, sizeof(*o));
	if (!o)
		return cli_fail(oc, EXIT_FAILURE_, -ENOMEM, "out of memory");
	run.o = o;
	rc = parse_options(argc, argv, oc, o);
	if (rc == EXIT_OK && !o->help)
		rc = resolve_inputs(oc, o);
	if (rc != EXIT_OK || o->help)
		goto out;
	rc = prepare_targets(&run);
	if (rc != EXIT_OK)
		goto out;
	/* a ^C ends the window early; artifacts are still written */
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	rc = run_window(&run);
out:
	diagnosis__free(run.prof.diag);
	late__free(run.late);
	ebpf__free(run.ebpf);
	free_targets_in(run.targets, run.ntargets);
	symbolizer__free(run.symz);     /* the targets' psyms with it */
	free(run.targets);
	free(o);
	return rc;
}

int cmd_profile(int argc, char **argv)
{
	return cli_run(argc, argv, "profile", profile_run);
}

/* ---- aiprof record -- CMD ------------------------------------------------------------------ */

/* The command's child: waits until recording, then execs (or dies with aiprof before) */
static void record_child(int rfd, char **cmd)
{
	char c;

	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (read(rfd, &c, 1) != 1)
		_exit(127);     /* aiprof gave up before recording: the command never ran */
	close(rfd);
	/* from now on the command is the user's: whatever happens to aiprof, it runs on */
	prctl(PR_SET_PDEATHSIG, 0);
	execvp(cmd[0], cmd);
	fprintf(stderr, "aiprof record: cannot run %s: %s\n", cmd[0], strerror(errno));
	_exit(127);
}

static void record_usage(FILE *out)
{
	fprintf(out,
		"Usage: aiprof record [PROFILE OPTIONS] -- COMMAND [ARG...]\n\n"
		"Starts COMMAND and records it from its first instruction: the eBPF collectors\n"
		"run before it execs, and follow what it starts. The window lasts until the\n"
		"command exits, or --duration (default 24h); the command then runs on to its\n"
		"end, and the artifacts are written as by\n"
		"'aiprof profile'. Not done yet: the CUDA/NCCL/ibverbs hooks (the library is not\n"
		"loaded into a command aiprof starts; --method ebpf is implied). Takes the\n"
		"options of 'aiprof profile' but --pid, --container-id, --container-name and\n"
		"--match. Exits with the profile's exit code; the command's status is printed.\n");
}

int cmd_record(int argc, char **argv)
{
	char pidarg[16], **pargv;
	int dash = -1, pfd[2], rc, st;
	pid_t child;
	size_t n = 0;

	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--") == 0) {
			dash = i;
			break;
		}
		if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
			record_usage(stdout);
			return EXIT_OK;
		}
		if (strncmp(argv[i], "--pid", 5) == 0 || strcmp(argv[i], "-p") == 0 ||
		    strncmp(argv[i], "--container", 11) == 0 || strncmp(argv[i], "--match", 7) == 0 ||
		    strncmp(argv[i], "--method", 8) == 0) {
			record_usage(stderr);
			fprintf(stderr, "aiprof record: %s: the target is the command after '--'\n",
				argv[i]);
			return EXIT_USAGE;
		}
	}
	if (dash < 0 || dash + 1 >= argc) {
		record_usage(stderr);
		fprintf(stderr, "aiprof record: no command: put it after '--'\n");
		return EXIT_USAGE;
	}
	if (pipe2(pfd, O_CLOEXEC) < 0)
		return log_error_errno(errno, "record: pipe"), EXIT_FAILURE_;
	fflush(NULL);
	child = fork();
	if (child < 0)
		return log_error_errno(errno, "record: fork"), EXIT_FAILURE_;
	if (child == 0) {
		close(pfd[1]);
		record_child(pfd[0], argv + dash + 1);
	}
	close(pfd[0]);
	record_release_fd = pfd[1];
	/* the profile's command line: its defaults, the user's options, the command's pid */
	pargv = calloc((size_t)dash + 8, sizeof(*pargv));
	if (!pargv) {
		kill(child, SIGKILL);
		waitpid(child, NULL, 0);
		return EXIT_FAILURE_;
	}
	snprintf(pidarg, sizeof(pidarg), "%d", (int)child);
	pargv[n++] = argv[0];
	pargv[n++] = "--duration";
	pargv[n++] = "24h";
	for (int i = 1; i < dash; i++)
		pargv[n++] = argv[i];
	pargv[n++] = "--method";
	pargv[n++] = "ebpf";
	pargv[n++] = "--pid";
	pargv[n++] = pidarg;
	rc = cli_run((int)n, pargv, "record", profile_run);
	free(pargv);
	if (record_release_fd >= 0) {
		/* the profile failed before recording: the command is not run */
		close(record_release_fd);
		record_release_fd = -1;
		waitpid(child, NULL, 0);
		log_error("record: the command was not started");
		return rc;
	}
	if (waitpid(child, &st, 0) == child) {
		if (WIFEXITED(st))
			log_info("record: the command exited with status %d", WEXITSTATUS(st));
		else if (WIFSIGNALED(st))
			log_info("record: the command was killed by signal %d", WTERMSIG(st));
	}
	return rc;
}

