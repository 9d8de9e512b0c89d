//! The Python binding of deinsum: converts NumPy arrays and Python values to the deinsum crates'
//! types and back. Every decision (parsing, paths, bounds, plans, execution) is the crates';
//! `deinsum/__init__.py` holds the Python-facing signatures.

mod alloc;
mod convert;
mod join;
mod limits;
#[cfg(feature = "mpi")]
mod mpi_run;
mod session;
mod sparse;

use convert::{
    cli_to_py, input_block_ranges, operand_slices, output_block_ranges, output_shape, parse, to_py,
};

use numpy::ndarray::IxDyn;
use numpy::PyUntypedArrayMethods;
use numpy::{Complex32, Complex64};
use numpy::{Element, IntoPyArray, PyArrayDyn, PyArrayMethods, PyReadonlyArrayDyn, PyUntypedArray};
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::GILOnceCell;
use pyo3::types::{PyBool, PyInt, PyList, PyTuple};

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
/// A `short` job runs on this thread instead (see [`is_short`]).
fn run_interruptible<T: Send>(
    py: Python<'_>,
    job: impl FnOnce(&deinsum::ExecOptions) -> Result<Vec<T>, deinsum::Error> + Send,
    threads: usize,
    kept: Option<deinsum::exec::buffers::KeptBuffers>,
    short: bool,
) -> PyResult<Vec<T>> {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{mpsc, Arc};
    let cancel = Arc::new(AtomicBool::new(false));
    let opts = deinsum::ExecOptions {
        threads,
        kept,
        cancel: Some(Arc::clone(&cancel)),
        ..deinsum::ExecOptions::default()
    };
    if short {
        // Too short to be worth a watcher thread (spawning it and waking this thread again
        // cost ~0.1 ms); a Ctrl-C meanwhile is raised by the check after the run.
        let out = py.allow_threads(|| job(&opts)).map_err(to_py)?;
        py.check_signals()?;
        return Ok(out);
    }
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

/// Multiply-adds per rank and input elements up to which a run counts as short: a few ms on
/// one core, so that waiting for its end before raising KeyboardInterrupt is not noticed.
const SHORT_MADDS: f64 = (1u64 << 25) as f64;
const SHORT_INPUT_WORDS: usize = 1 << 22;

/// Whether a run of `plan` on inputs of `words` elements is short (`SHORT_MADDS`,
/// `SHORT_INPUT_WORDS`).
fn is_short(plan: &deinsum::plan::Plan, words: usize) -> bool {
    let madds: f64 = plan.groups.iter().map(|g| g.max_flops_per_rank).sum();
    madds <= SHORT_MADDS && words <= SHORT_INPUT_WORDS
}

/// Runs `e` on `arrays` of element type `T`: arrays are lent to the executor without a copy
/// (the caller passes C-contiguous, aligned arrays); the GIL is released meanwhile.
fn run_typed<'py, T: deinsum::Scalar + Element>(
    py: Python<'py>,
    e: &deinsum::Einsum,
    arrays: Vec<PyReadonlyArrayDyn<'py, T>>,
    threads: usize,
) -> PyResult<Bound<'py, PyArrayDyn<T>>> {
    let slices = operand_slices(e, &arrays)?;
    let shape = output_shape(e.plan());
    py.check_signals()?;
    let procs = e.plan().procs;
    // Too many ranks for threads of one process is the caller's argument (ValueError), told
    // before the threads they would need.
    deinsum::exec::preflight::check_in_process_ranks(procs).map_err(|p| to_py(p.into()))?;
    limits::check_threads(procs, threads)?;
    // A call with more threads than cores keeps nothing for the next one: its ranks' thread
    // pools and buffers go when it returns (3,000 threads left alive after threads=3000).
    let kept = (limits::run_threads(procs, threads) > deinsum::cli::node_cores() as u128)
        .then(deinsum::exec::buffers::KeptBuffers::new);
    let short = is_short(e.plan(), slices.iter().map(|s| s.len()).sum());
    // Its threads' allocator segments go back to the OS once freed (see alloc.rs).
    let _no_new_arenas = kept.is_some().then(alloc::NoNewArenas::hold);
    let out = run_interruptible(
        py,
        |opts| e.run_local_borrowed(&slices, opts),
        threads,
        kept,
        short,
    )?;
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
        e.inputs().iter().map(|o| o.shape(e.extents())).collect()
    }

    /// Shape of the output.
    fn output_shape(&self) -> Vec<usize> {
        let e = &self.inner.plan().einsum;
        e.output().iter().map(|c| e.extents()[c]).collect()
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

    /// Runs on complex128 arrays.
    fn run_c128<'py>(
        &self,
        py: Python<'py>,
        arrays: Vec<PyReadonlyArrayDyn<'py, Complex64>>,
        threads: usize,
    ) -> PyResult<Bound<'py, PyArrayDyn<Complex64>>> {
        run_typed(py, &self.inner, arrays, threads)
    }

    /// Runs on complex64 arrays.
    fn run_c64<'py>(
        &self,
        py: Python<'py>,
        arrays: Vec<PyReadonlyArrayDyn<'py, Complex32>>,
        threads: usize,
    ) -> PyResult<Bound<'py, PyArrayDyn<Complex32>>> {
        run_typed(py, &self.inner, arrays, threads)
    }

    /// Rank `rank`'s block of operand `k`: `[start, stop)` per storage dim, or `None`.
    fn input_block(&self, k: usize, rank: usize) -> PyResult<Option<Vec<(usize, usize)>>> {
        input_block_ranges(self.inner.plan(), k, rank)
    }

    /// The output block rank `rank` returns from a run on blocks: `[start, stop)` per output
    /// index, or `None`.
    fn output_block(&self, rank: usize) -> PyResult<Option<Vec<(usize, usize)>>> {
        output_block_ranges(self.inner.plan(), rank)
    }

    /// Runs on float64 arrays on an mpi4py communicator; every rank gets the whole result.
    #[cfg(feature = "mpi")]
    fn run_mpi_f64<'py>(
        &self,
        py: Python<'py>,
        arrays: Vec<PyReadonlyArrayDyn<'py, f64>>,
        comm: &Bound<'py, PyAny>,
        threads: usize,
    ) -> PyResult<Bound<'py, PyArrayDyn<f64>>> {
        mpi_run::run_whole(py, &self.inner, arrays, comm, threads)
    }

    /// Runs on float32 arrays on an mpi4py communicator; every rank gets the whole result.
    #[cfg(feature = "mpi")]
    fn run_mpi_f32<'py>(
        &self,
        py: Python<'py>,
        arrays: Vec<PyReadonlyArrayDyn<'py, f32>>,
        comm: &Bound<'py, PyAny>,
        threads: usize,
    ) -> PyResult<Bound<'py, PyArrayDyn<f32>>> {
        mpi_run::run_whole(py, &self.inner, arrays, comm, threads)
    }

    /// Runs on complex128 arrays on an mpi4py communicator; every rank gets the whole result.
    #[cfg(feature = "mpi")]
    fn run_mpi_c128<'py>(
        &self,
        py: Python<'py>,
        arrays: Vec<PyReadonlyArrayDyn<'py, Complex64>>,
        comm: &Bound<'py, PyAny>,
        threads: usize,
    ) -> PyResult<Bound<'py, PyArrayDyn<Complex64>>> {
        mpi_run::run_whole(py, &self.inner, arrays, comm, threads)
    }

    /// Runs on complex64 arrays on an mpi4py communicator; every rank gets the whole result.
    #[cfg(feature = "mpi")]
    fn run_mpi_c64<'py>(
        &self,
        py: Python<'py>,
        arrays: Vec<PyReadonlyArrayDyn<'py, Complex32>>,
        comm: &Bound<'py, PyAny>,
        threads: usize,
    ) -> PyResult<Bound<'py, PyArrayDyn<Complex32>>> {
        mpi_run::run_whole(py, &self.inner, arrays, comm, threads)
    }

    /// Runs on this rank's own complex128 blocks; returns its output block and its ranges.
    #[cfg(feature = "mpi")]
    #[allow(clippy::type_complexity)]
    fn run_blocks_c128<'py>(
        &self,
        py: Python<'py>,
        blocks: Vec<Option<PyReadonlyArrayDyn<'py, Complex64>>>,
        comm: &Bound<'py, PyAny>,
        threads: usize,
    ) -> PyResult<Option<(Bound<'py, PyArrayDyn<Complex64>>, Vec<(usize, usize)>)>> {
        mpi_run::run_blocks(py, &self.inner, blocks, comm, threads)
    }

    /// Runs on this rank's own complex64 blocks; returns its output block and its ranges.
    #[cfg(feature = "mpi")]
    #[allow(clippy::type_complexity)]
    fn run_blocks_c64<'py>(
        &self,
        py: Python<'py>,
        blocks: Vec<Option<PyReadonlyArrayDyn<'py, Complex32>>>,
        comm: &Bound<'py, PyAny>,
        threads: usize,
    ) -> PyResult<Option<(Bound<'py, PyArrayDyn<Complex32>>, Vec<(usize, usize)>)>> {
        mpi_run::run_blocks(py, &self.inner, blocks, comm, threads)
    }

    /// Runs on this rank's own float64 blocks; returns its output block and its ranges.
    #[cfg(feature = "mpi")]
    #[allow(clippy::type_complexity)]
    fn run_blocks_f64<'py>(
        &self,
        py: Python<'py>,
        blocks: Vec<Option<PyReadonlyArrayDyn<'py, f64>>>,
        comm: &Bound<'py, PyAny>,
        threads: usize,
    ) -> PyResult<Option<(Bound<'py, PyArrayDyn<f64>>, Vec<(usize, usize)>)>> {
        mpi_run::run_blocks(py, &self.inner, blocks, comm, threads)
    }

    /// Runs on this rank's own float32 blocks; returns its output block and its ranges.
    #[cfg(feature = "mpi")]
    #[allow(clippy::type_complexity)]
    fn run_blocks_f32<'py>(
        &self,
        py: Python<'py>,
        blocks: Vec<Option<PyReadonlyArrayDyn<'py, f32>>>,
        comm: &Bound<'py, PyAny>,
        threads: usize,
    ) -> PyResult<Option<(Bound<'py, PyArrayDyn<f32>>, Vec<(usize, usize)>)>> {
        mpi_run::run_blocks(py, &self.inner, blocks, comm, threads)
    }
}

