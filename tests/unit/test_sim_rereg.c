/*
 * The simulated HCA's ibv_rereg_mr(): the mlx5-like key rules, pinning the
 * new range while the old one still is, the argument and command errors,
 * the rxe-like refusal, and fault injection leaving the MR in the state
 * each of the five codes promises.
 *
 * SPDX-License-Identifier: MIT
 */
#include "grow_helpers.h"

static struct mrmgr_sim_stats sst(struct ibv_context *ctx)
{
	return sstats(ctx);
}

/* A device and a PD, no cache: the sim's own behaviour. */
static void dev_open(struct fixture *f, const struct mrmgr_sim_attr *sa)
{
	memset(f, 0, sizeof(*f));
	cr_assert_eq(mrmgr_sim_open(sa, &f->ctx), 0);
	cr_assert_eq(mrmgr_sim_alloc_pd(f->ctx, &f->pd), 0);
}

Test(sim_rereg, translation_keeps_keys_while_the_slot_fits)
{
	struct fixture f;
	struct ibv_mr *mr;
	char *buf = map_rw(16 * PG, 0);
	int code = 1;

	dev_open(&f, &sim_big);
	cr_assert_eq(mrmgr_sim_reg_mr(f.pd, buf, 3 * PG, RW, &mr), 0);
	uint32_t lkey = mr->lkey, rkey = mr->rkey;
	uint64_t pinned0 = sst(f.ctx).pinned_bytes;

	/* 3 pages: the key's slot holds 4. */
	cr_assert_eq(mrmgr_sim_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL,
					buf, 4 * PG, 0, &code), 0);
	cr_assert_eq(code, 0);
	cr_assert_eq(mr->lkey, lkey);
	cr_assert_eq(mr->rkey, rkey);
	cr_assert_eq(mr->length, 4 * PG);
	cr_assert_eq(sst(f.ctx).pinned_bytes, pinned0 + PG);
	write_lands(f.pd, mr->rkey, buf + 3 * PG, 'a');

	/* 5 pages do not fit: new keys, the old ones are dead. */
	uint64_t peak0 = sst(f.ctx).peak_pinned_bytes;
	cr_assert_eq(mrmgr_sim_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL,
					buf, 5 * PG, 0, &code), 0);
	cr_assert_neq(mr->rkey, rkey);
	cr_assert_eq(write_err(f.pd, rkey, buf), ENOENT);
	write_lands(f.pd, mr->rkey, buf + 4 * PG, 'b');
	cr_assert_eq(sst(f.ctx).rereg_key_changes, 1);
	/* The new range was pinned while the old one still was. */
	cr_assert_eq(peak0, 7 * PG);
	cr_assert_eq(sst(f.ctx).peak_pinned_bytes, 9 * PG);
	cr_assert_eq(sst(f.ctx).pinned_bytes, pinned0 + 2 * PG);

	/* Elsewhere: the old pages are no longer the MR's. */
	cr_assert_eq(mrmgr_sim_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL,
					buf + 8 * PG, 4 * PG, 0, &code), 0);
	cr_assert_eq(write_err(f.pd, mr->rkey, buf), ERANGE);
	write_lands(f.pd, mr->rkey, buf + 8 * PG, 'c');
	cr_assert_eq(sst(f.ctx).reregs, 3);
	cr_assert_eq(sst(f.ctx).rereg_pages, 4 + 5 + 4);
	cr_assert_eq(mrmgr_sim_dereg_mr(mr), 0);
	fx_close(&f);
	munmap(buf, 16 * PG);
}

