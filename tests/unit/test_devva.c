/*
 * Kind three, device VAs of a memory domain (lib/kinds/devva.c,
 * lib/core/kind_devva.c) on the simulated HCA and the simulated device
 * allocator (sim/sim_gpu.c): hit, miss, eviction, the whole allocation
 * registered (multi-segment, sub-allocated offsets), invalidation on
 * free and on address reuse (a new buffer id at the same address
 * misses), deferred frees, the cache's dma-buf descriptors counted
 * around every path (failures included), the CUDA domain off here, and
 * a two-thread allocate/free/reuse torture that reads each allocation's
 * own signature through the MR it was handed (0 stale, 0 leaked).
 *
 * SPDX-License-Identifier: MIT
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "helpers.h"

#define SZ (256 * KiB)

/* The process's descriptors of the simulated allocator's memfds. */
static int count_fds(void)
{
	return count_fds_to("mrmgr-sim-gpu");
}

struct dfx {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct mrmgr_sim_gpu *gpu;
	mrmgr_domain_t *dom;
	mrmgr_cache_t *cache;
};

static void dopen(struct dfx *f, const struct mrmgr_sim_attr *sa,
		  const struct mrmgr_cache_attr *ca)
{
	memset(f, 0, sizeof(*f));
	cr_assert_eq(mrmgr_sim_open(sa, &f->ctx), 0);
	cr_assert_eq(mrmgr_sim_alloc_pd(f->ctx, &f->pd), 0);
	cr_assert_eq(mrmgr_sim_gpu_open(&f->gpu), 0);
	cr_assert_eq(mrmgr_domain_create(mrmgr_sim_gpu_ops(), f->gpu, &f->dom),
		     0);
	cr_assert_eq(mrmgr_cache_create_device(f->pd, ca, f->dom, &f->cache),
		     0);
}

static void dclose(struct dfx *f)
{
	cr_assert_eq(mrmgr_cache_destroy(f->cache), 0);
	cr_assert_eq(mrmgr_domain_destroy(f->dom), 0);
	cr_assert_eq(mrmgr_sim_gpu_close(f->gpu), 0);
	cr_assert_eq(mrmgr_sim_dealloc_pd(f->pd), 0);
	cr_assert_eq(mrmgr_sim_close(f->ctx), 0);
}

static uint64_t new_alloc(struct dfx *f, size_t size, unsigned int nseg,
			  uint64_t sig)
{
	uint64_t va;

	cr_assert_eq(mrmgr_sim_gpu_alloc(f->gpu, size, nseg, &va), 0);
	cr_assert_eq(mrmgr_sim_gpu_write(f->gpu, va, &sig, sizeof(sig)), 0);
	return va;
}

/* What the MR of r reads at device address va of the allocation at base
 * (the sim's MR address is where it mapped the dma-buf). */
static uint64_t read_at(mrmgr_region_t *r, uint64_t base, uint64_t va)
{
	return *(volatile uint64_t *)((uintptr_t)mrmgr_region_mr(r)->addr +
				      (va - base));
}

Test(devva, hit_miss_evict)
{
	struct mrmgr_cache_attr ca = {
		.comp_mask = MRMGR_CACHE_ATTR_MAX_REGIONS, .max_regions = 1 };
	int before = count_fds();
	mrmgr_region_t *r1, *r2, *r3;
	uint64_t a, b;
	struct dfx f;

	dopen(&f, NULL, &ca);
	a = new_alloc(&f, SZ, 1, 0xa);
	b = new_alloc(&f, SZ, 1, 0xb);
	cr_assert_eq(mrmgr_get_device(f.cache, a, 64, 0, &r1), 0);
	cr_assert_eq(read_at(r1, a, a), 0xa);
	/* The whole allocation: a get of its last bytes hits. */
	cr_assert_eq(mrmgr_get_device(f.cache, a + SZ - 8, 8, 0, &r2), 0);
	cr_assert_eq(r2, r1);
	cr_assert_eq(cstats(f.cache).hits, 1);
	cr_assert_eq(cstats(f.cache).misses, 1);
	mrmgr_put(r2);
	mrmgr_put(r1);
	cr_assert_eq(count_fds(), before + 3); /* 2 allocations, 1 export */
	/* max_regions 1: b evicts a, whose export is closed. */
	cr_assert_eq(mrmgr_get_device(f.cache, b, 64, 0, &r3), 0);
	cr_assert_eq(read_at(r3, b, b), 0xb);
	mrmgr_put(r3);
	cr_assert_eq(count_fds(), before + 3);
	dclose(&f);
	cr_assert_eq(count_fds(), before);
}

