/*
 * mrmgr_perftest(1): on the device the user names (default: the first;
 * --sim for the simulated HCA), what ibv_reg_mr/ibv_dereg_mr cost from
 * 4 KiB to --max, what ibv_rereg_mr and ibv_advise_mr cost, and what
 * libmrmgr's cache saves on the demo's message-passing workload, in a
 * table, CSV, JSON and a picture. Never uses more memory than --max and
 * the memlock budget allow; SIGINT deregisters every MR before exiting.
 *
 * SPDX-License-Identifier: MIT
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <linux/capability.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include "perftest.h"

#define PROG "mrmgr_perftest"

volatile sig_atomic_t pt_stop;
static const char *cur_phase = "start";
static uint64_t phase_t0, last_progress;
static int progress_shown;

uint64_t pt_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

void pt_phase(const char *name)
{
	pt_progress_end();
	cur_phase = name;
	phase_t0 = pt_now_ns();
	last_progress = 0;
}

void pt_progress(const char *fmt, ...)
{
	uint64_t now = pt_now_ns();
	va_list ap;

	if (now - phase_t0 < 1000000000u || now - last_progress < 1000000000u)
		return;
	last_progress = now;
	fprintf(stderr, PROG ": %s: ", cur_phase);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, " (%.0f s)\n", (double)(now - phase_t0) / 1e9);
	progress_shown = 1;
}

void pt_progress_end(void)
{
	if (progress_shown && !pt_stop)
		fprintf(stderr, PROG ": %s: done in %.1f s\n", cur_phase,
			(double)(pt_now_ns() - phase_t0) / 1e9);
	progress_shown = 0;
}

const char *pt_size(uint64_t v, char *buf, size_t len)
{
	static const char *const u[] = { "B", "KiB", "MiB", "GiB", "TiB" };
	unsigned int i = 0;

	while (i < 4 && v >= 1024 && v % 1024 == 0) {
		v /= 1024;
		i++;
	}
	snprintf(buf, len, "%" PRIu64 "%s", v, u[i]);
	return buf;
}

/* The test hook: MRMGR_PERFTEST_TEST_SIGINT=PHASE:N. */
void pt_checkpoint(const char *phase)
{
	static long count;
	const char *h = getenv("MRMGR_PERFTEST_TEST_SIGINT"), *colon;

	if (!h || !(colon = strchr(h, ':')) ||
	    strncmp(h, phase, (size_t)(colon - h)) || phase[colon - h])
		return;
	if (++count == strtol(colon + 1, NULL, 10))
		raise(SIGINT);
}

static void on_signal(int sig)
{
	(void)sig;
	pt_stop = 1;
}

static int parse_size(const char *s, uint64_t *v)
{
	char *end;
	unsigned long long n;

	errno = 0;
	n = strtoull(s, &end, 10);
	if (errno || end == s || *s == '-')
		return EINVAL;
	switch (*end) {
	case 'k': case 'K': n <<= 10; end++; break;
	case 'm': case 'M': n <<= 20; end++; break;
	case 'g': case 'G': n <<= 30; end++; break;
	case 't': case 'T': n <<= 40; end++; break;
	}
	if (!strcmp(end, "iB") || !strcmp(end, "B"))
		end += strlen(end);
	if (*end || n < 4096)
		return EINVAL;
	*v = n;
	return 0;
}

static int cap_ipc_lock(void)
{
	struct __user_cap_header_struct h = { .version = _LINUX_CAPABILITY_VERSION_3 };
	struct __user_cap_data_struct c[_LINUX_CAPABILITY_U32S_3];

	return !syscall(SYS_capget, &h, c) &&
	       (c[CAP_IPC_LOCK / 32].effective & (1u << (CAP_IPC_LOCK % 32)));
}

/* "11.8GiB": for figures that are not a round number of units. */
static const char *approx(uint64_t v, char *buf, size_t len)
{
	static const char *const u[] = { "B", "KiB", "MiB", "GiB", "TiB" };
	double d = (double)v;
	unsigned int i = 0;

	if (v % 1024 == 0 && v / 1024 % 1024 == 0)
		return pt_size(v, buf, len);
	while (i < 4 && d >= 1024) {
		d /= 1024;
		i++;
	}
	snprintf(buf, len, "%.1f%s", d, u[i]);
	return buf;
}

