/*
 * What each monitor mode follows: every kind of change to cached memory
 * against every mode, one test per cell, named <mode>.<change>; the
 * table in doc/monitor.md ("What each mode follows") lists them.
 *
 * A cell caches an area, makes the change (leaving the area mapped again,
 * anonymous, with new contents), gets the area again, and checks what the
 * mode documents:
 *
 *   FOLLOW    the second get registers again (a miss), and a write through
 *             it lands in the pages mapped now;
 *   EXCLUDED  a documented exclusion: the second get is a hit on the old
 *             registration (the test shows the limit, and fails the day
 *             the mode starts following the change: update the table);
 *   KEEP      the change releases no page: no write is stale;
 *   UNCACHED  the mode never caches such memory (the first get is not
 *             cached).
 *
 * Columns: auto (the patched libc), uffd, hooks (test_monitor_modes_hooks,
 * libmrmgr_hooks.so linked ahead of libc), external (the program reports
 * each change with mrmgr_notify_unmap()), and sanitizer: auto under a
 * sanitizer, simulated with a test flag in the ordinary build; in a
 * sanitizer build the auto column is that column for real.
 *
 * SPDX-License-Identifier: MIT
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/io_uring.h>
#include <malloc.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/shm.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "monitor_helpers.h"

#ifdef MRMGR_TEST_INTERNAL
#include "monitor.h"
#include "patch.h"
#endif

#ifndef SHM_REMAP
#define SHM_REMAP 040000
#endif
#ifndef MADV_GUARD_INSTALL
#define MADV_GUARD_INSTALL 102 /* Linux 6.13 */
#define MADV_GUARD_REMOVE 103
#endif
#ifndef MADV_PAGEOUT
#define MADV_PAGEOUT 21
#endif
#ifndef SYS_process_madvise
#define SYS_process_madvise 440
#endif
#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif

#define PAGE ((size_t)4096)
#define LEN (16 * PAGE)

enum expect { NA = 0, FOLLOW, EXCLUDED, KEEP, UNCACHED };
enum col { C_AUTO, C_UFFD, C_HOOKS, C_EXTERNAL, C_SAN, C_COUNT };

static const char *const expect_name[] = { "n/a", "followed", "excluded",
					   "kept", "not cached" };

/* ------------------------------------------------------------ memory */

static void map_back(char *p, size_t n)
{
	void *q = mmap(p, n, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);

	cr_assert_eq(q, (void *)p, "could not map again at %p: %s", (void *)p,
		     strerror(errno));
}

static void raw_map_back(char *p, size_t n)
{
	long q = syscall(SYS_mmap, p, n, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);

	cr_assert_eq(q, (long)p, "could not map again at %p", (void *)p);
}

/* Where a row's area comes from, and how it goes. */
struct area {
	char *p;
	size_t len;
	int shm_id, fd;
	char *brk_base;  /* sbrk rows: the break before */
	void *chunk;     /* malloc rows */
	void *guard;     /* malloc_trim: keeps the chunk off the top */
	char *blocker;   /* realloc: keeps the chunk from growing in place */
	int attached;    /* shmat rows: the segment is over the area */
};

/*
 * Anonymous memory far below where mmap(NULL) places mappings (top-down
 * from under the stack): a hole the test punches there is never the
 * highest free gap, so another thread's mmap(NULL) -- Criterion's, a
 * sanitizer's allocator -- does not take it before the test maps it
 * again. 32 TiB up: above ASan's shadow on x86-64.
 */
static char *map_low(size_t n)
{
	static uintptr_t next = (uintptr_t)32 << 40;

	for (int i = 0; i < 4096; i++, next += 4 * MiB) {
		void *p = mmap((void *)next, n, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE,
			       -1, 0);

		if (p == (void *)next) {
			next += 4 * MiB;
			memset(p, 'A', n);
			return p;
		}
		if (p != MAP_FAILED)
			munmap(p, n); /* an old kernel took it as a hint */
	}
	return map_rw(n, 'A');
}

static void setup_anon(struct area *a)
{
	a->p = map_low(3 * LEN) + LEN; /* guarded by neighbours */
	a->len = LEN;
	munmap(a->p - LEN, LEN);
	munmap(a->p + LEN, LEN);
}

static void teardown_anon(struct area *a)
{
	munmap(a->p, a->len);
}

/* Four times the area reserved, the area at its start: mremap can grow
 * it in place into the rest. */
static void setup_growable(struct area *a)
{
	a->p = map_low(4 * LEN);
	a->len = LEN;
	munmap(a->p + LEN, 3 * LEN);
}

static void setup_heap(struct area *a)
{
	char *base;

	/* A large untrimmed top: malloc does not move the break meanwhile. */
	mallopt(M_TRIM_THRESHOLD, 512 * (int)MiB);
	mallopt(M_MMAP_THRESHOLD, 32 * (int)MiB);
	free(malloc(16 * MiB));
	base = sbrk(0);
	a->brk_base = base;
	a->p = (char *)(((uintptr_t)base + PAGE - 1) & ~(PAGE - 1));
	a->len = LEN;
	cr_assert_neq(sbrk((intptr_t)(a->p - base) + (intptr_t)LEN), (void *)-1);
}

static void teardown_heap(struct area *a)
{
	(void)sbrk(-((intptr_t)(a->p - a->brk_base) + (intptr_t)LEN));
}

/* A chunk glibc mmaps (a fixed threshold below it); the area is the
 * page-aligned inside of it. */
