/*
 * The owner's end of the sharing helper: offers a cache's regions to
 * importer processes and keeps each one exported (pinned) for exactly as
 * long as an importer may use it.
 *
 * An offer's life (share_proto.h for the messages):
 *
 *   offer()      export (pin) + OFFER          -> OFFERED
 *   ATTACH       importer counted               -> ATTACHED
 *   REVOKE sent  when the export is revoked (the region was invalidated:
 *                progress() notices) or the offer withdrawn; the importer
 *                answers DETACH (or DECLINE, if it had not imported yet)
 *   DETACH, DECLINE, hang-up                    -> export released, gone
 *
 * The export is released only when the importer can no longer touch the
 * MR, never before: ibv_import_mr() shares the kernel object, so a dereg
 * under an importer would fail its operations. An offer answered by
 * nothing (a stuck importer) keeps its region registered; destroy the
 * server with MRMGR_DESTROY_FORCE to give up on it.
 *
 * What "invalidated while exported" means here: the owner's memory at
 * that range is no longer what was registered (unmapped, remapped,
 * resized). The region leaves the owner's cache at once; the MR stays
 * registered, pinning the old pages, so an importer's writes in flight
 * land in those pages (lost to the owner, but harming nobody) instead of
 * failing on a dead key; the importer is told (REVOKE) and must stop and
 * detach; the MR is deregistered then.
 *
 * One thread drives a server (no internal lock); progress() is the only
 * place messages are read, so events come from it.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "log.h"
#include "share_proto.h"

struct peer {
	struct peer *next;
	uint64_t id;
	int fd;
	pid_t pid;
};

struct offer {
	struct offer *next;
	struct peer *peer;
	mrmgr_export_t *exp;
	uint64_t export_id;
	uint64_t tag;
	int attached;
	int revoke_sent;
};

struct mrmgr_share_server {
	mrmgr_cache_t *cache;
	struct ibv_pd *pd;       /* NULL: the regions' plain MR */
	int cmd_fd;
	char device[64];
	mrmgr_share_event_fn event_fn;
	void *event_arg;
	int check_set;           /* the caller chose who may connect */
	mrmgr_share_peer_check_fn peer_check;
	void *peer_check_arg;
	struct peer *peers;
	uint64_t next_peer;
	struct offer *offers;
	int busy;                /* something happened in this progress() */
};

static void emit(struct mrmgr_share_server *s, uint32_t type, int err,
		 uint64_t peer, const struct offer *o)
{
	struct mrmgr_share_event ev = {
		.type = type, .err = err, .peer = peer,
		.export_id = o ? o->export_id : 0, .tag = o ? o->tag : 0,
	};

	s->busy = 1;
	if (s->event_fn)
		s->event_fn(&ev, s->event_arg);
}

static struct peer *find_peer(struct mrmgr_share_server *s, uint64_t id)
{
	for (struct peer *p = s->peers; p; p = p->next)
		if (p->id == id)
			return p;
	return NULL;
}

static struct offer *find_offer(struct mrmgr_share_server *s, uint64_t id,
				const struct peer *p)
{
	for (struct offer *o = s->offers; o; o = o->next)
		if (o->export_id == id && (!p || o->peer == p))
			return o;
	return NULL;
}

/* The importer can no longer touch the MR: drop the offer and its pin. */
static void drop_offer(struct mrmgr_share_server *s, struct offer *o)
{
	struct offer **pp = &s->offers;

	while (*pp != o)
		pp = &(*pp)->next;
	*pp = o->next;
	if (o->attached)
		(void)mrmgr_export_importers(o->exp, -1);
	mrmgr_export_release(o->exp);
	free(o);
}

static void drop_peer(struct mrmgr_share_server *s, struct peer *p, int notify)
{
	struct peer **pp = &s->peers;

	for (struct offer *o = s->offers, *next; o; o = next) {
		next = o->next;
		if (o->peer != p)
			continue;
		if (notify)
			emit(s, MRMGR_SHARE_EV_PEER_GONE, 0, p->id, o);
		drop_offer(s, o);
	}
	while (*pp != p)
		pp = &(*pp)->next;
	*pp = p->next;
	close(p->fd);
	mrmgr__info("share server: peer %llu (pid %d) gone",
		    (unsigned long long)p->id, (int)p->pid);
	free(p);
}

