/*
 * The simulated HCA's private objects and the calls its files share.
 *
 * Locking: one mutex per simulated device (ctx->lock) guards everything in
 * that device: the key table, its PDs' and MRs' bookkeeping, the armed
 * faults and the statistics. The slow parts of a registration (populating,
 * holding and identifying pages, the cost busy-wait) run outside it, so
 * threads registering concurrently overlap the way they would on a real
 * device; simulated writes and reads run under it, which serialises them
 * per device. Benchmarks measure the cache, not the sim, so that is enough.
 *
 * SPDX-License-Identifier: MIT
 */
#ifndef MRMGR__SIM_INTERNAL_H
#define MRMGR__SIM_INTERNAL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/types.h>
#include <infiniband/verbs.h>

#include <mrmgr/device.h>
#include <mrmgr/sim.h>

#ifndef MADV_POPULATE_READ /* Linux 5.14; older libc headers lack them */
#define MADV_POPULATE_READ 22
#endif
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

#define MRMGR__SIM_PAGE_SHIFT 12
#define MRMGR__SIM_PAGE_SIZE ((uint64_t)1 << MRMGR__SIM_PAGE_SHIFT)

/* Armed faults per device; the public header promises 16. */
#define MRMGR__SIM_MAX_FAULTS 16
/*
 * Number of enum mrmgr_sim_op values understood. Later operations (rereg,
 * advise, import) append to the enum and raise this; the fault table is
 * indexed by nothing else, so that is the only change fault injection needs.
 */
#define MRMGR__SIM_OP_COUNT 5

/*
 * Keys are (index << 8) | key byte, as both mlx5 (mkey index + variant)
 * and rxe (pool index + random byte) build them, so the index recovers the
 * MR in O(1). Index 0 is never used: no key is ever 0..0xff.
 */
#define MRMGR__SIM_MAX_INDEX 0xffffffu
/*
 * A freed index waits until this many others are free before it is handed
 * out again, so a dead key keeps missing (ENOENT) for a while even before
 * its key byte changes; the table stays at most this much above the peak
 * number of live MRs.
 */
#define MRMGR__SIM_REUSE_DELAY 256u

/* What differs between the personalities. */
struct mrmgr__sim_personality {
	const char *prefix;         /* device name prefix */
	uint32_t max_sge;
	uint64_t page_size_cap;
	unsigned int access_ok;     /* access bits ibv_reg_mr accepts */
	int random_key;             /* rxe: random key byte; mlx5: counter */
	/* ODP (sim_odp.c): odp_caps as ibv_query_device_ex() reports them. */
	uint64_t odp_general;
	uint32_t odp_rc, odp_uc, odp_ud, odp_xrc;
	int advise;                 /* ibv_advise_mr() implemented */
};

struct mrmgr__sim_fault_slot {
	struct mrmgr_sim_fault f;
	uint64_t seen;   /* matching operations since arming */
	uint64_t fired;  /* of which failed */
	int armed;
};

struct mrmgr__sim_ctx;
struct mrmgr__sim_odp;
struct mrmgr__sim_share;
struct mrmgr__sim_import;

struct mrmgr__sim_pd {
	struct ibv_pd ibpd;
	struct mrmgr__sim_ctx *sctx;
	uint32_t magic;
	uint64_t mrs;    /* live and in-flight MRs in this PD */
	/* sim_share.c: 1 + its entry in the export table (0: none), and
	 * whether it was imported (mrmgr_sim_import_pd()). */
	uint32_t share_slot;
	int imported;
};

