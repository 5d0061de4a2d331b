/*
 * mrmgr_perftest: what the verbs behind libmrmgr's growth and prefetch
 * cost here. ibv_rereg_mr by flag (translation, access, PD) against
 * ibv_dereg_mr + ibv_reg_mr of the same size, when the device can rereg
 * (learnt as the library learns it: an access rereg of a scratch MR);
 * ibv_advise_mr PREFETCH and PREFETCH_WRITE, with and without FLUSH,
 * against first-touch faults, when the device has ODP. Each run on a
 * fresh MR, so a prefetch always has pages to bring in.
 *
 * SPDX-License-Identifier: MIT
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "perftest.h"

static const uint64_t sizes[] = { 4096, 65536, 1u << 20, 16u << 20 };
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))

enum op { REREG_TRANSLATION, REREG_ACCESS, REREG_PD, DEREG_REG,
	  ADV_PREFETCH, ADV_PREFETCH_FLUSH, ADV_WRITE, ADV_WRITE_FLUSH,
	  FIRST_TOUCH };

static const char *const op_name[] = {
	"translation", "access", "pd", "dereg+reg", "prefetch",
	"prefetch+flush", "prefetch_write", "prefetch_write+flush",
	"first-touch",
};

/* One timed operation on a fresh MR over @a (@b: the other buffer). 0,
 * EINTR, or the errno of the timed call (of set-up: -errno). */
static int run_once(struct pt_dev *d, enum op op, char *a, char *b,
		    size_t size, uint64_t *ns)
{
	int odp = op >= ADV_PREFETCH;
	int access = odp ? PT_ACCESS | IBV_ACCESS_ON_DEMAND : PT_ACCESS;
	struct ibv_sge sge = { .addr = (uintptr_t)a, .length = (uint32_t)size };
	struct ibv_mr *mr, *mr2 = NULL;
	uint64_t t0;
	int ret;

	if ((ret = pt_reg(d, d->pd, a, size, access, &mr)))
		return -ret;
	sge.lkey = mr->lkey;
	pt_checkpoint("seeds");
	if (pt_stop)
		return EINTR;
	t0 = pt_now_ns();
	switch (op) {
	case REREG_TRANSLATION:
		ret = pt_rereg(d, mr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, b,
			       size, 0);
		break;
	case REREG_ACCESS:
		ret = pt_rereg(d, mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0,
			       IBV_ACCESS_LOCAL_WRITE);
		break;
	case REREG_PD:
		ret = pt_rereg(d, mr, IBV_REREG_MR_CHANGE_PD, d->pd2, NULL, 0, 0);
		break;
	case DEREG_REG:
		if (!(ret = pt_dereg(d, mr))) {
			mr = NULL;
			if ((ret = pt_reg(d, d->pd, b, size, access, &mr2)))
				mr2 = NULL;
		}
		break;
	case ADV_PREFETCH:
	case ADV_PREFETCH_FLUSH:
		ret = pt_advise(d, IBV_ADVISE_MR_ADVICE_PREFETCH,
				op == ADV_PREFETCH_FLUSH ? IBV_ADVISE_MR_FLAG_FLUSH : 0,
				&sge);
		break;
	case ADV_WRITE:
	case ADV_WRITE_FLUSH:
		ret = pt_advise(d, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE,
				op == ADV_WRITE_FLUSH ? IBV_ADVISE_MR_FLAG_FLUSH : 0,
				&sge);
		break;
	case FIRST_TOUCH:
		ret = pt_device_touch(d, mr, a, size);
		break;
	}
	*ns = pt_now_ns() - t0;
	/* rdma-core: after a failed rereg the MR can still be deregistered,
	 * whatever the code. */
	if (mr)
		pt_dereg(d, mr);
	if (mr2)
		pt_dereg(d, mr2);
	return ret;
}

static int supported_err(int err)
{
	return err != EOPNOTSUPP && err != ENOSYS && err != ENOTSUP;
}

/* Every size of @op: rows. Returns EINTR when stopped. */
static int measure(struct pt_dev *d, const struct pt_opts *o, const char *section,
		   enum op op, uint64_t *ns)
{
	char sz[32];

