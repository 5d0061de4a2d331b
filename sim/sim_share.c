/*
 * Cross-process sharing on the simulated HCA: the export table behind a
 * device's cmd_fd, and ibv_import_device/_pd/_mr as rdma-core defines them.
 *
 * A real device's PDs and MRs are kernel objects hanging off the uverbs
 * file; ibv_import_device() on a dup of that file (passed with
 * SCM_RIGHTS) lets another process name them by handle, and
 * ibv_import_pd()/ibv_import_mr() query their attributes from the
 * kernel. The sim has no kernel, so the owner keeps the part of its state
 * an importer needs in a table in a memfd, and that memfd is the
 * device's cmd_fd:
 *
 *   header    magic, version, personality, owner pid, owner token, name
 *   MR table  handle, PD handle, keys, access, address, length, state
 *   PD table  handle, state
 *
 * The owner writes entries under its device lock at every registration,
 * re-registration, deregistration, PD allocation and deallocation, with
 * plain stores into its own shared mapping of the memfd (no system call:
 * processes mapping the same memfd share its pages, so a store is
 * visible to them as soon as it is made; msync() has nothing to do for
 * them). Readers, in this process or others, map it read-only; each entry
 * is guarded by a sequence count (odd while written, made even again with
 * release ordering after the body; a reader waits for an odd one a
 * bounded time). The owner's mapping asks for an address far from where
 * the program's own mappings go, so opening a device does not take an
 * address the program has just unmapped, and is not inherited by a fork
 * child (which must not write its parent's table). The memfd's size is
 * sealed, and its seals:
 * the descriptor may reach a process that does not trust the owner, and
 * an importer refuses a table that could be truncated under its mapping
 * (SIGBUS). cmd_fd itself is a read-only open of the memfd, so a sim context handed to libibverbs by
 * mistake cannot write to the table through it. Entries are found by
 * handle hash with a few probes; an MR that finds no free entry cannot be
 * imported (mrmgr_sim_stats::unexportable_mrs).
 *
 * What an import is, as in rdma-core: the same handles and keys, no
 * reference counting. When the owner deregisters an MR its entry goes
 * free and every import of it is dead (ENOENT on access), exactly the
 * hazard the man page leaves to the application and libmrmgr's sharing
 * layer exists to prevent.
 *
 * Accesses through an imported PD reach the owner's memory:
 *   - in the owner's process, through the owner's own MR (looked up by
 *     key under the owner's lock), so bounds, access and page identity
 *     are the owner's checks;
 *   - from another process, with process_vm_writev()/readv() on the
 *     owner's pid (needs ptrace permission over it: same user and Yama
 *     scope 0 or a descendant, or CAP_SYS_PTRACE), and page identity
 *     against the PFNs read from /proc/<owner>/pagemap at import (PFNs
 *     are shown with CAP_SYS_ADMIN only; else the import is unverified).
 * Not modelled across processes: ODP faults (an imported ODP MR reads and
 * writes the pages mapped now), a re-registration's revocation window,
 * and MRs registered by a fork child through its parent's device (they
 * are not published: the table is its opener's).
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "compiler.h"
#include "log.h"
#include "procfs.h"
#include "sim/sim_internal.h"
#include "sim/sim_share.h"

/*
 * Owner side: the device's own table, mapped read-write in the opener
 * only, with which entries are used (the owner alone writes, so that
 * needs no sharing).
 */
struct mrmgr__sim_share {
	char *map;
	pid_t pid; /* the opener: only it writes (see the header comment) */
	uint64_t mr_used[MRMGR__SIM_TBL_MRS / 64];
	uint64_t pd_used[MRMGR__SIM_TBL_PDS / 64];
};

/* ------------------------------------------------------------ owner */

/*
 * Where the owner's mapping of a table is asked to go: the middle of a
 * 47-bit address space, far below the top-down area where mmap() places
 * the program's mappings and far above its heap, so a table never takes
 * the hole of a buffer the program has just unmapped (a test of stale
 * registrations maps the same address again). Only a hint: where the
 * kernel or a sanitizer's mmap() refuses it, the table goes wherever
 * mmap() puts it, as any mapping would.
 */
#define TBL_HINT_BASE (UINT64_C(1) << 45)
#define TBL_HINT_STEP (UINT64_C(1) << 20) /* > MRMGR__SIM_TBL_BYTES */

