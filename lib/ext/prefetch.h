/*
 * Prefetch hints: SGE lists for ibv_advise_mr(), sent in batches.
 *
 * SPDX-License-Identifier: MIT
 */
#ifndef MRMGR__PREFETCH_H
#define MRMGR__PREFETCH_H

#include <stddef.h>
#include <stdint.h>
#include <infiniband/verbs.h>

/*
 * Longest SGE sent: an ibv_sge length is 32 bits; 1 GiB pieces keep every
 * piece but the last page-aligned when the range is.
 */
#define MRMGR__SGE_MAX_LEN (UINT64_C(1) << 30)

/*
 * Bounds of one implicit-mode request (the implicit MR covers the whole
 * address space, so nothing else bounds it): SGEs in its list (16 KiB at
 * most), and the highest user address of any Linux (57-bit virtual
 * addresses): a range past it is EINVAL.
 */
#define MRMGR__PREFETCH_MAX_SGES 1024u
#define MRMGR__PREFETCH_VA_LAST ((UINT64_C(1) << 56) - 1)

/* A growable SGE list; the first few live inside it, no allocation. */
struct mrmgr__sge_list {
	struct ibv_sge *v;
	size_t n, cap;
	struct ibv_sge local[16];
};

void mrmgr__sge_init(struct mrmgr__sge_list *l);
void mrmgr__sge_fini(struct mrmgr__sge_list *l);
/* Append [addr, addr+len) as SGEs of at most MRMGR__SGE_MAX_LEN. 0 or ENOMEM. */
int mrmgr__sge_push(struct mrmgr__sge_list *l, uint64_t addr, uint64_t len,
		    uint32_t lkey);

#endif /* MRMGR__PREFETCH_H */
