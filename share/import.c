/*
 * The importing side of cross-process sharing: an importer is an imported
 * device (ibv_import_device() on the owner's command descriptor), an
 * import is one imported MR (ibv_import_mr()) with the PD it lives in
 * (ibv_import_pd(), shared by the importer's imports of that PD).
 *
 * Which verbs: the descriptor is offered to the device providers
 * (libmrmgr's device seam, mrmgr_device_claim_fd()): each claims its own kind (verbs: a uverbs character
 * device; a provider such as libmrmgr-sim: its own descriptors, checked)
 * and the claimant's import hooks serve the importer. A descriptor
 * nobody claims is refused with EOPNOTSUPP, never guessed at.
 *
 * Imports are not in a cache: they cost no registration (the owner's MR
 * is shared), and their lifetime is the owner's, not the importer's.
 * What an importer can do is refuse a stale descriptor: the keys the
 * device reports for the handle must be the descriptor's, else the
 * handle now names another MR (the owner deregistered it and registered
 * another) and the import is refused with ESTALE.
 *
 * Thread safety: an importer's calls may run concurrently (its lock
 * guards the PD table and the count); one import is used by one thread
 * at a time, like a region.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <mrmgr/device.h>

#include "log.h"
#include "share_proto.h"

struct ipd {
	uint32_t handle;
	unsigned int refs;
	struct ibv_pd *pd;
};

struct mrmgr_importer {
	const struct mrmgr_device_ops *ops;
	struct ibv_context *ctx;
	pthread_mutex_t lock;
	struct ipd *pds;
	size_t npds, cap;
	uint64_t nimports;
};

struct mrmgr_import {
	struct mrmgr_importer *importer;
	struct ibv_pd *pd;
	struct ibv_mr *mr;
	struct mrmgr_export_desc desc;
	int revoked; /* atomic: set by the share client */
};

MRMGR_EXPORT int mrmgr_importer_open(int cmd_fd, mrmgr_importer_t **out)
{
	const struct mrmgr_device_ops *ops;
	struct mrmgr_importer *imp;
	struct stat st;
	int ret;

	if (cmd_fd < 0 || !out) {
		mrmgr__err("mrmgr_importer_open: %s", !out ? "NULL importer pointer"
							  : "bad descriptor");
		return EINVAL;
	}
	if (fstat(cmd_fd, &st) != 0) {
		ret = errno;
		mrmgr__err("mrmgr_importer_open: fd %d: %s", cmd_fd, strerror(ret));
		return ret == EBADF ? EINVAL : ret;
	}
	ops = mrmgr_device_claim_fd(cmd_fd);
	if (!ops) {
		mrmgr__err("mrmgr_importer_open: fd %d is no device provider's "
			   "command descriptor", cmd_fd);
		return EOPNOTSUPP;
	}
	imp = calloc(1, sizeof(*imp));
	if (!imp)
		return ENOMEM;
	imp->ops = ops;
	ret = mrmgr__share_errno(ops->import_device(cmd_fd, &imp->ctx));
	if (ret) {
		free(imp);
		if (ret == EOPNOTSUPP)
			mrmgr__err("mrmgr_importer_open: the device cannot "
				   "import (%s backend: ibv_import_device: "
				   "EOPNOTSUPP); rxe and siw have no import",
				   ops->name);
		else
			mrmgr__err("mrmgr_importer_open: importing the device: "
				   "%s", strerror(ret));
		return ret;
	}
	pthread_mutex_init(&imp->lock, NULL);
	mrmgr__info("importer on %s (%s)", imp->ctx->device->name, imp->ops->name);
	*out = imp;
	return 0;
}

MRMGR_EXPORT struct ibv_context *mrmgr_importer_context(const mrmgr_importer_t *imp)
{
	return imp ? imp->ctx : NULL;
}

