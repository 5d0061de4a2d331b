/*
 * The invalidation queue: a bounded, lock-free ring of address ranges
 * that any number of producers append to and every cache reads with its
 * own cursor.
 *
 * Producers: the userfaultfd reader thread, and mrmgr_notify_unmap()
 * (memory hooks, allocators, signal handlers). Appending is one
 * fetch-and-add on the event word to claim an index, then a seqlock-style
 * write of the slot; no lock, no allocation, async-signal-safe.
 *
 * Consumers: caches, under their own lock. A cache that falls more than
 * the ring's size behind (or finds a slot it cannot read consistently)
 * cannot know what it missed and invalidates everything it holds: the
 * queue is bounded, and overflowing it is conservative, never unsafe.
 *
 * The event word, (events pushed << 1) | busy, is what the lock-free hit
 * path loads. Why one load suffices, including for userfaultfd:
 *   The kernel completes a non-cooperative event (UNMAP, REMOVE, REMAP)
 *   inside read(), when the message is copied out (fs/userfaultfd.c:
 *   userfaultfd_ctx_read() calls userfaultfd_event_complete() under the
 *   event queue's lock, which wakes the thread waiting in
 *   userfaultfd_event_wait_completion()). So munmap() returns as soon as
 *   the reader has read() the message, before the reader has pushed
 *   anything. The reader therefore sets the busy bit (seq_cst) before
 *   every read() and clears it only after it has pushed all it read. The
 *   unmapping thread cannot return before that read(), which comes after
 *   the busy store; so that thread, and any thread that learns of its
 *   return, loads a word that is either busy or counts the event. Both
 *   differ from the (even, older) word a cache recorded when it last
 *   drained, so the hit path falls to the slow path, which waits for busy
 *   to clear and applies the events before looking up.
 *   The other producers push before their caller returns, so the count
 *   alone carries them.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <errno.h>
#include <sched.h>
#include <stdint.h>

#include "monitor.h"

#define RING_ORDER 12
#define RING_SIZE ((uint64_t)1 << RING_ORDER)
#define RING_MASK (RING_SIZE - 1)
/* Spins (with sched_yield) waiting for a producer to finish its slot or
 * for the reader to finish its batch before giving up on the slot. */
#define SLOT_WAIT_SPINS 100000

struct slot {
	uint64_t seq;   /* index + 1 once published; 0 while being written */
	uint64_t start; /* inclusive, page-aligned */
	uint64_t last;  /* inclusive */
};

struct mrmgr__mon_hot mrmgr__mon_hot;
static struct slot ring[RING_SIZE];

/* Counters, written by producers: away from the word's line. */
_Alignas(MRMGR__CACHELINE) uint64_t mrmgr__mon_uffd_events;
uint64_t mrmgr__mon_notify_events;

/*
 * Which 2 MiB chunks may hold a cached range (one bit per chunk, modulo
 * the table), so notifications about memory that was never cached stop
 * here. Bits are only ever set; a range wider than WIDE chunks sets
 * filter_all. Set before a range is registered, tested after the memory
 * changed (both seq_cst): a notification that misses a bit raced with a
 * registration that happened after the change, which registered the new
 * pages.
 */
#define FILTER_SHIFT 21
#define FILTER_BITS 65536u
#define FILTER_WIDE 512u
/* How far filter_run() looks each way, in chunks (8 GiB). */
#define FILTER_RUN 4096u
static uint64_t filter[FILTER_BITS / 64];
static int filter_all;

/*
 * Set the bits of [start, last]: each with a seq_cst read-modify-write,
 * or found set by a seq_cst load (bits are never cleared, so a bit seen
 * set is as good as one set here). No fence: see filter_watch().
 */
