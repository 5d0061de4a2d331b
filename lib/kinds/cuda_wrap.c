/*
 * The wrappers the redirected call sites lead to (cuda_follow.c says
 * which sites, and why call sites): each free moves the begun count,
 * calls the driver, moves the ended count; dlsym, dlvsym and
 * cuGetProcAddress(_v2) hand out a free's wrapper where the answer is
 * that function; dlclose scans first.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include "cuda_follow.h"
#include "cuda_wrap.h"
#include "got.h"

#if defined(MRMGR__R_SLOT)

typedef int cu_result;
typedef unsigned long long cu_deviceptr;

const char *const mrmgr__cuda_names[T_COUNT] = {
	"cuMemFree", "cuMemFree_v2", "cuMemFreeAsync", "cuMemFreeAsync_ptsz",
	"cuMemRelease", "cuMemUnmap", "cuMemAddressFree", "cuCtxDestroy",
	"cuCtxDestroy_v2", "cuDevicePrimaryCtxReset",
	"cuDevicePrimaryCtxReset_v2", "cuDevicePrimaryCtxRelease",
	"cuDevicePrimaryCtxRelease_v2", "cuMemPoolDestroy", "cuMemPoolTrimTo",
	"cuGetProcAddress", "cuGetProcAddress_v2", "dlsym", "dlvsym",
	"dlclose",
};

uintptr_t mrmgr__cuda_real[T_COUNT];
/* used: read by the stubs' asm below, which a link-time optimiser
 * does not see. */
__attribute__((used)) uintptr_t mrmgr__cuda_real_dlsym,
	mrmgr__cuda_real_dlvsym;
uint64_t mrmgr__cuda_begun, mrmgr__cuda_ended;

#define REAL(t, type) \
	((type)__atomic_load_n(&mrmgr__cuda_real[t], __ATOMIC_ACQUIRE))

#define W(t, fn, params, args)                                             \
	static cu_result w_##fn params                                     \
	{                                                                  \
		cu_result r;                                               \
                                                                           \
		__atomic_fetch_add(&mrmgr__cuda_begun, 1, __ATOMIC_ACQ_REL); \
		r = REAL(t, cu_result (*) params) args;                    \
		__atomic_fetch_add(&mrmgr__cuda_ended, 1, __ATOMIC_ACQ_REL); \
		return r;                                                  \
	}
W(T_FREE, cuMemFree, (unsigned int p), (p))
W(T_FREE_V2, cuMemFree_v2, (cu_deviceptr p), (p))
W(T_FREE_ASYNC, cuMemFreeAsync, (cu_deviceptr p, void *s), (p, s))
W(T_FREE_ASYNC_PTSZ, cuMemFreeAsync_ptsz, (cu_deviceptr p, void *s), (p, s))
W(T_RELEASE, cuMemRelease, (unsigned long long h), (h))
W(T_UNMAP, cuMemUnmap, (cu_deviceptr p, size_t n), (p, n))
W(T_ADDR_FREE, cuMemAddressFree, (cu_deviceptr p, size_t n), (p, n))
W(T_CTX_DESTROY, cuCtxDestroy, (void *c), (c))
W(T_CTX_DESTROY_V2, cuCtxDestroy_v2, (void *c), (c))
W(T_PCTX_RESET, cuDevicePrimaryCtxReset, (int d), (d))
W(T_PCTX_RESET_V2, cuDevicePrimaryCtxReset_v2, (int d), (d))
W(T_PCTX_RELEASE, cuDevicePrimaryCtxRelease, (int d), (d))
W(T_PCTX_RELEASE_V2, cuDevicePrimaryCtxRelease_v2, (int d), (d))
W(T_POOL_DESTROY, cuMemPoolDestroy, (void *p), (p))
W(T_POOL_TRIM, cuMemPoolTrimTo, (void *p, size_t n), (p, n))

/* A pointer handed out for sym: our wrapper when it is a followed
 * function's definition. A followed name at an address we do not know
 * (a driver whose table is not its exports) cannot be followed: stop. */
static void *swap(const char *sym, void *p);

static cu_result w_cuGetProcAddress(const char *s, void **pfn, int ver,
				    unsigned long long flags)
{
	cu_result r = REAL(T_GPA, cu_result (*)(const char *, void **, int,
						unsigned long long))(s, pfn,
								     ver, flags);

	if (r == 0 && pfn)
		*pfn = swap(s, *pfn);
	return r;
}

static cu_result w_cuGetProcAddress_v2(const char *s, void **pfn, int ver,
				       unsigned long long flags, void *status)
{
	cu_result r = REAL(T_GPA_V2, cu_result (*)(const char *, void **, int,
						   unsigned long long,
						   void *))(s, pfn, ver, flags,
							    status);

	if (r == 0 && pfn)
		*pfn = swap(s, *pfn);
	return r;
}

/* dlsym and dlvsym with any handle but RTLD_NEXT (the stubs send that
 * one straight to libc's, whose answer depends on its caller's address:
 * a pointer looked up that way is not swapped, doc/device-memory.md). */
__attribute__((visibility("hidden"), used)) void *
mrmgr__cuda_dlsym_c(void *h, const char *s);
void *mrmgr__cuda_dlsym_c(void *h, const char *s)
{
	void *p = REAL(T_DLSYM, void *(*)(void *, const char *))(h, s);

	return p ? swap(s, p) : p;
}

__attribute__((visibility("hidden"), used)) void *
mrmgr__cuda_dlvsym_c(void *h, const char *s, const char *v);
void *mrmgr__cuda_dlvsym_c(void *h, const char *s, const char *v)
{
	void *p = REAL(T_DLVSYM, void *(*)(void *, const char *,
					   const char *))(h, s, v);

	return p ? swap(s, p) : p;
}

