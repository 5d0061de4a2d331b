/*
 * bench/compare: libmrmgr against UCX's ucs_rcache, side by side, in one
 * run, on identical workloads and the same registration cost model.
 *
 *   make -C build bench-compare    (runs this, writes the CSV and the plot)
 *   build/bench/compare [--quick] [--reps N] [--ops N] [--only SECTIONS]
 *                       [--csv FILE] [--plot-data FILE]
 *
 * Sections (--only hit,miss,growth,unmap; default all):
 *   hit     R regions of 64 KiB (R = 1 ... 100,000, 128 KiB apart so no
 *           cache merges them), all registered first; then get+put of one
 *           random 4 KiB page of a random region, by 1 and by 2 threads.
 *           Registration cost zero (it is not on this path).
 *   miss    10,000 distinct 64 KiB buffers, a limit of 1,000 regions,
 *           uniform random get+put: ~90% misses, each an eviction and a
 *           registration costing 10 us + 100 ns per page.
 *   growth  one buffer grown by doubling 4 KiB -> 64 MiB and linearly
 *           4 KiB x 10,000 (bench/growth.c has libmrmgr's other variants).
 *   unmap   what mmap+munmap pairs cost with each cache's invalidation
 *           source installed, with 0 and 100,000 live regions, beside the
 *           raw system calls (each in a fresh process: UCX's hooks, once
 *           installed, stay for the life of the process).
 *
 * Each measurement is repeated (--reps, default 5) with the two caches
 * alternating (the order flips every repetition); medians are printed
 * with the libmrmgr/UCX ratio (below 1: libmrmgr is faster).
 * Without UCX (libucx-dev absent at configure time) only libmrmgr runs.
 *
 * Files: compare.c (options, the miss, growth and unmap sections, the
 * CSV), compare_hit.c (the hit section), compare_unmap.c (its child
 * processes), compare_mrmgr.c and compare_ucx.c (the two caches behind
 * one interface, struct drv_ops). doc/perf.md explains the method.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>

#include <mrmgr/mrmgr.h>

#include "compare.h"
#include "growth.h"

const struct drv_ops *drivers[NDRV_MAX] = {
	&mrmgr_drv,
#ifdef HAVE_UCX
	&ucx_drv,
#endif
};
size_t ndrv = NDRV_MAX;
struct summary sum;

struct options opt = {
	.max_threads = 2,
	.reps = 5,
	.ops = 1000000,
	.miss_ops = 20000,
	.linear_steps = GROWTH_LINEAR_STEPS,
	.unmap_iters = 20000,
	.sections = ~0u,
	.csv = "bench-compare.csv",
	.plot = "bench-compare-hit.dat",
};

enum { S_HIT = 1, S_MISS = 2, S_GROWTH = 4, S_UNMAP = 8 };

static const char *self_path;
static FILE *csv;

void die(const char *what, int err)
{
	fprintf(stderr, "compare: %s: %s\n", what, strerror(err));
	exit(1);
}

int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

void add(struct samples *s, double v)
{
	if (s->n < MAX_REPS)
		s->v[s->n++] = v;
}

double median(const struct samples *s)
{
	double t[MAX_REPS];

	if (!s->n)
		return 0;
	memcpy(t, s->v, (size_t)s->n * sizeof(double));
	qsort(t, (size_t)s->n, sizeof(double), cmp_double);
	return s->n & 1 ? t[s->n / 2] : (t[s->n / 2 - 1] + t[s->n / 2]) / 2;
}

double smin(const struct samples *s)
{
	double m = s->n ? s->v[0] : 0;

	for (int i = 1; i < s->n; i++)
		if (s->v[i] < m)
			m = s->v[i];
	return m;
}

double smax(const struct samples *s)
{
	double m = s->n ? s->v[0] : 0;

	for (int i = 1; i < s->n; i++)
		if (s->v[i] > m)
			m = s->v[i];
	return m;
}

void csv_row(const char *section, const char *workload,
		    unsigned long long param, int threads, const char *impl,
		    const char *metric, const struct samples *s)
{
	fprintf(csv, "%s,%s,%llu,%d,%s,%s,%.3f,%.3f,%.3f,%d\n", section,
		workload, param, threads, impl, metric, median(s), smin(s),
		smax(s), s->n);
}

void csv_value(const char *section, const char *workload,
		      unsigned long long param, int threads, const char *impl,
		      const char *metric, double v)
{
	struct samples s = { .n = 0 };

	add(&s, v);
	csv_row(section, workload, param, threads, impl, metric, &s);
}

char *map_area(size_t len)
{
	char *p = mmap(NULL, len, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);

	if (p == MAP_FAILED)
		die("mmap", errno);
	return p;
}

static struct cost_model churn_cost = { 10000, 100 };
static const struct cost_model growth_cost = { GROWTH_REG_NS,
					       GROWTH_REG_NS_PER_PAGE };

/* ------------------------------------------------------------------ miss */

