/*
 * The simulated HCA: devices, protection domains, fault injection and
 * statistics (the registry of open devices: sim_registry.c). The sim plugs into libmrmgr
 * through the public device seam (sim_device.c), like any provider.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "compiler.h"
#include "log.h"
#include "sim/sim_internal.h"

#define SIM_PD_MAGIC 0x73706470u /* "spdp" */

/*
 * Access bits every personality accepts: ibv_reg_mr()'s basic set, plus the
 * optional range, which rdma-core masks off when the kernel does not know a
 * bit instead of failing, so accepting (and ignoring) it is what a caller
 * sees on a real device. ZERO_BASED and HUGETLB are refused with EINVAL
 * until the sim models them; ON_DEMAND goes to sim_odp.c, where only the
 * personalities with odp_general accept it.
 */
#define SIM_ACCESS_BASE                                                     \
	(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |                 \
	 IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC |                \
	 IBV_ACCESS_MW_BIND | IBV_ACCESS_RELAXED_ORDERING |                 \
	 IBV_ACCESS_OPTIONAL_RANGE)

/* Values reported by mlx5 (ConnectX-5 and later) and by rdma_rxe. */
static const struct mrmgr__sim_personality personalities[] = {
	[MRMGR_SIM_MLX5] = {
		.prefix = "sim_mlx5",
		.max_sge = 30,
		.page_size_cap = ~(uint64_t)0xfff,
		.access_ok = SIM_ACCESS_BASE,
		.random_key = 0,
		/* ConnectX-5 and later: ODP on RC and XRC, sends on UD. */
		.odp_general = IBV_ODP_SUPPORT | IBV_ODP_SUPPORT_IMPLICIT,
		.odp_rc = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV |
			  IBV_ODP_SUPPORT_WRITE | IBV_ODP_SUPPORT_READ |
			  IBV_ODP_SUPPORT_ATOMIC | IBV_ODP_SUPPORT_SRQ_RECV,
		.odp_ud = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_SRQ_RECV,
		.odp_xrc = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_WRITE |
			   IBV_ODP_SUPPORT_READ | IBV_ODP_SUPPORT_ATOMIC |
			   IBV_ODP_SUPPORT_SRQ_RECV,
		.advise = 1,
	},
	[MRMGR_SIM_RXE] = {
		.prefix = "sim_rxe",
		.max_sge = 32,
		.page_size_cap = 0xfffff000u,
		.access_ok = SIM_ACCESS_BASE,
		.random_key = 1,
	},
};

/*
 * rdma_rxe of Linux 6.17 and later (MRMGR_SIM_FLAG_RXE_ODP): explicit ODP
 * with the caps 7.3.4 reports, and ibv_advise_mr; still no implicit ODP,
 * rereg or import (the personality stays MRMGR_SIM_RXE). Named like rxe,
 * so the library takes it for rxe (lib/device/quirk.c).
 */
static const struct mrmgr__sim_personality rxe_odp = {
	.prefix = "rxe_odp_sim",
	.max_sge = 32,
	.page_size_cap = 0xfffff000u,
	.access_ok = SIM_ACCESS_BASE,
	.random_key = 1,
	.odp_general = IBV_ODP_SUPPORT,
	.odp_rc = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV |
		  IBV_ODP_SUPPORT_WRITE | IBV_ODP_SUPPORT_READ |
		  IBV_ODP_SUPPORT_ATOMIC | IBV_ODP_SUPPORT_SRQ_RECV,
	.odp_ud = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV |
		  IBV_ODP_SUPPORT_SRQ_RECV,
	.advise = 1,
};

#define SIM_ATTR_KNOWN                                                      \
	(MRMGR_SIM_ATTR_PERSONALITY | MRMGR_SIM_ATTR_MEMLOCK |              \
	 MRMGR_SIM_ATTR_COST | MRMGR_SIM_ATTR_FLAGS | MRMGR_SIM_ATTR_LIMITS | \
	 MRMGR_SIM_ATTR_ODP_COST)
