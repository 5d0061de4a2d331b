/*
 * The public device seam (mrmgr/device.h): a provider of one's own kind
 * (here a toy device that "registers" by handing out keys) serves a cache
 * like libibverbs would; registration validates the table; errno is read
 * once for all ("cannot" learnt per device); descriptors are imported only
 * by a provider that claims them, never guessed at.
 *
 * SPDX-License-Identifier: MIT
 */
#define _GNU_SOURCE /* memfd_create, file seals */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <mrmgr/device.h>

#include "compat.h"
#include "device.h"
#include "share_helpers.h"

/* ------------------------------------------------------------ a toy device */

static struct ibv_device toy_dev;
static struct ibv_context toy_ctx = { .device = &toy_dev, .cmd_fd = -1 };
static struct ibv_pd toy_pd = { .context = &toy_ctx, .handle = 1 };

static struct {
	int regs, deregs, reregs, advises, claims;
	uint32_t next_key;
	int rereg_err;  /* what rereg fails with */
	int advise_err; /* what advise fails with */
	int claim_fd;   /* the descriptor the toy claims */
} toy;

static int toy_owns(const struct ibv_context *ctx)
{
	return ctx == &toy_ctx;
}

static int toy_query(struct ibv_context *ctx, struct mrmgr_device_attr *a)
{
	cr_assert_eq(ctx, &toy_ctx);
	snprintf(a->name, sizeof(a->name), "%s", toy_dev.name);
	a->max_mr_size = UINT64_C(1) << 40;
	a->max_mr = 1024;
	a->max_sge = 4;
	a->page_size_cap = 0xfffff000u;
	return 0;
}

static int toy_reg(struct ibv_pd *pd, void *addr, size_t len, int access,
		   struct ibv_mr **mr)
{
	struct ibv_mr *m = calloc(1, sizeof(*m));

	(void)access;
	if (!m)
		return ENOMEM;
	m->context = pd->context;
	m->pd = pd;
	m->addr = addr;
	m->length = len;
	m->lkey = m->rkey = ++toy.next_key;
	toy.regs++;
	*mr = m;
	return 0;
}

static int toy_dereg(struct ibv_mr *mr)
{
	free(mr);
	toy.deregs++;
	return 0;
}

static int toy_rereg(struct ibv_mr *mr, int flags, struct ibv_pd *pd,
		     void *addr, size_t length, int access, int *err)
{
	(void)mr, (void)flags, (void)pd, (void)addr, (void)length, (void)access;
	toy.reregs++;
	*err = toy.rereg_err;
	return IBV_REREG_MR_ERR_INPUT;
}

static int toy_claim(int fd)
{
	toy.claims++;
	return fd == toy.claim_fd;
}

static int toy_import_device(int fd, struct ibv_context **ctx)
{
	(void)fd;
	(void)ctx;
	return ENOSYS; /* the verb is missing: reads as EOPNOTSUPP */
}

static int toy_close(struct ibv_context *ctx) { (void)ctx; return 0; }
static int toy_import_pd(struct ibv_context *c, uint32_t h, struct ibv_pd **pd)
{
	(void)c, (void)h, (void)pd;
	return EOPNOTSUPP;
}
static int toy_unimport_pd(struct ibv_pd *pd) { (void)pd; return 0; }
static int toy_import_mr(struct ibv_pd *pd, uint32_t h, struct ibv_mr **mr)
{
	(void)pd, (void)h, (void)mr;
	return EOPNOTSUPP;
}
static int toy_unimport_mr(struct ibv_mr *mr) { (void)mr; return 0; }

static struct mrmgr_device_ops toy_ops = {
	.size = sizeof(struct mrmgr_device_ops),
	.name = "toy",
	.owns_context = toy_owns,
	.query_device = toy_query,
	.reg_mr = toy_reg,
	.dereg_mr = toy_dereg,
	.rereg_mr = toy_rereg,
	.claim_fd = toy_claim,
	.import_device = toy_import_device,
	.close_device = toy_close,
	.import_pd = toy_import_pd,
	.unimport_pd = toy_unimport_pd,
	.import_mr = toy_import_mr,
	.unimport_mr = toy_unimport_mr,
};

static void toy_setup(void)
{
	static unsigned int n;

	memset(&toy, 0, sizeof(toy));
	toy.claim_fd = -1;
	toy.rereg_err = EOPNOTSUPP;
	/* A new device name per test: what was learnt is per device. */
	snprintf(toy_dev.name, sizeof(toy_dev.name), "toy%u_%d", n++, getpid());
	cr_assert_eq(mrmgr_device_register(&toy_ops), 0);
}

static void toy_teardown(void)
{
	cr_assert_eq(mrmgr_device_unregister(&toy_ops), 0);
}

TestSuite(device, .init = toy_setup, .fini = toy_teardown);

/* ------------------------------------------------------------ tests */

