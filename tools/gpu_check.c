/*
 * The driver facts libmrmgr's device-memory design relies on, checked on
 * a real NVIDIA GPU (scripts/gpu-check.sh runs it; doc/device-memory.md).
 * libcuda is loaded with dlopen: no CUDA header or library is needed to
 * build this, and without a GPU it says SKIP and exits 0.
 *
 * Checked: an allocation's range seen from an offset inside it (whole
 * allocations are registered); a freed address allocated again gets a
 * new buffer ID (the identity check a device-VA entry needs); a
 * multi-segment VMM mapping (cuMemCreate + cuMemMap), whose range the
 * driver reports per segment; dma-buf export of an allocation, and that
 * buffer going through mrmgr_get_dmabuf() with no descriptor leaked;
 * the library's CUDA domain behind mrmgr_get_device() (whole
 * allocation; a cuMemFree and an allocation at the same address missing
 * with no report, the domain following the free itself -- it is opened
 * before anything else loads libcuda, as a program should -- or, where
 * it says it cannot, validating every get; address reuse after
 * mrmgr_domain_freed(); descriptors). Multi-segment VMM allocations are
 * not yet put through the domain.
 * Each line says PASS, FAIL or INFO; the last line is the verdict.
 *
 * SPDX-License-Identifier: MIT
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <mrmgr/mrmgr.h>
#include <mrmgr/sim.h>

/* The few declarations of the CUDA driver API used here (cuda.h's ABI). */
typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext;
typedef unsigned long long CUdeviceptr;
typedef unsigned long long CUmemGenericAllocationHandle;
#define CU_POINTER_ATTRIBUTE_BUFFER_ID 7
#define CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD 1
#define CU_MEM_ALLOCATION_TYPE_PINNED 1
#define CU_MEM_LOCATION_TYPE_DEVICE 1
#define CU_MEM_ACCESS_FLAGS_PROT_READWRITE 3
struct cu_location { int type; int id; };
struct cu_alloc_prop {
	int type;
	int requested_handle_types;
	struct cu_location location;
	void *win32_meta;
	struct {
		unsigned char compression_type;
		unsigned char gpu_direct_rdma_capable;
		unsigned short usage;
		unsigned char reserved[4];
	} alloc_flags;
};
struct cu_access_desc { struct cu_location location; int flags; };

static struct {
	CUresult (*init)(unsigned int);
	CUresult (*device_get)(CUdevice *, int);
	CUresult (*primary_retain)(CUcontext *, CUdevice);
	CUresult (*primary_release)(CUdevice);
	CUresult (*ctx_set)(CUcontext);
	CUresult (*mem_alloc)(CUdeviceptr *, size_t);
	CUresult (*mem_free)(CUdeviceptr);
	CUresult (*range)(CUdeviceptr *, size_t *, CUdeviceptr);
	CUresult (*ptr_attr)(void *, int, CUdeviceptr);
	CUresult (*export_range)(void *, CUdeviceptr, size_t, int,
				 unsigned long long);
	CUresult (*granularity)(size_t *, const struct cu_alloc_prop *, int);
	CUresult (*reserve)(CUdeviceptr *, size_t, size_t, CUdeviceptr,
			    unsigned long long);
	CUresult (*addr_free)(CUdeviceptr, size_t);
	CUresult (*create)(CUmemGenericAllocationHandle *, size_t,
			   const struct cu_alloc_prop *, unsigned long long);
	CUresult (*release)(CUmemGenericAllocationHandle);
	CUresult (*map)(CUdeviceptr, size_t, size_t,
			CUmemGenericAllocationHandle, unsigned long long);
	CUresult (*unmap)(CUdeviceptr, size_t);
	CUresult (*set_access)(CUdeviceptr, size_t,
			       const struct cu_access_desc *, size_t);
} cu;

static int failures;

#define SAY(kind, ...)                                                      \
	do {                                                                \
		printf("%-4s ", kind);                                      \
		printf(__VA_ARGS__);                                        \
		printf("\n");                                               \
		if (!strcmp(kind, "FAIL"))                                  \
			failures++;                                         \
	} while (0)

