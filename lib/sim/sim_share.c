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
 * pwrite() through a descriptor of its own (it maps nothing, so opening a
 * device never takes an address the program has just unmapped); readers
 * in other processes see them through a read-only shared mapping, each
 * entry guarded by a sequence count (odd while written). cmd_fd itself is
 * a read-only open of the memfd, so a sim context handed to libibverbs by
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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "compiler.h"
#include "log.h"
#include "sim/sim_internal.h"

#define PAGE MRMGR__SIM_PAGE_SIZE
#define TABLE_MAGIC 0x6d727368u /* "mrsh" */
#define TABLE_VERSION 1u
#define TABLE_MRS 16384u  /* power of two */
#define TABLE_PDS 1024u   /* power of two */
#define PROBES 8u

enum { ENTRY_FREE = 0, ENTRY_LIVE = 1 };

struct tbl_hdr {
	uint32_t magic, version;
	uint32_t personality;
	uint32_t nmrs, npds;
	int32_t owner_pid;
	uint64_t owner_token; /* the owner's struct ibv_context *, in its process */
	uint64_t size;        /* bytes of the whole table */
	char name[64];
};

struct tbl_mr {
	uint32_t seq; /* odd while the owner writes the entry */
	uint32_t state;
	uint32_t handle, pd_handle, lkey, rkey, access, pad;
	uint64_t addr, length;
};

struct tbl_pd {
	uint32_t seq, state, handle, pad;
};

#define HDR_BYTES PAGE
#define MRS_OFF HDR_BYTES
#define PDS_OFF (MRS_OFF + TABLE_MRS * sizeof(struct tbl_mr))
#define TABLE_BYTES (PDS_OFF + TABLE_PDS * sizeof(struct tbl_pd))

/*
 * Owner side: the device's own table, written through a private
 * descriptor (no mapping in the owner: opening a device maps nothing, so
 * it never takes an address a program has just unmapped), with a shadow
 * of each entry's sequence count and of which entries are used.
 */
struct mrmgr__sim_share {
	int wfd;   /* read-write; cmd_fd is a read-only open of the same file */
	pid_t pid; /* the opener: only it writes (see the header comment) */
	uint32_t mr_seq[TABLE_MRS];
	uint32_t pd_seq[TABLE_PDS];
	uint64_t mr_used[TABLE_MRS / 64];
	uint64_t pd_used[TABLE_PDS / 64];
};

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

static inline const struct tbl_mr *mr_table(const char *map)
{
	return (const struct tbl_mr *)(const void *)(map + MRS_OFF);
}

static inline const struct tbl_pd *pd_table(const char *map)
{
	return (const struct tbl_pd *)(const void *)(map + PDS_OFF);
}

/* ------------------------------------------------------------ owner */

static int pwrite_all(int fd, const void *buf, size_t n, off_t off)
{
	while (n) {
		ssize_t w = pwrite(fd, buf, n, off);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		buf = (const char *)buf + w;
		n -= (size_t)w;
		off += w;
	}
	return 0;
}

void mrmgr__sim_share_open(struct mrmgr__sim_ctx *s)
{
	struct mrmgr__sim_share *sh = calloc(1, sizeof(*sh));
	struct tbl_hdr h;
	char path[64];
	int fd = -1, ro = -1;

	if (!sh)
		goto fail;
	fd = memfd_create("mrmgr-sim-uverbs", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0 || ftruncate(fd, (off_t)TABLE_BYTES) != 0)
		goto fail;
	memset(&h, 0, sizeof(h));
	h.magic = TABLE_MAGIC;
	h.version = TABLE_VERSION;
	h.personality = s->personality;
	h.nmrs = TABLE_MRS;
	h.npds = TABLE_PDS;
	h.owner_pid = (int32_t)getpid();
	h.owner_token = (uint64_t)(uintptr_t)&s->ibctx;
	h.size = TABLE_BYTES;
	snprintf(h.name, sizeof(h.name), "%s", s->ibdev.name);
	if (pwrite_all(fd, &h, sizeof(h), 0))
		goto fail;
	(void)fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW);
	/* Importers get a read-only descriptor: a sim context handed to
	 * libibverbs by mistake cannot write to the table through it. */
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	ro = open(path, O_RDONLY | O_CLOEXEC);
	sh->wfd = fd;
	sh->pid = getpid();
	s->share = sh;
	s->ibctx.cmd_fd = ro >= 0 ? ro : fd;
	return;
