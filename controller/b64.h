/* SPDX-License-Identifier: MIT */
/* Standard base64 decoding (kubeconfig's *-data fields, Secret-like payloads). */
#ifndef AIPROF_B64_H
#define AIPROF_B64_H

#include <stddef.h>
#include <stdint.h>

/*
 * Decodes len bytes of standard base64 (padding optional, ASCII whitespace ignored) into a
 * malloc'd buffer that is NUL-terminated past *ret_len (caller frees). Returns 0, -EINVAL for
 * a character outside the alphabet or a bad length/padding, -ENOMEM. *ret untouched on error.
 */
int b64_decode(const char *in, size_t len, uint8_t **ret, size_t *ret_len);

#endif
