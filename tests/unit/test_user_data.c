/*
 * Per-region user data and the region_gone callback: the callback fires
 * exactly once per region, with the reason it left the cache, while its
 * user data and keys are still readable; user data survives hits.
 *
 * SPDX-License-Identifier: MIT
 */
#include <pthread.h>
#include <stdlib.h>

#include "helpers.h"

#define MAXEV 64

static struct gone_log {
	int n;
	struct {
		mrmgr_region_t *r;
		unsigned int reason;
		void *data;
		void *addr;
		size_t len;
		uint32_t rkey;
	} ev[MAXEV];
} gl;

static void on_gone(mrmgr_region_t *r, unsigned int reason, void *arg)
{
	struct gone_log *l = arg;

	cr_assert_lt(l->n, MAXEV);
	l->ev[l->n].r = r;
	l->ev[l->n].reason = reason;
	l->ev[l->n].data = mrmgr_region_user_data(r);
	l->ev[l->n].addr = mrmgr_region_addr(r);
	l->ev[l->n].len = mrmgr_region_length(r);
	l->ev[l->n].rkey = mrmgr_region_rkey(r);
	l->n++;
}

/* External monitoring: everything is cached, events come when we say. */
static struct mrmgr_cache_attr attr(uint64_t max_regions, uint64_t flags)
{
	struct mrmgr_cache_attr a = {
		.comp_mask = MRMGR_CACHE_ATTR_REGION_GONE |
			     MRMGR_CACHE_ATTR_MONITOR | MRMGR_CACHE_ATTR_FLAGS,
		.monitor = MRMGR_MONITOR_EXTERNAL,
		.flags = flags,
		.region_gone = on_gone,
		.region_gone_arg = &gl,
	};

	if (max_regions) {
		a.comp_mask |= MRMGR_CACHE_ATTR_MAX_REGIONS;
		a.max_regions = max_regions;
	}
	return a;
}

static void reset(void)
{
	memset(&gl, 0, sizeof(gl));
}

TestSuite(user_data, .init = reset);

static int tag[8]; /* distinct user-data pointers */

static mrmgr_region_t *get_tagged(mrmgr_cache_t *c, void *p, size_t len, int t)
{
	mrmgr_region_t *r;

	cr_assert_eq(mrmgr_get(c, p, len, RW, &r), 0);
	if (t >= 0)
		mrmgr_region_set_user_data(r, &tag[t]);
	return r;
}

static void expect_one(int i, mrmgr_region_t *r, unsigned int reason, int t)
{
	cr_assert_gt(gl.n, i, "event %d did not happen (%d events)", i, gl.n);
	cr_expect_eq(gl.ev[i].r, r, "event %d: another region", i);
	cr_expect_eq(gl.ev[i].reason, reason, "event %d: reason %u, expected %u",
		     i, gl.ev[i].reason, reason);
	cr_expect_eq(gl.ev[i].data, t >= 0 ? (void *)&tag[t] : NULL,
		     "event %d: user data not readable in the callback", i);
}

Test(user_data, survives_hits_and_starts_null)
{
	struct mrmgr_cache_attr a = attr(0, 0);
	struct fixture f;
	char *buf = map_rw(64 * KiB, 1);
	mrmgr_region_t *r, *h;

	fx_open(&f, NULL, &a);
	cr_assert_eq(mrmgr_get(f.cache, buf, 64 * KiB, RW, &r), 0);
	cr_expect_null(mrmgr_region_user_data(r));
	mrmgr_region_set_user_data(r, &tag[0]);
	mrmgr_put(r);
	for (int i = 0; i < 3; i++) {
		cr_assert_eq(mrmgr_get(f.cache, buf + i * 4 * KiB, 4 * KiB, RW, &h), 0);
		cr_expect_eq(h, r, "a hit");
		cr_expect_eq(mrmgr_region_user_data(h), &tag[0]);
		mrmgr_put(h);
	}
	cr_expect_eq(cstats(f.cache).hits, 3);
	cr_expect_eq(gl.n, 0, "no callback on hits");
	/* Released and reused: the next region starts with NULL. */
	cr_assert_eq(mrmgr_invalidate(f.cache, buf, 64 * KiB), 0);
	expect_one(0, r, MRMGR_REGION_GONE_INVALIDATED, 0);
	cr_assert_eq(mrmgr_get(f.cache, buf, 64 * KiB, RW, &h), 0);
	cr_expect_null(mrmgr_region_user_data(h));
	mrmgr_put(h);
	fx_close(&f);
	cr_expect_eq(gl.n, 2);
	munmap(buf, 64 * KiB);
}

