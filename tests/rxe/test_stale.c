/*
 * Stale registrations on real RDMA semantics.
 *
 * An MR pins the pages that were mapped when it was registered. When the
 * program unmaps the buffer and maps new memory at the same address, the
 * MR still points at the old pages: an RDMA WRITE through its rkey to that
 * address completes successfully and the new buffer never sees the data.
 * A cache that hands out such an MR loses data silently.
 *
 *  - the negative control shows the misdirected write happening on the
 *    device (so the positive test below can fail);
 *  - the positive test shows that after mrmgr_invalidate() the cache gives
 *    a registration of the new pages and the bytes arrive;
 *  - test_monitor.c does it without mrmgr_invalidate().
 *
 * SPDX-License-Identifier: MIT
 */
#include <string.h>
#include <sys/mman.h>

#include "cache_helpers.h"

#define LEN (64 * RDMA_KiB)

struct stale_setup {
	struct rdma_fixture f;
	mrmgr_cache_t *cache;   /* the cache under test */
	mrmgr_cache_t *local;   /* the sources and READ targets */
	char *buf;              /* the address that is unmapped and reused */
	char *src;              /* 'W' bytes to write */
	mrmgr_region_t *src_r;
};

static void setup(struct stale_setup *s)
{
	rdma_fixture_open(&s->f, RDMA_FX_QP);
	s->cache = rxe_cache(&s->f, 0, 0, 0);
	s->local = rxe_cache(&s->f, 0, 0, 0);
	s->src = rdma_map(LEN, 'W');
	s->src_r = rxe_get(s->local, s->src, LEN, IBV_ACCESS_LOCAL_WRITE);
	s->buf = rdma_map(LEN, 'A');
}

static void teardown(struct stale_setup *s)
{
	mrmgr_put(s->src_r);
	cr_assert_eq(mrmgr_cache_destroy(s->cache), 0);
	cr_assert_eq(mrmgr_cache_destroy(s->local), 0);
	rdma_fixture_close(&s->f);
	munmap(s->src, LEN);
	munmap(s->buf, LEN);
}

static enum ibv_wc_status write_w(struct stale_setup *s, uint32_t rkey)
{
	return rdma_write(&s->f, s->src, mrmgr_region_lkey(s->src_r),
			  (uintptr_t)s->buf, rkey, LEN);
}

Test(rxe_stale, negative_control_a_stale_mr_misdirects_the_write)
{
	struct stale_setup s;

	setup(&s);
	/* The old registration stays registered, as a held region does
	 * (or as a cached one would if nobody told the cache). */
	mrmgr_region_t *old = rxe_get(s.cache, s.buf, LEN, RXE_RW);
	uint32_t old_lkey = mrmgr_region_lkey(old), old_rkey = mrmgr_region_rkey(old);

	rdma_remap_same_address(s.buf, LEN, 'B');
	cr_log_info("%s: buffer %p unmapped and mapped again; old MR lkey %#x rkey %#x",
		    s.f.name, (void *)s.buf, old_lkey, old_rkey);

	cr_assert_eq(write_w(&s, old_rkey), IBV_WC_SUCCESS,
		     "a WRITE through the stale rkey completes successfully...");
	cr_log_info("%s: RDMA WRITE of 'W' through the stale rkey %#x: completion "
		    "success", s.f.name, old_rkey);
	rdma_expect_bytes(s.buf, LEN, 'B',
			  "...yet the new buffer did not change (write misdirected)");

	/* The bytes went to the old, still pinned pages: READ them back
	 * through the same stale MR. */
	char *back = rdma_map(LEN, 0);
	mrmgr_region_t *rb = rxe_get(s.local, back, LEN, IBV_ACCESS_LOCAL_WRITE);
	cr_assert_eq(rdma_read(&s.f, back, mrmgr_region_lkey(rb), (uintptr_t)s.buf,
			       old_rkey, LEN),
		     IBV_WC_SUCCESS);
	rdma_expect_bytes(back, LEN, 'W', "READ through the stale MR returns the lost bytes");
	mrmgr_put(rb);

	/* For contrast, the remedy on the same buffer: invalidate, get. */
	cr_assert_eq(mrmgr_invalidate(s.cache, s.buf, LEN), 0);
	mrmgr_region_t *fresh = rxe_get(s.cache, s.buf, LEN, RXE_RW);
	cr_assert_eq(write_w(&s, mrmgr_region_rkey(fresh)), IBV_WC_SUCCESS);
	rdma_expect_bytes(s.buf, LEN, 'W', "WRITE through a fresh registration");
	cr_assert_neq(fresh, old);
	mrmgr_put(fresh);
	mrmgr_put(old); /* invalidated while held: deregistered now */
	cr_assert_eq(rxe_stats(s.cache).regions, 1);

	cr_assert_eq(mrmgr_invalidate(s.local, back, LEN), 0);
	munmap(back, LEN);
	teardown(&s);
}

Test(rxe_stale, invalidate_then_get_writes_into_the_new_pages)
{
	struct stale_setup s;

	setup(&s);
	/* The usual life: register through the cache, use, put. The region
	 * stays cached (registered) after the put. */
	mrmgr_region_t *r = rxe_get(s.cache, s.buf, LEN, RXE_RW);
	uint32_t old_rkey = mrmgr_region_rkey(r);
	cr_assert_eq(write_w(&s, old_rkey), IBV_WC_SUCCESS);
	rdma_expect_bytes(s.buf, LEN, 'W', "WRITE into the first buffer");
	mrmgr_put(r);
	cr_assert_eq(rxe_stats(s.cache).regions, 1, "cached after the put");

	/* The program frees the buffer; new memory lands at the same address. */
	rdma_remap_same_address(s.buf, LEN, 'B');
	cr_assert_eq(mrmgr_invalidate(s.cache, s.buf, LEN), 0);
	struct mrmgr_stats st = rxe_stats(s.cache);

	r = rxe_get(s.cache, s.buf, LEN, RXE_RW);
	cr_log_info("%s: old rkey %#x, new rkey %#x", s.f.name, old_rkey,
		    mrmgr_region_rkey(r));
	memset(s.src, 'N', LEN);
	cr_assert_eq(write_w(&s, mrmgr_region_rkey(r)), IBV_WC_SUCCESS);
	/* The point of it all; the bookkeeping is checked after. */
	rdma_expect_bytes(s.buf, LEN, 'N', "WRITE after munmap+mmap+invalidate+get lands in the new buffer");
	cr_assert_eq(st.invalidations, 1);
	cr_assert_eq(st.regions, 0, "the stale MR was deregistered at once");
	cr_assert_eq(rxe_stats(s.cache).registrations, 2, "a new registration");
	cr_assert_eq(mrmgr_region_addr(r), (void *)s.buf);
	mrmgr_put(r);

	/* The old rkey is dead on the device. */
	memset(s.src, 'X', LEN);
	cr_assert_eq(write_w(&s, old_rkey), IBV_WC_REM_ACCESS_ERR);
	rdma_expect_bytes(s.buf, LEN, 'N', "no WRITE through the invalidated rkey");
	teardown(&s);
}

/*
 * The same sequence WITHOUT mrmgr_invalidate(), where the memory-event
 * monitor must notice the munmap by itself, is in test_monitor.c (munmap +
 * mmap by libc and by raw syscall, free() + malloc() of 4 MiB blocks,
 * madvise(MADV_DONTNEED), mremap move).
 */
