/*
 * Configuration resolution.
 *
 * The rule (doc/environment.md): a field the program set in its
 * attributes (its comp_mask bit set) is the program's decision; an
 * MRMGR_* variable fills only what it left unset; what neither set gets
 * the default. One exception, in the safe direction: MRMGR_CACHE=0 turns
 * caching off even for a program that set its flags (an administrator's
 * debugging switch). A variable that would make the cache unsafe
 * (MRMGR_MONITOR=none or external) is obeyed only where the program left
 * the monitor unset, and then with a warning.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <linux/capability.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "cache.h"
#include "config_env.h"
#include "log.h"

#define KNOWN_ATTR_MASK                                                   \
	(MRMGR_CACHE_ATTR_MAX_REGIONS | MRMGR_CACHE_ATTR_MAX_BYTES |       \
	 MRMGR_CACHE_ATTR_FLAGS | MRMGR_CACHE_ATTR_ODP |                  \
	 MRMGR_CACHE_ATTR_MONITOR | MRMGR_CACHE_ATTR_REGION_GONE)
#define KNOWN_FLAGS                                                       \
	(MRMGR_CACHE_NO_MERGE | MRMGR_CACHE_DISABLE |                      \
	 MRMGR_CACHE_NO_HEADROOM | MRMGR_CACHE_NO_REREG | MRMGR_CACHE_CHECK | \
	 MRMGR_CACHE_CHECK_STALE)
#define DEFAULT_MAX_REGIONS_CAP (1u << 20)

/* ------------------------------------------------------------ parsing */

int mrmgr__parse_size(const char *s, uint64_t *out)
{
	uint64_t v = 0;
	unsigned int shift = 0;
	const char *p = s;

	if (!s || *p < '0' || *p > '9')
		return EINVAL; /* empty, sign, space */
	for (; *p >= '0' && *p <= '9'; p++) {
		unsigned int d = (unsigned int)(*p - '0');

		if (v > (UINT64_MAX - d) / 10)
			return EINVAL;
		v = v * 10 + d;
	}
	switch (*p) {
	case 'k': case 'K': shift = 10; p++; break;
	case 'm': case 'M': shift = 20; p++; break;
	case 'g': case 'G': shift = 30; p++; break;
	case 't': case 'T': shift = 40; p++; break;
	default: break;
	}
	if (shift && p[0] == 'i' && p[1] == 'B')
		p += 2;
	if (*p != '\0')
		return EINVAL;
	if (shift && v > (UINT64_MAX >> shift))
		return EINVAL;
	*out = v << shift;
	return 0;
}

/* Each "ignored because the program set it" warning is given once per
 * process: a program creates many caches. */
static uint32_t warned;

void mrmgr__config_reset_warnings(void)
{
	__atomic_store_n(&warned, 0, __ATOMIC_RELAXED);
}

static const char *const setting_env[MRMGR__SET_COUNT] = {
	[MRMGR__SET_MAX_REGIONS] = "MRMGR_MAX_REGIONS",
	[MRMGR__SET_MAX_BYTES] = "MRMGR_MAX_BYTES",
	[MRMGR__SET_MERGE] = "MRMGR_MERGE",
	[MRMGR__SET_CACHE] = "MRMGR_CACHE",
	[MRMGR__SET_GROW_HEADROOM] = "MRMGR_GROW_HEADROOM",
	[MRMGR__SET_REREG] = "MRMGR_REREG",
	[MRMGR__SET_ODP] = "MRMGR_ODP",
	[MRMGR__SET_ODP_STRICT] = "MRMGR_ODP_STRICT",
	[MRMGR__SET_ODP_PREFETCH] = "MRMGR_ODP_PREFETCH",
	[MRMGR__SET_MONITOR] = "MRMGR_MONITOR",
};

static void warn_ignored(enum mrmgr__setting id, const char *val,
			 const char *field)
{
	uint32_t bit = 1u << id;

	if (__atomic_fetch_or(&warned, bit, __ATOMIC_RELAXED) & bit)
		return;
	mrmgr__warn("ignoring %s=\"%s\": the program set %s in its cache "
		    "attributes, and that wins (see mrmgr-env(7))",
		    setting_env[id], val, field);
}

/*
 * A size from the environment: 1 and *out when set and valid; a bad value
 * is reported and ignored.
 */