fail:
	mrmgr__info("sim %s: no export table (%s): its objects cannot be "
		    "imported", s->ibdev.name, strerror(errno));
	if (fd >= 0)
		close(fd);
	free(sh);
}

void mrmgr__sim_share_close(struct mrmgr__sim_ctx *s)
{
	if (s->share) {
		if (s->share->wfd != s->ibctx.cmd_fd)
			close(s->share->wfd);
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
 * Write an entry for readers in other processes: its sequence count odd,
 * the body, the count even, each a write of its own so a reader that saw
 * the same even count before and after its copy saw no write. The owner's
 * device lock serialises writers.
 */
static void write_entry(const struct mrmgr__sim_share *sh, off_t off,
			uint32_t *seq, const void *body, size_t n)
{
	uint32_t v = ++*seq;

	if (pwrite_all(sh->wfd, &v, sizeof(v), off) ||
	    pwrite_all(sh->wfd, body, n, off + (off_t)sizeof(v)))
		mrmgr__warn("sim: writing the export table failed: %s",
			    strerror(errno));
	v = ++*seq;
	(void)pwrite_all(sh->wfd, &v, sizeof(v), off);
}

static int writer(const struct mrmgr__sim_ctx *s)
{
	return s->share && s->share->pid == getpid();
}

static int take_free(uint64_t *used, uint32_t n, uint32_t handle, uint32_t *idx)
{
	for (uint32_t i = 0; i < PROBES; i++) {
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
	struct tbl_mr e;
	uint32_t k;

	if (!writer(s))
		return;
	if (m->share_slot) {
		k = m->share_slot - 1;
	} else if (live) {
		if (!take_free(sh->mr_used, TABLE_MRS, m->ibmr.handle, &k)) {
			s->stats.unexportable_mrs++;
			return;
		}
		m->share_slot = k + 1;
	} else {
		return;
	}
	memset(&e, 0, sizeof(e));
	if (live) {
		e.state = ENTRY_LIVE;
		e.handle = m->ibmr.handle;
		e.pd_handle = m->spd->ibpd.handle;
		e.lkey = m->ibmr.lkey;
		e.rkey = m->ibmr.rkey;
		e.access = m->access;
		e.addr = (uint64_t)(uintptr_t)m->ibmr.addr;
		e.length = m->ibmr.length;
	} else {
		sh->mr_used[k / 64] &= ~(UINT64_C(1) << (k % 64));
		m->share_slot = 0;
	}
	write_entry(sh, (off_t)(MRS_OFF + k * sizeof(e)), &sh->mr_seq[k],
		    &e.state, sizeof(e) - offsetof(struct tbl_mr, state));
}

void mrmgr__sim_share_pd(struct mrmgr__sim_ctx *s, struct mrmgr__sim_pd *spd,
			 int live)
{
	struct mrmgr__sim_share *sh = s->share;
	struct tbl_pd e;
	uint32_t k;

	if (!writer(s))
		return;
	if (spd->share_slot) {
		k = spd->share_slot - 1;
	} else if (live) {
		if (!take_free(sh->pd_used, TABLE_PDS, spd->ibpd.handle, &k))
			return;
		spd->share_slot = k + 1;
	} else {
		return;
	}
	memset(&e, 0, sizeof(e));
	e.state = live ? ENTRY_LIVE : ENTRY_FREE;
	e.handle = spd->ibpd.handle;
	if (!live) {
		sh->pd_used[k / 64] &= ~(UINT64_C(1) << (k % 64));
		spd->share_slot = 0;
	}
	write_entry(sh, (off_t)(PDS_OFF + k * sizeof(e)), &sh->pd_seq[k],
		    &e.state, sizeof(e) - offsetof(struct tbl_pd, state));
}

int mrmgr__sim_can_import(struct ibv_context *ctx)
{
	struct mrmgr__sim_ctx *s = mrmgr__sim_ctx_find(ctx);

	return s && s->personality != MRMGR_SIM_RXE &&
	       (s->share || s->imp) && s->ibctx.cmd_fd >= 0;
}

/* ------------------------------------------------------------ readers */

/* A consistent copy of an MR entry (the owner may be writing it). */
static void read_mr(const struct tbl_mr *e, struct tbl_mr *out)
{
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
				return;
		}
		sched_yield();
	}
}

static int find_mr(const struct mrmgr__sim_import *imp, uint32_t handle,
		   struct tbl_mr *out, uint32_t *slot)
{
	const struct tbl_mr *t = mr_table(imp->map);

	for (uint32_t i = 0; i < PROBES; i++) {
		uint32_t idx = (handle + i) & (TABLE_MRS - 1);

		read_mr(&t[idx], out);
		if (out->state == ENTRY_LIVE && out->handle == handle) {
			*slot = idx;
			return 1;
		}
	}
	return 0;
}

static int find_pd(const struct mrmgr__sim_import *imp, uint32_t handle)
{
	const struct tbl_pd *t = pd_table(imp->map);

	for (uint32_t i = 0; i < PROBES; i++) {
		const struct tbl_pd *e = &t[(handle + i) & (TABLE_PDS - 1)];
		uint32_t s0, state, h;

		do {
			s0 = __atomic_load_n(&e->seq, __ATOMIC_ACQUIRE);
			state = __atomic_load_n(&e->state, __ATOMIC_RELAXED);
			h = __atomic_load_n(&e->handle, __ATOMIC_RELAXED);
			__atomic_thread_fence(__ATOMIC_ACQUIRE);
		} while ((s0 & 1) || __atomic_load_n(&e->seq, __ATOMIC_RELAXED) != s0);
		if (state == ENTRY_LIVE && h == handle)
			return 1;
	}
	return 0;
}

/* ------------------------------------------------------------ import */

MRMGR_EXPORT int mrmgr_sim_import_device(int cmd_fd, struct ibv_context **ctx)
{
	struct mrmgr_sim_attr attr = { .comp_mask = MRMGR_SIM_ATTR_PERSONALITY };
	struct mrmgr__sim_import *imp;
	struct mrmgr__sim_ctx *s;
	const struct tbl_hdr *h;
	struct stat st;
	void *map;
	int ret;

	if (!ctx || cmd_fd < 0) {
		mrmgr__warn("sim_import_device: %s", !ctx ? "NULL ctx" : "bad fd");
		return EINVAL;
	}
	if (fstat(cmd_fd, &st) != 0 || !S_ISREG(st.st_mode) ||
	    (uint64_t)st.st_size < TABLE_BYTES) {
		mrmgr__warn("sim_import_device: fd %d is not a simulated "
			    "device's command fd", cmd_fd);
		return EINVAL;
	}
	map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, cmd_fd, 0);
	if (map == MAP_FAILED)
		return errno == ENOMEM ? ENOMEM : EINVAL;
	h = map;
	if (h->magic != TABLE_MAGIC || h->version != TABLE_VERSION ||
	    h->size != TABLE_BYTES || h->nmrs != TABLE_MRS ||
	    h->npds != TABLE_PDS || h->personality > MRMGR_SIM_RXE) {
		munmap(map, (size_t)st.st_size);
		mrmgr__warn("sim_import_device: fd %d is not a simulated "
			    "device's command fd", cmd_fd);
		return EINVAL;
	}
	if (h->personality == MRMGR_SIM_RXE) {
		/* rdma_rxe has no import_device: rdma-core's stub refuses. */
		munmap(map, (size_t)st.st_size);
		mrmgr__dbg("sim_import_device: %s (rxe) cannot be imported",
			   h->name);
		return EOPNOTSUPP;
	}
	imp = calloc(1, sizeof(*imp));
	if (!imp) {
		munmap(map, (size_t)st.st_size);
		return ENOMEM;
	}
	imp->map = map;
	imp->size = (size_t)st.st_size;
	imp->owner_pid = h->owner_pid;
	imp->owner_token = h->owner_token;
	imp->in_process = h->owner_pid == (int32_t)getpid();
	snprintf(imp->owner_name, sizeof(imp->owner_name), "%.63s", h->name);
	imp->pagemap_fd = -1;
	if (!imp->in_process && mrmgr_sim_page_identity_available()) {
		char path[64];

		snprintf(path, sizeof(path), "/proc/%d/pagemap", (int)h->owner_pid);
		imp->pagemap_fd = open(path, O_RDONLY | O_CLOEXEC);
	}

	attr.personality = h->personality;
	ret = mrmgr__sim_open(&attr, 0, &s);
	if (ret) {
		if (imp->pagemap_fd >= 0)
			close(imp->pagemap_fd);
		munmap(map, imp->size);
		free(imp);
		return ret;
	}
	/* The same device as the owner's, seen through the same file. */
	pthread_mutex_lock(&s->lock);
	snprintf(s->ibdev.name, sizeof(s->ibdev.name), "%s", imp->owner_name);
	s->imp = imp;
	s->ibctx.cmd_fd = cmd_fd;
	pthread_mutex_unlock(&s->lock);
	mrmgr__info("sim: imported %s from %s (pid %d)", imp->owner_name,
		    imp->in_process ? "this process" : "another process",
		    (int)imp->owner_pid);
	*ctx = &s->ibctx;
	return 0;
}

