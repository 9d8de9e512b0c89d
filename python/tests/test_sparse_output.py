"""`deinsum run --output` of sparse results, read back by SciPy: Matrix Market through
`scipy.io.mmread`, the CSR archive through `scipy.sparse.load_npz`, FROSTT as text, all equal to
SciPy's own product and to each other bit for bit. Skipped where SciPy is not installed
(.ci/python.sh installs it)."""

import numpy as np
import pytest

sp = pytest.importorskip("scipy.sparse")
sio = pytest.importorskip("scipy.io")


def _operands(tmp_path):
    rng = np.random.default_rng(7)
    a = sp.random(40, 30, density=0.08, format="coo", random_state=rng)
    b = sp.random(30, 25, density=0.1, format="csr", random_state=rng)
    # An explicit zero stays in A's pattern (SDDMM's output pattern is A's, by rule).
    row = np.append(a.row, 39)
    col = np.append(a.col, 29)
    data = np.append(a.data, 0.0)
    a = sp.coo_matrix((data, (row, col)), shape=(40, 30))
    pa, pb = tmp_path / "A.mtx", tmp_path / "B.npz"
    sio.mmwrite(str(pa), a)
    sp.save_npz(str(pb), b)
    u = rng.standard_normal((40, 5))
    v = rng.standard_normal((30, 5))
    pu, pv = tmp_path / "U.npy", tmp_path / "V.npy"
    np.save(pu, u)
    np.save(pv, v)
    return a.tocsr(), b, u, v, pa, pb, pu, pv


def _read_all(tmp_path, stem):
    m = sio.mmread(str(tmp_path / f"{stem}.mtx"))
    z = sp.load_npz(str(tmp_path / f"{stem}.npz"))
    t = np.loadtxt(tmp_path / f"{stem}.tns", ndmin=2)
    d = np.load(tmp_path / f"{stem}.npy")
    return sp.coo_matrix(m), z, t, d


@pytest.mark.parametrize("procs", ["1", "3", "8"])
def test_spgemm_and_sddmm_results_read_by_scipy(cli, tmp_path, procs):
    a, b, u, v, pa, pb, pu, pv = _operands(tmp_path)
    for stem, expr, inputs in [
        ("C", "ij,jk->ik", f"{pa},{pb}"),
        ("S", "ij,ik,jk->ij", f"{pa},{pu},{pv}"),
    ]:
        for ext in ["mtx", "npz", "tns", "npy"]:
            cli("run", expr, "--inputs", inputs, "--procs", procs, "--check",
                "--output", str(tmp_path / f"{stem}.{ext}"))
        m, z, t, d = _read_all(tmp_path, stem)
        assert z.format == "csr" and z.shape == m.shape == d.shape
        # The same entries, bit for bit, in every format.
        zc = z.tocoo()
        assert np.array_equal(m.row, zc.row) and np.array_equal(m.col, zc.col)
        assert np.array_equal(m.data.view(np.int64), zc.data.view(np.int64))
        assert np.array_equal(t[:, 0].astype(int) - 1, zc.row)
        assert np.array_equal(t[:, 1].astype(int) - 1, zc.col)
        assert np.array_equal(t[:, 2], zc.data)
        assert np.array_equal(z.toarray(), d)
        if stem == "C":
            want = (a @ b).toarray()
        else:
            # SDDMM: A * (U V^T) at A's pattern, its explicit zero stored.
            ac = a.tocoo()
            want = a.copy()
            want.data = a.data * np.einsum("ik,ik->i", u[ac.row], v[ac.col])
            assert np.array_equal(z.indptr, a.indptr)
            assert np.array_equal(z.indices, a.indices)
            want = want.toarray()
        np.testing.assert_allclose(d, want, rtol=1e-12, atol=1e-12)
