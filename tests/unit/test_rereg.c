/*
 * The ibv_rereg_mr() error contract as the cache applies it, on the
 * simulated HCA: each of the five codes and EOPNOTSUPP injected into a
 * growth (checked through writes, the device's peak pinning, and leaks),
 * ENOMEM during the call, shared regions, the no-rereg policy, the
 * rxe-like personality's probe-once fallback, and PD moves.
 *
 * SPDX-License-Identifier: MIT
 */
#include "grow_helpers.h"

#include "cache.h" /* mrmgr_region::kind, to mark a region shared */

/* ------------------------------------------------------ the error contract */

struct code_case {
	int code;  /* 0: EOPNOTSUPP with the default code */
	int err;
};

/* Grow a 16 KiB idle region to 32 KiB with the next rereg failing. */
static void grow_through_fault(const struct code_case *cc)
{
	struct fixture f;
	struct mrmgr_cache_attr a = cattr(MRMGR_CACHE_NO_HEADROOM);
	mrmgr_region_t *r1, *r2;
	char *buf = map_rw(64 * KiB, 0);

	fx_open(&f, &sim_big, &a);
	cr_assert_eq(mrmgr_get(f.cache, buf, 16 * KiB, RW, &r1), 0);
	uint32_t old_rkey = mrmgr_region_rkey(r1);
	mrmgr_put(r1);
	rereg_fault(f.ctx, cc->code, cc->err);
	cr_assert_eq(mrmgr_get(f.cache, buf, 32 * KiB, RW, &r2), 0,
		     "code %d: growth must succeed", cc->code);
	cr_assert_eq(mrmgr_region_length(r2), 32 * KiB);
	/* Through the keys handed out, the whole new range, and only there. */
	write_lands(f.pd, mrmgr_region_rkey(r2), buf, 'a');
	write_lands(f.pd, mrmgr_region_rkey(r2), buf + 32 * KiB - 8, 'b');
	struct mrmgr_stats s = cstats(f.cache);
	uint64_t peak = sstats(f.ctx).peak_pinned_bytes;
	cr_assert_eq(s.rereg_attempts, 1);
	switch (cc->code) {
	case IBV_REREG_MR_ERR_INPUT:
	case IBV_REREG_MR_ERR_DONT_FORK_NEW:
		/* Old MR valid: a new one made, then the old released. */
		cr_assert_eq(peak, 48 * KiB, "made before the old one broke");
		cr_assert_eq(s.rereg_fallback_input, 1);
		cr_assert_eq(s.registrations, 2);
		cr_assert_eq(s.deregistrations, 1);
		cr_assert_eq(write_err(f.pd, old_rkey, buf), ENOENT);
		break;
	case IBV_REREG_MR_ERR_DO_FORK_OLD:
		/* New MR valid: adopted, in place. */
		cr_assert_eq(peak, 48 * KiB, "pinned during the call");
		cr_assert_eq(r2, r1);
		cr_assert_eq(s.rereg_successes, 1);
		cr_assert_eq(s.rereg_fork_errors, 1);
		cr_assert_eq(s.registrations, 1);
		break;
	case IBV_REREG_MR_ERR_CMD:
	case IBV_REREG_MR_ERR_CMD_AND_DO_FORK_NEW:
		/* The unusable MR goes first: never pinned together. */
		cr_assert_eq(peak, 32 * KiB);
		cr_assert_eq(s.rereg_fallback_cmd, 1);
		cr_assert_eq(s.registrations, 2);
		cr_assert_eq(s.deregistrations, 1, "the unusable MR is deregistered");
		break;
	default: /* EOPNOTSUPP: remembered for the device */
		cr_assert_eq(peak, 32 * KiB);
		cr_assert_eq(s.rereg_fallback_unsupported, 1);
		cr_assert_eq(s.registrations, 2);
		cr_assert_eq(s.deregistrations, 1);
		break;
	}
	cr_assert_eq(sstats(f.ctx).live_mrs, 1, "code %d: nothing leaked", cc->code);
	mrmgr_put(r2);

	/* The next growth: rereg again, except after EOPNOTSUPP. */
	cr_assert_eq(mrmgr_get(f.cache, buf, 48 * KiB, RW, &r2), 0);
	write_lands(f.pd, mrmgr_region_rkey(r2), buf + 48 * KiB - 8, 'c');
	mrmgr_put(r2);
	s = cstats(f.cache);
	cr_assert_eq(s.rereg_attempts, cc->code ? 2 : 1);
	cr_assert_eq(s.rereg_probes, 1, "probed once, at cache creation");
	cr_assert_eq(sstats(f.ctx).stale_accesses, 0);
	fx_close(&f);
	munmap(buf, 64 * KiB);
}

