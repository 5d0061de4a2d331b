/*
 * Share sets on the simulated HCA: exports pin their region, imports
 * (through a second simulated context, as another process would) reach
 * the owner's memory with the owner's keys; a share set whose owner is
 * invalidated while members are in use (no stale access, no early
 * dereg); growth of a shared region (make-before-break, out of the set);
 * destruction with live members (EBUSY, and which; forced).
 *
 * SPDX-License-Identifier: MIT
 */
#include <errno.h>
#include <fcntl.h>

#include <mrmgr/device.h>

#include "share_helpers.h"

static struct mrmgr_cache_attr big = {
	.comp_mask = MRMGR_CACHE_ATTR_MAX_BYTES, .max_bytes = 1ull << 32,
};

/* Import an export into this process through a second context. */
static mrmgr_import_t *import_here(mrmgr_export_t *e, mrmgr_importer_t **imp)
{
	struct mrmgr_export_desc d;
	mrmgr_import_t *im;
	int fd;

	cr_assert_eq(mrmgr_export_describe(e, &d, sizeof(d), &fd), 0);
	cr_assert_geq(fd, 0);
	if (!*imp)
		cr_assert_eq(mrmgr_importer_open(dup(fd), imp), 0);
	cr_assert_eq(mrmgr_import(*imp, &d, sizeof(d), &im), 0);
	return im;
}

static int write_import(mrmgr_import_t *im, uint64_t off, size_t len, int c)
{
	return write_via(mrmgr_import_pd(im), mrmgr_import_rkey(im),
			 (void *)(uintptr_t)(mrmgr_import_addr(im) + off), len, c);
}

Test(share, export_pins_and_describes_and_an_import_reaches_the_memory)
{
	struct fixture f;
	mrmgr_region_t *r;
	mrmgr_export_t *e;
	mrmgr_importer_t *imp = NULL;
	struct mrmgr_export_desc d;
	char *buf = map_rw(64 * KiB, 0);

	fx_open(&f, NULL, &big);
	cr_assert_eq(mrmgr_get(f.cache, buf, 64 * KiB, RW, &r), 0);
	cr_assert_eq(mrmgr_region_export(r, NULL, &e), 0);
	int fd = -1;
	cr_assert_eq(mrmgr_export_describe(e, &d, sizeof(d), &fd), 0);
	cr_assert_eq(fd, f.ctx->cmd_fd);
	cr_assert_eq(d.version, MRMGR_EXPORT_DESC_VERSION);
	cr_assert_eq(d.size, sizeof(d));
	cr_assert_eq(d.owner_pid, getpid());
	cr_assert_eq(d.mr_handle, mrmgr_region_mr(r)->handle);
	cr_assert_eq(d.pd_handle, f.pd->handle);
	cr_assert_eq(d.rkey, mrmgr_region_rkey(r));
	cr_assert_eq(d.lkey, mrmgr_region_lkey(r));
	cr_assert_eq(d.addr, (uint64_t)(uintptr_t)buf);
	cr_assert_eq(d.length, 64 * KiB);
	cr_assert_eq(d.access, RW);
	cr_assert_eq(d.generation, mrmgr_region_generation(r));
	cr_assert_str_eq(d.device, f.ctx->device->name);
	mrmgr_put(r);

	/* Pinned: idle for callers, yet neither evicted nor destroyed. */
	struct mrmgr_stats s = cstats(f.cache);
	cr_assert_eq(s.regions_in_use, 1);
	cr_assert_eq(s.share_exports, 1);
	cr_assert_eq(s.exports, 1);
	cr_assert_eq(s.share_sets, 1);

	mrmgr_import_t *im = import_here(e, &imp);
	cr_assert_eq(mrmgr_import_rkey(im), d.rkey);
	cr_assert_eq(mrmgr_import_lkey(im), d.lkey);
	cr_assert_eq(mrmgr_import_addr(im), d.addr);
	cr_assert_eq(mrmgr_import_length(im), d.length);
	cr_assert_eq(mrmgr_import_id(im), d.export_id);
	cr_assert_eq(mrmgr_import_mr(im)->handle, d.mr_handle);
	cr_assert_eq(mrmgr_import_pd(im)->handle, d.pd_handle);
	cr_assert_eq(mrmgr_import_revoked(im), 0);
	cr_assert_eq(write_import(im, 8 * KiB, 4 * KiB, 'w'), 0);
	cr_assert(all_bytes(buf + 8 * KiB, 4 * KiB, 'w'));
	/* A second import of the same PD shares the imported PD. */
	mrmgr_import_t *im2 = import_here(e, &imp);
	cr_assert_eq(mrmgr_import_pd(im2), mrmgr_import_pd(im));
	cr_assert_eq(mrmgr_importer_close(imp), EBUSY);
	cr_assert_eq(mrmgr_import_release(im2), 0);
	cr_assert_eq(mrmgr_import_release(im), 0);
	cr_assert_eq(mrmgr_importer_close(imp), 0);

	cr_assert_eq(mrmgr_export_release(e), 0);
	s = cstats(f.cache);
	cr_assert_eq(s.regions_in_use, 0);
	cr_assert_eq(s.share_exports, 0);
	cr_assert_eq(s.share_sets, 0);
	cr_assert_eq(s.regions, 1, "still cached for later hits");
	fx_close(&f);
	munmap(buf, 64 * KiB);
}

