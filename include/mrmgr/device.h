/*
 * libmrmgr - the device seam: registering memory with something other
 * than libibverbs' own devices.
 *
 * SPDX-License-Identifier: MIT
 */
#ifndef MRMGR_DEVICE_H
#define MRMGR_DEVICE_H

/**
 * @file device.h
 * @brief Device providers: the operations a cache calls on its device.
 *
 * A cache does a handful of things to its device: query its limits,
 * register, deregister and re-register memory, give ODP advice and, for
 * sharing, import another process's device, PDs and MRs. libmrmgr does
 * them with libibverbs by default. A program (or a library such as
 * libmrmgr-sim) whose PDs are not libibverbs' registers a provider: a
 * table of those operations plus a question, "is this context yours?".
 * Every context a cache or an importer meets is offered to the registered
 * providers, newest first; the first that claims it serves it for the
 * cache's whole life (the operations travel with the context, as
 * rdma-core's per-context verbs ops do); a context nobody claims is
 * libibverbs'.
 *
 * Errors: every hook returns 0 or a positive errno, the convention of the
 * rest of the library. @c EOPNOTSUPP (or @c ENOTSUP, @c ENOSYS) means "the
 * device cannot do this": libmrmgr remembers it per device and stops
 * asking. Anything else is an error of that call.
 *
 * Extensibility: zero-initialise the table and set
 * mrmgr_device_ops::size to @c sizeof(struct mrmgr_device_ops); hooks
 * added by later versions go at the end, so an older provider's table
 * (smaller @c size) keeps working with them unset.
 */

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <infiniband/verbs.h>
#include <mrmgr/mrmgr.h>

