/*
 * Benchmark: what a growing buffer costs in registrations.
 *
 * Two growth patterns, on the simulated HCA with a modelled registration
 * cost (10 us + 100 ns per 4 KiB page, deregistration free; pages are not
 * really pinned, so only the library and the model are measured):
 *   doubling  4 KiB -> 64 MiB, one step per doubling (15 steps);
 *   linear    4 KiB at a time, 10,000 steps (40,000 KiB final).
 * Each is run through a growable buffer (mrmgr_buf_resize) and through
 * mrmgr_get()/mrmgr_put() on a buffer inside one large mapping, with the
 * growth features on (the defaults) and turned off one by one; "no merge"
 * is what a cache that never grows a region does (UCX's rcache measured
 * 10,000 registrations and 50 M pages for the linear pattern).
 *
 * Printed per run: registration calls, rereg calls, pages registered in
 * total (and as a multiple of the final size), the cache's peak pinned
 * bytes (registrations alive at once), the device's peak (which also
 * counts the old and new ranges both pinned during a rereg call, as the
 * kernel does), and wall-clock ns per step.
 *
 * Usage: bench/growth [--steps N] [--repeat R]
 *   N: linear steps (default 10000); R: runs per row, the fastest ns/step
 *   is printed (default 1; the counts do not vary).
 *
 * SPDX-License-Identifier: MIT
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include <mrmgr/mrmgr.h>
#include <mrmgr/sim.h>

#include "growth.h"

#define PG ((size_t)4096)
#define ACCESS (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | \
		IBV_ACCESS_REMOTE_READ)

enum how { VIA_BUF, VIA_GET };

struct variant {
	const char *name;
	enum how how;
	uint64_t flags;      /* mrmgr_cache_flags */
	uint32_t personality;
};

static const struct variant variants[] = {
	{ "buffer", VIA_BUF, 0, MRMGR_SIM_MLX5 },
	{ "buffer, rereg off", VIA_BUF, MRMGR_CACHE_NO_REREG, MRMGR_SIM_MLX5 },
	{ "buffer, rxe-like device", VIA_BUF, 0, MRMGR_SIM_RXE },
	{ "get", VIA_GET, 0, MRMGR_SIM_MLX5 },
	{ "get, headroom off", VIA_GET, MRMGR_CACHE_NO_HEADROOM, MRMGR_SIM_MLX5 },
	{ "get, rereg off", VIA_GET, MRMGR_CACHE_NO_REREG, MRMGR_SIM_MLX5 },
	{ "get, rereg+headroom off", VIA_GET,
	  MRMGR_CACHE_NO_REREG | MRMGR_CACHE_NO_HEADROOM, MRMGR_SIM_MLX5 },
	{ "get, no merge (UCX-like)", VIA_GET, MRMGR_CACHE_NO_MERGE, MRMGR_SIM_MLX5 },
};

static double now_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

static void die(const char *what, int err)
{
	fprintf(stderr, "growth: %s: %s\n", what, strerror(err));
	exit(1);
}

static size_t size_at(int doubling, size_t i)
{
	return growth_size_at(doubling, i);
}

/* One run; returns ns per step and fills the statistics. */
static double run_once(const struct variant *v, int doubling, size_t steps,
		       struct mrmgr_stats *stp, struct mrmgr_sim_stats *ssp)
{
	struct mrmgr_sim_attr sa = {
		.comp_mask = MRMGR_SIM_ATTR_PERSONALITY | MRMGR_SIM_ATTR_FLAGS |
			     MRMGR_SIM_ATTR_MEMLOCK | MRMGR_SIM_ATTR_COST,
		.personality = v->personality,
		.flags = MRMGR_SIM_FLAG_NO_PIN,
		.memlock_bytes = UINT64_MAX,
		.reg_ns = GROWTH_REG_NS,
		.reg_ns_per_page = GROWTH_REG_NS_PER_PAGE,
	};
	struct mrmgr_cache_attr ca = {
		.comp_mask = MRMGR_CACHE_ATTR_MAX_BYTES | MRMGR_CACHE_ATTR_FLAGS,
		.max_bytes = (uint64_t)1 << 40,
		.flags = v->flags,
	};
	size_t final = size_at(doubling, steps), map_len = 2 * final;
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	mrmgr_cache_t *cache;
	mrmgr_buf_t *buf = NULL;
	char *mem = NULL;
	double t0, t1;
	int ret;

