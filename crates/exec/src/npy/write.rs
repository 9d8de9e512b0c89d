//! Writing a distributed tensor to one `.npy` file: rank 0 writes the header, every block is
//! written by one replica holder at its offsets.

use std::fs::{File, OpenOptions};
use std::io::{Seek, SeekFrom, Write};
use std::path::Path;

use deinsum_plan::Distribution;

use super::header::header_bytes;
use super::read::{for_each_run, strides, CHUNK_BYTES};
use super::{fmt_shape, invalid, io_err, NpyError};
use crate::comm::{CommError, Communicator};
use crate::scalar::Scalar;

/// True when `rank` is the one replica holder of its block that writes it: coordinate 0 along
/// every grid dimension that does not split the tensor.
pub(super) fn is_writer(dist: &Distribution, rank: usize) -> bool {
    let Some(coords) = dist.grid.coords(rank) else {
        return false;
    };
    (0..dist.grid.dims.len())
        .filter(|g| !dist.split.iter().any(|s| s.contains(g)))
        .all(|g| coords[g] == 0)
}

/// Writes a distributed tensor of `shape`, laid out in `dist`, to the `.npy` file at `path`
/// (dtype `T`, C order). Collective: every rank of `comm` calls it with its own block `local`
/// (row-major, the block `dist.block(rank, shape)`; empty for ranks outside the grid).
///
/// Rank 0 creates the file, writes the header and sizes it; after an agreement (which doubles as
/// a barrier) each block is written at its offsets by exactly one replica holder; a final
/// agreement makes the file complete on return. An error on any rank is returned on every rank.
pub fn write_distributed<T: Scalar, C: Communicator>(
    path: &Path,
    comm: &C,
    shape: &[usize],
    dist: &Distribution,
    local: &[T],
) -> Result<(), NpyError> {
    let rank = comm.rank();
    let comm_err = |source| NpyError::Comm {
        path: path.to_path_buf(),
        source,
    };
    // Arguments are the same on every rank, so these checks fail everywhere or nowhere.
    if dist.split.len() != shape.len() {
        return Err(invalid(
            path,
            format!(
                "distribution has {} index splits but the tensor has {} dimensions",
                dist.split.len(),
                shape.len()
            ),
        ));
    }
    if dist.is_partial() {
        return Err(invalid(
            path,
            "cannot write a tensor that holds partial sums",
        ));
    }
    if dist.grid.size() > comm.size() {
        return Err(invalid(
            path,
            format!(
                "distribution needs {} ranks but the communicator has {}",
                dist.grid.size(),
                comm.size()
            ),
        ));
    }
    let stride = strides(shape).ok_or_else(|| invalid(path, "shape overflows u64"))?;
    let total = shape
        .iter()
        .try_fold(1u64, |a, &n| a.checked_mul(n as u64))
        .and_then(|n| n.checked_mul(T::BYTES as u64))
        .ok_or_else(|| invalid(path, "tensor size overflows u64"))?;
    let header = header_bytes::<T>(shape);

    // Phase 1: rank 0 writes the header and sizes the file.
    let mut mine: Result<(), NpyError> = Ok(());
    if rank == 0 {
        mine = (|| {
            let mut f = File::create(path).map_err(io_err(path))?;
            f.write_all(&header).map_err(io_err(path))?;
            f.set_len(header.len() as u64 + total)
                .map_err(io_err(path))?;
            Ok(())
        })();
    }
    agree(path, comm, &mine).map_err(|e| match e {
        Agreement::Comm(c) => comm_err(c),
        Agreement::Peer(r) => NpyError::PeerFailed {
            path: path.to_path_buf(),
            rank: r,
        },
    })?;
    mine?;

    // Phase 2: one replica holder per block writes it.
    let block = dist.block(rank, shape);
    let mut mine: Result<(), NpyError> = Ok(());
    if let Some(block) = block.filter(|_| is_writer(dist, rank)) {
        mine = (|| {
            if block.len() != local.len() as u64 {
                return Err(invalid(
                    path,
                    format!(
                        "rank {rank} holds {} elements but its block {} has {}",
                        local.len(),
                        fmt_shape(&block.shape()),
                        block.len()
                    ),
                ));
            }
            let mut f = OpenOptions::new()
                .write(true)
                .open(path)
                .map_err(io_err(path))?;
            let data = header.len() as u64;
            let mut next = 0usize;
            let mut buf: Vec<u8> = Vec::new();
            for_each_run(&stride, &block, |off, len| -> Result<(), NpyError> {
                f.seek(SeekFrom::Start(data + off * T::BYTES as u64))
                    .map_err(io_err(path))?;
                let run = &local[next..next + len as usize];
                next += len as usize;
                for chunk in run.chunks(CHUNK_BYTES / T::BYTES) {
                    buf.clear();
                    T::extend_bytes(chunk, &mut buf);
                    f.write_all(&buf).map_err(io_err(path))?;
                }
                Ok(())
            })?;
            f.flush().map_err(io_err(path))?;
            Ok(())
        })();
    }
    agree(path, comm, &mine).map_err(|e| match e {
        Agreement::Comm(c) => comm_err(c),
        Agreement::Peer(r) => NpyError::PeerFailed {
            path: path.to_path_buf(),
            rank: r,
        },
    })?;
    mine
}

pub(super) enum Agreement {
    Comm(CommError),
    Peer(usize),
}

/// All ranks learn whether some rank failed (an all-reduce of max(rank+1)), so no rank waits on
/// one that gave up. A rank that failed itself reports its own error, not the peer's.
pub(super) fn agree<C: Communicator>(
    _path: &Path,
    comm: &C,
    mine: &Result<(), NpyError>,
) -> Result<(), Agreement> {
    let mut flag = [if mine.is_err() {
        comm.rank() as u64 + 1
    } else {
        0
    }];
    comm.all_reduce_max_u64(&mut flag)
        .map_err(Agreement::Comm)?;
    if flag[0] > 0 && mine.is_ok() {
        return Err(Agreement::Peer(flag[0] as usize - 1));
    }
    Ok(())
}
