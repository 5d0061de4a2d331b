/*
 * MPI bootstraps, RDMA moves the data, libmrmgr owns the registrations.
 *
 *   mpirun -np 2 ./examples/mpi_rdma        (Open MPI as root: add
 *                                            --allow-run-as-root)
 *
 * What an MPI-based middleware does with libmrmgr: MPI is used only to
 * exchange what the peers need to reach each other (QP numbers, GIDs or
 * LIDs, PSNs) and, every round, the address, length and rkey of the
 * target's buffer. The data moves with RDMA WRITE and READ over an RC QP
 * pair on the first RDMA device (rxe0 in the project's qemu guest).
 *
 * Rank 1 is the target: it exposes a buffer that is reused (cache hits),
 * grown within its mapping (the cache grows the region), unmapped and
 * mapped again at the same address (the memory-event monitor must make
 * the next get register the new pages: nothing calls mrmgr_invalidate()),
 * and finally freed and allocated elsewhere. Rank 0 is the initiator: it
 * READs the target's pattern into a realloc()ed buffer and WRITEs its own
 * from a growable registered buffer (mrmgr_buf_resize() up and down).
 * Both sides check every byte, every round: a stale registration would
 * put the bytes into pages nobody looks at and fail the check.
 *
 * Exit status: 0 all rounds passed; 77 no RDMA device (skipped);
 * 1 anything else. MPI must not use the RDMA device itself (Open MPI:
 * --mca pml ob1 --mca btl self,vader,tcp), so the example owns it.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <mpi.h>
#include <mrmgr/mrmgr.h>

#define EXIT_SKIP 77
#define MAP_BYTES (4u << 20)   /* the target's mapping: growth stays inside */
#define CQ_DEPTH 16
#define START_PSN 0x1234
#define COMPLETION_TIMEOUT_S 30

/* What each rank tells the other to connect its QP. */
struct endpoint {
	uint32_t qpn;
	uint32_t psn;
	uint16_t lid;
	uint8_t port;
	int8_t gid_index; /* -1: InfiniBand, LID addressing */
	uint8_t gid[16];
};

/* What the target tells the initiator every round. */
struct exposed {
	uint64_t addr;
	uint64_t length;
	uint32_t rkey;
	uint32_t seed;
};

struct rdma {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	struct ibv_port_attr port_attr;
	uint8_t port;
	int gid_index;
	union ibv_gid gid;
};

static int rank;

static void die(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "mpi_rdma[%d]: ", rank);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	MPI_Abort(MPI_COMM_WORLD, 1);
	exit(1);
}

static void check(int ret, const char *what)
{
	if (ret)
		die("%s: %s", what, strerror(ret));
}

