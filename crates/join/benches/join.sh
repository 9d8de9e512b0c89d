#!/usr/bin/env bash
# The join bench of issue 39: 10 M ⋈ 1 M rows (int64 key, two payload columns), uniform and
# Zipf(1.2) keys, deinsum at P=2 (every strategy, and auto) against DuckDB and Polars with 2
# threads, in the same run: the in-memory join (tables loaded; deinsum's slowest rank's join
# time, DuckDB's CREATE TABLE AS of the join from in-memory tables, Polars' DataFrame.join)
# and end to end Parquet -> Parquet (wall time of one process each). Also the bytes each
# deinsum strategy moved (measured; equal to predicted) in 8-byte words. Regenerates
# crates/join/benches/RESULTS.md.
#
# Environment: JOIN_BENCH_ROWS (left rows, default 10000000; the right has a tenth),
# JOIN_BENCH_REPEAT (timed runs per figure, the median is reported; default 3),
# JOIN_BENCH_VENV (a venv with duckdb, polars, pyarrow, numpy; made here when missing),
# DEINSUM (the release binary; built here when missing).
set -euo pipefail
cd "$(dirname "$0")/../../.."
root=$PWD
target="${CARGO_TARGET_DIR:-$root/target}"
venv="${JOIN_BENCH_VENV:-$target/join-bench-venv}"
if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
    "$venv/bin/python" -m pip install -q --upgrade pip
    "$venv/bin/python" -m pip install -q numpy pyarrow duckdb polars
fi
exe="${DEINSUM:-$target/release/deinsum}"
if [ ! -x "$exe" ]; then
    cargo build --release -p deinsum --bin deinsum
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# The baselines' process runs without this workplace's OpenBLAS overrides (NumPy's own kernel);
# join_bench.py hands deinsum the environment as given.
env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OPENBLAS_CORETYPE_GIVEN="${OPENBLAS_CORETYPE-}" \
    OPENBLAS_L2_SIZE_GIVEN="${OPENBLAS_L2_SIZE-}" "$venv/bin/python" "$root/crates/join/benches/join_bench.py" "$exe" "$work" \
    "$root/crates/join/benches/RESULTS.md"