/* The importing context behind ctx, or NULL with the errno to return. */
static struct mrmgr__sim_ctx *importer(struct ibv_context *ctx, int *err)
{
	struct mrmgr__sim_ctx *s = mrmgr__sim_ctx_get(ctx);

	*err = EINVAL;
	if (!s)
		return NULL;
	if (s->personality == MRMGR_SIM_RXE) {
		*err = EOPNOTSUPP;
		return NULL;
	}
	if (!s->imp) {
		mrmgr__warn("sim: %s is not an imported context (see "
			    "mrmgr_sim_import_device())", s->ibdev.name);
		return NULL;
	}
	return s;
}

MRMGR_EXPORT int mrmgr_sim_import_pd(struct ibv_context *ctx,
				     uint32_t pd_handle, struct ibv_pd **pd)
{
	struct mrmgr__sim_pd *spd;
	struct mrmgr__sim_ctx *s;
	int ret;

	s = importer(ctx, &ret);
	if (!s)
		return ret;
	if (!pd) {
		mrmgr__warn("sim_import_pd: NULL pd");
		return EINVAL;
	}
	pthread_mutex_lock(&s->lock);
	ret = mrmgr__sim_fault_check(s, MRMGR_SIM_OP_IMPORT, NULL, 0, 0);
	if (!ret && !find_pd(s->imp, pd_handle))
		ret = ENOENT;
	if (ret)
		s->stats.import_failures++;
	pthread_mutex_unlock(&s->lock);
	if (ret) {
		mrmgr__dbg("sim_import_pd: handle %u: %s", pd_handle,
			   strerror(ret));
		return ret;
	}
	/* A PD object of this context (so every sim call knows it) that
	 * names the owner's PD. */
	ret = mrmgr_sim_alloc_pd(ctx, pd);
	if (ret)
		return ret;
	spd = mrmgr__container_of(*pd, struct mrmgr__sim_pd, ibpd);
	pthread_mutex_lock(&s->lock);
	spd->ibpd.handle = pd_handle;
	spd->imported = 1;
	s->stats.imported_pds++;
	pthread_mutex_unlock(&s->lock);
	return 0;
}

