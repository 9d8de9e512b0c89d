//! Where a session's ranks are ([`Ranks`]) and what they hold ([`Placed`] blocks): P threads
//! of this process, or one rank per process of an MPI communicator. The session's logic is written once against it: an einsum's
//! per-rank work is a [`RankJob`], generic over the communicator; the few steps that need every
//! rank's blocks (a gather, a save) go through [`Ranks::assemble`], a no-op in process and a
//! collective under MPI.

use super::types::SessionError;
#[cfg(feature = "mpi")]
use crate::ExecError;
use crate::{Communicator, Einsum, Scalar};
use deinsum_exec::data::unpack_box;
use deinsum_exec::kernels::LocalTensor;
use deinsum_plan::Distribution;

/// What every rank does in one einsum, written once for any communicator.
pub(crate) trait RankJob: Sync {
    /// What a rank returns.
    type Out: Send;

    /// Rank `comm.rank()`'s part; returns it with the words the rank received.
    fn run<C: Communicator>(&self, comm: &C) -> Result<(Self::Out, u64), crate::ExecError>;
}

/// Makes a fresh private duplicate of an MPI communicator, for one collective call of an MPI
/// session ([`Session::mpi`](crate::Session::mpi)).
#[cfg(feature = "mpi")]
pub type MakeComm = std::sync::Arc<
    dyn Fn() -> Result<deinsum_exec::mpi::MpiComm, deinsum_exec::CommError> + Send + Sync,
>;

/// An array's blocks: rank `r` holds `blocks[r]` (row-major over its axes), the block
/// `layout.block(r, shape)`; `None` outside the layout's grid, and for the ranks of other
/// processes (under MPI this process holds its own rank's block only).
pub(crate) struct Placed<T> {
    pub(crate) layout: Distribution,
    pub(crate) blocks: Vec<Option<Vec<T>>>,
}

/// This process's ranks' outputs of a [`RankJob`] in rank order, and all ranks' words.
pub(crate) type RankOuts<O> = (Vec<(usize, O)>, u64);

/// A session's ranks.
pub(crate) enum Ranks {
    /// P ranks as threads of this process: every rank's blocks are here.
    Local(usize),
    /// One rank per process of an MPI communicator: this process holds rank `rank`'s blocks.
    #[cfg(feature = "mpi")]
    Mpi {
        /// The communicator's size.
        size: usize,
        /// This process's rank.
        rank: usize,
        /// Makes a private duplicate of the communicator; each collective call of the session
        /// takes its own, so that no MPI handle is held between calls (the session is then
        /// `Send + Sync`, and nothing is freed after MPI is finalized).
        make: MakeComm,
    },
}

impl Ranks {
    /// Number of ranks.
    pub(crate) fn procs(&self) -> usize {
        match self {
            Ranks::Local(p) => *p,
            #[cfg(feature = "mpi")]
            Ranks::Mpi { size, .. } => *size,
        }
    }

    /// This process's rank (0 in process, where it holds every rank).
    pub(crate) fn rank(&self) -> usize {
        match self {
            Ranks::Local(_) => 0,
            #[cfg(feature = "mpi")]
            Ranks::Mpi { rank, .. } => *rank,
        }
    }

    /// Whether the session runs on MPI.
    pub(crate) fn is_mpi(&self) -> bool {
        !matches!(self, Ranks::Local(_))
    }

    /// The ranks whose blocks this process holds.
    pub(crate) fn here(&self) -> std::ops::Range<usize> {
        match self {
            Ranks::Local(p) => 0..*p,
            #[cfg(feature = "mpi")]
            Ranks::Mpi { rank, .. } => *rank..*rank + 1,
        }
    }

    /// Runs `job` on every rank of `compiled`'s plan (after the memory preflight, agreed by
    /// all ranks under MPI) and returns this process's ranks' outputs in rank order, with the
    /// words all ranks received.
    pub(crate) fn run<T: Scalar, J: RankJob>(
        &self,
        compiled: &Einsum,
        job: &J,
    ) -> Result<RankOuts<J::Out>, SessionError> {
        match self {
            Ranks::Local(_) => {
                let outs = compiled.on_local_ranks::<T, _>(|comm| job.run(comm))?;
                let words = outs.iter().map(|o| o.1).sum();
                Ok((
                    outs.into_iter()
                        .enumerate()
                        .map(|(r, o)| (r, o.0))
                        .collect(),
                    words,
                ))
            }
            #[cfg(feature = "mpi")]
            Ranks::Mpi { size, rank, make } => {
                let comm = make().map_err(comm_err)?;
                let on_node = deinsum_exec::preflight::mpi_ranks_on_node()
                    .unwrap_or(1)
                    .clamp(1, *size);
                agree(&comm, compiled.check_fits::<T>(on_node).map_err(Into::into))?;
                let (out, words) = job.run(&comm).map_err(|e| SessionError::Einsum(e.into()))?;
                // Exact up to 2^53 words.
                let mut total = [words as f64];
                comm.all_reduce_sum(&mut total).map_err(comm_err)?;
                Ok((vec![(*rank, out)], total[0] as u64))
            }
        }
    }