#define CHURN_BUFFERS 10000
#define CHURN_LIMIT 1000

/* nops get+put of random buffers; each op's ns in t[] when t != NULL. */
static void churn(const struct drv_ops *ops, struct drv *d, char *base,
		  uint64_t nops, uint64_t *seed, double *t)
{
	for (uint64_t i = 0; i < nops; i++) {
		uint64_t r = rng_next(seed);
		double t0 = t ? now_ns() : 0;
		void *h = ops->get(d, base + rng_below(r, CHURN_BUFFERS) * STRIDE,
				   REGION_LEN);

		if (!h)
			die("churn get", EIO);
		ops->put(d, h);
		if (t)
			t[i] = now_ns() - t0;
	}
}

/*
 * The same churn at zero registration cost: what each cache's miss costs
 * by itself (lookups, eviction, bookkeeping, the monitor's work).
 */
static void miss_zero_cost(char *base)
{
	static const struct cost_model zero = { 0, 0 };
	static struct samples ns[NDRV_MAX + 1];
	const struct drv_ops *md[NDRV_MAX + 1];
	size_t nmd = 0;
	double *t = calloc(opt.miss_ops, sizeof(*t));

	if (!t)
		die("calloc", ENOMEM);
	for (size_t k = 0; k < ndrv; k++)
		md[nmd++] = drivers[k];
#ifdef HAVE_UCX
	if (ndrv > 1)
		md[nmd++] = &ucx_sim_drv; /* pays the simulated HCA too */
#endif
	for (int rep = 0; rep < opt.reps; rep++) {
		for (size_t j = 0; j < nmd; j++) {
			size_t k = rep & 1 ? nmd - 1 - j : j;
			const struct drv_ops *ops = md[k];
			uint64_t seed = 777 + (uint64_t)rep;
			uint64_t keep = opt.miss_ops - opt.miss_ops / 100;
			struct drv *d;
			double total = 0;
			int ret = ops->open(&d, CHURN_LIMIT, (uint64_t)1 << 50,
					    &zero);

			if (ret)
				die(ops->name, ret);
			churn(ops, d, base, 3 * CHURN_LIMIT, &seed, NULL);
			churn(ops, d, base, opt.miss_ops, &seed, t);
			ops->close(d);
			qsort(t, opt.miss_ops, sizeof(*t), cmp_double);
			for (uint64_t i = 0; i < keep; i++)
				total += t[i];
			add(&ns[k], total / (double)keep);
		}
	}
	free(t);
	printf("\n### the same churn at zero registration cost\n\n"
	       "| cache | ns per op |\n|---|---:|\n");
	for (size_t k = 0; k < nmd; k++) {
		printf("| %s | %.0f |\n", md[k]->name, median(&ns[k]));
		csv_row("miss", "churn-zero-cost", CHURN_LIMIT, 1,
			md[k]->name, "ns_per_op", &ns[k]);
		if (k < 2)
			sum.churn_zero[k] = median(&ns[k]);
		else
			sum.churn_zero_sim = median(&ns[k]);
	}
	fflush(stdout);
}

struct miss_thread {
	const struct drv_ops *ops;
	struct drv *d;
	char *base;       /* this thread's own buffers */
	uint64_t nbuf, nops, seed;
	pthread_barrier_t *bar;
	double t0, t1, cpu;
};

static double thread_cpu_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
	return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