struct mrmgr__sim_mr {
	struct ibv_mr ibmr;
	struct mrmgr__sim_pd *spd;
	uint32_t magic;
	uint32_t index;        /* slot in the key table */
	int live;              /* 0 while registration is in flight */
	unsigned int access;
	uint64_t span;         /* page-aligned start of the pinned span */
	uint64_t npages;       /* pages in the span */
	/*
	 * Re-registration (sim_rereg.c): the page count the keys' slot was
	 * sized for (0: the next power of two of npages), and whether a
	 * failed rereg command left the MR unusable (its keys then refuse
	 * access; only dereg is allowed).
	 */
	uint64_t key_pages;
	int dead;
	/*
	 * Page identity: the PFN of each page at registration and the pipes
	 * whose buffers hold those pages. pfns == NULL: not checked (NO_PIN,
	 * no pagemap, or holding failed).
	 */
	uint64_t *pfns;
	int *pipes;
	uint32_t npipes;
	/* ODP MRs only (sim_odp.c): the pages present in the device. */
	struct mrmgr__sim_odp *odp;
	/*
	 * sim_share.c: 1 + its entry in the owner's export table (0: not
	 * published). An imported MR (mrmgr_sim_import_mr()) is an object
	 * of this type with magic MRMGR__SIM_IMPORT_MAGIC and index 0 (so no
	 * key-table call accepts it), its entry in the owner's table here,
	 * and, across processes, the owner's PFNs in pfns.
	 */
	uint32_t share_slot;
};

struct mrmgr__sim_slot {
	struct mrmgr__sim_mr *mr; /* NULL: free */
	uint32_t next_free;       /* FIFO link while free */
	uint8_t key;              /* last key byte handed out here */
};

struct mrmgr__sim_ctx {
	struct ibv_context ibctx;
	struct ibv_device ibdev;
	pthread_mutex_t lock;
	const struct mrmgr__sim_personality *pers;
	uint32_t personality;
	uint32_t flags;
	uint64_t memlock_bytes;
	uint64_t reg_ns, reg_ns_per_page, dereg_ns, dereg_ns_per_page;
	uint32_t max_mr;
	uint64_t max_mr_size;
	uint64_t odp_fault_ns, odp_prefetch_ns_per_page;

	/* Key table, grown on demand; index 0 unused. */
	struct mrmgr__sim_slot *slots;
	uint32_t nslots;         /* allocated */
	uint32_t hwm;            /* next never-used index */
	uint32_t free_head, free_tail, nfree;
	uint8_t key_counter;     /* mlx5-style variant */
	uint32_t rng;            /* rxe-style random byte */

	uint64_t mrs;            /* live and in-flight MRs */
	/* The last deregistered MR's object, for the next registration. */
	struct mrmgr__sim_mr *spare;
	uint32_t next_pd_handle, next_mr_handle;
	int warned_unverified;

	struct mrmgr__sim_fault_slot faults[MRMGR__SIM_MAX_FAULTS];
	uint32_t narmed;         /* armed slots in faults[] */
	struct mrmgr_sim_stats stats;

	/* sim_share.c: the export table behind cmd_fd (a device of this
	 * process), or what an imported context reads (NULL otherwise). */
	struct mrmgr__sim_share *share;
	struct mrmgr__sim_import *imp;
};

/* sim_registry.c */
/* The device behind ctx, or NULL (logged) when it is not an open sim. */
struct mrmgr__sim_ctx *mrmgr__sim_ctx_get(struct ibv_context *ctx);
/* sim.c */
/* The sim PD behind pd, or NULL (logged). */
struct mrmgr__sim_pd *mrmgr__sim_pd_get(struct ibv_pd *pd);
/*
 * Whether an armed fault fails this operation: its errno, or 0. Counts
 * the operation against every matching fault. Call with sctx->lock held;
 * predicates run under it and must not call back into the sim.
 */
int mrmgr__sim_fault_check(struct mrmgr__sim_ctx *sctx, uint32_t op,
			   void *addr, size_t length, unsigned int access);
/* The same, also giving the fault's rereg_code (0 when it has none). */
int mrmgr__sim_fault_check_code(struct mrmgr__sim_ctx *sctx, uint32_t op,
				void *addr, size_t length, unsigned int access,
				int *rereg_code);

/* sim_keys.c */
/* The live MR of sctx whose rkey is rkey, or NULL. Lock held. */
struct mrmgr__sim_mr *mrmgr__sim_mr_by_rkey(struct mrmgr__sim_ctx *sctx,
					    uint32_t rkey);
void mrmgr__sim_keys_fini(struct mrmgr__sim_ctx *sctx);
/* An MR's slot and keys (0 or ENOMEM: the key space is full), and its
 * slot freed (reused after MRMGR__SIM_REUSE_DELAY others). Lock held. */
