/*
 * On-demand paging on the simulated HCA: ODP registration (explicit and
 * implicit), the device's page faults, and ibv_advise_mr().
 *
 * The model. An ODP MR pins nothing; the device keeps its own set of
 * present pages per MR, each with the physical page (PFN) it translated
 * to and whether it may write it. A simulated access that finds a page
 * missing from that set, present with another PFN (the program remapped
 * or the kernel migrated, COW-broke or swapped the page since), or present
 * read-only for a write, takes a page fault: the page is faulted in
 * through the process's mapping (as the kernel's ODP fault handler does)
 * and the set updated. Each fault is counted and costs odp_fault_ns.
 * Data always moves through the current mapping, so ODP is never stale;
 * on a remap the PFN check drops the old translation.
 *
 * One divergence: the kernel's MMU notifiers invalidate a translation the
 * moment its page is unmapped. The sim notices only at the next access,
 * by the PFN; if the kernel happens to hand the very same physical page
 * back at the same address, the sim sees no change and counts no fault
 * where a device would take one. Without page identity (no CAP_SYS_ADMIN,
 * PFNs read as 0) remaps are not noticed at all; first-touch faults still
 * are. Neither affects where data goes.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "compiler.h"
#include "log.h"
#include "sim/sim_internal.h"

#define PAGE MRMGR__SIM_PAGE_SIZE
#define PRESENT_W (UINT64_C(1) << 63) /* above any PFN */
#define PM_CHUNK 256

/* ------------------------------------------------------- present set */

/*
 * The device's present pages of one MR: an open-addressing hash from
 * virtual page number to PFN | PRESENT_W. Sparse, because an implicit MR
 * spans the whole address space. Entries are only added or updated; the
 * set dies with the MR.
 */
struct mrmgr__sim_odp {
	uint64_t *keys; /* vpn + 1; 0 = empty */
	uint64_t *vals;
	size_t cap, n;  /* cap: a power of two */
};

static size_t hash_slot(const struct mrmgr__sim_odp *o, uint64_t key)
{
	return (size_t)((key * UINT64_C(0x9e3779b97f4a7c15)) >> 17) & (o->cap - 1);
}

static uint64_t *present_find(const struct mrmgr__sim_odp *o, uint64_t vpn)
{
	uint64_t key = vpn + 1;

	if (!o->cap)
		return NULL;
	for (size_t i = hash_slot(o, key);; i = (i + 1) & (o->cap - 1)) {
		if (o->keys[i] == key)
			return &o->vals[i];
		if (!o->keys[i])
			return NULL;
	}
}

static int present_grow(struct mrmgr__sim_odp *o)
{
	size_t cap = o->cap ? o->cap * 2 : 1024;
	uint64_t *keys = calloc(cap, sizeof(*keys));
	uint64_t *vals = malloc(cap * sizeof(*vals));
	struct mrmgr__sim_odp n = { keys, vals, cap, 0 };

	if (!keys || !vals) {
		free(keys);
		free(vals);
		return ENOMEM;
	}
	for (size_t i = 0; i < o->cap; i++) {
		size_t j;

		if (!o->keys[i])
			continue;
		for (j = hash_slot(&n, o->keys[i]); keys[j]; j = (j + 1) & (cap - 1))
			;
		keys[j] = o->keys[i];
		vals[j] = o->vals[i];
	}
	free(o->keys);
	free(o->vals);
	n.n = o->n;
	*o = n;
	return 0;
}

/* Set vpn's entry; ENOMEM leaves the page absent (it faults again later). */
static int present_set(struct mrmgr__sim_odp *o, uint64_t vpn, uint64_t val)
{
	uint64_t *v = present_find(o, vpn);
	size_t i;

	if (v) {
		*v = val;
		return 0;
	}
	if (2 * (o->n + 1) > o->cap && present_grow(o))
		return ENOMEM;
	for (i = hash_slot(o, vpn + 1); o->keys[i]; i = (i + 1) & (o->cap - 1))
		;
	o->keys[i] = vpn + 1;
	o->vals[i] = val;
	o->n++;
	return 0;
}

void mrmgr__sim_odp_free(struct mrmgr__sim_mr *m)
{
	if (!m->odp)
		return;
	free(m->odp->keys);
	free(m->odp->vals);
	free(m->odp);
	m->odp = NULL;
}

