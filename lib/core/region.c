/*
 * Region helpers shared by the cache's fast and slow paths, and the public
 * accessors.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "cache.h"
#include "log.h"
#include "pool.h"
#include "region.h"

#define MAX_STRIPES 64

/* The calling thread's stripe (stripes.c gives them). */
__thread unsigned int mrmgr__tls_slot
	__attribute__((tls_model("initial-exec"))) = ~0u;
__thread uintptr_t mrmgr__tls_words
	__attribute__((tls_model("initial-exec")));
__thread unsigned int mrmgr__tls_join
	__attribute__((tls_model("initial-exec")));

struct mrmgr__layout mrmgr__layout;

uint64_t mrmgr__stripes_seen;
uint64_t mrmgr__stripes_joined = 1; /* stripe 0 is always kept */

static uintptr_t align_up(uintptr_t v, uintptr_t to)
{
	return (v + to - 1) & ~(to - 1);
}

static pthread_once_t layout_once = PTHREAD_ONCE_INIT;

static void layout_init(void)
{
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	unsigned int n = 4;
	uintptr_t per;
	uint32_t count;

	/*
	 * Twice the CPUs (threads beyond them share stripes anyway, and a
	 * few more slots keep a busy thread from sharing with one that came
	 * and went), at least 4, at most MAX_STRIPES.
	 */
	while (cpus > 0 && n < 2 * (unsigned long)cpus && n < MAX_STRIPES)
		n *= 2;
	/* Regions 1..count, then n arrays of count + 1 entries (a word and
	 * the keys, region.h), each array starting on a cache line. */
	per = MRMGR__REGION_SIZE + n * ((uintptr_t)1 << MRMGR__REF_ENTRY_SHIFT);
	count = (uint32_t)((MRMGR__SLAB_SIZE - MRMGR__REGION_SIZE -
			    n * MRMGR__CACHELINE) / per);
	mrmgr__layout.per_slab = count;
	mrmgr__layout.words = align_up((uintptr_t)(count + 1) *
					       MRMGR__REGION_SIZE,
				       MRMGR__CACHELINE);
	mrmgr__layout.stride = align_up((uintptr_t)(count + 1)
						<< MRMGR__REF_ENTRY_SHIFT,
					MRMGR__CACHELINE);
	__atomic_store_n(&mrmgr__layout.nstripes, n, __ATOMIC_RELEASE);
}

unsigned int mrmgr__stripes(void)
{
	unsigned int n = __atomic_load_n(&mrmgr__layout.nstripes,
					 __ATOMIC_ACQUIRE);

	if (mrmgr__unlikely(!n)) {
		pthread_once(&layout_once, layout_init);
		n = mrmgr__layout.nstripes;
	}
	return n;
}

/* r's word of stripe 0; stripe i's is i * *step words on (one load of
 * the layout for a whole pass, not one per stripe). */
static inline uint64_t *words_of(const struct mrmgr_region *r, uintptr_t *step)
{
	*step = mrmgr__layout.stride / sizeof(uint64_t);
	return mrmgr__ref_word_at(r, mrmgr__layout.words);
}

/*
 * Every word of r to (word | set) & ~clear, one read-modify-write each;
 * returns the sum of the counts the words held just before (in units of
 * MRMGR__REF_ONE, wrapping like the biased words) and ORs those words
 * into *had. A word already as asked is only read.
 *
 * Why one compare-and-swap may carry several bits: only the lock's holder
 * writes DEAD and KEYS, and hits and puts only add to the count and set
 * USED, so the swap fails only when a count or USED moved meanwhile, and
 * is retried on the new value; what it writes keeps theirs. The
 * read-modify-write is one point in the word's order, like a
 * fetch_or/fetch_and: a hit's add comes before it (and is in the value
 * returned) or after it (and sees the new bits). Every change of DEAD or
 * KEYS goes through here.
 */
