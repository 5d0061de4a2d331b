/*
 * Shared MRs on a real device: a multi-PD cache over two PDs of rxe0
 * (each with its own context and loopback QP pair), RDMA WRITE and READ
 * through each PD's keys with byte checks, the device refusing one PD's
 * keys on the other PD's QPs, invalidation in both PDs at once; the same
 * over rxe0 and rxe1 when the guest has both (MRMGR_VM_TWO_DEVICES=1);
 * and the import path's documented refusal (EOPNOTSUPP) on rxe.
 *
 * SPDX-License-Identifier: MIT
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cache_helpers.h"

#include <mrmgr/share.h>

#define LEN (64 * RDMA_KiB)

/* Two fixtures (contexts, PDs, QP pairs); the second on device `second`
 * (NULL: the same device as the first). */
static void open_two(struct rdma_fixture f[2], const char *second)
{
	const char *first = getenv("MRMGR_TEST_DEVICE");
	char keep[64] = "";

	if (first)
		snprintf(keep, sizeof(keep), "%s", first);
	rdma_fixture_open(&f[0], RDMA_FX_QP);
	if (second)
		setenv("MRMGR_TEST_DEVICE", second, 1);
	rdma_fixture_open(&f[1], RDMA_FX_QP);
	if (keep[0])
		setenv("MRMGR_TEST_DEVICE", keep, 1);
	else
		unsetenv("MRMGR_TEST_DEVICE");
}

static mrmgr_cache_t *multi_cache(struct rdma_fixture f[2])
{
	struct ibv_pd *pds[2] = { f[0].pd, f[1].pd };
	struct mrmgr_cache_attr a = rxe_cache_attr(0, 0, MRMGR_CACHE_NO_MERGE);
	mrmgr_cache_t *c = NULL;

	a.comp_mask |= MRMGR_CACHE_ATTR_PDS;
	a.pds = pds;
	a.npds = 2;
	cr_assert_eq(mrmgr_cache_create(NULL, &a, &c), 0,
		     "a cache over %s + %s", f[0].name, f[1].name);
	return c;
}

static mrmgr_region_t *get_pd(mrmgr_cache_t *c, struct ibv_pd *pd, void *addr,
			      size_t len, unsigned int access)
{
	mrmgr_region_t *r = NULL;
	struct mrmgr_get_attr ga = { .comp_mask = MRMGR_GET_ATTR_PD, .pd = pd };
	int ret = mrmgr_get_ex(c, addr, len, access, &ga, &r);

	cr_assert_eq(ret, 0, "mrmgr_get_ex(%p, %zu, pd): %s", addr, len,
		     strerror(ret));
	return r;
}

/*
 * The body shared by the one-device and two-device tests: both rails
 * write and read the same buffers through their own PD's keys.
 */
static void both_rails(struct rdma_fixture f[2])
{
	char *src = rdma_map(LEN, 0), *dst = rdma_map(LEN, 0), *back = rdma_map(LEN, 0);
	mrmgr_cache_t *c = multi_cache(f);
	mrmgr_region_t *rs[2], *rd[2], *rb[2];

	for (int i = 0; i < 2; i++) {
		rs[i] = get_pd(c, f[i].pd, src, LEN, IBV_ACCESS_LOCAL_WRITE);
		rd[i] = get_pd(c, f[i].pd, dst, LEN, RXE_RW);
		rb[i] = get_pd(c, f[i].pd, back, LEN, IBV_ACCESS_LOCAL_WRITE);
	}
	cr_assert_eq(rd[0], rd[1], "one region for both PDs");
	struct ibv_mr *m0 = mrmgr_region_mr_pd(rd[0], f[0].pd);
	struct ibv_mr *m1 = mrmgr_region_mr_pd(rd[0], f[1].pd);
	cr_assert(m0 && m1 && m0 != m1);
	cr_assert_eq(m0->pd, f[0].pd);
	cr_assert_eq(m1->pd, f[1].pd);
	cr_log_info("%s PD %u: rkey %#x; %s PD %u: rkey %#x", f[0].name,
		    f[0].pd->handle, m0->rkey, f[1].name, f[1].pd->handle, m1->rkey);

	for (int i = 0; i < 2; i++) {
		char what[96];

		rdma_fill_pattern(src, LEN, (unsigned int)i + 1);
		memset(dst, 0, LEN);
		cr_assert_eq(rdma_write(&f[i], src, mrmgr_region_lkey_pd(rs[i], f[i].pd),
					(uintptr_t)dst, mrmgr_region_rkey_pd(rd[i], f[i].pd),
					LEN),
			     IBV_WC_SUCCESS, "WRITE through PD %d's keys", i);
		snprintf(what, sizeof(what), "WRITE through PD %d's keys (%s)", i, f[i].name);
		rdma_expect_same(dst, src, LEN, what);
		memset(back, 0, LEN);
		cr_assert_eq(rdma_read(&f[i], back, mrmgr_region_lkey_pd(rb[i], f[i].pd),
				       (uintptr_t)dst, mrmgr_region_rkey_pd(rd[i], f[i].pd),
				       LEN),
			     IBV_WC_SUCCESS);
		snprintf(what, sizeof(what), "READ through PD %d's keys (%s)", i, f[i].name);
		rdma_expect_same(back, src, LEN, what);
	}
	/* The other PD's rkey is refused by the device. */
	memset(dst, 'd', LEN);
	cr_assert_eq(rdma_write(&f[1], src, mrmgr_region_lkey_pd(rs[1], f[1].pd),
				(uintptr_t)dst, mrmgr_region_rkey_pd(rd[0], f[0].pd), 4096),
		     IBV_WC_REM_ACCESS_ERR, "PD 0's rkey on PD 1's QP");
	rdma_expect_bytes(dst, LEN, 'd', "nothing written through the other PD's key");

	struct mrmgr_stats s = rxe_stats(c);
	cr_assert_eq(s.registrations, 6, "three buffers in two PDs");
	cr_assert_eq(s.share_pd_mrs, 3);
	cr_assert_eq(s.share_sets, 3);
	cr_assert_eq(s.regions, 6, "the limits count every MR");

	uint32_t rkey0 = m0->rkey, rkey1 = m1->rkey;
	for (int i = 0; i < 2; i++) {
		mrmgr_put(rd[i]);
		mrmgr_put(rb[i]);
	}
	/* One invalidation drops dst from both PDs. */
	cr_assert_eq(mrmgr_invalidate(c, dst, LEN), 0);
	s = rxe_stats(c);
	cr_assert_eq(s.regions, 4);
	cr_assert_eq(s.deregistrations, 2);
	for (int i = 0; i < 2; i++)
		cr_assert_eq(rdma_write(&f[i], src, mrmgr_region_lkey_pd(rs[i], f[i].pd),
					(uintptr_t)dst, i ? rkey1 : rkey0, 4096),
			     IBV_WC_REM_ACCESS_ERR,
			     "the invalidated MR is gone from PD %d", i);
	rdma_expect_bytes(dst, LEN, 'd', "nothing written through the dead keys");
	for (int i = 0; i < 2; i++)
		mrmgr_put(rs[i]);
	cr_assert_eq(mrmgr_cache_destroy(c), 0);
	munmap(src, LEN);
	munmap(dst, LEN);
	munmap(back, LEN);
}

