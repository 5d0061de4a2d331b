/*
 * bench/compare: the hit section of one cache, in its own process. R
 * regions of 64 KiB, 128 KiB apart, registered first; then get+put of a
 * random 4 KiB page of a random region, by 1 and by 2 threads.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "compare.h"

static const struct cost_model zero_cost = { 0, 0 };
static int hit_read_key; /* hit_rep(): read the lkey after each get */


struct hit_thread {
	const struct drv_ops *ops;
	struct drv *d;
	struct hit_args a;
	pthread_barrier_t *bar;
	double t0, t1, cpu;
};

static double cpu_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
	return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

static void *hit_thread_main(void *arg)
{
	struct hit_thread *t = arg;
	double c0;

	pthread_barrier_wait(t->bar);
	c0 = cpu_ns();
	t->t0 = now_ns();
	t->ops->hit_loop(t->d, &t->a);
	t->t1 = now_ns();
	t->cpu = cpu_ns() - c0;
	return NULL;
}

/*
 * One repetition: nthreads threads, each nops hits. Returns ns per op per
 * thread (each thread's own time);
 * in *overlap, the threads' CPU time over the wall time (2.0: the two
 * threads ran side by side throughout; less: the machine was busy).
 */
static double hit_rep(const struct drv_ops *ops, struct drv *d, char *base,
		      uint64_t nregions, int nthreads, uint64_t seed,
		      double *overlap)
{
	struct hit_thread t[2];
	pthread_t tid[2];
	pthread_barrier_t bar;
	double per = 0, lo = 0, hi = 0, cpu = 0;

	pthread_barrier_init(&bar, NULL, (unsigned int)nthreads);
	for (int i = 0; i < nthreads; i++) {
		t[i] = (struct hit_thread){
			.ops = ops, .d = d, .bar = &bar,
			.a = { .base = base, .stride = STRIDE,
			       .region_len = REGION_LEN, .nregions = nregions,
			       .nops = opt.ops, .seed = seed * 7919 + (uint64_t)i + 1,
			       .read_key = hit_read_key },
		};
		if (i == 0)
			continue;
		if (pthread_create(&tid[i], NULL, hit_thread_main, &t[i]))
			die("pthread_create", errno);
	}
	hit_thread_main(&t[0]);
	for (int i = 1; i < nthreads; i++)
		pthread_join(tid[i], NULL);
	pthread_barrier_destroy(&bar);
	for (int i = 0; i < nthreads; i++) {
		per += (t[i].t1 - t[i].t0) / (double)opt.ops;
		cpu += t[i].cpu;
		if (i == 0 || t[i].t0 < lo)
			lo = t[i].t0;
		if (i == 0 || t[i].t1 > hi)
			hi = t[i].t1;
	}
	*overlap = cpu / (hi - lo);
	return per / nthreads;
}

uint64_t hit_sizes[NSIZES_MAX] = { 1, 10, 100, 1000, 10000, 100000 };
size_t nsizes = NSIZES_MAX;

void hit_set_sizes(const char *list)
{
	char *e = (char *)list;

	nsizes = 0;
	while (*e && nsizes < NSIZES_MAX) {
		hit_sizes[nsizes++] = strtoull(e, &e, 0);
		if (*e == ',')
			e++;
	}
}

int hit_in_table(uint64_t r)
{
	return r == 1 || r == 1000 || r == 100000;
}

/* A cache holding n regions of the hit layout at base. */
static struct drv *open_filled(const struct drv_ops *ops, char *base,
			       uint64_t n)
{
	struct drv *d;
	int ret = ops->open(&d, 2 * n + 64, (uint64_t)1 << 50, &zero_cost);

	if (ret)
		die(ops->name, ret);
	for (uint64_t i = 0; i < n; i++) {
		void *h = ops->get(d, base + i * STRIDE, REGION_LEN);

		if (!h)
			die("warm-up get", EIO);
		ops->put(d, h);
	}
	return d;
}

/*
 * A hit that then reads the key, as a caller building a work request
 * does: get + mrmgr_region_lkey() + put against UCX's get + the lkey its
 * region keeps + put, at 100,000 regions (where every line a hit
 * touches is a cache miss), 1 thread.
 */
static void hit_key_rows(const struct drv_ops *ops)
{
	uint64_t n = 100000;
	char *base = map_area(n * STRIDE);
	struct drv *d = open_filled(ops, base, n);
	double o;

	hit_read_key = 1;
	res.hit_key = hit_rep(ops, d, base, n, 1, 1, &o);
	hit_read_key = 0;
	res.hit_nokey = hit_rep(ops, d, base, n, 1, 1, &o);
	res.unwatched += (double)ops->unwatched(d);
	ops->close(d);
	munmap(base, n * STRIDE);
}

void section_hit(const struct drv_ops *ops)
{
	for (size_t si = 0; si < nsizes; si++) {
		uint64_t n = hit_sizes[si];
		char *base;
		struct drv *d;

		if (opt.quick && !hit_in_table(n))
			continue;
		base = map_area(n * STRIDE);
		d = open_filled(ops, base, n);
		if (si == 0)
			note_source(SEC_HIT, ops, d);
		for (int th = 1; th <= opt.max_threads; th++) {
			double o;

			res.hit[si][th - 1] = hit_rep(ops, d, base, n, th, 1,
						      &o);
			if (th == 2)
				res.hit_cpu[si] = o;
		}
		res.unwatched += (double)ops->unwatched(d);
		ops->close(d);
		munmap(base, n * STRIDE);
	}
	if (!opt.no_key_rows)
		hit_key_rows(ops);
}
