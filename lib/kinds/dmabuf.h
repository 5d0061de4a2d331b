/*
 * Kind two's buffer table (dmabuf.c): which dma-bufs a cache has MRs of,
 * by identity (fstat's st_dev, st_ino), each with the cache's own
 * duplicate of the caller's descriptor, held while an MR of it lives or
 * a get of it is under way, closed after.
 *
 * The key space: bit 63 set (no user virtual address has it, so the
 * memory-event monitor's ranges never reach a dma-buf key), the buffer's
 * slot number in bits 40..62 (never reused while the cache lives, so a
 * key names one buffer forever), the byte offset in bits 0..39.
 *
 * SPDX-License-Identifier: MIT
 */
#ifndef MRMGR__DMABUF_H
#define MRMGR__DMABUF_H

#include <stdint.h>

#define MRMGR__DMABUF_KEY_BIT (1ull << 63)
#define MRMGR__DMABUF_SLOT_SHIFT 40
#define MRMGR__DMABUF_MAX_OFFSET (1ull << MRMGR__DMABUF_SLOT_SHIFT)
#define MRMGR__DMABUF_MAX_SLOTS (1u << 23)

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

/* Descriptors the table holds now (tests, mrmgr_info). */
uint64_t mrmgr__dmabuf_fds(struct mrmgr__dmabuf_tbl *t);

#endif /* MRMGR__DMABUF_H */
