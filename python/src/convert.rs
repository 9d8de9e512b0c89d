//! Conversions every part of the binding shares (the bottom module: it uses no other module
//! of the crate): deinsum errors as Python exceptions, operands checked against a plan, the
//! blocks of a plan's distributions as index ranges.

use deinsum::cli::InputError;
use deinsum::expr::ExtentSpec;
use numpy::PyUntypedArrayMethods;
use numpy::{Element, PyReadonlyArrayDyn};
use pyo3::exceptions::{PyMemoryError, PyRuntimeError, PyValueError};
use pyo3::prelude::*;

/// A deinsum error as the Python exception a caller expects: what the caller got wrong is a
/// `ValueError`; a run that cannot fit this node's memory, or whose buffers or threads cannot
/// be had, is a `MemoryError`; the rest `RuntimeError`. Messages speak of operands, shapes and
/// arguments ([`pythonic`]), not of the CLI's flags.
pub fn to_py(e: deinsum::Error) -> PyErr {
    use deinsum::exec::preflight::PreflightError;
    use deinsum::ExecError;
    let text = pythonic(&e.to_string());
    match e {
        deinsum::Error::Expr(_) | deinsum::Error::Plan(_) | deinsum::Error::Sparse(_) => {
            PyValueError::new_err(text)
        }
        deinsum::Error::Preflight(PreflightError::NotEnoughMemory { .. })
        | deinsum::Error::Exec(ExecError::OutOfMemory { .. } | ExecError::Threads(_)) => {
            PyMemoryError::new_err(text)
        }
        deinsum::Error::Preflight(_) => PyValueError::new_err(text),
        _ => PyRuntimeError::new_err(text),
    }
}

/// A message of the crates in the words of a Python caller: the CLI's flags it never passed
/// (`--shapes`, `--sizes`, `--backend mpi`) become the operands' shapes and the arguments of
/// the Python API.
pub fn pythonic(message: &str) -> String {
    const WORDS: &[(&str, &str)] = &[
        ("--shapes gives ", "the operands' shapes give "),
        ("--shapes: shape ", "the shape "),
        ("--shapes, operand ", "the shape of operand "),
        ("must be given by --shapes", "must be given by its shape"),
        (" (--sizes must give the extent after broadcasting)", ""),
        (
            "run under MPI (--backend mpi) for more",
            "run under MPI for more (einsum(..., comm=) with an mpi4py communicator)",
        ),
        ("--backend mpi", "comm= (MPI)"),
        ("--shapes", "the operands' shapes"),
        ("--sizes", "the extents"),
        ("--procs", "procs="),
        ("--mem ", "mem="),
    ];
    let mut out = message.to_string();
    for (flag, words) in WORDS {
        if out.contains(flag) {
            out = out.replace(flag, words);
        }
    }
    out
}

/// An error of the CLI's report functions: input errors are `ValueError`s.
pub fn cli_to_py(e: anyhow::Error) -> PyErr {
    let input = e.chain().any(|c| {
        c.downcast_ref::<InputError>().is_some()
            || c.downcast_ref::<deinsum::expr::ExprError>().is_some()
    });
    let text = pythonic(&e.to_string());
    if input {
        PyValueError::new_err(text)
    } else {
        PyRuntimeError::new_err(text)
    }
}

/// Parses `expr` with per-operand `shapes`.
pub fn parse(expr: &str, shapes: Vec<Vec<usize>>) -> PyResult<deinsum::expr::ParsedEinsum> {
    let spec = ExtentSpec {
        shapes: Some(shapes),
        ..ExtentSpec::default()
    };
    deinsum::expr::parse(expr, &spec).map_err(|e| PyValueError::new_err(pythonic(&e.to_string())))
}

/// The shape of the plan's output.
pub fn output_shape(plan: &deinsum::plan::Plan) -> Vec<usize> {
    let einsum = &plan.einsum;
    einsum
        .output()
        .iter()
        .map(|c| einsum.extents()[c])
        .collect()
}

