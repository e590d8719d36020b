/* SPDX-License-Identifier: MIT */
/* The text of a launch stack, as libaiprof sends it; see launch_stacks.h. Pure. */
#include "launch_stacks.h"

/* up to 16 hex digits at *sp; advances *sp; returns how many */
static size_t parse_hex(const char **sp, uint64_t *ret)
{
	const char *s = *sp;
	uint64_t v = 0;
	size_t digits = 0;

	for (; digits < 16; s++, digits++) {
		int d = *s >= '0' && *s <= '9' ? *s - '0' : *s >= 'a' && *s <= 'f' ? *s - 'a' + 10 : -1;

		if (d < 0)
			break;
		v = v << 4 | (uint64_t)d;
	}
	*sp = s;
	*ret = v;
	return digits;
}

void launch_stack_parse(const char *s, uint64_t *pc, size_t max, size_t *ret_n,
			uint64_t (*py)[2], size_t maxpy, size_t *ret_npy)
{
	size_t n = 0, np = 0;

	if (!s)
		goto out;
	if (*s == '@')
		s++;   /* unwound by CFI: the same addresses */
	while (*s && *s != '|' && n < max) {
		if (!parse_hex(&s, &pc[n]) || (*s && *s != ',' && *s != '|'))
			goto out;
		n++;
		if (*s == ',')
			s++;
	}
	while (n == max && *s && *s != '|')
		s++;   /* more frames than kept: the outermost ones are dropped */
	if (*s != '|')
		goto out;
	s++;
	while (*s && np < maxpy) {
		if (!parse_hex(&s, &py[np][0]) || *s != ':')
			break;
		s++;
		if (!parse_hex(&s, &py[np][1]) || (*s && *s != ','))
			break;
		np++;
		if (*s)
			s++;
	}
out:
	*ret_n = n;
	*ret_npy = np;
}