static uint64_t flip_words(struct mrmgr_region *r, uint64_t kept,
			   uint64_t set, uint64_t clear, uint64_t *had)
{
	uint64_t sum = 0, any = 0;
	uintptr_t step;
	uint64_t *w0 = words_of(r, &step);

	/* The stripes kept (region.h): the others hold DEAD, no count. */
	while (kept) {
		uint64_t *w = w0 + (uintptr_t)__builtin_ctzll(kept) * step;
		uint64_t old = __atomic_load_n(w, __ATOMIC_SEQ_CST), next;

		kept &= kept - 1;
		while ((next = (old | set) & ~clear) != old &&
		       !__atomic_compare_exchange_n(w, &old, next, 0,
						    __ATOMIC_SEQ_CST,
						    __ATOMIC_RELAXED))
			;
		sum += (old & ~(MRMGR__REF_ONE - 1)) - MRMGR__REF_BIAS;
		any |= old;
	}
	*had = any;
	return sum;
}

/*
 * Copy r's keys beside every stripe's word; MRMGR__REF_KEYS, the bit to
 * set after (the swap that sets it releases them), or 0 when r has no
 * keys a hit may take from there.
 */
static uint64_t store_keys(struct mrmgr_region *r, uint64_t kept)
{
	const struct mrmgr_cache *c = r->cache;
	uint64_t k;
	uintptr_t step;
	uint64_t *w0 = words_of(r, &step);

	if (!r->mr || (c->flags & MRMGR__CACHE_EXT_GET))
		return 0;
	k = (uint64_t)r->mr->rkey << 32 | r->mr->lkey;
	/* The stripes the flip after it sets the bit on: the same mask. */
	for (; kept; kept &= kept - 1)
		__atomic_store_n(&w0[(uintptr_t)__builtin_ctzll(kept) * step + 1],
				 k, __ATOMIC_RELAXED);
	return MRMGR__REF_KEYS;
}

void mrmgr__region_stripe_join(struct mrmgr_cache *c, unsigned int s)
{
	for (size_t i = 0; i < c->nall; i++) {
		struct mrmgr_region *r = c->all[i];
		uint64_t one, set, had;

		/* Every other state keeps DEAD on every stripe. */
		if (__atomic_load_n(&r->state, __ATOMIC_RELAXED) !=
		    MRMGR__REGION_LIVE)
			continue;
		one = UINT64_C(1) << s;
		set = store_keys(r, one);
		(void)flip_words(r, one, set,
				 MRMGR__REF_DEAD | (MRMGR__REF_KEYS ^ set), &had);
	}
}

void mrmgr__region_stripe_retire(struct mrmgr_cache *c, unsigned int s)
{
	const uint64_t marks = MRMGR__REF_USED;

	/*
	 * Every region, not only live ones: a count may sit on a stripe of
	 * a released region, another stripe holding its opposite (a get on
	 * one thread, the put on another); the sum is what counts. Nobody
	 * writes stripe s now (reserved, its threads ended); the slot-0
	 * thread's hits and puts write stripe 0, hence the atomic adds. The
	 * add comes first: a reader summing without the lock in between
	 * counts the reference twice, never not at all.
	 */
	for (size_t i = 0; i < c->nall; i++) {
		struct mrmgr_region *r = c->all[i];
		uint64_t *w0 = mrmgr__ref_word(r, 0), *ws = mrmgr__ref_word(r, s);
		uint64_t v = __atomic_load_n(ws, __ATOMIC_SEQ_CST);
		uint64_t count = (v & ~(MRMGR__REF_ONE - 1)) - MRMGR__REF_BIAS;

		if (count)
			__atomic_fetch_add(w0, count, __ATOMIC_SEQ_CST);
		if (v & marks)
			__atomic_fetch_or(w0, v & marks, __ATOMIC_RELAXED);
		__atomic_store_n(ws, MRMGR__REF_BIAS | MRMGR__REF_DEAD,
				 __ATOMIC_SEQ_CST);
	}
}

void mrmgr__region_set_state(struct mrmgr_region *r, int state)
{
	int was = __atomic_load_n(&r->state, __ATOMIC_RELAXED);
	int live = state == MRMGR__REGION_LIVE;
	uint64_t had;

	/* Only the lock's holder changes states. Release, not seq_cst (an
	 * xchg on x86): what orders it for readers outside the lock is the
	 * flip's read-modify-writes after it (a release each), and readers
	 * under the lock have the lock. */
	__atomic_store_n(&r->state, state, __ATOMIC_RELEASE);
	if ((was == MRMGR__REGION_LIVE) == live)
		return;
	(void)flip_words(r, mrmgr__stripes_kept(r->cache->nstripes),
			 live ? 0 : MRMGR__REF_DEAD, live ? MRMGR__REF_DEAD : 0,
			 &had);
}

