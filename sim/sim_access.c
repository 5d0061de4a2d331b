/*
 * Page identity and simulated remote access (RDMA WRITE and READ through
 * an rkey). Registration holds the registered pages and records their
 * PFNs; an access compares them with the pages mapped now, which lets the
 * sim notice what a real HCA would silently get wrong: writing into pages
 * that are no longer mapped where the program thinks its buffer is.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/uio.h>
#include <unistd.h>

#include "compiler.h"
#include "log.h"
#include "procfs.h"
#include "sim/sim_internal.h"

#define PAGE MRMGR__SIM_PAGE_SIZE

/*
 * Pages held per pipe. The kernel allocates 40 bytes of pipe_buffer per
 * slot in one kcalloc, so 16Ki slots (64 MiB of memory) is a 640 KiB
 * allocation, about the largest that reliably succeeds; bigger MRs use
 * several pipes. Without CAP_SYS_RESOURCE a pipe stops at pipe-max-size
 * (1 MiB = 256 pages by default), so then it is one pipe per MiB. 16 is
 * the default size of a new pipe.
 */
#define SIM_PIPE_MAX_PAGES 16384u
#define SIM_PIPE_DEF_PAGES 16u

/*
 * One /proc/self/pagemap descriptor per process (reopened after fork),
 * read with pread() from any thread. Whether PFNs are shown is decided by
 * the opener's credentials (CAP_SYS_ADMIN), which is why availability is
 * probed on this same fd.
 */
static struct mrmgr__proc_file pagemap = MRMGR__PROC_FILE("/proc/self/pagemap");

static int pagemap_fd(void)
{
	return mrmgr__proc_file_fd(&pagemap);
}

int mrmgr__sim_pagemap_read(uint64_t va, size_t n, uint64_t *out)
{
	int fd = pagemap_fd();
	size_t want = n * sizeof(*out), got = 0;
	off_t off = (off_t)((va / PAGE) * sizeof(*out));

	if (fd < 0)
		return ENOENT;
	while (got < want) {
		ssize_t r = pread(fd, (char *)out + got, want - got,
				  off + (off_t)got);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return r < 0 ? errno : EIO;
		got += (size_t)r;
	}
	return 0;
}

static pthread_once_t avail_once = PTHREAD_ONCE_INIT;
static int avail;

