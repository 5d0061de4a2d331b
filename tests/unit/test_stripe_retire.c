/*
 * Stripes whose threads all ended are retired (lib/core/stripes.c,
 * fork.c's mrmgr__stripe_retire_tick()): the counts and marks they hold
 * move to stripe 0, their words go DEAD, their bits leave
 * mrmgr__stripes_seen; a reference the ended thread still held keeps its
 * region; a thread given the stripe again joins and hits; a stripe some
 * live thread still has is kept.
 *
 * SPDX-License-Identifier: MIT
 */
#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>

#include "helpers.h"

#include "cache.h"
#include "core.h"

#define PG ((size_t)4096)

/* Enough ticks for any retirement these small caches can ask for. */
#define TICKS 100000

static void drive_retirement(void)
{
	for (int i = 0; i < TICKS && __atomic_load_n(&mrmgr__stripes_orphan,
						     __ATOMIC_SEQ_CST);
	     i++)
		mrmgr__stripe_retire_tick();
}

struct job {
	mrmgr_cache_t *cache;
	char *buf;
	mrmgr_region_t *kept;   /* got, not put: handed to the main thread */
	unsigned int stripe;    /* the thread's stripe */
	pthread_barrier_t *hold; /* when set: wait twice before exiting */
	int hit;                /* its get of page 1 was a hit */
};

static void *user(void *arg)
{
	struct job *j = arg;
	mrmgr_region_t *r;
	uint64_t hits = cstats(j->cache).hits;

	cr_assert_eq(mrmgr_get(j->cache, j->buf, PG, RW, &j->kept), 0);
	/* Page 1 got and put twice: used, and its count back to zero. */
	for (int i = 0; i < 2; i++) {
		cr_assert_eq(mrmgr_get(j->cache, j->buf + PG, PG, RW, &r), 0);
		mrmgr_put(r);
	}
	j->hit = cstats(j->cache).hits > hits;
	j->stripe = mrmgr__tls_slot;
	if (j->hold) {
		pthread_barrier_wait(j->hold);
		pthread_barrier_wait(j->hold);
	}
	return NULL;
}

static void run_user(struct job *j)
{
	pthread_t t;

	cr_assert_eq(pthread_create(&t, NULL, user, j), 0);
	cr_assert_eq(pthread_join(t, NULL), 0);
}

static uint64_t word(const struct mrmgr_region *r, unsigned int s)
{
	return __atomic_load_n(mrmgr__ref_word(r, s), __ATOMIC_SEQ_CST);
}

/* The main thread has stripe 0 (claimed first) and a cache of 2 pages. */
static void open_two(struct fixture *f, char **buf)
{
	struct mrmgr_cache_attr a = {
		.comp_mask = MRMGR_CACHE_ATTR_FLAGS,
		.flags = MRMGR_CACHE_NO_MERGE,
	};
	mrmgr_region_t *r;

	*buf = map_rw(4 * PG, 1);
	fx_open(f, NULL, &a);
	cr_assert_eq(mrmgr_get(f->cache, *buf + 3 * PG, PG, RW, &r), 0);
	mrmgr_put(r);
	cr_assert_eq(mrmgr__tls_slot, 0u, "the main thread has stripe 0");
}

/* Nothing held, no put too many: the cache closes. */
static void close_idle(struct fixture *f, char *buf)
{
	cr_assert_eq(cstats(f->cache).regions_in_use, 0);
	cr_assert_eq(cstats(f->cache).double_puts, 0);
	fx_close(f);
	munmap(buf, 4 * PG);
}

