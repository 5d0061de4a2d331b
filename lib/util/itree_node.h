/*
 * The interval tree's node helpers, shared by its writer and reader side
 * (itree.c) and its checker (itree_check.c); private to lib/util.
 *
 * SPDX-License-Identifier: MIT
 */
#ifndef MRMGR_ITREE_NODE_H
#define MRMGR_ITREE_NODE_H

#include <stdbool.h>
#include <stdint.h>

#include "compiler.h"
#include "itree.h"

#define RED 0
#define BLACK 1
#define COLOR_MASK ((uintptr_t)1)

/* Child sides, so each rebalancing case is written once for both mirrors. */
#define LEFT 0
#define RIGHT 1

typedef struct mrmgr__itree_node itnode;

_Static_assert(_Alignof(itnode) > 1, "the colour lives in the low bit");

/* Used by writers and readers alike: a relaxed load costs a plain one. */
static inline itnode *parent_of(const itnode *n)
{
	return (itnode *)(MRMGR__READ_ONCE(n->parent_color) & ~COLOR_MASK);
}

/* NULL leaves count as black. */
static inline bool is_red(const itnode *n)
{
	return n && (n->parent_color & COLOR_MASK) == RED;
}

/* From the node's own end and its children's (correct) values. */
static inline uint64_t compute_subtree_last(const itnode *n)
{
	uint64_t m = n->last;

	if (n->left && n->left->subtree_last > m)
		m = n->left->subtree_last;
	if (n->right && n->right->subtree_last > m)
		m = n->right->subtree_last;
	return m;
}

#endif