void mrmgr__region_set_keys(struct mrmgr_region *r)
{
	uint64_t kept = mrmgr__stripes_kept(r->cache->nstripes);
	uint64_t set = store_keys(r, kept), had;

	if (!set)
		mrmgr__region_clear_keys(r);
	else
		(void)flip_words(r, kept, set, 0, &had);
}

void mrmgr__region_clear_keys(struct mrmgr_region *r)
{
	uintptr_t step;
	uint64_t had;

	/*
	 * Only the lock's holder sets or clears the bit, a whole pass at a
	 * time, so under the lock every stripe has it as stripe 0 does:
	 * clear there (an eviction's mark cleared it), nothing to write.
	 */
	if (!(__atomic_load_n(words_of(r, &step), __ATOMIC_RELAXED) &
	      MRMGR__REF_KEYS))
		return;
	(void)flip_words(r, mrmgr__stripes_kept(r->cache->nstripes), 0,
			 MRMGR__REF_KEYS, &had);
}

int64_t mrmgr__region_leave(struct mrmgr_region *r, int state, uint64_t clear,
			    uint64_t *had)
{
	uint64_t sum;

	/* Only the lock's holder changes states (release: as in
	 * mrmgr__region_set_state()). */
	__atomic_store_n(&r->state, state, __ATOMIC_RELEASE);
	/*
	 * The sum is taken from the words as each read-modify-write found
	 * them, not read again after the last one: every get that succeeds
	 * on a stripe added to it before the mark there (after, it sees
	 * DEAD and backs off), and a put only counts if it came before the
	 * mark of its stripe, so the sum is at least the true count once
	 * every stripe is marked (check.c's argument holds as it is). A
	 * put that comes later sees DEAD and takes the slow path.
	 */
	sum = flip_words(r, mrmgr__stripes_kept(r->cache->nstripes),
			 MRMGR__REF_DEAD, clear, had);
	return (int64_t)sum / (int64_t)MRMGR__REF_ONE;
}

void mrmgr__region_go_live(struct mrmgr_region *r)
{
	uint64_t kept = mrmgr__stripes_kept(r->cache->nstripes);
	uint64_t set = store_keys(r, kept), had;

	__atomic_store_n(&r->state, MRMGR__REGION_LIVE, __ATOMIC_RELEASE);
	/* Keyed and live in one pass (set_keys() then set_state() made
	 * two): a hit that finds the region live finds the keys. */
	(void)flip_words(r, kept, set,
			 MRMGR__REF_DEAD | (MRMGR__REF_KEYS ^ set), &had);
}

void mrmgr__region_ref_new(struct mrmgr_region *r, unsigned int slot)
{
	r->fresh = 1;
	__atomic_fetch_add(mrmgr__ref_word(r, slot), MRMGR__REF_ONE,
			   __ATOMIC_SEQ_CST);
}

void mrmgr__region_go_live_ref(struct mrmgr_region *r, unsigned int slot)
{
	uint64_t one = UINT64_C(1) << slot;
	uint64_t kept = mrmgr__stripes_kept(r->cache->nstripes) | one;
	uint64_t set = store_keys(r, kept), had;
	uint64_t clear = MRMGR__REF_DEAD | (MRMGR__REF_KEYS ^ set);
	uint64_t *w = mrmgr__ref_word(r, slot);
	uint64_t old = __atomic_load_n(w, __ATOMIC_SEQ_CST);

	/* The "new" mark is the region's (only the lock's holder reads or
	 * writes it): clearing it was a locked and of a word the hand
	 * passes, once per miss. */
	r->fresh = 1;
	__atomic_store_n(&r->state, MRMGR__REGION_LIVE, __ATOMIC_RELEASE);
	/* The reference and the state bits of slot's word in one swap (a
	 * stale reader's add or drop meanwhile makes it retry), then the
	 * other stripes as mrmgr__region_go_live() does. */
	while (!__atomic_compare_exchange_n(
		w, &old, ((old | set) & ~clear) + MRMGR__REF_ONE, 0,
		__ATOMIC_SEQ_CST, __ATOMIC_RELAXED))
		;
	(void)flip_words(r, kept & ~one, set, clear, &had);
}

