#!/usr/bin/env bash
# The MPI suite of deinsum (called by .ci/run): installs Open MPI when missing, builds with
# `--features mpi`, runs the MPI test programs and the examples under mpirun -n 1,2,3,4,8,
# then the Python package on mpi4py (a venv, the wheel with `--features mpi`, python/tests_mpi
# under mpirun -n 1,2,3,4), and ends with the line "N passed, M failed". Exit status non-zero
# on any failure.
#
# Environment: DEINSUM_MPI_NPS (default "1 2 3 4 8"), DEINSUM_PY_MPI_NPS (default "1 2 3 4"),
# CARGO_TARGET_DIR (shared with the feature-less build so dependencies are reused),
# DEINSUM_MPI_TIMEOUT seconds per run (300), PYTHON (default python3), DEINSUM_PY_MPI_VENV
# (default $CARGO_TARGET_DIR/py-mpi-venv).
set -u
cd "$(dirname "$0")/.."

passed=0
failed=0
ok() { passed=$((passed + 1)); echo "ok     $*"; }
bad() { failed=$((failed + 1)); echo "FAILED $*"; }
finish() {
    echo "$passed passed, $failed failed"
    if [ "$failed" -eq 0 ]; then exit 0; else exit 1; fi
}

# --- Open MPI ----------------------------------------------------------------------------
as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else "$@"; fi; }
have_pkgs() { dpkg -s libopenmpi-dev openmpi-bin libclang-dev >/dev/null 2>&1; }
if ! command -v mpirun >/dev/null 2>&1 || ! have_pkgs; then
    echo "installing Open MPI (libopenmpi-dev openmpi-bin libclang-dev)"
    as_root apt-get update -qq && DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq \
        libopenmpi-dev openmpi-bin libclang-dev >/dev/null
    if ! command -v mpirun >/dev/null 2>&1; then
        bad "install Open MPI"
        finish
    fi
fi
# Where MPICH is installed too, pin Open MPI's wrapper and launcher.
MPIRUN=mpirun
if command -v mpirun.openmpi >/dev/null 2>&1; then
    MPIRUN=mpirun.openmpi
    export MPICC=mpicc.openmpi
fi
export DEINSUM_MPIRUN="$MPIRUN"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
# Containers often lack the shared-memory size and ptrace settings vader's CMA wants.
export OMPI_MCA_btl_vader_single_copy_mechanism=none
"$MPIRUN" --version | head -1

NPS="${DEINSUM_MPI_NPS:-1 2 3 4 8}"
TIMEOUT="${DEINSUM_MPI_TIMEOUT:-300}"

# --- build -------------------------------------------------------------------------------
build_log=$(mktemp)
if cargo test -p deinsum --features mpi --test mpi_collectives --test mpi_kernels --test mpi_sparse \
    --test mpi_session --no-run \
    --message-format=json >"$build_log" 2>"$build_log.err" \
    && cargo build -p deinsum --features mpi --examples --bin deinsum 2>>"$build_log.err"; then
    ok "build --features mpi"
else
    tail -40 "$build_log.err"
    bad "build --features mpi"
    finish
fi
exe_of() { grep -o "\"executable\":\"[^\"]*/$1-[^\"]*\"" "$build_log" | head -1 | sed 's/.*:"\(.*\)"/\1/'; }
target_dir="${CARGO_TARGET_DIR:-target}"

# run NAME EXPECTED_STATUS(0|nonzero) -- mpirun args...
run() {
    local name=$1 want=$2
    shift 3
    local out
    out=$(timeout "$TIMEOUT" "$MPIRUN" "$@" 2>&1)
    local st=$?
    if { [ "$want" = 0 ] && [ $st -eq 0 ]; } || { [ "$want" = nonzero ] && [ $st -ne 0 ] && [ $st -ne 124 ]; }; then
        ok "$name"
    else
        echo "$out" | tail -30
        bad "$name (exit $st)"
    fi
}