Test(device, a_cache_on_a_provider_of_ones_own)
{
	mrmgr_cache_t *c;
	mrmgr_region_t *r, *r2;
	char *buf = map_rw(64 * KiB, 1);

	cr_assert_eq(mrmgr_cache_create(&toy_pd, NULL, &c), 0);
	cr_assert_eq(mrmgr_get(c, buf, 64 * KiB, IBV_ACCESS_LOCAL_WRITE, &r), 0);
	cr_assert_eq(toy.regs - toy.deregs, 1, "the toy registered the miss");
	cr_assert_eq(mrmgr_region_mr(r)->pd, &toy_pd);
	cr_assert_eq(mrmgr_region_lkey(r), mrmgr_region_mr(r)->lkey);
	mrmgr_put(r);
	int regs = toy.regs;
	cr_assert_eq(mrmgr_get(c, buf + 4 * KiB, 4 * KiB, IBV_ACCESS_LOCAL_WRITE, &r2), 0);
	cr_assert_eq(toy.regs, regs, "a hit costs the device nothing");
	mrmgr_put(r2);
	/* Unregistering stops new contexts reaching the toy; this cache
	 * keeps it until it is destroyed. */
	cr_assert_eq(mrmgr_device_unregister(&toy_ops), 0);
	cr_assert_eq(mrmgr_invalidate(c, buf, 64 * KiB), 0);
	cr_assert_eq(mrmgr_cache_destroy(c), 0);
	cr_assert_eq(toy.regs, toy.deregs, "every MR deregistered by the toy");
	cr_assert_eq(mrmgr_device_register(&toy_ops), 0);
	munmap(buf, 64 * KiB);
}

Test(device, cannot_is_learnt_once_per_device)
{
	mrmgr_cache_t *a, *b;

	/* EOPNOTSUPP from the probe: the device cannot rereg, learnt. */
	cr_assert_eq(mrmgr_cache_create(&toy_pd, NULL, &a), 0);
	cr_assert_eq(toy.reregs, 1);
	cr_assert_eq(cstats(a).rereg_probes, 1);
	cr_assert_eq(mrmgr_cache_create(&toy_pd, NULL, &b), 0);
	cr_assert_eq(toy.reregs, 1, "the second cache was not probed again");
	cr_assert_eq(cstats(b).rereg_probes, 0);
	cr_assert_eq(mrmgr_cache_destroy(b), 0);
	cr_assert_eq(mrmgr_cache_destroy(a), 0);
	cr_assert_eq(toy.regs, toy.deregs, "the probe's MR went too");
	/* Unregistered and registered again, unchanged: still known. */
	cr_assert_eq(mrmgr_device_unregister(&toy_ops), 0);
	cr_assert_eq(mrmgr_device_register(&toy_ops), 0);
	cr_assert_eq(mrmgr_cache_create(&toy_pd, NULL, &a), 0);
	cr_assert_eq(toy.reregs, 1, "what was learnt survived re-registration");
	cr_assert_eq(mrmgr_cache_destroy(a), 0);
}

Test(device, enosys_reads_as_cannot)
{
	mrmgr_cache_t *a, *b;

	toy.rereg_err = ENOSYS;
	cr_assert_eq(mrmgr_cache_create(&toy_pd, NULL, &a), 0);
	cr_assert_eq(mrmgr_cache_create(&toy_pd, NULL, &b), 0);
	cr_assert_eq(toy.reregs, 1, "ENOSYS, like EOPNOTSUPP, is a verdict");
	cr_assert_eq(mrmgr_cache_destroy(b), 0);
	cr_assert_eq(mrmgr_cache_destroy(a), 0);
}

Test(device, another_error_is_no_verdict)
{
	mrmgr_cache_t *a, *b;

	toy.rereg_err = EIO;
	cr_assert_eq(mrmgr_cache_create(&toy_pd, NULL, &a), 0);
	cr_assert_eq(mrmgr_cache_create(&toy_pd, NULL, &b), 0);
	cr_assert_eq(toy.reregs, 2, "EIO says nothing about the device");
	cr_assert_eq(mrmgr_cache_destroy(b), 0);
	cr_assert_eq(mrmgr_cache_destroy(a), 0);
}

Test(device, registration_checks_the_table)
{
	struct mrmgr_device_ops o = toy_ops;
	struct {
		struct mrmgr_device_ops ops;
		uint64_t later_hook;
	} big;

	cr_assert_eq(mrmgr_device_register(NULL), EINVAL);
	cr_assert_eq(mrmgr_device_register(&toy_ops), EEXIST);
	o.comp_mask = 1;
	cr_assert_eq(mrmgr_device_register(&o), EINVAL, "unknown comp_mask");
	o = toy_ops;
	o.size = offsetof(struct mrmgr_device_ops, reg_mr);
	cr_assert_eq(mrmgr_device_register(&o), EINVAL, "too small");
	o = toy_ops;
	o.owns_context = NULL;
	cr_assert_eq(mrmgr_device_register(&o), EINVAL, "no owns_context");
	o = toy_ops;
	o.unimport_mr = NULL;
	cr_assert_eq(mrmgr_device_register(&o), EINVAL, "half the sharing hooks");
	/* A table from a later version: fine while its new hooks are unset. */
	memset(&big, 0, sizeof(big));
	big.ops = toy_ops;
	big.ops.size = sizeof(big);
	big.later_hook = 1;
	cr_assert_eq(mrmgr_device_register(&big.ops), EINVAL, "an unknown hook set");
	big.later_hook = 0;
	cr_assert_eq(mrmgr_device_register(&big.ops), 0);
	cr_assert_eq(mrmgr_device_unregister(&big.ops), 0);
	cr_assert_eq(mrmgr_device_unregister(&big.ops), ENOENT);
	cr_assert_eq(mrmgr_device_unregister(NULL), EINVAL);
	/* Room for a few providers, then ENOSPC (a bounded table). */
	static struct mrmgr_device_ops many[8];
	int ret = 0, n;

	for (n = 0; n < 8 && !ret; n++) {
		many[n] = toy_ops;
		ret = mrmgr_device_register(&many[n]);
	}
	cr_assert_eq(ret, ENOSPC, "after %d more", n);
}

