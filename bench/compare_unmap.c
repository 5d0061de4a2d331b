/*
 * bench/compare: what unmapping costs with a cache's memory-event source
 * installed, against plain libc in a process without a cache. Every
 * figure comes from a fresh process (this program re-executed with
 * --unmap-child): a source, once installed, stays for the life of the
 * process and would tax whatever ran next; and in one process UCX's
 * hooks and libmrmgr's patched libc exclude each other.
 *
 * Per process: 100,000 regions registered first (64 KiB each, 128 KiB
 * apart, in a mapping of their own; zero registration cost), then, each
 * call timed on its own and the median of `iters` taken:
 *   - mmap + munmap of 64 KiB the cache never saw (the pair);
 *   - malloc + free of 256 KiB, an mmap'd chunk (M_MMAP_THRESHOLD set to
 *     128 KiB in every process, so glibc's sliding threshold does not
 *     move it to the heap; a chunk served from free heap space all the
 *     same is freed untimed and the round repeated), never seen (the
 *     pair);
 *   - munmap alone, and free alone, of memory never seen;
 *   - munmap alone of a mapping the cache holds (get+put before), and
 *     free alone of a chunk it holds.
 * Extra cost = the cache process's figure minus libc's. A cache whose
 * source does not cover munmap is told by its invalidate call before
 * munmap (timed with it), as its contract asks of the caller.
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
#include <sys/wait.h>
#include <unistd.h>

#include "compare.h"

#define LEN (64 * KiB)
#define CHUNK (256 * KiB)
#define LIVE 100000
#define LIVE_STRIDE (128 * KiB)

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

/*
 * The median ns of iters timed operations (after a tenth more as
 * warm-up): kind, on memory the cache holds when held.
 */
static double timed(int kind, int held, const struct drv_ops *ops,
		    struct drv *d, uint64_t iters)
{
	uint64_t warm = iters / 10;
	double *t = calloc(iters, sizeof(*t)), m;

	for (uint64_t i = 0, tries = 0; i < iters + warm; i++) {
		int mall = kind == PAIR_MALLOC || kind == FREE;
		int pair = kind == PAIR_MMAP || kind == PAIR_MALLOC;
		size_t len = mall ? CHUNK : LEN;
		double t0 = now_ns(), t1;
		void *p = mall ? malloc(len)
			       : mmap(NULL, len, PROT_READ | PROT_WRITE,
				      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

		if (!p || p == MAP_FAILED)
			exit(3);
		if (mall && !chunk_mmapped(p)) {
			/* Served from free heap space: not what is measured. */
			free(p);
			if (++tries > 10 * iters)
				exit(10);
			i--;
			continue;
		}
		if (held) {
			void *h = ops->get(d, p, len);

			if (!h)
				exit(4);
			ops->put(d, h);
		}
		if (!pair)
			t0 = now_ns();
		if (ops && ops->invalidate)
			ops->invalidate(d, p, len);
		if (mall)
			free(p);
		else
			munmap(p, len);
		t1 = now_ns();
		if (i >= warm)
			t[i - warm] = t1 - t0;

	}
	qsort(t, iters, sizeof(*t), cmp_double);
	m = t[iters / 2];

	free(t);
	return m;
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
	r.pair_mmap = timed(PAIR_MMAP, 0, ops, d, iters);
	r.pair_malloc = timed(PAIR_MALLOC, 0, ops, d, iters);
	r.munmap_cold = timed(MUNMAP, 0, ops, d, iters);
	r.free_cold = timed(FREE, 0, ops, d, iters);
	if (ops) {
		r.munmap_held = timed(MUNMAP, 1, ops, d, iters);
		r.free_held = timed(FREE, 1, ops, d, iters);
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
	       "before); pairs time both calls, the others the unmapping call "
	       "alone\n\n", LIVE, (unsigned long long)opt.unmap_iters,
	       opt.reps);
	for (int rep = 0; rep < opt.reps; rep++)
		for (size_t j = 0; j < n; j++) {
			size_t k = rep & 1 ? n - 1 - j : j;

			if (unmap_run(self, impls[k], k ? LIVE : 0,
				      opt.unmap_iters, &runs[k][rep]))
				die("unmap child", EIO);
		}
	printf("| process | mmap+munmap | malloc+free | munmap | free | munmap, "
	       "held | free, held | source |\n"
	       "|---|---:|---:|---:|---:|---:|---:|---|\n");
	for (size_t k = 0; k < n; k++) {
		struct unmap_result *m = &unmap_med[k];
		double *f[6] = { &m->pair_mmap, &m->pair_malloc, &m->munmap_cold,
				 &m->free_cold, &m->munmap_held, &m->free_held };
		static const char *metric[6] = { "mmap+munmap", "malloc+free",
						 "munmap", "free", "munmap-held",
						 "free-held" };

		*m = runs[k][0];
		for (int i = 0; i < 6; i++) {
			s.n = 0;
			for (int rep = 0; rep < opt.reps; rep++) {
				struct unmap_result *r = &runs[k][rep];
				double *g[6] = { &r->pair_mmap, &r->pair_malloc,
						 &r->munmap_cold, &r->free_cold,
						 &r->munmap_held, &r->free_held };

				add(&s, *g[i]);
				m->is_default &= r->is_default;
			}
			*f[i] = median(&s);
			if (k || i < 4)
				csv_row("unmap", metric[i], k ? LIVE : 0, 1,
					impls[k], "ns", &s);
		}
		printf("| %s | %.0f | %.0f | %.0f | %.0f | ", impls[k],
		       m->pair_mmap, m->pair_malloc, m->munmap_cold, m->free_cold);
		if (k)
			printf("%.0f | %.0f | %s%s |\n", m->munmap_held,
			       m->free_held, m->source,
			       k == 1 && !m->is_default ? " (NOT DEFAULT)" : "");
		else
			printf("- | - | - |\n");
	}
	unmap_measured = 1;
	fflush(stdout);
}
