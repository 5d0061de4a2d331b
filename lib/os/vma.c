/*
 * What kind of memory a range is: whether a memory-event source can
 * vouch for it.
 *
 * Only anonymous private memory (heap, stacks, anonymous mmap, private
 * anonymous huge pages) changes solely through calls this process makes
 * on that range, which userfaultfd reports. Shared memory (shmem,
 * memfd, SysV segments, MAP_SHARED files) can lose its pages through
 * another mapping or a file operation (ftruncate, fallocate punch-hole,
 * MADV_REMOVE in a forked child) that raises no event on ours; and
 * userfaultfd accepts a write-protect registration on shmem anyway
 * (measured on 6.18), so the kind has to be checked, not inferred from
 * the registration succeeding.
 *
 * Linux 6.11 answers with one ioctl per VMA (PROCMAP_QUERY); older
 * kernels (Debian 12's 6.1) need /proc/self/maps parsed from the start,
 * which costs tens of microseconds in a large process: once per
 * registration that is cached, next to a registration that costs more.
 *
 * Called with the monitor lock held (the file descriptor is shared).
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "monitor.h"
#include "procfs.h"

/* PROCMAP_QUERY is declared in procfs.h. */

/* The kernel names anonymous MAP_HUGETLB memory after this file. */
#define ANON_HUGE "/anon_hugepage"

static int maps_fd = -1;
static pid_t maps_pid;
static int query_works = -1; /* -1 unknown, 0 no (ENOTTY), 1 yes */

static int get_maps_fd(void)
{
	pid_t pid = mrmgr__getpid();

	/* The file is bound to the process that opened it: a fork child
	 * reading its parent's fd would classify the parent's memory. */
	if (maps_fd >= 0 && maps_pid != pid) {
		close(maps_fd);
		maps_fd = -1;
	}
	if (maps_fd < 0) {
		maps_fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
		maps_pid = pid;
	}
	return maps_fd;
}

static int kind_of(int shared, uint64_t inode, const char *name)
{
	if (shared)
		return MRMGR__VMA_SHARED;
	if (!inode)
		return MRMGR__VMA_ANON_PRIVATE;
	if (name && !strncmp(name, ANON_HUGE, sizeof(ANON_HUGE) - 1))
		return MRMGR__VMA_ANON_PRIVATE;
	return MRMGR__VMA_FILE_PRIVATE;
}

/* One PROCMAP_QUERY at a; 0, or an errno (ENOENT: no VMA there). */
static int query_one(int fd, uint64_t a, struct mrmgr__procmap_query *q,
		     char *name, uint32_t name_size)
{
	memset(q, 0, sizeof(*q));
	q->size = sizeof(*q);
	q->query_addr = a;
	if (name) {
		q->vma_name_size = name_size;
		q->vma_name_addr = (uintptr_t)name;
		name[0] = '\0';
	}
	return ioctl(fd, MRMGR__PROCMAP_QUERY, q) ? errno : 0;
}

/*
 * Worst kind over [start, last] with PROCMAP_QUERY, and the extent of the
 * VMAs that cover it; -1 if unsupported.
 */
static int classify_query(int fd, uint64_t start, uint64_t last,
			  uint64_t *vstart, uint64_t *vlast)
{
	int worst = MRMGR__VMA_ANON_PRIVATE;
	uint64_t a = start;

	while (a <= last) {
		struct mrmgr__procmap_query q;
		char name[64];
		int shared, k, err = query_one(fd, a, &q, NULL, 0);

		if (err == ENOTTY || err == EINVAL)
			return -1;
		if (err)
			return MRMGR__VMA_UNMAPPED;
		if (a == start)
			*vstart = q.vma_start;
		*vlast = q.vma_end - 1;
		shared = !!(q.vma_flags & MRMGR__PROCMAP_VMA_SHARED);
		k = kind_of(shared, q.inode, NULL);
		/* Private with a file: anonymous huge pages have one too. */
		if (k == MRMGR__VMA_FILE_PRIVATE && q.vma_page_size > 4096 &&
		    query_one(fd, a, &q, name, sizeof(name)) == 0 &&
		    q.vma_name_size)
			k = kind_of(shared, q.inode, name);
		if (k > worst)
			worst = k;
		if (q.vma_end <= a)
			break;
		a = q.vma_end;
	}
	return worst;
}

