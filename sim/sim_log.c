/*
 * The sim's log lines, in libmrmgr-sim.so: the sim's files log with
 * log.h's calls, as the library's do, and this sends them through the
 * device seam's mrmgr_device_vlog(), so they reach the application's log
 * handler. (Unit tests link the library's objects and the sim's into one
 * program and use log.c itself; this file is not in that build.)
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <stdarg.h>

#include <mrmgr/device.h>

#include "log.h"

/* Not known here: every line goes to mrmgr_device_vlog(), which decides. */
int mrmgr__log_max = -1;

void mrmgr__log(enum mrmgr_log_level level, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	mrmgr_device_vlog(level, fmt, ap);
	va_end(ap);
}
