/*
 * The patch source: libc's own entry points redirected to our hooks in
 * the running process, so glibc's internal calls (free() of an mmap'd
 * chunk, an arena heap trimmed or deleted, malloc's brk) reach the
 * monitor before the kernel releases the pages, with no LD_PRELOAD and no
 * change to the program. See doc/monitor.md, "The patch source".
 *
 *   patch.c         finding the bodies, the install, the self-test, the
 *                   fallback; chaining after another patcher found there
 *   patch_takeover.c another patcher writing over our jumps later: noticed
 *                   (on a miss, on mprotect), every cache invalidated,
 *                   chained on top again
 *   patch_image.c   libc's symbol table, executable addresses
 *   patch_hooks.c   the hooks: issue the system call, report before and
 *                   after (patch_hooks.h: what the two hook files share)
 *   patch_hooks_chain.c  the same around another patcher's code (chained),
 *                   and around the memory calls other objects define
 *   patch_x86_64.c  recognising a prologue, encoding the jump, the atomic store
 *   patch_aarch64.c the same for aarch64
 *
 * SPDX-License-Identifier: MIT
 */
#ifndef MRMGR__PATCH_H
#define MRMGR__PATCH_H

#include <stddef.h>
#include <stdint.h>

#include "compiler.h"
#include "intercept.h"

/* The functions redirected, in install order. */
enum mrmgr__patch_target {
	MRMGR__PT_MUNMAP = 0,
	MRMGR__PT_MREMAP,
	MRMGR__PT_MADVISE,
	MRMGR__PT_MMAP,
	MRMGR__PT_BRK,
	MRMGR__PT_SHMAT,
	MRMGR__PT_SHMDT,
	/* Only when another patcher redirected sbrk itself (its body then no
	 * longer reaches brk's): chained like the others. */
	MRMGR__PT_SBRK,
	/* Reports nothing: notices another patcher writing over our jumps
	 * (it makes libc's text writable, then not, with mprotect()). */
	MRMGR__PT_MPROTECT,
	MRMGR__PT_COUNT
};
/* The targets redirected in every install. */
#define MRMGR__PT_ALWAYS \
	(((1u << MRMGR__PT_SBRK) - 1) | (1u << MRMGR__PT_MPROTECT))

/* ------------------------------------------------------------ source */

/* Where the engine is in starting (patch_state() says it to its user). */
enum mrmgr__patch_state { PATCH_UNTRIED = 0, PATCH_ACTIVE, PATCH_FAILED };

/* Test hooks (unit tests set them before the first cache). */
enum mrmgr__patch_test_flags {
	MRMGR__PATCH_TEST_UNKNOWN_PROLOGUE = 1u << 0, /* recognise nothing */
	MRMGR__PATCH_TEST_SELFTEST_FAILS = 1u << 1,   /* self-test sees nothing */
	MRMGR__PATCH_TEST_IGNORE_TOOLS = 1u << 2,     /* patch under sanitizers */
	MRMGR__PATCH_TEST_NO_CHAIN = 1u << 3, /* treat foreign jumps as unknown */
	MRMGR__PATCH_TEST_SANITIZER = 1u << 4, /* act as under a sanitizer */
};
extern unsigned int mrmgr__patch_test_flags;
/*
 * From the mprotect hook, after [a, a + l) lost PROT_WRITE: if that was
 * libc's text around our entry points and our jumps are not there any
 * more, push "everything changed", so every cache's next get drains it
 * and misses, and the miss (mrmgr__patch_start) chains on top again.
 * Async-signal-safe: compares bytes, pushes into the lock-free queue.
 */
void mrmgr__patch_text_protected(uintptr_t a, size_t l);
/* Take every patch out and put it back (tests: patching under load). */
int mrmgr__patch_test_toggle(void);

/* ------------------------------------------------------------ hooks */

/* The hook for each target (patch_hooks.c): issues the system call. */
extern void (*const mrmgr__patch_hook_fn[MRMGR__PT_COUNT])(void);
/* The chaining hooks, per generation g and target t: they report around
 * a call of mrmgr__patch_chain[g][t], the code another patcher's jump led
 * to (which issues the system call and does its own bookkeeping). Set
 * once, before an entry first jumps to that generation's hook; each
 * going-on-top of another patcher takes the next generation. */
