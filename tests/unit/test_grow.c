/*
 * Growth through mrmgr_get() on the simulated HCA: in place when idle,
 * make-before-break when held (also by another thread, and under a
 * multi-threaded stress that checks a held region never changes), the
 * headroom policy and its bounds, access upgrades. Every growth is checked
 * with simulated RDMA writes: they must land in the buffer through the
 * keys handed out, and stale accesses stay at 0.
 *
 * SPDX-License-Identifier: MIT
 */
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>

#include "grow_helpers.h"

Test(grow, same_start_longer_rereg_in_place)
{
	struct fixture f;
	struct mrmgr_cache_attr a = cattr(MRMGR_CACHE_NO_HEADROOM);
	mrmgr_region_t *r1, *r2;
	char *buf = map_rw(64 * KiB, 0);

	fx_open(&f, &sim_big, &a);
	cr_assert_eq(mrmgr_get(f.cache, buf, 16 * KiB, RW, &r1), 0);
	uint64_t gen = mrmgr_region_generation(r1);
	mrmgr_put(r1);
	cr_assert_eq(mrmgr_get(f.cache, buf, 32 * KiB, RW, &r2), 0);
	cr_assert_eq(r2, r1, "grown in place: the same region");
	cr_assert_neq(mrmgr_region_generation(r2), gen);
	cr_assert_eq(mrmgr_region_length(r2), 32 * KiB);
	cr_assert_eq(mrmgr_region_mr(r2)->length, 32 * KiB);
	write_lands(f.pd, mrmgr_region_rkey(r2), buf, 'a');
	write_lands(f.pd, mrmgr_region_rkey(r2), buf + 32 * KiB - 8, 'b');
	mrmgr_put(r2);

	struct mrmgr_stats s = cstats(f.cache);
	cr_assert_eq(s.registrations, 1);
	cr_assert_eq(s.rereg_attempts, 1);
	cr_assert_eq(s.rereg_successes, 1);
	cr_assert_eq(s.grows, 1);
	cr_assert_eq(s.deregistrations, 0);
	cr_assert_eq(s.pinned_bytes, 32 * KiB);
	cr_assert_eq(s.pages_registered, (16 + 32) * KiB / PG);
	cr_assert_eq(sstats(f.ctx).live_mrs, 1);
	cr_assert_eq(sstats(f.ctx).stale_accesses, 0);
	fx_close(&f);
	munmap(buf, 64 * KiB);
}

Test(grow, overlapping_request_reaching_past_grows_and_adjacent_merges)
{
	struct fixture f;
	struct mrmgr_cache_attr a = cattr(MRMGR_CACHE_NO_HEADROOM);
	mrmgr_region_t *r1, *r2, *r3;
	char *buf = map_rw(128 * KiB, 0);

	fx_open(&f, &sim_big, &a);
	cr_assert_eq(mrmgr_get(f.cache, buf + 16 * KiB, 16 * KiB, RW, &r1), 0);
	mrmgr_put(r1);
	cr_assert_eq(mrmgr_get(f.cache, buf + 24 * KiB, 24 * KiB, RW, &r2), 0);
	cr_assert_eq(r2, r1);
	cr_assert_eq(mrmgr_region_addr(r2), buf + 16 * KiB);
	cr_assert_eq(mrmgr_region_length(r2), 32 * KiB);
	mrmgr_put(r2);
	/* Merely touching: not growth, but still one region, in place. */
	cr_assert_eq(mrmgr_get(f.cache, buf + 48 * KiB, 16 * KiB, RW, &r3), 0);
	cr_assert_eq(r3, r1);
	cr_assert_eq(mrmgr_region_length(r3), 48 * KiB);
	write_lands(f.pd, mrmgr_region_rkey(r3), buf + 60 * KiB, 'z');
	mrmgr_put(r3);
	struct mrmgr_stats s = cstats(f.cache);
	cr_assert_eq(s.grows, 1);
	cr_assert_eq(s.rereg_successes, 2);
	cr_assert_eq(s.registrations, 1);
	fx_close(&f);
	munmap(buf, 128 * KiB);
}

