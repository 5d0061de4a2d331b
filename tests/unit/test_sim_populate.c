/*
 * The sim where madvise(MADV_POPULATE_*) succeeds without faulting
 * anything in, as under qemu-user (the libc matrix's arm64 runs): a
 * writable registration of memory the program has not touched yet must
 * still hold the program's own pages, as a real pin does, so that the
 * program's later stores are not reported as stale writes; and where the
 * sim cannot make up for it, the registration is unverified, not stale.
 * The hook stands in for the emulator (test flags in sim_internal.h).
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <errno.h>
#include <string.h>
#include <sys/mman.h>

#include <criterion/criterion.h>

#include <mrmgr/sim.h>

#include "sim/sim_internal.h"

#define PG ((size_t)4096)
#define NPG 8
#define RW (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ)

struct rig {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_mr *mr;
	char *buf;
};

/* Untouched anonymous memory, registered for writing under the hook. */
static void rig_up(struct rig *r, unsigned int flags)
{
	if (!mrmgr_sim_page_identity_available())
		cr_skip_test("page identity needs PFNs in /proc/self/pagemap "
			     "(CAP_SYS_ADMIN)");
	/* Before the first registration: the sim probes the call once. */
	mrmgr__sim_test_flags = flags;
	cr_assert_eq(mrmgr_sim_open(NULL, &r->ctx), 0);
	cr_assert_eq(mrmgr_sim_alloc_pd(r->ctx, &r->pd), 0);
	r->buf = mmap(NULL, NPG * PG, PROT_READ | PROT_WRITE,
		      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	cr_assert_neq(r->buf, MAP_FAILED);
	cr_assert_eq(mrmgr_sim_reg_mr(r->pd, r->buf, NPG * PG, RW, &r->mr), 0);
}

static void rig_down(struct rig *r)
{
	cr_assert_eq(mrmgr_sim_dereg_mr(r->mr), 0);
	munmap(r->buf, NPG * PG);
	cr_assert_eq(mrmgr_sim_dealloc_pd(r->pd), 0);
	cr_assert_eq(mrmgr_sim_close(r->ctx), 0);
	mrmgr__sim_test_flags = 0;
}

static struct mrmgr_sim_stats stats(struct ibv_context *ctx)
{
	struct mrmgr_sim_stats s;

	cr_assert_eq(mrmgr_sim_query_stats(ctx, &s, sizeof(s)), 0);
	return s;
}

/* The program stores into its buffer, then a peer writes into it. */
static int store_then_remote_write(struct rig *r)
{
	char b = 'w';

	memset(r->buf, 'm', NPG * PG);
	return mrmgr_sim_write(r->pd, r->mr->rkey,
			       (uintptr_t)r->buf + NPG * PG - 1, &b, 1);
}

Test(sim_populate, noop_populate_still_pins_writable_pages)
{
	struct rig r;
	int ret;

	rig_up(&r, MRMGR__SIM_TEST_POPULATE_NOOP);
	ret = store_then_remote_write(&r);
	cr_assert_eq(ret, 0, "remote write after the program's store: %s",
		     strerror(ret));
	cr_assert_eq(r.buf[NPG * PG - 1], 'w');
	cr_assert_eq(stats(r.ctx).unverified_pages, 0);
	cr_assert_eq(stats(r.ctx).stale_accesses, 0);
	rig_down(&r);
}

Test(sim_populate, noop_populate_unmade_up_is_unverified_not_stale)
{
	struct rig r;
	int ret;

	rig_up(&r, MRMGR__SIM_TEST_POPULATE_NOOP | MRMGR__SIM_TEST_NO_TOUCH);
	cr_assert_eq(stats(r.ctx).unverified_pages, NPG);
	ret = store_then_remote_write(&r);
	cr_assert_eq(ret, 0, "remote write after the program's store: %s",
		     strerror(ret));
	cr_assert_eq(stats(r.ctx).stale_accesses, 0);
	rig_down(&r);
}

/* The same under read-only registration: unsharing went through it too. */
Test(sim_populate, noop_populate_readonly_reg_is_coherent)
{
	struct rig r;
	char dst[16];

	rig_up(&r, MRMGR__SIM_TEST_POPULATE_NOOP);
	cr_assert_eq(mrmgr_sim_dereg_mr(r.mr), 0);
	munmap(r.buf, NPG * PG);
	r.buf = mmap(NULL, NPG * PG, PROT_READ | PROT_WRITE,
		     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	cr_assert_neq(r.buf, MAP_FAILED);
	cr_assert_eq(mrmgr_sim_reg_mr(r.pd, r.buf, NPG * PG,
				      IBV_ACCESS_REMOTE_READ, &r.mr), 0);
	memset(r.buf, 0x3c, NPG * PG);
	cr_assert_eq(mrmgr_sim_read(r.pd, r.mr->rkey, (uintptr_t)r.buf + 5 * PG,
				    dst, sizeof(dst)), 0);
	cr_assert_eq(dst[0], 0x3c);
	rig_down(&r);
}

/* A read-only mapping refuses a writable registration, as the kernel does. */
Test(sim_populate, noop_populate_refuses_readonly_mapping)
{
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_mr *mr = NULL;
	void *p;

	mrmgr__sim_test_flags = MRMGR__SIM_TEST_POPULATE_NOOP;
	cr_assert_eq(mrmgr_sim_open(NULL, &ctx), 0);
	cr_assert_eq(mrmgr_sim_alloc_pd(ctx, &pd), 0);
	p = mmap(NULL, NPG * PG, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	cr_assert_neq(p, MAP_FAILED);
	cr_assert_eq(mrmgr_sim_reg_mr(pd, p, NPG * PG, RW, &mr), EFAULT);
	cr_assert_eq(munmap((char *)p + 2 * PG, PG), 0);
	cr_assert_eq(mrmgr_sim_reg_mr(pd, p, NPG * PG, IBV_ACCESS_REMOTE_READ,
				      &mr), EFAULT);
	munmap(p, NPG * PG);
	cr_assert_eq(mrmgr_sim_dealloc_pd(pd), 0);
	cr_assert_eq(mrmgr_sim_close(ctx), 0);
	mrmgr__sim_test_flags = 0;
}
