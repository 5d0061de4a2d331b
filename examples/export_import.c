/*
 * Sharing a registered buffer with another process.
 *
 *   examples/export_import          the first RDMA device, else the
 *                                   simulated mlx5-like HCA
 *   examples/export_import --sim    the simulated mlx5-like HCA
 *   examples/export_import --rxe    a simulated rxe-like HCA (no import)
 *
 * The owner (this process) keeps a buffer in its registration cache and
 * offers it through a share server; the importer (a forked child, as any
 * process on the host could be) connects with a share client over a
 * UNIX-domain socket pair, receives the device's command descriptor,
 * imports the owner's MR (ibv_import_device/_pd/_mr) and may post work
 * with the owner's keys: no registration of its own.
 *
 * The helper keeps the lifetimes right: the owner's MR stays registered
 * while the importer holds it (even when the owner's cache would evict or
 * invalidate it), the importer is told when the owner invalidates the
 * buffer, and the MR is deregistered once the importer has let go.
 *
 * On the simulated HCA the importer writes into the owner's buffer
 * through the imported keys (mrmgr_sim_write(), reaching the owner's
 * memory across processes) and the owner prints what arrived. Devices
 * without import (rdma_rxe, siw) refuse with EOPNOTSUPP, and the program
 * says so.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <mrmgr/mrmgr.h>
#include <mrmgr/sim.h>
#include <mrmgr/share.h>

#define LEN (64u << 10)
#define TMO 10000

static int check(int ret, const char *what)
{
	if (ret)
		fprintf(stderr, "%s: %s\n", what, strerror(ret));
	return ret;
}

/* ------------------------------------------------------------ importer */

static int importer(int sock, int note, int simulated)
{
	mrmgr_share_client_t *cli;
	struct mrmgr_share_event ev;
	static const char msg[] = "written by the importer through the owner's keys";
	mrmgr_import_t *imp;

	if (check(mrmgr_share_client_create(sock, TMO, &cli), "importer: connect") ||
	    check(mrmgr_share_client_wait(cli, TMO, &ev), "importer: wait"))
		return 1;
	if (ev.type != MRMGR_SHARE_EV_IMPORTED) {
		fprintf(stderr, "importer: the import failed: %s\n", strerror(ev.err));
		return 1;
	}
	imp = ev.import;
	printf("importer (pid %d): imported export %llu: [%#llx, +%llu) "
	       "lkey %#x rkey %#x, no registration of its own\n", (int)getpid(),
	       (unsigned long long)mrmgr_import_id(imp),
	       (unsigned long long)mrmgr_import_addr(imp),
	       (unsigned long long)mrmgr_import_length(imp),
	       mrmgr_import_lkey(imp), mrmgr_import_rkey(imp));
	fflush(stdout);
	/* The simulated RDMA WRITE reaches the owner's memory. */
	if (simulated &&
	    check(mrmgr_sim_write(mrmgr_import_pd(imp), mrmgr_import_rkey(imp),
				  mrmgr_import_addr(imp), msg, sizeof(msg)),
		  "importer: write"))
		return 1;
	if (write(note, "w", 1) != 1)
		return 1;
	/* Until the owner says otherwise, the MR is ours to use. */
	if (check(mrmgr_share_client_wait(cli, TMO, &ev), "importer: wait"))
		return 1;
	printf("importer: %s; releasing the import\n",
	       ev.type == MRMGR_SHARE_EV_REVOKED ? "the owner revoked it"
						 : "the owner went away");
	fflush(stdout);
	mrmgr_share_client_release(cli, imp);
	mrmgr_share_client_destroy(cli);
	return 0;
}

/* ------------------------------------------------------------ owner */

static void on_event(const struct mrmgr_share_event *ev, void *arg)
{
	static const char *const names[] = {
		[MRMGR_SHARE_EV_ATTACH] = "the importer attached",
		[MRMGR_SHARE_EV_DETACH] = "the importer detached",
		[MRMGR_SHARE_EV_DECLINE] = "the importer declined",
		[MRMGR_SHARE_EV_PEER_GONE] = "the importer went away",
		[MRMGR_SHARE_EV_REVOKE_SENT] = "revocation sent",
	};

	(void)arg;
	if (ev->type < sizeof(names) / sizeof(names[0]) && names[ev->type])
		printf("owner: export %llu: %s\n",
		       (unsigned long long)ev->export_id, names[ev->type]);
}

static uint64_t live_exports(mrmgr_cache_t *cache)
{
	struct mrmgr_stats st;

	mrmgr_cache_query_stats(cache, &st, sizeof(st));
	return st.share_exports;
}

