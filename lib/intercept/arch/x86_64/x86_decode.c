/*
 * x86-64 instruction lengths (see x86_decode.h). Written from the Intel
 * SDM volume 2 opcode maps (appendix A) and AMD's APM volume 3 for XOP;
 * checked against Capstone in tests/unit/test_x86_decode.c over every
 * exported function of several libcs, libibverbs and libucs.
 *
 * Choices where the vendors differ: a 66 prefix on a near branch (E8, E9,
 * 0F 8x, C7 F8) keeps a 32-bit offset, as on Intel processors (AMD would
 * take 16 bits); compilers never emit it.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <string.h>

#include "x86_decode.h"

/* Per opcode: the immediate (low 3 bits) and what the opcode is. */
enum {
	I0 = 0,  /* no immediate */
	IB = 1,  /* 8 bits */
	IW = 2,  /* 16 bits */
	IZ = 3,  /* 16 with 66, else 32 */
	IV = 4,  /* 64 with REX.W, 16 with 66, else 32 (B8+r) */
	IO = 5,  /* moffs: 32 with 67, else 64 */
	IE = 6,  /* ENTER: 16 + 8 */
	IG = 7,  /* F6/F7: ib/iz for /0 and /1 only */
	M = 1 << 3,        /* ModRM follows */
	R = 1 << 4,        /* relative branch */
	C = 1 << 5,        /* control transfer */
	U = 1 << 6,        /* no fall-through */
	X = 1 << 7,        /* invalid in 64-bit mode (or refused) */
	S = 1 << 8,        /* handled specially (prefix, escape, VEX/EVEX) */
	F = 1 << 9,        /* ModRM always a register (mod ignored) */
};

#define MI (M | IB)
#define MZ (M | IZ)
#define JB (IB | R | C)
#define JZ (IZ | R | C)

static const uint16_t one_byte[256] = {
	/* 00 */ M, M, M, M, IB, IZ, X, X, M, M, M, M, IB, IZ, X, S,
	/* 10 */ M, M, M, M, IB, IZ, X, X, M, M, M, M, IB, IZ, X, X,
	/* 20 */ M, M, M, M, IB, IZ, S, X, M, M, M, M, IB, IZ, S, X,
	/* 30 */ M, M, M, M, IB, IZ, S, X, M, M, M, M, IB, IZ, S, X,
	/* 40 */ S, S, S, S, S, S, S, S, S, S, S, S, S, S, S, S,
	/* 50 */ 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
	/* 60 */ X, X, S, M, S, S, S, S, IZ, MZ, IB, MI, 0, 0, 0, 0,
	/* 70 */ JB, JB, JB, JB, JB, JB, JB, JB, JB, JB, JB, JB, JB, JB, JB, JB,
	/* 80 */ MI, MZ, X, MI, M, M, M, M, M, M, M, M, M, M, M, S,
	/* 90 */ 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, X, 0, 0, 0, 0, 0,
	/* a0 */ IO, IO, IO, IO, 0, 0, 0, 0, IB, IZ, 0, 0, 0, 0, 0, 0,
	/* b0 */ IB, IB, IB, IB, IB, IB, IB, IB, IV, IV, IV, IV, IV, IV, IV, IV,
	/* c0 */ MI, MI, IW | C | U, C | U, S, S, MI, S, IE, 0, IW | C | U, C | U,
		 C, IB | C, X, C | U,
	/* d0 */ M, M, M, M, X, X, X, 0, M, M, M, M, M, M, M, M,
	/* e0 */ JB, JB, JB, JB, IB, IB, IB, IB, JZ | IZ, JZ | U, X, JB | U, 0, 0, 0, 0,
	/* f0 */ S, C, S, S, C | U, 0, M | IG, M | IG, 0, 0, 0, 0, 0, 0, M, S,
};

