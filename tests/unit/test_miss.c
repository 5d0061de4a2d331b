/*
 * The miss path with the cache lock released while registering
 * (lib/core/cache.c, "registering without the lock"): other ranges go
 * ahead, the same range waits and is registered once, an invalidation of
 * a registration under way is honoured, eviction's deregistrations leave
 * the lock too.
 *
 * The lock is released only once a second thread has taken it (miss.c):
 * a cache only one thread has locked keeps it while registering. The
 * tests whose registering getter would be the first locker take the lock
 * in the test's thread first (locked_here_first()).
 *
 * The tests wrap the cache's device operations so that a chosen registration or
 * deregistration blocks until the test lets it go: what must happen while
 * it is blocked either happens (the test goes on) or deadlocks (the
 * test's timeout fails it). No timing is asserted.
 *
 * SPDX-License-Identifier: MIT
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <semaphore.h>
#include <unistd.h>

#include "getter.h"
#include "helpers.h"

#include "cache.h"

static struct gate {
	const struct mrmgr_device_ops *real;
	struct mrmgr_device_ops ops;
	uint64_t addr;      /* reg_mr of this address blocks... */
	void *dereg_addr;   /* ...or dereg_mr of an MR at this one */
	sem_t entered;      /* posted when the call blocks */
	sem_t release;      /* the test posts it to let the call go */
	int calls;          /* reg_mr calls at addr */
	int armed;          /* block the next matching call only */
	pthread_mutex_t mu;
} g;

static int gate_reg(struct ibv_pd *pd, void *addr, size_t length, int access,
		    struct ibv_mr **mr)
{
	int block = 0;

	pthread_mutex_lock(&g.mu);
	if ((uint64_t)(uintptr_t)addr == g.addr) {
		g.calls++;
		block = g.armed;
		g.armed = 0;
	}
	pthread_mutex_unlock(&g.mu);
	if (block) {
		sem_post(&g.entered);
		sem_wait(&g.release);
	}
	return g.real->reg_mr(pd, addr, length, access, mr);
}

static int gate_dereg(struct ibv_mr *mr)
{
	int block = 0;

	pthread_mutex_lock(&g.mu);
	if (g.dereg_addr && mr->addr == g.dereg_addr) {
		block = 1;
		g.dereg_addr = NULL;
	}
	pthread_mutex_unlock(&g.mu);
	if (block) {
		sem_post(&g.entered);
		sem_wait(&g.release);
	}
	return g.real->dereg_mr(mr);
}

static void gate_install(mrmgr_cache_t *c)
{
	memset(&g, 0, sizeof(g));
	pthread_mutex_init(&g.mu, NULL);
	sem_init(&g.entered, 0, 0);
	sem_init(&g.release, 0, 0);
	g.real = c->ops;
	g.ops = *c->ops;
	g.ops.reg_mr = gate_reg;
	g.ops.dereg_mr = gate_dereg;
	c->ops = &g.ops;
}

static void gate_remove(mrmgr_cache_t *c)
{
	c->ops = g.real;
	sem_destroy(&g.entered);
	sem_destroy(&g.release);
	pthread_mutex_destroy(&g.mu);
}

static void gate_arm(void *addr)
{
	pthread_mutex_lock(&g.mu);
	g.addr = (uint64_t)(uintptr_t)addr;
	g.calls = 0;
	g.armed = 1;
	pthread_mutex_unlock(&g.mu);
}

static struct mrmgr_cache_attr attr(uint64_t max_regions, uint32_t monitor)
{
	struct mrmgr_cache_attr a = {
		.comp_mask = MRMGR_CACHE_ATTR_MAX_REGIONS |
			     MRMGR_CACHE_ATTR_FLAGS | MRMGR_CACHE_ATTR_MONITOR,
		.max_regions = max_regions,
		.flags = MRMGR_CACHE_NO_MERGE,
		.monitor = monitor,
	};

	return a;
}

