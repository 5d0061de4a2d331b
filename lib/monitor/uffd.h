/*
 * Between the userfaultfd source (uffd.c) and its delivery self-test
 * (uffd_selftest.c).
 *
 * SPDX-License-Identifier: MIT
 */
#ifndef MRMGR__UFFD_H
#define MRMGR__UFFD_H

#include <pthread.h>

/* A thread of the source's, on its own never-unmapped stack (uffd.c
 * says why): 0 or an errno. */
int mrmgr__uffd_thread(pthread_t *t, void *(*fn)(void *), void *arg);

/* The events come on fd: 0, or minus the errno (ETIMEDOUT: one did not
 * come; fd is then closed). */
int mrmgr__uffd_selftest(int fd);

#endif /* MRMGR__UFFD_H */
