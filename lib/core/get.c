/*
 * mrmgr_get(): the hit path inline (fast_hit()), then get(): the lock-free
 * hit with retries and the tree (mrmgr__core_try_hit()), then, under the
 * lock, mrmgr__core_get_locked(): look again, else miss (miss.c).
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cache.h"
#include "config_env.h"
#include "core.h"
#include "evict.h"
#include "ext.h"
#include "hit.h"
#include "log.h"
#include "request.h"

#define HIT_ATTEMPTS 4
#define HIT_MAX_STEPS 256

static int region_has_access(const struct mrmgr__itree_node *n, const void *arg)
{
	unsigned int need = *(const unsigned int *)arg;

	return (MRMGR__READ_ONCE(mrmgr__node_region(n)->access) & need) == need;
}

static struct mrmgr_region *lookup_locked(struct mrmgr_cache *c, uint64_t start,
					  uint64_t last, unsigned int access)
{
	const struct mrmgr__lk_table *t = c->lk;
	struct mrmgr__itree_node *n;
	int gave_up = 0;

	if (t) {
		/* Under the lock the index is exact: the tree only for what
		 * it does not hold. */
		struct mrmgr_region *r = mrmgr__lookup_find(
			t, start, start >> c->page_shift, last >> c->page_shift,
			mrmgr__lk_access_tag(access));

		if (r || !t->partial)
			return r;
	}
	n = mrmgr__itree_find_containing(&c->tree, start, last,
					 region_has_access, &access, UINT_MAX,
					 &gave_up);
	return n ? mrmgr__node_region(n) : NULL;
}

/* A hit took a reference and the word before was old. */
static inline void mark_used(struct mrmgr_region *r, unsigned int slot,
			     uint64_t old)
{
	if (!(old & MRMGR__REF_USED))
		mrmgr__ref_mark_used(mrmgr__ref_word(r, slot));
}

/*
 * A region that contains [start, last] with access, or NULL; unvalidated.
 * *sure: NULL means there is none (if the sequence count agrees).
 */
static inline struct mrmgr_region *candidate(struct mrmgr_cache *c,
					     uint64_t start, uint64_t last,
					     unsigned int access, int *sure)
{
	const struct mrmgr__lk_table *t =
		__atomic_load_n(&c->lk, __ATOMIC_ACQUIRE);
	struct mrmgr__itree_node *n;
	int gave_up = 0;

	if (mrmgr__likely(t != NULL)) {
		struct mrmgr_region *r = mrmgr__lookup_find(
			t, start, start >> c->page_shift, last >> c->page_shift,
			mrmgr__lk_access_tag(access));

		if (r || !MRMGR__READ_ONCE(t->partial)) {
			*sure = 1;
			return r;
		}
	}
	/* No index, or regions it does not hold: the tree. */
	n = mrmgr__itree_find_containing(&c->tree, start, last,
					 region_has_access, &access,
					 HIT_MAX_STEPS, &gave_up);
	*sure = !gave_up;
	return n ? mrmgr__node_region(n) : NULL;
}

/*
 * The lock-free hit path. NULL: go to the slow path; *miss_seq is then
 * the (even) sequence count at which the lookup was sure there is no
 * such region, or stays odd when it could not tell.
 */
static struct mrmgr_region *try_hit(struct mrmgr_cache *c, uint64_t start,
				    uint64_t last, unsigned int access,
				    unsigned int slot, uint64_t *miss_seq)
{
	for (int attempt = 0; attempt < HIT_ATTEMPTS; attempt++) {
		uint64_t seq = __atomic_load_n(&c->seq, __ATOMIC_ACQUIRE);
		struct mrmgr_region *r;
		int sure = 0, dead = 0;

		if (seq & 1)
			continue;
		r = candidate(c, start, last, access, &sure);
		if (!r) {
			__atomic_thread_fence(__ATOMIC_ACQUIRE);
			if (sure &&
			    __atomic_load_n(&c->seq, __ATOMIC_RELAXED) == seq) {
				*miss_seq = seq;
				return NULL; /* a true miss */
			}
			continue;
		}
		/*
		 * r is a region of this cache (type-stable memory), though
		 * perhaps not the one the tree holds now: reference it; the
		 * word before says whether it was live (the reference and a
		 * remover's state change are ordered on this word: one sees
		 * the other); then check nothing changed since seq, so it is
		 * what the index said: it contains the range, with access
		 * (hit.h).
		 */
		if (mrmgr__hit_ref(c, r, mrmgr__slot_words(slot), seq, &dead))
			return r;
		if (dead)
			mrmgr__cache_put_slow(c, r);
	}
	return NULL;
}

