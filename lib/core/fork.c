/*
 * fork(): a child never uses its parent's cached regions.
 *
 * The child's copy of a cache describes MRs of the parent's device
 * context (with libibverbs, deregistering one in the child would destroy
 * the parent's MR through the shared command descriptor) and pages the
 * child shares copy-on-write at best. So in the child every cache forgets
 * them without deregistering, and starts empty; regions the forking
 * thread still holds are abandoned (their put does nothing). The monitor
 * starts again in the child: the parent's userfaultfd reader thread does
 * not exist there and its registrations did not survive the fork.
 *
 * The parent keeps its regions when they survive a fork: current kernels
 * copy pinned pages for the child (ibv_is_fork_initialized() says
 * IBV_FORK_UNNEEDED), and ibv_fork_init() (IBV_FORK_ENABLED) keeps them
 * out of the child. When they do not (IBV_FORK_DISABLED: the parent's
 * next store to a shared page moves it, leaving the MR on the old page;
 * and the simulated HCA, which holds pages like pre-5.9 kernels), the
 * parent's caches are purged as if everything were unmapped.
 *
 * pthread_atfork: prepare takes the list lock, every cache lock and the
 * monitor lock, so the child copies consistent state; no lock is ever
 * taken in the other order. vfork()/posix_spawn() and raw clone() run no
 * handlers: they must exec (or _exit) without using libmrmgr.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <pthread.h>
#include <string.h>

#include "cache.h"
#include "compat.h"
#include "log.h"
#include "monitor.h"

static pthread_mutex_t list_lock = PTHREAD_MUTEX_INITIALIZER;
static struct mrmgr_cache *caches;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

/* The list is linked through the caches' monitor state (c->mon). */
static struct mrmgr_cache *next_of(const struct mrmgr_cache *c)
{
	struct mrmgr__mon_cache *m = c->mon.fork_next;

	return m ? mrmgr__container_of(m, struct mrmgr_cache, mon) : NULL;
}

/* Whether c's regions do not survive a fork in the parent. */
static int purged_at_fork(const struct mrmgr_cache *c)
{
	return c->mon.fork_status == -1 ||
	       c->mon.fork_status == (int)IBV_FORK_DISABLED;
}

/*
 * A cache whose regions do not survive is purged twice, both times with
 * its lock held from prepare to the handler after the fork, so no region
 * of pages the fork shares is ever found again: before the fork, so no
 * region is live when the pages become shared (a hit takes no lock: one
 * purge after the fork alone left a window where a hit found a region
 * whose pages the parent's next store moves); after it, before the lock
 * is let go, so a registration that ran unlocked across the fork is
 * dropped (inflight.c) before it can be installed.
 */
static void prepare(void)
{
	pthread_mutex_lock(&list_lock);
	for (struct mrmgr_cache *c = caches; c; c = next_of(c)) {
		/* May have changed since creation (ibv_fork_init()). */
		if (c->mon.fork_status >= 0)
			c->mon.fork_status = mrmgr__verbs_fork_status();
		pthread_mutex_lock(&c->lock);
		if (purged_at_fork(c))
			mrmgr__core_invalidate_locked(c, 0, UINT64_MAX);
	}
	pthread_mutex_lock(&mrmgr__mon_lock);
}

static void unlock_all(void)
{
	pthread_mutex_unlock(&mrmgr__mon_lock);
	for (struct mrmgr_cache *c = caches; c; c = next_of(c))
		pthread_mutex_unlock(&c->lock);
}

static void parent(void)
{
	/* The monitor's lock first: a purge may need it (watch.c). */
	pthread_mutex_unlock(&mrmgr__mon_lock);
	for (struct mrmgr_cache *c = caches; c; c = next_of(c)) {
		if (purged_at_fork(c)) {
			mrmgr__core_invalidate_locked(c, 0, UINT64_MAX);
			c->mon.fork_purges++;
		}
		pthread_mutex_unlock(&c->lock);
	}
	pthread_mutex_unlock(&list_lock);
}