Test(grow, headroom_doubles_within_the_mapping)
{
	struct fixture f;
	struct mrmgr_cache_attr a = cattr(0);
	mrmgr_region_t *r;
	char *buf = map_guarded(1 * MiB);

	fx_open(&f, &sim_big, &a);
	cr_assert_eq(mrmgr_get(f.cache, buf, 64 * KiB, RW, &r), 0);
	cr_assert_eq(mrmgr_region_length(r), 64 * KiB, "a fresh miss gets no headroom");
	mrmgr_put(r);
	cr_assert_eq(mrmgr_get(f.cache, buf, 68 * KiB, RW, &r), 0);
	cr_assert_eq(mrmgr_region_length(r), 136 * KiB, "twice the grown span");
	mrmgr_put(r);
	cr_assert_eq(cstats(f.cache).headroom_bytes, 68 * KiB);
	uint64_t regs = cstats(f.cache).registrations + cstats(f.cache).rereg_attempts;
	for (size_t len = 72 * KiB; len <= 136 * KiB; len += 4 * KiB) {
		cr_assert_eq(mrmgr_get(f.cache, buf, len, RW, &r), 0);
		mrmgr_put(r);
	}
	cr_assert_eq(cstats(f.cache).registrations + cstats(f.cache).rereg_attempts,
		     regs, "growth within the headroom hits");
	write_lands(f.pd, mrmgr_region_rkey(r), buf + 136 * KiB - 8, 'h');
	fx_close(&f);
	unmap_guarded(buf, 1 * MiB);
}

Test(grow, headroom_never_passes_the_mapping_or_its_protections)
{
	struct fixture f;
	struct mrmgr_cache_attr a = cattr(0);
	mrmgr_region_t *r;
	char *buf = map_guarded(40 * KiB);
	char *two = map_guarded(96 * KiB);

	fx_open(&f, &sim_big, &a);
	cr_assert_eq(mrmgr_get(f.cache, buf, 16 * KiB, RW, &r), 0);
	mrmgr_put(r);
	cr_assert_eq(mrmgr_get(f.cache, buf, 12 * KiB, RW, &r), 0);
	cr_assert_eq(mrmgr_region_length(r), 16 * KiB, "inside: a hit");
	mrmgr_put(r);
	cr_assert_eq(mrmgr_get(f.cache, buf, 24 * KiB, RW, &r), 0);
	cr_assert_eq(mrmgr_region_length(r), 40 * KiB,
		     "the mapping's end, not twice 24 KiB");
	mrmgr_put(r);

	/* The upper half read-only: another protection, another mapping. */
	cr_assert_eq(mprotect(two + 48 * KiB, 48 * KiB, PROT_READ), 0);
	cr_assert_eq(mrmgr_get(f.cache, two, 32 * KiB, IBV_ACCESS_REMOTE_READ, &r), 0);
	mrmgr_put(r);
	cr_assert_eq(mrmgr_get(f.cache, two, 36 * KiB, IBV_ACCESS_REMOTE_READ, &r), 0);
	cr_assert_eq(mrmgr_region_length(r), 48 * KiB);
	mrmgr_put(r);
	fx_close(&f);
	unmap_guarded(buf, 40 * KiB);
	unmap_guarded(two, 96 * KiB);
}

Test(grow, headroom_stops_at_the_next_region)
{
	struct fixture f;
	struct mrmgr_cache_attr a = cattr(0);
	mrmgr_region_t *r, *b;
	char *buf = map_guarded(256 * KiB);

	fx_open(&f, &sim_big, &a);
	cr_assert_eq(mrmgr_get(f.cache, buf + 40 * KiB, 4 * KiB, RW, &b), 0);
	mrmgr_put(b);
	cr_assert_eq(mrmgr_get(f.cache, buf, 16 * KiB, RW, &r), 0);
	mrmgr_put(r);
	cr_assert_eq(mrmgr_get(f.cache, buf, 24 * KiB, RW, &r), 0);
	cr_assert_eq(mrmgr_region_length(r), 40 * KiB,
		     "up to the neighbour, not twice 24 KiB");
	cr_assert_neq(r, b);
	mrmgr_put(r);
	cr_assert_eq(cstats(f.cache).regions, 2);
	fx_close(&f);
	unmap_guarded(buf, 256 * KiB);
}

