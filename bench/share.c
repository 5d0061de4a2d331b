/*
 * Benchmark: what sharing costs.
 *
 *  1. The hit path: get + put of a cached region, ns per pair, on a
 *     single-PD cache (mrmgr_get) and on a two-PD cache (mrmgr_get for
 *     the first PD, mrmgr_get_ex with MRMGR_GET_ATTR_PD for the second),
 *     1 and 2 threads, over 1 / 1,000 regions. A multi-PD hit is the same lock-free walk plus
 *     one load of the region's MR in the PD asked.
 *  2. Lazy registration in a second PD versus a miss, with the simulated
 *     registration cost 10 us + 100 ns per 4 KiB page (not pinned).
 *  3. One offer through the share helper, within one process over a
 *     socket pair: offer, import + attach, detach, export released;
 *     microseconds per cycle.
 *
 * Usage: bench/share [--repeat R]   (R runs per row, the fastest printed)
 *
 * SPDX-License-Identifier: MIT
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <mrmgr/mrmgr.h>
#include <mrmgr/sim.h>
#include <mrmgr/share.h>

#define PG ((size_t)4096)
#define ACCESS (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | \
		IBV_ACCESS_REMOTE_READ)
#define OPS 2000000

static double now_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e9 + t.tv_nsec;
}

static void die(int ret, const char *what)
{
	if (ret) {
		fprintf(stderr, "%s: %s\n", what, strerror(ret));
		exit(1);
	}
}

struct hit_arg {
	mrmgr_cache_t *cache;
	struct ibv_pd *pd; /* NULL: mrmgr_get */
	char *buf;
	size_t nregions;
	unsigned int seed;
	double ns;
};

/* mrmgr_get() in one PD of a multi-PD cache (mrmgr_get_ex() with the PD). */
static int get_pd(mrmgr_cache_t *c, struct ibv_pd *pd, void *addr, size_t len,
		  unsigned int access, mrmgr_region_t **r)
{
	struct mrmgr_get_attr ga = { .comp_mask = MRMGR_GET_ATTR_PD, .pd = pd };

	return mrmgr_get_ex(c, addr, len, access, &ga, r);
}

/* mrmgr_cache_create() over npds PDs. */
static int create_multi(struct ibv_pd *const *pds, size_t npds,
			const struct mrmgr_cache_attr *attr, mrmgr_cache_t **c)
{
	struct mrmgr_cache_attr a = *attr;

	a.comp_mask |= MRMGR_CACHE_ATTR_PDS;
	a.pds = pds;
	a.npds = npds;
	return mrmgr_cache_create(NULL, &a, c);
}

static void *hits(void *p)
{
	struct hit_arg *a = p;
	mrmgr_region_t *r;
	double t0 = now_ns();

	for (long i = 0; i < OPS; i++) {
		size_t k = a->nregions > 1 ? (size_t)rand_r(&a->seed) % a->nregions : 0;
		char *addr = a->buf + k * 2 * PG;

		die(a->pd ? get_pd(a->cache, a->pd, addr, PG, ACCESS, &r)
			  : mrmgr_get(a->cache, addr, PG, ACCESS, &r), "get");
		mrmgr_put(r);
	}
	a->ns = (now_ns() - t0) / OPS;
	return NULL;
}

/* ns per get+put pair (aggregate over threads: wall time / total ops). */
static double hit_run(mrmgr_cache_t *c, struct ibv_pd *pd, char *buf,
		      size_t nregions, int threads)
{
	pthread_t th[2];
	struct hit_arg a[2];
	double t0;

	/* Warm: every region cached in the PD asked. */
	for (size_t k = 0; k < nregions; k++) {
		mrmgr_region_t *r;

		die(pd ? get_pd(c, pd, buf + k * 2 * PG, PG, ACCESS, &r)
		       : mrmgr_get(c, buf + k * 2 * PG, PG, ACCESS, &r), "warm");
		mrmgr_put(r);
	}
	t0 = now_ns();
	for (int i = 0; i < threads; i++) {
		a[i] = (struct hit_arg){ c, pd, buf, nregions, (unsigned int)i + 7, 0 };
		pthread_create(&th[i], NULL, hits, &a[i]);
	}
	for (int i = 0; i < threads; i++)
		pthread_join(th[i], NULL);
	return (now_ns() - t0) / ((double)OPS * threads);
}

