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
import sys

import numpy as np

from . import _native
from ._join import join

__all__ = ["einsum", "join", "contract_path", "compile", "bound", "release_buffers", "Plan", "PathInfo"]

# Tensors that stay distributed between einsums (python/src/session.rs).
from ._native import DistArray, Layout, Session  # noqa: E402

__all__ += ["Session", "DistArray", "Layout"]

# The element types deinsum computes in, by the suffix of the native run methods.
_SUFFIX = {
    np.dtype(np.float32): "f32",
    np.dtype(np.float64): "f64",
    np.dtype(np.complex64): "c64",
    np.dtype(np.complex128): "c128",
}
_SUPPORTED = tuple(_SUFFIX)
_NAMES = "float32, float64, complex64 or complex128"


def _count(name, value, least=1):
    """`value` as a Python int for argument `name`: TypeError for anything but an integer
    (bool, float and str included, as NumPy refuses them as sizes), ValueError below `least`."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an integer, not {type(value).__name__} ({value!r})")
    value = int(value)
    if value < least:
        raise ValueError(f"{name} must be at least {least}, got {value}")
    return value


def _words(name, value):
    """`value` as a positive number of words for argument `name` (TypeError, ValueError)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.number)):
        raise TypeError(f"{name} must be a number of words, not {type(value).__name__} ({value!r})")
    value = float(value)
    if not (value > 0 and np.isfinite(value)):
        raise ValueError(f"{name} must be a positive number of words, got {value}")
    return value


def _type_name(dt):
    """A dtype as a NumPy user names it: `numpy.longdouble (float128)`."""
    for alias in ("longdouble", "clongdouble"):
        if dt == np.dtype(getattr(np, alias)) and dt.itemsize > 8 + 8 * (dt.kind == "c"):
            return f"numpy.{alias} ({dt})"
    return str(dt)


def _compute_dtype(arrays, dtype):
    """The element type the run uses, by NumPy's promotion rules (np.result_type)."""
    if dtype is not None:
        dt = np.dtype(dtype)
        if dt not in _SUPPORTED:
            raise TypeError(f"deinsum computes in {_NAMES}, not {_type_name(dt)}")
        if arrays and dt.kind != "c":
            have = np.result_type(*arrays)
            if have.kind == "c":
                # As numpy.einsum (casting='safe'): the imaginary parts would be dropped.
                raise TypeError(
                    f"Cannot cast array data from {have!r} to {dt!r} according to the rule "
                    "'safe'"
                )
        return dt
    if not arrays:
        return np.dtype(np.float64)
    dt = np.result_type(*arrays)
    if dt in _SUPPORTED:
        return dt
    if dt.kind in "biuf" and dt.itemsize <= 8:
        # Booleans, integers and float16 promote to the smallest float type that holds them.
        return np.result_type(dt, np.float32)
    raise TypeError(
        f"deinsum computes in {_NAMES}; operands of type {_type_name(dt)} are not supported "
        "(convert them with .astype(np.float64) or .astype(np.complex128))"
    )


def _native_run(native, kind, dt):
    """The native method running `kind` (`run`, `run_mpi`, `run_blocks`) in `dt`."""
    return getattr(native, f"{kind}_{_SUFFIX[dt]}")


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


def _mpi_threads(threads):
    """Threads per rank of a run on MPI: `threads`, else OMP_NUM_THREADS, else 1 (an MPI
    launcher gives each rank its own core)."""
    if threads is not None:
        return _count("threads", threads)
    try:
        return max(1, int(os.environ.get("OMP_NUM_THREADS", "1")))
    except ValueError:
        return 1


def _require_mpi():
    """Raises when the extension was built without MPI (the `mpi` cargo feature)."""
    if not _native.HAS_MPI:
        raise RuntimeError(
            "comm= needs deinsum built with MPI, and this extension was built without it: "
            'reinstall with MATURIN_PEP517_ARGS="--features mpi" pip install ./python '
            "(needs an MPI installation, e.g. libopenmpi-dev, and libclang-dev)"
        )


