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
 * @par Memory events: the guarantee
 * @anchor monitor
 * After a call that unmaps, remaps or discards memory returns (munmap(),
 * mremap() moving or shrinking, mmap(MAP_FIXED) over it,
 * madvise(MADV_DONTNEED, MADV_REMOVE or MADV_FREE), brk()/sbrk()
 * shrinking, shmdt(), glibc free() of an mmap'd chunk or a heap trim, and
 * the same operations issued with raw syscall()), no later mrmgr_get()
 * from a thread that observes that return (the same thread, or one
 * synchronised with it) returns a region whose pages are not the pages
 * mapped now. Regions in use at that moment are detached and deregistered
 * at their last mrmgr_put(); their holders' later accesses are their own
 * business, but the cache never hands them out again.
 * The cache learns of such changes from a memory-event source (enum
 * mrmgr_monitor_mode): userfaultfd, libmrmgr_hooks.so, or the caller
 * through mrmgr_notify_unmap() and mrmgr_invalidate(). Memory that no
 * active source can watch (shared mappings, SysV shared memory, device
 * memory, or everything when no source works in this process) is not
 * cached. mrmgr_cache_query_monitor() tells which source is active and
 * what it covered. Out of the guarantee: a thread that maps new memory at
 * an address while another thread's unmapping call has not yet returned,
 * and ::MRMGR_MONITOR_NONE.
 *
 * @par fork()
 * A child never uses its parent's cached regions: at fork() every cache
 * in the child forgets them (without deregistering: they belong to the
 * parent) and starts empty. Where the parent's registrations do not
 * survive the fork (ibv_is_fork_initialized() returns
 * @c IBV_FORK_DISABLED, and the simulated HCA, which holds pages the way
 * pre-5.9 kernels did), the parent's caches are purged too.
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

/** Bits of mrmgr_cache_attr::comp_mask: which fields are valid. */
enum mrmgr_cache_attr_mask {
	/** mrmgr_cache_attr::max_regions is set. */
	MRMGR_CACHE_ATTR_MAX_REGIONS = 1u << 0,
	/** mrmgr_cache_attr::max_bytes is set. */
	MRMGR_CACHE_ATTR_MAX_BYTES = 1u << 1,
	/** mrmgr_cache_attr::flags is set. */
	MRMGR_CACHE_ATTR_FLAGS = 1u << 2,
	/** mrmgr_cache_attr::monitor is set. */
	MRMGR_CACHE_ATTR_MONITOR = 1u << 3,
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
};

/**
 * How a cache learns that memory under its registrations changed (see
 * @ref monitor "the memory-event monitor" and doc/monitor.md).
 */