MRMGR_EXPORT int mrmgr_importer_close(mrmgr_importer_t *imp)
{
	int ret;

	if (!imp) {
		mrmgr__err("mrmgr_importer_close: NULL importer");
		return EINVAL;
	}
	pthread_mutex_lock(&imp->lock);
	if (imp->nimports) {
		pthread_mutex_unlock(&imp->lock);
		mrmgr__err("mrmgr_importer_close: %llu imports are live; "
			   "release them first", (unsigned long long)imp->nimports);
		return EBUSY;
	}
	pthread_mutex_unlock(&imp->lock);
	ret = mrmgr__share_errno(imp->ops->close_device(imp->ctx));
	if (ret)
		mrmgr__err("mrmgr_importer_close: closing the device: %s",
			   strerror(ret));
	pthread_mutex_destroy(&imp->lock);
	free(imp->pds);
	free(imp);
	return 0;
}

/*
 * The imported PD for handle, imported on first use. Lock held; let go
 * while the backend imports (it may wait on the owner, a peer that need
 * not answer promptly), so a slow import never blocks the importer's
 * other calls.
 */
static int get_pd(struct mrmgr_importer *imp, uint32_t handle,
		  struct ibv_pd **pd)
{
	struct ibv_pd *p;
	int ret;

	for (int pass = 0;; pass++) {
		for (size_t i = 0; i < imp->npds; i++) {
			if (imp->pds[i].handle == handle) {
				imp->pds[i].refs++;
				*pd = imp->pds[i].pd;
				if (pass) /* another thread imported it meanwhile */
					imp->ops->unimport_pd(p);
				return 0;
			}
		}
		if (pass)
			break;
		pthread_mutex_unlock(&imp->lock);
		ret = mrmgr__share_errno(imp->ops->import_pd(imp->ctx, handle, &p));
		pthread_mutex_lock(&imp->lock);
		if (ret)
			return ret;
	}
	if (imp->npds == imp->cap) {
		size_t cap = imp->cap ? imp->cap * 2 : 4;
		void *v = realloc(imp->pds, cap * sizeof(*imp->pds));

		if (!v) {
			imp->ops->unimport_pd(p);
			return ENOMEM;
		}
		imp->pds = v;
		imp->cap = cap;
	}
	imp->pds[imp->npds++] = (struct ipd){ handle, 1, p };
	*pd = p;
	return 0;
}

static void put_pd(struct mrmgr_importer *imp, struct ibv_pd *pd)
{
	for (size_t i = 0; i < imp->npds; i++) {
		if (imp->pds[i].pd != pd)
			continue;
		if (--imp->pds[i].refs == 0) {
			(void)imp->ops->unimport_pd(pd);
			imp->pds[i] = imp->pds[--imp->npds];
		}
		return;
	}
}

