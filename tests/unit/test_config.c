/*
 * Configuration: the MRMGR_* value parser, the precedence of attributes
 * over environment variables, where each value came from
 * (mrmgr_cache_query_config), and the default byte limit from what the
 * process may pin.
 *
 * SPDX-License-Identifier: MIT
 */
#include <errno.h>
#include <linux/capability.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "helpers.h"
#include "config_env.h"

/* ------------------------------------------------------------ log capture */

static struct {
	int warns;
	char last[512];
} logged;

static void capture(enum mrmgr_log_level level, const char *msg, void *arg)
{
	(void)arg;
	/* Which memory-event sources run depends on the process (a
	 * sanitizer or valgrind turns libc patching off, with warnings of
	 * its own), not on the configuration under test. */
	if (!strncmp(msg, "monitor", 7))
		return;
	if (level == MRMGR_LOG_WARN)
		logged.warns++;
	snprintf(logged.last, sizeof(logged.last), "%s", msg);
}

static void capture_on(void)
{
	memset(&logged, 0, sizeof(logged));
	mrmgr__config_reset_warnings();
	mrmgr_set_log_handler(capture, NULL, MRMGR_LOG_WARN);
}

static void clear_env(void)
{
	static const char *const vars[] = {
		"MRMGR_MAX_REGIONS", "MRMGR_MAX_BYTES", "MRMGR_MERGE",
		"MRMGR_CACHE", "MRMGR_GROW_HEADROOM", "MRMGR_REREG", "MRMGR_ODP",
		"MRMGR_ODP_STRICT", "MRMGR_ODP_PREFETCH", "MRMGR_MONITOR",
	};

	for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++)
		unsetenv(vars[i]);
}

TestSuite(config, .init = clear_env);

/* ------------------------------------------------------------ parser */

static const struct {
	const char *in;
	int ok;
	uint64_t v;
} sizes[] = {
	{ "0", 1, 0 },
	{ "4096", 1, 4096 },
	{ "010", 1, 10 },                 /* decimal, not octal */
	{ "64K", 1, 64 << 10 },
	{ "64k", 1, 64 << 10 },
	{ "8M", 1, 8 << 20 },
	{ "2G", 1, 2ull << 30 },
	{ "2GiB", 1, 2ull << 30 },
	{ "1T", 1, 1ull << 40 },
	{ "18446744073709551615", 1, UINT64_MAX },
	{ "", 0, 0 },
	{ " -1", 0, 0 },
	{ "-1", 0, 0 },
	{ "+5", 0, 0 },
	{ " 5", 0, 0 },
	{ "5 ", 0, 0 },
	{ "1i", 0, 0 },
	{ "1iB", 0, 0 },                  /* iB only after a unit */
	{ "1KB", 0, 0 },
	{ "1Ki", 0, 0 },
	{ "1KiBx", 0, 0 },
	{ "0x1000", 0, 0 },
	{ "1e6", 0, 0 },
	{ "12X", 0, 0 },
	{ "1.5G", 0, 0 },
	{ "K", 0, 0 },
	{ "18446744073709551616", 0, 0 }, /* 2^64 */
	{ "99999999999999999999999", 0, 0 },
	{ "16777216T", 0, 0 },            /* 2^64 bytes */
	{ "16777215T", 1, 16777215ull << 40 },
};

Test(config, parse_size_table)
{
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		uint64_t v = 12345;
		int ret = mrmgr__parse_size(sizes[i].in, &v);

		if (sizes[i].ok) {
			cr_expect_eq(ret, 0, "\"%s\" should parse", sizes[i].in);
			cr_expect_eq(v, sizes[i].v, "\"%s\" gave %llu", sizes[i].in,
				     (unsigned long long)v);
		} else {
			cr_expect_eq(ret, EINVAL, "\"%s\" should be refused",
				     sizes[i].in);
			cr_expect_eq(v, 12345, "\"%s\" left a value", sizes[i].in);
		}
	}
	cr_expect_eq(mrmgr__parse_size(NULL, &(uint64_t){ 0 }), EINVAL);
}

/* Every bad value of every variable: ignored (the default stays) and a
 * warning names the variable and the value. */
