/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for the cost bound on process.match patterns: any input is walked without
 * a fault, and whatever it lets through compiles (or is refused by regcomp) within libFuzzer's
 * time and malloc limits — the promise the controller's informer relies on.
 * FUZZ_SOURCES: common/recheck.c
 * FUZZ_ARGS: -max_len=300 -timeout=5 -malloc_limit_mb=256
 */
#include <regex.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "recheck.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *s = malloc(size + 1), why[256];
	regex_t re;

	if (!s)
		return 0;
	memcpy(s, data, size);
	s[size] = '\0';
	if (recheck(s, why, sizeof(why)) == 0 && size <= 256 &&
	    regcomp(&re, s, REG_EXTENDED | REG_NOSUB) == 0) {
		regexec(&re, "python3 -m torch.distributed.run --nproc_per_node 8 train.py "
			"--lr 3e-4 aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", 0, NULL, 0);
		regfree(&re);
	}
	free(s);
	return 0;
}
