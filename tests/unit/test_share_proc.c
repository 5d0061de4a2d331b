/*
 * Cross-process sharing through the UNIX-socket helper, between two
 * processes (fork + socketpair) with the simulated HCA in each: the owner
 * (this test's process) offers a cached region through a share server;
 * the importer (a child) imports it through a share client, writes the
 * owner's memory through the imported keys, is told when the owner
 * invalidates the region, keeps a working MR until it detaches (no early
 * dereg), sees its writes refused as stale once the owner's memory is
 * replaced, and detaches; the owner's MR is deregistered only then.
 * Also: a child that dies detaches; destroy with attached peers; a
 * declined offer; an rxe-like device.
 *
 * The child reports by exit status (the number of the failed step), never
 * through Criterion, which lives in the parent.
 *
 * SPDX-License-Identifier: MIT
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include "share_helpers.h"
#include "share_proto.h"

#define LEN (64 * KiB)
#define TMO 10000

/* ------------------------------------------------------------ plumbing */

struct link {
	int share[2]; /* [0] owner's end (the server), [1] the child's */
	int sync[2];  /* test's own messages */
};

static void link_open(struct link *l)
{
	cr_assert_eq(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, l->share), 0);
	cr_assert_eq(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, l->sync), 0);
}

static void say(int fd, char c)
{
	while (send(fd, &c, 1, MSG_NOSIGNAL) < 0 && errno == EINTR)
		;
}

/* The next test message, or 0 on timeout or hang-up. */
static char hear(int fd, int ms)
{
	struct pollfd p = { fd, POLLIN, 0 };
	char c = 0;

	if (poll(&p, 1, ms) <= 0 || recv(fd, &c, 1, 0) != 1)
		return 0;
	return c;
}

