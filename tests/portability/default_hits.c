/*
 * The default configuration as a new user meets it: no MRMGR_* set, one
 * 64 KiB malloc'd buffer got and put 1,000 times on the simulated HCA.
 * Prints the memory-event sources and the hits; exits 0 only when libc
 * patched in the process is a source and at least 999 gets hit (the
 * first registers). scripts/ci-bullseye.sh runs it under Debian 11's libc.
 *
 * SPDX-License-Identifier: MIT
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mrmgr/mrmgr.h>
#include <mrmgr/sim.h>

#define LEN ((size_t)64 * 1024)
#define GETS 1000

int main(void)
{
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	mrmgr_cache_t *cache;
	struct mrmgr_monitor_info mi;
	struct mrmgr_stats st;
	char *buf;
	int err;

	if (mrmgr_sim_open(NULL, &ctx) || mrmgr_sim_alloc_pd(ctx, &pd) ||
	    mrmgr_cache_create(pd, NULL, &cache)) {
		fprintf(stderr, "default_hits: no simulated HCA or cache\n");
		return 2;
	}
	buf = malloc(LEN);
	if (!buf)
		return 2;
	memset(buf, 1, LEN);
	for (int i = 0; i < GETS; i++) {
		mrmgr_region_t *r;

		err = mrmgr_get(cache, buf, LEN, IBV_ACCESS_LOCAL_WRITE, &r);
		if (err) {
			fprintf(stderr, "default_hits: get: %s\n", strerror(err));
			return 1;
		}
		mrmgr_put(r);
	}
	memset(&mi, 0, sizeof(mi));
	memset(&st, 0, sizeof(st));
	if (mrmgr_cache_query_monitor(cache, &mi, sizeof(mi)) ||
	    mrmgr_cache_query_stats(cache, &st, sizeof(st)))
		return 2;
	printf("default_hits: sources%s%s%s%s%s, %llu hits of %d gets\n",
	       mi.sources & MRMGR_MONITOR_SRC_PATCH ? " patched-libc" : "",
	       mi.sources & MRMGR_MONITOR_SRC_UFFD ? " userfaultfd" : "",
	       mi.sources & MRMGR_MONITOR_SRC_HOOKS ? " hooks" : "",
	       mi.sources & MRMGR_MONITOR_SRC_EXTERNAL ? " external" : "",
	       mi.sources ? "" : " none", (unsigned long long)st.hits, GETS);
	free(buf);
	mrmgr_cache_destroy(cache);
	mrmgr_sim_dealloc_pd(pd);
	mrmgr_sim_close(ctx);
	return (mi.sources & MRMGR_MONITOR_SRC_PATCH) && st.hits >= GETS - 1 ? 0 : 1;
}
