//! [`DistArray`]: a session's tensor, whole (readable anywhere) until its first use, then
//! held as per-rank blocks in a layout.

use super::state::Inner;
use super::types::SessionError;
use crate::{DType, Scalar};
use deinsum_exec::data::unpack_box;
use deinsum_exec::kernels::LocalTensor;
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

/// An array's blocks: rank `r` holds `blocks[r]` (row-major over its axes), the block
/// `layout.block(r, shape)`; `None` outside the layout's grid.
pub(crate) struct Placed<T> {
    pub(crate) layout: Distribution,
    pub(crate) blocks: Vec<Option<Vec<T>>>,
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
    /// available (`MemAvailable`), with its size.
    pub fn gather<T: Scalar>(&self) -> Result<Vec<T>, SessionError> {
        self.live_session("gather")?;
        if T::DTYPE != self.dtype() {
            return Err(SessionError::Data(format!(
                "{} is {}, asked for {}",
                self.name(),
                self.dtype(),
                T::DTYPE
            )));
        }
        let elems: u128 = self.shape().iter().map(|&n| n as u128).product();
        let bytes = elems * self.dtype().bytes() as u128;
        if let Some(available) = deinsum_exec::preflight::available_memory() {
            if bytes > u128::from(available) {
                return Err(SessionError::TooLarge {
                    name: self.name().into(),
                    bytes,
                    available,
                });
            }
        }
        whole::<T>(self.shape(), &self.held())
    }

    /// Writes the whole array to a `.npy` file (C order, its element type). Refused over a
    /// file that a live array of the session was loaded from.
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
            let data = self.gather::<T>()?;
            let mut bytes = deinsum_exec::npy::header_bytes::<T>(self.shape());
            T::extend_bytes(&data, &mut bytes);
            std::fs::write(path, bytes).map_err(|source| deinsum_exec::npy::NpyError::Io {
                path: path.to_path_buf(),
                source,
            })?;
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

/// Index names for `n` axes.
pub(crate) fn axes(n: usize) -> Vec<char> {
    ('a'..='z').chain('A'..='Z').take(n).collect()
}

/// The whole array from what holds it.
pub(crate) fn whole<T: Scalar>(shape: &[usize], held: &Held) -> Result<Vec<T>, SessionError> {
    let bad = || SessionError::Data("array data of another element type".into());
    match held {
        Held::Whole(v) => Ok(v.downcast_ref::<Vec<T>>().ok_or_else(bad)?.clone()),
        Held::File(path) => {
            let e = identity(shape)?;
            Ok(deinsum_exec::npy::read_operand_block::<T>(
                path,
                &e.inputs()[0],
                e.extents(),
                &Block::full(shape),
            )?)
        }
        Held::Placed(p) => {
            let p = p.downcast_ref::<Placed<T>>().ok_or_else(bad)?;
            assemble(shape, p)
        }
    }
}

/// The whole array from its blocks: each element from the one rank with coordinate 0 along
/// every grid dim that does not split it.
fn assemble<T: Scalar>(shape: &[usize], p: &Placed<T>) -> Result<Vec<T>, SessionError> {
    let oom = |e: deinsum_exec::buffers::OutOfMemory| {
        SessionError::Data(format!("out of memory: {} bytes", e.bytes))
    };
    let mut full =
        LocalTensor::<T>::zeros(axes(shape.len()), shape.iter().map(|&n| (0, n)).collect())
            .map_err(oom)?;
    let splitting: Vec<usize> = p.layout.split.iter().flatten().copied().collect();
    for (r, block) in p.blocks.iter().enumerate() {
        let (Some(data), Some(c)) = (block, p.layout.grid.coords(r)) else {
            continue;
        };
        let primary = c
            .iter()
            .enumerate()
            .all(|(g, &x)| x == 0 || splitting.contains(&g));
        if let (true, Some(b)) = (primary, p.layout.block(r, shape)) {
            unpack_box(&mut full, &b, data, false).map_err(oom)?;
        }
    }
    Ok(full.data.into_vec())
}
