/*
 * A stress driver for ThreadSanitizer (make check-tsan): the library and
 * this file are built with -fsanitize=thread, and four threads mix, on one
 * cache with a small region limit:
 *   - get + put of random sub-ranges of a few buffers (hits, most of them
 *     through the inline hit path), some held a while before the put;
 *   - gets with every access combination, so regions grow their access;
 *   - invalidations of random ranges;
 *   - remaps: invalidate, then mmap(MAP_FIXED) fresh pages at the same
 *     address (the manual contract: the caller reports the change before
 *     anyone can use the memory again, so remaps exclude gets with a
 *     rwlock; regions held across a remap stay held);
 *   - evictions, from the limit (a miss on a full cache evicts).
 * It checks what a caller can see: every region returned contains the
 * request with the access asked for; a simulated RDMA WRITE through the
 * region's rkey succeeds right after the get and is never stale (ESTALE,
 * when page identity can be checked: root); at the end nothing is held,
 * the cache is destroyed and the simulated HCA has no live MR left. Criterion does not run under TSan
 * here, hence a plain program: exit 0 when all is well.
 *
 * Usage: stress [seconds] (default 5)
 *
 * SPDX-License-Identifier: MIT
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <mrmgr/mrmgr.h>
#include <mrmgr/sim.h>

#define NTHREADS 4
#define NBUF 16
#define BUFLEN ((size_t)64 << 10)
#define PG ((size_t)4096)
#define HELD 2

static const unsigned int accesses[] = {
	IBV_ACCESS_LOCAL_WRITE,
	IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE,
	IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
		IBV_ACCESS_REMOTE_READ,
	IBV_ACCESS_REMOTE_READ,
	0,
};

struct shared {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	mrmgr_cache_t *cache;
	char *mem;
	pthread_rwlock_t remap_lock; /* gets read, remaps write */
	int identity;                /* page identity checks work here */
	volatile int stop;
	unsigned long failures;
};

static struct shared S;

/* lib/core (built into this program): stripes retired so far, and the
 * retirement's own step (region.h). */
extern uint64_t mrmgr__stripes_retired, mrmgr__stripes_orphan;
void mrmgr__stripe_retire_tick(void);

#define FAIL(...)                                                          \
	do {                                                               \
		fprintf(stderr, "stress: " __VA_ARGS__);                   \
		fputc('\n', stderr);                                       \
		__atomic_fetch_add(&S.failures, 1, __ATOMIC_RELAXED);      \
	} while (0)

static uint64_t rng(uint64_t *s)
{
	uint64_t x = *s;

	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	*s = x;
	return x * 0x2545F4914F6CDD1DULL;
}

/* The caller's view of a region it got for [p, p + len) with access. */
static void check_region(mrmgr_region_t *r, char *p, size_t len,
			 unsigned int access)
{
	char *a = mrmgr_region_addr(r);
	size_t l = mrmgr_region_length(r);
	uint64_t payload = 0x5a5a5a5a5a5a5a5aULL;
	int ret;

	if (a > p || a + l < p + len)
		FAIL("region [%p, +%zu) does not contain [%p, +%zu)", (void *)a,
		     l, (void *)p, len);
	if ((mrmgr_region_access(r) & access) != access)
		FAIL("region access %#x lacks %#x", mrmgr_region_access(r),
		     access);
	if (!(mrmgr_region_access(r) & IBV_ACCESS_REMOTE_WRITE))
		return;
	ret = mrmgr_sim_write(S.pd, mrmgr_region_rkey(r), (uintptr_t)p,
			      &payload, sizeof(payload));
	if (ret == ESTALE)
		FAIL("stale region [%p, +%zu) for [%p, +%zu)", (void *)a, l,
		     (void *)p, len);
	else if (ret)
		FAIL("simulated write through the region: %s", strerror(ret));
}

/* Unmap buffer b and map fresh pages there, telling the cache first. */
static void remap(int b)
{
	char *p = S.mem + (size_t)b * BUFLEN;

	pthread_rwlock_wrlock(&S.remap_lock);
	mrmgr_invalidate(S.cache, p, BUFLEN);
	if (mmap(p, BUFLEN, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) != p) {
		FAIL("mmap MAP_FIXED: %s", strerror(errno));
		abort();
	}
	memset(p, b, BUFLEN);
	pthread_rwlock_unlock(&S.remap_lock);
}

