/*
 * The patch source's instruction decoders (lib/intercept/arch/x86_64/x86_decode.c,
 * arch/aarch64/a64_decode.c) against Capstone, a reference disassembler used by the
 * tests only: every instruction of every exported function of the host's
 * libc.so.6, libibverbs.so.1 and libucs.so.0, and of every libc under the
 * libc matrix's cache (MRMGR_LIBC_CACHE, default /var/cache/mrmgr-libc:
 * SUITE-ARCH/root/...; x86-64 and arm64 ones). x86-64: the same length and
 * the same position dependence (RIP-relative operand or relative branch)
 * for each instruction, and every branch, call or return Capstone sees is
 * a control transfer for us. arm64: the same position dependence and
 * control transfer for each word.
 *
 * Where Capstone cannot decode (data in a body, instructions newer than
 * Capstone 4) the rest of that x86 body is not compared (a byte stream
 * cannot be resynchronised) and the count is printed. Exit 77 (skipped)
 * without Capstone; MRMGR_DECODE_REQUIRE=N fails unless at least N extra
 * libcs were found (CI sets it after fetching the matrix).
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>

#if !HAVE_CAPSTONE
int main(void)
{
	printf("SKIP: built without Capstone (apt-get install libcapstone-dev, "
	       "then re-run configure): the decoders are not compared with a "
	       "reference\n");
	return 77;
}
#else

#include <dirent.h>
#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <capstone/capstone.h>

#include "a64_decode.h"
#include "x86_decode.h"

struct counts {
	unsigned long images, funcs, insns, agree, disagree, ref_unknown;
};
static struct counts x86, a64, sweep;
static int verbose_left = 20; /* disagreements printed in full */

static void report(const char *img, const char *fn, unsigned long off,
		   const uint8_t *p, size_t n, const char *what, const char *cs)
{
	if (verbose_left-- <= 0)
		return;
	printf("DISAGREE %s %s+%#lx: %s (capstone: %s):", img, fn, off, what, cs);
	for (size_t i = 0; i < n && i < 15; i++)
		printf(" %02x", p[i]);
	printf("\n");
}

/* ---------------------------------------------------------------- x86 */

static int cs_posdep_x86(csh h, const cs_insn *in)
{
	const cs_x86 *x = &in->detail->x86;

	if (cs_insn_group(h, in, CS_GRP_BRANCH_RELATIVE))
		return 1;
	for (int i = 0; i < x->op_count; i++)
		if (x->operands[i].type == X86_OP_MEM &&
		    (x->operands[i].mem.base == X86_REG_RIP ||
		     x->operands[i].mem.base == X86_REG_EIP))
			return 1;
	return 0;
}

static int cs_ctrl(csh h, const cs_insn *in)
{
	return cs_insn_group(h, in, CS_GRP_JUMP) || cs_insn_group(h, in, CS_GRP_CALL) ||
	       cs_insn_group(h, in, CS_GRP_RET) || cs_insn_group(h, in, CS_GRP_IRET);
}

static void func_x86(csh h, const char *img, const char *name,
		     const uint8_t *p, size_t size, uint64_t addr)
{
	cs_insn *ci = cs_malloc(h);
	size_t off = 0;

	x86.funcs++;
	while (off < size) {
		const uint8_t *code = p + off;
		size_t left = size - off;
		uint64_t a = addr + off;
		struct mrmgr__x86_insn in;
		size_t ours = mrmgr__x86_decode(p + off, size - off, &in);

		if (!cs_disasm_iter(h, &code, &left, &a, ci)) {
			x86.ref_unknown++;
			if (x86.ref_unknown <= 10) {
				printf("capstone cannot decode %s %s+%#zx (ours: %zu):",
				       img, name, off, ours);
				for (size_t i = 0; i < 8 && off + i < size; i++)
					printf(" %02x", p[off + i]);
				printf("\n");
			}
			break;
		}
		x86.insns++;
		if (ours != ci->size) {
			x86.disagree++;
			report(img, name, off, p + off, ci->size,
			       ours ? "length" : "ours refuses", ci->mnemonic);
		} else if (mrmgr__x86_posdep(&in) != cs_posdep_x86(h, ci)) {
			x86.disagree++;
			report(img, name, off, p + off, ci->size,
			       "position dependence", ci->mnemonic);
		} else if (cs_ctrl(h, ci) && !(in.flags & MRMGR__X86_CTRL)) {
			x86.disagree++;
			report(img, name, off, p + off, ci->size, "control transfer",
			       ci->mnemonic);
		} else {
			x86.agree++;
		}
		off += ci->size;
	}
	cs_free(ci, 1);
}