MRMGR_EXPORT int mrmgr_sim_unimport_pd(struct ibv_pd *pd)
{
	struct mrmgr__sim_pd *spd = mrmgr__sim_pd_get(pd);

	if (!spd)
		return EINVAL;
	if (!spd->imported) {
		mrmgr__warn("sim_unimport_pd: %p was not imported", (void *)pd);
		return EINVAL;
	}
	return mrmgr_sim_dealloc_pd(pd);
}

/* The owner's PFNs of [span, +npages), for identity checks across
 * processes; NULL (unverified) when pagemap hides them. */
static uint64_t *owner_pfns(const struct mrmgr__sim_import *imp, uint64_t span,
			    uint64_t npages)
{
	uint64_t *p;
	size_t want = npages * sizeof(*p), got = 0;

	if (imp->pagemap_fd < 0 || !npages)
		return NULL;
	p = malloc(want);
	if (!p)
		return NULL;
	while (got < want) {
		ssize_t r = pread(imp->pagemap_fd, (char *)p + got, want - got,
				  (off_t)((span / PAGE) * sizeof(*p) + got));

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0) {
			free(p);
			return NULL;
		}
		got += (size_t)r;
	}
	for (uint64_t i = 0; i < npages; i++) {
		if (!(p[i] & MRMGR__PM_PRESENT) || !(p[i] & MRMGR__PM_PFN_MASK)) {
			free(p);
			return NULL;
		}
		p[i] &= MRMGR__PM_PFN_MASK;
	}
	return p;
}

MRMGR_EXPORT int mrmgr_sim_import_mr(struct ibv_pd *pd, uint32_t mr_handle,
				     struct ibv_mr **mr)
{
	struct mrmgr__sim_pd *spd = mrmgr__sim_pd_get(pd);
	struct mrmgr__sim_import *imp;
	struct mrmgr__sim_ctx *s;
	struct mrmgr__sim_mr *m;
	struct tbl_mr e;
	uint32_t slot = 0;
	int ret;