Test(share, a_stale_descriptor_is_refused)
{
	struct fixture f;
	mrmgr_region_t *r;
	mrmgr_export_t *e;
	mrmgr_importer_t *imp = NULL;
	mrmgr_import_t *im;
	struct mrmgr_export_desc d;
	char *buf = map_rw(16 * KiB, 0);

	fx_open(&f, NULL, &big);
	cr_assert_eq(mrmgr_get(f.cache, buf, 16 * KiB, RW, &r), 0);
	cr_assert_eq(mrmgr_region_export(r, NULL, &e), 0);
	im = import_here(e, &imp);
	cr_assert_eq(mrmgr_import_release(im), 0);
	cr_assert_eq(mrmgr_export_describe(e, &d, sizeof(d), NULL), 0);
	/* A descriptor claiming other keys for the handle. */
	d.rkey ^= 0x80;
	capture_start();
	cr_assert_eq(mrmgr_import(imp, &d, sizeof(d), &im), ESTALE);
	d.rkey ^= 0x80;
	d.version = 99;
	cr_assert_eq(mrmgr_import(imp, &d, sizeof(d), &im), EINVAL);
	d.version = MRMGR_EXPORT_DESC_VERSION;
	strcpy(d.device, "another");
	cr_assert_eq(mrmgr_import(imp, &d, sizeof(d), &im), EINVAL);
	cr_assert_eq(mrmgr_import(imp, &d, 8, &im), EINVAL);
	capture_stop();
	cr_assert_eq(mrmgr_importer_close(imp), 0);
	mrmgr_put(r);
	cr_assert_eq(mrmgr_export_release(e), 0);
	fx_close(&f);
	munmap(buf, 16 * KiB);
}

/*
 * The scenario: the owner's memory is invalidated while members
 * of the share set are in use (a holder in each of two PDs, an
 * importer). No member is deregistered early; none is handed out again;
 * once the memory is replaced, the new registration is fresh, and a
 * write through an old member is caught as stale rather than lost.
 */
