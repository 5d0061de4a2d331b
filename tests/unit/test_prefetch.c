/*
 * Prefetch hints: SGE lists built from cached ODP regions, batching at the
 * device's SGE limit, the advice chosen from flags or access, every errno
 * of the ibv_advise_mr(3) man page on the simulated HCA, how the cache
 * treats each (no-op learnt once, EAGAIN retried, real errors returned
 * with a log line), fallbacks on a device without ODP, and prefetching
 * while another thread invalidates.
 *
 * SPDX-License-Identifier: MIT
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "helpers.h"
#include "odp.h"
#include "prefetch.h"
#include "vma.h"

#define PG ((size_t)4096)

static struct {
	int errors;
	char last_error[512];
} logged;

static void capture(enum mrmgr_log_level level, const char *msg, void *arg)
{
	(void)arg;
	if (level == MRMGR_LOG_ERROR) {
		logged.errors++;
		snprintf(logged.last_error, sizeof(logged.last_error), "%s", msg);
	}
}

static void setup(void)
{
	unsetenv("MRMGR_ODP");
	unsetenv("MRMGR_ODP_STRICT");
	unsetenv("MRMGR_ODP_PREFETCH");
	memset(&logged, 0, sizeof(logged));
	mrmgr_set_log_handler(capture, NULL, MRMGR_LOG_DEBUG);
}

static void teardown(void)
{
	mrmgr_set_log_handler(NULL, NULL, MRMGR_LOG_WARN);
}

TestSuite(prefetch, .init = setup, .fini = teardown);

static struct mrmgr_cache_attr odp_attr(uint32_t mode, uint64_t flags)
{
	struct mrmgr_cache_attr a = {
		.comp_mask = MRMGR_CACHE_ATTR_ODP | MRMGR_CACHE_ATTR_MAX_BYTES |
			     MRMGR_CACHE_ATTR_FLAGS,
		.max_bytes = 1ull << 32,
		.flags = flags,
		.odp_mode = mode,
	};
	return a;
}

static void inject(struct ibv_context *ctx, int err, uint64_t nth,
		   uint64_t count)
{
	struct mrmgr_sim_fault f = { .op = MRMGR_SIM_OP_ADVISE, .err = err,
				     .nth = nth, .count = count };

	cr_assert_eq(mrmgr_sim_inject_fault(ctx, &f), 0);
}

/* ------------------------------------------------------------ SGE lists */

Test(prefetch, long_ranges_are_split_into_sges_that_fit_32_bits)
{
	struct mrmgr__sge_list l;
	uint64_t base = 0x7f0000000000ull, len = 5 * MRMGR__SGE_MAX_LEN / 2;

	mrmgr__sge_init(&l);
	for (int i = 0; i < 20; i++) /* past the built-in room */
		cr_assert_eq(mrmgr__sge_push(&l, base + i * PG, PG, 7), 0);
	cr_assert_eq(mrmgr__sge_push(&l, base, len, 9), 0);
	cr_assert_eq(l.n, 23);
	cr_assert_eq(l.v[19].addr, base + 19 * PG, "kept across growth");
	cr_assert_eq(l.v[20].addr, base);
	cr_assert_eq(l.v[20].length, MRMGR__SGE_MAX_LEN);
	cr_assert_eq(l.v[21].addr, base + MRMGR__SGE_MAX_LEN);
	cr_assert_eq(l.v[22].length, MRMGR__SGE_MAX_LEN / 2);
	cr_assert_eq(l.v[22].lkey, 9);
	mrmgr__sge_fini(&l);
}

/* ------------------------------------------------------------ batching */

static void prefetch_n(size_t n, uint64_t want_batches)
{
	struct fixture f;
	struct mrmgr_cache_attr a = odp_attr(MRMGR_ODP_IMPLICIT, 0);
	struct mrmgr_range *rg = calloc(n, sizeof(*rg));
	char *buf = map_rw(n * 2 * PG, 0);

	for (size_t i = 0; i < n; i++) {
		rg[i].addr = buf + 2 * i * PG + 100;
		rg[i].length = 200;
	}
	fx_open(&f, NULL, &a);
	cr_assert_eq(mrmgr_prefetch(f.cache, rg, n, MRMGR_PREFETCH_SYNC), 0);
	struct mrmgr_stats s = cstats(f.cache);
	cr_assert_eq(s.prefetch_batches, want_batches, "%zu ranges", n);
	cr_assert_eq(s.prefetch_sges, n);
	cr_assert_eq(s.prefetch_calls, 1);
	cr_assert_eq(sstats(f.ctx).advise_calls, want_batches);
	cr_assert_eq(sstats(f.ctx).odp_prefetched_pages, n);
	fx_close(&f);
	munmap(buf, n * 2 * PG);
	free(rg);
}

Test(prefetch, batches_stop_at_the_device_sge_limit)
{
	/* The mlx5-like device takes 30 SGEs per call. */
	prefetch_n(1, 1);
	prefetch_n(30, 1);
	prefetch_n(31, 2);
	prefetch_n(60, 2);
	prefetch_n(70, 3);
}

