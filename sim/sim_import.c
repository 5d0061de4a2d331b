/*
 * ibv_import_device/_pd/_mr on the simulated HCA, and simulated accesses
 * through imported MRs. The table they read, and the model's rules and
 * limits, are described in sim_share.c.
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
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "compiler.h"
#include "log.h"
#include "sim/sim_internal.h"
#include "sim/sim_share.h"

#define PAGE MRMGR__SIM_PAGE_SIZE
/* No registration ends above this (x86-64 and AArch64 with 5-level
 * tables reach 2^57): larger entries are forged. */
#define MRMGR__SIM_MAX_VA (UINT64_C(1) << 57)
/* Page identity is recorded for imports up to this many pages (4 GiB);
 * larger ones are unverified rather than an unbounded allocation. */
#define MAX_PFN_PAGES (UINT64_C(1) << 20)

/* ------------------------------------------------------------ import */

/*
 * Whether fd can be a simulated device's table, and the errno if not.
 * The descriptor may come from a hostile peer: it must be a memfd (on
 * tmpfs: no hugetlbfs file, whose holes can SIGBUS a reader) of exactly
 * the table's size, sealed so that size stays (a truncation after we map
 * it would SIGBUS us).
 */
static int check_table_fd(int fd)
{
	struct statfs sf;
	struct stat st;
	int seals;

	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) ||
	    fstatfs(fd, &sf) != 0 || sf.f_type != TMPFS_MAGIC)
		return EINVAL;
	seals = fcntl(fd, F_GET_SEALS);
	if (seals < 0)
		return EINVAL; /* not a memfd */
	if ((seals & MRMGR__SIM_TBL_SEALS) != MRMGR__SIM_TBL_SEALS) {
		mrmgr__warn("sim_import_device: fd %d is not sealed against "
			    "resizing (seals %#x): refused", fd, (unsigned int)seals);
		return EPROTO;
	}
	if ((uint64_t)st.st_size != MRMGR__SIM_TBL_BYTES)
		return EINVAL;
	return 0;
}

