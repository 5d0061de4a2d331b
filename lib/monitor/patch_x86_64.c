/*
 * The patch source on x86-64: recognising a glibc wrapper's prologue,
 * encoding the jump, and writing it while other threads may be running
 * the very instructions being replaced.
 *
 * Why a running thread never executes a torn or half-replaced instruction:
 *   - Only the first instruction at the patch point is replaced, and by
 *     exactly one instruction: a 5-byte `jmp rel32` when the first
 *     instruction is 5 bytes or longer (glibc's `mov $NR, %eax`), else a
 *     2-byte `jmp rel8` to five dead padding bytes next to the function
 *     (outside every symbol, all NOPs) that hold the `jmp rel32`. The
 *     bytes after the replaced instruction are not touched, so a thread
 *     that already executed the first instruction (or was preempted
 *     right after it) continues with the original code; a thread that
 *     fetches the first instruction sees the old one or the new one. No
 *     instruction boundary ever moves: leftover bytes of a longer old
 *     instruction lie behind an unconditional jump.
 *   - The replaced bytes are written with one locked compare-and-swap of
 *     the aligned 8- (or 16-) byte word that holds them, never with a
 *     sequence of stores; the other bytes of the word are written back
 *     unchanged. A fetch that crosses the store sees the whole old word
 *     or the whole new one. The padding bytes are written before the
 *     short jump that leads to them.
 *   - After the store, membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED_SYNC_CORE)
 *     (patch.c) makes every thread of the process execute a serialising
 *     instruction, as Intel's cross-modifying-code protocol asks of the
 *     executing processors, so no stale prefetched copy outlives the patch.
 * This is the hot-patching scheme Windows uses for its 2-byte `mov
 * edi, edi` prologues (one atomic store of one whole instruction), here
 * with a serialising barrier on top.
 *
 * The jump goes to a trampoline page within ±2 GiB (`jmp *0(%rip)` and
 * the hook's absolute address), because the hook may be farther away.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#if defined(__x86_64__)

#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "patch.h"

#define REL32_REACH ((uintptr_t)0x7ff00000) /* ±2 GiB, a margin kept */

uintptr_t mrmgr__patch_arch_reach(void)
{
	return REL32_REACH;
}

/* Length of the NOP at p (at most n bytes), or 0 if it is not one. */
static size_t nop_len(const uint8_t *p, size_t n)
{
	size_t i = 0, len;
	uint8_t modrm, mod, rm;

	if (n && (p[0] == 0x90 || p[0] == 0xcc)) /* nop, int3 padding */
		return 1;
	while (i < n && i < 6 && (p[i] == 0x66 || p[i] == 0x2e))
		i++;
	if (i < n && i && p[i] == 0x90)
		return i + 1; /* xchg %ax, %ax */
	/* 0f 1f /0: nopl/nopw with a memory operand */
	if (i + 3 > n || p[i] != 0x0f || p[i + 1] != 0x1f)
		return 0;
	modrm = p[i + 2];
	if (modrm & 0x38)
		return 0;
	mod = modrm >> 6;
	rm = modrm & 7;
	len = i + 3;
	if (mod != 3 && rm == 4)
		len++; /* SIB */
	if (mod == 1)
		len += 1;
	else if (mod == 2 || (mod == 0 && rm == 5))
		len += 4;
	else if (mod == 0 && rm == 4 && len <= n && (p[len - 1] & 7) == 5)
		len += 4;
	return len <= n ? len : 0;
}

/* [lo, hi) is nothing but NOPs (alignment padding between functions). */
static int all_nops(uintptr_t lo, uintptr_t hi)
{
	const uint8_t *p = (const uint8_t *)lo;
	size_t n = hi - lo;

	if (hi <= lo || n > 64)
		return 0;
	while (n) {
		size_t l = nop_len(p, n);

		if (!l)
			return 0;
		p += l;
		n -= l;
	}
	return 1;
}

