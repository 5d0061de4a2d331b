/*
 * Augmented red-black interval tree (see itree.h).
 *
 * Writers store every field a lock-free reader follows with
 * MRMGR__WRITE_ONCE. Queries load with MRMGR__READ_ONCE, test each pointer
 * before following it and stop after a step budget a consistent tree never
 * exhausts: a reader racing a writer gets garbage for its sequence check
 * to reject, never a crash or an endless loop.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <stdbool.h>
#include <stdint.h>

#include "compiler.h"
#include "itree.h"
#include "itree_node.h"

/*
 * A red-black tree is at most 2*log2(n+1) high and n < 2^59 48-byte nodes
 * fit in memory, so a path longer than 128 means a torn view. A query
 * climbs at most one path and descends at most one.
 */
#define QUERY_BUDGET (2 * 128)

/* ------------------------------------------------------------ writer side */

static void set_parent_color(itnode *n, itnode *parent, uintptr_t color)
{
	MRMGR__WRITE_ONCE(n->parent_color, (uintptr_t)parent | color);
}

static void set_parent(itnode *n, itnode *parent)
{
	set_parent_color(n, parent, n->parent_color & COLOR_MASK);
}

static void set_color(itnode *n, uintptr_t color)
{
	set_parent_color(n, parent_of(n), color);
}

static itnode **link_of(itnode *n, int side)
{
	return side == LEFT ? &n->left : &n->right;
}

/* child() is an lvalue; set_child() stores through it for readers. */
#define child(n, side) (*link_of((n), (side)))
#define set_child(n, side, c) MRMGR__WRITE_ONCE(child(n, side), (c))

/* Point whatever referred to old (its parent's link, or the root) at new. */
static void replace_child(struct mrmgr__itree *t, itnode *parent, itnode *old,
			  itnode *new)
{
	if (!parent)
		MRMGR__WRITE_ONCE(t->root, new);
	else
		set_child(parent, parent->left == old ? LEFT : RIGHT, new);
}

/*
 * n's subtree lost a node whose end was gone (and nothing else changed
 * below n): recompute subtree_last from n rootwards, short of stop. Once
 * a value comes out unchanged, so do the ancestors' inputs: stop there.
 * A value above gone came from a node still there, so it and every
 * value above it stay: stop without reading the children (for a node
 * near the leaves, a sibling's cold cache line).
 */
static void propagate_lost(itnode *n, const itnode *stop, uint64_t gone)
{
	for (; n != stop; n = parent_of(n)) {
		uint64_t m;

		if (n->subtree_last > gone)
			break;
		m = compute_subtree_last(n);
		if (m == n->subtree_last)
			break;
		MRMGR__WRITE_ONCE(n->subtree_last, m);
	}
}

/*
 * Rotate x down towards side; its child on the other side rises into its
 * place. The risen node spans exactly what x spanned, so it inherits x's
 * subtree_last; x lost a subtree and is recomputed.
 */
static void rotate(struct mrmgr__itree *t, itnode *x, int side)
{
	itnode *y = child(x, !side);
	itnode *moved = child(y, side);
	itnode *parent = parent_of(x);

	set_child(x, !side, moved);
	if (moved)
		set_parent(moved, x);
	set_child(y, side, x);
	set_parent(y, parent);
	replace_child(t, parent, x, y);
	set_parent(x, y);

	MRMGR__WRITE_ONCE(y->subtree_last, x->subtree_last);
	MRMGR__WRITE_ONCE(x->subtree_last, compute_subtree_last(x));
}

void mrmgr__itree_init(struct mrmgr__itree *t)
{
	MRMGR__WRITE_ONCE(t->root, NULL);
	MRMGR__WRITE_ONCE(t->count, 0);
}

/* ------------------------------------------------------------ waiting nodes */

/*
 * A waiting node's parent is its list's head, and the head's parent is
 * this mark, which no tree node has: so a removal tells a waiting node
 * from a tree node by its parent's parent (a line it reads anyway), and
 * finds the head whose count it keeps. The head's and the mark's keys
 * match no query a reader makes (start > last for every range but
 * [0, UINT64_MAX], which no containment query asks), so a stale reader
 * that climbs there stops; the count lives in the head's subtree_last.
 */
static const itnode pending_mark = { .start = UINT64_MAX };

