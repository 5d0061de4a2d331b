/*
 * The patch source after another patcher: UCX's libucm patches when it is
 * loaded or when its first memory-event user appears, possibly long after
 * our install, and writes its jump over ours. Checked where the monitor
 * already runs (a cache's miss, the coverage query; mprotect() of libc's
 * text): sixteen bytes per entry point compared with what we left there.
 * When they differ, every cache forgets everything and we chain on top
 * again (patch.c plans and writes the jump, as at install). See
 * doc/monitor.md, "Beside another patcher".
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "patch.h"

#if MRMGR__PATCH_SUPPORTED

#define P mrmgr__patch_g

/* 16 bytes as one vector (SSE2 on x86-64, NEON on arm64): a block is
 * compared in three instructions, not seven. */
typedef uint64_t ck_v2 __attribute__((vector_size(16)));

/*
 * What that check compares, packed where a miss finds it in a few lines
 * of its own (it used to walk P.entry, P.seen and every P.site, a dozen
 * lines the miss's own work had evicted): each watched entry point's
 * first 16 bytes as we left them -- any patcher's jump starts there,
 * at the entry or after its landing pad -- and, for a site whose short
 * jump of ours goes to dead bytes nearby, those bytes, as the aligned
 * 16-byte block that holds them with a mask of the bytes that count
 * (aligned: no byte outside libc's text is read). Rebuilt (mon lock
 * held) wherever P.seen, a site or P.targets changes; the mprotect hook
 * reads it without the lock, as it read P.seen before: a torn read costs
 * at worst one needless "everything changed".
 */
struct check_entry {
	ck_v2 want;
	uintptr_t at;       /* the entry point: 16 bytes from here */
};
struct check_pad {
	ck_v2 want, mask;
	uintptr_t at;       /* 16-aligned */
};
static struct {
	unsigned int n, npad;
	struct check_entry e[MRMGR__PT_COUNT];
	uint8_t e_t[MRMGR__PT_COUNT], pad_t[MRMGR__PT_COUNT * 2];
	struct check_pad pad[MRMGR__PT_COUNT * 2];
} CK;

void mrmgr__patch_build_checks(void)
{
	unsigned int n = 0, np = 0;

	__atomic_store_n(&CK.n, 0, __ATOMIC_RELEASE);
	__atomic_store_n(&CK.npad, 0, __ATOMIC_RELEASE);
	for (int t = 0; t < MRMGR__PT_COUNT; t++) {
		const struct mrmgr__patch_site *s = &P.site[t];
		uintptr_t a = s->pad;
		const unsigned char *want = s->pad_new;
		size_t len = s->pad_len;

		if (P.entry[t]) {
			CK.e[n].at = P.entry[t];
			memcpy(&CK.e[n].want, P.seen[t], 16);
			CK.e_t[n++] = (uint8_t)t;
		}
		if (!s->fn || !s->pad || !(P.targets & (1u << t)))
			continue;
		while (len) { /* at most two blocks: pad_len <= 8 */
			uintptr_t blk = a & ~(uintptr_t)15;
			size_t off = a - blk, k = 16 - off < len ? 16 - off : len;
			unsigned char w[16] = { 0 }, m[16] = { 0 };

			memcpy(w + off, want, k);
			memset(m + off, 0xff, k);
			CK.pad[np].at = blk;
			memcpy(&CK.pad[np].want, w, 16);
			memcpy(&CK.pad[np].mask, m, 16);
			CK.pad_t[np++] = (uint8_t)t;
			a += k;
			want += k;
			len -= k;
		}
	}
	__atomic_store_n(&CK.npad, np, __ATOMIC_RELEASE);
	__atomic_store_n(&CK.n, n, __ATOMIC_RELEASE);
}

static inline ck_v2 entry_differs(const struct check_entry *e)
{
	ck_v2 x;

	memcpy(&x, (const void *)e->at, sizeof(x));
	return x ^ e->want;
}

static inline ck_v2 pad_differs(const struct check_pad *p)
{
	ck_v2 x;

	memcpy(&x, (const void *)p->at, sizeof(x));
	return (x ^ p->want) & p->mask;
}

static inline int v2_any(ck_v2 v)
{
	return (v[0] | v[1]) != 0;
}

/* On every miss (inlined: the miss makes one call here, to
 * mrmgr__patch_check): all blocks folded into one word, one branch; which
 * target changed is worked out only when something did. */
