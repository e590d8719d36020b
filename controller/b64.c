/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <openssl/evp.h>
#include "b64.h"

/*
 * OpenSSL's streaming decoder (EVP_DecodeUpdate/EVP_DecodeFinal) does the work: it skips
 * whitespace and line breaks, checks the padding, refuses data after it and reports the
 * exact length. Not EVP_DecodeBlock, which counts padding as decoded zero bytes, refuses
 * line breaks and accepts "Zm9vYg==Zm9v" and "a===".
 *
 * One guard around it: the streaming decoder is PEM's, and takes '-' as the start of an
 * "-----END" line, that is as the end of the data, so "Zm9v-anything" would decode to
 * "foo" and succeed. '-' is not in the standard alphabet: refuse it before decoding
 * (tests/unit/test_kubeconfig.c, test_b64).
 */
int b64_decode(const char *in, size_t len, uint8_t **ret, size_t *ret_len)
{
	EVP_ENCODE_CTX *ctx = NULL;
	uint8_t *out = NULL;
	int n = 0, fin = 0, err = 0;

	if (len > INT_MAX / 2 || memchr(in, '-', len))
		return -EINVAL;
	out = malloc(len / 4 * 3 + 4);
	ctx = EVP_ENCODE_CTX_new();
	if (!out || !ctx) {
		err = -ENOMEM;
		goto fail;
	}
	EVP_DecodeInit(ctx);
	if (EVP_DecodeUpdate(ctx, out, &n, (const unsigned char *)in, (int)len) < 0 ||
	    EVP_DecodeFinal(ctx, out + n, &fin) < 0) {
		err = -EINVAL;
		goto fail;
	}
	n += fin;
	out[n] = 0;
	*ret = out;
	*ret_len = (size_t)n;
	out = NULL;
fail:
	EVP_ENCODE_CTX_free(ctx);
	free(out);
	return err;
}
