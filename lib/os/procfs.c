/*
 * Per-process /proc/self descriptors: see procfs.h.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <fcntl.h>
#include <unistd.h>

#include "procfs.h"

static pid_t mrmgr__pid;
static pthread_once_t pid_once = PTHREAD_ONCE_INIT;

static void pid_child(void)
{
	__atomic_store_n(&mrmgr__pid, getpid(), __ATOMIC_RELAXED);
}

static void pid_init(void)
{
	__atomic_store_n(&mrmgr__pid, getpid(), __ATOMIC_RELAXED);
	(void)pthread_atfork(NULL, NULL, pid_child);
}

/* getpid() is a system call since glibc 2.25; a miss must not pay it. */
pid_t mrmgr__getpid(void)
{
	pid_t p = __atomic_load_n(&mrmgr__pid, __ATOMIC_RELAXED);

	if (p)
		return p;
	pthread_once(&pid_once, pid_init);
	return __atomic_load_n(&mrmgr__pid, __ATOMIC_RELAXED);
}

int mrmgr__proc_file_fd(struct mrmgr__proc_file *f)
{
	pid_t pid = mrmgr__getpid();
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