#define SIM_FLAGS_KNOWN                                                     \
	(MRMGR_SIM_FLAG_NO_PIN | MRMGR_SIM_FLAG_DISTINCT_RKEY |              \
	 MRMGR_SIM_FLAG_NO_IMPLICIT_ODP | MRMGR_SIM_FLAG_RXE_ODP)

static unsigned int device_counter; /* unique name index per open */

struct mrmgr__sim_pd *mrmgr__sim_pd_get(struct ibv_pd *pd)
{
	struct mrmgr__sim_ctx *sctx;
	struct mrmgr__sim_pd *spd;

	if (!pd) {
		mrmgr__warn("sim: NULL protection domain");
		return NULL;
	}
	sctx = mrmgr__sim_ctx_get(pd->context);
	if (!sctx)
		return NULL;
	/* pd->context is a sim device, so pd was made by mrmgr_sim_alloc_pd. */
	spd = mrmgr__container_of(pd, struct mrmgr__sim_pd, ibpd);
	if (spd->magic != SIM_PD_MAGIC || spd->sctx != sctx) {
		mrmgr__warn("sim: %p is not a live simulated PD", (void *)pd);
		return NULL;
	}
	return spd;
}

static uint64_t default_memlock(void)
{
	struct rlimit rl;

	/*
	 * The kernel lets CAP_IPC_LOCK ignore this limit; the sim enforces
	 * its budget regardless, so tests behave the same as root and not.
	 */
	if (getrlimit(RLIMIT_MEMLOCK, &rl) != 0 || rl.rlim_cur == RLIM_INFINITY)
		return UINT64_MAX;
	return (uint64_t)rl.rlim_cur;
}

static int check_attr(const struct mrmgr_sim_attr *a)
{
	if (a->comp_mask & ~(uint64_t)SIM_ATTR_KNOWN) {
		mrmgr__warn("sim_open: unknown comp_mask bits %#llx",
			    (unsigned long long)(a->comp_mask & ~(uint64_t)SIM_ATTR_KNOWN));
		return EINVAL;
	}
	if ((a->comp_mask & MRMGR_SIM_ATTR_PERSONALITY) &&
	    a->personality >= MRMGR__ARRAY_SIZE(personalities)) {
		mrmgr__warn("sim_open: unknown personality %u", a->personality);
		return EINVAL;
	}
	if ((a->comp_mask & MRMGR_SIM_ATTR_FLAGS) &&
	    (a->flags & ~(uint32_t)SIM_FLAGS_KNOWN)) {
		mrmgr__warn("sim_open: unknown flags %#x", a->flags);
		return EINVAL;
	}
	if ((a->comp_mask & MRMGR_SIM_ATTR_FLAGS) &&
	    (a->flags & MRMGR_SIM_FLAG_RXE_ODP) &&
	    (!(a->comp_mask & MRMGR_SIM_ATTR_PERSONALITY) ||
	     a->personality != MRMGR_SIM_RXE)) {
		mrmgr__warn("sim_open: MRMGR_SIM_FLAG_RXE_ODP needs the rxe personality");
		return EINVAL;
	}
	if ((a->comp_mask & MRMGR_SIM_ATTR_LIMITS) &&
	    (a->max_mr == 0 || a->max_mr_size == 0)) {
		mrmgr__warn("sim_open: max_mr and max_mr_size must be nonzero");
		return EINVAL;
	}
	return 0;
}

MRMGR_EXPORT int mrmgr_sim_open(const struct mrmgr_sim_attr *attr,
				struct ibv_context **ctx)
{
	struct mrmgr__sim_ctx *sctx;
	int ret;

	if (!ctx) {
		mrmgr__warn("sim_open: NULL ctx");
		return EINVAL;
	}
	ret = mrmgr__sim_open(attr, 1, &sctx);
	if (!ret)
		*ctx = &sctx->ibctx;
	return ret;
}

int mrmgr__sim_open(const struct mrmgr_sim_attr *attr, int table,
		    struct mrmgr__sim_ctx **out)
{
	static const struct mrmgr_sim_attr none;
	const struct mrmgr_sim_attr *a = attr ? attr : &none;
	struct mrmgr__sim_ctx *sctx;
	unsigned int idx;
	int ret;