/* Both ranks agree on skipping: one without a device skips both. */
static int open_device(struct rdma *r)
{
	const char *want = getenv("MRMGR_TEST_DEVICE");
	struct ibv_device **list = ibv_get_device_list(NULL);
	int have = 0, all;

	for (int i = 0; list && list[i] && !r->ctx; i++) {
		if (want && strcmp(ibv_get_device_name(list[i]), want) != 0)
			continue;
		r->ctx = ibv_open_device(list[i]);
	}
	if (list)
		ibv_free_device_list(list);
	if (r->ctx) {
		struct ibv_device_attr da;

		check(ibv_query_device(r->ctx, &da), "ibv_query_device");
		for (unsigned int p = 1; p <= da.phys_port_cnt && !r->port; p++)
			if (ibv_query_port(r->ctx, (uint8_t)p, &r->port_attr) == 0 &&
			    r->port_attr.state == IBV_PORT_ACTIVE)
				r->port = (uint8_t)p;
		have = r->port != 0;
	}
	MPI_Allreduce(&have, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
	return all;
}

/* RoCE: the first RoCE v2 GID, else the first v1 one. IB: the LID. */
static void pick_address(struct rdma *r)
{
	r->gid_index = -1;
	if (r->port_attr.link_layer == IBV_LINK_LAYER_INFINIBAND &&
	    r->port_attr.lid != 0)
		return;
	for (int i = 0, v1 = -1; i < r->port_attr.gid_tbl_len; i++) {
		struct ibv_gid_entry e;

		if (ibv_query_gid_ex(r->ctx, r->port, (uint32_t)i, &e, 0) != 0)
			continue;
		if (e.gid_type == IBV_GID_TYPE_ROCE_V2) {
			r->gid_index = i;
			r->gid = e.gid;
			return;
		}
		if (v1 < 0) {
			v1 = r->gid_index = i;
			r->gid = e.gid;
		}
	}
	if (r->gid_index < 0)
		die("port %u has no usable GID", r->port);
}

static void modify(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask,
		   const char *to)
{
	check(ibv_modify_qp(qp, a, mask), to);
}

/* Create the QP, swap endpoints with the peer over MPI, go to RTS. */
static void connect_qp(struct rdma *r, int peer)
{
	struct ibv_qp_init_attr ia = {
		.send_cq = r->cq,
		.recv_cq = r->cq,
		.cap = { .max_send_wr = 4, .max_recv_wr = 1,
			 .max_send_sge = 1, .max_recv_sge = 1 },
		.qp_type = IBV_QPT_RC,
		.sq_sig_all = 1,
	};
	struct endpoint me = { 0 }, them;
	struct ibv_qp_attr a;

	r->qp = ibv_create_qp(r->pd, &ia);
	if (!r->qp)
		die("ibv_create_qp: %s", strerror(errno));
	me.qpn = r->qp->qp_num;
	me.psn = START_PSN;
	me.lid = r->port_attr.lid;
	me.port = r->port;
	me.gid_index = (int8_t)r->gid_index;
	memcpy(me.gid, r->gid.raw, sizeof(me.gid));
	MPI_Sendrecv(&me, sizeof(me), MPI_BYTE, peer, 1, &them, sizeof(them),
		     MPI_BYTE, peer, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);

	a = (struct ibv_qp_attr){
		.qp_state = IBV_QPS_INIT,
		.port_num = r->port,
		.qp_access_flags = IBV_ACCESS_LOCAL_WRITE |
				   IBV_ACCESS_REMOTE_WRITE |
				   IBV_ACCESS_REMOTE_READ,
	};
	modify(r->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
				  IBV_QP_ACCESS_FLAGS, "QP to INIT");
	a = (struct ibv_qp_attr){
		.qp_state = IBV_QPS_RTR,
		.path_mtu = r->port_attr.active_mtu,
		.dest_qp_num = them.qpn,
		.rq_psn = them.psn,
		.max_dest_rd_atomic = 1,
		.min_rnr_timer = 12,
		.ah_attr = { .port_num = r->port, .dlid = them.lid },
	};
	if (r->gid_index >= 0) {
		a.ah_attr.is_global = 1;
		memcpy(a.ah_attr.grh.dgid.raw, them.gid, sizeof(them.gid));
		a.ah_attr.grh.sgid_index = (uint8_t)r->gid_index;
		a.ah_attr.grh.hop_limit = 1;
	}
	modify(r->qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
				  IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
				  IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER,
	       "QP to RTR");
	a = (struct ibv_qp_attr){
		.qp_state = IBV_QPS_RTS,
		.timeout = 14,
		.retry_cnt = 7,
		.rnr_retry = 7,
		.sq_psn = me.psn,
		.max_rd_atomic = 1,
	};
	modify(r->qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
				  IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
				  IBV_QP_MAX_QP_RD_ATOMIC, "QP to RTS");
}

/* One signalled RDMA WRITE or READ, waited for. */
static void rdma_op(struct rdma *r, enum ibv_wr_opcode op, void *local,
		    uint32_t lkey, size_t len, const struct exposed *x)
{
	struct ibv_sge sge = { .addr = (uintptr_t)local, .length = (uint32_t)len,
			       .lkey = lkey };
	struct ibv_send_wr wr = {
		.wr_id = 42,
		.sg_list = &sge,
		.num_sge = 1,
		.opcode = op,
		.wr.rdma = { .remote_addr = x->addr, .rkey = x->rkey },
	}, *bad;
	struct timespec t0, t;
	struct ibv_wc wc;
	int n;

	check(ibv_post_send(r->qp, &wr, &bad), "ibv_post_send");
	clock_gettime(CLOCK_MONOTONIC, &t0);
	while ((n = ibv_poll_cq(r->cq, 1, &wc)) == 0) {
		clock_gettime(CLOCK_MONOTONIC, &t);
		if (t.tv_sec - t0.tv_sec > COMPLETION_TIMEOUT_S)
			die("no completion after %d s", COMPLETION_TIMEOUT_S);
	}
	if (n < 0)
		die("ibv_poll_cq failed");
	if (wc.status != IBV_WC_SUCCESS)
		die("RDMA %s of %zu bytes: %s", op == IBV_WR_RDMA_WRITE ? "WRITE" : "READ",
		    len, ibv_wc_status_str(wc.status));
}

/* A pattern no two rounds or sides share, so a misplaced byte shows. */
static uint8_t pattern(uint32_t seed, size_t i)
{
	uint32_t x = seed * 2654435761u + (uint32_t)(i / 4093) * 40503u;

	return (uint8_t)(x >> 24 ^ i);
}

static void fill(uint8_t *p, size_t len, uint32_t seed)
{
	for (size_t i = 0; i < len; i++)
		p[i] = pattern(seed, i);
}

static void expect(const uint8_t *p, size_t len, uint32_t seed,
		   const char *what, int round)
{
	for (size_t i = 0; i < len; i++)
		if (p[i] != pattern(seed, i))
			die("round %d: %s: byte %zu of %zu is %#x, expected %#x"
			    " (a stale registration?)", round, what, i, len,
			    p[i], pattern(seed, i));
}

/* What the target does to its buffer before a round. */
enum action { FIRST, REUSE, GROW, REMAP, MOVE };

static const struct {
	enum action action;
	size_t length;
} plan[] = {
	{ FIRST, 64 << 10 },  { REUSE, 64 << 10 },  { REUSE, 64 << 10 },
	{ GROW, 256 << 10 },  { GROW, 1 << 20 },    { GROW, 4 << 20 },
	{ REUSE, 4 << 20 },   { REMAP, 4 << 20 },   { REUSE, 4 << 20 },
	{ REMAP, 128 << 10 }, { MOVE, 512 << 10 },  { REUSE, 512 << 10 },
};
#define ROUNDS ((int)(sizeof(plan) / sizeof(plan[0])))

static const char *action_name(enum action a)
{
	static const char *const names[] = { "first", "reuse", "grow", "remap",
					     "move" };
	return names[a];
}

static void *map_at(void *hint)
{
	int flags = MAP_PRIVATE | MAP_ANONYMOUS | (hint ? MAP_FIXED : 0);
	void *p = mmap(hint, MAP_BYTES, PROT_READ | PROT_WRITE, flags, -1, 0);

	if (p == MAP_FAILED)
		die("mmap: %s", strerror(errno));
	return p;
}

static void target(struct rdma *r, mrmgr_cache_t *cache, int watched,
		   uint64_t *checked)
{
	const unsigned int access = IBV_ACCESS_LOCAL_WRITE |
				    IBV_ACCESS_REMOTE_WRITE |
				    IBV_ACCESS_REMOTE_READ;
	uint8_t *buf = map_at(NULL);
	uint64_t last_gen = 0;

	(void)r;
	for (int i = 0; i < ROUNDS; i++) {
		size_t len = plan[i].length;
		mrmgr_region_t *reg;
		struct exposed x;
		uint64_t gen;

		if (plan[i].action == REMAP) {
			/* Same address, new pages: only the monitor can tell. */
			void *old = buf;

			if (munmap(buf, MAP_BYTES))
				die("munmap: %s", strerror(errno));
			buf = map_at(old);
		} else if (plan[i].action == MOVE) {
			uint8_t *old = buf;

			buf = map_at(NULL);
			if (munmap(old, MAP_BYTES))
				die("munmap: %s", strerror(errno));
		}
		fill(buf, len, 1000u + (uint32_t)i);
		check(mrmgr_get(cache, buf, len, access, &reg), "mrmgr_get (target)");
		gen = mrmgr_region_generation(reg);
		x = (struct exposed){ .addr = (uintptr_t)buf, .length = len,
				      .rkey = mrmgr_region_rkey(reg),
				      .seed = 2000u + (uint32_t)i };
		MPI_Send(&x, sizeof(x), MPI_BYTE, 0, 2, MPI_COMM_WORLD);
		/* The initiator READs our pattern, then WRITEs its own. */
		MPI_Recv(NULL, 0, MPI_BYTE, 0, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
		expect(buf, len, x.seed, "target buffer after the peer's WRITE", i);
		*checked += len;
		/* The bytes are the proof; the generation says why. */
		if ((plan[i].action == REMAP || plan[i].action == MOVE) &&
		    gen == last_gen)
			die("round %d: the cache handed out the registration of"
			    " the unmapped pages", i);
		/* Unwatched memory is not cached: every get registers. */
		if (watched && plan[i].action == REUSE && gen != last_gen)
			die("round %d: reuse registered again", i);
		last_gen = gen;
		mrmgr_put(reg);
		printf("round %2d (%-5s) target: %7zu bytes, rkey %#x, generation %llu: ok\n",
		       i, action_name(plan[i].action), len, x.rkey,
		       (unsigned long long)gen);
		fflush(stdout);
	}
	munmap(buf, MAP_BYTES);
}

static void initiator(struct rdma *r, mrmgr_cache_t *cache, uint64_t *checked)
{
	mrmgr_buf_t *src;
	uint8_t *dst = NULL;

	/* The WRITE source grows and shrinks with the rounds. */
	check(mrmgr_buf_create(cache, 0, IBV_ACCESS_LOCAL_WRITE, &src),
	      "mrmgr_buf_create");
	for (int i = 0; i < ROUNDS; i++) {
		mrmgr_region_t *reg;
		struct exposed x;
		uint8_t *p;

		MPI_Recv(&x, sizeof(x), MPI_BYTE, 1, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
		/* The READ sink: realloc() may move it, free its old pages, or
		 * keep them; the cache follows without being told. */
		p = realloc(dst, x.length);
		if (!p)
			die("realloc: out of memory");
		dst = p;
		memset(dst, 0, x.length);
		check(mrmgr_get(cache, dst, x.length, IBV_ACCESS_LOCAL_WRITE, &reg),
		      "mrmgr_get (initiator)");
		rdma_op(r, IBV_WR_RDMA_READ, dst, mrmgr_region_lkey(reg), x.length, &x);
		expect(dst, x.length, 1000u + (uint32_t)i, "READ of the target", i);
		*checked += x.length;
		mrmgr_put(reg);

		check(mrmgr_buf_resize(src, x.length), "mrmgr_buf_resize");
		fill(mrmgr_buf_data(src), x.length, x.seed);
		rdma_op(r, IBV_WR_RDMA_WRITE, mrmgr_buf_data(src), mrmgr_buf_lkey(src),
			x.length, &x);
		MPI_Send(NULL, 0, MPI_BYTE, 1, 3, MPI_COMM_WORLD);
		printf("round %2d (%-5s) initiator: READ + WRITE %7zu bytes,"
		       " source capacity %zu: ok\n", i, action_name(plan[i].action),
		       (size_t)x.length, mrmgr_buf_capacity(src));
		fflush(stdout);
	}
	check(mrmgr_buf_destroy(src), "mrmgr_buf_destroy");
	free(dst);
}

int main(int argc, char **argv)
{
	struct rdma r = { 0 };
	mrmgr_cache_t *cache;
	struct mrmgr_stats st;
	struct mrmgr_monitor_info mi;
	uint64_t checked = 0, all;
	int size, watched;

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	if (size != 2) {
		if (rank == 0)
			fprintf(stderr, "mpi_rdma: run with 2 ranks (mpirun -np 2)\n");
		MPI_Finalize();
		return 1;
	}
	if (!open_device(&r)) {
		if (rank == 0)
			printf("mpi_rdma: no RDMA device with an active port: skipped\n");
		if (r.ctx)
			ibv_close_device(r.ctx);
		MPI_Finalize();
		return EXIT_SKIP;
	}
	if (rank == 0)
		printf("device: %s\n", ibv_get_device_name(r.ctx->device));
	pick_address(&r);
	r.pd = ibv_alloc_pd(r.ctx);
	r.cq = ibv_create_cq(r.ctx, CQ_DEPTH, NULL, NULL, 0);
	if (!r.pd || !r.cq)
		die("ibv_alloc_pd/ibv_create_cq: %s", strerror(errno));
	connect_qp(&r, 1 - rank);
	/* The defaults: automatic memory-event monitoring, no invalidate calls. */
	check(mrmgr_cache_create(r.pd, NULL, &cache), "mrmgr_cache_create");
	check(mrmgr_cache_query_monitor(cache, &mi, sizeof(mi)), "query monitor");
	watched = mi.sources != 0;
	if (!watched)
		printf("rank %d: no memory-event source in this process: the cache"
		       " registers every get\n", rank);

	if (rank == 0)
		initiator(&r, cache, &checked);
	else
		target(&r, cache, watched, &checked);

	check(mrmgr_cache_query_stats(cache, &st, sizeof(st)), "query stats");
	check(mrmgr_cache_query_monitor(cache, &mi, sizeof(mi)), "query monitor");
	printf("rank %d: hits %llu, misses %llu, registrations %llu, grows %llu,"
	       " invalidations %llu, monitor events %llu (sources %#x)\n", rank,
	       (unsigned long long)st.hits, (unsigned long long)st.misses,
	       (unsigned long long)st.registrations, (unsigned long long)st.grows,
	       (unsigned long long)st.invalidations,
	       (unsigned long long)mi.events, mi.sources);
	if (rank == 1 && watched &&
	    (st.hits < 3 || st.grows < 1 || st.invalidations < 2))
		die("target: expected hits (reuse), growth and invalidations"
		    " (remap, move)");
	fflush(stdout);
	check(mrmgr_cache_destroy(cache), "mrmgr_cache_destroy");
	check(ibv_destroy_qp(r.qp), "ibv_destroy_qp");
	check(ibv_destroy_cq(r.cq), "ibv_destroy_cq");
	check(ibv_dealloc_pd(r.pd), "ibv_dealloc_pd (a leaked MR?)");
	check(ibv_close_device(r.ctx), "ibv_close_device");

	MPI_Reduce(&checked, &all, 1, MPI_UINT64_T, MPI_SUM, 0, MPI_COMM_WORLD);
	if (rank == 0)
		printf("mpi_rdma: %d rounds, %llu bytes checked, every byte as"
		       " expected\n", ROUNDS, (unsigned long long)all);
	MPI_Finalize();
	return 0;
}
