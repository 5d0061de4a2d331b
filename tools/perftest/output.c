/*
 * mrmgr_perftest: the rows, and the four ways they leave: the table on
 * stdout, CSV, JSON, and a picture drawn by gnuplot. Every number is
 * formatted by the same functions for all of them, so a program can
 * check that the table and the files agree.
 *
 * SPDX-License-Identifier: MIT
 */
#define _GNU_SOURCE
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "perftest.h"

static struct pt_row *rows;
static size_t nrows, caprows;

static const char *const status_name[] = { "ok", "skipped", "unsupported",
					   "not-measured" };

struct pt_row *pt_row_add(const char *section, const char *name, uint64_t size)
{
	struct pt_row *r;

	if (nrows == caprows) {
		size_t n = caprows ? caprows * 2 : 64;
		struct pt_row *p = realloc(rows, n * sizeof(*p));

		if (!p)
			return NULL;
		rows = p;
		caprows = n;
	}
	r = &rows[nrows++];
	memset(r, 0, sizeof(*r));
	snprintf(r->section, sizeof(r->section), "%s", section);
	snprintf(r->name, sizeof(r->name), "%s", name);
	r->size = size;
	r->median_us = r->min_us = r->max_us = r->rate = -1;
	r->registrations = r->pinned = -1;
	return r;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

void pt_row_samples(struct pt_row *r, uint64_t *ns, unsigned int n)
{
	qsort(ns, n, sizeof(*ns), cmp_u64);
	r->runs = n;
	r->min_us = (double)ns[0] / 1e3;
	r->max_us = (double)ns[n - 1] / 1e3;
	r->median_us = (n % 2 ? (double)ns[n / 2]
			      : ((double)ns[n / 2 - 1] + (double)ns[n / 2]) / 2) / 1e3;
}

void pt_row_skip(const char *section, const char *name, uint64_t size,
		 enum pt_status st, const char *fmt, ...)
{
	struct pt_row *r = pt_row_add(section, name, size);
	va_list ap;

	if (!r)
		return;
	r->status = st;
	va_start(ap, fmt);
	vsnprintf(r->note, sizeof(r->note), fmt, ap);
	va_end(ap);
}

size_t pt_rows(const struct pt_row **out)
{
	*out = rows;
	return nrows;
}

void pt_rows_free(void)
{
	free(rows);
	rows = NULL;
	nrows = caprows = 0;
}

/* The shared formats: "-" (table, CSV) or null (JSON) for none. */
static const char *f_us(double v, char *b, size_t n, const char *none)
{
	if (v < 0)
		return none;
	snprintf(b, n, "%.2f", v);
	return b;
}

static const char *f_rate(double v, char *b, size_t n, const char *none)
{
	if (v < 0)
		return none;
	snprintf(b, n, "%.0f", v);
	return b;
}

static const char *f_int(int64_t v, char *b, size_t n, const char *none)
{
	if (v < 0)
		return none;
	snprintf(b, n, "%" PRId64, v);
	return b;
}

static const char *const titles[][2] = {
	{ "curve", "Registration cost curve: ibv_reg_mr / ibv_dereg_mr of touched memory, µs" },
	{ "rereg", "ibv_rereg_mr by flag against ibv_dereg_mr + ibv_reg_mr, µs" },
	{ "advise", "ibv_advise_mr on a fresh ODP MR against first-touch faults, µs" },
	{ "loop", "The demo's workload: registering every message against libmrmgr's cache (default configuration); µs per message" },
	{ "cache", "A miss and a hit in libmrmgr's cache, µs" },
};

void pt_print_table(FILE *f)
{
	char b[7][40];

	for (size_t t = 0; t < sizeof(titles) / sizeof(titles[0]); t++) {
		int shown = 0;

		for (size_t i = 0; i < nrows; i++) {
			const struct pt_row *r = &rows[i];

			if (strcmp(r->section, titles[t][0]))
				continue;
			if (!shown++)
				fprintf(f, "\n%s\n%-7s %-21s %7s %6s %10s %10s %10s %12s %-8s %8s %10s %-12s %s\n",
					titles[t][1], "section", "name", "size", "runs",
					"median", "min", "max", "rate", "unit",
					"regs", "pinned", "status", "note");
			fprintf(f, "%-7s %-21s %7s %6u %10s %10s %10s %12s %-8s %8s %10s %-12s %s\n",
				r->section, r->name,
				r->size ? pt_size(r->size, b[0], sizeof(b[0])) : "-",
				r->runs, f_us(r->median_us, b[1], sizeof(b[1]), "-"),
				f_us(r->min_us, b[2], sizeof(b[2]), "-"),
				f_us(r->max_us, b[3], sizeof(b[3]), "-"),
				f_rate(r->rate, b[4], sizeof(b[4]), "-"),
				r->unit[0] ? r->unit : "-",
				f_int(r->registrations, b[5], sizeof(b[5]), "-"),
				f_int(r->pinned, b[6], sizeof(b[6]), "-"),
				status_name[r->status], r->note);
		}
	}
}

static void csv_str(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s; s++) {
		if (*s == '"')
			fputc('"', f);
		fputc(*s, f);
	}
	fputc('"', f);
}

