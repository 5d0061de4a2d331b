/*
 * Simulated re-registration: ibv_rereg_mr() as mlx5 implements it, and as
 * rdma_rxe refuses it.
 *
 * A translation change follows the kernel's order: the new range is
 * charged to the memlock budget and pinned while the old one is still
 * pinned (the device's peak shows both), then the MR switches over and the
 * old pages are let go. The MR is revoked while the call runs, so a
 * simulated access through its keys fails meanwhile, as operations in
 * flight on a real MR do.
 *
 * Failures leave the MR in the state the returned code promises (see
 * mrmgr_sim_rereg_mr() in sim.h): "old MR valid" changes nothing, "new MR
 * valid" has made the change, "MR shouldn't be used" marks it dead so that
 * a caller who keeps using it is caught (its keys refuse access) while
 * dereg still works, as the man page requires.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <errno.h>
#include <string.h>

#include "compiler.h"
#include "log.h"
#include "sim/sim_internal.h"

#define PAGE MRMGR__SIM_PAGE_SIZE
#define WRITE_ACCESS                                                       \
	(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |                \
	 IBV_ACCESS_REMOTE_ATOMIC)

static uint64_t pow2_at_least(uint64_t n)
{
	uint64_t p = 1;

	while (p < n && p <= UINT64_MAX / 2)
		p <<= 1;
	return p;
}

static int fail(int *code, int c, int err)
{
	if (code)
		*code = c;
	return err;
}

/* The argument checks the kernel makes (they fail the command). */
static int check_args(struct mrmgr__sim_ctx *s, const struct mrmgr__sim_mr *m,
		      int flags, struct mrmgr__sim_pd *npd, void *addr,
		      size_t length, unsigned int new_access)
{
	if (!flags) {
		mrmgr__dbg("sim_rereg_mr: no flags");
		return EINVAL;
	}
	if ((flags & IBV_REREG_MR_CHANGE_PD) && (!npd || npd->sctx != s)) {
		mrmgr__dbg("sim_rereg_mr: the new PD is not of this device");
		return EINVAL;
	}
	if (flags & IBV_REREG_MR_CHANGE_TRANSLATION)
		return mrmgr__sim_check_reg(s, addr, length, new_access);
	if (flags & IBV_REREG_MR_CHANGE_ACCESS)
		return mrmgr__sim_check_reg(s, m->ibmr.addr, m->ibmr.length,
					    new_access);
	return 0;
}

/* One re-registration in flight: what it asks for, and what it has
 * charged, from its start under the lock to its switch-over. */
struct rereg {
	int flags, trans;
	struct ibv_pd *pd;
	struct mrmgr__sim_pd *npd;  /* CHANGE_PD: the new PD, or NULL */
	void *addr;
	size_t length;
	unsigned int access;        /* the access the MR will have */
	uint64_t span, npages, bytes; /* the new range's pages (trans) */
	uint64_t ns;                /* the command's simulated cost */
	int repin_write;            /* same pages, newly writable */
	int unverified;             /* mrmgr__sim_pin's report */
	int fcode, ferr;            /* an injected fault, and its code */
};

/* The fault plan's verdict on this command: the errno it fails with now,
 * or 0. DO_FORK_OLD fails only at the end (the change is made), so it is
 * left in r for then. Both "old MR valid" codes change nothing; both
 * command errors leave an MR that must not be used. Lock held. */
static int injected_fault(struct mrmgr__sim_ctx *s, struct mrmgr__sim_mr *m,
			  struct rereg *r)
{
	r->ferr = mrmgr__sim_fault_check_code(s, MRMGR_SIM_OP_REREG,
					      r->trans ? r->addr : m->ibmr.addr,
					      r->trans ? r->length
						       : m->ibmr.length,
					      r->access, &r->fcode);
	if (r->ferr && !r->fcode)
		r->fcode = IBV_REREG_MR_ERR_CMD;
	if (!r->ferr || r->fcode == IBV_REREG_MR_ERR_DO_FORK_OLD)
		return 0;
	if (r->fcode <= IBV_REREG_MR_ERR_CMD)
		m->dead = 1;
	return r->ferr;
}

/* The new range's pages, charged to the memlock budget on top of the old
 * range's, as the kernel does: ENOMEM when they do not fit. Lock held. */
