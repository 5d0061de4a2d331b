/*
 * Configuration: defaults from what the process may pin and from the
 * device, the program's attributes, and MRMGR_* environment variables
 * filling what the program left unset. The rule, and every variable, is
 * in doc/environment.md.
 *
 * SPDX-License-Identifier: MIT
 */
#ifndef MRMGR__CONFIG_ENV_H
#define MRMGR__CONFIG_ENV_H

#include <stddef.h>
#include <stdint.h>

#include <mrmgr/mrmgr.h>

#include "device.h"

struct mrmgr__cache_config;

/* The settings a cache reports with mrmgr_cache_query_config(), in order. */
enum mrmgr__setting {
	MRMGR__SET_MAX_REGIONS,
	MRMGR__SET_MAX_BYTES,
	MRMGR__SET_MERGE,
	MRMGR__SET_CACHE,
	MRMGR__SET_GROW_HEADROOM,
	MRMGR__SET_REREG,
	MRMGR__SET_ODP,
	MRMGR__SET_ODP_STRICT,
	MRMGR__SET_ODP_PREFETCH,
	MRMGR__SET_MONITOR,
	MRMGR__SET_COUNT
};

/* Where each setting came from (enum mrmgr_config_source), and how the
 * defaults that depend on the process or the device were derived. */
struct mrmgr__config_src {
	uint8_t src[MRMGR__SET_COUNT];
	char regions_note[96];
	char bytes_note[128];
};

/*
 * Fill cfg from attr (may be NULL), the environment and the device's caps.
 * Returns 0 or EINVAL for attr bits this library does not know.
 */
int mrmgr__cache_config_resolve(struct mrmgr__cache_config *cfg,
				const struct mrmgr_cache_attr *attr,
				const struct mrmgr__dev_caps *caps);

/*
 * Parse a size: decimal digits only (no sign, no space, no 0x, a leading 0
 * is decimal), then optionally one of K, M, G, T (either case, binary
 * units), optionally followed by "iB". Returns 0 and *out, or EINVAL (also
 * on overflow). Exposed for tests.
 */
int mrmgr__parse_size(const char *s, uint64_t *out);

/* What the process may pin: RLIMIT_MEMLOCK's soft limit (RLIM_INFINITY
 * as UINT64_MAX), and whether CAP_IPC_LOCK is in the effective set. */
struct mrmgr__pin_budget {
	uint64_t rlimit;
	int cap_ipc_lock;
	uint64_t phys_bytes; /* physical memory, 0 if unknown */
};
void mrmgr__pin_budget_read(struct mrmgr__pin_budget *b);

/*
 * The default max_bytes for a budget and a device's max_mr_size (0: no
 * limit); note (if not NULL) receives how it was derived. Exposed for
 * tests.
 */
uint64_t mrmgr__default_max_bytes(const struct mrmgr__pin_budget *b,
				  uint64_t max_mr_size, char *note,
				  size_t note_size);

/* Forget which "ignored" warnings were already given (tests). */
void mrmgr__config_reset_warnings(void);

#endif /* MRMGR__CONFIG_ENV_H */
