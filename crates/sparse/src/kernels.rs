//! Local sparse kernels: CSR SpMV/SpMM, SDDMM, Gustavson SpGEMM and COO MTTKRP. Each splits
//! its rows over the threads of the calling rayon pool (one thread outside a pool) when the
//! work is large enough to pay for the split.

use crate::{Csr, SparseError, SparseTensor};
use deinsum_exec::Scalar;
use rayon::prelude::*;

/// Below this many multiply-adds per thread a kernel runs on one thread.
const MIN_WORK_PER_THREAD: usize = 1 << 15;

/// Rows per parallel chunk for `work` multiply-adds over `rows` rows.
fn chunk_rows(rows: usize, work: usize) -> usize {
    let t = rayon::current_num_threads().max(1);
    // Several parts per thread even out uneven rows; one thread gains nothing from them.
    let parts = if t == 1 {
        1
    } else {
        (work / MIN_WORK_PER_THREAD).clamp(1, 4 * t)
    };
    rows.div_ceil(parts).max(1)
}

/// A column index as the kernels read it: `usize`, or `u32` in a rank's localized rows (4
/// bytes a nonzero instead of 8: the index stream is a third of SpMV's traffic).
pub trait ColIndex: Copy + Send + Sync {
    /// The column as a `usize`.
    fn col(self) -> usize;
}

impl ColIndex for usize {
    #[inline(always)]
    fn col(self) -> usize {
        self
    }
}

impl ColIndex for u32 {
    #[inline(always)]
    fn col(self) -> usize {
        self as usize
    }
}

/// `C (m x k) = A (m x n, CSR) * B (n x k, row-major)`: SpMM, and SpMV for `k = 1`.
pub fn spmm<T: Scalar, I: ColIndex>(
    a: &Csr<T, I>,
    b: &[T],
    k: usize,
) -> Result<Vec<T>, SparseError> {
    let mut c = vec![T::default(); a.nrows * k];
    spmm_into(a, b, k, &mut c, false)?;
    Ok(c)
}

/// `C += A B` (`add`) or `C = A B` into `c` (`a.nrows x k`, row-major): [`spmm`] into a given
/// output, so a rank can add its halo columns' part to its own columns' part.
pub fn spmm_into<T: Scalar, I: ColIndex>(
    a: &Csr<T, I>,
    b: &[T],
    k: usize,
    c: &mut [T],
    add: bool,
) -> Result<(), SparseError> {
    deinsum_runtime::install(|| spmm_into_here(a, b, k, c, add))
}

/// [`spmm_into`] on the pool the calling thread is in.
fn spmm_into_here<T: Scalar, I: ColIndex>(
    a: &Csr<T, I>,
    b: &[T],
    k: usize,
    c: &mut [T],
    add: bool,
) -> Result<(), SparseError> {
    if b.len() != a.ncols * k || c.len() != a.nrows * k {
        return Err(SparseError::Shape(format!(
            "B has {} and C {} elements, expected {} x {k} and {} x {k}",
            b.len(),
            c.len(),
            a.ncols,
            a.nrows
        )));
    }
    if k == 0 || a.nrows == 0 {
        return Ok(());
    }
    let rows = chunk_rows(a.nrows, a.nnz() * k);
    if k == 1 {
        // SpMV: a dot product per row, no per-entry slice of B.
        c.par_chunks_mut(rows).enumerate().for_each(|(ch, out)| {
            for (ri, ci) in out.iter_mut().enumerate() {
                let i = ch * rows + ri;
                let (lo, hi) = (a.indptr[i], a.indptr[i + 1]);
                if add && lo == hi {
                    continue;
                }
                let d = row_dot(&a.indices[lo..hi], &a.vals[lo..hi], b);
                *ci = if add { *ci + d } else { d };
            }
        });
        return Ok(());
    }
    c.par_chunks_mut(rows * k)
        .enumerate()
        .for_each(|(ch, out)| {
            let r0 = ch * rows;
            for (ri, crow) in out.chunks_mut(k).enumerate() {
                let i = r0 + ri;
                let (lo, hi) = (a.indptr[i], a.indptr[i + 1]);
                if add && lo == hi {
                    continue;
                }
                let (idx, vals) = (&a.indices[lo..hi], &a.vals[lo..hi]);
                // Column blocks of 16, then 8, accumulate in registers across the row's
                // nonzeros (one pass over the row per block); the remainder (k mod 8) goes
                // through the output row.
                let mut c0 = 0;
                while c0 + 16 <= k {
                    row_block::<T, I, 16>(idx, vals, b, k, c0, &mut crow[c0..c0 + 16], add);
                    c0 += 16;
                }
                if c0 + 8 <= k {
                    row_block::<T, I, 8>(idx, vals, b, k, c0, &mut crow[c0..c0 + 8], add);
                    c0 += 8;
                }
                if c0 < k {
                    if !add {
                        crow[c0..].iter_mut().for_each(|x| *x = T::default());
                    }
                    for (&j, &v) in idx.iter().zip(vals) {
                        let j = j.col();
                        let brow = &b[j * k + c0..(j + 1) * k];
                        for (x, &y) in crow[c0..].iter_mut().zip(brow) {
                            *x += v * y;
                        }
                    }
                }
            }
        });
    Ok(())
}