static inline void filter_set(uint64_t start, uint64_t last)
{
	uint64_t c0 = start >> FILTER_SHIFT, c1 = last >> FILTER_SHIFT;

	if (c1 - c0 >= FILTER_WIDE) {
		__atomic_store_n(&filter_all, 1, __ATOMIC_SEQ_CST);
		return;
	}
	for (uint64_t c = c0; c <= c1; c++) {
		unsigned int b = (unsigned int)(c % FILTER_BITS);
		uint64_t bit = (uint64_t)1 << (b % 64);

		if (!(__atomic_load_n(&filter[b / 64], __ATOMIC_SEQ_CST) & bit))
			__atomic_fetch_or(&filter[b / 64], bit, __ATOMIC_SEQ_CST);
	}
}

void mrmgr__mon_filter_add(uint64_t start, uint64_t last)
{
	filter_set(start, last);
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
}

/*
 * filter_add() for a registration's window (mrmgr__watch_begin()),
 * without the trailing fence: the window's one seq_cst fence is its
 * commit's (mrmgr__mon_change_in_flight()), and change.c's argument
 * needs no other (change.c, "Where the order comes from"). The fence
 * here was an mfence on every miss on x86, a tenth of the window's time.
 */
void mrmgr__mon_filter_watch(uint64_t start, uint64_t last)
{
	filter_set(start, last);
}

void mrmgr__mon_filter_span(uint64_t start, uint64_t last, uint64_t *lo,
			   uint64_t *hi)
{
	uint64_t mask = ((uint64_t)1 << FILTER_SHIFT) - 1;

	*lo = start & ~mask;
	*hi = last | mask;
}

/* Chunks set from chunk c upwards (down: downwards), at most max. */
static uint64_t run_up(uint64_t c, uint64_t max)
{
	uint64_t n = 0;

	while (n < max) {
		unsigned int b = (unsigned int)((c + n) % FILTER_BITS);
		uint64_t w = ~__atomic_load_n(&filter[b / 64], __ATOMIC_ACQUIRE) >>
			     (b % 64);

		if (w) {
			n += (uint64_t)__builtin_ctzll(w);
			break;
		}
		n += 64 - b % 64;
	}
	return n < max ? n : max;
}

static uint64_t run_down(uint64_t c, uint64_t max)
{
	uint64_t n = 0;

	while (n < max) {
		unsigned int b = (unsigned int)((c - n) % FILTER_BITS);
		uint64_t w = ~__atomic_load_n(&filter[b / 64], __ATOMIC_ACQUIRE) <<
			     (63 - b % 64);

		if (w) {
			n += (uint64_t)__builtin_clzll(w);
			break;
		}
		n += b % 64 + 1;
	}
	return n < max ? n : max;
}

void mrmgr__mon_filter_run(uint64_t start, uint64_t last, uint64_t *lo,
			   uint64_t *hi)
{
	uint64_t c0 = start >> FILTER_SHIFT, c1 = last >> FILTER_SHIFT;
	uint64_t top = UINT64_MAX >> FILTER_SHIFT;

	if (__atomic_load_n(&filter_all, __ATOMIC_ACQUIRE)) {
		*lo = 0;
		*hi = UINT64_MAX;
		return;
	}
	if (c0)
		c0 -= run_down(c0 - 1, c0 < FILTER_RUN ? c0 : FILTER_RUN);
	if (c1 < top)
		c1 += run_up(c1 + 1, top - c1 < FILTER_RUN ? top - c1 : FILTER_RUN);
	*lo = c0 << FILTER_SHIFT;
	*hi = (c1 << FILTER_SHIFT) | (((uint64_t)1 << FILTER_SHIFT) - 1);
}

