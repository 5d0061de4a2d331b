/*
 * Fault-injection sweep: representative workloads run with the Nth
 * registration, deregistration, re-registration (each of the five
 * ibv_rereg_mr error codes, and EOPNOTSUPP), prefetch advice or import
 * failing, for every N up to the number of such calls the workload makes
 * (until an injected fault no longer fires). After each run:
 *   - no crash, and every call returned 0 or a positive errno;
 *   - with the faults cleared, the cache still serves a get whose keys
 *     reach the memory (a simulated RDMA write lands);
 *   - after the last put, destroy returns 0 and nothing is left: no MR,
 *     no pinned byte on the device, no descriptor more than before.
 *
 * SPDX-License-Identifier: MIT
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "helpers.h"

#include <mrmgr/share.h>

#define PG ((size_t)4096)
#define MEM_PAGES 128
#define MAX_N 400

struct fault_kind {
	const char *name;
	uint32_t op;
	int err;
	int rereg_code; /* 0: none */
};

static const struct fault_kind kinds[] = {
	{ "reg ENOMEM", MRMGR_SIM_OP_REG, ENOMEM, 0 },
	{ "reg EIO", MRMGR_SIM_OP_REG, EIO, 0 },
	{ "dereg EIO", MRMGR_SIM_OP_DEREG, EIO, 0 },
	{ "rereg ERR_INPUT", MRMGR_SIM_OP_REREG, EINVAL, IBV_REREG_MR_ERR_INPUT },
	{ "rereg ERR_DONT_FORK_NEW", MRMGR_SIM_OP_REREG, EIO,
	  IBV_REREG_MR_ERR_DONT_FORK_NEW },
	{ "rereg ERR_DO_FORK_OLD", MRMGR_SIM_OP_REREG, EIO,
	  IBV_REREG_MR_ERR_DO_FORK_OLD },
	{ "rereg ERR_CMD", MRMGR_SIM_OP_REREG, EIO, IBV_REREG_MR_ERR_CMD },
	{ "rereg ERR_CMD_AND_DO_FORK_NEW", MRMGR_SIM_OP_REREG, EIO,
	  IBV_REREG_MR_ERR_CMD_AND_DO_FORK_NEW },
	{ "rereg EOPNOTSUPP", MRMGR_SIM_OP_REREG, EOPNOTSUPP, 0 },
	{ "advise EIO", MRMGR_SIM_OP_ADVISE, EIO, 0 },
	{ "import EIO", MRMGR_SIM_OP_IMPORT, EIO, 0 },
};
#define NKINDS (sizeof(kinds) / sizeof(kinds[0]))

/* The fault of the current run, for workloads that arm it on a context
 * of their own (the importer's). */
static struct mrmgr_sim_fault armed;
static int arm_import;

static void arm(struct ibv_context *ctx)
{
	cr_assert_eq(mrmgr_sim_inject_fault(ctx, &armed), 0);
}

static int nfds(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	int n = 0;

	cr_assert(d);
	while ((e = readdir(d)))
		n += e->d_name[0] != '.';
	closedir(d);
	return n - 1; /* the one opendir holds */
}

/* A call's result: 0 or a positive errno, never anything else. */
static int ok(int ret, const char *what)
{
	cr_assert(ret >= 0 && ret < 4096, "%s returned %d", what, ret);
	return ret;
}

struct held {
	mrmgr_region_t *r[16];
	int n;
};

static mrmgr_region_t *get(struct fixture *f, struct held *h, char *a,
			   size_t len, unsigned int access)
{
	mrmgr_region_t *r;

	if (ok(mrmgr_get(f->cache, a, len, access, &r), "mrmgr_get"))
		return NULL;
	cr_assert_leq((uintptr_t)mrmgr_region_addr(r), (uintptr_t)a);
	h->r[h->n++] = r;
	return r;
}

static void put_all(struct held *h)
{
	while (h->n)
		mrmgr_put(h->r[--h->n]);
}

/* ------------------------------------------------------------ workloads */

/* Gets that merge, overlap and evict; invalidation; puts. */
static void w_cache(struct fixture *f, char *m)
{
	struct held h = { .n = 0 };

	get(f, &h, m, 2 * PG, RW);
	get(f, &h, m + 2 * PG, 2 * PG, RW);    /* adjacent: merged */
	mrmgr_put(h.r[0]);
	h.r[0] = h.r[--h.n];
	get(f, &h, m + PG, 2 * PG, RW);        /* inside the merged one */
	ok(mrmgr_invalidate(f->cache, m, PG), "mrmgr_invalidate");
	get(f, &h, m + 10 * PG, 2 * PG, RW);
	get(f, &h, m + 20 * PG, 2 * PG, IBV_ACCESS_LOCAL_WRITE);
	put_all(&h);
	for (int i = 0; i < 6; i++) {          /* over the region limit */
		get(f, &h, m + (size_t)(30 + 8 * i) * PG, 4 * PG, RW);
		put_all(&h);
	}
	get(f, &h, m, 4 * PG, RW);
	put_all(&h);
}

/* Growth by re-registration, make-before-break, access upgrades, and a
 * growable buffer. */
