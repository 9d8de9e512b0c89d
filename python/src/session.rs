//! `deinsum.Session`, `deinsum.DistArray` and `deinsum.Layout`: the Python face of
//! [`deinsum::Session`]. Arrays stay distributed inside the session between einsums; only
//! `DistArray.numpy()` and `DistArray.save()` bring one whole into this process. On an mpi4py
//! communicator (`Session(comm=...)`, the `mpi` feature) every rank makes the same calls and
//! holds its own blocks; `numpy()` and `save()` are collective there.

use deinsum::{DType, OutLayout, SessionError};
use numpy::ndarray::IxDyn;
use numpy::{
    Complex32, Complex64, IntoPyArray, PyArrayMethods, PyReadonlyArrayDyn, PyUntypedArrayMethods,
};
#[cfg(not(feature = "mpi"))]
use pyo3::exceptions::PyNotImplementedError;
use pyo3::exceptions::{
    PyFileExistsError, PyFileNotFoundError, PyMemoryError, PyOSError, PyTypeError, PyValueError,
};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList, PyTuple};
use std::path::PathBuf;

/// A session error as the Python exception a caller expects: what the caller got wrong
/// (foreign operands, shapes, a closed session, as Python's closed files) is a `ValueError`;
/// operands of different element types a `TypeError`; a gather that cannot fit memory a
/// `MemoryError`; saving over a file a live array reads from a `FileExistsError`; file errors
/// `OSError`s.
pub(crate) fn session_to_py(e: SessionError) -> PyErr {
    use deinsum::exec::npy::NpyError;
    let msg = crate::convert::pythonic(&e.to_string());
    match e {
        SessionError::ForeignArray { .. }
        | SessionError::Closed { .. }
        | SessionError::Shape { .. }
        | SessionError::Peer { .. }
        | SessionError::Data(_) => PyValueError::new_err(msg),
        SessionError::DType { .. } => PyTypeError::new_err(msg),
        SessionError::TooLarge { .. } => PyMemoryError::new_err(msg),
        SessionError::SaveOverSource { .. } => PyFileExistsError::new_err(msg),
        SessionError::Npy(NpyError::Io { source, .. }) => match source.kind() {
            std::io::ErrorKind::NotFound => PyFileNotFoundError::new_err(msg),
            _ => PyOSError::new_err(msg),
        },
        SessionError::Npy(_) => PyValueError::new_err(msg),
        SessionError::Einsum(e) => crate::convert::to_py(e),
    }
}

/// A distributed array's layout: a grid of ranks and, per axis, the grid dimensions that split
/// it (`split`); pass it as `out_layout=` to leave a result in it.
#[pyclass(name = "Layout", module = "deinsum", frozen, eq)]
#[derive(Clone, PartialEq)]
pub(crate) struct PyLayout {
    inner: deinsum::plan::Distribution,
}

#[pymethods]
impl PyLayout {
    /// Ranks along each grid dimension, outermost first.
    #[getter]
    fn grid(&self) -> Vec<usize> {
        self.inner.grid.dims.iter().map(|d| d.size).collect()
    }

    /// Per axis of the array, the grid dimensions (positions in `grid`) that split it.
    #[getter]
    fn split(&self) -> Vec<Vec<usize>> {
        self.inner.split.clone()
    }

    /// Number of ranks the layout's grid spans.
    #[getter]
    fn procs(&self) -> usize {
        self.inner.grid.size()
    }

    fn __repr__(&self) -> String {
        let axes: Vec<char> = ('a'..='z')
            .chain('A'..='Z')
            .take(self.inner.split.len())
            .collect();
        format!("<deinsum.Layout {}>", self.inner.display(&axes))
    }
}

/// A tensor of a `deinsum.Session`, distributed over its ranks (`.layout`; `None` until its
/// first use when it was made from data readable anywhere).
#[pyclass(name = "DistArray", module = "deinsum", frozen)]
pub(crate) struct PyDistArray {
    inner: deinsum::DistArray,
}