/*
 * The whole .text from its start, instruction after instruction as
 * Capstone sees them (a byte skipped where it cannot decode): reaches the
 * local functions too (glibc's AVX2/EVEX string functions), which the
 * exported symbols do not.
 */
static void sweep_x86(csh h, const char *img, const uint8_t *p, size_t size,
		      uint64_t addr)
{
	cs_insn *ci = cs_malloc(h);
	size_t off = 0;

	while (off < size) {
		const uint8_t *code = p + off;
		size_t left = size - off;
		uint64_t a = addr + off;
		struct mrmgr__x86_insn in;
		size_t ours = mrmgr__x86_decode(p + off, size - off, &in);

		if (!cs_disasm_iter(h, &code, &left, &a, ci)) {
			sweep.ref_unknown++;
			off++;
			continue;
		}
		sweep.insns++;
		if (ours != ci->size || mrmgr__x86_posdep(&in) != cs_posdep_x86(h, ci)) {
			sweep.disagree++;
			report(img, ".text", off, p + off, ci->size,
			       ours != ci->size ? (ours ? "length" : "ours refuses")
						: "position dependence", ci->mnemonic);
		} else {
			sweep.agree++;
		}
		off += ci->size;
	}
	cs_free(ci, 1);
}

/* ---------------------------------------------------------------- arm64 */

static int cs_posdep_a64(const cs_insn *in)
{
	const cs_arm64 *x = &in->detail->arm64;

	switch (in->id) {
	case ARM64_INS_ADR: case ARM64_INS_ADRP: case ARM64_INS_B:
	case ARM64_INS_BL: case ARM64_INS_CBZ: case ARM64_INS_CBNZ:
	case ARM64_INS_TBZ: case ARM64_INS_TBNZ:
		return 1;
	case ARM64_INS_LDR: case ARM64_INS_LDRSW: case ARM64_INS_PRFM:
		for (int i = 0; i < x->op_count; i++)
			if (x->operands[i].type == ARM64_OP_MEM)
				return 0;
		return 1; /* the literal form: no memory operand, an address */
	default:
		return 0;
	}
}

static int cs_ctrl_a64(const cs_insn *in)
{
	switch (in->id) {
	case ARM64_INS_B: case ARM64_INS_BL: case ARM64_INS_BR:
	case ARM64_INS_BLR: case ARM64_INS_RET: case ARM64_INS_CBZ:
	case ARM64_INS_CBNZ: case ARM64_INS_TBZ: case ARM64_INS_TBNZ:
	case ARM64_INS_ERET: case ARM64_INS_SVC: case ARM64_INS_HVC:
	case ARM64_INS_SMC: case ARM64_INS_BRK: case ARM64_INS_HLT:
	case ARM64_INS_DRPS: case ARM64_INS_DCPS1: case ARM64_INS_DCPS2:
	case ARM64_INS_DCPS3:
		return 1;
	default:
		return 0;
	}
}

