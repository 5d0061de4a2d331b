/*
 * What both ends' sharing fuzz targets need: a quiet log handler and a
 * count of the descriptors a peer can leave behind.
 *
 * SPDX-License-Identifier: MIT
 */
#ifndef MRMGR_FUZZ_SHARE_FUZZ_H
#define MRMGR_FUZZ_SHARE_FUZZ_H

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <mrmgr/mrmgr.h>

static void quiet(enum mrmgr_log_level level, const char *msg, void *arg)
{
	(void)level;
	(void)msg;
	(void)arg;
}

/*
 * Descriptors of the kinds a peer can send or the sharing code opens
 * (sockets, memfds, /dev/null, which this target sends), counted in
 * /proc/self/fd. Others are left out: the sanitizers' symbolizer opens
 * pipes of its own at any time.
 */
static int count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	int n = 0;

	if (!d)
		abort();
	while ((e = readdir(d))) {
		char path[300], to[256] = "";

		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
		if (readlink(path, to, sizeof(to) - 1) < 0)
			continue;
		if (strncmp(to, "socket:", 7) && strncmp(to, "/memfd:", 7) &&
		    strcmp(to, "/dev/null"))
			continue;
		n++;
		if (getenv("FUZZ_SHARE_VERBOSE"))
			fprintf(stderr, " %s->%s", e->d_name, to);
	}
	if (getenv("FUZZ_SHARE_VERBOSE"))
		fprintf(stderr, "\n");
	closedir(d);
	return n;
}

#endif
