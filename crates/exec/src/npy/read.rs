//! Reading one rank's block of an operand from a `.npy` file, by seeking to its runs.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

use deinsum_expr::{Dim, Index, Operand};
use deinsum_plan::Block;

use super::header::{check_header, read_header_from};
use super::{format_err, invalid, io_err, NpyError, NpyHeader};
use crate::scalar::Scalar;

/// Upper bound on the bytes converted at once, so a read never holds a block twice in memory.
pub(super) const CHUNK_BYTES: usize = 1 << 22;

/// Row-major element strides of `shape`, `None` on overflow.
pub(super) fn strides(shape: &[usize]) -> Option<Vec<u64>> {
    let mut s = vec![0u64; shape.len()];
    let mut acc = 1u64;
    for k in (0..shape.len()).rev() {
        s[k] = acc;
        acc = acc.checked_mul(shape[k] as u64)?;
    }
    Some(s)
}

/// Calls `f(offset, len)` (in elements) for the storage runs of `block`, in the block's row-major
/// order, where `stride[q]` is the storage stride of the block's dimension `q`. Adjacent runs
/// are merged, so a block spanning whole rows is one run.
pub(super) fn for_each_run<E>(
    stride: &[u64],
    block: &Block,
    mut f: impl FnMut(u64, u64) -> Result<(), E>,
) -> Result<(), E> {
    if block.is_empty() {
        return Ok(());
    }
    let nd = block.ranges.len();
    // The innermost dimension is one run when it is contiguous in storage.
    let (outer, run_len) = match block.ranges.last() {
        Some(&(s, e)) if stride[nd - 1] == 1 => (nd - 1, (e - s) as u64),
        _ => (nd, 1),
    };
    let mut x: Vec<usize> = block.ranges.iter().map(|&(s, _)| s).collect();
    let mut pending: Option<(u64, u64)> = None;
    loop {
        let off: u64 = x.iter().zip(stride).map(|(&c, &s)| c as u64 * s).sum();
        pending = match pending {
            Some((o, l)) if o + l == off => Some((o, l + run_len)),
            Some((o, l)) => {
                f(o, l)?;
                Some((off, run_len))
            }
            None => Some((off, run_len)),
        };
        // Odometer over the outer dimensions, last fastest.
        let mut k = outer;
        loop {
            if k == 0 {
                if let Some((o, l)) = pending {
                    f(o, l)?;
                }
                return Ok(());
            }
            k -= 1;
            x[k] += 1;
            if x[k] < block.ranges[k].1 {
                break;
            }
            x[k] = block.ranges[k].0;
        }
    }
}

/// Checks, without reading any data, that the `.npy` file at `path` can hold input operand
/// `operand`: dtype `T`, C order, the operand's storage shape, and a file long enough. Ranks
/// that hold no block of an operand call this so that a bad file is reported on every rank.
pub fn check_operand_file<T: Scalar>(
    path: &Path,
    operand: &Operand,
    extents: &BTreeMap<Index, usize>,
) -> Result<NpyHeader, NpyError> {
    let mut f = File::open(path).map_err(io_err(path))?;
    check_open::<T>(path, &mut f, operand, extents).map(|(h, _)| h)
}

/// Header, dtype, shape and length checks of an open file; returns the header and the
/// operand's storage shape.
pub(super) fn check_open<T: Scalar>(
    path: &Path,
    f: &mut File,
    operand: &Operand,
    extents: &BTreeMap<Index, usize>,
) -> Result<(NpyHeader, Vec<usize>), NpyError> {
    let mut expected = Vec::with_capacity(operand.dims.len());
    for d in &operand.dims {
        expected.push(match d {
            Dim::Index(c) => *extents
                .get(c)
                .ok_or_else(|| invalid(path, format!("no extent for index '{c}'")))?,
            Dim::Broadcast => 1,
        });
    }
    let h = read_header_from(path, f)?;
    check_header::<T>(path, &h, &expected)?;
    let total = h
        .len()
        .ok_or_else(|| invalid(path, "element count overflows u64"))?;
    let need = total
        .checked_mul(T::BYTES as u64)
        .and_then(|b| b.checked_add(h.data_offset))
        .ok_or_else(|| invalid(path, "file size overflows u64"))?;
    let have = f.metadata().map_err(io_err(path))?.len();
    if have < need {
        return Err(format_err(
            path,
            format!("file is truncated: {have} bytes, the header promises {need}"),
        ));
    }
    Ok((h, expected))
}

/// Reads the block `block` (ranges over `operand.indices`, global coordinates) of input operand
/// `operand` from the `.npy` file at `path`, row-major over `operand.indices`.
///
/// The file must hold the operand's storage shape (`operand.shape(extents)`; broadcast
/// dimensions have extent 1) in dtype `T`, C order. Only the block's bytes are read, by seeking.
/// Diagonal storage dimensions (an index repeated in `operand.dims`) are read at equal
/// coordinates, broadcast dimensions at coordinate 0.
pub fn read_operand_block<T: Scalar>(
    path: &Path,
    operand: &Operand,
    extents: &BTreeMap<Index, usize>,
    block: &Block,
) -> Result<Vec<T>, NpyError> {
    if block.ranges.len() != operand.indices.len() {
        return Err(invalid(
            path,
            format!(
                "block has {} ranges but the operand has {} distinct indices",
                block.ranges.len(),
                operand.indices.len()
            ),
        ));
    }
    for (&(s, e), c) in block.ranges.iter().zip(&operand.indices) {
        let n = extents.get(c).copied().unwrap_or(0);
        if s > e || e > n {
            return Err(invalid(
                path,
                format!("block range {s}..{e} of index '{c}' is outside 0..{n}"),
            ));
        }
    }
    let mut f = File::open(path).map_err(io_err(path))?;
    let (h, expected) = check_open::<T>(path, &mut f, operand, extents)?;

    // Storage stride of each distinct index: a diagonal index advances all its storage dims.
    let sstride = strides(&expected).ok_or_else(|| invalid(path, "shape overflows u64"))?;
    let stride: Vec<u64> = operand
        .indices
        .iter()
        .map(|c| {
            operand
                .dims
                .iter()
                .zip(&sstride)
                .filter(|(d, _)| **d == Dim::Index(*c))
                .map(|(_, &s)| s)
                .sum()
        })
        .collect();

    let n = usize::try_from(block.len()).map_err(|_| invalid(path, "block too large"))?;
    let mut out: Vec<T> = Vec::with_capacity(n);
    let mut buf: Vec<u8> = Vec::new();
    let data = h.data_offset;
    for_each_run(&stride, block, |off, len| -> Result<(), NpyError> {
        let mut left = len as usize * T::BYTES;
        f.seek(SeekFrom::Start(data + off * T::BYTES as u64))
            .map_err(io_err(path))?;
        while left > 0 {
            let take = left.min(CHUNK_BYTES);
            buf.resize(take, 0);
            f.read_exact(&mut buf).map_err(io_err(path))?;
            T::from_bytes(&buf, &mut out);
            left -= take;
        }
        Ok(())
    })?;
    debug_assert_eq!(out.len(), n);
    Ok(out)
}
