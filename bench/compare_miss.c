/*
 * bench/compare: the miss and growth sections of one cache, in its own
 * process (compare.c runs the caches alternately and takes medians).
 *
 * miss    10,000 distinct 64 KiB buffers, a limit of 1,000 regions,
 *         uniform random get+put: ~90% misses, each an eviction and a
 *         registration costing 10 us + 100 ns per page; the same at zero
 *         cost (what a miss costs beyond its registration); misses from
 *         1, 2 and 4 threads on distinct buffers.
 * growth  one buffer grown by doubling 4 KiB -> 64 MiB, 16 such buffers
 *         back to back in one mapping, and one grown 4 KiB at a time.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#if defined(__has_include)
#if __has_include(<sys/single_threaded.h>)
#include <sys/single_threaded.h>
#define HAVE_SINGLE_THREADED 1
#endif
#endif

#include "compare.h"
#include "growth.h"

static const struct cost_model growth_cost = { GROWTH_REG_NS,
					       GROWTH_REG_NS_PER_PAGE };

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
 * One churn run under cost: ns per op (the mean without the slowest 1%,
 * preemption on a busy machine), registrations per op, and the median
 * miss's time above the model (a miss: an op slower than half of it).
 */
static void churn_run(const struct drv_ops *ops, char *base,
		      const struct cost_model *cost, double *t, double *ns,
		      double *regs_per_op, double *over)
{
	double model = (double)model_ns(cost, REGION_LEN), tot = 0;
	uint64_t seed = 12345, r0, nmiss = 0;
	uint64_t keep = opt.miss_ops - opt.miss_ops / 100;
	struct drv *d;
	int ret = ops->open(&d, CHURN_LIMIT, (uint64_t)1 << 50, cost);

	if (ret)
		die(ops->name, ret);
	if (cost->reg_ns)
		note_source(SEC_MISS, ops, d);
	churn(ops, d, base, 3 * CHURN_LIMIT, &seed, NULL); /* fill */
	r0 = ops->registrations(d);
	churn(ops, d, base, opt.miss_ops, &seed, t);
	r0 = ops->registrations(d) - r0;
	res.unwatched += (double)ops->unwatched(d);
	ops->close(d);
	qsort(t, opt.miss_ops, sizeof(*t), cmp_double);
	for (uint64_t i = 0; i < keep; i++)
		tot += t[i];
	*ns = tot / (double)keep;
	*regs_per_op = (double)r0 / (double)opt.miss_ops;
	if (over) {
		for (uint64_t i = 0; i < opt.miss_ops; i++)
			nmiss += t[i] > model / 2;
		/* the median miss: misses are the slowest nmiss ops */
		*over = nmiss ? t[opt.miss_ops - (nmiss + 1) / 2] - model : 0;
	}
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
 * all threads' ops over the wall time; the threads' CPU time over it.
 */
static void miss_threads(const struct drv_ops *ops, char *base)
{
	static const int nth[3] = { 1, 2, 4 };
	uint64_t per = opt.miss_ops / 4;

	for (int ti = 0; ti < 3; ti++) {
		int n = nth[ti];
		struct miss_thread m[4];
		pthread_t tid[4];
		pthread_barrier_t bar;
		uint64_t share = CHURN_BUFFERS / (uint64_t)n;
		double lo = 0, hi = 0, cpu = 0;
		struct drv *d;
		int ret = ops->open(&d, CHURN_LIMIT, (uint64_t)1 << 50,
				    &churn_cost);

		if (ret)
			die(ops->name, ret);
		pthread_barrier_init(&bar, NULL, (unsigned int)n);
		for (int i = 0; i < n; i++) {
			m[i] = (struct miss_thread){
				.ops = ops, .d = d, .bar = &bar,
				.base = base + (uint64_t)i * share * STRIDE,
				.nbuf = share, .nops = per,
				.seed = 99 + (uint64_t)i,
			};
			if (pthread_create(&tid[i], NULL, miss_thread_main, &m[i]))
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
		res.unwatched += (double)ops->unwatched(d);
		ops->close(d);
		res.miss_tput[ti] = (double)(per * (uint64_t)n) / (hi - lo) * 1e9;
		res.miss_cpu[ti] = cpu / (hi - lo);
	}
}

/*
 * Whether the process has never been threaded. glibc then runs its own
 * locks (a mutex, malloc's arena) without bus-locked instructions. A
 * UCX child is threaded by UCX itself (ucs_rcache_create() starts
 * ucs_async's event thread), so the zero-cost row compares like with
 * like only once libmrmgr's child has been threaded too: make bench's
 * order, where the hit section's threads ran first.
 */
static double single_threaded(void)
{
#ifdef HAVE_SINGLE_THREADED
	return __libc_single_threaded ? 1 : 0;
#else
	return -1;
#endif
}

void section_miss(const struct drv_ops *ops)
{
	static const struct cost_model zero = { 0, 0 };
	char *base = map_area(CHURN_BUFFERS * STRIDE);
	double *t = calloc(opt.miss_ops, sizeof(*t)), regs;

	if (!t)
		die("calloc", ENOMEM);
	churn_run(ops, base, &churn_cost, t, &res.churn, &res.churn_regs,
		  &res.churn_over);
	res.churn_single = single_threaded();
	churn_run(ops, base, &zero, t, &res.churn_zero, &regs, NULL);
	/* All the time over the misses: a miss's whole cost, the hits'
	 * share (about 1%) included. */
	res.churn_zero_miss = regs > 0 ? res.churn_zero / regs : 0;
	free(t);
	miss_threads(ops, base);
	if (ops == &mrmgr_drv) {
		/* The simulated HCA's own cost: in the default flags (pages
		 * held, shared MR table) and with MRMGR_SIM_FLAG_NO_PIN. */
		res.sim_cost[0] = sim_reg_dereg_ns(base, REGION_LEN, 2000, 0);
		res.sim_cost[1] = sim_reg_dereg_ns(base, REGION_LEN, 2000, 1);
	}
	munmap(base, CHURN_BUFFERS * STRIDE);
}

/*
 * Grow nbufs buffers laid back to back (each final bytes apart) by the
 * pattern, steps interleaved (every buffer's step i, then step i + 1): a
 * buffer grown to its end touches the next one, which a cache that
 * merges or widens past the caller's buffer swallows. Registration calls
 * and pages as the device counted them, ns per step.
 */
static void grow(const struct drv_ops *ops, int doubling, size_t steps,
		 size_t nbufs, double *calls, double *pages, double *ns)
{
	size_t final = growth_size_at(doubling, steps);
	size_t span = nbufs * final + (nbufs == 1 ? final : 0);
	char *mem = map_area(span);
	struct drv *d;
	double t0;
	int ret = ops->open(&d, 1u << 20, (uint64_t)1 << 50, &growth_cost);

	if (ret)
		die(ops->name, ret);
	if (doubling && nbufs == 1)
		note_source(SEC_GROWTH, ops, d);
	t0 = now_ns();
	for (size_t i = 1; i <= steps; i++)
		for (size_t b = 0; b < nbufs; b++) {
			void *h = ops->get(d, mem + b * final,
					   growth_size_at(doubling, i));

			if (!h)
				die("growth get", EIO);
			ops->put(d, h);
		}
	*ns = (now_ns() - t0) / (double)(steps * nbufs);
	*calls = (double)ops->registrations(d);
	*pages = (double)ops->pages_registered(d);
	res.unwatched += (double)ops->unwatched(d);
	if (ops->invalidate)
		ops->invalidate(d, mem, span);
	ops->close(d);
	munmap(mem, span);
}

/* The doubling rows take milliseconds: the median of 3 runs. */
static void grow3(const struct drv_ops *ops, size_t nbufs, double *calls,
		  double *pages, double *ns)
{
	struct samples s = { .n = 0 };

	for (int i = 0; i < 3; i++) {
		grow(ops, 1, GROWTH_DOUBLING_STEPS, nbufs, calls, pages, ns);
		add(&s, *ns);
	}
	*ns = median(&s);
}

void section_growth(const struct drv_ops *ops)
{
	grow3(ops, 1, &res.dbl_calls, &res.dbl_pages, &res.dbl_ns);
	grow3(ops, 16, &res.b2b_calls, &res.b2b_pages, &res.b2b_ns);
	grow(ops, 0, opt.linear_steps, 1, &res.lin_calls, &res.lin_pages,
	     &res.lin_ns);
}
