//! Seeded sparse generators: uniform density over any shape, and Graph500's R-MAT graphs.
//! Values are the executor's seeded values in [-1, 1) (real and imaginary parts for a complex
//! type, the real parts those of a real run), so results do not depend on P.

use crate::{SparseError, SparseTensor};
use deinsum_exec::data::seeded;
use deinsum_exec::Scalar;

/// splitmix64 step: the next state and a well-mixed output.
fn next(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A uniform double in [0, 1).
fn unit(state: &mut u64) -> f64 {
    ((next(state) >> 11) as f64) * (1.0 / (1u64 << 53) as f64)
}

/// A tensor of `shape` whose entries are nonzero with probability `density` each, drawn
/// independently (so the nonzero count is binomial around `density * size`), from `seed`.
/// `density` must lie in (0, 1].
pub fn uniform<T: Scalar>(
    shape: &[usize],
    density: f64,
    seed: u64,
) -> Result<SparseTensor<T>, SparseError> {
    if !(density > 0.0 && density <= 1.0) {
        return Err(SparseError::Shape(format!(
            "density {density} is not in (0, 1]"
        )));
    }
    let size: u64 = shape
        .iter()
        .try_fold(1u64, |a, &n| a.checked_mul(n as u64))
        .ok_or_else(|| {
            SparseError::Shape(format!("shape {shape:?} has more than 2^64 elements"))
        })?;
    let mut state = seed ^ 0x5EED_5A5E;
    let mut coords = Vec::new();
    let mut vals = Vec::new();
    // Skip ahead by geometric gaps: O(nnz) draws, not O(size).
    let ln_q = (1.0 - density).ln();
    let mut lin: u64 = 0;
    loop {
        let gap = if density >= 1.0 {
            0
        } else {
            ((1.0 - unit(&mut state)).ln() / ln_q)
                .floor()
                .min(u64::MAX as f64 / 2.0) as u64
        };
        lin = match lin.checked_add(gap) {
            Some(l) if l < size => l,
            _ => break,
        };
        let mut rest = lin;
        let start = coords.len();
        coords.resize(start + shape.len(), 0);
        for (m, &n) in shape.iter().enumerate().rev() {
            coords[start + m] = (rest % n as u64) as usize;
            rest /= n as u64;
        }
        vals.push(seeded::<T>(seed, 0, lin));
        lin += 1;
    }
    SparseTensor::from_entries(shape.to_vec(), coords, vals)
}

/// Graph500's R-MAT graph of `2^scale` vertices and `edge_factor * 2^scale` edges with the
/// benchmark's quadrant probabilities (a, b, c) = (0.57, 0.19, 0.19): an adjacency matrix
/// with a skewed degree distribution. Repeated edges are summed.
pub fn rmat<T: Scalar>(
    scale: u32,
    edge_factor: usize,
    seed: u64,
) -> Result<SparseTensor<T>, SparseError> {
    if scale == 0 || scale > 40 {
        return Err(SparseError::Shape(format!(
            "R-MAT scale {scale} is not in 1..=40"
        )));
    }
    let n = 1usize << scale;
    let edges = edge_factor
        .checked_mul(n)
        .ok_or_else(|| SparseError::Shape("R-MAT edge count overflows".into()))?;
    let (a, b, c) = (0.57, 0.19, 0.19);
    let mut state = seed ^ 0x0A11_CE5E;
    let mut coords = Vec::with_capacity(2 * edges);
    let mut vals = Vec::with_capacity(edges);
    for e in 0..edges {
        let (mut i, mut j) = (0usize, 0usize);
        for _ in 0..scale {
            let r = unit(&mut state);
            let (bi, bj) = if r < a {
                (0, 0)
            } else if r < a + b {
                (0, 1)
            } else if r < a + b + c {
                (1, 0)
            } else {
                (1, 1)
            };
            i = 2 * i + bi;
            j = 2 * j + bj;
        }
        coords.extend([i, j]);
        vals.push(seeded::<T>(seed, 1, e as u64));
    }
    SparseTensor::from_entries(vec![n, n], coords, vals)
}
