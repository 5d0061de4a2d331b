/*
 * Configuration resolution: defaults from the process and the device,
 * then the caller's attributes, then MRMGR_* environment variables.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <unistd.h>

#include "cache.h"
#include "config_env.h"
#include "log.h"

#define KNOWN_ATTR_MASK                                                   \
	(MRMGR_CACHE_ATTR_MAX_REGIONS | MRMGR_CACHE_ATTR_MAX_BYTES |       \
	 MRMGR_CACHE_ATTR_FLAGS | MRMGR_CACHE_ATTR_ODP |                  \
	 MRMGR_CACHE_ATTR_MONITOR)
#define KNOWN_FLAGS                                                       \
	(MRMGR_CACHE_NO_MERGE | MRMGR_CACHE_DISABLE |                      \
	 MRMGR_CACHE_NO_HEADROOM | MRMGR_CACHE_NO_REREG | MRMGR_CACHE_CHECK)
#define DEFAULT_MAX_REGIONS_CAP (1u << 20)

int mrmgr__parse_size(const char *s, uint64_t *out)
{
	char *end;
	unsigned long long v;
	unsigned int shift = 0;

	if (!s || !*s || *s == '-')
		return EINVAL;
	errno = 0;
	v = strtoull(s, &end, 0);
	if (errno || end == s)
		return EINVAL;
	switch (*end) {
	case 'k': case 'K': shift = 10; end++; break;
	case 'm': case 'M': shift = 20; end++; break;
	case 'g': case 'G': shift = 30; end++; break;
	case 't': case 'T': shift = 40; end++; break;
	default: break;
	}
	if (*end == 'i' || *end == 'B' || *end == 'b')
		end += (end[0] == 'i' && (end[1] == 'B' || end[1] == 'b')) ? 2 : 1;
	if (*end != '\0')
		return EINVAL;
	if (shift && v > (UINT64_MAX >> shift))
		return EINVAL;
	*out = (uint64_t)v << shift;
	return 0;
}

/* A size from the environment; a bad value is reported and ignored. */
static int env_size(const char *name, uint64_t *out)
{
	const char *s = getenv(name);

	if (!s)
		return 0;
	if (mrmgr__parse_size(s, out)) {
		mrmgr__warn("ignoring %s=\"%s\": not a size", name, s);
		return 0;
	}
	return 1;
}

/* A boolean from the environment: 1/0, yes/no, on/off, true/false. */
static int env_bool(const char *name, int *out)
{
	const char *s = getenv(name);

	if (!s)
		return 0;
	if (!strcmp(s, "1") || !strcasecmp(s, "yes") || !strcasecmp(s, "on") ||
	    !strcasecmp(s, "true")) {
		*out = 1;
		return 1;
	}
	if (!strcmp(s, "0") || !strcasecmp(s, "no") || !strcasecmp(s, "off") ||
	    !strcasecmp(s, "false")) {
		*out = 0;
		return 1;
	}
	mrmgr__warn("ignoring %s=\"%s\": expected 0 or 1", name, s);
	return 0;
}

/* MRMGR_ODP: off, explicit, implicit or auto. */
static int env_odp_mode(uint32_t *out)
{
	static const char *const names[] = { "off", "explicit", "implicit",
					     "auto" };
	const char *s = getenv("MRMGR_ODP");

	if (!s)
		return 0;
	for (uint32_t i = 0; i < 4; i++) {
		if (!strcasecmp(s, names[i])) {
			*out = i;
			return 1;
		}
	}
	mrmgr__warn("ignoring MRMGR_ODP=\"%s\": expected off, explicit, "
		    "implicit or auto", s);
	return 0;
}

/* The ODP fields of the attributes: reject what this library does not know. */
static int odp_attr(struct mrmgr__cache_config *cfg,
		    const struct mrmgr_cache_attr *attr)
{
	const uint32_t known_flags = MRMGR_ODP_STRICT | MRMGR_ODP_AUTO_PREFETCH;
	const uint32_t known_tr = MRMGR_ODP_TRANSPORT_RC | MRMGR_ODP_TRANSPORT_UC |
				  MRMGR_ODP_TRANSPORT_UD | MRMGR_ODP_TRANSPORT_XRC;
	const uint32_t known_ops = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV |
				   IBV_ODP_SUPPORT_WRITE | IBV_ODP_SUPPORT_READ |
				   IBV_ODP_SUPPORT_ATOMIC |
				   IBV_ODP_SUPPORT_SRQ_RECV;

	if (attr->odp_mode > MRMGR_ODP_AUTO || (attr->odp_flags & ~known_flags) ||
	    (attr->odp_transports & ~known_tr) || (attr->odp_ops & ~known_ops)) {
		mrmgr__err("cache attr: bad ODP settings (mode %u, flags %#x, "
			   "transports %#x, ops %#x)", attr->odp_mode,
			   attr->odp_flags, attr->odp_transports, attr->odp_ops);
		return EINVAL;
	}
	cfg->odp_mode = attr->odp_mode;
	cfg->odp_flags = attr->odp_flags;
	cfg->odp_transports = attr->odp_transports;
	cfg->odp_ops = attr->odp_ops;
	return 0;
}