Test(stripe_retire, a_held_reference_outlives_its_threads_stripe)
{
	struct fixture f;
	struct job j = { 0 };
	char *buf;
	uint64_t bit;

	open_two(&f, &buf);
	j.cache = f.cache;
	j.buf = buf;
	run_user(&j);
	cr_assert_neq(j.stripe, 0u);
	bit = UINT64_C(1) << j.stripe;
	cr_assert(__atomic_load_n(&mrmgr__stripes_orphan, __ATOMIC_SEQ_CST) &
		  bit, "the ended thread's stripe is an orphan");
	cr_assert_eq(mrmgr__region_refs(j.kept, f.cache->nstripes), 1);

	drive_retirement();

	cr_assert_not(__atomic_load_n(&mrmgr__stripes_seen, __ATOMIC_SEQ_CST) &
		      bit, "retired: no pass visits it");
	cr_assert_not(__atomic_load_n(&mrmgr__stripes_joined,
				      __ATOMIC_SEQ_CST) & bit);
	/* Its words hold nothing now; stripe 0 holds what they held. */
	cr_assert_eq(word(j.kept, j.stripe),
		     MRMGR__REF_BIAS | MRMGR__REF_DEAD);
	cr_assert_eq(mrmgr__region_refs(j.kept, f.cache->nstripes), 1,
		     "the ended thread's reference still holds the region");
	cr_assert_eq(mrmgr__region_state(j.kept), MRMGR__REGION_LIVE);
	/* Its last put, from this thread: idle, and the cache can go. */
	mrmgr_put(j.kept);
	cr_assert_eq(mrmgr__region_refs(j.kept, f.cache->nstripes), 0);
	close_idle(&f, buf);
}

Test(stripe_retire, a_thread_given_the_stripe_again_joins_and_hits)
{
	struct fixture f;
	struct job j = { 0 }, again = { 0 };
	char *buf;

	open_two(&f, &buf);
	j.cache = again.cache = f.cache;
	j.buf = again.buf = buf;
	run_user(&j);
	mrmgr_put(j.kept);
	drive_retirement();
	cr_assert_not(__atomic_load_n(&mrmgr__stripes_seen, __ATOMIC_SEQ_CST) &
		      (UINT64_C(1) << j.stripe));

	run_user(&again);
	cr_assert_eq(again.stripe, j.stripe, "the lowest free slot again");
	cr_assert(__atomic_load_n(&mrmgr__stripes_seen, __ATOMIC_SEQ_CST) &
		  (UINT64_C(1) << again.stripe), "given again: seen again");
	cr_assert(again.hit, "the cached page was a hit for the new thread");
	/* It joined: its word of a cached region is live and keyed, and
	 * what it got it still holds (not put). */
	cr_assert_not(word(again.kept, again.stripe) & MRMGR__REF_DEAD);
	cr_assert(word(again.kept, again.stripe) & MRMGR__REF_KEYS);
	cr_assert_eq(mrmgr__region_refs(again.kept, f.cache->nstripes), 1);
	mrmgr_put(again.kept);
	close_idle(&f, buf);
}

Test(stripe_retire, a_stripe_a_live_thread_has_is_kept)
{
	struct fixture f;
	struct job first = { 0 }, live = { 0 };
	pthread_barrier_t hold;
	pthread_t t;
	char *buf;
	uint64_t bit;

	open_two(&f, &buf);
	first.cache = live.cache = f.cache;
	first.buf = live.buf = buf;
	run_user(&first);
	mrmgr_put(first.kept);
	bit = UINT64_C(1) << first.stripe;
	cr_assert(__atomic_load_n(&mrmgr__stripes_orphan, __ATOMIC_SEQ_CST) &
		  bit);
	/* Another thread takes the slot before any retirement. */
	pthread_barrier_init(&hold, NULL, 2);
	live.hold = &hold;
	cr_assert_eq(pthread_create(&t, NULL, user, &live), 0);
	pthread_barrier_wait(&hold);
	cr_assert_eq(live.stripe, first.stripe);

	drive_retirement();

	cr_assert(__atomic_load_n(&mrmgr__stripes_seen, __ATOMIC_SEQ_CST) & bit,
		  "a live thread's stripe stays");
	cr_assert_not(word(live.kept, live.stripe) & MRMGR__REF_DEAD);
	cr_assert_eq(mrmgr__region_refs(live.kept, f.cache->nstripes), 1);
	pthread_barrier_wait(&hold);
	pthread_join(t, NULL);
	pthread_barrier_destroy(&hold);
	mrmgr_put(live.kept);
	close_idle(&f, buf);
}

