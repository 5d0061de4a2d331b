/*
 * RDMA WRITE and READ through cached registrations over the loopback QP
 * pair, byte for byte: whole buffers, sub-ranges of merged regions, many
 * pages, access rights enforced by the device, and the fixture's own
 * behaviour on a wrong key.
 *
 * SPDX-License-Identifier: MIT
 */
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "cache_helpers.h"

#define LEN (64 * RDMA_KiB)

Test(rxe_rdma, wrong_rkey_is_a_remote_access_error_and_the_pair_recovers)
{
	struct rdma_fixture f;
	char *src = rdma_map(4096, 's'), *dst = rdma_map(4096, 'd');

	rdma_fixture_open(&f, RDMA_FX_QP);
	struct ibv_mr *ms = ibv_reg_mr(f.pd, src, 4096, IBV_ACCESS_LOCAL_WRITE);
	struct ibv_mr *md = ibv_reg_mr(f.pd, dst, 4096, RXE_RW);
	cr_assert(ms && md, "ibv_reg_mr on %s", f.name);

	/* Flip the key's low byte: the index may exist, the key does not. */
	cr_assert_eq(rdma_write(&f, src, ms->lkey, (uintptr_t)dst, md->rkey ^ 0x5a, 4096),
		     IBV_WC_REM_ACCESS_ERR);
	/* Right key, range past the MR's end. */
	cr_assert_eq(rdma_write(&f, src, ms->lkey, (uintptr_t)dst + 2048, md->rkey, 4096),
		     IBV_WC_REM_ACCESS_ERR);
	/* A wrong lkey is a local error (rxe says LOC_QP_OP_ERR, most
	 * HCAs LOC_PROT_ERR); nothing reaches the remote side. */
	enum ibv_wc_status st = rdma_write(&f, src, ms->lkey ^ 0x5a, (uintptr_t)dst,
					   md->rkey, 4096);
	cr_assert(st == IBV_WC_LOC_PROT_ERR || st == IBV_WC_LOC_QP_OP_ERR,
		  "wrong lkey: %s", ibv_wc_status_str(st));
	rdma_expect_bytes(dst, 4096, 'd', "nothing written by the failed WRITEs");
	cr_assert_eq(f.reconnects, 3);

	cr_assert_eq(rdma_write(&f, src, ms->lkey, (uintptr_t)dst, md->rkey, 4096),
		     IBV_WC_SUCCESS, "the pair works again after errors");
	rdma_expect_bytes(dst, 4096, 's', "WRITE after reconnecting");

	cr_assert_eq(ibv_dereg_mr(ms), 0);
	cr_assert_eq(ibv_dereg_mr(md), 0);
	rdma_fixture_close(&f);
	munmap(src, 4096);
	munmap(dst, 4096);
}

Test(rxe_rdma, write_and_read_through_cached_regions)
{
	struct rdma_fixture f;
	char *src = rdma_map(LEN, 0), *dst = rdma_map(LEN, 0), *back = rdma_map(LEN, 0);

	rdma_fixture_open(&f, RDMA_FX_QP);
	/* No merging: three separate mappings may well be adjacent. */
	mrmgr_cache_t *c = rxe_cache(&f, 0, 0, MRMGR_CACHE_NO_MERGE);

	for (unsigned int round = 0; round < 3; round++) {
		rdma_fill_pattern(src, LEN, round);
		mrmgr_region_t *rs = rxe_get(c, src, LEN, IBV_ACCESS_LOCAL_WRITE);
		mrmgr_region_t *rd = rxe_get(c, dst, LEN, RXE_RW);
		mrmgr_region_t *rb = rxe_get(c, back, LEN, IBV_ACCESS_LOCAL_WRITE);

		cr_assert_eq(rdma_write(&f, src, mrmgr_region_lkey(rs), (uintptr_t)dst,
					mrmgr_region_rkey(rd), LEN),
			     IBV_WC_SUCCESS);
		rdma_expect_same(dst, src, LEN, "WRITE through cached lkey/rkey");
		memset(back, 0, LEN);
		cr_assert_eq(rdma_read(&f, back, mrmgr_region_lkey(rb), (uintptr_t)dst,
				       mrmgr_region_rkey(rd), LEN),
			     IBV_WC_SUCCESS);
		rdma_expect_same(back, src, LEN, "READ through cached lkey/rkey");
		mrmgr_put(rs);
		mrmgr_put(rd);
		mrmgr_put(rb);
	}
	struct mrmgr_stats s = rxe_stats(c);
	cr_assert_eq(s.registrations, 3, "rounds 2 and 3 reuse the registrations");
	cr_assert_eq(s.hits, 6);
	cr_log_info("%s: 3 rounds of WRITE+READ, %llu registrations, %llu hits",
		    f.name, (unsigned long long)s.registrations,
		    (unsigned long long)s.hits);

	cr_assert_eq(mrmgr_cache_destroy(c), 0);
	rdma_fixture_close(&f);
	munmap(src, LEN);
	munmap(dst, LEN);
	munmap(back, LEN);
}

