/*
 * The patched-libc and external sources' tables, the modes as lists of
 * sources, and the one rule that picks the source a get relies on.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "log.h"
#include "monitor.h"
#include "intercept.h"
#include "source.h"
#include "vma.h"

/* ------------------------------------------------------------ patched libc */

/* The interception engine reports through the monitor's change protocol
 * and queue (change.c, queue.c): bound at load, before anything starts. */
static const struct mrmgr__icpt_sink sink = {
	.begin = mrmgr__mon_change_begin,
	.end = mrmgr__mon_change_end,
	.push = mrmgr__mon_push,
	.filter_add = mrmgr__mon_filter_add,
	.tail = mrmgr__mon_queue_tail,
	.saw = mrmgr__mon_queue_saw,
};

__attribute__((constructor)) static void bind_sink(void)
{
	mrmgr__icpt_bind(&sink);
}

static int patch_started(void)
{
	return mrmgr__patch_start && mrmgr__patch_start() == 0;
}

/* The patched libc runs but cannot vouch: calls it cannot see. */
static int patch_blind(void)
{
	return patch_started() && mrmgr__follow_check();
}


/*
 * The patched libc vouches only when every memory call the process
 * defines outside libc is followed too (follow.c). Not alone under a
 * sanitizer, whose allocator it cannot see: there the sanitizer
 * allocator source (sanalloc.c) runs it beside the allocator's hooks.
 */
static int patch_src_start(int asked)
{
	int err;

	(void)asked; /* its own start retries nothing: a failure is final */
	if (!mrmgr__patch_start)
		return ENOSYS;
	if (mrmgr__san_applies())
		return EOPNOTSUPP;
	err = mrmgr__patch_start();
	return err ? err : mrmgr__follow_check();
}

/* What patch_src_start(0) checks, lock-free: the same answer when it
 * says 1 (intercept.h). */
static int patch_src_quiet(void)
{
	return mrmgr__patch_quiet && mrmgr__patch_quiet() &&
	       mrmgr__follow_quiet() && !mrmgr__san_applies();
}

static int patch_src_active(void)
{
	return !mrmgr__san_applies() && patch_started() && !mrmgr__follow_check();
}

static int two(void)
{
	return 2;
}

static void patch_src_report(struct mrmgr_monitor_info *m, int listed)
{
	int perr = 0;

	(void)mrmgr__patch_state(&perr);
	m->patch_error = perr;
	m->patch_targets = mrmgr__patch_targets();
	m->patch_chained = mrmgr__patch_chained();
	m->patch_overwrites = mrmgr__patch_overwrites();
	if (listed && patch_started())
		mrmgr__follow_info(m);
}

/* Why the patched libc does not run, for the no-source warning. */
static const char *patch_src_why(int err, int listed)
{
	(void)err;
	if (!listed)
		return "not used";
	if (!mrmgr__patch_start)
		return "not built in";
	if (mrmgr__san_applies())
		return "a sanitizer is in the process (not alone)";
	if (patch_blind())
		return "memory calls it cannot see (see the warning above)";
	(void)mrmgr__patch_state(&err);
	return err ? strerror(err) : "not used";
}

const struct mrmgr__mon_source mrmgr__src_patch = {
	.name = "patched libc",
	.label = "libc patching",
	.report_bit = MRMGR_MONITOR_SRC_PATCH,
	.mem_kinds = MRMGR__SRC_KIND_HOST_VA,
	.vma_kinds = 1u << MRMGR__VMA_ANON_PRIVATE,
	.covers = MRMGR__SRC_SEES_CALLS,
	.start = patch_src_start,
	.quiet = patch_src_quiet,
	.active = patch_src_active,
	.sides = two,
	.watch = mrmgr__watch_trusted,
	.report = patch_src_report,
	.why_not = patch_src_why,
};

/* ------------------------------------------------------------ userfaultfd */

static int uffd_src_active(void)
{
	return mrmgr__uffd_state(NULL, NULL, NULL) == SRC_ACTIVE;
}

static int one(void)
{
	return 1;
}

static void uffd_src_report(struct mrmgr_monitor_info *m, int listed)
{
	int err;

	(void)listed;
	(void)mrmgr__uffd_state(&err, &m->uffd_flags, &m->uffd_features);
	m->uffd_error = err;
}

static const char *uffd_src_why(int err, int listed)
{
	(void)listed;
	return err ? strerror(err) : "not used";
}

/* One-sided: UFFD_EVENT_REMOVE and UNMAP come before the pages go,
 * nothing after (doc/design/sources.md). */