/*
 * Threads come and go while others get, put and hand regions across
 * stripes, with retirements among them: no reference is lost or made up
 * (regions_in_use and double_puts at the end), whatever the order.
 */
struct churner {
	mrmgr_cache_t *cache;
	char *buf;
	int rounds;
	mrmgr_region_t *handoff;
};

static void *short_lived(void *arg)
{
	struct churner *ch = arg;

	for (int i = 0; i < 64; i++) {
		mrmgr_region_t *r, *old;

		if (mrmgr_get(ch->cache, ch->buf + (size_t)(i % 4) * PG, PG,
			      RW, &r))
			continue;
		old = __atomic_exchange_n(&ch->handoff, r, __ATOMIC_ACQ_REL);
		if (old)
			mrmgr_put(old);
	}
	return NULL;
}

static void *spawner(void *arg)
{
	struct churner *ch = arg;

	for (int i = 0; i < ch->rounds; i++) {
		pthread_t t[2];

		for (int k = 0; k < 2; k++)
			cr_assert_eq(pthread_create(&t[k], NULL, short_lived,
						    ch), 0);
		for (int k = 0; k < 2; k++)
			pthread_join(t[k], NULL);
		mrmgr__stripe_retire_tick();
	}
	return NULL;
}

Test(stripe_retire, no_reference_lost_while_threads_come_and_go)
{
	struct fixture f;
	struct churner ch = { .rounds = 200 };
	pthread_t s[2];
	char *buf;

	open_two(&f, &buf);
	ch.cache = f.cache;
	ch.buf = buf;
	for (int k = 0; k < 2; k++)
		cr_assert_eq(pthread_create(&s[k], NULL, spawner, &ch), 0);
	for (int k = 0; k < 2; k++)
		pthread_join(s[k], NULL);
	if (ch.handoff)
		mrmgr_put(ch.handoff);
	drive_retirement();
	cr_assert_eq(cstats(f.cache).regions_in_use, 0);
	cr_assert_eq(cstats(f.cache).double_puts, 0);
	cr_assert_eq(__atomic_load_n(&mrmgr__stripes_seen, __ATOMIC_SEQ_CST) &
		     ~UINT64_C(1), 0, "every ended thread's stripe retired");
	fx_close(&f);
	munmap(buf, 4 * PG);
}

/*
 * A fork child has only the forking thread: the stripes of the parent's
 * other threads, live there, are orphans in the child and retire there,
 * their references kept (the fork abandons held regions, whose sums stay
 * what they were); the parent keeps them.
 */
Test(stripe_retire, a_fork_child_retires_its_parents_other_threads_stripes)
{
	struct fixture f;
	struct job live = { 0 };
	pthread_barrier_t hold;
	pthread_t t;
	char *buf;
	uint64_t bit;
	pid_t pid;
	int status;

	open_two(&f, &buf);
	live.cache = f.cache;
	live.buf = buf;
	pthread_barrier_init(&hold, NULL, 2);
	live.hold = &hold;
	cr_assert_eq(pthread_create(&t, NULL, user, &live), 0);
	pthread_barrier_wait(&hold);
	bit = UINT64_C(1) << live.stripe;
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		int ok = (__atomic_load_n(&mrmgr__stripes_orphan,
					  __ATOMIC_SEQ_CST) & bit) != 0;

		drive_retirement();
		ok = ok && !(__atomic_load_n(&mrmgr__stripes_seen,
					     __ATOMIC_SEQ_CST) & bit) &&
		     word(live.kept, live.stripe) ==
			     (MRMGR__REF_BIAS | MRMGR__REF_DEAD) &&
		     mrmgr__region_refs(live.kept, f.cache->nstripes) == 1;
		_exit(ok ? 0 : 1);
	}
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		  "the child retired the stripe and kept the count");
	cr_assert(__atomic_load_n(&mrmgr__stripes_seen, __ATOMIC_SEQ_CST) & bit,
		  "the parent's thread still has it");
	pthread_barrier_wait(&hold);
	pthread_join(t, NULL);
	pthread_barrier_destroy(&hold);
	mrmgr_put(live.kept);
	close_idle(&f, buf);
}
