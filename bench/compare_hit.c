/*
 * bench/compare: the hit section. R regions of 64 KiB, 128 KiB apart,
 * registered first; then get+put of a random 4 KiB page of a random
 * region, by 1 and by 2 threads, the two caches alternating.
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
 * thread (each thread's own time) and, in *agg, wall ns per op of all;
 * in *overlap, the threads' CPU time over the wall time (2.0: the two
 * threads ran side by side throughout; less: the machine was busy).
 */
static double hit_rep(const struct drv_ops *ops, struct drv *d, char *base,
		      uint64_t nregions, int nthreads, uint64_t seed,
		      double *agg, double *overlap)
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
	*agg = (hi - lo) / (double)(opt.ops * (uint64_t)nthreads);
	*overlap = cpu / (hi - lo);
	return per / nthreads;
}

static uint64_t hit_sizes[] = { 1, 10, 100, 1000, 10000, 100000 };
#define NSIZES (sizeof(hit_sizes) / sizeof(hit_sizes[0]))
static size_t nsizes = NSIZES;

void hit_set_sizes(const char *list)
{
	char *e = (char *)list;

	nsizes = 0;
	while (*e && nsizes < NSIZES) {
		hit_sizes[nsizes++] = strtoull(e, &e, 0);
		if (*e == ',')
			e++;
	}
}

static int in_table(uint64_t r)
{
	return r == 1 || r == 1000 || r == 100000;
}

/*
 * A hit that then reads the key, as a caller building a work request
 * does: get + mrmgr_region_lkey() + put against UCX's get + the lkey its
 * region keeps + put, at 100,000 regions (where every line a hit
 * touches is a cache miss), 1 thread, alternating.
 */
static void hit_key_rows(void)
{
	uint64_t n = 100000;
	char *base = map_area(n * STRIDE);
	struct samples with[NDRV_MAX] = { 0 }, without[NDRV_MAX] = { 0 };
	struct drv *d[NDRV_MAX];

	printf("\n## hit with the key read: get + lkey + put, %llu regions, "
	       "1 thread\n\n", (unsigned long long)n);
	for (size_t k = 0; k < ndrv; k++) {
		int ret = drivers[k]->open(&d[k], 2 * n + 64, (uint64_t)1 << 50,
					   &zero_cost);

		if (ret)
			die(drivers[k]->name, ret);
		for (uint64_t i = 0; i < n; i++) {
			void *h = drivers[k]->get(d[k], base + i * STRIDE,
						  REGION_LEN);

			if (!h)
				die("warm-up get", EIO);
			drivers[k]->put(d[k], h);
		}
	}
	for (int rep = 0; rep < opt.reps; rep++) {
		for (size_t j = 0; j < ndrv; j++) {
			size_t k = rep & 1 ? ndrv - 1 - j : j;
			double a, o;

			hit_read_key = 1;
			add(&with[k], hit_rep(drivers[k], d[k], base, n, 1,
					      (uint64_t)rep, &a, &o));
			hit_read_key = 0;
			add(&without[k], hit_rep(drivers[k], d[k], base, n, 1,
						 (uint64_t)rep, &a, &o));
		}
	}
	printf("| cache | ns per get+put | ns per get+lkey+put |\n"
	       "|---|---:|---:|\n");
	for (size_t k = 0; k < ndrv; k++) {
		printf("| %s | %.1f | %.1f |\n", drivers[k]->name,
		       median(&without[k]), median(&with[k]));
		csv_row("hit", "random-page-lkey", n, 1, drivers[k]->name,
			"ns_per_op_per_thread", &with[k]);
		sum.hit_key[k] = median(&with[k]);
		sum.hit_nokey[k] = median(&without[k]);
		drivers[k]->close(d[k]);
	}
	fflush(stdout);
	munmap(base, n * STRIDE);
}

