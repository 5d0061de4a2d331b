/*
 * The simulated HCA's registry of open devices, and what it does at
 * fork().
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>

#include "log.h"
#include "sim/sim_internal.h"

/*
 * Registry of open devices. A pointer can only be recognised as ours by
 * looking it up: peeking at a magic number next to a real libibverbs
 * context would read someone else's memory. Every sim call looks its
 * device up, so lookups take no lock: the slots are read with acquire
 * loads, opens and closes (under registry_lock) store them with release.
 * A full array is replaced by a larger copy and kept (a lookup may still
 * be scanning it), so the arrays ever made stay allocated, on a chain;
 * they add up to less than twice the most devices open at once.
 */
struct registry {
	struct registry *older; /* the arrays this one replaced */
	size_t cap;
	struct mrmgr__sim_ctx *slot[];
};

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static struct registry *registry;
static size_t registry_hi; /* slots at or above are NULL */

int mrmgr__sim_registry_add(struct mrmgr__sim_ctx *sctx)
{
	struct registry *r;
	size_t i;
	int ret = 0;

	pthread_mutex_lock(&registry_lock);
	r = registry;
	for (i = 0; r && i < registry_hi; i++)
		if (!r->slot[i])
			break;
	if (!r || i == r->cap) {
		size_t cap = r ? r->cap * 2 : 8;
		struct registry *n = calloc(1, sizeof(*n) + cap * sizeof(n->slot[0]));

		if (!n) {
			ret = ENOMEM;
			goto out;
		}
		n->cap = cap;
		n->older = r;
		for (size_t j = 0; r && j < r->cap; j++)
			n->slot[j] = r->slot[j];
		__atomic_store_n(&registry, n, __ATOMIC_RELEASE);
		r = n;
	}
	__atomic_store_n(&r->slot[i], sctx, __ATOMIC_RELEASE);
	if (i == registry_hi)
		__atomic_store_n(&registry_hi, i + 1, __ATOMIC_RELEASE);
out:
	pthread_mutex_unlock(&registry_lock);
	return ret;
}

void mrmgr__sim_registry_del(struct mrmgr__sim_ctx *sctx)
{
	struct registry *r;
	size_t hi;

	pthread_mutex_lock(&registry_lock);
	r = registry;
	hi = registry_hi;
	for (size_t i = 0; r && i < hi; i++) {
		if (r->slot[i] == sctx) {
			__atomic_store_n(&r->slot[i], NULL, __ATOMIC_RELEASE);
			break;
		}
	}
	while (hi && !r->slot[hi - 1])
		hi--;
	__atomic_store_n(&registry_hi, hi, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&registry_lock);
}

static struct mrmgr__sim_ctx *registry_find(const struct ibv_context *ctx)
{
	struct registry *r = __atomic_load_n(&registry, __ATOMIC_ACQUIRE);
	size_t hi = __atomic_load_n(&registry_hi, __ATOMIC_ACQUIRE);

	if (!ctx || !r)
		return NULL;
	if (hi > r->cap) /* grown since r was read */
		hi = r->cap;
	for (size_t i = 0; i < hi; i++) {
		struct mrmgr__sim_ctx *s = __atomic_load_n(&r->slot[i],
							   __ATOMIC_ACQUIRE);

		if (s && &s->ibctx == ctx)
			return s;
	}
	return NULL;
}

/*
 * fork(): a child may use its parent's devices (doc/sharing.md), so no
 * device lock may be copied held by a thread that does not exist there
 * (a registration in another thread at the fork left the child waiting
 * forever). prepare holds every device's lock and the registry's across
 * the fork. mrmgr_sim_close() takes a device's lock and then the
 * registry's, so prepare takes the registry's first and only tries the
 * devices', starting over when one is busy. Registered at load, before
 * any cache's handler, so it runs after libmrmgr's prepare: the library
 * may call a device with a cache lock held, never the other way round.
 */
static void fork_unlock_devices(struct registry *r, size_t n)
{
	while (n-- > 0)
		if (r->slot[n])
			pthread_mutex_unlock(&r->slot[n]->lock);
}

static void fork_prepare(void)
{
	for (;;) {
		struct registry *r;
		size_t i;

		pthread_mutex_lock(&registry_lock);
		r = registry;
		for (i = 0; r && i < registry_hi; i++)
			if (r->slot[i] &&
			    pthread_mutex_trylock(&r->slot[i]->lock))
				break;
		if (!r || i == registry_hi)
			return;
		fork_unlock_devices(r, i);
		pthread_mutex_unlock(&registry_lock);
		sched_yield();
	}
}

static void fork_release(void)
{
	if (registry)
		fork_unlock_devices(registry, registry_hi);
	pthread_mutex_unlock(&registry_lock);
}

__attribute__((constructor)) static void fork_handlers(void)
{
	if (pthread_atfork(fork_prepare, fork_release, fork_release))
		mrmgr__warn("sim: pthread_atfork failed: a fork while another "
			    "thread uses a device can leave the child waiting");
}

int mrmgr__sim_is_context(const struct ibv_context *ctx)
{
	return registry_find(ctx) != NULL;
}

struct mrmgr__sim_ctx *mrmgr__sim_ctx_find(const struct ibv_context *ctx)
{
	return registry_find(ctx);
}

struct mrmgr__sim_ctx *mrmgr__sim_ctx_get(struct ibv_context *ctx)
{
	struct mrmgr__sim_ctx *sctx = registry_find(ctx);

	if (!sctx)
		mrmgr__warn("sim: %p is not an open simulated device", (void *)ctx);
	return sctx;
}
