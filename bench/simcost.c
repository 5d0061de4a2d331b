/*
 * The simulated HCA's own cost: what one mrmgr_sim_reg_mr() +
 * mrmgr_sim_dereg_mr() pair costs with the cost model at zero, i.e. the
 * sim's bookkeeping, its export table and its mapping check or pinning.
 * Every miss of a cache on the simulated HCA pays it on top of the model.
 *
 *   make -C build bench-sim                 (or: build/bench/simcost [options])
 *   options: --len N     bytes per region (65536)
 *            --iters N   reg+dereg pairs per repetition (20000)
 *            --reps N    repetitions, median reported (5)
 *
 * Rows: NO_PIN (the mapping check only), pinned (populate, hold the
 * pages, record their PFNs: the default device), pinned on the rxe
 * personality (random key bytes), and NO_PIN from 2 threads on one
 * device (throughput over 1 thread's; needs two free CPUs to mean
 * anything). Each figure is the median over the
 * repetitions of the mean ns per pair, in wall time and in the thread's
 * CPU time (which a loaded machine inflates less); the pair is the same
 * region each time, resident, as a cache's miss on a reused buffer sees
 * it.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include <mrmgr/sim.h>

#define ACCESS                                                             \
	(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |                \
	 IBV_ACCESS_REMOTE_READ)

static struct {
	size_t len;
	long iters;
	int reps;
} opt = { 64u << 10, 20000, 5 };

static double now_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e9 + t.tv_nsec;
}

static double cpu_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
	return t.tv_sec * 1e9 + t.tv_nsec;
}

static void die(int ret, const char *what)
{
	if (ret) {
		fprintf(stderr, "bench/simcost: %s: %s\n", what, strerror(ret));
		exit(1);
	}
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
	qsort(v, (size_t)n, sizeof(*v), cmp_double);
	return v[n / 2];
}

struct run {
	struct ibv_pd *pd;
	char *buf;
	long iters;
	double ns, cpu; /* out: wall and CPU time of the loop */
};

static void *loop(void *arg)
{
	struct run *r = arg;
	double t0 = now_ns(), c0 = cpu_ns();

	for (long i = 0; i < r->iters; i++) {
		struct ibv_mr *mr;

		die(mrmgr_sim_reg_mr(r->pd, r->buf, opt.len, ACCESS, &mr), "reg");
		die(mrmgr_sim_dereg_mr(mr), "dereg");
	}
	r->ns = now_ns() - t0;
	r->cpu = cpu_ns() - c0;
	return NULL;
}

static struct ibv_context *open_dev(uint32_t personality, uint32_t flags)
{
	struct mrmgr_sim_attr a = {
		.comp_mask = MRMGR_SIM_ATTR_FLAGS | MRMGR_SIM_ATTR_MEMLOCK |
			     MRMGR_SIM_ATTR_PERSONALITY,
		.personality = personality,
		.flags = flags,
		.memlock_bytes = UINT64_MAX,
	};
	struct ibv_context *ctx;

	die(mrmgr_sim_open(&a, &ctx), "open");
	return ctx;
}

struct figure {
	double wall; /* ns per pair, all threads together */
	double cpu;  /* CPU ns per pair of one thread */
};

/* ns per reg+dereg pair by nthreads threads on one device, each on its
 * own buffer. */
static struct figure measure(uint32_t personality, uint32_t flags,
			     int nthreads, char *bufs)
{
	double v[64], c[64];
	int reps = opt.reps < 64 ? opt.reps : 64;

	for (int rep = 0; rep < reps; rep++) {
		struct ibv_context *ctx = open_dev(personality, flags);
		struct run r[2];
		pthread_t th[2];
		double t0, wall;

		for (int t = 0; t < nthreads; t++) {
			die(mrmgr_sim_alloc_pd(ctx, &r[t].pd), "alloc_pd");
			r[t].buf = bufs + (size_t)t * 2 * opt.len;
			r[t].iters = opt.iters / 10; /* warm up */
			loop(&r[t]);
			r[t].iters = opt.iters;
		}
		t0 = now_ns();
		for (int t = 0; t < nthreads; t++)
			die(pthread_create(&th[t], NULL, loop, &r[t]), "thread");
		for (int t = 0; t < nthreads; t++)
			pthread_join(th[t], NULL);
		wall = now_ns() - t0;
		/* Pairs per second, as ns per pair over all threads. */
		v[rep] = wall / ((double)opt.iters * nthreads);
		c[rep] = r[0].cpu / (double)opt.iters;
		for (int t = 0; t < nthreads; t++)
			die(mrmgr_sim_dealloc_pd(r[t].pd), "dealloc_pd");
		die(mrmgr_sim_close(ctx), "close");
	}
	return (struct figure){ median(v, reps), median(c, reps) };
}

static long arg_long(int argc, char **argv, int *i)
{
	if (*i + 1 >= argc) {
		fprintf(stderr, "bench/simcost: %s needs a value\n", argv[*i]);
		exit(2);
	}
	return strtol(argv[++*i], NULL, 0);
}

int main(int argc, char **argv)
{
	struct figure nopin, pinned, rxe, two;
	char *bufs;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--len"))
			opt.len = (size_t)arg_long(argc, argv, &i);
		else if (!strcmp(argv[i], "--iters"))
			opt.iters = arg_long(argc, argv, &i);
		else if (!strcmp(argv[i], "--reps"))
			opt.reps = (int)arg_long(argc, argv, &i);
		else {
			fprintf(stderr, "usage: %s [--len N] [--iters N] "
				"[--reps N]\n", argv[0]);
			return 2;
		}
	}
	if (!opt.len || opt.iters <= 0 || opt.reps <= 0) {
		fprintf(stderr, "bench/simcost: values must be positive\n");
		return 2;
	}
	/* Two buffers with a gap, resident. */
	bufs = mmap(NULL, 4 * opt.len, PROT_READ | PROT_WRITE,
		    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (bufs == MAP_FAILED)
		die(errno, "mmap");
	memset(bufs, 1, 4 * opt.len);

	nopin = measure(MRMGR_SIM_MLX5, MRMGR_SIM_FLAG_NO_PIN, 1, bufs);
	pinned = measure(MRMGR_SIM_MLX5, 0, 1, bufs);
	rxe = measure(MRMGR_SIM_RXE, 0, 1, bufs);
	two = measure(MRMGR_SIM_MLX5, MRMGR_SIM_FLAG_NO_PIN, 2, bufs);

	printf("simulated HCA's own cost per reg + dereg, %zu-byte region, "
	       "cost model 0\n(%ld pairs x %d repetitions, median of the "
	       "mean; page identity %s)\n\n",
	       opt.len, opt.iters, opt.reps,
	       mrmgr_sim_page_identity_available() ? "available"
						   : "unavailable");
	printf("| device | ns per reg + dereg | CPU ns per reg + dereg |\n"
	       "|---|---:|---:|\n");
	printf("| mlx5, NO_PIN | %.0f | %.0f |\n", nopin.wall, nopin.cpu);
	printf("| mlx5, pinned (default) | %.0f | %.0f |\n", pinned.wall,
	       pinned.cpu);
	printf("| rxe, pinned | %.0f | %.0f |\n", rxe.wall, rxe.cpu);
	printf("\nmlx5, NO_PIN, 2 threads on one device: throughput %.2f x "
	       "1 thread's\n", nopin.wall / two.wall);
	munmap(bufs, 4 * opt.len);
	return 0;
}