	ret = check_attr(a);
	if (ret)
		return ret;
	mrmgr__sim_device_register();

	sctx = calloc(1, sizeof(*sctx));
	if (!sctx)
		return ENOMEM;
	sctx->personality = (a->comp_mask & MRMGR_SIM_ATTR_PERSONALITY)
				    ? a->personality : MRMGR_SIM_MLX5;
	sctx->pers = &personalities[sctx->personality];
	sctx->flags = (a->comp_mask & MRMGR_SIM_ATTR_FLAGS) ? a->flags : 0;
	if (sctx->personality == MRMGR_SIM_RXE &&
	    (sctx->flags & MRMGR_SIM_FLAG_RXE_ODP))
		sctx->pers = &rxe_odp;
	sctx->memlock_bytes = (a->comp_mask & MRMGR_SIM_ATTR_MEMLOCK)
				      ? a->memlock_bytes : default_memlock();
	if (a->comp_mask & MRMGR_SIM_ATTR_COST) {
		sctx->reg_ns = a->reg_ns;
		sctx->reg_ns_per_page = a->reg_ns_per_page;
		sctx->dereg_ns = a->dereg_ns;
		sctx->dereg_ns_per_page = a->dereg_ns_per_page;
	}
	if (a->comp_mask & MRMGR_SIM_ATTR_LIMITS) {
		sctx->max_mr = a->max_mr;
		sctx->max_mr_size = a->max_mr_size;
	} else {
		sctx->max_mr = 1u << 24;
		sctx->max_mr_size = UINT64_C(1) << 40;
	}
	if (a->comp_mask & MRMGR_SIM_ATTR_ODP_COST) {
		sctx->odp_fault_ns = a->odp_fault_ns;
		sctx->odp_prefetch_ns_per_page = a->odp_prefetch_ns_per_page;
	}
	sctx->hwm = 1;
	sctx->next_pd_handle = 1;
	sctx->next_mr_handle = 1;
	/* Seed for rxe-style key bytes; any nonzero xorshift state will do. */
	sctx->rng = (uint32_t)(uintptr_t)sctx ^ 0x9e3779b9u;
	if (!sctx->rng)
		sctx->rng = 1;

	idx = __atomic_fetch_add(&device_counter, 1, __ATOMIC_RELAXED);
	snprintf(sctx->ibdev.name, sizeof(sctx->ibdev.name), "%s_%u",
		 sctx->pers->prefix, idx);
	snprintf(sctx->ibdev.dev_name, sizeof(sctx->ibdev.dev_name),
		 "sim_uverbs%u", idx);
	sctx->ibdev.node_type = IBV_NODE_CA;
	sctx->ibdev.transport_type = IBV_TRANSPORT_IB;

	sctx->ibctx.device = &sctx->ibdev;
	/*
	 * No kernel file descriptors, and abi_compat NULL: libibverbs' inline
	 * helpers check abi_compat before using the extended ops, so a sim
	 * context handed to them by mistake fails with EOPNOTSUPP/NULL rather
	 * than jumping through garbage. cmd_fd becomes the export table, a
	 * read-only memfd (sim_share.c), below.
	 */
	sctx->ibctx.cmd_fd = -1;
	sctx->ibctx.async_fd = -1;
	sctx->ibctx.num_comp_vectors = 1;
	sctx->ibctx.abi_compat = NULL;

	if (pthread_mutex_init(&sctx->ibctx.mutex, NULL)) {
		free(sctx);
		return ENOMEM;
	}
	if (pthread_mutex_init(&sctx->lock, NULL)) {
		pthread_mutex_destroy(&sctx->ibctx.mutex);
		free(sctx);
		return ENOMEM;
	}
	/* The export table is cmd_fd (sim_share.c); it is made before the
	 * device is visible, so every PD and MR is published. */
	if (table)
		mrmgr__sim_share_open(sctx);
	ret = mrmgr__sim_registry_add(sctx);
	if (ret) {
		mrmgr__sim_share_close(sctx);
		pthread_mutex_destroy(&sctx->lock);
		pthread_mutex_destroy(&sctx->ibctx.mutex);
		free(sctx);
		return ret;
	}
	mrmgr__info("sim: opened %s (memlock %llu bytes, flags %#x)",
		    sctx->ibdev.name, (unsigned long long)sctx->memlock_bytes,
		    sctx->flags);
	*out = sctx;
	return 0;
}