/*
 * One thread's share: until stop, or limit operations when limit is not
 * 0. held: the regions kept across operations, left for the caller.
 */
static unsigned long work(uint64_t *seedp, mrmgr_region_t **held,
			  unsigned long limit)
{
	uint64_t seed = *seedp;
	unsigned long ops = 0;

	while (!__atomic_load_n(&S.stop, __ATOMIC_RELAXED) &&
	       (!limit || ops < limit)) {
		uint64_t r = rng(&seed);
		int b = (int)(r % NBUF);
		size_t off = (r >> 8) % (BUFLEN / PG) * PG;
		size_t len = 1 + (r >> 16) % (BUFLEN - off);
		unsigned int access = accesses[(r >> 32) %
					       (sizeof(accesses) /
						sizeof(accesses[0]))];
		int what = (int)((r >> 40) % 100);
		char *p = S.mem + (size_t)b * BUFLEN + off;
		mrmgr_region_t *reg;
		int ret;

		ops++;
		if (what < 2) {
			remap(b);
			continue;
		}
		if (what < 6) {
			mrmgr_invalidate(S.cache, p, len);
			continue;
		}
		if (what < 60) {
			/* Mostly hits: a small piece of a hot buffer. */
			b = b % 4;
			p = S.mem + (size_t)b * BUFLEN + off;
			len = 1 + (r >> 16) % (4 * PG);
			if (len > BUFLEN - off)
				len = BUFLEN - off;
			access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
		}
		pthread_rwlock_rdlock(&S.remap_lock);
		ret = mrmgr_get(S.cache, p, len, access, &reg);
		if (!ret)
			check_region(reg, p, len, access);
		pthread_rwlock_unlock(&S.remap_lock);
		if (ret) {
			FAIL("mrmgr_get(%p, %zu, %#x): %s", (void *)p, len,
			     access, strerror(ret));
			continue;
		}
		if (what < 70) {
			mrmgr_put(reg);
		} else {
			int h = (int)((r >> 48) % HELD);

			if (held[h])
				mrmgr_put(held[h]);
			held[h] = reg;
		}
	}
	*seedp = seed;
	return ops;
}

static void *worker(void *arg)
{
	uint64_t seed = (uintptr_t)arg * 7919 + 1;
	mrmgr_region_t *held[HELD] = { 0 };
	unsigned long ops = work(&seed, held, 0);

	for (int h = 0; h < HELD; h++)
		if (held[h])
			mrmgr_put(held[h]);
	return (void *)ops;
}

/*
 * The last worker's share runs in short-lived threads, one after the
 * other, each leaving the regions it holds to the next: their stripes
 * end with references on them and are retired (lib/core/stripes.c)
 * while the other workers get, put and evict.
 */
struct life {
	uint64_t seed;
	mrmgr_region_t *held[HELD];
	unsigned long ops;
};

static void *one_life(void *arg)
{
	struct life *l = arg;

	l->ops += work(&l->seed, l->held, 500);
	return NULL;
}

static void *relay(void *arg)
{
	struct life l = { .seed = (uintptr_t)arg * 7919 + 1 };

	while (!__atomic_load_n(&S.stop, __ATOMIC_RELAXED)) {
		pthread_t t;

		if (pthread_create(&t, NULL, one_life, &l)) {
			FAIL("pthread_create: %s", strerror(errno));
			break;
		}
		pthread_join(t, NULL);
		/* A while without a thread of that stripe: the retirement's
		 * step, as the others' gets would take it, until the cache's
		 * lock is found free between theirs (they hold it most of the
		 * time here, and under TSan their gets are few). */
		for (int i = 0; i < 20000 && __atomic_load_n(
						    &mrmgr__stripes_orphan,
						    __ATOMIC_SEQ_CST);
		     i++) {
			mrmgr__stripe_retire_tick();
			sched_yield();
		}
	}
	for (int h = 0; h < HELD; h++)
		if (l.held[h])
			mrmgr_put(l.held[h]);
	return (void *)l.ops;
}

