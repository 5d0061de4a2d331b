/*
 * A request's checks, each failure with its log line (request.h has the
 * rules themselves).
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <errno.h>

#include "cache.h"
#include "core.h"
#include "log.h"
#include "request.h"

int mrmgr__cache_check_range(const char *fn, const void *addr, size_t length,
			     uint64_t page_mask, uint64_t *start, uint64_t *last)
{
	uintptr_t a = (uintptr_t)addr;

	if (!addr || !length) {
		mrmgr__err("%s: %s", fn, !addr ? "NULL address" : "zero length");
		return EINVAL;
	}
	if (mrmgr__range_wraps(a, length, page_mask)) {
		mrmgr__err("%s: range %p + %zu overflows", fn, addr, length);
		return EINVAL;
	}
	*start = a & ~page_mask;
	*last = (a + (length - 1)) | page_mask;
	return 0;
}

int mrmgr__core_check_access(const char *fn, unsigned int access)
{
	if (mrmgr__unknown_access(access)) {
		mrmgr__err("%s: unsupported access bits %#x", fn,
			   mrmgr__unknown_access(access));
		return EINVAL;
	}
	if (mrmgr__remote_write_without_local(access)) {
		mrmgr__err("%s: REMOTE_WRITE and REMOTE_ATOMIC need "
			   "LOCAL_WRITE (access %#x)", fn, access);
		return EINVAL;
	}
	return 0;
}

int mrmgr__core_check_request(const char *fn, const struct mrmgr_cache *c,
			      const void *addr, size_t length,
			      unsigned int access, uint64_t *start,
			      uint64_t *last)
{
	int ret = mrmgr__cache_check_range(fn, addr, length,
			      ((uint64_t)1 << c->page_shift) - 1, start, last);

	return ret ? ret : mrmgr__core_check_access(fn, access);
}
