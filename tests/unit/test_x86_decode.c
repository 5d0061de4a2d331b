/*
 * The patch source's instruction decoders on hand-picked encodings: every
 * prefix and map class, the entries glibc 2.31-2.43 start with, and the
 * forms a length decoder gets wrong first (66-sized immediates, moffs,
 * ENTER, SIB without base, RIP- and EIP-relative operands, VEX/EVEX/XOP,
 * 0F38/0F3A, relative branches). The broad comparison with Capstone over
 * whole libraries is test_decode_ref.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <stdint.h>
#include <string.h>

#include <criterion/criterion.h>

#include "a64_decode.h"
#include "x86_decode.h"

#define RIP MRMGR__X86_RIPREL
#define REL (MRMGR__X86_REL | MRMGR__X86_CTRL)
#define CT MRMGR__X86_CTRL
#define NF MRMGR__X86_NOFALL
#define IND (MRMGR__X86_INDIRECT | MRMGR__X86_CTRL)
#define CALL MRMGR__X86_CALL

/* The flags compared: everything but "has a ModRM byte". */
#define CHECKED (RIP | REL | CT | NF | IND | CALL)

struct x86_case {
	const char *what;
	unsigned char len; /* 0: refused */
	unsigned char flags;
	unsigned char n;
	unsigned char b[16];
};

#define C(what, len, flags, ...) \
	{ what, len, flags, sizeof((unsigned char[]){ __VA_ARGS__ }), { __VA_ARGS__ } }