#define MRMGR__PATCH_GENS 4
extern void (*const mrmgr__patch_chain_fn[MRMGR__PATCH_GENS][MRMGR__PT_COUNT])(void);
extern uintptr_t mrmgr__patch_chain[MRMGR__PATCH_GENS][MRMGR__PT_COUNT];
/* glibc's notion of the break (its exported __curbrk). */
extern void **mrmgr__patch_curbrk;
/* Self-test: while probe_on, each hook sets its bit in probe_seen; brk
 * with MRMGR__PATCH_BRK_PROBE returns ENOMEM without a system call (a
 * real brk() could race with malloc over __curbrk). */
extern unsigned int mrmgr__patch_probe_on, mrmgr__patch_probe_seen;
#define MRMGR__PATCH_BRK_PROBE ((void *)1)
#define MRMGR__PATCH_SBRK_PROBE INTPTR_MIN

/* The chaining hooks' bodies around next, for follow.c's wrappers of
 * the memory calls another object defines (patch_hooks_chain.c). */
int mrmgr__follow_munmap(uintptr_t next, void *a, size_t l);
void *mrmgr__follow_mremap(uintptr_t next, void *o, size_t ol, size_t nl,
			   int f, void *d);
int mrmgr__follow_madvise(uintptr_t next, void *a, size_t l, int adv);
void *mrmgr__follow_mmap(uintptr_t next, void *a, size_t l, int p, int f,
			 int fd, long o);
void *mrmgr__follow_shmat(uintptr_t next, int id, const void *a, int flg);
int mrmgr__follow_shmdt(uintptr_t next, const void *a);

/* ------------------------------------------------------------ image */

#include <link.h>

/* libc's image (patch_image.c): its dynamic symbol table and its text. */
struct mrmgr__patch_image {
	uintptr_t want; /* an address inside it (munmap) */
	uintptr_t base;
	const ElfW(Sym) *sym;
	const char *str;
	size_t nsym;
	uintptr_t text_lo, text_hi; /* the executable, not writable segment */
	int found;
};
/* dl_iterate_phdr() callback filling the image that holds im->want. */
int mrmgr__patch_find_image(struct dl_phdr_info *info, size_t sz, void *im);
/* Any loaded object's dynamic symbol table into *im (no text range):
 * 1 when it has one. */
int mrmgr__patch_object_syms(const struct dl_phdr_info *info,
			     struct mrmgr__patch_image *im);
/* A defined function symbol's address and size by name; 0 if absent. */
uintptr_t mrmgr__patch_sym(const struct mrmgr__patch_image *im,
			   const char *name, size_t *size);
/* The gap around [fn, fn + size): the end of the symbol before it and
 * the start of the one after (any symbol with a range in the text). */
void mrmgr__patch_gaps(const struct mrmgr__patch_image *im, uintptr_t fn,
		       size_t size, uintptr_t *before_lo, uintptr_t *after_hi);
/* Whether a lies in an executable mapping (/proc/self/maps). */
int mrmgr__patch_executable(uintptr_t a);

/* ------------------------------------------------------------ arch */

/*
 * One redirected entry point. The jump replaces whole instructions at
 * `at` (after a landing-pad instruction such as endbr64 or bti, which
 * stays) with one aligned atomic store of the window that holds them.
 */
struct mrmgr__patch_site {
	uintptr_t fn, at;       /* entry, and where the jump is written */
	uintptr_t pad;          /* x86-64: dead bytes the short jump goes to, or 0 */
	uintptr_t win;          /* aligned window holding the replaced bytes */
	unsigned int win_len;   /* 4, 8 or 16 */
	unsigned int len;       /* bytes of the window that change */
	unsigned char old[16], new[16]; /* the window before and after */
	unsigned char pad_old[8], pad_new[8];
	unsigned int pad_len;
	uintptr_t chain;        /* another patcher's destination, or 0 */
};

