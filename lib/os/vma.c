/*
 * The process's mappings (vma.h): one reader of /proc/self/maps for the
 * whole library.
 *
 * Linux 6.11 answers with one ioctl per mapping (PROCMAP_QUERY, about a
 * microsecond each); older kernels (Debian 12's 6.1) need the text
 * parsed from the start, tens of microseconds in a large process, since
 * the kernel formats every line before the ones wanted. The ioctl is
 * tried first; ENOTTY (or EINVAL, from a kernel whose maps file takes no
 * ioctl, or ENOSYS, from qemu-user) is remembered and the text is used
 * from then on.
 *
 * The ioctl goes to one descriptor per process (procfs.h: reopened after
 * fork, since the file is bound to the process that opened it); it keeps
 * no position, so threads share it. The text is read from a descriptor
 * of its own each time: a shared one would make threads reading at once
 * restart each other's walk from the first line.
 *
 * Callers ask on slow paths only (a registration that is about to be
 * cached, an ODP registration, growth headroom, an alias, a shmdt()):
 * never on a cache hit.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "maps.h"
#include "procfs.h"
#include "vma.h"

#define PROCMAP_COVERING_OR_NEXT 0x10

static struct mrmgr__proc_file maps = MRMGR__PROC_FILE("/proc/self/maps");
static int query_works = -1; /* -1 unknown, 0 no (ENOTTY), 1 yes */

/* ------------------------------------------------------------ ioctl */

static int query_at(int fd, uint64_t a, uint64_t flags,
		    struct mrmgr__procmap_query *q, char *name,
		    uint32_t name_size)
{
	memset(q, 0, sizeof(*q));
	q->size = sizeof(*q);
	q->query_flags = flags;
	q->query_addr = a;
	if (name) {
		q->vma_name_size = name_size;
		q->vma_name_addr = (uintptr_t)name;
		name[0] = '\0';
	}
	return ioctl(fd, MRMGR__PROCMAP_QUERY, q) ? errno : 0;
}

/* Anonymous huge pages have a hugetlbfs inode; only their name tells.
 * A name costs the kernel a path lookup: asked for huge pages only. */
static int query_anon(int fd, const struct mrmgr__procmap_query *q)
{
	struct mrmgr__procmap_query nq;
	char name[64];

	if (!q->inode)
		return 1;
	if (q->vma_page_size <= 4096 ||
	    query_at(fd, q->vma_start, 0, &nq, name, sizeof(name)) ||
	    !nq.vma_name_size)
		return 0;
	return !strncmp(name, MRMGR__VMA_ANON_HUGE, sizeof(MRMGR__VMA_ANON_HUGE) - 1);
}

/* -ENOTTY when the kernel lacks the ioctl. */
static int walk_query(uint64_t start, uint64_t last, mrmgr__vma_fn fn,
		      void *arg)
{
	int fd = mrmgr__proc_file_fd(&maps);
	uint64_t a = start;

	if (fd < 0)
		return -(errno ? errno : EIO);
	for (;;) {
		struct mrmgr__procmap_query q;
		struct mrmgr__vma v;
		int err = query_at(fd, a, PROCMAP_COVERING_OR_NEXT, &q, NULL, 0);
		int ret;

		if (err == ENOENT)
			return 0;
		/* ENOSYS: qemu-user's answer to an ioctl it does not know. */
		if (err == ENOTTY || err == EINVAL || err == ENOSYS)
			return -ENOTTY;
		if (err)
			return -err;
		if (q.vma_start > last || q.vma_end <= a)
			return 0;
		v.start = q.vma_start;
		v.end = q.vma_end;
		v.offset = q.vma_offset;
		v.inode = q.inode;
		v.dev_major = q.dev_major;
		v.dev_minor = q.dev_minor;
		v.flags = (q.vma_flags & MRMGR__PROCMAP_READABLE ? MRMGR__VMA_F_READ : 0) |
			  (q.vma_flags & MRMGR__PROCMAP_WRITABLE ? MRMGR__VMA_F_WRITE : 0) |
			  (q.vma_flags & MRMGR__PROCMAP_EXECUTABLE ? MRMGR__VMA_F_EXEC : 0) |
			  (q.vma_flags & MRMGR__PROCMAP_VMA_SHARED ? MRMGR__VMA_F_SHARED : 0) |
			  (query_anon(fd, &q) ? MRMGR__VMA_F_ANON : 0);
		ret = fn(&v, arg);
		if (ret)
			return ret;
		if (q.vma_end - 1 >= last)
			return 0;
		a = q.vma_end;
	}
}

/* ------------------------------------------------------------ walks */

int mrmgr__vma_walk(uint64_t start, uint64_t last, unsigned int how,
		    mrmgr__vma_fn fn, void *arg)
{
	if (!(how & MRMGR__VMA_TEXT) &&
	    __atomic_load_n(&query_works, __ATOMIC_RELAXED) != 0) {
		int ret = walk_query(start, last, fn, arg);

		if (ret != -ENOTTY) {
			__atomic_store_n(&query_works, 1, __ATOMIC_RELAXED);
			return ret;
		}
		__atomic_store_n(&query_works, 0, __ATOMIC_RELAXED);
	}
	return mrmgr__maps_walk(start, last, fn, arg);
}

