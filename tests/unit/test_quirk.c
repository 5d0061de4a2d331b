/*
 * Device quirks (lib/device/quirk.c): rxe's ODP page-offset bug. The
 * decision from a kernel release and MRMGR_RXE_ODP_QUIRK /
 * MRMGR_RXE_ODP_FIXED_IN, tested on release strings; and what a cache
 * does on a device that has the quirk, on the simulated HCA modelling
 * rxe 6.17+ (MRMGR_SIM_FLAG_RXE_ODP): ODP refused with the quirk as the
 * reason, pinned registrations, a warning once per process, the quirk in
 * mrmgr_odp_info; MRMGR_RXE_ODP_QUIRK=off uses ODP anyway, and says so.
 * The cache tests set the kernel release the library sees
 * (mrmgr__quirk_test_release), whatever this host runs.
 * The guest tier (tests/rxe/test_odp_kernel.c) checks the same on a real
 * rxe of an affected kernel.
 *
 * SPDX-License-Identifier: MIT
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <criterion/criterion.h>
#include <mrmgr/mrmgr.h>
#include <mrmgr/sim.h>

#include "device.h"

static struct {
	int warns, infos;
	char last_warn[512];
} logged;

static void capture(enum mrmgr_log_level level, const char *msg, void *arg)
{
	(void)arg;
	if (level == MRMGR_LOG_WARN) {
		logged.warns++;
		snprintf(logged.last_warn, sizeof(logged.last_warn), "%s", msg);
	} else if (level == MRMGR_LOG_INFO) {
		logged.infos++;
	}
}

static void setup(void)
{
	static const char *const vars[] = {
		"MRMGR_ODP", "MRMGR_ODP_STRICT", "MRMGR_ODP_PREFETCH",
		"MRMGR_RXE_ODP_QUIRK", "MRMGR_RXE_ODP_FIXED_IN",
	};

	for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++)
		unsetenv(vars[i]);
	memset(&logged, 0, sizeof(logged));
	mrmgr__quirk_test_release = "7.3.4+deb13-amd64";
	mrmgr_set_log_handler(capture, NULL, MRMGR_LOG_INFO);
}

static void teardown(void)
{
	mrmgr_set_log_handler(NULL, NULL, MRMGR_LOG_WARN);
}

TestSuite(quirk, .init = setup, .fini = teardown);

/* ------------------------------------------------------------ decision */

Test(quirk, kernel_versions_parse)
{
	cr_assert_eq(mrmgr__kver_parse("7.3.4+deb13-amd64"), MRMGR__KVER(7, 3, 4));
	cr_assert_eq(mrmgr__kver_parse("6.15"), MRMGR__KVER(6, 15, 0));
	cr_assert_eq(mrmgr__kver_parse("6.16.12-rc1"), MRMGR__KVER(6, 16, 12));
	cr_assert_eq(mrmgr__kver_parse("6.1.0-41-amd64"), MRMGR__KVER(6, 1, 0));
	cr_assert_eq(mrmgr__kver_parse("6"), 0, "major alone is not a version");
	cr_assert_eq(mrmgr__kver_parse("x6.15"), 0);
	cr_assert_eq(mrmgr__kver_parse(""), 0);
	cr_assert_eq(mrmgr__kver_parse(NULL), 0);
	cr_assert_eq(mrmgr__kver_parse("6.300"), 0, "out of range");
}

static int affected(const char *release)
{
	char text[128] = "";

	return mrmgr__quirk_rxe_odp(release, text, sizeof(text));
}

Test(quirk, rxe_odp_affects_6_15_and_every_later_kernel_by_default)
{
	cr_assert_eq(affected("6.1.0-41-amd64"), 0, "6.1: rxe has no ODP at all");
	cr_assert_eq(affected("6.14.11"), 0);
	cr_assert_eq(affected("6.15.0"), 1, "rxe's first ODP kernel");
	cr_assert_eq(affected("6.16.12+deb13-amd64"), 1);
	cr_assert_eq(affected("7.3.4+deb13-amd64"), 1);
	cr_assert_eq(affected("9.0"), 1, "no fixed version known: all later ones");
	cr_assert_eq(affected("garbage"), 0, "an unreadable release is not >= 6.15");

	char text[128];
	cr_assert_eq(mrmgr__quirk_rxe_odp("7.3.4+deb13-amd64", text, sizeof(text)), 1);
	cr_assert_str_eq(text, "rxe ODP page-offset bug on kernel 7.3.4+deb13-amd64 "
			       "(6.15 and later, no fixed version known)");
}

Test(quirk, a_fixed_version_from_the_environment_ends_the_range)
{
	char text[128];

	setenv("MRMGR_RXE_ODP_FIXED_IN", "7.4", 1);
	cr_assert_eq(affected("7.3.9"), 1);
	cr_assert_eq(affected("7.4.0"), 0);
	cr_assert_eq(affected("8.1"), 0);
	cr_assert_eq(affected("6.14"), 0);
	cr_assert_eq(mrmgr__quirk_rxe_odp("6.17.1", text, sizeof(text)), 1);
	cr_assert_str_eq(text, "rxe ODP page-offset bug on kernel 6.17.1 "
			       "(6.15 <= v < 7.4.0)");
	/* Unreadable: as if unset (the safe reading). */
	setenv("MRMGR_RXE_ODP_FIXED_IN", "soon", 1);
	cr_assert_eq(affected("8.1"), 1);
}

