"""deinsum.Session and deinsum.DistArray: chains of einsums on distributed arrays equal
NumPy's, in the four element types; arrays stay where they were placed; bad input raises the
right exception, never a crash; CP-ALS equals TensorLy's parafac sweep by sweep."""

import importlib.util
import pathlib

import numpy as np
import pytest

import deinsum

REPO = pathlib.Path(__file__).resolve().parents[2]

DTYPES = [np.float64, np.float32, np.complex128, np.complex64]


def _data(shape, dtype, seed):
    rng = np.random.default_rng(seed)
    a = rng.uniform(-1, 1, shape)
    if np.dtype(dtype).kind == "c":
        a = a + 1j * rng.uniform(-1, 1, shape)
    return a.astype(dtype)


def _close(got, want, dtype):
    tol = 1e-4 if np.dtype(dtype) in (np.dtype(np.float32), np.dtype(np.complex64)) else 1e-10
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("procs", [1, 2, 3])
def test_chain_equals_numpy(dtype, procs):
    x, b, c = _data((7, 5, 6), dtype, 1), _data((5, 3), dtype, 2), _data((6, 3), dtype, 3)
    # One rank computes with two threads; more ranks with one each.
    s = deinsum.Session(procs=procs, threads=2 if procs == 1 else None)
    xa, ba, ca = s.array(x), s.array(b), s.array(c)
    assert xa.shape == (7, 5, 6) and xa.dtype == np.dtype(dtype)
    assert xa.layout is None, "whole until its first use"
    m = s.einsum("ijk,ja,ka->ia", xa, ba, ca)
    assert isinstance(m, deinsum.DistArray)
    assert m.dtype == np.dtype(dtype) and m.shape == (7, 3)
    want = np.einsum("ijk,ja,ka->ia", x, b, c)
    _close(m.numpy(), want, dtype)
    assert isinstance(xa.layout, deinsum.Layout), "placed at its first use"
    assert xa.layout.procs <= procs
    # The result used again, with a NumPy operand mixed in.
    g = s.einsum("ia,ib->ab", m, m)
    _close(g.numpy(), want.T @ want, dtype)
    y = s.einsum("ijk,ia->jka", xa, m.numpy())
    _close(y.numpy(), np.einsum("ijk,ia->jka", x, want), dtype)


def test_out_layout_and_stats():
    x = _data((9, 8, 7), np.float64, 4)
    s = deinsum.Session(procs=4)
    xa = s.array(x)
    fs = [s.array(_data((n, 3), np.float64, 10 + n)) for n in (9, 8, 7)]
    for _ in range(2):
        s.einsum("ijk,ja,ka->ia", xa, fs[1], fs[2])
        s.einsum("ijk,ia,ka->ja", xa, fs[0], fs[2])
    st = s.stats()
    assert len(st) == 4
    for e in st:
        assert set(e) >= {"expr", "words_moved", "operand_words"}
        assert isinstance(e["words_moved"], int) and len(e["operand_words"]) == 3
    assert st[0]["expr"] == "ijk,ja,ka->ia"
    assert all(e["operand_words"][0] == 0 for e in st), "X is never moved"
    a = s.array(_data((6, 6), np.float64, 5))
    b = s.array(_data((6, 6), np.float64, 6))
    want = a.numpy() @ b.numpy()
    for out in ("canonical", None, a, a.layout):
        r = s.einsum("ij,jk->ik", a, b, out_layout=out)
        np.testing.assert_allclose(r.numpy(), want, rtol=1e-12)
    r = s.einsum("ij,jk->ik", a, b, out_layout=a)
    assert r.layout == a.layout
    assert "Layout" in repr(a.layout) and "DistArray" in repr(r)
    with pytest.raises(ValueError, match="out_layout"):
        s.einsum("ij,jk->ik", a, b, out_layout="rows")