# --- MPI test programs -------------------------------------------------------------------
for t in mpi_collectives mpi_kernels mpi_sparse mpi_session; do
    exe=$(exe_of "$t")
    if [ -z "$exe" ]; then
        bad "$t: executable not found"
        continue
    fi
    for n in $NPS; do
        DEINSUM_MPI_EXPECT=$n run "$t -n $n" 0 -- -n "$n" "$exe"
    done
done
# The world-size assertion fires: a program told to expect 3 ranks but started on 2 fails.
exe=$(exe_of mpi_collectives)
[ -n "$exe" ] && DEINSUM_MPI_EXPECT=3 run "world-size assertion (expect 3, run 2) fails" nonzero -- -n 2 "$exe"

# One rank's error aborts the whole job with that rank's message (no hang: the timeout is 124).
if [ -n "$exe" ]; then
    out=$(DEINSUM_MPI_INJECT_ERROR=1 DEINSUM_MPI_EXPECT=3 timeout "$TIMEOUT" "$MPIRUN" -n 3 "$exe" 2>&1)
    st=$?
    if [ $st -ne 0 ] && [ $st -ne 124 ] && echo "$out" | grep -q "rank 2: injected failure"; then
        ok "a rank's error aborts the job with its message"
    else
        echo "$out" | tail -20
        bad "a rank's error aborts the job with its message (exit $st)"
    fi
fi

# --- examples ----------------------------------------------------------------------------
for ex in mttkrp ttmc matrix_chain; do
    for n in $NPS; do
        run "example $ex -n $n" 0 -- -n "$n" "$target_dir/debug/examples/$ex"
    done
done
# The examples parse their flags: --help exits 0 without running, an unknown flag exits 2.
for ex in mttkrp ttmc matrix_chain; do
    run "example $ex --help" 0 -- -n 2 "$target_dir/debug/examples/$ex" --help
    run "example $ex refuses an unknown flag" nonzero -- -n 2 "$target_dir/debug/examples/$ex" --bogus
done
# The session applications on the MPI world (--backend mpi): each sweep's fit equals the serial
# CP-ALS / HOOI and the same run on as many in-process ranks, X moves nothing from the second
# sweep on, and --procs asserts the world's size (a mismatch exits 2).
for ex in cp_als tucker_hooi; do
    for n in 1 2 3; do
        out=$(timeout "$TIMEOUT" "$MPIRUN" -n "$n" "$target_dir/debug/examples/$ex" --backend mpi \
            --procs "$n" </dev/null 2>&1)
        st=$?
        if [ $st -eq 0 ] && [ "$(echo "$out" | grep -c "on $n ranks.*(MPI)")" -eq 2 ] \
            && echo "$out" | grep -q "in-process .* ok" && ! echo "$out" | grep -q "MISMATCH\|MOVED"; then
            ok "example $ex --backend mpi -n $n"
        else
            echo "$out" | tail -20
            bad "example $ex --backend mpi -n $n (exit $st)"
        fi
    done
    out=$(timeout "$TIMEOUT" "$MPIRUN" -n 2 "$target_dir/debug/examples/$ex" --backend mpi \
        --procs 3 </dev/null 2>&1)
    st=$?
    if [ $st -eq 2 ] && echo "$out" | grep -q "the MPI world has 2 ranks"; then
        ok "example $ex --backend mpi --procs 3 under -n 2 exits 2"
    else
        echo "$out" | tail -20
        bad "example $ex --backend mpi --procs 3 under -n 2 exits 2 (exit $st)"
    fi
done
# The examples' check can fail: a perturbed serial reference must give a non-zero exit.
DEINSUM_EXAMPLE_PERTURB=1 run "example mttkrp with a wrong reference fails" nonzero -- -n 2 "$target_dir/debug/examples/mttkrp"

# --- the CLI on MPI -----------------------------------------------------------------------
for n in $NPS; do
    run "deinsum run --backend mpi --check -n $n" 0 -- -n "$n" "$target_dir/debug/deinsum" run \
        "ijk,ja,ka,al->il" --sizes i=7,j=6,k=8,a=5,l=9 --procs "$n" --backend mpi --check
done

