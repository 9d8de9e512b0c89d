"""deinsum.Session on an mpi4py communicator, run by every rank of an MPI job (see test_mpi.py):
results equal the in-process session's, arrays stay distributed between einsums, numpy() and
save() are collective, CP-ALS (python/examples/cp_als.py) matches TensorLy's parafac, and bad
input raises on every rank (never a crash or a hang)."""

import importlib.util
import os
import pathlib

import numpy as np
import pytest
from mpi4py import MPI

import deinsum

COMM = MPI.COMM_WORLD
RANK = COMM.Get_rank()
SIZE = COMM.Get_size()
EXAMPLES = pathlib.Path(__file__).resolve().parent.parent / "examples"


def shared_dir():
    """A directory every rank names alike (rank 0's choice, broadcast)."""
    d = COMM.bcast(os.path.join(os.environ.get("TMPDIR", "/tmp"), f"deinsum-sess-{os.getpid()}"))
    if RANK == 0:
        os.makedirs(d, exist_ok=True)
    COMM.Barrier()
    return d


def test_session_on_the_world():
    with deinsum.Session(comm=COMM) as s:
        assert s.procs == SIZE
        assert s.rank == RANK
        assert "(MPI)" in repr(s)
    with deinsum.Session(comm="world") as s:
        assert s.procs == SIZE
    with pytest.raises(ValueError):
        deinsum.Session(procs=SIZE + 1, comm=COMM)
    with pytest.raises(TypeError):
        deinsum.Session(comm=object())


def test_einsums_equal_the_in_process_session():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((9, 7, 8))
    b = rng.standard_normal((7, 3))
    c = rng.standard_normal((8, 3))
    got = []
    for s in (deinsum.Session(comm=COMM), deinsum.Session(procs=SIZE)):
        xa, ba, ca = s.array(x), s.array(b), s.array(c)
        m1 = s.einsum("ijk,jr,kr->ir", xa, ba, ca)
        m2 = s.einsum("ijk,ir,kr->jr", xa, m1, ca)
        got.append((m1.numpy(), m2.numpy(), s.stats(), xa.layout))
        s.close()
    (m1, m2, st, lay), (l1, l2, lst, llay) = got
    want = np.einsum("ijk,jr,kr->ir", x, b, c)
    np.testing.assert_allclose(m1, want, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(m1, l1, rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(m2, l2, rtol=1e-13, atol=1e-13)
    assert [e["words_moved"] for e in st] == [e["words_moved"] for e in lst]
    assert [e["operand_words"] for e in st] == [e["operand_words"] for e in lst]
    # X stays where its first use placed it.
    assert st[1]["operand_words"][0] == 0
    assert lay == llay


def test_numpy_root_save_and_load():
    d = shared_dir()
    rng = np.random.default_rng(5)
    a = rng.standard_normal((11, 6))
    b = rng.standard_normal((6, 5))
    with deinsum.Session(comm=COMM) as s:
        c = s.einsum("ij,jk->ik", a, b)
        whole = c.numpy()
        np.testing.assert_allclose(whole, a @ b, rtol=1e-12, atol=1e-12)
        root = SIZE - 1
        part = c.numpy(root=root)
        if RANK == root:
            np.testing.assert_array_equal(part, whole)
        else:
            assert part is None
        canon = s.einsum("ij,jk->ik", a, b, out_layout="canonical")
        np.testing.assert_allclose(canon.numpy(), a @ b, rtol=1e-12, atol=1e-12)
        path = os.path.join(d, "c.npy")
        c.save(path)
        COMM.Barrier()
        np.testing.assert_array_equal(np.load(path), whole)
        back = s.load(path)
        np.testing.assert_array_equal(s.einsum("ik->ki", back).numpy(), whole.T)
        # Saving over the file a live array reads from: refused on every rank.
        with pytest.raises(FileExistsError):
            c.save(path)
        del back
    COMM.Barrier()
    if RANK == 0:
        os.remove(path)


def test_bad_input_raises_on_every_rank():
    a = np.ones((4, 3))
    b = np.ones((5, 2))
    s = deinsum.Session(comm=COMM)
    other = deinsum.Session(comm=COMM)
    x = s.array(a)
    y = other.array(np.ones((3, 2)))
    with pytest.raises(ValueError) as e:
        s.einsum("ij,jk->ik", x, y)
    assert "another session" in str(e.value), e.value
    bad = s.array(b)
    with pytest.raises(ValueError) as e:
        s.einsum("ij,jk->ik", x, bad)
    assert "array 1" in str(e.value), e.value
    other.close()
    with pytest.raises(ValueError):
        y.numpy()
    with pytest.raises(ValueError):
        other.einsum("ij->ji", y)
    with pytest.raises(ValueError):
        y.save("never.npy")
    # The open session goes on.
    np.testing.assert_allclose(s.einsum("ij,ij->", x, x).numpy(), 12.0)
    s.close()
    with pytest.raises(ValueError):
        x.numpy()


def test_cp_als_matches_tensorly():
    import tensorly  # noqa: F401  (the reference: .ci/mpi.sh installs it)

    spec = importlib.util.spec_from_file_location("cp_als", EXAMPLES / "cp_als.py")
    cp = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cp)
    for shape, rank in [((12, 10, 9), 4), ((6, 5, 4, 5, 3), 3)]:
        x, init = cp.problem(shape, rank)
        with deinsum.Session(comm=COMM) as s:
            _, fits, _, x_words = cp.cp_als(s, x, rank, init, 3)
        want = cp.tensorly_fits(x, rank, init, 3)
        np.testing.assert_allclose(fits, want, rtol=0, atol=1e-8)
        assert all(w == 0 for w in x_words[1:]), x_words
