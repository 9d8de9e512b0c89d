"""Zero-size operands (issue 37 item 4): NumPy's meaning, an empty result, or zeros where an
empty index is summed; plans of such einsums build and move nothing."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import deinsum

CASES = [
    ("ij,jk->ik", [(0, 5), (5, 3)]),  # empty output
    ("ij,jk->ik", [(5, 0), (0, 3)]),  # empty summed index: zeros
    ("ii->", [(0, 0)]),  # a (0, 0) trace
    ("ii->i", [(0, 0)]),
    ("bij,bjk->bik", [(0, 2, 3), (0, 3, 4)]),  # a zero batch dimension
    ("bij,bjk->ik", [(0, 2, 3), (0, 3, 4)]),  # a summed zero batch: zeros
    ("...ij,...jk->...ik", [(2, 0, 3, 4), (1, 1, 4, 5)]),  # zero inside `...`
    ("...i,...i->...", [(0, 3), (1, 3)]),  # 1 broadcast against 0 inside `...`
    ("ij,ij->ij", [(0, 3), (1, 3)]),  # 1 broadcast against 0, named
    ("ab,bc,cd,de->ae", [(3, 4), (4, 0), (0, 5), (5, 6)]),  # a zero in a chain
    ("ab,bc,cd,de->ae", [(0, 4), (4, 2), (2, 5), (5, 6)]),
    ("i,i->", [(0,), (0,)]),  # an empty dot product: 0
    ("ij->", [(0, 7)]),
    ("ij", [(3, 0)]),
]


@pytest.mark.parametrize("procs", [1, 2, 3])
@pytest.mark.parametrize("expr,shapes", CASES)
def test_zero_size_matches_numpy(expr, shapes, procs):
    rng = np.random.default_rng(0)
    ops = [rng.standard_normal(s) for s in shapes]
    got = deinsum.einsum(expr, *ops, procs=procs)
    want = np.einsum(expr, *ops)
    assert np.shape(got) == np.shape(want)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", [np.float32, np.complex128])
def test_zero_size_keeps_the_dtype(dtype):
    got = deinsum.einsum("ij,jk->ik", np.ones((4, 0), dtype), np.ones((0, 2), dtype))
    assert got.dtype == dtype and got.shape == (4, 2) and not got.any()


def test_plans_of_zero_size_einsums_move_nothing():
    p = deinsum.compile("ij,jk->ik", (0, 5), (5, 3), procs=4)
    assert p.output_shape == (0, 3)
    assert p.input_shapes == [(0, 5), (5, 3)]
    pred = p.predicted
    assert pred["max_per_rank"] == 0 and pred["total"] == 0 and pred["max_peak_memory"] == 0
    assert "ij,jk->ik" in p.explain()
    # The plan reads back from its JSON and runs.
    q = deinsum.Plan.from_json(p.to_json())
    assert q.run(np.ones((0, 5)), np.ones((5, 3))).shape == (0, 3)
    p = deinsum.compile("ij,jk->ik", (5, 0), (0, 3), procs=3)
    np.testing.assert_array_equal(p.run(np.ones((5, 0)), np.ones((0, 3))), np.zeros((5, 3)))


def test_contract_path_and_bound_take_zero_extents():
    path, info = deinsum.contract_path("ij,jk,kl->il", (2, 0), (0, 3), (3, 4), shapes=True)
    assert len(path) == 2
    assert "ij,jk,kl->il" in str(info) or info.eq


@st.composite
def einsum_with_zeros(draw):
    """A random einsum over up to 3 operands with extents in 0..3, at least one of them 0."""
    letters = "abcd"
    n = draw(st.integers(1, 3))
    terms = [
        "".join(draw(st.lists(st.sampled_from(letters), min_size=0, max_size=3, unique=True)))
        for _ in range(n)
    ]
    used = sorted(set("".join(terms)))
    if not used:
        terms[0] = "a"
        used = ["a"]
    ext = {c: draw(st.integers(0, 3)) for c in used}
    ext[draw(st.sampled_from(used))] = 0
    out = "".join(draw(st.permutations(used))[: draw(st.integers(0, len(used)))])
    expr = ",".join(terms) + "->" + out
    shapes = [tuple(ext[c] for c in t) for t in terms]
    return expr, shapes


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(case=einsum_with_zeros(), procs=st.integers(1, 3))
def test_random_zero_size_einsums_match_numpy(case, procs):
    expr, shapes = case
    rng = np.random.default_rng(1)
    ops = [rng.standard_normal(s) for s in shapes]
    got = deinsum.einsum(expr, *ops, procs=procs)
    want = np.einsum(expr, *ops)
    assert np.shape(got) == np.shape(want), expr
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
