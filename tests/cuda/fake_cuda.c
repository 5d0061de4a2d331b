/*
 * A fake libcuda.so.1, for tests only (tests/unit/test_cuda_follow.c
 * loads it through LD_LIBRARY_PATH): the driver API calls the CUDA domain
 * and its free following use, with device VAs that are not host memory,
 * each allocation backed by a memfd ("fakecu", its dma-buf export a
 * duplicate), a buffer id never given twice, and address reuse: a freed
 * range is handed out again by the next allocation of the same size, at
 * once, with a new buffer id. VMM: one physical handle per cuMemCreate,
 * mapped whole at a reserved range; unmapping and mapping another handle
 * there gives the range a new buffer id.
 *
 * fakecu_write() and fakecu_frees() are for the tests.
 *
 * SPDX-License-Identifier: MIT
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

typedef int CUresult;
typedef unsigned long long CUdeviceptr;

enum { OK = 0, INVALID_VALUE = 1, OUT_OF_MEMORY = 2, NOT_FOUND = 500 };

/* The driver API's prototypes (cuda.h's ABI), and the tests' helpers. */
EXPORT CUresult cuInit(unsigned int flags);
EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t size);
EXPORT CUresult cuMemFree_v2(CUdeviceptr p);
EXPORT CUresult cuMemFreeAsync(CUdeviceptr p, void *stream);
EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr p, void *stream);
EXPORT CUresult cuMemGetAddressRange_v2(CUdeviceptr *base, size_t *size,
					CUdeviceptr p);
EXPORT CUresult cuPointerGetAttribute(void *data, int attr, CUdeviceptr p);
EXPORT CUresult cuMemGetHandleForAddressRange(void *handle, CUdeviceptr p,
					      size_t size, int type,
					      unsigned long long flags);
EXPORT CUresult cuMemAddressReserve(CUdeviceptr *p, size_t size, size_t align,
				    CUdeviceptr addr, unsigned long long flags);
EXPORT CUresult cuMemCreate(unsigned long long *h, size_t size,
			    const void *prop, unsigned long long flags);
EXPORT CUresult cuMemMap(CUdeviceptr p, size_t size, size_t off,
			 unsigned long long h, unsigned long long flags);
EXPORT CUresult cuMemUnmap(CUdeviceptr p, size_t size);
EXPORT CUresult cuMemRelease(unsigned long long h);
EXPORT CUresult cuMemAddressFree(CUdeviceptr p, size_t size);
EXPORT CUresult cuGetProcAddress(const char *s, void **pfn, int ver,
				 unsigned long long flags);
EXPORT CUresult cuGetProcAddress_v2(const char *s, void **pfn, int ver,
				    unsigned long long flags, int *status);
EXPORT CUresult cuDeviceGet(int *dev, int ordinal);
EXPORT CUresult cuDevicePrimaryCtxRetain(void **ctx, int dev);
EXPORT CUresult cuDevicePrimaryCtxRelease_v2(int dev);
EXPORT CUresult cuCtxSetCurrent(void *ctx);
EXPORT int fakecu_write(CUdeviceptr p, const void *buf, size_t n);
EXPORT unsigned long fakecu_frees(void);

#define MAXA 256
#define GRAIN (64 * 1024ULL)

struct range {
	CUdeviceptr va;
	size_t size;
	unsigned long long id; /* 0: a reservation with nothing mapped */
	int fd;                /* the backing memfd (the handle's, for VMM) */
	int used, reserved;    /* reserved: a VMM reservation */
};

static pthread_mutex_t lk = PTHREAD_MUTEX_INITIALIZER;
static struct range R[MAXA];
static CUdeviceptr next_va = 0x300000000000ULL;
static unsigned long long next_id = 1;
static unsigned long frees;
/* The most recently freed ranges, handed out again first. */
static struct { CUdeviceptr va; size_t size; } freed[MAXA];
static int nfreed;
/* VMM physical handles: a memfd each. */
static int handle_fd[MAXA];

static size_t round_up(size_t n)
{
	return (n + GRAIN - 1) & ~(GRAIN - 1);
}

