"""deinsum.einsum against numpy.einsum on a random set of einsums."""

import numpy as np
import pytest

import deinsum

# (expression, operand shapes): matrix products, chains, ellipsis, diagonals, broadcasting,
# scalars, traces, outer products, implicit outputs.
CASES = [
    ("ij,jk->ik", [(5, 7), (7, 3)]),
    ("ij,jk", [(4, 6), (6, 5)]),
    ("ijk,ja,ka,al->il", [(5, 4, 3), (4, 6), (3, 6), (6, 7)]),
    ("ij,jk,kl->il", [(3, 8), (8, 2), (2, 9)]),
    ("bij,bjk->bik", [(3, 4, 5), (3, 5, 2)]),
    ("...ij,...jk->...ik", [(2, 3, 4, 5), (2, 3, 5, 6)]),
    ("...ij,jk->...ik", [(3, 4, 5), (5, 2)]),
    ("ij...,j...->i...", [(3, 4, 2), (4, 2)]),
    ("ii->i", [(5, 5)]),
    ("ii", [(6, 6)]),
    ("iij,jk->ik", [(4, 4, 3), (3, 5)]),
    ("i,i->", [(7,), (7,)]),
    ("i,j->ij", [(3,), (4,)]),
    ("ij->", [(3, 4)]),
    ("ij->ji", [(3, 4)]),
    ("ij,ij->ij", [(3, 4), (3, 4)]),
    ("ij,j->i", [(5, 1), (4,)]),
    ("ij,kj->ik", [(1, 4), (3, 4)]),
    (",ij->ij", [(), (3, 2)]),
    ("ijkl,lk->ij", [(2, 3, 4, 5), (5, 4)]),
    ("abc,cd,de->abe", [(3, 2, 4), (4, 5), (5, 3)]),
    ("ij,jk,kl,lm->im", [(6, 5), (5, 4), (4, 3), (3, 2)]),
]


@pytest.mark.parametrize("procs", [1, 2, 3, 5])
@pytest.mark.parametrize("expr,shapes", CASES)
def test_equals_numpy_f64(expr, shapes, procs):
    rng = np.random.default_rng(abs(hash((expr, procs))) % 2**32)
    ops = [rng.standard_normal(s) for s in shapes]
    got = deinsum.einsum(expr, *ops, procs=procs)
    want = np.einsum(expr, *ops)
    assert np.shape(got) == np.shape(want)
    assert np.asarray(got).dtype == np.float64
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("expr,shapes", CASES)
def test_equals_numpy_f32(expr, shapes):
    rng = np.random.default_rng(7)
    ops = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    got = deinsum.einsum(expr, *ops, procs=2)
    want = np.einsum(expr, *[o.astype(np.float64) for o in ops])
    assert np.asarray(got).dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-4)


def test_random_einsums_equal_numpy():
    """Random expressions over random shapes (with repeats, broadcasting and free outputs)."""
    rng = np.random.default_rng(2024)
    letters = "abcdef"
    for trial in range(60):
        n_ops = int(rng.integers(1, 4))
        ext = {c: int(rng.integers(1, 5)) for c in letters}
        terms, ops = [], []
        for _ in range(n_ops):
            idx = "".join(rng.choice(list(letters), size=int(rng.integers(0, 4))))
            terms.append(idx)
            ops.append(rng.standard_normal([ext[c] for c in idx]))
        used = sorted(set("".join(terms)))
        out = "".join(c for c in used if rng.random() < 0.5)
        expr = ",".join(terms) + "->" + out
        procs = int(rng.integers(1, 5))
        got = deinsum.einsum(expr, *ops, procs=procs)
        want = np.einsum(expr, *ops)
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-10, err_msg=f"{expr} P={procs}")


def test_non_contiguous_and_integer_inputs():
    rng = np.random.default_rng(3)
    a = rng.standard_normal((8, 6))[:, ::2]  # strided view: copied once
    b = np.asfortranarray(rng.standard_normal((3, 5)))
    got = deinsum.einsum("ij,jk->ik", a, b, procs=2)
    np.testing.assert_allclose(got, a @ b, rtol=1e-12)
    ai = np.arange(12).reshape(3, 4)
    got = deinsum.einsum("ij,jk->ik", ai, ai.T)
    assert got.dtype == np.float64
    np.testing.assert_array_equal(got, (ai @ ai.T).astype(np.float64))
    small = np.arange(6, dtype=np.int8).reshape(2, 3)
    assert deinsum.einsum("ij->i", small).dtype == np.float32


def test_unsupported_dtype_is_a_type_error():
    with pytest.raises(TypeError, match="complex64 or complex128, not int64"):
        deinsum.einsum("ij->i", np.ones((2, 2)), dtype=np.int64)


def test_threads_and_mem_budget():
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal((40, 30)), rng.standard_normal((30, 20))
    got = deinsum.einsum("ij,jk->ik", a, b, procs=4, threads=2, mem=2000)
    np.testing.assert_allclose(got, a @ b, rtol=1e-10)


def test_input_arrays_are_not_modified():
    a = np.arange(12.0).reshape(3, 4)
    b = a.T.copy()
    a0, b0 = a.copy(), b.copy()
    deinsum.einsum("ij,jk->ik", a, b, procs=3)
    np.testing.assert_array_equal(a, a0)
    np.testing.assert_array_equal(b, b0)


def test_numpy_style_optimize_flag():
    a, b = np.ones((3, 4)), np.ones((4, 2))
    np.testing.assert_array_equal(deinsum.einsum("ij,jk->ik", a, b, optimize=True), a @ b)
    path, _ = deinsum.contract_path("ij,jk->ik", a, b, optimize=False)
    assert path == [(0, 1)]


@pytest.mark.parametrize("procs", [1, 2, 3, 5, 8])
def test_repeated_calls_reuse_kept_buffers_and_equal_numpy(procs):
    # Large enough blocks to be kept between calls; f64 then f32 then f64 on the same buffers,
    # a smaller einsum in between, extents no P divides evenly.
    rng = np.random.default_rng(procs)
    a, b = rng.standard_normal((301, 157)), rng.standard_normal((157, 263))
    t = rng.standard_normal((41, 37, 29))
    m = rng.standard_normal((29, 6))
    for dt in (np.float64, np.float32, np.float64):
        for _ in range(2):
            got = deinsum.einsum("ij,jk->ik", a.astype(dt), b.astype(dt), procs=procs)
            tol = 1e-10 if dt == np.float64 else 1e-3
            np.testing.assert_allclose(got, a @ b, rtol=tol, atol=tol)
            got = deinsum.einsum("ijk,ka->ija", t, m, procs=procs)
            np.testing.assert_allclose(got, np.einsum("ijk,ka->ija", t, m), rtol=1e-10, atol=1e-10)
    # A call on one rank reads both operands in place and hands its output over: it leaves
    # nothing. On two ranks the second operand is all-gathered into a block the ranks share,
    # whose buffer is kept for the next call; release frees it.
    deinsum.release_buffers()
    deinsum.einsum("ij,jk->ik", a, b, procs=1)
    assert deinsum.release_buffers() == 0
    deinsum.einsum("ij,jk->ik", a, b, procs=2)
    assert deinsum.release_buffers() > 0
    assert deinsum.release_buffers() == 0