def _slices(ranges):
    """`[start, stop)` pairs as a tuple of slices (None stays None)."""
    return None if ranges is None else tuple(slice(s, e) for s, e in ranges)


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

    def run(self, *operands, threads=None, dtype=None, comm=None):
        """Runs the plan and returns the result as a NumPy array.

        Without `comm`, on `procs` in-process ranks. With `comm` (an mpi4py intra-communicator
        of exactly `procs` ranks, else ValueError naming both numbers), every rank of `comm`
        calls `run` with the same whole operands; each rank reads only its own blocks out of
        them, and every rank returns the whole result. `threads` per rank defaults to
        OMP_NUM_THREADS, else 1. See `einsum` for the MPI details.
        """
        arrays, dt = _as_operands(operands, dtype)
        return self._run(arrays, threads, dt, comm)

    def input_block(self, k, rank):
        """Rank `rank`'s block of operand `k`: a tuple of slices, one per dim of the array, so
        that `a[plan.input_block(k, rank)]` is what that rank passes to `run_blocks`, or None
        when the rank holds no block of it. Blocks of several ranks may overlap (an operand
        replicated along part of the grid). An operand that repeats an index (a diagonal) has
        no such slices: ValueError.
        """
        return _slices(self._native.input_block(_count("k", k, 0), _count("rank", rank, 0)))

    def output_block(self, rank):
        """The block of the result that `run_blocks` returns on rank `rank`, as a tuple of
        slices, or None for a rank that returns none. The blocks of all ranks are disjoint and
        cover the result."""
        return _slices(self._native.output_block(_count("rank", rank, 0)))

    def run_blocks(self, *blocks, comm, threads=None, dtype=None):
        """Runs the plan on an mpi4py communicator with each rank passing only its own blocks.

        `blocks[k]` is this rank's block of operand `k`, `a[plan.input_block(k, rank)]` of the
        whole array `a` (None where `input_block` is None), so no rank needs a whole operand.
        Returns `(block, slices)`: this rank's block of the result and where it lies
        (`plan.output_block(rank)`), or None on a rank that returns no block. Every rank of
        `comm` must call it. The run's type is chosen as for `einsum`, promoted
        over the blocks of all ranks (one more small all-reduce on `comm`), or `dtype` (then
        the same on every rank). Refusals (a wrong shape, a missing block) raise on every rank
        before anything is moved.
        """
        _require_mpi()
        _comm_size(comm)
        present = [b for b in blocks if b is not None]
        _, dt = _as_operands(present, dtype)
        if dtype is None:
            # The type every rank's blocks promote to (NumPy's promotion of float32 and float64
            # is the wider), agreed by all ranks: a rank holding no block has no type of its own.
            names = [n for n in comm.allgather(dt.name if present else None) if n]
            dt = np.result_type(*names) if names else np.dtype(np.float64)
        arrays = [None if b is None else _as_operands([b], dt)[0][0] for b in blocks]
        run = _native_run(self._native, "run_blocks", dt)
        out = run(arrays, comm, _mpi_threads(threads))
        if out is None:
            return None
        block, ranges = out
        return block, _slices(ranges)

    def _run(self, arrays, threads, dt, comm=None):
        """`run` on operands `_as_operands` has already converted to `dt`."""
        if comm is not None:
            _require_mpi()
            run = _native_run(self._native, "run_mpi", dt)
            out = run(arrays, comm, _mpi_threads(threads))
            return out[()] if out.ndim == 0 else out
        if threads is None:
            threads = _default_threads(self._native.procs())
        # run_f64, run_f32, run_c128 or run_c64 of the native plan.
        run = _native_run(self._native, "run", dt)
        threads = _count("threads", threads)
        out = run(arrays, threads)
        # numpy.einsum returns a NumPy scalar for a scalar result.
        return out[()] if out.ndim == 0 else out

    def __repr__(self):
        d = self.to_dict()
        return f"<deinsum.Plan {d['expression']} on {d['procs']} ranks>"


def compile(expr, *shapes, procs=1, mem=None, optimize="auto", machine="default"):
    """Compiles `expr` for operands of `shapes` on `procs` ranks with `mem` words per rank.

    `machine="default"` plans for the built-in machine model, as `deinsum plan` does (the same
    JSON); `machine="host"` plans for `procs` in-process ranks on this host, as `deinsum run`
    and `einsum` do (on a host whose cores the ranks fill, no overlapped phases);
    `machine="mpi"` plans for MPI ranks as `deinsum run` under mpirun does (this node's cores
    shared by the ranks the launcher put on it), as `einsum(..., comm=)` does. Plans for
    "host" and "mpi" are for running at once: when the path search's tree predicts under a
    millisecond, the other candidate trees are not planned (the search would take longer
    than the run), so such a plan can differ from the one `deinsum run` prints.
    """
    if machine not in ("default", "host", "mpi"):
        raise ValueError(f"machine must be 'default', 'host' or 'mpi', not {machine!r}")
    return Plan(
        _native.compile(
            expr,
            _shapes(shapes, True),
            _count("procs", procs),
            None if mem is None else _count("mem", mem),
            _strategy(optimize),
            machine,
        )
    )


