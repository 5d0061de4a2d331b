/*
 * The patch source on aarch64: recognising a glibc wrapper's prologue,
 * encoding the branch, and writing it while other threads may be running
 * the instruction being replaced.
 *
 * Every instruction is 4 bytes and 4-byte aligned, so the patch is one
 * instruction replaced by one instruction with one aligned 32-bit
 * compare-and-swap: a fetch sees the old word or the new one, never a
 * mix, and no other instruction changes (a `bti c` landing pad stays in
 * front). The new instruction is a `B` to a trampoline page within
 * ±128 MiB (`ldr x16, #8; br x16; .quad hook`; x16 is the
 * intra-procedure-call scratch register, free at a function's entry).
 * After the store: the data cache is cleaned and the instruction cache
 * invalidated to the point of unification for that line
 * (__builtin___clear_cache), and membarrier(MEMBARRIER_CMD_PRIVATE_
 * EXPEDITED_SYNC_CORE) makes every thread of the process execute a
 * context synchronisation event, so none keeps a stale fetch.
 *
 * What the architecture leaves open: it lists the instructions that may
 * be modified while another thread executes them without explicit
 * synchronisation (B, BL, NOP, BRK, SVC, HVC, SMC, ISB). Debian 12's
 * glibc 2.36 starts munmap and madvise with a NOP, so replacing it with a
 * B is within that list; mremap (STP), mmap (TST), brk (MOV), shmat
 * (SXTW) and shmdt (MOVZ) are not. A thread fetching that exact word
 * during the store may, per the architecture, behave as some sequence of
 * instructions at its exception level; the window is the single store,
 * and every other run-time patcher of libc (UCX, libfabric) has it too,
 * with multi-instruction rewrites besides.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#if defined(__aarch64__)

#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "a64_decode.h"
#include "patch.h"

#define B_REACH ((uintptr_t)0x7f00000) /* ±128 MiB, a margin kept */

#define INSN_BTI_C 0xd503245fu
#define INSN_BTI_JC 0xd50324dfu
#define INSN_SVC0 0xd4000001u

uintptr_t mrmgr__patch_arch_reach(void)
{
	return B_REACH;
}

static uint32_t insn(uintptr_t a)
{
	uint32_t v;

	memcpy(&v, (const void *)a, 4);
	return v;
}

/* The body issues system call nr: `mov w8|x8, #nr` then `svc #0` within
 * five instructions, none of them a branch. */
static int issues(uintptr_t fn, size_t size, long nr)
{
	uint32_t w8 = 0x52800008u | ((uint32_t)nr << 5);
	uint32_t x8 = 0xd2800008u | ((uint32_t)nr << 5);

	for (size_t i = 0; i + 4 <= size; i += 4) {
		uint32_t v = insn(fn + i);

		if (v != w8 && v != x8)
			continue;
		for (size_t j = i + 4; j < i + 24 && j + 4 <= size; j += 4) {
			if (insn(fn + j) == INSN_SVC0)
				return 1;
			if (mrmgr__a64_classify(insn(fn + j), NULL) & MRMGR__A64_CTRL)
				break;
		}
	}
	return 0;
}

static int64_t sext(uint64_t v, unsigned int bits)
{
	return (int64_t)(v << (64 - bits)) >> (64 - bits);
}

/* br xN: N, or -1. */
static int br_reg(uint32_t v)
{
	return (v & 0xfffffc1fu) == 0xd61f0000u ? (int)((v >> 5) & 31) : -1;
}

/*
 * Another patcher's jump at `at`. UCX's bistro and libfabric's memhooks
 * write `movz x15, #h3, lsl #48; movk x15, #h2, lsl #32; movk ... #h1,
 * lsl #16; movk ... #h0; br x15`; others a `b` to a nearby trampoline,
 * `ldr x16, #lit; br x16` with the address beside it (as ours does), or
 * `adrp x16, page; add x16, x16, #lo | ldr x16, [x16, #off]; br x16`.
 */