Test(grow, headroom_off_by_flag_or_environment)
{
	struct fixture f;
	struct mrmgr_cache_attr a = cattr(0);
	mrmgr_region_t *r;
	char *buf = map_guarded(1 * MiB);

	/* The variable fills only what the program left unset. */
	a.comp_mask &= ~(uint64_t)MRMGR_CACHE_ATTR_FLAGS;
	setenv("MRMGR_GROW_HEADROOM", "0", 1);
	fx_open(&f, &sim_big, &a);
	unsetenv("MRMGR_GROW_HEADROOM");
	cr_assert_eq(mrmgr_get(f.cache, buf, 64 * KiB, RW, &r), 0);
	mrmgr_put(r);
	cr_assert_eq(mrmgr_get(f.cache, buf, 68 * KiB, RW, &r), 0);
	cr_assert_eq(mrmgr_region_length(r), 68 * KiB);
	mrmgr_put(r);
	cr_assert_eq(cstats(f.cache).headroom_bytes, 0);
	fx_close(&f);
	unmap_guarded(buf, 1 * MiB);
}

Test(grow, linear_growth_through_get_costs_log_n_registrations)
{
	struct fixture f;
	struct mrmgr_cache_attr a = cattr(0);
	const size_t steps = 2000, len = steps * PG;
	mrmgr_region_t *r;
	char *buf = map_guarded(2 * len);

	fx_open(&f, &sim_big, &a);
	for (size_t i = 1; i <= steps; i++) {
		cr_assert_eq(mrmgr_get(f.cache, buf, i * PG, RW, &r), 0);
		if (i % 97 == 0)
			write_lands(f.pd, mrmgr_region_rkey(r), buf + i * PG - 8, 'l');
		mrmgr_put(r);
	}
	struct mrmgr_stats s = cstats(f.cache);
	cr_assert_leq(s.registrations + s.rereg_attempts, 13, "%llu + %llu calls",
		      (unsigned long long)s.registrations,
		      (unsigned long long)s.rereg_attempts);
	cr_assert_leq(s.pages_registered, 4 * steps);
	cr_assert_leq(s.peak_pinned_bytes, 2 * len);
	cr_assert_eq(sstats(f.ctx).stale_accesses, 0);
	fx_close(&f);
	unmap_guarded(buf, 2 * len);
}

/*
 * A buffer doubling at every step (a vector's growth), 4 KiB -> 1 MiB:
 * registering each step exactly costs a call per step and twice the final
 * size in pages (what a cache without headroom, such as UCX's rcache,
 * registers); twice the grown span registers every other step and 4/3 of
 * the final size. Fails with headroom at twice the old region: the
 * request itself doubles, so it got none.
 */
Test(grow, doubling_growth_registers_every_other_step)
{
	struct fixture f;
	struct mrmgr_cache_attr a = cattr(0);
	const size_t steps = 9, final = PG << (steps - 1); /* 1 MiB */
	mrmgr_region_t *r;
	char *buf = map_guarded(2 * final);

	fx_open(&f, &sim_big, &a);
	for (size_t i = 1; i <= steps; i++) {
		cr_assert_eq(mrmgr_get(f.cache, buf, PG << (i - 1), RW, &r), 0);
		write_lands(f.pd, mrmgr_region_rkey(r),
			    buf + (PG << (i - 1)) - 8, 'd');
		mrmgr_put(r);
	}
	struct mrmgr_stats s = cstats(f.cache);
	/* Steps 1, 2, 4, 6, 8: 1 + 4 + 16 + 64 + 256 pages. */
	cr_assert_eq(s.registrations + s.rereg_attempts, 5, "%llu + %llu calls",
		     (unsigned long long)s.registrations,
		     (unsigned long long)s.rereg_attempts);
	cr_assert_eq(s.pages_registered, 341);
	cr_assert_lt(s.pages_registered, 2 * final / PG, "fewer than UCX's");
	cr_assert_eq(sstats(f.ctx).stale_accesses, 0);
	fx_close(&f);
	unmap_guarded(buf, 2 * final);
}

