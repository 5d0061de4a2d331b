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

#endif /* MRMGR__PROCFS_H */
