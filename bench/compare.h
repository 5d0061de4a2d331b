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
	/* The hit loop, calling the cache directly (no drv_ops per op). */
	void (*hit_loop)(struct drv *d, const struct hit_args *a);
	uint64_t (*registrations)(struct drv *d);
	uint64_t (*pages_registered)(struct drv *d);
	/* The memory-event source in force, for the report. */
	const char *(*event_source)(struct drv *d);
	/* Nonzero when the cache runs in its default configuration
	 * (libmrmgr: the patched libc watches it, no MRMGR_* set; UCX:
	 * its UCM hooks deliver unmap events). */
	int (*is_default)(struct drv *d);
	/* Gets served uncached because no source watched the range. */
	uint64_t (*unwatched)(struct drv *d);
};

extern const struct drv_ops mrmgr_drv;
#ifdef HAVE_UCX
extern const struct drv_ops ucx_drv;
#endif

/* compare_dev.c: the bench device on libmrmgr's device seam. */
struct ibv_pd;
int bdev_open(const struct cost_model *cost, struct ibv_pd **pd);
/* Both caches' device work per registration (compare_dev.c). */
struct ibv_mr *bench_mr_make(const struct cost_model *cost, uint64_t *regs,
			     uint64_t *pages, uint32_t *next_key, void *addr,
			     size_t len);
void bench_mr_drop(struct ibv_mr *mr);
void bdev_close(struct ibv_pd *pd);
/* Registration calls (reg + translation-changing rereg) and pages. */
void bdev_counts(struct ibv_pd *pd, uint64_t *regs, uint64_t *pages);

/*
 * The simulated HCA alone: n registrations + deregistrations of len bytes
 * at p at zero modelled cost, in its default flags or with
 * MRMGR_SIM_FLAG_NO_PIN, each timed; the median in ns.
 */
double sim_reg_dereg_ns(void *p, size_t len, int n, int no_pin);

/* qsort() order of doubles, ascending. */
int cmp_double(const void *a, const void *b);

/* ------------------------------------------------------ compare.c */

#define REGION_LEN (64 * KiB)
#define STRIDE (128 * KiB) /* a gap after each region: nothing merges */
#define MAX_REPS 31
#define NSIZES_MAX 6

#ifdef HAVE_UCX
#define NDRV_MAX 2
#else
#define NDRV_MAX 1
#endif
extern const struct drv_ops *drivers[NDRV_MAX]; /* the caches compared */
extern size_t ndrv;

/* Sections that run in the per-cache child processes. */
enum { SEC_HIT, SEC_MISS, SEC_GROWTH, NSEC };

/*
 * What one child process measured for one cache (one repetition). The
 * parent takes the median of each field over the repetitions.
 */
struct result {
	/* the memory-event source in force, per section */
	char source[NSEC][96];
	int is_default[NSEC]; /* libmrmgr: patched libc, no MRMGR_* set */
	double hit[NSIZES_MAX][2];     /* ns per get+put per thread, 1 / 2 */
	double hit_cpu[NSIZES_MAX];    /* 2 threads' CPU time over wall */
	double hit_key, hit_nokey;     /* 100,000 regions, 1 thread */
	double churn, churn_over, churn_regs; /* 10 us + 100 ns/page */
	double churn_zero, churn_zero_miss;   /* zero cost: per op, per miss */
	double miss_tput[3], miss_cpu[3];     /* 1, 2, 4 threads */
	double dbl_calls, dbl_pages, dbl_ns;  /* doubling, one buffer */
	double b2b_calls, b2b_pages, b2b_ns;  /* doubling, 16 back to back */
	double lin_calls, lin_pages, lin_ns;  /* 4 KiB x N */
	double sim_cost[2];   /* libmrmgr child only: default, NO_PIN */
	double unwatched;                     /* gets served uncached */
	/* At the zero-cost churn: 1 when the process had never been
	 * threaded (glibc's __libc_single_threaded), 0 when it had, -1
	 * unknown. */
	double churn_single;
};
extern struct result res; /* the child's */

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
	int no_key_rows;       /* hit: leave out the key-read rows */
};
extern struct options opt;
extern struct cost_model churn_cost;

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

/* Exit with a message. */
void die(const char *what, int err) __attribute__((noreturn));
/* Anonymous read-write memory, not reserved (most is never touched). */
char *map_area(size_t len);
/* The source string of a driver's cache into res.source[sec]. */
void note_source(int sec, const struct drv_ops *ops, struct drv *d);

/* compare_hit.c: the hit section of one cache; --regions sets its sizes. */
void section_hit(const struct drv_ops *ops);
void hit_set_sizes(const char *list);
extern uint64_t hit_sizes[NSIZES_MAX];
extern size_t nsizes;
int hit_in_table(uint64_t r);

/* compare_miss.c: the miss and growth sections of one cache. */
void section_miss(const struct drv_ops *ops);
void section_growth(const struct drv_ops *ops);

/* compare_report.c: the parent's tables from the children's results. */
void report(const char *const *names, size_t nimpl,
	    struct result (*runs)[MAX_REPS], int reps);

/* compare_unmap.c: the unmap section; each figure from a fresh process. */
struct unmap_result {
	double pair_mmap;   /* mmap + munmap through libc, memory not held */
	double pair_raw;    /* the same through syscall(), interleaved */
	double munmap_held; /* munmap through libc of memory the cache holds */
	double munmap_raw;  /* raw munmap of memory not held, interleaved */
	double free_held;   /* free of an mmap'd chunk the cache holds */
	double free_cold;   /* free of one it does not hold, interleaved */
	double pair_malloc; /* malloc + free of an mmap'd chunk, not held */
	char source[96];    /* invalidation source in force */
	int is_default;
};
/* In a child: measure impl ("libc", "libmrmgr", "ucx"). */
int unmap_child(const char *impl, uint64_t live, uint64_t iters, int fd);
/* The whole section: children alternating, medians, the table; the
 * medians of libc, libmrmgr, UCX in unmap_med[] for the summary. */
void section_unmap(const char *self);
extern struct unmap_result unmap_med[3];
extern int unmap_measured;
/* compare_report.c: the summary table, last. */
void print_summary(void);

#endif /* BENCH_COMPARE_H */
