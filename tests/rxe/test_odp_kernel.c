/*
 * On-demand paging on a kernel whose Soft-RoCE has it (Linux 6.15+: explicit
 * ODP; 6.17+: ibv_advise_mr prefetch), through the library, with rdma-core
 * >= 59 (whose rxe provider passes ibv_advise_mr to the kernel). Run by
 * `make check-rxe-odp` (tests/rxe/odp-tier.sh) in a guest of the newest
 * Debian kernel with a sid userspace; on the 6.1 guest of `make check-rxe`
 * rxe has no ODP and these tests fail on purpose (they are not run there).
 *
 *  - the library's default on an affected kernel: ODP refused because of
 *    rxe's page-offset bug (lib/device/quirk.c), pinned registrations, the
 *    quirk in mrmgr_odp_info, bytes right even at a page offset;
 *  - with the quirk overridden (MRMGR_RXE_ODP_QUIRK=off) and transfers
 *    that avoid the bug (page-aligned buffers, active MTU 4096, which the
 *    tier's guest sets up): explicit ODP regions through the cache, with
 *    nothing pinned (VmPin), every byte checked; page faults after
 *    MADV_DONTNEED; prefetch hints synchronous and asynchronous that reach
 *    the device (the context's advise_mr op is watched) and make the pages
 *    present (mincore); the growable buffer over ODP; an ODP key that
 *    follows a remapped address where a pinned one would go stale;
 *  - the kernel bug itself: a known kernel defect, asserted as such, so a
 *    kernel that fixes it (or breaks differently) fails here, loudly, until
 *    the quirk's range (MRMGR_RXE_ODP_FIXED_IN, quirk.c) and doc/odp.md
 *    follow. The standalone reproducer is tests/rxe/odp_offset_repro.c.
 *
 * SPDX-License-Identifier: MIT
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/utsname.h>
#include <unistd.h>

#include "cache_helpers.h"

#define PG ((size_t)4096)
#define LEN (64 * RDMA_KiB)

/* ------------------------------------------------------------ log lines */

static struct {
	unsigned int warns;
	char last_warn[512];
} logged;

static void log_handler(enum mrmgr_log_level level, const char *msg, void *arg)
{
	static const char *const names[] = { "error", "warn", "info", "debug" };

	(void)arg;
	cr_log_info("libmrmgr %s: %s", names[level & 3], msg);
	if (level == MRMGR_LOG_WARN) {
		logged.warns++;
		snprintf(logged.last_warn, sizeof(logged.last_warn), "%s", msg);
	}
}

/* ------------------------------------------------------------ helpers */

static const char *kernel_release(void)
{
	static struct utsname u;

	cr_assert_eq(uname(&u), 0);
	return u.release;
}

/*
 * Open rxe with a QP pair, check it has what this tier is for (ODP on RC
 * for write and read, MTU 4096), route the log here. @p quirk is the
 * value of MRMGR_RXE_ODP_QUIRK for the test (NULL: unset, the default).
 */
static void open_odp(struct rdma_fixture *f, const char *quirk)
{
	static const char *const vars[] = {
		"MRMGR_ODP", "MRMGR_ODP_STRICT", "MRMGR_ODP_PREFETCH",
		"MRMGR_MERGE", "MRMGR_CACHE", "MRMGR_RXE_ODP_QUIRK",
		"MRMGR_RXE_ODP_FIXED_IN",
	};
	struct ibv_device_attr_ex ax;

	for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++)
		unsetenv(vars[i]);
	if (quirk)
		setenv("MRMGR_RXE_ODP_QUIRK", quirk, 1);
	rdma_fixture_open_rxe(f, RDMA_FX_QP, "this tier checks rxe's ODP");
	memset(&ax, 0, sizeof(ax));
	cr_assert_eq(ibv_query_device_ex(f->ctx, NULL, &ax), 0);
	cr_assert(ax.odp_caps.general_caps & IBV_ODP_SUPPORT,
		  "%s on kernel %s reports no ODP: this guest's kernel is too old "
		  "for the ODP tier", f->name, kernel_release());
	cr_assert_eq(ax.odp_caps.per_transport_caps.rc_odp_caps &
			     (IBV_ODP_SUPPORT_WRITE | IBV_ODP_SUPPORT_READ),
		     IBV_ODP_SUPPORT_WRITE | IBV_ODP_SUPPORT_READ);
	cr_assert_eq(f->port_attr.active_mtu, IBV_MTU_4096,
		     "active MTU %d: the tier's guest gives rxe a 9000-byte "
		     "netdev, so multi-packet ODP transfers avoid the kernel bug",
		     128 << f->port_attr.active_mtu);
	memset(&logged, 0, sizeof(logged));
	mrmgr_set_log_handler(log_handler, NULL, MRMGR_LOG_INFO);
}

