/*
 * The MRs a device-memory kind registered, each with what it holds (a
 * dma-buf, an allocation and its exported descriptor): the dma-buf and
 * device-VA kinds keep the same list and deregister the same way.
 *
 * SPDX-License-Identifier: MIT
 */
#ifndef MRMGR__KIND_MR_RECORD_H
#define MRMGR__KIND_MR_RECORD_H

#include <pthread.h>

struct ibv_mr;
struct mrmgr_device_ops;

struct mrmgr__kind_mr {
	struct ibv_mr *mr;
	void *owner;                 /* the kind's holder of the memory */
	struct mrmgr__kind_mr *next;
};

/* Record rec for mr, which holds owner; the kind's lock held. */
void mrmgr__kind_mr_push(struct mrmgr__kind_mr **head,
			 struct mrmgr__kind_mr *rec, struct ibv_mr *mr,
			 void *owner);

/*
 * Deregister mr, recorded in *head under lock (not held on entry). Once
 * the device let go of it, released(ctx, owner) runs with the lock held,
 * where the kind drops what the MR held. 0 or the device's errno (the
 * record then stays: the MR may live, and so does what it holds).
 */
int mrmgr__kind_mr_dereg(pthread_mutex_t *lock, struct mrmgr__kind_mr **head,
			 const struct mrmgr_device_ops *ops, struct ibv_mr *mr,
			 void (*released)(void *ctx, void *owner), void *ctx);

/* The cache is gone: every record freed (what they held is the kind's). */
void mrmgr__kind_mr_free_all(struct mrmgr__kind_mr **head);

#endif /* MRMGR__KIND_MR_RECORD_H */
