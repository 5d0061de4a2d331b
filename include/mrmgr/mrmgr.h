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
 * make no system call. A miss registers with the cache's lock released,
 * so other threads' misses, puts and invalidations go ahead, once a
 * second thread has taken that lock; while only one thread uses the
 * cache's lock, a miss keeps it (nobody could go ahead), and the first
 * call from another thread that needs it may wait for the one
 * registration under way.
 *
 * @par Memory events: the guarantee
 * @anchor monitor
 * A mrmgr_get() of memory returns a registration of the pages mapped
 * there now whenever the calling thread obtained that memory (a mapping
 * call, malloc(), a message from another thread) after the old pages were
 * unmapped, discarded or remapped (munmap(), mremap() moving or shrinking,
 * mmap(MAP_FIXED) or shmat(SHM_REMAP) over it, madvise(MADV_DONTNEED,
 * MADV_REMOVE, MADV_FREE), even one that failed half way, brk()/sbrk()
 * shrinking, shmdt(), glibc free()/realloc() of an mmap'd chunk, heap
 * trims and arena deletions) -- whether or not the unmapping thread's own
 * call has returned yet. Regions in use at that moment are detached and
 * deregistered at their last mrmgr_put(); their holders' later accesses
 * are their own business, but the cache never hands them out again.
 * The cache learns of such changes from a memory-event source (enum
 * mrmgr_monitor_mode): by default libc's own entry points, patched in the
 * process so glibc's internal calls arrive too, which report each change
 * before the kernel releases the pages and after the call; optionally
 * libmrmgr_hooks.so or userfaultfd; or the caller through
 * mrmgr_notify_unmap() and mrmgr_invalidate(). Memory that no active
 * source can watch (shared mappings, SysV shared memory, private file
 * mappings, device memory, or everything when no source works in this
 * process) is not cached, and each such cause is logged once as a
 * warning. mrmgr_cache_query_monitor() tells which source is active,
 * what it covered and why a get was not cached.
 * Out of the guarantee: a program that uses memory while it frees it (a
 * get racing with the change of the same memory, by a thread that did not
 * obtain the memory after the change, may return either registration);
 * changes the source in force cannot see (raw syscall() bypasses the
 * patched libc and the hooks; userfaultfd reports an unmap only after the
 * kernel freed the address, and the kernel sends it no event at all for
 * shmat(SHM_REMAP) or madvise(MADV_GUARD_INSTALL) over watched memory, so
 * ::MRMGR_MONITOR_UFFD, and ::MRMGR_MONITOR_AUTO under a sanitizer, do
 * not follow those two); ::MRMGR_MONITOR_NONE; and, with
 * ::MRMGR_MONITOR_EXTERNAL, changes the program does not report. Which
 * change each mode follows: the table in doc/monitor.md ("What each mode
 * follows"), each cell a test of tests/unit/test_monitor_modes.c.
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
	/** mrmgr_cache_attr::monitor is set. */
	MRMGR_CACHE_ATTR_MONITOR = 1u << 4,
	/** mrmgr_cache_attr::region_gone and @c region_gone_arg are set. */
	MRMGR_CACHE_ATTR_REGION_GONE = 1u << 5,
	/**
	 * mrmgr_cache_attr::pds and @c npds are set: the cache serves
	 * several protection domains.
	 */
	MRMGR_CACHE_ATTR_PDS = 1u << 6,
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
	 * exactly the grown span instead of twice it (within its mapping).
	 * See doc/growth.md.
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
	/**
	 * Check every mrmgr_put(): a put of a region nobody holds (a double
	 * put, a put after the region was released) is refused with an
	 * error log line naming the region and counted in
	 * mrmgr_stats::double_puts, instead of being noticed later. Each put
	 * takes the cache lock. Also set by @c MRMGR_CHECK=1. Without it,
	 * extra puts are still detected (and undone) the first time the
	 * cache adds a region's references up: eviction, invalidation,
	 * statistics, destroy.
	 */
	MRMGR_CACHE_CHECK = 1u << 4,
	/**
	 * Check every hit for a stale registration: each mrmgr_get() that
	 * finds a cached region compares the pages mapped now under the
	 * request with the ones recorded right after the region was
	 * registered (page frames from /proc/self/pagemap where the
	 * process may read them, CAP_SYS_ADMIN; otherwise presence and the
	 * mapping's identity only, said once at creation). The first stale
	 * hit is reported at error level with the region's history and the
	 * monitor's last events; every one is counted in
	 * mrmgr_stats::stale_hits, and the get is answered with a fresh
	 * registration. For proving a program's memory events are followed:
	 * every get reads pagemap (doc/environment.md, MRMGR_CHECK, gives
	 * the cost). Also set by @c MRMGR_CHECK=stale. Not for caches of
	 * several PDs (::MRMGR_CACHE_ATTR_PDS), where it is ignored with a
	 * warning.
	 */
	MRMGR_CACHE_CHECK_STALE = 1u << 5,
};

/**
 * How a cache learns that memory under its registrations changed (see
 * @ref monitor "the memory-event monitor" and doc/monitor.md).
 */
enum mrmgr_monitor_mode {
	/**
	 * The default: libc's memory entry points patched in the process
	 * (the source of ::MRMGR_MONITOR_PATCH, after its self-test),
	 * which see both sides of every change; under a sanitizer (ASan,
	 * TSan, MSan, HWASan, LSan, DFSan: its allocator maps and unmaps
	 * with raw system calls) with the sanitizer allocator's malloc/free
	 * hooks beside them (::MRMGR_MONITOR_SRC_SANITIZER); where patching
	 * cannot run (valgrind, an unknown prologue), libmrmgr_hooks.so
	 * when it is loaded; else, under a sanitizer whose allocator cannot
	 * be followed, userfaultfd with the limits of ::MRMGR_MONITOR_UFFD
	 * (a warning); else nothing is cached (with a warning).
	 * Growth headroom is on. Regions that no active source can watch are
	 * not cached: registered on get, deregistered at the last put.
	 */
	MRMGR_MONITOR_AUTO = 0,
	/**
	 * userfaultfd only, opt-in: it sees raw syscall() too, but only one
	 * side of a change (an unmap after the address is free again), and
	 * its registration stops a watched VMA from merging with memory
	 * mapped next to it, so the program's own mremap() of an extended
	 * buffer can fail (EFAULT). Growth headroom is off under it. What it
	 * cannot watch is not cached. Not followed: shmat(SHM_REMAP) and
	 * madvise(MADV_GUARD_INSTALL) over cached memory (the kernel sends
	 * userfaultfd no event for either).
	 */
	MRMGR_MONITOR_UFFD = 1,
	/** libmrmgr_hooks.so only; what it cannot watch is not cached. */
	MRMGR_MONITOR_HOOKS = 2,
	/**
	 * No automatic source: the caller promises to report every change
	 * with mrmgr_notify_unmap() or mrmgr_invalidate() (MPI stacks and
	 * allocators that already hook memory). Everything is cached. With
	 * growth headroom on (the default), a region may reach past the
	 * requested bytes to the end of the mapping that holds them: report
	 * changes to every mapping you passed to mrmgr_get(), not only to the
	 * bytes you asked for, or turn headroom off
	 * (::MRMGR_CACHE_NO_HEADROOM).
	 */
	MRMGR_MONITOR_EXTERNAL = 3,
	/**
	 * No monitoring at all, everything cached: a stale registration can
	 * be handed out after memory is unmapped and mapped again. Logged as
	 * a warning; for measurements and for programs that never free
	 * registered memory.
	 */
	MRMGR_MONITOR_NONE = 4,
	/**
	 * libc's own munmap, mremap, madvise, mmap, brk, shmat and shmdt
	 * redirected in the running process (no LD_PRELOAD, no change to
	 * the program), so glibc's internal calls from free() and heap
	 * trimming arrive too, before the kernel releases the pages. Used
	 * only after a self-test; under valgrind, sanitizers or an
	 * unexpected libc, libc is left alone (one warning) and what no
	 * source watches is not cached. ::MRMGR_MONITOR_AUTO uses it too.
	 */
	MRMGR_MONITOR_PATCH = 5,
};

/**
 * Why a region left its cache: the @c reason of
 * mrmgr_cache_attr::region_gone.
 */
enum mrmgr_region_gone_reason {
	/**
	 * Its memory changed: mrmgr_invalidate(), a memory event
	 * (unmap, remap, discard; see @ref monitor), mrmgr_notify_unmap(),
	 * or a fork() that purged the cache.
	 */
	MRMGR_REGION_GONE_INVALIDATED = 1,
	/** Evicted to keep the cache within its limits (LRU), or to retry a
	 * registration that failed for want of memory. */
	MRMGR_REGION_GONE_EVICTED = 2,
	/**
	 * Replaced by another registration covering its range: merged into
	 * a larger region, grown by make-before-break or dereg + reg, or
	 * moved to another PD (mrmgr_cache_move_pd()).
	 */
	MRMGR_REGION_GONE_REPLACED = 3,
	/** The cache was destroyed (mrmgr_cache_destroy()). */
	MRMGR_REGION_GONE_DESTROYED = 4,
	/**
	 * It was never cached (handed out uncached: caching off, memory no
	 * monitor can watch, or the limits full of regions in use) and its
	 * last holder put it.
	 */
	MRMGR_REGION_GONE_UNCACHED = 5,
};

