/*
 * Growth on a real device: regions grown through mrmgr_get(), access
 * upgrades, growable buffers and PD moves, each followed by RDMA WRITE and
 * READ through the keys the library handed out, byte for byte.
 *
 * Soft-RoCE cannot ibv_rereg_mr() (-4, EOPNOTSUPP: test_unsupported), so
 * on rxe0 every one of these takes the fallback path: the probe at the
 * first cache creation learns it once per process, an idle region is
 * deregistered and its new range registered, a held one is replaced while
 * its holder keeps the old MR (make-before-break). The counters that say
 * so are asserted on rxe only; the byte checks and the O(log n) bounds
 * hold on any device.
 *
 * Every write source and read sink lives in a cache of its own (struct
 * io), so it never merges with, or evicts, what a test grows.
 *
 * SPDX-License-Identifier: MIT
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "cache_helpers.h"

/*
 * These tests measure growth (headroom, rereg fallback) on the device;
 * headroom is on only where the program reports memory changes itself
 * (see lib/ext/headroom.c), so the caches here run with external monitoring.
 * Set before Criterion forks its workers.
 */
__attribute__((constructor)) static void growth_monitor_external(void)
{
	setenv("MRMGR_MONITOR", "external", 0);
}

#define PG (4 * RDMA_KiB)
#define LW IBV_ACCESS_LOCAL_WRITE

/* ------------------------------------------------------------ helpers */

/* A write source and a read sink registered in pd, in their own cache. */
struct io {
	struct rdma_fixture *f;
	struct ibv_pd *pd;
	mrmgr_cache_t *cache;
	size_t len;
	char *src, *back;
	mrmgr_region_t *rs, *rb;
};

static void io_open(struct io *io, struct rdma_fixture *f, struct ibv_pd *pd,
		    size_t len)
{
	struct mrmgr_cache_attr a = rxe_cache_attr(0, 0, MRMGR_CACHE_NO_MERGE);

	io->f = f;
	io->pd = pd;
	io->len = len;
	cr_assert_eq(mrmgr_cache_create(pd, &a, &io->cache), 0);
	io->src = rdma_map(len, 0);
	io->back = rdma_map(len, 0);
	io->rs = rxe_get(io->cache, io->src, len, LW);
	/* Remote access too: tests write into it from regions they hold. */
	io->rb = rxe_get(io->cache, io->back, len, RXE_RW);
}

static void io_close(struct io *io)
{
	mrmgr_put(io->rs);
	mrmgr_put(io->rb);
	cr_assert_eq(mrmgr_cache_destroy(io->cache), 0);
	munmap(io->src, io->len);
	munmap(io->back, io->len);
}

/* A byte check, logged only when loud: some run hundreds of times. */
static void same(const void *got, const void *want, size_t len, int loud,
		 const char *what)
{
	if (loud)
		rdma_expect_same(got, want, len, what);
	else
		rdma_check_same(got, want, len, what);
}

/*
 * RDMA WRITE the pattern of seed into [dst, +len) through rkey, check the
 * bytes landed, RDMA READ them back through rkey and check again.
 */
static void write_read(struct io *io, void *dst, uint32_t rkey, size_t len,
		       unsigned int seed, int loud, const char *fmt, ...)
{
	char what[200], step[240];
	enum ibv_wc_status st;
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	cr_assert_leq(len, io->len);
	rdma_fill_pattern(io->src, len, seed);
	st = rdma_write_pd(io->f, io->pd, io->src, mrmgr_region_lkey(io->rs),
			   (uintptr_t)dst, rkey, len);
	cr_assert_eq(st, IBV_WC_SUCCESS, "%s: RDMA WRITE of %zu bytes through "
		     "rkey %#x: %s", what, len, rkey, ibv_wc_status_str(st));
	snprintf(step, sizeof(step), "%s: WRITE rkey %#x", what, rkey);
	same(dst, io->src, len, loud, step);
	memset(io->back, 0, len);
	st = rdma_read_pd(io->f, io->pd, io->back, mrmgr_region_lkey(io->rb),
			  (uintptr_t)dst, rkey, len);
	cr_assert_eq(st, IBV_WC_SUCCESS, "%s: RDMA READ: %s", what,
		     ibv_wc_status_str(st));
	snprintf(step, sizeof(step), "%s: READ back", what);
	same(io->back, io->src, len, loud, step);
}

/*
 * The registration behind rkey is gone (or never allowed remote writes):
 * an RDMA WRITE through it completes with a remote access error, and
 * [dst, +len) keeps its bytes when check_dst says it is still mapped.
 */
static void write_refused(struct io *io, void *dst, uint32_t rkey, size_t len,
			  int check_dst, const char *what)
{
	char *before = check_dst ? malloc(len) : NULL;
	enum ibv_wc_status st;

	if (check_dst) {
		cr_assert_not_null(before);
		memcpy(before, dst, len);
	}
	memset(io->src, 0xee, len);
	st = rdma_write_pd(io->f, io->pd, io->src, mrmgr_region_lkey(io->rs),
			   (uintptr_t)dst, rkey, len);
	cr_assert_eq(st, IBV_WC_REM_ACCESS_ERR,
		     "%s: RDMA WRITE through rkey %#x completed with %s", what,
		     rkey, ibv_wc_status_str(st));
	if (check_dst) {
		same(dst, before, len, 0, what);
		free(before);
	}
	cr_log_info("refused: %s: RDMA WRITE through rkey %#x: %s%s", what,
		    rkey, ibv_wc_status_str(st),
		    check_dst ? ", bytes unchanged" : "");
}