MRMGR_EXPORT int mrmgr_sim_import_device(int cmd_fd, struct ibv_context **ctx)
{
	struct mrmgr_sim_attr attr = { .comp_mask = MRMGR_SIM_ATTR_PERSONALITY };
	const size_t size = MRMGR__SIM_TBL_BYTES;
	struct mrmgr__sim_import *imp;
	struct mrmgr__sim_ctx *s;
	struct mrmgr__sim_tbl_hdr h;
	void *map;
	int ret;

	if (!ctx || cmd_fd < 0) {
		mrmgr__warn("sim_import_device: %s", !ctx ? "NULL ctx" : "bad fd");
		return EINVAL;
	}
	ret = check_table_fd(cmd_fd);
	if (ret) {
		if (ret == EINVAL)
			mrmgr__warn("sim_import_device: fd %d is not a simulated "
				    "device's command fd", cmd_fd);
		return ret;
	}
	map = mmap(NULL, size, PROT_READ, MAP_SHARED, cmd_fd, 0);
	if (map == MAP_FAILED)
		return errno == ENOMEM ? ENOMEM : EINVAL;
	/* One copy of the header: the owner may rewrite it under us. */
	memcpy(&h, map, sizeof(h));
	h.name[sizeof(h.name) - 1] = '\0';
	if (h.magic != MRMGR__SIM_TBL_MAGIC || h.version != MRMGR__SIM_TBL_VERSION ||
	    h.size != MRMGR__SIM_TBL_BYTES || h.nmrs != MRMGR__SIM_TBL_MRS ||
	    h.npds != MRMGR__SIM_TBL_PDS || h.personality > MRMGR_SIM_RXE ||
	    h.owner_pid <= 0) {
		munmap(map, size);
		mrmgr__warn("sim_import_device: fd %d is not a simulated "
			    "device's command fd", cmd_fd);
		return EINVAL;
	}
	if (h.personality == MRMGR_SIM_RXE) {
		/* rdma_rxe has no import_device: rdma-core's stub refuses. */
		munmap(map, size);
		mrmgr__dbg("sim_import_device: %s (rxe) cannot be imported",
			   h.name);
		return EOPNOTSUPP;
	}
	imp = calloc(1, sizeof(*imp));
	if (!imp) {
		munmap(map, size);
		return ENOMEM;
	}
	imp->map = map;
	imp->size = size;
	imp->owner_pid = h.owner_pid;
	imp->owner_token = h.owner_token;
	imp->in_process = h.owner_pid == (int32_t)getpid();
	snprintf(imp->owner_name, sizeof(imp->owner_name), "%s", h.name);
	imp->pagemap_fd = -1;
	if (!imp->in_process && mrmgr_sim_page_identity_available()) {
		char path[64];

		snprintf(path, sizeof(path), "/proc/%d/pagemap", (int)h.owner_pid);
		imp->pagemap_fd = open(path, O_RDONLY | O_CLOEXEC);
	}

	attr.personality = h.personality;
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
	pthread_mutex_unlock(&s->lock);
	/* The table is read with no lock held: an entry may stay busy. */
	if (!ret)
		ret = mrmgr__sim_tbl_find_pd(s->imp, pd_handle);
	if (ret) {
		pthread_mutex_lock(&s->lock);
		s->stats.import_failures++;
		pthread_mutex_unlock(&s->lock);
	}
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

	if (imp->pagemap_fd < 0 || !npages || npages > MAX_PFN_PAGES)
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
	struct mrmgr__sim_tbl_mr e;
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
	pthread_mutex_unlock(&s->lock);
	/* The table is read with no lock held: an entry may stay busy. */
	if (!ret)
		ret = mrmgr__sim_tbl_find_mr(imp, mr_handle, &e, &slot);
	/* An entry the owner's sim could not have written: a forged table. */
	if (!ret && (!e.length || e.addr + e.length < e.addr ||
		     e.addr + e.length > MRMGR__SIM_MAX_VA)) {
		mrmgr__warn("sim_import_mr: MR %u's entry [%#llx, +%llu) is "
			    "not a registration", mr_handle,
			    (unsigned long long)e.addr,
			    (unsigned long long)e.length);
		ret = EPROTO;
	}
	pthread_mutex_lock(&s->lock);
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
	size_t done;
	int err = mrmgr__sim_vm_copy(pid, local, remote, len, to_remote, &done);

	if (err == ESRCH)
		return ENOENT; /* the owner is gone */
	if (err == EPERM || err == ENOSYS) {
		mrmgr__warn("sim: cannot reach process %d's memory (%s): "
			    "cross-process access needs ptrace permission",
			    (int)pid, strerror(err));
		return EPERM;
	}
	return err ? EFAULT : 0;
}

/* m, if it is still one of imp's imported MRs. Lock held. */
static int still_imported(const struct mrmgr__sim_import *imp,
			  const struct mrmgr__sim_mr *m)
{
	for (size_t i = 0; imp && i < imp->nmrs; i++)
		if (imp->mrs[i] == m)
			return 1;
	return 0;
}

/* The imported MR of spd that rkey names, or NULL. Lock held. */
static struct mrmgr__sim_mr *imported_mr(const struct mrmgr__sim_import *imp,
					 const struct mrmgr__sim_pd *spd,
					 uint32_t rkey)
{
	struct mrmgr__sim_mr *m = NULL;

	for (size_t i = 0; imp && i < imp->nmrs; i++)
		if (imp->mrs[i]->ibmr.rkey == rkey && imp->mrs[i]->spd == spd)
			m = imp->mrs[i];
	return m;
}

/*
 * An access through an import of a context of this process: the owner's
 * own MR, under the owner's lock only. s's lock is let go meanwhile (and
 * held again on return), so no two contexts' locks are ever held together
 * (a forged table may name this context, or one importing from us, as its
 * owner).
 */
