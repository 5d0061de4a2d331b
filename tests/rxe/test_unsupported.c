/*
 * What Soft-RoCE (rdma_rxe, kernel 6.1, rdma-core 44) does not support, at
 * the verbs level. Later features (growth with ibv_rereg_mr, ODP hints,
 * cross-process sharing) must detect these answers and fall back; these
 * tests pin the answers down so a change of kernel or rdma-core that
 * alters them is noticed here first, and show that the cache keeps working
 * on a device that gave them.
 *
 * They assert rxe facts, so on another device they skip.
 *
 * SPDX-License-Identifier: MIT
 */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cache_helpers.h"

#define LEN (64 * RDMA_KiB)

static void open_rxe(struct rdma_fixture *f, unsigned int flags)
{
	rdma_fixture_open_rxe(f, flags, "these are rxe facts");
}

Test(rxe_unsupported, rereg_mr_fails_with_eopnotsupp_and_the_mr_still_deregisters)
{
	struct rdma_fixture f;
	char *buf = rdma_map(2 * LEN, 0);
	static const struct {
		int flags;
		const char *what;
	} change[] = {
		{ IBV_REREG_MR_CHANGE_TRANSLATION, "TRANSLATION" },
		{ IBV_REREG_MR_CHANGE_ACCESS, "ACCESS" },
		{ IBV_REREG_MR_CHANGE_PD, "PD" },
	};

	open_rxe(&f, 0);
	struct ibv_pd *pd2 = ibv_alloc_pd(f.ctx);
	cr_assert_not_null(pd2);
	for (size_t i = 0; i < sizeof(change) / sizeof(change[0]); i++) {
		struct ibv_mr *mr = ibv_reg_mr(f.pd, buf, LEN, IBV_ACCESS_LOCAL_WRITE);

		cr_assert_not_null(mr, "ibv_reg_mr: %s", strerror(errno));
		/* (libibverbs refuses access bits without CHANGE_ACCESS.) */
		int access = change[i].flags & IBV_REREG_MR_CHANGE_ACCESS ? RXE_RW : 0;
		errno = 0;
		int ret = ibv_rereg_mr(mr, change[i].flags, pd2, buf + LEN, LEN, access);
		int err = errno;
		cr_assert_eq(ret, IBV_REREG_MR_ERR_CMD, "ibv_rereg_mr(%s) returned %d",
			     change[i].what, ret);
		cr_assert_eq(err, EOPNOTSUPP, "ibv_rereg_mr(%s): errno %s",
			     change[i].what, strerror(err));
		cr_assert_eq(ibv_dereg_mr(mr), 0,
			     "the MR must still deregister after a failed rereg");
		cr_log_info("%s: ibv_rereg_mr(%s) = %d (IBV_REREG_MR_ERR_CMD), %s; "
			    "dereg ok", f.name, change[i].what, ret, strerror(err));
	}
	cr_assert_eq(ibv_dealloc_pd(pd2), 0);
	rdma_fixture_close(&f);
	munmap(buf, 2 * LEN);
}

Test(rxe_unsupported, odp_registration_fails_with_einval)
{
	struct rdma_fixture f;
	struct ibv_device_attr_ex ax;
	char *buf = rdma_map(LEN, 0);

	open_rxe(&f, 0);
	memset(&ax, 0, sizeof(ax));
	cr_assert_eq(ibv_query_device_ex(f.ctx, NULL, &ax), 0);
	cr_assert_eq(ax.odp_caps.general_caps & IBV_ODP_SUPPORT, 0,
		     "%s claims ODP support", f.name);
	cr_assert_eq(ax.odp_caps.general_caps & IBV_ODP_SUPPORT_IMPLICIT, 0);

	errno = 0;
	struct ibv_mr *mr = ibv_reg_mr(f.pd, buf, LEN,
				       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ON_DEMAND);
	int err = errno;
	if (mr)
		ibv_dereg_mr(mr);
	cr_assert_null(mr, "explicit ODP registered");
	cr_assert_eq(err, EINVAL, "explicit ODP: %s", strerror(err));

	/* Implicit ODP: the whole address space. */
	errno = 0;
	mr = ibv_reg_mr(f.pd, NULL, SIZE_MAX,
			IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ON_DEMAND);
	err = errno;
	if (mr)
		ibv_dereg_mr(mr);
	cr_assert_null(mr, "implicit ODP registered");
	cr_assert_eq(err, EINVAL, "implicit ODP: %s", strerror(err));
	cr_log_info("%s: no ODP caps; explicit and implicit ODP registration: EINVAL",
		    f.name);
	rdma_fixture_close(&f);
	munmap(buf, LEN);
}

