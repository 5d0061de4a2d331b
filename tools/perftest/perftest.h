/*
 * mrmgr_perftest(1): what registration costs on a device and what the
 * cache saves there. Shared declarations of the tool's files:
 *   main.c    options, the header of what it ran on, the run, SIGINT
 *   dev.c     opening the device; reg/dereg/rereg/advise on libibverbs
 *             or the simulated HCA; every live MR tracked for cleanup;
 *             timing and progress
 *   curve.c   the registration cost curve (pinned, ODP)
 *   seeds.c   ibv_rereg_mr by flag and ibv_advise_mr rows
 *   loop.c    the demo's workload per message and through a cache; the
 *             cost of a hit and of a miss
 *   output.c  the rows: table, CSV, JSON, gnuplot picture
 *
 * SPDX-License-Identifier: MIT
 */
#ifndef MRMGR_PERFTEST_H
#define MRMGR_PERFTEST_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <infiniband/verbs.h>
#include <mrmgr/mrmgr.h>

#define PT_ACCESS (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | \
		   IBV_ACCESS_REMOTE_WRITE)

/* ------------------------------------------------------------ device */

struct pt_dev {
	char name[64];
	int sim;                 /* the simulated HCA (mrmgr_sim_*) */
	struct ibv_context *ctx;
	struct ibv_pd *pd, *pd2; /* pd2: the target of PD reregs (may be NULL) */
	struct ibv_device_attr attr;
	uint64_t max_mr_size;
	int odp;                 /* explicit ODP (IBV_ODP_SUPPORT) */
	int rereg;               /* 1 works, 0 unsupported, -errno probe failed */
	int rereg_err;           /* what the probe got when it is not 1 */
};

/* Opens @name (NULL: the first device), or the simulated HCA (@sim 1:
 * mlx5 personality, 2: rxe). On failure writes one line to @err. */
int pt_dev_open(struct pt_dev *d, const char *name, int sim, char *err,
		size_t errlen);
void pt_dev_close(struct pt_dev *d);
/* 0 or an errno; the MR is tracked until pt_dereg(). */
int pt_reg(struct pt_dev *d, struct ibv_pd *pd, void *addr, size_t len,
	   int access, struct ibv_mr **mr);
int pt_dereg(struct pt_dev *d, struct ibv_mr *mr);
/* 0 or a positive errno (the rereg code is dropped: on failure the MR is
 * deregistered by the caller, which rdma-core allows for every code). */
int pt_rereg(struct pt_dev *d, struct ibv_mr *mr, int flags,
	     struct ibv_pd *pd, void *addr, size_t len, int access);
int pt_advise(struct pt_dev *d, enum ibv_advise_mr_advice advice,
	      uint32_t flags, struct ibv_sge *sge);
/* Touches one byte per page of [addr, addr+len) through the device
 * (the simulated HCA only: ENOTSUP elsewhere). */
int pt_device_touch(struct pt_dev *d, struct ibv_mr *mr, void *addr,
		    size_t len);
/* Deregisters every tracked MR; returns how many. */
unsigned int pt_dereg_all(struct pt_dev *d);
/* MRs and pinned bytes the device holds now: the simulated HCA's own
 * count; elsewhere what this tool has registered and not deregistered
 * (pinned -1: unknown). */
void pt_dev_live(struct pt_dev *d, uint64_t *mrs, int64_t *pinned);

/* ------------------------------------------------------------ run state */

extern volatile sig_atomic_t pt_stop; /* SIGINT/SIGTERM seen */

/* A point where something is registered: the test hook
 * MRMGR_PERFTEST_TEST_SIGINT=PHASE:N raises SIGINT at PHASE's Nth. */
void pt_checkpoint(const char *phase);

struct pt_opts {
	const char *device;
	int sim;
	uint64_t max;            /* --max bytes */
	uint64_t limit;          /* what the run may use: --max, memlock, RAM */
	char limit_why[128];     /* which of those bound it */
	unsigned int runs;
	long messages;
	const char *csv, *json, *plot;
	int no_curve, no_seeds, no_loop;
};

uint64_t pt_now_ns(void);
/* Starts a phase: later pt_progress() calls print (at most one a second)
 * once the phase has run for a second. */
void pt_phase(const char *name);
void pt_progress(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void pt_progress_end(void);
/* "4KiB", "64MiB", "1GiB" */
const char *pt_size(uint64_t v, char *buf, size_t len);

/* ------------------------------------------------------------ rows */

enum pt_status { PT_OK, PT_SKIPPED, PT_UNSUPPORTED, PT_NOT_MEASURED };

struct pt_row {
	char section[16];   /* curve, rereg, advise, loop, cache */
	char name[32];
	uint64_t size;      /* bytes; 0: not applicable */
	unsigned int runs;  /* samples */
	double median_us, min_us, max_us; /* < 0: none */
	double rate;        /* < 0: none */
	char unit[16];      /* of rate */
	int64_t registrations; /* < 0: none */
	int64_t pinned;     /* bytes; < 0: none */
	enum pt_status status;
	char note[200];
};

/* A new row (zero, no numbers) appended; NULL when out of memory. */
struct pt_row *pt_row_add(const char *section, const char *name,
			  uint64_t size);
/* median, min, max of @n samples in ns, into the row's µs fields */
void pt_row_samples(struct pt_row *r, uint64_t *ns, unsigned int n);
void pt_row_skip(const char *section, const char *name, uint64_t size,
		 enum pt_status st, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));
size_t pt_rows(const struct pt_row **rows);
void pt_rows_free(void);

void pt_print_table(FILE *f);
int pt_write_csv(const char *path);
int pt_write_json(const char *path, const char *header_json);
/* 0 drawn; ENOENT gnuplot missing (said on stderr); else an errno */
int pt_plot(const char *path, const char *title);

/* ------------------------------------------------------------ measurements */

int pt_curve(struct pt_dev *d, const struct pt_opts *o);
int pt_seeds(struct pt_dev *d, const struct pt_opts *o);
int pt_loop(struct pt_dev *d, const struct pt_opts *o);
/* The dma-buf cache's miss and hit rows (dmabuf.c); 0 also when the
 * device cannot register dma-bufs (the row says unsupported). */
int pt_dmabuf(struct pt_dev *d, const struct pt_opts *o);
/* The cache the loop has open and the region it holds, for cleanup. */
extern mrmgr_cache_t *pt_live_cache;
extern mrmgr_region_t *pt_live_region;

#endif
