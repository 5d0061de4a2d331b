/*
 * Simulated registration and deregistration: argument rules, the
 * pinning model, the memlock budget and the cost model (keys:
 * sim_keys.c).
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "compiler.h"
#include "log.h"
#include "sim/sim_internal.h"

#define SIM_MR_MAGIC MRMGR__SIM_MR_MAGIC
#define PAGE MRMGR__SIM_PAGE_SIZE

/* ---------------------------------------------------------- validation */

static int check_reg(const struct mrmgr__sim_ctx *s, void *addr,
		     size_t length, unsigned int access)
{
	uintptr_t a = (uintptr_t)addr;

	if (access & ~s->pers->access_ok) {
		mrmgr__dbg("sim_reg_mr: unsupported access bits %#x",
			   access & ~s->pers->access_ok);
		return EINVAL;
	}
	/* The IB spec's rule, enforced by ib_check_mr_access(). */
	if ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) &&
	    !(access & IBV_ACCESS_LOCAL_WRITE)) {
		mrmgr__dbg("sim_reg_mr: remote write/atomic needs LOCAL_WRITE");
		return EINVAL;
	}
	if (length == 0) {
		mrmgr__dbg("sim_reg_mr: zero length");
		return EINVAL;
	}
	/* ib_umem_get() refuses a range whose page-aligned end wraps. */
	if (length > UINTPTR_MAX - a || a + length > UINTPTR_MAX - (PAGE - 1)) {
		mrmgr__dbg("sim_reg_mr: range wraps the address space");
		return EINVAL;
	}
	if (length > s->max_mr_size) {
		mrmgr__dbg("sim_reg_mr: length %zu over max_mr_size", length);
		return EINVAL;
	}
	return 0;
}

/* ------------------------------------------------------------- pinning */

/* Fault the span in, as ib_umem_get()'s pin_user_pages() would. */
static int populate(uint64_t va, uint64_t len, int write)
{
	return mrmgr__sim_fault_range(va, len, write);
}

/* Write-fault the pages of [va, va+n pages) whose pagemap entry fits. */
static int unshare_runs(uint64_t va, uint64_t npages, uint64_t want_set,
			uint64_t want_clear)
{
	uint64_t pm[512];
	int seen_file = 0;

	for (uint64_t i = 0; i < npages;) {
		size_t n = npages - i < 512 ? (size_t)(npages - i) : 512;

		if (mrmgr__sim_pagemap_read(va + i * PAGE, n, pm))
			return 0;
		for (size_t j = 0; j < n;) {
			size_t run = 0;

			while (j + run < n &&
			       (pm[j + run] & (want_set | want_clear)) == want_set)
				run++;
			if (run)
				(void)mrmgr__sim_fault_range(va + (i + j) * PAGE,
							     run * PAGE, 1);
			else
				seen_file |= !!(pm[j] & MRMGR__PM_FILE);
			j += run ? run : 1;
		}
		i += n;
	}
	return seen_file;
}

/*
 * A read-only long-term pin makes the kernel unshare every page a later
 * store by the program would copy (gup_must_unshare()): the shared zero
 * page of untouched memory, anonymous pages still shared with a fork
 * child, and file pages of private (COW) mappings. The HCA and the
 * program then keep seeing the same page. MADV_POPULATE_READ does none
 * of that, so do it here by write-faulting exactly those pages; that
 * needs a writable mapping, so a read-only one keeps its shared pages
 * (the program cannot store to them either, short of mprotect()).
 * File pages are only touched inside private writable mappings, found in
 * /proc/self/maps: dirtying MAP_SHARED or shmem pages would be wrong.
 */
static void unshare_for_ro_pin(uint64_t va, uint64_t npages)
{
	uint64_t end = va + npages * PAGE;
	char *line = NULL;
	size_t cap = 0;
	FILE *f;

	if (!unshare_runs(va, npages, MRMGR__PM_PRESENT,
			  MRMGR__PM_FILE | MRMGR__PM_EXCLUSIVE))
		return;
	f = fopen("/proc/self/maps", "re");
	if (!f)
		return;
	while (getline(&line, &cap, f) > 0) {
		unsigned long lo, hi;
		char perms[5];

		if (sscanf(line, "%lx-%lx %4s", &lo, &hi, perms) != 3 ||
		    hi <= va || lo >= end)
			continue;
		if (perms[1] != 'w' || perms[3] != 'p')
			continue;
		lo = lo < va ? va : lo;
		hi = hi > end ? end : hi;
		unshare_runs(lo, (hi - lo) / PAGE,
			     MRMGR__PM_PRESENT | MRMGR__PM_FILE, 0);
	}
	free(line);
	fclose(f);
}

