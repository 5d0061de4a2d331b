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
#include "x86_decode.h"

#define REL32_REACH ((uintptr_t)0x7ff00000) /* ±2 GiB, a margin kept */

uintptr_t mrmgr__patch_arch_reach(void)
{
	return REL32_REACH;
}

static int fits(intptr_t d, intptr_t lim)
{
	return d >= -lim - 1 && d <= lim;
}

/* The instruction at a, if it decodes whole below hi: its length, else 0. */
static size_t insn_at(uintptr_t a, uintptr_t hi, struct mrmgr__x86_insn *in)
{
	return a < hi ? mrmgr__x86_decode((const uint8_t *)a, hi - a, in) : 0;
}

/* [lo, hi) is nothing but NOPs (alignment padding between functions). */
static int all_nops(uintptr_t lo, uintptr_t hi)
{
	struct mrmgr__x86_insn in;

	if (hi <= lo || hi - lo > 64)
		return 0;
	while (lo < hi) {
		size_t l = insn_at(lo, hi, &in);

		if (!l || !mrmgr__x86_is_nop(&in))
			return 0;
		lo += l;
	}
	return 1;
}

/* A register (0-15) the instruction writes, as far as the forms below
 * tell; -1 when it writes none of them; -2 when it may write another or
 * one we do not work out (then it counts as writing %eax). */
static int writes_reg(const struct mrmgr__x86_insn *in)
{
	int reg = (in->modrm >> 3 & 7) | (in->rex & 4) << 1;
	int rm = (in->modrm & 7) | (in->rex & 1) << 3;
	int mem = (in->modrm >> 6) != 3;
	uint8_t op = in->op;

	if (in->map == MRMGR__X86_MAP_0F &&
	    (op == 0xb6 || op == 0xb7 || op == 0xbe || op == 0xbf))
		return reg; /* movzx, movsx */
	if (in->map != MRMGR__X86_MAP_1)
		return -2;
	if (op < 0x40 && (op & 7) <= 3) /* add/or/adc/sbb/and/sub/xor/cmp */
		return (op & 0x38) == 0x38 || (!(op & 2) && mem) ? -1
		       : (op & 2) ? reg : rm;
	if (op == 0x88 || op == 0x89 || op == 0xc6 || op == 0xc7)
		return mem ? -1 : rm;
	if (op == 0x8a || op == 0x8b || op == 0x8d || op == 0x63)
		return reg;
	if (op >= 0x80 && op <= 0x83)
		return (in->modrm >> 3 & 7) == 7 || mem ? -1 : rm;
	if (op == 0x84 || op == 0x85 || (op >= 0x50 && op <= 0x57))
		return -1; /* test, push */
	if (op >= 0xb0 && op <= 0xbf)
		return (op & 7) | (in->rex & 1) << 3;
	if (op >= 0x58 && op <= 0x5f)
		return (op & 7) | (in->rex & 1) << 3;
	return -2;
}

/* `mov $nr, %eax` (b8 imm32) or `mov $nr, %rax` (48 c7 c0 imm32). */
static int loads_nr(const uint8_t *p, const struct mrmgr__x86_insn *in, long nr)
{
	int32_t imm;

	if (in->map != MRMGR__X86_MAP_1 || in->imm_len != 4 || (in->rex & 1) ||
	    !(in->op == 0xb8 || (in->op == 0xc7 && in->modrm == 0xc0)))
		return 0;
	memcpy(&imm, p + in->imm_off, 4);
	return imm == nr;
}

/*
 * What a walk over a whole body [fn, fn + size) found: every byte decodes
 * (0 otherwise); a `syscall` on a straight line after a load of nr into
 * %eax that nothing in between overwrote; an indirect jump (a jump table
 * could lead anywhere); a direct call or jump to `to`.
 */
struct body {
	int decodes, issues, indirect_jmp, reaches;
};

static void walk(uintptr_t fn, size_t size, long nr, uintptr_t to, struct body *b)
{
	struct mrmgr__x86_insn in;
	uintptr_t a = fn, end = fn + size;
	int loaded = 0;

	memset(b, 0, sizeof(*b));
	while (a < end) {
		size_t l = insn_at(a, end, &in);

		if (!l)
			return;
		if ((in.flags & MRMGR__X86_REL) && to &&
		    a + l + (uintptr_t)in.rel == to)
			b->reaches = 1;
		if ((in.flags & MRMGR__X86_INDIRECT) && !(in.flags & MRMGR__X86_CALL))
			b->indirect_jmp = 1;
		if (in.map == MRMGR__X86_MAP_0F && in.op == 0x05 && loaded)
			b->issues = 1;
		if (loads_nr((const uint8_t *)a, &in, nr))
			loaded = 1;
		else if ((in.flags & MRMGR__X86_CTRL) || writes_reg(&in) == 0 ||
			 writes_reg(&in) == -2)
			loaded = 0;
		a += l;
	}
	b->decodes = 1;
}

/* Whether any direct branch of the body lands in [lo, hi). */
static int lands_in(uintptr_t fn, size_t size, uintptr_t lo, uintptr_t hi)
{
	struct mrmgr__x86_insn in;

	for (uintptr_t a = fn; a < fn + size;) {
		size_t l = insn_at(a, fn + size, &in);
		uintptr_t t = a + l + (uintptr_t)in.rel;

		if (!l)
			return 1;
		if ((in.flags & MRMGR__X86_REL) && t >= lo && t < hi)
			return 1;
		a += l;
	}
	return 0;
}

