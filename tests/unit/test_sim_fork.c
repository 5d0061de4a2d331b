/*
 * A fork while another thread uses the simulated device: a child that
 * uses its parent's device (doc/sharing.md) must not inherit the
 * device's lock held by a thread that does not exist there. An
 * outsider's two-thread program hung that way in 3 runs of 3; without
 * the device's fork handlers (sim/sim.c) this program's child hangs
 * within the first forks. A plain program, not a Criterion suite: the
 * runner's own threads would be in the fork too.
 *
 * Exit status: 0 passed, 1 a child hung (killed by its alarm) or failed.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <mrmgr/sim.h>

#define LEN (1 << 16)
#define FORKS 50

static struct ibv_pd *pd;
static char *buf;
static volatile int stop;
static unsigned long errors;

/* A write holds the device's lock while it copies (sim_access.c). */
static void *writer(void *arg)
{
	static char src[LEN];
	struct ibv_mr *mr = NULL;

	(void)arg;
	if (mrmgr_sim_reg_mr(pd, buf, LEN, IBV_ACCESS_LOCAL_WRITE |
			     IBV_ACCESS_REMOTE_WRITE, &mr)) {
		errors++;
		return NULL;
	}
	/* ESTALE once a fork shared the pages: the device holds pages as
	 * kernels before 5.9 did (doc/monitor.md, "fork()"). Not counted. */
	while (!stop)
		(void)mrmgr_sim_write(pd, mr->rkey, (uintptr_t)buf, src, LEN);
	if (mrmgr_sim_dereg_mr(mr))
		errors++;
	return NULL;
}

/* The child: register, write through the key, read it back, exit. */
static int child(void)
{
	char *c = mmap(NULL, LEN, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	struct ibv_mr *mr = NULL;
	char b = 'w';

	/* A hang is forever; 60 s only keeps a loaded machine (an ASan
	 * build beside other suites) from passing for one. */
	alarm(60);
	if (c == MAP_FAILED)
		return 2;
	memset(c, 'm', LEN);
	if (mrmgr_sim_reg_mr(pd, c, LEN, IBV_ACCESS_LOCAL_WRITE |
			     IBV_ACCESS_REMOTE_WRITE, &mr))
		return 3;
	if (mrmgr_sim_write(pd, mr->rkey, (uintptr_t)c + 7, &b, 1) ||
	    c[7] != 'w')
		return 4;
	return mrmgr_sim_dereg_mr(mr) ? 5 : 0;
}

int main(void)
{
	struct ibv_context *ctx;
	pthread_t t;
	int bad = 0;

	if (mrmgr_sim_open(NULL, &ctx) || mrmgr_sim_alloc_pd(ctx, &pd))
		return 1;
	buf = mmap(NULL, LEN, PROT_READ | PROT_WRITE,
		   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (buf == MAP_FAILED || pthread_create(&t, NULL, writer, NULL))
		return 1;
	for (int i = 0; i < FORKS && !bad; i++) {
		pid_t k = fork();
		int st;

		if (k < 0)
			return 1;
		if (k == 0)
			_exit(child());
		if (waitpid(k, &st, 0) != k)
			return 1;
		if (WIFSIGNALED(st) && WTERMSIG(st) == SIGALRM) {
			printf("FAIL: child %d hung on the device's lock\n", i);
			bad = 1;
		} else if (!WIFEXITED(st) || WEXITSTATUS(st)) {
			printf("FAIL: child %d: status %#x\n", i, st);
			bad = 1;
		}
	}
	stop = 1;
	pthread_join(t, NULL);
	if (errors) {
		printf("FAIL: the writer could not register or deregister\n");
		bad = 1;
	}
	munmap(buf, LEN);
	if (mrmgr_sim_dealloc_pd(pd) || mrmgr_sim_close(ctx))
		bad = 1;
	if (!bad)
		printf("ok: %d forks while another thread wrote\n", FORKS);
	return bad;
}
