"""The join bench (run by join.sh): generates the tables, times deinsum, DuckDB and Polars in
one run and writes RESULTS.md. Arguments: the deinsum binary, a scratch folder, the output."""

import os
import sys

# The baselines (this process: DuckDB, Polars, NumPy's OpenBLAS) run as their users get them:
# join.sh starts it without this workplace's OpenBLAS overrides (dropped again here, before NumPy
# loads OpenBLAS, for a direct start), and deinsum gets them back as they were given
# (join.sh passes them as *_GIVEN).
from openblas_env import deinsum_env  # noqa: E402 (before NumPy)

DEINSUM_ENV = deinsum_env()
# Polars reads its thread count once, at import.
os.environ["POLARS_MAX_THREADS"] = "2"

import json  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402

import duckdb  # noqa: E402
import numpy as np  # noqa: E402
import polars as pl  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

EXE, WORK, OUT = sys.argv[1], sys.argv[2], sys.argv[3]
N = int(os.environ.get("JOIN_BENCH_ROWS", 10_000_000))
M = max(N // 10, 1)
REPEAT = int(os.environ.get("JOIN_BENCH_REPEAT", 3))
P = 2
STRATEGIES = ["shuffle", "broadcast", "semi", "index", "bloom", "auto"]


def tables(dist):
    """L (N rows: k, a int64, b float64) and R (M rows, each key once: k, c, d) as Parquet."""
    rng = np.random.default_rng(39)
    if dist == "uniform":
        lk = rng.integers(0, M, N, dtype=np.int64)
    else:
        w = np.arange(1, M + 1, dtype=np.float64) ** -1.2
        cdf = np.cumsum(w)
        cdf /= cdf[-1]
        # Ranks to keys through a permutation, so the heavy keys are not the small ints.
        lk = rng.permutation(M)[np.searchsorted(cdf, rng.random(N))].astype(np.int64)
    left = pa.table({"k": lk, "a": rng.integers(0, 1 << 40, N, dtype=np.int64),
                     "b": rng.random(N)})
    right = pa.table({"k": rng.permutation(M).astype(np.int64),
                      "c": rng.integers(0, 1 << 40, M, dtype=np.int64), "d": rng.random(M)})
    lp, rp = f"{WORK}/l_{dist}.parquet", f"{WORK}/r_{dist}.parquet"
    pq.write_table(left, lp, row_group_size=1 << 20)
    pq.write_table(right, rp, row_group_size=1 << 20)
    return lp, rp


def median(f):
    """Median seconds of REPEAT timed calls of f (f returns its own seconds or None to be
    timed here), and the last call's value."""
    secs, val = [], None
    for _ in range(REPEAT):
        t = time.perf_counter()
        val = f()
        took = time.perf_counter() - t
        secs.append(val[0] if isinstance(val, tuple) and val[0] is not None else took)
    return statistics.median(secs), val


def duck(lp, rp):
    con = duckdb.connect()
    con.execute("SET threads = 2")
    con.execute(f"CREATE TABLE l AS SELECT * FROM read_parquet('{lp}')")
    con.execute(f"CREATE TABLE r AS SELECT * FROM read_parquet('{rp}')")

    def mem():
        con.execute("CREATE OR REPLACE TABLE o AS SELECT * FROM l JOIN r USING (k)")
        return (None, con.execute("SELECT count(*) FROM o").fetchone()[0])

    t_mem, (_, rows) = median(mem)
    con.execute("DROP TABLE o")

    def e2e():
        c = duckdb.connect()
        c.execute("SET threads = 2")
        c.execute(f"COPY (SELECT * FROM read_parquet('{lp}') AS l JOIN read_parquet('{rp}') AS r "
                  f"USING (k)) TO '{WORK}/o_duck.parquet' (FORMAT parquet)")
        c.close()

    t_e2e, _ = median(e2e)
    return t_mem, t_e2e, rows


def polars(lp, rp):
    l, r = pl.read_parquet(lp), pl.read_parquet(rp)

    def mem():
        return (None, l.join(r, on="k", how="inner").height)

    t_mem, (_, rows) = median(mem)

    def e2e():
        (pl.scan_parquet(lp).join(pl.scan_parquet(rp), on="k", how="inner")
         .sink_parquet(f"{WORK}/o_polars.parquet"))

    t_e2e, _ = median(e2e)
    return t_mem, t_e2e, rows


def deinsum(lp, rp, strategy):
    def once(*extra):
        r = subprocess.run([EXE, "join", lp, rp, "--on", "k", "--procs", str(P),
                            "--strategy", strategy, "--format", "json",
                            "--output", f"{WORK}/o_deinsum.parquet", *extra],
                           capture_output=True, text=True, stdin=subprocess.DEVNULL,
                           env=DEINSUM_ENV)
        if r.returncode != 0:
            raise SystemExit(f"deinsum join --strategy {strategy} failed: {r.stderr}")
        return json.loads(r.stdout)

    # End to end: REPEAT processes, each reading, joining and writing once.
    walls = []
    for _ in range(REPEAT):
        t = time.perf_counter()
        once()
        walls.append(time.perf_counter() - t)
    # In memory: REPEAT joins in one process on tables read once, as DuckDB's and Polars'
    # in-memory figures are REPEAT queries in one session (the first paying fresh memory).
    rep = once("--repeat", str(REPEAT))
    joins = rep["join_seconds_runs"]
    pred = next(p for p in rep["inspection"]["predictions"] if p["strategy"] == rep["strategy"])
    exact = rep["measured_sent"] == pred["sent"] and rep["measured_received"] == pred["received"]
    # The sketch inspector (auto at this size) estimates the bytes of some strategies.
    exact = exact if pred.get("bytes_exact", True) else ("yes" if exact else "estimated")
    return dict(strategy=rep["strategy"], mem=statistics.median(joins),
                e2e=statistics.median(walls), rows=rep["output_rows"], sent=rep["measured_sent"],
                exact=exact, heavy=rep["inspection"]["heavy_keys"], rows_in=pred["rows_in"])


def main():
    load0 = os.getloadavg()
    lines = []
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    for dist in ["uniform", "zipf"]:
        lp, rp = tables(dist)
        d_mem, d_e2e, d_rows = duck(lp, rp)
        p_mem, p_e2e, p_rows = polars(lp, rp)
        ours = [deinsum(lp, rp, s) for s in STRATEGIES]
        lines.append(f"\n## {dist} keys\n")
        lines.append("| system | in-memory join (s) | Parquet → Parquet (s) | output rows |")
        lines.append("| --- | ---: | ---: | ---: |")
        lines.append(f"| DuckDB (2 threads) | {d_mem:.2f} | {d_e2e:.2f} | {d_rows} |")
        lines.append(f"| Polars (2 threads) | {p_mem:.2f} | {p_e2e:.2f} | {p_rows} |")
        for o in ours:
            name = "auto → " + o["strategy"] if o is ours[-1] else o["strategy"]
            lines.append(f"| deinsum P=2 {name} | {o['mem']:.2f} ({o['mem'] / d_mem:.1f}× DuckDB) "
                         f"| {o['e2e']:.2f} ({o['e2e'] / d_e2e:.1f}× DuckDB) | {o['rows']} |")
        lines.append("")
        lines.append("| deinsum strategy | words sent per rank (measured) | = predicted | "
                     "rows into each rank's local join | heavy keys |")
        lines.append("| --- | --- | --- | --- | ---: |")
        for o in ours[:-1]:
            words = [s // 8 for s in o["sent"]]
            lines.append(f"| {o['strategy']} | {words} | {o['exact'] if isinstance(o['exact'], str) else 'yes' if o['exact'] else 'NO'} "
                         f"| {o['rows_in']} | {o['heavy']} |")
        assert all(o["rows"] == d_rows == p_rows for o in ours), "row counts differ"
    load1 = os.getloadavg()
    head = [
        "# Join bench (issue 39)",
        "",
        "Generated by `crates/join/benches/join.sh` (do not edit by hand). "
        f"{N:,} ⋈ {M:,} rows: `k` int64 plus two payload columns (int64, float64) a side; "
        "the right table holds each key once. Uniform: left keys uniform over the right's; "
        "Zipf: left keys Zipf(1.2) over them. deinsum runs `deinsum join --procs 2` (the "
        "release binary, in-process ranks) per strategy; its in-memory time is the slowest "
        "rank's join (inspector pass included; reading and writing excluded) in one process "
        f"that joins the tables it read {REPEAT} times (`--repeat {REPEAT}`), as the others' "
        "in-memory queries run again in one session; its end-to-end time is a process's wall "
        "time reading, joining once and writing Parquet. DuckDB and Polars run with "
        "2 threads in the same script: in memory, DuckDB's `CREATE TABLE AS` of the join of two "
        "loaded tables and Polars' `DataFrame.join`; end to end, DuckDB's `COPY (… JOIN …) TO` "
        "and Polars' `scan_parquet(…).join(…).sink_parquet(…)`. Medians of "
        f"{REPEAT} runs. A word is 8 bytes of the encoded rows (`crates/join/src/table.rs`).",
        "",
        f"Run {started} on {platform.machine()}, {os.cpu_count()} cores, shared with other "
        f"work: load average {load0[0]:.1f} at the start and {load1[0]:.1f} at the end, so "
        "the figures are noisy and every system lost time to the others' processes alike.",
    ]
    if max(load0[0], load1[0]) > 1.5:
        head += ["", "**Provisional:** the load average was over 1.5 during the run; the "
                 "times are to be measured again on a quiet machine."]
    # The auto-choice grid's section (grid.sh writes it) stays as it is.
    old = open(OUT).read() if os.path.exists(OUT) else ""
    begin, end = "<!-- grid: begin -->", "<!-- grid: end -->"
    grid = old[old.index(begin):old.index(end) + len(end)] if begin in old and end in old else ""
    with open(OUT, "w") as f:
        f.write("\n".join(head + lines) + "\n" + (f"\n{grid}\n" if grid else ""))
    print("\n".join(head + lines))


main()
