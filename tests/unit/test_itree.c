/*
 * Interval tree tests: edge cases, a height bound, the invariant checker
 * itself, and a randomized comparison against a brute-force oracle with
 * the invariants checked after every step.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include <criterion/criterion.h>

#include "compiler.h"
#include "itree.h"

/* Cheap when it passes, unlike cr_assert: the random test runs millions. */
/* printf format of an interval */
#define RANGE "[%" PRIu64 ", %" PRIu64 "]"

#define CHECK(cond, ...)                                                    \
	do {                                                                \
		if (!(cond))                                                \
			cr_assert_fail(__VA_ARGS__);                        \
	} while (0)

struct tnode {
	struct mrmgr__itree_node n;
	bool in_tree;
	size_t live_pos; /* index in the oracle's live array */
	unsigned stamp;  /* last enumeration that returned this node */
};

static struct tnode *tn(struct mrmgr__itree_node *n)
{
	return mrmgr__container_of(n, struct tnode, n);
}

static bool overlaps(const struct mrmgr__itree_node *n, uint64_t s,
		     uint64_t l)
{
	return n->start <= l && n->last >= s;
}

static void set_range(struct tnode *x, uint64_t s, uint64_t l)
{
	x->n.start = s;
	x->n.last = l;
}

static size_t count_overlaps(const struct mrmgr__itree *t, uint64_t s,
			     uint64_t l)
{
	size_t k = 0;
	uint64_t prev = 0;

	for (struct mrmgr__itree_node *n = mrmgr__itree_first_overlap(t, s, l);
	     n; n = mrmgr__itree_next_overlap(n, s, l)) {
		cr_assert(overlaps(n, s, l));
		cr_assert_geq(n->start, prev);
		prev = n->start;
		k++;
	}
	return k;
}

static int height(const struct mrmgr__itree_node *n)
{
	if (!n)
		return 0;
	int l = height(n->left), r = height(n->right);
	return 1 + (l > r ? l : r);
}

/* h <= 2 * log2(n + 1), i.e. 2^h <= (n + 1)^2, without floating point. */
static bool height_ok(int h, uint64_t n)
{
	return h < 64 && (UINT64_C(1) << h) <= (n + 1) * (n + 1);
}

/* ------------------------------------------------------------ edge cases */

Test(itree, empty)
{
	struct mrmgr__itree t;

	mrmgr__itree_init(&t);
	cr_assert_eq(mrmgr__itree_check(&t), 0);
	cr_assert_null(mrmgr__itree_first(&t));
	cr_assert_null(mrmgr__itree_first_overlap(&t, 0, UINT64_MAX));
	cr_assert_null(mrmgr__itree_first_overlap(&t, 5, 5));
	cr_assert_null(mrmgr__itree_smallest_containing(&t, 0, 0));
	cr_assert_null(mrmgr__itree_smallest_containing(&t, 0, UINT64_MAX));
}

Test(itree, single_node)
{
	struct mrmgr__itree t;
	struct tnode a = { 0 };

	mrmgr__itree_init(&t);
	set_range(&a, 10, 20);
	mrmgr__itree_insert(&t, &a.n);
	cr_assert_eq(mrmgr__itree_check(&t), 0);
	cr_assert_eq(t.count, 1);
	cr_assert_eq(mrmgr__itree_first(&t), &a.n);
	cr_assert_null(mrmgr__itree_next(&a.n));

	cr_assert_null(mrmgr__itree_first_overlap(&t, 0, 9));
	cr_assert_null(mrmgr__itree_first_overlap(&t, 21, UINT64_MAX));
	cr_assert_eq(mrmgr__itree_first_overlap(&t, 0, 10), &a.n);
	cr_assert_eq(mrmgr__itree_first_overlap(&t, 20, 30), &a.n);
	cr_assert_eq(mrmgr__itree_first_overlap(&t, 12, 13), &a.n);
	cr_assert_eq(mrmgr__itree_first_overlap(&t, 0, UINT64_MAX), &a.n);
	cr_assert_null(mrmgr__itree_next_overlap(&a.n, 0, UINT64_MAX));

	cr_assert_eq(mrmgr__itree_smallest_containing(&t, 10, 20), &a.n);
	cr_assert_eq(mrmgr__itree_smallest_containing(&t, 15, 15), &a.n);
	cr_assert_null(mrmgr__itree_smallest_containing(&t, 9, 20));
	cr_assert_null(mrmgr__itree_smallest_containing(&t, 10, 21));
	cr_assert_null(mrmgr__itree_smallest_containing(&t, 0, 5));

	mrmgr__itree_remove(&t, &a.n);
	cr_assert_eq(mrmgr__itree_check(&t), 0);
	cr_assert_null(t.root);
	cr_assert_eq(t.count, 0);
}

