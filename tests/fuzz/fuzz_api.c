/*
 * libFuzzer target: the public API driven by input bytes on the simulated
 * HCA. The first bytes choose the device and the cache's attributes (any
 * comp_mask and flag bits), then each byte picks an operation and the
 * following bytes its arguments: NULL, zero, huge and wrapping lengths,
 * unmapped and read-only memory, bad access and flag bits, wrong struct
 * sizes, double puts, destroy while regions are held, device faults.
 *
 * What must hold, checked here (a failure is a crash for the fuzzer):
 *   - every call returns 0 or a positive errno and never crashes (the
 *     sanitizers check memory and undefined behaviour);
 *   - once every reference is put the cache is destroyed with 0, and the
 *     device has no MR and no pinned byte left.
 * A put after mrmgr_cache_destroy() is not promised an errno (the region
 * is freed memory), so the driver never does that.
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
#include <unistd.h>

#include <mrmgr/mrmgr.h>
#include <mrmgr/sim.h>

#define PG 4096u
#define POOL_PAGES 64u
#define NSLOTS 16
#define MAX_OPS 256

/* Memory every input uses: read-write pages, read-only pages, a hole. */
static char *pool, *ro, *hole;
static char *stack; /* a buffer on the driver's stack, during a run */

/* The input, read a byte at a time; zeros once it is used up. */
struct in {
	const uint8_t *p;
	size_t n;
};

static uint8_t u8(struct in *in)
{
	if (!in->n)
		return 0;
	in->n--;
	return *in->p++;
}

static uint64_t u64(struct in *in)
{
	uint64_t v = 0;

	for (int i = 0; i < 8; i++)
		v = v << 8 | u8(in);
	return v;
}

static void fail(const char *what, long a, long b)
{
	fprintf(stderr, "fuzz_api: %s (%ld, %ld)\n", what, a, b);
	abort();
}

/* 0 or a positive errno: anything else breaks the API's promise. */
static int ret_ok(int ret)
{
	if (ret < 0 || ret > 4095)
		fail("return value is not 0 or an errno", ret, 0);
	return ret;
}

