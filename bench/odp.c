/*
 * ODP on the simulated HCA: what first-touch page faults cost and what
 * prefetch hints save, and what mrmgr_get() costs in implicit mode (a pure
 * lookup, no registration) against pinned mode.
 *
 *   make -C build bench-odp                 (or: build/bench/odp [options])
 *   options: --fault-ns N      modelled cost of one device page fault (10000)
 *            --prefetch-ns N   modelled cost per page of a synchronous
 *                              prefetch (250)
 *            --reg-ns N --reg-ns-per-page N   pinned registration cost
 *                              (16000 and 250: UCX's 16 us + 0.06 ns/byte)
 *            --reps N          repetitions, median reported (3)
 *
 * Part 1 writes a 64 MiB buffer (already resident for the CPU) through one
 * region with simulated RDMA WRITEs of 64 KiB, from a fresh device each
 * time, so every page is new to the device. Part 2 gets and puts 4096
 * separate 64 KiB buffers (miss), then all of them 10 times more (hits).
 * All costs are modelled busy-waits plus the real work of the simulated
 * copy; they show the shape, not a particular NIC.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include <mrmgr/mrmgr.h>
#include <mrmgr/sim.h>

#define BUF_LEN (64u << 20)
#define CHUNK (64u << 10)
#define NBUF 4096
#define BUF_STRIDE (128u << 10) /* gaps: the buffers never merge */
#define HIT_ROUNDS 10

static struct {
	uint64_t fault_ns, prefetch_ns, reg_ns, reg_ns_per_page;
	int reps;
} opt = { 10000, 250, 16000, 250, 3 };

static double now_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e9 + t.tv_nsec;
}

static void die(int ret, const char *what)
{
	if (ret) {
		fprintf(stderr, "bench/odp: %s: %s\n", what, strerror(ret));
		exit(1);
	}
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp_double);
	return v[n / 2];
}

struct dev {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	mrmgr_cache_t *cache;
};

static void dev_open(struct dev *d, uint32_t odp_mode, uint32_t sim_flags)
{
	struct mrmgr_sim_attr sa = {
		.comp_mask = MRMGR_SIM_ATTR_ODP_COST | MRMGR_SIM_ATTR_COST |
			     MRMGR_SIM_ATTR_MEMLOCK | MRMGR_SIM_ATTR_FLAGS,
		.odp_fault_ns = opt.fault_ns,
		.odp_prefetch_ns_per_page = opt.prefetch_ns,
		.reg_ns = opt.reg_ns,
		.reg_ns_per_page = opt.reg_ns_per_page,
		.memlock_bytes = UINT64_MAX,
		.flags = sim_flags,
	};
	struct mrmgr_cache_attr ca = {
		.comp_mask = MRMGR_CACHE_ATTR_ODP | MRMGR_CACHE_ATTR_MAX_BYTES,
		.max_bytes = UINT64_C(1) << 40,
		.odp_mode = odp_mode,
		.odp_flags = MRMGR_ODP_STRICT,
	};

	die(mrmgr_sim_open(&sa, &d->ctx), "open the sim");
	die(mrmgr_sim_alloc_pd(d->ctx, &d->pd), "alloc pd");
	die(mrmgr_cache_create(d->pd, &ca, &d->cache), "create the cache");
}

static void dev_close(struct dev *d)
{
	die(mrmgr_cache_destroy(d->cache), "destroy the cache");
	die(mrmgr_sim_dealloc_pd(d->pd), "dealloc pd");
	die(mrmgr_sim_close(d->ctx), "close the sim");
}

static uint64_t sim_faults(struct dev *d)
{
	struct mrmgr_sim_stats s;

	die(mrmgr_sim_query_stats(d->ctx, &s, sizeof(s)), "sim stats");
	return s.odp_faults;
}

/* ------------------------------------------------------------ part 1 */

enum hint { NONE, SYNC, ASYNC, AGAIN };

struct touch_result {
	double setup_ms, access_ms;
	uint64_t faults;
};

/* One run: get the region, maybe hint, then write the whole buffer. */
static struct touch_result touch(char *buf, const char *src, uint32_t mode,
				 enum hint hint)
{
	struct touch_result res = { 0 };
	struct dev d;
	mrmgr_region_t *r;
	double t0, t1, t2;
	uint64_t f0;