static void setup_chunk(struct area *a)
{
	mallopt(M_MMAP_THRESHOLD, 128 * (int)KiB);
	a->chunk = malloc(256 * KiB);
	cr_assert_not_null(a->chunk);
	a->p = (char *)(((uintptr_t)a->chunk + PAGE - 1) & ~(PAGE - 1));
	a->len = LEN;
}

/* An mmap'd chunk with a page mapped right after its mapping, so that
 * growing it must move it. */
static void setup_chunk_blocked(struct area *a)
{
	const size_t *h;
	char *base, *end;

	setup_chunk(a);
	h = a->chunk;
	base = (char *)a->chunk - 2 * sizeof(size_t) - h[-2];
	end = base + h[-2] + (h[-1] & ~(size_t)7);
	a->blocker = mmap(end, PAGE, PROT_NONE,
			  MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
	if (a->blocker == MAP_FAILED)
		a->blocker = NULL; /* something is there already */
}

static void teardown_chunk(struct area *a)
{
	munmap(a->p, a->len);
	free(a->chunk);
	if (a->blocker)
		munmap(a->blocker, PAGE);
}

/* A free chunk in the main arena's heap, kept off the top (no trim at
 * free()); malloc_trim() discards its inside pages. */
static void setup_heap_chunk(struct area *a)
{
	mallopt(M_TRIM_THRESHOLD, 512 * (int)MiB);
	mallopt(M_MMAP_THRESHOLD, 32 * (int)MiB);
	a->chunk = malloc(LEN + 4 * PAGE);
	a->guard = malloc(64);
	cr_assert_not_null(a->chunk);
	cr_assert_not_null(a->guard);
	a->p = (char *)(((uintptr_t)a->chunk + 64 + PAGE - 1) & ~(PAGE - 1));
	a->len = LEN;
}

static void teardown_heap_chunk(struct area *a)
{
	free(a->chunk);
	free(a->guard);
}

static void setup_memfd_shared(struct area *a)
{
	a->fd = memfd_create("mrmgr-modes", MFD_CLOEXEC);
	cr_assert_geq(a->fd, 0);
	cr_assert_eq(ftruncate(a->fd, (off_t)LEN), 0);
	a->p = mmap(NULL, LEN, PROT_READ | PROT_WRITE, MAP_SHARED, a->fd, 0);
	cr_assert_neq(a->p, MAP_FAILED);
	a->len = LEN;
}

static void setup_shm(struct area *a)
{
	a->shm_id = shmget(IPC_PRIVATE, LEN, IPC_CREAT | 0600);
	cr_assert_geq(a->shm_id, 0);
	a->p = shmat(a->shm_id, NULL, 0);
	cr_assert_neq(a->p, (void *)-1);
	a->len = LEN;
	shmctl(a->shm_id, IPC_RMID, NULL);
}

static void setup_file(struct area *a)
{
	a->fd = memfd_create("mrmgr-modes", MFD_CLOEXEC);
	cr_assert_geq(a->fd, 0);
	cr_assert_eq(ftruncate(a->fd, (off_t)LEN), 0);
	a->p = mmap(NULL, LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE, a->fd, 0);
	cr_assert_neq(a->p, MAP_FAILED);
	a->len = LEN;
}

static void teardown_file(struct area *a)
{
	munmap(a->p, a->len);
	close(a->fd);
}

/* ------------------------------------------------------------ changes */

static void ch_munmap(struct area *a)
{
	cr_assert_eq(munmap(a->p, a->len), 0);
	map_back(a->p, a->len);
}

static void ch_raw_munmap(struct area *a)
{
	cr_assert_eq(syscall(SYS_munmap, a->p, a->len), 0);
	raw_map_back(a->p, a->len);
}

static void mremap_move(struct area *a, int raw)
{
	void *q = mmap(NULL, a->len, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	void *r;

	cr_assert_neq(q, MAP_FAILED);
	r = raw ? (void *)syscall(SYS_mremap, a->p, a->len, a->len,
				  MREMAP_MAYMOVE | MREMAP_FIXED, q)
		: mremap(a->p, a->len, a->len, MREMAP_MAYMOVE | MREMAP_FIXED, q);
	cr_assert_eq(r, q, "mremap: %s", strerror(errno));
	raw ? raw_map_back(a->p, a->len) : map_back(a->p, a->len);
	munmap(q, a->len);
}

static void ch_mremap_move(struct area *a) { mremap_move(a, 0); }
static void ch_raw_mremap_move(struct area *a) { mremap_move(a, 1); }

static void mremap_shrink(struct area *a, int raw)
{
	void *r = raw ? (void *)syscall(SYS_mremap, a->p, a->len, PAGE, 0, NULL)
		      : mremap(a->p, a->len, PAGE, 0);

	cr_assert_eq(r, (void *)a->p, "mremap: %s", strerror(errno));
	raw ? raw_map_back(a->p + PAGE, a->len - PAGE)
	    : map_back(a->p + PAGE, a->len - PAGE);
}

static void ch_mremap_shrink(struct area *a) { mremap_shrink(a, 0); }
static void ch_raw_mremap_shrink(struct area *a) { mremap_shrink(a, 1); }

/* Grows in place and back: no page of the area is released. */
static void ch_mremap_grow(struct area *a)
{
	cr_assert_eq(mremap(a->p, a->len, 2 * a->len, 0), (void *)a->p,
		     "mremap grow in place: %s", strerror(errno));
	cr_assert_eq(munmap(a->p + a->len, a->len), 0);
}

static void ch_mmap_fixed(struct area *a)
{
	cr_assert_eq(mmap(a->p, a->len, PROT_READ | PROT_WRITE,
			  MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0),
		     (void *)a->p);
}

static void ch_raw_mmap_fixed(struct area *a)
{
	cr_assert_eq(syscall(SYS_mmap, a->p, a->len, PROT_READ | PROT_WRITE,
			     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0),
		     (long)a->p);
}

static void advise(struct area *a, int adv, int raw)
{
	int r = raw ? (int)syscall(SYS_madvise, a->p, a->len, adv)
		    : madvise(a->p, a->len, adv);

	cr_assert_eq(r, 0, "madvise(%d): %s", adv, strerror(errno));
}

static void ch_dontneed(struct area *a) { advise(a, MADV_DONTNEED, 0); }
static void ch_raw_dontneed(struct area *a) { advise(a, MADV_DONTNEED, 1); }
static void ch_free(struct area *a) { advise(a, MADV_FREE, 0); }
static void ch_raw_free(struct area *a) { advise(a, MADV_FREE, 1); }

/* MADV_REMOVE is for shared memory: refused on private memory (EINVAL),
 * which keeps its pages. Shared memory is never cached (the shm rows). */
static void ch_remove(struct area *a)
{
	cr_assert_eq(madvise(a->p, a->len, MADV_REMOVE), -1);
	cr_assert_eq(errno, EINVAL);
}

static void guard(struct area *a, int raw)
{
	int r = raw ? (int)syscall(SYS_madvise, a->p, a->len, MADV_GUARD_INSTALL)
		    : madvise(a->p, a->len, MADV_GUARD_INSTALL);

	if (r && errno == EINVAL)
		cr_skip_test("MADV_GUARD_INSTALL: %s (Linux 6.13+)", strerror(errno));
	cr_assert_eq(r, 0, "MADV_GUARD_INSTALL: %s", strerror(errno));
	advise(a, MADV_GUARD_REMOVE, raw);
}

static void ch_guard(struct area *a) { guard(a, 0); }
static void ch_raw_guard(struct area *a) { guard(a, 1); }

/* The break back below the area, and up again over it. */
static void ch_sbrk(struct area *a)
{
	intptr_t n = (intptr_t)(a->p - a->brk_base) + (intptr_t)a->len;

	cr_assert_neq(sbrk(-n), (void *)-1);
	cr_assert_eq(sbrk(n), a->brk_base);
}

/* The kernel's break down and up again behind glibc's back: glibc's
 * cached break is right again afterwards, and no libc call saw a thing. */
static void ch_raw_brk(struct area *a)
{
	char *top = a->p + a->len;

	cr_assert_eq((char *)syscall(SYS_brk, a->brk_base), a->brk_base);
	cr_assert_eq((char *)syscall(SYS_brk, top), top);
}

static void ch_free_chunk(struct area *a)
{
	free(a->chunk);
	map_back(a->p, a->len);
	a->chunk = NULL;
}

/* The segment stays attached over the area until the teardown: the get
 * after the change must not hit the old registration (a miss then finds
 * shared memory, registered and not cached). */
static void ch_realloc_chunk(struct area *a)
{
	void *q = realloc(a->chunk, 8 * MiB);

	cr_assert_not_null(q);
	cr_assert_neq(q, a->chunk, "grew in place: the blocker did not hold");
	a->chunk = q;
	map_back(a->p, a->len);
}

static void ch_malloc_trim(struct area *a)
{
	void *was = a->chunk;

	free(a->chunk);
	(void)malloc_trim(0);
	a->chunk = malloc(LEN + 4 * PAGE);
	cr_assert_not_null(a->chunk);
	if (a->chunk != was)
		cr_skip_test("glibc did not hand the trimmed chunk back");
}

/* The file's pages dropped (and the size back): the shared mapping now
 * shows new pages. */
static void ch_memfd_truncate(struct area *a)
{
	cr_assert_eq(ftruncate(a->fd, 0), 0);
	cr_assert_eq(ftruncate(a->fd, (off_t)a->len), 0);
	cr_assert_eq(a->p[0], 0);
}

static void shm_over(struct area *a, int raw)
{
	int id = shmget(IPC_PRIVATE, a->len, IPC_CREAT | 0600);
	void *s;

	cr_assert_geq(id, 0);
	s = raw ? (void *)syscall(SYS_shmat, id, a->p, SHM_REMAP)
		: shmat(id, a->p, SHM_REMAP);
	shmctl(id, IPC_RMID, NULL);
	cr_assert_eq(s, (void *)a->p, "shmat(SHM_REMAP): %s", strerror(errno));
	a->attached = 1;
}

static void ch_shmat_remap(struct area *a) { shm_over(a, 0); }
static void ch_raw_shmat_remap(struct area *a) { shm_over(a, 1); }

static void teardown_shm(struct area *a)
{
	if (a->attached)
		cr_assert_eq(shmdt(a->p), 0);
	else
		munmap(a->p, a->len);
}

static void ch_shmdt(struct area *a)
{
	cr_assert_eq(shmdt(a->p), 0);
	map_back(a->p, a->len);
}

static void ch_truncate(struct area *a)
{
	cr_assert_eq(ftruncate(a->fd, 0), 0);
	cr_assert_eq(ftruncate(a->fd, (off_t)a->len), 0);
	/* The private copies are gone too: the file's (zero) pages now. */
	cr_assert_eq(a->p[0], 0);
}

/* The simulated HCA holds pages as pre-5.9 kernels did, so a fork
 * purges the parent's caches (doc/monitor.md, fork()). */
static void ch_fork(struct area *a)
{
	pid_t pid = fork();
	int st;

	(void)a;
	cr_assert_geq(pid, 0);
	if (pid == 0)
		_exit(0);
	cr_assert_eq(waitpid(pid, &st, 0), pid);
}

static void ch_mprotect(struct area *a)
{
	cr_assert_eq(mprotect(a->p, a->len, PROT_READ), 0);
	cr_assert_eq(mprotect(a->p, a->len, PROT_READ | PROT_WRITE), 0);
}

/* process_madvise() takes only advice that keeps the pages (COLD,
 * PAGEOUT, WILLNEED, COLLAPSE); a pinned page is never paged out. */
static void ch_process_madvise(struct area *a)
{
	struct iovec iov = { a->p, a->len };
	int pfd = (int)syscall(SYS_pidfd_open, getpid(), 0);
	long r;

	if (pfd < 0)
		cr_skip_test("pidfd_open: %s", strerror(errno));
	r = syscall(SYS_process_madvise, pfd, &iov, 1, MADV_PAGEOUT, 0);
	close(pfd);
	if (r < 0 && errno == ENOSYS)
		cr_skip_test("process_madvise: %s (Linux 5.10+)", strerror(errno));
	cr_assert_eq(r, (long)a->len, "process_madvise: %s", strerror(errno));
}

/*
 * MADV_DONTNEED submitted through io_uring (IORING_OP_MADVISE): the
 * kernel's worker discards the pages, no libc call of this process runs.
 * The ring set up by hand (no liburing): one submission, one completion.
 */
static void ch_io_uring_dontneed(struct area *a)
{
	struct io_uring_params pr;
	int fd, ret;
	size_t sq_sz, cq_sz, sz;
	char *ring;
	struct io_uring_sqe *sqes;
	unsigned int *tail, *mask, *array, *ctail, *chead;
	struct io_uring_cqe *cqes;

	memset(&pr, 0, sizeof(pr));
	fd = (int)syscall(__NR_io_uring_setup, 1, &pr);
	if (fd < 0)
		cr_skip_test("io_uring_setup: %s", strerror(errno));
	sq_sz = pr.sq_off.array + pr.sq_entries * sizeof(unsigned int);
	cq_sz = pr.cq_off.cqes + pr.cq_entries * sizeof(struct io_uring_cqe);
	sz = sq_sz > cq_sz ? sq_sz : cq_sz;
	cr_assert(pr.features & IORING_FEAT_SINGLE_MMAP);
	ring = mmap(NULL, sz, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE,
		    fd, IORING_OFF_SQ_RING);
	cr_assert_neq(ring, MAP_FAILED);
	sqes = mmap(NULL, pr.sq_entries * sizeof(*sqes), PROT_READ | PROT_WRITE,
		    MAP_SHARED | MAP_POPULATE, fd, IORING_OFF_SQES);
	cr_assert_neq(sqes, MAP_FAILED);
	tail = (unsigned int *)(ring + pr.sq_off.tail);
	mask = (unsigned int *)(ring + pr.sq_off.ring_mask);
	array = (unsigned int *)(ring + pr.sq_off.array);
	memset(&sqes[0], 0, sizeof(sqes[0]));
	sqes[0].opcode = IORING_OP_MADVISE;
	sqes[0].addr = (uint64_t)(uintptr_t)a->p;
	sqes[0].len = (uint32_t)a->len;
	sqes[0].fadvise_advice = MADV_DONTNEED;
	array[*tail & *mask] = 0;
	__atomic_store_n(tail, *tail + 1, __ATOMIC_RELEASE);
	ret = (int)syscall(__NR_io_uring_enter, fd, 1, 1, IORING_ENTER_GETEVENTS,
			   NULL, 0);
	cr_assert_eq(ret, 1, "io_uring_enter: %s", strerror(errno));
	chead = (unsigned int *)(ring + pr.cq_off.head);
	ctail = (unsigned int *)(ring + pr.cq_off.tail);
	cqes = (struct io_uring_cqe *)(ring + pr.cq_off.cqes);
	cr_assert_neq(__atomic_load_n(ctail, __ATOMIC_ACQUIRE), *chead);
	ret = cqes[*chead & *(unsigned int *)(ring + pr.cq_off.ring_mask)].res;
	munmap(sqes, pr.sq_entries * sizeof(*sqes));
	munmap(ring, sz);
	close(fd);
	if (ret == -EINVAL || ret == -EOPNOTSUPP)
		cr_skip_test("IORING_OP_MADVISE: %s", strerror(-ret));
	cr_assert_eq(ret, 0, "IORING_OP_MADVISE: %s", strerror(-ret));
}

/* ------------------------------------------------------------ rows */

struct row {
	const char *what;
	void (*setup)(struct area *);
	void (*change)(struct area *);
	void (*teardown)(struct area *);
	enum expect e[C_COUNT]; /* auto, uffd, hooks, external, sanitizer */
};

#define F FOLLOW
#define X EXCLUDED
#define K KEEP
#define U UNCACHED
#define ANON setup_anon
#define GONE teardown_anon

enum rowid {
	R_MUNMAP, R_RAW_MUNMAP, R_MREMAP_MOVE, R_RAW_MREMAP_MOVE,
	R_MREMAP_SHRINK, R_RAW_MREMAP_SHRINK, R_MREMAP_GROW, R_MMAP_FIXED,
	R_RAW_MMAP_FIXED, R_DONTNEED, R_RAW_DONTNEED, R_FREE, R_RAW_FREE,
	R_REMOVE, R_GUARD, R_RAW_GUARD, R_SBRK, R_RAW_BRK, R_FREE_CHUNK,
	R_SHMAT_REMAP, R_RAW_SHMAT_REMAP, R_SHMDT, R_TRUNCATE, R_FORK,
	R_MPROTECT, R_PROCESS_MADVISE, R_IO_URING_DONTNEED, R_ARENA_TRIM,
	R_REALLOC_CHUNK, R_MALLOC_TRIM, R_MEMFD_SHARED, R_COUNT
};

/*                                  auto uffd hooks ext  san */
static const struct row rows[R_COUNT] = {
	[R_MUNMAP] = { "munmap", ANON, ch_munmap, GONE, { F, F, F, F, F } },
	[R_RAW_MUNMAP] = { "raw munmap", ANON, ch_raw_munmap, GONE, { X, F, X, F, F } },
	[R_MREMAP_MOVE] = { "mremap move", ANON, ch_mremap_move, GONE, { F, F, F, F, F } },
	[R_RAW_MREMAP_MOVE] = { "raw mremap move", ANON, ch_raw_mremap_move, GONE, { X, F, X, F, F } },
	[R_MREMAP_SHRINK] = { "mremap shrink", ANON, ch_mremap_shrink, GONE, { F, F, F, F, F } },
	[R_RAW_MREMAP_SHRINK] = { "raw mremap shrink", ANON, ch_raw_mremap_shrink, GONE, { X, F, X, F, F } },
	[R_MREMAP_GROW] = { "mremap grow in place", setup_growable, ch_mremap_grow, GONE, { K, K, K, K, K } },
	[R_MMAP_FIXED] = { "mmap MAP_FIXED over", ANON, ch_mmap_fixed, GONE, { F, F, F, F, F } },
	[R_RAW_MMAP_FIXED] = { "raw mmap MAP_FIXED over", ANON, ch_raw_mmap_fixed, GONE, { X, F, X, F, F } },
	[R_DONTNEED] = { "MADV_DONTNEED", ANON, ch_dontneed, GONE, { F, F, F, F, F } },
	[R_RAW_DONTNEED] = { "raw MADV_DONTNEED", ANON, ch_raw_dontneed, GONE, { X, F, X, F, F } },
	[R_FREE] = { "MADV_FREE", ANON, ch_free, GONE, { F, F, F, F, F } },
	[R_RAW_FREE] = { "raw MADV_FREE", ANON, ch_raw_free, GONE, { X, F, X, F, F } },
	[R_REMOVE] = { "MADV_REMOVE (private: EINVAL)", ANON, ch_remove, GONE, { K, K, K, K, K } },
	[R_GUARD] = { "MADV_GUARD_INSTALL", ANON, ch_guard, GONE, { F, X, F, F, X } },
	[R_RAW_GUARD] = { "raw MADV_GUARD_INSTALL", ANON, ch_raw_guard, GONE, { X, X, X, F, X } },
	[R_SBRK] = { "sbrk shrink", setup_heap, ch_sbrk, teardown_heap, { F, F, F, F, F } },
	[R_RAW_BRK] = { "raw brk shrink", setup_heap, ch_raw_brk, teardown_heap, { X, F, X, F, F } },
	[R_FREE_CHUNK] = { "free() of an mmap'd chunk", setup_chunk, ch_free_chunk, GONE, { F, F, F, F, F } },
	[R_SHMAT_REMAP] = { "shmat(SHM_REMAP) over", ANON, ch_shmat_remap, teardown_shm, { F, X, F, F, X } },
	[R_RAW_SHMAT_REMAP] = { "raw shmat(SHM_REMAP) over", ANON, ch_raw_shmat_remap, teardown_shm, { X, X, X, F, X } },
	[R_SHMDT] = { "SysV segment, shmdt", setup_shm, ch_shmdt, GONE, { U, U, U, F, U } },
	[R_TRUNCATE] = { "private file mapping, truncate", setup_file, ch_truncate, teardown_file, { U, U, U, F, U } },
	[R_FORK] = { "fork (parent's caches purged)", ANON, ch_fork, GONE, { F, F, F, F, F } },
	[R_MPROTECT] = { "mprotect", ANON, ch_mprotect, GONE, { K, K, K, K, K } },
	[R_PROCESS_MADVISE] = { "process_madvise(PAGEOUT)", ANON, ch_process_madvise, GONE, { K, K, K, K, K } },
	[R_IO_URING_DONTNEED] = { "io_uring MADV_DONTNEED", ANON, ch_io_uring_dontneed, GONE, { X, F, X, F, F } },
	[R_REALLOC_CHUNK] = { "realloc() moving an mmap'd chunk", setup_chunk_blocked, ch_realloc_chunk, teardown_chunk, { F, F, F, F, F } },
	[R_MALLOC_TRIM] = { "malloc_trim() of a free heap chunk", setup_heap_chunk, ch_malloc_trim, teardown_heap_chunk, { F, F, F, F, F } },
	[R_MEMFD_SHARED] = { "shared memfd mapping, truncated", setup_memfd_shared, ch_memfd_truncate, teardown_file, { U, U, U, F, U } },
	/* cell_arena(), not cell(): in a thread of its own */
	[R_ARENA_TRIM] = { "a thread arena's heap trimmed", NULL, NULL, NULL, { F, F, X, F, F } },
};

/* ------------------------------------------------------------ a cell */

/* A sanitizer's runtime in the process (a sanitizer build). */
static int real_sanitizer(void)
{
	return dlsym(RTLD_DEFAULT, "__asan_init") || dlsym(RTLD_DEFAULT, "__tsan_init") ||
	       dlsym(RTLD_DEFAULT, "__msan_init") || dlsym(RTLD_DEFAULT, "__hwasan_init");
}

static int write_page(struct fixture *f, mrmgr_region_t *r, char *p, char b)
{
	return mrmgr_sim_write(f->pd, mrmgr_region_rkey(r),
			       (uint64_t)(uintptr_t)p, &b, 1);
}

static void cell(enum rowid id, enum col c)
{
	const struct row *w = &rows[id];
	struct mrmgr_cache_attr ca = {
		.comp_mask = MRMGR_CACHE_ATTR_MAX_BYTES | MRMGR_CACHE_ATTR_MONITOR,
		.max_bytes = 1ull << 32,
	};
	enum expect e = w->e[c];
	struct area a = { 0 };
	struct fixture f;
	struct mrmgr_stats s1;
	mrmgr_region_t *r;
	uint32_t src;

	need_identity();
	switch (c) {
	case C_AUTO:
		ca.monitor = MRMGR_MONITOR_AUTO;
		if (real_sanitizer())
			e = w->e[C_SAN];
		break;
	case C_UFFD:
		ca.monitor = MRMGR_MONITOR_UFFD;
		break;
	case C_HOOKS:
		ca.monitor = MRMGR_MONITOR_HOOKS;
		break;
	case C_EXTERNAL:
		ca.monitor = MRMGR_MONITOR_EXTERNAL;
		break;
	case C_SAN:
		ca.monitor = MRMGR_MONITOR_AUTO;
#ifdef MRMGR_TEST_INTERNAL
		mrmgr__patch_test_flags |= MRMGR__PATCH_TEST_SANITIZER;
#endif
		break;
	default:
		break;
	}
	if ((id == R_FREE_CHUNK || id == R_REALLOC_CHUNK || id == R_MALLOC_TRIM) &&
	    real_sanitizer())
		cr_skip_test("a sanitizer's free() quarantines the chunk and "
			     "unmaps it later with raw system calls (the raw "
			     "munmap row)");
	w->setup(&a);
	memset(a.p, 'a', a.len);
	fx_open(&f, NULL, &ca);
	src = minfo(f.cache).sources;
	if ((c == C_SAN || (c == C_AUTO && real_sanitizer())) &&
	    !minfo(f.cache).uffd_error)
		cr_assert_eq(src, MRMGR_MONITOR_SRC_UFFD, "auto under a sanitizer "
			     "must take userfaultfd (sources %#x)", src);
	if ((c == C_AUTO && !real_sanitizer() && !(src & MRMGR_MONITOR_SRC_PATCH)) ||
	    ((c == C_UFFD || c == C_SAN || (c == C_AUTO && real_sanitizer())) &&
	     src != MRMGR_MONITOR_SRC_UFFD) ||
	    (c == C_HOOKS && !(src & MRMGR_MONITOR_SRC_HOOKS))) {
		fx_close(&f);
		w->teardown(&a);
		cr_skip_test("this column's source does not run here (sources %#x)",
			     src);
	}
	cr_assert_eq(mrmgr_get(f.cache, a.p, a.len, RW, &r), 0);
	cr_assert_eq(write_page(&f, r, a.p, 'b'), 0);
	mrmgr_put(r);
	if (e == UNCACHED) {
		cr_assert_eq(sstats(f.ctx).live_mrs, 0, "%s: cached", w->what);
		cr_assert_geq(cstats(f.cache).uncached, 1);
		fx_close(&f);
		w->teardown(&a);
		return;
	}
	cr_assert_eq(sstats(f.ctx).live_mrs, 1, "%s: not cached before the change",
		     w->what);

	w->change(&a);
	if (c == C_EXTERNAL && e == FOLLOW)
		cr_assert_eq(mrmgr_notify_unmap(a.p, a.len), 0);
	memset(a.p, 'n', a.len);

	s1 = cstats(f.cache);
	cr_assert_eq(mrmgr_get(f.cache, a.p, a.len, RW, &r), 0);
	switch (e) {
	case FOLLOW:
		cr_assert_eq(cstats(f.cache).hits, s1.hits,
			     "%s (%s): the old registration was handed out again",
			     w->what, expect_name[e]);
		for (size_t off = 0; off < a.len; off += PAGE)
			cr_assert_eq(write_page(&f, r, a.p + off, 'w'), 0,
				     "%s: stale write at +%zu", w->what, off);
		cr_assert_eq(sstats(f.ctx).stale_accesses, 0);
		break;
	case EXCLUDED:
		cr_assert_eq(cstats(f.cache).hits, s1.hits + 1,
			     "%s is documented as not followed in this mode, "
			     "and it was: update doc/monitor.md and this table",
			     w->what);
		break;
	case KEEP:
		for (size_t off = 0; off < a.len; off += PAGE)
			cr_assert_eq(write_page(&f, r, a.p + off, 'w'), 0,
				     "%s: stale write at +%zu", w->what, off);
		cr_assert_eq(sstats(f.ctx).stale_accesses, 0);
		break;
	default:
		break;
	}
	mrmgr_put(r);
	fx_close(&f);
	w->teardown(&a);
}

/*
 * A thread arena's heap trimmed: glibc's free() in a thread of its own
 * shrinks the arena's heap with an internal madvise(MADV_DONTNEED) (or an
 * mmap over it) when the freed chunk joins the top, and malloc() hands
 * the address back over new zero pages. The cache is used from this
 * (the main) thread, so its own allocations stay out of that arena.
 */
#define ARENA_N (96 * KiB)

struct arena_steps {
	pthread_barrier_t b;
	char *p, *q;
};

static void *arena_worker(void *arg)
{
	struct arena_steps *x = arg;

	x->p = malloc(ARENA_N);
	if (x->p)
		memset(x->p, 'a', ARENA_N);
	pthread_barrier_wait(&x->b); /* main caches p */
	pthread_barrier_wait(&x->b);
	free(x->p);                  /* the arena's top: trimmed */
	x->q = malloc(ARENA_N);
	if (x->q)
		memset(x->q, 'n', ARENA_N);
	pthread_barrier_wait(&x->b); /* main gets q */
	pthread_barrier_wait(&x->b);
	free(x->q);
	return NULL;
}

static void cell_arena(enum col c)
{
	struct mrmgr_cache_attr ca = {
		.comp_mask = MRMGR_CACHE_ATTR_MAX_BYTES | MRMGR_CACHE_ATTR_MONITOR,
		.max_bytes = 1ull << 32,
		.monitor = c == C_UFFD ? MRMGR_MONITOR_UFFD
			 : c == C_HOOKS ? MRMGR_MONITOR_HOOKS
			 : c == C_EXTERNAL ? MRMGR_MONITOR_EXTERNAL
					   : MRMGR_MONITOR_AUTO,
	};
	enum expect e = rows[R_ARENA_TRIM].e[c];
	static struct arena_steps x;
	struct fixture f;
	pthread_t th;
	mrmgr_region_t *r;
	uint64_t hits;
	char *last;
	uint32_t src;

	need_identity();
	if (real_sanitizer())
		cr_skip_test("a sanitizer's allocator has no glibc arenas");
#ifdef MRMGR_TEST_INTERNAL
	if (c == C_SAN)
		mrmgr__patch_test_flags |= MRMGR__PATCH_TEST_SANITIZER;
#endif
	cr_assert(mallopt(M_MMAP_THRESHOLD, (int)MiB));
	cr_assert(mallopt(M_TRIM_THRESHOLD, 64 * (int)KiB));
	/* heap_trim keeps M_TOP_PAD (128 KiB by default) above the top. */
	cr_assert(mallopt(M_TOP_PAD, 0));
	fx_open(&f, NULL, &ca);
	src = minfo(f.cache).sources;
	if ((c == C_AUTO && !(src & MRMGR_MONITOR_SRC_PATCH)) ||
	    ((c == C_UFFD || c == C_SAN) && src != MRMGR_MONITOR_SRC_UFFD) ||
	    (c == C_HOOKS && !(src & MRMGR_MONITOR_SRC_HOOKS))) {
		fx_close(&f);
		cr_skip_test("this column's source does not run here (sources %#x)",
			     src);
	}
	memset(&x, 0, sizeof(x));
	pthread_barrier_init(&x.b, NULL, 2);
	cr_assert_eq(pthread_create(&th, NULL, arena_worker, &x), 0);
	pthread_barrier_wait(&x.b);
	cr_assert_not_null(x.p);
	cr_assert_eq(mrmgr_get(f.cache, x.p, ARENA_N, RW, &r), 0);
	mrmgr_put(r);
	cr_assert_eq(sstats(f.ctx).live_mrs, 1, "not cached before the change");
	pthread_barrier_wait(&x.b);
	pthread_barrier_wait(&x.b);
	if (c == C_EXTERNAL)
		cr_assert_eq(mrmgr_notify_unmap(x.p, ARENA_N), 0);
	hits = cstats(f.cache).hits;
	last = x.q + ARENA_N - 1;
	if (x.q == x.p) {
		cr_assert_eq(mrmgr_get(f.cache, x.q, ARENA_N, RW, &r), 0);
		if (e == FOLLOW) {
			cr_expect_eq(cstats(f.cache).hits, hits,
				     "a thread arena's trim: the old registration "
				     "was handed out again");
			cr_expect_eq(write_page(&f, r, last, 'w'), 0,
				     "stale write after the arena's trim");
		} else {
			cr_expect_eq(cstats(f.cache).hits, hits + 1,
				     "a thread arena's trim is documented as not "
				     "followed in this mode, and it was: update "
				     "doc/monitor.md and this table");
			cr_expect_eq(write_page(&f, r, last, 'w'), ESTALE,
				     "the trim did not discard the pages");
		}
		mrmgr_put(r);
	}
	pthread_barrier_wait(&x.b);
	pthread_join(th, NULL);
	pthread_barrier_destroy(&x.b);
	fx_close(&f);
	if (x.q != x.p)
		cr_skip_test("glibc did not hand the trimmed address back");
}

#define ROW(id, name) \
	COLS(id, name)

#ifdef MRMGR_TEST_HOOKS_BUILD
#define COLS(id, name) \
	Test(hooks, name) { cell(id, C_HOOKS); }
#elif defined(MRMGR_TEST_INTERNAL)
#define COLS(id, name)                                  \
	Test(auto, name) { cell(id, C_AUTO); }          \
	Test(uffd, name) { cell(id, C_UFFD); }          \
	Test(external, name) { cell(id, C_EXTERNAL); }  \
	Test(sanitizer, name) { cell(id, C_SAN); }
#endif

ROW(R_MUNMAP, munmap)
ROW(R_RAW_MUNMAP, raw_munmap)
ROW(R_MREMAP_MOVE, mremap_move)
ROW(R_RAW_MREMAP_MOVE, raw_mremap_move)
ROW(R_MREMAP_SHRINK, mremap_shrink)
ROW(R_RAW_MREMAP_SHRINK, raw_mremap_shrink)
ROW(R_MREMAP_GROW, mremap_grow_in_place)
ROW(R_MMAP_FIXED, mmap_fixed_over)
ROW(R_RAW_MMAP_FIXED, raw_mmap_fixed_over)
ROW(R_DONTNEED, madv_dontneed)
ROW(R_RAW_DONTNEED, raw_madv_dontneed)
ROW(R_FREE, madv_free)
ROW(R_RAW_FREE, raw_madv_free)
ROW(R_REMOVE, madv_remove_private)
ROW(R_GUARD, madv_guard_install)
ROW(R_RAW_GUARD, raw_madv_guard_install)
ROW(R_SBRK, sbrk_shrink)
ROW(R_RAW_BRK, raw_brk_shrink)
ROW(R_FREE_CHUNK, free_mmapped_chunk)
ROW(R_SHMAT_REMAP, shmat_shm_remap)
ROW(R_RAW_SHMAT_REMAP, raw_shmat_shm_remap)
ROW(R_SHMDT, sysv_segment_shmdt)
ROW(R_TRUNCATE, private_file_truncate)
ROW(R_FORK, fork)
ROW(R_MPROTECT, mprotect)
ROW(R_PROCESS_MADVISE, process_madvise)
ROW(R_IO_URING_DONTNEED, io_uring_madv_dontneed)
ROW(R_REALLOC_CHUNK, realloc_mmapped_chunk)
ROW(R_MALLOC_TRIM, malloc_trim)
ROW(R_MEMFD_SHARED, shared_memfd_truncate)

#ifdef MRMGR_TEST_HOOKS_BUILD
Test(hooks, thread_arena_trim) { cell_arena(C_HOOKS); }
#elif defined(MRMGR_TEST_INTERNAL)
Test(auto, thread_arena_trim) { cell_arena(C_AUTO); }
Test(uffd, thread_arena_trim) { cell_arena(C_UFFD); }
Test(external, thread_arena_trim) { cell_arena(C_EXTERNAL); }
Test(sanitizer, thread_arena_trim) { cell_arena(C_SAN); }
#endif

/* ------------------------------------------------------------ the log */

#ifdef MRMGR_TEST_INTERNAL
static int said_uffd, said_none, said_warn;

static void count_lines(enum mrmgr_log_level l, const char *msg, void *arg)
{
	(void)arg;
	said_uffd += l == MRMGR_LOG_INFO &&
		     strstr(msg, "a sanitizer is in the process, so libc is not patched");
	said_warn += l == MRMGR_LOG_WARN;
	said_none += l == MRMGR_LOG_WARN && strstr(msg, "no memory-event source") &&
		     strstr(msg, "libc patching: a sanitizer is in the process");
}

/* auto under a sanitizer says once that userfaultfd replaced the patched
 * libc, however many caches start: at info level, as an automatic
 * fallback that keeps caching (no warning: the program's output stays
 * what it is without the sanitizer). */
Test(sanitizer, said_once_in_the_log)
{
	struct fixture f, g;

	mrmgr__patch_test_flags |= MRMGR__PATCH_TEST_SANITIZER;
	mrmgr_set_log_handler(count_lines, NULL, MRMGR_LOG_INFO);
	fx_open(&f, NULL, NULL);
	fx_open(&g, NULL, NULL);
	if (minfo(f.cache).uffd_error)
		cr_skip_test("userfaultfd unavailable here: %s",
			     strerror(minfo(f.cache).uffd_error));
	cr_assert_eq(minfo(f.cache).sources, MRMGR_MONITOR_SRC_UFFD);
	cr_assert_eq(minfo(g.cache).sources, MRMGR_MONITOR_SRC_UFFD);
	cr_assert_eq(said_uffd, 1, "said %d times", said_uffd);
	cr_assert_eq(said_warn, 0, "a warning");
	fx_close(&g);
	fx_close(&f);
	mrmgr_set_log_handler(NULL, NULL, MRMGR_LOG_WARN);
}

/* Where userfaultfd is refused too (a seccomp profile), auto under a
 * sanitizer falls back as before: nothing cached, and the warning names
 * the sanitizer as the reason libc is not patched. */
Test(sanitizer, userfaultfd_refused_caches_nothing_and_says_why)
{
	struct fixture f;
	char *p = map_rw(LEN, 1);
	mrmgr_region_t *r;

	mrmgr__patch_test_flags |= MRMGR__PATCH_TEST_SANITIZER;
	refuse_userfaultfd();
	mrmgr_set_log_handler(count_lines, NULL, MRMGR_LOG_WARN);
	fx_open(&f, NULL, NULL);
	cr_assert_eq(minfo(f.cache).sources, 0);
	cr_assert_neq(minfo(f.cache).uffd_error, 0);
	cr_assert_eq(mrmgr_get(f.cache, p, LEN, RW, &r), 0);
	mrmgr_put(r);
	cr_assert_eq(sstats(f.ctx).live_mrs, 0, "cached with no source");
	cr_assert_eq(said_uffd, 0);
	cr_assert_eq(said_none, 1, "the no-source warning, naming the sanitizer");
	fx_close(&f);
	mrmgr_set_log_handler(NULL, NULL, MRMGR_LOG_WARN);
	munmap(p, LEN);
}
#endif
