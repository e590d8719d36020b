/* SPDX-License-Identifier: MIT */
/*
 * `aiprof stacks`: what every thread of running processes is doing right now — state, how
 * long it has been blocked or running, the syscall it is in, kernel, native and Python
 * frames — read with a BPF task iterator and unwound by CFI. Nothing is loaded into the
 * targets and no thread is stopped. Text for a person, JSON (aiprof.stacks/v1) for a
 * program and for `aiprof merge`.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "collect/ebpf.h"
#include "artifacts/threads_dump.h"
#include "log.h"
#include "target/container.h"
#include "target/target.h"
#include "timeutil.h"


struct stacks_opts {
	struct cli_targets tg;
	const char *output;       /* NULL: stdout */
	bool json, help;
	bool no_children;         /* the processes given only, not what they started */
	uint32_t unwind_bytes;
	const char *unwind_cache;       /* NULL: rules not shared */
};

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: aiprof stacks --pid PID[,PID...] | --container-id ID | --container-name NAME\n"
		"                     [--match REGEX] [--format text|json] [-o FILE]\n\n"
		"Prints what every thread of the processes is doing now: its state, how long it\n"
		"has been blocked (or running), the syscall it is in, and its kernel, native and\n"
		"Python frames, innermost first. Read with a BPF task iterator: no thread is\n"
		"stopped and nothing is loaded into the processes. Runs as root (CAP_BPF and\n"
		"CAP_PERFMON, CAP_SYS_PTRACE for other users' processes).\n\n"
		"Options:\n"
		"  -p, --pid PID[,PID...]     processes (host pids)\n"
		"      --container-id ID      a container's processes (as for 'aiprof profile')\n"
		"      --container-name NAME  from an ephemeral container: the processes it sees\n"
		"      --match REGEX          with a container: the processes whose command line\n"
		"                             matches\n"
		"      --format text|json     text (default) or JSON (schema aiprof.stacks/v1, what\n"
		"                             'aiprof merge' groups across ranks)\n"
		"      --no-children          only the processes given; by default the processes\n"
		"                             they started (a launcher's ranks, DataLoader workers,\n"
		"                             and theirs) are shown too\n"
		CLI_PYTHON_NAMES_HELP
		"  -o, --output FILE          write there instead of standard output\n"
		"      --unwind cfi|fp        native stacks by CFI (default) or frame pointers\n"
		"      --unwind-cache DIR|none  unwind rules shared with the other aiprof runs\n"
		"                             (default $AIPROF_UNWIND_CACHE, else\n"
		"                             " CLI_UNWIND_CACHE_DEFAULT ")\n"
		"      --termination-log PATH write the result for Kubernetes\n"
		"  -v, --verbose | -q, --quiet\n"
		"  -h, --help\n\n"
		"Exit codes: 0 ok, 2 usage, 3 no such process, 6 the threads could not be read,\n"
		"7 the output could not be written, 1 anything else.\n");
}

static int parse(int argc, char **argv, struct cli_result *res, struct stacks_opts *o)
{
	static const struct option opts[] = {
		CLI_TARGET_LONG_OPTIONS,
		{ "format", required_argument, NULL, 'f' },
		{ "output", required_argument, NULL, 'o' },
		{ "unwind", required_argument, NULL, 'U' },
		{ "unwind-cache", required_argument, NULL, 'Y' },
		{ "termination-log", required_argument, NULL, 'W' },
		{ "no-children", no_argument, NULL, 'N' },
		{ "python-names", required_argument, NULL, 'P' },
		{ "verbose", no_argument, NULL, 'v' },
		{ "quiet", no_argument, NULL, 'q' },
		{ "help", no_argument, NULL, 'h' },
		{}
	};
	int c, r;

	*o = (struct stacks_opts){ .unwind_bytes = EBPF_UNWIND_STACK_BYTES,
				   .unwind_cache = cli_unwind_cache(NULL) };
	optind = 1;
	while ((c = getopt_long(argc, argv, "p:o:vqh", opts, NULL)) != -1) {
		r = cli_target_option(res, &o->tg, c, optarg);
		if (r == CLI_NOT_TARGET_OPTION)
			r = EXIT_OK;
		else if (r != EXIT_OK)
			return r;
		else
			continue;
		switch (c) {
		case 'f':
			if (strcmp(optarg, "json") == 0)
				o->json = true;
			else if (strcmp(optarg, "text") != 0)
				return cli_fail(res, EXIT_USAGE, 0, "--format '%s': use text or json",
						optarg);
			break;
		case 'o':
			o->output = strcmp(optarg, "-") == 0 ? NULL : optarg;
			break;
		case 'U':
			r = cli_unwind_option(res, optarg, &o->unwind_bytes);
			if (r != EXIT_OK)
				return r;
			break;
		case 'Y':
			o->unwind_cache = cli_unwind_cache(optarg);
			break;
		case 'W':
			break;  /* taken by cli_run() */
		case 'N':
			o->no_children = true;
			break;
		case 'P':
			r = cli_python_names_option(res, optarg);
			if (r != EXIT_OK)
				return r;
			break;
		case 'v':
			log_set_max_level(LOG_DEBUG);
			break;
		case 'q':
			log_set_max_level(LOG_ERR);
			break;
		case 'h':
			usage(stdout);
			o->help = true;
			return EXIT_OK;
		default:
			usage(stderr);
			return cli_fail(res, EXIT_USAGE, 0, "bad command line for aiprof stacks (see "
					"'aiprof stacks --help')");
		}
	}
	if (optind < argc)
		return cli_fail(res, EXIT_USAGE, 0, "unexpected argument '%s'", argv[optind]);
	return cli_targets_resolve(res, &o->tg, "look at");
}