/// Compiles `expr` for operands of `shapes` on `procs` ranks with `mem` words per rank, for
/// the built-in machine (`machine="default"`, as `deinsum plan`), for in-process ranks on this
/// host (`"host"`, as `deinsum run`) or for MPI ranks on this host's node (`"mpi"`, as `deinsum
/// run` under mpirun: the node's cores shared by the ranks the launcher put on it).
#[pyfunction]
#[pyo3(signature = (expr, shapes, procs, mem, optimize, machine="default"))]
fn compile(
    expr: &str,
    shapes: Vec<Vec<usize>>,
    procs: usize,
    mem: Option<u64>,
    optimize: &str,
    machine: &str,
) -> PyResult<NativePlan> {
    if procs == 0 {
        return Err(PyValueError::new_err("procs must be at least 1"));
    }
    let e = parse(expr, shapes)?;
    let base = match machine {
        "default" => deinsum::Options::procs(procs),
        "host" => deinsum::Options::procs_on_this_host(procs),
        "mpi" => {
            let on_node = deinsum::exec::preflight::mpi_ranks_on_node()
                .unwrap_or(procs)
                .clamp(1, procs);
            deinsum::Options {
                machine: deinsum::plan::Machine::default()
                    .on_host(deinsum::cli::node_cores(), on_node),
                ..deinsum::Options::procs(procs)
            }
        }
        other => {
            return Err(PyValueError::new_err(format!(
                "machine must be 'default', 'host' or 'mpi', not {other:?}"
            )))
        }
    };
    // Plans for running here and now (`einsum`'s) skip the search over candidate trees when
    // it cannot pay (an einsum predicted under a millisecond: the search would take longer
    // than the run); "default" prints what `deinsum plan` prints.
    let tree_search = match machine {
        "default" => deinsum::plan::TreeSearch::Full,
        _ => deinsum::plan::TreeSearch::WhenItPays,
    };
    let options = deinsum::Options {
        mem,
        path: deinsum::path::PathOptions::with_strategy(optimize),
        tree_search,
        ..base
    };
    let inner = deinsum::Einsum::compile_parsed(&e, &options).map_err(to_py)?;
    Ok(NativePlan {
        inner,
        strategy: optimize.to_string(),
    })
}

