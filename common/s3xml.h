/* SPDX-License-Identifier: MIT */
/*
 * The little XML that S3 answers with: the text of one element (<Code>, <Message>,
 * <UploadId>, <ETag>) of an error or result document. Not a general XML parser: no
 * namespaces, no CDATA, the first matching element at any depth wins. Outside input: fuzzed
 * by tests/fuzz/fuzz_s3xml.c.
 */
#ifndef AIPROF_S3XML_H
#define AIPROF_S3XML_H

#include <stdbool.h>
#include <stddef.h>

/*
 * Copies the text of the first <tag>...</tag> (attributes allowed on the start tag) in
 * body[0..len) into out, with the five predefined entities and &#N; / &#xN; references
 * decoded (references outside ASCII become '?'). Control characters become '?' so the text
 * is safe to print. Returns 0, -ENOENT (no such element), -ENOBUFS (out too small; out holds
 * a truncated copy), -EINVAL (outlen 0, an empty or bad tag name).
 */
int s3xml_text(const char *body, size_t len, const char *tag, char *out, size_t outlen);

/* True if the document's root element is <Error> (S3 can answer 200 with one). */
bool s3xml_is_error(const char *body, size_t len);

#endif