static void probe_identity(void)
{
	void *p = mmap(NULL, PAGE, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	uint64_t e = 0;

	if (p == MAP_FAILED)
		return;
	*(volatile char *)p = 1;
	if (mrmgr__sim_pagemap_read((uintptr_t)p, 1, &e) == 0 &&
	    (e & MRMGR__PM_PRESENT) && (e & MRMGR__PM_PFN_MASK))
		avail = 1;
	munmap(p, PAGE);
	mrmgr__info("sim: page identity %s", avail ? "available"
			    : "unavailable (pagemap hides PFNs without CAP_SYS_ADMIN)");
}

MRMGR_EXPORT int mrmgr_sim_page_identity_available(void)
{
	pthread_once(&avail_once, probe_identity);
	return avail;
}

/* ---------------------------------------------------------- fd budget */

/*
 * Each held registration keeps one pipe read end open (plus a write end
 * for the length of the registration call). Those fds are capped process
 * wide at half the RLIMIT_NOFILE soft limit so the sim can never starve
 * the program of descriptors; past the cap, registrations still succeed
 * but their pages are not held and not identity-checked (unverified_pages).
 */
static pthread_once_t fd_cap_once = PTHREAD_ONCE_INIT;
static long fd_cap;
static long fd_used;

static void fd_cap_init(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
		fd_cap = 512;
	else if (rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur > (rlim_t)LONG_MAX)
		fd_cap = 1L << 20;
	else
		fd_cap = (long)(rl.rlim_cur / 2);
}

static int fd_take(void)
{
	pthread_once(&fd_cap_once, fd_cap_init);
	if (__atomic_add_fetch(&fd_used, 1, __ATOMIC_RELAXED) <= fd_cap)
		return 1;
	__atomic_sub_fetch(&fd_used, 1, __ATOMIC_RELAXED);
	return 0;
}

static void fd_put(long n)
{
	__atomic_sub_fetch(&fd_used, n, __ATOMIC_RELAXED);
}

/* ---------------------------------------------------------- holding */

void mrmgr__sim_pages_release(struct mrmgr__sim_mr *m)
{
	if (!m->npipes && !m->pipes && !m->pfns)
		return; /* NO_PIN, or not held: no shared counter to touch */
	for (uint32_t i = 0; i < m->npipes; i++)
		close(m->pipes[i]);
	fd_put(m->npipes);
	free(m->pipes);
	free(m->pfns);
	m->pipes = NULL;
	m->pfns = NULL;
	m->npipes = 0;
}

static int add_pipe(struct mrmgr__sim_mr *m, int fd)
{
	int *v = realloc(m->pipes, (m->npipes + 1) * sizeof(*v));

	if (!v)
		return ENOMEM;
	m->pipes = v;
	m->pipes[m->npipes++] = fd;
	return 0;
}

/*
 * Largest pipe size that has worked. Past /proc/sys/fs/pipe-max-size
 * (1 MiB by default) F_SETPIPE_SZ needs CAP_SYS_RESOURCE, which root in a
 * container often lacks: learn that once instead of failing on every call.
 */
static unsigned int pipe_max_pages = SIM_PIPE_MAX_PAGES;

/* Grow a pipe toward want pages; returns its capacity in pages (the
 * default when it was not grown). */
static uint64_t pipe_grow(int wfd, uint64_t want)
{
	uint64_t max = __atomic_load_n(&pipe_max_pages, __ATOMIC_RELAXED);
	uint64_t pages = SIM_PIPE_DEF_PAGES;
	int sz;

	while (pages < want && pages < max)
		pages <<= 1;
	for (; pages > SIM_PIPE_DEF_PAGES; pages >>= 1) {
		sz = fcntl(wfd, F_SETPIPE_SZ, (int)(pages * PAGE));
		if (sz > 0)
			return (uint64_t)sz / PAGE;
		/* EPERM is policy and stays; ENOMEM may pass, so retry later. */
		if (errno == EPERM)
			__atomic_store_n(&pipe_max_pages, (unsigned int)(pages / 2),
					 __ATOMIC_RELAXED);
	}
	/*
	 * The default size, not asked for (a system call per registration):
	 * a pipe the kernel made smaller (pipe-user-pages-soft exceeded)
	 * takes fewer pages per vmsplice(), and the caller moves on to
	 * another pipe when it is full, so the guess costs nothing.
	 */
	return SIM_PIPE_DEF_PAGES;
}

/*
 * Hold the span's pages: vmsplice() without SPLICE_F_GIFT makes the pipe
 * take a reference on every page, so after munmap() they cannot be freed
 * and handed back at the same PFNs, which would make a stale registration
 * look fresh. The write end is closed right away; the read end keeps the
 * buffers until dereg closes it. Returns 0, EFAULT (not mapped or not
 * readable), or another errno meaning "could not hold, continue unverified".
 */
static int hold_pages(struct mrmgr__sim_mr *m)
{
	uint64_t va = m->span, end = m->span + m->npages * PAGE;

	while (va < end) {
		uint64_t cap, before = va;
		int p[2], err = 0;

		if (!fd_take())
			return EMFILE;
		if (pipe2(p, O_CLOEXEC | O_NONBLOCK)) {
			err = errno;
			fd_put(1);
			return err;
		}
		if (add_pipe(m, p[0])) {
			close(p[0]);
			close(p[1]);
			fd_put(1);
			return ENOMEM;
		}
		cap = pipe_grow(p[1], (end - va) / PAGE);
		while (va < end) {
			uint64_t len = end - va < cap * PAGE ? end - va : cap * PAGE;
			struct iovec iov = { (void *)(uintptr_t)va, (size_t)len };
			ssize_t r = vmsplice(p[1], &iov, 1, SPLICE_F_NONBLOCK);

			if (r > 0) {
				va += (uint64_t)r;
				continue;
			}
			if (r < 0 && errno == EINTR)
				continue;
			if (r < 0 && errno != EAGAIN)
				err = errno == EFAULT || errno == ENOMEM ? EFAULT : errno;
			break; /* pipe full: next pipe */
		}
		close(p[1]);
		if (err)
			return err;
		va &= ~(PAGE - 1); /* a partly spliced page is taken again */
		if (va == before)
			return ENOSPC; /* the pipe took nothing: do not spin */
	}
	return 0;
}

/*
 * After populating for writing, every anonymous page of the span is the
 * program's own (exclusively mapped): pinning with FOLL_WRITE replaced
 * the shared zero page and broke copy-on-write. One that is not means the
 * populate did not act (an emulator, or a race with fork() or
 * MADV_DONTNEED in another thread): its PFN would change at the
 * program's next store with nothing remapped, and a stale report would
 * be the sim's error, not the cache's. Such a registration is not
 * verified, and said so once.
 */
static int unpinned_page(const struct mrmgr__sim_mr *m, uint64_t e)
{
	static int said;

	if (!(m->access & IBV_ACCESS_LOCAL_WRITE) || (e & MRMGR__PM_FILE) ||
	    (e & MRMGR__PM_EXCLUSIVE))
		return 0;
	if (!__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED))
		mrmgr__warn("sim: a page of a writable registration is not the "
			    "program's own after populating it for writing (the "
			    "shared zero page, or shared copy-on-write): such "
			    "registrations are not verified (unverified_pages)");
	return 1;
}

