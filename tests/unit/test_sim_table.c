/*
 * The simulated HCA's cheap reg + dereg keeps what it models: the export
 * table written with stores reaches importers in two other processes
 * (live entries, dead ones after dereg, new ones after), a reader never
 * sees an entry half written while the owner rewrites it, a fork child's
 * registrations leave its parent's table alone, opening a device does not
 * take an address the program just unmapped; NO_PIN's one-step
 * registration keeps the error order (injected fault, limits, EFAULT);
 * faults disarm and re-arm; many devices are found and closed ones are
 * not; a deregistered MR stays refused after its object is kept.
 *
 * Children report by exit status (the number of the failed step), never
 * through Criterion, which lives in the parent.
 *
 * SPDX-License-Identifier: MIT
 */
#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include "share_helpers.h"
#include "sim/sim_share.h"

#define PG ((size_t)4096)
#define LEN (16 * PG)
#define TMO 10000

#define CHILD_CHECK(step, cond)                                             \
	do {                                                                \
		if (!(cond))                                                \
			_exit(step);                                        \
	} while (0)

static void say(int fd, const void *msg, size_t n)
{
	while (send(fd, msg, n, MSG_NOSIGNAL) < 0 && errno == EINTR)
		;
}

/* The next message (up to n bytes), its length, or 0 on timeout/hang-up. */
static size_t hear(int fd, void *msg, size_t n, int ms)
{
	struct pollfd p = { fd, POLLIN, 0 };
	ssize_t r;

	if (poll(&p, 1, ms) <= 0)
		return 0;
	r = recv(fd, msg, n, 0);
	return r > 0 ? (size_t)r : 0;
}

static int child_status(pid_t pid)
{
	int st = 0;

	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_assert(WIFEXITED(st), "child killed by signal %d", WTERMSIG(st));
	return WEXITSTATUS(st);
}

static struct ibv_context *open_dev(uint32_t flags, uint64_t memlock)
{
	struct mrmgr_sim_attr a = {
		.comp_mask = MRMGR_SIM_ATTR_FLAGS | MRMGR_SIM_ATTR_MEMLOCK,
		.flags = flags,
		.memlock_bytes = memlock,
	};
	struct ibv_context *ctx = NULL;

	cr_assert_eq(mrmgr_sim_open(&a, &ctx), 0);
	return ctx;
}

/* ------------------------------------------------- two importing processes */

struct new_mr {
	uint32_t handle, rkey;
};

/*
 * Child k: import the owner's MR a, write its page k through it, then
 * (told the owner deregistered a and registered b) find a dead and b
 * reachable, and write page k of b's buffer.
 */
static void importer(int sock, int cmd_fd, uint32_t pd_handle,
		     const struct ibv_mr *a, int k)
{
	struct ibv_context *ictx;
	struct ibv_pd *ipd;
	struct ibv_mr *ia, *ib;
	struct new_mr b;
	char page[PG];
	char go = 'w';

	memset(page, 'A' + k, sizeof(page));
	CHILD_CHECK(1, mrmgr_sim_import_device(dup(cmd_fd), &ictx) == 0);
	CHILD_CHECK(2, mrmgr_sim_import_pd(ictx, pd_handle, &ipd) == 0);
	CHILD_CHECK(3, mrmgr_sim_import_mr(ipd, a->handle, &ia) == 0);
	CHILD_CHECK(4, ia->lkey == a->lkey && ia->rkey == a->rkey &&
			       ia->length == a->length);
	CHILD_CHECK(5, mrmgr_sim_write(ipd, ia->rkey,
				       (uintptr_t)a->addr + (size_t)k * PG, page,
				       PG) == 0);
	say(sock, &go, 1);
	CHILD_CHECK(6, hear(sock, &b, sizeof(b), TMO) == sizeof(b));
	/* The owner's dereg killed the import: its entry is free. */
	CHILD_CHECK(7, mrmgr_sim_write(ipd, ia->rkey, (uintptr_t)a->addr, page,
				       1) == ENOENT);
	CHILD_CHECK(8, mrmgr_sim_import_mr(ipd, a->handle, &ib) == ENOENT);
	CHILD_CHECK(9, mrmgr_sim_import_mr(ipd, b.handle, &ib) == 0);
	CHILD_CHECK(10, ib->rkey == b.rkey);
	memset(page, 'a' + k, sizeof(page));
	/* b covers the same buffer, so a->addr is within it. */
	CHILD_CHECK(11, mrmgr_sim_write(ipd, ib->rkey,
					(uintptr_t)a->addr + (size_t)k * PG,
					page, PG) == 0);
	CHILD_CHECK(12, mrmgr_sim_unimport_mr(ia) == 0 &&
				mrmgr_sim_unimport_mr(ib) == 0);
	CHILD_CHECK(13, mrmgr_sim_unimport_pd(ipd) == 0);
	CHILD_CHECK(14, mrmgr_sim_close(ictx) == 0);
	_exit(0);
}

