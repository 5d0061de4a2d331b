/*
 * The patch source's self-test (patch.h), run by the install before any
 * cache relies on the patched entries: every call is delivered to its
 * hook, glibc's internal ones included.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/shm.h>
#include <unistd.h>

#include "patch.h"

#if MRMGR__PATCH_SUPPORTED

/* Shared with patch.c (patch.h); short here as everywhere. */
#define P mrmgr__patch_g

/*
 * Each patched call is delivered: call every entry point through libc's
 * own address with arguments the kernel refuses (no side effect; errno
 * must come back as glibc sets it), then an munmap() whose event must
 * reach the queue, then -- when free() is glibc's -- free() of a chunk
 * glibc can only have mmap'd, whose internal munmap must arrive too.
 */
int mrmgr__patch_selftest(const struct mrmgr__patch_image *im)
{
	int (*p_munmap)(void *, size_t) = (int (*)(void *, size_t))P.site[MRMGR__PT_MUNMAP].fn;
	void *(*p_mremap)(void *, size_t, size_t, int, ...) =
		(void *(*)(void *, size_t, size_t, int, ...))P.site[MRMGR__PT_MREMAP].fn;
	int (*p_madvise)(void *, size_t, int) = (int (*)(void *, size_t, int))P.site[MRMGR__PT_MADVISE].fn;
	void *(*p_mmap)(void *, size_t, int, int, int, off_t) =
		(void *(*)(void *, size_t, int, int, int, off_t))P.site[MRMGR__PT_MMAP].fn;
	int (*p_brk)(void *) = (int (*)(void *))P.site[MRMGR__PT_BRK].fn;
	void *(*p_shmat)(int, const void *, int) = (void *(*)(int, const void *, int))P.site[MRMGR__PT_SHMAT].fn;
	int (*p_shmdt)(const void *) = (int (*)(const void *))P.site[MRMGR__PT_SHMDT].fn;
	void *(*p_sbrk)(intptr_t) = (void *(*)(intptr_t))P.site[MRMGR__PT_SBRK].fn;
	void *bad = (void *)(uintptr_t)1;
	unsigned int seen, all = P.targets;
	size_t pg = (size_t)sysconf(_SC_PAGESIZE);
	int ok = 1, saved = errno;
	uint64_t from;
	char *m;

	__atomic_store_n(&mrmgr__patch_probe_seen, 0, __ATOMIC_SEQ_CST);
	__atomic_store_n(&mrmgr__patch_probe_on, 1, __ATOMIC_SEQ_CST);
	errno = 0;
	ok &= p_munmap(bad, pg) == -1 && errno == EINVAL;
	errno = 0;
	ok &= p_mremap(bad, pg, pg, 0) == MAP_FAILED && errno == EINVAL;
	errno = 0;
	ok &= p_madvise(bad, pg, MADV_DONTNEED) == -1 && errno == EINVAL;
	errno = 0;
	ok &= p_mmap(bad, pg, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED,
		     -1, 0) == MAP_FAILED && errno == EINVAL;
	errno = 0;
	ok &= p_brk(MRMGR__PATCH_BRK_PROBE) == -1 && errno == ENOMEM;
	errno = 0;
	ok &= p_shmat(-1, NULL, 0) == (void *)-1 && errno == EINVAL;
	errno = 0;
	ok &= p_shmdt(bad) == -1 && errno == EINVAL;
	errno = 0;
	ok &= ((int (*)(void *, size_t, int))P.site[MRMGR__PT_MPROTECT].fn)(
		      bad, pg, PROT_READ) == -1 && errno == EINVAL;
	if (p_sbrk) {
		errno = 0;
		ok &= p_sbrk(MRMGR__PATCH_SBRK_PROBE) == (void *)-1 && errno == ENOMEM;
	}
	seen = __atomic_load_n(&mrmgr__patch_probe_seen, __ATOMIC_SEQ_CST);
	if (mrmgr__patch_test_flags & MRMGR__PATCH_TEST_SELFTEST_FAILS)
		seen = 0;
	ok &= seen == all && (all & MRMGR__PT_ALWAYS) == MRMGR__PT_ALWAYS;

	/* End to end: the event of an munmap() reaches the queue. */
	m = ok ? p_mmap(NULL, pg, PROT_READ | PROT_WRITE,
			MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
	       : MAP_FAILED;
	if (m != MAP_FAILED) {
		from = mrmgr__icpt.tail();
		mrmgr__icpt.filter_add((uintptr_t)m, (uintptr_t)m + pg - 1);
		ok &= p_munmap(m, pg) == 0 &&
		      mrmgr__icpt.saw(from, (uintptr_t)m, (uintptr_t)m + pg - 1);
	} else {
		ok = 0;
	}

	/* glibc's own internal munmap, from free(). */
	if (ok && dlsym(RTLD_DEFAULT, "free") == (void *)mrmgr__patch_sym(im, "free", NULL)) {
		const size_t n = (size_t)33 << 20; /* over the mmap threshold's ceiling */
		char *volatile c = malloc(n);

		if (c) {
			__atomic_store_n(&mrmgr__patch_probe_seen, 0, __ATOMIC_SEQ_CST);
			from = mrmgr__icpt.tail();
			mrmgr__icpt.filter_add((uintptr_t)c, (uintptr_t)c + n - 1);
			free(c);
			seen = __atomic_load_n(&mrmgr__patch_probe_seen, __ATOMIC_SEQ_CST);
			ok &= (seen & (1u << MRMGR__PT_MUNMAP)) &&
			      mrmgr__icpt.saw(from, (uintptr_t)c, (uintptr_t)c + n - 1);
		}
	}
	__atomic_store_n(&mrmgr__patch_probe_on, 0, __ATOMIC_SEQ_CST);
	errno = saved;
	return ok ? 0 : EPROTO;
}

#endif /* MRMGR__PATCH_SUPPORTED */
