/*
 * libmrmgr demo: the cache under a message-passing workload.
 *
 * Opens the first RDMA device, or the simulated HCA when there is none (and
 * says so), then plays what a middleware send path does: many messages from
 * a set of buffers, each needing a registration for a moment, with the
 * cache bounded below the working set, some buffers growing, and some freed
 * and reallocated (the workload of tools/perftest/workload.c, which
 * mrmgr_perftest(1) measures on a device). It prints what the cache did.
 *
 * Usage: demo [--sim] [--device NAME] [--messages N]
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <mrmgr/mrmgr.h>
#include <mrmgr/sim.h>

#include "workload.h"

#define ACCESS (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE)

struct device {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	int simulated;
};

static int open_device(struct device *d, const char *want, int force_sim)
{
	struct ibv_device **list = NULL;
	int n = 0, ret;

	memset(d, 0, sizeof(*d));
	if (!force_sim)
		list = ibv_get_device_list(&n);
	for (int i = 0; list && i < n; i++) {
		if (want && strcmp(ibv_get_device_name(list[i]), want))
			continue;
		d->ctx = ibv_open_device(list[i]);
		if (d->ctx)
			break;
	}
	if (list)
		ibv_free_device_list(list);
	if (d->ctx) {
		d->pd = ibv_alloc_pd(d->ctx);
		if (!d->pd) {
			ret = errno;
			ibv_close_device(d->ctx);
			return ret ? ret : ENOMEM;
		}
		printf("device: %s (libibverbs)\n", ibv_get_device_name(d->ctx->device));
		return 0;
	}
	if (want && !force_sim) {
		fprintf(stderr, "no RDMA device named %s\n", want);
		return ENODEV;
	}
	printf("device: %s\n", force_sim ? "simulated HCA (--sim)"
					 : "no RDMA device found; using the simulated HCA");
	d->simulated = 1;
	if ((ret = mrmgr_sim_open(NULL, &d->ctx)))
		return ret;
	printf("        %s, a software model of an HCA's MR semantics\n",
	       ibv_get_device_name(d->ctx->device));
	return mrmgr_sim_alloc_pd(d->ctx, &d->pd);
}

static void close_device(struct device *d)
{
	if (d->simulated) {
		mrmgr_sim_dealloc_pd(d->pd);
		mrmgr_sim_close(d->ctx);
	} else {
		ibv_dealloc_pd(d->pd);
		ibv_close_device(d->ctx);
	}
}

static void print_stats(mrmgr_cache_t *cache, const char *when)
{
	struct mrmgr_stats s;

	mrmgr_cache_query_stats(cache, &s, sizeof(s));
	printf("\n%s\n", when);
	printf("  %-22s %12llu   %-22s %12llu\n", "hits", (unsigned long long)s.hits,
	       "misses", (unsigned long long)s.misses);
	printf("  %-22s %12llu   %-22s %12llu\n", "registrations",
	       (unsigned long long)s.registrations, "deregistrations",
	       (unsigned long long)s.deregistrations);
	printf("  %-22s %12llu   %-22s %12llu\n", "merges", (unsigned long long)s.merges,
	       "evictions", (unsigned long long)s.evictions);
	printf("  %-22s %12llu   %-22s %12llu\n", "invalidations",
	       (unsigned long long)s.invalidations, "uncached",
	       (unsigned long long)s.uncached);
	printf("  %-22s %12llu   %-22s %12.1f MiB\n", "regions now",
	       (unsigned long long)s.regions, "pinned now", s.pinned_bytes / 1048576.0);
	printf("  %-22s %12.1f MiB   %-22s %12.1f MiB\n", "peak pinned",
	       s.peak_pinned_bytes / 1048576.0, "byte limit", s.max_bytes / 1048576.0);
	if (s.hits + s.misses)
		printf("  hit rate %.1f%%\n", 100.0 * s.hits / (double)(s.hits + s.misses));
}

/* The application frees or moves a buffer: it tells the cache first. */
static void before_unmap(void *cache, void *addr, size_t len)
{
	mrmgr_invalidate(cache, addr, len);
}

