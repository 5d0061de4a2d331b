/*
 * The stale check (MRMGR_CHECK=stale, MRMGR_CACHE_CHECK_STALE): a
 * checker a user turns on to prove that the cache follows every memory
 * event of their program, on a real device too.
 *
 * At registration (region_added, right after ibv_reg_mr() returned: it
 * faulted in and pinned every page, so all of them are there) the
 * region's page identities are recorded from /proc/self/pagemap. On every
 * get (the inline hit path is left: the feature sets
 * MRMGR__CACHE_AFTER_GET, so every get runs get(), which calls
 * mrmgr__stale_get()) the pages under the request are read again and
 * compared. A stale hit is reported (the first at error level, with the
 * region's history and the monitor's last events; later ones at debug
 * level), counted (mrmgr_stats::stale_hits), its region invalidated and
 * put, and the get answered with a fresh registration: a checker that
 * keeps the program right while it tells.
 *
 * What a page's identity is, and what each can see:
 *  - with page frames (the process has CAP_SYS_ADMIN, which the kernel
 *    checks when pagemap is opened): present + PFN. Any page replaced
 *    (munmap/mmap, MADV_DONTNEED and a refault, mremap away, a COW
 *    break) shows as another frame; a page cache page mapped again at
 *    the same place is the same frame, and rightly not stale.
 *  - without (PFNs read as 0): present, swapped and file/shared bits per
 *    page, and the mappings over the range (inode, device, file offset
 *    at each address, anonymous or shared). Seen: a page gone and not
 *    touched since (a pinned page never leaves on its own), a hole, a
 *    mapping of another file or offset, anonymous memory where a file
 *    was and back. NOT seen: an anonymous page replaced by another
 *    anonymous page that was touched again (munmap + mmap at the same
 *    address, DONTNEED + a write): the common case, so the check says
 *    at creation, once per process, that it cannot verify it.
 * Never seen: a change and its reversal between two gets (the next
 * get's pages are compared, not the device's accesses in between), and
 * a change in the microseconds between ibv_reg_mr() and the record.
 * Nothing is ever written into the program's memory.
 *
 * Cost: every get takes the cache lock and reads 8 bytes of pagemap per
 * page of the request (one pread()), without page frames also the
 * mappings over it; doc/environment.md has the figures. A cache without
 * the check has not this feature in its list (ext/features.c): no
 * instruction of its hit or miss paths changes.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cache.h"
#include "core.h"
#include "log.h"
#include "monitor.h"
#include "stale.h"
#include "stale_rec.h"
#include "vma.h"

#define PM_PFN ((UINT64_C(1) << 55) - 1)
#define PM_FILE (UINT64_C(1) << 61)
#define PM_SWAP (UINT64_C(1) << 62)
#define PM_PRESENT (UINT64_C(1) << 63)

int mrmgr__stale_test_no_pfn;

static int said_blind; /* the "cannot see" line, once per process */

/* pagemap of this process (again after a fork). */
static int pagemap(struct mrmgr__stale *s)
{
	pid_t me = getpid();

	if (s->fd >= 0 && s->pid == me)
		return s->fd;
	if (s->fd >= 0)
		close(s->fd);
	s->fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
	s->pid = me;
	return s->fd;
}

/* n entries for the pages from va: 0 or an errno. */
static int read_pm(struct mrmgr__stale *s, unsigned int shift, uint64_t va,
		   uint64_t n, uint64_t *out)
{
	int fd = pagemap(s);
	size_t want = (size_t)n * 8, got = 0;

	if (fd < 0)
		return errno;
	while (got < want) {
		ssize_t r = pread(fd, (char *)out + got, want - got,
				  (off_t)((va >> shift) * 8 + got));

		if (r <= 0)
			return r < 0 ? errno : EIO;
		got += (size_t)r;
	}
	for (uint64_t i = 0; i < n; i++)
		out[i] &= s->mask;
	return 0;
}

/* ------------------------------------------------------------ mappings */

struct map_walk {
	uint64_t start, last;
	struct piece *p;
	size_t n, cap;
	int err;
};

