/*
 * libmrmgr - the simulated HCA.
 *
 * SPDX-License-Identifier: MIT
 */
#ifndef MRMGR_SIM_H
#define MRMGR_SIM_H

/**
 * @file sim.h
 * @brief A software model of an RDMA HCA's memory-region semantics.
 *
 * The simulated HCA lets tests, examples and middleware exercise libmrmgr
 * (and their own MR handling) on machines without an RDMA device. It hands
 * out real-looking @c struct @c ibv_context, @c ibv_pd and @c ibv_mr objects
 * (lkey, rkey, addr, length, pd, context filled in) so caller code is the
 * same on both.
 *
 * @warning These objects are not libibverbs objects: never pass them to
 * libibverbs itself (ibv_reg_mr(), ibv_dealloc_pd(), ...). Use the
 * mrmgr_sim_* calls, or hand the PD to mrmgr_cache_create().
 *
 * The simulated HCA is a library of its own, libmrmgr-sim
 * (`pkg-config --cflags --libs mrmgr-sim`), never part of libmrmgr. It
 * plugs into libmrmgr through the public device seam (mrmgr/device.h)
 * like any provider: it registers itself when loaded, and a cache, an
 * alias or an importer given one of its contexts, PDs or command
 * descriptors uses it through that seam.
 *
 * What it models:
 *  - keys: unique, never reused while an MR lives; lkey/rkey layout of the
 *    chosen personality;
 *  - validation: the same rules and errno values as ibv_reg_mr();
 *  - pinning: pages are populated (write-faulted for writable access) and
 *    held, counted against a memlock budget; exceeding it fails with
 *    @c ENOMEM like a real HCA;
 *  - cost: a fixed plus per-page busy-wait for registration and
 *    deregistration, so benchmarks can model real devices;
 *  - fault injection: the Nth operation, or every one matching a predicate,
 *    fails with a chosen errno;
 *  - page identity: the physical pages behind a registration are recorded
 *    (/proc/self/pagemap) and held, and mrmgr_sim_write()/mrmgr_sim_read()
 *    report a stale access (@c ESTALE) when the pages now mapped at an
 *    address are not the registered ones, the silent corruption a real HCA
 *    would cause;
 *  - on-demand paging (mlx5 personality): explicit and implicit ODP MRs
 *    (@c IBV_ACCESS_ON_DEMAND) pin nothing and count no memlock; a
 *    simulated access counts a page fault (with a configurable cost) for
 *    every page the device does not have present yet, and always goes to
 *    the pages mapped now (ODP is never stale); mrmgr_sim_advise_mr()
 *    makes pages present like ibv_advise_mr(). The rxe personality
 *    refuses ODP (@c EINVAL) and advice (@c EOPNOTSUPP), as rdma_rxe does;
 *  - cross-process sharing (mlx5 personality): a device's @c cmd_fd is a
 *    real descriptor (a read-only memfd holding the device's table of PDs
 *    and MRs, the way the kernel's objects hang off the uverbs file), so
 *    it can be passed with @c SCM_RIGHTS; mrmgr_sim_import_device(),
 *    mrmgr_sim_import_pd() and mrmgr_sim_import_mr() give another
 *    context, in this process or another one, the same PD and MR handles
 *    and keys, with the owner's lifetime (deregistration by the owner
 *    kills the import). The rxe personality refuses import with
 *    @c EOPNOTSUPP, as rdma_rxe does. See doc/sharing.md for what is and
 *    is not modelled across processes.
 *
 * All calls are thread-safe.
 */

#include <stddef.h>
#include <stdint.h>
#include <infiniband/verbs.h>
#include <mrmgr/mrmgr.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Device personalities. */
enum mrmgr_sim_personality {
	/** Like mlx5: lkey == rkey, rereg, ODP and advise supported. */
	MRMGR_SIM_MLX5 = 0,
	/** Like rdma_rxe: rereg/ODP/advise/import unsupported, as measured. */
	MRMGR_SIM_RXE = 1,
};