void section_hit(void)
{
	/* [size][threads-1][driver]: per-thread ns/op and aggregate ns/op */
	static struct samples per[NSIZES][2][NDRV_MAX], agg[NSIZES][2][NDRV_MAX];
	static struct samples ovl[NSIZES][NDRV_MAX];
	FILE *plot = opt.plot ? fopen(opt.plot, "w") : NULL;

	printf("\n## hit: get+put of a random 4 KiB page of one of R 64 KiB "
	       "regions\n\n");
	printf("%llu ops per thread per repetition, %d repetitions, median "
	       "ns per get+put (per thread);\nscaling = aggregate throughput "
	       "of 2 threads / that of 1 thread, same cache;\noverlap = the "
	       "2 threads' CPU time / wall time (2.00: they ran side by side; "
	       "less: the machine was busy, and scaling says little).\n\n",
	       (unsigned long long)opt.ops, opt.reps);
	printf("| regions | threads | libmrmgr ns | UCX ns | libmrmgr/UCX | "
	       "libmrmgr scaling | UCX scaling | overlap |\n");
	printf("|---:|---:|---:|---:|---:|---:|---:|---:|\n");
	if (plot)
		fprintf(plot, "# regions mrmgr_1t ucx_1t mrmgr_2t ucx_2t "
			      "(ns per get+put per thread, medians)\n");
	for (size_t si = 0; si < nsizes; si++) {
		uint64_t n = hit_sizes[si];
		char *base = map_area(n * STRIDE);
		struct drv *d[NDRV_MAX];
		double m[2][NDRV_MAX] = { { 0 } };

		if (opt.quick && !in_table(n)) {
			munmap(base, n * STRIDE);
			continue;
		}
		for (size_t k = 0; k < ndrv; k++) {
			int ret = drivers[k]->open(&d[k], 2 * n + 64,
						   (uint64_t)1 << 50, &zero_cost);

			if (ret)
				die(drivers[k]->name, ret);
			for (uint64_t i = 0; i < n; i++) {
				void *h = drivers[k]->get(d[k], base + i * STRIDE,
							  REGION_LEN);

				if (!h)
					die("warm-up get", EIO);
				drivers[k]->put(d[k], h);
			}
		}
		for (int th = 1; th <= opt.max_threads; th++) {
			for (int rep = 0; rep < opt.reps; rep++) {
				for (size_t j = 0; j < ndrv; j++) {
					/* Alternate which cache goes first. */
					size_t k = rep & 1 ? ndrv - 1 - j : j;
					double a, o, p = hit_rep(drivers[k], d[k], base,
								 n, th, (uint64_t)rep,
								 &a, &o);

					add(&per[si][th - 1][k], p);
					add(&agg[si][th - 1][k], a);
					if (th == 2)
						add(&ovl[si][k], o);
				}
			}
			for (size_t k = 0; k < ndrv; k++) {
				m[th - 1][k] = median(&per[si][th - 1][k]);
				csv_row("hit", "random-page", n, th,
					drivers[k]->name, "ns_per_op_per_thread",
					&per[si][th - 1][k]);
				csv_row("hit", "random-page", n, th,
					drivers[k]->name, "aggregate_ns_per_op",
					&agg[si][th - 1][k]);
				if (th == 2)
					csv_row("hit", "random-page", n, th,
						drivers[k]->name, "cpu_overlap",
						&ovl[si][k]);
			}
		}
		for (int th = 1; th <= opt.max_threads; th++) {
			double sc[NDRV_MAX];

			for (size_t k = 0; k < ndrv; k++)
				sc[k] = median(&agg[si][0][k]) /
					median(&agg[si][th - 1][k]);
			if (!in_table(n) && opt.quick)
				continue;
			printf("| %llu | %d | %.1f | ", (unsigned long long)n,
			       th, m[th - 1][0]);
			if (ndrv > 1)
				printf("%.1f | %.2f | ", m[th - 1][1],
				       m[th - 1][0] / m[th - 1][1]);
			else
				printf("- | - | ");
			if (th == 1)
				printf("1.00 | %s | - |\n",
				       ndrv > 1 ? "1.00" : "-");
			else if (ndrv > 1)
				printf("%.2f | %.2f | %.2f, %.2f |\n", sc[0],
				       sc[1], median(&ovl[si][0]),
				       median(&ovl[si][1]));
			else
				printf("%.2f | - | %.2f |\n", sc[0],
				       median(&ovl[si][0]));
		}
		fflush(stdout);
		if (plot)
			fprintf(plot, "%llu %.2f %.2f %.2f %.2f\n",
				(unsigned long long)n, m[0][0],
				ndrv > 1 ? m[0][1] : 0.0, m[1][0],
				ndrv > 1 ? m[1][1] : 0.0);
		for (size_t k = 0; k < ndrv; k++)
			drivers[k]->close(d[k]);
		munmap(base, n * STRIDE);
	}
	if (plot)
		fclose(plot);
	hit_key_rows();
}
