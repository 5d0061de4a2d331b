/*
 * rdma_fixture: a real RDMA device, a PD and a loopback RC QP pair for
 * Criterion tests. The rules are in rdma_fixture.h.
 *
 * SPDX-License-Identifier: MIT
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <criterion/criterion.h>
#include <criterion/logging.h>

#include "rdma_fixture.h"

/* Soft-RoCE reports this vendor id (the kernel's RXE_VENDOR_ID). */
#define RXE_VENDOR_ID 0xffffff
/* Generous: under qemu TCG a 1 MiB transfer takes tens of milliseconds,
 * and a loaded CI host can stretch that a lot. */
#define COMPLETION_TIMEOUT_S 30
#define SQ_DEPTH 16
#define CQ_DEPTH 64
#define START_PSN 0x1234

static int env_flag(const char *name)
{
	const char *v = getenv(name);

	return v && *v && strcmp(v, "0") != 0;
}

/* No device (or no usable port): a skip, or a failure when required. */
static void no_device(const char *fmt, ...)
{
	char why[256];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	if (env_flag("MRMGR_TEST_REQUIRE_DEVICE"))
		cr_assert_fail("no RDMA device: %s (and MRMGR_TEST_REQUIRE_DEVICE=1)",
			       why);
	cr_skip_test("no RDMA device: %s", why);
}

static struct ibv_context *open_device(void)
{
	const char *want = getenv("MRMGR_TEST_DEVICE");
	struct ibv_context *ctx = NULL;
	struct ibv_device **list;
	int n = 0;

	if (want && !*want)
		want = NULL;
	errno = 0;
	list = ibv_get_device_list(&n);
	if (!list)
		no_device("ibv_get_device_list: %s", strerror(errno));
	if (n == 0) {
		ibv_free_device_list(list);
		no_device("libibverbs lists none");
	}
	for (int i = 0; i < n; i++) {
		if (want && strcmp(ibv_get_device_name(list[i]), want) != 0)
			continue;
		ctx = ibv_open_device(list[i]);
		if (!ctx) {
			int err = errno;
			char name[IBV_SYSFS_NAME_MAX];

			snprintf(name, sizeof(name), "%s",
				 ibv_get_device_name(list[i]));
			ibv_free_device_list(list);
			cr_assert_fail("ibv_open_device(%s): %s", name,
				       strerror(err));
		}
		break;
	}
	ibv_free_device_list(list);
	if (!ctx)
		no_device("MRMGR_TEST_DEVICE=%s is not among the %d listed",
			  want, n);
	return ctx;
}

/* The first ACTIVE port; 0 when there is none. */
static uint8_t active_port(struct rdma_fixture *f)
{
	for (unsigned int p = 1; p <= f->dev_attr.phys_port_cnt; p++) {
		struct ibv_port_attr pa;

		if (ibv_query_port(f->ctx, (uint8_t)p, &pa) == 0 &&
		    pa.state == IBV_PORT_ACTIVE) {
			f->port_attr = pa;
			return (uint8_t)p;
		}
	}
	return 0;
}

/*
 * The address the QPs use to reach each other. Ethernet (RoCE): the first
 * RoCE v2 GID, else the first RoCE v1 one; on rxe over a netdev with an
 * IPv6 link-local address that is index 0. InfiniBand: the port's LID.
 */
static void pick_address(struct rdma_fixture *f)
{
	int v1 = -1;

	f->gid_index = -1;
	if (f->port_attr.link_layer == IBV_LINK_LAYER_INFINIBAND &&
	    f->port_attr.lid != 0)
		return;
	for (int i = 0; i < f->port_attr.gid_tbl_len; i++) {
		struct ibv_gid_entry e;

		/* Empty slots answer ENODATA. */
		if (ibv_query_gid_ex(f->ctx, f->port, (uint32_t)i, &e, 0) != 0)
			continue;
		if (e.gid_type == IBV_GID_TYPE_ROCE_V2) {
			f->gid_index = i;
			f->gid = e.gid;
			return;
		}
		if (v1 < 0) {
			v1 = i;
			f->gid = e.gid;
		}
	}
	if (v1 < 0)
		no_device("%s port %u has no usable GID", f->name, f->port);
	f->gid_index = v1;
}

