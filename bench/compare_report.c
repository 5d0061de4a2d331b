/*
 * bench/compare: the tables, from the children's results. Every field is
 * the median over the repetitions; every libmrmgr row names the
 * memory-event source that was in force, and the libmrmgr column is
 * called "default" only when every child ran with the patched libc and
 * no MRMGR_* variable.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "compare.h"
#include "growth.h"

/* Medians per cache: [M] libmrmgr, [U] UCX (when there). */
enum { M, U };
static struct result med[2];
static int have[2];
/*
 * The zero-cost miss's ratio paired by repetition: each repetition runs
 * the two caches' children one after the other (a second or so), so a
 * shared machine's slow spells, which last seconds, fall on both; the
 * medians of each side alone may come from different spells. 0: not
 * measured.
 */
static double zero_pair_ratio;
static const char *sec_name[NSEC] = { "hit", "miss", "growth" };

/* The numeric fields of struct result: doubles from .hit to the end. */
#define FIRST offsetof(struct result, hit)
#define NFIELDS ((sizeof(struct result) - FIRST) / sizeof(double))

static double *field(struct result *r, size_t i)
{
	return (double *)((char *)r + FIRST) + i;
}

static void medians(struct result *out, struct result *runs, int reps)
{
	memcpy(out, &runs[0], sizeof(*out));
	for (int sec = 0; sec < NSEC; sec++)
		for (int r = 1; r < reps; r++) {
			out->is_default[sec] &= runs[r].is_default[sec];
			if (strcmp(runs[r].source[sec], out->source[sec]))
				snprintf(out->source[sec], sizeof(out->source[sec]),
					 "varied between repetitions");
		}
	for (size_t i = 0; i < NFIELDS; i++) {
		struct samples s = { .n = 0 };

		for (int r = 0; r < reps; r++)
			add(&s, *field(&runs[r], i));
		*field(out, i) = median(&s);
	}
}

/* A CSV row of one field over the repetitions. */
static void csv_field(struct result *runs, int reps, size_t off,
		      const char *section, const char *workload,
		      unsigned long long param, int threads, const char *impl,
		      const char *metric)
{
	struct samples s = { .n = 0 };

	for (int r = 0; r < reps; r++)
		add(&s, *(double *)((char *)&runs[r] + off));
	csv_row(section, workload, param, threads, impl, metric, &s);
}

#define CSV(f, ...) csv_field(runs[k], reps, offsetof(struct result, f), __VA_ARGS__)

static const char *mrmgr_label(int sec)
{
	return med[M].is_default[sec] ? "libmrmgr default"
				      : "libmrmgr NOT DEFAULT";
}

static void sources(const char *const *names, size_t nimpl)
{
	printf("\n## memory-event source in force, per section\n\n"
	       "| section | cache | source | default configuration |\n"
	       "|---|---|---|---|\n");
	for (int sec = 0; sec < NSEC; sec++)
		for (size_t k = 0; k < nimpl; k++)
			if (med[k].source[sec][0])
				printf("| %s | %s | %s | %s |\n", sec_name[sec],
				       names[k], med[k].source[sec],
				       med[k].is_default[sec] ? "yes" : "NO");
	if (have[M] && med[M].unwatched)
		printf("\nlibmrmgr served %.0f gets uncached (no source "
		       "watched the range): its figures are not a cache's\n",
		       med[M].unwatched);
}

static void hit_tables(const char *const *names, size_t nimpl,
		       struct result (*runs)[MAX_REPS], int reps)
{
	FILE *plot = opt.plot ? fopen(opt.plot, "w") : NULL;