def einsum(
    expr, *operands, procs=None, threads=None, mem=None, optimize="auto", dtype=None, comm=None
):
    """Evaluates `expr` on NumPy arrays like `numpy.einsum`, on `procs` in-process ranks
    (default 1), or on the ranks of an mpi4py communicator `comm`.

    float32, float64, complex64 and complex128 are computed as they are, mixed operands in
    the type NumPy promotes them to (np.result_type); booleans, integers and float16 are
    converted by NumPy's promotion with float32; other types (np.longdouble, clongdouble,
    objects) raise TypeError naming the type, and so does a real `dtype=` for complex
    operands (as numpy.einsum's safe casting). C-contiguous aligned arrays are read in place,
    others copied once. The GIL is released during the run.

    MPI (`comm=`, an mpi4py intra-communicator such as `MPI.COMM_WORLD`; needs the extension
    built with the `mpi` feature, else RuntimeError): every rank of `comm` calls `einsum` with
    the same expression and the same whole operands, as in the usual mpi4py program. The plan
    is compiled for `comm.Get_size()` ranks (`procs`, if given, must equal it); each rank reads
    only its own blocks out of the operands, and every rank returns the whole result (gathered
    to rank 0, then broadcast: each rank needs memory for it). `threads` per rank defaults to
    OMP_NUM_THREADS, else 1. deinsum's messages go through a private duplicate of `comm`.
    Arguments any rank refuses (a shape, a dtype differing between ranks) raise on every rank
    before anything is moved; an error during the run (out of memory) raises on its rank only,
    so run the program as `mpirun -n N python -m mpi4py script.py` for such an exception to
    abort the whole job instead of leaving the other ranks waiting. For data that does not fit
    one node, see `Plan.run_blocks`.

    Sparse operands (`scipy.sparse` CSR, CSC or COO matrices or arrays) run the sparse kernels
    `deinsum run` runs: SpMV `ij,j->i`, SpMM `ij,jk->ik` and SDDMM `ij,ik,jk->ij` with operand
    0 sparse, SpGEMM `ij,jk->ik` with both sparse, planned from the pattern on `procs`
    in-process ranks, in float32, float64, complex64 or complex128 by the same promotion as
    dense operands. The result is a dense ndarray, or a `scipy.sparse.csr_matrix` for a
    sparse result (SDDMM, SpGEMM); another einsum with a sparse operand raises ValueError.
    """
    if not isinstance(expr, str):
        expr, operands = _from_sublists(expr, operands)
    # Checked before the plan cache: its key would take procs=2.0 for procs=2.
    if procs is not None:
        procs = _count("procs", procs)
    if threads is not None:
        threads = _count("threads", threads)
    if mem is not None:
        mem = _count("mem", mem)
    if any(_is_sparse(a) for a in operands):
        return _sparse_einsum(expr, operands, procs, threads, mem, dtype, comm)
    fix = None
    if any(type(a) is np.ndarray and 0 in a.strides for a in operands):
        operands, fix = _unbroadcast(expr, operands)
    arrays, dt = _as_operands(operands, dtype)
    shapes = tuple(a.shape for a in arrays)
    machine = "host"
    if comm is not None:
        _require_mpi()
        size = _comm_size(comm)
        if procs is not None and _count("procs", procs) != size:
            raise ValueError(f"procs={procs} but the communicator has {size} ranks")
        procs, machine = size, "mpi"
    elif procs is None:
        procs = 1
    if isinstance(expr, str) and isinstance(optimize, (str, bool)):
        plan = _cached_plan(expr, shapes, procs, mem, optimize, machine)
    else:
        plan = compile(expr, *shapes, procs=procs, mem=mem, optimize=optimize, machine=machine)
    # The operands are converted already: `Plan.run` would check them a second time.
    out = plan._run(arrays, threads, dt, comm)
    return out if fix is None else fix(out)


