/*
 * Code that changes memory with system calls of its own, recognised by
 * its symbols (test_monitor_modes.c loads it with dlopen):
 * -DRAW_GO models a Go runtime (cgo's crosscall2; Go's heap scavenger
 * releases pages with a raw madvise), -DRAW_URING liburing (its
 * io_uring_queue_init; IORING_OP_MADVISE discards pages with no libc
 * call). raw_release() issues the raw madvise itself.
 *
 * SPDX-License-Identifier: MIT
 */
#define _GNU_SOURCE
#include <stddef.h>
#include <sys/syscall.h>
#include <unistd.h>

void crosscall2(void);
int io_uring_queue_init(unsigned int entries, void *ring, unsigned int flags);
long raw_release(void *a, size_t l, int advice);

#ifdef RAW_GO
void crosscall2(void)
{
}
#endif
#ifdef RAW_URING
int io_uring_queue_init(unsigned int entries, void *ring, unsigned int flags)
{
	(void)entries;
	(void)ring;
	(void)flags;
	return -38; /* -ENOSYS: a marker, not liburing */
}
#endif

long raw_release(void *a, size_t l, int advice)
{
	return syscall(SYS_madvise, a, l, advice);
}