int pt_write_csv(const char *path)
{
	FILE *f = fopen(path, "w");
	char b[6][40];

	if (!f) {
		fprintf(stderr, "mrmgr_perftest: --csv %s: %s\n", path, strerror(errno));
		return errno;
	}
	fprintf(f, "section,name,size_bytes,runs,median_us,min_us,max_us,rate,unit,"
		   "registrations,pinned_bytes,status,note\n");
	for (size_t i = 0; i < nrows; i++) {
		const struct pt_row *r = &rows[i];

		fprintf(f, "%s,%s,%" PRIu64 ",%u,%s,%s,%s,%s,%s,%s,%s,%s,", r->section,
			r->name, r->size, r->runs,
			f_us(r->median_us, b[0], sizeof(b[0]), ""),
			f_us(r->min_us, b[1], sizeof(b[1]), ""),
			f_us(r->max_us, b[2], sizeof(b[2]), ""),
			f_rate(r->rate, b[3], sizeof(b[3]), ""), r->unit,
			f_int(r->registrations, b[4], sizeof(b[4]), ""),
			f_int(r->pinned, b[5], sizeof(b[5]), ""),
			status_name[r->status]);
		csv_str(f, r->note);
		fputc('\n', f);
	}
	return fclose(f) ? errno : 0;
}

static void json_str(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s; s++) {
		if (*s == '"' || *s == '\\')
			fputc('\\', f);
		if ((unsigned char)*s < 0x20)
			fprintf(f, "\\u%04x", *s);
		else
			fputc(*s, f);
	}
	fputc('"', f);
}

int pt_write_json(const char *path, const char *header)
{
	FILE *f = fopen(path, "w");
	char b[6][40];

	if (!f) {
		fprintf(stderr, "mrmgr_perftest: --json %s: %s\n", path, strerror(errno));
		return errno;
	}
	fprintf(f, "{%s,\n \"rows\": [", header);
	for (size_t i = 0; i < nrows; i++) {
		const struct pt_row *r = &rows[i];

		fprintf(f, "%s\n  {\"section\": \"%s\", \"name\": \"%s\", "
			"\"size_bytes\": %" PRIu64 ", \"runs\": %u, \"median_us\": %s, "
			"\"min_us\": %s, \"max_us\": %s, \"rate\": %s, \"unit\": \"%s\", "
			"\"registrations\": %s, \"pinned_bytes\": %s, \"status\": \"%s\", "
			"\"note\": ", i ? "," : "", r->section, r->name, r->size, r->runs,
			f_us(r->median_us, b[0], sizeof(b[0]), "null"),
			f_us(r->min_us, b[1], sizeof(b[1]), "null"),
			f_us(r->max_us, b[2], sizeof(b[2]), "null"),
			f_rate(r->rate, b[3], sizeof(b[3]), "null"), r->unit,
			f_int(r->registrations, b[4], sizeof(b[4]), "null"),
			f_int(r->pinned, b[5], sizeof(b[5]), "null"),
			status_name[r->status]);
		json_str(f, r->note);
		fputc('}', f);
	}
	fprintf(f, "\n ]\n}\n");
	return fclose(f) ? errno : 0;
}
