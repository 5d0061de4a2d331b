/*
 * The patch engine on aarch64, under qemu-user with Debian's arm64 glibc
 * (`make check-aarch64`): the real patch.c, patch_takeover.c,
 * patch_hooks.c and patch_aarch64.c (lib/intercept), with a sink of its
 * own (intercept.h) in place of the monitor's queue: a small log of
 * reported ranges. It installs (prologue recognition, trampoline, the
 * self-test), then checks that each call reports its range, that errno
 * and glibc's break come out right, that free() of an mmap'd chunk is
 * seen, and that unpatching and patching again works. Then the entry
 * shapes of -mbranch-protection=standard builds (entry_shapes_aarch64.S:
 * bti c, paciasp, a PC-relative first instruction; the program is
 * BTI-marked, so qemu guards its pages) patched while threads call them
 * indirectly.
 *
 * SPDX-License-Identifier: MIT
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/shm.h>
#include <sys/auxv.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "log.h"
#include "intercept.h"
#include "patch.h"

/* ------------------------------------------------------------ stubs */

#define NLOG 4096
static uint64_t log_s[NLOG], log_l[NLOG];
static unsigned int nlog;

static void log_change_begin(uint64_t s, uint64_t l)
{
	unsigned int i = __atomic_fetch_add(&nlog, 1, __ATOMIC_RELAXED) % NLOG;

	log_s[i] = s;
	log_l[i] = l;
}

static void log_change_end(uint64_t s, uint64_t l)
{
	log_change_begin(s, l);
}

static unsigned int pushes_all;

static void log_push(uint64_t s, uint64_t l)
{
	if (s == 0 && l == UINT64_MAX)
		pushes_all++;
	log_change_begin(s, l);
}

static uint64_t log_queue_tail(void)
{
	return nlog;
}

static void log_filter_add(uint64_t s, uint64_t l)
{
	(void)s;
	(void)l;
}

static int log_queue_saw(uint64_t from, uint64_t s, uint64_t l)
{
	for (uint64_t i = from; i < nlog; i++)
		if (log_s[i % NLOG] <= l && log_l[i % NLOG] >= s)
			return 1;
	return 0;
}

static const struct mrmgr__icpt_sink sink = {
	.begin = log_change_begin, .end = log_change_end, .push = log_push,
	.filter_add = log_filter_add, .tail = log_queue_tail,
	.saw = log_queue_saw,
};

int mrmgr__log_max = -1; /* log.h: every line is written */

void mrmgr__log(enum mrmgr_log_level lv, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fprintf(stderr, "[%d] ", (int)lv);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
}

/* ------------------------------------------------------------ checks */