Test(share, owner_invalidated_while_members_are_in_use)
{
	struct mfx m;
	mrmgr_region_t *r0, *r1, *fresh;
	mrmgr_export_t *e;
	mrmgr_importer_t *imp = NULL;
	const size_t len = 32 * KiB;
	char *buf = map_rw(len, 0);

	mfx_open(&m, 2, 1, NULL, &big);
	cr_assert_eq(get_pd(m.cache, m.pd[0], buf, len, RW, &r0), 0);
	cr_assert_eq(get_pd(m.cache, m.pd[1], buf, len, RW, &r1), 0);
	cr_assert_eq(mrmgr_region_export(r0, m.pd[1], &e), 0);
	mrmgr_import_t *im = import_here(e, &imp);
	cr_assert_eq(mrmgr_import_rkey(im), mrmgr_region_rkey_pd(r0, m.pd[1]));
	struct mrmgr_share_info info[4];
	cr_assert_eq(shares(r0, info, 4), 3, "two PD MRs and an export");
	cr_assert_eq(info[2].kind, MRMGR_SHARE_EXPORT);
	cr_assert_eq(info[2].pd, m.pd[1]);
	uint64_t live = live_mrs_all(&m);
	cr_assert_eq(live, 2);

	cr_assert_eq(mrmgr_invalidate(m.cache, buf, len), 0);
	cr_assert_eq(mrmgr_export_revoked(e), 1);
	cr_assert_eq(shares(r0, info, 4), 3);
	cr_assert(info[2].flags & MRMGR_SHARE_REVOKED);
	cr_assert(info[0].flags & MRMGR_SHARE_DETACHED);
	/* No early dereg: every member still works on the pages it had. */
	cr_assert_eq(write_via(m.pd[0], mrmgr_region_rkey_pd(r0, m.pd[0]), buf, 64, '0'), 0);
	cr_assert_eq(write_via(m.pd[1], mrmgr_region_rkey_pd(r1, m.pd[1]), buf + 64, 64, '1'), 0);
	cr_assert_eq(write_import(im, 128, 64, 'i'), 0);
	cr_assert_eq(live_mrs_all(&m), live);

	/* The memory is replaced. Nothing old is handed out again. */
	remap_fixed(buf, len, 'N');
	cr_assert_eq(get_pd(m.cache, m.pd[1], buf, len, RW, &fresh), 0);
	cr_assert_neq(fresh, r0);
	cr_assert_neq(mrmgr_region_rkey_pd(fresh, m.pd[1]), mrmgr_region_rkey_pd(r1, m.pd[1]));
	cr_assert_eq(write_via(m.pd[1], mrmgr_region_rkey_pd(fresh, m.pd[1]), buf, len, 'F'), 0);
	cr_assert(all_bytes(buf, len, 'F'), "the fresh registration writes the new pages");
	mrmgr_put(fresh);
	if (mrmgr_sim_page_identity_available()) {
		/* An old member's write goes to the old pages: caught. */
		cr_assert_eq(write_import(im, 0, 64, 'x'), ESTALE);
		cr_assert_eq(write_via(m.pd[0], mrmgr_region_rkey_pd(r0, m.pd[0]), buf, 64, 'x'), ESTALE);
		cr_assert(all_bytes(buf, len, 'F'));
	}

	/* Members go one by one; the MRs only with the last. */
	mrmgr_put(r0);
	mrmgr_put(r1);
	cr_assert_eq(live_mrs_all(&m), live + 1, "pinned by the export (+ the fresh one)");
	cr_assert_eq(mrmgr_import_release(im), 0);
	cr_assert_eq(mrmgr_importer_close(imp), 0);
	cr_assert_eq(mrmgr_export_release(e), 0);
	cr_assert_eq(live_mrs_all(&m), 1, "only the fresh registration is left");
	struct mrmgr_stats s = cstats(m.cache);
	cr_assert_eq(s.share_revocations, 1);
	cr_assert_eq(s.share_exports, 0);
	cr_assert_eq(s.regions_in_use, 0);
	mfx_close(&m);
	munmap(buf, len);
}

Test(share, an_exported_region_is_neither_evicted_nor_invalidated_away)
{
	struct fixture f;
	struct mrmgr_cache_attr a = {
		.comp_mask = MRMGR_CACHE_ATTR_MAX_REGIONS | MRMGR_CACHE_ATTR_FLAGS,
		.max_regions = 1, .flags = MRMGR_CACHE_NO_MERGE,
	};
	mrmgr_region_t *r, *other;
	mrmgr_export_t *e;
	char *buf = map_rw(32 * KiB, 0);

	fx_open(&f, NULL, &a);
	cr_assert_eq(mrmgr_get(f.cache, buf, 16 * KiB, RW, &r), 0);
	cr_assert_eq(mrmgr_region_export(r, NULL, &e), 0);
	uint32_t rkey = mrmgr_region_rkey(r);
	mrmgr_put(r);
	/* The limit would evict it: it is pinned, the newcomer is uncached. */
	cr_assert_eq(mrmgr_get(f.cache, buf + 16 * KiB, 16 * KiB, RW, &other), 0);
	mrmgr_put(other);
	cr_assert_eq(cstats(f.cache).evictions, 0);
	cr_assert_eq(cstats(f.cache).uncached, 1);
	cr_assert_eq(write_via(f.pd, rkey, buf, 64, 'e'), 0);
	/* Invalidated: out of the cache, still registered. */
	cr_assert_eq(mrmgr_invalidate(f.cache, buf, 16 * KiB), 0);
	cr_assert_eq(write_via(f.pd, rkey, buf, 64, 'e'), 0);
	cr_assert_eq(cstats(f.cache).regions, 1);
	cr_assert_eq(mrmgr_export_release(e), 0);
	cr_assert_eq(cstats(f.cache).regions, 0, "deregistered at the release");
	cr_assert_eq(write_via(f.pd, rkey, buf, 64, 'e'), ENOENT);
	fx_close(&f);
	munmap(buf, 32 * KiB);
}