MRMGR_EXPORT int mrmgr_sim_close(struct ibv_context *ctx)
{
	struct mrmgr__sim_ctx *sctx = mrmgr__sim_ctx_get(ctx);
	uint64_t pds, mrs;

	if (!sctx)
		return EINVAL;
	/*
	 * Leave the registry under the device lock so a concurrent
	 * mrmgr__sim_is_context() never sees a half-closed device.
	 */
	pthread_mutex_lock(&sctx->lock);
	pds = sctx->stats.live_pds;
	mrs = sctx->mrs;
	if (!pds && !mrs)
		mrmgr__sim_registry_del(sctx);
	pthread_mutex_unlock(&sctx->lock);
	if (pds || mrs) {
		mrmgr__warn("sim_close: %s still has %llu PDs and %llu MRs",
			    sctx->ibdev.name, (unsigned long long)pds,
			    (unsigned long long)mrs);
		return EBUSY;
	}
	mrmgr__sim_keys_fini(sctx);
	mrmgr__sim_share_close(sctx);
	pthread_mutex_destroy(&sctx->lock);
	pthread_mutex_destroy(&sctx->ibctx.mutex);
	mrmgr__info("sim: closed %s", sctx->ibdev.name);
	free(sctx);
	return 0;
}

MRMGR_EXPORT int mrmgr_sim_alloc_pd(struct ibv_context *ctx,
				    struct ibv_pd **pd)
{
	struct mrmgr__sim_ctx *sctx = mrmgr__sim_ctx_get(ctx);
	struct mrmgr__sim_pd *spd;

	if (!sctx)
		return EINVAL;
	if (!pd) {
		mrmgr__warn("sim_alloc_pd: NULL pd");
		return EINVAL;
	}
	spd = calloc(1, sizeof(*spd));
	if (!spd)
		return ENOMEM;
	spd->sctx = sctx;
	spd->magic = SIM_PD_MAGIC;
	spd->ibpd.context = ctx;
	pthread_mutex_lock(&sctx->lock);
	spd->ibpd.handle = sctx->next_pd_handle++;
	sctx->stats.live_pds++;
	mrmgr__sim_share_pd(sctx, spd, 1);
	pthread_mutex_unlock(&sctx->lock);
	*pd = &spd->ibpd;
	return 0;
}

MRMGR_EXPORT int mrmgr_sim_dealloc_pd(struct ibv_pd *pd)
{
	struct mrmgr__sim_pd *spd = mrmgr__sim_pd_get(pd);
	struct mrmgr__sim_ctx *sctx;

	if (!spd)
		return EINVAL;
	sctx = spd->sctx;
	pthread_mutex_lock(&sctx->lock);
	if (spd->mrs) {
		pthread_mutex_unlock(&sctx->lock);
		mrmgr__warn("sim_dealloc_pd: %llu MRs still use the PD",
			    (unsigned long long)spd->mrs);
		return EBUSY;
	}
	sctx->stats.live_pds--;
	if (spd->imported)
		sctx->stats.imported_pds--;
	else
		mrmgr__sim_share_pd(sctx, spd, 0);
	spd->magic = 0;
	pthread_mutex_unlock(&sctx->lock);
	free(spd);
	return 0;
}