Test(devva, free_and_reuse_miss)
{
	int before = count_fds();
	mrmgr_region_t *r1, *r2;
	uint64_t a, a2;
	struct dfx f;

	dopen(&f, NULL, NULL);
	a = new_alloc(&f, SZ, 1, 0x1111);
	cr_assert_eq(mrmgr_get_device(f.cache, a, SZ, 0, &r1), 0);
	mrmgr_put(r1); /* stays cached */
	cr_assert_eq(mrmgr_sim_gpu_free(f.gpu, a), 0);
	/* The same address, a new buffer id: it must miss. */
	a2 = new_alloc(&f, SZ, 1, 0x2222);
	cr_assert_eq(a2, a);
	cr_assert_eq(mrmgr_get_device(f.cache, a2, SZ, 0, &r2), 0);
	cr_assert_eq(read_at(r2, a2, a2), 0x2222, "a stale hit");
	cr_assert_eq(cstats(f.cache).misses, 2);
	cr_assert_eq(cstats(f.cache).hits, 0);
	mrmgr_put(r2);
	/* The first export was closed with its MR. */
	cr_assert_eq(count_fds(), before + 2);
	dclose(&f);
	cr_assert_eq(count_fds(), before);
}

Test(devva, free_invalidates_and_unknown_address_fails)
{
	int before = count_fds();
	mrmgr_region_t *r;
	uint64_t a;
	struct dfx f;

	dopen(&f, NULL, NULL);
	a = new_alloc(&f, SZ, 1, 1);
	cr_assert_eq(mrmgr_get_device(f.cache, a, SZ, 0, &r), 0);
	mrmgr_put(r);
	cr_assert_eq(count_fds(), before + 2);
	cr_assert_eq(mrmgr_sim_gpu_free(f.gpu, a), 0);
	/* The next get validates: the freed allocation's export closes. */
	cr_assert_eq(mrmgr_get_device(f.cache, a, 8, 0, &r), ENOENT);
	cr_assert_eq(count_fds(), before);
	/* Past the allocation's end. */
	a = new_alloc(&f, SZ, 1, 1);
	cr_assert_eq(mrmgr_get_device(f.cache, a + SZ - 8, 16, 0, &r), EINVAL);
	cr_assert_eq(mrmgr_get_device(f.cache, a, 0, 0, &r), EINVAL);
	cr_assert_eq(mrmgr_get(f.cache, (void *)(uintptr_t)a, 8, 0, &r),
		     EINVAL, "a host get on a device cache");
	cr_assert_eq(count_fds(), before + 1);
	dclose(&f);
	cr_assert_eq(count_fds(), before);
}

Test(devva, deferred_free)
{
	mrmgr_region_t *r;
	uint64_t a, b, c;
	struct dfx f;

	dopen(&f, NULL, NULL);
	a = new_alloc(&f, SZ, 1, 1);
	cr_assert_eq(mrmgr_get_device(f.cache, a, SZ, 0, &r), 0);
	mrmgr_put(r);
	cr_assert_eq(mrmgr_sim_gpu_free_deferred(f.gpu, a), 0);
	b = new_alloc(&f, SZ, 1, 2);
	cr_assert_neq(b, a, "a deferred free's address given before sync");
	cr_assert_eq(mrmgr_sim_gpu_sync(f.gpu), 0);
	c = new_alloc(&f, SZ, 1, 3);
	cr_assert_eq(c, a);
	cr_assert_eq(mrmgr_get_device(f.cache, c, SZ, 0, &r), 0);
	cr_assert_eq(read_at(r, c, c), 3);
	mrmgr_put(r);
	dclose(&f);
}

