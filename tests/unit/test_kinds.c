/*
 * Memory kinds (lib/kinds, doc/design/memory-kinds.md): host virtual
 * memory is kind one and every cache serves it; the miss registers and
 * watches through the cache's kind table, the hit reads no table. A
 * counting kind put in a cache's place shows which calls go through it.
 *
 * SPDX-License-Identifier: MIT
 */
#include <errno.h>
#include <unistd.h>

#include "helpers.h"
#include "cache.h"
#include "kind.h"

Test(kinds, host_is_kind_one)
{
	cr_assert_eq(mrmgr__kind_by_id(MRMGR__KIND_HOST), &mrmgr__kind_host);
	cr_assert_eq(mrmgr__kind_host.id, MRMGR__KIND_HOST);
	cr_assert(mrmgr__kind_monitored(&mrmgr__kind_host));
	cr_assert_eq(mrmgr__kind_by_id(MRMGR__KIND_DMABUF), &mrmgr__kind_dmabuf);
	cr_assert_not(mrmgr__kind_monitored(&mrmgr__kind_dmabuf));
	/* Kind three: device VAs, watched by its domain's free counter. */
	cr_assert_eq(mrmgr__kind_by_id(MRMGR__KIND_DEVICE_VA), &mrmgr__kind_devva);
	cr_assert_not(mrmgr__kind_monitored(&mrmgr__kind_devva));
	cr_assert_null(mrmgr__kind_by_id(MRMGR__KIND_COUNT));
	cr_assert_null(mrmgr__kind_by_id((enum mrmgr__kind_id)-1));
}

static struct {
	int regs;
	int fail; /* errno the next registrations return */
	uint64_t key, len;
	void *ctx;
} seen;

static int counting_reg(void *ctx, const struct mrmgr_device_ops *ops,
			struct ibv_pd *pd, uint64_t key, uint64_t len,
			int access, struct ibv_mr **mr)
{
	seen.regs++;
	seen.key = key;
	seen.len = len;
	seen.ctx = ctx;
	if (seen.fail)
		return seen.fail;
	return mrmgr__kind_host.reg(NULL, ops, pd, key, len, access, mr);
}

static int counting_dereg(void *ctx, const struct mrmgr_device_ops *ops,
			  struct ibv_mr *mr)
{
	return mrmgr__kind_host.dereg(ctx, ops, mr);
}

static const struct mrmgr__kind counting = {
	.name = "counting",
	.id = MRMGR__KIND_HOST,
	.sources = 0, /* no monitor: its misses watch nothing */
	.reg = counting_reg,
	.dereg = counting_dereg,
};

Test(kinds, every_cache_serves_host)
{
	struct fixture f;

	fx_open(&f, NULL, NULL);
	cr_assert_eq(f.cache->kind, &mrmgr__kind_host);
	cr_assert_null(f.cache->kind_ctx);
	fx_close(&f);
}

Test(kinds, miss_registers_through_the_kind_hit_does_not)
{
	struct fixture f;
	size_t psz = (size_t)sysconf(_SC_PAGESIZE);
	char *p = map_rw(4 * psz, 1);
	mrmgr_region_t *r1, *r2;
	int marker;

	memset(&seen, 0, sizeof(seen));
	fx_open(&f, NULL, NULL);
	f.cache->kind = &counting;
	f.cache->kind_ctx = &marker;
	cr_assert_eq(mrmgr_get(f.cache, p, 2 * psz, RW, &r1), 0);
	cr_assert_eq(seen.regs, 1);
	cr_assert_eq(seen.key, (uint64_t)(uintptr_t)p);
	cr_assert_eq(seen.len, 2 * psz);
	cr_assert_eq(seen.ctx, &marker, "the cache's kind context is passed");
	cr_assert_eq(mrmgr_get(f.cache, p + psz, psz, RW, &r2), 0);
	cr_assert_eq(seen.regs, 1, "a hit registers nothing");
	cr_assert_eq(r1, r2);
	mrmgr_put(r2);
	mrmgr_put(r1);

	/* The kind's error is the get's. */
	seen.fail = EOPNOTSUPP;
	cr_assert_eq(mrmgr_get(f.cache, p + 3 * psz, psz, RW, &r1), EOPNOTSUPP);
	cr_assert_geq(seen.regs, 2);
	seen.fail = 0;
	fx_close(&f);
	munmap(p, 4 * psz);
}
