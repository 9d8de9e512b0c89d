//! GEMMs through the system CBLAS (`cblas_sgemm`, `dgemm`, `cgemm`, `zgemm`), behind the cargo
//! feature `blas-external` (and `blas`, which links Debian's libopenblas).
//!
//! The crate's only `unsafe` lives here, and only because a C call is unsafe: every call
//! passes faer views whose pointer and strides address exactly the matrix they describe,
//! checked against what CBLAS requires (a unit stride, a leading dimension at least the
//! extent) before the call.

use crate::gemm::BlasGemm;
use cblas_sys::{CblasNoTrans, CblasRowMajor, CblasTrans, CBLAS_TRANSPOSE};
use num_complex::{Complex32, Complex64};
use std::ffi::c_int;

// The `system` feature of openblas-src emits the link line for libopenblas.
#[cfg(feature = "blas")]
use openblas_src as _;

#[cfg(feature = "blas")]
extern "C" {
    /// OpenBLAS's own thread count: set to 1, since the executor splits each GEMM over the
    /// rank's threads itself (OpenBLAS's threads on top would oversubscribe the cores).
    fn openblas_set_num_threads(n: c_int);
}

/// Makes OpenBLAS single-threaded, once per process (a CBLAS given on the link line is left
/// as configured: docs/cluster.md says to link its sequential variant), and counts the call
/// ([`crate::gemm::blas_calls`]).
fn single_threaded() {
    crate::gemm::BLAS_CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    #[cfg(feature = "blas")]
    {
        static ONCE: std::sync::Once = std::sync::Once::new();
        // SAFETY: a plain C call with a value argument; OpenBLAS allows it at any time.
        ONCE.call_once(|| unsafe { openblas_set_num_threads(1) });
    }
}

/// How CBLAS reads a `rows x cols` view with strides `rs`, `cs` in a row-major call:
/// untransposed (unit column stride) or transposed (unit row stride), with its leading
/// dimension; `None` when it is neither, or its leading dimension is not an `i32` at least
/// the extent CBLAS checks it against.
fn storage(rows: usize, cols: usize, rs: isize, cs: isize) -> Option<(CBLAS_TRANSPOSE, c_int)> {
    let ld = |stride: isize, min: usize| {
        usize::try_from(stride)
            .ok()
            .filter(|&s| s >= min.max(1))
            .and_then(|s| c_int::try_from(s).ok())
    };
    if cs == 1 || cols == 1 {
        if let Some(ld) = ld(rs, cols) {
            return Some((CblasNoTrans, ld));
        }
    }
    if rs == 1 || rows == 1 {
        if let Some(ld) = ld(cs, rows) {
            return Some((CblasTrans, ld));
        }
    }
    None
}

/// The shared checks of a call: extents as `i32`, the storages of `a`, `b` and `c` (`c`
/// untransposed), `None` for an empty product (left to faer, which needs no stride there).
struct Call {
    m: c_int,
    n: c_int,
    k: c_int,
    ta: CBLAS_TRANSPOSE,
    lda: c_int,
    tb: CBLAS_TRANSPOSE,
    ldb: c_int,
    ldc: c_int,
}

fn call<T>(
    c: &faer::MatMut<'_, T>,
    a: &faer::MatRef<'_, T>,
    b: &faer::MatRef<'_, T>,
) -> Option<Call> {
    let (m, n, k) = (c.nrows(), c.ncols(), a.ncols());
    if m == 0 || n == 0 || k == 0 || a.nrows() != m || b.nrows() != k || b.ncols() != n {
        return None;
    }
    let (ta, lda) = storage(m, k, a.row_stride(), a.col_stride())?;
    let (tb, ldb) = storage(k, n, b.row_stride(), b.col_stride())?;
    let (tc, ldc) = storage(m, n, c.row_stride(), c.col_stride())?;
    if !matches!(tc, CblasNoTrans) {
        return None;
    }
    Some(Call {
        m: c_int::try_from(m).ok()?,
        n: c_int::try_from(n).ok()?,
        k: c_int::try_from(k).ok()?,
        ta,
        lda,
        tb,
        ldb,
        ldc,
    })
}

macro_rules! real_gemm {
    ($t:ty, $f:ident) => {
        impl BlasGemm for $t {
            fn blas_gemm(
                c: faer::MatMut<'_, Self>,
                acc: faer::Accum,
                a: faer::MatRef<'_, Self>,
                b: faer::MatRef<'_, Self>,
            ) -> bool {
                let Some(x) = call(&c, &a, &b) else {
                    return false;
                };
                single_threaded();
                let beta = if matches!(acc, faer::Accum::Add) {
                    1.0
                } else {
                    0.0
                };
                // SAFETY: `call` checked that each pointer with its leading dimension addresses
                // exactly the view's m x k, k x n and m x n elements (faer's views are in
                // bounds); `c` is borrowed mutably, so CBLAS's writes alias nothing.
                unsafe {
                    cblas_sys::$f(
                        CblasRowMajor,
                        x.ta,
                        x.tb,
                        x.m,
                        x.n,
                        x.k,
                        1.0,
                        a.as_ptr(),
                        x.lda,
                        b.as_ptr(),
                        x.ldb,
                        beta,
                        c.as_ptr_mut(),
                        x.ldc,
                    )
                };
                true
            }
        }
    };
}