static int is_cached(mrmgr_cache_t *c, void *p)
{
	uint64_t a = (uint64_t)(uintptr_t)p;
	int in;

	pthread_mutex_lock(&c->lock);
	in = mrmgr__itree_first_overlap(mrmgr__cache_tree(c), a, a) != NULL;
	pthread_mutex_unlock(&c->lock);
	return in;
}

/*
 * The cache lock taken in this thread first (the statistics take it): a
 * getter's miss is then a second thread's, registered with the lock
 * released. Without it the getter, first to lock, keeps the lock while
 * it registers and the test's own calls would wait for it.
 */
static void locked_here_first(mrmgr_cache_t *c)
{
	(void)cstats(c);
	cr_assert_eq(c->lockers, MRMGR__LOCKER_ONE);
}

/* While one registration is under way, misses on other ranges, hits and
 * puts go ahead (under the lock they would wait: the test would hang). */
Test(miss, other_ranges_proceed_during_a_registration, .timeout = 60)
{
	struct fixture f;
	struct mrmgr_cache_attr a = attr(100, MRMGR_MONITOR_EXTERNAL);
	char *buf = map_rw(16 * 64 * KiB, 0);
	struct getter x;
	mrmgr_region_t *r;

	fx_open(&f, NULL, &a);
	gate_install(f.cache);
	cr_assert_eq(mrmgr_get(f.cache, buf + 2 * 64 * KiB, 4 * KiB, RW, &r), 0);
	mrmgr_put(r);
	gate_arm(buf);
	getter_start(&x, f.cache, buf, 64 * KiB);
	sem_wait(&g.entered); /* x is inside its registration */
	for (int i = 4; i < 12; i++) {
		cr_assert_eq(mrmgr_get(f.cache, buf + (size_t)i * 64 * KiB,
				       4 * KiB, RW, &r), 0);
		mrmgr_put(r);
	}
	cr_assert_eq(mrmgr_get(f.cache, buf + 2 * 64 * KiB, 4 * KiB, RW, &r), 0);
	mrmgr_put(r);
	cr_assert_not(is_cached(f.cache, buf), "not published yet");
	sem_post(&g.release);
	getter_join(&x);
	cr_assert(is_cached(f.cache, buf));
	mrmgr_put(x.r);
	cr_assert_eq(cstats(f.cache).registrations, 10);
	gate_remove(f.cache);
	fx_close(&f);
	munmap(buf, 16 * 64 * KiB);
}

/* Until n threads wait for a registration under way: each counts itself
 * under the lock, then sleeps on the condition, which releases the lock,
 * so the count read under the lock is of threads already waiting. No
 * time bound: the test's .timeout catches a thread that never waits. */
static void wait_for_waiters(mrmgr_cache_t *c, unsigned int n)
{
	for (;;) {
		unsigned int w;

		pthread_mutex_lock(&c->lock);
		w = c->inflight_waiters;
		pthread_mutex_unlock(&c->lock);
		if (w >= n)
			return;
		sched_yield();
	}
}

/* Two threads missing on one range, and one on an overlapping range, make
 * one registration: the later ones wait for the first and hit. */
Test(miss, same_range_registers_once, .timeout = 60)
{
	struct fixture f;
	struct mrmgr_cache_attr a = attr(100, MRMGR_MONITOR_EXTERNAL);
	char *buf = map_rw(4 * 64 * KiB, 0);
	struct getter x, y, z;

	fx_open(&f, NULL, &a);
	locked_here_first(f.cache);
	gate_install(f.cache);
	gate_arm(buf);
	getter_start(&x, f.cache, buf, 64 * KiB);
	sem_wait(&g.entered);
	getter_start(&y, f.cache, buf, 64 * KiB);
	getter_start(&z, f.cache, buf + 16 * KiB, 4 * KiB);
	/* Both wait for x's registration before it ends (once, a sleep
	 * here hoped they would, and the test passed without testing the
	 * wait when they came late). */
	wait_for_waiters(f.cache, 2);
	sem_post(&g.release);
	getter_join(&x);
	getter_join(&y);
	getter_join(&z);
	cr_assert_eq(g.calls, 1, "one registration of the range, not %d",
		     g.calls);
	cr_assert_eq(x.r, y.r);
	cr_assert_eq(x.r, z.r);
	cr_assert_eq(cstats(f.cache).registrations, 1);
	mrmgr_put(x.r);
	mrmgr_put(y.r);
	mrmgr_put(z.r);
	gate_remove(f.cache);
	fx_close(&f);
	munmap(buf, 4 * 64 * KiB);
}

