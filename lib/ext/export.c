/*
 * Exports: a region's MR handed to another process (mrmgr_region_export),
 * one kind of share-set member (share.c has the set and its rules: an
 * export pins its region, invalidation revokes it, destruction refuses or
 * forces while it lives).
 *
 * Locking: an export is under its cache's lock; one orphaned by a forced
 * destruction (cache == NULL) is touched only by whoever holds it.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core.h"
#include "device.h"
#include "ext.h"
#include "log.h"
#include "share.h"

static uint64_t next_export_id;

void mrmgr__export_unlink(struct mrmgr_cache *c, struct mrmgr_export *e)
{
	struct mrmgr_region *r = e->r;
	struct mrmgr__share *sh = mrmgr__share_of(r);

	if (e->prev)
		e->prev->next = e->next;
	else
		sh->exports = e->next;
	if (e->next)
		e->next->prev = e->prev;
	e->next = e->prev = NULL;
	sh->nexports--;
	mrmgr__core_count(c, share_exports, -1);
	mrmgr__core_count(c, share_importers, -(int64_t)(e->importers));
	mrmgr__share_member_gone(c, r);
}


MRMGR_EXPORT int mrmgr_cache_export_context(mrmgr_cache_t *c, struct ibv_pd *pd,
					    struct ibv_context **ctx)
{
	struct ibv_pd *which;
	int ret;

	if (!c || !ctx) {
		mrmgr__err("mrmgr_cache_export_context: NULL %s",
			   !c ? "cache" : "context pointer");
		return EINVAL;
	}
	if (pd && mrmgr__multi_pd_index(c, pd) < 0) {
		mrmgr__err("mrmgr_cache_export_context: the cache does not "
			   "serve PD %p", (void *)pd);
		return EINVAL;
	}
	which = pd ? pd : mrmgr__core_view(c)->pd;
	ret = mrmgr__share_probe(which);
	if (ret) {
		mrmgr__err("mrmgr_cache_export_context: %s cannot share MRs "
			   "with other processes (ibv_import_*: %s)",
			   which->context->device->name, strerror(ret));
		return ret;
	}
	if (which->context->cmd_fd < 0) {
		mrmgr__err("mrmgr_cache_export_context: the device has no "
			   "command descriptor");
		return EINVAL;
	}
	*ctx = which->context;
	return 0;
}

/* The device seam's lookup, public for importers outside the library
 * (libmrmgr-share): which provider's device a command descriptor is. */
MRMGR_EXPORT const struct mrmgr_device_ops *mrmgr_device_claim_fd(int cmd_fd)
{
	return cmd_fd < 0 ? NULL : mrmgr__dev_claim_fd(cmd_fd);
}

