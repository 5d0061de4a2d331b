/*
 * The interval tree's invariant checker (tests and debug builds ask it
 * after every step of a run against an oracle).
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include "itree_node.h"

enum {
	CHECK_ROOT_RED = -1,
	CHECK_PARENT = -2, /* a parent pointer disagrees with the links */
	CHECK_RED_RED = -3,
	CHECK_BLACK_HEIGHT = -4,
	CHECK_ORDER = -5, /* in-order starts not ascending */
	CHECK_SUBTREE_LAST = -6,
	CHECK_COUNT = -7,
	CHECK_INTERVAL = -8, /* last < start */
};

struct check_state {
	size_t count; /* t->count: visiting more nodes means a cycle */
	size_t seen;
	const itnode *prev; /* in-order predecessor */
};

/* Check n's subtree in order; store its black height in *bh. */
static int check_subtree(const itnode *n, const itnode *parent,
			 struct check_state *st, int *bh)
{
	int lh, rh, err;

	if (!n) {
		*bh = 0;
		return 0;
	}
	if (parent_of(n) != parent || (n->left && n->left == n->right))
		return CHECK_PARENT;
	if (++st->seen > st->count)
		return CHECK_COUNT;
	if (n->last < n->start)
		return CHECK_INTERVAL;
	if (is_red(n) && (is_red(n->left) || is_red(n->right)))
		return CHECK_RED_RED;
	if ((err = check_subtree(n->left, n, st, &lh)))
		return err;
	if (st->prev && st->prev->start > n->start)
		return CHECK_ORDER;
	st->prev = n;
	if ((err = check_subtree(n->right, n, st, &rh)))
		return err;
	if (lh != rh)
		return CHECK_BLACK_HEIGHT;
	/* The children passed already, so their values can be trusted. */
	if (n->subtree_last != compute_subtree_last(n))
		return CHECK_SUBTREE_LAST;
	*bh = lh + !is_red(n);
	return 0;
}

int mrmgr__itree_check(const struct mrmgr__itree *t)
{
	struct check_state st = { .count = t->count };
	int bh, err;

	if (is_red(t->root))
		return CHECK_ROOT_RED;
	if ((err = check_subtree(t->root, NULL, &st, &bh)))
		return err;
	return st.seen == t->count ? 0 : CHECK_COUNT;
}
