/*
 * The device seam: the providers' registry, the operations with their
 * results normalised, errno's one reading, and the learnt-capability table.
 *
 * Providers are few (verbs, perhaps a simulator or a middleware's own)
 * and asked only on slow paths (cache creation, importer open), so a
 * small array under a mutex is all the registry needs. A registered table
 * is copied into a slot that is never freed or reused: a cache keeps a
 * pointer to it for its whole life, even across mrmgr_device_unregister().
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "device.h"
#include "log.h"

#define MAX_PROVIDERS 8

struct provider {
	const struct mrmgr_device_ops *user; /* the caller's table */
	struct mrmgr_device_ops ops;         /* our full-size copy */
	int active;
};

static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static struct provider providers[MAX_PROVIDERS];
static unsigned int nproviders;

/* ------------------------------------------------------------ registry */

static int zero_tail(const struct mrmgr_device_ops *ops)
{
	const unsigned char *p = (const unsigned char *)ops;

	for (size_t i = sizeof(*ops); i < ops->size; i++)
		if (p[i])
			return 0;
	return 1;
}

/* Why a table cannot be registered, or NULL. */
static const char *malformed(const struct mrmgr_device_ops *ops)
{
	const size_t need = offsetof(struct mrmgr_device_ops, dereg_mr) +
			    sizeof(ops->dereg_mr);
	struct mrmgr_device_ops o;
	int nshare;

	if (ops->comp_mask)
		return "unknown comp_mask bits";
	if (ops->size < need)
		return "size too small (set it to sizeof(struct mrmgr_device_ops))";
	if (!zero_tail(ops))
		return "hooks this library does not know are set";
	memset(&o, 0, sizeof(o));
	memcpy(&o, ops, ops->size < sizeof(o) ? ops->size : sizeof(o));
	if (!o.name || !o.owns_context || !o.query_device || !o.reg_mr ||
	    !o.dereg_mr)
		return "a required hook (name, owns_context, query_device, "
		       "reg_mr, dereg_mr) is NULL";
	nshare = !!o.claim_fd + !!o.import_device + !!o.close_device +
		 !!o.import_pd + !!o.unimport_pd + !!o.import_mr +
		 !!o.unimport_mr;
	if (nshare != 0 && nshare != 7)
		return "claim_fd ... unimport_mr are all set or none";
	return NULL;
}

MRMGR_EXPORT int mrmgr_device_register(const struct mrmgr_device_ops *ops)
{
	struct mrmgr_device_ops copy;
	const char *why;
	struct provider *p;

	if (!ops) {
		mrmgr__err("mrmgr_device_register: NULL ops");
		return EINVAL;
	}
	why = malformed(ops);
	if (why) {
		mrmgr__err("mrmgr_device_register: %s", why);
		return EINVAL;
	}
	memset(&copy, 0, sizeof(copy));
	memcpy(&copy, ops, ops->size < sizeof(copy) ? ops->size : sizeof(copy));
	copy.size = sizeof(copy);
	pthread_mutex_lock(&reg_lock);
	for (unsigned int i = 0; i < nproviders; i++) {
		if (providers[i].user != ops)
			continue;
		if (providers[i].active) {
			pthread_mutex_unlock(&reg_lock);
			return EEXIST;
		}
		/* Registered again, unchanged: the same slot, so what was
		 * learnt about its devices still holds. */
		if (!memcmp(&providers[i].ops, &copy, sizeof(copy))) {
			providers[i].active = 1;
			pthread_mutex_unlock(&reg_lock);
			return 0;
		}
	}
	if (nproviders == MAX_PROVIDERS) {
		pthread_mutex_unlock(&reg_lock);
		mrmgr__err("mrmgr_device_register: %u providers are registered "
			   "already", MAX_PROVIDERS);
		return ENOSPC;
	}
	p = &providers[nproviders];
	p->ops = copy;
	p->user = ops;
	p->active = 1;
	nproviders++;
	pthread_mutex_unlock(&reg_lock);
	mrmgr__dbg("device provider %s registered", p->ops.name);
	return 0;
}

MRMGR_EXPORT int mrmgr_device_unregister(const struct mrmgr_device_ops *ops)
{
	int ret = ENOENT;

	if (!ops) {
		mrmgr__err("mrmgr_device_unregister: NULL ops");
		return EINVAL;
	}
	pthread_mutex_lock(&reg_lock);
	for (unsigned int i = 0; i < nproviders; i++) {
		if (providers[i].user == ops && providers[i].active) {
			providers[i].active = 0;
			ret = 0;
		}
	}
	pthread_mutex_unlock(&reg_lock);
	return ret;
}

