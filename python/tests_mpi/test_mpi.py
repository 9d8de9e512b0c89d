"""deinsum on an mpi4py communicator, run by every rank of an MPI job:

    DEINSUM_MPI_EXPECT=3 mpirun -n 3 python -m pytest -q -p no:cacheprovider python/tests_mpi

Needs mpi4py and the extension built with the `mpi` feature (MATURIN_PEP517_ARGS="--features
mpi" pip install ./python); both missing is a failure, not a skip. Every test is collective:
each rank runs the same tests in the same order. Not collected by the default suite
(python/tests), which runs without MPI; .ci/mpi.sh runs this file under mpirun -n 1, 2, 3, 4.
"""

import os

import numpy as np
import pytest
from mpi4py import MPI

import deinsum

COMM = MPI.COMM_WORLD
RANK = COMM.Get_rank()
SIZE = COMM.Get_size()


def operands(shapes, dtype, seed=0):
    """The same pseudo-random operands on every rank."""
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s).astype(dtype) for s in shapes]


def tol(dtype):
    return dict(rtol=1e-4, atol=1e-4) if dtype == np.float32 else dict(rtol=1e-10, atol=1e-10)


def test_world_size_is_the_launchers():
    # A program started by another MPI's launcher runs as n singletons of size 1.
    want = os.environ.get("DEINSUM_MPI_EXPECT")
    if want is None:
        pytest.skip("DEINSUM_MPI_EXPECT not set")
    assert SIZE == int(want), f"MPI world of {SIZE} ranks, expected {want}"


def test_the_extension_has_mpi():
    assert deinsum._native.HAS_MPI


EINSUMS = [
    ("ij,jk->ik", [(7, 5), (5, 3)]),
    ("ij,jk->ik", [(32, 24), (24, 16)]),
    ("ijk,ja,ka->ia", [(9, 7, 5), (7, 4), (5, 4)]),
    ("ijk,ja,ka->ia", [(7, 5, 3), (5, 2), (3, 2)]),
    ("ij,jk,kl,lm->im", [(6, 9), (9, 4), (4, 11), (11, 5)]),
    ("ijk->kj", [(7, 5, 3)]),
    ("i,j->ij", [(7,), (5,)]),
    ("i,i->", [(13,), (13,)]),
    ("ii,i->i", [(6, 6), (6,)]),
    ("bij,bjk->bik", [(3, 5, 4), (3, 4, 6)]),
]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("expr,shapes", EINSUMS)
def test_einsum_on_comm_equals_numpy(expr, shapes, dtype):
    ops = operands(shapes, dtype)
    got = deinsum.einsum(expr, *ops, comm=COMM)
    want = np.einsum(expr, *ops)
    assert np.asarray(got).dtype == dtype
    assert np.shape(got) == np.shape(want)
    np.testing.assert_allclose(got, want, **tol(dtype))


def test_plan_run_on_comm_and_repeated():
    ops = operands([(9, 7, 5), (7, 4), (5, 4)], np.float64)
    plan = deinsum.compile("ijk,ja,ka->ia", *[o.shape for o in ops], procs=SIZE, machine="mpi")
    want = np.einsum("ijk,ja,ka->ia", *ops)
    for _ in range(3):
        np.testing.assert_allclose(plan.run(*ops, comm=COMM), want, rtol=1e-10)
    np.testing.assert_allclose(plan.run(*ops, comm=COMM, threads=2), want, rtol=1e-10)
    # A plan compiled for the built-in machine runs too.
    plan = deinsum.compile("ijk,ja,ka->ia", *[o.shape for o in ops], procs=SIZE)
    np.testing.assert_allclose(plan.run(*ops, comm=COMM), want, rtol=1e-10)


def test_non_contiguous_and_integer_operands():
    a = np.arange(35, dtype=np.int64).reshape(5, 7).T  # a transposed view: copied once
    b = np.arange(15, dtype=np.int32).reshape(5, 3)
    got = deinsum.einsum("ij,jk->ik", a, b, comm=COMM)
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, a @ b)