/* Probes counted by any of n caches: one per process and device. */
static uint64_t probes(mrmgr_cache_t *const *c, size_t n)
{
	uint64_t p = 0;

	for (size_t i = 0; i < n; i++)
		p += rxe_stats(c[i]).rereg_probes;
	return p;
}

static void log_stats(const char *what, mrmgr_cache_t *c)
{
	struct mrmgr_stats s = rxe_stats(c);

	cr_log_info("%s: %llu registrations, %llu deregistrations, %llu rereg "
		    "calls, %llu fallbacks (device cannot rereg), %llu "
		    "make-before-break, %llu grows, %llu headroom bytes, peak "
		    "pinned %llu",
		    what, (unsigned long long)s.registrations,
		    (unsigned long long)s.deregistrations,
		    (unsigned long long)s.rereg_attempts,
		    (unsigned long long)s.rereg_fallback_unsupported,
		    (unsigned long long)s.make_before_break,
		    (unsigned long long)s.grows,
		    (unsigned long long)s.headroom_bytes,
		    (unsigned long long)s.peak_pinned_bytes);
}

/* ------------------------------------------------------------ the probe */

Test(rxe_growth, rereg_probe_finds_the_device_cannot_once)
{
	struct rdma_fixture f;
	enum { NC = 4, SPAN = 256 * RDMA_KiB };
	mrmgr_cache_t *c[NC];
	char *buf[NC];
	struct io io;

	rdma_fixture_open_rxe(&f, RDMA_FX_QP, "it may well rereg");
	/* The last cache never tries: it is told not to. */
	for (int i = 0; i < NC; i++) {
		/* No headroom: the buffers' mappings may merge into one,
		 * and this test counts exactly what each growth pins. */
		c[i] = rxe_cache(&f, 0, 0,
				 MRMGR_CACHE_NO_HEADROOM |
					 (i == NC - 1 ? MRMGR_CACHE_NO_REREG : 0));
		buf[i] = rdma_map(SPAN, 0);
	}
	io_open(&io, &f, f.pd, SPAN);
	cr_assert_eq(rxe_stats(c[0]).rereg_probes, 1,
		     "the first cache on %s probes", f.name);
	cr_assert_eq(probes(c, NC) + rxe_stats(io.cache).rereg_probes, 1,
		     "later caches on %s reuse the verdict", f.name);

	for (int i = 0; i < NC; i++) {
		/* Grow a region twice; each growth finds rereg unusable. */
		for (size_t len = 16 * RDMA_KiB; len <= SPAN; len *= 4) {
			mrmgr_region_t *r = rxe_get(c[i], buf[i], len, RXE_RW);

			cr_assert_geq(mrmgr_region_length(r), len);
			write_read(&io, buf[i], mrmgr_region_rkey(r), len,
				   (unsigned int)(i * 8 + len / PG), 1,
				   "cache %d, region grown to %zu KiB", i,
				   len / RDMA_KiB);
			mrmgr_put(r);
		}
		struct mrmgr_stats s = rxe_stats(c[i]);

		cr_assert_eq(s.grows, 2, "cache %d", i);
		cr_assert_eq(s.rereg_attempts, 0, "cache %d: rereg was tried", i);
		cr_assert_eq(s.rereg_successes, 0);
		cr_assert_eq(s.rereg_fallback_unsupported, i == NC - 1 ? 0 : 2,
			     "cache %d: %llu", i,
			     (unsigned long long)s.rereg_fallback_unsupported);
		/* Idle: the old MR goes before the new one comes. */
		cr_assert_eq(s.registrations, 3);
		cr_assert_eq(s.deregistrations, 2);
		cr_assert_eq(s.regions, 1);
		cr_assert_eq(s.pinned_bytes, SPAN);
	}
	cr_assert_eq(probes(c, NC) + rxe_stats(io.cache).rereg_probes, 1,
		     "growth does not probe again");
	cr_log_info("%s: %d caches, one rereg probe; every growth registered "
		    "anew (rereg_fallback_unsupported 2 per cache that may rereg)",
		    f.name, NC);

	io_close(&io);
	for (int i = 0; i < NC; i++) {
		cr_assert_eq(mrmgr_cache_destroy(c[i]), 0);
		munmap(buf[i], SPAN);
	}
	rdma_fixture_close(&f);
}

/* ------------------------------------------------------------ growth by get */

/*
 * One large mapping; the buffer at its start grows 4 KiB -> 1 MiB by
 * doubling. Headroom registers twice the grown span, so every other step
 * is a new registration (1, 2, 8, 32, 128 pages asked: 1, 4, 16, 64, 256
 * registered) and the steps between hit it.
 */