/* mrmgr_invalidate() of a range whose registration is under way returns
 * at once (no lock held), and the registration is not cached. */
Test(miss, invalidate_during_registration_is_honoured, .timeout = 60)
{
	struct fixture f;
	struct mrmgr_cache_attr a = attr(100, MRMGR_MONITOR_EXTERNAL);
	char *buf = map_rw(4 * 64 * KiB, 0);
	struct getter x;
	mrmgr_region_t *r;

	fx_open(&f, NULL, &a);
	locked_here_first(f.cache);
	gate_install(f.cache);
	gate_arm(buf);
	getter_start(&x, f.cache, buf, 64 * KiB);
	sem_wait(&g.entered);
	cr_assert_eq(mrmgr_invalidate(f.cache, buf + 8 * KiB, 4 * KiB), 0);
	sem_post(&g.release);
	getter_join(&x);
	cr_assert_not(is_cached(f.cache, buf), "registered before the "
					       "invalidation: not cached");
	cr_assert_eq(cstats(f.cache).uncached, 1);
	mrmgr_put(x.r);
	/* The next get registers anew and caches. */
	cr_assert_eq(mrmgr_get(f.cache, buf, 64 * KiB, RW, &r), 0);
	cr_assert(is_cached(f.cache, buf));
	mrmgr_put(r);
	cr_assert_eq(cstats(f.cache).registrations, 2);
	gate_remove(f.cache);
	fx_close(&f);
	munmap(buf, 4 * 64 * KiB);
}

/* The same for a memory event (mrmgr_notify_unmap() feeds the monitor's
 * queue, drained by the registering miss when it comes back). */
Test(miss, memory_event_during_registration_is_honoured, .timeout = 60)
{
	struct fixture f;
	struct mrmgr_cache_attr a = attr(100, MRMGR_MONITOR_EXTERNAL);
	char *buf = map_rw(4 * 64 * KiB, 0);
	struct getter x;

	fx_open(&f, NULL, &a);
	locked_here_first(f.cache);
	gate_install(f.cache);
	gate_arm(buf);
	getter_start(&x, f.cache, buf, 64 * KiB);
	sem_wait(&g.entered);
	mrmgr_notify_unmap(buf + 8 * KiB, 4 * KiB);
	sem_post(&g.release);
	getter_join(&x);
	cr_assert_not(is_cached(f.cache, buf));
	cr_assert_eq(cstats(f.cache).uncached, 1);
	mrmgr_put(x.r);
	gate_remove(f.cache);
	fx_close(&f);
	munmap(buf, 4 * 64 * KiB);
}

/* A miss that evicts deregisters with the lock released: other misses go
 * ahead while the deregistration is under way. */