static mrmgr_cache_t *odp_cache(struct rdma_fixture *f, uint32_t mode)
{
	struct mrmgr_cache_attr a = rxe_cache_attr(0, 0, MRMGR_CACHE_NO_MERGE);
	mrmgr_cache_t *c = NULL;

	a.comp_mask |= MRMGR_CACHE_ATTR_ODP;
	a.odp_mode = mode;
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

	cr_assert_not_null(fp);
	while (fgets(line, sizeof(line), fp))
		if (sscanf(line, "VmPin: %ld kB", &kib) == 1)
			break;
	fclose(fp);
	cr_assert_geq(kib, 0, "no VmPin line in /proc/self/status");
	return kib;
}

/* Pages of [p, p+len) resident in this process (mincore). */
static size_t resident_pages(void *p, size_t len)
{
	unsigned char vec[LEN / PG];
	size_t n = len / PG, k = 0;

	cr_assert_leq(n, sizeof(vec));
	cr_assert_eq(mincore(p, len, vec), 0, "mincore: %s", strerror(errno));
	for (size_t i = 0; i < n; i++)
		k += vec[i] & 1;
	return k;
}

/* A pinned MR outside any cache, for the far side of transfers. */
static struct ibv_mr *plain_mr(struct rdma_fixture *f, void *p, size_t len)
{
	struct ibv_mr *mr = ibv_reg_mr(f->pd, p, len, RXE_RW);

	cr_assert_not_null(mr, "ibv_reg_mr: %s", strerror(errno));
	return mr;
}

/*
 * WRITE a fresh pattern from the pinned @p src into @p dst (rkey), READ it
 * back into the pinned @p back, each byte checked.
 */
static void write_read_check(struct rdma_fixture *f, struct ibv_mr *src,
			     struct ibv_mr *back, void *dst, uint32_t rkey,
			     size_t len, unsigned int seed, const char *what)
{
	char msg[160];

	rdma_fill_pattern(src->addr, len, seed);
	memset(back->addr, 0, len);
	cr_assert_eq(rdma_write(f, src->addr, src->lkey, (uintptr_t)dst, rkey, len),
		     IBV_WC_SUCCESS, "%s: WRITE", what);
	snprintf(msg, sizeof(msg), "WRITE into %s", what);
	rdma_expect_same(dst, src->addr, len, msg);
	cr_assert_eq(rdma_read(f, back->addr, back->lkey, (uintptr_t)dst, rkey, len),
		     IBV_WC_SUCCESS, "%s: READ", what);
	snprintf(msg, sizeof(msg), "READ from %s", what);
	rdma_expect_same(back->addr, src->addr, len, msg);
}

/* ------------------------------------------------------------ advise */

typedef int (*advise_fn)(struct ibv_pd *, enum ibv_advise_mr_advice, uint32_t,
			 struct ibv_sge *, uint32_t);

static advise_fn real_advise;
static unsigned int advise_seen, advise_flush;

static int counting_advise(struct ibv_pd *pd, enum ibv_advise_mr_advice advice,
			   uint32_t flags, struct ibv_sge *sge, uint32_t n)
{
	advise_seen++;
	advise_flush += !!(flags & IBV_ADVISE_MR_FLAG_FLUSH);
	return real_advise(pd, advice, flags, sge, n);
}

