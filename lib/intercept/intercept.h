/*
 * The interception engine's face to its user: libc's memory entry points
 * patched in the process (patch*.c, arch/), and the memory calls other
 * objects define, followed through their call sites (follow.c). The
 * engine knows no cache and no monitor: it reports the changes it sees to
 * a sink its user binds (the monitor binds its change protocol and queue,
 * lib/monitor/sources.c), as UCX's libucm calls the handlers its users
 * install.
 *
 * SPDX-License-Identifier: MIT
 */
#ifndef MRMGR__INTERCEPT_H
#define MRMGR__INTERCEPT_H

#include <stdint.h>

struct mrmgr_monitor_info;

/*
 * Where changes go. begin and end are both sides of a change (begin
 * before the kernel releases the pages of [start, last], inclusive and
 * page granular, end after the call returned, success or not, with the
 * same range); push is one side, after the fact (everything may have
 * changed: another patcher wrote over the entry points). The rest serve
 * the delivery self-test. Async-signal-safe, every one.
 */
struct mrmgr__icpt_sink {
	void (*begin)(uint64_t start, uint64_t last);
	void (*end)(uint64_t start, uint64_t last);
	void (*push)(uint64_t start, uint64_t last);
	void (*filter_add)(uint64_t start, uint64_t last);
	uint64_t (*tail)(void);
	int (*saw)(uint64_t from, uint64_t start, uint64_t last);
};

/* The sink in force: no-ops until bound. Bind before the first start. */
extern struct mrmgr__icpt_sink mrmgr__icpt;
void mrmgr__icpt_bind(const struct mrmgr__icpt_sink *sink);

/*
 * Start the patched libc (the user's lock held): 0 once it delivers
 * (idempotent), or why not. Weak: a build without the engine (an
 * architecture it does not support) has none.
 */
int mrmgr__patch_start(void) __attribute__((weak, visibility("hidden")));
/* Whether a sanitizer runs in the process (weak likewise): the patched
 * libc steps aside there. */
int mrmgr__patch_sanitizer(void) __attribute__((weak, visibility("hidden")));
/*
 * No lock held (a miss's watch, watch.c): 1 when mrmgr__patch_start()
 * would answer 0 at once with nothing to do (active, our jumps all in
 * place, no second flush due); 0 sends the caller to the locked path,
 * which does what is due. Weak likewise.
 */
int mrmgr__patch_quiet(void) __attribute__((weak, visibility("hidden")));
/*
 * From now on, report the memory a call obtains at an address it did not
 * name (mmap without MAP_FIXED, mremap's result, shmat), after the call:
 * a sanitizer's allocator may have released pages there with raw system
 * calls (lib/monitor/sanalloc.c). Weak likewise; for the process's life.
 */
void mrmgr__patch_fresh_on(void) __attribute__((weak, visibility("hidden")));
/* 1 active, 2 failed, 0 untried (the monitor's enum mrmgr__src_state);
 * *err: why not (0 when active). */
int mrmgr__patch_state(int *err);
/* Bit (1 << enum mrmgr__patch_target) for each function redirected now. */
uint32_t mrmgr__patch_targets(void);
/* Of those, the ones whose hook calls another patcher's code (chained). */
uint32_t mrmgr__patch_chained(void);
/* Times another patcher overwrote our entry points after we installed. */
uint32_t mrmgr__patch_overwrites(void);

/*
 * Memory calls the process defines itself (follow.c; 0 and nothing where
 * the engine is not supported). check: with the user's lock held, at the
 * patched libc's start and on a miss; rescans when objects were loaded or
 * unloaded (one dl_iterate_phdr() otherwise). 0 when every definition
 * outside libc is followed (or there is none), else why the patched libc
 * cannot vouch (EOPNOTSUPP: code with raw memory system calls).
 */
int mrmgr__follow_check(void);
/*
 * No lock held: 1 when mrmgr__follow_check() would answer 0 with nothing
 * to rescan (no object loaded since a check that answered 0: the last
 * object of the loader's list then is still the last, or, once one was
 * loaded after it, the loader's counters are those of that check: one
 * dl_iterate_phdr(), no lock of ours); 0: call it, locked.
 */
int mrmgr__follow_quiet(void);
/* Tests: 1 while mrmgr__follow_quiet() reads the last object's l_next. */
int mrmgr__follow_by_tail(void);
void mrmgr__follow_info(struct mrmgr_monitor_info *m);
/* Tests: following fails (EPERM) wherever there is something to follow. */
extern int mrmgr__follow_test_fail;

#endif /* MRMGR__INTERCEPT_H */
