/*
 * libFuzzer target: the MRMGR_* environment variables, through the public
 * behaviour (setenv + mrmgr_cache_create), so it follows the parser
 * whatever its internals are.
 *
 * Input: records of [variable byte][length byte][value bytes]; the
 * variable byte picks a name from the documented list (or an unknown
 * MRMGR_ name), the value is any bytes up to a NUL. Then one byte picks
 * the attributes passed along (NULL, or valid ones the variables may
 * override).
 *
 * What must hold: creation returns 0 or a positive errno and never
 * crashes or reads out of bounds; a cache it creates gets and puts a page
 * (0 or an errno), reports limits in its statistics, and is destroyed
 * with 0, leaving no MR or pinned byte on the device.
 *
 * SPDX-License-Identifier: MIT
 */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <mrmgr/mrmgr.h>
#include <mrmgr/sim.h>

static const char *const names[] = {
	"MRMGR_MAX_REGIONS", "MRMGR_MAX_BYTES", "MRMGR_MERGE", "MRMGR_CACHE",
	"MRMGR_ODP", "MRMGR_ODP_STRICT", "MRMGR_ODP_PREFETCH",
	"MRMGR_GROW_HEADROOM", "MRMGR_REREG", "MRMGR_MONITOR", "MRMGR_CHECK",
	"MRMGR_LOG_LEVEL", "MRMGR_NO_SUCH_VARIABLE",
};
#define NNAMES (sizeof(names) / sizeof(names[0]))

static struct ibv_context *ctx;
static struct ibv_pd *pd;
static char *page;

static void fail(const char *what, long a)
{
	fprintf(stderr, "fuzz_env: %s (%ld)\n", what, a);
	abort();
}

static void discard(enum mrmgr_log_level level, const char *msg, void *arg)
{
	(void)level;
	(void)msg;
	(void)arg;
}

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	if (mrmgr_sim_open(NULL, &ctx) || mrmgr_sim_alloc_pd(ctx, &pd))
		abort();
	page = mmap(NULL, 4096, PROT_READ | PROT_WRITE,
		    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (page == MAP_FAILED)
		abort();
	/* Warnings about bad values are the point, but not on stderr. */
	mrmgr_set_log_handler(discard, NULL, MRMGR_LOG_DEBUG);
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct mrmgr_cache_attr a = {
		.comp_mask = MRMGR_CACHE_ATTR_MAX_BYTES | MRMGR_CACHE_ATTR_FLAGS,
		.max_bytes = 1 << 20,
		.flags = MRMGR_CACHE_NO_MERGE,
	};
	char value[256];
	mrmgr_cache_t *c = NULL;
	struct mrmgr_sim_stats ss;
	struct mrmgr_stats st;
	size_t i = 0;
	int ret, use_attr = 0;

	for (int rec = 0; rec < 12 && i + 2 <= size; rec++) {
		const char *name = names[data[i] % NNAMES];
		size_t len = data[i + 1];

		i += 2;
		if (len > size - i)
			len = size - i;
		memcpy(value, data + i, len);
		value[len] = '\0'; /* a NUL inside ends the value early */
		i += len;
		if (strcmp(name, "MRMGR_LOG_LEVEL") == 0)
			continue; /* read once per process: no use here */
		setenv(name, value, 1);
	}
	if (i < size)
		use_attr = data[i] & 1;

	ret = mrmgr_cache_create(pd, use_attr ? &a : NULL, &c);
	if (ret < 0 || ret > 4095)
		fail("mrmgr_cache_create: not 0 or an errno", ret);
	if (!ret) {
		mrmgr_region_t *r;

		ret = mrmgr_get(c, page, 4096, IBV_ACCESS_LOCAL_WRITE, &r);
		if (ret < 0 || ret > 4095)
			fail("mrmgr_get: not 0 or an errno", ret);
		if (!ret)
			mrmgr_put(r);
		if (mrmgr_cache_query_stats(c, &st, sizeof(st)))
			fail("mrmgr_cache_query_stats failed", 0);
		if (!st.max_regions)
			fail("a cache with room for no region", 0);
		ret = mrmgr_cache_destroy(c);
		if (ret)
			fail("mrmgr_cache_destroy failed", ret);
	}
	for (size_t k = 0; k < NNAMES; k++)
		unsetenv(names[k]);
	if (mrmgr_sim_query_stats(ctx, &ss, sizeof(ss)) || ss.live_mrs ||
	    ss.pinned_bytes)
		fail("MRs left on the device", (long)ss.live_mrs);
	return 0;
}
