/*
 * A memory kind: a key space, a registration operation, the event
 * sources that watch it (doc/design/memory-kinds.md). A cache serves one
 * kind, chosen at creation; the hit never reads the table, the miss
 * registers and watches through it.
 *
 * Layer: device <- kinds <- core. Nothing here knows the core.
 *
 * SPDX-License-Identifier: MIT
 */
#ifndef MRMGR__KIND_H
#define MRMGR__KIND_H

#include <stddef.h>
#include <stdint.h>

struct ibv_mr;
struct ibv_pd;
struct mrmgr_device_ops;

/* Which kind a table is; appended, never renumbered. */
enum mrmgr__kind_id {
	MRMGR__KIND_HOST = 0,      /* host virtual memory (host.c) */
	MRMGR__KIND_DMABUF = 1,    /* a dma-buf's bytes (dmabuf.c) */
	MRMGR__KIND_DEVICE_VA = 2, /* a memory domain's device VAs (devva.c) */
	MRMGR__KIND_COUNT
};

/* Bits of mrmgr__kind::sources: what reports that keys went stale. */
enum mrmgr__kind_sources {
	/* The memory-event monitor (lib/monitor): the miss watches the span
	 * before it registers and commits the watch when it publishes. */
	MRMGR__KIND_SRC_MONITOR = 1u << 0,
	/* A memory domain's free counter: the get re-validates the kind's
	 * allocations when it moved (lib/core/kind_devva.c). */
	MRMGR__KIND_SRC_DOMAIN = 1u << 1,
};

struct mrmgr__kind {
	const char *name;        /* for logs and mrmgr_info */
	enum mrmgr__kind_id id;
	unsigned int sources;    /* enum mrmgr__kind_sources */
	/*
	 * Register keys [key, key + len) with the device: 0 with *mr set, or
	 * a positive errno (the device seam's normalised results). ctx is
	 * the cache's kind context (NULL for kind one).
	 */
	int (*reg)(void *ctx, const struct mrmgr_device_ops *ops,
		   struct ibv_pd *pd, uint64_t key, uint64_t len, int access,
		   struct ibv_mr **mr);
	/* Deregister an MR reg made: 0 or a positive errno (the MR may
	 * then still be live, and is deregistered again later). */
	int (*dereg)(void *ctx, const struct mrmgr_device_ops *ops,
		     struct ibv_mr *mr);
	/* The cache is destroyed, every MR deregistered: free ctx. NULL:
	 * nothing to free. */
	void (*fini)(void *ctx);
	/* Nonzero while the caller holds something of the kind's that the
	 * cache's destruction would pull from under it (dma-buf handles):
	 * mrmgr_cache_destroy() then fails with EBUSY. NULL: never. */
	int (*busy)(void *ctx);
};

/* Kind one: host virtual memory, the key is the address. */
extern const struct mrmgr__kind mrmgr__kind_host;
/* Kind two: dma-buf bytes, keyed by the buffer's identity (dmabuf.c). */
extern const struct mrmgr__kind mrmgr__kind_dmabuf;
/* Kind three: device VAs of a memory domain (devva.c). */
extern const struct mrmgr__kind mrmgr__kind_devva;

/* The table of kind id, or NULL when that kind is not built in. */
const struct mrmgr__kind *mrmgr__kind_by_id(enum mrmgr__kind_id id);

static inline int mrmgr__kind_reg(const struct mrmgr__kind *k, void *ctx,
				  const struct mrmgr_device_ops *ops,
				  struct ibv_pd *pd, uint64_t key,
				  uint64_t len, int access, struct ibv_mr **mr)
{
	return k->reg(ctx, ops, pd, key, len, access, mr);
}

static inline int mrmgr__kind_dereg(const struct mrmgr__kind *k, void *ctx,
				    const struct mrmgr_device_ops *ops,
				    struct ibv_mr *mr)
{
	return k->dereg(ctx, ops, mr);
}

static inline int mrmgr__kind_monitored(const struct mrmgr__kind *k)
{
	return (k->sources & MRMGR__KIND_SRC_MONITOR) != 0;
}

#endif /* MRMGR__KIND_H */
