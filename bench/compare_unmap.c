/*
 * bench/compare: what unmapping costs with a cache's memory-event source
 * installed, against plain libc in a process without a cache. Every
 * figure comes from a fresh process (this program re-executed with
 * --unmap-child): a source, once installed, stays for the life of the
 * process and would tax whatever ran next; and in one process UCX's
 * hooks and libmrmgr's patched libc exclude each other.
 *
 * Per process: 100,000 regions registered first (64 KiB each, 128 KiB
 * apart, in a mapping of their own; zero registration cost), then pairs
 * of operations run interleaved (the order flipping every round, so load
 * and drift fall on both alike), each operation timed on its own, the
 * median of each taken:
 *   - mmap + munmap of 64 KiB the cache never saw, through libc, against
 *     the same through syscall() (past any hook);
 *   - munmap alone of a mapping the cache holds (get+put before), through
 *     libc, against a raw munmap of a mapping nobody saw;
 *   - free alone of a 256 KiB chunk the cache holds, against free of one
 *     it does not hold. Chunks must be mmap'd: M_MMAP_THRESHOLD is set to
 *     128 KiB in every process, and a chunk glibc serves from free heap
 *     space all the same is set aside untimed, freed at the end, and the
 *     round repeated.
 * The cost a source adds is the libc-over-raw difference of its process
 * minus that of a process without a cache (a few ns of libc's wrapper).
 * A cache whose source does not cover munmap is told by its invalidate
 * call before munmap (timed with it), as its contract asks of the caller.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <errno.h>
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "compare.h"

#define LEN (64 * KiB)
#define CHUNK (256 * KiB)
#define LIVE 100000
#define LIVE_STRIDE (128 * KiB)
#define MAX_PARKED 4096 /* heap-served chunks set aside: 1 GiB at most */

struct unmap_result unmap_med[3];
int unmap_measured;

enum { PAIR_MMAP, PAIR_MALLOC, MUNMAP, FREE };

/*
 * glibc serves a request above the mmap threshold from free heap space
 * when the heap has it (the threshold only decides how the heap grows),
 * and a cache that freed many small allocations leaves such space. The
 * chunk header's IS_MMAPPED bit (glibc's layout: the size word before
 * the pointer, bit 1) says which it got.
 */
static int chunk_mmapped(void *p)
{
	const size_t *size = (const size_t *)((uintptr_t)p - sizeof(size_t));

	return (int)(*size & 2);
}

/* One timed operation: what, on memory the cache holds (held), through
 * the raw system calls (raw: mmap kinds only, past any hook). */
struct op {
	int kind, held, raw;
};

static void *parked[MAX_PARKED];
static uint64_t nparked;

