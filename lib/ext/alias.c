/*
 * Aliases: the same pages mapped a second time and registered again.
 *
 * Memory from a shared file (memfd, POSIX shm, a MAP_SHARED file) can be
 * mapped twice; a second registration of the second mapping, in another
 * PD or with other access, shares the physical pages with the first. It is
 * the modern form of MLNX_OFED's ibv_exp_reg_shared_mr() (which did the
 * mapping in the kernel, mlx4 only), built from ordinary calls:
 *
 *   mrmgr_region_alias(region, fd, offset, pd, access, &alias)
 *     checks in /proc/self/maps that the region's memory is the shared
 *     mapping of fd at offset (same device and inode, MAP_SHARED, one
 *     mapping covering the region), maps [offset, +len) of fd again at an
 *     address with the original's offset within MRMGR__ALIAS_ALIGN (4 MiB:
 *     the same huge-page geometry), registers it, and adds it to the
 *     region's share set.
 *
 * Why the share set: an alias is a second way to reach the region's
 * memory, so it follows the region's rules. It pins the region (the
 * owner's MR is not deregistered before its in-process members, and the
 * cache is not destroyed under them); the region is SHARED, so it is never
 * re-registered in place; invalidation of the region revokes the alias
 * (if the file was truncated or replaced, the alias MR pins pages the
 * program no longer sees). The alias's own mapping stays until
 * mrmgr_alias_destroy(), so its address is never reused under the MR.
 *
 * Aliases are explicit objects, like held regions: they are not counted
 * against the cache's max_regions or max_bytes (share_aliases counts
 * them).
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "core.h"
#include "device.h"
#include "ext.h"
#include "log.h"
#include "share.h"
#include "vma.h"

#define WRITE_ACCESS                                                        \
	(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |                  \
	 IBV_ACCESS_REMOTE_ATOMIC)

/*
 * Is [start, start+len) one MAP_SHARED mapping of the file st describes,
 * at file offset off? 0, or EINVAL with the reason in *why.
 */
static int same_file_pages(uint64_t start, uint64_t len, const struct stat *st,
			   uint64_t off, const char **why)
{
	struct mrmgr__vma v;
	int err = mrmgr__vma_find(start, 0, &v);

	if (err) {
		*why = err == ENOENT ? "no mapping covers the region"
				     : "/proc/self/maps cannot be read";
		return EINVAL;
	}
	if (start + len > v.end)
		*why = "the region spans several mappings";
	else if (!(v.flags & MRMGR__VMA_F_SHARED))
		*why = "the mapping is private (MAP_PRIVATE): its pages are not the file's";
	else if (v.inode != st->st_ino || v.dev_major != major(st->st_dev) ||
		 v.dev_minor != minor(st->st_dev))
		*why = "the mapping is of another file";
	else if (v.offset + (start - v.start) != off)
		*why = "the region is at another offset of the file";
	else
		return 0;
	return EINVAL;
}

/* Map len bytes of fd at off, with start's offset within the alignment. */
static void *map_aligned(int fd, uint64_t off, uint64_t len, uint64_t start,
			 int prot)
{
	const uint64_t align = MRMGR__ALIAS_ALIGN;
	uint64_t span = len + 2 * align, a, want;
	void *res, *p;

	res = mmap(NULL, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
		   -1, 0);
	if (res == MAP_FAILED)
		return MAP_FAILED;
	a = (uint64_t)(uintptr_t)res;
	want = ((a + align - 1) & ~(align - 1)) + (start & (align - 1));
	p = mmap((void *)(uintptr_t)want, len, prot, MAP_SHARED | MAP_FIXED, fd,
		 (off_t)off);
	if (p == MAP_FAILED) {
		munmap(res, span);
		return MAP_FAILED;
	}
	/* Give back the slack on both sides. */
	if (want > a)
		munmap(res, want - a);
	if (a + span > want + len)
		munmap((void *)(uintptr_t)(want + len), a + span - (want + len));
	return p;
}

