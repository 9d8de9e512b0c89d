#!/bin/sh
# The five kernels of issue 12 end to end, deinsum beside numpy einsum(optimize=True) with 2
# BLAS threads, in one command: per kernel numpy, then deinsum P=1 x 2 threads, P=2 x 1
# in-process and P=2 x 1 under mpirun (when MPI is installed), one right after the other so
# that all see the same machine load. Times are of the contraction alone (inputs made
# beforehand), the median of --repeat runs after one warm-up. The whole set runs ROUNDS times
# (kernel by kernel, so a burst of load hits both sides alike); each configuration keeps its
# best round median, numpy's too. Writes crates/exec/benches/RESULTS.md.
#
# Usage: crates/exec/benches/e2e.sh [--quick]
# Environment: PYTHON (a Python with numpy; default: a venv in $TARGET/e2e-venv with numpy
# from PyPI, made on first use), REPEAT (7), ROUNDS (2), CARGO_TARGET_DIR, MPIRUN (mpirun).
set -eu
cd "$(dirname "$0")/../../.."
REPEAT=${REPEAT:-7}
ROUNDS=${ROUNDS:-2}
QUICK=""
if [ "${1:-}" = "--quick" ]; then QUICK="--quick"; fi
TARGET=${CARGO_TARGET_DIR:-target}
if [ -z "${PYTHON:-}" ]; then
    VENV="$TARGET/e2e-venv"
    if ! "$VENV/bin/python" -c "import numpy" 2>/dev/null; then
        echo "# making $VENV with numpy from PyPI (its bundled OpenBLAS)" >&2
        python3 -m venv "$VENV"
        "$VENV/bin/pip" install -q numpy
    fi
    PYTHON="$VENV/bin/python"
fi
PY=$PYTHON
FEATURES=""
if command -v mpicc >/dev/null 2>&1 && command -v "${MPIRUN:-mpirun}" >/dev/null 2>&1; then
    FEATURES="--features mpi"
fi
# shellcheck disable=SC2086
cargo build --release -q -p deinsum $FEATURES
BIN="$TARGET/release/deinsum"
MPIRUN=${MPIRUN:-mpirun}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
OUT=$(mktemp)
trap 'rm -f "$OUT"' EXIT
"$PY" -c "import json, numpy as np; b = np.show_config(mode='dicts')['Build Dependencies']['blas']; print(json.dumps({'numpy': np.__version__ + ', BLAS ' + b.get('name', '?') + ' ' + str(b.get('version', '?'))}))" >>"$OUT" ||
    "$PY" -c "import json, numpy as np; print(json.dumps({'numpy': np.__version__}))" >>"$OUT"
echo "{\"load_before\": \"$(uptime)\"}" >>"$OUT"
RUN="--repeat $REPEAT --warmup 1 --format json"
# One deinsum configuration's JSON report as a result line.
row() {
    "$PY" -c "import json,sys; d=json.load(sys.stdin); print(json.dumps({'config':'$1','case':'$2','round':$3,'min':d['contraction_seconds_min'],'median':d['contraction_seconds_median'],'exact':d['volume_exact']}))"
}
round=1
while [ "$round" -le "$ROUNDS" ]; do
    "$PY" crates/exec/benches/numpy_baseline.py --list $QUICK | while IFS="$(printf '\t')" read -r name expr sizes; do
        echo "# round $round: $name $expr $sizes" >&2
        env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OPENBLAS_NUM_THREADS=2 OMP_NUM_THREADS=2 MKL_NUM_THREADS=2 \
            "$PY" crates/exec/benches/numpy_baseline.py --case "$name" --repeat "$REPEAT" $QUICK </dev/null |
            sed "s/^{/{\"config\": \"numpy2\", \"round\": $round, /" >>"$OUT"
        "$BIN" run "$expr" --sizes "$sizes" --procs 1 --threads 2 $RUN </dev/null | row p1t2 "$name" "$round" >>"$OUT"
        "$BIN" run "$expr" --sizes "$sizes" --procs 2 --threads 1 $RUN </dev/null | row p2t1 "$name" "$round" >>"$OUT"
        if [ -n "$FEATURES" ]; then
            "$MPIRUN" -n 2 "$BIN" run "$expr" --sizes "$sizes" --backend mpi --threads 1 $RUN </dev/null |
                row mpi2t1 "$name" "$round" >>"$OUT"
        fi
    done
    echo "{\"load_round_$round\": \"$(uptime)\"}" >>"$OUT"
    round=$((round + 1))
done
"$PY" crates/exec/benches/results.py "$OUT" $QUICK >crates/exec/benches/RESULTS.md
cat crates/exec/benches/RESULTS.md
