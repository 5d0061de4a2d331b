/*
 * Memory calls the process defines itself. gperftools' tcmalloc (and any
 * library or program like it) exports its own mmap, mmap64, munmap,
 * mremap and sbrk, which enter the kernel without glibc's wrappers: once
 * it is in the global scope, every call of the program binds to it, and
 * libc's patched entry points never see them. Left alone, the cache hands
 * out registrations of pages that are gone (issue 26: 45 % of gets).
 *
 * What this file does, with mrmgr__mon_lock held, when the patched libc
 * starts and again whenever the set of loaded objects changed (a cache's
 * miss asks, with no lock: follow_quiet.c):
 *   - find every definition of a followed call outside libc, libmrmgr and
 *     libmrmgr_hooks.so (each loaded object's dynamic symbol table);
 *   - redirect every loaded object's call sites bound to one of them --
 *     its GOT/PLT slots, R_*_JUMP_SLOT and R_*_GLOB_DAT relocations of
 *     that name whose value is the definition, or, not yet bound (lazy),
 *     would be -- to a wrapper here that reports the call's ranges before
 *     and after it (the chaining hooks' bodies, patch_hooks_chain.c) and calls
 *     the definition: both sides, as for glibc's own calls;
 *   - when a definition cannot be followed (no room, a slot that cannot
 *     be written), say so once and stop vouching: the default mode then
 *     takes userfaultfd, which sees the kernel's view, else nothing is
 *     cached. The same for code that makes memory system calls of its own
 *     and can be recognised: liburing, a Go runtime.
 *
 * Why call sites, not the patch engine on the definition's entry (it
 * would skip what the definition does besides the system call, and
 * tcmalloc's munmap leaves no room for the one-instruction jump), nor
 * userfaultfd alone (one-sided, and it changes what the program's own
 * mremap() does): doc/monitor.md, "Memory calls the process defines
 * itself", with what does not go through a call site.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <elf.h>
#include <errno.h>
#include <link.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "follow_quiet.h"
#include "got.h"
#include "log.h"
#include "patch.h"

#if MRMGR__PATCH_SUPPORTED

#define R_SLOT MRMGR__R_SLOT
#define R_GLOB MRMGR__R_GLOB

/* The followed calls, in enum mrmgr_monitor_call's order. */
enum { C_MMAP, C_MMAP64, C_MUNMAP, C_MREMAP, C_MADVISE, C_POSIX_MADVISE,
       C_BRK, C_SBRK, C_SHMAT, C_SHMDT, C_COUNT };
static const char *const call_name[C_COUNT] = {
	"mmap", "mmap64", "munmap", "mremap", "madvise", "posix_madvise",
	"brk", "sbrk", "shmat", "shmdt",
};

/* Symbols that tell code with memory system calls of its own. */
static const struct { const char *sym; uint32_t bit; } raw_marks[] = {
	{ "io_uring_queue_init", MRMGR_MONITOR_RAW_IO_URING },
	{ "io_uring_queue_init_params", MRMGR_MONITOR_RAW_IO_URING },
	{ "crosscall2", MRMGR_MONITOR_RAW_GO },
	{ "_cgo_topofstack", MRMGR_MONITOR_RAW_GO },
	{ "x_cgo_init", MRMGR_MONITOR_RAW_GO },
};

/* ------------------------------------------------------------ wrappers */

/* Foreign definitions, never reused: a slot's wrapper calls its next for
 * the life of the process (a call site may still hold it). */
#define DEFS 16
static struct def {
	uintptr_t fn;
	unsigned int call;
	char obj[48];
} D[DEFS];
static unsigned int nd;
static uintptr_t next_of[DEFS];

#define NEXT(k) __atomic_load_n(&next_of[k], __ATOMIC_ACQUIRE)

/* The kernel's break: the definition may keep its own (tcmalloc does),
 * so glibc's __curbrk says nothing about it. */