static int charge_range(struct mrmgr__sim_ctx *s, struct rereg *r)
{
	uintptr_t a = (uintptr_t)r->addr;

	r->span = a & ~(PAGE - 1);
	r->bytes = ((a + r->length + PAGE - 1) & ~(PAGE - 1)) - r->span;
	r->npages = r->bytes / PAGE;
	if (r->bytes > s->memlock_bytes ||
	    s->stats.pinned_bytes > s->memlock_bytes - r->bytes)
		return ENOMEM;
	s->stats.pinned_bytes += r->bytes;
	if (s->stats.pinned_bytes > s->stats.peak_pinned_bytes)
		s->stats.peak_pinned_bytes = s->stats.pinned_bytes;
	return 0;
}

/* The command's first half, under the lock: refusals, the charge, and
 * the MR revoked while it runs. 0, or the errno with *c its code. */
static int rereg_start(struct mrmgr__sim_ctx *s, struct mrmgr__sim_mr *m,
		       struct rereg *r, int *c)
{
	int ret = injected_fault(s, m, r);

	*c = IBV_REREG_MR_ERR_CMD;
	if (ret) {
		*c = r->fcode;
		return ret;
	}
	/* rdma_rxe has no rereg_mr: libibverbs' stub fails the call as a
	 * command error, and nothing happens to the MR. */
	if (s->personality == MRMGR_SIM_RXE)
		return EOPNOTSUPP;
	ret = check_args(s, m, r->flags, r->npd, r->addr, r->length,
			 r->access);
	if (!ret && r->trans)
		ret = charge_range(s, r);
	if (ret) {
		m->dead = 1;
		return ret;
	}
	r->repin_write = !r->trans && (r->access & WRITE_ACCESS) &&
			 !(m->access & WRITE_ACCESS);
	m->live = 0; /* revoked while the command runs */
	r->ns = mrmgr__sim_cost_ns(s->reg_ns, s->reg_ns_per_page, r->npages);
	return 0;
}

/* The slow part, unlocked (nobody else touches an MR in flight): the new
 * range pinned into *fresh, or the old pages made to take stores. */
static int rereg_pin(struct mrmgr__sim_ctx *s, const struct mrmgr__sim_mr *m,
		     struct rereg *r, struct mrmgr__sim_mr *fresh)
{
	int ret = 0;

	memset(fresh, 0, sizeof(*fresh));
	if (r->trans) {
		fresh->span = r->span;
		fresh->npages = r->npages;
		fresh->access = r->access;
		ret = mrmgr__sim_pin(s, fresh, &r->unverified);
	} else if (r->repin_write) {
		ret = mrmgr__sim_populate(m->span, m->npages * PAGE, 1);
	}
	if (!ret)
		mrmgr__sim_busy_wait(r->ns);
	return ret;
}

/* New keys when the new page list does not fit the keys' slot. Lock
 * held. */
static int rereg_keys(struct mrmgr__sim_ctx *s, struct mrmgr__sim_mr *m,
		      const struct rereg *r)
{
	int ret;

	if (!r->trans ||
	    r->npages <= (m->key_pages ? m->key_pages : pow2_at_least(m->npages)))
		return 0;
	ret = mrmgr__sim_keys_renew(s, m);
	if (!ret) {
		m->key_pages = pow2_at_least(r->npages);
		s->stats.rereg_key_changes++;
	}
	return ret;
}

/* The switch-over, under the lock: the MR takes the new pages, access
 * and PD and is live again; the old pages go to *old, released by the
 * caller once the lock is let go. */
static void rereg_switch(struct mrmgr__sim_ctx *s, struct mrmgr__sim_mr *m,
			 const struct rereg *r, const struct mrmgr__sim_mr *fresh,
			 struct mrmgr__sim_mr *old)
{
	memset(old, 0, sizeof(*old));
	if (r->trans) {
		old->pipes = m->pipes;
		old->npipes = m->npipes;
		old->pfns = m->pfns;
		s->stats.pinned_bytes -= m->npages * PAGE;
		m->pipes = fresh->pipes;
		m->npipes = fresh->npipes;
		m->pfns = fresh->pfns;
		m->span = r->span;
		m->npages = r->npages;
		m->ibmr.addr = r->addr;
		m->ibmr.length = r->length;
		s->stats.rereg_pages += r->npages;
		if (r->unverified)
			s->stats.unverified_pages += r->npages;
	}
	m->access = r->access;
	if (r->flags & IBV_REREG_MR_CHANGE_PD) {
		m->spd->mrs--;
		r->npd->mrs++;
		m->spd = r->npd;
		m->ibmr.pd = r->pd;
	}
	m->live = 1;
	mrmgr__sim_share_mr(s, m, 1); /* keys, range, access or PD changed */
	s->stats.reregs++;
}

