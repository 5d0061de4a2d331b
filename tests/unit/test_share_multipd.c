/*
 * Multi-PD caches on the simulated HCA: one region per range with one MR
 * per PD, registered lazily; gets, puts, hits without registration,
 * eviction and limits counting every MR, invalidation in every PD at
 * once, several devices, and a threaded run.
 *
 * SPDX-License-Identifier: MIT
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

#include "share_helpers.h"

static struct mrmgr_cache_attr big = {
	.comp_mask = MRMGR_CACHE_ATTR_MAX_BYTES, .max_bytes = 1ull << 32,
};

Test(multipd, each_pd_gets_its_own_mr_of_one_region_lazily)
{
	struct mfx m;
	mrmgr_region_t *r0, *r1, *again;
	char *buf = map_rw(64 * KiB, 0);

	mfx_open(&m, 2, 1, NULL, &big);
	cr_assert_eq(get_pd(m.cache, m.pd[0], buf, 64 * KiB, RW, &r0), 0);
	cr_assert_not_null(mrmgr_region_mr_pd(r0, m.pd[0]));
	cr_assert_null(mrmgr_region_mr_pd(r0, m.pd[1]), "not registered where nobody asked");
	cr_assert_eq(sstats(m.ctx[0]).live_mrs, 1);

	cr_assert_eq(get_pd(m.cache, m.pd[1], buf + 4 * KiB, 100, RW, &r1), 0);
	cr_assert_eq(r1, r0, "one region for the range, whatever the PD");
	struct ibv_mr *mr0 = mrmgr_region_mr_pd(r1, m.pd[0]);
	struct ibv_mr *mr1 = mrmgr_region_mr_pd(r1, m.pd[1]);
	cr_assert_not_null(mr1);
	cr_assert_eq(mr1->pd, m.pd[1]);
	cr_assert_eq(mr0->pd, m.pd[0]);
	cr_assert_neq(mr0->rkey, mr1->rkey);
	cr_assert_eq(mrmgr_region_rkey_pd(r1, m.pd[1]), mr1->rkey);
	cr_assert_eq(mrmgr_region_lkey_pd(r1, m.pd[0]), mr0->lkey);
	/* The plain accessors report the first PD's MR. */
	cr_assert_eq(mrmgr_region_mr(r1), mr0);
	cr_assert_eq(mrmgr_region_rkey(r1), mr0->rkey);
	cr_assert_eq(sstats(m.ctx[0]).live_mrs, 2);

	/* Each PD's keys reach the memory through that PD only. */
	cr_assert_eq(write_via(m.pd[0], mr0->rkey, buf, 4 * KiB, 'a'), 0);
	cr_assert(all_bytes(buf, 4 * KiB, 'a'));
	cr_assert_eq(write_via(m.pd[1], mr1->rkey, buf + 8 * KiB, 4 * KiB, 'b'), 0);
	cr_assert(all_bytes(buf + 8 * KiB, 4 * KiB, 'b'));
	cr_assert_eq(write_via(m.pd[1], mr0->rkey, buf, 4 * KiB, 'x'), ENOENT);
	cr_assert_eq(write_via(m.pd[0], mr1->rkey, buf, 4 * KiB, 'x'), ENOENT);

	/* Now both PDs hit without registering. */
	cr_assert_eq(get_pd(m.cache, m.pd[1], buf, 64 * KiB, RW, &again), 0);
	cr_assert_eq(again, r0);
	mrmgr_put(again);
	cr_assert_eq(mrmgr_get(m.cache, buf, 64 * KiB, RW, &again), 0);
	cr_assert_eq(again, r0);
	mrmgr_put(again);

	struct mrmgr_stats s = cstats(m.cache);
	cr_assert_eq(s.registrations, 2);
	cr_assert_eq(s.share_pd_registrations, 1);
	cr_assert_eq(s.share_pd_mrs, 1);
	cr_assert_eq(s.share_sets, 1);
	cr_assert_eq(s.regions, 2, "regions counts MRs");
	cr_assert_eq(s.pinned_bytes, 2 * 64 * KiB, "each registration pins");
	cr_assert_eq(s.misses, 1);
	cr_assert_geq(s.hits, 3);

	struct mrmgr_share_info info[4];
	cr_assert_eq(shares(r0, info, 4), 2);
	cr_assert_eq(info[0].kind, MRMGR_SHARE_MR);
	cr_assert_eq(info[0].pd, m.pd[0]);
	cr_assert_eq(info[1].pd, m.pd[1]);
	cr_assert_eq(info[1].rkey, mr1->rkey);
	cr_assert_eq(info[1].refs, 2, "two gets held");
	cr_assert_eq(info[0].flags, 0);

	mrmgr_put(r0);
	mrmgr_put(r1);
	cr_assert_eq(cstats(m.cache).regions_in_use, 0);
	mfx_close(&m);
	cr_assert_eq(0, 0);
	munmap(buf, 64 * KiB);
}