Test(grow, in_use_region_grows_by_make_before_break)
{
	struct fixture f;
	struct mrmgr_cache_attr a = cattr(MRMGR_CACHE_NO_HEADROOM);
	mrmgr_region_t *held, *grown;
	char *buf = map_rw(64 * KiB, 0);

	fx_open(&f, &sim_big, &a);
	cr_assert_eq(mrmgr_get(f.cache, buf, 16 * KiB, RW, &held), 0);
	uint32_t old_rkey = mrmgr_region_rkey(held);
	cr_assert_eq(mrmgr_get(f.cache, buf, 32 * KiB, RW, &grown), 0);
	cr_assert_neq(grown, held, "never rereg'd under its user");
	cr_assert_eq(mrmgr_region_length(held), 16 * KiB);
	write_lands(f.pd, old_rkey, buf + 8 * KiB, 'o');
	write_lands(f.pd, mrmgr_region_rkey(grown), buf + 24 * KiB, 'n');
	struct mrmgr_stats s = cstats(f.cache);
	cr_assert_eq(s.rereg_attempts, 0);
	cr_assert_eq(s.rereg_fallback_in_use, 1);
	cr_assert_eq(s.make_before_break, 1);
	cr_assert_eq(sstats(f.ctx).live_mrs, 2);
	mrmgr_put(held);
	cr_assert_eq(sstats(f.ctx).live_mrs, 1, "the old MR goes at its last put");
	cr_assert_eq(write_err(f.pd, old_rkey, buf), ENOENT);
	mrmgr_put(grown);
	fx_close(&f);
	munmap(buf, 64 * KiB);
}

/* ------------------------------------------------------ threads */

struct holder {
	struct fixture *f;
	char *buf;
	mrmgr_region_t *r;
	pthread_mutex_t m;
	pthread_cond_t cv;
	int stage;
	int write_ret;
};

static void stage_set(struct holder *h, int s)
{
	pthread_mutex_lock(&h->m);
	h->stage = s;
	pthread_cond_broadcast(&h->cv);
	pthread_mutex_unlock(&h->m);
}

static void stage_wait(struct holder *h, int s)
{
	pthread_mutex_lock(&h->m);
	while (h->stage < s)
		pthread_cond_wait(&h->cv, &h->m);
	pthread_mutex_unlock(&h->m);
}

static void *holder_thread(void *arg)
{
	struct holder *h = arg;

	if (mrmgr_get(h->f->cache, h->buf, 16 * KiB, RW, &h->r))
		return NULL;
	stage_set(h, 1);
	stage_wait(h, 2); /* the main thread has grown the range */
	h->write_ret = mrmgr_sim_write(h->f->pd, mrmgr_region_rkey(h->r),
				       (uint64_t)(uintptr_t)h->buf, "held", 5);
	mrmgr_put(h->r);
	return NULL;
}

Test(grow, region_grown_while_another_thread_holds_it)
{
	struct fixture f;
	struct mrmgr_cache_attr a = cattr(0);
	struct holder h = { .f = &f, .stage = 0, .write_ret = -1 };
	mrmgr_region_t *grown;
	pthread_t t;

	pthread_mutex_init(&h.m, NULL);
	pthread_cond_init(&h.cv, NULL);
	h.buf = map_guarded(1 * MiB);
	fx_open(&f, &sim_big, &a);
	cr_assert_eq(pthread_create(&t, NULL, holder_thread, &h), 0);
	stage_wait(&h, 1);
	cr_assert_eq(mrmgr_get(f.cache, h.buf, 64 * KiB, RW, &grown), 0);
	cr_assert_neq(grown, h.r);
	uint32_t held_rkey = mrmgr_region_rkey(h.r);
	stage_set(&h, 2);
	pthread_join(t, NULL);
	cr_assert_eq(h.write_ret, 0, "the holder's keys stay valid");
	cr_assert_str_eq(h.buf, "held");
	cr_assert_eq(write_err(f.pd, held_rkey, h.buf), ENOENT,
		     "deregistered at the holder's put");
	write_lands(f.pd, mrmgr_region_rkey(grown), h.buf + 60 * KiB, 'g');
	mrmgr_put(grown);
	cr_assert_eq(cstats(f.cache).make_before_break, 1);
	fx_close(&f);
	unmap_guarded(h.buf, 1 * MiB);
}