static bool is_head(const itnode *n)
{
	return n && parent_of(n) == &pending_mark;
}

int mrmgr__itree_is_pending(const itnode *node)
{
	return is_head(parent_of(node));
}

void mrmgr__itree_defer(struct mrmgr__itree_pending *p, itnode *node)
{
	itnode *h = &p->head;
	itnode *tail;

	if (!h->right) {
		MRMGR__WRITE_ONCE(h->start, UINT64_MAX);
		MRMGR__WRITE_ONCE(h->parent_color, (uintptr_t)&pending_mark);
		MRMGR__WRITE_ONCE(h->left, h);
		MRMGR__WRITE_ONCE(h->right, h);
	}
	tail = h->left;
	MRMGR__WRITE_ONCE(node->subtree_last, node->last);
	MRMGR__WRITE_ONCE(node->parent_color, (uintptr_t)h);
	MRMGR__WRITE_ONCE(node->left, tail);
	MRMGR__WRITE_ONCE(node->right, h);
	MRMGR__WRITE_ONCE(tail->right, node);
	MRMGR__WRITE_ONCE(h->left, node);
	h->subtree_last++;
}

/* Off the list of head h; its own links stay for stale readers. */
static void pending_unlink(itnode *h, itnode *node)
{
	MRMGR__WRITE_ONCE(node->left->right, node->right);
	MRMGR__WRITE_ONCE(node->right->left, node->left);
	h->subtree_last--;
}

void mrmgr__itree_flush_to(struct mrmgr__itree *t,
			   struct mrmgr__itree_pending *p, size_t keep)
{
	itnode *h = &p->head;

	while (h->right && h->subtree_last > keep) {
		itnode *n = h->right; /* the oldest */

		pending_unlink(h, n);
		mrmgr__itree_insert(t, n);
	}
}

void mrmgr__itree_flush(struct mrmgr__itree *t, struct mrmgr__itree_pending *p)
{
	mrmgr__itree_flush_to(t, p, 0);
}

void mrmgr__itree_pending_clear(struct mrmgr__itree_pending *p)
{
	if (p->head.right) {
		MRMGR__WRITE_ONCE(p->head.left, &p->head);
		MRMGR__WRITE_ONCE(p->head.right, &p->head);
		p->head.subtree_last = 0;
	}
}

/* Restore "no red node has a red child" after linking red node n. */
static void insert_fixup(struct mrmgr__itree *t, itnode *n)
{
	itnode *p;

	while ((p = parent_of(n)) && is_red(p)) {
		itnode *g = parent_of(p); /* exists: a red node is not the root */
		int side = g->right == p ? RIGHT : LEFT;
		itnode *uncle = child(g, !side);

		if (is_red(uncle)) {
			/* Push the red up two levels and look again there. */
			set_color(p, BLACK);
			set_color(uncle, BLACK);
			set_color(g, RED);
			n = g;
			continue;
		}
		if (n == child(p, !side)) {
			/* Inner grandchild: make it an outer one first. */
			rotate(t, p, side);
			n = p;
			p = parent_of(n);
		}
		set_color(p, BLACK);
		set_color(g, RED);
		rotate(t, g, !side);
		break;
	}
	set_color(t->root, BLACK);
}

void mrmgr__itree_insert(struct mrmgr__itree *t, itnode *node)
{
	itnode **link = &t->root;
	itnode *parent = NULL;
	/* In locals: the stores below are volatile, so the compiler would
	 * load node's keys again at every level. */
	uint64_t start = node->start, last = node->last;

	/* Equal starts go right; each node passed gains node's end. */
	while (*link) {
		parent = *link;
		if (parent->subtree_last < last)
			MRMGR__WRITE_ONCE(parent->subtree_last, last);
		link = start < parent->start ? &parent->left : &parent->right;
	}
	/*
	 * Fill the node in, then publish it with a release store so that a
	 * reader who finds it also sees these fields and the caller's keys.
	 */
	MRMGR__WRITE_ONCE(node->left, NULL);
	MRMGR__WRITE_ONCE(node->right, NULL);
	MRMGR__WRITE_ONCE(node->subtree_last, node->last);
	set_parent_color(node, parent, RED);
	__atomic_store_n(link, node, __ATOMIC_RELEASE);
	MRMGR__WRITE_ONCE(t->count, t->count + 1);
	insert_fixup(t, node);
}

