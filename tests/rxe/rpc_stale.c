/*
 * rpc_stale: an RDMA "RPC" between two nodes in which the server's cached
 * registration is invalidated by a free() while the client still holds the
 * rkey. Run by tests/rxe/two-node.sh, one process per guest, over rxe0 on
 * each guest's virtio NIC (the wire is a qemu socket netdev).
 *
 *   rpc_stale server PORT       on node1
 *   rpc_stale client HOST PORT  on node2
 *
 * The bootstrap (QP numbers, GIDs, the buffer's address and rkey, and the
 * steps below) goes over a TCP connection on the same emulated link.
 *  1. The server gets a 1 MiB malloc()ed buffer from its libmrmgr cache
 *     (default configuration: the memory-event monitor on) and sends its
 *     address and rkey; the client RDMA-WRITEs 'W' into it: the server sees
 *     every byte. The server puts the region (idle, still cached).
 *  2. The server free()s the buffer (glibc unmaps it: mmap threshold fixed
 *     at 128 KiB) and maps fresh memory at the same address, filled 'B':
 *     the reused memory the stale rkey points at. Its next RPC's get (of
 *     another buffer) runs the cache, which must have dropped and
 *     deregistered the old registration (mrmgr_stats: an invalidation and
 *     a deregistration).
 *  3. The client RDMA-WRITEs 'X' with the rkey it still holds: the write
 *     must complete with IBV_WC_REM_ACCESS_ERR, and the server's reused
 *     memory must still hold only 'B' (and the other buffer its own bytes).
 * Each side prints its verdict; exit 0 when everything above held, 1 when
 * not, 2 when it could not run (no device, a verb or the socket failed).
 *
 * SPDX-License-Identifier: MIT
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <malloc.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <infiniband/verbs.h>
#include <mrmgr/mrmgr.h>

#define LEN (1024 * 1024)

struct wire { /* what each side sends once */
	uint32_t qpn;
	uint32_t psn;
	uint8_t gid[16];
	uint64_t addr; /* server: the buffer */
	uint32_t rkey;
	uint32_t len;
};

struct node {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp;
	int gid_index;
	union ibv_gid gid;
	int sock;
};

static const char *role = "rpc_stale";

static void die(const char *what)
{
	fprintf(stderr, "%s: cannot run: %s: %s\n", role, what, strerror(errno));
	exit(2);
}

static void xfer(int fd, void *p, size_t n, int out)
{
	char *c = p;

	while (n) {
		ssize_t k = out ? write(fd, c, n) : read(fd, c, n);

		if (k <= 0) {
			if (k < 0 && errno == EINTR)
				continue;
			if (!k)
				errno = ECONNRESET;
			die(out ? "write to peer" : "read from peer");
		}
		c += k;
		n -= (size_t)k;
	}
}

static void say(int fd, char step)
{
	xfer(fd, &step, 1, 1);
}

static char hear(int fd)
{
	char step;

	xfer(fd, &step, 1, 0);
	return step;
}

/* rxe0 (the first device), a PD, a CQ, an RC QP; the IPv4-mapped RoCE v2
 * GID of the NIC's address, which routes over the link like the address. */
static void open_node(struct node *n)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_qp_init_attr qa;
	struct ibv_port_attr pa;

	if (!list || !list[0]) {
		errno = ENODEV;
		die("no RDMA device");
	}
	n->ctx = ibv_open_device(list[0]);
	ibv_free_device_list(list);
	if (!n->ctx)
		die("ibv_open_device");
	if (ibv_query_port(n->ctx, 1, &pa))
		die("ibv_query_port");
	n->gid_index = -1;
	for (int i = 0; i < pa.gid_tbl_len && n->gid_index < 0; i++) {
		struct ibv_gid_entry e;
		static const uint8_t v4[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };

		if (ibv_query_gid_ex(n->ctx, 1, (uint32_t)i, &e, 0) == 0 &&
		    e.gid_type == IBV_GID_TYPE_ROCE_V2 && !memcmp(e.gid.raw, v4, 12)) {
			n->gid_index = i;
			n->gid = e.gid;
		}
	}
	if (n->gid_index < 0) {
		errno = ENOENT;
		die("no IPv4 RoCE v2 GID on port 1");
	}
	n->pd = ibv_alloc_pd(n->ctx);
	n->cq = n->pd ? ibv_create_cq(n->ctx, 8, NULL, NULL, 0) : NULL;
	if (!n->cq)
		die("ibv_alloc_pd/ibv_create_cq");
	memset(&qa, 0, sizeof(qa));
	qa.send_cq = qa.recv_cq = n->cq;
	qa.qp_type = IBV_QPT_RC;
	qa.cap.max_send_wr = qa.cap.max_recv_wr = 4;
	qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
	n->qp = ibv_create_qp(n->pd, &qa);
	if (!n->qp)
		die("ibv_create_qp");
}