Test(itree, all_same_start)
{
	enum { N = 200 };
	static struct tnode v[N];
	struct mrmgr__itree t;

	mrmgr__itree_init(&t);
	/* Ends 5 + i inserted in a scrambled order (67 is coprime to N). */
	for (int i = 0; i < N; i++) {
		int j = (i * 67) % N;

		set_range(&v[j], 5, 5 + (uint64_t)j);
		mrmgr__itree_insert(&t, &v[j].n);
		cr_assert_eq(mrmgr__itree_check(&t), 0);
	}
	cr_assert_eq(count_overlaps(&t, 0, 5), N);
	cr_assert_eq(count_overlaps(&t, 5 + N - 1, UINT64_MAX), 1);
	cr_assert_eq(count_overlaps(&t, 5 + 100, 5 + 100), N - 100);
	cr_assert_eq(count_overlaps(&t, 0, 4), 0);
	cr_assert_eq(mrmgr__itree_smallest_containing(&t, 5, 5), &v[0].n);
	cr_assert_eq(mrmgr__itree_smallest_containing(&t, 5, 50), &v[45].n);
	cr_assert_eq(mrmgr__itree_smallest_containing(&t, 7, 50), &v[45].n);
	cr_assert_null(mrmgr__itree_smallest_containing(&t, 4, 5));
	cr_assert_null(mrmgr__itree_smallest_containing(&t, 5, 5 + N));

	/* The in-order walk sees every node once. */
	size_t k = 0;
	for (struct mrmgr__itree_node *n = mrmgr__itree_first(&t); n;
	     n = mrmgr__itree_next(n))
		k++;
	cr_assert_eq(k, N);

	for (int i = 0; i < N; i++) {
		mrmgr__itree_remove(&t, &v[(i * 31) % N].n);
		cr_assert_eq(mrmgr__itree_check(&t), 0);
	}
	cr_assert_null(t.root);
}

Test(itree, extremes)
{
	struct mrmgr__itree t;
	struct tnode top = { 0 }, all = { 0 }, near = { 0 }, zero = { 0 };

	mrmgr__itree_init(&t);
	set_range(&top, UINT64_MAX, UINT64_MAX);
	set_range(&all, 0, UINT64_MAX);
	set_range(&near, UINT64_MAX - 1, UINT64_MAX);
	set_range(&zero, 0, 0);
	mrmgr__itree_insert(&t, &top.n);
	mrmgr__itree_insert(&t, &all.n);
	mrmgr__itree_insert(&t, &near.n);
	mrmgr__itree_insert(&t, &zero.n);
	cr_assert_eq(mrmgr__itree_check(&t), 0);

	cr_assert_eq(count_overlaps(&t, UINT64_MAX, UINT64_MAX), 3);
	cr_assert_eq(count_overlaps(&t, 0, 0), 2);
	cr_assert_eq(count_overlaps(&t, 1, UINT64_MAX - 2), 1);
	cr_assert_eq(count_overlaps(&t, 0, UINT64_MAX), 4);
	cr_assert_eq(mrmgr__itree_smallest_containing(&t, UINT64_MAX, UINT64_MAX),
		     &top.n);
	cr_assert_eq(mrmgr__itree_smallest_containing(&t, UINT64_MAX - 1,
						      UINT64_MAX), &near.n);
	cr_assert_eq(mrmgr__itree_smallest_containing(&t, 0, 0), &zero.n);
	cr_assert_eq(mrmgr__itree_smallest_containing(&t, 0, UINT64_MAX), &all.n);
	cr_assert_eq(mrmgr__itree_smallest_containing(&t, 7, 9), &all.n);
}