static void *miss_thread_main(void *arg)
{
	struct miss_thread *m = arg;

	double c0;

	pthread_barrier_wait(m->bar);
	c0 = thread_cpu_ns();
	m->t0 = now_ns();
	for (uint64_t i = 0; i < m->nops; i++) {
		uint64_t r = rng_next(&m->seed);
		void *h = m->ops->get(m->d, m->base + rng_below(r, m->nbuf) *
						      STRIDE,
				      REGION_LEN);

		if (!h)
			die("miss get", EIO);
		m->ops->put(m->d, h);
	}
	m->t1 = now_ns();
	m->cpu = thread_cpu_ns() - c0;
	return NULL;
}

/*
 * Misses from 1, 2 and 4 threads on distinct buffers (each thread its own
 * share of the 10,000, one cache of 1,000 regions), 10 us + 100 ns/page:
 * all threads' ops over the wall time, and that over 1 thread's.
 */
static void miss_threads(char *base)
{
	static const int nth[3] = { 1, 2, 4 };
	static struct samples tput[NDRV_MAX][3], ovl[NDRV_MAX][3];
	uint64_t per = opt.miss_ops / 4;

	for (int rep = 0; rep < opt.reps; rep++) {
		for (int ti = 0; ti < 3; ti++) {
			for (size_t j = 0; j < ndrv; j++) {
				size_t k = rep & 1 ? ndrv - 1 - j : j;
				const struct drv_ops *ops = drivers[k];
				int n = nth[ti];
				struct miss_thread m[4];
				pthread_t tid[4];
				pthread_barrier_t bar;
				uint64_t share = CHURN_BUFFERS / (uint64_t)n;
				double lo = 0, hi = 0, cpu = 0;
				struct drv *d;
				int ret = ops->open(&d, CHURN_LIMIT,
						    (uint64_t)1 << 50,
						    &churn_cost);

				if (ret)
					die(ops->name, ret);
				pthread_barrier_init(&bar, NULL, (unsigned int)n);
				for (int i = 0; i < n; i++) {
					m[i] = (struct miss_thread){
						.ops = ops, .d = d, .bar = &bar,
						.base = base + (uint64_t)i * share * STRIDE,
						.nbuf = share, .nops = per,
						.seed = 99 + (uint64_t)rep * 31 + (uint64_t)i,
					};
					if (pthread_create(&tid[i], NULL,
							   miss_thread_main, &m[i]))
						die("pthread_create", errno);
				}
				for (int i = 0; i < n; i++) {
					pthread_join(tid[i], NULL);
					cpu += m[i].cpu;
					if (i == 0 || m[i].t0 < lo)
						lo = m[i].t0;
					if (i == 0 || m[i].t1 > hi)
						hi = m[i].t1;
				}
				pthread_barrier_destroy(&bar);
				ops->close(d);
				add(&tput[k][ti], (double)(per * (uint64_t)n) /
							  (hi - lo) * 1e9);
				add(&ovl[k][ti], cpu / (hi - lo));
			}
		}
	}
	printf("\n### misses from several threads on distinct buffers "
	       "(%llu ns + %llu ns/page)\n\n%llu get+put per thread, %d "
	       "repetitions; throughput in ops/s, scaling = over 1 thread's;\n"
	       "CPU = the threads' CPU time over the wall time (the busy-wait "
	       "is CPU time: 2 threads that ran side by side show 2.0; less, "
	       "the machine was busy and scaling says little)\n\n"
	       "| cache | 1 thread | 2 threads | 4 threads | scaling 2 | "
	       "scaling 4 | CPU 1 / 2 / 4 |\n|---|---:|---:|---:|---:|---:|---|\n",
	       (unsigned long long)churn_cost.reg_ns,
	       (unsigned long long)churn_cost.reg_ns_per_page,
	       (unsigned long long)per, opt.reps);
	for (size_t k = 0; k < ndrv; k++) {
		double t1 = median(&tput[k][0]);

		printf("| %s | %.0f | %.0f | %.0f | %.2f | %.2f | %.2f / %.2f / "
		       "%.2f |\n",
		       drivers[k]->name, t1, median(&tput[k][1]),
		       median(&tput[k][2]), median(&tput[k][1]) / t1,
		       median(&tput[k][2]) / t1, median(&ovl[k][0]),
		       median(&ovl[k][1]), median(&ovl[k][2]));
		sum.miss_cpu[k] = median(&ovl[k][1]);
		for (int ti = 0; ti < 3; ti++) {
			csv_row("miss", "threads-distinct", CHURN_LIMIT,
				nth[ti], drivers[k]->name, "ops_per_s",
				&tput[k][ti]);
			sum.miss_scale[k][ti] = median(&tput[k][ti]) / t1;
		}
	}
	fflush(stdout);
}

