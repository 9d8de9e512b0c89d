#!/usr/bin/env bash
# The Python package's suite (called by .ci/run): a fresh venv, maturin numpy pytest hypothesis
# from PyPI, a debug build of the extension (`maturin develop`), then pytest on python/tests/.
# The tests compare against the CLI binary, built here if missing. pytest's exit 5 (no test
# collected) counts as a failure like any other non-zero status.
#
# Environment: PYTHON (default python3), DEINSUM_PY_VENV (default target/py-venv),
# CARGO_TARGET_DIR (shared with the workspace build so dependencies are reused).
set -euo pipefail
cd "$(dirname "$0")/.."

PY="${PYTHON:-python3}"
TARGET="${CARGO_TARGET_DIR:-$PWD/target}"
VENV="${DEINSUM_PY_VENV:-$TARGET/py-venv}"

"$PY" -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --upgrade pip
"$VENV/bin/python" -m pip install -q maturin numpy pytest hypothesis

cargo build -q -p deinsum
export DEINSUM_CLI="$TARGET/debug/deinsum"

# `maturin develop` installs into the active venv.
(
    export VIRTUAL_ENV="$VENV" PATH="$VENV/bin:$PATH"
    cd python
    maturin develop -q
)

set +e
(cd python && "$VENV/bin/python" -m pytest -q tests)
status=$?
set -e
if [ "$status" -ne 0 ]; then
    echo "python tests failed (pytest exit status $status)" >&2
    exit 1
fi
