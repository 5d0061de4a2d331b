/*
 * The sharing helper's messages on the wire (see share_proto.h).
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "log.h"
#include "share_proto.h"

#define SEND_WAIT_MS 5000

int mrmgr__share_check_socket(const char *fn, int sock)
{
	int type = 0, domain = 0;
	socklen_t len = sizeof(type);

	if (sock < 0 ||
	    getsockopt(sock, SOL_SOCKET, SO_TYPE, &type, &len) != 0 ||
	    (len = sizeof(domain),
	     getsockopt(sock, SOL_SOCKET, SO_DOMAIN, &domain, &len) != 0) ||
	    type != SOCK_SEQPACKET || domain != AF_UNIX) {
		mrmgr__err("%s: fd %d is not a connected UNIX-domain "
			   "SOCK_SEQPACKET socket", fn, sock);
		return EINVAL;
	}
	return 0;
}

int mrmgr__share_send(int sock, uint16_t type, uint64_t export_id,
		      uint64_t tag, int32_t err,
		      const struct mrmgr_export_desc *desc, int fd)
{
	struct mrmgr__share_msg m;
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(sizeof(int))];
	} ctl;
	struct iovec iov = { &m, sizeof(m) };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };

	memset(&m, 0, sizeof(m));
	m.magic = MRMGR__SHARE_MAGIC;
	m.version = MRMGR__SHARE_PROTO;
	m.type = type;
	m.export_id = export_id;
	m.tag = tag;
	m.err = err;
	m.pid = (int32_t)getpid();
	if (desc)
		m.desc = *desc;
	if (fd >= 0) {
		memset(&ctl, 0, sizeof(ctl));
		mh.msg_control = ctl.buf;
		mh.msg_controllen = sizeof(ctl.buf);
		ctl.h.cmsg_level = SOL_SOCKET;
		ctl.h.cmsg_type = SCM_RIGHTS;
		ctl.h.cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(&ctl.h), &fd, sizeof(int));
	}
	for (;;) {
		struct pollfd p = { sock, POLLOUT, 0 };
		ssize_t n = sendmsg(sock, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);

		if (n == (ssize_t)sizeof(m))
			return 0;
		if (n >= 0)
			return EPROTO; /* a datagram socket never sends part */
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN && errno != EWOULDBLOCK)
			return errno == EPIPE || errno == ECONNREFUSED ? ECONNRESET
								       : errno;
		/* The peer is not reading: wait a little, not forever. */
		n = poll(&p, 1, SEND_WAIT_MS);
		if (n == 0)
			return ETIMEDOUT;
		if (n < 0 && errno != EINTR)
			return errno;
	}
}

/*
 * Every descriptor that came with a datagram, whatever else is wrong with
 * it: a peer may attach any number, to any message (even an empty one),
 * and whatever the kernel installed is ours to close. What did not fit
 * in ctl was never installed (MSG_CTRUNC: the kernel dropped it).
 */
static size_t take_fds(struct msghdr *mh, int *fds, size_t max)
{
	size_t n = 0;

	for (struct cmsghdr *c = CMSG_FIRSTHDR(mh); c; c = CMSG_NXTHDR(mh, c)) {
		const unsigned char *p = CMSG_DATA(c);
		size_t k;

		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS ||
		    c->cmsg_len < CMSG_LEN(0))
			continue;
		k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (size_t i = 0; i < k && n < max; i++)
			memcpy(&fds[n++], p + i * sizeof(int), sizeof(int));
	}
	return n;
}

int mrmgr__share_recv(int sock, struct mrmgr__share_msg *m, int *fd)
{
	/* Room for more descriptors than the protocol ever sends, so that
	 * a peer's extras are received (and closed here) rather than
	 * counted on being dropped by the kernel. */
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(MRMGR__SHARE_MAX_FDS * sizeof(int))];
	} ctl;
	struct iovec iov = { m, sizeof(*m) };
	struct msghdr mh = {
		.msg_iov = &iov, .msg_iovlen = 1,
		.msg_control = ctl.buf, .msg_controllen = sizeof(ctl.buf),
	};
	int fds[MRMGR__SHARE_MAX_FDS];
	size_t nfds, keep;
	ssize_t n;
	int ret = 0;

	if (fd)
		*fd = -1;
	memset(&ctl, 0, sizeof(ctl));
	do {
		n = recvmsg(sock, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
	} while (n < 0 && errno == EINTR);
	if (n < 0)
		return errno == EAGAIN || errno == EWOULDBLOCK ? EAGAIN : ECONNRESET;
	nfds = mh.msg_controllen ? take_fds(&mh, fds, MRMGR__SHARE_MAX_FDS) : 0;
	if (n == 0 && !nfds && !(mh.msg_flags & MSG_CTRUNC))
		ret = ECONNRESET; /* orderly hang-up (or an empty datagram) */
	else if (n != (ssize_t)sizeof(*m) ||
		 (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) ||
		 m->magic != MRMGR__SHARE_MAGIC || m->version != MRMGR__SHARE_PROTO ||
		 nfds > 1)
		ret = EPROTO;
	/* One descriptor, with a valid message, to a caller that takes one:
	 * the caller's. Every other one is closed now. */
	keep = !ret && fd && nfds == 1;
	for (size_t i = keep; i < nfds; i++)
		close(fds[i]);
	if (keep)
		*fd = fds[0];
	return ret;
}
