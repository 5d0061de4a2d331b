/*
 * On-demand paging with prefetch hints.
 *
 *   examples/odp_prefetch          the first RDMA device, else the
 *                                  simulated mlx5-like HCA
 *   examples/odp_prefetch --sim    the simulated mlx5-like HCA: ODP works
 *   examples/odp_prefetch --rxe    a simulated rxe-like HCA: no ODP, no advise
 *
 * The cache is asked for MRMGR_ODP_AUTO: the best ODP mode the device
 * supports for the transports the program uses (implicit, else explicit),
 * else ordinary pinned registrations. The program does not change with
 * the answer: mrmgr_get() hands out keys either way, and mrmgr_prefetch()
 * is safe on every device. On a device without ODP (rdma_rxe, siw, older
 * HCAs) the cache pins as usual and a prefetch is a counted no-op: pinned
 * memory is resident already, so there is nothing to hint. The program
 * prints which case it met.
 *
 * What ODP buys: nothing is pinned (no memlock limit, no registration
 * cost per buffer in implicit mode). What it costs: the HCA page-faults
 * the first time it touches a page, which stalls the transfer. A prefetch
 * hint before the transfer removes those faults. On the simulated HCA a
 * peer's RDMA WRITEs are simulated and a fault is modelled at 20 us, so
 * the difference shows in the timings; on a real device the program stops
 * at the hint (moving data needs a connected QP pair; see
 * tests/rxe/test_odp.c for RDMA through such regions on rxe).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include <mrmgr/mrmgr.h>
#include <mrmgr/sim.h>

#define LEN (8u << 20)

static const char *const mode_names[] = { "off", "explicit", "implicit" };

static double now_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static int check(int ret, const char *what)
{
	if (ret)
		fprintf(stderr, "%s: %s\n", what, strerror(ret));
	return ret;
}

/* What a peer's RDMA WRITE into [dst, dst+len) looks like on the sim. */
static int remote_write(struct ibv_pd *pd, mrmgr_region_t *r, char *dst,
			const char *src, size_t len)
{
	for (size_t off = 0; off < len; off += 64 << 10) {
		int ret = mrmgr_sim_write(pd, mrmgr_region_rkey(r),
					  (uintptr_t)(dst + off), src + off,
					  64 << 10);
		if (ret)
			return ret;
	}
	return 0;
}

static uint64_t faults(struct ibv_context *ctx)
{
	struct mrmgr_sim_stats s;

	mrmgr_sim_query_stats(ctx, &s, sizeof(s));
	return s.odp_faults;
}

/* The first RDMA device libibverbs lists, with a PD; 0 when there is none. */
static int open_real(struct ibv_context **ctx, struct ibv_pd **pd)
{
	struct ibv_device **devs = ibv_get_device_list(NULL);

	*ctx = devs && devs[0] ? ibv_open_device(devs[0]) : NULL;
	if (devs)
		ibv_free_device_list(devs);
	if (!*ctx)
		return 0;
	*pd = ibv_alloc_pd(*ctx);
	if (!*pd) {
		check(errno ? errno : ENOMEM, "allocate a PD");
		ibv_close_device(*ctx);
		*ctx = NULL;
		return -1;
	}
	return 1;
}

/*
 * The simulated part: a peer's RDMA WRITEs into buf, the first half
 * without a hint, the second after a prefetch. 0, or 1 on an error or
 * when the hint did not remove the faults.
 */
static int simulated_writes(struct ibv_context *ctx, struct ibv_pd *pd,
			    mrmgr_cache_t *cache, mrmgr_region_t *r, char *buf)
{
	struct mrmgr_range second_half = { buf + LEN / 2, LEN / 2 };
	char *src = malloc(LEN);
	double t0, t_cold, t_warm;
	uint64_t f_cold, f_warm;

	if (!src)
		return 1;
	memset(src, 'x', LEN);

	/* First half: no hint. With ODP every page faults on first touch. */
	t0 = now_ms();
	if (check(remote_write(pd, r, buf, src, LEN / 2), "remote write"))
		return 1;
	t_cold = now_ms() - t0;
	f_cold = faults(ctx);

	/*
	 * Second half: hint first. Synchronous here (MRMGR_PREFETCH_SYNC) so
	 * the timing includes it; without it the hint is asynchronous. On a
	 * device without ODP or advise this returns 0 and does nothing.
	 */
	t0 = now_ms();
	if (check(mrmgr_prefetch(cache, &second_half, 1, MRMGR_PREFETCH_SYNC),
		  "prefetch") ||
	    check(remote_write(pd, r, buf + LEN / 2, src, LEN / 2), "remote write"))
		return 1;
	t_warm = now_ms() - t0;
	f_warm = faults(ctx) - f_cold;

	printf("first half,  no hint:   %7.1f ms, %llu device page faults\n",
	       t_cold, (unsigned long long)f_cold);
	printf("second half, prefetch:  %7.1f ms, %llu device page faults\n",
	       t_warm, (unsigned long long)f_warm);
	if (memcmp(buf, src, LEN) != 0) {
		fprintf(stderr, "the written bytes did not arrive\n");
		return 1;
	}
	free(src);
	/* With ODP, the hint removed every fault; without, none happened. */
	return f_warm == 0 ? 0 : 1;
}