def _terms(expr, n):
    """The subscripts of the `n` operands and of the output of an expression without `...`
    (None for one with it, or one whose terms do not match `n` operands)."""
    text = "".join(expr.split())
    if "." in text:
        return None
    ins, arrow, out = text.partition("->")
    ins = ins.split(",")
    if len(ins) != n:
        return None
    if not arrow:
        # NumPy's implicit output: the subscripts that occur once, sorted.
        every = "".join(ins)
        out = "".join(sorted(c for c in set(every) if every.count(c) == 1))
    return ins, out


def _unbroadcast(expr, operands):
    """Operands made by `np.broadcast_to` (zero strides) read without materializing them.

    A dim of stride 0 holds one value repeated, so it is cut to extent 1 (a view): where its
    index has its full extent in another operand, the parser broadcasts the extent-1 dim
    against it (NumPy's rule); where no operand keeps the index whole, the index stands for `n`
    equal terms: summed, the result is scaled by `n`; kept in the output, the result is
    repeated along it. Returns the operands and the function that finishes the result (None
    when nothing was cut). Expressions with `...`, and an index repeated inside the operand
    (a diagonal), are left as they are (the operand is then copied whole, as before).
    """
    terms = _terms(expr, len(operands)) if isinstance(expr, str) else None
    if terms is None:
        return operands, None
    ins, out = terms
    ops = list(operands)
    cut = {}  # operand -> dims cut to extent 1
    whole = set()  # indices some operand holds at their full extent
    extent = {}
    for k, (a, sub) in enumerate(zip(ops, ins)):
        if not isinstance(a, np.ndarray) or a.ndim != len(sub):
            return operands, None
        for d, c in enumerate(sub):
            extent.setdefault(c, a.shape[d])
            # (An empty array's strides may be 0 too: it holds no value to repeat.)
            if a.strides[d] == 0 and a.shape[d] > 1 and a.size and sub.count(c) == 1:
                cut.setdefault(k, []).append(d)
            elif a.shape[d] != 1:
                whole.add(c)
    if not cut:
        return operands, None
    for k, dims in cut.items():
        ops[k] = ops[k][tuple(slice(0, 1) if d in dims else slice(None) for d in range(ops[k].ndim))]
    gone = {ins[k][d] for k, dims in cut.items() for d in dims} - whole
    scale = 1
    for c in gone - set(out):
        scale *= extent[c]
    repeat = {p: extent[c] for p, c in enumerate(out) if c in gone}

    def fix(result):
        if repeat:
            shape = [repeat.get(p, n) for p, n in enumerate(np.shape(result))]
            result = np.ascontiguousarray(np.broadcast_to(result, shape))
        if scale != 1:
            result = result * result.dtype.type(scale)
        return result

    return ops, fix


# Subscript numbers of NumPy's sublist form, as letters: 0-25 are a-z, 26-51 A-Z (NumPy's
# own range); from 52 on, non-ASCII characters from U+00C0 up (opt_einsum's symbols start
# there too), whitespace and surrogates skipped: networks of hundreds of indices.
_LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
_MORE = []  # labels of subscripts 52, 53, ..., made as first asked for


def _label(n, where):
    """Subscript number `n` as an index label."""
    if n < len(_LETTERS):
        return _LETTERS[n]
    if n > 0x10FFFF:
        raise ValueError(f"{where}: subscript {n} is out of range")
    code = ord(_MORE[-1]) + 1 if _MORE else 0xC0  # the next code point after the last label
    while len(_MORE) <= n - len(_LETTERS):
        if code > 0x10FFFF:
            raise ValueError(f"{where}: subscript {n} is out of range")
        if not (0xD800 <= code <= 0xDFFF or chr(code).isspace()):
            _MORE.append(chr(code))
        code += 1
    return _MORE[n - len(_LETTERS)]


def _sublist(sub, where):
    """One sublist of NumPy's sublist form as subscripts (`Ellipsis` is `...`)."""
    if isinstance(sub, (str, bytes)) or not hasattr(sub, "__iter__"):
        raise TypeError(f"{where} must be a list of subscript numbers, not {type(sub).__name__}")
    out = []
    for x in sub:
        if x is Ellipsis:
            out.append("...")
            continue
        out.append(_label(_count(f"a subscript of {where}", x, 0), where))
    return "".join(out)