static void *table_hint(void)
{
	static uint64_t next;
	uint64_t i;

	if (sizeof(void *) < 8)
		return NULL;
	i = __atomic_fetch_add(&next, 1, __ATOMIC_RELAXED) % 4096;
	return (void *)(uintptr_t)(TBL_HINT_BASE + i * TBL_HINT_STEP);
}

void mrmgr__sim_share_open(struct mrmgr__sim_ctx *s)
{
	struct mrmgr__sim_share *sh = calloc(1, sizeof(*sh));
	struct mrmgr__sim_tbl_hdr *h;
	char path[64];
	void *map = MAP_FAILED;
	int fd = -1, ro = -1;

	if (MRMGR__SIM_TBL_BYTES > TBL_HINT_STEP || !sh)
		goto fail;
	fd = memfd_create("mrmgr-sim-uverbs", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0 || ftruncate(fd, (off_t)MRMGR__SIM_TBL_BYTES) != 0)
		goto fail;
	map = mmap(table_hint(), MRMGR__SIM_TBL_BYTES, PROT_READ | PROT_WRITE,
		   MAP_SHARED, fd, 0);
	if (map == MAP_FAILED)
		goto fail;
	/* A fork child gets no mapping of its parent's table to write. */
	(void)madvise(map, MRMGR__SIM_TBL_BYTES, MADV_DONTFORK);
	/* Nobody reads the table yet: plain stores. */
	h = map;
	h->magic = MRMGR__SIM_TBL_MAGIC;
	h->version = MRMGR__SIM_TBL_VERSION;
	h->personality = s->personality;
	h->nmrs = MRMGR__SIM_TBL_MRS;
	h->npds = MRMGR__SIM_TBL_PDS;
	h->owner_pid = (int32_t)mrmgr__getpid();
	h->owner_token = (uint64_t)(uintptr_t)&s->ibctx;
	h->size = MRMGR__SIM_TBL_BYTES;
	snprintf(h->name, sizeof(h->name), "%s", s->ibdev.name);
	/* Importers map the table: its size is fixed for good (no SIGBUS
	 * in a reader), and they refuse a table that is not sealed so. */
	if (fcntl(fd, F_ADD_SEALS, MRMGR__SIM_TBL_SEALS) != 0)
		goto fail;
	/* Importers get a read-only descriptor: a sim context handed to
	 * libibverbs by mistake cannot write to the table through it. The
	 * read-write one is not needed past the mapping. */
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	ro = open(path, O_RDONLY | O_CLOEXEC);
	if (ro >= 0)
		close(fd);
	sh->map = map;
	sh->pid = mrmgr__getpid();
	s->share = sh;
	s->ibctx.cmd_fd = ro >= 0 ? ro : fd;
	return;
fail:
	mrmgr__info("sim %s: no export table (%s): its objects cannot be "
		    "imported", s->ibdev.name, strerror(errno));
	if (map != MAP_FAILED)
		munmap(map, MRMGR__SIM_TBL_BYTES);
	if (fd >= 0)
		close(fd);
	free(sh);
}

/* Only the opener writes: a fork child's MRs are not published. The
 * pid is kept by a fork handler, not asked of the kernel every time. */
static int writer(const struct mrmgr__sim_ctx *s)
{
	return s->share && s->share->pid == mrmgr__getpid();
}

void mrmgr__sim_share_close(struct mrmgr__sim_ctx *s)
{
	if (s->share) {
		/* A fork child has no mapping there (MADV_DONTFORK), and the
		 * address may be one of its own mappings now. */
		if (writer(s))
			munmap(s->share->map, MRMGR__SIM_TBL_BYTES);
		free(s->share);
		s->share = NULL;
	}
	if (s->imp) {
		munmap((void *)(uintptr_t)s->imp->map, s->imp->size);
		if (s->imp->pagemap_fd >= 0)
			close(s->imp->pagemap_fd);
		free(s->imp->mrs);
		free(s->imp);
		s->imp = NULL;
	}
	if (s->ibctx.cmd_fd >= 0)
		close(s->ibctx.cmd_fd);
	s->ibctx.cmd_fd = -1;
}

/*
 * Open an entry for writing: its sequence count odd, ordered before the
 * body's stores, so a reader that saw the same even count before and
 * after its copy saw no store. The owner's device lock serialises
 * writers; entry_close() publishes the body with release ordering.
 */
static uint32_t entry_open(uint32_t *seq)
{
	uint32_t v = __atomic_load_n(seq, __ATOMIC_RELAXED) | 1u;

	__atomic_store_n(seq, v, __ATOMIC_RELAXED);
	__atomic_thread_fence(__ATOMIC_RELEASE);
	return v;
}

