/*
 * The patch engine on aarch64, under qemu-user with Debian's arm64 glibc
 * (`make check-aarch64`): the real patch.c, patch_hooks.c and
 * patch_aarch64.c, with the monitor's queue replaced by a small log of
 * reported ranges. It installs (prologue recognition, trampoline, the
 * self-test), then checks that each call reports its range, that errno
 * and glibc's break come out right, that free() of an mmap'd chunk is
 * seen, and that unpatching and patching again works.
 *
 * SPDX-License-Identifier: MIT
 */
#define _GNU_SOURCE
#include <errno.h>
#include <malloc.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/shm.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "log.h"
#include "monitor.h"
#include "patch.h"

/* ------------------------------------------------------------ stubs */

#define NLOG 4096
static uint64_t log_s[NLOG], log_l[NLOG];
static unsigned int nlog;

void mrmgr__mon_change_begin(uint64_t s, uint64_t l)
{
	unsigned int i = __atomic_fetch_add(&nlog, 1, __ATOMIC_RELAXED) % NLOG;

	log_s[i] = s;
	log_l[i] = l;
}

void mrmgr__mon_change_end(uint64_t s, uint64_t l)
{
	mrmgr__mon_change_begin(s, l);
}

uint64_t mrmgr__mon_queue_tail(void)
{
	return nlog;
}

void mrmgr__mon_filter_add(uint64_t s, uint64_t l)
{
	(void)s;
	(void)l;
}

int mrmgr__mon_queue_saw(uint64_t from, uint64_t s, uint64_t l)
{
	for (uint64_t i = from; i < nlog; i++)
		if (log_s[i % NLOG] <= l && log_l[i % NLOG] >= s)
			return 1;
	return 0;
}

void mrmgr__log(enum mrmgr_log_level lv, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fprintf(stderr, "[%d] ", (int)lv);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
}

/* ------------------------------------------------------------ checks */

static int fails;
#define CHECK(c)                                                       \
	do {                                                           \
		if (!(c)) {                                            \
			printf("FAIL line %d: %s\n", __LINE__, #c);    \
			fails++;                                       \
		}                                                      \
	} while (0)

static uint64_t mark;
static int saw(const void *p, size_t l)
{
	return mrmgr__mon_queue_saw(mark, (uintptr_t)p, (uintptr_t)p + l - 1);
}

int main(void)
{
	const size_t pg = 4096;
	char *p, *b0, *q;
	uintptr_t cu;
	int err, id;

	err = mrmgr__patch_start();
	printf("install: %s, targets %#x\n", strerror(err), mrmgr__patch_targets());
	CHECK(err == 0);
	CHECK(mrmgr__patch_targets() == (1u << MRMGR__PT_COUNT) - 1);

	p = mmap(NULL, 4 * pg, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK(p != MAP_FAILED);
	mark = nlog;
	CHECK(munmap(p + pg, pg) == 0);
	CHECK(saw(p + pg, pg));
	CHECK(!saw(p, pg));
	mark = nlog;
	CHECK(madvise(p, pg, MADV_DONTNEED) == 0);
	CHECK(saw(p, pg));
	mark = nlog;
	CHECK(mremap(p + 2 * pg, 2 * pg, pg, 0) == p + 2 * pg);
	CHECK(saw(p + 3 * pg, pg));
	CHECK(!saw(p + 2 * pg, pg));
	mark = nlog;
	CHECK(mmap(p, pg, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED,
		   -1, 0) == p);
	CHECK(saw(p, pg));
	errno = 0;
	CHECK(munmap(p + 1, pg) == -1);
	CHECK(errno == EINVAL);
	errno = 0;
	CHECK(mmap(NULL, pg, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 1) ==
	      MAP_FAILED);
	CHECK(errno == EINVAL);

	b0 = sbrk(0);
	CHECK(sbrk(65536) == b0);
	memset(b0, 1, 65536);
	mark = nlog;
	CHECK(sbrk(-65536) == b0 + 65536);
	CHECK(saw(b0, 65536));
	CHECK(sbrk(0) == b0);
	CHECK((char *)syscall(SYS_brk, 0) == b0);

	mallopt(M_MMAP_THRESHOLD, 128 * 1024);
	q = malloc(1 << 20);
	CHECK(q != NULL);
	cu = (uintptr_t)q;
	memset(q, 1, 1 << 20);
	mark = nlog;
	free(q);
	CHECK(mrmgr__mon_queue_saw(mark, cu, cu + (1 << 20) - 1));

	id = shmget(IPC_PRIVATE, 4 * pg, IPC_CREAT | 0600);
	if (id >= 0) {
		q = mmap(NULL, 4 * pg, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		mark = nlog;
		CHECK(shmat(id, q, SHM_REMAP) == q);
		CHECK(saw(q, 4 * pg));
		mark = nlog;
		CHECK(shmdt(q) == 0);
		CHECK(saw(q, 4 * pg));
		shmctl(id, IPC_RMID, NULL);
	}

	CHECK(mrmgr__patch_test_toggle() == 0);
	mark = nlog;
	CHECK(munmap(p, pg) == 0);
	CHECK(saw(p, pg));
	printf("patch_aarch64: %s, %d check(s) failed\n", fails ? "FAILED" : "ok",
	       fails);
	return fails != 0;
}
