/*
 * The CUDA domain's free counter moved by libcuda's own frees
 * (cuda_follow.c): the call sites of every loaded object that reach
 * cuMemFree*, cuMemFreeAsync*, the VMM frees and the context and pool
 * destructions are redirected to wrappers that move the counter around
 * the driver's call, and dlsym() and cuGetProcAddress() hand out those
 * wrappers. Where that cannot be established or kept, *on is zero and
 * each get validates (devva.h).
 *
 * SPDX-License-Identifier: MIT
 */
#ifndef MRMGR__CUDA_FOLLOW_H
#define MRMGR__CUDA_FOLLOW_H

#include <stdint.h>

/* Once a process, with libcuda.so.1's handle (dl) and whether it was
 * loaded before the first CUDA domain opened. Logs the outcome once. */
void mrmgr__cuda_follow_start(void *dl, int loaded_before);

/* Frees begun (before the driver's call) and ended (after it). */
const uint64_t *mrmgr__cuda_follow_begun(void);
const uint64_t *mrmgr__cuda_follow_ended(void);
/* Nonzero while the frees are followed. */
const int *mrmgr__cuda_follow_on(void);
/* How (or why not), for mrmgr_info and the tests. */
const char *mrmgr__cuda_follow_why(void);
/* At every get: an object loaded since the last scan has its call sites
 * redirected (and every cache re-validates once), or following stops. */
void mrmgr__cuda_follow_recheck(void);

/* Tests: refuse at start, as if a call site could not be written. */
extern int mrmgr__cuda_follow_test_off;

#endif /* MRMGR__CUDA_FOLLOW_H */