MRMGR_EXPORT int mrmgr_region_export(mrmgr_region_t *r, struct ibv_pd *pd,
				     mrmgr_export_t **exp)
{
	struct mrmgr_cache *c;
	struct mrmgr_export *e;
	struct ibv_mr *mr;
	int ret;

	if (!r || !exp) {
		mrmgr__err("mrmgr_region_export: NULL %s", !r ? "region"
							      : "export pointer");
		return EINVAL;
	}
	c = mrmgr__rgn_cache(r);
	if (mrmgr__rgn_kind(r) == MRMGR__REGION_VIEW) {
		mrmgr__err("mrmgr_region_export: an implicit-ODP view has no MR "
			   "of its own (exporting the implicit MR would open "
			   "the whole address space)");
		return EINVAL;
	}
	/* The caller holds r: its MRs are stable. */
	mr = pd ? mrmgr_region_mr_pd(r, pd) : mrmgr__region_plain_mr(r);
	if (!mr) {
		mrmgr__err("mrmgr_region_export: the region has no MR in PD %p; "
			   "mrmgr_get_ex() it there first", (void *)pd);
		return EINVAL;
	}
	ret = mrmgr__share_probe(mr->pd);
	if (ret) {
		mrmgr__err("mrmgr_region_export: %s cannot share MRs with other "
			   "processes (ibv_import_*: %s)",
			   mr->context->device->name, strerror(ret));
		return ret;
	}
	e = calloc(1, sizeof(*e));
	if (!e)
		return ENOMEM;

	mrmgr__core_lock(c);
	if (!mrmgr__rgn_live(r)) {
		mrmgr__core_unlock(c);
		free(e);
		mrmgr__err("mrmgr_region_export: [%#llx, +%llu) is no longer in "
			   "the cache (invalidated, merged or grown away); get "
			   "it again", (unsigned long long)mrmgr__rgn_start(r),
			   (unsigned long long)mrmgr__rgn_len(r));
		return ESTALE;
	}
	ret = mrmgr__share_cache_get(c);
	if (!ret)
		ret = mrmgr__share_get(c, r);
	if (ret) {
		mrmgr__core_unlock(c);
		free(e);
		return ret;
	}
	e->cache = c;
	e->r = r;
	e->mr = mr;
	e->cmd_fd = mr->context->cmd_fd;
	e->desc.version = MRMGR_EXPORT_DESC_VERSION;
	e->desc.size = sizeof(e->desc);
	e->desc.export_id = __atomic_add_fetch(&next_export_id, 1, __ATOMIC_RELAXED);
	e->desc.owner_pid = (int32_t)getpid();
	e->desc.pd_handle = mr->pd->handle;
	e->desc.mr_handle = mr->handle;
	e->desc.lkey = mr->lkey;
	e->desc.rkey = mr->rkey;
	e->desc.access = mrmgr__rgn_access(r);
	e->desc.addr = mrmgr__rgn_start(r);
	e->desc.length = mrmgr__rgn_len(r);
	e->desc.generation = mrmgr__rgn_gen(r);
	snprintf(e->desc.device, sizeof(e->desc.device), "%s",
		 mr->context->device->name);
	e->next = mrmgr__share_of(r)->exports;
	if (e->next)
		e->next->prev = e;
	mrmgr__share_of(r)->exports = e;
	mrmgr__share_of(r)->nexports++;
	mrmgr__core_count(c, exports, 1);
	mrmgr__core_count(c, share_exports, 1);
	mrmgr__share_pin(c, r); /* dropped by the release */
	mrmgr__core_unlock(c);
	mrmgr__dbg("export %llu: [%#llx, +%llu) handle %u keys %#x/%#x",
		   (unsigned long long)e->desc.export_id,
		   (unsigned long long)e->desc.addr,
		   (unsigned long long)e->desc.length, e->desc.mr_handle,
		   e->desc.lkey, e->desc.rkey);
	*exp = e;
	return 0;
}

MRMGR_EXPORT int mrmgr_export_describe(const mrmgr_export_t *e,
				       struct mrmgr_export_desc *desc,
				       size_t size, int *cmd_fd)
{
	if (!e || !desc || !size) {
		mrmgr__err("mrmgr_export_describe: %s", !e ? "NULL export"
				   : !desc ? "NULL descriptor" : "size 0");
		return EINVAL;
	}
	memcpy(desc, &e->desc, size < sizeof(e->desc) ? size : sizeof(e->desc));
	if (cmd_fd)
		*cmd_fd = e->cmd_fd;
	return 0;
}

MRMGR_EXPORT int mrmgr_export_revoked(const mrmgr_export_t *e)
{
	return e ? __atomic_load_n(&e->revoked, __ATOMIC_ACQUIRE) : 0;
}

MRMGR_EXPORT int mrmgr_export_release(mrmgr_export_t *e)
{
	struct mrmgr_cache *c;

	if (!e) {
		mrmgr__err("mrmgr_export_release: NULL export");
		return EINVAL;
	}
	c = e->cache;
	if (c) {
		mrmgr__core_lock(c);
		mrmgr__export_unlink(c, e);
		mrmgr__core_unref_locked(c, e->r,
					  mrmgr__core_slot(c));
		mrmgr__core_unlock(c);
	}
	free(e);
	return 0;
}

/* Told by the share helper (libmrmgr-share), which alone sees importers
 * attach and detach; counted here for the stats, query_shares and
 * destroy's report. */
MRMGR_EXPORT int mrmgr_export_importers(mrmgr_export_t *e, int delta)
{
	struct mrmgr_cache *c;
	int ret = 0;

	if (!e || (delta != 1 && delta != -1)) {
		mrmgr__err("mrmgr_export_importers: %s", !e ? "NULL export"
			   : "delta is not +1 or -1");
		return EINVAL;
	}
	c = e->cache;
	if (c)
		mrmgr__core_lock(c);
	if (delta < 0 && !e->importers) {
		ret = EINVAL;
	} else {
		e->importers += (uint32_t)delta;
		if (c) {
			mrmgr__core_count(c, share_importers, (uint64_t)(int64_t)delta);
			if (delta > 0)
				mrmgr__core_count(c, imports, (uint64_t)delta);
		}
	}
	if (c)
		mrmgr__core_unlock(c);
	if (ret)
		mrmgr__err("mrmgr_export_importers: export %llu has no importer "
			   "attached", (unsigned long long)e->desc.export_id);
	return ret;
}