Test(sim_table, two_processes_import_and_see_dereg_and_new_mrs, .timeout = 60)
{
	struct ibv_context *ctx = open_dev(0, UINT64_MAX);
	struct ibv_pd *pd;
	struct ibv_mr *a, *b;
	char *buf = map_rw(LEN, 'o');
	int sv[2][2];
	pid_t pid[2];

	cr_assert_eq(mrmgr_sim_alloc_pd(ctx, &pd), 0);
	cr_assert_eq(mrmgr_sim_reg_mr(pd, buf, LEN, RW, &a), 0);
	for (int k = 0; k < 2; k++) {
		cr_assert_eq(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0,
					sv[k]), 0);
		pid[k] = fork();
		cr_assert_geq(pid[k], 0);
		if (pid[k] == 0) {
			close(sv[k][0]);
			importer(sv[k][1], ctx->cmd_fd, pd->handle, a, k);
		}
		close(sv[k][1]);
	}
	for (int k = 0; k < 2; k++) {
		char c = 0;

		cr_assert_eq(hear(sv[k][0], &c, 1, TMO), 1,
			     "child %d: status %d", k, child_status(pid[k]));
		cr_assert_eq(c, 'w');
		cr_assert(all_bytes(buf + (size_t)k * PG, PG, 'A' + k),
			  "child %d's write through its import landed", k);
	}
	cr_assert(all_bytes(buf + 2 * PG, LEN - 2 * PG, 'o'));

	cr_assert_eq(mrmgr_sim_dereg_mr(a), 0);
	cr_assert_eq(mrmgr_sim_reg_mr(pd, buf, LEN, RW, &b), 0);
	for (int k = 0; k < 2; k++) {
		struct new_mr m = { b->handle, b->rkey };

		say(sv[k][0], &m, sizeof(m));
	}
	for (int k = 0; k < 2; k++) {
		cr_assert_eq(child_status(pid[k]), 0, "child %d", k);
		cr_assert(all_bytes(buf + (size_t)k * PG, PG, 'a' + k),
			  "child %d's write through the new MR landed", k);
		close(sv[k][0]);
	}
	cr_assert_eq(mrmgr_sim_dereg_mr(b), 0);
	cr_assert_eq(mrmgr_sim_dealloc_pd(pd), 0);
	cr_assert_eq(mrmgr_sim_close(ctx), 0);
	munmap(buf, LEN);
}

/* ------------------------------------------------------ torn entries */

/*
 * One consistent copy of entry e, read as an importer reads (sequence
 * count even and unchanged around the copy). Tried until it is: the
 * writer may be descheduled in the middle of a rewrite for as long as
 * the machine's load says (a cap of a million tries failed the test
 * about 1 run in 40 with six copies side by side), so every 1,024
 * tries the reader yields; an entry left busy for good is a hang, which
 * the test's timeout reports.
 */