	dev_open(&d, mode, 0);
	t0 = now_ns();
	die(mrmgr_get(d.cache, buf, BUF_LEN, IBV_ACCESS_LOCAL_WRITE |
		      IBV_ACCESS_REMOTE_WRITE, &r), "get");
	if (hint == SYNC || hint == ASYNC) {
		struct mrmgr_range rg = { buf, BUF_LEN };

		die(mrmgr_prefetch(d.cache, &rg, 1,
				   hint == SYNC ? MRMGR_PREFETCH_SYNC : 0),
		    "prefetch");
	}
	if (hint == AGAIN) /* a first pass, not timed: all pages present */
		for (size_t off = 0; off < BUF_LEN; off += CHUNK)
			die(mrmgr_sim_write(d.pd, mrmgr_region_rkey(r),
					    (uintptr_t)(buf + off), src + off,
					    CHUNK), "write");
	t1 = now_ns();
	f0 = sim_faults(&d);
	for (size_t off = 0; off < BUF_LEN; off += CHUNK)
		die(mrmgr_sim_write(d.pd, mrmgr_region_rkey(r),
				    (uintptr_t)(buf + off), src + off, CHUNK),
		    "write");
	t2 = now_ns();
	res.faults = sim_faults(&d) - f0;
	res.setup_ms = hint == AGAIN ? 0 : (t1 - t0) / 1e6;
	res.access_ms = (t2 - t1) / 1e6;
	mrmgr_put(r);
	dev_close(&d);
	return res;
}