const struct mrmgr__mon_source mrmgr__src_uffd = {
	.name = "userfaultfd",
	.label = "userfaultfd",
	.report_bit = MRMGR_MONITOR_SRC_UFFD,
	.mem_kinds = MRMGR__SRC_KIND_HOST_VA,
	.vma_kinds = 1u << MRMGR__VMA_ANON_PRIVATE,
	.covers = MRMGR__SRC_SEES_CALLS | MRMGR__SRC_SEES_RAW,
	.start = mrmgr__uffd_start,
	.active = uffd_src_active,
	.sides = one,
	.watch = mrmgr__watch_uffd,
	.fork_child = mrmgr__uffd_fork_child,
	.report = uffd_src_report,
	.why_not = uffd_src_why,
};

/* ------------------------------------------------------------ external */

static int external_start(int asked)
{
	(void)asked;
	return 0;
}

static int external_active(void)
{
	return 1;
}

const struct mrmgr__mon_source mrmgr__src_external = {
	.name = "external",
	.label = "external",
	.report_bit = MRMGR_MONITOR_SRC_EXTERNAL,
	.mem_kinds = MRMGR__SRC_KIND_HOST_VA,
	.vma_kinds = ~0u,
	.covers = MRMGR__SRC_PROMISED,
	.start = external_start,
	.active = external_active,
	.sides = two, /* the program's promise: doc/growth.md */
};

/* ------------------------------------------------------------ modes */

/*
 * auto falls back to userfaultfd where the patched libc cannot see what
 * the program's memory does: a build without it, a definition it cannot
 * follow, and a sanitizer whose allocator cannot be followed (the
 * sanitizer allocator source did not start: no hooks interface, its
 * slots taken, libc not patched); the kernel reports raw system calls to
 * userfaultfd, whoever makes them. Listed after that source, so it
 * applies only where the two-sided one failed. Not valgrind: its
 * serialised threads would deadlock with the reader (uffd.c).
 */
int mrmgr__mon_auto_uffd(void)
{
	return !mrmgr__patch_start || mrmgr__san_applies() || patch_blind();
}

static void sanitizer_note(void)
{
	if (!mrmgr__patch_start || !mrmgr__san_applies())
		return;
	/* A warning: the default's promise (both sides) is not kept here,
	 * and the program's own mremap() may fail (EFAULT). */
	mrmgr__warn("monitor (auto): a sanitizer is in the process, and the "
		    "patched libc with its allocator's hooks cannot follow "
		    "the memory (%s); userfaultfd follows "
		    "the memory instead, with its limits: one-sided (a get "
		    "racing another thread's unmap can be handed a stale "
		    "registration), no growth headroom, the program's own "
		    "mremap() of a buffer it extended can fail (EFAULT), and "
		    "shmat(SHM_REMAP) and MADV_GUARD_INSTALL over cached "
		    "memory are not followed (doc/monitor.md, \"Under a "
		    "sanitizer\")", mrmgr__san_why());
}

static void none_announce(void)
{
	mrmgr__warn("MONITORING OFF (monitor mode none): this cache will hand "
		    "out STALE registrations after memory is unmapped or "
		    "remapped, and RDMA will silently write to the old pages. "
		    "Call mrmgr_invalidate() or mrmgr_notify_unmap() before "
		    "reusing memory.");
}

static void external_announce(void)
{
	mrmgr__info("monitor: external (the program reports changes with "
		    "mrmgr_notify_unmap()/mrmgr_invalidate())");
}

/*
 * auto: the patched libc when it is built in and runs, under a sanitizer
 * with the sanitizer allocator's hooks beside it, else the hooks library
 * when preloaded. userfaultfd is opt-in (uffd): its registration stops
 * VMA merging, which changes what the program's own mremap() does
 * (doc/monitor.md). Only a build without the patched source, a sanitizer
 * whose allocator cannot be followed, and a patched libc that cannot see
 * every memory call fall back to it.
 */
