"""A plan's blocks per rank (Plan.input_block, Plan.output_block), and `comm=` in a build
without MPI. The runs on an mpi4py communicator are tested in python/tests_mpi (under mpirun,
by .ci/mpi.sh)."""

import numpy as np
import pytest

import deinsum

CASES = [
    ("ij,jk->ik", [(7, 5), (5, 3)], 4),
    ("ijk,ja,ka->ia", [(9, 7, 5), (7, 4), (5, 4)], 3),
    ("ij,jk,kl->il", [(6, 9), (9, 4), (4, 11)], 8),
    ("...ij,...jk->...ik", [(2, 3, 4, 5), (1, 3, 5, 6)], 2),
]


@pytest.mark.parametrize("expr,shapes,procs", CASES)
def test_input_blocks_are_slices_that_cover_each_operand(expr, shapes, procs):
    plan = deinsum.compile(expr, *shapes, procs=procs)
    for k, shape in enumerate(shapes):
        cover = np.zeros(shape, dtype=np.int64)
        for r in range(procs):
            s = plan.input_block(k, r)
            if s is None:
                continue
            assert len(s) == len(shape)
            assert all(0 <= x.start <= x.stop <= n for x, n in zip(s, shape))
            cover[s] += 1
        # Every element is some rank's (replicated operands: several ranks').
        assert (cover >= 1).all()


@pytest.mark.parametrize("expr,shapes,procs", CASES)
def test_output_blocks_are_disjoint_and_cover_the_result(expr, shapes, procs):
    plan = deinsum.compile(expr, *shapes, procs=procs)
    cover = np.zeros(plan.output_shape, dtype=np.int64)
    for r in range(procs):
        s = plan.output_block(r)
        if s is not None:
            cover[s] += 1
    assert (cover == 1).all()


def test_block_arguments_are_checked():
    plan = deinsum.compile("ij,jk->ik", (7, 5), (5, 3), procs=2)
    with pytest.raises(ValueError, match="the plan is for 2 ranks"):
        plan.input_block(0, 2)
    with pytest.raises(ValueError, match="the plan is for 2 ranks"):
        plan.output_block(5)
    with pytest.raises(ValueError, match="takes 2 operands"):
        plan.input_block(2, 0)
    with pytest.raises(ValueError, match="k must be at least 0"):
        plan.input_block(-1, 0)
    diag = deinsum.compile("ii,i->i", (6, 6), (6,), procs=2)
    with pytest.raises(ValueError, match="repeats an index"):
        diag.input_block(0, 0)


@pytest.mark.skipif(deinsum._native.HAS_MPI, reason="this extension has MPI")
def test_comm_without_mpi_says_how_to_build_it():
    a = np.ones((3, 4))
    b = np.ones((4, 2))
    plan = deinsum.compile("ij,jk->ik", a.shape, b.shape, procs=1)
    calls = [
        lambda: deinsum.einsum("ij,jk->ik", a, b, comm=object()),
        lambda: plan.run(a, b, comm=object()),
        lambda: plan.run_blocks(a, b, comm=object()),
    ]
    for call in calls:
        with pytest.raises(RuntimeError, match='MATURIN_PEP517_ARGS="--features mpi"'):
            call()