Test(user_data, cas_attaches_once)
{
	struct mrmgr_cache_attr a = attr(0, 0);
	struct fixture f;
	char *buf = map_rw(4 * KiB, 1);
	mrmgr_region_t *r;

	fx_open(&f, NULL, &a);
	cr_assert_eq(mrmgr_get(f.cache, buf, 4 * KiB, RW, &r), 0);
	cr_expect_null(mrmgr_region_cas_user_data(r, NULL, &tag[1]));
	cr_expect_eq(mrmgr_region_cas_user_data(r, NULL, &tag[2]), &tag[1],
		     "a second attach sees the first");
	cr_expect_eq(mrmgr_region_user_data(r), &tag[1]);
	cr_expect_eq(mrmgr_region_cas_user_data(r, &tag[1], &tag[2]), &tag[1]);
	cr_expect_eq(mrmgr_region_user_data(r), &tag[2]);
	mrmgr_put(r);
	mrmgr_region_set_user_data(NULL, &tag[0]); /* logged, no crash */
	cr_expect_null(mrmgr_region_user_data(NULL));
	fx_close(&f);
	expect_one(0, r, MRMGR_REGION_GONE_DESTROYED, 2);
	munmap(buf, 4 * KiB);
}

/* Two mappings may be adjacent: without NO_MERGE the second get would
 * grow the first region instead. */
Test(user_data, evicted)
{
	struct mrmgr_cache_attr a = attr(1, MRMGR_CACHE_NO_MERGE);
	struct fixture f;
	char *b1 = map_rw(8 * KiB, 1), *b2 = map_rw(8 * KiB, 2);
	mrmgr_region_t *r1, *r2;
	uint32_t rkey;

	fx_open(&f, NULL, &a);
	r1 = get_tagged(f.cache, b1, 8 * KiB, 1);
	rkey = mrmgr_region_rkey(r1);
	mrmgr_put(r1);
	r2 = get_tagged(f.cache, b2, 8 * KiB, 2); /* over max_regions: r1 goes */
	expect_one(0, r1, MRMGR_REGION_GONE_EVICTED, 1);
	cr_expect_eq(gl.ev[0].addr, (void *)b1, "accessors work in the callback");
	cr_expect_eq(gl.ev[0].len, 8 * KiB);
	cr_expect_eq(gl.ev[0].rkey, rkey);
	cr_expect_eq(cstats(f.cache).evictions, 1);
	mrmgr_put(r2);
	fx_close(&f);
	expect_one(1, r2, MRMGR_REGION_GONE_DESTROYED, 2);
	cr_expect_eq(gl.n, 2);
	munmap(b1, 8 * KiB);
	munmap(b2, 8 * KiB);
}

