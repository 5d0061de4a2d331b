/*
 * On-demand paging on a device without it: what the cache does with
 * MRMGR_ODP and the prefetch API on Soft-RoCE (rdma_rxe, kernel 6.1), which
 * reports no ODP caps, refuses ODP registrations (EINVAL) and has no
 * ibv_advise_mr (EOPNOTSUPP) -- see test_unsupported.c for those raw facts.
 *
 * The promise being checked (doc/odp.md): a program written for ODP runs
 * unchanged there. `auto` (and a requested mode, unless strict) falls back
 * to pinned registrations with the reason logged and queryable; strict
 * refuses the cache with EOPNOTSUPP; every prefetch call succeeds as a
 * counted no-op and never reaches the device; and RDMA WRITE and READ
 * through the regions move the right bytes.
 *
 * Two independent witnesses besides the library's own statistics:
 *  - VmPin in /proc/self/status (the kernel's mm->pinned_vm, which
 *    ib_umem_get charges for every pinned MR, CAP_IPC_LOCK or not, and
 *    never for an ODP MR): a pinned region makes it grow by its length;
 *  - the context's advise_mr op, wrapped with a counter: the library's
 *    prefetch_batches says how often it called ibv_advise_mr(); the
 *    wrapper sees what the device was really asked.
 *
 * They run on any device that reports no ODP (siw too); on rxe that must
 * be the case (a kernel whose rxe reports ODP fails here, on purpose: the
 * facts changed). A device with ODP skips them.
 *
 * SPDX-License-Identifier: MIT
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "cache_helpers.h"

#define LEN (64 * RDMA_KiB)

/* ------------------------------------------------------------ log lines */

#define MAX_LINES 32

static struct {
	unsigned int n;
	struct {
		enum mrmgr_log_level level;
		char msg[256];
	} line[MAX_LINES];
} logged;

static void log_handler(enum mrmgr_log_level level, const char *msg, void *arg)
{
	static const char *const names[] = { "error", "warn", "info", "debug" };

	(void)arg;
	cr_log_info("libmrmgr %s: %s", names[level & 3], msg);
	if (logged.n < MAX_LINES) {
		logged.line[logged.n].level = level;
		snprintf(logged.line[logged.n].msg, sizeof(logged.line[0].msg),
			 "%s", msg);
	}
	logged.n++;
}

/* Lines logged at @p level since the last reset that contain @p text. */
static unsigned int log_count(enum mrmgr_log_level level, const char *text)
{
	unsigned int k = 0;

	for (unsigned int i = 0; i < logged.n && i < MAX_LINES; i++)
		if (logged.line[i].level == level &&
		    strstr(logged.line[i].msg, text))
			k++;
	return k;
}

static void log_reset(void)
{
	memset(&logged, 0, sizeof(logged));
}

/* ------------------------------------------------------------ device */

/* What the tests set must not be overridden by the caller's environment. */
static void clean_env(void)
{
	static const char *const vars[] = {
		"MRMGR_ODP", "MRMGR_ODP_STRICT", "MRMGR_ODP_PREFETCH",
		"MRMGR_MERGE", "MRMGR_CACHE",
	};

	for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++)
		unsetenv(vars[i]);
}

/*
 * Open the device, check it reports no ODP (on rxe: must not), route the
 * library's log to us. Returns the device's own ODP caps for comparison.
 */
static struct ibv_odp_caps open_no_odp(struct rdma_fixture *f, unsigned int flags)
{
	struct ibv_device_attr_ex ax;

	clean_env();
	rdma_fixture_open(f, flags);
	memset(&ax, 0, sizeof(ax));
	if (ibv_query_device_ex(f->ctx, NULL, &ax))
		memset(&ax, 0, sizeof(ax)); /* no extended query: no ODP */
	if (ax.odp_caps.general_caps & IBV_ODP_SUPPORT) {
		char name[IBV_SYSFS_NAME_MAX];

		cr_assert(!rdma_fixture_is_rxe(f),
			  "%s (rxe) now reports ODP caps %#llx: this kernel's "
			  "rxe has ODP; update these tests and doc/odp.md",
			  f->name, (unsigned long long)ax.odp_caps.general_caps);
		snprintf(name, sizeof(name), "%s", f->name);
		rdma_fixture_close(f);
		cr_skip_test("%s supports ODP: these tests are for devices without it",
			     name);
	}
	log_reset();
	mrmgr_set_log_handler(log_handler, NULL, MRMGR_LOG_INFO);
	return ax.odp_caps;
}

