/*
 * The simulated HCA's export table (sim_share.c writes it, sim_import.c
 * reads it): the part of a device's state an importer needs, in the memfd
 * that is the device's cmd_fd. Layout: a header page, then the MR
 * entries, then the PD entries; each entry starts with a sequence count
 * (odd while the owner writes it).
 *
 * SPDX-License-Identifier: MIT
 */
#ifndef MRMGR__SIM_SHARE_H
#define MRMGR__SIM_SHARE_H

#include <stddef.h>
#include <fcntl.h>
#include <stdint.h>
#include <sys/types.h>

#include "sim/sim_internal.h"

#define MRMGR__SIM_TBL_MAGIC 0x6d727368u /* "mrsh" */
#define MRMGR__SIM_TBL_VERSION 1u
#define MRMGR__SIM_TBL_MRS 16384u  /* power of two */
#define MRMGR__SIM_TBL_PDS 1024u   /* power of two */
#define MRMGR__SIM_TBL_PROBES 8u
/* The seals an importer requires on the table's memfd. */
#define MRMGR__SIM_TBL_SEALS (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)
/* How long a reader waits for an entry the owner is writing (its
 * sequence count odd) before ETIMEDOUT: the owner is dead or lying. */
#define MRMGR__SIM_TBL_WAIT_MS 50u

enum { MRMGR__SIM_ENTRY_FREE = 0, MRMGR__SIM_ENTRY_LIVE = 1 };

struct mrmgr__sim_tbl_hdr {
	uint32_t magic, version;
	uint32_t personality;
	uint32_t nmrs, npds;
	int32_t owner_pid;
	uint64_t owner_token; /* the owner's struct ibv_context *, in its process */
	uint64_t size;        /* bytes of the whole table */
	char name[64];
};

struct mrmgr__sim_tbl_mr {
	uint32_t seq; /* odd while the owner writes the entry */
	uint32_t state;
	uint32_t handle, pd_handle, lkey, rkey, access, pad;
	uint64_t addr, length;
};

struct mrmgr__sim_tbl_pd {
	uint32_t seq, state, handle, pad;
};

#define MRMGR__SIM_TBL_HDR_BYTES MRMGR__SIM_PAGE_SIZE
#define MRMGR__SIM_TBL_MRS_OFF MRMGR__SIM_TBL_HDR_BYTES
#define MRMGR__SIM_TBL_PDS_OFF                                             \
	(MRMGR__SIM_TBL_MRS_OFF +                                          \
	 MRMGR__SIM_TBL_MRS * sizeof(struct mrmgr__sim_tbl_mr))
#define MRMGR__SIM_TBL_BYTES                                               \
	(MRMGR__SIM_TBL_PDS_OFF +                                          \
	 MRMGR__SIM_TBL_PDS * sizeof(struct mrmgr__sim_tbl_pd))

/* Importer side: an imported context's view of its owner. */
struct mrmgr__sim_import {
	const char *map;
	size_t size;
	pid_t owner_pid;
	int in_process;
	uint64_t owner_token;
	char owner_name[64];
	int pagemap_fd; /* the owner's /proc/<pid>/pagemap; -1 */
	struct mrmgr__sim_mr **mrs; /* imported MRs */
	size_t nmrs, cap;
};

static inline const struct mrmgr__sim_tbl_mr *
mrmgr__sim_tbl_mrs(const char *map)
{
	return (const void *)(map + MRMGR__SIM_TBL_MRS_OFF);
}

static inline const struct mrmgr__sim_tbl_pd *
mrmgr__sim_tbl_pds(const char *map)
{
	return (const void *)(map + MRMGR__SIM_TBL_PDS_OFF);
}

/*
 * Readers hold no lock while they wait for an entry; each gives up at
 * its deadline (mrmgr__sim_tbl_deadline(): MRMGR__SIM_TBL_WAIT_MS from
 * now) with ETIMEDOUT. Indexes are masked by the table's fixed sizes, so
 * no read leaves the mapping whatever the entries say.
 */
uint64_t mrmgr__sim_tbl_deadline(void);
/* A consistent copy of an MR entry (the owner may be writing it): 0, or
 * ETIMEDOUT. */
int mrmgr__sim_tbl_read_mr(const struct mrmgr__sim_tbl_mr *e,
			   struct mrmgr__sim_tbl_mr *out, uint64_t deadline);
/* The live MR entry with handle: 0 with *out and its index, ENOENT, or
 * ETIMEDOUT. */
int mrmgr__sim_tbl_find_mr(const struct mrmgr__sim_import *imp, uint32_t handle,
			   struct mrmgr__sim_tbl_mr *out, uint32_t *slot);
/* 0 when a live PD entry has handle, ENOENT, or ETIMEDOUT. */
int mrmgr__sim_tbl_find_pd(const struct mrmgr__sim_import *imp, uint32_t handle);

#endif /* MRMGR__SIM_SHARE_H */