/*
 * Whether [va, va+len) is mapped, for NO_PIN: msync(MS_ASYNC) only walks
 * the VMAs and fails with ENOMEM on a hole, one system call that costs
 * the same for 4 KiB and 1 TiB, unlike populating. It cannot see
 * protections, so NO_PIN does not catch write access to read-only memory.
 */
static int map_check(uint64_t va, uint64_t len)
{
	return msync((void *)(uintptr_t)va, len, MS_ASYNC) == 0;
}

/*
 * The pinning model. Returns 0 or EFAULT; *unverified is set when the
 * pages were pinned but their identity cannot be checked later.
 */
static int pin_pages(struct mrmgr__sim_ctx *s, struct mrmgr__sim_mr *m,
		     int *unverified)
{
	int write = !!(m->access & IBV_ACCESS_LOCAL_WRITE);
	uint64_t len = m->npages * PAGE;
	int err;

	*unverified = 0;
	if (s->flags & MRMGR_SIM_FLAG_NO_PIN) {
		if (map_check(m->span, len))
			return 0;
		mrmgr__dbg("sim_reg_mr: %#llx+%llu not mapped",
			   (unsigned long long)m->span, (unsigned long long)len);
		return EFAULT;
	}
	err = populate(m->span, len, write);
	if (err)
		return err;
	if (!mrmgr_sim_page_identity_available()) {
		*unverified = 1;
		return 0;
	}
	if (!write)
		unshare_for_ro_pin(m->span, m->npages);
	return mrmgr__sim_pages_hold(m, unverified);
}

/* ---------------------------------------------------------------- cost */

static uint64_t cost_ns(uint64_t fixed, uint64_t per_page, uint64_t pages)
{
	uint64_t v;

	if (__builtin_mul_overflow(per_page, pages, &v) ||
	    __builtin_add_overflow(v, fixed, &v))
		return UINT64_MAX;
	return v;
}

/*
 * Spin rather than sleep: a real registration keeps the calling thread in
 * the kernel and the firmware for this long, and sleeping would give the
 * CPU away, which a benchmark would then mistake for free time.
 */
static void busy_wait(uint64_t ns)
{
	struct timespec t0, t;

	if (!ns)
		return;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	do {
		clock_gettime(CLOCK_MONOTONIC, &t);
	} while ((uint64_t)(t.tv_sec - t0.tv_sec) * 1000000000u +
			 (uint64_t)(t.tv_nsec - t0.tv_nsec) < ns);
}

/* ---------------------------------------------------------- reg/dereg */

/*
 * The MR object for a registration: the one the device's last
 * deregistration left (malloc and free cost about as much as the rest of
 * a reg + dereg), else a new one. Lock held.
 */
static struct mrmgr__sim_mr *mr_get(struct mrmgr__sim_ctx *s)
{
	struct mrmgr__sim_mr *m = s->spare;

	if (!m)
		return calloc(1, sizeof(*m));
	s->spare = NULL;
	memset(m, 0, sizeof(*m));
	return m;
}

/* Keep m for the next registration, or free it. Lock held. */
static void mr_put(struct mrmgr__sim_ctx *s, struct mrmgr__sim_mr *m)
{
	if (!s->spare)
		s->spare = m;
	else
		free(m);
}

/*
 * Reserve what a registration takes: the fault check, the MR count, the
 * memlock budget, the object and its slot (keys). The kernel charges
 * pinned_vm before pinning, so over budget is ENOMEM even for memory
 * that would also fault. Lock held. The MR, or NULL with the error in
 * *err: then nothing is taken and the failure is counted.
 */