MRMGR_EXPORT void mrmgr_device_vlog(enum mrmgr_log_level level,
				    const char *fmt, va_list ap)
{
	char line[512];

	if (!fmt || !mrmgr__log_enabled(level))
		return;
	vsnprintf(line, sizeof(line), fmt, ap);
	mrmgr__log(level, "%s", line);
}

const struct mrmgr_device_ops *mrmgr__dev_for(const struct ibv_context *ctx)
{
	const struct mrmgr_device_ops *found = &mrmgr__verbs_ops;

	pthread_mutex_lock(&reg_lock);
	for (unsigned int i = nproviders; i-- > 0;) {
		if (providers[i].active && providers[i].ops.owns_context(ctx)) {
			found = &providers[i].ops;
			break;
		}
	}
	pthread_mutex_unlock(&reg_lock);
	return found;
}

const struct mrmgr_device_ops *mrmgr__dev_claim_fd(int cmd_fd)
{
	const struct mrmgr_device_ops *found = NULL;

	pthread_mutex_lock(&reg_lock);
	for (unsigned int i = nproviders; i-- > 0 && !found;)
		if (providers[i].active && providers[i].ops.claim_fd &&
		    providers[i].ops.claim_fd(cmd_fd))
			found = &providers[i].ops;
	pthread_mutex_unlock(&reg_lock);
	if (!found && mrmgr__verbs_ops.claim_fd(cmd_fd))
		found = &mrmgr__verbs_ops;
	return found;
}

/* ------------------------------------------------------------ errno */

int mrmgr__dev_unsupported(int err)
{
	if (err == ENOSYS)
		return MRMGR__UNSUP_VERB;
	if (err == EOPNOTSUPP)
		return MRMGR__UNSUP_OP;
#if ENOTSUP != EOPNOTSUPP
	if (err == ENOTSUP)
		return MRMGR__UNSUP_OP;
#endif
	return MRMGR__UNSUP_NO;
}

int mrmgr__dev_errno(int err)
{
	if (err < 0)
		err = -err;
	return mrmgr__dev_unsupported(err) ? EOPNOTSUPP : err;
}

/* ------------------------------------------------------------ operations */

int mrmgr__dev_query(const struct mrmgr_device_ops *ops,
		     struct ibv_context *ctx, struct mrmgr__dev_caps *caps)
{
	struct mrmgr_device_attr a;
	int ret;

	memset(&a, 0, sizeof(a));
	memset(caps, 0, sizeof(*caps));
	ret = ops->query_device(ctx, &a);
	if (ret)
		return ret < 0 ? -ret : ret;
	memcpy(caps->name, a.name, sizeof(caps->name));
	caps->name[sizeof(caps->name) - 1] = '\0';
	caps->max_mr_size = a.max_mr_size;
	caps->max_mr = a.max_mr;
	caps->max_sge = a.max_sge ? a.max_sge : 1;
	caps->page_size_cap = a.page_size_cap;
	caps->odp_general = a.odp_general;
	caps->odp_rc = a.odp_rc;
	caps->odp_uc = a.odp_uc;
	caps->odp_ud = a.odp_ud;
	caps->odp_xrc = a.odp_xrc;
	caps->cap_flags = ops->cap_flags;
	mrmgr__dev_quirks(ops, ctx, caps);
	return 0;
}

int mrmgr__dev_reg_mr(const struct mrmgr_device_ops *ops, struct ibv_pd *pd,
		      void *addr, size_t length, int access, struct ibv_mr **mr)
{
	int ret;

	*mr = NULL;
	ret = ops->reg_mr(pd, addr, length, access, mr);
	if (ret < 0)
		ret = -ret;
	if (ret)
		*mr = NULL;
	else if (!*mr)
		ret = EIO;
	return ret;
}

int mrmgr__dev_reg_dmabuf_mr(const struct mrmgr_device_ops *ops,
			     struct ibv_pd *pd, uint64_t offset, size_t length,
			     uint64_t iova, int fd, int access,
			     struct ibv_mr **mr)
{
	int ret;

	*mr = NULL;
	/* The registry's copy is full-size and zero past a provider's
	 * size: a 1.0 provider has no dma-buf op. */
	if (!ops->reg_dmabuf_mr)
		return EOPNOTSUPP;
	ret = ops->reg_dmabuf_mr(pd, offset, length, iova, fd, access, mr);
	ret = mrmgr__dev_errno(ret);
	if (ret)
		*mr = NULL;
	else if (!*mr)
		ret = EIO;
	return ret;
}

