/*
 * Device quirks: defects of a driver the library works around, decided
 * once per cache from what the device is and the kernel it runs on.
 *
 * The one known today: Soft-RoCE's (rdma_rxe) ODP copy ignores the offset
 * inside a page, from Linux 6.15 (rxe's first ODP) through at least 7.3.4
 * (doc/rxe-odp-page-offset-bug.md). An RDMA write, read or send into or out
 * of an ODP MR at a non-zero page offset, or one larger than a packet when
 * the MTU is below the page size, moves the bytes to or from the start of
 * the page, and the completion says success. A cache cannot promise its
 * users page-aligned transfers and a 4096-byte MTU, so on an affected
 * device ODP is refused as if the device did not report it: the cache
 * falls back to pinned registrations, says why (a warning once per
 * process, then info lines) and reports the quirk in mrmgr_odp_info.
 *
 * Why rxe is recognised by its vendor ids and, for other providers, by
 * the device name: the kernel gives every rxe device vendor_id 0xffffff
 * and vendor_part_id 0 whatever it is called ("rdma link add NAME type
 * rxe"); a provider layered over rxe (or the simulated HCA modelling it)
 * has no verbs attributes of its own to show, and keeps rxe's name.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>

#include "device.h"

#define RXE_VENDOR_ID 0xffffffu
/* rxe's first ODP kernel, which has the defect (Linux 6.15). */
#define RXE_ODP_BAD_FROM MRMGR__KVER(6, 15, 0)

/*
 * "6.15", "7.3.4+deb13-amd64", "6.16.12-rc1" -> MRMGR__KVER(); 0 when the
 * text does not start with at least major.minor.
 */
uint32_t mrmgr__kver_parse(const char *s)
{
	unsigned long v[3] = { 0, 0, 0 };
	char *end;
	int n;

	if (!s)
		return 0;
	for (n = 0; n < 3; n++) {
		if (*s < '0' || *s > '9')
			break;
		v[n] = strtoul(s, &end, 10);
		if (v[n] > 255)
			return 0;
		s = end;
		if (*s != '.') {
			n++;
			break;
		}
		s++;
	}
	if (n < 2)
		return 0;
	return MRMGR__KVER(v[0], v[1], v[2]);
}

static void kver_text(uint32_t v, char *buf, size_t size)
{
	snprintf(buf, size, "%u.%u.%u", v >> 16, (v >> 8) & 0xff, v & 0xff);
}

int mrmgr__quirk_rxe_odp(const char *release, char *text, size_t size)
{
	const char *mode = getenv("MRMGR_RXE_ODP_QUIRK");
	const char *fixed_s = getenv("MRMGR_RXE_ODP_FIXED_IN");
	uint32_t v = mrmgr__kver_parse(release), fixed = 0;
	char fx[16];

	if (fixed_s && *fixed_s && !(fixed = mrmgr__kver_parse(fixed_s)))
		fixed = 0; /* unreadable: no fixed version known */
	if (mode && !strcmp(mode, "on")) {
		snprintf(text, size, "rxe ODP page-offset bug assumed on "
			 "kernel %s (MRMGR_RXE_ODP_QUIRK=on)",
			 release ? release : "?");
		return 1;
	}
	/* auto, off (which must know whether it overrides anything), or an
	 * unknown word: the safe reading, auto */
	if (!v || v < RXE_ODP_BAD_FROM || (fixed && v >= fixed))
		return 0;
	if (fixed) {
		kver_text(fixed, fx, sizeof(fx));
		snprintf(text, size, "rxe ODP page-offset bug on kernel %s "
			 "(6.15 <= v < %s)", release, fx);
	} else {
		snprintf(text, size, "rxe ODP page-offset bug on kernel %s "
			 "(6.15 and later, no fixed version known)", release);
	}
	return mode && !strcmp(mode, "off") ? 2 : 1;
}

/* The unit tests' kernel release instead of uname()'s (NULL: uname). */
const char *mrmgr__quirk_test_release;

/* Whether ctx's device is Soft-RoCE. */
static int is_rxe(const struct mrmgr_device_ops *ops, struct ibv_context *ctx,
		  const char *name)
{
	struct ibv_device_attr a;

	if (ops == &mrmgr__verbs_ops) {
		memset(&a, 0, sizeof(a));
		return !ibv_query_device(ctx, &a) && a.vendor_id == RXE_VENDOR_ID &&
		       a.vendor_part_id == 0;
	}
	return !strncmp(name, "rxe", 3);
}

void mrmgr__dev_quirks(const struct mrmgr_device_ops *ops,
		       struct ibv_context *ctx, struct mrmgr__dev_caps *caps)
{
	struct utsname u;

	caps->quirks = 0;
	caps->quirk_text[0] = '\0';
	/* Only a device with ODP can have an ODP quirk. */
	if (!(caps->odp_general & IBV_ODP_SUPPORT) || !is_rxe(ops, ctx, caps->name))
		return;
	if (mrmgr__quirk_test_release)
		snprintf(u.release, sizeof(u.release), "%s", mrmgr__quirk_test_release);
	else if (uname(&u) != 0)
		snprintf(u.release, sizeof(u.release), "?");
	switch (mrmgr__quirk_rxe_odp(u.release, caps->quirk_text,
				     sizeof(caps->quirk_text))) {
	case 1: caps->quirks |= MRMGR__QUIRK_ODP_PAGE_OFFSET; break;
	case 2: caps->quirks |= MRMGR__QUIRK_OVERRIDDEN; break;
	default: break;
	}
}