Test(rxe_growth, get_grows_by_doubling_with_writes_after_each_step)
{
	struct rdma_fixture f;
	const size_t map_len = 2 * RDMA_MiB, final = RDMA_MiB;
	char *buf = rdma_map(map_len, 0);
	uint32_t prev_rkey = 0;
	uint64_t prev_gen = 0;
	size_t prev_len = 0, reg_len = 0;
	unsigned int steps = 0, regs = 0;
	struct io io;

	rdma_fixture_open(&f, RDMA_FX_QP);
	int rxe = rdma_fixture_is_rxe(&f);
	mrmgr_cache_t *c = rxe_cache(&f, 0, 0, 0);
	io_open(&io, &f, f.pd, final);

	for (size_t len = PG; len <= final; len *= 2, steps++) {
		mrmgr_region_t *r = rxe_get(c, buf, len, RXE_RW);
		uint32_t rkey = mrmgr_region_rkey(r);

		cr_assert_eq(mrmgr_region_addr(r), (void *)buf);
		cr_assert_geq(mrmgr_region_length(r), len);
		cr_assert_eq(mrmgr_region_mr(r)->length, mrmgr_region_length(r));
		if (len > reg_len) {
			cr_assert_neq(mrmgr_region_generation(r), prev_gen,
				      "a grown region is a new registration");
			cr_assert_eq(mrmgr_region_length(r), regs ? 2 * len : len,
				     "a fresh miss: what it asked; a growth: "
				     "twice the grown span");
			reg_len = mrmgr_region_length(r);
			regs++;
		} else {
			cr_assert_eq(mrmgr_region_generation(r), prev_gen,
				     "inside the headroom: a hit");
		}
		prev_gen = mrmgr_region_generation(r);
		/* The whole grown range, with a pattern of this step. */
		write_read(&io, buf, rkey, len, steps + 1, 1,
			   "doubling step %u: [buf, +%zu KiB)", steps,
			   len / RDMA_KiB);
		/* Nothing past it was written. */
		rdma_expect_bytes(buf + len, PG, 0, "the page after the range");
		if (prev_rkey && prev_rkey != rkey)
			write_refused(&io, buf, prev_rkey, prev_len, 1,
				      "the rkey before the growth");
		prev_rkey = rkey;
		prev_len = len;
		mrmgr_put(r);
	}

	struct mrmgr_stats s = rxe_stats(c);
	log_stats("doubling 4 KiB -> 1 MiB", c);
	cr_assert_eq(regs, 5, "steps 0, 1, 3, 5 and 7 register");
	cr_assert_eq(s.registrations + s.rereg_attempts, regs,
		     "one registration call per new registration");
	cr_assert_eq(s.grows, regs - 1);
	cr_assert_eq(s.regions, 1);
	cr_assert_eq(s.deregistrations, s.registrations - 1, "no MR left behind");
	cr_assert_eq(s.pinned_bytes, final);
	if (rxe) {
		cr_assert_eq(s.registrations, regs);
		cr_assert_eq(s.rereg_attempts, 0);
		cr_assert_eq(s.rereg_fallback_unsupported, regs - 1);
		cr_assert_eq(s.peak_pinned_bytes, final,
			     "old and new never pinned together when idle");
		cr_assert_eq(rxe_stats(c).rereg_probes +
				     rxe_stats(io.cache).rereg_probes, 1);
	}
	cr_assert_eq(mrmgr_cache_destroy(c), 0);
	io_close(&io);
	rdma_fixture_close(&f);
	munmap(buf, map_len);
}

/* 200 linear 4 KiB steps: headroom keeps it to O(log n) registrations. */
Test(rxe_growth, get_grows_linearly_in_log_n_registrations)
{
	struct rdma_fixture f;
	enum { STEPS = 200 };
	const size_t map_len = 2 * RDMA_MiB;
	char *buf = rdma_map(map_len, 0);
	uint32_t prev_rkey = 0;
	uint64_t prev_gen = 0;
	size_t prev_len = 0;
	unsigned int changes = 0;
	struct io io;

	rdma_fixture_open(&f, RDMA_FX_QP);
	int rxe = rdma_fixture_is_rxe(&f);
	mrmgr_cache_t *c = rxe_cache(&f, 0, 0, 0);
	io_open(&io, &f, f.pd, map_len);

	for (unsigned int k = 1; k <= STEPS; k++) {
		mrmgr_region_t *r = rxe_get(c, buf, k * PG, RXE_RW);
		uint32_t rkey = mrmgr_region_rkey(r);
		size_t rlen = mrmgr_region_length(r);

		cr_assert_eq(mrmgr_region_addr(r), (void *)buf);
		cr_assert_geq(rlen, k * PG);
		if (mrmgr_region_generation(r) != prev_gen) {
			/* A new registration: all of it, headroom included. */
			changes++;
			write_read(&io, buf, rkey, rlen, k, 1,
				   "linear step %u: new registration "
				   "[buf, +%zu KiB) for %u KiB", k,
				   rlen / RDMA_KiB, k * 4);
			if (prev_rkey && prev_rkey != rkey)
				write_refused(&io, buf, prev_rkey, prev_len, 1,
					      "the rkey before the growth");
			prev_gen = mrmgr_region_generation(r);
			prev_rkey = rkey;
			prev_len = rlen;
		}
		/* Every step: the newest page and the first, patterns of
		 * their own (the first page changes every time). */
		write_read(&io, buf + (k - 1) * PG, rkey, PG, k, 0,
			   "linear step %u: newest page", k);
		write_read(&io, buf, rkey, PG, k + 128, 0,
			   "linear step %u: first page", k);
		mrmgr_put(r);
	}
	cr_log_info("byte check: linear growth 4 KiB x %d: newest page and "
		    "first page WRITE + READ after every step ok; %u "
		    "registration changes", STEPS, changes);

	struct mrmgr_stats s = rxe_stats(c);
	log_stats("linear 4 KiB x 200", c);
	/* Headroom registers twice the grown span: requests of 1, 2, 5, 11,
	 * 23, 47, 95 and 191 pages start a new registration (1, 4, 10, 22,
	 * 46, 94, 190 and 382 pages). */
	cr_assert_leq(s.registrations + s.rereg_attempts, 10,
		      "%llu registrations + %llu rereg calls for %d steps",
		      (unsigned long long)s.registrations,
		      (unsigned long long)s.rereg_attempts, STEPS);
	cr_assert_leq(s.pages_registered, 4 * STEPS);
	cr_assert_leq(s.peak_pinned_bytes, 2 * STEPS * PG);
	cr_assert_gt(s.headroom_bytes, 0);
	cr_assert_gt(s.hits, STEPS / 2, "most steps fit the headroom");
	cr_assert_eq(s.regions, 1);
	cr_assert_eq(s.deregistrations, s.registrations - 1);
	if (rxe) {
		cr_assert_eq(s.rereg_attempts, 0);
		cr_assert_eq(s.registrations, changes);
		cr_assert_eq(s.rereg_fallback_unsupported, changes - 1);
	}
	cr_assert_eq(mrmgr_cache_destroy(c), 0);
	io_close(&io);
	rdma_fixture_close(&f);
	munmap(buf, map_len);
}

