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
			double sum = 0;
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
				sum += t[i];
			for (uint64_t i = 0; i < opt.miss_ops; i++)
				nmiss += t[i] > model / 2;
			add(&ns[k], sum / (double)keep);
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
	fflush(stdout);
	munmap(base, CHURN_BUFFERS * STRIDE);
}

/* ---------------------------------------------------------------- growth */


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
			if (ops->invalidate)
				ops->invalidate(d, mem, 2 * final);
			ops->close(d);
		}
		munmap(mem, 2 * final);
	}
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
	 * Elsewhere libmrmgr is told that the application reports unmaps
	 * (as UCX's hooks report them to its rcache), unless MRMGR_MONITOR
	 * says otherwise: a kernel-watched range per region would measure
	 * the watch, and 100,000 of them exceed vm.max_map_count. Builds
	 * without the memory-event monitor ignore the variable.
	 */
	setenv("MRMGR_MONITOR", "external", 0);
	if (opt.sections & S_HIT)
		section_hit();
	if (opt.sections & S_MISS)
		section_miss();
	if (opt.sections & S_GROWTH)
		section_growth();
	fclose(csv);
	printf("\nCSV: %s%s%s\n", opt.csv, opt.plot ? "; plot data: " : "",
	       opt.plot ? opt.plot : "");
	return 0;
}
