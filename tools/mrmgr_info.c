/*
 * mrmgr_info: what libmrmgr would do in this process — its version, the
 * effective configuration and where each value came from, the
 * memory-event sources that would be active and what they cover, the
 * memlock budget, and each RDMA device's capabilities that matter to the
 * cache (rereg, ODP per transport, advise, import, MR limits).
 *
 * Only public calls: libmrmgr's query functions on a cache made with the
 * default attributes (as a program passing NULL would get), and
 * libibverbs (or the simulated HCA with --sim) for the device probes,
 * done the way the library does them.
 *
 * SPDX-License-Identifier: MIT
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <linux/capability.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <infiniband/verbs.h>
#include <mrmgr/mrmgr.h>
#include <mrmgr/sim.h>

/* The simulated HCA's documented defaults (mrmgr_sim_attr), set
 * explicitly so this tool can report them. */
#define SIM_MAX_MR (1u << 24)
#define SIM_MAX_MR_SIZE (UINT64_C(1) << 40)

/* A device under inspection: libibverbs' or the simulated one. */
struct dev {
	char name[64];
	int sim;
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	uint64_t max_mr_size;
	uint32_t max_mr;
};

static const char *source_name(uint32_t s)
{
	switch (s) {
	case MRMGR_CONFIG_SOURCE_DEFAULT: return "default";
	case MRMGR_CONFIG_SOURCE_ATTR: return "attribute";
	case MRMGR_CONFIG_SOURCE_ENV: return "environment";
	default: return "?";
	}
}

static void section(const char *title)
{
	printf("\n%s\n", title);
}

/* "8388608 (8 MiB)" */
static const char *human(uint64_t v, char *buf, size_t len)
{
	static const char *const units[] = { "B", "KiB", "MiB", "GiB", "TiB",
					     "PiB", "EiB" };
	unsigned int u = 0;
	double d = (double)v;

	if (v == UINT64_MAX) {
		snprintf(buf, len, "unlimited");
		return buf;
	}
	while (d >= 1024 && u < 6) {
		d /= 1024;
		u++;
	}
	snprintf(buf, len, "%" PRIu64 " (%.4g %s)", v, d, units[u]);
	return buf;
}

/* ------------------------------------------------------------ devices */

/* rxe: 0 mlx5, 1 rxe (6.1: no ODP), 2 rxe of 6.17+ (ODP, advice). */
static int dev_open_sim(struct dev *d, int rxe)
{
	struct mrmgr_sim_attr a = {
		.comp_mask = MRMGR_SIM_ATTR_PERSONALITY | MRMGR_SIM_ATTR_LIMITS |
			     MRMGR_SIM_ATTR_FLAGS,
		.personality = rxe ? MRMGR_SIM_RXE : MRMGR_SIM_MLX5,
		.flags = rxe == 2 ? MRMGR_SIM_FLAG_RXE_ODP : 0,
		.max_mr = SIM_MAX_MR,
		.max_mr_size = SIM_MAX_MR_SIZE,
	};
	int ret;

	memset(d, 0, sizeof(*d));
	d->sim = 1;
	snprintf(d->name, sizeof(d->name), "simulated HCA (%s personality)",
		 rxe == 2 ? "rxe-odp" : rxe ? "rxe" : "mlx5");
	if ((ret = mrmgr_sim_open(&a, &d->ctx)))
		return ret;
	if ((ret = mrmgr_sim_alloc_pd(d->ctx, &d->pd))) {
		mrmgr_sim_close(d->ctx);
		return ret;
	}
	d->max_mr = SIM_MAX_MR;
	d->max_mr_size = SIM_MAX_MR_SIZE;
	return 0;
}