Test(multipd, a_region_first_asked_in_another_pd_has_no_first_pd_mr_until_asked)
{
	struct mfx m;
	mrmgr_region_t *r, *r0;
	char *buf = map_rw(16 * KiB, 0);

	mfx_open(&m, 3, 1, NULL, &big);
	cr_assert_eq(get_pd(m.cache, m.pd[2], buf, 16 * KiB, RW, &r), 0);
	cr_assert_null(mrmgr_region_mr(r));
	cr_assert_eq(mrmgr_region_lkey(r), 0);
	cr_assert_not_null(mrmgr_region_mr_pd(r, m.pd[2]));
	cr_assert_null(mrmgr_region_mr_pd(r, m.pd[1]));
	cr_assert_eq(mrmgr_get(m.cache, buf, 16 * KiB, RW, &r0), 0);
	cr_assert_eq(r0, r);
	cr_assert_not_null(mrmgr_region_mr(r0));
	cr_assert_eq(mrmgr_region_mr(r0)->pd, m.pd[0]);
	cr_assert_eq(sstats(m.ctx[0]).live_mrs, 2);
	mrmgr_put(r);
	mrmgr_put(r0);
	/* Eviction (here: destruction) takes every MR of the region. */
	mfx_close(&m);
	munmap(buf, 16 * KiB);
}

Test(multipd, invalidation_drops_the_range_in_every_pd_and_holders_keep_theirs)
{
	struct mfx m;
	mrmgr_region_t *a, *b, *fresh;
	char *buf = map_rw(32 * KiB, 0);

	mfx_open(&m, 2, 1, NULL, &big);
	cr_assert_eq(get_pd(m.cache, m.pd[0], buf, 32 * KiB, RW, &a), 0);
	cr_assert_eq(get_pd(m.cache, m.pd[1], buf, 32 * KiB, RW, &b), 0);
	uint32_t k0 = mrmgr_region_rkey_pd(a, m.pd[0]), k1 = mrmgr_region_rkey_pd(b, m.pd[1]);
	cr_assert_eq(mrmgr_invalidate(m.cache, buf + 4 * KiB, 1), 0);
	/* No later get returns the old registration, in either PD. */
	cr_assert_eq(get_pd(m.cache, m.pd[1], buf, 32 * KiB, RW, &fresh), 0);
	cr_assert_neq(fresh, a);
	cr_assert_neq(mrmgr_region_rkey_pd(fresh, m.pd[1]), k1);
	cr_assert_null(mrmgr_region_mr_pd(fresh, m.pd[0]));
	mrmgr_put(fresh);
	/* Holders keep both MRs until their puts. */
	cr_assert_eq(write_via(m.pd[0], k0, buf, 4 * KiB, 'p'), 0);
	cr_assert_eq(write_via(m.pd[1], k1, buf, 4 * KiB, 'q'), 0);
	struct mrmgr_share_info info[4];
	cr_assert_eq(shares(a, info, 4), 2);
	cr_assert(info[0].flags & MRMGR_SHARE_DETACHED);
	uint64_t before = sstats(m.ctx[0]).live_mrs;
	mrmgr_put(a);
	cr_assert_eq(sstats(m.ctx[0]).live_mrs, before, "b still holds it");
	mrmgr_put(b);
	cr_assert_eq(sstats(m.ctx[0]).live_mrs, before - 2, "both MRs at the last put");
	cr_assert_eq(write_via(m.pd[1], k1, buf, 4 * KiB, 'r'), ENOENT);
	struct mrmgr_stats s = cstats(m.cache);
	cr_assert_eq(s.invalidations, 1);
	cr_assert_eq(s.share_sets, 0);
	cr_assert_eq(s.share_pd_mrs, 0);
	cr_assert_eq(s.regions, 1);
	mfx_close(&m);
	munmap(buf, 32 * KiB);
}