	printf("\n## hit: get+put of a random 4 KiB page of one of R 64 KiB "
	       "regions\n\n%llu ops per thread, ns per get+put per thread; "
	       "CPU = 2 threads' CPU time over wall time (2.00: side by "
	       "side; less: the machine was busy)\n\n"
	       "| regions | threads | %s | UCX | ratio | CPU (libmrmgr, UCX) |\n"
	       "|---:|---:|---:|---:|---:|---|\n",
	       (unsigned long long)opt.ops, mrmgr_label(SEC_HIT));
	if (plot)
		fprintf(plot, "# regions mrmgr_1t ucx_1t mrmgr_2t ucx_2t "
			      "(ns per get+put per thread, medians)\n");
	for (size_t si = 0; si < nsizes; si++) {
		if (opt.quick && !hit_in_table(hit_sizes[si]))
			continue;
		for (int th = 1; th <= opt.max_threads; th++) {
			double m = med[M].hit[si][th - 1], u = med[U].hit[si][th - 1];

			printf("| %llu | %d | %.1f | ", (unsigned long long)hit_sizes[si],
			       th, m);
			if (have[U])
				printf("%.1f | %.2f | ", u, m / u);
			else
				printf("- | - | ");
			if (th == 2)
				printf("%.2f, %.2f |\n", med[M].hit_cpu[si],
				       med[U].hit_cpu[si]);
			else
				printf("- |\n");
		}
		for (size_t k = 0; k < nimpl; k++)
			for (int th = 1; th <= opt.max_threads; th++)
				CSV(hit[si][th - 1], "hit", "random-page",
				    hit_sizes[si], th, names[k],
				    "ns_per_op_per_thread");
		if (plot)
			fprintf(plot, "%llu %.2f %.2f %.2f %.2f\n",
				(unsigned long long)hit_sizes[si],
				med[M].hit[si][0], med[U].hit[si][0],
				med[M].hit[si][1], med[U].hit[si][1]);
	}
	if (plot)
		fclose(plot);
	if (opt.no_key_rows)
		return;
	printf("\n### with the key read (get + lkey + put), 100,000 regions, "
	       "1 thread\n\n| cache | ns per get+put | ns per get+lkey+put |\n"
	       "|---|---:|---:|\n");
	for (size_t k = 0; k < nimpl; k++) {
		printf("| %s | %.1f | %.1f |\n", names[k], med[k].hit_nokey,
		       med[k].hit_key);
		CSV(hit_key, "hit", "random-page-lkey", 100000, 1, names[k],
		    "ns_per_op_per_thread");
	}
}

static void miss_tables(const char *const *names, size_t nimpl,
			struct result (*runs)[MAX_REPS], int reps)
{
	printf("\n## miss churn: 10,000 buffers of 64 KiB, at most 1,000 "
	       "regions, uniform random get+put\n\n"
	       "%llu ops; ns per op = the mean without the slowest 1%%; a miss "
	       "is an op slower than half the model (%llu ns + %llu ns/page), "
	       "above model = the median miss minus the model;\nat zero "
	       "registration cost, ns per miss = all the time over the "
	       "registrations (what the cache adds to a registration)\n\n"
	       "| cache | ns per op | registrations per op | ns above model "
	       "per miss | zero cost: ns per op | zero cost: ns per miss |\n"
	       "|---|---:|---:|---:|---:|---:|\n",
	       (unsigned long long)opt.miss_ops,
	       (unsigned long long)churn_cost.reg_ns,
	       (unsigned long long)churn_cost.reg_ns_per_page);
	for (size_t k = 0; k < nimpl; k++) {
		printf("| %s | %.0f | %.3f | %.0f | %.0f | %.0f |\n", names[k],
		       med[k].churn, med[k].churn_regs, med[k].churn_over,
		       med[k].churn_zero, med[k].churn_zero_miss);
		CSV(churn, "miss", "churn", 1000, 1, names[k], "ns_per_op");
		CSV(churn_regs, "miss", "churn", 1000, 1, names[k],
		    "registrations_per_op");
		CSV(churn_over, "miss", "churn", 1000, 1, names[k],
		    "ns_above_model_per_miss");
		CSV(churn_zero, "miss", "churn-zero-cost", 1000, 1, names[k],
		    "ns_per_op");
		CSV(churn_zero_miss, "miss", "churn-zero-cost", 1000, 1,
		    names[k], "ns_per_miss");
	}
	printf("\n### misses from several threads on distinct buffers\n\n"
	       "throughput in ops/s; scaling = over 1 thread's; CPU = the "
	       "threads' CPU time over wall time (the busy-wait is CPU time: "
	       "2.0 for 2 threads side by side)\n\n"
	       "| cache | 1 thread | 2 threads | 4 threads | scaling 2 | "
	       "scaling 4 | CPU 1 / 2 / 4 |\n|---|---:|---:|---:|---:|---:|---|\n");
	for (size_t k = 0; k < nimpl; k++) {
		const double *t = med[k].miss_tput, *c = med[k].miss_cpu;

		printf("| %s | %.0f | %.0f | %.0f | %.2f | %.2f | %.2f / %.2f / "
		       "%.2f |\n", names[k], t[0], t[1], t[2], t[1] / t[0],
		       t[2] / t[0], c[0], c[1], c[2]);
		for (int ti = 0; ti < 3; ti++)
			CSV(miss_tput[ti], "miss", "threads-distinct", 1000,
			    1 << ti, names[k], "ops_per_s");
	}
	printf("\nthe process at the zero-cost churn:");
	for (size_t k = 0; k < nimpl; k++)
		printf(" %s %s;", names[k],
		       med[k].churn_single > 0	 ? "never threaded"
		       : med[k].churn_single == 0 ? "threaded before"
						  : "unknown");
	printf(" a process never threaded runs glibc's locks without "
	       "bus-locked instructions, and UCX's rcache starts a thread of "
	       "its own (ucs_async): the row compares like with like after "
	       "the hit section's threads (make bench's order)\n");
	if (have[M] && med[M].sim_cost[0])
		printf("\nthe simulated HCA's own reg + dereg of 64 KiB at zero "
		       "modelled cost: %.0f ns (default flags), %.0f ns "
		       "(MRMGR_SIM_FLAG_NO_PIN)\n", med[M].sim_cost[0],
		       med[M].sim_cost[1]);
}