int main(int argc, char **argv)
{
	int rxe = argc > 1 && !strcmp(argv[1], "--rxe");
	int sim = rxe || (argc > 1 && !strcmp(argv[1], "--sim"));
	struct mrmgr_sim_attr sa = {
		.comp_mask = MRMGR_SIM_ATTR_PERSONALITY | MRMGR_SIM_ATTR_ODP_COST |
			     MRMGR_SIM_ATTR_MEMLOCK,
		.personality = rxe ? MRMGR_SIM_RXE : MRMGR_SIM_MLX5,
		.memlock_bytes = UINT64_MAX, /* the pinned fallback needs room */
		.odp_fault_ns = 20000,
		.odp_prefetch_ns_per_page = 250,
	};
	struct mrmgr_cache_attr ca = {
		.comp_mask = MRMGR_CACHE_ATTR_ODP | MRMGR_CACHE_ATTR_MAX_BYTES,
		.max_bytes = 1u << 30,
		.odp_mode = MRMGR_ODP_AUTO,
		/* The transports and operations the program will use. */
		.odp_transports = MRMGR_ODP_TRANSPORT_RC,
		.odp_ops = IBV_ODP_SUPPORT_WRITE | IBV_ODP_SUPPORT_READ,
	};
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	mrmgr_cache_t *cache;
	mrmgr_region_t *r;
	struct mrmgr_odp_info info;
	struct mrmgr_stats st;
	char *buf = mmap(NULL, LEN, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	int real = 0, ret = 0;

	if (argc > 2 || (argc == 2 && !sim)) {
		fprintf(stderr, "usage: %s [--sim | --rxe]\n", argv[0]);
		return 2;
	}
	if (buf == MAP_FAILED)
		return 1;
	memset(buf, 0, LEN);
	if (!sim && (real = open_real(&ctx, &pd)) < 0)
		return 1;
	if (!real &&
	    (check(mrmgr_sim_open(&sa, &ctx), "open the simulated HCA") ||
	     check(mrmgr_sim_alloc_pd(ctx, &pd), "allocate a PD")))
		return 1;
	if (real)
		printf("device: %s\n", ibv_get_device_name(ctx->device));
	else
		printf("device: %s (simulated%s)\n",
		       rxe ? "rxe-like" : "mlx5-like",
		       sim ? "" : ": no RDMA device found");
	if (check(mrmgr_cache_create(pd, &ca, &cache), "create the cache"))
		return 1;

	/* What did the cache decide, and why? */
	mrmgr_cache_query_odp(cache, &info, sizeof(info));
	printf("ODP caps: general %#llx, RC %#x\n",
	       (unsigned long long)info.general_caps, info.rc_caps);
	printf("mode: %s -- %s\n", mode_names[info.mode], info.reason_text);
	if (info.mode == MRMGR_ODP_OFF)
		printf("fallback: no on-demand paging here; the cache pins "
		       "registrations as without ODP, and prefetch hints "
		       "succeed as counted no-ops\n");

	if (check(mrmgr_get(cache, buf, LEN, IBV_ACCESS_LOCAL_WRITE |
			    IBV_ACCESS_REMOTE_WRITE, &r), "get"))
		return 1;

	if (!real) {
		ret = simulated_writes(ctx, pd, cache, r, buf);
	} else {
		/* A real device: hint the whole buffer and stop there. */
		ret = check(mrmgr_region_prefetch(r, NULL, 0, MRMGR_PREFETCH_SYNC),
			    "prefetch");
		printf("prefetch of %u MiB: %s\n", LEN >> 20,
		       ret ? strerror(ret)
			   : info.mode == MRMGR_ODP_OFF
				     ? "returned 0, nothing sent (pinned memory is resident)"
				     : "returned 0, the pages are present on the device");
	}
	mrmgr_put(r);

	mrmgr_cache_query_stats(cache, &st, sizeof(st));
	printf("registrations %llu, pinned bytes %llu, prefetch calls %llu "
	       "(SGEs %llu, no-ops %llu)\n",
	       (unsigned long long)st.registrations,
	       (unsigned long long)st.pinned_bytes,
	       (unsigned long long)st.prefetch_calls,
	       (unsigned long long)st.prefetch_sges,
	       (unsigned long long)st.prefetch_noops);

	mrmgr_invalidate(cache, buf, LEN); /* before unmapping */
	munmap(buf, LEN);
	if (check(mrmgr_cache_destroy(cache), "destroy the cache"))
		return 1;
	if (real) {
		if (check(ibv_dealloc_pd(pd), "free the PD") ||
		    check(ibv_close_device(ctx), "close the device"))
			return 1;
	} else if (check(mrmgr_sim_dealloc_pd(pd), "free the PD") ||
		   check(mrmgr_sim_close(ctx), "close the device")) {
		return 1;
	}
	return ret ? 1 : 0;
}