/// A contraction path's report, in the manner of opt_einsum's `PathInfo`: `print(info)` shows
/// the table `deinsum path` prints, `info.report` is the JSON of `deinsum path --format json`
/// as Python objects (both rendered on first use); `.path`, `.opt_cost`, `.naive_cost`,
/// `.largest_intermediate` and `.speedup` are opt_einsum's attributes.
#[pyclass(name = "PathInfo", module = "deinsum", frozen)]
struct NativePathInfo {
    einsum: deinsum::expr::ParsedEinsum,
    info: deinsum::path::PathInfo,
    memory_limit: Option<u128>,
    /// The path list `contract_path` returned (the same object, as opt_einsum's).
    path: Py<PyList>,
    report: GILOnceCell<PyObject>,
}

/// A count as a Python number: an int when exact, a float otherwise.
fn count_to_py(py: Python<'_>, c: &deinsum::path::Count) -> PyResult<PyObject> {
    Ok(match c {
        deinsum::path::Count::Exact(v) => v.into_pyobject(py)?.into_any().unbind(),
        deinsum::path::Count::Approx(v) => v.into_pyobject(py)?.into_any().unbind(),
    })
}

impl NativePathInfo {
    /// The report as Python objects, parsed once.
    fn report_obj<'py>(&self, py: Python<'py>) -> PyResult<&Bound<'py, PyAny>> {
        let obj = self.report.get_or_try_init(py, || -> PyResult<PyObject> {
            let text = self.json()?;
            Ok(py.import("json")?.call_method1("loads", (text,))?.unbind())
        })?;
        Ok(obj.bind(py))
    }
}