static void bench_hits(int repeat)
{
	struct mrmgr_sim_attr sa = {
		.comp_mask = MRMGR_SIM_ATTR_FLAGS | MRMGR_SIM_ATTR_MEMLOCK,
		.flags = MRMGR_SIM_FLAG_NO_PIN, .memlock_bytes = UINT64_MAX,
	};
	struct mrmgr_cache_attr ca = {
		.comp_mask = MRMGR_CACHE_ATTR_FLAGS | MRMGR_CACHE_ATTR_MAX_BYTES,
		.flags = MRMGR_CACHE_NO_MERGE, .max_bytes = UINT64_MAX,
	};
	static const size_t sizes[] = { 1, 1000 };
	struct ibv_context *ctx;
	struct ibv_pd *pd[2];
	size_t maxn = 1000;
	char *buf = mmap(NULL, maxn * 2 * PG, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	die(buf == MAP_FAILED ? ENOMEM : 0, "mmap");
	die(mrmgr_sim_open(&sa, &ctx), "sim open");
	die(mrmgr_sim_alloc_pd(ctx, &pd[0]), "pd");
	die(mrmgr_sim_alloc_pd(ctx, &pd[1]), "pd");
	printf("\nhit get+put, ns per pair (fastest of %d; 2 threads: wall / total ops)\n\n", repeat);
	printf("| cache | call | regions | 1 thread | 2 threads |\n|---|---|---:|---:|---:|\n");
	for (int kind = 0; kind < 3; kind++) {
		for (size_t s = 0; s < 2; s++) {
			double best[3] = { 1e18, 1e18, 1e18 };

			for (int rep = 0; rep < repeat; rep++) {
				for (int t = 1; t <= 2; t++) {
					mrmgr_cache_t *c;
					double ns;

					if (kind == 0)
						die(mrmgr_cache_create(pd[0], &ca, &c), "cache");
					else
						die(create_multi(pd, 2, &ca, &c), "cache");
					ns = hit_run(c, kind == 2 ? pd[1] : NULL, buf,
						     sizes[s], t);
					if (ns < best[t])
						best[t] = ns;
					die(mrmgr_cache_destroy(c), "destroy");
				}
			}
			printf("| %s | %s | %zu | %.1f | %.1f |\n",
			       kind == 0 ? "single PD" : "two PDs",
			       kind == 2 ? "mrmgr_get_ex, 2nd PD" : "mrmgr_get",
			       sizes[s], best[1], best[2]);
		}
	}
	mrmgr_sim_dealloc_pd(pd[0]);
	mrmgr_sim_dealloc_pd(pd[1]);
	mrmgr_sim_close(ctx);
	munmap(buf, maxn * 2 * PG);
}

static void bench_lazy(int repeat)
{
	struct mrmgr_sim_attr sa = {
		.comp_mask = MRMGR_SIM_ATTR_FLAGS | MRMGR_SIM_ATTR_COST |
			     MRMGR_SIM_ATTR_MEMLOCK,
		.flags = MRMGR_SIM_FLAG_NO_PIN, .memlock_bytes = UINT64_MAX,
		.reg_ns = 10000, .reg_ns_per_page = 100,
	};
	struct ibv_context *ctx;
	struct ibv_pd *pd[2];
	const size_t len = 1 << 20, n = 200;
	char *buf = mmap(NULL, n * len, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	double miss = 1e18, lazy = 1e18;
	struct mrmgr_cache_attr ca = {
		.comp_mask = MRMGR_CACHE_ATTR_FLAGS, .flags = MRMGR_CACHE_NO_MERGE,
	};

	die(buf == MAP_FAILED ? ENOMEM : 0, "mmap");
	die(mrmgr_sim_open(&sa, &ctx), "sim open");
	die(mrmgr_sim_alloc_pd(ctx, &pd[0]), "pd");
	die(mrmgr_sim_alloc_pd(ctx, &pd[1]), "pd");
	for (int rep = 0; rep < repeat; rep++) {
		mrmgr_cache_t *c;
		mrmgr_region_t *r;
		double t0;

		die(create_multi(pd, 2, &ca, &c), "cache");
		t0 = now_ns();
		for (size_t i = 0; i < n; i++) {
			die(mrmgr_get(c, buf + i * len, len, ACCESS, &r), "miss");
			mrmgr_put(r);
		}
		if ((now_ns() - t0) / n < miss)
			miss = (now_ns() - t0) / n;
		t0 = now_ns();
		for (size_t i = 0; i < n; i++) {
			die(get_pd(c, pd[1], buf + i * len, len, ACCESS, &r), "lazy");
			mrmgr_put(r);
		}
		if ((now_ns() - t0) / n < lazy)
			lazy = (now_ns() - t0) / n;
		die(mrmgr_cache_destroy(c), "destroy");
	}
	printf("\n1 MiB region, registration modelled at 10 us + 100 ns/page "
	       "(35.6 us): miss in the first PD %.1f us, lazy registration "
	       "in the second PD %.1f us\n", miss / 1e3, lazy / 1e3);
	mrmgr_sim_dealloc_pd(pd[0]);
	mrmgr_sim_dealloc_pd(pd[1]);
	mrmgr_sim_close(ctx);
	munmap(buf, n * len);
}

static void bench_offer(int repeat)
{
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	mrmgr_cache_t *c;
	mrmgr_share_server_t *srv;
	mrmgr_share_client_t *cli;
	struct mrmgr_share_event ev;
	int sv[2];
	uint64_t peer, id;
	const int n = 2000;
	char *buf = mmap(NULL, 64 * PG, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	double best = 1e18;
	mrmgr_region_t *r;

	die(buf == MAP_FAILED ? ENOMEM : 0, "mmap");
	memset(buf, 0, 64 * PG);
	die(mrmgr_sim_open(NULL, &ctx), "sim open");
	die(mrmgr_sim_alloc_pd(ctx, &pd), "pd");
	die(mrmgr_cache_create(pd, NULL, &c), "cache");
	die(mrmgr_share_server_create(c, NULL, NULL, &srv), "server");
	die(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv) ? errno : 0, "socketpair");
	die(mrmgr_share_server_add_peer(srv, sv[0], &peer), "peer");
	die(mrmgr_share_client_create(sv[1], 1000, &cli), "client");
	die(mrmgr_get(c, buf, 64 * PG, ACCESS, &r), "get");
	for (int rep = 0; rep < repeat; rep++) {
		double t0 = now_ns();

		for (int i = 0; i < n; i++) {
			die(mrmgr_share_server_offer(srv, peer, r, 0, &id), "offer");
			die(mrmgr_share_client_wait(cli, 1000, &ev), "wait");
			die(ev.type == MRMGR_SHARE_EV_IMPORTED ? 0 : EPROTO, "import");
			die(mrmgr_share_client_release(cli, ev.import), "release");
			while (mrmgr_share_server_importers(srv, id) ||
			       mrmgr_share_server_progress(srv, 0) == 0)
				;
		}
		if ((now_ns() - t0) / n < best)
			best = (now_ns() - t0) / n;
	}
	mrmgr_put(r);
	printf("\none offer through the share helper (one process, socket pair, "
	       "simulated HCA): offer + import + attach + detach + release: "
	       "%.1f us\n", best / 1e3);
	mrmgr_share_client_destroy(cli);
	mrmgr_share_server_destroy(srv, MRMGR_DESTROY_FORCE);
	mrmgr_cache_destroy(c);
	mrmgr_sim_dealloc_pd(pd);
	mrmgr_sim_close(ctx);
	munmap(buf, 64 * PG);
}

int main(int argc, char **argv)
{
	int repeat = 1;

	if (argc == 3 && !strcmp(argv[1], "--repeat"))
		repeat = atoi(argv[2]) > 0 ? atoi(argv[2]) : 1;
	else if (argc != 1) {
		fprintf(stderr, "usage: %s [--repeat R]\n", argv[0]);
		return 2;
	}
	printf("libmrmgr %s, simulated HCA\n", mrmgr_version_string());
	bench_hits(repeat);
	bench_lazy(repeat);
	bench_offer(repeat);
	return 0;
}
