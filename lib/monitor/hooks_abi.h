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

/* Bits returned by mrmgr_hooks_info(). */
enum mrmgr__hooks_bits {
	MRMGR__HOOKS_READY = 1u << 0,       /* the real functions were found */
	MRMGR__HOOKS_GLIBC_MALLOC = 1u << 1, /* free()/realloc() of glibc's
					      * mmap'd chunks are reported */
	MRMGR__HOOKS_NO_TRIM = 1u << 2,     /* glibc heaps are never trimmed */
};

unsigned int mrmgr_hooks_info(void);

#endif /* MRMGR__HOOKS_ABI_H */
