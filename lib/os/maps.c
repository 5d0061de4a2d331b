/*
 * The text of /proc/self/maps (maps.h), read the one way every part of
 * the library reads it: from a descriptor of its own each time (a shared
 * one would make threads reading at once restart each other's walk from
 * the first line), a line at a time through a stack buffer, with only
 * async-signal-safe calls (open, read, close, and the mem* functions).
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "maps.h"


static uint64_t parse_num(const char **p, const char *end, unsigned int base)
{
	uint64_t v = 0;

	for (; *p < end; (*p)++) {
		char c = **p;
		unsigned int d;

		if (c >= '0' && c <= '9')
			d = (unsigned int)(c - '0');
		else if (base == 16 && c >= 'a' && c <= 'f')
			d = (unsigned int)(c - 'a' + 10);
		else
			break;
		v = v * base + d;
	}
	return v;
}

static const char *skip_field(const char *p, const char *end)
{
	while (p < end && *p != ' ')
		p++;
	while (p < end && *p == ' ')
		p++;
	return p;
}

struct text_walk {
	uint64_t start, last;
	mrmgr__vma_fn fn;
	void *arg;
	int ret;
};

/*
 * One line "start-end perms offset major:minor inode [name]", up to end
 * (a line longer than the buffer comes cut: its head has every field
 * wanted). 1 when the walk is over (fn said so, or the lines are past
 * last).
 */
static int text_line(const char *p, const char *end, struct text_walk *w)
{
	struct mrmgr__vma v;
	const char *perms;

	memset(&v, 0, sizeof(v));
	v.start = parse_num(&p, end, 16);
	if (p >= end || *p != '-')
		return 0;
	p++;
	v.end = parse_num(&p, end, 16);
	if (v.start > w->last)
		return 1;
	if (v.end <= w->start)
		return 0;
	perms = p = skip_field(p, end);
	if (end - perms >= 4)
		v.flags = (perms[0] == 'r' ? MRMGR__VMA_F_READ : 0) |
			  (perms[1] == 'w' ? MRMGR__VMA_F_WRITE : 0) |
			  (perms[2] == 'x' ? MRMGR__VMA_F_EXEC : 0) |
			  (perms[3] == 's' ? MRMGR__VMA_F_SHARED : 0);
	p = skip_field(p, end);
	v.offset = parse_num(&p, end, 16);
	p = skip_field(p, end);
	v.dev_major = (uint32_t)parse_num(&p, end, 16);
	if (p < end && *p == ':')
		p++;
	v.dev_minor = (uint32_t)parse_num(&p, end, 16);
	p = skip_field(p, end);
	v.inode = parse_num(&p, end, 10);
	p = skip_field(p, end);
	if (!v.inode || ((size_t)(end - p) >= sizeof(MRMGR__VMA_ANON_HUGE) - 1 &&
			 !memcmp(p, MRMGR__VMA_ANON_HUGE, sizeof(MRMGR__VMA_ANON_HUGE) - 1)))
		v.flags |= MRMGR__VMA_F_ANON;
	w->ret = w->fn(&v, w->arg);
	return w->ret != 0 || v.end - 1 >= w->last;
}

/* Lines go through a stack buffer: no allocation. */
int mrmgr__maps_walk(uint64_t start, uint64_t last, mrmgr__vma_fn fn,
		     void *arg)
{
	struct text_walk w = { start, last, fn, arg, 0 };
	char buf[4096];
	size_t have = 0;
	int done = 0, skipping = 0, saved = errno;
	int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);

	if (fd < 0) {
		w.ret = -(errno ? errno : EIO);
		errno = saved;
		return w.ret;
	}
	while (!done) {
		ssize_t n = read(fd, buf + have, sizeof(buf) - have);
		char *line = buf, *nl;

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			w.ret = -(errno ? errno : EIO);
		if (n <= 0)
			break;
		have += (size_t)n;
		while (!done && (nl = memchr(line, '\n', have - (size_t)(line - buf)))) {
			if (!skipping)
				done = text_line(line, nl, &w);
			skipping = 0;
			line = nl + 1;
		}
		have -= (size_t)(line - buf);
		if (!done && have == sizeof(buf)) {
			/* A line longer than the buffer (a long path): its
			 * head has what is wanted; drop the rest. */
			if (!skipping)
				done = text_line(buf, buf + have, &w);
			skipping = 1;
			have = 0;
		} else {
			memmove(buf, line, have);
		}
	}
	close(fd);
	errno = saved;
	return w.ret;
}

struct shm_run {
	uint64_t a, end, inode;
	int found;
};

static int shm_one(const struct mrmgr__vma *v, void *arg)
{
	struct shm_run *r = arg;

	if (!r->found) {
		if (v->start != r->a)
			return 1;
		r->found = 1;
	} else if (v->start != r->end || v->inode != r->inode) {
		return 1;
	}
	r->end = v->end;
	r->inode = v->inode;
	return 0;
}

int mrmgr__maps_shm_extent(uint64_t a, uint64_t *end)
{
	struct shm_run r = { a, 0, 0, 0 };

	if (mrmgr__maps_walk(a, UINT64_MAX, shm_one, &r) < 0)
		return -1;
	if (r.found)
		*end = r.end;
	return r.found;
}