Test(devva, multi_segment_registers_every_segment)
{
	unsigned int nseg;
	uint64_t a, seg, sig = 0x5e6, got;
	mrmgr_region_t *r, *r2;
	struct dfx f;

	dopen(&f, NULL, NULL);
	a = new_alloc(&f, 4 * SZ, 4, 0);
	cr_assert_eq(mrmgr_sim_gpu_segments(f.gpu, a, &nseg, &seg), 0);
	cr_assert_eq(nseg, 4);
	cr_assert_eq(mrmgr_sim_gpu_write(f.gpu, a + 3 * seg + 8, &sig,
					 sizeof(sig)), 0);
	/* A get inside segment 1: the registration must cover all four
	 * (the peers' known bug: one segment only). */
	cr_assert_eq(mrmgr_get_device(f.cache, a + seg + 16, 64, 0, &r), 0);
	cr_assert_geq(mrmgr_region_mr(r)->length, 4 * seg);
	cr_assert_eq(read_at(r, a, a + 3 * seg + 8), sig);
	/* A get across segments 2 and 3 hits the same region. */
	cr_assert_eq(mrmgr_get_device(f.cache, a + 3 * seg - 8, 64, 0, &r2), 0);
	cr_assert_eq(r2, r);
	cr_assert_eq(mrmgr_sim_read(f.pd, mrmgr_region_mr(r)->rkey,
				    (uintptr_t)mrmgr_region_mr(r)->addr +
				    3 * seg + 8, &got, sizeof(got)), EACCES,
		     "no remote access asked");
	mrmgr_put(r2);
	mrmgr_put(r);
	dclose(&f);
}

Test(devva, sub_allocated_offsets)
{
	mrmgr_region_t *r[3];
	uint64_t a, offs[3] = { 0, 4096 + 256, 3 * 65536 + 8 };
	struct dfx f;

	dopen(&f, NULL, NULL);
	a = new_alloc(&f, SZ, 1, 0);
	/* Three blocks a pool handed out of one allocation. */
	for (int i = 0; i < 3; i++) {
		uint64_t sig = 0xb10c0000 + (uint64_t)i;

		cr_assert_eq(mrmgr_sim_gpu_write(f.gpu, a + offs[i], &sig,
						 sizeof(sig)), 0);
	}
	for (int i = 0; i < 3; i++) {
		cr_assert_eq(mrmgr_get_device(f.cache, a + offs[i], 8, 0, &r[i]),
			     0);
		cr_assert_eq(r[i], r[0]);
		cr_assert_eq(read_at(r[i], a, a + offs[i]),
			     0xb10c0000 + (uint64_t)i);
	}
	for (int i = 0; i < 3; i++)
		mrmgr_put(r[i]);
	dclose(&f);
}

Test(devva, registration_failure_leaks_nothing)
{
	struct mrmgr_sim_attr sa = { .comp_mask = MRMGR_SIM_ATTR_PERSONALITY,
				     .personality = MRMGR_SIM_RXE };
	int before = count_fds();
	mrmgr_region_t *r;
	uint64_t a;
	struct dfx f;

	dopen(&f, &sa, NULL);
	a = new_alloc(&f, SZ, 1, 0);
	cr_assert_eq(mrmgr_get_device(f.cache, a, 8, 0, &r), EOPNOTSUPP);
	cr_assert_eq(count_fds(), before + 1, "the export leaked");
	dclose(&f);
	cr_assert_eq(count_fds(), before);
}

Test(devva, cuda_absent_is_clear)
{
	mrmgr_domain_t *d = NULL;
	int ret = mrmgr_domain_open_cuda(&d);

	if (ret == 0) {
		cr_assert_eq(mrmgr_domain_destroy(d), 0);
		cr_skip_test("libcuda.so.1 present");
	}
	cr_assert(ret == ENODEV || ret == ENXIO || ret == EOPNOTSUPP,
		  "got %d", ret);
	cr_assert_null(d);
}

Test(devva, domain_in_use_is_busy)
{
	struct dfx f;

	dopen(&f, NULL, NULL);
	cr_assert_eq(mrmgr_domain_destroy(f.dom), EBUSY);
	cr_assert_eq(mrmgr_domain_create(NULL, NULL, NULL), EINVAL);
	dclose(&f);
}

/* The simulated domain with a free counter that never moves: a domain
 * that cannot see frees (CUDA's, for now). */
static const uint64_t never;

static const uint64_t *never_moves(void *ctx)
{
	(void)ctx;
	return &never;
}

