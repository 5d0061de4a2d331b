/*
 * The backend seam over libibverbs. Thin on purpose: errno conventions
 * are normalised here (verbs mixes NULL+errno, positive and negative
 * returns) so the cache sees one convention.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "backend.h"

/*
 * ibv_query_device_ex() first: it carries odp_caps. Providers without the
 * extended verb (or old kernels) make it fail with EOPNOTSUPP/ENOSYS;
 * then the basic query gives the rest and ODP stays off.
 */
static int verbs_query_device(struct ibv_context *ctx,
			      struct mrmgr__dev_caps *caps)
{
	struct ibv_device_attr_ex ax;
	struct ibv_device_attr *attr = &ax.orig_attr;
	int ret;

	memset(caps, 0, sizeof(*caps));
	memset(&ax, 0, sizeof(ax));
	ret = ibv_query_device_ex(ctx, NULL, &ax);
	if (ret) {
		memset(&ax, 0, sizeof(ax));
		ret = ibv_query_device(ctx, attr);
		if (ret)
			return ret > 0 ? ret : (errno ? errno : EIO);
	} else {
		caps->odp_general = ax.odp_caps.general_caps;
		caps->odp_rc = ax.odp_caps.per_transport_caps.rc_odp_caps;
		caps->odp_uc = ax.odp_caps.per_transport_caps.uc_odp_caps;
		caps->odp_ud = ax.odp_caps.per_transport_caps.ud_odp_caps;
		caps->odp_xrc = ax.xrc_odp_caps;
	}
	snprintf(caps->name, sizeof(caps->name), "%s",
		 ibv_get_device_name(ctx->device));
	caps->max_mr_size = attr->max_mr_size;
	caps->max_mr = attr->max_mr > 0 ? (uint32_t)attr->max_mr : 0;
	caps->max_sge = attr->max_sge > 0 ? (uint32_t)attr->max_sge : 1;
	caps->page_size_cap = attr->page_size_cap;
	return 0;
}

static int verbs_reg_mr(struct ibv_pd *pd, void *addr, size_t length,
			int access, struct ibv_mr **mr)
{
	errno = 0;
	*mr = ibv_reg_mr(pd, addr, length, access);
	if (*mr)
		return 0;
	return errno ? errno : EIO;
}

static int verbs_dereg_mr(struct ibv_mr *mr)
{
	int ret = ibv_dereg_mr(mr);

	if (ret < 0)
		ret = errno ? errno : EIO;
	return ret;
}

/*
 * ibv_advise_mr() is an inline that returns EOPNOTSUPP itself when the
 * provider lacks the op, else the provider's positive errno; ENOSYS comes
 * from old libibverbs. Normalise a stray negative value too.
 */
static int verbs_advise_mr(struct ibv_pd *pd, enum ibv_advise_mr_advice advice,
			   uint32_t flags, struct ibv_sge *sg_list,
			   uint32_t num_sge)
{
	int ret = ibv_advise_mr(pd, advice, flags, sg_list, num_sge);

	return ret < 0 ? -ret : ret;
}

/*
 * rdma-core returns the negative enum ibv_rereg_mr_err_code and sets
 * errno; a provider without rereg fails as IBV_REREG_MR_ERR_CMD with
 * EOPNOTSUPP (rdma-core 44; older ones: ERR_INPUT with ENOSYS). errno is
 * captured at once, and a value outside the enum (a positive provider
 * return passed through by an older libibverbs) is read as "the MR must
 * not be used", the one reading that cannot leave a stale MR in use.
 */
static int verbs_rereg_mr(struct ibv_mr *mr, int flags, struct ibv_pd *pd,
			  void *addr, size_t length, int access, int *err)
{
	int ret;

	errno = 0;
	ret = ibv_rereg_mr(mr, flags, pd, addr, length, access);
	*err = errno;
	if (ret == 0)
		return 0;
	if (*err == 0)
		*err = ret > 0 ? ret : EIO;
	if (ret < IBV_REREG_MR_ERR_CMD_AND_DO_FORK_NEW || ret > 0)
		return IBV_REREG_MR_ERR_CMD;
	return ret;
}

const struct mrmgr__backend mrmgr__backend_verbs = {
	.name = "verbs",
	.query_device = verbs_query_device,
	.reg_mr = verbs_reg_mr,
	.dereg_mr = verbs_dereg_mr,
	.rereg_mr = verbs_rereg_mr,
	.advise_mr = verbs_advise_mr,
};
