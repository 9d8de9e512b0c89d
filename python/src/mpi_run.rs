//! Runs on an mpi4py communicator (the `mpi` feature): every rank of the caller's communicator
//! calls with the same plan, and deinsum's messages go through a private duplicate of it.
//!
//! MPI is the caller's: mpi4py initialized it and finalizes it at exit, so nothing here calls
//! `mpi::initialize()` (rsmpi's `Universe` would finalize MPI when dropped). The caller's
//! communicator is never freed: it is only duplicated (MPI_Comm_dup), and the duplicate,
//! owned by rsmpi, is freed at the end of the call.
//!
//! Before anything is moved the ranks agree (one all-reduce) that every rank's arguments are
//! valid and of one element type, so that an argument one rank refuses raises on every rank
//! instead of leaving the others waiting in a collective.

use std::collections::BTreeMap;
use std::ffi::c_int;

use deinsum::exec::mpi::MpiComm;
use deinsum::{Communicator, DType, Einsum, ExecOptions, Inputs, Scalar};
use mpi::raw::FromRaw;
use mpi::topology::SimpleCommunicator;
use numpy::ndarray::IxDyn;
use numpy::PyUntypedArrayMethods;
use numpy::{Element, IntoPyArray, PyArrayDyn, PyArrayMethods, PyReadonlyArrayDyn};
use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::convert::{input_block_ranges, operand_slices, output_shape, to_py};

/// The Fortran handle (`comm.py2f()`) of an mpi4py intra-communicator, after checking that
/// `obj` is one and that MPI is initialized and not finalized.
pub(crate) fn fortran_handle(obj: &Bound<'_, PyAny>) -> PyResult<c_int> {
    let py = obj.py();
    let type_name = || {
        obj.get_type()
            .name()
            .map(|n| n.to_string())
            .unwrap_or_else(|_| "?".into())
    };
    let not_comm = || {
        PyTypeError::new_err(format!(
            "comm must be an mpi4py communicator (mpi4py.MPI.Intracomm, e.g. MPI.COMM_WORLD), \
             not {}",
            type_name()
        ))
    };
    // An mpi4py communicator exists only once mpi4py.MPI is imported: looking it up in
    // sys.modules does not import it (importing would initialize MPI as a side effect).
    let modules = py.import("sys")?.getattr("modules")?;
    let modules = modules.downcast::<PyDict>()?;
    let Some(mpi) = modules.get_item("mpi4py.MPI")? else {
        return Err(not_comm());
    };
    if !obj.is_instance(&mpi.getattr("Comm")?)? {
        return Err(not_comm());
    }
    if obj.eq(mpi.getattr("COMM_NULL")?)? {
        return Err(PyValueError::new_err("comm is MPI.COMM_NULL"));
    }
    if !obj.is_instance(&mpi.getattr("Intracomm")?)? {
        return Err(PyTypeError::new_err(format!(
            "comm must be an intra-communicator (mpi4py.MPI.Intracomm), not {}",
            type_name()
        )));
    }
    if !mpi::environment::is_initialized() {
        return Err(PyRuntimeError::new_err(
            "MPI is not initialized: import mpi4py.MPI with mpi4py.rc.initialize left true, or \
             call MPI.Init() first",
        ));
    }
    if mpi::environment::is_finalized() {
        return Err(PyRuntimeError::new_err("MPI is finalized already"));
    }
    obj.call_method0("py2f")?.extract::<c_int>()
}

/// A private duplicate of the communicator whose Fortran handle is `handle` (from
/// [`fortran_handle`]), owned by the returned [`MpiComm`]. Collective over that communicator.
///
/// The duplicate's MPI errors abort the job (MPI_ERRORS_ARE_FATAL): mpi4py sets its
/// communicators to return error codes, which rsmpi's calls do not read.
pub(crate) fn duplicate(handle: c_int) -> PyResult<MpiComm> {
    duplicate_comm(handle).map_err(PyRuntimeError::new_err)
}