static const struct x86_case x86_cases[] = {
	/* glibc's entries, 2.31 to 2.43 */
	C("test $0xfff,%r9d (2.31/2.41/2.43 mmap)", 7, 0, 0x41, 0xf7, 0xc1, 0xff, 0x0f, 0, 0),
	C("sub $0x58,%rsp (2.41 mremap)", 4, 0, 0x48, 0x83, 0xec, 0x58),
	C("sub $0x18,%rsp (2.43 sbrk)", 4, 0, 0x48, 0x83, 0xec, 0x18),
	C("cmpb $0,disp(%rip) (2.41 sbrk)", 7, RIP, 0x80, 0x3d, 0x82, 0x5e, 0x0e, 0, 0),
	C("mov %rcx,%r10 (2.31 mremap)", 3, 0, 0x49, 0x89, 0xca),
	C("mov %ecx,%r10d (2.36 mmap)", 3, 0, 0x41, 0x89, 0xca),
	C("mov $NR,%eax", 5, 0, 0xb8, 0x0b, 0, 0, 0),
	C("endbr64", 4, 0, 0xf3, 0x0f, 0x1e, 0xfa),
	C("push %r15", 2, 0, 0x41, 0x57),
	C("push %rbp", 1, 0, 0x55),
	C("syscall", 2, CT, 0x0f, 0x05),
	/* NOPs */
	C("nopw 0(%rax,%rax)", 6, 0, 0x66, 0x0f, 0x1f, 0x44, 0, 0),
	C("cs nopw 0(%rax,%rax)", 10, 0, 0x66, 0x2e, 0x0f, 0x1f, 0x84, 0, 0, 0, 0, 0),
	C("data16 cs nopw", 11, 0, 0x66, 0x66, 0x2e, 0x0f, 0x1f, 0x84, 0, 0, 0, 0, 0),
	C("nopl (%rax)", 3, 0, 0x0f, 0x1f, 0x00),
	C("nopl 0(%rax)", 7, 0, 0x0f, 0x1f, 0x80, 0, 0, 0, 0),
	/* immediates */
	C("movabs $imm64,%rax", 10, 0, 0x48, 0xb8, 1, 2, 3, 4, 5, 6, 7, 8),
	C("mov $imm16,%ax", 4, 0, 0x66, 0xb8, 0x34, 0x12),
	C("movw $imm16,(%rsi)", 5, 0, 0x66, 0xc7, 0x06, 0x34, 0x12),
	C("cmp $0x7ff,%cx", 5, 0, 0x66, 0x81, 0xf9, 0xff, 0x07),
	C("REX.W keeps imm32 under 66", 8, 0, 0x66, 0x48, 0x81, 0xf9, 1, 2, 3, 4),
	C("test $1,%cl", 3, 0, 0xf6, 0xc1, 0x01),
	C("not %cl (F6 /2: no immediate)", 2, 0, 0xf6, 0xd1),
	C("test $imm32,%ecx", 6, 0, 0xf7, 0xc1, 1, 2, 3, 4),
	C("test $imm16,%cx", 5, 0, 0x66, 0xf7, 0xc1, 1, 2),
	C("test $imm32,%rcx (66 REX.W)", 8, 0, 0x66, 0x48, 0xf7, 0xc1, 1, 2, 3, 4),
	C("mov moffs64,%eax", 9, 0, 0xa1, 1, 2, 3, 4, 5, 6, 7, 8),
	C("mov moffs32,%eax (67)", 6, 0, 0x67, 0xa1, 1, 2, 3, 4),
	C("enter $16,$0", 4, 0, 0xc8, 0x10, 0x00, 0x00),
	C("imul $imm32,%ecx,%eax", 6, 0, 0x69, 0xc1, 1, 2, 3, 4),
	C("push $imm8", 2, 0, 0x6a, 0x01),
	C("shld $3,%eax,%ecx", 4, 0, 0x0f, 0xa4, 0xc1, 0x03),
	C("bt $3,%eax", 4, 0, 0x0f, 0xba, 0xe0, 0x03),
	C("extrq $1,$2,%xmm0 (SSE4a)", 6, 0, 0x66, 0x0f, 0x78, 0xc0, 1, 2),
	/* addressing */
	C("mov (%esp),%eax (67, SIB)", 4, 0, 0x67, 0x8b, 0x04, 0x24),
	C("mov 0x0,%eax (SIB without base)", 7, 0, 0x8b, 0x04, 0x25, 0, 0, 0, 0),
	C("mov 0(%eip),%eax (67: EIP-relative)", 7, RIP, 0x67, 0x8b, 0x05, 0, 0, 0, 0),
	C("mov 0(%rip),%rax", 7, RIP, 0x48, 0x8b, 0x05, 0, 0, 0, 0),
	C("mov %fs:0x28,%rax", 9, 0, 0x64, 0x48, 0x8b, 0x04, 0x25, 0x28, 0, 0, 0),
	C("lock cmpxchg %rcx,(%rsi)", 5, 0, 0xf0, 0x48, 0x0f, 0xb1, 0x0e),
	C("cmpl $1,disp(%rip) (imm after disp)", 7, RIP, 0x83, 0x3d, 0, 0, 0, 0, 1),
	C("mov %cr0,%rax (mod ignored)", 3, 0, 0x0f, 0x20, 0x00),
	C("rep movsq", 3, 0, 0xf3, 0x48, 0xa5),
	/* 0F38, 0F3A */
	C("pshufb %xmm1,%xmm0", 5, 0, 0x66, 0x0f, 0x38, 0x00, 0xc1),
	C("crc32 (%rsi),%eax", 5, 0, 0xf2, 0x0f, 0x38, 0xf1, 0x06),
	C("palignr $8,%xmm1,%xmm0", 6, 0, 0x66, 0x0f, 0x3a, 0x0f, 0xc1, 0x08),
	C("pcmpistri $0x1a,(%rsi),%xmm1", 6, 0, 0x66, 0x0f, 0x3a, 0x63, 0x0e, 0x1a),
	/* VEX, EVEX, XOP */
	C("vzeroupper", 3, 0, 0xc5, 0xf8, 0x77),
	C("vmovdqa (%rsi),%ymm0", 4, 0, 0xc5, 0xfd, 0x6f, 0x06),
	C("vmovdqa 0(%rip),%ymm0", 8, RIP, 0xc5, 0xfd, 0x6f, 0x05, 0, 0, 0, 0),
	C("vpbroadcastd %xmm0,%ymm0", 5, 0, 0xc4, 0xe2, 0x7d, 0x58, 0xc0),
	C("vinserti128 $1", 6, 0, 0xc4, 0xe3, 0x7d, 0x38, 0xc1, 0x01),
	C("vpshufd $0,%ymm1,%ymm0 (VEX 0F ib)", 5, 0, 0xc5, 0xfd, 0x70, 0xc1, 0x00),
	C("vmovdqa32 (%rsi),%zmm0", 6, 0, 0x62, 0xf1, 0x7d, 0x48, 0x6f, 0x06),
	C("vmovdqu64 0x40(%rsi),%zmm0 (disp8*N)", 7, 0, 0x62, 0xf1, 0xfe, 0x48, 0x6f, 0x46, 0x01),
	C("vpcmpb $0,%zmm1,%zmm0,%k0", 7, 0, 0x62, 0xf3, 0x7d, 0x48, 0x3f, 0xc1, 0x00),
	C("vmovdqa32 0(%rip),%zmm0", 10, RIP, 0x62, 0xf1, 0x7d, 0x48, 0x6f, 0x05, 0, 0, 0, 0),
	C("vptestmb %ymm16,%ymm0,%k2 (EVEX.R')", 6, 0, 0x62, 0xb2, 0x7d, 0x20, 0x26, 0xd0),
	C("vprotb $5 (XOP map 8)", 6, 0, 0x8f, 0xe8, 0x78, 0xc0, 0xc1, 0x05),
	C("pop (%rax) (8F /0, not XOP)", 2, 0, 0x8f, 0x00),
	/* control transfers */
	C("call rel32", 5, REL | CALL, 0xe8, 0, 0, 0, 0),
	C("jmp rel32", 5, REL | NF, 0xe9, 0, 0, 0, 0),
	C("jmp rel8", 2, REL | NF, 0xeb, 0xfe),
	C("je rel8", 2, REL, 0x74, 0x05),
	C("je rel8 with a hint prefix", 3, REL, 0x2e, 0x74, 0x05),
	C("je rel32", 6, REL, 0x0f, 0x84, 0, 0, 0, 0),
	C("loop rel8", 2, REL, 0xe2, 0xfe),
	C("jrcxz rel8", 2, REL, 0xe3, 0xfe),
	C("bnd jmp rel32", 6, REL | NF, 0xf2, 0xe9, 0, 0, 0, 0),
	C("xbegin rel32", 6, REL, 0xc7, 0xf8, 0, 0, 0, 0),
	C("xabort $1", 3, 0, 0xc6, 0xf8, 0x01),
	C("jmp *0(%rip)", 6, RIP | IND | NF, 0xff, 0x25, 0, 0, 0, 0),
	C("notrack jmp *%rax", 3, IND | NF, 0x3e, 0xff, 0xe0),
	C("call *%rax", 2, IND | CALL, 0xff, 0xd0),
	C("ret", 1, CT | NF, 0xc3),
	C("ret $8", 3, CT | NF, 0xc2, 0x08, 0x00),
	C("ud2", 2, CT | NF, 0x0f, 0x0b),
	C("int3", 1, CT, 0xcc),
	/* refused */
	C("push %es: invalid in 64-bit mode", 0, 0, 0x06),
	C("3DNow!", 0, 0, 0x0f, 0x0f, 0xc1, 0xb4),
	C("EVEX map 4 (APX)", 0, 0, 0x62, 0xf4, 0x7c, 0x08, 0x01, 0xc1),
	C("REX before VEX", 0, 0, 0x48, 0xc5, 0xf8, 0x77),
	C("FF /7", 0, 0, 0xff, 0xf8),
	C("truncated call", 0, 0, 0xe8, 0, 0),
	C("truncated ModRM", 0, 0, 0x48, 0x8b),
	C("14 prefixes: 15 bytes", 15, 0, 0x66, 0x66, 0x66, 0x66, 0x66, 0x66, 0x66,
	  0x66, 0x66, 0x66, 0x66, 0x66, 0x66, 0x66, 0x90),
	C("15 prefixes: over 15 bytes", 0, 0, 0x66, 0x66, 0x66, 0x66, 0x66, 0x66,
	  0x66, 0x66, 0x66, 0x66, 0x66, 0x66, 0x66, 0x66, 0x66, 0x90),
};

