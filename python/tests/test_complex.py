"""Complex operands: computed as complex and returned as numpy.einsum returns them."""

import numpy as np
import pytest

import deinsum
from test_einsum import CASES

# Quantum chemistry (CCSD-like contractions, a two-electron transformation) and tensor
# networks (an MPS norm, a PEPS-like plaquette), at small uneven sizes.
QC_TN = [
    ("abij,cdab->cdij", [(4, 3, 5, 2), (3, 4, 4, 3)]),
    ("ijab,abkl->ijkl", [(3, 2, 4, 5), (4, 5, 3, 2)]),
    ("pqrs,pi,qj,rk,sl->ijkl", [(4, 4, 4, 4), (4, 3), (4, 3), (4, 3), (4, 3)]),
    ("iajb,jb->ia", [(3, 4, 3, 4), (3, 4)]),
    ("ai,bj,ab->ij", [(5, 3), (6, 4), (5, 6)]),
    (
        "abc,cde,efg,ahi,dij,gjk->bfhk",
        [(2, 3, 4), (4, 3, 5), (5, 3, 2), (2, 3, 4), (3, 4, 5), (2, 5, 3)],
    ),
    ("ab,bcd,de,efg->acfg", [(3, 4), (4, 2, 5), (5, 3), (3, 2, 4)]),
]


def _complex(rng, shape, dtype=np.complex128):
    return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)


@pytest.mark.parametrize("procs", [1, 2, 3, 5])
@pytest.mark.parametrize("expr,shapes", CASES + QC_TN)
def test_complex128_equals_numpy(expr, shapes, procs):
    rng = np.random.default_rng(abs(hash((expr, procs, "c"))) % 2**32)
    ops = [_complex(rng, s) for s in shapes]
    got = deinsum.einsum(expr, *ops, procs=procs)
    want = np.einsum(expr, *ops)
    assert np.shape(got) == np.shape(want)
    assert np.asarray(got).dtype == want.dtype == np.complex128
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("expr,shapes", QC_TN)
def test_complex64_equals_numpy(expr, shapes):
    rng = np.random.default_rng(11)
    ops = [_complex(rng, s, np.complex64) for s in shapes]
    got = deinsum.einsum(expr, *ops, procs=2)
    want = np.einsum(expr, *[o.astype(np.complex128) for o in ops])
    assert np.asarray(got).dtype == np.complex64
    np.testing.assert_allclose(got, want, rtol=2e-4, atol=2e-4)


@pytest.mark.parametrize(
    "types",
    [
        (np.float64, np.complex64),
        (np.float32, np.complex64),
        (np.complex64, np.complex128),
        (np.int64, np.complex64),
        (np.float32, np.complex128),
    ],
)
def test_mixed_operands_promote_as_numpy(types):
    rng = np.random.default_rng(2)
    a = _complex(rng, (4, 5)) if np.dtype(types[0]).kind == "c" else rng.standard_normal((4, 5))
    a = (a * 4).astype(types[0])
    b = _complex(rng, (5, 3), types[1])
    got = deinsum.einsum("ij,jk->ik", a, b, procs=3)
    want = np.einsum("ij,jk->ik", a, b)
    assert got.dtype == want.dtype == np.result_type(a, b)
    tol = 1e-10 if want.dtype == np.complex128 else 2e-4
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


def test_issue_example_keeps_the_imaginary_part():
    z = np.array([[1 + 2j]])
    got = deinsum.einsum("ij,jk->ik", z, z)
    np.testing.assert_array_equal(got, np.array([[-3 + 4j]]))
    # A complex dtype for real operands computes in it.
    x = np.ones((2, 2))
    got = deinsum.einsum("ij,jk->ik", x, x, dtype=np.complex64)
    assert got.dtype == np.complex64
    x64 = x.astype(np.complex64)
    np.testing.assert_array_equal(got, np.einsum("ij,jk->ik", x64, x64))


def test_a_real_dtype_for_complex_operands_raises_as_numpy():
    z = np.array([[1 + 2j]])
    with pytest.raises(TypeError) as numpy_err:
        np.einsum("ij,jk->ik", z, z, dtype=np.float64)
    with pytest.raises(TypeError) as ours:
        deinsum.einsum("ij,jk->ik", z, z, dtype=np.float64)
    # NumPy's wording of the start varies between versions; the cast it names does not.
    cast = "dtype('complex128') to dtype('float64') according to the rule 'safe'"
    assert cast in str(numpy_err.value) and cast in str(ours.value), str(ours.value)
    with pytest.raises(TypeError, match="complex64.*float32"):
        deinsum.einsum(
            "ij,jk->ik", z.astype(np.complex64), z.real.astype(np.float32), dtype=np.float32
        )


@pytest.mark.parametrize("bad", [np.longdouble, np.clongdouble, object])
def test_unsupported_types_name_the_type(bad):
    a = np.ones((2, 2), dtype=bad)
    name = str(np.dtype(bad))
    with pytest.raises(TypeError, match=name):
        deinsum.einsum("ij->i", a)
    with pytest.raises(TypeError, match=name):
        deinsum.einsum("ij->i", np.ones((2, 2)), dtype=bad)


def test_plan_runs_complex_and_scalar_results():
    rng = np.random.default_rng(4)
    a, b = _complex(rng, (6, 5)), _complex(rng, (5, 4))
    plan = deinsum.compile("ij,jk->ik", a.shape, b.shape, procs=3)
    np.testing.assert_allclose(plan.run(a, b), a @ b, rtol=1e-12)
    v = _complex(rng, (7,))
    got = deinsum.einsum("i,i->", v, v, procs=2)
    want = np.einsum("i,i->", v, v)
    assert type(got) is type(want) and np.isclose(got, want)


def test_complex_sparse_operands_compute_in_complex_not_cast():
    sp = pytest.importorskip("scipy.sparse")
    a = sp.random(5, 4, density=0.5, format="csr", random_state=1).astype(np.complex128)
    a.data = a.data * (1 + 2j)
    got = deinsum.einsum("ij,j->i", a, np.ones(4))
    assert got.dtype == np.complex128
    np.testing.assert_allclose(got, a @ np.ones(4), rtol=1e-12)
    with pytest.raises(TypeError, match="Cannot cast"):
        deinsum.einsum("ij,j->i", a, np.ones(4), dtype=np.float64)
