/*
 * Logging: one formatted line at a time to a handler or standard error.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "log.h"

/*
 * The handler triple is read on every log call from any thread; it is
 * replaced rarely, so plain atomics suffice (a line racing a change may go
 * to either handler).
 */
static mrmgr_log_fn log_fn;
static void *log_arg;
int mrmgr__log_max = -1; /* -1: not yet read from the environment */

static int level_from_env(void)
{
	const char *s = getenv("MRMGR_LOG_LEVEL");
	static const char *const names[] = { "error", "warn", "info", "debug" };

	if (!s)
		return MRMGR_LOG_WARN;
	for (int i = 0; i < 4; i++)
		if (!strcasecmp(s, names[i]))
			return i;
	if (!strcasecmp(s, "none") || !strcasecmp(s, "off"))
		return -2;
	if (s[0] >= '0' && s[0] <= '3' && s[1] == '\0')
		return s[0] - '0';
	return -3; /* not a level: warn, once the level is set */
}

static int current_max(void)
{
	int m = __atomic_load_n(&mrmgr__log_max, __ATOMIC_RELAXED);

	if (m == -1) {
		int bad = (m = level_from_env()) == -3;

		if (bad)
			m = MRMGR_LOG_WARN;
		__atomic_store_n(&mrmgr__log_max, m, __ATOMIC_RELAXED);
		if (bad)
			mrmgr__warn("ignoring MRMGR_LOG_LEVEL=\"%s\": expected "
				    "error, warn, info, debug, none or 0-3",
				    getenv("MRMGR_LOG_LEVEL"));
	}
	return m;
}

int mrmgr__log_enabled(enum mrmgr_log_level level)
{
	return (int)level <= current_max();
}

void mrmgr__log(enum mrmgr_log_level level, const char *fmt, ...)
{
	static const char *const tags[] = { "error", "warn", "info", "debug" };
	char line[512];
	va_list ap;
	mrmgr_log_fn fn;

	if (!mrmgr__log_enabled(level))
		return;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);

	fn = __atomic_load_n(&log_fn, __ATOMIC_ACQUIRE);
	if (fn) {
		fn(level, line, __atomic_load_n(&log_arg, __ATOMIC_RELAXED));
		return;
	}
	/* One write() per line so lines from threads do not interleave. */
	char out[600];
	int n = snprintf(out, sizeof(out), "libmrmgr %s: %s\n",
			 tags[level & 3], line);
	if (n > 0) {
		ssize_t r = write(STDERR_FILENO, out,
				  (size_t)n < sizeof(out) ? (size_t)n : sizeof(out) - 1);
		(void)r;
	}
}

MRMGR_EXPORT void mrmgr_set_log_handler(mrmgr_log_fn fn, void *arg,
					enum mrmgr_log_level max_level)
{
	__atomic_store_n(&log_arg, arg, __ATOMIC_RELAXED);
	/* NULL: back to the environment's level, read (and a bad value
	 * reported) at the next line. */
	__atomic_store_n(&mrmgr__log_max, fn ? (int)max_level : -1, __ATOMIC_RELAXED);
	__atomic_store_n(&log_fn, fn, __ATOMIC_RELEASE);
}
