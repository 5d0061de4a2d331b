/*
 * Shared fixtures for the unit tests: a simulated device, a PD and a cache,
 * plus memory helpers.
 *
 * SPDX-License-Identifier: MIT
 */
#ifndef MRMGR_TEST_HELPERS_H
#define MRMGR_TEST_HELPERS_H

#include <criterion/criterion.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>

#include <mrmgr/mrmgr.h>
#include <mrmgr/sim.h>

#define KiB ((size_t)1024)
#define MiB (1024 * KiB)
#define RW (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ)

struct fixture {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	mrmgr_cache_t *cache;
};

static inline void fx_open(struct fixture *f, const struct mrmgr_sim_attr *sa,
			   const struct mrmgr_cache_attr *ca)
{
	memset(f, 0, sizeof(*f));
	cr_assert_eq(mrmgr_sim_open(sa, &f->ctx), 0);
	cr_assert_eq(mrmgr_sim_alloc_pd(f->ctx, &f->pd), 0);
	cr_assert_eq(mrmgr_cache_create(f->pd, ca, &f->cache), 0);
}

static inline void fx_close(struct fixture *f)
{
	struct mrmgr_sim_stats ss;

	if (f->cache)
		cr_assert_eq(mrmgr_cache_destroy(f->cache), 0);
	cr_assert_eq(mrmgr_sim_query_stats(f->ctx, &ss, sizeof(ss)), 0);
	cr_assert_eq(ss.live_mrs, 0, "leaked %llu MRs",
		     (unsigned long long)ss.live_mrs);
	cr_assert_eq(ss.pinned_bytes, 0);
	cr_assert_eq(mrmgr_sim_dealloc_pd(f->pd), 0);
	cr_assert_eq(mrmgr_sim_close(f->ctx), 0);
}

static inline struct mrmgr_stats cstats(mrmgr_cache_t *c)
{
	struct mrmgr_stats s;

	cr_assert_eq(mrmgr_cache_query_stats(c, &s, sizeof(s)), 0);
	return s;
}

static inline struct mrmgr_sim_stats sstats(struct ibv_context *ctx)
{
	struct mrmgr_sim_stats s;

	cr_assert_eq(mrmgr_sim_query_stats(ctx, &s, sizeof(s)), 0);
	return s;
}

/* An anonymous read-write mapping, filled with a byte. */
static inline void *map_rw(size_t len, int fill)
{
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	cr_assert_neq(p, MAP_FAILED);
	memset(p, fill, len);
	return p;
}

/*
 * Replace the mapping at p with fresh memory at the same address: one
 * MAP_FIXED mmap (the kernel unmaps the old pages first, as munmap would),
 * so nothing else (an allocator, a sanitizer's runtime) can take the
 * address in between.
 */
static inline void remap_fixed(void *p, size_t len, int fill)
{
	void *q = mmap(p, len, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
	cr_assert_eq(q, p, "could not map again at %p", p);
	memset(q, fill, len);
}

/* A registration on the simulated HCA that is expected to fail: its
 * errno, and no MR left behind when it succeeds after all. */
static inline int reg_err(struct ibv_pd *pd, void *p, size_t len,
			  unsigned int access)
{
	struct ibv_mr *mr = NULL;
	int ret = mrmgr_sim_reg_mr(pd, p, len, access, &mr);

	if (!ret)
		cr_assert_eq(mrmgr_sim_dereg_mr(mr), 0);
	return ret;
}

/* This process's descriptors whose target names `name` (every one, less
 * the listing's own, when name is NULL): the fd-leak counts of the
 * device-memory tests. */
static inline int count_fds_to(const char *name)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	int n = 0;

	cr_assert_not_null(d);
	while ((e = readdir(d))) {
		char path[300], to[256];
		ssize_t len;

		if (e->d_name[0] == '.' || atoi(e->d_name) == dirfd(d))
			continue;
		snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
		len = readlink(path, to, sizeof(to) - 1);
		if (len < 0)
			continue;
		to[len] = '\0';
		if (!name || strstr(to, name))
			n++;
	}
	closedir(d);
	return n;
}

#endif