/// NumPy's dtype object for `d`.
fn np_dtype<'py>(py: Python<'py>, d: DType) -> PyResult<Bound<'py, PyAny>> {
    py.import("numpy")?.call_method1("dtype", (d.numpy_name(),))
}

#[pymethods]
impl PyDistArray {
    /// The shape, as a tuple.
    #[getter]
    fn shape<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, self.inner.shape())
    }

    /// The element type, as a NumPy dtype.
    #[getter]
    fn dtype<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        np_dtype(py, self.inner.dtype())
    }

    /// Number of axes.
    #[getter]
    fn ndim(&self) -> usize {
        self.inner.shape().len()
    }

    /// The layout it is distributed in, or `None` while it is whole (not used yet).
    #[getter]
    fn layout(&self) -> Option<PyLayout> {
        self.inner.layout().map(|inner| PyLayout { inner })
    }

    /// The whole array in this process, as a NumPy array (a copy). Raises MemoryError when it
    /// exceeds the memory this node has available, ValueError after the session closed.
    /// On MPI every rank calls it; with `root` (a rank) only that rank gets the array, the
    /// others `None` (a gather instead of an all-gather).
    #[pyo3(signature = (root=None))]
    fn numpy<'py>(&self, py: Python<'py>, root: Option<usize>) -> PyResult<Bound<'py, PyAny>> {
        let a = &self.inner;
        let shape = a.shape().to_vec();
        deinsum::with_dtype!(a.dtype(), T => {
            let v = match root {
                None => Some(py.allow_threads(|| a.gather::<T>()).map_err(session_to_py)?),
                Some(r) => py.allow_threads(|| a.gather_root::<T>(r)).map_err(session_to_py)?,
            };
            match v {
                Some(v) => Ok(v.into_pyarray(py).reshape(IxDyn(&shape))?.into_any()),
                None => Ok(py.None().into_bound(py)),
            }
        })
    }

    /// Writes the whole array to a `.npy` file (on MPI: every rank calls it, rank 0 writes the
    /// one file). Refused (FileExistsError) over a file a live array of the session was
    /// loaded from.
    fn save(&self, py: Python<'_>, path: PathBuf) -> PyResult<()> {
        let a = &self.inner;
        py.allow_threads(|| a.save_npy(&path))
            .map_err(session_to_py)
    }

    fn __repr__(&self) -> String {
        format!(
            "<deinsum.DistArray {} shape={:?} dtype={}>",
            self.inner.name(),
            self.inner.shape(),
            self.inner.dtype().numpy_name()
        )
    }
}

/// P ranks (in process, or an mpi4py communicator's) holding plans, buffers and arrays
/// between einsums.
#[pyclass(name = "Session", module = "deinsum", frozen)]
pub(crate) struct PySession {
    inner: deinsum::Session,
    /// The mpi4py communicator of an MPI session, kept alive while the session is.
    _comm: Option<PyObject>,
}

/// A session on the ranks of `comm`: an mpi4py intra-communicator, or `"world"` for
/// `mpi4py.MPI.COMM_WORLD`. Collective over it.
#[cfg(feature = "mpi")]
fn mpi_session(comm: &Bound<'_, PyAny>) -> PyResult<(deinsum::Session, PyObject)> {
    let py = comm.py();
    let obj = if comm.extract::<String>().is_ok_and(|s| s == "world") {
        py.import("mpi4py.MPI")?.getattr("COMM_WORLD")?
    } else {
        comm.clone()
    };
    let handle = crate::mpi_run::fortran_handle(&obj)?;
    let make: deinsum::session::MakeComm = std::sync::Arc::new(move || {
        crate::mpi_run::duplicate_comm(handle).map_err(deinsum::exec::CommError::Backend)
    });
    let s = py
        .allow_threads(|| deinsum::Session::mpi(make))
        .map_err(session_to_py)?;
    Ok((s, obj.unbind()))
}