/*
 * Recognise fn's prologue: either the body [fn, fn + size) issues system
 * call nr the way glibc's wrappers do and starts with an instruction the
 * architecture code knows how to replace, or its first instruction
 * (after a landing pad) starts a jump another patcher left there, whose
 * destination goes to s->chain (see mrmgr__patch_arch_foreign). gap_*
 * are the dead bytes around the function (between it and its neighbours
 * in the symbol table), usable as a landing pad. 0 and *s filled (but
 * new/pad_new not yet), or ENOEXEC.
 */
int mrmgr__patch_arch_plan(uintptr_t fn, size_t size, long nr,
			   uintptr_t before_lo, uintptr_t after_hi,
			   struct mrmgr__patch_site *s);
/*
 * The jump forms run-time patchers leave at an entry point, decoded at
 * at: x86-64 `jmp rel32`, `movabs $imm64, %r11|%rax` + `jmp *%reg`,
 * `jmp *disp32(%rip)`; aarch64 `b imm26`, `ldr xN, literal` + `br xN`,
 * `movz`/`movk` xN + `br xN`, `adrp` + `add`|`ldr` + `br xN`. The
 * destination, and in *len the bytes of the first instruction (the one a
 * jump of ours replaces); 0 when it is none of these.
 */
uintptr_t mrmgr__patch_arch_foreign(uintptr_t at, unsigned int *len);
/* Whether the body [fn, fn + size) calls or jumps to `to` directly
 * (every instruction of it decoded, not a byte pattern). */
int mrmgr__patch_arch_calls(uintptr_t fn, size_t size, uintptr_t to);
/* Whether a direct branch from site s can reach address to. */
int mrmgr__patch_arch_reaches(const struct mrmgr__patch_site *s, uintptr_t to);
/* Bytes of one trampoline slot; write one jumping to hook at buf. */
size_t mrmgr__patch_arch_tramp_size(void);
/* patch_bti.c (arm64; 0 elsewhere): note the object holding a (when it
 * is BTI-marked and the CPU has BTI) while planning, never in a hook;
 * then the PROT_BTI that pages [lo, hi) of its text must keep, and the
 * one the trampoline page gets. */
void mrmgr__patch_bti_note(uintptr_t a);
int mrmgr__patch_bti_prot(uintptr_t lo, uintptr_t hi);
int mrmgr__patch_bti_tramp_prot(void);
void mrmgr__patch_arch_tramp(unsigned char *buf, uintptr_t hook);
/* Fill s->new (and s->pad_new) for a jump to the trampoline at tramp. */
void mrmgr__patch_arch_encode(struct mrmgr__patch_site *s, uintptr_t tramp);
/* Replace the window's `from` bytes with `to` in one atomic
 * compare-and-swap: 0, or EBUSY when the bytes are not `from` any more. */
int mrmgr__patch_arch_swap(const struct mrmgr__patch_site *s,
			   const unsigned char *from, const unsigned char *to);
/* Make written instructions visible to this CPU's instruction fetch. */
void mrmgr__patch_arch_flush(uintptr_t a, size_t n);
/* How far (bytes) the trampoline page may be from the patched code. */
uintptr_t mrmgr__patch_arch_reach(void);

/* ------------------------------------------------------------ state */

/*
 * The source's state, shared by patch.c (install, start) and
 * patch_takeover.c (another patcher after us) only. Written with
 * mrmgr__mon_lock held; the queries read the counters atomically.
 */
struct mrmgr__patch_globals {
	int state; /* enum mrmgr__src_state */
	int err;
	uint32_t targets;
	uint32_t chained;    /* targets whose hook calls another patcher */
	uint32_t overwrites; /* times we found our jumps overwritten */
	int flush_again;     /* push "everything changed" once more */
	struct mrmgr__patch_site site[MRMGR__PT_COUNT];
	/* Our first plan of a target over glibc's own prologue (valid when
	 * .fn is set): put back as it was if another patcher restores
	 * glibc's bytes over ours. */
	struct mrmgr__patch_site direct[MRMGR__PT_COUNT];
	unsigned char seen[MRMGR__PT_COUNT][16]; /* entry bytes as we left them */
	uintptr_t entry[MRMGR__PT_COUNT];        /* each target's address */
	unsigned int gen[MRMGR__PT_COUNT];       /* chaining generations used */
	uintptr_t tramp;
	uint64_t flush_at_ms;                    /* when flush_again is due */
	int warned;
	struct mrmgr__patch_image im;            /* libc's, found at install */
};
extern struct mrmgr__patch_globals mrmgr__patch_g;

