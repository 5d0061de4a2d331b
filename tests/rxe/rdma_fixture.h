/*
 * rdma_fixture: a real RDMA device for Criterion tests.
 *
 * Opens the first RDMA device libibverbs lists (or the one named by
 * MRMGR_TEST_DEVICE), a protection domain, and on request a loopback RC QP
 * pair: two QPs on the same port connected to each other, sharing one CQ,
 * so a test can RDMA WRITE and READ between two buffers of its own process
 * and see, byte for byte, where the device put the data. On request also a
 * second PD with a loopback pair of its own (RDMA_FX_PD2).
 *
 * Typical use:
 *
 *     struct rdma_fixture f;
 *     rdma_fixture_open(&f, RDMA_FX_QP);    // skips the test without a device
 *     ... mrmgr_cache_create(f.pd, ...), mrmgr_get(...) ...
 *     cr_assert_eq(rdma_write(&f, src, lkey, (uintptr_t)dst, rkey, len),
 *                  IBV_WC_SUCCESS);
 *     rdma_fixture_close(&f);
 *
 * Rules:
 *  - Without a device the test is skipped (cr_skip_test("no RDMA device:
 *    ...")), so the binaries pass on machines without RDMA; with
 *    MRMGR_TEST_REQUIRE_DEVICE=1 (set by `make check-rxe`) that is a
 *    failure instead, so a broken guest can never pass by skipping.
 *  - Anything the fixture itself cannot do (a verb that should not fail,
 *    a completion that never comes) fails the test with a message naming
 *    the step. What the device answers about the test's own work request
 *    (success, remote access error, ...) is returned, never asserted.
 *  - After an error completion the QPs are in the error state; the
 *    helpers reset and reconnect the pair before returning, so the next
 *    rdma_write()/rdma_read() works again.
 *  - Criterion runs every test in its own process, so a test may change
 *    process-wide state (rlimits, capabilities) without affecting others.
 *    Change credentials (capset, setuid) BEFORE rdma_fixture_open(): the
 *    kernel refuses write()-based uverbs commands, e.g. rxe's post_send
 *    doorbell, with EACCES when the caller's credentials are not those
 *    that opened the device.
 *
 * Environment (test harness only, see doc/environment.md):
 *   MRMGR_TEST_DEVICE          use this device instead of the first one
 *   MRMGR_TEST_REQUIRE_DEVICE  1: no device is a failure, not a skip
 *
 * SPDX-License-Identifier: MIT
 */
#ifndef MRMGR_TEST_RDMA_FIXTURE_H
#define MRMGR_TEST_RDMA_FIXTURE_H

#include <stddef.h>
#include <stdint.h>
#include <infiniband/verbs.h>

#define RDMA_KiB ((size_t)1024)
#define RDMA_MiB (1024 * RDMA_KiB)

/* What rdma_fixture_open() sets up besides the device and the PD. */
enum rdma_fixture_flags {
	/* A CQ and a connected loopback RC QP pair (needs an ACTIVE port). */
	RDMA_FX_QP = 1u << 0,
	/*
	 * Also a second PD (pd2) with a loopback RC QP pair of its own (qp2,
	 * same port and CQ), for registrations moved to another PD: the
	 * device lets a QP reach only MRs of its own PD. Implies RDMA_FX_QP.
	 */
	RDMA_FX_PD2 = 1u << 1,
};

struct rdma_fixture {
	struct ibv_context *ctx;
	const char *name;                /* e.g. "rxe0" */
	struct ibv_device_attr dev_attr;
	struct ibv_pd *pd;

	/* Only with RDMA_FX_QP: */
	uint8_t port;                    /* first ACTIVE port, 1-based */
	struct ibv_port_attr port_attr;
	int gid_index;                   /* -1: InfiniBand addressing by LID */
	union ibv_gid gid;
	struct ibv_cq *cq;               /* completions of both QPs */
	struct ibv_qp *qp[2];            /* qp[0] posts, qp[1] is the peer */
	unsigned int reconnects;         /* QP resets after error completions */

	/* Only with RDMA_FX_PD2: */
	struct ibv_pd *pd2;
	struct ibv_qp *qp2[2];           /* in pd2; qp2[0] posts */
};

/*
 * Open the device and a PD, plus what @p flags ask for. Skips the calling
 * test when there is no device (or, with RDMA_FX_QP, no ACTIVE port).
 */