static int record_pfns(struct mrmgr__sim_mr *m)
{
	int err;

	m->pfns = malloc(m->npages * sizeof(*m->pfns));
	if (!m->pfns)
		return ENOMEM;
	err = mrmgr__sim_pagemap_read(m->span, m->npages, m->pfns);
	if (err)
		return err;
	for (uint64_t i = 0; i < m->npages; i++) {
		if (!(m->pfns[i] & MRMGR__PM_PRESENT) ||
		    !(m->pfns[i] & MRMGR__PM_PFN_MASK))
			return ENOENT; /* e.g. swapped out since: cannot tell */
		if (unpinned_page(m, m->pfns[i]))
			return EAGAIN;
		m->pfns[i] &= MRMGR__PM_PFN_MASK;
	}
	return 0;
}

int mrmgr__sim_pages_hold(struct mrmgr__sim_mr *m, int *unverified)
{
	int err;

	*unverified = 0;
	err = hold_pages(m);
	if (!err)
		err = record_pfns(m);
	if (!err)
		return 0;
	mrmgr__sim_pages_release(m);
	if (err == EFAULT)
		return EFAULT;
	mrmgr__dbg("sim_reg_mr: pages not held (%s): unverified", strerror(err));
	*unverified = 1;
	return 0;
}

/* -------------------------------------------------------------- access */

/*
 * Are the pages now mapped over [va, va+len) the ones registered? They
 * are held, so the kernel cannot have freed and reused them: a different
 * PFN means the program remapped the range. A held page may have been
 * unmapped into the swap cache by reclaim; fault it back before judging.
 *
 * One divergence: our holds are plain page references, not FOLL_PIN
 * pins, so fork() shares the pages copy-on-write instead of copying them
 * for the child, and the parent's next store moves its buffer to a new
 * page, reported stale. That is what pre-5.9 kernels did to real MRs
 * without ibv_fork_init(); today's kernels keep the parent's page.
 */
static int check_identity(const struct mrmgr__sim_mr *m, uint64_t va,
			  size_t len)
{
	uint64_t first = va & ~(PAGE - 1);
	uint64_t n = (((va + len - 1) & ~(PAGE - 1)) - first) / PAGE + 1;
	const uint64_t *want = m->pfns + (first - m->span) / PAGE;
	uint64_t pm[256];

	for (uint64_t i = 0; i < n;) {
		size_t c = n - i < 256 ? (size_t)(n - i) : 256;
		int err = mrmgr__sim_pagemap_read(first + i * PAGE, c, pm);

		if (err) {
			mrmgr__warn("sim: pagemap read failed (%s); access "
				    "not verified", strerror(err));
			return 0;
		}
		for (size_t j = 0; j < c; j++) {
			uint64_t e = pm[j], pva = first + (i + j) * PAGE;

			if (!(e & MRMGR__PM_PRESENT) && (e & MRMGR__PM_SWAP) &&
			    (mrmgr__sim_fault_range(pva, PAGE, 0) != 0 ||
			     mrmgr__sim_pagemap_read(pva, 1, &e) != 0))
				e = 0;
			if (!(e & MRMGR__PM_PRESENT) ||
			    (e & MRMGR__PM_PFN_MASK) != want[i + j])
				return ESTALE;
		}
		i += c;
	}
	return 0;
}

/* Without recorded PFNs, at least refuse a range that is not mapped. */
static int check_mapped(uint64_t va, size_t len)
{
	uint64_t first = va & ~(PAGE - 1);
	uint64_t end = (va + len + PAGE - 1) & ~(PAGE - 1);

	return msync((void *)(uintptr_t)first, end - first, MS_ASYNC) ? ESTALE : 0;
}

