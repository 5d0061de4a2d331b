/*
 * The zero-cost miss churn of bench/compare alone, for profilers: 10,000
 * buffers of 64 KiB, a limit of 1,000 regions, uniform random get+put on
 * the bench device at zero registration cost, in the calling process (no
 * children; callgrind, perf and strace see everything). Prints ns per
 * miss. The timed loop is churn_loop() (callgrind --toggle-collect).
 *
 *   build/bench/misschurn [OPS]
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <mrmgr/mrmgr.h>

#include "compare.h"

#define BUFFERS 10000
#define LIMIT 1000
#define ACCESS (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | \
		IBV_ACCESS_REMOTE_READ)

__attribute__((noinline)) static void churn_loop(mrmgr_cache_t *c, char *base,
						  uint64_t n, uint64_t *seed)
{
	for (uint64_t i = 0; i < n; i++) {
		uint64_t r = rng_next(seed);
		mrmgr_region_t *reg;
		int ret = mrmgr_get(c, base + rng_below(r, BUFFERS) * STRIDE,
				    REGION_LEN, ACCESS, &reg);

		if (ret) {
			fprintf(stderr, "mrmgr_get: %s\n", strerror(ret));
			exit(1);
		}
		mrmgr_put(reg);
	}
}

int main(int argc, char **argv)
{
	static const struct cost_model zero = { 0, 0 };
	uint64_t ops = argc > 1 ? strtoull(argv[1], NULL, 10) : 20000;
	uint64_t seed = 42, regs0, regs, pages;
	struct mrmgr_cache_attr ca = {
		.comp_mask = MRMGR_CACHE_ATTR_MAX_REGIONS |
			     MRMGR_CACHE_ATTR_MAX_BYTES,
		.max_regions = LIMIT,
		.max_bytes = (uint64_t)1 << 50,
	};
	char *base = mmap(NULL, (size_t)BUFFERS * STRIDE, PROT_READ | PROT_WRITE,
			  MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	struct ibv_pd *pd;
	mrmgr_cache_t *c;
	double t0, t1;
	int ret;

	if (base == MAP_FAILED)
		return 1;
	if ((ret = bdev_open(&zero, &pd)) ||
	    (ret = mrmgr_cache_create(pd, &ca, &c))) {
		fprintf(stderr, "open: %s\n", strerror(ret));
		return 1;
	}
	churn_loop(c, base, 3 * LIMIT, &seed); /* fill */
	bdev_counts(pd, &regs0, &pages);
	t0 = now_ns();
	churn_loop(c, base, ops, &seed);
	t1 = now_ns();
	bdev_counts(pd, &regs, &pages);
	regs -= regs0;
	printf("%llu ops, %llu misses, %.1f ns per miss\n",
	       (unsigned long long)ops, (unsigned long long)regs,
	       regs ? (t1 - t0) / (double)regs : 0.0);
	mrmgr_cache_destroy(c);
	bdev_close(pd);
	munmap(base, (size_t)BUFFERS * STRIDE);
	return 0;
}