/* Ties on size go to the lowest start, whatever the insertion order. */
Test(itree, smallest_ties)
{
	struct mrmgr__itree t;
	struct tnode v[4] = { 0 };

	mrmgr__itree_init(&t);
	set_range(&v[0], 40, 60);
	set_range(&v[1], 30, 50);
	set_range(&v[2], 35, 55);
	set_range(&v[3], 0, 100);
	for (int i = 0; i < 4; i++)
		mrmgr__itree_insert(&t, &v[i].n);
	cr_assert_eq(mrmgr__itree_smallest_containing(&t, 45, 48), &v[1].n);
	cr_assert_eq(mrmgr__itree_smallest_containing(&t, 45, 52), &v[2].n);
	cr_assert_eq(mrmgr__itree_smallest_containing(&t, 45, 58), &v[0].n);
	cr_assert_eq(mrmgr__itree_smallest_containing(&t, 45, 61), &v[3].n);
}

/* ------------------------------------------------------------ height */

Test(itree, height_sorted_inserts)
{
	enum { N = 100000 };
	struct tnode *v = calloc(N, sizeof(*v));
	struct mrmgr__itree t;

	cr_assert_not_null(v);
	mrmgr__itree_init(&t);
	for (int i = 0; i < N; i++) {
		set_range(&v[i], (uint64_t)i * 16, (uint64_t)i * 16 + 100);
		mrmgr__itree_insert(&t, &v[i].n);
	}
	cr_assert_eq(mrmgr__itree_check(&t), 0);
	int h = height(t.root);
	cr_assert(height_ok(h, N), "height %d for %d nodes", h, N);
	cr_assert_geq(h, 17); /* a balanced tree of 100k is this high at least */

	/* Removing in order is the other degenerate pattern. */
	for (int i = 0; i < N / 2; i++)
		mrmgr__itree_remove(&t, &v[i].n);
	cr_assert_eq(mrmgr__itree_check(&t), 0);
	h = height(t.root);
	cr_assert(height_ok(h, N / 2), "height %d after removals", h);
	cr_assert_eq(count_overlaps(&t, 0, UINT64_MAX), N / 2);
	free(v);
}

/* ------------------------------------------------------------ the checker */

/* The checker must notice each kind of damage, or the random test is blind. */
Test(itree, check_detects_corruption)
{
	enum { N = 100 };
	static struct tnode v[N];
	struct mrmgr__itree t;

	mrmgr__itree_init(&t);
	for (int i = 0; i < N; i++) {
		set_range(&v[i], (uint64_t)i * 10, (uint64_t)i * 10 + (i % 7) * 13);
		mrmgr__itree_insert(&t, &v[i].n);
	}
	cr_assert_eq(mrmgr__itree_check(&t), 0);

	struct mrmgr__itree_node *root = t.root, *leaf = root, *black = NULL;
	while (leaf->left)
		leaf = leaf->left;
	for (int i = 0; i < N && !black; i++)
		if (&v[i].n != root && (v[i].n.parent_color & 1))
			black = &v[i].n;
	cr_assert_not_null(black);

	leaf->subtree_last++;
	cr_assert_neq(mrmgr__itree_check(&t), 0, "stale subtree_last");
	leaf->subtree_last--;

	root->parent_color ^= 1;
	cr_assert_neq(mrmgr__itree_check(&t), 0, "red root");
	root->parent_color ^= 1;

	black->parent_color ^= 1;
	cr_assert_neq(mrmgr__itree_check(&t), 0, "recoloured black node");
	black->parent_color ^= 1;

	uint64_t s = root->start; /* the left subtree holds larger starts */
	root->start = 0;
	cr_assert_neq(mrmgr__itree_check(&t), 0, "out of order");
	root->start = s;

	uintptr_t pc = root->left->parent_color;
	root->left->parent_color = (uintptr_t)root->right | (pc & 1);
	cr_assert_neq(mrmgr__itree_check(&t), 0, "bad parent pointer");
	root->left->parent_color = pc;

	t.count++;
	cr_assert_neq(mrmgr__itree_check(&t), 0, "wrong count");
	t.count--;

	cr_assert_eq(mrmgr__itree_check(&t), 0);
}

/* ------------------------------------------------------------ random oracle */

enum { MAX_LIVE = 2000, OPS = 100000, PHASE = 4096 };

struct rng {
	uint64_t s;
};

