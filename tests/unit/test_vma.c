/*
 * The one reader of the process's mappings (lib/os/vma.c, the text through
 * lib/os/maps.c, async-signal-safe): the
 * PROCMAP_QUERY ioctl and the /proc/self/maps text give the same
 * mappings with the same fields; the fields are the right ones for
 * anonymous, read-only, shared and private file memory; and the
 * monitor's classification built on them.
 *
 * SPDX-License-Identifier: MIT
 */
#define _GNU_SOURCE /* memfd_create */
#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/shm.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <criterion/criterion.h>

#include "maps.h"
#include "procfs.h"
#include "vma.h"

#define PG ((size_t)4096)

/* Room for every mapping of a test process: a sanitizer's allocator and
 * shadow add hundreds. */
struct seen {
	struct mrmgr__vma v[16384];
	size_t n;
};

static int collect(const struct mrmgr__vma *v, void *arg)
{
	struct seen *s = arg;

	if (s->n == sizeof(s->v) / sizeof(s->v[0]))
		return 1;
	s->v[s->n++] = *v;
	return 0;
}

/* The test's own mappings, one of each kind, laid out in one reserve. */
struct layout {
	char *base;
	int fd;
	struct stat st;
};

static void layout_make(struct layout *l)
{
	/* A PROT_NONE guard page at each end, so the first and last
	 * mappings cannot merge with a neighbour of the same kind (a
	 * sanitizer's allocator maps read-write memory right beside). */
	l->base = mmap(NULL, 14 * PG, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS,
		       -1, 0);
	cr_assert_neq(l->base, MAP_FAILED);
	l->base += PG;
	l->fd = memfd_create("vma-test", MFD_CLOEXEC);
	cr_assert_geq(l->fd, 0);
	cr_assert_eq(ftruncate(l->fd, 8 * PG), 0);
	cr_assert_eq(fstat(l->fd, &l->st), 0);
	/* [0,2) anon rw, [2,3) anon ro, [3,4) PROT_NONE, [4,6) memfd shared
	 * at file offset 2 pages, [6,8) memfd private, [8,9) hole,
	 * [9,12) anon rw. */
	cr_assert_neq(mmap(l->base, 2 * PG, PROT_READ | PROT_WRITE,
			   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0), MAP_FAILED);
	cr_assert_neq(mmap(l->base + 2 * PG, PG, PROT_READ,
			   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0), MAP_FAILED);
	cr_assert_neq(mmap(l->base + 4 * PG, 2 * PG, PROT_READ | PROT_WRITE,
			   MAP_SHARED | MAP_FIXED, l->fd, (off_t)(2 * PG)), MAP_FAILED);
	cr_assert_neq(mmap(l->base + 6 * PG, 2 * PG, PROT_READ | PROT_WRITE,
			   MAP_PRIVATE | MAP_FIXED, l->fd, 0), MAP_FAILED);
	cr_assert_eq(munmap(l->base + 8 * PG, PG), 0);
	cr_assert_neq(mmap(l->base + 9 * PG, 3 * PG, PROT_READ | PROT_WRITE,
			   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0), MAP_FAILED);
}

static void layout_free(struct layout *l)
{
	munmap(l->base - PG, 14 * PG);
	close(l->fd);
}

static uint64_t at(const struct layout *l, size_t page)
{
	return (uintptr_t)l->base + page * PG;
}

