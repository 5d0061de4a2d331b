/*
 * The CUDA memory domain: libcuda.so.1 loaded with dlopen(), so the
 * library has no build or link dependency on CUDA. The few prototypes
 * and constants it needs are declared here, as the driver API's
 * documentation gives them (CUDA 11.7 and later for the dma-buf export).
 *
 * Where libcuda.so.1 is absent (or cuInit() fails) the domain is off,
 * and says so once in the log (mrmgr_info says it too). Its free counter
 * is moved by libcuda's own frees (cuda_follow.c), which also says, once,
 * whether it follows them; where it does not, every get validates.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdlib.h>

#include "cuda_follow.h"
#include "devva.h"

typedef int cu_result;                     /* CUresult: 0 is CUDA_SUCCESS */
typedef unsigned long long cu_deviceptr;   /* CUdeviceptr (64-bit) */

#define CU_POINTER_ATTRIBUTE_BUFFER_ID 7
#define CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD 1

struct cuda {
	void *dl;
	cu_result (*init)(unsigned int flags);
	cu_result (*get_range)(cu_deviceptr *base, size_t *size,
			       cu_deviceptr ptr);
	cu_result (*ptr_attr)(void *data, int attr, cu_deviceptr ptr);
	cu_result (*get_handle)(void *handle, cu_deviceptr dptr, size_t size,
				int type, unsigned long long flags);
};

static int cuda_query(void *ctx, uint64_t va, uint64_t *base, uint64_t *size,
		      uint64_t *id)
{
	struct cuda *cu = ctx;
	cu_deviceptr b;
	size_t s;
	unsigned long long bid = 0;

	if (cu->get_range(&b, &s, (cu_deviceptr)va) != 0)
		return ENOENT;
	if (cu->ptr_attr(&bid, CU_POINTER_ATTRIBUTE_BUFFER_ID,
			 (cu_deviceptr)va) != 0)
		return ENOENT;
	*base = b;
	*size = s;
	*id = bid;
	return 0;
}

static int cuda_valid(void *ctx, uint64_t base, uint64_t id)
{
	struct cuda *cu = ctx;
	unsigned long long bid = 0;

	return cu->ptr_attr(&bid, CU_POINTER_ATTRIBUTE_BUFFER_ID,
			    (cu_deviceptr)base) == 0 && bid == id;
}

static int cuda_export(void *ctx, uint64_t base, uint64_t size, int *fd)
{
	struct cuda *cu = ctx;
	int h = -1;

	if (cu->get_handle(&h, (cu_deviceptr)base, (size_t)size,
			   CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0) != 0 || h < 0)
		return EOPNOTSUPP;
	*fd = h;
	return 0;
}

/* Moved by libcuda's frees where they are followed (cuda_follow.c). */
static const uint64_t *cuda_counter(void *ctx)
{
	(void)ctx;
	return mrmgr__cuda_follow_ended();
}

static void cuda_close(void *ctx)
{
	struct cuda *cu = ctx;

	dlclose(cu->dl);
	free(cu);
}

int mrmgr__cuda_domain_open(struct mrmgr_domain **out, const char **why)
{
	static const struct mrmgr_domain_ops ops = {
		.size = sizeof(ops),
		.name = "cuda",
		.query = cuda_query,
		.valid = cuda_valid,
		.export_dmabuf = cuda_export,
		.free_counter = cuda_counter,
	};
	struct mrmgr_domain *d;
	struct cuda *cu;
	void *loaded;

	cu = calloc(1, sizeof(*cu));
	d = calloc(1, sizeof(*d));
	if (!cu || !d) {
		free(cu);
		free(d);
		*why = "no memory";
		return ENOMEM;
	}
	/* Loaded before the first domain: pointers may have escaped. */
	loaded = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD);
	if (loaded)
		dlclose(loaded);
	cu->dl = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!cu->dl) {
		*why = "absent: libcuda.so.1 not found";
		free(cu);
		free(d);
		return ENODEV;
	}
	*(void **)&cu->init = dlsym(cu->dl, "cuInit");
	*(void **)&cu->get_range = dlsym(cu->dl, "cuMemGetAddressRange_v2");
	*(void **)&cu->ptr_attr = dlsym(cu->dl, "cuPointerGetAttribute");
	*(void **)&cu->get_handle = dlsym(cu->dl,
					 "cuMemGetHandleForAddressRange");
	if (!cu->init || !cu->get_range || !cu->ptr_attr || !cu->get_handle) {
		*why = !cu->get_handle ? "libcuda.so.1 has no "
			"cuMemGetHandleForAddressRange (CUDA 11.7 or later)"
			: "libcuda.so.1 lacks a driver API function";
		dlclose(cu->dl);
		free(cu);
		free(d);
		return EOPNOTSUPP;
	}
	if (cu->init(0) != 0) {
		*why = "cuInit() failed (no device, or the driver not loaded)";
		dlclose(cu->dl);
		free(cu);
		free(d);
		return ENXIO;
	}
	mrmgr__cuda_follow_start(cu->dl, loaded != NULL);
	d->ops = ops;
	d->ctx = cu;
	d->free_counter = mrmgr__cuda_follow_ended();
	d->begun = mrmgr__cuda_follow_begun();
	d->follows = mrmgr__cuda_follow_on();
	d->recheck = mrmgr__cuda_follow_recheck;
	d->close = cuda_close;
	*out = d;
	return 0;
}