#define CHILD_CHECK(step, cond)                                             \
	do {                                                                \
		if (!(cond)) {                                              \
			fprintf(stderr, "child: step %d failed: %s\n", step, #cond); \
			_exit(step);                                        \
		}                                                           \
	} while (0)

static int child_write(mrmgr_import_t *im, uint64_t off, size_t len, int c)
{
	char src[4096];

	memset(src, c, sizeof(src));
	return mrmgr_sim_write(mrmgr_import_pd(im), mrmgr_import_rkey(im),
			       mrmgr_import_addr(im) + off, src,
			       len < sizeof(src) ? len : sizeof(src));
}

/* Drive the server until cond holds (evaluated after each progress). */
#define PROGRESS_UNTIL(srv, cond)                                           \
	do {                                                                \
		int64_t left_ = 200;                                        \
		while (!(cond) && left_-- > 0)                              \
			(void)mrmgr_share_server_progress(srv, 50);         \
		cr_assert(cond, "the server never saw: %s", #cond);         \
	} while (0)

struct owner {
	struct fixture f;
	mrmgr_share_server_t *srv;
	char *buf;
	uint32_t events[32];
	unsigned int nevents;
};

static void on_event(const struct mrmgr_share_event *ev, void *arg)
{
	struct owner *o = arg;

	if (o->nevents < 32)
		o->events[o->nevents++] = ev->type;
}

static int saw(const struct owner *o, uint32_t type)
{
	for (unsigned int i = 0; i < o->nevents; i++)
		if (o->events[i] == type)
			return 1;
	return 0;
}

static void owner_open(struct owner *o)
{
	struct mrmgr_cache_attr big = {
		.comp_mask = MRMGR_CACHE_ATTR_MAX_BYTES, .max_bytes = 1ull << 32,
	};
	struct mrmgr_share_server_attr sa = {
		.comp_mask = MRMGR_SHARE_SERVER_ATTR_EVENTS,
		.event_fn = on_event, .event_arg = o,
	};

	memset(o, 0, sizeof(*o));
	fx_open(&o->f, NULL, &big);
	cr_assert_eq(mrmgr_share_server_create(o->f.cache, NULL, &sa, &o->srv), 0);
	o->buf = map_rw(LEN, 'o');
}

static void owner_close(struct owner *o)
{
	if (o->srv)
		cr_assert_eq(mrmgr_share_server_destroy(o->srv, 0), 0);
	fx_close(&o->f);
	munmap(o->buf, LEN);
}

static int child_status(pid_t pid)
{
	int st = 0;

	cr_assert_eq(waitpid(pid, &st, 0), pid);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* ------------------------------------------------------------ round trip */

static void importer_round_trip(struct link *l)
{
	mrmgr_share_client_t *cli;
	struct mrmgr_share_event ev;
	int id = mrmgr_sim_page_identity_available();

	close(l->share[0]);
	close(l->sync[0]);
	CHILD_CHECK(1, mrmgr_share_client_create(l->share[1], TMO, &cli) == 0);
	CHILD_CHECK(2, mrmgr_share_client_wait(cli, TMO, &ev) == 0);
	CHILD_CHECK(3, ev.type == MRMGR_SHARE_EV_IMPORTED && ev.tag == 42);
	mrmgr_import_t *im = ev.import;
	CHILD_CHECK(4, mrmgr_import_length(im) == LEN);
	CHILD_CHECK(5, mrmgr_import_mr(im)->addr == NULL);
	/* Into the owner's memory, through the owner's keys. */
	CHILD_CHECK(6, child_write(im, 4096, 4096, 'W') == 0);
	char back[16];
	CHILD_CHECK(7, mrmgr_sim_read(mrmgr_import_pd(im), mrmgr_import_rkey(im),
				      mrmgr_import_addr(im) + 4096, back, 16) == 0);
	CHILD_CHECK(8, all_bytes(back, 16, 'W'));
	CHILD_CHECK(9, child_write(im, LEN - 8, 16, 'X') == ERANGE);
	say(l->sync[1], 'w');

	/* The owner invalidates: told, and the MR still works meanwhile. */
	CHILD_CHECK(10, mrmgr_share_client_wait(cli, TMO, &ev) == 0);
	CHILD_CHECK(11, ev.type == MRMGR_SHARE_EV_REVOKED && ev.import == im);
	CHILD_CHECK(12, mrmgr_import_revoked(im) == 1);
	CHILD_CHECK(13, child_write(im, 8192, 4096, 'R') == 0);
	say(l->sync[1], 'r');

	/* The owner replaced its memory: a write now would be lost. */
	CHILD_CHECK(14, hear(l->sync[1], TMO) == 'm');
	if (id)
		CHILD_CHECK(15, child_write(im, 0, 64, 'S') == ESTALE);
	CHILD_CHECK(16, mrmgr_share_client_release(cli, im) == 0);
	say(l->sync[1], 'd');
	CHILD_CHECK(17, mrmgr_share_client_destroy(cli) == 0);
	_exit(0);
}

Test(share_proc, export_import_round_trip_between_two_processes, .timeout = 60)
{
	struct owner o;
	struct link l;
	uint64_t peer, id;
	mrmgr_region_t *r;

	owner_open(&o);
	link_open(&l);
	pid_t pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0)
		importer_round_trip(&l);
	close(l.share[1]);
	close(l.sync[1]);
	cr_assert_eq(mrmgr_share_server_add_peer(o.srv, l.share[0], &peer), 0);
	cr_assert_eq(mrmgr_get(o.f.cache, o.buf, LEN, RW, &r), 0);
	cr_assert_eq(mrmgr_share_server_offer(o.srv, peer, r, 42, &id), 0);
	uint64_t live = sstats(o.f.ctx).live_mrs;
	mrmgr_put(r);
	PROGRESS_UNTIL(o.srv, mrmgr_share_server_importers(o.srv, id) == 1);
	cr_assert(saw(&o, MRMGR_SHARE_EV_ATTACH));
	struct mrmgr_stats s = cstats(o.f.cache);
	cr_assert_eq(s.share_importers, 1);
	cr_assert_eq(s.imports, 1);
	cr_assert_eq(s.share_exports, 1);

	cr_assert_eq(hear(l.sync[0], TMO), 'w', "child status %d", 0);
	cr_assert(all_bytes(o.buf + 4096, 4096, 'W'), "the importer's write landed here");
	cr_assert(all_bytes(o.buf, 4096, 'o'));

	/* Invalidate while imported: out of the cache, still registered. */
	cr_assert_eq(mrmgr_invalidate(o.f.cache, o.buf, LEN), 0);
	PROGRESS_UNTIL(o.srv, saw(&o, MRMGR_SHARE_EV_REVOKE_SENT));
	cr_assert_eq(hear(l.sync[0], TMO), 'r');
	cr_assert(all_bytes(o.buf + 8192, 4096, 'R'), "no early dereg: the write landed");
	cr_assert_eq(sstats(o.f.ctx).live_mrs, live);
	cr_assert_eq(mrmgr_get(o.f.cache, o.buf, LEN, RW, &r), 0);
	cr_assert_neq(mrmgr_region_rkey(r), 0);
	mrmgr_put(r); /* a fresh registration; the exported one is apart */

	remap_fixed(o.buf, LEN, 'n');
	cr_assert_eq(mrmgr_invalidate(o.f.cache, o.buf, LEN), 0);
	say(l.sync[0], 'm');
	cr_assert_eq(hear(l.sync[0], TMO), 'd');
	PROGRESS_UNTIL(o.srv, saw(&o, MRMGR_SHARE_EV_DETACH));
	cr_assert(all_bytes(o.buf, LEN, 'n'), "the stale write was refused");
	cr_assert_eq(sstats(o.f.ctx).live_mrs, 0, "deregistered once detached");
	cr_assert_eq(child_status(pid), 0);
	s = cstats(o.f.cache);
	cr_assert_eq(s.share_importers, 0);
	cr_assert_eq(s.share_exports, 0);
	cr_assert_eq(s.share_revocations, 1);
	cr_assert_eq(s.regions_in_use, 0);
	close(l.sync[0]);
	owner_close(&o);
}

/* ------------------------------------------------------------ hang-up */

static void importer_dies(struct link *l)
{
	mrmgr_share_client_t *cli;
	struct mrmgr_share_event ev;

	close(l->share[0]);
	close(l->sync[0]);
	CHILD_CHECK(1, mrmgr_share_client_create(l->share[1], TMO, &cli) == 0);
	CHILD_CHECK(2, mrmgr_share_client_wait(cli, TMO, &ev) == 0);
	CHILD_CHECK(3, ev.type == MRMGR_SHARE_EV_IMPORTED);
	say(l->sync[1], 'i');
	/* No detach, no goodbye. */
	hear(l->sync[1], TMO);
	_exit(0);
}

Test(share_proc, an_importer_that_dies_detaches, .timeout = 60)
{
	struct owner o;
	struct link l;
	uint64_t peer, id;
	mrmgr_region_t *r;

	owner_open(&o);
	link_open(&l);
	pid_t pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0)
		importer_dies(&l);
	close(l.share[1]);
	close(l.sync[1]);
	cr_assert_eq(mrmgr_share_server_add_peer(o.srv, l.share[0], &peer), 0);
	cr_assert_eq(mrmgr_get(o.f.cache, o.buf, LEN, RW, &r), 0);
	cr_assert_eq(mrmgr_share_server_offer(o.srv, peer, r, 0, &id), 0);
	mrmgr_put(r);
	cr_assert_eq(hear(l.sync[0], TMO), 'i');
	PROGRESS_UNTIL(o.srv, mrmgr_share_server_importers(o.srv, id) == 1);
	cr_assert_eq(mrmgr_cache_destroy(o.f.cache), EBUSY, "exported");
	kill(pid, SIGKILL);
	cr_assert_eq(child_status(pid), 128 + SIGKILL);
	PROGRESS_UNTIL(o.srv, saw(&o, MRMGR_SHARE_EV_PEER_GONE));
	cr_assert_eq(cstats(o.f.cache).share_exports, 0);
	cr_assert_eq(cstats(o.f.cache).regions_in_use, 0);
	cr_assert_eq(mrmgr_get(o.f.cache, o.buf, LEN, RW, &r), 0);
	cr_assert_eq(mrmgr_share_server_offer(o.srv, peer, r, 0, &id), ENOTCONN);
	mrmgr_put(r);
	close(l.sync[0]);
	owner_close(&o);
}

/* ------------------------------------------------------------ destroy */

static void importer_waits_for_the_owner(struct link *l)
{
	mrmgr_share_client_t *cli;
	struct mrmgr_share_event ev;

	close(l->share[0]);
	close(l->sync[0]);
	CHILD_CHECK(1, mrmgr_share_client_create(l->share[1], TMO, &cli) == 0);
	CHILD_CHECK(2, mrmgr_share_client_wait(cli, TMO, &ev) == 0);
	CHILD_CHECK(3, ev.type == MRMGR_SHARE_EV_IMPORTED);
	mrmgr_import_t *im = ev.import;
	CHILD_CHECK(4, child_write(im, 0, 16, 'a') == 0);
	say(l->sync[1], 'i');
	CHILD_CHECK(5, mrmgr_share_client_wait(cli, TMO, &ev) == 0);
	CHILD_CHECK(6, ev.type == MRMGR_SHARE_EV_OWNER_GONE);
	CHILD_CHECK(7, mrmgr_import_revoked(im) == 1);
	CHILD_CHECK(8, mrmgr_share_client_wait(cli, 0, &ev) == ECONNRESET);
	/* The owner deregistered by force: the import is dead. */
	CHILD_CHECK(9, hear(l->sync[1], TMO) == 'f');
	CHILD_CHECK(10, child_write(im, 0, 16, 'b') == ENOENT);
	CHILD_CHECK(11, mrmgr_share_client_destroy(cli) == 0);
	_exit(0);
}

Test(share_proc, destroy_with_an_attached_peer_is_ebusy_unless_forced, .timeout = 60)
{
	struct owner o;
	struct link l;
	uint64_t peer, id;
	mrmgr_region_t *r;

	owner_open(&o);
	link_open(&l);
	pid_t pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0)
		importer_waits_for_the_owner(&l);
	close(l.share[1]);
	close(l.sync[1]);
	cr_assert_eq(mrmgr_share_server_add_peer(o.srv, l.share[0], &peer), 0);
	cr_assert_eq(mrmgr_get(o.f.cache, o.buf, LEN, RW, &r), 0);
	cr_assert_eq(mrmgr_share_server_offer(o.srv, peer, r, 0, &id), 0);
	mrmgr_put(r);
	cr_assert_eq(hear(l.sync[0], TMO), 'i');
	PROGRESS_UNTIL(o.srv, mrmgr_share_server_importers(o.srv, id) == 1);
	capture_start();
	cr_assert_eq(mrmgr_share_server_destroy(o.srv, 0), EBUSY);
	cr_assert_not_null(strstr(captured.text, "is imported by peer"), "%s", captured.text);
	capture_stop();
	cr_assert_eq(mrmgr_share_server_destroy(o.srv, MRMGR_DESTROY_FORCE), 0);
	o.srv = NULL;
	cr_assert_eq(sstats(o.f.ctx).live_mrs, 1, "cached, no longer pinned");
	cr_assert_eq(mrmgr_invalidate(o.f.cache, o.buf, LEN), 0);
	cr_assert_eq(sstats(o.f.ctx).live_mrs, 0);
	say(l.sync[0], 'f');
	cr_assert_eq(child_status(pid), 0);
	close(l.sync[0]);
	owner_close(&o);
}

