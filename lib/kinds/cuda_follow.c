/*
 * libcuda's frees, followed (cuda_follow.h). Why call sites and not the
 * patch engine on libcuda's entry points: doc/device-memory.md, "How the
 * CUDA domain follows frees". In short, the engine's hooks replace a
 * body (they issue the system call themselves); wrapping a function
 * means running its first instructions elsewhere, which the engine does
 * not do and could not verify on a closed driver that changes with each
 * release (UCX's code patches of cuMemFree are what silently broke in
 * openucx/ucx#7865, #10627, #10868).
 *
 * What is redirected, with `lock` held, when the first CUDA domain opens
 * and again whenever an object was loaded since (the last object of the
 * link map has a successor: one load at every get):
 *   - every loaded object's GOT/PLT slots of the followed functions
 *     (R_*_JUMP_SLOT, R_*_GLOB_DAT) bound to libcuda's definition, or not
 *     bound yet (lazy: the slot still points into the object's own PLT);
 *   - their slots of dlsym(), dlvsym() and cuGetProcAddress(_v2): the
 *     wrappers hand out ours whenever the answer is a followed function.
 *   - their slots of dlclose(): an object loaded since the last scan
 *     could free through its own call sites and be unloaded before a
 *     get sees it, so the scan comes first.
 * A slot bound to anything else (another interposer) is not overwritten:
 * following stops, and says why. So does an object loaded after the
 * first scan that imports dlsym, dlvsym or cuGetProcAddress: it may have
 * taken a pointer before we saw it. libcuda must not be loaded before
 * the first domain opens, for the same reason (libcudart's function
 * table). Where following stops, every get validates (devva.h).
 *
 * Each free's wrapper (cuda_wrap.c) moves `begun` before the driver's
 * call and `ended` after it: while they differ a free is under way and
 * every get validates, so another thread's allocation at an address the
 * driver already gave back cannot hit the old registration.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "compiler.h"
#include "cuda_follow.h"
#include "cuda_wrap.h"
#include "got.h"
#include "log.h"

int mrmgr__cuda_follow_test_off;

#if defined(MRMGR__R_SLOT)

/* ------------------------------------------------------------ state */

static int on;
static char why[256] = "not started (no CUDA domain opened)";
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int started;
/* Guards why: mrmgr__cuda_stop() may run in any thread that looks a
 * function up. */
static pthread_mutex_t why_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t sites;
/* The last object of the link map at the last scan, pinned (an extra
 * reference, never dropped) so that it cannot be unloaded while a get
 * reads its l_next. */
static struct link_map *tail;

/* Following stops for good: every get validates from now on. */
void mrmgr__cuda_stop(const char *reason)
{
	int was = __atomic_exchange_n(&on, 0, __ATOMIC_ACQ_REL);
	int after = __atomic_load_n(&started, __ATOMIC_ACQUIRE);

	if (!was && after)
		return;
	pthread_mutex_lock(&why_lock);
	snprintf(why, sizeof(why), "%s", reason);
	pthread_mutex_unlock(&why_lock);
	__atomic_store_n(&tail, NULL, __ATOMIC_RELEASE);
	if (was && after)
		mrmgr__warn("CUDA memory domain: frees no longer followed (%s): "
			    "every get validates the allocation's buffer id "
			    "from now on", reason);
}

static const char *base_name(const char *p)
{
	const char *s = p ? strrchr(p, '/') : NULL;

	return s ? s + 1 : p && *p ? p : "the program";
}

static int target_of(const char *n)
{
	if (n[0] != 'c' && n[0] != 'd')
		return -1;
	for (int t = 0; t < T_COUNT; t++)
		if (!strcmp(n, mrmgr__cuda_names[t]))
			return t;
	return -1;
}

/* One scan's findings. */
struct scan {
	uint64_t moved;
	int err;
	const uintptr_t *fresh; /* load biases of objects new since the last */
	size_t nfresh;
	char what[160];
};

static int is_fresh(const struct scan *s, uintptr_t bias)
{
	for (size_t i = 0; i < s->nfresh; i++)
		if (s->fresh[i] == bias)
			return 1;
	return 0;
}

/* One call site: redirected, or why it cannot be. */
static void site(struct scan *s, const struct dl_phdr_info *info,
		 const struct mrmgr__relocs *rl, const ElfW(Rela) *r, int t)
{
	uintptr_t *slot = (uintptr_t *)(info->dlpi_addr + r->r_offset);
	uintptr_t v = __atomic_load_n(slot, __ATOMIC_ACQUIRE);
	int lazy = ELF64_R_TYPE(r->r_info) == MRMGR__R_SLOT && mrmgr__got_holds(info, v);
	int err;

	if (!mrmgr__cuda_real[t] || !v || v == mrmgr__cuda_wrapper[t])
		return;
	if (v != mrmgr__cuda_real[t] && !lazy) {
		/* Another dlclose (a sanitizer's): no free goes through it;
		 * only its early scan is lost (doc/device-memory.md). */
		if (t == T_DLCLOSE)
			return;
		s->err = EEXIST;
		snprintf(s->what, sizeof(s->what), "%s of %s is bound to another "
			 "definition (an interposer): calls through it are not "
			 "seen", mrmgr__cuda_names[t], base_name(info->dlpi_name));
		return;
	}
	err = mrmgr__got_put(slot, mrmgr__cuda_wrapper[t], rl);
	if (err) {
		s->err = err;
		snprintf(s->what, sizeof(s->what), "%s of %s: the call site "
			 "cannot be written (%s)", mrmgr__cuda_names[t],
			 base_name(info->dlpi_name), strerror(err));
		return;
	}
	s->moved++;
}