static int load(void *h)
{
	static const struct { void *slot; const char *name; int needed; } syms[] = {
		{ &cu.init, "cuInit", 1 },
		{ &cu.device_get, "cuDeviceGet", 1 },
		{ &cu.primary_retain, "cuDevicePrimaryCtxRetain", 1 },
		{ &cu.primary_release, "cuDevicePrimaryCtxRelease_v2", 1 },
		{ &cu.ctx_set, "cuCtxSetCurrent", 1 },
		{ &cu.mem_alloc, "cuMemAlloc_v2", 1 },
		{ &cu.mem_free, "cuMemFree_v2", 1 },
		{ &cu.range, "cuMemGetAddressRange_v2", 1 },
		{ &cu.ptr_attr, "cuPointerGetAttribute", 1 },
		{ &cu.export_range, "cuMemGetHandleForAddressRange", 0 },
		{ &cu.granularity, "cuMemGetAllocationGranularity", 0 },
		{ &cu.reserve, "cuMemAddressReserve", 0 },
		{ &cu.addr_free, "cuMemAddressFree", 0 },
		{ &cu.create, "cuMemCreate", 0 },
		{ &cu.release, "cuMemRelease", 0 },
		{ &cu.map, "cuMemMap", 0 },
		{ &cu.unmap, "cuMemUnmap", 0 },
		{ &cu.set_access, "cuMemSetAccess", 0 },
	};

	for (size_t i = 0; i < sizeof(syms) / sizeof(syms[0]); i++) {
		void *p = dlsym(h, syms[i].name);

		if (!p && syms[i].needed) {
			printf("SKIP: libcuda.so.1 has no %s\n", syms[i].name);
			return -1;
		}
		memcpy(syms[i].slot, &p, sizeof(p));
	}
	return 0;
}

static int count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	int n = 0;

	if (!d)
		return -1;
	while ((e = readdir(d)))
		if (e->d_name[0] != '.' && atoi(e->d_name) != dirfd(d))
			n++;
	closedir(d);
	return n;
}

static void check_range_and_reuse(void)
{
	const size_t len = 2u << 20;
	CUdeviceptr a, b, base;
	unsigned long long id_a = 0, id_b = 0;
	size_t size;

	if (cu.mem_alloc(&a, len)) {
		SAY("FAIL", "cuMemAlloc(%zu)", len);
		return;
	}
	if (!cu.range(&base, &size, a + len / 2) && base == a && size >= len)
		SAY("PASS", "range from inside an allocation: base %#llx size %zu", base, size);
	else
		SAY("FAIL", "cuMemGetAddressRange from inside [%#llx, +%zu)", a, len);
	if (cu.ptr_attr(&id_a, CU_POINTER_ATTRIBUTE_BUFFER_ID, a))
		SAY("FAIL", "BUFFER_ID of a live allocation");
	cu.mem_free(a);
	if (cu.mem_alloc(&b, len)) {
		SAY("FAIL", "cuMemAlloc again");
		return;
	}
	cu.ptr_attr(&id_b, CU_POINTER_ATTRIBUTE_BUFFER_ID, b);
	if (b != a)
		SAY("INFO", "the freed address was not reused (%#llx, then %#llx)", a, b);
	else if (id_a != id_b)
		SAY("PASS", "address reused, buffer ID changed (%llu -> %llu)", id_a, id_b);
	else
		SAY("FAIL", "address reused with the same buffer ID %llu", id_a);
	cu.mem_free(b);
}

