//! Sparse operands from Python: `deinsum.einsum` hands SciPy sparse matrices over as COO
//! triplets (shape, coordinates, values), and gets back a dense array or, for a sparse result
//! (SDDMM, SpGEMM), the COO triplets of a CSR matrix built in Python.

use deinsum::sparse::einsum::SparseOutput;
use deinsum::sparse::SparseTensor;
use deinsum::{Operand, SparseEinsum, SparseOptions};
use numpy::ndarray::IxDyn;
use numpy::{
    Complex32, Complex64, Element, IntoPyArray, PyArrayMethods, PyReadonlyArrayDyn,
    PyUntypedArrayMethods,
};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

/// One operand as Python passes it: `("dense", array)` or `("sparse", shape, coords, values)`
/// with `coords` the int64 (nnz x order) coordinates.
fn operand<T: deinsum::Scalar + Element>(op: &Bound<'_, PyAny>) -> PyResult<Operand<T>> {
    let kind: String = op.get_item(0)?.extract()?;
    match kind.as_str() {
        "dense" => {
            let a: PyReadonlyArrayDyn<'_, T> = op.get_item(1)?.extract()?;
            Ok(Operand::Dense {
                shape: a.shape().to_vec(),
                data: a.as_array().iter().copied().collect(),
            })
        }
        "sparse" => {
            let shape: Vec<usize> = op.get_item(1)?.extract()?;
            let coords: PyReadonlyArrayDyn<'_, i64> = op.get_item(2)?.extract()?;
            let vals: PyReadonlyArrayDyn<'_, T> = op.get_item(3)?.extract()?;
            let coords = coords
                .as_array()
                .iter()
                .map(|&c| usize::try_from(c))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|_| PyValueError::new_err("a negative sparse coordinate"))?;
            let vals = vals.as_array().iter().copied().collect();
            let t = SparseTensor::from_entries(shape, coords, vals)
                .map_err(|e| PyValueError::new_err(e.to_string()))?;
            Ok(Operand::Sparse(t))
        }
        other => Err(PyValueError::new_err(format!(
            "unknown operand kind {other}"
        ))),
    }
}

/// Runs `expr` on `operands` (see [`operand`]) on `procs` in-process ranks of `threads` each;
/// the GIL is released during the run. Returns `("dense", array)` or
/// `("sparse", shape, coords, values)`.
pub fn run<'py, T: deinsum::Scalar + Element>(
    py: Python<'py>,
    expr: &str,
    operands: &Bound<'py, PyAny>,
    procs: usize,
    threads: usize,
) -> PyResult<PyObject> {
    let ops = operands
        .try_iter()?
        .map(|op| operand::<T>(&op?))
        .collect::<PyResult<Vec<_>>>()?;
    crate::limits::check_threads(procs, threads)?;
    let mut options = SparseOptions::procs(procs);
    options.run.threads = threads.max(1);
    let out = py
        .allow_threads(|| SparseEinsum::compile(expr, ops, &options)?.run_local())
        .map_err(crate::convert::to_py)?;
    Ok(match out {
        SparseOutput::Dense { shape, data } => {
            let arr = data.into_pyarray(py).reshape(IxDyn(&shape))?;
            ("dense", arr).into_pyobject(py)?.into_any().unbind()
        }
        SparseOutput::Sparse(t) => {
            let order = t.order();
            let mut coords = Vec::with_capacity(order * t.nnz());
            for e in 0..t.nnz() {
                coords.extend(t.coord(e).iter().map(|&c| c as i64));
            }
            let coords = coords.into_pyarray(py).reshape([t.nnz(), order])?;
            let vals = t.values().to_vec().into_pyarray(py);
            ("sparse", t.shape().to_vec(), coords, vals)
                .into_pyobject(py)?
                .into_any()
                .unbind()
        }
    })
}

/// `einsum` with sparse operands in float64.
#[pyfunction]
pub fn sparse_einsum_f64(
    py: Python<'_>,
    expr: &str,
    operands: &Bound<'_, PyAny>,
    procs: usize,
    threads: usize,
) -> PyResult<PyObject> {
    run::<f64>(py, expr, operands, procs, threads)
}

/// `einsum` with sparse operands in float32.
#[pyfunction]
pub fn sparse_einsum_f32(
    py: Python<'_>,
    expr: &str,
    operands: &Bound<'_, PyAny>,
    procs: usize,
    threads: usize,
) -> PyResult<PyObject> {
    run::<f32>(py, expr, operands, procs, threads)
}

/// `einsum` with sparse operands in complex128.
#[pyfunction]
pub fn sparse_einsum_c128(
    py: Python<'_>,
    expr: &str,
    operands: &Bound<'_, PyAny>,
    procs: usize,
    threads: usize,
) -> PyResult<PyObject> {
    run::<Complex64>(py, expr, operands, procs, threads)
}

/// `einsum` with sparse operands in complex64.
#[pyfunction]
pub fn sparse_einsum_c64(
    py: Python<'_>,
    expr: &str,
    operands: &Bound<'_, PyAny>,
    procs: usize,
    threads: usize,
) -> PyResult<PyObject> {
    run::<Complex32>(py, expr, operands, procs, threads)
}