enum mrmgr_monitor_mode {
	/**
	 * The default: userfaultfd where the kernel allows it, else
	 * libmrmgr_hooks.so when it is loaded. Regions that no active source
	 * can watch are not cached: registered on get, deregistered at the
	 * last put.
	 */
	MRMGR_MONITOR_AUTO = 0,
	/** userfaultfd only; what it cannot watch is not cached. */
	MRMGR_MONITOR_UFFD = 1,
	/** libmrmgr_hooks.so only; what it cannot watch is not cached. */
	MRMGR_MONITOR_HOOKS = 2,
	/**
	 * No automatic source: the caller promises to report every change
	 * with mrmgr_notify_unmap() or mrmgr_invalidate() (MPI stacks and
	 * allocators that already hook memory). Everything is cached.
	 */
	MRMGR_MONITOR_EXTERNAL = 3,
	/**
	 * No monitoring at all, everything cached: a stale registration can
	 * be handed out after memory is unmapped and mapped again. Logged as
	 * a warning; for measurements and for programs that never free
	 * registered memory.
	 */
	MRMGR_MONITOR_NONE = 4,
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
	 * enum mrmgr_monitor_mode (default ::MRMGR_MONITOR_AUTO). The
	 * @c MRMGR_MONITOR environment variable overrides it.
	 */
	uint32_t monitor;
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

/**
 * Report that @c [addr, addr+length) was unmapped, remapped or discarded,
 * to every cache in the process (the range is widened to pages).
 *
 * For MPI stacks, allocators and memory hooks that already see such
 * changes (and what libmrmgr_hooks.so calls). Call it after the change,
 * before the memory can be used again. Async-signal-safe: it allocates
 * nothing, takes no lock and logs nothing, so it may be called from
 * inside malloc(), a memory hook or a signal handler. Events go through a
 * bounded lock-free queue; caches apply them at their next mrmgr_get()
 * that misses the fast path. When the queue overflows, the caches that
 * fell behind invalidate everything they hold.
 *
 * @return 0, or @c EINVAL for zero length or a range that wraps around
 *         (no log line: see above).
 */
MRMGR_EXPORT int mrmgr_notify_unmap(void *addr, size_t length);

/** Bits of mrmgr_monitor_info::sources. */
enum mrmgr_monitor_source {
	MRMGR_MONITOR_SRC_UFFD = 1u << 0,     /**< userfaultfd is running */
	MRMGR_MONITOR_SRC_HOOKS = 1u << 1,    /**< libmrmgr_hooks.so passed its self-test */
	MRMGR_MONITOR_SRC_EXTERNAL = 1u << 2, /**< the cache trusts mrmgr_notify_unmap() */
};

/** Bits of mrmgr_monitor_info::uffd_flags. */
enum mrmgr_monitor_uffd_flags {
	/** Opened with UFFD_USER_MODE_ONLY (unprivileged process). */
	MRMGR_MONITOR_UFFD_USER_MODE_ONLY = 1u << 0,
	/** Opened through /dev/userfaultfd (the system call was refused). */
	MRMGR_MONITOR_UFFD_DEVICE = 1u << 1,
	/** Ranges are queried with PROCMAP_QUERY (Linux 6.11), not /proc/self/maps. */
	MRMGR_MONITOR_UFFD_PROCMAP_QUERY = 1u << 2,
};

/**
 * What watches a cache's memory, and what it did. Fields are only ever
 * added at the end; pass @c sizeof(struct mrmgr_monitor_info) as you know
 * it. "Process" fields are shared by every cache of the process.
 */
struct mrmgr_monitor_info {
	uint32_t mode;            /**< enum mrmgr_monitor_mode in force for this cache */
	uint32_t sources;         /**< enum mrmgr_monitor_source bits that cover this cache now */
	int32_t uffd_error;       /**< process: why userfaultfd is not running (errno), 0 when it is or was not tried */
	int32_t hooks_error;      /**< process: why the hooks are not used (errno; ENOENT: not loaded), 0 when they are */
	uint32_t uffd_flags;      /**< process: enum mrmgr_monitor_uffd_flags */
	int32_t fork_status;      /**< ibv_is_fork_initialized() for this cache (-1: simulated HCA) */
	uint64_t uffd_features;   /**< process: UFFD_FEATURE_* bits negotiated */
	uint64_t uffd_events;     /**< process: unmap/remove/remap events read from the kernel */
	uint64_t notify_events;   /**< process: mrmgr_notify_unmap() calls that reached the queue */
	uint64_t watched_ranges;  /**< process: ranges registered with userfaultfd now */
	uint64_t watched_runs;    /**< process: disjoint runs of those (each may split a VMA in three) */
	uint64_t watch_budget;    /**< process: most runs allowed (from vm.max_map_count) */
	uint64_t events;          /**< events this cache applied */
	uint64_t invalidations;   /**< regions this cache invalidated because of events */
	uint64_t overflows;       /**< times this cache fell behind the queue and invalidated everything */
	uint64_t unwatched;       /**< gets served uncached because no source could watch the range */
	uint64_t fork_purges;     /**< times a fork() purged this cache (in this process) */
};

/**
 * Report which memory-event sources cover a cache and what they did.
 *
 * @param cache  the cache.
 * @param info   receives at most @p size bytes of struct mrmgr_monitor_info.
 * @param size   @c sizeof(struct mrmgr_monitor_info) as the caller was built.
 * @return 0, or @c EINVAL for NULL pointers or a size of 0.
 */
MRMGR_EXPORT int mrmgr_cache_query_monitor(mrmgr_cache_t *cache,
					   struct mrmgr_monitor_info *info,
					   size_t size);

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