static uintptr_t kernel_brk(void)
{
	return (uintptr_t)mrmgr__patch_sys(SYS_brk, 0, 0, 0, 0, 0, 0);
}

static int brk_range(uintptr_t lo, uintptr_t hi, uint64_t *s, uint64_t *e)
{
	if (lo >= hi)
		return 0;
	*s = (uint64_t)lo & ~(uint64_t)4095;
	*e = (uint64_t)(hi - 1) | 4095;
	return 1;
}

static int f_brk(uintptr_t next, void *a)
{
	uint64_t s = 0, e = 0;
	int rep = a && brk_range((uintptr_t)a, kernel_brk(), &s, &e), r, err;

	if (rep)
		mrmgr__icpt.begin(s, e);
	r = ((int (*)(void *))next)(a);
	err = errno;
	if (rep)
		mrmgr__icpt.end(s, e);
	errno = err;
	return r;
}

static void *f_sbrk(uintptr_t next, intptr_t inc)
{
	uintptr_t cur = inc < 0 ? kernel_brk() : 0;
	uint64_t s = 0, e = 0;
	int rep = inc < 0 && (uintptr_t)-inc <= cur &&
		  brk_range(cur + (uintptr_t)inc, cur, &s, &e), err;
	void *r;

	if (rep)
		mrmgr__icpt.begin(s, e);
	r = ((void *(*)(intptr_t))next)(inc);
	err = errno;
	if (rep)
		mrmgr__icpt.end(s, e);
	errno = err;
	return r;
}

#define WRAP(k)                                                              \
	static int munmap_##k(void *a, size_t l)                             \
	{                                                                    \
		return mrmgr__follow_munmap(NEXT(k), a, l);                  \
	}                                                                    \
	static void *mremap_##k(void *o, size_t ol, size_t nl, int f, void *d) \
	{                                                                    \
		return mrmgr__follow_mremap(NEXT(k), o, ol, nl, f, d);       \
	}                                                                    \
	static int madvise_##k(void *a, size_t l, int adv)                  \
	{                                                                    \
		return mrmgr__follow_madvise(NEXT(k), a, l, adv);            \
	}                                                                    \
	static void *mmap_##k(void *a, size_t l, int p, int f, int fd, long o) \
	{                                                                    \
		return mrmgr__follow_mmap(NEXT(k), a, l, p, f, fd, o);       \
	}                                                                    \
	static int brk_##k(void *a)                                          \
	{                                                                    \
		return f_brk(NEXT(k), a);                                    \
	}                                                                    \
	static void *sbrk_##k(intptr_t inc)                                  \
	{                                                                    \
		return f_sbrk(NEXT(k), inc);                                 \
	}                                                                    \
	static void *shmat_##k(int id, const void *a, int flg)              \
	{                                                                    \
		return mrmgr__follow_shmat(NEXT(k), id, a, flg);             \
	}                                                                    \
	static int shmdt_##k(const void *a)                                  \
	{                                                                    \
		return mrmgr__follow_shmdt(NEXT(k), a);                      \
	}
#define ROW(k)                                                               \
	{                                                                    \
		[C_MMAP] = (void (*)(void))mmap_##k,                         \
		[C_MMAP64] = (void (*)(void))mmap_##k,                       \
		[C_MUNMAP] = (void (*)(void))munmap_##k,                     \
		[C_MREMAP] = (void (*)(void))mremap_##k,                     \
		[C_MADVISE] = (void (*)(void))madvise_##k,                   \
		[C_POSIX_MADVISE] = (void (*)(void))madvise_##k,             \
		[C_BRK] = (void (*)(void))brk_##k,                           \
		[C_SBRK] = (void (*)(void))sbrk_##k,                         \
		[C_SHMAT] = (void (*)(void))shmat_##k,                       \
		[C_SHMDT] = (void (*)(void))shmdt_##k,                       \
	}
