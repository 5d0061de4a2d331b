/*
 * The sharing helper against a hostile peer on its socket: this test plays
 * the other end and checks that the library's side never leaks a
 * descriptor and answers with an errno: descriptors sent with empty,
 * short, oversized, malformed or valid messages, one, several, split over
 * two control messages, or more than the receiver takes (MSG_CTRUNC), to a
 * server and to a client; valid ATTACH/DETACH with stray descriptors; an
 * rxe device's descriptor in a greeting, with debug logging on.
 * Descriptors are counted in /proc/self/fd before and after.
 * (Forged export tables: test_share_forged.c.)
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>

#include "share_helpers.h"
#include "share_proto.h"

#define LEN (64 * KiB)
#define TMO 10000

static void open_nulls(int *fds, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		fds[i] = open("/dev/null", O_RDONLY | O_CLOEXEC);
		cr_assert_geq(fds[i], 0);
	}
}

static void close_all(int *fds, size_t n)
{
	for (size_t i = 0; i < n; i++)
		close(fds[i]);
}

/* ------------------------------------------------------------ messages */

enum shape {
	EMPTY,     /* a zero-length datagram */
	SHORT,     /* 10 bytes */
	LONG,      /* a message and 64 bytes more (MSG_TRUNC) */
	BAD_MAGIC, /* the right size, not this protocol */
	VALID,     /* a well-formed message of the case's type */
};

struct hostile_case {
	enum shape shape;
	uint16_t type;
	size_t nfds;
	int split;
};

static void build(struct mrmgr__share_msg *m, uint16_t type, uint64_t id)
{
	memset(m, 0, sizeof(*m));
	m->magic = MRMGR__SHARE_MAGIC;
	m->version = MRMGR__SHARE_PROTO;
	m->type = type;
	m->export_id = id;
	m->pid = (int32_t)getpid();
}

/* Send c's message (with c->nfds descriptors of our own, closed here). */
static void send_case(int sock, const struct hostile_case *c,
		      const struct mrmgr__share_msg *valid)
{
	char big[sizeof(struct mrmgr__share_msg) + 64];
	struct mrmgr__share_msg m = *valid;
	int fds[64];
	size_t len = sizeof(m);
	const void *p = &m;

	memset(big, 0x5a, sizeof(big));
	switch (c->shape) {
	case EMPTY:
		len = 0;
		break;
	case SHORT:
		len = 10;
		break;
	case LONG:
		memcpy(big, &m, sizeof(m));
		p = big;
		len = sizeof(big);
		break;
	case BAD_MAGIC:
		m.magic = 0xdeadbeef;
		break;
	case VALID:
		break;
	}
	open_nulls(fds, c->nfds);
	cr_assert_eq(raw_send(sock, p, len, fds, c->nfds, c->split), (ssize_t)len,
		     "sendmsg: %s", strerror(errno));
	close_all(fds, c->nfds);
}

static const struct hostile_case cases[] = {
	{ EMPTY, 0, 1, 0 },
	{ EMPTY, 0, 3, 1 },
	{ SHORT, 0, 1, 0 },
	{ SHORT, 0, 2, 0 },
	{ LONG, 0, 1, 0 },
	{ LONG, 0, 5, 1 },
	{ BAD_MAGIC, 0, 1, 0 },
	{ BAD_MAGIC, 0, 4, 0 },
	{ VALID, 0, 2, 0 },        /* the type is the case's: see users */
	{ VALID, 0, 3, 1 },
	{ VALID, 0, 40, 0 },       /* more than the receiver takes: CTRUNC */
	{ VALID, 0, 1, 0 },
	{ VALID, 0, 0, 0 },
};
#define NCASES (sizeof(cases) / sizeof(cases[0]))

/* ------------------------------------------------------------ server */

struct srv_fx {
	struct fixture f;
	mrmgr_share_server_t *srv;
	char *buf;
};

static void srv_open(struct srv_fx *x)
{
	memset(x, 0, sizeof(*x));
	fx_open(&x->f, NULL, NULL);
	cr_assert_eq(mrmgr_share_server_create(x->f.cache, NULL, NULL, &x->srv), 0);
	x->buf = map_rw(LEN, 's');
	/* Warm: the region cached (its page-identity pipe open) and the
	 * library's own descriptors opened, so counts compare like with
	 * like. */
	mrmgr_region_t *r;
	cr_assert_eq(mrmgr_get(x->f.cache, x->buf, LEN, RW, &r), 0);
	mrmgr_put(r);
}

static void srv_close(struct srv_fx *x)
{
	cr_assert_eq(mrmgr_share_server_destroy(x->srv, 0), 0);
	cr_assert_eq(mrmgr_invalidate(x->f.cache, x->buf, LEN), 0);
	fx_close(&x->f);
	munmap(x->buf, LEN);
}

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

/* One hostile message of each case's shape and type to a fresh peer of
 * the server; every descriptor that reached the server is closed. */
