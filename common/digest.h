/* SPDX-License-Identifier: MIT */
/*
 * Hashes and encodings the S3 client needs: SHA-256, HMAC-SHA256 and MD5 (thin wrappers over
 * OpenSSL's libcrypto, which uses the CPU's SHA extensions where it has them), and hex / base64
 * encoders. Link with -lcrypto.
 */
#ifndef AIPROF_DIGEST_H
#define AIPROF_DIGEST_H

#include <stddef.h>
#include <stdint.h>

#define SHA256_LEN     32
#define SHA256_HEX_LEN 64   /* without the NUL */
#define MD5_LEN        16

/* One-shot digests. */
void sha256(const void *data, size_t len, uint8_t out[SHA256_LEN]);
void md5(const void *data, size_t len, uint8_t out[MD5_LEN]);
void hmac_sha256(const void *key, size_t keylen, const void *data, size_t len,
		 uint8_t out[SHA256_LEN]);

/* Streaming SHA-256. sha256_ctx__new() returns NULL when out of memory. */
struct sha256_ctx;
struct sha256_ctx *sha256_ctx__new(void);
void sha256_ctx__update(struct sha256_ctx *c, const void *data, size_t len);
void sha256_ctx__final(struct sha256_ctx *c, uint8_t out[SHA256_LEN]); /* then reusable */
void sha256_ctx__free(struct sha256_ctx *c); /* NULL-safe */

/*
 * SHA-256 of a whole file, read with pread from fd's start; *ret_size gets the bytes hashed.
 * Returns 0 or -errno.
 */
int sha256_fd(int fd, uint8_t out[SHA256_LEN], uint64_t *ret_size);

/* Lower-case hex of len bytes into out (2*len+1 bytes). Returns out. */
char *hex_encode(const uint8_t *in, size_t len, char *out);
/* Exactly 2*len hex digits (either case) of in into out; -EINVAL (out untouched) for
 * another length or a character that is not one. Outside input. */
int hex_decode(const char *in, uint8_t *out, size_t len);
/* Standard base64 with padding into out (4*((len+2)/3)+1 bytes), by OpenSSL's
 * EVP_EncodeBlock. Returns out. */
char *base64_encode(const uint8_t *in, size_t len, char *out);

#endif