static void section_miss(void)
{
	char *base = map_area(CHURN_BUFFERS * STRIDE);
	/* The caches, and UCX once more on the simulated HCA itself. */
	const struct drv_ops *md[NDRV_MAX + 1];
	size_t nmd = 0;
	struct samples ns[NDRV_MAX + 1] = { 0 }, regs[NDRV_MAX + 1] = { 0 },
		       over[NDRV_MAX + 1] = { 0 };
	double model = (double)model_ns(&churn_cost, REGION_LEN);
	double *t = calloc(opt.miss_ops, sizeof(*t));

	if (!t)
		die("calloc", ENOMEM);
	for (size_t k = 0; k < ndrv; k++)
		md[nmd++] = drivers[k];
#ifdef HAVE_UCX
	if (ndrv > 1)
		md[nmd++] = &ucx_sim_drv;
#endif
	printf("\n## miss churn: %d buffers of 64 KiB, at most %d regions, "
	       "uniform random get+put\n\n", CHURN_BUFFERS, CHURN_LIMIT);
	printf("registration cost %llu ns + %llu ns/page = %.1f us per 64 KiB; "
	       "%llu ops per repetition, %d repetitions (medians).\n"
	       "Each op is timed: ns per op is the mean without the slowest "
	       "1%% (preemption on a busy machine);\na miss is an op slower "
	       "than half the model, and above model = its median time minus "
	       "the model:\nall a miss costs beyond the modelled "
	       "registration (lookups, eviction, deregistration, the device's "
	       "own bookkeeping).\nUCX: a callback that only busy-waits the "
	       "model; UCX+sim: its callbacks register on the same simulated "
	       "HCA as libmrmgr's.\n\n",
	       (unsigned long long)churn_cost.reg_ns,
	       (unsigned long long)churn_cost.reg_ns_per_page, model / 1000,
	       (unsigned long long)opt.miss_ops, opt.reps);
	for (int rep = 0; rep < opt.reps; rep++) {
		for (size_t j = 0; j < nmd; j++) {
			size_t k = rep & 1 ? nmd - 1 - j : j;
			const struct drv_ops *ops = md[k];
			uint64_t seed = 12345 + (uint64_t)rep, r0, nmiss = 0;
			uint64_t keep = opt.miss_ops - opt.miss_ops / 100;
			struct drv *d;
			double tot = 0;
			int ret = ops->open(&d, CHURN_LIMIT, (uint64_t)1 << 50,
					    &churn_cost);

			if (ret)
				die(ops->name, ret);
			churn(ops, d, base, 3 * CHURN_LIMIT, &seed, NULL); /* fill */
			r0 = ops->registrations(d);
			churn(ops, d, base, opt.miss_ops, &seed, t);
			r0 = ops->registrations(d) - r0;
			ops->close(d);
			qsort(t, opt.miss_ops, sizeof(*t), cmp_double);
			for (uint64_t i = 0; i < keep; i++)
				tot += t[i];
			for (uint64_t i = 0; i < opt.miss_ops; i++)
				nmiss += t[i] > model / 2;
			add(&ns[k], tot / (double)keep);
			add(&regs[k], (double)r0 / (double)opt.miss_ops);
			/* the median miss: misses are the slowest nmiss ops */
			add(&over[k], nmiss ? t[opt.miss_ops - (nmiss + 1) / 2] - model
					    : 0);
		}
	}
	free(t);
	printf("| cache | ns per op | registrations per op | ns above model "
	       "per miss |\n|---|---:|---:|---:|\n");
	{
		/* What the simulated HCA itself adds to the model (its
		 * mapping check and bookkeeping): part of libmrmgr's and
		 * UCX+sim's misses, not of UCX's, whose callback only
		 * busy-waits. */
		double dev = sim_reg_dereg_ns(&churn_cost, base, REGION_LEN,
					      2000) - model;

		printf("| (simulated HCA alone: reg + dereg) | - | 1 | %.0f |\n",
		       dev);
		sum.sim_cost = dev;
		csv_value("miss", "sim-reg-dereg", 1, 1, "sim",
			  "ns_above_model", dev);
	}
	for (size_t k = 0; k < nmd; k++) {
		printf("| %s | %.0f | %.3f | %.0f |\n", md[k]->name,
		       median(&ns[k]), median(&regs[k]), median(&over[k]));
		csv_row("miss", "churn-10k-limit-1k", CHURN_LIMIT, 1,
			md[k]->name, "ns_per_op", &ns[k]);
		csv_row("miss", "churn-10k-limit-1k", CHURN_LIMIT, 1,
			md[k]->name, "registrations_per_op", &regs[k]);
		csv_row("miss", "churn-10k-limit-1k", CHURN_LIMIT, 1,
			md[k]->name, "ns_above_model_per_miss", &over[k]);
	}
	if (ndrv > 1)
		printf("\nlibmrmgr/UCX, ns per op: %.3f\n",
		       median(&ns[0]) / median(&ns[1]));
	for (size_t k = 0; k < ndrv; k++) {
		sum.churn[k] = median(&ns[k]);
		sum.churn_over[k] = median(&over[k]);
	}
	fflush(stdout);
	miss_zero_cost(base);
	miss_threads(base);
	munmap(base, CHURN_BUFFERS * STRIDE);
}

