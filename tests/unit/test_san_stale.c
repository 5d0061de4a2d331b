/*
 * Two threads map, unmap, mremap(), malloc/free and madvise() their own
 * buffers in the default configuration on the simulated HCA, get
 * registrations and write through them as a peer would: every write
 * must land in the memory the program sees now. Built like every suite;
 * the point is its run in build-asan (scripts/ci/asan.sh), where the
 * sanitizer's allocator maps, unmaps and releases the heap with raw
 * system calls. There auto used to take userfaultfd, one-sided: an
 * outsider's program of this shape saw 4 to 17 stale writes a run, and
 * its own mremap() failed; now the patched libc and the sanitizer
 * allocator's hooks follow the memory (doc/monitor.md, "Under a
 * sanitizer"). First, once: the program's mremap() of a buffer it
 * extended must succeed with a cache watching it (userfaultfd's
 * registration stops the VMAs merging: EFAULT).
 *
 * A plain program (not Criterion: its runner's threads and allocations
 * are not part of the shape). Argument: iterations per thread.
 * Exit status: 0 passed, 1 a stale or lost write or a failed call of
 * the program's own, 2 no cache.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <mrmgr/mrmgr.h>
#include <mrmgr/sim.h>

#define ACCESS (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE)
#define PG ((size_t)4096)
#define KEEP (256u << 10)

/*
 * A small quarantine under ASan: freed chunks go back to the allocator
 * (and large ones are unmapped with a raw munmap) within a few hundred
 * iterations, so addresses come back while registrations of their old
 * pages are cached. With the allocator's hooks not reported, 788 to 992
 * stale writes a run (quarantine 0 and 1 MiB); with the default 256 MiB,
 * 3 at 8 MiB and 0 at 256: the patched libc alone catches the rest. A
 * quarantine_size_mb in ASAN_OPTIONS overrides it.
 */
__attribute__((used, visibility("default"))) const char *
__asan_default_options(void);
const char *__asan_default_options(void)
{
	return "quarantine_size_mb=1";
}

static struct ibv_pd *pd;
static mrmgr_cache_t *cache;
static int iters = 4000;
static unsigned long stale[2], lost[2], gets[2], failed[2];

static void use(int t, char *p, size_t n)
{
	mrmgr_region_t *r;
	char b = 'w';
	int ret;

	memset(p, 'm', n);
	ret = mrmgr_get(cache, p, n, ACCESS, &r);
	if (ret) {
		fprintf(stderr, "get: %s\n", strerror(ret));
		failed[t]++;
		return;
	}
	gets[t]++;
	ret = mrmgr_sim_write(pd, mrmgr_region_rkey(r), (uintptr_t)p + n - 1, &b, 1);
	if (ret == ESTALE)
		stale[t]++;
	else if (ret)
		failed[t]++;
	else if (p[n - 1] != 'w')
		lost[t]++;
	mrmgr_put(r);
}

static void map_step(int t, size_t n, int move)
{
	char *p = mmap(NULL, n, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0), *q;

	if (p == MAP_FAILED) {
		failed[t]++;
		return;
	}
	use(t, p, n);
	if (move) {
		q = mremap(p, n, 2 * n, MREMAP_MAYMOVE);
		if (q == MAP_FAILED) {
			fprintf(stderr, "mremap: %s\n", strerror(errno));
			failed[t]++;
		} else {
			p = q;
			n *= 2;
			use(t, p, n);
		}
	}
	munmap(p, n);
}

static void heap_step(int t, size_t n, int grow)
{
	char *p = malloc(n), *q;

	if (!p) {
		failed[t]++;
		return;
	}
	use(t, p, n);
	if (grow) {
		q = realloc(p, 2 * n);
		if (!q) {
			failed[t]++;
		} else {
			p = q;
			use(t, p, 2 * n);
		}
	}
	free(p);
}

static void *worker(void *arg)
{
	int t = (int)(long)arg;
	unsigned int seed = 1234u + (unsigned int)t;
	char *keep = malloc(KEEP);

	if (!keep)
		return NULL;
	for (int i = 0; i < iters; i++) {
		size_t n = (size_t)(1 + rand_r(&seed) % 64) * PG;

		switch (rand_r(&seed) % 6) {
		case 0:
			map_step(t, n, 0);
			break;
		case 1:
			heap_step(t, n, 0);
			break;
		case 2:
			heap_step(t, n, 1);
			break;
		case 3:
			map_step(t, n, 1);
			break;
		case 4: /* discard and refault */
			use(t, keep, KEEP);
			madvise(keep, KEEP, MADV_DONTNEED);
			use(t, keep, KEEP);
			break;
		default: /* small chunks: the primary allocator's pages */
			heap_step(t, 16 + rand_r(&seed) % (6 * PG), i & 1);
			break;
		}
	}
	free(keep);
	return NULL;
}