int mrmgr__sim_slot_alloc(struct mrmgr__sim_ctx *sctx, struct mrmgr__sim_mr *m);
void mrmgr__sim_slot_free(struct mrmgr__sim_ctx *sctx, uint32_t idx);
/* sim_mr.c: its rules and bookkeeping, for sim_odp.c. */
#define MRMGR__SIM_MR_MAGIC 0x73696d6du /* "simm" */
int mrmgr__sim_check_reg(const struct mrmgr__sim_ctx *sctx, void *addr,
			 size_t length, unsigned int access);
void mrmgr__sim_busy_wait(uint64_t ns);

/* sim_odp.c */
/* mrmgr_sim_reg_mr() with IBV_ACCESS_ON_DEMAND in access. */
int mrmgr__sim_reg_odp(struct mrmgr__sim_pd *spd, void *addr, size_t length,
		       unsigned int access, struct ibv_mr **mr);
/* Free an ODP MR's present set; fine on any MR. */
void mrmgr__sim_odp_free(struct mrmgr__sim_mr *m);
/*
 * A simulated access to [va, va+len) of ODP MR m, before the copy, with
 * sctx->lock held: fault in the pages the device lacks (EFAULT when one
 * is not mapped, or not writable for a write) and count them. *wait_ns:
 * the modelled fault cost, to busy-wait after unlocking.
 */
int mrmgr__sim_odp_access(struct mrmgr__sim_ctx *sctx, struct mrmgr__sim_mr *m,
			  uint64_t va, size_t len, int write, uint64_t *wait_ns);

/* Shared with sim_rereg.c; see the static functions they wrap. */
int mrmgr__sim_pin(struct mrmgr__sim_ctx *sctx, struct mrmgr__sim_mr *m,
		   int *unverified);
int mrmgr__sim_populate(uint64_t va, uint64_t len, int write);

/*
 * sim_populate.c: fault [va, va+len) in for reading or writing as the
 * kernel's pinning does; 0 or EFAULT (not mapped, or not accessible so).
 */
int mrmgr__sim_fault_range(uint64_t va, uint64_t len, int write);
/* Test hooks (tests/unit/test_sim.c). */
enum mrmgr__sim_test_flags {
	/* madvise(MADV_POPULATE_*) answers 0 and does nothing, as under
	 * qemu-user (set it before the first registration: it is probed). */
	MRMGR__SIM_TEST_POPULATE_NOOP = 1u << 0,
	/* ...and the pages are not touched instead: the sim before it knew. */
	MRMGR__SIM_TEST_NO_TOUCH = 1u << 1,
};
extern unsigned int mrmgr__sim_test_flags;
uint64_t mrmgr__sim_cost_ns(uint64_t fixed, uint64_t per_page, uint64_t pages);
/* The live, registered sim MR behind mr, or NULL. Lock held. */
struct mrmgr__sim_mr *mrmgr__sim_mr_live(struct mrmgr__sim_ctx *sctx,
					 struct ibv_mr *mr);
/* Give m new keys (a new slot), freeing the old. Lock held.
 * sim_keys.c. */
int mrmgr__sim_keys_renew(struct mrmgr__sim_ctx *sctx, struct mrmgr__sim_mr *m);

/* sim_device.c: the sim's table for libmrmgr's device seam, registered
 * once (from a constructor, and again, harmlessly, at every open). */
extern const struct mrmgr_device_ops mrmgr__sim_device_ops;
void mrmgr__sim_device_register(void);
/* sim_registry.c: whether ctx is an open simulated device (the seam's
 * owns_context). */
int mrmgr__sim_is_context(const struct ibv_context *ctx);
/* Open devices (sim_registry.c): add one (0 or ENOMEM), remove one. */
int mrmgr__sim_registry_add(struct mrmgr__sim_ctx *sctx);
void mrmgr__sim_registry_del(struct mrmgr__sim_ctx *sctx);

/* sim_rereg.c: the device seam's rereg_mr. */
/* sim_dmabuf.c: dma-buf registration (the device seam's reg_dmabuf_mr),
 * and the seam's dereg, which also unmaps a dma-buf MR's buffer. */
int mrmgr__sim_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset,
			     size_t length, uint64_t iova, int fd, int access,
			     struct ibv_mr **mr);