/* ------------------------------------------------------------ decline */

static void importer_declines(struct link *l)
{
	mrmgr_share_client_t *cli;
	struct mrmgr_share_event ev;
	struct mrmgr_sim_fault f = {
		.op = MRMGR_SIM_OP_IMPORT, .err = ENOMEM, .nth = 1, .count = 1,
	};

	close(l->share[0]);
	close(l->sync[0]);
	CHILD_CHECK(1, mrmgr_share_client_create(l->share[1], TMO, &cli) == 0);
	CHILD_CHECK(2, mrmgr_sim_inject_fault(mrmgr_importer_context(
					   mrmgr_share_client_importer(cli)), &f) == 0);
	CHILD_CHECK(3, mrmgr_share_client_wait(cli, TMO, &ev) == 0);
	CHILD_CHECK(4, ev.type == MRMGR_SHARE_EV_IMPORT_FAILED && ev.err == ENOMEM);
	CHILD_CHECK(5, mrmgr_share_client_wait(cli, 0, &ev) == ETIMEDOUT);
	CHILD_CHECK(6, mrmgr_share_client_destroy(cli) == 0);
	_exit(0);
}

Test(share_proc, a_declined_offer_releases_the_export, .timeout = 60)
{
	struct owner o;
	struct link l;
	uint64_t peer, id;
	mrmgr_region_t *r;

	owner_open(&o);
	link_open(&l);
	pid_t pid = fork();
	cr_assert_geq(pid, 0);
	if (pid == 0)
		importer_declines(&l);
	close(l.share[1]);
	close(l.sync[1]);
	cr_assert_eq(mrmgr_share_server_add_peer(o.srv, l.share[0], &peer), 0);
	cr_assert_eq(mrmgr_get(o.f.cache, o.buf, LEN, RW, &r), 0);
	cr_assert_eq(mrmgr_share_server_offer(o.srv, peer, r, 0, &id), 0);
	mrmgr_put(r);
	PROGRESS_UNTIL(o.srv, saw(&o, MRMGR_SHARE_EV_DECLINE));
	cr_assert_eq(cstats(o.f.cache).share_exports, 0);
	cr_assert_eq(cstats(o.f.cache).regions_in_use, 0);
	cr_assert_eq(child_status(pid), 0);
	PROGRESS_UNTIL(o.srv, saw(&o, MRMGR_SHARE_EV_PEER_GONE) || o.nevents >= 1);
	close(l.sync[0]);
	owner_close(&o);
}

