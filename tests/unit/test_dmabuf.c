/*
 * Kind two, dma-buf (lib/kinds/dmabuf.c, lib/core/kind_dmabuf.c) on the
 * simulated HCA, memfds as the buffers: hit, miss, eviction, the key is
 * the buffer's identity and not the descriptor number, the cache's
 * duplicate closed at eviction and destroy, failures that leave no
 * descriptor behind (the process's descriptors counted around every
 * path), rxe's EOPNOTSUPP, an injected device fault, handles, and a
 * two-thread allocate/free/reuse torture that reads each buffer's own
 * signature through the MR it was handed (0 stale; it caught a slot
 * given back under a live region when a deregistered MR's address came
 * back at once for another buffer).
 *
 * SPDX-License-Identifier: MIT
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

#include "helpers.h"

#define BUF (256 * KiB)

/*
 * The process's descriptors of the test's buffers (the simulated HCA
 * holds other descriptors of its own per MR: its pins, sim_access.c).
 * all: every descriptor instead, for the counts around a whole test.
 */
static int count_any(int all)
{
	return count_fds_to(all ? NULL : "mrmgr-test-dmabuf");
}

static int count_fds(void)
{
	return count_any(0);
}

static int new_buf(uint64_t sig)
{
	int fd = memfd_create("mrmgr-test-dmabuf", MFD_CLOEXEC);

	cr_assert_geq(fd, 0);
	cr_assert_eq(ftruncate(fd, BUF), 0);
	cr_assert_eq(pwrite(fd, &sig, sizeof(sig), 0), (ssize_t)sizeof(sig));
	return fd;
}

static void open_dmabuf(struct fixture *f, const struct mrmgr_sim_attr *sa,
			const struct mrmgr_cache_attr *ca)
{
	memset(f, 0, sizeof(*f));
	cr_assert_eq(mrmgr_sim_open(sa, &f->ctx), 0);
	cr_assert_eq(mrmgr_sim_alloc_pd(f->ctx, &f->pd), 0);
	cr_assert_eq(mrmgr_cache_create_dmabuf(f->pd, ca, &f->cache), 0);
}

static struct mrmgr_dmabuf_attr at(int fd, uint64_t off, uint64_t len)
{
	return (struct mrmgr_dmabuf_attr){ .fd = fd, .offset = off,
					   .length = len, .access = RW };
}

/* Every descriptor once the process-wide ones exist (the simulated
 * HCA's pagemap reader, opened at its first registration): one
 * registration made and dropped first. */
static int settled(void)
{
	struct fixture f;
	struct mrmgr_dmabuf_attr a;
	mrmgr_region_t *r;
	int fd = new_buf(0);

	open_dmabuf(&f, NULL, NULL);
	a = at(fd, 0, 4 * KiB);
	cr_assert_eq(mrmgr_get_dmabuf(f.cache, &a, &r), 0);
	mrmgr_put(r);
	fx_close(&f);
	close(fd);
	return count_any(1);
}

/* What the MR reads at buffer offset 0 (the sim's MR address is its
 * mapping of the buffer). */
static uint64_t sig_of(mrmgr_region_t *r)
{
	uint64_t off;

	cr_assert_eq(mrmgr_region_dmabuf_offset(r, &off), 0);
	cr_assert_eq(off, 0);
	return *(volatile uint64_t *)(uintptr_t)mrmgr_region_mr(r)->addr;
}

Test(dmabuf, hit_miss_and_the_duplicate)
{
	struct fixture f;
	int pre = settled(), base, fd, fd2;
	mrmgr_region_t *r1, *r2, *r3;
	struct mrmgr_dmabuf_attr a;
	uint64_t off;

	open_dmabuf(&f, NULL, NULL);
	base = count_fds();
	fd = new_buf(0x1111);
	a = at(fd, 0, 64 * KiB);
	cr_assert_eq(mrmgr_get_dmabuf(f.cache, &a, &r1), 0);
	cr_assert_eq(count_fds(), base + 2, "the cache holds one duplicate");
	cr_assert_eq(sig_of(r1), 0x1111);
	a = at(fd, 4 * KiB, 4 * KiB);
	cr_assert_eq(mrmgr_get_dmabuf(f.cache, &a, &r2), 0);
	cr_assert_eq(r2, r1, "inside the cached range: a hit");
	/* Another descriptor of the same buffer: the same entry. */
	fd2 = dup(fd);
	a = at(fd2, 0, 8 * KiB);
	cr_assert_eq(mrmgr_get_dmabuf(f.cache, &a, &r3), 0);
	cr_assert_eq(r3, r1);
	cr_assert_eq(cstats(f.cache).misses, 1);
	cr_assert_eq(cstats(f.cache).hits, 2);
	cr_assert_eq(count_fds(), base + 3);
	/* A range past the cached one: a miss, merged within the buffer. */
	mrmgr_put(r3);
	mrmgr_put(r2);
	a = at(fd, 128 * KiB, 4 * KiB);
	cr_assert_eq(mrmgr_get_dmabuf(f.cache, &a, &r2), 0);
	cr_assert_eq(mrmgr_region_dmabuf_offset(r2, &off), 0);
	cr_assert_leq(off, 128 * KiB);
	mrmgr_put(r2);
	mrmgr_put(r1);
	close(fd2);
	close(fd);
	/* The caller's descriptors are closed: the cache's duplicate
	 * lives while its entries do. */
	cr_assert_eq(count_fds(), base + 1);
	fx_close(&f);
	cr_assert_eq(count_any(1), pre, "every duplicate closed");
}