MRMGR_EXPORT int mrmgr_share_server_create(mrmgr_cache_t *cache,
					   struct ibv_pd *pd,
					   const struct mrmgr_share_server_attr *attr,
					   mrmgr_share_server_t **out)
{
	struct mrmgr_share_server *s;
	struct ibv_context *ctx;
	int ret;

	if (!cache || !out ||
	    (attr && (attr->comp_mask & ~(uint64_t)(MRMGR_SHARE_SERVER_ATTR_EVENTS |
						    MRMGR_SHARE_SERVER_ATTR_PEER_CHECK)))) {
		mrmgr__err("mrmgr_share_server_create: %s",
			   !cache || !out ? "NULL argument" : "unknown comp_mask");
		return EINVAL;
	}
	/* The cache serves pd, its device can export, and it has a command
	 * descriptor to pass (libmrmgr says why not). */
	ret = mrmgr_cache_export_context(cache, pd, &ctx);
	if (ret) {
		mrmgr__err("mrmgr_share_server_create: %s", strerror(ret));
		return ret;
	}
	s = calloc(1, sizeof(*s));
	if (!s)
		return ENOMEM;
	s->cache = cache;
	s->pd = pd;
	s->cmd_fd = ctx->cmd_fd;
	memcpy(s->device, ctx->device->name, sizeof(s->device) - 1);
	if (attr && (attr->comp_mask & MRMGR_SHARE_SERVER_ATTR_EVENTS)) {
		s->event_fn = attr->event_fn;
		s->event_arg = attr->event_arg;
	}
	if (attr && (attr->comp_mask & MRMGR_SHARE_SERVER_ATTR_PEER_CHECK)) {
		s->check_set = 1;
		s->peer_check = attr->peer_check;
		s->peer_check_arg = attr->peer_check_arg;
	}
	*out = s;
	return 0;
}

/* An importer gets the device's command fd, and with it every PD and MR
 * handle of the context (doc/sharing.md): by default only a process that
 * could already read this one's memory (same uid) or anyone's (root). */
static int peer_allowed(const struct mrmgr_share_server *s, const struct ucred *cred)
{
	int ret;

	if (s->check_set) {
		ret = s->peer_check ? s->peer_check(cred->pid, cred->uid, cred->gid,
						    s->peer_check_arg) : 0;
		if (ret) {
			mrmgr__warn("share server: peer pid %d uid %u refused by the "
				    "peer check (%s)", (int)cred->pid,
				    (unsigned int)cred->uid, strerror(ret));
			return ret > 0 ? ret : EACCES;
		}
		return 0;
	}
	if (cred->uid == geteuid() || cred->uid == 0)
		return 0;
	mrmgr__warn("share server: peer pid %d uid %u refused: not this process's "
		    "uid %u nor root (set mrmgr_share_server_attr::peer_check to "
		    "accept others)", (int)cred->pid, (unsigned int)cred->uid,
		    (unsigned int)geteuid());
	return EACCES;
}

