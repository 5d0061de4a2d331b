/*
 * Entry shapes of glibc's arm64 wrappers built with
 * -mbranch-protection=standard (trixie, sid): `bti c` before the body,
 * `paciasp` as the first instruction of a function without `bti` (2.41's
 * mremap), a PC-relative first instruction after `bti c`. Patched by the
 * engine in tests/cross/patch_aarch64.c while threads call them through
 * function pointers (indirect calls: on BTI-guarded pages they must land
 * on a landing pad, also once patched). Linked into the BTI-marked test
 * program; exported (-rdynamic) so the engine finds their sizes.
 *
 * Each behaves as a system-call wrapper on the arguments the test gives,
 * returning the kernel's -EINVAL. The shape_refused_* ones must be refused.
 *
 * SPDX-License-Identifier: MIT
 */
#define FN(name) .globl name; .type name, %function; .p2align 4; name:
#define END(name) .size name, . - name

	.text

/* munmap, madvise, ... : bti c; mov x8, #NR; svc #0 */
FN(shape_bti_movnr)
	bti c
	mov x8, #215
	svc #0
	ret
END(shape_bti_movnr)

/* 2.41/2.43 mremap: paciasp is the landing pad, sub sp follows */
FN(shape_paciasp_sub)
	paciasp
	sub sp, sp, #0x50
	mov x8, #216
	svc #0
	add sp, sp, #0x50
	autiasp
	ret
END(shape_paciasp_sub)

/* 2.41/2.43 mmap: bti c; tst x5, #0xfff */
FN(shape_bti_tst)
	bti c
	tst x5, #0xfff
	b.ne 1f
	mov x8, #222
	svc #0
	ret
1:	mov x0, #-22
	ret
END(shape_bti_tst)

/* a PC-relative first instruction after bti c (2.41 sbrk's adrp) */
FN(shape_bti_adrp)
	bti c
	adrp x9, shape_a64_flag
	ldrb w9, [x9, #:lo12:shape_a64_flag]
	mov x8, #233
	svc #0
	ret
END(shape_bti_adrp)

/* Refused: a conditional branch first (a `b` would be taken for another
 * patcher's jump, and chained to). */
FN(shape_refused_b_first)
	bti c
	cbz x0, 1f
1:	mov x8, #215
	svc #0
	ret
END(shape_refused_b_first)

/* Refused: the body comes back to the replaced instruction. */
FN(shape_refused_loop)
	bti c
1:	mov x8, #215
	svc #0
	cmn x0, #4
	b.eq 1b
	ret
END(shape_refused_loop)

	.data
shape_a64_flag:
	.byte 0

	.section .note.GNU-stack, "", %progbits