static void server_case(struct srv_fx *x, const struct hostile_case *c,
			uint16_t type, int offer)
{
	struct hostile_case cc = *c;
	struct mrmgr__share_msg m, valid;
	mrmgr_region_t *r;
	uint64_t peer, id = 777;
	int sv[2];
	int before = count_fds();

	seqpair(sv);
	cr_assert_eq(mrmgr_share_server_add_peer(x->srv, sv[0], &peer), 0);
	drain(sv[1], &m);
	cr_assert_eq(m.type, MRMGR__MSG_HELLO);
	if (offer) {
		cr_assert_eq(mrmgr_get(x->f.cache, x->buf, LEN, RW, &r), 0);
		cr_assert_eq(mrmgr_share_server_offer(x->srv, peer, r, 0, &id), 0);
		mrmgr_put(r);
		drain(sv[1], &m);
		cr_assert_eq(m.type, MRMGR__MSG_OFFER);
	}
	cc.type = type;
	build(&valid, type, id);
	send_case(sv[1], &cc, &valid);
	for (int i = 0; i < 3; i++)
		(void)mrmgr_share_server_progress(x->srv, 20);
	if (c->shape == VALID && c->nfds <= 1 && type == MRMGR__MSG_ATTACH && offer)
		cr_assert_eq(mrmgr_share_server_importers(x->srv, id), 1,
			     "a valid ATTACH is taken");
	/* The peer hangs up: the server lets go of everything of it. */
	close(sv[1]);
	for (int i = 0; i < 3; i++)
		(void)mrmgr_share_server_progress(x->srv, 20);
	cr_assert_eq(cstats(x->f.cache).share_exports, 0);
	cr_assert_eq(count_fds(), before,
		     "shape %d type %u with %zu descriptors%s: %d leaked",
		     c->shape, type, c->nfds, c->split ? " (split)" : "",
		     count_fds() - before);
}

Test(share_hostile, the_server_closes_every_descriptor_a_peer_sends)
{
	static const uint16_t types[] = {
		MRMGR__MSG_ATTACH, MRMGR__MSG_DETACH, MRMGR__MSG_DECLINE,
		MRMGR__MSG_HELLO, 999,
	};
	struct srv_fx x;

	srv_open(&x);
	for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); t++)
		for (size_t i = 0; i < NCASES; i++)
			for (int offer = 0; offer < 2; offer++)
				server_case(&x, &cases[i], types[t], offer);
	srv_close(&x);
}

/* A valid ATTACH then DETACH, each with a descriptor the server did not
 * ask for: both taken, the descriptors closed, the export released. */
Test(share_hostile, valid_attach_and_detach_with_descriptors_leak_nothing)
{
	struct srv_fx x;
	struct mrmgr__share_msg m, v;
	mrmgr_region_t *r;
	uint64_t peer, id;
	int sv[2], fd;

	srv_open(&x);
	int before = count_fds();
	seqpair(sv);
	cr_assert_eq(mrmgr_share_server_add_peer(x.srv, sv[0], &peer), 0);
	drain(sv[1], &m);
	cr_assert_eq(mrmgr_get(x.f.cache, x.buf, LEN, RW, &r), 0);
	cr_assert_eq(mrmgr_share_server_offer(x.srv, peer, r, 0, &id), 0);
	mrmgr_put(r);
	drain(sv[1], &m);
	int mid = count_fds();
	build(&v, MRMGR__MSG_ATTACH, id);
	open_nulls(&fd, 1);
	cr_assert_eq(raw_send(sv[1], &v, sizeof(v), &fd, 1, 0), (ssize_t)sizeof(v));
	close(fd);
	for (int i = 0; i < 5 && !mrmgr_share_server_importers(x.srv, id); i++)
		(void)mrmgr_share_server_progress(x.srv, 20);
	cr_assert_eq(mrmgr_share_server_importers(x.srv, id), 1);
	cr_assert_eq(count_fds(), mid, "the ATTACH's descriptor was kept");
	build(&v, MRMGR__MSG_DETACH, id);
	open_nulls(&fd, 1);
	cr_assert_eq(raw_send(sv[1], &v, sizeof(v), &fd, 1, 0), (ssize_t)sizeof(v));
	close(fd);
	for (int i = 0; i < 5 && cstats(x.f.cache).share_exports; i++)
		(void)mrmgr_share_server_progress(x.srv, 20);
	cr_assert_eq(cstats(x.f.cache).share_exports, 0, "detached");
	cr_assert_eq(count_fds(), mid, "the DETACH's descriptor was kept");
	close(sv[1]);
	(void)mrmgr_share_server_progress(x.srv, 20);
	cr_assert_eq(count_fds(), before);
	srv_close(&x);
}

/* ------------------------------------------------------------ client */