/** Bits of mrmgr_sim_attr::comp_mask. */
enum mrmgr_sim_attr_mask {
	MRMGR_SIM_ATTR_PERSONALITY = 1u << 0, /**< personality is set */
	MRMGR_SIM_ATTR_MEMLOCK = 1u << 1,     /**< memlock_bytes is set */
	MRMGR_SIM_ATTR_COST = 1u << 2,        /**< the *_ns cost fields are set */
	MRMGR_SIM_ATTR_FLAGS = 1u << 3,       /**< flags is set */
	MRMGR_SIM_ATTR_LIMITS = 1u << 4,      /**< max_mr and max_mr_size are set */
	MRMGR_SIM_ATTR_ODP_COST = 1u << 5,    /**< odp_fault_ns and odp_prefetch_ns_per_page are set */
};

/** Bits of mrmgr_sim_attr::flags. */
enum mrmgr_sim_flags {
	/**
	 * Do not populate, hold or identify pages: registration only checks
	 * that the range is mapped. For benchmarks of cache logic at scale;
	 * stale accesses cannot be detected then.
	 */
	MRMGR_SIM_FLAG_NO_PIN = 1u << 0,
	/**
	 * Give every MR an rkey different from its lkey (same index, another
	 * key byte), so code that sends an lkey where an rkey belongs fails
	 * with @c ENOENT instead of passing. Real mlx5 and current
	 * rdma_rxe hand out rkey == lkey, which hides that bug.
	 */
	MRMGR_SIM_FLAG_DISTINCT_RKEY = 1u << 1,
	/**
	 * mlx5 personality without @c IBV_ODP_SUPPORT_IMPLICIT (explicit ODP
	 * only, like devices whose firmware lacks the null mkey): implicit
	 * registrations fail with @c EINVAL.
	 */
	MRMGR_SIM_FLAG_NO_IMPLICIT_ODP = 1u << 2,
	/**
	 * rxe personality only (else @c EINVAL): rdma_rxe of Linux 6.17 and
	 * later, with explicit ODP (the caps 7.3.4 reports: RC send, recv,
	 * write, read, atomic, SRQ; UD send, recv) and ibv_advise_mr, still
	 * without implicit ODP, rereg or import. The device is named
	 * @c rxe_odp_sim_N: libmrmgr takes it for rxe, so its rxe ODP quirk
	 * (doc/odp.md, "Device quirks") applies to it as to a real rxe.
	 */
	MRMGR_SIM_FLAG_RXE_ODP = 1u << 3,
};

/** Attributes of a simulated device. Zero-initialise; set comp_mask bits. */
struct mrmgr_sim_attr {
	uint64_t comp_mask;       /**< bits of enum mrmgr_sim_attr_mask */
	uint32_t personality;     /**< enum mrmgr_sim_personality (default MLX5) */
	uint32_t flags;           /**< bits of enum mrmgr_sim_flags */
	/** Pinning budget in bytes; default the RLIMIT_MEMLOCK soft limit
	 *  (UINT64_MAX when unlimited). */
	uint64_t memlock_bytes;
	uint64_t reg_ns;            /**< fixed cost of a registration */
	uint64_t reg_ns_per_page;   /**< plus this per 4 KiB page */
	uint64_t dereg_ns;          /**< fixed cost of a deregistration */
	uint64_t dereg_ns_per_page; /**< plus this per page */
	uint32_t max_mr;            /**< device limit on live MRs (default 1<<24) */
	uint64_t max_mr_size;       /**< device limit on one MR (default 1<<40) */
	/**
	 * Cost of one ODP page fault: busy-waited by the simulated access
	 * that finds a page not present in the device (default 0).
	 */
	uint64_t odp_fault_ns;
	/**
	 * Cost per page a synchronous prefetch (@c IBV_ADVISE_MR_FLAG_FLUSH)
	 * makes present, busy-waited by mrmgr_sim_advise_mr(). An
	 * asynchronous prefetch does the same work but charges nothing to the
	 * caller: a real device does it in a kernel worker (default 0).
	 */
	uint64_t odp_prefetch_ns_per_page;
};