	if (!spd)
		return EINVAL;
	s = spd->sctx;
	if (s->personality == MRMGR_SIM_RXE)
		return EOPNOTSUPP;
	if (!spd->imported || !s->imp || !mr) {
		mrmgr__warn("sim_import_mr: %s", !mr ? "NULL mr"
				    : "the PD was not imported (mrmgr_sim_import_pd())");
		return EINVAL;
	}
	imp = s->imp;
	m = calloc(1, sizeof(*m));
	if (!m)
		return ENOMEM;
	pthread_mutex_lock(&s->lock);
	ret = mrmgr__sim_fault_check(s, MRMGR_SIM_OP_IMPORT, NULL, 0, 0);
	if (!ret && !find_mr(imp, mr_handle, &e, &slot))
		ret = ENOENT;
	if (!ret && e.pd_handle != pd->handle) {
		mrmgr__warn("sim_import_mr: MR %u is in PD %u, not PD %u",
			    mr_handle, e.pd_handle, pd->handle);
		ret = EINVAL;
	}
	if (!ret && imp->nmrs == imp->cap) {
		size_t cap = imp->cap ? imp->cap * 2 : 16;
		void *v = realloc(imp->mrs, cap * sizeof(*imp->mrs));

		if (v) {
			imp->mrs = v;
			imp->cap = cap;
		} else {
			ret = ENOMEM;
		}
	}
	if (ret) {
		s->stats.import_failures++;
		pthread_mutex_unlock(&s->lock);
		free(m);
		mrmgr__dbg("sim_import_mr: handle %u: %s", mr_handle, strerror(ret));
		return ret;
	}
	m->magic = MRMGR__SIM_IMPORT_MAGIC;
	m->spd = spd;
	m->live = 1;
	m->access = e.access;
	m->share_slot = slot + 1;
	m->span = e.addr & ~(PAGE - 1);
	m->npages = (((e.addr + e.length + PAGE - 1) & ~(PAGE - 1)) - m->span) / PAGE;
	m->ibmr.context = pd->context;
	m->ibmr.pd = pd;
	m->ibmr.addr = NULL; /* "not applicable", says the man page */
	m->ibmr.length = e.length;
	m->ibmr.handle = e.handle;
	m->ibmr.lkey = e.lkey;
	m->ibmr.rkey = e.rkey;
	imp->mrs[imp->nmrs++] = m;
	spd->mrs++;
	s->mrs++;
	s->stats.imported_mrs++;
	pthread_mutex_unlock(&s->lock);
	/* Across processes: the owner's pages, to tell a stale access. */
	if (!imp->in_process && !(e.access & IBV_ACCESS_ON_DEMAND)) {
		uint64_t *pfns = owner_pfns(imp, m->span, m->npages);

		pthread_mutex_lock(&s->lock);
		m->pfns = pfns;
		if (!pfns)
			s->stats.unverified_pages += m->npages;
		pthread_mutex_unlock(&s->lock);
	}
	*mr = &m->ibmr;
	return 0;
}

MRMGR_EXPORT int mrmgr_sim_unimport_mr(struct ibv_mr *mr)
{
	struct mrmgr__sim_ctx *s;
	struct mrmgr__sim_mr *m = NULL;
	size_t i;

	if (!mr) {
		mrmgr__warn("sim_unimport_mr: NULL mr");
		return EINVAL;
	}
	s = mrmgr__sim_ctx_get(mr->context);
	if (!s)
		return EINVAL;
	pthread_mutex_lock(&s->lock);
	/* Found by pointer first: nothing is read through an unknown one. */
	for (i = 0; s->imp && i < s->imp->nmrs; i++) {
		if (&s->imp->mrs[i]->ibmr == mr) {
			m = s->imp->mrs[i];
			s->imp->mrs[i] = s->imp->mrs[--s->imp->nmrs];
			break;
		}
	}
	if (!m) {
		pthread_mutex_unlock(&s->lock);
		mrmgr__warn("sim_unimport_mr: %p is not an imported MR of %s",
			    (void *)mr, s->ibdev.name);
		return EINVAL;
	}
	m->spd->mrs--;
	s->mrs--;
	s->stats.imported_mrs--;
	m->magic = 0;
	pthread_mutex_unlock(&s->lock);
	free(m->pfns);
	free(m);
	return 0;
}

/* ------------------------------------------------------------ access */

