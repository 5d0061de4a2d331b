/*
 * Per-process /proc/self descriptors: see procfs.h.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <fcntl.h>
#include <unistd.h>

#include "procfs.h"

int mrmgr__proc_file_fd(struct mrmgr__proc_file *f)
{
	pid_t pid = getpid();
	int fd;

	pthread_mutex_lock(&f->lock);
	if (f->fd < 0 || f->pid != pid) {
		if (f->fd >= 0)
			close(f->fd);
		f->fd = open(f->path, O_RDONLY | O_CLOEXEC);
		f->pid = pid;
	}
	fd = f->fd;
	pthread_mutex_unlock(&f->lock);
	return fd;
}
