/*
 * An augmented red-black interval tree, keyed by start address, each node
 * carrying the largest end in its subtree so overlap queries cost
 * O(log n + k). Intrusive: the caller embeds struct mrmgr__itree_node and
 * owns the memory; nothing here allocates. Knows nothing of MRs.
 *
 * Intervals are closed: [start, last], last >= start. Several nodes may
 * have the same start or overlap each other.
 *
 * Concurrency: writers must be serialised by the caller. Every link and
 * key a reader follows is written with MRMGR__WRITE_ONCE and read with
 * MRMGR__READ_ONCE, so a lock-free reader may walk the tree while a writer
 * changes it, provided it validates its result afterwards (the cache uses a
 * sequence count) and node memory stays readable (type-stable). Such a
 * reader may see a torn view mid-rotation: it must bound its steps.
 *
 * SPDX-License-Identifier: MIT
 */
#ifndef MRMGR__ITREE_H
#define MRMGR__ITREE_H

#include <stdint.h>
#include <stddef.h>

struct mrmgr__itree_node {
	uintptr_t parent_color; /* parent pointer, low bit = colour */
	struct mrmgr__itree_node *left;
	struct mrmgr__itree_node *right;
	uint64_t start;
	uint64_t last;          /* inclusive end */
	uint64_t subtree_last;  /* max of last over this subtree */
};

struct mrmgr__itree {
	struct mrmgr__itree_node *root;
	size_t count;
};

void mrmgr__itree_init(struct mrmgr__itree *t);

/*
 * Nodes waiting to enter a tree: a writer that does not need the tree
 * ordered yet (the cache, while its hash index answers every question)
 * parks a node here in O(1), and one that does flushes them in. A node
 * removed while it waits costs O(1) too, so a node that comes and goes
 * between two queries never touches the tree. Zeroed means empty. Lock-free
 * readers must not rely on a tree with nodes waiting: the caller flushes
 * before it lets them read the tree. A waiting node's links stay readable
 * for a stale reader (they name waiting nodes or the list's head, whose
 * keys match no query), so it is no more dangerous than a removed one.
 */
struct mrmgr__itree_pending {
	struct mrmgr__itree_node head; /* circular list through left/right */
};

/* How many nodes wait on p. */
static inline size_t mrmgr__itree_pending_count(const struct mrmgr__itree_pending *p)
{
	return (size_t)p->head.subtree_last; /* the head's keys are unused */
}

/* Whether p holds no node. */
static inline int mrmgr__itree_pending_empty(const struct mrmgr__itree_pending *p)
{
	return p->head.subtree_last == 0;
}

/* Park node (keys set) on p instead of inserting it. O(1). */
void mrmgr__itree_defer(struct mrmgr__itree_pending *p,
			struct mrmgr__itree_node *node);

/* Insert every node of p into t, oldest first; p is then empty. */
void mrmgr__itree_flush(struct mrmgr__itree *t, struct mrmgr__itree_pending *p);

/* Insert the oldest nodes of p into t until at most keep wait. */
void mrmgr__itree_flush_to(struct mrmgr__itree *t,
			   struct mrmgr__itree_pending *p, size_t keep);

/* Forget every node of p (they go nowhere; the caller reuses them). */
void mrmgr__itree_pending_clear(struct mrmgr__itree_pending *p);

/* Whether node waits on a pending list (mrmgr__itree_defer()). */
int mrmgr__itree_is_pending(const struct mrmgr__itree_node *node);

/* Insert node; node->start and node->last must be set. O(log n). */
void mrmgr__itree_insert(struct mrmgr__itree *t, struct mrmgr__itree_node *node);

/* Remove a node that is in the tree, O(log n), or waits on a pending list
 * of it, O(1). */
void mrmgr__itree_remove(struct mrmgr__itree *t, struct mrmgr__itree_node *node);

/*
 * The overlapping node with the lowest start (ties: any order but stable
 * across first/next) among those intersecting [start, last], or NULL.
 */
struct mrmgr__itree_node *
mrmgr__itree_first_overlap(const struct mrmgr__itree *t, uint64_t start,
			   uint64_t last);

/* The next node after n (in-order) that intersects [start, last], or NULL. */
struct mrmgr__itree_node *
mrmgr__itree_next_overlap(const struct mrmgr__itree_node *n, uint64_t start,
			  uint64_t last);

/*
 * The smallest node (by last - start) that contains [start, last]
 * entirely, or NULL. Ties: the lowest start. O(log n + k) where k is the
 * number of nodes overlapping the range.
 */
struct mrmgr__itree_node *
mrmgr__itree_smallest_containing(const struct mrmgr__itree *t, uint64_t start,
				 uint64_t last);

/*
 * A node containing [start, last] for which match(node, arg) is nonzero,
 * or NULL. Walks down from the root only (no parent pointers) with an
 * explicit stack, pruning by subtree_last, and gives up after max_steps
 * node visits, setting *gave_up: this is the query a lock-free reader uses,
 * so it must terminate even on a torn view of the tree. O(log n + k).
 */
struct mrmgr__itree_node *
mrmgr__itree_find_containing(const struct mrmgr__itree *t, uint64_t start,
			     uint64_t last,
			     int (*match)(const struct mrmgr__itree_node *n,
					  const void *arg),
			     const void *arg, unsigned max_steps,
			     int *gave_up);

/* In-order first/next over all nodes (for teardown and debugging). */
struct mrmgr__itree_node *mrmgr__itree_first(const struct mrmgr__itree *t);
struct mrmgr__itree_node *mrmgr__itree_next(const struct mrmgr__itree_node *n);

/*
 * Check every red-black and augmentation invariant; returns 0 when they
 * hold, else a negative code naming the first broken one (tests only).
 */
int mrmgr__itree_check(const struct mrmgr__itree *t);

#endif /* MRMGR__ITREE_H */