# Sparse operands under mpirun: each kernel checked against the dense serial einsum, every
# rank's words exactly as planned, one report (rank 0's).
for n in $NPS; do
    for args in "ij,jk->ik --sparse 0 --density 0.1 --sizes i=37,j=29,k=3" \
        "ij,ik,jk->ij --sparse 0 --density 0.1 --sizes i=31,j=23,k=4" \
        "ij,jk->ik --sparse 0,1 --density 0.1 --sizes i=29,j=31,k=17" \
        "ijk,ia,ka->ja --density 0.05 --sizes i=11,j=9,k=7,a=4"; do
        # shellcheck disable=SC2086
        out=$(timeout "$TIMEOUT" "$MPIRUN" -n "$n" "$target_dir/debug/deinsum" run $args --check 2>&1)
        st=$?
        if [ $st -eq 0 ] && [ "$(echo "$out" | grep -c "(MPI)")" -eq 1 ] \
            && echo "$out" | grep -q "exactly the planned words" && echo "$out" | grep -q ": ok"; then
            ok "sparse run $args -n $n"
        else
            echo "$out" | tail -20
            bad "sparse run $args -n $n (exit $st)"
        fi
    done
done
# Complex operands under mpirun (c128 and c64, P up to 5): dense and sparse runs checked
# against the serial complex reference (the magnitude of the difference), every rank's words
# as planned, one report (rank 0's) naming the dtype.
for n in 1 2 3 5; do
    for dtype in c128 c64; do
        out=$(timeout "$TIMEOUT" "$MPIRUN" -n "$n" "$target_dir/debug/deinsum" run \
            "ijk,ja,ka,al->il" --sizes i=7,j=6,k=8,a=5,l=9 --backend mpi --dtype "$dtype" \
            --check --format json 2>&1)
        st=$?
        if [ $st -eq 0 ] && [ "$(echo "$out" | grep -c "\"dtype\": \"$dtype\"")" -eq 1 ] \
            && echo "$out" | grep -q "\"procs\": $n,"; then
            ok "dense --dtype $dtype --check under mpirun -n $n"
        else
            echo "$out" | tail -20
            bad "dense --dtype $dtype --check under mpirun -n $n (exit $st)"
        fi
        for args in "ij,jk->ik --sparse 0 --density 0.1 --sizes i=37,j=29,k=3" \
            "ij,j->i --sparse 0 --density 0.1 --sizes i=37,j=37 --spmv-scheme fine" \
            "ij,ik,jk->ij --sparse 0 --density 0.1 --sizes i=31,j=23,k=4" \
            "ij,jk->ik --sparse 0,1 --density 0.1 --sizes i=29,j=31,k=17" \
            "ijk,ia,ka->ja --density 0.05 --sizes i=11,j=9,k=7,a=4"; do
            # shellcheck disable=SC2086
            out=$(timeout "$TIMEOUT" "$MPIRUN" -n "$n" "$target_dir/debug/deinsum" run $args \
                --dtype "$dtype" --check 2>&1)
            st=$?
            if [ $st -eq 0 ] && [ "$(echo "$out" | grep -c "(MPI, $dtype)")" -eq 1 ] \
                && echo "$out" | grep -q "exactly the planned words" && echo "$out" | grep -q ": ok"; then
                ok "sparse run $args --dtype $dtype -n $n"
            else
                echo "$out" | tail -20
                bad "sparse run $args --dtype $dtype -n $n (exit $st)"
            fi
        done
    done
done
# A sparse result written under mpirun (by rank 0, from the gathered entries) is the file the
# in-process ranks write, byte for byte, in every format.
out_dir=$(mktemp -d)
spgemm="ij,jk->ik --sparse 0,1 --density 0.1 --sizes i=29,j=31,k=17"
# In complex too (FROSTT has no complex values: .tns is refused).
for ext in mtx npz npy; do
    # shellcheck disable=SC2086
    "$target_dir/debug/deinsum" run $spgemm --dtype c128 --procs 3 \
        --output "$out_dir/local-c.$ext" >/dev/null
    # shellcheck disable=SC2086
    if timeout "$TIMEOUT" "$MPIRUN" -n 3 "$target_dir/debug/deinsum" run $spgemm --dtype c128 \
        --output "$out_dir/mpi-c.$ext" >/dev/null 2>&1 \
        && cmp -s "$out_dir/local-c.$ext" "$out_dir/mpi-c.$ext"; then
        ok "complex sparse --output .$ext under mpirun -n 3 equals in-process"
    else
        bad "complex sparse --output .$ext under mpirun -n 3 equals in-process"
    fi
