"""`deinsum.join`: a relational join of two pandas DataFrames or pyarrow Tables on P ranks,
with the strategy chosen by predicted cost (or forced). Tables cross into Rust as Arrow IPC
streams (pyarrow is needed, and pandas for DataFrames)."""

import json

from . import _native


def _to_arrow(t, which):
    import pyarrow as pa

    if isinstance(t, pa.Table):
        return t, False
    if isinstance(t, pa.RecordBatch):
        return pa.Table.from_batches([t]), False
    try:
        import pandas as pd
    except ImportError:  # pragma: no cover - pandas missing means t cannot be a DataFrame
        pd = None
    if pd is not None and isinstance(t, pd.DataFrame):
        # NaN in a float column is NULL, as pandas means it.
        return pa.Table.from_pandas(t, preserve_index=False), True
    raise TypeError(f"{which} must be a pandas DataFrame or a pyarrow Table, not {type(t).__name__}")


def _ipc(t):
    import pyarrow as pa

    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, t.schema) as w:
        w.write_table(t)
    return sink.getvalue().to_pybytes()


def join(left, right, on, how="inner", procs=1, strategy="auto", comm=None,
         max_output_bytes=None, report=False, placement="rows", inspect="auto"):
    """SQL's ``SELECT * FROM left {how} JOIN right USING (on)`` on ``procs`` in-process ranks.

    ``left``, ``right``: pandas DataFrames or pyarrow Tables; the result is of ``left``'s kind
    (a DataFrame if it is one). ``on``: a key column name or a list of them, present in both.
    ``how``: ``inner``, ``left``, ``right`` or ``full``. ``strategy``: ``auto`` (least
    predicted time), ``shuffle``, ``broadcast``, ``semi``, ``index`` or ``bloom``. NULL keys never
    match; duplicate keys give every pair; the key columns come once (coalesced in a full
    join), then left's other columns, then right's.

    ``placement``: where the tables are on the ranks, as the CLI's ``--placement``: ``rows``
    (both tables' rows split over every rank, the default), ``separate`` (the left's rows on
    the first ceil(P/2) ranks, the right's on the others) or ``columns`` (the key columns on
    the first group, the other columns on the second: joined by the join index, so only
    ``strategy="auto"`` or ``"index"``). Another value raises ``ValueError``; with ``comm``
    only ``rows`` is accepted (each rank passes the rows it holds).

    ``inspect``: how the statistics behind ``strategy="auto"`` are gathered, as the CLI's
    ``--inspect``: ``exact``, ``sketch`` (fixed-size sketches; matches estimated) or ``auto``
    (sketch from 50,000 rows of both tables). The rows joined never depend on it.

    ``comm``: an mpi4py communicator (extension built with the ``mpi`` feature); each rank
    passes its own rows and gets its own rows of the output, and ``procs`` is the
    communicator's size. ``max_output_bytes``: refuse (``MemoryError``) a larger output before
    any row moves. ``report=True`` returns ``(table, figures)``, the figures a dict with the
    strategy and, per rank, the bytes measured and predicted.
    """
    lt, pandas_out = _to_arrow(left, "left")
    rt, _ = _to_arrow(right, "right")
    keys = [on] if isinstance(on, str) else list(on)
    if not isinstance(placement, str):
        raise ValueError(f"placement must be one of \"rows\", \"separate\", \"columns\", "
                         f"got {placement!r}")
    ipc, figures = _native.join_ipc(
        _ipc(lt), _ipc(rt), keys, str(how), str(strategy), int(procs),
        None if max_output_bytes is None else int(max_output_bytes), comm, placement,
        str(inspect))
    import pyarrow as pa

    out = pa.ipc.open_stream(ipc).read_all()
    if pandas_out:
        out = out.to_pandas()
    return (out, json.loads(figures)) if report else out
