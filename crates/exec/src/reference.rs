//! Serial reference evaluators for checks and tests.

use crate::buffers::OutOfMemory;
use crate::data::{seeded, seeded_value};
use crate::kernels::{eval_step, LocalTensor};
use crate::Scalar;
use deinsum_expr::{Dim, Index, ParsedEinsum};
use deinsum_path::ContractionTree;
use deinsum_plan::Block;

/// Number of points of the einsum's full iteration space (f64: it may not fit an integer).
pub fn iteration_space(einsum: &ParsedEinsum) -> f64 {
    einsum.extents().values().map(|&n| n as f64).product()
}

/// The einsum evaluated naively over its full iteration space, in `W` (f64 for a real
/// reference, [`crate::scalar::Complex64`] for a complex one), output row-major over
/// `einsum.output`. `value(k, x)` is element `x` (storage order) of operand `k`.
pub fn naive<W: Scalar>(einsum: &ParsedEinsum, value: &dyn Fn(usize, u64) -> W) -> Vec<W> {
    let all: Vec<Index> = einsum.all_indices();
    let ext: Vec<usize> = all.iter().map(|&c| einsum.extent(c)).collect();
    let pos = |c: Index| {
        all.iter()
            .position(|&d| d == c)
            .expect("index of the einsum")
    };
    // Per operand, per storage dim: (position in `all` or None for broadcast, stride).
    let ops: Vec<Vec<(Option<usize>, u64)>> = einsum
        .inputs()
        .iter()
        .map(|op| {
            let shape = op.shape(einsum.extents());
            let mut st = vec![0u64; shape.len()];
            let mut s = 1u64;
            for d in (0..shape.len()).rev() {
                st[d] = s;
                s *= shape[d] as u64;
            }
            op.dims
                .iter()
                .zip(st)
                .map(|(d, s)| match d {
                    Dim::Index(c) => (Some(pos(*c)), s),
                    Dim::Broadcast => (None, s),
                })
                .collect()
        })
        .collect();
    let out_pos: Vec<usize> = einsum.output().iter().map(|&c| pos(c)).collect();
    let out_len: usize = out_pos.iter().map(|&p| ext[p]).product();
    let mut out = vec![W::default(); out_len];
    if ext.contains(&0) {
        return out;
    }
    let mut idx = vec![0usize; all.len()];
    loop {
        let mut prod = W::one();
        for (k, dims) in ops.iter().enumerate() {
            let x: u64 = dims
                .iter()
                .map(|&(p, s)| p.map_or(0, |p| idx[p] as u64 * s))
                .sum();
            prod = prod * value(k, x);
        }
        let o = out_pos.iter().fold(0usize, |a, &p| a * ext[p] + idx[p]);
        out[o] += prod;
        let mut d = all.len();
        loop {
            if d == 0 {
                return out;
            }
            d -= 1;
            idx[d] += 1;
            if idx[d] < ext[d] {
                break;
            }
            idx[d] = 0;
        }
    }
}

/// The naive reference for the seeded generator's inputs.
pub fn naive_seeded(einsum: &ParsedEinsum, seed: u64) -> Vec<f64> {
    naive(einsum, &|k, x| seeded_value(seed, k, x))
}

/// The naive reference in `W` for the seeded generator's inputs of `W`'s kind (complex
/// values for a complex `W`, see [`crate::data::seeded`]).
pub fn naive_seeded_as<W: Scalar>(einsum: &ParsedEinsum, seed: u64) -> Vec<W> {
    naive(einsum, &|k, x| seeded::<W>(seed, k, x))
}

/// Operand `k` of the seeded generator as a whole tensor over its distinct indices, in `W`.
pub fn seeded_leaf<W: Scalar>(
    einsum: &ParsedEinsum,
    k: usize,
    seed: u64,
) -> Result<LocalTensor<W>, OutOfMemory> {
    let idx = einsum.inputs()[k].indices.clone();
    let shape: Vec<usize> = idx.iter().map(|&c| einsum.extent(c)).collect();
    let b = Block::full(&shape);
    Ok(LocalTensor {
        indices: idx,
        data: crate::data::seeded_block::<W>(einsum, k, seed, &b)?.into(),
        ranges: b.ranges.to_vec(),
    })
}

/// The einsum evaluated serially along `tree` from whole operands `leaves` (in `W`: f64 or
/// complex f64 for a reference), for sizes where the naive loop is too slow. Output row-major
/// over `einsum.output`. A failed allocation names the tree node it was for.
pub fn tree_reference<W: Scalar>(
    einsum: &ParsedEinsum,
    tree: &ContractionTree,
    leaves: Vec<LocalTensor<W>>,
) -> Result<Vec<W>, OutOfMemory> {
    let mut nodes = leaves;
    for st in &tree.steps {
        let ops: Vec<&LocalTensor<W>> = st.operands.iter().map(|i| &nodes[i.index()]).collect();
        let node = nodes.len();
        let r = eval_step(&ops, &st.output).map_err(|e| e.for_tensor(node))?;
        nodes.push(r);
    }
    match nodes.pop() {
        Some(last) => Ok(last.into_order(einsum.output())?.data.into_vec()),
        None => Ok(Vec::new()),
    }
}

/// Largest absolute and relative (to the reference's largest magnitude) difference; for
/// complex values the magnitude of the difference. The reference `want` is f64 for a real
/// `got`, complex f64 for a complex one.
pub fn max_error<T: Scalar, W: Scalar>(got: &[T], want: &[W]) -> (f64, f64) {
    let scale = want.iter().fold(0.0f64, |a, &x| a.max(x.magnitude()));
    let abs = got.iter().zip(want).fold(0.0f64, |a, (&g, &w)| {
        let ((gr, gi), (wr, wi)) = (g.parts(), w.parts());
        a.max((gr - wr).hypot(gi - wi))
    });
    let rel = if scale > 0.0 { abs / scale } else { abs };
    (
        abs,
        if got.len() == want.len() {
            rel
        } else {
            f64::INFINITY
        },
    )
}