def test_sub_communicators():
    # Two halves of the world each run their own einsum on their own duplicate.
    color = RANK % 2
    sub = COMM.Split(color, RANK)
    try:
        ops = operands([(8, 6), (6, 5)], np.float64, seed=color)
        got = deinsum.einsum("ij,jk->ik", *ops, comm=sub)
        np.testing.assert_allclose(got, ops[0] @ ops[1], rtol=1e-10)
    finally:
        sub.Free()


def test_caller_communicator_left_usable():
    dup = COMM.Dup()
    ops = operands([(7, 5), (5, 3)], np.float64)
    deinsum.einsum("ij,jk->ik", *ops, comm=dup)
    deinsum.einsum("ij,jk->ik", *ops, comm=COMM)
    # Neither communicator was freed or left with a message in flight.
    assert dup.allreduce(1) == SIZE
    assert COMM.allreduce(RANK) == SIZE * (SIZE - 1) // 2
    dup.Free()


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize(
    "expr,shapes",
    [
        ("ij,jk->ik", [(7, 5), (5, 3)]),
        ("ijk,ja,ka->ia", [(9, 7, 5), (7, 4), (5, 4)]),
        ("ij,jk,kl->il", [(6, 9), (9, 4), (4, 11)]),
        ("ijk->kj", [(7, 5, 3)]),
    ],
)
def test_run_blocks_each_rank_its_own(expr, shapes, dtype):
    ops = operands(shapes, dtype)
    want = np.einsum(expr, *ops)
    plan = deinsum.compile(expr, *shapes, procs=SIZE, machine="mpi")
    blocks = []
    for k, a in enumerate(ops):
        s = plan.input_block(k, RANK)
        blocks.append(None if s is None else a[s])
    out = plan.run_blocks(*blocks, comm=COMM)
    expect = plan.output_block(RANK)
    if out is None:
        assert expect is None
        mine = None
    else:
        block, where = out
        assert where == expect
        assert block.dtype == dtype
        np.testing.assert_allclose(block, want[where], **tol(dtype))
        mine = tuple((s.start, s.stop) for s in where)
    # The ranks' output blocks are disjoint and cover the result.
    cover = np.zeros(want.shape, dtype=np.int64)
    for r in COMM.allgather(mine):
        if r is not None:
            cover[tuple(slice(s, e) for s, e in r)] += 1
    assert (cover == 1).all()


def test_run_blocks_refusal_raises_on_every_rank():
    shapes = [(7, 5), (5, 3)]
    ops = operands(shapes, np.float64)
    plan = deinsum.compile("ij,jk->ik", *shapes, procs=SIZE, machine="mpi")
    blocks = [
        None if plan.input_block(k, RANK) is None else a[plan.input_block(k, RANK)]
        for k, a in enumerate(ops)
    ]
    # The last rank that holds a block of operand 0 passes a block of the wrong shape.
    bad = max(r for r in range(SIZE) if plan.input_block(0, r) is not None)
    if RANK == bad:
        blocks[0] = np.ones((blocks[0].shape[0] + 1, blocks[0].shape[1]))
    with pytest.raises(ValueError) as e:
        plan.run_blocks(*blocks, comm=COMM)
    if RANK == bad:
        assert "has shape" in str(e.value)
    else:
        assert f"rank {bad} refused" in str(e.value)
    # Too few blocks are refused on every rank.
    with pytest.raises(ValueError, match="blocks given"):
        plan.run_blocks(blocks[0], comm=COMM)