static int env_size(const char *name, uint64_t *out)
{
	const char *s = getenv(name);

	if (!s)
		return 0;
	if (mrmgr__parse_size(s, out)) {
		mrmgr__warn("ignoring %s=\"%s\": not a size (decimal digits, "
			    "optionally followed by K, M, G or T)", name, s);
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

/* One of names (case-insensitive): 1 and its index in *out. */
static int env_word(const char *name, const char *const *names, uint32_t n,
		    const char *expected, uint32_t *out)
{
	const char *s = getenv(name);

	if (!s)
		return 0;
	for (uint32_t i = 0; i < n; i++) {
		if (names[i] && !strcasecmp(s, names[i])) {
			*out = i;
			return 1;
		}
	}
	mrmgr__warn("ignoring %s=\"%s\": expected %s", name, s, expected);
	return 0;
}

static int env_odp_mode(uint32_t *out)
{
	static const char *const names[] = { "off", "explicit", "implicit",
					     "auto" };

	return env_word("MRMGR_ODP", names, 4,
			"off, explicit, implicit or auto", out);
}

static int env_monitor(uint32_t *out)
{
	/* Index = enum mrmgr_monitor_mode; "off" and "0" are accepted
	 * spellings of none. */
	static const char *const names[] = { "auto", "uffd", "hooks",
					     "external", "none", "patch",
					     "off", "0" };
	int ret = env_word("MRMGR_MONITOR", names, 8,
			   "auto, uffd, hooks, patch, external or none", out);

	if (ret && *out > MRMGR_MONITOR_PATCH)
		*out = MRMGR_MONITOR_NONE;
	return ret;
}

/* ------------------------------------------------------------ attributes */

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

static int attrs(struct mrmgr__cache_config *cfg,
		 const struct mrmgr_cache_attr *attr)
{
	uint8_t *src = cfg->src.src;

	if (attr->comp_mask & ~(uint64_t)KNOWN_ATTR_MASK) {
		mrmgr__err("cache attr: unknown comp_mask bits 0x%llx",
			   (unsigned long long)(attr->comp_mask &
						~(uint64_t)KNOWN_ATTR_MASK));
		return EINVAL;
	}
	/* 0 is documented as "the default": it leaves the field unset. */
	if ((attr->comp_mask & MRMGR_CACHE_ATTR_MAX_REGIONS) && attr->max_regions) {
		cfg->max_regions = attr->max_regions;
		src[MRMGR__SET_MAX_REGIONS] = MRMGR_CONFIG_SOURCE_ATTR;
	}
	if ((attr->comp_mask & MRMGR_CACHE_ATTR_MAX_BYTES) && attr->max_bytes) {
		cfg->max_bytes = attr->max_bytes;
		src[MRMGR__SET_MAX_BYTES] = MRMGR_CONFIG_SOURCE_ATTR;
	}
	if (attr->comp_mask & MRMGR_CACHE_ATTR_FLAGS) {
		if (attr->flags & ~(uint64_t)KNOWN_FLAGS) {
			mrmgr__err("cache attr: unknown flags 0x%llx",
				   (unsigned long long)attr->flags);
			return EINVAL;
		}
		cfg->flags = attr->flags;
		src[MRMGR__SET_MERGE] = src[MRMGR__SET_CACHE] =
			src[MRMGR__SET_GROW_HEADROOM] = src[MRMGR__SET_REREG] =
				MRMGR_CONFIG_SOURCE_ATTR;
	}
	if (attr->comp_mask & MRMGR_CACHE_ATTR_ODP) {
		if (odp_attr(cfg, attr))
			return EINVAL;
		src[MRMGR__SET_ODP] = src[MRMGR__SET_ODP_STRICT] =
			src[MRMGR__SET_ODP_PREFETCH] = MRMGR_CONFIG_SOURCE_ATTR;
	}
	if (attr->comp_mask & MRMGR_CACHE_ATTR_MONITOR) {
		if (attr->monitor > MRMGR_MONITOR_PATCH) {
			mrmgr__err("cache attr: unknown monitor mode %u",
				   attr->monitor);
			return EINVAL;
		}
		cfg->monitor = attr->monitor;
		src[MRMGR__SET_MONITOR] = MRMGR_CONFIG_SOURCE_ATTR;
	}
	if (attr->comp_mask & MRMGR_CACHE_ATTR_REGION_GONE) {
		cfg->region_gone = attr->region_gone;
		cfg->region_gone_arg = attr->region_gone_arg;
	}
	return 0;
}

/* ------------------------------------------------------------ environment */

/*
 * A variable that parsed as value for setting id: 1 when it may fill the
 * setting; 0 when the program decided it (warned when the two differ).
 */
static int fills(const struct mrmgr__cache_config *cfg, enum mrmgr__setting id,
		 const char *field, int differs)
{
	if (cfg->src.src[id] != MRMGR_CONFIG_SOURCE_ATTR)
		return 1;
	if (differs)
		warn_ignored(id, getenv(setting_env[id]), field);
	return 0;
}

/* A flag bit set by a variable meaning "on" when the bit is clear. */
static void env_flag(struct mrmgr__cache_config *cfg, enum mrmgr__setting id,
		     uint64_t off_bit)
{
	int b;

	if (!env_bool(setting_env[id], &b) ||
	    !fills(cfg, id, "flags", b != !(cfg->flags & off_bit)))
		return;
	cfg->flags = b ? cfg->flags & ~off_bit : cfg->flags | off_bit;
	cfg->src.src[id] = MRMGR_CONFIG_SOURCE_ENV;
}

static void env_odp_flag(struct mrmgr__cache_config *cfg,
			 enum mrmgr__setting id, uint32_t bit)
{
	int b;

	if (!env_bool(setting_env[id], &b) ||
	    !fills(cfg, id, "odp_flags", b != !!(cfg->odp_flags & bit)))
		return;
	cfg->odp_flags = b ? cfg->odp_flags | bit : cfg->odp_flags & ~bit;
	cfg->src.src[id] = MRMGR_CONFIG_SOURCE_ENV;
}

/* MRMGR_MAX_REGIONS, MRMGR_MAX_BYTES; 0 means the default. */
static void env_limit(struct mrmgr__cache_config *cfg, enum mrmgr__setting id,
		      const char *field, uint64_t *val)
{
	uint64_t v;

	if (!env_size(setting_env[id], &v) || !v ||
	    !fills(cfg, id, field, v != *val))
		return;
	*val = v;
	cfg->src.src[id] = MRMGR_CONFIG_SOURCE_ENV;
}

/* MRMGR_CACHE: fills like the others, but 0 also overrides the program
 * (turning the cache off is always safe: a debugging switch). */
static void env_cache(struct mrmgr__cache_config *cfg)
{
	uint8_t *src = cfg->src.src;
	int b, off;

	if (!env_bool("MRMGR_CACHE", &b))
		return;
	off = !!(cfg->flags & MRMGR_CACHE_DISABLE);
	if (!b && src[MRMGR__SET_CACHE] == MRMGR_CONFIG_SOURCE_ATTR && !off)
		mrmgr__warn("MRMGR_CACHE=%s overrides the program's flags: "
			    "caching is off", getenv("MRMGR_CACHE"));
	else if (!fills(cfg, MRMGR__SET_CACHE, "flags", b == off))
		return;
	cfg->flags = b ? cfg->flags & ~(uint64_t)MRMGR_CACHE_DISABLE
		       : cfg->flags | MRMGR_CACHE_DISABLE;
	src[MRMGR__SET_CACHE] = MRMGR_CONFIG_SOURCE_ENV;
}

static void env_fill(struct mrmgr__cache_config *cfg)
{
	uint8_t *src = cfg->src.src;
	uint32_t m;

	env_limit(cfg, MRMGR__SET_MAX_REGIONS, "max_regions", &cfg->max_regions);
	env_limit(cfg, MRMGR__SET_MAX_BYTES, "max_bytes", &cfg->max_bytes);
	env_flag(cfg, MRMGR__SET_MERGE, MRMGR_CACHE_NO_MERGE);
	env_cache(cfg);
	env_flag(cfg, MRMGR__SET_GROW_HEADROOM, MRMGR_CACHE_NO_HEADROOM);
	env_flag(cfg, MRMGR__SET_REREG, MRMGR_CACHE_NO_REREG);
	if (env_odp_mode(&m) &&
	    fills(cfg, MRMGR__SET_ODP, "odp_mode", m != cfg->odp_mode)) {
		cfg->odp_mode = m;
		src[MRMGR__SET_ODP] = MRMGR_CONFIG_SOURCE_ENV;
	}
	env_odp_flag(cfg, MRMGR__SET_ODP_STRICT, MRMGR_ODP_STRICT);
	env_odp_flag(cfg, MRMGR__SET_ODP_PREFETCH, MRMGR_ODP_AUTO_PREFETCH);
	if (env_monitor(&m) &&
	    fills(cfg, MRMGR__SET_MONITOR, "monitor", m != cfg->monitor)) {
		cfg->monitor = m;
		src[MRMGR__SET_MONITOR] = MRMGR_CONFIG_SOURCE_ENV;
		/* The program did not promise to report memory changes. */
		if (m == MRMGR_MONITOR_NONE || m == MRMGR_MONITOR_EXTERNAL)
			mrmgr__warn("MRMGR_MONITOR=%s from the environment: "
				    "this cache will not watch memory itself; "
				    "unless the program calls "
				    "mrmgr_notify_unmap() or mrmgr_invalidate() "
				    "for every unmap, STALE registrations will "
				    "be handed out", getenv("MRMGR_MONITOR"));
	}
}

/* ------------------------------------------------------------ defaults */

void mrmgr__pin_budget_read(struct mrmgr__pin_budget *b)
{
	struct __user_cap_header_struct h = {
		.version = _LINUX_CAPABILITY_VERSION_3,
	};
	struct __user_cap_data_struct d[_LINUX_CAPABILITY_U32S_3];
	struct rlimit rl;
	long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);

	b->rlimit = UINT64_MAX;
	if (getrlimit(RLIMIT_MEMLOCK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
		b->rlimit = rl.rlim_cur;
	/* With CAP_IPC_LOCK the kernel does not enforce RLIMIT_MEMLOCK on
	 * pinned pages (being root is not enough: a container may drop it). */
	memset(d, 0, sizeof(d));
	b->cap_ipc_lock = syscall(SYS_capget, &h, d) == 0 &&
			  (d[CAP_IPC_LOCK / 32].effective &
			   (1u << (CAP_IPC_LOCK % 32)));
	b->phys_bytes = pages > 0 && psz > 0 ? (uint64_t)pages * (uint64_t)psz : 0;
}

uint64_t mrmgr__default_max_bytes(const struct mrmgr__pin_budget *b,
				  uint64_t max_mr_size, char *note,
				  size_t note_size)
{
	char buf[128];
	uint64_t v;

	if (b->rlimit != UINT64_MAX && !b->cap_ipc_lock) {
		v = b->rlimit;
		snprintf(buf, sizeof(buf), "RLIMIT_MEMLOCK");
	} else if (b->phys_bytes) {
		v = b->phys_bytes / 2;
		snprintf(buf, sizeof(buf), "half of physical memory (%s)",
			 b->cap_ipc_lock ? "CAP_IPC_LOCK" : "RLIMIT_MEMLOCK unlimited");
	} else {
		v = UINT64_MAX;
		snprintf(buf, sizeof(buf), "no limit (physical memory unknown)");
	}
	if (max_mr_size && v > max_mr_size) {
		v = max_mr_size;
		snprintf(buf + strlen(buf), sizeof(buf) - strlen(buf),
			 ", capped at the device's max_mr_size");
	}
	if (note && note_size)
		snprintf(note, note_size, "%s", buf);
	return v;
}

static void defaults(struct mrmgr__cache_config *cfg,
		     const struct mrmgr__dev_caps *caps)
{
	struct mrmgr__pin_budget b;

	if (!cfg->max_regions) {
		cfg->max_regions = caps->max_mr ? caps->max_mr
						: DEFAULT_MAX_REGIONS_CAP;
		/* The note names the cap in force, so that mrmgr_info and the
		 * docs' check (tests/doc/check-defaults.sh) see the real one. */
		if (cfg->max_regions > DEFAULT_MAX_REGIONS_CAP) {
			cfg->max_regions = DEFAULT_MAX_REGIONS_CAP;
			snprintf(cfg->src.regions_note,
				 sizeof(cfg->src.regions_note),
				 "device max_mr %" PRIu32 ", capped at %u",
				 caps->max_mr, DEFAULT_MAX_REGIONS_CAP);
		} else {
			snprintf(cfg->src.regions_note,
				 sizeof(cfg->src.regions_note),
				 "device max_mr %" PRIu32, caps->max_mr);
		}
	}
	if (!cfg->max_bytes) {
		mrmgr__pin_budget_read(&b);
		cfg->max_bytes = mrmgr__default_max_bytes(
			&b, caps->max_mr_size, cfg->src.bytes_note,
			sizeof(cfg->src.bytes_note));
	}
}

int mrmgr__cache_config_resolve(struct mrmgr__cache_config *cfg,
				const struct mrmgr_cache_attr *attr,
				const struct mrmgr__dev_caps *caps)
{
	memset(cfg, 0, sizeof(*cfg)); /* every source: MRMGR_CONFIG_SOURCE_DEFAULT */
	if (attr && attrs(cfg, attr))
		return EINVAL;
	env_fill(cfg);
	defaults(cfg, caps);
	return 0;
}

/* ------------------------------------------------------------ query */

static const char *const odp_names[] = { "off", "explicit", "implicit",
					 "auto" };

static void entry_fill(const struct mrmgr__cache_config *cfg,
		       enum mrmgr__setting id, struct mrmgr_config_entry *e)
{
	uint64_t f = cfg->flags;
	const char *note = "";

	memset(e, 0, sizeof(*e));
	snprintf(e->name, sizeof(e->name), "%s", setting_env[id]);
	e->source = cfg->src.src[id];
	switch (id) {
	case MRMGR__SET_MAX_REGIONS:
		snprintf(e->value, sizeof(e->value), "%" PRIu64, cfg->max_regions);
		note = cfg->src.regions_note;
		break;
	case MRMGR__SET_MAX_BYTES:
		snprintf(e->value, sizeof(e->value), "%" PRIu64, cfg->max_bytes);
		note = cfg->src.bytes_note;
		break;
	case MRMGR__SET_MERGE:
		snprintf(e->value, sizeof(e->value), "%d", !(f & MRMGR_CACHE_NO_MERGE));
		break;
	case MRMGR__SET_CACHE:
		snprintf(e->value, sizeof(e->value), "%d", !(f & MRMGR_CACHE_DISABLE));
		break;
	case MRMGR__SET_GROW_HEADROOM:
		snprintf(e->value, sizeof(e->value), "%d",
			 !(f & MRMGR_CACHE_NO_HEADROOM));
		break;
	case MRMGR__SET_REREG:
		snprintf(e->value, sizeof(e->value), "%d", !(f & MRMGR_CACHE_NO_REREG));
		break;
	case MRMGR__SET_ODP:
		snprintf(e->value, sizeof(e->value), "%s",
			 cfg->odp_mode <= MRMGR_ODP_AUTO ? odp_names[cfg->odp_mode] : "?");
		break;
	case MRMGR__SET_ODP_STRICT:
		snprintf(e->value, sizeof(e->value), "%d",
			 !!(cfg->odp_flags & MRMGR_ODP_STRICT));
		break;
	case MRMGR__SET_ODP_PREFETCH:
		snprintf(e->value, sizeof(e->value), "%d",
			 !!(cfg->odp_flags & MRMGR_ODP_AUTO_PREFETCH));
		break;
	case MRMGR__SET_MONITOR:
		snprintf(e->value, sizeof(e->value), "%s",
			 mrmgr__mon_mode_name(cfg->monitor));
		break;
	default:
		break;
	}
	if (e->source == MRMGR_CONFIG_SOURCE_DEFAULT)
		snprintf(e->note, sizeof(e->note), "%s", note);
}

MRMGR_EXPORT int mrmgr_cache_query_config(mrmgr_cache_t *c,
					  struct mrmgr_config_entry *entries,
					  size_t max, size_t entry_size,
					  size_t *n)
{
	struct mrmgr_config_entry e;

	if (!c || !n || (max && !entries) || !entry_size) {
		mrmgr__err("mrmgr_cache_query_config: %s",
			   !c ? "NULL cache" : !n ? "NULL count"
			   : !entry_size ? "entry size 0" : "NULL entries");
		return EINVAL;
	}
	/* The configuration is fixed at creation: no lock needed. */
	for (size_t i = 0; i < MRMGR__SET_COUNT && i < max; i++) {
		char *dst = (char *)entries + i * entry_size;

		entry_fill(&c->cfg, (enum mrmgr__setting)i, &e);
		/* A newer caller's members this library does not know: 0. */
		if (entry_size > sizeof(e))
			memset(dst + sizeof(e), 0, entry_size - sizeof(e));
		memcpy(dst, &e, entry_size < sizeof(e) ? entry_size : sizeof(e));
	}
	*n = MRMGR__SET_COUNT;
	return 0;
}
