/*
 * The importer against a forged owner: the simulated device's export
 * table is the owner's to write, and the owner may be hostile or dead.
 *   - an entry whose sequence count stays odd: ETIMEDOUT, with the
 *     importer's lock free meanwhile, directly and through the share
 *     client (which declines the offer);
 *   - a table that is not sealed against resizing (a truncation would
 *     SIGBUS the reader): refused; forged headers and entries: refused;
 *   - an owner that re-registers (grows) an MR in place under an import
 *     in another process: accesses past what the import recorded fail
 *     with ESTALE, nothing is read past its page array.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <poll.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include "share_helpers.h"
#include "share_proto.h"
#include "sim/sim_share.h"

#define LEN (64 * KiB)
#define TMO 10000

/* Receive one message as a client would; its descriptor closed. */
static void drain(int sock, struct mrmgr__share_msg *m)
{
	struct pollfd p = { sock, POLLIN, 0 };
	int fd = -1;

	cr_assert_eq(poll(&p, 1, TMO), 1);
	cr_assert_eq(mrmgr__share_recv(sock, m, &fd), 0);
	if (fd >= 0)
		close(fd);
}

/* ------------------------------------------------------------ forged tables */

struct owner {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	struct ibv_mr *mr, *mr2;
	char *buf;
};

static void owner_open(struct owner *o, const struct mrmgr_sim_attr *sa)
{
	memset(o, 0, sizeof(*o));
	cr_assert_eq(mrmgr_sim_open(sa, &o->ctx), 0);
	cr_assert_eq(mrmgr_sim_alloc_pd(o->ctx, &o->pd), 0);
	o->buf = map_rw(2 * LEN, 'o');
	cr_assert_eq(mrmgr_sim_reg_mr(o->pd, o->buf, LEN, RW, &o->mr), 0);
	cr_assert_eq(mrmgr_sim_reg_mr(o->pd, o->buf + LEN, LEN, RW, &o->mr2), 0);
}

static void owner_close(struct owner *o)
{
	cr_assert_eq(mrmgr_sim_dereg_mr(o->mr), 0);
	cr_assert_eq(mrmgr_sim_dereg_mr(o->mr2), 0);
	cr_assert_eq(mrmgr_sim_dealloc_pd(o->pd), 0);
	cr_assert_eq(mrmgr_sim_close(o->ctx), 0);
	munmap(o->buf, 2 * LEN);
}

/* A copy of o's export table in a memfd of ours (read-write), sealed with
 * seals. */
