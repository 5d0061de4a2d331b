/*
 * On-demand paging modes of the cache.
 *
 * The mode is decided once, when the cache is created, from the device's
 * odp_caps (general and per transport), the mode asked for and the
 * strictness asked for; the decision and its reason are kept for
 * mrmgr_cache_query_odp() and logged. Falling back goes implicit ->
 * explicit -> off, never the other way.
 *
 * Why implicit-mode views are correct on the lock-free hit path:
 * a view is an ordinary region in the interval tree (same refcount
 * stripes, same states, same type-stable memory) whose mr is the cache's
 * implicit MR and whose kind says "never deregister". A hit on a view is
 * therefore exactly a hit on a region; a put that finds it detached
 * releases it without a verbs call. The implicit MR outlives every view:
 * it is registered before the cache is published and deregistered only
 * by mrmgr_cache_destroy(), which refuses (EBUSY) while any region is
 * held. Keys never go stale either: the implicit MR translates through
 * the process's current page tables (the kernel's MMU notifiers keep the
 * device in step), so a view can never deliver data to pages that are
 * gone. Views are still invalidated like regions: the mapping was checked
 * for protections when the view was made (see mrmgr__odp_miss()), and
 * dropping the view on mrmgr_invalidate() makes the next get check again.
 *
 * Why explicit ODP regions do not count against max_bytes: that limit
 * exists to keep pinned memory under RLIMIT_MEMLOCK and the device's
 * pinning budget. ODP regions pin nothing and the kernel does not charge
 * them to memlock, so counting them would only evict for no gain. They
 * still count against max_regions (each is a device MR with translation
 * tables of its own) and are reported in mrmgr_stats::odp_bytes.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core.h"
#include "device.h"
#include "ext.h"
#include "ids.h"
#include "log.h"
#include "odp.h"
#include "vma.h"

#define WRITE_ACCESS                                                        \
	(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |                  \
	 IBV_ACCESS_REMOTE_ATOMIC)
#define DEFAULT_OPS                                                         \
	(IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_WRITE | \
	 IBV_ODP_SUPPORT_READ)

static const char *const mode_names[] = { "off", "explicit", "implicit",
					  "auto" };

/* ------------------------------------------------------------ decision */

static uint32_t transport_caps(const struct mrmgr__dev_caps *caps, uint32_t t)
{
	switch (t) {
	case MRMGR_ODP_TRANSPORT_RC: return caps->odp_rc;
	case MRMGR_ODP_TRANSPORT_UC: return caps->odp_uc;
	case MRMGR_ODP_TRANSPORT_UD: return caps->odp_ud;
	default: return caps->odp_xrc;
	}
}

static const char *transport_name(uint32_t t)
{
	switch (t) {
	case MRMGR_ODP_TRANSPORT_RC: return "RC";
	case MRMGR_ODP_TRANSPORT_UC: return "UC";
	case MRMGR_ODP_TRANSPORT_UD: return "UD";
	default: return "XRC";
	}
}

/*
 * Can explicit ODP serve the transports and operations asked for? 0, or
 * the reason it cannot (with a sentence in text).
 */
static uint32_t explicit_blocker(const struct mrmgr__dev_caps *caps,
				 uint32_t transports, uint32_t ops,
				 char *text, size_t size)
{
	if (!(caps->odp_general & IBV_ODP_SUPPORT)) {
		snprintf(text, size, "%s does not report IBV_ODP_SUPPORT",
			 caps->name);
		return MRMGR_ODP_REASON_NO_ODP;
	}
	/* A device whose ODP can misplace data is no ODP device (quirk.c). */
	if (caps->quirks & MRMGR__QUIRK_ODP_PAGE_OFFSET) {
		snprintf(text, size, "%.24s: %.100s", caps->name, caps->quirk_text);
		return MRMGR_ODP_REASON_DEVICE_QUIRK;
	}
	for (uint32_t t = 1; t <= MRMGR_ODP_TRANSPORT_XRC; t <<= 1) {
		uint32_t have = transport_caps(caps, t);

		if (!(transports & t) || (have & ops) == ops)
			continue;
		snprintf(text, size, "%s's %s ODP caps %#x lack %#x", caps->name,
			 transport_name(t), have, ops & ~have);
		return MRMGR_ODP_REASON_TRANSPORT_CAPS;
	}
	return 0;
}

static void set_decision(struct mrmgr__odp *o, uint32_t mode, uint32_t reason,
			 const char *fmt, ...) __attribute__((format(printf, 4, 5)));

static void set_decision(struct mrmgr__odp *o, uint32_t mode, uint32_t reason,
			 const char *fmt, ...)
{
	va_list ap;

	o->mode = mode;
	o->reason = reason;
	va_start(ap, fmt);
	vsnprintf(o->reason_text, sizeof(o->reason_text), fmt, ap);
	va_end(ap);
}

