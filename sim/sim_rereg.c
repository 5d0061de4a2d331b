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

MRMGR_EXPORT int mrmgr_sim_rereg_mr(struct ibv_mr *mr, int flags,
				    struct ibv_pd *pd, void *addr,
				    size_t length, int access, int *code)
{
	struct mrmgr__sim_pd *npd = NULL;
	struct mrmgr__sim_ctx *s;
	struct mrmgr__sim_mr *m, fresh, old;
	unsigned int new_access;
	uint64_t span = 0, npages = 0, bytes = 0, ns;
	int trans = flags & IBV_REREG_MR_CHANGE_TRANSLATION;
	int fcode = 0, ferr, ret, unverified = 0, repin_write = 0;

	if (code)
		*code = 0;
	/* What libibverbs refuses before it calls the provider. */
	if (!mr || (flags & ~IBV_REREG_MR_FLAGS_SUPPORTED) ||
	    (trans && (!addr || !length)) ||
	    (access && !(flags & IBV_REREG_MR_CHANGE_ACCESS))) {
		mrmgr__dbg("sim_rereg_mr: invalid input");
		return fail(code, IBV_REREG_MR_ERR_INPUT, EINVAL);
	}
	s = mrmgr__sim_ctx_get(mr->context);
	if (!s)
		return fail(code, IBV_REREG_MR_ERR_INPUT, EINVAL);
	if (flags & IBV_REREG_MR_CHANGE_PD)
		npd = pd ? mrmgr__sim_pd_get(pd) : NULL;

	pthread_mutex_lock(&s->lock);
	m = mrmgr__sim_mr_live(s, mr);
	if (!m || m->dead) {
		s->stats.rereg_failures++;
		pthread_mutex_unlock(&s->lock);
		mrmgr__warn("sim_rereg_mr: %p is not a usable MR of %s",
			    (void *)mr, s->ibdev.name);
		return fail(code, IBV_REREG_MR_ERR_INPUT, EINVAL);
	}
	ferr = mrmgr__sim_fault_check_code(s, MRMGR_SIM_OP_REREG,
					   trans ? addr : mr->addr,
					   trans ? length : mr->length,
					   (flags & IBV_REREG_MR_CHANGE_ACCESS)
						   ? (unsigned int)access
						   : m->access,
					   &fcode);
	if (ferr && !fcode)
		fcode = IBV_REREG_MR_ERR_CMD;
	if (ferr && fcode != IBV_REREG_MR_ERR_DO_FORK_OLD) {
		/* Both "old MR valid" codes change nothing; both command
		 * errors leave an MR that must not be used. */
		if (fcode <= IBV_REREG_MR_ERR_CMD)
			m->dead = 1;
		s->stats.rereg_failures++;
		pthread_mutex_unlock(&s->lock);
		return fail(code, fcode, ferr);
	}
	if (s->personality == MRMGR_SIM_RXE) {
		/* rdma_rxe has no rereg_mr: libibverbs' stub fails the call
		 * as a command error, and nothing happens to the MR. */
		s->stats.rereg_failures++;
		pthread_mutex_unlock(&s->lock);
		return fail(code, IBV_REREG_MR_ERR_CMD, EOPNOTSUPP);
	}

	new_access = (flags & IBV_REREG_MR_CHANGE_ACCESS) ? (unsigned int)access
							  : m->access;
	ret = check_args(s, m, flags, npd, addr, length, new_access);
	if (!ret && trans) {
		span = (uintptr_t)addr & ~(PAGE - 1);
		bytes = (((uintptr_t)addr + length + PAGE - 1) & ~(PAGE - 1)) - span;
		npages = bytes / PAGE;
		/* Charged on top of the old range, as the kernel does. */
		if (bytes > s->memlock_bytes ||
		    s->stats.pinned_bytes > s->memlock_bytes - bytes)
			ret = ENOMEM;
	}
	if (ret) {
		m->dead = 1;
		s->stats.rereg_failures++;
		pthread_mutex_unlock(&s->lock);
		return fail(code, IBV_REREG_MR_ERR_CMD, ret);
	}
	if (trans) {
		s->stats.pinned_bytes += bytes;
		if (s->stats.pinned_bytes > s->stats.peak_pinned_bytes)
			s->stats.peak_pinned_bytes = s->stats.pinned_bytes;
	}
	repin_write = !trans && (new_access & WRITE_ACCESS) &&
		      !(m->access & WRITE_ACCESS);
	m->live = 0; /* revoked while the command runs */
	ns = mrmgr__sim_cost_ns(s->reg_ns, s->reg_ns_per_page, npages);
	pthread_mutex_unlock(&s->lock);

	/* The slow part, unlocked: nobody else touches an MR in flight. */
	memset(&fresh, 0, sizeof(fresh));
	if (trans) {
		fresh.span = span;
		fresh.npages = npages;
		fresh.access = new_access;
		ret = mrmgr__sim_pin(s, &fresh, &unverified);
	} else if (repin_write) {
		/* Write access now: the pages must take stores. */
		ret = mrmgr__sim_populate(m->span, m->npages * PAGE, 1);
	}
	if (!ret)
		mrmgr__sim_busy_wait(ns);

	pthread_mutex_lock(&s->lock);
	if (!ret && trans &&
	    npages > (m->key_pages ? m->key_pages : pow2_at_least(m->npages))) {
		/* The new page list does not fit the key's slot. */
		ret = mrmgr__sim_keys_renew(s, m);
		if (!ret) {
			m->key_pages = pow2_at_least(npages);
			s->stats.rereg_key_changes++;
		}
	}
	if (ret) {
		if (trans)
			s->stats.pinned_bytes -= bytes;
		m->live = 1;
		m->dead = 1;
		s->stats.rereg_failures++;
		pthread_mutex_unlock(&s->lock);
		mrmgr__sim_pages_release(&fresh);
		return fail(code, IBV_REREG_MR_ERR_CMD, ret);
	}
	memset(&old, 0, sizeof(old));
	if (trans) {
		old.pipes = m->pipes;
		old.npipes = m->npipes;
		old.pfns = m->pfns;
		s->stats.pinned_bytes -= m->npages * PAGE;
		m->pipes = fresh.pipes;
		m->npipes = fresh.npipes;
		m->pfns = fresh.pfns;
		m->span = span;
		m->npages = npages;
		m->ibmr.addr = addr;
		m->ibmr.length = length;
		s->stats.rereg_pages += npages;
		if (unverified)
			s->stats.unverified_pages += npages;
	}
	m->access = new_access;
	if (flags & IBV_REREG_MR_CHANGE_PD) {
		m->spd->mrs--;
		npd->mrs++;
		m->spd = npd;
		m->ibmr.pd = pd;
	}
	m->live = 1;
	mrmgr__sim_share_mr(s, m, 1); /* keys, range, access or PD changed */
	s->stats.reregs++;
	pthread_mutex_unlock(&s->lock);
	mrmgr__sim_pages_release(&old);
	mrmgr__dbg("sim_rereg_mr: flags %#x -> [%p, +%zu) access %#x keys %#x/%#x",
		   flags, mr->addr, mr->length, new_access, mr->lkey, mr->rkey);
	if (ferr) /* DO_FORK_OLD: the change is made, and reported failed */
		return fail(code, fcode, ferr);
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