/* ---------------------------------------------------------------- growth */


/*
 * Doubling growth of B buffers laid back to back in one mapping (each
 * 64 MiB when grown), the steps interleaved (every buffer's step i, then
 * every buffer's step i + 1): a buffer grown to its end touches the next
 * one, which a cache that merges or widens past the caller's buffer
 * swallows.
 */
#define B2B_BUFS 16
static void growth_back_to_back(void)
{
	size_t final = growth_size_at(1, GROWTH_DOUBLING_STEPS);
	char *mem = map_area(B2B_BUFS * final);

	for (size_t k = 0; k < ndrv; k++) {
		const struct drv_ops *ops = drivers[k];
		struct drv *d;
		uint64_t regs, pages;
		double t0, t;
		int ret = ops->open(&d, 1u << 20, (uint64_t)1 << 50,
				    &growth_cost);

		if (ret)
			die(ops->name, ret);
		t0 = now_ns();
		for (size_t i = 1; i <= GROWTH_DOUBLING_STEPS; i++)
			for (size_t b = 0; b < B2B_BUFS; b++) {
				void *h = ops->get(d, mem + b * final,
						   growth_size_at(1, i));

				if (!h)
					die("growth get", EIO);
				ops->put(d, h);
			}
		t = now_ns() - t0;
		regs = ops->registrations(d);
		pages = ops->pages_registered(d);
		printf("| doubling, %d buffers back to back | %s | %llu | %llu "
		       "| %.1f | %.0f |\n", B2B_BUFS, ops->name,
		       (unsigned long long)regs, (unsigned long long)pages,
		       (double)pages / (double)(B2B_BUFS * final / PG),
		       t / (double)(GROWTH_DOUBLING_STEPS * B2B_BUFS));
		fflush(stdout);
		csv_value("growth", "doubling-back-to-back", B2B_BUFS, 1,
			  ops->name, "pages_registered", (double)pages);
		csv_value("growth", "doubling-back-to-back", B2B_BUFS, 1,
			  ops->name, "ns_per_step",
			  t / (double)(GROWTH_DOUBLING_STEPS * B2B_BUFS));
		sum.dbl_b2b_ns[k] = t / (double)(GROWTH_DOUBLING_STEPS * B2B_BUFS);
		sum.dbl_b2b_pages[k] = (double)pages;
		if (ops->invalidate)
			ops->invalidate(d, mem, B2B_BUFS * final);
		ops->close(d);
	}
	munmap(mem, B2B_BUFS * final);
}

