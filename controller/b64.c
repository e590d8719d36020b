/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdlib.h>
#include "b64.h"

static int b64_value(unsigned char c)
{
	if (c >= 'A' && c <= 'Z')
		return c - 'A';
	if (c >= 'a' && c <= 'z')
		return c - 'a' + 26;
	if (c >= '0' && c <= '9')
		return c - '0' + 52;
	if (c == '+')
		return 62;
	if (c == '/')
		return 63;
	return -1;
}

int b64_decode(const char *in, size_t len, uint8_t **ret, size_t *ret_len)
{
	uint8_t *out = malloc(len / 4 * 3 + 4);
	uint32_t acc = 0;
	size_t n = 0, pad = 0, chars = 0;
	int err = -EINVAL;

	if (!out)
		return -ENOMEM;
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)in[i];
		int v;

		if (c == ' ' || c == '\t' || c == '\r' || c == '\n')
			continue;
		if (c == '=') {
			pad++;
			continue;
		}
		if (pad)               /* data after padding */
			goto fail;
		v = b64_value(c);
		if (v < 0)
			goto fail;
		acc = acc << 6 | (uint32_t)v;
		chars++;
		if (chars % 4 == 0) {
			out[n++] = (uint8_t)(acc >> 16);
			out[n++] = (uint8_t)(acc >> 8);
			out[n++] = (uint8_t)acc;
			acc = 0;
		}
	}
	switch (chars % 4) {
	case 0:
		if (pad)
			goto fail;
		break;
	case 2:
		if (pad && pad != 2)
			goto fail;
		out[n++] = (uint8_t)(acc >> 4);
		break;
	case 3:
		if (pad && pad != 1)
			goto fail;
		out[n++] = (uint8_t)(acc >> 10);
		out[n++] = (uint8_t)(acc >> 2);
		break;
	default:
		goto fail;
	}
	out[n] = 0;
	*ret = out;
	*ret_len = n;
	return 0;
fail:
	free(out);
	return err;
}