/* ibv_advise_mr() is an inline calling the context's op: watch it. */
static void watch_advise(struct rdma_fixture *f)
{
	struct verbs_context *v = verbs_get_ctx(f->ctx);

	cr_assert_not_null(v);
	cr_assert_not_null(v->advise_mr, "rdma-core has no advise_mr for %s", f->name);
	real_advise = v->advise_mr;
	v->advise_mr = counting_advise;
	advise_seen = advise_flush = 0;
}

static void unwatch_advise(struct rdma_fixture *f)
{
	verbs_get_ctx(f->ctx)->advise_mr = real_advise;
}

/* ------------------------------------------------------------ default */

Test(rxe_odp_kernel, default_refuses_odp_for_the_page_offset_bug)
{
	struct rdma_fixture f;
	char *dst = rdma_map(LEN, 0);
	void *s = rdma_map(LEN, 0), *b = rdma_map(LEN, 0);

	open_odp(&f, NULL);
	mrmgr_cache_t *c = odp_cache(&f, MRMGR_ODP_EXPLICIT);
	struct mrmgr_odp_info i = odp_info(c);
	cr_log_info("%s on %s: \"%s\"", f.name, kernel_release(), i.reason_text);
	cr_assert_eq(i.mode, MRMGR_ODP_OFF, "%s", i.reason_text);
	cr_assert_eq(i.reason, MRMGR_ODP_REASON_DEVICE_QUIRK);
	cr_assert_eq(i.device_quirks, MRMGR_ODP_QUIRK_PAGE_OFFSET);
	cr_assert(strstr(i.reason_text, kernel_release()), "%s", i.reason_text);
	cr_assert_eq(logged.warns, 1, "explicit ODP not granted: one warning");

	/* Pinned, and right even at a page offset (where ODP is not). */
	struct ibv_mr *src = plain_mr(&f, s, LEN), *back = plain_mr(&f, b, LEN);
	long pin = vmpin_kib();
	mrmgr_region_t *r = rxe_get(c, dst, LEN, RXE_RW);
	cr_assert_eq(vmpin_kib() - pin, (long)(LEN / 1024), "a pinned region");
	cr_assert_eq(rxe_stats(c).odp_bytes, 0);
	write_read_check(&f, src, back, dst + 100, mrmgr_region_rkey(r), 3000, 1,
			 "a pinned region at page offset 100");
	mrmgr_put(r);
	cr_assert_eq(mrmgr_cache_destroy(c), 0);
	ibv_dereg_mr(src);
	ibv_dereg_mr(back);
	rdma_fixture_close(&f);
}

/* ------------------------------------------------------------ ODP */

