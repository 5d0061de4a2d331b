/*
 * Growth, access upgrades, PD moves and the ibv_rereg_mr() contract, on
 * the simulated HCA: the sim's rereg model first, then every branch of the
 * cache's growth (in place, make-before-break, headroom, each of the five
 * error codes and EOPNOTSUPP, shared regions, the rxe personality's probe
 * and fallback), checked through simulated RDMA writes: a write must land
 * in the buffer through the keys the cache hands out, and never in pages
 * that are no longer the region's (stale_accesses stays 0).
 *
 * SPDX-License-Identifier: MIT
 */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <unistd.h>

#include "helpers.h"

#include "cache.h" /* mrmgr_region::kind, to mark a region shared */

#define PG ((size_t)4096)
#define LW IBV_ACCESS_LOCAL_WRITE

static struct mrmgr_sim_attr sim_big = {
	.comp_mask = MRMGR_SIM_ATTR_MEMLOCK, .memlock_bytes = 1ull << 32,
};

static struct mrmgr_sim_attr sim_rxe = {
	.comp_mask = MRMGR_SIM_ATTR_MEMLOCK | MRMGR_SIM_ATTR_PERSONALITY,
	.memlock_bytes = 1ull << 32, .personality = MRMGR_SIM_RXE,
};

static struct mrmgr_cache_attr cattr(uint64_t flags)
{
	struct mrmgr_cache_attr a = {
		.comp_mask = MRMGR_CACHE_ATTR_MAX_BYTES | MRMGR_CACHE_ATTR_FLAGS,
		.max_bytes = 1ull << 32,
		.flags = flags,
	};
	return a;
}

/* len bytes read-write between two PROT_NONE pages: a mapping of exactly len. */
static char *map_guarded(size_t len)
{
	char *p = mmap(NULL, len + 2 * PG, PROT_NONE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	cr_assert_neq(p, MAP_FAILED);
	cr_assert_eq(mprotect(p + PG, len, PROT_READ | PROT_WRITE), 0);
	memset(p + PG, 0, len);
	return p + PG;
}

static void unmap_guarded(char *p, size_t len)
{
	munmap(p - PG, len + 2 * PG);
}

/* A simulated RDMA WRITE through rkey must land at p. */
static void write_lands(struct ibv_pd *pd, uint32_t rkey, char *p, char c)
{
	char v[8];

	memset(v, c, sizeof(v));
	cr_assert_eq(mrmgr_sim_write(pd, rkey, (uint64_t)(uintptr_t)p, v, sizeof(v)),
		     0, "write through rkey %#x at %p", rkey, (void *)p);
	cr_assert_eq(memcmp(p, v, sizeof(v)), 0, "the write landed elsewhere");
}

static int write_err(struct ibv_pd *pd, uint32_t rkey, char *p)
{
	return mrmgr_sim_write(pd, rkey, (uint64_t)(uintptr_t)p, "x", 1);
}

static void rereg_fault(struct ibv_context *ctx, int code, int err)
{
	struct mrmgr_sim_fault ft = {
		.comp_mask = code ? MRMGR_SIM_FAULT_REREG_CODE : 0,
		.op = MRMGR_SIM_OP_REREG, .err = err, .nth = 1, .count = 1,
		.rereg_code = code,
	};

	cr_assert_eq(mrmgr_sim_inject_fault(ctx, &ft), 0);
}

/* ================================================================ sim */

static struct mrmgr_sim_stats sst(struct ibv_context *ctx)
{
	return sstats(ctx);
}

/* A device and a PD, no cache: the sim's own behaviour. */
static void dev_open(struct fixture *f, const struct mrmgr_sim_attr *sa)
{
	memset(f, 0, sizeof(*f));
	cr_assert_eq(mrmgr_sim_open(sa, &f->ctx), 0);
	cr_assert_eq(mrmgr_sim_alloc_pd(f->ctx, &f->pd), 0);
}

Test(sim_rereg, translation_keeps_keys_while_the_slot_fits)
{
	struct fixture f;
	struct ibv_mr *mr;
	char *buf = map_rw(16 * PG, 0);
	int code = 1;

	dev_open(&f, &sim_big);
	cr_assert_eq(mrmgr_sim_reg_mr(f.pd, buf, 3 * PG, RW, &mr), 0);
	uint32_t lkey = mr->lkey, rkey = mr->rkey;
	uint64_t pinned0 = sst(f.ctx).pinned_bytes;

	/* 3 pages: the key's slot holds 4. */
	cr_assert_eq(mrmgr_sim_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL,
					buf, 4 * PG, 0, &code), 0);
	cr_assert_eq(code, 0);
	cr_assert_eq(mr->lkey, lkey);
	cr_assert_eq(mr->rkey, rkey);
	cr_assert_eq(mr->length, 4 * PG);
	cr_assert_eq(sst(f.ctx).pinned_bytes, pinned0 + PG);
	write_lands(f.pd, mr->rkey, buf + 3 * PG, 'a');

	/* 5 pages do not fit: new keys, the old ones are dead. */
	uint64_t peak0 = sst(f.ctx).peak_pinned_bytes;
	cr_assert_eq(mrmgr_sim_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL,
					buf, 5 * PG, 0, &code), 0);
	cr_assert_neq(mr->rkey, rkey);
	cr_assert_eq(write_err(f.pd, rkey, buf), ENOENT);
	write_lands(f.pd, mr->rkey, buf + 4 * PG, 'b');
	cr_assert_eq(sst(f.ctx).rereg_key_changes, 1);
	/* The new range was pinned while the old one still was. */
	cr_assert_eq(peak0, 7 * PG);
	cr_assert_eq(sst(f.ctx).peak_pinned_bytes, 9 * PG);
	cr_assert_eq(sst(f.ctx).pinned_bytes, pinned0 + 2 * PG);

	/* Elsewhere: the old pages are no longer the MR's. */
	cr_assert_eq(mrmgr_sim_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL,
					buf + 8 * PG, 4 * PG, 0, &code), 0);
	cr_assert_eq(write_err(f.pd, mr->rkey, buf), ERANGE);
	write_lands(f.pd, mr->rkey, buf + 8 * PG, 'c');
	cr_assert_eq(sst(f.ctx).reregs, 3);
	cr_assert_eq(sst(f.ctx).rereg_pages, 4 + 5 + 4);
	cr_assert_eq(mrmgr_sim_dereg_mr(mr), 0);
	fx_close(&f);
	munmap(buf, 16 * PG);
}