Test(rxe_growth, growth_of_a_held_region_makes_before_breaking)
{
	struct rdma_fixture f;
	const size_t old_len = 64 * RDMA_KiB, new_len = 256 * RDMA_KiB;
	char *buf = rdma_map(RDMA_MiB, 0);
	struct io io;

	rdma_fixture_open(&f, RDMA_FX_QP);
	int rxe = rdma_fixture_is_rxe(&f);
	mrmgr_cache_t *c = rxe_cache(&f, 0, 0, 0);
	io_open(&io, &f, f.pd, new_len);

	mrmgr_region_t *held = rxe_get(c, buf, old_len, RXE_RW);
	uint32_t old_rkey = mrmgr_region_rkey(held);
	mrmgr_region_t *grown = rxe_get(c, buf, new_len, RXE_RW);

	cr_assert_neq(grown, held, "never changed under its holder");
	cr_assert_eq(mrmgr_region_length(held), old_len);
	cr_assert_eq(mrmgr_region_rkey(held), old_rkey);
	cr_assert_geq(mrmgr_region_length(grown), new_len);
	write_read(&io, buf, old_rkey, old_len, 1, 1,
		   "held old region, after the growth");
	write_read(&io, buf, mrmgr_region_rkey(grown), new_len, 2, 1,
		   "grown region [buf, +256 KiB)");

	struct mrmgr_stats s = rxe_stats(c);
	cr_assert_eq(s.make_before_break, 1);
	cr_assert_eq(s.regions, 2);
	cr_assert_eq(s.regions_in_use, 2);
	if (rxe) {
		cr_assert_eq(s.rereg_attempts, 0);
		cr_assert_eq(s.rereg_fallback_unsupported, 1);
	}

	mrmgr_put(held);
	cr_assert_eq(rxe_stats(c).regions, 1, "the old MR goes at its last put");
	write_refused(&io, buf, old_rkey, old_len, 1,
		      "the old region's rkey after its last put");
	write_read(&io, buf, mrmgr_region_rkey(grown), new_len, 3, 1,
		   "grown region after the old one went");
	mrmgr_put(grown);
	log_stats("growth while held", c);
	cr_assert_eq(mrmgr_cache_destroy(c), 0);
	io_close(&io);
	rdma_fixture_close(&f);
	munmap(buf, RDMA_MiB);
}

/* ------------------------------------------------------------ access */

#define ALEN (64 * RDMA_KiB)

Test(rxe_growth, access_upgrade_of_an_idle_region)
{
	struct rdma_fixture f;
	char *buf = rdma_map(ALEN, 'i');
	struct io io;

	rdma_fixture_open(&f, RDMA_FX_QP);
	int rxe = rdma_fixture_is_rxe(&f);
	mrmgr_cache_t *c = rxe_cache(&f, 0, 0, 0);
	io_open(&io, &f, f.pd, ALEN);

	mrmgr_region_t *r1 = rxe_get(c, buf, ALEN, LW);
	uint32_t lkey1 = mrmgr_region_lkey(r1), rkey1 = mrmgr_region_rkey(r1);
	uint64_t gen1 = mrmgr_region_generation(r1);

	write_refused(&io, buf, rkey1, ALEN, 1, "LOCAL_WRITE only: no remote write");
	mrmgr_put(r1);

	/* A page inside it, with more access: the whole region is upgraded. */
	mrmgr_region_t *r2 = rxe_get(c, buf + 8 * RDMA_KiB, PG, RXE_RW);
	cr_assert_eq(mrmgr_region_access(r2), RXE_RW);
	cr_assert_eq(mrmgr_region_addr(r2), (void *)buf);
	cr_assert_eq(mrmgr_region_length(r2), ALEN);
	cr_assert_neq(mrmgr_region_generation(r2), gen1);
	write_read(&io, buf, mrmgr_region_rkey(r2), ALEN, 5, 1,
		   "upgraded region LOCAL_WRITE -> +REMOTE_WRITE|REMOTE_READ");
	if (mrmgr_region_lkey(r2) != lkey1) {
		/* The old MR is gone: its lkey no longer sources a WRITE. */
		enum ibv_wc_status st = rdma_write(&f, buf, lkey1,
						   (uintptr_t)io.back,
						   mrmgr_region_rkey(io.rb), PG);
		cr_assert_neq(st, IBV_WC_SUCCESS, "the old lkey still works");
		cr_log_info("refused: the old region's lkey %#x as a WRITE "
			    "source: %s", lkey1, ibv_wc_status_str(st));
	}
	mrmgr_put(r2);

	struct mrmgr_stats s = rxe_stats(c);
	log_stats("idle access upgrade", c);
	cr_assert_eq(s.regions, 1);
	cr_assert_eq(s.grows, 0, "an access upgrade is not growth");
	cr_assert_eq(s.make_before_break, 0);
	if (rxe) {
		cr_assert_eq(s.rereg_attempts, 0);
		cr_assert_eq(s.rereg_fallback_unsupported, 1);
		cr_assert_eq(s.registrations, 2);
		cr_assert_eq(s.deregistrations, 1);
	}
	cr_assert_eq(mrmgr_cache_destroy(c), 0);
	io_close(&io);
	rdma_fixture_close(&f);
	munmap(buf, ALEN);
}

