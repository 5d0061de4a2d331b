/*
 * Helpers shared by the memory-event monitor's tests (after helpers.h).
 *
 * SPDX-License-Identifier: MIT
 */
#ifndef MRMGR_TEST_MONITOR_HELPERS_H
#define MRMGR_TEST_MONITOR_HELPERS_H

#include <errno.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <linux/userfaultfd.h>
#include <stddef.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/syscall.h>

#include "compat.h"
#include "helpers.h"

static inline struct mrmgr_monitor_info minfo(mrmgr_cache_t *c)
{
	struct mrmgr_monitor_info m;

	cr_assert_eq(mrmgr_cache_query_monitor(c, &m, sizeof(m)), 0);
	return m;
}

static inline int uffd_on(mrmgr_cache_t *c)
{
	return !!(minfo(c).sources & MRMGR_MONITOR_SRC_UFFD);
}

static inline void need_identity(void)
{
	if (!mrmgr_sim_page_identity_available())
		cr_skip_test("page identity needs /proc/self/pagemap PFNs (root)");
}

/* A container-like seccomp filter: userfaultfd(2) and /dev/userfaultfd
 * refused with EPERM, everything else allowed. For this process only. */
static inline void refuse_userfaultfd(void)
{
	struct sock_filter prog[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_userfaultfd, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_ioctl, 0, 3),
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, args[1])),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (uint32_t)USERFAULTFD_IOC_NEW, 0, 1),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
	};
	struct sock_fprog fp = {
		.len = sizeof(prog) / sizeof(prog[0]), .filter = prog,
	};

	cr_assert_eq(prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), 0);
	cr_assert_eq(prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &fp), 0);
}

#endif
