/* SPDX-License-Identifier: MIT */
/* `aiprof merge -o DIR|s3://... SRC...`: the options, then merge/ (load and align, write),
 * then the upload. */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "s3.h"
#include "s3url.h"
#include "artifacts/termlog.h"
#include "artifacts/upload.h"
#include "merge/merge.h"
#include "merge/stacks_merge.h"
#include "readfile.h"
#include "cli.h"

#define MAX_SOURCES 256      /* ranks one merge takes */

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: aiprof merge -o DIR|s3://BUCKET/PREFIX [--termination-log FILE] [OPTIONS] SRC...\n\n"
		"Merges the artifacts of the ranks of one distributed job, each profiled on its own\n"
		"(SRC: a rank's `aiprof profile` output folder or s3:// prefix), into one timeline on\n"
		"one clock: each rank's clock offset is estimated from the end times of its NCCL\n"
		"collectives (a blocking collective ends at one moment on every rank). Writes\n"
		"timeline.json.gz (a process group per rank), summary.json (schema aiprof.merge/v1:\n"
		"offsets, residual skew, lateness per rank, Straggler and NcclHang findings) and\n"
		"manifest.json.\n\n"
		"With dumps of `aiprof stacks --format json` as SRC (files, one or more ranks each),\n"
		"groups the ranks by the stack of their main thread and names the ones that are not\n"
		"where the others are (for a hang: the ranks that never arrived at the collective the\n"
		"others wait in); prints that and writes DIR/stacks-merged.json\n"
		"(aiprof.stacks-merge/v1).\n\n"
		"  -o, --output DIR|s3://  where to write (s3://: built in a local folder ./aiprof-out/\n"
		"                          merged-<UTC time>, or under $TMPDIR when . is read-only,\n"
		"                          uploaded with manifest.json last, kept)\n"
		"  --termination-log FILE  write the aiprof.termination/v1 result there on exit\n"
		"  -q, --quiet / -v        fewer / more messages\n"
		"S3 options (for s3:// sources and output):\n%s\n"
		"Exit codes: 0 ok, 1 a source is missing or unreadable or the sources do not belong\n"
		"together, 2 usage, 7 the output could not be written or uploaded.\n",
		upload_options_help);
}

/* What `aiprof merge` was asked: its options and sources. */
struct merge_args {
	struct upload_opts uo;
	const char *out;
	char s3url[1100];               /* -o s3://...: where the merge goes after staging */
	char **srcs;
	size_t nsrcs;
	bool help;
};