struct mrmgr_region *mrmgr__core_try_hit(struct mrmgr_cache *c, uint64_t start,
					 uint64_t last, unsigned int access,
					 unsigned int slot)
{
	uint64_t miss_seq = 1;

	if (!(c->flags & MRMGR_CACHE_DISABLE) && mrmgr__mon_quiet(&c->mon_seen))
		return try_hit(c, start, last, access, slot, &miss_seq);
	return NULL;
}

static int get_pd_locked(struct mrmgr_cache *c, struct ibv_pd *pd,
			 uint64_t start, uint64_t last, unsigned int access,
			 unsigned int slot, unsigned int gflags,
			 uint64_t miss_seq, struct mrmgr_region **out);

/* What the two checkers accept; 0 sends the caller to them for the error
 * and its log line. */
static inline int args_ok(uintptr_t a, size_t length, unsigned int access,
			  uint64_t page_mask)
{
	return a && length && !mrmgr__range_wraps(a, length, page_mask) &&
	       !mrmgr__unknown_access(access) &&
	       !mrmgr__remote_write_without_local(access);
}

/* The body of mrmgr_get() and mrmgr_get_ex(); pd: the PD asked for (NULL:
 * the cache's first). Inlined in both: a miss walks enough frames.
 * miss_seq: even when the caller's own lock-free lookup of this request
 * was sure, at that sequence count, that nothing answers it (fast_hit());
 * odd when none was. */
static inline __attribute__((always_inline)) int
get(struct mrmgr_cache *c, struct ibv_pd *pd, void *addr, size_t length,
    unsigned int access, struct mrmgr_region **region, uint64_t miss_seq)
{
	uint64_t start, last;
	unsigned int slot;
	struct mrmgr_region *r;
	uint64_t page_mask;
	int ret;

	if (!c || !region) {
		mrmgr__err("mrmgr_get: NULL %s", !c ? "cache" : "region pointer");
		return EINVAL;
	}
	page_mask = ((uint64_t)1 << c->page_shift) - 1;
	if (mrmgr__likely(args_ok((uintptr_t)addr, length, access, page_mask))) {
		start = (uintptr_t)addr & ~page_mask;
		last = ((uintptr_t)addr + (length - 1)) | page_mask;
	} else {
		/* Which check failed, and its log line. */
		ret = mrmgr__cache_check_range("mrmgr_get", addr, length,
					       page_mask, &start, &last);
		if (!ret)
			ret = mrmgr__core_check_access("mrmgr_get", access);
		if (ret)
			return ret;
	}

	slot = mrmgr__thread_slot() & (c->nstripes - 1);
	/* A stripe given for the first time: its words go live (region.h). */
	if (mrmgr__unlikely(mrmgr__tls_join))
		mrmgr__stripe_join();
	/* A stripe whose threads all ended: retired now and then. */
	if (mrmgr__unlikely(__atomic_load_n(&mrmgr__stripes_orphan,
					    __ATOMIC_RELAXED)))
		mrmgr__stripe_retire_tick();
	if (mrmgr__unlikely(c->flags & MRMGR__CACHE_EXT_GET))
		return mrmgr__ext_get(c, pd, start, last, access, slot, region);
	/* A cache of one PD: that PD is the only one it serves. */
	if (mrmgr__unlikely(pd && pd != c->pd)) {
		mrmgr__err("mrmgr_get_ex: the cache does not serve PD %p",
			   (void *)pd);
		return EINVAL;
	}
	/* A lookup already sure of its miss is not made twice. */
	if ((miss_seq & 1) &&
	    mrmgr__likely(!(c->flags & MRMGR_CACHE_DISABLE)) &&
	    mrmgr__likely(mrmgr__mon_quiet(&c->mon_seen))) {
		r = try_hit(c, start, last, access, slot, &miss_seq);
		if (r)
			goto got;
	}

	mrmgr__cache_lock(c);
	ret = get_pd_locked(c, NULL, start, last, access, slot,
			    MRMGR__GET_MAY_UNLOCK, miss_seq, &r);
	pthread_mutex_unlock(&c->lock);
	if (ret)
		return ret;
got:
	/* MRMGR_CHECK=stale (stale.c; it keeps gets off fast_hit()). */
	if (mrmgr__unlikely(c->flags & MRMGR_CACHE_CHECK_STALE))
		return c->check_get(c, start, last, access, slot, r, region);
	*region = r;
	return 0;
}

int mrmgr__core_get_locked(struct mrmgr_cache *c, uint64_t start,
			   uint64_t last, unsigned int access,
			   unsigned int slot, unsigned int gflags,
			   struct mrmgr_region **out)
{
	return mrmgr__core_get_pd_locked(c, NULL, start, last, access, slot,
					 gflags, out);
}