Test(dmabuf, key_is_the_buffer_not_the_number)
{
	struct fixture f;
	mrmgr_region_t *r1, *r2;
	struct mrmgr_dmabuf_attr a;
	int pre = settled(), base, fd, fd_again;

	open_dmabuf(&f, NULL, NULL);
	base = count_fds();
	fd = new_buf(0xaaaa);
	a = at(fd, 0, 4 * KiB);
	cr_assert_eq(mrmgr_get_dmabuf(f.cache, &a, &r1), 0);
	mrmgr_put(r1); /* stays cached */
	close(fd);
	fd_again = new_buf(0xbbbb); /* the lowest number: fd's */
	cr_assert_eq(fd_again, fd);
	a = at(fd_again, 0, 4 * KiB);
	cr_assert_eq(mrmgr_get_dmabuf(f.cache, &a, &r2), 0);
	cr_assert_neq(r2, r1, "another buffer behind the same number");
	cr_assert_eq(sig_of(r2), 0xbbbb, "0 stale");
	cr_assert_eq(cstats(f.cache).misses, 2);
	mrmgr_put(r2);
	close(fd_again);
	cr_assert_eq(count_fds(), base + 2, "one duplicate per cached buffer");
	fx_close(&f);
	cr_assert_eq(count_any(1), pre);
}

Test(dmabuf, eviction_closes_the_duplicate)
{
	struct mrmgr_cache_attr ca = {
		.comp_mask = MRMGR_CACHE_ATTR_MAX_REGIONS, .max_regions = 1 };
	struct fixture f;
	mrmgr_region_t *r;
	struct mrmgr_dmabuf_attr a;
	int pre = settled(), base, fa, fb;

	open_dmabuf(&f, NULL, &ca);
	base = count_fds();
	fa = new_buf(1);
	fb = new_buf(2);
	a = at(fa, 0, 4 * KiB);
	cr_assert_eq(mrmgr_get_dmabuf(f.cache, &a, &r), 0);
	mrmgr_put(r);
	cr_assert_eq(count_fds(), base + 3);
	a = at(fb, 0, 4 * KiB);
	cr_assert_eq(mrmgr_get_dmabuf(f.cache, &a, &r), 0);
	cr_assert_eq(sig_of(r), 2);
	mrmgr_put(r);
	cr_assert_geq(cstats(f.cache).evictions, 1);
	cr_assert_eq(count_fds(), base + 3, "a's duplicate closed, b's held");
	close(fa);
	close(fb);
	fx_close(&f);
	cr_assert_eq(count_any(1), pre);
}

Test(dmabuf, failures_leave_no_descriptor)
{
	struct fixture f, host;
	struct mrmgr_sim_fault fault = { .op = MRMGR_SIM_OP_REG, .err = ENOMEM,
					 .nth = 1, .count = 0 };
	mrmgr_region_t *r = NULL;
	struct mrmgr_dmabuf_attr a;
	int pre = settled(), base, fd, dead;
	char *p;

	open_dmabuf(&f, NULL, NULL);
	fx_open(&host, NULL, NULL);
	base = count_fds();
	fd = new_buf(7);
	dead = new_buf(8);
	close(dead);
	a = at(dead, 0, 4 * KiB);
	cr_assert_eq(mrmgr_get_dmabuf(f.cache, &a, &r), EBADF);
	a = at(fd, BUF - 4 * KiB, 8 * KiB);
	cr_assert_eq(mrmgr_get_dmabuf(f.cache, &a, &r), EINVAL, "past the end");
	a = at(fd, 0, 0);
	cr_assert_eq(mrmgr_get_dmabuf(f.cache, &a, &r), EINVAL);
	a = at(fd, 0, 4 * KiB);
	a.comp_mask = 1;
	cr_assert_eq(mrmgr_get_dmabuf(f.cache, &a, &r), EINVAL);
	a.comp_mask = 0;
	cr_assert_eq(mrmgr_get_dmabuf(host.cache, &a, &r), EINVAL,
		     "a host cache");
	p = map_rw(4 * KiB, 1);
	cr_assert_eq(mrmgr_get(f.cache, p, 4 * KiB, RW, &r), EINVAL,
		     "a host address in a dma-buf cache");
	munmap(p, 4 * KiB);
	/* The device fails every registration: no entry, no duplicate. */
	cr_assert_eq(mrmgr_sim_inject_fault(f.ctx, &fault), 0);
	cr_assert_eq(mrmgr_get_dmabuf(f.cache, &a, &r), ENOMEM);
	cr_assert_eq(mrmgr_sim_clear_faults(f.ctx), 0);
	cr_assert_eq(count_fds(), base + 1, "only the test's own buffer");
	cr_assert_eq(mrmgr_get_dmabuf(f.cache, &a, &r), 0, "works again");
	mrmgr_put(r);
	close(fd);
	fx_close(&host);
	fx_close(&f);
	cr_assert_eq(count_any(1), pre);
}

