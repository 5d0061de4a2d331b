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
	/**
	 * mrmgr_cache_attr::odp_mode, @c odp_flags, @c odp_transports and
	 * @c odp_ops are set (on-demand paging, see enum mrmgr_odp_mode).
	 */
	MRMGR_CACHE_ATTR_ODP = 1u << 3,
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
	/**
	 * enum mrmgr_odp_mode the cache should use (default ::MRMGR_ODP_OFF).
	 * What it got, and why, is reported by mrmgr_cache_query_odp().
	 */
	uint32_t odp_mode;
	/** Bits of enum mrmgr_odp_flags. */
	uint32_t odp_flags;
	/**
	 * Bits of enum mrmgr_odp_transport: the QP types ODP memory of this
	 * cache will be used with. 0 means ::MRMGR_ODP_TRANSPORT_RC.
	 */
	uint32_t odp_transports;
	/**
	 * @c IBV_ODP_SUPPORT_SEND, @c _RECV, @c _WRITE, @c _READ, @c _ATOMIC,
	 * @c _SRQ_RECV bits (enum ibv_odp_transport_cap_bits) each of those
	 * transports must support on ODP memory. 0 means SEND | RECV | WRITE |
	 * READ.
	 */
	uint32_t odp_ops;
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

/** Bits of mrmgr_get_ex()'s @c flags. */
enum mrmgr_get_flags {
	/**
	 * When the region is an ODP region (see enum mrmgr_odp_mode), issue
	 * an asynchronous prefetch hint (@c IBV_ADVISE_MR_ADVICE_PREFETCH, or
	 * @c _PREFETCH_WRITE when @c access has a write bit) for the
	 * requested range, so the first RDMA access does not page-fault. The
	 * hint costs one system call; its failure does not fail the get (it
	 * is counted and logged). Ignored for pinned regions.
	 */
	MRMGR_GET_PREFETCH = 1u << 0,
	/** No hint, even when the cache's ::MRMGR_ODP_AUTO_PREFETCH asks for one. */
	MRMGR_GET_NO_PREFETCH = 1u << 1,
};

/**
 * mrmgr_get() with per-call @p flags (bits of enum mrmgr_get_flags).
 * mrmgr_get() is mrmgr_get_ex() with @p flags 0, which follows the cache's
 * ::MRMGR_ODP_AUTO_PREFETCH policy.
 *
 * @return as mrmgr_get(); @c EINVAL also for unknown @p flags bits or
 *         both ::MRMGR_GET_PREFETCH and ::MRMGR_GET_NO_PREFETCH.
 */
MRMGR_EXPORT int mrmgr_get_ex(mrmgr_cache_t *cache, void *addr, size_t length,
			      unsigned int access, uint64_t flags,
			      mrmgr_region_t **region);

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
	/* Added with on-demand paging. */
	uint64_t prefetch_calls;    /**< prefetch requests: mrmgr_prefetch(), mrmgr_region_prefetch(), automatic hints */
	uint64_t prefetch_sges;     /**< SGEs in ibv_advise_mr() calls the device accepted */
	uint64_t prefetch_batches;  /**< ibv_advise_mr() calls issued (EAGAIN retries not counted) */
	uint64_t prefetch_noops;    /**< requests that did nothing and succeeded: no ODP memory in range, or the device lacks the advice */
	uint64_t prefetch_failures; /**< requests that failed (the error was returned or, for hints, logged) */
	uint64_t prefetch_retries;  /**< ibv_advise_mr() calls repeated after @c EAGAIN */
	uint64_t odp_bytes;         /**< bytes of explicit ODP regions now registered (not in pinned_bytes, not held against max_bytes) */
	uint64_t implicit_views;    /**< implicit-mode regions made without a registration, in total */
	/* Added with growth and re-registration. */
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

/**
 * @name On-demand paging (ODP)
 *
 * An ODP memory region is not pinned: the HCA faults pages in when it
 * first touches them and the kernel keeps its translations in step with
 * the process's page tables, so an ODP registration is never stale and
 * costs no memlock. The price is a page fault on the HCA's first access,
 * which prefetch hints (mrmgr_prefetch()) avoid. See doc/odp.md.
 *
 * Rules a user must know:
 *  - ODP needs device support (ibv_query_device_ex() @c odp_caps); the
 *    cache probes it at creation and falls back (or fails with
 *    @c EOPNOTSUPP under ::MRMGR_ODP_STRICT); mrmgr_cache_query_odp()
 *    says what it decided and why;
 *  - in an ODP mode, a get asking for write access to memory that is not
 *    mapped writable (or a range not mapped at all) fails with @c EFAULT
 *    and a log line, because the device would only fail later, at fault
 *    time, with the QP in error. The check reads /proc/self/maps on a
 *    miss only, never on a hit;
 *  - mrmgr_invalidate() is still needed: it drops regions whose memory is
 *    gone, so protections are checked again on the next get;
 *  - the implicit MR's rkey opens the whole address space to whoever
 *    holds it (up to its access): hand it only to trusted peers, or use
 *    ::MRMGR_ODP_EXPLICIT.
 * @{
 */