static const struct {
	const char *var, *val;
} bad_values[] = {
	{ "MRMGR_MAX_BYTES", " -1" },   { "MRMGR_MAX_BYTES", "1i" },
	{ "MRMGR_MAX_BYTES", "+5" },    { "MRMGR_MAX_BYTES", "0x10" },
	{ "MRMGR_MAX_BYTES", "" },      { "MRMGR_MAX_BYTES", "8M junk" },
	{ "MRMGR_MAX_BYTES", "99999999999999999999" },
	{ "MRMGR_MAX_REGIONS", "lots" }, { "MRMGR_MAX_REGIONS", "-3" },
	{ "MRMGR_MERGE", "maybe" },     { "MRMGR_MERGE", "" },
	{ "MRMGR_CACHE", "2" },         { "MRMGR_GROW_HEADROOM", "01" },
	{ "MRMGR_REREG", "yes please" }, { "MRMGR_ODP", "sometimes" },
	{ "MRMGR_ODP", "" },            { "MRMGR_ODP_STRICT", "-1" },
	{ "MRMGR_ODP_PREFETCH", "on!" }, { "MRMGR_MONITOR", "userfaultfd" },
	{ "MRMGR_MONITOR", "" },
};

Test(config, bad_values_are_ignored_with_a_warning_naming_them)
{
	struct fixture f;
	struct mrmgr_config_entry ref[MRMGR__SET_COUNT], got[MRMGR__SET_COUNT];
	size_t n;

	fx_open(&f, NULL, NULL);
	cr_assert_eq(mrmgr_cache_query_config(f.cache, ref, MRMGR__SET_COUNT,
					      sizeof(ref[0]), &n), 0);
	fx_close(&f);
	for (size_t i = 0; i < sizeof(bad_values) / sizeof(bad_values[0]); i++) {
		char want[128];

		capture_on();
		setenv(bad_values[i].var, bad_values[i].val, 1);
		fx_open(&f, NULL, NULL);
		unsetenv(bad_values[i].var);
		cr_expect_eq(logged.warns, 1, "%s=\"%s\": %d warnings",
			     bad_values[i].var, bad_values[i].val, logged.warns);
		snprintf(want, sizeof(want), "%s=\"%s\"", bad_values[i].var,
			 bad_values[i].val);
		cr_expect(strstr(logged.last, want), "warning \"%s\" does not "
			  "name %s", logged.last, want);
		cr_assert_eq(mrmgr_cache_query_config(f.cache, got,
						      MRMGR__SET_COUNT,
						      sizeof(got[0]), &n), 0);
		for (size_t k = 0; k < n; k++) {
			cr_expect_str_eq(got[k].value, ref[k].value, "%s=\"%s\" "
					 "changed %s", bad_values[i].var,
					 bad_values[i].val, got[k].name);
			cr_expect_eq(got[k].source, MRMGR_CONFIG_SOURCE_DEFAULT);
		}
		fx_close(&f);
	}
	mrmgr_set_log_handler(NULL, NULL, MRMGR_LOG_WARN);
}

Test(config, bad_log_level_is_reported)
{
	struct fixture f;
	int saved = dup(2);
	char buf[4096] = { 0 };
	FILE *tmp = tmpfile();

	/* The default handler (standard error) reads the variable at the
	 * next line after a reset; cache creation logs one (at info). */
	cr_assert_not_null(tmp);
	setenv("MRMGR_LOG_LEVEL", "verbose", 1);
	fflush(stderr);
	dup2(fileno(tmp), 2);
	mrmgr_set_log_handler(NULL, NULL, MRMGR_LOG_WARN);
	fx_open(&f, NULL, NULL);
	fx_close(&f);
	dup2(saved, 2);
	close(saved);
	unsetenv("MRMGR_LOG_LEVEL");
	mrmgr_set_log_handler(NULL, NULL, MRMGR_LOG_WARN);
	rewind(tmp);
	cr_assert_gt(fread(buf, 1, sizeof(buf) - 1, tmp), 0, "nothing logged");
	cr_expect(strstr(buf, "MRMGR_LOG_LEVEL=\"verbose\""), "got: %s", buf);
	fclose(tmp);
}

/* ------------------------------------------------------------ precedence */

static struct mrmgr_config_entry entry(mrmgr_cache_t *c, const char *name)
{
	struct mrmgr_config_entry e[32];
	size_t n;

	cr_assert_eq(mrmgr_cache_query_config(c, e, 32, sizeof(e[0]), &n), 0);
	cr_assert_leq(n, 32);
	for (size_t i = 0; i < n; i++)
		if (!strcmp(e[i].name, name))
			return e[i];
	cr_assert_fail("no entry %s", name);
	return e[0];
}

static void expect_entry(mrmgr_cache_t *c, const char *name, const char *value,
			 uint32_t source)
{
	struct mrmgr_config_entry e = entry(c, name);

	cr_expect_str_eq(e.value, value, "%s", name);
	cr_expect_eq(e.source, source, "%s: source %u, expected %u", name,
		     e.source, source);
}

