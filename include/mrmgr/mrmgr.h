/*
 * libmrmgr - RDMA memory-region manager.
 *
 * SPDX-License-Identifier: MIT
 */
#ifndef MRMGR_MRMGR_H
#define MRMGR_MRMGR_H

/**
 * @file mrmgr.h
 * @brief Public API of libmrmgr: a registration cache for libibverbs.
 *
 * libmrmgr owns the life of RDMA memory regions (MRs): callers ask for a
 * registered range with mrmgr_get() and give it back with mrmgr_put(); the
 * cache registers, merges, reuses, evicts and deregisters underneath.
 *
 * @par Return convention
 * Every function that can fail returns 0 on success or a positive errno
 * value, like libibverbs. Bad input gets @c EINVAL and a log line (see
 * mrmgr_set_log_handler()); nothing in the library aborts the process.
 *
 * @par Thread safety
 * Every function may be called from any thread concurrently, with these
 * rules, which are the caller's to keep:
 *  - a region must not be used after the mrmgr_put() that drops the
 *    caller's reference; every mrmgr_get() is matched by exactly one
 *    mrmgr_put(), from any thread;
 *  - mrmgr_cache_destroy() must not run concurrently with any other call on
 *    the same cache (it returns @c EBUSY while regions are still held);
 *  - the @c struct @c ibv_pd passed to mrmgr_cache_create() must outlive
 *    the cache.
 * Cache hits take no lock that other hits contend on, allocate nothing and
 * make no system call.
 *
 * @par ABI
 * Handles are opaque. Attribute structs grow at their end and carry a
 * @c comp_mask: a field is read only when its bit is set, so a program built
 * against an older header keeps working with a newer library. Statistics are
 * copied up to the size the caller passes. Symbols are versioned
 * (@c MRMGR_1.0); new features add symbols, old ones never change.
 */

#include <stddef.h>
#include <stdint.h>
#include <infiniband/verbs.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Marks a declaration as part of the exported ABI. */
#if defined(__GNUC__)
#define MRMGR_EXPORT __attribute__((visibility("default")))
#else
#define MRMGR_EXPORT
#endif

/** Library version, as in the package. */
#define MRMGR_VERSION_MAJOR 1
/** @copydoc MRMGR_VERSION_MAJOR */
#define MRMGR_VERSION_MINOR 0

/** A registration cache bound to one protection domain. Opaque. */
typedef struct mrmgr_cache mrmgr_cache_t;
/** A registered range handed out by mrmgr_get(). Opaque. */
typedef struct mrmgr_region mrmgr_region_t;
/** A growable registered buffer (mrmgr_buf_create()). Opaque. */
typedef struct mrmgr_buf mrmgr_buf_t;

/** Bits of mrmgr_cache_attr::comp_mask: which fields are valid. */
enum mrmgr_cache_attr_mask {
	/** mrmgr_cache_attr::max_regions is set. */
	MRMGR_CACHE_ATTR_MAX_REGIONS = 1u << 0,
	/** mrmgr_cache_attr::max_bytes is set. */
	MRMGR_CACHE_ATTR_MAX_BYTES = 1u << 1,
	/** mrmgr_cache_attr::flags is set. */
	MRMGR_CACHE_ATTR_FLAGS = 1u << 2,
};

/** Policy bits for mrmgr_cache_attr::flags. */
enum mrmgr_cache_flags {
	/**
	 * Never merge overlapping or adjacent requests into one region: each
	 * miss registers exactly the (page-aligned) range asked for.
	 */
	MRMGR_CACHE_NO_MERGE = 1u << 0,
	/**
	 * Cache nothing: every mrmgr_get() registers and the last
	 * mrmgr_put() deregisters. Useful to compare against, or to debug.
	 */
	MRMGR_CACHE_DISABLE = 1u << 1,
	/**
	 * No growth headroom: when a get grows a cached region, register
	 * exactly the grown span instead of at least doubling the region
	 * (within its mapping). See doc/growth.md.
	 */
	MRMGR_CACHE_NO_HEADROOM = 1u << 2,
	/**
	 * Never use ibv_rereg_mr(): growth, access upgrades, PD moves and
	 * buffer resizes register anew instead (an idle region is
	 * deregistered first, a held one is left to its holders:
	 * make-before-break). What the cache does anyway on devices without
	 * rereg (rxe, siw).
	 */
	MRMGR_CACHE_NO_REREG = 1u << 3,
};

