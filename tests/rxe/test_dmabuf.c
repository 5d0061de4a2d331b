/*
 * A dma-buf through the API to the real device: rdma_rxe (kernel 6.1,
 * rdma-core 44) has no dma-buf registration, so libibverbs answers
 * EOPNOTSUPP, and mrmgr_get_dmabuf() must return that as a clear error
 * with no descriptor left open (the cache's duplicate closed on the
 * failure). The buffer is a udmabuf where the guest kernel has
 * /dev/udmabuf (Debian builds CONFIG_UDMABUF in), else a memfd; which
 * one is said in the output.
 *
 * They assert rxe facts, so on another device they skip.
 *
 * SPDX-License-Identifier: MIT
 */
#define _GNU_SOURCE
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>
#include <linux/udmabuf.h>

#include "cache_helpers.h"

#define LEN (64 * RDMA_KiB)

static int count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	int n = 0;

	cr_assert_not_null(d);
	while ((e = readdir(d)))
		if (e->d_name[0] != '.' && atoi(e->d_name) != dirfd(d))
			n++;
	closedir(d);
	return n;
}

/* A dma-buf of LEN bytes: a udmabuf over a sealed memfd, or the memfd. */
static int make_buffer(const char **what)
{
	int mfd = memfd_create("mrmgr-rxe-dmabuf", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	int dev, buf;

	cr_assert_geq(mfd, 0, "memfd_create: %s", strerror(errno));
	cr_assert_eq(ftruncate(mfd, LEN), 0);
	dev = open("/dev/udmabuf", O_RDWR | O_CLOEXEC);
	if (dev < 0) {
		*what = "memfd (no /dev/udmabuf)";
		return mfd;
	}
	cr_assert_eq(fcntl(mfd, F_ADD_SEALS, F_SEAL_SHRINK), 0);
	struct udmabuf_create c = { .memfd = (uint32_t)mfd, .flags = UDMABUF_FLAGS_CLOEXEC,
				    .offset = 0, .size = LEN };
	buf = ioctl(dev, UDMABUF_CREATE, &c);
	close(dev);
	if (buf < 0) {
		*what = "memfd (UDMABUF_CREATE failed)";
		return mfd;
	}
	close(mfd);
	*what = "udmabuf";
	return buf;
}

Test(rxe_dmabuf, verbs_refuses_with_eopnotsupp)
{
	struct rdma_fixture f;
	const char *what;
	int fd;

#if !HAVE_DECL_IBV_REG_DMABUF_MR
	(void)f;
	(void)what;
	(void)fd;
	cr_skip_test("this libibverbs has no ibv_reg_dmabuf_mr (rdma-core < 34)");
#else
	rdma_fixture_open_rxe(&f, 0, "these are rxe facts");
	fd = make_buffer(&what);
	cr_log_info("the dma-buf: %s", what);
	errno = 0;
	struct ibv_mr *mr = ibv_reg_dmabuf_mr(f.pd, 0, LEN, 0, fd,
					      IBV_ACCESS_LOCAL_WRITE);
	int err = errno;
	cr_assert_null(mr, "rxe registered a dma-buf (%s): a new fact", what);
	cr_assert_eq(err, EOPNOTSUPP, "ibv_reg_dmabuf_mr on %s: %s", what,
		     strerror(err));
	close(fd);
	rdma_fixture_close(&f);
#endif
}

Test(rxe_dmabuf, the_api_says_eopnotsupp_and_leaks_no_fd)
{
	struct rdma_fixture f;
	mrmgr_cache_t *c;
	mrmgr_region_t *r = NULL;
	const char *what;
	int base, fd;

	rdma_fixture_open_rxe(&f, 0, "these are rxe facts");
	cr_assert_eq(mrmgr_cache_create_dmabuf(f.pd, NULL, &c), 0);
	fd = make_buffer(&what);
	cr_log_info("the dma-buf: %s", what);
	base = count_fds();
	struct mrmgr_dmabuf_attr a = { .fd = fd, .offset = 0, .length = LEN,
				       .access = IBV_ACCESS_LOCAL_WRITE };
	for (int i = 0; i < 3; i++) {
		cr_assert_eq(mrmgr_get_dmabuf(c, &a, &r), EOPNOTSUPP,
			     "mrmgr_get_dmabuf on rxe with a %s", what);
		cr_assert_null(r);
		cr_assert_eq(count_fds(), base, "a descriptor left open");
	}
	printf("rxe_dmabuf: a %s through mrmgr_get_dmabuf: EOPNOTSUPP, "
	       "%d descriptors before and after\n", what, base);
	close(fd);
	cr_assert_eq(mrmgr_cache_destroy(c), 0);
	rdma_fixture_close(&f);
}
