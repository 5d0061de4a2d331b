/*
 * Aliases on the simulated HCA: a region whose memory is a memfd's pages,
 * mapped again (same offset within 4 MiB) and registered in another PD:
 * the same pages through both MRs, the share set lists it, it pins the
 * region, invalidation revokes it, growth leaves it with the old region,
 * destruction with a live alias is EBUSY unless forced, the page-identity
 * checker catches the alias going stale, and bad input is refused.
 *
 * SPDX-License-Identifier: MIT
 */
#define _GNU_SOURCE /* memfd_create */
#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>

#include "share_helpers.h"

#define FILE_LEN (256 * KiB)
#define OFF (64 * KiB)
#define LEN (64 * KiB)

/*
 * Aliases need shared (memfd) memory, which no automatic memory-event
 * source can vouch for (another process may change it): such a cache
 * must be told of changes by the application (external monitoring), or
 * the region is not cached and cannot be aliased.
 */
static struct mrmgr_cache_attr big = {
	.comp_mask = MRMGR_CACHE_ATTR_MONITOR | MRMGR_CACHE_ATTR_MAX_BYTES, .max_bytes = 1ull << 32,
	.monitor = MRMGR_MONITOR_EXTERNAL,
};

struct shm {
	int fd;
	char *base; /* the program's mapping of the whole file */
};

static void shm_open_(struct shm *m)
{
	m->fd = memfd_create("alias-test", MFD_CLOEXEC);
	cr_assert_geq(m->fd, 0);
	cr_assert_eq(ftruncate(m->fd, FILE_LEN), 0);
	m->base = mmap(NULL, FILE_LEN, PROT_READ | PROT_WRITE, MAP_SHARED, m->fd, 0);
	cr_assert_neq(m->base, MAP_FAILED);
	memset(m->base, 's', FILE_LEN);
}

static void shm_close(struct shm *m)
{
	munmap(m->base, FILE_LEN);
	close(m->fd);
}

Test(alias, the_same_pages_through_a_second_mapping_and_pd)
{
	struct mfx m;
	struct shm sh;
	mrmgr_region_t *r;
	mrmgr_alias_t *al;

	shm_open_(&sh);
	mfx_open(&m, 2, 1, NULL, &big);
	cr_assert_eq(mrmgr_get(m.cache, sh.base + OFF, LEN, RW, &r), 0);
	cr_assert_eq(mrmgr_region_alias(r, sh.fd, OFF, m.pd[1],
					IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ, &al), 0);
	char *a = mrmgr_alias_addr(al);
	cr_assert_neq(a, sh.base + OFF);
	cr_assert_eq((uintptr_t)a % (4 * MiB), (uintptr_t)(sh.base + OFF) % (4 * MiB),
		     "the original's offset within 4 MiB");
	cr_assert_eq(mrmgr_alias_mr(al)->pd, m.pd[1]);
	cr_assert_neq(mrmgr_alias_rkey(al), mrmgr_region_rkey(r));
	/* One set of pages: a store through one mapping shows in the other,
	 * and an RDMA WRITE through the region's key is read through the
	 * alias's. */
	sh.base[OFF + 5] = 'x';
	cr_assert_eq(a[5], 'x');
	cr_assert_eq(write_via(m.pd[0], mrmgr_region_rkey(r), sh.base + OFF + 4096, 64, 'W'), 0);
	char back[64];
	cr_assert_eq(mrmgr_sim_read(m.pd[1], mrmgr_alias_rkey(al), (uintptr_t)a + 4096, back, 64), 0);
	cr_assert(all_bytes(back, 64, 'W'));
	cr_assert_eq(write_via(m.pd[1], mrmgr_alias_rkey(al), a, 64, 'n'), EACCES,
		     "the alias was registered read-only for peers");

	struct mrmgr_share_info info[4];
	cr_assert_eq(shares(r, info, 4), 2);
	cr_assert_eq(info[1].kind, MRMGR_SHARE_ALIAS);
	cr_assert_eq(info[1].addr, (uint64_t)(uintptr_t)a);
	cr_assert_eq(info[1].pd, m.pd[1]);
	struct mrmgr_stats s = cstats(m.cache);
	cr_assert_eq(s.share_aliases, 1);
	cr_assert_eq(s.share_sets, 1);
	mrmgr_put(r);
	cr_assert_eq(cstats(m.cache).regions_in_use, 1, "the alias pins the region");
	cr_assert_eq(mrmgr_alias_destroy(al), 0);
	s = cstats(m.cache);
	cr_assert_eq(s.share_aliases, 0);
	cr_assert_eq(s.share_sets, 0);
	cr_assert_eq(s.regions_in_use, 0);
	mfx_close(&m);
	shm_close(&sh);
}