/**
 * Attributes of a cache. Zero-initialise, set the fields you want and
 * their bits in @c comp_mask. Environment variables (see mrmgr-env(7)
 * and README) override these.
 */
struct mrmgr_cache_attr {
	/** Which fields below are valid: bits of enum mrmgr_cache_attr_mask. */
	uint64_t comp_mask;
	/**
	 * Most regions kept registered, in use or not. 0 means the default:
	 * the device's @c max_mr, capped at 1,048,576.
	 */
	uint64_t max_regions;
	/**
	 * Most bytes kept registered (pinned). 0 means the default: the
	 * @c RLIMIT_MEMLOCK soft limit, or half of physical memory where that
	 * is unlimited, capped at the device's @c max_mr_size.
	 */
	uint64_t max_bytes;
	/** Bits of enum mrmgr_cache_flags. */
	uint64_t flags;
};

/**
 * Create a registration cache for a protection domain.
 *
 * The PD may come from libibverbs (ibv_alloc_pd()) or from the simulated
 * HCA (mrmgr_sim_alloc_pd()); the cache picks the matching backend.
 *
 * @param pd     protection domain every region is registered in.
 * @param attr   attributes, or NULL for the defaults.
 * @param cache  receives the new cache.
 * @return 0, @c EINVAL (NULL @p pd or @p cache, unknown @c comp_mask or
 *         flag bits), @c ENOMEM, or the errno of the device query.
 */
MRMGR_EXPORT int mrmgr_cache_create(struct ibv_pd *pd,
				    const struct mrmgr_cache_attr *attr,
				    mrmgr_cache_t **cache);

/**
 * Destroy a cache and deregister every region it holds.
 *
 * @return 0, @c EINVAL for NULL, or @c EBUSY when regions are still held by
 *         callers (nothing is destroyed then; a log line says how many).
 */
MRMGR_EXPORT int mrmgr_cache_destroy(mrmgr_cache_t *cache);

/**
 * Get a registered region covering @c [addr, addr+length) with at least
 * @p access.
 *
 * The range is widened to page boundaries. A cached region that contains it
 * with sufficient access is a hit; otherwise the cache registers one,
 * possibly merged with overlapping or adjacent cached regions (see
 * ::MRMGR_CACHE_NO_MERGE), evicting least-recently-used idle regions to stay
 * within its limits. When registration fails with @c ENOMEM or @c EAGAIN it
 * evicts every idle region and tries once more.
 *
 * Growth: a request that extends one cached region (or needs access it
 * lacks) grows that region instead of registering a second, overlapping
 * one: in place with ibv_rereg_mr() when nobody holds it and the device
 * can (the same region is returned, with a new
 * mrmgr_region_generation() and possibly new keys), else by
 * make-before-break (a new region; holders of the old one keep it until
 * their put). A grown region is given headroom: at least twice its old
 * length, within its mapping (see ::MRMGR_CACHE_NO_HEADROOM).
 *
 * The returned region is referenced: it stays registered, and its keys stay
 * valid, until the matching mrmgr_put(), even if the range is invalidated
 * meanwhile.
 *
 * @param cache   the cache.
 * @param addr    start of the range; must be mapped.
 * @param length  bytes, at least 1; @c addr+length must not overflow.
 * @param access  @c ibv_access_flags the region needs (LOCAL_WRITE,
 *                REMOTE_WRITE, REMOTE_READ, REMOTE_ATOMIC, MW_BIND,
 *                RELAXED_ORDERING). REMOTE_WRITE and REMOTE_ATOMIC need
 *                LOCAL_WRITE, as in ibv_reg_mr().
 * @param region  receives the region.
 * @return 0; @c EINVAL for bad input; the registration's errno (@c EFAULT
 *         for unmapped memory or write access to read-only memory,
 *         @c ENOMEM when nothing more can be pinned, ...).
 */
