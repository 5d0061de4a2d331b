/*
 * Watching: which ranges are registered with userfaultfd, and deciding,
 * for a range a get is about to cache, whether some source covers it.
 *
 * What is registered: the whole VMAs that hold a cached range, never a
 * part of one. Registering part of a VMA splits it (up to three), which
 * costs vm.max_map_count (65530 by default, which the program itself
 * needs) and changes what the program sees: mremap() refuses a range that
 * spans VMAs (EFAULT; on 6.17+, a multi-VMA move over registered VMAs may
 * even fail half done), so a buffer that could be moved before would not
 * be after a part of it was cached. The price of whole VMAs: an unmap or
 * discard anywhere in such a VMA waits for the reader thread (a few
 * microseconds, see doc/monitor.md), not only one that touches a cached
 * range; invalidation stays exact (only overlapping regions go).
 *
 * The registry holds one entry per cached region that userfaultfd
 * watches (regions of every cache; every region in a VMA holds the whole
 * VMA, so entries with the same range share one tree node and the tree
 * stays as small as the number of watched VMAs), plus provisional entries
 * for registrations in progress. The kernel's state is the union of the entries: a VMA is
 * registered when its first entry arrives and unregistered when no entry
 * covers it any more, so it can merge with its neighbours again and unmaps
 * of memory nobody caches any longer cost nothing.
 *
 * A registered VMA never merges with a new neighbour (different context),
 * so the registry still bounds what it holds: it counts disjoint runs of
 * the union and refuses a new run beyond a quarter of max_map_count; such
 * a range is then not watched (and so not cached), which costs a
 * registration per get, never correctness. A kernel refusal (ENOMEM,
 * EBUSY: another userfaultfd owns the VMA) is handled the same way.
 *
 * All under mrmgr__mon_lock.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cache.h"
#include "log.h"
#include "monitor.h"

static struct mrmgr__itree reg_tree;   /* one node per distinct range */
static uint64_t reg_entries, reg_runs, reg_budget;
uint64_t mrmgr__watch_budget_override;

static uint64_t budget(void)
{
	if (mrmgr__watch_budget_override)
		return mrmgr__watch_budget_override;
	if (!reg_budget) {
		char buf[32] = "";
		int fd = open("/proc/sys/vm/max_map_count", O_RDONLY | O_CLOEXEC);
		long v = 0;

		if (fd >= 0) {
			ssize_t n = read(fd, buf, sizeof(buf) - 1);

			if (n > 0)
				buf[n] = '\0';
			close(fd);
			v = strtol(buf, NULL, 10);
		}
		reg_budget = (uint64_t)(v > 0 ? v : 65530) / 4;
	}
	return reg_budget;
}

/*
 * Sweep the union of the distinct ranges over [lo, hi]: count its pieces
 * (runs; adjacent ranges are one piece) and, when unreg is set,
 * unregister every uncovered gap. Costs the number of distinct ranges
 * there, not the number of regions.
 */
static uint64_t sweep(uint64_t lo, uint64_t hi, int unreg)
{
	uint64_t next = lo, pieces = 0, end = 0;
	int open_piece = 0;

	for (struct mrmgr__itree_node *n = mrmgr__itree_first_overlap(&reg_tree, lo, hi);
	     n; n = mrmgr__itree_next_overlap(n, lo, hi)) {
		uint64_t a = n->start > lo ? n->start : lo;
		uint64_t b = n->last < hi ? n->last : hi;

		if (open_piece && a <= end + 1) {
			if (b > end)
				end = b;
			continue;
		}
		if (open_piece)
			next = end + 1;
		if (unreg && a > next)
			mrmgr__uffd_unregister(next, a - 1);
		pieces++;
		open_piece = 1;
		end = b;
	}
	if (open_piece) {
		if (end == hi)
			return pieces;
		next = end + 1;
	}
	if (unreg && next <= hi)
		mrmgr__uffd_unregister(next, hi);
	return pieces;
}

