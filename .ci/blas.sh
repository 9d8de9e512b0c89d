#!/usr/bin/env bash
# The system-BLAS feature of deinsum (called by .ci/run): installs Debian's OpenBLAS
# (libopenblas-dev) when missing, then runs one targeted test file with `--features blas`
# (distributed == serial with the GEMMs through CBLAS, four element types). Kept to one test
# file: the feature rebuilds deinsum-exec and its dependents, so CI time stays low.
set -euo pipefail
cd "$(dirname "$0")/.."

as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else "$@"; fi; }
if ! dpkg -s libopenblas-dev >/dev/null 2>&1; then
    echo "installing OpenBLAS (libopenblas-dev)"
    as_root apt-get update -qq && DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq \
        libopenblas-dev >/dev/null
fi

cargo test -p deinsum-exec --features blas --test blas
