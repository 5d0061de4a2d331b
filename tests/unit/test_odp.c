/*
 * On-demand paging modes on the simulated HCA: the capability probe and
 * the decision (with every fallback and strictness), explicit ODP regions
 * (nothing pinned, not held against max_bytes), implicit mode (views of
 * one implicit MR: the right keys for any range, zero registrations after
 * the first), the read-only-mapping refusal, ODP regions across memory
 * events (never stale), the automatic prefetch hint, and threads.
 *
 * SPDX-License-Identifier: MIT
 */
#define _GNU_SOURCE /* memfd_create */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "helpers.h"

#define PG ((size_t)4096)

static struct {
	int lines, errors, warns;
	char last[512], last_warn[512];
} logged;

static void capture(enum mrmgr_log_level level, const char *msg, void *arg)
{
	(void)arg;
	logged.lines++;
	logged.errors += level == MRMGR_LOG_ERROR;
	logged.warns += level == MRMGR_LOG_WARN;
	if (level == MRMGR_LOG_WARN)
		snprintf(logged.last_warn, sizeof(logged.last_warn), "%s", msg);
	if (level <= MRMGR_LOG_WARN)
		snprintf(logged.last, sizeof(logged.last), "%s", msg);
}

static void setup(void)
{
	unsetenv("MRMGR_ODP");
	unsetenv("MRMGR_ODP_STRICT");
	unsetenv("MRMGR_ODP_PREFETCH");
	memset(&logged, 0, sizeof(logged));
	mrmgr_set_log_handler(capture, NULL, MRMGR_LOG_INFO);
}

static void teardown(void)
{
	mrmgr_set_log_handler(NULL, NULL, MRMGR_LOG_WARN);
}

TestSuite(odp, .init = setup, .fini = teardown);

/* mrmgr_get_ex() with per-call flags (MRMGR_GET_ATTR_FLAGS). */
static int get_flags(mrmgr_cache_t *c, void *addr, size_t length,
		     unsigned int access, uint64_t flags, mrmgr_region_t **r)
{
	struct mrmgr_get_attr ga = { .comp_mask = MRMGR_GET_ATTR_FLAGS,
				     .flags = flags };

	return mrmgr_get_ex(c, addr, length, access, &ga, r);
}

static struct mrmgr_cache_attr odp_attr(uint32_t mode, uint32_t flags)
{
	struct mrmgr_cache_attr a = {
		.comp_mask = MRMGR_CACHE_ATTR_ODP | MRMGR_CACHE_ATTR_MAX_BYTES,
		.max_bytes = 1ull << 32,
		.odp_mode = mode,
		.odp_flags = flags,
	};
	return a;
}

static struct mrmgr_sim_attr sim_attr(uint32_t personality, uint32_t flags)
{
	struct mrmgr_sim_attr a = {
		.comp_mask = MRMGR_SIM_ATTR_PERSONALITY | MRMGR_SIM_ATTR_FLAGS,
		.personality = personality,
		.flags = flags,
	};
	return a;
}

static struct mrmgr_odp_info odp_info(mrmgr_cache_t *c)
{
	struct mrmgr_odp_info i;

	cr_assert_eq(mrmgr_cache_query_odp(c, &i, sizeof(i)), 0);
	return i;
}

/* Open a device and PD only; the test makes the cache. */
static void dev_open(struct fixture *f, const struct mrmgr_sim_attr *sa)
{
	memset(f, 0, sizeof(*f));
	cr_assert_eq(mrmgr_sim_open(sa, &f->ctx), 0);
	cr_assert_eq(mrmgr_sim_alloc_pd(f->ctx, &f->pd), 0);
}