Test(multipd, the_region_limit_counts_every_mr_and_eviction_takes_them_all)
{
	struct mfx m;
	struct mrmgr_cache_attr a = {
		.comp_mask = MRMGR_CACHE_ATTR_MAX_REGIONS | MRMGR_CACHE_ATTR_FLAGS,
		.max_regions = 3, .flags = MRMGR_CACHE_NO_MERGE,
	};
	mrmgr_region_t *r;
	char *buf = map_rw(3 * 16 * KiB, 0);

	mfx_open(&m, 2, 1, NULL, &a);
	/* Region A in both PDs: 2 MRs. */
	cr_assert_eq(get_pd(m.cache, m.pd[0], buf, 16 * KiB, RW, &r), 0);
	mrmgr_put(r);
	cr_assert_eq(get_pd(m.cache, m.pd[1], buf, 16 * KiB, RW, &r), 0);
	mrmgr_put(r);
	/* B: the third MR fits. */
	cr_assert_eq(mrmgr_get(m.cache, buf + 16 * KiB, 16 * KiB, RW, &r), 0);
	mrmgr_put(r);
	cr_assert_eq(cstats(m.cache).regions, 3);
	cr_assert_eq(cstats(m.cache).evictions, 0);
	/* Both used since the hand passed (CLOCK): the older, A, goes first. */
	cr_assert_eq(mrmgr_get(m.cache, buf + 16 * KiB, 16 * KiB, RW, &r), 0);
	mrmgr_put(r);
	/* C: over the limit; A is the oldest and goes with both MRs. */
	cr_assert_eq(mrmgr_get(m.cache, buf + 32 * KiB, 16 * KiB, RW, &r), 0);
	mrmgr_put(r);
	struct mrmgr_stats s = cstats(m.cache);
	cr_assert_eq(s.evictions, 1);
	cr_assert_eq(s.regions, 2);
	cr_assert_eq(s.share_pd_mrs, 0);
	cr_assert_eq(s.pinned_bytes, 2 * 16 * KiB);
	cr_assert_eq(sstats(m.ctx[0]).live_mrs, 2);
	/* B's MR in the second PD fits beside B and C: 3 MRs. */
	cr_assert_eq(get_pd(m.cache, m.pd[1], buf + 16 * KiB, 16 * KiB, RW, &r), 0);
	cr_assert_eq(cstats(m.cache).regions, 3);
	cr_assert_not_null(mrmgr_region_mr_pd(r, m.pd[1]));
	mrmgr_put(r);
	mfx_close(&m);
	munmap(buf, 3 * 16 * KiB);
}

