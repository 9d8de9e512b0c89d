"""The auto-choice grid of issue 39 (run by grid.sh): for each case (left rows N, right rows a
fraction of N, selectivity, uniform or Zipf(1.2) keys, P ranks) every strategy runs once with
`deinsum join --format json`; `auto` is the strategy of least predicted time (the inspection's
predictions, as `deinsum join --strategy auto` picks it). auto is "within 10%" when the measured
time of its pick is at most 1.1x the best strategy's. Every strategy runs in 1 + GRID_REPEAT
processes, the strategies taking turns, the later ones joining as often as takes about
GRID_RUN_SECONDS (at most 20 times, `--repeat`), and its time is the least of its runs (the one
least disturbed by other work on a shared machine). Writes its table into RESULTS.md between the grid markers (the rest of the file is
join.sh's). Arguments: the deinsum binary, a scratch folder, RESULTS.md.

Environment: GRID_SIZES (left rows, default "10000,100000,1000000"), GRID_PROCS (default
"2,4,8"), GRID_REPEAT (timed processes per strategy and case after the first, default 3),
GRID_RUN_SECONDS (default 0.05), GRID_FIT=1 also prints the least-squares fit of measured seconds on the predicted
figures (the calibration of cost.rs's constants); GRID_DUMP=FILE writes every case's measured
runs and predicted figures per strategy to FILE as JSON (to fit a cost model without rerunning
the grid)."""

import json
import os
import subprocess
import sys
import time

# NumPy runs as its users get it: grid.sh starts this process without this workplace's OpenBLAS
# overrides (dropped again here, before NumPy loads OpenBLAS, for a direct start); deinsum gets
# them back as they were given (grid.sh passes them as *_GIVEN).
from openblas_env import deinsum_env  # noqa: E402 (before NumPy)

DEINSUM_ENV = deinsum_env()

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

EXE, WORK, OUT = sys.argv[1], sys.argv[2], sys.argv[3]
SIZES = [int(float(x)) for x in os.environ.get("GRID_SIZES", "10000,100000,1000000").split(",")]
PROCS = [int(x) for x in os.environ.get("GRID_PROCS", "2,4,8").split(",")]
REPEAT = max(1, int(os.environ.get("GRID_REPEAT", "3")))
# Seconds of joins a timed process runs (`--repeat`), so that a case of a millisecond is the
# least of tens of runs and not of three.
RUN_SECONDS = float(os.environ.get("GRID_RUN_SECONDS", "0.05"))
RATIOS = [0.01, 0.1, 1.0]
SELECTIVITIES = [0.001, 0.1, 1.0]
DISTS = ["uniform", "zipf"]
STRATEGIES = ["shuffle", "broadcast", "semi", "index", "bloom"]
BEGIN, END = "<!-- grid: begin -->", "<!-- grid: end -->"


def tables(n, ratio, sel, dist, seed):
    """L: n rows (k, a int64, b float64); R: m = ratio * n rows, each key once (k, c, d). A left
    row's key is one of R's (uniform, or Zipf(1.2) over a permutation of them) with probability
    sel, else a key R lacks."""
    rng = np.random.default_rng(seed)
    m = max(1, int(n * ratio))
    if dist == "uniform":
        lk = rng.integers(0, m, n, dtype=np.int64)
    else:
        w = np.arange(1, m + 1, dtype=np.float64) ** -1.2
        cdf = np.cumsum(w)
        cdf /= cdf[-1]
        lk = rng.permutation(m)[np.minimum(np.searchsorted(cdf, rng.random(n)), m - 1)]
        lk = lk.astype(np.int64)
    miss = rng.random(n) >= sel
    lk[miss] = m + rng.integers(0, max(n, 1), int(miss.sum()), dtype=np.int64)
    left = pa.table({"k": lk, "a": rng.integers(0, 1 << 40, n, dtype=np.int64),
                     "b": rng.random(n)})
    right = pa.table({"k": rng.permutation(m).astype(np.int64),
                      "c": rng.integers(0, 1 << 40, m, dtype=np.int64), "d": rng.random(m)})
    lp, rp = f"{WORK}/l.parquet", f"{WORK}/r.parquet"
    pq.write_table(left, lp, row_group_size=1 << 16)
    pq.write_table(right, rp, row_group_size=1 << 16)
    return lp, rp, m


def run(lp, rp, p, strategy, repeat=1):
    """One process joining `repeat` times: (every run's slowest-rank join seconds, the report)."""
    r = subprocess.run([EXE, "join", lp, rp, "--on", "k", "--procs", str(p), "--strategy",
                        strategy, "--format", "json", "--repeat", str(repeat)],
                       capture_output=True, text=True, stdin=subprocess.DEVNULL, env=DEINSUM_ENV)
    if r.returncode != 0:
        raise SystemExit(f"deinsum join --strategy {strategy} -P {p} failed: {r.stderr}")
    rep = json.loads(r.stdout)
    return rep["join_seconds_runs"], rep