Test(rxe_unsupported, advise_mr_fails_with_eopnotsupp)
{
	struct rdma_fixture f;
	char *buf = rdma_map(LEN, 0);

	open_rxe(&f, 0);
	struct ibv_mr *mr = ibv_reg_mr(f.pd, buf, LEN, IBV_ACCESS_LOCAL_WRITE);
	cr_assert_not_null(mr);
	struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = LEN, .lkey = mr->lkey };
	static const enum ibv_advise_mr_advice advice[] = {
		IBV_ADVISE_MR_ADVICE_PREFETCH, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE,
	};
	for (size_t i = 0; i < 2; i++)
		for (uint32_t flags = 0; flags <= IBV_ADVISE_MR_FLAG_FLUSH;
		     flags += IBV_ADVISE_MR_FLAG_FLUSH) {
			int ret = ibv_advise_mr(f.pd, advice[i], flags, &sge, 1);

			cr_assert_eq(ret, EOPNOTSUPP,
				     "ibv_advise_mr(advice %d, flags %#x): %s",
				     advice[i], flags, strerror(ret));
		}
	cr_log_info("%s: ibv_advise_mr PREFETCH/PREFETCH_WRITE: EOPNOTSUPP", f.name);
	cr_assert_eq(ibv_dereg_mr(mr), 0);
	rdma_fixture_close(&f);
	munmap(buf, LEN);
}

Test(rxe_unsupported, import_device_pd_mr_fail_with_eopnotsupp)
{
	struct rdma_fixture f;
	char *buf = rdma_map(LEN, 0);

	open_rxe(&f, 0);
	int fd = dup(f.ctx->cmd_fd);
	cr_assert_geq(fd, 0);
	errno = 0;
	struct ibv_context *ictx = ibv_import_device(fd);
	int err = errno;
	if (ictx)
		ibv_close_device(ictx);
	else if (fcntl(fd, F_GETFD) >= 0)
		close(fd); /* a failed import leaves the fd to us */
	cr_assert_null(ictx, "ibv_import_device succeeded");
	cr_assert_eq(err, EOPNOTSUPP, "ibv_import_device: %s", strerror(err));

	errno = 0;
	struct ibv_pd *ipd = ibv_import_pd(f.ctx, f.pd->handle);
	err = errno;
	if (ipd)
		ibv_unimport_pd(ipd);
	cr_assert_null(ipd, "ibv_import_pd succeeded");
	cr_assert_eq(err, EOPNOTSUPP, "ibv_import_pd: %s", strerror(err));

	struct ibv_mr *mr = ibv_reg_mr(f.pd, buf, LEN, IBV_ACCESS_LOCAL_WRITE);
	cr_assert_not_null(mr);
	errno = 0;
	struct ibv_mr *imr = ibv_import_mr(f.pd, mr->handle);
	err = errno;
	if (imr)
		ibv_unimport_mr(imr);
	cr_assert_null(imr, "ibv_import_mr succeeded");
	cr_assert_eq(err, EOPNOTSUPP, "ibv_import_mr: %s", strerror(err));
	cr_log_info("%s: ibv_import_device/_pd/_mr: EOPNOTSUPP", f.name);
	cr_assert_eq(ibv_dereg_mr(mr), 0);
	rdma_fixture_close(&f);
	munmap(buf, LEN);
}

/* After every refusal above, the cache on the same device still works. */
Test(rxe_unsupported, the_cache_keeps_working_after_the_refusals)
{
	struct rdma_fixture f;
	char *src = rdma_map(LEN, 'k'), *dst = rdma_map(LEN, 0);

	open_rxe(&f, RDMA_FX_QP);
	mrmgr_cache_t *c = rxe_cache(&f, 0, 0, MRMGR_CACHE_NO_MERGE);
	mrmgr_region_t *rs = rxe_get(c, src, LEN, IBV_ACCESS_LOCAL_WRITE);
	mrmgr_region_t *rd = rxe_get(c, dst, LEN, RXE_RW);

	/* Provoke each refusal on MRs of the same PD. */
	struct ibv_mr *mr = ibv_reg_mr(f.pd, dst, LEN, IBV_ACCESS_LOCAL_WRITE);
	cr_assert_not_null(mr);
	cr_assert_eq(ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0, RXE_RW),
		     IBV_REREG_MR_ERR_CMD);
	struct ibv_sge sge = { .addr = (uintptr_t)dst, .length = LEN, .lkey = mr->lkey };
	cr_assert_eq(ibv_advise_mr(f.pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &sge, 1),
		     EOPNOTSUPP);
	cr_assert_null(ibv_import_mr(f.pd, mr->handle));
	cr_assert_null(ibv_reg_mr(f.pd, dst, LEN,
				  IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ON_DEMAND));
	cr_assert_eq(ibv_dereg_mr(mr), 0);

	cr_assert_eq(rdma_write(&f, src, mrmgr_region_lkey(rs), (uintptr_t)dst,
				mrmgr_region_rkey(rd), LEN),
		     IBV_WC_SUCCESS);
	rdma_expect_bytes(dst, LEN, 'k', "WRITE through cached regions after the refusals");
	mrmgr_put(rs);
	mrmgr_put(rd);
	cr_assert_eq(rxe_stats(c).reg_failures, 0);
	cr_assert_eq(mrmgr_cache_destroy(c), 0);
	rdma_fixture_close(&f);
	munmap(src, LEN);
	munmap(dst, LEN);
}