static void section_growth(void)
{
	printf("\n## growth: one buffer grown step by step, get+put of the "
	       "whole buffer at each step\n\n");
	printf("the patterns and cost model of bench/growth (10 us + 100 "
	       "ns/page); counts do not vary between runs, one run each.\n"
	       "libmrmgr: default settings (rereg in place, headroom), "
	       "registrations = reg + successful rereg calls; bench/growth "
	       "shows its variants.\n\n");
	printf("| pattern | cache | registrations | pages registered | "
	       "x final size | ns per step |\n|---|---|---:|---:|---:|---:|\n");
	for (int doubling = 1; doubling >= 0; doubling--) {
		size_t steps = doubling ? GROWTH_DOUBLING_STEPS
					: opt.linear_steps;
		size_t final = growth_size_at(doubling, steps);
		char *mem = map_area(2 * final);

		for (size_t k = 0; k < ndrv; k++) {
			const struct drv_ops *ops = drivers[k];
			struct drv *d;
			uint64_t regs, pages;
			double t0, t;
			int ret = ops->open(&d, 1u << 20, (uint64_t)1 << 50,
					    &growth_cost);

			if (ret)
				die(ops->name, ret);
			t0 = now_ns();
			for (size_t i = 1; i <= steps; i++) {
				void *h = ops->get(d, mem,
						   growth_size_at(doubling, i));

				if (!h)
					die("growth get", EIO);
				ops->put(d, h);
			}
			t = now_ns() - t0;
			regs = ops->registrations(d);
			pages = ops->pages_registered(d);
			printf("| %s 4 KiB %s | %s | %llu | %llu | %.1f | %.0f |\n",
			       doubling ? "doubling" : "linear",
			       doubling ? "-> 64 MiB" : "steps", ops->name,
			       (unsigned long long)regs,
			       (unsigned long long)pages,
			       (double)pages / (double)(final / PG),
			       t / (double)steps);
			fflush(stdout);
			csv_value("growth", doubling ? "doubling" : "linear",
				  steps, 1, ops->name, "registrations",
				  (double)regs);
			csv_value("growth", doubling ? "doubling" : "linear",
				  steps, 1, ops->name, "pages_registered",
				  (double)pages);
			csv_value("growth", doubling ? "doubling" : "linear",
				  steps, 1, ops->name, "ns_per_step",
				  t / (double)steps);
			if (doubling) {
				sum.dbl_ns[k] = t / (double)steps;
				sum.dbl_pages[k] = (double)pages;
			} else {
				sum.lin_calls[k] = (double)regs;
				sum.lin_pages[k] = (double)pages;
				sum.lin_ns[k] = t / (double)steps;
			}
			if (ops->invalidate)
				ops->invalidate(d, mem, 2 * final);
			ops->close(d);
		}
		munmap(mem, 2 * final);
	}
	growth_back_to_back();
}

/* ----------------------------------------------------------------- unmap */

static void section_unmap(void)
{
	static const char *impls[] = { "raw", "libc", "libmrmgr",
#ifdef HAVE_UCX
				       "ucx",
#endif
	};
	static const uint64_t lives[] = { 0, 100000 };

	printf("\n## unmap: mmap+munmap of 64 KiB, with each cache's "
	       "invalidation source installed\n\n");
	printf("each figure in a fresh process (re-executed), the median of "
	       "%llu timed pairs, then the median of %d processes;\nraw = syscall(SYS_mmap/SYS_munmap); libc = "
	       "mmap()/munmap() with no cache in the process;\n"
	       "+get+put = mmap, get+put of the new mapping, munmap.\n\n",
	       (unsigned long long)opt.unmap_iters, opt.reps);
	printf("| process | live regions | ns per mmap+munmap | ns per "
	       "mmap+get+put+munmap | invalidation source |\n"
	       "|---|---:|---:|---:|---|\n");
	for (size_t li = 0; li < 2; li++) {
		for (size_t ii = 0; ii < sizeof(impls) / sizeof(impls[0]); ii++) {
			struct samples a = { .n = 0 }, b = { .n = 0 };
			struct unmap_result res = { 0 };
			int cache = ii >= 2;

			if (!cache && li == 1)
				continue;
			for (int rep = 0; rep < opt.reps; rep++) {
				if (unmap_run(self_path, impls[ii], lives[li],
					      opt.unmap_iters, &res))
					die("unmap child", EIO);
				add(&a, res.ns_pair);
				add(&b, res.ns_get_pair);
			}
			if (cache)
				printf("| %s | %llu | %.0f | %.0f | %s |\n",
				       impls[ii], (unsigned long long)lives[li],
				       median(&a), median(&b), res.source);
			else
				printf("| %s | - | %.0f | - | - |\n", impls[ii],
				       median(&a));
			fflush(stdout);
			csv_row("unmap", "mmap+munmap", lives[li], 1, impls[ii],
				"ns_per_pair", &a);
			if (cache)
				csv_row("unmap", "mmap+get+put+munmap",
					lives[li], 1, impls[ii], "ns_per_pair",
					&b);
		}
	}
}