/* LOCAL_WRITE -> +REMOTE_WRITE|REMOTE_READ while the LOCAL_WRITE region is
 * held: its lkey keeps working for the holder until the put. */
Test(rxe_growth, access_upgrade_while_held_keeps_the_old_lkey_until_put)
{
	struct rdma_fixture f;
	char *buf = rdma_map(ALEN, 'h');
	struct io io;

	rdma_fixture_open(&f, RDMA_FX_QP);
	int rxe = rdma_fixture_is_rxe(&f);
	mrmgr_cache_t *c = rxe_cache(&f, 0, 0, 0);
	io_open(&io, &f, f.pd, ALEN);

	mrmgr_region_t *held = rxe_get(c, buf, ALEN, LW);
	uint32_t old_lkey = mrmgr_region_lkey(held);
	uint32_t old_rkey = mrmgr_region_rkey(held);
	mrmgr_region_t *up = rxe_get(c, buf, ALEN, RXE_RW);

	cr_assert_neq(up, held);
	cr_assert_eq(mrmgr_region_access(held), LW, "the holder's region is untouched");
	cr_assert_eq(mrmgr_region_access(up), RXE_RW);
	cr_assert_eq(rxe_stats(c).make_before_break, 1);

	/* The old lkey sources a WRITE into the sink... */
	memset(io.back, 0, ALEN);
	cr_assert_eq(rdma_write(&f, buf, old_lkey, (uintptr_t)io.back,
				mrmgr_region_rkey(io.rb), ALEN),
		     IBV_WC_SUCCESS);
	rdma_expect_bytes(io.back, ALEN, 'h', "WRITE sourced by the held old region's lkey");
	/* ...and lands a READ (a local write through it). */
	memset(io.back, 'R', ALEN);
	cr_assert_eq(rdma_read(&f, buf, old_lkey, (uintptr_t)io.back,
			       mrmgr_region_rkey(io.rb), ALEN),
		     IBV_WC_SUCCESS);
	rdma_expect_bytes(buf, ALEN, 'R', "READ into the held old region's lkey");
	write_refused(&io, buf, old_rkey, ALEN, 1,
		      "the held LOCAL_WRITE region: no remote write");
	write_read(&io, buf, mrmgr_region_rkey(up), ALEN, 7, 1,
		   "upgraded region while the old one is held");

	mrmgr_put(held);
	cr_assert_eq(rxe_stats(c).regions, 1);
	enum ibv_wc_status st = rdma_write(&f, buf, old_lkey, (uintptr_t)io.back,
					   mrmgr_region_rkey(io.rb), PG);
	cr_assert_neq(st, IBV_WC_SUCCESS, "the old lkey works after its last put");
	cr_log_info("refused: the old region's lkey %#x after its last put: %s",
		    old_lkey, ibv_wc_status_str(st));
	write_refused(&io, buf, old_rkey, ALEN, 1, "the old rkey after its last put");
	write_read(&io, buf, mrmgr_region_rkey(up), ALEN, 8, 1,
		   "upgraded region after the old one went");
	mrmgr_put(up);

	if (rxe) {
		cr_assert_eq(rxe_stats(c).rereg_attempts, 0);
		cr_assert_eq(rxe_stats(c).rereg_fallback_unsupported, 1);
	}
	log_stats("held access upgrade (lkey)", c);
	cr_assert_eq(mrmgr_cache_destroy(c), 0);
	io_close(&io);
	rdma_fixture_close(&f);
	munmap(buf, ALEN);
}

/* LOCAL_WRITE|REMOTE_WRITE -> +REMOTE_READ while held: remote writes
 * through the old rkey land until the put, then get a remote access error. */
