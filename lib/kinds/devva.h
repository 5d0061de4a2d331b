/*
 * Kind three: device virtual addresses of a memory domain (devva.c), and
 * the domain itself (struct mrmgr_domain: a table of operations, public
 * in mrmgr.h, and what cuda.c loaded).
 *
 * The key space is the device VA itself. Keys can be reused under a
 * cached region (an allocation freed, another given the same address),
 * so the kind's event source is the domain's free counter
 * (MRMGR__KIND_SRC_DOMAIN): the get (lib/core/kind_devva.c) re-validates
 * the allocations the kind holds (buffer id still the same) when the
 * counter moved since the last validation, and invalidates the ones that
 * changed before it looks the key up.
 *
 * SPDX-License-Identifier: MIT
 */
#ifndef MRMGR__DEVVA_H
#define MRMGR__DEVVA_H

#include <stdint.h>

#include <mrmgr/mrmgr.h>

struct mrmgr_domain {
	struct mrmgr_domain_ops ops;
	void *ctx;
	const uint64_t *free_counter;
	/* Frees begun (CUDA: moved before the driver's free, free_counter
	 * after it); NULL when the counter moves once per free. While the
	 * two differ a free is under way and every get validates. */
	const uint64_t *begun;
	/* Run at every get before the counter is read (CUDA: has an object
	 * been loaded since the call sites were redirected?); or NULL. */
	void (*recheck)(void);
	/* Nonzero when the domain's counter moves at every free (atomic):
	 * zero, each get validates the buffer id of the allocation it
	 * would hit (the counter is not trusted). */
	const int *follows;
	uint64_t validations; /* buffer ids checked by gets (atomic) */
	uint64_t reported;   /* mrmgr_domain_freed() calls (atomic) */
	unsigned int users;  /* caches made on it (atomic) */
	void (*close)(void *ctx); /* NULL: the caller's ctx, not freed */
};

/* The domain's free count: its own counter plus the frees reported with
 * mrmgr_domain_freed() (a domain that cannot see frees, CUDA's). */
static inline uint64_t mrmgr__domain_frees(const struct mrmgr_domain *d)
{
	return __atomic_load_n(d->free_counter, __ATOMIC_ACQUIRE) +
	       __atomic_load_n(&d->reported, __ATOMIC_ACQUIRE);
}

/* No free under way (the domain's begun and ended counts agree). */
static inline int mrmgr__domain_settled(const struct mrmgr_domain *d)
{
	return !d->begun || __atomic_load_n(d->begun, __ATOMIC_ACQUIRE) ==
			    __atomic_load_n(d->free_counter, __ATOMIC_ACQUIRE);
}

static inline int mrmgr__domain_follows(const struct mrmgr_domain *d)
{
	return __atomic_load_n(d->follows, __ATOMIC_ACQUIRE);
}

/* Set by mrmgr_get_device() around its mrmgr_get(): the kind's
 * registration refuses keys that came any other way. */
extern __thread int mrmgr__devva_entry;
/* The get's device VA: the registration asks the domain about it. */
extern __thread uint64_t mrmgr__devva_va;

struct mrmgr__devva_tbl;

int mrmgr__devva_tbl_new(struct mrmgr_domain *d, struct mrmgr__devva_tbl **t);

/*
 * The allocations the table holds MRs of whose buffer id changed:
 * forgotten (their descriptors stay until their MRs are deregistered)
 * and their [base, +size) appended to *ranges (pairs; realloc'd,
 * *n pairs). 0 or ENOMEM.
 */
int mrmgr__devva_stale(struct mrmgr__devva_tbl *t, uint64_t **ranges,
		       size_t *n);

/*
 * The allocations holding va whose buffer id changed, for a domain whose
 * counter is not trusted: as mrmgr__devva_stale() for those only, each
 * check counted in the domain's validations. 0 or ENOMEM.
 */
int mrmgr__devva_stale_at(struct mrmgr__devva_tbl *t, uint64_t va,
			  uint64_t **ranges, size_t *n);

/* Descriptors the table holds now (tests, mrmgr_info). */
uint64_t mrmgr__devva_fds(struct mrmgr__devva_tbl *t);

/* The free count the table's regions were last validated at. */
uint64_t *mrmgr__devva_validated(struct mrmgr__devva_tbl *t);
struct mrmgr_domain *mrmgr__devva_domain(struct mrmgr__devva_tbl *t);
/* Serialises the validations (kind_devva.c). */
void mrmgr__devva_lock(struct mrmgr__devva_tbl *t, int lock);

/* The CUDA domain (cuda.c): 0, ENODEV (no libcuda.so.1), ENXIO (cuInit
 * failed), EOPNOTSUPP (a function missing); *why says which. */
int mrmgr__cuda_domain_open(struct mrmgr_domain **d, const char **why);

#endif /* MRMGR__DEVVA_H */
