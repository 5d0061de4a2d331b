/*
 * mrmgr_perftest: the device. libibverbs directly for a real device; for
 * --sim the simulated HCA's own entry points (mrmgr_sim_reg_mr & co.,
 * the calls its provider on libmrmgr's device seam makes), since a
 * simulated context has no verbs provider behind ibv_reg_mr(). Every MR
 * registered here is tracked until it is deregistered, so an interrupted
 * run can deregister what is left.
 *
 * SPDX-License-Identifier: MIT
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <mrmgr/sim.h>

#include "perftest.h"

#define SIM_MAX_MR (1u << 24)
#define SIM_MAX_MR_SIZE (UINT64_C(1) << 40)

static struct ibv_mr **live;
static size_t nlive, cap, stuck;

static int track(struct ibv_mr *mr)
{
	if (nlive == cap) {
		size_t ncap = cap ? cap * 2 : 64;
		struct ibv_mr **n = realloc(live, ncap * sizeof(*n));

		if (!n)
			return ENOMEM;
		live = n;
		cap = ncap;
	}
	live[nlive++] = mr;
	return 0;
}

static void untrack(struct ibv_mr *mr)
{
	for (size_t i = nlive; i-- > 0;)
		if (live[i] == mr) {
			live[i] = live[--nlive];
			return;
		}
}

static int raw_reg(struct pt_dev *d, struct ibv_pd *pd, void *addr,
		   size_t len, int access, struct ibv_mr **mr)
{
	if (d->sim)
		return mrmgr_sim_reg_mr(pd, addr, len, (unsigned int)access, mr);
	errno = 0;
	*mr = ibv_reg_mr(pd, addr, len, access);
	return *mr ? 0 : errno ? errno : EIO;
}

static int raw_dereg(struct pt_dev *d, struct ibv_mr *mr)
{
	return d->sim ? mrmgr_sim_dereg_mr(mr) : ibv_dereg_mr(mr);
}

int pt_reg(struct pt_dev *d, struct ibv_pd *pd, void *addr, size_t len,
	   int access, struct ibv_mr **mr)
{
	int ret = raw_reg(d, pd, addr, len, access, mr);

	if (!ret && (ret = track(*mr))) {
		raw_dereg(d, *mr);
		*mr = NULL;
	}
	return ret;
}

int pt_dereg(struct pt_dev *d, struct ibv_mr *mr)
{
	int ret = raw_dereg(d, mr);

	if (!ret)
		untrack(mr);
	return ret;
}

unsigned int pt_dereg_all(struct pt_dev *d)
{
	unsigned int n = 0;

	while (nlive) {
		struct ibv_mr *mr = live[nlive - 1];

		/* One that will not go leaves the list all the same, and
		 * is counted as still registered by pt_dev_live(). */
		nlive--;
		if (!raw_dereg(d, mr))
			n++;
		else
			stuck++;
	}
	return n;
}

void pt_dev_live(struct pt_dev *d, uint64_t *mrs, int64_t *pinned)
{
	struct mrmgr_sim_stats s;

	if (d->sim && !mrmgr_sim_query_stats(d->ctx, &s, sizeof(s))) {
		*mrs = s.live_mrs;
		*pinned = (int64_t)s.pinned_bytes;
		return;
	}
	*mrs = nlive + stuck;
	*pinned = -1;
}

int pt_rereg(struct pt_dev *d, struct ibv_mr *mr, int flags,
	     struct ibv_pd *pd, void *addr, size_t len, int access)
{
	int ret, err = 0;

	if (d->sim)
		return mrmgr_sim_rereg_mr(mr, flags, pd, addr, len, access, NULL);
	errno = 0;
	ret = ibv_rereg_mr(mr, flags, pd, addr, len, access);
	if (ret)
		err = errno ? errno : EIO;
	return err;
}

int pt_advise(struct pt_dev *d, enum ibv_advise_mr_advice advice,
	      uint32_t flags, struct ibv_sge *sge)
{
	if (d->sim)
		return mrmgr_sim_advise_mr(d->pd, advice, flags, sge, 1);
	return ibv_advise_mr(d->pd, advice, flags, sge, 1);
}

int pt_device_touch(struct pt_dev *d, struct ibv_mr *mr, void *addr,
		    size_t len)
{
	size_t psz = (size_t)sysconf(_SC_PAGESIZE);
	char c;
	int ret;

	if (!d->sim)
		return ENOTSUP;
	for (size_t off = 0; off < len; off += psz)
		if ((ret = mrmgr_sim_read(d->pd, mr->rkey,
					  (uint64_t)(uintptr_t)addr + off, &c, 1)))
			return ret;
	return 0;
}

/* The library's probe: an access "change" to the access a scratch MR
 * has. */