    /// Every rank's `mine` agreed: an error on every rank when one rank's is (its own error
    /// there, one naming the refusing rank on the others). In process there is one verdict.
    pub(crate) fn agree(&self, mine: Result<(), SessionError>) -> Result<(), SessionError> {
        match self {
            Ranks::Local(_) => mine,
            #[cfg(feature = "mpi")]
            Ranks::Mpi { make, .. } => agree(&make().map_err(comm_err)?, mine),
        }
    }

    /// The whole array of `shape` from its blocks `p`: on every process (`root` `None`) or on
    /// `root` only (`None` elsewhere). Collective under MPI: each rank sends the blocks that
    /// hold its elements once (coordinate 0 along every grid dim that does not split them).
    pub(crate) fn assemble<T: Scalar>(
        &self,
        shape: &[usize],
        p: &Placed<T>,
        root: Option<usize>,
    ) -> Result<Option<Vec<T>>, SessionError> {
        match self {
            // This process is every rank, the root included.
            Ranks::Local(procs) => {
                debug_assert!(root.is_none_or(|r| r < *procs));
                assemble(shape, p).map(Some)
            }
            #[cfg(feature = "mpi")]
            Ranks::Mpi { size, rank, make } => {
                let comm = make().map_err(comm_err)?;
                let counts: Vec<usize> = (0..*size)
                    .map(|r| primary_len(&p.layout, shape, r))
                    .collect();
                let empty = Vec::new();
                let mine = match p.blocks.get(*rank).and_then(Option::as_ref) {
                    Some(b) if counts[*rank] > 0 => b,
                    _ => &empty,
                };
                if mine.len() != counts[*rank] {
                    return Err(SessionError::Data(format!(
                        "rank {rank} holds {} elements of a block of {}",
                        mine.len(),
                        counts[*rank]
                    )));
                }
                let all = match root {
                    None => Some(comm.all_gather_v(mine, &counts).map_err(comm_err)?),
                    Some(root) => comm.gather_v(mine, &counts, root).map_err(comm_err)?,
                };
                let Some(all) = all else { return Ok(None) };
                let mut off = 0;
                let blocks = counts
                    .iter()
                    .map(|&c| {
                        let b = (c > 0).then(|| all[off..off + c].to_vec());
                        off += c;
                        b
                    })
                    .collect();
                let full = Placed {
                    layout: p.layout.clone(),
                    blocks,
                };
                assemble(shape, &full).map(Some)
            }
        }
    }
}

/// Elements of rank `r`'s block of `layout` when that block is the one copy of its elements
/// the whole is assembled from (else 0).
#[cfg(feature = "mpi")]
fn primary_len(layout: &Distribution, shape: &[usize], r: usize) -> usize {
    if !is_primary(layout, r) {
        return 0;
    }
    layout
        .block(r, shape)
        .map_or(0, |b| b.ranges.iter().map(|&(s, e)| e - s).product())
}

/// Whether rank `r` holds the copy of its block's elements that the whole is assembled from:
/// coordinate 0 along every grid dim that does not split the array.
pub(crate) fn is_primary(layout: &Distribution, r: usize) -> bool {
    let splitting: Vec<usize> = layout.split.iter().flatten().copied().collect();
    layout.grid.coords(r).is_some_and(|c| {
        c.iter()
            .enumerate()
            .all(|(g, &x)| x == 0 || splitting.contains(&g))
    })
}

/// `mine` agreed over `comm` (one all-reduce): the refusing rank with the largest number is
/// named on the others.
#[cfg(feature = "mpi")]
pub(crate) fn agree<C: Communicator>(
    comm: &C,
    mine: Result<(), SessionError>,
) -> Result<(), SessionError> {
    let mut v = [if mine.is_err() {
        comm.rank() as u64 + 1
    } else {
        0
    }];
    comm.all_reduce_max_u64(&mut v).map_err(comm_err)?;
    mine?;
    match v[0] {
        0 => Ok(()),
        r => Err(SessionError::Peer {
            rank: r as usize - 1,
        }),
    }
}

/// A communication failure as a session error.
#[cfg(feature = "mpi")]
pub(crate) fn comm_err(e: deinsum_exec::CommError) -> SessionError {
    SessionError::Einsum(crate::Error::Exec(ExecError::Comm(e)))
}

/// Index names for `n` axes.
pub(crate) fn axes(n: usize) -> Vec<char> {
    ('a'..='z').chain('A'..='Z').take(n).collect()
}

/// The whole array from its blocks, all of which are in this process: each element from the
/// one rank with coordinate 0 along every grid dim that does not split it.
pub(crate) fn assemble<T: Scalar>(shape: &[usize], p: &Placed<T>) -> Result<Vec<T>, SessionError> {
    let oom = |e: deinsum_exec::buffers::OutOfMemory| {
        SessionError::Data(format!("out of memory: {} bytes", e.bytes))
    };
    let mut full =
        LocalTensor::<T>::zeros(axes(shape.len()), shape.iter().map(|&n| (0, n)).collect())
            .map_err(oom)?;
    for (r, block) in p.blocks.iter().enumerate() {
        let Some(data) = block else {
            continue;
        };
        if let (true, Some(b)) = (is_primary(&p.layout, r), p.layout.block(r, shape)) {
            unpack_box(&mut full, &b, data, false).map_err(oom)?;
        }
    }
    Ok(full.data.into_vec())
}