WRAP(0) WRAP(1) WRAP(2) WRAP(3) WRAP(4) WRAP(5) WRAP(6) WRAP(7)
WRAP(8) WRAP(9) WRAP(10) WRAP(11) WRAP(12) WRAP(13) WRAP(14) WRAP(15)
static void (*const wrap_fn[DEFS][C_COUNT])(void) = {
	ROW(0), ROW(1), ROW(2), ROW(3), ROW(4), ROW(5), ROW(6), ROW(7),
	ROW(8), ROW(9), ROW(10), ROW(11), ROW(12), ROW(13), ROW(14), ROW(15),
};
_Static_assert(DEFS == 16, "one WRAP() and ROW() per definition");

/* ------------------------------------------------------------ state */

int mrmgr__follow_test_fail;

static struct {
	int scanned;
	unsigned long long adds, subs;
	uint32_t calls, followed, raw;
	int err;
	uint64_t sites;
	char first[64];
	int said_info, said_warn;
	uintptr_t bind[C_COUNT]; /* each call's first definition in load
				   * order (libc's, unless preloaded): where a
				   * call site not bound yet will bind */
} F;


/*
 * Objects to leave alone: libc (its entries are patched; told by a
 * symbol of its own), libmrmgr itself (the object holding this code),
 * the hooks library (a source of its own), the dynamic linker and the
 * vDSO. No dladdr()/dlsym() here: they take the loader's lock, which a
 * thread inside dlopen() holds while a constructor may be waiting for
 * the monitor's lock that this thread holds.
 */
static int is_self(const struct dl_phdr_info *info)
{
	return mrmgr__got_holds(info, (uintptr_t)is_self);
}

static int foreign_code(const struct dl_phdr_info *info)
{
	const char *name = info->dlpi_name;

	return name && !strstr(name, "libmrmgr_hooks") && !strstr(name, "ld-linux") &&
	       !strstr(name, "linux-vdso") && !strstr(name, "linux-gate");
}

/* Where definitions are looked for: not in libmrmgr. Call sites are
 * redirected in libmrmgr too (its own few calls are reported like any
 * other, harmlessly), and must be where it is linked into the program. */
static int skipped(const struct dl_phdr_info *info)
{
	return !foreign_code(info) || is_self(info);
}

static const char *base_name(const char *p)
{
	const char *s = p ? strrchr(p, '/') : NULL;

	return s ? s + 1 : p && *p ? p : "the program";
}

static int def_of(uintptr_t fn, unsigned int call)
{
	for (unsigned int k = 0; k < nd; k++)
		if (D[k].fn == fn && D[k].call == call)
			return (int)k;
	return -1;
}

static int wrapper_of(uintptr_t v)
{
	for (unsigned int k = 0; k < nd; k++)
		if (v == (uintptr_t)wrap_fn[k][D[k].call])
			return 1;
	return 0;
}

/* Pass 1: the definitions of each object, and the raw marks. */
static int find_defs(struct dl_phdr_info *info, size_t sz, void *arg)
{
	struct mrmgr__patch_image im;

	(void)sz;
	(void)arg;
	if (!info->dlpi_name || !mrmgr__patch_object_syms(info, &im))
		return 0;
	/* Every object counts for where a name binds (the hooks library
	 * preloaded comes first, for one). */
	for (unsigned int c = 0; c < C_COUNT; c++)
		if (!F.bind[c])
			F.bind[c] = mrmgr__patch_sym(&im, call_name[c], NULL);
	if (skipped(info) || mrmgr__patch_sym(&im, "gnu_get_libc_version", NULL))
		return 0;
	for (size_t i = 0; i < MRMGR__ARRAY_SIZE(raw_marks); i++)
		if (mrmgr__patch_sym(&im, raw_marks[i].sym, NULL))
			F.raw |= raw_marks[i].bit;
	for (unsigned int c = 0; c < C_COUNT; c++) {
		uintptr_t fn = mrmgr__patch_sym(&im, call_name[c], NULL);

		if (!fn)
			continue;
		F.calls |= 1u << c;
		if (!F.first[0])
			snprintf(F.first, sizeof(F.first), "%s",
				 base_name(info->dlpi_name));
		if (def_of(fn, c) >= 0)
			continue;
		if (nd == DEFS) {
			F.err = ENOSPC;
			continue;
		}
		D[nd].fn = fn;
		D[nd].call = c;
		snprintf(D[nd].obj, sizeof(D[nd].obj), "%s",
			 base_name(info->dlpi_name));
		__atomic_store_n(&next_of[nd], fn, __ATOMIC_RELEASE);
		nd++;
	}
	return 0;
}