void rdma_fixture_open(struct rdma_fixture *f, unsigned int flags);

/* Destroy everything rdma_fixture_open() made. Fails the test on error. */
void rdma_fixture_close(struct rdma_fixture *f);

/* True on Soft-RoCE (rdma_rxe), whose verbs facts some tests assert. */
int rdma_fixture_is_rxe(const struct rdma_fixture *f);

/*
 * rdma_fixture_open(), then, on a device that is not Soft-RoCE, close it
 * again and skip the test, saying why (for tests of rxe facts).
 */
void rdma_fixture_open_rxe(struct rdma_fixture *f, unsigned int flags,
			   const char *why);

/*
 * RDMA WRITE @p len bytes from @p local_addr (covered by @p lkey) to
 * @p remote_addr (covered by @p rkey) over the QP pair, and wait for the
 * completion. Returns its status: IBV_WC_SUCCESS, IBV_WC_REM_ACCESS_ERR for
 * a bad rkey or range, IBV_WC_LOC_PROT_ERR for a bad lkey, ...
 */
enum ibv_wc_status rdma_write(struct rdma_fixture *f, const void *local_addr,
			      uint32_t lkey, uint64_t remote_addr,
			      uint32_t rkey, size_t len);

/* RDMA READ from @p remote_addr into @p local_addr; as rdma_write(). */
enum ibv_wc_status rdma_read(struct rdma_fixture *f, void *local_addr,
			     uint32_t lkey, uint64_t remote_addr,
			     uint32_t rkey, size_t len);

/*
 * rdma_write() and rdma_read() over the QP pair of @p pd: f->pd (the
 * pair rdma_write() uses) or f->pd2 (RDMA_FX_PD2). Both keys must belong
 * to MRs of @p pd; the device refuses any other with an access error.
 */
enum ibv_wc_status rdma_write_pd(struct rdma_fixture *f, struct ibv_pd *pd,
				 const void *local_addr, uint32_t lkey,
				 uint64_t remote_addr, uint32_t rkey, size_t len);
enum ibv_wc_status rdma_read_pd(struct rdma_fixture *f, struct ibv_pd *pd,
				void *local_addr, uint32_t lkey,
				uint64_t remote_addr, uint32_t rkey, size_t len);

/* Reset every QP and connect the pairs again (the helpers do it after
 * errors, for the pair that failed). */
void rdma_fixture_reconnect(struct rdma_fixture *f);

/* A fresh anonymous read-write mapping of @p len bytes filled with @p fill. */
void *rdma_map(size_t len, int fill);

/*
 * Replace the mapping at @p addr with fresh anonymous memory at the same
 * address, filled with @p fill (munmap + mmap MAP_FIXED_NOREPLACE).
 */
void rdma_remap_same_address(void *addr, size_t len, int fill);

/*
 * Assert that every byte of @p buf is @p byte, and log the check as
 * "byte check: <what>: <len> bytes of 'c' ok" (shown with --verbose).
 * A failure names the caller's file and line, the first wrong byte and
 * its offset.
 */
#define rdma_expect_bytes(buf, len, byte, what) \
	rdma_expect_bytes_at(__FILE__, __LINE__, buf, len, byte, what)

/* Assert that @p got equals @p want over @p len bytes, and log the check. */
#define rdma_expect_same(got, want, len, what) \
	rdma_expect_same_at(__FILE__, __LINE__, got, want, len, what)

/* rdma_expect_same() without the log line, for checks repeated hundreds
 * of times; a failure says as much. */
#define rdma_check_same(got, want, len, what) \
	rdma_check_same_at(__FILE__, __LINE__, got, want, len, what)

void rdma_expect_bytes_at(const char *file, int line, const void *buf,
			  size_t len, int byte, const char *what);
void rdma_expect_same_at(const char *file, int line, const void *got,
			 const void *want, size_t len, const char *what);
void rdma_check_same_at(const char *file, int line, const void *got,
			const void *want, size_t len, const char *what);

/*
 * Fill @p buf with a byte pattern that differs between neighbouring bytes
 * and between 4 KiB pages, so a transfer to a wrong offset or a wrong page
 * is caught; different @p seed values give different patterns.
 */
void rdma_fill_pattern(void *buf, size_t len, unsigned int seed);

#endif /* MRMGR_TEST_RDMA_FIXTURE_H */
