/*
 * mrmgr_perftest: what the cache saves. The demo's message-passing
 * workload (workload.h: buffers reused, freed and mapped again, grown),
 * played twice with the same seed: once registering and deregistering
 * every message with the device, once through a libmrmgr cache made with
 * the default attributes (what a program passing NULL gets: the default
 * monitor sees the workload's munmap and mremap). Then the cost of a miss
 * (a get that registers) and of a hit (the same get again).
 *
 * SPDX-License-Identifier: MIT
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "perftest.h"
#include "workload.h"

mrmgr_cache_t *pt_live_cache;
mrmgr_region_t *pt_live_region;

#define HITMISS_LEN (64 * 1024)

/* The demo's workload, made smaller when it would not fit the limit. */
static void fit(const struct pt_opts *o, struct workload_attr *a, char *note,
		size_t len)
{
	char b[32];

	workload_default_attr(a);
	while (workload_footprint(a) > o->limit / 2 && a->buflen > 16384)
		a->buflen /= 2;
	while (workload_footprint(a) > o->limit / 2 && a->nbuf > 2)
		a->nbuf /= 2;
	snprintf(note, len, "%d buffer%s of %s, remap every %ld, grow every %ld "
		 "to %ux", a->nbuf, a->nbuf == 1 ? "" : "s", pt_size(a->buflen, b, sizeof(b)),
		 a->remap_every, a->grow_every, a->max_growth);
}

static uint64_t span(const char *addr, size_t len, size_t psz)
{
	uintptr_t lo = (uintptr_t)addr & ~(psz - 1);
	uintptr_t hi = ((uintptr_t)addr + len + psz - 1) & ~(psz - 1);

	return hi - lo;
}

static int per_message(struct pt_dev *d, const struct pt_opts *o,
		       const struct workload_attr *a, uint64_t *ns, uint64_t *peak)
{
	size_t psz = (size_t)sysconf(_SC_PAGESIZE);
	struct workload *wl;
	uint64_t t0;
	int ret;

	if ((ret = workload_create(a, NULL, NULL, &wl)))
		return ret;
	*peak = 0;
	t0 = pt_now_ns();
	for (long m = 0; m < o->messages; m++) {
		struct ibv_mr *mr;
		size_t len;
		char *p;

		pt_progress("%ld of %ld messages", m, o->messages);
		if ((ret = workload_next(wl, m, &p, &len)) ||
		    (ret = pt_reg(d, d->pd, p, len, PT_ACCESS, &mr)))
			break;
		if (span(p, len, psz) > *peak)
			*peak = span(p, len, psz);
		pt_checkpoint("loop");
		if (pt_stop)
			return EINTR; /* the MR is deregistered by main */
		if ((ret = pt_dereg(d, mr)))
			break;
	}
	*ns = pt_now_ns() - t0;
	workload_destroy(wl);
	return ret;
}

static int cached(struct pt_dev *d, const struct pt_opts *o,
		  const struct workload_attr *a, uint64_t *ns,
		  struct mrmgr_stats *st)
{
	struct workload *wl;
	uint64_t t0;
	int ret;

	if ((ret = mrmgr_cache_create(d->pd, NULL, &pt_live_cache)))
		return ret;
	if ((ret = workload_create(a, NULL, NULL, &wl)))
		return ret;
	t0 = pt_now_ns();
	for (long m = 0; m < o->messages; m++) {
		size_t len;
		char *p;

		pt_progress("%ld of %ld messages", m, o->messages);
		pt_live_region = NULL;
		if ((ret = workload_next(wl, m, &p, &len)) ||
		    (ret = mrmgr_get(pt_live_cache, p, len, PT_ACCESS, &pt_live_region)))
			break;
		pt_checkpoint("loop");
		if (pt_stop)
			return EINTR; /* main puts the region, destroys the cache */
		mrmgr_put(pt_live_region);
		pt_live_region = NULL;
	}
	*ns = pt_now_ns() - t0;
	mrmgr_cache_query_stats(pt_live_cache, st, sizeof(*st));
	workload_destroy(wl);
	return ret;
}

/* A miss (fresh range: registers) and a hit (the same get again), on
 * separate mappings (guard pages keep them from merging). */