/*
 * A black node was unlinked from below parent, leaving that side (now
 * NULL) one black short. Recolour upwards, or rotate to borrow a black
 * from the sibling's side.
 */
static void remove_fixup(struct mrmgr__itree *t, itnode *parent)
{
	itnode *x = NULL;

	while (x != t->root && !is_red(x)) {
		/* When x is NULL its sibling is not, so this finds x's side. */
		int side = parent->right == x ? RIGHT : LEFT;
		itnode *sib = child(parent, !side);

		if (is_red(sib)) {
			/* Make the sibling black so the cases below apply. */
			set_color(sib, BLACK);
			set_color(parent, RED);
			rotate(t, parent, side);
			sib = child(parent, !side);
		}
		if (!is_red(sib->left) && !is_red(sib->right)) {
			/* Take a black off the sibling's side too; move up. */
			set_color(sib, RED);
			x = parent;
			parent = parent_of(x);
			continue;
		}
		if (!is_red(child(sib, !side))) {
			/* Near nephew red, far one black: swing it to the far side. */
			set_color(child(sib, side), BLACK);
			set_color(sib, RED);
			rotate(t, sib, !side);
			sib = child(parent, !side);
		}
		/* Far nephew red: one rotation gives x's side its black back. */
		set_color(sib, parent->parent_color & COLOR_MASK);
		set_color(parent, BLACK);
		set_color(child(sib, !side), BLACK);
		rotate(t, parent, side);
		return;
	}
	if (x)
		set_color(x, BLACK);
}

void mrmgr__itree_remove(struct mrmgr__itree *t, itnode *z)
{
	itnode *parent = parent_of(z);

	if (is_head(parent)) {
		pending_unlink(parent, z);
		return;
	}
	MRMGR__WRITE_ONCE(t->count, t->count - 1);
	if (!z->left || !z->right) {
		/*
		 * A lone child is red under a black z: blacken it. A black
		 * leaf leaves a hole to repair.
		 */
		itnode *c = z->left ? z->left : z->right;

		replace_child(t, parent, z, c);
		if (c)
			set_parent_color(c, parent, BLACK);
		propagate_lost(parent, NULL, z->last);
		if (!c && !is_red(z))
			remove_fixup(t, parent);
		return;
	}

	/*
	 * Two children: the successor y (leftmost on the right, so it has no
	 * left child) takes z's place and colour; the tree loses a node of
	 * y's colour at y's old spot, where x moves up into.
	 */
	itnode *y = z->right;
	while (y->left)
		y = y->left;
	itnode *x = y->right;
	itnode *xparent = y;
	bool lost_black = !is_red(y);

	if (y != z->right) {
		xparent = parent_of(y);
		MRMGR__WRITE_ONCE(xparent->left, x);
		if (x)
			set_parent(x, xparent);
		MRMGR__WRITE_ONCE(y->right, z->right);
		set_parent(z->right, y);
	}
	MRMGR__WRITE_ONCE(y->left, z->left);
	set_parent(z->left, y);
	MRMGR__WRITE_ONCE(y->parent_color, z->parent_color);
	replace_child(t, parent, z, y);

	/*
	 * From y's old parent up to y's new spot, subtrees lost y; from y up,
	 * they lost z. Seeding y with z's old value lets the second walk's
	 * early stops compare against what the ancestors were built from.
	 */
	MRMGR__WRITE_ONCE(y->subtree_last, z->subtree_last);
	propagate_lost(xparent, y, y->last);
	propagate_lost(y, NULL, z->last);

	if (lost_black) {
		if (x) /* y had no left child, so a right child is red */
			set_color(x, BLACK);
		else
			remove_fixup(t, xparent);
	}
}

/* ------------------------------------------------------------ reader side */

/* Take a step from the query's budget; false once it is spent. */
static bool spend(int *budget)
{
	return (*budget)-- > 0;
}

/*
 * n's subtree holds a node with last >= start; find the in-order first
 * such node N. N overlaps when N->start <= last, and if not, no later node
 * can (starts only grow), so the answer is NULL.
 */
