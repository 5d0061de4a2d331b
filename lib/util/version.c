/*
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <mrmgr/mrmgr.h>

MRMGR_EXPORT const char *mrmgr_version_string(void)
{
	return PACKAGE_VERSION;
}