static void modify(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask)
{
	errno = ibv_modify_qp(qp, a, mask);
	if (errno)
		die("ibv_modify_qp");
}

static void connect_qp(struct node *n, const struct wire *me,
		       const struct wire *peer)
{
	struct ibv_qp_attr a;

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	modify(n->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
				  IBV_QP_ACCESS_FLAGS);
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = IBV_MTU_1024;
	a.dest_qp_num = peer->qpn;
	a.rq_psn = peer->psn;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 12;
	a.ah_attr.port_num = 1;
	a.ah_attr.is_global = 1;
	memcpy(a.ah_attr.grh.dgid.raw, peer->gid, 16);
	a.ah_attr.grh.sgid_index = (uint8_t)n->gid_index;
	a.ah_attr.grh.hop_limit = 64;
	modify(n->qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
				  IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
				  IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.sq_psn = me->psn;
	a.max_rd_atomic = 1;
	modify(n->qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
				  IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
				  IBV_QP_MAX_QP_RD_ATOMIC);
}

static void fill_wire(struct node *n, struct wire *w, uint32_t psn)
{
	memset(w, 0, sizeof(*w));
	w->qpn = n->qp->qp_num;
	w->psn = psn;
	memcpy(w->gid, n->gid.raw, 16);
}

/* Every byte of [p, p+len) is c? Prints the first that is not. */
static int all_bytes(const unsigned char *p, size_t len, int c, const char *what)
{
	for (size_t i = 0; i < len; i++)
		if (p[i] != (unsigned char)c) {
			printf("%s: %s: byte %zu is 0x%02x, not '%c'\n", role, what, i,
			       p[i], c);
			return 0;
		}
	printf("%s: %s: %zu bytes of '%c'\n", role, what, len, c);
	return 1;
}

/* ------------------------------------------------------------ server */

/*
 * Step 2 of the server: free() the RPC's buffer (its region idle in @p c),
 * map fresh memory filled 'B' at the same address (*reused, *rlen bytes),
 * and get the next RPC's buffer (*other, 'o', held in *r2), which runs the
 * cache. 1 when the cache invalidated and deregistered the old
 * registration by then.
 */
static int free_and_reuse(mrmgr_cache_t *c, unsigned char *buf,
			  unsigned char **reused, size_t *rlen,
			  unsigned char **other, mrmgr_region_t **r2)
{
	struct mrmgr_stats st0, st1;
	int ret;

	if ((ret = mrmgr_cache_query_stats(c, &st0, sizeof(st0))))
		errno = ret, die("mrmgr_cache_query_stats");
	/* glibc's chunk: a header, then the 1 MiB, in one mapping of
	 * LEN + a page from the page below buf. */
	uintptr_t page = (uintptr_t)buf & ~(uintptr_t)4095;

	free(buf);
	*rlen = LEN + 4096;
	*reused = mmap((void *)page, *rlen, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
	if (*reused != (void *)page)
		die("mmap at the freed address (was it unmapped?)");
	memset(*reused, 'B', *rlen);
	*other = malloc(LEN);
	if (!*other)
		die("malloc");
	memset(*other, 'o', LEN);
	if ((ret = mrmgr_get(c, *other, LEN, IBV_ACCESS_LOCAL_WRITE |
			     IBV_ACCESS_REMOTE_WRITE, r2)))
		errno = ret, die("mrmgr_get of the next RPC's buffer");
	if ((ret = mrmgr_cache_query_stats(c, &st1, sizeof(st1))))
		errno = ret, die("mrmgr_cache_query_stats");
	printf("%s: reused memory at %p; the next RPC's buffer at %p; free(): "
	       "invalidations %llu -> %llu, deregistrations %llu -> %llu\n",
	       role, (void *)*reused,
	       (void *)*other, (unsigned long long)st0.invalidations,
	       (unsigned long long)st1.invalidations,
	       (unsigned long long)st0.deregistrations,
	       (unsigned long long)st1.deregistrations);
	if (st1.invalidations > st0.invalidations &&
	    st1.deregistrations > st0.deregistrations)
		return 1;
	printf("%s: the free() did not invalidate the cached registration\n", role);
	return 0;
}

static int server(int port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET,
				  .sin_port = htons((uint16_t)port),
				  .sin_addr.s_addr = htonl(INADDR_ANY) };
	struct wire me, peer;
	struct node n;
	mrmgr_cache_t *c = NULL;
	mrmgr_region_t *r = NULL, *r2 = NULL;
	int one = 1, lfd, ok = 1, ret;
	unsigned char *buf, *other, *reused;
	size_t rlen;
	char status;

	role = "rpc_stale server";
	/* glibc serves 1 MiB with its own mmap and unmaps it on free(). */
	mallopt(M_MMAP_THRESHOLD, 128 * 1024);
	open_node(&n);
	if ((ret = mrmgr_cache_create(n.pd, NULL, &c)))
		errno = ret, die("mrmgr_cache_create");
	lfd = socket(AF_INET, SOCK_STREAM, 0);
	if (lfd < 0 || setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) ||
	    bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) || listen(lfd, 1))
		die("listen");
	printf("%s: listening on port %d, device %s\n", role, port,
	       ibv_get_device_name(n.ctx->device));
	fflush(stdout);
	n.sock = accept(lfd, NULL, NULL);
	if (n.sock < 0)
		die("accept");

	/* 1. A buffer of this RPC, from the cache; its keys to the client. */
	buf = malloc(LEN);
	if (!buf)
		die("malloc");
	memset(buf, 0, LEN);
	if ((ret = mrmgr_get(c, buf, LEN, IBV_ACCESS_LOCAL_WRITE |
			     IBV_ACCESS_REMOTE_WRITE, &r)))
		errno = ret, die("mrmgr_get");
	fill_wire(&n, &me, 0x1234);
	me.addr = (uintptr_t)buf;
	me.rkey = mrmgr_region_rkey(r);
	me.len = LEN;
	xfer(n.sock, &peer, sizeof(peer), 0);
	xfer(n.sock, &me, sizeof(me), 1);
	connect_qp(&n, &me, &peer);
	say(n.sock, 'R');
	if (hear(n.sock) != '1')
		die("step 1");
	ok &= all_bytes(buf, LEN, 'W', "RPC 1: the client's WRITE through the cached rkey");
	mrmgr_put(r); /* idle in the cache: the next RPC would hit it */

	/* 2. free(): the cached registration must go; the same address is
	 * reused at once, and the next RPC gets another buffer. */
	ok &= free_and_reuse(c, buf, &reused, &rlen, &other, &r2);
	say(n.sock, '2');

	/* 3. The client's WRITE through the old rkey: refused, nothing here. */
	status = hear(n.sock);
	printf("%s: the client's stale-rkey WRITE completed with %s\n", role,
	       status == 'A' ? "a remote access error" : "SOMETHING ELSE");
	ok &= status == 'A';
	ok &= all_bytes(reused, rlen, 'B', "RPC 2: the reused memory at the old address");
	ok &= all_bytes(other, LEN, 'o', "RPC 2: the next RPC's buffer");
	mrmgr_put(r2);
	say(n.sock, ok ? 'Y' : 'N');
	printf("%s: %s\n", role, ok ? "PASS: the stale rkey reached nothing"
				     : "FAIL");
	return ok ? 0 : 1;
}