Test(user_data, invalidated_idle_and_held)
{
	struct mrmgr_cache_attr a = attr(0, MRMGR_CACHE_NO_MERGE);
	struct fixture f;
	char *b1 = map_rw(8 * KiB, 1), *b2 = map_rw(8 * KiB, 2);
	mrmgr_region_t *r1, *r2;

	fx_open(&f, NULL, &a);
	r1 = get_tagged(f.cache, b1, 8 * KiB, 1);
	mrmgr_put(r1);
	r2 = get_tagged(f.cache, b2, 8 * KiB, 2);
	cr_assert_eq(mrmgr_invalidate(f.cache, b1, 8 * KiB), 0);
	expect_one(0, r1, MRMGR_REGION_GONE_INVALIDATED, 1);
	/* Held: its holder keeps valid keys; the callback comes at the put. */
	cr_assert_eq(mrmgr_invalidate(f.cache, b2, 8 * KiB), 0);
	cr_expect_eq(gl.n, 1, "not while held");
	cr_expect_eq(mrmgr_region_user_data(r2), &tag[2], "still the holder's");
	mrmgr_put(r2);
	expect_one(1, r2, MRMGR_REGION_GONE_INVALIDATED, 2);
	fx_close(&f);
	cr_expect_eq(gl.n, 2, "destroy reports nothing more");
	munmap(b1, 8 * KiB);
	munmap(b2, 8 * KiB);
}

Test(user_data, invalidated_by_a_memory_event)
{
	struct mrmgr_cache_attr a = attr(0, MRMGR_CACHE_NO_MERGE);
	struct fixture f;
	char *b1 = map_rw(8 * KiB, 1), *b2 = map_rw(8 * KiB, 2);
	mrmgr_region_t *r1, *r2;

	fx_open(&f, NULL, &a);
	r1 = get_tagged(f.cache, b1, 8 * KiB, 1);
	mrmgr_put(r1);
	cr_assert_eq(mrmgr_notify_unmap(b1, 8 * KiB), 0);
	/* Events are applied by the next get, on its thread. */
	r2 = get_tagged(f.cache, b2, 8 * KiB, -1);
	expect_one(0, r1, MRMGR_REGION_GONE_INVALIDATED, 1);
	mrmgr_put(r2);
	fx_close(&f);
	munmap(b1, 8 * KiB);
	munmap(b2, 8 * KiB);
}

Test(user_data, merged_away)
{
	struct mrmgr_cache_attr a = attr(0, MRMGR_CACHE_NO_REREG);
	struct fixture f;
	char *buf = map_rw(64 * KiB, 1);
	mrmgr_region_t *r1, *r2, *r3;

	fx_open(&f, NULL, &a);
	r1 = get_tagged(f.cache, buf, 8 * KiB, 1);
	mrmgr_put(r1);
	r2 = get_tagged(f.cache, buf + 32 * KiB, 8 * KiB, 2);
	/* Held while a request spanning both is merged: r2's callback
	 * waits for its put, r1's comes now. */
	r3 = get_tagged(f.cache, buf, 48 * KiB, 3);
	cr_assert_neq(r3, r1);
	cr_assert_neq(r3, r2);
	cr_assert_geq(mrmgr_region_length(r3), 48 * KiB);
	expect_one(0, r1, MRMGR_REGION_GONE_REPLACED, 1);
	cr_expect_eq(gl.n, 1);
	mrmgr_put(r2);
	expect_one(1, r2, MRMGR_REGION_GONE_REPLACED, 2);
	mrmgr_put(r3);
	fx_close(&f);
	expect_one(2, r3, MRMGR_REGION_GONE_DESTROYED, 3);
	cr_expect_eq(gl.n, 3);
	munmap(buf, 64 * KiB);
}

Test(user_data, uncached)
{
	struct mrmgr_cache_attr a = attr(0, MRMGR_CACHE_DISABLE);
	struct fixture f;
	char *buf = map_rw(8 * KiB, 1);
	mrmgr_region_t *r;

	fx_open(&f, NULL, &a);
	r = get_tagged(f.cache, buf, 8 * KiB, 4);
	cr_expect_eq(gl.n, 0);
	mrmgr_put(r);
	expect_one(0, r, MRMGR_REGION_GONE_UNCACHED, 4);
	fx_close(&f);
	cr_expect_eq(gl.n, 1);
	munmap(buf, 8 * KiB);
}

/* Without the attribute bit the callback is not called, whatever the
 * field holds. */