static mrmgr_cache_t *odp_cache(struct rdma_fixture *f, uint32_t mode,
				uint32_t odp_flags)
{
	struct mrmgr_cache_attr a = rxe_cache_attr(0, 0, MRMGR_CACHE_NO_MERGE);
	mrmgr_cache_t *c = NULL;

	a.comp_mask |= MRMGR_CACHE_ATTR_ODP;
	a.odp_mode = mode;
	a.odp_flags = odp_flags;
	cr_assert_eq(mrmgr_cache_create(f->pd, &a, &c), 0,
		     "mrmgr_cache_create(odp_mode %u) on %s", mode, f->name);
	return c;
}

static struct mrmgr_odp_info odp_info(mrmgr_cache_t *c)
{
	struct mrmgr_odp_info i;

	cr_assert_eq(mrmgr_cache_query_odp(c, &i, sizeof(i)), 0);
	return i;
}

/* The kernel's count of pages pinned by this process (VmPin), in KiB. */
static long vmpin_kib(void)
{
	FILE *fp = fopen("/proc/self/status", "r");
	char line[256];
	long kib = -1;

	cr_assert_not_null(fp, "/proc/self/status: %s", strerror(errno));
	while (fgets(line, sizeof(line), fp))
		if (sscanf(line, "VmPin: %ld kB", &kib) == 1)
			break;
	fclose(fp);
	cr_assert_geq(kib, 0, "no VmPin line in /proc/self/status");
	return kib;
}

/*
 * A region that is an ordinary pinned MR of exactly the requested buffer
 * (not the implicit MR: that one has addr NULL and length SIZE_MAX), and
 * the kernel's pinned-page count grew by its length: no ODP MR is pinned.
 */
static mrmgr_region_t *get_pinned(struct rdma_fixture *f, mrmgr_cache_t *c,
				  void *buf, size_t len, unsigned int access,
				  uint64_t get_flags)
{
	long before = vmpin_kib();
	mrmgr_region_t *r = NULL;
	struct mrmgr_get_attr ga = { .comp_mask = MRMGR_GET_ATTR_FLAGS,
				     .flags = get_flags };
	int ret = mrmgr_get_ex(c, buf, len, access, &ga, &r);

	cr_assert_eq(ret, 0, "mrmgr_get_ex(%p, %zu): %s", buf, len, strerror(ret));
	struct ibv_mr *mr = mrmgr_region_mr(r);
	cr_assert_not_null(mr);
	cr_assert_eq(mr->addr, buf, "an MR of the buffer, not an implicit one");
	cr_assert_eq(mr->length, len);
	cr_assert_eq(mr->pd, f->pd);
	cr_assert_eq(mrmgr_region_lkey(r), mr->lkey);
	cr_assert_eq(mrmgr_region_rkey(r), mr->rkey);
	cr_assert_eq(vmpin_kib() - before, (long)(len / 1024),
		     "VmPin grew by %ld KiB for a %zu-byte region: not pinned?",
		     vmpin_kib() - before, len);
	return r;
}