/// Columns `c0..c0 + W` of one output row: `sum_p vals[p] * B[idx[p], c0..c0 + W]` in
/// registers, then stored into (or added to) `out`.
#[inline(always)]
fn row_block<T: Scalar, I: ColIndex, const W: usize>(
    idx: &[I],
    vals: &[T],
    b: &[T],
    k: usize,
    c0: usize,
    out: &mut [T],
    add: bool,
) {
    let mut acc = [T::default(); W];
    for (&j, &v) in idx.iter().zip(vals) {
        let at = j.col() * k + c0;
        let brow: &[T; W] = b[at..at + W].try_into().expect("a block of W");
        for (x, &y) in acc.iter_mut().zip(brow) {
            *x += v * y;
        }
    }
    if add {
        for (o, &x) in out.iter_mut().zip(&acc) {
            *o += x;
        }
    } else {
        out.copy_from_slice(&acc);
    }
}

/// `sum_p vals[p] * b[idx[p]]` with four partial sums, so consecutive multiply-adds do not
/// wait on each other (the gathers of `b` are the cost; the sums overlap them).
#[inline(always)]
fn row_dot<T: Scalar, I: ColIndex>(idx: &[I], vals: &[T], b: &[T]) -> T {
    let mut s = [T::default(); 4];
    let (ic, ir) = (idx.chunks_exact(4), idx.chunks_exact(4).remainder());
    let vc = vals.chunks_exact(4);
    let vr = vc.remainder();
    for (i4, v4) in ic.zip(vc) {
        for q in 0..4 {
            s[q] += v4[q] * b[i4[q].col()];
        }
    }
    for (&j, &v) in ir.iter().zip(vr) {
        s[0] += v * b[j.col()];
    }
    (s[0] + s[1]) + (s[2] + s[3])
}

/// SDDMM `C_ij = S_ij * sum_r U_ir V_jr` on the pattern of `s` (`ij,ir,jr->ij` with the
/// output sparse in `s`'s pattern): returns the values in `s`'s entry order.
pub fn sddmm<T: Scalar>(s: &Csr<T>, u: &[T], v: &[T], r: usize) -> Result<Vec<T>, SparseError> {
    deinsum_runtime::install(|| sddmm_here(s, u, v, r))
}

/// [`sddmm`] on the pool the calling thread is in.
fn sddmm_here<T: Scalar>(s: &Csr<T>, u: &[T], v: &[T], r: usize) -> Result<Vec<T>, SparseError> {
    if u.len() != s.nrows * r || v.len() != s.ncols * r {
        return Err(SparseError::Shape(format!(
            "U has {} and V {} elements, expected {} x {r} and {} x {r}",
            u.len(),
            v.len(),
            s.nrows,
            s.ncols
        )));
    }
    let mut out = s.vals.clone();
    // Entries are split by rows so that each thread writes a contiguous run of `out`.
    let rows = chunk_rows(s.nrows, s.nnz() * r);
    let starts: Vec<usize> = (0..s.nrows).step_by(rows).collect();
    let mut pieces: Vec<&mut [T]> = Vec::with_capacity(starts.len());
    let mut rest: &mut [T] = &mut out;
    for (n, &r0) in starts.iter().enumerate() {
        let r1 = starts.get(n + 1).copied().unwrap_or(s.nrows);
        let (head, tail) = rest.split_at_mut(s.indptr[r1] - s.indptr[r0]);
        pieces.push(head);
        rest = tail;
    }
    pieces.into_par_iter().zip(starts).for_each(|(piece, r0)| {
        let r1 = (r0 + rows).min(s.nrows);
        let base = s.indptr[r0];
        for i in r0..r1 {
            let urow = &u[i * r..(i + 1) * r];
            for p in s.indptr[i]..s.indptr[i + 1] {
                let vrow = &v[s.indices[p] * r..(s.indices[p] + 1) * r];
                piece[p - base] = piece[p - base] * dot(urow, vrow);
            }
        }
    });
    Ok(out)
}

