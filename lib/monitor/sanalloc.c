/*
 * The source auto (and patch) mode take under a sanitizer: the patched
 * libc for the program's own memory calls, and the sanitizer allocator's
 * malloc and free hooks for the heap it maps, unmaps and releases with
 * raw system calls no libc entry sees.
 *
 * Under ASan, TSan, MSan, HWASan and LSan the program's memory calls
 * still reach libc: the runtime's interceptors (ASan's mmap, TSan's
 * mmap and munmap) call the real libc entry (dlsym(RTLD_NEXT)), which is
 * the patched one, and libc's own munmap/mremap/madvise are not
 * intercepted at all; follow.c follows the interceptors' definitions
 * like any other (both sides, around the patched call inside). What
 * libc cannot see is the sanitizer's allocator: malloc'd memory is
 * mapped, unmapped (the secondary allocator's large chunks, after
 * quarantine) and released (the primary's free pages, madvise) with raw
 * system calls. Those are followed here, through
 * __sanitizer_install_malloc_and_free_hooks() (looked up with dlsym: no
 * sanitizer needed to build libmrmgr):
 *   - the free hook runs before the chunk goes to quarantine (ASan's
 *     Deallocate, TSan's user_free, MSan's and HWASan's deallocation:
 *     the hooks run first), so its size is still known
 *     (__sanitizer_get_allocated_size()): the chunk's pages are reported;
 *   - the malloc hook runs after the allocator has put the chunk in
 *     place, before the program has its address: its pages are reported;
 *   - with this source in force, the patched libc also reports the
 *     memory a call obtains at an address it did not name (mmap without
 *     MAP_FIXED, mremap's result, shmat), after the call
 *     (mrmgr__patch_fresh, patch_hooks.c).
 *
 * Why that is two-sided for every way memory under a cached registration
 * can change in a sanitized process. Both sides exist for one reason: no
 * thread may get a registration of pages that are gone once it can use
 * the memory at that address again (change.c). A report pushed after a
 * change, before any thread can use the address, is that change's end
 * side, and alone it suffices (change.c's argument (2): a registration
 * that pinned the old pages did so after its watch began, so the report,
 * which comes after the change, reaches it through the filter and the
 * queue, cached or still committing; one that pinned later pinned the new
 * pages). The begin side only matters while other threads can reach the
 * address during the call, which they cannot here. So:
 *   - the program's own calls (libc's entries, the interceptors): both
 *     sides, as without a sanitizer;
 *   - the allocator's raw changes to a chunk's pages happen only while
 *     no live chunk touches them (a primary page is released only when
 *     every chunk on it is free; a secondary chunk is unmapped after it
 *     left quarantine), and the memory reaches the program again only
 *     through malloc (its hook reports the chunk, after the change) or
 *     through a libc call that returns an address (mmap, mremap, shmat:
 *     reported after the call). A registration that pinned pages the
 *     allocator later released or remapped -- the chunk's own, cached
 *     before the free (the free hook drops it at once), or a wider one
 *     (page rounding, a merge with a neighbour, growth headroom, another
 *     chunk's VMA) -- is dropped before the program can use that address
 *     again;
 *   - a registration over a live chunk is never stale: its pages stay.
 * Excluded, as in the default mode: the program's own raw syscall(), and
 * io_uring; also the break (brk growth is not reported after the call:
 * the sanitizers' allocators never map at the break). Code that makes its
 * own memory system calls and is recognised (liburing, a Go runtime)
 * makes follow.c refuse, and auto takes userfaultfd, as without a
 * sanitizer.
 *
 * The hooks run on every malloc and free: a page-rounded range, one
 * fence and one filter load; a chunk in 2 MiB blocks no cache ever
 * registered stops there (mrmgr__mon_push_filtered()). No lock, no
 * allocation, no log: the allocator may hold its own locks.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <dlfcn.h>
#include <errno.h>
#include <stddef.h>
#include <string.h>

#include "intercept.h"
#include "log.h"
#include "monitor.h"
#include "source.h"
#include "vma.h"

struct mrmgr__san_iface mrmgr__san_test_iface;

static size_t (*chunk_size)(const volatile void *);
static int hook_state; /* enum mrmgr__src_state */
static int hook_err;
uint64_t mrmgr__san_reports; /* chunks reported (the filter let them by) */

static void chunk_changed(const volatile void *p, size_t n)
{
	uint64_t s = (uint64_t)(uintptr_t)p & ~(uint64_t)4095;
	uint64_t e = ((uint64_t)(uintptr_t)p + (n ? n - 1 : 0)) | 4095;

	if (e < s)
		e = UINT64_MAX;
	if (mrmgr__mon_push_filtered(s, e))
		__atomic_fetch_add(&mrmgr__san_reports, 1, __ATOMIC_RELAXED);
}

