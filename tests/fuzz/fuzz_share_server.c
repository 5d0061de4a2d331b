/*
 * Fuzz target: the share server (the owner's end of the sharing helper)
 * against a hostile importer. The input is a little program: offers,
 * withdrawals, invalidations, server progress, and datagrams of any
 * size and content, with 0 to 40 descriptors attached (in one or two
 * control messages), sent to the server over a socketpair. After each
 * input the peer hangs up, and the server must have let go of everything
 * it got: no descriptor left open, no export left pinned (else abort(),
 * which the fuzzer reports as a crash).
 *
 * Build (libFuzzer and ASan/UBSan from Debian's clang; configure
 * --enable-fuzz builds every tests/fuzz/fuzz_*.c the same way). By hand,
 * from a build directory beside the sources:
 *   ../configure CC=clang --disable-shared \
 *     CFLAGS="-g -O1 -fsanitize=address,undefined,fuzzer-no-link"
 *   make lib/libmrmgr.la
 *   clang -g -O1 -fsanitize=fuzzer,address,undefined -I. -I../include \
 *     -I../share -I.. -I../lib/util -I../sim \
 *     ../tests/fuzz/fuzz_share_server.c lib/.libs/libmrmgr.a -libverbs \
 *     -lpthread -o fuzz_share_server
 * Run:
 *   ./fuzz_share_server -max_total_time=60 tests/fuzz/corpus/fuzz_share_server
 *   ./fuzz_share_server -runs=0 tests/fuzz/corpus/fuzz_share_server   (replay)
 *
 * FUZZ_SHARE_VERBOSE=1 in the environment prints the descriptors counted.
 *
 * Only the public API and the wire format (share_proto.h) are used.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <mrmgr/mrmgr.h>
#include <mrmgr/sim.h>
#include <mrmgr/share.h>

#include "share_proto.h"

#include "share_fuzz.h"

#define BUF_LEN (64 * 1024)
#define MAX_OPS 48
#define MAX_IDS 8

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static mrmgr_cache_t *cache;
static mrmgr_share_server_t *srv;
static char *buf;
static int null_fd;

static void setup(void)
{
	struct mrmgr_cache_attr ca = {
		/* The fuzzer stands in for the memory-event source: no
		 * monitor thread in the fuzzed process. */
		.comp_mask = MRMGR_CACHE_ATTR_MONITOR,
		.monitor = MRMGR_MONITOR_EXTERNAL,
	};
	mrmgr_region_t *r;

	/* Every log line formatted (and dropped): a log argument read from
	 * memory that is gone is caught even at debug level. */
	mrmgr_set_log_handler(quiet, NULL, MRMGR_LOG_DEBUG);
	if (mrmgr_sim_open(NULL, &ctx) || mrmgr_sim_alloc_pd(ctx, &pd) ||
	    mrmgr_cache_create(pd, &ca, &cache) ||
	    mrmgr_share_server_create(cache, NULL, NULL, &srv))
		abort();
	buf = mmap(NULL, BUF_LEN, PROT_READ | PROT_WRITE,
		   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (buf == MAP_FAILED || null_fd < 0)
		abort();
	memset(buf, 'b', BUF_LEN);
	/* Warm: the region registered once, the library's descriptors open. */
	if (mrmgr_get(cache, buf, BUF_LEN, IBV_ACCESS_LOCAL_WRITE |
		      IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ, &r))
		abort();
	mrmgr_put(r);
}

/* Everything the server sent, read and its descriptors closed; the
 * export ids of its offers remembered. */
static void drain(int sock, uint64_t *ids, size_t *nids)
{
	for (;;) {
		struct mrmgr__share_msg m;
		union {
			struct cmsghdr h;
			char b[CMSG_SPACE(4 * sizeof(int))];
		} ctl;
		struct iovec iov = { &m, sizeof(m) };
		struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1,
				     .msg_control = ctl.b,
				     .msg_controllen = sizeof(ctl.b) };
		ssize_t n = recvmsg(sock, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);

		if (n <= 0)
			return;
		for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
			if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
				continue;
			for (size_t i = 0; i < (c->cmsg_len - CMSG_LEN(0)) / sizeof(int); i++) {
				int fd;

				memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(fd));
				close(fd);
			}
		}
		if (n == (ssize_t)sizeof(m) && m.type == MRMGR__MSG_OFFER &&
		    *nids < MAX_IDS)
			ids[(*nids)++] = m.export_id;
	}
}

