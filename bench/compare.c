/*
 * bench/compare: libmrmgr against UCX's ucs_rcache, on identical workloads
 * and the same registration cost, each cache in processes of its own.
 *
 *   make -C build bench-compare    (runs this, writes the CSV and the plot)
 *   build/bench/compare [--quick] [--reps N] [--ops N] [--only SECTIONS]
 *                       [--regions LIST] [--impl NAME] [--csv FILE]
 *                       [--plot-data FILE]
 *
 * Sections (--only hit,miss,growth,unmap; default all):
 *   hit     R regions of 64 KiB (R = 1 ... 100,000, 128 KiB apart so no
 *           cache merges them), all registered first; then get+put of one
 *           random 4 KiB page of a random region, by 1 and by 2 threads;
 *           and at 100,000 regions with the key read after each get.
 *   miss    10,000 distinct 64 KiB buffers, a limit of 1,000 regions,
 *           uniform random get+put: ~90% misses, each an eviction and a
 *           registration costing 10 us + 100 ns per page; the same at
 *           zero cost; 1, 2 and 4 threads on distinct buffers.
 *   growth  doubling 4 KiB -> 64 MiB (one buffer, 16 back to back) and
 *           4 KiB x 10,000 (bench/growth.c has libmrmgr's variants).
 *   unmap   munmap and free() of memory the cache holds and does not
 *           hold, against plain libc in a process without a cache.
 *
 * Why processes: UCX's libucm patches libc's memory entry points when its
 * rcache is created, and libmrmgr's default memory-event source (libc's
 * entry points patched in the process) then finds an unknown prologue and
 * steps aside. So the parent runs, per repetition (--reps, default 3),
 * one child per cache (this program re-executed with --child), the order
 * flipping every repetition, and prints medians; every libmrmgr row names
 * its memory-event source and is labelled "default" only when that is
 * the patched libc with no MRMGR_* set. Both caches register through a
 * busy-wait of the same cost model: UCX's callback, and for libmrmgr a
 * bench device on its public device seam (compare_dev.c).
 *
 * Files: compare.c (options, the processes), compare_hit.c,
 * compare_miss.c (the sections of one cache), compare_unmap.c,
 * compare_report.c (the tables), compare_mrmgr.c, compare_ucx.c (the two
 * caches behind struct drv_ops), compare_dev.c (the bench device).
 * doc/perf.md explains the method.
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
#include <sys/wait.h>
#include <unistd.h>

#include <mrmgr/mrmgr.h>

#include "compare.h"
#include "growth.h"

static const struct drv_ops *const all_drivers[NDRV_MAX] = {
	&mrmgr_drv,
#ifdef HAVE_UCX
	&ucx_drv,
#endif
};
const struct drv_ops *drivers[NDRV_MAX];
size_t ndrv;

extern char **environ;

struct options opt = {
	.max_threads = 2,
	.reps = 3,
	.ops = 1000000,
	.miss_ops = 20000,
	.linear_steps = GROWTH_LINEAR_STEPS,
	.unmap_iters = 20000,
	.sections = ~0u,
	.csv = "bench-compare.csv",
	.plot = "bench-compare-hit.dat",
};

enum { S_HIT = 1, S_MISS = 2, S_GROWTH = 4, S_UNMAP = 8 };

static char *self_path;
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


char *map_area(size_t len)
{
	char *p = mmap(NULL, len, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);

	if (p == MAP_FAILED)
		die("mmap", errno);
	return p;
}

struct cost_model churn_cost = { 10000, 100 };
struct result res;

void note_source(int sec, const struct drv_ops *ops, struct drv *d)
{
	snprintf(res.source[sec], sizeof(res.source[sec]), "%s",
		 ops->event_source(d));
	res.is_default[sec] = ops->is_default(d);
}

/* ---------------------------------------------------------- processes */

static char **child_argv; /* the options, for the children */
static int child_argc;

