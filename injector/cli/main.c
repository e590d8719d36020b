/* SPDX-License-Identifier: MIT */
/* aiprof: the command line. One function per subcommand, dispatched from a table. */
#include <stdio.h>
#include <string.h>

#include "log.h"
#include "cli.h"

#ifndef AIPROF_VERSION
#define AIPROF_VERSION "0.1.0"
#endif

static int cmd_version(int argc, char **argv)
{
	(void)argc;
	(void)argv;
	printf("aiprof %s\n", AIPROF_VERSION);
	return EXIT_OK;
}

static int cmd_help(int argc, char **argv);

static const struct cmd {
	const char *name;
	int (*fn)(int argc, char **argv);
	const char *summary;
} cmds[] = {
	{ "profile", cmd_profile, "attach to running processes, record a window, write artifacts" },
	{ "stacks", cmd_stacks, "what every thread of running processes is doing now (no stop)" },
	{ "record", cmd_record, "start a command and record it from its first instruction" },
	{ "merge", cmd_merge, "merge the ranks of one job onto one clock, with cross-rank findings" },
	{ "upload", cmd_upload, "upload an artifact folder to S3-compatible storage (manifest last)" },
	{ "version", cmd_version, "print the version" },
	{ "help", cmd_help, "show this help" },
};

static int cmd_help(int argc, char **argv)
{
	(void)argc;
	(void)argv;
	printf("Usage: aiprof COMMAND [OPTIONS]\n\n"
	       "Profiles AI training and inference processes that are already running: no\n"
	       "restart, no environment variable, no code change.\n\nCommands:\n");
	for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++)
		printf("  %-10s %s\n", cmds[i].name, cmds[i].summary);
	printf("\nRun 'aiprof COMMAND --help' for the options of a command.\n");
	return EXIT_OK;
}

int main(int argc, char **argv)
{
	/* stderr gets the redaction the termination message gets: no credential it can see */
	log_set_filter(termlog_redact);
	if (argc < 2) {
		cmd_help(0, NULL);
		return EXIT_USAGE;
	}
	if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)
		return cmd_help(0, NULL);
	if (strcmp(argv[1], "--version") == 0)
		return cmd_version(0, NULL);
	for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++)
		if (strcmp(argv[1], cmds[i].name) == 0)
			return cmds[i].fn(argc - 1, argv + 1);
	log_error("unknown command '%s'; run 'aiprof help' for the list", argv[1]);
	return EXIT_USAGE;
}