static int map_one(const struct mrmgr__vma *v, void *arg)
{
	struct map_walk *w = arg;
	uint64_t s = v->start > w->start ? v->start : w->start;
	uint64_t e = v->end - 1 < w->last ? v->end : w->last + 1;

	if (w->n == w->cap) {
		size_t cap = w->cap ? 2 * w->cap : 4;
		struct piece *p = realloc(w->p, cap * sizeof(*p));

		if (!p) {
			w->err = ENOMEM;
			return 1;
		}
		w->p = p;
		w->cap = cap;
	}
	w->p[w->n++] = (struct piece){
		s, e, v->inode, (uint64_t)v->dev_major << 32 | v->dev_minor,
		v->inode ? v->offset + (s - v->start) : 0,
		v->flags & (MRMGR__VMA_F_ANON | MRMGR__VMA_F_SHARED)
	};
	return 0;
}

static int read_map(uint64_t start, uint64_t last, struct map_walk *w)
{
	int ret;

	memset(w, 0, sizeof(*w));
	w->start = start;
	w->last = last;
	ret = mrmgr__vma_walk(start, last, 0, map_one, w);
	if (ret < 0 || w->err) {
		free(w->p);
		return ret < 0 ? -ret : w->err;
	}
	return 0;
}

/* The first address of [start, last] whose mapping differs from the
 * record's, or 0. */
static uint64_t map_differs(const struct rec *rc, const struct map_walk *now,
			    uint64_t start, uint64_t last)
{
	uint64_t a = start;

	for (size_t i = 0; i < now->n; i++) {
		const struct piece *p = &now->p[i];

		if (p->start > a)
			return a; /* a hole */
		for (size_t j = 0; j < rc->nmap; j++) {
			const struct piece *q = &rc->map[j];
			uint64_t s = p->start > q->start ? p->start : q->start;
			uint64_t e = p->end < q->end ? p->end : q->end;

			if (s >= e)
				continue;
			if (p->inode != q->inode || p->dev != q->dev ||
			    p->kind != q->kind ||
			    (p->inode && p->off + (s - p->start) !=
						 q->off + (s - q->start)))
				return s;
		}
		a = p->end;
	}
	return a <= last ? a : 0;
}

/* ------------------------------------------------------------ records */

static size_t slot_of(const struct mrmgr__stale *s, const void *r)
{
	return (size_t)(((uintptr_t)r >> 6) * 0x9e3779b97f4a7c15ull >> 20) &
	       (s->nbuckets - 1);
}

static struct rec **find(struct mrmgr__stale *s, const struct mrmgr_region *r)
{
	struct rec **p = &s->bucket[slot_of(s, r)];

	while (*p && (*p)->r != r)
		p = &(*p)->next;
	return p;
}

static void rec_free(struct rec *rc)
{
	free(rc->pm);
	free(rc->map);
	free(rc);
}

static void forget(struct mrmgr__stale *s, const struct mrmgr_region *r)
{
	struct rec **p = find(s, r), *rc = *p;

	if (rc) {
		*p = rc->next;
		rec_free(rc);
		s->nrecs--;
	}
}

static void grow_table(struct mrmgr__stale *s)
{
	size_t n = s->nbuckets * 2;
	struct rec **b = calloc(n, sizeof(*b)), **old = s->bucket;
	size_t oldn = s->nbuckets;

	if (!b)
		return; /* longer chains */
	s->bucket = b;
	s->nbuckets = n;
	for (size_t i = 0; i < oldn; i++)
		while (old[i]) {
			struct rec *rc = old[i], **p;

			old[i] = rc->next;
			p = &b[slot_of(s, rc->r)];
			rc->next = *p;
			*p = rc;
		}
	free(old);
}

/* Record r's pages now (lock held). NULL when they cannot be read. */
static struct rec *record(struct mrmgr_cache *c, struct mrmgr_region *r)
{
	struct mrmgr__stale *s = c->stale;
	uint64_t start = mrmgr__region_start(r), last = r->node.last;
	uint64_t n = ((last - start) >> c->page_shift) + 1;
	struct rec *rc = calloc(1, sizeof(*rc));
	struct map_walk w;

