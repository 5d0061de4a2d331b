/*
 * What the redirected call sites lead to (cuda_wrap.c), shared with the
 * scan that redirects them (cuda_follow.c): the functions followed, their
 * definitions, the wrappers, the two counts. Only these two files.
 *
 * SPDX-License-Identifier: MIT
 */
#ifndef MRMGR__CUDA_WRAP_H
#define MRMGR__CUDA_WRAP_H

#include <stdint.h>

/* The followed functions, then the ones that hand out pointers. */
enum { T_FREE, T_FREE_V2, T_FREE_ASYNC, T_FREE_ASYNC_PTSZ, T_RELEASE,
       T_UNMAP, T_ADDR_FREE, T_CTX_DESTROY, T_CTX_DESTROY_V2, T_PCTX_RESET,
       T_PCTX_RESET_V2, T_PCTX_RELEASE, T_PCTX_RELEASE_V2, T_POOL_DESTROY,
       T_POOL_TRIM, T_GPA, T_GPA_V2, T_DLSYM, T_DLVSYM, T_DLCLOSE,
       T_COUNT };
#define T_FREES T_GPA

extern const char *const mrmgr__cuda_names[T_COUNT];
/* The definitions (libcuda's; libc's dlsym, dlvsym, dlclose), set before
 * any slot is written and never changed. */
extern uintptr_t mrmgr__cuda_real[T_COUNT];
/* libc's dlsym and dlvsym again, for the asm stubs. */
extern uintptr_t mrmgr__cuda_real_dlsym, mrmgr__cuda_real_dlvsym;
/* What each slot is redirected to. */
extern const uintptr_t mrmgr__cuda_wrapper[T_COUNT];
/* Frees begun (before the driver's call) and ended (after it). */
extern uint64_t mrmgr__cuda_begun, mrmgr__cuda_ended;

/* Following stops for good, with the reason (cuda_follow.c). */
void mrmgr__cuda_stop(const char *reason);

#endif /* MRMGR__CUDA_WRAP_H */
