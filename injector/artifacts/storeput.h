/* SPDX-License-Identifier: MIT */
/*
 * The client side of the in-cluster artifact store (docs/artifact-store.md): an injector
 * that was given -o http(s)://HOST[:PORT]/v1/artifacts/NAMESPACE/SESSION/POD PUTs each
 * artifact to that prefix + "/" + its name, with its SHA-256 in X-Aiprof-Sha256 and the
 * pod's service-account token (read from a file at each try: the kubelet rotates it) as a
 * bearer token. Retries follow common/s3.h's policy (transport failures, 429, 5xx, 503 with
 * its Retry-After as a floor); every other answer ends the request.
 */
#ifndef AIPROF_STOREPUT_H
#define AIPROF_STOREPUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "s3.h"
#include "storeurl.h"

/*
 * PUTs one artifact: size bytes from fd (read with pread from offset 0), or from buf when
 * fd < 0. sha256_hex is the body's digest. Returns 0 or a negative errno (-EACCES 401/403,
 * -ENOENT 404, -EEXIST 409, -EFBIG 413, -ENOKEY no token, or s3_attempt_errno()'s); *err
 * says what the last try got (err->op names the request, never with the token).
 */
int store_put(const struct store_dest *d, const char *name, int fd, const void *buf,
	      uint64_t size, const char *sha256_hex, const struct s3_retry_policy *p,
	      const struct s3_hooks *h, struct s3_error *err);

/* One line for a person from a failed store_put(): what failed, the server's answer, and
 * what to check. */
void store_error__describe(const struct s3_error *e, int err, char *buf, size_t len);

#endif