Test(quirk, on_forces_it_off_overrides_it_and_unknown_words_are_auto)
{
	setenv("MRMGR_RXE_ODP_QUIRK", "on", 1);
	cr_assert_eq(affected("6.1.0"), 1, "on: whatever the kernel");
	setenv("MRMGR_RXE_ODP_QUIRK", "off", 1);
	cr_assert_eq(affected("7.3.4"), 2, "found, overridden");
	cr_assert_eq(affected("6.1.0"), 0, "nothing to override");
	setenv("MRMGR_RXE_ODP_QUIRK", "maybe", 1);
	cr_assert_eq(affected("7.3.4"), 1);
	cr_assert_eq(affected("6.12"), 0);
}

/* ------------------------------------------------------------ caches */

struct dev {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
};

static void dev_open(struct dev *d, uint32_t personality, uint32_t flags)
{
	struct mrmgr_sim_attr sa = {
		.comp_mask = MRMGR_SIM_ATTR_PERSONALITY | MRMGR_SIM_ATTR_FLAGS,
		.personality = personality,
		.flags = flags,
	};

	cr_assert_eq(mrmgr_sim_open(&sa, &d->ctx), 0);
	cr_assert_eq(mrmgr_sim_alloc_pd(d->ctx, &d->pd), 0);
}

static void dev_close(struct dev *d)
{
	cr_assert_eq(mrmgr_sim_dealloc_pd(d->pd), 0);
	cr_assert_eq(mrmgr_sim_close(d->ctx), 0);
}

static mrmgr_cache_t *odp_cache(struct dev *d, uint32_t mode, uint32_t flags)
{
	struct mrmgr_cache_attr a = {
		.comp_mask = MRMGR_CACHE_ATTR_ODP,
		.odp_mode = mode,
		.odp_flags = flags,
	};
	mrmgr_cache_t *c = NULL;

	cr_assert_eq(mrmgr_cache_create(d->pd, &a, &c), 0);
	return c;
}

static struct mrmgr_odp_info odp_info(mrmgr_cache_t *c)
{
	struct mrmgr_odp_info i;

	cr_assert_eq(mrmgr_cache_query_odp(c, &i, sizeof(i)), 0);
	return i;
}

Test(quirk, sim_rxe_odp_device_reports_explicit_odp_and_advice)
{
	struct dev d;
	struct mrmgr_sim_attr bad = {
		.comp_mask = MRMGR_SIM_ATTR_FLAGS, .flags = MRMGR_SIM_FLAG_RXE_ODP,
	};
	struct ibv_context *ctx = NULL;

	cr_assert_eq(mrmgr_sim_open(&bad, &ctx), EINVAL, "mlx5 personality: refused");
	memset(&logged, 0, sizeof(logged));
	/* On a kernel before 6.15 (no quirk): ODP explicit. */
	mrmgr__quirk_test_release = "6.12.48+deb13-amd64";
	dev_open(&d, MRMGR_SIM_RXE, MRMGR_SIM_FLAG_RXE_ODP);
	mrmgr_cache_t *c = odp_cache(&d, MRMGR_ODP_AUTO, 0);
	struct mrmgr_odp_info i = odp_info(c);
	cr_assert_eq(i.mode, MRMGR_ODP_EXPLICIT, "%s", i.reason_text);
	cr_assert_eq(i.reason, MRMGR_ODP_REASON_NO_IMPLICIT);
	cr_assert_eq(i.general_caps, IBV_ODP_SUPPORT);
	cr_assert_eq(i.rc_caps, 0x3f);
	cr_assert(strstr(i.reason_text, "rxe_odp_sim_"), "%s", i.reason_text);
	cr_assert_eq(i.device_quirks, 0);
	cr_assert_eq(logged.warns, 0, "%s", logged.last_warn);
	cr_assert_eq(mrmgr_cache_destroy(c), 0);
	dev_close(&d);
}