Test(vma, the_ioctl_and_the_text_read_the_same_mappings)
{
	static struct seen q, t;
	struct layout l;

	layout_make(&l);
	q.n = t.n = 0;
	cr_assert_eq(mrmgr__vma_walk(at(&l, 0), at(&l, 12) - 1, 0, collect, &q), 0);
	cr_assert_eq(mrmgr__vma_walk(at(&l, 0), at(&l, 12) - 1, MRMGR__VMA_TEXT,
				     collect, &t), 0);
	cr_assert_eq(q.n, t.n);
	cr_assert_geq(q.n, 6);
	for (size_t i = 0; i < q.n; i++) {
		cr_assert_eq(q.v[i].start, t.v[i].start, "vma %zu", i);
		cr_assert_eq(q.v[i].end, t.v[i].end, "vma %zu", i);
		cr_assert_eq(q.v[i].flags, t.v[i].flags, "vma %zu", i);
		cr_assert_eq(q.v[i].inode, t.v[i].inode, "vma %zu", i);
		cr_assert_eq(q.v[i].offset, t.v[i].offset, "vma %zu", i);
		cr_assert_eq(q.v[i].dev_major, t.v[i].dev_major, "vma %zu", i);
		cr_assert_eq(q.v[i].dev_minor, t.v[i].dev_minor, "vma %zu", i);
	}
	/* The whole address space too: every mapping of the process. */
	q.n = t.n = 0;
	cr_assert_eq(mrmgr__vma_walk(0, UINT64_MAX, 0, collect, &q), 0);
	cr_assert_eq(mrmgr__vma_walk(0, UINT64_MAX, MRMGR__VMA_TEXT, collect, &t), 0);
	cr_assert_gt(q.n, 6);
	for (size_t i = 0; i < q.n && i < t.n; i++) {
		/* Mappings may come and go (Criterion's threads): compare
		 * what both saw at the same address. */
		if (q.v[i].start != t.v[i].start || q.v[i].end != t.v[i].end)
			continue;
		cr_assert_eq(q.v[i].flags, t.v[i].flags, "vma %#lx",
			     (unsigned long)q.v[i].start);
		cr_assert_eq(q.v[i].inode, t.v[i].inode);
	}
	layout_free(&l);
}

static void check_fields(unsigned int how)
{
	struct layout l;
	struct mrmgr__vma v;

	layout_make(&l);
	cr_assert_eq(mrmgr__vma_find(at(&l, 1), how, &v), 0);
	cr_assert_eq(v.start, at(&l, 0));
	cr_assert_eq(v.end, at(&l, 2));
	cr_assert_eq(v.flags, MRMGR__VMA_F_READ | MRMGR__VMA_F_WRITE | MRMGR__VMA_F_ANON);
	cr_assert_eq(v.inode, 0);

	cr_assert_eq(mrmgr__vma_find(at(&l, 2), how, &v), 0);
	cr_assert_eq(v.flags, MRMGR__VMA_F_READ | MRMGR__VMA_F_ANON);

	cr_assert_eq(mrmgr__vma_find(at(&l, 3), how, &v), 0);
	cr_assert_eq(v.flags, MRMGR__VMA_F_ANON);

	cr_assert_eq(mrmgr__vma_find(at(&l, 5) + 10, how, &v), 0);
	cr_assert_eq(v.start, at(&l, 4));
	cr_assert_eq(v.end, at(&l, 6));
	cr_assert_eq(v.flags, MRMGR__VMA_F_READ | MRMGR__VMA_F_WRITE | MRMGR__VMA_F_SHARED);
	cr_assert_eq(v.inode, l.st.st_ino);
	cr_assert_eq(v.dev_major, major(l.st.st_dev));
	cr_assert_eq(v.dev_minor, minor(l.st.st_dev));
	cr_assert_eq(v.offset, 2 * PG);

	cr_assert_eq(mrmgr__vma_find(at(&l, 6), how, &v), 0);
	cr_assert_eq(v.flags, MRMGR__VMA_F_READ | MRMGR__VMA_F_WRITE);
	cr_assert_eq(v.inode, l.st.st_ino);
	cr_assert_eq(v.offset, 0);

	cr_assert_eq(mrmgr__vma_find(at(&l, 8), how, &v), ENOENT);
	cr_assert_eq(mrmgr__vma_find(at(&l, 11) + PG - 1, how, &v), 0);
	cr_assert_eq(v.start, at(&l, 9));
	layout_free(&l);
}

Test(vma, the_fields_are_the_mappings_own)
{
	check_fields(0);
}

Test(vma, the_fields_are_the_mappings_own_from_the_text)
{
	check_fields(MRMGR__VMA_TEXT);
}