def case(lp, rp, p):
    """Every strategy's measured seconds (the least of its runs: REPEAT processes, the
    strategies taking turns so that a change of the machine's load hits them alike, each
    joining as many times as take about RUN_SECONDS, at most 20, after a first process that
    times one run), its predicted seconds and figures, and auto's pick."""
    measured, predicted, figures = {s: [] for s in STRATEGIES}, {}, {}
    joins = {}
    for s in STRATEGIES:
        t, rep = run(lp, rp, p, s)
        measured[s].extend(t)
        joins[s] = max(1, min(20, round(RUN_SECONDS / max(t[0], 1e-6))))
        pred = next(x for x in rep["inspection"]["predictions"] if x["strategy"] == s)
        predicted[s] = pred["seconds"]
        figures[s] = pred
    for _ in range(REPEAT):
        for s in STRATEGIES:
            t, _ = run(lp, rp, p, s, joins[s])
            measured[s].extend(t)
    pick = min(STRATEGIES, key=lambda s: predicted[s])
    best_of = {s: min(v) for s, v in measured.items()}
    best = min(STRATEGIES, key=lambda s: best_of[s])
    return best_of, predicted, figures, pick, best, measured


def fit(cases):
    """Least squares of measured seconds on the model's figures, each case's mean over its
    strategies taken out (the inspector and reading cost every strategy alike): the busiest
    rank's bytes packed (sent + received) and rows touched (in + out), both over the core share
    min(1, cores / P) a rank gets, and all-to-all calls times (P - 1). Returns seconds per
    byte, per row (at a whole core) and per call."""
    xs, ys = [], []
    for samples in cases:
        mx = np.mean([x for x, _ in samples], axis=0)
        my = np.mean([y for _, y in samples])
        for x, y in samples:
            xs.append(np.array(x) - mx)
            ys.append(y - my)
    coef, *_ = np.linalg.lstsq(np.array(xs), np.array(ys), rcond=None)
    return coef


def main():
    load0 = os.getloadavg()
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    rows, samples, dump = [], [], []
    hits = total = 0
    seed = 0
    for n in SIZES:
        for ratio in RATIOS:
            for sel in SELECTIVITIES:
                for dist in DISTS:
                    seed += 1
                    lp, rp, m = tables(n, ratio, sel, dist, seed)
                    for p in PROCS:
                        t, pred, figs, pick, best, runs = case(lp, rp, p)
                        dump.append({"n": n, "right_rows": m, "sel": sel, "keys": dist, "p": p,
                                     "runs": runs, "predictions": figs})
                        ok = t[pick] <= 1.1 * t[best]
                        hits += ok
                        total += 1
                        share = min(1.0, (os.cpu_count() or 1) / p)
                        samples.append([
                            ([max(a + b for a, b in zip(figs[s]["sent"], figs[s]["received"]))
                              / share,
                              max(a + b for a, b in zip(figs[s]["rows_in"], figs[s]["rows_out"]))
                              / share,
                              figs[s]["calls"] * (p - 1)], t[s])
                            for s in STRATEGIES])
                        times = " ".join(f"{s[:2]}={t[s]:.3f}" for s in STRATEGIES)
                        rows.append(f"| {n:,} | {m:,} | {sel:g} | {dist} | {p} | {best} "
                                    f"{t[best]:.3f} | {pick} {t[pick]:.3f} | "
                                    f"{t[pick] / t[best]:.2f} | {'yes' if ok else '**no**'} "
                                    f"| {times} |")
                        print(rows[-1], flush=True)
    load1 = os.getloadavg()
    share = 100.0 * hits / max(total, 1)
    lines = [
        BEGIN,
        "## Auto-choice grid",
        "",
        "Generated by `crates/join/benches/grid.sh` (do not edit by hand). Left N rows (int64 key "
        "and two payload columns), right N·ratio rows each key once; a left row's key is one of "
        "the right's with probability *sel* (uniform, or Zipf(1.2) over them), else a key the "
        "right lacks; inner join, in-process ranks, the release binary; a strategy's time is "
        "its slowest rank's join (inspector included, reading excluded). auto = the strategy "
        f"of least predicted time. Each strategy ran in 1 + {REPEAT} processes per case, the "
        "strategies taking turns, the later ones joining as often as takes about "
        f"{RUN_SECONDS:g} s (at most 20 times); its time is the least of its runs. "
        f"Sizes {', '.join(f'{s:,}' for s in SIZES)} (larger sizes left "
        "out: they would not fit the session's time on this shared machine).",
        "",
        f"Run {started}, {os.cpu_count()} cores shared with other work: load average "
        f"{load0[0]:.1f} at the start, {load1[0]:.1f} at the end"
        + (" (over 1.5: provisional figures)." if max(load0[0], load1[0]) > 1.5 else "."),
        "",
        f"**auto within 10% of the best strategy in {hits} of {total} cases ({share:.0f}%).**",
        "",
        "| N | right rows | sel | keys | P | best (s) | auto's pick (s) | ratio | within 10% "
        "| all (s) |",
        "| ---: | ---: | ---: | --- | ---: | --- | --- | ---: | --- | --- |",
        *rows,
        END,
    ]
    if os.environ.get("GRID_DUMP"):
        with open(os.environ["GRID_DUMP"], "w") as f:
            json.dump({"cores": os.cpu_count(), "load": [load0[0], load1[0]], "cases": dump}, f)
    if os.environ.get("GRID_FIT"):
        c = fit(samples)
        print(f"fit: {c[0]:.3e} s/byte, {c[1]:.3e} s/row, {c[2]:.3e} s/(call*(P-1))")
    old = open(OUT).read() if os.path.exists(OUT) else ""
    if BEGIN in old and END in old:
        new = old[:old.index(BEGIN)] + "\n".join(lines) + old[old.index(END) + len(END):]
    else:
        new = (old.rstrip() + "\n\n" if old else "# Join bench (issue 39)\n\n") + "\n".join(lines) + "\n"
    with open(OUT, "w") as f:
        f.write(new)
    print(f"auto within 10% in {hits} of {total} cases ({share:.0f}%)")


main()