#[pymethods]
impl NativePathInfo {
    /// The path in opt_einsum's linear format (a list of tuples of positions).
    #[getter]
    fn path(&self, py: Python<'_>) -> Py<PyList> {
        self.path.clone_ref(py)
    }

    /// FLOPs as opt_einsum counts them.
    #[getter]
    fn opt_cost(&self, py: Python<'_>) -> PyResult<PyObject> {
        count_to_py(py, &self.info.flops)
    }

    /// Naive FLOPs (one loop nest over every index).
    #[getter]
    fn naive_cost(&self, py: Python<'_>) -> PyResult<PyObject> {
        count_to_py(py, &self.info.naive_flops)
    }

    /// Largest step result, in elements.
    #[getter]
    fn largest_intermediate(&self, py: Python<'_>) -> PyResult<PyObject> {
        count_to_py(py, &self.info.largest_intermediate)
    }

    /// Naive FLOPs over optimised FLOPs, as the report gives it.
    #[getter]
    fn speedup<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.report_obj(py)?.get_item("speedup")
    }

    /// The canonical expression.
    #[getter]
    fn eq<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.report_obj(py)?.get_item("expr")
    }

    /// Every step as an einsum string.
    #[getter]
    fn contraction_list(&self) -> Vec<String> {
        self.info.steps.iter().map(|s| s.einsum.clone()).collect()
    }

    /// The JSON of `deinsum path --format json` as Python objects.
    #[getter]
    fn report<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        self.report_obj(py).cloned()
    }

    /// The table `deinsum path` prints.
    fn text(&self) -> String {
        use deinsum::cli::path::{canonical, render_text};
        let c = canonical(&self.einsum);
        render_text(&c, self.einsum.extents(), &self.info, self.memory_limit)
    }

    /// The JSON `deinsum path --format json` prints.
    fn json(&self) -> PyResult<String> {
        use deinsum::cli::path::{canonical, render_json};
        let c = canonical(&self.einsum);
        render_json(&c, self.einsum.extents(), &self.info, self.memory_limit)
            .map_err(|err| PyRuntimeError::new_err(err.to_string()))
    }

    fn __str__(&self) -> String {
        self.text()
    }

    fn __repr__(&self) -> String {
        self.text()
    }
}

/// An integer argument as Python's `int()` reads it (NumPy integers and floats included).
fn to_int(x: &Bound<'_, PyAny>) -> PyResult<i128> {
    // i64 first: the limited API has no one-call 128-bit conversion (PyO3 builds it from
    // several calls); on own10's 35 extents this took contract_path from 36.9 to 36.0 µs.
    if let Ok(v) = x.extract::<i64>() {
        return Ok(v.into());
    }
    match x.extract::<i128>() {
        Ok(v) => Ok(v),
        Err(_) => x.py().get_type::<PyInt>().call1((x,))?.extract::<i128>(),
    }
}