/// [`duplicate`] with its error as text (no Python object: callable where no GIL is held,
/// e.g. by a session between calls), refused once MPI is finalized.
pub(crate) fn duplicate_comm(handle: c_int) -> Result<MpiComm, String> {
    if mpi::environment::is_finalized() {
        return Err("MPI is finalized already".into());
    }
    // SAFETY: MPI is initialized (checked by `fortran_handle` before the handle was taken; it
    // is never un-initialized) and not finalized (just checked; mpi4py finalizes at interpreter
    // exit, and finalizing from another thread while this one is in an MPI call is erroneous
    // by the MPI standard), and `handle` is the Fortran handle mpi4py gave for a live
    // intra-communicator (not MPI.COMM_NULL) of the MPI library this process has loaded:
    // MPI_Comm_f2c maps it back to that communicator, which is only read.
    let raw = unsafe { mpi::ffi::RSMPI_Comm_f2c(handle) };
    let mut dup = raw;
    // SAFETY: `raw` is a live intra-communicator (above) and `dup` a valid place for the new
    // handle; MPI_Comm_dup writes it only on success (checked below).
    let rc = unsafe { mpi::ffi::MPI_Comm_dup(raw, &mut dup) };
    if rc != mpi::ffi::MPI_SUCCESS as c_int || dup == raw {
        return Err(format!(
            "MPI_Comm_dup of the communicator failed (MPI error code {rc})"
        ));
    }
    // SAFETY: `dup` is the live communicator MPI_Comm_dup just made (an intra-communicator,
    // like the one it copies); reading the library's predefined ERRORS_ARE_FATAL handle is a
    // plain read of a constant rsmpi's C shim defines.
    let rc = unsafe { mpi::ffi::MPI_Comm_set_errhandler(dup, mpi::ffi::RSMPI_ERRORS_ARE_FATAL) };
    // SAFETY: `dup` is a live intra-communicator that is neither MPI_COMM_WORLD nor
    // MPI_COMM_SELF (a duplicate is a new communicator) and is used nowhere else: the
    // SimpleCommunicator owns it and frees it (MPI_Comm_free) when dropped.
    let comm = unsafe { SimpleCommunicator::from_raw(dup) };
    if rc != mpi::ffi::MPI_SUCCESS as c_int {
        return Err(format!(
            "MPI_Comm_set_errhandler failed (MPI error code {rc})"
        ));
    }
    Ok(MpiComm::new(comm))
}

/// The element type's tag in the ranks' agreement: its place in [`DType::ALL`], plus one.
fn type_tag<T: Scalar>() -> u64 {
    DType::ALL
        .iter()
        .position(|&d| d == T::DTYPE)
        .map_or(0, |i| i as u64 + 1)
}

/// NumPy's name of the element type of tag `tag` ([`type_tag`]).
fn type_name(tag: u64) -> &'static str {
    usize::try_from(tag)
        .ok()
        .and_then(|t| t.checked_sub(1))
        .and_then(|i| DType::ALL.get(i))
        .map_or("an unknown type", |d| d.numpy_name())
}

/// Every rank's verdict on its own arguments, agreed by one all-reduce: `mine` on this rank,
/// an error naming the refusing rank on the others, or an error when the ranks' element types
/// differ. Collective over `comm`.
fn agree<X>(comm: &MpiComm, mine: PyResult<X>, tag: u64) -> PyResult<X> {
    let me = comm.rank() as u64;
    let refused = if mine.is_err() { me + 1 } else { 0 };
    // The largest refusing rank (plus 1), and the tag's maximum and complement's maximum:
    // the two give back this rank's tag exactly when every rank has it.
    let mut v = [refused, tag, !tag];
    comm.all_reduce_max_u64(&mut v)
        .map_err(|e| PyRuntimeError::new_err(format!("agreement of the ranks failed: {e}")))?;
    let mine = mine?;
    if v[0] > 0 {
        return Err(PyValueError::new_err(format!(
            "rank {} refused its arguments (see its error); no rank ran",
            v[0] - 1
        )));
    }
    if v[1] != tag || !v[2] != tag {
        return Err(PyTypeError::new_err(format!(
            "the ranks passed operands of different element types (this rank {}, another {}): \
             pass the same dtype on every rank",
            type_name(tag),
            type_name(if v[1] != tag { v[1] } else { !v[2] })
        )));
    }
    Ok(mine)
}

/// This rank's local checks that need no GIL: the plan is for the communicator's size, and
/// this node's memory fits the ranks the launcher put on it.
fn check_world<T: Scalar>(e: &Einsum, comm: &MpiComm) -> PyResult<()> {
    let procs = e.plan().procs;
    if comm.size() != procs {
        return Err(PyValueError::new_err(format!(
            "the plan is for {procs} ranks but the communicator has {} (compile it with \
             procs=comm.Get_size())",
            comm.size()
        )));
    }
    let on_node = deinsum::exec::preflight::mpi_ranks_on_node()
        .unwrap_or(1)
        .clamp(1, procs);
    e.check_fits::<T>(on_node).map_err(to_py)
}

/// Executor options for a run on MPI: `threads` per rank, nothing kept between calls.
fn options(threads: usize) -> ExecOptions {
    ExecOptions {
        threads: threads.max(1),
        ..ExecOptions::default()
    }
}

