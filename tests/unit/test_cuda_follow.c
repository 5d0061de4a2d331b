/*
 * The CUDA domain follows libcuda's frees (lib/kinds/cuda_follow.c),
 * against a fake libcuda.so.1 (tests/cuda/fake_cuda.c: address reuse, a
 * new buffer id each time) on the simulated HCA: a free through each path
 * a program has to the driver -- a PLT call from a library loaded later,
 * a dlsym() pointer, a cuGetProcAddress(_v2) pointer, the async frees,
 * the VMM unmap/release/address free -- moves the domain's counter, and a
 * new allocation at the freed address misses and registers the new
 * buffer (its own signature read through the MR). With following off
 * (a test hook, libcuda loaded before the domain, a library importing
 * dlsym loaded after it) every get validates, counted, and still never
 * returns the old registration. Two threads allocate, free and get; the
 * fake's descriptors are counted around each case.
 *
 * The fake is found through LD_LIBRARY_PATH, set before the program
 * starts: the constructor below runs the program again with it.
 *
 * SPDX-License-Identifier: MIT
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "helpers.h"

#include "cuda_follow.h"
#include "cuda_wrap.h"
#include "devva.h"

#if defined(__x86_64__)
#define GLIBC_BASE "GLIBC_2.2.5"
#else
#define GLIBC_BASE "GLIBC_2.17"
#endif

#define SZ (256 * KiB)

__attribute__((constructor)) static void with_fake_libcuda(int argc,
							    char **argv)
{
	const char *l = getenv("LD_LIBRARY_PATH");
	char path[4096];

	(void)argc;
	if (getenv("MRMGR_TEST_CUDA_AGAIN"))
		return;
	snprintf(path, sizeof(path), "%s%s%s", TEST_CUDA_LIBDIR, l ? ":" : "",
		 l ? l : "");
	setenv("LD_LIBRARY_PATH", path, 1);
	setenv("MRMGR_TEST_CUDA_AGAIN", "1", 1);
	execv("/proc/self/exe", argv);
	/* Not run again: the domain finds no libcuda, the tests say so. */
}

typedef int (*cu_free_fn)(unsigned long long);
typedef int (*cu_free_async_fn)(unsigned long long, void *);
typedef int (*cu_range_fn)(unsigned long long, size_t);
typedef int (*cu_gpa_fn)(const char *, void **, int, unsigned long long);
typedef int (*cu_gpa2_fn)(const char *, void **, int, unsigned long long,
			  int *);

struct cfx {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	mrmgr_domain_t *dom;
	mrmgr_cache_t *cache;
	void *cu;
	int (*alloc)(unsigned long long *, size_t);
	int (*write)(unsigned long long, const void *, size_t);
	unsigned long (*frees)(void);
};

static int count_fds(void)
{
	return count_fds_to("fakecu");
}

static void *sym(struct cfx *f, const char *name)
{
	void *p = dlsym(f->cu, name);

	cr_assert_not_null(p, "fake libcuda: no %s", name);
	return p;
}

static void copen(struct cfx *f, int follow_off)
{
	int ret;

	memset(f, 0, sizeof(*f));
	mrmgr__cuda_follow_test_off = follow_off;
	cr_assert_eq(mrmgr_sim_open(NULL, &f->ctx), 0);
	cr_assert_eq(mrmgr_sim_alloc_pd(f->ctx, &f->pd), 0);
	ret = mrmgr_domain_open_cuda(&f->dom);
	cr_assert_eq(ret, 0, "the fake libcuda.so.1 (%s): %s", TEST_CUDA_LIBDIR,
		     strerror(ret));
	cr_assert_eq(mrmgr_cache_create_device(f->pd, NULL, f->dom, &f->cache), 0);
	f->cu = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
	cr_assert_not_null(f->cu);
	*(void **)&f->alloc = sym(f, "cuMemAlloc_v2");
	*(void **)&f->write = sym(f, "fakecu_write");
	*(void **)&f->frees = sym(f, "fakecu_frees");
}

static void cclose(struct cfx *f)
{
	cr_assert_eq(mrmgr_cache_destroy(f->cache), 0);
	cr_assert_eq(mrmgr_domain_destroy(f->dom), 0);
	dlclose(f->cu);
	cr_assert_eq(mrmgr_sim_dealloc_pd(f->pd), 0);
	cr_assert_eq(mrmgr_sim_close(f->ctx), 0);
}

static unsigned long long new_alloc(struct cfx *f, uint64_t sig)
{
	unsigned long long va;

	cr_assert_eq(f->alloc(&va, SZ), 0);
	cr_assert_eq(f->write(va, &sig, sizeof(sig)), 0);
	return va;
}