/* WRITE src -> dst, READ dst -> back, each byte checked. */
static void write_and_read(struct rdma_fixture *f, mrmgr_region_t *rs,
			   mrmgr_region_t *rd, mrmgr_region_t *rb,
			   unsigned int seed, const char *what)
{
	char *src = mrmgr_region_addr(rs), *dst = mrmgr_region_addr(rd);
	char *back = mrmgr_region_addr(rb);
	size_t len = mrmgr_region_length(rd);
	char msg[128];

	rdma_fill_pattern(src, len, seed);
	memset(back, 0, len);
	cr_assert_eq(rdma_write(f, src, mrmgr_region_lkey(rs), (uintptr_t)dst,
				mrmgr_region_rkey(rd), len),
		     IBV_WC_SUCCESS, "%s: WRITE", what);
	snprintf(msg, sizeof(msg), "WRITE through %s", what);
	rdma_expect_same(dst, src, len, msg);
	cr_assert_eq(rdma_read(f, back, mrmgr_region_lkey(rb), (uintptr_t)dst,
			       mrmgr_region_rkey(rd), len),
		     IBV_WC_SUCCESS, "%s: READ", what);
	snprintf(msg, sizeof(msg), "READ through %s", what);
	rdma_expect_same(back, src, len, msg);
}

/* ------------------------------------------------------------ advise */

typedef int (*advise_fn)(struct ibv_pd *, enum ibv_advise_mr_advice, uint32_t,
			 struct ibv_sge *, uint32_t);

static advise_fn real_advise;
static unsigned int advise_seen;

static int counting_advise(struct ibv_pd *pd, enum ibv_advise_mr_advice advice,
			   uint32_t flags, struct ibv_sge *sge, uint32_t n)
{
	advise_seen++;
	return real_advise ? real_advise(pd, advice, flags, sge, n) : EOPNOTSUPP;
}

/*
 * Count every ibv_advise_mr() on this context: it is an inline that calls
 * the context's advise_mr op, so the library's calls go through here.
 */
static void watch_advise(struct rdma_fixture *f)
{
	struct verbs_context *v = verbs_get_ctx(f->ctx);

	cr_assert_not_null(v, "%s has no extended verbs context", f->name);
	real_advise = v->advise_mr;
	v->advise_mr = counting_advise;
	advise_seen = 0;
}

static void unwatch_advise(struct rdma_fixture *f)
{
	verbs_get_ctx(f->ctx)->advise_mr = real_advise;
}

/* ------------------------------------------------------------ tests */

Test(rxe_odp, probe_reports_no_odp_and_auto_falls_back_to_pinned)
{
	struct rdma_fixture f;
	struct ibv_odp_caps dev = open_no_odp(&f, 0);
	mrmgr_cache_t *c = odp_cache(&f, MRMGR_ODP_AUTO, 0);
	struct mrmgr_odp_info i = odp_info(c);
	char want[96];

	cr_assert_eq(i.requested_mode, MRMGR_ODP_AUTO);
	cr_assert_eq(i.mode, MRMGR_ODP_OFF);
	cr_assert_eq(i.reason, MRMGR_ODP_REASON_NO_ODP);
	/* The probe reports what the device said. */
	cr_assert_eq(i.general_caps, dev.general_caps);
	cr_assert_eq(i.general_caps & (IBV_ODP_SUPPORT | IBV_ODP_SUPPORT_IMPLICIT), 0);
	cr_assert_eq(i.rc_caps, dev.per_transport_caps.rc_odp_caps);
	cr_assert_eq(i.uc_caps, dev.per_transport_caps.uc_odp_caps);
	cr_assert_eq(i.ud_caps, dev.per_transport_caps.ud_odp_caps);
	cr_assert_eq(i.max_sge, (uint32_t)f.dev_attr.max_sge);
	cr_assert_eq(i.transports, MRMGR_ODP_TRANSPORT_RC, "the default transport");
	cr_assert_eq(i.implicit_lkey, 0);
	cr_assert_eq(i.implicit_access, 0);
	snprintf(want, sizeof(want), "ODP off (asked auto): %s does not report "
		 "IBV_ODP_SUPPORT; pinned registrations", f.name);
	cr_assert_str_eq(i.reason_text, want);
	/* auto is content with what it gets: an info line, no warning. */
	cr_assert_eq(log_count(MRMGR_LOG_INFO, want), 1, "the decision is logged once");
	cr_assert_eq(log_count(MRMGR_LOG_WARN, ""), 0);
	cr_assert_eq(log_count(MRMGR_LOG_ERROR, ""), 0);
	/* Decided from the caps: the device was not asked to register ODP. */
	struct mrmgr_stats s = rxe_stats(c);
	cr_assert_eq(s.registrations, 0);
	cr_assert_eq(s.reg_failures, 0);
	cr_log_info("%s: general caps %#llx, RC caps %#x, max_sge %u; \"%s\"",
		    f.name, (unsigned long long)i.general_caps, i.rc_caps,
		    i.max_sge, i.reason_text);

	/* Strict changes nothing for auto, which never fails. */
	mrmgr_cache_t *c2 = odp_cache(&f, MRMGR_ODP_AUTO, MRMGR_ODP_STRICT);
	cr_assert_eq(odp_info(c2).mode, MRMGR_ODP_OFF);
	cr_assert_eq(mrmgr_cache_destroy(c2), 0);
	cr_assert_eq(mrmgr_cache_destroy(c), 0);
	rdma_fixture_close(&f);
}