Test(grow, err_input_keeps_old_and_makes_before_breaking)
{
	grow_through_fault(&(struct code_case){ IBV_REREG_MR_ERR_INPUT, EINVAL });
}

Test(grow, err_dont_fork_new_keeps_old_and_makes_before_breaking)
{
	grow_through_fault(&(struct code_case){ IBV_REREG_MR_ERR_DONT_FORK_NEW, ENOMEM });
}

Test(grow, err_do_fork_old_adopts_the_new_translation)
{
	grow_through_fault(&(struct code_case){ IBV_REREG_MR_ERR_DO_FORK_OLD, EINVAL });
}

Test(grow, err_cmd_deregisters_and_registers_afresh)
{
	grow_through_fault(&(struct code_case){ IBV_REREG_MR_ERR_CMD, EIO });
}

Test(grow, err_cmd_and_do_fork_new_deregisters_and_registers_afresh)
{
	grow_through_fault(&(struct code_case){ IBV_REREG_MR_ERR_CMD_AND_DO_FORK_NEW, EIO });
}

/* A failed rereg is handled (registered anew); under a tight memlock
 * budget it can happen at every growth, so it is said once per process
 * and counted every time. */
static unsigned int rereg_warns, rereg_debugs;

static void count_rereg_lines(enum mrmgr_log_level level, const char *msg,
			      void *arg)
{
	(void)arg;
	if (!strstr(msg, "rereg failed"))
		return;
	rereg_warns += level == MRMGR_LOG_WARN;
	rereg_debugs += level == MRMGR_LOG_DEBUG;
}

Test(grow, err_cmd_is_said_once_and_counted_every_time)
{
	struct fixture f;
	struct mrmgr_cache_attr a = cattr(MRMGR_CACHE_NO_HEADROOM);
	mrmgr_region_t *r;
	char *buf = map_rw(64 * KiB, 0);

	mrmgr_set_log_handler(count_rereg_lines, NULL, MRMGR_LOG_DEBUG);
	fx_open(&f, &sim_big, &a);
	for (size_t len = 8 * KiB; len <= 32 * KiB; len += 8 * KiB) {
		if (len > 8 * KiB)
			rereg_fault(f.ctx, IBV_REREG_MR_ERR_CMD, ENOMEM);
		cr_assert_eq(mrmgr_get(f.cache, buf, len, RW, &r), 0);
		write_lands(f.pd, mrmgr_region_rkey(r), buf + len - 8, 'g');
		mrmgr_put(r);
	}
	cr_assert_eq(cstats(f.cache).rereg_fallback_cmd, 3);
	cr_assert_eq(rereg_warns, 1, "said once, not %u times", rereg_warns);
	cr_assert_eq(rereg_debugs, 2, "the others at debug level");
	mrmgr_set_log_handler(NULL, NULL, MRMGR_LOG_WARN);
	fx_close(&f);
	munmap(buf, 64 * KiB);
}

Test(grow, eopnotsupp_is_remembered_for_the_device)
{
	grow_through_fault(&(struct code_case){ 0, EOPNOTSUPP });
}

