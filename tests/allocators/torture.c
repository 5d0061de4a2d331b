/*
 * The allocator matrix's program (scripts/ci-allocators.sh): what a user
 * who loads another malloc sees. Built outside the tree with
 * `pkg-config --cflags --libs mrmgr mrmgr-sim` against the built or
 * installed library, run with no MRMGR_* set, with the allocator
 * preloaded (LD_PRELOAD) or linked ahead of libc.
 *
 * Two threads, each with its own eight buffers, change them with every
 * kind of memory event the allocator's presence can take over -- free()
 * and malloc() again, realloc(), munmap() and mmap() again, mmap(MAP_FIXED)
 * over, madvise(MADV_DONTNEED), mremap() shrink and grow back -- and
 * after each change get a registration of the buffer and write its first
 * and last byte through the rkey, as a remote peer would, then get an
 * untouched buffer again (a hit when all is well). The simulated HCA
 * knows each registered page's identity: a write that would land in
 * pages no longer mapped there answers ESTALE. Thread 0 forks seven
 * times; each child runs 300 events of its own on the same cache (a
 * fork empties it) and must see no stale write either.
 *
 * Prints one line: "allocator=... link=... gets=N hits=N stale=N
 * events=N children=K/7 sources=0x.. foreign=...". Exit 0 when no write
 * was stale and every child passed, 1 otherwise, 77 when page identity
 * cannot be checked (not root).
 *
 * SPDX-License-Identifier: MIT
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <mrmgr/mrmgr.h>
#include <mrmgr/sim.h>

#define SLOTS 8
#define CHILDREN 7
#define ACCESS (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE)

static struct ibv_pd *pd;
static mrmgr_cache_t *cache;
static long events = 10000;
static int no_fork, only = -1; /* TORTURE_NO_FORK, TORTURE_ONLY: to narrow a failure down */
static const size_t sizes[] = { 32 << 10, 64 << 10, 128 << 10, 256 << 10 };

struct slot {
	char *p;
	size_t n;
	int mapped; /* mmap'd by us (else malloc'd) */
};

struct worker {
	int id;
	unsigned int seed;
	unsigned long gets, stale, children_ok, children;
	int err;
	struct slot s[SLOTS];
};

/* get, write the first and last byte through the rkey, put. */
static int use(struct worker *w, struct slot *s)
{
	mrmgr_region_t *r;
	char b = 'r';
	int ret = mrmgr_get(cache, s->p, s->n, ACCESS, &r), st = 0;

	if (ret)
		return ret;
	w->gets++;
	for (int e = 0; e < 2 && !st; e++) {
		uint64_t a = (uint64_t)(uintptr_t)s->p + (e ? s->n - 1 : 0);

		ret = mrmgr_sim_write(pd, mrmgr_region_rkey(r), a, &b, 1);
		if (ret == ESTALE)
			st = 1;
		else if (ret) {
			mrmgr_put(r);
			return ret;
		}
	}
	w->stale += (unsigned long)st;
	mrmgr_put(r);
	return 0;
}

