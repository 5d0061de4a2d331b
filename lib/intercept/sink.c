/*
 * The sink the engine reports to (intercept.h): no-ops until its user
 * binds one, so nothing the engine does before then reaches anything.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include "intercept.h"

static void none(uint64_t start, uint64_t last)
{
	(void)start;
	(void)last;
}

static uint64_t no_tail(void)
{
	return 0;
}

static int never(uint64_t from, uint64_t start, uint64_t last)
{
	(void)from;
	(void)start;
	(void)last;
	return 0;
}

struct mrmgr__icpt_sink mrmgr__icpt = {
	.begin = none, .end = none, .push = none, .filter_add = none,
	.tail = no_tail, .saw = never,
};

void mrmgr__icpt_bind(const struct mrmgr__icpt_sink *sink)
{
	mrmgr__icpt = *sink;
}
