#!/usr/bin/env bash
# Sparse kernels against SciPy in one run; writes crates/sparse/benches/RESULTS.md.
# PYTHON: a Python with numpy and scipy (default: python3). SCALE, GEMM_SCALE: R-MAT scales.
set -euo pipefail
cd "$(dirname "$0")/../../.."
PY="${PYTHON:-python3}"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cargo build --release -q
cargo bench -q -p deinsum-sparse --bench sparse_bench -- --dir "$dir" \
    --scale "${SCALE:-18}" --gemm-scale "${GEMM_SCALE:-16}" --reps 5 | tee "$dir/rust.jsonl"
dense=$(target/release/deinsum run "ijk,ja,ka->ia" --sizes i=256,j=256,k=256,a=32 --procs 1 \
    --threads 1 --repeat 3 --format json | "$PY" -c \
    'import json,sys; print(json.load(sys.stdin)["contraction_seconds_median"])')
echo "load: $(uptime)" >&2
"$PY" crates/sparse/benches/scipy_side.py "$dir" "$dir/rust.jsonl" "$dense" \
    > crates/sparse/benches/RESULTS.md
echo "machine load at the end: $(cut -d' ' -f1-3 /proc/loadavg)" >> crates/sparse/benches/RESULTS.md
cat crates/sparse/benches/RESULTS.md