static void func_a64(csh h, const char *img, const char *name,
		     const uint8_t *p, size_t size, uint64_t addr)
{
	cs_insn *ci = cs_malloc(h);

	a64.funcs++;
	for (size_t off = 0; off + 4 <= size; off += 4) {
		const uint8_t *code = p + off;
		size_t left = 4;
		uint64_t a = addr + off;
		uint32_t v;
		unsigned int f;

		memcpy(&v, p + off, 4);
		f = mrmgr__a64_classify(v, NULL);
		if (!cs_disasm_iter(h, &code, &left, &a, ci)) {
			a64.ref_unknown++;
			continue;
		}
		a64.insns++;
		if (!!(f & MRMGR__A64_POSDEP) != cs_posdep_a64(ci)) {
			a64.disagree++;
			report(img, name, off, p + off, 4, "position dependence",
			       ci->mnemonic);
		} else if (!!(f & MRMGR__A64_CTRL) != cs_ctrl_a64(ci)) {
			a64.disagree++;
			report(img, name, off, p + off, 4, "control transfer",
			       ci->mnemonic);
		} else if ((f & (MRMGR__A64_BTI | MRMGR__A64_PAC)) &&
			   strcmp(ci->mnemonic, "hint")) {
			a64.disagree++;
			report(img, name, off, p + off, 4, "hint", ci->mnemonic);
		} else {
			a64.agree++;
		}
	}
	cs_free(ci, 1);
}

/* ---------------------------------------------------------------- ELF */

/* Every exported function of the ELF file at path, once per address. */
static int image(const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	struct stat st;
	const uint8_t *f;
	const Elf64_Ehdr *eh;
	const Elf64_Shdr *sh;
	csh h;
	int arm;
	uint64_t *seen;
	size_t nseen = 0;

	if (fd < 0 || fstat(fd, &st))
		return -1;
	f = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
	close(fd);
	if (f == MAP_FAILED)
		return -1;
	eh = (const Elf64_Ehdr *)f;
	if (memcmp(eh->e_ident, ELFMAG, SELFMAG) || eh->e_ident[EI_CLASS] != ELFCLASS64 ||
	    (eh->e_machine != EM_X86_64 && eh->e_machine != EM_AARCH64))
		return -1;
	arm = eh->e_machine == EM_AARCH64;
	if (cs_open(arm ? CS_ARCH_ARM64 : CS_ARCH_X86,
		    arm ? CS_MODE_ARM : CS_MODE_64, &h) != CS_ERR_OK)
		return -1;
	cs_option(h, CS_OPT_DETAIL, CS_OPT_ON);
	sh = (const Elf64_Shdr *)(f + eh->e_shoff);
	(arm ? &a64 : &x86)->images++;
	for (int i = 0; i < eh->e_shnum && !arm; i++)
		if (!strcmp((const char *)f + sh[eh->e_shstrndx].sh_offset +
			    sh[i].sh_name, ".text"))
			sweep_x86(h, path, f + sh[i].sh_offset, sh[i].sh_size,
				  sh[i].sh_addr);
	for (int i = 0; i < eh->e_shnum; i++) {
		const Elf64_Sym *sym;
		const char *str;
		size_t n;

		if (sh[i].sh_type != SHT_DYNSYM)
			continue;
		sym = (const Elf64_Sym *)(f + sh[i].sh_offset);
		str = (const char *)(f + sh[sh[i].sh_link].sh_offset);
		n = sh[i].sh_size / sizeof(*sym);
		seen = calloc(n, sizeof(*seen));
		for (size_t k = 1; k < n; k++) {
			const Elf64_Sym *s = &sym[k];
			const Elf64_Shdr *sec;
			int type = ELF64_ST_TYPE(s->st_info), dup = 0;

			if ((type != STT_FUNC && type != STT_GNU_IFUNC) || !s->st_size ||
			    s->st_shndx == SHN_UNDEF || s->st_shndx >= eh->e_shnum)
				continue;
			for (size_t j = 0; j < nseen && !dup; j++)
				dup = seen[j] == s->st_value;
			if (dup)
				continue;
			seen[nseen++] = s->st_value;
			sec = &sh[s->st_shndx];
			if (sec->sh_type != SHT_PROGBITS || s->st_value < sec->sh_addr ||
			    s->st_value + s->st_size > sec->sh_addr + sec->sh_size)
				continue;
			(arm ? func_a64 : func_x86)(h, path, str + s->st_name,
				f + sec->sh_offset + (s->st_value - sec->sh_addr),
				s->st_size, s->st_value);
		}
		free(seen);
	}
	cs_close(&h);
	munmap((void *)f, (size_t)st.st_size);
	return 0;
}