static void alias_unlink(struct mrmgr_cache *c, struct mrmgr_alias *al)
{
	struct mrmgr__share *sh = mrmgr__share_of(al->r);

	if (al->prev)
		al->prev->next = al->next;
	else
		sh->aliases = al->next;
	if (al->next)
		al->next->prev = al->prev;
	al->next = al->prev = NULL;
	sh->naliases--;
	mrmgr__core_count(c, share_aliases, -1);
	mrmgr__share_member_gone(c, al->r);
}

/* al joins its region's share set, and pins it (lock held). */
static void alias_link(struct mrmgr_cache *c, struct mrmgr_alias *al)
{
	struct mrmgr__share *sh = mrmgr__share_of(al->r);

	al->next = sh->aliases;
	if (al->next)
		al->next->prev = al;
	sh->aliases = al;
	sh->naliases++;
	mrmgr__core_count(c, share_aliases, 1);
	mrmgr__core_count(c, registrations, 1);
	mrmgr__share_pin(c, al->r); /* dropped by the destroy */
}

MRMGR_EXPORT int mrmgr_region_alias(mrmgr_region_t *r, int fd, uint64_t offset,
				    struct ibv_pd *pd, unsigned int access,
				    mrmgr_alias_t **out)
{
	const struct mrmgr__core_view *cv;
	struct mrmgr_cache *c;
	struct mrmgr_alias *al;
	const char *why = "";
	struct ibv_mr *mr = NULL;
	struct stat st;
	uint64_t start, len;
	void *p;
	int ret;

	if (!r || !out || fd < 0) {
		mrmgr__err("mrmgr_region_alias: %s", !r ? "NULL region"
				   : !out ? "NULL alias pointer" : "bad descriptor");
		return EINVAL;
	}
	c = mrmgr__rgn_cache(r);
	cv = mrmgr__core_view(c);
	ret = mrmgr__core_check_access("mrmgr_region_alias", access);
	if (ret)
		return ret;
	if (!pd)
		pd = mrmgr__region_plain_mr(r) ? mrmgr__region_plain_mr(r)->pd
					       : cv->pd;
	if (mrmgr__dev_for(pd->context) != cv->ops) {
		mrmgr__err("mrmgr_region_alias: the PD is of another backend than "
			   "the cache's");
		return EINVAL;
	}
	if (fstat(fd, &st) != 0) {
		ret = errno;
		mrmgr__err("mrmgr_region_alias: fd %d: %s", fd, strerror(ret));
		return ret == EBADF ? EINVAL : ret;
	}
	start = mrmgr__rgn_start(r);
	len = mrmgr__rgn_len(r);
	ret = same_file_pages(start, len, &st, offset, &why);
	if (ret) {
		mrmgr__err("mrmgr_region_alias: [%#llx, +%llu) is not fd %d at "
			   "offset %llu: %s", (unsigned long long)start,
			   (unsigned long long)len, fd, (unsigned long long)offset,
			   why);
		return ret;
	}
	al = calloc(1, sizeof(*al));
	if (!al)
		return ENOMEM;
	p = map_aligned(fd, offset, len, start,
			PROT_READ | (access & WRITE_ACCESS ? PROT_WRITE : 0));
	if (p == MAP_FAILED) {
		ret = errno;
		free(al);
		mrmgr__err("mrmgr_region_alias: mapping fd %d again: %s", fd,
			   strerror(ret));
		return ret;
	}
	ret = mrmgr__dev_reg_mr(cv->ops, pd, p, len, (int)access, &mr);
	if (ret) {
		munmap(p, len);
		free(al);
		mrmgr__err("mrmgr_region_alias: registering the alias at %p: %s",
			   p, strerror(ret));
		return ret;
	}

	mrmgr__core_lock(c);
	if (!mrmgr__rgn_live(r))
		ret = ESTALE; /* invalidated meanwhile: not the file's pages */
	if (!ret)
		ret = mrmgr__share_cache_get(c);
	if (!ret)
		ret = mrmgr__share_get(c, r);
	if (ret) {
		mrmgr__core_unlock(c);
		mrmgr__dev_dereg_mr(cv->ops, mr);
		munmap(p, len);
		free(al);
		if (ret == ESTALE)
			mrmgr__err("mrmgr_region_alias: the region is no longer in "
				   "the cache; get it again");
		return ret;
	}
	al->cache = c;
	al->r = r;
	al->mr = mr;
	al->addr = p;
	al->len = len;
	al->access = access;
	alias_link(c, al);
	mrmgr__core_unlock(c);
	mrmgr__dbg("alias of [%#llx, +%llu) at %p: keys %#x/%#x",
		   (unsigned long long)start, (unsigned long long)len, p,
		   mr->lkey, mr->rkey);
	*out = al;
	return 0;
}