Test(sim_rereg, access_and_pd_changes_keep_keys)
{
	struct fixture f;
	struct ibv_pd *pd2;
	struct ibv_mr *mr;
	char *buf = map_rw(4 * PG, 0);

	dev_open(&f, &sim_big);
	cr_assert_eq(mrmgr_sim_alloc_pd(f.ctx, &pd2), 0);
	cr_assert_eq(mrmgr_sim_reg_mr(f.pd, buf, 4 * PG, IBV_ACCESS_REMOTE_READ, &mr), 0);
	uint32_t rkey = mr->rkey;
	cr_assert_eq(write_err(f.pd, rkey, buf), EACCES);

	cr_assert_eq(mrmgr_sim_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0,
					RW, NULL), 0);
	cr_assert_eq(mr->rkey, rkey);
	write_lands(f.pd, rkey, buf, 'a');

	cr_assert_eq(mrmgr_sim_rereg_mr(mr, IBV_REREG_MR_CHANGE_PD, pd2, NULL, 0, 0,
					NULL), 0);
	cr_assert_eq(mr->rkey, rkey);
	cr_assert_eq(mr->pd, pd2);
	cr_assert_eq(write_err(f.pd, rkey, buf), ENOENT, "not in the old PD");
	write_lands(pd2, rkey, buf, 'b');
	cr_assert_eq(mrmgr_sim_dealloc_pd(pd2), EBUSY, "the MR is in pd2 now");
	cr_assert_eq(mrmgr_sim_dereg_mr(mr), 0);
	cr_assert_eq(mrmgr_sim_dealloc_pd(pd2), 0);
	fx_close(&f);
	munmap(buf, 4 * PG);
}

Test(sim_rereg, input_errors_leave_the_mr_valid)
{
	struct fixture f;
	struct ibv_mr *mr;
	char *buf = map_rw(4 * PG, 0);
	int code;

	dev_open(&f, &sim_big);
	cr_assert_eq(mrmgr_sim_reg_mr(f.pd, buf, 2 * PG, RW, &mr), 0);
	cr_assert_eq(mrmgr_sim_rereg_mr(mr, 1 << 7, NULL, buf, PG, 0, &code), EINVAL);
	cr_assert_eq(code, IBV_REREG_MR_ERR_INPUT);
	cr_assert_eq(mrmgr_sim_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL,
					NULL, PG, 0, &code), EINVAL);
	cr_assert_eq(code, IBV_REREG_MR_ERR_INPUT);
	cr_assert_eq(mrmgr_sim_rereg_mr(mr, IBV_REREG_MR_CHANGE_PD, f.pd, NULL, 0,
					RW, &code), EINVAL, "access without its flag");
	cr_assert_eq(code, IBV_REREG_MR_ERR_INPUT);
	write_lands(f.pd, mr->rkey, buf + PG, 'a');
	cr_assert_eq(mrmgr_sim_dereg_mr(mr), 0);
	fx_close(&f);
	munmap(buf, 4 * PG);
}

Test(sim_rereg, command_errors_leave_an_unusable_mr)
{
	struct fixture f;
	struct ibv_context *ctx2;
	struct ibv_pd *other;
	struct ibv_mr *a, *b;
	char *buf = map_rw(4 * PG, 0);
	char *gone = map_rw(4 * PG, 0);
	int code;

	munmap(gone, 4 * PG);
	dev_open(&f, &sim_big);
	cr_assert_eq(mrmgr_sim_open(NULL, &ctx2), 0);
	cr_assert_eq(mrmgr_sim_alloc_pd(ctx2, &other), 0);

	cr_assert_eq(mrmgr_sim_reg_mr(f.pd, buf, 2 * PG, RW, &a), 0);
	cr_assert_eq(mrmgr_sim_rereg_mr(a, IBV_REREG_MR_CHANGE_TRANSLATION, NULL,
					gone, 4 * PG, 0, &code), EFAULT);
	cr_assert_eq(code, IBV_REREG_MR_ERR_CMD);
	cr_assert_eq(write_err(f.pd, a->rkey, buf), ENOENT, "unusable");
	cr_assert_eq(sst(f.ctx).pinned_bytes, 2 * PG, "nothing more pinned");

	cr_assert_eq(mrmgr_sim_reg_mr(f.pd, buf, 2 * PG, RW, &b), 0);
	cr_assert_eq(mrmgr_sim_rereg_mr(b, IBV_REREG_MR_CHANGE_PD, other, NULL, 0, 0,
					&code), EINVAL);
	cr_assert_eq(code, IBV_REREG_MR_ERR_CMD);
	/* Dereg still works, as the man page requires. */
	cr_assert_eq(mrmgr_sim_dereg_mr(a), 0);
	cr_assert_eq(mrmgr_sim_dereg_mr(b), 0);
	cr_assert_eq(mrmgr_sim_dealloc_pd(other), 0);
	cr_assert_eq(mrmgr_sim_close(ctx2), 0);
	fx_close(&f);
	munmap(buf, 4 * PG);
}

Test(sim_rereg, memlock_counts_old_and_new_during_the_call)
{
	struct fixture f;
	struct mrmgr_sim_attr sa = { .comp_mask = MRMGR_SIM_ATTR_MEMLOCK,
				     .memlock_bytes = 8 * PG };
	struct ibv_mr *mr;
	char *buf = map_rw(8 * PG, 0);
	int code;

	dev_open(&f, &sa);
	cr_assert_eq(mrmgr_sim_reg_mr(f.pd, buf, 4 * PG, RW, &mr), 0);
	cr_assert_eq(mrmgr_sim_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL,
					buf, 6 * PG, 0, &code), ENOMEM);
	cr_assert_eq(code, IBV_REREG_MR_ERR_CMD);
	cr_assert_eq(mrmgr_sim_dereg_mr(mr), 0);
	fx_close(&f);
	munmap(buf, 8 * PG);
}

Test(sim_rereg, rxe_refuses_like_the_real_device)
{
	struct fixture f;
	struct ibv_mr *mr;
	char *buf = map_rw(4 * PG, 0);
	int code;

	dev_open(&f, &sim_rxe);
	cr_assert_eq(mrmgr_sim_reg_mr(f.pd, buf, 2 * PG, RW, &mr), 0);
	cr_assert_eq(mrmgr_sim_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL,
					buf, 4 * PG, 0, &code), EOPNOTSUPP);
	cr_assert_eq(code, IBV_REREG_MR_ERR_CMD);
	cr_assert_eq(mr->length, 2 * PG);
	write_lands(f.pd, mr->rkey, buf, 'a'); /* nothing happened to it */
	cr_assert_eq(mrmgr_sim_dereg_mr(mr), 0);
	fx_close(&f);
	munmap(buf, 4 * PG);
}