MRMGR_EXPORT int mrmgr_import(mrmgr_importer_t *importer,
			      const struct mrmgr_export_desc *desc,
			      size_t desc_size, mrmgr_import_t **out)
{
	const size_t need = offsetof(struct mrmgr_export_desc, device) +
			    sizeof(desc->device);
	struct mrmgr_import *imp;
	struct ibv_mr *mr = NULL;
	struct ibv_pd *pd = NULL;
	int ret;

	if (!importer || !desc || !out || desc_size < need) {
		mrmgr__err("mrmgr_import: %s", !importer ? "NULL importer"
				   : !desc || !out ? "NULL argument"
				   : "descriptor too short");
		return EINVAL;
	}
	if (desc->version != MRMGR_EXPORT_DESC_VERSION || desc->size < need) {
		mrmgr__err("mrmgr_import: descriptor version %u (size %u); this "
			   "library reads version %u", desc->version, desc->size,
			   MRMGR_EXPORT_DESC_VERSION);
		return EINVAL;
	}
	if (strncmp(desc->device, importer->ctx->device->name,
		    sizeof(desc->device)) != 0) {
		mrmgr__err("mrmgr_import: the descriptor is of %.64s, the "
			   "importer of %s", desc->device,
			   importer->ctx->device->name);
		return EINVAL;
	}
	imp = calloc(1, sizeof(*imp));
	if (!imp)
		return ENOMEM;
	pthread_mutex_lock(&importer->lock);
	importer->nimports++; /* counted now: close() waits for it */
	ret = get_pd(importer, desc->pd_handle, &pd);
	pthread_mutex_unlock(&importer->lock);
	/* No lock while the backend imports: it may wait on the owner. */
	if (!ret) {
		ret = mrmgr__share_errno(importer->ops->import_mr(pd, desc->mr_handle,
								   &mr));
		if (!ret && (mr->lkey != desc->lkey || mr->rkey != desc->rkey ||
			     (mr->length && mr->length != desc->length))) {
			/* The handle was reused: not the MR exported. */
			mrmgr__err("mrmgr_import: MR handle %u has keys %#x/%#x, "
				   "the descriptor says %#x/%#x: stale",
				   desc->mr_handle, mr->lkey, mr->rkey,
				   desc->lkey, desc->rkey);
			(void)importer->ops->unimport_mr(mr);
			ret = ESTALE;
		}
	}
	if (ret) {
		pthread_mutex_lock(&importer->lock);
		if (pd)
			put_pd(importer, pd);
		importer->nimports--;
		pthread_mutex_unlock(&importer->lock);
	}
	if (ret) {
		free(imp);
		if (ret != ESTALE)
			mrmgr__err("mrmgr_import: export %llu (PD %u, MR %u): %s",
				   (unsigned long long)desc->export_id,
				   desc->pd_handle, desc->mr_handle,
				   strerror(ret));
		return ret;
	}
	imp->importer = importer;
	imp->pd = pd;
	imp->mr = mr;
	memcpy(&imp->desc, desc, sizeof(imp->desc));
	mrmgr__dbg("import %llu: [%#llx, +%llu) keys %#x/%#x",
		   (unsigned long long)desc->export_id,
		   (unsigned long long)desc->addr,
		   (unsigned long long)desc->length, mr->lkey, mr->rkey);
	*out = imp;
	return 0;
}

MRMGR_EXPORT int mrmgr_import_release(mrmgr_import_t *imp)
{
	struct mrmgr_importer *importer;

	if (!imp) {
		mrmgr__err("mrmgr_import_release: NULL import");
		return EINVAL;
	}
	importer = imp->importer;
	pthread_mutex_lock(&importer->lock);
	(void)importer->ops->unimport_mr(imp->mr);
	put_pd(importer, imp->pd);
	importer->nimports--;
	pthread_mutex_unlock(&importer->lock);
	free(imp);
	return 0;
}

MRMGR_EXPORT struct ibv_mr *mrmgr_import_mr(const mrmgr_import_t *imp)
{
	return imp ? imp->mr : NULL;
}

MRMGR_EXPORT struct ibv_pd *mrmgr_import_pd(const mrmgr_import_t *imp)
{
	return imp ? imp->pd : NULL;
}

MRMGR_EXPORT uint64_t mrmgr_import_addr(const mrmgr_import_t *imp)
{
	return imp ? imp->desc.addr : 0;
}

MRMGR_EXPORT uint64_t mrmgr_import_length(const mrmgr_import_t *imp)
{
	return imp ? imp->desc.length : 0;
}

MRMGR_EXPORT uint64_t mrmgr_import_id(const mrmgr_import_t *imp)
{
	return imp ? imp->desc.export_id : 0;
}

MRMGR_EXPORT int mrmgr_import_revoked(const mrmgr_import_t *imp)
{
	return imp ? __atomic_load_n(&imp->revoked, __ATOMIC_ACQUIRE) : 0;
}

/* For the share client: the owner revoked it. */
void mrmgr__import_set_revoked(struct mrmgr_import *imp)
{
	__atomic_store_n(&imp->revoked, 1, __ATOMIC_RELEASE);
}