Test(rxe_growth, access_upgrade_while_held_keeps_the_old_rkey_until_put)
{
	struct rdma_fixture f;
	const unsigned int wo = LW | IBV_ACCESS_REMOTE_WRITE;
	char *buf = rdma_map(ALEN, 'h');
	struct io io;

	rdma_fixture_open(&f, RDMA_FX_QP);
	int rxe = rdma_fixture_is_rxe(&f);
	mrmgr_cache_t *c = rxe_cache(&f, 0, 0, 0);
	io_open(&io, &f, f.pd, ALEN);

	mrmgr_region_t *held = rxe_get(c, buf, ALEN, wo);
	uint32_t old_rkey = mrmgr_region_rkey(held);
	enum ibv_wc_status st = rdma_read(&f, io.back, mrmgr_region_lkey(io.rb),
					  (uintptr_t)buf, old_rkey, ALEN);
	cr_assert_eq(st, IBV_WC_REM_ACCESS_ERR, "READ without REMOTE_READ: %s",
		     ibv_wc_status_str(st));

	mrmgr_region_t *up = rxe_get(c, buf, ALEN, RXE_RW);
	cr_assert_neq(up, held);
	cr_assert_eq(mrmgr_region_access(held), wo);

	/* Both registrations reach the same pages while the old one is held. */
	rdma_fill_pattern(io.src, ALEN, 11);
	cr_assert_eq(rdma_write(&f, io.src, mrmgr_region_lkey(io.rs),
				(uintptr_t)buf, old_rkey, ALEN),
		     IBV_WC_SUCCESS);
	rdma_expect_same(buf, io.src, ALEN, "WRITE through the held old rkey");
	memset(io.back, 0, ALEN);
	cr_assert_eq(rdma_read(&f, io.back, mrmgr_region_lkey(io.rb),
			       (uintptr_t)buf, mrmgr_region_rkey(up), ALEN),
		     IBV_WC_SUCCESS);
	rdma_expect_same(io.back, io.src, ALEN,
			 "READ through the upgraded rkey sees it");
	write_read(&io, buf, mrmgr_region_rkey(up), ALEN, 12, 1,
		   "upgraded region while the old one is held");

	mrmgr_put(held);
	write_refused(&io, buf, old_rkey, ALEN, 1, "the old rkey after its last put");
	write_read(&io, buf, mrmgr_region_rkey(up), ALEN, 13, 1,
		   "upgraded region after the old one went");
	mrmgr_put(up);

	struct mrmgr_stats s = rxe_stats(c);
	log_stats("held access upgrade (rkey)", c);
	cr_assert_eq(s.make_before_break, 1);
	cr_assert_eq(s.regions, 1);
	if (rxe) {
		cr_assert_eq(s.rereg_attempts, 0);
		cr_assert_eq(s.rereg_fallback_unsupported, 1);
	}
	cr_assert_eq(mrmgr_cache_destroy(c), 0);
	io_close(&io);
	rdma_fixture_close(&f);
	munmap(buf, ALEN);
}

/* ------------------------------------------------------------ buffers */

#define WINDOW (64 * RDMA_KiB)
#define BUF_MAX (RDMA_MiB + RDMA_KiB)

struct bufcheck {
	struct io *io;
	mrmgr_buf_t *b;
	char *shadow;            /* what the buffer must hold */
	unsigned int resizes, cap_changes, moves;
};

/*
 * Resize, then check: the contents kept (up to the smaller size), the
 * registration covering the whole capacity at the new address, a fresh
 * pattern written through mrmgr_buf_rkey() (the last 64 KiB and the first
 * page) and the whole buffer read back through it.
 */
static void resize_and_check(struct bufcheck *bc, size_t size)
{
	struct io *io = bc->io;
	mrmgr_buf_t *b = bc->b;
	size_t old_size = mrmgr_buf_size(b), old_cap = mrmgr_buf_capacity(b);
	char *old_data = mrmgr_buf_data(b);
	uint32_t old_rkey = mrmgr_buf_rkey(b);
	uint64_t old_gen = mrmgr_buf_generation(b);
	unsigned int n = ++bc->resizes;
	int ret;

	cr_assert_leq(size, BUF_MAX);
	ret = mrmgr_buf_resize(b, size);
	cr_assert_eq(ret, 0, "resize %u to %zu: %s", n, size, strerror(ret));

	char *data = mrmgr_buf_data(b);
	size_t cap = mrmgr_buf_capacity(b);
	struct ibv_mr *mr = mrmgr_buf_mr(b);
	int moved = data != old_data;

	cr_assert_eq(mrmgr_buf_size(b), size);
	cr_assert_not_null(mr, "resize %u: no registration", n);
	cr_assert_eq(mr->addr, (void *)data);
	cr_assert_eq(mr->length, cap);
	cr_assert_eq(mr->pd, io->pd);
	cr_assert_eq(mrmgr_buf_rkey(b), mr->rkey);
	same(data, bc->shadow, old_size < size ? old_size : size, 0,
	     "contents kept across the resize");
	if (cap != old_cap) {
		bc->cap_changes++;
		bc->moves += (unsigned int)moved;
		cr_assert_neq(mrmgr_buf_generation(b), old_gen,
			      "resize %u: new capacity, same generation", n);
		/* A stale rkey must not reach anything (at the old address,
		 * which may be unmapped by now). Each refusal costs a QP
		 * reset: the first few and every 8th. */
		if (mrmgr_buf_rkey(b) != old_rkey &&
		    (bc->cap_changes <= 6 || bc->cap_changes % 8 == 0))
			write_refused(io, old_data, old_rkey, PG, !moved,
				      "the buffer's rkey before the resize");
	} else {
		cr_assert_eq(mrmgr_buf_generation(b), old_gen,
			     "resize %u within the capacity changed the registration", n);
		cr_assert_eq(data, old_data);
	}
	/* Bytes past the old size are unspecified (realloc): take them. */
	if (size > old_size)
		memcpy(bc->shadow + old_size, data + old_size, size - old_size);
	if (size) {
		size_t off = size > WINDOW ? size - WINDOW : 0;

		write_read(io, data + off, mrmgr_buf_rkey(b), size - off, n, 0,
			   "resize %u: last %zu bytes", n, size - off);
		memcpy(bc->shadow + off, io->src, size - off);
		if (off) {
			write_read(io, data, mrmgr_buf_rkey(b), PG, n + 128, 0,
				   "resize %u: first page", n);
			memcpy(bc->shadow, io->src, PG);
		}
		memset(io->back, 0, size);
		cr_assert_eq(rdma_read_pd(io->f, io->pd, io->back,
					  mrmgr_region_lkey(io->rb),
					  (uintptr_t)data, mrmgr_buf_rkey(b), size),
			     IBV_WC_SUCCESS);
		same(io->back, bc->shadow, size, 0, "whole buffer READ back");
		same(data, bc->shadow, size, 0, "whole buffer");
	}
	cr_log_info("byte check: buffer resize %u: %zu -> %zu bytes, capacity "
		    "%zu%s, gen %llu, rkey %#x: contents kept, WRITE + READ "
		    "through mrmgr_buf_rkey ok", n, old_size, size, cap,
		    moved ? " (moved)" : "",
		    (unsigned long long)mrmgr_buf_generation(b), mrmgr_buf_rkey(b));
}