Test(prefetch, explicit_sges_come_from_the_cached_odp_regions)
{
	struct fixture f;
	struct mrmgr_cache_attr a = odp_attr(MRMGR_ODP_EXPLICIT,
					     MRMGR_CACHE_NO_MERGE);
	mrmgr_region_t *r;
	char *buf = map_rw(64 * PG, 0);

	fx_open(&f, NULL, &a);
	/* 61 one-page regions, then holes, then a 4-page region. */
	for (int i = 0; i < 61; i++) {
		cr_assert_eq(mrmgr_get(f.cache, buf + i * PG, PG, RW, &r), 0);
		mrmgr_put(r);
	}
	struct mrmgr_range all = { buf, 64 * PG };
	cr_assert_eq(mrmgr_prefetch(f.cache, &all, 1, MRMGR_PREFETCH_SYNC), 0);
	struct mrmgr_stats s = cstats(f.cache);
	cr_assert_eq(s.prefetch_sges, 61, "one SGE per region, none for holes");
	cr_assert_eq(s.prefetch_batches, 3, "30 + 30 + 1");
	cr_assert_eq(s.regions_in_use, 0, "the references are dropped");
	cr_assert_eq(sstats(f.ctx).odp_prefetched_pages, 61);

	/* Overlapping regions give each byte once: A = pages 0-1 and
	 * B = pages 1-2 of another buffer; B's page 1 is not sent again. */
	char *ov = map_rw(3 * PG, 0);
	mrmgr_region_t *ra, *rb;
	cr_assert_eq(mrmgr_get(f.cache, ov, 2 * PG, RW, &ra), 0);
	cr_assert_eq(mrmgr_get(f.cache, ov + PG, 2 * PG, RW, &rb), 0);
	cr_assert_neq(ra, rb);
	uint64_t pages = sstats(f.ctx).odp_prefetched_pages;
	struct mrmgr_range three = { ov, 3 * PG };
	cr_assert_eq(mrmgr_prefetch(f.cache, &three, 1, MRMGR_PREFETCH_SYNC), 0);
	cr_assert_eq(cstats(f.cache).prefetch_sges, 61 + 2);
	cr_assert_eq(sstats(f.ctx).odp_prefetched_pages, pages + 3);
	mrmgr_put(ra);
	mrmgr_put(rb);
	cr_assert_eq(mrmgr_invalidate(f.cache, ov, 3 * PG), 0);
	munmap(ov, 3 * PG);

	/* Nothing cached there: a counted no-op, no device call. */
	struct mrmgr_range none = { buf + 62 * PG, PG };
	uint64_t calls = sstats(f.ctx).advise_calls;
	cr_assert_eq(mrmgr_prefetch(f.cache, &none, 1, 0), 0);
	cr_assert_eq(sstats(f.ctx).advise_calls, calls);
	cr_assert_eq(cstats(f.cache).prefetch_noops, 1);
	fx_close(&f);
	munmap(buf, 64 * PG);
}

/* ------------------------------------------------------------ advice */

Test(prefetch, the_advice_follows_flags_or_region_access)
{
	struct fixture f;
	struct mrmgr_cache_attr a = odp_attr(MRMGR_ODP_EXPLICIT,
					     MRMGR_CACHE_NO_MERGE);
	mrmgr_region_t *ro, *rw;
	char *buf = map_rw(16 * PG, 0), w[4 * 4096];

	fx_open(&f, NULL, &a);
	cr_assert_eq(mrmgr_get(f.cache, buf, 4 * PG, IBV_ACCESS_REMOTE_READ, &ro), 0);
	cr_assert_eq(mrmgr_get(f.cache, buf + 8 * PG, 4 * PG, RW, &rw), 0);

	/* A read-only region: PREFETCH by default, EPERM when forced WRITE. */
	cr_assert_eq(mrmgr_region_prefetch(ro, NULL, 0, MRMGR_PREFETCH_SYNC), 0);
	logged.errors = 0;
	cr_assert_eq(mrmgr_region_prefetch(ro, NULL, 0, MRMGR_PREFETCH_WRITE),
		     EPERM);
	cr_assert_eq(logged.errors, 1);
	cr_assert(strstr(logged.last_error, "PREFETCH_WRITE"), "%s",
		  logged.last_error);
	cr_assert_eq(cstats(f.cache).prefetch_failures, 1);

	/* A writable region: PREFETCH_WRITE, so a write does not fault. */
	cr_assert_eq(mrmgr_region_prefetch(rw, NULL, 0, MRMGR_PREFETCH_SYNC), 0);
	memset(w, 1, sizeof(w));
	cr_assert_eq(mrmgr_sim_write(f.pd, mrmgr_region_rkey(rw),
				     (uintptr_t)(buf + 8 * PG), w, sizeof(w)), 0);
	cr_assert_eq(sstats(f.ctx).odp_faults, 0);
	mrmgr_put(rw);

	/* Forced READ on writable memory: present read-only, writes fault. */
	cr_assert_eq(mrmgr_get(f.cache, buf + 12 * PG, 4 * PG, RW, &rw), 0);
	struct mrmgr_range rg = { buf + 12 * PG, 4 * PG };
	cr_assert_eq(mrmgr_prefetch(f.cache, &rg, 1,
				    MRMGR_PREFETCH_READ | MRMGR_PREFETCH_SYNC), 0);
	cr_assert_eq(mrmgr_sim_read(f.pd, mrmgr_region_rkey(rw),
				    (uintptr_t)(buf + 12 * PG), w, sizeof(w)), 0);
	cr_assert_eq(sstats(f.ctx).odp_faults, 0);
	cr_assert_eq(mrmgr_sim_write(f.pd, mrmgr_region_rkey(rw),
				     (uintptr_t)(buf + 12 * PG), w, sizeof(w)), 0);
	cr_assert_eq(sstats(f.ctx).odp_faults, 4, "write permission faults in");
	mrmgr_put(rw);
	mrmgr_put(ro);
	fx_close(&f);
	munmap(buf, 16 * PG);
}