/// The whole operands' elements, after checking their number and shapes against the plan
/// (the caller passes C-contiguous, aligned arrays).
pub fn operand_slices<'a, 'py, T: deinsum::Scalar + Element>(
    e: &deinsum::Einsum,
    arrays: &'a [PyReadonlyArrayDyn<'py, T>],
) -> PyResult<Vec<&'a [T]>> {
    let einsum = &e.plan().einsum;
    if arrays.len() != einsum.inputs().len() {
        return Err(PyValueError::new_err(format!(
            "the plan takes {} operands, {} given",
            einsum.inputs().len(),
            arrays.len()
        )));
    }
    for (k, (a, op)) in arrays.iter().zip(einsum.inputs()).enumerate() {
        let want = op.shape(einsum.extents());
        if a.shape() != want.as_slice() {
            return Err(PyValueError::new_err(format!(
                "operand {k} has shape {:?}, the plan was compiled for {:?}",
                a.shape(),
                want
            )));
        }
    }
    arrays
        .iter()
        .map(|a| a.as_slice())
        .collect::<Result<Vec<&[T]>, _>>()
        .map_err(|e| PyValueError::new_err(format!("operand not C-contiguous: {e}")))
}

/// Rank `rank`'s block of operand `k` in the plan's Load distribution, as `[start, stop)` per
/// storage dim of the operand (`None`: the rank holds no block of it). An operand that repeats
/// an index is refused: its block (of the diagonal) is not a slice of the array.
pub fn input_block_ranges(
    plan: &deinsum::plan::Plan,
    k: usize,
    rank: usize,
) -> PyResult<Option<Vec<(usize, usize)>>> {
    use deinsum::expr::Dim;
    use deinsum::plan::{PlanStep, TensorKind};
    let einsum = &plan.einsum;
    let op = einsum.inputs().get(k).ok_or_else(|| {
        PyValueError::new_err(format!(
            "operand {k}: the plan takes {} operands",
            einsum.inputs().len()
        ))
    })?;
    check_rank(plan, rank)?;
    if op.has_diagonal() {
        return Err(PyValueError::new_err(format!(
            "operand {k} repeats an index: its block (of the diagonal) is not a slice of the \
             array; pass whole operands instead"
        )));
    }
    let load = plan.steps.iter().find_map(|s| match s {
        PlanStep::Load { tensor, dist } => plan
            .tensor(*tensor)
            .filter(|t| t.kind == TensorKind::Input(k))
            .map(|t| (t, dist)),
        _ => None,
    });
    let Some((t, dist)) = load else {
        return Ok(None);
    };
    let Some(b) = dist.block(rank, &t.shape) else {
        return Ok(None);
    };
    op.dims
        .iter()
        .map(|d| match d {
            Dim::Index(c) => t
                .indices
                .iter()
                .position(|x| x == c)
                .and_then(|i| b.ranges.get(i).copied())
                .ok_or_else(|| {
                    PyRuntimeError::new_err(format!("operand {k}: index {c} is not in its block"))
                }),
            Dim::Broadcast => Ok((0, 1)),
        })
        .collect::<PyResult<Vec<_>>>()
        .map(Some)
}

/// The block of the output rank `rank` returns from a run on its own blocks, as `[start, stop)`
/// per output index (`None` for a rank that returns none): the blocks of all ranks are
/// disjoint and cover the output.
pub fn output_block_ranges(
    plan: &deinsum::plan::Plan,
    rank: usize,
) -> PyResult<Option<Vec<(usize, usize)>>> {
    check_rank(plan, rank)?;
    let (id, dist) = &plan.output;
    let tensor = plan
        .tensor(*id)
        .ok_or_else(|| PyRuntimeError::new_err("the plan has no output tensor"))?
        .clone();
    let t = deinsum::DistTensor::<f64> {
        tensor,
        dist: dist.clone(),
        local: None,
        rank,
    };
    Ok(t.primary_block(rank).map(|b| b.ranges.to_vec()))
}

/// Refuses a rank number the plan does not have.
pub fn check_rank(plan: &deinsum::plan::Plan, rank: usize) -> PyResult<()> {
    if rank >= plan.procs {
        return Err(PyValueError::new_err(format!(
            "rank {rank}: the plan is for {} ranks (0 to {})",
            plan.procs,
            plan.procs.saturating_sub(1)
        )));
    }
    Ok(())
}