Test(vma, the_kind_of_a_range_is_its_worst_mapping)
{
	struct layout l;
	uint64_t vs = 0, vl = 0;

	layout_make(&l);
	cr_assert_eq(mrmgr__vma_classify(at(&l, 0), at(&l, 1) + 5, &vs, &vl),
		     MRMGR__VMA_ANON_PRIVATE);
	cr_assert_eq(vs, at(&l, 0));
	cr_assert_eq(vl, at(&l, 2) - 1);
	cr_assert_eq(mrmgr__vma_classify(at(&l, 0), at(&l, 4) - 1, &vs, &vl),
		     MRMGR__VMA_ANON_PRIVATE);
	cr_assert_eq(vl, at(&l, 4) - 1);
	cr_assert_eq(mrmgr__vma_classify(at(&l, 1), at(&l, 5), NULL, NULL),
		     MRMGR__VMA_SHARED);
	cr_assert_eq(mrmgr__vma_classify(at(&l, 6), at(&l, 7), NULL, NULL),
		     MRMGR__VMA_FILE_PRIVATE);
	cr_assert_eq(mrmgr__vma_classify(at(&l, 7), at(&l, 9), NULL, NULL),
		     MRMGR__VMA_UNMAPPED);
	cr_assert_eq(mrmgr__vma_classify(at(&l, 8), at(&l, 8) + 1, NULL, NULL),
		     MRMGR__VMA_UNMAPPED);
	cr_assert_eq(mrmgr__vma_classify(at(&l, 9), at(&l, 12) - 1, &vs, &vl),
		     MRMGR__VMA_ANON_PRIVATE);
	cr_assert_eq(vs, at(&l, 9));
	layout_free(&l);
	/* Unmapped as a whole. */
	cr_assert_eq(mrmgr__vma_classify(at(&l, 0), at(&l, 12) - 1, NULL, NULL),
		     MRMGR__VMA_UNMAPPED);
}

/* Anonymous huge pages have a hugetlbfs inode: still anonymous. */
Test(vma, anonymous_huge_pages_are_anonymous)
{
	size_t len = (size_t)2 << 20;
	struct mrmgr__vma v, t;
	char *p = mmap(NULL, len, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS | MAP_HUGETLB, -1, 0);

	if (p == MAP_FAILED)
		cr_skip_test("no huge pages here (%s)", strerror(errno));
	cr_assert_eq(mrmgr__vma_find((uintptr_t)p, 0, &v), 0);
	cr_assert_eq(mrmgr__vma_find((uintptr_t)p, MRMGR__VMA_TEXT, &t), 0);
	cr_assert(v.flags & MRMGR__VMA_F_ANON);
	cr_assert(t.flags & MRMGR__VMA_F_ANON);
	cr_assert_eq(mrmgr__vma_classify((uintptr_t)p, (uintptr_t)p + len - 1,
					 NULL, NULL), MRMGR__VMA_ANON_PRIVATE);
	munmap(p, len);
}

/*
 * qemu-user answers an ioctl it does not know with ENOSYS, not ENOTTY:
 * under it every PROCMAP_QUERY failed and every range looked unmapped
 * (an arm64 program got no cache hit). A filter that answers the ioctl
 * the same way, here: the text must be used instead.
 */
Test(vma, an_ioctl_answered_enosys_falls_back_to_the_text)
{
	struct sock_filter prog[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_ioctl, 0, 3),
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[1])),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (uint32_t)MRMGR__PROCMAP_QUERY, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	struct sock_fprog fp = {
		.len = sizeof(prog) / sizeof(prog[0]), .filter = prog,
	};
	char *p = mmap(NULL, 4 * PG, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	struct mrmgr__vma v;

	cr_assert_neq(p, MAP_FAILED);
	cr_assert_eq(prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), 0);
	cr_assert_eq(prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &fp), 0);
	cr_assert_eq(mrmgr__vma_find((uintptr_t)p + PG, 0, &v), 0);
	cr_assert_leq(v.start, (uintptr_t)p);
	cr_assert_geq(v.end, (uintptr_t)p + 4 * PG);
	cr_assert_eq(mrmgr__vma_classify((uintptr_t)p, (uintptr_t)p + 4 * PG - 1,
					 NULL, NULL), MRMGR__VMA_ANON_PRIVATE);
	cr_assert_eq(mrmgr__vma_uses_query(), 0);
	munmap(p, 4 * PG);
}