static void part1(void)
{
	static const struct {
		const char *name;
		uint32_t mode;
		enum hint hint;
	} rows[] = {
		{ "pinned (ODP off)", MRMGR_ODP_OFF, NONE },
		{ "explicit ODP, no prefetch", MRMGR_ODP_EXPLICIT, NONE },
		{ "explicit ODP, prefetch SYNC", MRMGR_ODP_EXPLICIT, SYNC },
		{ "explicit ODP, prefetch async", MRMGR_ODP_EXPLICIT, ASYNC },
		{ "implicit ODP, no prefetch", MRMGR_ODP_IMPLICIT, NONE },
		{ "implicit ODP, prefetch SYNC", MRMGR_ODP_IMPLICIT, SYNC },
		{ "ODP, second touch (present)", MRMGR_ODP_EXPLICIT, AGAIN },
	};
	char *buf = mmap(NULL, BUF_LEN, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	char *src = malloc(BUF_LEN);
	const double pages = BUF_LEN / 4096.0;

	if (buf == MAP_FAILED || !src)
		die(ENOMEM, "buffers");
	memset(buf, 1, BUF_LEN); /* resident for the CPU: only device faults */
	memset(src, 2, BUF_LEN);
	printf("First touch of a 64 MiB buffer by simulated RDMA WRITEs of 64 KiB\n"
	       "(fault %llu ns/page, sync prefetch %llu ns/page, pinned reg "
	       "%llu ns + %llu ns/page; median of %d)\n\n",
	       (unsigned long long)opt.fault_ns,
	       (unsigned long long)opt.prefetch_ns,
	       (unsigned long long)opt.reg_ns,
	       (unsigned long long)opt.reg_ns_per_page, opt.reps);
	printf("| %-29s | get+hint ms | access ms | total ms | device faults | ns/page |\n",
	       "run");
	printf("|-------------------------------|------------:|----------:|---------:|--------------:|--------:|\n");
	for (size_t k = 0; k < sizeof(rows) / sizeof(rows[0]); k++) {
		double setup[16], access[16], total[16];
		uint64_t faults = 0;
		int n = opt.reps < 16 ? opt.reps : 16;

		for (int i = 0; i < n; i++) {
			struct touch_result t = touch(buf, src, rows[k].mode,
						      rows[k].hint);

			setup[i] = t.setup_ms;
			access[i] = t.access_ms;
			total[i] = t.setup_ms + t.access_ms;
			faults = t.faults;
		}
		double tm = median(total, n);
		printf("| %-29s | %11.1f | %9.1f | %8.1f | %13llu | %7.0f |\n",
		       rows[k].name, median(setup, n), median(access, n), tm,
		       (unsigned long long)faults, tm * 1e6 / pages);
	}
	munmap(buf, BUF_LEN);
	free(src);
}

/* ------------------------------------------------------------ part 2 */

static void part2(void)
{
	static const struct {
		const char *name;
		uint32_t mode;
	} rows[] = {
		{ "pinned (ODP off)", MRMGR_ODP_OFF },
		{ "explicit ODP", MRMGR_ODP_EXPLICIT },
		{ "implicit ODP", MRMGR_ODP_IMPLICIT },
	};
	size_t span = (size_t)NBUF * BUF_STRIDE;
	/* Mapped but never touched: NO_PIN and ODP need no resident pages. */
	char *base = mmap(NULL, span, PROT_READ | PROT_WRITE,
			  MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);

	if (base == MAP_FAILED)
		die(ENOMEM, "buffers");
	printf("\nmrmgr_get()+mrmgr_put() of %d separate 64 KiB buffers "
	       "(simulated device without pinning work: cost model only)\n\n",
	       NBUF);
	printf("| %-16s | first get+put (miss) ns | hit get+put ns | registrations | pinned MiB |\n",
	       "mode");
	printf("|------------------|------------------------:|---------------:|--------------:|-----------:|\n");
	for (size_t k = 0; k < sizeof(rows) / sizeof(rows[0]); k++) {
		double miss[16], hit[16];
		struct mrmgr_stats st = { 0 };
		int n = opt.reps < 16 ? opt.reps : 16;

		for (int i = 0; i < n; i++) {
			struct dev d;
			mrmgr_region_t *r;
			double t0, t1, t2;

			dev_open(&d, rows[k].mode, MRMGR_SIM_FLAG_NO_PIN);
			t0 = now_ns();
			for (int b = 0; b < NBUF; b++) {
				die(mrmgr_get(d.cache, base + (size_t)b * BUF_STRIDE,
					      64 << 10, IBV_ACCESS_LOCAL_WRITE |
					      IBV_ACCESS_REMOTE_READ, &r), "get");
				mrmgr_put(r);
			}
			t1 = now_ns();
			for (int round = 0; round < HIT_ROUNDS; round++)
				for (int b = 0; b < NBUF; b++) {
					die(mrmgr_get(d.cache,
						      base + (size_t)b * BUF_STRIDE,
						      64 << 10, IBV_ACCESS_LOCAL_WRITE |
						      IBV_ACCESS_REMOTE_READ, &r),
					    "get");
					mrmgr_put(r);
				}
			t2 = now_ns();
			die(mrmgr_cache_query_stats(d.cache, &st, sizeof(st)),
			    "stats");
			miss[i] = (t1 - t0) / NBUF;
			hit[i] = (t2 - t1) / (NBUF * HIT_ROUNDS);
			dev_close(&d);
		}
		printf("| %-16s | %23.0f | %14.1f | %13llu | %10.1f |\n",
		       rows[k].name, median(miss, n), median(hit, n),
		       (unsigned long long)st.registrations,
		       st.peak_pinned_bytes / 1048576.0);
	}
	munmap(base, span);
}

static uint64_t arg_u64(int argc, char **argv, int *i)
{
	char *end;
	unsigned long long v;

	if (*i + 1 >= argc) {
		fprintf(stderr, "bench/odp: %s needs a value\n", argv[*i]);
		exit(2);
	}
	v = strtoull(argv[++*i], &end, 0);
	if (*end) {
		fprintf(stderr, "bench/odp: bad number %s\n", argv[*i]);
		exit(2);
	}
	return v;
}

int main(int argc, char **argv)
{
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--fault-ns"))
			opt.fault_ns = arg_u64(argc, argv, &i);
		else if (!strcmp(argv[i], "--prefetch-ns"))
			opt.prefetch_ns = arg_u64(argc, argv, &i);
		else if (!strcmp(argv[i], "--reg-ns"))
			opt.reg_ns = arg_u64(argc, argv, &i);
		else if (!strcmp(argv[i], "--reg-ns-per-page"))
			opt.reg_ns_per_page = arg_u64(argc, argv, &i);
		else if (!strcmp(argv[i], "--reps"))
			opt.reps = (int)arg_u64(argc, argv, &i);
		else {
			fprintf(stderr, "usage: %s [--fault-ns N] [--prefetch-ns N] "
				"[--reg-ns N] [--reg-ns-per-page N] [--reps N]\n",
				argv[0]);
			return 2;
		}
	}
	if (opt.reps < 1)
		opt.reps = 1;
	part1();
	part2();
	return 0;
}