static CUdeviceptr take_va(size_t size)
{
	for (int i = nfreed - 1; i >= 0; i--)
		if (freed[i].size == size) {
			CUdeviceptr va = freed[i].va;

			freed[i] = freed[--nfreed];
			return va;
		}
	next_va += size + GRAIN; /* a gap: allocations never touch */
	return next_va - size - GRAIN;
}

static void give_va(CUdeviceptr va, size_t size)
{
	if (nfreed < MAXA) {
		freed[nfreed].va = va;
		freed[nfreed].size = size;
		nfreed++;
	}
}

static struct range *slot_free(void)
{
	for (int i = 0; i < MAXA; i++)
		if (!R[i].used)
			return &R[i];
	return NULL;
}

static struct range *find(CUdeviceptr p)
{
	for (int i = 0; i < MAXA; i++)
		if (R[i].used && p >= R[i].va && p - R[i].va < R[i].size)
			return &R[i];
	return NULL;
}

EXPORT CUresult cuInit(unsigned int flags)
{
	(void)flags;
	return OK;
}

/* One device, one context: enough for tools/gpu_check to run on it. */
EXPORT CUresult cuDeviceGet(int *dev, int ordinal)
{
	if (!dev || ordinal)
		return INVALID_VALUE;
	*dev = 0;
	return OK;
}

EXPORT CUresult cuDevicePrimaryCtxRetain(void **ctx, int dev)
{
	static int the_ctx;

	if (!ctx || dev)
		return INVALID_VALUE;
	*ctx = &the_ctx;
	return OK;
}

EXPORT CUresult cuDevicePrimaryCtxRelease_v2(int dev)
{
	return dev ? INVALID_VALUE : OK;
}

EXPORT CUresult cuCtxSetCurrent(void *ctx)
{
	(void)ctx;
	return OK;
}

EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t size)
{
	struct range *r;
	int fd;

	if (!p || !size)
		return INVALID_VALUE;
	size = round_up(size);
	fd = memfd_create("fakecu", MFD_CLOEXEC);
	if (fd < 0 || ftruncate(fd, (off_t)size)) {
		if (fd >= 0)
			close(fd);
		return OUT_OF_MEMORY;
	}
	pthread_mutex_lock(&lk);
	r = slot_free();
	if (!r) {
		pthread_mutex_unlock(&lk);
		close(fd);
		return OUT_OF_MEMORY;
	}
	r->used = 1;
	r->reserved = 0;
	r->size = size;
	r->va = take_va(size);
	r->id = next_id++;
	r->fd = fd;
	*p = r->va;
	pthread_mutex_unlock(&lk);
	return OK;
}

static CUresult do_free(CUdeviceptr p)
{
	struct range *r;
	int fd;

	pthread_mutex_lock(&lk);
	r = find(p);
	if (!r || r->va != p || r->reserved) {
		pthread_mutex_unlock(&lk);
		return INVALID_VALUE;
	}
	fd = r->fd;
	r->used = 0;
	give_va(r->va, r->size);
	frees++;
	pthread_mutex_unlock(&lk);
	close(fd);
	return OK;
}

EXPORT CUresult cuMemFree_v2(CUdeviceptr p)
{
	return do_free(p);
}

EXPORT CUresult cuMemFreeAsync(CUdeviceptr p, void *stream)
{
	(void)stream;
	return do_free(p);
}

EXPORT CUresult cuMemFreeAsync_ptsz(CUdeviceptr p, void *stream)
{
	(void)stream;
	return do_free(p);
}

EXPORT CUresult cuMemGetAddressRange_v2(CUdeviceptr *base, size_t *size,
					CUdeviceptr p)
{
	struct range *r;

	pthread_mutex_lock(&lk);
	r = find(p);
	if (!r || !r->id) {
		pthread_mutex_unlock(&lk);
		return NOT_FOUND;
	}
	if (base)
		*base = r->va;
	if (size)
		*size = r->size;
	pthread_mutex_unlock(&lk);
	return OK;
}

