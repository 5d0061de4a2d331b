/*
 * A thread that makes one mrmgr_get() (of RW access) and keeps its
 * answer: for tests of what a get does while the test holds the cache
 * lock or registers the same range itself.
 *
 * SPDX-License-Identifier: MIT
 */
#ifndef MRMGR_TEST_GETTER_H
#define MRMGR_TEST_GETTER_H

#include <pthread.h>

#include "helpers.h"

struct getter {
	mrmgr_cache_t *c;
	void *addr;
	size_t len;
	mrmgr_region_t *r;
	int ret;
	pthread_t t;
};

static inline void *getter_run(void *arg)
{
	struct getter *x = arg;

	x->ret = mrmgr_get(x->c, x->addr, x->len, RW, &x->r);
	return NULL;
}

static inline void getter_start(struct getter *x, mrmgr_cache_t *c,
				void *addr, size_t len)
{
	x->c = c;
	x->addr = addr;
	x->len = len;
	x->r = NULL;
	cr_assert_eq(pthread_create(&x->t, NULL, getter_run, x), 0);
}

/* Waits for the get, which must have succeeded. */
static inline void getter_join(struct getter *x)
{
	pthread_join(x->t, NULL);
	cr_assert_eq(x->ret, 0);
}

#endif