/**
 * Open a simulated device.
 * @param attr  attributes (struct mrmgr_sim_attr), or NULL for the defaults.
 * @param ctx   receives the simulated device context.
 * @return 0, @c EINVAL (NULL @p ctx, unknown mask/flag bits or
 *         personality), or @c ENOMEM.
 */
MRMGR_EXPORT int mrmgr_sim_open(const struct mrmgr_sim_attr *attr,
				struct ibv_context **ctx);
/**
 * Close a simulated device.
 * @param ctx  a context from mrmgr_sim_open() or mrmgr_sim_import_device().
 * @return 0, @c EINVAL, or @c EBUSY while PDs or MRs are still allocated.
 */
MRMGR_EXPORT int mrmgr_sim_close(struct ibv_context *ctx);
/**
 * Allocate a protection domain.
 * @param ctx  a simulated device context.
 * @param pd   receives the PD.
 * @return 0, @c EINVAL or @c ENOMEM.
 */
MRMGR_EXPORT int mrmgr_sim_alloc_pd(struct ibv_context *ctx,
				    struct ibv_pd **pd);
/**
 * Free a PD.
 * @param pd  a PD from mrmgr_sim_alloc_pd() (or an imported one).
 * @return 0, @c EINVAL, or @c EBUSY while MRs use it.
 */
MRMGR_EXPORT int mrmgr_sim_dealloc_pd(struct ibv_pd *pd);

/**
 * Register memory, with ibv_reg_mr()'s rules and errno values:
 * @c EINVAL for REMOTE_WRITE/REMOTE_ATOMIC without LOCAL_WRITE, unknown
 * access bits, zero length, overflow or a length over max_mr_size;
 * @c EFAULT for unmapped memory or write access to read-only memory;
 * @c ENOMEM over the memlock budget or max_mr.
 *
 * With @c IBV_ACCESS_ON_DEMAND (mlx5 personality only, else @c EINVAL)
 * the MR is an ODP MR: nothing is pinned, populated or counted against
 * the budget, and the range need not be mapped yet (as on mlx5, problems
 * show at fault time). @p addr NULL with @p length @c SIZE_MAX registers
 * an implicit ODP MR covering the whole address space (@c EINVAL under
 * ::MRMGR_SIM_FLAG_NO_IMPLICIT_ODP). Registration costs only @c reg_ns.
 * @param pd      a simulated PD.
 * @param addr    start of the memory (NULL only for implicit ODP).
 * @param length  bytes (@c SIZE_MAX only for implicit ODP).
 * @param access  @c ibv_access_flags.
 * @param mr      receives the MR.
 * @return 0 or one of the errno values above.
 */
MRMGR_EXPORT int mrmgr_sim_reg_mr(struct ibv_pd *pd, void *addr,
				  size_t length, unsigned int access,
				  struct ibv_mr **mr);
/**
 * Deregister; unpins and frees the keys.
 * @param mr  an MR from mrmgr_sim_reg_mr().
 * @return 0 or @c EINVAL.
 */
MRMGR_EXPORT int mrmgr_sim_dereg_mr(struct ibv_mr *mr);