static uint64_t parse_hex(const char **p)
{
	uint64_t v = 0;

	for (;; (*p)++) {
		char c = **p;

		if (c >= '0' && c <= '9')
			v = v * 16 + (uint64_t)(c - '0');
		else if (c >= 'a' && c <= 'f')
			v = v * 16 + (uint64_t)(c - 'a' + 10);
		else
			return v;
	}
}

static const char *skip_field(const char *p, const char *end)
{
	while (p < end && *p != ' ')
		p++;
	while (p < end && *p == ' ')
		p++;
	return p;
}

/*
 * One line "start-end perms offset dev inode [name]": folds its kind into
 * *worst when it overlaps [start, last] and advances *covered to its end
 * when it is contiguous with what was covered so far. Returns 1 once the
 * lines are past the range.
 */
static int maps_line(const char *p, const char *end, uint64_t start,
		     uint64_t last, uint64_t *covered, int *worst,
		     uint64_t *vstart, uint64_t *vlast)
{
	uint64_t vs = parse_hex(&p), ve, inode = 0;
	int shared, k;

	if (p >= end || *p != '-')
		return 0;
	p++;
	ve = parse_hex(&p);
	if (vs > last)
		return 1;
	if (ve <= start)
		return 0;
	p = skip_field(p, end);                 /* -> perms */
	shared = p + 3 < end && p[3] == 's';
	p = skip_field(p, end);                 /* -> offset */
	p = skip_field(p, end);                 /* -> dev */
	p = skip_field(p, end);                 /* -> inode */
	while (p < end && *p >= '0' && *p <= '9')
		inode = inode * 10 + (uint64_t)(*p++ - '0');
	p = skip_field(p, end);                 /* -> name, if any */
	{
		char name[sizeof(ANON_HUGE)];
		size_t n = (size_t)(end - p) < sizeof(name) - 1
				   ? (size_t)(end - p) : sizeof(name) - 1;

		memcpy(name, p, n);
		name[n] = '\0';
		k = kind_of(shared, inode, name);
	}
	if (k > *worst)
		*worst = k;
	if (vs <= start && ve > start)
		*vstart = vs;
	if (vs <= *covered && ve > *covered)
		*covered = ve;
	*vlast = ve - 1;
	return ve > last;
}

static int classify_maps(int fd, uint64_t start, uint64_t last,
			 uint64_t *vstart, uint64_t *vlast)
{
	char buf[4096];
	size_t have = 0;
	off_t off = 0;
	uint64_t covered = start;
	int worst = MRMGR__VMA_ANON_PRIVATE, done = 0, skipping = 0;

	while (!done) {
		ssize_t n = pread(fd, buf + have, sizeof(buf) - have, off);
		char *line = buf, *nl;

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		off += n;
		have += (size_t)n;
		while (!done && (nl = memchr(line, '\n', have - (size_t)(line - buf)))) {
			if (!skipping)
				done = maps_line(line, nl, start, last, &covered,
						 &worst, vstart, vlast);
			skipping = 0;
			line = nl + 1;
		}
		have -= (size_t)(line - buf);
		if (have == sizeof(buf)) {
			/* A line longer than the buffer: its head has what we
			 * need (a long name is a file's); drop the rest. */
			if (!skipping)
				done = maps_line(buf, buf + have, start, last,
						 &covered, &worst, vstart, vlast);
			skipping = 1;
			have = 0;
		} else {
			memmove(buf, line, have);
		}
	}
	if (covered <= last && worst < MRMGR__VMA_UNMAPPED)
		worst = MRMGR__VMA_UNMAPPED; /* a hole somewhere */
	return worst;
}

int mrmgr__vma_classify(uint64_t start, uint64_t last, uint64_t *vstart,
			uint64_t *vlast)
{
	uint64_t vs = start, vl = last;
	int fd = get_maps_fd(), k = -1;

	if (fd < 0)
		return MRMGR__VMA_UNMAPPED;
	if (query_works != 0) {
		k = classify_query(fd, start, last, &vs, &vl);
		query_works = k >= 0;
	}
	if (k < 0)
		k = classify_maps(fd, start, last, &vs, &vl);
	if (vstart)
		*vstart = vs;
	if (vlast)
		*vlast = vl;
	return k;
}

int mrmgr__vma_uses_query(void)
{
	return query_works == 1;
}