/* A translation rereg makes a shared MR private: growth never does it. */
Test(share, growth_of_an_exported_region_makes_before_breaking_and_leaves_the_set)
{
	struct fixture f;
	mrmgr_region_t *r, *grown;
	mrmgr_export_t *e;
	mrmgr_importer_t *imp = NULL;
	char *buf = map_rw(256 * KiB, 0);

	/* External monitoring: then a get's growth may rereg in place
	 * (grow.c), which is what this test watches for. */
	struct mrmgr_cache_attr ext = big;

	ext.comp_mask |= MRMGR_CACHE_ATTR_MONITOR;
	ext.monitor = MRMGR_MONITOR_EXTERNAL;
	fx_open(&f, NULL, &ext);
	cr_assert_eq(mrmgr_get(f.cache, buf, 16 * KiB, RW, &r), 0);
	cr_assert_eq(mrmgr_region_export(r, NULL, &e), 0);
	mrmgr_import_t *im = import_here(e, &imp);
	uint32_t rkey = mrmgr_region_rkey(r);
	uint64_t reregs = sstats(f.ctx).reregs; /* the cache's probe made one */
	mrmgr_put(r); /* idle for callers: only the export holds it */
	cr_assert_eq(mrmgr_get(f.cache, buf, 64 * KiB, RW, &grown), 0);
	cr_assert_neq(grown, r, "not re-registered in place");
	cr_assert_eq(sstats(f.ctx).reregs, reregs);
	cr_assert_geq(cstats(f.cache).rereg_fallback_shared, 1);
	struct mrmgr_share_info info[4];
	cr_assert_eq(shares(grown, info, 4), 1, "the new region is private");
	cr_assert_eq(info[0].kind, MRMGR_SHARE_MR);
	/* The old one keeps its member: the import still works. */
	cr_assert_eq(write_import(im, 0, 64, 'g'), 0);
	cr_assert(all_bytes(buf, 64, 'g'));
	cr_assert_eq(write_via(f.pd, rkey, buf, 64, 'h'), 0);
	/* The new private region grows in place again. */
	mrmgr_put(grown);
	cr_assert_eq(mrmgr_get(f.cache, buf, 200 * KiB, RW, &grown), 0);
	cr_assert_eq(sstats(f.ctx).reregs, reregs + 1, "private again: rereg in place");
	mrmgr_put(grown);
	cr_assert_eq(mrmgr_import_release(im), 0);
	cr_assert_eq(mrmgr_importer_close(imp), 0);
	uint64_t live = sstats(f.ctx).live_mrs;
	cr_assert_eq(mrmgr_export_release(e), 0);
	cr_assert_eq(sstats(f.ctx).live_mrs, live - 1, "the old MR at its export's release");
	fx_close(&f);
	munmap(buf, 256 * KiB);
}

Test(share, growth_of_a_multi_pd_region_leaves_the_old_set_to_its_holders)
{
	struct mfx m;
	mrmgr_region_t *r0, *r1, *grown;
	char *buf = map_rw(128 * KiB, 0);

	mfx_open(&m, 2, 1, NULL, &big);
	cr_assert_eq(get_pd(m.cache, m.pd[0], buf, 16 * KiB, RW, &r0), 0);
	cr_assert_eq(get_pd(m.cache, m.pd[1], buf, 16 * KiB, RW, &r1), 0);
	mrmgr_put(r0);
	uint64_t reregs = sstats(m.ctx[0]).reregs; /* the cache's probe made one */
	cr_assert_eq(get_pd(m.cache, m.pd[0], buf, 64 * KiB, RW, &grown), 0);
	cr_assert_neq(grown, r1);
	cr_assert_eq(sstats(m.ctx[0]).reregs, reregs);
	cr_assert_null(mrmgr_region_mr_pd(grown, m.pd[1]), "a new set: only the PD that asked");
	struct mrmgr_share_info info[4];
	cr_assert_eq(shares(r1, info, 4), 2, "the old region keeps both MRs");
	cr_assert(info[0].flags & MRMGR_SHARE_DETACHED);
	cr_assert_eq(write_via(m.pd[1], mrmgr_region_rkey_pd(r1, m.pd[1]), buf, 64, 'k'), 0);
	mrmgr_put(r1);
	mrmgr_put(grown);
	cr_assert_eq(live_mrs_all(&m), 1);
	mfx_close(&m);
	munmap(buf, 128 * KiB);
}