int main(int argc, char **argv)
{
	int rxe = argc > 1 && !strcmp(argv[1], "--rxe");
	int sim = rxe || (argc > 1 && !strcmp(argv[1], "--sim"));
	struct mrmgr_sim_attr sa = {
		.comp_mask = MRMGR_SIM_ATTR_PERSONALITY,
		.personality = rxe ? MRMGR_SIM_RXE : MRMGR_SIM_MLX5,
	};
	struct mrmgr_share_server_attr srv_attr = {
		.comp_mask = MRMGR_SHARE_SERVER_ATTR_EVENTS, .event_fn = on_event,
	};
	struct ibv_context *ctx = NULL;
	struct ibv_pd *pd = NULL;
	mrmgr_cache_t *cache;
	mrmgr_share_server_t *srv;
	mrmgr_region_t *r;
	uint64_t peer, id;
	int sock[2], note[2], st = 0, ret;
	char *buf;
	pid_t pid;

	if (argc > 2 || (argc == 2 && !sim)) {
		fprintf(stderr, "usage: %s [--sim | --rxe]\n", argv[0]);
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0); /* two processes print */
	if (!sim) {
		struct ibv_device **devs = ibv_get_device_list(NULL);

		if (devs && devs[0])
			ctx = ibv_open_device(devs[0]);
		if (devs)
			ibv_free_device_list(devs);
		if (ctx && !(pd = ibv_alloc_pd(ctx)))
			return check(errno ? errno : ENOMEM, "allocate a PD");
	}
	sim = !ctx;
	if (sim && (check(mrmgr_sim_open(&sa, &ctx), "open the simulated HCA") ||
		    check(mrmgr_sim_alloc_pd(ctx, &pd), "allocate a PD")))
		return 1;
	printf("device: %s%s\n", ctx->device->name, sim ? " (simulated)" : "");

	buf = mmap(NULL, LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
		   -1, 0);
	if (buf == MAP_FAILED || check(mrmgr_cache_create(pd, NULL, &cache), "cache"))
		return 1;
	memset(buf, 0, LEN);
	ret = mrmgr_share_server_create(cache, NULL, &srv_attr, &srv);
	if (ret == EOPNOTSUPP) {
		/* rdma_rxe, siw: no ibv_import_*. Nothing to share; say so. */
		printf("export: not supported on %s (%s): cross-process MR "
		       "sharing needs a device with import (mlx5)\n",
		       ctx->device->name, strerror(ret));
		mrmgr_cache_destroy(cache);
		munmap(buf, LEN);
		goto out;
	}
	if (check(ret, "share server"))
		return 1;

	if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sock) ||
	    pipe(note))
		return 1;
	fflush(stdout);
	pid = fork();
	if (pid < 0)
		return 1;
	if (pid == 0) {
		close(sock[0]);
		close(note[0]);
		_exit(importer(sock[1], note[1], sim));
	}
	close(sock[1]);
	close(note[1]);

	if (check(mrmgr_share_server_add_peer(srv, sock[0], &peer), "add the peer") ||
	    check(mrmgr_get(cache, buf, LEN, IBV_ACCESS_LOCAL_WRITE |
			    IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ, &r),
		  "get") ||
	    check(mrmgr_share_server_offer(srv, peer, r, 0, &id), "offer"))
		return 1;
	printf("owner (pid %d): offered [%p, +%u) rkey %#x\n", (int)getpid(),
	       (void *)buf, LEN, mrmgr_region_rkey(r));
	fflush(stdout);
	mrmgr_put(r); /* the export keeps it registered for the importer */

	/* Serve until the importer has attached and used the buffer. */
	for (int i = 0; i < TMO / 50 && !mrmgr_share_server_importers(srv, id); i++)
		mrmgr_share_server_progress(srv, 50);
	{
		struct pollfd p = { note[0], POLLIN, 0 };

		if (poll(&p, 1, TMO) <= 0) {
			fprintf(stderr, "owner: the importer did not report\n");
			return 1;
		}
	}
	if (sim)
		printf("owner: the buffer now reads \"%s\"\n", buf);

	/* The buffer is going away: the importer must let go first. */
	mrmgr_invalidate(cache, buf, LEN);
	for (int i = 0; i < TMO / 50 && live_exports(cache); i++)
		mrmgr_share_server_progress(srv, 50);
	printf("owner: %s\n", live_exports(cache) ? "the importer did not detach"
						  : "MR deregistered after the detach");
	munmap(buf, LEN);
	waitpid(pid, &st, 0);
	mrmgr_share_server_destroy(srv, MRMGR_DESTROY_FORCE);
	mrmgr_cache_destroy(cache);
	close(note[0]);
out:
	if (sim) {
		mrmgr_sim_dealloc_pd(pd);
		mrmgr_sim_close(ctx);
	} else {
		ibv_dealloc_pd(pd);
		ibv_close_device(ctx);
	}
	return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
}
