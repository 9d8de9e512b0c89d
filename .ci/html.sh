#!/usr/bin/env bash
# The HTML reports in a real browser (called by .ci/run): installs Debian's chromium when
# missing, writes `deinsum plan/run --html` reports for several plans (P from 1 to 10^6, a
# phased plan under a memory budget, runs on 8 and 5 ranks), loads each in headless Chromium
# and checks that
#   - the page logs nothing to the console (the pages have no script, so any message is an
#     error: a self-test page with console.error and a ReferenceError must be caught),
#   - the page is self-contained (no script, no external stylesheet, image or link),
#   - the parsed DOM has one process grid per fused group, one heat map per move and, for a
#     run, one timeline row per rank,
#   - a full-page screenshot was taken (kept in $DEINSUM_HTML_OUT, default target/html-report).
# Ends with the line "N passed, M failed"; exit status non-zero on any failure.
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

as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else "$@"; fi; }
if ! command -v chromium >/dev/null 2>&1; then
    echo "installing chromium"
    as_root apt-get update -qq && DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq \
        chromium >/dev/null
    if ! command -v chromium >/dev/null 2>&1; then
        bad "install chromium"
        finish
    fi
fi

OUT="${DEINSUM_HTML_OUT:-target/html-report}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
if ! cargo build --release -q -p deinsum --bin deinsum; then
    bad "cargo build --release -p deinsum"
    finish
fi
BIN="${CARGO_TARGET_DIR:-target}/release/deinsum"

# One headless Chromium per call, with a fresh profile and nothing that reaches the network.
chrome() {
    local profile
    profile="$(mktemp -d)"
    timeout 180 chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
        --disable-background-networking --disable-component-update --disable-sync \
        --hide-scrollbars --user-data-dir="$profile" "$@"
    local rc=$?
    rm -rf "$profile"
    return $rc
}

# check NAME FILE.html PLAN.json RANKS_IN_TIMELINE(0 for a plan page)
check() {
    local name=$1 page=$2 plan=$3 rows=$4
    local dom="$OUT/$name.dom" log="$OUT/$name.log" png="$OUT/$name.png"
    if ! chrome --enable-logging=stderr --v=0 --dump-dom "file://$page" >"$dom" 2>"$log"; then
        bad "$name: chromium could not load the page"
        return
    fi
    if grep -q "CONSOLE" "$log"; then
        bad "$name: console messages: $(grep CONSOLE "$log" | head -3)"
    else
        ok "$name: no console messages"
    fi
    if grep -Eqi '<script|<link|<img|<iframe|(src|href)="(https?:)?//' "$page"; then
        bad "$name: the page is not self-contained"
    else
        ok "$name: self-contained (no script, link, image or external URL)"
    fi
    local want
    want=$(python3 - "$plan" "$rows" <<'EOF'
import json, sys
p = json.load(open(sys.argv[1]))
moves = sum(1 if s["kind"] == "redistribute" else len(s["fetch"]) if s["kind"] == "compute_phase" else 0
            for s in p["steps"])
print(len(p["groups"]), moves, int(sys.argv[2]))
EOF
)
    local got
    got="$(grep -o '<svg class="grid"' "$dom" | wc -l) $(grep -o '<svg class="heatmap"' "$dom" | wc -l) $(grep -o '<g class="timeline-row"' "$dom" | wc -l)"
    if [ "$got" = "$want" ]; then
        ok "$name: grids, heat maps, timeline rows = $got"
    else
        bad "$name: grids, heat maps, timeline rows: found $got, the plan has $want"
    fi
    if [ "$rows" -gt 1 ]; then
        # Ranks of a run wait for each other somewhere (every collective but its last arrival).
        local w
        w=$(grep -o '<rect class="waiting"' "$dom" | wc -l)
        if [ "$w" -gt 0 ]; then ok "$name: $w measured waiting segments"; else bad "$name: no measured waiting drawn"; fi
    fi
    local h
    h=$(grep -c '<svg class="tree"' "$dom")
    if [ "$h" -eq 1 ]; then ok "$name: contraction tree drawn"; else bad "$name: $h tree drawings"; fi
    if chrome --window-size=1280,2400 --screenshot="$png" "file://$page" >/dev/null 2>&1 &&
        [ "$(stat -c %s "$png" 2>/dev/null || echo 0)" -gt 20000 ]; then
        ok "$name: screenshot $png"
    else
        bad "$name: no screenshot"
    fi
}

# The checker itself: a page with console output must be caught.
self="$OUT/selftest.html"
printf '<!DOCTYPE html><html><body><script>console.error("x"); nope();</script></body></html>' >"$self"
chrome --enable-logging=stderr --v=0 --dump-dom "file://$self" >/dev/null 2>"$OUT/selftest.log"
if grep -q "CONSOLE" "$OUT/selftest.log"; then
    ok "self-test: console errors are seen"
else
    bad "self-test: a page with console.error passed the console check"
fi

# plan NAME ARGS...: a plan page and its JSON.
plan() {
    local name=$1
    shift
    if "$BIN" plan "$@" --html "$OUT/$name.html" -o "$OUT/$name.json" >/dev/null; then
        check "$name" "$OUT/$name.html" "$OUT/$name.json" 0
    else
        bad "$name: deinsum plan $*"
    fi
}
# run NAME PROCS ARGS...: a run page (its plan saved first, then run exactly).
run() {
    local name=$1 procs=$2
    shift 2
    if "$BIN" plan "$@" --procs "$procs" -o "$OUT/$name.json" >/dev/null &&
        "$BIN" run --plan "$OUT/$name.json" --procs "$procs" --check --repeat 2 \
            --html "$OUT/$name.html" >/dev/null; then
        check "$name" "$OUT/$name.html" "$OUT/$name.json" "$procs"
    else
        bad "$name: deinsum run on $procs ranks"
    fi
}

plan plan-p1 "ij,jk->ik" --size 16 --procs 1
plan plan-mttkrp-p8 "ijk,ja,ka,al->il" --size 24 --procs 8
plan plan-phased-p12 "ij,jk->ik" --size 60 --procs 12 --mem 1500
plan plan-mttkrp-p1m "ijk,ja,ka,al->il" --size 2000 --procs 1000000
run run-mttkrp-p8 8 "ijk,ja,ka,al->il" --size 24
run run-chain-p5 5 "ij,jk,kl->il" --sizes i=37,j=23,k=41,l=19
finish
