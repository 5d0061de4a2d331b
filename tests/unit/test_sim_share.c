/*
 * The simulated HCA's import model (mrmgr_sim_import_device/_pd/_mr)
 * within one process: a second context opened on the first one's command
 * descriptor, as another process would. Same handles and keys, the
 * owner's lifetime (deregistration kills imports), accesses reach the
 * owner's memory with its checks, page identity covers imports, and the
 * rxe personality refuses import with EOPNOTSUPP.
 *
 * SPDX-License-Identifier: MIT
 */
#include <errno.h>
#include <fcntl.h>

#include "share_helpers.h"

struct owner {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_mr *mr;
	char *buf;
};

#define LEN (32 * KiB)

static void owner_open(struct owner *o, const struct mrmgr_sim_attr *sa)
{
	memset(o, 0, sizeof(*o));
	cr_assert_eq(mrmgr_sim_open(sa, &o->ctx), 0);
	cr_assert_eq(mrmgr_sim_alloc_pd(o->ctx, &o->pd), 0);
	o->buf = map_rw(LEN, 'o');
	cr_assert_eq(mrmgr_sim_reg_mr(o->pd, o->buf, LEN, RW, &o->mr), 0);
}

static void owner_close(struct owner *o)
{
	if (o->mr)
		cr_assert_eq(mrmgr_sim_dereg_mr(o->mr), 0);
	cr_assert_eq(mrmgr_sim_dealloc_pd(o->pd), 0);
	cr_assert_eq(mrmgr_sim_close(o->ctx), 0);
	munmap(o->buf, LEN);
}

Test(sim_share, cmd_fd_is_a_read_only_descriptor_to_pass)
{
	struct owner o;

	owner_open(&o, NULL);
	cr_assert_geq(o.ctx->cmd_fd, 0);
	cr_assert_geq(fcntl(o.ctx->cmd_fd, F_GETFD), 0);
	/* A sim context handed to libibverbs by mistake cannot scribble on
	 * the table through the descriptor. */
	char junk[16] = { 0 };
	cr_assert_lt(write(o.ctx->cmd_fd, junk, sizeof(junk)), 0);
	owner_close(&o);
}

Test(sim_share, import_gives_the_same_handles_and_keys_and_reaches_the_owner)
{
	struct owner o;
	struct ibv_context *ictx;
	struct ibv_pd *ipd;
	struct ibv_mr *imr;

	owner_open(&o, NULL);
	int fd = dup(o.ctx->cmd_fd);
	cr_assert_eq(mrmgr_sim_import_device(fd, &ictx), 0);
	cr_assert_eq(ictx->cmd_fd, fd, "the context owns the descriptor");
	cr_assert_str_eq(ictx->device->name, o.ctx->device->name, "the same device");
	cr_assert_eq(mrmgr_sim_import_pd(ictx, o.pd->handle, &ipd), 0);
	cr_assert_eq(ipd->handle, o.pd->handle);
	cr_assert_eq(mrmgr_sim_import_mr(ipd, o.mr->handle, &imr), 0);
	cr_assert_eq(imr->handle, o.mr->handle);
	cr_assert_eq(imr->lkey, o.mr->lkey);
	cr_assert_eq(imr->rkey, o.mr->rkey);
	cr_assert_eq(imr->length, o.mr->length);
	cr_assert_null(imr->addr, "ibv_import_mr(3): addr is not applicable");
	cr_assert_eq(imr->pd, ipd);
	cr_assert_eq(sstats(ictx).imported_mrs, 1);
	cr_assert_eq(sstats(ictx).imported_pds, 1);

	/* A write through the imported PD lands in the owner's memory. */
	cr_assert_eq(write_via(ipd, imr->rkey, o.buf + 4 * KiB, 8 * KiB, 'i'), 0);
	cr_assert(all_bytes(o.buf + 4 * KiB, 8 * KiB, 'i'));
	char back[64];
	cr_assert_eq(mrmgr_sim_read(ipd, imr->rkey, (uintptr_t)o.buf + 4 * KiB, back, 64), 0);
	cr_assert(all_bytes(back, 64, 'i'));
	/* The owner's rules: bounds, keys. */
	cr_assert_eq(write_via(ipd, imr->rkey, o.buf + LEN - 8, 16, 'x'), ERANGE);
	cr_assert_eq(write_via(ipd, imr->rkey ^ 0x100, o.buf, 16, 'x'), ENOENT);
	cr_assert_eq(sstats(ictx).writes, 1);

	/* The importer's handles are not the owner's objects to destroy. */
	cr_assert_eq(mrmgr_sim_dereg_mr(imr), EINVAL);
	cr_assert_eq(mrmgr_sim_unimport_pd(ipd), EBUSY);
	cr_assert_eq(mrmgr_sim_close(ictx), EBUSY);
	cr_assert_eq(mrmgr_sim_unimport_mr(imr), 0);
	cr_assert_eq(mrmgr_sim_unimport_pd(ipd), 0);
	cr_assert_eq(mrmgr_sim_close(ictx), 0);
	cr_assert_eq(fcntl(fd, F_GETFD), -1, "closed with the context");
	/* Unimport did nothing to the owner's MR. */
	cr_assert_eq(write_via(o.pd, o.mr->rkey, o.buf, 16, 'k'), 0);
	owner_close(&o);
}