/**
 * Called once per region a get handed out, just before its registration
 * ends (the MR is deregistered and its keys stop being valid), with the
 * enum mrmgr_region_gone_reason it left the cache for. See
 * mrmgr_cache_attr::region_gone for the threading rules.
 *
 * @param region  the region: every mrmgr_region_*() accessor works on it
 *                during the call, mrmgr_region_user_data() included; the
 *                handle means nothing after the call returns.
 * @param reason  enum mrmgr_region_gone_reason.
 * @param arg     mrmgr_cache_attr::region_gone_arg.
 */
typedef void (*mrmgr_region_gone_fn)(mrmgr_region_t *region,
				     unsigned int reason, void *arg);

/**
 * Attributes of a cache. Zero-initialise, set the fields you want and
 * their bits in @c comp_mask.
 *
 * A field whose bit is set is the program's decision; an @c MRMGR_*
 * environment variable only fills what the program left unset (a limit
 * whose bit is set but whose value is 0 counts as unset). The one
 * exception is @c MRMGR_CACHE=0, which turns caching off whatever the
 * program set. See mrmgr-env(7) and doc/environment.md.
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
	 * Most bytes kept registered (pinned). 0 means the default, from
	 * what the process may pin: the @c RLIMIT_MEMLOCK soft limit; half
	 * of physical memory with @c CAP_IPC_LOCK or an unlimited rlimit;
	 * capped at the device's @c max_mr_size (doc/environment.md).
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
	/**
	 * enum mrmgr_monitor_mode (default ::MRMGR_MONITOR_AUTO). The
	 * @c MRMGR_MONITOR environment variable applies only when this is
	 * not set.
	 */
	uint32_t monitor;
	/**
	 * Called once for every region of this cache, just before its
	 * registration ends: at once when an idle region is evicted,
	 * invalidated, replaced or destroyed with its cache; at its last
	 * mrmgr_put() when it was held then (its holders keep valid keys
	 * until that put). Its user data (mrmgr_region_user_data()) is still
	 * readable: the place to free what the program derived from the
	 * region, or tell peers its rkey is gone. (An exported region's MR
	 * may outlive the call until its importers let go; see
	 * mrmgr_region_export().) Not called when a region is re-registered
	 * in place by growth (it stays, with its user data;
	 * mrmgr_region_generation() changes and the keys may). The regions
	 * behind growable buffers (mrmgr_buf_create()) are reported too,
	 * with whatever user data they carry (NULL unless set).
	 *
	 * Threading: it runs on the thread whose call ended the region
	 * (mrmgr_get() or mrmgr_get_ex() evicting, merging
	 * or applying memory events; mrmgr_put() of the last holder;
	 * mrmgr_invalidate(); mrmgr_cache_destroy(); mrmgr_cache_move_pd();
	 * mrmgr_buf_*() on the same cache; fork(), in the parent, when the
	 * device needs the cache purged), never on a thread of the library,
	 * and with the cache's lock held. So it must be short and must not
	 * call any function on the same cache or its regions except the
	 * mrmgr_region_*() accessors of the region it is given (mrmgr_get(),
	 * mrmgr_put(), mrmgr_invalidate(), ... would deadlock); it may use
	 * other caches and take its own locks, if no thread holding those
	 * calls into this cache. The hit path never calls it, and a put
	 * calls it only when it drops the last reference of a region that
	 * already left the cache. Requires ::MRMGR_CACHE_ATTR_REGION_GONE.
	 */
	mrmgr_region_gone_fn region_gone;
	/** Passed to @c region_gone as its @c arg. */
	void *region_gone_arg;
	/**
	 * The protection domains a multi-PD cache serves: @c npds distinct
	 * PDs, of one device or of several devices of the same kind (all
	 * verbs, or all of one device provider); they must outlive the
	 * cache. The array is copied. Requires ::MRMGR_CACHE_ATTR_PDS.
	 *
	 * A region of such a cache is one address range with one MR per PD,
	 * registered lazily: mrmgr_get_ex() with mrmgr_get_attr::pd registers
	 * the region in that PD the first time that PD asks for it;
	 * mrmgr_get() asks for @c pds[0], the cache's first PD, which the
	 * plain accessors (mrmgr_region_mr(), _lkey, _rkey) report;
	 * mrmgr_region_mr_pd() reads the others. mrmgr_cache_create()'s
	 * @c pd must be NULL or @c pds[0]. Invalidation (mrmgr_invalidate())
	 * drops the range in every PD at once; eviction evicts a region with
	 * all its MRs; the limits count every MR (@c max_regions counts MRs,
	 * @c max_bytes counts each registration's bytes). A cache of several
	 * PDs registers pinned memory (ODP is turned off, with a log line;
	 * with ::MRMGR_ODP_STRICT an ODP request fails with @c EOPNOTSUPP),
	 * never re-registers in place, and cannot be moved
	 * (mrmgr_cache_move_pd() fails with @c EINVAL).
	 */
	struct ibv_pd *const *pds;
	/** How many PDs @c pds holds: 1 to 64. Requires ::MRMGR_CACHE_ATTR_PDS. */
	size_t npds;
};

/**
 * Create a registration cache for a protection domain.
 *
 * The PD may come from libibverbs (ibv_alloc_pd()) or from a device
 * provider registered with mrmgr_device_register() (mrmgr/device.h; the
 * simulated HCA of libmrmgr-sim is one); the cache uses the provider that
 * claims the PD's context, libibverbs when none does.
 *
 * With ::MRMGR_CACHE_ATTR_PDS the cache serves every PD of
 * mrmgr_cache_attr::pds, one MR per PD.
 *
 * @param pd     protection domain every region is registered in; with
 *               ::MRMGR_CACHE_ATTR_PDS, NULL or @c attr->pds[0].
 * @param attr   attributes, or NULL for the defaults.
 * @param cache  receives the new cache.
 * @return 0, @c EINVAL (NULL @p pd or @p cache, unknown @c comp_mask or
 *         flag bits; with ::MRMGR_CACHE_ATTR_PDS: NULL or repeated PDs,
 *         @c npds out of range, PDs of different backends, @p pd not
 *         @c pds[0]), @c EOPNOTSUPP (::MRMGR_ODP_STRICT with several
 *         PDs), @c ENOMEM, or the errno of the device query.
 */
MRMGR_EXPORT int mrmgr_cache_create(struct ibv_pd *pd,
				    const struct mrmgr_cache_attr *attr,
				    mrmgr_cache_t **cache);

/**
 * Destroy a cache and deregister every region it holds.
 *
 * @param cache  the cache (NULL: @c EINVAL).
 * @return 0, @c EINVAL for NULL, or @c EBUSY when regions are still held by
 *         callers (nothing is destroyed then; a log line says how many).
 */
MRMGR_EXPORT int mrmgr_cache_destroy(mrmgr_cache_t *cache);

/** Bits of mrmgr_cache_destroy_ex()'s @c flags. */
enum mrmgr_destroy_flags {
	/**
	 * Revoke every export of the cache's regions first (see
	 * mrmgr_region_export()): their pins are dropped, so exported MRs
	 * are deregistered even while importers still use them (their
	 * operations then fail; nothing else is touched), and the exports
	 * report mrmgr_export_revoked(). Aliases (mrmgr_region_alias()) are
	 * deregistered too and report mrmgr_alias_revoked(); their mappings
	 * stay until mrmgr_alias_destroy(). Regions held by mrmgr_get()
	 * callers cannot be forced: the call still fails with @c EBUSY for
	 * them.
	 */
	MRMGR_DESTROY_FORCE = 1u << 0,
};

/**
 * mrmgr_cache_destroy() with @p flags (bits of enum mrmgr_destroy_flags).
 *
 * Without ::MRMGR_DESTROY_FORCE a cache whose regions are exported,
 * aliased (or held) is not destroyed: @c EBUSY, with a log line per
 * share-set member that keeps it busy (which region, which export, how
 * many importers, which alias).
 *
 * @param cache  the cache.
 * @param flags  bits of enum mrmgr_destroy_flags, or 0.
 * @return 0, @c EINVAL (NULL cache, unknown flags) or @c EBUSY.
 */
MRMGR_EXPORT int mrmgr_cache_destroy_ex(mrmgr_cache_t *cache, uint64_t flags);

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
 * their put). A grown region is given headroom: it is registered at twice
 * the grown span, within its mapping and short of the next cached region
 * (see ::MRMGR_CACHE_NO_HEADROOM).
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