	forget(s, r);
	if (!rc || !(rc->pm = malloc((size_t)n * 8)) ||
	    read_pm(s, c->page_shift, start, n, rc->pm) ||
	    (!s->pfns && read_map(start, last, &w))) {
		if (rc)
			rec_free(rc);
		s->unrecorded++;
		return NULL;
	}
	if (!s->pfns) {
		rc->map = w.p;
		rc->nmap = w.n;
	}
	rc->r = r;
	rc->gen = r->gen;
	rc->start = start;
	rc->last = last;
	rc->queue_at = mrmgr__mon_queue_tail();
	clock_gettime(CLOCK_MONOTONIC, &rc->born);
	if (s->nrecs >= 2 * s->nbuckets)
		grow_table(s);
	{
		struct rec **p = &s->bucket[slot_of(s, r)];

		rc->next = *p;
		*p = rc;
	}
	s->nrecs++;
	return rc;
}

/* ------------------------------------------------------------ verify */

/* Whether [start, last] still has rc's pages: 0, or the first address
 * that does not, with what was and is there. */
static uint64_t differs(struct mrmgr_cache *c, const struct rec *rc,
			uint64_t start, uint64_t last, uint64_t *was,
			uint64_t *now, const char **how)
{
	struct mrmgr__stale *s = c->stale;
	uint64_t n = ((last - start) >> c->page_shift) + 1;
	uint64_t first = (start - rc->start) >> c->page_shift;
	uint64_t buf[64];
	struct map_walk w;
	uint64_t bad;

	for (uint64_t i = 0; i < n; i += 64) {
		uint64_t k = n - i < 64 ? n - i : 64;

		if (read_pm(s, c->page_shift, start + (i << c->page_shift), k,
			    buf))
			return 0; /* cannot tell: not stale */
		for (uint64_t j = 0; j < k; j++)
			if (buf[j] != rc->pm[first + i + j]) {
				/* Reported as page frames when there are any
				 * (the flag bits would read as a huge number). */
				*was = s->pfns ? rc->pm[first + i + j] & PM_PFN
					       : rc->pm[first + i + j];
				*now = s->pfns ? buf[j] & PM_PFN : buf[j];
				*how = s->pfns ? "page frame" : "pagemap flags";
				return start + ((i + j) << c->page_shift);
			}
	}
	if (s->pfns || read_map(start, last, &w))
		return 0;
	bad = map_differs(rc, &w, start, last);
	free(w.p);
	*was = *now = 0;
	*how = "mapping";
	return bad;
}

int mrmgr__stale_get(struct mrmgr_cache *c, uint64_t start, uint64_t last,
		     unsigned int access, unsigned int slot,
		     struct mrmgr_region *r, struct mrmgr_region **out)
{
	struct mrmgr__stale *s = c->stale;
	uint64_t bad = 0, was = 0, now = 0;
	const char *how = "";
	struct rec *rc;
	int ret = 0;

	*out = r;
	if (!s || r->kind != MRMGR__REGION_PINNED)
		return 0; /* ODP is never stale */
	mrmgr__cache_lock(c);
	rc = *find(s, r);
	/* Grown in place (a new registration: rereg pinned what is there),
	 * or made before the record could be read: record now. */
	if (!rc || rc->gen != r->gen || start < rc->start || last > rc->last)
		rc = record(c, r);
	if (rc) {
		s->checks++;
		rc->gets++;
		bad = differs(c, rc, start, last, &was, &now, &how);
	}
	if (bad) {
		/* A change that raced with this get and that the monitor
		 * follows (its event came after the hit's look at the event
		 * word, or the call is still under way) is not a miss of the
		 * monitor: answered fresh, not reported. */
		if (!mrmgr__mon_quiet(&c->mon_seen))
			mrmgr__cache_apply_events(c);
		if (mrmgr__region_state(r) == MRMGR__REGION_LIVE &&
		    !mrmgr__mon_change_in_flight(rc->start, rc->last)) {
			s->stale_hits++;
			mrmgr__stale_report(c, rc, r, start, last, bad, was,
					    now, how);
		}
		mrmgr__core_invalidate_locked(c, rc->start, rc->last);
		mrmgr__core_unref_locked(c, r, slot);
		ret = mrmgr__core_get_locked(c, start, last, access, slot,
					     MRMGR__GET_MAY_UNLOCK, out);
	}
	pthread_mutex_unlock(&c->lock);
	return ret;
}

/* ------------------------------------------------------------ hooks */