/* The command line into a; an exit code. */
static int parse_merge_args(int argc, char **argv, struct cli_result *res, struct merge_args *a)
{
	enum { O_TERMLOG = UPLOAD_OPT_LAST + 1 };
	static const struct option longopts[] = {
		UPLOAD_LONG_OPTIONS,
		{ "output", required_argument, NULL, 'o' },
		{ "termination-log", required_argument, NULL, O_TERMLOG },
		{ "verbose", no_argument, NULL, 'v' },
		{ "quiet", no_argument, NULL, 'q' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	char msg[2048];
	int c, r;

	upload_opts__init(&a->uo);
	optind = 1;
	while ((c = getopt_long(argc, argv, "o:vqh", longopts, NULL)) != -1) {
		switch (c) {
		case 'o': a->out = optarg; break;
		case O_TERMLOG: break;   /* taken before parsing */
		case 'v': log_set_max_level(LOG_DEBUG); break;
		case 'q':
			a->uo.quiet = true;
			log_set_max_level(LOG_WARNING);
			break;
		case 'h':
			usage(stdout);
			a->help = true;
			return EXIT_OK;
		default:
			msg[0] = 0;
			r = upload_opts__parse_option(&a->uo, c, optarg, msg, sizeof(msg));
			if (r == 0)
				break;
			return cli_fail(res, EXIT_USAGE, 0, "%s", r == -EINVAL ? msg : "see 'aiprof merge --help' for the options");
		}
	}
	if (!a->out)
		return cli_fail(res, EXIT_USAGE, 0, "merge needs -o DIR or -o s3://BUCKET/PREFIX; see 'aiprof merge --help'");
	if (optind >= argc)
		return cli_fail(res, EXIT_USAGE, 0, "merge needs at least one SRC (a rank's artifact folder or s3:// prefix)");
	if (argc - optind > MAX_SOURCES)
		return cli_fail(res, EXIT_USAGE, 0, "at most %d sources", MAX_SOURCES);
	if (s3url_is_s3(a->out)) {
		struct s3_location loc;

		if (s3_location__parse(a->out, &loc) < 0)
			return cli_fail(res, EXIT_USAGE, 0, "-o %s: not a valid s3://BUCKET/PREFIX", a->out);
		s3_location__clear(&loc);
		snprintf(a->s3url, sizeof(a->s3url), "%s", a->out);
	}
	a->srcs = argv + optind;
	a->nsrcs = (size_t)(argc - optind);
	return EXIT_OK;
}

/* Where the merge is written: -o DIR, or for s3:// a staging folder, ./aiprof-out or, where
 * the working folder is read-only (as a container's may be), under $TMPDIR (/tmp). */
static void choose_outdir(const struct merge_args *a, char *outdir, size_t len)
{
	time_t now = time(NULL);
	struct tm tm;
	char stamp[32];
	const char *tmp;

	if (!a->s3url[0]) {
		snprintf(outdir, len, "%s", a->out);
		return;
	}
	gmtime_r(&now, &tm);
	strftime(stamp, sizeof(stamp), "%Y%m%dT%H%M%SZ", &tm);
	if (mkdir("aiprof-out", 0755) == 0 || (errno == EEXIST && access("aiprof-out", W_OK) == 0)) {
		snprintf(outdir, len, "aiprof-out/merged-%s", stamp);
		return;
	}
	tmp = getenv("TMPDIR") && getenv("TMPDIR")[0] ? getenv("TMPDIR") : "/tmp";
	snprintf(outdir, len, "%s/aiprof-out", tmp);
	mkdir(outdir, 0755);
	snprintf(outdir, len, "%s/aiprof-out/merged-%s", tmp, stamp);
}

/* The merge's figures on stderr and into the termination message. */
static void report_merge(struct cli_result *res, const struct merge *m)
{
	struct merge_stats st;
	const char *category, *severity;

	merge__stats(m, &st);
	if (st.ref_rank >= 0)
		log_info("merged %zu ranks on rank %d's clock (aligned on %s): residual skew p50 %.1f us, max %.1f us "
			 "over %zu collectives", st.ranks, st.ref_rank, st.basis, (double)st.skew_p50 / 1e3,
			 (double)st.skew_max / 1e3, st.skew_n);
	if (!res->term)
		return;
	termlog_count(res->term, "ranks", st.ranks);
	termlog_count(res->term, "ranks_aligned", st.aligned);
	termlog_count(res->term, "residual_skew_p50_ns", st.skew_p50);
	termlog_count(res->term, "residual_skew_max_ns", st.skew_max);
	termlog_count(res->term, "findings", st.findings);
	for (size_t i = 0; merge__finding(m, i, &category, &severity); i++)
		if (termlog_finding(res->term, category, severity) < 0)
			termlog_count(res->term, "findings_omitted", st.findings - i);
}

/* Dumps of `aiprof stacks`: grouped, printed, and written to DIR/stacks-merged.json. */
static int merge_dumps(const struct merge_args *a, struct cli_result *res)
{
	struct stacks_merge *m = NULL;
	char msg[1024], path[4200];
	FILE *f = NULL;
	int r, rc = EXIT_OK;

	if (s3url_is_s3(a->out))
		return cli_fail(res, EXIT_USAGE, 0, "a merge of stacks dumps is written to a local "
				"folder: give -o DIR");
	if (stacks_merge__new(&m) < 0)
		return cli_fail(res, EXIT_FAILURE_, -ENOMEM, "out of memory");
	for (size_t i = 0; i < a->nsrcs; i++) {
		char *text = NULL;
		size_t len = 0;

		r = readfile(a->srcs[i], 64 << 20, READFILE_REGULAR, &text, &len);
		if (r < 0) {
			rc = cli_fail(res, EXIT_FAILURE_, r, "cannot read %s: %m", a->srcs[i]);
			goto out;
		}
		r = stacks_merge__add(m, a->srcs[i], text, len, msg, sizeof(msg));
		free(text);
		if (r < 0) {
			rc = cli_fail(res, EXIT_FAILURE_, r, "%s", msg);
			goto out;
		}
	}
	if (stacks_merge__run(m) < 0) {
		rc = cli_fail(res, EXIT_FAILURE_, -ENOMEM, "out of memory");
		goto out;
	}
	if (mkdir(a->out, 0755) < 0 && errno != EEXIST) {
		rc = cli_fail(res, EXIT_OUTPUT, -errno, "cannot create %s: %m", a->out);
		goto out;
	}
	snprintf(path, sizeof(path), "%s/stacks-merged.json", a->out);
	f = fopen(path, "we");
	if (!f || stacks_merge__write_json(m, f) < 0 || fflush(f) != 0) {
		rc = cli_fail(res, EXIT_OUTPUT, -errno, "cannot write %s: %m", path);
		goto out;
	}
	snprintf(res->outdir, sizeof(res->outdir), "%s", a->out);
	stacks_merge__write_text(m, stdout);
	if (res->term) {
		termlog_count(res->term, "ranks_outside", stacks_merge__outliers(m));
		if (stacks_merge__outliers(m))
			termlog_finding(res->term, "NcclHang", "critical");
	}
out:
	if (f)
		fclose(f);
	stacks_merge__free(m);
	return rc;
}

/* The stages: the sources loaded and aligned, the merge written, then uploaded. */
static int merge_run(int argc, char **argv, struct cli_result *res)
{
	static char outdir[4096];
	struct merge_args a = { 0 };
	struct merge *m = NULL;
	struct s3_config cfg = { 0 };
	struct s3_client *s3 = NULL;
	char msg[2048];
	bool need_s3;
	int r, rc;

	signal(SIGPIPE, SIG_IGN);
	rc = parse_merge_args(argc, argv, res, &a);
	if (rc != EXIT_OK || a.help)
		return rc;
	{
		size_t dumps = 0;

		for (size_t i = 0; i < a.nsrcs; i++)
			dumps += stacks_merge__is_dump(a.srcs[i]);
		if (dumps && dumps < a.nsrcs)
			return cli_fail(res, EXIT_USAGE, 0, "give either `aiprof stacks` dumps or "
					"profile folders, not both");
		if (dumps)
			return merge_dumps(&a, res);
	}
	need_s3 = a.s3url[0];
	for (size_t i = 0; i < a.nsrcs; i++)
		need_s3 |= s3url_is_s3(a.srcs[i]);
	if (need_s3) {
		r = s3_config__load(&cfg, &a.uo.s3, msg, sizeof(msg));
		if (r < 0)
			return cli_fail(res, EXIT_USAGE, 0, "S3: %s", msg);
		s3 = s3_client__new(&cfg, &a.uo.client, NULL);
		if (!s3) {
			rc = cli_fail(res, EXIT_FAILURE_, 0, "cannot create the S3 client");
			goto out;
		}
	}
	r = merge__load(a.srcs, a.nsrcs, s3, &m, msg, sizeof(msg));
	if (r < 0) {
		rc = cli_fail(res, EXIT_FAILURE_, 0, "%s", msg);
		goto out;
	}
	choose_outdir(&a, outdir, sizeof(outdir));
	if (mkdir(outdir, 0755) < 0 && errno != EEXIST) {
		rc = cli_fail(res, EXIT_OUTPUT, 0, "cannot create %s: %s", outdir, strerror(errno));
		goto out;
	}
	r = merge__write(m, outdir, !a.s3url[0]);
	if (r < 0) {
		rc = cli_fail(res, EXIT_OUTPUT, 0, "cannot write the merged artifacts into %s: %s", outdir, strerror(-r));
		goto out;
	}
	snprintf(res->outdir, sizeof(res->outdir), "%s", outdir);
	res->to_s3 = a.s3url[0];
	report_merge(res, m);
	if (a.s3url[0]) {
		r = upload_artifacts(outdir, a.s3url, &a.uo, msg, sizeof(msg));
		if (r < 0) {
			rc = cli_fail(res, EXIT_OUTPUT, 0, "%s", msg);
			goto out;
		}
		res->uploaded = true;
		log_info("%s", msg);
		printf("%s\n", a.s3url);
	}
	printf("%s\n", outdir);
out:
	merge__free(m);
	s3_client__free(s3);
	s3_config__clear(&cfg);
	return rc;
}

int cmd_merge(int argc, char **argv)
{
	return cli_run(argc, argv, "merge", merge_run);
}