Test(rxe_odp_kernel, explicit_odp_regions_through_the_cache)
{
	struct rdma_fixture f;
	char *dst = rdma_map(LEN, 0);
	void *s = rdma_map(LEN, 0), *b = rdma_map(LEN, 0);

	open_odp(&f, "off");
	struct ibv_mr *src = plain_mr(&f, s, LEN), *back = plain_mr(&f, b, LEN);
	mrmgr_cache_t *c = odp_cache(&f, MRMGR_ODP_EXPLICIT);
	struct mrmgr_odp_info i = odp_info(c);
	cr_assert_eq(i.mode, MRMGR_ODP_EXPLICIT, "%s", i.reason_text);
	cr_assert_eq(i.device_quirks,
		     MRMGR_ODP_QUIRK_PAGE_OFFSET | MRMGR_ODP_QUIRK_OVERRIDDEN);
	cr_assert_eq(logged.warns, 1, "the override is said");
	cr_assert(strstr(logged.last_warn, "MRMGR_RXE_ODP_QUIRK=off"), "%s",
		  logged.last_warn);

	long pin = vmpin_kib();
	mrmgr_region_t *r = rxe_get(c, dst, LEN, RXE_RW);
	struct ibv_mr *mr = mrmgr_region_mr(r);
	cr_assert_eq(mr->addr, dst);
	cr_assert_eq(mr->length, LEN);
	cr_assert_eq(vmpin_kib(), pin, "an ODP region pins nothing");
	cr_assert_eq(rxe_stats(c).odp_bytes, LEN);
	cr_assert_eq(resident_pages(dst, LEN), LEN / PG, "rdma_map touched them");
	write_read_check(&f, src, back, dst, mrmgr_region_rkey(r), LEN, 2,
			 "an explicit ODP region");
	/* A second get hits the same ODP MR. */
	mrmgr_region_t *r2 = rxe_get(c, dst + PG, 2 * PG, RXE_RW);
	cr_assert_eq(mrmgr_region_mr(r2), mr, "a hit on the ODP region");
	cr_assert_eq(rxe_stats(c).registrations, 1);
	write_read_check(&f, src, back, dst + PG, mrmgr_region_rkey(r2), 2 * PG, 3,
			 "the ODP region through a hit, at a page boundary");
	mrmgr_put(r2);
	mrmgr_put(r);
	cr_assert_eq(mrmgr_cache_destroy(c), 0);
	ibv_dereg_mr(src);
	ibv_dereg_mr(back);
	rdma_fixture_close(&f);
}

Test(rxe_odp_kernel, page_faults_after_madv_dontneed)
{
	struct rdma_fixture f;
	char *dst = rdma_map(LEN, 'x');
	void *s = rdma_map(LEN, 0), *b = rdma_map(LEN, 0);

	open_odp(&f, "off");
	struct ibv_mr *src = plain_mr(&f, s, LEN), *back = plain_mr(&f, b, LEN);
	mrmgr_cache_t *c = odp_cache(&f, MRMGR_ODP_EXPLICIT);
	mrmgr_region_t *r = rxe_get(c, dst, LEN, RXE_RW);
	uint32_t rkey = mrmgr_region_rkey(r);

	write_read_check(&f, src, back, dst, rkey, LEN, 4, "the ODP region");
	/* The pages go; the device's translations with them (MMU notifier). */
	cr_assert_eq(madvise(dst, LEN, MADV_DONTNEED), 0);
	cr_assert_eq(resident_pages(dst, LEN), 0, "MADV_DONTNEED dropped them");
	/* READ faults in zero pages, as the CPU would see them. */
	memset(back->addr, 0xee, LEN);
	cr_assert_eq(rdma_read(&f, back->addr, back->lkey, (uintptr_t)dst, rkey, LEN),
		     IBV_WC_SUCCESS);
	rdma_expect_bytes(back->addr, LEN, 0, "READ after MADV_DONTNEED: zero pages");
	cr_assert_eq(madvise(dst, LEN, MADV_DONTNEED), 0);
	/* WRITE faults pages in writable: the CPU sees the bytes. */
	write_read_check(&f, src, back, dst, rkey, LEN, 5,
			 "the ODP region after MADV_DONTNEED (device page faults)");
	cr_assert_eq(resident_pages(dst, LEN), LEN / PG);
	mrmgr_put(r);
	cr_assert_eq(mrmgr_cache_destroy(c), 0);
	ibv_dereg_mr(src);
	ibv_dereg_mr(back);
	rdma_fixture_close(&f);
}

/* Wait (no clock: the test's own timeout bounds it) for @p n pages. */
static void wait_resident(void *p, size_t len, size_t n, const char *what)
{
	unsigned long polls = 0;

	while (resident_pages(p, len) < n) {
		polls++;
		usleep(1000);
	}
	cr_log_info("%s: %zu pages present after %lu polls", what, n, polls);
}

