/*
 * Prefetch hints: mrmgr_prefetch(), mrmgr_region_prefetch() and the
 * automatic hint after a get, all through ibv_advise_mr().
 *
 * The rules, in the order a call meets them:
 *   - arguments are checked first; nothing is sent for bad input (a
 *     range past any user address space included);
 *   - only ODP memory is advised: the SGEs come from the cache's ODP
 *     regions (or the implicit MR); pinned memory is resident already, so
 *     a request that finds none is a successful, counted no-op;
 *   - the regions an SGE names are referenced while the call runs, so a
 *     concurrent invalidation cannot deregister an MR under the device;
 *   - the implicit MR covers everything, so an implicit-mode request is
 *     bounded here: each range is clipped to the mappings in it the
 *     advice can fault in (readable; writable for PREFETCH_WRITE), and the request to the
 *     device's max_mr_size bytes and MRMGR__PREFETCH_MAX_SGES SGEs; the
 *     rest of a hint that large is dropped with a debug line;
 *   - SGEs go in batches of at most the device's max_sge; EAGAIN is
 *     retried a few times with a short, growing pause;
 *   - EOPNOTSUPP / ENOTSUP / ENOSYS mean the device does not do this
 *     advice: remembered (per advice), and from then on such requests are
 *     no-ops without a system call;
 *   - any other error is the caller's: returned with a log line.
 * Nothing here takes the cache lock except to collect explicit regions.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "compiler.h"
#include "core.h"
#include "device.h"
#include "ext.h"
#include "log.h"
#include "odp.h"
#include "prefetch.h"
#include "vma.h"

#define EAGAIN_RETRIES 4
#define KNOWN_FLAGS                                                         \
	(MRMGR_PREFETCH_WRITE | MRMGR_PREFETCH_READ | MRMGR_PREFETCH_SYNC)
#define WRITE_ACCESS                                                        \
	(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |                  \
	 IBV_ACCESS_REMOTE_ATOMIC)

static inline void count(uint64_t *ctr, uint64_t n)
{
	__atomic_fetch_add(ctr, n, __ATOMIC_RELAXED);
}

/* ------------------------------------------------------------ SGE lists */

void mrmgr__sge_init(struct mrmgr__sge_list *l)
{
	l->v = l->local;
	l->n = 0;
	l->cap = MRMGR__ARRAY_SIZE(l->local);
}

void mrmgr__sge_fini(struct mrmgr__sge_list *l)
{
	if (l->v != l->local)
		free(l->v);
	mrmgr__sge_init(l);
}

int mrmgr__sge_push(struct mrmgr__sge_list *l, uint64_t addr, uint64_t len,
		    uint32_t lkey)
{
	while (len) {
		uint64_t piece = len < MRMGR__SGE_MAX_LEN ? len : MRMGR__SGE_MAX_LEN;

		if (l->n == l->cap) {
			size_t cap = l->cap * 2;
			struct ibv_sge *v = l->v == l->local
						    ? malloc(cap * sizeof(*v))
						    : realloc(l->v, cap * sizeof(*v));

			if (!v)
				return ENOMEM;
			if (l->v == l->local)
				memcpy(v, l->local, l->n * sizeof(*v));
			l->v = v;
			l->cap = cap;
		}
		l->v[l->n].addr = addr;
		l->v[l->n].length = (uint32_t)piece;
		l->v[l->n].lkey = lkey;
		l->n++;
		addr += piece;
		len -= piece;
	}
	return 0;
}

/* ------------------------------------------------------------ sending */

static const char *advice_name(enum ibv_advise_mr_advice advice)
{
	return advice == IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE ? "PREFETCH_WRITE"
							    : "PREFETCH";
}

static int advice_unsupported(struct mrmgr_cache *c,
			      enum ibv_advise_mr_advice advice)
{
	return (__atomic_load_n(&mrmgr__odp_of(c)->unsupported, __ATOMIC_RELAXED) >>
		advice) & 1;
}

