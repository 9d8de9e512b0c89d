//! The Python binding of deinsum: converts NumPy arrays and Python values to the deinsum crates'
//! types and back. Every decision (parsing, paths, bounds, plans, execution) is the crates';
//! `deinsum/__init__.py` holds the Python-facing signatures.

use deinsum::cli::InputError;
use deinsum::expr::ExtentSpec;
use numpy::ndarray::IxDyn;
use numpy::PyUntypedArrayMethods;
use numpy::{Element, IntoPyArray, PyArrayDyn, PyArrayMethods, PyReadonlyArrayDyn};
use pyo3::exceptions::{PyMemoryError, PyRuntimeError, PyValueError};
use pyo3::prelude::*;

/// A deinsum error as the Python exception a caller expects: what the caller got wrong is a
/// `ValueError`; a run that cannot fit this node's memory is a `MemoryError`; the rest
/// `RuntimeError`.
fn to_py(e: deinsum::Error) -> PyErr {
    match e {
        deinsum::Error::Expr(e) => PyValueError::new_err(e.to_string()),
        deinsum::Error::Plan(m) => PyValueError::new_err(m.to_string()),
        deinsum::Error::Preflight(p) => match p {
            deinsum::exec::preflight::PreflightError::NotEnoughMemory { .. } => {
                PyMemoryError::new_err(p.to_string())
            }
            other => PyValueError::new_err(other.to_string()),
        },
        other => PyRuntimeError::new_err(other.to_string()),
    }
}

/// An error of the CLI's report functions: input errors are `ValueError`s.
fn cli_to_py(e: anyhow::Error) -> PyErr {
    let input = e.chain().any(|c| {
        c.downcast_ref::<InputError>().is_some()
            || c.downcast_ref::<deinsum::expr::ExprError>().is_some()
    });
    if input {
        PyValueError::new_err(e.to_string())
    } else {
        PyRuntimeError::new_err(e.to_string())
    }
}

/// Parses `expr` with per-operand `shapes`.
fn parse(expr: &str, shapes: Vec<Vec<usize>>) -> PyResult<deinsum::expr::Einsum> {
    let spec = ExtentSpec {
        shapes: Some(shapes),
        ..ExtentSpec::default()
    };
    deinsum::expr::parse(expr, &spec).map_err(|e| PyValueError::new_err(e.to_string()))
}

/// A compiled plan (the `Plan` of the Python package wraps it).
#[pyclass(module = "deinsum._native", frozen)]
struct NativePlan {
    inner: deinsum::Einsum,
    /// Path strategy asked for (printed by `explain`, as the CLI prints it).
    strategy: String,
}

/// Runs `job` on a worker thread with the GIL released, while this thread checks for Ctrl-C
/// every 50 ms: a KeyboardInterrupt sets the executor's cancel flag, so the ranks stop before
/// their next step, and is raised once the worker has returned (the lent arrays outlive it).
fn run_interruptible<T: Send>(
    py: Python<'_>,
    job: impl FnOnce(&deinsum::ExecOptions) -> Result<Vec<T>, deinsum::Error> + Send,
    threads: usize,
) -> PyResult<Vec<T>> {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{mpsc, Arc};
    let cancel = Arc::new(AtomicBool::new(false));
    let opts = deinsum::ExecOptions {
        threads,
        cancel: Some(Arc::clone(&cancel)),
        ..deinsum::ExecOptions::default()
    };
    let (result, interrupt) = py.allow_threads(|| {
        std::thread::scope(|s| {
            let (done, finished) = mpsc::channel::<()>();
            let worker = s.spawn(move || {
                let r = job(&opts);
                // The receiver may have stopped waiting; nothing is lost then.
                let _ = done.send(());
                r
            });
            let mut interrupt = None;
            while let Err(mpsc::RecvTimeoutError::Timeout) =
                finished.recv_timeout(std::time::Duration::from_millis(50))
            {
                if interrupt.is_none() {
                    if let Err(err) = Python::with_gil(|py| py.check_signals()) {
                        cancel.store(true, Ordering::Relaxed);
                        interrupt = Some(err);
                    }
                }
            }
            let result = worker
                .join()
                .unwrap_or_else(|p| std::panic::resume_unwind(p));
            (result, interrupt)
        })
    });
    if let Some(err) = interrupt {
        return Err(err);
    }
    let out = result.map_err(to_py)?;
    py.check_signals()?;
    Ok(out)
}