/** Bits of mrmgr_get_attr::flags. */
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

/** Bits of mrmgr_get_attr::comp_mask: which fields are valid. */
enum mrmgr_get_attr_mask {
	/** mrmgr_get_attr::flags is set. */
	MRMGR_GET_ATTR_FLAGS = 1u << 0,
	/** mrmgr_get_attr::pd is set. */
	MRMGR_GET_ATTR_PD = 1u << 1,
};

/**
 * Per-call attributes of mrmgr_get_ex(). Zero-initialise, set the fields
 * you want and their bits in @c comp_mask.
 */
struct mrmgr_get_attr {
	/** Which fields below are valid: bits of enum mrmgr_get_attr_mask. */
	uint64_t comp_mask;
	/**
	 * Bits of enum mrmgr_get_flags (0: follow the cache's
	 * ::MRMGR_ODP_AUTO_PREFETCH policy). Requires ::MRMGR_GET_ATTR_FLAGS.
	 */
	uint64_t flags;
	/**
	 * The PD the region must have an MR in: one of the cache's PDs (a
	 * multi-PD cache, see mrmgr_cache_attr::pds, registers the region in
	 * it the first time it is asked for there; read the MR with
	 * mrmgr_region_mr_pd()). On a single-PD cache it must be the
	 * cache's PD; not NULL (without ::MRMGR_GET_ATTR_PD the get is for
	 * the cache's first PD). A hit whose region already has an MR in
	 * @c pd takes no lock, as mrmgr_get(). Requires ::MRMGR_GET_ATTR_PD.
	 */
	struct ibv_pd *pd;
};

/**
 * mrmgr_get() with per-call attributes: flags (bits of enum
 * mrmgr_get_flags) and the PD to register in. mrmgr_get() is
 * mrmgr_get_ex() with @p attr NULL: no flags (the cache's
 * ::MRMGR_ODP_AUTO_PREFETCH policy), the cache's first PD.
 *
 * @param cache   as mrmgr_get().
 * @param addr    as mrmgr_get().
 * @param length  as mrmgr_get().
 * @param access  as mrmgr_get().
 * @param attr    attributes, or NULL for the defaults.
 * @param region  receives the region.
 * @return as mrmgr_get(); @c EINVAL also for unknown @c comp_mask or
 *         flag bits, both ::MRMGR_GET_PREFETCH and
 *         ::MRMGR_GET_NO_PREFETCH, or a NULL PD or one the cache does
 *         not serve.
 */
MRMGR_EXPORT int mrmgr_get_ex(mrmgr_cache_t *cache, void *addr, size_t length,
			      unsigned int access,
			      const struct mrmgr_get_attr *attr,
			      mrmgr_region_t **region);

/**
 * Drop a reference taken by mrmgr_get(). The region stays cached for later
 * hits unless it was invalidated, evicted while in use by a merge, or the
 * cache does not cache it (then it is deregistered now). NULL is ignored.
 * @param region  a region from mrmgr_get(), or NULL.
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
 * @param cache   the cache.
 * @param addr    start of the range (widened to pages).
 * @param length  bytes, at least 1.
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
 * @param addr    start of the range that changed.
 * @param length  its length in bytes, at least 1.
 * @return 0, or @c EINVAL for zero length or a range that wraps around
 *         (no log line: see above).
 */
MRMGR_EXPORT int mrmgr_notify_unmap(void *addr, size_t length);

/** Bits of mrmgr_monitor_info::sources. */
enum mrmgr_monitor_source {
	MRMGR_MONITOR_SRC_UFFD = 1u << 0,     /**< userfaultfd is running */
	MRMGR_MONITOR_SRC_HOOKS = 1u << 1,    /**< libmrmgr_hooks.so passed its self-test */
	MRMGR_MONITOR_SRC_EXTERNAL = 1u << 2, /**< the cache trusts mrmgr_notify_unmap() */
	MRMGR_MONITOR_SRC_PATCH = 1u << 3,    /**< libc's entry points patched in the process */
	/** With MRMGR_MONITOR_SRC_PATCH, under a sanitizer: its allocator's
	 *  malloc/free hooks follow the heap it maps with raw system calls */
	MRMGR_MONITOR_SRC_SANITIZER = 1u << 4,
};

/**
 * Bits of mrmgr_monitor_info::unwatched_causes: why gets were served
 * uncached (each cause is also logged once per process, as a warning).
 */
enum mrmgr_monitor_unwatched_cause {
	/** No memory-event source runs for the cache's mode. */
	MRMGR_MONITOR_UNWATCHED_NO_SOURCE = 1u << 0,
	/** Shared memory (MAP_SHARED, shmem, memfd, SysV): it can change
	 *  through another mapping or process. */
	MRMGR_MONITOR_UNWATCHED_SHARED = 1u << 1,
	/** A private file mapping, which userfaultfd cannot watch. */
	MRMGR_MONITOR_UNWATCHED_FILE = 1u << 2,
	/** Part of the range is not mapped. */
	MRMGR_MONITOR_UNWATCHED_HOLE = 1u << 3,
	/** The watch budget (a quarter of vm.max_map_count) is spent. */
	MRMGR_MONITOR_UNWATCHED_BUDGET = 1u << 4,
	/** The kernel refused the userfaultfd registration, or the mapping
	 *  changed while it was being registered (the look after it found
	 *  it no longer as classified: unwatched_error is EAGAIN). */
	MRMGR_MONITOR_UNWATCHED_REFUSED = 1u << 5,
};

/** Bits of mrmgr_monitor_info::foreign_calls and mrmgr_monitor_info::foreign_followed:
 *  the memory calls the monitor follows wherever the process defines them. */
enum mrmgr_monitor_call {
	MRMGR_MONITOR_CALL_MMAP = 1u << 0,
	MRMGR_MONITOR_CALL_MMAP64 = 1u << 1,
	MRMGR_MONITOR_CALL_MUNMAP = 1u << 2,
	MRMGR_MONITOR_CALL_MREMAP = 1u << 3,
	MRMGR_MONITOR_CALL_MADVISE = 1u << 4,
	MRMGR_MONITOR_CALL_POSIX_MADVISE = 1u << 5,
	MRMGR_MONITOR_CALL_BRK = 1u << 6,
	MRMGR_MONITOR_CALL_SBRK = 1u << 7,
	MRMGR_MONITOR_CALL_SHMAT = 1u << 8,
	MRMGR_MONITOR_CALL_SHMDT = 1u << 9,
};

/** Bits of mrmgr_monitor_info::raw_runtimes: code in the process that
 *  changes memory with system calls of its own. */