/* --------------------------------------------------------------- summary */

extern char **environ;

static void print_env(void)
{
	int any = 0;

	for (char **e = environ; *e; e++)
		if (!strncmp(*e, "MRMGR_", 6)) {
			printf("%s%s", any ? ", " : "\nenvironment: ", *e);
			any = 1;
		}
	printf(any ? " (NOT the default configuration)\n"
		   : "\nenvironment: no MRMGR_* set (libmrmgr's default "
		     "configuration)\n");
}

static void row(const char *what, double m, double u, const char *unit,
		const char *target)
{
	if (!m && !u)
		return;
	printf("| %s | %.4g%s | ", what, m, unit);
	if (u)
		printf("%.4g%s | %.2f | %s |\n", u, unit, m / u, target);
	else
		printf("- | - | %s |\n", target);
}

/* The table: every row beside UCX, from this run. */
static void print_summary(void)
{
	printf("\n## summary\n\n| workload | libmrmgr | UCX | ratio | "
	       "target |\n|---|---:|---:|---:|---|\n");
	row("hit with the key read, 100,000 regions (ns)", sum.hit_key[0],
	    sum.hit_key[1], "", "<= 0.5");
	row("hit without the key read, 100,000 regions (ns)",
	    sum.hit_nokey[0], sum.hit_nokey[1], "", "<= 0.5");
	row("miss churn, 10,000 x 64 KiB, 1,000 cached (ns per op)",
	    sum.churn[0], sum.churn[1], "", "<= 0.9");
	row("miss: above the modelled registration, per miss (ns)",
	    sum.churn_over[0], sum.churn_over[1], "", "libmrmgr <= 1,000");
	row("miss churn at zero registration cost (ns per op)",
	    sum.churn_zero[0], sum.churn_zero[1], "", "");
	row("the same, UCX on the simulated HCA too (ns per op)",
	    sum.churn_zero[0], sum.churn_zero_sim, "", "");
	row("misses from 2 threads: throughput over 1 thread's",
	    sum.miss_scale[0][1], sum.miss_scale[1][1], "", ">= 1.8");
	row("  (2 threads' CPU time over wall time: 2.0 = side by side)",
	    sum.miss_cpu[0], sum.miss_cpu[1], "", "");
	row("misses from 4 threads: throughput over 1 thread's",
	    sum.miss_scale[0][2], sum.miss_scale[1][2], "", ">= 2 threads'");
	row("growth, doubling 4 KiB -> 64 MiB, one buffer (ns per step)",
	    sum.dbl_ns[0], sum.dbl_ns[1], "", "<= 0.9");
	row("growth, doubling, one buffer: pages registered", sum.dbl_pages[0],
	    sum.dbl_pages[1], "", "<= 1");
	row("growth, doubling, 16 buffers back to back (ns per step)",
	    sum.dbl_b2b_ns[0], sum.dbl_b2b_ns[1], "", "<= 0.9");
	row("growth, doubling, 16 buffers back to back: pages registered",
	    sum.dbl_b2b_pages[0], sum.dbl_b2b_pages[1], "", "<= 1");
	row("growth, 4 KiB x 10,000: registration calls", sum.lin_calls[0],
	    sum.lin_calls[1], "", "");
	row("growth, 4 KiB x 10,000: pages registered", sum.lin_pages[0],
	    sum.lin_pages[1], "", "<= 1");
	row("growth, 4 KiB x 10,000 (ns per step)", sum.lin_ns[0],
	    sum.lin_ns[1], "", "<= 0.9");
	if (sum.sim_cost)
		printf("| the simulated HCA's own cost per reg+dereg, above "
		       "the model (ns) | %.0f | - | - | |\n", sum.sim_cost);
}

/* ------------------------------------------------------------------ main */