/* MRMGR_ODP=auto with no attributes at all: what an unmodified program gets. */
Test(rxe_odp, env_auto_gives_pinned_regions_and_rdma_works)
{
	struct rdma_fixture f;
	char *src = rdma_map(LEN, 0), *dst = rdma_map(LEN, 0), *back = rdma_map(LEN, 0);
	mrmgr_cache_t *c = NULL;

	open_no_odp(&f, RDMA_FX_QP);
	setenv("MRMGR_ODP", "auto", 1);
	/* The three mappings may be adjacent: one MR each, for the checks. */
	setenv("MRMGR_MERGE", "0", 1);
	cr_assert_eq(mrmgr_cache_create(f.pd, NULL, &c), 0);
	struct mrmgr_odp_info i = odp_info(c);
	cr_assert_eq(i.requested_mode, MRMGR_ODP_AUTO, "MRMGR_ODP=auto was read");
	cr_assert_eq(i.mode, MRMGR_ODP_OFF);
	cr_assert_eq(i.reason, MRMGR_ODP_REASON_NO_ODP);

	for (unsigned int round = 0; round < 2; round++) {
		/* Round 2 hits: the same pinned MRs, no new pins. */
		mrmgr_region_t *rs, *rd, *rb;

		if (round == 0) {
			rs = get_pinned(&f, c, src, LEN, IBV_ACCESS_LOCAL_WRITE, 0);
			rd = get_pinned(&f, c, dst, LEN, RXE_RW, 0);
			rb = get_pinned(&f, c, back, LEN, IBV_ACCESS_LOCAL_WRITE, 0);
		} else {
			long pin = vmpin_kib();

			rs = rxe_get(c, src, LEN, IBV_ACCESS_LOCAL_WRITE);
			rd = rxe_get(c, dst, LEN, RXE_RW);
			rb = rxe_get(c, back, LEN, IBV_ACCESS_LOCAL_WRITE);
			cr_assert_eq(vmpin_kib(), pin);
		}
		write_and_read(&f, rs, rd, rb, round, "regions of an MRMGR_ODP=auto cache");
		mrmgr_put(rs);
		mrmgr_put(rd);
		mrmgr_put(rb);
	}
	struct mrmgr_stats s = rxe_stats(c);
	cr_assert_eq(s.registrations, 3);
	cr_assert_eq(s.hits, 3);
	cr_assert_eq(s.pinned_bytes, 3 * LEN, "pinned, and counted as pinned");
	cr_assert_eq(s.odp_bytes, 0);
	cr_assert_eq(s.implicit_views, 0);
	cr_assert_eq(mrmgr_cache_destroy(c), 0);
	rdma_fixture_close(&f);
	munmap(src, LEN);
	munmap(dst, LEN);
	munmap(back, LEN);
}