/* The body issues system call nr: `mov $nr, %eax` then `syscall`. */
static int issues(const uint8_t *p, size_t size, long nr)
{
	for (size_t i = 0; i + 7 <= size; i++)
		if (p[i] == 0xb8 && p[i + 1] == (uint8_t)nr &&
		    p[i + 2] == (uint8_t)(nr >> 8) && p[i + 3] == 0 &&
		    p[i + 4] == 0 && p[i + 5] == 0x0f && p[i + 6] == 0x05)
			return 1;
	return 0;
}

/*
 * Length of the first instruction when it is one of the forms glibc's
 * wrappers start with, else 0: mov $imm32 to a register; a register to
 * register mov/xor/sub/add (with or without REX); sub/add $imm to a
 * register; push of r8-r15.
 */
static size_t first_insn(const uint8_t *p)
{
	size_t rex = (p[0] & 0xf0) == 0x40;
	uint8_t op = p[rex];

	if (!rex && op >= 0xb8 && op <= 0xbf)
		return 5;
	if ((op == 0x89 || op == 0x8b || op == 0x31 || op == 0x33 ||
	     op == 0x29 || op == 0x01) && (p[rex + 1] >> 6) == 3)
		return rex + 2;
	if (op == 0x83 && (p[rex + 1] >> 6) == 3)
		return rex + 3;
	if (op == 0x81 && (p[rex + 1] >> 6) == 3)
		return rex + 6;
	if (rex && p[0] == 0x41 && op >= 0x50 && op <= 0x57)
		return 2;
	return 0;
}

static int fits(intptr_t d, intptr_t lim)
{
	return d >= -lim - 1 && d <= lim;
}

/*
 * Another patcher's jump at p. UCX's bistro writes `jmp rel32` when its
 * hook is within reach and `movabs $hook, %r11; jmp *%r11` otherwise;
 * libfabric's memhooks (and Open MPI's patcher) the %r11 form; others use
 * %rax or an indirect `jmp *disp32(%rip)` through a pointer.
 */
uintptr_t mrmgr__patch_arch_foreign(uintptr_t at, unsigned int *len)
{
	const uint8_t *p = (const uint8_t *)at;
	uint64_t imm;
	int32_t d;

	if (p[0] == 0xe9) {
		memcpy(&d, p + 1, 4);
		*len = 5;
		return at + 5 + (uintptr_t)(intptr_t)d;
	}
	if (p[0] == 0xff && p[1] == 0x25) {
		uintptr_t slot;

		memcpy(&d, p + 2, 4);
		slot = at + 6 + (uintptr_t)(intptr_t)d;
		memcpy(&imm, (const void *)slot, 8);
		*len = 6;
		return (uintptr_t)imm;
	}
	if ((p[0] == 0x49 && p[1] == 0xbb && p[10] == 0x41 && p[11] == 0xff &&
	     p[12] == 0xe3) || /* movabs ..., %r11; jmp *%r11 */
	    (p[0] == 0x48 && p[1] == 0xb8 && p[10] == 0xff &&
	     p[11] == 0xe0)) { /* movabs ..., %rax; jmp *%rax */
		memcpy(&imm, p + 2, 8);
		*len = 10;
		return (uintptr_t)imm;
	}
	return 0;
}

int mrmgr__patch_arch_plan(uintptr_t fn, size_t size, long nr,
			   uintptr_t before_lo, uintptr_t after_hi,
			   struct mrmgr__patch_site *s)
{
	const uint8_t *p = (const uint8_t *)fn;
	size_t len;

	unsigned int flen = 0;