def _from_sublists(first, rest):
    """NumPy's sublist form `einsum(op0, sublist0, op1, sublist1, ..., [sublistout])` as an
    expression and its operands."""
    items = (first, *rest)
    if len(items) < 2:
        raise TypeError(
            "einsum takes a subscripts string and operands, or NumPy's sublist form "
            "einsum(op0, sublist0, op1, sublist1, ..., [sublistout])"
        )
    ops = list(items[0::2][: len(items) // 2])
    subs = [_sublist(items[2 * k + 1], f"the sublist of operand {k}") for k in range(len(ops))]
    expr = ",".join(subs)
    if len(items) % 2:
        expr += "->" + _sublist(items[-1], "the output sublist")
    return expr, ops


def _is_sparse(a):
    """Whether `a` is a SciPy sparse matrix or array (looked up, not imported: SciPy is only
    needed by callers that pass sparse operands)."""
    sp = sys.modules.get("scipy.sparse")
    return sp is not None and sp.issparse(a)


def _sparse_einsum(expr, operands, procs, threads, mem, dtype, comm):
    """`einsum` with SciPy sparse operands (CSR, CSC, COO, matrices or arrays), as `deinsum run
    --sparse` plans and runs them: SpMV `ij,j->i`, SpMM `ij,jk->ik` and SDDMM `ij,ik,jk->ij`
    with operand 0 sparse, SpGEMM `ij,jk->ik` with both sparse. Returns a dense ndarray, or a
    `scipy.sparse.csr_matrix` for a sparse result (SDDMM in its operand's pattern, SpGEMM)."""
    import scipy.sparse as sp

    if comm is not None:
        raise ValueError("sparse operands run on in-process ranks only (comm= is not built)")
    if mem is not None:
        raise ValueError("mem= does not apply to sparse operands: their plan is built from the pattern")
    # NumPy's promotion over the operands' types (a SciPy matrix's dtype, a dense operand's):
    # real with complex computes in complex, float32 with complex in complex64.
    kinds = [a.dtype if _is_sparse(a) else np.asarray(a).dtype for a in operands]
    dt = _compute_dtype([np.empty(0, dtype=k) for k in kinds], dtype)
    ops = []
    for a in operands:
        if _is_sparse(a):
            coo = sp.coo_matrix(a)
            coords = np.ascontiguousarray(np.stack([coo.row, coo.col], axis=1), dtype=np.int64)
            vals = np.ascontiguousarray(coo.data, dtype=dt)
            ops.append(("sparse", [int(n) for n in coo.shape], coords, vals))
        else:
            ops.append(("dense", np.ascontiguousarray(np.asarray(a), dtype=dt)))
    procs = 1 if procs is None else _count("procs", procs)
    threads = _default_threads(procs) if threads is None else _count("threads", threads)
    out = getattr(_native, f"sparse_einsum_{_SUFFIX[dt]}")(expr, ops, procs, threads)
    if out[0] == "dense":
        return out[1]
    _, shape, coords, vals = out
    return sp.csr_matrix((vals, (coords[:, 0], coords[:, 1])), shape=tuple(shape))


def _comm_size(comm):
    """The size of an mpi4py communicator; TypeError for anything else."""
    # Looked up, not imported: an mpi4py communicator exists only once mpi4py.MPI is imported,
    # and importing it would initialize MPI.
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is None or not isinstance(comm, mpi.Comm):
        raise TypeError(
            "comm must be an mpi4py communicator (mpi4py.MPI.Intracomm, e.g. MPI.COMM_WORLD), "
            f"not {type(comm).__name__}"
        )
    if comm == mpi.COMM_NULL:
        raise ValueError("comm is MPI.COMM_NULL")
    return comm.Get_size()


@functools.lru_cache(maxsize=128)
def _cached_plan(expr, shapes, procs, mem, optimize, machine="host"):
    # Plans are immutable: a call that repeats an einsum on the same shapes (an ALS sweep, a
    # benchmark loop) reuses its plan, as opt_einsum's contract_expression would, instead of
    # searching the path and planning again (about 1 ms for the 5-operand chain).
    return compile(expr, *shapes, procs=procs, mem=mem, optimize=optimize, machine=machine)


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
        _words("mem", mem),
        None if procs is None else _count("procs", procs),
        _strategy(optimize),
        str(path_cost),
    )
    return json.loads(report)