int mrmgr__sim_vm_copy(pid_t pid, void *local, uint64_t remote, size_t len,
		       int to_remote, size_t *done)
{
	*done = 0;
	while (*done < len) {
		struct iovec l = { (char *)local + *done, len - *done };
		struct iovec r = { (void *)(uintptr_t)(remote + *done), len - *done };
		ssize_t n = to_remote ? process_vm_writev(pid, &l, 1, &r, 1, 0)
				      : process_vm_readv(pid, &l, 1, &r, 1, 0);

		if (n > 0) {
			*done += (size_t)n;
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		return n < 0 ? errno : EFAULT;
	}
	return 0;
}

void mrmgr__sim_count_access(struct mrmgr__sim_ctx *s, int ret, int write)
{
	if (ret == ESTALE)
		s->stats.stale_accesses++;
	else if (ret)
		s->stats.access_errors++;
	else if (write)
		s->stats.writes++;
	else
		s->stats.reads++;
}

/*
 * Copy through process_vm_readv/writev on ourselves: the kernel copies
 * page by page and returns EFAULT where a plain memcpy would crash on a
 * page unmapped since it was checked (NO_PIN MRs, or another thread
 * unmapping concurrently). Where those calls are filtered (some seccomp
 * profiles), fall back to memcpy after the checks above.
 */
static int vm_copy_blocked;

static int copy_self(void *local, uint64_t remote, size_t len, int to_remote)
{
	size_t done = 0;
	int err = 0;

	if (!__atomic_load_n(&vm_copy_blocked, __ATOMIC_RELAXED))
		err = mrmgr__sim_vm_copy(getpid(), local, remote, len,
					 to_remote, &done);
	if (err == ENOSYS || err == EPERM) {
		__atomic_store_n(&vm_copy_blocked, 1, __ATOMIC_RELAXED);
	} else if (err) {
		/*
		 * EFAULT: unmapped, or a store into memory made read-only
		 * since registration (a real HCA would write its pinned pages
		 * regardless; the sim can only reach them through the mapping).
		 */
		return EFAULT;
	}
	if (done < len) {
		if (to_remote)
			memcpy((void *)(uintptr_t)(remote + done),
			       (char *)local + done, len - done);
		else
			memcpy((char *)local + done,
			       (void *)(uintptr_t)(remote + done), len - done);
	}
	return 0;
}

int mrmgr__sim_access_mr(struct mrmgr__sim_ctx *s, struct mrmgr__sim_mr *m,
			 uint64_t raddr, void *buf, size_t len, int write,
			 uint64_t *wait_ns)
{
	unsigned int need = write ? IBV_ACCESS_REMOTE_WRITE
				  : IBV_ACCESS_REMOTE_READ;
	uint64_t base = (uintptr_t)m->ibmr.addr;
	int ret = 0;

	if (raddr < base || len > m->ibmr.length ||
	    raddr - base > m->ibmr.length - len)
		ret = ERANGE;
	else if (!(m->access & need))
		ret = EACCES;
	if (ret) {
		s->stats.access_errors++;
		return ret;
	}
	if (m->odp) /* ODP follows the mapping: faults, never stale */
		ret = mrmgr__sim_odp_access(s, m, raddr, len, write, wait_ns);
	else
		ret = m->pfns ? check_identity(m, raddr, len)
			      : check_mapped(raddr, len);
	if (!ret)
		ret = copy_self(buf, raddr, len, write);
	mrmgr__sim_count_access(s, ret, write);
	if (ret == ESTALE)
		mrmgr__dbg("sim %s: stale %s at %#llx+%zu (rkey %#x)",
			   s->ibdev.name, write ? "write" : "read",
			   (unsigned long long)raddr, len, m->ibmr.rkey);
	return ret;
}

static int sim_access(struct ibv_pd *pd, uint32_t rkey, uint64_t raddr,
		      void *buf, size_t len, int write)
{
	struct mrmgr__sim_pd *spd;
	struct mrmgr__sim_ctx *s;
	struct mrmgr__sim_mr *m;
	uint64_t wait_ns = 0;
	int ret;

	if (!buf || !len) {
		mrmgr__warn("sim_%s: NULL buffer or zero length",
			    write ? "write" : "read");
		return EINVAL;
	}
	spd = mrmgr__sim_pd_get(pd);
	if (!spd)
		return EINVAL;
	if (spd->imported) /* the owner's MR, maybe in another process */
		return mrmgr__sim_import_access(spd, rkey, raddr, buf, len,
						write);
	s = spd->sctx;

	/*
	 * Check and copy under the device lock so the MR cannot be
	 * deregistered (and its pages let go) halfway through.
	 */
	pthread_mutex_lock(&s->lock);
	m = mrmgr__sim_mr_by_rkey(s, rkey);
	if (!m || m->spd != spd) {
		s->stats.access_errors++;
		ret = ENOENT;
	} else {
		ret = mrmgr__sim_access_mr(s, m, raddr, buf, len, write,
					   &wait_ns);
	}
	pthread_mutex_unlock(&s->lock);
	mrmgr__sim_busy_wait(wait_ns);
	return ret;
}

MRMGR_EXPORT int mrmgr_sim_write(struct ibv_pd *pd, uint32_t rkey,
				 uint64_t remote_addr, const void *src,
				 size_t len)
{
	/* The source is only read: the cast feeds the shared copy path. */
	return sim_access(pd, rkey, remote_addr, (void *)(uintptr_t)src, len, 1);
}

MRMGR_EXPORT int mrmgr_sim_read(struct ibv_pd *pd, uint32_t rkey,
				uint64_t remote_addr, void *dst, size_t len)
{
	return sim_access(pd, rkey, remote_addr, dst, len, 0);
}
