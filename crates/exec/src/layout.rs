//! Row-major layout: strides, strided gathers and the cache-blocked transpose that puts a
//! block's indices into order (the copies below the kernels, timed by [`crate::tune`]).

use crate::buffers::OutOfMemory;
use crate::threads::{threads, PAR_MIN_WORDS};

/// Row-major strides of `shape`.
pub(crate) fn strides_of(shape: &[usize]) -> Vec<usize> {
    let mut st = vec![1usize; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        st[d] = st[d + 1] * shape[d + 1];
    }
    st
}

/// Copies the strided view (`shape`, `strides`, offset `base`) of `src` into a row-major vector;
/// the innermost axis is a tight loop (a slice copy when its stride is 1).
pub(crate) fn gather_strided<T: Copy>(
    src: &[T],
    shape: &[usize],
    strides: &[usize],
    base: usize,
) -> Result<Vec<T>, OutOfMemory> {
    let total: usize = shape.iter().product();
    let mut out = crate::buffers::try_vec(total)?;
    if total == 0 {
        return Ok(out);
    }
    let nd = shape.len();
    if nd == 0 {
        out.push(src[base]);
        return Ok(out);
    }
    let (inner, is) = (shape[nd - 1], strides[nd - 1]);
    let mut idx = vec![0usize; nd - 1];
    let mut off = base;
    loop {
        if is == 1 {
            out.extend_from_slice(&src[off..off + inner]);
        } else {
            out.extend((0..inner).map(|t| src[off + t * is]));
        }
        let mut d = nd - 1;
        loop {
            if d == 0 {
                return Ok(out);
            }
            d -= 1;
            idx[d] += 1;
            off += strides[d];
            if idx[d] < shape[d] {
                break;
            }
            off -= strides[d] * shape[d];
            idx[d] = 0;
        }
    }
}

/// Side of the square tiles a transpose copies at a time (two tiles of f64 fit in L1).
const TILE: usize = 32;

/// The whole strided view (`shape`, `strides`) of `src` in row-major order. When the view's
/// innermost axis is strided but another axis is contiguous in `src`, the copy goes by square
/// tiles of those two axes (a cache-blocked transpose) instead of one strided read per element.
pub(crate) fn permuted<T: bytemuck::Zeroable + Copy + Default + Send + Sync + 'static>(
    src: &[T],
    shape: &[usize],
    strides: &[usize],
) -> Result<Vec<T>, OutOfMemory> {
    let nd = shape.len();
    let q = (nd >= 2 && strides[nd - 1] != 1)
        .then(|| (0..nd - 1).rev().find(|&d| strides[d] == 1 && shape[d] > 1))
        .flatten();
    let total: usize = shape.iter().product();
    let Some(q) = q.filter(|_| total > 0) else {
        return gather_strided(src, shape, strides, 0);
    };
    let mut out = crate::buffers::take_overwritten::<T>(total)?;
    // Large copies split over the rank's threads by ranges of the outermost output axis: each
    // range is a contiguous run of the output and the same tiled copy of a sub-view.
    let tasks = threads().min(total / PAR_MIN_WORDS).min(shape[0]);
    if tasks > 1 {
        use rayon::prelude::*;
        let per = shape[0].div_ceil(tasks * 2);
        let row = total / shape[0];
        out.par_chunks_mut(per * row)
            .enumerate()
            .for_each(|(t, chunk)| {
                let mut sub = shape.to_vec();
                sub[0] = chunk.len() / row;
                permute_tiles(&src[t * per * strides[0]..], &sub, strides, q, chunk);
            });
    } else {
        permute_tiles(src, shape, strides, q, &mut out);
    }
    Ok(out)
}

/// The body of [`permuted`]: the view (`shape`, `strides`) of `src` into `out` row-major, by
/// square tiles of axis `q` (contiguous in `src`) and the innermost axis.
fn permute_tiles<T: Copy>(src: &[T], shape: &[usize], strides: &[usize], q: usize, out: &mut [T]) {
    let nd = shape.len();
    let ost = strides_of(shape);
    let (nq, nl, sl, oq) = (shape[q], shape[nd - 1], strides[nd - 1], ost[q]);
    // Every combination of the other axes is one 2-D transpose.
    let rest: Vec<usize> = (0..nd - 1).filter(|&d| d != q).collect();
    let count: usize = rest.iter().map(|&d| shape[d]).product();
    for r in 0..count {
        let (mut rem, mut so, mut oo) = (r, 0, 0);
        for &d in rest.iter().rev() {
            let x = rem % shape[d];
            rem /= shape[d];
            so += x * strides[d];
            oo += x * ost[d];
        }
        for q0 in (0..nq).step_by(TILE) {
            let q1 = (q0 + TILE).min(nq);
            for l0 in (0..nl).step_by(TILE) {
                let l1 = (l0 + TILE).min(nl);
                transpose_tile(src, out, (so, sl), (oo, oq), (q0, q1), (l0, l1));
            }
        }
    }
}

/// Side of the blocks [`transpose_tile`] moves through registers.
const MICRO: usize = 8;

/// One tile of [`permuted`]: `out[oo + q oq + l] = src[so + l sl + q]` for `q` in `qs`, `l` in
/// `ls`, by 8 x 8 blocks held in arrays (one bounds check per row of a block, so the compiler
/// keeps the block in registers), then element by element at the ragged edges.
fn transpose_tile<T: Copy>(
    src: &[T],
    out: &mut [T],
    (so, sl): (usize, usize),
    (oo, oq): (usize, usize),
    (q0, q1): (usize, usize),
    (l0, l1): (usize, usize),
) {
    let (qf, lf) = (
        q0 + (q1 - q0) / MICRO * MICRO,
        l0 + (l1 - l0) / MICRO * MICRO,
    );
    for xl in (l0..lf).step_by(MICRO) {
        for xq in (q0..qf).step_by(MICRO) {
            let rows: [[T; MICRO]; MICRO] = std::array::from_fn(|i| {
                let at = so + (xl + i) * sl + xq;
                std::array::from_fn(|j| src[at..at + MICRO][j])
            });
            let cols: [[T; MICRO]; MICRO] = std::array::from_fn(|j| rows.map(|r| r[j]));
            for (j, col) in cols.iter().enumerate() {
                let at = oo + (xq + j) * oq + xl;
                out[at..at + MICRO].copy_from_slice(col);
            }
        }
    }
    // The ragged edges: columns past the last full block, then rows past it.
    let edge =
        |xl: usize, xq: usize, out: &mut [T]| out[oo + xq * oq + xl] = src[so + xl * sl + xq];
    for xl in l0..lf {
        for xq in qf..q1 {
            edge(xl, xq, out);
        }
    }
    for xl in lf..l1 {
        for xq in q0..q1 {
            edge(xl, xq, out);
        }
    }
}

/// The transpose of the row-major `rows x cols` matrix `src`, by the same cache-blocked copy
/// that puts a step's operands into order (what [`crate::tune`] times).
pub(crate) fn transpose_2d<T: bytemuck::Zeroable + Copy + Default + Send + Sync + 'static>(
    src: &[T],
    rows: usize,
    cols: usize,
) -> Result<Vec<T>, OutOfMemory> {
    permuted(src, &[cols, rows], &[1, cols])
}