/// Lanes of [`dot`]: independent sums, since one running sum waits on each add in turn.
const DOT_LANES: usize = 8;

/// `x · y` over equal-length rows, in [`DOT_LANES`] running sums added at the end.
fn dot<T: Scalar>(x: &[T], y: &[T]) -> T {
    let mut lanes = [T::default(); DOT_LANES];
    let (xs, ys) = (x.chunks_exact(DOT_LANES), y.chunks_exact(DOT_LANES));
    let tail = xs
        .remainder()
        .iter()
        .zip(ys.remainder())
        .fold(T::default(), |acc, (&a, &b)| acc + a * b);
    for (a, b) in xs.zip(ys) {
        for ((l, &a), &b) in lanes.iter_mut().zip(a).zip(b) {
            *l += a * b;
        }
    }
    lanes.iter().fold(tail, |acc, &l| acc + l)
}

/// Gustavson SpGEMM `C = A * B`, both CSR: each output row accumulates the rows of B picked by
/// its nonzeros in a dense accumulator with a marker array (explicit zeros of the products are
/// kept, as SciPy keeps them).
pub fn spgemm<T: Scalar>(a: &Csr<T>, b: &Csr<T>) -> Result<Csr<T>, SparseError> {
    deinsum_runtime::install(|| spgemm_here(a, b))
}

/// [`spgemm`] on the pool the calling thread is in.
fn spgemm_here<T: Scalar>(a: &Csr<T>, b: &Csr<T>) -> Result<Csr<T>, SparseError> {
    if a.ncols != b.nrows {
        return Err(SparseError::Shape(format!(
            "A is {} x {}, B is {} x {}",
            a.nrows, a.ncols, b.nrows, b.ncols
        )));
    }
    let work: usize = a
        .indices
        .iter()
        .map(|&j| b.indptr[j + 1] - b.indptr[j])
        .sum();
    let rows = chunk_rows(a.nrows, work);
    let starts: Vec<usize> = (0..a.nrows).step_by(rows).collect();
    // Each chunk of rows yields its own (row lengths, columns, values); they are joined in order.
    let parts: Vec<(Vec<usize>, Vec<usize>, Vec<T>)> = starts
        .par_iter()
        .map(|&r0| {
            let r1 = (r0 + rows).min(a.nrows);
            let mut acc = vec![T::default(); b.ncols];
            let mut mark = vec![usize::MAX; b.ncols];
            // The row's columns as bits: read back in order in ncols / 64 words, which beats
            // sorting a row of more than ncols / 1024 entries.
            let mut bits = vec![0u64; b.ncols.div_ceil(64)];
            let (mut lens, mut cols, mut vals) = (Vec::new(), Vec::new(), Vec::new());
            for i in r0..r1 {
                let row_start = cols.len();
                for p in a.indptr[i]..a.indptr[i + 1] {
                    let (j, av) = (a.indices[p], a.vals[p]);
                    for q in b.indptr[j]..b.indptr[j + 1] {
                        let c = b.indices[q];
                        if mark[c] != i {
                            mark[c] = i;
                            acc[c] = T::default();
                            bits[c >> 6] |= 1 << (c & 63);
                            cols.push(c);
                        }
                        acc[c] += av * b.vals[q];
                    }
                }
                let len = cols.len() - row_start;
                if len * 1024 >= b.ncols {
                    cols.truncate(row_start);
                    for (w, word) in bits.iter_mut().enumerate() {
                        let mut x = std::mem::take(word);
                        while x != 0 {
                            cols.push(w * 64 + x.trailing_zeros() as usize);
                            x &= x - 1;
                        }
                    }
                } else {
                    cols[row_start..].sort_unstable();
                    for &c in &cols[row_start..] {
                        bits[c >> 6] = 0;
                    }
                }
                vals.extend(cols[row_start..].iter().map(|&c| acc[c]));
                lens.push(len);
            }
            (lens, cols, vals)
        })
        .collect();
    let mut indptr = Vec::with_capacity(a.nrows + 1);
    indptr.push(0);
    let (mut indices, mut vals) = (Vec::new(), Vec::new());
    for (lens, cols, v) in parts {
        for l in lens {
            indptr.push(indptr.last().copied().unwrap_or(0) + l);
        }
        // The first part's buffers become the output's (no copy: one part on one thread).
        if indices.is_empty() {
            indices = cols;
            vals = v;
        } else {
            indices.extend(cols);
            vals.extend(v);
        }
    }
    Ok(Csr {
        nrows: a.nrows,
        ncols: b.ncols,
        indptr,
        indices,
        vals,
    })
}