static int read_entry(const struct mrmgr__sim_tbl_mr *e, uint64_t *addr,
		      uint64_t *len, uint32_t *state)
{
	for (unsigned long tries = 1;; tries++) {
		if (!(tries & 1023))
			sched_yield();
		uint32_t s0 = __atomic_load_n(&e->seq, __ATOMIC_ACQUIRE);

		*state = __atomic_load_n(&e->state, __ATOMIC_RELAXED);
		*addr = __atomic_load_n(&e->addr, __ATOMIC_RELAXED);
		*len = __atomic_load_n(&e->length, __ATOMIC_RELAXED);
		__atomic_thread_fence(__ATOMIC_ACQUIRE);
		if (!(s0 & 1) && __atomic_load_n(&e->seq, __ATOMIC_RELAXED) == s0)
			return 1;
	}
}

/*
 * While the owner re-registers one MR back and forth between two
 * translations, a reader in another process copying its entry through
 * the read-only descriptor only ever sees one translation or the other,
 * never the address of one with the length of the other.
 */
Test(sim_table, a_reader_never_sees_an_entry_half_written, .timeout = 60)
{
	struct ibv_context *ctx = open_dev(MRMGR_SIM_FLAG_NO_PIN, UINT64_MAX);
	struct ibv_pd *pd;
	struct ibv_mr *mr;
	char *x = map_rw(2 * PG, 'x'), *y = map_rw(8 * PG, 'y');
	int sv[2];
	pid_t pid;

	cr_assert_eq(mrmgr_sim_alloc_pd(ctx, &pd), 0);
	cr_assert_eq(mrmgr_sim_reg_mr(pd, x, 2 * PG, RW, &mr), 0);
	cr_assert_eq(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv), 0);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		const char *map = mmap(NULL, MRMGR__SIM_TBL_BYTES, PROT_READ,
				       MAP_SHARED, ctx->cmd_fd, 0);
		const struct mrmgr__sim_tbl_mr *e = NULL;
		uint64_t addr, len;
		uint32_t state;
		char c = 'r';

		CHILD_CHECK(1, map != MAP_FAILED);
		for (uint32_t i = 0; i < MRMGR__SIM_TBL_MRS; i++) {
			const struct mrmgr__sim_tbl_mr *t = mrmgr__sim_tbl_mrs(map) + i;

			if (t->state == MRMGR__SIM_ENTRY_LIVE &&
			    t->handle == mr->handle)
				e = t;
		}
		CHILD_CHECK(2, e != NULL);
		say(sv[1], &c, 1);
		/* Tight loops between looks at the socket: the window is a
		 * few stores wide. */
		while (!hear(sv[1], &c, 1, 0)) {
			for (int i = 0; i < 4096; i++) {
				CHILD_CHECK(3, read_entry(e, &addr, &len, &state));
				CHILD_CHECK(4, state == MRMGR__SIM_ENTRY_LIVE);
				CHILD_CHECK(5, (addr == (uintptr_t)x && len == 2 * PG) ||
						       (addr == (uintptr_t)y && len == 8 * PG));
			}
		}
		_exit(0);
	}
	close(sv[1]);
	char c = 0;
	int st;

	cr_assert_eq(hear(sv[0], &c, 1, TMO), 1, "child status %d", child_status(pid));
	for (int i = 0; i < 20000; i++) {
		int odd = i & 1;

		cr_assert_eq(mrmgr_sim_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION,
						NULL, odd ? x : y,
						odd ? 2 * PG : 8 * PG, 0, NULL),
			     0);
	}
	say(sv[0], "s", 1);
	st = child_status(pid);
	cr_assert_eq(st, 0, "the reader failed its step %d", st);
	close(sv[0]);
	cr_assert_eq(mrmgr_sim_dereg_mr(mr), 0);
	cr_assert_eq(mrmgr_sim_dealloc_pd(pd), 0);
	cr_assert_eq(mrmgr_sim_close(ctx), 0);
	munmap(x, 2 * PG);
	munmap(y, 8 * PG);
}

/* ------------------------------------------------------------- fork */