/*
 * Five dead bytes inside the body within rel8 reach of from, outside
 * [wlo, whi): a run of NOPs right after an instruction that never falls
 * through (alignment padding before a branch target), that no branch
 * lands in, in a body without indirect jumps. 0 if none.
 */
static uintptr_t inner_pad(uintptr_t fn, size_t size, uintptr_t from,
			   uintptr_t wlo, uintptr_t whi)
{
	struct mrmgr__x86_insn in;
	int after_nofall = 0;

	for (uintptr_t a = fn; a < fn + size;) {
		size_t l = insn_at(a, fn + size, &in);
		uintptr_t r = a;

		if (!l)
			return 0;
		if (after_nofall && mrmgr__x86_is_nop(&in) && in.op != 0xcc) {
			while (r < fn + size && insn_at(r, fn + size, &in) &&
			       mrmgr__x86_is_nop(&in) && in.op != 0xcc)
				r += in.len;
			if (r - a >= 5 && fits((intptr_t)a - (intptr_t)from, 127) &&
			    (a >= whi || a + 5 <= wlo) && !lands_in(fn, size, a, r))
				return a;
			after_nofall = 0;
			a = r;
			continue;
		}
		after_nofall = !!(in.flags & MRMGR__X86_NOFALL);
		a += l;
	}
	return 0;
}

/*
 * Length of the first instruction when a jump may replace it, else 0.
 * Whatever it is, it is never executed anywhere else: the hooks issue
 * the system call themselves (or call another patcher's code), so a
 * RIP-relative instruction (2.41's sbrk: cmpb $0, disp(%rip)) may be
 * replaced as is. A control transfer is refused: an entry that starts by
 * branching is not a wrapper we know (another patcher's forms are
 * recognised before this).
 */
static size_t first_insn(uintptr_t at, uintptr_t end)
{
	struct mrmgr__x86_insn in;
	size_t l = insn_at(at, end, &in);

	return l && !(in.flags & MRMGR__X86_CTRL) ? l : 0;
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

/* The aligned 8- or 16-byte word holding [at, at + len): 0 or ENOEXEC. */
static int window(struct mrmgr__patch_site *s)
{
	if ((s->at & 7) + s->len <= 8) {
		s->win = s->at & ~(uintptr_t)7;
		s->win_len = 8;
	} else if ((s->at & 15) + s->len <= 16) {
		s->win = s->at & ~(uintptr_t)15;
		s->win_len = 16;
	} else {
		return ENOEXEC;
	}
	return 0;
}

int mrmgr__patch_arch_plan(uintptr_t fn, size_t size, long nr,
			   uintptr_t before_lo, uintptr_t after_hi,
			   struct mrmgr__patch_site *s)
{
	const uint8_t *p = (const uint8_t *)fn;
	unsigned int flen = 0;
	struct body b;
	size_t len;

	memset(s, 0, sizeof(*s));
	memset(&b, 0, sizeof(b));
	s->fn = s->at = fn;
	if (size < 8 || size > 4096)
		return ENOEXEC;
	if (p[0] == 0xf3 && p[1] == 0x0f && p[2] == 0x1e && p[3] == 0xfa)
		s->at += 4; /* endbr64 stays: indirect calls land on it */
	/* Another patcher was here first: its jump's first instruction
	 * (5 bytes or more) becomes ours, the rest of it is dead. */
	s->chain = mrmgr__patch_arch_foreign(s->at, &flen);
	if (s->chain) {
		len = flen;
	} else {
		walk(fn, size, nr, 0, &b);
		if (!b.decodes || !b.issues)
			return ENOEXEC;
		len = first_insn(s->at, fn + size);
		/* A branch back to the entry would enter the hook mid-call. */
		if (len && lands_in(fn, size, fn, s->at + len))
			return ENOEXEC;
	}
	if (len < 2)
		return ENOEXEC; /* a 1-byte instruction cannot hold a jump */
	s->len = len >= 5 ? 5 : 2;
	if (window(s))
		return ENOEXEC;
	if (s->len == 2) {
		intptr_t from = (intptr_t)s->at + 2;
		uintptr_t wlo = s->win, whi = s->win + s->win_len;

		/* Five dead bytes in rel8 reach, not in the window: the
		 * padding after the function, else the padding before it,
		 * else padding inside the body nothing runs into. */
		if (after_hi >= fn + size + 5 && all_nops(fn + size, after_hi) &&
		    fits((intptr_t)(fn + size) - from, 127) && fn + size >= whi)
			s->pad = fn + size;
		else if (before_lo && fn >= before_lo + 5 &&
			 all_nops(before_lo, fn) && fn <= wlo &&
			 fits((intptr_t)(fn - 5) - from, 127))
			s->pad = fn - 5;
		else if (!b.indirect_jmp)
			s->pad = inner_pad(fn, size, (uintptr_t)from, wlo, whi);
		if (!s->pad)
			return ENOEXEC;
		s->pad_len = 5;
		memcpy(s->pad_old, (const void *)s->pad, 5);
	}
	memcpy(s->old, (const void *)s->win, s->win_len);
	return 0;
}

int mrmgr__patch_arch_calls(uintptr_t fn, size_t size, uintptr_t to)
{
	struct body b;

	if (size > 4096)
		return 0;
	walk(fn, size, -1, to, &b);
	return b.decodes && b.reaches;
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