Test(sim_rereg, injected_codes_leave_the_promised_state)
{
	static const int codes[] = {
		IBV_REREG_MR_ERR_INPUT, IBV_REREG_MR_ERR_DONT_FORK_NEW,
		IBV_REREG_MR_ERR_DO_FORK_OLD, IBV_REREG_MR_ERR_CMD,
		IBV_REREG_MR_ERR_CMD_AND_DO_FORK_NEW,
	};
	struct fixture f;
	char *buf = map_rw(8 * PG, 0);

	dev_open(&f, &sim_big);
	for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++) {
		struct ibv_mr *mr;
		int code = 0;

		cr_assert_eq(mrmgr_sim_reg_mr(f.pd, buf, 2 * PG, RW, &mr), 0);
		rereg_fault(f.ctx, codes[i], EIO);
		cr_assert_eq(mrmgr_sim_rereg_mr(mr, IBV_REREG_MR_CHANGE_TRANSLATION,
						NULL, buf, 8 * PG, 0, &code), EIO);
		cr_assert_eq(code, codes[i]);
		if (codes[i] == IBV_REREG_MR_ERR_DO_FORK_OLD) {
			cr_assert_eq(mr->length, 8 * PG, "the new MR is valid");
			write_lands(f.pd, mr->rkey, buf + 7 * PG, 'n');
		} else if (codes[i] >= IBV_REREG_MR_ERR_DONT_FORK_NEW) {
			cr_assert_eq(mr->length, 2 * PG, "the old MR is valid");
			write_lands(f.pd, mr->rkey, buf + PG, 'o');
			cr_assert_eq(write_err(f.pd, mr->rkey, buf + 7 * PG), ERANGE);
		} else {
			cr_assert_eq(write_err(f.pd, mr->rkey, buf), ENOENT,
				     "code %d: the MR must not be usable", codes[i]);
		}
		cr_assert_eq(mrmgr_sim_dereg_mr(mr), 0);
	}
	/* A code needs the rereg op and must be one of the five. */
	struct mrmgr_sim_fault bad = { .comp_mask = MRMGR_SIM_FAULT_REREG_CODE,
				       .op = MRMGR_SIM_OP_REG, .err = EIO, .nth = 1,
				       .rereg_code = IBV_REREG_MR_ERR_CMD };
	cr_assert_eq(mrmgr_sim_inject_fault(f.ctx, &bad), EINVAL);
	bad.op = MRMGR_SIM_OP_REREG;
	bad.rereg_code = -6;
	cr_assert_eq(mrmgr_sim_inject_fault(f.ctx, &bad), EINVAL);
	fx_close(&f);
	munmap(buf, 8 * PG);
}

/* ================================================================ growth */

Test(grow, same_start_longer_rereg_in_place)
{
	struct fixture f;
	struct mrmgr_cache_attr a = cattr(MRMGR_CACHE_NO_HEADROOM);
	mrmgr_region_t *r1, *r2;
	char *buf = map_rw(64 * KiB, 0);

	fx_open(&f, &sim_big, &a);
	cr_assert_eq(mrmgr_get(f.cache, buf, 16 * KiB, RW, &r1), 0);
	uint64_t gen = mrmgr_region_generation(r1);
	mrmgr_put(r1);
	cr_assert_eq(mrmgr_get(f.cache, buf, 32 * KiB, RW, &r2), 0);
	cr_assert_eq(r2, r1, "grown in place: the same region");
	cr_assert_neq(mrmgr_region_generation(r2), gen);
	cr_assert_eq(mrmgr_region_length(r2), 32 * KiB);
	cr_assert_eq(mrmgr_region_mr(r2)->length, 32 * KiB);
	write_lands(f.pd, mrmgr_region_rkey(r2), buf, 'a');
	write_lands(f.pd, mrmgr_region_rkey(r2), buf + 32 * KiB - 8, 'b');
	mrmgr_put(r2);

	struct mrmgr_stats s = cstats(f.cache);
	cr_assert_eq(s.registrations, 1);
	cr_assert_eq(s.rereg_attempts, 1);
	cr_assert_eq(s.rereg_successes, 1);
	cr_assert_eq(s.grows, 1);
	cr_assert_eq(s.deregistrations, 0);
	cr_assert_eq(s.pinned_bytes, 32 * KiB);
	cr_assert_eq(s.pages_registered, (16 + 32) * KiB / PG);
	cr_assert_eq(sstats(f.ctx).live_mrs, 1);
	cr_assert_eq(sstats(f.ctx).stale_accesses, 0);
	fx_close(&f);
	munmap(buf, 64 * KiB);
}

Test(grow, overlapping_request_reaching_past_grows_and_adjacent_merges)
{
	struct fixture f;
	struct mrmgr_cache_attr a = cattr(MRMGR_CACHE_NO_HEADROOM);
	mrmgr_region_t *r1, *r2, *r3;
	char *buf = map_rw(128 * KiB, 0);

	fx_open(&f, &sim_big, &a);
	cr_assert_eq(mrmgr_get(f.cache, buf + 16 * KiB, 16 * KiB, RW, &r1), 0);
	mrmgr_put(r1);
	cr_assert_eq(mrmgr_get(f.cache, buf + 24 * KiB, 24 * KiB, RW, &r2), 0);
	cr_assert_eq(r2, r1);
	cr_assert_eq(mrmgr_region_addr(r2), buf + 16 * KiB);
	cr_assert_eq(mrmgr_region_length(r2), 32 * KiB);
	mrmgr_put(r2);
	/* Merely touching: not growth, but still one region, in place. */
	cr_assert_eq(mrmgr_get(f.cache, buf + 48 * KiB, 16 * KiB, RW, &r3), 0);
	cr_assert_eq(r3, r1);
	cr_assert_eq(mrmgr_region_length(r3), 48 * KiB);
	write_lands(f.pd, mrmgr_region_rkey(r3), buf + 60 * KiB, 'z');
	mrmgr_put(r3);
	struct mrmgr_stats s = cstats(f.cache);
	cr_assert_eq(s.grows, 1);
	cr_assert_eq(s.rereg_successes, 2);
	cr_assert_eq(s.registrations, 1);
	fx_close(&f);
	munmap(buf, 128 * KiB);
}

Test(grow, headroom_doubles_within_the_mapping)
{
	struct fixture f;
	struct mrmgr_cache_attr a = cattr(0);
	mrmgr_region_t *r;
	char *buf = map_guarded(1 * MiB);

	fx_open(&f, &sim_big, &a);
	cr_assert_eq(mrmgr_get(f.cache, buf, 64 * KiB, RW, &r), 0);
	cr_assert_eq(mrmgr_region_length(r), 64 * KiB, "a fresh miss gets no headroom");
	mrmgr_put(r);
	cr_assert_eq(mrmgr_get(f.cache, buf, 68 * KiB, RW, &r), 0);
	cr_assert_eq(mrmgr_region_length(r), 128 * KiB);
	mrmgr_put(r);
	cr_assert_eq(cstats(f.cache).headroom_bytes, 60 * KiB);
	uint64_t regs = cstats(f.cache).registrations + cstats(f.cache).rereg_attempts;
	for (size_t len = 72 * KiB; len <= 128 * KiB; len += 4 * KiB) {
		cr_assert_eq(mrmgr_get(f.cache, buf, len, RW, &r), 0);
		mrmgr_put(r);
	}
	cr_assert_eq(cstats(f.cache).registrations + cstats(f.cache).rereg_attempts,
		     regs, "growth within the headroom hits");
	write_lands(f.pd, mrmgr_region_rkey(r), buf + 128 * KiB - 8, 'h');
	fx_close(&f);
	unmap_guarded(buf, 1 * MiB);
}