/*
 * Pagemap entries for n pages from va. Without a readable pagemap, say
 * "present, PFN unknown": the copy that follows faults pages in anyway.
 */
static void pagemap(uint64_t va, size_t n, uint64_t *pm)
{
	if (mrmgr__sim_pagemap_read(va, n, pm) == 0)
		return;
	for (size_t i = 0; i < n; i++)
		pm[i] = MRMGR__PM_PRESENT;
}

static uint64_t pm_pfn(uint64_t e)
{
	return e & MRMGR__PM_PFN_MASK;
}

/* Does the device hold page vpn, now mapped per pagemap entry e, as needed? */
static int present_ok(const struct mrmgr__sim_odp *o, uint64_t vpn, uint64_t e,
		      int write)
{
	const uint64_t *v = present_find(o, vpn);

	if (!(e & MRMGR__PM_PRESENT) || !v)
		return 0;
	if ((*v & ~PRESENT_W) != pm_pfn(e))
		return 0; /* remapped, migrated, COW-broken: a new page */
	return !write || (*v & PRESENT_W);
}

/* Fault a run of pages in through the mapping, as the kernel would. */
static int fault_in(uint64_t va, uint64_t npages, int write)
{
	/* EFAULT: unmapped, PROT_NONE, or read-only */
	return mrmgr__sim_fault_range(va, npages * PAGE, write);
}

/* Record pages [va, +npages) as present (writable when w), as mapped now. */
static void record(struct mrmgr__sim_odp *o, uint64_t va, uint64_t npages,
		   int w, uint64_t *newly)
{
	uint64_t pm[PM_CHUNK];

	for (uint64_t i = 0; i < npages;) {
		size_t c = npages - i < PM_CHUNK ? (size_t)(npages - i) : PM_CHUNK;

		pagemap(va + i * PAGE, c, pm);
		for (size_t j = 0; j < c; j++) {
			uint64_t vpn = (va + (i + j) * PAGE) / PAGE;
			const uint64_t *v = present_find(o, vpn);
			int keep_w;

			if (!(pm[j] & MRMGR__PM_PRESENT))
				continue;
			/* A read fault does not take write permission away
			 * from the same page. */
			keep_w = v && (*v & ~PRESENT_W) == pm_pfn(pm[j]) &&
				 (*v & PRESENT_W);
			if (present_ok(o, vpn, pm[j], w))
				continue;
			if (present_set(o, vpn, pm_pfn(pm[j]) |
					    (w || keep_w ? PRESENT_W : 0)) == 0 &&
			    newly)
				(*newly)++;
		}
		i += c;
	}
}

static uint64_t mul_sat(uint64_t a, uint64_t b)
{
	uint64_t v;

	return __builtin_mul_overflow(a, b, &v) ? UINT64_MAX : v;
}

int mrmgr__sim_odp_access(struct mrmgr__sim_ctx *s, struct mrmgr__sim_mr *m,
			  uint64_t va, size_t len, int write, uint64_t *wait_ns)
{
	uint64_t first = va & ~(PAGE - 1);
	uint64_t npages = (((va + len - 1) & ~(PAGE - 1)) - first) / PAGE + 1;
	uint64_t pm[PM_CHUNK], faults = 0;
	int ret = 0;

	*wait_ns = 0;
	for (uint64_t i = 0; i < npages && !ret;) {
		size_t c = npages - i < PM_CHUNK ? (size_t)(npages - i) : PM_CHUNK;
		uint64_t base = first + i * PAGE;

		pagemap(base, c, pm);
		for (size_t j = 0; j < c && !ret;) {
			size_t run = 0;

			while (j + run < c &&
			       !present_ok(m->odp, base / PAGE + j + run,
					   pm[j + run], write))
				run++;
			if (!run) {
				j++;
				continue;
			}
			ret = fault_in(base + j * PAGE, run, write);
			if (!ret) {
				record(m->odp, base + j * PAGE, run, write, NULL);
				faults += run;
			}
			j += run;
		}
		i += c;
	}
	s->stats.odp_faults += faults;
	*wait_ns = mul_sat(faults, s->odp_fault_ns);
	if (ret)
		mrmgr__dbg("sim %s: ODP fault at %#llx+%zu cannot be resolved "
			   "(%s mapping)", s->ibdev.name, (unsigned long long)va,
			   len, write ? "no writable" : "no readable");
	return ret;
}