uintptr_t mrmgr__patch_arch_foreign(uintptr_t at, unsigned int *len)
{
	uint32_t v = insn(at);
	unsigned int rd = v & 31;

	*len = 4;
	if ((v & 0xfc000000u) == 0x14000000u) /* b */
		return at + (uintptr_t)(sext(v & 0x03ffffffu, 26) * 4);
	if ((v & 0xff000000u) == 0x58000000u && br_reg(insn(at + 4)) == (int)rd) {
		uintptr_t lit = at + (uintptr_t)(sext((v >> 5) & 0x7ffffu, 19) * 4);
		uint64_t a;

		memcpy(&a, (const void *)lit, 8);
		return (uintptr_t)a;
	}
	if ((v & 0xff800000u) == 0xd2800000u) { /* movz xN, #imm, lsl #hw*16 */
		uint64_t a = (uint64_t)((v >> 5) & 0xffff) << (16 * ((v >> 21) & 3));

		for (unsigned int i = 1; i <= 4; i++) {
			uint32_t w = insn(at + 4 * i);
			unsigned int sh = 16 * ((w >> 21) & 3);

			if (br_reg(w) == (int)rd)
				return (uintptr_t)a;
			if ((w & 0xff800000u) != 0xf2800000u || (w & 31) != rd)
				return 0; /* not movk xN */
			a = (a & ~((uint64_t)0xffff << sh)) |
			    (uint64_t)((w >> 5) & 0xffff) << sh;
		}
		return 0;
	}
	if ((v & 0x9f000000u) == 0x90000000u) { /* adrp xN, page */
		uint64_t imm = ((v >> 29) & 3) | (uint64_t)((v >> 5) & 0x7ffff) << 2;
		uintptr_t page = (at & ~(uintptr_t)4095) +
				 (uintptr_t)(sext(imm, 21) * 4096);
		uint32_t w = insn(at + 4);

		if (br_reg(insn(at + 8)) != (int)rd || ((w >> 5) & 31) != rd ||
		    (w & 31) != rd)
			return 0;
		if ((w & 0xffc00000u) == 0x91000000u) /* add xN, xN, #imm12 */
			return page + ((w >> 10) & 0xfff);
		if ((w & 0xffc00000u) == 0xf9400000u) { /* ldr xN, [xN, #imm] */
			uint64_t a;

			memcpy(&a, (const void *)(page + ((w >> 10) & 0xfff) * 8), 8);
			return (uintptr_t)a;
		}
	}
	return 0;
}

#define HINT_PACIASP 0xd503233fu
#define HINT_PACIBSP 0xd503237fu

/* Whether a direct branch of the body [fn, fn + size) lands in [lo, hi). */
static int lands_in(uintptr_t fn, size_t size, uintptr_t lo, uintptr_t hi)
{
	for (size_t i = 0; i + 4 <= size; i += 4) {
		int64_t rel;
		unsigned int f = mrmgr__a64_classify(insn(fn + i), &rel);
		uintptr_t t = fn + i + (uintptr_t)rel;

		if ((f & MRMGR__A64_CTRL) && (f & MRMGR__A64_POSDEP) &&
		    t >= lo && t < hi)
			return 1;
	}
	return 0;
}

/*
 * The decision on the entry (see doc/monitor.md, "Deciding what an entry
 * starts with"): a `bti` stays (indirect callers land on it), so does a
 * `paciasp`/`pacibsp`, which is the landing pad of a function without
 * `bti` (an indirect call that found a `b` there would fault on BTI
 * hardware); its signature on LR is stripped by the trampoline's
 * `xpaclri`, since the hook returns with a plain `ret`. The instruction
 * after them is replaced whatever it is (PC-relative ones too: it is
 * never executed anywhere else, the hooks issue the system call), unless
 * it transfers control, or a branch of the body comes back to it.
 */
