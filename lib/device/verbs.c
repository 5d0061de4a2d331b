/*
 * The built-in device provider: libibverbs. Thin on purpose: verbs mixes
 * NULL+errno, positive and negative returns; each hook turns that into
 * the seam's one convention (0 or a positive errno) right at the call,
 * before logging can clobber errno. device.c does the rest.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "compat.h"
#include "device.h"

typedef int (*fork_status_fn)(void);

/* Resolved once; a data race on the pointer is harmless (every thread
 * finds the same function), but keep it atomic for the sanitizers. */
int mrmgr__verbs_fork_status_lookup(void)
{
	static fork_status_fn fn;
	static int looked;
	fork_status_fn f;

	if (!__atomic_load_n(&looked, __ATOMIC_ACQUIRE)) {
		void *h = dlopen("libibverbs.so.1", RTLD_LAZY | RTLD_NOLOAD);
		void *sym = h ? dlsym(h, "ibv_is_fork_initialized") : NULL;

		if (!sym)
			sym = dlsym(RTLD_DEFAULT, "ibv_is_fork_initialized");
		if (h)
			dlclose(h);
		/* A function pointer from dlsym(), as POSIX allows. */
		memcpy(&f, &sym, sizeof(f));
		__atomic_store_n(&fn, f, __ATOMIC_RELAXED);
		__atomic_store_n(&looked, 1, __ATOMIC_RELEASE);
	}
	f = __atomic_load_n(&fn, __ATOMIC_RELAXED);
	return f ? f() : (int)IBV_FORK_DISABLED;
}

int mrmgr__verbs_fork_status(void)
{
#if HAVE_DECL_IBV_IS_FORK_INITIALIZED
	return (int)ibv_is_fork_initialized();
#else
	return mrmgr__verbs_fork_status_lookup();
#endif
}

/*
 * ibv_query_device_ex() first: it carries odp_caps. Providers without the
 * extended verb (or old kernels) make it fail with EOPNOTSUPP/ENOSYS;
 * then the basic query gives the rest and ODP stays off.
 */
/* Every context no other provider claims is a libibverbs one. */
static int verbs_owns_context(const struct ibv_context *ctx)
{
	(void)ctx;
	return 1;
}

static int verbs_query_device(struct ibv_context *ctx,
			      struct mrmgr_device_attr *caps)
{
	struct ibv_device_attr_ex ax;
	struct ibv_device_attr *attr = &ax.orig_attr;
	int ret;

	memset(caps, 0, sizeof(*caps));
	memset(&ax, 0, sizeof(ax));
	ret = ibv_query_device_ex(ctx, NULL, &ax);
	if (ret) {
		memset(&ax, 0, sizeof(ax));
		ret = ibv_query_device(ctx, attr);
		if (ret)
			return ret > 0 ? ret : (errno ? errno : EIO);
	} else {
		caps->odp_general = ax.odp_caps.general_caps;
		caps->odp_rc = ax.odp_caps.per_transport_caps.rc_odp_caps;
		caps->odp_uc = ax.odp_caps.per_transport_caps.uc_odp_caps;
		caps->odp_ud = ax.odp_caps.per_transport_caps.ud_odp_caps;
		caps->odp_xrc = ax.xrc_odp_caps;
	}
	snprintf(caps->name, sizeof(caps->name), "%s",
		 ibv_get_device_name(ctx->device));
	caps->max_mr_size = attr->max_mr_size;
	caps->max_mr = attr->max_mr > 0 ? (uint32_t)attr->max_mr : 0;
	caps->max_sge = attr->max_sge > 0 ? (uint32_t)attr->max_sge : 1;
	caps->page_size_cap = attr->page_size_cap;
	return 0;
}

static int verbs_reg_mr(struct ibv_pd *pd, void *addr, size_t length,
			int access, struct ibv_mr **mr)
{
	errno = 0;
	*mr = ibv_reg_mr(pd, addr, length, access);
	if (*mr)
		return 0;
	return errno ? errno : EIO;
}

/*
 * ibv_reg_dmabuf_mr() came with rdma-core 34: looked up at run time, so
 * one build runs on an older libibverbs (EOPNOTSUPP, said once per
 * call by the caller's log) and a newer one. configure's check only
 * says in config.h whether the build's headers had it.
 */
typedef struct ibv_mr *(*reg_dmabuf_fn)(struct ibv_pd *, uint64_t, size_t,
					 uint64_t, int, int);

static reg_dmabuf_fn verbs_dmabuf_sym(void)
{
	static reg_dmabuf_fn fn;
	static int looked;

	if (!__atomic_load_n(&looked, __ATOMIC_ACQUIRE)) {
		void *sym = dlsym(RTLD_DEFAULT, "ibv_reg_dmabuf_mr");

		/* A function pointer from dlsym(), as POSIX allows. */
		memcpy(&fn, &sym, sizeof(fn));
		__atomic_store_n(&looked, 1, __ATOMIC_RELEASE);
	}
	return fn;
}

static int verbs_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset,
			       size_t length, uint64_t iova, int fd,
			       int access, struct ibv_mr **mr)
{
	reg_dmabuf_fn fn = verbs_dmabuf_sym();

	*mr = NULL;
	if (!fn)
		return EOPNOTSUPP;
	errno = 0;
	*mr = fn(pd, offset, length, iova, fd, access);
	if (*mr)
		return 0;
	/* rxe and other providers without the op: EOPNOTSUPP. */
	return errno ? errno : EIO;
}

