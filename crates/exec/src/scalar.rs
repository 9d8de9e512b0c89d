//! The element types the executor computes in.

use std::fmt::Debug;
use std::ops::{Add, AddAssign, Mul};

/// A floating-point element type of distributed tensors: f64 or f32.
pub trait Scalar:
    Copy
    + Default
    + Debug
    + Send
    + Sync
    + PartialEq
    + PartialOrd
    + Add<Output = Self>
    + AddAssign
    + Mul<Output = Self>
    + ndarray::LinalgScalar
    + bytemuck::Pod
    + 'static
{
    /// The `.npy` dtype descriptor (little-endian), `<f8` or `<f4`.
    const NPY_DTYPE: &'static str;
    /// A short name, `f64` or `f32`.
    const NAME: &'static str;
    /// Size in bytes.
    const BYTES: usize;
    /// Converts from f64 (rounding for f32).
    fn from_f64(x: f64) -> Self;
    /// Converts to f64.
    fn to_f64(self) -> f64;
    /// Appends the little-endian bytes of `xs` to `out`.
    fn extend_bytes(xs: &[Self], out: &mut Vec<u8>);
    /// Reads little-endian values from `bytes` (length a multiple of [`Scalar::BYTES`]).
    fn from_bytes(bytes: &[u8], out: &mut Vec<Self>);
    /// Row-major GEMM `c (m x n) = a (m x k) * b (k x n)` (plus `c` when `accumulate`),
    /// through faer: on the threads of the rank's pool when called inside one (see
    /// [`crate::kernels::threads`]), else on the calling thread.
    fn gemm(
        m: usize,
        n: usize,
        k: usize,
        a: &[Self],
        b: &[Self],
        c: &mut [Self],
        accumulate: bool,
    ) {
        Self::gemm_layout(m, n, k, a, b, c, accumulate, Layout::default());
    }
    /// [`Scalar::gemm`] with `a` stored as `k x m` and/or `b` as `n x k` (row-major) when the
    /// layout says so: a transposed operand is read in place, not copied.
    // The GEMM's own arguments; bundling them would only rename them.
    #[allow(clippy::too_many_arguments)]
    fn gemm_layout(
        m: usize,
        n: usize,
        k: usize,
        a: &[Self],
        b: &[Self],
        c: &mut [Self],
        accumulate: bool,
        layout: Layout,
    );
    /// Element-wise sum over all ranks of `comm`, in place (dispatches to the typed collective).
    fn all_reduce_sum<C: crate::Communicator>(
        comm: &C,
        buf: &mut [Self],
    ) -> Result<(), crate::CommError>;
}

/// Storage of a GEMM's operands: `a_trans` means `a` holds the `k x m` transpose row-major,
/// `b_trans` that `b` holds the `n x k` transpose.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Layout {
    /// `a` is stored transposed.
    pub a_trans: bool,
    /// `b` is stored transposed.
    pub b_trans: bool,
}

/// `c (+)= a b` on `threads` threads: the output is cut in two along its longer side and the
/// halves run as a rayon join (each then cut again), every piece one sequential faer GEMM.
/// Unlike a GEMM parallelized inside (faer's `Par::rayon`, whose workers meet at spinning
/// barriers), the pieces never wait on each other, which keeps ranks sharing cores fast.
fn split_gemm<T: faer::traits::ComplexField + Copy + Send + Sync + From<f32>>(
    c: faer::MatMut<'_, T>,
    acc: faer::Accum,
    a: faer::MatRef<'_, T>,
    b: faer::MatRef<'_, T>,
    threads: usize,
) {
    let (m, n) = (c.nrows(), c.ncols());
    if threads <= 1 || (m < 2 && n < 2) {
        faer::linalg::matmul::matmul(c, acc, a, b, T::from(1.0f32), faer::Par::Seq);
        return;
    }
    let t0 = threads / 2;
    let t1 = threads - t0;
    if m >= n {
        let mid = m * t0 / threads;
        let (c0, c1) = c.split_at_row_mut(mid);
        let (a0, a1) = a.split_at_row(mid);
        rayon::join(
            || split_gemm(c0, acc, a0, b, t0),
            || split_gemm(c1, acc, a1, b, t1),
        );
    } else {
        let mid = n * t0 / threads;
        let (c0, c1) = c.split_at_col_mut(mid);
        let (b0, b1) = b.split_at_col(mid);
        rayon::join(
            || split_gemm(c0, acc, a, b0, t0),
            || split_gemm(c1, acc, a, b1, t1),
        );
    }
}

macro_rules! impl_scalar {
    ($t:ty, $dtype:expr, $name:expr, $reduce:expr) => {
        impl Scalar for $t {
            const NPY_DTYPE: &'static str = $dtype;
            const NAME: &'static str = $name;
            const BYTES: usize = std::mem::size_of::<$t>();
            fn from_f64(x: f64) -> Self {
                x as $t
            }
            fn to_f64(self) -> f64 {
                self as f64
            }
            fn extend_bytes(xs: &[Self], out: &mut Vec<u8>) {
                out.reserve(xs.len() * Self::BYTES);
                for x in xs {
                    out.extend_from_slice(&x.to_le_bytes());
                }
            }
            fn from_bytes(bytes: &[u8], out: &mut Vec<Self>) {
                out.reserve(bytes.len() / Self::BYTES);
                for c in bytes.chunks_exact(Self::BYTES) {
                    let mut a = [0u8; std::mem::size_of::<$t>()];
                    a.copy_from_slice(c);
                    out.push(<$t>::from_le_bytes(a));
                }
            }
            fn gemm_layout(
                m: usize,
                n: usize,
                k: usize,
                a: &[Self],
                b: &[Self],
                c: &mut [Self],
                accumulate: bool,
                layout: Layout,
            ) {
                let a = if layout.a_trans {
                    faer::MatRef::from_row_major_slice(&a[..m * k], k, m).transpose()
                } else {
                    faer::MatRef::from_row_major_slice(&a[..m * k], m, k)
                };
                let b = if layout.b_trans {
                    faer::MatRef::from_row_major_slice(&b[..k * n], n, k).transpose()
                } else {
                    faer::MatRef::from_row_major_slice(&b[..k * n], k, n)
                };
                let c = faer::MatMut::from_row_major_slice_mut(&mut c[..m * n], m, n);
                let acc = if accumulate {
                    faer::Accum::Add
                } else {
                    faer::Accum::Replace
                };
                split_gemm(c, acc, a, b, crate::kernels::gemm_threads(m, n, k));
            }
            fn all_reduce_sum<C: crate::Communicator>(
                comm: &C,
                buf: &mut [Self],
            ) -> Result<(), crate::CommError> {
                $reduce(comm, buf)
            }
        }
    };
}

impl_scalar!(f64, "<f8", "f64", |c: &C, b: &mut [f64]| c
    .all_reduce_sum_f64(b));
impl_scalar!(f32, "<f4", "f32", |c: &C, b: &mut [f32]| c
    .all_reduce_sum_f32(b));