Test(grow, headroom_never_passes_the_mapping_or_its_protections)
{
	struct fixture f;
	struct mrmgr_cache_attr a = cattr(0);
	mrmgr_region_t *r;
	char *buf = map_guarded(40 * KiB);
	char *two = map_guarded(96 * KiB);

	fx_open(&f, &sim_big, &a);
	cr_assert_eq(mrmgr_get(f.cache, buf, 16 * KiB, RW, &r), 0);
	mrmgr_put(r);
	cr_assert_eq(mrmgr_get(f.cache, buf, 20 * KiB, RW, &r), 0);
	cr_assert_eq(mrmgr_region_length(r), 32 * KiB);
	mrmgr_put(r);
	cr_assert_eq(mrmgr_get(f.cache, buf, 36 * KiB, RW, &r), 0);
	cr_assert_eq(mrmgr_region_length(r), 40 * KiB, "the mapping's end");
	mrmgr_put(r);

	/* The upper half read-only: another protection, another mapping. */
	cr_assert_eq(mprotect(two + 48 * KiB, 48 * KiB, PROT_READ), 0);
	cr_assert_eq(mrmgr_get(f.cache, two, 32 * KiB, IBV_ACCESS_REMOTE_READ, &r), 0);
	mrmgr_put(r);
	cr_assert_eq(mrmgr_get(f.cache, two, 36 * KiB, IBV_ACCESS_REMOTE_READ, &r), 0);
	cr_assert_eq(mrmgr_region_length(r), 48 * KiB);
	mrmgr_put(r);
	fx_close(&f);
	unmap_guarded(buf, 40 * KiB);
	unmap_guarded(two, 96 * KiB);
}

Test(grow, headroom_stops_at_the_next_region)
{
	struct fixture f;
	struct mrmgr_cache_attr a = cattr(0);
	mrmgr_region_t *r, *b;
	char *buf = map_guarded(256 * KiB);

	fx_open(&f, &sim_big, &a);
	cr_assert_eq(mrmgr_get(f.cache, buf + 40 * KiB, 4 * KiB, RW, &b), 0);
	mrmgr_put(b);
	cr_assert_eq(mrmgr_get(f.cache, buf, 16 * KiB, RW, &r), 0);
	mrmgr_put(r);
	cr_assert_eq(mrmgr_get(f.cache, buf, 20 * KiB, RW, &r), 0);
	cr_assert_eq(mrmgr_region_length(r), 32 * KiB);
	mrmgr_put(r);
	cr_assert_eq(mrmgr_get(f.cache, buf, 36 * KiB, RW, &r), 0);
	cr_assert_eq(mrmgr_region_length(r), 40 * KiB, "up to the neighbour");
	cr_assert_neq(r, b);
	mrmgr_put(r);
	cr_assert_eq(cstats(f.cache).regions, 2);
	fx_close(&f);
	unmap_guarded(buf, 256 * KiB);
}

Test(grow, headroom_off_by_flag_or_environment)
{
	struct fixture f;
	struct mrmgr_cache_attr a = cattr(0);
	mrmgr_region_t *r;
	char *buf = map_guarded(1 * MiB);

	setenv("MRMGR_GROW_HEADROOM", "0", 1);
	fx_open(&f, &sim_big, &a);
	unsetenv("MRMGR_GROW_HEADROOM");
	cr_assert_eq(mrmgr_get(f.cache, buf, 64 * KiB, RW, &r), 0);
	mrmgr_put(r);
	cr_assert_eq(mrmgr_get(f.cache, buf, 68 * KiB, RW, &r), 0);
	cr_assert_eq(mrmgr_region_length(r), 68 * KiB);
	mrmgr_put(r);
	cr_assert_eq(cstats(f.cache).headroom_bytes, 0);
	fx_close(&f);
	unmap_guarded(buf, 1 * MiB);
}

Test(grow, linear_growth_through_get_costs_log_n_registrations)
{
	struct fixture f;
	struct mrmgr_cache_attr a = cattr(0);
	const size_t steps = 2000, len = steps * PG;
	mrmgr_region_t *r;
	char *buf = map_guarded(2 * len);

	fx_open(&f, &sim_big, &a);
	for (size_t i = 1; i <= steps; i++) {
		cr_assert_eq(mrmgr_get(f.cache, buf, i * PG, RW, &r), 0);
		if (i % 97 == 0)
			write_lands(f.pd, mrmgr_region_rkey(r), buf + i * PG - 8, 'l');
		mrmgr_put(r);
	}
	struct mrmgr_stats s = cstats(f.cache);
	cr_assert_leq(s.registrations + s.rereg_attempts, 13, "%llu + %llu calls",
		      (unsigned long long)s.registrations,
		      (unsigned long long)s.rereg_attempts);
	cr_assert_leq(s.pages_registered, 4 * steps);
	cr_assert_leq(s.peak_pinned_bytes, 2 * len);
	cr_assert_eq(sstats(f.ctx).stale_accesses, 0);
	fx_close(&f);
	unmap_guarded(buf, 2 * len);
}

Test(grow, in_use_region_grows_by_make_before_break)
{
	struct fixture f;
	struct mrmgr_cache_attr a = cattr(MRMGR_CACHE_NO_HEADROOM);
	mrmgr_region_t *held, *grown;
	char *buf = map_rw(64 * KiB, 0);

	fx_open(&f, &sim_big, &a);
	cr_assert_eq(mrmgr_get(f.cache, buf, 16 * KiB, RW, &held), 0);
	uint32_t old_rkey = mrmgr_region_rkey(held);
	cr_assert_eq(mrmgr_get(f.cache, buf, 32 * KiB, RW, &grown), 0);
	cr_assert_neq(grown, held, "never rereg'd under its user");
	cr_assert_eq(mrmgr_region_length(held), 16 * KiB);
	write_lands(f.pd, old_rkey, buf + 8 * KiB, 'o');
	write_lands(f.pd, mrmgr_region_rkey(grown), buf + 24 * KiB, 'n');
	struct mrmgr_stats s = cstats(f.cache);
	cr_assert_eq(s.rereg_attempts, 0);
	cr_assert_eq(s.rereg_fallback_in_use, 1);
	cr_assert_eq(s.make_before_break, 1);
	cr_assert_eq(sstats(f.ctx).live_mrs, 2);
	mrmgr_put(held);
	cr_assert_eq(sstats(f.ctx).live_mrs, 1, "the old MR goes at its last put");
	cr_assert_eq(write_err(f.pd, old_rkey, buf), ENOENT);
	mrmgr_put(grown);
	fx_close(&f);
	munmap(buf, 64 * KiB);
}