/* An ODP registration the device refuses: EINVAL too (rxe, and mlx5
 * without implicit ODP, refuse IBV_ACCESS_ON_DEMAND as a bad argument). */
static int unsupported_errno(int e)
{
	return e == EINVAL || mrmgr__dev_unsupported(e);
}

/* Register the implicit MR. 0 or the device's errno. */
static int implicit_register(struct mrmgr_cache *c)
{
	const struct mrmgr__core_view *cv = mrmgr__core_view(c);
	struct mrmgr__odp *o = mrmgr__odp_of(c);
	unsigned int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
			      IBV_ACCESS_REMOTE_READ;
	struct ibv_mr *mr = NULL;
	int ret;

	/* Atomics only when the caller asked for them to work on ODP. */
	if (o->ops & IBV_ODP_SUPPORT_ATOMIC)
		access |= IBV_ACCESS_REMOTE_ATOMIC;
	ret = mrmgr__dev_reg_mr(cv->ops, cv->pd, NULL, SIZE_MAX,
			    (int)(access | IBV_ACCESS_ON_DEMAND), &mr);
	if (ret) {
		mrmgr__core_count(c, reg_failures, 1);
		return ret;
	}
	mrmgr__core_count(c, registrations, 1);
	o->implicit_mr = mr;
	o->implicit_access = access;
	return 0;
}

/* Each quirk warning is said once per process, the rest at info level. */
static int quirk_said, override_said;

int mrmgr__odp_init(struct mrmgr_cache *c)
{
	struct mrmgr__odp *o = mrmgr__odp_of(c);
	const struct mrmgr__core_view *v = mrmgr__core_view(c);
	const struct mrmgr__dev_caps *caps = v->caps;
	uint32_t req = v->odp_mode;
	char why[128] = "";
	uint32_t blocker;
	int strict, ret;

	memset(o, 0, sizeof(*o));
	mrmgr__core_init_reg(c, 0, 0);
	o->requested = req;
	o->flags = v->odp_flags;
	o->transports = v->odp_transports ? v->odp_transports
					  : MRMGR_ODP_TRANSPORT_RC;
	o->ops = v->odp_ops ? v->odp_ops : DEFAULT_OPS;
	strict = (o->flags & MRMGR_ODP_STRICT) && req != MRMGR_ODP_AUTO;

	if (req == MRMGR_ODP_OFF) {
		set_decision(o, MRMGR_ODP_OFF, MRMGR_ODP_REASON_AS_REQUESTED,
			     "ODP off (as requested): pinned registrations");
		goto decided;
	}
	blocker = explicit_blocker(caps, o->transports, o->ops, why, sizeof(why));
	if (!blocker && req != MRMGR_ODP_EXPLICIT) {
		if (!(caps->odp_general & IBV_ODP_SUPPORT_IMPLICIT)) {
			blocker = MRMGR_ODP_REASON_NO_IMPLICIT;
			snprintf(why, sizeof(why),
				 "%s does not report IBV_ODP_SUPPORT_IMPLICIT",
				 caps->name);
		} else if ((ret = implicit_register(c)) != 0) {
			if (strict && !unsupported_errno(ret)) {
				mrmgr__err("ODP implicit (strict) on %s: the "
					   "implicit registration failed: %s",
					   caps->name, strerror(ret));
				return ret;
			}
			blocker = MRMGR_ODP_REASON_IMPLICIT_REG_FAILED;
			snprintf(why, sizeof(why),
				 "%s refused the implicit registration: %s",
				 caps->name, strerror(ret));
		} else {
			set_decision(o, MRMGR_ODP_IMPLICIT,
				     MRMGR_ODP_REASON_AS_REQUESTED,
				     "ODP implicit (asked %s): one implicit MR "
				     "on %s, no registration per region",
				     mode_names[req], caps->name);
			goto decided;
		}
	} else if (!blocker) {
		set_decision(o, MRMGR_ODP_EXPLICIT, MRMGR_ODP_REASON_AS_REQUESTED,
			     "ODP explicit (as requested) on %s", caps->name);
		goto decided;
	}

	/* The requested mode is not available: fall back, or refuse. */
	if (strict) {
		mrmgr__err("ODP %s requested with MRMGR_ODP_STRICT, but %s",
			   mode_names[req], why);
		return EOPNOTSUPP;
	}
	if (blocker == MRMGR_ODP_REASON_NO_IMPLICIT ||
	    blocker == MRMGR_ODP_REASON_IMPLICIT_REG_FAILED)
		set_decision(o, MRMGR_ODP_EXPLICIT, blocker,
			     "ODP explicit (asked %s): %s", mode_names[req], why);
	else
		set_decision(o, MRMGR_ODP_OFF, blocker,
			     "ODP off (asked %s): %s; pinned registrations",
			     mode_names[req], why);
decided:
	/* Off: nothing to plan or count for any miss or region. */
	if (o->mode == MRMGR_ODP_OFF)
		mrmgr__core_init_idle(c, &mrmgr__ext_odp);
	if (o->mode != MRMGR_ODP_OFF) {
		o->reg_access = IBV_ACCESS_ON_DEMAND;
		/* The core ORs it into every registration; ODP regions pin
		 * nothing, so max_bytes bounds no merge. */
		mrmgr__core_init_reg(c, o->reg_access, 1);
		if (o->flags & MRMGR_ODP_AUTO_PREFETCH)
			mrmgr__core_init_flags(c, MRMGR__CACHE_AUTO_PREFETCH, 0);
	}
	/* An explicit request that was not met deserves a warning; so does
	 * a device quirk, once per process (then info lines). */
	mrmgr__log(o->reason != MRMGR_ODP_REASON_AS_REQUESTED &&
				   (req != MRMGR_ODP_AUTO ||
				    (o->reason == MRMGR_ODP_REASON_DEVICE_QUIRK &&
				     !__atomic_exchange_n(&quirk_said, 1, __ATOMIC_RELAXED)))
			   ? MRMGR_LOG_WARN
			   : MRMGR_LOG_INFO,
		   "%s", o->reason_text);
	if ((caps->quirks & MRMGR__QUIRK_OVERRIDDEN) && o->mode != MRMGR_ODP_OFF)
		mrmgr__log(__atomic_exchange_n(&override_said, 1, __ATOMIC_RELAXED)
				   ? MRMGR_LOG_INFO
				   : MRMGR_LOG_WARN,
			   "ODP on %s despite %s (MRMGR_RXE_ODP_QUIRK=off): "
			   "transfers at page offsets may land at the page start",
			   caps->name, caps->quirk_text);
	return 0;
}

