/*
 * Entry shapes glibc's mmap, mremap, madvise, brk, sbrk compile to under
 * gcc 10-14 and clang, with and without CET (endbr64), as exact bytes:
 * the functions of a test shared object (built with -fcf-protection=full,
 * so it carries the IBT/SHSTK property) that test_entry_shapes patches
 * with the libc patch engine while threads call them.
 *
 * Each behaves as a system-call wrapper on the arguments the test gives
 * (the kernel, or the wrapper itself, refuses them: -EINVAL in %rax) and
 * holds `mov $NR, %eax; syscall` the way glibc's do. The shapes_refused_*
 * ones must be refused by the engine.
 *
 * SPDX-License-Identifier: MIT
 */
#include <cet.h>

#ifndef _CET_ENDBR
#define _CET_ENDBR .byte 0xf3, 0x0f, 0x1e, 0xfa
#endif

#define FN(name) .globl name; .type name, @function; name:
#define END(name) .size name, . - name

	.text

/* 2.31/2.41/2.43 mmap: endbr64 + test $0xfff,%r9d (7 bytes) */
	.p2align 4
FN(shape_mmap)
	_CET_ENDBR
	test $0xfff, %r9d
	jne 1f
	mov %ecx, %r10d
	mov $9, %eax
	syscall
	ret
1:	mov $-22, %rax
	ret
END(shape_mmap)

/* 2.41/2.43 mremap: endbr64 + sub $0x58,%rsp (4 bytes: the short jump to
 * the padding before the function) */
	.p2align 4
FN(shape_mremap)
	_CET_ENDBR
	sub $0x58, %rsp
	mov %rcx, %r10
	mov $25, %eax
	syscall
	add $0x58, %rsp
	ret
END(shape_mremap)

/* 2.31 mremap: mov %rcx,%r10 (3 bytes), no endbr64 */
	.p2align 4
FN(shape_mremap_231)
	mov %rcx, %r10
	mov $25, %eax
	syscall
	ret
END(shape_mremap_231)

/* 2.41 sbrk-like: a RIP-relative first instruction (7 bytes) */
	.p2align 4
FN(shape_riprel)
	_CET_ENDBR
	cmpb $0, shape_flag(%rip)
	jne 1f
	mov $28, %eax
	syscall
	ret
1:	mov $-1, %rax
	ret
END(shape_riprel)

/* munmap, madvise, brk, shmat, shmdt: mov $NR,%eax (5 bytes) */
	.p2align 4
FN(shape_movnr)
	_CET_ENDBR
	mov $11, %eax
	syscall
	ret
END(shape_movnr)

/* a callee-saved push of r8-r15 (2 bytes) */
	.p2align 4
FN(shape_push_r15)
	_CET_ENDBR
	push %r15
	mov $11, %eax
	syscall
	pop %r15
	ret
END(shape_push_r15)
	/* the padding after it, outside every symbol (16 bytes long, the
	 * function ends aligned) */
	.byte 0x0f, 0x1f, 0x44, 0x00, 0x00, 0x0f, 0x1f, 0x00

/* 2.43 sbrk-like: sub $0x18,%rsp without endbr64, and no padding reachable
 * around it: the short jump must go to the padding inside the body (after
 * the ret, before the second path), which no branch lands in. */
	.p2align 4
FN(shape_inner_pad_before)
	ret
END(shape_inner_pad_before)
FN(shape_inner_pad)
	sub $0x18, %rsp
	test %rdi, %rdi
	je 2f
	mov $11, %eax
	syscall
	add $0x18, %rsp
	ret
	.byte 0x0f, 0x1f, 0x44, 0x00, 0x00       /* nopl 0(%rax,%rax) */
	.byte 0x66, 0x0f, 0x1f, 0x44, 0x00, 0x00 /* nopw 0(%rax,%rax) */
2:	mov $-22, %rax
	add $0x18, %rsp
	ret
	.fill 140, 1, 0xc3 /* far enough that the padding after is not in reach */
END(shape_inner_pad)
FN(shape_inner_pad_after)
	ret
END(shape_inner_pad_after)

/* Refused: a 1-byte first instruction cannot hold a jump. */
	.p2align 4
FN(shape_refused_push_rbp)
	push %rbp
	mov $11, %eax
	syscall
	pop %rbp
	ret
END(shape_refused_push_rbp)

/* Refused: the body branches back to its entry (the jump would run the
 * hook in the middle of a call). */
	.p2align 4
FN(shape_refused_loop)
	_CET_ENDBR
1:	mov $11, %eax
	syscall
	cmp $-4, %rax
	je 1b
	ret
END(shape_refused_loop)

/* Refused: no system call it could be the wrapper of. */
	.p2align 4
FN(shape_refused_no_syscall)
	_CET_ENDBR
	mov $11, %eax
	ret
	nop
	nop
	nop
	nop
END(shape_refused_no_syscall)

/* Refused: NR loaded, then overwritten before the syscall. */
	.p2align 4
FN(shape_refused_clobbered)
	_CET_ENDBR
	mov $11, %eax
	xor %eax, %eax
	syscall
	ret
END(shape_refused_clobbered)

/* Refused: starts with a control transfer that is no patcher's jump. */
	.p2align 4
FN(shape_refused_branch_first)
	_CET_ENDBR
	jmp 1f
1:	mov $11, %eax
	syscall
	ret
END(shape_refused_branch_first)

	.data
shape_flag:
	.byte 0

	.section .note.GNU-stack, "", @progbits
