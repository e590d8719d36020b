/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include "digest.h"
#include "readfile.h"

/* EVP one-shot: cannot fail for these digests short of memory exhaustion, in which case the
 * output is zeroed so that a server-side check fails rather than a wrong hash going out. */
static void evp_digest(const EVP_MD *md, const void *data, size_t len, uint8_t *out, size_t outlen)
{
	unsigned int n = 0;

	if (!EVP_Digest(data, len, out, &n, md, NULL) || n != outlen)
		memset(out, 0, outlen);
}

void sha256(const void *data, size_t len, uint8_t out[SHA256_LEN])
{
	evp_digest(EVP_sha256(), data, len, out, SHA256_LEN);
}

void md5(const void *data, size_t len, uint8_t out[MD5_LEN])
{
	evp_digest(EVP_md5(), data, len, out, MD5_LEN);
}

void hmac_sha256(const void *key, size_t keylen, const void *data, size_t len,
		 uint8_t out[SHA256_LEN])
{
	unsigned int n = 0;

	if (!HMAC(EVP_sha256(), key, (int)keylen, data, len, out, &n) || n != SHA256_LEN)
		memset(out, 0, SHA256_LEN);
}

struct sha256_ctx {
	EVP_MD_CTX *md;
};

struct sha256_ctx *sha256_ctx__new(void)
{
	struct sha256_ctx *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	c->md = EVP_MD_CTX_new();
	if (!c->md || !EVP_DigestInit_ex(c->md, EVP_sha256(), NULL)) {
		sha256_ctx__free(c);
		return NULL;
	}
	return c;
}

void sha256_ctx__update(struct sha256_ctx *c, const void *data, size_t len)
{
	EVP_DigestUpdate(c->md, data, len);
}

void sha256_ctx__final(struct sha256_ctx *c, uint8_t out[SHA256_LEN])
{
	unsigned int n = 0;

	if (!EVP_DigestFinal_ex(c->md, out, &n) || n != SHA256_LEN)
		memset(out, 0, SHA256_LEN);
	EVP_DigestInit_ex(c->md, EVP_sha256(), NULL);
}

void sha256_ctx__free(struct sha256_ctx *c)
{
	if (!c)
		return;
	EVP_MD_CTX_free(c->md);
	free(c);
}

int sha256_fd(int fd, uint8_t out[SHA256_LEN], uint64_t *ret_size)
{
	enum { CHUNK = 1 << 20 };
	struct sha256_ctx *c = NULL;
	uint8_t *buf = NULL;
	uint64_t off = 0;
	int err = 0;

	c = sha256_ctx__new();
	buf = malloc(CHUNK);
	if (!c || !buf) {
		err = -ENOMEM;
		goto fail;
	}
	for (;;) {
		ssize_t n = read_some(fd, buf, CHUNK, (int64_t)off);

		if (n < 0) {
			err = (int)n;
			goto fail;
		}
		if (n == 0)
			break;
		sha256_ctx__update(c, buf, (size_t)n);
		off += (uint64_t)n;
	}
	sha256_ctx__final(c, out);
	*ret_size = off;
fail:
	free(buf);
	sha256_ctx__free(c);
	return err;
}

char *hex_encode(const uint8_t *in, size_t len, char *out)
{
	static const char digits[] = "0123456789abcdef";

	for (size_t i = 0; i < len; i++) {
		out[2 * i] = digits[in[i] >> 4];
		out[2 * i + 1] = digits[in[i] & 15];
	}
	out[2 * len] = '\0';
	return out;
}

static int hex_digit(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	c = (char)(c | 0x20);
	return c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

int hex_decode(const char *in, uint8_t *out, size_t len)
{
	if (strlen(in) != 2 * len)
		return -EINVAL;
	for (size_t i = 0; i < 2 * len; i++)
		if (hex_digit(in[i]) < 0)
			return -EINVAL;
	for (size_t i = 0; i < len; i++)
		out[i] = (uint8_t)(hex_digit(in[2 * i]) << 4 | hex_digit(in[2 * i + 1]));
	return 0;
}

char *base64_encode(const uint8_t *in, size_t len, char *out)
{
	/* EVP_EncodeBlock takes an int: the callers encode digests (16 or 32 bytes) */
	if (len > INT_MAX / 4 * 3) {
		out[0] = '\0';
		return out;
	}
	EVP_EncodeBlock((unsigned char *)out, in, (int)len);
	return out;
}