#define STRESS_LEN (512 * KiB)
#define ZONE (STRESS_LEN / 2)

struct stress {
	struct fixture f;
	char *buf;
	int fail;
	int grower; /* the next thread to start is the grower */
};

/*
 * Two zones. In the first, one thread keeps invalidating and growing a
 * small region step by step, in place whenever nobody holds it at that
 * instant, while the others hit it with short holds (lock-free hits
 * racing the quiesce). In the second, the others ask for anything up to
 * the whole zone and hold it across a yield, so growth there mostly has
 * to make-before-break. Whatever happens, a held region never changes.
 */
static void *stress_thread(void *arg)
{
	struct stress *s = arg;
	unsigned int seed = (unsigned int)(uintptr_t)pthread_self();
	int grower = __atomic_exchange_n(&s->grower, 0, __ATOMIC_RELAXED);

	for (int i = 0; i < 3000 && !__atomic_load_n(&s->fail, __ATOMIC_RELAXED); i++) {
		int zone_b = !grower && rand_r(&seed) % 2;
		char *base = zone_b ? s->buf + ZONE : s->buf;
		size_t len = zone_b ? PG * (1 + (size_t)rand_r(&seed) % (ZONE / PG))
				    : PG * (1 + (size_t)rand_r(&seed) % 8);
		unsigned int acc = rand_r(&seed) % 4 ? RW : LW;
		size_t off;
		mrmgr_region_t *r;
		int ret;

		if (grower) {
			len = PG * (1 + (size_t)(i % 8));
			if (i % 8 == 0)
				mrmgr_invalidate(s->f.cache, s->buf, ZONE);
		} else if (rand_r(&seed) % 64 == 0) {
			mrmgr_invalidate(s->f.cache, s->buf + ZONE, ZONE);
			continue;
		}
		off = (size_t)rand_r(&seed) % len;
		ret = mrmgr_get(s->f.cache, base, len, acc, &r);
		if (ret || mrmgr_region_length(r) < len) {
			__atomic_store_n(&s->fail, 1, __ATOMIC_RELAXED);
			break;
		}
		/* Same registration, same keys, writes land, until the put. */
		uint64_t gen = mrmgr_region_generation(r);
		uint32_t rkey = mrmgr_region_rkey(r);

		for (int k = 0; k < 2 && !ret; k++) {
			if (acc == RW)
				ret = mrmgr_sim_write(s->f.pd, rkey,
						      (uint64_t)(uintptr_t)(base + off),
						      "s", 1);
			if (zone_b && k == 0)
				sched_yield();
		}
		if (ret || mrmgr_region_length(r) < len ||
		    (char *)mrmgr_region_addr(r) != base ||
		    mrmgr_region_generation(r) != gen ||
		    mrmgr_region_rkey(r) != rkey)
			__atomic_store_n(&s->fail, 2 + ret, __ATOMIC_RELAXED);
		mrmgr_put(r);
	}
	return NULL;
}

