/*
 * mrmgr_perftest --plot: the registration curve (median with min..max
 * bars, log-log) and the per-message/cached comparison (messages/s,
 * registrations on the bars), drawn by gnuplot into a PNG. The data goes
 * to a temporary directory that is removed afterwards. Without gnuplot
 * the tool says so and draws nothing.
 *
 * SPDX-License-Identifier: MIT
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "perftest.h"

static const char *const series[] = { "reg-pinned", "dereg-pinned", "reg-odp",
				      "dereg-odp" };

/* One block per series present; which ones in @have. */
static int write_data(const char *dir, int *have)
{
	const struct pt_row *r;
	size_t n = pt_rows(&r);
	char path[512];
	FILE *f;
	int block = 0;

	snprintf(path, sizeof(path), "%s/curve.dat", dir);
	if (!(f = fopen(path, "w")))
		return errno;
	for (size_t s = 0; s < 4; s++) {
		have[s] = 0;
		for (size_t i = 0; i < n; i++) {
			if (strcmp(r[i].section, "curve") || strcmp(r[i].name, series[s]) ||
			    r[i].status != PT_OK)
				continue;
			if (!have[s] && block++)
				fprintf(f, "\n\n");
			have[s] = block;
			fprintf(f, "%" PRIu64 " %.3f %.3f %.3f\n", r[i].size,
				r[i].median_us, r[i].min_us, r[i].max_us);
		}
	}
	fclose(f);
	snprintf(path, sizeof(path), "%s/loop.dat", dir);
	if (!(f = fopen(path, "w")))
		return errno;
	for (size_t i = 0; i < n; i++)
		if (!strcmp(r[i].section, "loop") && r[i].status == PT_OK)
			fprintf(f, "\"%s\" %.1f \"%" PRId64 " registrations\"\n",
				r[i].name, r[i].rate, r[i].registrations);
	fclose(f);
	return 0;
}

/* The largest size drawn. */
static uint64_t max_size(const int *have)
{
	const struct pt_row *r;
	size_t n = pt_rows(&r);
	uint64_t m = 4096;

	(void)have;
	for (size_t i = 0; i < n; i++)
		if (!strcmp(r[i].section, "curve") && r[i].status == PT_OK &&
		    r[i].size > m)
			m = r[i].size;
	return m;
}

static int write_script(const char *dir, const char *png, const char *title,
			const int *have)
{
	char path[512];
	FILE *f;
	int first = 1;

	snprintf(path, sizeof(path), "%s/plot.gp", dir);
	if (!(f = fopen(path, "w")))
		return errno;
	fprintf(f, "set terminal pngcairo noenhanced size 1200,480 font ',10'\n"
		   "set output '%s'\n"
		   "set multiplot layout 1,2 title 'mrmgr_perftest on %s (libmrmgr %s)'\n"
		   "set title 'Registration cost: median, bars min..max'\n"
		   "set logscale xy\nset grid\nset key top left\n"
		   "set xlabel 'bytes registered'\nset ylabel 'microseconds'\n"
		   "set xtics (", png, title, mrmgr_version_string());
	/* A tic every fourfold, named as the table names sizes. */
	for (uint64_t s = 4096; s <= (UINT64_C(1) << 40); s *= 4) {
		char b[32];

		fprintf(f, "%s'%s' %" PRIu64, s == 4096 ? "" : ", ",
			pt_size(s, b, sizeof(b)), s);
	}
	fprintf(f, ")\nset xrange [2048:%" PRIu64 "]\nplot ", max_size(have) * 2);
	for (int s = 0; s < 4; s++) {
		if (!have[s])
			continue;
		fprintf(f, "%s'%s/curve.dat' index %d using 1:2:3:4 with yerrorlines "
			"title '%s'", first ? "" : ", ", dir, have[s] - 1, series[s]);
		first = 0;
	}
	if (first)
		fprintf(f, "1/0 title 'no registration rows'");
	fprintf(f, "\nunset logscale\nunset format\nset format x '%%g'\n"
		   "set title 'Message loop: messages/s (registrations on the bars)'\n"
		   "set xlabel ''\nset ylabel 'messages/s'\nset yrange [0:*]\n"
		   "set xrange [-0.6:1.6]\nset style fill solid 0.5\nset boxwidth 0.6\n"
		   "set key off\n"
		   "plot '%s/loop.dat' using 0:2:xtic(1) with boxes, "
		   "'' using 0:2:3 with labels offset 0,1\n"
		   "unset multiplot\n", dir);
	return fclose(f) ? errno : 0;
}

int pt_plot(const char *png, const char *title)
{
	char dir[] = "/tmp/mrmgr_perftest.XXXXXX", script[512] = "", cmd[1200];
	int have[4], ret, st;
	pid_t pid;

	if (strchr(png, '\'') || strchr(title, '\'')) {
		fprintf(stderr, "mrmgr_perftest: --plot %s: a name with a quote\n", png);
		return EINVAL;
	}
	if (!mkdtemp(dir))
		return errno;
	if ((ret = write_data(dir, have)) || (ret = write_script(dir, png, title, have)))
		goto out;
	snprintf(script, sizeof(script), "%s/plot.gp", dir);
	pid = fork();
	if (pid < 0) {
		ret = errno;
		goto out;
	}
	if (!pid) {
		execlp("gnuplot", "gnuplot", script, (char *)NULL);
		_exit(errno == ENOENT ? 127 : 126);
	}
	while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
		;
	if (WIFEXITED(st) && WEXITSTATUS(st) == 127) {
		fprintf(stderr, "mrmgr_perftest: --plot: gnuplot is not installed: "
			"no picture drawn (the CSV and JSON hold the same rows)\n");
		ret = ENOENT;
	} else if (!WIFEXITED(st) || WEXITSTATUS(st)) {
		fprintf(stderr, "mrmgr_perftest: --plot: gnuplot failed on %s\n", script);
		ret = EIO;
	}
out:
	snprintf(cmd, sizeof(cmd), "%s/curve.dat", dir);
	unlink(cmd);
	snprintf(cmd, sizeof(cmd), "%s/loop.dat", dir);
	unlink(cmd);
	snprintf(cmd, sizeof(cmd), "%s/plot.gp", dir);
	unlink(cmd);
	rmdir(dir);
	return ret;
}
