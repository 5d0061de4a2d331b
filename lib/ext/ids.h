/*
 * The features' numbers (struct mrmgr__ext::id, ext.h): where the core
 * keeps each one's state. One per feature, below MRMGR__EXT_MAX.
 *
 * SPDX-License-Identifier: MIT
 */
#ifndef MRMGR__EXT_IDS_H
#define MRMGR__EXT_IDS_H

#include "ext.h"

enum mrmgr__ext_id {
	MRMGR__EXT_ID_GROW = 0,
	MRMGR__EXT_ID_ODP,
	MRMGR__EXT_ID_SHARE,
	MRMGR__EXT_ID_BUF,
	MRMGR__EXT_ID_MULTIPD,
	MRMGR__EXT_ID_COUNT
};

/* The last number is the core's stale check's (core/ext.h). */
_Static_assert(MRMGR__EXT_ID_COUNT <= MRMGR__EXT_ID_STALE, "feature numbers run into the core's");

#endif /* MRMGR__EXT_IDS_H */