static struct mrmgr__sim_mr *reg_reserve(struct mrmgr__sim_ctx *s,
					  struct mrmgr__sim_pd *spd, void *addr,
					  size_t length, unsigned int access,
					  uint64_t span, uint64_t bytes,
					  int *err)
{
	struct mrmgr__sim_mr *m = NULL;
	int ret;

	ret = mrmgr__sim_fault_check(s, MRMGR_SIM_OP_REG, addr, length, access);
	if (!ret && s->mrs >= s->max_mr)
		ret = ENOMEM;
	if (!ret && (bytes > s->memlock_bytes ||
		     s->stats.pinned_bytes > s->memlock_bytes - bytes))
		ret = ENOMEM;
	if (!ret) {
		m = mr_get(s);
		ret = m ? 0 : ENOMEM;
	}
	if (!ret) {
		m->spd = spd;
		m->access = access;
		m->span = span;
		m->npages = bytes / PAGE;
		ret = mrmgr__sim_slot_alloc(s, m);
		if (ret)
			mr_put(s, m);
	}
	*err = ret;
	if (ret) {
		s->stats.reg_failures++;
		mrmgr__dbg("sim_reg_mr: %s", strerror(ret));
		return NULL;
	}
	s->mrs++;
	spd->mrs++;
	s->stats.pinned_bytes += bytes;
	if (s->stats.pinned_bytes > s->stats.peak_pinned_bytes)
		s->stats.peak_pinned_bytes = s->stats.pinned_bytes;
	return m;
}

/* Give back what reg_reserve() took, for a registration that failed
 * after it. Lock held. */
static void reg_unreserve(struct mrmgr__sim_ctx *s, struct mrmgr__sim_mr *m)
{
	mrmgr__sim_slot_free(s, m->index);
	s->mrs--;
	m->spd->mrs--;
	s->stats.pinned_bytes -= m->npages * PAGE;
	s->stats.reg_failures++;
	mr_put(s, m);
}

/* Make a reserved MR live: its keys work and it is published. Lock held. */
static void reg_publish(struct mrmgr__sim_ctx *s, struct mrmgr__sim_mr *m,
			struct ibv_pd *pd, void *addr, size_t length,
			int unverified)
{
	m->ibmr.context = pd->context;
	m->ibmr.pd = pd;
	m->ibmr.addr = addr;
	m->ibmr.length = length;
	m->ibmr.handle = s->next_mr_handle++;
	m->magic = SIM_MR_MAGIC;
	m->live = 1;
	mrmgr__sim_share_mr(s, m, 1);
	s->stats.live_mrs++;
	s->stats.registrations++;
	s->stats.pages_registered += m->npages;
	if (unverified) {
		s->stats.unverified_pages += m->npages;
		if (!s->warned_unverified && mrmgr_sim_page_identity_available()) {
			s->warned_unverified = 1;
			mrmgr__warn("sim %s: could not hold pages; stale accesses "
				    "to them go undetected (see unverified_pages)",
				    s->ibdev.name);
		}
	}
}

MRMGR_EXPORT int mrmgr_sim_reg_mr(struct ibv_pd *pd, void *addr,
				  size_t length, unsigned int access,
				  struct ibv_mr **mr)
{
	struct mrmgr__sim_pd *spd;
	struct mrmgr__sim_ctx *s;
	struct mrmgr__sim_mr *m;
	uint64_t span, bytes, ns;
	int ret, unverified = 0, mapped = 0, quick;

	if (!mr) {
		mrmgr__warn("sim_reg_mr: NULL mr");
		return EINVAL;
	}
	spd = mrmgr__sim_pd_get(pd);
	if (!spd)
		return EINVAL;
	if (access & IBV_ACCESS_ON_DEMAND)
		return mrmgr__sim_reg_odp(spd, addr, length, access, mr);
	s = spd->sctx;
	ret = check_reg(s, addr, length, access);
	if (ret) {
		pthread_mutex_lock(&s->lock);
		s->stats.reg_failures++;
		pthread_mutex_unlock(&s->lock);
		return ret;
	}
	span = (uintptr_t)addr & ~(PAGE - 1);
	bytes = (((uintptr_t)addr + length + PAGE - 1) & ~(PAGE - 1)) - span;
	/* The cost model and the flags are fixed at open. */
	ns = cost_ns(s->reg_ns, s->reg_ns_per_page, bytes / PAGE);

	/*
	 * NO_PIN at no modelled cost has nothing slow to run unlocked: its
	 * mapping check (one system call) comes first, and the registration
	 * is made in one locked step, with the errors in the same order as
	 * below (an injected fault, then the limits, then EFAULT).
	 */
	quick = (s->flags & MRMGR_SIM_FLAG_NO_PIN) && !ns;
	if (quick)
		mapped = map_check(span, bytes);

	pthread_mutex_lock(&s->lock);
	/* The MR, or NULL and the error: one value the compiler can follow
	 * (an MR returned through a pointer beside the error read as maybe
	 * uninitialized below under -fsanitize=thread). */
	m = reg_reserve(s, spd, addr, length, access, span, bytes, &ret);
	if (!m) {
		pthread_mutex_unlock(&s->lock);
		return ret;
	}
	if (quick) {
		if (!mapped) {
			reg_unreserve(s, m);
			pthread_mutex_unlock(&s->lock);
			return EFAULT;
		}
		reg_publish(s, m, pd, addr, length, 0);
		pthread_mutex_unlock(&s->lock);
		*mr = &m->ibmr;
		return 0;
	}
	pthread_mutex_unlock(&s->lock);

