//! Sessions: tensors that stay distributed between einsums.
//!
//! A [`Session`] holds P ranks (threads of this process, or with the `mpi` feature the
//! processes of an MPI communicator, [`Session::mpi_world`]), the plans it compiled (cached per expression,
//! shapes, element type and operand layouts) and its arrays. A [`DistArray`] made from data
//! readable anywhere (a whole array, a `.npy` file) has no layout until its first use, which
//! reads it in the layout that use computes in; from then on it stays there, and later
//! einsums are planned from that layout ([`deinsum_plan::Source::Given`]). An einsum's result
//! stays where its plan leaves it.
//!
//! Under MPI every rank runs the same program: each call is collective (every rank makes it,
//! in the same order), an array made from whole data gets the same data on every rank, each
//! process holds only its own rank's blocks, and a gather or save is a collective. The session
//! logic is the same for both: only `ranks`'s few collective steps tell them apart.
//!
//! Layers, bottom up: `types` (errors, stats, out layouts), `ranks` (where the ranks are, and
//! what needs all of them), `state` (the shared state and plan cache), `array` (arrays and
//! their data), `run` (one einsum), this module (the API).

mod array;
mod ranks;
mod run;
mod state;
mod types;

pub use array::DistArray;
#[cfg(feature = "mpi")]
pub use ranks::MakeComm;
pub use types::{EinsumStats, OutLayout, SessionError};

use crate::{DType, Options};
use array::{FileGuard, Held};
use ranks::Ranks;
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
        let ranks = Ranks::Local(options.procs);
        Ok(Session {
            inner: Arc::new(Inner::new(options, ranks)),
        })
    }

    /// A session on the MPI world (MPI initialized by the caller, e.g. `mpi::initialize()`,
    /// and not finalized while the session is used), planning for this host's cores when all
    /// ranks share this node. Every rank of the world must make the same calls in the same
    /// order; each takes a private duplicate of the world for its messages.
    #[cfg(feature = "mpi")]
    pub fn mpi_world() -> Result<Session, SessionError> {
        Self::mpi(Arc::new(|| {
            Ok(deinsum_exec::mpi::MpiComm::duplicate_of(
                &mpi::topology::SimpleCommunicator::world(),
            ))
        }))
    }

    /// A session on the ranks of the communicator `make` duplicates: each collective call of
    /// the session (an einsum, a gather, a save) calls `make` on every rank for a private
    /// communicator of its own, freed at the end of the call, so no MPI handle is held
    /// between calls. `make` must give the same communicator's duplicate every time.
    #[cfg(feature = "mpi")]
    pub fn mpi(make: MakeComm) -> Result<Session, SessionError> {
        use crate::Communicator as _;
        if !mpi::environment::is_initialized() || mpi::environment::is_finalized() {
            return Err(SessionError::Data(
                "an MPI session needs MPI initialized (and not finalized)".into(),
            ));
        }
        let comm = make().map_err(ranks::comm_err)?;
        let (size, rank) = (comm.size(), comm.rank());
        drop(comm);
        // Planned as `deinsum run` plans under mpirun: this host's cores when the launcher put
        // every rank on this node, else the built-in machine.
        let on_node = deinsum_exec::preflight::mpi_ranks_on_node().unwrap_or(1);
        let options = if on_node >= size {
            Options::procs_on_this_host(size)
        } else {
            Options::procs(size)
        };
        let ranks = Ranks::Mpi { size, rank, make };
        Ok(Session {
            inner: Arc::new(Inner::new(options, ranks)),
        })
    }

    /// Number of ranks.
    pub fn procs(&self) -> usize {
        self.inner.ranks.procs()
    }

    /// This process's rank: its MPI rank, 0 in process (where it is every rank).
    pub fn rank(&self) -> usize {
        self.inner.ranks.rank()
    }

    /// Whether the ranks are MPI processes.
    pub fn is_mpi(&self) -> bool {
        self.inner.ranks.is_mpi()
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
    /// reads it in the layout that use computes in. Under MPI every rank passes the same data
    /// and keeps only its own block after that use.
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
