/*
 * Per-process descriptors of /proc/self files (pagemap, maps), opened once
 * and shared by every thread. Such a file is bound to the mm of the process
 * that opened it, so a fork child must open its own: the pid is checked on
 * every use and the file opened again after a fork.
 *
 * SPDX-License-Identifier: MIT
 */
#ifndef MRMGR__PROCFS_H
#define MRMGR__PROCFS_H

#include <pthread.h>
#include <stdint.h>
#include <sys/ioctl.h>
#include <sys/types.h>

struct mrmgr__proc_file {
	const char *path;
	pthread_mutex_t lock;
	int fd;
	pid_t pid;
};

#define MRMGR__PROC_FILE(p) { (p), PTHREAD_MUTEX_INITIALIZER, -1, 0 }

/* This process's descriptor of f, opened on first use; -1 (errno) if not. */
int mrmgr__proc_file_fd(struct mrmgr__proc_file *f);

/*
 * The PROCMAP_QUERY ioctl on /proc/self/maps (linux/fs.h, Linux 6.11),
 * declared here because the headers of older systems lack it; size tells
 * the kernel which layout we pass. Used by vma.c, which falls back to
 * parsing the text where the kernel lacks it.
 */
struct mrmgr__procmap_query {
	uint64_t size;
	uint64_t query_flags;
	uint64_t query_addr;
	uint64_t vma_start;
	uint64_t vma_end;
	uint64_t vma_flags;
	uint64_t vma_page_size;
	uint64_t vma_offset;
	uint64_t inode;
	uint32_t dev_major;
	uint32_t dev_minor;
	uint32_t vma_name_size;
	uint32_t build_id_size;
	uint64_t vma_name_addr;
	uint64_t build_id_addr;
};

#define MRMGR__PROCMAP_QUERY _IOWR('f', 17, struct mrmgr__procmap_query)
#define MRMGR__PROCMAP_READABLE 0x01
#define MRMGR__PROCMAP_WRITABLE 0x02
#define MRMGR__PROCMAP_EXECUTABLE 0x04
#define MRMGR__PROCMAP_VMA_SHARED 0x08

/* The process id, kept current by a fork handler: getpid() is a system
 * call since glibc 2.25, and a cache miss must not pay for it. Children
 * of vfork()/clone() run no handlers (they must exec or _exit). */
pid_t mrmgr__getpid(void);

#endif /* MRMGR__PROCFS_H */
