/* SPDX-License-Identifier: MIT */
#include <stdint.h>
#include <string.h>

#include "procstat.h"

int procstat_exit_status(const char *stat, size_t len)
{
	const char *p = NULL, *end = stat + len;
	unsigned field = 3;
	uint32_t v = 0;

	for (const char *q = stat; q < end; q++)
		if (*q == ')')
			p = q;
	/* ") S ..." : the state, then field 4 */
	if (!p || end - p < 3 || p[1] != ' ' || (p[2] != 'Z' && p[2] != 'X'))
		return -1;
	for (p += 2; p < end && field < 52; p++)
		if (*p == ' ')
			field++;
	if (field != 52 || p >= end || *p < '0' || *p > '9')
		return -1;
	for (; p < end && *p >= '0' && *p <= '9'; p++) {
		v = v * 10 + (uint32_t)(*p - '0');
		if (v > 0xffff)
			return -1;      /* not a wait(2) status */
	}
	return (int)v;
}