MRMGR_EXPORT int mrmgr_sim_rereg_mr(struct ibv_mr *mr, int flags,
				    struct ibv_pd *pd, void *addr,
				    size_t length, int access, int *code)
{
	struct rereg r = {
		.flags = flags, .trans = flags & IBV_REREG_MR_CHANGE_TRANSLATION,
		.pd = pd, .addr = addr, .length = length,
	};
	struct mrmgr__sim_ctx *s;
	struct mrmgr__sim_mr *m, fresh, old;
	int c, ret;

	if (code)
		*code = 0;
	/* What libibverbs refuses before it calls the provider. */
	if (!mr || (flags & ~IBV_REREG_MR_FLAGS_SUPPORTED) ||
	    (r.trans && (!addr || !length)) ||
	    (access && !(flags & IBV_REREG_MR_CHANGE_ACCESS))) {
		mrmgr__dbg("sim_rereg_mr: invalid input");
		return fail(code, IBV_REREG_MR_ERR_INPUT, EINVAL);
	}
	s = mrmgr__sim_ctx_get(mr->context);
	if (!s)
		return fail(code, IBV_REREG_MR_ERR_INPUT, EINVAL);
	if (flags & IBV_REREG_MR_CHANGE_PD)
		r.npd = pd ? mrmgr__sim_pd_get(pd) : NULL;

	pthread_mutex_lock(&s->lock);
	m = mrmgr__sim_mr_live(s, mr);
	if (!m || m->dead) {
		s->stats.rereg_failures++;
		pthread_mutex_unlock(&s->lock);
		mrmgr__warn("sim_rereg_mr: %p is not a usable MR of %s",
			    (void *)mr, s->ibdev.name);
		return fail(code, IBV_REREG_MR_ERR_INPUT, EINVAL);
	}
	r.access = (flags & IBV_REREG_MR_CHANGE_ACCESS) ? (unsigned int)access
							: m->access;
	ret = rereg_start(s, m, &r, &c);
	if (ret) {
		s->stats.rereg_failures++;
		pthread_mutex_unlock(&s->lock);
		return fail(code, c, ret);
	}
	pthread_mutex_unlock(&s->lock);

	ret = rereg_pin(s, m, &r, &fresh);

	pthread_mutex_lock(&s->lock);
	if (!ret)
		ret = rereg_keys(s, m, &r);
	if (ret) {
		if (r.trans)
			s->stats.pinned_bytes -= r.bytes;
		m->live = 1;
		m->dead = 1;
		s->stats.rereg_failures++;
		pthread_mutex_unlock(&s->lock);
		mrmgr__sim_pages_release(&fresh);
		return fail(code, IBV_REREG_MR_ERR_CMD, ret);
	}
	rereg_switch(s, m, &r, &fresh, &old);
	pthread_mutex_unlock(&s->lock);
	mrmgr__sim_pages_release(&old);
	mrmgr__dbg("sim_rereg_mr: flags %#x -> [%p, +%zu) access %#x keys %#x/%#x",
		   flags, mr->addr, mr->length, r.access, mr->lkey, mr->rkey);
	if (r.ferr) /* DO_FORK_OLD: the change is made, and reported failed */
		return fail(code, r.fcode, r.ferr);
	return 0;
}

int mrmgr__sim_backend_rereg(struct ibv_mr *mr, int flags, struct ibv_pd *pd,
			     void *addr, size_t length, int access, int *err)
{
	int code = 0;
	int ret = mrmgr_sim_rereg_mr(mr, flags, pd, addr, length, access, &code);

	*err = ret;
	if (!ret)
		return 0;
	return code ? code : IBV_REREG_MR_ERR_CMD;
}