Test(alias, invalidation_revokes_and_the_region_waits_for_the_alias)
{
	struct fixture f;
	struct shm sh;
	mrmgr_region_t *r;
	mrmgr_alias_t *al;

	shm_open_(&sh);
	fx_open(&f, NULL, &big);
	cr_assert_eq(mrmgr_get(f.cache, sh.base + OFF, LEN, RW, &r), 0);
	cr_assert_eq(mrmgr_region_alias(r, sh.fd, OFF, NULL, RW, &al), 0);
	cr_assert_eq(mrmgr_alias_mr(al)->pd, f.pd, "NULL: the region's PD");
	uint32_t rkey = mrmgr_region_rkey(r);
	mrmgr_put(r);
	uint64_t live = sstats(f.ctx).live_mrs;
	cr_assert_eq(mrmgr_invalidate(f.cache, sh.base + OFF, LEN), 0);
	cr_assert_eq(mrmgr_alias_revoked(al), 1);
	cr_assert_eq(sstats(f.ctx).live_mrs, live, "no early dereg");
	cr_assert_eq(write_via(f.pd, rkey, sh.base + OFF, 64, 'k'), 0);
	cr_assert_eq(write_via(f.pd, mrmgr_alias_rkey(al), mrmgr_alias_addr(al), 64, 'k'), 0);
	cr_assert_eq(mrmgr_alias_destroy(al), 0);
	cr_assert_eq(sstats(f.ctx).live_mrs, live - 2, "both at the alias's end");
	cr_assert_eq(cstats(f.cache).share_revocations, 1);
	fx_close(&f);
	shm_close(&sh);
}

/* mrmgr_alias_query() is the share set's own record of the alias. */
Test(alias, query_is_the_share_sets_record)
{
	struct mrmgr_share_info q, set[4];
	struct fixture f;
	struct shm sh;
	mrmgr_region_t *r;
	mrmgr_alias_t *al;
	size_t n;

	shm_open_(&sh);
	fx_open(&f, NULL, &big);
	cr_assert_eq(mrmgr_get(f.cache, sh.base + OFF, LEN, RW, &r), 0);
	cr_assert_eq(mrmgr_region_alias(r, sh.fd, OFF, NULL, RW, &al), 0);
	cr_assert_eq(mrmgr_alias_query(al, &q, sizeof(q)), 0);
	cr_assert_eq(mrmgr_region_query_shares(r, set, 4, sizeof(set[0]), &n), 0);
	cr_assert_eq(n, 2, "the region's MR and the alias");
	cr_assert_eq(set[1].kind, MRMGR_SHARE_ALIAS);
	cr_assert_eq(memcmp(&q, &set[1], sizeof(q)), 0);
	cr_assert_eq(q.flags, 0);
	cr_assert_eq(q.length, LEN);
	cr_assert_eq(q.rkey, mrmgr_alias_mr(al)->rkey);
	cr_assert_neq(q.addr, (uint64_t)(uintptr_t)(sh.base + OFF), "its own mapping");
	mrmgr_put(r);
	cr_assert_eq(mrmgr_invalidate(f.cache, sh.base + OFF, LEN), 0);
	cr_assert_eq(mrmgr_alias_query(al, &q, sizeof(q)), 0);
	cr_assert_eq(q.flags, MRMGR_SHARE_REVOKED);
	cr_assert_eq(mrmgr_alias_query(NULL, &q, sizeof(q)), EINVAL);
	cr_assert_eq(mrmgr_alias_query(al, NULL, sizeof(q)), EINVAL);
	cr_assert_eq(mrmgr_alias_query(al, &q, 0), EINVAL);
	cr_assert_eq(mrmgr_alias_destroy(al), 0);
	fx_close(&f);
	shm_close(&sh);
}

Test(alias, growth_leaves_the_alias_with_the_old_region)
{
	struct fixture f;
	struct shm sh;
	mrmgr_region_t *r, *grown;
	mrmgr_alias_t *al;

	shm_open_(&sh);
	fx_open(&f, NULL, &big);
	uint64_t reregs = sstats(f.ctx).reregs;
	cr_assert_eq(mrmgr_get(f.cache, sh.base + OFF, LEN, RW, &r), 0);
	cr_assert_eq(mrmgr_region_alias(r, sh.fd, OFF, NULL, RW, &al), 0);
	mrmgr_put(r);
	cr_assert_eq(mrmgr_get(f.cache, sh.base + OFF, 2 * LEN, RW, &grown), 0);
	cr_assert_neq(grown, r);
	cr_assert_eq(sstats(f.ctx).reregs, reregs, "never in place");
	cr_assert_geq(cstats(f.cache).rereg_fallback_shared, 1, "because it is shared");
	struct mrmgr_share_info info[2];
	cr_assert_eq(shares(grown, info, 2), 1, "private");
	mrmgr_put(grown);
	cr_assert_eq(write_via(f.pd, mrmgr_alias_rkey(al), mrmgr_alias_addr(al), 64, 'g'), 0);
	cr_assert_eq(sh.base[OFF], 'g');
	cr_assert_eq(mrmgr_alias_destroy(al), 0);
	fx_close(&f);
	shm_close(&sh);
}