int mrmgr__region_look(struct mrmgr_region *r, unsigned int nstripes,
		       int *used)
{
	const uint64_t bits = MRMGR__REF_USED;
	uint64_t sum = 0, had = 0, any = 0;
	uint64_t seen = mrmgr__stripes_kept(nstripes);
	uintptr_t step;
	uint64_t *w0 = words_of(r, &step);

	/*
	 * One pass: the words' counts (bias included, wrapping) and which
	 * stripes have a bit set; then clear those, only when idle. Only
	 * the stripes a thread was ever given, and stripe 0 (check.c undoes
	 * there): no other can hold a count or a bit. A thread given one
	 * since the load is seen by what decides (mrmgr__region_leave()
	 * sums every stripe): this is the hand's guess, and a wrong
	 * "idle" only costs the leave's undo.
	 */
	while (seen) {
		unsigned int i = (unsigned int)__builtin_ctzll(seen);
		uint64_t w = __atomic_load_n(w0 + i * step, __ATOMIC_SEQ_CST);

		seen &= seen - 1;
		sum += (w & ~(MRMGR__REF_ONE - 1)) - MRMGR__REF_BIAS;
		had |= (uint64_t)!!(w & bits) << i;
		any |= w;
	}
	*used = any & MRMGR__REF_USED ? 2 : r->fresh ? 1 : 0;
	if (sum)
		return 1;
	r->fresh = 0;
	while (had) {
		unsigned int i = (unsigned int)__builtin_ctzll(had);

		had &= had - 1;
		__atomic_fetch_and(w0 + i * step, ~bits, __ATOMIC_RELAXED);
	}
	return 0;
}

int mrmgr__region_take_used(struct mrmgr_region *r, unsigned int nstripes)
{
	const uint64_t bits = MRMGR__REF_USED;
	uint64_t seen = __atomic_load_n(&mrmgr__stripes_seen, __ATOMIC_ACQUIRE);
	uintptr_t step;
	uint64_t *w0 = words_of(r, &step);
	int used = r->fresh ? 1 : 0;

	r->fresh = 0;

	/* Only stripes a thread was ever given can hold a bit: one line per
	 * thread that ever ran here, not one per stripe (region.h). */
	if (nstripes < 64)
		seen &= (UINT64_C(1) << nstripes) - 1;
	while (seen) {
		uint64_t *w = w0 + __builtin_ctzll(seen) * step;
		uint64_t v = __atomic_load_n(w, __ATOMIC_RELAXED);

		seen &= seen - 1;
		/* Looked at first: clearing writes a line its thread keeps
		 * hot. */
		if (v & bits) {
			__atomic_fetch_and(w, ~bits, __ATOMIC_RELAXED);
			used |= 2;
		}
	}
	return used & 2 ? 2 : used;
}

/* ------------------------------------------------------------ slabs */

struct mrmgr_region *mrmgr__region_carve(struct mrmgr__region_slabs *rs)
{
	struct mrmgr__region_slab *s = rs->newest;
	unsigned int nstripes = mrmgr__stripes();
	struct mrmgr_region *r;

	_Static_assert(sizeof(struct mrmgr__region_slab) <= MRMGR__REGION_SIZE,
		       "the slab header fits a region's place");
	_Static_assert(sizeof(struct mrmgr_region) <= MRMGR__REGION_SIZE,
		       "regions fit their places");
	if (!s || s->used == mrmgr__layout.per_slab) {
		/* The first slab of a cache stays on small pages: a small
		 * cache should not cost a huge page. */
		s = mrmgr__pool_alloc(MRMGR__SLAB_SIZE, rs->newest != NULL);
		if (!s)
			return NULL;
		s->next = rs->newest;
		rs->newest = s;
	}
	r = (struct mrmgr_region *)((char *)s +
				    (uintptr_t)++s->used * MRMGR__REGION_SIZE);
	for (unsigned int i = 0; i < nstripes; i++)
		*mrmgr__ref_word(r, i) =
			MRMGR__REF_BIAS | MRMGR__REF_DEAD;
	return r;
}

uint64_t mrmgr__region_slabs_hits(const struct mrmgr__region_slabs *rs)
{
	uint64_t hits = 0;
	unsigned int n = mrmgr__stripes();

	for (const struct mrmgr__region_slab *s = rs->newest; s; s = s->next)
		for (unsigned int i = 0; i < n; i++)
			hits += MRMGR__READ_ONCE(*mrmgr__hit_counter(
				s, mrmgr__layout.words +
					   i * mrmgr__layout.stride));
	return hits;
}