static int redirect(struct dl_phdr_info *info, size_t sz, void *arg)
{
	struct scan *s = arg;
	const char *n = info->dlpi_name;
	struct mrmgr__relocs rl;

	(void)sz;
	if (!n || strstr(n, "ld-linux") || strstr(n, "linux-vdso") ||
	    strstr(n, "linux-gate") || mrmgr__got_holds(info, mrmgr__cuda_real[T_FREE_V2]) ||
	    !mrmgr__got_read(info, &rl))
		return 0;
	for (int k = 0; k < 2; k++)
		for (size_t i = 0; i < rl.n[k]; i++) {
			const ElfW(Rela) *r = &rl.r[k][i];
			unsigned long type = ELF64_R_TYPE(r->r_info);
			const char *sym;
			int t;

			if ((type != MRMGR__R_SLOT && type != MRMGR__R_GLOB) ||
			    !ELF64_R_SYM(r->r_info))
				continue;
			sym = rl.str + rl.sym[ELF64_R_SYM(r->r_info)].st_name;
			t = target_of(sym);
			if (s->nfresh && t >= T_FREES && t != T_DLCLOSE &&
			    is_fresh(s, info->dlpi_addr)) {
				s->err = EAGAIN;
				snprintf(s->what, sizeof(s->what), "%s, loaded "
					 "after the CUDA domain opened, imports "
					 "%s: a pointer it took before it was "
					 "seen cannot be followed",
					 base_name(n), sym);
			}
			if (t >= 0)
				site(s, info, &rl, r, t);
		}
	return 0;
}

/* The last object of the main namespace's link map, pinned. */
static int watch_tail(void)
{
	void *self = dlopen(NULL, RTLD_LAZY);
	struct link_map *lm = NULL;

	/* The program's handle is not closed: dlclose() is redirected to
	 * a wrapper that takes `lock`, held here (and closing it would
	 * only drop a count that never unloads anything). */
	if (!self || dlinfo(self, RTLD_DI_LINKMAP, &lm) || !lm)
		return ENOENT;
	while (lm->l_next)
		lm = lm->l_next;
	if (lm->l_name && lm->l_name[0] &&
	    !dlopen(lm->l_name, RTLD_LAZY | RTLD_NOLOAD))
		return ENOENT;
	/* No pin is ever dropped: a get may be reading the previous last
	 * object's l_next now, with no lock. */
	__atomic_store_n(&tail, lm, __ATOMIC_RELEASE);
	return 0;
}

/* Lock held: redirect every call site; with the objects after `tail`
 * checked for imports that may have taken a pointer already. */
static void scan(void)
{
	uintptr_t fresh[64];
	struct scan s = { .moved = 0, .err = 0, .fresh = fresh, .nfresh = 0,
			  .what = "" };

	if (tail) {
		for (struct link_map *lm = tail->l_next; lm; lm = lm->l_next) {
			if (s.nfresh == MRMGR__ARRAY_SIZE(fresh)) {
				mrmgr__cuda_stop("more than 64 objects were loaded at once");
				return;
			}
			fresh[s.nfresh++] = lm->l_addr;
		}
	}
	dl_iterate_phdr(redirect, &s);
	sites += s.moved;
	if (s.err) {
		mrmgr__cuda_stop(s.what);
		return;
	}
	if (watch_tail()) {
		mrmgr__cuda_stop("the link map cannot be watched for new objects");
		return;
	}
	/* A free through a call site not redirected yet went unseen: every
	 * cache validates once. */
	if (s.nfresh) {
		__atomic_fetch_add(&mrmgr__cuda_begun, 1, __ATOMIC_ACQ_REL);
		__atomic_fetch_add(&mrmgr__cuda_ended, 1, __ATOMIC_ACQ_REL);
	}
}