/* ------------------------------------------------------------ one process */

/* The helper in one process (both ends here): withdraw and detach. */
Test(share_proc, withdraw_within_one_process)
{
	struct owner o;
	struct link l;
	uint64_t peer, id;
	mrmgr_region_t *r;
	mrmgr_share_client_t *cli;
	struct mrmgr_share_event ev;

	owner_open(&o);
	link_open(&l);
	cr_assert_eq(mrmgr_share_server_add_peer(o.srv, l.share[0], &peer), 0);
	cr_assert_eq(mrmgr_share_client_create(l.share[1], TMO, &cli), 0);
	cr_assert_geq(mrmgr_share_client_fd(cli), 0);
	cr_assert_eq(mrmgr_get(o.f.cache, o.buf, LEN, RW, &r), 0);
	cr_assert_eq(mrmgr_share_server_offer(o.srv, peer, r, 7, &id), 0);
	cr_assert_eq(mrmgr_share_client_wait(cli, TMO, &ev), 0);
	cr_assert_eq(ev.type, MRMGR_SHARE_EV_IMPORTED);
	cr_assert_eq(ev.export_id, id);
	cr_assert_eq(mrmgr_import_rkey(ev.import), mrmgr_region_rkey(r));
	mrmgr_import_t *im = ev.import;
	mrmgr_put(r);
	PROGRESS_UNTIL(o.srv, mrmgr_share_server_importers(o.srv, id) == 1);
	cr_assert_eq(mrmgr_share_server_withdraw(o.srv, id), 0);
	cr_assert_eq(mrmgr_share_server_withdraw(o.srv, 12345), ENOENT);
	cr_assert_eq(mrmgr_share_client_wait(cli, TMO, &ev), 0);
	cr_assert_eq(ev.type, MRMGR_SHARE_EV_REVOKED);
	cr_assert_eq(cstats(o.f.cache).share_exports, 1, "until the importer detaches");
	cr_assert_eq(mrmgr_share_client_release(cli, im), 0);
	PROGRESS_UNTIL(o.srv, cstats(o.f.cache).share_exports == 0);
	cr_assert_eq(cstats(o.f.cache).regions, 1, "still cached (not invalidated)");
	cr_assert_eq(mrmgr_share_client_wait(cli, 0, &ev), ETIMEDOUT);
	cr_assert_eq(mrmgr_share_client_destroy(cli), 0);
	PROGRESS_UNTIL(o.srv, saw(&o, MRMGR_SHARE_EV_DETACH));
	close(l.sync[0]);
	close(l.sync[1]);
	owner_close(&o);
}