static int fails;
#define CHECK(c)                                                       \
	do {                                                           \
		if (!(c)) {                                            \
			printf("FAIL line %d: %s\n", __LINE__, #c);    \
			fails++;                                       \
		}                                                      \
	} while (0)

static uint64_t mark;
static int saw(const void *p, size_t l)
{
	return log_queue_saw(mark, (uintptr_t)p, (uintptr_t)p + l - 1);
}

/* ------------------------------------------------------------ BTI */

/*
 * Whether the page holding at is guarded (PROT_BTI): an indirect call to
 * at, which must not be a landing pad, faults (SIGILL) only there. What
 * runs when it does not fault must be harmless with (a0, a1): callers
 * pick a point inside munmap's path (munmap(NULL, 0): EINVAL).
 * /proc/self/maps does not show the bit, so this is how it is read back.
 */
static sigjmp_buf bti_jb;
static void bti_ill(int sig)
{
	(void)sig;
	siglongjmp(bti_jb, 1);
}

static int guarded_at(uintptr_t at, long a0, long a1)
{
	struct sigaction sa = { .sa_handler = bti_ill }, old;
	long (*volatile f)(long, long) = (long (*)(long, long))at;
	int g = 0;

	sigaction(SIGILL, &sa, &old);
	if (sigsetjmp(bti_jb, 1))
		g = 1;
	else
		(void)f(a0, a1);
	sigaction(SIGILL, &old, NULL);
	return g;
}

static int cpu_bti(void)
{
	return !!(getauxval(AT_HWCAP2) & (1ul << 17));
}

/* libc's pages keep the loader's PROT_BTI through patching, and the
 * trampoline page is guarded with a landing pad at each slot's start. */
static void check_bti_kept(int before)
{
	uintptr_t at = (uintptr_t)munmap + 4, slot;
	unsigned int len;
	int after = guarded_at(at, 0, 0);
	uint32_t first;

	printf("libc's munmap page: PROT_BTI %s before patching, %s after\n",
	       before ? "on" : "off", after ? "on" : "off");
	CHECK(after == before);
	CHECK(guarded_at((uintptr_t)madvise + 4, 0, 0) == before);
	/* The entry's jump: after a bti (trixie), at the entry (Debian
	 * 12's NOP is replaced). */
	memcpy(&first, (const void *)munmap, 4);
	slot = mrmgr__patch_arch_foreign((first & 0xffffff3fu) == 0xd503241fu
						 ? at : at - 4, &len);
	CHECK(slot != 0);
	if (!slot)
		return;
	printf("trampoline slot %#lx: %s\n", (unsigned long)slot,
	       guarded_at(slot + 4, 0, 0) ? "guarded" : "not guarded");
	CHECK(guarded_at(slot + 4, 0, 0) == cpu_bti());
	CHECK(guarded_at(slot, 0, 0) == 0); /* bti jc lands */
}

/* ------------------------------------------------------------ others */

/* The jump forms other patchers leave, decoded from a buffer. */
static void check_forms(void)
{
	static uint32_t buf[2048] __attribute__((aligned(4096)));
	uintptr_t a = (uintptr_t)buf, x = (uintptr_t)0x0000ffffa1b2c3d4ull;
	unsigned int len;

	buf[0] = 0x14000000u | (0x40u & 0x03ffffffu); /* b .+0x100 */
	CHECK(mrmgr__patch_arch_foreign(a, &len) == a + 0x100 && len == 4);
	buf[0] = 0x17ffffffu; /* b .-4 */
	CHECK(mrmgr__patch_arch_foreign(a, &len) == a - 4);
	buf[0] = 0x58000050u; /* ldr x16, #8 */
	buf[1] = 0xd61f0200u; /* br x16 */
	memcpy(&buf[2], &x, 8);
	CHECK(mrmgr__patch_arch_foreign(a, &len) == x);
	buf[1] = 0xd61f0220u; /* br x17: not the loaded register */
	CHECK(mrmgr__patch_arch_foreign(a, &len) == 0);
	/* movz x15, #h3, lsl #48; movk x15 #h2..#h0; br x15 (UCX, libfabric) */
	buf[0] = 0xd2e0000fu | (uint32_t)((x >> 48) & 0xffff) << 5;
	buf[1] = 0xf2c0000fu | (uint32_t)((x >> 32) & 0xffff) << 5;
	buf[2] = 0xf2a0000fu | (uint32_t)((x >> 16) & 0xffff) << 5;
	buf[3] = 0xf280000fu | (uint32_t)(x & 0xffff) << 5;
	buf[4] = 0xd61f01e0u; /* br x15 */
	CHECK(mrmgr__patch_arch_foreign(a, &len) == x);
	buf[4] = 0xd503201fu; /* nop instead of br */
	CHECK(mrmgr__patch_arch_foreign(a, &len) == 0);
	/* adrp x16, .+1 page; add x16, x16, #0x123; br x16 */
	buf[0] = 0x90000010u | (1u << 29);
	buf[1] = 0x91000000u | (0x123u << 10) | (16u << 5) | 16u;
	buf[2] = 0xd61f0200u;
	CHECK(mrmgr__patch_arch_foreign(a, &len) == a + 4096 + 0x123);
	/* adrp x16, .+1 page; ldr x16, [x16, #8]; br x16 */
	buf[1] = 0xf9400000u | (1u << 10) | (16u << 5) | 16u;
	memcpy(&buf[1024 + 2], &x, 8);
	CHECK(mrmgr__patch_arch_foreign(a, &len) == x);
	buf[0] = 0xd503201fu; /* glibc's munmap starts with a nop */
	CHECK(mrmgr__patch_arch_foreign(a, &len) == 0);
}

static unsigned long fh_calls;
static int fh_munmap(void *a, size_t l)
{
	fh_calls++;
	return (int)syscall(SYS_munmap, a, l);
}

/* Another patcher overwrites munmap after us, the way UCX's bistro and
 * libfabric's memhooks do on arm64: movz/movk x15 + br x15 over the
 * entry. The next check notices and chains on top. */
static void check_overwritten(void)
{
	const size_t pg = 4096;
	uintptr_t fn = (uintptr_t)dlsym(RTLD_NEXT, "munmap"), x = (uintptr_t)fh_munmap;
	uintptr_t lo = fn & ~(uintptr_t)(pg - 1);
	uint32_t code[5] = {
		0xd2e0000fu | (uint32_t)((x >> 48) & 0xffff) << 5,
		0xf2c0000fu | (uint32_t)((x >> 32) & 0xffff) << 5,
		0xf2a0000fu | (uint32_t)((x >> 16) & 0xffff) << 5,
		0xf280000fu | (uint32_t)(x & 0xffff) << 5,
		0xd61f01e0u,
	};
	unsigned long calls;
	char *p;

	if (!fn)
		fn = (uintptr_t)munmap;
	lo = fn & ~(uintptr_t)(pg - 1);
	CHECK(mprotect((void *)lo, 2 * pg, PROT_READ | PROT_WRITE | PROT_EXEC) == 0);
	memcpy((void *)fn, code, sizeof(code));
	__builtin___clear_cache((char *)fn, (char *)fn + sizeof(code));
	CHECK(mprotect((void *)lo, 2 * pg, PROT_READ | PROT_EXEC) == 0);
	p = mmap(NULL, 2 * pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	mark = nlog;
	CHECK(munmap(p, pg) == 0);
	CHECK(fh_calls == 1);
	CHECK(!saw(p, pg)); /* bypassed */
	CHECK(mrmgr__patch_start() == 0); /* notices */
	CHECK(mrmgr__patch_overwrites() == 1);
	CHECK(pushes_all >= 1);
	CHECK(mrmgr__patch_chained() & (1u << MRMGR__PT_MUNMAP));
	calls = fh_calls; /* the self-test went through it too */
	CHECK(calls > 1);
	mark = nlog;
	CHECK(munmap(p + pg, pg) == 0);
	CHECK(fh_calls == calls + 1);
	CHECK(saw(p + pg, pg));
	errno = 0;
	CHECK(munmap(p + 1, pg) == -1 && errno == EINVAL);
	CHECK(mrmgr__patch_start() == 0);
	CHECK(mrmgr__patch_overwrites() == 1); /* nothing new */
}

/* ------------------------------------------------------------ shapes */

typedef long (*shape_fn)(long, long, long, long, long, long);
long shape_bti_movnr(long, long, long, long, long, long);
long shape_paciasp_sub(long, long, long, long, long, long);
long shape_bti_tst(long, long, long, long, long, long);
long shape_bti_adrp(long, long, long, long, long, long);
long shape_refused_b_first(long, long, long, long, long, long);
long shape_refused_loop(long, long, long, long, long, long);

#define SH_THREADS 4
#define SH_CALLS 2000
#define SH_HOOKED 4242

static unsigned long sh_hook_calls;
static long sh_hook(void)
{
	__atomic_fetch_add(&sh_hook_calls, 1, __ATOMIC_RELAXED);
	return SH_HOOKED;
}

static shape_fn volatile sh_fn; /* called indirectly: blr, a BTI check */
static long sh_args[6];
static int sh_patched;
static unsigned long sh_before[SH_THREADS], sh_after[SH_THREADS],
	sh_bad[SH_THREADS], sh_seen[SH_THREADS];

static void *sh_caller(void *arg)
{
	size_t k = (size_t)(uintptr_t)arg;

	while (__atomic_load_n(&sh_after[k], __ATOMIC_RELAXED) < SH_CALLS) {
		int was = __atomic_load_n(&sh_patched, __ATOMIC_ACQUIRE);
		long r = sh_fn(sh_args[0], sh_args[1], sh_args[2], sh_args[3],
			       sh_args[4], sh_args[5]);

		if (r == SH_HOOKED)
			sh_seen[k]++;
		else if (was || r != -EINVAL)
			sh_bad[k]++;
		if (was)
			__atomic_store_n(&sh_after[k], sh_after[k] + 1, __ATOMIC_RELAXED);
		else
			__atomic_store_n(&sh_before[k], sh_before[k] + 1, __ATOMIC_RELAXED);
	}
	return NULL;
}

/*
 * Guard the shapes' pages as a BTI-enabled loader would (Debian 12's
 * ld.so, built without BTI support, does not): an indirect call that
 * lands on anything but bti/paciasp then faults. Once, before the first
 * patch: the engine keeps PROT_BTI on a BTI-marked object's pages
 * (patch_bti.c), which each shape checks after its patch.
 */
static int bti_guard(void)
{
	uintptr_t lo = (uintptr_t)shape_bti_movnr & ~(uintptr_t)4095;
	uintptr_t hi = ((uintptr_t)shape_refused_loop + 4096) & ~(uintptr_t)4095;

	if (!(getauxval(AT_HWCAP2) & (1ul << 17)))
		return 0; /* no BTI in this CPU */
	CHECK(mprotect((void *)lo, hi - lo, PROT_READ | PROT_EXEC | 0x10) == 0);
	return 1;
}

/* Patch fn (system call nr) while threads call it with a[]: 0, or the
 * engine's refusal. */
static int shape(const char *name, shape_fn fn, long nr, long a0, long a1,
		 long a2, long a5)
{
	pthread_t th[SH_THREADS];
	struct mrmgr__patch_site s;
	unsigned long seen = 0, bad = 0;
	int err;

	sh_fn = fn;
	sh_args[0] = a0, sh_args[1] = a1, sh_args[2] = a2, sh_args[5] = a5;
	sh_patched = 0;
	sh_hook_calls = 0;
	memset(sh_before, 0, sizeof(sh_before));
	memset(sh_after, 0, sizeof(sh_after));
	memset(sh_bad, 0, sizeof(sh_bad));
	memset(sh_seen, 0, sizeof(sh_seen));
	CHECK(sh_fn(a0, a1, a2, 0, 0, a5) == -EINVAL);
	for (size_t k = 0; k < SH_THREADS; k++)
		pthread_create(&th[k], NULL, sh_caller, (void *)k);
	for (size_t k = 0; k < SH_THREADS; k++)
		while (__atomic_load_n(&sh_before[k], __ATOMIC_RELAXED) < 100)
			sched_yield();
	err = mrmgr__patch_test_site((void *)fn, nr, (void (*)(void))sh_hook, &s);
	if (!err)
		__atomic_store_n(&sh_patched, 1, __ATOMIC_RELEASE);
	else
		for (size_t k = 0; k < SH_THREADS; k++)
			__atomic_store_n(&sh_after[k], SH_CALLS, __ATOMIC_RELAXED);
	for (size_t k = 0; k < SH_THREADS; k++) {
		pthread_join(th[k], NULL);
		seen += sh_seen[k];
		bad += sh_bad[k];
	}
	printf("shape %s: %s", name, err ? strerror(err) : "patched");
	if (!err)
		printf(" at entry+%ld, %lu hooked calls, %lu wrong\n",
		       (long)(s.at - s.fn), seen, bad);
	else
		printf("\n");
	if (!err) {
		CHECK(bad == 0);
		CHECK(seen == sh_hook_calls);
		CHECK(seen >= (unsigned long)SH_THREADS * SH_CALLS);
		CHECK(sh_fn(a0, a1, a2, 0, 0, a5) == SH_HOOKED);
		/* The engine kept the guard (the object is BTI-marked): an
		 * indirect call past the landing pad still faults. */
		CHECK(guarded_at(s.at, 0, 0) == cpu_bti());
	}
	return err;
}

static void check_shapes(void)
{
	if (bti_guard())
		printf("shapes' pages guarded (PROT_BTI)\n");
	CHECK(shape("bti c; mov x8,#NR", shape_bti_movnr, 215, 1, 4096, 0, 0) == 0);
	CHECK(shape("paciasp; sub sp (2.41 mremap)", shape_paciasp_sub, 216, 1,
		    4096, 4096, 0) == 0);
	CHECK(shape("bti c; tst x5,#0xfff (2.41 mmap)", shape_bti_tst, 222, 0,
		    4096, 0, 1) == 0);
	CHECK(shape("bti c; adrp", shape_bti_adrp, 233, 1, 4096, 4, 0) == 0);
	CHECK(shape("bti c; cbz (refused)", shape_refused_b_first, 215, 1, 4096, 0,
		    0) == ENOEXEC);
	CHECK(shape("a branch back to the entry (refused)", shape_refused_loop,
		    215, 1, 4096, 0, 0) == ENOEXEC);
}

int main(void)
{
	const size_t pg = 4096;
	char *p, *b0, *q;
	uintptr_t cu;
	int err, id;

	int libc_bti = guarded_at((uintptr_t)munmap + 4, 0, 0);

	mrmgr__icpt_bind(&sink);
	err = mrmgr__patch_start();
	printf("install: %s, targets %#x\n", strerror(err), mrmgr__patch_targets());
	CHECK(err == 0);
	CHECK(mrmgr__patch_targets() == MRMGR__PT_ALWAYS);
	CHECK(mrmgr__patch_chained() == 0);
	check_forms();
	check_bti_kept(libc_bti);

	p = mmap(NULL, 4 * pg, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK(p != MAP_FAILED);
	mark = nlog;
	CHECK(munmap(p + pg, pg) == 0);
	CHECK(saw(p + pg, pg));
	CHECK(!saw(p, pg));
	mark = nlog;
	CHECK(madvise(p, pg, MADV_DONTNEED) == 0);
	CHECK(saw(p, pg));
	mark = nlog;
	CHECK(mremap(p + 2 * pg, 2 * pg, pg, 0) == p + 2 * pg);
	CHECK(saw(p + 3 * pg, pg));
	CHECK(!saw(p + 2 * pg, pg));
	mark = nlog;
	CHECK(mmap(p, pg, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED,
		   -1, 0) == p);
	CHECK(saw(p, pg));
	errno = 0;
	CHECK(munmap(p + 1, pg) == -1);
	CHECK(errno == EINVAL);
	errno = 0;
	CHECK(mmap(NULL, pg, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 1) ==
	      MAP_FAILED);
	CHECK(errno == EINVAL);

	b0 = sbrk(0);
	CHECK(sbrk(65536) == b0);
	memset(b0, 1, 65536);
	mark = nlog;
	CHECK(sbrk(-65536) == b0 + 65536);
	CHECK(saw(b0, 65536));
	CHECK(sbrk(0) == b0);
	CHECK((char *)syscall(SYS_brk, 0) == b0);

	/* Larger than the heap's top can hold: glibc 2.43 on aarch64 grows
	 * the heap in 2 MiB (THP) steps, and a 1 MiB block came from its
	 * top, which free() does not unmap. */
	mallopt(M_MMAP_THRESHOLD, 128 * 1024);
	q = malloc(8 << 20);
	CHECK(q != NULL);
	cu = (uintptr_t)q;
	memset(q, 1, 8 << 20);
	mark = nlog;
	free(q);
	CHECK(log_queue_saw(mark, cu, cu + (8 << 20) - 1));

	id = shmget(IPC_PRIVATE, 4 * pg, IPC_CREAT | 0600);
	if (id >= 0) {
		q = mmap(NULL, 4 * pg, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		mark = nlog;
		CHECK(shmat(id, q, SHM_REMAP) == q);
		CHECK(saw(q, 4 * pg));
		mark = nlog;
		CHECK(shmdt(q) == 0);
		CHECK(saw(q, 4 * pg));
		shmctl(id, IPC_RMID, NULL);
	}

	CHECK(mrmgr__patch_test_toggle() == 0);
	mark = nlog;
	CHECK(munmap(p, pg) == 0);
	CHECK(saw(p, pg));
	check_bti_kept(libc_bti); /* unpatched and patched again */
	check_overwritten();
	check_shapes();
	printf("patch_aarch64: %s, %d check(s) failed\n", fails ? "FAILED" : "ok",
	       fails);
	return fails != 0;
}