/* Idle, so nothing but its share set keeps it from a rereg in place. */
Test(share, an_idle_multi_pd_region_is_never_rereg_in_place)
{
	struct mfx m;
	mrmgr_region_t *r;
	char *buf = map_rw(128 * KiB, 0);

	mfx_open(&m, 2, 1, NULL, &big);
	for (int i = 0; i < 2; i++) {
		cr_assert_eq(get_pd(m.cache, m.pd[i], buf, 16 * KiB, RW, &r), 0);
		mrmgr_put(r);
	}
	uint64_t reregs = sstats(m.ctx[0]).reregs;
	cr_assert_eq(get_pd(m.cache, m.pd[0], buf, 64 * KiB, RW, &r), 0);
	cr_assert_eq(sstats(m.ctx[0]).reregs, reregs,
		     "a rereg would change one PD's MR and leave the other's");
	cr_assert_geq(cstats(m.cache).rereg_fallback_shared, 1);
	cr_assert_eq(live_mrs_all(&m), 1, "the idle old region went with both MRs");
	cr_assert_null(mrmgr_region_mr_pd(r, m.pd[1]));
	mrmgr_put(r);
	mfx_close(&m);
	munmap(buf, 128 * KiB);
}

Test(share, destroy_with_live_members_is_ebusy_and_says_which_unless_forced)
{
	struct fixture f;
	mrmgr_region_t *r;
	mrmgr_export_t *e;
	mrmgr_importer_t *imp = NULL;
	char *buf = map_rw(16 * KiB, 0);

	fx_open(&f, NULL, &big);
	cr_assert_eq(mrmgr_get(f.cache, buf, 16 * KiB, RW, &r), 0);
	cr_assert_eq(mrmgr_region_export(r, NULL, &e), 0);
	mrmgr_import_t *im = import_here(e, &imp);
	mrmgr_put(r);
	capture_start();
	cr_assert_eq(mrmgr_cache_destroy(f.cache), EBUSY);
	cr_assert_not_null(strstr(captured.text, "is exported (export"),
			   "the log says which: %s", captured.text);
	cr_assert_eq(mrmgr_cache_destroy_ex(f.cache, 1u << 7), EINVAL);
	/* A caller's own reference cannot be forced. */
	cr_assert_eq(mrmgr_get(f.cache, buf, 16 * KiB, RW, &r), 0);
	cr_assert_eq(mrmgr_cache_destroy_ex(f.cache, MRMGR_DESTROY_FORCE), EBUSY);
	cr_assert_eq(mrmgr_export_revoked(e), 1, "the export was forced anyway");
	mrmgr_put(r);
	capture_stop();
	cr_assert_eq(mrmgr_cache_destroy_ex(f.cache, MRMGR_DESTROY_FORCE), 0);
	f.cache = NULL;
	/* The import died with the owner's MR, as ibv_import_mr(3) says. */
	cr_assert_eq(write_import(im, 0, 64, 'z'), ENOENT);
	cr_assert_eq(mrmgr_export_release(e), 0, "an orphaned export is just freed");
	cr_assert_eq(mrmgr_import_release(im), 0);
	cr_assert_eq(mrmgr_importer_close(imp), 0);
	fx_close(&f);
	munmap(buf, 16 * KiB);
}