int mrmgr__core_get_pd_locked(struct mrmgr_cache *c, struct ibv_pd *pd,
			      uint64_t start, uint64_t last,
			      unsigned int access, unsigned int slot,
			      unsigned int gflags, struct mrmgr_region **out)
{
	return get_pd_locked(c, pd, start, last, access, slot, gflags, 1, out);
}

/*
 * miss_seq: even when a lock-free lookup of this very request was sure,
 * at that sequence count, that no region answers it. Every change of
 * the tree and the index is a write section of the count (hit.h), so
 * while the count is still that (the lock is held: it cannot move) the
 * answer stands, and a miss does not look twice.
 */
static int get_pd_locked(struct mrmgr_cache *c, struct ibv_pd *pd,
			 uint64_t start, uint64_t last, unsigned int access,
			 unsigned int slot, unsigned int gflags,
			 uint64_t miss_seq, struct mrmgr_region **out)
{
	struct mrmgr_region *r;
	int ret;

	for (int again = 0;; again++) {
		/* Reported memory events first: nothing they name may be
		 * found. */
		if (!mrmgr__mon_quiet(&c->mon_seen))
			mrmgr__cache_apply_events(c);
		if (c->flags & MRMGR_CACHE_DISABLE)
			r = NULL;
		else if (!again && c->seq == miss_seq)
			r = NULL; /* the lock-free lookup's true miss stands */
		else
			r = lookup_locked(c, start, last, access);
		if (r) {
			/* Another thread registered it meanwhile. */
			mark_used(r, slot, mrmgr__ref_take(r, slot));
			c->st.hits++;
			if (again) /* it waited for another's registration */
				c->st.misses--;
			*out = r;
			return 0;
		}
		if (!again)
			c->st.misses++;
		ret = mrmgr__cache_miss(c, pd, start, last, access, slot, gflags,
				       out);
		if (ret != MRMGR__MISS_AGAIN)
			return ret;
	}
}

/* fast_hit()'s hint (get_slow()): a sure miss, not a region to undo. */
#define HINT_MISS 1u

/*
 * The hit path of mrmgr_get(), inline and in one try: the index, then a
 * reference on the thread's own word. NULL: get() does it all properly
 * (arguments and their errors, retries, the tree, the slow path). No
 * lock, no call, no write but to the thread's reference word and hit
 * counter. Whatever get() checks before it may hit must be checked here
 * too. Kept small on purpose: every instruction here is paid by every
 * hit (bench/callgrind.sh counts them).
 */
static inline __attribute__((always_inline)) struct mrmgr_region *
fast_hit(struct mrmgr_cache *c, uintptr_t a, size_t length,
	 unsigned int access, uint64_t *hint)
{
	uint64_t seq = __atomic_load_n(&c->seq, __ATOMIC_ACQUIRE);
	const struct mrmgr__lk_table *t =
		__atomic_load_n(&c->lk, __ATOMIC_ACQUIRE);
	uint64_t end = (uint64_t)a + (length - 1);
	struct mrmgr_region *r;
	uintptr_t words;
	int dead = 0;

	/*
	 * Plausible arguments: a length that neither is zero nor wraps
	 * (end < a catches both; a NULL address needs no test of its own:
	 * page 0 is never mapped, so no region covers it and the lookup
	 * misses, leaving get() to refuse it), known access bits (of which
	 * REMOTE_WRITE and REMOTE_ATOMIC need LOCAL_WRITE: access values
	 * 2, 6, 8, 10, 12 and 14 of the low four bits are bad); an index
	 * (a cache with MRMGR_CACHE_DISABLE never has one: nothing is
	 * cached); no tree change under way; no feature to call after a
	 * hit or to answer the get (ext.h: MRMGR__CACHE_AFTER_GET,
	 * MRMGR__CACHE_EXT_GET); no
	 * memory event pending (get_locked() applies them first).
	 */
	_Static_assert(MRMGR__CACHE_AFTER_GET == UINT64_C(1) << 63 &&
			       MRMGR__CACHE_EXT_GET == UINT64_C(1) << 62,
		       "the top two bits of flags");
	if (mrmgr__unlikely(end < a) ||
	    mrmgr__unlikely(mrmgr__unknown_access(access)) ||
	    mrmgr__unlikely((0x55445544u >> (access & 31)) & 1) ||
	    mrmgr__unlikely(!t) || mrmgr__unlikely(seq & 1) ||
	    mrmgr__unlikely(c->flags >> 62) ||
	    mrmgr__unlikely(!mrmgr__mon_quiet(&c->mon_seen)))
		return NULL;
	r = mrmgr__lookup_fast(t, a, a >> c->page_shift, end >> c->page_shift,
			       (access | access >> 15) & MRMGR__LK_TAG_ACCESS);
	if (mrmgr__unlikely((uintptr_t)r <= (uintptr_t)MRMGR__LK_UNSURE)) {
		/* A true miss, as try_hit() would find it: then get() does
		 * not look again (a miss probed the index twice). The same
		 * lookup, so the same checks before it (get() makes them
		 * too); the count validates it as it does a hit. */
		if (!r && mrmgr__lookup_fast_whole(t)) {
			__atomic_thread_fence(__ATOMIC_ACQUIRE);
			if (__atomic_load_n(&c->seq, __ATOMIC_RELAXED) == seq)
				*hint = seq | HINT_MISS;
		}
		return NULL;
	}
	words = mrmgr__tls_words;
	if (mrmgr__unlikely(!words))
		return NULL; /* the thread's first get: the slow path */
	/* The one hit protocol (hit.h), on the thread's word. No call on
	 * failure (it would cost the hit a stack frame): the caller finishes
	 * the put. */
	if (mrmgr__likely(mrmgr__hit_ref(c, r, words, seq, &dead)))
		return r;
	if (dead)
		*hint = (uint64_t)(uintptr_t)r;
	return NULL;
}

