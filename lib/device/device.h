/*
 * The device seam, inside the library: which provider serves a context,
 * its operations with their results normalised, and what the library has
 * learnt about each device. The providers' table is public
 * (include/mrmgr/device.h); verbs.c is the built-in default. Nothing here
 * knows any provider but verbs, and providers never call into the cache.
 *
 * SPDX-License-Identifier: MIT
 */
#ifndef MRMGR__DEVICE_H
#define MRMGR__DEVICE_H

#include <stddef.h>
#include <stdint.h>
#include <infiniband/verbs.h>

#include <mrmgr/device.h>

/* What the cache needs to know about a device, read once at cache creation. */
struct mrmgr__dev_caps {
	char name[64];           /* the provider's device name */
	uint64_t max_mr_size;    /* largest registration, bytes */
	uint32_t max_mr;         /* most MRs the device holds */
	uint32_t max_sge;        /* for advise batches */
	uint64_t page_size_cap;  /* bitmask of supported page sizes */
	/* ibv_query_device_ex() odp_caps; all 0 on a device without ODP. */
	uint64_t odp_general;    /* IBV_ODP_SUPPORT, IBV_ODP_SUPPORT_IMPLICIT */
	uint32_t odp_rc, odp_uc, odp_ud, odp_xrc; /* IBV_ODP_SUPPORT_SEND... */
	uint64_t cap_flags;      /* the provider's MRMGR_DEVICE_CAP_* */
	uint32_t quirks;         /* MRMGR__QUIRK_*, quirk.c */
	char quirk_text[112];    /* the quirks in one line, for the log */
};

/* ------------------------------------------------------------ quirks */

/* Defects of a driver the library works around (quirk.c). */
enum {
	/* rxe 6.15+: the ODP copy ignores the offset inside a page. */
	MRMGR__QUIRK_ODP_PAGE_OFFSET = 1u << 0,
	/* ... found, but MRMGR_RXE_ODP_QUIRK=off: ODP used anyway. */
	MRMGR__QUIRK_OVERRIDDEN = 1u << 1,
};
#define MRMGR__KVER(a, b, c) \
	((uint32_t)(((a) << 16) | ((b) << 8) | (c)))
/* "7.3.4+deb13-amd64" -> MRMGR__KVER(7, 3, 4); 0 when unreadable. */
uint32_t mrmgr__kver_parse(const char *s);
/*
 * Whether rxe's ODP page-offset bug applies on kernel @p release, after
 * MRMGR_RXE_ODP_QUIRK (auto|on|off) and MRMGR_RXE_ODP_FIXED_IN: 1 (applies)
 * or 2 (applies, but "off" overrides it) with a line in text, else 0.
 */
int mrmgr__quirk_rxe_odp(const char *release, char *text, size_t size);
/* The unit tests' kernel release, instead of uname()'s when not NULL. */
extern const char *mrmgr__quirk_test_release;
/* Fill caps->quirks and caps->quirk_text for ctx's device (in query). */
void mrmgr__dev_quirks(const struct mrmgr_device_ops *ops,
		       struct ibv_context *ctx, struct mrmgr__dev_caps *caps);

/* The built-in provider (verbs.c). */
extern const struct mrmgr_device_ops mrmgr__verbs_ops;

/*
 * The provider serving ctx: the newest registered one that claims it,
 * else verbs. The pointer stays valid for the life of the process (the
 * library's own copy of the table), so a cache keeps it.
 */
const struct mrmgr_device_ops *mrmgr__dev_for(const struct ibv_context *ctx);
/*
 * The provider whose claim_fd claims cmd_fd (registered ones first,
 * verbs last), or NULL when none does.
 */
const struct mrmgr_device_ops *mrmgr__dev_claim_fd(int cmd_fd);

/*
 * "The device cannot do this", the one reading of errno for every
 * caller: 0 (some other error or none), UNSUP_OP (EOPNOTSUPP, ENOTSUP:
 * not this operation, or not with these arguments), UNSUP_VERB (ENOSYS:
 * the verb itself is missing, e.g. an old libibverbs).
 */