/* Asking for a specific mode the device lacks: fall back, and say so louder. */
Test(rxe_odp, explicit_and_implicit_fall_back_to_pinned_with_a_warning)
{
	static const struct {
		uint32_t mode;
		const char *name;
		int env; /* through MRMGR_ODP instead of the attribute */
	} ask[] = {
		{ MRMGR_ODP_EXPLICIT, "explicit", 0 },
		{ MRMGR_ODP_IMPLICIT, "implicit", 0 },
		{ MRMGR_ODP_IMPLICIT, "implicit", 1 },
	};
	struct rdma_fixture f;
	char *src = rdma_map(LEN, 0), *dst = rdma_map(LEN, 0), *back = rdma_map(LEN, 0);

	open_no_odp(&f, RDMA_FX_QP);
	for (size_t k = 0; k < sizeof(ask) / sizeof(ask[0]); k++) {
		mrmgr_cache_t *c = NULL;
		char want[128];

		log_reset();
		if (ask[k].env) {
			setenv("MRMGR_ODP", ask[k].name, 1);
			setenv("MRMGR_MERGE", "0", 1);
			cr_assert_eq(mrmgr_cache_create(f.pd, NULL, &c), 0);
			unsetenv("MRMGR_ODP");
			unsetenv("MRMGR_MERGE");
		} else {
			c = odp_cache(&f, ask[k].mode, 0);
		}
		struct mrmgr_odp_info i = odp_info(c);
		cr_assert_eq(i.requested_mode, ask[k].mode);
		cr_assert_eq(i.mode, MRMGR_ODP_OFF, "asked %s", ask[k].name);
		cr_assert_eq(i.reason, MRMGR_ODP_REASON_NO_ODP);
		snprintf(want, sizeof(want), "ODP off (asked %s): %s does not "
			 "report IBV_ODP_SUPPORT; pinned registrations",
			 ask[k].name, f.name);
		cr_assert_str_eq(i.reason_text, want);
		cr_assert_eq(log_count(MRMGR_LOG_WARN, want), 1,
			     "a request not met is a warning (asked %s)", ask[k].name);
		cr_assert_eq(log_count(MRMGR_LOG_ERROR, ""), 0);
		cr_assert_eq(rxe_stats(c).registrations, 0,
			     "no ODP registration was tried");

		mrmgr_region_t *rs = get_pinned(&f, c, src, LEN, IBV_ACCESS_LOCAL_WRITE, 0);
		mrmgr_region_t *rd = get_pinned(&f, c, dst, LEN, RXE_RW, 0);
		mrmgr_region_t *rb = get_pinned(&f, c, back, LEN, IBV_ACCESS_LOCAL_WRITE, 0);
		write_and_read(&f, rs, rd, rb, 10 + (unsigned int)k,
			       ask[k].env ? "regions of an MRMGR_ODP=implicit cache"
					  : "regions after the fallback");
		mrmgr_put(rs);
		mrmgr_put(rd);
		mrmgr_put(rb);
		cr_assert_eq(rxe_stats(c).odp_bytes, 0);
		cr_assert_eq(mrmgr_cache_destroy(c), 0);
		cr_log_info("%s: asked %s%s: %s", f.name, ask[k].name,
			    ask[k].env ? " (MRMGR_ODP)" : "", i.reason_text);
	}
	rdma_fixture_close(&f);
	munmap(src, LEN);
	munmap(dst, LEN);
	munmap(back, LEN);
}