/* The memlock budget as libmrmgr sets its default byte limit: the
 * rlimit, or half the RAM with CAP_IPC_LOCK or no limit. */
static void set_limit(struct pt_opts *o, char *memlock, size_t len)
{
	struct rlimit rl = { 0, 0 };
	uint64_t phys = (uint64_t)sysconf(_SC_PHYS_PAGES) * (uint64_t)sysconf(_SC_PAGESIZE);
	uint64_t budget;
	int cap = cap_ipc_lock();
	char b1[32], b2[32];

	getrlimit(RLIMIT_MEMLOCK, &rl);
	if (rl.rlim_cur != RLIM_INFINITY && !cap) {
		budget = rl.rlim_cur;
		snprintf(memlock, len, "RLIMIT_MEMLOCK soft %s, no CAP_IPC_LOCK: "
			 "budget %s", pt_size(rl.rlim_cur, b1, sizeof(b1)),
			 pt_size(budget, b2, sizeof(b2)));
	} else {
		budget = phys / 2;
		snprintf(memlock, len, "RLIMIT_MEMLOCK %s%s: budget %s (half "
			 "of RAM, as libmrmgr's default byte limit)",
			 rl.rlim_cur == RLIM_INFINITY ? "unlimited"
						      : pt_size(rl.rlim_cur, b1, sizeof(b1)),
			 cap ? ", CAP_IPC_LOCK (not enforced)" : "",
			 approx(budget, b2, sizeof(b2)));
	}
	o->limit = o->max;
	snprintf(o->limit_why, sizeof(o->limit_why), "--max %s",
		 pt_size(o->max, b1, sizeof(b1)));
	if (budget < o->limit) {
		o->limit = budget;
		snprintf(o->limit_why, sizeof(o->limit_why), "the memlock budget %s",
			 approx(budget, b1, sizeof(b1)));
	}
}

static void sysfs_driver(const char *dev, char *buf, size_t len)
{
	char path[256], link[PATH_MAX];
	ssize_t n;
	FILE *f;

	snprintf(path, sizeof(path), "/sys/class/infiniband/%s/device/driver", dev);
	if ((n = readlink(path, link, sizeof(link) - 1)) > 0) {
		link[n] = 0;
		snprintf(buf, len, "%.60s", strrchr(link, '/') ? strrchr(link, '/') + 1 : link);
		return;
	}
	snprintf(path, sizeof(path), "/sys/class/infiniband/%s/parent", dev);
	if ((f = fopen(path, "r"))) {
		if (fgets(link, sizeof(link), f)) {
			link[strcspn(link, "\n")] = 0;
			snprintf(buf, len, "software device over netdev %.32s", link);
		}
		fclose(f);
		return;
	}
	snprintf(buf, len, "not in sysfs");
}

static const char *monitor_desc(struct pt_dev *d, char *buf, size_t len)
{
	static const char *const modes[] = { "auto", "uffd", "hooks",
					     "external", "none", "patch" };
	struct mrmgr_monitor_info mi;
	mrmgr_cache_t *c;

	snprintf(buf, len, "unknown (no cache)");
	if (mrmgr_cache_create(d->pd, NULL, &c))
		return buf;
	if (!mrmgr_cache_query_monitor(c, &mi, sizeof(mi)))
		snprintf(buf, len, "%s%s%s%s%s(mode %s)",
			 mi.sources & MRMGR_MONITOR_SRC_PATCH ? "libc patched " : "",
			 mi.sources & MRMGR_MONITOR_SRC_UFFD ? "userfaultfd " : "",
			 mi.sources & MRMGR_MONITOR_SRC_HOOKS ? "libmrmgr_hooks.so " : "",
			 mi.sources & MRMGR_MONITOR_SRC_EXTERNAL ? "external " : "",
			 mi.sources ? "" : "nothing watched: nothing cached ",
			 mi.mode < 6 ? modes[mi.mode] : "?");
	mrmgr_cache_destroy(c);
	return buf;
}

