/*
 * AArch64 instruction classes for the patch source (see a64_decode.h),
 * from the Arm ARM's top-level encoding tables (C4.1). Checked against
 * Capstone's arm64 mode in tests/unit/test_x86_decode.c over every
 * exported function of the arm64 libcs of the libc matrix.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include "a64_decode.h"

static int64_t sext(uint64_t v, unsigned int bits)
{
	return (int64_t)(v << (64 - bits)) >> (64 - bits);
}

unsigned int mrmgr__a64_classify(uint32_t v, int64_t *rel)
{
	int64_t r = 0;
	unsigned int f = 0;

	if ((v & 0xfffff01fu) == 0xd503201fu) { /* hint #imm7 */
		unsigned int imm = (v >> 5) & 0x7f;

		f = MRMGR__A64_HINT;
		if (imm >= 24 && imm <= 31)
			f |= MRMGR__A64_PAC; /* paciaz, paciasp, ..., autibsp */
		else if (imm == 32 || imm == 34 || imm == 36 || imm == 38)
			f |= MRMGR__A64_BTI;
	} else if ((v & 0x1f000000u) == 0x10000000u) { /* adr, adrp */
		r = sext(((v >> 29) & 3) | (uint64_t)((v >> 5) & 0x7ffff) << 2, 21);
		f = MRMGR__A64_POSDEP;
	} else if ((v & 0x3b000000u) == 0x18000000u) { /* ldr/ldrsw/prfm literal */
		r = sext((v >> 5) & 0x7ffff, 19) * 4;
		f = MRMGR__A64_POSDEP;
	} else if ((v & 0x7c000000u) == 0x14000000u) { /* b, bl */
		r = sext(v & 0x3ffffff, 26) * 4;
		f = MRMGR__A64_POSDEP | MRMGR__A64_CTRL | MRMGR__A64_BRANCH;
	} else if ((v & 0x7c000000u) == 0x34000000u) { /* cbz/cbnz, tbz/tbnz */
		r = (v & 0x02000000u) ? sext((v >> 5) & 0x3fff, 14) * 4
				      : sext((v >> 5) & 0x7ffff, 19) * 4;
		f = MRMGR__A64_POSDEP | MRMGR__A64_CTRL;
	} else if ((v & 0xff000000u) == 0x54000000u) { /* b.cond, bc.cond */
		r = sext((v >> 5) & 0x7ffff, 19) * 4;
		f = MRMGR__A64_POSDEP | MRMGR__A64_CTRL;
	} else if ((v & 0xfe000000u) == 0xd6000000u || /* br, blr, ret, eret, ... */
		   (v & 0xff000000u) == 0xd4000000u || /* svc, hvc, smc, brk, hlt */
		   (v & 0xffff0000u) == 0) {          /* udf */
		f = MRMGR__A64_CTRL;
	}
	if (rel)
		*rel = r;
	return f;
}
