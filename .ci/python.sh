#!/usr/bin/env bash
# The Python package's suite (called by .ci/run): a fresh venv, numpy pytest hypothesis scipy
# tensorly (the CP-ALS reference of test_session.py)
# from PyPI (SciPy reads back the sparse files `deinsum run --output` writes), the package
# installed with the README's own command (`pip install ./python`, a release
# build of the abi3 wheel through maturin), then pytest on python/tests/. The tests compare
# against the CLI binary, built here if missing. pytest's exit 5 (no test collected) counts as
# a failure like any other non-zero status.
#
# The wheel is built in the root's target directory (CARGO_TARGET_DIR), whose release profile
# python/Cargo.toml repeats: after .ci/run's `cargo run --release` the dependencies that both
# builds compile with the same features are reused instead of compiled a second time.
#
# Environment: PYTHON (default python3), DEINSUM_PY_VENV (default target/py-venv),
# CARGO_TARGET_DIR (default target/).
set -euo pipefail
cd "$(dirname "$0")/.."

PY="${PYTHON:-python3}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"
VENV="${DEINSUM_PY_VENV:-$CARGO_TARGET_DIR/py-venv}"

rm -rf "$VENV"
"$PY" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --upgrade pip
"$VENV/bin/python" -m pip install -q numpy pytest hypothesis scipy duckdb tensorly pyarrow pandas

# The CLI as `cargo test --workspace` links it (target/debug/deinsum): after CI's test stage this
# builds nothing, where `cargo build -p deinsum` would compile four crates again (other features).
cargo test -q --workspace --no-run
export DEINSUM_CLI="$CARGO_TARGET_DIR/debug/deinsum"

start=$(date +%s)
"$VENV/bin/python" -m pip install -q ./python
echo "pip install ./python: $(( $(date +%s) - start )) s"

# From outside python/, so that `import deinsum` is the installed package, not the source tree.
set +e
(cd python/tests && "$VENV/bin/python" -m pytest -q -p no:cacheprovider .)
status=$?
set -e
if [ "$status" -ne 0 ]; then
    echo "python tests failed (pytest exit status $status)" >&2
    exit 1
fi