MRMGR_EXPORT int mrmgr_sim_inject_fault(struct ibv_context *ctx,
					const struct mrmgr_sim_fault *fault)
{
	struct mrmgr__sim_ctx *sctx = mrmgr__sim_ctx_get(ctx);
	int ret = ENOSPC;

	if (!sctx)
		return EINVAL;
	if (!fault || (fault->comp_mask & ~(uint64_t)MRMGR_SIM_FAULT_REREG_CODE) ||
	    fault->op >= MRMGR__SIM_OP_COUNT || fault->err <= 0 ||
	    fault->nth == 0 ||
	    ((fault->comp_mask & MRMGR_SIM_FAULT_REREG_CODE) &&
	     (fault->op != MRMGR_SIM_OP_REREG ||
	      fault->rereg_code < IBV_REREG_MR_ERR_CMD_AND_DO_FORK_NEW ||
	      fault->rereg_code > IBV_REREG_MR_ERR_INPUT))) {
		mrmgr__warn("sim_inject_fault: invalid fault (need known "
			    "comp_mask bits, a known op, err > 0, nth >= 1, a "
			    "rereg_code only for rereg and within "
			    "enum ibv_rereg_mr_err_code)");
		return EINVAL;
	}
	pthread_mutex_lock(&sctx->lock);
	for (size_t i = 0; i < MRMGR__SIM_MAX_FAULTS; i++) {
		struct mrmgr__sim_fault_slot *s = &sctx->faults[i];

		if (s->armed)
			continue;
		/* rereg_code is read only when its bit says the caller's
		 * struct has it. */
		memset(&s->f, 0, sizeof(s->f));
		memcpy(&s->f, fault, offsetof(struct mrmgr_sim_fault, rereg_code));
		if (fault->comp_mask & MRMGR_SIM_FAULT_REREG_CODE)
			s->f.rereg_code = fault->rereg_code;
		s->seen = 0;
		s->fired = 0;
		s->armed = 1;
		sctx->narmed++;
		ret = 0;
		break;
	}
	pthread_mutex_unlock(&sctx->lock);
	return ret;
}

MRMGR_EXPORT int mrmgr_sim_clear_faults(struct ibv_context *ctx)
{
	struct mrmgr__sim_ctx *sctx = mrmgr__sim_ctx_get(ctx);

	if (!sctx)
		return EINVAL;
	pthread_mutex_lock(&sctx->lock);
	memset(sctx->faults, 0, sizeof(sctx->faults));
	sctx->narmed = 0;
	pthread_mutex_unlock(&sctx->lock);
	return 0;
}

int mrmgr__sim_fault_check(struct mrmgr__sim_ctx *sctx, uint32_t op,
			   void *addr, size_t length, unsigned int access)
{
	return mrmgr__sim_fault_check_code(sctx, op, addr, length, access, NULL);
}

int mrmgr__sim_fault_check_code(struct mrmgr__sim_ctx *sctx, uint32_t op,
				void *addr, size_t length, unsigned int access,
				int *rereg_code)
{
	int err = 0;

	if (!sctx->narmed) /* the common case: nothing to scan */
		return 0;
	/*
	 * Slots are scanned in index order, and a freed slot is refilled
	 * first, so "first" means lowest slot. Every matching fault counts
	 * the operation, so each fault's nth is relative to its own arming,
	 * independent of the others; only the first that is due fails it.
	 */
	for (size_t i = 0; i < MRMGR__SIM_MAX_FAULTS; i++) {
		struct mrmgr__sim_fault_slot *s = &sctx->faults[i];

		if (!s->armed || s->f.op != op)
			continue;
		if (s->f.pred && !s->f.pred(s->f.pred_arg, addr, length, access))
			continue;
		s->seen++;
		if (err || s->seen < s->f.nth)
			continue;
		err = s->f.err;
		if (rereg_code)
			*rereg_code = s->f.rereg_code;
		s->fired++;
		if (s->f.count && s->fired >= s->f.count) {
			s->armed = 0;
			sctx->narmed--;
		}
	}
	if (err)
		sctx->stats.faults_injected++;
	return err;
}

MRMGR_EXPORT int mrmgr_sim_query_stats(struct ibv_context *ctx,
				       struct mrmgr_sim_stats *stats,
				       size_t size)
{
	struct mrmgr__sim_ctx *sctx = mrmgr__sim_ctx_get(ctx);
	struct mrmgr_sim_stats copy;

	if (!sctx)
		return EINVAL;
	if (!stats) {
		mrmgr__warn("sim_query_stats: NULL stats");
		return EINVAL;
	}
	pthread_mutex_lock(&sctx->lock);
	copy = sctx->stats;
	pthread_mutex_unlock(&sctx->lock);
	memcpy(stats, &copy, size < sizeof(copy) ? size : sizeof(copy));
	return 0;
}