Test(rxe_odp, strict_fails_cache_creation_with_eopnotsupp)
{
	struct rdma_fixture f;
	struct mrmgr_cache_attr a = rxe_cache_attr(0, 0, 0);
	static const uint32_t modes[] = { MRMGR_ODP_EXPLICIT, MRMGR_ODP_IMPLICIT };

	open_no_odp(&f, 0);
	a.comp_mask |= MRMGR_CACHE_ATTR_ODP;
	a.odp_flags = MRMGR_ODP_STRICT;
	for (size_t k = 0; k < 2; k++) {
		mrmgr_cache_t *c = NULL;

		log_reset();
		a.odp_mode = modes[k];
		cr_assert_eq(mrmgr_cache_create(f.pd, &a, &c), EOPNOTSUPP,
			     "strict odp_mode %u", modes[k]);
		cr_assert_null(c, "no cache handed out");
		cr_assert_eq(log_count(MRMGR_LOG_ERROR, "MRMGR_ODP_STRICT"), 1);
		cr_assert_eq(log_count(MRMGR_LOG_ERROR, "does not report IBV_ODP_SUPPORT"), 1);
	}

	/* The same through the environment. */
	mrmgr_cache_t *c = NULL;
	setenv("MRMGR_ODP", "explicit", 1);
	setenv("MRMGR_ODP_STRICT", "1", 1);
	cr_assert_eq(mrmgr_cache_create(f.pd, NULL, &c), EOPNOTSUPP);
	cr_assert_null(c);
	setenv("MRMGR_ODP", "implicit", 1);
	cr_assert_eq(mrmgr_cache_create(f.pd, NULL, &c), EOPNOTSUPP);
	cr_assert_null(c);
	setenv("MRMGR_ODP_STRICT", "0", 1);
	cr_assert_eq(mrmgr_cache_create(f.pd, NULL, &c), 0, "not strict: falls back");
	cr_assert_eq(odp_info(c).mode, MRMGR_ODP_OFF);
	cr_assert_eq(mrmgr_cache_destroy(c), 0);
	cr_log_info("%s: strict explicit/implicit: EOPNOTSUPP at cache creation", f.name);
	/* The failed creations left nothing registered: the PD deallocates. */
	rdma_fixture_close(&f);
}

/*
 * Every prefetch form succeeds as a counted no-op, and the device is never
 * asked: pinned memory is resident, so in mode off there is nothing to
 * advise and the library does not call ibv_advise_mr() at all (not once
 * per call, not even once to learn EOPNOTSUPP: that learning is for ODP
 * regions on a device without advise, which rxe cannot have; the
 * simulated HCA covers it in tests/unit/test_prefetch.c). Then RDMA
 * through the very regions the hints were given for.
 */