MRMGR_EXPORT int mrmgr_get(mrmgr_cache_t *cache, void *addr, size_t length,
			   unsigned int access, mrmgr_region_t **region);

/**
 * Drop a reference taken by mrmgr_get(). The region stays cached for later
 * hits unless it was invalidated, evicted while in use by a merge, or the
 * cache does not cache it (then it is deregistered now). NULL is ignored.
 */
MRMGR_EXPORT void mrmgr_put(mrmgr_region_t *region);

/**
 * Tell the cache that @c [addr, addr+length) is no longer the memory it
 * was (unmapped, remapped, given back to the kernel).
 *
 * When this returns, no later mrmgr_get() returns a registration covering
 * any page of the range. Idle regions that overlap it are deregistered now;
 * regions in use are detached from the cache and deregistered at their last
 * mrmgr_put().
 *
 * @return 0, or @c EINVAL for a NULL cache, zero length or overflow.
 */
MRMGR_EXPORT int mrmgr_invalidate(mrmgr_cache_t *cache, void *addr,
				  size_t length);

/** The registered MR of a region; valid until the matching mrmgr_put(). */
MRMGR_EXPORT struct ibv_mr *mrmgr_region_mr(const mrmgr_region_t *region);
/** The region's local key. */
MRMGR_EXPORT uint32_t mrmgr_region_lkey(const mrmgr_region_t *region);
/** The region's remote key. */
MRMGR_EXPORT uint32_t mrmgr_region_rkey(const mrmgr_region_t *region);
/** Start of the registered range (page-aligned; may start before the request). */
MRMGR_EXPORT void *mrmgr_region_addr(const mrmgr_region_t *region);
/** Length of the registered range (may exceed the request). */
MRMGR_EXPORT size_t mrmgr_region_length(const mrmgr_region_t *region);
/** The @c ibv_access_flags the region was registered with. */
MRMGR_EXPORT unsigned int mrmgr_region_access(const mrmgr_region_t *region);
/**
 * The region's registration number: unique in its cache, and new whenever
 * the registration changes (a region re-registered in place by growth,
 * access upgrade or PD move keeps its handle but gets a new generation,
 * and possibly new keys). Compare generations, not handles, to tell
 * whether keys sent to a peer earlier are still the ones in force.
 */
MRMGR_EXPORT uint64_t mrmgr_region_generation(const mrmgr_region_t *region);

/**
 * Move the cache, and every region and buffer in it, to another protection
 * domain of the same device.
 *
 * Idle regions are re-registered in place (@c IBV_REREG_MR_CHANGE_PD; on
 * mlx5 they keep their keys); where the device cannot, they are dropped
 * and registered again in the new PD by the next get. Regions in use stay
 * with their holders, in the old PD, until their put; new gets register
 * in the new PD (make-before-break). Buffers (mrmgr_buf_create()) follow
 * at once and get a new mrmgr_buf_generation() when their registration
 * changed.
 *
 * Gets that complete after this returns get regions in @p pd; gets racing
 * with it may get either PD. It must not race mrmgr_buf_resize() on the
 * cache's buffers. The old PD must outlive the regions held at the time of
 * the move; @p pd must outlive the cache.
 *
 * @return 0; @c EINVAL for NULL arguments or a PD of another device; or
 *         the error of re-registering a buffer (that buffer is then left
 *         without a registration until its next mrmgr_buf_resize()).
 */
MRMGR_EXPORT int mrmgr_cache_move_pd(mrmgr_cache_t *cache, struct ibv_pd *pd);

