/*
 * The importer's end of the sharing helper: receives the owner's command
 * descriptor and opens an importer on it, imports what the owner offers
 * (telling it ATTACH, or DECLINE with the reason), passes the owner's
 * revocations on to the application, and detaches imports when the
 * application releases them.
 *
 * Revocation is a request, not a kill: the import stays usable (the
 * owner keeps the MR registered) until the application has stopped its
 * operations on it and calls mrmgr_share_client_release(), which is what
 * tells the owner it may deregister. An owner that goes away (BYE, or its
 * socket closes) leaves imports whose MRs may die at any time: they are
 * reported revoked.
 *
 * One thread drives a client.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "share_proto.h"

struct cimport {
	struct cimport *next;
	mrmgr_import_t *imp;
	uint64_t export_id;
};

struct mrmgr_share_client {
	int fd;
	mrmgr_importer_t *importer;
	pid_t owner_pid;
	struct cimport *imports;
	int owner_gone;
};

static int64_t now_ms(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* poll() for input until deadline (-1: forever). 0, ETIMEDOUT or errno. */
static int wait_input(int fd, int64_t deadline)
{
	for (;;) {
		struct pollfd p = { fd, POLLIN, 0 };
		int t = deadline < 0 ? -1 : (int)(deadline > now_ms() ? deadline - now_ms() : 0);
		int ret = poll(&p, 1, t);

		if (ret > 0)
			return 0;
		if (ret == 0)
			return ETIMEDOUT;
		if (errno != EINTR)
			return errno;
	}
}

static int64_t deadline_for(int timeout_ms)
{
	return timeout_ms < 0 ? -1 : now_ms() + timeout_ms;
}

MRMGR_EXPORT int mrmgr_share_client_create(int sock, int timeout_ms,
					   mrmgr_share_client_t **out)
{
	struct mrmgr__share_msg m;
	struct mrmgr_share_client *c;
	int64_t deadline = deadline_for(timeout_ms);
	int fd = -1, ret;

	if (!out) {
		mrmgr__err("mrmgr_share_client_create: NULL client pointer");
		return EINVAL;
	}
	ret = mrmgr__share_check_socket("mrmgr_share_client_create", sock);
	if (ret)
		return ret;
	do {
		ret = wait_input(sock, deadline);
		if (!ret)
			ret = mrmgr__share_recv(sock, &m, &fd);
	} while (ret == EAGAIN);
	if (ret) {
		mrmgr__err("mrmgr_share_client_create: waiting for the owner's "
			   "greeting: %s", strerror(ret));
		return ret;
	}
	if (m.type != MRMGR__MSG_HELLO || fd < 0) {
		if (fd >= 0)
			close(fd);
		mrmgr__err("mrmgr_share_client_create: the peer is not a share "
			   "server (message %u, %s descriptor)", m.type,
			   fd < 0 ? "no" : "a");
		return EPROTO;
	}
	c = calloc(1, sizeof(*c));
	if (!c) {
		close(fd);
		return ENOMEM;
	}
	ret = mrmgr_importer_open(fd, &c->importer);
	if (ret) {
		close(fd);
		free(c);
		mrmgr__err("mrmgr_share_client_create: %.64s (owner pid %d) "
			   "cannot be imported: %s", m.desc.device, (int)m.pid,
			   strerror(ret));
		return ret;
	}
	c->fd = sock;
	c->owner_pid = m.pid;
	*out = c;
	return 0;
}

static struct cimport *find(struct mrmgr_share_client *c, uint64_t export_id)
{
	for (struct cimport *i = c->imports; i; i = i->next)
		if (i->export_id == export_id)
			return i;
	return NULL;
}

static void owner_gone(struct mrmgr_share_client *c, struct mrmgr_share_event *ev)
{
	c->owner_gone = 1;
	for (struct cimport *i = c->imports; i; i = i->next)
		mrmgr__import_set_revoked(i->imp);
	memset(ev, 0, sizeof(*ev));
	ev->type = MRMGR_SHARE_EV_OWNER_GONE;
	mrmgr__info("share client: the owner (pid %d) is gone", (int)c->owner_pid);
}

/* One message; 1 when it made an event. */
static int handle(struct mrmgr_share_client *c, const struct mrmgr__share_msg *m,
		  struct mrmgr_share_event *ev)
{
	struct cimport *ci;
	mrmgr_import_t *imp;
	int ret;

