#!/usr/bin/env python3
"""Summary of one soak run (scripts/soak.sh): reads the probe CSV and prints the verdict.

usage: soak_summary.py CSV BACKEND MINUTES GPUS STORED GPUS_SEEN "SAMPLES_B,R1M_B,R1H_B,BLOCKS_B,PACKED_B"
                       "R1M_ROWS,R1H_ROWS,PACKED_MINUTES,SEALED_SAMPLES"

RSS growth: the server's RSS swings by ±10 % from one 10-s probe to the next (each ingest cycle
allocates and frees its batches), so two single probes say more about the phase of that swing
than about growth. Growth is measured on the median of the first minute after warm-up (the
first third of the run) against the median of the last minute, and the least-squares slope over
everything after warm-up tells a bound from a leak. The single-probe figures are printed too.
"""

import csv
import statistics
import sys


def slope_per_s(xs, ys):
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    den = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / den if den else 0.0


def main():
    path, backend, minutes, gpus, stored, gpus_seen, size, rollups = sys.argv[1:]
    rows = list(csv.DictReader(open(path)))
    if len(rows) < 6:
        sys.exit("too few probes recorded")
    t = [int(r["elapsed_s"]) for r in rows]
    warm_s = t[-1] / 3
    after = [r for r in rows if int(r["elapsed_s"]) >= warm_s]
    first = [r for r in after if int(r["elapsed_s"]) < warm_s + 60]
    last = [r for r in rows if int(r["elapsed_s"]) > t[-1] - 60]

    def med(rs, col="rss_kib"):
        return statistics.median(int(r[col]) for r in rs)

    rss0, rss1 = med(first), med(last)
    growth = (rss1 - rss0) / rss0 * 100
    xs = [int(r["elapsed_s"]) for r in after]
    ys = [int(r["rss_kib"]) for r in after]
    per_hour = slope_per_s(xs, ys) * 3600 / statistics.fmean(ys) * 100
    point0, point1 = int(after[0]["rss_kib"]), int(rows[-1]["rss_kib"])
    peak = max(int(r["rss_kib"]) for r in rows)
    lags = [int(r["lag_oldest_ms"]) for r in rows]
    errs = int(rows[-1]["error_lines"])
    cpu = float(rows[-1]["server_cpu_s"]) / float(rows[-1]["elapsed_s"]) * 100
    rate = (int(rows[-1]["samples"]) - int(rows[0]["samples"])) / ((t[-1] - t[0]) or 1)
    print(f"soak {backend}: {gpus} GPUs, {minutes} min, {len(rows)} probes ({path})")
    print(f"  samples stored {stored} on {gpus_seen} GPUs; steady ingest {rate:.0f} samples/s")
    print(
        f"  server RSS, median of the first minute after warm-up {rss0 / 1024:.1f} MiB → of the last minute "
        f"{rss1 / 1024:.1f} MiB: growth {growth:+.1f} % (goal < 5 %); trend after warm-up {per_hour:+.1f} % per hour; "
        f"peak {peak / 1024:.1f} MiB"
    )
    print(f"    single probes: {point0 / 1024:.1f} → {point1 / 1024:.1f} MiB ({(point1 - point0) / point0 * 100:+.1f} %)")
    for part in ("anon", "file", "shmem"):
        col = f"rss_{part}_kib"
        if col in rows[0]:
            print(f"    of it {part}: {med(first, col) / 1024:.1f} → {med(last, col) / 1024:.1f} MiB")
    print(f"  server CPU {cpu:.0f} % of one core on average")
    print(
        f"  ingest lag (now − oldest GPU's newest sample) p50 {statistics.median(lags) / 1000:.2f} s, "
        f"max {max(lags) / 1000:.2f} s (goal < 2 s)"
    )
    print(f"  error/warning log lines: {errs} (goal 0); max spool files {max(int(r['spool_files']) for r in rows)}")
    sb, mb, hb, blocks_b, packed_b = (int(x) for x in size.split(","))
    r1m, r1h, packed_minutes, sealed = (int(x) for x in rollups.split(","))
    open_samples = int(stored) - sealed
    print(
        f"  on disk with indexes: open samples {sb / 2**20:.1f} MiB = {sb / max(open_samples, 1):.0f} B/sample "
        f"({open_samples} rows); sealed blocks {blocks_b / 2**20:.1f} MiB = {blocks_b / max(sealed, 1):.1f} B/sample "
        f"({sealed} samples); all samples {(sb + blocks_b) / int(stored):.1f} B/sample"
    )
    minutes_all = r1m + packed_minutes
    print(
        f"  1-minute rollups: rows {mb / 2**20:.1f} MiB = {mb / max(r1m, 1):.0f} B/row ({r1m} rows); packed "
        f"{packed_b / 2**20:.2f} MiB = {packed_b / max(packed_minutes, 1):.0f} B/GPU-minute ({packed_minutes} minutes); "
        f"together {(mb + packed_b) / max(minutes_all, 1):.0f} B/GPU-minute; "
        f"rollups_1h {hb / 2**20:.1f} MiB = {hb / max(r1h, 1):.0f} B/row ({r1h} rows)"
    )
    ok = growth < 5 and errs == 0 and max(lags) < 2000
    print(f"  verdict: {'PASS' if ok else 'FAIL'}")


if __name__ == "__main__":
    main()