static int dev_open_verbs(struct dev *d, struct ibv_device *dev)
{
	struct ibv_device_attr_ex ax;
	int ret;

	memset(d, 0, sizeof(*d));
	snprintf(d->name, sizeof(d->name), "%s", ibv_get_device_name(dev));
	d->ctx = ibv_open_device(dev);
	if (!d->ctx)
		return errno ? errno : ENODEV;
	memset(&ax, 0, sizeof(ax));
	ret = ibv_query_device_ex(d->ctx, NULL, &ax);
	if (ret) {
		ibv_close_device(d->ctx);
		return ret;
	}
	d->max_mr = (uint32_t)ax.orig_attr.max_mr;
	d->max_mr_size = ax.orig_attr.max_mr_size;
	d->pd = ibv_alloc_pd(d->ctx);
	if (!d->pd) {
		ret = errno ? errno : ENOMEM;
		ibv_close_device(d->ctx);
		return ret;
	}
	return 0;
}

static void dev_close(struct dev *d)
{
	if (d->sim) {
		mrmgr_sim_dealloc_pd(d->pd);
		mrmgr_sim_close(d->ctx);
	} else {
		ibv_dealloc_pd(d->pd);
		ibv_close_device(d->ctx);
	}
}

static int unsupported(int err)
{
	return err == EOPNOTSUPP || err == ENOSYS;
}

/* A scratch one-page MR, as the library's probes use. */
static struct ibv_mr *scratch_mr(struct dev *d, void **page, size_t psz,
				 int access)
{
	struct ibv_mr *mr = NULL;

	*page = mmap(NULL, psz, PROT_READ | PROT_WRITE,
		     MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (*page == MAP_FAILED)
		return NULL;
	memset(*page, 0, psz);
	if (d->sim) {
		if (mrmgr_sim_reg_mr(d->pd, *page, psz, access, &mr))
			mr = NULL;
	} else {
		mr = ibv_reg_mr(d->pd, *page, psz, access);
	}
	if (!mr)
		munmap(*page, psz);
	return mr;
}

static void scratch_free(struct dev *d, struct ibv_mr *mr, void *page, size_t psz)
{
	if (d->sim)
		mrmgr_sim_dereg_mr(mr);
	else
		ibv_dereg_mr(mr);
	munmap(page, psz);
}

/*
 * ibv_rereg_mr: an access "change" to the access the MR has, the probe
 * the library runs once per device. 1 works, 0 unsupported, -errno else.
 */
static int probe_rereg(struct dev *d)
{
	size_t psz = (size_t)sysconf(_SC_PAGESIZE);
	void *page;
	struct ibv_mr *mr = scratch_mr(d, &page, psz, IBV_ACCESS_LOCAL_WRITE);
	int ret, err;

	if (!mr)
		return -(errno ? errno : EIO);
	if (d->sim) {
		err = mrmgr_sim_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, d->pd,
					 NULL, 0, IBV_ACCESS_LOCAL_WRITE, NULL);
	} else {
		errno = 0;
		ret = ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, d->pd, NULL,
				   0, IBV_ACCESS_LOCAL_WRITE);
		err = ret ? (errno ? errno : EIO) : 0;
	}
	scratch_free(d, mr, page, psz);
	return !err ? 1 : unsupported(err) ? 0 : -err;
}

/* ibv_advise_mr (prefetch, synchronous) on a scratch explicit ODP MR: 1
 * when it works, 0 when the provider says EOPNOTSUPP, -errno else. */
static int probe_advise(struct dev *d)
{
	size_t psz = (size_t)sysconf(_SC_PAGESIZE);
	void *page;
	struct ibv_mr *mr = scratch_mr(d, &page, psz,
				       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ON_DEMAND);
	struct ibv_sge sge;
	int err;

	if (!mr)
		return -(errno ? errno : EIO);
	sge.addr = (uintptr_t)page;
	sge.length = (uint32_t)psz;
	sge.lkey = mr->lkey;
	err = d->sim ? mrmgr_sim_advise_mr(d->pd, IBV_ADVISE_MR_ADVICE_PREFETCH,
					   IBV_ADVISE_MR_FLAG_FLUSH, &sge, 1)
		     : ibv_advise_mr(d->pd, IBV_ADVISE_MR_ADVICE_PREFETCH,
				     IBV_ADVISE_MR_FLAG_FLUSH, &sge, 1);
	scratch_free(d, mr, page, psz);
	return !err ? 1 : unsupported(err) ? 0 : -err;
}