/* ------------------------------------------------------ threads */

struct holder {
	struct fixture *f;
	char *buf;
	mrmgr_region_t *r;
	pthread_mutex_t m;
	pthread_cond_t cv;
	int stage;
	int write_ret;
};

static void stage_set(struct holder *h, int s)
{
	pthread_mutex_lock(&h->m);
	h->stage = s;
	pthread_cond_broadcast(&h->cv);
	pthread_mutex_unlock(&h->m);
}

static void stage_wait(struct holder *h, int s)
{
	pthread_mutex_lock(&h->m);
	while (h->stage < s)
		pthread_cond_wait(&h->cv, &h->m);
	pthread_mutex_unlock(&h->m);
}

static void *holder_thread(void *arg)
{
	struct holder *h = arg;

	if (mrmgr_get(h->f->cache, h->buf, 16 * KiB, RW, &h->r))
		return NULL;
	stage_set(h, 1);
	stage_wait(h, 2); /* the main thread has grown the range */
	h->write_ret = mrmgr_sim_write(h->f->pd, mrmgr_region_rkey(h->r),
				       (uint64_t)(uintptr_t)h->buf, "held", 5);
	mrmgr_put(h->r);
	return NULL;
}

Test(grow, region_grown_while_another_thread_holds_it)
{
	struct fixture f;
	struct mrmgr_cache_attr a = cattr(0);
	struct holder h = { .f = &f, .stage = 0, .write_ret = -1 };
	mrmgr_region_t *grown;
	pthread_t t;

	pthread_mutex_init(&h.m, NULL);
	pthread_cond_init(&h.cv, NULL);
	h.buf = map_guarded(1 * MiB);
	fx_open(&f, &sim_big, &a);
	cr_assert_eq(pthread_create(&t, NULL, holder_thread, &h), 0);
	stage_wait(&h, 1);
	cr_assert_eq(mrmgr_get(f.cache, h.buf, 64 * KiB, RW, &grown), 0);
	cr_assert_neq(grown, h.r);
	uint32_t held_rkey = mrmgr_region_rkey(h.r);
	stage_set(&h, 2);
	pthread_join(t, NULL);
	cr_assert_eq(h.write_ret, 0, "the holder's keys stay valid");
	cr_assert_str_eq(h.buf, "held");
	cr_assert_eq(write_err(f.pd, held_rkey, h.buf), ENOENT,
		     "deregistered at the holder's put");
	write_lands(f.pd, mrmgr_region_rkey(grown), h.buf + 60 * KiB, 'g');
	mrmgr_put(grown);
	cr_assert_eq(cstats(f.cache).make_before_break, 1);
	fx_close(&f);
	unmap_guarded(h.buf, 1 * MiB);
}

#define STRESS_LEN (512 * KiB)
#define ZONE (STRESS_LEN / 2)

struct stress {
	struct fixture f;
	char *buf;
	int fail;
	int grower; /* the next thread to start is the grower */
};

/*
 * Two zones. In the first, one thread keeps invalidating and growing a
 * small region step by step, in place whenever nobody holds it at that
 * instant, while the others hit it with short holds (lock-free hits
 * racing the quiesce). In the second, the others ask for anything up to
 * the whole zone and hold it across a yield, so growth there mostly has
 * to make-before-break. Whatever happens, a held region never changes.
 */
static void *stress_thread(void *arg)
{
	struct stress *s = arg;
	unsigned int seed = (unsigned int)(uintptr_t)pthread_self();
	int grower = __atomic_exchange_n(&s->grower, 0, __ATOMIC_RELAXED);

	for (int i = 0; i < 3000 && !__atomic_load_n(&s->fail, __ATOMIC_RELAXED); i++) {
		int zone_b = !grower && rand_r(&seed) % 2;
		char *base = zone_b ? s->buf + ZONE : s->buf;
		size_t len = zone_b ? PG * (1 + (size_t)rand_r(&seed) % (ZONE / PG))
				    : PG * (1 + (size_t)rand_r(&seed) % 8);
		unsigned int acc = rand_r(&seed) % 4 ? RW : LW;
		size_t off;
		mrmgr_region_t *r;
		int ret;

		if (grower) {
			len = PG * (1 + (size_t)(i % 8));
			if (i % 8 == 0)
				mrmgr_invalidate(s->f.cache, s->buf, ZONE);
		} else if (rand_r(&seed) % 64 == 0) {
			mrmgr_invalidate(s->f.cache, s->buf + ZONE, ZONE);
			continue;
		}
		off = (size_t)rand_r(&seed) % len;
		ret = mrmgr_get(s->f.cache, base, len, acc, &r);
		if (ret || mrmgr_region_length(r) < len) {
			__atomic_store_n(&s->fail, 1, __ATOMIC_RELAXED);
			break;
		}
		/* Same registration, same keys, writes land, until the put. */
		uint64_t gen = mrmgr_region_generation(r);
		uint32_t rkey = mrmgr_region_rkey(r);

		for (int k = 0; k < 2 && !ret; k++) {
			if (acc == RW)
				ret = mrmgr_sim_write(s->f.pd, rkey,
						      (uint64_t)(uintptr_t)(base + off),
						      "s", 1);
			if (zone_b && k == 0)
				sched_yield();
		}
		if (ret || mrmgr_region_length(r) < len ||
		    (char *)mrmgr_region_addr(r) != base ||
		    mrmgr_region_generation(r) != gen ||
		    mrmgr_region_rkey(r) != rkey)
			__atomic_store_n(&s->fail, 2 + ret, __ATOMIC_RELAXED);
		mrmgr_put(r);
	}
	return NULL;
}

Test(grow, concurrent_growth_never_changes_a_held_region, .timeout = 120)
{
	struct stress s = { .fail = 0, .grower = 1 };
	/* No headroom: every longer request grows the region. */
	struct mrmgr_cache_attr a = cattr(MRMGR_CACHE_NO_HEADROOM);
	pthread_t t[3];

	s.buf = map_guarded(STRESS_LEN);
	fx_open(&s.f, &sim_big, &a);
	for (int i = 0; i < 3; i++)
		pthread_create(&t[i], NULL, stress_thread, &s);
	for (int i = 0; i < 3; i++)
		pthread_join(t[i], NULL);
	cr_assert_eq(s.fail, 0, "failure %d", s.fail);
	struct mrmgr_stats st = cstats(s.f.cache);
	cr_assert_gt(st.rereg_successes, 0,
		     "in-place growth happened (attempts %llu, in use %llu)",
		     (unsigned long long)st.rereg_attempts,
		     (unsigned long long)st.rereg_fallback_in_use);
	cr_assert_gt(st.make_before_break, 0, "growth of held regions happened");
	cr_assert_eq(st.regions_in_use, 0);
	cr_assert_eq(sstats(s.f.ctx).stale_accesses, 0);
	fx_close(&s.f);
	unmap_guarded(s.buf, STRESS_LEN);
}

