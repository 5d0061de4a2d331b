/*
 * A test-only run-time patcher of libc's memory calls, standing in for
 * UCX's libucm (bistro mode), libfabric's memhooks or a profiler: it
 * overwrites the first bytes of libc's munmap, mremap, madvise, mmap,
 * brk, sbrk, shmat and shmdt -- at the symbol's address, over any endbr64,
 * with a plain memcpy under mprotect as those libraries do -- with one of
 * the jump forms they leave there, to hooks that issue the system call
 * themselves and log what they saw. Never undone.
 *
 * SPDX-License-Identifier: MIT
 */
#ifndef MRMGR_TEST_FOREIGN_PATCHER_H
#define MRMGR_TEST_FOREIGN_PATCHER_H

#include <dlfcn.h>
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

enum fp_form {
	FP_JMP_REL32,   /* jmp rel32 to a trampoline page near libc (UCX when near) */
	FP_MOVABS_R11,  /* movabs $hook, %r11; jmp *%r11 (UCX far, libfabric) */
	FP_MOVABS_RAX,  /* movabs $hook, %rax; jmp *%rax */
};

enum { FP_MUNMAP, FP_MREMAP, FP_MADVISE, FP_MMAP, FP_BRK, FP_SBRK,
       FP_SHMAT, FP_SHMDT, FP_N };

static const char *const fp_names[FP_N] = {
	"munmap", "mremap", "madvise", "mmap", "brk", "sbrk", "shmat", "shmdt",
};

/* What the hooks saw: calls per function, and the last munmap ranges. */
#define FP_LOG 1024
static unsigned long fp_calls[FP_N];
static uintptr_t fp_unmapped[FP_LOG][2];
static unsigned int fp_nunmapped;

extern void *__curbrk;

static long fp_ret(long r)
{
	return r; /* syscall() already set errno and returned -1 */
}

static int fp_munmap(void *a, size_t l)
{
	unsigned int i = __atomic_fetch_add(&fp_nunmapped, 1, __ATOMIC_RELAXED) % FP_LOG;

	__atomic_fetch_add(&fp_calls[FP_MUNMAP], 1, __ATOMIC_RELAXED);
	fp_unmapped[i][0] = (uintptr_t)a;
	fp_unmapped[i][1] = (uintptr_t)a + l;
	return (int)fp_ret(syscall(SYS_munmap, a, l));
}

static void *fp_mremap(void *o, size_t ol, size_t nl, int f, void *d)
{
	__atomic_fetch_add(&fp_calls[FP_MREMAP], 1, __ATOMIC_RELAXED);
	return (void *)syscall(SYS_mremap, o, ol, nl, f, d);
}

static int fp_madvise(void *a, size_t l, int adv)
{
	__atomic_fetch_add(&fp_calls[FP_MADVISE], 1, __ATOMIC_RELAXED);
	return (int)syscall(SYS_madvise, a, l, adv);
}

static void *fp_mmap(void *a, size_t l, int prot, int flags, int fd, off_t off)
{
	__atomic_fetch_add(&fp_calls[FP_MMAP], 1, __ATOMIC_RELAXED);
	return (void *)syscall(SYS_mmap, a, l, prot, flags, fd, off);
}

static int fp_brk(void *a)
{
	void *r;

	__atomic_fetch_add(&fp_calls[FP_BRK], 1, __ATOMIC_RELAXED);
	r = (void *)syscall(SYS_brk, a);
	__curbrk = r;
	if ((uintptr_t)r < (uintptr_t)a) {
		errno = ENOMEM;
		return -1;
	}
	return 0;
}

/* As UCX's: the break through the system call, glibc's __curbrk kept. */
static void *fp_sbrk(intptr_t inc)
{
	uintptr_t cur = (uintptr_t)__curbrk, want;
	void *r;

	__atomic_fetch_add(&fp_calls[FP_SBRK], 1, __ATOMIC_RELAXED);
	if (!cur)
		cur = (uintptr_t)syscall(SYS_brk, 0);
	if (!inc)
		return (void *)cur;
	want = cur + (uintptr_t)inc;
	r = (void *)syscall(SYS_brk, want);
	__curbrk = r;
	if ((uintptr_t)r != want) {
		errno = ENOMEM;
		return (void *)-1;
	}
	return (void *)cur;
}

static void *fp_shmat(int id, const void *a, int flg)
{
	__atomic_fetch_add(&fp_calls[FP_SHMAT], 1, __ATOMIC_RELAXED);
	return (void *)syscall(SYS_shmat, id, a, flg);
}

static int fp_shmdt(const void *a)
{
	__atomic_fetch_add(&fp_calls[FP_SHMDT], 1, __ATOMIC_RELAXED);
	return (int)syscall(SYS_shmdt, a);
}

