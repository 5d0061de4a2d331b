/*
 * Fuzz target: the share client (the importer's end of the sharing
 * helper) against a forged owner. The input decides the owner's lies: the
 * export table handed over in HELLO (a copy of a real simulated device's
 * table with header fields and entries rewritten, sealed or not, sequence
 * counts left odd), what descriptors come with the greeting, the table
 * rewritten again while the client has it mapped, and the messages that
 * follow (offers of real or forged MRs, revocations, goodbyes, garbage),
 * with accesses through whatever gets imported. Invariants checked after
 * each input (abort() on failure, reported as a crash): the client never
 * accepts a table that is not sealed against resizing, and no descriptor
 * is left open once it is destroyed.
 *
 * Build (libFuzzer and ASan/UBSan from Debian's clang; configure
 * --enable-fuzz builds every tests/fuzz/fuzz_*.c the same way). By hand,
 * from a build directory beside the sources:
 *   ../configure CC=clang --disable-shared \
 *     CFLAGS="-g -O1 -fsanitize=address,undefined,fuzzer-no-link"
 *   make lib/libmrmgr.la
 *   clang -g -O1 -fsanitize=fuzzer,address,undefined -I. -I../include \
 *     -I../share -I.. -I../lib/util -I../sim \
 *     ../tests/fuzz/fuzz_share_client.c lib/.libs/libmrmgr.a -libverbs \
 *     -lpthread -o fuzz_share_client
 * Run:
 *   ./fuzz_share_client -max_total_time=60 tests/fuzz/corpus/fuzz_share_client
 *   ./fuzz_share_client -runs=0 tests/fuzz/corpus/fuzz_share_client   (replay)
 *
 * A table entry left odd costs its reader the table's wait (50 ms): inputs
 * that do so run slower, by design. The owner pid in a forged header is
 * only ever this process or a child of it that sleeps, so the simulator's
 * cross-process accesses never reach another program.
 *
 * FUZZ_SHARE_VERBOSE=1 in the environment prints the descriptors counted and
 * the client's events.
 *
 * Only the public API and the data layouts (share_proto.h, sim_share.h)
 * are used.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <mrmgr/mrmgr.h>
#include <mrmgr/sim.h>
#include <mrmgr/share.h>

#include "share_proto.h"
#include "sim/sim_share.h"

#include "share_fuzz.h"

#define BUF_LEN (64 * 1024)
#define MAX_STEPS 32
#define ALL_SEALS (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL)

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static struct ibv_mr *mrs[2];
static char *buf;
static char *table;   /* the real table's bytes */
static pid_t sleeper; /* a child: the only other pid a forged header names */
static int null_fd;