Test(user_data, callback_needs_its_bit)
{
	struct mrmgr_cache_attr a = attr(0, 0);
	struct fixture f;
	char *buf = map_rw(8 * KiB, 1);
	mrmgr_region_t *r;

	a.comp_mask &= ~(uint64_t)MRMGR_CACHE_ATTR_REGION_GONE;
	fx_open(&f, NULL, &a);
	r = get_tagged(f.cache, buf, 8 * KiB, 1);
	mrmgr_put(r);
	fx_close(&f);
	cr_expect_eq(gl.n, 0);
	munmap(buf, 8 * KiB);
}

/*
 * Several threads hit one region and attach with CAS: exactly one
 * pointer wins and every thread ends up using it.
 */
#define NTHREADS 4
struct race {
	mrmgr_cache_t *c;
	char *buf;
	pthread_barrier_t go;
	void *seen[NTHREADS];
	int won[NTHREADS];
	int mine[NTHREADS];
};

struct race_arg {
	struct race *race;
	int id;
};

static void *racer(void *p)
{
	struct race_arg *ra = p;
	struct race *rc = ra->race;
	mrmgr_region_t *r;

	pthread_barrier_wait(&rc->go);
	for (int i = 0; i < 1000; i++) {
		cr_assert_eq(mrmgr_get(rc->c, rc->buf, 4 * KiB, RW, &r), 0);
		void *cur = mrmgr_region_user_data(r);

		if (!cur) {
			cur = mrmgr_region_cas_user_data(r, NULL, &rc->mine[ra->id]);
			if (!cur) {
				rc->won[ra->id]++;
				cur = &rc->mine[ra->id];
			}
		}
		rc->seen[ra->id] = cur;
		mrmgr_put(r);
	}
	return NULL;
}

Test(user_data, threads_attach_once)
{
	struct mrmgr_cache_attr a = attr(0, 0);
	struct fixture f;
	struct race rc = { 0 };
	struct race_arg args[NTHREADS];
	pthread_t t[NTHREADS];
	int wins = 0;

	fx_open(&f, NULL, &a);
	rc.c = f.cache;
	rc.buf = map_rw(4 * KiB, 1);
	pthread_barrier_init(&rc.go, NULL, NTHREADS);
	for (int i = 0; i < NTHREADS; i++) {
		args[i] = (struct race_arg){ &rc, i };
		cr_assert_eq(pthread_create(&t[i], NULL, racer, &args[i]), 0);
	}
	for (int i = 0; i < NTHREADS; i++) {
		pthread_join(t[i], NULL);
		wins += rc.won[i];
	}
	cr_expect_eq(wins, 1, "%d attaches won", wins);
	for (int i = 1; i < NTHREADS; i++)
		cr_expect_eq(rc.seen[i], rc.seen[0]);
	fx_close(&f);
	cr_expect_eq(gl.n, 1);
	cr_expect_eq(gl.ev[0].data, rc.seen[0]);
	pthread_barrier_destroy(&rc.go);
	munmap(rc.buf, 4 * KiB);
}

/* Growth in place keeps the region, its user data, and calls nothing;
 * growth of a held region (make-before-break) replaces it. */
Test(user_data, growth)
{
	struct mrmgr_cache_attr a = attr(0, 0);
	struct fixture f;
	char *buf = map_rw(256 * KiB, 1);
	mrmgr_region_t *r1, *r2, *r3;

	fx_open(&f, NULL, &a);
	r1 = get_tagged(f.cache, buf, 8 * KiB, 1);
	mrmgr_put(r1);
	r2 = get_tagged(f.cache, buf, 16 * KiB, -1);
	cr_expect_eq(r2, r1, "grown in place");
	cr_expect_eq(cstats(f.cache).rereg_successes, 1);
	cr_expect_eq(mrmgr_region_user_data(r2), &tag[1]);
	cr_expect_eq(gl.n, 0);
	/* Held now: growing it registers a new region. */
	r3 = get_tagged(f.cache, buf, 128 * KiB, 3);
	cr_expect_neq(r3, r2);
	cr_expect_eq(gl.n, 0, "the old one is held");
	mrmgr_put(r2);
	expect_one(0, r2, MRMGR_REGION_GONE_REPLACED, 1);
	mrmgr_put(r3);
	fx_close(&f);
	expect_one(1, r3, MRMGR_REGION_GONE_DESTROYED, 3);
	munmap(buf, 256 * KiB);
}