static const struct {
	const char *var, *val;  /* set in the environment */
	uint64_t mask;          /* attribute bits the program sets */
	const char *value;      /* effective value */
	uint32_t source;
	int warns;              /* "ignored" warnings */
} precedence[] = {
	/* Unset by the program: the variable fills. */
	{ "MRMGR_MAX_BYTES", "2M", 0, "2097152", MRMGR_CONFIG_SOURCE_ENV, 0 },
	{ "MRMGR_MAX_REGIONS", "7", 0, "7", MRMGR_CONFIG_SOURCE_ENV, 0 },
	{ "MRMGR_MERGE", "0", 0, "0", MRMGR_CONFIG_SOURCE_ENV, 0 },
	{ "MRMGR_REREG", "off", 0, "0", MRMGR_CONFIG_SOURCE_ENV, 0 },
	{ "MRMGR_ODP", "explicit", 0, "explicit", MRMGR_CONFIG_SOURCE_ENV, 0 },
	{ "MRMGR_MONITOR", "uffd", 0, "uffd", MRMGR_CONFIG_SOURCE_ENV, 0 },
	/* Set by the program: its decision, and a warning when they differ. */
	{ "MRMGR_MAX_BYTES", "2M", MRMGR_CACHE_ATTR_MAX_BYTES, "1048576",
	  MRMGR_CONFIG_SOURCE_ATTR, 1 },
	{ "MRMGR_MAX_BYTES", "1M", MRMGR_CACHE_ATTR_MAX_BYTES, "1048576",
	  MRMGR_CONFIG_SOURCE_ATTR, 0 },
	{ "MRMGR_MAX_REGIONS", "7", MRMGR_CACHE_ATTR_MAX_REGIONS, "100",
	  MRMGR_CONFIG_SOURCE_ATTR, 1 },
	{ "MRMGR_MERGE", "0", MRMGR_CACHE_ATTR_FLAGS, "1",
	  MRMGR_CONFIG_SOURCE_ATTR, 1 },
	{ "MRMGR_GROW_HEADROOM", "0", MRMGR_CACHE_ATTR_FLAGS, "1",
	  MRMGR_CONFIG_SOURCE_ATTR, 1 },
	{ "MRMGR_ODP", "implicit", MRMGR_CACHE_ATTR_ODP, "off",
	  MRMGR_CONFIG_SOURCE_ATTR, 1 },
	{ "MRMGR_ODP_PREFETCH", "1", MRMGR_CACHE_ATTR_ODP, "0",
	  MRMGR_CONFIG_SOURCE_ATTR, 1 },
	{ "MRMGR_MONITOR", "none", MRMGR_CACHE_ATTR_MONITOR, "auto",
	  MRMGR_CONFIG_SOURCE_ATTR, 1 },
	/* The one override: turning the cache off. */
	{ "MRMGR_CACHE", "0", MRMGR_CACHE_ATTR_FLAGS, "0",
	  MRMGR_CONFIG_SOURCE_ENV, 1 },
	{ "MRMGR_CACHE", "0", 0, "0", MRMGR_CONFIG_SOURCE_ENV, 0 },
};

Test(config, attribute_wins_environment_fills)
{
	for (size_t i = 0; i < sizeof(precedence) / sizeof(precedence[0]); i++) {
		struct mrmgr_cache_attr a = {
			.comp_mask = precedence[i].mask,
			.max_regions = 100,
			.max_bytes = 1 * MiB,
			.flags = 0,
			.odp_mode = MRMGR_ODP_OFF,
			.monitor = MRMGR_MONITOR_AUTO,
		};
		struct fixture f;

		capture_on();
		setenv(precedence[i].var, precedence[i].val, 1);
		fx_open(&f, NULL, &a);
		unsetenv(precedence[i].var);
		expect_entry(f.cache, precedence[i].var, precedence[i].value,
			     precedence[i].source);
		cr_expect_eq(logged.warns, precedence[i].warns,
			     "row %zu (%s=%s): %d warnings, last \"%s\"", i,
			     precedence[i].var, precedence[i].val, logged.warns,
			     logged.last);
		fx_close(&f);
	}
	mrmgr_set_log_handler(NULL, NULL, MRMGR_LOG_WARN);
}

/* The case: the program asked for the monitor, the environment
 * says none: the monitor stays on. Where the program left it unset,
 * none is obeyed, loudly. */