Test(dmabuf, rxe_refuses_with_eopnotsupp)
{
	struct mrmgr_sim_attr sa = { .comp_mask = MRMGR_SIM_ATTR_PERSONALITY,
				     .personality = MRMGR_SIM_RXE };
	struct fixture f;
	mrmgr_region_t *r;
	struct mrmgr_dmabuf_attr a;
	int pre = settled(), base, fd;

	open_dmabuf(&f, &sa, NULL);
	base = count_fds();
	fd = new_buf(9);
	a = at(fd, 0, 4 * KiB);
	cr_assert_eq(mrmgr_get_dmabuf(f.cache, &a, &r), EOPNOTSUPP);
	close(fd);
	cr_assert_eq(count_fds(), base);
	fx_close(&f);
	cr_assert_eq(count_any(1), pre);
}

Test(dmabuf, a_handle_gets_without_the_callers_fd)
{
	struct fixture f;
	mrmgr_dmabuf_t *h;
	mrmgr_region_t *r1, *r2;
	struct mrmgr_dmabuf_attr a;
	int pre = settled(), base, fd;

	open_dmabuf(&f, NULL, NULL);
	base = count_fds();
	fd = new_buf(0x5151);
	cr_assert_eq(mrmgr_dmabuf_open(f.cache, fd, &h), 0);
	cr_assert_eq(count_fds(), base + 2, "the handle holds the duplicate");
	a = at(fd, 0, 16 * KiB);
	cr_assert_eq(mrmgr_get_dmabuf(f.cache, &a, &r1), 0);
	close(fd); /* the handle does not need it */
	cr_assert_eq(mrmgr_get_dmabuf_at(h, 4 * KiB, 4 * KiB, RW, &r2), 0);
	cr_assert_eq(r2, r1, "by handle and by descriptor: one entry");
	cr_assert_eq(sig_of(r2), 0x5151);
	cr_assert_eq(mrmgr_get_dmabuf_at(h, BUF - 4 * KiB, 8 * KiB, RW, &r2),
		     EINVAL, "past the end");
	cr_assert_eq(mrmgr_get_dmabuf_at(h, 0, 0, RW, &r2), EINVAL);
	mrmgr_put(r1);
	mrmgr_put(r1);
	cr_assert_eq(mrmgr_cache_destroy(f.cache), EBUSY, "a handle is open");
	cr_assert_eq(mrmgr_dmabuf_close(h), 0);
	cr_assert_eq(count_fds(), base + 1, "the entry still holds it");
	fx_close(&f);
	cr_assert_eq(count_any(1), pre);
}

Test(dmabuf, a_handle_without_entries_closes_its_duplicate)
{
	struct fixture f;
	mrmgr_dmabuf_t *h;
	int base, fd;

	open_dmabuf(&f, NULL, NULL);
	base = count_fds();
	fd = new_buf(1);
	cr_assert_eq(mrmgr_dmabuf_open(f.cache, fd, &h), 0);
	cr_assert_eq(mrmgr_dmabuf_close(h), 0);
	cr_assert_eq(count_fds(), base + 1, "only the test's own");
	close(fd);
	cr_assert_eq(mrmgr_dmabuf_open(f.cache, fd, &h), EBADF);
	cr_assert_eq(count_fds(), base);
	fx_close(&f);
}

/* ---------------------------------------------------------- torture */

struct torture {
	mrmgr_cache_t *cache;
	unsigned int seed;
	uint64_t stale, done;
};

