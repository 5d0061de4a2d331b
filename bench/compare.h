/*
 * bench/compare: libmrmgr against UCX's ucs_rcache on the same workloads.
 * Shared declarations of the driver programs (compare.c, compare_mrmgr.c,
 * compare_ucx.c, compare_unmap.c).
 *
 * SPDX-License-Identifier: MIT
 */
#ifndef BENCH_COMPARE_H
#define BENCH_COMPARE_H

#include <stddef.h>
#include <stdint.h>
#include <time.h>

#define PG ((size_t)4096)
#define KiB ((size_t)1024)
#define MiB (1024 * KiB)

/* The registration cost model both caches pay: fixed + per 4 KiB page. */
struct cost_model {
	uint64_t reg_ns, reg_ns_per_page;
};

static inline uint64_t model_ns(const struct cost_model *m, size_t len)
{
	return m->reg_ns + m->reg_ns_per_page * ((len + PG - 1) / PG);
}

static inline double now_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

/*
 * Spin for ns, as the simulated HCA does (sim/sim_mr.c): the thread
 * stays busy for as long as a real registration would keep it.
 */
static inline void busy_wait_ns(uint64_t ns)
{
	struct timespec t0, t;

	if (!ns)
		return;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	do {
		clock_gettime(CLOCK_MONOTONIC, &t);
	} while ((uint64_t)(t.tv_sec - t0.tv_sec) * 1000000000u +
			 (uint64_t)(t.tv_nsec - t0.tv_nsec) < ns);
}

/* xorshift64*: a few cycles per number, the same stream for every cache. */
static inline uint64_t rng_next(uint64_t *s)
{
	uint64_t x = *s;

	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	*s = x;
	return x * 0x2545F4914F6CDD1DULL;
}

/* A uniform index below n from the high half of r (no division). */
static inline uint64_t rng_below(uint64_t r, uint64_t n)
{
	return ((r >> 32) * n) >> 32;
}

/* What a hit loop does: nops get+put of one random page of a region. */
struct hit_args {
	char *base;       /* region i starts at base + i * stride */
	size_t stride;
	size_t region_len;
	uint64_t nregions;
	uint64_t nops;
	uint64_t seed;
	int read_key;     /* read the region's lkey after each get */
	uint64_t sink;    /* the keys read, summed (kept from the optimiser) */
};

struct drv;

/* One cache under test. */
struct drv_ops {
	const char *name;
	/* Open with limits and the cost model; 0 or an errno. */
	int (*open)(struct drv **d, uint64_t max_regions, uint64_t max_bytes,
		    const struct cost_model *cost);
	void (*close)(struct drv *d);
	/* get: a handle for put, NULL on failure. */
	void *(*get)(struct drv *d, void *addr, size_t len);
	void (*put)(struct drv *d, void *h);
	/* Tell the cache the range is going away (before munmap), if it
	 * needs telling; NULL when its own event source covers it. */
	void (*invalidate)(struct drv *d, void *addr, size_t len);
	/* The hit loop, with direct calls (no function pointer per op). */
	void (*hit_loop)(struct drv *d, const struct hit_args *a);
	uint64_t (*registrations)(struct drv *d);
	uint64_t (*pages_registered)(struct drv *d);
	/* The memory-event source in force, for the report. */
	const char *(*event_source)(struct drv *d);
};

extern const struct drv_ops mrmgr_drv;

/*
 * The simulated HCA alone: n registrations + deregistrations of len bytes
 * at p under the cost model, each timed; the median in ns.
 */
double sim_reg_dereg_ns(const struct cost_model *cost, void *p, size_t len,
			int n);

/* qsort() order of doubles, ascending. */
int cmp_double(const void *a, const void *b);
#ifdef HAVE_UCX
extern const struct drv_ops ucx_drv;
/* UCX registering on the same simulated HCA as libmrmgr (miss section). */
extern const struct drv_ops ucx_sim_drv;
#endif

/*
 * The table, filled in by the sections and printed last: [0]
 * libmrmgr, [1] UCX; 0 when not measured.
 */
struct summary {
	double hit_key[2];         /* ns per get+lkey+put, 100,000 regions */
	double hit_nokey[2];       /* the same without the key read */
	double churn[2];           /* ns per op, 10 us + 100 ns/page */
	double churn_over[2];      /* ns above the model per miss */
	double churn_zero[2];      /* ns per op at zero registration cost */
	double churn_zero_sim;     /* the same, UCX on the simulated HCA */
	double miss_scale[2][3];   /* throughput of 2, 4 threads over 1 */
	double miss_cpu[2];        /* 2 threads' CPU time over wall time */
	double dbl_b2b_ns[2];      /* doubling, back to back: ns per step */
	double dbl_b2b_pages[2];
	double dbl_ns[2];          /* doubling, one buffer: ns per step */
	double dbl_pages[2];
	double lin_calls[2], lin_pages[2], lin_ns[2];
	double sim_cost;           /* the simulated HCA's own reg+dereg */
	const char *mrmgr_source;  /* memory-event source in force */
};
extern struct summary sum;

/* ------------------------------------------------------ compare.c */

#define REGION_LEN (64 * KiB)
#define STRIDE (128 * KiB) /* a gap after each region: nothing merges */
#define MAX_REPS 31

#ifdef HAVE_UCX
#define NDRV_MAX 2
#else
#define NDRV_MAX 1
#endif
extern const struct drv_ops *drivers[NDRV_MAX]; /* the caches compared */
extern size_t ndrv;

struct options {
	int reps;
	uint64_t ops;          /* hit ops per thread per repetition */
	uint64_t miss_ops;     /* miss-churn ops per repetition */
	size_t linear_steps;
	uint64_t unmap_iters;
	unsigned int sections;
	const char *csv, *plot;
	int quick;
	int max_threads;
};
extern struct options opt;

/* Repetitions of one measurement. */
struct samples {
	double v[MAX_REPS];
	int n;
};
void add(struct samples *s, double v);
double median(const struct samples *s);
double smin(const struct samples *s);
double smax(const struct samples *s);

/* A CSV row: the samples' median, min, max and count. */
void csv_row(const char *section, const char *workload,
	     unsigned long long param, int threads, const char *impl,
	     const char *metric, const struct samples *s);
void csv_value(const char *section, const char *workload,
	       unsigned long long param, int threads, const char *impl,
	       const char *metric, double v);

/* Exit with a message. */
void die(const char *what, int err) __attribute__((noreturn));
/* Anonymous read-write memory, not reserved (most is never touched). */
char *map_area(size_t len);

/* compare_hit.c: the hit section; --regions sets its region counts. */
void section_hit(void);
void hit_set_sizes(const char *list);

/* compare_unmap.c: the unmap section; run in child processes. */
struct unmap_result {
	double ns_pair;     /* mmap + munmap */
	double ns_get_pair; /* mmap + get + put + munmap */
	char source[96];    /* invalidation source in force */
};
/* In a child: measure impl ("raw", "libc", "libmrmgr", "ucx"). */
int unmap_child(const char *impl, uint64_t live, uint64_t iters, int fd);
/* In the parent: run the child by re-executing self; 0 or -1. */
int unmap_run(const char *self, const char *impl, uint64_t live,
	      uint64_t iters, struct unmap_result *res);

#endif /* BENCH_COMPARE_H */
