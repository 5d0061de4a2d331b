/*
 * Helpers shared by the memory-event monitor's tests (after helpers.h).
 *
 * SPDX-License-Identifier: MIT
 */
#ifndef MRMGR_TEST_MONITOR_HELPERS_H
#define MRMGR_TEST_MONITOR_HELPERS_H

#include <dlfcn.h>
#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <linux/userfaultfd.h>
#include <stddef.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>

#include "compat.h"
#include "helpers.h"

static inline struct mrmgr_monitor_info minfo(mrmgr_cache_t *c)
{
	struct mrmgr_monitor_info m;

	cr_assert_eq(mrmgr_cache_query_monitor(c, &m, sizeof(m)), 0);
	return m;
}

static inline int uffd_on(mrmgr_cache_t *c)
{
	return !!(minfo(c).sources & MRMGR_MONITOR_SRC_UFFD);
}

static inline void need_identity(void)
{
	if (!mrmgr_sim_page_identity_available())
		cr_skip_test("page identity needs /proc/self/pagemap PFNs (root)");
}

/* A container-like seccomp filter: userfaultfd(2) and /dev/userfaultfd
 * refused with EPERM, everything else allowed. For this process only. */
static inline void refuse_userfaultfd(void)
{
	struct sock_filter prog[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_userfaultfd, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_ioctl, 0, 3),
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[1])),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (uint32_t)USERFAULTFD_IOC_NEW, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	struct sock_fprog fp = {
		.len = sizeof(prog) / sizeof(prog[0]), .filter = prog,
	};

	cr_assert_eq(prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), 0);
	cr_assert_eq(prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &fp), 0);
}

/*
 * Memory a test punches holes in and maps again (test_monitor.c's
 * cases). A hole stays free until it is mapped again only if no
 * mmap(NULL) in the process (the monitor's thread, a
 * sanitizer's allocator, the test runner) takes it in between; under
 * ASan one did (EEXIST). So, as the torture does, the memory is carved
 * (MAP_FIXED) out of a PROT_NONE reservation placed low, far below the
 * libraries and the mmap area: mmap(NULL) searches top-down from below
 * the libraries and takes the first gap large enough, so the large free
 * space above is always found before a hole down here. AREA_HINT is
 * above ASan's shadow (which ends at 16 TiB on x86-64) and below the
 * program (PIE at ~85 TiB) and ASan's allocator (96 TiB). Each
 * reservation takes the next hint up: a second one in the same test at
 * the first's hint would fail and fall back to where mmap(NULL) puts it,
 * the race again. Where the kernel refuses the hints (a small address
 * space), the reservation goes where mmap(NULL) puts it, guard pages
 * still around it.
 */
#define AREA_HINT ((uintptr_t)32 << 40)
#define AREA_PAGE ((size_t)4096)
#define AREA_STEP ((uintptr_t)1 << 30)

/* len bytes of PROT_NONE (and a guard page each side), low: carve it
 * with MAP_FIXED; area_unmap() takes back what is left. */
static inline char *area_reserve(size_t len)
{
	static uintptr_t next = AREA_HINT;
	size_t rl = len + 2 * AREA_PAGE;
	char *res = MAP_FAILED;

	for (int i = 0; i < 64 && res == MAP_FAILED; i++) {
		uintptr_t at = next;

		next += (rl + AREA_STEP - 1) & ~(AREA_STEP - 1);
		res = mmap((void *)at, rl, PROT_NONE,
			   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE |
				   MAP_FIXED_NOREPLACE, -1, 0);
		if (res != MAP_FAILED && res != (char *)at) {
			munmap(res, rl); /* a kernel without the flag */
			res = MAP_FAILED;
		}
	}
	if (res == MAP_FAILED)
		res = mmap(NULL, rl, PROT_NONE,
			   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	cr_assert_neq(res, MAP_FAILED);
	return res + AREA_PAGE;
}

static inline char *area_map(size_t len, int fill)
{
	char *p = area_reserve(len);

	cr_assert_eq(mmap(p, len, PROT_READ | PROT_WRITE,
			  MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0),
		     (void *)p);
	memset(p, fill, len);
	return p;
}

static inline void area_unmap(char *p, size_t len)
{
	cr_assert_eq(munmap(p - AREA_PAGE, len + 2 * AREA_PAGE), 0);
}

/*
 * Cases that check glibc's allocator: its mmap threshold, its trims
 * (brk, madvise). A sanitizer's allocator replaces it (and refuses
 * mallopt), so there they would pass without exercising anything. Asked
 * at run time, as the library asks: a sanitizer's runtime is loaded
 * (link the suite with -ldl for glibc before 2.34).
 */
static inline const char *sanitizer_runtime(void)
{
	static const char *const runtimes[] = {
		"__asan_init", "__tsan_init", "__msan_init", "__hwasan_init",
	};

	for (size_t i = 0; i < sizeof(runtimes) / sizeof(runtimes[0]); i++)
		if (dlsym(RTLD_DEFAULT, runtimes[i]))
			return runtimes[i];
	return NULL;
}

static inline void need_glibc_malloc(void)
{
	const char *rt = sanitizer_runtime();

	if (rt)
		cr_skip_test("needs glibc's malloc (mmap threshold, trims); "
			     "a sanitizer's allocator (%s) replaces it", rt);
}

#endif