Test(prefetch, prefetch_removes_first_touch_faults)
{
	struct fixture f;
	struct mrmgr_cache_attr a = odp_attr(MRMGR_ODP_IMPLICIT, 0);
	mrmgr_region_t *r;
	const size_t len = 64 * PG;
	char *buf = map_rw(3 * len, 1), *w = malloc(len);

	memset(w, 2, len);
	fx_open(&f, NULL, &a);
	cr_assert_eq(mrmgr_get(f.cache, buf, 3 * len, RW, &r), 0);
	uint32_t rkey = mrmgr_region_rkey(r);
	/* No hint: every page faults on first touch. */
	cr_assert_eq(mrmgr_sim_write(f.pd, rkey, (uintptr_t)buf, w, len), 0);
	cr_assert_eq(sstats(f.ctx).odp_faults, 64);
	/* A synchronous hint: none does. */
	struct mrmgr_range rg = { buf + len, len };
	cr_assert_eq(mrmgr_prefetch(f.cache, &rg, 1, MRMGR_PREFETCH_SYNC), 0);
	cr_assert_eq(mrmgr_sim_write(f.pd, rkey, (uintptr_t)(buf + len), w, len), 0);
	cr_assert_eq(sstats(f.ctx).odp_faults, 64);
	/* The per-region form, best effort: the same. */
	cr_assert_eq(mrmgr_region_prefetch(r, buf + 2 * len, len, 0), 0);
	cr_assert_eq(mrmgr_sim_write(f.pd, rkey, (uintptr_t)(buf + 2 * len), w,
				     len), 0);
	cr_assert_eq(sstats(f.ctx).odp_faults, 64);
	mrmgr_put(r);
	fx_close(&f);
	free(w);
	munmap(buf, 3 * len);
}

Test(prefetch, implicit_mode_prefetches_ranges_no_view_covers)
{
	struct fixture f;
	struct mrmgr_cache_attr a = odp_attr(MRMGR_ODP_IMPLICIT, 0);
	char *buf = map_rw(8 * PG, 0);
	struct mrmgr_range rg = { buf, 8 * PG };

	fx_open(&f, NULL, &a);
	cr_assert_eq(mrmgr_prefetch(f.cache, &rg, 1, MRMGR_PREFETCH_SYNC), 0);
	cr_assert_eq(cstats(f.cache).prefetch_sges, 1);
	cr_assert_eq(cstats(f.cache).regions, 0);
	cr_assert_eq(sstats(f.ctx).odp_prefetched_pages, 8);
	fx_close(&f);
	munmap(buf, 8 * PG);
}

/* ------------------------------------------------------------ arguments */

Test(prefetch, bad_arguments_are_einval_and_send_nothing)
{
	struct fixture f;
	struct mrmgr_cache_attr a = odp_attr(MRMGR_ODP_IMPLICIT, 0);
	mrmgr_region_t *r;
	char *buf = map_rw(4 * PG, 0);
	struct mrmgr_range ok = { buf, PG }, zero = { buf, 0 },
			   null = { NULL, PG },
			   wrap = { (void *)(UINTPTR_MAX - 10), 100 };

	fx_open(&f, NULL, &a);
	cr_assert_eq(mrmgr_prefetch(NULL, &ok, 1, 0), EINVAL);
	cr_assert_eq(mrmgr_prefetch(f.cache, NULL, 1, 0), EINVAL);
	cr_assert_eq(mrmgr_prefetch(f.cache, &zero, 1, 0), EINVAL);
	cr_assert_eq(mrmgr_prefetch(f.cache, &null, 1, 0), EINVAL);
	cr_assert_eq(mrmgr_prefetch(f.cache, &wrap, 1, 0), EINVAL);
	cr_assert_eq(mrmgr_prefetch(f.cache, &ok, 1, 1u << 8), EINVAL);
	cr_assert_eq(mrmgr_prefetch(f.cache, &ok, 1,
				    MRMGR_PREFETCH_READ | MRMGR_PREFETCH_WRITE),
		     EINVAL);
	cr_assert_eq(mrmgr_get(f.cache, buf, PG, RW, &r), 0);
	cr_assert_eq(mrmgr_region_prefetch(NULL, NULL, 0, 0), EINVAL);
	cr_assert_eq(mrmgr_region_prefetch(r, buf + PG, 10, 0), EINVAL,
		     "outside the region");
	cr_assert_eq(mrmgr_region_prefetch(r, buf, 0, 0), EINVAL);
	cr_assert_eq(mrmgr_region_prefetch(r, NULL, 0, 1u << 8), EINVAL);
	cr_assert_eq(cstats(f.cache).prefetch_calls, 0, "none got that far");
	cr_assert_eq(sstats(f.ctx).advise_calls, 0);
	/* No ranges at all is fine. */
	cr_assert_eq(mrmgr_prefetch(f.cache, NULL, 0, 0), 0);
	cr_assert_eq(cstats(f.cache).prefetch_noops, 1);
	mrmgr_put(r);
	fx_close(&f);
	munmap(buf, 4 * PG);
}

/* ------------------------------------------------------------ man page */

/*
 * Every errno ibv_advise_mr(3) lists, from the simulated device itself.
 */