static int forge(const struct owner *o, int seals)
{
	int fd = memfd_create("forged", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	char *tmp = malloc(MRMGR__SIM_TBL_BYTES);

	cr_assert_geq(fd, 0);
	cr_assert_not_null(tmp);
	cr_assert_eq(pread(o->ctx->cmd_fd, tmp, MRMGR__SIM_TBL_BYTES, 0),
		     (ssize_t)MRMGR__SIM_TBL_BYTES);
	cr_assert_eq(write(fd, tmp, MRMGR__SIM_TBL_BYTES), (ssize_t)MRMGR__SIM_TBL_BYTES);
	free(tmp);
	if (seals)
		cr_assert_eq(fcntl(fd, F_ADD_SEALS, seals), 0);
	return fd;
}

/* The offset of the live MR entry with handle in a table. */
static off_t mr_entry(int fd, uint32_t handle)
{
	for (uint32_t i = 0; i < MRMGR__SIM_TBL_PROBES; i++) {
		uint32_t k = (handle + i) & (MRMGR__SIM_TBL_MRS - 1);
		off_t off = (off_t)(MRMGR__SIM_TBL_MRS_OFF + k * sizeof(struct mrmgr__sim_tbl_mr));
		struct mrmgr__sim_tbl_mr e;

		cr_assert_eq(pread(fd, &e, sizeof(e), off), (ssize_t)sizeof(e));
		if (e.state == MRMGR__SIM_ENTRY_LIVE && e.handle == handle)
			return off;
	}
	cr_assert_fail("no entry for MR %u", handle);
	return -1;
}

static off_t pd_entry(int fd, uint32_t handle)
{
	for (uint32_t i = 0; i < MRMGR__SIM_TBL_PROBES; i++) {
		uint32_t k = (handle + i) & (MRMGR__SIM_TBL_PDS - 1);
		off_t off = (off_t)(MRMGR__SIM_TBL_PDS_OFF + k * sizeof(struct mrmgr__sim_tbl_pd));
		struct mrmgr__sim_tbl_pd e;

		cr_assert_eq(pread(fd, &e, sizeof(e), off), (ssize_t)sizeof(e));
		if (e.state == MRMGR__SIM_ENTRY_LIVE && e.handle == handle)
			return off;
	}
	cr_assert_fail("no entry for PD %u", handle);
	return -1;
}

static void set_seq(int fd, off_t off, uint32_t seq)
{
	cr_assert_eq(pwrite(fd, &seq, sizeof(seq), off), (ssize_t)sizeof(seq));
}

static struct mrmgr_export_desc desc_of(const struct owner *o, const struct ibv_mr *mr)
{
	struct mrmgr_export_desc d = {
		.version = MRMGR_EXPORT_DESC_VERSION, .size = sizeof(d),
		.export_id = mr->handle, .owner_pid = (int32_t)getpid(),
		.pd_handle = o->pd->handle, .mr_handle = mr->handle,
		.lkey = mr->lkey, .rkey = mr->rkey, .access = RW,
		.addr = (uint64_t)(uintptr_t)mr->addr, .length = mr->length,
	};

	snprintf(d.device, sizeof(d.device), "%s", o->ctx->device->name);
	return d;
}

struct slow_import {
	mrmgr_importer_t *importer;
	struct mrmgr_export_desc d;
	int ret;
	int started, done;
};

static void *slow_import_thread(void *arg)
{
	struct slow_import *a = arg;
	mrmgr_import_t *im = NULL;

	__atomic_store_n(&a->started, 1, __ATOMIC_RELEASE);
	a->ret = mrmgr_import(a->importer, &a->d, sizeof(a->d), &im);
	if (!a->ret)
		mrmgr_import_release(im);
	__atomic_store_n(&a->done, 1, __ATOMIC_RELEASE);
	return NULL;
}

Test(share_forged, an_odd_sequence_count_times_out_and_holds_no_lock, .timeout = 60)
{
	const int all = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;
	struct owner o;
	mrmgr_importer_t *importer;
	mrmgr_import_t *im;
	struct slow_import a;
	pthread_t th;

	owner_open(&o, NULL);
	int fd = forge(&o, all);
	/* The owner "died" writing the first MR's entry. */
	set_seq(fd, mr_entry(fd, o.mr->handle), 3);
	cr_assert_eq(mrmgr_importer_open(dup(fd), &importer), 0);

	memset(&a, 0, sizeof(a));
	a.importer = importer;
	a.d = desc_of(&o, o.mr);
	int64_t t0 = ms_now();
	cr_assert_eq(pthread_create(&th, NULL, slow_import_thread, &a), 0);
	while (!__atomic_load_n(&a.started, __ATOMIC_ACQUIRE))
		sched_yield();
	/* Meanwhile the importer serves another import: no lock is held
	 * while the first waits for its entry. */
	struct mrmgr_export_desc d2 = desc_of(&o, o.mr2);
	cr_assert_eq(mrmgr_import(importer, &d2, sizeof(d2), &im), 0);
	cr_assert_eq(mrmgr_import_release(im), 0);
	cr_assert_eq(pthread_join(th, NULL), 0);
	cr_assert_eq(a.ret, ETIMEDOUT, "%s", strerror(a.ret));
	cr_log_info("busy MR entry: ETIMEDOUT after %lld ms",
		    (long long)(ms_now() - t0));

	/* A PD entry held odd: the same. */
	set_seq(fd, pd_entry(fd, o.pd->handle), 5);
	cr_assert_eq(mrmgr_import(importer, &d2, sizeof(d2), &im), ETIMEDOUT);
	cr_assert_eq(mrmgr_importer_close(importer), 0);
	close(fd);
	owner_close(&o);
}

/* The share client, offered an MR whose entry stays busy: the wait ends
 * (IMPORT_FAILED with ETIMEDOUT), the owner is told (DECLINE). */
Test(share_forged, a_busy_entry_through_the_share_client, .timeout = 60)
{
	const int all = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;
	struct mrmgr_export_desc hello = {
		.version = MRMGR_EXPORT_DESC_VERSION, .size = sizeof(hello),
	};
	struct mrmgr__share_msg m;
	mrmgr_share_client_t *cli;
	struct mrmgr_share_event ev;
	struct owner o;
	int sv[2];

	owner_open(&o, NULL);
	int before = count_fds();
	int fd = forge(&o, all);
	set_seq(fd, mr_entry(fd, o.mr->handle), 1);
	seqpair(sv);
	cr_assert_eq(mrmgr__share_send(sv[0], MRMGR__MSG_HELLO, 0, 0, 0, &hello, fd), 0);
	cr_assert_eq(mrmgr_share_client_create(sv[1], TMO, &cli), 0);
	struct mrmgr_export_desc d = desc_of(&o, o.mr);
	cr_assert_eq(mrmgr__share_send(sv[0], MRMGR__MSG_OFFER, 9, 1, 0, &d, -1), 0);
	int64_t t0 = ms_now();
	cr_assert_eq(mrmgr_share_client_wait(cli, 100, &ev), 0);
	int64_t took = ms_now() - t0;
	cr_assert_eq(ev.type, MRMGR_SHARE_EV_IMPORT_FAILED);
	cr_assert_eq(ev.err, ETIMEDOUT, "%s", strerror(ev.err));
	cr_log_info("client_wait(100 ms) on a busy entry returned after %lld ms",
		    (long long)took);
	drain(sv[0], &m);
	cr_assert_eq(m.type, MRMGR__MSG_DECLINE);
	cr_assert_eq(m.export_id, 9);
	cr_assert_eq(m.err, ETIMEDOUT);
	cr_assert_eq(mrmgr_share_client_wait(cli, 100, &ev), ETIMEDOUT);
	cr_assert_eq(mrmgr_share_client_destroy(cli), 0);
	close(sv[0]);
	close(fd);
	cr_assert_eq(count_fds(), before);
	owner_close(&o);
}

/* A table whose size could change under the reader is refused: a
 * truncation after mapping would SIGBUS the importer. */
Test(share_forged, a_table_not_sealed_against_resizing_is_refused)
{
	static const int seals[] = {
		0, F_SEAL_SHRINK, F_SEAL_SHRINK | F_SEAL_GROW, F_SEAL_GROW | F_SEAL_SEAL,
	};
	mrmgr_importer_t *importer;
	struct ibv_context *ictx;
	struct owner o;

	owner_open(&o, NULL);
	for (size_t i = 0; i < sizeof(seals) / sizeof(seals[0]); i++) {
		int fd = forge(&o, seals[i]);

		cr_assert_eq(mrmgr_sim_import_device(fd, &ictx), EPROTO,
			     "seals %#x", seals[i]);
		cr_assert_eq(mrmgr_importer_open(fd, &importer), EPROTO,
			     "seals %#x", seals[i]);
		cr_assert_geq(fcntl(fd, F_GETFD), 0, "a refused fd stays the caller's");
		close(fd);
	}
	/* Sealed as the owner seals it: taken, and it cannot shrink. */
	int fd = forge(&o, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
	cr_assert_eq(mrmgr_importer_open(dup(fd), &importer), 0);
	cr_assert_neq(ftruncate(fd, 4096), 0);
	cr_assert_eq(errno, EPERM);
	mrmgr_import_t *im;
	struct mrmgr_export_desc d = desc_of(&o, o.mr);
	cr_assert_eq(mrmgr_import(importer, &d, sizeof(d), &im), 0);
	cr_assert_eq(write_via(mrmgr_import_pd(im), mrmgr_import_rkey(im), o.buf, 16, 'i'), 0);
	cr_assert(all_bytes(o.buf, 16, 'i'));
	cr_assert_eq(mrmgr_import_release(im), 0);
	cr_assert_eq(mrmgr_importer_close(importer), 0);
	close(fd);
	/* The owner's own table is sealed so. */
	int s = fcntl(o.ctx->cmd_fd, F_GET_SEALS);
	cr_assert_eq(s & (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL),
		     F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
	/* Not a memfd at all, and no table header: no provider claims it. */
	char path[] = "/tmp/mrmgr-forged-XXXXXX";
	int tf = mkstemp(path);
	cr_assert_geq(tf, 0);
	unlink(path);
	cr_assert_eq(ftruncate(tf, (off_t)MRMGR__SIM_TBL_BYTES), 0);
	int ret = mrmgr_importer_open(tf, &importer);
	cr_assert_eq(ret, EOPNOTSUPP, "%s", strerror(ret));
	close(tf);
	owner_close(&o);
}

Test(share_forged, forged_headers_and_entries_are_refused)
{
	const int all = F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL;
	mrmgr_importer_t *importer;
	mrmgr_import_t *im;
	struct ibv_context *ictx;
	struct owner o;
	struct mrmgr__sim_tbl_hdr h;
	int fd;

	owner_open(&o, NULL);
	/* Header fields: each one wrong. */
	for (int which = 0; which < 5; which++) {
		fd = forge(&o, 0);
		cr_assert_eq(pread(fd, &h, sizeof(h), 0), (ssize_t)sizeof(h));
		if (which == 0)
			h.magic ^= 1;
		else if (which == 1)
			h.nmrs = 1u << 31;
		else if (which == 2)
			h.size = 1;
		else if (which == 3)
			h.personality = 77;
		else
			h.owner_pid = -1;
		memset(h.name, 'x', sizeof(h.name)); /* unterminated */
		cr_assert_eq(pwrite(fd, &h, sizeof(h), 0), (ssize_t)sizeof(h));
		cr_assert_eq(fcntl(fd, F_ADD_SEALS, all), 0);
		cr_assert_eq(mrmgr_sim_import_device(fd, &ictx), EINVAL, "field %d", which);
		close(fd);
	}
	/* An MR entry whose range wraps: not a registration. */
	fd = forge(&o, 0);
	off_t off = mr_entry(fd, o.mr->handle);
	struct mrmgr__sim_tbl_mr e;
	cr_assert_eq(pread(fd, &e, sizeof(e), off), (ssize_t)sizeof(e));
	e.addr = UINT64_MAX - 4095;
	e.length = 1ull << 40;
	cr_assert_eq(pwrite(fd, &e, sizeof(e), off), (ssize_t)sizeof(e));
	cr_assert_eq(fcntl(fd, F_ADD_SEALS, all), 0);
	cr_assert_eq(mrmgr_importer_open(fd, &importer), 0);
	struct mrmgr_export_desc d = desc_of(&o, o.mr);
	d.addr = e.addr;
	d.length = e.length;
	cr_assert_eq(mrmgr_import(importer, &d, sizeof(d), &im), EPROTO);
	cr_assert_eq(mrmgr_importer_close(importer), 0); /* closes fd */
	owner_close(&o);
}

/* ------------------------------------------------------------ rereg */

/* Drop CAP_SYS_ADMIN from this process's effective set: pagemap then
 * hides PFNs, and imports are unverified (as for any unprivileged
 * program). */
static void drop_sys_admin(void)
{
	struct __user_cap_header_struct hdr = { _LINUX_CAPABILITY_VERSION_3, 0 };
	struct __user_cap_data_struct d[2];

	if (syscall(SYS_capget, &hdr, d) != 0)
		return;
	d[CAP_SYS_ADMIN / 32].effective &= ~(1u << (CAP_SYS_ADMIN % 32));
	(void)syscall(SYS_capset, &hdr, d);
}

#define CHILD_CHECK(step, cond)                                             \
	do {                                                                \
		if (!(cond)) {                                              \
			fprintf(stderr, "child: step %d failed: %s\n", step, #cond); \
			_exit(step);                                        \
		}                                                           \
	} while (0)

static char hear(int fd)
{
	struct pollfd p = { fd, POLLIN, 0 };
	char c = 0;

	if (poll(&p, 1, TMO) <= 0 || read(fd, &c, 1) != 1)
		return 0;
	return c;
}

static void say(int fd, char c)
{
	while (write(fd, &c, 1) < 0 && errno == EINTR)
		;
}

/*
 * The owner registers 5 pages, an importer in a child process imports
 * them, the owner grows the MR in place to 8 (same keys: the key's slot
 * has room), and the child writes within and past what it imported.
 */
struct handles {
	uint32_t pd, mr, rkey;
	uint64_t base;
};

static void rereg_under_an_import(int verified)
{
	struct owner o;
	struct handles hd;
	int sync[2];
	int code;
	const size_t small = 5 * 4096, grown = 8 * 4096;

	if (verified && !mrmgr_sim_page_identity_available())
		cr_skip_test("page identity needs pagemap PFNs (CAP_SYS_ADMIN)");
	memset(&o, 0, sizeof(o));
	cr_assert_eq(mrmgr_sim_open(NULL, &o.ctx), 0);
	cr_assert_eq(mrmgr_sim_alloc_pd(o.ctx, &o.pd), 0);
	o.buf = map_rw(grown, 'o');
	cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sync), 0);
	int tfd = dup(o.ctx->cmd_fd);
	/* The child first: a registration before fork() would share its
	 * pages copy-on-write, and the owner's next write fault (the
	 * re-registration's) would move them. */
	pid_t pid = fork();

	cr_assert_geq(pid, 0);
	if (pid == 0) {
		struct ibv_context *ictx;
		struct ibv_pd *ipd;
		struct ibv_mr *imr;
		char src[4096];

		close(sync[0]);
		if (!verified)
			drop_sys_admin();
		CHILD_CHECK(1, read(sync[1], &hd, sizeof(hd)) == (ssize_t)sizeof(hd));
		CHILD_CHECK(2, mrmgr_sim_import_device(tfd, &ictx) == 0);
		CHILD_CHECK(3, mrmgr_sim_import_pd(ictx, hd.pd, &ipd) == 0);
		CHILD_CHECK(4, mrmgr_sim_import_mr(ipd, hd.mr, &imr) == 0);
		CHILD_CHECK(5, imr->length == small);
		struct mrmgr_sim_stats st;
		CHILD_CHECK(6, mrmgr_sim_query_stats(ictx, &st, sizeof(st)) == 0);
		if (!verified)
			CHILD_CHECK(7, st.unverified_pages == 5);
		say(sync[1], 'i');
		CHILD_CHECK(8, hear(sync[1]) == 'g');
		memset(src, 'c', sizeof(src));
		/* Within what was imported: reaches the owner. */
		CHILD_CHECK(9, mrmgr_sim_write(ipd, hd.rkey, hd.base, src, 64) == 0);
		/* Past it, inside the grown MR: refused, nothing read. */
		CHILD_CHECK(10, mrmgr_sim_write(ipd, hd.rkey, hd.base + small, src, 64) == ESTALE);
		CHILD_CHECK(11, mrmgr_sim_write(ipd, hd.rkey, hd.base + small - 32, src, 64) == ESTALE);
		CHILD_CHECK(12, mrmgr_sim_read(ipd, hd.rkey, hd.base + grown - 64, src, 64) == ESTALE);
		/* Past the grown MR: out of range, as before. */
		CHILD_CHECK(13, mrmgr_sim_write(ipd, hd.rkey, hd.base + grown - 8, src, 64) == ERANGE);
		CHILD_CHECK(14, mrmgr_sim_unimport_mr(imr) == 0);
		CHILD_CHECK(15, mrmgr_sim_unimport_pd(ipd) == 0);
		CHILD_CHECK(16, mrmgr_sim_close(ictx) == 0);
		say(sync[1], 'd');
		_exit(0);
	}
	close(sync[1]);
	close(tfd);
	cr_assert_eq(mrmgr_sim_reg_mr(o.pd, o.buf, small, RW, &o.mr), 0);
	hd = (struct handles){ o.pd->handle, o.mr->handle, o.mr->rkey,
			       (uint64_t)(uintptr_t)o.buf };
	cr_assert_eq(write(sync[0], &hd, sizeof(hd)), (ssize_t)sizeof(hd));
	cr_assert_eq(hear(sync[0]), 'i');
	cr_assert_eq(mrmgr_sim_rereg_mr(o.mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL,
					o.buf, grown, 0, &code), 0);
	cr_assert_eq(o.mr->rkey, hd.rkey, "grown in place with the same keys");
	say(sync[0], 'g');
	cr_assert_eq(hear(sync[0]), 'd');
	int st = 0;
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child: %s %d",
		  WIFEXITED(st) ? "step" : "signal",
		  WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
	cr_assert(all_bytes(o.buf, 64, 'c'), "the write within landed");
	cr_assert(all_bytes(o.buf + 64, grown - 64, 'o'), "nothing written past");
	close(sync[0]);
	cr_assert_eq(mrmgr_sim_dereg_mr(o.mr), 0);
	cr_assert_eq(mrmgr_sim_dealloc_pd(o.pd), 0);
	cr_assert_eq(mrmgr_sim_close(o.ctx), 0);
	munmap(o.buf, grown);
}

Test(share_forged, growth_in_place_under_an_unverified_import, .timeout = 60)
{
	rereg_under_an_import(0);
}

Test(share_forged, growth_in_place_under_a_verified_import, .timeout = 60)
{
	rereg_under_an_import(1);
}