/* ------------------------------------------------------ access upgrades */

Test(grow, access_upgrade_of_an_idle_region_keeps_keys)
{
	struct fixture f;
	struct mrmgr_cache_attr a = cattr(0);
	mrmgr_region_t *r1, *r2, *r3;
	char *buf = map_rw(64 * KiB, 0);

	fx_open(&f, &sim_big, &a);
	cr_assert_eq(mrmgr_get(f.cache, buf, 64 * KiB, LW, &r1), 0);
	uint32_t rkey = mrmgr_region_rkey(r1);
	mrmgr_put(r1);
	cr_assert_eq(mrmgr_get(f.cache, buf, 4 * KiB, RW, &r2), 0);
	cr_assert_eq(r2, r1);
	cr_assert_eq(mrmgr_region_access(r2), RW);
	cr_assert_eq(mrmgr_region_length(r2), 64 * KiB);
	cr_assert_eq(mrmgr_region_rkey(r2), rkey, "an access change keeps keys");
	write_lands(f.pd, rkey, buf + 60 * KiB, 'u');
	mrmgr_put(r2);
	cr_assert_eq(cstats(f.cache).rereg_successes, 1);
	cr_assert_eq(cstats(f.cache).grows, 0);

	/* Read-only to writable: the pages are pinned again for stores. */
	char *ro = map_rw(16 * KiB, 0);
	cr_assert_eq(mrmgr_get(f.cache, ro, 16 * KiB, IBV_ACCESS_REMOTE_READ, &r1), 0);
	mrmgr_put(r1);
	cr_assert_eq(mrmgr_get(f.cache, ro, 16 * KiB, RW, &r3), 0);
	cr_assert_eq(r3, r1);
	write_lands(f.pd, mrmgr_region_rkey(r3), ro + 8 * KiB, 'w');
	mrmgr_put(r3);
	cr_assert_eq(cstats(f.cache).registrations, 2);
	cr_assert_eq(sstats(f.ctx).stale_accesses, 0);
	fx_close(&f);
	munmap(buf, 64 * KiB);
	munmap(ro, 16 * KiB);
}

Test(grow, access_upgrade_of_a_held_region_makes_before_breaking)
{
	struct fixture f;
	struct mrmgr_cache_attr a = cattr(0);
	mrmgr_region_t *held, *up;
	char *buf = map_rw(64 * KiB, 0);

	fx_open(&f, &sim_big, &a);
	cr_assert_eq(mrmgr_get(f.cache, buf, 64 * KiB, IBV_ACCESS_REMOTE_READ, &held), 0);
	cr_assert_eq(mrmgr_get(f.cache, buf, 64 * KiB, RW, &up), 0);
	cr_assert_neq(up, held);
	cr_assert_eq(mrmgr_region_access(held), IBV_ACCESS_REMOTE_READ,
		     "the holder's region is untouched");
	cr_assert_eq(write_err(f.pd, mrmgr_region_rkey(held), buf), EACCES);
	write_lands(f.pd, mrmgr_region_rkey(up), buf, 'u');
	cr_assert_eq(cstats(f.cache).make_before_break, 1);
	cr_assert_eq(cstats(f.cache).rereg_attempts, 0);
	mrmgr_put(held);
	mrmgr_put(up);
	cr_assert_eq(sstats(f.ctx).live_mrs, 1);
	fx_close(&f);
	munmap(buf, 64 * KiB);
}

/* ------------------------------------------------------ the error contract */

struct code_case {
	int code;  /* 0: EOPNOTSUPP with the default code */
	int err;
};

/* Grow a 16 KiB idle region to 32 KiB with the next rereg failing. */
static void grow_through_fault(const struct code_case *cc)
{
	struct fixture f;
	struct mrmgr_cache_attr a = cattr(MRMGR_CACHE_NO_HEADROOM);
	mrmgr_region_t *r1, *r2;
	char *buf = map_rw(64 * KiB, 0);

	fx_open(&f, &sim_big, &a);
	cr_assert_eq(mrmgr_get(f.cache, buf, 16 * KiB, RW, &r1), 0);
	uint32_t old_rkey = mrmgr_region_rkey(r1);
	mrmgr_put(r1);
	rereg_fault(f.ctx, cc->code, cc->err);
	cr_assert_eq(mrmgr_get(f.cache, buf, 32 * KiB, RW, &r2), 0,
		     "code %d: growth must succeed", cc->code);
	cr_assert_eq(mrmgr_region_length(r2), 32 * KiB);
	/* Through the keys handed out, the whole new range, and only there. */
	write_lands(f.pd, mrmgr_region_rkey(r2), buf, 'a');
	write_lands(f.pd, mrmgr_region_rkey(r2), buf + 32 * KiB - 8, 'b');
	struct mrmgr_stats s = cstats(f.cache);
	uint64_t peak = sstats(f.ctx).peak_pinned_bytes;
	cr_assert_eq(s.rereg_attempts, 1);
	switch (cc->code) {
	case IBV_REREG_MR_ERR_INPUT:
	case IBV_REREG_MR_ERR_DONT_FORK_NEW:
		/* Old MR valid: a new one made, then the old released. */
		cr_assert_eq(peak, 48 * KiB, "made before the old one broke");
		cr_assert_eq(s.rereg_fallback_input, 1);
		cr_assert_eq(s.registrations, 2);
		cr_assert_eq(s.deregistrations, 1);
		cr_assert_eq(write_err(f.pd, old_rkey, buf), ENOENT);
		break;
	case IBV_REREG_MR_ERR_DO_FORK_OLD:
		/* New MR valid: adopted, in place. */
		cr_assert_eq(peak, 48 * KiB, "pinned during the call");
		cr_assert_eq(r2, r1);
		cr_assert_eq(s.rereg_successes, 1);
		cr_assert_eq(s.rereg_fork_errors, 1);
		cr_assert_eq(s.registrations, 1);
		break;
	case IBV_REREG_MR_ERR_CMD:
	case IBV_REREG_MR_ERR_CMD_AND_DO_FORK_NEW:
		/* The unusable MR goes first: never pinned together. */
		cr_assert_eq(peak, 32 * KiB);
		cr_assert_eq(s.rereg_fallback_cmd, 1);
		cr_assert_eq(s.registrations, 2);
		cr_assert_eq(s.deregistrations, 1, "the unusable MR is deregistered");
		break;
	default: /* EOPNOTSUPP: remembered for the device */
		cr_assert_eq(peak, 32 * KiB);
		cr_assert_eq(s.rereg_fallback_unsupported, 1);
		cr_assert_eq(s.registrations, 2);
		cr_assert_eq(s.deregistrations, 1);
		break;
	}
	cr_assert_eq(sstats(f.ctx).live_mrs, 1, "code %d: nothing leaked", cc->code);
	mrmgr_put(r2);

	/* The next growth: rereg again, except after EOPNOTSUPP. */
	cr_assert_eq(mrmgr_get(f.cache, buf, 48 * KiB, RW, &r2), 0);
	write_lands(f.pd, mrmgr_region_rkey(r2), buf + 48 * KiB - 8, 'c');
	mrmgr_put(r2);
	s = cstats(f.cache);
	cr_assert_eq(s.rereg_attempts, cc->code ? 2 : 1);
	cr_assert_eq(s.rereg_probes, 1, "probed once, at cache creation");
	cr_assert_eq(sstats(f.ctx).stale_accesses, 0);
	fx_close(&f);
	munmap(buf, 64 * KiB);
}