EXPORT CUresult cuPointerGetAttribute(void *data, int attr, CUdeviceptr p)
{
	struct range *r;

	if (attr != 7 /* CU_POINTER_ATTRIBUTE_BUFFER_ID */ || !data)
		return INVALID_VALUE;
	pthread_mutex_lock(&lk);
	r = find(p);
	if (!r || !r->id) {
		pthread_mutex_unlock(&lk);
		return INVALID_VALUE;
	}
	*(unsigned long long *)data = r->id;
	pthread_mutex_unlock(&lk);
	return OK;
}

EXPORT CUresult cuMemGetHandleForAddressRange(void *handle, CUdeviceptr p,
					      size_t size, int type,
					      unsigned long long flags)
{
	struct range *r;
	int fd = -1;

	if (type != 1 || flags || !handle)
		return INVALID_VALUE;
	pthread_mutex_lock(&lk);
	r = find(p);
	if (r && r->id && r->va == p && size <= r->size)
		fd = fcntl(r->fd, F_DUPFD_CLOEXEC, 0);
	pthread_mutex_unlock(&lk);
	if (fd < 0)
		return INVALID_VALUE;
	*(int *)handle = fd;
	return OK;
}

/* ---------------------------------------------------------------- VMM */

EXPORT CUresult cuMemAddressReserve(CUdeviceptr *p, size_t size, size_t align,
				    CUdeviceptr addr, unsigned long long flags)
{
	struct range *r;

	(void)align;
	(void)addr;
	(void)flags;
	if (!p || !size || size % GRAIN)
		return INVALID_VALUE;
	pthread_mutex_lock(&lk);
	r = slot_free();
	if (!r) {
		pthread_mutex_unlock(&lk);
		return OUT_OF_MEMORY;
	}
	r->used = 1;
	r->reserved = 1;
	r->size = size;
	r->va = take_va(size);
	r->id = 0;
	r->fd = -1;
	*p = r->va;
	pthread_mutex_unlock(&lk);
	return OK;
}

EXPORT CUresult cuMemCreate(unsigned long long *h, size_t size,
			    const void *prop, unsigned long long flags)
{
	int fd, i;

	(void)prop;
	(void)flags;
	if (!h || !size)
		return INVALID_VALUE;
	fd = memfd_create("fakecu", MFD_CLOEXEC);
	if (fd < 0 || ftruncate(fd, (off_t)size)) {
		if (fd >= 0)
			close(fd);
		return OUT_OF_MEMORY;
	}
	pthread_mutex_lock(&lk);
	for (i = 1; i < MAXA && handle_fd[i]; i++)
		;
	if (i == MAXA) {
		pthread_mutex_unlock(&lk);
		close(fd);
		return OUT_OF_MEMORY;
	}
	handle_fd[i] = fd + 1;
	*h = (unsigned long long)i;
	pthread_mutex_unlock(&lk);
	return OK;
}

EXPORT CUresult cuMemMap(CUdeviceptr p, size_t size, size_t off,
			 unsigned long long h, unsigned long long flags)
{
	struct range *r;
	CUresult ret = INVALID_VALUE;

	(void)flags;
	pthread_mutex_lock(&lk);
	r = find(p);
	if (r && r->reserved && !r->id && r->va == p && r->size == size &&
	    !off && h && h < MAXA && handle_fd[h]) {
		r->fd = fcntl(handle_fd[h] - 1, F_DUPFD_CLOEXEC, 0);
		if (r->fd >= 0) {
			r->id = next_id++;
			ret = OK;
		}
	}
	pthread_mutex_unlock(&lk);
	return ret;
}

EXPORT CUresult cuMemUnmap(CUdeviceptr p, size_t size)
{
	struct range *r;
	int fd = -1;

	pthread_mutex_lock(&lk);
	r = find(p);
	if (r && r->reserved && r->id && r->va == p && r->size == size) {
		fd = r->fd;
		r->fd = -1;
		r->id = 0;
		frees++;
	}
	pthread_mutex_unlock(&lk);
	if (fd < 0)
		return INVALID_VALUE;
	close(fd);
	return OK;
}

