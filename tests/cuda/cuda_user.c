/*
 * Callers of the fake libcuda (fake_cuda.c), loaded by
 * tests/unit/test_cuda_follow.c after the CUDA domain opened:
 *   libcuda_user.so       calls the frees through its PLT (linked with
 *                         the fake libcuda.so.1);
 *   libcuda_dlsym_user.so looks functions up with dlsym() (USER_DLSYM),
 *                         which may hand out a pointer before the
 *                         library sees the object.
 *
 * SPDX-License-Identifier: MIT
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stddef.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;

#define EXPORT __attribute__((visibility("default")))

#ifndef USER_DLSYM
CUresult cuMemFree_v2(CUdeviceptr p);
CUresult cuMemFreeAsync(CUdeviceptr p, void *stream);
CUresult cuMemUnmap(CUdeviceptr p, size_t size);

EXPORT CUresult user_free(CUdeviceptr p);
EXPORT CUresult user_free_async(CUdeviceptr p);
EXPORT CUresult user_unmap(CUdeviceptr p, size_t size);

EXPORT CUresult user_free(CUdeviceptr p)
{
	return cuMemFree_v2(p);
}

EXPORT CUresult user_free_async(CUdeviceptr p)
{
	return cuMemFreeAsync(p, (void *)0);
}

EXPORT CUresult user_unmap(CUdeviceptr p, size_t size)
{
	return cuMemUnmap(p, size);
}
#else
EXPORT void *user_lookup(void *handle, const char *name);

EXPORT void *user_lookup(void *handle, const char *name)
{
	return dlsym(handle, name);
}
#endif