static void growth_tables(const char *const *names, size_t nimpl,
			  struct result (*runs)[MAX_REPS], int reps)
{
	printf("\n## growth: get+put of the whole buffer at each step, "
	       "10 us + 100 ns/page\n\nregistration calls and pages as the "
	       "device counted them (libmrmgr: reg + rereg that changed the "
	       "translation)\n\n| pattern | cache | registrations | pages "
	       "registered | ns per step |\n|---|---|---:|---:|---:|\n");
	for (size_t k = 0; k < nimpl; k++) {
		const struct result *r = &med[k];

		printf("| doubling 4 KiB -> 64 MiB, one buffer | %s | %.0f | %.0f "
		       "| %.0f |\n", names[k], r->dbl_calls, r->dbl_pages,
		       r->dbl_ns);
		printf("| doubling, 16 buffers back to back | %s | %.0f | %.0f "
		       "| %.0f |\n", names[k], r->b2b_calls, r->b2b_pages,
		       r->b2b_ns);
		printf("| 4 KiB x %zu | %s | %.0f | %.0f | %.0f |\n",
		       opt.linear_steps, names[k], r->lin_calls, r->lin_pages,
		       r->lin_ns);
		CSV(dbl_pages, "growth", "doubling", 1, 1, names[k], "pages");
		CSV(dbl_ns, "growth", "doubling", 1, 1, names[k], "ns_per_step");
		CSV(b2b_pages, "growth", "doubling-back-to-back", 16, 1,
		    names[k], "pages");
		CSV(b2b_ns, "growth", "doubling-back-to-back", 16, 1, names[k],
		    "ns_per_step");
		CSV(lin_calls, "growth", "linear", opt.linear_steps, 1,
		    names[k], "registrations");
		CSV(lin_pages, "growth", "linear", opt.linear_steps, 1,
		    names[k], "pages");
		CSV(lin_ns, "growth", "linear", opt.linear_steps, 1, names[k],
		    "ns_per_step");
	}
}

void report(const char *const *names, size_t nimpl,
	    struct result (*runs)[MAX_REPS], int reps)
{
	size_t kk[2] = { 0, 0 };

	for (size_t k = 0; k < nimpl; k++) {
		int u = !strcmp(names[k], "UCX");

		medians(&med[u], runs[k], reps);
		have[u] = 1;
		kk[u] = k;
	}
	if (have[M] && have[U]) {
		struct samples s = { .n = 0 };

		for (int r = 0; r < reps; r++)
			if (runs[kk[U]][r].churn_zero_miss > 0)
				add(&s, runs[kk[M]][r].churn_zero_miss /
						runs[kk[U]][r].churn_zero_miss);
		zero_pair_ratio = s.n ? median(&s) : 0;
	}
	/* Print the tables with libmrmgr first, UCX second. */
	names = (const char *const[]){ "libmrmgr", "UCX" };
	if (!have[M]) {
		printf("\n(libmrmgr was not run: --impl)\n");
		return;
	}
	nimpl = have[U] ? 2 : 1;
	{
		struct result (*r)[MAX_REPS] = runs;

		sources(names, nimpl);
		if (opt.sections & (1u << SEC_HIT))
			hit_tables(names, nimpl, r, reps);
		if (opt.sections & (1u << SEC_MISS))
			miss_tables(names, nimpl, r, reps);
		if (opt.sections & (1u << SEC_GROWTH))
			growth_tables(names, nimpl, r, reps);
	}
	fflush(stdout);
}