static void w_growth(struct fixture *f, char *m)
{
	struct held h = { .n = 0 };
	mrmgr_buf_t *b = NULL;

	get(f, &h, m, 4 * PG, IBV_ACCESS_LOCAL_WRITE);
	put_all(&h);
	get(f, &h, m, 16 * PG, IBV_ACCESS_LOCAL_WRITE); /* idle: rereg */
	get(f, &h, m, 32 * PG, IBV_ACCESS_LOCAL_WRITE); /* held: anew */
	put_all(&h);
	get(f, &h, m + 64 * PG, 4 * PG, IBV_ACCESS_LOCAL_WRITE);
	put_all(&h);
	get(f, &h, m + 64 * PG, 4 * PG, RW);            /* access upgrade */
	put_all(&h);
	if (!ok(mrmgr_buf_create(f->cache, 8 * PG, RW, &b), "mrmgr_buf_create")) {
		ok(mrmgr_buf_resize(b, 64 * PG), "mrmgr_buf_resize");
		ok(mrmgr_buf_resize(b, 4 * PG), "mrmgr_buf_resize");
		ok(mrmgr_buf_resize(b, 200 * PG), "mrmgr_buf_resize");
		cr_assert_eq(mrmgr_buf_destroy(b), 0);
	}
}

/* Implicit ODP: views, prefetch of ranges and of a region. */
static void w_odp(struct fixture *f, char *m)
{
	struct held h = { .n = 0 };
	struct mrmgr_range rg[2] = { { m, 8 * PG }, { m + 40 * PG, 16 * PG } };
	mrmgr_region_t *r;

	r = get(f, &h, m, 8 * PG, RW);
	ok(mrmgr_prefetch(f->cache, rg, 2, MRMGR_PREFETCH_SYNC), "mrmgr_prefetch");
	ok(mrmgr_prefetch(f->cache, rg, 1, 0), "mrmgr_prefetch");
	if (r)
		ok(mrmgr_region_prefetch(r, NULL, 0, 0), "mrmgr_region_prefetch");
	get(f, &h, m + 20 * PG, 4 * PG, RW);
	put_all(&h);
}

/* Explicit ODP with the automatic hint after each get. */
static void w_odp_explicit(struct fixture *f, char *m)
{
	struct held h = { .n = 0 };
	struct mrmgr_range rg = { m, 32 * PG };

	get(f, &h, m, 8 * PG, RW);
	get(f, &h, m + 8 * PG, 8 * PG, RW);
	ok(mrmgr_prefetch(f->cache, &rg, 1, 0), "mrmgr_prefetch");
	put_all(&h);
	get(f, &h, m, 32 * PG, RW);
	put_all(&h);
}

/* Export a region, import it through a second context, access it. */
static void w_share(struct fixture *f, char *m)
{
	struct held h = { .n = 0 };
	struct mrmgr_export_desc d;
	mrmgr_importer_t *imp = NULL;
	mrmgr_import_t *im = NULL;
	mrmgr_export_t *e = NULL;
	mrmgr_region_t *r;
	int fd = -1, dfd;

	r = get(f, &h, m, 16 * PG, RW);
	if (!r || ok(mrmgr_region_export(r, NULL, &e), "mrmgr_region_export"))
		goto out;
	cr_assert_eq(mrmgr_export_describe(e, &d, sizeof(d), &fd), 0);
	dfd = dup(fd);
	cr_assert_geq(dfd, 0);
	if (ok(mrmgr_importer_open(dfd, &imp), "mrmgr_importer_open")) {
		close(dfd);
		goto release;
	}
	if (arm_import)
		arm(mrmgr_importer_context(imp));
	if (!ok(mrmgr_import(imp, &d, sizeof(d), &im), "mrmgr_import")) {
		char c = 7;

		ok(mrmgr_sim_write(mrmgr_import_pd(im), mrmgr_import_rkey(im),
				   mrmgr_import_addr(im) + PG, &c, 1),
		   "mrmgr_sim_write");
		cr_assert_eq(mrmgr_import_release(im), 0);
	}
	/* A second import: the PD is imported already. */
	if (!ok(mrmgr_import(imp, &d, sizeof(d), &im), "mrmgr_import"))
		cr_assert_eq(mrmgr_import_release(im), 0);
	mrmgr_sim_clear_faults(mrmgr_importer_context(imp));
	cr_assert_eq(mrmgr_importer_close(imp), 0);
release:
	cr_assert_eq(mrmgr_export_release(e), 0);
out:
	put_all(&h);
}

/* ------------------------------------------------------------ harness */

struct workload {
	const char *name;
	void (*run)(struct fixture *f, char *m);
	uint32_t odp_mode;
	uint32_t odp_flags;
};

static void open_for(struct fixture *f, const struct workload *w)
{
	struct mrmgr_cache_attr a = {
		.comp_mask = MRMGR_CACHE_ATTR_MAX_REGIONS |
			     MRMGR_CACHE_ATTR_MAX_BYTES | MRMGR_CACHE_ATTR_ODP,
		.max_regions = 4,
		.max_bytes = 256 * PG,
		.odp_mode = w->odp_mode,
		.odp_flags = w->odp_flags,
	};

	fx_open(f, NULL, &a);
}