static void on_malloc(const volatile void *p, size_t n)
{
	if (p)
		chunk_changed(p, n);
}

static void on_free(const volatile void *p)
{
	if (p)
		chunk_changed(p, chunk_size(p));
}

/* Hooks the sanitizer's allocator, once: 0, or ENOENT (no interface:
 * no sanitizer, or one without allocator hooks), ENOSPC (its hook slots
 * are taken). The hooks stay for the life of the process. */
static int install_hooks(void)
{
	struct mrmgr__san_iface f = mrmgr__san_test_iface;

	if (hook_state != SRC_UNTRIED)
		return hook_err;
	if (!f.install && !f.absent) {
		void *i = dlsym(RTLD_DEFAULT,
				"__sanitizer_install_malloc_and_free_hooks");
		void *z = dlsym(RTLD_DEFAULT, "__sanitizer_get_allocated_size");

		memcpy(&f.install, &i, sizeof(i));
		memcpy(&f.size, &z, sizeof(z));
	}
	hook_err = ENOENT;
	if (f.install && f.size) {
		/* Before the install: the free hook may run at once. */
		__atomic_store_n(&chunk_size, f.size, __ATOMIC_SEQ_CST);
		hook_err = f.install(on_malloc, on_free) ? 0 : ENOSPC;
	}
	hook_state = hook_err ? SRC_FAILED : SRC_ACTIVE;
	return hook_err;
}

static int sanitized(void)
{
	return mrmgr__patch_sanitizer && mrmgr__patch_sanitizer();
}

static int patch_err;

/* mrmgr__mon_lock held. The patched libc first (it pins libmrmgr, which
 * the hooks then live in for good), then the hooks, then what the
 * process defines itself. */
static int san_start(int asked)
{
	int err;

	(void)asked; /* nothing here is passing: a failure is final */
	if (!sanitized())
		return ENOENT;
	if (!mrmgr__patch_start)
		return patch_err = ENOSYS;
	patch_err = mrmgr__patch_start();
	if (patch_err)
		return patch_err;
	err = install_hooks();
	if (err)
		return err;
	if (mrmgr__patch_fresh_on)
		mrmgr__patch_fresh_on();
	return mrmgr__follow_check();
}

static int san_active(void)
{
	return sanitized() && hook_state == SRC_ACTIVE && mrmgr__patch_start &&
	       mrmgr__patch_start() == 0 && !mrmgr__follow_check();
}

static int two(void)
{
	return 2;
}

const char *mrmgr__san_why(void)
{
	if (!sanitized())
		return "no sanitizer in the process";
	if (patch_err)
		return patch_err == ENOSYS ? "libc patching not built in"
					   : "libc patching failed (see above)";
	switch (hook_state == SRC_FAILED ? hook_err : 0) {
	case ENOENT:
		return "the sanitizer has no allocator hooks "
		       "(__sanitizer_install_malloc_and_free_hooks)";
	case ENOSPC:
		return "the sanitizer's allocator hook slots are all taken";
	case 0:
		break;
	default:
		return strerror(hook_err);
	}
	if (hook_state == SRC_ACTIVE && mrmgr__follow_check())
		return "memory calls the patched libc cannot see (see the "
		       "warning above)";
	return "not used";
}

static const char *san_why_not(int err, int listed)
{
	(void)err;
	return listed ? mrmgr__san_why() : "not used";
}

const struct mrmgr__mon_source mrmgr__src_sanalloc = {
	.name = "patched libc + sanitizer allocator hooks",
	.label = "sanitizer allocator",
	.report_bit = MRMGR_MONITOR_SRC_PATCH | MRMGR_MONITOR_SRC_SANITIZER,
	.mem_kinds = MRMGR__SRC_KIND_HOST_VA,
	.vma_kinds = 1u << MRMGR__VMA_ANON_PRIVATE,
	.covers = MRMGR__SRC_SEES_CALLS,
	.start = san_start,
	.active = san_active,
	.sides = two,
	.watch = mrmgr__watch_trusted,
	/* No report of its own: the patched libc's fields are its
	 * source's, filled whenever a mode lists it (auto, patch). */
	.why_not = san_why_not,
};

/* The mode's `when`: only under a sanitizer. */
int mrmgr__san_applies(void)
{
	return sanitized();
}

/* Said once, the first time it starts. */
void mrmgr__san_note(void)
{
	mrmgr__info("monitor: a sanitizer is in the process: libc is patched "
		    "for the program's memory calls, and the sanitizer "
		    "allocator's malloc/free hooks follow its heap "
		    "(doc/monitor.md, \"Under a sanitizer\")");
}