Test(x86, hand_picked_encodings)
{
	for (size_t i = 0; i < sizeof(x86_cases) / sizeof(x86_cases[0]); i++) {
		const struct x86_case *c = &x86_cases[i];
		struct mrmgr__x86_insn in;
		size_t len = mrmgr__x86_decode(c->b, c->n, &in);

		cr_expect_eq(len, c->len, "%s: length %zu, expected %u", c->what,
			     len, c->len);
		if (len && len == c->len)
			cr_expect_eq(in.flags & CHECKED, c->flags,
				     "%s: flags %#x, expected %#x", c->what,
				     in.flags & CHECKED, c->flags);
	}
}

Test(x86, branch_offsets)
{
	static const unsigned char jmp8[] = { 0xeb, 0xfe },
				   call[] = { 0xe8, 0x10, 0, 0, 0 },
				   jcc[] = { 0x0f, 0x85, 0xf0, 0xff, 0xff, 0xff };
	struct mrmgr__x86_insn in;

	cr_assert_eq(mrmgr__x86_decode(jmp8, sizeof(jmp8), &in), 2);
	cr_expect_eq(in.rel, -2);
	cr_assert_eq(mrmgr__x86_decode(call, sizeof(call), &in), 5);
	cr_expect_eq(in.rel, 16);
	cr_assert_eq(mrmgr__x86_decode(jcc, sizeof(jcc), &in), 6);
	cr_expect_eq(in.rel, -16);
}