static inline __attribute__((always_inline)) uint32_t lost_sites(void)
{
	unsigned int n = __atomic_load_n(&CK.n, __ATOMIC_ACQUIRE);
	unsigned int np = __atomic_load_n(&CK.npad, __ATOMIC_ACQUIRE);
	ck_v2 d = { 0, 0 };
	uint32_t lost = 0;

	for (unsigned int i = 0; i < n; i++)
		d |= entry_differs(&CK.e[i]);
	for (unsigned int i = 0; i < np; i++)
		d |= pad_differs(&CK.pad[i]);
	if (mrmgr__likely(!v2_any(d)))
		return 0;
	for (unsigned int i = 0; i < n; i++)
		if (v2_any(entry_differs(&CK.e[i])))
			lost |= 1u << CK.e_t[i];
	for (unsigned int i = 0; i < np; i++)
		if (v2_any(pad_differs(&CK.pad[i])))
			lost |= 1u << CK.pad_t[i];
	return lost;
}

static uint64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Wait (a few ms at most) until the lost entries stop changing: the
 * other patcher may be in the middle of its (non-atomic) write. */
static void settle(uint32_t lost)
{
	unsigned char a[MRMGR__PT_COUNT][32], b[MRMGR__PT_COUNT][32];
	struct timespec ms = { 0, 1000000 };

	for (int round = 0; round < 20; round++) {
		for (int t = 0; t < MRMGR__PT_COUNT; t++)
			if (lost & (1u << t))
				memcpy(a[t], (const void *)P.entry[t], 32);
		nanosleep(&ms, NULL);
		for (int t = 0; t < MRMGR__PT_COUNT; t++)
			if (lost & (1u << t))
				memcpy(b[t], (const void *)P.entry[t], 32);
		if (!memcmp(a, b, sizeof(a)))
			return;
	}
}

/* Take site t back as its entry is now. */
static int resite(int t)
{
	struct mrmgr__patch_site n, *d = &P.direct[t];
	uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE);
	int err;

	if (d->fn && !memcmp((const void *)d->win, d->old, d->win_len)) {
		n = *d; /* glibc's own bytes are back: our first plan holds */
	} else {
		err = mrmgr__patch_plan_one(&P.im, t, &n);
		if (err && t == MRMGR__PT_SBRK && mrmgr__patch_sbrk_calls_brk(&P.im))
			n.fn = n.chain = 0; /* glibc's own sbrk is back */
		else if (err)
			return err;
		if (n.chain >= P.tramp && n.chain < P.tramp + pg) {
			/* One of our own jumps, put back by the other
			 * patcher's restore: keep it as it is. */
			size_t idx = (n.chain - P.tramp) / mrmgr__patch_arch_tramp_size();

			n.chain = idx < MRMGR__PT_COUNT ? 0
				  : mrmgr__patch_chain[idx / MRMGR__PT_COUNT - 1][t];
			memcpy(n.new, n.old, sizeof(n.new));
			P.site[t] = n;
			mrmgr__patch_mark(t, 1);
			return 0;
		}
		if (!n.chain)
			*d = n;
	}
	P.site[t] = n;
	if (t == MRMGR__PT_SBRK && !n.chain) {
		/* sbrk is glibc's own again: it reaches brk's body. */
		P.site[t].fn = 0;
		__atomic_fetch_and(&P.targets, ~(1u << t), __ATOMIC_RELEASE);
		__atomic_fetch_and(&P.chained, ~(1u << t), __ATOMIC_RELEASE);
		memcpy(P.seen[t], (const void *)P.entry[t], 16);
		mrmgr__patch_build_checks();
		return 0;
	}
	err = mrmgr__patch_encode(t);
	return err ? err : mrmgr__patch_apply(t, 0);
}

/* Name of the object holding a, for the warning. */
const char *mrmgr__patch_owner_of(uintptr_t a)
{
	Dl_info di;

	if (a && dladdr((void *)a, &di) && di.dli_fname) {
		const char *slash = strrchr(di.dli_fname, '/');

		return slash ? slash + 1 : di.dli_fname;
	}
	return "anonymous code";
}

/*
 * Our jumps were overwritten: calls may have bypassed our hooks since,
 * so every cache must forget everything ("everything changed", which
 * the core drains and applies at its next get; pushed again a little
 * later for a call that was inside the other patcher's code while we
 * went back on top), and we chain on top of the other patcher again.
 */