/* ------------------------------------------------------------ client */

static enum ibv_wc_status write_remote(struct node *n, struct ibv_mr *mr,
				       const struct wire *srv)
{
	struct ibv_sge sge = { (uintptr_t)mr->addr, srv->len, mr->lkey };
	struct ibv_send_wr wr, *bad;
	struct ibv_wc wc;
	int k;

	memset(&wr, 0, sizeof(wr));
	wr.opcode = IBV_WR_RDMA_WRITE;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.wr.rdma.remote_addr = srv->addr;
	wr.wr.rdma.rkey = srv->rkey;
	if ((errno = ibv_post_send(n->qp, &wr, &bad)))
		die("ibv_post_send");
	while ((k = ibv_poll_cq(n->cq, 1, &wc)) == 0)
		;
	if (k < 0)
		die("ibv_poll_cq");
	return wc.status;
}

static int client(const char *host, const char *port)
{
	struct addrinfo hints = { .ai_family = AF_INET, .ai_socktype = SOCK_STREAM };
	struct addrinfo *ai;
	struct wire me, srv;
	struct node n;
	struct ibv_mr *mr;
	enum ibv_wc_status st;
	unsigned char *src;
	int ok;

	role = "rpc_stale client";
	open_node(&n);
	if (getaddrinfo(host, port, &hints, &ai))
		die("getaddrinfo");
	n.sock = socket(AF_INET, SOCK_STREAM, 0);
	if (n.sock < 0 || connect(n.sock, ai->ai_addr, ai->ai_addrlen))
		die("connect to the server");
	freeaddrinfo(ai);
	printf("%s: connected to %s:%s, device %s\n", role, host, port,
	       ibv_get_device_name(n.ctx->device));
	src = mmap(NULL, LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (src == MAP_FAILED)
		die("mmap");
	mr = ibv_reg_mr(n.pd, src, LEN, IBV_ACCESS_LOCAL_WRITE);
	if (!mr)
		die("ibv_reg_mr");
	fill_wire(&n, &me, 0x5678);
	xfer(n.sock, &me, sizeof(me), 1);
	xfer(n.sock, &srv, sizeof(srv), 0);
	if (srv.len != LEN) {
		errno = EPROTO;
		die("server's buffer length");
	}
	connect_qp(&n, &me, &srv);
	if (hear(n.sock) != 'R')
		die("server not ready");

	memset(src, 'W', LEN);
	st = write_remote(&n, mr, &srv);
	printf("%s: RPC 1: WRITE of %u bytes to %#llx rkey %#x: %s\n", role, srv.len,
	       (unsigned long long)srv.addr, srv.rkey, ibv_wc_status_str(st));
	if (st != IBV_WC_SUCCESS) {
		printf("%s: FAIL: the first WRITE did not succeed\n", role);
		return 1;
	}
	say(n.sock, '1');
	if (hear(n.sock) != '2')
		die("step 2");

	memset(src, 'X', LEN);
	st = write_remote(&n, mr, &srv);
	printf("%s: RPC 2: WRITE through the rkey it kept (%#x), after the server's free(): %s\n",
	       role, srv.rkey, ibv_wc_status_str(st));
	ok = st == IBV_WC_REM_ACCESS_ERR;
	say(n.sock, ok ? 'A' : 'S');
	ok &= hear(n.sock) == 'Y';
	printf("%s: %s\n", role, ok ? "PASS: remote access error, the server's memory untouched"
				     : "FAIL");
	return ok ? 0 : 1;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc == 3 && !strcmp(argv[1], "server"))
		return server(atoi(argv[2]));
	if (argc == 4 && !strcmp(argv[1], "client"))
		return client(argv[2], argv[3]);
	fprintf(stderr, "usage: %s server PORT | client HOST PORT\n", argv[0]);
	return 2;
}
