/*
 * Call sites of a loaded object: its GOT/PLT slots, found through its
 * relocation tables (R_*_JUMP_SLOT, R_*_GLOB_DAT), and the one store that
 * redirects a slot. Shared by lib/intercept/follow.c (memory calls
 * defined outside libc) and lib/kinds/cuda_follow.c (libcuda's frees).
 *
 * SPDX-License-Identifier: MIT
 */
#ifndef MRMGR__GOT_H
#define MRMGR__GOT_H

#include <elf.h>
#include <link.h>
#include <stddef.h>
#include <stdint.h>

#if defined(__x86_64__)
#define MRMGR__R_SLOT R_X86_64_JUMP_SLOT
#define MRMGR__R_GLOB R_X86_64_GLOB_DAT
#elif defined(__aarch64__)
#define MRMGR__R_SLOT R_AARCH64_JUMP_SLOT
#define MRMGR__R_GLOB R_AARCH64_GLOB_DAT
#endif

/* The relocation tables of an object: [0] the PLT's, [1] the others. */
struct mrmgr__relocs {
	const ElfW(Rela) *r[2];
	size_t n[2];
	const ElfW(Sym) *sym;
	const char *str;
	uintptr_t relro_lo, relro_hi;
};

/* A dynamic-section address: ld.so relocates them in place on most
 * targets, not on all. */
static inline uintptr_t mrmgr__dyn_ptr(uintptr_t base, ElfW(Addr) p)
{
	return p < base ? base + p : p;
}

/* Whether one of info's loaded segments holds address a. */
int mrmgr__got_holds(const struct dl_phdr_info *info, uintptr_t a);

/* Read info's dynamic section into *rl: 1 when it has a symbol table. */
int mrmgr__got_read(const struct dl_phdr_info *info, struct mrmgr__relocs *rl);

/* Store v into a call site; a slot in RELRO gets a writable moment. 0 or
 * mprotect's errno. */
int mrmgr__got_put(uintptr_t *slot, uintptr_t v, const struct mrmgr__relocs *rl);

#endif /* MRMGR__GOT_H */