static void modify(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask,
		   const char *to)
{
	int ret = ibv_modify_qp(qp, a, mask);

	cr_assert_eq(ret, 0, "ibv_modify_qp(QP %#x -> %s): %s", qp->qp_num, to,
		     strerror(ret));
}

static void qp_to_init(struct rdma_fixture *f, struct ibv_qp *qp)
{
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_INIT,
		.pkey_index = 0,
		.port_num = f->port,
		.qp_access_flags = IBV_ACCESS_LOCAL_WRITE |
				   IBV_ACCESS_REMOTE_WRITE |
				   IBV_ACCESS_REMOTE_READ |
				   IBV_ACCESS_REMOTE_ATOMIC,
	};

	modify(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
			       IBV_QP_ACCESS_FLAGS, "INIT");
}

static void qp_to_rtr(struct rdma_fixture *f, struct ibv_qp *qp,
		      uint32_t dest_qpn)
{
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_RTR,
		.path_mtu = f->port_attr.active_mtu,
		.dest_qp_num = dest_qpn,
		.rq_psn = START_PSN,
		.max_dest_rd_atomic = 1,
		.min_rnr_timer = 12,
		.ah_attr = { .port_num = f->port },
	};

	if (f->gid_index >= 0) {
		/* Loopback: the destination is this port's own GID. */
		a.ah_attr.is_global = 1;
		a.ah_attr.grh.dgid = f->gid;
		a.ah_attr.grh.sgid_index = (uint8_t)f->gid_index;
		a.ah_attr.grh.hop_limit = 1;
	} else {
		a.ah_attr.dlid = f->port_attr.lid;
	}
	modify(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
			       IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
			       IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER,
	       "RTR");
}

static void qp_to_rts(struct ibv_qp *qp)
{
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_RTS,
		.timeout = 14, /* 4.096 us * 2^14 = 67 ms per try */
		.retry_cnt = 7,
		.rnr_retry = 7,
		.sq_psn = START_PSN,
		.max_rd_atomic = 1,
	};

	modify(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
			       IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
			       IBV_QP_MAX_QP_RD_ATOMIC, "RTS");
}

static void connect_pair(struct rdma_fixture *f, struct ibv_qp *qp[2])
{
	for (int i = 0; i < 2; i++)
		qp_to_init(f, qp[i]);
	for (int i = 0; i < 2; i++)
		qp_to_rtr(f, qp[i], qp[1 - i]->qp_num);
	for (int i = 0; i < 2; i++)
		qp_to_rts(qp[i]);
}

/* Two RC QPs in pd on the shared CQ, connected to each other. */
static void make_pair(struct rdma_fixture *f, struct ibv_pd *pd,
		      struct ibv_qp *qp[2])
{
	for (int i = 0; i < 2; i++) {
		struct ibv_qp_init_attr ia = {
			.send_cq = f->cq,
			.recv_cq = f->cq,
			.cap = { .max_send_wr = SQ_DEPTH, .max_recv_wr = 1,
				 .max_send_sge = 1, .max_recv_sge = 1 },
			.qp_type = IBV_QPT_RC,
			.sq_sig_all = 1,
		};

		qp[i] = ibv_create_qp(pd, &ia);
		cr_assert_not_null(qp[i], "ibv_create_qp: %s", strerror(errno));
	}
	connect_pair(f, qp);
}

static void make_qp_pair(struct rdma_fixture *f)
{
	char gid[64] = "LID";

	f->port = active_port(f);
	if (!f->port)
		no_device("%s has no ACTIVE port", f->name);
	pick_address(f);
	f->cq = ibv_create_cq(f->ctx, CQ_DEPTH, NULL, NULL, 0);
	cr_assert_not_null(f->cq, "ibv_create_cq: %s", strerror(errno));
	make_pair(f, f->pd, f->qp);
	if (f->gid_index >= 0)
		snprintf(gid, sizeof(gid), "GID %d", f->gid_index);
	cr_log_info("rdma_fixture: %s port %u (%s, %s, MTU %d): QP %#x <-> QP %#x",
		    f->name, f->port,
		    f->port_attr.link_layer == IBV_LINK_LAYER_ETHERNET
			    ? "Ethernet"
			    : "InfiniBand",
		    gid, 128 << f->port_attr.active_mtu, f->qp[0]->qp_num,
		    f->qp[1]->qp_num);
}