static void start_locked(void *dl, int loaded_before)
{
	void *p;

	if (mrmgr__cuda_follow_test_off) {
		mrmgr__cuda_stop("turned off by a test hook");
		return;
	}
	if (loaded_before) {
		mrmgr__cuda_stop("libcuda.so.1 was loaded before the first CUDA domain "
		     "opened: function pointers taken before (dlsym, "
		     "cuGetProcAddress: libcudart's table) cannot be followed; "
		     "open the domain before the first CUDA call");
		return;
	}
	/* Never unloaded: call sites go to wrappers that call into it. */
	if (!dlopen("libcuda.so.1", RTLD_LAZY | RTLD_NOLOAD | RTLD_NODELETE)) {
		mrmgr__cuda_stop("libcuda.so.1 cannot be pinned");
		return;
	}
	for (int t = 0; t < T_DLSYM; t++)
		__atomic_store_n(&mrmgr__cuda_real[t],
				 (uintptr_t)dlsym(dl, mrmgr__cuda_names[t]),
				 __ATOMIC_RELEASE);
	if (!mrmgr__cuda_real[T_FREE_V2]) {
		mrmgr__cuda_stop("libcuda.so.1 has no cuMemFree_v2");
		return;
	}
	/* Before any slot is written: ours are among them. */
	mrmgr__cuda_real_dlsym = (uintptr_t)&dlsym;
	mrmgr__cuda_real_dlvsym = (uintptr_t)&dlvsym;
	__atomic_store_n(&mrmgr__cuda_real[T_DLCLOSE], (uintptr_t)&dlclose,
			 __ATOMIC_RELEASE);
	__atomic_store_n(&mrmgr__cuda_real[T_DLSYM], mrmgr__cuda_real_dlsym,
			 __ATOMIC_RELEASE);
	__atomic_store_n(&mrmgr__cuda_real[T_DLVSYM], mrmgr__cuda_real_dlvsym,
			 __ATOMIC_RELEASE);
	__atomic_store_n(&on, 1, __ATOMIC_RELEASE);
	scan();
	if (!__atomic_load_n(&on, __ATOMIC_ACQUIRE))
		return;
	/* Self-test: our own call site of dlsym was redirected like every
	 * other, so the answer must be the wrapper. */
	p = dlsym(dl, "cuMemFree_v2");
	if ((uintptr_t)p != mrmgr__cuda_wrapper[T_FREE_V2])
		mrmgr__cuda_stop("self-test: dlsym() through a redirected call site did "
		     "not hand out the wrapper");
}

/* Once, after the start: the outcome, said. A stop racing with it (a
 * lookup in another thread) either comes first, and is said here, or
 * after, and warns itself: `on` is read under why_lock. */
static void say_start(void)
{
	char line[sizeof(why)];
	int followed;

	pthread_mutex_lock(&why_lock);
	followed = __atomic_load_n(&on, __ATOMIC_ACQUIRE);
	if (followed)
		snprintf(why, sizeof(why), "followed: %llu call site(s) of "
			 "cuMemFree*, cuMemFreeAsync*, the VMM and context "
			 "frees, dlsym, dlvsym and cuGetProcAddress redirected",
			 (unsigned long long)sites);
	snprintf(line, sizeof(line), "%s", why);
	pthread_mutex_unlock(&why_lock);
	if (followed)
		mrmgr__info("CUDA memory domain: frees %s", line);
	else
		mrmgr__info("CUDA memory domain: frees not followed (%s): every "
			    "get validates the allocation's buffer id (slower, "
			    "never stale)", line);
}

void mrmgr__cuda_follow_start(void *dl, int loaded_before)
{
	pthread_mutex_lock(&lock);
	if (!started) {
		start_locked(dl, loaded_before);
		__atomic_store_n(&started, 1, __ATOMIC_RELEASE);
		say_start();
	}
	pthread_mutex_unlock(&lock);
}

void mrmgr__cuda_follow_recheck(void)
{
	struct link_map *t = __atomic_load_n(&tail, __ATOMIC_ACQUIRE);

	if (mrmgr__likely(!t || !__atomic_load_n(&t->l_next, __ATOMIC_ACQUIRE)))
		return;
	pthread_mutex_lock(&lock);
	t = __atomic_load_n(&tail, __ATOMIC_ACQUIRE);
	if (t && t->l_next)
		scan();
	pthread_mutex_unlock(&lock);
}

const uint64_t *mrmgr__cuda_follow_begun(void)
{
	return &mrmgr__cuda_begun;
}

const uint64_t *mrmgr__cuda_follow_ended(void)
{
	return &mrmgr__cuda_ended;
}

const int *mrmgr__cuda_follow_on(void)
{
	return &on;
}

const char *mrmgr__cuda_follow_why(void)
{
	return why;
}

#else /* no call-site redirection on this architecture */

static const uint64_t zero;
static const int off;

void mrmgr__cuda_follow_start(void *dl, int loaded_before)
{
	static int said;

	(void)dl;
	(void)loaded_before;
	if (!__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED))
		mrmgr__info("CUDA memory domain: frees not followed (no call-site "
			    "redirection on this architecture): every get "
			    "validates the allocation's buffer id (slower, "
			    "never stale)");
}

const uint64_t *mrmgr__cuda_follow_begun(void)
{
	return &zero;
}

const uint64_t *mrmgr__cuda_follow_ended(void)
{
	return &zero;
}

const int *mrmgr__cuda_follow_on(void)
{
	return &off;
}

const char *mrmgr__cuda_follow_why(void)
{
	return "no call-site redirection on this architecture";
}

void mrmgr__cuda_follow_recheck(void)
{
}

#endif