done
for ext in mtx tns npz npy; do
    # shellcheck disable=SC2086
    "$target_dir/debug/deinsum" run $spgemm --procs 3 --output "$out_dir/local.$ext" >/dev/null
    # shellcheck disable=SC2086
    if timeout "$TIMEOUT" "$MPIRUN" -n 3 "$target_dir/debug/deinsum" run $spgemm \
        --output "$out_dir/mpi.$ext" >/dev/null 2>&1 \
        && cmp -s "$out_dir/local.$ext" "$out_dir/mpi.$ext"; then
        ok "sparse --output .$ext under mpirun -n 3 equals in-process"
    else
        bad "sparse --output .$ext under mpirun -n 3 equals in-process"
    fi
done
rm -rf "$out_dir"

# An overlapped plan (pipelined phases: the next phase's windows in flight while one computes)
# runs exactly as planned and equals the serial result. It is planned for the built-in 8-core
# node, where a core is free to move the words: `run` without --machine plans for this host,
# whose cores are all busy computing under mpirun, and there overlap is left out.
ovl_dir=$(mktemp -d)
for n in 2 3 4; do
    "$target_dir/debug/deinsum" plan "ij,jk->ik" --sizes i=200,j=2100,k=210 --procs "$n" \
        -o "$ovl_dir/p$n.json" >/dev/null 2>&1
    out=$(timeout "$TIMEOUT" "$MPIRUN" -n "$n" "$target_dir/debug/deinsum" run \
        --plan "$ovl_dir/p$n.json" --backend mpi --check 2>&1)
    st=$?
    if [ $st -eq 0 ] && echo "$out" | grep -q "compute_phase" \
        && echo "$out" | grep -q "every rank exactly as planned"; then
        ok "overlapped plan under mpirun -n $n"
    else
        echo "$out" | tail -20
        bad "overlapped plan under mpirun -n $n (exit $st)"
    fi
done
rm -rf "$ovl_dir"

