/*
 * Changes seen on both sides: mrmgr__mon_change_begin() before the kernel
 * releases pages, mrmgr__mon_change_end() after the call returned.
 *
 * The sources that wrap the program's memory calls (libc's entry points
 * patched in the process, libmrmgr_hooks.so) call begin, issue the
 * system call, and call end, whatever the call returned (a madvise() that
 * fails with ENOMEM has discarded part of its range already).
 *
 * begin claims an in-flight slot for the range and pushes the range into
 * the invalidation queue; end pushes it again and frees the slot. A cache
 * asks, after registering a range and before caching it
 * (mrmgr__mon_watch_commit()), whether a change overlapping the range is
 * in flight now or began since the registration was about to pin pages
 * (mrmgr__mon_watch_begin()); if so the registration is handed out
 * uncached.
 *
 * The guarantee this gives: a get by a thread that obtained the memory
 * after the kernel released the old pages never returns a registration of
 * the old pages, whether or not the releasing thread's call has returned.
 * The argument, with every access named below sequentially consistent
 * (one total order S):
 *
 *  (1) A region R cached before the change C began. C's begin push P1
 *      precedes C's system call U in C's thread, and U precedes the
 *      getting thread G obtaining the memory (the kernel serialises the
 *      release and the reuse of an address on the mm). So G's get loads
 *      an event word that counts P1; the cache last drained before P1
 *      (R was cached then... or drained P1 already, which removed R):
 *      the word differs from mon_seen, G takes the slow path, drains P1
 *      under the cache lock and R is gone before G looks up.
 *  (2) A registration X that pins pages between C's begin and U (so it
 *      pinned the old pages). X's watch_begin stored the range's filter
 *      bits and read the queue tail T0 (W); X's commit reads the slots
 *      and the queue after the pinning (K). Either C's slot claim A
 *      precedes K in S and C's slot is still claimed at K: commit sees
 *      it and X is not cached; or C's slot was freed before K, which
 *      means C's end push P2 (after U, before the free) precedes K: if
 *      P2 is at or after T0 commit sees it in the queue; if it is before
 *      T0, then U < P2 < W < the pinning, and X pinned the new pages,
 *      not the old ones. Or A follows K: then the pinning precedes A
 *      < U, X pinned pages that were there before C began, and C's
 *      begin push (A < P1, after W so it sees X's filter bit) reaches
 *      X's cache as in (1) — commit and publish are under the cache
 *      lock, drains too, so the drain that applies P1 comes after X is
 *      in the tree.
 *  Pushes are skipped only when the 2 MiB filter says no cache ever
 *  registered the range; the filter bit is set (W) before the pinning,
 *  so a push that skips it precedes the pinning, which then saw the
 *  change done (end) or its slot (begin; the slot is claimed first).
 *
 * Where the order comes from. The argument above reads "seq_cst" of
 * every access; the accesses themselves are seq_cst but for one fence
 * each side, so that a miss pays one fence, not two:
 *  - K: a seq_cst fence first (mrmgr__mon_change_in_flight()), then
 *    seq_cst loads. It is the window's one fence, and the one the
 *    argument cannot do without: the pinning between W and K is the
 *    kernel's or the device's work, not an atomic of ours, and only a
 *    fence keeps K's loads after it (a store-load order: on x86 a load
 *    may pass earlier stores).
 *  - W: each filter bit is set by a seq_cst read-modify-write or found
 *    set by a seq_cst load (mrmgr__mon_filter_watch(); bits are never
 *    cleared), and T0 is a seq_cst load. No fence: the store-load
 *    pattern W has with a change's begin -- X sets the bit and then
 *    loads busy and the slots at K; C claims busy and a slot, then
 *    fences and loads the bit (mrmgr__mon_push_filtered()) -- is closed
 *    by K's fence and C's: if C's load misses the bit, C's fence is
 *    coherence-ordered before X's seq_cst access to that bit, so C's
 *    claim precedes K's fence and loads in S and K sees busy raised (or
 *    the slot, or its free, which comes after P2). The pinning against
 *    U is ordered by the kernel (both take the mm's lock): if the
 *    pinning came first, W happens before U and before any filter load
 *    after U, which then sees the bit (bits are never cleared). T0
 *    counting a push P means P, a seq_cst read-modify-write,
 *    synchronizes with it: what preceded P (U) happens before the
 *    pinning. mrmgr__mon_filter_add() keeps a fence of its own for its
 *    other callers.
 *
 * Slots: a fixed array claimed with compare-and-swap; when all are busy
 * (more concurrent changes than slots), a counter of changes without a
 * slot makes every commit in the meantime refuse to cache: conservative,
 * never unsafe. end frees a slot holding exactly its range (any one, if
 * several threads change the same range), or decrements the counter.
 *
 * Everything here is async-signal-safe: no lock, no allocation, no log.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <pthread.h>
#include <stdint.h>

#include "monitor.h"

#define CHANGE_SLOTS 64u

/*
 * state: 0 free; odd: claimed, range being written; even and non-zero:
 * the range is valid. Each claim adds 1 to the generation in the upper
 * bits, so a reader can tell a slot that changed under it.
 */