static void recover(uint32_t lost)
{
	const char *who = NULL;
	char names[96] = "";
	int err = 0;

	/* Up from before the first jump is put back until the second flush
	 * (mrmgr__patch_check()): mrmgr__patch_quiet() says no meanwhile,
	 * so no miss vouches without the lock while this runs. */
	P.flush_at_ms = UINT64_MAX;
	__atomic_store_n(&P.flush_again, 1, __ATOMIC_SEQ_CST);
	__atomic_thread_fence(__ATOMIC_SEQ_CST); /* before any jump's bytes */
	settle(lost);
	for (int t = 0; t < MRMGR__PT_COUNT && !err; t++) {
		const char *name = mrmgr__patch_target_name(t);

		if (!(lost & (1u << t)))
			continue;
		err = resite(t);
		if (!who && P.site[t].chain)
			who = mrmgr__patch_owner_of(P.site[t].chain);
		if (strlen(names) + strlen(name) + 3 < sizeof(names)) {
			if (names[0])
				strcat(names, ", ");
			strcat(names, name);
		}
	}
	if (!err)
		err = mrmgr__patch_selftest(&P.im);
	__atomic_fetch_add(&P.overwrites, 1, __ATOMIC_RELEASE);
	mrmgr__icpt.push(0, UINT64_MAX);
	P.flush_at_ms = now_ms() + 10;
	if (err) {
		__atomic_store_n(&P.state, PATCH_FAILED, __ATOMIC_RELEASE);
		P.err = err == ENOSPC || err == ENOENT ? err : ENOEXEC;
		mrmgr__warn("monitor: another library overwrote libc's %s after "
			    "libmrmgr patched it and cannot be chained (%s): the "
			    "patch source stops, every cache was invalidated, "
			    "and other sources are used", names, strerror(err));
		return;
	}
	if (!P.warned) {
		P.warned = 1;
		mrmgr__warn("monitor: another library (%s) overwrote libc's %s "
			    "after libmrmgr patched it; libmrmgr chained on top "
			    "again and invalidated every cache, since changes in "
			    "between may have been missed (said once; "
			    "mrmgr_monitor_info.patch_overwrites counts them)",
			    who ? who : "glibc's own bytes back", names);
	} else {
		mrmgr__dbg("monitor: libc's %s overwritten again: chained on top",
			   names);
	}
}

/* The pages of libc's text holding our entry points (0, 0 before the
 * install completes), for the mprotect hook. */
static uintptr_t text_lo, text_hi;

void mrmgr__patch_text_protected(uintptr_t a, size_t l)
{
	uintptr_t lo = __atomic_load_n(&text_lo, __ATOMIC_ACQUIRE);

	if (mrmgr__likely(a >= text_hi || a + l <= lo || !lo))
		return;
	if (lost_sites())
		mrmgr__icpt.push(0, UINT64_MAX);
}

void mrmgr__patch_set_text_range(void)
{
	uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE), lo = UINTPTR_MAX, hi = 0;

	for (int t = 0; t < MRMGR__PT_COUNT; t++) {
		uintptr_t a = P.entry[t], b = a + 32;

		if (!a)
			continue;
		if (P.site[t].pad && P.site[t].pad < a)
			a = P.site[t].pad;
		if (P.site[t].pad && P.site[t].pad + 8 > b)
			b = P.site[t].pad + 8;
		lo = a < lo ? a : lo;
		hi = b > hi ? b : hi;
	}
	text_hi = (hi + pg - 1) & ~(pg - 1);
	__atomic_store_n(&text_lo, lo & ~(pg - 1), __ATOMIC_RELEASE);
}

int mrmgr__patch_quiet(void)
{
	/* Our jumps first, then the flag recover() raised before it wrote
	 * any: jumps it put back are seen with the flag still up (an
	 * acquire fence orders the loads: free on x86, where an mfence
	 * here was a sixth of this function's time on a miss). */
	if (lost_sites())
		return 0;
	__atomic_thread_fence(__ATOMIC_ACQUIRE);
	return !__atomic_load_n(&P.flush_again, __ATOMIC_ACQUIRE) &&
	       __atomic_load_n(&P.state, __ATOMIC_ACQUIRE) == PATCH_ACTIVE;
}

void mrmgr__patch_check(void)
{
	uint32_t lost = lost_sites();

	if (mrmgr__unlikely(P.flush_again) && now_ms() >= P.flush_at_ms) {
		__atomic_store_n(&P.flush_again, 0, __ATOMIC_RELEASE);
		mrmgr__icpt.push(0, UINT64_MAX);
	}
	if (mrmgr__unlikely(lost))
		recover(lost);
}

#endif /* MRMGR__PATCH_SUPPORTED */