/* Remember, once, that the device does not do this advice (or any:
 * the verb itself is missing). */
static void learn_unsupported(struct mrmgr_cache *c,
			      enum ibv_advise_mr_advice advice, int err)
{
	const struct mrmgr__core_view *cv = mrmgr__core_view(c);
	uint32_t bits = mrmgr__dev_unsupported(err) == MRMGR__UNSUP_VERB ||
				!cv->ops->advise_mr
			? ~UINT32_C(0)
			: UINT32_C(1) << advice;
	uint32_t old = __atomic_fetch_or(&mrmgr__odp_of(c)->unsupported, bits,
					 __ATOMIC_RELAXED);

	if ((old & bits) != bits)
		mrmgr__info("%s does not support ibv_advise_mr(%s) (%s): "
			    "prefetch hints are counted no-ops from now on",
			    cv->caps->name, advice_name(advice),
			    err ? strerror(err) : "no advise in the backend");
}

static void pause_before_retry(int attempt)
{
	struct timespec ts = { 0, 1000L << attempt }; /* 1, 2, 4, 8 us */

	nanosleep(&ts, NULL);
}

/*
 * Send the list in batches. Returns 0 (*noop set when the device turned
 * out not to support the advice) or the first error, logged at level.
 */
static int send_batches(struct mrmgr_cache *c, enum ibv_advise_mr_advice advice,
			uint32_t flags, const struct mrmgr__sge_list *l,
			enum mrmgr_log_level level, int *noop)
{
	const struct mrmgr__core_view *cv = mrmgr__core_view(c);
	uint32_t max = cv->caps->max_sge ? cv->caps->max_sge : 1;

	*noop = 0;
	if (!cv->ops->advise_mr) {
		learn_unsupported(c, advice, 0);
		*noop = 1;
		return 0;
	}
	for (size_t i = 0; i < l->n;) {
		uint32_t b = l->n - i < max ? (uint32_t)(l->n - i) : max;
		int ret;

		count(&mrmgr__odp_of(c)->pst.batches, 1);
		for (int attempt = 0;; attempt++) {
			ret = mrmgr__dev_advise_mr(cv->ops, cv->pd, advice, flags,
						   l->v + i, b);
			if (ret != EAGAIN || attempt == EAGAIN_RETRIES)
				break;
			count(&mrmgr__odp_of(c)->pst.retries, 1);
			pause_before_retry(attempt);
		}
		if (mrmgr__dev_unsupported(ret)) {
			learn_unsupported(c, advice, ret);
			*noop = 1;
			return 0;
		}
		if (ret) {
			MRMGR__LOG_IF(level, "prefetch: ibv_advise_mr(%s%s) of %u "
				   "SGEs from %#llx+%u (lkey %#x) on %s: %s",
				   advice_name(advice),
				   flags & IBV_ADVISE_MR_FLAG_FLUSH ? ", FLUSH" : "",
				   b, (unsigned long long)l->v[i].addr,
				   l->v[i].length, l->v[i].lkey, cv->caps->name,
				   strerror(ret));
			return ret;
		}
		count(&mrmgr__odp_of(c)->pst.sges, b);
		i += b;
	}
	return 0;
}

/* Send, and count how the request ended. */
static int finish(struct mrmgr_cache *c, enum ibv_advise_mr_advice advice,
		  uint32_t flags, const struct mrmgr__sge_list *l,
		  enum mrmgr_log_level level)
{
	int noop = 0, ret = 0;

	if (!l->n || advice_unsupported(c, advice))
		noop = 1;
	else
		ret = send_batches(c, advice, flags, l, level, &noop);
	if (ret)
		count(&mrmgr__odp_of(c)->pst.failures, 1);
	else if (noop)
		count(&mrmgr__odp_of(c)->pst.noops, 1);
	return ret;
}

/* ------------------------------------------------------------ arguments */