static void *const fp_hooks[FP_N] = {
	(void *)fp_munmap, (void *)fp_mremap, (void *)fp_madvise,
	(void *)fp_mmap, (void *)fp_brk, (void *)fp_sbrk, (void *)fp_shmat,
	(void *)fp_shmdt,
};

/* Whether the hooks saw an munmap of exactly [a, a + l). */
static int fp_saw_unmap(const void *a, size_t l)
{
	unsigned int n = __atomic_load_n(&fp_nunmapped, __ATOMIC_ACQUIRE);

	for (unsigned int i = n > FP_LOG ? n - FP_LOG : 0; i < n; i++)
		if (fp_unmapped[i % FP_LOG][0] == (uintptr_t)a &&
		    fp_unmapped[i % FP_LOG][1] == (uintptr_t)a + l)
			return 1;
	return 0;
}

static void *fp_entry(const char *name)
{
	void *libc = dlopen("libc.so.6", RTLD_LAZY | RTLD_NOLOAD);
	void *fn = libc ? dlsym(libc, name) : NULL;

	if (libc)
		dlclose(libc);
	return fn;
}

/* A page of `movabs $hook, %r11; jmp *%r11` slots within rel32 reach of
 * libc's text (the trampoline a near `jmp rel32` needs). */
static uintptr_t fp_tramp_near(uintptr_t fn)
{
	const uintptr_t pg = 4096;

	for (uintptr_t k = 1; k < 512; k++) {
		uintptr_t hint = (fn & ~(pg - 1)) - k * ((uintptr_t)1 << 24);
		void *p = mmap((void *)hint, pg, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE,
			       -1, 0);

		if (p != MAP_FAILED)
			return (uintptr_t)p;
	}
	return 0;
}

static void fp_put_movabs(unsigned char *b, int rax, uintptr_t to)
{
	b[0] = rax ? 0x48 : 0x49;
	b[1] = rax ? 0xb8 : 0xbb;
	memcpy(b + 2, &to, 8);
	if (rax) {
		b[10] = 0xff;
		b[11] = 0xe0;
	} else {
		b[10] = 0x41;
		b[11] = 0xff;
		b[12] = 0xe3;
	}
}

/*
 * Set: the patcher changes page permissions with the raw system call,
 * not through libc's mprotect (as one that writes through its own
 * writable mapping or /proc/self/mem would also bypass it): libmrmgr's
 * mprotect hook never hears of the write, only its check at a miss.
 */
static int fp_raw_mprotect;

static int fp_mprotect(void *a, size_t l, int prot)
{
	if (fp_raw_mprotect)
		return (int)fp_ret(syscall(SYS_mprotect, a, l, prot));
	return mprotect(a, l, prot);
}

/* Patch every entry with `form`; 0 or an errno. */
static int fp_install(enum fp_form form)
{
	uintptr_t tramp = 0;

#if !defined(__x86_64__)
	(void)form;
	(void)fp_put_movabs;
	(void)fp_tramp_near;
	return ENOSYS;
#else
	for (int t = 0; t < FP_N; t++) {
		unsigned char code[16];
		unsigned char *fn = fp_entry(fp_names[t]);
		uintptr_t pg = 4096, lo, len;
		size_t n;

		if (!fn)
			return ENOENT;
		if (form == FP_JMP_REL32) {
			int32_t d;

			if (!tramp && !(tramp = fp_tramp_near((uintptr_t)fn)))
				return ENOMEM;
			if (fp_mprotect((void *)tramp, pg, PROT_READ | PROT_WRITE))
				return errno;
			fp_put_movabs((unsigned char *)tramp + 16 * t, 0,
				      (uintptr_t)fp_hooks[t]);
			if (fp_mprotect((void *)tramp, pg, PROT_READ | PROT_EXEC))
				return errno;
			d = (int32_t)(intptr_t)(tramp + 16 * t - ((uintptr_t)fn + 5));
			code[0] = 0xe9;
			memcpy(code + 1, &d, 4);
			n = 5;
		} else {
			fp_put_movabs(code, form == FP_MOVABS_RAX,
				      (uintptr_t)fp_hooks[t]);
			n = form == FP_MOVABS_RAX ? 12 : 13;
		}
		lo = (uintptr_t)fn & ~(pg - 1);
		len = (((uintptr_t)fn + n - 1) | (pg - 1)) + 1 - lo;
		if (fp_mprotect((void *)lo, len, PROT_READ | PROT_WRITE | PROT_EXEC))
			return errno;
		memcpy(fn, code, n);
		if (fp_mprotect((void *)lo, len, PROT_READ | PROT_EXEC))
			return errno;
	}
	return 0;
#endif
}

#endif