/* A fork child: registrations under way belonged to other threads. */
static void cache_fork_child(struct mrmgr_cache *c)
{
	/* Their threads do not exist here; nobody waits for them either. */
	c->inflight.prev = c->inflight.next = &c->inflight;
	c->reap = NULL;
	c->age_hand = NULL;
	c->inflight_waiters = 0;
	pthread_cond_init(&c->inflight_done, NULL);
}

/* Forget every region of c. Only this thread exists; no allocation. */
static void forget_all(struct mrmgr_cache *c)
{
	c->free_list = NULL;
	for (size_t i = c->nall; i-- > 0;) {
		struct mrmgr_region *r = c->all[i];
		int st = mrmgr__region_state(r);

		r->watch.joined = 0;
		if (st == MRMGR__REGION_ABANDONED)
			continue;
		if (st != MRMGR__REGION_FREE &&
		    (st == MRMGR__REGION_DETACHED ||
		     mrmgr__region_refs(r, c->nstripes) != 0)) {
			/* Held by the forking thread (or by a thread that does
			 * not exist here): never recycled, its put is a no-op. */
			mrmgr__region_set_state(r, MRMGR__REGION_ABANDONED);
			continue;
		}
		r->mr = NULL;
		r->lru.prev = r->lru.next = NULL;
		mrmgr__region_set_state(r, MRMGR__REGION_FREE);
		r->free_next = c->free_list;
		c->free_list = r;
	}
	c->seq += 2;
	mrmgr__itree_init(&c->tree);
	mrmgr__lookup_clear(c); /* the tree's index goes with it */
	c->lru.prev = c->lru.next = &c->lru;
	c->held.prev = c->held.next = &c->held;
	c->nregions = c->ncached = c->pinned_bytes = 0;
	cache_fork_child(c);
	mrmgr__mon_queue_attach(&c->mon, &c->mon_seen);
	c->mon.fork_purges++;
}

static void child(void)
{
	mrmgr__mon_queue_fork_child();
	mrmgr__mon_sources_fork_child();
	for (struct mrmgr_cache *c = caches; c; c = next_of(c))
		forget_all(c);
	unlock_all();
	pthread_mutex_unlock(&list_lock);
}

static void register_atfork(void)
{
	if (pthread_atfork(prepare, parent, child))
		mrmgr__err("pthread_atfork failed: a fork child would see its "
			   "parent's cached regions");
}

/*
 * The calling thread's stripe was given for the first time (region.h,
 * mrmgr__stripes_seen): its words of every live region go live. Each
 * cache only when its lock is free now (no wait, so no order against a
 * lock the caller may hold): one that was busy is joined at a later
 * get, and meanwhile this thread's hits there take the slow path.
 */
void mrmgr__stripe_join(void)
{
	unsigned int s = mrmgr__tls_join - 1;
	int all = 1;

	pthread_mutex_lock(&list_lock);
	for (struct mrmgr_cache *c = caches; c; c = next_of(c)) {
		if (pthread_mutex_trylock(&c->lock)) {
			all = 0;
			continue;
		}
		mrmgr__region_stripe_join(c, s);
		pthread_mutex_unlock(&c->lock);
	}
	pthread_mutex_unlock(&list_lock);
	if (all) {
		__atomic_fetch_or(&mrmgr__stripes_joined, UINT64_C(1) << s,
				  __ATOMIC_RELEASE);
		mrmgr__tls_join = 0;
	}
}

/*
 * Orphan stripes are retired after 1,024 gets off the fast path at least,
 * and four per region the passes walk: a retirement walks every region
 * of every cache, and a thread given the stripe again joins with another
 * walk, so a process whose threads come and go pays a walk per some
 * thousands of misses at most, not one per thread. Each thread counts its
 * own gets and looks every RETIRE_LOOK of them (no shared line written
 * per get, even while an orphan waits for a lock that is never free);
 * the looks add up in retire_gets.
 */