/**
 * Re-register an MR in place, as ibv_rereg_mr() does on the personality
 * being modelled.
 *
 * The "mlx5-like" personality implements every flag of
 * @c enum @c ibv_rereg_mr_flags: @c IBV_REREG_MR_CHANGE_TRANSLATION pins
 * the new range (charging the memlock budget for it while the old range is
 * still pinned, as the kernel does), then lets the old pages go;
 * @c IBV_REREG_MR_CHANGE_ACCESS and @c IBV_REREG_MR_CHANGE_PD keep the
 * keys; a translation keeps them while the new page count fits the key's
 * slot (the next power of two at or above the page count the keys were
 * made for) and gets new keys otherwise. While the call runs the MR
 * refuses simulated access (@c ENOENT), as a real MR is revoked during it.
 * The "rxe-like" personality fails every call with
 * @c IBV_REREG_MR_ERR_CMD and errno @c EOPNOTSUPP, leaving the MR as it
 * was, exactly as rdma_rxe does.
 *
 * Unlike ibv_rereg_mr(), and like every libmrmgr call, this returns a
 * positive errno; the code ibv_rereg_mr() would have returned goes to
 * @p code, and says what state the MR is in afterwards:
 *  - @c IBV_REREG_MR_ERR_INPUT, @c IBV_REREG_MR_ERR_DONT_FORK_NEW: the MR
 *    is unchanged and valid;
 *  - @c IBV_REREG_MR_ERR_DO_FORK_OLD: the change was made and is valid;
 *  - @c IBV_REREG_MR_ERR_CMD, @c IBV_REREG_MR_ERR_CMD_AND_DO_FORK_NEW: the
 *    MR must not be used (the sim refuses access through its keys) and
 *    must still be deregistered.
 * Fault injection (::MRMGR_SIM_OP_REREG) can produce each of them.
 *
 * @param mr      a live MR of a simulated device.
 * @param flags   bits of @c enum @c ibv_rereg_mr_flags.
 * @param pd      the new PD (same device) with @c IBV_REREG_MR_CHANGE_PD.
 * @param addr    the new start with @c IBV_REREG_MR_CHANGE_TRANSLATION.
 * @param length  the new length, likewise.
 * @param access  the new access with @c IBV_REREG_MR_CHANGE_ACCESS, else 0.
 * @param code    receives 0 or the negative @c enum
 *                @c ibv_rereg_mr_err_code; may be NULL.
 * @return 0, or a positive errno: @c EINVAL for bad arguments, @c EFAULT
 *         for memory that cannot be pinned, @c ENOMEM over the budget,
 *         @c EOPNOTSUPP on the rxe-like personality, or an injected one.
 */
MRMGR_EXPORT int mrmgr_sim_rereg_mr(struct ibv_mr *mr, int flags,
				    struct ibv_pd *pd, void *addr,
				    size_t length, int access, int *code);

/**
 * A simulated RDMA WRITE of @p len bytes from @p src to @p remote_addr
 * through @p rkey, as a remote peer in @p pd's context would issue it.
 *
 * @param pd           the PD of the QP the peer would write through.
 * @param rkey         the remote key.
 * @param remote_addr  the target address in the registered range.
 * @param src          the bytes to write.
 * @param len          how many, at least 1.
 * @return 0; @c EINVAL for NULL or zero-length arguments; @c ENOENT when
 *   @p rkey names no live MR of that PD; @c ERANGE outside the MR's bounds;
 *   @c EACCES when the MR lacks REMOTE_WRITE; @c ESTALE (and the
 *   stale_accesses counter) when the pages now mapped are not the
 *   registered ones. Nothing is written on error.
 */
MRMGR_EXPORT int mrmgr_sim_write(struct ibv_pd *pd, uint32_t rkey,
				 uint64_t remote_addr, const void *src,
				 size_t len);
/**
 * A simulated RDMA READ; errors as mrmgr_sim_write(), REMOTE_READ needed.
 * @param pd           as mrmgr_sim_write().
 * @param rkey         the remote key.
 * @param remote_addr  the source address in the registered range.
 * @param dst          receives the bytes.
 * @param len          how many, at least 1.
 * @return 0 or an errno as mrmgr_sim_write(); nothing is read on error.
 */
MRMGR_EXPORT int mrmgr_sim_read(struct ibv_pd *pd, uint32_t rkey,
				uint64_t remote_addr, void *dst, size_t len);

/*
 * On an ODP MR, mrmgr_sim_write()/mrmgr_sim_read() go through the pages
 * mapped now (never ESTALE) and count a fault (odp_faults, odp_fault_ns)
 * for each page the device does not have present with the same physical
 * page (or, for a write, present writable); a page that is not mapped or,
 * for a write, not writable fails the access with EFAULT, the error a QP
 * on real hardware would go into.
 */