/// A sparse tensor's nonzeros grouped by the coordinate of one mode (the first level of a
/// CSF tree): the MTTKRP kernel's layout, where each thread owns a run of output rows.
#[derive(Clone, Debug, PartialEq)]
pub struct ModeGroups<T> {
    /// Rows of the grouped mode (the output rows).
    pub rows: usize,
    /// Row `i`'s entries are `ptr[i]..ptr[i + 1]`.
    pub ptr: Vec<usize>,
    /// Per entry, the coordinates of the other modes (in mode order), `order - 1` each.
    pub others: Vec<usize>,
    /// Per entry, its value.
    pub vals: Vec<T>,
}

impl<T: Scalar> ModeGroups<T> {
    /// Groups the entries of `x` for which `row(coord of mode)` is `Some` (a row `< rows`),
    /// with the other modes' coordinates mapped by `other(m, coord)`; entries keep their
    /// sorted order within a row. A counting sort: O(nnz + rows).
    pub fn build(
        x: &SparseTensor<T>,
        mode: usize,
        rows: usize,
        row: impl Fn(usize) -> Option<usize>,
        other: impl Fn(usize, usize) -> usize,
    ) -> Result<ModeGroups<T>, SparseError> {
        ModeGroups::build_where(x, mode, rows, |_| true, row, other)
    }

    /// [`ModeGroups::build`] over the entries whose coordinates `keep` accepts (a rank's box
    /// of a grid).
    pub fn build_where(
        x: &SparseTensor<T>,
        mode: usize,
        rows: usize,
        keep: impl Fn(&[usize]) -> bool,
        row: impl Fn(usize) -> Option<usize>,
        other: impl Fn(usize, usize) -> usize,
    ) -> Result<ModeGroups<T>, SparseError> {
        let order = x.order();
        if mode >= order {
            return Err(SparseError::Shape(format!(
                "mode {mode} of an order-{order} tensor"
            )));
        }
        let mut ptr = vec![0usize; rows + 1];
        let rows_of: Vec<Option<usize>> = (0..x.nnz())
            .map(|e| {
                let c = x.coord(e);
                if keep(c) {
                    row(c[mode])
                } else {
                    None
                }
            })
            .collect();
        for &i in rows_of.iter().flatten() {
            if i >= rows {
                return Err(SparseError::Shape(format!("row {i} of {rows}")));
            }
            ptr[i + 1] += 1;
        }
        for i in 0..rows {
            ptr[i + 1] += ptr[i];
        }
        let n = ptr[rows];
        let w = order - 1;
        let mut others = vec![0usize; n * w];
        let mut vals = vec![T::default(); n];
        let mut next = ptr.clone();
        for (e, i) in rows_of.iter().enumerate() {
            let Some(i) = *i else { continue };
            let at = next[i];
            next[i] += 1;
            let c = x.coord(e);
            let mut o = at * w;
            for (m, &cm) in c.iter().enumerate() {
                if m != mode {
                    others[o] = other(m, cm);
                    o += 1;
                }
            }
            vals[at] = x.values()[e];
        }
        Ok(ModeGroups {
            rows,
            ptr,
            others,
            vals,
        })
    }

    /// Stored entries.
    pub fn nnz(&self) -> usize {
        self.vals.len()
    }
}