Test(share, export_refusals)
{
	struct fixture f;
	struct mrmgr_sim_attr rxe = {
		.comp_mask = MRMGR_SIM_ATTR_PERSONALITY, .personality = MRMGR_SIM_RXE,
	};
	mrmgr_region_t *r;
	mrmgr_export_t *e;
	mrmgr_importer_t *imp;
	char *buf = map_rw(16 * KiB, 0);

	capture_start();
	fx_open(&f, &rxe, &big);
	cr_assert_eq(mrmgr_get(f.cache, buf, 16 * KiB, RW, &r), 0);
	cr_assert_eq(mrmgr_region_export(r, NULL, &e), EOPNOTSUPP);
	cr_assert_not_null(strstr(captured.text, "cannot share MRs"));
	cr_assert_eq(mrmgr_region_export(r, NULL, &e), EOPNOTSUPP, "learnt once, same answer");
	int fd = dup(f.ctx->cmd_fd);
	cr_assert_eq(mrmgr_importer_open(fd, &imp), EOPNOTSUPP);
	cr_assert_geq(fcntl(fd, F_GETFD), 0);
	close(fd);
	cr_assert_eq(mrmgr_region_export(NULL, NULL, &e), EINVAL);
	cr_assert_eq(mrmgr_region_export(r, NULL, NULL), EINVAL);
	cr_assert_eq(mrmgr_region_export(r, f.pd, &e), EOPNOTSUPP);
	mrmgr_put(r);
	cr_assert_eq(cstats(f.cache).share_exports, 0);
	fx_close(&f);

	/* A region no longer in the cache cannot be exported. */
	fx_open(&f, NULL, &big);
	cr_assert_eq(mrmgr_get(f.cache, buf, 16 * KiB, RW, &r), 0);
	cr_assert_eq(mrmgr_invalidate(f.cache, buf, 16 * KiB), 0);
	cr_assert_eq(mrmgr_region_export(r, NULL, &e), ESTALE);
	mrmgr_put(r);
	cr_assert_eq(mrmgr_importer_open(-1, &imp), EINVAL);
	cr_assert_eq(mrmgr_export_describe(NULL, NULL, 0, NULL), EINVAL);
	cr_assert_eq(mrmgr_export_release(NULL), EINVAL);
	cr_assert_eq(mrmgr_import_release(NULL), EINVAL);
	cr_assert_eq(mrmgr_importer_close(NULL), EINVAL);
	capture_stop();
	fx_close(&f);
	munmap(buf, 16 * KiB);
}

Test(share, implicit_odp_views_cannot_be_exported_but_explicit_odp_can)
{
	struct fixture f;
	struct mrmgr_cache_attr a = {
		.comp_mask = MRMGR_CACHE_ATTR_ODP, .odp_mode = MRMGR_ODP_IMPLICIT,
	};
	mrmgr_region_t *r;
	mrmgr_export_t *e;
	char *buf = map_rw(16 * KiB, 0);

	capture_start();
	fx_open(&f, NULL, &a);
	cr_assert_eq(mrmgr_get(f.cache, buf, 16 * KiB, IBV_ACCESS_LOCAL_WRITE, &r), 0);
	cr_assert_eq(mrmgr_region_export(r, NULL, &e), EINVAL);
	mrmgr_put(r);
	fx_close(&f);
	a.odp_mode = MRMGR_ODP_EXPLICIT;
	fx_open(&f, NULL, &a);
	cr_assert_eq(mrmgr_get(f.cache, buf, 16 * KiB, RW, &r), 0);
	cr_assert_eq(mrmgr_region_export(r, NULL, &e), 0);
	mrmgr_importer_t *imp = NULL;
	mrmgr_import_t *im = import_here(e, &imp);
	cr_assert_eq(write_import(im, 0, 64, 'o'), 0);
	cr_assert(all_bytes(buf, 64, 'o'));
	cr_assert_eq(mrmgr_import_release(im), 0);
	cr_assert_eq(mrmgr_importer_close(imp), 0);
	cr_assert_eq(mrmgr_export_release(e), 0);
	mrmgr_put(r);
	capture_stop();
	fx_close(&f);
	munmap(buf, 16 * KiB);
}

Test(share, query_is_size_versioned)
{
	struct fixture f;
	mrmgr_region_t *r;
	mrmgr_export_t *e1, *e2;
	char *buf = map_rw(16 * KiB, 0);
	size_t n = 0;

	fx_open(&f, NULL, &big);
	cr_assert_eq(mrmgr_get(f.cache, buf, 16 * KiB, RW, &r), 0);
	cr_assert_eq(mrmgr_region_export(r, NULL, &e1), 0);
	cr_assert_eq(mrmgr_region_export(r, NULL, &e2), 0);
	/* Count only. */
	cr_assert_eq(mrmgr_region_query_shares(r, NULL, 0, sizeof(struct mrmgr_share_info), &n), 0);
	cr_assert_eq(n, 3);
	/* An older caller's smaller struct: only its prefix is written. */
	const size_t old = offsetof(struct mrmgr_share_info, refs);
	unsigned char raw[3][sizeof(struct mrmgr_share_info)];
	memset(raw, 0xab, sizeof(raw));
	cr_assert_eq(mrmgr_region_query_shares(r, (void *)raw, 2, old, &n), 0);
	cr_assert_eq(n, 3);
	struct mrmgr_share_info first;
	memcpy(&first, raw[0], old);
	cr_assert_eq(first.kind, MRMGR_SHARE_MR);
	cr_assert_eq(((unsigned char *)raw)[2 * old], 0xab, "nothing past max entries");
	cr_assert_eq(mrmgr_region_query_shares(r, NULL, 1, sizeof(first), &n), EINVAL);
	cr_assert_eq(mrmgr_region_query_shares(r, &first, 1, 0, &n), EINVAL);
	cr_assert_eq(cstats(f.cache).share_exports, 2);
	cr_assert_eq(mrmgr_export_release(e1), 0);
	cr_assert_eq(mrmgr_export_release(e2), 0);
	mrmgr_put(r);
	fx_close(&f);
	munmap(buf, 16 * KiB);
}