/**
 * ibv_advise_mr() on the simulated HCA, with the errno values of its man
 * page:
 *  - @c EOPNOTSUPP: the device has no advise (rxe personality);
 *  - @c ENOTSUP: unknown @p advice (equal to @c EOPNOTSUPP on Linux);
 *  - @c EINVAL: @p pd is not a live simulated PD, unknown @p flags bits,
 *    NULL @p sg_list, @p num_sge 0 or over the device's max_sge (30);
 *  - @c EFAULT: an lkey that names no live MR or a non-ODP MR, an SGE out
 *    of its MR's bounds, or (with @c IBV_ADVISE_MR_FLAG_FLUSH) memory not
 *    mapped, or not writable for @c _PREFETCH_WRITE;
 *  - @c EPERM: an MR of another PD, or @c _PREFETCH_WRITE on an MR without
 *    @c IBV_ACCESS_LOCAL_WRITE;
 *  - @c ENOENT: an lkey whose index names a live MR but whose key byte is
 *    not that MR's (inconsistent with the MR);
 *  - @c ENOMEM and anything else: by fault injection (::MRMGR_SIM_OP_ADVISE).
 *
 * @c PREFETCH and @c PREFETCH_WRITE fault the pages in and make them
 * present in the device (read-only, resp. writable); @c PREFETCH_NO_FAULT
 * makes present only pages the CPU already has. With
 * @c IBV_ADVISE_MR_FLAG_FLUSH page-in failures are @c EFAULT and the
 * caller pays odp_prefetch_ns_per_page per page; without it failures are
 * ignored (best effort) and the caller pays nothing.
 * @param pd       a simulated PD.
 * @param advice   @c IBV_ADVISE_MR_ADVICE_PREFETCH, @c _PREFETCH_WRITE or @c _PREFETCH_NO_FAULT.
 * @param flags    0 or @c IBV_ADVISE_MR_FLAG_FLUSH.
 * @param sg_list  the ranges, each with the lkey of an ODP MR of @p pd.
 * @param num_sge  entries in @p sg_list.
 * @return 0 or one of the errno values above.
 */
MRMGR_EXPORT int mrmgr_sim_advise_mr(struct ibv_pd *pd,
				     enum ibv_advise_mr_advice advice,
				     uint32_t flags, struct ibv_sge *sg_list,
				     uint32_t num_sge);

/** Operations fault injection can target. */
enum mrmgr_sim_op {
	MRMGR_SIM_OP_REG = 0,   /**< registration */
	MRMGR_SIM_OP_DEREG = 1, /**< deregistration (the MR stays live) */
	/**
	 * mrmgr_sim_advise_mr(), after argument validation. The predicate
	 * gets the first SGE's address, the SGEs' total length and the
	 * advice (in place of @c access).
	 */
	MRMGR_SIM_OP_ADVISE = 2,
	/**
	 * re-registration (mrmgr_sim_rereg_mr()): fails with
	 * mrmgr_sim_fault::err as errno and mrmgr_sim_fault::rereg_code
	 * (default @c IBV_REREG_MR_ERR_CMD), leaving the MR in the state that
	 * code promises.
	 */
	MRMGR_SIM_OP_REREG = 3,
	/**
	 * mrmgr_sim_import_pd() and mrmgr_sim_import_mr(), armed on the
	 * importing context, after argument validation.
	 */
	MRMGR_SIM_OP_IMPORT = 4,
};

/** Bits of mrmgr_sim_fault::comp_mask. */
enum mrmgr_sim_fault_mask {
	/** mrmgr_sim_fault::rereg_code is set. */
	MRMGR_SIM_FAULT_REREG_CODE = 1u << 0,
};

/** Predicate for fault injection: nonzero means "fail this one". */
typedef int (*mrmgr_sim_fault_pred)(void *arg, void *addr, size_t length,
				    unsigned int access);