/* The file a loaded library came from. */
static const char *loaded(const char *soname)
{
	void *h = dlopen(soname, RTLD_LAZY);
	struct link_map *lm = NULL;

	if (!h || dlinfo(h, RTLD_DI_LINKMAP, &lm) || !lm)
		return NULL;
	return lm->l_name;
}

/* The libcs under the matrix's cache: SUITE-ARCH/root/{usr/,}lib/TRIPLET. */
static int cached_libcs(void)
{
	const char *cache = getenv("MRMGR_LIBC_CACHE");
	static const char *const sub[] = {
		"usr/lib/x86_64-linux-gnu", "lib/x86_64-linux-gnu",
		"usr/lib/aarch64-linux-gnu", "lib/aarch64-linux-gnu",
	};
	struct dirent *de;
	DIR *d;
	int found = 0;

	if (!cache || !*cache)
		cache = "/var/cache/mrmgr-libc";
	d = opendir(cache);
	if (!d) {
		printf("no libc cache at %s (scripts/fetch-libc.sh fills it)\n", cache);
		return 0;
	}
	while ((de = readdir(d))) {
		for (size_t i = 0; i < sizeof(sub) / sizeof(sub[0]); i++) {
			char path[4096];

			if (de->d_name[0] == '.')
				break;
			snprintf(path, sizeof(path), "%s/%s/root/%s/libc.so.6", cache,
				 de->d_name, sub[i]);
			if (access(path, R_OK))
				continue;
			if (image(path) == 0) {
				printf("libc of %s: %s\n", de->d_name, path);
				found++;
			}
			break;
		}
	}
	closedir(d);
	return found;
}

int main(void)
{
	static const char *const libs[] = { "libc.so.6", "libibverbs.so.1", "libucs.so.0" };
	const char *req = getenv("MRMGR_DECODE_REQUIRE");
	int extra, missing = 0;

	for (size_t i = 0; i < sizeof(libs) / sizeof(libs[0]); i++) {
		const char *path = loaded(libs[i]);

		if (!path || image(path)) {
			printf("%s: not found or not readable\n", libs[i]);
			missing += i < 2; /* libucs is optional (libucx0) */
		} else {
			printf("host %s: %s\n", libs[i], path);
		}
	}
	extra = cached_libcs();
	printf("x86-64: %lu functions in %lu images, %lu instructions agree, "
	       "%lu disagree (%lu bodies cut short where Capstone cannot decode)\n",
	       x86.funcs, x86.images, x86.agree, x86.disagree, x86.ref_unknown);
	printf("x86-64 whole .text: %lu instructions agree, %lu disagree "
	       "(%lu bytes Capstone cannot decode)\n",
	       sweep.agree, sweep.disagree, sweep.ref_unknown);
	printf("arm64: %lu functions in %lu images, %lu instructions agree, "
	       "%lu disagree (%lu words Capstone cannot decode)\n",
	       a64.funcs, a64.images, a64.agree, a64.disagree, a64.ref_unknown);
	if (req && extra < atoi(req)) {
		printf("FAIL: %d libcs in the cache, %s required\n", extra, req);
		return 1;
	}
	if (missing || x86.disagree || a64.disagree || sweep.disagree || !x86.agree) {
		printf("FAIL\n");
		return 1;
	}
	return 0;
}

#endif /* HAVE_CAPSTONE */