Test(share_proc, the_rxe_personality_is_refused_at_both_ends)
{
	struct mrmgr_sim_attr rxe = {
		.comp_mask = MRMGR_SIM_ATTR_PERSONALITY, .personality = MRMGR_SIM_RXE,
	};
	struct fixture f;
	struct link l;
	mrmgr_share_server_t *srv;
	mrmgr_share_client_t *cli;
	struct mrmgr_export_desc hello = { .version = MRMGR_EXPORT_DESC_VERSION };

	capture_start();
	fx_open(&f, &rxe, NULL);
	cr_assert_eq(mrmgr_share_server_create(f.cache, NULL, NULL, &srv), EOPNOTSUPP);
	/* A greeting carrying an rxe device's descriptor: the client learns
	 * it cannot import. */
	link_open(&l);
	cr_assert_eq(mrmgr__share_send(l.share[0], MRMGR__MSG_HELLO, 0, 0, 0, &hello,
				       f.ctx->cmd_fd), 0);
	cr_assert_eq(mrmgr_share_client_create(l.share[1], TMO, &cli), EOPNOTSUPP);
	cr_assert_not_null(strstr(captured.text, "cannot import"), "%s", captured.text);
	/* Not a share server at all. */
	cr_assert_eq(mrmgr__share_send(l.share[0], MRMGR__MSG_OFFER, 0, 0, 0, NULL, -1), 0);
	cr_assert_eq(mrmgr_share_client_create(l.share[1], TMO, &cli), EPROTO);
	cr_assert_eq(mrmgr_share_client_create(l.share[1], 10, &cli), ETIMEDOUT);
	int stream[2];
	cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, stream), 0);
	cr_assert_eq(mrmgr_share_client_create(stream[0], 10, &cli), EINVAL);
	capture_stop();
	close(stream[0]);
	close(stream[1]);
	for (int i = 0; i < 2; i++) {
		close(l.share[i]);
		close(l.sync[i]);
	}
	fx_close(&f);
}