/*
 * Random gets, puts, invalidations, memory events and growth under tight
 * limits: every region is reported exactly once (never twice, never while
 * a later get still returns it), as many reports as registrations.
 */
#define SLOTS 64
static struct {
	mrmgr_region_t *r[SLOTS];
	int alive[SLOTS];
	int doubles, unknown;
	long reports;
} life;

static int life_find(mrmgr_region_t *r)
{
	for (int i = 0; i < SLOTS; i++)
		if (life.r[i] == r)
			return i;
	return -1;
}

static void life_seen(mrmgr_region_t *r)
{
	int i = life_find(r);

	if (i < 0) {
		i = life_find(NULL);
		cr_assert_geq(i, 0, "more than %d regions", SLOTS);
		life.r[i] = r;
	}
	life.alive[i] = 1;
}

static void on_gone_life(mrmgr_region_t *r, unsigned int reason, void *arg)
{
	int i = life_find(r);

	(void)arg;
	life.reports++;
	if (reason < MRMGR_REGION_GONE_INVALIDATED ||
	    reason > MRMGR_REGION_GONE_UNCACHED || i < 0)
		life.unknown++;
	else if (!life.alive[i])
		life.doubles++;
	else
		life.alive[i] = 0;
}

Test(user_data, every_region_reported_once)
{
	struct mrmgr_cache_attr a = attr(6, 0);
	struct fixture f;
	const size_t n = 16, len = 64 * KiB;
	char *buf = map_rw(n * len, 1);
	mrmgr_region_t *held[8] = { 0 };
	unsigned int seed = 42;

	memset(&life, 0, sizeof(life));
	a.region_gone = on_gone_life;
	a.comp_mask |= MRMGR_CACHE_ATTR_MAX_BYTES;
	a.max_bytes = 512 * KiB;
	fx_open(&f, NULL, &a);
	for (int op = 0; op < 5000; op++) {
		int k = rand_r(&seed) % 8;
		size_t b = (size_t)rand_r(&seed) % n;
		size_t off = (size_t)(rand_r(&seed) % 4) * 4 * KiB;
		size_t l = (size_t)(1 + rand_r(&seed) % 24) * 4 * KiB;

		if (off + l > (n - b) * len)
			l = (n - b) * len - off;
		switch (rand_r(&seed) % 4) {
		case 0:
		case 1:
			if (held[k])
				mrmgr_put(held[k]);
			held[k] = NULL;
			if (mrmgr_get(f.cache, buf + b * len + off, l, RW, &held[k]) == 0)
				life_seen(held[k]);
			else
				held[k] = NULL;
			break;
		case 2:
			if (held[k])
				mrmgr_put(held[k]);
			held[k] = NULL;
			break;
		default:
			if (rand_r(&seed) % 2)
				mrmgr_invalidate(f.cache, buf + b * len, l);
			else
				mrmgr_notify_unmap(buf + b * len, l);
			break;
		}
	}
	for (int k = 0; k < 8; k++)
		mrmgr_put(held[k]);
	struct mrmgr_stats s = cstats(f.cache);
	cr_assert_gt(s.evictions, 0, "the limits were reached");
	cr_assert_gt(s.invalidations, 0);
	fx_close(&f);
	cr_expect_eq(life.doubles, 0, "%d regions reported twice", life.doubles);
	cr_expect_eq(life.unknown, 0, "%d reports of unknown regions or reasons",
		     life.unknown);
	cr_expect_eq(life.reports, (long)s.registrations, "%ld reports, %llu "
		     "registrations", life.reports,
		     (unsigned long long)s.registrations);
	for (int i = 0; i < SLOTS; i++)
		cr_expect_eq(life.alive[i], 0, "region %d never reported", i);
	munmap(buf, n * len);
}
