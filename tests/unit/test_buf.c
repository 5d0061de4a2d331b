/*
 * Growable registered buffers on the simulated HCA: realloc semantics, the
 * registration following every resize (in place, moved, shrunk, held by
 * others, through each rereg failure, on the rxe personality, across a PD
 * move), the 10,000-step linear growth bound, and no leak on any path.
 * Every resize is checked with simulated RDMA writes through the buffer's
 * keys: they must land in the buffer, and stale accesses stay at 0.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

#include "helpers.h"

#define PG ((size_t)4096)

static struct mrmgr_sim_attr sim_big = {
	.comp_mask = MRMGR_SIM_ATTR_MEMLOCK, .memlock_bytes = 1ull << 32,
};

static struct mrmgr_cache_attr cache_big = {
	.comp_mask = MRMGR_CACHE_ATTR_MAX_BYTES, .max_bytes = 1ull << 32,
};

/* A write through the buffer's rkey at offset off lands in the buffer. */
static void lands(struct fixture *f, mrmgr_buf_t *b, size_t off, char c)
{
	char v[8], *p = (char *)mrmgr_buf_data(b) + off;

	memset(v, c, sizeof(v));
	cr_assert_eq(mrmgr_sim_write(f->pd, mrmgr_buf_rkey(b),
				     (uint64_t)(uintptr_t)p, v, sizeof(v)), 0,
		     "write at offset %zu of %zu", off, mrmgr_buf_size(b));
	cr_assert_eq(memcmp(p, v, sizeof(v)), 0);
}

static void rereg_fault(struct ibv_context *ctx, int code, int err)
{
	struct mrmgr_sim_fault ft = {
		.comp_mask = MRMGR_SIM_FAULT_REREG_CODE, .op = MRMGR_SIM_OP_REREG,
		.err = err, .nth = 1, .count = 1, .rereg_code = code,
	};

	cr_assert_eq(mrmgr_sim_inject_fault(ctx, &ft), 0);
}

Test(buf, create_resize_destroy_keeps_contents_and_keys_right)
{
	struct fixture f;
	mrmgr_buf_t *b;

	fx_open(&f, &sim_big, &cache_big);
	cr_assert_eq(mrmgr_buf_create(f.cache, 100, RW, &b), 0);
	cr_assert_eq(mrmgr_buf_size(b), 100);
	cr_assert_eq(mrmgr_buf_capacity(b), PG);
	cr_assert_not_null(mrmgr_buf_mr(b));
	cr_assert_eq(mrmgr_buf_lkey(b), mrmgr_buf_mr(b)->lkey);
	cr_assert_eq(mrmgr_buf_rkey(b), mrmgr_buf_mr(b)->rkey);
	cr_assert_eq(mrmgr_buf_mr(b)->addr, mrmgr_buf_data(b));
	strcpy(mrmgr_buf_data(b), "hello");
	lands(&f, b, 64, 'a');
	uint64_t gen = mrmgr_buf_generation(b);

	cr_assert_eq(mrmgr_buf_resize(b, 3000), 0, "within capacity");
	cr_assert_eq(mrmgr_buf_generation(b), gen);
	cr_assert_eq(mrmgr_buf_resize(b, 10000), 0);
	cr_assert_str_eq(mrmgr_buf_data(b), "hello", "contents preserved");
	cr_assert_eq(mrmgr_buf_capacity(b), 3 * PG);
	cr_assert_neq(mrmgr_buf_generation(b), gen);
	cr_assert_eq(mrmgr_buf_mr(b)->addr, mrmgr_buf_data(b));
	cr_assert_eq(mrmgr_buf_mr(b)->length, 3 * PG);
	lands(&f, b, 9990, 'b');

	/* A get on buffer memory hits the buffer's own registration. Not
	 * under a sanitizer: there the resize's mremap() is reported after
	 * the call as memory mapped anew (doc/monitor.md, "Under a
	 * sanitizer"), and the get's drain applies that to the buffer's
	 * region, registered after the call but before the drain
	 * (conservative): the get registers once more. */
	mrmgr_region_t *r;
	cr_assert_eq(mrmgr_get(f.cache, (char *)mrmgr_buf_data(b) + 5000, 10,
			       IBV_ACCESS_LOCAL_WRITE, &r), 0);
	if (!dlsym(RTLD_DEFAULT, "__sanitizer_install_malloc_and_free_hooks"))
		cr_assert_eq(mrmgr_region_mr(r), mrmgr_buf_mr(b));
	mrmgr_put(r);
	cr_assert_eq(mrmgr_cache_destroy(f.cache), EBUSY, "a buffer holds it");
	cr_assert_eq(mrmgr_buf_destroy(b), 0);
	cr_assert_eq(sstats(f.ctx).live_mrs, 0, "destroy drops the registration");
	cr_assert_eq(sstats(f.ctx).stale_accesses, 0);
	fx_close(&f);
}

