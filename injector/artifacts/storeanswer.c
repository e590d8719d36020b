/* SPDX-License-Identifier: MIT */
/* The store's answers, read; see storeanswer.h. */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "storeanswer.h"
#include "strbuf.h"

uint64_t store_retry_after_ns(const char *line, size_t n)
{
	static const char key[] = "Retry-After:";
	size_t i = sizeof(key) - 1;
	uint64_t s = 0;

	if (n < i || strncasecmp(line, key, i) != 0)
		return 0;
	while (i < n && (line[i] == ' ' || line[i] == '\t'))
		i++;
	for (; i < n && line[i] >= '0' && line[i] <= '9'; i++)
		if ((s = s * 10 + (uint64_t)(line[i] - '0')) > STORE_RETRY_AFTER_MAX_S)
			s = STORE_RETRY_AFTER_MAX_S;
	return s * 1000000000ULL;
}

void store_answer_detail(const char *body, size_t n, char *out, size_t outlen)
{
	char line[512];
	size_t k = 0;

	while (k < n && k + 1 < sizeof(line) && body[k] != '\n' && body[k] != '\0') {
		line[k] = body[k];
		k++;
	}
	line[k] = '\0';
	str_printable(out, outlen, line);
}
