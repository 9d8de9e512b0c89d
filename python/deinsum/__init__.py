"""deinsum: compile an einsum into a distributed, communication-optimal plan and run it.

The compiler and the executor are the Rust crates of deinsum; this package only converts
between them and NumPy.

>>> import numpy as np, deinsum
>>> a, b = np.ones((3, 4)), np.ones((4, 5))
>>> deinsum.einsum("ij,jk->ik", a, b, procs=2).shape
(3, 5)
"""

import functools
import json
import os

import numpy as np

from . import _native

__all__ = ["einsum", "contract_path", "compile", "bound", "release_buffers", "Plan", "PathInfo"]

_SUPPORTED = (np.dtype(np.float32), np.dtype(np.float64))


def _compute_dtype(arrays, dtype):
    """The element type the run uses: float32 or float64, by NumPy's promotion rules."""
    if dtype is not None:
        dt = np.dtype(dtype)
        if dt not in _SUPPORTED:
            raise TypeError(f"deinsum computes in float32 or float64, not {dt}")
        return dt
    if not arrays:
        return np.dtype(np.float64)
    dt = np.result_type(*arrays)
    if dt in _SUPPORTED:
        return dt
    if dt.kind in "biuf":
        # Booleans, integers and float16 promote to the smallest float type that holds them.
        return np.result_type(dt, np.float32)
    raise TypeError(
        f"deinsum computes in float32 or float64; operands of type {dt} are not supported"
    )


def _as_operands(operands, dtype):
    """The operands as C-contiguous, aligned arrays of one float type (copied only if needed)."""
    arrays = [a if type(a) is np.ndarray else np.asarray(a) for a in operands]
    dt = _compute_dtype(arrays, dtype)
    # np.require costs a few µs an operand even when it returns its argument: arrays that
    # already qualify (the usual case) are passed as they are.
    return [
        a
        if a.dtype == dt and a.flags.c_contiguous and a.flags.aligned
        else np.require(a, dtype=dt, requirements=["C", "A"])
        for a in arrays
    ], dt


def _shapes(items, shapes):
    """Per-operand shapes from arrays (or from shapes themselves when `shapes` is true)."""
    if shapes:
        return [[int(n) for n in s] for s in items]
    return [list(np.shape(a)) for a in items]


def _strategy(optimize):
    """The path strategy's name; NumPy's `optimize=True/False` mean the default search."""
    if isinstance(optimize, bool):
        return "auto"
    return str(optimize)


def _default_threads(procs):
    return max(1, (os.cpu_count() or 1) // max(1, procs))


class Plan:
    """A compiled distributed plan: the path, the grids, the moves and their predicted volumes."""

    __slots__ = ("_native",)

    def __init__(self, native):
        self._native = native

    @classmethod
    def from_json(cls, text):
        """Reads a plan from its JSON (as `to_json` or `deinsum plan --format json` writes it)."""
        return cls(_native.NativePlan.from_json(text))

    def to_json(self):
        """The plan JSON, byte for byte what `deinsum plan --format json` prints (less its final newline)."""
        return self._native.to_json()

    def to_dict(self):
        """The plan JSON as Python objects."""
        return json.loads(self.to_json())

    def explain(self):
        """The plan in words, as `deinsum plan` prints it."""
        return self._native.explain()

    @property
    def predicted(self):
        """Predicted volumes (words received and sent per rank, totals) and peak memory per rank."""
        return self.to_dict()["prediction"]

    @property
    def procs(self):
        """Number of ranks the plan is for."""
        return self._native.procs()

    @property
    def input_shapes(self):
        """Shape of every operand the plan takes."""
        return [tuple(s) for s in self._native.input_shapes()]

    @property
    def output_shape(self):
        """Shape of the result."""
        return tuple(self._native.output_shape())

    def run(self, *operands, threads=None, dtype=None):
        """Runs the plan on in-process ranks and returns the result as a NumPy array."""
        arrays, dt = _as_operands(operands, dtype)
        return self._run(arrays, threads, dt)

    def _run(self, arrays, threads, dt):
        """`run` on operands `_as_operands` has already converted to `dt`."""
        if threads is None:
            threads = _default_threads(self._native.procs())
        if dt == np.float32:
            out = self._native.run_f32(arrays, int(threads))
        else:
            out = self._native.run_f64(arrays, int(threads))
        # numpy.einsum returns a NumPy scalar for a scalar result.
        return out[()] if out.ndim == 0 else out

    def __repr__(self):
        d = self.to_dict()
        return f"<deinsum.Plan {d['expression']} on {d['procs']} ranks>"


def compile(expr, *shapes, procs=1, mem=None, optimize="auto", machine="default"):
    """Compiles `expr` for operands of `shapes` on `procs` ranks with `mem` words per rank.

    `machine="default"` plans for the built-in machine model, as `deinsum plan` does (the same
    JSON); `machine="host"` plans for `procs` in-process ranks on this host, as `deinsum run`
    and `einsum` do (on a host whose cores the ranks fill, no overlapped phases).
    """
    if machine not in ("default", "host"):
        raise ValueError(f"machine must be 'default' or 'host', not {machine!r}")
    return Plan(
        _native.compile(
            expr,
            _shapes(shapes, True),
            int(procs),
            None if mem is None else int(mem),
            _strategy(optimize),
            machine == "host",
        )
    )


def einsum(expr, *operands, procs=1, threads=None, mem=None, optimize="auto", dtype=None):
    """Evaluates `expr` on NumPy arrays like `numpy.einsum`, on `procs` in-process ranks.

    float32 and float64 are computed as they are; booleans, integers and float16 are converted
    by NumPy's promotion with float32; other types raise TypeError. C-contiguous aligned arrays
    are read in place, others copied once. The GIL is released during the run.
    """
    arrays, dt = _as_operands(operands, dtype)
    shapes = tuple(a.shape for a in arrays)
    if isinstance(expr, str) and isinstance(optimize, (str, bool)):
        plan = _cached_plan(expr, shapes, procs, mem, optimize)
    else:
        plan = compile(expr, *shapes, procs=procs, mem=mem, optimize=optimize, machine="host")
    # The operands are converted already: `Plan.run` would check them a second time.
    return plan._run(arrays, threads, dt)


@functools.lru_cache(maxsize=128)
def _cached_plan(expr, shapes, procs, mem, optimize):
    # Plans are immutable: a call that repeats an einsum on the same shapes (an ALS sweep, a
    # benchmark loop) reuses its plan, as opt_einsum's contract_expression would, instead of
    # searching the path and planning again (about 1 ms for the 5-operand chain).
    return compile(expr, *shapes, procs=procs, mem=mem, optimize=optimize, machine="host")


def release_buffers():
    """Frees the buffers deinsum keeps between calls and returns how many elements they held.

    A run leaves the buffers it freed (at most its plan's predicted peak memory per rank) for
    the next call, so that a repeated call does not pay first-touch page faults again; with
    more than one thread per rank, it leaves each rank's thread pool too (ended here).
    """
    return _native.release_buffers()


# `contract_path` and its `PathInfo` are native: one call from the arguments to the result.
contract_path = _native.contract_path
PathInfo = _native.PathInfo


def bound(expr, *shapes, mem, procs=None, optimize="auto", path_cost="flops"):
    """SOAP I/O lower bounds and the fusion partition, as `deinsum bound --format json` reports them."""
    _, report = _native.bound(
        expr,
        _shapes(shapes, True),
        float(mem),
        None if procs is None else int(procs),
        _strategy(optimize),
        str(path_cost),
    )
    return json.loads(report)
