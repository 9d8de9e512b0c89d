"""Python manners (issue 37 item 5): arguments checked by name, MemoryError instead of an
abort, nothing left running after a call, messages in Python's words, broadcast operands read
without materializing them, NumPy's sublist form, np.longdouble named."""

import os
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

import deinsum

A, B = np.ones((4, 3)), np.ones((3, 5))


@pytest.mark.parametrize(
    "kwargs,exc,name",
    [
        ({"procs": 2.5}, TypeError, "procs"),
        ({"procs": "2"}, TypeError, "procs"),
        ({"procs": True}, TypeError, "procs"),
        ({"threads": 0}, ValueError, "threads"),
        ({"threads": 1.0}, TypeError, "threads"),
        ({"procs": -1}, ValueError, "procs"),
        ({"procs": 0}, ValueError, "procs"),
        ({"threads": -1}, ValueError, "threads"),
        ({"mem": -1}, ValueError, "mem"),
        ({"mem": 0.5}, TypeError, "mem"),
    ],
)
def test_bad_arguments_name_themselves(kwargs, exc, name):
    with pytest.raises(exc) as e:
        deinsum.einsum("ij,jk->ik", A, B, **kwargs)
    assert name in str(e.value), e.value


def test_bad_arguments_of_compile_bound_and_plan_run():
    with pytest.raises(TypeError, match="procs"):
        deinsum.compile("ij,jk", (2, 3), (3, 4), procs=2.5)
    with pytest.raises(ValueError, match="mem"):
        deinsum.compile("ij,jk", (2, 3), (3, 4), mem=-1)
    with pytest.raises(ValueError, match="mem"):
        deinsum.bound("ij,jk", (2, 3), (3, 4), mem=-1)
    with pytest.raises(TypeError, match="mem"):
        deinsum.bound("ij,jk", (2, 3), (3, 4), mem="8")
    plan = deinsum.compile("ij,jk->ik", A.shape, B.shape, procs=2)
    with pytest.raises(ValueError, match="threads"):
        plan.run(A, B, threads=-1)
    with pytest.raises(ValueError, match="rank"):
        plan.output_block(-1)
    # A procs=2 cached before does not let procs=2.0 through.
    deinsum.einsum("ij,jk->ik", A, B, procs=2)
    with pytest.raises(TypeError, match="procs"):
        deinsum.einsum("ij,jk->ik", A, B, procs=2.0)


def test_numpy_integers_are_integers():
    got = deinsum.einsum("ij,jk->ik", A, B, procs=np.int64(2), threads=np.int32(1))
    np.testing.assert_allclose(got, A @ B)


def test_messages_speak_of_operands_not_flags():
    cases = [
        lambda: deinsum.einsum("ij,jk->ik", A),
        lambda: deinsum.einsum("ij,jk->ik", A, np.ones((4, 5))),
        lambda: deinsum.einsum("ij,jk->ik", np.ones((4, 3, 2)), B),
        lambda: deinsum.einsum("...ij,...jk->...ik", np.ones((2, 4, 3)), np.ones((5, 3, 5))),
        lambda: deinsum.einsum("ij,jk->ik", A, B, procs=100_000),
    ]
    for call in cases:
        with pytest.raises(Exception) as e:
            call()
        msg = str(e.value)
        assert "--" not in msg, msg


def test_sublist_form():
    rng = np.random.default_rng(0)
    a, b, c = rng.random((3, 4)), rng.random((4, 5)), rng.random((5,))
    np.testing.assert_allclose(deinsum.einsum(a, [0, 1], b, [1, 2]), np.einsum(a, [0, 1], b, [1, 2]))
    np.testing.assert_allclose(
        deinsum.einsum(a, [0, 1], b, [1, 2], [2, 0]), np.einsum(a, [0, 1], b, [1, 2], [2, 0])
    )
    np.testing.assert_allclose(
        deinsum.einsum(b, [0, 1], c, [1], [0], procs=2), np.einsum(b, [0, 1], c, [1], [0])
    )
    x = rng.random((2, 3, 4))
    np.testing.assert_allclose(
        deinsum.einsum(x, [Ellipsis, 1], [Ellipsis]), np.einsum(x, [Ellipsis, 1], [Ellipsis])
    )
    with pytest.raises(ValueError, match="subscript"):
        deinsum.einsum(a, [0, -1])
    with pytest.raises(ValueError, match="subscript"):
        deinsum.einsum(a, [0, 10**9])
    with pytest.raises(TypeError):
        deinsum.einsum(a, 3)
    with pytest.raises(TypeError):
        deinsum.einsum(a)


def test_longdouble_is_named():
    for dt in (np.longdouble, np.clongdouble):
        if np.dtype(dt).itemsize <= 8 * (1 + (np.dtype(dt).kind == "c")):
            pytest.skip("long double is double on this platform")
        with pytest.raises(TypeError, match="longdouble"):
            deinsum.einsum("ij,jk->ik", A.astype(dt), B)
        with pytest.raises(TypeError, match="longdouble"):
            deinsum.einsum("ij,jk->ik", A, B, dtype=dt)


