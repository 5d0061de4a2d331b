/*
 * The simulated HCA's keys: an MR's slot in the device's table is its
 * key's index (lkey = index << 8 | a key byte, as mlx5 and rxe build
 * theirs), so a key finds its MR in O(1); a freed slot waits a while
 * before it is reused, and its key byte changes when it is.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "sim/sim_internal.h"

static uint8_t next_key_byte(struct mrmgr__sim_ctx *s, uint8_t last)
{
	uint8_t b;

	/* mlx5 bumps a device-wide "mkey variant" on every creation. */
	if (!s->pers->random_key)
		return ++s->key_counter;
	/* rxe draws a random byte; keep it off the slot's last one. */
	do {
		s->rng ^= s->rng << 13;
		s->rng ^= s->rng >> 17;
		s->rng ^= s->rng << 5;
		b = (uint8_t)(s->rng >> 24);
	} while (b == last);
	return b;
}

int mrmgr__sim_slot_alloc(struct mrmgr__sim_ctx *s, struct mrmgr__sim_mr *m)
{
	struct mrmgr__sim_slot *slot;
	uint32_t idx, lkey;

	if (s->nfree > MRMGR__SIM_REUSE_DELAY ||
	    (s->nfree && s->hwm > MRMGR__SIM_MAX_INDEX)) {
		idx = s->free_head;
		s->free_head = s->slots[idx].next_free;
		if (--s->nfree == 0)
			s->free_head = s->free_tail = 0;
	} else if (s->hwm <= MRMGR__SIM_MAX_INDEX) {
		if (s->hwm >= s->nslots) {
			uint32_t n = s->nslots ? s->nslots * 2 : 1024;
			void *v;

			if (n > MRMGR__SIM_MAX_INDEX + 1)
				n = MRMGR__SIM_MAX_INDEX + 1;
			v = realloc(s->slots, (size_t)n * sizeof(*s->slots));
			if (!v)
				return ENOMEM;
			s->slots = v;
			memset(s->slots + s->nslots, 0,
			       (size_t)(n - s->nslots) * sizeof(*s->slots));
			s->nslots = n;
		}
		idx = s->hwm++;
	} else {
		return ENOMEM; /* 2^24 - 1 MRs live: the key space is full */
	}
	slot = &s->slots[idx];
	slot->mr = m;
	slot->next_free = 0;
	slot->key = next_key_byte(s, slot->key);
	lkey = idx << 8 | slot->key;
	m->index = idx;
	m->ibmr.lkey = lkey;
	/* Flip the key byte's top bit: same index, so rkey lookup stays O(1). */
	m->ibmr.rkey = (s->flags & MRMGR_SIM_FLAG_DISTINCT_RKEY) ? lkey ^ 0x80u
								 : lkey;
	return 0;
}

void mrmgr__sim_slot_free(struct mrmgr__sim_ctx *s, uint32_t idx)
{
	s->slots[idx].mr = NULL;
	s->slots[idx].next_free = 0;
	if (s->nfree++ == 0)
		s->free_head = idx;
	else
		s->slots[s->free_tail].next_free = idx;
	s->free_tail = idx;
}

struct mrmgr__sim_mr *mrmgr__sim_mr_by_rkey(struct mrmgr__sim_ctx *s,
					    uint32_t rkey)
{
	uint32_t idx = rkey >> 8;
	struct mrmgr__sim_mr *m;

	if (idx == 0 || idx >= s->hwm)
		return NULL;
	m = s->slots[idx].mr;
	if (!m || !m->live || m->dead || m->ibmr.rkey != rkey)
		return NULL;
	return m;
}

void mrmgr__sim_keys_fini(struct mrmgr__sim_ctx *s)
{
	free(s->spare);
	s->spare = NULL;
	free(s->slots);
	s->slots = NULL;
	s->nslots = 0;
}

int mrmgr__sim_keys_renew(struct mrmgr__sim_ctx *s, struct mrmgr__sim_mr *m)
{
	uint32_t old = m->index;
	int ret = mrmgr__sim_slot_alloc(s, m); /* sets index and keys only on success */

	if (ret)
		return ret;
	mrmgr__sim_slot_free(s, old);
	return 0;
}