	for (size_t i = 0; i < NSIZES && !pt_stop; i++) {
		size_t size = sizes[i];
		struct pt_row *r;
		char *a, *b;
		int ret = 0;

		/* Two buffers, and pinned both during a translation rereg. */
		if (2 * size > o->limit || size > o->max) {
			pt_row_skip(section, op_name[op], size, PT_SKIPPED,
				    "twice the size is over %s", o->limit_why);
			continue;
		}
		a = mmap(NULL, 2 * size, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (a == MAP_FAILED)
			return ENOMEM;
		b = a + size;
		if (op < ADV_PREFETCH)
			memset(a, 1, 2 * size);
		else
			memset(a, 1, size); /* present in the process, not the device */
		for (unsigned int k = 0; k < o->runs && !ret; k++) {
			pt_progress("%s %s, run %u of %u", op_name[op],
				    pt_size(size, sz, sizeof(sz)), k + 1, o->runs);
			ret = run_once(d, op, a, b, size, &ns[k]);
		}
		munmap(a, 2 * size);
		if (ret == EINTR)
			return EINTR;
		if (ret < 0) {
			pt_row_skip(section, op_name[op], size, PT_SKIPPED,
				    "ibv_reg_mr: %s", strerror(-ret));
			continue;
		}
		if (ret) {
			pt_row_skip(section, op_name[op], 0,
				    supported_err(ret) ? PT_SKIPPED : PT_UNSUPPORTED,
				    "%s: %s", op == FIRST_TOUCH ? "device access" : section,
				    strerror(ret));
			return 0; /* the same for every size */
		}
		if (!(r = pt_row_add(section, op_name[op], size)))
			return ENOMEM;
		pt_row_samples(r, ns, o->runs);
	}
	return 0;
}

static int rereg_rows(struct pt_dev *d, const struct pt_opts *o, uint64_t *ns)
{
	int ret;

	if (d->rereg != 1) {
		for (enum op op = REREG_TRANSLATION; op <= REREG_PD; op++)
			pt_row_skip("rereg", op_name[op], 0,
				    d->rereg == 0 ? PT_UNSUPPORTED : PT_SKIPPED,
				    "%s: ibv_rereg_mr said %s (an access rereg of a "
				    "scratch MR, the library's probe); growth "
				    "registers anew",
				    d->rereg == 0 ? "not supported" : "probe failed",
				    strerror(d->rereg_err));
	} else {
		for (enum op op = REREG_TRANSLATION; op <= REREG_PD; op++) {
			if (op == REREG_PD && !d->pd2) {
				pt_row_skip("rereg", "pd", 0, PT_SKIPPED,
					    "no second PD could be allocated");
				continue;
			}
			if ((ret = measure(d, o, "rereg", op, ns)))
				return ret;
		}
	}
	return measure(d, o, "rereg", DEREG_REG, ns);
}

static int advise_rows(struct pt_dev *d, const struct pt_opts *o, uint64_t *ns)
{
	int ret;

	if (!d->odp) {
		pt_row_skip("advise", "prefetch", 0, PT_UNSUPPORTED,
			    "the device has no ODP: ibv_advise_mr needs ODP MRs "
			    "(mrmgr_prefetch is a counted no-op here)");
		return 0;
	}
	for (enum op op = ADV_PREFETCH; op <= ADV_WRITE_FLUSH; op++)
		if ((ret = measure(d, o, "advise", op, ns)))
			return ret;
	if (!d->sim) {
		pt_row_skip("advise", "first-touch", 0, PT_NOT_MEASURED,
			    "first-touch faults need an RDMA operation on a QP; "
			    "this version measures them on the simulated HCA only");
		return 0;
	}
	return measure(d, o, "advise", FIRST_TOUCH, ns);
}

int pt_seeds(struct pt_dev *d, const struct pt_opts *o)
{
	uint64_t *ns = calloc(o->runs, sizeof(*ns));
	int ret;

	if (!ns)
		return 1;
	pt_phase("rereg");
	ret = rereg_rows(d, o, ns);
	if (!ret) {
		pt_phase("advise");
		ret = advise_rows(d, o, ns);
	}
	free(ns);
	return ret && ret != EINTR;
}