/// Runs `e` on `arrays` of element type `T`: arrays are lent to the executor without a copy
/// (the caller passes C-contiguous, aligned arrays); the GIL is released meanwhile.
fn run_typed<'py, T: deinsum::Scalar + Element>(
    py: Python<'py>,
    e: &deinsum::Einsum,
    arrays: Vec<PyReadonlyArrayDyn<'py, T>>,
    threads: usize,
) -> PyResult<Bound<'py, PyArrayDyn<T>>> {
    let einsum = &e.plan().einsum;
    if arrays.len() != einsum.inputs.len() {
        return Err(PyValueError::new_err(format!(
            "the plan takes {} operands, {} given",
            einsum.inputs.len(),
            arrays.len()
        )));
    }
    for (k, (a, op)) in arrays.iter().zip(&einsum.inputs).enumerate() {
        let want = op.shape(&einsum.extents);
        if a.shape() != want.as_slice() {
            return Err(PyValueError::new_err(format!(
                "operand {k} has shape {:?}, the plan was compiled for {:?}",
                a.shape(),
                want
            )));
        }
    }
    let slices = arrays
        .iter()
        .map(|a| a.as_slice())
        .collect::<Result<Vec<&[T]>, _>>()
        .map_err(|e| PyValueError::new_err(format!("operand not C-contiguous: {e}")))?;
    let shape: Vec<usize> = einsum.output.iter().map(|c| einsum.extents[c]).collect();
    py.check_signals()?;
    let out = run_interruptible(py, |opts| e.run_local_borrowed(&slices, opts), threads)?;
    let arr = out.into_pyarray(py);
    arr.reshape(IxDyn(&shape))
}

#[pymethods]
impl NativePlan {
    /// The plan JSON, as `deinsum plan --format json` prints it (without the final newline).
    fn to_json(&self) -> PyResult<String> {
        serde_json::to_string_pretty(self.inner.plan())
            .map_err(|e| PyRuntimeError::new_err(e.to_string()))
    }

    /// The plan in words, as `deinsum plan` prints it.
    fn explain(&self) -> String {
        deinsum::cli::plan::render_text(self.inner.plan(), &self.strategy)
    }

    /// Reads a plan from its JSON.
    #[staticmethod]
    fn from_json(text: &str) -> PyResult<Self> {
        let plan = deinsum::plan::Plan::from_json(text)
            .map_err(|e| PyValueError::new_err(e.to_string()))?;
        Ok(NativePlan {
            inner: deinsum::Einsum::from_plan(plan),
            strategy: "from JSON".into(),
        })
    }

    /// Storage shape of every operand the plan takes.
    fn input_shapes(&self) -> Vec<Vec<usize>> {
        let e = &self.inner.plan().einsum;
        e.inputs.iter().map(|o| o.shape(&e.extents)).collect()
    }

    /// Shape of the output.
    fn output_shape(&self) -> Vec<usize> {
        let e = &self.inner.plan().einsum;
        e.output.iter().map(|c| e.extents[c]).collect()
    }

    /// Number of ranks.
    fn procs(&self) -> usize {
        self.inner.plan().procs
    }

    /// Runs on float64 arrays.
    fn run_f64<'py>(
        &self,
        py: Python<'py>,
        arrays: Vec<PyReadonlyArrayDyn<'py, f64>>,
        threads: usize,
    ) -> PyResult<Bound<'py, PyArrayDyn<f64>>> {
        run_typed(py, &self.inner, arrays, threads)
    }

    /// Runs on float32 arrays.
    fn run_f32<'py>(
        &self,
        py: Python<'py>,
        arrays: Vec<PyReadonlyArrayDyn<'py, f32>>,
        threads: usize,
    ) -> PyResult<Bound<'py, PyArrayDyn<f32>>> {
        run_typed(py, &self.inner, arrays, threads)
    }
}

/// Compiles `expr` for operands of `shapes` on `procs` ranks with `mem` words per rank.
#[pyfunction]
fn compile(
    expr: &str,
    shapes: Vec<Vec<usize>>,
    procs: usize,
    mem: Option<u64>,
    optimize: &str,
) -> PyResult<NativePlan> {
    if procs == 0 {
        return Err(PyValueError::new_err("procs must be at least 1"));
    }
    let e = parse(expr, shapes)?;
    let options = deinsum::Options {
        procs,
        mem,
        path: deinsum::path::PathOptions::with_strategy(optimize),
        ..deinsum::Options::default()
    };
    let inner = deinsum::Einsum::compile_parsed(&e, &options).map_err(to_py)?;
    Ok(NativePlan {
        inner,
        strategy: optimize.to_string(),
    })
}