static int access_in_owner(struct mrmgr__sim_ctx *s,
			   const struct mrmgr__sim_import *imp, uint32_t handle,
			   uint32_t rkey, uint64_t raddr, void *buf, size_t len,
			   int write, uint64_t *wait_ns)
{
	struct mrmgr__sim_ctx *owner;
	struct mrmgr__sim_mr *om;
	int ret;

	pthread_mutex_unlock(&s->lock);
	owner = mrmgr__sim_ctx_find((const struct ibv_context *)(uintptr_t)
					    imp->owner_token);
	if (!owner || owner == s || owner->imp ||
	    strcmp(owner->ibdev.name, imp->owner_name)) {
		ret = ENOENT;
	} else {
		pthread_mutex_lock(&owner->lock);
		om = mrmgr__sim_mr_by_rkey(owner, rkey);
		if (!om || om->ibmr.handle != handle)
			ret = ENOENT;
		else
			ret = mrmgr__sim_access_mr(owner, om, raddr, buf, len,
						   write, wait_ns);
		pthread_mutex_unlock(&owner->lock);
	}
	pthread_mutex_lock(&s->lock);
	return ret;
}

/*
 * An access through an import of another process's context, within what
 * the import recorded: the owner may have re-registered the MR (grown or
 * moved it in place) since, and the pages beyond what was recorded at
 * import are not this import's to reach, nor covered by its PFNs
 * (ESTALE: re-import). Lock held.
 */
static int access_across(const struct mrmgr__sim_ctx *s,
			 const struct mrmgr__sim_import *imp,
			 const struct mrmgr__sim_mr *m, uint64_t raddr,
			 void *buf, size_t len, int write)
{
	uint64_t limit = m->npages * PAGE; /* <= 2^57: checked at import */
	int ret = 0;

	if (raddr < m->span || raddr - m->span >= limit ||
	    len > limit - (raddr - m->span)) {
		mrmgr__dbg("sim %s: [%#llx, +%zu) is outside what import "
			   "%u recorded (re-registered since)",
			   s->ibdev.name, (unsigned long long)raddr, len,
			   m->ibmr.handle);
		return ESTALE;
	}
	if (m->pfns)
		ret = check_owner_identity(imp, m, raddr, len);
	if (!ret)
		ret = copy_remote(imp->owner_pid, buf, raddr, len, write);
	return ret;
}

int mrmgr__sim_import_access(struct mrmgr__sim_pd *spd, uint32_t rkey,
			     uint64_t raddr, void *buf, size_t len, int write)
{
	unsigned int need = write ? IBV_ACCESS_REMOTE_WRITE
				  : IBV_ACCESS_REMOTE_READ;
	struct mrmgr__sim_ctx *s = spd->sctx;
	struct mrmgr__sim_import *imp;
	struct mrmgr__sim_mr *m;
	uint64_t wait_ns = 0;
	struct mrmgr__sim_tbl_mr e;
	uint32_t slot;
	int ret = 0;

	pthread_mutex_lock(&s->lock);
	imp = s->imp;
	m = imported_mr(imp, spd, rkey);
	if (!m) {
		s->stats.access_errors++;
		pthread_mutex_unlock(&s->lock);
		return ENOENT;
	}
	slot = m->share_slot - 1; /* < MRMGR__SIM_TBL_MRS: from find_mr */
	pthread_mutex_unlock(&s->lock);
	/* The owner's entry, read with no lock held (it may stay busy). */
	ret = mrmgr__sim_tbl_read_mr(&mrmgr__sim_tbl_mrs(imp->map)[slot], &e,
				     mrmgr__sim_tbl_deadline());
	pthread_mutex_lock(&s->lock);
	if (!still_imported(imp, m)) { /* unimported meanwhile */
		s->stats.access_errors++;
		pthread_mutex_unlock(&s->lock);
		return ENOENT;
	}
	if (ret) {
		s->stats.access_errors++;
		pthread_mutex_unlock(&s->lock);
		mrmgr__warn("sim %s: the owner's entry for MR %u stays busy: "
			    "%s", s->ibdev.name, m->ibmr.handle, strerror(ret));
		return ret;
	}
	if (e.state != MRMGR__SIM_ENTRY_LIVE || e.handle != m->ibmr.handle || e.rkey != rkey) {
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
	else if (imp->in_process)
		ret = access_in_owner(s, imp, m->ibmr.handle, rkey, raddr, buf,
				      len, write, &wait_ns);
	else
		ret = access_across(s, imp, m, raddr, buf, len, write);
	mrmgr__sim_count_access(s, ret, write);
	pthread_mutex_unlock(&s->lock);
	mrmgr__sim_busy_wait(wait_ns);
	return ret;
}