Test(rxe_odp_kernel, prefetch_sync_and_async_reach_the_device, .timeout = 120)
{
	struct rdma_fixture f;
	char *dst = rdma_map(LEN, 0);
	void *s = rdma_map(LEN, 0), *b = rdma_map(LEN, 0);

	open_odp(&f, "off");
	struct ibv_mr *src = plain_mr(&f, s, LEN), *back = plain_mr(&f, b, LEN);
	mrmgr_cache_t *c = odp_cache(&f, MRMGR_ODP_EXPLICIT);
	mrmgr_region_t *r = rxe_get(c, dst, LEN, RXE_RW);
	watch_advise(&f);

	/* Synchronous (FLUSH): the pages are present when it returns. */
	cr_assert_eq(madvise(dst, LEN, MADV_DONTNEED), 0);
	cr_assert_eq(resident_pages(dst, LEN), 0);
	cr_assert_eq(mrmgr_region_prefetch(r, NULL, 0,
					   MRMGR_PREFETCH_WRITE | MRMGR_PREFETCH_SYNC), 0);
	cr_assert_eq(advise_seen, 1, "the device was asked");
	cr_assert_eq(advise_flush, 1, "with IBV_ADVISE_MR_FLAG_FLUSH");
	cr_assert_eq(resident_pages(dst, LEN), LEN / PG,
		     "a synchronous PREFETCH_WRITE made every page present");
	write_read_check(&f, src, back, dst, mrmgr_region_rkey(r), LEN, 6,
			 "the ODP region after a synchronous prefetch");

	/* Asynchronous (no FLUSH), through mrmgr_prefetch() on the cache. */
	cr_assert_eq(madvise(dst, LEN, MADV_DONTNEED), 0);
	struct mrmgr_range rg = { dst, LEN };
	cr_assert_eq(mrmgr_prefetch(c, &rg, 1, MRMGR_PREFETCH_WRITE), 0);
	cr_assert_eq(advise_seen, 2);
	cr_assert_eq(advise_flush, 1, "no FLUSH this time");
	wait_resident(dst, LEN, LEN / PG, "asynchronous PREFETCH_WRITE");

	/* A get with the hint flag: one more call, asynchronous. */
	mrmgr_region_t *r2 = NULL;
	struct mrmgr_get_attr ga = { .comp_mask = MRMGR_GET_ATTR_FLAGS,
				     .flags = MRMGR_GET_PREFETCH };
	cr_assert_eq(mrmgr_get_ex(c, dst, LEN, RXE_RW, &ga, &r2), 0);
	cr_assert_eq(advise_seen, 3, "MRMGR_GET_PREFETCH hinted the device");

	/* The raw advices the library does not use, on the same MR. */
	struct ibv_mr *mr = mrmgr_region_mr(r);
	struct ibv_sge sge = { (uintptr_t)dst, (uint32_t)LEN, mr->lkey };
	cr_assert_eq(ibv_advise_mr(f.pd, IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT,
				   IBV_ADVISE_MR_FLAG_FLUSH, &sge, 1), 0,
		     "PREFETCH_NO_FAULT: %s", strerror(errno));
	cr_assert_eq(ibv_advise_mr(f.pd, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &sge, 1), 0);

	struct mrmgr_stats st = rxe_stats(c);
	cr_assert_eq(st.prefetch_batches, 3);
	cr_assert_eq(st.prefetch_noops, 0);
	cr_assert_eq(st.prefetch_failures, 0);
	unwatch_advise(&f);
	write_read_check(&f, src, back, dst, mrmgr_region_rkey(r2), LEN, 7,
			 "the ODP region after asynchronous prefetches");
	mrmgr_put(r2);
	mrmgr_put(r);
	cr_assert_eq(mrmgr_cache_destroy(c), 0);
	ibv_dereg_mr(src);
	ibv_dereg_mr(back);
	rdma_fixture_close(&f);
}