Test(rxe_odp, prefetch_is_a_counted_noop_and_never_calls_advise)
{
	struct rdma_fixture f;
	char *src = rdma_map(LEN, 0), *dst = rdma_map(LEN, 0), *back = rdma_map(LEN, 0);
	char *other = rdma_map(LEN, 0); /* never cached */
	const unsigned int rounds = 3;
	uint64_t calls = 0;

	open_no_odp(&f, RDMA_FX_QP);
	watch_advise(&f);
	mrmgr_cache_t *c = odp_cache(&f, MRMGR_ODP_AUTO, 0);
	cr_assert_eq(odp_info(c).mode, MRMGR_ODP_OFF);
	log_reset();

	/* Gets that ask for a hint: a miss, then hits. The hint is for ODP
	 * regions only (mrmgr.h: "Ignored for pinned regions"): the get
	 * succeeds and no prefetch is counted, so a hinting get costs a
	 * pinned cache's hit path no shared write. */
	mrmgr_region_t *rs = get_pinned(&f, c, src, LEN, IBV_ACCESS_LOCAL_WRITE,
					MRMGR_GET_PREFETCH);
	mrmgr_region_t *rd = get_pinned(&f, c, dst, LEN, RXE_RW, MRMGR_GET_PREFETCH);
	mrmgr_region_t *rb = get_pinned(&f, c, back, LEN, IBV_ACCESS_LOCAL_WRITE,
					MRMGR_GET_PREFETCH);
	for (unsigned int k = 0; k < rounds; k++) {
		mrmgr_region_t *h = NULL;
		struct mrmgr_get_attr ga = { .comp_mask = MRMGR_GET_ATTR_FLAGS,
					     .flags = MRMGR_GET_PREFETCH };

		cr_assert_eq(mrmgr_get_ex(c, dst + 4096, 8192, RXE_RW, &ga, &h),
			     0);
		cr_assert_eq(h, rd, "a hit on the destination region");
		mrmgr_put(h);
	}
	struct mrmgr_stats s = rxe_stats(c);
	cr_assert_eq(s.prefetch_calls, 0, "hints on pinned regions are not requests");
	cr_assert_eq(s.prefetch_noops, 0);

	/* The explicit forms: each call a counted no-op returning 0. */
	for (unsigned int k = 0; k < rounds; k++) {
		struct mrmgr_range r3[3] = {
			{ src, LEN }, { dst + 100, LEN - 200 }, { other, LEN },
		};
		static const unsigned int fl[] = {
			0, MRMGR_PREFETCH_WRITE, MRMGR_PREFETCH_READ,
			MRMGR_PREFETCH_SYNC, MRMGR_PREFETCH_WRITE | MRMGR_PREFETCH_SYNC,
		};

		for (size_t j = 0; j < sizeof(fl) / sizeof(fl[0]); j++) {
			cr_assert_eq(mrmgr_prefetch(c, r3, 3, fl[j]), 0,
				     "mrmgr_prefetch(flags %#x)", fl[j]);
			cr_assert_eq(mrmgr_region_prefetch(rd, NULL, 0, fl[j]), 0,
				     "mrmgr_region_prefetch(whole, flags %#x)", fl[j]);
			cr_assert_eq(mrmgr_region_prefetch(rd, dst + 4096, 4096, fl[j]), 0,
				     "mrmgr_region_prefetch(part, flags %#x)", fl[j]);
			calls += 3;
		}
		/* Uncached memory alone, and nothing at all. */
		cr_assert_eq(mrmgr_prefetch(c, &r3[2], 1, MRMGR_PREFETCH_SYNC), 0);
		cr_assert_eq(mrmgr_prefetch(c, NULL, 0, 0), 0);
		calls += 2;
	}
	s = rxe_stats(c);
	cr_assert_eq(s.prefetch_calls, calls);
	cr_assert_eq(s.prefetch_noops, calls, "every call a counted no-op");
	cr_assert_eq(s.prefetch_batches, 0, "the library never called ibv_advise_mr");
	cr_assert_eq(s.prefetch_sges, 0);
	cr_assert_eq(s.prefetch_failures, 0);
	cr_assert_eq(s.prefetch_retries, 0);
	cr_assert_eq(advise_seen, 0, "the device was asked %u times", advise_seen);
	cr_assert_eq(logged.n, 0, "no-ops are silent: %u log lines", logged.n);
	/* Bad input is still bad input. */
	cr_assert_eq(mrmgr_prefetch(c, NULL, 1, 0), EINVAL);
	cr_assert_eq(mrmgr_region_prefetch(rd, src, LEN, 0), EINVAL, "outside the region");
	cr_assert_eq(rxe_stats(c).prefetch_calls, calls);
	cr_log_info("%s: %llu prefetch calls, %llu no-ops, %llu ibv_advise_mr calls "
		    "(library), %u (device)", f.name,
		    (unsigned long long)s.prefetch_calls,
		    (unsigned long long)s.prefetch_noops,
		    (unsigned long long)s.prefetch_batches, advise_seen);

	/* The watch sees what reaches the device: the verb itself does. */
	struct ibv_sge sge = { .addr = (uintptr_t)dst, .length = LEN,
			       .lkey = mrmgr_region_lkey(rd) };
	int ret = ibv_advise_mr(f.pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &sge, 1);
	cr_assert_eq(advise_seen, 1, "the counting wrapper works");
	if (rdma_fixture_is_rxe(&f))
		cr_assert_eq(ret, EOPNOTSUPP, "ibv_advise_mr on %s: %s", f.name,
			     strerror(ret));
	unwatch_advise(&f);

	/* The regions the hints were given for carry RDMA as ever. */
	write_and_read(&f, rs, rd, rb, 77, "regions after no-op prefetches");
	mrmgr_put(rs);
	mrmgr_put(rd);
	mrmgr_put(rb);
	cr_assert_eq(mrmgr_cache_destroy(c), 0);
	rdma_fixture_close(&f);
	munmap(src, LEN);
	munmap(dst, LEN);
	munmap(back, LEN);
	munmap(other, LEN);
}