static unsigned int parse_sections(const char *s)
{
	unsigned int m = 0;

	if (strstr(s, "hit"))
		m |= S_HIT;
	if (strstr(s, "miss"))
		m |= S_MISS;
	if (strstr(s, "growth"))
		m |= S_GROWTH;
	if (strstr(s, "unmap"))
		m |= S_UNMAP;
	return m;
}

static void usage(const char *argv0)
{
	fprintf(stderr,
		"usage: %s [--quick] [--reps N] [--ops N] [--only "
		"hit,miss,growth,unmap]\n"
		"          [--csv FILE] [--plot-data FILE]\n", argv0);
	exit(2);
}

int main(int argc, char **argv)
{
	self_path = argv[0];
	if (argc >= 2 && !strcmp(argv[1], "--unmap-child")) {
		if (argc != 6)
			return 2;
		return unmap_child(argv[2], strtoull(argv[3], NULL, 0),
				   strtoull(argv[4], NULL, 0), atoi(argv[5]));
	}
	for (int i = 1; i < argc; i++) {
		const char *a = argv[i];
		const char *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (!strcmp(a, "--quick")) {
			opt.quick = 1;
			opt.reps = 3;
			opt.ops = 300000;
			opt.miss_ops = 5000;
			opt.linear_steps = 2000;
			opt.unmap_iters = 5000;
		} else if (!strcmp(a, "--reps") && v) {
			opt.reps = atoi(v);
			i++;
		} else if (!strcmp(a, "--ops") && v) {
			opt.ops = strtoull(v, NULL, 0);
			i++;
		} else if (!strcmp(a, "--only") && v) {
			opt.sections = parse_sections(v);
			i++;
		} else if (!strcmp(a, "--regions") && v) {
			/* hit section: these region counts only */
			hit_set_sizes(v);
			i++;
		} else if (!strcmp(a, "--reg-ns") && v) {
			churn_cost.reg_ns = strtoull(v, NULL, 0);
			i++;
		} else if (!strcmp(a, "--reg-ns-per-page") && v) {
			churn_cost.reg_ns_per_page = strtoull(v, NULL, 0);
			i++;
		} else if (!strcmp(a, "--impl") && v) {
			/* one cache only (profiling) */
			size_t k = 0;

			while (k < ndrv && strcasecmp(drivers[k]->name, v))
				k++;
			if (k == ndrv) {
				fprintf(stderr, "compare: no cache named %s in "
						"this build\n", v);
				return 2;
			}
			drivers[0] = drivers[k];
			ndrv = 1;
			i++;
		} else if (!strcmp(a, "--threads") && v) {
			opt.max_threads = atoi(v) > 1 ? 2 : 1;
			i++;
		} else if (!strcmp(a, "--csv") && v) {
			opt.csv = v;
			i++;
		} else if (!strcmp(a, "--plot-data") && v) {
			opt.plot = v;
			i++;
		} else {
			usage(argv[0]);
		}
	}
	if (opt.reps < 1 || opt.reps > MAX_REPS || !opt.ops)
		usage(argv[0]);
	csv = fopen(opt.csv, "w");
	if (!csv)
		die(opt.csv, errno);
	fprintf(csv, "section,workload,param,threads,impl,metric,median,min,"
		     "max,reps\n");
	printf("# libmrmgr %s against %s\n", mrmgr_version_string(),
#ifdef HAVE_UCX
	       "UCX ucs_rcache " UCX_VERSION
#else
	       "nothing (UCX not found at configure time: libmrmgr alone)"
#endif
	);
	/* The unmap section first: its children must not inherit anything,
	 * and it measures the invalidation source libmrmgr picks itself. */
	if (opt.sections & S_UNMAP)
		section_unmap();
	/*
	 * libmrmgr runs in its default configuration throughout (the
	 * default is the product): whatever MRMGR_* the environment sets
	 * is reported, not added to.
	 */
	print_env();
	if (opt.sections & S_HIT)
		section_hit();
	if (opt.sections & S_MISS)
		section_miss();
	if (opt.sections & S_GROWTH)
		section_growth();
	print_summary();
	fclose(csv);
	printf("\nCSV: %s%s%s\n", opt.csv, opt.plot ? "; plot data: " : "",
	       opt.plot ? opt.plot : "");
	return 0;
}