Test(sim_rereg, access_and_pd_changes_keep_keys)
{
	struct fixture f;
	struct ibv_pd *pd2;
	struct ibv_mr *mr;
	char *buf = map_rw(4 * PG, 0);

	dev_open(&f, &sim_big);
	cr_assert_eq(mrmgr_sim_alloc_pd(f.ctx, &pd2), 0);
	cr_assert_eq(mrmgr_sim_reg_mr(f.pd, buf, 4 * PG, IBV_ACCESS_REMOTE_READ, &mr), 0);
	uint32_t rkey = mr->rkey;
	cr_assert_eq(write_err(f.pd, rkey, buf), EACCES);

	cr_assert_eq(mrmgr_sim_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0,
					RW, NULL), 0);
	cr_assert_eq(mr->rkey, rkey);
	write_lands(f.pd, rkey, buf, 'a');

	cr_assert_eq(mrmgr_sim_rereg_mr(mr, IBV_REREG_MR_CHANGE_PD, pd2, NULL, 0, 0,
					NULL), 0);
	cr_assert_eq(mr->rkey, rkey);
	cr_assert_eq(mr->pd, pd2);
	cr_assert_eq(write_err(f.pd, rkey, buf), ENOENT, "not in the old PD");
	write_lands(pd2, rkey, buf, 'b');
	cr_assert_eq(mrmgr_sim_dealloc_pd(pd2), EBUSY, "the MR is in pd2 now");
	cr_assert_eq(mrmgr_sim_dereg_mr(mr), 0);
	cr_assert_eq(mrmgr_sim_dealloc_pd(pd2), 0);
	fx_close(&f);
	munmap(buf, 4 * PG);
}

Test(sim_rereg, input_errors_leave_the_mr_valid)
{
	struct fixture f;
	struct ibv_mr *mr;
	char *buf = map_rw(4 * PG, 0);
	int code;

	dev_open(&f, &sim_big);
	cr_assert_eq(mrmgr_sim_reg_mr(f.pd, buf, 2 * PG, RW, &mr), 0);
	cr_assert_eq(mrmgr_sim_rereg_mr(mr, 1 << 7, NULL, buf, PG, 0, &code), EINVAL);
	cr_assert_eq(code, IBV_REREG_MR_ERR_INPUT);
	cr_assert_eq(mrmgr_sim_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL,
					NULL, PG, 0, &code), EINVAL);
	cr_assert_eq(code, IBV_REREG_MR_ERR_INPUT);
	cr_assert_eq(mrmgr_sim_rereg_mr(mr, IBV_REREG_MR_CHANGE_PD, f.pd, NULL, 0,
					RW, &code), EINVAL, "access without its flag");
	cr_assert_eq(code, IBV_REREG_MR_ERR_INPUT);
	write_lands(f.pd, mr->rkey, buf + PG, 'a');
	cr_assert_eq(mrmgr_sim_dereg_mr(mr), 0);
	fx_close(&f);
	munmap(buf, 4 * PG);
}

Test(sim_rereg, command_errors_leave_an_unusable_mr)
{
	struct fixture f;
	struct ibv_context *ctx2;
	struct ibv_pd *other;
	struct ibv_mr *a, *b;
	char *buf = map_rw(4 * PG, 0);
	char *gone = map_rw(4 * PG, 0);
	int code;

	munmap(gone, 4 * PG);
	dev_open(&f, &sim_big);
	cr_assert_eq(mrmgr_sim_open(NULL, &ctx2), 0);
	cr_assert_eq(mrmgr_sim_alloc_pd(ctx2, &other), 0);

	cr_assert_eq(mrmgr_sim_reg_mr(f.pd, buf, 2 * PG, RW, &a), 0);
	cr_assert_eq(mrmgr_sim_rereg_mr(a, IBV_REREG_MR_CHANGE_TRANSLATION, NULL,
					gone, 4 * PG, 0, &code), EFAULT);
	cr_assert_eq(code, IBV_REREG_MR_ERR_CMD);
	cr_assert_eq(write_err(f.pd, a->rkey, buf), ENOENT, "unusable");
	cr_assert_eq(sst(f.ctx).pinned_bytes, 2 * PG, "nothing more pinned");

	cr_assert_eq(mrmgr_sim_reg_mr(f.pd, buf, 2 * PG, RW, &b), 0);
	cr_assert_eq(mrmgr_sim_rereg_mr(b, IBV_REREG_MR_CHANGE_PD, other, NULL, 0, 0,
					&code), EINVAL);
	cr_assert_eq(code, IBV_REREG_MR_ERR_CMD);
	/* Dereg still works, as the man page requires. */
	cr_assert_eq(mrmgr_sim_dereg_mr(a), 0);
	cr_assert_eq(mrmgr_sim_dereg_mr(b), 0);
	cr_assert_eq(mrmgr_sim_dealloc_pd(other), 0);
	cr_assert_eq(mrmgr_sim_close(ctx2), 0);
	fx_close(&f);
	munmap(buf, 4 * PG);
}