Test(grow, err_input_keeps_old_and_makes_before_breaking)
{
	grow_through_fault(&(struct code_case){ IBV_REREG_MR_ERR_INPUT, EINVAL });
}

Test(grow, err_dont_fork_new_keeps_old_and_makes_before_breaking)
{
	grow_through_fault(&(struct code_case){ IBV_REREG_MR_ERR_DONT_FORK_NEW, ENOMEM });
}

Test(grow, err_do_fork_old_adopts_the_new_translation)
{
	grow_through_fault(&(struct code_case){ IBV_REREG_MR_ERR_DO_FORK_OLD, EINVAL });
}

Test(grow, err_cmd_deregisters_and_registers_afresh)
{
	grow_through_fault(&(struct code_case){ IBV_REREG_MR_ERR_CMD, EIO });
}

Test(grow, err_cmd_and_do_fork_new_deregisters_and_registers_afresh)
{
	grow_through_fault(&(struct code_case){ IBV_REREG_MR_ERR_CMD_AND_DO_FORK_NEW, EIO });
}

Test(grow, eopnotsupp_is_remembered_for_the_device)
{
	grow_through_fault(&(struct code_case){ 0, EOPNOTSUPP });
}

Test(grow, enomem_during_rereg_falls_back_to_a_fresh_registration)
{
	struct fixture f;
	struct mrmgr_sim_attr sa = { .comp_mask = MRMGR_SIM_ATTR_MEMLOCK,
				     .memlock_bytes = 96 * KiB };
	struct mrmgr_cache_attr a = cattr(MRMGR_CACHE_NO_HEADROOM);
	mrmgr_region_t *r;
	char *buf = map_rw(128 * KiB, 0);

	fx_open(&f, &sa, &a);
	cr_assert_eq(mrmgr_get(f.cache, buf, 64 * KiB, RW, &r), 0);
	mrmgr_put(r);
	/* The kernel pins the new 80 KiB before it lets the old 64 go. */
	cr_assert_eq(mrmgr_get(f.cache, buf, 80 * KiB, RW, &r), 0);
	cr_assert_eq(mrmgr_region_length(r), 80 * KiB);
	write_lands(f.pd, mrmgr_region_rkey(r), buf + 72 * KiB, 'm');
	mrmgr_put(r);
	struct mrmgr_stats s = cstats(f.cache);
	cr_assert_eq(s.rereg_fallback_cmd, 1);
	cr_assert_eq(s.registrations, 2);
	cr_assert_eq(sstats(f.ctx).live_mrs, 1);
	fx_close(&f);
	munmap(buf, 128 * KiB);
}

Test(grow, shared_regions_are_never_rereg)
{
	struct fixture f;
	struct mrmgr_cache_attr a = cattr(MRMGR_CACHE_NO_HEADROOM);
	mrmgr_region_t *r1, *r2;
	char *buf = map_rw(64 * KiB, 0);

	fx_open(&f, &sim_big, &a);
	cr_assert_eq(mrmgr_get(f.cache, buf, 16 * KiB, RW, &r1), 0);
	r1->kind |= MRMGR__REGION_SHARED;
	mrmgr_put(r1);
	cr_assert_eq(mrmgr_get(f.cache, buf, 32 * KiB, RW, &r2), 0);
	write_lands(f.pd, mrmgr_region_rkey(r2), buf + 24 * KiB, 's');
	mrmgr_put(r2);
	struct mrmgr_stats s = cstats(f.cache);
	cr_assert_eq(s.rereg_attempts, 0);
	cr_assert_eq(s.rereg_fallback_shared, 1);
	cr_assert_eq(s.registrations, 2);
	cr_assert_eq(sstats(f.ctx).live_mrs, 1);
	fx_close(&f);
	munmap(buf, 64 * KiB);
}

Test(grow, no_rereg_policy_registers_anew)
{
	struct fixture f;
	struct mrmgr_cache_attr a = cattr(MRMGR_CACHE_NO_HEADROOM | MRMGR_CACHE_NO_REREG);
	mrmgr_region_t *r;
	char *buf = map_rw(64 * KiB, 0);

	fx_open(&f, &sim_big, &a);
	for (size_t len = 16 * KiB; len <= 64 * KiB; len += 16 * KiB) {
		cr_assert_eq(mrmgr_get(f.cache, buf, len, RW, &r), 0);
		write_lands(f.pd, mrmgr_region_rkey(r), buf + len - 8, 'p');
		mrmgr_put(r);
	}
	struct mrmgr_stats s = cstats(f.cache);
	cr_assert_eq(s.rereg_attempts, 0);
	cr_assert_eq(s.rereg_probes, 0, "no probe when rereg is off");
	cr_assert_eq(s.registrations, 4);
	cr_assert_eq(s.deregistrations, 3);
	fx_close(&f);
	munmap(buf, 64 * KiB);
}

/* ------------------------------------------------------ rxe personality */

Test(grow, rxe_probes_once_per_device_then_falls_back)
{
	struct fixture f;
	struct mrmgr_cache_attr a = cattr(MRMGR_CACHE_NO_HEADROOM);
	mrmgr_cache_t *second;
	mrmgr_region_t *r;
	char *buf = map_rw(128 * KiB, 0);

	fx_open(&f, &sim_rxe, &a);
	cr_assert_eq(cstats(f.cache).rereg_probes, 1);
	uint64_t dev_failures = sstats(f.ctx).rereg_failures;
	cr_assert_eq(dev_failures, 1, "the probe is the only rereg the device sees");
	for (size_t len = 16 * KiB; len <= 128 * KiB; len += 16 * KiB) {
		cr_assert_eq(mrmgr_get(f.cache, buf, len, RW, &r), 0);
		write_lands(f.pd, mrmgr_region_rkey(r), buf + len - 8, 'x');
		mrmgr_put(r);
	}
	struct mrmgr_stats s = cstats(f.cache);
	cr_assert_eq(s.rereg_probes, 1, "once per cache, not per growth");
	cr_assert_eq(s.rereg_attempts, 0);
	cr_assert_eq(s.rereg_fallback_unsupported, 7);
	cr_assert_eq(s.registrations, 8);
	cr_assert_eq(s.deregistrations, 7);
	cr_assert_eq(sstats(f.ctx).rereg_failures, dev_failures);
	cr_assert_eq(sstats(f.ctx).peak_pinned_bytes, 128 * KiB,
		     "dereg before reg: never old and new together");

	/* Another cache on the same device remembers the verdict. */
	cr_assert_eq(mrmgr_cache_create(f.pd, &a, &second), 0);
	cr_assert_eq(cstats(second).rereg_probes, 0);
	cr_assert_eq(mrmgr_get(second, buf, 16 * KiB, RW, &r), 0);
	mrmgr_put(r);
	cr_assert_eq(mrmgr_get(second, buf, 32 * KiB, RW, &r), 0);
	mrmgr_put(r);
	cr_assert_eq(cstats(second).rereg_fallback_unsupported, 1);
	cr_assert_eq(mrmgr_cache_destroy(second), 0);
	cr_assert_eq(sstats(f.ctx).rereg_failures, dev_failures);
	fx_close(&f);
	munmap(buf, 128 * KiB);
}