int mrmgr__vma_uses_query(void)
{
	return __atomic_load_n(&query_works, __ATOMIC_RELAXED) == 1;
}

struct find {
	uint64_t addr;
	struct mrmgr__vma *v;
	int found;
};

static int find_one(const struct mrmgr__vma *v, void *arg)
{
	struct find *f = arg;

	if (v->start <= f->addr) {
		*f->v = *v;
		f->found = 1;
	}
	return 1;
}

int mrmgr__vma_find(uint64_t addr, unsigned int how, struct mrmgr__vma *v)
{
	struct find f = { addr, v, 0 };
	int ret = mrmgr__vma_walk(addr, addr, how, find_one, &f);

	if (ret < 0)
		return -ret;
	return f.found ? 0 : ENOENT;
}

/* ------------------------------------------------------------ protections */

struct prot {
	uint64_t next, last;
	int write, err;
	const char *why;
};

static int prot_one(const struct mrmgr__vma *v, void *arg)
{
	struct prot *p = arg;

	if (v->start > p->next)
		p->why = "not mapped";
	else if (!(v->flags & MRMGR__VMA_F_READ))
		p->why = "not readable";
	else if (p->write && !(v->flags & MRMGR__VMA_F_WRITE))
		p->why = "read-only";
	else if (v->end - 1 >= p->last)
		return 1; /* covered */
	else {
		p->next = v->end;
		return 0;
	}
	p->err = EFAULT;
	return 1;
}

int mrmgr__vma_check_prot(uint64_t start, uint64_t last, int write,
			  unsigned int how, uint64_t *bad, const char **why)
{
	struct prot p = { start, last, write, 0, "not mapped" };
	int ret = mrmgr__vma_walk(start, last, how, prot_one, &p);

	if (ret < 0)
		return -ret;
	if (!ret) /* the mappings ended before last */
		p.err = EFAULT;
	if (p.err) {
		*bad = p.next;
		*why = p.why;
	}
	return p.err;
}

struct readable {
	uint64_t from, last;
	int write, found;
	uint64_t *s, *e;
};

static int readable_one(const struct mrmgr__vma *v, void *arg)
{
	struct readable *r = arg;

	if (!(v->flags & MRMGR__VMA_F_READ) ||
	    (r->write && !(v->flags & MRMGR__VMA_F_WRITE)))
		return 0;
	*r->s = v->start > r->from ? v->start : r->from;
	*r->e = v->end - 1 < r->last ? v->end - 1 : r->last;
	r->found = 1;
	return 1;
}

int mrmgr__vma_next_readable(uint64_t from, uint64_t last, int write,
			     unsigned int how, uint64_t *s, uint64_t *e)
{
	struct readable r = { from, last, write, 0, s, e };
	int ret = mrmgr__vma_walk(from, last, how, readable_one, &r);

	if (ret < 0)
		return -ret;
	return r.found ? 0 : ENOENT;
}

/* ------------------------------------------------------------ kinds */

/*
 * Only anonymous private memory (heap, stacks, anonymous mmap, private
 * anonymous huge pages) changes solely through calls this process makes
 * on that range, which a memory-event source reports. Shared memory
 * (shmem, memfd, SysV segments, MAP_SHARED files) can lose its pages
 * through another mapping or a file operation (ftruncate, fallocate
 * punch-hole, MADV_REMOVE in a forked child) that raises no event on
 * ours; and userfaultfd accepts a write-protect registration on shmem
 * anyway (measured on 6.18), so the kind has to be checked, not inferred
 * from the registration succeeding.
 */
static int kind_of(uint32_t flags)
{
	if (flags & MRMGR__VMA_F_SHARED)
		return MRMGR__VMA_SHARED;
	if (flags & MRMGR__VMA_F_ANON)
		return MRMGR__VMA_ANON_PRIVATE;
	return MRMGR__VMA_FILE_PRIVATE;
}

struct classify {
	uint64_t last, covered, vs, vl;
	int worst, first;
};

static int classify_one(const struct mrmgr__vma *v, void *arg)
{
	struct classify *c = arg;
	int k = kind_of(v->flags);

	if (v->start > c->covered) {
		c->worst = MRMGR__VMA_UNMAPPED; /* a hole */
		return 1;
	}
	if (c->first) {
		c->vs = v->start;
		c->first = 0;
	}
	c->vl = v->end - 1;
	c->covered = v->end;
	if (k > c->worst)
		c->worst = k;
	return 0;
}

int mrmgr__vma_classify(uint64_t start, uint64_t last, uint64_t *vstart,
			uint64_t *vlast)
{
	struct classify c = { last, start, start, last,
			      MRMGR__VMA_ANON_PRIVATE, 1 };
	int ret = mrmgr__vma_walk(start, last, 0, classify_one, &c);

	if (ret < 0 || c.covered <= last)
		c.worst = MRMGR__VMA_UNMAPPED;
	if (vstart)
		*vstart = c.vs;
	if (vlast)
		*vlast = c.vl;
	return c.worst;
}
