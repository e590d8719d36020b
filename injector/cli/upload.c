/* SPDX-License-Identifier: MIT */
/* `aiprof upload DIR s3://BUCKET[/PREFIX]`: the options, then artifacts/upload.c. */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>

#include "log.h"
#include "artifacts/upload.h"
#include "cli.h"
#include "artifacts/storeput.h"

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: aiprof upload DIR s3://BUCKET[/PREFIX] [OPTIONS]\n"
		"       aiprof upload DIR http(s)://CONTROLLER/v1/artifacts/NAMESPACE/SESSION/POD\n\n"
		"Uploads an artifact folder (written by 'aiprof profile -o DIR') to S3-compatible\n"
		"storage: every file, then manifest.json with each file's size and SHA-256; the\n"
		"manifest's presence in the bucket means the upload is complete. Run it again after\n"
		"a failure: files already there with the same SHA-256 are not sent again.\n\n"
		"Credentials: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY [, AWS_SESSION_TOKEN], or\n"
		"files of those names in --secret-dir. Other settings: AWS_REGION /\n"
		"AWS_DEFAULT_REGION, AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL, AWS_CA_BUNDLE,\n"
		"AIPROF_S3_ADDRESSING. Flags win over the environment.\n\n"
		"http(s):// is aiprof-controller's in-cluster store (no S3): each file is PUT with\n"
		"its SHA-256 and the service-account token in AIPROF_STORE_TOKEN_FILE (default\n"
		"" STORE_TOKEN_FILE_DEFAULT "); AIPROF_STORE_CA_FILE for https.\n\n"
		"Options:\n%s"
		"  -v, --verbose            more detail\n"
		"  -q, --quiet              only errors and retries\n"
		"  -h, --help               this help\n\n"
		"Exit codes: 0 uploaded, 2 usage or configuration (bad URL, no credentials),\n"
		"7 the upload failed (the folder is kept; the message says how to resume).\n",
		upload_options_help);
}

int cmd_upload(int argc, char **argv)
{
	static const struct option longopts[] = {
		UPLOAD_LONG_OPTIONS,
		{ "verbose", no_argument, NULL, 'v' },
		{ "quiet", no_argument, NULL, 'q' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct upload_opts o;
	char msg[2048];
	int c, r;

	upload_opts__init(&o);
	o.skip_existing = true;
	/* libcurl sends with MSG_NOSIGNAL; this covers any other write to a closed socket */
	signal(SIGPIPE, SIG_IGN);
	optind = 1;
	while ((c = getopt_long(argc, argv, "vqh", longopts, NULL)) != -1) {
		switch (c) {
		case 'v':
			log_set_max_level(LOG_DEBUG);
			break;
		case 'q':
			o.quiet = true;
			log_set_max_level(LOG_WARNING);
			break;
		case 'h':
			usage(stdout);
			return EXIT_OK;
		default:
			msg[0] = '\0';
			r = upload_opts__parse_option(&o, c, optarg, msg, sizeof(msg));
			if (r == 0)
				break;
			if (r == -EINVAL)
				log_error("%s", msg);
			else
				log_error("see 'aiprof upload --help' for the options");
			return EXIT_USAGE;
		}
	}
	if (argc - optind != 2) {
		log_error("upload needs DIR and s3://BUCKET[/PREFIX] (or the store's http(s):// "
			  "URL); see 'aiprof upload --help'");
		return EXIT_USAGE;
	}
	r = upload_artifacts(argv[optind], argv[optind + 1], &o, msg, sizeof(msg));
	if (r < 0) {
		log_error("%s", msg);
		return r == -EINVAL || r == -ENOKEY ? EXIT_USAGE : EXIT_OUTPUT;
	}
	if (!o.quiet)
		log_info("%s", msg);
	return EXIT_OK;
}