static void widen(uint64_t s, uint64_t l, uint64_t *lo, uint64_t *hi)
{
	*lo = s ? s - 1 : s;
	*hi = l != UINT64_MAX ? l + 1 : l;
}

static struct mrmgr__watch *watch_of(struct mrmgr__itree_node *n)
{
	return mrmgr__container_of(n, struct mrmgr__watch, node);
}

/* The tree's node for exactly [s, l], if any. */
static struct mrmgr__watch *find_same(uint64_t s, uint64_t l)
{
	for (struct mrmgr__itree_node *n = mrmgr__itree_first_overlap(&reg_tree, s, s);
	     n; n = mrmgr__itree_next_overlap(n, s, s))
		if (n->start == s && n->last == l)
			return watch_of(n);
	return NULL;
}

/* Add w for [s, l]: 0, or EOVERFLOW when a new run would pass the budget. */
static int watch_join(struct mrmgr__watch *w, uint64_t s, uint64_t l)
{
	struct mrmgr__watch *same = find_same(s, l);
	uint64_t lo, hi, p;

	w->node.start = s;
	w->node.last = l;
	if (same) {
		w->next = same->next;
		w->prev = same;
		same->next->prev = w;
		same->next = w;
		w->in_tree = 0;
		reg_entries++;
		return 0;
	}
	widen(s, l, &lo, &hi);
	p = sweep(lo, hi, 0);
	if (!p && reg_runs >= budget())
		return EOVERFLOW;
	mrmgr__itree_insert(&reg_tree, &w->node);
	w->next = w->prev = w;
	w->in_tree = 1;
	reg_runs = reg_runs + 1 - p;
	reg_entries++;
	return 0;
}

/* Drop w; the last member of a range unregisters what nothing else covers. */
static void watch_leave(struct mrmgr__watch *w)
{
	uint64_t lo, hi, s = w->node.start, l = w->node.last;

	reg_entries--;
	if (w->next != w) {
		struct mrmgr__watch *heir = w->next;

		w->prev->next = w->next;
		w->next->prev = w->prev;
		if (w->in_tree) {
			mrmgr__itree_remove(&reg_tree, &w->node);
			mrmgr__itree_insert(&reg_tree, &heir->node);
			heir->in_tree = 1;
		}
		return;
	}
	mrmgr__itree_remove(&reg_tree, &w->node);
	widen(s, l, &lo, &hi);
	reg_runs = reg_runs - 1 + sweep(lo, hi, 0);
	sweep(s, l, 1);
}

void mrmgr__watch_stats(uint64_t *ranges, uint64_t *runs, uint64_t *bud)
{
	*ranges = reg_entries;
	*runs = reg_runs;
	*bud = budget();
}

void mrmgr__watch_fork_child(void)
{
	/* The entries belong to regions the child forgets; its mappings lost
	 * their registration at fork. */
	mrmgr__itree_init(&reg_tree);
	reg_entries = reg_runs = 0;
}

/* ------------------------------------------------------------ coverage */

enum tx_kind { TX_NONE = 0, TX_UFFD, TX_TRUSTED };

/*
 * Register the VMAs that hold [s, l], after checking they are anonymous
 * private memory, and check again after registering: a mapping replaced
 * in between is then either seen by the second look or raises an event.
 */
static int uffd_watch(struct mrmgr__watch_tx *tx, uint64_t s, uint64_t l)
{
	uint64_t vs, vl, vs2, vl2;
	int err, kind;

	kind = mrmgr__vma_classify(s, l, &vs, &vl);
	if (kind != MRMGR__VMA_ANON_PRIVATE)
		return kind == MRMGR__VMA_UNMAPPED ? EFAULT : EPERM;
	/* The reader's own stack: watching it could make it wait for itself. */
	if (mrmgr__uffd_internal(vs, vl))
		return EBUSY;
	/* Counted first: the budget refuses before the kernel is asked. */
	err = watch_join(&tx->w, vs, vl);
	if (err)
		return err;
	err = mrmgr__uffd_register(vs, vl);
	if (!err) {
		kind = mrmgr__vma_classify(s, l, &vs2, &vl2);
		if (kind != MRMGR__VMA_ANON_PRIVATE || vs2 < vs || vl2 > vl)
			err = kind == MRMGR__VMA_UNMAPPED ? EFAULT : EAGAIN;
	}
	if (err) {
		watch_leave(&tx->w);
		return err;
	}
	tx->kind = TX_UFFD;
	return 0;
}