Test(grow, mlx5_probe_once_per_device)
{
	struct fixture f;
	mrmgr_cache_t *second;

	fx_open(&f, &sim_big, NULL);
	cr_assert_eq(cstats(f.cache).rereg_probes, 1);
	cr_assert_eq(sstats(f.ctx).reregs, 1);
	cr_assert_eq(mrmgr_cache_create(f.pd, NULL, &second), 0);
	cr_assert_eq(cstats(second).rereg_probes, 0);
	cr_assert_eq(sstats(f.ctx).reregs, 1);
	cr_assert_eq(mrmgr_cache_destroy(second), 0);
	fx_close(&f);
}

/* ------------------------------------------------------ PD move */

Test(grow, move_pd_rereg_idle_regions_in_place)
{
	struct fixture f;
	struct ibv_pd *pd2;
	mrmgr_region_t *r, *again;
	char *buf = map_rw(64 * KiB, 0);

	fx_open(&f, &sim_big, NULL);
	cr_assert_eq(mrmgr_sim_alloc_pd(f.ctx, &pd2), 0);
	cr_assert_eq(mrmgr_get(f.cache, buf, 64 * KiB, RW, &r), 0);
	uint32_t rkey = mrmgr_region_rkey(r);
	uint64_t gen = mrmgr_region_generation(r);
	mrmgr_put(r);
	cr_assert_eq(mrmgr_cache_move_pd(f.cache, pd2), 0);
	cr_assert_eq(mrmgr_get(f.cache, buf, 64 * KiB, RW, &again), 0);
	cr_assert_eq(again, r, "moved in place, still cached");
	cr_assert_eq(mrmgr_region_mr(again)->pd, pd2);
	cr_assert_eq(mrmgr_region_rkey(again), rkey, "mlx5 keeps keys on a PD change");
	cr_assert_neq(mrmgr_region_generation(again), gen);
	write_lands(pd2, rkey, buf, 'p');
	cr_assert_eq(write_err(f.pd, rkey, buf), ENOENT);
	mrmgr_put(again);
	cr_assert_eq(mrmgr_sim_dealloc_pd(f.pd), 0, "nothing left in the old PD");
	f.pd = pd2;
	fx_close(&f);
	munmap(buf, 64 * KiB);
}

Test(grow, move_pd_leaves_held_regions_to_their_holders)
{
	struct fixture f;
	struct ibv_pd *pd2;
	mrmgr_region_t *held, *fresh;
	char *buf = map_rw(64 * KiB, 0);

	fx_open(&f, &sim_big, NULL);
	cr_assert_eq(mrmgr_sim_alloc_pd(f.ctx, &pd2), 0);
	cr_assert_eq(mrmgr_get(f.cache, buf, 64 * KiB, RW, &held), 0);
	cr_assert_eq(mrmgr_cache_move_pd(f.cache, pd2), 0);
	write_lands(f.pd, mrmgr_region_rkey(held), buf, 'h');
	cr_assert_eq(mrmgr_get(f.cache, buf, 64 * KiB, RW, &fresh), 0);
	cr_assert_neq(fresh, held);
	cr_assert_eq(mrmgr_region_mr(fresh)->pd, pd2);
	write_lands(pd2, mrmgr_region_rkey(fresh), buf, 'f');
	mrmgr_put(held);
	cr_assert_eq(sstats(f.ctx).live_mrs, 1);
	cr_assert_eq(mrmgr_sim_dealloc_pd(f.pd), 0, "nothing left in the old PD");
	f.pd = pd2;
	mrmgr_put(fresh);
	fx_close(&f);
	munmap(buf, 64 * KiB);
}

Test(grow, move_pd_on_rxe_drops_idle_regions)
{
	struct fixture f;
	struct ibv_pd *pd2;
	mrmgr_region_t *r;
	char *buf = map_rw(64 * KiB, 0);

	fx_open(&f, &sim_rxe, NULL);
	cr_assert_eq(mrmgr_sim_alloc_pd(f.ctx, &pd2), 0);
	cr_assert_eq(mrmgr_get(f.cache, buf, 64 * KiB, RW, &r), 0);
	mrmgr_put(r);
	cr_assert_eq(mrmgr_cache_move_pd(f.cache, pd2), 0);
	cr_assert_eq(sstats(f.ctx).live_mrs, 0);
	cr_assert_eq(mrmgr_get(f.cache, buf, 64 * KiB, RW, &r), 0);
	write_lands(pd2, mrmgr_region_rkey(r), buf, 'r');
	mrmgr_put(r);
	cr_assert_eq(cstats(f.cache).rereg_fallback_unsupported, 1);
	cr_assert_eq(mrmgr_sim_dealloc_pd(f.pd), 0);
	f.pd = pd2;
	fx_close(&f);
	munmap(buf, 64 * KiB);
}

Test(grow, move_pd_checks_its_arguments)
{
	struct fixture f;
	struct ibv_context *ctx2;
	struct ibv_pd *other;

	fx_open(&f, NULL, NULL);
	cr_assert_eq(mrmgr_sim_open(NULL, &ctx2), 0);
	cr_assert_eq(mrmgr_sim_alloc_pd(ctx2, &other), 0);
	cr_assert_eq(mrmgr_cache_move_pd(NULL, other), EINVAL);
	cr_assert_eq(mrmgr_cache_move_pd(f.cache, NULL), EINVAL);
	cr_assert_eq(mrmgr_cache_move_pd(f.cache, other), EINVAL);
	cr_assert_eq(mrmgr_cache_move_pd(f.cache, f.pd), 0);
	cr_assert_eq(mrmgr_sim_dealloc_pd(other), 0);
	cr_assert_eq(mrmgr_sim_close(ctx2), 0);
	fx_close(&f);
}