void mrmgr__mon_filter_widen(uint64_t start, uint64_t last, uint64_t vs,
			     uint64_t vl)
{
	uint64_t c0 = start >> FILTER_SHIFT, c1 = last >> FILTER_SHIFT;
	uint64_t pad, lo, hi;

	if (c1 - c0 + 1 >= FILTER_WIDE - 1)
		return;
	pad = (FILTER_WIDE - 1 - (c1 - c0 + 1)) / 2;
	lo = c0 > pad ? (c0 - pad) << FILTER_SHIFT : 0;
	hi = ((c1 + pad) << FILTER_SHIFT) | (((uint64_t)1 << FILTER_SHIFT) - 1);
	if (vs > lo)
		lo = vs;
	if (vl < hi)
		hi = vl;
	if (lo <= hi)
		mrmgr__mon_filter_add(lo, hi);
}

static int filter_may_hold(uint64_t start, uint64_t last)
{
	uint64_t c0 = start >> FILTER_SHIFT, c1 = last >> FILTER_SHIFT;

	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	if (__atomic_load_n(&filter_all, __ATOMIC_RELAXED) ||
	    c1 - c0 >= FILTER_WIDE)
		return 1;
	for (uint64_t c = c0; c <= c1; c++) {
		unsigned int b = (unsigned int)(c % FILTER_BITS);

		if (__atomic_load_n(&filter[b / 64], __ATOMIC_RELAXED) &
		    ((uint64_t)1 << (b % 64)))
			return 1;
	}
	return 0;
}

void mrmgr__mon_push(uint64_t start, uint64_t last)
{
	uint64_t idx = __atomic_fetch_add(&mrmgr__mon_word, 2,
					  __ATOMIC_SEQ_CST) >> 1;
	struct slot *s = &ring[idx & RING_MASK];

	__atomic_store_n(&s->seq, 0, __ATOMIC_RELAXED);
	__atomic_thread_fence(__ATOMIC_RELEASE);
	__atomic_store_n(&s->start, start, __ATOMIC_RELAXED);
	__atomic_store_n(&s->last, last, __ATOMIC_RELAXED);
	__atomic_store_n(&s->seq, idx + 1, __ATOMIC_RELEASE);
}

static int read_slot(uint64_t idx, uint64_t *start, uint64_t *last);

int mrmgr__mon_push_filtered(uint64_t start, uint64_t last)
{
	if (!filter_may_hold(start, last))
		return 0;
	mrmgr__mon_push(start, last);
	return 1;
}

int mrmgr__mon_queue_dirty(uint64_t from, uint64_t start, uint64_t last)
{
	uint64_t tail = mrmgr__mon_queue_tail();

	if (tail - from > RING_SIZE)
		return 1; /* lapped: anything may have been there */
	for (uint64_t i = from; i < tail; i++) {
		uint64_t s, l;

		/* Not written yet (or overwritten): assume it overlaps. */
		if (read_slot(i, &s, &l) <= 0 || (s <= last && l >= start))
			return 1;
	}
	return 0;
}

MRMGR_EXPORT int mrmgr_notify_unmap(void *addr, size_t length)
{
	const uint64_t page = 4096;
	uint64_t a = (uintptr_t)addr, last;

	if (!length || a + (length - 1) < a)
		return EINVAL;
	/* 4 KiB granules are fine on any page size: only overlap matters. */
	last = (a + (length - 1)) | (page - 1);
	a &= ~(page - 1);
	if (!filter_may_hold(a, last))
		return 0;
	__atomic_fetch_add(&mrmgr__mon_notify_events, 1, __ATOMIC_RELAXED);
	mrmgr__mon_push(a, last);
	return 0;
}

uint64_t mrmgr__mon_queue_tail(void)
{
	return __atomic_load_n(&mrmgr__mon_word, __ATOMIC_ACQUIRE) >> 1;
}

void mrmgr__mon_queue_attach(struct mrmgr__mon_cache *m, uint64_t *seen)
{
	uint64_t w;

	/* Nothing before now concerns a cache that holds nothing; wait out a
	 * running batch so the word recorded is even. */
	while ((w = __atomic_load_n(&mrmgr__mon_word, __ATOMIC_ACQUIRE)) & 1)
		sched_yield();
	m->cursor = w >> 1;
	m->target = w;
	mrmgr__mon_known_drop(m, 0, UINT64_MAX);
	__atomic_store_n(seen, w, __ATOMIC_RELEASE);
}

