#!/bin/sh
# One CP-ALS sweep on a deinsum Session (examples/cp_als.rs, release) beside TensorLy's parafac
# (NumPy backend, 2 BLAS threads, in the same run): a 256^3 tensor at R=32 and an order-5
# tensor (24^5) at R=32, deinsum at P=1 (2 threads) and P=2 in process (1 thread per rank). The time per sweep is the best of
# the sweeps after the first (X is placed during the first); TensorLy's is the best gap between
# consecutive callbacks. The baseline's command unsets OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE so
# that NumPy's OpenBLAS picks its own kernel. Writes crates/deinsum/benches/RESULTS.md with the
# machine's load.
#
# Usage: crates/deinsum/benches/cp_als.sh [--quick]   (--quick: 64^3 and 12^5)
# Environment: PYTHON (a Python with numpy and tensorly; default: a venv in
# $TARGET/cp-als-venv made on first use), SWEEPS (4), CARGO_TARGET_DIR.
set -eu
cd "$(dirname "$0")/../../.."
SWEEPS=${SWEEPS:-4}
TARGET=${CARGO_TARGET_DIR:-target}
if [ "${1:-}" = "--quick" ]; then
    CASES="64,64,64:32 12,12,12,12,12:32"
else
    CASES="256,256,256:32 24,24,24,24,24:32"
fi
if [ -z "${PYTHON:-}" ]; then
    VENV="$TARGET/cp-als-venv"
    if ! "$VENV/bin/python" -c "import numpy, tensorly" 2>/dev/null; then
        echo "# making $VENV with numpy and tensorly from PyPI" >&2
        python3 -m venv "$VENV"
        "$VENV/bin/pip" install -q numpy tensorly
    fi
    PYTHON="$VENV/bin/python"
fi
cargo build -q --release -p deinsum --example cp_als
EX="$TARGET/release/examples/cp_als"
OUT=crates/deinsum/benches/RESULTS.md
TMP=$(mktemp)
trap 'rm -f "$TMP"' EXIT

# Best seconds of the sweeps after the first, from the example's "sweep t: ... <s> s" lines.
best_after_first() {
    awk '/sweep [0-9]+:/ { n++; if (n > 1) { for (i = 1; i <= NF; i++) if ($(i+1) == "s") { v = $i; if (best == "" || v < best) best = v } } } END { print best }'
}

{
    echo "# CP-ALS: one sweep on a deinsum Session against TensorLy"
    echo
    echo "Written by \`crates/deinsum/benches/cp_als.sh\` on $(date -u '+%Y-%m-%d %H:%M UTC'),"
    echo "$(nproc) cores, load average before the run: $(cut -d' ' -f1-3 /proc/loadavg)."
    echo "$SWEEPS sweeps per run; seconds per sweep are the best sweep after the first (X is"
    echo "placed during the first). TensorLy: \`parafac\` (NumPy backend, same initial factors,"
    echo "\`normalize_factors=False\`), OPENBLAS_NUM_THREADS=2, OPENBLAS_CORETYPE and"
    echo "OPENBLAS_L2_SIZE unset for it only. deinsum: P=1 with 2 threads, P=2 with 1 thread a rank. \"words/sweep\" are all"
    echo "ranks' received words in one sweep after the first."
    echo
    echo "| tensor | R | TensorLy s/sweep | deinsum P=1x2 s/sweep | deinsum P=2 s/sweep | P=2 words/sweep | P=2 / TensorLy |"
    echo "|---|---|---|---|---|---|---|"
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
parafac(x, r, n_iter_max=sweeps, init=CPTensor((np.ones(r), init)), tol=0,
        normalize_factors=False, callback=lambda *_: stamps.append(time.perf_counter()))
print(min(b - a for a, b in zip(stamps[1:], stamps[2:])))
PYEOF
)
    p1=$("$EX" --procs 1 --threads 2 --shape "$shape" --rank "$r" --sweeps "$SWEEPS" --no-check | best_after_first)
    "$EX" --procs 2 --shape "$shape" --rank "$r" --sweeps "$SWEEPS" --no-check > "$TMP.p2"
    p2=$(best_after_first < "$TMP.p2")
    words=$(awk '/sweep 2:/ { for (i = 1; i <= NF; i++) if ($i == "moved") { print $(i+1); exit } }' "$TMP.p2")
    ratio=$(awk -v a="$p2" -v b="$tl" 'BEGIN { printf "%.2f", a / b }')
    echo "| $shape | $r | $tl | $p1 | $p2 | $words | $ratio |" >> "$TMP"
    rm -f "$TMP.p2"
done
echo >> "$TMP"
echo "Load average after the run: $(cut -d' ' -f1-3 /proc/loadavg)." >> "$TMP"
mv "$TMP" "$OUT"
trap - EXIT
cat "$OUT"
