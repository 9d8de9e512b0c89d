"""Shared fixtures: the `deinsum` CLI binary the binding is compared against."""

import os
import pathlib
import shutil
import subprocess

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]


def _find_cli():
    env = os.environ.get("DEINSUM_CLI")
    if env:
        return env
    target = pathlib.Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target"))
    for profile in ("debug", "release"):
        p = target / profile / "deinsum"
        if p.exists():
            return str(p)
    return shutil.which("deinsum")


@pytest.fixture(scope="session")
def cli():
    """Runs the CLI and returns its standard output; a missing binary fails the test."""
    exe = _find_cli()
    assert exe, "deinsum CLI not found: build it (cargo build) or set DEINSUM_CLI"

    def run(*args):
        r = subprocess.run([exe, *args], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        return r.stdout

    return run