int main(int argc, char **argv)
{
	const char *want = NULL;
	int force_sim = 0;
	long messages = 20000;
	struct device dev;
	mrmgr_cache_t *cache;
	struct workload_attr wa;
	struct workload *wl;
	long remaps, growths;
	int ret;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--sim"))
			force_sim = 1;
		else if (!strcmp(argv[i], "--device") && i + 1 < argc)
			want = argv[++i];
		else if (!strcmp(argv[i], "--messages") && i + 1 < argc)
			messages = strtol(argv[++i], NULL, 0);
		else {
			fprintf(stderr, "usage: %s [--sim] [--device NAME] [--messages N]\n",
				argv[0]);
			return 2;
		}
	}
	printf("libmrmgr %s demo\n", mrmgr_version_string());
	if ((ret = open_device(&dev, want, force_sim))) {
		fprintf(stderr, "opening a device: %s\n", strerror(ret));
		return 1;
	}

	/* A cache smaller than the working set, so eviction shows. */
	workload_default_attr(&wa);
	struct mrmgr_cache_attr attr = {
		.comp_mask = MRMGR_CACHE_ATTR_MAX_BYTES | MRMGR_CACHE_ATTR_FLAGS,
		.max_bytes = workload_footprint(&wa) / 2,
		.flags = MRMGR_CACHE_NO_MERGE,
	};
	if ((ret = mrmgr_cache_create(dev.pd, &attr, &cache))) {
		fprintf(stderr, "creating the cache: %s\n", strerror(ret));
		return 1;
	}
	if ((ret = workload_create(&wa, before_unmap, cache, &wl))) {
		fprintf(stderr, "mapping the buffers: %s\n", strerror(ret));
		return 1;
	}
	printf("workload: %ld messages over %d buffers of %zu KiB, growing to %ux;"
	       " cache bounded at %.1f MiB\n", messages, wa.nbuf, wa.buflen / 1024,
	       wa.max_growth, attr.max_bytes / 1048576.0);

	struct timespec t0, t1;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	long verified = 0;
	for (long m = 0; m < messages; m++) {
		mrmgr_region_t *r;
		char *p;
		size_t len;

		if ((ret = workload_next(wl, m, &p, &len))) {
			fprintf(stderr, "workload: %s\n", strerror(ret));
			return 1;
		}
		if ((ret = mrmgr_get(cache, p, len, ACCESS, &r))) {
			fprintf(stderr, "get: %s\n", strerror(ret));
			return 1;
		}
		if (dev.simulated && m % 97 == 0) {
			/* A peer writes into the region through its rkey. */
			char msg[32];
			size_t n;

			snprintf(msg, sizeof(msg), "message %ld", m);
			n = strlen(msg) + 1 < len ? strlen(msg) + 1 : len;
			ret = mrmgr_sim_write(dev.pd, mrmgr_region_rkey(r),
					      (uint64_t)(uintptr_t)p, msg, n);
			if (ret || memcmp(p, msg, n)) {
				fprintf(stderr, "simulated RDMA write failed: %s\n", strerror(ret));
				return 1;
			}
			verified++;
		}
		mrmgr_put(r);
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	double secs = (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
	workload_counts(wl, &remaps, &growths);
	print_stats(cache, "after the workload:");
	printf("  %.2f us per message (get + put, including registration costs)\n",
	       secs * 1e6 / (double)messages);
	printf("  buffers freed and mapped again: %ld; grown: %ld\n", remaps, growths);
	if (dev.simulated) {
		struct mrmgr_sim_stats ss;
		mrmgr_sim_query_stats(dev.ctx, &ss, sizeof(ss));
		printf("  simulated RDMA writes verified: %ld; stale accesses: %llu\n",
		       verified, (unsigned long long)ss.stale_accesses);
	}

	workload_destroy(wl);
	if ((ret = mrmgr_cache_destroy(cache))) {
		fprintf(stderr, "destroying the cache: %s\n", strerror(ret));
		return 1;
	}
	close_device(&dev);
	printf("\ndone: every registration released.\n");
	return 0;
}
