/*
 * The patch engine pointed at a function other than libc's, for tests:
 * the CET/BTI prologue shapes of tests/unit/entry_shapes_x86_64.S (and
 * tests/cross/) are planned, encoded and written by the very code that
 * patches libc (mrmgr__patch_arch_plan, _encode, mrmgr__patch_apply_site)
 * while other threads call them.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <errno.h>
#include <link.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "patch.h"

#if MRMGR__PATCH_SUPPORTED

int mrmgr__patch_test_site(void *fn, long nr, void (*hook)(void),
			   struct mrmgr__patch_site *s)
{
	struct mrmgr__patch_image im;
	uintptr_t a = (uintptr_t)fn, lo, hi, tramp;
	size_t size = 0, pg = (size_t)sysconf(_SC_PAGESIZE);
	int err;

	memset(&im, 0, sizeof(im));
	memset(s, 0, sizeof(*s));
	im.want = a;
	if (!dl_iterate_phdr(mrmgr__patch_find_image, &im) || !im.found)
		return ENOENT;
	for (size_t i = 1; i < im.nsym && !size; i++)
		if (im.sym[i].st_shndx != SHN_UNDEF &&
		    im.base + im.sym[i].st_value == a)
			size = im.sym[i].st_size;
	if (!size)
		return ENOENT;
	mrmgr__patch_gaps(&im, a, size, &lo, &hi);
	err = mrmgr__patch_arch_plan(a, size, nr, lo, hi, s);
	if (err)
		return err;
	tramp = mrmgr__patch_tramp_page(&im, s, 1);
	if (!tramp)
		return ENOMEM;
	mrmgr__patch_arch_tramp((unsigned char *)tramp, (uintptr_t)hook);
	mrmgr__patch_bti_note(a);
	if (mprotect((void *)tramp, pg,
		     PROT_READ | PROT_EXEC | mrmgr__patch_bti_tramp_prot()))
		return errno;
	mrmgr__patch_arch_flush(tramp, pg);
	mrmgr__patch_arch_encode(s, tramp);
	return mrmgr__patch_apply_site(s, 0);
}

#else

int mrmgr__patch_test_site(void *fn, long nr, void (*hook)(void),
			   struct mrmgr__patch_site *s)
{
	(void)fn;
	(void)nr;
	(void)hook;
	(void)s;
	return ENOSYS;
}

#endif
