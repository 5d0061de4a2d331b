/*
 * Helpers for the shared-MR tests: a simulated device with several PDs,
 * a multi-PD cache over them, log capture, and sim accesses through a
 * region's keys in each PD.
 *
 * SPDX-License-Identifier: MIT
 */
#ifndef MRMGR_TEST_SHARE_HELPERS_H
#define MRMGR_TEST_SHARE_HELPERS_H

#include <dirent.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "helpers.h"

#include <mrmgr/share.h>

#define MAXPD 4

struct mfx {
	struct ibv_context *ctx[MAXPD]; /* ctx[i] NULL: same as ctx[0] */
	struct ibv_pd *pd[MAXPD];
	size_t npd;
	mrmgr_cache_t *cache;
};

/* A cache over npds PDs: mrmgr_cache_create() with MRMGR_CACHE_ATTR_PDS
 * added to attr (NULL: the defaults). */
static inline int create_multi(struct ibv_pd *const *pds, size_t npds,
			       const struct mrmgr_cache_attr *attr,
			       mrmgr_cache_t **cache)
{
	struct mrmgr_cache_attr a = attr ? *attr : (struct mrmgr_cache_attr){ 0 };

	a.comp_mask |= MRMGR_CACHE_ATTR_PDS;
	a.pds = pds;
	a.npds = npds;
	return mrmgr_cache_create(NULL, &a, cache);
}

/* A get for one PD: mrmgr_get_ex() with MRMGR_GET_ATTR_PD. */
static inline int get_pd(mrmgr_cache_t *cache, struct ibv_pd *pd, void *addr,
			 size_t length, unsigned int access,
			 mrmgr_region_t **region)
{
	struct mrmgr_get_attr ga = { .comp_mask = MRMGR_GET_ATTR_PD, .pd = pd };

	return mrmgr_get_ex(cache, addr, length, access, &ga, region);
}

/* npd PDs, on one device (devices 1) or one device each (devices npd). */
static inline void mfx_open(struct mfx *m, size_t npd, size_t devices,
			    const struct mrmgr_sim_attr *sa,
			    const struct mrmgr_cache_attr *ca)
{
	memset(m, 0, sizeof(*m));
	m->npd = npd;
	for (size_t i = 0; i < npd; i++) {
		if (i < devices)
			cr_assert_eq(mrmgr_sim_open(sa, &m->ctx[i]), 0);
		cr_assert_eq(mrmgr_sim_alloc_pd(m->ctx[i < devices ? i : 0], &m->pd[i]), 0);
	}
	cr_assert_eq(create_multi(m->pd, npd, ca, &m->cache), 0);
}

static inline void mfx_close(struct mfx *m)
{
	if (m->cache)
		cr_assert_eq(mrmgr_cache_destroy(m->cache), 0);
	for (size_t i = 0; i < m->npd; i++)
		cr_assert_eq(mrmgr_sim_dealloc_pd(m->pd[i]), 0);
	for (size_t i = 0; i < MAXPD; i++) {
		if (!m->ctx[i])
			continue;
		struct mrmgr_sim_stats ss = sstats(m->ctx[i]);

		cr_assert_eq(ss.live_mrs, 0, "device %zu leaked %llu MRs", i,
			     (unsigned long long)ss.live_mrs);
		cr_assert_eq(ss.pinned_bytes, 0);
		cr_assert_eq(mrmgr_sim_close(m->ctx[i]), 0);
	}
}

static inline uint64_t live_mrs_all(const struct mfx *m)
{
	uint64_t n = 0;

	for (size_t i = 0; i < MAXPD; i++)
		if (m->ctx[i])
			n += sstats(m->ctx[i]).live_mrs;
	return n;
}

/* A simulated RDMA WRITE of byte c over [p, p+len) through r's keys in pd. */
static inline int write_via(struct ibv_pd *pd, uint32_t rkey, void *p,
			    size_t len, int c)
{
	char *src = malloc(len);
	int ret;

	cr_assert_not_null(src);
	memset(src, c, len);
	ret = mrmgr_sim_write(pd, rkey, (uint64_t)(uintptr_t)p, src, len);
	free(src);
	return ret;
}