# Started by mpirun without --backend, the MPI build runs one MPI job (one report), not n.
for n in 3; do
    out=$(timeout "$TIMEOUT" "$MPIRUN" -n "$n" "$target_dir/debug/deinsum" run "ij,jk->ik" \
        --sizes i=7,j=5,k=6 --check 2>&1)
    st=$?
    if [ $st -eq 0 ] && [ "$(echo "$out" | grep -c "on $n ranks (MPI")" -eq 1 ]; then
        ok "mpirun -n $n deinsum run without --backend uses MPI"
    else
        echo "$out" | tail -20
        bad "mpirun -n $n deinsum run without --backend uses MPI (exit $st)"
    fi
done
# calibrate under mpirun measures the MPI link (not two in-process ranks), writes one file from
# rank 0 and records the node's cores and the ranks the launcher put on it.
cal_dir=$(mktemp -d)
out=$(timeout "$TIMEOUT" "$MPIRUN" -n 2 "$target_dir/debug/deinsum" calibrate --quick \
    -o "$cal_dir/m.json" 2>&1)
st=$?
if [ $st -eq 0 ] && [ "$(echo "$out" | grep -c "ping-pong (MPI, 2 ranks)")" -eq 1 ] \
    && [ "$(echo "$out" | grep -c "^wrote ")" -eq 1 ] \
    && grep -q '"ranks_per_node": 2' "$cal_dir/m.json" \
    && grep -q "\"cores_per_node\": $(getconf _NPROCESSORS_ONLN)," "$cal_dir/m.json" \
    && grep -q '(MPI, ' "$cal_dir/m.json"; then
    ok "mpirun -n 2 deinsum calibrate measures MPI, one file"
else
    echo "$out" | tail -20
    cat "$cal_dir/m.json" 2>/dev/null | head -40
    bad "mpirun -n 2 deinsum calibrate measures MPI, one file (exit $st)"
fi
rm -rf "$cal_dir"
# A saved plan runs exactly under mpirun; a plan for another world size is refused (exit 2).
plan_dir=$(mktemp -d)
"$target_dir/debug/deinsum" plan "ijk,ja,ka,al->il" --sizes i=7,j=6,k=8,a=5,l=9 --procs 3 \
    -o "$plan_dir/plan.json" >/dev/null
run "deinsum run --plan (P=3) -n 3" 0 -- -n 3 "$target_dir/debug/deinsum" run --plan "$plan_dir/plan.json" --check
out=$(timeout "$TIMEOUT" "$MPIRUN" -n 2 "$target_dir/debug/deinsum" run --plan "$plan_dir/plan.json" 2>&1)
st=$?
if [ $st -eq 2 ] && [ "$(echo "$out" | grep -c "the plan is for 3 ranks but the MPI world has 2")" -eq 1 ]; then
    ok "a plan for 3 ranks under mpirun -n 2 is refused once, exit 2"
else
    echo "$out" | tail -20
    bad "a plan for 3 ranks under mpirun -n 2 is refused once, exit 2 (exit $st)"
fi
# The issue's new-user run: extents from the files' headers (97x61 and 61x83), no extent flag.
"$target_dir/debug/deinsum" run "ij->ij" --sizes i=97,j=61 --output "$plan_dir/A.npy" >/dev/null
"$target_dir/debug/deinsum" run "jk->jk" --sizes j=61,k=83 --seed 1 --output "$plan_dir/B.npy" >/dev/null
run "deinsum run --inputs (extents from headers) -n 3" 0 -- -n 3 "$target_dir/debug/deinsum" run \
    "ij,jk->ik" --backend mpi --inputs "$plan_dir/A.npy, $plan_dir/B.npy" \
    --output "$plan_dir/C.npy" --check
# Files read in the compute layout: each rank reads its compute block of A and B, so the
# report's words for both inputs are 0 (read in place), and every step moves the planned words.
for n in 2 3 4; do
    out=$(timeout "$TIMEOUT" "$MPIRUN" -n "$n" "$target_dir/debug/deinsum" run "ij,jk->ik" \
        --backend mpi --inputs "$plan_dir/A.npy,$plan_dir/B.npy" --check 2>&1)
    st=$?
    if [ $st -eq 0 ] && [ "$(echo "$out" | grep -c "words moved to its compute layout 0 (predicted 0), read in place")" -eq 2 ] \
        && echo "$out" | grep -q "every rank exactly as planned" && echo "$out" | grep -q ": ok"; then
        ok "deinsum run --inputs read in place under mpirun -n $n"
    else
        echo "$out" | tail -20
        bad "deinsum run --inputs read in place under mpirun -n $n (exit $st)"
    fi
done
rm -rf "$plan_dir"
# An input error is printed once (by rank 0), exit status 2.
out=$(timeout "$TIMEOUT" "$MPIRUN" -n 3 "$target_dir/debug/deinsum" run "ij,jk->ik" \
    --inputs /nonexistent-a.npy,/nonexistent-b.npy 2>&1)
st=$?
if [ $st -ne 0 ] && [ $st -ne 124 ] && [ "$(echo "$out" | grep -c "nonexistent-a.npy")" -eq 1 ]; then
    ok "an input error under mpirun is printed once"
else
    echo "$out" | tail -20
    bad "an input error under mpirun is printed once (exit $st)"
fi

# Relational joins under mpirun: each rank reads its own row range of the files and moves
# exactly the predicted bytes; the output (written by rank 0) equals the in-process ranks'.
join_dir=$(mktemp -d)
{
    echo "k,a,s"
    for i in $(seq 0 60); do echo "$((i % 9)),$i,s$((i % 4))"; done
    echo ",61,null-key"
} >"$join_dir/l.csv"
{
    echo "k,b"
    for i in $(seq 0 30); do echo "$((i % 13)),$((i * 3))"; done
} >"$join_dir/r.csv"
for n in 1 2 3 4 5; do
    for how in inner full; do
        for strategy in shuffle broadcast semi index; do
            "$target_dir/debug/deinsum" join "$join_dir/l.csv" "$join_dir/r.csv" --on k \
                --how "$how" --strategy "$strategy" --procs "$n" --output "$join_dir/local.csv" \
                </dev/null >/dev/null 2>&1
            out=$(timeout "$TIMEOUT" "$MPIRUN" -n "$n" "$target_dir/debug/deinsum" join \
                "$join_dir/l.csv" "$join_dir/r.csv" --on k --how "$how" --strategy "$strategy" \
                --output "$join_dir/mpi.csv" --format json </dev/null 2>&1)
            st=$?
            if [ $st -eq 0 ] && echo "$out" | grep -q "\"procs\": $n," \
                && cmp -s <(sort "$join_dir/local.csv") <(sort "$join_dir/mpi.csv") \
                && [ "$(echo "$out" | grep -c '^  "strategy"')" -eq 1 ]; then
                ok "join --how $how --strategy $strategy under mpirun -n $n equals in-process"
            else
                echo "$out" | tail -20
                bad "join --how $how --strategy $strategy under mpirun -n $n equals in-process (exit $st)"
            fi
        done
    done
done
# Placements under mpirun: each table on its own group of ranks (semi-join, Bloom semi-join)
# and tables split by columns (join index): the output equals the in-process ranks' and every
# rank moved exactly the predicted bytes.
exact='import json,sys; r=json.load(open(sys.argv[1])); p=next(x for x in r["inspection"]["predictions"] if x["strategy"]==r["strategy"]); sys.exit(0 if (r["measured_sent"],r["measured_received"],r["placement"])==(p["sent"],p["received"],sys.argv[2]) else 1)'
for n in 2 3; do
    for ps in separate:semi separate:bloom columns:index; do
        placement=${ps%%:*}
        strategy=${ps##*:}
        "$target_dir/debug/deinsum" join "$join_dir/l.csv" "$join_dir/r.csv" --on k --how full \
            --strategy "$strategy" --placement "$placement" --procs "$n" \
            --output "$join_dir/local.csv" </dev/null >/dev/null 2>&1
        timeout "$TIMEOUT" "$MPIRUN" -n "$n" "$target_dir/debug/deinsum" join "$join_dir/l.csv" \
            "$join_dir/r.csv" --on k --how full --strategy "$strategy" --placement "$placement" \
            --output "$join_dir/mpi.csv" --format json </dev/null >"$join_dir/rep.json" 2>"$join_dir/err"
        st=$?
        if [ $st -eq 0 ] && python3 -c "$exact" "$join_dir/rep.json" "$placement" \
            && cmp -s <(sort "$join_dir/local.csv") <(sort "$join_dir/mpi.csv"); then
            ok "join --placement $placement --strategy $strategy under mpirun -n $n: exact bytes, equals in-process"
        else
            tail -20 "$join_dir/err"
            bad "join --placement $placement --strategy $strategy under mpirun -n $n: exact bytes, equals in-process (exit $st)"
        fi
    done
done
# The sketch inspector under mpirun: the rows equal the exact inspector's in-process run, the
# report says the sketch ran, and the shuffle's bytes (exact in sketch mode too) are as predicted.
sketched='import json,sys; r=json.load(open(sys.argv[1])); sys.exit(0 if r["inspect"]=="sketch" and r["inspection"]["sketch"] is not None else 1)'
for n in 2 3; do
    for strategy in shuffle auto; do
        "$target_dir/debug/deinsum" join "$join_dir/l.csv" "$join_dir/r.csv" --on k --how full \
            --strategy "$strategy" --inspect exact --procs "$n" --output "$join_dir/local.csv" \
            </dev/null >/dev/null 2>&1
        timeout "$TIMEOUT" "$MPIRUN" -n "$n" "$target_dir/debug/deinsum" join "$join_dir/l.csv" \
            "$join_dir/r.csv" --on k --how full --strategy "$strategy" --inspect sketch \
            --output "$join_dir/mpi.csv" --format json </dev/null >"$join_dir/rep.json" 2>"$join_dir/err"
        st=$?
        if [ $st -eq 0 ] && python3 -c "$sketched" "$join_dir/rep.json" \
            && { [ "$strategy" != shuffle ] || python3 -c "$exact" "$join_dir/rep.json" rows; } \
            && cmp -s <(sort "$join_dir/local.csv") <(sort "$join_dir/mpi.csv"); then
            ok "join --inspect sketch --strategy $strategy under mpirun -n $n equals the exact in-process run"
        else
            tail -20 "$join_dir/err"
            bad "join --inspect sketch --strategy $strategy under mpirun -n $n equals the exact in-process run (exit $st)"
        fi
    done
done
rm -rf "$join_dir"

# --- Python on MPI (mpi4py) ----------------------------------------------------------------
# One venv (numpy, pytest, mpi4py from PyPI), one wheel built with the `mpi` feature as the
# README says, then python/tests_mpi under mpirun -n N: every rank checks its results against
# numpy.einsum (sessions: against in-process sessions, CP-ALS against TensorLy's parafac) and
# that the world has the N ranks the launcher was asked for.
py_start=$(date +%s)
py_venv="${DEINSUM_PY_MPI_VENV:-$target_dir/py-mpi-venv}"
py_log=$(mktemp)
rm -rf "$py_venv"
if cargo clippy -q --manifest-path python/Cargo.toml --all-targets --features mpi -- -D warnings \
    >"$py_log" 2>&1; then
    ok "clippy python/ --features mpi"
else
    tail -30 "$py_log"
    bad "clippy python/ --features mpi"
fi
if "${PYTHON:-python3}" -m venv "$py_venv" >"$py_log" 2>&1 \
    && "$py_venv/bin/python" -m pip install -q --upgrade pip >>"$py_log" 2>&1 \
    && "$py_venv/bin/python" -m pip install -q numpy pytest mpi4py duckdb pyarrow pandas tensorly \
        >>"$py_log" 2>&1 \
    && MATURIN_PEP517_ARGS="--features mpi" "$py_venv/bin/python" -m pip install -q ./python \
        >>"$py_log" 2>&1; then
    ok "pip install ./python with --features mpi and mpi4py ($(($(date +%s) - py_start)) s)"
    for n in ${DEINSUM_PY_MPI_NPS:-1 2 3 4}; do
        # From the repository's root: `import deinsum` is the installed package.
        DEINSUM_MPI_EXPECT=$n run "python tests_mpi -n $n" 0 -- -n "$n" "$py_venv/bin/python" \
            -m pytest -q --color=no -p no:cacheprovider "$PWD/python/tests_mpi"
    done
    # `deinsum join` under mpirun -n 1..5 against DuckDB (the test launches mpirun itself).
    join_cli="$(cd "$target_dir/debug" && pwd)/deinsum"
    # Absolute: the test runs from python/tests, and the venv's path may be relative.
    py_abs="$(cd "$py_venv" && pwd)/bin/python"
    if (cd python/tests && DEINSUM_MPI_CLI="$join_cli" \
        DEINSUM_MPIRUN="$MPIRUN" "$py_abs" -m pytest -q --color=no \
        -p no:cacheprovider test_join_mpi.py </dev/null); then
        ok "python/tests/test_join_mpi.py (deinsum join under mpirun -n 1..5 vs DuckDB)"
    else
        bad "python/tests/test_join_mpi.py (deinsum join under mpirun -n 1..5 vs DuckDB)"
    fi
else
    tail -30 "$py_log"
    bad "pip install ./python with --features mpi and mpi4py"
fi
rm -f "$py_log"
echo "Python on MPI: $(($(date +%s) - py_start)) s"

rm -f "$build_log" "$build_log.err"
finish