/* splitmix64: tiny, and good enough to drive a test. */
static uint64_t rnd(struct rng *r)
{
	uint64_t z = (r->s += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

/* Uniform-ish in [a, b], including the full 64-bit range. */
static uint64_t rnd_between(struct rng *r, uint64_t a, uint64_t b)
{
	if (b - a == UINT64_MAX)
		return rnd(r);
	return a + rnd(r) % (b - a + 1);
}

static uint64_t min_u64(uint64_t a, uint64_t b)
{
	return a < b ? a : b;
}

struct world {
	struct rng rng;
	struct mrmgr__itree t;
	struct tnode pool[MAX_LIVE];
	struct tnode *live[MAX_LIVE];
	size_t nlive;
	struct tnode *free_list[MAX_LIVE];
	size_t nfree;
	uint64_t span;    /* key space of the "dense" intervals this phase */
	bool wide;        /* this phase inserts some huge intervals */
	unsigned stamp;
	struct mrmgr__itree_node *seq[MAX_LIVE];
	bool lazy;        /* half the insertions wait on p until a query */
	struct mrmgr__itree_pending p;
	size_t npending;
};

/*
 * An interval drawn from a mix meant to hit the awkward cases: dense keys
 * (many equal starts at small spans), single points, intervals nested in or
 * around live ones, starts shared with live ones, and ends at UINT64_MAX.
 */
static void gen(struct world *w, bool query, uint64_t *s, uint64_t *l)
{
	struct rng *r = &w->rng;
	unsigned kind = rnd(r) % 100;
	const struct mrmgr__itree_node *ref =
		w->nlive ? &w->live[rnd(r) % w->nlive]->n : NULL;

	if (!ref && kind >= 40 && kind < 80)
		kind = 0;
	/* Few huge nodes, or nearly every query would hit one of them. */
	if (!query && kind >= 90 && (!w->wide || rnd(r) % 8))
		kind = 0;
	if (kind < 40) {
		uint64_t len = rnd(r) % 4;

		*s = rnd(r) % w->span;
		len = len == 0 ? 0 : len == 1 ? rnd(r) % 512 : rnd(r) % 32;
		*l = *s + len;
	} else if (kind < 55) { /* same start as a live node */
		*s = ref->start;
		*l = *s + min_u64(rnd(r) % 64, UINT64_MAX - *s);
		if (rnd(r) % 4 == 0)
			*l = ref->last;
	} else if (kind < 70) { /* nested inside a live node */
		*s = rnd_between(r, ref->start, ref->last);
		*l = rnd_between(r, *s, ref->last);
	} else if (kind < 80) { /* enclosing a live node */
		*s = ref->start - min_u64(rnd(r) % 64, ref->start);
		*l = ref->last + min_u64(rnd(r) % 64, UINT64_MAX - ref->last);
	} else if (kind < 90) { /* touching the top of the address space */
		*s = UINT64_MAX - rnd(r) % 1024;
		*l = rnd(r) % 3 == 0 ? UINT64_MAX : rnd_between(r, *s, UINT64_MAX);
	} else if (kind < 95) { /* huge */
		*s = rnd(r) % 16;
		*l = UINT64_MAX - rnd(r) % 16;
	} else {
		*s = rnd(r);
		*l = rnd_between(r, *s, UINT64_MAX);
	}
}

static void do_insert(struct world *w)
{
	struct tnode *x = w->free_list[--w->nfree];
	uint64_t s, l;

	gen(w, false, &s, &l);
	set_range(x, s, l);
	if (w->lazy && rnd(&w->rng) % 2) {
		mrmgr__itree_defer(&w->p, &x->n);
		CHECK(mrmgr__itree_is_pending(&x->n), "deferred, not waiting");
		w->npending++;
	} else {
		mrmgr__itree_insert(&w->t, &x->n);
		CHECK(!mrmgr__itree_is_pending(&x->n), "inserted, waiting");
	}
	x->in_tree = true;
	x->live_pos = w->nlive;
	w->live[w->nlive++] = x;
}

static void do_remove(struct world *w)
{
	/* One removal in eight takes the root, the rest any node. */
	struct tnode *x = rnd(&w->rng) % 8 == 0 && w->t.root ?
				  tn(w->t.root) :
				  w->live[rnd(&w->rng) % w->nlive];

	if (mrmgr__itree_is_pending(&x->n))
		w->npending--; /* leaves the list, not the tree */
	mrmgr__itree_remove(&w->t, &x->n);
	x->in_tree = false;
	w->live[x->live_pos] = w->live[--w->nlive];
	w->live[x->live_pos]->live_pos = x->live_pos;
	w->free_list[w->nfree++] = x;
}

/* The tree's overlap set must be the oracle's, by non-decreasing start. */
static void query_overlap(struct world *w, bool check_order)
{
	uint64_t s, l, prev = 0;
	size_t k = 0, expect = 0;

	gen(w, true, &s, &l);
	w->stamp++;
	for (struct mrmgr__itree_node *n = mrmgr__itree_first_overlap(&w->t, s, l);
	     n; n = mrmgr__itree_next_overlap(n, s, l)) {
		struct tnode *x = tn(n);

		CHECK(k < w->nlive, "more results than nodes for " RANGE, s, l);
		CHECK(x->in_tree && overlaps(n, s, l) && x->stamp != w->stamp,
		      "bad result " RANGE " for " RANGE, n->start, n->last, s,
		      l);
		CHECK(n->start >= prev, "results out of order");
		x->stamp = w->stamp;
		prev = n->start;
		w->seq[k++] = n;
	}
	for (size_t i = 0; i < w->nlive; i++)
		expect += overlaps(&w->live[i]->n, s, l);
	CHECK(k == expect, RANGE ": %zu results, oracle %zu", s, l, k, expect);

	if (!check_order)
		return;
	/* The first/next sequence is exactly the in-order walk, filtered. */
	size_t i = 0;
	for (struct mrmgr__itree_node *n = mrmgr__itree_first(&w->t); n;
	     n = mrmgr__itree_next(n))
		if (overlaps(n, s, l))
			CHECK(i < k && w->seq[i++] == n, "not in-order");
	CHECK(i == k, "in-order walk disagrees");
}

static void query_smallest(struct world *w)
{
	uint64_t s, l;
	const struct mrmgr__itree_node *best = NULL;

	gen(w, true, &s, &l);
	for (size_t i = 0; i < w->nlive; i++) {
		const struct mrmgr__itree_node *n = &w->live[i]->n;

		if (n->start > s || n->last < l)
			continue;
		if (!best || n->last - n->start < best->last - best->start ||
		    (n->last - n->start == best->last - best->start &&
		     n->start < best->start))
			best = n;
	}

	const struct mrmgr__itree_node *got =
		mrmgr__itree_smallest_containing(&w->t, s, l);
	if (!best) {
		CHECK(!got, RANGE ": found a container, oracle none", s, l);
		return;
	}
	CHECK(got && tn((struct mrmgr__itree_node *)got)->in_tree,
	      RANGE ": no container found", s, l);
	CHECK(got->start <= s && got->last >= l, "not a container");
	CHECK(got->last - got->start == best->last - best->start &&
		      got->start == best->start,
	      RANGE ": got " RANGE ", oracle " RANGE, s, l, got->start,
	      got->last, best->start, best->last);
}

/* Queries need the whole tree: what waits goes in first. */
static void flush(struct world *w)
{
	mrmgr__itree_flush(&w->t, &w->p);
	CHECK(mrmgr__itree_pending_empty(&w->p), "flushed, still waiting");
	w->npending = 0;
}

static void random_run(uint64_t seed, bool lazy)
{
	struct world *w = calloc(1, sizeof(*w));
	unsigned p_insert = 40, p_remove = 20;

	cr_assert_not_null(w);
	w->lazy = lazy;
	w->rng.s = seed;
	w->span = 4096;
	mrmgr__itree_init(&w->t);
	for (size_t i = 0; i < MAX_LIVE; i++)
		w->free_list[w->nfree++] = &w->pool[MAX_LIVE - 1 - i];

	for (long op = 0; op < OPS; op++) {
		if (op % PHASE == 0) {
			/* Alternate growing and shrinking, and vary density. */
			static const uint64_t spans[] = { 16, 4096, 1 << 20 };
			bool grow = (op / PHASE) % 2 == 0;

			p_insert = grow ? 50 : 10;
			p_remove = grow ? 10 : 50;
			w->span = spans[rnd(&w->rng) % 3];
			w->wide = rnd(&w->rng) % 3 == 0;
		}

		unsigned r = rnd(&w->rng) % 100;
		if (r < p_insert) {
			if (w->nfree)
				do_insert(w);
		} else if (r < p_insert + p_remove) {
			if (w->nlive)
				do_remove(w);
		} else if (r < 80) {
			flush(w);
			query_overlap(w, op % 32 == 0);
		} else if (!lazy || r < 95) {
			flush(w);
			query_smallest(w);
		} /* else a lazy run leaves the list to grow a while */

		int err = mrmgr__itree_check(&w->t);
		CHECK(err == 0, "seed %" PRIu64 " op %ld: check %d", seed, op, err);
		CHECK(w->t.count + w->npending == w->nlive,
		      "count %zu + %zu waiting, oracle %zu", w->t.count,
		      w->npending, w->nlive);
	}
	free(w);
}

Test(itree_random, seed_1) { random_run(1, false); }
Test(itree_random, seed_2) { random_run(0xdeadbeefULL, false); }
Test(itree_random, seed_3) { random_run(0x0123456789abcdefULL, false); }
Test(itree_random, seed_4) { random_run(20240607, false); }
/* Insertions that wait (and removals of waiting nodes) between queries. */
Test(itree_random, lazy_seed_1) { random_run(7, true); }
Test(itree_random, lazy_seed_2) { random_run(0xfeedfaceULL, true); }

/* Waiting nodes: zeroed list empty, O(1) removal, flush, clear. */
Test(itree, pending_list)
{
	struct mrmgr__itree t;
	struct mrmgr__itree_pending p = { 0 };
	struct tnode x[4] = { 0 };

	mrmgr__itree_init(&t);
	cr_assert(mrmgr__itree_pending_empty(&p));
	mrmgr__itree_flush(&t, &p); /* nothing to do */
	cr_assert_eq(t.count, 0);
	for (int i = 0; i < 4; i++) {
		set_range(&x[i], 100 * (uint64_t)i, 100 * (uint64_t)i + 50);
		mrmgr__itree_defer(&p, &x[i].n);
	}
	cr_assert_not(mrmgr__itree_pending_empty(&p));
	cr_assert_null(mrmgr__itree_first_overlap(&t, 0, UINT64_MAX),
		       "waiting nodes are not in the tree");
	/* First, middle: out of the list, the rest still linked. */
	mrmgr__itree_remove(&t, &x[0].n);
	mrmgr__itree_remove(&t, &x[2].n);
	cr_assert_eq(t.count, 0);
	mrmgr__itree_flush(&t, &p);
	cr_assert(mrmgr__itree_pending_empty(&p));
	cr_assert_eq(t.count, 2);
	cr_assert_eq(mrmgr__itree_check(&t), 0);
	cr_assert_eq(mrmgr__itree_first_overlap(&t, 0, UINT64_MAX), &x[1].n);
	cr_assert_eq(mrmgr__itree_next_overlap(&x[1].n, 0, UINT64_MAX), &x[3].n);
	cr_assert_not(mrmgr__itree_is_pending(&x[1].n));
	/* Out of the tree again (a tree node now), then waiting and forgotten. */
	mrmgr__itree_remove(&t, &x[1].n);
	cr_assert_eq(t.count, 1);
	mrmgr__itree_defer(&p, &x[1].n);
	mrmgr__itree_pending_clear(&p);
	cr_assert(mrmgr__itree_pending_empty(&p));
	mrmgr__itree_flush(&t, &p);
	cr_assert_eq(t.count, 1);
	cr_assert_eq(mrmgr__itree_check(&t), 0);
	/* Partly: the oldest go in first, the count follows. */
	mrmgr__itree_defer(&p, &x[0].n);
	mrmgr__itree_defer(&p, &x[1].n);
	mrmgr__itree_defer(&p, &x[2].n);
	cr_assert_eq(mrmgr__itree_pending_count(&p), 3);
	mrmgr__itree_flush_to(&t, &p, 1);
	cr_assert_eq(mrmgr__itree_pending_count(&p), 1);
	cr_assert_not(mrmgr__itree_is_pending(&x[0].n));
	cr_assert_not(mrmgr__itree_is_pending(&x[1].n));
	cr_assert(mrmgr__itree_is_pending(&x[2].n));
	cr_assert_eq(t.count, 3);
	cr_assert_eq(mrmgr__itree_check(&t), 0);
	mrmgr__itree_remove(&t, &x[2].n);
	cr_assert(mrmgr__itree_pending_empty(&p));
	cr_assert_eq(t.count, 3);
}
