#!/bin/sh
# One CP-ALS sweep on a deinsum Session (examples/cp_als.rs, release, built with the `mpi`
# feature) beside TensorLy's parafac (NumPy backend, 2 BLAS threads, in the same run): a 256^3
# tensor at R=32 and an order-5 tensor (24^5) at R=32; deinsum at P=1 (2 threads), P=2 in
# process (1 thread per rank) and P=2 under mpirun (`--backend mpi`, 1 thread per rank). The
# time per sweep is the best of the sweeps after the first (X is placed during the first);
# TensorLy's is the best gap between consecutive callbacks. Words moved per sweep (all ranks)
# stand beside the MTTKRPs' SOAP lower bound on the words a rank touches and the words the
# plans' busiest rank touches. The baseline's command unsets OPENBLAS_CORETYPE and
# OPENBLAS_L2_SIZE so that NumPy's OpenBLAS picks its own kernel (deinsum's runs keep them).
# Writes crates/deinsum/benches/RESULTS.md with the machine's load.
#
# Usage: crates/deinsum/benches/cp_als.sh [--quick]   (--quick: 64^3 and 12^5)
# Environment: PYTHON (a Python with numpy and tensorly; default: a venv in
# $TARGET/cp-als-venv made on first use), SWEEPS (4), CARGO_TARGET_DIR, MPIRUN (default
# mpirun.openmpi where installed, else mpirun), NOTE (a line added to RESULTS.md).
set -eu
cd "$(dirname "$0")/../../.."
SWEEPS=${SWEEPS:-4}
TARGET=${CARGO_TARGET_DIR:-target}
if [ "${1:-}" = "--quick" ]; then
    CASES="64,64,64:32 12,12,12,12,12:32"
else
    CASES="256,256,256:32 24,24,24,24,24:32"
fi
if [ -z "${MPIRUN:-}" ]; then
    if command -v mpirun.openmpi >/dev/null 2>&1; then MPIRUN=mpirun.openmpi; else MPIRUN=mpirun; fi
fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_btl_vader_single_copy_mechanism=none
if [ -z "${PYTHON:-}" ]; then
    VENV="$TARGET/cp-als-venv"
    if ! "$VENV/bin/python" -c "import numpy, tensorly" 2>/dev/null; then
        echo "# making $VENV with numpy and tensorly from PyPI" >&2
        python3 -m venv "$VENV"
        "$VENV/bin/pip" install -q numpy tensorly
    fi
    PYTHON="$VENV/bin/python"
fi
cargo build -q --release -p deinsum --features mpi --example cp_als
EX="$TARGET/release/examples/cp_als"
OUT=crates/deinsum/benches/RESULTS.md
TMP=$(mktemp)
trap 'rm -f "$TMP" "$TMP.run"' EXIT

# Best seconds of the sweeps after the first, from the example's "sweep t: ... <s> s" lines.
best_after_first() {
    awk '/sweep [0-9]+:/ { n++; if (n > 1) { for (i = 1; i <= NF; i++) if ($(i+1) == "s") { v = $i; if (best == "" || v < best) best = v } } } END { print best }'
}
# The value after the words `$1 $2` on the second sweep's line ("words moved", "bound/rank").
second_sweep() {
    awk -v a="$1" -v b="$2" '/sweep 2:/ { for (i = 1; i < NF; i++) if ($i == a && $(i+1) == b) { print $(i+2); exit } }'
}
# Compilers and linkers running now (other builds on this machine).
builds() { ps -eo comm= | grep -c -E '^(rustc|cc|ld|cargo|maturin)' || true; }