Test(devva, unseen_free_is_stale_until_reported)
{
	struct mrmgr_domain_ops ops = *mrmgr_sim_gpu_ops();
	mrmgr_region_t *r;
	mrmgr_domain_t *blind;
	mrmgr_cache_t *bc;
	uint64_t a, a2;
	struct dfx f;

	dopen(&f, NULL, NULL);
	ops.free_counter = never_moves;
	cr_assert_eq(mrmgr_domain_create(&ops, f.gpu, &blind), 0);
	cr_assert_eq(mrmgr_cache_create_device(f.pd, NULL, blind, &bc), 0);
	a = new_alloc(&f, SZ, 1, 0x1);
	cr_assert_eq(mrmgr_get_device(bc, a, SZ, 0, &r), 0);
	mrmgr_put(r);
	cr_assert_eq(mrmgr_sim_gpu_free(f.gpu, a), 0);
	a2 = new_alloc(&f, SZ, 1, 0x2);
	cr_assert_eq(a2, a);
	/* Unseen: the old registration is hit (what the report is for). */
	cr_assert_eq(mrmgr_get_device(bc, a2, SZ, 0, &r), 0);
	cr_assert_eq(read_at(r, a2, a2), 0x1);
	mrmgr_put(r);
	/* Reported: the next get re-validates and misses. */
	cr_assert_eq(mrmgr_domain_freed(blind), 0);
	cr_assert_eq(mrmgr_get_device(bc, a2, SZ, 0, &r), 0);
	cr_assert_eq(read_at(r, a2, a2), 0x2, "a stale hit after the report");
	mrmgr_put(r);
	cr_assert_eq(mrmgr_domain_freed(NULL), EINVAL);
	cr_assert_eq(mrmgr_cache_destroy(bc), 0);
	cr_assert_eq(mrmgr_domain_destroy(blind), 0);
	dclose(&f);
}

/* The simulated domain seen through a query that reports allocations
 * 256 bytes in from their start: allocations smaller than pages. */
static int query_in(void *ctx, uint64_t va, uint64_t *base, uint64_t *size,
		    uint64_t *id)
{
	int ret = mrmgr_sim_gpu_ops()->query(ctx, va, base, size, id);

	if (!ret) {
		*base += 256;
		*size -= 256;
	}
	return ret;
}

Test(devva, sub_page_allocation_is_refused)
{
	struct mrmgr_domain_ops ops = *mrmgr_sim_gpu_ops();
	int before = count_fds();
	mrmgr_domain_t *odd;
	mrmgr_cache_t *oc;
	mrmgr_region_t *r;
	uint64_t a;
	struct dfx f;

	dopen(&f, NULL, NULL);
	ops.query = query_in;
	cr_assert_eq(mrmgr_domain_create(&ops, f.gpu, &odd), 0);
	cr_assert_eq(mrmgr_cache_create_device(f.pd, NULL, odd, &oc), 0);
	a = new_alloc(&f, SZ, 1, 0);
	cr_assert_eq(mrmgr_get_device(oc, a + 512, 64, 0, &r), EOPNOTSUPP);
	cr_assert_eq(cstats(oc).misses, 0);
	cr_assert_eq(mrmgr_cache_destroy(oc), 0);
	cr_assert_eq(mrmgr_domain_destroy(odd), 0);
	dclose(&f);
	cr_assert_eq(count_fds(), before);
}

/* ---------------------------------------------------------- torture */

struct torture {
	struct dfx *f;
	unsigned int seed;
	uint64_t stale, done;
};

static void *torture_thread(void *arg)
{
	struct torture *t = arg;

	for (int i = 0; i < 400; i++) {
		uint64_t sig = ((uint64_t)t->seed << 32) | (uint64_t)i, va;
		mrmgr_region_t *r;

		va = new_alloc(t->f, SZ, 1 + (unsigned int)(i & 1), sig);
		cr_assert_eq(mrmgr_get_device(t->f->cache, va, 64, 0, &r), 0);
		if (read_at(r, va, va) != sig)
			t->stale++;
		mrmgr_put(r);
		/* Freed while cached: the address comes back for the next
		 * allocation of this thread or the other. */
		cr_assert_eq(mrmgr_sim_gpu_free(t->f->gpu, va), 0);
		t->done++;
	}
	return NULL;
}

Test(devva, two_thread_reuse_torture)
{
	struct mrmgr_cache_attr ca = {
		.comp_mask = MRMGR_CACHE_ATTR_MAX_REGIONS, .max_regions = 8 };
	int before = count_fds();
	struct torture t[2] = { { .seed = 1 }, { .seed = 2 } };
	pthread_t th[2];
	struct dfx f;

	dopen(&f, NULL, &ca);
	for (int i = 0; i < 2; i++) {
		t[i].f = &f;
		cr_assert_eq(pthread_create(&th[i], NULL, torture_thread, &t[i]), 0);
	}
	for (int i = 0; i < 2; i++)
		pthread_join(th[i], NULL);
	cr_assert_eq(t[0].stale + t[1].stale, 0, "%llu stale hits",
		     (unsigned long long)(t[0].stale + t[1].stale));
	cr_assert_eq(t[0].done + t[1].done, 800);
	dclose(&f);
	cr_assert_eq(count_fds(), before, "descriptors leaked");
}