static void *churn(void *arg)
{
	struct torture *t = arg;

	for (int i = 0; i < 400; i++) {
		uint64_t sig = ((uint64_t)t->seed << 32) | (uint64_t)i;
		int fd = new_buf(sig);
		struct mrmgr_dmabuf_attr a = at(fd, 0, 16 * KiB);
		mrmgr_region_t *r;

		cr_assert_eq(mrmgr_get_dmabuf(t->cache, &a, &r), 0);
		if (*(volatile uint64_t *)(uintptr_t)mrmgr_region_mr(r)->addr != sig)
			t->stale++;
		/* Keep some cached past the close: the number is reused by
		 * the next buffer, of this thread or the other. */
		mrmgr_put(r);
		close(fd);
		t->done++;
	}
	return NULL;
}

Test(dmabuf, two_thread_reuse_torture)
{
	struct mrmgr_cache_attr ca = {
		.comp_mask = MRMGR_CACHE_ATTR_MAX_REGIONS, .max_regions = 8 };
	struct torture t[2] = { { .seed = 1 }, { .seed = 2 } };
	pthread_t th[2];
	struct fixture f;
	int pre = settled(), base;

	open_dmabuf(&f, NULL, &ca);
	base = count_fds();
	for (int i = 0; i < 2; i++) {
		t[i].cache = f.cache;
		cr_assert_eq(pthread_create(&th[i], NULL, churn, &t[i]), 0);
	}
	for (int i = 0; i < 2; i++)
		pthread_join(th[i], NULL);
	cr_assert_eq(t[0].stale + t[1].stale, 0, "stale hits");
	cr_assert_eq(t[0].done + t[1].done, 800);
	cr_assert_leq(count_fds(), base + 8, "at most one per cached entry");
	fx_close(&f);
	cr_assert_eq(count_any(1), pre, "0 leaked descriptors");
}

/*
 * Four threads, each its own buffer at four offsets, a cache of two
 * entries: nearly every get registers one MR and evicts (deregisters)
 * another thread's, so a deregistered MR's memory comes straight back as
 * a new MR elsewhere. Each MR must still read its own buffer. The
 * simulated HCA looked up a dma-buf MR's mapping by the MR's address
 * after deregistering it, and unmapped the new MR's mapping instead: a
 * crash, or a read of another buffer mapped where it had been (the
 * device-VA torture found it 1 run in ~150 under load; this, 4 x 3,000
 * gets, crashed 10 runs of 10 before the fix).
 */
struct own {
	mrmgr_cache_t *cache;
	int fd;
	uint64_t sig, wrong, done;
};

static void *own_buffer(void *arg)
{
	struct own *o = arg;

	for (int i = 0; i < 3000; i++) {
		struct mrmgr_dmabuf_attr a = at(o->fd, (uint64_t)(i & 3) * 64 * KiB,
						 64 * KiB);
		mrmgr_region_t *r;
		uint64_t off;

		cr_assert_eq(mrmgr_get_dmabuf(o->cache, &a, &r), 0);
		/* A hit may be a wider registration: where a.offset is in it. */
		cr_assert_eq(mrmgr_region_dmabuf_offset(r, &off), 0);
		cr_assert_leq(off, a.offset);
		if (*(volatile uint64_t *)((uintptr_t)mrmgr_region_mr(r)->addr +
					   (a.offset - off)) !=
		    o->sig + (uint64_t)(i & 3))
			o->wrong++;
		mrmgr_put(r);
		o->done++;
	}
	return NULL;
}

Test(dmabuf, four_threads_churn_each_reads_its_own)
{
	struct mrmgr_cache_attr ca = {
		.comp_mask = MRMGR_CACHE_ATTR_MAX_REGIONS, .max_regions = 2 };
	struct own o[4];
	pthread_t th[4];
	struct fixture f;
	uint64_t wrong = 0, done = 0;

	open_dmabuf(&f, NULL, &ca);
	for (int i = 0; i < 4; i++) {
		o[i] = (struct own){ .cache = f.cache, .sig = (uint64_t)(i + 1) << 32 };
		o[i].fd = new_buf(0);
		for (uint64_t q = 0; q < 4; q++) {
			uint64_t s = o[i].sig + q;

			cr_assert_eq(pwrite(o[i].fd, &s, sizeof(s),
					    (off_t)(q * 64 * KiB)),
				     (ssize_t)sizeof(s));
		}
	}
	for (int i = 0; i < 4; i++)
		cr_assert_eq(pthread_create(&th[i], NULL, own_buffer, &o[i]), 0);
	for (int i = 0; i < 4; i++) {
		pthread_join(th[i], NULL);
		wrong += o[i].wrong;
		done += o[i].done;
		close(o[i].fd);
	}
	cr_assert_eq(wrong, 0, "%llu gets read another buffer",
		     (unsigned long long)wrong);
	cr_assert_eq(done, 12000);
	fx_close(&f);
}