static uint64_t read_at(mrmgr_region_t *r, uint64_t base, uint64_t va)
{
	return *(volatile uint64_t *)((uintptr_t)mrmgr_region_mr(r)->addr +
				      (va - base));
}

static uint64_t ended(void)
{
	return __atomic_load_n(mrmgr__cuda_follow_ended(), __ATOMIC_ACQUIRE);
}

/* A get of va that must read sig: the registration of this buffer. */
static void get_reads(struct cfx *f, uint64_t va, uint64_t sig)
{
	mrmgr_region_t *r;

	cr_assert_eq(mrmgr_get_device(f->cache, va, 64, 0, &r), 0);
	cr_assert_eq(read_at(r, va, va), sig, "a stale registration: read "
		     "%#llx, want %#llx", (unsigned long long)read_at(r, va, va),
		     (unsigned long long)sig);
	mrmgr_put(r);
}

/* Allocate, get (cached), free with fn, allocate again at the same
 * address: the get misses and reads the new buffer. */
static void free_then_reuse(struct cfx *f, void (*free_it)(struct cfx *,
							   uint64_t))
{
	uint64_t a, b, e, misses = cstats(f->cache).misses;
	unsigned long fr = f->frees();

	a = new_alloc(f, 0x1111);
	get_reads(f, a, 0x1111);
	get_reads(f, a, 0x1111); /* a hit */
	e = ended();
	free_it(f, a);
	cr_assert_eq(f->frees(), fr + 1, "the fake saw no free");
	if (mrmgr__domain_follows(f->dom))
		cr_assert_eq(ended(), e + 1, "the free was not followed");
	b = new_alloc(f, 0x2222);
	cr_assert_eq(b, a, "the fake gave another address");
	get_reads(f, b, 0x2222);
	cr_assert_eq(cstats(f->cache).misses, misses + 2);
	/* The fake's own descriptor goes; the cache's export stays while
	 * the registration is cached. */
	cr_assert_eq(((cu_free_fn)sym(f, "cuMemFree_v2"))(b), 0);
}

static void by_dlsym(struct cfx *f, uint64_t va)
{
	cu_free_fn fn = (cu_free_fn)sym(f, "cuMemFree_v2");

	cr_assert_eq(fn(va), 0);
}

static void by_gpa(struct cfx *f, uint64_t va)
{
	cu_gpa_fn gpa = (cu_gpa_fn)sym(f, "cuGetProcAddress");
	cu_free_fn fn = NULL;

	cr_assert_eq(gpa("cuMemFree", (void **)&fn, 12000, 0), 0);
	cr_assert_eq(fn(va), 0);
}

static void by_gpa_v2(struct cfx *f, uint64_t va)
{
	cu_gpa2_fn gpa = (cu_gpa2_fn)sym(f, "cuGetProcAddress_v2");
	cu_free_fn fn = NULL;
	int st = -1;

	cr_assert_eq(gpa("cuMemFree", (void **)&fn, 12000, 0, &st), 0);
	cr_assert_eq(st, 0);
	cr_assert_eq(fn(va), 0);
}

static void by_async_dlsym(struct cfx *f, uint64_t va)
{
	cu_free_async_fn fn = (cu_free_async_fn)sym(f, "cuMemFreeAsync");

	cr_assert_eq(fn(va, NULL), 0);
}

static void by_async_ptsz(struct cfx *f, uint64_t va)
{
	cu_gpa_fn gpa = (cu_gpa_fn)sym(f, "cuGetProcAddress");
	cu_free_async_fn fn = NULL;

	/* CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM: the _ptsz one. */
	cr_assert_eq(gpa("cuMemFreeAsync", (void **)&fn, 12000, 2), 0);
	cr_assert_eq(fn(va, NULL), 0);
}

static void *user_lib;

static void by_plt(struct cfx *f, uint64_t va)
{
	cu_free_fn fn;

	(void)f;
	*(void **)&fn = dlsym(user_lib, "user_free");
	cr_assert_not_null(fn);
	cr_assert_eq(fn(va), 0);
}

static void by_plt_async(struct cfx *f, uint64_t va)
{
	cu_free_fn fn;

	(void)f;
	*(void **)&fn = dlsym(user_lib, "user_free_async");
	cr_assert_not_null(fn);
	cr_assert_eq(fn(va), 0);
}

Test(cuda_follow, followed_and_said)
{
	int before = count_fds();
	struct cfx f;

	copen(&f, 0);
	cr_assert(mrmgr__domain_follows(f.dom), "%s", mrmgr__cuda_follow_why());
	cr_assert_not_null(strstr(mrmgr__cuda_follow_why(), "followed"));
	cclose(&f);
	cr_assert_eq(count_fds(), before);
}

