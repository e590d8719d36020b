/* SPDX-License-Identifier: MIT */
/* Where collectives wait, by frame name (findings.h): shared by the findings of one
 * profile and the merge of stacks dumps. Pure. */
#include <stdbool.h>
#include <string.h>

#include "findings.h"

bool findings_is_collective_frame(const char *s)
{
	static const char *const syncs[] = {
		"cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize",
		"cuStreamSynchronize", "cuEventSynchronize", "cuCtxSynchronize",
	};
	/* threads of the libraries that wait for work, not in an operation */
	static const char *const idle[] = {
		"::runLoop(", "Loop::run(", "atchdog", "roxyService", "roxyProgress",
		"eartbeat", "Monitor",
	};
	size_t n = strlen(s);

	if ((n > 4 && strcmp(s + n - 4, "_[k]") == 0) || strstr(s, ".py:"))
		return false;
	for (size_t i = 0; i < sizeof(idle) / sizeof(idle[0]); i++)
		if (strstr(s, idle[i]))
			return false;
	if (strncmp(s, "nccl", 4) == 0 || strncmp(s, "pnccl", 5) == 0 ||
	    strncmp(s, "gloo::", 6) == 0 || strncmp(s, "c10d::", 6) == 0 ||
	    strstr(s, "ProcessGroup"))
		return true;
	for (size_t i = 0; i < sizeof(syncs) / sizeof(syncs[0]); i++)
		if (strncmp(s, syncs[i], strlen(syncs[i])) == 0)
			return true;
	return false;
}