Test(rxe_growth, growable_buffer_resized_up_and_down_with_byte_checks)
{
	struct rdma_fixture f;
	struct bufcheck bc = { 0 };
	struct io io;
	mrmgr_buf_t *b;

	rdma_fixture_open(&f, RDMA_FX_QP);
	int rxe = rdma_fixture_is_rxe(&f);
	mrmgr_cache_t *c = rxe_cache(&f, 0, 0, 0);
	io_open(&io, &f, f.pd, BUF_MAX + PG);
	cr_assert_eq(mrmgr_buf_create(c, PG, RXE_RW, &b), 0);
	bc.io = &io;
	bc.b = b;
	bc.shadow = calloc(1, BUF_MAX);
	cr_assert_not_null(bc.shadow);
	write_read(&io, mrmgr_buf_data(b), mrmgr_buf_rkey(b), PG, 1, 1,
		   "new buffer of one page");
	memcpy(bc.shadow, io.src, PG);
	bc.resizes = 1;

	/* Something right after it: the first growth has to move it. */
	char *data = mrmgr_buf_data(b);
	void *wall = mmap(data + PG, PG, PROT_NONE,
			  MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
	if (wall != MAP_FAILED && wall != (void *)(data + PG)) {
		munmap(wall, PG); /* an old kernel put it elsewhere */
		wall = MAP_FAILED;
	}

	/* Linear 4 KiB steps to 256 KiB: capacity doubles, O(log n). */
	for (size_t k = 2; k <= 64; k++)
		resize_and_check(&bc, k * PG);
	uint64_t lin_regs = rxe_stats(c).registrations + rxe_stats(c).rereg_attempts;
	cr_assert_leq(lin_regs, 7, "1 page to 64 in 4 KiB steps: %llu calls",
		      (unsigned long long)lin_regs);
	cr_assert_geq(bc.moves, 1, "the first growth moved the buffer");

	/* Big steps, odd sizes, shrinks past a quarter, and back. */
	static const size_t sizes[] = {
		512 * RDMA_KiB, RDMA_MiB, RDMA_MiB + 123, 600000, 250000,
		100000, 3000, 100, 1, 0, 5, 70000, 300007, 5001, 777777,
		4096, 200000, 40000, 1048576, 8191,
	};
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++)
		resize_and_check(&bc, sizes[i]);
	/* Up and down across the quarter mark, ten times. */
	for (unsigned int j = 0; j < 10; j++) {
		resize_and_check(&bc, 300000 + 7 * j);
		resize_and_check(&bc, 5000 + j);
	}

	struct mrmgr_stats s = rxe_stats(c);
	log_stats("growable buffer", c);
	cr_log_info("buffer: %u resizes, %u capacity changes, %u moves",
		    bc.resizes, bc.cap_changes, bc.moves);
	cr_assert_gt(bc.cap_changes, 20);
	cr_assert_eq(s.registrations + s.rereg_successes, 1 + bc.cap_changes,
		     "one registration change per capacity change");
	cr_assert_eq(s.regions, 1);
	cr_assert_eq(s.regions_in_use, 1);
	if (rxe) {
		cr_assert_eq(s.rereg_attempts, 0);
		cr_assert_eq(s.rereg_fallback_unsupported, bc.cap_changes);
		cr_assert_eq(s.registrations, 1 + bc.cap_changes);
		cr_assert_eq(s.deregistrations, bc.cap_changes);
	}

	cr_assert_eq(mrmgr_buf_destroy(b), 0);
	s = rxe_stats(c);
	cr_assert_eq(s.regions, 0, "destroy leaves nothing registered");
	cr_assert_eq(s.deregistrations, s.registrations);
	cr_assert_eq(mrmgr_cache_destroy(c), 0);
	io_close(&io);
	rdma_fixture_close(&f);
	if (wall != MAP_FAILED)
		munmap(wall, PG);
	free(bc.shadow);
}

