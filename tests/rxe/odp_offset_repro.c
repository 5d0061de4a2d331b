/*
 * odp_offset_repro: rdma_rxe's ODP copy ignores the offset inside a page.
 *
 * A standalone reproducer (libibverbs only) for
 * doc/rxe-odp-page-offset-bug.md. On one rxe device it connects two RC QPs
 * to each other (loopback through the device's own GID) and, into and out
 * of an explicit ODP MR (IBV_ACCESS_ON_DEMAND), does:
 *   1. RDMA WRITE of 256 bytes at page offset 100;
 *   2. RDMA READ of 256 bytes at page offset 100;
 *   3. the same WRITE into a pinned MR (the control: always right);
 *   4. RDMA WRITE of 8 KiB at offset 0 with path MTU 1024 (several packets),
 *      which the bug hits too when the MTU is below the page size.
 * Every completion is IBV_WC_SUCCESS; the bytes say whether they landed
 * where they were sent.
 *
 *   cc -o odp_offset_repro odp_offset_repro.c -libverbs
 *   rdma link add rxe0 type rxe netdev eth0     # as root, once
 *   ./odp_offset_repro [-d rxe0]
 *
 * Exit status: 0 every transfer right; 1 the bug reproduced (any ODP case
 * wrong while the pinned control is right); 2 cannot run (no device, no
 * ODP, a verb failed, or the pinned control itself wrong).
 *
 * SPDX-License-Identifier: MIT
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#define PG 4096u
#define OFF 100u
#define N 256u
#define BIG (2 * PG)

struct ctx {
	struct ibv_context *dev;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_qp *qp[2];
	union ibv_gid gid;
	int gid_index;
};

static void die(const char *what)
{
	fprintf(stderr, "odp_offset_repro: cannot run: %s: %s\n", what,
		strerror(errno));
	exit(2);
}

static void *map(size_t len)
{
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED)
		die("mmap");
	memset(p, 0, len);
	return p;
}

static void fill(unsigned char *p, size_t len, unsigned int seed)
{
	for (size_t i = 0; i < len; i++)
		p[i] = (unsigned char)(i * 131 + seed * 7 + 1);
}

static void modify(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask)
{
	errno = ibv_modify_qp(qp, a, mask);
	if (errno)
		die("ibv_modify_qp");
}

/* RESET -> INIT -> RTR (to @p peer, @p mtu) -> RTS. */
static void connect_qp(struct ctx *c, struct ibv_qp *qp, uint32_t peer,
		       enum ibv_mtu mtu)
{
	struct ibv_qp_attr a;

	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RESET;
	modify(qp, &a, IBV_QP_STATE);
	a.qp_state = IBV_QPS_INIT;
	a.port_num = 1;
	a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
	modify(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
			       IBV_QP_ACCESS_FLAGS);
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTR;
	a.path_mtu = mtu;
	a.dest_qp_num = peer;
	a.max_dest_rd_atomic = 1;
	a.min_rnr_timer = 12;
	a.ah_attr.port_num = 1;
	a.ah_attr.is_global = 1;
	a.ah_attr.grh.dgid = c->gid;
	a.ah_attr.grh.sgid_index = (uint8_t)c->gid_index;
	a.ah_attr.grh.hop_limit = 1;
	modify(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
			       IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
			       IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
	memset(&a, 0, sizeof(a));
	a.qp_state = IBV_QPS_RTS;
	a.timeout = 14;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.max_rd_atomic = 1;
	modify(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
			       IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
			       IBV_QP_MAX_QP_RD_ATOMIC);
}

static void connect_pair(struct ctx *c, enum ibv_mtu mtu)
{
	connect_qp(c, c->qp[0], c->qp[1]->qp_num, mtu);
	connect_qp(c, c->qp[1], c->qp[0]->qp_num, mtu);
}

static void open_ctx(struct ctx *c, const char *name)
{
	struct ibv_device **list = ibv_get_device_list(NULL);
	struct ibv_device_attr_ex ax;
	struct ibv_qp_init_attr qa;
	int i;

	memset(c, 0, sizeof(*c));
	if (!list)
		die("ibv_get_device_list");
	for (i = 0; list[i]; i++)
		if (!name || !strcmp(ibv_get_device_name(list[i]), name))
			break;
	if (!list[i]) {
		errno = ENODEV;
		die(name ? name : "no RDMA device");
	}
	c->dev = ibv_open_device(list[i]);
	ibv_free_device_list(list);
	if (!c->dev)
		die("ibv_open_device");
	memset(&ax, 0, sizeof(ax));
	if (ibv_query_device_ex(c->dev, NULL, &ax) ||
	    !(ax.odp_caps.general_caps & IBV_ODP_SUPPORT)) {
		errno = EOPNOTSUPP;
		die("the device reports no ODP (rxe has it from Linux 6.15)");
	}
	/* GID 0: the netdev's IPv6 link-local address, RoCE v2 on rxe. */
	c->gid_index = 0;
	if (ibv_query_gid(c->dev, 1, c->gid_index, &c->gid))
		die("ibv_query_gid");
	c->pd = ibv_alloc_pd(c->dev);
	c->cq = c->pd ? ibv_create_cq(c->dev, 16, NULL, NULL, 0) : NULL;
	if (!c->cq)
		die("ibv_alloc_pd/ibv_create_cq");
	memset(&qa, 0, sizeof(qa));
	qa.send_cq = qa.recv_cq = c->cq;
	qa.qp_type = IBV_QPT_RC;
	qa.cap.max_send_wr = qa.cap.max_recv_wr = 4;
	qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
	for (i = 0; i < 2; i++)
		if (!(c->qp[i] = ibv_create_qp(c->pd, &qa)))
			die("ibv_create_qp");
}

/* One RDMA WRITE or READ on qp[0], waited for; returns its status. */
static enum ibv_wc_status rdma(struct ctx *c, enum ibv_wr_opcode op,
			       struct ibv_mr *lmr, void *laddr, struct ibv_mr *rmr,
			       void *raddr, uint32_t len)
{
	struct ibv_sge sge = { (uintptr_t)laddr, len, lmr->lkey };
	struct ibv_send_wr wr, *bad;
	struct ibv_wc wc;
	int n;

	memset(&wr, 0, sizeof(wr));
	wr.opcode = op;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.wr.rdma.remote_addr = (uintptr_t)raddr;
	wr.wr.rdma.rkey = rmr->rkey;
	if ((errno = ibv_post_send(c->qp[0], &wr, &bad)))
		die("ibv_post_send");
	while ((n = ibv_poll_cq(c->cq, 1, &wc)) == 0)
		;
	if (n < 0)
		die("ibv_poll_cq");
	return wc.status;
}

static struct ibv_mr *reg(struct ctx *c, void *p, size_t len, int odp)
{
	struct ibv_mr *mr = ibv_reg_mr(c->pd, p, len,
				       IBV_ACCESS_LOCAL_WRITE |
					       IBV_ACCESS_REMOTE_WRITE |
					       IBV_ACCESS_REMOTE_READ |
					       (odp ? IBV_ACCESS_ON_DEMAND : 0));