/* The process's own lookups still get libc's answers through the
 * redirected dlsym and dlvsym, RTLD_NEXT (relative to the caller) too. */
Test(cuda_follow, lookups_still_answer)
{
	void *next, *dflt, *v;
	struct cfx f;

	copen(&f, 0);
	cr_assert(mrmgr__domain_follows(f.dom));
	next = dlsym(RTLD_NEXT, "malloc");
	dflt = dlsym(RTLD_DEFAULT, "malloc");
	cr_assert_not_null(next);
	cr_assert_eq(next, dflt);
	cr_assert_null(dlsym(RTLD_NEXT, "no_such_symbol_anywhere"));
	cr_assert_not_null(dlerror());
	/* libc's versioned malloc (not a sanitizer's, which dlsym finds
	 * first): what libc's own dlvsym says. */
	v = dlvsym(RTLD_DEFAULT, "malloc", GLIBC_BASE);
	cr_assert_not_null(v);
	cr_assert_eq(v, ((void *(*)(void *, const char *, const char *))
			 mrmgr__cuda_real_dlvsym)(RTLD_DEFAULT, "malloc",
						  GLIBC_BASE));
	/* An unknown name through cuGetProcAddress: as the driver says. */
	{
		cu_gpa_fn gpa = (cu_gpa_fn)sym(&f, "cuGetProcAddress");
		void *p = (void *)1;

		cr_assert_neq(gpa("cuNoSuchCall", &p, 12000, 0), 0);
		cr_assert_null(p);
	}
	cr_assert(mrmgr__domain_follows(f.dom));
	cclose(&f);
}

Test(cuda_follow, free_by_dlsym_pointer)
{
	int before = count_fds();
	struct cfx f;

	copen(&f, 0);
	free_then_reuse(&f, by_dlsym);
	cr_assert_eq(f.dom->validations, 0, "the counter was not trusted");
	cclose(&f);
	cr_assert_eq(count_fds(), before);
}

Test(cuda_follow, free_by_cuGetProcAddress)
{
	int before = count_fds();
	struct cfx f;

	copen(&f, 0);
	free_then_reuse(&f, by_gpa);
	free_then_reuse(&f, by_gpa_v2);
	cr_assert_eq(f.dom->validations, 0);
	cclose(&f);
	cr_assert_eq(count_fds(), before);
}

Test(cuda_follow, async_frees)
{
	int before = count_fds();
	struct cfx f;

	copen(&f, 0);
	free_then_reuse(&f, by_async_dlsym);
	free_then_reuse(&f, by_async_ptsz);
	cclose(&f);
	cr_assert_eq(count_fds(), before);
}

Test(cuda_follow, free_through_plt_of_a_library_loaded_later)
{
	int before = count_fds();
	mrmgr_region_t *r;
	struct cfx f;
	uint64_t a;

	copen(&f, 0);
	a = new_alloc(&f, 0x77);
	user_lib = dlopen("libcuda_user.so", RTLD_NOW);
	cr_assert_not_null(user_lib, "%s", dlerror());
	/* The first get after the load redirects its call sites. */
	cr_assert_eq(mrmgr_get_device(f.cache, a, 64, 0, &r), 0);
	mrmgr_put(r);
	cr_assert(mrmgr__domain_follows(f.dom), "%s", mrmgr__cuda_follow_why());
	free_then_reuse(&f, by_plt);
	free_then_reuse(&f, by_plt_async);
	cr_assert_eq(f.dom->validations, 0);
	cr_assert_eq(((cu_free_fn)sym(&f, "cuMemFree_v2"))(a), 0);
	dlclose(user_lib);
	cclose(&f);
	cr_assert_eq(count_fds(), before);
}

Test(cuda_follow, free_before_the_first_get_after_a_load)
{
	struct cfx f;
	uint64_t a, b;
	cu_free_fn fn;

	copen(&f, 0);
	a = new_alloc(&f, 0x31);
	get_reads(&f, a, 0x31);
	user_lib = dlopen("libcuda_user.so", RTLD_NOW);
	cr_assert_not_null(user_lib, "%s", dlerror());
	/* Its PLT is not redirected yet: the free is unseen, but the get
	 * that notices the new object validates everything once. */
	*(void **)&fn = dlsym(user_lib, "user_free");
	cr_assert_eq(fn(a), 0);
	b = new_alloc(&f, 0x32);
	cr_assert_eq(b, a);
	get_reads(&f, b, 0x32);
	cr_assert(mrmgr__domain_follows(f.dom));
	cclose(&f);
}