static int hit_miss(struct pt_dev *d, const struct pt_opts *o)
{
	size_t psz = (size_t)sysconf(_SC_PAGESIZE), slot = HITMISS_LEN + psz;
	unsigned int n = o->runs < 32 ? 32 : o->runs;
	uint64_t *hit = calloc(n, sizeof(*hit)), *miss = calloc(n, sizeof(*miss));
	char *base = MAP_FAILED;
	struct pt_row *r;
	int ret = ENOMEM;

	while ((uint64_t)n * HITMISS_LEN > o->limit / 2 && n > 1)
		n /= 2;
	if (!hit || !miss)
		goto out;
	base = mmap(NULL, n * slot, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (base == MAP_FAILED)
		goto out;
	if ((ret = mrmgr_cache_create(d->pd, NULL, &pt_live_cache)))
		goto out;
	for (unsigned int i = 0; i < n && !pt_stop; i++) {
		char *p = base + i * slot;
		uint64_t t0, t1, t2;

		pt_progress("%u of %u", i, n);
		if (mprotect(p, HITMISS_LEN, PROT_READ | PROT_WRITE)) {
			ret = errno;
			goto out;
		}
		memset(p, 1, HITMISS_LEN);
		t0 = pt_now_ns();
		if ((ret = mrmgr_get(pt_live_cache, p, HITMISS_LEN, PT_ACCESS,
				     &pt_live_region)))
			goto out;
		mrmgr_put(pt_live_region);
		pt_live_region = NULL;
		t1 = pt_now_ns();
		if ((ret = mrmgr_get(pt_live_cache, p, HITMISS_LEN, PT_ACCESS,
				     &pt_live_region)))
			goto out;
		pt_checkpoint("hitmiss");
		if (pt_stop)
			break;
		mrmgr_put(pt_live_region);
		pt_live_region = NULL;
		t2 = pt_now_ns();
		miss[i] = t1 - t0;
		hit[i] = t2 - t1;
	}
	if (pt_stop) {
		ret = EINTR;
		goto out;
	}
	if (!(r = pt_row_add("cache", "miss", HITMISS_LEN)))
		goto out;
	pt_row_samples(r, miss, n);
	snprintf(r->note, sizeof(r->note), "mrmgr_get + mrmgr_put of a range "
		 "not cached: registers");
	if (!(r = pt_row_add("cache", "hit", HITMISS_LEN)))
		goto out;
	pt_row_samples(r, hit, n);
	snprintf(r->note, sizeof(r->note), "the same get + put again: "
		 "no device call");
	ret = 0;
out:
	if (ret != EINTR) {
		if (pt_live_cache)
			mrmgr_cache_destroy(pt_live_cache);
		pt_live_cache = NULL;
		if (base != MAP_FAILED)
			munmap(base, n * slot);
	}
	free(hit);
	free(miss);
	return ret;
}

int pt_loop(struct pt_dev *d, const struct pt_opts *o)
{
	struct workload_attr a;
	struct mrmgr_stats st;
	uint64_t ns_raw = 0, ns_cache = 0, peak = 0;
	struct pt_row *r;
	char wnote[128];
	double raw_rate, cache_rate;
	int ret;

	fit(o, &a, wnote, sizeof(wnote));
	pt_phase("per-message loop");
	if ((ret = per_message(d, o, &a, &ns_raw, &peak))) {
		if (ret == EINTR)
			return 0;
		pt_row_skip("loop", "per-message", 0, PT_SKIPPED, "failed: %s",
			    strerror(ret));
		return 1;
	}
	raw_rate = (double)o->messages / ((double)ns_raw / 1e9);
	if (!(r = pt_row_add("loop", "per-message", 0)))
		return 1;
	r->runs = (unsigned int)o->messages;
	r->median_us = (double)ns_raw / 1e3 / (double)o->messages;
	r->rate = raw_rate;
	snprintf(r->unit, sizeof(r->unit), "msgs/s");
	r->registrations = o->messages;
	r->pinned = (int64_t)peak;
	snprintf(r->note, sizeof(r->note), "ibv_reg_mr + ibv_dereg_mr every "
		 "message; %s", wnote);

	pt_phase("cached loop");
	if ((ret = cached(d, o, &a, &ns_cache, &st))) {
		if (ret == EINTR)
			return 0;
		if (pt_live_cache)
			mrmgr_cache_destroy(pt_live_cache);
		pt_live_cache = NULL;
		pt_row_skip("loop", "cached", 0, PT_SKIPPED, "failed: %s",
			    strerror(ret));
		return 1;
	}
	mrmgr_cache_destroy(pt_live_cache);
	pt_live_cache = NULL;
	cache_rate = (double)o->messages / ((double)ns_cache / 1e9);
	if (!(r = pt_row_add("loop", "cached", 0)))
		return 1;
	r->runs = (unsigned int)o->messages;
	r->median_us = (double)ns_cache / 1e3 / (double)o->messages;
	r->rate = cache_rate;
	snprintf(r->unit, sizeof(r->unit), "msgs/s");
	r->registrations = (int64_t)st.registrations;
	r->pinned = (int64_t)st.peak_pinned_bytes;
	snprintf(r->note, sizeof(r->note), "%.2fx the messages/s; %" PRId64
		 " registrations avoided (%.1f%%); %" PRIu64 " hits, %" PRIu64
		 " misses, %" PRIu64 " invalidations",
		 cache_rate / raw_rate, o->messages - r->registrations,
		 100.0 * (double)(o->messages - r->registrations) / (double)o->messages,
		 st.hits, st.misses, st.invalidations);

	pt_phase("hit and miss");
	ret = hit_miss(d, o);
	if (ret == EINTR)
		return 0;
	if (ret)
		pt_row_skip("cache", "hit", 0, PT_SKIPPED, "failed: %s", strerror(ret));
	return ret != 0;
}