/** A fault to inject. */
struct mrmgr_sim_fault {
	uint64_t comp_mask;  /**< bits of enum mrmgr_sim_fault_mask */
	uint32_t op;         /**< enum mrmgr_sim_op */
	int err;             /**< positive errno to fail with */
	/** Fail the Nth matching operation from now (1 = the next one). */
	uint64_t nth;
	/** How many matching operations fail from then on (0 = all). */
	uint64_t count;
	mrmgr_sim_fault_pred pred; /**< NULL: every operation matches */
	void *pred_arg;            /**< passed to @c pred */
	/**
	 * For ::MRMGR_SIM_OP_REREG: the negative @c enum
	 * @c ibv_rereg_mr_err_code to fail with (needs
	 * ::MRMGR_SIM_FAULT_REREG_CODE; default @c IBV_REREG_MR_ERR_CMD).
	 */
	int rereg_code;
};

/**
 * Arm a fault. Several may be armed; the first that fires wins.
 * @param ctx    a simulated device context.
 * @param fault  the fault to arm (copied).
 * @return 0, @c EINVAL, or @c ENOSPC when too many are armed (16).
 */
MRMGR_EXPORT int mrmgr_sim_inject_fault(struct ibv_context *ctx,
					const struct mrmgr_sim_fault *fault);
/**
 * Disarm every fault.
 * @param ctx  a simulated device context.
 * @return 0 or @c EINVAL.
 */
MRMGR_EXPORT int mrmgr_sim_clear_faults(struct ibv_context *ctx);

/** Device statistics; fields are only ever added at the end. */
struct mrmgr_sim_stats {
	uint64_t live_mrs;          /**< MRs registered now */
	uint64_t pinned_bytes;      /**< bytes pinned now */
	uint64_t peak_pinned_bytes; /**< highest pinned_bytes seen */
	uint64_t registrations;     /**< successful registrations */
	uint64_t deregistrations;   /**< successful deregistrations */
	uint64_t reg_failures;      /**< registrations refused */
	uint64_t faults_injected;   /**< operations failed by injection */
	uint64_t pages_registered;  /**< pages registered, in total */
	uint64_t writes;            /**< successful simulated writes */
	uint64_t reads;             /**< successful simulated reads */
	uint64_t access_errors;     /**< writes/reads refused: key, bounds, access */
	uint64_t stale_accesses;    /**< writes/reads that found other pages */
	uint64_t unverified_pages;  /**< pages whose identity could not be held */
	uint64_t live_pds;          /**< PDs allocated now */
	/* Added with on-demand paging. */
	uint64_t advise_calls;      /**< mrmgr_sim_advise_mr() calls on this device */
	uint64_t advise_errors;     /**< of which failed */
	uint64_t odp_faults;        /**< simulated ODP page faults */
	uint64_t odp_prefetched_pages; /**< pages prefetches made present */
	/* Added with growth and re-registration. */
	uint64_t reregs;            /**< successful re-registrations */
	uint64_t rereg_failures;    /**< re-registrations that failed */
	uint64_t rereg_pages;       /**< pages pinned by re-registrations, in total */
	uint64_t rereg_key_changes; /**< re-registrations that changed the keys */
	/* Added with shared MRs. */
	uint64_t imported_pds;      /**< PDs imported into this context now */
	uint64_t imported_mrs;      /**< MRs imported into this context now */
	uint64_t import_failures;   /**< imports refused (handle, PD, personality, injection) */
	/** accesses through an imported MR whose owner has deregistered it
	 *  (refused with @c ENOENT, as the shared kernel object is gone) */
	uint64_t dead_import_accesses;
	/** MRs not published in the export table (full): they cannot be
	 *  imported */
	uint64_t unexportable_mrs;
};

/**
 * Copy the device's statistics (at most @p size bytes).
 * @param ctx    a simulated device context.
 * @param stats  receives the statistics.
 * @param size   @c sizeof(struct mrmgr_sim_stats) as the caller was built.
 * @return 0 or @c EINVAL.
 */
MRMGR_EXPORT int mrmgr_sim_query_stats(struct ibv_context *ctx,
				       struct mrmgr_sim_stats *stats,
				       size_t size);

