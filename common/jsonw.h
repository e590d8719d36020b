/* SPDX-License-Identifier: MIT */
/*
 * A streaming JSON writer: values go into a buffer that is flushed to a sink (a FILE, a
 * gzFile, memory). Commas and nesting are tracked, strings escaped as RFC 8259 asks.
 * Errors are sticky: the first sink failure is kept and returned by jsonw__finish().
 */
#ifndef AIPROF_JSONW_H
#define AIPROF_JSONW_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef int (*jsonw_sink_fn)(void *ctx, const char *buf, size_t len); /* 0 or -errno */

struct jsonw;

struct jsonw *jsonw__new(jsonw_sink_fn sink, void *ctx);
/* Flushes and frees; returns the first error seen (or 0). NULL-safe. */
int jsonw__finish(struct jsonw *w);

void jsonw_obj_open(struct jsonw *w);
void jsonw_obj_close(struct jsonw *w);
void jsonw_arr_open(struct jsonw *w);
void jsonw_arr_close(struct jsonw *w);
void jsonw_key(struct jsonw *w, const char *key);
void jsonw_str(struct jsonw *w, const char *s);
void jsonw_strn(struct jsonw *w, const char *s, size_t n);
void jsonw_int(struct jsonw *w, int64_t v);
void jsonw_uint(struct jsonw *w, uint64_t v);
void jsonw_double(struct jsonw *w, double v);        /* %.17g; NaN/inf become null */
void jsonw_fixed3(struct jsonw *w, uint64_t thousandths); /* 12345 -> 12.345 */
void jsonw_bool(struct jsonw *w, bool v);
void jsonw_null(struct jsonw *w);
/* A value already formatted as JSON (caller guarantees validity). */
void jsonw_raw(struct jsonw *w, const char *json);
/* Newline between values of the current array, to keep large files greppable. */
void jsonw_newline(struct jsonw *w);

/* key + value shorthands */
void jsonw_kv_str(struct jsonw *w, const char *k, const char *v);
void jsonw_kv_int(struct jsonw *w, const char *k, int64_t v);
void jsonw_kv_uint(struct jsonw *w, const char *k, uint64_t v);
void jsonw_kv_double(struct jsonw *w, const char *k, double v);
void jsonw_kv_bool(struct jsonw *w, const char *k, bool v);

/* Sinks */
int jsonw_sink_file(void *file, const char *buf, size_t len);  /* ctx: FILE * */
int jsonw_sink_gz(void *gzfile, const char *buf, size_t len);  /* ctx: gzFile */

#endif
