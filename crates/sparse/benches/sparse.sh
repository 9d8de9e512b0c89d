#!/usr/bin/env bash
# Sparse kernels against SciPy in one run; writes crates/sparse/benches/RESULTS.md.
# PYTHON: a Python with numpy and scipy (default: python3).
# SCALE, GEMM_SCALE: R-MAT scales (default 18 and 16); REPS (default 21: medians of 5 moved by
# 30% from one run to the next on this shared machine).
set -euo pipefail
cd "$(dirname "$0")/../../.."
PY="${PYTHON:-python3}"
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
cargo build --release -q -p deinsum
cargo bench -q -p deinsum-sparse --bench sparse_bench -- --dir "$dir" \
    --scale "${SCALE:-18}" --gemm-scale "${GEMM_SCALE:-16}" --reps "${REPS:-21}" | tee "$dir/rust.jsonl"
dense() {
    target/release/deinsum run "ijk,ja,ka->ia" --sizes i=256,j=256,k=256,a=32 --procs "$1" \
        --threads 1 --repeat 3 --format json | "$PY" -c \
        'import json,sys; print(json.load(sys.stdin)["contraction_seconds_median"])'
}
dense1=$(dense 1)
dense2=$(dense 2)
env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE "$PY" crates/sparse/benches/scipy_side.py "$dir" "$dir/rust.jsonl" "$dense1" "$dense2" "$load_before" \
    > "$dir/RESULTS.md"
echo "Machine load at the end: $(cut -d' ' -f1-3 /proc/loadavg)." >> "$dir/RESULTS.md"
cp "$dir/RESULTS.md" crates/sparse/benches/RESULTS.md
cat crates/sparse/benches/RESULTS.md
