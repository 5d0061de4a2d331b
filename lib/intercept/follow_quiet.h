/*
 * follow.c's check and the lock-free question every miss asks between
 * checks (follow_quiet.c): was an object loaded since?
 *
 * SPDX-License-Identifier: MIT
 */
#ifndef MRMGR__FOLLOW_QUIET_H
#define MRMGR__FOLLOW_QUIET_H

/* What the loader said at a check. */
struct mrmgr__follow_snap {
	unsigned long long adds, subs; /* dlpi_adds, dlpi_subs */
	int pinned_last;               /* the pinned object is the last */
};

/* mrmgr__mon_lock held. The loader's state now; first: the first check,
 * which pins the last object first. */
void mrmgr__follow_snap(struct mrmgr__follow_snap *s, int first);
/* mrmgr__mon_lock held: before a rescan, misses ask the check again. */
void mrmgr__follow_unquiet(void);
/* mrmgr__mon_lock held: after a check that answered ret on s, what
 * mrmgr__follow_quiet() compares with. */
void mrmgr__follow_quiet_from(const struct mrmgr__follow_snap *s, int ret);

#endif /* MRMGR__FOLLOW_QUIET_H */