Test(grow, concurrent_growth_never_changes_a_held_region, .timeout = 120)
{
	struct stress s = { .fail = 0, .grower = 1 };
	/* No headroom: every longer request grows the region. */
	struct mrmgr_cache_attr a = cattr(MRMGR_CACHE_NO_HEADROOM);
	pthread_t t[3];

	s.buf = map_guarded(STRESS_LEN);
	fx_open(&s.f, &sim_big, &a);
	for (int i = 0; i < 3; i++)
		pthread_create(&t[i], NULL, stress_thread, &s);
	for (int i = 0; i < 3; i++)
		pthread_join(t[i], NULL);
	cr_assert_eq(s.fail, 0, "failure %d", s.fail);
	struct mrmgr_stats st = cstats(s.f.cache);
	cr_assert_gt(st.rereg_successes, 0,
		     "in-place growth happened (attempts %llu, in use %llu)",
		     (unsigned long long)st.rereg_attempts,
		     (unsigned long long)st.rereg_fallback_in_use);
	cr_assert_gt(st.make_before_break, 0, "growth of held regions happened");
	cr_assert_eq(st.regions_in_use, 0);
	cr_assert_eq(sstats(s.f.ctx).stale_accesses, 0);
	fx_close(&s.f);
	unmap_guarded(s.buf, STRESS_LEN);
}

/* ------------------------------------------------------ access upgrades */