struct change_slot {
	uint64_t state;
	uint64_t start;
	uint64_t last;
	uint64_t pad;
};

static struct change_slot slots[CHANGE_SLOTS];
static uint64_t no_slot;    /* changes in flight without a slot */
/*
 * Changes between their begin and the end of their end: raised before
 * the slot claim (A) and lowered after the slot is freed (or no_slot
 * lowered), both sequentially consistent, so a commit (K) that reads
 * zero comes after the free of every slot claimed before K, which the
 * argument above already covers (the slot was freed before K). A commit
 * then skips the walk over all slots, the usual case.
 */
static uint64_t busy;
static uint64_t slot_gen;   /* generation source, never reused */
uint64_t mrmgr__mon_change_count; /* begins, for the report */

void mrmgr__mon_change_begin(uint64_t start, uint64_t last)
{
	uint64_t gen;
	unsigned int i;

	__atomic_fetch_add(&busy, 1, __ATOMIC_SEQ_CST);
	gen = __atomic_add_fetch(&slot_gen, 1, __ATOMIC_RELAXED) << 2;
	__atomic_fetch_add(&mrmgr__mon_change_count, 1, __ATOMIC_RELAXED);
	for (i = 0; i < CHANGE_SLOTS; i++) {
		uint64_t zero = 0;

		if (__atomic_load_n(&slots[i].state, __ATOMIC_RELAXED))
			continue;
		if (__atomic_compare_exchange_n(&slots[i].state, &zero, gen | 1,
						0, __ATOMIC_SEQ_CST,
						__ATOMIC_RELAXED))
			break;
	}
	if (i < CHANGE_SLOTS) {
		__atomic_store_n(&slots[i].start, start, __ATOMIC_RELAXED);
		__atomic_store_n(&slots[i].last, last, __ATOMIC_RELAXED);
		__atomic_store_n(&slots[i].state, gen | 2, __ATOMIC_SEQ_CST);
	} else {
		__atomic_fetch_add(&no_slot, 1, __ATOMIC_SEQ_CST);
	}
	mrmgr__mon_push_filtered(start, last);
}

void mrmgr__mon_change_end(uint64_t start, uint64_t last)
{
	unsigned int i;

	mrmgr__mon_push_filtered(start, last);
	for (i = 0; i < CHANGE_SLOTS; i++) {
		uint64_t s = __atomic_load_n(&slots[i].state, __ATOMIC_SEQ_CST);

		if (!s || (s & 1) ||
		    __atomic_load_n(&slots[i].start, __ATOMIC_RELAXED) != start ||
		    __atomic_load_n(&slots[i].last, __ATOMIC_RELAXED) != last)
			continue;
		if (__atomic_compare_exchange_n(&slots[i].state, &s, 0, 0,
						__ATOMIC_SEQ_CST,
						__ATOMIC_RELAXED))
			goto done;
	}
	/* Our begin found no slot (or another thread with the same range
	 * freed ours, and we free nothing but the count it left). */
	for (uint64_t n = __atomic_load_n(&no_slot, __ATOMIC_SEQ_CST); n;)
		if (__atomic_compare_exchange_n(&no_slot, &n, n - 1, 0,
						__ATOMIC_SEQ_CST,
						__ATOMIC_SEQ_CST))
			break;
done:
	__atomic_fetch_sub(&busy, 1, __ATOMIC_SEQ_CST);
}

int mrmgr__mon_change_in_flight(uint64_t start, uint64_t last)
{
	/* First, before any load: watch_commit() has no fence of its own. */
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	if (!__atomic_load_n(&busy, __ATOMIC_SEQ_CST))
		return 0;
	if (__atomic_load_n(&no_slot, __ATOMIC_SEQ_CST))
		return 1;
	for (unsigned int i = 0; i < CHANGE_SLOTS; i++) {
		uint64_t s = __atomic_load_n(&slots[i].state, __ATOMIC_SEQ_CST);
		uint64_t a, b;

		if (!s)
			continue;
		if (s & 1)
			return 1; /* its range is being written: assume ours */
		a = __atomic_load_n(&slots[i].start, __ATOMIC_RELAXED);
		b = __atomic_load_n(&slots[i].last, __ATOMIC_RELAXED);
		__atomic_thread_fence(__ATOMIC_ACQUIRE);
		if (__atomic_load_n(&slots[i].state, __ATOMIC_RELAXED) != s)
			return 1; /* reused under us: assume ours */
		if (a <= last && b >= start)
			return 1;
	}
	return 0;
}

void mrmgr__mon_change_fork_child(void)
{
	/* Only the forking thread exists in the child: the changes other
	 * threads had in flight will never end here. */
	for (unsigned int i = 0; i < CHANGE_SLOTS; i++)
		__atomic_store_n(&slots[i].state, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&no_slot, 0, __ATOMIC_SEQ_CST);
	__atomic_store_n(&busy, 0, __ATOMIC_SEQ_CST);
}

/* At load, before any change can be in flight: a fork child must not
 * inherit another thread's slot, cache or no cache. */
__attribute__((constructor)) static void change_atfork(void)
{
	(void)pthread_atfork(NULL, NULL, mrmgr__mon_change_fork_child);
}