/* ------------------------------------------------------------- summary */

/* A target is only met or not in the default configuration. */
static const char *verdict(int met, int is_default)
{
	if (met < 0)
		return "";
	if (!is_default)
		return "not the default: no verdict";
	return met ? "met" : "NOT met";
}

static const char *source_cell(const char *source, int is_default)
{
	static char buf[160];

	snprintf(buf, sizeof(buf), "%s%s", source,
		 is_default ? " (default)" : " (NOT DEFAULT)");
	return buf;
}

static void unmap_row(const char *what, double m, double u, double target)
{
	const struct unmap_result *um = &unmap_med[1];
	char ucx[32] = "-";

	if (unmap_med[2].pair_mmap)
		snprintf(ucx, sizeof(ucx), "%.0f", u);
	printf("| %s | %.0f | %s | | libmrmgr <= %.0f | %s | %s |\n", what, m,
	       ucx, target, verdict(m <= target, um->is_default),
	       source_cell(um->source, um->is_default));
}

/* A figure: whole numbers from 100 up, three significant digits below. */
static const char *fig(char *buf, size_t n, double v)
{
	snprintf(buf, n, v >= 100 || v <= -100 ? "%.0f" : "%.3g", v);
	return buf;
}

static void row(const char *what, int sec, double m, double u,
		const char *target, int met)
{
	char a[32], b[32];

	/* Sections not run (--only), and rows not measured. */
	if ((sec >= 0 && !(opt.sections & (1u << sec))) || (!m && !u))
		return;
	printf("| %s | %s | ", what, fig(a, sizeof(a), m));
	if (u)
		printf("%s | %.2f | ", fig(b, sizeof(b), u), m / u);
	else
		printf("- | - | ");
	printf("%s | %s | %s |\n", target, verdict(met, sec < 0 || med[M].is_default[sec]),
	       sec < 0 ? "" : source_cell(med[M].source[sec], med[M].is_default[sec]));
}

#define RATIO(f, lim) (med[U].f > 0 && med[M].f / med[U].f <= (lim))