EXPORT CUresult cuMemRelease(unsigned long long h)
{
	int fd = -1;

	pthread_mutex_lock(&lk);
	if (h && h < MAXA && handle_fd[h]) {
		fd = handle_fd[h] - 1;
		handle_fd[h] = 0;
		frees++;
	}
	pthread_mutex_unlock(&lk);
	if (fd < 0)
		return INVALID_VALUE;
	close(fd);
	return OK;
}

EXPORT CUresult cuMemAddressFree(CUdeviceptr p, size_t size)
{
	struct range *r;
	CUresult ret = INVALID_VALUE;

	pthread_mutex_lock(&lk);
	r = find(p);
	if (r && r->reserved && !r->id && r->va == p && r->size == size) {
		r->used = 0;
		give_va(r->va, r->size);
		frees++;
		ret = OK;
	}
	pthread_mutex_unlock(&lk);
	return ret;
}

/* ------------------------------------------------------ cuGetProcAddress */

#define PER_THREAD_DEFAULT_STREAM 2ULL /* CU_GET_PROC_ADDRESS_PER_THREAD_... */

static void *proc(const char *s, unsigned long long flags)
{
	static const struct { const char *n; void *fn; } t[] = {
		{ .n = "cuInit", .fn = (void *)cuInit },
		{ .n = "cuMemAlloc", .fn = (void *)cuMemAlloc_v2 },
		{ .n = "cuMemFree", .fn = (void *)cuMemFree_v2 },
		{ .n = "cuMemGetAddressRange",
		  .fn = (void *)cuMemGetAddressRange_v2 },
		{ .n = "cuPointerGetAttribute", .fn = (void *)cuPointerGetAttribute },
		{ .n = "cuMemAddressReserve", .fn = (void *)cuMemAddressReserve },
		{ .n = "cuMemCreate", .fn = (void *)cuMemCreate },
		{ .n = "cuMemMap", .fn = (void *)cuMemMap },
		{ .n = "cuMemUnmap", .fn = (void *)cuMemUnmap },
		{ .n = "cuMemRelease", .fn = (void *)cuMemRelease },
		{ .n = "cuMemAddressFree", .fn = (void *)cuMemAddressFree },
	};

	if (!strcmp(s, "cuMemFreeAsync"))
		return flags & PER_THREAD_DEFAULT_STREAM
			       ? (void *)cuMemFreeAsync_ptsz
			       : (void *)cuMemFreeAsync;
	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++)
		if (!strcmp(s, t[i].n))
			return t[i].fn;
	return NULL;
}

EXPORT CUresult cuGetProcAddress(const char *s, void **pfn, int ver,
				 unsigned long long flags)
{
	(void)ver;
	if (!s || !pfn)
		return INVALID_VALUE;
	*pfn = proc(s, flags);
	return *pfn ? OK : NOT_FOUND;
}

EXPORT CUresult cuGetProcAddress_v2(const char *s, void **pfn, int ver,
				    unsigned long long flags, int *status)
{
	CUresult r = cuGetProcAddress(s, pfn, ver, flags);

	if (status)
		*status = r == OK ? 0 : 1;
	return r;
}

/* ---------------------------------------------------------------- tests */

/* Write into device memory (its memfd), as a kernel would. */
EXPORT int fakecu_write(CUdeviceptr p, const void *buf, size_t n)
{
	struct range *r;
	ssize_t w = -1;

	pthread_mutex_lock(&lk);
	r = find(p);
	if (r && r->id && p + n <= r->va + r->size)
		w = pwrite(r->fd, buf, n, (off_t)(p - r->va));
	pthread_mutex_unlock(&lk);
	return w == (ssize_t)n ? 0 : -1;
}

/* Frees the fake itself saw (every path). */
EXPORT unsigned long fakecu_frees(void)
{
	unsigned long n;

	pthread_mutex_lock(&lk);
	n = frees;
	pthread_mutex_unlock(&lk);
	return n;
}