/* Prints the header and leaves it as JSON members in @json. */
static void header(struct pt_dev *d, struct pt_opts *o, char *json, size_t jlen)
{
	char fw[160], drv[256], kern[200], mon[120], mem[200];
	struct utsname u;

	if (d->sim)
		snprintf(fw, sizeof(fw), "none (software model)");
	else
		snprintf(fw, sizeof(fw), "fw_ver \"%s\", hw_ver %#x, vendor %#x part %u",
			 d->attr.fw_ver, d->attr.hw_ver, d->attr.vendor_id,
			 d->attr.vendor_part_id);
	if (d->sim)
		snprintf(drv, sizeof(drv), "libmrmgr-sim %s (mrmgr_sim_* calls; "
			 "the cache reaches it through libmrmgr's device seam)",
			 mrmgr_version_string());
	else {
		char k[96];

		sysfs_driver(d->name, k, sizeof(k));
		snprintf(drv, sizeof(drv), "%s, transport %s; kernel driver: %s "
			 "(libibverbs called directly)",
			 ibv_node_type_str(d->ctx->device->node_type),
			 d->ctx->device->transport_type == IBV_TRANSPORT_IB ? "IB/RoCE"
			 : d->ctx->device->transport_type == IBV_TRANSPORT_IWARP ? "iWARP"
										  : "other", k);
	}
	if (uname(&u))
		snprintf(kern, sizeof(kern), "unknown");
	else
		snprintf(kern, sizeof(kern), "%s %s %s", u.sysname, u.release, u.machine);
	monitor_desc(d, mon, sizeof(mon));
	set_limit(o, mem, sizeof(mem));
	printf(PROG ": libmrmgr %s\n", mrmgr_version_string());
	printf("  device    %s\n", d->name);
	printf("  firmware  %s\n", fw);
	printf("  driver    %s\n", drv);
	printf("  kernel    %s\n", kern);
	printf("  monitor   %s\n", mon);
	printf("  memlock   %s\n", mem);
	printf("  limit     %" PRIu64 " bytes at most in use (%s)\n", o->limit, o->limit_why);
	printf("  runs      %u per measurement; %ld messages per loop\n", o->runs, o->messages);
	/* JSON strings here hold no quotes but fw_ver's own, escaped. */
	for (char *p = fw; *p; p++)
		if (*p == '"')
			*p = '\'';
	snprintf(json, jlen,
		 "\"tool\": \"" PROG "\", \"libmrmgr\": \"%s\", \"device\": \"%s\", "
		 "\"simulated\": %s, \"firmware\": \"%s\", \"driver\": \"%s\", "
		 "\"kernel\": \"%s\", \"monitor\": \"%s\", \"memlock\": \"%s\", "
		 "\"limit_bytes\": %" PRIu64 ", \"runs\": %u, \"messages\": %ld",
		 mrmgr_version_string(), d->name, d->sim ? "true" : "false", fw,
		 drv, kern, mon, mem, o->limit, o->runs, o->messages);
}

/* Deregisters everything; one line; the exit status. */
static int interrupted(struct pt_dev *d)
{
	unsigned int n;
	uint64_t mrs;
	int64_t pinned;
	int held = pt_live_region != NULL, cache = pt_live_cache != NULL;

	pt_progress_end();
	if (pt_live_region)
		mrmgr_put(pt_live_region);
	if (pt_live_cache)
		mrmgr_cache_destroy(pt_live_cache);
	pt_live_region = NULL;
	pt_live_cache = NULL;
	n = pt_dereg_all(d);
	pt_dev_live(d, &mrs, &pinned);
	fprintf(stderr, PROG ": interrupted in %s: deregistered %u MR%s%s%s; "
		"left on the device: %" PRIu64 " MRs, %s%" PRId64 " pinned bytes\n",
		cur_phase, n, n == 1 ? "" : "s", held ? ", put the held region" : "",
		cache ? ", destroyed the cache" : "", mrs,
		pinned < 0 ? "unknown (not the simulated HCA) " : "", pinned < 0 ? 0 : pinned);
	pt_dev_close(d);
	pt_rows_free();
	return mrs ? 1 : 130;
}

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: " PROG " [-d DEVICE | --sim[=mlx5|rxe]] [--max SIZE] [--runs N]\n"
		"                      [--messages N] [--csv FILE] [--json FILE] [--plot FILE.png]\n"
		"                      [--no-curve] [--no-seeds] [--no-loop] [--version] [--help]\n"
		"Measure ibv_reg_mr/ibv_dereg_mr from 4 KiB to --max (default 1G), ibv_rereg_mr\n"
		"and ibv_advise_mr, and what libmrmgr's cache saves on a message loop, on\n"
		"DEVICE (default: the first) or the simulated HCA. See mrmgr_perftest(1).\n");
}