/*
 * A fork child registers through its parent's device and closes it: the
 * parent's table (which the child does not even map) is untouched, and
 * the parent's own MR is still importable afterwards.
 */
Test(sim_table, a_fork_childs_registrations_leave_the_parents_table_alone)
{
	struct ibv_context *ctx = open_dev(0, UINT64_MAX), *ictx;
	struct ibv_pd *pd, *ipd;
	struct ibv_mr *mr, *imr;
	char *buf = map_rw(LEN, 'p');
	pid_t pid;

	cr_assert_eq(mrmgr_sim_alloc_pd(ctx, &pd), 0);
	cr_assert_eq(mrmgr_sim_reg_mr(pd, buf, LEN, RW, &mr), 0);
	pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0) {
		struct ibv_mr *c[64];

		/* Handles after the parent's: they would land next to its
		 * entry if the child wrote the table. */
		for (int i = 0; i < 64; i++)
			CHILD_CHECK(1, mrmgr_sim_reg_mr(pd, buf, PG, RW, &c[i]) == 0);
		for (int i = 0; i < 64; i++)
			CHILD_CHECK(2, mrmgr_sim_dereg_mr(c[i]) == 0);
		CHILD_CHECK(3, mrmgr_sim_dereg_mr(mr) == 0);
		CHILD_CHECK(4, mrmgr_sim_dealloc_pd(pd) == 0);
		CHILD_CHECK(5, mrmgr_sim_close(ctx) == 0);
		_exit(0);
	}
	cr_assert_eq(child_status(pid), 0);
	cr_assert_eq(mrmgr_sim_import_device(dup(ctx->cmd_fd), &ictx), 0);
	cr_assert_eq(mrmgr_sim_import_pd(ictx, pd->handle, &ipd), 0);
	cr_assert_eq(mrmgr_sim_import_mr(ipd, mr->handle, &imr), 0,
		     "the child's dereg of the inherited MR did not free "
		     "the parent's entry");
	cr_assert_eq(imr->rkey, mr->rkey);
	for (uint32_t h = mr->handle + 1; h <= mr->handle + 64; h++) {
		struct ibv_mr *none;

		cr_assert_eq(mrmgr_sim_import_mr(ipd, h, &none), ENOENT,
			     "handle %u was published by the child", h);
	}
	cr_assert_eq(mrmgr_sim_unimport_mr(imr), 0);
	cr_assert_eq(mrmgr_sim_unimport_pd(ipd), 0);
	cr_assert_eq(mrmgr_sim_close(ictx), 0);
	cr_assert_eq(mrmgr_sim_dereg_mr(mr), 0);
	cr_assert_eq(mrmgr_sim_dealloc_pd(pd), 0);
	cr_assert_eq(mrmgr_sim_close(ctx), 0);
	munmap(buf, LEN);
}

/* ------------------------------------------------------ address space */

/*
 * The stale-registration tests unmap a buffer and map the same address
 * again; a device opened in between (its table is a mapping) must not
 * take that hole.
 */
Test(sim_table, opening_a_device_does_not_take_a_just_unmapped_address)
{
	size_t len = 4 * MiB;
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0), *q;
	struct ibv_context *ctx[4];

	cr_assert_neq(p, MAP_FAILED);
	cr_assert_eq(munmap(p, len), 0);
	for (int i = 0; i < 4; i++)
		ctx[i] = open_dev(0, UINT64_MAX);
	q = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
		 -1, 0);
	cr_assert_eq(q, p, "the devices' tables took the hole (%p, now %p)", p, q);
	munmap(q, len);
	for (int i = 0; i < 4; i++)
		cr_assert_eq(mrmgr_sim_close(ctx[i]), 0);
}

/* ------------------------------------------------------ NO_PIN, one step */

static int fail_pred(void *arg, void *addr, size_t length, unsigned int access)
{
	(void)access;
	(void)length;
	return addr == arg;
}

