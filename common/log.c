/* SPDX-License-Identifier: MIT */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include "log.h"

static enum log_level max_level = LOG_INFO;
static const char *log_prefix = "aiprof";

void log_set_max_level(enum log_level level)
{
	max_level = level;
}

enum log_level log_get_max_level(void)
{
	return max_level;
}

void log_set_prefix(const char *prefix)
{
	log_prefix = prefix;
}

static void (*log_filter)(char *msg, size_t size);

void log_set_filter(void (*filter)(char *msg, size_t size))
{
	log_filter = filter;
}

int log_internal(enum log_level level, int err, const char *fmt, ...)
{
	static const char *const names[] = {
		[LOG_ERR] = "error", [LOG_WARNING] = "warning", [LOG_NOTICE] = NULL,
		[LOG_INFO] = NULL, [LOG_DEBUG] = "debug",
	};
	int saved = errno;
	va_list ap;

	err = abs(err);
	if (level <= max_level) {
		char buf[2048];

		errno = err; /* for %m */
		va_start(ap, fmt);
		vsnprintf(buf, sizeof(buf), fmt, ap);
		va_end(ap);
		if (log_filter)
			log_filter(buf, sizeof(buf));
		if (names[level])
			fprintf(stderr, "%s: %s: %s\n", log_prefix, names[level], buf);
		else
			fprintf(stderr, "%s: %s\n", log_prefix, buf);
	}
	errno = saved;
	return -err;
}