/// Operand `k`'s shape: the shape itself (`shapes=True`), else an array's (or `numpy.shape`'s).
fn operand_shape(k: usize, op: &Bound<'_, PyAny>, shapes: bool) -> PyResult<Vec<usize>> {
    if !shapes {
        if let Ok(a) = op.downcast::<PyUntypedArray>() {
            return Ok(a.shape().to_vec());
        }
        let shape = op.py().import("numpy")?.call_method1("shape", (op,))?;
        return operand_shape(k, &shape, true);
    }
    let mut out = Vec::new();
    for n in op.try_iter()? {
        let v = to_int(&n?)?;
        out.push(usize::try_from(v).map_err(|_| {
            PyValueError::new_err(format!(
                "operand {k}: extents must be non-negative integers, got {v}"
            ))
        })?);
    }
    Ok(out)
}

/// The path strategy's name: NumPy's `optimize=True/False` mean the default search.
fn strategy_name(optimize: Option<&Bound<'_, PyAny>>) -> PyResult<String> {
    match optimize {
        None => Ok("auto".into()),
        Some(o) if o.is_instance_of::<PyBool>() => Ok("auto".into()),
        Some(o) => match o.extract::<String>() {
            Ok(s) => Ok(s),
            Err(_) => o.str()?.extract::<String>(),
        },
    }
}

/// opt_einsum's `contract_path`: returns `(path, info)` for arrays (or shapes, with
/// `shapes=True`). `optimize` names the strategy (default `"auto"`; `True`/`False` mean it too);
/// `memory_limit` caps every step result, in elements.
///
/// One native call from arguments to result: parsing the call in Python cost as much as the
/// search itself on small einsums.
#[pyfunction]
#[pyo3(signature = (expr, *operands, optimize=None, memory_limit=None, shapes=false))]
fn contract_path<'py>(
    py: Python<'py>,
    expr: &str,
    operands: &Bound<'py, PyTuple>,
    optimize: Option<&Bound<'py, PyAny>>,
    memory_limit: Option<&Bound<'py, PyAny>>,
    shapes: bool,
) -> PyResult<(Py<PyList>, NativePathInfo)> {
    let memory_limit = match memory_limit {
        None => None,
        Some(m) => match u128::try_from(to_int(m)?) {
            Ok(v) if v > 0 => Some(v),
            _ => {
                return Err(PyValueError::new_err(
                    "memory_limit must be at least 1 element",
                ))
            }
        },
    };
    let strategy = strategy_name(optimize)?;
    let shapes = operands
        .iter()
        .enumerate()
        .map(|(k, op)| operand_shape(k, &op, shapes))
        .collect::<PyResult<Vec<_>>>()?;
    let einsum = parse(expr, shapes)?;
    let opts = deinsum::path::PathOptions {
        strategy,
        memory_limit,
        ..deinsum::path::PathOptions::default()
    };
    let info = deinsum::path::optimize(&einsum, &opts).map_err(|err| match err {
        deinsum::path::PathError::InvalidPath(_) => PyRuntimeError::new_err(err.to_string()),
        other => PyValueError::new_err(other.to_string()),
    })?;
    let steps = info
        .path
        .iter()
        .map(|p| PyTuple::new(py, p))
        .collect::<PyResult<Vec<_>>>()?;
    let path = PyList::new(py, steps)?.unbind();
    let native = NativePathInfo {
        einsum,
        info,
        memory_limit,
        path: path.clone_ref(py),
        report: GILOnceCell::new(),
    };
    Ok((path, native))
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

/// Frees the buffers that in-process runs keep for the next call; returns the elements freed.
#[pyfunction]
fn release_buffers() -> usize {
    deinsum::release_buffers()
}

/// The native module.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    alloc::init();
    m.add_class::<NativePlan>()?;
    m.add_class::<NativePathInfo>()?;
    m.add_function(wrap_pyfunction!(compile, m)?)?;
    m.add_function(wrap_pyfunction!(contract_path, m)?)?;
    m.add_function(wrap_pyfunction!(bound, m)?)?;
    m.add_function(wrap_pyfunction!(release_buffers, m)?)?;
    session::register(m)?;
    m.add_function(wrap_pyfunction!(sparse::sparse_einsum_f64, m)?)?;
    m.add_function(wrap_pyfunction!(sparse::sparse_einsum_f32, m)?)?;
    m.add_function(wrap_pyfunction!(sparse::sparse_einsum_c128, m)?)?;
    m.add_function(wrap_pyfunction!(sparse::sparse_einsum_c64, m)?)?;
    m.add_function(wrap_pyfunction!(join::join_ipc, m)?)?;
    // Whether `comm=` (an mpi4py communicator) is available: the `mpi` feature.
    m.add("HAS_MPI", cfg!(feature = "mpi"))?;
    Ok(())
}