/* ibv_import_device on a copy of the command descriptor. */
static int probe_import(struct dev *d)
{
	struct ibv_context *ic = NULL;
	int fd = dup(d->ctx->cmd_fd), err = 0;

	if (fd < 0)
		return -errno;
	if (d->sim) {
		err = mrmgr_sim_import_device(fd, &ic);
	} else {
		errno = 0;
		ic = ibv_import_device(fd);
		if (!ic)
			err = errno ? errno : EOPNOTSUPP;
	}
	if (ic) {
		if (d->sim)
			mrmgr_sim_close(ic);
		else
			ibv_close_device(ic);
	}
	close(fd); /* the import keeps its own copy, or failed */
	return !err ? 1 : unsupported(err) ? 0 : -err;
}

static const char *verdict(int v, char *buf, size_t len)
{
	if (v > 0)
		snprintf(buf, len, "yes");
	else if (v == 0)
		snprintf(buf, len, "no (EOPNOTSUPP)");
	else
		snprintf(buf, len, "unknown (probe failed: %s)", strerror(-v));
	return buf;
}

static void print_odp_ops(const char *tr, uint32_t caps)
{
	static const struct {
		uint32_t bit;
		const char *name;
	} ops[] = {
		{ IBV_ODP_SUPPORT_SEND, "send" },
		{ IBV_ODP_SUPPORT_RECV, "recv" },
		{ IBV_ODP_SUPPORT_WRITE, "write" },
		{ IBV_ODP_SUPPORT_READ, "read" },
		{ IBV_ODP_SUPPORT_ATOMIC, "atomic" },
		{ IBV_ODP_SUPPORT_SRQ_RECV, "srq_recv" },
	};

	printf("    ODP on %-3s          ", tr);
	if (!caps)
		printf("none");
	for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++)
		if (caps & ops[i].bit)
			printf("%s ", ops[i].name);
	printf("\n");
}

/* The running kernel's release, for the quirk line. */
static const char *kernel_release(void)
{
	static struct utsname u;

	return uname(&u) == 0 ? u.release : "?";
}

static int print_device(struct dev *d)
{
	struct mrmgr_odp_info oi;
	mrmgr_cache_t *c;
	char b1[64], b2[64];
	int ret;

	printf("  %s\n", d->name);
	printf("    max_mr_size         %s\n", human(d->max_mr_size, b1, sizeof(b1)));
	printf("    max_mr              %" PRIu32 "\n", d->max_mr);
	printf("    ibv_rereg_mr        %s\n", verdict(probe_rereg(d), b1, sizeof(b1)));
	ret = mrmgr_cache_create(d->pd, NULL, &c);
	if (ret) {
		printf("    (no cache: %s)\n", strerror(ret));
		return 1;
	}
	ret = mrmgr_cache_query_odp(c, &oi, sizeof(oi));
	mrmgr_cache_destroy(c);
	if (ret)
		return 1;
	printf("    ODP                 %s%s\n",
	       oi.general_caps & IBV_ODP_SUPPORT ? "explicit" : "no",
	       oi.general_caps & IBV_ODP_SUPPORT_IMPLICIT ? ", implicit" : "");
	print_odp_ops("rc", oi.rc_caps);
	print_odp_ops("uc", oi.uc_caps);
	print_odp_ops("ud", oi.ud_caps);
	print_odp_ops("xrc", oi.xrc_caps);
	if (oi.device_quirks & MRMGR_ODP_QUIRK_OVERRIDDEN)
		printf("    ODP quirk           rxe page-offset bug (kernel %s): "
		       "OVERRIDDEN by MRMGR_RXE_ODP_QUIRK=off, ODP caches use ODP\n",
		       kernel_release());
	else if (oi.device_quirks & MRMGR_ODP_QUIRK_PAGE_OFFSET)
		printf("    ODP quirk           rxe page-offset bug (kernel %s): "
		       "ODP caches fall back to pinned (doc/odp.md)\n",
		       kernel_release());
	else if (oi.general_caps & IBV_ODP_SUPPORT)
		printf("    ODP quirk           none known\n");
	if (oi.general_caps & IBV_ODP_SUPPORT)
		printf("    ibv_advise_mr       %s (max %u SGEs per call)\n",
		       verdict(probe_advise(d), b1, sizeof(b1)), oi.max_sge);
	else
		printf("    ibv_advise_mr       not probed: no ODP (mrmgr_prefetch "
		       "is a counted no-op)\n");
	printf("    ibv_import_device   %s\n", verdict(probe_import(d), b2, sizeof(b2)));
	return 0;
}

