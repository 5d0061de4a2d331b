/*
 * Is a range mapped, readable, and writable when asked? ODP needs to know
 * before it registers: an ODP registration of read-only or unmapped memory
 * succeeds, and the device's first fault on it fails later, with the QP in
 * error. Nothing in the usual system calls answers "what are the
 * protections here" without side effects, so the answer comes from
 * /proc/self/maps:
 *   - Linux 6.11+: the PROCMAP_QUERY ioctl on a /proc/self/maps fd returns
 *     the VMA covering an address directly, a microsecond or so per VMA;
 *   - older kernels: the text is read and parsed up to the range, tens of
 *     microseconds (the kernel formats every line before it).
 * The ioctl is tried first; ENOTTY (or EINVAL, on an old kernel whose
 * maps file takes no ioctl) is remembered and the text is used from then
 * on. The cache calls this on a miss only, never on a hit.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "odp.h"
#include "procfs.h"

/* PROCMAP_QUERY is declared in procfs.h. */

/* One /proc/self/maps descriptor per process for the ioctl. */
static struct mrmgr__proc_file maps = MRMGR__PROC_FILE("/proc/self/maps");
static int query_unavailable;

/*
 * The ioctl walk. 0 or EFAULT (as mrmgr__odp_check_mapping()), ENOTTY
 * when the kernel lacks the ioctl, or another errno.
 */
static int check_by_query(uint64_t start, uint64_t last, int write,
			  uint64_t *bad, const char **why)
{
	int fd = mrmgr__proc_file_fd(&maps);
	uint64_t next = start;

	if (fd < 0)
		return errno ? errno : EIO;
	for (;;) {
		struct mrmgr__procmap_query q;

		memset(&q, 0, sizeof(q));
		q.size = sizeof(q);
		q.query_addr = next;
		if (ioctl(fd, MRMGR__PROCMAP_QUERY, &q) != 0) {
			if (errno == ENOENT) {
				*bad = next;
				*why = "not mapped";
				return EFAULT;
			}
			return errno == EINVAL ? ENOTTY : errno;
		}
		*bad = next;
		if (!(q.vma_flags & MRMGR__PROCMAP_READABLE)) {
			*why = "not readable";
			return EFAULT;
		}
		if (write && !(q.vma_flags & MRMGR__PROCMAP_WRITABLE)) {
			*why = "read-only";
			return EFAULT;
		}
		if (q.vma_end - 1 >= last)
			return 0;
		next = q.vma_end;
	}
}

/*
 * One line of /proc/self/maps against the part [*next, last] still to
 * cover. Lines come sorted by address and never overlap. Returns 0 to go
 * on, 1 when the range is covered, -1 on a hole or a wrong protection.
 */
static int maps_line(const char *p, uint64_t *next, uint64_t last, int write,
		     uint64_t *bad, const char **why)
{
	char *e;
	uint64_t lo = strtoull(p, &e, 16), hi;
	const char *perms;

	if (*e != '-')
		return 0;
	hi = strtoull(e + 1, &e, 16);
	if (*e != ' ')
		return 0;
	perms = e + 1;
	if (hi <= *next)
		return 0;
	*bad = *next;
	if (lo > *next) {
		*why = "not mapped";
		return -1;
	}
	if (perms[0] != 'r') {
		*why = "not readable";
		return -1;
	}
	if (write && perms[1] != 'w') {
		*why = "read-only";
		return -1;
	}
	if (hi - 1 >= last)
		return 1;
	*next = hi;
	return 0;
}

/* The text walk: read only up to the range, allocate nothing. */
static int check_by_text(uint64_t start, uint64_t last, int write,
			 uint64_t *bad, const char **why)
{
	char buf[4096];
	size_t have = 0;
	int skipping = 0, res = 0, ret;
	uint64_t next = start;
	int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return errno ? errno : EIO;
	while (!res) {
		ssize_t n = read(fd, buf + have, sizeof(buf) - 1 - have);
		char *p = buf, *end, *nl;

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			ret = n < 0 ? (errno ? errno : EIO) : 0;
			close(fd);
			if (ret)
				return ret;
			/* Past the last mapping: the rest is a hole. */
			*bad = next;
			*why = "not mapped";
			return EFAULT;
		}
		have += (size_t)n;
		end = buf + have;
		while (!res && (nl = memchr(p, '\n', (size_t)(end - p)))) {
			*nl = '\0';
			if (!skipping)
				res = maps_line(p, &next, last, write, bad, why);
			skipping = 0;
			p = nl + 1;
		}
		have = (size_t)(end - p);
		memmove(buf, p, have);
		if (!res && have == sizeof(buf) - 1) {
			/* A line longer than the buffer (a long path): its
			 * head holds the addresses; drop the rest. */
			buf[have] = '\0';
			res = maps_line(buf, &next, last, write, bad, why);
			skipping = 1;
			have = 0;
		}
	}
	close(fd);
	return res > 0 ? 0 : EFAULT;
}