Test(sim_table, no_pin_keeps_the_error_order)
{
	struct ibv_context *ctx = open_dev(MRMGR_SIM_FLAG_NO_PIN, 4 * PG);
	struct ibv_pd *pd;
	char *buf = map_rw(8 * PG, 0);
	struct mrmgr_sim_fault f = {
		.op = MRMGR_SIM_OP_REG, .err = EIO, .nth = 1, .count = 0,
		.pred = fail_pred,
	};
	struct mrmgr_sim_stats s;

	cr_assert_eq(mrmgr_sim_alloc_pd(ctx, &pd), 0);
	cr_assert_eq(munmap(buf + 4 * PG, 4 * PG), 0);
	cr_assert_eq(reg_err(pd, buf, 4 * PG, RW), 0);
	cr_assert_eq(reg_err(pd, buf + 4 * PG, PG, RW), EFAULT, "unmapped");
	cr_assert_eq(reg_err(pd, buf + 2 * PG, 3 * PG, RW), EFAULT, "partly unmapped");
	cr_assert_eq(reg_err(pd, buf + 4 * PG, 8 * PG, RW), ENOMEM,
		     "over the budget comes before unmapped");
	f.pred_arg = buf + 4 * PG;
	cr_assert_eq(mrmgr_sim_inject_fault(ctx, &f), 0);
	cr_assert_eq(reg_err(pd, buf + 4 * PG, PG, RW), EIO,
		     "an injected fault comes first");
	cr_assert_eq(reg_err(pd, buf, PG, RW), 0, "the predicate spares others");
	s = sstats(ctx);
	cr_assert_eq(s.reg_failures, 4);
	cr_assert_eq(s.faults_injected, 1);
	cr_assert_eq(s.pinned_bytes, 0, "failures give the budget back");
	cr_assert_eq(s.peak_pinned_bytes, 4 * PG);
	cr_assert_eq(s.registrations, 2);
	cr_assert_eq(s.live_mrs, 0);
	cr_assert_eq(mrmgr_sim_clear_faults(ctx), 0);
	cr_assert_eq(mrmgr_sim_dealloc_pd(pd), 0);
	cr_assert_eq(mrmgr_sim_close(ctx), 0);
	munmap(buf, 4 * PG);
}

/* A fault that fired its count disarms, and the next one armed fires;
 * clearing disarms everything. */
Test(sim_table, faults_disarm_and_rearm)
{
	struct ibv_context *ctx = open_dev(MRMGR_SIM_FLAG_NO_PIN, UINT64_MAX);
	struct ibv_pd *pd;
	char *buf = map_rw(PG, 0);
	struct mrmgr_sim_fault f = {
		.op = MRMGR_SIM_OP_REG, .err = EIO, .nth = 1, .count = 1,
	};

	cr_assert_eq(mrmgr_sim_alloc_pd(ctx, &pd), 0);
	cr_assert_eq(mrmgr_sim_inject_fault(ctx, &f), 0);
	cr_assert_eq(reg_err(pd, buf, PG, RW), EIO);
	cr_assert_eq(reg_err(pd, buf, PG, RW), 0, "disarmed after its count");
	f.err = EAGAIN;
	f.nth = 2;
	cr_assert_eq(mrmgr_sim_inject_fault(ctx, &f), 0);
	cr_assert_eq(reg_err(pd, buf, PG, RW), 0);
	cr_assert_eq(reg_err(pd, buf, PG, RW), EAGAIN, "re-armed: the 2nd fails");
	f.count = 0;
	f.nth = 1;
	f.op = MRMGR_SIM_OP_DEREG;
	cr_assert_eq(mrmgr_sim_inject_fault(ctx, &f), 0);
	cr_assert_eq(mrmgr_sim_clear_faults(ctx), 0);
	cr_assert_eq(reg_err(pd, buf, PG, RW), 0, "cleared");
	cr_assert_eq(sstats(ctx).faults_injected, 2);
	cr_assert_eq(mrmgr_sim_dealloc_pd(pd), 0);
	cr_assert_eq(mrmgr_sim_close(ctx), 0);
	munmap(buf, PG);
}

