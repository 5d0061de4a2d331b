/*
 * dma-buf registration on the simulated HCA. A dma-buf here is any file
 * descriptor that can be mapped shared (a memfd; a udmabuf where
 * /dev/udmabuf exists): the sim maps [offset, +length) of it and
 * registers that mapping as it registers host memory, so the access
 * checks, the limits and fault injection (MRMGR_SIM_FAULT_*) are the
 * same; the MR keeps the mapping (a reference on the buffer, as a real
 * dma-buf attachment does) until it is deregistered. The rxe personality
 * refuses with EOPNOTSUPP, as rxe does.
 *
 * The MR's address is where the sim mapped the buffer, not the iova
 * asked for: the sim checks accesses by virtual address.
 *
 * SPDX-License-Identifier: MIT
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sim/sim_internal.h"

struct dmabuf_map {
	struct ibv_mr *mr;
	void *map;
	size_t len;
	struct dmabuf_map *next;
};

static pthread_mutex_t maps_lock = PTHREAD_MUTEX_INITIALIZER;
static struct dmabuf_map *maps;

int mrmgr__sim_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t offset,
			     size_t length, uint64_t iova, int fd, int access,
			     struct ibv_mr **mr)
{
	struct mrmgr__sim_pd *spd = mrmgr__sim_pd_get(pd);
	long psz = sysconf(_SC_PAGESIZE);
	uint64_t start, end;
	struct dmabuf_map *m;
	struct stat st;
	void *p;
	int ret;

	(void)iova;
	*mr = NULL;
	if (!spd)
		return EINVAL;
	if (spd->sctx->personality == MRMGR_SIM_RXE)
		return EOPNOTSUPP;
	if (fd < 0 || fstat(fd, &st) != 0)
		return EBADF;
	if (!length || offset + length < offset ||
	    (st.st_size > 0 && offset + length > (uint64_t)st.st_size))
		return EINVAL;
	start = offset & ~(uint64_t)(psz - 1);
	end = offset + length;
	m = calloc(1, sizeof(*m));
	if (!m)
		return ENOMEM;
	m->len = (size_t)(end - start);
	p = mmap(NULL, m->len, PROT_READ | PROT_WRITE, MAP_SHARED, fd,
		 (off_t)start);
	if (p == MAP_FAILED) {
		ret = errno == EACCES ? EACCES : EINVAL;
		free(m);
		return ret;
	}
	m->map = p;
	ret = mrmgr_sim_reg_mr(pd, (char *)p + (offset - start), length,
			       (unsigned int)access, mr);
	if (ret) {
		munmap(p, m->len);
		free(m);
		return ret;
	}
	m->mr = *mr;
	pthread_mutex_lock(&maps_lock);
	m->next = maps;
	maps = m;
	pthread_mutex_unlock(&maps_lock);
	return 0;
}

/* Every deregistration of the sim: a dma-buf MR's mapping goes with it,
 * after the MR (never while the device may still reach it). The mapping
 * leaves the list before the MR is deregistered: once it is, the MR's
 * memory may come back as another thread's new MR, whose mapping a
 * look-up by pointer afterwards would find (and unmap) instead. */
int mrmgr__sim_dereg_any(struct ibv_mr *mr)
{
	struct dmabuf_map **pp, *m = NULL;
	int ret;

	pthread_mutex_lock(&maps_lock);
	for (pp = &maps; *pp; pp = &(*pp)->next) {
		if ((*pp)->mr == mr) {
			m = *pp;
			*pp = m->next;
			break;
		}
	}
	pthread_mutex_unlock(&maps_lock);
	ret = mrmgr_sim_dereg_mr(mr);
	if (ret) {
		if (m) { /* still registered: its mapping stays listed */
			pthread_mutex_lock(&maps_lock);
			m->next = maps;
			maps = m;
			pthread_mutex_unlock(&maps_lock);
		}
		return ret;
	}
	if (m) {
		munmap(m->map, m->len);
		free(m);
	}
	return 0;
}
