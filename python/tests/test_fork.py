"""A process forked after in-process runs (multiprocessing's default start on Linux) runs
einsums of its own: the threads deinsum keeps between runs are not inherited by the child."""

import os
import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent(
    """
    import os, sys
    import numpy as np
    import deinsum

    a = np.arange(48.0).reshape(6, 8)
    b = np.arange(40.0).reshape(8, 5)
    want = a @ b
    for procs, threads in [(2, 1), (3, 1), (2, 2)]:
        assert np.allclose(deinsum.einsum("ij,jk->ik", a, b, procs=procs, threads=threads), want)
    pid = os.fork()
    if pid == 0:
        ok = all(
            np.allclose(deinsum.einsum("ij,jk->ik", a, b, procs=procs, threads=threads), want)
            for procs, threads in [(2, 1), (3, 1), (2, 2), (4, 1)]
        )
        os._exit(0 if ok else 3)
    _, status = os.waitpid(pid, 0)
    sys.exit(os.waitstatus_to_exitcode(status))
    """
)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
def test_forked_child_runs_in_process_ranks(tmp_path):
    # A child that waited for its parent's kept threads would hang: the timeout fails it.
    # Started away from the source tree, whose `deinsum` folder would shadow the package.
    r = subprocess.run(
        [sys.executable, "-c", SCRIPT], cwd=tmp_path, timeout=120, capture_output=True, text=True
    )
    assert r.returncode == 0, r.stderr