/** ODP modes of a cache: mrmgr_cache_attr::odp_mode, @c MRMGR_ODP. */
enum mrmgr_odp_mode {
	/** Pinned registrations (no ODP). The default. */
	MRMGR_ODP_OFF = 0,
	/**
	 * Each region is its own MR registered with @c IBV_ACCESS_ON_DEMAND:
	 * nothing pinned, nothing counted against memlock or max_bytes;
	 * regions are still merged, evicted and invalidated as pinned ones.
	 */
	MRMGR_ODP_EXPLICIT = 1,
	/**
	 * One implicit ODP MR per cache covers the whole address space
	 * (ibv_reg_mr(pd, NULL, SIZE_MAX, ...|ON_DEMAND), registered at cache
	 * creation). mrmgr_get() returns a lightweight region (a "view")
	 * carrying that MR's keys for the requested range: no registration
	 * at all. mrmgr_region_mr() of a view is the implicit MR (its addr is
	 * NULL, its length SIZE_MAX); use mrmgr_region_addr()/_length() for
	 * the view's range. A get asking for access the implicit MR lacks
	 * (see mrmgr_odp_info::implicit_access) gets an explicit ODP region.
	 */
	MRMGR_ODP_IMPLICIT = 2,
	/** Implicit where supported for the transports asked for, else
	 *  explicit, else off. Never fails for lack of support. */
	MRMGR_ODP_AUTO = 3,
};

/** Bits of mrmgr_cache_attr::odp_flags. */
enum mrmgr_odp_flags {
	/**
	 * Fail mrmgr_cache_create() with @c EOPNOTSUPP when the device
	 * cannot give the requested ::MRMGR_ODP_EXPLICIT or
	 * ::MRMGR_ODP_IMPLICIT mode, instead of falling back to the next one
	 * with a log line. No effect on ::MRMGR_ODP_AUTO.
	 */
	MRMGR_ODP_STRICT = 1u << 0,
	/**
	 * Cache policy: every mrmgr_get() of an ODP region issues the
	 * asynchronous prefetch hint of ::MRMGR_GET_PREFETCH (one system call
	 * per get, hits included; opt out per call with
	 * ::MRMGR_GET_NO_PREFETCH).
	 */
	MRMGR_ODP_AUTO_PREFETCH = 1u << 1,
};

/** Bits of mrmgr_cache_attr::odp_transports. */
enum mrmgr_odp_transport {
	MRMGR_ODP_TRANSPORT_RC = 1u << 0,  /**< reliable connected */
	MRMGR_ODP_TRANSPORT_UC = 1u << 1,  /**< unreliable connected */
	MRMGR_ODP_TRANSPORT_UD = 1u << 2,  /**< unreliable datagram */
	MRMGR_ODP_TRANSPORT_XRC = 1u << 3, /**< extended reliable connected */
};

/** Why a cache's ODP mode is what it is: mrmgr_odp_info::reason. */
enum mrmgr_odp_reason {
	/** The requested mode (for ::MRMGR_ODP_AUTO: implicit, the best). */
	MRMGR_ODP_REASON_AS_REQUESTED = 0,
	/** The device does not report @c IBV_ODP_SUPPORT. */
	MRMGR_ODP_REASON_NO_ODP = 1,
	/** A transport asked for lacks one of the operations asked for. */
	MRMGR_ODP_REASON_TRANSPORT_CAPS = 2,
	/** The device does not report @c IBV_ODP_SUPPORT_IMPLICIT. */
	MRMGR_ODP_REASON_NO_IMPLICIT = 3,
	/** The device refused the implicit registration. */
	MRMGR_ODP_REASON_IMPLICIT_REG_FAILED = 4,
};

/**
 * What a cache decided about ODP, and the capabilities it decided from.
 * Fields are only ever added at the end; pass
 * @c sizeof(struct mrmgr_odp_info) as you know it.
 */
