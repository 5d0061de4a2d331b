#!/usr/bin/env python3
"""Checks an mrmgr_perftest run: its table (stdout), CSV and JSON hold
the same rows, value for value, and what the run says holds.

perftest-check.py TABLE CSV JSON [--expect KEY ...]

KEY: cache-fewer   the cached loop registered less than the per-message one
     cache-faster  ... and did more messages/s
     rereg-unsupported  every rereg flag row says unsupported
     no-odp        the ODP curve and the advise rows say unsupported
     odp           ODP curve rows and advise rows were measured
Prints what is wrong and exits 1; 0 when all agrees."""
import csv
import json
import sys

FIELDS = ["section", "name", "size", "runs", "median", "min", "max", "rate",
          "unit", "regs", "pinned", "status"]
UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}


def size_bytes(tok):
    if tok == "-":
        return "0"
    for u in sorted(UNITS, key=len, reverse=True):
        if tok.endswith(u) and tok[:-len(u)].isdigit():
            return str(int(tok[:-len(u)]) * UNITS[u])
    raise ValueError("table size %r" % tok)


def table_rows(path):
    rows = []
    for line in open(path, encoding="utf-8"):
        tok = line.split()
        if len(tok) < 12 or tok[0] not in ("curve", "rereg", "advise", "loop", "cache"):
            continue
        r = dict(zip(FIELDS, tok[:12]))
        r["size"] = size_bytes(r["size"])
        rows.append(tuple("" if r[f] == "-" else r[f] for f in FIELDS))
    return rows


def csv_rows(path):
    rows = []
    with open(path, newline="", encoding="utf-8") as f:
        for r in csv.DictReader(f):
            rows.append((r["section"], r["name"], r["size_bytes"], r["runs"],
                         r["median_us"], r["min_us"], r["max_us"], r["rate"],
                         r["unit"], r["registrations"], r["pinned_bytes"],
                         r["status"]))
    return rows


def json_rows(path):
    doc = json.load(open(path, encoding="utf-8"))
    for k in ("device", "firmware", "driver", "kernel", "libmrmgr", "monitor",
              "memlock", "limit_bytes"):
        if k not in doc:
            raise ValueError("JSON has no %r" % k)

    def s(v):
        return "" if v is None else str(v)
    return [(r["section"], r["name"], s(r["size_bytes"]), s(r["runs"]),
             s(r["median_us"]), s(r["min_us"]), s(r["max_us"]), s(r["rate"]),
             r["unit"], s(r["registrations"]), s(r["pinned_bytes"]), r["status"])
            for r in doc["rows"]]


def same(a, b):
    """Rows equal field by field; JSON numbers come back as floats
    ("6.8" for the table's "6.80"), so numbers compare as numbers."""
    for x, y in zip(a, b):
        if x == y:
            continue
        try:
            if x and y and float(x) == float(y):
                continue
        except ValueError:
            pass
        return False
    return len(a) == len(b)


def main():
    table, csvp, jsonp = sys.argv[1:4]
    expect = sys.argv[5:] if len(sys.argv) > 4 and sys.argv[4] == "--expect" else []
    t, c, j = table_rows(table), csv_rows(csvp), json_rows(jsonp)
    bad = []
    if not t:
        bad.append("no rows in the table")
    for name, other in (("CSV", c), ("JSON", j)):
        if len(other) != len(t):
            bad.append("%d table rows, %d %s rows" % (len(t), len(other), name))
        for a, b in zip(t, other):
            if not same(a, b):
                bad.append("table %s != %s %s" % (a, name, b))
                break
    by = {}
    for r in c:  # a measured row of that name wins over a skipped one
        if (r[0], r[1]) not in by or r[11] == "ok":
            by[(r[0], r[1])] = r
    loop_raw, loop_cache = by.get(("loop", "per-message")), by.get(("loop", "cached"))
    for key in expect:
        if key in ("cache-fewer", "cache-faster"):
            if not loop_raw or not loop_cache or "ok" not in (loop_raw[11], loop_cache[11]):
                bad.append("no loop rows")
                continue
            if key == "cache-fewer" and not int(loop_cache[9]) < int(loop_raw[9]):
                bad.append("cached loop registered %s, per-message %s" %
                           (loop_cache[9], loop_raw[9]))
            if key == "cache-faster" and not float(loop_cache[7]) > float(loop_raw[7]):
                bad.append("cached loop %s msgs/s, per-message %s" %
                           (loop_cache[7], loop_raw[7]))
        elif key == "rereg-unsupported":
            for flag in ("translation", "access", "pd"):
                r = by.get(("rereg", flag))
                if not r or r[11] != "unsupported":
                    bad.append("rereg %s: %s" % (flag, r))
        elif key == "no-odp":
            for k in (("curve", "reg-odp"), ("advise", "prefetch")):
                if not by.get(k) or by[k][11] != "unsupported":
                    bad.append("%s: %s, not unsupported" % (k, by.get(k)))
        elif key == "odp":
            for k in (("curve", "reg-odp"), ("advise", "prefetch"),
                      ("advise", "prefetch_write+flush")):
                if not by.get(k) or by[k][11] != "ok":
                    bad.append("%s: %s, not measured" % (k, by.get(k)))
        else:
            bad.append("unknown --expect %s" % key)
    for b in bad:
        print("perftest-check: " + b, file=sys.stderr)
    print("perftest-check: %d rows; table, CSV and JSON %s" %
          (len(t), "disagree" if bad else "agree"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