Test(quirk, affected_device_falls_back_to_pinned_and_says_why_once)
{
	struct dev d;
	size_t len = 8 * 4096;
	char *buf = mmap(NULL, len, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	mrmgr_region_t *r = NULL;

	cr_assert_neq(buf, MAP_FAILED);
	dev_open(&d, MRMGR_SIM_RXE, MRMGR_SIM_FLAG_RXE_ODP);
	for (int round = 0; round < 2; round++) {
		mrmgr_cache_t *c = odp_cache(&d, round ? MRMGR_ODP_EXPLICIT
						       : MRMGR_ODP_AUTO, 0);
		struct mrmgr_odp_info i = odp_info(c);

		cr_assert_eq(i.mode, MRMGR_ODP_OFF, "%s", i.reason_text);
		cr_assert_eq(i.reason, MRMGR_ODP_REASON_DEVICE_QUIRK);
		cr_assert_eq(i.device_quirks, MRMGR_ODP_QUIRK_PAGE_OFFSET);
		cr_assert_eq(i.general_caps, IBV_ODP_SUPPORT, "the caps still say ODP");
		cr_assert(strstr(i.reason_text, "rxe ODP page-offset bug"), "%s",
			  i.reason_text);
		cr_assert(strstr(i.reason_text, "pinned registrations"), "%s",
			  i.reason_text);
		/* Round 0 (auto): the process's first quirk line is a warning;
		 * round 1 (explicit asked): a warning as for any unmet request. */
		cr_assert_eq(logged.warns, round + 1, "round %d: %d warnings", round,
			     logged.warns);
		cr_assert_str_eq(logged.last_warn, i.reason_text);
		/* A pinned region: no ON_DEMAND in the MR the device holds. */
		cr_assert_eq(mrmgr_get(c, buf, len, IBV_ACCESS_LOCAL_WRITE |
				       IBV_ACCESS_REMOTE_WRITE, &r), 0);
		struct mrmgr_stats s;
		cr_assert_eq(mrmgr_cache_query_stats(c, &s, sizeof(s)), 0);
		cr_assert_eq(s.odp_bytes, 0, "nothing registered on demand");
		cr_assert_eq(s.registrations, 1);
		mrmgr_put(r);
		cr_assert_eq(mrmgr_cache_destroy(c), 0);
	}
	/* A third cache under auto: info only, the warning was said. */
	mrmgr_cache_t *c = odp_cache(&d, MRMGR_ODP_AUTO, 0);
	cr_assert_eq(odp_info(c).mode, MRMGR_ODP_OFF);
	cr_assert_eq(logged.warns, 2, "said once per process under auto");
	cr_assert_eq(mrmgr_cache_destroy(c), 0);
	/* Strict refuses, as for any device without the mode. */
	struct mrmgr_cache_attr a = {
		.comp_mask = MRMGR_CACHE_ATTR_ODP, .odp_mode = MRMGR_ODP_EXPLICIT,
		.odp_flags = MRMGR_ODP_STRICT,
	};
	c = NULL;
	cr_assert_eq(mrmgr_cache_create(d.pd, &a, &c), EOPNOTSUPP);
	cr_assert_null(c);
	dev_close(&d);
	munmap(buf, len);
}

Test(quirk, opt_in_uses_odp_anyway_with_a_warning)
{
	struct dev d;

	setenv("MRMGR_RXE_ODP_QUIRK", "off", 1);
	dev_open(&d, MRMGR_SIM_RXE, MRMGR_SIM_FLAG_RXE_ODP);
	for (int round = 0; round < 2; round++) {
		mrmgr_cache_t *c = odp_cache(&d, MRMGR_ODP_EXPLICIT, 0);
		struct mrmgr_odp_info i = odp_info(c);

		cr_assert_eq(i.mode, MRMGR_ODP_EXPLICIT, "%s", i.reason_text);
		cr_assert_eq(i.reason, MRMGR_ODP_REASON_AS_REQUESTED);
		cr_assert_eq(i.device_quirks,
			     MRMGR_ODP_QUIRK_PAGE_OFFSET | MRMGR_ODP_QUIRK_OVERRIDDEN);
		cr_assert_eq(mrmgr_cache_destroy(c), 0);
	}
	cr_assert_eq(logged.warns, 1, "the override is said once per process");
	cr_assert(strstr(logged.last_warn, "despite rxe ODP page-offset bug"), "%s",
		  logged.last_warn);
}

Test(quirk, mlx5_like_device_never_has_it)
{
	struct dev d;

	dev_open(&d, MRMGR_SIM_MLX5, 0);
	mrmgr_cache_t *c = odp_cache(&d, MRMGR_ODP_AUTO, 0);
	struct mrmgr_odp_info i = odp_info(c);
	cr_assert_eq(i.mode, MRMGR_ODP_IMPLICIT, "%s", i.reason_text);
	cr_assert_eq(i.device_quirks, 0);
	cr_assert_eq(logged.warns, 0);
	cr_assert_eq(mrmgr_cache_destroy(c), 0);
	dev_close(&d);
}

Test(quirk, on_a_kernel_before_6_15_nothing_is_said)
{
	struct dev d;

	mrmgr__quirk_test_release = "6.1.0-41-amd64";
	setenv("MRMGR_RXE_ODP_QUIRK", "off", 1);
	dev_open(&d, MRMGR_SIM_RXE, MRMGR_SIM_FLAG_RXE_ODP);
	mrmgr_cache_t *c = odp_cache(&d, MRMGR_ODP_EXPLICIT, 0);
	cr_assert_eq(odp_info(c).device_quirks, 0, "nothing to override");
	cr_assert_eq(logged.warns, 0, "%s", logged.last_warn);
	cr_assert_eq(mrmgr_cache_destroy(c), 0);
	dev_close(&d);
}