macro_rules! complex_gemm {
    ($t:ty, $part:ty, $f:ident) => {
        impl BlasGemm for $t {
            fn blas_gemm(
                c: faer::MatMut<'_, Self>,
                acc: faer::Accum,
                a: faer::MatRef<'_, Self>,
                b: faer::MatRef<'_, Self>,
            ) -> bool {
                let Some(x) = call(&c, &a, &b) else {
                    return false;
                };
                single_threaded();
                let one: [$part; 2] = [1.0, 0.0];
                let beta: [$part; 2] = [
                    if matches!(acc, faer::Accum::Add) {
                        1.0
                    } else {
                        0.0
                    },
                    0.0,
                ];
                // SAFETY: as for the real types; num-complex's types are `#[repr(C)]` pairs
                // (re, im), the layout of CBLAS's complex numbers, and the scalars are read
                // through pointers to locals that outlive the call.
                unsafe {
                    cblas_sys::$f(
                        CblasRowMajor,
                        x.ta,
                        x.tb,
                        x.m,
                        x.n,
                        x.k,
                        &one,
                        a.as_ptr().cast(),
                        x.lda,
                        b.as_ptr().cast(),
                        x.ldb,
                        &beta,
                        c.as_ptr_mut().cast(),
                        x.ldc,
                    )
                };
                true
            }
        }
    };
}

real_gemm!(f64, cblas_dgemm);
real_gemm!(f32, cblas_sgemm);
complex_gemm!(Complex64, f64, cblas_zgemm);
complex_gemm!(Complex32, f32, cblas_cgemm);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn storages_cblas_takes() {
        assert!(matches!(storage(3, 4, 4, 1), Some((CblasNoTrans, 4))));
        assert!(matches!(storage(3, 4, 1, 3), Some((CblasTrans, 3))));
        // A leading dimension below the extent, or no unit stride: refused.
        assert!(storage(3, 4, 2, 1).is_none());
        assert!(storage(3, 4, 8, 2).is_none());
        assert!(storage(3, 4, -4, 1).is_none());
    }

    /// Every element type and storage against faer, accumulating and not.
    #[test]
    fn cblas_matches_faer() {
        fn check<T>(z: impl Fn(usize) -> T, tol: f64)
        where
            T: BlasGemm + crate::Scalar + faer::traits::ComplexField,
        {
            let (m, n, k) = (37, 29, 51);
            let a: Vec<T> = (0..m * k).map(&z).collect();
            let b: Vec<T> = (0..k * n).map(|i| z(i + 7)).collect();
            for (a_t, b_t, add) in [
                (false, false, false),
                (true, false, true),
                (false, true, true),
            ] {
                let av = if a_t {
                    faer::MatRef::from_row_major_slice(&a, k, m).transpose()
                } else {
                    faer::MatRef::from_row_major_slice(&a, m, k)
                };
                let bv = if b_t {
                    faer::MatRef::from_row_major_slice(&b, n, k).transpose()
                } else {
                    faer::MatRef::from_row_major_slice(&b, k, n)
                };
                let acc = if add {
                    faer::Accum::Add
                } else {
                    faer::Accum::Replace
                };
                let mut want: Vec<T> = (0..m * n).map(|i| z(i + 3)).collect();
                let mut got = want.clone();
                let one = faer::traits::math_utils::one::<T>();
                let wv = faer::MatMut::from_row_major_slice_mut(&mut want, m, n);
                faer::linalg::matmul::matmul(wv, acc, av, bv, one, faer::Par::Seq);
                let gv = faer::MatMut::from_row_major_slice_mut(&mut got, m, n);
                assert!(T::blas_gemm(gv, acc, av, bv));
                for (g, w) in got.iter().zip(&want) {
                    let (g, w) = (g.parts(), w.parts());
                    assert!((g.0 - w.0).abs() + (g.1 - w.1).abs() <= tol, "{g:?} {w:?}");
                }
            }
        }
        let r = |i: usize| ((i * 7) % 13) as f64 - 6.0;
        check::<f64>(r, 1e-9);
        check::<f32>(|i| r(i) as f32, 1e-2);
        check::<Complex64>(|i| Complex64::new(r(i), r(i + 5)), 1e-9);
        check::<Complex32>(|i| Complex32::new(r(i) as f32, r(i + 5) as f32), 1e-2);
    }
}