/* ------------------------------------------------------------ maps.h */

/* What a walk from a signal handler saw (only async-signal-safe work in
 * the handler: the reader itself, stores to these). */
static struct {
	struct seen s;
	struct layout *l;
	int ret, errno_after, shm, shm_none;
	uint64_t shm_at, shm_end;
} sig;

static void walk_in_handler(int signo)
{
	uint64_t end = 0;

	(void)signo;
	errno = 4242;
	sig.ret = mrmgr__maps_walk(at(sig.l, 0), at(sig.l, 12) - 1, collect,
				   &sig.s);
	sig.shm = mrmgr__maps_shm_extent(sig.shm_at, &sig.shm_end);
	sig.shm_none = mrmgr__maps_shm_extent(sig.shm_at + PG, &end);
	sig.errno_after = errno;
}

/*
 * The one reader, from a signal handler that interrupted the program
 * (as a hook may run): the same mappings the ioctl-or-text walk sees,
 * the segment attached at an address, and errno as it was.
 */
Test(maps, a_walk_from_a_signal_handler)
{
	struct layout l;
	struct seen *ref = calloc(1, sizeof(*ref));
	struct sigaction sa = { .sa_handler = walk_in_handler };
	int id = shmget(IPC_PRIVATE, 3 * PG, IPC_CREAT | 0600);
	char *shm;

	cr_assert_not_null(ref);
	cr_assert_geq(id, 0);
	shm = shmat(id, NULL, 0);
	cr_assert_neq(shm, (void *)-1);
	cr_assert_eq(shmctl(id, IPC_RMID, NULL), 0);
	layout_make(&l);
	cr_assert_eq(mrmgr__vma_walk(at(&l, 0), at(&l, 12) - 1, 0, collect, ref), 0);
	sig.l = &l;
	sig.shm_at = (uintptr_t)shm;
	cr_assert_eq(sigaction(SIGUSR1, &sa, NULL), 0);
	cr_assert_eq(raise(SIGUSR1), 0);
	cr_assert_eq(sig.ret, 0);
	cr_assert_eq(sig.errno_after, 4242, "errno %d", sig.errno_after);
	cr_assert_eq(sig.s.n, ref->n, "%zu mappings, %zu by the walk", sig.s.n,
		     ref->n);
	for (size_t i = 0; i < ref->n; i++) {
		cr_assert_eq(sig.s.v[i].start, ref->v[i].start);
		cr_assert_eq(sig.s.v[i].end, ref->v[i].end);
		cr_assert_eq(sig.s.v[i].flags, ref->v[i].flags, "mapping %zu", i);
		cr_assert_eq(sig.s.v[i].inode, ref->v[i].inode);
		cr_assert_eq(sig.s.v[i].offset, ref->v[i].offset);
	}
	cr_assert_eq(sig.shm, 1);
	cr_assert_eq(sig.shm_end, (uintptr_t)shm + 3 * PG);
	cr_assert_eq(sig.shm_none, 0, "no segment begins inside one");
	cr_assert_eq(shmdt(shm), 0);
	layout_free(&l);
	free(ref);
}

/* A segment mapped with different protections is several VMAs of one
 * inode: the extent is the run, up to where another mapping begins. */
Test(maps, a_segment_split_by_mprotect_is_one_extent)
{
	int id = shmget(IPC_PRIVATE, 4 * PG, IPC_CREAT | 0600);
	char *shm;
	uint64_t end = 0;

	cr_assert_geq(id, 0);
	shm = shmat(id, NULL, 0);
	cr_assert_neq(shm, (void *)-1);
	cr_assert_eq(shmctl(id, IPC_RMID, NULL), 0);
	cr_assert_eq(mprotect(shm + PG, PG, PROT_READ), 0);
	cr_assert_eq(mrmgr__maps_shm_extent((uintptr_t)shm, &end), 1);
	cr_assert_eq(end, (uintptr_t)shm + 4 * PG);
	cr_assert_eq(shmdt(shm), 0);
	cr_assert_eq(mrmgr__maps_shm_extent((uintptr_t)shm, &end), 0,
		     "nothing attached there any more");
}