Test(x86, nops_are_told_apart)
{
	static const unsigned char nop[] = { 0x66, 0x0f, 0x1f, 0x44, 0, 0 },
				   xchg_r8[] = { 0x41, 0x90 },
				   pause[] = { 0xf3, 0x90 },
				   prefetch[] = { 0x0f, 0x18, 0x08 },
				   hint_nop1[] = { 0x0f, 0x1f, 0xc8 };
	struct mrmgr__x86_insn in;

	cr_assert(mrmgr__x86_decode(nop, sizeof(nop), &in));
	cr_expect(mrmgr__x86_is_nop(&in));
	cr_assert(mrmgr__x86_decode(xchg_r8, sizeof(xchg_r8), &in));
	cr_expect_not(mrmgr__x86_is_nop(&in), "41 90 is xchg %%eax,%%r8d");
	cr_assert(mrmgr__x86_decode(pause, sizeof(pause), &in));
	cr_expect_not(mrmgr__x86_is_nop(&in));
	cr_assert(mrmgr__x86_decode(prefetch, sizeof(prefetch), &in));
	cr_expect_not(mrmgr__x86_is_nop(&in));
	cr_assert(mrmgr__x86_decode(hint_nop1, sizeof(hint_nop1), &in));
	cr_expect_not(mrmgr__x86_is_nop(&in), "0f 1f /1 is not the NOP form");
}

struct a64_case {
	const char *what;
	uint32_t v;
	unsigned int flags;
	int64_t rel;
};

#define PD MRMGR__A64_POSDEP
#define AC MRMGR__A64_CTRL

static const struct a64_case a64_cases[] = {
	{ "bti c", 0xd503245f, MRMGR__A64_BTI | MRMGR__A64_HINT, 0 },
	{ "bti jc", 0xd50324df, MRMGR__A64_BTI | MRMGR__A64_HINT, 0 },
	{ "paciasp", 0xd503233f, MRMGR__A64_PAC | MRMGR__A64_HINT, 0 },
	{ "pacibsp", 0xd503237f, MRMGR__A64_PAC | MRMGR__A64_HINT, 0 },
	{ "nop", 0xd503201f, MRMGR__A64_HINT, 0 },
	{ "xpaclri (hint #7: not a PAC signing hint)", 0xd50320ff, MRMGR__A64_HINT, 0 },
	{ "adr x0, .+8", 0x10000040, PD, 8 },
	{ "adrp x5, page", 0xb0000605, PD, 0 },
	{ "ldr x0, .+8 (literal)", 0x58000040, PD, 8 },
	{ "ldrsw x0, .+8 (literal)", 0x98000040, PD, 8 },
	{ "b .+4", 0x14000001, PD | AC | MRMGR__A64_BRANCH, 4 },
	{ "bl .-4", 0x97ffffff, PD | AC | MRMGR__A64_BRANCH, -4 },
	{ "cbz x0, .+8", 0xb4000040, PD | AC, 8 },
	{ "tbz w0, #0, .+8", 0x36000040, PD | AC, 8 },
	{ "b.ne .+8", 0x54000041, PD | AC, 8 },
	{ "br x16", 0xd61f0200, AC, 0 },
	{ "ret", 0xd65f03c0, AC, 0 },
	{ "svc #0", 0xd4000001, AC, 0 },
	{ "mov x8, #215", 0xd2801ae8, 0, 0 },
	{ "tst x5, #0xfff (2.41 mmap)", 0xf2402cbf, 0, 0 },
	{ "sub sp, sp, #0x50 (2.41 mremap)", 0xd10143ff, 0, 0 },
	{ "ldr x0, [x1]", 0xf9400020, 0, 0 },
};

Test(a64, hand_picked_words)
{
	for (size_t i = 0; i < sizeof(a64_cases) / sizeof(a64_cases[0]); i++) {
		const struct a64_case *c = &a64_cases[i];
		int64_t rel = 0;
		unsigned int f = mrmgr__a64_classify(c->v, &rel);

		cr_expect_eq(f, c->flags, "%s: %#x, expected %#x", c->what, f, c->flags);
		if (c->flags & PD && !(c->v & 0x80000000u && (c->v & 0x1f000000u) == 0x10000000u))
			cr_expect_eq(rel, c->rel, "%s: offset %lld", c->what, (long long)rel);
	}
}