/// MTTKRP over grouped entries: `M (rows x R)`, row i the sum over its entries of the value
/// times the elementwise product of the other modes' factor rows. `factors` are the other
/// modes' row-major factors in mode order, each `R` wide and indexed by the grouped
/// coordinates. Rows are split over the calling rayon pool (the process's workers outside one).
pub fn mttkrp_grouped<T: Scalar>(
    g: &ModeGroups<T>,
    factors: &[&[T]],
    r: usize,
) -> Result<Vec<T>, SparseError> {
    deinsum_runtime::install(|| mttkrp_grouped_here(g, factors, r))
}

/// [`mttkrp_grouped`] on the pool the calling thread is in.
fn mttkrp_grouped_here<T: Scalar>(
    g: &ModeGroups<T>,
    factors: &[&[T]],
    r: usize,
) -> Result<Vec<T>, SparseError> {
    let w = factors.len();
    if g.others.len() != g.nnz() * w {
        return Err(SparseError::Shape(format!(
            "{} factors for entries with {} other coordinates",
            w,
            g.others.len() / g.nnz().max(1)
        )));
    }
    for (m, f) in factors.iter().enumerate() {
        if let Some(&c) = g.others.iter().skip(m).step_by(w.max(1)).max() {
            if (c + 1) * r > f.len() {
                return Err(SparseError::Shape(format!(
                    "factor {m} has {} elements, an entry reads row {c} of width {r}",
                    f.len()
                )));
            }
        }
    }
    let mut out = vec![T::default(); g.rows * r];
    if r == 0 || g.rows == 0 {
        return Ok(out);
    }
    let rows = chunk_rows(g.rows, g.nnz() * r * w.max(1));
    out.par_chunks_mut(rows * r)
        .enumerate()
        .for_each(|(ch, block)| {
            let mut t = vec![T::default(); r];
            for (ri, orow) in block.chunks_mut(r).enumerate() {
                let i = ch * rows + ri;
                for e in g.ptr[i]..g.ptr[i + 1] {
                    let c = &g.others[e * w..(e + 1) * w];
                    let v = g.vals[e];
                    match factors {
                        [] => t.iter_mut().for_each(|x| *x = v),
                        [f0, rest @ ..] => {
                            let row0 = &f0[c[0] * r..(c[0] + 1) * r];
                            for (x, &y) in t.iter_mut().zip(row0) {
                                *x = v * y;
                            }
                            for (f, &cm) in rest.iter().zip(&c[1..]) {
                                for (x, &y) in t.iter_mut().zip(&f[cm * r..(cm + 1) * r]) {
                                    *x = *x * y;
                                }
                            }
                        }
                    }
                    for (o, &x) in orow.iter_mut().zip(&t) {
                        *o += x;
                    }
                }
            }
        });
    Ok(out)
}

/// MTTKRP of a sparse tensor `x` in mode `mode`: `M (I_mode x R) = X_(mode) (⊙ of the other
/// factors)`, with `factors[m]` the row-major `I_m x R` factor of mode `m` (the mode's own entry
/// is ignored). The einsum `ijk,ja,ka->ia` for mode 0 of an order-3 tensor. Costs nnz × R × N;
/// the entries are grouped by the mode ([`ModeGroups`]) and the rows split over the threads.
pub fn mttkrp<T: Scalar>(
    x: &SparseTensor<T>,
    factors: &[&[T]],
    mode: usize,
    r: usize,
) -> Result<Vec<T>, SparseError> {
    let order = x.order();
    if mode >= order || factors.len() != order {
        return Err(SparseError::Shape(format!(
            "mode {mode} and {} factors for an order-{order} tensor",
            factors.len()
        )));
    }
    for (m, f) in factors.iter().enumerate() {
        if m != mode && f.len() != x.shape()[m] * r {
            return Err(SparseError::Shape(format!(
                "factor {m} has {} elements, expected {} x {r}",
                f.len(),
                x.shape()[m]
            )));
        }
    }
    let g = ModeGroups::build(x, mode, x.shape()[mode], Some, |_, c| c)?;
    let others: Vec<&[T]> = (0..order)
        .filter(|&m| m != mode)
        .map(|m| factors[m])
        .collect();
    mttkrp_grouped(&g, &others, r)
}