Test(multipd, the_byte_limit_counts_each_registration)
{
	struct mfx m;
	struct mrmgr_cache_attr a = {
		.comp_mask = MRMGR_CACHE_ATTR_MAX_BYTES | MRMGR_CACHE_ATTR_FLAGS,
		.max_bytes = 64 * KiB, .flags = MRMGR_CACHE_NO_MERGE,
	};
	mrmgr_region_t *r;
	char *buf = map_rw(96 * KiB, 0);

	mfx_open(&m, 2, 1, NULL, &a);
	cr_assert_eq(get_pd(m.cache, m.pd[0], buf, 32 * KiB, RW, &r), 0);
	mrmgr_put(r);
	cr_assert_eq(get_pd(m.cache, m.pd[1], buf, 32 * KiB, RW, &r), 0);
	mrmgr_put(r);
	cr_assert_eq(cstats(m.cache).pinned_bytes, 64 * KiB);
	/* 32 KiB more do not fit beside 2 x 32 KiB: the region goes. */
	cr_assert_eq(mrmgr_get(m.cache, buf + 64 * KiB, 32 * KiB, RW, &r), 0);
	mrmgr_put(r);
	cr_assert_eq(cstats(m.cache).pinned_bytes, 32 * KiB);
	cr_assert_eq(cstats(m.cache).evictions, 1);
	mfx_close(&m);
	munmap(buf, 96 * KiB);
}

Test(multipd, pds_of_two_devices)
{
	struct mfx m;
	mrmgr_region_t *r;
	char *buf = map_rw(16 * KiB, 0);

	mfx_open(&m, 2, 2, NULL, &big);
	cr_assert_eq(get_pd(m.cache, m.pd[0], buf, 16 * KiB, RW, &r), 0);
	mrmgr_put(r);
	cr_assert_eq(get_pd(m.cache, m.pd[1], buf, 16 * KiB, RW, &r), 0);
	cr_assert_eq(mrmgr_region_mr_pd(r, m.pd[1])->context, m.ctx[1]);
	cr_assert_eq(sstats(m.ctx[0]).live_mrs, 1);
	cr_assert_eq(sstats(m.ctx[1]).live_mrs, 1);
	cr_assert_eq(write_via(m.pd[1], mrmgr_region_rkey_pd(r, m.pd[1]), buf, 16 * KiB, 'd'), 0);
	cr_assert(all_bytes(buf, 16 * KiB, 'd'));
	cr_assert_eq(write_via(m.pd[0], mrmgr_region_rkey_pd(r, m.pd[0]), buf, 16 * KiB, 'e'), 0);
	cr_assert(all_bytes(buf, 16 * KiB, 'e'));
	mrmgr_put(r);
	cr_assert_eq(mrmgr_invalidate(m.cache, buf, 16 * KiB), 0);
	cr_assert_eq(sstats(m.ctx[0]).live_mrs + sstats(m.ctx[1]).live_mrs, 0,
		     "one invalidation, both devices");
	mfx_close(&m);
	munmap(buf, 16 * KiB);
}