Test(sim_rereg, memlock_counts_old_and_new_during_the_call)
{
	struct fixture f;
	struct mrmgr_sim_attr sa = { .comp_mask = MRMGR_SIM_ATTR_MEMLOCK,
				     .memlock_bytes = 8 * PG };
	struct ibv_mr *mr;
	char *buf = map_rw(8 * PG, 0);
	int code;

	dev_open(&f, &sa);
	cr_assert_eq(mrmgr_sim_reg_mr(f.pd, buf, 4 * PG, RW, &mr), 0);
	cr_assert_eq(mrmgr_sim_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL,
					buf, 6 * PG, 0, &code), ENOMEM);
	cr_assert_eq(code, IBV_REREG_MR_ERR_CMD);
	cr_assert_eq(mrmgr_sim_dereg_mr(mr), 0);
	fx_close(&f);
	munmap(buf, 8 * PG);
}

Test(sim_rereg, rxe_refuses_like_the_real_device)
{
	struct fixture f;
	struct ibv_mr *mr;
	char *buf = map_rw(4 * PG, 0);
	int code;

	dev_open(&f, &sim_rxe);
	cr_assert_eq(mrmgr_sim_reg_mr(f.pd, buf, 2 * PG, RW, &mr), 0);
	cr_assert_eq(mrmgr_sim_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL,
					buf, 4 * PG, 0, &code), EOPNOTSUPP);
	cr_assert_eq(code, IBV_REREG_MR_ERR_CMD);
	cr_assert_eq(mr->length, 2 * PG);
	write_lands(f.pd, mr->rkey, buf, 'a'); /* nothing happened to it */
	cr_assert_eq(mrmgr_sim_dereg_mr(mr), 0);
	fx_close(&f);
	munmap(buf, 4 * PG);
}

Test(sim_rereg, injected_codes_leave_the_promised_state)
{
	static const int codes[] = {
		IBV_REREG_MR_ERR_INPUT, IBV_REREG_MR_ERR_DONT_FORK_NEW,
		IBV_REREG_MR_ERR_DO_FORK_OLD, IBV_REREG_MR_ERR_CMD,
		IBV_REREG_MR_ERR_CMD_AND_DO_FORK_NEW,
	};
	struct fixture f;
	char *buf = map_rw(8 * PG, 0);

	dev_open(&f, &sim_big);
	for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++) {
		struct ibv_mr *mr;
		int code = 0;

		cr_assert_eq(mrmgr_sim_reg_mr(f.pd, buf, 2 * PG, RW, &mr), 0);
		rereg_fault(f.ctx, codes[i], EIO);
		cr_assert_eq(mrmgr_sim_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION,
						NULL, buf, 8 * PG, 0, &code), EIO);
		cr_assert_eq(code, codes[i]);
		if (codes[i] == IBV_REREG_MR_ERR_DO_FORK_OLD) {
			cr_assert_eq(mr->length, 8 * PG, "the new MR is valid");
			write_lands(f.pd, mr->rkey, buf + 7 * PG, 'n');
		} else if (codes[i] >= IBV_REREG_MR_ERR_DONT_FORK_NEW) {
			cr_assert_eq(mr->length, 2 * PG, "the old MR is valid");
			write_lands(f.pd, mr->rkey, buf + PG, 'o');
			cr_assert_eq(write_err(f.pd, mr->rkey, buf + 7 * PG), ERANGE);
		} else {
			cr_assert_eq(write_err(f.pd, mr->rkey, buf), ENOENT,
				     "code %d: the MR must not be usable", codes[i]);
		}
		cr_assert_eq(mrmgr_sim_dereg_mr(mr), 0);
	}
	/* A code needs the rereg op and must be one of the five. */
	struct mrmgr_sim_fault bad = { .comp_mask = MRMGR_SIM_FAULT_REREG_CODE,
				       .op = MRMGR_SIM_OP_REG, .err = EIO, .nth = 1,
				       .rereg_code = IBV_REREG_MR_ERR_CMD };
	cr_assert_eq(mrmgr_sim_inject_fault(f.ctx, &bad), EINVAL);
	bad.op = MRMGR_SIM_OP_REREG;
	bad.rereg_code = -6;
	cr_assert_eq(mrmgr_sim_inject_fault(f.ctx, &bad), EINVAL);
	fx_close(&f);
	munmap(buf, 8 * PG);
}