static const uint16_t two_byte[256] = {
	/* 00 */ M, M, M, M, X, C, 0, C | U, 0, 0, X, C | U, X, M, 0, X,
	/* 10 */ M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M,
	/* 20 */ F, F, F, F, X, X, X, X, M, M, M, M, M, M, M, M,
	/* 30 */ 0, 0, 0, 0, C | U, C | U, X, 0, S, X, S, X, X, X, X, X,
	/* 40 */ M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M,
	/* 50 */ M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M,
	/* 60 */ M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M,
	/* 70 */ MI, MI, MI, MI, M, M, M, 0, S, M, X, X, M, M, M, M,
	/* 80 */ JZ, JZ, JZ, JZ, JZ, JZ, JZ, JZ, JZ, JZ, JZ, JZ, JZ, JZ, JZ, JZ,
	/* 90 */ M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M,
	/* a0 */ 0, 0, 0, M, MI, M, X, X, 0, 0, 0, M, MI, M, M, M,
	/* b0 */ M, M, M, M, M, M, M, M, M, M | C | U, MI, M, M, M, M, M,
	/* c0 */ M, M, MI, M, MI, MI, MI, M, 0, 0, 0, 0, 0, 0, 0, 0,
	/* d0 */ M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M,
	/* e0 */ M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M,
	/* f0 */ M, M, M, M, M, M, M, M, M, M, M, M, M, M, M, M | C | U,
};

/* The 0F-map opcodes taking an 8-bit immediate under VEX/EVEX too. */
static int vex0f_ib(uint8_t op)
{
	return (op >= 0x70 && op <= 0x73) || op == 0xc2 ||
	       (op >= 0xc4 && op <= 0xc6);
}

static int64_t sx(const uint8_t *p, unsigned int len)
{
	switch (len) {
	case 1:
		return (int8_t)p[0];
	case 2: {
		int16_t v;

		memcpy(&v, p, 2);
		return v;
	}
	case 4: {
		int32_t v;

		memcpy(&v, p, 4);
		return v;
	}
	default: {
		int64_t v;

		memcpy(&v, p, 8);
		return v;
	}
	}
}

/* ModRM, SIB and displacement at p[i]: the index after them, or 0. */
static size_t modrm_at(const uint8_t *p, size_t n, size_t i, uint16_t kind,
		       struct mrmgr__x86_insn *in)
{
	uint8_t mod, rm;

	if (i >= n)
		return 0;
	in->flags |= MRMGR__X86_MODRM;
	in->modrm = p[i++];
	mod = in->modrm >> 6;
	rm = in->modrm & 7;
	if (mod == 3 || (kind & F))
		return i;
	if (rm == 4) { /* SIB */
		if (i >= n)
			return 0;
		if (mod == 0 && (p[i] & 7) == 5)
			in->disp_len = 4; /* no base: absolute disp32 */
		i++;
	} else if (mod == 0 && rm == 5) {
		in->disp_len = 4;
		in->flags |= MRMGR__X86_RIPREL;
	}
	if (mod == 1)
		in->disp_len = 1;
	else if (mod == 2)
		in->disp_len = 4;
	in->disp_off = (uint8_t)i;
	return i + in->disp_len;
}

/* The immediate's length for kind (and the decoded prefixes). */
static unsigned int imm_len(uint16_t kind, const struct mrmgr__x86_insn *in,
			    int addr32)
{
	switch (kind & 7) {
	case IB:
		return 1;
	case IW:
		return 2;
	case IZ:
		/* REX.W wins over 66; near branches keep 32 bits (Intel). */
		return in->opsize16 && !(in->rex & 8) && !(kind & R) ? 2 : 4;
	case IV:
		return (in->rex & 8) ? 8 : in->opsize16 ? 2 : 4;
	case IO:
		return addr32 ? 4 : 8;
	case IE:
		return 3;
	case IG:
		if ((in->modrm >> 3 & 7) > 1)
			return 0;
		return in->op == 0xf6 ? 1 : in->opsize16 && !(in->rex & 8) ? 2 : 4;
	default:
		return 0;
	}
}

/* VEX (C4, C5), EVEX (62) or XOP (8F) at p[i]: the index after the
 * opcode (*kind set for the rest), or 0. */