/// Without the `mpi` feature there are no MPI sessions.
#[cfg(not(feature = "mpi"))]
fn mpi_session(_comm: &Bound<'_, PyAny>) -> PyResult<(deinsum::Session, PyObject)> {
    Err(PyNotImplementedError::new_err(
        "Session(comm=...) needs deinsum built with MPI, and this extension was built without \
         it: reinstall with MATURIN_PEP517_ARGS=\"--features mpi\" pip install ./python (needs \
         an MPI installation, e.g. libopenmpi-dev, and libclang-dev)",
    ))
}

impl PySession {
    /// A NumPy array (or anything `numpy.asarray` takes) as a session array, in the element
    /// type `deinsum.einsum` would compute it in.
    fn array_of(&self, a: &Bound<'_, PyAny>) -> PyResult<deinsum::DistArray> {
        let py = a.py();
        let (arrays, _) = py
            .import("deinsum")?
            .getattr("_as_operands")?
            .call1((PyList::new(py, [a])?, py.None()))?
            .extract::<(Vec<Bound<'_, PyAny>>, Bound<'_, PyAny>)>()?;
        let arr = &arrays[0];
        let s = &self.inner;
        macro_rules! take {
            ($($t:ty),*) => {$(
                if let Ok(x) = arr.extract::<PyReadonlyArrayDyn<'_, $t>>() {
                    let shape = x.shape().to_vec();
                    let data = match x.as_slice() {
                        Ok(v) => v.to_vec(),
                        Err(_) => x.as_array().iter().copied().collect::<Vec<$t>>(),
                    };
                    return py.allow_threads(|| s.array(&shape, data)).map_err(session_to_py);
                }
            )*};
        }
        take!(f64, f32, Complex64, Complex32);
        Err(PyTypeError::new_err(
            "deinsum computes in float32, float64, complex64 or complex128",
        ))
    }
}

#[pymethods]
impl PySession {
    /// A session on `procs` in-process ranks (default 1), or with `comm` (an mpi4py
    /// intra-communicator, or `"world"`) on its ranks, every rank of it making the same calls
    /// (`procs`, if given, must be its size); each rank computes with `threads` threads
    /// (default 1). The communicator must not be freed while the session is used.
    #[new]
    #[pyo3(signature = (procs=None, comm=None, threads=None))]
    fn new(
        procs: Option<usize>,
        comm: Option<&Bound<'_, PyAny>>,
        threads: Option<usize>,
    ) -> PyResult<Self> {
        if procs == Some(0) {
            return Err(PyValueError::new_err("procs must be at least 1"));
        }
        let (inner, comm) = match comm.filter(|c| !c.is_none()) {
            Some(c) => {
                let (s, obj) = mpi_session(c)?;
                if let Some(p) = procs.filter(|&p| p != s.procs()) {
                    return Err(PyValueError::new_err(format!(
                        "procs={p} but the communicator has {} ranks",
                        s.procs()
                    )));
                }
                (s, Some(obj))
            }
            None => (
                deinsum::Session::local(procs.unwrap_or(1)).map_err(session_to_py)?,
                None,
            ),
        };
        match threads {
            Some(0) => return Err(PyValueError::new_err("threads must be at least 1")),
            Some(t) => inner.set_threads(t),
            None => {}
        }
        Ok(PySession { inner, _comm: comm })
    }

    /// Number of ranks.
    #[getter]
    fn procs(&self) -> usize {
        self.inner.procs()
    }

    /// This process's rank (its MPI rank; 0 in process).
    #[getter]
    fn rank(&self) -> usize {
        self.inner.rank()
    }

    /// Whether the session was closed.
    #[getter]
    fn closed(&self) -> bool {
        !self.inner.is_open()
    }

    /// An array of the session from a NumPy array (copied): placed at its first use in the
    /// layout that use computes in.
    fn array(&self, a: &Bound<'_, PyAny>) -> PyResult<PyDistArray> {
        Ok(PyDistArray {
            inner: self.array_of(a)?,
        })
    }