#ifdef __cplusplus
extern "C" {
#endif

/** What a device reports to mrmgr_device_ops::query_device. */
struct mrmgr_device_attr {
	char name[64];          /**< device name, unique among open devices */
	uint64_t max_mr_size;   /**< largest registration, bytes */
	uint32_t max_mr;        /**< most MRs the device holds (0: unknown) */
	uint32_t max_sge;       /**< SGEs per advise call (0: 1) */
	uint64_t page_size_cap; /**< bitmask of supported page sizes */
	/** @c ibv_odp_caps::general_caps; 0 on a device without ODP. */
	uint64_t odp_general;
	uint32_t odp_rc; /**< per-transport ODP caps (@c IBV_ODP_SUPPORT_SEND...) */
	uint32_t odp_uc; /**< likewise for UC */
	uint32_t odp_ud; /**< likewise for UD */
	uint32_t odp_xrc; /**< likewise for XRC */
};

/** Bits of mrmgr_device_ops::cap_flags: what a device is, said up front. */
enum mrmgr_device_cap_flags {
	/**
	 * The device pins pages with plain page references, as kernels
	 * before 5.9 did without fork support: after a fork(), the
	 * parent's copy-on-write pages are no longer the registered ones.
	 * The cache then treats every fork as invalidating.
	 */
	MRMGR_DEVICE_CAP_PLAIN_PINS = 1u << 0,
};

/** A device provider. Zero-initialise; see the file's description. */
struct mrmgr_device_ops {
	/** Reserved for flags that change how the table is read: 0. */
	uint64_t comp_mask;
	/** @c sizeof(struct mrmgr_device_ops) as the provider was built. */
	size_t size;
	/** Short static name for logs ("verbs", "sim"). Required. */
	const char *name;
	/** Bits of enum mrmgr_device_cap_flags. */
	uint64_t cap_flags;

	/**
	 * Nonzero when @p ctx is one of this provider's open contexts.
	 * Required. Called when a cache is created (and by
	 * mrmgr_region_alias(), mrmgr_cache_create() with several PDs); must
	 * not call back into libmrmgr.
	 */
	int (*owns_context)(const struct ibv_context *ctx);
	/** Fill @p attr (zeroed by the caller). Required. */
	int (*query_device)(struct ibv_context *ctx,
			    struct mrmgr_device_attr *attr);
	/** Register; 0 with @p *mr set, or an errno. Required. */
	int (*reg_mr)(struct ibv_pd *pd, void *addr, size_t length, int access,
		      struct ibv_mr **mr);
	/** Deregister; 0 or an errno (the MR may then still be live). Required. */
	int (*dereg_mr)(struct ibv_mr *mr);
	/**
	 * ibv_rereg_mr(): returns 0 or the negative
	 * @c enum @c ibv_rereg_mr_err_code that says what state the MR is
	 * in, with the positive errno in @p *err. Optional (NULL: the device
	 * cannot, growth registers anew).
	 */
	int (*rereg_mr)(struct ibv_mr *mr, int flags, struct ibv_pd *pd,
			void *addr, size_t length, int access, int *err);
	/** ibv_advise_mr(); 0 or an errno. Optional (NULL: no advice). */
	int (*advise_mr)(struct ibv_pd *pd, enum ibv_advise_mr_advice advice,
			 uint32_t flags, struct ibv_sge *sg_list,
			 uint32_t num_sge);

	/**
	 * @name Sharing (optional; all of claim_fd ... unimport_mr, or none)
	 * @{
	 */
	/** 0 when MRs of @p pd's device can be imported elsewhere. */
	int (*can_import)(struct ibv_pd *pd);
	/**
	 * Nonzero when @p cmd_fd is the command descriptor of one of this
	 * provider's devices (checked, not guessed: mrmgr_importer_open()
	 * offers descriptors from other processes to every provider).
	 */
	int (*claim_fd)(int cmd_fd);
	/** ibv_import_device(); on success the context owns @p cmd_fd. */
	int (*import_device)(int cmd_fd, struct ibv_context **ctx);
	/** Close an imported context. */
	int (*close_device)(struct ibv_context *ctx);
	/** ibv_import_pd(). */
	int (*import_pd)(struct ibv_context *ctx, uint32_t pd_handle,
			 struct ibv_pd **pd);
	/** ibv_unimport_pd(). */
	int (*unimport_pd)(struct ibv_pd *pd);
	/** ibv_import_mr(). */
	int (*import_mr)(struct ibv_pd *pd, uint32_t mr_handle,
			 struct ibv_mr **mr);
	/** ibv_unimport_mr(). */
	int (*unimport_mr)(struct ibv_mr *mr);
	/** @} */

	/**
	 * ibv_reg_dmabuf_mr(): register @p length bytes at @p offset of the
	 * dma-buf @p fd, the MR's address being @p iova; 0 with @p *mr set,
	 * or an errno. Optional, appended in 1.1 (a provider built with the
	 * 1.0 header has a smaller @c size and reads as NULL): NULL, or
	 * EOPNOTSUPP from the device, says the device cannot register
	 * dma-bufs. The MR holds its own reference on the buffer; @p fd
	 * stays the caller's.
	 */
	int (*reg_dmabuf_mr)(struct ibv_pd *pd, uint64_t offset, size_t length,
			     uint64_t iova, int fd, int access,
			     struct ibv_mr **mr);
};

/**
 * Register a device provider. Contexts created before the call are
 * claimed by it from then on; caches created earlier keep the provider
 * they were created with. The library keeps a copy of @p ops; the
 * functions it names must stay callable while any cache uses them.
 *
 * @param ops  the provider; @c comp_mask 0, @c size at least up to
 *             @c dereg_mr, and bytes beyond this library's table zero.
 * @return 0; @c EINVAL for a NULL or malformed table (a missing required
 *   hook, a partial set of sharing hooks); @c EEXIST when @p ops is
 *   registered already; @c ENOSPC when 8 providers are.
 */
MRMGR_EXPORT int mrmgr_device_register(const struct mrmgr_device_ops *ops);

/**
 * Stop offering new contexts to a provider. Caches and importers that use
 * it keep doing so until they are destroyed.
 * @param ops  the table given to mrmgr_device_register().
 * @return 0, @c EINVAL (NULL) or @c ENOENT (not registered).
 */
MRMGR_EXPORT int mrmgr_device_unregister(const struct mrmgr_device_ops *ops);

/**
 * The provider whose device @p cmd_fd is the command descriptor of: the
 * registered providers' mrmgr_device_ops::claim_fd are asked, newest
 * first, then libibverbs' own (a uverbs character device). For importers
 * (libmrmgr-share's mrmgr_importer_open()), which then call the
 * provider's import hooks themselves.
 * @param cmd_fd  a descriptor, typically received with @c SCM_RIGHTS.
 * @return the provider's table (valid for the life of the process), or
 *   NULL when no provider claims the descriptor (or it is negative).
 */
MRMGR_EXPORT const struct mrmgr_device_ops *mrmgr_device_claim_fd(int cmd_fd);

/**
 * Log a line through libmrmgr's log (the handler of
 * mrmgr_set_log_handler(), the level of @c MRMGR_LOG_LEVEL), for
 * providers, so their lines go where the library's do. Nothing is
 * formatted for a level that is off.
 * @param level  the line's level.
 * @param fmt    printf format.
 * @param ap     its arguments.
 */
MRMGR_EXPORT void mrmgr_device_vlog(enum mrmgr_log_level level,
				    const char *fmt, va_list ap)
	__attribute__((format(printf, 2, 0)));

#ifdef __cplusplus
}
#endif

#endif /* MRMGR_DEVICE_H */