static const struct mrmgr__mon_mode modes[] = {
	[MRMGR_MONITOR_AUTO] = { "auto", 0, NULL, 4, {
		{ &mrmgr__src_patch, NULL, NULL },
		{ &mrmgr__src_sanalloc, mrmgr__san_applies, mrmgr__san_note },
		{ &mrmgr__src_hooks, NULL, NULL },
		{ &mrmgr__src_uffd, mrmgr__mon_auto_uffd, sanitizer_note } } },
	[MRMGR_MONITOR_UFFD] = { "uffd", 0, NULL, 1, {
		{ &mrmgr__src_uffd, NULL, NULL } } },
	[MRMGR_MONITOR_HOOKS] = { "hooks", 0, NULL, 1, {
		{ &mrmgr__src_hooks, NULL, NULL } } },
	[MRMGR_MONITOR_EXTERNAL] = { "external", 1, external_announce, 1, {
		{ &mrmgr__src_external, NULL, NULL } } },
	[MRMGR_MONITOR_NONE] = { "none", 1, none_announce, 0, { { 0 } } },
	[MRMGR_MONITOR_PATCH] = { "patch", 0, NULL, 2, {
		{ &mrmgr__src_patch, NULL, NULL },
		{ &mrmgr__src_sanalloc, mrmgr__san_applies, mrmgr__san_note } } },
};

/* An unknown value (config rejects those) watches nothing. */
static const struct mrmgr__mon_mode unknown = { "?", 0, NULL, 0, { { 0 } } };

const struct mrmgr__mon_mode *mrmgr__mon_mode_of(uint32_t mode)
{
	return mode < MRMGR__ARRAY_SIZE(modes) && modes[mode].name
		       ? &modes[mode] : &unknown;
}

const char *mrmgr__mon_mode_name(uint32_t mode)
{
	return mrmgr__mon_mode_of(mode)->name;
}

static int applies(const struct mrmgr__mon_use *u)
{
	return !u->when || u->when();
}

static const struct mrmgr__mon_source *
pick_one(const struct mrmgr__mon_mode *mm, int sides, int raw)
{
	for (unsigned int i = 0; i < mm->n; i++) {
		const struct mrmgr__mon_source *s = mm->use[i].src;

		if (s->sides() == sides &&
		    (raw < 0 || raw == !!(s->covers & MRMGR__SRC_SEES_RAW)) &&
		    applies(&mm->use[i]) && !s->start(0))
			return s;
	}
	return NULL;
}

/*
 * Both sides first: a two-sided source closes the window a one-sided one
 * leaves (change.c). Among one-sided sources, one that sees raw system
 * calls too ranks first: it sees what the program does and what its
 * libraries do behind libc.
 */
const struct mrmgr__mon_source *
mrmgr__mon_pick(const struct mrmgr__mon_mode *mm)
{
	const struct mrmgr__mon_source *s = pick_one(mm, 2, -1);

	if (!s)
		s = pick_one(mm, 1, 1);
	if (!s)
		s = pick_one(mm, 1, 0);
	return s;
}

const struct mrmgr__mon_source *
mrmgr__mon_pick_quiet(const struct mrmgr__mon_mode *mm)
{
	const struct mrmgr__mon_source *s = mm->n ? mm->use[0].src : NULL;

	/* pick_one(mm, 2, -1)'s first step, taken. */
	if (s && !mm->use[0].when && s->quiet && s->sides() == 2 && s->quiet())
		return s;
	return NULL;
}

static const struct mrmgr__mon_source *const all[] = {
	&mrmgr__src_patch, &mrmgr__src_uffd, &mrmgr__src_hooks,
	&mrmgr__src_sanalloc, &mrmgr__src_external,
};

void mrmgr__mon_sources_fork_child(void)
{
	for (unsigned int i = 0; i < MRMGR__ARRAY_SIZE(all); i++)
		if (all[i]->fork_child)
			all[i]->fork_child();
	mrmgr__watch_fork_child();
}

static int listed(const struct mrmgr__mon_mode *mm,
		  const struct mrmgr__mon_source *s)
{
	for (unsigned int i = 0; i < mm->n; i++)
		if (mm->use[i].src == s)
			return 1;
	return 0;
}

/* Start what mm lists, in order, up to the first that works. */
static int start_listed(const struct mrmgr__mon_mode *mm, int *errs)
{
	for (unsigned int i = 0; i < mm->n; i++) {
		const struct mrmgr__mon_use *u = &mm->use[i];
		static int noted;

		if (!applies(u))
			continue;
		errs[i] = u->src->start(1);
		if (errs[i])
			continue;
		if (u->note && u->when && !noted) {
			noted = 1;
			u->note();
		}
		return 1;
	}
	return 0;
}

static int warned_no_source;

