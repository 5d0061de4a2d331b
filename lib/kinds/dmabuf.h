/*
 * Kind two's buffer table (dmabuf.c): which dma-bufs a cache has MRs of,
 * by identity (fstat's st_dev, st_ino), each with the cache's own
 * duplicate of the caller's descriptor, held while an MR of it lives or
 * a get of it is under way, closed after.
 *
 * The key space: the buffer's slot number (1 and up) in bits 38 and up,
 * the byte offset in bits 0..37. The first 1023 slots keep keys under
 * 2^48, where the hit path's hash index works (lookup.h); later ones are
 * found by the tree. A slot is given again only once no MR of its last
 * buffer lives, so no cached region has a key of it. The memory-event
 * monitor's ranges (host addresses) may overlap such keys: a dma-buf
 * cache drains the events and applies none (its kind has no monitor
 * source).
 *
 * SPDX-License-Identifier: MIT
 */
#ifndef MRMGR__DMABUF_H
#define MRMGR__DMABUF_H

#include <stdint.h>

#define MRMGR__DMABUF_SLOT_SHIFT 38
#define MRMGR__DMABUF_MAX_OFFSET (1ull << MRMGR__DMABUF_SLOT_SHIFT)
#define MRMGR__DMABUF_MAX_SLOTS (1u << 25)

/* Set by the dma-buf entry points around their mrmgr_get(): the kind's
 * registration refuses keys that came any other way (mrmgr_get() on a
 * dma-buf cache). */
extern __thread int mrmgr__dmabuf_entry;

struct mrmgr__dmabuf_tbl;
struct mrmgr__dmabuf_buf;

int mrmgr__dmabuf_tbl_new(struct mrmgr__dmabuf_tbl **t);

/*
 * A get of [offset, +length) of the buffer fd names: the buffer held
 * (*pin) until mrmgr__dmabuf_unpin(), its first key in *key. 0, or EBADF
 * (not an open descriptor), EINVAL (past the buffer's end, or offsets the
 * key space cannot hold), EMFILE/ENFILE (no descriptor for the
 * duplicate), ENOSPC (slot numbers spent), ENOMEM.
 */
int mrmgr__dmabuf_pin(struct mrmgr__dmabuf_tbl *t, int fd, uint64_t offset,
		      uint64_t length, uint64_t *key,
		      struct mrmgr__dmabuf_buf **pin);
void mrmgr__dmabuf_unpin(struct mrmgr__dmabuf_tbl *t,
			 struct mrmgr__dmabuf_buf *b);

/* The buffer's size (fstat's; 0: unknown). */
uint64_t mrmgr__dmabuf_buf_size(const struct mrmgr__dmabuf_buf *b);

/* Handles open on the table (mrmgr_dmabuf_open()): delta +1 or -1. */
void mrmgr__dmabuf_handles(struct mrmgr__dmabuf_tbl *t, int delta);

/* Descriptors the table holds now (tests, mrmgr_info). */
uint64_t mrmgr__dmabuf_fds(struct mrmgr__dmabuf_tbl *t);

#endif /* MRMGR__DMABUF_H */
