/*
 * The region object: one registered range, its MR, its state and its
 * reference count.
 *
 * The reference count is striped: each thread adds and drops references
 * on the stripe of its own slot (a cache line of its own), so threads
 * hitting the same region never write the same line. A region's true count
 * is the sum of its stripes; only the slow paths (eviction, invalidation,
 * a put on a detached region) add them up.
 *
 * Region memory is type-stable: a released region goes back to its cache's
 * free list and is only freed when the cache is destroyed, so a lock-free
 * reader holding a stale pointer still reads a region (and notices, through
 * the cache's sequence count, that it was not the one it looked for).
 *
 * SPDX-License-Identifier: MIT
 */
#ifndef MRMGR__REGION_H
#define MRMGR__REGION_H

#include <stdint.h>
#include <infiniband/verbs.h>

#include "compiler.h"
#include "itree.h"
#include "monitor.h"

struct mrmgr_cache;
struct mrmgr__share;

enum mrmgr__region_state {
	/* In the tree and on the LRU: hits may take it. */
	MRMGR__REGION_LIVE = 0,
	/* Being checked for eviction under the cache lock. */
	MRMGR__REGION_EVICTING,
	/* Out of the tree; deregistered when its references reach zero. */
	MRMGR__REGION_DETACHED,
	/* On the free list. */
	MRMGR__REGION_FREE,
	/* A fork child's copy of a region its parent held: never released. */
	MRMGR__REGION_ABANDONED,
};

/* What backs a region; set once when it is made. */
enum mrmgr__region_kind {
	MRMGR__REGION_PINNED = 0, /* its own pinned MR */
	MRMGR__REGION_ODP,        /* its own explicit ODP MR: nothing pinned */
	MRMGR__REGION_VIEW,       /* a range of the cache's implicit ODP MR:
				   * no MR of its own, never deregistered */
};

/*
 * Bits of mrmgr_region::flags: what backs the MR beyond plain pinned
 * memory. grow.c never re-registers such a region in place (a translation
 * rereg makes a shared MR private; peer memory and dma-buf MRs have no
 * user translation to change): they grow by make-before-break.
 */
enum mrmgr__region_flags {
	MRMGR__REGION_SHARED = 1u << 0, /* shared with other PDs or processes */
	MRMGR__REGION_PEER = 1u << 1,   /* peer memory or dma-buf */
	MRMGR__REGION_BUFFER = 1u << 2, /* a growable buffer's (buf.c) */
};

/* One thread slot's share of a region: its own cache line. */
struct mrmgr__ref_stripe {
	_Alignas(MRMGR__CACHELINE) int64_t refs; /* may go negative: puts
						   * from another slot */
	uint32_t used; /* set by hits, cleared by the LRU hand */
};

/* Intrusive LRU list link; the cache's list head is one too. */
struct mrmgr__lru_link {
	struct mrmgr__lru_link *prev, *next;
};

struct mrmgr_region {
	struct mrmgr__itree_node node; /* [start, last], page-aligned */
	struct mrmgr_cache *cache;
	struct ibv_mr *mr;
	unsigned int access;
	int state;                     /* enum mrmgr__region_state, atomic */
	int kind;                      /* enum mrmgr__region_kind */
	unsigned int flags;            /* enum mrmgr__region_flags */
	uint64_t gen;                  /* cache-wide registration number;
					* a new one at every in-place rereg */
	struct mrmgr__lru_link lru;    /* cache lock; only LIVE regions */
	struct mrmgr_region *free_next;
	struct mrmgr__share *share;    /* share.c: its share set; NULL until
					* needed, kept while the cache lives */
	struct mrmgr__watch watch;     /* monitor registry entry (monitor.h) */
	int watched;                   /* watch is in the registry */
	/* nstripes entries follow; the header is padded to a line. */
	struct mrmgr__ref_stripe stripes[];
};

/* Slot of the calling thread, masked by the cache's stripe count. */
unsigned int mrmgr__thread_slot(void);

static inline uint64_t mrmgr__region_start(const struct mrmgr_region *r)
{
	return r->node.start;
}

static inline uint64_t mrmgr__region_len(const struct mrmgr_region *r)
{
	return r->node.last - r->node.start + 1;
}

static inline int mrmgr__region_state(const struct mrmgr_region *r)
{
	return __atomic_load_n(&r->state, __ATOMIC_SEQ_CST);
}

static inline void mrmgr__region_set_state(struct mrmgr_region *r, int state)
{
	__atomic_store_n(&r->state, state, __ATOMIC_SEQ_CST);
}

/*
 * Sum of the stripes. Sequentially consistent so that, paired with the
 * state store before it and the reference add + state load in the hit
 * path, either the hit sees the new state or this sees the reference.
 */
int64_t mrmgr__region_refs(const struct mrmgr_region *r, unsigned int nstripes);

#endif /* MRMGR__REGION_H */