Test(miss, eviction_deregisters_outside_the_lock, .timeout = 60)
{
	struct fixture f;
	struct mrmgr_cache_attr a = attr(2, MRMGR_MONITOR_EXTERNAL);
	char *buf = map_rw(16 * 64 * KiB, 0);
	struct getter x;
	mrmgr_region_t *r;

	fx_open(&f, NULL, &a);
	gate_install(f.cache);
	for (int i = 0; i < 2; i++) {
		cr_assert_eq(mrmgr_get(f.cache, buf + (size_t)i * 64 * KiB,
				       4 * KiB, RW, &r), 0);
		mrmgr_put(r);
	}
	/* The next miss evicts the oldest (buf): its deregistration blocks. */
	pthread_mutex_lock(&g.mu);
	g.dereg_addr = buf;
	pthread_mutex_unlock(&g.mu);
	getter_start(&x, f.cache, buf + 4 * 64 * KiB, 4 * KiB);
	sem_wait(&g.entered);
	cr_assert_eq(mrmgr_get(f.cache, buf + 64 * KiB, 4 * KiB, RW, &r), 0);
	mrmgr_put(r); /* a hit */
	cr_assert_eq(mrmgr_get(f.cache, buf + 8 * 64 * KiB, 4 * KiB, RW, &r),
		     0); /* a miss, evicting too */
	mrmgr_put(r);
	sem_post(&g.release);
	getter_join(&x);
	mrmgr_put(x.r);
	struct mrmgr_stats s = cstats(f.cache);

	cr_assert_eq(s.evictions, 2);
	cr_assert_leq(s.regions, 2);
	cr_assert_eq(s.deregistrations, 2);
	gate_remove(f.cache);
	fx_close(&f);
	munmap(buf, 16 * 64 * KiB);
}

/*
 * A cache only one thread has locked keeps the lock while it registers
 * (nobody could go ahead); the first time a second thread takes it, the
 * cache counts two lockers for good and later misses release it: a
 * registration under way then leaves it free, and other misses proceed.
 */
Test(miss, the_lock_is_kept_until_a_second_thread_takes_it, .timeout = 60)
{
	struct fixture f;
	struct mrmgr_cache_attr a = attr(100, MRMGR_MONITOR_EXTERNAL);
	char *buf = map_rw(8 * 64 * KiB, 0);
	struct getter x, y;
	mrmgr_region_t *r;

	fx_open(&f, NULL, &a);
	gate_install(f.cache);
	cr_assert_eq(f.cache->lockers, MRMGR__LOCKER_NONE);
	/* x alone locks the cache: its registration keeps the lock. */
	gate_arm(buf);
	getter_start(&x, f.cache, buf, 64 * KiB);
	sem_wait(&g.entered);
	cr_assert_eq(pthread_mutex_trylock(&f.cache->lock), EBUSY,
		     "one locker: the lock is kept while registering");
	sem_post(&g.release);
	getter_join(&x);
	cr_assert_eq(f.cache->lockers, MRMGR__LOCKER_ONE);
	cr_assert(is_cached(f.cache, buf));
	mrmgr_put(x.r);
	/* This thread's miss is the second locker's. */
	cr_assert_eq(mrmgr_get(f.cache, buf + 2 * 64 * KiB, 4 * KiB, RW, &r), 0);
	mrmgr_put(r);
	cr_assert_eq(f.cache->lockers, MRMGR__LOCKER_MANY);
	/* From now on a registration under way leaves the lock free. */
	gate_arm(buf + 4 * 64 * KiB);
	getter_start(&y, f.cache, buf + 4 * 64 * KiB, 64 * KiB);
	sem_wait(&g.entered);
	cr_assert_eq(pthread_mutex_trylock(&f.cache->lock), 0,
		     "two lockers: the lock is released while registering");
	pthread_mutex_unlock(&f.cache->lock);
	cr_assert_eq(mrmgr_get(f.cache, buf + 6 * 64 * KiB, 4 * KiB, RW, &r), 0);
	mrmgr_put(r);
	sem_post(&g.release);
	getter_join(&y);
	cr_assert(is_cached(f.cache, buf + 4 * 64 * KiB));
	mrmgr_put(y.r);
	cr_assert_eq(cstats(f.cache).registrations, 4);
	gate_remove(f.cache);
	fx_close(&f);
	munmap(buf, 8 * 64 * KiB);
}

/* Many threads, overlapping and distinct ranges, invalidations: every
 * region handed out is valid, nothing leaks, each range is registered at
 * most once at a time (checked by the sim's stale-access counter and the
 * fixture's leak checks). */
#define STRESS_BUFS 32
struct stress {
	mrmgr_cache_t *c;
	char *mem;
	int id;
};