void rdma_fixture_open(struct rdma_fixture *f, unsigned int flags)
{
	int ret;

	memset(f, 0, sizeof(*f));
	f->ctx = open_device();
	f->name = ibv_get_device_name(f->ctx->device);
	ret = ibv_query_device(f->ctx, &f->dev_attr);
	cr_assert_eq(ret, 0, "ibv_query_device(%s): %s", f->name, strerror(ret));
	f->pd = ibv_alloc_pd(f->ctx);
	cr_assert_not_null(f->pd, "ibv_alloc_pd(%s): %s", f->name,
			   strerror(errno));
	if (flags & (RDMA_FX_QP | RDMA_FX_PD2))
		make_qp_pair(f);
	if (flags & RDMA_FX_PD2) {
		f->pd2 = ibv_alloc_pd(f->ctx);
		cr_assert_not_null(f->pd2, "ibv_alloc_pd(%s, second): %s",
				   f->name, strerror(errno));
		make_pair(f, f->pd2, f->qp2);
		cr_log_info("rdma_fixture: %s second PD: QP %#x <-> QP %#x",
			    f->name, f->qp2[0]->qp_num, f->qp2[1]->qp_num);
	}
	if (!(flags & (RDMA_FX_QP | RDMA_FX_PD2)))
		cr_log_info("rdma_fixture: %s (vendor %#x part %u)", f->name,
			    f->dev_attr.vendor_id, f->dev_attr.vendor_part_id);
}

void rdma_fixture_close(struct rdma_fixture *f)
{
	int ret;

	for (int i = 0; i < 4; i++) {
		struct ibv_qp **qp = i < 2 ? &f->qp[i] : &f->qp2[i - 2];

		if (!*qp)
			continue;
		ret = ibv_destroy_qp(*qp);
		cr_assert_eq(ret, 0, "ibv_destroy_qp: %s", strerror(ret));
		*qp = NULL;
	}
	if (f->cq) {
		ret = ibv_destroy_cq(f->cq);
		cr_assert_eq(ret, 0, "ibv_destroy_cq: %s", strerror(ret));
		f->cq = NULL;
	}
	if (f->pd2) {
		ret = ibv_dealloc_pd(f->pd2);
		cr_assert_eq(ret, 0, "ibv_dealloc_pd(second): %s (a leaked MR?)",
			     strerror(ret));
		f->pd2 = NULL;
	}
	if (f->pd) {
		/* EBUSY here means an MR of this PD was never deregistered. */
		ret = ibv_dealloc_pd(f->pd);
		cr_assert_eq(ret, 0, "ibv_dealloc_pd: %s (a leaked MR?)",
			     strerror(ret));
		f->pd = NULL;
	}
	if (f->ctx) {
		ret = ibv_close_device(f->ctx);
		cr_assert_eq(ret, 0, "ibv_close_device: %s", strerror(ret));
		f->ctx = NULL;
	}
}

int rdma_fixture_is_rxe(const struct rdma_fixture *f)
{
	return f->dev_attr.vendor_id == RXE_VENDOR_ID &&
	       f->dev_attr.vendor_part_id == 0;
}