static void entry_close(uint32_t *seq, uint32_t v)
{
	__atomic_store_n(seq, v + 1, __ATOMIC_RELEASE);
}

#define ENTRY_SET(e, field, val) __atomic_store_n(&(e)->field, (val), __ATOMIC_RELAXED)

static int take_free(uint64_t *used, uint32_t n, uint32_t handle, uint32_t *idx)
{
	for (uint32_t i = 0; i < MRMGR__SIM_TBL_PROBES; i++) {
		uint32_t k = (handle + i) & (n - 1);

		if (!(used[k / 64] & (UINT64_C(1) << (k % 64)))) {
			used[k / 64] |= UINT64_C(1) << (k % 64);
			*idx = k;
			return 1;
		}
	}
	return 0;
}

void mrmgr__sim_share_mr(struct mrmgr__sim_ctx *s, struct mrmgr__sim_mr *m,
			 int live)
{
	struct mrmgr__sim_share *sh = s->share;
	struct mrmgr__sim_tbl_mr *e;
	uint32_t k, v;

	if (!writer(s))
		return;
	if (m->share_slot) {
		k = m->share_slot - 1;
	} else if (live) {
		if (!take_free(sh->mr_used, MRMGR__SIM_TBL_MRS, m->ibmr.handle, &k)) {
			s->stats.unexportable_mrs++;
			return;
		}
		m->share_slot = k + 1;
	} else {
		return;
	}
	e = (struct mrmgr__sim_tbl_mr *)(void *)(sh->map + MRMGR__SIM_TBL_MRS_OFF) + k;
	v = entry_open(&e->seq);
	if (live) {
		ENTRY_SET(e, state, MRMGR__SIM_ENTRY_LIVE);
		ENTRY_SET(e, handle, m->ibmr.handle);
		ENTRY_SET(e, pd_handle, m->spd->ibpd.handle);
		ENTRY_SET(e, lkey, m->ibmr.lkey);
		ENTRY_SET(e, rkey, m->ibmr.rkey);
		ENTRY_SET(e, access, m->access);
		ENTRY_SET(e, addr, (uint64_t)(uintptr_t)m->ibmr.addr);
		ENTRY_SET(e, length, (uint64_t)m->ibmr.length);
	} else {
		/* A free entry says nothing of the MR it held. */
		ENTRY_SET(e, state, MRMGR__SIM_ENTRY_FREE);
		ENTRY_SET(e, handle, 0u);
		ENTRY_SET(e, pd_handle, 0u);
		ENTRY_SET(e, lkey, 0u);
		ENTRY_SET(e, rkey, 0u);
		ENTRY_SET(e, access, 0u);
		ENTRY_SET(e, addr, UINT64_C(0));
		ENTRY_SET(e, length, UINT64_C(0));
		sh->mr_used[k / 64] &= ~(UINT64_C(1) << (k % 64));
		m->share_slot = 0;
	}
	entry_close(&e->seq, v);
}

void mrmgr__sim_share_pd(struct mrmgr__sim_ctx *s, struct mrmgr__sim_pd *spd,
			 int live)
{
	struct mrmgr__sim_share *sh = s->share;
	struct mrmgr__sim_tbl_pd *e;
	uint32_t k, v;

	if (!writer(s))
		return;
	if (spd->share_slot) {
		k = spd->share_slot - 1;
	} else if (live) {
		if (!take_free(sh->pd_used, MRMGR__SIM_TBL_PDS, spd->ibpd.handle, &k))
			return;
		spd->share_slot = k + 1;
	} else {
		return;
	}
	e = (struct mrmgr__sim_tbl_pd *)(void *)(sh->map + MRMGR__SIM_TBL_PDS_OFF) + k;
	v = entry_open(&e->seq);
	ENTRY_SET(e, state, live ? MRMGR__SIM_ENTRY_LIVE : MRMGR__SIM_ENTRY_FREE);
	ENTRY_SET(e, handle, spd->ibpd.handle);
	if (!live) {
		sh->pd_used[k / 64] &= ~(UINT64_C(1) << (k % 64));
		spd->share_slot = 0;
	}
	entry_close(&e->seq, v);
}

int mrmgr__sim_can_import(struct ibv_context *ctx)
{
	struct mrmgr__sim_ctx *s = mrmgr__sim_ctx_find(ctx);

	return s && s->personality != MRMGR_SIM_RXE &&
	       (s->share || s->imp) && s->ibctx.cmd_fd >= 0;
}

/* ------------------------------------------------------------ readers */