/**
 * @name Import (cross-process sharing)
 * The simulated ibv_import_device(), ibv_import_pd(), ibv_import_mr() and
 * their unimport calls, with rdma-core's semantics: the importer gets
 * objects with the owner's handles and keys; nothing is reference
 * counted (if the owner deregisters an MR, imports of it die: accesses
 * fail with @c ENOENT, counted in mrmgr_sim_stats::dead_import_accesses);
 * an imported MR's @c addr is NULL, as the man page says (the owner's
 * address is in the export descriptor). Simulated accesses through an
 * imported PD (mrmgr_sim_write(), mrmgr_sim_read()) reach the owner's
 * memory: directly within one process, with process_vm_writev() and
 * process_vm_readv() across processes (ptrace permission needed), with
 * page-identity checks in both cases where pagemap shows PFNs.
 * @{
 */

/**
 * Import a simulated device from its command descriptor (@c cmd_fd of a
 * simulated context, received with @c SCM_RIGHTS or dup()ed), like
 * ibv_import_device(): the new context owns @p cmd_fd on success and
 * closes it in mrmgr_sim_close(); on failure it stays the caller's.
 * @param cmd_fd  the owner's command descriptor.
 * @param ctx     receives the importing context.
 * @return 0; @c EINVAL when @p cmd_fd is not a simulated device's;
 *   @c EOPNOTSUPP for the rxe personality; @c ENOMEM.
 */
MRMGR_EXPORT int mrmgr_sim_import_device(int cmd_fd, struct ibv_context **ctx);
/**
 * Import the owner's PD @p pd_handle into a context from
 * mrmgr_sim_import_device(). Free it with mrmgr_sim_unimport_pd() (or
 * mrmgr_sim_dealloc_pd(), which for an imported PD only unimports).
 * @param ctx        a context from mrmgr_sim_import_device().
 * @param pd_handle  the owner's PD handle.
 * @param pd         receives the imported PD.
 * @return 0; @c EINVAL (not an imported context, NULL); @c ENOENT (no
 *   such PD in the owner); @c EOPNOTSUPP (rxe personality); an injected
 *   error (::MRMGR_SIM_OP_IMPORT).
 */
MRMGR_EXPORT int mrmgr_sim_import_pd(struct ibv_context *ctx,
				     uint32_t pd_handle, struct ibv_pd **pd);
/**
 * Forget an imported PD.
 * @param pd  a PD from mrmgr_sim_import_pd().
 * @return 0, @c EINVAL, or @c EBUSY while imported MRs use it.
 */
MRMGR_EXPORT int mrmgr_sim_unimport_pd(struct ibv_pd *pd);
/**
 * Import the owner's MR @p mr_handle into an imported PD (the MR must be
 * in that PD). The MR has the owner's handle, keys and length, @c addr
 * NULL.
 * @param pd         a PD from mrmgr_sim_import_pd().
 * @param mr_handle  the owner's MR handle.
 * @param mr         receives the imported MR.
 * @return 0; @c EINVAL; @c ENOENT (no such live MR);
 *   @c EOPNOTSUPP; an injected error.
 */
MRMGR_EXPORT int mrmgr_sim_import_mr(struct ibv_pd *pd, uint32_t mr_handle,
				     struct ibv_mr **mr);
/**
 * Forget an imported MR (the owner's MR is not affected).
 * @param mr  an MR from mrmgr_sim_import_mr().
 * @return 0 or @c EINVAL.
 */
MRMGR_EXPORT int mrmgr_sim_unimport_mr(struct ibv_mr *mr);

/** @} */

/**
 * Whether page identity can be checked in this process
 * (/proc/self/pagemap gives PFNs only with CAP_SYS_ADMIN).
 * @return 1 when it can, 0 when not.
 */
MRMGR_EXPORT int mrmgr_sim_page_identity_available(void);