/// Runs `e` on whole operands `arrays` (the same on every rank; each rank reads only its own
/// blocks out of them) on the communicator `comm`, and returns the whole result on every rank
/// (gathered to rank 0, then broadcast). The GIL is released during the run.
pub(crate) fn run_whole<'py, T: Scalar + Element>(
    py: Python<'py>,
    e: &Einsum,
    arrays: Vec<PyReadonlyArrayDyn<'py, T>>,
    comm: &Bound<'py, PyAny>,
    threads: usize,
) -> PyResult<Bound<'py, PyArrayDyn<T>>> {
    let handle = fortran_handle(comm)?;
    let local = operand_slices(e, &arrays);
    let plan = e.plan();
    let shape = output_shape(plan);
    let total: usize = shape.iter().product();
    let out = py.allow_threads(|| -> PyResult<Vec<T>> {
        let comm = duplicate(handle)?;
        let local = local.and_then(|s| check_world::<T>(e, &comm).map(|()| s));
        let slices = agree(&comm, local, type_tag::<T>())?;
        let (t, _) = deinsum::exec::execute_lent(plan, &comm, &slices, &options(threads))
            .map_err(|err| to_py(err.into()))?;
        let gathered = t.gather(&comm).map_err(|err| to_py(err.into()))?;
        let mut out = match gathered {
            Some(v) => v,
            None => {
                let mut v = deinsum::exec::buffers::try_vec(total)
                    .map_err(|err| pyo3::exceptions::PyMemoryError::new_err(err.to_string()))?;
                v.resize(total, T::default());
                v
            }
        };
        comm.broadcast_typed(&mut out, 0)
            .map_err(|err| to_py(deinsum::Error::Exec(deinsum::ExecError::Comm(err))))?;
        Ok(out)
    })?;
    out.into_pyarray(py).reshape(IxDyn(&shape))
}

/// Runs `e` on this rank's own blocks (`blocks[k]`: its block of operand `k` in the plan's Load
/// distribution, `None` where it holds none) on the communicator `comm`, and returns this
/// rank's block of the output with its `[start, stop)` per output index, or `None` for a rank
/// that returns none. The GIL is released during the run.
#[allow(clippy::type_complexity)]
pub(crate) fn run_blocks<'py, T: Scalar + Element>(
    py: Python<'py>,
    e: &Einsum,
    blocks: Vec<Option<PyReadonlyArrayDyn<'py, T>>>,
    comm: &Bound<'py, PyAny>,
    threads: usize,
) -> PyResult<Option<(Bound<'py, PyArrayDyn<T>>, Vec<(usize, usize)>)>> {
    let handle = fortran_handle(comm)?;
    let me: usize = comm.call_method0("Get_rank")?.extract()?;
    let local = own_blocks(e, &blocks, me);
    let plan = e.plan();
    let out = py.allow_threads(|| -> PyResult<Option<(Vec<T>, Vec<(usize, usize)>)>> {
        let comm = duplicate(handle)?;
        let local = local.and_then(|b| check_world::<T>(e, &comm).map(|()| b));
        let given = agree(&comm, local, type_tag::<T>())?;
        let inputs = Inputs::Given(std::sync::Mutex::new(given));
        let (t, _) = deinsum::exec::execute_measured(plan, &comm, &inputs, &options(threads))
            .map_err(|err| to_py(err.into()))?;
        Ok(t.into_primary().map(|b| (b.data.into_vec(), b.ranges)))
    })?;
    let Some((data, ranges)) = out else {
        return Ok(None);
    };
    let shape: Vec<usize> = ranges.iter().map(|&(s, e)| e - s).collect();
    let arr = data.into_pyarray(py).reshape(IxDyn(&shape))?;
    Ok(Some((arr, ranges)))
}

/// This rank's blocks as the executor takes them, after checking each against the plan's
/// block of rank `me` (its presence and shape).
fn own_blocks<T: Scalar + Element>(
    e: &Einsum,
    blocks: &[Option<PyReadonlyArrayDyn<'_, T>>],
    me: usize,
) -> PyResult<BTreeMap<usize, Vec<T>>> {
    let plan = e.plan();
    let n = plan.einsum.inputs().len();
    if blocks.len() != n {
        return Err(PyValueError::new_err(format!(
            "the plan takes {n} operands, {} blocks given",
            blocks.len()
        )));
    }
    let mut given = BTreeMap::new();
    for (k, b) in blocks.iter().enumerate() {
        let want = input_block_ranges(plan, k, me)?;
        match (b, want) {
            (None, None) => {}
            (Some(_), None) => {
                return Err(PyValueError::new_err(format!(
                    "rank {me} holds no block of operand {k}: pass None for it"
                )))
            }
            (None, Some(r)) => {
                return Err(PyValueError::new_err(format!(
                    "rank {me} holds the block {} of operand {k}: pass it (plan.input_block({k}, \
                     {me}) slices it out of the whole array)",
                    slices_text(&r)
                )))
            }
            (Some(a), Some(r)) => {
                let want: Vec<usize> = r.iter().map(|&(s, e)| e - s).collect();
                if a.shape() != want.as_slice() {
                    return Err(PyValueError::new_err(format!(
                        "rank {me}'s block of operand {k} has shape {:?}; the plan's block {} has \
                         shape {want:?}",
                        a.shape(),
                        slices_text(&r)
                    )));
                }
                // Copied once into the rank's own buffer (the executor takes it over); a
                // non-contiguous view is copied in C order.
                let data = match a.as_slice() {
                    Ok(s) => s.to_vec(),
                    Err(_) => a.as_array().iter().copied().collect(),
                };
                given.insert(k, data);
            }
        }
    }
    Ok(given)
}

/// `[s0:e0, s1:e1]`, as the slices of a block are written in Python.
fn slices_text(r: &[(usize, usize)]) -> String {
    let parts: Vec<String> = r.iter().map(|(s, e)| format!("{s}:{e}")).collect();
    format!("[{}]", parts.join(", "))
}
