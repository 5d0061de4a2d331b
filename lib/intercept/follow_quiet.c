/*
 * The quiet check: every cache's miss asks, with no lock, whether an
 * object was loaded since follow.c's last check that answered 0
 * (mrmgr__follow_quiet()): a definition it brings must be followed
 * before the miss is cached.
 * The loader's counters (dlpi_adds, dlpi_subs) say so, but reading them
 * is a dl_iterate_phdr() call, which takes the loader's lock: about 10 ns
 * a miss, 17 in a threaded process (an atomic lock round), 4-5% of a
 * zero-cost miss. The loader appends every object it loads to the end of
 * its namespace's list, under that lock, before dlopen() returns. So
 * while the last object of our namespace's list at that check is still
 * the last one (its l_next still NULL), nothing was loaded since: one
 * load, no call, no lock. That object must stay mapped for such a read:
 * the first check pins it (dlopen(RTLD_NOLOAD), a reference never
 * dropped). Once something was loaded after it, the checks read the
 * counters again, as before.
 *
 * An object loaded and unloaded again between two misses (l_next back to
 * NULL) is not seen; it was not seen before either: the rescan the
 * counters asked for found nothing to follow any more, and pushed no
 * invalidation. An object unloaded alone needs nothing followed; its
 * definitions' wrappers stay (never reused). Other namespaces (dlmopen)
 * were never scanned: dl_iterate_phdr() reports the caller's.
 *
 * The pin takes the loader's lock with mrmgr__mon_lock held (follow.c's
 * is_self() says why its scans avoid that): once, at the first check, which follows the patched libc's start, whose
 * install takes the loader's lock under mrmgr__mon_lock too (dladdr(),
 * dlopen(RTLD_NOLOAD): patch.c). A constructor that waits for
 * mrmgr__mon_lock inside another thread's dlopen() would deadlock with
 * that install as well; the pin adds no new order between the locks.
 * (A pin taken from a constructor, inside a dlopen() of this thread:
 * constructors run once the objects are relocated, past the point where
 * a failed dlopen() unloads them.)
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <dlfcn.h>
#include <limits.h>
#include <link.h>
#include <stdio.h>
#include <string.h>

#include "follow_quiet.h"
#include "patch.h"

#if MRMGR__PATCH_SUPPORTED

/* The loader's counters at the last check that answered 0, for
 * mrmgr__follow_quiet() (no lock): all ones while none did. */
static unsigned long long ok_adds = ~0ull, ok_subs = ~0ull;

/* Our own object's link map, and the last object of its namespace's
 * list at the first check, pinned (NULL: it could not be). */
static struct link_map *self_map, *pinned;
/* pinned, while the last check answered 0 and it was the last object
 * then: mrmgr__follow_quiet() reads only its l_next. NULL: the counters. */
static struct link_map *quiet_tail;

static int counters(struct dl_phdr_info *info, size_t sz, void *arg)
{
	unsigned long long *c = arg;

	(void)sz;
	c[0] = info->dlpi_adds;
	c[1] = info->dlpi_subs;
	return 1;
}

/* Under the loader's lock (a dl_iterate_phdr() callback: the list cannot
 * change meanwhile), the last object of our namespace's list. */
static struct link_map *last_object(void)
{
	struct link_map *l = self_map;

	while (l && l->l_next)
		l = l->l_next;
	return l;
}

struct snapshot {
	unsigned long long c[2];
	int pinned_last;         /* pinned is the last object */
	struct link_map *last;
	char name[PATH_MAX];     /* last's, copied under the lock */
};

static int snap(struct dl_phdr_info *info, size_t sz, void *arg)
{
	struct snapshot *s = arg;

	counters(info, sz, s->c);
	s->last = last_object();
	s->pinned_last = pinned && s->last == pinned;
	if (!pinned && s->last && s->last->l_name)
		snprintf(s->name, sizeof(s->name), "%s", s->last->l_name);
	return 1;
}

/* The first check: pin the last object (above). */
static void pin_last(void)
{
#ifdef __GLIBC__ /* dladdr1(); elsewhere the counters, always */
	struct snapshot s;
	struct link_map *lm = NULL;
	Dl_info di;
	void *h;

	if (!dladdr1((void *)(uintptr_t)pin_last, &di, (void **)&self_map,
		     RTLD_DL_LINKMAP) || !self_map)
		return;
	s.pinned_last = 0;
	s.last = NULL;
	s.name[0] = 0;
	dl_iterate_phdr(snap, &s);
	/* By name, copied under the loader's lock: the object may be gone
	 * by now (then this finds none, or another one, refused below). */
	h = s.name[0] ? dlopen(s.name, RTLD_LAZY | RTLD_NOLOAD) : NULL;
	if (!h)
		return;
	if (dlinfo(h, RTLD_DI_LINKMAP, &lm) || !lm || lm != s.last) {
		dlclose(h);
		return;
	}
	/* Never dropped: a miss may be reading its l_next, with no lock. */
	pinned = lm;
#endif
}

void mrmgr__follow_snap(struct mrmgr__follow_snap *out, int first)
{
	struct snapshot s;

	if (mrmgr__unlikely(first))
		pin_last();
	s.c[0] = s.c[1] = 0;
	s.pinned_last = 0;
	s.last = NULL;
	s.name[0] = 0;
	dl_iterate_phdr(snap, &s);
	out->adds = s.c[0];
	out->subs = s.c[1];
	out->pinned_last = s.pinned_last;
}

void mrmgr__follow_unquiet(void)
{
	/* Not quiet while it rescans (the pair is written apart). */
	__atomic_store_n(&quiet_tail, NULL, __ATOMIC_SEQ_CST);
	__atomic_store_n(&ok_adds, ~0ull, __ATOMIC_SEQ_CST);
}

void mrmgr__follow_quiet_from(const struct mrmgr__follow_snap *s, int ret)
{
	if (!ret && __atomic_load_n(&ok_adds, __ATOMIC_RELAXED) != s->adds) {
		__atomic_store_n(&ok_subs, s->subs, __ATOMIC_RELEASE);
		__atomic_store_n(&ok_adds, s->adds, __ATOMIC_RELEASE);
	}
	/* An object loaded since the snapshot is after pinned: its l_next
	 * says so to the next miss. */
	__atomic_store_n(&quiet_tail, !ret && s->pinned_last ? pinned : NULL,
			 __ATOMIC_RELEASE);
}

int mrmgr__follow_by_tail(void)
{
	return __atomic_load_n(&quiet_tail, __ATOMIC_ACQUIRE) != NULL;
}

int mrmgr__follow_quiet(void)
{
	struct link_map *t = __atomic_load_n(&quiet_tail, __ATOMIC_ACQUIRE);
	unsigned long long c[2] = { 0, 0 };

	if (mrmgr__likely(t))
		return !__atomic_load_n(&t->l_next, __ATOMIC_ACQUIRE);
	/* A pair read while a check rewrites it matches the loader's
	 * counters only if its two halves are the ones that check wrote
	 * (it writes the counters it read, and all ones first). */
	dl_iterate_phdr(counters, c);
	return c[0] == __atomic_load_n(&ok_adds, __ATOMIC_ACQUIRE) &&
	       c[1] == __atomic_load_n(&ok_subs, __ATOMIC_ACQUIRE);
}

#else /* !MRMGR__PATCH_SUPPORTED */

int mrmgr__follow_quiet(void)
{
	return 1;
}

int mrmgr__follow_by_tail(void)
{
	return 0;
}

#endif /* MRMGR__PATCH_SUPPORTED */
