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

#include "log.h"
#include "monitor.h"
#include "source.h"

static struct mrmgr__itree reg_tree;   /* one node per distinct range */
static uint64_t reg_entries, reg_runs, reg_budget;
uint64_t mrmgr__watch_budget_override;
void (*mrmgr__watch_test_between)(int phase, uint64_t vs, uint64_t vl);
uint64_t mrmgr__watch_unregistered_seen, mrmgr__watch_probe_failed;

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

/* Add w for [s, l]: 0, or EOVERFLOW when a new run would pass the budget.
 * With only_same, join only a range already there (else ENOENT). */
static int watch_join_ex(struct mrmgr__watch *w, uint64_t s, uint64_t l,
			 int only_same)
{
	struct mrmgr__watch *same = find_same(s, l);
	uint64_t lo, hi, p;

	if (!same && only_same)
		return ENOENT;
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
		return MRMGR__WERR_BUDGET;
	mrmgr__itree_insert(&reg_tree, &w->node);
	w->next = w->prev = w;
	w->in_tree = 1;
	reg_runs = reg_runs + 1 - p;
	reg_entries++;
	return 0;
}

static int watch_join(struct mrmgr__watch *w, uint64_t s, uint64_t l)
{
	return watch_join_ex(w, s, l, 0);
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

/* ------------------------------------------------------------ known extents */

/*
 * Extents this cache classified (and, under userfaultfd, registered) and
 * no event has touched since: the next miss inside one needs no VMA query,
 * and under userfaultfd no UFFDIO_REGISTER when the registry still holds
 * the extent. Every change that can alter what an extent is (unmap, a
 * mapping put over it, a move) raises an event the cache drains before
 * its miss, and drain_next() drops the extents it overlaps.
 */
static int known_holds(const struct mrmgr__mon_known *k, uint64_t s,
		       uint64_t l)
{
	return k->last && k->start <= s && k->last >= l;
}

/* The extent that held the last range found is asked first: misses
 * come in runs over one buffer pool. */
static struct mrmgr__mon_known *known_find(struct mrmgr__mon_cache *m,
					   uint64_t s, uint64_t l)
{
	struct mrmgr__mon_known *k = &m->known[m->known_last];

	if (known_holds(k, s, l))
		return k;
	for (unsigned int i = 0; i < MRMGR__ARRAY_SIZE(m->known); i++)
		if (known_holds(&m->known[i], s, l)) {
			m->known_last = i;
			return &m->known[i];
		}
	return NULL;
}

static void known_add(struct mrmgr__mon_cache *m, uint64_t s, uint64_t l,
		      int kind)
{
	struct mrmgr__mon_known *k = known_find(m, s, l);

	if (!k) {
		k = &m->known[m->known_next++ % MRMGR__ARRAY_SIZE(m->known)];
	}
	k->start = s;
	k->last = l;
	k->kind = (uint32_t)kind;
}

void mrmgr__mon_known_drop(struct mrmgr__mon_cache *m, uint64_t s, uint64_t l)
{
	for (unsigned int i = 0; i < MRMGR__ARRAY_SIZE(m->known); i++)
		if (m->known[i].last && m->known[i].start <= l &&
		    m->known[i].last >= s)
			m->known[i].last = 0;
}

/* ------------------------------------------------------------ coverage */

enum tx_kind { TX_NONE = 0, TX_UFFD, TX_TRUSTED };

static int kind_err(int kind)
{
	switch (kind) {
	case MRMGR__VMA_ANON_PRIVATE:
		return 0;
	case MRMGR__VMA_FILE_PRIVATE:
		return MRMGR__WERR_FILE;
	case MRMGR__VMA_SHARED:
		return MRMGR__WERR_SHARED;
	default:
		return MRMGR__WERR_HOLE;
	}
}

struct look {
	uint64_t next, last;
	int err;
};

/* Probe lengths for the page sizes a VMA may have (4 KiB first; hugetlb
 * VMAs refuse a length that is not a multiple of theirs with EINVAL). */
static const uint64_t probe_len[] = { 4096, 2ull << 20, 1ull << 30 };

/*
 * Whether v is registered, at its first and its last page: a registered
 * VMA grows only upwards (mremap in place) and only over free space, so
 * when both ends are registered at their probes, all of v is, or what
 * changed in between raised an event.
 */
static int probe(const struct mrmgr__vma *v)
{
	int err = EINVAL;

	for (unsigned int i = 0; err == EINVAL && i < MRMGR__ARRAY_SIZE(probe_len) &&
	     probe_len[i] <= v->end - v->start; i++) {
		err = mrmgr__uffd_registered(v->start, v->start + probe_len[i] - 1);
		if (!err && v->end - v->start > probe_len[i])
			err = mrmgr__uffd_registered(v->end - probe_len[i],
						     v->end - 1);
	}
	return err;
}

static int look_one(const struct mrmgr__vma *v, void *arg)
{
	struct look *k = arg;
	int err;

	if (v->start != k->next) {
		/* A hole, or (first VMA) a mapping that now starts earlier. */
		k->err = v->start > k->next ? EFAULT : EAGAIN;
		return 1;
	}
	if ((v->flags & MRMGR__VMA_F_SHARED) || !(v->flags & MRMGR__VMA_F_ANON)) {
		k->err = EAGAIN;
		return 1;
	}
	err = probe(v);
	if (err) {
		/* ENOENT: a hole at the registration, mapped again since. */
		__atomic_fetch_add(err == ENOENT ? &mrmgr__watch_unregistered_seen
						 : &mrmgr__watch_probe_failed,
				   1, __ATOMIC_RELAXED);
		k->err = EAGAIN;
		return 1;
	}
	if (v->end - 1 >= k->last) {
		k->err = v->end - 1 == k->last ? 0 : EAGAIN;
		return 1;
	}
	k->next = v->end;
	return 0;
}

/*
 * After UFFDIO_REGISTER of [vs, vl]: whether that extent is, now, exactly
 * the mappings it was (no hole, nothing wider) and every one of them is
 * registered. 0, EFAULT for a hole, EAGAIN otherwise.
 */
static int second_look(uint64_t vs, uint64_t vl)
{
	struct look k = { vs, vl, EFAULT };
	int ret = mrmgr__vma_walk(vs, vl, 0, look_one, &k);

	if (ret < 0)
		return EAGAIN;
	return k.err;
}

/*
 * Register the VMAs that hold [s, l] (their extent [vs, vl]), after
 * checking they are anonymous private memory, and look again after
 * registering. An extent this cache already watches (known, still in the
 * registry) is joined without any system call.
 *
 * Why vouching for the whole extent is sound (the ordering argument).
 * UFFDIO_REGISTER marks the VMAs present at that instant (R) and skips
 * holes silently. After R, a change to a registered VMA raises an event
 * (unmap, remap, remove), and a new VMA never merges into a registered
 * one. So what can be wrong after R is a piece of [vs, vl] that was a
 * hole at R (punched after the classification, where nothing was
 * registered yet, so no event) and is mapped again: unregistered, silent
 * for ever. The old second look checked only that the extent had not
 * grown, so known_add() and the registry vouched for such a hole, and a
 * later get there was joined through the known extent with no
 * registration at all (issue 21; tests/unit/test_monitor_window.c holds
 * each window open). second_look() walks [vs, vl] and wants no hole,
 * exactly the extent, and every VMA registered at both ends, which it
 * asks the kernel (maps do not show it): a piece still a hole fails the
 * walk, a piece refilled fails its probe (ENOENT: a VMA of its own,
 * unregistered, or a hole again by then).
 *
 * What the walk and probes saw registered changes after them only with
 * an event. Each event overlapping the extent drops it from the known
 * extents when this cache drains it, and none at or after tx->from can
 * have been drained before known_add() below: the cache's lock is held
 * from its last drain through here. An event over the request itself
 * also keeps the region out of the cache (watch_commit()) or, drained
 * later, invalidates it.
 */
int mrmgr__watch_uffd(struct mrmgr__mon_cache *m, struct mrmgr__watch_tx *tx,
		      uint64_t s, uint64_t l)
{
	struct mrmgr__mon_known *k = known_find(m, s, l);
	uint64_t vs, vl;
	int err, kind;

	if (k && k->kind == MRMGR__VMA_ANON_PRIVATE &&
	    !watch_join_ex(&tx->w, k->start, k->last, 1)) {
		tx->kind = TX_UFFD;
		return 0;
	}
	kind = mrmgr__vma_classify(s, l, &vs, &vl);
	if (kind != MRMGR__VMA_ANON_PRIVATE)
		return kind_err(kind);
	/* The reader's own stack: watching it could make it wait for itself. */
	if (mrmgr__uffd_internal(vs, vl))
		return EBUSY;
	/* Counted first: the budget refuses before the kernel is asked. */
	err = watch_join(&tx->w, vs, vl);
	if (err)
		return err;
	if (mrmgr__watch_test_between)
		mrmgr__watch_test_between(MRMGR__WATCH_TEST_BEFORE_REGISTER, vs, vl);
	err = mrmgr__uffd_register(vs, vl);
	if (!err && mrmgr__watch_test_between)
		mrmgr__watch_test_between(MRMGR__WATCH_TEST_AFTER_REGISTER, vs, vl);
	if (!err)
		err = second_look(vs, vl);
	if (err) {
		watch_leave(&tx->w);
		return err;
	}
	if (mrmgr__watch_test_between)
		mrmgr__watch_test_between(MRMGR__WATCH_TEST_AFTER_SECOND_LOOK, vs, vl);
	known_add(m, vs, vl, MRMGR__VMA_ANON_PRIVATE);
	tx->kind = TX_UFFD;
	return 0;
}

/*
 * Under a source that wraps the process's own calls (the patched libc,
 * the hooks): it vouches for anonymous private memory.
 *
 * The known extent is the part of the VMAs' extent inside the filter's
 * run of set chunks around the request, read before the classification
 * (bits are never cleared, so a change there from then on is pushed,
 * and drained after known_add(): the cache's lock is held from its last
 * drain). The whole extent would outlive a change the filter drops, in
 * a chunk nothing was cached in: a file or shared mapping put there
 * later was trusted as anonymous memory (test_monitor_window.c, suite
 * filter). After the query the filter widens over the extent (up to
 * 1 GiB), so the next miss elsewhere in the VMA queries once more and
 * then knows the whole of it: a VMA costs a query or two, not one per
 * 2 MiB chunk (doc/perf.md, the miss churn). Never shared
 * memory (another process changes it), never a private file mapping:
 * truncating the file, from any process, zaps even the private copies
 * (truncate_pagecache() unmaps COWed pages too), and no call of ours
 * sees it.
 */
int mrmgr__watch_trusted(struct mrmgr__mon_cache *m, struct mrmgr__watch_tx *tx,
			 uint64_t s, uint64_t l)
{
	struct mrmgr__mon_known *k = known_find(m, s, l);
	uint64_t vs, vl;
	int kind;

	if (k) {
		kind = (int)k->kind;
	} else {
		uint64_t lo, hi;

		/* Only what the filter held before the query: a change
		 * elsewhere in the extent may be dropped by it, and a file
		 * or shared mapping put there would be trusted. */
		mrmgr__mon_filter_run(s, l, &lo, &hi);
		kind = mrmgr__vma_classify(s, l, &vs, &vl);
		if (kind == MRMGR__VMA_ANON_PRIVATE) {
			known_add(m, vs > lo ? vs : lo, vl < hi ? vl : hi, kind);
			/* So that the next query in this VMA vouches for
			 * more of it: one query per VMA, not per chunk. */
			if (vs < lo || vl > hi)
				mrmgr__mon_filter_widen(s, l, vs, vl);
		}
	}
	if (kind != MRMGR__VMA_ANON_PRIVATE)
		return kind_err(kind);
	tx->kind = TX_TRUSTED;
	return 0;
}

int mrmgr__watch_begin(struct mrmgr__mon_cache *m, uint64_t start,
		       uint64_t last, struct mrmgr__watch_tx *tx)
{
	const struct mrmgr__mon_mode *mm = m->mm;
	const struct mrmgr__mon_source *src;
	int err = MRMGR__WERR_NO_SOURCE;

	/* Only what is read before a join fills the rest (no memset: it
	 * was most of this function's time on a miss). */
	tx->kind = TX_NONE;
	tx->w.joined = 0;
	tx->w.dirty = 0;
	tx->start = start;
	tx->last = last;
	/* Before anything pins the range, so notifications reach us; then
	 * the window opens (change.c has the argument: no fence here, the
	 * commit's is the window's one). */
	mrmgr__mon_filter_watch(start, last);
	tx->from = __atomic_load_n(&mrmgr__mon_word, __ATOMIC_SEQ_CST) >> 1;
	if (mm->promised) {
		tx->kind = TX_TRUSTED;
		return 0;
	}
	/* The usual case (the patched libc, nothing changed): no lock but
	 * the cache's; the source's checks are the pick's (sources.c). */
	src = mrmgr__mon_pick_quiet(mm);
	if (src) {
		err = src->watch(m, tx, start, last);
	} else {
		pthread_mutex_lock(&mrmgr__mon_lock);
		src = mrmgr__mon_pick(mm);
		if (src)
			err = src->watch(m, tx, start, last);
		pthread_mutex_unlock(&mrmgr__mon_lock);
	}
	if (err)
		mrmgr__watch_unwatched(m, start, last, err);
	return err;
}

int mrmgr__watch_commit(struct mrmgr__mon_cache *m, struct mrmgr__watch_tx *tx,
			struct mrmgr__watch *w)
{
	int dirty = w->dirty;

	w->joined = 0;
	w->dirty = 0;
	/*
	 * After the registration pinned the pages: a change that is in
	 * flight over them, or began (or ended) since the window opened, may
	 * have released them; what this registration holds may then be the
	 * old pages, and caching it would hand them out to a thread that got
	 * the address back. The seq_cst fence between the registration and
	 * these loads is mrmgr__mon_change_in_flight()'s first step (nothing
	 * is loaded before it; a second fence here cost a miss another
	 * mfence); when dirty, nothing is checked.
	 */
	if (dirty || mrmgr__mon_change_in_flight(tx->start, tx->last) ||
	    mrmgr__mon_queue_dirty(tx->from, tx->start, tx->last)) {
		mrmgr__watch_abort(tx);
		m->window_uncached++;
		return EAGAIN;
	}
	if (tx->kind != TX_UFFD)
		return 0;
	/* The new entry joins the range before the provisional one leaves
	 * it, so nothing is unregistered in between. */
	pthread_mutex_lock(&mrmgr__mon_lock);
	(void)watch_join(w, tx->w.node.start, tx->w.node.last);
	watch_leave(&tx->w);
	pthread_mutex_unlock(&mrmgr__mon_lock);
	w->joined = 1;
	tx->kind = TX_NONE;
	return 0;
}

void mrmgr__watch_abort(struct mrmgr__watch_tx *tx)
{
	if (tx->kind != TX_UFFD)
		return;
	pthread_mutex_lock(&mrmgr__mon_lock);
	watch_leave(&tx->w);
	pthread_mutex_unlock(&mrmgr__mon_lock);
	tx->kind = TX_NONE;
}

void mrmgr__watch_end(struct mrmgr__watch *w)
{
	if (!w->joined)
		return;
	pthread_mutex_lock(&mrmgr__mon_lock);
	watch_leave(w);
	pthread_mutex_unlock(&mrmgr__mon_lock);
	w->joined = 0;
}