/**
 * Create a growable registered buffer of @p size bytes (0 is allowed)
 * with at least @p access, registered through @p cache.
 *
 * The library maps the memory (anonymous, zero-filled, page-aligned) and
 * keeps it registered through every mrmgr_buf_resize(): capacity doubles
 * as the size outgrows it, so a stream of small growths costs O(log n)
 * re-registrations. Gets on buffer memory hit its region.
 *
 * @par Keys and peers
 * A resize that changes the capacity may move the buffer and change its
 * keys (re-registration in place keeps them on some devices, never
 * promise it): compare mrmgr_buf_generation() before and after, and send
 * the new address and rkey to peers before they access the buffer again.
 * No RDMA operation may target the buffer while it is resized (the device
 * revokes the old registration during the change).
 *
 * @par Thread safety
 * A buffer is driven by one thread at a time: mrmgr_buf_resize() and
 * mrmgr_buf_destroy() must not race any other call on the same buffer;
 * the accessors may be called concurrently between them. Other threads
 * must not use the buffer's memory during a resize. Different buffers,
 * and the cache itself, may be used concurrently.
 *
 * @return 0; @c EINVAL (NULL arguments, bad access bits, overflow);
 *         @c ENOMEM; or the registration's error.
 */
MRMGR_EXPORT int mrmgr_buf_create(mrmgr_cache_t *cache, size_t size,
				  unsigned int access, mrmgr_buf_t **buf);

/**
 * Resize a buffer, with realloc() semantics: the contents up to the
 * smaller of the old and new sizes are preserved; the data may move.
 *
 * Within the capacity nothing is re-registered. Growing past it doubles
 * the capacity (or more, for a big step); shrinking to a quarter of it
 * halves it (or more). The registration then follows: re-registered in
 * place when nobody else holds the buffer's region and the device can,
 * else registered anew while other holders keep the old registration until
 * their put.
 *
 * @return 0; @c EINVAL; @c ENOMEM when the memory could not be resized
 *   (the buffer is unchanged); or a registration error: the memory has
 *   been resized (contents preserved) but the buffer has no registration
 *   (mrmgr_buf_mr() returns NULL, the keys 0) until a later resize, of
 *   any size, succeeds.
 */
MRMGR_EXPORT int mrmgr_buf_resize(mrmgr_buf_t *buf, size_t new_size);

/**
 * Destroy a buffer: its registration is dropped from the cache (holders of
 * its region keep it until their put) and its memory unmapped.
 * Buffers must be destroyed before their cache.
 * @return 0 or @c EINVAL for NULL.
 */
MRMGR_EXPORT int mrmgr_buf_destroy(mrmgr_buf_t *buf);

/** The buffer's memory (changes when a resize moves it). */
MRMGR_EXPORT void *mrmgr_buf_data(const mrmgr_buf_t *buf);
/** The size last asked for. */
MRMGR_EXPORT size_t mrmgr_buf_size(const mrmgr_buf_t *buf);
/** Bytes mapped and registered (a page multiple, at least the size). */
MRMGR_EXPORT size_t mrmgr_buf_capacity(const mrmgr_buf_t *buf);
/** The buffer's MR (covering the whole capacity), or NULL without one. */
MRMGR_EXPORT struct ibv_mr *mrmgr_buf_mr(const mrmgr_buf_t *buf);
/** The buffer's local key, or 0 without a registration. */
MRMGR_EXPORT uint32_t mrmgr_buf_lkey(const mrmgr_buf_t *buf);
/** The buffer's remote key, or 0 without a registration. */
MRMGR_EXPORT uint32_t mrmgr_buf_rkey(const mrmgr_buf_t *buf);
/**
 * A number that changes whenever the buffer's registration (and so
 * possibly its keys or address) changes.
 */
MRMGR_EXPORT uint64_t mrmgr_buf_generation(const mrmgr_buf_t *buf);

/**
 * Cache statistics. Fields are only ever added at the end; pass
 * @c sizeof(struct mrmgr_stats) as you know it.
 */
