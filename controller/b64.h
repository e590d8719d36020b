/* SPDX-License-Identifier: MIT */
/* Standard base64 decoding (kubeconfig's *-data fields, Secret-like payloads). */
#ifndef AIPROF_B64_H
#define AIPROF_B64_H

#include <stddef.h>
#include <stdint.h>

/*
 * Decodes len bytes of standard base64 (padding required, as Go's base64.StdEncoding that
 * Kubernetes writes and reads; ASCII whitespace and line breaks ignored) into a malloc'd
 * buffer that is NUL-terminated past *ret_len (caller frees). Returns 0, -EINVAL for a
 * character outside the alphabet, a bad length or padding, data after the padding, -ENOMEM.
 * *ret untouched on error. OpenSSL's decoder does the work (b64.c says how it is guarded).
 */
int b64_decode(const char *in, size_t len, uint8_t **ret, size_t *ret_len);

#endif