static inline int all_bytes(const void *p, size_t len, int c)
{
	for (size_t i = 0; i < len; i++)
		if (((const unsigned char *)p)[i] != (unsigned char)c)
			return 0;
	return 1;
}

/* Log capture: the last lines at or above warn, concatenated. */
struct captured {
	char text[8192];
	unsigned int lines;
};
static struct captured captured;

static inline void capture_fn(enum mrmgr_log_level level, const char *msg,
			      void *arg)
{
	size_t n = strlen(captured.text);

	(void)level;
	(void)arg;
	captured.lines++;
	if (n + strlen(msg) + 2 < sizeof(captured.text)) {
		strcat(captured.text, msg);
		strcat(captured.text, "\n");
	}
}

static inline void capture_start(void)
{
	memset(&captured, 0, sizeof(captured));
	mrmgr_set_log_handler(capture_fn, NULL, MRMGR_LOG_WARN);
}

static inline void capture_stop(void)
{
	mrmgr_set_log_handler(NULL, NULL, MRMGR_LOG_WARN);
}

/* The members of r's share set, counted by kind. */
static inline size_t shares(mrmgr_region_t *r, struct mrmgr_share_info *info,
			    size_t max)
{
	size_t n = 0;

	cr_assert_eq(mrmgr_region_query_shares(r, info, max, sizeof(*info), &n), 0);
	return n;
}

static inline int64_t ms_now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* A connected pair as the share helper uses (SOCK_SEQPACKET). */
static inline void seqpair(int sv[2])
{
	cr_assert_eq(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
}

/* Open descriptors of this process (/proc/self/fd, less the listing's);
 * MRMGR_TEST_FDS=1 prints what they are. */
static inline int count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	int n = 0;

	cr_assert_not_null(d);
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		n++;
		if (getenv("MRMGR_TEST_FDS")) {
			char path[300], to[256] = "";

			snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
			if (readlink(path, to, sizeof(to) - 1) < 0)
				to[0] = 0;
			fprintf(stderr, " %s->%s", e->d_name, to);
		}
	}
	if (getenv("MRMGR_TEST_FDS"))
		fprintf(stderr, "\n");
	closedir(d);
	return n - 1;
}

/*
 * A datagram of len bytes with nfds descriptors, as a hostile peer sends
 * it (nfds > 0: one SCM_RIGHTS message, or split in two when split).
 * The sendmsg() result.
 */
static inline ssize_t raw_send(int sock, const void *data, size_t len,
			       const int *fds, size_t nfds, int split)
{
	char ctl[CMSG_SPACE(64 * sizeof(int)) * 2] __attribute__((aligned(8)));
	struct iovec iov = { (void *)(uintptr_t)data, len };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
	size_t first = split && nfds > 1 ? nfds / 2 : nfds;
	struct cmsghdr *c;

	cr_assert_leq(nfds, 64);
	memset(ctl, 0, sizeof(ctl));
	if (nfds) {
		mh.msg_control = ctl;
		mh.msg_controllen = CMSG_SPACE(first * sizeof(int));
		if (first < nfds)
			mh.msg_controllen += CMSG_SPACE((nfds - first) * sizeof(int));
		c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(first * sizeof(int));
		memcpy(CMSG_DATA(c), fds, first * sizeof(int));
		if (first < nfds) {
			c = CMSG_NXTHDR(&mh, c);
			c->cmsg_level = SOL_SOCKET;
			c->cmsg_type = SCM_RIGHTS;
			c->cmsg_len = CMSG_LEN((nfds - first) * sizeof(int));
			memcpy(CMSG_DATA(c), fds + first, (nfds - first) * sizeof(int));
		}
	}
	return sendmsg(sock, &mh, MSG_NOSIGNAL);
}

#endif