Test(grow, enomem_during_rereg_falls_back_to_a_fresh_registration)
{
	struct fixture f;
	struct mrmgr_sim_attr sa = { .comp_mask = MRMGR_SIM_ATTR_MEMLOCK,
				     .memlock_bytes = 96 * KiB };
	struct mrmgr_cache_attr a = cattr(MRMGR_CACHE_NO_HEADROOM);
	mrmgr_region_t *r;
	char *buf = map_rw(128 * KiB, 0);

	fx_open(&f, &sa, &a);
	cr_assert_eq(mrmgr_get(f.cache, buf, 64 * KiB, RW, &r), 0);
	mrmgr_put(r);
	/* The kernel pins the new 80 KiB before it lets the old 64 go. */
	cr_assert_eq(mrmgr_get(f.cache, buf, 80 * KiB, RW, &r), 0);
	cr_assert_eq(mrmgr_region_length(r), 80 * KiB);
	write_lands(f.pd, mrmgr_region_rkey(r), buf + 72 * KiB, 'm');
	mrmgr_put(r);
	struct mrmgr_stats s = cstats(f.cache);
	cr_assert_eq(s.rereg_fallback_cmd, 1);
	cr_assert_eq(s.registrations, 2);
	cr_assert_eq(sstats(f.ctx).live_mrs, 1);
	fx_close(&f);
	munmap(buf, 128 * KiB);
}

Test(grow, shared_regions_are_never_rereg)
{
	struct fixture f;
	struct mrmgr_cache_attr a = cattr(MRMGR_CACHE_NO_HEADROOM);
	mrmgr_region_t *r1, *r2;
	char *buf = map_rw(64 * KiB, 0);

	fx_open(&f, &sim_big, &a);
	cr_assert_eq(mrmgr_get(f.cache, buf, 16 * KiB, RW, &r1), 0);
	r1->kind |= MRMGR__REGION_SHARED;
	mrmgr_put(r1);
	cr_assert_eq(mrmgr_get(f.cache, buf, 32 * KiB, RW, &r2), 0);
	write_lands(f.pd, mrmgr_region_rkey(r2), buf + 24 * KiB, 's');
	mrmgr_put(r2);
	struct mrmgr_stats s = cstats(f.cache);
	cr_assert_eq(s.rereg_attempts, 0);
	cr_assert_eq(s.rereg_fallback_shared, 1);
	cr_assert_eq(s.registrations, 2);
	cr_assert_eq(sstats(f.ctx).live_mrs, 1);
	fx_close(&f);
	munmap(buf, 64 * KiB);
}

Test(grow, no_rereg_policy_registers_anew)
{
	struct fixture f;
	struct mrmgr_cache_attr a = cattr(MRMGR_CACHE_NO_HEADROOM | MRMGR_CACHE_NO_REREG);
	mrmgr_region_t *r;
	char *buf = map_rw(64 * KiB, 0);

	fx_open(&f, &sim_big, &a);
	for (size_t len = 16 * KiB; len <= 64 * KiB; len += 16 * KiB) {
		cr_assert_eq(mrmgr_get(f.cache, buf, len, RW, &r), 0);
		write_lands(f.pd, mrmgr_region_rkey(r), buf + len - 8, 'p');
		mrmgr_put(r);
	}
	struct mrmgr_stats s = cstats(f.cache);
	cr_assert_eq(s.rereg_attempts, 0);
	cr_assert_eq(s.rereg_probes, 0, "no probe when rereg is off");
	cr_assert_eq(s.registrations, 4);
	cr_assert_eq(s.deregistrations, 3);
	fx_close(&f);
	munmap(buf, 64 * KiB);
}

/* ------------------------------------------------------ rxe personality */