static int check_owner_identity(const struct mrmgr__sim_import *imp,
				const struct mrmgr__sim_mr *m, uint64_t va,
				size_t len)
{
	uint64_t first = va & ~(PAGE - 1);
	uint64_t n = (((va + len - 1) & ~(PAGE - 1)) - first) / PAGE + 1;
	const uint64_t *want = m->pfns + (first - m->span) / PAGE;

	for (uint64_t i = 0; i < n; i++) {
		uint64_t e = 0;
		ssize_t r = pread(imp->pagemap_fd, &e, sizeof(e),
				  (off_t)(((first / PAGE) + i) * sizeof(e)));

		if (r != (ssize_t)sizeof(e))
			return 0; /* cannot tell: not verified */
		if (!(e & MRMGR__PM_PRESENT) || (e & MRMGR__PM_PFN_MASK) != want[i])
			return ESTALE;
	}
	return 0;
}

static int copy_remote(pid_t pid, void *local, uint64_t remote, size_t len,
		       int to_remote)
{
	size_t done = 0;

	while (done < len) {
		struct iovec l = { (char *)local + done, len - done };
		struct iovec r = { (void *)(uintptr_t)(remote + done), len - done };
		ssize_t n = to_remote ? process_vm_writev(pid, &l, 1, &r, 1, 0)
				      : process_vm_readv(pid, &l, 1, &r, 1, 0);

		if (n > 0) {
			done += (size_t)n;
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == ESRCH)
			return ENOENT; /* the owner is gone */
		if (n < 0 && (errno == EPERM || errno == ENOSYS)) {
			mrmgr__warn("sim: cannot reach process %d's memory (%s): "
				    "cross-process access needs ptrace "
				    "permission", (int)pid, strerror(errno));
			return EPERM;
		}
		return EFAULT;
	}
	return 0;
}

int mrmgr__sim_import_access(struct mrmgr__sim_pd *spd, uint32_t rkey,
			     uint64_t raddr, void *buf, size_t len, int write)
{
	unsigned int need = write ? IBV_ACCESS_REMOTE_WRITE
				  : IBV_ACCESS_REMOTE_READ;
	struct mrmgr__sim_ctx *s = spd->sctx, *owner;
	struct mrmgr__sim_import *imp;
	struct mrmgr__sim_mr *m = NULL, *om;
	uint64_t wait_ns = 0;
	struct tbl_mr e;
	int ret = 0;

	pthread_mutex_lock(&s->lock);
	imp = s->imp;
	for (size_t i = 0; imp && i < imp->nmrs; i++)
		if (imp->mrs[i]->ibmr.rkey == rkey && imp->mrs[i]->spd == spd)
			m = imp->mrs[i];
	if (!m) {
		s->stats.access_errors++;
		pthread_mutex_unlock(&s->lock);
		return ENOENT;
	}
	read_mr(&mr_table(imp->map)[m->share_slot - 1], &e);
	if (e.state != ENTRY_LIVE || e.handle != m->ibmr.handle || e.rkey != rkey) {
		/* The owner deregistered it: the shared object is gone. */
		s->stats.dead_import_accesses++;
		pthread_mutex_unlock(&s->lock);
		mrmgr__dbg("sim %s: access through dead import (handle %u)",
			   s->ibdev.name, m->ibmr.handle);
		return ENOENT;
	}
	if (raddr < e.addr || len > e.length || raddr - e.addr > e.length - len)
		ret = ERANGE;
	else if (!(e.access & need))
		ret = EACCES;
	if (!ret && imp->in_process) {
		/* Importer lock, then owner lock; the owner never takes ours. */
		owner = mrmgr__sim_ctx_find((const struct ibv_context *)(uintptr_t)
						    imp->owner_token);
		if (!owner || strcmp(owner->ibdev.name, imp->owner_name)) {
			ret = ENOENT;
		} else {
			pthread_mutex_lock(&owner->lock);
			om = mrmgr__sim_mr_by_rkey(owner, rkey);
			if (!om || om->ibmr.handle != m->ibmr.handle)
				ret = ENOENT;
			else
				ret = mrmgr__sim_access_mr(owner, om, raddr, buf,
							   len, write, &wait_ns);
			pthread_mutex_unlock(&owner->lock);
		}
	} else if (!ret) {
		if (m->pfns)
			ret = check_owner_identity(imp, m, raddr, len);
		if (!ret)
			ret = copy_remote(imp->owner_pid, buf, raddr, len, write);
	}
	if (ret == ESTALE)
		s->stats.stale_accesses++;
	else if (ret)
		s->stats.access_errors++;
	else if (write)
		s->stats.writes++;
	else
		s->stats.reads++;
	pthread_mutex_unlock(&s->lock);
	mrmgr__sim_busy_wait(wait_ns);
	return ret;
}