static void setup(void)
{
	const int rw = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
		       IBV_ACCESS_REMOTE_READ;

	/* Every log line formatted (and dropped): a log argument read from
	 * memory that is gone is caught even at debug level. */
	mrmgr_set_log_handler(quiet, NULL, MRMGR_LOG_DEBUG);
	buf = mmap(NULL, BUF_LEN, PROT_READ | PROT_WRITE,
		   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	table = malloc(MRMGR__SIM_TBL_BYTES);
	null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (buf == MAP_FAILED || !table || null_fd < 0)
		abort();
	memset(buf, 'b', BUF_LEN);
	sleeper = fork();
	if (sleeper < 0)
		abort();
	if (sleeper == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		for (;;)
			pause();
	}
	if (mrmgr_sim_open(NULL, &ctx) || mrmgr_sim_alloc_pd(ctx, &pd) ||
	    mrmgr_sim_reg_mr(pd, buf, BUF_LEN / 2, rw, &mrs[0]) ||
	    mrmgr_sim_reg_mr(pd, buf + BUF_LEN / 2, BUF_LEN / 2,
			     IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ, &mrs[1]))
		abort();
	if (pread(ctx->cmd_fd, table, MRMGR__SIM_TBL_BYTES, 0) !=
	    (ssize_t)MRMGR__SIM_TBL_BYTES)
		abort();
}

/* The input, consumed a byte at a time (zeros once it runs out). */
struct in {
	const uint8_t *p;
	size_t n;
};

static uint8_t u8(struct in *in)
{
	uint8_t v = 0;

	if (in->n) {
		v = *in->p++;
		in->n--;
	}
	return v;
}

static uint32_t u32(struct in *in)
{
	uint32_t v = u8(in);

	v |= (uint32_t)u8(in) << 8;
	v |= (uint32_t)u8(in) << 16;
	return v | (uint32_t)u8(in) << 24;
}

static uint64_t u64(struct in *in)
{
	return u32(in) | (uint64_t)u32(in) << 32;
}

/* The offset of an MR's entry in the real table, found as a reader would. */
static off_t mr_entry_off(uint32_t handle)
{
	for (uint32_t i = 0; i < MRMGR__SIM_TBL_PROBES; i++) {
		uint32_t k = (handle + i) & (MRMGR__SIM_TBL_MRS - 1);
		size_t off = MRMGR__SIM_TBL_MRS_OFF + k * sizeof(struct mrmgr__sim_tbl_mr);
		struct mrmgr__sim_tbl_mr e;

		memcpy(&e, table + off, sizeof(e));
		if (e.state == MRMGR__SIM_ENTRY_LIVE && e.handle == handle)
			return (off_t)off;
	}
	return (off_t)MRMGR__SIM_TBL_MRS_OFF;
}

/*
 * One lie about the table, written through fd: a header field, a field of
 * one of the real MRs' entries, or 4 bytes anywhere past the header page.
 * Sequence counts stay even unless odd ones are allowed.
 */
static void poke(int fd, struct in *in, int odd_ok)
{
	uint8_t kind = u8(in), sel = u8(in);
	uint32_t v = u32(in);
	off_t off;

	switch (kind % 4) {
	case 0: { /* header */
		static const size_t fields[] = {
			offsetof(struct mrmgr__sim_tbl_hdr, magic),
			offsetof(struct mrmgr__sim_tbl_hdr, version),
			offsetof(struct mrmgr__sim_tbl_hdr, personality),
			offsetof(struct mrmgr__sim_tbl_hdr, nmrs),
			offsetof(struct mrmgr__sim_tbl_hdr, npds),
			offsetof(struct mrmgr__sim_tbl_hdr, owner_pid),
			offsetof(struct mrmgr__sim_tbl_hdr, owner_token),
			offsetof(struct mrmgr__sim_tbl_hdr, size),
			offsetof(struct mrmgr__sim_tbl_hdr, name),
			offsetof(struct mrmgr__sim_tbl_hdr, name) + 60,
		};
		off = (off_t)fields[sel % (sizeof(fields) / sizeof(fields[0]))];
		if (off == (off_t)offsetof(struct mrmgr__sim_tbl_hdr, owner_pid))
			v = (uint32_t)(v & 1 ? sleeper : getpid());
		break;
	}
	case 1: /* a field of a real MR's entry */
	case 2:
		off = mr_entry_off(mrs[sel & 1]->handle) + (off_t)(4 * ((sel >> 1) % 12));
		break;
	default: /* anywhere in the entries */
		off = (off_t)(MRMGR__SIM_TBL_HDR_BYTES +
			      (v % ((MRMGR__SIM_TBL_BYTES - MRMGR__SIM_TBL_HDR_BYTES) / 4)) * 4);
		v = u32(in);
		break;
	}
	/* An entry's first word is its sequence count. */
	if (off >= (off_t)MRMGR__SIM_TBL_MRS_OFF && !odd_ok &&
	    (off < (off_t)MRMGR__SIM_TBL_PDS_OFF
		     ? (off - MRMGR__SIM_TBL_MRS_OFF) % sizeof(struct mrmgr__sim_tbl_mr) == 0
		     : (off - MRMGR__SIM_TBL_PDS_OFF) % sizeof(struct mrmgr__sim_tbl_pd) == 0))
		v &= ~1u;
	(void)pwrite(fd, &v, sizeof(v), off);
}

/* A datagram to the client, fds attached (none when nfds is 0). */
static void send_msg(int sock, const void *m, size_t len, const int *fds,
		     size_t nfds)
{
	char ctl[CMSG_SPACE(4 * sizeof(int))] __attribute__((aligned(8)));
	struct iovec iov = { (void *)(uintptr_t)m, len };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };

	if (nfds) {
		struct cmsghdr *c;

		memset(ctl, 0, sizeof(ctl));
		mh.msg_control = ctl;
		mh.msg_controllen = CMSG_SPACE(nfds * sizeof(int));
		c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(nfds * sizeof(int));
		memcpy(CMSG_DATA(c), fds, nfds * sizeof(int));
	}
	(void)sendmsg(sock, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
}

static void message(struct mrmgr__share_msg *m, uint16_t type, uint64_t id)
{
	memset(m, 0, sizeof(*m));
	m->magic = MRMGR__SHARE_MAGIC;
	m->version = MRMGR__SHARE_PROTO;
	m->type = type;
	m->export_id = id;
	m->pid = (int32_t)getpid();
}

static struct mrmgr_export_desc desc_of(const struct ibv_mr *mr)
{
	struct mrmgr_export_desc d = {
		.version = MRMGR_EXPORT_DESC_VERSION, .size = sizeof(d),
		.export_id = mr->handle, .owner_pid = (int32_t)getpid(),
		.pd_handle = pd->handle, .mr_handle = mr->handle,
		.lkey = mr->lkey, .rkey = mr->rkey,
		.addr = (uint64_t)(uintptr_t)mr->addr, .length = mr->length,
	};

	snprintf(d.device, sizeof(d.device), "%s", ctx->device->name);
	return d;
}

/* Accesses through an import, at offsets and lengths of the input's. */
static void use(mrmgr_import_t *im, struct in *in)
{
	char tmp[512];
	uint64_t off = u32(in) % (BUF_LEN + 4096);
	size_t len = 1 + u8(in) * 2u;

	if (len > sizeof(tmp))
		len = sizeof(tmp);
	memset(tmp, 'f', sizeof(tmp));
	if (u8(in) & 1)
		(void)mrmgr_sim_write(mrmgr_import_pd(im), mrmgr_import_rkey(im),
				      mrmgr_import_addr(im) + off, tmp, len);
	else
		(void)mrmgr_sim_read(mrmgr_import_pd(im), mrmgr_import_rkey(im),
				     mrmgr_import_addr(im) + off, tmp, len);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static int baseline = -1;
	struct in in = { data, size };
	struct mrmgr__share_msg m;
	struct mrmgr_export_desc d;
	struct mrmgr_share_event ev;
	mrmgr_share_client_t *cli = NULL;
	mrmgr_import_t *ims[8];
	size_t nims = 0;
	int sv[2], fd, seals, fds[2];
	uint8_t flags;

	if (!ctx)
		setup();
	if (baseline < 0)
		baseline = count_fds();
	flags = u8(&in);
	/* The forged table: a copy of the real one, lied about. */
	fd = memfd_create("forged", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0 || write(fd, table, MRMGR__SIM_TBL_BYTES) != (ssize_t)MRMGR__SIM_TBL_BYTES)
		abort();
	for (uint8_t n = u8(&in) % 8; n; n--)
		poke(fd, &in, flags & 0x20);
	switch (flags & 3) {
	case 1:
		seals = 0;
		break;
	case 2:
		seals = F_SEAL_SHRINK | F_SEAL_GROW;
		break;
	default:
		seals = ALL_SEALS;
		break;
	}
	if (seals && fcntl(fd, F_ADD_SEALS, seals))
		abort();
	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv))
		abort();
	/* The greeting, with the forged table, nothing, /dev/null or two. */
	message(&m, MRMGR__MSG_HELLO, 0);
	m.desc.version = MRMGR_EXPORT_DESC_VERSION;
	fds[0] = (flags & 0xc) == 0x8 ? null_fd : fd;
	fds[1] = null_fd;
	send_msg(sv[0], &m, sizeof(m), fds,
		 (flags & 0xc) == 0x4 ? 0 : (flags & 0xc) == 0xc ? 2 : 1);
	if (mrmgr_share_client_create(sv[1], 0, &cli) == 0) {
		if ((flags & 0xc) == 0 && seals != ALL_SEALS) {
			fprintf(stderr, "fuzz_share_client: a table sealed %#x "
				"was accepted\n", seals);
			abort();
		}
	} else {
		cli = NULL;
		close(sv[1]);
	}
	for (int step = 0; cli && in.n && step < MAX_STEPS; step++) {
		uint8_t op = u8(&in);

		switch (op % 6) {
		case 0: /* an offer of a real MR, maybe with fields forged */
			d = desc_of(mrs[op >> 7]);
			if (op & 0x40) {
				uint8_t f = u8(&in);

				if (f & 1)
					d.pd_handle = u32(&in);
				if (f & 2)
					d.mr_handle = u32(&in);
				if (f & 4)
					d.rkey = u32(&in);
				if (f & 8)
					d.length = u64(&in);
				if (f & 16)
					d.size = u32(&in);
				if (f & 32)
					d.device[u8(&in) % sizeof(d.device)] = (char)u8(&in);
			}
			message(&m, MRMGR__MSG_OFFER, u8(&in));
			m.desc = d;
			send_msg(sv[0], &m, sizeof(m), NULL, 0);
			break;
		case 1:
			message(&m, MRMGR__MSG_REVOKE, u8(&in));
			send_msg(sv[0], &m, sizeof(m), NULL, 0);
			break;
		case 2: { /* anything at all */
			unsigned char raw[sizeof(m) + 16];
			size_t len = u8(&in) % sizeof(raw);

			message(&m, u8(&in) & 0xf, u8(&in));
			memcpy(raw, &m, sizeof(m));
			for (size_t i = 0; i < len && in.n; i++)
				raw[u8(&in) % sizeof(raw)] = u8(&in);
			send_msg(sv[0], raw, len, fds, u8(&in) % 3);
			break;
		}
		case 3: /* the owner rewrites its table under the client */
			poke(fd, &in, flags & 0x20);
			if (ftruncate(fd, 4096) == 0 && seals == ALL_SEALS)
				abort(); /* sealed: the kernel refuses */
			break;
		case 4:
			if (nims)
				use(ims[u8(&in) % nims], &in);
			break;
		case 5:
			if (nims) {
				size_t k = u8(&in) % nims;

				(void)mrmgr_share_client_release(cli, ims[k]);
				ims[k] = ims[--nims];
			}
			break;
		}
		/* Whatever came: handled now. */
		while (mrmgr_share_client_wait(cli, 0, &ev) == 0) {
			if (getenv("FUZZ_SHARE_VERBOSE"))
				fprintf(stderr, "event %u err %d\n", ev.type, ev.err);
			if (ev.type == MRMGR_SHARE_EV_IMPORTED && nims < 8)
				ims[nims++] = ev.import;
			if (ev.type == MRMGR_SHARE_EV_OWNER_GONE)
				break;
		}
		if (!in.n && nims)
			use(ims[0], &in);
	}
	if (cli && mrmgr_share_client_destroy(cli))
		abort();
	close(sv[0]);
	close(fd);
	if (count_fds() != baseline) {
		fprintf(stderr, "fuzz_share_client: %d descriptors leaked\n",
			count_fds() - baseline);
		abort();
	}
	return 0;
}