/* Transfers to and from offsets inside a merged region land exactly there. */
Test(rxe_rdma, sub_ranges_of_a_merged_region)
{
	struct rdma_fixture f;
	const size_t big = 4 * LEN;
	char *area = rdma_map(big, '.'), *src = rdma_map(LEN, 0), *back = rdma_map(LEN, 0);
	char *expect = malloc(big);

	cr_assert_not_null(expect);
	memcpy(expect, area, big);
	rdma_fixture_open(&f, RDMA_FX_QP);
	mrmgr_cache_t *c = rxe_cache(&f, 0, 0, 0);
	mrmgr_cache_t *local = rxe_cache(&f, 0, 0, 0);

	/* Two pieces, then one bridging them: one MR over all of it. */
	mrmgr_put(rxe_get(c, area, LEN, RXE_RW));
	mrmgr_put(rxe_get(c, area + 3 * LEN, LEN, RXE_RW));
	mrmgr_region_t *whole = rxe_get(c, area + LEN - 10, 2 * LEN + 20, RXE_RW);
	cr_assert_eq(mrmgr_region_addr(whole), (void *)area);
	cr_assert_eq(mrmgr_region_length(whole), big);
	cr_assert_eq(rxe_stats(c).merges, 2);

	/* Unaligned pieces straddling page and former region boundaries. */
	static const struct { size_t off, len; } piece[] = {
		{ 1, 1 }, { 4095, 2 }, { LEN - 100, 300 }, { 3 * LEN - 7, 4096 + 13 },
		{ big - 1000, 1000 },
	};
	mrmgr_region_t *rs = rxe_get(local, src, LEN, IBV_ACCESS_LOCAL_WRITE);
	mrmgr_region_t *rb = rxe_get(local, back, LEN, IBV_ACCESS_LOCAL_WRITE);
	for (size_t i = 0; i < sizeof(piece) / sizeof(piece[0]); i++) {
		rdma_fill_pattern(src, piece[i].len, (unsigned int)i + 10);
		cr_assert_eq(rdma_write(&f, src, mrmgr_region_lkey(rs),
					(uintptr_t)area + piece[i].off,
					mrmgr_region_rkey(whole), piece[i].len),
			     IBV_WC_SUCCESS, "piece %zu", i);
		memcpy(expect + piece[i].off, src, piece[i].len);
		cr_assert_eq(rdma_read(&f, back, mrmgr_region_lkey(rb),
				       (uintptr_t)area + piece[i].off,
				       mrmgr_region_rkey(whole), piece[i].len),
			     IBV_WC_SUCCESS, "piece %zu", i);
		rdma_expect_same(back, src, piece[i].len, "READ of a piece");
	}
	/* Nothing outside the pieces changed. */
	rdma_expect_same(area, expect, big, "merged region after 5 unaligned WRITEs");

	mrmgr_put(rs);
	mrmgr_put(rb);
	mrmgr_put(whole);
	cr_assert_eq(mrmgr_cache_destroy(c), 0);
	cr_assert_eq(mrmgr_cache_destroy(local), 0);
	rdma_fixture_close(&f);
	munmap(area, big);
	munmap(src, LEN);
	munmap(back, LEN);
	free(expect);
}