	memset(s, 0, sizeof(*s));
	s->fn = s->at = fn;
	if (size < 8 || size > 4096)
		return ENOEXEC;
	if (p[0] == 0xf3 && p[1] == 0x0f && p[2] == 0x1e && p[3] == 0xfa)
		s->at += 4; /* endbr64 stays: indirect calls land on it */
	/* Another patcher was here first: its jump's first instruction
	 * (5 bytes or more) becomes ours, the rest of it is dead. */
	s->chain = mrmgr__patch_arch_foreign(s->at, &flen);
	if (!s->chain && !issues(p, size, nr))
		return ENOEXEC;
	len = s->chain ? flen : first_insn((const uint8_t *)s->at);
	if (len >= 5) {
		s->len = 5;
	} else if (len >= 2) {
		intptr_t from = (intptr_t)s->at + 2;

		/* Five dead bytes in rel8 reach: the padding after the
		 * function, else the padding before it. */
		s->len = 2;
		if (after_hi >= fn + size + 5 && all_nops(fn + size, after_hi) &&
		    fits((intptr_t)(fn + size) - from, 127))
			s->pad = fn + size;
		else if (before_lo && fn >= before_lo + 5 &&
			 all_nops(before_lo, fn) &&
			 fits((intptr_t)(fn - 5) - from, 127))
			s->pad = fn - 5;
		else
			return ENOEXEC;
		s->pad_len = 5;
		memcpy(s->pad_old, (const void *)s->pad, 5);
	} else {
		return ENOEXEC;
	}
	if ((s->at & 7) + s->len <= 8) {
		s->win = s->at & ~(uintptr_t)7;
		s->win_len = 8;
	} else if ((s->at & 15) + s->len <= 16) {
		s->win = s->at & ~(uintptr_t)15;
		s->win_len = 16;
	} else {
		return ENOEXEC;
	}
	memcpy(s->old, (const void *)s->win, s->win_len);
	return 0;
}

int mrmgr__patch_arch_reaches(const struct mrmgr__patch_site *s, uintptr_t to)
{
	uintptr_t from = (s->pad ? s->pad : s->at) + 5;

	return fits((intptr_t)(to - from), (intptr_t)REL32_REACH);
}

size_t mrmgr__patch_arch_tramp_size(void)
{
	return 16;
}

void mrmgr__patch_arch_tramp(unsigned char *buf, uintptr_t hook)
{
	/* jmp *0(%rip); .quad hook; two int3 */
	static const unsigned char jmp[6] = { 0xff, 0x25, 0, 0, 0, 0 };

	memcpy(buf, jmp, sizeof(jmp));
	memcpy(buf + 6, &hook, 8);
	buf[14] = buf[15] = 0xcc;
}

static void put_jmp32(unsigned char *at, uintptr_t from, uintptr_t to)
{
	int32_t d = (int32_t)(intptr_t)(to - (from + 5));

	at[0] = 0xe9;
	memcpy(at + 1, &d, 4);
}

void mrmgr__patch_arch_encode(struct mrmgr__patch_site *s, uintptr_t tramp)
{
	unsigned char *w = s->new + (s->at - s->win);

	memcpy(s->new, s->old, s->win_len);
	if (!s->pad) {
		put_jmp32(w, s->at, tramp);
		return;
	}
	memcpy(s->pad_new, s->pad_old, sizeof(s->pad_new));
	put_jmp32(s->pad_new, s->pad, tramp);
	w[0] = 0xeb;
	w[1] = (unsigned char)(int8_t)((intptr_t)s->pad - (intptr_t)(s->at + 2));
}

int mrmgr__patch_arch_swap(const struct mrmgr__patch_site *s,
			   const unsigned char *from, const unsigned char *to)
{
	if (s->win_len == 8) {
		uint64_t o, n;

		memcpy(&o, from, 8);
		memcpy(&n, to, 8);
		return __atomic_compare_exchange_n((uint64_t *)s->win, &o, n, 0,
						   __ATOMIC_SEQ_CST,
						   __ATOMIC_SEQ_CST) ? 0 : EBUSY;
	} else {
		uint64_t o[2], n[2];
		unsigned char ok;

		memcpy(o, from, 16);
		memcpy(n, to, 16);
		__asm__ volatile("lock cmpxchg16b %1\n\tsete %0"
				 : "=q"(ok), "+m"(*(unsigned __int128 *)s->win),
				   "+a"(o[0]), "+d"(o[1])
				 : "b"(n[0]), "c"(n[1])
				 : "memory", "cc");
		return ok ? 0 : EBUSY;
	}
}

void mrmgr__patch_arch_flush(uintptr_t a, size_t n)
{
	/* x86 keeps instruction fetch coherent with stores on this CPU. */
	(void)a;
	(void)n;
}

#endif /* __x86_64__ */
