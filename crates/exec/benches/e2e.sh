#!/bin/sh
# The five kernels of issue 12 end to end, deinsum beside numpy einsum(optimize=True) with 2
# BLAS threads, in one command: per kernel numpy, then deinsum P=1 x 2 threads, P=2 x 1
# in-process and P=2 x 1 under mpirun (when built with MPI), one after the other so that all
# see the same machine load. Times are of the contraction alone (inputs made beforehand), the
# median of --repeat runs after one warm-up. Writes crates/exec/benches/RESULTS.md.
#
# Usage: crates/exec/benches/e2e.sh [--quick]
# Environment: PYTHON (a Python with numpy; default /tmp/venv12/bin/python), REPEAT (5),
# CARGO_TARGET_DIR, MPIRUN (mpirun).
set -eu
cd "$(dirname "$0")/../../.."
PY=${PYTHON:-/tmp/venv12/bin/python}
REPEAT=${REPEAT:-5}
QUICK=""
if [ "${1:-}" = "--quick" ]; then QUICK="--quick"; fi
TARGET=${CARGO_TARGET_DIR:-target}
FEATURES=""
if command -v mpicc >/dev/null 2>&1; then FEATURES="--features mpi"; fi
# shellcheck disable=SC2086
cargo build --release -q -p deinsum $FEATURES
BIN="$TARGET/release/deinsum"
MPIRUN=${MPIRUN:-mpirun}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
OUT=$(mktemp)
echo "{\"load_before\": \"$(uptime)\"}" >>"$OUT"
RUN="--repeat $REPEAT --warmup 1 --format json"
"$PY" crates/exec/benches/numpy_baseline.py --list $QUICK | while IFS="$(printf '\t')" read -r name expr sizes; do
    echo "# $name $expr $sizes" >&2
    OPENBLAS_NUM_THREADS=2 OMP_NUM_THREADS=2 MKL_NUM_THREADS=2 \
        "$PY" crates/exec/benches/numpy_baseline.py --case "$name" --repeat "$REPEAT" $QUICK </dev/null |
        sed "s/^{/{\"config\": \"numpy2\", /" >>"$OUT"
    # shellcheck disable=SC2086
    "$BIN" run "$expr" --sizes "$sizes" --procs 1 --threads 2 $RUN </dev/null |
        "$PY" -c "import json,sys; d=json.load(sys.stdin); print(json.dumps({'config':'p1t2','case':'$name','min':d['contraction_seconds_min'],'median':d['contraction_seconds_median'],'exact':d['volume_exact']}))" >>"$OUT"
    # shellcheck disable=SC2086
    "$BIN" run "$expr" --sizes "$sizes" --procs 2 --threads 1 $RUN </dev/null |
        "$PY" -c "import json,sys; d=json.load(sys.stdin); print(json.dumps({'config':'p2t1','case':'$name','min':d['contraction_seconds_min'],'median':d['contraction_seconds_median'],'exact':d['volume_exact']}))" >>"$OUT"
    if [ -n "$FEATURES" ]; then
        # shellcheck disable=SC2086
        "$MPIRUN" -n 2 "$BIN" run "$expr" --sizes "$sizes" --backend mpi --threads 1 $RUN </dev/null |
            "$PY" -c "import json,sys; d=json.load(sys.stdin); print(json.dumps({'config':'mpi2t1','case':'$name','min':d['contraction_seconds_min'],'median':d['contraction_seconds_median'],'exact':d['volume_exact']}))" >>"$OUT"
    fi
done
echo "{\"load_after\": \"$(uptime)\"}" >>"$OUT"
"$PY" crates/exec/benches/results.py "$OUT" $QUICK >crates/exec/benches/RESULTS.md
rm -f "$OUT"
cat crates/exec/benches/RESULTS.md
