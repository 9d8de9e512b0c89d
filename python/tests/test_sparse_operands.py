"""deinsum.einsum with scipy.sparse operands (CSR, CSC, COO; matrices and arrays): SpMV, SpMM,
SDDMM and SpGEMM against NumPy/SciPy at procs 1, 2, 3, in float32 and float64."""

import numpy as np
import pytest

import deinsum

sp = pytest.importorskip("scipy.sparse")

FORMATS = [sp.csr_matrix, sp.csc_matrix, sp.coo_matrix, sp.csr_array, sp.coo_array]
PROCS = [1, 2, 3]
DTYPES = [(np.float64, 1e-12), (np.float32, 1e-5)]


def _random(m, n, density, seed, dtype):
    return sp.random(m, n, density=density, random_state=seed, format="coo", dtype=dtype)


def _close(got, want, tol):
    scale = max(1.0, float(np.abs(want).max()) if want.size else 1.0)
    assert np.abs(np.asarray(got, dtype=np.float64) - want).max() <= tol * scale


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("procs", PROCS)
@pytest.mark.parametrize("dtype,tol", DTYPES)
def test_spmv_and_spmm(fmt, procs, dtype, tol):
    rng = np.random.default_rng(1)
    a = fmt(_random(31, 27, 0.15, 2, dtype))
    x = rng.standard_normal(27).astype(dtype)
    b = rng.standard_normal((27, 5)).astype(dtype)
    y = deinsum.einsum("ij,j->i", a, x, procs=procs)
    assert isinstance(y, np.ndarray) and y.dtype == dtype and y.shape == (31,)
    _close(y, a.toarray().astype(np.float64) @ x.astype(np.float64), tol)
    c = deinsum.einsum("ij,jk->ik", a, b, procs=procs)
    assert isinstance(c, np.ndarray) and c.dtype == dtype and c.shape == (31, 5)
    _close(c, a.toarray().astype(np.float64) @ b.astype(np.float64), tol)


@pytest.mark.parametrize("procs", PROCS)
@pytest.mark.parametrize("dtype,tol", DTYPES)
def test_sddmm_returns_csr_in_the_pattern(procs, dtype, tol):
    rng = np.random.default_rng(3)
    s = sp.csr_matrix(_random(17, 13, 0.3, 4, dtype))
    u = rng.standard_normal((17, 4)).astype(dtype)
    v = rng.standard_normal((13, 4)).astype(dtype)
    out = deinsum.einsum("ij,ik,jk->ij", s, u, v, procs=procs)
    assert sp.isspmatrix_csr(out) and out.shape == (17, 13) and out.dtype == dtype
    dense = s.toarray().astype(np.float64)
    want = dense * (u.astype(np.float64) @ v.astype(np.float64).T)
    _close(out.toarray(), want, tol)
    assert out.nnz == s.nnz


@pytest.mark.parametrize("procs", PROCS)
@pytest.mark.parametrize("dtype,tol", DTYPES)
def test_spgemm_returns_csr(procs, dtype, tol):
    a = sp.csc_matrix(_random(20, 16, 0.2, 5, dtype))
    b = sp.coo_array(_random(16, 11, 0.2, 6, dtype))
    c = deinsum.einsum("ij,jk->ik", a, b, procs=procs)
    assert sp.isspmatrix_csr(c) and c.shape == (20, 11) and c.dtype == dtype
    want = (sp.csr_matrix(a, dtype=np.float64) @ sp.csr_matrix(b, dtype=np.float64)).toarray()
    _close(c.toarray(), want, tol)


def test_unbuilt_forms_and_options_raise():
    a = sp.csr_matrix(_random(6, 6, 0.5, 7, np.float64))
    with pytest.raises(ValueError, match="not built yet"):
        deinsum.einsum("ij,jk->ik", np.ones((6, 6)), a)
    with pytest.raises(ValueError, match="mem="):
        deinsum.einsum("ij,j->i", a, np.ones(6), mem=100)