Test(buf, resized_10000_times_in_4k_steps, .timeout = 120)
{
	struct fixture f;
	const size_t steps = 10000;
	mrmgr_buf_t *b;

	fx_open(&f, &sim_big, &cache_big);
	cr_assert_eq(mrmgr_buf_create(f.cache, PG, RW, &b), 0);
	memset(mrmgr_buf_data(b), 0x5a, PG);
	for (size_t i = 2; i <= steps; i++) {
		cr_assert_eq(mrmgr_buf_resize(b, i * PG), 0, "step %zu", i);
		/* The new tail is registered, wherever the buffer is now. */
		lands(&f, b, i * PG - 8, (char)i);
		if (i % 1000 == 0)
			cr_assert_eq(((unsigned char *)mrmgr_buf_data(b))[0], 0x5a,
				     "contents moved with the buffer");
	}
	struct mrmgr_stats s = cstats(f.cache);
	uint64_t calls = s.registrations + s.rereg_attempts;
	uint64_t final_pages = steps;

	cr_assert_leq(calls, 30, "%llu registration calls for 10,000 steps",
		      (unsigned long long)calls);
	/* O(log n): the capacity doubles, 14 times from 1 to 16384 pages. */
	cr_assert_leq(calls, 16);
	cr_assert_leq(s.pages_registered, 4 * final_pages, "%llu pages",
		      (unsigned long long)s.pages_registered);
	cr_assert_leq(s.peak_pinned_bytes, 2 * steps * PG);
	cr_assert_eq(sstats(f.ctx).stale_accesses, 0);
	cr_assert_eq(mrmgr_buf_destroy(b), 0);
	fx_close(&f);
}

Test(buf, shrinking_to_a_quarter_halves_capacity)
{
	struct fixture f;
	mrmgr_buf_t *b;

	fx_open(&f, &sim_big, &cache_big);
	cr_assert_eq(mrmgr_buf_create(f.cache, 1 * MiB, RW, &b), 0);
	memset(mrmgr_buf_data(b), 'k', 1 * MiB);
	uint32_t rkey = mrmgr_buf_rkey(b);
	char *data = mrmgr_buf_data(b);
	cr_assert_eq(mrmgr_buf_resize(b, 300 * KiB), 0);
	cr_assert_eq(mrmgr_buf_capacity(b), 1 * MiB, "not below a quarter yet");
	cr_assert_eq(mrmgr_buf_resize(b, 100 * KiB), 0);
	cr_assert_eq(mrmgr_buf_capacity(b), 200 * KiB);
	cr_assert_eq(mrmgr_buf_data(b), data, "a shrink never moves");
	cr_assert_eq(mrmgr_buf_rkey(b), rkey, "the page list fits the key's slot");
	cr_assert_eq(((char *)mrmgr_buf_data(b))[100 * KiB - 1], 'k');
	lands(&f, b, 200 * KiB - 8, 's');
	cr_assert_eq(mrmgr_sim_write(f.pd, mrmgr_buf_rkey(b),
				     (uint64_t)(uintptr_t)data + 200 * KiB, "x", 1),
		     ERANGE, "the dropped tail is no longer registered");
	cr_assert_eq(cstats(f.cache).pinned_bytes, 200 * KiB);
	cr_assert_eq(mrmgr_buf_destroy(b), 0);
	fx_close(&f);
}