void mrmgr__odp_fini(struct mrmgr_cache *c)
{
	struct mrmgr__odp *o = mrmgr__odp_of(c);
	int ret;

	if (!o || !o->implicit_mr)
		return;
	ret = mrmgr__core_dereg(c, o->implicit_mr, "the implicit ODP MR");
	if (!ret)
		mrmgr__core_count(c, deregistrations, 1);
	o->implicit_mr = NULL;
}

int mrmgr__odp_miss(struct mrmgr_cache *c, uint64_t start, uint64_t last,
		    unsigned int access, uint64_t *rs, uint64_t *rl,
		    unsigned int *racc, int *merged, int *kind)
{
	static int warned;
	uint64_t bad = 0;
	const char *why = "";
	int ret;

	ret = mrmgr__vma_check_prot(*rs, *rl, !!(*racc & WRITE_ACCESS), 0,
				    &bad, &why);
	if (ret == EFAULT && *merged) {
		/* The merged span reaches memory the request does not:
		 * register just the request, checked on its own. */
		*rs = start;
		*rl = last;
		*racc = access;
		*merged = 0;
		ret = mrmgr__vma_check_prot(start, last,
					    !!(access & WRITE_ACCESS), 0, &bad,
					    &why);
	}
	if (ret == EFAULT) {
		mrmgr__err("mrmgr_get: [%#llx, +%llu) access %#x: %#llx is %s; "
			   "an ODP registration would only fail at fault time, "
			   "so the cache refuses it",
			   (unsigned long long)start,
			   (unsigned long long)(last - start + 1), access,
			   (unsigned long long)bad, why);
		return EFAULT;
	}
	if (ret && !__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
		mrmgr__warn("cannot read /proc/self/maps (%s): ODP regions are "
			    "made without checking protections", strerror(ret));
	*kind = mrmgr__odp_of(c)->mode == MRMGR_ODP_IMPLICIT &&
				!(*racc & ~mrmgr__odp_of(c)->implicit_access)
			? MRMGR__REGION_VIEW
			: MRMGR__REGION_ODP;
	return 0;
}

/* ------------------------------------------------------------ accounting */

void mrmgr__odp_region_added(struct mrmgr_cache *c, struct mrmgr_region *r)
{
	if (mrmgr__rgn_kind(r) == MRMGR__REGION_VIEW)
		mrmgr__core_count(c, implicit_views, 1);
	else
		mrmgr__core_count(c, odp_bytes, mrmgr__rgn_len(r));
}

void mrmgr__odp_region_gone(struct mrmgr_cache *c, struct mrmgr_region *r)
{
	if (mrmgr__rgn_kind(r) == MRMGR__REGION_ODP)
		mrmgr__core_count(c, odp_bytes, -(int64_t)(mrmgr__rgn_len(r)));
}

void mrmgr__odp_stats(struct mrmgr_cache *c, struct mrmgr_stats *s)
{
	const struct mrmgr__prefetch_stats *p = &mrmgr__odp_of(c)->pst;

	s->prefetch_calls = __atomic_load_n(&p->calls, __ATOMIC_RELAXED);
	s->prefetch_sges = __atomic_load_n(&p->sges, __ATOMIC_RELAXED);
	s->prefetch_batches = __atomic_load_n(&p->batches, __ATOMIC_RELAXED);
	s->prefetch_noops = __atomic_load_n(&p->noops, __ATOMIC_RELAXED);
	s->prefetch_failures = __atomic_load_n(&p->failures, __ATOMIC_RELAXED);
	s->prefetch_retries = __atomic_load_n(&p->retries, __ATOMIC_RELAXED);
}

MRMGR_EXPORT int mrmgr_cache_query_odp(mrmgr_cache_t *c,
				       struct mrmgr_odp_info *info, size_t size)
{
	const struct mrmgr__core_view *cv;
	struct mrmgr_odp_info i;
	const struct mrmgr__odp *o;

	if (!c || !info || !size) {
		mrmgr__err("mrmgr_cache_query_odp: %s",
			   !c ? "NULL cache" : !info ? "NULL info" : "size 0");
		return EINVAL;
	}
	/* Set at creation and never changed: no lock needed. */
	cv = mrmgr__core_view(c);
	o = mrmgr__odp_of(c);
	memset(&i, 0, sizeof(i));
	i.requested_mode = o->requested;
	i.mode = o->mode;
	i.reason = o->reason;
	i.flags = o->flags;
	i.transports = o->transports;
	i.ops = o->ops;
	i.general_caps = cv->caps->odp_general;
	i.rc_caps = cv->caps->odp_rc;
	i.uc_caps = cv->caps->odp_uc;
	i.ud_caps = cv->caps->odp_ud;
	i.xrc_caps = cv->caps->odp_xrc;
	i.max_sge = cv->caps->max_sge;
	if (o->implicit_mr) {
		i.implicit_access = o->implicit_access;
		i.implicit_lkey = o->implicit_mr->lkey;
		i.implicit_rkey = o->implicit_mr->rkey;
	}
	snprintf(i.reason_text, sizeof(i.reason_text), "%s", o->reason_text);
	if (cv->caps->quirks & MRMGR__QUIRK_ODP_PAGE_OFFSET)
		i.device_quirks |= MRMGR_ODP_QUIRK_PAGE_OFFSET;
	if (cv->caps->quirks & MRMGR__QUIRK_OVERRIDDEN)
		i.device_quirks |= MRMGR_ODP_QUIRK_PAGE_OFFSET | MRMGR_ODP_QUIRK_OVERRIDDEN;
	memcpy(info, &i, size < sizeof(i) ? size : sizeof(i));
	return 0;
}

/* ------------------------------------------------------------ hooks */

static int odp_plan_miss(struct mrmgr_cache *c, struct mrmgr__miss *m,
			 struct mrmgr_region **out)
{
	int ret;

	(void)out;
	if (mrmgr__odp_of(c)->mode == MRMGR_ODP_OFF)
		return MRMGR__PLAN_GO_ON;
	ret = mrmgr__odp_miss(c, m->start, m->last, m->access, &m->rs, &m->rl,
			      &m->racc, &m->merged, &m->kind);
	if (ret) {
		mrmgr__core_count(c, reg_failures, 1);
		return ret;
	}
	if (m->kind == MRMGR__REGION_VIEW)
		m->view_mr = mrmgr__odp_of(c)->implicit_mr;
	return MRMGR__PLAN_GO_ON;
}

static void odp_region_added(struct mrmgr_cache *c, struct mrmgr_region *r)
{
	if (mrmgr__rgn_kind(r) != MRMGR__REGION_PINNED)
		mrmgr__odp_region_added(c, r);
}

static void odp_after_get(struct mrmgr_cache *c, struct mrmgr_region *r,
			  void *addr, size_t length, unsigned int access,
			  uint64_t get_flags)
{
	if (mrmgr__odp_want_hint(mrmgr__core_flags(c), get_flags))
		mrmgr__odp_get_hint(r, addr, length, access);
}

const struct mrmgr__ext mrmgr__ext_odp = {
	.name = "odp",
	.id = MRMGR__EXT_ID_ODP,
	.priv_size = sizeof(struct mrmgr__odp),
	.init = mrmgr__odp_init,
	.fini = mrmgr__odp_fini,
	.plan_miss = odp_plan_miss,
	.region_added = odp_region_added,
	.region_released = mrmgr__odp_region_gone,
	.stats = mrmgr__odp_stats,
	.after_get = odp_after_get,
};