def test_broadcast_operands_are_not_materialized():
    # 10^10 elements: a copy would need 74.5 GiB.
    big = np.broadcast_to(np.full(1, 0.5), (100_000, 100_000))
    assert deinsum.einsum("ij->", big) == pytest.approx(0.5e10)
    v = np.arange(1.0, 4.0)
    cases = [
        ("ij,jk->ik", [np.broadcast_to(v[:, None], (3, 4)), np.ones((4, 2))]),  # cut, scaled
        ("ij,jk->ik", [np.broadcast_to(v, (5, 3)), np.arange(6.0).reshape(3, 2)]),
        ("ij,j->ij", [np.broadcast_to(v[:, None], (3, 4)), np.ones(4)]),  # broadcast vs whole
        ("ij->ij", [np.broadcast_to(v[:, None], (3, 4))]),  # kept in the output: repeated
        ("ij->ji", [np.broadcast_to(v[:, None], (3, 4))]),
        ("ij,ij->", [np.broadcast_to(v, (2, 3)), np.broadcast_to(v, (2, 3))]),
        ("ii->i", [np.broadcast_to(v, (3, 3))]),  # a diagonal: copied, still right
        ("...j,j->...", [np.broadcast_to(v, (4, 3)), v]),  # `...`: copied, still right
    ]
    for expr, ops in cases:
        for procs in (1, 2):
            got = deinsum.einsum(expr, *ops, procs=procs)
            np.testing.assert_allclose(got, np.einsum(expr, *ops), err_msg=expr)
            assert np.shape(got) == np.shape(np.einsum(expr, *ops)), expr


def test_oversubscribed_threads_are_released_after_the_call():
    before = threading.active_count()
    base = _native_threads()
    a = np.ones((64, 64))
    np.testing.assert_allclose(deinsum.einsum("ij,jk->ik", a, a, threads=300), a @ a)
    assert threading.active_count() == before
    # The kept pools of such a call are dropped: their threads end shortly after.
    for _ in range(100):
        if _native_threads() <= base + 8:
            break
        import time

        time.sleep(0.05)
    assert _native_threads() <= base + 8, (base, _native_threads())


def _status(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def _native_threads():
    return _status("Threads")


def _settles(probe, bound):
    """Whether `probe()` falls to `bound` or below within 5 s (threads finish exiting after
    the call has returned)."""
    import time

    for _ in range(100):
        if probe() <= bound:
            return True
        time.sleep(0.05)
    return probe() <= bound


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/status")
@pytest.mark.parametrize("kwargs", [{"procs": 300}, {"threads": 300}, {"procs": 64, "threads": 4}])
def test_oversubscribed_calls_leave_no_threads_or_reservations(kwargs):
    # Each thread that allocates reserves a 32 MiB segment of the allocator: 300 threads
    # left 9.4 GiB of address space reserved for good before (1,000 left 33 GiB). What may
    # stay: glibc's per-thread arenas (at most 8 per core, 64 MiB each) and a few threads.
    a = np.ones((64, 64))
    deinsum.einsum("ij,jk->ik", a, a, procs=2)
    threads, size_kb = _native_threads(), _status("VmSize")
    np.testing.assert_allclose(deinsum.einsum("ij,jk->ik", a, a, **kwargs), a @ a)
    deinsum.release_buffers()
    assert _settles(_native_threads, threads + 4), (threads, _native_threads())
    bound_kb = size_kb + (8 * os.cpu_count() * 64 + 512) * 1024
    assert _settles(lambda: _status("VmSize"), bound_kb), (size_kb, _status("VmSize"))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="ulimit -v and /proc")
def test_allocation_limits_raise_memory_error_not_abort():
    script = textwrap.dedent(
        """
        import numpy as np, deinsum
        a = np.ones((256, 256))
        for kw in ({"procs": 1000}, {"threads": 10**6}, {"procs": 64, "threads": 64}):
            try:
                deinsum.einsum("ij,jk->ik", a, a, **kw)
                print("ran", kw)
            except MemoryError as e:
                print("MemoryError", kw, e)
        np.testing.assert_allclose(deinsum.einsum("ij,jk->ik", a, a, procs=2), a @ a)
        print("alive")
        """
    )
    r = subprocess.run(
        ["bash", "-c", f'ulimit -v 4000000 && exec "{sys.executable}" -c "$0"', script],
        capture_output=True,
        text=True,
        env={**os.environ},
        timeout=600,
    )
    assert r.returncode == 0, (r.returncode, r.stdout, r.stderr)
    lines = r.stdout.splitlines()
    assert lines[-1] == "alive", r.stdout
    assert sum(line.startswith("MemoryError") for line in lines) >= 2, r.stdout


@pytest.mark.parametrize("ring", [False, True], ids=["chain", "ring"])
def test_hundreds_of_one_element_operands_and_indices(ring):
    # 600 operands of shape (1, 1) over 600 distinct indices in NumPy's sublist form (beyond
    # its 52 subscripts and 32 operands): it once took 24 s (a memory model quadratic in the
    # live tensors, a search over candidate trees for microseconds of work). The result
    # equals the serial one: the product of every element.
    n = 600
    rng = np.random.default_rng(7)
    ops = [rng.uniform(0.99, 1.01, (1, 1)) for _ in range(n)]
    args = []
    for k, a in enumerate(ops):
        args += [a, [k, (k + 1) % n if ring else k + 1]]
    want = np.prod([a[0, 0] for a in ops])
    for procs in (1, 2):
        got = deinsum.einsum(*args, procs=procs)
        assert got.shape == (() if ring else (1, 1))
        np.testing.assert_allclose(got, np.full(got.shape, want), rtol=1e-12)