def test_load_and_save(tmp_path):
    x = _data((5, 4, 3), np.complex128, 7)
    path = tmp_path / "x.npy"
    np.save(path, x)
    s = deinsum.Session(procs=3)
    xa = s.load(str(path))
    assert xa.shape == (5, 4, 3) and xa.dtype == np.complex128
    y = s.einsum("ijk->kji", xa)
    out = tmp_path / "y.npy"
    y.save(str(out))
    np.testing.assert_allclose(np.load(out), np.einsum("ijk->kji", x), rtol=1e-12)
    # Over the file a live array was loaded from: refused; allowed once that array is gone.
    with pytest.raises(FileExistsError):
        y.save(str(path))
    del xa
    y.save(str(path))
    with pytest.raises(FileNotFoundError):
        s.load(str(tmp_path / "missing.npy"))


def test_bad_input_raises_never_crashes(tmp_path):
    s = deinsum.Session(procs=2)
    a = s.array(np.ones((3, 4)))
    other = deinsum.Session(procs=2)
    o = other.array(np.ones((4, 5)))
    with pytest.raises(ValueError, match="another session"):
        s.einsum("ij,jk->ik", a, o)
    bad = s.array(np.ones((5, 5)))
    with pytest.raises(ValueError) as e:
        s.einsum("ij,jk->ik", a, bad)
    assert "array 1" in str(e.value), e.value
    with pytest.raises(TypeError):
        s.einsum("ij,jk->ik", a, s.array(np.ones((4, 2), dtype=np.float32)))
    with pytest.raises(ValueError):
        s.einsum("ij,jk->ik", a)
    with pytest.raises(ValueError):
        deinsum.Session(procs=0)
    with pytest.raises(ValueError):
        deinsum.Session(threads=0)
    # Not an mpi4py communicator; without the `mpi` build no communicator is taken at all.
    with pytest.raises(TypeError if deinsum._native.HAS_MPI else NotImplementedError):
        deinsum.Session(comm=object())
    # A gather larger than this node's memory is refused with its size (the file holds only
    # a header: the array is read lazily, so nothing is allocated).
    huge = tmp_path / "huge.npy"
    shape = (1 << 20, 1 << 20, 1 << 8)
    with open(huge, "wb") as f:
        np.lib.format.write_array_header_1_0(
            f, {"descr": "<f8", "fortran_order": False, "shape": shape}
        )
    h = s.load(str(huge))
    with pytest.raises(MemoryError) as e:
        h.numpy()
    assert str(8 * (1 << 48)) in str(e.value), e.value
    # After close: errors, never a crash.
    with deinsum.Session(procs=2) as t:
        c = t.array(np.ones(3))
        assert not t.closed
    assert t.closed
    for use in (
        lambda: c.numpy(),
        lambda: c.save(str(tmp_path / "c.npy")),
        lambda: t.einsum("i->i", c),
        lambda: t.array(np.ones(2)),
    ):
        with pytest.raises(ValueError, match="closed"):
            use()
    del t
    with pytest.raises(ValueError, match="closed"):
        c.numpy()


def _example(name):
    path = REPO / "python" / "examples" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"example_{name}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("shape,rank", [((9, 7, 8), 3), ((5, 4, 3, 4, 3), 2)])
def test_cp_als_equals_tensorly(shape, rank):
    pytest.importorskip("tensorly")
    cp = _example("cp_als")
    x, init = cp.problem(shape, rank, seed=3)
    sweeps = 4
    want = cp.tensorly_fits(x, rank, init, sweeps)
    s = deinsum.Session(procs=2)
    _, fits, _, x_words = cp.cp_als(s, x, rank, init, sweeps)
    assert len(fits) == len(want) == sweeps
    for t, (f, w) in enumerate(zip(fits, want)):
        assert abs(f - w) <= 1e-8, (t, f, w)
    assert all(w == 0 for w in x_words[1:]), x_words


def test_cp_als_example_main():
    pytest.importorskip("tensorly")
    assert _example("cp_als").main(["--procs", "2", "--sweeps", "2"]) == 0