static double one(const struct op *o, const struct drv_ops *ops,
		  struct drv *d)
{
	int mall = o->kind == PAIR_MALLOC || o->kind == FREE;
	int pair = o->kind == PAIR_MMAP || o->kind == PAIR_MALLOC;
	size_t len = mall ? CHUNK : LEN;
	double t0, t1;
	void *p;

again:
	t0 = now_ns();
	if (mall)
		p = malloc(len);
	else if (o->raw)
		p = (void *)syscall(SYS_mmap, NULL, len, PROT_READ | PROT_WRITE,
				    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	else
		p = mmap(NULL, len, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (!p || p == MAP_FAILED)
		exit(3);
	if (mall && !chunk_mmapped(p)) {
		/* Served from free heap space: not what is measured. Kept
		 * until the end, so the heap's free space runs out and
		 * malloc maps chunks again. */
		if (nparked == MAX_PARKED)
			exit(10);
		parked[nparked++] = p;
		goto again;
	}
	if (o->held && ops) {
		void *h = ops->get(d, p, len);

		if (!h)
			exit(4);
		ops->put(d, h);
	}
	if (!pair)
		t0 = now_ns();
	if (o->held && ops && ops->invalidate)
		ops->invalidate(d, p, len);
	if (mall)
		free(p);
	else if (o->raw)
		syscall(SYS_munmap, p, len);
	else
		munmap(p, len);
	t1 = now_ns();
	return t1 - t0;
}

/*
 * a and b interleaved (the order flips every round, so drift and load
 * fall on both alike), iters timed rounds after a tenth more as warm-up:
 * the median ns of each.
 */
static void interleaved(const struct op *a, const struct op *b,
			const struct drv_ops *ops, struct drv *d,
			uint64_t iters, double *ma, double *mb)
{
	uint64_t warm = iters / 10;
	double *ta = calloc(iters, sizeof(*ta)), *tb = calloc(iters, sizeof(*tb));

	if (!ta || !tb)
		exit(9);
	for (uint64_t i = 0; i < iters + warm; i++) {
		double x, y;

		if (i & 1) {
			y = one(b, ops, d);
			x = one(a, ops, d);
		} else {
			x = one(a, ops, d);
			y = one(b, ops, d);
		}
		if (i >= warm) {
			ta[i - warm] = x;
			tb[i - warm] = y;
		}
	}
	while (nparked)
		free(parked[--nparked]);
	qsort(ta, iters, sizeof(*ta), cmp_double);
	qsort(tb, iters, sizeof(*tb), cmp_double);
	*ma = ta[iters / 2];
	*mb = tb[iters / 2];
	free(ta);
	free(tb);
}

int unmap_child(const char *impl, uint64_t live, uint64_t iters, int fd)
{
	static const struct cost_model zero = { 0, 0 };
	struct unmap_result r;
	const struct drv_ops *ops = NULL;
	struct drv *d = NULL;

	memset(&r, 0, sizeof(r));
	/* The same allocator setting in every process, cache or not. */
	mallopt(M_MMAP_THRESHOLD, 128 * 1024);
	if (!strcmp(impl, "libmrmgr"))
		ops = &mrmgr_drv;
#ifdef HAVE_UCX
	else if (!strcmp(impl, "UCX"))
		ops = &ucx_drv;
#endif
	else if (strcmp(impl, "libc"))
		return 2;
	if (ops) {
		char *area;

		if (ops->open(&d, 4 * (live + iters) + 64, (uint64_t)1 << 50,
			      &zero))
			return 5;
		area = mmap(NULL, live * LIVE_STRIDE + LIVE_STRIDE,
			    PROT_READ | PROT_WRITE,
			    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
		if (area == MAP_FAILED)
			return 6;
		for (uint64_t i = 0; i < live; i++) {
			void *h = ops->get(d, area + i * LIVE_STRIDE, LEN);

			if (!h)
				return 7;
			ops->put(d, h);
		}
		snprintf(r.source, sizeof(r.source), "%s", ops->event_source(d));
		r.is_default = ops->is_default(d);
	}
	{
		const struct op pair = { PAIR_MMAP, 0, 0 }, pair_raw = { PAIR_MMAP, 0, 1 },
				un = { MUNMAP, 1, 0 }, un_raw = { MUNMAP, 0, 1 },
				fr = { FREE, 1, 0 }, fr_cold = { FREE, 0, 0 },
				mf = { PAIR_MALLOC, 0, 0 };
		double unused;

		interleaved(&pair, &pair_raw, ops, d, iters, &r.pair_mmap,
			    &r.pair_raw);
		interleaved(&un, &un_raw, ops, d, iters, &r.munmap_held,
			    &r.munmap_raw);
		interleaved(&fr, &fr_cold, ops, d, iters, &r.free_held,
			    &r.free_cold);
		interleaved(&mf, &mf, ops, d, iters / 2, &r.pair_malloc,
			    &unused);
	}
	if (ops) {
		if (ops->unwatched(d))
			snprintf(r.source + strlen(r.source),
				 sizeof(r.source) - strlen(r.source),
				 " (%llu gets uncached)",
				 (unsigned long long)ops->unwatched(d));
	}
	if (write(fd, &r, sizeof(r)) != (ssize_t)sizeof(r))
		return 8;
	/* No teardown: the process ends here, and a cache's teardown is
	 * not what is measured. */
	return 0;
}

static int unmap_run(const char *self, const char *impl, uint64_t live,
		     uint64_t iters, struct unmap_result *r)
{
	int fds[2], status;
	pid_t pid;
	ssize_t n;

	if (pipe(fds))
		return -1;
	pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		char a_live[32], a_iters[32], a_fd[16];

		close(fds[0]);
		snprintf(a_live, sizeof(a_live), "%llu", (unsigned long long)live);
		snprintf(a_iters, sizeof(a_iters), "%llu",
			 (unsigned long long)iters);
		snprintf(a_fd, sizeof(a_fd), "%d", fds[1]);
		execl(self, self, "--unmap-child", impl, a_live, a_iters, a_fd,
		      (char *)NULL);
		_exit(127);
	}
	close(fds[1]);
	n = read(fds[0], r, sizeof(*r));
	close(fds[0]);
	if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) ||
	    WEXITSTATUS(status) != 0 || n != (ssize_t)sizeof(*r)) {
		fprintf(stderr, "compare: unmap child %s exited with %d\n", impl,
			WIFEXITED(status) ? WEXITSTATUS(status) : -1);
		return -1;
	}
	return 0;
}

