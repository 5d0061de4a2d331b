/*
 * A range no source covers: why (the coverage decision's error code,
 * watch.c), counted in the cache's monitor figures and said once per
 * cause per process, loudly, with what it costs (a registration per get,
 * never a stale one).
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <errno.h>
#include <string.h>

#include "log.h"
#include "monitor.h"
#include "source.h"

static uint32_t cause_of(int err)
{
	switch (err) {
	case MRMGR__WERR_NO_SOURCE:
		return MRMGR_MONITOR_UNWATCHED_NO_SOURCE;
	case MRMGR__WERR_SHARED:
		return MRMGR_MONITOR_UNWATCHED_SHARED;
	case MRMGR__WERR_FILE:
		return MRMGR_MONITOR_UNWATCHED_FILE;
	case MRMGR__WERR_HOLE:
		return MRMGR_MONITOR_UNWATCHED_HOLE;
	case MRMGR__WERR_BUDGET:
		return MRMGR_MONITOR_UNWATCHED_BUDGET;
	default:
		return MRMGR_MONITOR_UNWATCHED_REFUSED;
	}
}

static const char *cause_text(uint32_t cause, int err)
{
	switch (cause) {
	case MRMGR_MONITOR_UNWATCHED_NO_SOURCE:
		return "no memory-event source runs for this cache's mode "
		       "(see mrmgr_cache_query_monitor(): uffd_error, "
		       "hooks_error)";
	case MRMGR_MONITOR_UNWATCHED_SHARED:
		return "shared memory (MAP_SHARED, shmem, memfd, SysV) can "
		       "change through another mapping or process";
	case MRMGR_MONITOR_UNWATCHED_FILE:
		return "a private file mapping: truncating the file (from any "
		       "process) replaces even its private pages, and nothing "
		       "reports it (allocate RDMA buffers with malloc/mmap)";
	case MRMGR_MONITOR_UNWATCHED_HOLE:
		return "part of the range is not mapped";
	case MRMGR_MONITOR_UNWATCHED_BUDGET:
		return "the watch budget (a quarter of vm.max_map_count) is "
		       "spent";
	default:
		/* EAGAIN: the registration went through, and the second look
		 * (watch.c) found the mappings no longer as classified. */
		if (err == EAGAIN)
			return "its mapping changed while it was being "
			       "registered with userfaultfd (memory mapped, "
			       "unmapped or changed beside it meanwhile)";
		return "the kernel refused the userfaultfd registration";
	}
}

/* One warning per cause per process: what is lost is said once, loudly. */
static uint32_t warned_causes;

void mrmgr__watch_unwatched(struct mrmgr__mon_cache *m, uint64_t start,
			    uint64_t last, int err)
{
	uint32_t cause = cause_of(err);

	m->unwatched++;
	m->unwatched_causes |= cause;
	m->unwatched_error = err;
	if (!(__atomic_fetch_or(&warned_causes, cause, __ATOMIC_RELAXED) & cause))
		mrmgr__warn("monitor: [%#llx, +%llu) is not watched: %s; such "
			    "gets are registered and deregistered every time, "
			    "never cached (said once per cause; "
			    "mrmgr_cache_query_monitor() counts them)",
			    (unsigned long long)start,
			    (unsigned long long)(last - start + 1),
			    cause_text(cause, err));
	else
		mrmgr__dbg("monitor: [%#llx, %#llx] not watched (%s): not cached",
			   (unsigned long long)start, (unsigned long long)last,
			   strerror(err));
}