static void warn_no_source(const struct mrmgr__mon_mode *mm, const int *errs)
{
	char why[512];
	size_t off = 0;

	why[0] = 0;
	for (unsigned int i = 0; i < 4; i++) {
		int err = 0;

		if (all[i] == &mrmgr__src_sanalloc && !mrmgr__san_applies())
			continue; /* only said where it could have run */
		for (unsigned int j = 0; j < mm->n; j++)
			if (mm->use[j].src == all[i])
				err = errs[j];
		off += (size_t)snprintf(why + off, sizeof(why) - off, "%s%s: %s",
					i ? "; " : "", all[i]->label,
					all[i]->why_not(err, listed(mm, all[i])));
		if (off >= sizeof(why))
			break;
	}
	mrmgr__warn("monitor (%s): no memory-event source works in this process "
		    "(%s): nothing will be cached, every get registers. Allow "
		    "userfaultfd, preload libmrmgr_hooks.so, or set "
		    "MRMGR_MONITOR=external if you report changes with "
		    "mrmgr_notify_unmap().", mm->name, why);
}

void mrmgr__mon_start(uint32_t mode, int sources)
{
	const struct mrmgr__mon_mode *mm = mrmgr__mon_mode_of(mode);
	int errs[MRMGR__MON_MAX_USES] = { 0 };
	int any;

	if (mm->announce)
		mm->announce();
	if (mm->promised || !sources)
		return;
	pthread_mutex_lock(&mrmgr__mon_lock);
	any = start_listed(mm, errs);
	if (!any && !warned_no_source) {
		warned_no_source = 1;
		warn_no_source(mm, errs);
	}
	pthread_mutex_unlock(&mrmgr__mon_lock);
}

int mrmgr__mon_two_sided(uint32_t mode)
{
	return pick_one(mrmgr__mon_mode_of(mode), 2, -1) != NULL;
}

/*
 * Whether growth headroom is safe for this cache: it registers memory the
 * program did not ask for, so every change to that memory must reach the
 * cache on both sides (doc/growth.md). A two-sided source does that; in
 * external mode the program promises it (the contract in doc/growth.md);
 * with none it has promised everything. userfaultfd alone is one-sided:
 * UFFD_EVENT_REMOVE comes before madvise() discards, nothing after, so a
 * registration in between would pin pages on their way out.
 */
int mrmgr__mon_headroom_ok_mode(uint32_t mode)
{
	int ok;

	if (mrmgr__mon_mode_of(mode)->promised)
		return 1;
	pthread_mutex_lock(&mrmgr__mon_lock);
	ok = mrmgr__mon_two_sided(mode);
	pthread_mutex_unlock(&mrmgr__mon_lock);
	return ok;
}

/*
 * Which sources the cache relies on: the two-sided one it picks, else
 * every one-sided listed source that delivers (external: always).
 */
static uint32_t relied_on(const struct mrmgr__mon_mode *mm)
{
	uint32_t bits = 0;
	unsigned int i;

	for (i = 0; i < mm->n; i++) {
		const struct mrmgr__mon_source *s = mm->use[i].src;

		if (s->sides() == 2 && applies(&mm->use[i]) && s->active())
			return s->report_bit;
	}
	for (i = 0; i < mm->n; i++) {
		const struct mrmgr__mon_source *s = mm->use[i].src;

		if (applies(&mm->use[i]) && s->active())
			bits |= s->report_bit;
	}
	return bits;
}

/* The process-wide part, for the mode already in *mi. */
void mrmgr__mon_info(struct mrmgr_monitor_info *mi)
{
	const struct mrmgr__mon_mode *mm = mrmgr__mon_mode_of(mi->mode);
	struct mrmgr_monitor_info m = *mi;

	m.changes = __atomic_load_n(&mrmgr__mon_change_count, __ATOMIC_RELAXED);
	m.retries = __atomic_load_n(&mrmgr__mon_retries, __ATOMIC_RELAXED);
	pthread_mutex_lock(&mrmgr__mon_lock);
	for (unsigned int i = 0; i < MRMGR__ARRAY_SIZE(all); i++)
		if (all[i]->report)
			all[i]->report(&m, listed(mm, all[i]));
	if (mrmgr__vma_uses_query())
		m.uffd_flags |= MRMGR_MONITOR_UFFD_PROCMAP_QUERY;
	mrmgr__watch_stats(&m.watched_ranges, &m.watched_runs, &m.watch_budget);
	m.sources |= relied_on(mm);
	pthread_mutex_unlock(&mrmgr__mon_lock);
	m.uffd_events = __atomic_load_n(&mrmgr__mon_uffd_events, __ATOMIC_RELAXED);
	m.notify_events = __atomic_load_n(&mrmgr__mon_notify_events,
					  __ATOMIC_RELAXED);
	*mi = m;
}