Test(grow, rxe_probes_once_per_device_then_falls_back)
{
	struct fixture f;
	struct mrmgr_cache_attr a = cattr(MRMGR_CACHE_NO_HEADROOM);
	mrmgr_cache_t *second;
	mrmgr_region_t *r;
	char *buf = map_rw(128 * KiB, 0);

	fx_open(&f, &sim_rxe, &a);
	cr_assert_eq(cstats(f.cache).rereg_probes, 1);
	uint64_t dev_failures = sstats(f.ctx).rereg_failures;
	cr_assert_eq(dev_failures, 1, "the probe is the only rereg the device sees");
	for (size_t len = 16 * KiB; len <= 128 * KiB; len += 16 * KiB) {
		cr_assert_eq(mrmgr_get(f.cache, buf, len, RW, &r), 0);
		write_lands(f.pd, mrmgr_region_rkey(r), buf + len - 8, 'x');
		mrmgr_put(r);
	}
	struct mrmgr_stats s = cstats(f.cache);
	cr_assert_eq(s.rereg_probes, 1, "once per cache, not per growth");
	cr_assert_eq(s.rereg_attempts, 0);
	cr_assert_eq(s.rereg_fallback_unsupported, 7);
	cr_assert_eq(s.registrations, 8);
	cr_assert_eq(s.deregistrations, 7);
	cr_assert_eq(sstats(f.ctx).rereg_failures, dev_failures);
	cr_assert_eq(sstats(f.ctx).peak_pinned_bytes, 128 * KiB,
		     "dereg before reg: never old and new together");

	/* Another cache on the same device remembers the verdict. */
	cr_assert_eq(mrmgr_cache_create(f.pd, &a, &second), 0);
	cr_assert_eq(cstats(second).rereg_probes, 0);
	cr_assert_eq(mrmgr_get(second, buf, 16 * KiB, RW, &r), 0);
	mrmgr_put(r);
	cr_assert_eq(mrmgr_get(second, buf, 32 * KiB, RW, &r), 0);
	mrmgr_put(r);
	cr_assert_eq(cstats(second).rereg_fallback_unsupported, 1);
	cr_assert_eq(mrmgr_cache_destroy(second), 0);
	cr_assert_eq(sstats(f.ctx).rereg_failures, dev_failures);
	fx_close(&f);
	munmap(buf, 128 * KiB);
}

Test(grow, mlx5_probe_once_per_device)
{
	struct fixture f;
	mrmgr_cache_t *second;

	fx_open(&f, &sim_big, NULL);
	cr_assert_eq(cstats(f.cache).rereg_probes, 1);
	cr_assert_eq(sstats(f.ctx).reregs, 1);
	cr_assert_eq(mrmgr_cache_create(f.pd, NULL, &second), 0);
	cr_assert_eq(cstats(second).rereg_probes, 0);
	cr_assert_eq(sstats(f.ctx).reregs, 1);
	cr_assert_eq(mrmgr_cache_destroy(second), 0);
	fx_close(&f);
}

/* ------------------------------------------------------ PD move */

Test(grow, move_pd_rereg_idle_regions_in_place)
{
	struct fixture f;
	struct ibv_pd *pd2;
	mrmgr_region_t *r, *again;
	char *buf = map_rw(64 * KiB, 0);

	fx_open(&f, &sim_big, NULL);
	cr_assert_eq(mrmgr_sim_alloc_pd(f.ctx, &pd2), 0);
	cr_assert_eq(mrmgr_get(f.cache, buf, 64 * KiB, RW, &r), 0);
	uint32_t rkey = mrmgr_region_rkey(r);
	uint64_t gen = mrmgr_region_generation(r);
	mrmgr_put(r);
	cr_assert_eq(mrmgr_cache_move_pd(f.cache, pd2), 0);
	cr_assert_eq(mrmgr_get(f.cache, buf, 64 * KiB, RW, &again), 0);
	cr_assert_eq(again, r, "moved in place, still cached");
	cr_assert_eq(mrmgr_region_mr(again)->pd, pd2);
	cr_assert_eq(mrmgr_region_rkey(again), rkey, "mlx5 keeps keys on a PD change");
	cr_assert_neq(mrmgr_region_generation(again), gen);
	write_lands(pd2, rkey, buf, 'p');
	cr_assert_eq(write_err(f.pd, rkey, buf), ENOENT);
	mrmgr_put(again);
	cr_assert_eq(mrmgr_sim_dealloc_pd(f.pd), 0, "nothing left in the old PD");
	f.pd = pd2;
	fx_close(&f);
	munmap(buf, 64 * KiB);
}