void rdma_fixture_open_rxe(struct rdma_fixture *f, unsigned int flags,
			   const char *why)
{
	char name[IBV_SYSFS_NAME_MAX];

	rdma_fixture_open(f, flags);
	if (rdma_fixture_is_rxe(f))
		return;
	/* f->name belongs to the device the close lets go. */
	snprintf(name, sizeof(name), "%s", f->name);
	rdma_fixture_close(f);
	cr_skip_test("%s is not Soft-RoCE: %s", name, why);
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Drop whatever completions are queued (flushes after an error). */
static void drain_cq(struct rdma_fixture *f)
{
	struct ibv_wc wc[8];

	while (ibv_poll_cq(f->cq, 8, wc) > 0)
		;
}

static void reset_pair(struct ibv_qp *qp[2])
{
	struct ibv_qp_attr a = { .qp_state = IBV_QPS_RESET };

	for (int i = 0; i < 2; i++)
		modify(qp[i], &a, IBV_QP_STATE, "RESET");
}

static void reconnect_pair(struct rdma_fixture *f, struct ibv_qp *qp[2])
{
	reset_pair(qp);
	drain_cq(f);
	connect_pair(f, qp);
	f->reconnects++;
}

void rdma_fixture_reconnect(struct rdma_fixture *f)
{
	cr_assert_not_null(f->qp[0], "rdma_fixture: opened without RDMA_FX_QP");
	reset_pair(f->qp);
	if (f->qp2[0])
		reset_pair(f->qp2);
	drain_cq(f);
	connect_pair(f, f->qp);
	if (f->qp2[0])
		connect_pair(f, f->qp2);
	f->reconnects++;
}

static struct ibv_wc wait_completion(struct rdma_fixture *f, uint64_t wr_id)
{
	double deadline = now_s() + COMPLETION_TIMEOUT_S;
	unsigned int idle = 0;
	struct ibv_wc wc;

	for (;;) {
		int n = ibv_poll_cq(f->cq, 1, &wc);

		cr_assert_geq(n, 0, "ibv_poll_cq failed");
		if (n == 1) {
			if (wc.wr_id == wr_id)
				return wc;
			continue; /* a flush left from before: not ours */
		}
		if (++idle % 1024 == 0) {
			cr_assert_lt(now_s(), deadline,
				     "no completion for WR %llu after %d s",
				     (unsigned long long)wr_id,
				     COMPLETION_TIMEOUT_S);
			/* Let the kernel's rxe tasks run on a small guest. */
			nanosleep(&(struct timespec){ .tv_nsec = 50000 }, NULL);
		}
	}
}

/* The QP pair of pd: f->qp for f->pd, f->qp2 for f->pd2. */
static struct ibv_qp **pair_of(struct rdma_fixture *f, struct ibv_pd *pd)
{
	if (pd && pd == f->pd2)
		return f->qp2;
	cr_assert(pd == f->pd, "rdma_fixture: no QP pair in PD %p", (void *)pd);
	cr_assert_not_null(f->qp[0], "rdma_fixture: opened without RDMA_FX_QP");
	return f->qp;
}

static enum ibv_wc_status post_and_wait(struct rdma_fixture *f,
					struct ibv_qp *qp[2],
					enum ibv_wr_opcode op, void *local,
					uint32_t lkey, uint64_t remote,
					uint32_t rkey, size_t len)
{
	static uint64_t next_wr_id;
	const char *what = op == IBV_WR_RDMA_WRITE ? "WRITE" : "READ";
	struct ibv_sge sge = {
		.addr = (uintptr_t)local,
		.length = (uint32_t)len,
		.lkey = lkey,
	};
	struct ibv_send_wr wr = {
		.wr_id = ++next_wr_id,
		.sg_list = &sge,
		.num_sge = 1,
		.opcode = op,
		.send_flags = IBV_SEND_SIGNALED,
		.wr.rdma = { .remote_addr = remote, .rkey = rkey },
	};
	struct ibv_send_wr *bad = NULL;
	struct ibv_wc wc;
	int ret;

	cr_assert(len > 0 && len <= f->port_attr.max_msg_sz,
		  "RDMA %s of %zu bytes: outside 1..%u", what, len,
		  f->port_attr.max_msg_sz);
	ret = ibv_post_send(qp[0], &wr, &bad);
	cr_assert_eq(ret, 0, "ibv_post_send(RDMA %s): %s", what, strerror(ret));
	wc = wait_completion(f, wr.wr_id);
	if (wc.status != IBV_WC_SUCCESS) {
		cr_log_info("RDMA %s %zu bytes lkey %#x -> %#llx rkey %#x: %s",
			    what, len, lkey, (unsigned long long)remote, rkey,
			    ibv_wc_status_str(wc.status));
		reconnect_pair(f, qp);
	}
	return wc.status;
}

enum ibv_wc_status rdma_write_pd(struct rdma_fixture *f, struct ibv_pd *pd,
				 const void *local_addr, uint32_t lkey,
				 uint64_t remote_addr, uint32_t rkey, size_t len)
{
	/* The device only reads local memory for a WRITE. */
	return post_and_wait(f, pair_of(f, pd), IBV_WR_RDMA_WRITE,
			     (void *)local_addr, lkey, remote_addr, rkey, len);
}

enum ibv_wc_status rdma_read_pd(struct rdma_fixture *f, struct ibv_pd *pd,
				void *local_addr, uint32_t lkey,
				uint64_t remote_addr, uint32_t rkey, size_t len)
{
	return post_and_wait(f, pair_of(f, pd), IBV_WR_RDMA_READ, local_addr,
			     lkey, remote_addr, rkey, len);
}

enum ibv_wc_status rdma_write(struct rdma_fixture *f, const void *local_addr,
			      uint32_t lkey, uint64_t remote_addr,
			      uint32_t rkey, size_t len)
{
	return rdma_write_pd(f, f->pd, local_addr, lkey, remote_addr, rkey, len);
}

enum ibv_wc_status rdma_read(struct rdma_fixture *f, void *local_addr,
			     uint32_t lkey, uint64_t remote_addr,
			     uint32_t rkey, size_t len)
{
	return rdma_read_pd(f, f->pd, local_addr, lkey, remote_addr, rkey, len);
}

void *rdma_map(size_t len, int fill)
{
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	cr_assert_neq(p, MAP_FAILED, "mmap %zu bytes: %s", len, strerror(errno));
	memset(p, fill, len);
	return p;
}

void rdma_remap_same_address(void *addr, size_t len, int fill)
{
	void *q;

	cr_assert_eq(munmap(addr, len), 0, "munmap: %s", strerror(errno));
	q = mmap(addr, len, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
	cr_assert_eq(q, addr, "could not map again at %p: %s", addr,
		     q == MAP_FAILED ? strerror(errno) : "elsewhere");
	memset(q, fill, len);
}

void rdma_expect_bytes_at(const char *file, int line, const void *buf,
			  size_t len, int byte, const char *what)
{
	const unsigned char *p = buf;
	unsigned char want = (unsigned char)byte;
	size_t i = 0;

	/* One assertion, not one per byte: Criterion reports each to its
	 * runner process, which is slow under TCG. */
	while (i < len && p[i] == want)
		i++;
	cr_assert_eq(i, len,
		     "%s:%d: %s: byte %zu of %zu is %#04x, expected %#04x ('%c')",
		     file, line, what, i, len, i < len ? p[i] : 0, want, want);
	cr_log_info("byte check: %s: %zu bytes of '%c' ok", what, len, want);
}

void rdma_check_same_at(const char *file, int line, const void *got,
			const void *want, size_t len, const char *what)
{
	const unsigned char *g = got, *w = want;
	size_t i = 0;

	while (i < len && g[i] == w[i])
		i++;
	cr_assert_eq(i, len, "%s:%d: %s: byte %zu of %zu is %#04x, expected %#04x",
		     file, line, what, i, len, i < len ? g[i] : 0,
		     i < len ? w[i] : 0);
}

void rdma_expect_same_at(const char *file, int line, const void *got,
			 const void *want, size_t len, const char *what)
{
	rdma_check_same_at(file, line, got, want, len, what);
	cr_log_info("byte check: %s: %zu bytes match", what, len);
}

void rdma_fill_pattern(void *buf, size_t len, unsigned int seed)
{
	unsigned char *p = buf;

	for (size_t i = 0; i < len; i++)
		p[i] = (unsigned char)((i * 131 + seed * 7 + (i >> 12)) & 0xff);
}