MRMGR_EXPORT int mrmgr_share_server_add_peer(mrmgr_share_server_t *s, int sock,
					     uint64_t *id)
{
	struct mrmgr_export_desc hello;
	struct ucred cred = { 0 };
	socklen_t len = sizeof(cred);
	struct peer *p;
	int ret;

	if (!s) {
		mrmgr__err("mrmgr_share_server_add_peer: NULL server");
		return EINVAL;
	}
	ret = mrmgr__share_check_socket("mrmgr_share_server_add_peer", sock);
	if (ret)
		return ret;
	if (getsockopt(sock, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
		ret = errno;
		mrmgr__err("mrmgr_share_server_add_peer: the peer's credentials: %s",
			   strerror(ret));
		return ret;
	}
	ret = peer_allowed(s, &cred);
	if (ret)
		return ret;
	p = calloc(1, sizeof(*p));
	if (!p)
		return ENOMEM;
	p->pid = cred.pid;
	memset(&hello, 0, sizeof(hello));
	hello.version = MRMGR_EXPORT_DESC_VERSION;
	hello.size = sizeof(hello);
	hello.owner_pid = (int32_t)getpid();
	memcpy(hello.device, s->device, sizeof(hello.device));
	ret = mrmgr__share_send(sock, MRMGR__MSG_HELLO, 0, 0, 0, &hello, s->cmd_fd);
	if (ret) {
		free(p);
		mrmgr__err("mrmgr_share_server_add_peer: greeting the peer: %s",
			   strerror(ret));
		return ret;
	}
	p->fd = sock;
	p->id = ++s->next_peer;
	p->next = s->peers;
	s->peers = p;
	mrmgr__info("share server: peer %llu (pid %d) on %s",
		    (unsigned long long)p->id, (int)p->pid, s->device);
	if (id)
		*id = p->id;
	return 0;
}

MRMGR_EXPORT int mrmgr_share_server_offer(mrmgr_share_server_t *s, uint64_t peer,
					  mrmgr_region_t *region, uint64_t tag,
					  uint64_t *export_id)
{
	struct mrmgr_export_desc d;
	struct offer *o;
	struct peer *p;
	int cmd_fd = -1;
	int ret;

	if (!s || !region) {
		mrmgr__err("mrmgr_share_server_offer: NULL %s",
			   !s ? "server" : "region");
		return EINVAL;
	}
	p = find_peer(s, peer);
	if (!p) {
		mrmgr__err("mrmgr_share_server_offer: no peer %llu (gone?)",
			   (unsigned long long)peer);
		return ENOTCONN;
	}
	o = calloc(1, sizeof(*o));
	if (!o)
		return ENOMEM;
	ret = mrmgr_region_export(region, s->pd, &o->exp);
	if (ret) {
		free(o);
		return ret;
	}
	mrmgr_export_describe(o->exp, &d, sizeof(d), &cmd_fd);
	/* Peers imported the server's device: an MR of another one (a
	 * region of another cache) would name handles they cannot reach. */
	if (cmd_fd != s->cmd_fd) {
		mrmgr_export_release(o->exp);
		free(o);
		mrmgr__err("mrmgr_share_server_offer: the region is not on the "
			   "server's device (%s)", s->device);
		return EINVAL;
	}
	o->peer = p;
	o->export_id = d.export_id;
	o->tag = tag;
	ret = mrmgr__share_send(p->fd, MRMGR__MSG_OFFER, d.export_id, tag, 0, &d, -1);
	if (ret) {
		mrmgr_export_release(o->exp);
		free(o);
		mrmgr__err("mrmgr_share_server_offer: peer %llu: %s",
			   (unsigned long long)peer, strerror(ret));
		drop_peer(s, p, 1);
		return ENOTCONN;
	}
	o->next = s->offers;
	s->offers = o;
	if (export_id)
		*export_id = d.export_id;
	return 0;
}

static void send_revoke(struct mrmgr_share_server *s, struct offer *o)
{
	int ret;

	if (o->revoke_sent)
		return;
	o->revoke_sent = 1;
	ret = mrmgr__share_send(o->peer->fd, MRMGR__MSG_REVOKE, o->export_id,
				o->tag, 0, NULL, -1);
	if (ret)
		mrmgr__warn("share server: telling peer %llu that export %llu "
			    "is revoked: %s", (unsigned long long)o->peer->id,
			    (unsigned long long)o->export_id, strerror(ret));
	emit(s, MRMGR_SHARE_EV_REVOKE_SENT, ret, o->peer->id, o);
}

MRMGR_EXPORT int mrmgr_share_server_withdraw(mrmgr_share_server_t *s,
					     uint64_t export_id)
{
	struct offer *o = s ? find_offer(s, export_id, NULL) : NULL;

	if (!o) {
		mrmgr__err("mrmgr_share_server_withdraw: no offer %llu",
			   (unsigned long long)export_id);
		return s ? ENOENT : EINVAL;
	}
	send_revoke(s, o);
	return 0;
}

/* One message from a peer. Returns 0, or an errno that ends the peer. */
static int handle(struct mrmgr_share_server *s, struct peer *p,
		  const struct mrmgr__share_msg *m)
{
	struct offer *o = find_offer(s, m->export_id, p);

	switch (m->type) {
	case MRMGR__MSG_ATTACH:
		if (!o || o->attached)
			return EPROTO;
		o->attached = 1;
		(void)mrmgr_export_importers(o->exp, 1);
		emit(s, MRMGR_SHARE_EV_ATTACH, 0, p->id, o);
		/* Revoked while the offer was on its way: tell it now. */
		if (mrmgr_export_revoked(o->exp))
			send_revoke(s, o);
		return 0;
	case MRMGR__MSG_DECLINE:
	case MRMGR__MSG_DETACH:
		if (!o)
			return EPROTO;
		emit(s, m->type == MRMGR__MSG_DETACH ? MRMGR_SHARE_EV_DETACH
						     : MRMGR_SHARE_EV_DECLINE,
		     m->type == MRMGR__MSG_DECLINE ? m->err : 0, p->id, o);
		drop_offer(s, o);
		return 0;
	default:
		return EPROTO;
	}
}

MRMGR_EXPORT int mrmgr_share_server_progress(mrmgr_share_server_t *s,
					     int timeout_ms)
{
	struct pollfd *fds;
	struct peer **ps;
	nfds_t n = 0;
	int ret;

	if (!s) {
		mrmgr__err("mrmgr_share_server_progress: NULL server");
		return EINVAL;
	}
	s->busy = 0;
	/* Regions invalidated since: their importers must stop. */
	for (struct offer *o = s->offers; o; o = o->next)
		if (!o->revoke_sent && mrmgr_export_revoked(o->exp))
			send_revoke(s, o);
	for (struct peer *p = s->peers; p; p = p->next)
		n++;
	if (!n) /* nobody to wait for */
		return s->busy ? 0 : ETIMEDOUT;
	fds = calloc(n, sizeof(*fds));
	ps = calloc(n, sizeof(*ps));
	if (!fds || !ps) {
		free(fds);
		free(ps);
		return ENOMEM;
	}
	n = 0;
	for (struct peer *p = s->peers; p; p = p->next) {
		fds[n] = (struct pollfd){ p->fd, POLLIN, 0 };
		ps[n++] = p;
	}
	do {
		ret = poll(fds, n, s->busy ? 0 : timeout_ms);
	} while (ret < 0 && errno == EINTR);
	if (ret < 0) {
		ret = errno;
		free(fds);
		free(ps);
		return ret;
	}
	for (nfds_t i = 0; i < n; i++) {
		struct mrmgr__share_msg m;
		int err = 0;

		if (!fds[i].revents)
			continue;
		while (!err && (err = mrmgr__share_recv(ps[i]->fd, &m, NULL)) == 0)
			err = handle(s, ps[i], &m);
		if (err != EAGAIN) {
			if (err == EPROTO)
				mrmgr__warn("share server: peer %llu broke the "
					    "protocol; dropped",
					    (unsigned long long)ps[i]->id);
			drop_peer(s, ps[i], 1);
			s->busy = 1;
		}
	}
	free(fds);
	free(ps);
	return s->busy ? 0 : ETIMEDOUT;
}

MRMGR_EXPORT uint32_t mrmgr_share_server_importers(const mrmgr_share_server_t *s,
						   uint64_t export_id)
{
	uint32_t n = 0;

	for (const struct offer *o = s ? s->offers : NULL; o; o = o->next)
		if (o->export_id == export_id && o->attached)
			n++;
	return n;
}

MRMGR_EXPORT int mrmgr_share_server_destroy(mrmgr_share_server_t *s,
					    uint64_t flags)
{
	unsigned int busy = 0;

	if (!s || (flags & ~(uint64_t)MRMGR_DESTROY_FORCE)) {
		mrmgr__err("mrmgr_share_server_destroy: %s",
			   !s ? "NULL server" : "unknown flags");
		return EINVAL;
	}
	for (struct offer *o = s->offers; o; o = o->next) {
		if (flags & MRMGR_DESTROY_FORCE)
			break;
		busy++;
		mrmgr__err("mrmgr_share_server_destroy: export %llu is %s by "
			   "peer %llu (pid %d)", (unsigned long long)o->export_id,
			   o->attached ? "imported" : "offered and unanswered",
			   (unsigned long long)o->peer->id, (int)o->peer->pid);
	}
	if (busy) {
		mrmgr__err("mrmgr_share_server_destroy: %u offers live; wait for "
			   "the peers to detach, or force", busy);
		return EBUSY;
	}
	for (struct peer *p = s->peers; p; p = p->next)
		(void)mrmgr__share_send(p->fd, MRMGR__MSG_BYE, 0, 0, 0, NULL, -1);
	while (s->offers) {
		if (s->offers->attached)
			mrmgr__warn("share server: export %llu released by force "
				    "with peer %llu attached",
				    (unsigned long long)s->offers->export_id,
				    (unsigned long long)s->offers->peer->id);
		drop_offer(s, s->offers);
	}
	while (s->peers)
		drop_peer(s, s->peers, 0);
	free(s);
	return 0;
}