static itnode *subtree_first(itnode *n, uint64_t start, uint64_t last,
			     int *budget)
{
	while (n && spend(budget)) {
		itnode *l = MRMGR__READ_ONCE(n->left);

		if (l && MRMGR__READ_ONCE(l->subtree_last) >= start) {
			n = l;
			continue;
		}
		if (MRMGR__READ_ONCE(n->start) > last)
			return NULL;
		if (MRMGR__READ_ONCE(n->last) >= start)
			return n;
		n = MRMGR__READ_ONCE(n->right); /* so it is on the right */
	}
	return NULL;
}

itnode *mrmgr__itree_first_overlap(const struct mrmgr__itree *t,
				   uint64_t start, uint64_t last)
{
	itnode *root = MRMGR__READ_ONCE(t->root);
	int budget = QUERY_BUDGET;

	if (!root || MRMGR__READ_ONCE(root->subtree_last) < start)
		return NULL;
	return subtree_first(root, start, last, &budget);
}

itnode *mrmgr__itree_next_overlap(const itnode *n, uint64_t start,
				  uint64_t last)
{
	int budget = QUERY_BUDGET;

	for (;;) {
		itnode *r = MRMGR__READ_ONCE(n->right);
		const itnode *from;

		/* Successors within n's right subtree come first. */
		if (r && MRMGR__READ_ONCE(r->subtree_last) >= start)
			return subtree_first(r, start, last, &budget);

		/* Climb to the first ancestor reached from its left side. */
		do {
			from = n;
			n = parent_of(n);
			if (!n || !spend(&budget))
				return NULL;
		} while (MRMGR__READ_ONCE(n->right) == from);

		if (MRMGR__READ_ONCE(n->start) > last)
			return NULL; /* as does every later node */
		if (MRMGR__READ_ONCE(n->last) >= start)
			return (itnode *)n;
	}
}

itnode *mrmgr__itree_smallest_containing(const struct mrmgr__itree *t,
					 uint64_t start, uint64_t last)
{
	/*
	 * c contains the range when c->start <= start and c->last >= last:
	 * in the overlap walk's terms, c overlaps [last, start]. So that walk
	 * visits exactly the containers, by ascending start, and the first
	 * of the smallest size has the lowest start. Nothing beats an exact
	 * match. A consistent tree has at most count of them.
	 */
	size_t budget = MRMGR__READ_ONCE(t->count);
	itnode *best = NULL;
	uint64_t best_size = 0;

	for (itnode *n = mrmgr__itree_first_overlap(t, last, start);
	     n && budget--; n = mrmgr__itree_next_overlap(n, last, start)) {
		uint64_t size = MRMGR__READ_ONCE(n->last) -
				MRMGR__READ_ONCE(n->start);

		if (!best || size < best_size) {
			best = n;
			best_size = size;
			if (size == last - start)
				break;
		}
	}
	return best;
}

itnode *mrmgr__itree_find_containing(
	const struct mrmgr__itree *t, uint64_t start, uint64_t last,
	int (*match)(const itnode *n, const void *arg), const void *arg,
	unsigned int max_steps, int *gave_up)
{
	/* The containers, by ascending start, as smallest_containing walks
	 * them; each call is bounded on its own, max_steps bounds the walk. */
	unsigned int steps = 0;

	*gave_up = 0;
	for (itnode *n = mrmgr__itree_first_overlap(t, last, start); n;
	     n = mrmgr__itree_next_overlap(n, last, start)) {
		if (match(n, arg))
			return n;
		if (++steps >= max_steps) {
			*gave_up = 1;
			break;
		}
	}
	return NULL;
}

/* The leftmost node of n's subtree (NULL for a torn view). */
static itnode *leftmost(itnode *n)
{
	int budget = QUERY_BUDGET;
	itnode *l;

	while (n && (l = MRMGR__READ_ONCE(n->left)))
		n = spend(&budget) ? l : NULL;
	return n;
}

itnode *mrmgr__itree_first(const struct mrmgr__itree *t)
{
	return leftmost(MRMGR__READ_ONCE(t->root));
}

itnode *mrmgr__itree_next(const itnode *n)
{
	itnode *r = MRMGR__READ_ONCE(n->right);
	const itnode *from;
	int budget = QUERY_BUDGET;

	if (r)
		return leftmost(r);
	do {
		from = n;
		n = parent_of(n);
	} while (n && MRMGR__READ_ONCE(n->right) == from && spend(&budget));
	return budget < 0 ? NULL : (itnode *)n;
}
