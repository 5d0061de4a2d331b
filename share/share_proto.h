/*
 * The sharing helper's wire protocol, between a share server (the owner
 * of MRs) and share clients (importers), over a connected UNIX-domain
 * SOCK_SEQPACKET socket: one fixed-size message per datagram, host byte
 * order (both ends are on one host), a descriptor only with HELLO.
 *
 *   server -> client  HELLO    the device's cmd_fd (SCM_RIGHTS), its name
 *   server -> client  OFFER    export_id, tag, the export descriptor
 *   client -> server  ATTACH   export_id: imported, in use
 *   client -> server  DECLINE  export_id, err: could not import
 *   client -> server  DETACH   export_id: unimported
 *   server -> client  REVOKE   export_id: stop using it, then DETACH
 *   server -> client  BYE      the server is going away (all revoked)
 *
 * An offer lives on the server (its export pinned) until the client has
 * answered DECLINE or DETACH, or hung up: a client that dies detaches
 * everything, its imports died with its device context.
 *
 * SPDX-License-Identifier: MIT
 */
#ifndef MRMGR__SHARE_PROTO_H
#define MRMGR__SHARE_PROTO_H

#include <errno.h>
#include <stdint.h>

#include <mrmgr/share.h>

#define MRMGR__SHARE_MAGIC 0x4d525348u /* "MRSH" */
#define MRMGR__SHARE_PROTO 1
/* Descriptors one receive takes in (and closes, past the one a HELLO
 * carries); more than fit are dropped by the kernel (MSG_CTRUNC). */
#define MRMGR__SHARE_MAX_FDS 16

enum mrmgr__share_msg_type {
	MRMGR__MSG_HELLO = 1,
	MRMGR__MSG_OFFER = 2,
	MRMGR__MSG_ATTACH = 3,
	MRMGR__MSG_DECLINE = 4,
	MRMGR__MSG_DETACH = 5,
	MRMGR__MSG_REVOKE = 6,
	MRMGR__MSG_BYE = 7,
};

struct mrmgr__share_msg {
	uint32_t magic;
	uint16_t version;
	uint16_t type;
	uint64_t export_id;
	uint64_t tag;
	int32_t err;
	int32_t pid;
	struct mrmgr_export_desc desc; /* OFFER; HELLO: device only */
};

/* 0 when sock is a UNIX-domain SOCK_SEQPACKET socket, else EINVAL (logged
 * as fn's). */
int mrmgr__share_check_socket(const char *fn, int sock);
/*
 * Send one message, with fd attached when fd >= 0. Waits up to a few
 * seconds for room. 0, or ECONNRESET / EPIPE (peer gone), ETIMEDOUT.
 */
int mrmgr__share_send(int sock, uint16_t type, uint64_t export_id,
		      uint64_t tag, int32_t err,
		      const struct mrmgr_export_desc *desc, int fd);
/*
 * Receive one message without waiting. 0 (and *fd the descriptor that
 * came with it, or -1; pass fd NULL to refuse one), EAGAIN when there is
 * none, ECONNRESET when the peer is gone, EPROTO for anything that is not
 * this protocol (wrong size, magic or version, truncated, more than one
 * descriptor). Every descriptor the message brought is closed before
 * this returns, except the one given to the caller in *fd.
 */
int mrmgr__share_recv(int sock, struct mrmgr__share_msg *m, int *fd);

/* import.c, for client.c: the owner revoked the import. */
void mrmgr__import_set_revoked(mrmgr_import_t *imp);

/* A provider hook's result as the rest of libmrmgr reads it: a negative
 * value made positive, every "cannot" (ENOTSUP, ENOSYS) spelt
 * EOPNOTSUPP. */
static inline int mrmgr__share_errno(int err)
{
	if (err < 0)
		err = -err;
	return err == ENOTSUP || err == ENOSYS ? EOPNOTSUPP : err;
}

#endif /* MRMGR__SHARE_PROTO_H */