int mrmgr__dev_dereg_mr(const struct mrmgr_device_ops *ops, struct ibv_mr *mr)
{
	int ret = ops->dereg_mr(mr);

	return ret < 0 ? -ret : ret;
}

int mrmgr__dev_rereg_mr(const struct mrmgr_device_ops *ops, struct ibv_mr *mr,
			int flags, struct ibv_pd *pd, void *addr, size_t length,
			int access, int *err)
{
	int code;

	*err = 0;
	if (!ops->rereg_mr) {
		*err = EOPNOTSUPP;
		return IBV_REREG_MR_ERR_INPUT;
	}
	code = ops->rereg_mr(mr, flags, pd, addr, length, access, err);
	if (code == 0)
		return 0;
	if (*err < 0)
		*err = -*err;
	if (*err == 0)
		*err = code > 0 ? code : EIO;
	if (code < IBV_REREG_MR_ERR_CMD_AND_DO_FORK_NEW || code > 0)
		return IBV_REREG_MR_ERR_CMD;
	return code;
}

int mrmgr__dev_advise_mr(const struct mrmgr_device_ops *ops, struct ibv_pd *pd,
			 enum ibv_advise_mr_advice advice, uint32_t flags,
			 struct ibv_sge *sg_list, uint32_t num_sge)
{
	int ret;

	if (!ops->advise_mr)
		return EOPNOTSUPP;
	ret = ops->advise_mr(pd, advice, flags, sg_list, num_sge);
	return ret < 0 ? -ret : ret;
}

/* ------------------------------------------------------------ learnt */

#define MAX_LEARNT 64

struct learnt {
	const struct mrmgr_device_ops *ops;
	char name[64];
	int known[MRMGR__LEARN_COUNT];
	int val[MRMGR__LEARN_COUNT];
};

static pthread_mutex_t learnt_lock = PTHREAD_MUTEX_INITIALIZER;
static struct learnt learnts[MAX_LEARNT];
static unsigned int nlearnt, learnt_next;

/* The entry of (ops, name), or NULL. Lock held. */
static struct learnt *learnt_find(const struct mrmgr_device_ops *ops,
				  const char *name)
{
	for (unsigned int i = 0; i < nlearnt; i++)
		if (learnts[i].ops == ops && !strcmp(learnts[i].name, name))
			return &learnts[i];
	return NULL;
}

int mrmgr__dev_learnt(const struct mrmgr_device_ops *ops, const char *name,
		      enum mrmgr__dev_learn what, int *val)
{
	struct learnt *e;
	int known = 0;

	pthread_mutex_lock(&learnt_lock);
	e = learnt_find(ops, name);
	if (e && e->known[what]) {
		*val = e->val[what];
		known = 1;
	}
	pthread_mutex_unlock(&learnt_lock);
	return known;
}

void mrmgr__dev_learn(const struct mrmgr_device_ops *ops, const char *name,
		      enum mrmgr__dev_learn what, int val)
{
	struct learnt *e;

	pthread_mutex_lock(&learnt_lock);
	e = learnt_find(ops, name);
	if (!e) {
		if (nlearnt < MAX_LEARNT) {
			e = &learnts[nlearnt++];
		} else {
			e = &learnts[learnt_next];
			learnt_next = (learnt_next + 1) % MAX_LEARNT;
		}
		memset(e, 0, sizeof(*e));
		e->ops = ops;
		snprintf(e->name, sizeof(e->name), "%s", name);
	}
	e->known[what] = 1;
	e->val[what] = val;
	pthread_mutex_unlock(&learnt_lock);
}

/* ------------------------------------------------------------ import probe */

/*
 * Can the device import? The provider's cheapest question (verbs:
 * ibv_import_pd() of the owner's own PD; rdma-core's stub fails with
 * EOPNOTSUPP where the provider has no import: rxe, siw). A provider
 * without sharing hooks cannot.
 */
int mrmgr__dev_can_import(struct ibv_pd *pd)
{
	const struct mrmgr_device_ops *ops = mrmgr__dev_for(pd->context);
	const char *name = pd->context->device->name;
	int err;

	if (mrmgr__dev_learnt(ops, name, MRMGR__LEARN_IMPORT, &err))
		return err;
	err = ops->can_import && ops->claim_fd
		      ? mrmgr__dev_errno(ops->can_import(pd))
		      : EOPNOTSUPP;
	if (err && err != EOPNOTSUPP)
		return err; /* not a verdict on the device: ask again later */
	mrmgr__info("%s: MR import %s", name,
		    err ? "is not supported (ibv_import_pd: EOPNOTSUPP)"
			: "works");
	mrmgr__dev_learn(ops, name, MRMGR__LEARN_IMPORT, err);
	return err;
}