Test(buf, a_move_re_registers_onto_the_new_address)
{
	struct fixture f;
	mrmgr_buf_t *b;

	fx_open(&f, &sim_big, &cache_big);
	cr_assert_eq(mrmgr_buf_create(f.cache, 4 * PG, RW, &b), 0);
	char *old = mrmgr_buf_data(b);
	strcpy(old, "moving");
	/* Occupy the page after the buffer so that it must move to grow. */
	void *block = mmap(old + 4 * PG, PG, PROT_READ,
			   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
	if (block == MAP_FAILED)
		cr_assert_eq(errno, EEXIST, "something is there already: fine");
	else if (block != old + 4 * PG)
		cr_skip_test("MAP_FIXED_NOREPLACE not honoured by this kernel");
	uint32_t old_rkey = mrmgr_buf_rkey(b);

	cr_assert_eq(mrmgr_buf_resize(b, 6 * PG), 0);
	char *now = mrmgr_buf_data(b);
	cr_assert_neq(now, old, "mremap had to move it");
	cr_assert_str_eq(now, "moving");
	lands(&f, b, 0, 'm');
	lands(&f, b, 8 * PG - 8, 'n');
	/* Through whatever keys are in force, the old address is gone. */
	int ret = mrmgr_sim_write(f.pd, mrmgr_buf_rkey(b), (uint64_t)(uintptr_t)old,
				  "x", 1);
	cr_assert(ret == ERANGE || ret == ENOENT, "old address: %d", ret);
	if (mrmgr_buf_rkey(b) != old_rkey)
		cr_assert_eq(mrmgr_sim_write(f.pd, old_rkey, (uint64_t)(uintptr_t)old,
					     "x", 1), ENOENT);
	struct mrmgr_stats s = cstats(f.cache);
	cr_assert_eq(s.registrations, 1, "moved in place: no new registration");
	cr_assert_eq(s.rereg_successes, 1);
	cr_assert_eq(sstats(f.ctx).stale_accesses, 0);
	cr_assert_eq(mrmgr_buf_destroy(b), 0);
	if (block != MAP_FAILED)
		munmap(block, PG);
	fx_close(&f);
}

Test(buf, a_region_held_elsewhere_makes_the_buffer_register_anew)
{
	struct fixture f;
	mrmgr_buf_t *b;
	mrmgr_region_t *held;

	fx_open(&f, &sim_big, &cache_big);
	cr_assert_eq(mrmgr_buf_create(f.cache, 4 * PG, RW, &b), 0);
	cr_assert_eq(mrmgr_get(f.cache, mrmgr_buf_data(b), PG, RW, &held), 0);
	cr_assert_eq(mrmgr_region_mr(held), mrmgr_buf_mr(b));
	cr_assert_eq(mrmgr_buf_resize(b, 16 * PG), 0);
	cr_assert_neq(mrmgr_buf_mr(b), mrmgr_region_mr(held),
		      "never rereg'd under another holder");
	lands(&f, b, 16 * PG - 8, 'h');
	cr_assert_eq(mrmgr_region_length(held), 4 * PG, "the holder's is untouched");
	struct mrmgr_stats s = cstats(f.cache);
	cr_assert_eq(s.make_before_break, 1);
	cr_assert_eq(s.rereg_attempts, 0);
	cr_assert_eq(sstats(f.ctx).live_mrs, 2);
	mrmgr_put(held);
	cr_assert_eq(sstats(f.ctx).live_mrs, 1, "the old one goes at its put");
	cr_assert_eq(mrmgr_buf_destroy(b), 0);
	fx_close(&f);
}

static void resize_through(int code, int err)
{
	struct fixture f;
	mrmgr_buf_t *b;

	fx_open(&f, &sim_big, &cache_big);
	cr_assert_eq(mrmgr_buf_create(f.cache, 2 * PG, RW, &b), 0);
	strcpy(mrmgr_buf_data(b), "contract");
	rereg_fault(f.ctx, code, err);
	cr_assert_eq(mrmgr_buf_resize(b, 5 * PG), 0, "code %d", code);
	cr_assert_str_eq(mrmgr_buf_data(b), "contract");
	cr_assert_eq(mrmgr_buf_mr(b)->addr, mrmgr_buf_data(b));
	cr_assert_eq(mrmgr_buf_mr(b)->length, mrmgr_buf_capacity(b));
	lands(&f, b, 0, 'a');
	lands(&f, b, mrmgr_buf_capacity(b) - 8, 'z');
	struct mrmgr_stats s = cstats(f.cache);
	cr_assert_eq(s.rereg_attempts, 1);
	cr_assert_eq(s.registrations, code == IBV_REREG_MR_ERR_DO_FORK_OLD ? 1 : 2,
		     "code %d", code);
	/* An MR that must not be used is deregistered before the new one is
	 * made; a valid one stays until the new one is in (or, for
	 * DO_FORK_OLD, the device pins both during the call). */
	cr_assert_eq(sstats(f.ctx).peak_pinned_bytes,
		     code <= IBV_REREG_MR_ERR_CMD ? 5 * PG : 7 * PG, "code %d", code);
	cr_assert_eq(sstats(f.ctx).live_mrs, 1, "code %d: nothing leaked", code);
	cr_assert_eq(sstats(f.ctx).stale_accesses, 0);
	cr_assert_eq(mrmgr_buf_destroy(b), 0);
	fx_close(&f);
}

Test(buf, each_rereg_error_code_is_survived)
{
	resize_through(IBV_REREG_MR_ERR_INPUT, EINVAL);
	resize_through(IBV_REREG_MR_ERR_DONT_FORK_NEW, ENOMEM);
	resize_through(IBV_REREG_MR_ERR_DO_FORK_OLD, EINVAL);
	resize_through(IBV_REREG_MR_ERR_CMD, EIO);
	resize_through(IBV_REREG_MR_ERR_CMD_AND_DO_FORK_NEW, EIO);
	resize_through(IBV_REREG_MR_ERR_CMD, EOPNOTSUPP);
}

Test(buf, a_failed_registration_leaves_it_unregistered_until_retried)
{
	struct fixture f;
	struct mrmgr_sim_fault regs = { .op = MRMGR_SIM_OP_REG, .err = ENOMEM,
					.nth = 1, .count = 0 };
	mrmgr_buf_t *b;

	fx_open(&f, &sim_big, &cache_big);
	cr_assert_eq(mrmgr_buf_create(f.cache, PG, RW, &b), 0);
	strcpy(mrmgr_buf_data(b), "kept");
	rereg_fault(f.ctx, IBV_REREG_MR_ERR_CMD, EIO);
	cr_assert_eq(mrmgr_sim_inject_fault(f.ctx, &regs), 0);
	cr_assert_eq(mrmgr_buf_resize(b, 3 * PG), ENOMEM);
	cr_assert_null(mrmgr_buf_mr(b));
	cr_assert_eq(mrmgr_buf_rkey(b), 0);
	cr_assert_eq(mrmgr_cache_destroy(f.cache), EBUSY,
		     "a buffer without a registration still uses the cache");
	cr_assert_eq(mrmgr_buf_size(b), 3 * PG);
	cr_assert_str_eq(mrmgr_buf_data(b), "kept");
	cr_assert_eq(sstats(f.ctx).live_mrs, 0, "the dead MR was deregistered");
	cr_assert_eq(mrmgr_sim_clear_faults(f.ctx), 0);
	cr_assert_eq(mrmgr_buf_resize(b, 3 * PG), 0, "a retry registers");
	cr_assert_not_null(mrmgr_buf_mr(b));
	lands(&f, b, 3 * PG - 8, 'r');
	cr_assert_eq(mrmgr_buf_destroy(b), 0);
	fx_close(&f);
}

Test(buf, rxe_personality_falls_back_to_new_registrations)
{
	struct fixture f;
	struct mrmgr_sim_attr sa = sim_big;
	mrmgr_buf_t *b;

	sa.comp_mask |= MRMGR_SIM_ATTR_PERSONALITY;
	sa.personality = MRMGR_SIM_RXE;
	fx_open(&f, &sa, &cache_big);
	cr_assert_eq(mrmgr_buf_create(f.cache, PG, RW, &b), 0);
	for (size_t i = 2; i <= 64; i++) {
		uint64_t gen = mrmgr_buf_generation(b);
		size_t cap = mrmgr_buf_capacity(b);

		cr_assert_eq(mrmgr_buf_resize(b, i * PG), 0);
		lands(&f, b, i * PG - 8, 'x');
		if (mrmgr_buf_capacity(b) != cap)
			cr_assert_neq(mrmgr_buf_generation(b), gen);
	}
	struct mrmgr_stats s = cstats(f.cache);
	cr_assert_eq(s.rereg_probes, 1);
	cr_assert_eq(s.rereg_attempts, 0);
	cr_assert_eq(s.registrations, 7, "one per capacity: 1, 2, 4, ... 64 pages");
	cr_assert_eq(s.rereg_fallback_unsupported, 6);
	cr_assert_eq(sstats(f.ctx).live_mrs, 1);
	cr_assert_eq(mrmgr_buf_destroy(b), 0);
	fx_close(&f);
}

Test(buf, follows_a_pd_move)
{
	struct fixture f;
	struct ibv_pd *pd2;
	mrmgr_buf_t *b;

	fx_open(&f, &sim_big, &cache_big);
	cr_assert_eq(mrmgr_sim_alloc_pd(f.ctx, &pd2), 0);
	cr_assert_eq(mrmgr_buf_create(f.cache, 8 * PG, RW, &b), 0);
	uint64_t gen = mrmgr_buf_generation(b);
	uint32_t rkey = mrmgr_buf_rkey(b);
	cr_assert_eq(mrmgr_cache_move_pd(f.cache, pd2), 0);
	cr_assert_eq(mrmgr_buf_mr(b)->pd, pd2);
	cr_assert_neq(mrmgr_buf_generation(b), gen);
	cr_assert_eq(mrmgr_buf_rkey(b), rkey, "moved in place: keys kept");
	cr_assert_eq(mrmgr_sim_dealloc_pd(f.pd), 0, "nothing left in the old PD");
	f.pd = pd2;
	lands(&f, b, 8 * PG - 8, 'p');
	cr_assert_eq(mrmgr_buf_destroy(b), 0);
	fx_close(&f);
}

Test(buf, bad_input_is_einval)
{
	struct fixture f;
	mrmgr_buf_t *b = NULL;

	fx_open(&f, &sim_big, &cache_big);
	cr_assert_eq(mrmgr_buf_create(NULL, PG, RW, &b), EINVAL);
	cr_assert_eq(mrmgr_buf_create(f.cache, PG, RW, NULL), EINVAL);
	cr_assert_eq(mrmgr_buf_create(f.cache, PG, IBV_ACCESS_REMOTE_WRITE, &b), EINVAL);
	cr_assert_eq(mrmgr_buf_create(f.cache, SIZE_MAX, RW, &b), EINVAL);
	cr_assert_null(b);
	cr_assert_eq(mrmgr_buf_resize(NULL, PG), EINVAL);
	cr_assert_eq(mrmgr_buf_destroy(NULL), EINVAL);
	cr_assert_null(mrmgr_buf_data(NULL));
	cr_assert_eq(mrmgr_buf_rkey(NULL), 0);
	cr_assert_eq(mrmgr_buf_generation(NULL), 0);
	cr_assert_eq(mrmgr_buf_create(f.cache, 0, RW, &b), 0, "size 0 is fine");
	cr_assert_eq(mrmgr_buf_capacity(b), PG);
	cr_assert_eq(mrmgr_buf_resize(b, SIZE_MAX), EINVAL);
	cr_assert_eq(mrmgr_buf_destroy(b), 0);
	fx_close(&f);
}

Test(buf, works_on_a_disabled_or_full_cache)
{
	struct mrmgr_cache_attr off = { .comp_mask = MRMGR_CACHE_ATTR_FLAGS,
					.flags = MRMGR_CACHE_DISABLE };
	struct mrmgr_cache_attr tiny = { .comp_mask = MRMGR_CACHE_ATTR_MAX_BYTES,
					 .max_bytes = 2 * PG };
	const struct mrmgr_cache_attr *attrs[] = { &off, &tiny };

	for (int i = 0; i < 2; i++) {
		struct fixture f;
		mrmgr_buf_t *b;

		fx_open(&f, &sim_big, attrs[i]);
		cr_assert_eq(mrmgr_buf_create(f.cache, PG, RW, &b), 0);
		for (size_t n = 2; n <= 9; n++) {
			cr_assert_eq(mrmgr_buf_resize(b, n * PG), 0);
			lands(&f, b, n * PG - 8, 'd');
		}
		cr_assert_eq(sstats(f.ctx).live_mrs, 1);
		cr_assert_eq(mrmgr_buf_destroy(b), 0);
		fx_close(&f);
	}
}

Test(buf, a_move_leaves_nothing_cached_at_the_old_address)
{
	struct fixture f;
	mrmgr_buf_t *b;
	mrmgr_region_t *q, *fresh;

	if (!mrmgr_sim_page_identity_available())
		cr_skip_test("page identity needs /proc/self/pagemap PFNs (root)");
	fx_open(&f, &sim_big, &cache_big);
	cr_assert_eq(mrmgr_buf_create(f.cache, 4 * PG, IBV_ACCESS_LOCAL_WRITE, &b), 0);
	char *old = mrmgr_buf_data(b);
	/* Another registration of the buffer's pages, cached and idle. */
	cr_assert_eq(mrmgr_get(f.cache, old, 4 * PG, RW, &q), 0);
	cr_assert_neq(mrmgr_region_mr(q), mrmgr_buf_mr(b));
	mrmgr_put(q);
	void *block = mmap(old + 4 * PG, PG, PROT_READ,
			   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
	if (block == MAP_FAILED)
		cr_assert_eq(errno, EEXIST);
	cr_assert_eq(mrmgr_buf_resize(b, 6 * PG), 0);
	cr_assert_neq(mrmgr_buf_data(b), old, "moved");

	/* New memory at the old address: no registration of the moved
	 * pages may be found there. */
	char *again = mmap(old, 4 * PG, PROT_READ | PROT_WRITE,
			   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
	if (again != old)
		cr_skip_test("could not map the old address again");
	memset(again, 'n', 4 * PG);
	cr_assert_eq(mrmgr_get(f.cache, again, 4 * PG, RW, &fresh), 0);
	cr_assert_eq(mrmgr_sim_write(f.pd, mrmgr_region_rkey(fresh),
				     (uint64_t)(uintptr_t)again, "W", 1), 0);
	cr_assert_eq(again[0], 'W', "the write landed in the new memory");
	cr_assert_eq(sstats(f.ctx).stale_accesses, 0);
	mrmgr_put(fresh);
	cr_assert_eq(mrmgr_invalidate(f.cache, again, 4 * PG), 0);
	munmap(again, 4 * PG);
	cr_assert_eq(mrmgr_buf_destroy(b), 0);
	if (block != MAP_FAILED)
		munmap(block, PG);
	fx_close(&f);
}

/* The one buffer query: what each inline accessor reads, follows a
 * resize, and refuses bad input. */
Test(buf, query_is_what_the_accessors_read)
{
	struct fixture f;
	struct mrmgr_buf_info bi;
	mrmgr_buf_t *b;

	fx_open(&f, &sim_big, &cache_big);
	cr_assert_eq(mrmgr_buf_create(f.cache, 100, RW, &b), 0);
	cr_assert_eq(mrmgr_buf_query(b, &bi, sizeof(bi)), 0);
	cr_assert_eq(bi.size, 100);
	cr_assert_eq(bi.capacity, PG);
	cr_assert_not_null(bi.data);
	cr_assert_not_null(bi.mr);
	cr_assert_eq(bi.mr->addr, bi.data);
	uint64_t gen = bi.generation;

	cr_assert_eq(mrmgr_buf_resize(b, 3 * PG), 0);
	cr_assert_eq(mrmgr_buf_query(b, &bi, sizeof(bi)), 0);
	cr_assert_eq(bi.size, 3 * PG);
	cr_assert_eq(bi.capacity, 3 * PG);
	cr_assert_neq(bi.generation, gen, "a new registration");
	cr_assert_eq(bi.data, mrmgr_buf_data(b));
	cr_assert_eq(bi.mr, mrmgr_buf_mr(b));
	cr_assert_eq(bi.generation, mrmgr_buf_generation(b));
	cr_assert_eq(bi.mr->length, bi.capacity);

	memset(&bi, 0xab, sizeof(bi));
	cr_assert_eq(mrmgr_buf_query(b, &bi, sizeof(void *)), 0);
	cr_assert_eq(bi.data, mrmgr_buf_data(b));
	cr_assert_eq(bi.size, (size_t)0xababababababababull, "nothing past size");
	cr_assert_eq(mrmgr_buf_query(NULL, &bi, sizeof(bi)), EINVAL);
	cr_assert_eq(mrmgr_buf_query(b, NULL, sizeof(bi)), EINVAL);
	cr_assert_eq(mrmgr_buf_query(b, &bi, 0), EINVAL);
	cr_assert_eq(mrmgr_buf_size(NULL), 0);
	cr_assert_eq(mrmgr_buf_destroy(b), 0);
	fx_close(&f);
}