/* One datagram built from the input: the peer's move. */
static void send_hostile(int sock, const uint8_t *p, size_t n,
			 const uint64_t *ids, size_t nids)
{
	char ctlbuf[CMSG_SPACE(40 * sizeof(int)) * 2] __attribute__((aligned(8)));
	unsigned char raw[sizeof(struct mrmgr__share_msg) + 64];
	struct mrmgr__share_msg m;
	struct iovec iov;
	struct msghdr mh;
	struct cmsghdr *c;
	size_t len, nfds, first;
	uint8_t shape, fdsel;
	int fds[40];

	if (n < 6)
		return;
	shape = p[0];
	fdsel = p[1];
	memset(&m, 0, sizeof(m));
	m.magic = MRMGR__SHARE_MAGIC;
	m.version = MRMGR__SHARE_PROTO;
	m.type = p[2] & 0x0f;
	m.export_id = nids && !(p[3] & 0x80) ? ids[p[3] % nids] : p[3];
	m.err = (int8_t)p[4];
	m.pid = (int32_t)p[5];
	memcpy(raw, &m, sizeof(m));
	/* Tail bytes of the input overwrite the message (its header too,
	 * one time in four). */
	if (n > 6) {
		size_t k = n - 6 < sizeof(raw) ? n - 6 : sizeof(raw);
		size_t at = (shape & 0x30) == 0x30 ? 0 : 16;

		if (k > sizeof(raw) - at)
			k = sizeof(raw) - at;
		memcpy(raw + at, p + 6, k);
	}
	switch (shape & 0x7) {
	case 0:
		len = 0;
		break;
	case 1:
		len = p[4] % sizeof(m);
		break;
	case 2:
		len = sizeof(raw);
		break;
	default:
		len = sizeof(m);
		break;
	}
	nfds = fdsel & 0x80 ? 40 : fdsel & 0x3;
	for (size_t i = 0; i < nfds; i++) {
		fds[i] = dup(null_fd);
		if (fds[i] < 0)
			abort();
	}
	first = (fdsel & 0x40) && nfds > 1 ? nfds / 2 : nfds;
	iov.iov_base = raw;
	iov.iov_len = len;
	memset(&mh, 0, sizeof(mh));
	memset(ctlbuf, 0, sizeof(ctlbuf));
	mh.msg_iov = &iov;
	mh.msg_iovlen = 1;
	if (nfds) {
		mh.msg_control = ctlbuf;
		mh.msg_controllen = CMSG_SPACE(first * sizeof(int)) +
				    (first < nfds ? CMSG_SPACE((nfds - first) * sizeof(int)) : 0);
		c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(first * sizeof(int));
		memcpy(CMSG_DATA(c), fds, first * sizeof(int));
		if (first < nfds) {
			c = CMSG_NXTHDR(&mh, c);
			c->cmsg_level = SOL_SOCKET;
			c->cmsg_type = SCM_RIGHTS;
			c->cmsg_len = CMSG_LEN((nfds - first) * sizeof(int));
			memcpy(CMSG_DATA(c), fds + first, (nfds - first) * sizeof(int));
		}
	}
	(void)sendmsg(sock, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
	for (size_t i = 0; i < nfds; i++)
		close(fds[i]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static int baseline = -1;
	uint64_t ids[MAX_IDS], peer;
	size_t nids = 0, ops = 0;
	mrmgr_region_t *r;
	struct mrmgr_stats st;
	int sv[2];

	if (!srv)
		setup();
	if (baseline < 0) {
		baseline = count_fds();
		if (getenv("FUZZ_SHARE_VERBOSE"))
			fprintf(stderr, "baseline %d\n", baseline);
	}
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv))
		abort();
	if (mrmgr_share_server_add_peer(srv, sv[0], &peer)) {
		close(sv[0]);
		close(sv[1]);
		return 0;
	}
	drain(sv[1], ids, &nids);
	/* Records: an op byte, then (op 0) a length byte and that many
	 * bytes of a datagram. */
	while (size && ops++ < MAX_OPS) {
		uint8_t op = data[0];

		data++;
		size--;
		switch (op % 6) {
		case 0: {
			size_t n = size ? data[0] : 0;

			if (size)
				data++, size--;
			if (n > size)
				n = size;
			send_hostile(sv[1], data, n, ids, nids);
			data += n;
			size -= n;
			break;
		}
		case 1:
			if (!mrmgr_get(cache, buf, BUF_LEN, IBV_ACCESS_LOCAL_WRITE |
				       IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ, &r)) {
				(void)mrmgr_share_server_offer(srv, peer, r, op, NULL);
				mrmgr_put(r);
			}
			break;
		case 2:
			(void)mrmgr_share_server_progress(srv, 0);
			break;
		case 3:
			if (nids)
				(void)mrmgr_share_server_withdraw(srv, ids[op % nids]);
			break;
		case 4:
			/* What the monitor would report: the memory changed. */
			(void)mrmgr_invalidate(cache, buf, BUF_LEN);
			break;
		case 5:
			(void)mrmgr_share_server_importers(srv, nids ? ids[0] : 0);
			break;
		}
		drain(sv[1], ids, &nids);
	}
	(void)mrmgr_share_server_progress(srv, 0);
	drain(sv[1], ids, &nids);
	/* The peer hangs up: the server must let go of all of it. */
	close(sv[1]);
	for (int i = 0; i < 4; i++)
		(void)mrmgr_share_server_progress(srv, 0);
	if (mrmgr_cache_query_stats(cache, &st, sizeof(st)) || st.share_exports ||
	    st.share_importers) {
		fprintf(stderr, "fuzz_share_server: exports left pinned "
			"(%llu exports, %llu importers)\n",
			(unsigned long long)st.share_exports,
			(unsigned long long)st.share_importers);
		abort();
	}
	/* One registration cached, as at the baseline (an invalidation
	 * may have dropped it: its page-identity pipe with it). */
	if (!mrmgr_get(cache, buf, BUF_LEN, IBV_ACCESS_LOCAL_WRITE |
		       IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ, &r))
		mrmgr_put(r);
	{
		struct mrmgr_sim_stats ss;

		if (mrmgr_sim_query_stats(ctx, &ss, sizeof(ss)) || ss.live_mrs != 1) {
			fprintf(stderr, "fuzz_share_server: %llu MRs registered, "
				"1 expected (cache: %llu regions, %llu in use)\n",
				(unsigned long long)ss.live_mrs,
				(unsigned long long)st.regions,
				(unsigned long long)st.regions_in_use);
			abort();
		}
	}
	if (count_fds() != baseline) {
		fprintf(stderr, "fuzz_share_server: %d descriptors leaked; "
			"open now:\n", count_fds() - baseline);
		setenv("FUZZ_SHARE_VERBOSE", "1", 1);
		(void)count_fds();
		abort();
	}
	return 0;
}