Test(config, monitor_none_from_the_environment)
{
	struct mrmgr_cache_attr a = {
		.comp_mask = MRMGR_CACHE_ATTR_MONITOR,
		.monitor = MRMGR_MONITOR_AUTO,
	};
	struct mrmgr_monitor_info mi;
	struct fixture f;

	capture_on();
	setenv("MRMGR_MONITOR", "none", 1);
	fx_open(&f, NULL, &a);
	cr_assert_eq(mrmgr_cache_query_monitor(f.cache, &mi, sizeof(mi)), 0);
	cr_expect_eq(mi.mode, MRMGR_MONITOR_AUTO);
	cr_expect(strstr(logged.last, "MRMGR_MONITOR=\"none\""), "%s", logged.last);
	fx_close(&f);

	capture_on();
	fx_open(&f, NULL, NULL);
	unsetenv("MRMGR_MONITOR");
	cr_assert_eq(mrmgr_cache_query_monitor(f.cache, &mi, sizeof(mi)), 0);
	cr_expect_eq(mi.mode, MRMGR_MONITOR_NONE);
	/* Ours, naming the variable, and the monitor's own. */
	cr_expect_geq(logged.warns, 2);
	fx_close(&f);
	mrmgr_set_log_handler(NULL, NULL, MRMGR_LOG_WARN);
}

Test(config, query_config_reports_sources)
{
	struct mrmgr_cache_attr a = {
		.comp_mask = MRMGR_CACHE_ATTR_MAX_REGIONS,
		.max_regions = 33,
	};
	struct mrmgr_config_entry e[2];
	struct fixture f;
	size_t n = 0, small;

	setenv("MRMGR_MAX_BYTES", "3M", 1);
	fx_open(&f, NULL, &a);
	unsetenv("MRMGR_MAX_BYTES");
	expect_entry(f.cache, "MRMGR_MAX_REGIONS", "33", MRMGR_CONFIG_SOURCE_ATTR);
	expect_entry(f.cache, "MRMGR_MAX_BYTES", "3145728", MRMGR_CONFIG_SOURCE_ENV);
	expect_entry(f.cache, "MRMGR_MERGE", "1", MRMGR_CONFIG_SOURCE_DEFAULT);
	expect_entry(f.cache, "MRMGR_MONITOR", "auto", MRMGR_CONFIG_SOURCE_DEFAULT);
	cr_expect_str_eq(entry(f.cache, "MRMGR_MAX_BYTES").note, "");

	/* The count alone; a short array; an older, smaller entry. */
	cr_assert_eq(mrmgr_cache_query_config(f.cache, NULL, 0, sizeof(e[0]), &n), 0);
	cr_expect_eq(n, MRMGR__SET_COUNT);
	memset(e, 0x5a, sizeof(e));
	small = offsetof(struct mrmgr_config_entry, source);
	cr_assert_eq(mrmgr_cache_query_config(f.cache, e, 2, small, &n), 0);
	cr_expect_str_eq(e[0].name, "MRMGR_MAX_REGIONS");
	cr_expect_str_eq(((struct mrmgr_config_entry *)((char *)e + small))->name,
			 "MRMGR_MAX_BYTES");
	cr_expect_eq(((unsigned char *)e)[2 * small], 0x5a, "wrote past 2 entries");
	cr_expect_eq(mrmgr_cache_query_config(NULL, e, 2, sizeof(e[0]), &n), EINVAL);
	cr_expect_eq(mrmgr_cache_query_config(f.cache, NULL, 2, sizeof(e[0]), &n), EINVAL);
	cr_expect_eq(mrmgr_cache_query_config(f.cache, e, 2, 0, &n), EINVAL);
	cr_expect_eq(mrmgr_cache_query_config(f.cache, e, 2, sizeof(e[0]), NULL), EINVAL);
	fx_close(&f);
}

/* ------------------------------------------------------------ defaults */

#define GiB (1024 * MiB)