/* ------------------------------------------------------------ sections */

static int print_config(mrmgr_cache_t *c, const char *where)
{
	struct mrmgr_config_entry e[64];
	size_t n;
	const char *ll = getenv("MRMGR_LOG_LEVEL");

	section("Configuration");
	printf("  (a cache with default attributes on %s;\n"
	       "   what a program sets in its attributes takes precedence "
	       "over the environment:\n   see mrmgr-env(7))\n", where);
	if (mrmgr_cache_query_config(c, e, 64, sizeof(e[0]), &n))
		return 1;
	for (size_t i = 0; i < n && i < 64; i++) {
		printf("  %-20s %-22s %s", e[i].name, e[i].value,
		       source_name(e[i].source));
		if (e[i].note[0])
			printf(" (%s)", e[i].note);
		printf("\n");
	}
	printf("  %-20s %-22s %s\n", "MRMGR_LOG_LEVEL", ll ? ll : "warn",
	       ll ? "environment" : "default");
	return 0;
}

/*
 * Memory calls defined outside libc (gperftools' tcmalloc defines its
 * own mmap, munmap, mremap, sbrk) and code with raw memory system calls:
 * what was found, and what the library does about it.
 */
static void print_foreign(const struct mrmgr_monitor_info *mi)
{
	static const char *const calls[] = { "mmap", "mmap64", "munmap",
		"mremap", "madvise", "posix_madvise", "brk", "sbrk", "shmat",
		"shmdt" };

	printf("  defined outside libc ");
	if (!mi->foreign_calls) {
		printf("nothing: every memory call the process makes is libc's\n");
	} else {
		printf("%s (first found) defines", mi->foreign_object);
		for (unsigned int i = 0; i < sizeof(calls) / sizeof(calls[0]); i++)
			if (mi->foreign_calls & (1u << i))
				printf(" %s", calls[i]);
		if (mi->foreign_followed == mi->foreign_calls && !mi->foreign_error)
			printf(": followed (%" PRIu64 " call sites redirected "
			       "through libmrmgr's wrappers, both sides)\n",
			       mi->foreign_sites);
		else
			printf(": NOT followed (%s): userfaultfd watches "
			       "instead where it runs, else nothing is cached\n",
			       strerror(mi->foreign_error));
	}
	if (mi->raw_runtimes)
		printf("  raw memory calls     %s%s%s: the patched libc cannot see "
		       "them; userfaultfd watches instead where it runs, else "
		       "nothing is cached\n",
		       mi->raw_runtimes & MRMGR_MONITOR_RAW_IO_URING
			       ? "liburing (IORING_OP_MADVISE)" : "",
		       mi->raw_runtimes == (MRMGR_MONITOR_RAW_IO_URING |
					    MRMGR_MONITOR_RAW_GO) ? ", " : "",
		       mi->raw_runtimes & MRMGR_MONITOR_RAW_GO
			       ? "a Go runtime (its scavenger's madvise/munmap)" : "");
}