int main(int argc, char **argv)
{
	struct pt_opts o = { .max = UINT64_C(1) << 30, .runs = 5, .messages = 20000 };
	struct sigaction sa;
	struct pt_dev d;
	char err[256], hjson[1536];
	int ret = 0;

	for (int i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (!strcmp(a, "--sim") || !strcmp(a, "--sim=mlx5"))
			o.sim = 1;
		else if (!strcmp(a, "--sim=rxe"))
			o.sim = 2;
		else if ((!strcmp(a, "-d") || !strcmp(a, "--device")) && v)
			o.device = argv[++i];
		else if (!strcmp(a, "--max") && v) {
			if (parse_size(argv[++i], &o.max)) {
				fprintf(stderr, PROG ": --max %s: not a size of 4K or more\n", v);
				return 2;
			}
		} else if (!strcmp(a, "--runs") && v) {
			o.runs = (unsigned int)strtoul(argv[++i], NULL, 10);
			if (o.runs < 1 || o.runs > 100000) {
				fprintf(stderr, PROG ": --runs %s: 1 to 100000\n", v);
				return 2;
			}
		} else if (!strcmp(a, "--messages") && v) {
			o.messages = strtol(argv[++i], NULL, 10);
			if (o.messages < 1) {
				fprintf(stderr, PROG ": --messages %s: 1 or more\n", v);
				return 2;
			}
		} else if (!strcmp(a, "--csv") && v)
			o.csv = argv[++i];
		else if (!strcmp(a, "--json") && v)
			o.json = argv[++i];
		else if (!strcmp(a, "--plot") && v)
			o.plot = argv[++i];
		else if (!strcmp(a, "--no-curve"))
			o.no_curve = 1;
		else if (!strcmp(a, "--no-seeds"))
			o.no_seeds = 1;
		else if (!strcmp(a, "--no-loop"))
			o.no_loop = 1;
		else if (!strcmp(a, "--version")) {
			printf(PROG " (libmrmgr %s)\n", mrmgr_version_string());
			return 0;
		} else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
			usage(stdout);
			return 0;
		} else {
			fprintf(stderr, PROG ": unknown option or missing value: %s\n", a);
			usage(stderr);
			return 2;
		}
	}
	if (o.sim && o.device) {
		fprintf(stderr, PROG ": --sim and --device exclude each other\n");
		return 2;
	}

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal; /* no SA_RESTART: a wait returns EINTR */
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);

	if (pt_dev_open(&d, o.device, o.sim, err, sizeof(err))) {
		fprintf(stderr, PROG ": %s\n", err);
		return 1;
	}
	header(&d, &o, hjson, sizeof(hjson));
	fflush(stdout);

	if (!o.no_curve && !pt_stop)
		ret |= pt_curve(&d, &o);
	if (!o.no_seeds && !pt_stop)
		ret |= pt_seeds(&d, &o);
	if (!o.no_loop && !pt_stop)
		ret |= pt_loop(&d, &o);
	if (!o.no_loop && !pt_stop)
		ret |= pt_dmabuf(&d, &o);
	if (pt_stop)
		return interrupted(&d);
	pt_phase("output");
	pt_dereg_all(&d); /* nothing, unless a measurement failed half-way */
	pt_dev_close(&d);

	pt_print_table(stdout);
	fflush(stdout);
	if (o.csv && pt_write_csv(o.csv))
		ret = 1;
	if (o.json && pt_write_json(o.json, hjson))
		ret = 1;
	if (o.plot) {
		int p = pt_plot(o.plot, d.name);

		if (p && p != ENOENT)
			ret = 1;
	}
	pt_rows_free();
	return ret ? 1 : 0;
}
