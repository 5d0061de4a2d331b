/*
 * The cache against the kernel's memlock accounting: a small RLIMIT_MEMLOCK
 * and no CAP_IPC_LOCK, so ibv_reg_mr really fails with ENOMEM once the
 * process has pinned its limit. The cache must evict idle regions and retry
 * instead of failing, and fail cleanly (ENOMEM, nothing leaked) when every
 * region is in use.
 *
 * Each test lowers the limit and drops the capability in its own process
 * (Criterion runs every test in a worker process of its own), and does so
 * before opening the device: see setup().
 *
 * SPDX-License-Identifier: MIT
 */
#include <errno.h>
#include <linux/capability.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "cache_helpers.h"

#define LIMIT RDMA_MiB
#define SRC_LEN (64 * RDMA_KiB)

/* Remove CAP_IPC_LOCK from this process for good: with it (root in the
 * guest has it) the kernel does not enforce RLIMIT_MEMLOCK. */
static void drop_ipc_lock(void)
{
	struct __user_cap_header_struct h = {
		.version = _LINUX_CAPABILITY_VERSION_3,
	};
	struct __user_cap_data_struct d[_LINUX_CAPABILITY_U32S_3];
	const uint32_t bit = 1u << (CAP_IPC_LOCK % 32);
	const int word = CAP_IPC_LOCK / 32;

	cr_assert_eq(syscall(SYS_capget, &h, d), 0, "capget: %s", strerror(errno));
	d[word].effective &= ~bit;
	d[word].permitted &= ~bit;
	d[word].inheritable &= ~bit;
	cr_assert_eq(syscall(SYS_capset, &h, d), 0, "capset: %s", strerror(errno));
	/* Also from the bounding set, so nothing exec'd gets it back;
	 * needs CAP_SETPCAP, and without it there was nothing to drop. */
	(void)prctl(PR_CAPBSET_DROP, CAP_IPC_LOCK, 0, 0, 0);
	cr_assert_eq(syscall(SYS_capget, &h, d), 0);
	cr_assert_eq(d[word].effective & bit, 0, "CAP_IPC_LOCK still effective");
}

static void limit_memlock(rlim_t bytes)
{
	struct rlimit rl = { .rlim_cur = bytes, .rlim_max = bytes };

	cr_assert_eq(setrlimit(RLIMIT_MEMLOCK, &rl), 0, "setrlimit: %s",
		     strerror(errno));
	drop_ipc_lock();
}

/*
 * The device fact the tests build on: past the limit ibv_reg_mr fails with
 * ENOMEM, and deregistering gives the pinned bytes back.
 */
static void check_limit_is_enforced(struct rdma_fixture *f)
{
	char *p = rdma_map(LIMIT + SRC_LEN, 0);
	struct ibv_mr *mr;

	errno = 0;
	mr = ibv_reg_mr(f->pd, p, LIMIT + SRC_LEN, IBV_ACCESS_LOCAL_WRITE);
	if (mr)
		ibv_dereg_mr(mr);
	cr_assert_null(mr, "%s pinned %zu bytes past RLIMIT_MEMLOCK %zu: the "
		       "limit is not enforced here", f->name, LIMIT + SRC_LEN,
		       LIMIT);
	cr_assert_eq(errno, ENOMEM, "ibv_reg_mr past the limit: %s", strerror(errno));
	mr = ibv_reg_mr(f->pd, p, LIMIT / 2, IBV_ACCESS_LOCAL_WRITE);
	cr_assert_not_null(mr, "half the limit: %s", strerror(errno));
	cr_assert_eq(ibv_dereg_mr(mr), 0);
	mr = ibv_reg_mr(f->pd, p, LIMIT / 2 + SRC_LEN, IBV_ACCESS_LOCAL_WRITE);
	cr_assert_not_null(mr, "pinned bytes come back at dereg: %s", strerror(errno));
	cr_assert_eq(ibv_dereg_mr(mr), 0);
	munmap(p, LIMIT + SRC_LEN);
	cr_log_info("%s: RLIMIT_MEMLOCK %zu KiB enforced without CAP_IPC_LOCK",
		    f->name, LIMIT / RDMA_KiB);
}

/* Two buffers that are not adjacent (a guard page between), so merging
 * cannot join them. */
