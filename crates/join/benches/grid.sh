#!/usr/bin/env bash
# The auto-choice grid of issue 39: sizes x right/left ratio x selectivity x uniform/Zipf keys
# x P, every strategy measured, auto's pick (least predicted time) against the best. Writes its
# section of crates/join/benches/RESULTS.md (grid.py says how).
#
# Environment: GRID_SIZES, GRID_PROCS, GRID_FIT (see grid.py), JOIN_BENCH_VENV (a venv with
# numpy and pyarrow; made here when missing), DEINSUM (the release binary; built when missing).
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
# NumPy (the tables' generator) runs without this workplace's OpenBLAS overrides; grid.py hands
# deinsum the environment as given.
env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OPENBLAS_CORETYPE_GIVEN="${OPENBLAS_CORETYPE-}" \
    OPENBLAS_L2_SIZE_GIVEN="${OPENBLAS_L2_SIZE-}" "$venv/bin/python" \
    "$root/crates/join/benches/grid.py" "$exe" "$work" "$root/crates/join/benches/RESULTS.md"