int mrmgr__patch_arch_plan(uintptr_t fn, size_t size, long nr,
			   uintptr_t before_lo, uintptr_t after_hi,
			   struct mrmgr__patch_site *s)
{
	unsigned int flen = 0, f;

	(void)before_lo;
	(void)after_hi;
	memset(s, 0, sizeof(*s));
	s->fn = s->at = fn;
	if ((fn & 3) || size < 8 || size > 4096)
		return ENOEXEC;
	if (mrmgr__a64_classify(insn(fn), NULL) & MRMGR__A64_BTI)
		s->at += 4; /* the landing pad stays for indirect callers */
	/* Another patcher was here first: the first instruction of its jump
	 * becomes our B, the rest of it is dead. */
	s->chain = mrmgr__patch_arch_foreign(s->at, &flen);
	if (!s->chain) {
		if (!issues(fn, size, nr))
			return ENOEXEC;
		if (insn(s->at) == HINT_PACIASP || insn(s->at) == HINT_PACIBSP)
			s->at += 4;
		f = mrmgr__a64_classify(insn(s->at), NULL);
		if ((f & MRMGR__A64_CTRL) || s->at + 4 > fn + size ||
		    lands_in(fn, size, fn, s->at + 4))
			return ENOEXEC;
	}
	s->win = s->at;
	s->win_len = 4;
	s->len = 4;
	memcpy(s->old, (const void *)s->win, 4);
	return 0;
}

int mrmgr__patch_arch_calls(uintptr_t fn, size_t size, uintptr_t to)
{
	if ((fn & 3) || size > 4096)
		return 0;
	for (size_t i = 0; i + 4 <= size; i += 4) {
		int64_t rel;

		if ((mrmgr__a64_classify(insn(fn + i), &rel) & MRMGR__A64_BRANCH) &&
		    fn + i + (uintptr_t)rel == to)
			return 1;
	}
	return 0;
}

int mrmgr__patch_arch_reaches(const struct mrmgr__patch_site *s, uintptr_t to)
{
	intptr_t d = (intptr_t)(to - s->at);

	return d >= -(intptr_t)B_REACH && d <= (intptr_t)B_REACH;
}

size_t mrmgr__patch_arch_tramp_size(void)
{
	return 24;
}

void mrmgr__patch_arch_tramp(unsigned char *buf, uintptr_t hook)
{
	/* bti jc: the page is guarded where the CPU has BTI (patch_bti.c);
	 * the entry's `b` needs no landing pad, another patcher chaining
	 * through it by register does. xpaclri: a `paciasp` left at the
	 * entry signed LR, and the hook returns with a plain `ret` (a no-op
	 * on an unsigned LR, and a NOP without pointer authentication). */
	const uint32_t code[4] = {
		INSN_BTI_JC, /* bti jc */
		0xd50320ffu, /* xpaclri */
		0x58000050u, /* ldr x16, #8 */
		0xd61f0200u, /* br x16 */
	};

	memcpy(buf, code, 16);
	memcpy(buf + 16, &hook, 8);
}

void mrmgr__patch_arch_encode(struct mrmgr__patch_site *s, uintptr_t tramp)
{
	intptr_t d = (intptr_t)(tramp - s->at) >> 2;
	uint32_t b = 0x14000000u | ((uint32_t)d & 0x03ffffffu);

	memcpy(s->new, &b, 4);
}

int mrmgr__patch_arch_swap(const struct mrmgr__patch_site *s,
			   const unsigned char *from, const unsigned char *to)
{
	uint32_t o, n;

	memcpy(&o, from, 4);
	memcpy(&n, to, 4);
	return __atomic_compare_exchange_n((uint32_t *)s->win, &o, n, 0,
					   __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST)
		       ? 0
		       : EBUSY;
}

void mrmgr__patch_arch_flush(uintptr_t a, size_t n)
{
	__builtin___clear_cache((char *)a, (char *)(a + n));
}

#endif /* __aarch64__ */