/* An object loaded since the last scan, which freed through its own
 * call sites, may be unloaded before any get notices it (its successor
 * gone again): the scan comes first. dlclose() does not look at its
 * caller. */
static int w_dlclose(void *h)
{
	mrmgr__cuda_follow_recheck();
	return REAL(T_DLCLOSE, int (*)(void *))(h);
}

/* The wrappers: a tail jump keeps the caller's return address, which
 * libc reads for RTLD_NEXT. */
__attribute__((visibility("hidden"))) void mrmgr__cuda_dlsym_stub(void);
__attribute__((visibility("hidden"))) void mrmgr__cuda_dlvsym_stub(void);
#if defined(__x86_64__)
#define STUB(name, c, real)                                                  \
	".globl " name "\n"                                                  \
	".hidden " name "\n"                                                 \
	".type " name ", @function\n"                                        \
	name ":\n"                                                           \
	"	.byte 0xf3, 0x0f, 0x1e, 0xfa\n" /* endbr64 */                \
	"	cmpq $-1, %rdi\n"                                            \
	"	je 1f\n"                                                      \
	"	jmp " c "\n"                                                 \
	"1:	jmp *" real "(%rip)\n"                                       \
	".size " name ", .-" name "\n"
#else
#define STUB(name, c, real)                                                  \
	".globl " name "\n"                                                  \
	".hidden " name "\n"                                                 \
	".type " name ", %function\n"                                        \
	".p2align 2\n"                                                       \
	name ":\n"                                                           \
	"	hint #34\n" /* bti c */                                      \
	"	cmn x0, #1\n"                                                \
	"	b.eq 1f\n"                                                    \
	"	b " c "\n"                                                   \
	"1:	adrp x16, " real "\n"                                        \
	"	ldr x16, [x16, #:lo12:" real "]\n"                           \
	"	br x16\n"                                                     \
	".size " name ", .-" name "\n"
#endif
__asm__(".text\n"
	STUB("mrmgr__cuda_dlsym_stub", "mrmgr__cuda_dlsym_c",
	     "mrmgr__cuda_real_dlsym")
	STUB("mrmgr__cuda_dlvsym_stub", "mrmgr__cuda_dlvsym_c",
	     "mrmgr__cuda_real_dlvsym"));

const uintptr_t mrmgr__cuda_wrapper[T_COUNT] = {
	[T_FREE] = (uintptr_t)w_cuMemFree,
	[T_FREE_V2] = (uintptr_t)w_cuMemFree_v2,
	[T_FREE_ASYNC] = (uintptr_t)w_cuMemFreeAsync,
	[T_FREE_ASYNC_PTSZ] = (uintptr_t)w_cuMemFreeAsync_ptsz,
	[T_RELEASE] = (uintptr_t)w_cuMemRelease,
	[T_UNMAP] = (uintptr_t)w_cuMemUnmap,
	[T_ADDR_FREE] = (uintptr_t)w_cuMemAddressFree,
	[T_CTX_DESTROY] = (uintptr_t)w_cuCtxDestroy,
	[T_CTX_DESTROY_V2] = (uintptr_t)w_cuCtxDestroy_v2,
	[T_PCTX_RESET] = (uintptr_t)w_cuDevicePrimaryCtxReset,
	[T_PCTX_RESET_V2] = (uintptr_t)w_cuDevicePrimaryCtxReset_v2,
	[T_PCTX_RELEASE] = (uintptr_t)w_cuDevicePrimaryCtxRelease,
	[T_PCTX_RELEASE_V2] = (uintptr_t)w_cuDevicePrimaryCtxRelease_v2,
	[T_POOL_DESTROY] = (uintptr_t)w_cuMemPoolDestroy,
	[T_POOL_TRIM] = (uintptr_t)w_cuMemPoolTrimTo,
	[T_GPA] = (uintptr_t)w_cuGetProcAddress,
	[T_GPA_V2] = (uintptr_t)w_cuGetProcAddress_v2,
	[T_DLSYM] = (uintptr_t)mrmgr__cuda_dlsym_stub,
	[T_DLVSYM] = (uintptr_t)mrmgr__cuda_dlvsym_stub,
	[T_DLCLOSE] = (uintptr_t)w_dlclose,
};

/* cuGetProcAddress is asked for base names ("cuMemFree" for
 * cuMemFree_v2 and _ptsz): does sym name a function of ours? */
static int family(const char *sym)
{
	size_t l = strlen(sym);

	for (int t = 0; t < T_DLSYM; t++)
		if (!strncmp(mrmgr__cuda_names[t], sym, l) &&
		    (!mrmgr__cuda_names[t][l] || !strcmp(mrmgr__cuda_names[t] + l, "_v2") ||
		     !strcmp(mrmgr__cuda_names[t] + l, "_ptsz")))
			return 1;
	return 0;
}

static void *swap(const char *sym, void *p)
{
	uintptr_t v = (uintptr_t)p;

	for (int t = 0; t < T_DLSYM; t++) {
		if (v == mrmgr__cuda_wrapper[t])
			return p;
		if (mrmgr__cuda_real[t] && v == mrmgr__cuda_real[t])
			return (void *)mrmgr__cuda_wrapper[t];
	}
	if (sym && sym[0] == 'c' && sym[1] == 'u' && family(sym) &&
	    __atomic_load_n(mrmgr__cuda_follow_on(), __ATOMIC_ACQUIRE)) {
		char m[160];

		snprintf(m, sizeof(m), "%.64s was handed out at an address "
			 "that is not libcuda's exported function", sym);
		mrmgr__cuda_stop(m);
	}
	return p;
}


#else
typedef int mrmgr__cuda_wrap_none; /* not an empty translation unit */
#endif /* MRMGR__R_SLOT */