/* MRMGR_MONITOR: auto, uffd, hooks, external, none (or off). */
static int env_monitor(uint32_t *out)
{
	static const char *const names[] = { "auto", "uffd", "hooks",
					     "external", "none" };
	const char *s = getenv("MRMGR_MONITOR");

	if (!s)
		return 0;
	for (uint32_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		if (!strcasecmp(s, names[i])) {
			*out = i;
			return 1;
		}
	}
	if (!strcasecmp(s, "off") || !strcmp(s, "0")) {
		*out = MRMGR_MONITOR_NONE;
		return 1;
	}
	mrmgr__warn("ignoring MRMGR_MONITOR=\"%s\": expected auto, uffd, "
		    "hooks, external or none", s);
	return 0;
}

static uint64_t default_max_bytes(const struct mrmgr__dev_caps *caps)
{
	struct rlimit rl;
	uint64_t v;

	if (getrlimit(RLIMIT_MEMLOCK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
		v = rl.rlim_cur;
	} else {
		long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);

		v = (pages > 0 && psz > 0) ? (uint64_t)pages * (uint64_t)psz / 2
					   : UINT64_MAX;
	}
	if (caps->max_mr_size && v > caps->max_mr_size)
		v = caps->max_mr_size;
	return v;
}

int mrmgr__cache_config_resolve(struct mrmgr__cache_config *cfg,
				const struct mrmgr_cache_attr *attr,
				const struct mrmgr__dev_caps *caps)
{
	uint64_t v;
	int b;

	memset(cfg, 0, sizeof(*cfg));
	if (attr) {
		if (attr->comp_mask & ~(uint64_t)KNOWN_ATTR_MASK) {
			mrmgr__err("cache attr: unknown comp_mask bits 0x%llx",
				   (unsigned long long)(attr->comp_mask &
							~(uint64_t)KNOWN_ATTR_MASK));
			return EINVAL;
		}
		if (attr->comp_mask & MRMGR_CACHE_ATTR_MAX_REGIONS)
			cfg->max_regions = attr->max_regions;
		if (attr->comp_mask & MRMGR_CACHE_ATTR_MAX_BYTES)
			cfg->max_bytes = attr->max_bytes;
		if (attr->comp_mask & MRMGR_CACHE_ATTR_FLAGS) {
			if (attr->flags & ~(uint64_t)KNOWN_FLAGS) {
				mrmgr__err("cache attr: unknown flags 0x%llx",
					   (unsigned long long)attr->flags);
				return EINVAL;
			}
			cfg->flags = attr->flags;
		}
		if ((attr->comp_mask & MRMGR_CACHE_ATTR_ODP) &&
		    odp_attr(cfg, attr))
			return EINVAL;
		if (attr->comp_mask & MRMGR_CACHE_ATTR_MONITOR) {
			if (attr->monitor > MRMGR_MONITOR_NONE) {
				mrmgr__err("cache attr: unknown monitor mode %u",
					   attr->monitor);
				return EINVAL;
			}
			cfg->monitor = attr->monitor;
		}
	}

	if (env_size("MRMGR_MAX_REGIONS", &v))
		cfg->max_regions = v;
	if (env_size("MRMGR_MAX_BYTES", &v))
		cfg->max_bytes = v;
	if (env_bool("MRMGR_MERGE", &b))
		cfg->flags = b ? cfg->flags & ~(uint64_t)MRMGR_CACHE_NO_MERGE
			       : cfg->flags | MRMGR_CACHE_NO_MERGE;
	env_monitor(&cfg->monitor);
	if (env_bool("MRMGR_CACHE", &b))
		cfg->flags = b ? cfg->flags & ~(uint64_t)MRMGR_CACHE_DISABLE
			       : cfg->flags | MRMGR_CACHE_DISABLE;
	env_odp_mode(&cfg->odp_mode);
	if (env_bool("MRMGR_ODP_STRICT", &b))
		cfg->odp_flags = b ? cfg->odp_flags | MRMGR_ODP_STRICT
				   : cfg->odp_flags & ~(uint32_t)MRMGR_ODP_STRICT;
	if (env_bool("MRMGR_ODP_PREFETCH", &b))
		cfg->odp_flags = b ? cfg->odp_flags | MRMGR_ODP_AUTO_PREFETCH
				   : cfg->odp_flags &
					     ~(uint32_t)MRMGR_ODP_AUTO_PREFETCH;
	if (env_bool("MRMGR_GROW_HEADROOM", &b))
		cfg->flags = b ? cfg->flags & ~(uint64_t)MRMGR_CACHE_NO_HEADROOM
			       : cfg->flags | MRMGR_CACHE_NO_HEADROOM;
	if (env_bool("MRMGR_REREG", &b))
		cfg->flags = b ? cfg->flags & ~(uint64_t)MRMGR_CACHE_NO_REREG
			       : cfg->flags | MRMGR_CACHE_NO_REREG;

	if (!cfg->max_regions) {
		cfg->max_regions = caps->max_mr ? caps->max_mr
						: DEFAULT_MAX_REGIONS_CAP;
		if (cfg->max_regions > DEFAULT_MAX_REGIONS_CAP)
			cfg->max_regions = DEFAULT_MAX_REGIONS_CAP;
	}
	if (!cfg->max_bytes)
		cfg->max_bytes = default_max_bytes(caps);
	return 0;
}
