/*
 * Branch protection kept on arm64: the pages of libc's text the engine
 * writes return with PROT_BTI when the loader mapped them with it.
 *
 * A BTI-enforcing process (a CPU with HWCAP2_BTI, an object marked
 * GNU_PROPERTY_AARCH64_FEATURE_1_BTI in its PT_GNU_PROPERTY note) has its
 * executable segments mapped PROT_EXEC | PROT_BTI: by the kernel for the
 * program and its interpreter, by ld.so (glibc's _dl_bti_check) for the
 * libraries. An mprotect() that names the protection without PROT_BTI
 * (patch.c's text_rw(), once to write and once to restore) turns the
 * guard off for those pages: an indirect branch may then land on any
 * instruction of libc's memory entry points, the gadgets BTI exists to
 * deny. /proc/self/maps does not show the bit (smaps' VmFlags "bt" does,
 * but not under qemu-user); the object's marking and the CPU's hwcap are
 * what the loader decided by, so they are what is read here, once, when
 * the engine plans a site (never from a hook: dl_iterate_phdr takes the
 * loader's lock). A marked object's every indirect-branch target has a
 * landing pad (the linker marks it only when every input was built so),
 * so PROT_BTI on its pages is safe even where a loader did not set it
 * (glibc built without BTI support, Debian 12's 2.36): there it is added.
 *
 * Not where another patcher wrote its jump over an entry's landing pad
 * (entry_without_pad()): that page stays as the other patcher left it.
 *
 * Also guarded: the trampoline page. Each slot starts with `bti jc`, so
 * a jump there by register (another patcher chaining through our entry
 * jump) lands; an indirect branch anywhere else in it faults.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <link.h>
#include <stdint.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <unistd.h>

#include "a64_decode.h"
#include "log.h"
#include "patch.h"

#if MRMGR__PATCH_SUPPORTED && defined(__aarch64__)

#ifndef PROT_BTI
#define PROT_BTI 0x10
#endif
#ifndef HWCAP2_BTI
#define HWCAP2_BTI (1ul << 17)
#endif
#ifndef PT_GNU_PROPERTY
#define PT_GNU_PROPERTY 0x6474e553
#endif
#define NT_GNU_PROPERTY_TYPE_0_ 5
#define AARCH64_FEATURE_1_AND 0xc0000000u
#define AARCH64_FEATURE_1_BTI 1u

#define MAX_RANGES 8

/* Executable segments of BTI-marked objects, with their dynamic
 * symbols; appended while planning (the engine's install lock), read by
 * text_rw() without one. */
static struct {
	uintptr_t lo, hi;
	struct mrmgr__patch_image im;
} ranges[MAX_RANGES];
static int nranges;
static int said_unguarded;

/* The AArch64 feature bits of a PT_GNU_PROPERTY segment. */
static uint32_t features(const unsigned char *p, size_t len)
{
	while (len >= 16) {
		uint32_t namesz, descsz, type;
		size_t off, end;

		memcpy(&namesz, p, 4);
		memcpy(&descsz, p + 4, 4);
		memcpy(&type, p + 8, 4);
		/* The name is padded to 4 bytes, the whole note to 8 (the
		 * segment's alignment on LP64), as ld.so reads it. */
		off = 12 + (((size_t)namesz + 3) & ~(size_t)3);
		end = (off + descsz + 7) & ~(size_t)7;
		if (end > len)
			return 0;
		if (type == NT_GNU_PROPERTY_TYPE_0_ && namesz == 4 &&
		    !memcmp(p + 12, "GNU", 4)) {
			for (size_t q = off; q + 8 <= off + descsz;) {
				uint32_t pt, sz, v = 0;

				memcpy(&pt, p + q, 4);
				memcpy(&sz, p + q + 4, 4);
				if (pt == AARCH64_FEATURE_1_AND && sz >= 4) {
					memcpy(&v, p + q + 8, 4);
					return v;
				}
				q += 8 + ((sz + 7u) & ~7u);
			}
		}
		p += end;
		len -= end;
	}
	return 0;
}

struct find {
	uintptr_t a, lo, hi;
	int marked;
};