Test(grow, move_pd_leaves_held_regions_to_their_holders)
{
	struct fixture f;
	struct ibv_pd *pd2;
	mrmgr_region_t *held, *fresh;
	char *buf = map_rw(64 * KiB, 0);

	fx_open(&f, &sim_big, NULL);
	cr_assert_eq(mrmgr_sim_alloc_pd(f.ctx, &pd2), 0);
	cr_assert_eq(mrmgr_get(f.cache, buf, 64 * KiB, RW, &held), 0);
	cr_assert_eq(mrmgr_cache_move_pd(f.cache, pd2), 0);
	write_lands(f.pd, mrmgr_region_rkey(held), buf, 'h');
	cr_assert_eq(mrmgr_get(f.cache, buf, 64 * KiB, RW, &fresh), 0);
	cr_assert_neq(fresh, held);
	cr_assert_eq(mrmgr_region_mr(fresh)->pd, pd2);
	write_lands(pd2, mrmgr_region_rkey(fresh), buf, 'f');
	mrmgr_put(held);
	cr_assert_eq(sstats(f.ctx).live_mrs, 1);
	cr_assert_eq(mrmgr_sim_dealloc_pd(f.pd), 0, "nothing left in the old PD");
	f.pd = pd2;
	mrmgr_put(fresh);
	fx_close(&f);
	munmap(buf, 64 * KiB);
}

Test(grow, move_pd_on_rxe_drops_idle_regions)
{
	struct fixture f;
	struct ibv_pd *pd2;
	mrmgr_region_t *r;
	char *buf = map_rw(64 * KiB, 0);

	fx_open(&f, &sim_rxe, NULL);
	cr_assert_eq(mrmgr_sim_alloc_pd(f.ctx, &pd2), 0);
	cr_assert_eq(mrmgr_get(f.cache, buf, 64 * KiB, RW, &r), 0);
	mrmgr_put(r);
	cr_assert_eq(mrmgr_cache_move_pd(f.cache, pd2), 0);
	cr_assert_eq(sstats(f.ctx).live_mrs, 0);
	cr_assert_eq(mrmgr_get(f.cache, buf, 64 * KiB, RW, &r), 0);
	write_lands(pd2, mrmgr_region_rkey(r), buf, 'r');
	mrmgr_put(r);
	cr_assert_eq(cstats(f.cache).rereg_fallback_unsupported, 1);
	cr_assert_eq(mrmgr_sim_dealloc_pd(f.pd), 0);
	f.pd = pd2;
	fx_close(&f);
	munmap(buf, 64 * KiB);
}

Test(grow, move_pd_checks_its_arguments)
{
	struct fixture f;
	struct ibv_context *ctx2;
	struct ibv_pd *other;

	fx_open(&f, NULL, NULL);
	cr_assert_eq(mrmgr_sim_open(NULL, &ctx2), 0);
	cr_assert_eq(mrmgr_sim_alloc_pd(ctx2, &other), 0);
	cr_assert_eq(mrmgr_cache_move_pd(NULL, other), EINVAL);
	cr_assert_eq(mrmgr_cache_move_pd(f.cache, NULL), EINVAL);
	cr_assert_eq(mrmgr_cache_move_pd(f.cache, other), EINVAL);
	cr_assert_eq(mrmgr_cache_move_pd(f.cache, f.pd), 0);
	cr_assert_eq(mrmgr_sim_dealloc_pd(other), 0);
	cr_assert_eq(mrmgr_sim_close(ctx2), 0);
	fx_close(&f);
}

