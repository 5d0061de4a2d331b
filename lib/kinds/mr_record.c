/*
 * The MR records of the device-memory kinds (mr_record.h).
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <stdlib.h>

#include "device.h"
#include "mr_record.h"

void mrmgr__kind_mr_push(struct mrmgr__kind_mr **head,
			 struct mrmgr__kind_mr *rec, struct ibv_mr *mr,
			 void *owner)
{
	rec->mr = mr;
	rec->owner = owner;
	rec->next = *head;
	*head = rec;
}

int mrmgr__kind_mr_dereg(pthread_mutex_t *lock, struct mrmgr__kind_mr **head,
			 const struct mrmgr_device_ops *ops, struct ibv_mr *mr,
			 void (*released)(void *ctx, void *owner), void *ctx)
{
	struct mrmgr__kind_mr *rec = NULL;
	int ret;

	/*
	 * The record goes first, while the MR is live: once the device lets
	 * go of it, its address may come back at once for another buffer's
	 * registration on another thread, whose record must not be the one
	 * taken here (that buffer's slot would be given back under its
	 * cached region: the dma-buf torture caught it).
	 */
	pthread_mutex_lock(lock);
	for (struct mrmgr__kind_mr **pp = head; *pp; pp = &(*pp)->next) {
		if ((*pp)->mr == mr) {
			rec = *pp;
			*pp = rec->next;
			break;
		}
	}
	pthread_mutex_unlock(lock);
	ret = mrmgr__dev_dereg_mr(ops, mr);
	pthread_mutex_lock(lock);
	if (ret && rec) {
		/* The MR may live: what it holds stays held, retried later. */
		rec->next = *head;
		*head = rec;
		rec = NULL;
	} else if (rec) {
		released(ctx, rec->owner);
	}
	pthread_mutex_unlock(lock);
	free(rec);
	return ret;
}

void mrmgr__kind_mr_free_all(struct mrmgr__kind_mr **head)
{
	while (*head) {
		struct mrmgr__kind_mr *rec = *head;

		*head = rec->next;
		free(rec);
	}
}
