/*
 * Faulting a range in as the kernel's pin_user_pages() would, for
 * registration (read, or write: FOLL_WRITE breaks copy-on-write and
 * replaces the shared zero page) and for ODP faults.
 *
 * madvise(MADV_POPULATE_READ/WRITE) does it in one call. qemu-user (7.2,
 * Debian 12's) answers every madvise() but MADV_DONTNEED with 0 and does
 * not pass it on to the host, so under it nothing is faulted in: the
 * sim's vmsplice() hold then read-faults the shared zero page into the
 * untouched pages, records its PFN, and the program's first store
 * replaces it by a page of its own, which the identity check took for a
 * stale registration (no real HCA sees that: its pin faulted the pages
 * in for writing). Whether the call acts is probed once, on a page of our
 * own; where it does not, the pages are faulted by touching them.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "compiler.h"
#include "log.h"
#include "sim/sim_internal.h"

#define PAGE MRMGR__SIM_PAGE_SIZE

unsigned int mrmgr__sim_test_flags;

static pthread_once_t probe_once = PTHREAD_ONCE_INIT;
static int populate_acts = 1;

static int advise(void *p, size_t len, int advice)
{
	/* What qemu-user does: success, and nothing else. */
	if (mrmgr__sim_test_flags & MRMGR__SIM_TEST_POPULATE_NOOP)
		return 0;
	return madvise(p, len, advice);
}

/*
 * Does MADV_POPULATE_WRITE fault a page in? mincore() tells without
 * needing pagemap's PFNs. A kernel without it (before 5.14) fails the
 * call, which populate() reports as it always did.
 */
static void probe(void)
{
	unsigned char in = 0;
	void *p = mmap(NULL, PAGE, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED)
		return;
	if (advise(p, PAGE, MADV_POPULATE_WRITE) == 0 &&
	    mincore(p, PAGE, &in) == 0 && !(in & 1)) {
		populate_acts = 0;
		mrmgr__info("sim: madvise(MADV_POPULATE_WRITE) succeeds but "
			    "faults nothing in (an emulator?): pages are "
			    "faulted in by touching them");
	}
	munmap(p, PAGE);
}

/*
 * Whether [va, end) is mapped throughout, readable, and writable when
 * write: where the kernel's populate would fail with EFAULT or ENOMEM,
 * and where touching would raise SIGSEGV. msync() finds the holes. The
 * protections come from /proc/self/maps, where it shows the range:
 * qemu-user 7.2's, made up from the host's, leaves out every guest
 * mapping whose host VMA merged with one of qemu's own (its mmap()s
 * above the guest's binary), and those are taken as accessible. (A file
 * mapping past its end would still raise SIGBUS: nothing registers one.)
 */
static int touchable(uint64_t va, uint64_t end, int write)
{
	char *line = NULL;
	size_t cap = 0;
	int ok = 1;
	FILE *f;

	va &= ~(PAGE - 1);
	if (msync((void *)(uintptr_t)va, end - va, MS_ASYNC) != 0)
		return 0;
	f = fopen("/proc/self/maps", "re");
	if (!f)
		return 1;
	while (ok && getline(&line, &cap, f) > 0) {
		unsigned long lo, hi;
		char perms[5];

		if (sscanf(line, "%lx-%lx %4s", &lo, &hi, perms) != 3 ||
		    hi <= va || lo >= end)
			continue;
		ok = perms[0] == 'r' && (!write || perms[1] == 'w');
	}
	free(line);
	fclose(f);
	return ok;
}

/*
 * One access per page. A store must not change what another thread may
 * be storing at the same time: an atomic or of 0 is a store that keeps
 * the byte.
 */
static void touch(uint64_t va, uint64_t end, int write)
{
	for (uint64_t a = va & ~(PAGE - 1); a < end; a += PAGE) {
		volatile unsigned char *b = (volatile unsigned char *)(uintptr_t)a;

		if (write)
			__atomic_fetch_or(b, 0, __ATOMIC_RELAXED);
		else
			(void)*b;
	}
}

int mrmgr__sim_fault_range(uint64_t va, uint64_t len, int write)
{
	int advice = write ? MADV_POPULATE_WRITE : MADV_POPULATE_READ;

	pthread_once(&probe_once, probe);
	for (;;) {
		if (advise((void *)(uintptr_t)va, len, advice) == 0)
			break;
		if (errno == EINTR)
			continue;
		/*
		 * ENOMEM: part of the range is not mapped; EFAULT: protection
		 * (e.g. write on read-only) or a SIGBUS area; EINVAL: VM_IO or
		 * VM_PFNMAP, which pinning refuses too. The kernel's
		 * registration fails all of these with EFAULT.
		 */
		mrmgr__dbg("sim: populate %#llx+%llu failed: %s",
			   (unsigned long long)va, (unsigned long long)len,
			   strerror(errno));
		return EFAULT;
	}
	if (populate_acts || (mrmgr__sim_test_flags & MRMGR__SIM_TEST_NO_TOUCH))
		return 0;
	if (!touchable(va, va + len, write)) {
		mrmgr__dbg("sim: populate %#llx+%llu: not mapped%s throughout",
			   (unsigned long long)va, (unsigned long long)len,
			   write ? " writable" : "");
		return EFAULT;
	}
	touch(va, va + len, write);
	return 0;
}