Test(prefetch, the_sim_returns_every_errno_of_the_man_page)
{
	struct fixture f, rxe;
	struct mrmgr_sim_attr rxe_attr = {
		.comp_mask = MRMGR_SIM_ATTR_PERSONALITY,
		.personality = MRMGR_SIM_RXE,
	};
	struct ibv_pd *pd2;
	struct ibv_mr *odp, *ro_odp, *pinned, *other;
	char *buf = map_rw(16 * PG, 0);
	char *ro = mmap(NULL, 4 * PG, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	char *gone = map_rw(4 * PG, 0);
	struct ibv_mr *gone_mr;
	struct ibv_sge sge, many[31];
	const enum ibv_advise_mr_advice PF = IBV_ADVISE_MR_ADVICE_PREFETCH;
	const enum ibv_advise_mr_advice PFW = IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE;
	const uint32_t FL = IBV_ADVISE_MR_FLAG_FLUSH;

	cr_assert_neq(ro, MAP_FAILED);
	memset(&f, 0, sizeof(f));
	cr_assert_eq(mrmgr_sim_open(NULL, &f.ctx), 0);
	cr_assert_eq(mrmgr_sim_alloc_pd(f.ctx, &f.pd), 0);
	cr_assert_eq(mrmgr_sim_alloc_pd(f.ctx, &pd2), 0);
	cr_assert_eq(mrmgr_sim_reg_mr(f.pd, buf, 8 * PG, RW | IBV_ACCESS_ON_DEMAND,
				      &odp), 0);
	cr_assert_eq(mrmgr_sim_reg_mr(f.pd, buf + 8 * PG, 4 * PG,
				      IBV_ACCESS_REMOTE_READ | IBV_ACCESS_ON_DEMAND,
				      &ro_odp), 0);
	cr_assert_eq(mrmgr_sim_reg_mr(f.pd, buf + 12 * PG, 4 * PG, RW, &pinned), 0);
	cr_assert_eq(mrmgr_sim_reg_mr(pd2, buf, 4 * PG, RW | IBV_ACCESS_ON_DEMAND,
				      &other), 0);
	cr_assert_eq(mrmgr_sim_reg_mr(f.pd, gone, 4 * PG,
				      RW | IBV_ACCESS_ON_DEMAND, &gone_mr), 0);
	cr_assert_eq(munmap(gone, 4 * PG), 0);

#define SGE(a, l, k) (sge = (struct ibv_sge){ (uintptr_t)(a), (l), (k) }, &sge)
	/* Success, to be sure the rest fail for the stated reason. */
	cr_assert_eq(mrmgr_sim_advise_mr(f.pd, PFW, FL, SGE(buf, 8 * PG, odp->lkey), 1), 0);
	cr_assert_eq(mrmgr_sim_advise_mr(f.pd, IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT,
					 0, SGE(buf, PG, odp->lkey), 1), 0);

	/* ENOTSUP: an advice the device does not know. */
	cr_assert_eq(mrmgr_sim_advise_mr(f.pd, (enum ibv_advise_mr_advice)77, 0,
					 SGE(buf, PG, odp->lkey), 1), ENOTSUP);

	/* EINVAL: bad PD, bad flags, empty or oversized SGE list. */
	cr_assert_eq(mrmgr_sim_advise_mr(NULL, PF, 0, SGE(buf, PG, odp->lkey), 1), EINVAL);
	cr_assert_eq(mrmgr_sim_advise_mr(f.pd, PF, 1u << 4, SGE(buf, PG, odp->lkey), 1),
		     EINVAL);
	cr_assert_eq(mrmgr_sim_advise_mr(f.pd, PF, 0, NULL, 1), EINVAL);
	cr_assert_eq(mrmgr_sim_advise_mr(f.pd, PF, 0, SGE(buf, PG, odp->lkey), 0), EINVAL);
	for (int i = 0; i < 31; i++)
		many[i] = (struct ibv_sge){ (uintptr_t)buf, 64, odp->lkey };
	cr_assert_eq(mrmgr_sim_advise_mr(f.pd, PF, 0, many, 30), 0);
	cr_assert_eq(mrmgr_sim_advise_mr(f.pd, PF, 0, many, 31), EINVAL);

	/* EFAULT: out of bounds, bad lkey, a non-ODP MR, memory gone. */
	cr_assert_eq(mrmgr_sim_advise_mr(f.pd, PF, 0, SGE(buf - 1, 10, odp->lkey), 1),
		     EFAULT);
	cr_assert_eq(mrmgr_sim_advise_mr(f.pd, PF, 0, SGE(buf + 8 * PG - 10, 11, odp->lkey), 1),
		     EFAULT);
	cr_assert_eq(mrmgr_sim_advise_mr(f.pd, PF, 0, SGE(buf, PG, 0x7fff0000u), 1), EFAULT);
	cr_assert_eq(mrmgr_sim_advise_mr(f.pd, PF, 0, SGE(buf + 12 * PG, PG, pinned->lkey), 1),
		     EFAULT);
	cr_assert_eq(mrmgr_sim_advise_mr(f.pd, PF, FL, SGE(gone, PG, gone_mr->lkey), 1),
		     EFAULT, "with FLUSH the page-in must succeed");
	cr_assert_eq(mrmgr_sim_advise_mr(f.pd, PF, 0, SGE(gone, PG, gone_mr->lkey), 1),
		     0, "without it the hint is best effort");

	/* EPERM: another PD's MR; PREFETCH_WRITE on a non-writable MR. */
	cr_assert_eq(mrmgr_sim_advise_mr(f.pd, PF, 0, SGE(buf, PG, other->lkey), 1), EPERM);
	cr_assert_eq(mrmgr_sim_advise_mr(f.pd, PFW, 0, SGE(buf + 8 * PG, PG, ro_odp->lkey), 1),
		     EPERM);
	cr_assert_eq(mrmgr_sim_advise_mr(f.pd, PF, 0, SGE(buf + 8 * PG, PG, ro_odp->lkey), 1),
		     0);

	/* ENOENT: the lkey's index names a live MR, its key byte does not. */
	cr_assert_eq(mrmgr_sim_advise_mr(f.pd, PF, 0, SGE(buf, PG, odp->lkey ^ 1), 1),
		     ENOENT);

	/* ENOMEM (and anything else): by fault injection. */
	inject(f.ctx, ENOMEM, 1, 1);
	cr_assert_eq(mrmgr_sim_advise_mr(f.pd, PF, 0, SGE(buf, PG, odp->lkey), 1), ENOMEM);
	cr_assert_eq(mrmgr_sim_advise_mr(f.pd, PF, 0, SGE(buf, PG, odp->lkey), 1), 0);

	struct mrmgr_sim_stats ss = sstats(f.ctx);
	cr_assert_eq(ss.advise_errors, 14);

	/* EOPNOTSUPP: a device without advise (rdma_rxe). */
	memset(&rxe, 0, sizeof(rxe));
	cr_assert_eq(mrmgr_sim_open(&rxe_attr, &rxe.ctx), 0);
	cr_assert_eq(mrmgr_sim_alloc_pd(rxe.ctx, &rxe.pd), 0);
	cr_assert_eq(mrmgr_sim_advise_mr(rxe.pd, PF, 0, SGE(buf, PG, 0x100), 1),
		     EOPNOTSUPP);
	/* ...and without ODP: EINVAL, explicit and implicit. */
	struct ibv_mr *mr;
	cr_assert_eq(mrmgr_sim_reg_mr(rxe.pd, buf, PG, RW | IBV_ACCESS_ON_DEMAND, &mr),
		     EINVAL);
	cr_assert_eq(mrmgr_sim_reg_mr(rxe.pd, NULL, SIZE_MAX,
				      RW | IBV_ACCESS_ON_DEMAND, &mr), EINVAL);
	fx_close(&rxe);
#undef SGE

	cr_assert_eq(mrmgr_sim_dereg_mr(odp), 0);
	cr_assert_eq(mrmgr_sim_dereg_mr(ro_odp), 0);
	cr_assert_eq(mrmgr_sim_dereg_mr(pinned), 0);
	cr_assert_eq(mrmgr_sim_dereg_mr(other), 0);
	cr_assert_eq(mrmgr_sim_dereg_mr(gone_mr), 0);
	cr_assert_eq(mrmgr_sim_dealloc_pd(pd2), 0);
	fx_close(&f);
	munmap(buf, 16 * PG);
	munmap(ro, 4 * PG);
}

Test(prefetch, the_sim_faults_prefetch_write_on_read_only_memory_with_flush)
{
	struct fixture f;
	struct ibv_mr *mr;
	char *ro = mmap(NULL, 4 * PG, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	struct ibv_sge sge;

	cr_assert_neq(ro, MAP_FAILED);
	memset(&f, 0, sizeof(f));
	cr_assert_eq(mrmgr_sim_open(NULL, &f.ctx), 0);
	cr_assert_eq(mrmgr_sim_alloc_pd(f.ctx, &f.pd), 0);
	cr_assert_eq(mrmgr_sim_reg_mr(f.pd, ro, 4 * PG, RW | IBV_ACCESS_ON_DEMAND,
				      &mr), 0);
	sge = (struct ibv_sge){ (uintptr_t)ro, 4 * PG, mr->lkey };
	cr_assert_eq(mrmgr_sim_advise_mr(f.pd, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE,
					 IBV_ADVISE_MR_FLAG_FLUSH, &sge, 1), EFAULT);
	cr_assert_eq(mrmgr_sim_advise_mr(f.pd, IBV_ADVISE_MR_ADVICE_PREFETCH,
					 IBV_ADVISE_MR_FLAG_FLUSH, &sge, 1), 0);
	cr_assert_eq(mrmgr_sim_dereg_mr(mr), 0);
	fx_close(&f);
	munmap(ro, 4 * PG);
}

/* ------------------------------------------------------------ device errors */

struct one {
	struct fixture f;
	char *buf;
	struct mrmgr_range rg;
};

static void one_open(struct one *o, uint32_t mode)
{
	struct mrmgr_cache_attr a = odp_attr(mode, 0);
	mrmgr_region_t *r;

	o->buf = map_rw(8 * PG, 0);
	o->rg = (struct mrmgr_range){ o->buf, 8 * PG };
	fx_open(&o->f, NULL, &a);
	cr_assert_eq(mrmgr_get(o->f.cache, o->buf, 8 * PG, RW, &r), 0);
	mrmgr_put(r);
}

static void one_close(struct one *o)
{
	fx_close(&o->f);
	munmap(o->buf, 8 * PG);
}

Test(prefetch, unsupported_advice_is_a_noop_learnt_once)
{
	struct one o;

	one_open(&o, MRMGR_ODP_EXPLICIT);
	inject(o.f.ctx, EOPNOTSUPP, 1, 1);
	cr_assert_eq(mrmgr_prefetch(o.f.cache, &o.rg, 1, MRMGR_PREFETCH_WRITE), 0);
	cr_assert_eq(sstats(o.f.ctx).advise_calls, 1);
	cr_assert_eq(mrmgr_prefetch(o.f.cache, &o.rg, 1, MRMGR_PREFETCH_WRITE), 0);
	cr_assert_eq(sstats(o.f.ctx).advise_calls, 1, "learnt: no second call");
	struct mrmgr_stats s = cstats(o.f.cache);
	cr_assert_eq(s.prefetch_noops, 2);
	cr_assert_eq(s.prefetch_failures, 0);
	cr_assert_eq(s.prefetch_sges, 0);
	/* ENOTSUP is per advice: plain PREFETCH is still tried. */
	cr_assert_eq(mrmgr_prefetch(o.f.cache, &o.rg, 1, MRMGR_PREFETCH_READ), 0);
	cr_assert_eq(sstats(o.f.ctx).advise_calls, 2);
	cr_assert_eq(cstats(o.f.cache).prefetch_sges, 1);
	one_close(&o);

	/* ENOSYS (old libibverbs): no advice at all. */
	one_open(&o, MRMGR_ODP_IMPLICIT);
	inject(o.f.ctx, ENOSYS, 1, 1);
	cr_assert_eq(mrmgr_prefetch(o.f.cache, &o.rg, 1, MRMGR_PREFETCH_WRITE), 0);
	cr_assert_eq(mrmgr_prefetch(o.f.cache, &o.rg, 1, MRMGR_PREFETCH_READ), 0);
	cr_assert_eq(sstats(o.f.ctx).advise_calls, 1);
	cr_assert_eq(cstats(o.f.cache).prefetch_noops, 2);
	one_close(&o);
}

Test(prefetch, eagain_is_retried_a_bounded_number_of_times)
{
	struct one o;

	one_open(&o, MRMGR_ODP_EXPLICIT);
	inject(o.f.ctx, EAGAIN, 1, 2);
	cr_assert_eq(mrmgr_prefetch(o.f.cache, &o.rg, 1, 0), 0);
	struct mrmgr_stats s = cstats(o.f.cache);
	cr_assert_eq(s.prefetch_retries, 2);
	cr_assert_eq(s.prefetch_batches, 1);
	cr_assert_eq(s.prefetch_sges, 1);
	cr_assert_eq(sstats(o.f.ctx).advise_calls, 3);

	inject(o.f.ctx, EAGAIN, 1, 0); /* for ever */
	logged.errors = 0;
	cr_assert_eq(mrmgr_prefetch(o.f.cache, &o.rg, 1, 0), EAGAIN);
	s = cstats(o.f.cache);
	cr_assert_eq(s.prefetch_retries, 2 + 4);
	cr_assert_eq(s.prefetch_failures, 1);
	cr_assert_eq(logged.errors, 1);
	cr_assert_eq(sstats(o.f.ctx).advise_calls, 3 + 5);
	mrmgr_sim_clear_faults(o.f.ctx);
	one_close(&o);
}

Test(prefetch, real_errors_are_returned_with_a_log_line)
{
	const int errs[] = { EFAULT, EINVAL, EPERM, ENOENT, ENOMEM };
	struct one o;

	one_open(&o, MRMGR_ODP_IMPLICIT);
	for (size_t k = 0; k < sizeof(errs) / sizeof(errs[0]); k++) {
		inject(o.f.ctx, errs[k], 1, 1);
		logged.errors = 0;
		cr_assert_eq(mrmgr_prefetch(o.f.cache, &o.rg, 1, 0), errs[k]);
		cr_assert_eq(logged.errors, 1);
		cr_assert(strstr(logged.last_error, strerror(errs[k])), "%s",
			  logged.last_error);
	}
	struct mrmgr_stats s = cstats(o.f.cache);
	cr_assert_eq(s.prefetch_failures, 5);
	cr_assert_eq(s.prefetch_noops, 0);
	/* Not learnt as unsupported: the next call goes through. */
	cr_assert_eq(mrmgr_prefetch(o.f.cache, &o.rg, 1, 0), 0);
	cr_assert_eq(cstats(o.f.cache).prefetch_sges, 1);
	one_close(&o);
}

Test(prefetch, an_error_in_a_later_batch_keeps_the_earlier_ones)
{
	struct fixture f;
	struct mrmgr_cache_attr a = odp_attr(MRMGR_ODP_IMPLICIT, 0);
	struct mrmgr_range rg[45];
	char *buf = map_rw(90 * PG, 0);

	for (int i = 0; i < 45; i++)
		rg[i] = (struct mrmgr_range){ buf + 2 * i * PG, PG };
	fx_open(&f, NULL, &a);
	inject(f.ctx, EFAULT, 2, 1);
	cr_assert_eq(mrmgr_prefetch(f.cache, rg, 45, 0), EFAULT);
	struct mrmgr_stats s = cstats(f.cache);
	cr_assert_eq(s.prefetch_batches, 2);
	cr_assert_eq(s.prefetch_sges, 30);
	fx_close(&f);
	munmap(buf, 90 * PG);
}

/* ------------------------------------------------------------ no ODP */

Test(prefetch, without_odp_prefetch_is_a_counted_noop_and_writes_still_land)
{
	struct fixture f;
	struct mrmgr_sim_attr rxe = {
		.comp_mask = MRMGR_SIM_ATTR_PERSONALITY,
		.personality = MRMGR_SIM_RXE,
	};
	struct mrmgr_cache_attr a = odp_attr(MRMGR_ODP_AUTO, 0);
	mrmgr_region_t *r;
	char *buf = map_rw(16 * PG, 0), w[16 * 4096];
	struct mrmgr_range rg = { buf, sizeof(w) };
	struct mrmgr_odp_info i;

	fx_open(&f, &rxe, &a);
	cr_assert_eq(mrmgr_cache_query_odp(f.cache, &i, sizeof(i)), 0);
	cr_assert_eq(i.mode, MRMGR_ODP_OFF);
	cr_assert_eq(mrmgr_get(f.cache, buf, sizeof(w), RW, &r), 0);
	cr_assert_eq(sstats(f.ctx).pinned_bytes, sizeof(w), "pinned fallback");
	cr_assert_eq(mrmgr_prefetch(f.cache, &rg, 1, MRMGR_PREFETCH_SYNC), 0);
	cr_assert_eq(mrmgr_region_prefetch(r, NULL, 0, 0), 0);
	struct mrmgr_stats s = cstats(f.cache);
	cr_assert_eq(s.prefetch_calls, 2);
	cr_assert_eq(s.prefetch_noops, 2);
	cr_assert_eq(s.prefetch_batches, 0);
	cr_assert_eq(sstats(f.ctx).advise_calls, 0);
	/* The RDMA WRITE byte check still passes. */
	for (size_t k = 0; k < sizeof(w); k++)
		w[k] = (char)(k * 7);
	cr_assert_eq(mrmgr_sim_write(f.pd, mrmgr_region_rkey(r), (uintptr_t)buf,
				     w, sizeof(w)), 0);
	cr_assert_eq(memcmp(buf, w, sizeof(w)), 0);
	mrmgr_put(r);
	fx_close(&f);
	munmap(buf, 16 * PG);
}

/* ------------------------------------------------------------ threads */

struct race {
	mrmgr_cache_t *cache;
	char *buf;
	int errors, stop;
};

static void *prefetcher(void *arg)
{
	struct race *x = arg;
	struct mrmgr_range rg = { x->buf, 64 * PG };

	for (int k = 0; k < 3000; k++)
		if (mrmgr_prefetch(x->cache, &rg, 1, MRMGR_PREFETCH_SYNC))
			__atomic_fetch_add(&x->errors, 1, __ATOMIC_RELAXED);
	__atomic_store_n(&x->stop, 1, __ATOMIC_RELAXED);
	return NULL;
}

Test(prefetch, regions_are_held_while_a_prefetch_runs)
{
	struct fixture f;
	struct mrmgr_cache_attr a = odp_attr(MRMGR_ODP_EXPLICIT,
					     MRMGR_CACHE_NO_MERGE);
	struct race x = { 0 };
	pthread_t t;
	unsigned int seed = 3;

	x.buf = map_rw(64 * PG, 0);
	fx_open(&f, NULL, &a);
	x.cache = f.cache;
	cr_assert_eq(pthread_create(&t, NULL, prefetcher, &x), 0);
	/* Register and invalidate under it: a stale lkey would be EFAULT. */
	while (!__atomic_load_n(&x.stop, __ATOMIC_RELAXED)) {
		mrmgr_region_t *r;
		size_t p = (size_t)rand_r(&seed) % 60;

		cr_assert_eq(mrmgr_get(f.cache, x.buf + p * PG, 4 * PG, RW, &r), 0);
		mrmgr_put(r);
		cr_assert_eq(mrmgr_invalidate(f.cache, x.buf + p * PG, 4 * PG), 0);
	}
	pthread_join(t, NULL);
	cr_assert_eq(x.errors, 0);
	cr_assert_eq(sstats(f.ctx).advise_errors, 0);
	cr_assert_eq(cstats(f.cache).regions_in_use, 0);
	fx_close(&f);
	munmap(x.buf, 64 * PG);
}

/* ------------------------------------------------------------ bounds */

/*
 * The implicit MR covers the whole address space: an implicit-mode
 * request is clipped to the readable mappings in it and to the device's
 * limits, and a range past any address space is refused.
 */
Test(prefetch, implicit_ranges_are_clipped_to_readable_mappings)
{
	struct fixture f;
	struct mrmgr_cache_attr a = odp_attr(MRMGR_ODP_IMPLICIT, 0);
	const size_t span = 64 * MiB;
	char *res = mmap(NULL, span, PROT_NONE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);

	cr_assert_neq(res, MAP_FAILED);
	cr_assert_eq(mprotect(res + 16 * MiB, MiB, PROT_READ | PROT_WRITE), 0);
	cr_assert_eq(mprotect(res + 40 * MiB, 2 * PG, PROT_READ), 0);
	fx_open(&f, NULL, &a);
	struct mrmgr_range rg = { res, span };
	/* PREFETCH_WRITE: the writable piece only. */
	cr_assert_eq(mrmgr_prefetch(f.cache, &rg, 1, MRMGR_PREFETCH_SYNC), 0);
	struct mrmgr_stats s = cstats(f.cache);
	cr_assert_eq(s.prefetch_sges, 1);
	cr_assert_eq(sstats(f.ctx).odp_prefetched_pages, MiB / PG,
		     "only mapped pages (%llu)",
		     (unsigned long long)sstats(f.ctx).odp_prefetched_pages);
	/* PREFETCH: one SGE per readable piece. */
	cr_assert_eq(mrmgr_prefetch(f.cache, &rg, 1,
				    MRMGR_PREFETCH_SYNC | MRMGR_PREFETCH_READ), 0);
	s = cstats(f.cache);
	cr_assert_eq(s.prefetch_sges, 3);
	cr_assert_eq(sstats(f.ctx).odp_prefetched_pages, MiB / PG + 2);
	/* Nothing readable in the range: a counted no-op. */
	struct mrmgr_range none = { res, MiB };
	cr_assert_eq(mrmgr_prefetch(f.cache, &none, 1, 0), 0);
	cr_assert_eq(cstats(f.cache).prefetch_noops, 1);
	cr_assert_eq(cstats(f.cache).prefetch_sges, 3);
	fx_close(&f);
	munmap(res, span);
}

Test(prefetch, a_huge_implicit_range_costs_a_bounded_list)
{
	struct fixture f;
	struct mrmgr_cache_attr a = odp_attr(MRMGR_ODP_IMPLICIT, 0);
	char *buf = map_rw(MiB, 0);
	/* 2^44 bytes from a small mapping: used to be 16,384 SGEs of a GiB
	 * each, most of them over nothing, and 24 s on this device. */
	struct mrmgr_range rg = { buf, (size_t)1 << 44 };

	if ((uintptr_t)buf + ((size_t)1 << 44) - 1 > (UINT64_C(1) << 56) - 1)
		cr_skip_test("address too high for a 2^44 range");
	fx_open(&f, NULL, &a);
	cr_assert_eq(mrmgr_prefetch(f.cache, &rg, 1, 0), 0);
	struct mrmgr_stats s = cstats(f.cache);
	cr_assert_leq(s.prefetch_sges, MRMGR__PREFETCH_MAX_SGES);
	cr_assert_geq(s.prefetch_sges, 1);
	/* The process has far fewer mappings than that: every SGE is one
	 * readable piece (at most a GiB), none over a hole. */
	cr_assert_leq(s.prefetch_sges, 4000);
	cr_assert_leq(s.prefetch_batches, (s.prefetch_sges + 29) / 30);
	fx_close(&f);
	munmap(buf, MiB);
}

Test(prefetch, ranges_past_any_address_space_are_einval)
{
	struct fixture f;
	struct mrmgr_cache_attr a = odp_attr(MRMGR_ODP_IMPLICIT, 0);
	char *buf = map_rw(MiB, 0);
	struct mrmgr_range huge = { buf, (size_t)1 << 56 },
			   top = { (void *)(uintptr_t)(UINT64_C(1) << 56), PG };

	fx_open(&f, NULL, &a);
	logged.errors = 0;
	cr_assert_eq(mrmgr_prefetch(f.cache, &huge, 1, 0), EINVAL);
	cr_assert_eq(mrmgr_prefetch(f.cache, &top, 1, 0), EINVAL);
	cr_assert_eq(logged.errors, 2);
	cr_assert(strstr(logged.last_error, "address space"), "%s",
		  logged.last_error);
	cr_assert_eq(sstats(f.ctx).advise_calls, 0);
	cr_assert_eq(cstats(f.cache).prefetch_sges, 0);
	fx_close(&f);
	munmap(buf, MiB);
}

Test(prefetch, an_implicit_request_stops_at_the_device_max_mr_size)
{
	struct fixture f;
	struct mrmgr_sim_attr sa = {
		.comp_mask = MRMGR_SIM_ATTR_LIMITS,
		.max_mr = 1 << 20,
		.max_mr_size = 2 * MiB,
	};
	struct mrmgr_cache_attr a = odp_attr(MRMGR_ODP_IMPLICIT, 0);
	struct mrmgr_odp_info i;
	char *buf = map_rw(8 * MiB, 0);
	struct mrmgr_range rg[2] = { { buf, 3 * MiB }, { buf + 4 * MiB, MiB } };

	fx_open(&f, &sa, &a);
	cr_assert_eq(mrmgr_cache_query_odp(f.cache, &i, sizeof(i)), 0);
	if (i.mode != MRMGR_ODP_IMPLICIT)
		cr_skip_test("no implicit ODP with a small max_mr_size");
	cr_assert_eq(mrmgr_prefetch(f.cache, rg, 2, MRMGR_PREFETCH_SYNC), 0);
	cr_assert_eq(cstats(f.cache).prefetch_sges, 1);
	cr_assert_eq(sstats(f.ctx).odp_prefetched_pages, 2 * MiB / PG);
	fx_close(&f);
	munmap(buf, 8 * MiB);
}

Test(prefetch, readable_pieces_by_query_and_by_text_agree)
{
	const size_t span = 16 * MiB;
	char *res = mmap(NULL, span, PROT_NONE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	uint64_t s1, e1, s2, e2, base = (uintptr_t)res;

	cr_assert_neq(res, MAP_FAILED);
	cr_assert_eq(mprotect(res + 4 * MiB, MiB, PROT_READ), 0);
	cr_assert_eq(mprotect(res + 8 * MiB, 3 * PG, PROT_READ | PROT_WRITE), 0);
	cr_assert_eq(mrmgr__vma_next_readable(base, base + span - 1, 0, 0, &s1, &e1), 0);
	cr_assert_eq(mrmgr__vma_next_readable(base, base + span - 1, 0, MRMGR__VMA_TEXT, &s2,
						   &e2), 0);
	cr_assert_eq(s1, base + 4 * MiB);
	cr_assert_eq(e1, base + 5 * MiB - 1);
	cr_assert_eq(s1, s2);
	cr_assert_eq(e1, e2);
	/* From inside a piece; and clipped to last. */
	cr_assert_eq(mrmgr__vma_next_readable(base + 8 * MiB + 10, base + 8 * MiB + PG, 0, 0, &s1, &e1), 0);
	cr_assert_eq(mrmgr__vma_next_readable(base + 8 * MiB + 10, base + 8 * MiB + PG, 0, MRMGR__VMA_TEXT, &s2,
						   &e2), 0);
	cr_assert_eq(s1, base + 8 * MiB + 10);
	cr_assert_eq(e1, base + 8 * MiB + PG);
	cr_assert_eq(s2, s1);
	cr_assert_eq(e2, e1);
	/* Writable only. */
	cr_assert_eq(mrmgr__vma_next_readable(base, base + span - 1, 1, 0, &s1, &e1), 0);
	cr_assert_eq(mrmgr__vma_next_readable(base, base + span - 1, 1, MRMGR__VMA_TEXT,
						   &s2, &e2), 0);
	cr_assert_eq(s1, base + 8 * MiB);
	cr_assert_eq(e1, base + 8 * MiB + 3 * PG - 1);
	cr_assert_eq(s2, s1);
	cr_assert_eq(e2, e1);
	/* Nothing readable. */
	cr_assert_eq(mrmgr__vma_next_readable(base, base + 4 * MiB - 1, 0, 0, &s1, &e1),
		     ENOENT);
	cr_assert_eq(mrmgr__vma_next_readable(base, base + 4 * MiB - 1, 0, MRMGR__VMA_TEXT,
						   &s1, &e1), ENOENT);
	munmap(res, span);
}