/* ------------------------------------------------------ the registry */

Test(sim_table, many_devices_are_found_and_closed_ones_are_not)
{
	enum { N = 40 };
	struct ibv_context *ctx[N];
	struct ibv_pd *pd;

	for (int i = 0; i < N; i++) {
		cr_assert_eq(mrmgr_sim_open(NULL, &ctx[i]), 0);
	}
	for (int i = 0; i < N; i += 2)
		cr_assert_eq(mrmgr_sim_close(ctx[i]), 0);
	for (int i = 0; i < N; i++) {
		int ret = mrmgr_sim_alloc_pd(ctx[i], &pd);

		if (i & 1) {
			cr_assert_eq(ret, 0, "device %d is open", i);
			cr_assert_eq(mrmgr_sim_dealloc_pd(pd), 0);
		} else {
			/* Only the pointer is compared: nothing is read. */
			cr_assert_eq(ret, EINVAL, "device %d was closed", i);
		}
	}
	for (int i = 1; i < N; i += 2)
		cr_assert_eq(mrmgr_sim_close(ctx[i]), 0);
	for (int i = 0; i < N; i++) {
		cr_assert_eq(mrmgr_sim_open(NULL, &ctx[i]), 0);
		cr_assert_eq(mrmgr_sim_alloc_pd(ctx[i], &pd), 0);
		cr_assert_eq(mrmgr_sim_dealloc_pd(pd), 0);
	}
	for (int i = N - 1; i >= 0; i--)
		cr_assert_eq(mrmgr_sim_close(ctx[i]), 0);
}

/* ------------------------------------------------------ the MR object */

Test(sim_table, a_deregistered_mr_stays_refused_and_the_next_is_fresh)
{
	struct ibv_context *ctx = open_dev(0, UINT64_MAX);
	struct ibv_pd *pd;
	struct ibv_mr *a, *b;
	char *buf = map_rw(2 * PG, 'z');
	char got[4];
	uint32_t rkey;

	cr_assert_eq(mrmgr_sim_alloc_pd(ctx, &pd), 0);
	cr_assert_eq(mrmgr_sim_reg_mr(pd, buf, 2 * PG, RW, &a), 0);
	rkey = a->rkey;
	cr_assert_eq(mrmgr_sim_dereg_mr(a), 0);
	/* The device keeps a's object for its next registration: a second
	 * dereg reads it and is refused. */
	cr_assert_eq(mrmgr_sim_dereg_mr(a), EINVAL, "a second dereg is refused");
	cr_assert_eq(mrmgr_sim_read(pd, rkey, (uintptr_t)buf, got, 4), ENOENT);
	cr_assert_eq(mrmgr_sim_reg_mr(pd, buf + PG, PG, IBV_ACCESS_REMOTE_READ, &b), 0);
	cr_assert_neq(b->rkey, rkey, "new keys");
	cr_assert_eq(b->addr, buf + PG);
	cr_assert_eq(b->length, PG);
	cr_assert_eq(mrmgr_sim_read(pd, b->rkey, (uintptr_t)buf + PG, got, 4), 0);
	cr_assert_eq(mrmgr_sim_write(pd, b->rkey, (uintptr_t)buf + PG, got, 4),
		     EACCES, "the new MR's access, not the old one's");
	cr_assert_eq(mrmgr_sim_read(pd, b->rkey, (uintptr_t)buf, got, 4), ERANGE,
		     "the new MR's bounds");
	cr_assert_eq(sstats(ctx).live_mrs, 1);
	cr_assert_eq(sstats(ctx).pinned_bytes, PG);
	cr_assert_eq(mrmgr_sim_dereg_mr(b), 0);
	cr_assert_eq(mrmgr_sim_dealloc_pd(pd), 0);
	cr_assert_eq(mrmgr_sim_close(ctx), 0);
	munmap(buf, 2 * PG);
}