enum mrmgr_monitor_raw {
	/** liburing (io_uring_queue_init): IORING_OP_MADVISE discards pages
	 *  with no libc call. */
	MRMGR_MONITOR_RAW_IO_URING = 1u << 0,
	/** A Go runtime (cgo: crosscall2, _cgo_topofstack): its heap
	 *  scavenger madvises and unmaps with raw system calls. */
	MRMGR_MONITOR_RAW_GO = 1u << 1,
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
	int32_t fork_status;      /**< ibv_is_fork_initialized() for this cache (-1: a device that pins with plain references, ::MRMGR_DEVICE_CAP_PLAIN_PINS, such as the simulated HCA) */
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
	int32_t patch_error;      /**< process: why libc is not patched (errno; EOPNOTSUPP: valgrind or a sanitizer; ENOEXEC: unknown prologue), 0 when it is or was not tried */
	uint32_t patch_targets;   /**< process: functions redirected, bits in the order munmap, mremap, madvise, mmap, brk, shmat, shmdt, sbrk (only when chained, see patch_chained), mprotect (to notice another patcher) */
	uint32_t unwatched_causes; /**< enum mrmgr_monitor_unwatched_cause bits seen by this cache's unwatched gets */
	int32_t unwatched_error;  /**< errno-style reason of this cache's last unwatched get (0: none yet) */
	uint64_t window_uncached; /**< gets served uncached because a change to their range was under way while they registered */
	uint64_t changes;         /**< process: changes reported on both sides (before and after the system call) */
	uint64_t retries;         /**< process: sources tried again after a transient failure (EMFILE, ENOMEM, ...) */
	uint32_t patch_chained;   /**< process: of patch_targets, the functions whose hook calls another patcher's (UCX's libucm, libfabric's memhooks, ...) that was there first or took over later; bit 7: sbrk, redirected only in that case */
	uint32_t patch_overwrites; /**< process: times another library overwrote libc's entry points after libmrmgr patched them (each time every cache was invalidated and libmrmgr chained on top again, with one warning the first time) */
	uint32_t foreign_calls;    /**< process: memory calls (enum mrmgr_monitor_call bits) that a loaded object other than libc defines itself, such as gperftools' tcmalloc (mmap, mmap64, munmap, mremap, sbrk), checked at start and whenever objects are loaded or unloaded */
	uint32_t foreign_followed; /**< process: of mrmgr_monitor_info::foreign_calls, those libmrmgr follows (every loaded object's call sites bound to them go through its wrappers) */
	int32_t foreign_error;     /**< process: why some of mrmgr_monitor_info::foreign_calls are not followed (errno), 0 when all are; the default mode then takes userfaultfd, else caches nothing */
	uint32_t raw_runtimes;     /**< process: enum mrmgr_monitor_raw bits: code that makes memory system calls no libc entry sees (liburing, a Go runtime); the default mode then takes userfaultfd */
	uint64_t foreign_sites;    /**< process: call sites (GOT/PLT slots of loaded objects) redirected to libmrmgr's wrappers */
	char foreign_object[64];   /**< process: file name of the first object found defining one of mrmgr_monitor_info::foreign_calls, "" when none */
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

/** Where a configuration value came from (mrmgr_cache_query_config()). */
enum mrmgr_config_source {
	/** The library's default (mrmgr_config_entry::note says how it was
	 * derived when it depends on the process or the device). */
	MRMGR_CONFIG_SOURCE_DEFAULT = 0,
	/** The program's struct mrmgr_cache_attr (its @c comp_mask bit). */
	MRMGR_CONFIG_SOURCE_ATTR = 1,
	/** An @c MRMGR_* environment variable. */
	MRMGR_CONFIG_SOURCE_ENV = 2,
};

/**
 * One effective setting of a cache. New members are only ever added at
 * the end; pass @c sizeof(struct mrmgr_config_entry) as you know it.
 */
struct mrmgr_config_entry {
	/** The environment variable that sets it, e.g. @c "MRMGR_MAX_BYTES". */
	char name[32];
	/** The effective value, spelt as the variable takes it ("8388608",
	 * "1", "auto"). */
	char value[32];
	/** enum mrmgr_config_source. */
	uint32_t source;
	/** How a default was derived (e.g. "RLIMIT_MEMLOCK", "half of
	 * physical memory (CAP_IPC_LOCK)"); empty otherwise. */
	char note[128];
};

/**
 * The cache's effective configuration, one entry per setting, each with
 * where it came from: the program's attributes, an @c MRMGR_* variable,
 * or the default (and how the default was derived). What mrmgr_info(1)
 * prints; the precedence rule is in mrmgr-env(7).
 *
 * @param cache       the cache.
 * @param entries     receives at most @p max entries (may be NULL when
 *                    @p max is 0, to learn the count).
 * @param max         room in @p entries.
 * @param entry_size  @c sizeof(struct mrmgr_config_entry) as the caller
 *                    was built: entries are this far apart, each copied
 *                    up to this size (members this library does not
 *                    know are zeroed).
 * @param n           receives the number of settings (which may exceed
 *                    @p max: then only the first @p max were written).
 * @return 0, or @c EINVAL for a NULL @p cache or @p n, a NULL
 *         @p entries with @p max above 0, or an @p entry_size of 0.
 */
MRMGR_EXPORT int mrmgr_cache_query_config(mrmgr_cache_t *cache,
					  struct mrmgr_config_entry *entries,
					  size_t max, size_t entry_size,
					  size_t *n);

/**
 * The registered MR of a region; valid until the matching mrmgr_put().
 * @param region  a region the caller holds (from mrmgr_get()).
 * @return the MR (for a multi-PD cache, the one in its first PD).
 */
MRMGR_EXPORT struct ibv_mr *mrmgr_region_mr(const mrmgr_region_t *region);
/**
 * The region's local key. Read where the hit that returned the region
 * already looked (a copy beside the calling thread's reference word), so
 * reading it after a hit costs no further cache miss.
 * @param region  a region the caller holds (from mrmgr_get()).
 * @return the lkey to put in local SGEs (0 for a NULL region).
 */
MRMGR_EXPORT uint32_t mrmgr_region_lkey(const mrmgr_region_t *region);
/**
 * The region's remote key, read as mrmgr_region_lkey() reads the local one.
 * @param region  a region the caller holds (from mrmgr_get()).
 * @return the rkey to give peers (0 for a NULL region; 0 without remote
 *         access on some devices).
 */
MRMGR_EXPORT uint32_t mrmgr_region_rkey(const mrmgr_region_t *region);
/*
 * The other key accessors (buffers, aliases, imports, a PD's MR) are
 * mr->lkey / mr->rkey of their MR accessor, 0 without an MR: inline, so
 * they cost no exported symbol and no more than the one call they make.
 */
/**
 * What a region is, as mrmgr_region_query() reports it. Fields are only
 * ever appended; a caller built against an older header passes its
 * smaller @c sizeof and gets the fields it knows.
 */
struct mrmgr_region_info {
	/** Start of the registered range (page-aligned; may start before the
	 *  request). */
	void *addr;
	/** Length of the registered range in bytes (may exceed the request). */
	size_t length;
	/** The @c ibv_access_flags the region was registered with, a superset
	 *  of what was asked for. */
	unsigned int access;
	/** The local key, as mrmgr_region_lkey() reads it. */
	uint32_t lkey;
	/** The remote key, as mrmgr_region_rkey() reads it. */
	uint32_t rkey;
	/** The region's registration number: unique in its cache, and new
	 *  whenever the registration changes (a region re-registered in place
	 *  by growth, access upgrade or PD move keeps its handle but gets a new
	 *  generation, and possibly new keys). Compare generations, not
	 *  handles, to tell whether keys sent to a peer earlier are still the
	 *  ones in force. Never 0. */
	uint64_t generation;
	/** The region's MR (in the cache's first PD), as mrmgr_region_mr(). */
	struct ibv_mr *mr;
};

/**
 * Describe a region the caller holds: its range, access, keys,
 * generation and MR, in one call (the accessors below read it).
 * @param region  a region the caller holds (from mrmgr_get()).
 * @param info    receives at most @p size bytes.
 * @param size    @c sizeof(struct mrmgr_region_info) as the caller knows it.
 * @return 0, or @c EINVAL (NULL @p region or @p info, @p size 0).
 */
MRMGR_EXPORT int mrmgr_region_query(const mrmgr_region_t *region,
				    struct mrmgr_region_info *info,
				    size_t size);
/**
 * Start of the registered range (page-aligned; may start before the request).
 * @param region  a region the caller holds (from mrmgr_get()).
 * @return the registered start address (NULL for a NULL region).
 */
static inline void *mrmgr_region_addr(const mrmgr_region_t *region)
{
	struct mrmgr_region_info i;

	return region && !mrmgr_region_query(region, &i, sizeof(i)) ? i.addr
								     : NULL;
}
/**
 * Length of the registered range (may exceed the request).
 * @param region  a region the caller holds (from mrmgr_get()).
 * @return the registered length in bytes (0 for a NULL region).
 */
static inline size_t mrmgr_region_length(const mrmgr_region_t *region)
{
	struct mrmgr_region_info i;

	return region && !mrmgr_region_query(region, &i, sizeof(i)) ? i.length
								     : 0;
}
/**
 * The @c ibv_access_flags the region was registered with.
 * @param region  a region the caller holds (from mrmgr_get()).
 * @return the access flags, a superset of what was asked for (0 for NULL).
 */
static inline unsigned int mrmgr_region_access(const mrmgr_region_t *region)
{
	struct mrmgr_region_info i;

	return region && !mrmgr_region_query(region, &i, sizeof(i)) ? i.access
								     : 0;
}
/**
 * The region's registration number (mrmgr_region_info::generation).
 * @param region  a region the caller holds (from mrmgr_get()).
 * @return the generation, never 0 (0 for a NULL region).
 */
static inline uint64_t mrmgr_region_generation(const mrmgr_region_t *region)
{
	struct mrmgr_region_info i;

	return region && !mrmgr_region_query(region, &i, sizeof(i))
		       ? i.generation : 0;
}

/**
 * Attach a pointer of the caller's to a region (for example the memory
 * handle a transport derives from its keys), replacing the one it had.
 *
 * The pointer stays with the region while it is cached: every later get
 * that hits the region returns a region whose mrmgr_region_user_data() is
 * this pointer, until the region leaves the cache. It is still readable in
 * mrmgr_cache_attr::region_gone, the place to free it; after that the
 * region may be reused for another range and starts again with NULL. A
 * region re-registered in place keeps it (check
 * mrmgr_region_generation() if the pointer depends on the keys).
 *
 * Lock-free: one atomic store (release). Call it only on a region you
 * hold (or in region_gone). Threads holding the same region see each
 * other's stores; to publish a pointer only if no other thread did, use
 * mrmgr_region_cas_user_data().
 *
 * @param region  a region the caller holds.
 * @param data    any pointer, or NULL; the library never dereferences it.
 */
MRMGR_EXPORT void mrmgr_region_set_user_data(mrmgr_region_t *region,
					     void *data);

/**
 * Replace a region's user data only if it is still @p expected: one
 * atomic compare-and-swap, so that of several threads that hit a new
 * region at once exactly one attaches its handle and the others use it.
 *
 * @param region    a region the caller holds.
 * @param expected  the pointer the caller believes is attached (usually
 *                  NULL).
 * @param data      the pointer to attach.
 * @return the pointer attached before the call: @p expected when @p data
 *         was attached, else the other thread's pointer (left in place).
 */
MRMGR_EXPORT void *mrmgr_region_cas_user_data(mrmgr_region_t *region,
					      void *expected, void *data);

/**
 * The pointer attached by mrmgr_region_set_user_data() or
 * mrmgr_region_cas_user_data(), NULL if none. One atomic load (acquire):
 * safe on the hit path.
 *
 * @param region  a region the caller holds, or the one given to
 *                mrmgr_cache_attr::region_gone.
 * @return the attached pointer, or NULL.
 */
MRMGR_EXPORT void *mrmgr_region_user_data(const mrmgr_region_t *region);

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
 * @param cache  the cache.
 * @param pd     the new protection domain, of the same device.
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
 * @param cache   the cache the buffer registers through.
 * @param size    initial size in bytes (0 is allowed).
 * @param access  @c ibv_access_flags the buffer needs, as for mrmgr_get().
 * @param buf     receives the buffer.
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
 * @param buf       the buffer.
 * @param new_size  the new size in bytes (0 is allowed).
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
 * @param buf  the buffer (NULL: @c EINVAL).
 * @return 0 or @c EINVAL for NULL.
 */
MRMGR_EXPORT int mrmgr_buf_destroy(mrmgr_buf_t *buf);

/**
 * What a buffer is now, as mrmgr_buf_query() reports it. Fields are only
 * ever appended (a smaller @c sizeof gets the fields it knows).
 */
struct mrmgr_buf_info {
	/** The buffer's memory (changes when a resize moves it). */
	void *data;
	/** The size last asked for, in bytes. */
	size_t size;
	/** Bytes mapped and registered (a page multiple, at least the size). */
	size_t capacity;
	/** The buffer's MR (covering the whole capacity), or NULL without a
	 *  registration. */
	struct ibv_mr *mr;
	/** A number that changes whenever the buffer's registration (and so
	 *  possibly its keys or address) changes. */
	uint64_t generation;
};

/**
 * Describe a buffer: its memory, size, capacity, MR and generation in one
 * call (the accessors below read it).
 * @param buf   the buffer.
 * @param info  receives at most @p size bytes.
 * @param size  @c sizeof(struct mrmgr_buf_info) as the caller knows it.
 * @return 0, or @c EINVAL (NULL @p buf or @p info, @p size 0).
 */
MRMGR_EXPORT int mrmgr_buf_query(const mrmgr_buf_t *buf,
				 struct mrmgr_buf_info *info, size_t size);
/**
 * The buffer's memory (changes when a resize moves it).
 * @param buf  the buffer.
 * @return the start of its memory (NULL for NULL).
 */
static inline void *mrmgr_buf_data(const mrmgr_buf_t *buf)
{
	struct mrmgr_buf_info i;

	return buf && !mrmgr_buf_query(buf, &i, sizeof(i)) ? i.data : NULL;
}
/**
 * The size last asked for.
 * @param buf  the buffer.
 * @return its size in bytes (0 for NULL).
 */
static inline size_t mrmgr_buf_size(const mrmgr_buf_t *buf)
{
	struct mrmgr_buf_info i;

	return buf && !mrmgr_buf_query(buf, &i, sizeof(i)) ? i.size : 0;
}
/**
 * Bytes mapped and registered (a page multiple, at least the size).
 * @param buf  the buffer.
 * @return its capacity in bytes (0 for NULL).
 */
static inline size_t mrmgr_buf_capacity(const mrmgr_buf_t *buf)
{
	struct mrmgr_buf_info i;

	return buf && !mrmgr_buf_query(buf, &i, sizeof(i)) ? i.capacity : 0;
}
/**
 * The buffer's MR (covering the whole capacity), or NULL without one.
 * @param buf  the buffer.
 * @return the MR, or NULL.
 */
static inline struct ibv_mr *mrmgr_buf_mr(const mrmgr_buf_t *buf)
{
	struct mrmgr_buf_info i;

	return buf && !mrmgr_buf_query(buf, &i, sizeof(i)) ? i.mr : NULL;
}
/**
 * The buffer's local key, or 0 without a registration.
 * @param buf  the buffer.
 * @return the lkey, or 0.
 */
static inline uint32_t mrmgr_buf_lkey(const mrmgr_buf_t *buf)
{
	struct ibv_mr *mr = mrmgr_buf_mr(buf);

	return mr ? mr->lkey : 0;
}
/**
 * The buffer's remote key, or 0 without a registration.
 * @param buf  the buffer.
 * @return the rkey, or 0.
 */
static inline uint32_t mrmgr_buf_rkey(const mrmgr_buf_t *buf)
{
	struct ibv_mr *mr = mrmgr_buf_mr(buf);

	return mr ? mr->rkey : 0;
}
/**
 * A number that changes whenever the buffer's registration (and so
 * possibly its keys or address) changes.
 * @param buf  the buffer.
 * @return the generation (0 for NULL).
 */
static inline uint64_t mrmgr_buf_generation(const mrmgr_buf_t *buf)
{
	struct mrmgr_buf_info i;

	return buf && !mrmgr_buf_query(buf, &i, sizeof(i)) ? i.generation : 0;
}

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
	/* Added with shared MRs. */
	/** regions now in a share set: with MRs in several PDs (multi-PD
	 *  caches), exported or aliased */
	uint64_t share_sets;
	/** MRs now registered for regions in PDs other than their first
	 *  (multi-PD caches); also counted in @c regions and
	 *  @c pinned_bytes */
	uint64_t share_pd_mrs;
	/** exports now live (mrmgr_region_export() not yet released) */
	uint64_t share_exports;
	/** importers now attached to exports (as told by the share
	 *  server, mrmgr_share_server_create()) */
	uint64_t share_importers;
	/** registrations of a region in another PD, in total */
	uint64_t share_pd_registrations;
	/** exports made, in total */
	uint64_t exports;
	/** importer attachments, in total */
	uint64_t imports;
	/** exports and aliases revoked: region invalidated, or forced by
	 *  ::MRMGR_DESTROY_FORCE */
	uint64_t share_revocations;
	/** exported MRs deregistered by force while importers were
	 *  attached */
	uint64_t share_forced;
	/** aliases now live (mrmgr_region_alias()); not counted in
	 *  @c regions or @c pinned_bytes */
	uint64_t share_aliases;
	/** puts of regions nobody held (double puts), detected and
	 *  ignored; see ::MRMGR_CACHE_CHECK */
	uint64_t double_puts;
	/** gets verified against the recorded pages
	 *  (::MRMGR_CACHE_CHECK_STALE) */
	uint64_t stale_checks;
	/** of them, hits on a stale registration: reported, the cached
	 *  region invalidated, a fresh registration handed out */
	uint64_t stale_hits;
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
	/**
	 * The device reports ODP, but a known defect of its driver can put
	 * ODP transfers in the wrong place (mrmgr_odp_info::device_quirks;
	 * doc/odp.md, "Device quirks"): pinned registrations instead.
	 */
	MRMGR_ODP_REASON_DEVICE_QUIRK = 5,
};