/* A greeting of each hostile shape: client_create fails, nothing kept. */
Test(share_hostile, client_create_closes_every_descriptor_a_peer_sends)
{
	static const uint16_t types[] = { MRMGR__MSG_HELLO, MRMGR__MSG_OFFER, 999 };
	mrmgr_share_client_t *cli;
	struct mrmgr__share_msg valid;
	struct fixture f;

	fx_open(&f, NULL, NULL);
	for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); t++) {
		for (size_t i = 0; i < NCASES; i++) {
			struct hostile_case c = cases[i];
			int before = count_fds(), sv[2], ret;

			seqpair(sv);
			build(&valid, types[t], 0);
			send_case(sv[0], &c, &valid);
			ret = mrmgr_share_client_create(sv[1], 200, &cli);
			if (ret == 0) { /* never: no case is a usable greeting */
				mrmgr_share_client_destroy(cli);
				cr_assert_fail("shape %d type %u accepted", c.shape,
					       types[t]);
			}
			/* EPROTO mostly; /dev/null in a well-formed HELLO
			 * gets as far as the verbs importer, which refuses. */
			cr_assert_neq(ret, ETIMEDOUT, "shape %d type %u",
				      c.shape, types[t]);
			close(sv[0]);
			close(sv[1]);
			cr_assert_eq(count_fds(), before,
				     "shape %d type %u with %zu descriptors: %d leaked",
				     c.shape, types[t], c.nfds, count_fds() - before);
		}
	}
	fx_close(&f);
}

/* After a good greeting: every hostile message to client_wait. */
Test(share_hostile, client_wait_closes_every_descriptor_a_peer_sends)
{
	static const uint16_t types[] = {
		MRMGR__MSG_OFFER, MRMGR__MSG_REVOKE, MRMGR__MSG_BYE,
		MRMGR__MSG_HELLO, 999,
	};
	struct mrmgr_export_desc hello = {
		.version = MRMGR_EXPORT_DESC_VERSION, .size = sizeof(hello),
	};
	mrmgr_share_client_t *cli;
	struct mrmgr_share_event ev;
	struct mrmgr__share_msg valid;
	struct fixture f;

	fx_open(&f, NULL, NULL);
	snprintf(hello.device, sizeof(hello.device), "%s", f.ctx->device->name);
	for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); t++) {
		for (size_t i = 0; i < NCASES; i++) {
			struct hostile_case c = cases[i];
			int before = count_fds(), sv[2];

			seqpair(sv);
			cr_assert_eq(mrmgr__share_send(sv[0], MRMGR__MSG_HELLO, 0, 0,
						       0, &hello, f.ctx->cmd_fd), 0);
			cr_assert_eq(mrmgr_share_client_create(sv[1], TMO, &cli), 0);
			build(&valid, types[t], 5);
			valid.desc = hello; /* an OFFER of nothing: declined */
			send_case(sv[0], &c, &valid);
			(void)mrmgr_share_client_wait(cli, 50, &ev);
			(void)mrmgr_share_client_wait(cli, 0, &ev);
			cr_assert_eq(mrmgr_share_client_destroy(cli), 0);
			close(sv[0]);
			cr_assert_eq(count_fds(), before,
				     "shape %d type %u with %zu descriptors: %d leaked",
				     c.shape, types[t], c.nfds, count_fds() - before);
		}
	}
	fx_close(&f);
}

/* ------------------------------------------------------------ rxe */

Test(share_hostile, an_rxe_descriptor_with_debug_logging_is_eopnotsupp)
{
	struct mrmgr_sim_attr rxe = {
		.comp_mask = MRMGR_SIM_ATTR_PERSONALITY, .personality = MRMGR_SIM_RXE,
	};
	struct mrmgr_export_desc hello = { .version = MRMGR_EXPORT_DESC_VERSION };
	mrmgr_importer_t *importer;
	mrmgr_share_client_t *cli;
	struct fixture f;
	int sv[2];

	fx_open(&f, &rxe, NULL);
	int before = count_fds();
	memset(&captured, 0, sizeof(captured));
	mrmgr_set_log_handler(capture_fn, NULL, MRMGR_LOG_DEBUG);
	int fd = dup(f.ctx->cmd_fd);
	cr_assert_eq(mrmgr_importer_open(fd, &importer), EOPNOTSUPP);
	cr_assert_not_null(strstr(captured.text, f.ctx->device->name),
			   "the debug line names the device: %s", captured.text);
	close(fd);
	seqpair(sv);
	cr_assert_eq(mrmgr__share_send(sv[0], MRMGR__MSG_HELLO, 0, 0, 0, &hello,
				       f.ctx->cmd_fd), 0);
	cr_assert_eq(mrmgr_share_client_create(sv[1], TMO, &cli), EOPNOTSUPP);
	capture_stop();
	close(sv[0]);
	close(sv[1]);
	cr_assert_eq(count_fds(), before);
	fx_close(&f);
}