void section_unmap(const char *self)
{
	static const char *impls[] = { "libc", "libmrmgr",
#ifdef HAVE_UCX
				       "UCX",
#endif
	};
	const size_t n = sizeof(impls) / sizeof(impls[0]);
	static struct unmap_result runs[3][MAX_REPS];
	struct samples s;

	printf("\n## unmap: munmap and free() with each cache's memory-event "
	       "source installed\n\n"
	       "each cache's process holds %d regions; libc = a process "
	       "without a cache; every figure the median of %llu timed calls "
	       "in one process, then the median of %d processes (run "
	       "alternately);\nheld = the cache holds the memory (get+put "
	       "before); columns side by side were run interleaved; "
	       "mmap+munmap and malloc+free time both calls, the others the "
	       "unmapping call alone;\nraw = syscall(), past any hook (in "
	       "libc's row, \"held\" is not held: no cache)\n\n", LIVE, (unsigned long long)opt.unmap_iters,
	       opt.reps);
	for (int rep = 0; rep < opt.reps; rep++)
		for (size_t j = 0; j < n; j++) {
			size_t k = rep & 1 ? n - 1 - j : j;

			if (unmap_run(self, impls[k], k ? LIVE : 0,
				      opt.unmap_iters, &runs[k][rep]))
				die("unmap child", EIO);
		}
	printf("| process | mmap+munmap: libc | raw | munmap: libc, held "
	       "| raw, not held | free: held | not held | malloc+free | "
	       "source |\n|---|---:|---:|---:|---:|---:|---:|---:|---|\n");
	for (size_t k = 0; k < n; k++) {
		struct unmap_result *m = &unmap_med[k];
		static const char *metric[7] = { "mmap+munmap", "mmap+munmap-raw",
						 "munmap-held", "munmap-raw",
						 "free-held", "free-not-held",
						 "malloc+free" };

		*m = runs[k][0];
		for (int i = 0; i < 7; i++) {
			s.n = 0;
			for (int rep = 0; rep < opt.reps; rep++) {
				add(&s, (&runs[k][rep].pair_mmap)[i]);
				m->is_default &= runs[k][rep].is_default;
			}
			(&m->pair_mmap)[i] = median(&s);
			csv_row("unmap", metric[i], k ? LIVE : 0, 1, impls[k],
				"ns", &s);
		}
		printf("| %s | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f | %.0f | "
		       "%s%s |\n", impls[k], m->pair_mmap, m->pair_raw,
		       m->munmap_held, m->munmap_raw, m->free_held, m->free_cold,
		       m->pair_malloc, k ? m->source : "-",
		       k == 1 && !m->is_default ? " (NOT DEFAULT)" : "");
	}
	unmap_measured = 1;
	fflush(stdout);
}
