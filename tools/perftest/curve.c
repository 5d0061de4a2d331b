/*
 * mrmgr_perftest: the registration cost curve. ibv_reg_mr and
 * ibv_dereg_mr of 4 KiB, 8 KiB, ... --max of memory touched beforehand
 * (so the figure is the device's and the kernel's pinning, not page
 * faults), each size --runs times: median, min and max, pages/s. Pinned,
 * then explicit ODP where the device has it.
 *
 * SPDX-License-Identifier: MIT
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "perftest.h"

/* One size, one mode: 0, EINTR when stopped, or the registration's errno
 * (the row then says it). */
static int one_size(struct pt_dev *d, const struct pt_opts *o, char *buf,
		    size_t size, int odp, uint64_t *reg, uint64_t *dereg)
{
	int access = odp ? IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ON_DEMAND : PT_ACCESS;
	char b[32];
	int ret;

	for (unsigned int r = 0; r < o->runs; r++) {
		struct ibv_mr *mr;
		uint64_t t0, t1, t2;

		pt_progress("%s %s, run %u of %u", odp ? "ODP" : "pinned",
			    pt_size(size, b, sizeof(b)), r + 1, o->runs);
		t0 = pt_now_ns();
		ret = pt_reg(d, d->pd, buf, size, access, &mr);
		t1 = pt_now_ns();
		if (ret)
			return ret;
		pt_checkpoint("curve");
		if (pt_stop)
			return EINTR; /* the MR stays tracked: main deregisters */
		ret = pt_dereg(d, mr);
		t2 = pt_now_ns();
		if (ret)
			return ret;
		reg[r] = t1 - t0;
		dereg[r] = t2 - t1;
		if (pt_stop)
			return EINTR;
	}
	return 0;
}

static int curve(struct pt_dev *d, const struct pt_opts *o, int odp)
{
	const char *mode = odp ? "odp" : "pinned";
	uint64_t *reg = calloc(o->runs, sizeof(*reg));
	uint64_t *dereg = calloc(o->runs, sizeof(*dereg));
	size_t psz = (size_t)sysconf(_SC_PAGESIZE);
	char name[32], dname[32], b[32];
	int failed = 0, ret = 0;

	if (!reg || !dereg) {
		free(reg);
		free(dereg);
		return 1;
	}
	snprintf(name, sizeof(name), "reg-%s", mode);
	snprintf(dname, sizeof(dname), "dereg-%s", mode);
	for (uint64_t size = 4096; size <= o->max && !pt_stop; size *= 2) {
		struct pt_row *r;
		char *buf;

		if (failed) {
			pt_row_skip("curve", name, size, PT_SKIPPED,
				    "not tried: a smaller size failed");
			continue;
		}
		if (size > o->limit) {
			pt_row_skip("curve", name, size, PT_SKIPPED,
				    "over %s", o->limit_why);
			continue;
		}
		if (size > d->max_mr_size) {
			pt_row_skip("curve", name, size, PT_SKIPPED,
				    "over the device's max_mr_size");
			continue;
		}
		buf = mmap(NULL, size, PROT_READ | PROT_WRITE,
			   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (buf == MAP_FAILED) {
			pt_row_skip("curve", name, size, PT_SKIPPED,
				    "mmap: %s", strerror(errno));
			failed = 1;
			continue;
		}
		memset(buf, 1, size);
		ret = one_size(d, o, buf, size, odp, reg, dereg);
		munmap(buf, size);
		if (ret == EINTR)
			break;
		if (ret) {
			pt_row_skip("curve", name, size, PT_SKIPPED,
				    "ibv_reg_mr of %s: %s", pt_size(size, b, sizeof(b)),
				    strerror(ret));
			failed = 1;
			ret = 0;
			continue;
		}
		if (!(r = pt_row_add("curve", name, size)))
			return 1;
		pt_row_samples(r, reg, o->runs);
		r->rate = (double)(size / psz) / (r->median_us / 1e6);
		snprintf(r->unit, sizeof(r->unit), "pages/s");
		if (!(r = pt_row_add("curve", dname, size)))
			return 1;
		pt_row_samples(r, dereg, o->runs);
	}
	free(reg);
	free(dereg);
	return 0;
}

int pt_curve(struct pt_dev *d, const struct pt_opts *o)
{
	int ret;

	pt_phase("registration curve");
	ret = curve(d, o, 0);
	if (ret || pt_stop)
		return ret;
	if (!d->odp) {
		pt_row_skip("curve", "reg-odp", 0, PT_UNSUPPORTED,
			    "the device has no ODP (odp_caps.general_caps "
			    "lacks IBV_ODP_SUPPORT)");
		return 0;
	}
	return curve(d, o, 1);
}