struct mrmgr_odp_info {
	uint32_t requested_mode;  /**< enum mrmgr_odp_mode asked for (attribute, then @c MRMGR_ODP) */
	uint32_t mode;            /**< effective: ::MRMGR_ODP_OFF, ::MRMGR_ODP_EXPLICIT or ::MRMGR_ODP_IMPLICIT */
	uint32_t reason;          /**< enum mrmgr_odp_reason */
	uint32_t flags;           /**< effective enum mrmgr_odp_flags */
	uint32_t transports;      /**< enum mrmgr_odp_transport bits checked */
	uint32_t ops;             /**< @c IBV_ODP_SUPPORT_* operation bits checked */
	uint64_t general_caps;    /**< device @c odp_caps.general_caps (@c IBV_ODP_SUPPORT, @c _IMPLICIT) */
	uint32_t rc_caps;         /**< device @c odp_caps.per_transport_caps.rc_odp_caps */
	uint32_t uc_caps;         /**< device @c uc_odp_caps */
	uint32_t ud_caps;         /**< device @c ud_odp_caps */
	uint32_t xrc_caps;        /**< device @c xrc_odp_caps */
	uint32_t max_sge;         /**< most SGEs per ibv_advise_mr() call (device @c max_sge) */
	uint32_t implicit_access; /**< @c ibv_access_flags of the implicit MR; 0 without one */
	uint32_t implicit_lkey;   /**< the implicit MR's lkey (0 without one) */
	uint32_t implicit_rkey;   /**< the implicit MR's rkey (0 without one) */
	char reason_text[160];    /**< the decision in one line, as logged */
};

/**
 * What the cache decided about ODP and why.
 *
 * @param cache  the cache.
 * @param info   receives at most @p size bytes of struct mrmgr_odp_info.
 * @param size   @c sizeof(struct mrmgr_odp_info) as the caller was built.
 * @return 0, or @c EINVAL for NULL pointers or a size of 0.
 */
MRMGR_EXPORT int mrmgr_cache_query_odp(mrmgr_cache_t *cache,
				       struct mrmgr_odp_info *info,
				       size_t size);

/** A byte range, for mrmgr_prefetch(). */
struct mrmgr_range {
	void *addr;    /**< start */
	size_t length; /**< bytes, at least 1 */
};

/** Bits of the prefetch calls' @c flags. */
enum mrmgr_prefetch_flags {
	/** @c IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE: make pages present writable. */
	MRMGR_PREFETCH_WRITE = 1u << 0,
	/** @c IBV_ADVISE_MR_ADVICE_PREFETCH: present read-only. Without
	 *  either bit the advice follows the regions' access: WRITE when
	 *  every region involved has @c IBV_ACCESS_LOCAL_WRITE. */
	MRMGR_PREFETCH_READ = 1u << 1,
	/** @c IBV_ADVISE_MR_FLAG_FLUSH: return when the translations are in
	 *  the device (synchronous); without it the hint is best effort. */
	MRMGR_PREFETCH_SYNC = 1u << 2,
};

/**
 * Hint the device to make the pages of @p ranges present in the cache's
 * ODP regions before RDMA touches them (ibv_advise_mr()).
 *
 * The SGE list is built from the cached ODP regions (in implicit mode: the
 * implicit MR, which covers every range); parts of a range no ODP region
 * covers are skipped. The regions are referenced while the call runs, so
 * a concurrent mrmgr_invalidate() cannot deregister them under it. SGEs go
 * to the device in batches of at most its @c max_sge; @c EAGAIN is retried
 * a few times.
 *
 * A prefetch never makes things worse: with no ODP memory in range (ODP
 * off, pinned regions, nothing cached) or on a device without the advice
 * (@c EOPNOTSUPP, @c ENOTSUP, @c ENOSYS: rxe, siw; learnt once per advice)
 * it does nothing and returns 0, counted in mrmgr_stats::prefetch_noops.
 *
 * @param cache   the cache.
 * @param ranges  @p n ranges (may be NULL when @p n is 0).
 * @param n       number of ranges.
 * @param flags   bits of enum mrmgr_prefetch_flags.
 * @return 0; @c EINVAL for bad arguments (NULL cache, zero-length or
 *         overflowing range, unknown flags, both READ and WRITE);
 *         @c ENOMEM; or the device's error, with a log line: @c EFAULT
 *         (range out of an MR's bounds or not mapped, bad lkey),
 *         @c EINVAL (bad PD or flags), @c EPERM (WRITE on a region
 *         without write access), @c ENOENT, @c ENOMEM, @c EAGAIN (after
 *         the retries). Batches sent before an error stay sent.
 */
MRMGR_EXPORT int mrmgr_prefetch(mrmgr_cache_t *cache,
				const struct mrmgr_range *ranges, size_t n,
				unsigned int flags);

/**
 * mrmgr_prefetch() for a part of one region the caller holds.
 *
 * @param region  a region from mrmgr_get(), not yet put.
 * @param addr    start of the part, or NULL with @p length 0 for the whole
 *                region.
 * @param length  bytes; the part must lie inside the region.
 * @param flags   bits of enum mrmgr_prefetch_flags; without READ/WRITE
 *                the advice follows the region's access.
 * @return as mrmgr_prefetch(); 0 (a counted no-op) for a pinned region;
 *         @c EINVAL for a part outside the region.
 */
MRMGR_EXPORT int mrmgr_region_prefetch(mrmgr_region_t *region, void *addr,
				       size_t length, unsigned int flags);

/** @} */

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