/**
 * @name A simulated device allocator (MRMGR_SIM_1.1)
 *
 * A memory domain for tests and tools (mrmgr_cache_create_device()):
 * device VAs no host mapping uses, each allocation a memfd (its dma-buf),
 * buffer ids never given twice, an address given again after a free (the
 * most recently freed range of the same size first), allocations of
 * several segments, deferred frees.
 * @{
 */
struct mrmgr_sim_gpu;

/**
 * A new allocator.
 * @param gpu  receives it.
 * @return 0, EINVAL, ENOMEM.
 */
MRMGR_EXPORT int mrmgr_sim_gpu_open(struct mrmgr_sim_gpu **gpu);
/**
 * Close it, after mrmgr_domain_destroy() of its domain.
 * @param gpu  the allocator.
 * @return 0 or EINVAL.
 */
MRMGR_EXPORT int mrmgr_sim_gpu_close(struct mrmgr_sim_gpu *gpu);
/**
 * Its domain's operations: mrmgr_domain_create(mrmgr_sim_gpu_ops(),
 * gpu, &domain).
 * @return the operations (static).
 */
MRMGR_EXPORT const struct mrmgr_domain_ops *mrmgr_sim_gpu_ops(void);
/**
 * Allocate device memory.
 * @param gpu   the allocator.
 * @param size  bytes (rounded up to 64 KiB).
 * @param nseg  segments of one VA range, at least 1.
 * @param va    receives the device address.
 * @return 0, EINVAL, ENOMEM, or memfd's errno.
 */
MRMGR_EXPORT int mrmgr_sim_gpu_alloc(struct mrmgr_sim_gpu *gpu, size_t size,
				     unsigned int nseg, uint64_t *va);
/**
 * Free an allocation: the free counter moves, the address may be given
 * again.
 * @param gpu  the allocator.
 * @param va   the allocation's address.
 * @return 0 or EINVAL (no allocation there).
 */
MRMGR_EXPORT int mrmgr_sim_gpu_free(struct mrmgr_sim_gpu *gpu, uint64_t va);
/**
 * As mrmgr_sim_gpu_free(), the address given again only after
 * mrmgr_sim_gpu_sync().
 * @param gpu  the allocator.
 * @param va   the allocation's address.
 * @return 0 or EINVAL.
 */
MRMGR_EXPORT int mrmgr_sim_gpu_free_deferred(struct mrmgr_sim_gpu *gpu,
					     uint64_t va);
/**
 * Let deferred frees' addresses be given again.
 * @param gpu  the allocator.
 * @return 0 or EINVAL.
 */
MRMGR_EXPORT int mrmgr_sim_gpu_sync(struct mrmgr_sim_gpu *gpu);
/**
 * Copy to device memory (the host's view, as cudaMemcpy).
 * @param gpu  the allocator.
 * @param va   the destination, inside one allocation.
 * @param src  the bytes.
 * @param len  how many.
 * @return 0 or EINVAL (not inside one allocation).
 */
MRMGR_EXPORT int mrmgr_sim_gpu_write(struct mrmgr_sim_gpu *gpu, uint64_t va,
				     const void *src, size_t len);
/**
 * Copy from device memory; as mrmgr_sim_gpu_write().
 * @param gpu  the allocator.
 * @param va   the source, inside one allocation.
 * @param dst  receives the bytes.
 * @param len  how many.
 * @return 0 or EINVAL.
 */
MRMGR_EXPORT int mrmgr_sim_gpu_read(struct mrmgr_sim_gpu *gpu, uint64_t va,
				    void *dst, size_t len);
/**
 * The allocation's segments.
 * @param gpu       the allocator.
 * @param va        an address inside the allocation.
 * @param nseg      receives how many.
 * @param seg_size  receives each one's size.
 * @return 0, EINVAL, ENOENT (no allocation there).
 */
MRMGR_EXPORT int mrmgr_sim_gpu_segments(struct mrmgr_sim_gpu *gpu,
					uint64_t va, unsigned int *nseg,
					uint64_t *seg_size);
/** @} */

#ifdef __cplusplus
}
#endif

#endif /* MRMGR_SIM_H */