	if (!mr)
		die(odp ? "ibv_reg_mr(ON_DEMAND)" : "ibv_reg_mr");
	return mr;
}

/* "right", "page start" or "elsewhere": where @p len bytes landed. */
static const char *landed(const unsigned char *page, size_t off,
			  const unsigned char *want, size_t len, int *ok)
{
	*ok = !memcmp(page + off, want, len);
	if (*ok)
		return "at the right offset";
	if (!memcmp(page, want, len))
		return "at the PAGE START (wrong)";
	return "elsewhere (wrong)";
}

static void report(const char *what, enum ibv_wc_status st, const char *where)
{
	printf("%-44s completion %-8s bytes %s\n", what, ibv_wc_status_str(st), where);
}

int main(int argc, char **argv)
{
	const char *name = NULL;
	unsigned char *src, *dst, *pin, *big, *bigsrc;
	struct ibv_mr *msrc, *mdst, *mpin, *mbig, *mbigsrc;
	struct ctx c;
	enum ibv_wc_status st;
	int ok, odp_bad = 0, control_ok;

	if (argc == 3 && !strcmp(argv[1], "-d"))
		name = argv[2];
	else if (argc != 1) {
		fprintf(stderr, "usage: %s [-d DEVICE]\n", argv[0]);
		return 2;
	}
	open_ctx(&c, name);
	printf("device %s\n", ibv_get_device_name(c.dev->device));
	src = map(PG);
	dst = map(2 * PG);
	pin = map(2 * PG);
	bigsrc = map(BIG);
	big = map(BIG);
	msrc = reg(&c, src, PG, 0);
	mbigsrc = reg(&c, bigsrc, BIG, 0);
	mdst = reg(&c, dst, 2 * PG, 1);
	mpin = reg(&c, pin, 2 * PG, 0);
	mbig = reg(&c, big, BIG, 1);
	connect_pair(&c, IBV_MTU_4096);

	/* 3 first: the control, a pinned MR at the same offset. */
	fill(src, N, 1);
	st = rdma(&c, IBV_WR_RDMA_WRITE, msrc, src, mpin, pin + OFF, N);
	report("WRITE 256 B at offset 100, pinned MR", st,
	       landed(pin, OFF, src, N, &control_ok));
	control_ok = control_ok && st == IBV_WC_SUCCESS;

	/* 1. WRITE into the ODP MR at the offset. */
	st = rdma(&c, IBV_WR_RDMA_WRITE, msrc, src, mdst, dst + OFF, N);
	report("WRITE 256 B at offset 100, ODP MR", st, landed(dst, OFF, src, N, &ok));
	odp_bad |= !ok;

	/* 2. READ out of the ODP MR at the offset. */
	memset(dst, 0, 2 * PG);
	fill(dst + OFF, N, 2);
	memset(src, 0, PG);
	st = rdma(&c, IBV_WR_RDMA_READ, msrc, src, mdst, dst + OFF, N);
	ok = !memcmp(src, dst + OFF, N);
	report("READ 256 B at offset 100, ODP MR", st,
	       ok ? "at the right offset"
	       : !memcmp(src, dst, N) ? "from the PAGE START (wrong)"
				      : "from elsewhere (wrong)");
	odp_bad |= !ok;

	/* 4. Page-aligned, several packets: path MTU 1024. */
	connect_pair(&c, IBV_MTU_1024);
	fill(bigsrc, BIG, 3);
	st = rdma(&c, IBV_WR_RDMA_WRITE, mbigsrc, bigsrc, mbig, big, BIG);
	ok = !memcmp(big, bigsrc, BIG);
	report("WRITE 8 KiB at offset 0, MTU 1024, ODP MR", st,
	       ok ? "all right" : "WRONG (packets after the first misplaced)");
	odp_bad |= !ok;

	if (!control_ok) {
		printf("verdict: cannot tell: the pinned control went wrong\n");
		return 2;
	}
	if (odp_bad) {
		printf("verdict: BUG: the ODP copy ignores the offset inside a page\n");
		return 1;
	}
	printf("verdict: OK: every ODP transfer landed where it was sent\n");
	return 0;
}
