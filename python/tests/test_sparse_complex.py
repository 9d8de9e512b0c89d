"""deinsum.einsum with complex scipy.sparse operands (CSR, CSC, COO; matrices and arrays):
SpMV, SpMM, SDDMM and SpGEMM in complex128 and complex64 equal NumPy/SciPy at procs 1..5,
real and complex operands promote as NumPy promotes them, a real dtype= for complex operands
raises NumPy's TypeError; hypothesis draws shapes, densities, formats, dtypes and procs."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import deinsum

sp = pytest.importorskip("scipy.sparse")

FORMATS = [sp.csr_matrix, sp.csc_matrix, sp.coo_matrix, sp.csr_array, sp.coo_array]
TOL = {np.dtype(np.complex128): 1e-12, np.dtype(np.complex64): 1e-5}
REAL = {np.dtype(np.complex128): np.float64, np.dtype(np.complex64): np.float32}


def _sparse(rng, m, n, density, dtype, fmt=sp.coo_matrix):
    """A random m x n sparse matrix of `dtype` with real and imaginary parts (complex) in
    [-1, 1), in format `fmt`."""
    seed = int(rng.integers(2**31))
    a = sp.random(m, n, density=density, random_state=seed, format="coo", dtype=np.float64)
    if np.dtype(dtype).kind == "c":
        a.data = a.data * 2 - 1 + 1j * rng.uniform(-1, 1, a.nnz)
    return fmt(a.astype(dtype))


def _dense(rng, shape, dtype):
    x = rng.uniform(-1, 1, shape)
    if np.dtype(dtype).kind == "c":
        x = x + 1j * rng.uniform(-1, 1, shape)
    return x.astype(dtype)


def _close(got, want, tol):
    got = got.toarray() if sp.issparse(got) else np.asarray(got)
    want = want.toarray() if sp.issparse(want) else np.asarray(want)
    assert got.shape == want.shape
    scale = max(1.0, float(np.abs(want).max()) if want.size else 1.0)
    err = np.abs(got.astype(np.complex128) - want.astype(np.complex128)).max() if want.size else 0.0
    assert err <= tol * scale, (err, scale)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("procs", [1, 2, 3, 5])
@pytest.mark.parametrize("dtype", [np.complex128, np.complex64])
def test_every_form_equals_scipy(fmt, procs, dtype):
    rng = np.random.default_rng(procs)
    dt = np.dtype(dtype)
    a = _sparse(rng, 31, 27, 0.15, dt, fmt)
    x, b = _dense(rng, 27, dt), _dense(rng, (27, 5), dt)
    y = deinsum.einsum("ij,j->i", a, x, procs=procs)
    assert isinstance(y, np.ndarray) and y.dtype == dt and y.shape == (31,)
    _close(y, a @ x, TOL[dt])
    c = deinsum.einsum("ij,jk->ik", a, b, procs=procs)
    assert c.dtype == dt
    _close(c, a @ b, TOL[dt])
    # SDDMM: the result in S's pattern, as a complex CSR matrix.
    s = _sparse(rng, 17, 13, 0.3, dt, fmt)
    u, v = _dense(rng, (17, 4), dt), _dense(rng, (13, 4), dt)
    out = deinsum.einsum("ij,ik,jk->ij", s, u, v, procs=procs)
    assert sp.isspmatrix_csr(out) and out.dtype == dt and out.nnz == sp.csr_matrix(s).nnz
    _close(out, s.toarray() * (u @ v.T), TOL[dt])
    # SpGEMM of two complex sparse matrices.
    g = _sparse(rng, 27, 11, 0.2, dt, fmt)
    prod = deinsum.einsum("ij,jk->ik", a, g, procs=procs)
    assert sp.isspmatrix_csr(prod) and prod.dtype == dt
    _close(prod, sp.csr_matrix(a) @ sp.csr_matrix(g), TOL[dt])


def test_real_and_complex_promote_as_numpy():
    rng = np.random.default_rng(7)
    for sdt, ddt in [
        (np.float64, np.complex128),
        (np.complex128, np.float64),
        (np.float32, np.complex64),
        (np.complex64, np.float32),
        (np.float32, np.complex128),
        (np.complex64, np.float64),
        (np.complex64, np.int32),
    ]:
        a = _sparse(rng, 13, 9, 0.3, sdt)
        x = _dense(rng, (9, 2), ddt) if np.dtype(ddt).kind in "fc" else rng.integers(-3, 3, (9, 2), dtype=ddt)
        want = np.result_type(sdt, ddt)
        got = deinsum.einsum("ij,jk->ik", a, x, procs=2)
        assert got.dtype == want, (sdt, ddt, got.dtype, want)
        _close(got, a.toarray().astype(want) @ x.astype(want), TOL.get(np.dtype(want), 1e-5))
    # Two sparse operands, one real, one complex.
    a, b = _sparse(rng, 8, 7, 0.4, np.float32), _sparse(rng, 7, 6, 0.4, np.complex128)
    c = deinsum.einsum("ij,jk->ik", a, b, procs=3)
    assert c.dtype == np.complex128
    _close(c, sp.csr_matrix(a, dtype=np.complex128) @ b, 1e-6)
    # dtype= a complex type widens real operands.
    r = _sparse(rng, 8, 7, 0.4, np.float64)
    z = deinsum.einsum("ij,j->i", r, np.ones(7), dtype=np.complex64)
    assert z.dtype == np.complex64
    _close(z, r @ np.ones(7), 1e-5)


def test_real_dtype_for_complex_operands_raises_as_numpy():
    rng = np.random.default_rng(8)
    a = _sparse(rng, 5, 4, 0.5, np.complex128, sp.csr_matrix)
    with pytest.raises(TypeError, match="Cannot cast"):
        deinsum.einsum("ij,j->i", a, np.ones(4), dtype=np.float64)
    with pytest.raises(TypeError, match="longdouble|clongdouble"):
        deinsum.einsum("ij,j->i", a, np.ones(4, dtype=np.clongdouble))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    m=st.integers(1, 23),
    n=st.integers(1, 19),
    k=st.integers(1, 6),
    density=st.floats(0.05, 1.0),
    procs=st.integers(1, 7),
    dtype=st.sampled_from([np.complex128, np.complex64]),
    fmt=st.sampled_from(FORMATS),
    form=st.sampled_from(["spmv", "spmm", "sddmm", "spgemm"]),
    seed=st.integers(0, 2**31 - 1),
)
def test_drawn_complex_sparse_einsums_equal_scipy(m, n, k, density, procs, dtype, fmt, form, seed):
    rng = np.random.default_rng(seed)
    dt = np.dtype(dtype)
    a = _sparse(rng, m, n, density, dt, fmt)
    if form == "spmv":
        x = _dense(rng, n, dt)
        # The dense product as reference: SciPy 1.17's coo_array @ vector returns shape () for
        # a 1x1 matrix where NumPy (and deinsum) give (1,).
        got, want = deinsum.einsum("ij,j->i", a, x, procs=procs), a.toarray() @ x
    elif form == "spmm":
        b = _dense(rng, (n, k), dt)
        got, want = deinsum.einsum("ij,jk->ik", a, b, procs=procs), a @ b
    elif form == "sddmm":
        u, v = _dense(rng, (m, k), dt), _dense(rng, (n, k), dt)
        got = deinsum.einsum("ij,ik,jk->ij", a, u, v, procs=procs)
        want = a.toarray() * (u @ v.T)
    else:
        b = _sparse(rng, n, k, density, dt, fmt)
        got, want = deinsum.einsum("ij,jk->ik", a, b, procs=procs), sp.csr_matrix(a) @ sp.csr_matrix(b)
    assert got.dtype == dt
    _close(got, want, TOL[dt])