/*
 * What libmrmgr-share needs from libmrmgr, public: the cache's exporting
 * device before any export, an export's importer count, and the provider
 * of a command descriptor.
 */
Test(share, the_public_calls_the_share_library_stands_on)
{
	struct fixture f, g;
	struct mrmgr_sim_attr rxe = {
		.comp_mask = MRMGR_SIM_ATTR_PERSONALITY, .personality = MRMGR_SIM_RXE,
	};
	struct mrmgr_share_info info[2];
	struct ibv_context *ctx = NULL;
	mrmgr_region_t *r;
	mrmgr_export_t *e;
	char *buf = map_rw(16 * KiB, 0);

	capture_start();
	fx_open(&f, NULL, &big);
	cr_assert_eq(mrmgr_cache_export_context(f.cache, NULL, &ctx), 0);
	cr_assert_eq(ctx, f.ctx);
	cr_assert_eq(mrmgr_cache_export_context(f.cache, f.pd, &ctx), 0);
	cr_assert_eq(mrmgr_cache_export_context(NULL, NULL, &ctx), EINVAL);
	cr_assert_eq(mrmgr_cache_export_context(f.cache, NULL, NULL), EINVAL);

	/* The seam names the provider of a command descriptor, and no
	 * provider for what is none. */
	const struct mrmgr_device_ops *ops = mrmgr_device_claim_fd(f.ctx->cmd_fd);
	cr_assert_not_null(ops);
	cr_assert_str_eq(ops->name, "sim");
	cr_assert_null(mrmgr_device_claim_fd(-1));
	int nul = open("/dev/null", O_RDONLY);
	cr_assert_null(mrmgr_device_claim_fd(nul));
	close(nul);

	/* Importers counted by whoever passes descriptors. */
	cr_assert_eq(mrmgr_get(f.cache, buf, 16 * KiB, RW, &r), 0);
	cr_assert_eq(mrmgr_region_export(r, NULL, &e), 0);
	cr_assert_eq(mrmgr_export_importers(e, -1), EINVAL, "none attached");
	cr_assert_eq(mrmgr_export_importers(e, 2), EINVAL);
	cr_assert_eq(mrmgr_export_importers(NULL, 1), EINVAL);
	cr_assert_eq(mrmgr_export_importers(e, 1), 0);
	cr_assert_eq(mrmgr_export_importers(e, 1), 0);
	cr_assert_eq(cstats(f.cache).share_importers, 2);
	cr_assert_eq(cstats(f.cache).imports, 2);
	cr_assert_eq(shares(r, info, 2), 2);
	cr_assert_eq(info[1].kind, MRMGR_SHARE_EXPORT);
	cr_assert_eq(info[1].importers, 2);
	cr_assert_eq(mrmgr_export_importers(e, -1), 0);
	cr_assert_eq(cstats(f.cache).share_importers, 1);
	cr_assert_eq(cstats(f.cache).imports, 2, "attaches, counted");
	cr_assert_eq(mrmgr_export_importers(e, -1), 0);
	cr_assert_eq(mrmgr_export_release(e), 0);
	mrmgr_put(r);

	/* A PD the cache does not serve; a device that cannot export. */
	fx_open(&g, &rxe, &big);
	cr_assert_eq(mrmgr_cache_export_context(f.cache, g.pd, &ctx), EINVAL);
	cr_assert_eq(mrmgr_cache_export_context(g.cache, NULL, &ctx), EOPNOTSUPP);
	capture_stop();
	fx_close(&g);
	fx_close(&f);
	munmap(buf, 16 * KiB);
}