Test(grow, access_upgrade_of_an_idle_region_keeps_keys)
{
	struct fixture f;
	struct mrmgr_cache_attr a = cattr(0);
	mrmgr_region_t *r1, *r2, *r3;
	char *buf = map_rw(64 * KiB, 0);

	fx_open(&f, &sim_big, &a);
	cr_assert_eq(mrmgr_get(f.cache, buf, 64 * KiB, LW, &r1), 0);
	uint32_t rkey = mrmgr_region_rkey(r1);
	mrmgr_put(r1);
	cr_assert_eq(mrmgr_get(f.cache, buf, 4 * KiB, RW, &r2), 0);
	cr_assert_eq(r2, r1);
	cr_assert_eq(mrmgr_region_access(r2), RW);
	cr_assert_eq(mrmgr_region_length(r2), 64 * KiB);
	cr_assert_eq(mrmgr_region_rkey(r2), rkey, "an access change keeps keys");
	write_lands(f.pd, rkey, buf + 60 * KiB, 'u');
	mrmgr_put(r2);
	cr_assert_eq(cstats(f.cache).rereg_successes, 1);
	cr_assert_eq(cstats(f.cache).grows, 0);

	/* Read-only to writable: the pages are pinned again for stores.
	 * Between guard pages: where mmap puts it (under ASan, next to buf)
	 * must not make it merge with buf's region. */
	char *ro_area = mmap(NULL, 32 * KiB, PROT_NONE,
			     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	cr_assert_neq(ro_area, MAP_FAILED);
	char *ro = ro_area + 8 * KiB;
	cr_assert_eq(mprotect(ro, 16 * KiB, PROT_READ | PROT_WRITE), 0);
	cr_assert_eq(mrmgr_get(f.cache, ro, 16 * KiB, IBV_ACCESS_REMOTE_READ, &r1), 0);
	mrmgr_put(r1);
	cr_assert_eq(mrmgr_get(f.cache, ro, 16 * KiB, RW, &r3), 0);
	cr_assert_eq(r3, r1);
	write_lands(f.pd, mrmgr_region_rkey(r3), ro + 8 * KiB, 'w');
	mrmgr_put(r3);
	cr_assert_eq(cstats(f.cache).registrations, 2);
	cr_assert_eq(sstats(f.ctx).stale_accesses, 0);
	fx_close(&f);
	munmap(buf, 64 * KiB);
	munmap(ro_area, 32 * KiB);
}

Test(grow, access_upgrade_of_a_held_region_makes_before_breaking)
{
	struct fixture f;
	struct mrmgr_cache_attr a = cattr(0);
	mrmgr_region_t *held, *up;
	char *buf = map_rw(64 * KiB, 0);

	fx_open(&f, &sim_big, &a);
	cr_assert_eq(mrmgr_get(f.cache, buf, 64 * KiB, IBV_ACCESS_REMOTE_READ, &held), 0);
	cr_assert_eq(mrmgr_get(f.cache, buf, 64 * KiB, RW, &up), 0);
	cr_assert_neq(up, held);
	cr_assert_eq(mrmgr_region_access(held), IBV_ACCESS_REMOTE_READ,
		     "the holder's region is untouched");
	cr_assert_eq(write_err(f.pd, mrmgr_region_rkey(held), buf), EACCES);
	write_lands(f.pd, mrmgr_region_rkey(up), buf, 'u');
	cr_assert_eq(cstats(f.cache).make_before_break, 1);
	cr_assert_eq(cstats(f.cache).rereg_attempts, 0);
	mrmgr_put(held);
	mrmgr_put(up);
	cr_assert_eq(sstats(f.ctx).live_mrs, 1);
	fx_close(&f);
	munmap(buf, 64 * KiB);
}

/*
 * Growth stops at the caller's buffer (issue 15): buffers laid back to
 * back in one mapping, each grown by doubling or by 4 KiB steps, the
 * steps interleaved or one buffer after the other, with the monitor in
 * its default mode and with external monitoring (headroom on). A cache
 * that merges a buffer with the neighbour it touches, or widens it over
 * memory the program never asked to register, makes one ever larger
 * region and re-registers it at every step. The pages registered must
 * not exceed what registering each request as it comes costs (UCX's
 * rcache does that), and the linear pattern keeps its O(log n)
 * registrations where headroom is on.
 */
#define B2B 4
static void grow_back_to_back(uint32_t monitor, int doubling, int interleaved,
			      uint64_t *pages, uint64_t *calls, uint64_t *plain)
{
	struct fixture f;
	struct mrmgr_cache_attr a = cattr(0);
	size_t steps = doubling ? 9 : 48, final = doubling ? 256 * PG : 48 * PG;
	char *buf = map_rw(B2B * final, 0);
	mrmgr_region_t *r;

	a.monitor = monitor;
	fx_open(&f, &sim_big, &a);
	*plain = 0;
	for (size_t o = 0; o < B2B * steps; o++) {
		size_t b = interleaved ? o % B2B : o / steps;
		size_t i = interleaved ? o / B2B + 1 : o % steps + 1;
		size_t len = doubling ? PG << (i - 1) : i * PG;

		cr_assert_eq(mrmgr_get(f.cache, buf + b * final, len, RW, &r), 0);
		cr_assert_geq(mrmgr_region_addr(r), (void *)(buf + b * final)
			      - final, "reaches no further than the buffer "
			      "before");
		mrmgr_put(r);
		*plain += len / PG;
	}
	struct mrmgr_stats s = cstats(f.cache);

	*pages = s.pages_registered;
	*calls = s.registrations + s.rereg_successes;
	fx_close(&f);
	munmap(buf, B2B * final);
}

Test(grow, back_to_back_buffers_are_not_swallowed)
{
	static const uint32_t modes[] = { MRMGR_MONITOR_AUTO,
					  MRMGR_MONITOR_EXTERNAL };

	for (int m = 0; m < 2; m++)
		for (int doubling = 0; doubling < 2; doubling++)
			for (int il = 0; il < 2; il++) {
				uint64_t pages, calls, plain;

				grow_back_to_back(modes[m], doubling, il, &pages,
						  &calls, &plain);
				cr_log_info("monitor %u %s %s: %llu pages (%llu "
					    "asked), %llu calls", modes[m],
					    doubling ? "doubling" : "linear",
					    il ? "interleaved" : "one by one",
					    (unsigned long long)pages,
					    (unsigned long long)plain,
					    (unsigned long long)calls);
				cr_assert_leq(pages, plain,
					      "monitor %u, %s, %s: %llu pages "
					      "registered for %llu asked",
					      modes[m],
					      doubling ? "doubling" : "linear",
					      il ? "interleaved" : "one by one",
					      (unsigned long long)pages,
					      (unsigned long long)plain);
				if (!doubling && modes[m] == MRMGR_MONITOR_EXTERNAL)
					cr_assert_leq(calls, B2B * 8,
						      "headroom: O(log n) per "
						      "buffer");
			}
}
