#!/bin/sh
# End-to-end deinsum (P=1, P=2 in-process ranks) against numpy einsum(optimize=True) with 1 and
# 2 BLAS threads, in one command. Pass --quick for small sizes.
set -e
cd "$(dirname "$0")/../../.."
PY=${PYTHON:-/work/venv/bin/python}
echo "# deinsum"
cargo bench -p deinsum-exec --bench e2e -- "$@"
for th in 1 2; do
  echo "# numpy, $th BLAS thread(s)"
  OPENBLAS_NUM_THREADS=$th OMP_NUM_THREADS=$th MKL_NUM_THREADS=$th "$PY" crates/exec/benches/numpy_baseline.py "$@"
done