static int check_flags(const char *fn, unsigned int flags)
{
	if ((flags & ~(unsigned int)KNOWN_FLAGS) ||
	    ((flags & MRMGR_PREFETCH_WRITE) && (flags & MRMGR_PREFETCH_READ))) {
		mrmgr__err("%s: bad flags %#x", fn, flags);
		return EINVAL;
	}
	return 0;
}

static int check_range(const char *fn, const void *addr, size_t length)
{
	uintptr_t a = (uintptr_t)addr;

	if (!addr || !length || a + (length - 1) < a) {
		mrmgr__err("%s: bad range %p + %zu", fn, addr, length);
		return EINVAL;
	}
	if ((uint64_t)a + (length - 1) > MRMGR__PREFETCH_VA_LAST) {
		mrmgr__err("%s: range %p + %zu ends past any user address "
			   "space", fn, addr, length);
		return EINVAL;
	}
	return 0;
}

/* The advice: what flags force, else WRITE when the memory is writable. */
static enum ibv_advise_mr_advice choose(unsigned int flags, int writable)
{
	if (flags & MRMGR_PREFETCH_WRITE)
		return IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE;
	if (flags & MRMGR_PREFETCH_READ)
		return IBV_ADVISE_MR_ADVICE_PREFETCH;
	return writable ? IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE
			: IBV_ADVISE_MR_ADVICE_PREFETCH;
}

static uint32_t advise_flags(unsigned int flags)
{
	return flags & MRMGR_PREFETCH_SYNC ? IBV_ADVISE_MR_FLAG_FLUSH : 0;
}

/* ------------------------------------------------------------ implicit */

/* What is left of an implicit-mode request's bounds. */
struct budget {
	uint64_t bytes;
	int clipped;
	int write; /* PREFETCH_WRITE: writable mappings only */
};

/*
 * SGEs for the readable mappings in [s, last], within the budget.
 * ENOMEM only; what cannot be told about the mappings is sent as asked
 * (the device skips what it cannot fault in).
 */
static int push_mapped(struct mrmgr__sge_list *l, uint64_t s, uint64_t last,
		       uint32_t lkey, struct budget *b)
{
	uint64_t next = s;

	for (;;) {
		uint64_t a, e, len, room;
		int ret = mrmgr__vma_next_readable(next, last, b->write, 0, &a, &e);

		if (ret == ENOENT)
			return 0;
		if (ret) {
			a = next;
			e = last;
		}
		len = e - a + 1; /* e - a < 2^56: no wrap */
		room = (uint64_t)(MRMGR__PREFETCH_MAX_SGES - l->n) *
		       MRMGR__SGE_MAX_LEN;
		if (len > b->bytes || len > room) {
			len = b->bytes < room ? b->bytes : room;
			b->clipped = 1;
		}
		if (len && (ret = mrmgr__sge_push(l, a, len, lkey)) != 0)
			return ret;
		b->bytes -= len;
		if (b->clipped || e >= last)
			return 0;
		next = e + 1;
	}
}

static int collect_implicit(struct mrmgr_cache *c,
			    const struct mrmgr_range *ranges, size_t n,
			    enum ibv_advise_mr_advice advice,
			    struct mrmgr__sge_list *l)
{
	const struct mrmgr__core_view *cv = mrmgr__core_view(c);
	/* The implicit MR covers every range and lives as long as the
	 * cache: nothing to look up, nothing to hold. */
	uint32_t lkey = mrmgr__odp_of(c)->implicit_mr->lkey;
	struct budget b = {
		cv->caps->max_mr_size ? cv->caps->max_mr_size : UINT64_C(1) << 40,
		0, advice == IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE
	};
	int ret = 0;
	size_t i;

	for (i = 0; i < n && !ret && !b.clipped; i++) {
		uint64_t s = (uintptr_t)ranges[i].addr;

		ret = push_mapped(l, s, s + (ranges[i].length - 1), lkey, &b);
	}
	if (b.clipped)
		mrmgr__dbg("mrmgr_prefetch: a hint past %s's limits (%llu "
			   "bytes, %u SGEs) is cut after range %zu of %zu",
			   cv->caps->name,
			   (unsigned long long)(cv->caps->max_mr_size ?
				cv->caps->max_mr_size : UINT64_C(1) << 40),
			   MRMGR__PREFETCH_MAX_SGES, i, n);
	return ret;
}