struct mrmgr_stats {
	uint64_t hits;            /**< gets served by a cached region */
	uint64_t misses;          /**< gets that had to register */
	uint64_t registrations;   /**< MRs registered */
	uint64_t deregistrations; /**< MRs deregistered */
	uint64_t reg_failures;    /**< registrations the device refused */
	uint64_t merges;          /**< cached regions absorbed into a larger one */
	uint64_t evictions;       /**< idle regions deregistered to meet a limit */
	uint64_t evict_retries;   /**< ENOMEM/EAGAIN registrations retried after evicting */
	uint64_t invalidations;   /**< regions invalidated (idle or in use) */
	uint64_t uncached;        /**< regions handed out without caching (limit or policy) */
	uint64_t regions;         /**< regions now registered (cached or held) */
	uint64_t regions_in_use;  /**< of those, referenced by a caller now */
	uint64_t pinned_bytes;    /**< bytes now registered */
	uint64_t peak_pinned_bytes; /**< highest pinned_bytes seen */
	uint64_t pages_registered;  /**< pages passed to registration, in total */
	uint64_t max_regions;     /**< the region limit in force */
	uint64_t max_bytes;       /**< the byte limit in force */
	/** growth requests: gets that extend a cached region, buffer
	 *  capacity changes */
	uint64_t grows;
	/** ibv_rereg_mr() calls on regions (the probe not included) */
	uint64_t rereg_attempts;
	/** of which succeeded (including IBV_REREG_MR_ERR_DO_FORK_OLD) */
	uint64_t rereg_successes;
	/** not rereg'd: the device cannot (probed, or it said EOPNOTSUPP or
	 *  ENOSYS) */
	uint64_t rereg_fallback_unsupported;
	/** not rereg'd: held by a caller (make-before-break instead) */
	uint64_t rereg_fallback_in_use;
	/** not rereg'd: a shared, peer-memory or dma-buf MR */
	uint64_t rereg_fallback_shared;
	/** rereg failed with the old MR still valid (ERR_INPUT,
	 *  ERR_DONT_FORK_NEW): registered anew, old one released */
	uint64_t rereg_fallback_input;
	/** rereg failed leaving an unusable MR (ERR_CMD,
	 *  ERR_CMD_AND_DO_FORK_NEW): deregistered, registered anew */
	uint64_t rereg_fallback_cmd;
	/** rereg done but the old range's fork state not restored
	 *  (ERR_DO_FORK_OLD) */
	uint64_t rereg_fork_errors;
	/** scratch-MR probes of the device's rereg support */
	uint64_t rereg_probes;
	/** regions replaced while in use: the new one published, the old
	 *  one deregistered at its last put */
	uint64_t make_before_break;
	/** bytes registered beyond growth requests by the headroom policy */
	uint64_t headroom_bytes;
};

/**
 * Copy the cache's statistics.
 *
 * @param cache  the cache.
 * @param stats  receives at most @p size bytes of struct mrmgr_stats.
 * @param size   @c sizeof(struct mrmgr_stats) as the caller was built.
 * @return 0, or @c EINVAL for NULL pointers or a size of 0.
 */
MRMGR_EXPORT int mrmgr_cache_query_stats(mrmgr_cache_t *cache,
					 struct mrmgr_stats *stats,
					 size_t size);

/** The library's version, e.g. "1.0.0". */
MRMGR_EXPORT const char *mrmgr_version_string(void);

/** Log levels, most severe first. */
enum mrmgr_log_level {
	MRMGR_LOG_ERROR = 0, /**< an operation failed */
	MRMGR_LOG_WARN = 1,  /**< something the user should know (default) */
	MRMGR_LOG_INFO = 2,  /**< decisions: fallbacks, limits */
	MRMGR_LOG_DEBUG = 3, /**< every registration */
};

/**
 * Where log lines go. Called with the lock-free formatting of one line;
 * must not call back into libmrmgr.
 */
typedef void (*mrmgr_log_fn)(enum mrmgr_log_level level, const char *msg,
			     void *arg);

/**
 * Route log lines at or above @p max_level to @p fn (NULL restores the
 * default: standard error, at the level given by @c MRMGR_LOG_LEVEL,
 * default warn). Process-wide.
 */
MRMGR_EXPORT void mrmgr_set_log_handler(mrmgr_log_fn fn, void *arg,
					enum mrmgr_log_level max_level);

#ifdef __cplusplus
}
#endif

#endif /* MRMGR_MRMGR_H */
