#!/bin/sh
# GEMM against the core's peak (issue 38, item 4), in one command: the bench `peak` (the FMA
# peak, one-thread GEMM of faer and the system OpenBLAS at n = 1024, 2048 in f64, f32, c128,
# c64, and MM 2048 at P = 2 per library), then NumPy's MM 2048 with 2 BLAS threads, right
# after. Writes crates/exec/benches/peak/RESULTS.md.
#
# Debian's OpenBLAS 0.3.21 gets OPENBLAS_CORETYPE=SkylakeX (it does not pick an AVX-512 kernel
# on newer processors by itself); NumPy runs with OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE
# unset, as its users get it. Nothing else in the environment is changed.
#
# Usage: crates/exec/benches/peak/peak.sh [--quick]
# Environment: PYTHON (a Python with numpy; default: a venv in $TARGET/e2e-venv with numpy
# from PyPI, made on first use), CARGO_TARGET_DIR.
set -eu
cd "$(dirname "$0")/../../../.."
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
OUT=$(mktemp)
trap 'rm -f "$OUT"' EXIT
cargo bench -q -p deinsum-exec --features blas --bench peak --no-run 2>/dev/null
echo "{\"row\":\"load_before\",\"uptime\":\"$(uptime)\"}" >>"$OUT"
OPENBLAS_CORETYPE=SkylakeX cargo bench -q -p deinsum-exec --features blas --bench peak -- $QUICK >>"$OUT"
env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OPENBLAS_NUM_THREADS=2 OMP_NUM_THREADS=2 \
    "$PYTHON" crates/exec/benches/numpy_baseline.py --case mm --repeat 7 $QUICK |
    sed 's/^{/{"row": "numpy_mm", /' >>"$OUT"
echo "{\"row\":\"load_after\",\"uptime\":\"$(uptime)\"}" >>"$OUT"
env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE "$PYTHON" -c "import json, numpy as np; b = np.show_config(mode='dicts')['Build Dependencies']['blas']; print(json.dumps({'row': 'numpy', 'version': np.__version__ + ', BLAS ' + b.get('name', '?') + ' ' + str(b.get('version', '?'))}))" >>"$OUT"
CPU=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')
OBLAS=$(dpkg-query -W -f='${Version}' libopenblas0-pthread 2>/dev/null || dpkg-query -W -f='${Version}' libopenblas0 2>/dev/null || echo '?')
"$PYTHON" - "$OUT" "$CPU" "$(nproc)" "$OBLAS" "$QUICK" >crates/exec/benches/peak/RESULTS.md <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
cpu, cores, oblas, quick = sys.argv[2:6]
one = lambda kind: next(r for r in rows if r["row"] == kind)
peak = one("peak")
print("# GEMM against the core's peak (issue 38, item 4)\n")
print("Written by `crates/exec/benches/peak/peak.sh`" + (" --quick" if quick else "") + "; "
      "everything below was measured in that one command. Rates are one thread, best of 3-5 "
      "calls after a warm-up; a complex multiply-add counts 8 real flops. The peak is 16 "
      "independent chains of FMAs on the widest vectors (" + peak["level"] + "), the same run.\n")
print(f"- processor: {cpu}, {cores} logical cores")
print(f"- system BLAS: Debian OpenBLAS {oblas}, `OPENBLAS_CORETYPE=SkylakeX` (in the bench command only)")
print(f"- NumPy: {one('numpy')['version']}, 2 threads, `OPENBLAS_CORETYPE` and `OPENBLAS_L2_SIZE` unset")
print(f"- load before: `{one('load_before')['uptime']}`")
print(f"- load after: `{one('load_after')['uptime']}`")
print("- **provisional**: other jobs (other helpers' compilers) shared the 2 cores during the "
      "run; rates are lower bounds and vary between runs.\n")
print(f"FMA peak, one core: **{peak['f64_gflops']:.1f} GFLOP/s f64**, {peak['f32_gflops']:.1f} GFLOP/s f32.\n")
gem = [r for r in rows if r["row"] == "gemm"]
libs = sorted({r["lib"] for r in gem}, key=lambda l: l != "faer")
print("| n | dtype | " + " | ".join(f"{l} GFLOP/s | {l} of peak" for l in libs) + " |")
print("|---|---|" + "---|---|" * len(libs))
for n in sorted({r["n"] for r in gem}):
    for d in ["f64", "f32", "c128", "c64"]:
        cells = []
        for l in libs:
            r = next((r for r in gem if r["n"] == n and r["dtype"] == d and r["lib"] == l), None)
            cells += [f"{r['gflops']:.1f}", f"{r['of_peak']:.2f}"] if r else ["-", "-"]
        print(f"| {n} | {d} | " + " | ".join(cells) + " |")
print("\nTarget (issue 38): real and complex GEMM at >= 0.85 of the peak.\n")
np_mm = one("numpy_mm")
mm = [r for r in rows if r["row"] == "mm_p2"]
n = mm[0]["n"] if mm else "?"
print(f"MM {n} (`ij,jk->ik`, f64) at P = 2, one thread per rank, in process: median "
      "contraction seconds of 7 runs after a warm-up (the slowest rank), against NumPy's "
      "`einsum(optimize=True)` median of 7 with 2 threads.\n")
print("| GEMM library | deinsum s | NumPy s | ratio |")
print("|---|---|---|---|")
for r in mm:
    print(f"| {r['lib']} | {r['median_seconds']:.4f} | {np_mm['median']:.4f} | "
          f"{r['median_seconds'] / np_mm['median']:.2f} |")
print("\nTarget (issue 38): ratio <= 0.9.")
PY
cat crates/exec/benches/peak/RESULTS.md