int mrmgr__sim_dereg_any(struct ibv_mr *mr);
int mrmgr__sim_backend_rereg(struct ibv_mr *mr, int flags, struct ibv_pd *pd,
			     void *addr, size_t length, int access, int *err);

/* sim_access.c */
/*
 * The checks and copy of a simulated access once the target MR is found
 * (bounds, access, page identity or ODP faults, the copy, the counters);
 * sctx->lock held. *wait_ns: modelled cost to busy-wait after unlocking.
 */
int mrmgr__sim_access_mr(struct mrmgr__sim_ctx *sctx, struct mrmgr__sim_mr *m,
			 uint64_t raddr, void *buf, size_t len, int write,
			 uint64_t *wait_ns);
/* The outcome of a simulated access in the device's counters. Lock held. */
void mrmgr__sim_count_access(struct mrmgr__sim_ctx *sctx, int ret, int write);
/*
 * Copy len bytes between local and remote in process pid with
 * process_vm_writev (to_remote) or process_vm_readv. 0, or the errno of
 * the call that stopped (EFAULT for a short copy), with *done the bytes
 * copied.
 */
int mrmgr__sim_vm_copy(pid_t pid, void *local, uint64_t remote, size_t len,
		       int to_remote, size_t *done);
/*
 * Hold the populated pages of m and record their PFNs (needs page
 * identity). Returns 0 or EFAULT; on other trouble *unverified is set
 * and the MR goes on without identity checks.
 */
int mrmgr__sim_pages_hold(struct mrmgr__sim_mr *m, int *unverified);
/* Let go of what mrmgr__sim_pages_hold() took; fine on an MR without. */
void mrmgr__sim_pages_release(struct mrmgr__sim_mr *m);
/*
 * Read n pagemap entries for the pages starting at virtual address va
 * (page-aligned) into out. Returns 0 or an errno.
 */
int mrmgr__sim_pagemap_read(uint64_t va, size_t n, uint64_t *out);

/* Bits of a /proc/self/pagemap entry (Documentation/admin-guide/mm/pagemap.rst). */
#define MRMGR__PM_PFN_MASK ((UINT64_C(1) << 55) - 1)
#define MRMGR__PM_EXCLUSIVE (UINT64_C(1) << 56)
#define MRMGR__PM_FILE (UINT64_C(1) << 61)
#define MRMGR__PM_SWAP (UINT64_C(1) << 62)
#define MRMGR__PM_PRESENT (UINT64_C(1) << 63)

/* sim_registry.c: the open device at ctx (not logged when there is
 * none). */
struct mrmgr__sim_ctx *mrmgr__sim_ctx_find(const struct ibv_context *ctx);
/*
 * Open a device as mrmgr_sim_open() does; without an export table when
 * table is 0 (an imported context reads its owner's).
 */
int mrmgr__sim_open(const struct mrmgr_sim_attr *attr, int table,
		    struct mrmgr__sim_ctx **out);

/* sim_share.c (the export table behind cmd_fd) and sim_import.c (imports). */
#define MRMGR__SIM_IMPORT_MAGIC 0x73696d69u /* "simi" */
/* Create the table at open (cmd_fd); failure leaves cmd_fd at -1. */
void mrmgr__sim_share_open(struct mrmgr__sim_ctx *sctx);
/* At close: the owner's table, or an imported context's mapping. */
void mrmgr__sim_share_close(struct mrmgr__sim_ctx *sctx);
/* Publish (live) or withdraw an MR's or a PD's entry. Lock held. */
void mrmgr__sim_share_mr(struct mrmgr__sim_ctx *sctx, struct mrmgr__sim_mr *m,
			 int live);
void mrmgr__sim_share_pd(struct mrmgr__sim_ctx *sctx, struct mrmgr__sim_pd *spd,
			 int live);
/* A simulated access through a PD of an imported context. */
int mrmgr__sim_import_access(struct mrmgr__sim_pd *spd, uint32_t rkey,
			     uint64_t raddr, void *buf, size_t len, int write);
/* Whether the device could be imported from (the cmd_fd exists and the
 * personality has import). */
int mrmgr__sim_can_import(struct ibv_context *ctx);

#endif /* MRMGR__SIM_INTERNAL_H */