/* ------------------------------------------------------- registration */

static int is_implicit(const void *addr, size_t length)
{
	return !addr && length == SIZE_MAX;
}

int mrmgr__sim_reg_odp(struct mrmgr__sim_pd *spd, void *addr, size_t length,
		       unsigned int access, struct ibv_mr **mr)
{
	struct mrmgr__sim_ctx *s = spd->sctx;
	int implicit = is_implicit(addr, length);
	uint64_t general = s->pers->odp_general;
	struct mrmgr__sim_mr *m = NULL;
	uint64_t ns = 0;
	int ret;

	if (s->flags & MRMGR_SIM_FLAG_NO_IMPLICIT_ODP)
		general &= ~(uint64_t)IBV_ODP_SUPPORT_IMPLICIT;
	/* rdma_rxe (6.1) and the like: the kernel refuses the flag. */
	if (!(general & IBV_ODP_SUPPORT) ||
	    (implicit && !(general & IBV_ODP_SUPPORT_IMPLICIT))) {
		mrmgr__dbg("sim_reg_mr: %s does not support %s ODP",
			   s->ibdev.name, implicit ? "implicit" : "explicit");
		ret = EINVAL;
	} else if (access & IBV_ACCESS_HUGETLB) {
		mrmgr__dbg("sim_reg_mr: HUGETLB ODP is not modelled");
		ret = EINVAL;
	} else {
		unsigned int rest = access & ~(unsigned int)IBV_ACCESS_ON_DEMAND;

		/* An implicit MR has no range to check, only access rules:
		 * check those against a harmless one-page range. */
		ret = mrmgr__sim_check_reg(s, implicit ? (void *)(uintptr_t)PAGE
						       : addr,
					   implicit ? 1 : length, rest);
	}
	if (!ret) {
		m = calloc(1, sizeof(*m));
		if (m)
			m->odp = calloc(1, sizeof(*m->odp));
		if (!m || !m->odp) {
			if (m)
				free(m);
			m = NULL;
			ret = ENOMEM;
		}
	}

	pthread_mutex_lock(&s->lock);
	if (!ret)
		ret = mrmgr__sim_fault_check(s, MRMGR_SIM_OP_REG, addr, length,
					     access);
	if (!ret && s->mrs >= s->max_mr)
		ret = ENOMEM;
	if (!ret)
		ret = mrmgr__sim_slot_alloc(s, m);
	if (ret) {
		s->stats.reg_failures++;
		pthread_mutex_unlock(&s->lock);
		if (m)
			mrmgr__sim_odp_free(m);
		free(m);
		return ret;
	}
	/*
	 * Nothing pinned, populated or charged to memlock: the kernel makes
	 * an ODP umem without touching the pages, mapped or not.
	 */
	m->spd = spd;
	m->access = access;
	if (!implicit) {
		m->span = (uintptr_t)addr & ~(PAGE - 1);
		m->npages = ((((uintptr_t)addr + length + PAGE - 1) & ~(PAGE - 1)) -
			     m->span) / PAGE;
	}
	m->ibmr.context = spd->ibpd.context;
	m->ibmr.pd = &spd->ibpd;
	m->ibmr.addr = addr;
	m->ibmr.length = length;
	m->ibmr.handle = s->next_mr_handle++;
	m->magic = MRMGR__SIM_MR_MAGIC;
	m->live = 1;
	mrmgr__sim_share_mr(s, m, 1);
	s->mrs++;
	spd->mrs++;
	s->stats.live_mrs++;
	s->stats.registrations++;
	s->stats.pages_registered += m->npages;
	ns = s->reg_ns;
	pthread_mutex_unlock(&s->lock);
	/* Only the fixed cost: there is no page list to build. */
	mrmgr__sim_busy_wait(ns);
	*mr = &m->ibmr;
	return 0;
}

/* ------------------------------------------------------------ advise */

/* Validate one SGE against the MR its lkey names. Lock held. */
static int check_sge(struct mrmgr__sim_ctx *s, struct mrmgr__sim_pd *spd,
		     enum ibv_advise_mr_advice advice, const struct ibv_sge *sge,
		     struct mrmgr__sim_mr **out)
{
	uint32_t idx = sge->lkey >> 8;
	struct mrmgr__sim_mr *m;
	uint64_t base;