Test(alias, destroy_with_an_alias_is_ebusy_unless_forced)
{
	struct fixture f;
	struct shm sh;
	mrmgr_region_t *r;
	mrmgr_alias_t *al;

	shm_open_(&sh);
	fx_open(&f, NULL, &big);
	cr_assert_eq(mrmgr_get(f.cache, sh.base + OFF, LEN, RW, &r), 0);
	cr_assert_eq(mrmgr_region_alias(r, sh.fd, OFF, NULL, RW, &al), 0);
	mrmgr_put(r);
	capture_start();
	cr_assert_eq(mrmgr_cache_destroy(f.cache), EBUSY);
	cr_assert_not_null(strstr(captured.text, "has an alias at"), "%s", captured.text);
	capture_stop();
	cr_assert_eq(mrmgr_cache_destroy_ex(f.cache, MRMGR_DESTROY_FORCE), 0);
	f.cache = NULL;
	cr_assert_eq(mrmgr_alias_revoked(al), 1);
	cr_assert_null(mrmgr_alias_mr(al));
	cr_assert_eq(mrmgr_alias_rkey(al), 0);
	cr_assert_eq(((char *)mrmgr_alias_addr(al))[0], 's', "the mapping stays until destroyed");
	cr_assert_eq(mrmgr_alias_destroy(al), 0);
	fx_close(&f);
	shm_close(&sh);
}

Test(alias, page_identity_covers_the_alias)
{
	struct fixture f;
	struct shm sh;
	mrmgr_region_t *r;
	mrmgr_alias_t *al;

	if (!mrmgr_sim_page_identity_available())
		cr_skip_test("page identity needs pagemap PFNs (CAP_SYS_ADMIN)");
	shm_open_(&sh);
	fx_open(&f, NULL, &big);
	cr_assert_eq(mrmgr_get(f.cache, sh.base + OFF, LEN, RW, &r), 0);
	cr_assert_eq(mrmgr_region_alias(r, sh.fd, OFF, NULL, RW, &al), 0);
	/* The file's pages go (truncate, grow back): both mappings now show
	 * new pages; both MRs still hold the old ones. */
	cr_assert_eq(ftruncate(sh.fd, 0), 0);
	cr_assert_eq(ftruncate(sh.fd, FILE_LEN), 0);
	memset(sh.base, 'N', FILE_LEN);
	cr_assert_eq(write_via(f.pd, mrmgr_alias_rkey(al), mrmgr_alias_addr(al), 64, 'x'), ESTALE);
	cr_assert_eq(write_via(f.pd, mrmgr_region_rkey(r), sh.base + OFF, 64, 'x'), ESTALE);
	cr_assert(all_bytes(sh.base, FILE_LEN, 'N'));
	mrmgr_put(r);
	cr_assert_eq(mrmgr_alias_destroy(al), 0);
	fx_close(&f);
	shm_close(&sh);
}

Test(alias, memory_that_is_not_the_file_is_refused)
{
	struct fixture f;
	struct shm sh, other;
	mrmgr_region_t *r, *priv;
	mrmgr_alias_t *al;
	char *anon = map_rw(LEN, 0);

	shm_open_(&sh);
	shm_open_(&other);
	capture_start();
	fx_open(&f, NULL, &big);
	cr_assert_eq(mrmgr_get(f.cache, sh.base + OFF, LEN, RW, &r), 0);
	cr_assert_eq(mrmgr_region_alias(r, sh.fd, 0, NULL, RW, &al), EINVAL, "wrong offset");
	cr_assert_not_null(strstr(captured.text, "another offset"), "%s", captured.text);
	cr_assert_eq(mrmgr_region_alias(r, other.fd, OFF, NULL, RW, &al), EINVAL);
	cr_assert_not_null(strstr(captured.text, "another file"));
	cr_assert_eq(mrmgr_region_alias(r, -1, OFF, NULL, RW, &al), EINVAL);
	cr_assert_eq(mrmgr_region_alias(r, sh.fd, OFF, NULL, IBV_ACCESS_REMOTE_WRITE, &al), EINVAL);
	cr_assert_eq(mrmgr_region_alias(NULL, sh.fd, OFF, NULL, RW, &al), EINVAL);
	cr_assert_eq(mrmgr_get(f.cache, anon, LEN, RW, &priv), 0);
	cr_assert_eq(mrmgr_region_alias(priv, sh.fd, 0, NULL, RW, &al), EINVAL);
	cr_assert_not_null(strstr(captured.text, "private"));
	mrmgr_put(priv);
	cr_assert_eq(mrmgr_invalidate(f.cache, sh.base + OFF, LEN), 0);
	cr_assert_eq(mrmgr_region_alias(r, sh.fd, OFF, NULL, RW, &al), ESTALE);
	cr_assert_eq(mrmgr_alias_destroy(NULL), EINVAL);
	capture_stop();
	mrmgr_put(r);
	cr_assert_eq(cstats(f.cache).share_aliases, 0);
	fx_close(&f);
	shm_close(&sh);
	shm_close(&other);
	munmap(anon, LEN);
}