/** Bits of mrmgr_odp_info::device_quirks: known ODP defects of the device. */
enum mrmgr_odp_quirk {
	/**
	 * Soft-RoCE (rdma_rxe) on Linux 6.15 and later (no fixed version
	 * known; @c MRMGR_RXE_ODP_FIXED_IN): the ODP copy ignores the offset
	 * inside a page, so a transfer at a non-zero page offset (or one of
	 * several packets with an MTU below 4096) moves bytes to or from the
	 * page's start, and completes with success.
	 */
	MRMGR_ODP_QUIRK_PAGE_OFFSET = 1u << 0,
	/**
	 * The quirks above were found but not applied:
	 * @c MRMGR_RXE_ODP_QUIRK=off asked for ODP anyway.
	 */
	MRMGR_ODP_QUIRK_OVERRIDDEN = 1u << 31,
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
	/** enum mrmgr_odp_quirk bits: the device's known ODP defects (since 1.x, issue 29) */
	uint32_t device_quirks;
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

/**
 * @name Shared MRs: one buffer in several PDs, MRs shared across processes
 *
 * Several MRs may map the same memory: the same buffer registered in the
 * PDs of several devices (multi-rail), or an MR another process uses
 * through ibv_import_mr(). libmrmgr keeps every such MR in the region's
 * @b share @b set, so that none outlives its memory and none is left
 * stale. See doc/sharing.md.
 *
 * Rules a user must know:
 *  - a region in a share set is never re-registered in place (a
 *    translation rereg would make a shared MR private): growth registers
 *    a new, private region, and the old one keeps its members (other PDs'
 *    MRs, exports) until they are released;
 *  - an exported region is pinned: it is neither evicted nor deregistered
 *    by invalidation while the export lives. Invalidation detaches it
 *    from the cache (no get returns it again) and marks the export
 *    revoked (mrmgr_export_revoked()): the owner must tell its importers
 *    (the share server does) and release the export once they have
 *    detached; the MR is deregistered then;
 *  - ibv_import_mr() counts nothing: if the owner deregisters an MR,
 *    every import of it dies. Keep exports until importers are done
 *    (the share helpers do), or destroy with ::MRMGR_DESTROY_FORCE;
 *  - devices without import (rxe, siw) fail exports and imports with
 *    @c EOPNOTSUPP, learnt once per device.
 * @{
 */

/**
 * The region's MR in @p pd, or NULL when it has none there (yet). On a
 * multi-PD cache the plain accessors (mrmgr_region_mr(), _lkey, _rkey)
 * report the MR in the cache's first PD.
 * @param region  a region the caller holds (from mrmgr_get()).
 * @param pd      one of the cache's PDs.
 * @return the MR in @p pd, or NULL.
 */
MRMGR_EXPORT struct ibv_mr *mrmgr_region_mr_pd(const mrmgr_region_t *region,
					       const struct ibv_pd *pd);
/**
 * The region's local key in @p pd (0 without an MR there).
 * @param region  a region the caller holds (from mrmgr_get()).
 * @param pd      one of the cache's PDs.
 * @return the lkey in @p pd, or 0.
 */
static inline uint32_t mrmgr_region_lkey_pd(const mrmgr_region_t *region,
					    const struct ibv_pd *pd)
{
	struct ibv_mr *mr = mrmgr_region_mr_pd(region, pd);

	return mr ? mr->lkey : 0;
}
/**
 * The region's remote key in @p pd (0 without an MR there).
 * @param region  a region the caller holds (from mrmgr_get()).
 * @param pd      one of the cache's PDs.
 * @return the rkey in @p pd, or 0.
 */
static inline uint32_t mrmgr_region_rkey_pd(const mrmgr_region_t *region,
					    const struct ibv_pd *pd)
{
	struct ibv_mr *mr = mrmgr_region_mr_pd(region, pd);

	return mr ? mr->rkey : 0;
}

/** Kinds of share-set members (mrmgr_share_info::kind). */
enum mrmgr_share_kind {
	/** An MR the cache registered for the region: its only one, or one
	 *  per PD in a multi-PD cache. */
	MRMGR_SHARE_MR = 0,
	/** An export of one of those MRs to other processes. */
	MRMGR_SHARE_EXPORT = 1,
	/** An alias: the same pages mapped again and registered again
	 *  (mrmgr_region_alias()); @c addr is the alias's address. */
	MRMGR_SHARE_ALIAS = 2,
};

/** Bits of mrmgr_share_info::flags. */
enum mrmgr_share_info_flags {
	/** The export or alias was revoked (the region was invalidated, or
	 *  forced). */
	MRMGR_SHARE_REVOKED = 1u << 0,
	/** The region is no longer in the cache (invalidated, merged or
	 *  grown away): its members live on until released. */
	MRMGR_SHARE_DETACHED = 1u << 1,
};

/**
 * One member of a region's share set. Fields are only ever added at the
 * end; pass @c sizeof(struct mrmgr_share_info) as you know it.
 */
struct mrmgr_share_info {
	uint32_t kind;        /**< enum mrmgr_share_kind */
	uint32_t flags;       /**< bits of enum mrmgr_share_info_flags */
	struct ibv_pd *pd;    /**< the MR's PD */
	struct ibv_mr *mr;    /**< the MR (for an export: the exported one) */
	uint64_t addr;        /**< start of the registered range */
	uint64_t length;      /**< bytes */
	uint32_t lkey;        /**< local key */
	uint32_t rkey;        /**< remote key */
	uint32_t access;      /**< ibv_access_flags */
	uint32_t importers;   /**< exports: importers attached */
	/** MRs: references on the region now (callers' gets and exports'
	 *  pins; the region is one object for all its PDs); exports: 1 */
	uint64_t refs;
	uint64_t export_id;   /**< exports: mrmgr_export_desc::export_id */
};

/**
 * List the members of a region's share set: its MRs (one per PD it is
 * registered in), then its live exports, then its aliases.
 *
 * @param region     a region the caller holds.
 * @param info       room for @p max entries of @p info_size bytes each
 *                   (may be NULL when @p max is 0).
 * @param max        entries @p info can take.
 * @param info_size  @c sizeof(struct mrmgr_share_info) as the caller was
 *                   built.
 * @param n          receives the number of members (may exceed @p max:
 *                   only @p max were written).
 * @return 0, or @c EINVAL for NULL arguments or an @p info_size of 0.
 */
MRMGR_EXPORT int mrmgr_region_query_shares(const mrmgr_region_t *region,
					   struct mrmgr_share_info *info,
					   size_t max, size_t info_size,
					   size_t *n);

/** An alias of a region: its pages mapped and registered again. Opaque. */
typedef struct mrmgr_alias mrmgr_alias_t;

/**
 * Alias a region whose memory is a shared file's (memfd, POSIX shm, a
 * @c MAP_SHARED file mapping): map the same pages a second time, at an
 * address with the original's offset within 4 MiB (the same huge-page
 * geometry), and register that mapping in @p pd with @p access. The
 * modern form of the experimental shared MR (ibv_exp_reg_shared_mr()).
 *
 * The alias joins the region's share set and pins the region (it is
 * neither evicted nor deregistered before the alias is destroyed, and
 * never re-registered in place); invalidation of the region revokes the
 * alias (mrmgr_alias_revoked()). The alias's mapping lives until
 * mrmgr_alias_destroy(). Aliases are not counted against the cache's
 * limits.
 *
 * @param region  a region the caller holds.
 * @param fd      the file whose pages the region's memory is.
 * @param offset  the file offset of mrmgr_region_addr(region).
 * @param pd      the PD to register in (same backend as the cache), or
 *                NULL for the region's.
 * @param access  ibv_access_flags of the alias (the mapping is writable
 *                when a write bit is set: @p fd must be open for writing).
 * @param alias   receives the alias.
 * @return 0; @c EINVAL (NULL, bad access, a PD of another backend, memory
 *         that is not one @c MAP_SHARED mapping of @p fd at @p offset:
 *         logged with the reason); @c ESTALE (the region is no longer in
 *         the cache); the mapping's or the registration's errno.
 */
MRMGR_EXPORT int mrmgr_region_alias(mrmgr_region_t *region, int fd,
				    uint64_t offset, struct ibv_pd *pd,
				    unsigned int access, mrmgr_alias_t **alias);
/**
 * Deregister an alias, unmap it and drop its pin (the region is
 * deregistered now if it was invalidated and nobody else holds it).
 * @param alias  the alias (NULL: @c EINVAL).
 * @return 0 or @c EINVAL.
 */
MRMGR_EXPORT int mrmgr_alias_destroy(mrmgr_alias_t *alias);
/**
 * What an alias is now, as a member of its region's share set: kind
 * ::MRMGR_SHARE_ALIAS, its own address (@c addr) and @c length, its MR,
 * PD, keys and access (@c mr NULL and keys 0 after a forced cache
 * destruction), and ::MRMGR_SHARE_REVOKED once the region was
 * invalidated or the alias forced. The accessors below read it.
 * @param alias  the alias.
 * @param info   receives at most @p size bytes.
 * @param size   @c sizeof(struct mrmgr_share_info) as the caller knows it.
 * @return 0, or @c EINVAL (NULL, @p size 0).
 */
MRMGR_EXPORT int mrmgr_alias_query(const mrmgr_alias_t *alias,
				   struct mrmgr_share_info *info, size_t size);
/**
 * The alias's address (its own mapping of the pages).
 * @param alias  the alias.
 * @return the alias's start address, or NULL for NULL.
 */
static inline void *mrmgr_alias_addr(const mrmgr_alias_t *alias)
{
	struct mrmgr_share_info i;

	return alias && !mrmgr_alias_query(alias, &i, sizeof(i))
		       ? (void *)(uintptr_t)i.addr : NULL;
}
/**
 * The alias's MR (NULL after a forced cache destruction).
 * @param alias  the alias.
 * @return the MR, or NULL.
 */
static inline struct ibv_mr *mrmgr_alias_mr(const mrmgr_alias_t *alias)
{
	struct mrmgr_share_info i;

	return alias && !mrmgr_alias_query(alias, &i, sizeof(i)) ? i.mr : NULL;
}
/**
 * The alias's local key (0 without an MR).
 * @param alias  the alias.
 * @return the lkey, or 0.
 */
static inline uint32_t mrmgr_alias_lkey(const mrmgr_alias_t *alias)
{
	struct ibv_mr *mr = mrmgr_alias_mr(alias);

	return mr ? mr->lkey : 0;
}
/**
 * The alias's remote key (0 without an MR).
 * @param alias  the alias.
 * @return the rkey, or 0.
 */
static inline uint32_t mrmgr_alias_rkey(const mrmgr_alias_t *alias)
{
	struct ibv_mr *mr = mrmgr_alias_mr(alias);

	return mr ? mr->rkey : 0;
}
/**
 * Whether the region was invalidated (or the alias forced).
 * @param alias  the alias.
 * @return 1 or 0 (0 for NULL).
 */
static inline int mrmgr_alias_revoked(const mrmgr_alias_t *alias)
{
	struct mrmgr_share_info i;

	return alias && !mrmgr_alias_query(alias, &i, sizeof(i)) &&
	       (i.flags & MRMGR_SHARE_REVOKED);
}

/** An export of a region's MR to other processes. Opaque. */
typedef struct mrmgr_export mrmgr_export_t;

/** The current mrmgr_export_desc::version. */
#define MRMGR_EXPORT_DESC_VERSION 1

/**
 * What an importer needs to import an exported MR: plain data (no
 * pointers), to be sent as bytes to another process on the same host,
 * together with the device's command descriptor (@c cmd_fd, by
 * @c SCM_RIGHTS).
 */
struct mrmgr_export_desc {
	uint32_t version;     /**< ::MRMGR_EXPORT_DESC_VERSION */
	uint32_t size;        /**< bytes of the descriptor as written */
	uint64_t export_id;   /**< unique in the exporting process */
	int32_t owner_pid;    /**< the exporting process */
	uint32_t pd_handle;   /**< the PD's kernel handle (ibv_pd::handle) */
	uint32_t mr_handle;   /**< the MR's kernel handle (ibv_mr::handle) */
	uint32_t lkey;        /**< the MR's local key */
	uint32_t rkey;        /**< the MR's remote key */
	uint32_t access;      /**< ibv_access_flags of the MR */
	uint64_t addr;        /**< the MR's start in the owner's address space */
	uint64_t length;      /**< bytes */
	uint64_t generation;  /**< mrmgr_region_generation() at export */
	char device[64];      /**< the device's name */
};

/**
 * Export a region's MR: the region is pinned (never evicted, never
 * deregistered) until mrmgr_export_release(), even after the caller's
 * mrmgr_put(). The region joins a share set, so it is never re-registered
 * in place. Whether the device can import is probed once per device
 * (ibv_import_pd() on the owner's PD).
 *
 * @param region  a region the caller holds.
 * @param pd      the PD whose MR to export (multi-PD caches; the region
 *                must be registered there), or NULL for mrmgr_region_mr().
 * @param exp     receives the export.
 * @return 0; @c EINVAL (NULL, a PD without an MR of the region, an
 *         implicit-ODP view); @c EOPNOTSUPP when the device cannot
 *         import (rxe, siw); @c ENOMEM.
 */
MRMGR_EXPORT int mrmgr_region_export(mrmgr_region_t *region, struct ibv_pd *pd,
				     mrmgr_export_t **exp);

/**
 * The export's descriptor, and the device's command descriptor to pass
 * to the importer with @c SCM_RIGHTS (still the device's: do not close
 * it; the receiving end gets its own copy).
 *
 * @param exp     the export.
 * @param desc    receives at most @p size bytes of the descriptor.
 * @param size    @c sizeof(struct mrmgr_export_desc) as the caller knows it.
 * @param cmd_fd  receives the command descriptor; may be NULL.
 * @return 0 or @c EINVAL.
 */
MRMGR_EXPORT int mrmgr_export_describe(const mrmgr_export_t *exp,
				       struct mrmgr_export_desc *desc,
				       size_t size, int *cmd_fd);

/**
 * Whether the export was revoked: its region was invalidated (its memory
 * is no longer what was registered) or the cache was destroyed with
 * ::MRMGR_DESTROY_FORCE. Importers must stop using it; release the export
 * once they have.
 * @param exp  the export.
 * @return 1, 0, or 0 for NULL.
 */
MRMGR_EXPORT int mrmgr_export_revoked(const mrmgr_export_t *exp);

/**
 * Release an export: the region's pin is dropped (it is deregistered now
 * if it was invalidated and nobody else holds it). Importers of the MR
 * must have unimported it: their MR dies with the owner's.
 * @param exp  the export (NULL: @c EINVAL).
 * @return 0 or @c EINVAL.
 */
MRMGR_EXPORT int mrmgr_export_release(mrmgr_export_t *exp);

/**
 * Count an importer attaching to (+1) or detaching from (-1) an export.
 * ibv_import_mr() tells the owner nothing, so whoever passes descriptors
 * (the share server of libmrmgr-share, or a transport of your own) says
 * so; the cache counts it in mrmgr_stats::share_importers and
 * mrmgr_stats::imports, mrmgr_region_query_shares() and the report of a busy
 * mrmgr_cache_destroy().
 * @param exp    the export.
 * @param delta  +1 or -1.
 * @return 0; @c EINVAL (NULL, another delta, a detach without an attach).
 */
MRMGR_EXPORT int mrmgr_export_importers(mrmgr_export_t *exp, int delta);

/**
 * The device context whose command descriptor (@c cmd_fd) importers of
 * the cache's exports need, checking first that the device can export at
 * all (probed once per device, as mrmgr_region_export() does). For code
 * that passes descriptors before any region is exported, such as the
 * share server of libmrmgr-share (mrmgr/share.h).
 * @param cache  the cache.
 * @param pd     one of the cache's PDs, or NULL for the one it was
 *               created with.
 * @param ctx    receives the context (the cache's: do not close it).
 * @return 0; @c EINVAL (NULL, a PD the cache does not serve, a device
 *         without a command descriptor); @c EOPNOTSUPP when the device
 *         cannot import (rxe, siw).
 */
MRMGR_EXPORT int mrmgr_cache_export_context(mrmgr_cache_t *cache,
					    struct ibv_pd *pd,
					    struct ibv_context **ctx);


/** @} */

/**
 * The library's version, e.g. "1.0.0".
 * @return a static string; never NULL.
 */
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
 * @param fn         the handler, or NULL for the default.
 * @param arg        passed to @p fn with every line.
 * @param max_level  the least severe level passed on.
 */
MRMGR_EXPORT void mrmgr_set_log_handler(mrmgr_log_fn fn, void *arg,
					enum mrmgr_log_level max_level);

/**
 * @name Device memory: dma-buf (MRMGR_1.1)
 * A dma-buf cache (doc/device-memory.md) caches registrations of
 * dma-bufs' bytes in the same refcounted get/put model as host memory:
 * mrmgr_get_dmabuf() returns a region, mrmgr_put() gives it back. An
 * entry is keyed by the buffer's identity (fstat()'s device and inode),
 * never by the descriptor number; the cache holds its own duplicate of
 * the descriptor while any registration of the buffer lives, and closes
 * it when the last one is evicted or the cache destroyed. The caller's
 * descriptor stays the caller's (it may be closed after the get).
 * @{
 */

/** What mrmgr_get_dmabuf() registers. Zero-initialise. */
struct mrmgr_dmabuf_attr {
	/** Bits for members appended later; 0 (else EINVAL). */
	uint64_t comp_mask;
	/** The dma-buf's descriptor (a memfd or a udmabuf on the simulated HCA). */
	int fd;
	/** IBV_ACCESS_* bits, as for mrmgr_get(). */
	unsigned int access;
	/** First byte, from the buffer's start. */
	uint64_t offset;
	/** Bytes; offset + length at most the buffer's size and 2^38. */
	uint64_t length;
};

/**
 * Make a cache of dma-buf registrations on @p pd (attributes as for
 * mrmgr_cache_create(); no ODP: dma-buf MRs are pinned by the exporter).
 * It serves mrmgr_get_dmabuf() only; mrmgr_get() on it fails with EINVAL.
 * Destroy it with mrmgr_cache_destroy().
 * @param pd     the protection domain its MRs belong to.
 * @param attr   attributes as for mrmgr_cache_create(), or NULL.
 * @param cache  receives the cache.
 * @return 0, or EINVAL, ENOMEM, what mrmgr_cache_create() returns.
 */
MRMGR_EXPORT int mrmgr_cache_create_dmabuf(struct ibv_pd *pd,
					   const struct mrmgr_cache_attr *attr,
					   mrmgr_cache_t **cache);

/**
 * A registration covering [@c offset, + @c length) of the dma-buf
 * @c attr->fd, from the cache or registered now (ibv_reg_dmabuf_mr()).
 * The MR's address (iova) of buffer offset @c o is
 * mrmgr_region_mr(r)->addr + (o - the region's offset,
 * mrmgr_region_dmabuf_offset()) on libibverbs; the simulated HCA's MR
 * address is where it mapped the buffer, read the same way.
 * @param cache   a cache from mrmgr_cache_create_dmabuf().
 * @param attr    the buffer, range and access.
 * @param region  receives the referenced region; mrmgr_put() it.
 * @return 0, or EINVAL (bad arguments, not a dma-buf cache, past the
 * buffer's end), EBADF (@c fd is not open), EMFILE/ENFILE (no descriptor
 * left for the cache's duplicate), EOPNOTSUPP (the device cannot
 * register dma-bufs: rxe, a libibverbs before rdma-core 34), or the
 * device's errno. No descriptor is left open by a failure.
 */
MRMGR_EXPORT int mrmgr_get_dmabuf(mrmgr_cache_t *cache,
				  const struct mrmgr_dmabuf_attr *attr,
				  mrmgr_region_t **region);

/**
 * The buffer offset of a dma-buf region's first byte (page-aligned).
 * @param region  a region of a dma-buf cache.
 * @param offset  receives the offset.
 * @return 0, or EINVAL when @p region is not a dma-buf cache's.
 */
MRMGR_EXPORT int mrmgr_region_dmabuf_offset(const mrmgr_region_t *region,
					    uint64_t *offset);

/** A dma-buf opened on a dma-buf cache (mrmgr_dmabuf_open()). Opaque. */
typedef struct mrmgr_dmabuf mrmgr_dmabuf_t;

/**
 * Identify the dma-buf @p fd once (fstat(), the cache's duplicate of the
 * descriptor, held until mrmgr_dmabuf_close()), for gets that need no
 * system call: mrmgr_get_dmabuf_at() hits as fast as a host mrmgr_get().
 * The caller may close @p fd at once. Close every handle before
 * mrmgr_cache_destroy() (EBUSY while one is open).
 * @param cache   a cache from mrmgr_cache_create_dmabuf().
 * @param fd      the dma-buf's descriptor (stays the caller's).
 * @param handle  receives the handle.
 * @return 0, or EINVAL, EBADF, EMFILE/ENFILE, ENOMEM.
 */
MRMGR_EXPORT int mrmgr_dmabuf_open(mrmgr_cache_t *cache, int fd,
				   mrmgr_dmabuf_t **handle);

/**
 * mrmgr_get_dmabuf() through a handle: [@p offset, + @p length) of its
 * buffer. No system call, no lock on a hit.
 * @param handle  from mrmgr_dmabuf_open().
 * @param offset  first byte, from the buffer's start.
 * @param length  bytes.
 * @param access  IBV_ACCESS_* bits, as for mrmgr_get().
 * @param region  receives the referenced region; mrmgr_put() it.
 * @return 0, or EINVAL (past the buffer's end), or what mrmgr_get_dmabuf()
 * returns for the registration.
 */
MRMGR_EXPORT int mrmgr_get_dmabuf_at(mrmgr_dmabuf_t *handle, uint64_t offset,
				     uint64_t length, unsigned int access,
				     mrmgr_region_t **region);

/**
 * Close a handle (its regions stay valid until put; the cache's
 * duplicate is closed when no handle, get or registration holds the
 * buffer).
 * @param handle  from mrmgr_dmabuf_open().
 * @return 0 or EINVAL.
 */
MRMGR_EXPORT int mrmgr_dmabuf_close(mrmgr_dmabuf_t *handle);
/** @} */

/**
 * @name Device memory: memory domains and device virtual addresses (MRMGR_1.1)
 *
 * A memory domain is an allocator of device memory (a GPU's driver, or a
 * simulated one in tests) seen through a small table of operations. A
 * device-VA cache (mrmgr_cache_create_device()) registers whole
 * allocations of one domain, found by device virtual address: the
 * domain exports the allocation as a dma-buf, the cache keeps that
 * descriptor while an MR of it lives. A region is validated again (the
 * allocation's buffer id still the same) only when the domain's free
 * counter moved since it was last validated, so a hit stays lock-free.
 * See doc/device-memory.md.
 * @{
 */

/** A memory domain's operations. Every function is called without the
 * cache's locks held and may be called from any thread. */
struct mrmgr_domain_ops {
	/** sizeof(struct mrmgr_domain_ops) as the caller built it. */
	size_t size;
	/** For logs and mrmgr_info ("cuda", "sim"). */
	const char *name;
	/** The allocation that holds @p va: its first address, its size
	 * (every segment of a multi-segment allocation), its buffer id
	 * (never the same for two allocations). 0 or a positive errno. */
	int (*query)(void *ctx, uint64_t va, uint64_t *base, uint64_t *size,
		     uint64_t *buffer_id);
	/** Nonzero while the allocation at @p base still has @p buffer_id. */
	int (*valid)(void *ctx, uint64_t base, uint64_t buffer_id);
	/** A new dma-buf descriptor of [@p base, + @p size), the caller's to
	 * close. 0 or a positive errno. */
	int (*export_dmabuf)(void *ctx, uint64_t base, uint64_t size, int *fd);
	/** The domain's free counter: it moves (before an address can be
	 * given again) at every free. Read with an atomic load. */
	const uint64_t *(*free_counter)(void *ctx);
};

/** A memory domain (mrmgr_domain_create(), mrmgr_domain_open_cuda()). */
typedef struct mrmgr_domain mrmgr_domain_t;

/**
 * A memory domain over @p ops (copied) and @p ctx (the caller's, kept
 * until mrmgr_domain_destroy()).
 * @param ops     the operations (copied).
 * @param ctx     passed to each operation.
 * @param domain  receives the domain.
 * @return 0, EINVAL (a NULL argument or
 * operation), ENOMEM.
 */
MRMGR_EXPORT int mrmgr_domain_create(const struct mrmgr_domain_ops *ops,
				     void *ctx, mrmgr_domain_t **domain);

/**
 * The CUDA domain: libcuda.so.1 loaded with dlopen() (no build or link
 * dependency). It follows the driver's frees itself (cuMemFree*,
 * cuMemFreeAsync*, the VMM frees, context and pool destructions, reached
 * by direct calls, dlsym or cuGetProcAddress), provided it is opened
 * before libcuda.so.1 is first loaded; where it cannot (said once in
 * the log, at info level, with the reason), each get validates the
 * allocation's buffer id instead. See doc/device-memory.md.
 * @param domain  receives the domain.
 * @return 0, or ENODEV where libcuda.so.1 is absent, ENXIO
 * where cuInit() fails (no device), EOPNOTSUPP where the driver lacks a
 * function the domain needs (the first failure is logged at info level,
 * saying which).
 */
MRMGR_EXPORT int mrmgr_domain_open_cuda(mrmgr_domain_t **domain);

/**
 * Report that memory of @p domain was freed, for a domain that cannot
 * see frees itself (one the program built over an allocator that does
 * not count them; the CUDA domain follows its own): call it after
 * the free, before the address can be allocated again; the next get of
 * each cache of the domain then re-validates buffer ids, so a new
 * allocation at the freed address misses.
 * @param domain  the domain.
 * @return 0 or EINVAL.
 */
MRMGR_EXPORT int mrmgr_domain_freed(mrmgr_domain_t *domain);

/** Destroy a domain no cache uses any more.
 * @param domain  the domain.
 * @return 0, EINVAL, EBUSY. */
MRMGR_EXPORT int mrmgr_domain_destroy(mrmgr_domain_t *domain);

/**
 * A cache of registrations of @p domain's allocations, by device
 * virtual address (mrmgr_get_device()).
 * @param pd      the protection domain.
 * @param attr    attributes, or NULL for the defaults.
 * @param domain  the memory domain (destroy it after the cache).
 * @param cache   receives the cache.
 * @return as mrmgr_cache_create(),
 * or EINVAL for a NULL domain.
 */
MRMGR_EXPORT int mrmgr_cache_create_device(struct ibv_pd *pd,
					   const struct mrmgr_cache_attr *attr,
					   mrmgr_domain_t *domain,
					   mrmgr_cache_t **cache);

/**
 * Get a registration covering [@p va, + @p length) of the cache's
 * domain. A miss registers the whole allocation that holds @p va (its
 * dma-buf, iova = device VA), so the region's MR addresses the request
 * by @p va.
 * @param cache   a device-VA cache.
 * @param va      the first device address.
 * @param length  bytes, at least 1.
 * @param access  IBV_ACCESS_* bits.
 * @param region  receives the region.
 * @return 0, or EINVAL (not a device cache, zero length, the
 * range past its allocation), what the domain's query or export said
 * (ENOENT: no allocation there), EOPNOTSUPP for an allocation that is
 * not whole pages (it may share a page with another: not cached), what
 * the device said (EOPNOTSUPP: no dma-buf registration).
 */
MRMGR_EXPORT int mrmgr_get_device(mrmgr_cache_t *cache, uint64_t va,
				  size_t length, unsigned int access,
				  mrmgr_region_t **region);
/** @} */

#ifdef __cplusplus
}
#endif

#endif /* MRMGR_MRMGR_H */