static int print_monitor(mrmgr_cache_t *c)
{
	static const char *const modes[] = { "auto", "uffd", "hooks",
					     "external", "none", "patch" };
	struct mrmgr_monitor_info mi;

	section("Memory-event sources");
	if (mrmgr_cache_query_monitor(c, &mi, sizeof(mi)))
		return 1;
	printf("  mode                 %s\n", mi.mode < 6 ? modes[mi.mode] : "?");
	printf("  libc patched         ");
	if (mi.sources & MRMGR_MONITOR_SRC_PATCH)
		printf("active: anonymous private memory, both sides of every "
		       "munmap/mremap/madvise/mmap/brk/shmat/shmdt, glibc's "
		       "internal calls included (not raw syscall())\n");
	else if (mi.patch_error)
		printf("not active: %s\n", strerror(mi.patch_error));
	else if (mi.foreign_error || mi.raw_runtimes)
		printf("installed, but it vouches for nothing: this process "
		       "changes memory with calls it cannot see (below)\n");
	else
		printf("not used in this mode\n");
	if (mi.mode == MRMGR_MONITOR_AUTO || mi.mode == MRMGR_MONITOR_PATCH)
		print_foreign(&mi);
	if (mi.sources & MRMGR_MONITOR_SRC_PATCH) {
		/* Beside another patcher (UCX's libucm, libfabric's
		 * memhooks) the hooks call its code: say so, since a user
		 * debugging a slow munmap will want to know. */
		printf("  chained over         ");
		if (mi.patch_chained)
			printf("another library's hooks on %d of the "
			       "functions (mask %#x)\n",
			       __builtin_popcount(mi.patch_chained),
			       mi.patch_chained);
		else
			printf("nothing: no other patcher was there\n");
		printf("  taken over           %" PRIu32 " time%s%s\n",
		       mi.patch_overwrites, mi.patch_overwrites == 1 ? "" : "s",
		       mi.patch_overwrites
			       ? " by another library (every cache invalidated "
				 "each time, then chained on top again)"
			       : "");
	}
	printf("  userfaultfd          ");
	if (mi.sources & MRMGR_MONITOR_SRC_UFFD)
		printf("active%s%s%s: anonymous private memory (unmap, remap, "
		       "discard)\n",
		       mi.uffd_flags & MRMGR_MONITOR_UFFD_USER_MODE_ONLY
			       ? ", user-mode only" : "",
		       mi.uffd_flags & MRMGR_MONITOR_UFFD_DEVICE
			       ? ", via /dev/userfaultfd" : "",
		       mi.uffd_flags & MRMGR_MONITOR_UFFD_PROCMAP_QUERY
			       ? ", PROCMAP_QUERY" : "");
	else if (mi.uffd_error)
		printf("not active: %s\n", strerror(mi.uffd_error));
	else
		printf("not used in this mode\n");
	if (mi.sources & MRMGR_MONITOR_SRC_UFFD)
		printf("  watch budget         %" PRIu64 " runs (vm.max_map_count)\n",
		       mi.watch_budget);
	printf("  libmrmgr_hooks.so    ");
	if (mi.sources & MRMGR_MONITOR_SRC_HOOKS)
		printf("active: anonymous private memory (libc calls through "
		       "the symbol table, not raw syscall())\n");
	else if (mi.hooks_error == ENOENT)
		printf("not loaded (LD_PRELOAD it, or link it first)\n");
	else if (mi.hooks_error)
		printf("not active: %s\n", strerror(mi.hooks_error));
	else
		printf("not used in this mode\n");
	printf("  external             %s\n",
	       mi.sources & MRMGR_MONITOR_SRC_EXTERNAL
		       ? "trusted: the program reports every change with "
			 "mrmgr_notify_unmap()/mrmgr_invalidate()"
		       : "no");
	if (!mi.sources)
		printf("  => %s\n", mi.mode == MRMGR_MONITOR_NONE
			   ? "NOTHING watched and everything cached: stale "
			     "registrations possible"
			   : "nothing can watch memory: nothing will be cached");
	else
		printf("  never watched        shared memory (MAP_SHARED, shmem, "
		       "memfd, SysV), device memory, private file mappings: "
		       "not cached\n");
	return 0;
}

/*
 * Said before everything else when no source watches memory (nothing
 * will be cached): the user who runs mrmgr_info to find out why every get
 * registers should not have to read the sections below to learn it, nor
 * what to do about it.
 */
