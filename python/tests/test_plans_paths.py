"""contract_path, compile and bound against the CLI for the same input."""

import json

import numpy as np
import pytest

import deinsum

PATH_CASES = [
    ("ijk,ja,ka,al->il", [(10, 10, 10), (10, 10), (10, 10), (10, 10)], "optimal"),
    ("ijk,ja,ka,al->il", [(30, 20, 10), (20, 8), (10, 8), (8, 40)], "auto"),
    ("ab,bc,cd,de,ef->af", [(8, 30), (30, 4), (4, 50), (50, 6), (6, 9)], "greedy"),
    ("ab,bc,cd,de,ef->af", [(8, 30), (30, 4), (4, 50), (50, 6), (6, 9)], "dp"),
    ("abc,bd,ce,ef->adf", [(5, 6, 7), (6, 8), (7, 9), (9, 4)], "branch"),
    ("...ij,...jk->...ik", [(2, 3, 4, 5), (2, 3, 5, 6)], "auto"),
]


def shape_flag(shapes):
    return ",".join("x".join(str(n) for n in s) for s in shapes)


@pytest.mark.parametrize("expr,shapes,opt", PATH_CASES)
def test_path_equals_cli(cli, expr, shapes, opt):
    path, info = deinsum.contract_path(expr, *shapes, shapes=True, optimize=opt)
    want = json.loads(
        cli("path", expr, "--shapes", shape_flag(shapes), "--optimize", opt, "--format", "json")
    )
    assert [list(p) for p in path] == want["path"]
    assert info.report == want
    assert info.opt_cost == want["flops"]
    assert info.largest_intermediate == want["largest_intermediate"]
    assert info.path == path
    text = cli("path", expr, "--shapes", shape_flag(shapes), "--optimize", opt)
    assert str(info) == text


def test_path_from_arrays_equals_path_from_shapes():
    ops = [np.ones((4, 5)), np.ones((5, 6)), np.ones((6, 2))]
    p1, i1 = deinsum.contract_path("ab,bc,cd->ad", *ops)
    p2, i2 = deinsum.contract_path("ab,bc,cd->ad", (4, 5), (5, 6), (6, 2), shapes=True)
    assert p1 == p2 and i1.opt_cost == i2.opt_cost


def test_path_memory_limit_equals_cli(cli):
    shapes = [(10, 10, 10), (10, 10), (10, 10), (10, 10)]
    path, info = deinsum.contract_path(
        "ijk,ja,ka,al->il", *shapes, shapes=True, memory_limit=120
    )
    want = json.loads(
        cli("path", "ijk,ja,ka,al->il", "--shapes", shape_flag(shapes),
            "--memory-limit", "120", "--format", "json")
    )
    assert info.report == want


PLAN_CASES = [
    ("ijk,ja,ka,al->il", [(10, 10, 10), (10, 10), (10, 10), (10, 10)], 8, None),
    ("ij,jk->ik", [(64, 48), (48, 32)], 6, 2000),
    ("ij,jk,kl->il", [(30, 20), (20, 25), (25, 7)], 5, None),
    ("...ij,...jk->...ik", [(3, 4, 5), (3, 5, 6)], 3, None),
]


@pytest.mark.parametrize("expr,shapes,procs,mem", PLAN_CASES)
def test_plan_json_equals_cli(cli, expr, shapes, procs, mem):
    plan = deinsum.compile(expr, *shapes, procs=procs, mem=mem)
    args = ["plan", expr, "--shapes", shape_flag(shapes), "--procs", str(procs)]
    if mem is not None:
        args += ["--mem", str(mem)]
    assert plan.to_json() + "\n" == cli(*args, "--format", "json")
    # The CLI's text ends with the candidate paths the planner weighed (the choice, which the
    # Plan object does not keep); the plan's own text before it is the same, byte for byte.
    text = cli(*args)
    cut = text.rindex("\nobjective ") + 1
    assert plan.explain() == text[:cut]
    assert plan.to_dict() == json.loads(plan.to_json())
    assert plan.predicted == plan.to_dict()["prediction"]
    assert plan.procs == procs


def test_plan_round_trips_through_json_and_runs():
    rng = np.random.default_rng(11)
    shapes = [(6, 5, 4), (5, 3), (4, 3), (3, 7)]
    plan = deinsum.compile("ijk,ja,ka,al->il", *shapes, procs=4)
    again = deinsum.Plan.from_json(plan.to_json())
    assert again.to_json() == plan.to_json()
    ops = [rng.standard_normal(s) for s in shapes]
    want = np.einsum("ijk,ja,ka,al->il", *ops)
    np.testing.assert_allclose(plan.run(*ops), want, rtol=1e-10)
    np.testing.assert_allclose(again.run(*ops), want, rtol=1e-10)
    assert plan.output_shape == (6, 7)
    assert plan.input_shapes == shapes


def test_plan_run_refuses_other_shapes():
    plan = deinsum.compile("ij,jk->ik", (3, 4), (4, 5), procs=2)
    with pytest.raises(ValueError, match=r"operand 1 has shape \[4, 6\]"):
        plan.run(np.ones((3, 4)), np.ones((4, 6)))
    with pytest.raises(ValueError, match="takes 2 operands, 1 given"):
        plan.run(np.ones((3, 4)))


def test_bound_equals_cli(cli):
    shapes = [(20, 20, 20), (20, 20), (20, 20), (20, 20)]
    got = deinsum.bound("ijk,ja,ka,al->il", *shapes, mem=100, procs=4)
    want = json.loads(
        cli("bound", "ijk,ja,ka,al->il", "--shapes", shape_flag(shapes), "--mem", "100",
            "--procs", "4", "--format", "json")
    )
    assert got == want
    assert got["q_total"] > 0


def test_matrix_multiplication_bound_closed_form():
    # SOAP: Q >= 2 I J K / sqrt(S) for C = A B.
    n, s = 64, 256.0
    got = deinsum.bound("ij,jk->ik", (n, n), (n, n), mem=s)
    assert got["groups"][0]["q"] == pytest.approx(2 * n**3 / s**0.5, rel=0.05)


def test_host_plans_describe_this_host_and_run():
    shapes = [(40, 30), (30, 20)]
    default = deinsum.compile("ij,jk->ik", *shapes, procs=2)
    host = deinsum.compile("ij,jk->ik", *shapes, procs=2, machine="host")
    assert "as this host" not in default.predicted["machine"]
    assert "as this host" in host.predicted["machine"]
    assert "2 rank(s)" in host.predicted["machine"]
    rng = np.random.default_rng(5)
    ops = [rng.standard_normal(s) for s in shapes]
    np.testing.assert_allclose(host.run(*ops), ops[0] @ ops[1], rtol=1e-10)
    # For MPI ranks: this node's cores shared by the ranks the launcher put on it (outside a
    # launcher, all of them).
    mpi = deinsum.compile("ij,jk->ik", *shapes, procs=2, machine="mpi")
    assert "as this host" in mpi.predicted["machine"]
    assert "2 rank(s)" in mpi.predicted["machine"]
    with pytest.raises(ValueError, match="machine must be 'default', 'host' or 'mpi'"):
        deinsum.compile("ij,jk->ik", *shapes, procs=2, machine="cluster")
