/*
 * Reading this process's image for the patch source: libc's dynamic
 * symbol table (the targets' addresses, sizes and aliases, the dead
 * bytes around them) and which addresses are executable.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <fcntl.h>
#include <link.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "got.h"
#include "patch.h"

#if MRMGR__PATCH_SUPPORTED


static size_t gnu_hash_count(const uint32_t *gh)
{
	uint32_t nb = gh[0], off = gh[1], bloom = gh[2], max = 0;
	const uint32_t *buckets =
		(const uint32_t *)((const ElfW(Addr) *)(gh + 4) + bloom);
	const uint32_t *chain = buckets + nb;

	for (uint32_t b = 0; b < nb; b++)
		if (buckets[b] > max)
			max = buckets[b];
	if (max < off)
		return off;
	while (!(chain[max - off] & 1))
		max++;
	return (size_t)max + 1;
}

int mrmgr__patch_find_image(struct dl_phdr_info *info, size_t sz, void *arg)
{
	struct mrmgr__patch_image *im = arg;
	const ElfW(Dyn) *dyn = NULL;
	uintptr_t lo = 0, hi = 0;
	int mine = 0;

	(void)sz;
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		uintptr_t s = info->dlpi_addr + ph->p_vaddr;

		if (ph->p_type == PT_DYNAMIC)
			dyn = (const ElfW(Dyn) *)s;
		if (ph->p_type == PT_LOAD && im->want >= s &&
		    im->want < s + ph->p_memsz && (ph->p_flags & PF_X) &&
		    !(ph->p_flags & PF_W)) {
			mine = 1;
			lo = s;
			hi = s + ph->p_memsz;
		}
	}
	if (!mine || !dyn)
		return 0;
	im->base = info->dlpi_addr;
	im->text_lo = lo;
	im->text_hi = hi;
	for (; dyn->d_tag != DT_NULL; dyn++) {
		if (dyn->d_tag == DT_SYMTAB)
			im->sym = (const ElfW(Sym) *)mrmgr__dyn_ptr(im->base, dyn->d_un.d_ptr);
		else if (dyn->d_tag == DT_STRTAB)
			im->str = (const char *)mrmgr__dyn_ptr(im->base, dyn->d_un.d_ptr);
		else if (dyn->d_tag == DT_GNU_HASH)
			im->nsym = gnu_hash_count(
				(const uint32_t *)mrmgr__dyn_ptr(im->base, dyn->d_un.d_ptr));
		else if (dyn->d_tag == DT_HASH && !im->nsym)
			im->nsym = ((const uint32_t *)mrmgr__dyn_ptr(im->base,
							      dyn->d_un.d_ptr))[1];
	}
	im->found = im->sym && im->str && im->nsym;
	return 1;
}

int mrmgr__patch_object_syms(const struct dl_phdr_info *info,
			     struct mrmgr__patch_image *im)
{
	const ElfW(Dyn) *dyn = NULL;

	memset(im, 0, sizeof(*im));
	for (int i = 0; i < info->dlpi_phnum; i++)
		if (info->dlpi_phdr[i].p_type == PT_DYNAMIC)
			dyn = (const ElfW(Dyn) *)(info->dlpi_addr +
						  info->dlpi_phdr[i].p_vaddr);
	if (!dyn)
		return 0;
	im->base = info->dlpi_addr;
	for (; dyn->d_tag != DT_NULL; dyn++) {
		if (dyn->d_tag == DT_SYMTAB)
			im->sym = (const ElfW(Sym) *)mrmgr__dyn_ptr(im->base, dyn->d_un.d_ptr);
		else if (dyn->d_tag == DT_STRTAB)
			im->str = (const char *)mrmgr__dyn_ptr(im->base, dyn->d_un.d_ptr);
		else if (dyn->d_tag == DT_GNU_HASH)
			im->nsym = gnu_hash_count(
				(const uint32_t *)mrmgr__dyn_ptr(im->base, dyn->d_un.d_ptr));
		else if (dyn->d_tag == DT_HASH && !im->nsym)
			im->nsym = ((const uint32_t *)mrmgr__dyn_ptr(im->base,
							      dyn->d_un.d_ptr))[1];
	}
	im->found = im->sym && im->str && im->nsym;
	return im->found;
}

/* A defined function symbol's address and size by name; 0 if absent. */
uintptr_t mrmgr__patch_sym(const struct mrmgr__patch_image *im, const char *name, size_t *size)
{
	for (size_t i = 1; i < im->nsym; i++) {
		const ElfW(Sym) *s = &im->sym[i];

		if (s->st_shndx == SHN_UNDEF || ELF64_ST_TYPE(s->st_info) != STT_FUNC)
			continue;
		if (strcmp(im->str + s->st_name, name))
			continue;
		if (size)
			*size = s->st_size;
		return im->base + s->st_value;
	}
	return 0;
}

/* The gap around [fn, fn + size): the end of the symbol before it and
 * the start of the one after (any symbol with a range in the text). */
void mrmgr__patch_gaps(const struct mrmgr__patch_image *im, uintptr_t fn, size_t size,
		 uintptr_t *before_lo, uintptr_t *after_hi)
{
	uintptr_t lo = im->text_lo, hi = im->text_hi;

	for (size_t i = 1; i < im->nsym; i++) {
		const ElfW(Sym) *s = &im->sym[i];
		uintptr_t a = im->base + s->st_value, e = a + s->st_size;

		if (s->st_shndx == SHN_UNDEF || a < im->text_lo || a >= im->text_hi)
			continue;
		if (a < fn && e > lo)
			lo = e > fn ? fn : e;
		if (a >= fn + size && a < hi)
			hi = a;
	}
	*before_lo = lo;
	*after_hi = hi;
}

/*
 * Whether a lies in an executable mapping: another patcher's jump must
 * lead to code (a destination read while that patcher was still writing
 * its jump would not, most likely).
 */
int mrmgr__patch_executable(uintptr_t a)
{
	char buf[4096];
	size_t have = 0;
	int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC), ok = 0;

	if (fd < 0)
		return 0;
	for (;;) {
		ssize_t n = read(fd, buf + have, sizeof(buf) - 1 - have);
		char *line = buf, *nl;

		if (n <= 0)
			break;
		have += (size_t)n;
		buf[have] = 0;
		while ((nl = memchr(line, '\n', (size_t)(buf + have - line)))) {
			unsigned long lo, hi;
			char perms[5];

			*nl = 0;
			if (sscanf(line, "%lx-%lx %4s", &lo, &hi, perms) == 3 &&
			    a >= lo && a < hi) {
				ok = perms[2] == 'x';
				goto out;
			}
			line = nl + 1;
		}
		have = (size_t)(buf + have - line);
		memmove(buf, line, have);
		if (have >= sizeof(buf) - 1)
			have = 0; /* an absurdly long line: drop it */
	}
out:
	close(fd);
	return ok;
}

#endif /* MRMGR__PATCH_SUPPORTED */