	memset(ev, 0, sizeof(*ev));
	ev->export_id = m->export_id;
	ev->tag = m->tag;
	switch (m->type) {
	case MRMGR__MSG_OFFER:
		ci = calloc(1, sizeof(*ci));
		ret = ci ? mrmgr_import(c->importer, &m->desc, sizeof(m->desc), &imp)
			 : ENOMEM;
		if (ret) {
			free(ci);
			(void)mrmgr__share_send(c->fd, MRMGR__MSG_DECLINE,
						m->export_id, m->tag, ret, NULL, -1);
			ev->type = MRMGR_SHARE_EV_IMPORT_FAILED;
			ev->err = ret;
			return 1;
		}
		ret = mrmgr__share_send(c->fd, MRMGR__MSG_ATTACH, m->export_id,
					m->tag, 0, NULL, -1);
		if (ret) {
			/* The owner is gone: its MR may die any time. */
			mrmgr_import_release(imp);
			free(ci);
			owner_gone(c, ev);
			return 1;
		}
		ci->imp = imp;
		ci->export_id = m->export_id;
		ci->next = c->imports;
		c->imports = ci;
		ev->type = MRMGR_SHARE_EV_IMPORTED;
		ev->import = imp;
		return 1;
	case MRMGR__MSG_REVOKE:
		ci = find(c, m->export_id);
		if (!ci)
			return 0; /* declined, or already released */
		mrmgr__import_set_revoked(ci->imp);
		ev->type = MRMGR_SHARE_EV_REVOKED;
		ev->import = ci->imp;
		return 1;
	case MRMGR__MSG_BYE:
		owner_gone(c, ev);
		return 1;
	default:
		mrmgr__warn("share client: unexpected message %u", m->type);
		return 0;
	}
}

MRMGR_EXPORT int mrmgr_share_client_wait(mrmgr_share_client_t *c,
					 int timeout_ms,
					 struct mrmgr_share_event *ev)
{
	int64_t deadline = deadline_for(timeout_ms);
	struct mrmgr__share_msg m;
	int ret;

	if (!c || !ev) {
		mrmgr__err("mrmgr_share_client_wait: NULL %s", !c ? "client" : "event");
		return EINVAL;
	}
	if (c->owner_gone)
		return ECONNRESET;
	for (;;) {
		ret = mrmgr__share_recv(c->fd, &m, NULL);
		if (ret == EAGAIN) {
			ret = wait_input(c->fd, deadline);
			if (ret)
				return ret;
			continue;
		}
		if (ret == ECONNRESET || ret == EPROTO) {
			owner_gone(c, ev);
			return 0;
		}
		if (ret)
			return ret;
		if (handle(c, &m, ev))
			return 0;
	}
}

MRMGR_EXPORT int mrmgr_share_client_release(mrmgr_share_client_t *c,
					    mrmgr_import_t *imp)
{
	struct cimport **pp, *ci;
	uint64_t id;

	if (!c || !imp) {
		mrmgr__err("mrmgr_share_client_release: NULL %s",
			   !c ? "client" : "import");
		return EINVAL;
	}
	for (pp = &c->imports; *pp && (*pp)->imp != imp; pp = &(*pp)->next)
		;
	ci = *pp;
	if (!ci) {
		mrmgr__err("mrmgr_share_client_release: not an import of this client");
		return EINVAL;
	}
	*pp = ci->next;
	id = ci->export_id;
	free(ci);
	/* Unimport first: once the owner hears DETACH it may deregister. */
	mrmgr_import_release(imp);
	if (!c->owner_gone &&
	    mrmgr__share_send(c->fd, MRMGR__MSG_DETACH, id, 0, 0, NULL, -1))
		c->owner_gone = 1;
	return 0;
}

MRMGR_EXPORT mrmgr_importer_t *mrmgr_share_client_importer(const mrmgr_share_client_t *c)
{
	return c ? c->importer : NULL;
}

MRMGR_EXPORT int mrmgr_share_client_fd(const mrmgr_share_client_t *c)
{
	return c ? c->fd : -1;
}

MRMGR_EXPORT int mrmgr_share_client_destroy(mrmgr_share_client_t *c)
{
	if (!c) {
		mrmgr__err("mrmgr_share_client_destroy: NULL client");
		return EINVAL;
	}
	while (c->imports)
		mrmgr_share_client_release(c, c->imports->imp);
	mrmgr_importer_close(c->importer);
	close(c->fd);
	free(c);
	return 0;
}