void mrmgr__mon_drain_begin(struct mrmgr__mon_cache *m)
{
	uint64_t w;

	/* The reader's batch is short and never blocks on anything of ours;
	 * waiting for it is what makes the event visible to this thread. */
	while ((w = __atomic_load_n(&mrmgr__mon_word, __ATOMIC_ACQUIRE)) & 1)
		sched_yield();
	m->target = w;
}

/* Read slot idx consistently: 1 and the range, 0 if not yet there,
 * -1 if it was overwritten. */
static int read_slot(uint64_t idx, uint64_t *start, uint64_t *last)
{
	const struct slot *s = &ring[idx & RING_MASK];
	uint64_t q = __atomic_load_n(&s->seq, __ATOMIC_ACQUIRE);

	if (q != idx + 1)
		return q > idx + 1 ? -1 : 0;
	*start = __atomic_load_n(&s->start, __ATOMIC_RELAXED);
	*last = __atomic_load_n(&s->last, __ATOMIC_RELAXED);
	__atomic_thread_fence(__ATOMIC_ACQUIRE);
	return __atomic_load_n(&s->seq, __ATOMIC_RELAXED) == idx + 1 ? 1 : -1;
}

int mrmgr__mon_drain_next(struct mrmgr__mon_cache *m, uint64_t *start,
			  uint64_t *last)
{
	uint64_t end = m->target >> 1;

	if (m->cursor >= end)
		return 0;
	for (long spin = 0;; spin++) {
		int r;

		/* Lapped: the slots this cache needs were reused. */
		if (mrmgr__mon_queue_tail() - m->cursor > RING_SIZE)
			break;
		r = read_slot(m->cursor, start, last);
		if (r > 0) {
			m->cursor++;
			m->events++;
			mrmgr__mon_known_drop(m, *start, *last);
			return 1;
		}
		if (r < 0 || spin >= SLOT_WAIT_SPINS)
			break;
		/* A producer claimed the index and has not written it yet. */
		sched_yield();
	}
	/*
	 * Give up on the rest: the caller invalidates everything, which covers
	 * any event up to now, including one whose producer is still writing
	 * (its memory changed before it claimed the index).
	 */
	m->cursor = end;
	m->overflows++;
	mrmgr__mon_known_drop(m, 0, UINT64_MAX);
	return -1;
}

void mrmgr__mon_drain_end(struct mrmgr__mon_cache *m, uint64_t *seen)
{
	/* Release: a hit that sees this value sees the tree without the
	 * invalidated regions. */
	__atomic_store_n(seen, m->target, __ATOMIC_RELEASE);
}

int mrmgr__mon_queue_saw(uint64_t from, uint64_t start, uint64_t last)
{
	uint64_t tail = mrmgr__mon_queue_tail();

	if (tail - from > RING_SIZE)
		from = tail - RING_SIZE;
	for (uint64_t i = from; i < tail; i++) {
		uint64_t s, l;

		for (int spin = 0; spin < 1000; spin++) {
			int r = read_slot(i, &s, &l);

			if (r > 0) {
				if (s <= last && l >= start)
					return 1;
				break;
			}
			if (r < 0)
				break;
			sched_yield();
		}
	}
	return 0;
}

int mrmgr__mon_queue_read(uint64_t idx, uint64_t *start, uint64_t *last)
{
	uint64_t tail = mrmgr__mon_queue_tail();

	if (idx >= tail || tail - idx > RING_SIZE)
		return 0;
	return read_slot(idx, start, last) > 0;
}

void mrmgr__mon_queue_fork_child(void)
{
	/* Only the forking thread exists in the child: no batch runs. */
	__atomic_fetch_and(&mrmgr__mon_word, ~(uint64_t)1, __ATOMIC_SEQ_CST);
}