/* ------------------------------------------------------------ PD move */

Test(rxe_growth, move_pd_to_a_second_pd)
{
	struct rdma_fixture f;
	const size_t len = 64 * RDMA_KiB, blen = 100 * RDMA_KiB;
	/* A gap between them, or the second get would merge the two. */
	char *map = rdma_map(3 * len, 0), *idle = map, *held = map + 2 * len;
	struct io io1, io2;
	mrmgr_buf_t *b;

	rdma_fixture_open(&f, RDMA_FX_PD2);
	int rxe = rdma_fixture_is_rxe(&f);
	mrmgr_cache_t *c = rxe_cache(&f, 0, 0, 0);
	io_open(&io1, &f, f.pd, blen);
	io_open(&io2, &f, f.pd2, blen);
	if (rxe)
		cr_assert_eq(rxe_stats(c).rereg_probes +
				     rxe_stats(io1.cache).rereg_probes +
				     rxe_stats(io2.cache).rereg_probes,
			     1, "one probe for the device, whatever the PD");

	/* Before: an idle cached region, a held one, a buffer; all in pd. */
	mrmgr_region_t *ri = rxe_get(c, idle, len, RXE_RW);
	write_read(&io1, idle, mrmgr_region_rkey(ri), len, 1, 1,
		   "idle region in the first PD");
	mrmgr_put(ri);
	mrmgr_region_t *rh = rxe_get(c, held, len, RXE_RW);
	uint32_t held_rkey = mrmgr_region_rkey(rh);
	cr_assert_eq(mrmgr_buf_create(c, blen, RXE_RW, &b), 0);
	char *data = mrmgr_buf_data(b);
	write_read(&io1, data, mrmgr_buf_rkey(b), blen, 2, 1,
		   "buffer in the first PD");
	char *shadow = malloc(blen);
	cr_assert_not_null(shadow);
	memcpy(shadow, data, blen);
	uint64_t gen = mrmgr_buf_generation(b);
	uint32_t old_buf_rkey = mrmgr_buf_rkey(b);
	struct mrmgr_stats s0 = rxe_stats(c);

	cr_assert_eq(mrmgr_cache_move_pd(c, f.pd2), 0);

	struct mrmgr_stats s = rxe_stats(c);
	cr_assert_eq(s.make_before_break - s0.make_before_break, 1,
		     "the held region stays with its holder");
	if (rxe) {
		cr_assert_eq(s.rereg_attempts, 0);
		cr_assert_eq(s.rereg_fallback_unsupported -
				     s0.rereg_fallback_unsupported,
			     2, "the idle region and the buffer");
	}

	/* The buffer followed at once: same memory, new PD. */
	cr_assert_eq(mrmgr_buf_data(b), (void *)data);
	cr_assert_eq(mrmgr_buf_mr(b)->pd, f.pd2);
	cr_assert_neq(mrmgr_buf_generation(b), gen);
	same(data, shadow, blen, 1, "buffer contents after the PD move");
	write_read(&io2, data, mrmgr_buf_rkey(b), blen, 3, 1,
		   "buffer after the move, over the second PD's QPs");
	/* The device keeps PDs apart: the first PD's QPs cannot reach it. */
	write_refused(&io1, data, mrmgr_buf_rkey(b), PG, 1,
		      "the moved buffer's rkey from the first PD's QPs");
	if (old_buf_rkey != mrmgr_buf_rkey(b))
		write_refused(&io1, data, old_buf_rkey, PG, 1,
			      "the buffer's rkey before the move");

	/* The held region still works in the old PD, until its put. */
	cr_assert_eq(mrmgr_region_mr(rh)->pd, f.pd);
	write_read(&io1, held, held_rkey, len, 4, 1,
		   "held region, still in the first PD");
	mrmgr_put(rh);
	write_refused(&io1, held, held_rkey, len, 1,
		      "the held region's rkey after its last put");

	/* The next gets register in the new PD. */
	ri = rxe_get(c, idle, len, RXE_RW);
	cr_assert_eq(mrmgr_region_mr(ri)->pd, f.pd2);
	write_read(&io2, idle, mrmgr_region_rkey(ri), len, 5, 1,
		   "idle region got again, over the second PD's QPs");
	mrmgr_put(ri);
	rh = rxe_get(c, held, len, RXE_RW);
	cr_assert_eq(mrmgr_region_mr(rh)->pd, f.pd2);
	write_read(&io2, held, mrmgr_region_rkey(rh), len, 6, 1,
		   "held region got again, over the second PD's QPs");
	mrmgr_put(rh);

	log_stats("PD move", c);
	s = rxe_stats(c);
	cr_assert_eq(s.regions, 3);
	cr_assert_eq(s.regions_in_use, 1, "the buffer's");
	cr_assert_eq(mrmgr_buf_destroy(b), 0);
	cr_assert_eq(mrmgr_cache_destroy(c), 0);
	io_close(&io1);
	io_close(&io2);
	rdma_fixture_close(&f); /* both PDs free of MRs */
	free(shadow);
	munmap(map, 3 * len);
}