/// A found contraction path; its reports are rendered only when asked for.
#[pyclass(module = "deinsum._native", frozen)]
struct NativePathInfo {
    einsum: deinsum::expr::Einsum,
    info: deinsum::path::PathInfo,
    memory_limit: Option<u128>,
}

/// A count as a Python number: an int when exact, a float otherwise.
fn count_to_py(py: Python<'_>, c: &deinsum::path::Count) -> PyResult<PyObject> {
    Ok(match c {
        deinsum::path::Count::Exact(v) => v.into_pyobject(py)?.into_any().unbind(),
        deinsum::path::Count::Approx(v) => v.into_pyobject(py)?.into_any().unbind(),
    })
}

#[pymethods]
impl NativePathInfo {
    /// The path in opt_einsum's linear format.
    fn path(&self) -> Vec<Vec<usize>> {
        self.info.path.clone()
    }

    /// FLOPs as opt_einsum counts them.
    fn flops(&self, py: Python<'_>) -> PyResult<PyObject> {
        count_to_py(py, &self.info.flops)
    }

    /// Naive FLOPs (one loop nest).
    fn naive_flops(&self, py: Python<'_>) -> PyResult<PyObject> {
        count_to_py(py, &self.info.naive_flops)
    }

    /// Largest step result, in elements.
    fn largest_intermediate(&self, py: Python<'_>) -> PyResult<PyObject> {
        count_to_py(py, &self.info.largest_intermediate)
    }

    /// The table `deinsum path` prints.
    fn text(&self) -> String {
        use deinsum::cli::path::{canonical, render_text};
        let c = canonical(&self.einsum);
        render_text(&c, &self.einsum.extents, &self.info, self.memory_limit)
    }

    /// The JSON `deinsum path --format json` prints.
    fn json(&self) -> PyResult<String> {
        use deinsum::cli::path::{canonical, render_json};
        let c = canonical(&self.einsum);
        render_json(&c, &self.einsum.extents, &self.info, self.memory_limit)
            .map_err(|err| PyRuntimeError::new_err(err.to_string()))
    }
}

/// Finds the contraction path of `expr` over operands of `shapes`.
#[pyfunction]
fn contract_path(
    expr: &str,
    shapes: Vec<Vec<usize>>,
    optimize: &str,
    memory_limit: Option<u128>,
) -> PyResult<NativePathInfo> {
    if memory_limit == Some(0) {
        return Err(PyValueError::new_err(
            "memory_limit must be at least 1 element",
        ));
    }
    let einsum = parse(expr, shapes)?;
    let opts = deinsum::path::PathOptions {
        strategy: optimize.to_string(),
        memory_limit,
        ..deinsum::path::PathOptions::default()
    };
    let info = deinsum::path::optimize(&einsum, &opts).map_err(|err| match err {
        deinsum::path::PathError::InvalidPath(_) => PyRuntimeError::new_err(err.to_string()),
        other => PyValueError::new_err(other.to_string()),
    })?;
    Ok(NativePathInfo {
        einsum,
        info,
        memory_limit,
    })
}

/// The SOAP bounds: (the CLI's text report, its JSON).
#[pyfunction]
fn bound(
    expr: &str,
    shapes: Vec<Vec<usize>>,
    mem: f64,
    procs: Option<usize>,
    optimize: &str,
    path_cost: &str,
) -> PyResult<(String, String)> {
    if !(mem.is_finite() && mem > 0.0) {
        return Err(PyValueError::new_err(format!(
            "mem must be a positive number of words, got {mem}"
        )));
    }
    if procs == Some(0) {
        return Err(PyValueError::new_err("procs must be at least 1"));
    }
    let e = parse(expr, shapes)?;
    let (text, json) = deinsum::cli::bound::bound_report(&e, mem, procs, optimize, path_cost)
        .map_err(cli_to_py)?;
    let json = serde_json::to_string_pretty(&json)
        .map_err(|err| PyRuntimeError::new_err(err.to_string()))?;
    Ok((text, json))
}

/// The native module.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<NativePlan>()?;
    m.add_class::<NativePathInfo>()?;
    m.add_function(wrap_pyfunction!(compile, m)?)?;
    m.add_function(wrap_pyfunction!(contract_path, m)?)?;
    m.add_function(wrap_pyfunction!(bound, m)?)?;
    Ok(())
}