	/* The slow part runs unlocked, like concurrent ibv_reg_mr() calls. */
	ret = pin_pages(s, m, &unverified);
	if (!ret)
		busy_wait(ns);

	pthread_mutex_lock(&s->lock);
	if (ret)
		reg_unreserve(s, m);
	else
		reg_publish(s, m, pd, addr, length, unverified);
	pthread_mutex_unlock(&s->lock);
	if (ret)
		return ret;
	*mr = &m->ibmr;
	return 0;
}

MRMGR_EXPORT int mrmgr_sim_dereg_mr(struct ibv_mr *mr)
{
	struct mrmgr__sim_ctx *s;
	struct mrmgr__sim_mr *m, gone;
	uint64_t ns;
	int ret;

	if (!mr) {
		mrmgr__warn("sim_dereg_mr: NULL mr");
		return EINVAL;
	}
	s = mrmgr__sim_ctx_get(mr->context);
	if (!s)
		return EINVAL;
	m = mrmgr__container_of(mr, struct mrmgr__sim_mr, ibmr);

	pthread_mutex_lock(&s->lock);
	if (m->magic != SIM_MR_MAGIC || m->index == 0 || m->index >= s->hwm ||
	    s->slots[m->index].mr != m || !m->live) {
		pthread_mutex_unlock(&s->lock);
		mrmgr__warn("sim_dereg_mr: %p is not a live MR of %s",
			    (void *)mr, s->ibdev.name);
		return EINVAL;
	}
	ret = mrmgr__sim_fault_check(s, MRMGR_SIM_OP_DEREG, mr->addr,
				     mr->length, m->access);
	if (ret) {
		pthread_mutex_unlock(&s->lock);
		return ret; /* the MR stays live, as after a failed destroy */
	}
	/* Keys die now (imports of the MR with them); the pages are let go
	 * after, outside the lock. */
	mrmgr__sim_share_mr(s, m, 0);
	mrmgr__sim_slot_free(s, m->index);
	m->live = 0;
	m->magic = 0;
	s->mrs--;
	m->spd->mrs--;
	s->stats.live_mrs--;
	if (!m->odp) /* ODP MRs pin nothing, and cost no per-page work */
		s->stats.pinned_bytes -= m->npages * PAGE;
	s->stats.deregistrations++;
	/* Read under the lock: once unlocked the device may be closed. */
	ns = cost_ns(s->dereg_ns, s->dereg_ns_per_page, m->odp ? 0 : m->npages);
	/* The object goes back to the device now, what it holds after. */
	gone = *m;
	mr_put(s, m);
	pthread_mutex_unlock(&s->lock);

	mrmgr__sim_pages_release(&gone);
	mrmgr__sim_odp_free(&gone);
	busy_wait(ns);
	return 0;
}

/* ------------------------------------------- shared with sim_odp.c, sim_rereg.c */

int mrmgr__sim_check_reg(const struct mrmgr__sim_ctx *s, void *addr,
			 size_t length, unsigned int access)
{
	return check_reg(s, addr, length, access);
}

int mrmgr__sim_pin(struct mrmgr__sim_ctx *s, struct mrmgr__sim_mr *m,
		   int *unverified)
{
	return pin_pages(s, m, unverified);
}

int mrmgr__sim_populate(uint64_t va, uint64_t len, int write)
{
	return populate(va, len, write);
}

uint64_t mrmgr__sim_cost_ns(uint64_t fixed, uint64_t per_page, uint64_t pages)
{
	return cost_ns(fixed, per_page, pages);
}

void mrmgr__sim_busy_wait(uint64_t ns)
{
	busy_wait(ns);
}

struct mrmgr__sim_mr *mrmgr__sim_mr_live(struct mrmgr__sim_ctx *s,
					 struct ibv_mr *mr)
{
	struct mrmgr__sim_mr *m = mrmgr__container_of(mr, struct mrmgr__sim_mr,
						      ibmr);

	if (m->magic != SIM_MR_MAGIC || m->index == 0 || m->index >= s->hwm ||
	    s->slots[m->index].mr != m || !m->live)
		return NULL;
	return m;
}