/*
 * mrmgr_get() when the inline hit path did not answer; hint: what it
 * learnt (fast_hit()), 0 or a region whose reference it must undo (a
 * region is 128-byte aligned) or, with HINT_MISS, the (even) sequence
 * count at which the index was sure of a miss. One word: a seventh
 * argument would go on the stack, and the hit path would pay a frame.
 */
static __attribute__((noinline)) int get_slow(struct mrmgr_cache *c,
					      void *addr, size_t length,
					      unsigned int access,
					      mrmgr_region_t **region,
					      uint64_t hint)
{
	uint64_t miss_seq = 1;
	int ret;

	if (hint & HINT_MISS)
		miss_seq = hint & ~(uint64_t)HINT_MISS;
	else if (hint)
		mrmgr__cache_put_slow(c, (struct mrmgr_region *)(uintptr_t)hint);
	ret = get(c, NULL, addr, length, access, region, miss_seq);
	if (mrmgr__unlikely(!ret && (c->flags & MRMGR__CACHE_AFTER_GET)))
		mrmgr__ext_after_get(c, *region, addr, length, access, 0);
	return ret;
}

MRMGR_EXPORT int mrmgr_get(mrmgr_cache_t *c, void *addr, size_t length,
			   unsigned int access, mrmgr_region_t **region)
{
	uint64_t hint = 0;

	if (mrmgr__likely(c != NULL && region != NULL)) {
		struct mrmgr_region *r = fast_hit(c, (uintptr_t)addr, length,
						  access, &hint);

		if (mrmgr__likely(r != NULL)) {
			*region = r;
			return 0;
		}
	}
	return get_slow(c, addr, length, access, region, hint);
}

MRMGR_EXPORT int mrmgr_get_ex(mrmgr_cache_t *c, void *addr, size_t length,
			      unsigned int access,
			      const struct mrmgr_get_attr *attr,
			      mrmgr_region_t **region)
{
	const uint64_t known = MRMGR_GET_PREFETCH | MRMGR_GET_NO_PREFETCH;
	const uint64_t known_mask = MRMGR_GET_ATTR_FLAGS | MRMGR_GET_ATTR_PD;
	uint64_t flags = 0;
	struct ibv_pd *pd = NULL;
	int ret;

	if (attr) {
		if (attr->comp_mask & ~known_mask) {
			mrmgr__err("mrmgr_get_ex: unknown comp_mask bits %#llx",
				   (unsigned long long)(attr->comp_mask &
							~known_mask));
			return EINVAL;
		}
		if (attr->comp_mask & MRMGR_GET_ATTR_FLAGS)
			flags = attr->flags;
		if (attr->comp_mask & MRMGR_GET_ATTR_PD) {
			pd = attr->pd;
			if (!pd) {
				mrmgr__err("mrmgr_get_ex: NULL PD");
				return EINVAL;
			}
		}
	}
	if ((flags & ~known) || (flags & known) == known) {
		mrmgr__err("mrmgr_get_ex: bad flags %#llx",
			   (unsigned long long)flags);
		return EINVAL;
	}
	ret = get(c, pd, addr, length, access, region, 1);
	/* No flag: as mrmgr_get() (a get for another PD should cost what a
	 * plain one does). */
	if (!ret && (flags || (c->flags & MRMGR__CACHE_AFTER_GET)))
		mrmgr__ext_after_get(c, *region, addr, length, access, flags);
	return ret;
}