{
    echo "# CP-ALS: one sweep on a deinsum Session against TensorLy"
    echo
    echo "Written by \`crates/deinsum/benches/cp_als.sh\` on $(date -u '+%Y-%m-%d %H:%M UTC'),"
    echo "$(nproc) cores, load average before the run: $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "($(builds) compiler/linker/cargo processes running at the start)."
    if [ -n "${NOTE:-}" ]; then
        echo
        echo "$NOTE"
    fi
    echo
    echo "$SWEEPS sweeps per run; seconds per sweep are the best sweep after the first (X is"
    echo "placed during the first). TensorLy: \`parafac\` (NumPy backend, same shapes and rank,"
    echo "\`normalize_factors=False\`), OPENBLAS_NUM_THREADS=2, OPENBLAS_CORETYPE and"
    echo "OPENBLAS_L2_SIZE unset for it only. deinsum: P=1 with 2 threads; P=2 in process and P=2"
    echo "under \`$MPIRUN -n 2\` (\`--backend mpi\`) with 1 thread a rank. \"words/sweep\" are all"
    echo "ranks' received words in the second sweep (in process / MPI: they must be equal);"
    echo "\"touched/rank\" the words the busiest rank of the sweep's MTTKRP plans touches"
    echo "(resident or received), \"SOAP/rank\" the SOAP lower bound on that quantity (both summed"
    echo "over the sweep's MTTKRPs, P=2)."
    echo
    echo "| tensor | R | TensorLy s/sweep | P=1x2 s/sweep | P=2 s/sweep | P=2 MPI s/sweep | best / TensorLy | P=2 words/sweep (in process / MPI) | touched/rank | SOAP/rank |"
    echo "|---|---|---|---|---|---|---|---|---|---|"
} > "$TMP"

for case in $CASES; do
    shape=${case%%:*}
    r=${case##*:}
    tl=$(env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OPENBLAS_NUM_THREADS=2 "$PYTHON" - "$shape" "$r" "$SWEEPS" <<'PYEOF'
import sys, time
import numpy as np
import tensorly as tl
from tensorly.cp_tensor import CPTensor
from tensorly.decomposition import parafac
shape = tuple(int(n) for n in sys.argv[1].split(","))
r, sweeps = int(sys.argv[2]), int(sys.argv[3])
rng = np.random.default_rng(0)
x = rng.uniform(-1, 1, shape)
init = [rng.uniform(-1, 1, (n, r)) for n in shape]
stamps = []
parafac(x, r, n_iter_max=sweeps, init=CPTensor((np.ones(r), init)), tol=0, return_errors=True,
        normalize_factors=False, callback=lambda *_: stamps.append(time.perf_counter()))
print(min(b - a for a, b in zip(stamps[1:], stamps[2:])))
PYEOF
)
    p1=$("$EX" --procs 1 --threads 2 --shape "$shape" --rank "$r" --sweeps "$SWEEPS" --no-check | best_after_first)
    "$EX" --procs 2 --shape "$shape" --rank "$r" --sweeps "$SWEEPS" --no-check > "$TMP.run"
    p2=$(best_after_first < "$TMP.run")
    words=$(second_sweep words moved < "$TMP.run")
    touched=$(awk '/sweep 2:/ { for (i = 1; i < NF; i++) if ($i == "touched/rank") { print $(i+1); exit } }' "$TMP.run")
    soap=$(awk '/sweep 2:/ { for (i = 1; i < NF; i++) if ($i == "bound/rank") { print $(i+1); exit } }' "$TMP.run")
    "$MPIRUN" -n 2 "$EX" --backend mpi --procs 2 --shape "$shape" --rank "$r" --sweeps "$SWEEPS" \
        --no-check </dev/null > "$TMP.run"
    pm=$(best_after_first < "$TMP.run")
    mwords=$(second_sweep words moved < "$TMP.run")
    best=$(printf '%s\n%s\n%s\n' "$p1" "$p2" "$pm" | sort -g | head -1)
    ratio=$(awk -v a="$best" -v b="$tl" 'BEGIN { printf "%.2f", a / b }')
    echo "| $shape | $r | $tl | $p1 | $p2 | $pm | $ratio | $words / $mwords | $touched | $soap |" >> "$TMP"
done
echo >> "$TMP"
echo "Load average after the run: $(cut -d' ' -f1-3 /proc/loadavg) ($(builds) compiler/linker/cargo processes running)." >> "$TMP"
mv "$TMP" "$OUT"
rm -f "$TMP.run"
trap - EXIT
cat "$OUT"