/* The program's mremap() of a buffer it extended, with the first part
 * cached: the two mappings are one VMA unless something stopped the
 * merge (userfaultfd's registration does: EFAULT). 0 or the errno. */
static int extended_mremap(void)
{
	/* Carved out of a reservation kept until the end: a hole would be
	 * any thread's next mmap(NULL) (doc/design/testing.md, "No hole
	 * another thread can take"). */
	char *p = mmap(NULL, 16 * PG, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS,
		       -1, 0), *q = MAP_FAILED;
	int err = 0;

	if (p == MAP_FAILED)
		return errno;
	if (mmap(p, 4 * PG, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) != p) {
		err = errno ? errno : EIO;
		goto out;
	}
	use(0, p, 2 * PG);
	if (mmap(p + 4 * PG, 4 * PG, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) != p + 4 * PG) {
		err = errno ? errno : EIO;
		goto out;
	}
	use(0, p + 4 * PG, 4 * PG);
	q = mremap(p, 8 * PG, 12 * PG, MREMAP_MAYMOVE);
	if (q == MAP_FAILED) {
		err = errno;
		goto out;
	}
	use(0, q, 12 * PG);
	munmap(q, 12 * PG);
out:
	/* What is left: all of it, or the reservation past the moved part
	 * (growing in place was not possible: the reservation is there). */
	if (q == MAP_FAILED)
		munmap(p, 16 * PG);
	else
		munmap(p + 8 * PG, 8 * PG);
	return err;
}

static int real_sanitizer(void)
{
	return dlsym(RTLD_DEFAULT, "__asan_init") || dlsym(RTLD_DEFAULT, "__tsan_init") ||
	       dlsym(RTLD_DEFAULT, "__msan_init") || dlsym(RTLD_DEFAULT, "__hwasan_init");
}

int main(int argc, char **argv)
{
	struct ibv_context *ctx;
	struct mrmgr_stats st;
	struct mrmgr_monitor_info mi;
	unsigned long bad;
	pthread_t th[2];
	int err, san = real_sanitizer();

	if (argc > 1)
		iters = atoi(argv[1]);
	if (mrmgr_sim_open(NULL, &ctx) || mrmgr_sim_alloc_pd(ctx, &pd) ||
	    mrmgr_cache_create(pd, NULL, &cache))
		return 2;
	memset(&mi, 0, sizeof(mi));
	mrmgr_cache_query_monitor(cache, &mi, sizeof(mi));
	err = extended_mremap();
	printf("sanitizer: %s, sources %#x; the program's mremap() of an "
	       "extended buffer: %s\n", san ? "yes" : "no", mi.sources,
	       err ? strerror(err) : "ok");
	for (long t = 0; t < 2; t++)
		pthread_create(&th[t], NULL, worker, (void *)t);
	for (int t = 0; t < 2; t++)
		pthread_join(th[t], NULL);
	mrmgr_cache_query_stats(cache, &st, sizeof(st));
	bad = stale[0] + stale[1] + lost[0] + lost[1] + failed[0] + failed[1];
	printf("gets=%lu hits=%llu misses=%llu uncached=%llu stale=%lu "
	       "lost=%lu failed=%lu\n", gets[0] + gets[1],
	       (unsigned long long)st.hits, (unsigned long long)st.misses,
	       (unsigned long long)st.uncached, stale[0] + stale[1],
	       lost[0] + lost[1], failed[0] + failed[1]);
	mrmgr_cache_destroy(cache);
	mrmgr_sim_dealloc_pd(pd);
	mrmgr_sim_close(ctx);
	if (san && mi.sources != (MRMGR_MONITOR_SRC_PATCH | MRMGR_MONITOR_SRC_SANITIZER))
		fprintf(stderr, "note: not the sanitizer's two-sided source "
			"(sources %#x)\n", mi.sources);
	return bad || err ? 1 : 0;
}
