/*
 * libmrmgr-share - cross-process MR sharing: the importer and the
 * UNIX-socket share helper.
 *
 * SPDX-License-Identifier: MIT
 */
#ifndef MRMGR_SHARE_H
#define MRMGR_SHARE_H

/**
 * @file share.h
 * @brief libmrmgr-share: importing other processes' MRs, and the share
 * helper that passes them over a UNIX-domain socket.
 *
 * A library of its own, libmrmgr-share
 * (`pkg-config --cflags --libs mrmgr-share`), built on libmrmgr's public
 * API: the owner's side exports regions with mrmgr_region_export()
 * (libmrmgr, because an export is a member of the region's share set that
 * the cache must know about: it pins the region, is revoked when the
 * region is invalidated and keeps the cache busy), and the share server
 * sends the descriptors and the device's command descriptor to its peers
 * and tells the owner who attached. The importing side is not a cache at
 * all: an importer opens the owner's device (ibv_import_device() through
 * the device provider that claims the descriptor, mrmgr/device.h) and
 * imports MRs from descriptors. Programs that neither import nor run the
 * share helper do not link it. See doc/sharing.md.
 */

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <infiniband/verbs.h>
#include <mrmgr/mrmgr.h>

#ifdef __cplusplus
extern "C" {
#endif

/** An imported device (the owner's command descriptor). Opaque. */
typedef struct mrmgr_importer mrmgr_importer_t;
/** An imported MR. Opaque. */
typedef struct mrmgr_import mrmgr_import_t;

/**
 * Open an importer on an exporting device's command descriptor
 * (received with @c SCM_RIGHTS): the descriptor is offered to the device
 * providers (mrmgr/device.h), each of which claims its own kind (libibverbs:
 * a uverbs character device), and the claimant imports it. The importer owns
 * @p cmd_fd on success; on failure it stays the caller's. An importer's
 * calls may run concurrently from any thread; an import, like a region,
 * must not be used after its release.
 *
 * @param cmd_fd    the exporting device's command descriptor.
 * @param importer  receives the importer.
 * @return 0; @c EINVAL (NULL, a closed descriptor);
 *         @c EOPNOTSUPP when no provider claims the descriptor, or the
 *         device cannot import (rxe, siw);
 *         @c ENOMEM; the device's errno.
 */
MRMGR_EXPORT int mrmgr_importer_open(int cmd_fd, mrmgr_importer_t **importer);
/**
 * The imported device context (to create QPs that use imported MRs).
 * @param importer  the importer.
 * @return its device context.
 */
MRMGR_EXPORT struct ibv_context *mrmgr_importer_context(const mrmgr_importer_t *importer);
/**
 * Close an importer (ibv_close_device()).
 * @param importer  the importer.
 * @return 0, @c EINVAL, or @c EBUSY while imports are live.
 */
MRMGR_EXPORT int mrmgr_importer_close(mrmgr_importer_t *importer);

/**
 * Import an exported MR: its PD (ibv_import_pd(), shared by the
 * importer's imports of the same PD) and the MR (ibv_import_mr()). The
 * keys the device reports are checked against the descriptor, so a stale
 * descriptor (whose handle now names another MR) is refused.
 *
 * @param importer   the importer of the exporting device.
 * @param desc       the owner's descriptor.
 * @param desc_size  its size as received (at least up to @c device).
 * @param imp        receives the import.
 * @return 0; @c EINVAL (NULL, unknown version, another device);
 *         @c ESTALE (the handle names another MR now); @c EOPNOTSUPP;
 *         the device's errno (@c ENOENT, @c EINVAL: no such object).
 */
MRMGR_EXPORT int mrmgr_import(mrmgr_importer_t *importer,
			      const struct mrmgr_export_desc *desc,
			      size_t desc_size, mrmgr_import_t **imp);
/**
 * Unimport (ibv_unimport_mr(); the PD when its last import goes).
 * @param imp  the import (NULL: @c EINVAL).
 * @return 0 or @c EINVAL.
 */
MRMGR_EXPORT int mrmgr_import_release(mrmgr_import_t *imp);
/**
 * The imported MR (its @c addr may be NULL: use mrmgr_import_addr()).
 * @param imp  the import.
 * @return the imported MR.
 */
MRMGR_EXPORT struct ibv_mr *mrmgr_import_mr(const mrmgr_import_t *imp);
/**
 * The imported PD.
 * @param imp  the import.
 * @return the imported PD.
 */
MRMGR_EXPORT struct ibv_pd *mrmgr_import_pd(const mrmgr_import_t *imp);
/**
 * The MR's local key.
 * @param imp  the import.
 * @return the lkey.
 */
static inline uint32_t mrmgr_import_lkey(const mrmgr_import_t *imp)
{
	struct ibv_mr *mr = mrmgr_import_mr(imp);

	return mr ? mr->lkey : 0;
}
/**
 * The MR's remote key.
 * @param imp  the import.
 * @return the rkey.
 */
static inline uint32_t mrmgr_import_rkey(const mrmgr_import_t *imp)
{
	struct ibv_mr *mr = mrmgr_import_mr(imp);

	return mr ? mr->rkey : 0;
}
/**
 * The MR's start in the owner's address space (what SGEs and RDMA use).
 * @param imp  the import.
 * @return the address to use in SGEs and RDMA work requests.
 */
MRMGR_EXPORT uint64_t mrmgr_import_addr(const mrmgr_import_t *imp);
/**
 * The MR's length.
 * @param imp  the import.
 * @return the length in bytes.
 */
MRMGR_EXPORT uint64_t mrmgr_import_length(const mrmgr_import_t *imp);
/**
 * The export's id (mrmgr_export_desc::export_id).
 * @param imp  the import.
 * @return the export id.
 */
MRMGR_EXPORT uint64_t mrmgr_import_id(const mrmgr_import_t *imp);
/**
 * Whether the owner revoked the import (told by the share client): stop
 * using it and release it.
 * @param imp  the import.
 * @return 1 or 0.
 */
MRMGR_EXPORT int mrmgr_import_revoked(const mrmgr_import_t *imp);

/** A share server: an owner's end of the sharing helper. Opaque. */
typedef struct mrmgr_share_server mrmgr_share_server_t;
/** A share client: an importer's end of the sharing helper. Opaque. */
typedef struct mrmgr_share_client mrmgr_share_client_t;

/** Events of the sharing helper (mrmgr_share_event::type). */
enum mrmgr_share_event_type {
	/** Server: a peer imported an offer (mrmgr_share_event::export_id). */
	MRMGR_SHARE_EV_ATTACH = 1,
	/** Server: a peer released an import. */
	MRMGR_SHARE_EV_DETACH = 2,
	/** Server: a peer could not import an offer (@c err says why). */
	MRMGR_SHARE_EV_DECLINE = 3,
	/** Server: a peer went away; its imports are detached. */
	MRMGR_SHARE_EV_PEER_GONE = 4,
	/** Server: an export was revoked and the peers told. */
	MRMGR_SHARE_EV_REVOKE_SENT = 5,
	/** Client: an offer was imported (mrmgr_share_event::import). */
	MRMGR_SHARE_EV_IMPORTED = 16,
	/** Client: an offer could not be imported (@c err). */
	MRMGR_SHARE_EV_IMPORT_FAILED = 17,
	/** Client: the owner revoked an import: stop using it, then
	 *  mrmgr_share_client_release() it. */
	MRMGR_SHARE_EV_REVOKED = 18,
	/** Client: the owner went away (its imports are dead). */
	MRMGR_SHARE_EV_OWNER_GONE = 19,
};

/** An event of the sharing helper. */
struct mrmgr_share_event {
	uint32_t type;          /**< enum mrmgr_share_event_type */
	int32_t err;            /**< errno of a failure, else 0 */
	uint64_t peer;          /**< server: the peer's id */
	uint64_t export_id;     /**< the export concerned */
	uint64_t tag;           /**< the owner's tag of the offer */
	mrmgr_import_t *import; /**< client: the import concerned */
};

/** Server callback; runs inside mrmgr_share_server_progress(). */
typedef void (*mrmgr_share_event_fn)(const struct mrmgr_share_event *ev,
				     void *arg);

/** Bits of mrmgr_share_server_attr::comp_mask. */
enum mrmgr_share_server_attr_mask {
	/** @c event_fn and @c event_arg are set. */
	MRMGR_SHARE_SERVER_ATTR_EVENTS = 1u << 0,
	/** @c peer_check and @c peer_check_arg are set (since 1.1). */
	MRMGR_SHARE_SERVER_ATTR_PEER_CHECK = 1u << 1,
};

/**
 * Decides whether a connecting peer may share the server's device
 * (mrmgr_share_server_attr::peer_check). The credentials are the
 * kernel's (@c SO_PEERCRED, taken when the peer connected), not anything
 * the peer said. Return 0 to accept, or a positive errno to refuse (the
 * add fails with it).
 */
typedef int (*mrmgr_share_peer_check_fn)(pid_t pid, uid_t uid, gid_t gid,
					 void *arg);

/** Attributes of a share server. Zero-initialise; set comp_mask bits. */
struct mrmgr_share_server_attr {
	uint64_t comp_mask;            /**< enum mrmgr_share_server_attr_mask */
	mrmgr_share_event_fn event_fn; /**< called for every event */
	void *event_arg;               /**< passed to @c event_fn */
	/** Who may connect. Without @c MRMGR_SHARE_SERVER_ATTR_PEER_CHECK,
	 *  only a peer of the server's effective uid, or root; with the bit
	 *  and NULL here, any peer (the caller checked the socket itself). */
	mrmgr_share_peer_check_fn peer_check;
	void *peer_check_arg;          /**< passed to @c peer_check */
};

/**
 * Create the owner's end of the sharing helper: it offers a cache's
 * regions to importer processes over connected UNIX-domain
 * @c SOCK_SEQPACKET sockets (socketpair(), or accept()), passes the
 * device's command descriptor, and keeps each offered region exported
 * (pinned) until the peer has detached. Thread safety: one thread drives
 * a server (its calls must not run concurrently); the cache may be used
 * by any thread meanwhile. Destroy the server before the cache.
 *
 * @param cache  the cache whose regions are offered.
 * @param pd     the PD whose MRs are offered (multi-PD caches), or NULL
 *               for the cache's first.
 * @param attr   attributes, or NULL.
 * @param srv    receives the server.
 * @return 0; @c EINVAL; @c EOPNOTSUPP when the device cannot import;
 *         @c ENOMEM.
 */
MRMGR_EXPORT int mrmgr_share_server_create(mrmgr_cache_t *cache,
					   struct ibv_pd *pd,
					   const struct mrmgr_share_server_attr *attr,
					   mrmgr_share_server_t **srv);
/**
 * Add a connected peer socket (the server owns it on success; on failure
 * it stays the caller's) and greet it with the device's command
 * descriptor. A peer that closes its socket detaches everything it had.
 * @param srv   the server.
 * The peer's credentials are the kernel's (@c SO_PEERCRED): by default
 * only a process of the server's effective uid, or root, is accepted,
 * since an importer can reach every object of the device context
 * (doc/sharing.md, "what sharing grants"); widen or narrow it with
 * mrmgr_share_server_attr::peer_check.
 *
 * @param sock  a connected UNIX-domain @c SOCK_SEQPACKET socket.
 * @param peer  receives the peer's id, for mrmgr_share_server_offer().
 * @return 0; @c EACCES (the peer's uid is not accepted; the socket stays
 *         the caller's) or the peer check's errno; @c EINVAL (not a
 *         @c SOCK_SEQPACKET UNIX socket); the
 *         socket's errno.
 */
MRMGR_EXPORT int mrmgr_share_server_add_peer(mrmgr_share_server_t *srv,
					     int sock, uint64_t *peer);
/**
 * Offer a region to a peer: the region is exported (pinned) and its
 * descriptor sent. The peer imports it and attaches, or declines.
 *
 * @param srv        the server.
 * @param peer       the peer from mrmgr_share_server_add_peer().
 * @param region     a region the caller holds (it may put it after).
 * @param tag        the caller's value, sent along and reported in events.
 * @param export_id  receives the export's id (may be NULL).
 * @return 0; @c EINVAL; @c ENOTCONN for a peer that is gone; as
 *         mrmgr_region_export().
 */
MRMGR_EXPORT int mrmgr_share_server_offer(mrmgr_share_server_t *srv,
					  uint64_t peer,
					  mrmgr_region_t *region, uint64_t tag,
					  uint64_t *export_id);
/**
 * Withdraw an offer: the peer is told (revoked) and the export released
 * once it has detached.
 * @param srv        the server.
 * @param export_id  the offer's id from mrmgr_share_server_offer().
 * @return 0 or @c ENOENT.
 */
MRMGR_EXPORT int mrmgr_share_server_withdraw(mrmgr_share_server_t *srv,
					     uint64_t export_id);
/**
 * Drive the server: tell peers about revoked exports (their regions were
 * invalidated), read their messages (attach, detach, decline, hang-up),
 * release exports nobody holds any more, report events. Waits up to
 * @p timeout_ms (0: do not wait, -1: forever) for something to happen.
 *
 * @param srv         the server.
 * @param timeout_ms  milliseconds to wait: 0 none, -1 forever.
 * @return 0 when something happened, @c ETIMEDOUT when not, or an errno.
 */
MRMGR_EXPORT int mrmgr_share_server_progress(mrmgr_share_server_t *srv,
					     int timeout_ms);
/**
 * Importers attached now to @p export_id (0 when it is not an offer of
 * this server).
 * @param srv        the server.
 * @param export_id  an offer's id.
 * @return the number of attached importers.
 */
MRMGR_EXPORT uint32_t mrmgr_share_server_importers(const mrmgr_share_server_t *srv,
						   uint64_t export_id);
/**
 * Destroy a server. Without ::MRMGR_DESTROY_FORCE it fails with @c EBUSY
 * (and a log line per attached import) while peers are attached; with it
 * the peers are told that everything is revoked and every export is
 * released at once (importers' MRs die).
 * @param srv    the server.
 * @param flags  0 or ::MRMGR_DESTROY_FORCE.
 * @return 0, @c EINVAL or @c EBUSY.
 */
MRMGR_EXPORT int mrmgr_share_server_destroy(mrmgr_share_server_t *srv,
					    uint64_t flags);

/**
 * Create the importer's end of the sharing helper on a connected socket
 * (owned by the client on success; on failure it stays the caller's):
 * wait up to @p timeout_ms (-1: forever) for the owner's greeting and
 * open an importer on its command descriptor.
 * Thread safety: one thread drives a client.
 *
 * @param sock        a connected UNIX-domain @c SOCK_SEQPACKET socket to a share server.
 * @param timeout_ms  milliseconds to wait for the greeting, -1 forever.
 * @param cli         receives the client.
 * @return 0; @c EINVAL; @c ETIMEDOUT; @c EPROTO (not a share server);
 *         @c EOPNOTSUPP (the device cannot import: rxe, siw); as
 *         mrmgr_importer_open().
 */
MRMGR_EXPORT int mrmgr_share_client_create(int sock, int timeout_ms,
					   mrmgr_share_client_t **cli);
/**
 * Wait up to @p timeout_ms (0: poll, -1: forever) for the next event:
 * an offer imported (and attached) or failed, an import revoked, the
 * owner gone.
 * @param cli         the client.
 * @param timeout_ms  milliseconds to wait: 0 poll, -1 forever.
 * @param ev          receives the event.
 * @return 0 with @p ev filled, @c ETIMEDOUT, or an errno.
 */
MRMGR_EXPORT int mrmgr_share_client_wait(mrmgr_share_client_t *cli,
					 int timeout_ms,
					 struct mrmgr_share_event *ev);
/**
 * Release an import and tell the owner (detach).
 * @param cli  the client.
 * @param imp  an import the client made.
 * @return 0 or @c EINVAL.
 */
MRMGR_EXPORT int mrmgr_share_client_release(mrmgr_share_client_t *cli,
					    mrmgr_import_t *imp);
/**
 * The importer (its device context, for QPs).
 * @param cli  the client.
 * @return its importer.
 */
MRMGR_EXPORT mrmgr_importer_t *mrmgr_share_client_importer(const mrmgr_share_client_t *cli);
/**
 * The client's socket, to wait on with poll() (readable: call wait).
 * @param cli  the client.
 * @return the socket descriptor (still owned by the client).
 */
MRMGR_EXPORT int mrmgr_share_client_fd(const mrmgr_share_client_t *cli);
/**
 * Destroy a client: every import is released (the owner told), the
 * importer closed, the socket closed.
 * @param cli  the client.
 * @return 0 or @c EINVAL.
 */
MRMGR_EXPORT int mrmgr_share_client_destroy(mrmgr_share_client_t *cli);

#ifdef __cplusplus
}
#endif

#endif /* MRMGR_SHARE_H */
