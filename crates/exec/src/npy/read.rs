//! Reading one rank's block of an operand from a `.npy` file, by seeking to its runs.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

use deinsum_expr::{Dim, Index, Operand};
use deinsum_plan::Block;

use super::dtype::ElemType;
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
/// `operand`: a dtype convertible to `T`, the operand's storage shape, and a file long enough. Ranks
/// that hold no block of an operand call this so that a bad file is reported on every rank.
pub fn check_operand_file<T: Scalar>(
    path: &Path,
    operand: &Operand,
    extents: &BTreeMap<Index, usize>,
) -> Result<NpyHeader, NpyError> {
    let mut f = File::open(path).map_err(io_err(path))?;
    check_open(path, &mut f, operand, extents, T::DTYPE).map(|(h, _, _)| h)
}

/// Header, dtype, shape and length checks of an open file read as `dtype`; returns the
/// header, the operand's storage shape and the file's element type.
pub(super) fn check_open(
    path: &Path,
    f: &mut File,
    operand: &Operand,
    extents: &BTreeMap<Index, usize>,
    dtype: deinsum_plan::DType,
) -> Result<(NpyHeader, Vec<usize>, ElemType), NpyError> {
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
    let elem = check_header(path, &h, &expected)?;
    if !elem.converts_to(dtype) {
        // As NumPy's safe casting: a real run would drop the imaginary parts.
        return Err(NpyError::Dtype {
            path: path.to_path_buf(),
            expected: format!("a real dtype for a {dtype} run (use a complex --dtype)"),
            found: h.descr.clone(),
        });
    }
    let total = h
        .len()
        .ok_or_else(|| invalid(path, "element count overflows u64"))?;
    let need = total
        .checked_mul(elem.bytes as u64)
        .and_then(|b| b.checked_add(h.data_offset))
        .ok_or_else(|| invalid(path, "file size overflows u64"))?;
    let have = f.metadata().map_err(io_err(path))?.len();
    if have < need {
        return Err(format_err(
            path,
            format!("file is truncated: {have} bytes, the header promises {need}"),
        ));
    }
    Ok((h, expected, elem))
}

/// Reads the block `block` (ranges over `operand.indices`, global coordinates) of input operand
/// `operand` from the `.npy` file at `path`, row-major over `operand.indices`.
///
/// The file must hold the operand's storage shape (`operand.shape(extents)`; broadcast
/// dimensions have extent 1), in C or Fortran order, of `T` or a numeric dtype converted to
/// `T` as NumPy's `astype` does. Only the block's bytes are read, by seeking (a Fortran-ordered
/// block is read along its contiguous runs, then transposed in memory).
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
    let (h, expected, elem) = check_open(path, &mut f, operand, extents, T::DTYPE)?;

    // Storage strides: row-major, or column-major for a Fortran-ordered file.
    let sstride = if h.fortran_order {
        let rev: Vec<usize> = expected.iter().rev().copied().collect();
        let mut s = strides(&rev).ok_or_else(|| invalid(path, "shape overflows u64"))?;
        s.reverse();
        s
    } else {
        strides(&expected).ok_or_else(|| invalid(path, "shape overflows u64"))?
    };
    // Storage stride of each distinct index: a diagonal index advances all its storage dims.
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
    if !h.fortran_order {
        let mut out: Vec<T> = crate::buffers::try_vec(n)?;
        read_runs(path, &mut f, &h, elem, &stride, block, &mut out)?;
        debug_assert_eq!(out.len(), n);
        return Ok(out);
    }
    // Fortran order: walk the block with its dimensions reversed, so the runs are contiguous
    // in the file, then transpose into the block's row-major order.
    let rev_stride: Vec<u64> = stride.iter().rev().copied().collect();
    let rev_block = Block {
        ranges: block.ranges.iter().rev().copied().collect(),
    };
    let mut col: Vec<T> = crate::buffers::try_vec(n)?;
    read_runs(path, &mut f, &h, elem, &rev_stride, &rev_block, &mut col)?;
    debug_assert_eq!(col.len(), n);
    let ext: Vec<usize> = block.ranges.iter().map(|&(s, e)| e - s).collect();
    Ok(transpose_col_to_row(&col, &ext))
}

/// Reads the runs of `block` (strides `stride` in the file) into `out`, converting elements.
fn read_runs<T: Scalar>(
    path: &Path,
    f: &mut File,
    h: &NpyHeader,
    elem: ElemType,
    stride: &[u64],
    block: &Block,
    out: &mut Vec<T>,
) -> Result<(), NpyError> {
    let mut buf: Vec<u8> = Vec::new();
    let data = h.data_offset;
    let size = elem.bytes;
    // Whole elements per chunk, so a chunk never splits one.
    let chunk = (CHUNK_BYTES / size) * size;
    for_each_run(stride, block, |off, len| -> Result<(), NpyError> {
        let mut left = len as usize * size;
        f.seek(SeekFrom::Start(data + off * size as u64))
            .map_err(io_err(path))?;
        while left > 0 {
            let take = left.min(chunk);
            buf.resize(take, 0);
            f.read_exact(&mut buf).map_err(io_err(path))?;
            elem.convert(&buf, out);
            left -= take;
        }
        Ok(())
    })
}

/// Reorders `col`, a block of extents `ext` stored column-major (first index fastest), into
/// row-major order.
pub(super) fn transpose_col_to_row<T: Copy>(col: &[T], ext: &[usize]) -> Vec<T> {
    let nd = ext.len();
    if nd < 2 || col.is_empty() {
        return col.to_vec();
    }
    // Column-major stride of each dimension.
    let mut cstride = vec![1usize; nd];
    for q in 1..nd {
        cstride[q] = cstride[q - 1] * ext[q - 1];
    }
    let mut out = Vec::with_capacity(col.len());
    let mut x = vec![0usize; nd];
    let mut pos = 0usize;
    loop {
        out.push(col[pos]);
        // Odometer in row-major order, last index fastest.
        let mut q = nd;
        loop {
            if q == 0 {
                return out;
            }
            q -= 1;
            x[q] += 1;
            pos += cstride[q];
            if x[q] < ext[q] {
                break;
            }
            pos -= cstride[q] * ext[q];
            x[q] = 0;
        }
    }
}
