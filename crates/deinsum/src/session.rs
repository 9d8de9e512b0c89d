//! Sessions: tensors that stay distributed between einsums.
//!
//! A [`Session`] holds P in-process ranks, the plans it compiled (cached per expression,
//! shapes, element type and operand layouts) and its arrays. A [`DistArray`] made from data
//! readable anywhere (a whole array, a `.npy` file) has no layout until its first use, which
//! reads it in the layout that use computes in; from then on it stays there, and later
//! einsums are planned from that layout ([`deinsum_plan::Source::Given`]). An einsum's result
//! stays where its plan leaves it.

mod array;
mod run;

pub use array::DistArray;
use array::Held;

use crate::{DType, Einsum, Options};
use deinsum_plan::Distribution;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// What a session refuses, or what failed under it.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// An operand was made by another session.
    #[error("operand {operand} ({name}) belongs to another session: arrays cannot be mixed across sessions")]
    ForeignArray {
        /// Its position among the operands.
        operand: usize,
        /// The array's name.
        name: String,
    },
    /// The session is closed (or an array outlived its session).
    #[error("{what}: its session is closed")]
    Closed {
        /// What was used.
        what: String,
    },
    /// An operand's shape does not fit the expression.
    #[error(
        "operand {operand} ({name}) has shape {shape:?}, which does not fit the expression: {why}"
    )]
    Shape {
        /// Its position among the operands.
        operand: usize,
        /// The array's name.
        name: String,
        /// Its shape.
        shape: Vec<usize>,
        /// What does not fit.
        why: String,
    },
    /// Operands of different element types.
    #[error("operand {operand} ({name}) is {found}, operand 0 is {expected}: one einsum computes in one element type")]
    DType {
        /// Its position among the operands.
        operand: usize,
        /// The array's name.
        name: String,
        /// Operand 0's type.
        expected: DType,
        /// Its type.
        found: DType,
    },
    /// Data of the wrong length or type handed to [`Session::array`] or asked of
    /// [`DistArray::gather`].
    #[error("{0}")]
    Data(String),
    /// Gathering would need more memory than the node has available.
    #[error("gathering {name} needs {bytes} bytes, more than the {available} bytes this node has available")]
    TooLarge {
        /// The array's name.
        name: String,
        /// Bytes the whole array takes.
        bytes: u128,
        /// Bytes available (`MemAvailable`).
        available: u64,
    },
    /// Saving over a file a live array was loaded from (its data is read from it lazily).
    #[error("{}: refusing to overwrite it: {name} was loaded from it and is still alive", .path.display())]
    SaveOverSource {
        /// The file.
        path: PathBuf,
        /// The live array.
        name: String,
    },
    /// A `.npy` file could not be read or written.
    #[error(transparent)]
    Npy(#[from] deinsum_exec::npy::NpyError),
    /// Compiling or running the einsum failed.
    #[error(transparent)]
    Einsum(#[from] crate::Error),
}

/// Where an einsum's result is left.
#[derive(Clone, Debug, Default)]
pub enum OutLayout {
    /// Where the plan computes it (no move).
    #[default]
    Plan,
    /// In the canonical distribution.
    Canonical,
    /// In this layout (another array's, [`DistArray::layout`]).
    Like(Distribution),
}

/// What one [`Session::einsum`] call did.
#[derive(Clone, Debug, PartialEq)]
pub struct EinsumStats {
    /// The expression as given.
    pub expr: String,
    /// Words received over all ranks and steps (measured).
    pub words_moved: u64,
    /// Per operand, the words moved (over all ranks) to bring it to its compute layout
    /// (the plan's, which the run's measured words equal).
    pub operand_words: Vec<u64>,
    /// Whether the plan came from the session's cache.
    pub cached: bool,
    /// The plan's predicted seconds.
    pub predicted_seconds: f64,
}

/// A communicator's ranks with plans, buffers and arrays that outlive one einsum.
#[derive(Clone)]
pub struct Session {
    inner: Arc<Inner>,
}

pub(crate) struct Inner {
    id: u64,
    procs: usize,
    options: Options,
    open: AtomicBool,
    next_array: AtomicU64,
    plans: Mutex<HashMap<String, Arc<Einsum>>>,
    stats: Mutex<Vec<EinsumStats>>,
    /// Files live arrays were loaded from, with how many such arrays are alive.
    sources: Mutex<HashMap<PathBuf, usize>>,
}

/// Numbers sessions, so that an array names the one it belongs to.
static SESSIONS: AtomicU64 = AtomicU64::new(1);

impl Session {
    /// A session on `procs` in-process ranks, planning for this host (as `deinsum run`).
    pub fn local(procs: usize) -> Result<Session, SessionError> {
        Self::with_options(Options::procs_on_this_host(procs))
    }

    /// A session on `options.procs` in-process ranks, planning with `options` (their
    /// `sources` are set per call from the operands).
    pub fn with_options(options: Options) -> Result<Session, SessionError> {
        deinsum_exec::preflight::check_in_process_ranks(options.procs)
            .map_err(crate::Error::from)?;
        Ok(Session {
            inner: Arc::new(Inner {
                id: SESSIONS.fetch_add(1, Ordering::Relaxed),
                procs: options.procs,
                options,
                open: AtomicBool::new(true),
                next_array: AtomicU64::new(0),
                plans: Mutex::new(HashMap::new()),
                stats: Mutex::new(Vec::new()),
                sources: Mutex::new(HashMap::new()),
            }),
        })
    }

    /// Number of ranks.
    pub fn procs(&self) -> usize {
        self.inner.procs
    }

    /// Closes the session: its plans and buffers are dropped, and its arrays refuse use.
    pub fn close(&self) {
        self.inner.open.store(false, Ordering::Release);
        deinsum_runtime::lock(&self.inner.plans).clear();
    }

    /// Whether the session is open.
    pub fn is_open(&self) -> bool {
        self.inner.open.load(Ordering::Acquire)
    }

    /// One record per einsum call, in call order.
    pub fn stats(&self) -> Vec<EinsumStats> {
        deinsum_runtime::lock(&self.inner.stats).clone()
    }

    fn check_open(&self, what: &str) -> Result<(), SessionError> {
        if self.is_open() {
            Ok(())
        } else {
            Err(SessionError::Closed { what: what.into() })
        }
    }

    /// An array of `shape` from its whole data (row-major), readable anywhere: its first use
    /// reads it in the layout that use computes in.
    pub fn array<T: crate::Scalar>(
        &self,
        shape: &[usize],
        data: Vec<T>,
    ) -> Result<DistArray, SessionError> {
        self.check_open("Session::array")?;
        let n = shape.iter().try_fold(1usize, |a, &x| a.checked_mul(x));
        if n != Some(data.len()) {
            return Err(SessionError::Data(format!(
                "shape {shape:?} holds {} elements, the data has {}",
                n.map_or("too many".into(), |n| n.to_string()),
                data.len()
            )));
        }
        Ok(self.new_array(shape.to_vec(), T::DTYPE, Held::whole(data), None))
    }

    /// An array read from a `.npy` file (its element type, or f64 for integers), readable
    /// anywhere: each rank reads only its block, at the array's first use. The file must not
    /// change while the array lives ([`DistArray::save_npy`] refuses to overwrite it).
    pub fn load_npy(&self, path: &Path) -> Result<DistArray, SessionError> {
        self.check_open("Session::load_npy")?;
        let header = deinsum_exec::npy::read_header(path)?;
        let dtype = DType::ALL
            .into_iter()
            .find(|d| d.npy_descr() == header.descr.replace('|', "<"))
            .unwrap_or_default();
        let path = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
        *deinsum_runtime::lock(&self.inner.sources)
            .entry(path.clone())
            .or_insert(0) += 1;
        let guard = array::FileGuard {
            session: Arc::downgrade(&self.inner),
            path: path.clone(),
        };
        Ok(self.new_array(header.shape, dtype, Held::File(path), Some(guard)))
    }

    fn new_array(
        &self,
        shape: Vec<usize>,
        dtype: DType,
        held: Held,
        guard: Option<array::FileGuard>,
    ) -> DistArray {
        let n = self.inner.next_array.fetch_add(1, Ordering::Relaxed);
        DistArray::new(&self.inner, format!("array {n}"), shape, dtype, held, guard)
    }

    /// `expr` over `operands`; the result stays where the plan leaves it.
    pub fn einsum(&self, expr: &str, operands: &[&DistArray]) -> Result<DistArray, SessionError> {
        self.einsum_with(expr, operands, &OutLayout::Plan)
    }

    /// [`Session::einsum`] with the result left in `out`.
    pub fn einsum_with(
        &self,
        expr: &str,
        operands: &[&DistArray],
        out: &OutLayout,
    ) -> Result<DistArray, SessionError> {
        self.check_open("Session::einsum")?;
        for (k, a) in operands.iter().enumerate() {
            if a.session_id() != self.inner.id {
                return Err(SessionError::ForeignArray {
                    operand: k,
                    name: a.name().into(),
                });
            }
        }
        let dtype = operands.first().map_or(DType::F64, |a| a.dtype());
        if let Some((k, a)) = operands
            .iter()
            .enumerate()
            .find(|(_, a)| a.dtype() != dtype)
        {
            return Err(SessionError::DType {
                operand: k,
                name: a.name().into(),
                expected: dtype,
                found: a.dtype(),
            });
        }
        crate::with_dtype!(dtype, T => run::einsum::<T>(self, expr, operands, out))
    }

    /// The compiled plan for `key`, from the cache or built by `build`.
    fn plan(
        &self,
        key: String,
        build: impl FnOnce() -> Result<Einsum, crate::Error>,
    ) -> Result<(Arc<Einsum>, bool), SessionError> {
        if let Some(e) = deinsum_runtime::lock(&self.inner.plans).get(&key) {
            return Ok((e.clone(), true));
        }
        let e = Arc::new(build()?);
        deinsum_runtime::lock(&self.inner.plans).insert(key, e.clone());
        Ok((e, false))
    }

    fn record(&self, s: EinsumStats) {
        deinsum_runtime::lock(&self.inner.stats).push(s);
    }
}

impl Inner {
    fn is_open(&self) -> bool {
        self.open.load(Ordering::Acquire)
    }

    /// The name of a live array loaded from `path`, if any.
    fn loaded_from(&self, path: &Path) -> bool {
        deinsum_runtime::lock(&self.sources)
            .get(path)
            .is_some_and(|&n| n > 0)
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.open.store(false, Ordering::Release);
    }
}