static void map_apart(size_t len_a, size_t len_b, char **a, char **b)
{
	char *p = mmap(NULL, len_a + 4096 + len_b, PROT_NONE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	cr_assert_neq(p, MAP_FAILED);
	cr_assert_eq(mprotect(p, len_a, PROT_READ | PROT_WRITE), 0);
	cr_assert_eq(mprotect(p + len_a + 4096, len_b, PROT_READ | PROT_WRITE), 0);
	memset(p, 'a', len_a);
	memset(p + len_a + 4096, 'b', len_b);
	*a = p;
	*b = p + len_a + 4096;
}

struct memlock_setup {
	struct rdma_fixture f;
	mrmgr_cache_t *cache;  /* under test */
	mrmgr_cache_t *local;  /* the source's, so it never merges with the rest */
	char *src;
	mrmgr_region_t *src_r; /* held: counts against the limit throughout */
};

/* max_bytes above the rlimit: the kernel refuses before the cache's own
 * byte limit would, which is the path under test. */
static void setup(struct memlock_setup *s, uint64_t max_bytes)
{
	/* Before opening the device: uverbs refuses write()-based commands
	 * (rxe's post_send doorbell among them) with EACCES from a process
	 * whose credentials changed since it opened the device. */
	limit_memlock(LIMIT);
	rdma_fixture_open(&s->f, RDMA_FX_QP);
	check_limit_is_enforced(&s->f);
	s->cache = rxe_cache(&s->f, 0, max_bytes, 0);
	s->local = rxe_cache(&s->f, 0, 64 * RDMA_MiB, 0);
	s->src = rdma_map(SRC_LEN, 'W');
	s->src_r = rxe_get(s->local, s->src, SRC_LEN, IBV_ACCESS_LOCAL_WRITE);
}

static void teardown(struct memlock_setup *s)
{
	mrmgr_put(s->src_r);
	cr_assert_eq(mrmgr_cache_destroy(s->cache), 0);
	cr_assert_eq(mrmgr_cache_destroy(s->local), 0);
	rdma_fixture_close(&s->f);
	munmap(s->src, SRC_LEN);
}

/* Prove a region works: WRITE the source's 'W's into its first bytes. */
static void write_into(struct memlock_setup *s, mrmgr_region_t *r, char *dst,
		       const char *what)
{
	cr_assert_eq(rdma_write(&s->f, s->src, mrmgr_region_lkey(s->src_r),
				(uintptr_t)dst, mrmgr_region_rkey(r), SRC_LEN),
		     IBV_WC_SUCCESS, "%s", what);
	rdma_expect_bytes(dst, SRC_LEN, 'W', what);
}

Test(rxe_memlock, evicts_idle_regions_and_retries)
{
	struct memlock_setup s;
	char *a, *b;

	setup(&s, 64 * RDMA_MiB);
	map_apart(512 * RDMA_KiB, 768 * RDMA_KiB, &a, &b);

	mrmgr_put(rxe_get(s.cache, a, 512 * RDMA_KiB, RXE_RW));
	/* 64 KiB + 512 KiB pinned; 768 KiB more is past 1 MiB. */
	mrmgr_region_t *rb = rxe_get(s.cache, b, 768 * RDMA_KiB, RXE_RW);
	struct mrmgr_stats st = rxe_stats(s.cache);
	cr_assert_gt(st.evict_retries, 0, "the ENOMEM must have been retried");
	cr_assert_eq(st.evictions, 1, "the idle region made room");
	cr_assert_eq(st.reg_failures, 0);
	cr_assert_eq(st.pinned_bytes, 768 * RDMA_KiB);
	cr_log_info("%s: get of 768 KiB under a 1 MiB memlock limit: %llu "
		    "evict-retries, %llu evictions", s.f.name,
		    (unsigned long long)st.evict_retries,
		    (unsigned long long)st.evictions);
	write_into(&s, rb, b, "WRITE into the region registered after evict-and-retry");
	mrmgr_put(rb);

	cr_assert_eq(mrmgr_invalidate(s.cache, a, 512 * RDMA_KiB + 4096 + 768 * RDMA_KiB), 0);
	munmap(a, 512 * RDMA_KiB + 4096 + 768 * RDMA_KiB);
	teardown(&s);
}

/* Adjacent buffers: the cache wants to merge the new request with the idle
 * neighbour, and the merged span alone is past the limit. Evicting the
 * neighbour and registering the request alone fits. */
Test(rxe_memlock, merged_span_past_the_limit_falls_back_to_the_request)
{
	struct memlock_setup s;

	setup(&s, 64 * RDMA_MiB);
	char *a = rdma_map(512 * RDMA_KiB + 768 * RDMA_KiB, 'a');
	char *b = a + 512 * RDMA_KiB;

	mrmgr_put(rxe_get(s.cache, a, 512 * RDMA_KiB, RXE_RW));
	mrmgr_region_t *rb = rxe_get(s.cache, b, 768 * RDMA_KiB, RXE_RW);
	struct mrmgr_stats st = rxe_stats(s.cache);
	cr_assert_gt(st.evict_retries, 0);
	cr_assert_eq(mrmgr_region_addr(rb), (void *)b, "just the request");
	cr_assert_eq(mrmgr_region_length(rb), 768 * RDMA_KiB);
	cr_assert_eq(st.pinned_bytes, 768 * RDMA_KiB);
	write_into(&s, rb, b, "WRITE into the request registered alone");
	mrmgr_put(rb);

	cr_assert_eq(mrmgr_invalidate(s.cache, a, 512 * RDMA_KiB + 768 * RDMA_KiB), 0);
	munmap(a, 512 * RDMA_KiB + 768 * RDMA_KiB);
	teardown(&s);
}

Test(rxe_memlock, enomem_when_everything_is_in_use)
{
	struct memlock_setup s;
	char *a, *c;

	setup(&s, 64 * RDMA_MiB);
	map_apart(768 * RDMA_KiB, 512 * RDMA_KiB, &a, &c);

	mrmgr_region_t *ra = rxe_get(s.cache, a, 768 * RDMA_KiB, RXE_RW);
	mrmgr_region_t *rc = (mrmgr_region_t *)0x1;
	int ret = mrmgr_get(s.cache, c, 512 * RDMA_KiB, RXE_RW, &rc);
	cr_assert_eq(ret, ENOMEM, "all in use: ENOMEM, got %s", strerror(ret));
	cr_assert_eq(rc, (mrmgr_region_t *)0x1, "no region on failure");
	struct mrmgr_stats st = rxe_stats(s.cache);
	cr_assert_gt(st.evict_retries, 0);
	cr_assert_gt(st.reg_failures, 0);
	cr_assert_eq(st.regions, 1, "nothing leaked, nothing lost");
	cr_assert_eq(st.pinned_bytes, 768 * RDMA_KiB);
	cr_log_info("%s: all in use: get failed cleanly with ENOMEM", s.f.name);
	write_into(&s, ra, a, "the held region still works after the failure");

	/* Once the big region is idle, the same get succeeds. */
	mrmgr_put(ra);
	mrmgr_region_t *ok = rxe_get(s.cache, c, 512 * RDMA_KiB, RXE_RW);
	write_into(&s, ok, c, "WRITE after the holder let go");
	mrmgr_put(ok);

	cr_assert_eq(mrmgr_invalidate(s.cache, a, 768 * RDMA_KiB + 4096 + 512 * RDMA_KiB), 0);
	munmap(a, 768 * RDMA_KiB + 4096 + 512 * RDMA_KiB);
	teardown(&s);
}

/* With no byte limit given, the cache takes RLIMIT_MEMLOCK as its own and
 * evicts before the kernel has to refuse. */
Test(rxe_memlock, default_byte_limit_is_the_rlimit)
{
	struct memlock_setup s;
	char *a, *b;

	setup(&s, 0);
	struct mrmgr_stats st = rxe_stats(s.cache);
	cr_assert_eq(st.max_bytes, LIMIT);
	map_apart(512 * RDMA_KiB, 768 * RDMA_KiB, &a, &b);

	mrmgr_put(rxe_get(s.cache, a, 512 * RDMA_KiB, RXE_RW));
	mrmgr_region_t *rb = rxe_get(s.cache, b, 768 * RDMA_KiB, RXE_RW);
	st = rxe_stats(s.cache);
	cr_assert_eq(st.evictions, 1);
	cr_assert_eq(st.evict_retries, 0, "the cache's limit kept it below the kernel's");
	write_into(&s, rb, b, "WRITE under the default byte limit");
	mrmgr_put(rb);

	cr_assert_eq(mrmgr_invalidate(s.cache, a, 512 * RDMA_KiB + 4096 + 768 * RDMA_KiB), 0);
	munmap(a, 512 * RDMA_KiB + 4096 + 768 * RDMA_KiB);
	teardown(&s);
}