Test(rxe_odp_kernel, growable_buffer_over_odp)
{
	static const size_t sizes[] = { PG, 16 * PG, 256 * PG, 3 * PG };
	const size_t max = 256 * PG;
	struct rdma_fixture f;
	void *s = rdma_map(max, 0), *b = rdma_map(max, 0);
	mrmgr_buf_t *buf = NULL;

	open_odp(&f, "off");
	struct ibv_mr *src = plain_mr(&f, s, max), *back = plain_mr(&f, b, max);
	mrmgr_cache_t *c = odp_cache(&f, MRMGR_ODP_EXPLICIT);
	long pin = vmpin_kib();

	cr_assert_eq(mrmgr_buf_create(c, 0, RXE_RW, &buf), 0);
	for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
		struct mrmgr_buf_info bi;
		size_t keep;
		char what[96];

		cr_assert_eq(mrmgr_buf_resize(buf, sizes[k]), 0, "resize to %zu",
			     sizes[k]);
		cr_assert_eq(mrmgr_buf_query(buf, &bi, sizeof(bi)), 0);
		cr_assert_not_null(bi.mr, "registered after the resize");
		cr_assert_eq((uintptr_t)bi.data % PG, 0);
		cr_assert_eq(rxe_stats(c).odp_bytes, bi.capacity,
			     "the buffer's registration is ODP");
		cr_assert_eq(vmpin_kib(), pin, "nothing pinned");
		/* What the last step wrote survives the resize. */
		if (k) {
			keep = sizes[k] < sizes[k - 1] ? sizes[k] : sizes[k - 1];
			rdma_fill_pattern(back->addr, keep, (unsigned int)(10 + k - 1));
			rdma_expect_same(bi.data, back->addr, keep,
					 "contents kept through the resize");
		}
		snprintf(what, sizeof(what), "the growable buffer at %zu bytes "
			 "(capacity %zu)", sizes[k], bi.capacity);
		write_read_check(&f, src, back, bi.data, bi.mr->rkey, sizes[k],
				 (unsigned int)(10 + k), what);
	}
	cr_assert_eq(mrmgr_buf_destroy(buf), 0);
	cr_assert_eq(mrmgr_cache_destroy(c), 0);
	ibv_dereg_mr(src);
	ibv_dereg_mr(back);
	rdma_fixture_close(&f);
}

Test(rxe_odp_kernel, an_odp_key_follows_a_remapped_address)
{
	struct rdma_fixture f;
	char *dst = rdma_map(LEN, 'A');
	void *s = rdma_map(LEN, 0), *b = rdma_map(LEN, 0);

	open_odp(&f, "off");
	struct ibv_mr *src = plain_mr(&f, s, LEN), *back = plain_mr(&f, b, LEN);
	mrmgr_cache_t *c = odp_cache(&f, MRMGR_ODP_EXPLICIT);
	mrmgr_region_t *r = rxe_get(c, dst, LEN, RXE_RW);
	uint32_t rkey = mrmgr_region_rkey(r);

	/* What goes stale with a pinned MR (test_stale.c): new pages at the
	 * same address. The ODP MR, still held, translates to them. */
	rdma_remap_same_address(dst, LEN, 'B');
	write_read_check(&f, src, back, dst, rkey, LEN, 20,
			 "the new mapping, through the old ODP key");
	mrmgr_put(r);
	cr_assert_eq(mrmgr_cache_destroy(c), 0);
	ibv_dereg_mr(src);
	ibv_dereg_mr(back);
	rdma_fixture_close(&f);
}

/* ------------------------------------------------------------ the bug */

enum verdict { CORRECT, PAGE_START, OTHER };
static const char *const verdict_name[] = {
	"bytes at the right offset", "bytes at the page start (the bug)",
	"bytes somewhere else",
};

/* Where @p len bytes like @p want, meant for @p page + @p off, landed. */
static enum verdict where(const char *page, size_t off, const char *want,
			  size_t len)
{
	if (!memcmp(page + off, want, len))
		return CORRECT;
	if (!memcmp(page, want, len))
		return PAGE_START;
	return OTHER;
}

/*
 * The known kernel defect, through the library (quirk overridden): an
 * RDMA WRITE to, and a READ from, an ODP region at page offset 100.
 */