int main(int argc, char **argv)
{
	struct mrmgr_sim_attr sa = {
		.comp_mask = MRMGR_SIM_ATTR_MEMLOCK,
		.memlock_bytes = UINT64_MAX,
	};
	struct mrmgr_cache_attr ca = {
		.comp_mask = MRMGR_CACHE_ATTR_MAX_REGIONS |
			     MRMGR_CACHE_ATTR_MAX_BYTES,
		.max_regions = 16,
		.max_bytes = (uint64_t)1 << 30,
	};
	int seconds = argc > 1 ? atoi(argv[1]) : 5;
	pthread_t t[NTHREADS];
	unsigned long total = 0;
	uint64_t retired;
	struct mrmgr_sim_stats ss;
	struct mrmgr_stats st;
	int ret;

	if ((ret = mrmgr_sim_open(&sa, &S.ctx)) ||
	    (ret = mrmgr_sim_alloc_pd(S.ctx, &S.pd)) ||
	    (ret = mrmgr_cache_create(S.pd, &ca, &S.cache))) {
		fprintf(stderr, "stress: setup: %s\n", strerror(ret));
		return 1;
	}
	S.identity = mrmgr_sim_page_identity_available();
	S.mem = mmap(NULL, NBUF * BUFLEN, PROT_READ | PROT_WRITE,
		     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (S.mem == MAP_FAILED)
		return 1;
	memset(S.mem, 1, NBUF * BUFLEN);
	{
		pthread_rwlockattr_t ra;

		pthread_rwlockattr_init(&ra);
		pthread_rwlockattr_setkind_np(
			&ra, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
		pthread_rwlock_init(&S.remap_lock, &ra);
		pthread_rwlockattr_destroy(&ra);
	}
	for (int i = 0; i < NTHREADS; i++)
		pthread_create(&t[i], NULL, i == NTHREADS - 1 ? relay : worker,
			       (void *)(uintptr_t)i);
	sleep((unsigned int)(seconds > 0 ? seconds : 1));
	__atomic_store_n(&S.stop, 1, __ATOMIC_RELAXED);
	for (int i = 0; i < NTHREADS; i++) {
		void *ops;

		pthread_join(t[i], &ops);
		total += (unsigned long)(uintptr_t)ops;
	}

	/* Retired while the others ran: as the lock allowed, printed. */
	retired = __atomic_load_n(&mrmgr__stripes_retired, __ATOMIC_RELAXED);
	/* And the relay's last stripe now, with every worker gone. */
	for (int i = 0; i < 100000 && __atomic_load_n(&mrmgr__stripes_orphan,
						      __ATOMIC_SEQ_CST);
	     i++)
		mrmgr__stripe_retire_tick();
	if (__atomic_load_n(&mrmgr__stripes_orphan, __ATOMIC_SEQ_CST))
		FAIL("an ended thread's stripe was never retired");
	mrmgr_cache_query_stats(S.cache, &st, sizeof(st));
	if (st.regions_in_use != 0)
		FAIL("%llu regions still in use", (unsigned long long)st.regions_in_use);
	if (st.regions > ca.max_regions)
		FAIL("%llu regions cached over the limit of %llu",
		     (unsigned long long)st.regions,
		     (unsigned long long)ca.max_regions);
	if ((ret = mrmgr_cache_destroy(S.cache)))
		FAIL("mrmgr_cache_destroy: %s", strerror(ret));
	mrmgr_sim_query_stats(S.ctx, &ss, sizeof(ss));
	if (ss.live_mrs || ss.pinned_bytes)
		FAIL("leaked %llu MRs, %llu pinned bytes",
		     (unsigned long long)ss.live_mrs,
		     (unsigned long long)ss.pinned_bytes);
	mrmgr_sim_dealloc_pd(S.pd);
	mrmgr_sim_close(S.ctx);
	munmap(S.mem, NBUF * BUFLEN);
	printf("stress: %lu ops in %d s by %d threads: %llu hits, %llu misses, "
	       "%llu evictions, %llu invalidations; %llu stripes of ended "
	       "threads retired meanwhile; page identity %s; %lu failures\n",
	       total, seconds, NTHREADS, (unsigned long long)st.hits,
	       (unsigned long long)st.misses,
	       (unsigned long long)st.evictions,
	       (unsigned long long)st.invalidations,
	       (unsigned long long)retired, S.identity ? "checked" : "not available (not root)",
	       S.failures);
	if (!st.hits) {
		/* Nothing cached: the hit path was not stressed at all. */
		fprintf(stderr, "stress: no hits (was any memory-event source "
			"running?)\n");
		return 1;
	}
	return S.failures ? 1 : 0;
}