static void probe_rereg(struct pt_dev *d)
{
	size_t psz = (size_t)sysconf(_SC_PAGESIZE);
	void *page = mmap(NULL, psz, PROT_READ | PROT_WRITE,
			  MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	struct ibv_mr *mr;
	int err;

	d->rereg = -EIO;
	if (page == MAP_FAILED)
		return;
	memset(page, 0, psz);
	if (!(err = pt_reg(d, d->pd, page, psz, IBV_ACCESS_LOCAL_WRITE, &mr))) {
		err = pt_rereg(d, mr, IBV_REREG_MR_CHANGE_ACCESS, d->pd, NULL,
			       0, IBV_ACCESS_LOCAL_WRITE);
		pt_dereg(d, mr);
		d->rereg = !err ? 1 : (err == EOPNOTSUPP || err == ENOSYS) ? 0 : -err;
	}
	d->rereg_err = err;
	munmap(page, psz);
}

/* What the library learns about ODP on this device: a default cache's
 * view of it. */
static void probe_odp(struct pt_dev *d)
{
	struct mrmgr_odp_info oi;
	mrmgr_cache_t *c;

	d->odp = 0;
	if (mrmgr_cache_create(d->pd, NULL, &c))
		return;
	if (!mrmgr_cache_query_odp(c, &oi, sizeof(oi)))
		d->odp = !!(oi.general_caps & IBV_ODP_SUPPORT);
	mrmgr_cache_destroy(c);
}

static int open_sim(struct pt_dev *d, int rxe)
{
	struct mrmgr_sim_attr a = {
		.comp_mask = MRMGR_SIM_ATTR_PERSONALITY | MRMGR_SIM_ATTR_LIMITS,
		.personality = rxe ? MRMGR_SIM_RXE : MRMGR_SIM_MLX5,
		.max_mr = SIM_MAX_MR,
		.max_mr_size = SIM_MAX_MR_SIZE,
	};
	int ret;

	snprintf(d->name, sizeof(d->name), "simulated HCA (%s personality)",
		 rxe ? "rxe" : "mlx5");
	if ((ret = mrmgr_sim_open(&a, &d->ctx)))
		return ret;
	if ((ret = mrmgr_sim_alloc_pd(d->ctx, &d->pd)) ||
	    (ret = mrmgr_sim_alloc_pd(d->ctx, &d->pd2))) {
		if (d->pd)
			mrmgr_sim_dealloc_pd(d->pd);
		mrmgr_sim_close(d->ctx);
		return ret;
	}
	d->sim = 1;
	d->max_mr_size = SIM_MAX_MR_SIZE;
	d->attr.max_mr = SIM_MAX_MR;
	d->attr.max_mr_size = SIM_MAX_MR_SIZE;
	return 0;
}

static int open_verbs(struct pt_dev *d, struct ibv_device *dev)
{
	int ret;

	snprintf(d->name, sizeof(d->name), "%s", ibv_get_device_name(dev));
	errno = 0;
	d->ctx = ibv_open_device(dev);
	if (!d->ctx)
		return errno ? errno : ENODEV;
	if ((ret = ibv_query_device(d->ctx, &d->attr)))
		goto close;
	d->max_mr_size = d->attr.max_mr_size;
	errno = 0;
	d->pd = ibv_alloc_pd(d->ctx);
	if (!d->pd) {
		ret = errno ? errno : ENOMEM;
		goto close;
	}
	d->pd2 = ibv_alloc_pd(d->ctx); /* NULL: no PD rereg row */
	return 0;
close:
	ibv_close_device(d->ctx);
	return ret;
}

int pt_dev_open(struct pt_dev *d, const char *name, int sim, char *err,
		size_t errlen)
{
	struct ibv_device **list;
	int n = 0, ret = ENODEV, i;

	memset(d, 0, sizeof(*d));
	if (sim) {
		if ((ret = open_sim(d, sim == 2))) {
			snprintf(err, errlen, "cannot open the simulated HCA: %s",
				 strerror(ret));
			return ret;
		}
	} else {
		list = ibv_get_device_list(&n);
		for (i = 0; list && i < n; i++)
			if (!name || !strcmp(ibv_get_device_name(list[i]), name))
				break;
		if (!list || i == n) {
			if (name)
				snprintf(err, errlen, "cannot open device %s: no "
					 "RDMA device of that name (%d found)",
					 name, n);
			else
				snprintf(err, errlen, "cannot open a device: no "
					 "RDMA device found (--sim measures "
					 "the simulated HCA)");
			if (list)
				ibv_free_device_list(list);
			return ENODEV;
		}
		ret = open_verbs(d, list[i]);
		if (ret)
			snprintf(err, errlen, "cannot open device %s: %s",
				 ibv_get_device_name(list[i]), strerror(ret));
		ibv_free_device_list(list);
		if (ret)
			return ret;
	}
	probe_rereg(d);
	probe_odp(d);
	return 0;
}

void pt_dev_close(struct pt_dev *d)
{
	if (d->sim) {
		if (d->pd2)
			mrmgr_sim_dealloc_pd(d->pd2);
		mrmgr_sim_dealloc_pd(d->pd);
		mrmgr_sim_close(d->ctx);
	} else {
		if (d->pd2)
			ibv_dealloc_pd(d->pd2);
		ibv_dealloc_pd(d->pd);
		ibv_close_device(d->ctx);
	}
	free(live);
	live = NULL;
	nlive = cap = 0;
}
