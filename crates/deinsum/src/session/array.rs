//! [`DistArray`]: a session's tensor, whole (readable anywhere) until its first use, then
//! held as per-rank blocks in a layout.

pub(crate) use super::ranks::{axes, Placed};
use super::state::Inner;
use super::types::SessionError;
use crate::{DType, Scalar};
use deinsum_plan::{Block, Distribution};
use std::any::Any;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};

/// Where an array's data is: type-erased (`Arc<Vec<T>>` or `Arc<Placed<T>>` for the array's
/// [`DType`]'s `T`, reached through [`crate::with_dtype!`]), so no element type is assumed.
#[derive(Clone)]
pub(crate) enum Held {
    /// The whole array, row-major (readable in any layout).
    Whole(Arc<dyn Any + Send + Sync>),
    /// A `.npy` file each rank reads its block of.
    File(PathBuf),
    /// Per-rank blocks in a layout.
    Placed(Arc<dyn Any + Send + Sync>),
}

impl Held {
    pub(crate) fn whole<T: Scalar>(data: Vec<T>) -> Held {
        Held::Whole(Arc::new(data))
    }

    pub(crate) fn placed<T: Scalar>(p: Placed<T>) -> Held {
        Held::Placed(Arc::new(p))
    }
}

/// Counts an array loaded from a file as alive until its last clone is dropped.
pub(crate) struct FileGuard {
    pub(crate) session: Weak<Inner>,
    pub(crate) path: PathBuf,
}

impl Drop for FileGuard {
    fn drop(&mut self) {
        if let Some(s) = self.session.upgrade() {
            if let Some(n) = deinsum_runtime::lock(&s.sources).get_mut(&self.path) {
                *n = n.saturating_sub(1);
            }
        }
    }
}

struct ArrayInner {
    name: String,
    session: Weak<Inner>,
    session_id: u64,
    shape: Vec<usize>,
    dtype: DType,
    held: Mutex<Held>,
    _guard: Option<FileGuard>,
}

/// A tensor of a [`Session`](crate::Session): whole until its first use, then distributed over the
/// session's ranks in the layout that use chose; an einsum's result stays where its plan left
/// it. Clones share the data.
#[derive(Clone)]
pub struct DistArray {
    inner: Arc<ArrayInner>,
}

impl std::fmt::Debug for DistArray {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DistArray")
            .field("name", &self.inner.name)
            .field("shape", &self.inner.shape)
            .field("dtype", &self.inner.dtype)
            .finish()
    }
}

impl DistArray {
    pub(crate) fn new(
        session: &Arc<Inner>,
        name: String,
        shape: Vec<usize>,
        dtype: DType,
        held: Held,
        guard: Option<FileGuard>,
    ) -> DistArray {
        DistArray {
            inner: Arc::new(ArrayInner {
                name,
                session: Arc::downgrade(session),
                session_id: session.id,
                shape,
                dtype,
                held: Mutex::new(held),
                _guard: guard,
            }),
        }
    }

    /// Its name in errors (`array 3`).
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// Its shape.
    pub fn shape(&self) -> &[usize] {
        &self.inner.shape
    }

    /// Its element type.
    pub fn dtype(&self) -> DType {
        self.inner.dtype
    }

    /// Its layout over its own axes, `None` while it is whole (not used yet).
    pub fn layout(&self) -> Option<Distribution> {
        match self.held() {
            Held::Placed(p) => {
                crate::with_dtype!(self.dtype(), T => p.downcast_ref::<Placed<T>>().map(|p| p.layout.clone()))
            }
            _ => None,
        }
    }

    pub(crate) fn session_id(&self) -> u64 {
        self.inner.session_id
    }

    pub(crate) fn same(&self, other: &DistArray) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    pub(crate) fn held(&self) -> Held {
        deinsum_runtime::lock(&self.inner.held).clone()
    }

    pub(crate) fn set_held(&self, h: Held) {
        *deinsum_runtime::lock(&self.inner.held) = h;
    }

    /// Its session, if still open.
    pub(crate) fn live_session(&self, what: &str) -> Result<Arc<Inner>, SessionError> {
        match self.inner.session.upgrade() {
            Some(s) if s.is_open() => Ok(s),
            _ => Err(SessionError::Closed {
                what: format!("{} ({what})", self.inner.name),
            }),
        }
    }

    /// The whole array, row-major, in this process. Refused when the session is closed, when
    /// `T` is not its element type, or when the whole array exceeds the memory this node has
    /// available (`MemAvailable`), with its size. Under MPI every rank calls it and every rank
    /// gets the whole (an all-gather of the blocks); a refusal on one rank is raised on all.
    pub fn gather<T: Scalar>(&self) -> Result<Vec<T>, SessionError> {
        let s = self.live_session("gather")?;
        let whole = self.gather_on::<T>(&s, None)?;
        whole.ok_or_else(|| SessionError::Data(format!("{}: no data gathered", self.name())))
    }