Test(sim_share, the_owners_dereg_kills_imports)
{
	struct owner o;
	struct ibv_context *ictx;
	struct ibv_pd *ipd;
	struct ibv_mr *imr;

	owner_open(&o, NULL);
	cr_assert_eq(mrmgr_sim_import_device(dup(o.ctx->cmd_fd), &ictx), 0);
	cr_assert_eq(mrmgr_sim_import_pd(ictx, o.pd->handle, &ipd), 0);
	cr_assert_eq(mrmgr_sim_import_mr(ipd, o.mr->handle, &imr), 0);
	cr_assert_eq(write_via(ipd, imr->rkey, o.buf, 16, 'a'), 0);
	cr_assert_eq(mrmgr_sim_dereg_mr(o.mr), 0);
	o.mr = NULL;
	cr_assert_eq(write_via(ipd, imr->rkey, o.buf, 16, 'b'), ENOENT,
		     "no reference counting in ibv_import_mr: the import died");
	cr_assert_eq(sstats(ictx).dead_import_accesses, 1);
	/* A new registration does not resurrect it, even with a reused slot. */
	struct ibv_mr *again;
	cr_assert_eq(mrmgr_sim_reg_mr(o.pd, o.buf, LEN, RW, &again), 0);
	cr_assert_neq(again->handle, imr->handle);
	cr_assert_eq(write_via(ipd, imr->rkey, o.buf, 16, 'c'), ENOENT);
	/* And the old handle cannot be imported any more. */
	struct ibv_mr *imr2;
	cr_assert_eq(mrmgr_sim_import_mr(ipd, imr->handle, &imr2), ENOENT);
	cr_assert_eq(mrmgr_sim_import_mr(ipd, again->handle, &imr2), 0);
	cr_assert_eq(imr2->rkey, again->rkey);
	cr_assert_eq(mrmgr_sim_unimport_mr(imr2), 0);
	cr_assert_eq(mrmgr_sim_unimport_mr(imr), 0);
	cr_assert_eq(mrmgr_sim_dereg_mr(again), 0);
	cr_assert_eq(mrmgr_sim_unimport_pd(ipd), 0);
	cr_assert_eq(mrmgr_sim_close(ictx), 0);
	owner_close(&o);
}

Test(sim_share, import_checks_handles_and_pds)
{
	struct owner o;
	struct ibv_context *ictx;
	struct ibv_pd *ipd, *pd2, *ipd2, *local;
	struct ibv_mr *imr;

	capture_start();
	owner_open(&o, NULL);
	cr_assert_eq(mrmgr_sim_alloc_pd(o.ctx, &pd2), 0);
	cr_assert_eq(mrmgr_sim_import_device(dup(o.ctx->cmd_fd), &ictx), 0);
	cr_assert_eq(mrmgr_sim_import_pd(ictx, 9999, &ipd), ENOENT);
	cr_assert_eq(mrmgr_sim_import_pd(ictx, o.pd->handle, &ipd), 0);
	cr_assert_eq(mrmgr_sim_import_pd(ictx, pd2->handle, &ipd2), 0);
	cr_assert_eq(mrmgr_sim_import_mr(ipd, 9999, &imr), ENOENT);
	cr_assert_eq(mrmgr_sim_import_mr(ipd2, o.mr->handle, &imr), EINVAL,
		     "the MR is in another PD");
	/* Not an imported PD / context. */
	cr_assert_eq(mrmgr_sim_alloc_pd(ictx, &local), 0);
	cr_assert_eq(mrmgr_sim_import_mr(local, o.mr->handle, &imr), EINVAL);
	cr_assert_eq(mrmgr_sim_import_pd(o.ctx, o.pd->handle, &ipd2), EINVAL);
	cr_assert_eq(mrmgr_sim_import_device(-1, &ictx), EINVAL);
	int nfd = open("/dev/null", O_RDONLY);
	cr_assert_eq(mrmgr_sim_import_device(nfd, &ictx), EINVAL);
	cr_assert_geq(fcntl(nfd, F_GETFD), 0, "left to the caller on failure");
	close(nfd);
	/* A deallocated PD cannot be imported any more. */
	uint32_t h2 = pd2->handle;
	cr_assert_eq(mrmgr_sim_dealloc_pd(pd2), 0);
	struct ibv_pd *gone;
	cr_assert_eq(mrmgr_sim_import_pd(ictx, h2, &gone), ENOENT);
	/* Injected failures. */
	struct mrmgr_sim_fault f = { .op = MRMGR_SIM_OP_IMPORT, .err = ENOMEM, .nth = 1, .count = 1 };
	cr_assert_eq(mrmgr_sim_inject_fault(ictx, &f), 0);
	cr_assert_eq(mrmgr_sim_import_mr(ipd, o.mr->handle, &imr), ENOMEM);
	cr_assert_eq(mrmgr_sim_import_mr(ipd, o.mr->handle, &imr), 0);
	cr_assert_geq(sstats(ictx).import_failures, 5);
	capture_stop();
	cr_assert_eq(mrmgr_sim_unimport_mr(imr), 0);
	cr_assert_eq(mrmgr_sim_dealloc_pd(local), 0);
	cr_assert_eq(mrmgr_sim_unimport_pd(ipd2), 0);
	cr_assert_eq(mrmgr_sim_dealloc_pd(ipd), 0, "dealloc of an imported PD unimports");
	cr_assert_eq(mrmgr_sim_close(ictx), 0);
	owner_close(&o);
}

