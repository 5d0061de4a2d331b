/*
 * The kinds built in, by id (doc/design/memory-kinds.md: a new kind adds
 * its table here).
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include "kind.h"

static const struct mrmgr__kind *const kinds[MRMGR__KIND_COUNT] = {
	[MRMGR__KIND_HOST] = &mrmgr__kind_host,
	[MRMGR__KIND_DMABUF] = &mrmgr__kind_dmabuf,
	[MRMGR__KIND_DEVICE_VA] = &mrmgr__kind_devva,
};

const struct mrmgr__kind *mrmgr__kind_by_id(enum mrmgr__kind_id id)
{
	return (unsigned int)id < MRMGR__KIND_COUNT ? kinds[id] : NULL;
}