/*
 * The sequence counts are the owner's to keep even, and an owner that
 * died halfway through a write, or lies, leaves one odd for good. A
 * reader waits for it a bounded time (a few stores, plus however long
 * the owner is descheduled between them), holding no lock, then gives
 * up with ETIMEDOUT.
 */
static uint64_t mono_ns(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

uint64_t mrmgr__sim_tbl_deadline(void)
{
	return mono_ns() + MRMGR__SIM_TBL_WAIT_MS * UINT64_C(1000000);
}

/* Another try at a busy entry, or ETIMEDOUT once the deadline is past. */
static int tbl_backoff(unsigned int *tries, uint64_t deadline)
{
	if (mono_ns() >= deadline)
		return ETIMEDOUT;
	if (++*tries < 64) {
		sched_yield();
	} else {
		struct timespec ts = { 0, 200000 }; /* 0.2 ms */

		nanosleep(&ts, NULL);
	}
	return 0;
}

int mrmgr__sim_tbl_read_mr(const struct mrmgr__sim_tbl_mr *e,
			   struct mrmgr__sim_tbl_mr *out, uint64_t deadline)
{
	unsigned int tries = 0;

	for (;;) {
		uint32_t s0 = __atomic_load_n(&e->seq, __ATOMIC_ACQUIRE);

		if (!(s0 & 1)) {
			out->state = __atomic_load_n(&e->state, __ATOMIC_RELAXED);
			out->handle = __atomic_load_n(&e->handle, __ATOMIC_RELAXED);
			out->pd_handle = __atomic_load_n(&e->pd_handle, __ATOMIC_RELAXED);
			out->lkey = __atomic_load_n(&e->lkey, __ATOMIC_RELAXED);
			out->rkey = __atomic_load_n(&e->rkey, __ATOMIC_RELAXED);
			out->access = __atomic_load_n(&e->access, __ATOMIC_RELAXED);
			out->addr = __atomic_load_n(&e->addr, __ATOMIC_RELAXED);
			out->length = __atomic_load_n(&e->length, __ATOMIC_RELAXED);
			__atomic_thread_fence(__ATOMIC_ACQUIRE);
			if (__atomic_load_n(&e->seq, __ATOMIC_RELAXED) == s0)
				return 0;
		}
		if (tbl_backoff(&tries, deadline))
			return ETIMEDOUT;
	}
}

int mrmgr__sim_tbl_find_mr(const struct mrmgr__sim_import *imp, uint32_t handle,
			   struct mrmgr__sim_tbl_mr *out, uint32_t *slot)
{
	const struct mrmgr__sim_tbl_mr *t = mrmgr__sim_tbl_mrs(imp->map);
	uint64_t deadline = mrmgr__sim_tbl_deadline();

	for (uint32_t i = 0; i < MRMGR__SIM_TBL_PROBES; i++) {
		uint32_t idx = (handle + i) & (MRMGR__SIM_TBL_MRS - 1);

		if (mrmgr__sim_tbl_read_mr(&t[idx], out, deadline))
			return ETIMEDOUT;
		if (out->state == MRMGR__SIM_ENTRY_LIVE && out->handle == handle) {
			*slot = idx;
			return 0;
		}
	}
	return ENOENT;
}

int mrmgr__sim_tbl_find_pd(const struct mrmgr__sim_import *imp, uint32_t handle)
{
	const struct mrmgr__sim_tbl_pd *t = mrmgr__sim_tbl_pds(imp->map);
	uint64_t deadline = mrmgr__sim_tbl_deadline();

	for (uint32_t i = 0; i < MRMGR__SIM_TBL_PROBES; i++) {
		const struct mrmgr__sim_tbl_pd *e = &t[(handle + i) & (MRMGR__SIM_TBL_PDS - 1)];
		unsigned int tries = 0;
		uint32_t s0, state, h;

		for (;;) {
			s0 = __atomic_load_n(&e->seq, __ATOMIC_ACQUIRE);
			state = __atomic_load_n(&e->state, __ATOMIC_RELAXED);
			h = __atomic_load_n(&e->handle, __ATOMIC_RELAXED);
			__atomic_thread_fence(__ATOMIC_ACQUIRE);
			if (!(s0 & 1) && __atomic_load_n(&e->seq, __ATOMIC_RELAXED) == s0)
				break;
			if (tbl_backoff(&tries, deadline))
				return ETIMEDOUT;
		}
		if (state == MRMGR__SIM_ENTRY_LIVE && h == handle)
			return 0;
	}
	return ENOENT;
}