Test(sim_share, the_rxe_personality_has_no_import)
{
	struct mrmgr_sim_attr rxe = {
		.comp_mask = MRMGR_SIM_ATTR_PERSONALITY, .personality = MRMGR_SIM_RXE,
	};
	struct owner o;
	struct ibv_context *ictx;

	owner_open(&o, &rxe);
	cr_assert_geq(o.ctx->cmd_fd, 0, "rxe has a command fd too");
	int fd = dup(o.ctx->cmd_fd);
	cr_assert_eq(mrmgr_sim_import_device(fd, &ictx), EOPNOTSUPP);
	cr_assert_geq(fcntl(fd, F_GETFD), 0, "a failed import leaves the fd to us");
	close(fd);
	struct ibv_pd *ipd;
	cr_assert_eq(mrmgr_sim_import_pd(o.ctx, o.pd->handle, &ipd), EOPNOTSUPP);
	owner_close(&o);
}

Test(sim_share, page_identity_covers_imports)
{
	struct owner o;
	struct ibv_context *ictx;
	struct ibv_pd *ipd;
	struct ibv_mr *imr;

	if (!mrmgr_sim_page_identity_available())
		cr_skip_test("page identity needs pagemap PFNs (CAP_SYS_ADMIN)");
	owner_open(&o, NULL);
	cr_assert_eq(mrmgr_sim_import_device(dup(o.ctx->cmd_fd), &ictx), 0);
	cr_assert_eq(mrmgr_sim_import_pd(ictx, o.pd->handle, &ipd), 0);
	cr_assert_eq(mrmgr_sim_import_mr(ipd, o.mr->handle, &imr), 0);
	remap_fixed(o.buf, LEN, 'n');
	cr_assert_eq(write_via(ipd, imr->rkey, o.buf, 16, 's'), ESTALE,
		     "the import writes pages the owner no longer maps there");
	cr_assert(all_bytes(o.buf, LEN, 'n'), "nothing written");
	cr_assert_eq(sstats(o.ctx).stale_accesses, 1);
	cr_assert_eq(sstats(ictx).stale_accesses, 1);
	cr_assert_eq(mrmgr_sim_unimport_mr(imr), 0);
	cr_assert_eq(mrmgr_sim_unimport_pd(ipd), 0);
	cr_assert_eq(mrmgr_sim_close(ictx), 0);
	owner_close(&o);
}

Test(sim_share, rereg_updates_what_importers_see)
{
	struct owner o;
	struct ibv_context *ictx;
	struct ibv_pd *ipd;
	struct ibv_mr *imr;
	int code;

	owner_open(&o, NULL);
	cr_assert_eq(mrmgr_sim_import_device(dup(o.ctx->cmd_fd), &ictx), 0);
	cr_assert_eq(mrmgr_sim_import_pd(ictx, o.pd->handle, &ipd), 0);
	cr_assert_eq(mrmgr_sim_import_mr(ipd, o.mr->handle, &imr), 0);
	/* Access dropped to local only: the import follows the owner's MR. */
	cr_assert_eq(mrmgr_sim_rereg_mr(o.mr, IBV_REREG_MR_CHANGE_ACCESS, NULL,
					NULL, 0, IBV_ACCESS_LOCAL_WRITE, &code), 0);
	cr_assert_eq(write_via(ipd, imr->rkey, o.buf, 16, 'r'), EACCES);
	cr_assert_eq(mrmgr_sim_unimport_mr(imr), 0);
	cr_assert_eq(mrmgr_sim_unimport_pd(ipd), 0);
	cr_assert_eq(mrmgr_sim_close(ictx), 0);
	owner_close(&o);
}