static void print_warning(mrmgr_cache_t *c)
{
	struct mrmgr_monitor_info mi;

	if (mrmgr_cache_query_monitor(c, &mi, sizeof(mi)) || mi.sources ||
	    mi.mode == MRMGR_MONITOR_NONE) /* none: asked for, said below */
		return;
	section("Warning");
	printf("  nothing can watch memory here: nothing will be cached, "
	       "every get registers\n");
	if (mi.patch_error)
		printf("  libc's entry points could not be patched: %s%s\n",
		       strerror(mi.patch_error),
		       mi.patch_error == ENOEXEC
			       ? " (a libc we do not know: please report this "
				 "output, README \"Reporting a bug\")"
			       : "");
	printf("  what to do: MRMGR_MONITOR=uffd (userfaultfd), or "
	       "LD_PRELOAD=libmrmgr_hooks.so, or\n"
	       "  MRMGR_MONITOR=external and report changes with "
	       "mrmgr_notify_unmap() (doc/monitor.md)\n");
}

static int cap_ipc_lock(void)
{
	struct __user_cap_header_struct h = {
		.version = _LINUX_CAPABILITY_VERSION_3,
	};
	struct __user_cap_data_struct d[_LINUX_CAPABILITY_U32S_3];

	if (syscall(SYS_capget, &h, d))
		return -1;
	return !!(d[CAP_IPC_LOCK / 32].effective & (1u << (CAP_IPC_LOCK % 32)));
}

static int print_memlock(mrmgr_cache_t *c)
{
	struct mrmgr_config_entry e[64];
	struct rlimit rl;
	size_t n;
	char b1[64], b2[64];
	int cap = cap_ipc_lock();

	section("Memlock budget");
	if (getrlimit(RLIMIT_MEMLOCK, &rl))
		return 1;
	printf("  RLIMIT_MEMLOCK       soft %s, hard %s\n",
	       human(rl.rlim_cur == RLIM_INFINITY ? UINT64_MAX : rl.rlim_cur,
		     b1, sizeof(b1)),
	       human(rl.rlim_max == RLIM_INFINITY ? UINT64_MAX : rl.rlim_max,
		     b2, sizeof(b2)));
	printf("  CAP_IPC_LOCK         %s (euid %u)\n",
	       cap < 0 ? "unknown" : cap ? "yes: the kernel does not enforce "
				       "the rlimit on pinned pages" : "no",
	       (unsigned int)geteuid());
	if (mrmgr_cache_query_config(c, e, 64, sizeof(e[0]), &n))
		return 1;
	for (size_t i = 0; i < n && i < 64; i++)
		if (!strcmp(e[i].name, "MRMGR_MAX_BYTES"))
			printf("  cache byte limit     %s, %s%s%s%s\n",
			       human(strtoull(e[i].value, NULL, 10), b1, sizeof(b1)),
			       source_name(e[i].source), e[i].note[0] ? " (" : "",
			       e[i].note, e[i].note[0] ? ")" : "");
	return 0;
}

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: mrmgr_info [--sim[=mlx5|rxe|rxe-odp]] [--version] [--help]\n"
		"Print what libmrmgr would do in this process: its version, the\n"
		"effective configuration and where each value comes from, the\n"
		"memory-event sources, the memlock budget, each RDMA device's\n"
		"capabilities and the memory domains (CUDA; --sim: the simulated\n"
		"device allocator). --sim shows the simulated HCA instead of the\n"
		"RDMA devices (rxe-odp: rxe of Linux 6.17+, with ODP).\n");
}

/* The CUDA domain says once, at info level, whether it follows frees:
 * kept for its line, every other line passed on to standard error. */
static void domain_said(enum mrmgr_log_level level, const char *msg, void *arg)
{
	static const char head[] = "CUDA memory domain: frees ";
	const char *p = strstr(msg, head);

	if (p)
		snprintf(arg, 256, "%s", p + sizeof(head) - 1);
	else if (level <= MRMGR_LOG_WARN)
		fprintf(stderr, "%s\n", msg);
}

