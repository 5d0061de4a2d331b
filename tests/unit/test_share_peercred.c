/*
 * Who may connect to a share server: the kernel's credentials of the peer
 * (SO_PEERCRED), not anything it says. By default a peer of the server's
 * effective uid or root; another uid is refused with EACCES and the socket
 * stays the caller's; mrmgr_share_server_attr::peer_check widens or
 * narrows it. A peer of another uid needs a connect() by a process of that
 * uid (a socketpair's credentials are its creator's), so those cases fork
 * a child that drops to nobody: they need root, and skip without it.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>

#include "share_helpers.h"

#define NOBODY 65534

struct seen {
	int calls;
	pid_t pid;
	uid_t uid;
	gid_t gid;
	int answer;
};

static int check(pid_t pid, uid_t uid, gid_t gid, void *arg)
{
	struct seen *s = arg;

	s->calls++;
	s->pid = pid;
	s->uid = uid;
	s->gid = gid;
	return s->answer;
}

static mrmgr_share_server_t *server(struct fixture *f, const struct mrmgr_share_server_attr *a)
{
	mrmgr_share_server_t *srv;

	fx_open(f, NULL, NULL);
	cr_assert_eq(mrmgr_share_server_create(f->cache, NULL, a, &srv), 0);
	return srv;
}

/* A child that drops to nobody and connects to an abstract listening
 * socket; the accepted end is returned, the child's pid in *child. It
 * exits 0 when the server hangs up without greeting it, 1 if it was
 * greeted, 2 if it could not drop or connect. */
static int connect_as_nobody(pid_t *child)
{
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	socklen_t alen;
	int l, s;

	snprintf(a.sun_path + 1, sizeof(a.sun_path) - 1, "mrmgr-peercred-%d", (int)getpid());
	alen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + strlen(a.sun_path + 1));
	l = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	cr_assert_geq(l, 0);
	cr_assert_eq(bind(l, (struct sockaddr *)&a, alen), 0, "bind: %s", strerror(errno));
	cr_assert_eq(listen(l, 1), 0);
	*child = fork();
	cr_assert_geq(*child, 0);
	if (*child == 0) {
		char buf[512];
		int c = socket(AF_UNIX, SOCK_SEQPACKET, 0);

		if (setresgid(NOBODY, NOBODY, NOBODY) || setresuid(NOBODY, NOBODY, NOBODY) ||
		    c < 0 || connect(c, (struct sockaddr *)&a, alen))
			_exit(2);
		_exit(recv(c, buf, sizeof(buf), 0) > 0 ? 1 : 0);
	}
	s = accept4(l, NULL, NULL, SOCK_CLOEXEC);
	cr_assert_geq(s, 0);
	close(l);
	return s;
}

static int child_status(pid_t child)
{
	int st;

	cr_assert_eq(waitpid(child, &st, 0), child);
	cr_assert(WIFEXITED(st));
	return WEXITSTATUS(st);
}

Test(share_peercred, another_uid_is_refused_by_default)
{
	struct fixture f;
	mrmgr_share_server_t *srv;
	uint64_t peer = 0;
	pid_t child;
	int s, before;

	if (geteuid() != 0)
		cr_skip_test("a peer of another uid needs root to fork one");
	srv = server(&f, NULL);
	s = connect_as_nobody(&child);
	before = count_fds();
	cr_assert_eq(mrmgr_share_server_add_peer(srv, s, &peer), EACCES);
	cr_assert_eq(peer, 0);
	cr_assert_eq(count_fds(), before, "nothing opened or closed");
	cr_assert_neq(fcntl(s, F_GETFD), -1, "the socket stays the caller's");
	close(s);
	cr_assert_eq(child_status(child), 0, "the refused peer was not greeted");
	cr_assert_eq(mrmgr_share_server_destroy(srv, 0), 0);
	fx_close(&f);
}

Test(share_peercred, same_uid_is_accepted_by_default)
{
	struct fixture f;
	mrmgr_share_server_t *srv = server(&f, NULL);
	uint64_t peer = 0;
	int sv[2];

	seqpair(sv);
	cr_assert_eq(mrmgr_share_server_add_peer(srv, sv[0], &peer), 0);
	cr_assert_neq(peer, 0);
	cr_assert_eq(mrmgr_share_server_destroy(srv, 0), 0);
	close(sv[1]);
	fx_close(&f);
}

Test(share_peercred, the_check_sees_the_kernels_credentials_and_its_errno_refuses)
{
	struct seen seen = { .answer = EPERM };
	struct mrmgr_share_server_attr a = {
		.comp_mask = MRMGR_SHARE_SERVER_ATTR_PEER_CHECK,
		.peer_check = check,
		.peer_check_arg = &seen,
	};
	struct fixture f;
	mrmgr_share_server_t *srv = server(&f, &a);
	uint64_t peer = 0;
	int sv[2];

	seqpair(sv);
	cr_assert_eq(mrmgr_share_server_add_peer(srv, sv[0], &peer), EPERM);
	cr_assert_eq(seen.calls, 1);
	cr_assert_eq(seen.pid, getpid());
	cr_assert_eq(seen.uid, geteuid());
	cr_assert_eq(seen.gid, getegid());
	seen.answer = 0;
	cr_assert_eq(mrmgr_share_server_add_peer(srv, sv[0], &peer), 0);
	cr_assert_eq(seen.calls, 2);
	cr_assert_eq(mrmgr_share_server_destroy(srv, 0), 0);
	close(sv[1]);
	fx_close(&f);
}

Test(share_peercred, the_check_can_accept_another_uid)
{
	struct seen seen = { .answer = 0 };
	struct mrmgr_share_server_attr a = {
		.comp_mask = MRMGR_SHARE_SERVER_ATTR_PEER_CHECK,
		.peer_check = check,
		.peer_check_arg = &seen,
	};
	struct fixture f;
	mrmgr_share_server_t *srv;
	uint64_t peer = 0;
	pid_t child;
	int s;

	if (geteuid() != 0)
		cr_skip_test("a peer of another uid needs root to fork one");
	srv = server(&f, &a);
	s = connect_as_nobody(&child);
	cr_assert_eq(mrmgr_share_server_add_peer(srv, s, &peer), 0);
	cr_assert_eq(seen.uid, (uid_t)NOBODY);
	cr_assert_eq(seen.pid, child);
	cr_assert_eq(mrmgr_share_server_destroy(srv, 0), 0); /* closes s */
	cr_assert_eq(child_status(child), 1, "the accepted peer was greeted");
	fx_close(&f);
}

Test(share_peercred, the_bit_without_a_check_accepts_any_peer)
{
	struct mrmgr_share_server_attr a = { .comp_mask = MRMGR_SHARE_SERVER_ATTR_PEER_CHECK };
	struct fixture f;
	mrmgr_share_server_t *srv;
	uint64_t peer = 0;
	pid_t child;
	int s;

	if (geteuid() != 0)
		cr_skip_test("a peer of another uid needs root to fork one");
	srv = server(&f, &a);
	s = connect_as_nobody(&child);
	cr_assert_eq(mrmgr_share_server_add_peer(srv, s, &peer), 0);
	cr_assert_eq(mrmgr_share_server_destroy(srv, 0), 0);
	cr_assert_eq(child_status(child), 1);
	fx_close(&f);
}
