/*
 * The libc matrix's user program (scripts/ci-libc-matrix.sh): built
 * outside the tree with `pkg-config --cflags --libs mrmgr mrmgr-sim`
 * against the installed library and run, with no MRMGR_* set, under
 * another release's libc. What a new user would see:
 *
 *  1. 1,000 gets of one 64 KiB malloc'd buffer on the simulated HCA: at
 *     least 999 hits;
 *  2. the cache says the source is libc patched in the process;
 *  3. free/realloc cycles of buffers glibc maps and unmaps (and 64 KiB
 *     heap ones), each written through its rkey after the get as a remote
 *     peer would: no write may reach pages that are no longer the
 *     registered ones (the simulated HCA answers ESTALE), and every
 *     registration must have been verified: a registered page the sim
 *     could not make the program's own as a real pin does (the shared zero
 *     page where madvise(MADV_POPULATE_WRITE) acts not, as under qemu-user
 *     7.2 before the sim touched the pages itself) is counted in
 *     unverified_pages, its writes unchecked: the sim's failure, told apart
 *     from a stale registration, and a failure of this test all the same.
 *
 * Prints one line, "libc=... patched=... hits=N/1000 stale=N/N
 * unverified_pages=N", that
 * the matrix script puts in its table. Exit status 0 when all three
 * hold, 1 otherwise, 77 when page identity cannot be checked (not root).
 * With --identity-optional (the matrix's qemu-user runs), 1 and 2 are
 * checked and 3 is reported as "stale=n/a" when identity is not
 * available; as root it is, under qemu-user too (the guest's addresses
 * are the host's there, so pagemap describes the guest's pages).
 *
 * SPDX-License-Identifier: MIT
 */
#define _GNU_SOURCE
#include <errno.h>
#include <gnu/libc-version.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mrmgr/mrmgr.h>
#include <mrmgr/sim.h>

#define GETS 1000
#define CYCLES 4000
#define ACCESS (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE)

static int fail(const char *what, int err)
{
	fprintf(stderr, "hits: %s: %s\n", what, strerror(err));
	return 1;
}

int main(int argc, char **argv)
{
	static const size_t sizes[] = { 64 << 10, 256 << 10, 512 << 10 };
	const size_t len = 64 << 10;
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	mrmgr_cache_t *cache;
	mrmgr_region_t *r;
	struct mrmgr_stats st0, st1;
	struct mrmgr_monitor_info mi;
	struct mrmgr_sim_stats ss;
	unsigned int seed = 20;
	unsigned long stale = 0, writes = 0;
	int patched, ret, ok = 1;
	char *buf;
	int identity = mrmgr_sim_page_identity_available();

	if (!identity && !(argc > 1 && !strcmp(argv[1], "--identity-optional"))) {
		fprintf(stderr, "hits: page identity needs /proc/self/pagemap PFNs (root)\n");
		return 77;
	}
	if ((ret = mrmgr_sim_open(NULL, &ctx)) || (ret = mrmgr_sim_alloc_pd(ctx, &pd)) ||
	    (ret = mrmgr_cache_create(pd, NULL, &cache)))
		return fail("setup", ret);

	/* 1. one buffer, 1,000 gets */
	buf = malloc(len);
	if (!buf)
		return fail("malloc", ENOMEM);
	memset(buf, 1, len);
	mrmgr_cache_query_stats(cache, &st0, sizeof(st0));
	for (int i = 0; i < GETS; i++) {
		if ((ret = mrmgr_get(cache, buf, len, ACCESS, &r)))
			return fail("get", ret);
		mrmgr_put(r);
	}
	mrmgr_cache_query_stats(cache, &st1, sizeof(st1));
	free(buf);

	/* 2. the source */
	memset(&mi, 0, sizeof(mi));
	mrmgr_cache_query_monitor(cache, &mi, sizeof(mi));
	patched = (mi.sources & MRMGR_MONITOR_SRC_PATCH) != 0;

	/* 3. buffers that come and go at the same addresses: with the mmap
	 * threshold at 128 KiB the larger ones are mappings of their own that
	 * free() and realloc() unmap, so their addresses come back with new
	 * pages behind them. */
	if (!mallopt(M_MMAP_THRESHOLD, 128 << 10))
		return fail("mallopt", EINVAL);
	for (int i = 0; i < CYCLES; i++) {
		size_t n = sizes[rand_r(&seed) % 3];
		char *p = malloc(n), b = 'w';

		if (!p)
			return fail("malloc", ENOMEM);
		if (rand_r(&seed) % 3 == 0) {
			char *q = realloc(p, sizes[rand_r(&seed) % 3] + 4096);

			if (!q)
				return fail("realloc", ENOMEM);
			p = q;
			n = sizes[0];
		}
		memset(p, 'm', n);
		if ((ret = mrmgr_get(cache, p, n, ACCESS, &r)))
			return fail("get", ret);
		ret = mrmgr_sim_write(pd, mrmgr_region_rkey(r), (uint64_t)(uintptr_t)p + n - 1,
				      &b, 1);
		if (ret == ESTALE)
			stale++;
		else if (ret)
			return fail("write", ret);
		writes++;
		mrmgr_put(r);
		free(p);
	}
	mrmgr_sim_query_stats(ctx, &ss, sizeof(ss));

	printf("libc=%s patched=%s patch_error=%d sources=%#x hits=%llu/%d ",
	       gnu_get_libc_version(), patched ? "yes" : "no", mi.patch_error,
	       mi.sources, (unsigned long long)(st1.hits - st0.hits), GETS);
	if (identity)
		printf("stale=%lu/%lu device_stale=%llu unverified_pages=%llu\n",
		       stale, writes, (unsigned long long)ss.stale_accesses,
		       (unsigned long long)ss.unverified_pages);
	else
		printf("stale=n/a (no page identity)\n");
	if (st1.hits - st0.hits < GETS - 1) {
		fprintf(stderr, "FAIL: %llu hits of %d gets of one buffer (want >= %d)\n",
			(unsigned long long)(st1.hits - st0.hits), GETS, GETS - 1);
		ok = 0;
	}
	if (!patched) {
		fprintf(stderr, "FAIL: the source is not the patched libc (sources %#x, "
			"patch_error %d: %s)\n", mi.sources, mi.patch_error,
			strerror(mi.patch_error));
		ok = 0;
	}
	if (stale || ss.stale_accesses) {
		fprintf(stderr, "FAIL: %lu of %lu writes reached pages that were no "
			"longer the registered ones\n", stale, writes);
		ok = 0;
	}
	if (identity && ss.unverified_pages) {
		fprintf(stderr, "FAIL: %llu registered pages not verified: the "
			"simulated HCA could not hold them as a real pin does "
			"(its warning says why); their writes are unchecked\n",
			(unsigned long long)ss.unverified_pages);
		ok = 0;
	}
	if (mrmgr_cache_destroy(cache) || mrmgr_sim_dealloc_pd(pd) || mrmgr_sim_close(ctx))
		return fail("teardown", EBUSY);
	return ok ? 0 : 1;
}