/* ------------------------------------------------------------ explicit */

/* Regions referenced for the length of one request. */
struct held {
	struct mrmgr_region **v;
	size_t n, cap;
};

static int hold(struct held *h, struct mrmgr_region *r, unsigned int slot)
{
	if (h->n && h->v[h->n - 1] == r)
		return 0;
	if (h->n == h->cap) {
		size_t cap = h->cap ? h->cap * 2 : 16;
		void *v = realloc(h->v, cap * sizeof(*h->v));

		if (!v)
			return ENOMEM;
		h->v = v;
		h->cap = cap;
	}
	/* Under the lock a region in the tree is live: the reference
	 * keeps it registered until our put, whatever happens meanwhile. */
	mrmgr__rgn_ref(r, slot);
	h->v[h->n++] = r;
	return 0;
}

/*
 * SGEs for the parts of the ranges that cached ODP regions cover, each
 * region referenced once. *writable: every region has LOCAL_WRITE.
 */
static int collect_explicit(struct mrmgr_cache *c,
			    const struct mrmgr_range *ranges, size_t n,
			    struct mrmgr__sge_list *l, struct held *h,
			    int *writable)
{
	unsigned int slot = mrmgr__core_slot(c);
	int ret = 0;

	*writable = 1;
	mrmgr__core_lock(c);
	for (size_t i = 0; i < n && !ret; i++) {
		uint64_t s = (uintptr_t)ranges[i].addr;
		uint64_t last = s + (ranges[i].length - 1), next = s;

		/* In start order; overlapping regions give each byte once. */
		for (struct mrmgr_region *r = mrmgr__core_first_overlap(c, s, last);
		     r && !ret; r = mrmgr__core_next_overlap(r, s, last)) {
			uint64_t rs = mrmgr__rgn_start(r), rl = mrmgr__rgn_last(r);
			uint64_t a = rs > next ? rs : next;
			uint64_t e = rl < last ? rl : last;

			if (mrmgr__rgn_kind(r) == MRMGR__REGION_PINNED || a > e)
				continue;
			ret = hold(h, r, slot);
			if (!ret)
				ret = mrmgr__sge_push(l, a, e - a + 1, mrmgr__rgn_mr(r)->lkey);
			if (!(mrmgr__rgn_access(r) & IBV_ACCESS_LOCAL_WRITE))
				*writable = 0;
			if (e == last)
				break;
			next = e + 1;
		}
	}
	mrmgr__core_unlock(c);
	return ret;
}

static void release(struct held *h)
{
	for (size_t i = 0; i < h->n; i++)
		mrmgr_put(h->v[i]);
	free(h->v);
}

/* ------------------------------------------------------------ public */

MRMGR_EXPORT int mrmgr_prefetch(mrmgr_cache_t *c,
				const struct mrmgr_range *ranges, size_t n,
				unsigned int flags)
{
	struct mrmgr__sge_list l;
	struct held h = { 0 };
	int ret, writable = 1;

	if (!c || (n && !ranges)) {
		mrmgr__err("mrmgr_prefetch: NULL %s", !c ? "cache" : "ranges");
		return EINVAL;
	}
	ret = check_flags("mrmgr_prefetch", flags);
	for (size_t i = 0; i < n && !ret; i++)
		ret = check_range("mrmgr_prefetch", ranges[i].addr,
				  ranges[i].length);
	if (ret)
		return ret;

	count(&mrmgr__odp_of(c)->pst.calls, 1);
	mrmgr__sge_init(&l);
	if (mrmgr__odp_of(c)->mode == MRMGR_ODP_IMPLICIT) {
		writable = !!(mrmgr__odp_of(c)->implicit_access & IBV_ACCESS_LOCAL_WRITE);
		ret = collect_implicit(c, ranges, n, choose(flags, writable), &l);
	} else if (mrmgr__odp_of(c)->mode == MRMGR_ODP_EXPLICIT) {
		ret = collect_explicit(c, ranges, n, &l, &h, &writable);
	}
	if (!ret)
		ret = finish(c, choose(flags, writable), advise_flags(flags), &l,
			     MRMGR_LOG_ERROR);
	else
		count(&mrmgr__odp_of(c)->pst.failures, 1);
	release(&h);
	mrmgr__sge_fini(&l);
	return ret;
}

