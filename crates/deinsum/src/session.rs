//! Sessions: tensors that stay distributed between einsums.
//!
//! A [`Session`] holds P in-process ranks, the plans it compiled (cached per expression,
//! shapes, element type and operand layouts) and its arrays. A [`DistArray`] made from data
//! readable anywhere (a whole array, a `.npy` file) has no layout until its first use, which
//! reads it in the layout that use computes in; from then on it stays there, and later
//! einsums are planned from that layout ([`deinsum_plan::Source::Given`]). An einsum's result
//! stays where its plan leaves it.
//!
//! Layers, bottom up: `types` (errors, stats, out layouts), `state` (the shared state and plan
//! cache), `array` (arrays and their data), `run` (one einsum), this module (the API).

mod array;
mod run;
mod state;
mod types;

pub use array::DistArray;
pub use types::{EinsumStats, OutLayout, SessionError};

use crate::{DType, Options};
use array::{FileGuard, Held};
use state::Inner;
use std::path::Path;
use std::sync::Arc;

/// A communicator's ranks with plans, buffers and arrays that outlive one einsum.
#[derive(Clone)]
pub struct Session {
    inner: Arc<Inner>,
}

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
            inner: Arc::new(Inner::new(options)),
        })
    }

    /// Number of ranks.
    pub fn procs(&self) -> usize {
        self.inner.procs
    }

    /// Threads each rank computes with (default 1).
    pub fn threads(&self) -> usize {
        self.inner.threads()
    }

    /// Sets the threads each rank computes with in later einsums (at least 1).
    pub fn set_threads(&self, threads: usize) {
        self.inner.set_threads(threads);
    }

    /// Closes the session: its plans and buffers are dropped, and its arrays refuse use.
    pub fn close(&self) {
        self.inner.close();
    }

    /// Whether the session is open.
    pub fn is_open(&self) -> bool {
        self.inner.is_open()
    }

    /// One record per einsum call, in call order.
    pub fn stats(&self) -> Vec<EinsumStats> {
        self.inner.stats()
    }

    /// An array of `shape` from its whole data (row-major), readable anywhere: its first use
    /// reads it in the layout that use computes in.
    pub fn array<T: crate::Scalar>(
        &self,
        shape: &[usize],
        data: Vec<T>,
    ) -> Result<DistArray, SessionError> {
        self.inner.check_open("Session::array")?;
        let n = shape.iter().try_fold(1usize, |a, &x| a.checked_mul(x));
        if n != Some(data.len()) {
            return Err(SessionError::Data(format!(
                "shape {shape:?} holds {} elements, the data has {}",
                n.map_or("too many".into(), |n| n.to_string()),
                data.len()
            )));
        }
        Ok(array::new_array(
            &self.inner,
            shape.to_vec(),
            T::DTYPE,
            Held::whole(data),
            None,
        ))
    }

    /// An array read from a `.npy` file (its element type, or f64 for integers), readable
    /// anywhere: each rank reads only its block, at the array's first use. The file must not
    /// change while the array lives ([`DistArray::save_npy`] refuses to overwrite it).
    pub fn load_npy(&self, path: &Path) -> Result<DistArray, SessionError> {
        self.inner.check_open("Session::load_npy")?;
        let header = deinsum_exec::npy::read_header(path)?;
        let dtype = DType::ALL
            .into_iter()
            .find(|d| d.npy_descr() == header.descr.replace('|', "<"))
            .unwrap_or_default();
        let path = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
        *deinsum_runtime::lock(&self.inner.sources)
            .entry(path.clone())
            .or_insert(0) += 1;
        let guard = FileGuard {
            session: Arc::downgrade(&self.inner),
            path: path.clone(),
        };
        Ok(array::new_array(
            &self.inner,
            header.shape,
            dtype,
            Held::File(path),
            Some(guard),
        ))
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
        self.inner.check_open("Session::einsum")?;
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
        crate::with_dtype!(dtype, T => run::einsum::<T>(&self.inner, expr, operands, out))
    }
}