#define RETIRE_LOOK 256u
#define RETIRE_AFTER 1024u

static __thread unsigned int look_in, look_at
	__attribute__((tls_model("initial-exec")));
static uint64_t retire_gets;
uint64_t mrmgr__stripes_retired;

/* Every cache's lock too, without waiting (the caller may hold one, or
 * a lock of its own another holder waits for). 1: all held. */
static int trylock_all(void)
{
	struct mrmgr_cache *c;

	for (c = caches; c; c = next_of(c))
		if (pthread_mutex_trylock(&c->lock))
			break;
	if (!c)
		return 1;
	for (struct mrmgr_cache *u = caches; u != c; u = next_of(u))
		pthread_mutex_unlock(&u->lock);
	return 0;
}

static void retire(uint64_t orphans)
{
	for (; orphans; orphans &= orphans - 1) {
		unsigned int s = (unsigned int)__builtin_ctzll(orphans);
		uint64_t bit = UINT64_C(1) << s;

		if (!mrmgr__stripe_reserve(s))
			continue; /* given again, or shared: it stays */
		for (struct mrmgr_cache *c = caches; c; c = next_of(c))
			mrmgr__region_stripe_retire(c, s);
		/* Before a thread may claim it again (unreserve): that one
		 * sets its bit and joins. */
		__atomic_fetch_and(&mrmgr__stripes_seen, ~bit, __ATOMIC_SEQ_CST);
		__atomic_fetch_and(&mrmgr__stripes_joined, ~bit,
				   __ATOMIC_SEQ_CST);
		mrmgr__stripe_unreserve(s);
		__atomic_fetch_add(&mrmgr__stripes_retired, 1,
				   __ATOMIC_RELAXED);
	}
}

void mrmgr__stripe_retire_tick(void)
{
	uint64_t gets, walk = 0;

	if (++look_in < (look_at ? look_at : RETIRE_LOOK))
		return;
	gets = __atomic_add_fetch(&retire_gets, look_in, __ATOMIC_RELAXED);
	look_in = 0;
	look_at = RETIRE_LOOK;
	if (gets < RETIRE_AFTER)
		return;
	look_at = 16; /* busy: again a little later */
	if (pthread_mutex_trylock(&list_lock))
		return;
	if (!trylock_all()) {
		pthread_mutex_unlock(&list_lock);
		return;
	}
	look_at = RETIRE_LOOK;
	/* The regions of now: a large cache destroyed since no longer
	 * counts. */
	for (struct mrmgr_cache *c = caches; c; c = next_of(c))
		walk += c->nall;
	if (gets >= 4 * walk) {
		retire(__atomic_exchange_n(&mrmgr__stripes_orphan, 0,
					   __ATOMIC_SEQ_CST));
		__atomic_store_n(&retire_gets, 0, __ATOMIC_RELAXED);
	}
	for (struct mrmgr_cache *c = caches; c; c = next_of(c))
		pthread_mutex_unlock(&c->lock);
	pthread_mutex_unlock(&list_lock);
}

void mrmgr__fork_track(struct mrmgr_cache *c)
{
	pthread_once(&atfork_once, register_atfork);
	pthread_mutex_lock(&list_lock);
	c->mon.fork_next = caches ? &caches->mon : NULL;
	caches = c;
	pthread_mutex_unlock(&list_lock);
}

void mrmgr__fork_untrack(struct mrmgr_cache *c)
{
	pthread_mutex_lock(&list_lock);
	if (caches == c) {
		caches = next_of(c);
	} else {
		for (struct mrmgr_cache *p = caches; p; p = next_of(p)) {
			if (p->mon.fork_next == &c->mon) {
				p->mon.fork_next = c->mon.fork_next;
				break;
			}
		}
	}
	pthread_mutex_unlock(&list_lock);
}
