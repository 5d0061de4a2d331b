/*
 * The contract between libmrmgr and libmrmgr_hooks.so. The hooks library
 * defines mrmgr_hooks_info(); libmrmgr refers to it weakly, so it finds
 * it exactly when the hooks are in the global symbol scope (LD_PRELOAD or
 * linked before libc), which is also when their interposition works.
 *
 * SPDX-License-Identifier: MIT
 */
#ifndef MRMGR__HOOKS_ABI_H
#define MRMGR__HOOKS_ABI_H

#include <stdint.h>

/* Bits returned by mrmgr_hooks_info(). */
enum mrmgr__hooks_bits {
	MRMGR__HOOKS_READY = 1u << 0,       /* the real functions were found */
	MRMGR__HOOKS_GLIBC_MALLOC = 1u << 1, /* free()/realloc() of glibc's
					      * mmap'd chunks are reported */
	MRMGR__HOOKS_NO_TRIM = 1u << 2,     /* glibc heaps are never trimmed */
};

unsigned int mrmgr_hooks_info(void);

/*
 * Both sides of a change: libmrmgr hands the hooks its change functions
 * (monitor.h: mrmgr__mon_change_begin/end) when it starts using them, by
 * calling mrmgr_hooks_bind(), which the hooks library defines and
 * libmrmgr refers to weakly. Until then (and with an older hooks library
 * that lacks it) the hooks report with mrmgr_notify_unmap() after the
 * call. Ranges are inclusive: [start, last].
 */
struct mrmgr__hooks_ops {
	void (*change_begin)(uint64_t start, uint64_t last);
	void (*change_end)(uint64_t start, uint64_t last);
};

void mrmgr_hooks_bind(const struct mrmgr__hooks_ops *ops);

#endif /* MRMGR__HOOKS_ABI_H */
