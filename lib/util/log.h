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

/*
 * The highest level that is written, or -1 while not known yet (read from
 * the environment at the first line; mrmgr__log() decides then). Defined
 * by whatever defines mrmgr__log() (log.c; the sim's and libmrmgr-share's
 * own, which leave it at -1).
 */
extern int mrmgr__log_max __attribute__((visibility("hidden")));

/* Whether a line of level may be written: one load, no call, so a level
 * that is off costs a branch and its arguments are never evaluated. */
static inline int mrmgr__log_on(enum mrmgr_log_level level)
{
	int m = __atomic_load_n(&mrmgr__log_max, __ATOMIC_RELAXED);

	return m == -1 || (int)level <= m;
}

/* level is evaluated once; the rest only when the level is on. */
#define MRMGR__LOG_IF(level, ...)                                            \
	do {                                                                 \
		enum mrmgr_log_level mrmgr__lv_ = (level);                   \
									     \
		if (mrmgr__log_on(mrmgr__lv_))                               \
			mrmgr__log(mrmgr__lv_, __VA_ARGS__);                 \
	} while (0)

#define mrmgr__err(...) MRMGR__LOG_IF(MRMGR_LOG_ERROR, __VA_ARGS__)
#define mrmgr__warn(...) MRMGR__LOG_IF(MRMGR_LOG_WARN, __VA_ARGS__)
#define mrmgr__info(...) MRMGR__LOG_IF(MRMGR_LOG_INFO, __VA_ARGS__)
#define mrmgr__dbg(...) MRMGR__LOG_IF(MRMGR_LOG_DEBUG, __VA_ARGS__)

#endif /* MRMGR__LOG_H */
