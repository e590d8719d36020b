/* SPDX-License-Identifier: MIT */
/*
 * Logging for the programs (injector, controller). Library code returns -errno and does
 * not log; the top level logs once, e.g.
 *     return log_error_errno(r, "Failed to attach to pid %d: %m", pid);
 * %m prints strerror of the error passed in, not of whatever errno happens to hold.
 */
#ifndef AIPROF_LOG_H
#define AIPROF_LOG_H

#include <errno.h>
#include <stddef.h>

enum log_level { LOG_ERR = 0, LOG_WARNING, LOG_NOTICE, LOG_INFO, LOG_DEBUG };

void log_set_max_level(enum log_level level);
enum log_level log_get_max_level(void);
void log_set_prefix(const char *prefix);  /* e.g. "aiprof"; not copied */
/* A function every message passes through before it is written (in place, within size):
 * the injector's removes credentials, as from its termination message. NULL: none. */
void log_set_filter(void (*filter)(char *msg, size_t size));

/* Returns -abs(err) so callers can `return log_..._errno(r, ...)`. */
int log_internal(enum log_level level, int err, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

#define log_error_errno(err, ...)   log_internal(LOG_ERR, (err), __VA_ARGS__)
#define log_warning_errno(err, ...) log_internal(LOG_WARNING, (err), __VA_ARGS__)
#define log_error(...)              ((void)log_internal(LOG_ERR, 0, __VA_ARGS__))
#define log_warning(...)            ((void)log_internal(LOG_WARNING, 0, __VA_ARGS__))
#define log_notice(...)             ((void)log_internal(LOG_NOTICE, 0, __VA_ARGS__))
#define log_info(...)               ((void)log_internal(LOG_INFO, 0, __VA_ARGS__))
#define log_debug(...)              ((void)log_internal(LOG_DEBUG, 0, __VA_ARGS__))

#endif