    /// [`DistArray::gather`] onto rank `root` only: `Some(whole)` there, `None` on the other
    /// ranks of an MPI session (a gather, not an all-gather). In process, where this process
    /// is every rank, always `Some`. Under MPI every rank calls it.
    pub fn gather_root<T: Scalar>(&self, root: usize) -> Result<Option<Vec<T>>, SessionError> {
        let s = self.live_session("gather_root")?;
        if root >= s.ranks.procs() {
            return Err(SessionError::Data(format!(
                "gather root {root} of a session on {} ranks",
                s.ranks.procs()
            )));
        }
        self.gather_on::<T>(&s, Some(root))
    }

    /// The whole array on every rank (`root` `None`) or on `root`, after the checks of
    /// [`DistArray::gather`].
    fn gather_on<T: Scalar>(
        &self,
        s: &Inner,
        root: Option<usize>,
    ) -> Result<Option<Vec<T>>, SessionError> {
        if T::DTYPE != self.dtype() {
            return Err(SessionError::Data(format!(
                "{} is {}, asked for {}",
                self.name(),
                self.dtype(),
                T::DTYPE
            )));
        }
        let receives = !s.ranks.is_mpi() || root.is_none_or(|r| r == s.ranks.rank());
        let elems: u128 = self.shape().iter().map(|&n| n as u128).product();
        let bytes = elems * self.dtype().bytes() as u128;
        let mut fits = Ok(());
        if let (true, Some(available)) = (receives, deinsum_exec::preflight::available_memory()) {
            if bytes > u128::from(available) {
                fits = Err(SessionError::TooLarge {
                    name: self.name().into(),
                    bytes,
                    available,
                });
            }
        }
        // Another node may refuse what this one has room for.
        s.ranks.agree(fits)?;
        whole::<T>(s, self.shape(), &self.held(), root)
    }

    /// Writes the whole array to a `.npy` file (C order, its element type). Refused over a
    /// file that a live array of the session was loaded from. Under MPI every rank calls it:
    /// the blocks are gathered onto rank 0, which writes the one file; a failed write is
    /// raised on every rank.
    pub fn save_npy(&self, path: &Path) -> Result<(), SessionError> {
        let s = self.live_session("save_npy")?;
        let canon = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
        if s.loaded_from(&canon) {
            return Err(SessionError::SaveOverSource {
                path: path.to_path_buf(),
                name: "an array".into(),
            });
        }
        crate::with_dtype!(self.dtype(), T => {
            let written = match self.gather_on::<T>(&s, Some(0))? {
                Some(data) => {
                    let mut bytes = deinsum_exec::npy::header_bytes::<T>(self.shape());
                    T::extend_bytes(&data, &mut bytes);
                    std::fs::write(path, bytes).map_err(|source| {
                        SessionError::Npy(deinsum_exec::npy::NpyError::Io {
                            path: path.to_path_buf(),
                            source,
                        })
                    })
                }
                None => Ok(()),
            };
            s.ranks.agree(written)?;
        });
        Ok(())
    }
}

/// A new array of session `inner`, named by the session's array counter.
pub(super) fn new_array(
    inner: &Arc<Inner>,
    shape: Vec<usize>,
    dtype: DType,
    held: Held,
    guard: Option<FileGuard>,
) -> DistArray {
    let n = inner
        .next_array
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    DistArray::new(inner, format!("array {n}"), shape, dtype, held, guard)
}

/// The einsum `ab...->ab...` over one operand of `shape`: the operand and extents the `.npy`
/// reader takes.
pub(crate) fn identity(shape: &[usize]) -> Result<deinsum_expr::ParsedEinsum, SessionError> {
    let idx: String = axes(shape.len()).into_iter().collect();
    let spec = deinsum_expr::ExtentSpec {
        shapes: Some(vec![shape.to_vec()]),
        ..Default::default()
    };
    deinsum_expr::parse(&format!("{idx}->{idx}"), &spec).map_err(|e| SessionError::Einsum(e.into()))
}

/// The whole array from what holds it: on every process (`root` `None`) or on `root` only
/// (`None` on the other ranks of an MPI session). Collective under MPI for a placed array.
pub(crate) fn whole<T: Scalar>(
    s: &Inner,
    shape: &[usize],
    held: &Held,
    root: Option<usize>,
) -> Result<Option<Vec<T>>, SessionError> {
    let bad = || SessionError::Data("array data of another element type".into());
    let here = !s.ranks.is_mpi() || root.is_none_or(|r| r == s.ranks.rank());
    match held {
        Held::Whole(v) if here => Ok(Some(v.downcast_ref::<Vec<T>>().ok_or_else(bad)?.clone())),
        Held::File(path) if here => {
            let e = identity(shape)?;
            Ok(Some(deinsum_exec::npy::read_operand_block::<T>(
                path,
                &e.inputs()[0],
                e.extents(),
                &Block::full(shape),
            )?))
        }
        Held::Whole(_) | Held::File(_) => Ok(None),
        Held::Placed(p) => {
            let p = p.downcast_ref::<Placed<T>>().ok_or_else(bad)?;
            s.ranks.assemble(shape, p, root)
        }
    }
}
