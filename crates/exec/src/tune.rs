//! Choices the kernels make from this machine's own speeds, measured once per process.
//!
//! A GEMM step whose row operand is stored transposed (`ji,jk->ik`) can read it in place, at
//! whatever rate faer's GEMM reaches on a column-major left operand, or copy it into order
//! first (a cache-blocked transpose) and run at the full rate. Which is faster depends on the
//! processor: on one Xeon faer ran at about half its rate on such an operand, on an EPYC at
//! 0.8-1.0 of it, while the copy costs a pass over the operand whatever the machine. So the
//! first such step measures both costs (a few milliseconds) and every later one decides by
//! them. `DEINSUM_TRANSPOSED_ROWS=copy|in-place` fixes the choice (for A/B runs and
//! reproducible rounding).

use std::sync::OnceLock;
use std::time::Instant;

/// Products below this many multiply-adds read a transposed row operand in place without
/// measuring (so that tiny runs never pay for the measurement).
pub const MIN_MADDS: usize = 1 << 22;

/// The measured costs behind [`transposed_rows_for`], in seconds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TransposedRows {
    /// Extra time per multiply-add of a GEMM reading its row operand stored transposed
    /// (zero when it is no slower).
    pub extra_per_madd: f64,
    /// Time per word of copying an operand into order (the cache-blocked transpose).
    pub copy_per_word: f64,
}

/// What `DEINSUM_TRANSPOSED_ROWS` asks for, if anything.
fn forced() -> Option<bool> {
    match std::env::var("DEINSUM_TRANSPOSED_ROWS").ok()?.as_str() {
        "in-place" => Some(true),
        "copy" => Some(false),
        _ => None,
    }
}

/// This machine's costs, measured on first use (f64, one thread). When the measurement's
/// buffers cannot be had (a run at its memory limit), reading in place is taken as free (it
/// needs no memory), and the next use measures again.
pub fn transposed_rows() -> TransposedRows {
    static COSTS: OnceLock<TransposedRows> = OnceLock::new();
    if let Some(c) = COSTS.get() {
        return *c;
    }
    match measure() {
        Some(c) => *COSTS.get_or_init(|| c),
        None => TransposedRows {
            extra_per_madd: 0.0,
            copy_per_word: 1.0,
        },
    }
}

/// A vector of `len` values `f(x)`, or `None` when the allocator refuses it.
fn filled(len: usize, f: impl Fn(usize) -> f64) -> Option<Vec<f64>> {
    let mut v = crate::buffers::try_vec(len).ok()?;
    v.extend((0..len).map(f));
    Some(v)
}

/// The costs a product of `madds` multiply-adds weighs its layouts by: `None` below
/// [`MIN_MADDS`] (neither way costs much there, and tiny runs never pay for the measurement).
/// `DEINSUM_TRANSPOSED_ROWS=in-place` makes a slow read free, `copy` makes it dearer than any
/// copy.
pub fn transposed_rows_for(madds: usize) -> Option<TransposedRows> {
    let free = TransposedRows {
        extra_per_madd: 0.0,
        copy_per_word: 1.0,
    };
    match forced() {
        Some(true) => Some(free),
        Some(false) => Some(TransposedRows {
            extra_per_madd: f64::INFINITY,
            ..free
        }),
        None if madds < MIN_MADDS => None,
        None => Some(transposed_rows()),
    }
}

/// Best time of `reps` runs of `f`.
fn best(reps: usize, mut f: impl FnMut()) -> f64 {
    (0..reps)
        .map(|_| {
            let t = Instant::now();
            f();
            t.elapsed().as_secs_f64()
        })
        .fold(f64::INFINITY, f64::min)
}

fn measure() -> Option<TransposedRows> {
    // faer itself (not the panelled GEMM, which copies such an operand when it pays) on a
    // product large enough to run at its steady rate, with fewer output columns than the
    // GEMM's own panel copies start at, and a transpose out of the L2 cache.
    let (s, n) = (256, crate::scalar::PACK_LEFT_MIN_COLS / 2);
    let a = filled(s * s, |x| (x % 7) as f64)?;
    let b = filled(s * n, |x| (x % 5) as f64)?;
    let mut c = filled(s * n, |_| 0.0)?;
    let mut gemm = |trans: bool| {
        let a = if trans {
            faer::MatRef::from_row_major_slice(&a, s, s).transpose()
        } else {
            faer::MatRef::from_row_major_slice(&a, s, s)
        };
        let b = faer::MatRef::from_row_major_slice(&b, s, n);
        let cm = faer::MatMut::from_row_major_slice_mut(&mut c, s, n);
        faer::linalg::matmul::matmul(cm, faer::Accum::Replace, a, b, 1.0, faer::Par::Seq);
        std::hint::black_box(&mut c);
    };
    gemm(false);
    gemm(true);
    let plain = best(3, || gemm(false));
    let trans = best(3, || gemm(true));
    let t = 768;
    let src = filled(t * t, |x| x as f64)?;
    // Into a reused buffer, as a step's copies are in repeated runs (the rank's free list): a fresh
    // one faults its pages in, which tripled the time per word on the EPYC of issue 12.
    let scratch = crate::buffers::RankContext::new(2 * t * t, 1, 0).ok();
    let _guard = scratch.as_ref().map(|c| c.enter());
    let copy = best(4, || {
        if let Ok(out) = crate::layout::transpose_2d(&src, t, t) {
            std::hint::black_box(&out);
            crate::buffers::give(out);
        }
    });
    // Every copy refused (no time measured): not a measurement.
    copy.is_finite().then(|| TransposedRows {
        extra_per_madd: ((trans - plain) / (s * n * s) as f64).max(0.0),
        copy_per_word: copy / (t * t) as f64,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_measured_costs_are_finite_and_nonnegative() {
        let c = transposed_rows();
        assert!(c.extra_per_madd.is_finite() && c.extra_per_madd >= 0.0);
        assert!(c.copy_per_word.is_finite() && c.copy_per_word > 0.0);
    }
}