static int call_of(const char *name)
{
	for (unsigned int c = 0; c < C_COUNT; c++)
		if (!strcmp(name, call_name[c]))
			return (int)c;
	return -1;
}

/* Pass 2: every call site bound (or to be bound) to a definition. */
static int redirect(struct dl_phdr_info *info, size_t sz, void *arg)
{
	uint64_t *moved = arg;
	struct mrmgr__relocs rl;

	(void)sz;
	if (!nd || !foreign_code(info) || !mrmgr__got_read(info, &rl))
		return 0;
	for (int t = 0; t < 2; t++)
		for (size_t i = 0; i < rl.n[t]; i++) {
			const ElfW(Rela) *r = &rl.r[t][i];
			unsigned long type = ELF64_R_TYPE(r->r_info);
			const char *name;
			uintptr_t *slot, v, want;
			int c, k, err;

			if ((type != R_SLOT && type != R_GLOB) || !ELF64_R_SYM(r->r_info))
				continue;
			name = rl.str + rl.sym[ELF64_R_SYM(r->r_info)].st_name;
			if (name[0] != 'm' && name[0] != 'b' && name[0] != 's' &&
			    name[0] != 'p')
				continue;
			c = call_of(name);
			if (c < 0)
				continue;
			slot = (uintptr_t *)(info->dlpi_addr + r->r_offset);
			v = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
			if (wrapper_of(v))
				continue;
			k = def_of(v, (unsigned int)c);
			if (k < 0 && type == R_SLOT && v != F.bind[c]) {
				/* Not bound yet (lazy): it binds to the first
				 * definition in the global scope, which is
				 * load order (libc defines every name, so one
				 * is found among the objects loaded at start). */
				want = F.bind[c];
				k = want ? def_of(want, (unsigned int)c) : -1;
			}
			if (k < 0)
				continue;
			err = mrmgr__got_put(slot, (uintptr_t)wrap_fn[k][c], &rl);
			if (err) {
				F.err = err;
				continue;
			}
			(*moved)++;
		}
	return 0;
}

static void names_of(uint32_t bits, char *buf, size_t n)
{
	buf[0] = 0;
	for (unsigned int c = 0; c < C_COUNT; c++)
		if ((bits & (1u << c)) && strlen(buf) + strlen(call_name[c]) + 3 < n) {
			if (buf[0])
				strcat(buf, ", ");
			strcat(buf, call_name[c]);
		}
}

/* Who defines what, for the log line: "libtcmalloc.so.4: mmap, munmap". */
static void who(char *buf, size_t n)
{
	size_t l = 0;

	buf[0] = 0;
	for (unsigned int k = 0; k < nd && l < n; k++) {
		int first = 1;

		for (unsigned int j = 0; j < k && first; j++)
			first = strcmp(D[j].obj, D[k].obj) != 0;
		if (!first)
			continue;
		for (unsigned int j = k; j < nd && l < n; j++) {
			if (strcmp(D[j].obj, D[k].obj))
				continue;
			if (j == k)
				snprintf(buf + l, n - l, "%s%s: %s", l ? "; " : "",
					 D[k].obj, call_name[D[j].call]);
			else
				snprintf(buf + l, n - l, ", %s", call_name[D[j].call]);
			l = strlen(buf);
		}
	}
}