/* Cache lock held: revoke by force (destroy_ex): the MR goes, the mapping
 * stays for mrmgr_alias_destroy(). Returns the region to unpin. */
struct mrmgr_region *mrmgr__alias_force(struct mrmgr_cache *c,
					struct mrmgr_alias *al)
{
	struct mrmgr_region *r = al->r;
	int ret;

	alias_unlink(c, al);
	__atomic_store_n(&al->revoked, 1, __ATOMIC_RELEASE);
	ret = mrmgr__dev_dereg_mr(mrmgr__core_view(c)->ops, al->mr);
	if (ret)
		mrmgr__err("deregistering alias %p failed: %s; abandoned",
			   al->addr, strerror(ret));
	else
		mrmgr__core_count(c, deregistrations, 1);
	al->mr = NULL;
	al->cache = NULL;
	al->r = NULL;
	return r;
}

MRMGR_EXPORT int mrmgr_alias_destroy(mrmgr_alias_t *al)
{
	struct mrmgr_cache *c;
	int ret = 0;

	if (!al) {
		mrmgr__err("mrmgr_alias_destroy: NULL alias");
		return EINVAL;
	}
	c = al->cache;
	if (c) {
		mrmgr__core_lock(c);
		alias_unlink(c, al);
		ret = mrmgr__dev_dereg_mr(mrmgr__core_view(c)->ops, al->mr);
		if (ret)
			mrmgr__err("mrmgr_alias_destroy: deregistering %p: %s; "
				   "the MR is abandoned", al->addr, strerror(ret));
		else
			mrmgr__core_count(c, deregistrations, 1);
		mrmgr__core_unref_locked(c, al->r,
					  mrmgr__core_slot(c));
		mrmgr__core_unlock(c);
	}
	munmap(al->addr, al->len);
	free(al);
	return 0;
}

/* One call for what the accessors (static inline in mrmgr.h) read: the
 * same record mrmgr_region_query_shares() gives for the alias. */
MRMGR_EXPORT int mrmgr_alias_query(const mrmgr_alias_t *al,
				   struct mrmgr_share_info *info, size_t size)
{
	struct mrmgr_share_info one;
	struct ibv_mr *mr;

	if (!al || !info || !size) {
		mrmgr__err("mrmgr_alias_query: %s", !al ? "NULL alias"
			   : !info ? "NULL info" : "size 0");
		return EINVAL;
	}
	memset(&one, 0, sizeof(one));
	one.kind = MRMGR_SHARE_ALIAS;
	if (__atomic_load_n(&al->revoked, __ATOMIC_ACQUIRE))
		one.flags = MRMGR_SHARE_REVOKED;
	mr = al->mr;
	if (mr) {
		one.pd = mr->pd;
		one.mr = mr;
		one.lkey = mr->lkey;
		one.rkey = mr->rkey;
	}
	one.addr = (uint64_t)(uintptr_t)al->addr;
	one.length = al->len;
	one.access = al->access;
	one.refs = 1;
	memcpy(info, &one, size < sizeof(one) ? size : sizeof(one));
	return 0;
}