	if ((ret = mrmgr_sim_open(&sa, &ctx)) || (ret = mrmgr_sim_alloc_pd(ctx, &pd)) ||
	    (ret = mrmgr_cache_create(pd, &ca, &cache)))
		die("setup", ret);
	if (v->how == VIA_GET) {
		/* One large mapping the buffer grows inside. */
		mem = mmap(NULL, map_len, PROT_READ | PROT_WRITE,
			   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
		if (mem == MAP_FAILED)
			die("mmap", errno);
	} else if ((ret = mrmgr_buf_create(cache, size_at(doubling, 1), ACCESS, &buf))) {
		die("mrmgr_buf_create", ret);
	}

	t0 = now_ns();
	for (size_t i = v->how == VIA_BUF ? 2 : 1; i <= steps; i++) {
		size_t len = size_at(doubling, i);

		if (v->how == VIA_BUF) {
			ret = mrmgr_buf_resize(buf, len);
			if (ret)
				die("mrmgr_buf_resize", ret);
		} else {
			mrmgr_region_t *r;

			ret = mrmgr_get(cache, mem, len, ACCESS, &r);
			if (ret)
				die("mrmgr_get", ret);
			mrmgr_put(r);
		}
	}
	t1 = now_ns();

	mrmgr_cache_query_stats(cache, stp, sizeof(*stp));
	mrmgr_sim_query_stats(ctx, ssp, sizeof(*ssp));
	if (buf)
		mrmgr_buf_destroy(buf);
	if (mem) {
		mrmgr_invalidate(cache, mem, map_len);
		munmap(mem, map_len);
	}
	if ((ret = mrmgr_cache_destroy(cache)) || (ret = mrmgr_sim_dealloc_pd(pd)) ||
	    (ret = mrmgr_sim_close(ctx)))
		die("teardown", ret);
	return (t1 - t0) / (double)steps;
}

/* Which memory-event mode the get rows ran under: headroom depends on it. */
static void monitor_line(void)
{
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	mrmgr_cache_t *cache;
	struct mrmgr_monitor_info m;
	static const char *const modes[] = { "auto", "uffd", "hooks",
					     "external", "none" };

	if (mrmgr_sim_open(NULL, &ctx) || mrmgr_sim_alloc_pd(ctx, &pd) ||
	    mrmgr_cache_create(pd, NULL, &cache))
		die("setup", EIO);
	memset(&m, 0, sizeof(m));
	mrmgr_cache_query_monitor(cache, &m, sizeof(m));
	printf("monitor mode %s, sources %#x (1 userfaultfd, 2 hooks, 4 "
	       "external; headroom is off under userfaultfd alone)\n",
	       m.mode < 5 ? modes[m.mode] : "?", m.sources);
	mrmgr_cache_destroy(cache);
	mrmgr_sim_dealloc_pd(pd);
	mrmgr_sim_close(ctx);
}

static void run(const struct variant *v, int doubling, size_t steps,
		unsigned int repeat)
{
	size_t final = size_at(doubling, steps);
	struct mrmgr_stats st;
	struct mrmgr_sim_stats ss;
	double best = 0;

	for (unsigned int i = 0; i < repeat; i++) {
		double ns = run_once(v, doubling, steps, &st, &ss);

		if (i == 0 || ns < best)
			best = ns;
	}
	printf("| %-9s | %-26s | %6llu | %6llu | %12llu | %6.2f | %10.1f | %5.2f | %10.1f | %5.2f | %10.0f |\n",
	       doubling ? "doubling" : "linear", v->name,
	       (unsigned long long)st.registrations,
	       (unsigned long long)st.rereg_attempts,
	       (unsigned long long)st.pages_registered,
	       (double)st.pages_registered / (double)(final / PG),
	       (double)st.peak_pinned_bytes / (1 << 20),
	       (double)st.peak_pinned_bytes / (double)final,
	       (double)ss.peak_pinned_bytes / (1 << 20),
	       (double)ss.peak_pinned_bytes / (double)final,
	       best);
	fflush(stdout);
}

int main(int argc, char **argv)
{
	size_t steps = GROWTH_LINEAR_STEPS;
	unsigned int repeat = 1;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--steps") && i + 1 < argc) {
			steps = strtoul(argv[++i], NULL, 0);
		} else if (!strcmp(argv[i], "--repeat") && i + 1 < argc) {
			repeat = (unsigned int)strtoul(argv[++i], NULL, 0);
		} else {
			fprintf(stderr, "usage: %s [--steps N] [--repeat R]\n",
				argv[0]);
			return 2;
		}
	}
	if (repeat < 1)
		repeat = 1;
	if (steps < 2)
		steps = 2;
	printf("libmrmgr %s, simulated HCA, registration cost 10 us + 100 ns/page\n"
	       "doubling: 4 KiB -> 64 MiB (15 steps); linear: 4 KiB x %zu\n",
	       mrmgr_version_string(), steps);
	monitor_line();
	printf("\n| pattern   | variant                    | reg    | rereg  | pages reg.   | x final| cache peak MiB | x final | device peak MiB | x final | ns/step    |\n");
	printf("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
	for (size_t v = 0; v < sizeof(variants) / sizeof(variants[0]); v++)
		run(&variants[v], 1, GROWTH_DOUBLING_STEPS, repeat);
	for (size_t v = 0; v < sizeof(variants) / sizeof(variants[0]); v++)
		run(&variants[v], 0, steps, repeat);
	return 0;
}
