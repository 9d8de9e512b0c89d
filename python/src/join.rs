//! Relational joins from Python: `deinsum.join` hands pyarrow Tables (pandas DataFrames go
//! through pyarrow) over as Arrow IPC streams and gets the joined table back as one, with the
//! run's figures as JSON. The work is deinsum-join's; this file maps arguments and errors.

use deinsum::exec::{Communicator, InProcess, RankFailure};
use deinsum_join::columns::{self, ColumnPart};
use deinsum_join::io::ipc;
use deinsum_join::placement::part_of;
use deinsum_join::{
    dist, InspectMode, JoinError, JoinKind, JoinOptions, JoinShape, Placement, RankJoin, Strategy,
    Table,
};
use pyo3::exceptions::{PyMemoryError, PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyBytes;

/// A join error as the Python exception a caller expects: an output over the limit is a
/// `MemoryError`, other input errors `ValueError`, a communication failure `RuntimeError`.
fn to_py(e: JoinError) -> PyErr {
    match e {
        JoinError::TooLarge { .. } => PyMemoryError::new_err(e.to_string()),
        e if e.is_input() => PyValueError::new_err(e.to_string()),
        e => PyRuntimeError::new_err(e.to_string()),
    }
}

/// The flags of one join, resolved.
struct Request {
    on: Vec<String>,
    kind: JoinKind,
    placement: Placement,
    opts: JoinOptions,
}

impl Request {
    fn new(
        on: Vec<String>,
        how: &str,
        strategy: &str,
        placement: &str,
        procs: usize,
        max_output_bytes: Option<u64>,
        inspect: &str,
    ) -> Result<Request, JoinError> {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let machine = deinsum::plan::Machine::default().on_host(cores, procs.max(1));
        Ok(Request {
            on,
            kind: JoinKind::from_name(how)?,
            placement: Placement::from_name(placement)
                .map_err(|_| JoinError::Invalid(format!(
                    "placement must be one of \"rows\", \"separate\", \"columns\", got {placement:?}"
                )))?,
            opts: JoinOptions {
                strategy: Strategy::from_name(strategy)?,
                machine,
                output_limit: max_output_bytes,
                inspect: InspectMode::from_name(inspect).map_err(|_| {
                    JoinError::Invalid(format!(
                        "inspect must be one of \"exact\", \"sketch\", \"auto\", got {inspect:?}"
                    ))
                })?,
            },
        })
    }

    /// One rank's join of its rows `l`, `r` (collective): what it holds under the placement
    /// (under `columns`, only its group's columns of them).
    fn rank<C: Communicator>(&self, comm: &C, l: &Table, r: &Table) -> Result<RankJoin, JoinError> {
        let shape = JoinShape::new(l, r, &self.on, self.kind, ("left", "right"))?;
        if self.placement == Placement::Columns {
            let (me, p) = (comm.rank(), comm.size());
            let lp = ColumnPart::split(l, &shape.lkeys, &shape.lrest, me, p);
            let rp = ColumnPart::split(r, &shape.rkeys, &shape.rrest, me, p);
            return columns::join_columns(comm, &shape, &lp, &rp, &self.opts);
        }
        dist::join(comm, &shape, l, r, &self.opts)
    }
}

/// The run's figures as JSON: the strategy, whether `auto` chose it, and per rank the bytes
/// measured and predicted.
fn report(runs: &[RankJoin], auto: bool, placement: Placement) -> String {
    let first = &runs[0];
    serde_json::json!({
        "strategy": first.strategy,
        "auto": auto,
        "procs": first.inspection.procs,
        "placement": placement.name(),
        "inspect": first.inspection.mode().name(),
        "output_rows": first.inspection.output_rows,
        "measured_sent": runs.iter().map(|r| r.measured.sent).collect::<Vec<_>>(),
        "measured_received": runs.iter().map(|r| r.measured.received).collect::<Vec<_>>(),
        "inspection": first.inspection,
    })
    .to_string()
}

/// Joins the Arrow IPC streams `left` and `right` on `on` (SQL's `JOIN ... USING`): on
/// `procs` in-process ranks, each holding what `placement` gives it (`rows`: a contiguous
/// share of both tables' rows; `separate`: the left's rows on the first ⌈P/2⌉ ranks, the
/// right's on the others; `columns`: the key columns on the first group, the others on the
/// second, joined by the join index), or (with `comm`, an mpi4py communicator; placement
/// `rows` alone) on its ranks, each passing its own rows and getting its own rows of the
/// output. Returns the output as an IPC stream and the run's figures as JSON
/// (with `comm`, this rank's alone). The GIL is released while the ranks run.
#[pyfunction]
#[pyo3(signature = (left, right, on, how, strategy, procs, max_output_bytes=None, comm=None, placement="rows", inspect="auto"))]
#[allow(clippy::too_many_arguments)] // The Python signature's keywords, one each.
pub fn join_ipc<'py>(
    py: Python<'py>,
    left: &[u8],
    right: &[u8],
    on: Vec<String>,
    how: &str,
    strategy: &str,
    procs: usize,
    max_output_bytes: Option<u64>,
    comm: Option<Bound<'py, PyAny>>,
    placement: &str,
    inspect: &str,
) -> PyResult<(Bound<'py, PyBytes>, String)> {
    if procs == 0 {
        return Err(PyValueError::new_err("procs must be at least 1"));
    }
    let l = ipc::read("the left table", left).map_err(to_py)?;
    let r = ipc::read("the right table", right).map_err(to_py)?;
    let req = Request::new(
        on,
        how,
        strategy,
        placement,
        procs,
        max_output_bytes,
        inspect,
    )
    .map_err(to_py)?;
    if let Some(c) = comm {
        // Each MPI rank passes the rows it holds; which rows those are is the caller's layout.
        if req.placement != Placement::Rows {
            return Err(PyValueError::new_err(format!(
                "placement={placement:?} is for in-process ranks: with comm=, each rank passes \
                 the rows it holds (placement=\"rows\")"
            )));
        }
        return join_on_comm(py, &c, req, l, r);
    }
    let pl = req.placement;
    let runs = py
        .allow_threads(|| {
            InProcess::new(procs)
                .map_err(|e| JoinError::Invalid(e.to_string()))?
                .run(|comm| {
                    let (q, p) = (comm.rank(), comm.size());
                    let (lq, rq) = (pl.slice(true, q, p), pl.slice(false, q, p));
                    req.rank(comm, &part_of(&l, lq), &part_of(&r, rq))
                })
                .map_err(|e| match e {
                    RankFailure::Error { error, .. } => error,
                    other => JoinError::Invalid(other.to_string()),
                })
        })
        .map_err(to_py)?;
    let parts: Vec<Table> = runs.iter().map(|r| r.table.clone()).collect();
    let table = Table::concat(&parts).map_err(|e| to_py(JoinError::Invalid(e)))?;
    let bytes = ipc::write(&table).map_err(to_py)?;
    let json = report(&runs, req.opts.strategy.is_none(), pl);
    Ok((PyBytes::new(py, &bytes), json))
}