Test(rxe_odp_kernel, known_kernel_defect_odp_copy_ignores_the_page_offset)
{
	const size_t off = 100, n = 256;
	struct rdma_fixture f;
	char *dst = rdma_map(2 * PG, 0);
	void *s = rdma_map(PG, 0), *b = rdma_map(PG, 0);
	enum verdict w, rd;
	int affected;

	/* Whether the library's rule (quirk.c) says this kernel has it. */
	open_odp(&f, NULL);
	mrmgr_cache_t *c = odp_cache(&f, MRMGR_ODP_EXPLICIT);
	affected = !!(odp_info(c).device_quirks & MRMGR_ODP_QUIRK_PAGE_OFFSET);
	cr_assert_eq(mrmgr_cache_destroy(c), 0);
	/* Then ODP anyway, to see where the bytes go. */
	setenv("MRMGR_RXE_ODP_QUIRK", "off", 1);
	struct ibv_mr *src = plain_mr(&f, s, PG), *back = plain_mr(&f, b, PG);
	c = odp_cache(&f, MRMGR_ODP_EXPLICIT);
	cr_assert_eq(odp_info(c).mode, MRMGR_ODP_EXPLICIT);
	mrmgr_region_t *r = rxe_get(c, dst, 2 * PG, RXE_RW);

	rdma_fill_pattern(src->addr, n, 30);
	cr_assert_eq(rdma_write(&f, src->addr, src->lkey, (uintptr_t)dst + off,
				mrmgr_region_rkey(r), n),
		     IBV_WC_SUCCESS, "the WRITE completes with success either way");
	w = where(dst, off, src->addr, n);

	memset(dst, 0, 2 * PG);
	rdma_fill_pattern(dst + off, n, 31);
	memset(back->addr, 0, PG);
	cr_assert_eq(rdma_read(&f, back->addr, back->lkey, (uintptr_t)dst + off,
			       mrmgr_region_rkey(r), n),
		     IBV_WC_SUCCESS);
	/* Right: back holds dst[off..]; bug: dst[0..], zeros here. */
	rd = !memcmp(back->addr, dst + off, n) ? CORRECT
	     : !memcmp(back->addr, dst, n)     ? PAGE_START
					       : OTHER;
	cr_log_info("kernel %s, %s: WRITE at page offset %zu: %s; READ: %s; "
		    "the library's rule says %s", kernel_release(), f.name, off,
		    verdict_name[w], verdict_name[rd],
		    affected ? "affected" : "not affected");
	if (affected) {
		cr_assert(w != CORRECT && rd != CORRECT,
			  "THE KERNEL CHANGED: rxe's ODP copy honours the page "
			  "offset on %s (WRITE: %s, READ: %s). The bug is fixed "
			  "here: set the fixed version (MRMGR_RXE_ODP_FIXED_IN; "
			  "lib/device/quirk.c) and update doc/odp.md and "
			  "doc/rxe-odp-page-offset-bug.md", kernel_release(),
			  verdict_name[w], verdict_name[rd]);
		cr_assert(w == PAGE_START && rd == PAGE_START,
			  "THE KERNEL CHANGED: on %s the ODP transfer went wrong "
			  "in a new way (WRITE: %s, READ: %s)", kernel_release(),
			  verdict_name[w], verdict_name[rd]);
		cr_log_info("KNOWN KERNEL DEFECT reproduced on %s: rxe's ODP copy "
			    "ignores the offset inside a page (WRITE and READ at "
			    "offset %zu moved the page start); the library's "
			    "default falls back to pinned registrations here",
			    kernel_release(), off);
	} else {
		cr_assert(w == CORRECT && rd == CORRECT,
			  "rxe's ODP page-offset bug on %s, a kernel the library "
			  "takes for fixed (MRMGR_RXE_ODP_FIXED_IN?): WRITE: %s, "
			  "READ: %s", kernel_release(), verdict_name[w],
			  verdict_name[rd]);
	}
	mrmgr_put(r);
	cr_assert_eq(mrmgr_cache_destroy(c), 0);
	ibv_dereg_mr(src);
	ibv_dereg_mr(back);
	rdma_fixture_close(&f);
}