void mrmgr__region_slabs_free(struct mrmgr__region_slabs *rs)
{
	while (rs->newest) {
		struct mrmgr__region_slab *s = rs->newest;

		rs->newest = s->next;
		mrmgr__pool_free(s, MRMGR__SLAB_SIZE);
	}
}

int64_t mrmgr__region_refs(const struct mrmgr_region *r, unsigned int nstripes)
{
	uint64_t sum = 0;
	uintptr_t step;
	const uint64_t *w = words_of(r, &step);

	/* Biased words add up wrapping, as in mrmgr__region_look(). */
	for (unsigned int i = 0; i < nstripes; i++, w += step)
		sum += (__atomic_load_n(w, __ATOMIC_SEQ_CST) &
			~(MRMGR__REF_ONE - 1)) - MRMGR__REF_BIAS;
	return (int64_t)sum / (int64_t)MRMGR__REF_ONE;
}

/* The MR the plain accessors report: a feature says which when it
 * answers the cache's gets (a multi-PD cache: the first PD's). */
static inline struct ibv_mr *plain_mr(const struct mrmgr_region *r)
{
	if (mrmgr__unlikely(r->cache->flags & MRMGR__CACHE_EXT_GET))
		return mrmgr__ext_region_mr(r);
	return r->mr;
}

MRMGR_EXPORT struct ibv_mr *mrmgr_region_mr(const mrmgr_region_t *region)
{
	return region ? plain_mr(region) : NULL;
}

/*
 * The keys as the hit left them: the calling thread's reference entry of
 * the region, on the line its get just wrote (region.h). UINT64_MAX when
 * they are not there (a thread without a stripe, a multi-PD cache): then
 * the MR is read.
 */
static inline uint64_t copied_keys(const struct mrmgr_region *r)
{
	uintptr_t words = mrmgr__tls_words;
	const uint64_t *e;

	if (mrmgr__unlikely(!words))
		return UINT64_MAX;
	e = mrmgr__ref_word_at(r, words);
	if (mrmgr__unlikely(!(__atomic_load_n(e, __ATOMIC_ACQUIRE) &
			      MRMGR__REF_KEYS)))
		return UINT64_MAX;
	return __atomic_load_n(&e[1], __ATOMIC_RELAXED);
}

static __attribute__((noinline)) uint32_t mr_key(const mrmgr_region_t *region,
						 int remote)
{
	struct ibv_mr *mr = region ? plain_mr(region) : NULL;

	return !mr ? 0 : remote ? mr->rkey : mr->lkey;
}

MRMGR_EXPORT uint32_t mrmgr_region_lkey(const mrmgr_region_t *region)
{
	uint64_t k;

	if (mrmgr__likely(region != NULL) &&
	    mrmgr__likely((k = copied_keys(region)) != UINT64_MAX))
		return (uint32_t)k;
	return mr_key(region, 0);
}

MRMGR_EXPORT uint32_t mrmgr_region_rkey(const mrmgr_region_t *region)
{
	uint64_t k;

	if (mrmgr__likely(region != NULL) &&
	    mrmgr__likely((k = copied_keys(region)) != UINT64_MAX))
		return (uint32_t)(k >> 32);
	return mr_key(region, 1);
}

/* The keys and the MR go through their own accessors (the keys' copy
 * beside the caller's reference word, a feature that answers for the MR);
 * the range, access and generation are the region's own fields. */
MRMGR_EXPORT int mrmgr_region_query(const mrmgr_region_t *region,
				    struct mrmgr_region_info *info,
				    size_t size)
{
	struct mrmgr_region_info one;

	if (!region || !info || !size) {
		mrmgr__err("mrmgr_region_query: %s", !region ? "NULL region"
			   : !info ? "NULL info" : "size 0");
		return EINVAL;
	}
	memset(&one, 0, sizeof(one));
	one.addr = (void *)(uintptr_t)mrmgr__region_start(region);
	one.length = (size_t)mrmgr__region_len(region);
	one.access = region->access;
	one.lkey = mrmgr_region_lkey(region);
	one.rkey = mrmgr_region_rkey(region);
	one.generation = region->gen;
	one.mr = mrmgr_region_mr(region);
	memcpy(info, &one, size < sizeof(one) ? size : sizeof(one));
	return 0;
}
