/*
 * An x86-64 instruction-length decoder for the patch source: how long an
 * instruction is, whether it depends on where it sits (RIP-relative
 * operand, relative branch), whether it transfers control. Table driven,
 * no allocation, no state: the patcher calls it at install only, never on
 * a hot path. Built on every host so the tests can compare it with a
 * reference disassembler anywhere.
 *
 * Covers 64-bit mode: legacy prefixes (66, 67, F2, F3, F0, segments), REX,
 * VEX (C4/C5), EVEX (62, maps 0F, 0F38, 0F3A, 5, 6), XOP (8F, maps 8-A),
 * the one-byte, 0F, 0F38 and 0F3A maps, ModRM/SIB/displacements (32-bit
 * addressing under 67: 16-bit forms do not exist in 64-bit mode), every
 * immediate form (66-sized, moffs, ENTER, 64-bit mov). Refused (length 0):
 * opcodes invalid in 64-bit mode, AMD 3DNow! (0F 0F), APX's EVEX map 4 and
 * any map not listed, truncated input, more than 15 bytes.
 *
 * SPDX-License-Identifier: MIT
 */
#ifndef MRMGR__X86_DECODE_H
#define MRMGR__X86_DECODE_H

#include <stddef.h>
#include <stdint.h>

enum mrmgr__x86_flags {
	MRMGR__X86_MODRM = 1u << 0,    /* has a ModRM byte */
	MRMGR__X86_RIPREL = 1u << 1,   /* memory operand relative to RIP */
	MRMGR__X86_REL = 1u << 2,      /* relative branch: jmp, jcc, call, loop,
					* jrcxz, xbegin (target in .rel) */
	MRMGR__X86_CTRL = 1u << 3,     /* may transfer control: branches, calls,
					* returns, interrupts, syscall, traps */
	MRMGR__X86_NOFALL = 1u << 4,   /* never continues with the next one:
					* jmp, ret, iret, ud2, hlt, sysret */
	MRMGR__X86_INDIRECT = 1u << 5, /* jmp/call through a register or memory */
	MRMGR__X86_CALL = 1u << 6,     /* a call */
};

/* Which opcode map the opcode byte belongs to. */
enum mrmgr__x86_map {
	MRMGR__X86_MAP_1 = 1,   /* one-byte */
	MRMGR__X86_MAP_0F,
	MRMGR__X86_MAP_0F38,
	MRMGR__X86_MAP_0F3A,
	MRMGR__X86_MAP_VEX,     /* VEX, EVEX or XOP: .vmap says which */
};

struct mrmgr__x86_insn {
	uint8_t len;
	uint8_t flags;     /* enum mrmgr__x86_flags */
	uint8_t map;       /* enum mrmgr__x86_map */
	uint8_t vmap;      /* VEX/EVEX/XOP map field */
	uint8_t op;        /* the opcode byte */
	uint8_t modrm;     /* valid with MRMGR__X86_MODRM */
	uint8_t rex;       /* the REX byte in effect, or 0 */
	uint8_t opsize16;  /* a 66 prefix */
	uint8_t rep;       /* the last F2/F3 prefix, or 0 */
	uint8_t disp_off, disp_len; /* displacement bytes within the insn */
	uint8_t imm_off, imm_len;   /* immediate bytes (a branch's offset) */
	int64_t rel;       /* MRMGR__X86_REL: target = address + len + rel */
};

/* Decode the instruction at p (at most n bytes readable): its length
 * (1-15) and *in, or 0 when it is invalid, unknown or truncated. */
size_t mrmgr__x86_decode(const uint8_t *p, size_t n, struct mrmgr__x86_insn *in);

/* Position dependent: moving it elsewhere would change what it does. */
static inline int mrmgr__x86_posdep(const struct mrmgr__x86_insn *in)
{
	return !!(in->flags & (MRMGR__X86_RIPREL | MRMGR__X86_REL));
}

/* A NOP the compilers and assemblers pad with (90, 66..90, 0F 1F /0 with
 * prefixes, 2E/3E-prefixed forms) or int3 padding. */
int mrmgr__x86_is_nop(const struct mrmgr__x86_insn *in);

#endif /* MRMGR__X86_DECODE_H */