enum { MRMGR__UNSUP_NO = 0, MRMGR__UNSUP_OP = 1, MRMGR__UNSUP_VERB = 2 };
int mrmgr__dev_unsupported(int err);
/* err with every "cannot" spelt EOPNOTSUPP, a negative value made positive. */
int mrmgr__dev_errno(int err);

/* The operations, results normalised: 0 or a positive errno (never 0
 * without an object), rereg as in struct mrmgr_device_ops. */
int mrmgr__dev_query(const struct mrmgr_device_ops *ops,
		     struct ibv_context *ctx, struct mrmgr__dev_caps *caps);
int mrmgr__dev_reg_mr(const struct mrmgr_device_ops *ops, struct ibv_pd *pd,
		      void *addr, size_t length, int access, struct ibv_mr **mr);
int mrmgr__dev_dereg_mr(const struct mrmgr_device_ops *ops, struct ibv_mr *mr);
/* EOPNOTSUPP when the provider has no dma-buf op (or says it cannot). */
int mrmgr__dev_reg_dmabuf_mr(const struct mrmgr_device_ops *ops,
			     struct ibv_pd *pd, uint64_t offset, size_t length,
			     uint64_t iova, int fd, int access,
			     struct ibv_mr **mr);
/* A provider without rereg fails with IBV_REREG_MR_ERR_INPUT and
 * EOPNOTSUPP: the MR untouched. A code outside the enum reads as
 * IBV_REREG_MR_ERR_CMD, the one reading that cannot leave a stale MR in
 * use. */
int mrmgr__dev_rereg_mr(const struct mrmgr_device_ops *ops, struct ibv_mr *mr,
			int flags, struct ibv_pd *pd, void *addr, size_t length,
			int access, int *err);
/* A device without advice: EOPNOTSUPP. */
int mrmgr__dev_advise_mr(const struct mrmgr_device_ops *ops, struct ibv_pd *pd,
			 enum ibv_advise_mr_advice advice, uint32_t flags,
			 struct ibv_sge *sg_list, uint32_t num_sge);

/*
 * The learnt-capability table: what a device said when asked, kept
 * process-wide per (provider, device name) so only the first cache on a
 * device asks. Bounded: the oldest entry makes way (simulated devices get
 * a new name per open). A value is whatever the asker stores.
 */
enum mrmgr__dev_learn {
	MRMGR__LEARN_REREG,  /* grow.c: MRMGR__REREG_YES / _NO */
	MRMGR__LEARN_IMPORT, /* mrmgr__dev_can_import(): 0 or EOPNOTSUPP */
	MRMGR__LEARN_COUNT
};
/* 1 with *val when known, else 0. */
int mrmgr__dev_learnt(const struct mrmgr_device_ops *ops, const char *name,
		      enum mrmgr__dev_learn what, int *val);
void mrmgr__dev_learn(const struct mrmgr_device_ops *ops, const char *name,
		      enum mrmgr__dev_learn what, int val);

/*
 * Whether MRs of pd's device can be imported by another process: 0 or
 * EOPNOTSUPP, asked once per device (learnt); another errno when the
 * question could not be answered (asked again next time).
 */
int mrmgr__dev_can_import(struct ibv_pd *pd);

/*
 * ibv_is_fork_initialized() (an enum ibv_fork_status). Called directly
 * when the build's rdma-core declares it (35+); otherwise looked up in the
 * loaded libibverbs at run time, and IBV_FORK_DISABLED when it has none
 * (doc/portability.md). mrmgr__verbs_fork_status_lookup() is that lookup,
 * always built, so the tests exercise it on any rdma-core.
 */
int mrmgr__verbs_fork_status(void);
int mrmgr__verbs_fork_status_lookup(void);

#endif /* MRMGR__DEVICE_H */