/* With no fault armed: the cache serves a get whose key reaches m. */
static void assert_usable(struct fixture *f, char *m, const char *what)
{
	mrmgr_region_t *r;
	char c = 0x42;

	cr_assert_eq(mrmgr_get(f->cache, m + 100 * PG, 2 * PG, RW, &r), 0,
		     "%s: no get after the faults", what);
	cr_assert_eq(mrmgr_sim_write(f->pd, mrmgr_region_rkey(r),
				     (uintptr_t)(m + 100 * PG + 5), &c, 1), 0,
		     "%s: a write through the new region fails", what);
	cr_assert_eq(m[100 * PG + 5], 0x42, "%s: the write missed", what);
	mrmgr_put(r);
}

static void close_clean(struct fixture *f, int fds, const char *what)
{
	int ret = mrmgr_cache_destroy(f->cache);
	struct mrmgr_sim_stats ss;

	cr_assert_eq(ret, 0, "%s: destroy returned %d", what, ret);
	f->cache = NULL;
	ss = sstats(f->ctx);
	cr_assert_eq(ss.live_mrs, 0, "%s: %llu MRs leaked", what,
		     (unsigned long long)ss.live_mrs);
	cr_assert_eq(ss.pinned_bytes, 0, "%s: %llu bytes left pinned", what,
		     (unsigned long long)ss.pinned_bytes);
	fx_close(f);
	cr_assert_eq(nfds(), fds, "%s: descriptors %d, before %d", what,
		     nfds(), fds);
}

static void sweep(const struct workload *w)
{
	struct fixture f;
	char *m = map_rw(MEM_PAGES * PG, 1);
	uint64_t total = 0;
	int fds;

	/* A clean run first: it also opens what the library keeps open
	 * for the process (the monitor's descriptors). */
	open_for(&f, w);
	w->run(&f, m);
	assert_usable(&f, m, w->name);
	cr_assert_eq(mrmgr_cache_destroy(f.cache), 0);
	f.cache = NULL;
	fx_close(&f);
	fds = nfds();

	for (size_t k = 0; k < NKINDS; k++) {
		uint64_t n;

		for (n = 1; n <= MAX_N; n++) {
			char what[160];
			uint64_t before;

			snprintf(what, sizeof(what), "%s, %s #%llu", w->name,
				 kinds[k].name, (unsigned long long)n);
			memset(&armed, 0, sizeof(armed));
			armed.op = kinds[k].op;
			armed.err = kinds[k].err;
			armed.nth = n;
			armed.count = 1;
			if (kinds[k].rereg_code) {
				armed.comp_mask = MRMGR_SIM_FAULT_REREG_CODE;
				armed.rereg_code = kinds[k].rereg_code;
			}
			arm_import = kinds[k].op == MRMGR_SIM_OP_IMPORT;
			open_for(&f, w);
			if (!arm_import)
				arm(f.ctx);
			before = sstats(f.ctx).faults_injected;
			w->run(&f, m);
			int fired = sstats(f.ctx).faults_injected != before;
			mrmgr_sim_clear_faults(f.ctx);
			assert_usable(&f, m, what);
			close_clean(&f, fds, what);
			if (!fired && !arm_import)
				break;
			if (arm_import && n > 4)
				break;
			total++;
		}
		cr_assert_lt(n, MAX_N, "%s: %s still fires after %d calls",
			     w->name, kinds[k].name, MAX_N);
	}
	cr_log_info("%s: %llu runs with a fault", w->name,
		    (unsigned long long)total);
	munmap(m, MEM_PAGES * PG);
}

static void discard(enum mrmgr_log_level level, const char *msg, void *arg)
{
	(void)level;
	(void)msg;
	(void)arg;
}

static void quiet(void)
{
	/* Every injected fault logs an error line; the asserts speak. */
	mrmgr_set_log_handler(discard, NULL, MRMGR_LOG_ERROR);
}

TestSuite(fault_sweep, .init = quiet, .timeout = 120);

Test(fault_sweep, get_put_merge_evict)
{
	static const struct workload w = { "cache", w_cache, MRMGR_ODP_OFF, 0 };
	sweep(&w);
}

Test(fault_sweep, growth_rereg_and_buffers)
{
	static const struct workload w = { "growth", w_growth, MRMGR_ODP_OFF, 0 };
	sweep(&w);
}

Test(fault_sweep, implicit_odp_and_prefetch)
{
	static const struct workload w = { "odp", w_odp, MRMGR_ODP_IMPLICIT, 0 };
	sweep(&w);
}

Test(fault_sweep, explicit_odp_with_automatic_hints)
{
	static const struct workload w = { "odp-explicit", w_odp_explicit,
					   MRMGR_ODP_EXPLICIT,
					   MRMGR_ODP_AUTO_PREFETCH };
	sweep(&w);
}

Test(fault_sweep, export_and_import)
{
	static const struct workload w = { "share", w_share, MRMGR_ODP_OFF, 0 };
	sweep(&w);
}
