/*
 * Internal logging. Lines go to the handler set by mrmgr_set_log_handler(),
 * by default standard error at the level from MRMGR_LOG_LEVEL.
 *
 * SPDX-License-Identifier: MIT
 */
#ifndef MRMGR__LOG_H
#define MRMGR__LOG_H

#include <mrmgr/mrmgr.h>

/* printf-style; formats into a stack buffer, never allocates. */
void mrmgr__log(enum mrmgr_log_level level, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

/* Cheap check so callers can skip building expensive arguments. */
int mrmgr__log_enabled(enum mrmgr_log_level level);

#define mrmgr__err(...) mrmgr__log(MRMGR_LOG_ERROR, __VA_ARGS__)
#define mrmgr__warn(...) mrmgr__log(MRMGR_LOG_WARN, __VA_ARGS__)
#define mrmgr__info(...) mrmgr__log(MRMGR_LOG_INFO, __VA_ARGS__)
#define mrmgr__dbg(...) mrmgr__log(MRMGR_LOG_DEBUG, __VA_ARGS__)

#endif /* MRMGR__LOG_H */