int mrmgr__odp_check_mapping_text(uint64_t start, uint64_t last, int write,
				  uint64_t *bad, const char **why)
{
	return check_by_text(start, last, write, bad, why);
}

int mrmgr__odp_check_mapping(uint64_t start, uint64_t last, int write,
			     uint64_t *bad, const char **why)
{
	if (!__atomic_load_n(&query_unavailable, __ATOMIC_RELAXED)) {
		int ret = check_by_query(start, last, write, bad, why);

		if (ret != ENOTTY)
			return ret;
		__atomic_store_n(&query_unavailable, 1, __ATOMIC_RELAXED);
	}
	return check_by_text(start, last, write, bad, why);
}

/* ------------------------------------------------ readable pieces */

#define PROCMAP_QUERY_VMA_READABLE 0x01
#define PROCMAP_QUERY_VMA_WRITABLE 0x02
#define PROCMAP_QUERY_COVERING_OR_NEXT_VMA 0x10

static int next_by_query(uint64_t from, uint64_t last, int write, uint64_t *s,
			 uint64_t *e)
{
	int fd = mrmgr__proc_file_fd(&maps);
	struct mrmgr__procmap_query q;

	if (fd < 0)
		return errno ? errno : EIO;
	memset(&q, 0, sizeof(q));
	q.size = sizeof(q);
	q.query_flags = PROCMAP_QUERY_VMA_READABLE |
			PROCMAP_QUERY_COVERING_OR_NEXT_VMA |
			(write ? PROCMAP_QUERY_VMA_WRITABLE : 0);
	q.query_addr = from;
	if (ioctl(fd, MRMGR__PROCMAP_QUERY, &q) != 0)
		return errno == ENOENT ? ENOENT
		       : errno == EINVAL ? ENOTTY : errno;
	if (q.vma_start > last)
		return ENOENT;
	*s = q.vma_start > from ? q.vma_start : from;
	*e = q.vma_end - 1 < last ? q.vma_end - 1 : last;
	return 0;
}

/* One line: 1 when it holds the answer, -1 when past last, else 0. */
static int next_line(const char *p, uint64_t from, uint64_t last, int write,
		     uint64_t *s, uint64_t *e)
{
	char *end;
	uint64_t lo = strtoull(p, &end, 16), hi;

	if (*end != '-')
		return 0;
	hi = strtoull(end + 1, &end, 16);
	if (*end != ' ' || hi <= from)
		return 0;
	if (lo > last)
		return -1;
	if (end[1] != 'r' || (write && end[2] != 'w'))
		return 0;
	*s = lo > from ? lo : from;
	*e = hi - 1 < last ? hi - 1 : last;
	return 1;
}

static int next_by_text(uint64_t from, uint64_t last, int write, uint64_t *s,
			uint64_t *e)
{
	char buf[4096];
	size_t have = 0;
	int skipping = 0, res = 0;
	int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return errno ? errno : EIO;
	while (!res) {
		ssize_t n = read(fd, buf + have, sizeof(buf) - 1 - have);
		char *p = buf, *end, *nl;

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			int ret = n < 0 ? (errno ? errno : EIO) : ENOENT;

			close(fd);
			return ret;
		}
		have += (size_t)n;
		end = buf + have;
		while (!res && (nl = memchr(p, '\n', (size_t)(end - p)))) {
			*nl = '\0';
			if (!skipping)
				res = next_line(p, from, last, write, s, e);
			skipping = 0;
			p = nl + 1;
		}
		have = (size_t)(end - p);
		memmove(buf, p, have);
		if (!res && have == sizeof(buf) - 1) {
			buf[have] = '\0';
			res = next_line(buf, from, last, write, s, e);
			skipping = 1;
			have = 0;
		}
	}
	close(fd);
	return res > 0 ? 0 : ENOENT;
}

int mrmgr__odp_next_readable_text(uint64_t from, uint64_t last, int write,
				  uint64_t *s, uint64_t *e)
{
	return next_by_text(from, last, write, s, e);
}

int mrmgr__odp_next_readable(uint64_t from, uint64_t last, int write,
			     uint64_t *s, uint64_t *e)
{
	if (!__atomic_load_n(&query_unavailable, __ATOMIC_RELAXED)) {
		int ret = next_by_query(from, last, write, s, e);

		if (ret != ENOTTY)
			return ret;
		__atomic_store_n(&query_unavailable, 1, __ATOMIC_RELAXED);
	}
	return next_by_text(from, last, write, s, e);
}