void print_summary(void)
{
	const struct result *m = &med[M], *u = &med[U];
	const struct unmap_result *ul = &unmap_med[0], *um = &unmap_med[1],
				  *uu = &unmap_med[2];

	printf("\n## summary (medians; ratio = libmrmgr / UCX)\n\n"
	       "| workload | libmrmgr | UCX | ratio | target | | libmrmgr "
	       "source (default?) |\n|---|---:|---:|---:|---|---|---|\n");
	if (have[M]) {
		const char *h[3] = { "hit, 1 thread, 1 region (ns)",
				     "hit, 1 thread, 1,000 regions (ns)",
				     "hit, 1 thread, 100,000 regions (ns)" };
		const uint64_t hr[3] = { 1, 1000, 100000 };

		for (int j = 0; j < 3; j++)
			for (size_t si = 0; si < nsizes; si++)
				if (hit_sizes[si] == hr[j])
					row(h[j], SEC_HIT, m->hit[si][0],
					    u->hit[si][0], "<= 0.5",
					    have[U] ? u->hit[si][0] > 0 &&
							      m->hit[si][0] / u->hit[si][0] <= 0.5
						    : -1);
		row("hit with the key read, 100,000 regions (ns)", SEC_HIT,
		    m->hit_key, u->hit_key, "<= 0.5",
		    have[U] ? RATIO(hit_key, 0.5) : -1);
		row("miss churn, 10,000 x 64 KiB, 1,000 cached, 10 us + 100 "
		    "ns/page (ns per op)", SEC_MISS, m->churn, u->churn,
		    "<= 0.9", have[U] ? RATIO(churn, 0.9) : -1);
		row("miss churn at zero registration cost (ns per miss)",
		    SEC_MISS, m->churn_zero_miss, u->churn_zero_miss,
		    "libmrmgr <= 1,000", m->churn_zero_miss <= 1000);
		if (zero_pair_ratio > 0 && (opt.sections & (1u << SEC_MISS)))
			printf("|   (the same: the median of each repetition's "
			       "ratio, its two children run back to back) | | "
			       "| %.2f | | | |\n", zero_pair_ratio);
		if ((opt.sections & (1u << SEC_MISS)) && have[U] &&
		    m->churn_single != u->churn_single)
			printf("|   (NOT like with like: libmrmgr's process had "
			       "%s threaded, UCX's %s) | | | | | | |\n",
			       m->churn_single > 0 ? "never been" : "been",
			       u->churn_single > 0 ? "had never been"
						   : "had been");
		row("misses from 2 threads: throughput over 1 thread's",
		    SEC_MISS, m->miss_tput[1] / m->miss_tput[0],
		    have[U] ? u->miss_tput[1] / u->miss_tput[0] : 0, ">= 1.8",
		    m->miss_tput[1] / m->miss_tput[0] >= 1.8);
		row("  (2 threads' CPU time over wall time; 2.0 = side by side)",
		    SEC_MISS, m->miss_cpu[1], u->miss_cpu[1], "", -1);
		row("misses from 4 threads: throughput over 1 thread's",
		    SEC_MISS, m->miss_tput[2] / m->miss_tput[0],
		    have[U] ? u->miss_tput[2] / u->miss_tput[0] : 0,
		    ">= 2 threads'", m->miss_tput[2] >= m->miss_tput[1]);
		row("growth, doubling 4 KiB -> 64 MiB, one buffer: pages",
		    SEC_GROWTH, m->dbl_pages, u->dbl_pages, "<= 1",
		    have[U] ? RATIO(dbl_pages, 1) : -1);
		row("growth, doubling, one buffer (ns per step)", SEC_GROWTH,
		    m->dbl_ns, u->dbl_ns, "<= 0.9",
		    have[U] ? RATIO(dbl_ns, 0.9) : -1);
		row("growth, doubling, 16 buffers back to back: pages",
		    SEC_GROWTH, m->b2b_pages, u->b2b_pages, "<= 1",
		    have[U] ? RATIO(b2b_pages, 1) : -1);
		row("growth, doubling, 16 buffers back to back (ns per step)",
		    SEC_GROWTH, m->b2b_ns, u->b2b_ns, "<= 0.9",
		    have[U] ? RATIO(b2b_ns, 0.9) : -1);
		row("growth, 4 KiB steps: registration calls", SEC_GROWTH,
		    m->lin_calls, u->lin_calls, "", -1);
		row("growth, 4 KiB steps: pages registered", SEC_GROWTH,
		    m->lin_pages, u->lin_pages, "<= 1",
		    have[U] ? RATIO(lin_pages, 1) : -1);
		row("growth, 4 KiB steps (ns per step)", SEC_GROWTH, m->lin_ns,
		    u->lin_ns, "<= 0.9", have[U] ? RATIO(lin_ns, 0.9) : -1);
		if (m->sim_cost[0])
			printf("| the simulated HCA's own reg + dereg, 64 KiB, "
			       "default flags / NO_PIN (ns) | %.0f / %.0f | - | "
			       "- | | | |\n", m->sim_cost[0], m->sim_cost[1]);
	}
	if (unmap_measured) {
		/* What a source adds: its process's libc-over-raw (or
		 * held-over-not-held) difference, minus libc's own. */
		double lib = ul->pair_mmap - ul->pair_raw;
		double lib_un = ul->munmap_held - ul->munmap_raw;
		double cold_m = um->pair_mmap - um->pair_raw - lib;
		double cold_u = uu->pair_mmap - uu->pair_raw - lib;

		unmap_row("unmap: mmap+munmap of memory not held, extra over "
			  "plain libc (ns)", cold_m, cold_u, 50);
		unmap_row("unmap: munmap of memory the cache holds, extra (ns)",
			  um->munmap_held - um->munmap_raw - lib_un,
			  uu->munmap_held - uu->munmap_raw - lib_un, 1000);
		unmap_row("unmap: free of an mmap'd chunk the cache holds, extra "
			  "(ns; held over not held + the row above's not held)",
			  um->free_held - um->free_cold + cold_m,
			  uu->free_held - uu->free_cold + cold_u, 1000);
	}
	fflush(stdout);
}