static size_t vex_at(const uint8_t *p, size_t n, size_t i, uint16_t *kind,
		     struct mrmgr__x86_insn *in)
{
	uint8_t esc = p[i], map;

	in->map = MRMGR__X86_MAP_VEX;
	if (esc == 0xc5) {
		if (i + 3 > n)
			return 0;
		map = 1;
		i += 2;
	} else if (esc == 0xc4 || esc == 0x8f) {
		if (i + 4 > n)
			return 0;
		map = p[i + 1] & 0x1f;
		i += 3;
	} else { /* 62 */
		if (i + 5 > n)
			return 0;
		map = p[i + 1] & 7;
		if (p[i + 1] & 8 || !(p[i + 2] & 4))
			return 0; /* reserved bits: not an EVEX we know */
		i += 4;
	}
	in->vmap = map;
	in->op = p[i];
	*kind = M;
	if (esc == 0x8f) {
		if (map == 8)
			*kind = MI;
		else if (map == 0xa)
			*kind = M | IZ; /* always 32 bits: 66 cannot precede */
		else if (map != 9)
			return 0;
	} else if (map == 1) {
		if (esc != 0x62 && in->op == 0x77)
			*kind = 0; /* vzeroupper, vzeroall */
		else if (vex0f_ib(in->op))
			*kind = MI;
	} else if (map == 3) {
		*kind = MI;
	} else if (map != 2 && !(esc == 0x62 && (map == 5 || map == 6))) {
		return 0; /* APX map 4, VEX map 7, unknown maps */
	}
	return i + 1;
}

/* Legacy prefixes and REX from p[0]: the opcode's index, n when they
 * fill all n bytes. A REX counts only right before the opcode, so any
 * prefix after one cancels it. */
static size_t prefixes_at(const uint8_t *p, size_t n,
			  struct mrmgr__x86_insn *in, int *addr32)
{
	size_t i;

	for (i = 0; i < n; i++) {
		switch (p[i]) {
		case 0x66:
			in->opsize16 = 1;
			in->rex = 0;
			continue;
		case 0x67:
			*addr32 = 1;
			in->rex = 0;
			continue;
		case 0xf2:
		case 0xf3:
			in->rep = p[i];
			in->rex = 0;
			continue;
		case 0xf0: case 0x2e: case 0x36: case 0x3e: case 0x26:
		case 0x64: case 0x65:
			in->rex = 0;
			continue;
		default:
			break;
		}
		if ((p[i] & 0xf0) == 0x40) {
			in->rex = p[i];
			continue;
		}
		break;
	}
	return i;
}

/* The 0F escape at p[i]: the two-byte map, or the three-byte 0F38 and
 * 0F3A maps behind it. The index after the opcode (*kind set), or 0. */
static size_t map0f_at(const uint8_t *p, size_t n, size_t i, uint16_t *kind,
		       struct mrmgr__x86_insn *in)
{
	if (++i >= n)
		return 0;
	in->op = p[i];
	in->map = MRMGR__X86_MAP_0F;
	*kind = two_byte[in->op];
	if (in->op == 0x38 || in->op == 0x3a) {
		if (++i >= n)
			return 0;
		in->map = in->op == 0x38 ? MRMGR__X86_MAP_0F38
					 : MRMGR__X86_MAP_0F3A;
		in->op = p[i];
		*kind = in->map == MRMGR__X86_MAP_0F38 ? M : MI;
	} else if (in->op == 0x78 && (in->opsize16 || in->rep == 0xf2)) {
		*kind = M | IW; /* SSE4a extrq/insertq: two ib */
	}
	return i + 1;
}

/* The opcode at p[i], past the prefixes, in whichever map it opens: the
 * index after it (*kind says what follows), or 0. */