/* The memory domains mrmgr_cache_create_device() can serve. */
static void print_domains(int sim)
{
	char frees[256] = "";
	mrmgr_domain_t *d;
	int ret;

	section("Memory domains");
	mrmgr_set_log_handler(domain_said, frees, MRMGR_LOG_INFO);
	ret = mrmgr_domain_open_cuda(&d);
	mrmgr_set_log_handler(NULL, NULL, MRMGR_LOG_WARN);
	if (!ret) {
		printf("  cuda   present: libcuda.so.1 loaded, cuInit() done; "
		       "frees %s\n", frees[0] ? frees : "(not said)");
		mrmgr_domain_destroy(d);
	} else {
		printf("  cuda   %s\n", ret == ENODEV
		       ? "absent: libcuda.so.1 not found"
		       : ret == ENXIO ? "off: cuInit() failed (no device)"
		       : "off: libcuda.so.1 lacks cuMemGetHandleForAddressRange "
			 "(CUDA 11.7 or later)");
	}
	if (sim) {
		struct mrmgr_sim_gpu *g;

		ret = mrmgr_sim_gpu_open(&g);
		if (!ret) {
			ret = mrmgr_domain_create(mrmgr_sim_gpu_ops(), g, &d);
			if (!ret)
				mrmgr_domain_destroy(d);
			mrmgr_sim_gpu_close(g);
		}
		printf("  sim    %s\n", ret ? strerror(ret)
		       : "present: the simulated device allocator (mrmgr_sim_gpu_*)");
	}
}

int main(int argc, char **argv)
{
	struct ibv_device **list = NULL;
	struct dev cfgdev, d;
	int sim = 0, rxe = 0, ndev = 0, bad = 0, ret;
	mrmgr_cache_t *c;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--sim") || !strcmp(argv[i], "--sim=mlx5")) {
			sim = 1;
		} else if (!strcmp(argv[i], "--sim=rxe")) {
			sim = rxe = 1;
		} else if (!strcmp(argv[i], "--sim=rxe-odp")) {
			sim = 1;
			rxe = 2;
		} else if (!strcmp(argv[i], "--version")) {
			printf("libmrmgr %s\n", mrmgr_version_string());
			return 0;
		} else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
			usage(stdout);
			return 0;
		} else {
			fprintf(stderr, "mrmgr_info: unknown option %s\n", argv[i]);
			usage(stderr);
			return 2;
		}
	}

	printf("Version\n  libmrmgr %s\n", mrmgr_version_string());
	if (!sim) {
		list = ibv_get_device_list(&ndev);
		if (!list)
			ndev = 0;
	}
	/* The configuration and monitor sections come from a cache on the
	 * first device, or the simulated HCA when there is none. */
	ret = ndev ? dev_open_verbs(&cfgdev, list[0]) : dev_open_sim(&cfgdev, rxe);
	if (ret) {
		fprintf(stderr, "mrmgr_info: opening %s: %s\n",
			ndev ? ibv_get_device_name(list[0]) : "the simulated HCA",
			strerror(ret));
		if (list)
			ibv_free_device_list(list);
		return 1;
	}
	ret = mrmgr_cache_create(cfgdev.pd, NULL, &c);
	if (ret) {
		fprintf(stderr, "mrmgr_info: mrmgr_cache_create on %s: %s\n",
			cfgdev.name, strerror(ret));
		dev_close(&cfgdev);
		if (list)
			ibv_free_device_list(list);
		return 1;
	}
	print_warning(c);
	bad |= print_config(c, cfgdev.name);
	bad |= print_monitor(c);
	bad |= print_memlock(c);
	mrmgr_cache_destroy(c);

	section("Devices");
	if (sim) {
		bad |= print_device(&cfgdev);
	} else if (!ndev) {
		printf("  no RDMA device (mrmgr_info --sim shows the simulated HCA)\n");
	} else {
		bad |= print_device(&cfgdev);
		for (int i = 1; i < ndev; i++) {
			ret = dev_open_verbs(&d, list[i]);
			if (ret) {
				printf("  %s: cannot open: %s\n",
				       ibv_get_device_name(list[i]), strerror(ret));
				bad = 1;
				continue;
			}
			bad |= print_device(&d);
			dev_close(&d);
		}
	}
	print_domains(sim);
	dev_close(&cfgdev);
	if (list)
		ibv_free_device_list(list);
	return bad ? 1 : 0;
}