Test(rxe_share, two_pds_of_one_device_write_and_read_through_their_own_keys)
{
	struct rdma_fixture f[2];

	open_two(f, NULL);
	cr_assert_str_eq(f[0].name, f[1].name);
	both_rails(f);
	rdma_fixture_close(&f[1]);
	rdma_fixture_close(&f[0]);
}

Test(rxe_share, two_devices_write_and_read_through_their_own_keys)
{
	struct rdma_fixture f[2];
	const char *first = getenv("MRMGR_TEST_DEVICE");
	const char *second = first && !strcmp(first, "rxe1") ? "rxe0" : "rxe1";
	char path[96];

	snprintf(path, sizeof(path), "/sys/class/infiniband/%s", second);
	if (access(path, F_OK) != 0)
		cr_skip_test("no %s (boot the guest with MRMGR_VM_TWO_DEVICES=1)", second);
	open_two(f, second);
	cr_assert_str_neq(f[0].name, f[1].name);
	both_rails(f);
	rdma_fixture_close(&f[1]);
	rdma_fixture_close(&f[0]);
}

/* rxe has no ibv_import_*: every entry of the import path says so. */
Test(rxe_share, the_import_path_returns_eopnotsupp)
{
	struct rdma_fixture f;
	char *buf = rdma_map(LEN, 0);
	mrmgr_region_t *r;
	mrmgr_export_t *e = NULL;
	mrmgr_importer_t *imp = NULL;
	mrmgr_share_server_t *srv = NULL;

	rdma_fixture_open(&f, 0);
	if (!rdma_fixture_is_rxe(&f)) {
		char name[IBV_SYSFS_NAME_MAX];

		snprintf(name, sizeof(name), "%s", f.name);
		rdma_fixture_close(&f);
		cr_skip_test("%s is not Soft-RoCE: these are rxe facts", name);
	}
	mrmgr_cache_t *c = rxe_cache(&f, 0, 0, 0);
	r = rxe_get(c, buf, LEN, RXE_RW);
	cr_assert_eq(mrmgr_region_export(r, NULL, &e), EOPNOTSUPP);
	cr_assert_null(e);
	cr_assert_eq(mrmgr_region_export(r, NULL, &e), EOPNOTSUPP, "learnt once, same answer");
	cr_assert_eq(mrmgr_share_server_create(c, NULL, NULL, &srv), EOPNOTSUPP);
	int fd = dup(f.ctx->cmd_fd);
	cr_assert_geq(fd, 0);
	cr_assert_eq(mrmgr_importer_open(fd, &imp), EOPNOTSUPP);
	cr_assert_geq(fcntl(fd, F_GETFD), 0, "a failed import leaves the fd to us");
	close(fd);
	struct mrmgr_stats s = rxe_stats(c);
	cr_assert_eq(s.share_exports, 0);
	cr_assert_eq(s.exports, 0);
	cr_log_info("%s: mrmgr_region_export, mrmgr_share_server_create, "
		    "mrmgr_importer_open: EOPNOTSUPP", f.name);
	/* The region is unaffected: still cached and usable. */
	mrmgr_put(r);
	cr_assert_eq(rxe_stats(c).regions, 1);
	cr_assert_eq(mrmgr_cache_destroy(c), 0);
	rdma_fixture_close(&f);
	munmap(buf, LEN);
}
