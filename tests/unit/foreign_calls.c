/*
 * A library that defines the memory calls itself and enters the kernel
 * with system calls of its own, as gperftools' tcmalloc does (its mmap,
 * mmap64, munmap, mremap, sbrk), and the rest of the calls that release
 * pages (madvise, posix_madvise, brk, shmat, shmdt) as a wrapper library
 * could: linked ahead of libc, every call of the program binds here and
 * libc's patched entries never run.
 * test_monitor_follow.c links it first; built again as
 * libforeign_late.so (-DFOREIGN_LATE: munmap only, and late_munmap()
 * calling it through its own call site), which that test loads later
 * with dlopen(RTLD_DEEPBIND) so that its calls bind to its own munmap.
 *
 * SPDX-License-Identifier: MIT
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/shm.h>
#include <stddef.h>
#include <sys/syscall.h>
#include <unistd.h>

/* Calls that came through here. The late library keeps its own count,
 * hidden: one global of the same name in two objects is an ODR violation
 * to ASan (which aborts), and a late library loaded without
 * RTLD_DEEPBIND would otherwise count into the first one's. */
#ifdef FOREIGN_LATE
static unsigned long foreign_calls_made;
#else
extern unsigned long foreign_calls_made;
unsigned long foreign_calls_made;
#endif
int late_munmap(void *a, size_t l);

static long raw(long n, long a, long b, long c, long d, long e, long f)
{
	long r;
#if defined(__x86_64__)
	register long r10 __asm__("r10") = d;
	register long r8 __asm__("r8") = e;
	register long r9 __asm__("r9") = f;

	__asm__ volatile("syscall"
			 : "=a"(r)
			 : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
			 : "rcx", "r11", "memory");
#elif defined(__aarch64__)
	register long x8 __asm__("x8") = n;
	register long x0 __asm__("x0") = a;
	register long x1 __asm__("x1") = b;
	register long x2 __asm__("x2") = c;
	register long x3 __asm__("x3") = d;
	register long x4 __asm__("x4") = e;
	register long x5 __asm__("x5") = f;

	__asm__ volatile("svc #0"
			 : "+r"(x0)
			 : "r"(x8), "r"(x1), "r"(x2), "r"(x3), "r"(x4), "r"(x5)
			 : "memory");
	r = x0;
#else
#error "x86-64 or aarch64"
#endif
	__atomic_fetch_add(&foreign_calls_made, 1, __ATOMIC_RELAXED);
	return r;
}

static long ret(long r)
{
	if ((unsigned long)r > -4096UL) {
		errno = (int)-r;
		return -1;
	}
	return r;
}

int munmap(void *a, size_t l)
{
	return (int)ret(raw(SYS_munmap, (long)a, (long)l, 0, 0, 0, 0));
}

#ifdef FOREIGN_LATE
/* Through this object's own call site (bound here under RTLD_DEEPBIND). */
int late_munmap(void *a, size_t l)
{
	int (*volatile through)(void *, size_t) = munmap;

	return through(a, l);
}
#else
void *mmap(void *a, size_t l, int prot, int flags, int fd, off_t off)
{
	return (void *)ret(raw(SYS_mmap, (long)a, (long)l, prot, flags, fd, off));
}

void *mmap64(void *a, size_t l, int prot, int flags, int fd, off_t off)
{
	return mmap(a, l, prot, flags, fd, off);
}

void *mremap(void *old, size_t ol, size_t nl, int flags, ...)
{
	void *dest = NULL;
	va_list ap;

	if (flags & MREMAP_FIXED) {
		va_start(ap, flags);
		dest = va_arg(ap, void *);
		va_end(ap);
	}
	return (void *)ret(raw(SYS_mremap, (long)old, (long)ol, (long)nl, flags,
			       (long)dest, 0));
}

/* A break of its own, as tcmalloc's sbrk keeps. */
void *sbrk(intptr_t inc)
{
	static uintptr_t cur;
	uintptr_t old, now;

	if (!cur)
		cur = (uintptr_t)raw(SYS_brk, 0, 0, 0, 0, 0, 0);
	old = cur;
	if (!inc)
		return (void *)old;
	now = (uintptr_t)raw(SYS_brk, (long)(old + (uintptr_t)inc), 0, 0, 0, 0, 0);
	if (now != old + (uintptr_t)inc) {
		errno = ENOMEM;
		return (void *)-1;
	}
	cur = now;
	return (void *)old;
}

int madvise(void *a, size_t l, int adv)
{
	return (int)ret(raw(SYS_madvise, (long)a, (long)l, adv, 0, 0, 0));
}

/* Unlike glibc's (which ignores POSIX_MADV_DONTNEED), this one discards:
 * the advice goes to the kernel as it is. */
int posix_madvise(void *a, size_t l, int adv)
{
	long r = raw(SYS_madvise, (long)a, (long)l, adv, 0, 0, 0);

	return r < 0 && r > -4096 ? (int)-r : 0;
}

int brk(void *a)
{
	long now = raw(SYS_brk, (long)a, 0, 0, 0, 0, 0);

	if (now != (long)a) {
		errno = ENOMEM;
		return -1;
	}
	return 0;
}

void *shmat(int id, const void *a, int flg)
{
	return (void *)ret(raw(SYS_shmat, id, (long)a, flg, 0, 0, 0));
}

int shmdt(const void *a)
{
	return (int)ret(raw(SYS_shmdt, (long)a, 0, 0, 0, 0, 0));
}
#endif