static void *map_ro(size_t len)
{
	void *p = mmap(NULL, len, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	cr_assert_neq(p, MAP_FAILED);
	return p;
}

/* ------------------------------------------------------------ probe */

Test(odp, probe_reports_caps_and_the_decision)
{
	struct fixture f;
	struct mrmgr_cache_attr a = odp_attr(MRMGR_ODP_AUTO, 0);

	fx_open(&f, NULL, &a);
	struct mrmgr_odp_info i = odp_info(f.cache);
	cr_assert_eq(i.requested_mode, MRMGR_ODP_AUTO);
	cr_assert_eq(i.mode, MRMGR_ODP_IMPLICIT);
	cr_assert_eq(i.reason, MRMGR_ODP_REASON_AS_REQUESTED);
	cr_assert_eq(i.general_caps, IBV_ODP_SUPPORT | IBV_ODP_SUPPORT_IMPLICIT);
	cr_assert_eq(i.rc_caps, 0x3f, "mlx5-like RC: every op");
	cr_assert_eq(i.uc_caps, 0);
	cr_assert_eq(i.ud_caps, IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_SRQ_RECV);
	cr_assert_neq(i.xrc_caps, 0);
	cr_assert_eq(i.max_sge, 30);
	cr_assert_eq(i.transports, MRMGR_ODP_TRANSPORT_RC, "default transport");
	cr_assert_eq(i.ops, IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV |
			    IBV_ODP_SUPPORT_WRITE | IBV_ODP_SUPPORT_READ);
	cr_assert_eq(i.implicit_access, IBV_ACCESS_LOCAL_WRITE |
				       IBV_ACCESS_REMOTE_WRITE |
				       IBV_ACCESS_REMOTE_READ,
		     "no atomics unless asked for");
	cr_assert_neq(i.implicit_lkey, 0);
	cr_assert(strstr(i.reason_text, "implicit"), "%s", i.reason_text);
	/* The one registration so far is the implicit MR. */
	cr_assert_eq(cstats(f.cache).registrations, 1);
	cr_assert_eq(sstats(f.ctx).live_mrs, 1);
	cr_assert_eq(sstats(f.ctx).pinned_bytes, 0);
	fx_close(&f);
}

Test(odp, query_rejects_bad_arguments_and_copies_by_size)
{
	struct fixture f;
	struct mrmgr_odp_info i;

	fx_open(&f, NULL, NULL);
	cr_assert_eq(mrmgr_cache_query_odp(NULL, &i, sizeof(i)), EINVAL);
	cr_assert_eq(mrmgr_cache_query_odp(f.cache, NULL, sizeof(i)), EINVAL);
	cr_assert_eq(mrmgr_cache_query_odp(f.cache, &i, 0), EINVAL);
	memset(&i, 0xab, sizeof(i));
	cr_assert_eq(mrmgr_cache_query_odp(f.cache, &i, 4), 0);
	cr_assert_eq(i.requested_mode, MRMGR_ODP_OFF);
	cr_assert_eq(i.mode, 0xabababab, "only 4 bytes copied");
	fx_close(&f);
}

Test(odp, bad_odp_attributes_are_einval)
{
	struct fixture f;
	mrmgr_cache_t *c;
	struct mrmgr_cache_attr bad[] = {
		odp_attr(7, 0), odp_attr(MRMGR_ODP_AUTO, 1u << 9),
		odp_attr(MRMGR_ODP_AUTO, 0), odp_attr(MRMGR_ODP_AUTO, 0),
	};

	bad[2].odp_transports = 1u << 7;
	bad[3].odp_ops = 1u << 9;
	dev_open(&f, NULL);
	for (size_t k = 0; k < sizeof(bad) / sizeof(bad[0]); k++)
		cr_assert_eq(mrmgr_cache_create(f.pd, &bad[k], &c), EINVAL,
			     "case %zu", k);
	fx_close(&f);
}

/* ------------------------------------------------------------ off */

Test(odp, off_is_the_default_and_pins)
{
	struct fixture f;
	mrmgr_region_t *r;
	char *buf = map_rw(64 * KiB, 1);

	fx_open(&f, NULL, NULL);
	cr_assert_eq(odp_info(f.cache).mode, MRMGR_ODP_OFF);
	cr_assert_eq(mrmgr_get(f.cache, buf, 64 * KiB, RW, &r), 0);
	cr_assert_eq(sstats(f.ctx).pinned_bytes, 64 * KiB);
	struct mrmgr_stats s = cstats(f.cache);
	cr_assert_eq(s.pinned_bytes, 64 * KiB);
	cr_assert_eq(s.odp_bytes, 0);
	mrmgr_put(r);
	fx_close(&f);
	munmap(buf, 64 * KiB);
}

/* ------------------------------------------------------------ explicit */

Test(odp, explicit_regions_pin_nothing_and_ignore_max_bytes)
{
	struct fixture f;
	struct mrmgr_cache_attr a = odp_attr(MRMGR_ODP_EXPLICIT, 0);
	mrmgr_region_t *r[4];
	char *buf = map_rw(8 * MiB, 1);

	a.max_bytes = 64 * KiB; /* far below what is asked */
	a.comp_mask |= MRMGR_CACHE_ATTR_FLAGS;
	a.flags = MRMGR_CACHE_NO_MERGE;
	fx_open(&f, NULL, &a);
	cr_assert_eq(odp_info(f.cache).mode, MRMGR_ODP_EXPLICIT);
	for (int i = 0; i < 4; i++) {
		cr_assert_eq(mrmgr_get(f.cache, buf + i * 2 * MiB, MiB, RW, &r[i]), 0);
		mrmgr_put(r[i]);
	}
	struct mrmgr_stats s = cstats(f.cache);
	cr_assert_eq(s.registrations, 4);
	cr_assert_eq(s.evictions, 0, "ODP regions are not held against max_bytes");
	cr_assert_eq(s.uncached, 0);
	cr_assert_eq(s.regions, 4);
	cr_assert_eq(s.pinned_bytes, 0);
	cr_assert_eq(s.odp_bytes, 4 * MiB);
	struct mrmgr_sim_stats ss = sstats(f.ctx);
	cr_assert_eq(ss.live_mrs, 4);
	cr_assert_eq(ss.pinned_bytes, 0, "ODP MRs do not pin");
	/* Hits work as for pinned regions. */
	cr_assert_eq(mrmgr_get(f.cache, buf + 100, 4000, RW, &r[0]), 0);
	cr_assert_eq(mrmgr_region_addr(r[0]), buf);
	mrmgr_put(r[0]);
	cr_assert_eq(cstats(f.cache).hits, 1);
	/* Invalidation still deregisters them, and odp_bytes follows. */
	cr_assert_eq(mrmgr_invalidate(f.cache, buf, 8 * MiB), 0);
	s = cstats(f.cache);
	cr_assert_eq(s.odp_bytes, 0);
	cr_assert_eq(s.invalidations, 4);
	cr_assert_eq(sstats(f.ctx).live_mrs, 0);
	fx_close(&f);
	munmap(buf, 8 * MiB);
}

Test(odp, explicit_regions_merge)
{
	struct fixture f;
	struct mrmgr_cache_attr a = odp_attr(MRMGR_ODP_EXPLICIT, 0);
	mrmgr_region_t *r1, *r2;
	char *buf = map_rw(128 * KiB, 1);

	fx_open(&f, NULL, &a);
	cr_assert_eq(mrmgr_get(f.cache, buf, 64 * KiB, RW, &r1), 0);
	mrmgr_put(r1);
	cr_assert_eq(mrmgr_get(f.cache, buf + 64 * KiB, 64 * KiB, RW, &r2), 0);
	cr_assert_eq(mrmgr_region_addr(r2), buf);
	cr_assert_eq(mrmgr_region_length(r2), 128 * KiB);
	mrmgr_put(r2);
	cr_assert_eq(cstats(f.cache).merges, 1);
	cr_assert_eq(cstats(f.cache).odp_bytes, 128 * KiB);
	fx_close(&f);
	munmap(buf, 128 * KiB);
}

/* ------------------------------------------------------------ implicit */

Test(odp, implicit_gives_the_implicit_keys_for_any_range)
{
	struct fixture f;
	struct mrmgr_cache_attr a = odp_attr(MRMGR_ODP_IMPLICIT, 0);
	size_t lens[3] = { 256 * KiB, 3 * MiB, 40 * KiB };
	char *bufs[3];
	unsigned int seed = 7;

	for (int b = 0; b < 3; b++)
		bufs[b] = map_rw(lens[b], 'a' + b);
	fx_open(&f, NULL, &a);
	/* The device may have been probed (rereg) at creation: count from here. */
	uint64_t sreg0 = sstats(f.ctx).registrations;
	struct mrmgr_odp_info i = odp_info(f.cache);
	cr_assert_eq(i.mode, MRMGR_ODP_IMPLICIT);

	for (int k = 0; k < 300; k++) {
		int b = rand_r(&seed) % 3;
		size_t off = (size_t)rand_r(&seed) % lens[b];
		size_t len = 1 + (size_t)rand_r(&seed) % (lens[b] - off);
		unsigned int acc = rand_r(&seed) & 1 ? RW : IBV_ACCESS_REMOTE_READ;
		mrmgr_region_t *r;
		char *p = bufs[b] + off;

		cr_assert_eq(mrmgr_get(f.cache, p, len, acc, &r), 0);
		cr_assert_eq(mrmgr_region_lkey(r), i.implicit_lkey);
		cr_assert_eq(mrmgr_region_rkey(r), i.implicit_rkey);
		cr_assert_eq(mrmgr_region_mr(r)->lkey, i.implicit_lkey);
		char *ra = mrmgr_region_addr(r);
		cr_assert(ra <= p && ra + mrmgr_region_length(r) >= p + len,
			  "the view covers the request");
		cr_assert_eq(((uintptr_t)ra) % PG, 0);
		cr_assert_eq((mrmgr_region_access(r) & acc), acc);
		if (acc == RW) {
			/* The rkey really reaches these bytes. */
			char w[64];
			size_t n = len < sizeof(w) ? len : sizeof(w);

			memset(w, 'W' + (k & 3), n);
			cr_assert_eq(mrmgr_sim_write(f.pd, mrmgr_region_rkey(r),
						     (uintptr_t)p, w, n), 0);
			cr_assert_eq(memcmp(p, w, n), 0);
		}
		mrmgr_put(r);
	}
	struct mrmgr_stats s = cstats(f.cache);
	cr_assert_eq(s.registrations, 1, "only the implicit MR, ever");
	cr_assert_eq(sreg0, 1 + s.rereg_probes, "the implicit MR is made at creation");
	cr_assert_eq(sstats(f.ctx).registrations, sreg0, "no registration per get");
	cr_assert_gt(s.implicit_views, 0);
	cr_assert_gt(s.hits, 0);
	cr_assert_eq(s.pinned_bytes, 0);
	cr_assert_eq(s.odp_bytes, 0);
	cr_assert_eq(s.deregistrations, 0, "views are never deregistered");
	fx_close(&f);
	for (int b = 0; b < 3; b++)
		munmap(bufs[b], lens[b]);
}

Test(odp, implicit_access_beyond_the_implicit_mr_gets_an_explicit_region)
{
	struct fixture f;
	struct mrmgr_cache_attr a = odp_attr(MRMGR_ODP_IMPLICIT, 0);
	mrmgr_region_t *v, *e;
	char *buf = map_rw(64 * KiB, 0);

	fx_open(&f, NULL, &a);
	struct mrmgr_odp_info i = odp_info(f.cache);
	cr_assert_eq(mrmgr_get(f.cache, buf, 16 * KiB, RW, &v), 0);
	cr_assert_eq(mrmgr_region_lkey(v), i.implicit_lkey);
	/* Atomics were not asked for: the implicit MR lacks them. */
	cr_assert_eq(mrmgr_get(f.cache, buf + 32 * KiB, 16 * KiB,
			       RW | IBV_ACCESS_REMOTE_ATOMIC, &e), 0);
	cr_assert_neq(mrmgr_region_lkey(e), i.implicit_lkey);
	cr_assert_eq(cstats(f.cache).registrations, 2);
	cr_assert_eq(cstats(f.cache).odp_bytes, mrmgr_region_length(e));
	cr_assert_eq(sstats(f.ctx).pinned_bytes, 0, "still ODP");
	mrmgr_put(v);
	mrmgr_put(e);
	fx_close(&f);

	/* Asking for atomic ODP support puts atomics on the implicit MR. */
	a.odp_ops = IBV_ODP_SUPPORT_WRITE | IBV_ODP_SUPPORT_READ |
		    IBV_ODP_SUPPORT_ATOMIC;
	fx_open(&f, NULL, &a);
	i = odp_info(f.cache);
	cr_assert(i.implicit_access & IBV_ACCESS_REMOTE_ATOMIC);
	cr_assert_eq(mrmgr_get(f.cache, buf, 16 * KiB,
			       RW | IBV_ACCESS_REMOTE_ATOMIC, &e), 0);
	cr_assert_eq(mrmgr_region_lkey(e), i.implicit_lkey);
	mrmgr_put(e);
	cr_assert_eq(cstats(f.cache).registrations, 1);
	fx_close(&f);
	munmap(buf, 64 * KiB);
}

Test(odp, implicit_views_are_evicted_and_uncached_without_verbs_calls)
{
	struct fixture f;
	struct mrmgr_cache_attr a = odp_attr(MRMGR_ODP_IMPLICIT, 0);
	mrmgr_region_t *r;
	char *buf = map_rw(40 * PG, 0);

	a.comp_mask |= MRMGR_CACHE_ATTR_MAX_REGIONS | MRMGR_CACHE_ATTR_FLAGS;
	a.max_regions = 4;
	a.flags = MRMGR_CACHE_NO_MERGE;
	fx_open(&f, NULL, &a);
	uint64_t sdereg0 = sstats(f.ctx).deregistrations;
	for (int k = 0; k < 10; k++) {
		cr_assert_eq(mrmgr_get(f.cache, buf + 4 * k * PG, PG, RW, &r), 0);
		mrmgr_put(r);
	}
	struct mrmgr_stats s = cstats(f.cache);
	cr_assert_eq(s.evictions, 6);
	cr_assert_eq(s.regions, 4);
	cr_assert_eq(s.deregistrations, 0);
	cr_assert_eq(sstats(f.ctx).deregistrations, sdereg0);
	fx_close(&f);

	/* Caching off: each get makes a view, each put drops it. */
	a.flags = MRMGR_CACHE_DISABLE;
	fx_open(&f, NULL, &a);
	for (int k = 0; k < 5; k++) {
		cr_assert_eq(mrmgr_get(f.cache, buf, PG, RW, &r), 0);
		mrmgr_put(r);
	}
	s = cstats(f.cache);
	cr_assert_eq(s.uncached, 5);
	cr_assert_eq(s.regions, 0);
	cr_assert_eq(s.registrations, 1);
	fx_close(&f);
	munmap(buf, 40 * PG);
}

Test(odp, destroy_with_a_held_view_is_ebusy)
{
	struct fixture f;
	struct mrmgr_cache_attr a = odp_attr(MRMGR_ODP_IMPLICIT, 0);
	mrmgr_region_t *r;
	char *buf = map_rw(PG, 0);

	fx_open(&f, NULL, &a);
	cr_assert_eq(mrmgr_get(f.cache, buf, PG, RW, &r), 0);
	cr_assert_eq(mrmgr_cache_destroy(f.cache), EBUSY);
	cr_assert_eq(sstats(f.ctx).live_mrs, 1, "the implicit MR stays");
	mrmgr_put(r);
	fx_close(&f);
	munmap(buf, PG);
}

/* ------------------------------------------------------------ fallbacks */

static int implicit_reg(void *arg, void *addr, size_t length,
			unsigned int access)
{
	(void)arg;
	(void)access;
	return !addr && length == SIZE_MAX;
}

Test(odp, auto_falls_back_implicit_explicit_off)
{
	struct fixture f;
	struct mrmgr_cache_attr a = odp_attr(MRMGR_ODP_AUTO, 0);
	struct mrmgr_sim_attr no_impl = sim_attr(MRMGR_SIM_MLX5,
						 MRMGR_SIM_FLAG_NO_IMPLICIT_ODP);
	struct mrmgr_sim_attr rxe = sim_attr(MRMGR_SIM_RXE, 0);
	struct mrmgr_odp_info i;

	/* No implicit support: explicit. */
	fx_open(&f, &no_impl, &a);
	i = odp_info(f.cache);
	cr_assert_eq(i.mode, MRMGR_ODP_EXPLICIT);
	cr_assert_eq(i.reason, MRMGR_ODP_REASON_NO_IMPLICIT);
	cr_assert_eq(i.implicit_lkey, 0);
	cr_assert(strstr(i.reason_text, "IMPLICIT"), "%s", i.reason_text);
	fx_close(&f);

	/* rxe-like: no ODP at all, pinned. */
	fx_open(&f, &rxe, &a);
	i = odp_info(f.cache);
	cr_assert_eq(i.mode, MRMGR_ODP_OFF);
	cr_assert_eq(i.reason, MRMGR_ODP_REASON_NO_ODP);
	cr_assert_eq(i.general_caps, 0);
	cr_assert_eq(logged.warns, 0, "auto falls back quietly (info)");
	fx_close(&f);

	/* A transport without the ops asked for: UC has none on mlx5. */
	a.odp_transports = MRMGR_ODP_TRANSPORT_RC | MRMGR_ODP_TRANSPORT_UC;
	fx_open(&f, NULL, &a);
	i = odp_info(f.cache);
	cr_assert_eq(i.mode, MRMGR_ODP_OFF);
	cr_assert_eq(i.reason, MRMGR_ODP_REASON_TRANSPORT_CAPS);
	cr_assert(strstr(i.reason_text, "UC"), "%s", i.reason_text);
	fx_close(&f);

	/* UD supports sends only: fine for SEND, not for WRITE. */
	a.odp_transports = MRMGR_ODP_TRANSPORT_UD;
	a.odp_ops = IBV_ODP_SUPPORT_SEND;
	fx_open(&f, NULL, &a);
	cr_assert_eq(odp_info(f.cache).mode, MRMGR_ODP_IMPLICIT);
	fx_close(&f);

	/* The device refuses the implicit registration: explicit. */
	a = odp_attr(MRMGR_ODP_AUTO, 0);
	dev_open(&f, NULL);
	struct mrmgr_sim_fault flt = { .op = MRMGR_SIM_OP_REG, .err = EINVAL,
				       .nth = 1, .pred = implicit_reg };
	cr_assert_eq(mrmgr_sim_inject_fault(f.ctx, &flt), 0);
	cr_assert_eq(mrmgr_cache_create(f.pd, &a, &f.cache), 0);
	i = odp_info(f.cache);
	cr_assert_eq(i.mode, MRMGR_ODP_EXPLICIT);
	cr_assert_eq(i.reason, MRMGR_ODP_REASON_IMPLICIT_REG_FAILED);
	fx_close(&f);
}

Test(odp, a_requested_mode_falls_back_with_a_warning_or_fails_when_strict)
{
	struct fixture f;
	struct mrmgr_sim_attr rxe = sim_attr(MRMGR_SIM_RXE, 0);
	struct mrmgr_sim_attr no_impl = sim_attr(MRMGR_SIM_MLX5,
						 MRMGR_SIM_FLAG_NO_IMPLICIT_ODP);
	struct mrmgr_cache_attr a = odp_attr(MRMGR_ODP_IMPLICIT, 0);
	mrmgr_cache_t *c;

	fx_open(&f, &no_impl, &a);
	cr_assert_eq(odp_info(f.cache).mode, MRMGR_ODP_EXPLICIT);
	cr_assert_eq(logged.warns, 1, "an explicit request not met is a warning");
	cr_assert(strstr(logged.last_warn, "ODP explicit (asked implicit)"), "%s",
		  logged.last_warn);
	fx_close(&f);

	a = odp_attr(MRMGR_ODP_EXPLICIT, 0);
	fx_open(&f, &rxe, &a);
	cr_assert_eq(odp_info(f.cache).mode, MRMGR_ODP_OFF);
	fx_close(&f);

	/* Strict: no fallback. */
	a = odp_attr(MRMGR_ODP_EXPLICIT, MRMGR_ODP_STRICT);
	dev_open(&f, &rxe);
	logged.errors = 0;
	cr_assert_eq(mrmgr_cache_create(f.pd, &a, &c), EOPNOTSUPP);
	cr_assert_eq(logged.errors, 1);
	fx_close(&f);

	a = odp_attr(MRMGR_ODP_IMPLICIT, MRMGR_ODP_STRICT);
	dev_open(&f, &no_impl);
	cr_assert_eq(mrmgr_cache_create(f.pd, &a, &c), EOPNOTSUPP);
	fx_close(&f);

	/* A refused implicit registration: EOPNOTSUPP; another error as is. */
	dev_open(&f, NULL);
	struct mrmgr_sim_fault flt = { .op = MRMGR_SIM_OP_REG, .err = EINVAL,
				       .nth = 1, .count = 1, .pred = implicit_reg };
	cr_assert_eq(mrmgr_sim_inject_fault(f.ctx, &flt), 0);
	cr_assert_eq(mrmgr_cache_create(f.pd, &a, &c), EOPNOTSUPP);
	flt.err = ENOMEM;
	cr_assert_eq(mrmgr_sim_inject_fault(f.ctx, &flt), 0);
	cr_assert_eq(mrmgr_cache_create(f.pd, &a, &c), ENOMEM);
	cr_assert_eq(sstats(f.ctx).live_mrs, 0);
	fx_close(&f);

	/* Strict does not apply to auto, which never fails. */
	a = odp_attr(MRMGR_ODP_AUTO, MRMGR_ODP_STRICT);
	fx_open(&f, &rxe, &a);
	cr_assert_eq(odp_info(f.cache).mode, MRMGR_ODP_OFF);
	fx_close(&f);
}

Test(odp, environment_overrides_the_attributes)
{
	struct fixture f;
	struct mrmgr_sim_attr rxe = sim_attr(MRMGR_SIM_RXE, 0);
	mrmgr_cache_t *c;

	setenv("MRMGR_ODP", "implicit", 1);
	fx_open(&f, NULL, NULL);
	cr_assert_eq(odp_info(f.cache).requested_mode, MRMGR_ODP_IMPLICIT);
	cr_assert_eq(odp_info(f.cache).mode, MRMGR_ODP_IMPLICIT);
	fx_close(&f);

	setenv("MRMGR_ODP", "EXPLICIT", 1);
	setenv("MRMGR_ODP_PREFETCH", "1", 1);
	fx_open(&f, NULL, NULL);
	cr_assert_eq(odp_info(f.cache).mode, MRMGR_ODP_EXPLICIT);
	cr_assert(odp_info(f.cache).flags & MRMGR_ODP_AUTO_PREFETCH);
	fx_close(&f);

	logged.warns = 0;
	setenv("MRMGR_ODP", "sometimes", 1);
	fx_open(&f, NULL, NULL);
	cr_assert_eq(odp_info(f.cache).mode, MRMGR_ODP_OFF);
	cr_assert_eq(logged.warns, 1, "a bad value is ignored with a warning");
	fx_close(&f);

	setenv("MRMGR_ODP", "explicit", 1);
	setenv("MRMGR_ODP_STRICT", "yes", 1);
	dev_open(&f, &rxe);
	cr_assert_eq(mrmgr_cache_create(f.pd, NULL, &c), EOPNOTSUPP);
	fx_close(&f);
}

/* ------------------------------------------------------------ mappings */

static void check_read_only_refusal(uint32_t mode)
{
	struct fixture f;
	struct mrmgr_cache_attr a = odp_attr(mode, 0);
	mrmgr_region_t *r;
	char *ro = map_ro(16 * PG);
	uint64_t regs;

	fx_open(&f, NULL, &a);
	regs = sstats(f.ctx).registrations;
	logged.errors = 0;
	cr_assert_eq(mrmgr_get(f.cache, ro, 16 * PG, RW, &r), EFAULT);
	cr_assert_eq(logged.errors, 1);
	cr_assert(strstr(logged.last, "read-only"), "%s", logged.last);
	cr_assert_eq(mrmgr_get(f.cache, ro + PG, 10, IBV_ACCESS_LOCAL_WRITE, &r),
		     EFAULT, "LOCAL_WRITE is write access too");
	cr_assert_eq(sstats(f.ctx).registrations, regs, "nothing registered");
	cr_assert_eq(cstats(f.cache).reg_failures, 2);

	/* Reading is fine... */
	cr_assert_eq(mrmgr_get(f.cache, ro, 16 * PG, IBV_ACCESS_REMOTE_READ, &r), 0);
	mrmgr_put(r);
	/* ...and the read-only region does not serve a later write get. */
	cr_assert_eq(mrmgr_get(f.cache, ro, PG, RW, &r), EFAULT);

	/* Made writable (and said so), it works. */
	cr_assert_eq(mprotect(ro, 16 * PG, PROT_READ | PROT_WRITE), 0);
	cr_assert_eq(mrmgr_invalidate(f.cache, ro, 16 * PG), 0);
	cr_assert_eq(mrmgr_get(f.cache, ro, 16 * PG, RW, &r), 0);
	mrmgr_put(r);
	fx_close(&f);
	munmap(ro, 16 * PG);
}

Test(odp, explicit_refuses_write_access_to_read_only_memory)
{
	check_read_only_refusal(MRMGR_ODP_EXPLICIT);
}

Test(odp, implicit_refuses_write_access_to_read_only_memory)
{
	check_read_only_refusal(MRMGR_ODP_IMPLICIT);
}

Test(odp, the_sim_shows_why_read_only_odp_is_refused)
{
	struct fixture f;
	struct ibv_mr *mr;
	char *ro = map_ro(4 * PG), w[8] = "written";

	dev_open(&f, NULL);
	/* Like mlx5, the device accepts it... */
	cr_assert_eq(mrmgr_sim_reg_mr(f.pd, ro, 4 * PG, RW | IBV_ACCESS_ON_DEMAND,
				      &mr), 0);
	/* ...and the first write faults and fails: the QP would go down. */
	cr_assert_eq(mrmgr_sim_write(f.pd, mr->rkey, (uintptr_t)ro, w, sizeof(w)),
		     EFAULT);
	cr_assert_eq(mrmgr_sim_dereg_mr(mr), 0);
	fx_close(&f);
	munmap(ro, 4 * PG);
}

Test(odp, a_read_only_neighbour_is_not_merged_into_a_write_region)
{
	struct fixture f;
	struct mrmgr_cache_attr a = odp_attr(MRMGR_ODP_EXPLICIT, 0);
	mrmgr_region_t *r1, *r2;
	char *buf = map_rw(8 * PG, 0);

	cr_assert_eq(mprotect(buf, 4 * PG, PROT_READ), 0);
	fx_open(&f, NULL, &a);
	cr_assert_eq(mrmgr_get(f.cache, buf, 4 * PG, IBV_ACCESS_REMOTE_READ, &r1), 0);
	cr_assert_eq(mrmgr_get(f.cache, buf + 4 * PG, 4 * PG, RW, &r2), 0);
	cr_assert_eq(mrmgr_region_addr(r2), buf + 4 * PG,
		     "merging would give write access to the read-only half");
	cr_assert_eq(mrmgr_region_length(r2), 4 * PG);
	cr_assert_eq(cstats(f.cache).merges, 0);
	mrmgr_put(r1);
	mrmgr_put(r2);
	fx_close(&f);
	munmap(buf, 8 * PG);
}

Test(odp, unmapped_memory_is_refused)
{
	struct fixture f;
	struct mrmgr_cache_attr a = odp_attr(MRMGR_ODP_IMPLICIT, 0);
	mrmgr_region_t *r;
	char *buf = map_rw(3 * PG, 0);

	cr_assert_eq(munmap(buf + PG, PG), 0);
	fx_open(&f, NULL, &a);
	cr_assert_eq(mrmgr_get(f.cache, buf, 3 * PG, IBV_ACCESS_REMOTE_READ, &r),
		     EFAULT);
	cr_assert(strstr(logged.last, "not mapped"), "%s", logged.last);
	cr_assert_eq(mrmgr_get(f.cache, buf + 2 * PG, PG, RW, &r), 0);
	mrmgr_put(r);
	fx_close(&f);
	munmap(buf, PG);
	munmap(buf + 2 * PG, PG);
}

/* ------------------------------------------------------------ memory events */

/*
 * Shared memory from a memfd, filled. The fd is returned so the pages
 * outlive an munmap: then the next mapping at the address surely gets
 * other physical pages (freed anonymous pages may come back as they were).
 */
static char *map_memfd(char *at, size_t len, int fill, int *fd)
{
	char *p;

	*fd = memfd_create("odp-test", MFD_CLOEXEC);
	cr_assert_geq(*fd, 0);
	cr_assert_eq(ftruncate(*fd, (off_t)len), 0);
	p = mmap(at, len, PROT_READ | PROT_WRITE,
		 MAP_SHARED | (at ? MAP_FIXED_NOREPLACE : 0), *fd, 0);
	cr_assert_neq(p, MAP_FAILED);
	cr_assert(!at || p == at);
	memset(p, fill, len);
	return p;
}

/*
 * munmap + mmap at the same address, then access through a cached ODP
 * region without invalidating: the data reaches the new pages (a pinned
 * registration would write into the old ones), and the device re-faults.
 */
static void check_survives_remap(uint32_t mode)
{
	struct fixture f;
	struct mrmgr_cache_attr a = odp_attr(mode, 0);
	mrmgr_region_t *r, *r2;
	const size_t len = 16 * PG;

	/* memfd memory, which only the application can vouch for: the cache
	 * is told of changes (external monitoring), here deliberately not,
	 * to show that an ODP registration is never stale anyway. */
	a.comp_mask |= MRMGR_CACHE_ATTR_MONITOR;
	a.monitor = MRMGR_MONITOR_EXTERNAL;
	int fd1, fd2;
	char *buf = map_memfd(NULL, len, 'A', &fd1), *w = malloc(len);

	fx_open(&f, NULL, &a);
	cr_assert_eq(mrmgr_get(f.cache, buf, len, RW, &r), 0);
	memset(w, 'W', len);
	cr_assert_eq(mrmgr_sim_write(f.pd, mrmgr_region_rkey(r), (uintptr_t)buf,
				     w, len), 0);
	cr_assert_eq(sstats(f.ctx).odp_faults, 16, "first touch faults each page");
	cr_assert_eq(mrmgr_sim_write(f.pd, mrmgr_region_rkey(r), (uintptr_t)buf,
				     w, len), 0);
	cr_assert_eq(sstats(f.ctx).odp_faults, 16, "present pages do not fault");
	mrmgr_put(r);

	cr_assert_eq(munmap(buf, len), 0);
	map_memfd(buf, len, 'B', &fd2);
	cr_assert_eq(mrmgr_get(f.cache, buf, len, RW, &r2), 0);
	cr_assert_eq(r2, r, "not invalidated: the same region");
	memset(w, 'X', len);
	cr_assert_eq(mrmgr_sim_write(f.pd, mrmgr_region_rkey(r2), (uintptr_t)buf,
				     w, len), 0, "ODP is never stale");
	cr_assert_eq(memcmp(buf, w, len), 0, "the new pages got the data");
	cr_assert_eq(sstats(f.ctx).stale_accesses, 0);
	if (mrmgr_sim_page_identity_available())
		cr_assert_eq(sstats(f.ctx).odp_faults, 32,
			     "new pages: the device faults again");
	mrmgr_put(r2);

	/* Invalidation still drops the region; the next get makes another. */
	uint64_t regs = cstats(f.cache).registrations;
	uint64_t views = cstats(f.cache).implicit_views;
	cr_assert_eq(mrmgr_invalidate(f.cache, buf, len), 0);
	cr_assert_eq(cstats(f.cache).invalidations, 1);
	cr_assert_eq(mrmgr_get(f.cache, buf, len, RW, &r2), 0);
	if (mode == MRMGR_ODP_EXPLICIT)
		cr_assert_eq(cstats(f.cache).registrations, regs + 1);
	else
		cr_assert_eq(cstats(f.cache).implicit_views, views + 1);
	cr_assert_eq(mrmgr_sim_read(f.pd, mrmgr_region_rkey(r2), (uintptr_t)buf,
				    w, len), 0);
	cr_assert_eq(w[0], 'X');
	mrmgr_put(r2);
	fx_close(&f);
	free(w);
	munmap(buf, len);
	close(fd1);
	close(fd2);
}

Test(odp, anonymous_remap_reaches_the_new_pages)
{
	struct fixture f;
	struct mrmgr_cache_attr a = odp_attr(MRMGR_ODP_EXPLICIT, 0);
	mrmgr_region_t *r;
	char *buf = map_rw(8 * PG, 'A'), w[8 * 4096];

	fx_open(&f, NULL, &a);
	cr_assert_eq(mrmgr_get(f.cache, buf, sizeof(w), RW, &r), 0);
	remap_fixed(buf, sizeof(w), 'B');
	memset(w, 'Z', sizeof(w));
	cr_assert_eq(mrmgr_sim_write(f.pd, mrmgr_region_rkey(r), (uintptr_t)buf,
				     w, sizeof(w)), 0);
	cr_assert_eq(memcmp(buf, w, sizeof(w)), 0);
	cr_assert_eq(sstats(f.ctx).stale_accesses, 0);
	mrmgr_put(r);
	fx_close(&f);
	munmap(buf, sizeof(w));
}

Test(odp, explicit_regions_survive_memory_events_without_staleness)
{
	check_survives_remap(MRMGR_ODP_EXPLICIT);
}

Test(odp, implicit_views_survive_memory_events_without_staleness)
{
	check_survives_remap(MRMGR_ODP_IMPLICIT);
}

Test(odp, a_held_odp_region_stays_usable_across_invalidation)
{
	struct fixture f;
	struct mrmgr_cache_attr a = odp_attr(MRMGR_ODP_EXPLICIT, 0);
	mrmgr_region_t *r;
	char *buf = map_rw(4 * PG, 0), w[16] = "still valid";

	fx_open(&f, NULL, &a);
	cr_assert_eq(mrmgr_get(f.cache, buf, 4 * PG, RW, &r), 0);
	cr_assert_eq(mrmgr_invalidate(f.cache, buf, 4 * PG), 0);
	cr_assert_eq(sstats(f.ctx).live_mrs, 1, "held: deregistered at its put");
	cr_assert_eq(mrmgr_sim_write(f.pd, mrmgr_region_rkey(r), (uintptr_t)buf,
				     w, sizeof(w)), 0);
	mrmgr_put(r);
	cr_assert_eq(sstats(f.ctx).live_mrs, 0);
	cr_assert_eq(cstats(f.cache).odp_bytes, 0);
	fx_close(&f);
	munmap(buf, 4 * PG);
}

/* ------------------------------------------------------------ hints */

Test(odp, get_ex_prefetch_flag_hints_the_requested_range)
{
	struct fixture f;
	struct mrmgr_cache_attr a = odp_attr(MRMGR_ODP_EXPLICIT, 0);
	mrmgr_region_t *r;
	char *buf = map_rw(32 * PG, 1), w[4 * 4096];

	fx_open(&f, NULL, &a);
	cr_assert_eq(get_flags(f.cache, buf, PG, RW, 1u << 5, &r), EINVAL);
	struct mrmgr_get_attr bad = { .comp_mask = 1u << 7 };
	cr_assert_eq(mrmgr_get_ex(f.cache, buf, PG, RW, &bad, &r), EINVAL,
		     "unknown comp_mask bits are refused");
	/* Flags without their comp_mask bit are not read. */
	bad = (struct mrmgr_get_attr){ .flags = 1u << 5 };
	cr_assert_eq(mrmgr_get_ex(f.cache, buf, PG, RW, &bad, &r), 0);
	mrmgr_put(r);
	cr_assert_eq(mrmgr_get_ex(f.cache, buf, PG, RW, NULL, &r), 0);
	mrmgr_put(r);
	cr_assert_eq(sstats(f.ctx).advise_calls, 0, "no flag, no hint");
	cr_assert_eq(get_flags(f.cache, buf, PG, RW,
				  MRMGR_GET_PREFETCH | MRMGR_GET_NO_PREFETCH, &r),
		     EINVAL);
	cr_assert_eq(get_flags(f.cache, buf + 8 * PG, 4 * PG, RW,
				  MRMGR_GET_PREFETCH, &r), 0);
	cr_assert_eq(sstats(f.ctx).advise_calls, 1);
	struct mrmgr_stats s = cstats(f.cache);
	cr_assert_eq(s.prefetch_calls, 1);
	cr_assert_eq(s.prefetch_sges, 1);
	cr_assert_eq(sstats(f.ctx).odp_prefetched_pages, 4, "just the request");
	memset(w, 'h', sizeof(w));
	cr_assert_eq(mrmgr_sim_write(f.pd, mrmgr_region_rkey(r),
				     (uintptr_t)(buf + 8 * PG), w, sizeof(w)), 0);
	cr_assert_eq(sstats(f.ctx).odp_faults, 0, "prefetched: no fault");
	mrmgr_put(r);
	/* No flag, no policy: no hint. */
	cr_assert_eq(mrmgr_get(f.cache, buf, PG, RW, &r), 0);
	mrmgr_put(r);
	cr_assert_eq(sstats(f.ctx).advise_calls, 1);
	fx_close(&f);
	munmap(buf, 32 * PG);
}

Test(odp, auto_prefetch_policy_hints_every_get_of_odp_regions)
{
	struct fixture f;
	struct mrmgr_cache_attr a = odp_attr(MRMGR_ODP_IMPLICIT,
					     MRMGR_ODP_AUTO_PREFETCH);
	mrmgr_region_t *r;
	char *buf = map_rw(8 * PG, 1), rd[4096];

	fx_open(&f, NULL, &a);
	cr_assert_eq(mrmgr_get(f.cache, buf, PG, IBV_ACCESS_REMOTE_READ, &r), 0);
	mrmgr_put(r);
	cr_assert_eq(mrmgr_get(f.cache, buf, PG, IBV_ACCESS_REMOTE_READ, &r), 0);
	cr_assert_eq(sstats(f.ctx).advise_calls, 2, "misses and hits alike");
	cr_assert_eq(mrmgr_sim_read(f.pd, mrmgr_region_rkey(r), (uintptr_t)buf,
				    rd, sizeof(rd)), 0);
	cr_assert_eq(sstats(f.ctx).odp_faults, 0);
	mrmgr_put(r);
	cr_assert_eq(get_flags(f.cache, buf, PG, IBV_ACCESS_REMOTE_READ,
				  MRMGR_GET_NO_PREFETCH, &r), 0);
	mrmgr_put(r);
	cr_assert_eq(sstats(f.ctx).advise_calls, 2, "opted out");
	cr_assert_eq(cstats(f.cache).prefetch_calls, 2);
	fx_close(&f);

	/* The policy means nothing for pinned regions. */
	struct mrmgr_sim_attr rxe = sim_attr(MRMGR_SIM_RXE, 0);
	a.odp_mode = MRMGR_ODP_AUTO;
	fx_open(&f, &rxe, &a);
	cr_assert_eq(get_flags(f.cache, buf, PG, RW, MRMGR_GET_PREFETCH, &r), 0);
	mrmgr_put(r);
	cr_assert_eq(sstats(f.ctx).advise_calls, 0);
	cr_assert_eq(cstats(f.cache).prefetch_calls, 0);
	fx_close(&f);
	munmap(buf, 8 * PG);
}

/* ------------------------------------------------------------ threads */

struct stress {
	mrmgr_cache_t *cache;
	struct ibv_pd *pd;
	char *buf;
	size_t len;
	uint32_t lkey;
	int errors;
	int stop;
	unsigned int seed;
};

static void *getter(void *arg)
{
	struct stress *s = arg;
	unsigned int seed = __atomic_fetch_add(&s->seed, 1, __ATOMIC_RELAXED);

	for (int k = 0; k < 20000; k++) {
		size_t off = (size_t)rand_r(&seed) % (s->len - PG);
		size_t len = 1 + (size_t)rand_r(&seed) % PG;
		mrmgr_region_t *r;
		char v = (char)k;

		if (mrmgr_get(s->cache, s->buf + off, len, RW, &r)) {
			__atomic_fetch_add(&s->errors, 1, __ATOMIC_RELAXED);
			continue;
		}
		if (mrmgr_region_lkey(r) != s->lkey ||
		    mrmgr_sim_write(s->pd, mrmgr_region_rkey(r),
				    (uintptr_t)(s->buf + off), &v, 1))
			__atomic_fetch_add(&s->errors, 1, __ATOMIC_RELAXED);
		mrmgr_put(r);
	}
	return NULL;
}

static void *invalidator(void *arg)
{
	struct stress *s = arg;
	unsigned int seed = 99;

	while (!__atomic_load_n(&s->stop, __ATOMIC_RELAXED)) {
		size_t off = (size_t)rand_r(&seed) % (s->len - 16 * PG);

		if (mrmgr_invalidate(s->cache, s->buf + off, 16 * PG))
			__atomic_fetch_add(&s->errors, 1, __ATOMIC_RELAXED);
		usleep(50);
	}
	return NULL;
}

Test(odp, implicit_mode_under_threads_and_invalidation)
{
	struct fixture f;
	struct mrmgr_cache_attr a = odp_attr(MRMGR_ODP_IMPLICIT, 0);
	struct stress s = { .len = 4 * MiB };
	pthread_t g[3], inv;

	s.buf = map_rw(s.len, 0);
	fx_open(&f, NULL, &a);
	s.cache = f.cache;
	s.pd = f.pd;
	s.lkey = odp_info(f.cache).implicit_lkey;
	for (int i = 0; i < 3; i++)
		cr_assert_eq(pthread_create(&g[i], NULL, getter, &s), 0);
	cr_assert_eq(pthread_create(&inv, NULL, invalidator, &s), 0);
	for (int i = 0; i < 3; i++)
		pthread_join(g[i], NULL);
	__atomic_store_n(&s.stop, 1, __ATOMIC_RELAXED);
	pthread_join(inv, NULL);
	cr_assert_eq(s.errors, 0);
	struct mrmgr_stats st = cstats(f.cache);
	cr_assert_eq(st.registrations, 1);
	cr_assert_eq(st.regions_in_use, 0);
	cr_assert_gt(st.hits, 0);
	fx_close(&f);
	munmap(s.buf, s.len);
}

/* ------------------------------------------------------------ maps */

#include "odp.h"
#include "vma.h"

/* Both ways of reading protections agree, on every kind of range. */
Test(odp, the_mapping_check_agrees_with_the_maps_text)
{
	char *p = map_rw(8 * PG, 0);
	uint64_t b1, b2;
	const char *w1, *w2;
	struct {
		size_t off, len;
		int write, want;
		const char *why;
	} cases[] = {
		{ 0, 8 * PG, 1, EFAULT, "read-only" },   /* page 2 is read-only */
		{ 0, 2 * PG, 1, 0, NULL },
		{ 0, 3 * PG, 0, 0, NULL },               /* reading it is fine */
		{ 0, 5 * PG, 0, EFAULT, "not readable" }, /* page 4 PROT_NONE */
		{ 5 * PG, 3 * PG, 1, EFAULT, "not mapped" }, /* page 6 unmapped */
		{ 7 * PG, PG, 1, 0, NULL },
		{ 3 * PG, PG, 1, 0, NULL },
	};

	cr_assert_eq(mprotect(p + 2 * PG, PG, PROT_READ), 0);
	cr_assert_eq(mprotect(p + 4 * PG, PG, PROT_NONE), 0);
	cr_assert_eq(munmap(p + 6 * PG, PG), 0);
	for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
		uint64_t s = (uintptr_t)p + cases[k].off;
		uint64_t l = s + cases[k].len - 1;
		int r1 = mrmgr__vma_check_prot(s, l, cases[k].write, 0, &b1, &w1);
		int r2 = mrmgr__vma_check_prot(s, l, cases[k].write, MRMGR__VMA_TEXT, &b2, &w2);

		cr_assert_eq(r1, cases[k].want, "case %zu", k);
		cr_assert_eq(r2, cases[k].want, "case %zu (text)", k);
		if (cases[k].want) {
			cr_assert_str_eq(w1, cases[k].why, "case %zu", k);
			cr_assert_str_eq(w2, cases[k].why, "case %zu", k);
			cr_assert_eq(b1, b2, "case %zu", k);
		}
	}
	munmap(p, 6 * PG);
	munmap(p + 7 * PG, PG);
}

/* A fork child must ask about its own mappings, not its parent's. */
Test(odp, the_mapping_check_follows_fork)
{
	uint64_t bad;
	const char *why;
	char *p = map_rw(PG, 0);
	int status;
	pid_t pid;

	/* Open the parent's descriptor first. */
	cr_assert_eq(mrmgr__vma_check_prot((uintptr_t)p, (uintptr_t)p + PG - 1,
					      1, 0, &bad, &why), 0);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		char *q = mmap(NULL, PG, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		int ok = q != MAP_FAILED &&
			 mrmgr__vma_check_prot((uintptr_t)q, (uintptr_t)q + PG - 1,
						  1, 0, &bad, &why) == 0 &&
			 munmap(p, PG) == 0 &&
			 mrmgr__vma_check_prot((uintptr_t)p, (uintptr_t)p + PG - 1,
						  0, 0, &bad, &why) == EFAULT;
		_exit(ok ? 0 : 1);
	}
	cr_assert_eq(waitpid(pid, &status, 0), pid);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
		  "the child saw its parent's mappings");
	munmap(p, PG);
}
