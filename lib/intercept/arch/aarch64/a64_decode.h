/*
 * What an AArch64 instruction word is, for the patch source's decision on
 * an entry's first instruction: a landing pad (BTI), a pointer-
 * authentication hint (PACIASP, ...), position dependent (ADR, ADRP, LDR
 * literal, B, BL, CBZ/CBNZ, TBZ/TBNZ, B.cond), a control transfer.
 * Every instruction is one aligned 32-bit word, so there is no length to
 * find. Built on every host so the tests can compare it with a reference
 * disassembler anywhere.
 *
 * SPDX-License-Identifier: MIT
 */
#ifndef MRMGR__A64_DECODE_H
#define MRMGR__A64_DECODE_H

#include <stdint.h>

enum mrmgr__a64_flags {
	MRMGR__A64_POSDEP = 1u << 0,  /* PC-relative: adr(p), literal loads,
				       * direct branches */
	MRMGR__A64_CTRL = 1u << 1,    /* branches, returns, exceptions, udf */
	MRMGR__A64_BTI = 1u << 2,     /* bti (c, j, jc: a landing pad) */
	MRMGR__A64_PAC = 1u << 3,     /* pac*sp / pac*z / aut* hints */
	MRMGR__A64_HINT = 1u << 4,    /* anything in the hint space (nop too) */
	MRMGR__A64_BRANCH = 1u << 5,  /* b, bl: imm26 offset in .rel */
};

/* enum mrmgr__a64_flags for the word v; *rel the byte offset of a direct
 * b/bl/b.cond/cbz/tbz target or adr/adrp/literal operand (adrp: pages). */
unsigned int mrmgr__a64_classify(uint32_t v, int64_t *rel);

#endif /* MRMGR__A64_DECODE_H */
