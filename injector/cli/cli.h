/* SPDX-License-Identifier: MIT */
#ifndef AIPROF_CLI_H
#define AIPROF_CLI_H

#include "artifacts/termlog.h"   /* the exit codes */


int cmd_profile(int argc, char **argv);

/* Exit code for a negative errno from target checks or injection. */
int exit_code_for(int err);

#endif