static size_t opcode_at(const uint8_t *p, size_t n, size_t i, uint16_t *kind,
			struct mrmgr__x86_insn *in)
{
	in->op = p[i];
	in->map = MRMGR__X86_MAP_1;
	*kind = one_byte[in->op];
	if (in->op == 0x0f)
		return map0f_at(p, n, i, kind, in);
	/* 8F is XOP only with a map field of 8 or more (else it is pop). */
	if (in->op == 0xc4 || in->op == 0xc5 || in->op == 0x62 ||
	    (in->op == 0x8f && i + 1 < n && (p[i + 1] & 0x1f) >= 8)) {
		if (in->rex)
			return 0; /* REX before VEX/EVEX/XOP: #UD */
		return vex_at(p, n, i, kind, in);
	}
	if (*kind & S && in->op != 0x8f && in->op != 0xc7 && in->op != 0xff)
		return 0; /* a prefix past the limit */
	if (in->op == 0x8f)
		*kind = M;
	else if (in->op == 0xc7)
		*kind = MZ;
	else if (in->op == 0xff)
		*kind = M;
	return i + 1;
}

/* The one-byte map's groups whose meaning depends on ModRM.reg (FF's
 * indirect branches, C6/C7's xbegin, 8F's pop) and E8's call: 0, or -1
 * for an encoding that does not exist. */
static int map1_groups(struct mrmgr__x86_insn *in, uint16_t *kind)
{
	unsigned int reg = in->modrm >> 3 & 7;

	if (in->op == 0xff) {
		if (reg == 7)
			return -1;
		if (reg >= 2 && reg <= 5)
			in->flags |= MRMGR__X86_CTRL | MRMGR__X86_INDIRECT |
				     (reg <= 3 ? MRMGR__X86_CALL
					       : MRMGR__X86_NOFALL);
	} else if (in->op == 0xc7 && in->modrm == 0xf8) {
		*kind |= R | C; /* xbegin rel32 */
	} else if ((in->op == 0xc6 || in->op == 0xc7) && reg &&
		   in->modrm != 0xf8) {
		return -1;
	} else if (in->op == 0x8f && reg) {
		return -1;
	}
	if (in->op == 0xe8)
		in->flags |= MRMGR__X86_CALL;
	return 0;
}

/* The immediate at p[i], and the flags kind gives: the instruction's
 * length, or 0 when it runs past n. */
static size_t imm_at(const uint8_t *p, size_t n, size_t i, uint16_t kind,
		     int addr32, struct mrmgr__x86_insn *in)
{
	unsigned int il = imm_len(kind, in, addr32);

	in->imm_off = (uint8_t)i;
	in->imm_len = (uint8_t)il;
	i += il;
	if (i > n)
		return 0;
	if (kind & R) {
		in->flags |= MRMGR__X86_REL;
		in->rel = sx(p + in->imm_off, il);
	}
	if (kind & C)
		in->flags |= MRMGR__X86_CTRL;
	if (kind & U)
		in->flags |= MRMGR__X86_NOFALL;
	in->len = (uint8_t)i;
	return i;
}

size_t mrmgr__x86_decode(const uint8_t *p, size_t n, struct mrmgr__x86_insn *in)
{
	size_t i;
	int addr32 = 0;
	uint16_t kind;

	memset(in, 0, sizeof(*in));
	if (n > 15)
		n = 15;
	i = prefixes_at(p, n, in, &addr32);
	if (i >= n)
		return 0;
	i = opcode_at(p, n, i, &kind, in);
	if (!i || kind & X)
		return 0;
	if (kind & (M | F)) {
		i = modrm_at(p, n, i, kind, in);
		if (!i)
			return 0;
	}
	if (in->map == MRMGR__X86_MAP_1 && map1_groups(in, &kind))
		return 0;
	return imm_at(p, n, i, kind, addr32, in);
}

int mrmgr__x86_is_nop(const struct mrmgr__x86_insn *in)
{
	if (in->map == MRMGR__X86_MAP_1)
		return (in->op == 0x90 && !(in->rex & 1) && in->rep != 0xf3) ||
		       in->op == 0xcc;
	return in->map == MRMGR__X86_MAP_0F && in->op == 0x1f &&
	       !(in->modrm & 0x38);
}
