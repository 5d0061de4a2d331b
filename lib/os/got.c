/*
 * Call sites of a loaded object (got.h): reading its relocation tables
 * and writing one slot.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "got.h"

int mrmgr__got_holds(const struct dl_phdr_info *info, uintptr_t a)
{
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		uintptr_t lo = info->dlpi_addr + ph->p_vaddr;

		if (ph->p_type == PT_LOAD && a >= lo && a < lo + ph->p_memsz)
			return 1;
	}
	return 0;
}

int mrmgr__got_read(const struct dl_phdr_info *info, struct mrmgr__relocs *rl)
{
	const ElfW(Dyn) *dyn = NULL;
	uintptr_t b = info->dlpi_addr, pg = (uintptr_t)sysconf(_SC_PAGESIZE);
	int rela_plt = 1;

	memset(rl, 0, sizeof(*rl));
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];

		if (ph->p_type == PT_DYNAMIC)
			dyn = (const ElfW(Dyn) *)(b + ph->p_vaddr);
		if (ph->p_type == PT_GNU_RELRO) {
			rl->relro_lo = (b + ph->p_vaddr) & ~(pg - 1);
			rl->relro_hi = (b + ph->p_vaddr + ph->p_memsz) & ~(pg - 1);
		}
	}
	if (!dyn)
		return 0;
	for (; dyn->d_tag != DT_NULL; dyn++) {
		switch (dyn->d_tag) {
		case DT_JMPREL:
			rl->r[0] = (const ElfW(Rela) *)mrmgr__dyn_ptr(b, dyn->d_un.d_ptr);
			break;
		case DT_PLTRELSZ:
			rl->n[0] = dyn->d_un.d_val / sizeof(ElfW(Rela));
			break;
		case DT_PLTREL:
			rela_plt = dyn->d_un.d_val == DT_RELA;
			break;
		case DT_RELA:
			rl->r[1] = (const ElfW(Rela) *)mrmgr__dyn_ptr(b, dyn->d_un.d_ptr);
			break;
		case DT_RELASZ:
			rl->n[1] = dyn->d_un.d_val / sizeof(ElfW(Rela));
			break;
		case DT_SYMTAB:
			rl->sym = (const ElfW(Sym) *)mrmgr__dyn_ptr(b, dyn->d_un.d_ptr);
			break;
		case DT_STRTAB:
			rl->str = (const char *)mrmgr__dyn_ptr(b, dyn->d_un.d_ptr);
			break;
		}
	}
	if (!rela_plt)
		rl->n[0] = 0;
	return rl->sym && rl->str;
}

int mrmgr__got_put(uintptr_t *slot, uintptr_t v, const struct mrmgr__relocs *rl)
{
	uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE), a = (uintptr_t)slot;
	int ro = a >= rl->relro_lo && a < rl->relro_hi;
	void *p = (void *)(a & ~(pg - 1));

	if (ro && mprotect(p, pg, PROT_READ | PROT_WRITE))
		return errno;
	__atomic_store_n(slot, v, __ATOMIC_RELEASE);
	if (ro)
		(void)mprotect(p, pg, PROT_READ);
	return 0;
}