static void check_vmm(CUdevice dev)
{
	struct cu_alloc_prop prop = { .type = CU_MEM_ALLOCATION_TYPE_PINNED,
				      .location = { CU_MEM_LOCATION_TYPE_DEVICE, dev } };
	struct cu_access_desc acc = { .location = { CU_MEM_LOCATION_TYPE_DEVICE, dev },
				      .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
	CUmemGenericAllocationHandle h[2];
	CUdeviceptr va, base;
	size_t gran = 0, size;

	if (!cu.create || !cu.map || !cu.reserve || !cu.granularity) {
		SAY("INFO", "no VMM API in this driver");
		return;
	}
	if (cu.granularity(&gran, &prop, 0) || !gran ||
	    cu.reserve(&va, 2 * gran, 0, 0, 0)) {
		SAY("FAIL", "VMM: granularity or reserve");
		return;
	}
	for (int i = 0; i < 2; i++) {
		if (cu.create(&h[i], gran, &prop, 0) ||
		    cu.map(va + i * gran, gran, 0, h[i], 0)) {
			SAY("FAIL", "VMM: cuMemCreate/cuMemMap segment %d", i);
			return;
		}
	}
	if (cu.set_access(va, 2 * gran, &acc, 1))
		SAY("FAIL", "VMM: cuMemSetAccess");
	if (cu.range(&base, &size, va + gran + 1))
		SAY("FAIL", "VMM: range of the second segment");
	else
		SAY("INFO", "VMM: 2 segments of %zu at %#llx; the range from the "
		    "second reads base %#llx size %zu (%s)", gran, va, base, size,
		    base == va && size == 2 * gran ? "the whole mapping"
						   : "one segment: register per segment");
	for (int i = 0; i < 2; i++) {
		cu.unmap(va + i * gran, gran);
		cu.release(h[i]);
	}
	cu.addr_free(va, 2 * gran);
}

static void check_dmabuf(void)
{
	const size_t len = 2u << 20;
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	mrmgr_cache_t *c;
	mrmgr_region_t *r;
	CUdeviceptr a;
	struct stat st;
	int fd = -1, before, after, ret;

	if (!cu.export_range) {
		SAY("INFO", "no cuMemGetHandleForAddressRange (driver before 11.7)");
		return;
	}
	if (cu.mem_alloc(&a, len))
		return;
	if (cu.export_range(&fd, a, len, CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD, 0) ||
	    fd < 0) {
		SAY("INFO", "dma-buf export refused (no kernel or driver support)");
		cu.mem_free(a);
		return;
	}
	fstat(fd, &st);
	SAY("PASS", "dma-buf export: fd %d, identity (%llu, %llu), size %lld", fd,
	    (unsigned long long)st.st_dev, (unsigned long long)st.st_ino,
	    (long long)st.st_size);
	if (mrmgr_sim_open(NULL, &ctx) || mrmgr_sim_alloc_pd(ctx, &pd) ||
	    mrmgr_cache_create_dmabuf(pd, NULL, &c)) {
		SAY("FAIL", "a dma-buf cache on the simulated HCA");
		return;
	}
	before = count_fds();
	struct mrmgr_dmabuf_attr at = { .fd = fd, .length = len,
					.access = IBV_ACCESS_LOCAL_WRITE };
	ret = mrmgr_get_dmabuf(c, &at, &r);
	if (!ret) {
		SAY("PASS", "mrmgr_get_dmabuf of the GPU's dma-buf (simulated HCA)");
		mrmgr_put(r);
	} else {
		/* The simulated HCA maps the buffer; GPU dma-bufs need not be
		 * mappable. A real HCA registers it with ibv_reg_dmabuf_mr. */
		SAY("INFO", "mrmgr_get_dmabuf on the simulated HCA: %s",
		    strerror(ret));
	}
	mrmgr_cache_destroy(c);
	after = count_fds();
	if (ret)
		SAY(after == before ? "PASS" : "FAIL",
		    "descriptors after the failed get: %d, before %d", after, before);
	mrmgr_sim_dealloc_pd(pd);
	mrmgr_sim_close(ctx);
	close(fd);
	cu.mem_free(a);
}

/* What the CUDA domain said about following frees (info level). */
static char follow_said[256];

static void on_log(enum mrmgr_log_level level, const char *msg, void *arg)
{
	const char *p = strstr(msg, "CUDA memory domain: frees ");

	(void)arg;
	if (p)
		snprintf(follow_said, sizeof(follow_said), "%s", p);
	else if (level <= MRMGR_LOG_WARN)
		fprintf(stderr, "%s\n", msg);
}

/* A cuMemFree through the pointer this program took with dlsym (after
 * the domain opened), the address allocated again: the next get must
 * miss with no mrmgr_domain_freed(). */
static void check_unreported_free(mrmgr_cache_t *c, CUdeviceptr a, size_t len)
{
	struct mrmgr_stats st = { .hits = 0 }, st2 = { .hits = 0 };
	mrmgr_region_t *r;
	CUdeviceptr b;
	int ret;

	mrmgr_cache_query_stats(c, &st, sizeof(st));
	cu.mem_free(a);
	if (cu.mem_alloc(&b, len)) {
		SAY("FAIL", "cuMemAlloc after cuMemFree");
		return;
	}
	if (b != a) {
		SAY("INFO", "cuMemAlloc did not give the freed address again "
		    "(unreported free: not checked)");
		cu.mem_free(b);
		return;
	}
	ret = mrmgr_get_device(c, b, 64, IBV_ACCESS_LOCAL_WRITE, &r);
	if (!ret)
		mrmgr_put(r);
	mrmgr_cache_query_stats(c, &st2, sizeof(st2));
	SAY(!ret && st2.misses == st.misses + 1 ? "PASS" : "FAIL",
	    "address reused after cuMemFree, not reported: a miss (get: %s, "
	    "%llu new misses; %s)", strerror(ret),
	    (unsigned long long)(st2.misses - st.misses), follow_said);
	cu.mem_free(b);
}

/* The library's own CUDA domain (mrmgr_domain_open_cuda) behind a
 * device-VA cache on the simulated HCA: the whole allocation registered
 * from an address inside it, a freed address allocated again (unreported,
 * then reported), and the descriptors the cache held. */
static void check_domain(mrmgr_domain_t *dom)
{
	const size_t len = 2u << 20;
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	mrmgr_cache_t *c;
	mrmgr_region_t *r;
	CUdeviceptr a, b;
	int before, ret, got = 0;

	SAY("INFO", "%s", follow_said[0] ? follow_said
		: "the CUDA domain said nothing about following frees");
	before = count_fds();
	if (mrmgr_sim_open(NULL, &ctx) || mrmgr_sim_alloc_pd(ctx, &pd) ||
	    mrmgr_cache_create_device(pd, NULL, dom, &c)) {
		SAY("FAIL", "a device-VA cache on the simulated HCA");
		mrmgr_domain_destroy(dom);
		return;
	}
	if (cu.mem_alloc(&a, len) == 0) {
		ret = mrmgr_get_device(c, a + 4096, 64, IBV_ACCESS_LOCAL_WRITE, &r);
		if (!ret) {
			got = 1;
			SAY(mrmgr_region_mr(r)->length >= len ? "PASS" : "FAIL",
			    "mrmgr_get_device inside an allocation: MR of %zu bytes "
			    "(the allocation: %zu)", (size_t)mrmgr_region_mr(r)->length,
			    len);
			mrmgr_put(r);
			check_unreported_free(c, a, len);
			if (cu.mem_alloc(&a, len))
				got = 0;
			else if (mrmgr_get_device(c, a, 64,
						  IBV_ACCESS_LOCAL_WRITE, &r))
				got = 0;
			else
				mrmgr_put(r);
		} else {
			SAY("INFO", "mrmgr_get_device on the simulated HCA: %s "
			    "(it maps the dma-buf; a GPU's need not be mappable)",
			    strerror(ret));
		}
		cu.mem_free(a);
		/* Reported as well: harmless where the domain follows, and
		 * what a domain that cannot see frees needs. */
		mrmgr_domain_freed(dom);
		if (got && cu.mem_alloc(&b, len) == 0) {
			if (b == a) {
				struct mrmgr_stats st = { .hits = 0 },
						   st0 = { .hits = 0 };

				mrmgr_cache_query_stats(c, &st0, sizeof(st0));
				ret = mrmgr_get_device(c, b, 64,
						       IBV_ACCESS_LOCAL_WRITE, &r);
				if (!ret)
					mrmgr_put(r);
				mrmgr_cache_query_stats(c, &st, sizeof(st));
				st.misses -= st0.misses;
				SAY(!ret && st.misses == 1 ? "PASS" : "FAIL",
				    "address reused after cuMemFree + "
				    "mrmgr_domain_freed: a miss (get: %s, %llu "
				    "misses)", strerror(ret),
				    (unsigned long long)st.misses);
			} else {
				SAY("INFO", "cuMemAlloc did not give the freed "
				    "address again");
			}
			cu.mem_free(b);
		}
	}
	mrmgr_cache_destroy(c);
	mrmgr_sim_dealloc_pd(pd);
	mrmgr_sim_close(ctx);
	SAY(count_fds() == before ? "PASS" : "FAIL",
	    "descriptors after the device-VA cache: %d, before %d", count_fds(),
	    before);
	/* SAY evaluates its kind more than once: the call goes first. */
	ret = mrmgr_domain_destroy(dom);
	SAY(ret == 0 ? "PASS" : "FAIL", "mrmgr_domain_destroy");
}

int main(void)
{
	mrmgr_domain_t *dom = NULL;
	CUcontext ctx;
	CUdevice dev;
	int dret;
	void *h;

	/* The domain first, before this program loads libcuda itself: it
	 * can follow the frees only from libcuda's first load on. */
	mrmgr_set_log_handler(on_log, NULL, MRMGR_LOG_INFO);
	dret = mrmgr_domain_open_cuda(&dom);
	mrmgr_set_log_handler(NULL, NULL, MRMGR_LOG_WARN);
	h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		printf("SKIP: libcuda.so.1 not found (no NVIDIA driver)\n");
		return 0;
	}
	if (load(h))
		return 0;
	if (cu.init(0) || cu.device_get(&dev, 0)) {
		printf("SKIP: libcuda found, no usable GPU (cuInit/cuDeviceGet failed)\n");
		return 0;
	}
	if (cu.primary_retain(&ctx, dev) || cu.ctx_set(ctx)) {
		printf("FAIL: no context on device 0\n");
		return 1;
	}
	check_range_and_reuse();
	check_vmm(dev);
	check_dmabuf();
	if (dret)
		SAY("FAIL", "mrmgr_domain_open_cuda: %s", strerror(dret));
	else
		check_domain(dom);
	cu.primary_release(dev);
	if (failures) {
		printf("FAIL: %d check(s) failed (lines above)\n", failures);
		return 1;
	}
	printf("PASS: the driver facts hold (INFO lines: what this driver does)\n");
	return 0;
}