/* Run one cache's sections in a fresh process; its result in *r. */
static void run_child(const struct drv_ops *ops, struct result *r)
{
	int fds[2], status;
	pid_t pid;
	size_t got = 0;

	if (pipe(fds))
		die("pipe", errno);
	pid = fork();
	if (pid < 0)
		die("fork", errno);
	if (pid == 0) {
		char **av = calloc((size_t)child_argc + 6, sizeof(*av));
		char fd[16];
		int n = 0;

		close(fds[0]);
		snprintf(fd, sizeof(fd), "%d", fds[1]);
		av[n++] = self_path;
		for (int i = 1; i < child_argc; i++)
			av[n++] = child_argv[i];
		av[n++] = "--child";
		av[n++] = (char *)ops->name;
		av[n++] = "--result-fd";
		av[n++] = fd;
		execv(self_path, av);
		_exit(127);
	}
	close(fds[1]);
	while (got < sizeof(*r)) {
		ssize_t n = read(fds[0], (char *)r + got, sizeof(*r) - got);

		if (n <= 0)
			break;
		got += (size_t)n;
	}
	close(fds[0]);
	if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) ||
	    WEXITSTATUS(status) || got != sizeof(*r)) {
		fprintf(stderr, "compare: the %s child failed (status %d)\n",
			ops->name, status);
		exit(1);
	}
}

/* In the child: measure one cache, write the result. */
static int child_main(const char *impl, int fd)
{
	const struct drv_ops *ops = NULL;

	for (size_t k = 0; k < NDRV_MAX; k++)
		if (!strcasecmp(all_drivers[k]->name, impl))
			ops = all_drivers[k];
	if (!ops) {
		fprintf(stderr, "compare: no cache named %s in this build\n",
			impl);
		return 2;
	}
	memset(&res, 0, sizeof(res));
	if (opt.sections & S_HIT)
		section_hit(ops);
	if (opt.sections & S_MISS)
		section_miss(ops);
	if (opt.sections & S_GROWTH)
		section_growth(ops);
	if (fd >= 0 && write(fd, &res, sizeof(res)) != (ssize_t)sizeof(res))
		return 8;
	return 0;
}

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
		"          [--regions LIST] [--threads 1|2] [--no-key-rows]\n"
		"          [--impl NAME]\n"
		"          [--reg-ns NS] [--reg-ns-per-page NS]\n"
		"          [--csv FILE] [--plot-data FILE]\n"
		"       %s --child NAME [--result-fd FD] [options]  "
		"(one cache, one repetition, in this process)\n",
		argv0, argv0);
	exit(2);
}

int main(int argc, char **argv)
{
	const char *child = NULL, *only = NULL;
	static struct result runs[NDRV_MAX][MAX_REPS];
	const char *names[NDRV_MAX];
	int result_fd = -1;

	self_path = argv[0];
	child_argv = argv;
	child_argc = argc;
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
			only = v; /* one cache only */
			i++;
		} else if (!strcmp(a, "--child") && v) {
			child = v;
			i++;
		} else if (!strcmp(a, "--result-fd") && v) {
			result_fd = atoi(v);
			i++;
		} else if (!strcmp(a, "--no-key-rows")) {
			opt.no_key_rows = 1;
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
	if (child)
		return child_main(child, result_fd);
	for (size_t k = 0; k < NDRV_MAX; k++)
		if (!only || !strcasecmp(all_drivers[k]->name, only))
			drivers[ndrv++] = all_drivers[k];
	if (!ndrv) {
		fprintf(stderr, "compare: no cache named %s in this build\n",
			only);
		return 2;
	}
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
	/*
	 * libmrmgr runs in its default configuration throughout (the
	 * default is the product): whatever MRMGR_* the environment sets
	 * is reported, not added to.
	 */
	print_env();
	{
		double la[3];

		if (getloadavg(la, 3) == 3)
			printf("load average at the start: %.2f %.2f %.2f\n",
			       la[0], la[1], la[2]);
	}
	printf("each cache in processes of its own: %d repetitions, the "
	       "order flipped every repetition, medians\n", opt.reps);
	fflush(stdout);
	if (opt.sections & (S_HIT | S_MISS | S_GROWTH)) {
		for (int rep = 0; rep < opt.reps; rep++)
			for (size_t j = 0; j < ndrv; j++) {
				size_t k = rep & 1 ? ndrv - 1 - j : j;

				run_child(drivers[k], &runs[k][rep]);
			}
		for (size_t k = 0; k < ndrv; k++)
			names[k] = drivers[k]->name;
		report(names, ndrv, runs, opt.reps);
	}
	if (opt.sections & S_UNMAP)
		section_unmap(self_path);
	print_summary();
	{
		double la[3];

		if (getloadavg(la, 3) == 3)
			printf("\nload average at the end: %.2f %.2f %.2f\n",
			       la[0], la[1], la[2]);
	}
	fclose(csv);
	printf("\nCSV: %s%s%s\n", opt.csv, opt.plot ? "; plot data: " : "",
	       opt.plot ? opt.plot : "");
	return 0;
}