static void setup_memory(void)
{
	char *m = mmap(NULL, (POOL_PAGES + 8) * PG, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (m == MAP_FAILED)
		abort();
	memset(m, 0x5a, (POOL_PAGES + 8) * PG);
	pool = m;
	ro = m + POOL_PAGES * PG;
	hole = ro + 4 * PG;
	if (mprotect(ro, 4 * PG, PROT_READ) || munmap(hole, 4 * PG))
		abort();
}

static char *addr(struct in *in)
{
	uint8_t k = u8(in);
	uint16_t off = (uint16_t)(u8(in) << 8 | u8(in));

	switch (k % 12) {
	case 0: return NULL;
	case 1: return (char *)(uintptr_t)1;
	case 2: return ro + off % (4 * PG);
	case 3: return hole + off % (4 * PG);
	case 4: return (char *)(UINTPTR_MAX - off);
	case 5: return (char *)(uintptr_t)0xffff800000000000ull + off;
	case 6: return stack + off % 64;
	case 7: return pool + (size_t)(off % POOL_PAGES) * PG; /* a page */
	default: return pool + off % (POOL_PAGES * PG);
	}
}

static size_t length(struct in *in, const char *a)
{
	uint8_t k = u8(in);
	uint16_t v = (uint16_t)(u8(in) << 8 | u8(in));

	switch (k % 12) {
	case 0: return 0;
	case 1: return SIZE_MAX;
	case 2: return SIZE_MAX - (uintptr_t)a + 1 + v; /* wraps */
	case 3: return (size_t)1 << 40;
	case 4: return (size_t)1 << 56;
	case 5: return (size_t)(v % 8 + 1) * PG;
	case 6: return (size_t)(v % POOL_PAGES + 1) * PG;
	default: return (size_t)v % (8 * PG) + 1;
	}
}

static unsigned int access_bits(struct in *in)
{
	uint8_t k = u8(in);
	const unsigned int rw = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
				IBV_ACCESS_REMOTE_READ;

	switch (k % 6) {
	case 0: return 0;
	case 1: return IBV_ACCESS_LOCAL_WRITE;
	case 2: return rw;
	case 3: return IBV_ACCESS_REMOTE_READ;
	case 4: return rw | IBV_ACCESS_REMOTE_ATOMIC;
	default: return (unsigned int)u64(in); /* any bits */
	}
}

struct world {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	mrmgr_cache_t *cache;
	mrmgr_region_t *held[NSLOTS];
	mrmgr_buf_t *buf;
	int checked; /* MRMGR_CACHE_CHECK: double puts refused at the put */
	/*
	 * A double put the cache could not see yet (not checked): a get that
	 * hits the region before anything adds its references up brings the
	 * sum back to zero with a holder, and a destroy then succeeds under
	 * it. The contract is broken; the driver stops asking for EBUSY.
	 */
	int broken;
};

static int free_slot(struct world *w)
{
	for (int i = 0; i < NSLOTS; i++)
		if (!w->held[i])
			return i;
	return -1;
}

static void put_slot(struct world *w, int i)
{
	mrmgr_put(w->held[i]);
	w->held[i] = NULL;
}

/*
 * A double put: the region's count drops one more than this slot took.
 * Another slot holding the same region loses its reference with it (it
 * is forgotten, never put); with no other holder the count goes below
 * zero, which the library must find and undo.
 */
static void double_put(struct world *w, int i)
{
	mrmgr_region_t *r = w->held[i];

	put_slot(w, i);
	mrmgr_put(r);
	if (!w->checked)
		w->broken = 1;
	for (int j = 0; j < NSLOTS; j++)
		if (w->held[j] == r) {
			w->held[j] = NULL;
			break;
		}
}

static void op_get(struct world *w, struct in *in, int ex)
{
	char *a = addr(in);
	size_t len = length(in, a);
	unsigned int acc = access_bits(in);
	uint64_t flags = ex ? u8(in) % 5 : 0;
	mrmgr_region_t *r = NULL;
	int i = free_slot(w), ret;

	if (i < 0) {
		put_slot(w, u8(in) % NSLOTS);
		i = free_slot(w);
	}
	struct mrmgr_get_attr ga = { .comp_mask = MRMGR_GET_ATTR_FLAGS,
				     .flags = flags };
	ret = ret_ok(ex ? mrmgr_get_ex(w->cache, a, len, acc, &ga, &r)
			: mrmgr_get(w->cache, a, len, acc, &r));
	if (ret)
		return;
	if (!r)
		fail("get returned 0 and no region", 0, 0);
	/* What it returns covers the request with the access. */
	if ((uintptr_t)mrmgr_region_addr(r) > (uintptr_t)a ||
	    (uintptr_t)mrmgr_region_addr(r) + mrmgr_region_length(r) <
		    (uintptr_t)a + len)
		fail("region does not cover the request", (long)(uintptr_t)a,
		     (long)len);
	(void)mrmgr_region_lkey(r);
	(void)mrmgr_region_rkey(r);
	(void)mrmgr_region_generation(r);
	w->held[i] = r;
}

static void op_prefetch(struct world *w, struct in *in)
{
	struct mrmgr_range rg[4];
	size_t n = u8(in) % 5;
	unsigned int flags = u8(in);

	for (size_t i = 0; i < n; i++) {
		rg[i].addr = addr(in);
		rg[i].length = length(in, rg[i].addr);
	}
	ret_ok(mrmgr_prefetch(w->cache, u8(in) & 1 ? NULL : rg, n, flags % 16));
}

static void op_region_prefetch(struct world *w, struct in *in)
{
	int i = u8(in) % NSLOTS;
	char *a = NULL;
	size_t len = 0;

	if (!w->held[i])
		return;
	if (u8(in) & 1) {
		a = (char *)mrmgr_region_addr(w->held[i]) + u8(in) * 64;
		len = length(in, a);
	}
	ret_ok(mrmgr_region_prefetch(w->held[i], a, len, u8(in) % 16));
}

/* A struct size anywhere from 0 to well past the real one. */
static void op_query(struct world *w, struct in *in)
{
	union {
		struct mrmgr_stats s;
		struct mrmgr_odp_info o;
		char pad[8192];
	} u;
	size_t size = (size_t)(u8(in) << 8 | u8(in)) % sizeof(u);

	if (u8(in) & 1)
		ret_ok(mrmgr_cache_query_stats(w->cache, &u.s, size));
	else
		ret_ok(mrmgr_cache_query_odp(w->cache, &u.o, size));
}

static void op_buf(struct world *w, struct in *in)
{
	size_t size = length(in, pool);

	if (!w->buf) {
		if (size > 64 * PG)
			size %= 64 * PG;
		ret_ok(mrmgr_buf_create(w->cache, size, access_bits(in), &w->buf));
		return;
	}
	if (u8(in) & 1) {
		if (size > 64 * PG)
			size %= 64 * PG;
		ret_ok(mrmgr_buf_resize(w->buf, size));
		if (mrmgr_buf_data(w->buf) && mrmgr_buf_size(w->buf))
			memset(mrmgr_buf_data(w->buf), 1, mrmgr_buf_size(w->buf));
	} else {
		if (ret_ok(mrmgr_buf_destroy(w->buf)))
			fail("buf_destroy failed", 0, 0);
		w->buf = NULL;
	}
}

static void op_fault(struct world *w, struct in *in)
{
	static const int errs[] = { ENOMEM, EFAULT, EINVAL, EAGAIN, EPERM,
				    EOPNOTSUPP, EIO, ENOSPC };
	static const int codes[] = { IBV_REREG_MR_ERR_INPUT,
				     IBV_REREG_MR_ERR_DONT_FORK_NEW,
				     IBV_REREG_MR_ERR_DO_FORK_OLD,
				     IBV_REREG_MR_ERR_CMD,
				     IBV_REREG_MR_ERR_CMD_AND_DO_FORK_NEW };
	/* Not DEREG: a failed deregistration leaves the MR with the device
	 * (the library logs and abandons it), which the leak check at the
	 * end would report; the fault sweep covers that case. */
	static const uint32_t ops[] = { MRMGR_SIM_OP_REG, MRMGR_SIM_OP_ADVISE,
					MRMGR_SIM_OP_REREG };
	struct mrmgr_sim_fault f = {
		.op = ops[u8(in) % 3],
		.err = errs[u8(in) % 8],
		.nth = u8(in) % 4 + 1,
		.count = u8(in) % 3,
	};

	if (f.op == MRMGR_SIM_OP_REREG && (u8(in) & 1)) {
		f.comp_mask = MRMGR_SIM_FAULT_REREG_CODE;
		f.rereg_code = codes[u8(in) % 5];
	}
	ret_ok(mrmgr_sim_inject_fault(w->ctx, &f));
}

/* Creation with hostile arguments; what it creates is destroyed. */
static void op_create(struct world *w, struct in *in)
{
	struct mrmgr_cache_attr a = {
		.comp_mask = u64(in) % 64,
		.max_regions = u64(in) % 64,
		.max_bytes = u64(in) >> (u8(in) % 64),
		.flags = u8(in) & 0x3f ? u8(in) % 64 : u64(in),
		.odp_mode = u8(in) % 5,
		.odp_flags = u8(in) % 8,
		.monitor = MRMGR_MONITOR_EXTERNAL,
	};
	mrmgr_cache_t *c = NULL;
	uint8_t k = u8(in);
	int ret = ret_ok(mrmgr_cache_create(k & 1 ? NULL : w->pd,
					    k & 2 ? NULL : &a,
					    k & 4 ? NULL : &c));

	if (!ret && c && ret_ok(mrmgr_cache_destroy(c)))
		fail("destroying an unused cache failed", 0, 0);
}

static int run(struct world *w, struct in *in)
{
	static int trace = -1;

	if (trace < 0)
		trace = getenv("FUZZ_API_TRACE") != NULL;
	for (int n = 0; n < MAX_OPS && in->n; n++) {
		uint8_t op = u8(in);
		int i;

		if (trace) /* FUZZ_API_TRACE=1: the operations, to debug an input */
			fprintf(stderr, "op %d: %u\n", n, op % 18);

		switch (op % 18) {
		case 0: case 1: case 2:
			op_get(w, in, 0);
			break;
		case 3:
			op_get(w, in, 1);
			break;
		case 4: case 5:
			i = u8(in) % NSLOTS;
			if (w->held[i])
				put_slot(w, i);
			break;
		case 6:
			i = u8(in) % NSLOTS;
			if (w->held[i])
				double_put(w, i);
			break;
		case 7: {
			char *a = addr(in);

			ret_ok(mrmgr_invalidate(w->cache, a, length(in, a)));
			break;
		}
		case 8:
			op_prefetch(w, in);
			break;
		case 9:
			op_region_prefetch(w, in);
			break;
		case 10:
			op_query(w, in);
			break;
		case 11:
			op_buf(w, in);
			break;
		case 12:
			op_fault(w, in);
			break;
		case 13:
			ret_ok(mrmgr_sim_clear_faults(w->ctx));
			break;
		case 14:
			op_create(w, in);
			break;
		case 15: {
			char *a = addr(in);

			ret_ok(mrmgr_notify_unmap(a, length(in, a)));
			break;
		}
		case 16: {
			/* Destroy while something is held: EBUSY, nothing
			 * destroyed. */
			int any = w->buf != NULL;

			if (w->broken)
				break;
			for (i = 0; i < NSLOTS; i++)
				any |= w->held[i] != NULL;
			if (any && mrmgr_cache_destroy(w->cache) != EBUSY)
				fail("destroy of a busy cache is not EBUSY", 0, 0);
			break;
		}
		default:
			/* NULL handles everywhere. */
			mrmgr_put(NULL);
			ret_ok(mrmgr_get(NULL, pool, PG, 0, NULL));
			ret_ok(mrmgr_get(w->cache, pool, PG,
					 IBV_ACCESS_LOCAL_WRITE, NULL));
			ret_ok(mrmgr_invalidate(NULL, pool, PG));
			ret_ok(mrmgr_prefetch(NULL, NULL, 0, 0));
			ret_ok(mrmgr_region_prefetch(NULL, NULL, 0, 0));
			ret_ok(mrmgr_cache_query_stats(w->cache, NULL, 8));
			ret_ok(mrmgr_cache_destroy(NULL));
			ret_ok(mrmgr_buf_resize(NULL, 1));
			ret_ok(mrmgr_buf_destroy(NULL));
			(void)mrmgr_region_lkey(NULL);
			(void)mrmgr_region_mr(NULL);
			(void)mrmgr_region_addr(NULL);
			break;
		}
	}
	return 0;
}

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	/* Hostile input logs an error per call; none is needed here. */
	setenv("MRMGR_LOG_LEVEL", "none", 0);
	/* No monitor thread, whatever op_create's attributes say: every
	 * input starts alike (fuzz_env drives the monitor modes). */
	setenv("MRMGR_MONITOR", "external", 1);
	setup_memory();
	return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct in in = { data, size };
	struct world w = { 0 };
	struct mrmgr_sim_attr sa = { 0 };
	struct mrmgr_cache_attr ca = { 0 };
	struct mrmgr_sim_stats ss;
	char on_stack[128];
	uint8_t k = u8(&in);

	memset(on_stack, 1, sizeof(on_stack));
	stack = on_stack;
	sa.comp_mask = MRMGR_SIM_ATTR_PERSONALITY | MRMGR_SIM_ATTR_FLAGS;
	sa.personality = k & 1 ? MRMGR_SIM_RXE : MRMGR_SIM_MLX5;
	sa.flags = (k >> 1) & 7;
	if (k & 0x10) {
		sa.comp_mask |= MRMGR_SIM_ATTR_MEMLOCK;
		sa.memlock_bytes = (uint64_t)(u8(&in) % 32) * PG;
	}
	if (mrmgr_sim_open(&sa, &w.ctx) || mrmgr_sim_alloc_pd(w.ctx, &w.pd))
		fail("cannot open the simulated device", 0, 0);
	/* Valid attributes (hostile ones are op_create's): an ODP mode,
	 * small limits, policy flags. */
	ca.comp_mask = MRMGR_CACHE_ATTR_MAX_REGIONS | MRMGR_CACHE_ATTR_MAX_BYTES |
		       MRMGR_CACHE_ATTR_FLAGS | MRMGR_CACHE_ATTR_ODP |
		       MRMGR_CACHE_ATTR_MONITOR;
	ca.max_regions = u8(&in) % 16 + 1;
	ca.max_bytes = (uint64_t)(u8(&in) % 128 + 1) * PG;
	ca.flags = u8(&in) & 0x1f;
	ca.odp_mode = u8(&in) % 4;
	ca.odp_flags = u8(&in) & 2; /* AUTO_PREFETCH; never STRICT */
	/* External: no monitor thread, so every input starts alike. */
	ca.monitor = MRMGR_MONITOR_EXTERNAL;
	if (ret_ok(mrmgr_cache_create(w.pd, &ca, &w.cache)))
		fail("creating the cache failed", 0, 0);
	w.checked = !!(ca.flags & MRMGR_CACHE_CHECK);

	run(&w, &in);

	mrmgr_sim_clear_faults(w.ctx);
	for (int i = 0; i < NSLOTS; i++)
		if (w.held[i])
			put_slot(&w, i);
	if (w.buf && mrmgr_buf_destroy(w.buf))
		fail("buf_destroy failed", 0, 0);
	if (mrmgr_cache_destroy(w.cache))
		fail("destroy after every put failed", 0, 0);
	if (mrmgr_sim_query_stats(w.ctx, &ss, sizeof(ss)))
		fail("sim stats", 0, 0);
	if (ss.live_mrs || ss.pinned_bytes)
		fail("leaked MRs / pinned bytes", (long)ss.live_mrs,
		     (long)ss.pinned_bytes);
	if (mrmgr_sim_dealloc_pd(w.pd) || mrmgr_sim_close(w.ctx))
		fail("closing the simulated device failed", 0, 0);
	return 0;
}
