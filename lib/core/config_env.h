/*
 * Configuration: attribute structs first, MRMGR_* environment variables
 * over them. Every variable is listed in doc/environment.md.
 *
 * SPDX-License-Identifier: MIT
 */
#ifndef MRMGR__CONFIG_ENV_H
#define MRMGR__CONFIG_ENV_H

#include <stdint.h>

#include <mrmgr/mrmgr.h>

#include "device.h"

struct mrmgr__cache_config;

/*
 * Fill cfg from attr (may be NULL), the environment and the device's caps.
 * Returns 0 or EINVAL for attr bits this library does not know.
 */
int mrmgr__cache_config_resolve(struct mrmgr__cache_config *cfg,
				const struct mrmgr_cache_attr *attr,
				const struct mrmgr__dev_caps *caps);

/*
 * Parse a size such as "4096", "64K", "8M", "2G" (binary units). Returns 0
 * and *out, or EINVAL. Exposed for tests.
 */
int mrmgr__parse_size(const char *s, uint64_t *out);

#endif /* MRMGR__CONFIG_ENV_H */
