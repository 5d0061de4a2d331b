/*
 * The changes test_monitor_modes.c makes to cached memory, one function
 * per kind, and the areas they start from (included once, by that file).
 *
 * SPDX-License-Identifier: MIT
 */
#ifndef MRMGR_TEST_MONITOR_CHANGES_H
#define MRMGR_TEST_MONITOR_CHANGES_H

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

/* ------------------------------------------------------------ raw runtimes */

/*
 * Code that changes memory with system calls of its own, recognised by
 * its symbols (tests/unit/raw_runtime.c): a Go runtime (cgo's
 * crosscall2) whose scavenger releases pages with a raw madvise, and
 * liburing (io_uring_queue_init). Loaded before the cache starts, as a
 * program's own libraries are.
 */
#ifndef TEST_LIBDIR
#define TEST_LIBDIR "."
#endif
static void load_raw(const char *lib)
{
	cr_assert_not_null(dlopen(lib, RTLD_NOW | RTLD_GLOBAL), "%s", dlerror());
}

static void setup_go(struct area *a)
{
	load_raw(TEST_LIBDIR "/libraw_go.so");
	setup_anon(a);
}

static void setup_uring(struct area *a)
{
	load_raw(TEST_LIBDIR "/libraw_uring.so");
	setup_anon(a);
}

/* The Go scavenger's release: madvise(MADV_DONTNEED) as a raw system
 * call from the runtime's own code. */
static void ch_go_scavenge(struct area *a)
{
	long (*release)(void *, size_t, int) =
		(long (*)(void *, size_t, int))dlsym(RTLD_DEFAULT, "raw_release");

	cr_assert_not_null(release);
	cr_assert_eq(release(a->p, a->len, MADV_DONTNEED), 0);
}

#endif
