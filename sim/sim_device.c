/*
 * The simulated HCA as a libmrmgr device provider: the table it gives
 * the public seam (include/mrmgr/device.h), as any provider outside the
 * library would. libmrmgr knows nothing of the sim: it asks the table
 * whether a context or a command descriptor is the sim's.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"
#include "sim/sim_internal.h"
#include "sim/sim_share.h"

static int sim_query_device(struct ibv_context *ctx,
			    struct mrmgr_device_attr *caps)
{
	struct mrmgr__sim_ctx *sctx = mrmgr__sim_ctx_get(ctx);

	if (!sctx || !caps)
		return EINVAL;
	memset(caps, 0, sizeof(*caps));
	snprintf(caps->name, sizeof(caps->name), "%s", sctx->ibdev.name);
	caps->max_mr_size = sctx->max_mr_size;
	caps->max_mr = sctx->max_mr;
	caps->max_sge = sctx->pers->max_sge;
	caps->page_size_cap = sctx->pers->page_size_cap;
	caps->odp_general = sctx->pers->odp_general;
	if (sctx->flags & MRMGR_SIM_FLAG_NO_IMPLICIT_ODP)
		caps->odp_general &= ~(uint64_t)IBV_ODP_SUPPORT_IMPLICIT;
	caps->odp_rc = sctx->pers->odp_rc;
	caps->odp_uc = sctx->pers->odp_uc;
	caps->odp_ud = sctx->pers->odp_ud;
	caps->odp_xrc = sctx->pers->odp_xrc;
	return 0;
}

static int sim_reg_mr(struct ibv_pd *pd, void *addr, size_t length, int access,
		      struct ibv_mr **mr)
{
	return mrmgr_sim_reg_mr(pd, addr, length, (unsigned int)access, mr);
}

static int sim_can_import(struct ibv_pd *pd)
{
	return mrmgr__sim_can_import(pd->context) ? 0 : EOPNOTSUPP;
}

/*
 * A simulated device's command descriptor: the sealed memfd of
 * sim_share.c, whose header says so. Read with pread, never mapped: a
 * descriptor from another process is not trusted before this says yes.
 * (mrmgr_sim_import_device() checks it again, fully.)
 */
static int sim_claim_fd(int fd)
{
	struct mrmgr__sim_tbl_hdr h;
	struct stat st;

	/* Claimed by its header alone (pread cannot fault): whether its
	 * seals make it safe to map is the importer's check, which answers
	 * EPROTO for a table of ours that is not sealed. */
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ||
	    (uint64_t)st.st_size < MRMGR__SIM_TBL_BYTES)
		return 0;
	if (pread(fd, &h, sizeof(h), 0) != (ssize_t)sizeof(h))
		return 0;
	return h.magic == MRMGR__SIM_TBL_MAGIC &&
	       h.version == MRMGR__SIM_TBL_VERSION &&
	       h.size == MRMGR__SIM_TBL_BYTES && h.nmrs == MRMGR__SIM_TBL_MRS &&
	       h.npds == MRMGR__SIM_TBL_PDS && h.personality <= MRMGR_SIM_RXE;
}

const struct mrmgr_device_ops mrmgr__sim_device_ops = {
	.size = sizeof(struct mrmgr_device_ops),
	.name = "sim",
	/* Pages are held with plain references (pipes, sim_access.c), as
	 * pre-5.9 kernels pinned them. */
	.cap_flags = MRMGR_DEVICE_CAP_PLAIN_PINS,
	.owns_context = mrmgr__sim_is_context,
	.query_device = sim_query_device,
	.reg_mr = sim_reg_mr,
	.dereg_mr = mrmgr__sim_dereg_any,
	.rereg_mr = mrmgr__sim_backend_rereg,
	.advise_mr = mrmgr_sim_advise_mr,
	.can_import = sim_can_import,
	.claim_fd = sim_claim_fd,
	.import_device = mrmgr_sim_import_device,
	.close_device = mrmgr_sim_close,
	.import_pd = mrmgr_sim_import_pd,
	.unimport_pd = mrmgr_sim_unimport_pd,
	.import_mr = mrmgr_sim_import_mr,
	.unimport_mr = mrmgr_sim_unimport_mr,
	.reg_dmabuf_mr = mrmgr__sim_reg_dmabuf_mr,
};

static pthread_once_t registered = PTHREAD_ONCE_INIT;

static void do_register(void)
{
	int ret = mrmgr_device_register(&mrmgr__sim_device_ops);

	if (ret && ret != EEXIST)
		mrmgr__err("sim: registering with libmrmgr's device seam: %s",
			   strerror(ret));
}

void mrmgr__sim_device_register(void)
{
	pthread_once(&registered, do_register);
}

/* Loading the library is enough: a program that only imports a
 * simulated device (mrmgr_importer_open()) never opens one. */
__attribute__((constructor)) static void sim_device_init(void)
{
	mrmgr__sim_device_register();
}