/* Importer: a descriptor goes only to the provider that claims it. */
Test(device, descriptors_nobody_claims_are_refused)
{
	mrmgr_importer_t *imp = NULL;
	int p[2];
	char path[] = "/tmp/mrmgr-test-device-XXXXXX";
	int f = mkstemp(path);

	cr_assert_geq(f, 0);
	unlink(path);
	cr_assert_eq(ftruncate(f, 1 << 20), 0);
	cr_assert_eq(pipe(p), 0);
	/* A plain file, a pipe: no provider's; nothing imports them. */
	cr_assert_eq(mrmgr_importer_open(f, &imp), EOPNOTSUPP);
	cr_assert_eq(mrmgr_importer_open(p[0], &imp), EOPNOTSUPP);
	cr_assert_null(imp);
	cr_assert_geq(toy.claims, 2, "every provider was asked");
	/* The one the toy claims goes to the toy (whose ENOSYS is EOPNOTSUPP). */
	toy.claim_fd = p[1];
	cr_assert_eq(mrmgr_importer_open(p[1], &imp), EOPNOTSUPP);
	cr_assert_geq(fcntl(p[1], F_GETFD), 0, "a failed import leaves the fd");
	close(p[0]);
	close(p[1]);
	close(f);
}

/* A memfd that looks like the simulated HCA's but whose header is not:
 * the sim does not claim it (before the seam, any descriptor that was not
 * a character device went to the sim's importer). */
Test(device, a_forged_sim_table_is_not_claimed)
{
	struct ibv_context *ctx;
	mrmgr_importer_t *imp = NULL;
	struct stat st;
	uint32_t bad = 0;
	char *copy;
	int fd;

	cr_assert_eq(mrmgr_sim_open(NULL, &ctx), 0);
	cr_assert_eq(fstat(ctx->cmd_fd, &st), 0);
	copy = malloc((size_t)st.st_size);
	cr_assert_not_null(copy);
	cr_assert_eq(pread(ctx->cmd_fd, copy, (size_t)st.st_size, 0), st.st_size);
	fd = memfd_create("forged", MFD_ALLOW_SEALING);
	cr_assert_geq(fd, 0);
	cr_assert_eq(write(fd, copy, (size_t)st.st_size), st.st_size);
	cr_assert_eq(fcntl(fd, F_ADD_SEALS,
			   F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL), 0);
	/* The faithful copy is the sim's kind... */
	int dupfd = dup(fd);
	cr_assert_eq(mrmgr_importer_open(dupfd, &imp), 0);
	cr_assert_eq(mrmgr_importer_close(imp), 0);
	/* ...a bad magic is nobody's. */
	cr_assert_eq(pwrite(fd, &bad, sizeof(bad), 0), (ssize_t)sizeof(bad));
	imp = NULL;
	cr_assert_eq(mrmgr_importer_open(fd, &imp), EOPNOTSUPP);
	cr_assert_null(imp);
	close(fd);
	free(copy);
	cr_assert_eq(mrmgr_sim_close(ctx), 0);
}

/* ------------------------------------------------------------ fork status */

/* rdma-core before 35 has no ibv_is_fork_initialized(): the library then
 * looks it up in the loaded libibverbs (lib/os/compat.h). The lookup is
 * built everywhere; where the headers declare the call, it must find the
 * very function: after ibv_fork_init() (this test's process only) the
 * answer is no longer IBV_FORK_DISABLED, what a lookup that found nothing
 * would say. */
Test(device, fork_status_lookup_finds_libibverbs)
{
	int st;

	cr_assert_eq(ibv_fork_init(), 0);
	st = mrmgr__verbs_fork_status_lookup();
	cr_assert(st == IBV_FORK_DISABLED || st == IBV_FORK_ENABLED ||
		  st == IBV_FORK_UNNEEDED, "fork status %d", st);
#if HAVE_DECL_IBV_IS_FORK_INITIALIZED
	cr_assert_neq(st, IBV_FORK_DISABLED, "the lookup did not find it");
	cr_assert_eq(st, (int)ibv_is_fork_initialized());
	cr_assert_eq(mrmgr__verbs_fork_status(), st);
#else
	cr_assert_eq(mrmgr__verbs_fork_status(), st);
#endif
}