Test(config, default_max_bytes_rule)
{
	static const struct {
		uint64_t rlimit;
		int cap;
		uint64_t phys, max_mr_size, want;
		const char *note;
	} rows[] = {
		{ 8 * MiB, 0, 16 * GiB, 0, 8 * MiB, "RLIMIT_MEMLOCK" },
		{ 8 * MiB, 1, 16 * GiB, 0, 8 * GiB, "CAP_IPC_LOCK" },
		{ UINT64_MAX, 0, 16 * GiB, 0, 8 * GiB, "RLIMIT_MEMLOCK unlimited" },
		{ UINT64_MAX, 1, 16 * GiB, 1 * GiB, 1 * GiB, "max_mr_size" },
		{ 8 * MiB, 0, 16 * GiB, 1 * MiB, 1 * MiB, "max_mr_size" },
		{ UINT64_MAX, 0, 0, 0, UINT64_MAX, "unknown" },
	};

	for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
		struct mrmgr__pin_budget b = { rows[i].rlimit, rows[i].cap,
					       rows[i].phys };
		char note[128];
		uint64_t v = mrmgr__default_max_bytes(&b, rows[i].max_mr_size,
						      note, sizeof(note));

		cr_expect_eq(v, rows[i].want, "row %zu: %llu", i,
			     (unsigned long long)v);
		cr_expect(strstr(note, rows[i].note), "row %zu: note \"%s\"", i,
			  note);
	}
}

static int drop_ipc_lock(void)
{
	struct __user_cap_header_struct h = {
		.version = _LINUX_CAPABILITY_VERSION_3,
	};
	struct __user_cap_data_struct d[_LINUX_CAPABILITY_U32S_3];
	const uint32_t bit = 1u << (CAP_IPC_LOCK % 32);
	const int word = CAP_IPC_LOCK / 32;

	if (syscall(SYS_capget, &h, d))
		return -1;
	d[word].effective &= ~bit;
	d[word].permitted &= ~bit;
	d[word].inheritable &= ~bit;
	return (int)syscall(SYS_capset, &h, d);
}

/*
 * In a forked child: set the memlock limit (and drop CAP_IPC_LOCK if asked),
 * create a cache with the defaults, and exit 0 when its max_bytes and the
 * note say what the rule says.
 */
static int child_default(rlim_t limit, int drop)
{
	struct rlimit rl = { limit, limit };
	struct mrmgr__pin_budget b;
	struct mrmgr_config_entry e[MRMGR__SET_COUNT];
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	mrmgr_cache_t *c;
	size_t n;
	char want[32];
	pid_t pid = fork();
	int st;

	if (pid == 0) {
		if (setrlimit(RLIMIT_MEMLOCK, &rl) || (drop && drop_ipc_lock()))
			_exit(3);
		mrmgr__pin_budget_read(&b);
		if (drop && b.cap_ipc_lock)
			_exit(4);
		if (mrmgr_sim_open(NULL, &ctx) || mrmgr_sim_alloc_pd(ctx, &pd) ||
		    mrmgr_cache_create(pd, NULL, &c))
			_exit(5);
		/* The simulated device's max_mr_size is 1 TiB: no cap here. */
		snprintf(want, sizeof(want), "%llu",
			 (unsigned long long)(b.cap_ipc_lock || limit == RLIM_INFINITY
						      ? b.phys_bytes / 2 : limit));
		if (mrmgr_cache_query_config(c, e, MRMGR__SET_COUNT, sizeof(e[0]),
					     &n))
			_exit(6);
		if (strcmp(e[MRMGR__SET_MAX_BYTES].value, want))
			_exit(7);
		if (!strstr(e[MRMGR__SET_MAX_BYTES].note,
			    b.cap_ipc_lock ? "CAP_IPC_LOCK"
			    : limit == RLIM_INFINITY ? "unlimited"
						     : "RLIMIT_MEMLOCK"))
			_exit(8);
		mrmgr_cache_destroy(c);
		mrmgr_sim_dealloc_pd(pd);
		mrmgr_sim_close(ctx);
		_exit(0);
	}
	cr_assert_gt(pid, 0);
	cr_assert_eq(waitpid(pid, &st, 0), pid);
	cr_assert(WIFEXITED(st));
	return WEXITSTATUS(st);
}

Test(config, default_max_bytes_follows_what_the_process_may_pin)
{
	struct mrmgr__pin_budget b;

	/* Without CAP_IPC_LOCK: the rlimit, always possible (lowering). */
	cr_expect_eq(child_default(4 * MiB, 1), 0, "rlimit, no capability");
	mrmgr__pin_budget_read(&b);
	if (b.cap_ipc_lock)
		cr_expect_eq(child_default(4 * MiB, 0), 0, "CAP_IPC_LOCK: RAM / 2");
	else
		cr_log_info("no CAP_IPC_LOCK here: the capability case is not run");
	/* Raising the hard limit needs CAP_SYS_RESOURCE: 3 means not here. */
	int ret = child_default(RLIM_INFINITY, 1);

	if (ret == 3)
		cr_log_info("cannot lift RLIMIT_MEMLOCK here: the unlimited case "
			    "is not run");
	else
		cr_expect_eq(ret, 0, "unlimited rlimit: RAM / 2");
}