Test(multipd, bad_input)
{
	struct mfx m;
	struct ibv_context *other;
	struct ibv_pd *foreign;
	mrmgr_cache_t *c = NULL;
	mrmgr_region_t *r = NULL;
	char *buf = map_rw(4 * KiB, 0);

	capture_start();
	mfx_open(&m, 2, 1, NULL, &big);
	cr_assert_eq(mrmgr_sim_open(NULL, &other), 0);
	cr_assert_eq(mrmgr_sim_alloc_pd(other, &foreign), 0);
	struct ibv_pd *dup[2] = { m.pd[0], m.pd[0] };
	cr_assert_eq(create_multi(dup, 2, NULL, &c), EINVAL);
	cr_assert_eq(create_multi(NULL, 2, NULL, &c), EINVAL);
	cr_assert_eq(create_multi(m.pd, 0, NULL, &c), EINVAL);
	cr_assert_eq(create_multi(m.pd, 65, NULL, &c), EINVAL);
	/* The pd argument, when given, is the first of the PDs. */
	struct mrmgr_cache_attr pa = { .comp_mask = MRMGR_CACHE_ATTR_PDS,
				       .pds = m.pd, .npds = 2 };
	cr_assert_eq(mrmgr_cache_create(m.pd[1], &pa, &c), EINVAL);
	cr_assert_eq(mrmgr_cache_create(m.pd[0], &pa, &c), 0);
	cr_assert_eq(get_pd(c, m.pd[1], buf, 4 * KiB, RW, &r), 0);
	cr_assert_not_null(mrmgr_region_mr_pd(r, m.pd[1]));
	cr_assert_eq(mrmgr_region_mr_pd(r, m.pd[1])->pd, m.pd[1],
		     "registered in the PD asked, not the cache's first");
	cr_assert_null(mrmgr_region_mr(r), "nothing asked in the first PD");
	mrmgr_put(r);
	cr_assert_eq(mrmgr_cache_destroy(c), 0);
	/* The pds fields are not read without their comp_mask bit: a plain
	 * cache of pd, which serves no other PD. */
	pa.comp_mask = 0;
	cr_assert_eq(mrmgr_cache_create(m.pd[1], &pa, &c), 0);
	cr_assert_eq(get_pd(c, m.pd[0], buf, 4 * KiB, RW, &r), EINVAL);
	cr_assert_eq(mrmgr_cache_destroy(c), 0);
	cr_assert_eq(get_pd(m.cache, foreign, buf, 4 * KiB, RW, &r), EINVAL);
	cr_assert_eq(get_pd(m.cache, NULL, buf, 4 * KiB, RW, &r), EINVAL);
	cr_assert_eq(get_pd(m.cache, m.pd[1], NULL, 4 * KiB, RW, &r), EINVAL);
	cr_assert_eq(get_pd(m.cache, m.pd[1], buf, 4 * KiB, IBV_ACCESS_REMOTE_WRITE, &r), EINVAL);
	cr_assert_eq(mrmgr_cache_move_pd(m.cache, m.pd[1]), EINVAL);
	cr_assert_null(mrmgr_region_mr_pd(NULL, m.pd[0]));
	cr_assert_eq(mrmgr_region_lkey_pd(NULL, m.pd[0]), 0);
	cr_assert_gt(captured.lines, 8, "each refusal is logged");
	/* A single-PD cache takes a get for its own PD. */
	cr_assert_eq(mrmgr_cache_create(foreign, NULL, &c), 0);
	cr_assert_eq(get_pd(c, foreign, buf, 4 * KiB, RW, &r), 0);
	cr_assert_eq(mrmgr_region_mr_pd(r, foreign), mrmgr_region_mr(r));
	cr_assert_null(mrmgr_region_mr_pd(r, m.pd[0]));
	mrmgr_put(r);
	cr_assert_eq(get_pd(c, m.pd[0], buf, 4 * KiB, RW, &r), EINVAL);
	cr_assert_eq(mrmgr_cache_destroy(c), 0);
	capture_stop();
	cr_assert_eq(mrmgr_sim_dealloc_pd(foreign), 0);
	cr_assert_eq(mrmgr_sim_close(other), 0);
	mfx_close(&m);
	munmap(buf, 4 * KiB);
}

Test(multipd, odp_is_turned_off_and_strict_odp_refused)
{
	struct ibv_context *ctx;
	struct ibv_pd *pd[2];
	mrmgr_cache_t *c;
	struct mrmgr_odp_info oi;
	struct mrmgr_cache_attr a = {
		.comp_mask = MRMGR_CACHE_ATTR_ODP, .odp_mode = MRMGR_ODP_AUTO,
	};

	cr_assert_eq(mrmgr_sim_open(NULL, &ctx), 0);
	cr_assert_eq(mrmgr_sim_alloc_pd(ctx, &pd[0]), 0);
	cr_assert_eq(mrmgr_sim_alloc_pd(ctx, &pd[1]), 0);
	cr_assert_eq(create_multi(pd, 2, &a, &c), 0);
	cr_assert_eq(mrmgr_cache_query_odp(c, &oi, sizeof(oi)), 0);
	cr_assert_eq(oi.mode, MRMGR_ODP_OFF);
	cr_assert_eq(mrmgr_cache_destroy(c), 0);
	cr_assert_eq(sstats(ctx).live_mrs, 0, "the implicit MR is gone");
	a.odp_mode = MRMGR_ODP_EXPLICIT;
	a.odp_flags = MRMGR_ODP_STRICT;
	capture_start();
	cr_assert_eq(create_multi(pd, 2, &a, &c), EOPNOTSUPP);
	capture_stop();
	cr_assert_eq(sstats(ctx).live_mrs, 0);
	cr_assert_eq(mrmgr_sim_dealloc_pd(pd[0]), 0);
	cr_assert_eq(mrmgr_sim_dealloc_pd(pd[1]), 0);
	cr_assert_eq(mrmgr_sim_close(ctx), 0);
}

