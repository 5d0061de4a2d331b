/*
 * Thread slots and the stripes they give: which thread owns which stripe
 * of every region's reference count (region.h), and which stripes no
 * thread owns any more, so that fork.c can retire them.
 *
 * Why retire: every pass of the lock's holder over a region's words
 * (an eviction, a publication, the ageing hand) visits each stripe a
 * thread was ever given. A process that once ran helper threads through
 * the cache, or 64 of them on a large machine, would otherwise pay a
 * cold line per such stripe on every miss for the rest of its life.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <pthread.h>
#include <stdint.h>

#include "region.h"

/*
 * Thread slots: the lowest free one of MAX_SLOTS is claimed on a thread's
 * first use and given back by a thread-specific-data destructor when the
 * thread exits. Past MAX_SLOTS live threads, slots are handed out
 * round-robin and never given back; threads then share stripes, which
 * stays correct (the adds are atomic) and only costs contention.
 */
#define MAX_SLOTS 64

uint64_t mrmgr__stripes_orphan;

static uint64_t slots_taken;       /* bit i: slot i belongs to a thread */
static unsigned int next_shared;   /* round-robin past MAX_SLOTS */
static uint64_t shared_stripes;    /* stripes a round-robin slot got */
static uint64_t retiring;          /* stripes being retired (fork.c) */
static pthread_key_t slot_key;
static pthread_once_t slot_once = PTHREAD_ONCE_INIT;
static int slot_key_ok;

/* The slots below MAX_SLOTS whose threads use stripe s of n. */
static uint64_t class_of(unsigned int s, unsigned int n)
{
	uint64_t m = 0;

	for (unsigned int i = s; i < MAX_SLOTS; i += n)
		m |= UINT64_C(1) << i;
	return m;
}

static void slot_release(void *v)
{
	unsigned int s = (unsigned int)(uintptr_t)v - 1;
	unsigned int n = mrmgr__layout.nstripes, stripe;
	uint64_t left;

	mrmgr__tls_slot = ~0u; /* a later call in this thread asks again */
	mrmgr__tls_words = 0;
	if (s >= MAX_SLOTS)
		return;
	left = __atomic_and_fetch(&slots_taken, ~(UINT64_C(1) << s),
				  __ATOMIC_SEQ_CST);
	/* The last thread of its stripe: fork.c may retire it. A thread
	 * that takes a slot of it meanwhile makes that a no-op there. */
	stripe = s & (n - 1);
	if (n && stripe && !(left & class_of(stripe, n)))
		__atomic_fetch_or(&mrmgr__stripes_orphan, UINT64_C(1) << stripe,
				  __ATOMIC_RELAXED);
}

/* A fork child has one thread: the others' slots are free there, and
 * their stripes are orphans. */
static void slot_atfork_child(void)
{
	/* The slot (the thread's key: slot + 1), not its stripe. */
	unsigned int slot =
		(unsigned int)(uintptr_t)pthread_getspecific(slot_key) - 1;
	unsigned int s = mrmgr__tls_slot; /* its stripe, ~0u: none */
	uint64_t mine = s < 64 ? UINT64_C(1) << s : 0;

	slots_taken = slot < MAX_SLOTS ? UINT64_C(1) << slot : 0;
	retiring = 0;
	mrmgr__stripes_orphan = mrmgr__stripes_seen & ~mine & ~shared_stripes &
				~UINT64_C(1);
}

static void slot_key_init(void)
{
	slot_key_ok = pthread_key_create(&slot_key, slot_release) == 0;
	if (slot_key_ok)
		pthread_atfork(NULL, NULL, slot_atfork_child);
}

/* Unloaded with threads still running: their exit must not call here. */
__attribute__((destructor)) static void slot_key_fini(void)
{
	if (slot_key_ok)
		pthread_key_delete(slot_key);
}

/* A round-robin slot's stripe: not one being retired (then stripe 0,
 * which never is). With mrmgr__stripe_reserve()'s two steps, the seq_cst
 * pair makes one side see the other's mark. */
static unsigned int shared_stripe(unsigned int s, unsigned int n)
{
	uint64_t bit = UINT64_C(1) << (s & (n - 1));

	__atomic_fetch_or(&shared_stripes, bit, __ATOMIC_SEQ_CST);
	if (__atomic_load_n(&retiring, __ATOMIC_SEQ_CST) & bit)
		return 0;
	return s & (n - 1);
}

unsigned int mrmgr__thread_slot_slow(void)
{
	uint64_t taken = __atomic_load_n(&slots_taken, __ATOMIC_RELAXED);
	unsigned int s, n = mrmgr__stripes();

	pthread_once(&slot_once, slot_key_init);
	for (;;) {
		if (!slot_key_ok || taken == ~UINT64_C(0)) {
			s = shared_stripe(MAX_SLOTS +
						  (__atomic_fetch_add(
							   &next_shared, 1,
							   __ATOMIC_RELAXED) &
						   (MAX_SLOTS - 1)),
					  n);
			break;
		}
		s = (unsigned int)__builtin_ctzll(~taken);
		if (__atomic_compare_exchange_n(&slots_taken, &taken,
						taken | UINT64_C(1) << s, 0,
						__ATOMIC_SEQ_CST,
						__ATOMIC_RELAXED)) {
			pthread_setspecific(slot_key, (void *)(uintptr_t)(s + 1));
			s &= n - 1;
			break;
		}
	}
	/* Before the thread can mark anything on its stripe (region.h);
	 * given for the first time (or again after its retirement), it
	 * joins at the thread's next get. */
	__atomic_fetch_or(&mrmgr__stripes_seen, UINT64_C(1) << s,
			  __ATOMIC_SEQ_CST);
	if (!(__atomic_load_n(&mrmgr__stripes_joined, __ATOMIC_ACQUIRE) &
	      (UINT64_C(1) << s)))
		mrmgr__tls_join = s + 1;
	mrmgr__tls_slot = s;
	mrmgr__tls_words = mrmgr__layout.words + s * mrmgr__layout.stride;
	return s;
}

uintptr_t mrmgr__thread_words_slow(void)
{
	mrmgr__thread_slot_slow();
	return mrmgr__tls_words;
}

int mrmgr__stripe_reserve(unsigned int s)
{
	unsigned int n = mrmgr__stripes();
	uint64_t class = class_of(s, n), bit = UINT64_C(1) << s;
	uint64_t taken = __atomic_load_n(&slots_taken, __ATOMIC_SEQ_CST);

	if (!s)
		return 0;
	/* Every slot of the stripe taken for us: no thread can claim one
	 * until mrmgr__stripe_unreserve(), and none holds one now. */
	do {
		if (taken & class)
			return 0;
	} while (!__atomic_compare_exchange_n(&slots_taken, &taken,
					      taken | class, 0,
					      __ATOMIC_SEQ_CST,
					      __ATOMIC_SEQ_CST));
	/* Round-robin threads may share it, for their life. */
	__atomic_fetch_or(&retiring, bit, __ATOMIC_SEQ_CST);
	if (__atomic_load_n(&shared_stripes, __ATOMIC_SEQ_CST) & bit) {
		mrmgr__stripe_unreserve(s);
		return 0;
	}
	return 1;
}

void mrmgr__stripe_unreserve(unsigned int s)
{
	unsigned int n = mrmgr__stripes();

	__atomic_fetch_and(&retiring, ~(UINT64_C(1) << s), __ATOMIC_SEQ_CST);
	__atomic_fetch_and(&slots_taken, ~class_of(s, n), __ATOMIC_SEQ_CST);
}