static int one(struct dl_phdr_info *info, size_t sz, void *arg)
{
	struct find *f = arg;
	const ElfW(Phdr) *prop = NULL;
	int mine = 0;

	(void)sz;
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		uintptr_t s = info->dlpi_addr + ph->p_vaddr;

		if (ph->p_type == PT_GNU_PROPERTY)
			prop = ph;
		if (ph->p_type == PT_LOAD && (ph->p_flags & PF_X) &&
		    f->a >= s && f->a < s + ph->p_memsz) {
			mine = 1;
			f->lo = s;
			f->hi = s + ph->p_memsz;
		}
	}
	if (!mine)
		return 0;
	f->marked = prop &&
		    (features((const unsigned char *)(info->dlpi_addr + prop->p_vaddr),
			      prop->p_memsz) & AARCH64_FEATURE_1_BTI);
	return 1;
}

static int hwcap_bti(void)
{
	return !!(getauxval(AT_HWCAP2) & HWCAP2_BTI);
}

void mrmgr__patch_bti_note(uintptr_t a)
{
	uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
	struct find f = { a, 0, 0, 0 };
	int n = __atomic_load_n(&nranges, __ATOMIC_ACQUIRE);

	if (!hwcap_bti() || mrmgr__patch_bti_prot(a, a + 1) || n >= MAX_RANGES)
		return;
	if (!dl_iterate_phdr(one, &f) || !f.marked)
		return;
	memset(&ranges[n].im, 0, sizeof(ranges[n].im));
	ranges[n].im.want = a;
	if (!dl_iterate_phdr(mrmgr__patch_find_image, &ranges[n].im) ||
	    !ranges[n].im.found)
		return; /* its entries cannot be listed: left as it is */
	ranges[n].lo = f.lo & ~(pg - 1);
	ranges[n].hi = (f.hi + pg - 1) & ~(pg - 1);
	__atomic_store_n(&nranges, n + 1, __ATOMIC_RELEASE);
}

static int landing_pad(uint32_t v)
{
	return (mrmgr__a64_classify(v, NULL) & MRMGR__A64_BTI) ||
	       v == 0xd503233fu /* paciasp */ || v == 0xd503237fu /* pacibsp */;
}

/*
 * The first exported function of [lo, hi) that does not start with a
 * landing pad, or 0. Another patcher that wrote its jump over an entry's
 * `bti c` (UCX's bistro, libfabric's memhooks write at the symbol) made
 * that entry a fault under PROT_BTI for every caller that comes through
 * a PLT; it also dropped the guard with its own mprotect(). The page is
 * left so: guarding it again would crash the process.
 */
static uintptr_t entry_without_pad(const struct mrmgr__patch_image *im,
				   uintptr_t lo, uintptr_t hi)
{
	for (size_t i = 1; i < im->nsym; i++) {
		const ElfW(Sym) *y = &im->sym[i];
		uintptr_t a = im->base + y->st_value;
		uint32_t v;

		if (y->st_shndx == SHN_UNDEF ||
		    ELF64_ST_TYPE(y->st_info) != STT_FUNC || a < lo || a >= hi)
			continue;
		memcpy(&v, (const void *)a, 4);
		if (!landing_pad(v))
			return a;
	}
	return 0;
}

int mrmgr__patch_bti_prot(uintptr_t lo, uintptr_t hi)
{
	int n = __atomic_load_n(&nranges, __ATOMIC_ACQUIRE);
	uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE), bad;

	lo &= ~(pg - 1);
	hi = (hi + pg - 1) & ~(pg - 1);
	for (int i = 0; i < n; i++) {
		if (lo < ranges[i].lo || hi > ranges[i].hi)
			continue;
		bad = entry_without_pad(&ranges[i].im, lo, hi);
		if (!bad)
			return PROT_BTI;
		if (!__atomic_exchange_n(&said_unguarded, 1, __ATOMIC_RELAXED))
			mrmgr__info("monitor: the entry at %#lx starts without "
				    "a BTI landing pad (another patcher's "
				    "jump over it): its page of text stays "
				    "without PROT_BTI, as that patcher left it",
				    (unsigned long)bad);
		return 0;
	}
	return 0;
}

int mrmgr__patch_bti_tramp_prot(void)
{
	return hwcap_bti() ? PROT_BTI : 0;
}

#elif MRMGR__PATCH_SUPPORTED

void mrmgr__patch_bti_note(uintptr_t a)
{
	(void)a;
}

int mrmgr__patch_bti_prot(uintptr_t lo, uintptr_t hi)
{
	(void)lo;
	(void)hi;
	return 0;
}

int mrmgr__patch_bti_tramp_prot(void)
{
	return 0;
}

#endif
