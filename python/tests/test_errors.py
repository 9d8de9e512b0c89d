"""Errors a caller can cause, and a fuzz of the binding: nothing may crash the interpreter."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import deinsum


def test_syntax_error_carries_caret_line():
    with pytest.raises(ValueError) as e:
        deinsum.einsum("ij,jk->i#k", np.ones((2, 2)), np.ones((2, 2)))
    msg = str(e.value)
    assert "^" in msg
    caret_line = [line for line in msg.splitlines() if line.strip().startswith("^")]
    assert caret_line, msg


def test_shape_mismatch_names_operand_index_and_extents():
    with pytest.raises(ValueError) as e:
        deinsum.einsum("ij,jk->ik", np.ones((2, 3)), np.ones((4, 5)))
    msg = str(e.value)
    assert "j" in msg and "3" in msg and "4" in msg and "operand" in msg, msg


def test_wrong_operand_count():
    with pytest.raises(ValueError):
        deinsum.einsum("ij,jk->ik", np.ones((2, 3)))


def test_infeasible_budget_says_what_is_needed():
    with pytest.raises(ValueError) as e:
        deinsum.einsum("ij,jk->ik", np.ones((40, 40)), np.ones((40, 40)), procs=2, mem=3)
    msg = str(e.value)
    assert any(ch.isdigit() for ch in msg.replace("3", "", 1)), msg
    assert "memory" in msg or "words" in msg, msg


def test_bad_strategy_and_arguments():
    with pytest.raises(ValueError):
        deinsum.contract_path("ij,jk", (2, 3), (3, 4), shapes=True, optimize="nonsense")
    with pytest.raises(ValueError):
        deinsum.compile("ij,jk", (2, 3), (3, 4), procs=0)
    with pytest.raises(ValueError):
        deinsum.bound("ij,jk", (2, 3), (3, 4), mem=0)
    with pytest.raises(ValueError):
        deinsum.Plan.from_json("{not json")


ALPHABET = "ij k.,->…aé#1 "


@settings(max_examples=1500, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    expr=st.text(alphabet=ALPHABET, max_size=14),
    shapes=st.lists(st.lists(st.integers(0, 3), max_size=4), max_size=4),
    procs=st.integers(1, 3),
)
def test_fuzz_expressions_and_shapes(expr, shapes, procs):
    """Random text and shapes: either a result equal to NumPy's or a ValueError/TypeError."""
    ops = [np.full(s, 0.5) for s in shapes]
    try:
        got = deinsum.einsum(expr, *ops, procs=procs)
    except (ValueError, TypeError):
        return
    try:
        want = np.einsum(expr, *ops)
    except ValueError:
        # deinsum's language is wider (opt_einsum's symbols: any non-ASCII character).
        return
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


@settings(max_examples=1500, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    expr=st.text(alphabet="ijk,->.", max_size=12),
    shapes=st.lists(st.lists(st.integers(0, 5), max_size=3), max_size=3),
)
def test_fuzz_paths_and_plans(expr, shapes):
    try:
        deinsum.contract_path(expr, *shapes, shapes=True)
    except ValueError:
        pass
    try:
        plan = deinsum.compile(expr, *shapes, procs=2)
    except ValueError:
        return
    deinsum.Plan.from_json(plan.to_json())


@st.composite
def near_valid(draw):
    """Expressions over a few indices with shapes that mostly fit: extents drawn per index,
    then sometimes set to 1 (broadcast) or off by one (a mismatch); `...` now and then."""
    letters = "ijkl"
    ext = {c: draw(st.integers(1, 4)) for c in letters}
    ell = draw(st.lists(st.integers(1, 3), max_size=2))
    n = draw(st.integers(1, 3))
    terms, shapes = [], []
    for _ in range(n):
        idx = draw(st.text(alphabet=letters, max_size=3))
        use_ell = bool(ell) and draw(st.booleans())
        shape = [ext[c] for c in idx]
        if use_ell:
            shape = list(ell) + shape
            idx = "..." + idx
        if shape and draw(st.integers(0, 5)) == 0:
            d = draw(st.integers(0, len(shape) - 1))
            shape[d] = draw(st.sampled_from([1, shape[d] + 1]))
        terms.append(idx)
        shapes.append(shape)
    expr = ",".join(terms)
    if draw(st.booleans()):
        used = sorted(set("".join(terms).replace(".", "")))
        out = "".join(c for c in used if draw(st.booleans()))
        if any("..." in t for t in terms) and draw(st.booleans()):
            out = "..." + out
        expr += "->" + out
    return expr, shapes


@settings(max_examples=1500, deadline=None, suppress_health_check=list(HealthCheck))
@given(case=near_valid(), procs=st.integers(1, 4), f32=st.booleans())
def test_fuzz_near_valid_einsums_equal_numpy(case, procs, f32):
    """Mostly valid einsums: deinsum and NumPy agree on the result or both refuse it."""
    expr, shapes = case
    rng = np.random.default_rng(len(expr) * 31 + procs)
    ops = [rng.standard_normal(s).astype(np.float32 if f32 else np.float64) for s in shapes]
    ops64 = [o.astype(np.float64) for o in ops]
    try:
        want = np.einsum(expr, *ops64)
    except ValueError as e:
        if "..." in expr and "->" in expr and "..." not in expr.split("->")[1] and (
            "more dimensions than subscripts" in str(e)
        ):
            # NumPy refuses an explicit output that drops `...`; deinsum sums those dims
            # away, as opt_einsum does.
            head, out = expr.split("->")
            try:
                full = np.einsum(head + "->..." + out, *ops64)
            except ValueError:
                with pytest.raises(ValueError):
                    deinsum.einsum(expr, *ops, procs=procs)
                return
            want = full.reshape((-1,) + full.shape[full.ndim - len(out):]).sum(axis=0)
        else:
            with pytest.raises(ValueError):
                deinsum.einsum(expr, *ops, procs=procs)
            return
    got = deinsum.einsum(expr, *ops, procs=procs)
    tol = 1e-4 if f32 else 1e-10
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol, err_msg=f"{expr} {shapes}")


def test_too_many_in_process_ranks_is_refused():
    with pytest.raises(ValueError, match="ranks"):
        deinsum.einsum("ij,jk->ik", np.ones((2, 2)), np.ones((2, 2)), procs=100_000)
