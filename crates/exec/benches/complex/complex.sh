#!/bin/sh
# Complex kernels at P = 2 against NumPy and opt_einsum (issue 38, item 6), in one command:
# complex128 MM 2048, the norm of a 15-site MPS at bond dimension 32 (30 operands) and the
# CCSD-like `abij,cdab->cdij` (a-d 48, i-j 16). Per round and kernel, one right after the
# other so that all see the same load: NumPy's `einsum(optimize=True)` and opt_einsum's
# `contract` with 2 BLAS threads (baseline.py, one process), then `deinsum run --dtype c128
# --procs 2 --threads 1` in process. Times are of the contraction alone (operands made
# beforehand; NumPy's and opt_einsum's calls include their path search, deinsum's planning is
# timed apart as `deinsum plan`), the median of --repeat runs after one warm-up; each side keeps
# its best round median. Writes crates/exec/benches/complex/RESULTS.md with the machine's load
# before and after (figures marked provisional above a load of 1.5).
#
# NumPy's process runs with OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE unset (as NumPy's users get
# it); nothing else in the environment is changed.
#
# Usage: crates/exec/benches/complex/complex.sh [--quick]
# Environment: PYTHON (a Python with numpy and opt_einsum; default: a venv in
# $TARGET/e2e-venv, numpy and opt_einsum from PyPI added on first use), DEINSUM_BIN (a release
# deinsum binary; default: built here with cargo build --release), REPEAT (5), ROUNDS (2),
# GEMMS (the `--gemm` libraries deinsum runs with, each its own rows; default `faer`; `faer blas`
# needs a binary built with `--features blas`, whose Debian OpenBLAS 0.3.21 gets
# OPENBLAS_CORETYPE=SkylakeX in deinsum's command only), CARGO_TARGET_DIR.
set -eu
cd "$(dirname "$0")/../../../.."
REPEAT=${REPEAT:-5}
ROUNDS=${ROUNDS:-2}
GEMMS=${GEMMS:-faer}
QUICK=""
if [ "${1:-}" = "--quick" ]; then QUICK="--quick"; fi
TARGET=${CARGO_TARGET_DIR:-target}
if [ -z "${PYTHON:-}" ]; then
    VENV="$TARGET/e2e-venv"
    if ! "$VENV/bin/python" -c "import numpy, opt_einsum" 2>/dev/null; then
        echo "# making $VENV with numpy and opt_einsum from PyPI" >&2
        [ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
        "$VENV/bin/pip" install -q numpy opt_einsum
    fi
    PYTHON="$VENV/bin/python"
fi
if [ -z "${DEINSUM_BIN:-}" ]; then
    cargo build --release -q -p deinsum
    DEINSUM_BIN="$TARGET/release/deinsum"
fi
BASE=crates/exec/benches/complex/baseline.py
OUT=$(mktemp)
trap 'rm -f "$OUT"' EXIT
NUMPY_ENV="env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE OPENBLAS_NUM_THREADS=2 OMP_NUM_THREADS=2"
$NUMPY_ENV "$PYTHON" -c "import json, numpy as np, opt_einsum as oe; b = np.show_config(mode='dicts')['Build Dependencies']['blas']; print(json.dumps({'row': 'versions', 'numpy': np.__version__ + ', BLAS ' + b.get('name', '?') + ' ' + str(b.get('version', '?')), 'opt_einsum': oe.__version__}))" >>"$OUT"
echo "{\"row\": \"load_before\", \"uptime\": \"$(uptime)\"}" >>"$OUT"
$NUMPY_ENV "$PYTHON" $BASE --list $QUICK >"$OUT.cases"
while IFS="$(printf '\t')" read -r name expr sizes madds; do
    t0=$(date +%s.%N)
    "$DEINSUM_BIN" plan "$expr" --sizes "$sizes" --procs 2 >/dev/null </dev/null
    t1=$(date +%s.%N)
    echo "{\"row\": \"plan\", \"case\": \"$name\", \"seconds\": $(awk "BEGIN { print $t1 - $t0 }"), \"madds\": $madds, \"sizes\": \"$sizes\"}" >>"$OUT"
done <"$OUT.cases"
# Debian's OpenBLAS 0.3.21 picks no AVX-512 kernel here by itself: SkylakeX for --gemm blas only.
blas_env() {
    g=$1
    shift
    if [ "$g" = blas ]; then OPENBLAS_CORETYPE=SkylakeX "$@"; else "$@"; fi
}
round=1
while [ "$round" -le "$ROUNDS" ]; do
    while IFS="$(printf '\t')" read -r name expr sizes madds; do
        echo "# round $round: $name" >&2
        $NUMPY_ENV "$PYTHON" $BASE --case "$name" --repeat "$REPEAT" $QUICK </dev/null |
            sed "s/^{/{\"row\": \"baseline\", \"round\": $round, /" >>"$OUT"
        for gemm in $GEMMS; do
            blas_env "$gemm" "$DEINSUM_BIN" run "$expr" --sizes "$sizes" --dtype c128 \
                --procs 2 --threads 1 --gemm "$gemm" --repeat "$REPEAT" --warmup 1 --format json \
                </dev/null |
                "$PYTHON" -c "import json,sys; d=json.load(sys.stdin); print(json.dumps({'row':'deinsum','gemm':'$gemm','case':'$name','round':$round,'min':d['contraction_seconds_min'],'median':d['contraction_seconds_median'],'exact':d['volume_exact'],'dtype':d['dtype'],'path':d['path']}))" >>"$OUT"
        done
    done <"$OUT.cases"
    round=$((round + 1))
done
echo "{\"row\": \"load_after\", \"uptime\": \"$(uptime)\"}" >>"$OUT"
rm -f "$OUT.cases"
CPU=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')
"$PYTHON" - "$OUT" "$CPU" "$(nproc)" "$REPEAT" "$ROUNDS" "$DEINSUM_BIN" "$QUICK" \
    >crates/exec/benches/complex/RESULTS.md <<'PY'
import json, re, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
cpu, cores, reps, rounds, binary, quick = sys.argv[2:8]
one = lambda kind: next(r for r in rows if r["row"] == kind)
load = lambda r: float(re.search(r"load average: ([0-9.]+)", r["uptime"]).group(1))
peak_load = max(load(one("load_before")), load(one("load_after")))
print("# Complex kernels at P = 2 against NumPy and opt_einsum (issue 38, item 6)\n")
print("Written by `crates/exec/benches/complex/complex.sh`" + (" --quick" if quick else "")
      + "; everything below was measured in that one command.\n")
print(f"- processor: {cpu}, {cores} logical cores")
v = one("versions")
print(f"- NumPy {v['numpy']}, opt_einsum {v['opt_einsum']}: one process, 2 BLAS threads, "
      "`OPENBLAS_CORETYPE` and `OPENBLAS_L2_SIZE` unset (in that command only)")
gemms = list(dict.fromkeys(r["gemm"] for r in rows if r["row"] == "deinsum"))
print(f"- deinsum: `{binary}` (release), `run --dtype c128 --procs 2 --threads 1 --gemm G` (2 "
      f"in-process ranks, one thread each) for G in {', '.join(gemms)}"
      + ("; `--gemm blas` is Debian's OpenBLAS with `OPENBLAS_CORETYPE=SkylakeX` in that command"
         if "blas" in gemms else ""))
print(f"- median of {reps} timed runs after one warm-up, best of {rounds} rounds per side; "
      "deinsum's times are the contraction alone (its planning is the `plan s` column, "
      "`deinsum plan` wall time including process start); NumPy's and opt_einsum's include "
      "their path search, as a call does")
print(f"- load before: `{one('load_before')['uptime'].strip()}`")
print(f"- load after: `{one('load_after')['uptime'].strip()}`")
if peak_load > 1.5:
    print(f"- **provisional**: the 1-minute load reached {peak_load:.2f} (> 1.5) on {cores} cores; "
          "other jobs shared the cores, so every figure is a lower bound on speed and the "
          "ratios may move between runs")
print()
print("| kernel | sizes | --gemm | deinsum s | NumPy s | opt_einsum s | deinsum / NumPy | deinsum / opt_einsum | deinsum GFLOP/s | plan s |")
print("|---|---|---|---|---|---|---|---|---|---|")
for p, gemm in [(r, g) for r in rows if r["row"] == "plan" for g in gemms]:
    name = p["case"]
    mine = [r for r in rows if r["row"] == "deinsum" and r["case"] == name and r["gemm"] == gemm]
    d = min(r["median"] for r in mine)
    exact = all(r["exact"] for r in mine)
    b = [r for r in rows if r["row"] == "baseline" and r["case"] == name]
    n = min(r["numpy_median"] for r in b)
    o = min(r["oe_median"] for r in b)
    gf = 8 * p["madds"] / d / 1e9
    sizes = p["sizes"] if len(p["sizes"]) < 40 else "15 sites, bond 32, physical 2"
    label = {"mm": "MM `ij,jk->ik`", "mps30": "MPS norm, 30 operands", "ccsd": "CCSD-like `abij,cdab->cdij`"}.get(name, name)
    print(f"| {label}{'' if exact else ' (words NOT as planned)'} | {sizes} | {gemm} | {d:.4f} | {n:.4f} | {o:.4f} | "
          f"{d / n:.2f}x | {d / o:.2f}x | {gf:.1f} | {p['seconds']:.2f} |")
print("\nTarget (issue 38, item 6): deinsum <= 1.0x NumPy's time. GFLOP/s count 8 real flops "
      "per complex multiply-add of opt_einsum's path.")
PY
cat crates/exec/benches/complex/RESULTS.md