int mrmgr__stale_wanted(uint64_t attr_flags)
{
	return !!((attr_flags | mrmgr__check_env_flags(0)) &
		  MRMGR_CACHE_CHECK_STALE);
}

/* Whether pagemap shows page frames: a page of our own, just touched. */
static int probe_pfns(struct mrmgr__stale *s, unsigned int shift)
{
	static volatile uint64_t probe[1];
	uint64_t e = 0;

	probe[0]++;
	s->mask = ~(uint64_t)0;
	if (read_pm(s, shift, (uintptr_t)probe, 1, &e))
		return 0;
	return !mrmgr__stale_test_no_pfn && (e & PM_PRESENT) && (e & PM_PFN);
}

static int stale_init(struct mrmgr_cache *c)
{
	struct mrmgr__stale *s = calloc(1, sizeof(*s));

	if (!s || !(s->bucket = calloc(64, sizeof(*s->bucket)))) {
		free(s);
		return ENOMEM;
	}
	s->nbuckets = 64;
	s->fd = -1;
	c->stale = s;
	c->check_get = mrmgr__stale_get;
	if (pagemap(s) < 0) {
		int err = errno;

		mrmgr__err("MRMGR_CHECK=stale: cannot open /proc/self/pagemap "
			   "(%s): the cache is not created", strerror(err));
		return err;
	}
	s->pfns = probe_pfns(s, c->page_shift);
	s->mask = s->pfns ? PM_PRESENT | PM_PFN : PM_PRESENT | PM_SWAP | PM_FILE;
	c->flags |= MRMGR_CACHE_CHECK_STALE | MRMGR__CACHE_AFTER_GET;
	if (s->pfns)
		mrmgr__info("cache %p: MRMGR_CHECK=stale: every get compares "
			    "the page frames under it with the registered ones",
			    (void *)c);
	else if (!__atomic_exchange_n(&said_blind, 1, __ATOMIC_RELAXED))
		mrmgr__warn("MRMGR_CHECK=stale: /proc/self/pagemap shows no "
			    "page frames to this process (they need "
			    "CAP_SYS_ADMIN): the check sees pages gone, holes "
			    "and mappings changed, but NOT an anonymous page "
			    "replaced by another that was touched again (munmap "
			    "+ mmap, MADV_DONTNEED + a write); run as root for "
			    "the full check");
	return 0;
}

static void stale_fini(struct mrmgr_cache *c)
{
	struct mrmgr__stale *s = c->stale;

	for (size_t i = 0; s && i < s->nbuckets; i++)
		while (s->bucket[i]) {
			struct rec *rc = s->bucket[i];

			s->bucket[i] = rc->next;
			rec_free(rc);
		}
}

static void stale_free(struct mrmgr_cache *c)
{
	struct mrmgr__stale *s = c->stale;

	if (s) {
		stale_fini(c);
		if (s->fd >= 0 && s->pid == getpid())
			close(s->fd);
		free(s->bucket);
		free(s);
	}
	c->stale = NULL;
}

static void stale_added(struct mrmgr_cache *c, struct mrmgr_region *r)
{
	if (r->kind == MRMGR__REGION_PINNED)
		(void)record(c, r);
}

static void stale_released(struct mrmgr_cache *c, struct mrmgr_region *r)
{
	forget(c->stale, r);
}

static void stale_invalidated(struct mrmgr_cache *c, struct mrmgr_region *r)
{
	struct mrmgr__stale *s = c->stale;

	clock_gettime(CLOCK_MONOTONIC, &s->inval_at);
	s->inval_start = mrmgr__region_start(r);
	s->inval_last = r->node.last;
	s->invals++;
}

static void stale_stats(struct mrmgr_cache *c, struct mrmgr_stats *st)
{
	mrmgr__cache_lock(c);
	st->stale_checks = c->stale->checks;
	st->stale_hits = c->stale->stale_hits;
	pthread_mutex_unlock(&c->lock);
}

const struct mrmgr__ext mrmgr__ext_stale = {
	.name = "stale check",
	.id = MRMGR__EXT_ID_STALE,
	.init = stale_init,
	.fini = stale_fini,
	.free = stale_free,
	.region_added = stale_added,
	.region_released = stale_released,
	.region_invalidated = stale_invalidated,
	.stats = stale_stats,
};