	if (idx == 0 || idx >= s->hwm || !(m = s->slots[idx].mr) || !m->live)
		return EFAULT; /* "one of the lkeys ... is invalid" */
	if (m->ibmr.lkey != sge->lkey)
		return ENOENT; /* "lkeys aren't consistent with the MR's" */
	if (m->spd != spd)
		return EPERM;  /* "a valid lkey outside the caller's scope" */
	if (!m->odp)
		return EFAULT; /* prefetch needs ODP MRs */
	base = (uintptr_t)m->ibmr.addr;
	if (sge->addr < base || sge->length > m->ibmr.length ||
	    sge->addr - base > m->ibmr.length - sge->length)
		return EFAULT; /* "out of the MR bounds" */
	if (advice == IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE &&
	    !(m->access & IBV_ACCESS_LOCAL_WRITE))
		return EPERM;  /* "PREFETCH_WRITE but ... not writable" */
	*out = m;
	return 0;
}

/* Make one SGE's pages present. Lock held. */
static int prefetch_sge(struct mrmgr__sim_mr *m, enum ibv_advise_mr_advice advice,
			int flush, const struct ibv_sge *sge, uint64_t *newly)
{
	uint64_t first, npages;
	int write = advice == IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, ok = 1;

	if (!sge->length)
		return 0;
	first = sge->addr & ~(PAGE - 1);
	npages = (((sge->addr + sge->length - 1) & ~(PAGE - 1)) - first) / PAGE + 1;
	if (advice != IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT &&
	    fault_in(first, npages, write) != 0) {
		if (flush)
			return EFAULT;
		ok = 0; /* best effort: take what the CPU has */
	}
	/* NO_FAULT takes the CPU's pages as they are, read-only. */
	record(m->odp, first, npages,
	       write && ok && advice != IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT,
	       newly);
	return 0;
}

MRMGR_EXPORT int mrmgr_sim_advise_mr(struct ibv_pd *pd,
				     enum ibv_advise_mr_advice advice,
				     uint32_t flags, struct ibv_sge *sg_list,
				     uint32_t num_sge)
{
	struct mrmgr__sim_pd *spd = mrmgr__sim_pd_get(pd);
	struct mrmgr__sim_ctx *s;
	uint64_t newly = 0, total = 0, ns = 0;
	int ret = 0, flush = !!(flags & IBV_ADVISE_MR_FLAG_FLUSH);

	if (!spd)
		return EINVAL; /* "the PD is invalid" */
	s = spd->sctx;
	pthread_mutex_lock(&s->lock);
	s->stats.advise_calls++;
	if (!s->pers->advise)
		ret = EOPNOTSUPP; /* the provider has no advise_mr */
	else if (flags & ~(uint32_t)IBV_ADVISE_MR_FLAG_FLUSH)
		ret = EINVAL;
	else if (advice != IBV_ADVISE_MR_ADVICE_PREFETCH &&
		 advice != IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE &&
		 advice != IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT)
		ret = ENOTSUP;
	else if (!sg_list || !num_sge || num_sge > s->pers->max_sge)
		ret = EINVAL;
	/* Every SGE is checked before any page is touched. */
	for (uint32_t i = 0; !ret && i < num_sge; i++) {
		struct mrmgr__sim_mr *m;

		ret = check_sge(s, spd, advice, &sg_list[i], &m);
		total += sg_list[i].length;
	}
	if (!ret)
		ret = mrmgr__sim_fault_check(s, MRMGR_SIM_OP_ADVISE,
					     (void *)(uintptr_t)sg_list[0].addr,
					     (size_t)total, (unsigned int)advice);
	for (uint32_t i = 0; !ret && i < num_sge; i++) {
		struct mrmgr__sim_mr *m = NULL;

		(void)check_sge(s, spd, advice, &sg_list[i], &m);
		ret = prefetch_sge(m, advice, flush, &sg_list[i], &newly);
	}
	if (ret)
		s->stats.advise_errors++;
	s->stats.odp_prefetched_pages += newly;
	/* Without FLUSH a real device works in a kernel worker. */
	if (flush)
		ns = mul_sat(newly, s->odp_prefetch_ns_per_page);
	pthread_mutex_unlock(&s->lock);
	mrmgr__sim_busy_wait(ns);
	if (ret)
		mrmgr__dbg("sim_advise_mr on %s: %s", s->ibdev.name,
			   strerror(ret));
	return ret;
}