static void say(void)
{
	char defs[256], lost[96];

	if (!F.calls && !F.raw)
		return;
	who(defs, sizeof(defs));
	names_of(F.calls & ~F.followed, lost, sizeof(lost));
	if (F.err || F.raw) {
		if (F.said_warn++)
			return;
		mrmgr__warn("monitor: %s%s%s%s%s%s: the patched libc cannot see "
			    "these calls; the default mode follows the memory "
			    "with userfaultfd instead where it can, else caches "
			    "nothing (mrmgr_cache_query_monitor(): foreign_*, "
			    "raw_runtimes)",
			    F.calls ? "memory calls defined outside libc (" : "",
			    F.calls ? defs : "", F.calls ? ")" : "",
			    F.err ? ", not followed: " : "",
			    F.err ? (lost[0] ? lost : strerror(F.err)) : "",
			    F.raw ? (F.raw & MRMGR_MONITOR_RAW_GO
					     ? "; a Go runtime (raw madvise/munmap)"
					     : "; liburing (IORING_OP_MADVISE)")
				  : "");
		return;
	}
	if (F.said_info++) {
		mrmgr__dbg("monitor: memory calls defined outside libc now: %s; "
			   "followed (%llu call sites)", defs,
			   (unsigned long long)F.sites);
		return;
	}
	mrmgr__info("monitor: memory calls defined outside libc (%s) followed: "
		    "%llu call sites of the loaded objects redirected through "
		    "libmrmgr's wrappers, which report both sides of each call",
		    defs, (unsigned long long)F.sites);
}

/* Rescan: definitions, raw marks, call sites. */
static void scan(void)
{
	uint64_t moved = 0;
	uint32_t before = F.calls, raw_before = F.raw;
	unsigned int nd_before = nd;

	memset(F.bind, 0, sizeof(F.bind));
	F.first[0] = 0;
	F.calls = 0;
	F.raw = 0;
	F.err = 0;
	dl_iterate_phdr(find_defs, NULL);
	dl_iterate_phdr(redirect, &moved);
	if (mrmgr__follow_test_fail && F.calls)
		F.err = EPERM;
	F.sites += moved;
	F.followed = F.err ? 0 : F.calls;
	if (moved || nd != nd_before)
		/* A call through a site before it was redirected went
		 * unreported: every cache forgets what it holds. */
		mrmgr__icpt.push(0, UINT64_MAX);
	if (F.calls != before || F.raw != raw_before || moved || F.err)
		say();
}

int mrmgr__follow_check(void)
{
	struct mrmgr__follow_snap s;
	int ret;

	mrmgr__follow_snap(&s, !F.scanned);
	if (mrmgr__unlikely(!F.scanned || s.adds != F.adds || s.subs != F.subs)) {
		mrmgr__follow_unquiet();
		F.scanned = 1;
		F.adds = s.adds;
		F.subs = s.subs;
		scan();
	}
	ret = F.err ? F.err : F.raw ? EOPNOTSUPP : 0;
	mrmgr__follow_quiet_from(&s, ret);
	return ret;
}

void mrmgr__follow_info(struct mrmgr_monitor_info *m)
{
	m->foreign_calls = F.calls;
	m->foreign_followed = F.followed;
	m->foreign_error = F.err;
	m->raw_runtimes = F.raw;
	m->foreign_sites = F.sites;
	snprintf(m->foreign_object, sizeof(m->foreign_object), "%s", F.first);
}

#else /* !MRMGR__PATCH_SUPPORTED */

int mrmgr__follow_test_fail;

int mrmgr__follow_check(void)
{
	return 0;
}

void mrmgr__follow_info(struct mrmgr_monitor_info *m)
{
	(void)m;
}

#endif /* MRMGR__PATCH_SUPPORTED */