Test(rxe_rdma, one_mebibyte_over_many_pages)
{
	struct rdma_fixture f;
	const size_t len = RDMA_MiB;
	char *src = rdma_map(len, 0), *dst = rdma_map(len, 0), *back = rdma_map(len, 0);

	rdma_fixture_open(&f, RDMA_FX_QP);
	mrmgr_cache_t *c = rxe_cache(&f, 0, 0, MRMGR_CACHE_NO_MERGE);
	rdma_fill_pattern(src, len, 99);
	mrmgr_region_t *rs = rxe_get(c, src, len, IBV_ACCESS_LOCAL_WRITE);
	mrmgr_region_t *rd = rxe_get(c, dst, len, RXE_RW);
	mrmgr_region_t *rb = rxe_get(c, back, len, IBV_ACCESS_LOCAL_WRITE);

	cr_assert_eq(rdma_write(&f, src, mrmgr_region_lkey(rs), (uintptr_t)dst,
				mrmgr_region_rkey(rd), len),
		     IBV_WC_SUCCESS);
	rdma_expect_same(dst, src, len, "1 MiB WRITE");
	cr_assert_eq(rdma_read(&f, back, mrmgr_region_lkey(rb), (uintptr_t)dst,
			       mrmgr_region_rkey(rd), len),
		     IBV_WC_SUCCESS);
	rdma_expect_same(back, src, len, "1 MiB READ");

	mrmgr_put(rs);
	mrmgr_put(rd);
	mrmgr_put(rb);
	cr_assert_eq(mrmgr_cache_destroy(c), 0);
	rdma_fixture_close(&f);
	munmap(src, len);
	munmap(dst, len);
	munmap(back, len);
}

/* The device enforces the access a region was registered with; asking the
 * cache for more gives a registration that has it. */
Test(rxe_rdma, remote_write_needs_a_region_registered_for_it)
{
	struct rdma_fixture f;
	char *src = rdma_map(LEN, 'w'), *dst = rdma_map(LEN, 'r');

	rdma_fixture_open(&f, RDMA_FX_QP);
	mrmgr_cache_t *c = rxe_cache(&f, 0, 0, 0);
	mrmgr_cache_t *local = rxe_cache(&f, 0, 0, 0);
	mrmgr_region_t *rs = rxe_get(local, src, LEN, IBV_ACCESS_LOCAL_WRITE);

	mrmgr_region_t *ro = rxe_get(c, dst, LEN,
				     IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
	cr_assert_eq(rdma_write(&f, src, mrmgr_region_lkey(rs), (uintptr_t)dst,
				mrmgr_region_rkey(ro), LEN),
		     IBV_WC_REM_ACCESS_ERR, "no REMOTE_WRITE, no remote write");
	rdma_expect_bytes(dst, LEN, 'r', "read-only region untouched");

	mrmgr_region_t *rw = rxe_get(c, dst, LEN, RXE_RW);
	cr_assert_neq(rw, ro, "more access is a new registration");
	cr_assert_eq(mrmgr_region_access(rw), RXE_RW);
	cr_assert_eq(rdma_write(&f, src, mrmgr_region_lkey(rs), (uintptr_t)dst,
				mrmgr_region_rkey(rw), LEN),
		     IBV_WC_SUCCESS);
	rdma_expect_bytes(dst, LEN, 'w', "WRITE through the upgraded region");

	/* The weaker request now hits the stronger region. */
	mrmgr_put(ro);
	mrmgr_put(rw);
	mrmgr_region_t *again = rxe_get(c, dst, LEN, IBV_ACCESS_REMOTE_READ | IBV_ACCESS_LOCAL_WRITE);
	cr_assert_eq(again, rw);
	mrmgr_put(again);
	mrmgr_put(rs);
	cr_assert_eq(mrmgr_cache_destroy(c), 0);
	cr_assert_eq(mrmgr_cache_destroy(local), 0);
	rdma_fixture_close(&f);
	munmap(src, LEN);
	munmap(dst, LEN);
}