static void *stress_run(void *arg)
{
	struct stress *s = arg;
	uint64_t seed = (uint64_t)s->id * 7919 + 1;

	for (int n = 0; n < 4000; n++) {
		mrmgr_region_t *r;
		size_t i, len;

		seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
		i = (size_t)(seed >> 33) % STRESS_BUFS;
		len = (size_t)(1 + (seed >> 20) % 3) * 4 * KiB;
		if ((seed >> 60) == 0) {
			mrmgr_invalidate(s->c, s->mem + i * 64 * KiB, len);
			continue;
		}
		cr_assert_eq(mrmgr_get(s->c, s->mem + i * 64 * KiB, len, RW,
				       &r), 0);
		cr_assert_leq(mrmgr_region_addr(r),
			      (void *)(s->mem + i * 64 * KiB));
		cr_assert_eq(mrmgr_region_lkey(r), mrmgr_region_mr(r)->lkey);
		cr_assert_eq(mrmgr_region_rkey(r), mrmgr_region_mr(r)->rkey);
		mrmgr_put(r);
	}
	return NULL;
}

Test(miss, threads_overlapping_and_distinct, .timeout = 120)
{
	struct fixture f;
	struct mrmgr_cache_attr a = attr(12, MRMGR_MONITOR_EXTERNAL);
	struct stress s[4];
	pthread_t t[4];
	char *mem = map_rw(STRESS_BUFS * 64 * KiB, 0);

	a.flags = 0; /* merging on */
	fx_open(&f, NULL, &a);
	for (int i = 0; i < 4; i++) {
		s[i] = (struct stress){ .c = f.cache, .mem = mem, .id = i };
		pthread_create(&t[i], NULL, stress_run, &s[i]);
	}
	for (int i = 0; i < 4; i++)
		pthread_join(t[i], NULL);
	struct mrmgr_stats st = cstats(f.cache);

	cr_assert_eq(st.regions_in_use, 0);
	cr_assert_leq(st.regions, 12);
	cr_assert_eq(sstats(f.ctx).stale_accesses, 0);
	fx_close(&f);
	munmap(mem, STRESS_BUFS * 64 * KiB);
}

/* The keys a caller reads after a get are the MR's, through every way a
 * region gets its MR: a miss, growth in place (rereg), an uncached
 * registration, a merge. */
Test(miss, keys_follow_the_mr)
{
	struct fixture f;
	struct mrmgr_cache_attr a = attr(100, MRMGR_MONITOR_EXTERNAL);
	char *buf = map_rw(1 * MiB, 0);
	mrmgr_region_t *r, *h;

	a.flags = 0;
	fx_open(&f, NULL, &a);
	for (size_t len = 4 * KiB; len <= 512 * KiB; len *= 2) {
		cr_assert_eq(mrmgr_get(f.cache, buf, len, RW, &r), 0);
		cr_assert_eq(mrmgr_region_lkey(r), mrmgr_region_mr(r)->lkey);
		cr_assert_eq(mrmgr_region_rkey(r), mrmgr_region_mr(r)->rkey);
		mrmgr_put(r);
	}
	/* Held while it grows: make-before-break, both keep their keys. */
	cr_assert_eq(mrmgr_get(f.cache, buf, 4 * KiB, RW, &h), 0);
	cr_assert_eq(mrmgr_get(f.cache, buf, 1 * MiB, RW | IBV_ACCESS_REMOTE_ATOMIC,
			       &r), 0);
	cr_assert_eq(mrmgr_region_lkey(h), mrmgr_region_mr(h)->lkey);
	cr_assert_eq(mrmgr_region_lkey(r), mrmgr_region_mr(r)->lkey);
	cr_assert_eq(mrmgr_region_rkey(r), mrmgr_region_mr(r)->rkey);
	mrmgr_put(h);
	mrmgr_put(r);
	fx_close(&f);
	munmap(buf, 1 * MiB);
}