/* A library loaded, freeing through its PLT (not redirected yet) and
 * unloaded before any get: the last object's successor would be gone
 * again, but the dlclose() went through a redirected call site, which
 * scanned first. */
Test(cuda_follow, load_free_unload_before_a_get)
{
	struct cfx f;
	uint64_t a, b;
	cu_free_fn fn;

	copen(&f, 0);
	a = new_alloc(&f, 0x91);
	get_reads(&f, a, 0x91);
	user_lib = dlopen("libcuda_user.so", RTLD_NOW);
	cr_assert_not_null(user_lib, "%s", dlerror());
	*(void **)&fn = dlsym(user_lib, "user_free");
	cr_assert_eq(fn(a), 0);
	/* (The scan the dlclose() makes pins the library, the last object
	 * then: without that scan it would be unloaded here.) */
	cr_assert_eq(dlclose(user_lib), 0);
	b = new_alloc(&f, 0x92);
	cr_assert_eq(b, a);
	get_reads(&f, b, 0x92);
	cr_assert(mrmgr__domain_follows(f.dom));
	cclose(&f);
}

/* VMM: a range reserved, a handle mapped, unmapped and another mapped
 * (a new buffer id at the same address); then the range freed and
 * reserved again. */
Test(cuda_follow, vmm_unmap_release_address_free)
{
	int (*reserve)(unsigned long long *, size_t, size_t, unsigned long long,
		       unsigned long long);
	int (*create)(unsigned long long *, size_t, const void *,
		      unsigned long long);
	int (*map)(unsigned long long, size_t, size_t, unsigned long long,
		   unsigned long long);
	cu_range_fn unmap, afree;
	cu_free_fn release;
	unsigned long long va, va2, h1, h2;
	int before = count_fds();
	uint64_t e, sig;
	struct cfx f;

	copen(&f, 0);
	*(void **)&reserve = sym(&f, "cuMemAddressReserve");
	*(void **)&create = sym(&f, "cuMemCreate");
	*(void **)&map = sym(&f, "cuMemMap");
	*(void **)&unmap = sym(&f, "cuMemUnmap");
	*(void **)&afree = sym(&f, "cuMemAddressFree");
	*(void **)&release = sym(&f, "cuMemRelease");
	cr_assert_eq(reserve(&va, SZ, 0, 0, 0), 0);
	cr_assert_eq(create(&h1, SZ, NULL, 0), 0);
	cr_assert_eq(map(va, SZ, 0, h1, 0), 0);
	sig = 0x51;
	cr_assert_eq(f.write(va, &sig, sizeof(sig)), 0);
	get_reads(&f, va, 0x51);
	e = ended();
	cr_assert_eq(unmap(va, SZ), 0);
	cr_assert_eq(release(h1), 0);
	cr_assert_eq(ended(), e + 2);
	cr_assert_eq(create(&h2, SZ, NULL, 0), 0);
	cr_assert_eq(map(va, SZ, 0, h2, 0), 0);
	sig = 0x52;
	cr_assert_eq(f.write(va, &sig, sizeof(sig)), 0);
	get_reads(&f, va, 0x52);
	e = ended();
	cr_assert_eq(unmap(va, SZ), 0);
	cr_assert_eq(afree(va, SZ), 0);
	cr_assert_eq(ended(), e + 2);
	cr_assert_eq(reserve(&va2, SZ, 0, 0, 0), 0);
	cr_assert_eq(va2, va);
	cr_assert_eq(map(va2, SZ, 0, h2, 0), 0);
	sig = 0x53;
	cr_assert_eq(f.write(va2, &sig, sizeof(sig)), 0);
	get_reads(&f, va2, 0x53);
	cr_assert_eq(cstats(f.cache).misses, 3);
	cr_assert_eq(unmap(va2, SZ), 0);
	cr_assert_eq(release(h2), 0);
	cr_assert_eq(afree(va2, SZ), 0);
	cclose(&f);
	cr_assert_eq(count_fds(), before);
}