def test_plan_for_another_size_is_refused():
    shapes = [(7, 5), (5, 3)]
    ops = operands(shapes, np.float64)
    plan = deinsum.compile("ij,jk->ik", *shapes, procs=SIZE + 1)
    with pytest.raises(
        ValueError, match=f"plan is for {SIZE + 1} ranks but the communicator has {SIZE}"
    ):
        plan.run(*ops, comm=COMM)
    with pytest.raises(ValueError, match=f"procs={SIZE + 1} but the communicator has {SIZE}"):
        deinsum.einsum("ij,jk->ik", *ops, procs=SIZE + 1, comm=COMM)
    # procs equal to the size is accepted.
    np.testing.assert_allclose(
        deinsum.einsum("ij,jk->ik", *ops, procs=SIZE, comm=COMM), ops[0] @ ops[1], rtol=1e-10
    )


def test_not_a_communicator():
    ops = operands([(7, 5), (5, 3)], np.float64)
    for bad in ("COMM_WORLD", 0, object()):
        with pytest.raises(TypeError, match="mpi4py communicator"):
            deinsum.einsum("ij,jk->ik", *ops, comm=bad)
    plan = deinsum.compile("ij,jk->ik", (7, 5), (5, 3), procs=SIZE)
    with pytest.raises(TypeError, match="mpi4py communicator"):
        plan.run(*ops, comm=42)
    with pytest.raises(ValueError, match="COMM_NULL"):
        deinsum.einsum("ij,jk->ik", *ops, comm=MPI.COMM_NULL)
    with pytest.raises(ValueError, match="COMM_NULL"):
        plan.run(*ops, comm=MPI.COMM_NULL)


def test_wrong_shape_raises_on_every_rank():
    ops = operands([(7, 5), (5, 3)], np.float64)
    plan = deinsum.compile("ij,jk->ik", (7, 5), (5, 3), procs=SIZE)
    if RANK == 0:
        ops[1] = np.ones((5, 4))
    with pytest.raises(ValueError) as e:
        plan.run(*ops, comm=COMM)
    if RANK == 0:
        assert "operand 1 has shape" in str(e.value)
    else:
        assert "rank 0 refused" in str(e.value)


@pytest.mark.skipif(SIZE < 2, reason="needs two ranks")
def test_dtypes_differing_between_ranks_raise_on_every_rank():
    ops = operands([(7, 5), (5, 3)], np.float64)
    dtype = np.float32 if RANK == 0 else np.float64
    with pytest.raises(TypeError, match="different element types"):
        deinsum.einsum("ij,jk->ik", *ops, comm=COMM, dtype=dtype)


@pytest.mark.skipif(SIZE < 2, reason="needs two ranks")
def test_run_blocks_types_promote_over_ranks():
    # float32 blocks on rank 0, float64 elsewhere: every rank computes in float64, as NumPy
    # promotes the two; a rank holding no block takes the others' type.
    shapes = [(7, 5), (5, 3)]
    ops = operands(shapes, np.float64)
    plan = deinsum.compile("ij,jk->ik", *shapes, procs=SIZE, machine="mpi")
    blocks = []
    for k, a in enumerate(ops):
        s = plan.input_block(k, RANK)
        blocks.append(None if s is None else a[s].astype(np.float32 if RANK == 0 else np.float64))
    out = plan.run_blocks(*blocks, comm=COMM)
    if out is not None:
        assert out[0].dtype == np.float64
    # An explicit dtype that differs between ranks is refused on every rank.
    with pytest.raises(TypeError, match="different element types"):
        plan.run_blocks(*blocks, comm=COMM, dtype=np.float32 if RANK == 0 else np.float64)


@pytest.mark.skipif(SIZE < 2, reason="needs two ranks")
def test_plans_differing_between_ranks_raise_on_every_rank():
    # Other shapes on rank 0 compile another plan: the executor's plan agreement refuses it.
    k = 4 if RANK == 0 else 3
    ops = operands([(7, 5), (5, k)], np.float64)
    with pytest.raises(RuntimeError, match="different plans"):
        deinsum.einsum("ij,jk->ik", *ops, comm=COMM)
    # The job goes on: the next collective call works.
    ops = operands([(7, 5), (5, 3)], np.float64)
    np.testing.assert_allclose(deinsum.einsum("ij,jk->ik", *ops, comm=COMM), ops[0] @ ops[1])
