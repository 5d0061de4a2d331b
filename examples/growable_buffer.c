/*
 * A growable registered buffer: an append-only log that a remote peer
 * writes into through RDMA, growing as records arrive.
 *
 * The buffer stays registered through every resize; the program only has
 * to notice when the registration changed (mrmgr_buf_generation()) and
 * tell the peer the new address and rkey before it writes again. Runs on
 * the simulated HCA, whose mrmgr_sim_write() plays the remote peer's
 * RDMA WRITE (and would report a write through stale keys).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mrmgr/mrmgr.h>
#include <mrmgr/sim.h>

#define RECORD 512 /* bytes per record */

static int check(int ret, const char *what)
{
	if (ret)
		fprintf(stderr, "%s: %s\n", what, strerror(ret));
	return ret;
}

/* What the peer knows about our buffer: where to write, with which key. */
struct peer_view {
	uint64_t addr;
	uint32_t rkey;
	uint64_t generation;
};

static void tell_peer(struct peer_view *peer, mrmgr_buf_t *log)
{
	peer->addr = (uint64_t)(uintptr_t)mrmgr_buf_data(log);
	peer->rkey = mrmgr_buf_rkey(log);
	peer->generation = mrmgr_buf_generation(log);
	printf("  -> peer told: addr %#llx rkey %#x (capacity %zu)\n",
	       (unsigned long long)peer->addr, peer->rkey,
	       mrmgr_buf_capacity(log));
}

int main(void)
{
	struct mrmgr_cache_attr ca = { .comp_mask = MRMGR_CACHE_ATTR_MAX_BYTES,
				       .max_bytes = 64u << 20 };
	struct mrmgr_sim_attr sa = { .comp_mask = MRMGR_SIM_ATTR_MEMLOCK,
				     .memlock_bytes = 64u << 20 };
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	mrmgr_cache_t *cache;
	mrmgr_buf_t *log;
	struct peer_view peer;
	struct mrmgr_stats st;
	char record[RECORD] = { 0 }; /* sent whole: no uninitialised bytes */
	size_t used = 0;

	if (check(mrmgr_sim_open(&sa, &ctx), "open the simulated HCA") ||
	    check(mrmgr_sim_alloc_pd(ctx, &pd), "allocate a PD") ||
	    check(mrmgr_cache_create(pd, &ca, &cache), "create the cache") ||
	    check(mrmgr_buf_create(cache, RECORD,
				   IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE,
				   &log), "create the buffer"))
		return 1;
	tell_peer(&peer, log);

	for (int i = 0; i < 1000; i++) {
		/* Make room for one more record: registration follows. */
		if (check(mrmgr_buf_resize(log, used + RECORD), "resize"))
			return 1;
		if (mrmgr_buf_generation(log) != peer.generation) {
			/* The keys or the address may have changed: the peer
			 * must not write with what it had. */
			printf("record %d: registration changed\n", i);
			tell_peer(&peer, log);
		}
		/* The peer's RDMA WRITE of the record at the end of the log. */
		snprintf(record, sizeof(record), "record %d", i);
		if (check(mrmgr_sim_write(pd, peer.rkey, peer.addr + used, record,
					  sizeof(record)), "peer write"))
			return 1;
		used += RECORD;
	}
	printf("log holds %zu bytes; record 999 reads \"%s\"\n", used,
	       (char *)mrmgr_buf_data(log) + 999 * RECORD);

	mrmgr_cache_query_stats(cache, &st, sizeof(st));
	printf("1000 appends: %llu registration, %llu re-registrations, "
	       "%llu pages registered in total\n",
	       (unsigned long long)st.registrations,
	       (unsigned long long)st.rereg_attempts,
	       (unsigned long long)st.pages_registered);

	mrmgr_buf_destroy(log);
	mrmgr_cache_destroy(cache);
	mrmgr_sim_dealloc_pd(pd);
	mrmgr_sim_close(ctx);
	return 0;
}
