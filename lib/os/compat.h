/*
 * What older kernel and rdma-core headers lack (doc/portability.md).
 *
 * The library is built on Debian 11 / RHEL 8 / SLES 15 generations
 * (kernel headers 5.10, rdma-core 33) as well as today's. A feature the
 * build's headers do not declare may still be there at run time (a newer
 * kernel under older headers, a newer libibverbs than the one built
 * against), so nothing here disables a feature: the constants are the
 * kernel's and rdma-core's own values, and every use is probed at run time
 * (the kernel refuses an unknown flag or ioctl with EINVAL/ENOTTY, the
 * UFFDIO_API handshake reports the features it has, and
 * mrmgr__verbs_fork_status() looks ibv_is_fork_initialized() up).
 * configure's AC_CHECK_DECLS says which of these the headers lack.
 *
 * SPDX-License-Identifier: MIT
 */
#ifndef MRMGR_OS_COMPAT_H
#define MRMGR_OS_COMPAT_H

#include "config.h"

#include <infiniband/verbs.h>
#include <linux/userfaultfd.h>
#include <sys/ioctl.h>

/* Linux 5.11: userfaultfd(2) flag for a descriptor that only handles
 * user-mode faults (allowed when vm.unprivileged_userfaultfd=0). */
#if !HAVE_DECL_UFFD_USER_MODE_ONLY
#define UFFD_USER_MODE_ONLY 1
#endif

/* Linux 6.1: /dev/userfaultfd's ioctl that returns a new descriptor. */
#if !HAVE_DECL_USERFAULTFD_IOC_NEW
#define USERFAULTFD_IOC 0xAA
#define USERFAULTFD_IOC_NEW _IO(USERFAULTFD_IOC, 0x00)
#endif

/* Linux 5.19: write-protect registration of hugetlbfs and shmem. */
#if !HAVE_DECL_UFFD_FEATURE_WP_HUGETLBFS_SHMEM
#define UFFD_FEATURE_WP_HUGETLBFS_SHMEM (1ULL << 12)
#endif

/* rdma-core 35: whether fork() leaves registrations intact. Older
 * libibverbs cannot say; mrmgr__verbs_fork_status() looks the call up at
 * run time (a newer libibverbs may be loaded) and otherwise answers
 * IBV_FORK_DISABLED, the conservative case (caches purged at fork). */
#if !HAVE_DECL_IBV_FORK_DISABLED
enum ibv_fork_status {
	IBV_FORK_DISABLED,
	IBV_FORK_ENABLED,
	IBV_FORK_UNNEEDED,
};
#endif

#endif /* MRMGR_OS_COMPAT_H */