MRMGR_EXPORT int mrmgr_region_prefetch(mrmgr_region_t *r, void *addr,
				       size_t length, unsigned int flags)
{
	struct mrmgr__sge_list l;
	struct mrmgr_cache *c;
	uint64_t a, last;
	int ret;

	if (!r) {
		mrmgr__err("mrmgr_region_prefetch: NULL region");
		return EINVAL;
	}
	c = mrmgr__rgn_cache(r);
	/* Region memory outlives a release (region.h): a region put for the
	 * last time (or one put too many) reads as FREE, with no MR. */
	if (mrmgr__rgn_state(r) == MRMGR__REGION_FREE || !mrmgr__rgn_mr(r)) {
		mrmgr__err("mrmgr_region_prefetch: region %p is not held (put "
			   "already?)", (void *)r);
		return EINVAL;
	}
	ret = check_flags("mrmgr_region_prefetch", flags);
	if (ret)
		return ret;
	if (!addr && !length) {
		a = mrmgr__rgn_start(r);
		last = mrmgr__rgn_last(r);
	} else {
		ret = check_range("mrmgr_region_prefetch", addr, length);
		if (ret)
			return ret;
		a = (uintptr_t)addr;
		last = a + (length - 1);
		if (a < mrmgr__rgn_start(r) || last > mrmgr__rgn_last(r)) {
			mrmgr__err("mrmgr_region_prefetch: %p + %zu is outside "
				   "the region [%#llx, +%llu)", addr, length,
				   (unsigned long long)mrmgr__rgn_start(r),
				   (unsigned long long)mrmgr__rgn_len(r));
			return EINVAL;
		}
	}

	count(&mrmgr__odp_of(c)->pst.calls, 1);
	if (mrmgr__rgn_kind(r) == MRMGR__REGION_PINNED) {
		count(&mrmgr__odp_of(c)->pst.noops, 1);
		return 0;
	}
	mrmgr__sge_init(&l);
	ret = mrmgr__sge_push(&l, a, last - a + 1, mrmgr__rgn_mr(r)->lkey);
	if (!ret)
		ret = finish(c, choose(flags, !!(mrmgr__rgn_access(r) &
						 IBV_ACCESS_LOCAL_WRITE)),
			     advise_flags(flags), &l, MRMGR_LOG_ERROR);
	else
		count(&mrmgr__odp_of(c)->pst.failures, 1);
	mrmgr__sge_fini(&l);
	return ret;
}

void mrmgr__odp_get_hint(struct mrmgr_region *r, void *addr, size_t length,
			 unsigned int access)
{
	struct mrmgr_cache *c = mrmgr__rgn_cache(r);
	struct mrmgr__sge_list l;

	if (mrmgr__rgn_kind(r) == MRMGR__REGION_PINNED)
		return;
	count(&mrmgr__odp_of(c)->pst.calls, 1);
	mrmgr__sge_init(&l);
	/* The region holds the request, and the caller holds the region. */
	if (mrmgr__sge_push(&l, (uintptr_t)addr, length, mrmgr__rgn_mr(r)->lkey))
		count(&mrmgr__odp_of(c)->pst.failures, 1);
	else
		(void)finish(c, choose(0, !!(access & WRITE_ACCESS)), 0, &l,
			     MRMGR_LOG_WARN);
	mrmgr__sge_fini(&l);
}