static int fill(struct slot *s, int mapped, size_t n)
{
	s->n = n;
	s->mapped = mapped;
	if (mapped) {
		s->p = mmap(NULL, n, PROT_READ | PROT_WRITE,
			    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (s->p == MAP_FAILED)
			return ENOMEM;
	} else if (!(s->p = malloc(n))) {
		return ENOMEM;
	}
	memset(s->p, 'm', n);
	return 0;
}

/* One change of a buffer, of a kind picked at random for its sort. */
static int change(struct worker *w, struct slot *s)
{
	size_t n = sizes[rand_r(&w->seed) % 4];
	int k = (int)(rand_r(&w->seed) % 4);
	char *q;

	if (only >= 0) {
		k = only % 4;
		if (s->mapped != (only >= 4)) {
			if (s->mapped)
				munmap(s->p, s->n);
			else
				free(s->p);
			return fill(s, only >= 4, n);
		}
	}

	if (!s->mapped) {
		if (k == 0) { /* realloc */
			q = realloc(s->p, n);
			if (!q)
				return ENOMEM;
			s->p = q;
			s->n = n;
			memset(q, 'r', n);
			return 0;
		}
		free(s->p);
		return fill(s, k == 1, n); /* free + malloc, or an mmap now */
	}
	switch (k) {
	case 0: /* munmap, mapped again (the same address, most often) */
		munmap(s->p, s->n);
		return fill(s, rand_r(&w->seed) % 2, n);
	case 1: /* mmap(MAP_FIXED) over it */
		if (mmap(s->p, s->n, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) == MAP_FAILED)
			return errno;
		memset(s->p, 'f', s->n);
		return 0;
	case 2: /* discard */
		if (madvise(s->p, s->n, MADV_DONTNEED))
			return errno;
		memset(s->p, 'd', s->n);
		return 0;
	default: /* shrink, grow back (new pages in the tail) */
		q = mremap(s->p, s->n, s->n / 2, 0);
		if (q == MAP_FAILED)
			return errno;
		q = mremap(s->p, s->n / 2, s->n, MREMAP_MAYMOVE);
		if (q == MAP_FAILED)
			return errno;
		s->p = q;
		memset(q, 'g', s->n);
		return 0;
	}
}

static int run(struct worker *w, long n, int may_fork);

/*
 * The other thread holds still while a child lives: the simulated HCA
 * pins as kernels before 5.9 did, where a registration made while a
 * child shares the pages copy-on-write stays on the page the parent's
 * next store moves away from (a fork hazard of its own, which
 * doc/monitor.md's fork section covers, not this matrix's subject).
 */
static pthread_mutex_t hold_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t hold_cv = PTHREAD_COND_INITIALIZER;
static int hold_wanted, held, other_done;

static void hold_point(void)
{
	pthread_mutex_lock(&hold_mu);
	if (hold_wanted) {
		held = 1;
		pthread_cond_broadcast(&hold_cv);
		while (hold_wanted)
			pthread_cond_wait(&hold_cv, &hold_mu);
		held = 0;
	}
	pthread_mutex_unlock(&hold_mu);
}

static void hold_other(int on)
{
	pthread_mutex_lock(&hold_mu);
	hold_wanted = on;
	pthread_cond_broadcast(&hold_cv);
	while (on && !held && !other_done)
		pthread_cond_wait(&hold_cv, &hold_mu);
	pthread_mutex_unlock(&hold_mu);
}

/* A child: the cache was emptied by the fork; 300 events of its own. */
static void child(struct worker *parent)
{
	struct worker w;

	memset(&w, 0, sizeof(w));
	w.seed = parent->seed + 77;
	_exit(run(&w, 300, 0) || w.stale ? 1 : 0);
}

static int run(struct worker *w, long n, int may_fork)
{
	int ret = 0;

	for (int i = 0; i < SLOTS && !ret; i++)
		ret = fill(&w->s[i], i % 2, sizes[i % 4]);
	for (long i = 0; i < n && !ret; i++) {
		struct slot *s = &w->s[rand_r(&w->seed) % SLOTS];

		if (may_fork && !no_fork && i % (n / (CHILDREN + 1)) == n / (CHILDREN + 1) / 2 &&
		    w->children < CHILDREN) {
			pid_t pid;
			int st;

			hold_other(1);
			pid = fork();
			if (pid == 0)
				child(w);
			w->children++;
			if (pid > 0 && waitpid(pid, &st, 0) == pid &&
			    WIFEXITED(st) && WEXITSTATUS(st) == 0)
				w->children_ok++;
			hold_other(0);
		} else if (!may_fork && w->id == 1) {
			hold_point();
		}
		ret = change(w, s);
		if (!ret)
			ret = use(w, s);
		if (!ret)
			ret = use(w, s);
		if (!ret)
			ret = use(w, &w->s[rand_r(&w->seed) % SLOTS]);
	}
	for (int i = 0; i < SLOTS; i++) {
		if (!w->s[i].p)
			continue;
		if (w->s[i].mapped)
			munmap(w->s[i].p, w->s[i].n);
		else
			free(w->s[i].p);
	}
	return ret;
}

static void *thread(void *arg)
{
	struct worker *w = arg;

	w->err = run(w, events, w->id == 0);
	if (w->id == 1) {
		pthread_mutex_lock(&hold_mu);
		other_done = 1;
		pthread_cond_broadcast(&hold_cv);
		pthread_mutex_unlock(&hold_mu);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	const char *alloc = getenv("ALLOCATOR"), *link = getenv("LINK_MODE");
	struct ibv_context *ctx;
	struct worker w[2];
	pthread_t t[2];
	struct mrmgr_stats st;
	struct mrmgr_monitor_info mi;
	struct mrmgr_sim_stats ss;
	unsigned long gets = 0, stale = 0, kids = 0, kids_ok = 0;
	int ret, ok = 1;

	if (argc > 1)
		events = atol(argv[1]);
	no_fork = getenv("TORTURE_NO_FORK") != NULL;
	if (getenv("TORTURE_ONLY"))
		only = atoi(getenv("TORTURE_ONLY"));
	if (events < 100)
		events = 100;
	if (!mrmgr_sim_page_identity_available()) {
		fprintf(stderr, "torture: page identity needs /proc/self/pagemap PFNs (root)\n");
		return 77;
	}
	if ((ret = mrmgr_sim_open(NULL, &ctx)) || (ret = mrmgr_sim_alloc_pd(ctx, &pd)) ||
	    (ret = mrmgr_cache_create(pd, NULL, &cache))) {
		fprintf(stderr, "torture: setup: %s\n", strerror(ret));
		return 1;
	}
	memset(w, 0, sizeof(w));
	for (int i = 0; i < 2; i++) {
		w[i].id = i;
		w[i].seed = 26u + (unsigned int)i;
		if (pthread_create(&t[i], NULL, thread, &w[i])) {
			fprintf(stderr, "torture: pthread_create failed\n");
			return 1;
		}
	}
	for (int i = 0; i < 2; i++) {
		pthread_join(t[i], NULL);
		if (w[i].err) {
			fprintf(stderr, "torture: thread %d: %s\n", i, strerror(w[i].err));
			ok = 0;
		}
		gets += w[i].gets;
		stale += w[i].stale;
		kids += w[i].children;
		kids_ok += w[i].children_ok;
	}
	memset(&st, 0, sizeof(st));
	memset(&mi, 0, sizeof(mi));
	mrmgr_cache_query_stats(cache, &st, sizeof(st));
	mrmgr_cache_query_monitor(cache, &mi, sizeof(mi));
	memset(&ss, 0, sizeof(ss));
	mrmgr_sim_query_stats(ctx, &ss, sizeof(ss));
	printf("allocator=%s link=%s gets=%lu hits=%llu stale=%lu events=%llu "
	       "children=%lu/%lu unverified_pages=%llu sources=%#x foreign=%s\n",
	       alloc ? alloc : "?", link ? link : "?", gets,
	       (unsigned long long)st.hits, stale,
	       (unsigned long long)mi.events, kids_ok, kids,
	       (unsigned long long)ss.unverified_pages, mi.sources,
#ifdef TORTURE_OLD_API /* a library from before mrmgr_monitor_info.foreign_object */
	       "n/a");
#else
	       mi.foreign_object[0] ? mi.foreign_object : "-");
#endif
	if (stale || ss.stale_accesses || kids_ok != kids || kids != CHILDREN)
		ok = 0;
	if (mrmgr_cache_destroy(cache) || mrmgr_sim_dealloc_pd(pd) ||
	    mrmgr_sim_close(ctx)) {
		fprintf(stderr, "torture: teardown failed\n");
		ok = 0;
	}
	return ok ? 0 : 1;
}