Test(cuda_follow, off_every_get_validates)
{
	int before = count_fds();
	struct cfx f;
	uint64_t a;

	copen(&f, 1);
	cr_assert_not(mrmgr__domain_follows(f.dom));
	cr_assert_not_null(strstr(mrmgr__cuda_follow_why(), "test hook"));
	a = new_alloc(&f, 0x61);
	get_reads(&f, a, 0x61); /* a miss: nothing to validate yet */
	cr_assert_eq(f.dom->validations, 0);
	for (int i = 0; i < 5; i++)
		get_reads(&f, a, 0x61);
	cr_assert_eq(f.dom->validations, 5, "%llu validations for 5 hits",
		     (unsigned long long)f.dom->validations);
	cr_assert_eq(cstats(f.cache).hits, 5);
	/* Nothing redirected: the dlsym pointer is the driver's own. */
	free_then_reuse(&f, by_dlsym);
	free_then_reuse(&f, by_gpa);
	cr_assert_eq(ended(), 0, "the counter moved with following off");
	cr_assert_eq(((cu_free_fn)sym(&f, "cuMemFree_v2"))(a), 0);
	cclose(&f);
	cr_assert_eq(count_fds(), before);
}

Test(cuda_follow, loaded_before_the_domain_is_not_followed)
{
	void *early = dlopen("libcuda.so.1", RTLD_NOW);
	struct cfx f;

	cr_assert_not_null(early);
	copen(&f, 0);
	cr_assert_not(mrmgr__domain_follows(f.dom));
	cr_assert_not_null(strstr(mrmgr__cuda_follow_why(), "loaded before"),
			   "%s", mrmgr__cuda_follow_why());
	free_then_reuse(&f, by_dlsym);
	cr_assert_gt(f.dom->validations, 0);
	cclose(&f);
	dlclose(early);
}

Test(cuda_follow, a_later_dlsym_importer_stops_following)
{
	void *(*lookup)(void *, const char *);
	mrmgr_region_t *r;
	void *lib;
	struct cfx f;
	uint64_t a;

	copen(&f, 0);
	a = new_alloc(&f, 0x41);
	get_reads(&f, a, 0x41);
	lib = dlopen("libcuda_dlsym_user.so", RTLD_NOW);
	cr_assert_not_null(lib, "%s", dlerror());
	cr_assert_eq(mrmgr_get_device(f.cache, a, 64, 0, &r), 0);
	mrmgr_put(r);
	cr_assert_not(mrmgr__domain_follows(f.dom));
	cr_assert_not_null(strstr(mrmgr__cuda_follow_why(),
				  "libcuda_dlsym_user.so"), "%s",
			   mrmgr__cuda_follow_why());
	*(void **)&lookup = dlsym(lib, "user_lookup");
	cr_assert_not_null(lookup);
	/* Whatever its dlsym hands out, the get validates. */
	free_then_reuse(&f, by_dlsym);
	cclose(&f);
	dlclose(lib);
}

struct torture {
	struct cfx *f;
	int by_gpa;
	uint64_t stale, done;
};

static void *torture_thread(void *arg)
{
	struct torture *t = arg;
	cu_free_fn fn = NULL;

	if (t->by_gpa)
		cr_assert_eq(((cu_gpa_fn)sym(t->f, "cuGetProcAddress"))(
				     "cuMemFree", (void **)&fn, 12000, 0), 0);
	else
		fn = (cu_free_fn)sym(t->f, "cuMemFree_v2");
	for (uint64_t i = 0; i < 300; i++) {
		uint64_t sig = ((uint64_t)(t->by_gpa + 1) << 32) | i;
		unsigned long long va = new_alloc(t->f, sig);
		mrmgr_region_t *r;

		cr_assert_eq(mrmgr_get_device(t->f->cache, va, 64, 0, &r), 0);
		if (read_at(r, va, va) != sig)
			t->stale++;
		mrmgr_put(r);
		/* Freed while cached: the address comes back for the next
		 * allocation of this thread or the other. */
		cr_assert_eq(fn(va), 0);
		t->done++;
	}
	return NULL;
}

static void two_threads(int follow_off)
{
	int before = count_fds();
	struct torture t[2] = { { .by_gpa = 0 }, { .by_gpa = 1 } };
	pthread_t th[2];
	struct cfx f;

	copen(&f, follow_off);
	for (int i = 0; i < 2; i++) {
		t[i].f = &f;
		cr_assert_eq(pthread_create(&th[i], NULL, torture_thread, &t[i]), 0);
	}
	for (int i = 0; i < 2; i++)
		pthread_join(th[i], NULL);
	cr_assert_eq(t[0].stale + t[1].stale, 0, "%llu stale hits",
		     (unsigned long long)(t[0].stale + t[1].stale));
	cr_assert_eq(t[0].done + t[1].done, 600);
	cclose(&f);
	cr_assert_eq(count_fds(), before, "descriptors leaked");
}

Test(cuda_follow, two_threads_followed)
{
	two_threads(0);
}

Test(cuda_follow, two_threads_validating)
{
	two_threads(1);
}