    /// An array read from a `.npy` file: each rank reads only its block, at the array's first
    /// use. The file must not change while the array lives.
    fn load(&self, py: Python<'_>, path: PathBuf) -> PyResult<PyDistArray> {
        let s = &self.inner;
        let inner = py
            .allow_threads(|| s.load_npy(&path))
            .map_err(session_to_py)?;
        Ok(PyDistArray { inner })
    }

    /// `expr` over `operands` (DistArrays of this session, or NumPy arrays, which become
    /// arrays of it); the result stays distributed where the plan leaves it, or in
    /// `out_layout`: a `Layout`, a `DistArray` (its layout) or `"canonical"`.
    #[pyo3(signature = (expr, *operands, out_layout=None))]
    fn einsum(
        &self,
        py: Python<'_>,
        expr: &str,
        operands: &Bound<'_, PyTuple>,
        out_layout: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<PyDistArray> {
        let mut arrays = Vec::with_capacity(operands.len());
        for op in operands.iter() {
            match op.downcast::<PyDistArray>() {
                Ok(d) => arrays.push(d.get().inner.clone()),
                Err(_) => arrays.push(self.array_of(&op)?),
            }
        }
        let out = match out_layout {
            None => OutLayout::Plan,
            Some(o) if o.is_none() => OutLayout::Plan,
            Some(o) => {
                if let Ok(l) = o.downcast::<PyLayout>() {
                    OutLayout::Like(l.get().inner.clone())
                } else if let Ok(a) = o.downcast::<PyDistArray>() {
                    match a.get().inner.layout() {
                        Some(d) => OutLayout::Like(d),
                        None => OutLayout::Canonical,
                    }
                } else if o.extract::<String>().is_ok_and(|s| s == "canonical") {
                    OutLayout::Canonical
                } else {
                    return Err(PyValueError::new_err(
                        "out_layout must be None, 'canonical', a deinsum.Layout or a \
                         deinsum.DistArray",
                    ));
                }
            }
        };
        let s = &self.inner;
        let refs: Vec<&deinsum::DistArray> = arrays.iter().collect();
        let inner = py
            .allow_threads(|| s.einsum_with(expr, &refs, &out))
            .map_err(session_to_py)?;
        Ok(PyDistArray { inner })
    }

    /// One dict per einsum call, in call order: `expr`, `words_moved` (all ranks' received
    /// words), `operand_words` (per operand, words moved to bring it to its compute layout),
    /// `cached` (the plan came from the session's cache), `predicted_seconds`,
    /// `bound_per_rank` (the SOAP lower bound on the words a rank touches) and
    /// `touched_per_rank` (the words the plan's busiest rank touches).
    fn stats<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
        let out = PyList::empty(py);
        for s in self.inner.stats() {
            let d = PyDict::new(py);
            d.set_item("expr", s.expr)?;
            d.set_item("words_moved", s.words_moved)?;
            d.set_item("operand_words", s.operand_words)?;
            d.set_item("cached", s.cached)?;
            d.set_item("predicted_seconds", s.predicted_seconds)?;
            d.set_item("bound_per_rank", s.bound_per_rank)?;
            d.set_item("touched_per_rank", s.touched_per_rank)?;
            out.append(d)?;
        }
        Ok(out)
    }

    /// Closes the session: its plans and buffers are dropped; its arrays raise ValueError on
    /// use from then on.
    fn close(&self) {
        self.inner.close();
    }

    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, _args: &Bound<'_, PyTuple>) -> bool {
        self.inner.close();
        false
    }

    fn __repr__(&self) -> String {
        format!(
            "<deinsum.Session on {} ranks{}{}>",
            self.inner.procs(),
            if self.inner.is_mpi() { " (MPI)" } else { "" },
            if self.inner.is_open() { "" } else { ", closed" }
        )
    }
}

/// Registers the session classes on the native module.
pub(crate) fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PySession>()?;
    m.add_class::<PyDistArray>()?;
    m.add_class::<PyLayout>()?;
    Ok(())
}