static int stacks_body(int argc, char **argv, struct cli_result *res)
{
	struct stacks_opts o;
	struct ebpf_opts eo = { 0 };
	struct ebpf *e = NULL;
	struct dump_meta m = { 0 };
	char why[512];
	int ranks[CLI_MAX_TARGETS], rc, n;
	uint64_t t0;
	FILE *out = stdout;

	rc = parse(argc, argv, res, &o);
	if (rc != EXIT_OK || o.help)
		return rc;
	for (size_t i = 0; i < o.tg.npids; i++)
		if (kill(o.tg.pids[i], 0) < 0 && errno == ESRCH)
			return cli_fail(res, EXIT_NO_TARGET, 0, "no process %d (check the pid: "
					"aiprof stacks takes host pids)", o.tg.pids[i]);
	/* a launcher's ranks, a loader's workers: what the processes started, unless told not */
	if (!o.no_children)
		o.tg.npids += container__descendants("/proc", o.tg.pids, o.tg.npids,
						     o.tg.pids + o.tg.npids,
						     CLI_MAX_TARGETS - o.tg.npids);
	eo = (struct ebpf_opts){ .collectors = EBPF_COLLECT_TASKS | EBPF_COLLECT_PYTHON,
				 .unwind_stack_bytes = o.unwind_bytes, .no_follow = true,
				   .unwind_cache = o.unwind_cache };
	t0 = now_monotonic_ns();
	n = ebpf__new(&eo, o.tg.pids, o.tg.npids, &e, why, sizeof(why));
	if (n < 0)
		return cli_fail(res, EXIT_INJECT, n, "cannot read the threads: %s", why);
	n = ebpf__threads(e);
	m.took_ns = now_monotonic_ns() - t0;
	if (n < 0) {
		rc = cli_fail(res, EXIT_INJECT, n, "cannot read the threads: %m");
		goto out;
	}
	threads_dump_meta_now(&m);
	for (size_t i = 0; i < o.tg.npids; i++)
		ranks[i] = target_env_rank(o.tg.pids[i]);
	m.ranks = ranks;
	m.nranks = o.tg.npids;
	if (o.output) {
		out = fopen(o.output, "we");
		if (!out) {
			rc = cli_fail(res, EXIT_OUTPUT, -errno, "cannot write %s: %m", o.output);
			goto out;
		}
	}
	if (o.json) {
		int r = threads_dump_write_json_file(out, e, &m);

		if (r == -ENOMEM) {
			rc = cli_fail(res, EXIT_FAILURE_, r, "out of memory");
			goto out;
		}
		if (r < 0)
			rc = cli_fail(res, EXIT_OUTPUT, r, "cannot write the dump");
	} else {
		threads_dump_write_text(out, e, &m);
	}
	if (fflush(out) != 0 || ferror(out))
		rc = cli_fail(res, EXIT_OUTPUT, -errno, "cannot write the dump: %m");
	if (out != stdout && fclose(out) != 0 && rc == EXIT_OK)
		rc = cli_fail(res, EXIT_OUTPUT, -errno, "cannot write %s: %m", o.output);
	if (rc == EXIT_OK)
		log_info("%d thread%s of %zu process%s read in %.1f ms", n, n == 1 ? "" : "s",
			 o.tg.npids, o.tg.npids == 1 ? "" : "es", (double)m.took_ns / 1e6);
out:
	ebpf__free(e);
	return rc;
}

int cmd_stacks(int argc, char **argv)
{
	return cli_run(argc, argv, "stacks", stacks_body);
}