static int verbs_dereg_mr(struct ibv_mr *mr)
{
	int ret = ibv_dereg_mr(mr);

	if (ret < 0)
		ret = errno ? errno : EIO;
	return ret;
}

/*
 * ibv_advise_mr() is an inline that returns EOPNOTSUPP itself when the
 * provider lacks the op, else the provider's positive errno; ENOSYS comes
 * from old libibverbs. Normalise a stray negative value too.
 */
static int verbs_advise_mr(struct ibv_pd *pd, enum ibv_advise_mr_advice advice,
			   uint32_t flags, struct ibv_sge *sg_list,
			   uint32_t num_sge)
{
	int ret = ibv_advise_mr(pd, advice, flags, sg_list, num_sge);

	return ret < 0 ? -ret : ret;
}

/*
 * rdma-core returns the negative enum ibv_rereg_mr_err_code and sets
 * errno; a provider without rereg fails as IBV_REREG_MR_ERR_CMD with
 * EOPNOTSUPP (rdma-core 44; older ones: ERR_INPUT with ENOSYS). errno is
 * captured at once, and a value outside the enum (a positive provider
 * return passed through by an older libibverbs) is read as "the MR must
 * not be used", the one reading that cannot leave a stale MR in use.
 */
static int verbs_rereg_mr(struct ibv_mr *mr, int flags, struct ibv_pd *pd,
			  void *addr, size_t length, int access, int *err)
{
	int ret;

	errno = 0;
	ret = ibv_rereg_mr(mr, flags, pd, addr, length, access);
	*err = errno;
	if (ret == 0)
		return 0;
	if (*err == 0)
		*err = ret > 0 ? ret : EIO;
	if (ret < IBV_REREG_MR_ERR_CMD_AND_DO_FORK_NEW || ret > 0)
		return IBV_REREG_MR_ERR_CMD;
	return ret;
}

/* ------------------------------------------------------------ sharing */

static int verbs_can_import(struct ibv_pd *pd)
{
	struct ibv_pd *p;

	errno = 0;
	p = ibv_import_pd(pd->context, pd->handle);
	if (!p)
		return errno ? errno : EOPNOTSUPP;
	ibv_unimport_pd(p);
	return 0;
}

/*
 * A uverbs command descriptor is a character device of the
 * infiniband_verbs class (/dev/infiniband/uverbsN). Where sysfs is not
 * mounted the class cannot be read: any character device is offered to
 * ibv_import_device(), which checks it with the kernel.
 */
static int verbs_claim_fd(int fd)
{
	char path[64], link[256];
	struct stat st;
	ssize_t n;

	if (fstat(fd, &st) != 0 || !S_ISCHR(st.st_mode))
		return 0;
	snprintf(path, sizeof(path), "/sys/dev/char/%u:%u/subsystem",
		 major(st.st_rdev), minor(st.st_rdev));
	n = readlink(path, link, sizeof(link) - 1);
	if (n < 0)
		return access("/sys/dev/char", F_OK) != 0;
	link[n] = '\0';
	n = (ssize_t)strlen(link) - (ssize_t)strlen("/infiniband_verbs");
	return n >= 0 && !strcmp(link + n, "/infiniband_verbs");
}

static int verbs_import_device(int fd, struct ibv_context **ctx)
{
	errno = 0;
	*ctx = ibv_import_device(fd);
	if (*ctx)
		return 0;
	return errno ? errno : EIO;
}

static int verbs_close_device(struct ibv_context *ctx)
{
	int ret = ibv_close_device(ctx);

	return ret < 0 ? (errno ? errno : EIO) : ret;
}

static int verbs_import_pd(struct ibv_context *ctx, uint32_t handle,
			   struct ibv_pd **pd)
{
	errno = 0;
	*pd = ibv_import_pd(ctx, handle);
	if (*pd)
		return 0;
	return errno ? errno : EIO;
}

static int verbs_unimport_pd(struct ibv_pd *pd)
{
	ibv_unimport_pd(pd);
	return 0;
}

static int verbs_import_mr(struct ibv_pd *pd, uint32_t handle,
			   struct ibv_mr **mr)
{
	errno = 0;
	*mr = ibv_import_mr(pd, handle);
	if (*mr)
		return 0;
	return errno ? errno : EIO;
}

static int verbs_unimport_mr(struct ibv_mr *mr)
{
	ibv_unimport_mr(mr);
	return 0;
}

const struct mrmgr_device_ops mrmgr__verbs_ops = {
	.size = sizeof(struct mrmgr_device_ops),
	.name = "verbs",
	.owns_context = verbs_owns_context,
	.query_device = verbs_query_device,
	.reg_mr = verbs_reg_mr,
	.dereg_mr = verbs_dereg_mr,
	.rereg_mr = verbs_rereg_mr,
	.advise_mr = verbs_advise_mr,
	.can_import = verbs_can_import,
	.claim_fd = verbs_claim_fd,
	.import_device = verbs_import_device,
	.close_device = verbs_close_device,
	.import_pd = verbs_import_pd,
	.unimport_pd = verbs_unimport_pd,
	.import_mr = verbs_import_mr,
	.unimport_mr = verbs_unimport_mr,
	.reg_dmabuf_mr = verbs_reg_dmabuf_mr,
};
