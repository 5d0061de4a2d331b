/*
 * One buffer in several protection domains: a multi-PD cache.
 *
 *   examples/shared_mr          the first RDMA device (two PDs on it, or
 *                               one PD on each of the first two devices),
 *                               else two simulated devices
 *   examples/shared_mr --sim    two simulated mlx5-like devices
 *
 * Multi-rail middleware sends one buffer through several HCAs, and each
 * HCA needs its own registration (MRs belong to a PD, PDs to a device).
 * A multi-PD cache keeps one region per buffer with one MR per PD: the
 * buffer is registered only in the PDs that ask for it, lazily; a hit in
 * any PD takes no lock; one mrmgr_invalidate() drops the buffer from
 * every PD at once, so no rail is left with a stale registration.
 *
 * On the simulated devices the program plays each rail's remote peer
 * (mrmgr_sim_write() through that rail's rkey) and checks the bytes; on
 * real devices it stops at the keys (moving data needs connected QPs:
 * tests/rxe/test_share.c does RDMA WRITEs through each PD's keys on rxe).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <mrmgr/mrmgr.h>
#include <mrmgr/sim.h>

#define LEN (1u << 20)
#define RAILS 2

static int check(int ret, const char *what)
{
	if (ret)
		fprintf(stderr, "%s: %s\n", what, strerror(ret));
	return ret;
}

struct rails {
	struct ibv_context *ctx[RAILS]; /* ctx[1] NULL: both PDs on ctx[0] */
	struct ibv_pd *pd[RAILS];
	int real;
};

/* Real devices: one PD on each of the first two, or two on the first. */
static int open_real(struct rails *r)
{
	struct ibv_device **devs = ibv_get_device_list(NULL);
	int n = 0;

	while (devs && devs[n] && n < RAILS)
		n++;
	for (int i = 0; i < n; i++)
		r->ctx[i] = ibv_open_device(devs[i]);
	if (devs)
		ibv_free_device_list(devs);
	if (!n || !r->ctx[0])
		return 0;
	for (int i = 0; i < RAILS; i++) {
		struct ibv_context *c = r->ctx[i] ? r->ctx[i] : r->ctx[0];

		r->pd[i] = ibv_alloc_pd(c);
		if (!r->pd[i])
			return check(errno ? errno : ENOMEM, "allocate a PD"), -1;
	}
	r->real = 1;
	return 1;
}

static int open_sim(struct rails *r)
{
	for (int i = 0; i < RAILS; i++)
		if (check(mrmgr_sim_open(NULL, &r->ctx[i]), "open a simulated HCA") ||
		    check(mrmgr_sim_alloc_pd(r->ctx[i], &r->pd[i]), "allocate a PD"))
			return -1;
	return 0;
}

static void close_rails(struct rails *r)
{
	for (int i = 0; i < RAILS; i++) {
		if (r->real) {
			ibv_dealloc_pd(r->pd[i]);
			if (r->ctx[i])
				ibv_close_device(r->ctx[i]);
		} else {
			mrmgr_sim_dealloc_pd(r->pd[i]);
			mrmgr_sim_close(r->ctx[i]);
		}
	}
}

int main(int argc, char **argv)
{
	int sim = argc > 1 && !strcmp(argv[1], "--sim");
	unsigned int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
			      IBV_ACCESS_REMOTE_READ;
	struct rails r;
	mrmgr_cache_t *cache;
	mrmgr_region_t *reg[RAILS];
	struct mrmgr_share_info info[4];
	struct mrmgr_stats st;
	size_t n = 0;
	char *buf;
	int ret = 0;

	if (argc > 2 || (argc == 2 && !sim)) {
		fprintf(stderr, "usage: %s [--sim]\n", argv[0]);
		return 2;
	}
	memset(&r, 0, sizeof(r));
	if (!sim && open_real(&r) < 0)
		return 1;
	if (!r.real && open_sim(&r))
		return 1;
	printf("device: %s\n", r.ctx[0]->device->name);
	printf("rails: PD %u on %s, PD %u on %s%s\n", r.pd[0]->handle,
	       r.pd[0]->context->device->name, r.pd[1]->handle,
	       r.pd[1]->context->device->name,
	       r.real ? "" : " (simulated)");

	buf = mmap(NULL, LEN, PROT_READ | PROT_WRITE,
		   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (buf == MAP_FAILED)
		return 1;
	memset(buf, 0, LEN);
	/* One cache over both rails' PDs. */
	struct mrmgr_cache_attr ca = { .comp_mask = MRMGR_CACHE_ATTR_PDS,
				       .pds = r.pd, .npds = RAILS };
	if (check(mrmgr_cache_create(NULL, &ca, &cache),
		  "create the multi-PD cache"))
		return 1;

	/* Each rail asks for the buffer in its own PD: one region, two MRs. */
	for (int i = 0; i < RAILS; i++) {
		struct mrmgr_get_attr ga = { .comp_mask = MRMGR_GET_ATTR_PD,
					     .pd = r.pd[i] };

		if (check(mrmgr_get_ex(cache, buf, LEN, access, &ga, &reg[i]),
			  "get"))
			return 1;
		printf("rail %d: region %p, lkey %#x rkey %#x\n", i, (void *)reg[i],
		       mrmgr_region_lkey_pd(reg[i], r.pd[i]),
		       mrmgr_region_rkey_pd(reg[i], r.pd[i]));
	}
	if (reg[0] != reg[1]) {
		fprintf(stderr, "expected one region for both rails\n");
		return 1;
	}
	mrmgr_region_query_shares(reg[0], info, 4, sizeof(info[0]), &n);
	printf("share set: %zu MRs\n", n);

	if (!r.real) {
		/* Each rail's peer writes its half through its own rkey. */
		for (int i = 0; i < RAILS; i++) {
			char *half = buf + i * (LEN / 2);
			char *src = malloc(LEN / 2);

			if (!src)
				return 1;
			memset(src, 'A' + i, LEN / 2);
			if (check(mrmgr_sim_write(r.pd[i],
						  mrmgr_region_rkey_pd(reg[i], r.pd[i]),
						  (uintptr_t)half, src, LEN / 2),
				  "peer write") ||
			    memcmp(half, src, LEN / 2) != 0)
				return 1;
			free(src);
		}
		printf("both rails wrote their half: '%c...' and '%c...'\n",
		       buf[0], buf[LEN / 2]);
	}
	for (int i = 0; i < RAILS; i++)
		mrmgr_put(reg[i]);

	/* The buffer is about to go: one call drops it from every PD. */
	mrmgr_invalidate(cache, buf, LEN);
	munmap(buf, LEN);
	mrmgr_cache_query_stats(cache, &st, sizeof(st));
	printf("registrations %llu (of which in a second PD %llu), "
	       "invalidations %llu, MRs left %llu\n",
	       (unsigned long long)st.registrations,
	       (unsigned long long)st.share_pd_registrations,
	       (unsigned long long)st.invalidations,
	       (unsigned long long)st.regions);
	if (st.regions != 0)
		ret = 1;
	if (check(mrmgr_cache_destroy(cache), "destroy the cache"))
		ret = 1;
	close_rails(&r);
	return ret;
}
