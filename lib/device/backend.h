/*
 * The seam between the cache and a device: the few verbs operations the
 * cache needs. One implementation calls libibverbs (backend_verbs.c), the
 * other is the simulated HCA (sim/). Backends never call into the cache.
 *
 * SPDX-License-Identifier: MIT
 */
#ifndef MRMGR__BACKEND_H
#define MRMGR__BACKEND_H

#include <stddef.h>
#include <stdint.h>
#include <infiniband/verbs.h>

/* What the cache needs to know about a device, read once at cache creation. */
struct mrmgr__dev_caps {
	char name[64];           /* ibv_get_device_name() or the sim's name */
	uint64_t max_mr_size;    /* largest registration, bytes */
	uint32_t max_mr;         /* most MRs the device holds */
	uint32_t max_sge;        /* for advise batches */
	uint64_t page_size_cap;  /* bitmask of supported page sizes */
	/* ibv_query_device_ex() odp_caps; all 0 on a device without ODP. */
	uint64_t odp_general;    /* IBV_ODP_SUPPORT, IBV_ODP_SUPPORT_IMPLICIT */
	uint32_t odp_rc, odp_uc, odp_ud, odp_xrc; /* IBV_ODP_SUPPORT_SEND... */
};

struct mrmgr__backend {
	const char *name; /* "verbs" or "sim" */
	/* Returns 0 or a positive errno. */
	int (*query_device)(struct ibv_context *ctx, struct mrmgr__dev_caps *caps);
	/* Returns 0 and *mr, or a positive errno (never 0 with a NULL *mr). */
	int (*reg_mr)(struct ibv_pd *pd, void *addr, size_t length, int access,
		      struct ibv_mr **mr);
	/* Returns 0 or a positive errno; on error the MR may still be live. */
	int (*dereg_mr)(struct ibv_mr *mr);
	/*
	 * ibv_rereg_mr(), normalised: returns 0, or one of the five negative
	 * enum ibv_rereg_mr_err_code values (anything else a device returns
	 * is reported as IBV_REREG_MR_ERR_CMD, the safe reading), with the
	 * positive errno in *err (never 0 on failure). errno itself is not
	 * part of the contract: logging may clobber it. NULL: not implemented.
	 */
	int (*rereg_mr)(struct ibv_mr *mr, int flags, struct ibv_pd *pd,
			void *addr, size_t length, int access, int *err);
	/* Same contract as ibv_advise_mr(): 0 or a positive errno. NULL: none. */
	int (*advise_mr)(struct ibv_pd *pd, enum ibv_advise_mr_advice advice,
			 uint32_t flags, struct ibv_sge *sg_list,
			 uint32_t num_sge);
};

extern const struct mrmgr__backend mrmgr__backend_verbs;
extern const struct mrmgr__backend mrmgr__backend_sim;

/* True when ctx was made by mrmgr_sim_open() and is still open. */
int mrmgr__sim_is_context(const struct ibv_context *ctx);

/* The backend that serves this PD's context. */
static inline const struct mrmgr__backend *
mrmgr__backend_for(const struct ibv_pd *pd)
{
	return mrmgr__sim_is_context(pd->context) ? &mrmgr__backend_sim
						  : &mrmgr__backend_verbs;
}

#endif /* MRMGR__BACKEND_H */