/// [`join_ipc`] on the ranks of an mpi4py communicator (a private duplicate of it).
#[cfg(feature = "mpi")]
fn join_on_comm<'py>(
    py: Python<'py>,
    comm: &Bound<'py, PyAny>,
    req: Request,
    l: Table,
    r: Table,
) -> PyResult<(Bound<'py, PyBytes>, String)> {
    let handle = crate::mpi_run::fortran_handle(comm)?;
    // The communicator is made and used on this thread, the GIL released (it is not Sync).
    let (bytes, json) = py.allow_threads(|| -> PyResult<(Vec<u8>, String)> {
        let comm = crate::mpi_run::duplicate(handle)?;
        // The machine model is for the communicator's ranks.
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let mut req = req;
        req.opts.machine = deinsum::plan::Machine::default().on_host(cores, comm.size());
        // Every rank resolves the same flags against tables of the same columns, so an
        // error here is every rank's.
        let run = req.rank(&comm, &l, &r).map_err(to_py)?;
        let bytes = ipc::write(&run.table).map_err(to_py)?;
        let json = report(
            std::slice::from_ref(&run),
            req.opts.strategy.is_none(),
            req.placement,
        );
        Ok((bytes, json))
    })?;
    Ok((PyBytes::new(py, &bytes), json))
}

#[cfg(not(feature = "mpi"))]
fn join_on_comm<'py>(
    _py: Python<'py>,
    _comm: &Bound<'py, PyAny>,
    _req: Request,
    _l: Table,
    _r: Table,
) -> PyResult<(Bound<'py, PyBytes>, String)> {
    Err(PyRuntimeError::new_err(
        "comm= needs the extension built with the `mpi` feature \
         (MATURIN_PEP517_ARGS=\"--features mpi\" pip install ./python)",
    ))
}