Test(multipd, cache_disabled_registers_in_the_pd_asked_and_drops_at_put)
{
	struct mfx m;
	struct mrmgr_cache_attr a = {
		.comp_mask = MRMGR_CACHE_ATTR_FLAGS, .flags = MRMGR_CACHE_DISABLE,
	};
	mrmgr_region_t *r;
	char *buf = map_rw(8 * KiB, 0);

	mfx_open(&m, 2, 1, NULL, &a);
	cr_assert_eq(get_pd(m.cache, m.pd[1], buf, 8 * KiB, RW, &r), 0);
	cr_assert_not_null(mrmgr_region_mr_pd(r, m.pd[1]));
	cr_assert_eq(sstats(m.ctx[0]).live_mrs, 1);
	mrmgr_put(r);
	cr_assert_eq(sstats(m.ctx[0]).live_mrs, 0);
	mfx_close(&m);
	munmap(buf, 8 * KiB);
}

/* ------------------------------------------------------------ threads */

struct thr {
	struct mfx *m;
	char *buf;
	size_t len;
	unsigned int seed;
	int errors;
};

#define SLOTS 16
#define SLOT (16 * KiB)

static void *worker(void *arg)
{
	struct thr *t = arg;

	for (int i = 0; i < 3000; i++) {
		unsigned int x = rand_r(&t->seed);
		size_t pdi = x % t->m->npd, slot = (x >> 4) % SLOTS;
		mrmgr_region_t *r;
		char *p = t->buf + slot * SLOT;

		if ((x >> 12) % 16 == 0) {
			if (mrmgr_invalidate(t->m->cache, p, SLOT))
				t->errors++;
			continue;
		}
		if (get_pd(t->m->cache, t->m->pd[pdi], p, SLOT, RW, &r)) {
			t->errors++;
			continue;
		}
		struct ibv_mr *mr = mrmgr_region_mr_pd(r, t->m->pd[pdi]);
		/* Held: its MR in our PD must stay valid and cover the slot. */
		if (!mr || mr->pd != t->m->pd[pdi] ||
		    write_via(t->m->pd[pdi], mr->rkey, p, 64, 'z'))
			t->errors++;
		mrmgr_put(r);
	}
	return NULL;
}

Test(multipd, threads_get_in_several_pds_while_others_invalidate, .timeout = 60)
{
	struct mfx m;
	struct mrmgr_cache_attr a = {
		.comp_mask = MRMGR_CACHE_ATTR_MAX_REGIONS, .max_regions = 24,
	};
	pthread_t th[4];
	struct thr t[4];
	char *buf = map_rw(SLOTS * SLOT, 0);

	mfx_open(&m, 3, 1, NULL, &a);
	for (int i = 0; i < 4; i++) {
		t[i] = (struct thr){ &m, buf, SLOTS * SLOT, (unsigned int)i + 1, 0 };
		cr_assert_eq(pthread_create(&th[i], NULL, worker, &t[i]), 0);
	}
	for (int i = 0; i < 4; i++) {
		pthread_join(th[i], NULL);
		cr_assert_eq(t[i].errors, 0, "thread %d saw %d errors", i, t[i].errors);
	}
	struct mrmgr_stats s = cstats(m.cache);
	cr_assert_eq(s.regions_in_use, 0);
	cr_assert_leq(s.regions, 24);
	cr_assert_eq(sstats(m.ctx[0]).live_mrs, s.regions, "the cache counts every MR");
	cr_assert_eq(sstats(m.ctx[0]).stale_accesses, 0);
	mfx_close(&m);
	munmap(buf, SLOTS * SLOT);
}