/* patch.c, for the takeover too. */
/* The name of target t (munmap, ...). */
const char *mrmgr__patch_target_name(int t);
/* Recognise target t as its entry is now: 0 and *s, or why not. */
int mrmgr__patch_plan_one(const struct mrmgr__patch_image *im, int t,
			  struct mrmgr__patch_site *s);
/* sbrk() (and so malloc's morecore) must reach brk's body. */
int mrmgr__patch_sbrk_calls_brk(const struct mrmgr__patch_image *im);
/* Record that site t is (on) or is not ours now, as its bytes are. */
void mrmgr__patch_mark(int t, int on);
/* Point site t's jump at its hook: the direct one, or the chaining
 * hooks of a generation not used before for t. */
int mrmgr__patch_encode(int t);
/* Write site t's jump (or the original bytes back when undo). */
int mrmgr__patch_apply(int t, int undo);
/* The same for any planned and encoded site (the pad first, the atomic
 * swap, the barrier): 0, EBUSY when the bytes changed, or errno. */
int mrmgr__patch_apply_site(const struct mrmgr__patch_site *s, int undo);
/* A page (read-write, for the trampolines) within branch reach of each
 * of the n sites (those with .fn set), near im's text; 0 if none. */
uintptr_t mrmgr__patch_tramp_page(const struct mrmgr__patch_image *im,
				  const struct mrmgr__patch_site *site, int n);
/*
 * Tests: plan, encode and write one site at fn, the function of a loaded
 * object's dynamic symbol table that starts there, issuing system call
 * nr, to jump to hook through a trampoline page of its own, as the
 * install does for libc's entries. 0 and *s (as planned), or ENOENT (no
 * such symbol), ENOEXEC (the entry is refused), ENOMEM, or the write's
 * error. patch_test.c.
 */
int mrmgr__patch_test_site(void *fn, long nr, void (*hook)(void),
			   struct mrmgr__patch_site *s);
/* Every patched call is delivered (see patch.c): 0 or EPROTO. */
int mrmgr__patch_selftest(const struct mrmgr__patch_image *im);

/* patch_takeover.c, for the install and start. */
/* Rebuild the packed table of bytes a miss compares (whenever
 * mrmgr__patch_g's seen, a site or targets changes). */
void mrmgr__patch_build_checks(void);
/* Record the pages of libc's text around our entry points, for
 * mrmgr__patch_text_protected (once, at the end of the install). */
void mrmgr__patch_set_text_range(void);
/* Name of the object holding a, for the warnings. */
const char *mrmgr__patch_owner_of(uintptr_t a);
/* Cheap; on every call of mrmgr__patch_start() while active (the one call
 * a miss makes here: the comparison is inlined in it): our jumps still
 * there, else every cache invalidated and chained on top again. */
void mrmgr__patch_check(void);

/* ------------------------------------------------------------ syscalls */

/* Raw system calls: the hooks must never enter the functions they replace.
 * Return the kernel's value (-errno on failure). */
#if defined(__x86_64__)
static inline long mrmgr__patch_sys(long n, long a, long b, long c, long d,
				    long e, long f)
{
	register long r10 __asm__("r10") = d;
	register long r8 __asm__("r8") = e;
	register long r9 __asm__("r9") = f;
	long ret;

	__asm__ volatile("syscall"
			 : "=a"(ret)
			 : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8),
			   "r"(r9)
			 : "rcx", "r11", "memory");
	return ret;
}
#define MRMGR__PATCH_SUPPORTED 1
#elif defined(__aarch64__)
static inline long mrmgr__patch_sys(long n, long a, long b, long c, long d,
				    long e, long f)
{
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
	return x0;
}
#define MRMGR__PATCH_SUPPORTED 1
#else
#define MRMGR__PATCH_SUPPORTED 0
#endif

#endif /* MRMGR__PATCH_H */