int mrmgr__mon_watch_begin(struct mrmgr_cache *c, uint64_t start,
			   uint64_t last, struct mrmgr__watch_tx *tx)
{
	uint32_t mode = c->mon.mode;
	int err = ENODEV;

	memset(tx, 0, sizeof(*tx));
	/* Before anything pins the range, so notifications reach us. */
	mrmgr__mon_filter_add(start, last);
	if (mode == MRMGR_MONITOR_EXTERNAL || mode == MRMGR_MONITOR_NONE) {
		tx->kind = TX_TRUSTED;
		return 0;
	}
	pthread_mutex_lock(&mrmgr__mon_lock);
	if (mode != MRMGR_MONITOR_HOOKS && mode != MRMGR_MONITOR_PATCH &&
	    mrmgr__uffd_start() == 0) {
		err = uffd_watch(tx, start, last);
		if (!err) {
			pthread_mutex_unlock(&mrmgr__mon_lock);
			return 0;
		}
	}
	if (mode != MRMGR_MONITOR_UFFD && mrmgr__mon_inproc_covers(mode, -1)) {
		/* The hooks (library or patched libc) see this process's
		 * calls on private memory; what happens to shared memory
		 * elsewhere they cannot see. */
		int kind = mrmgr__vma_classify(start, last, NULL, NULL);

		if (mrmgr__mon_inproc_covers(mode, kind)) {
			tx->kind = TX_TRUSTED;
			err = 0;
		} else {
			err = kind == MRMGR__VMA_UNMAPPED ? EFAULT : EPERM;
		}
	}
	pthread_mutex_unlock(&mrmgr__mon_lock);
	if (err) {
		c->mon.unwatched++;
		mrmgr__dbg("monitor: [%#llx, %#llx] not watched (%s): not cached",
			   (unsigned long long)start, (unsigned long long)last,
			   strerror(err));
	}
	return err;
}

void mrmgr__mon_watch_commit(struct mrmgr_cache *c, struct mrmgr__watch_tx *tx,
			     struct mrmgr_region *r)
{
	(void)c;
	r->watched = 0;
	if (tx->kind != TX_UFFD)
		return;
	/* The region joins the range before the provisional entry leaves it,
	 * so nothing is unregistered in between. */
	pthread_mutex_lock(&mrmgr__mon_lock);
	(void)watch_join(&r->watch, tx->w.node.start, tx->w.node.last);
	watch_leave(&tx->w);
	pthread_mutex_unlock(&mrmgr__mon_lock);
	r->watched = 1;
	tx->kind = TX_NONE;
}

void mrmgr__mon_watch_abort(struct mrmgr_cache *c, struct mrmgr__watch_tx *tx)
{
	(void)c;
	if (tx->kind != TX_UFFD)
		return;
	pthread_mutex_lock(&mrmgr__mon_lock);
	watch_leave(&tx->w);
	pthread_mutex_unlock(&mrmgr__mon_lock);
	tx->kind = TX_NONE;
}

void mrmgr__mon_unwatch(struct mrmgr_cache *c, struct mrmgr_region *r)
{
	(void)c;
	if (!r->watched)
		return;
	pthread_mutex_lock(&mrmgr__mon_lock);
	watch_leave(&r->watch);
	pthread_mutex_unlock(&mrmgr__mon_lock);
	r->watched = 0;
}
