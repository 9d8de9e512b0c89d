//! The element types the executor computes in, and [`with_dtype!`](crate::with_dtype), the one
//! place a [`DType`] value becomes a Rust type.

use crate::gemm::{BlasGemm, Gemm};
use deinsum_plan::DType;
use std::fmt::Debug;
use std::ops::{Add, AddAssign, Mul};

/// NumPy's `complex64`: two f32 parts ([`DType::C64`]; faer's `c32`).
pub use num_complex::Complex32;
/// NumPy's `complex128`: two f64 parts ([`DType::C128`]; faer's `c64`).
pub use num_complex::Complex64;

/// An element type of distributed tensors: f64, f32 and the complex types of their
/// precisions. Nothing here needs an order: a check compares [`Scalar::magnitude`]s.
pub trait Scalar:
    Copy
    + Default
    + Debug
    + Send
    + Sync
    + PartialEq
    + Add<Output = Self>
    + AddAssign
    + Mul<Output = Self>
    + ndarray::LinalgScalar
    + bytemuck::Pod
    + 'static
{
    /// The element type as a value: its name, size, `.npy` descriptor
    /// ([`DType::npy_descr`]) and MPI datatype all follow from it.
    const DTYPE: DType;
    /// Size in bytes, [`DType::bytes`] of [`Scalar::DTYPE`] (not to be overridden).
    const BYTES: usize = Self::DTYPE.bytes();
    /// Converts from f64 (rounding for f32; a real part with no imaginary part).
    fn from_f64(x: f64) -> Self {
        Self::from_parts(x, 0.0)
    }
    /// The value `re + i im`, rounded to the type's parts; a real type drops `im` (its
    /// callers refuse complex data for a real type before, as NumPy does).
    fn from_parts(re: f64, im: f64) -> Self;
    /// The real and imaginary parts, as f64 (the imaginary part 0 for a real type).
    fn parts(self) -> (f64, f64);
    /// Converts from a signed integer with one rounding (as NumPy's `astype`).
    fn from_i64(x: i64) -> Self;
    /// Converts from an unsigned integer with one rounding (as NumPy's `astype`).
    fn from_u64(x: u64) -> Self;
    /// Converts to f64: the real part of a complex value.
    fn to_f64(self) -> f64 {
        self.parts().0
    }
    /// Converts to complex f64, exactly for every element type (a real value's imaginary part 0).
    fn to_c128(self) -> Complex64 {
        let (re, im) = self.parts();
        Complex64::new(re, im)
    }
    /// The absolute value, as f64 (what error checks compare; a modulus for complex types).
    fn magnitude(self) -> f64;
    /// Appends the little-endian bytes of `xs` to `out`.
    fn extend_bytes(xs: &[Self], out: &mut Vec<u8>);
    /// Reads little-endian values from `bytes` (length a multiple of [`Scalar::BYTES`]).
    fn from_bytes(bytes: &[u8], out: &mut Vec<Self>);
    /// Row-major GEMM `c (m x n) = a (m x k) * b (k x n)` (plus `c` when `accumulate`),
    /// through faer or the system CBLAS ([`crate::gemm::current`]): on the threads of the rank's pool when called inside one (see
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
}

/// Evaluates `$body` with `$T` the [`Scalar`] of the [`DType`] value `$dtype`:
/// `with_dtype!(d, T => run::<T>(args))`. The one dispatch from an element type as a value to
/// a Rust type (the CLI, Python, `.npy` input and the MPI datatypes go through it).
///
/// `DType` is `#[non_exhaustive]`, so the match needs a last arm here; it panics naming the
/// type, and the test `every_dtype_has_a_scalar` fails for a variant missing above it.
#[macro_export]
macro_rules! with_dtype {
    ($dtype:expr, $T:ident => $body:expr) => {
        match $dtype {
            $crate::DType::F32 => {
                type $T = f32;
                $body
            }
            $crate::DType::F64 => {
                type $T = f64;
                $body
            }
            $crate::DType::C64 => {
                type $T = $crate::scalar::Complex32;
                $body
            }
            $crate::DType::C128 => {
                type $T = $crate::scalar::Complex64;
                $body
            }
            other => $crate::scalar::no_scalar(other),
        }
    };
}

/// The last arm of [`with_dtype!`]: an element type this executor has no [`Scalar`] for.
#[cold]
#[doc(hidden)]
pub fn no_scalar(d: DType) -> ! {
    panic!("element type {d} has no Scalar implementation in deinsum-exec")
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
/// halves run as a rayon join (each then cut again), every piece one sequential GEMM (faer's,
/// or the system CBLAS's when `gemm` says so). Unlike a GEMM parallelized inside (faer's
/// `Par::rayon`, whose workers meet at spinning barriers), the pieces never wait on each
/// other, which keeps ranks sharing cores fast.
fn split_gemm<T>(
    c: faer::MatMut<'_, T>,
    acc: faer::Accum,
    a: faer::MatRef<'_, T>,
    b: faer::MatRef<'_, T>,
    threads: usize,
    gemm: Gemm,
) where
    T: BlasGemm + faer::traits::ComplexField + Copy + Send + Sync + bytemuck::Pod,
{
    let (m, n) = (c.nrows(), c.ncols());
    if threads <= 1 || (m < 2 && n < 2) {
        // A storage CBLAS cannot take (none arises from `Scalar::gemm_layout`) goes to faer.
        #[cfg(feature = "blas-external")]
        let c = {
            let mut c = c;
            if gemm == Gemm::Blas && T::blas_gemm(c.as_mut(), acc, a, b) {
                return;
            }
            c
        };
        let _ = gemm;
        tiled_gemm(c, acc, a, b);
        return;
    }
    let t0 = threads / 2;
    let t1 = threads - t0;
    if m >= n {
        let mid = m * t0 / threads;
        let (c0, c1) = c.split_at_row_mut(mid);
        let (a0, a1) = a.split_at_row(mid);
        rayon::join(
            || split_gemm(c0, acc, a0, b, t0, gemm),
            || split_gemm(c1, acc, a1, b, t1, gemm),
        );
    } else {
        let mid = n * t0 / threads;
        let (c0, c1) = c.split_at_col_mut(mid);
        let (b0, b1) = b.split_at_col(mid);
        rayon::join(
            || split_gemm(c0, acc, a, b0, t0, gemm),
            || split_gemm(c1, acc, a, b1, t1, gemm),
        );
    }
}

/// Side of the square `k x n` panels of `b` that [`tiled_gemm`] hands to faer for elements of
/// `bytes` bytes: a panel fills about three quarters of the L2 cache (read once from sysfs;
/// 1 MiB when unknown), rounded down to a multiple of 32 and at least 128.
fn panel_side(bytes: usize) -> usize {
    let side = ((l2_bytes() * 3 / 4 / bytes.max(1)) as f64).sqrt() as usize;
    (side / 32 * 32).max(128)
}

/// The L2 cache size in bytes, read once from sysfs (1 MiB when unknown).
fn l2_bytes() -> usize {
    static L2: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *L2.get_or_init(|| {
        std::fs::read_to_string("/sys/devices/system/cpu/cpu0/cache/index2/size")
            .ok()
            .and_then(|s| parse_cache_size(s.trim()))
            .unwrap_or(1 << 20)
    })
}

/// A sysfs cache size such as `2048K` or `1M`, in bytes.
fn parse_cache_size(s: &str) -> Option<usize> {
    let (num, mult) = match s.as_bytes().last()? {
        b'K' => (&s[..s.len() - 1], 1 << 10),
        b'M' => (&s[..s.len() - 1], 1 << 20),
        b'G' => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    num.parse::<usize>().ok().map(|v| v * mult)
}

/// Rows of `c` per call in [`tiled_gemm`], so that the rows of `a` a call packs stay bounded.
const PANEL_ROWS: usize = 1024;

/// `c (+)= a b` on the calling thread, as faer GEMMs over `k x n` panels of `b` sized to the L2
/// cache (and row blocks of [`PANEL_ROWS`]). faer sizes its blocks from the L3 size the system
/// reports; where that is wrong (a VM here reports 480 MiB) one large call streams memory, and
/// two ranks sharing a node then ran at 104 GFLOP/s together against 130 with these panels.
///
/// A left operand stored transposed (column-major under a row-major `c`) is the one layout
/// faer reads slowly (0.7-0.9 of its plain rate, on the AMD EPYC of issue 12); see
/// [`Transposed`] for what is done instead.
fn tiled_gemm<T: faer::traits::ComplexField + Copy + bytemuck::Pod>(
    mut c: faer::MatMut<'_, T>,
    acc: faer::Accum,
    a: faer::MatRef<'_, T>,
    b: faer::MatRef<'_, T>,
) {
    let (m, n, k) = (c.nrows(), c.ncols(), a.ncols());
    let side = panel_side(std::mem::size_of::<T>());
    let way = Transposed::of(a, b, c.col_stride() != 1);
    if way != Transposed::InPlace {
        return panels_reordered(c, acc, a, b, way, side);
    }
    if k <= side && n <= side && m <= PANEL_ROWS || k == 0 {
        faer::linalg::matmul::matmul(
            c,
            acc,
            a,
            b,
            faer::traits::math_utils::one::<T>(),
            faer::Par::Seq,
        );
        return;
    }
    for k0 in (0..k).step_by(side) {
        let kk = side.min(k - k0);
        // The first panel of k applies the caller's accumulation; the later ones add to it.
        let acc_k = if k0 == 0 { acc } else { faer::Accum::Add };
        for j0 in (0..n).step_by(side) {
            let nn = side.min(n - j0);
            for i0 in (0..m).step_by(PANEL_ROWS) {
                let mm = PANEL_ROWS.min(m - i0);
                faer::linalg::matmul::matmul(
                    c.as_mut().submatrix_mut(i0, j0, mm, nn),
                    acc_k,
                    a.submatrix(i0, k0, mm, kk),
                    b.submatrix(k0, j0, kk, nn),
                    faer::traits::math_utils::one::<T>(),
                    faer::Par::Seq,
                );
            }
        }
    }
}

/// How [`tiled_gemm`] runs a product whose left operand is column-major under a row-major
/// output, which faer reads at a lower rate than any other layout; faer's fast layouts are a
/// column-major output with a column-major right operand, or a row-major output with a
/// row-major left one. faer reads that left operand in place with the stride of its storage;
/// at a power-of-two stride its panel lands in a few sets of the L1 cache and misses
/// (gemm bench, Sapphire Rapids: 256 x 32 x 2048 at 0.52 of the plain rate, 0.84 at a stride
/// of 264 words).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Transposed {
    /// Every other layout, short summed extents and products too small for a copy to pay:
    /// faer as called.
    InPlace,
    /// Many output columns: panels of `a` copied row-major (a copied word serves `n`
    /// multiply-adds).
    PackLeft,
    /// Both operands column-major, a long summed index and many columns: the output computed
    /// in blocks of a fraction of the L2 cache, each column-major in scratch (faer's fast
    /// layout) and written back while in cache, a copied word of `c` serving `k`
    /// multiply-adds.
    ColumnOutput,
    /// Few output columns and a long summed index: faer on chunks of the summed index of `a`,
    /// so that a chunk's panel stays in the L1 cache; at strides that would crowd it into a
    /// few sets of that cache, each chunk is first copied as stored, row by row (a memcpy
    /// each), into scratch whose rows are padded to an odd number of cache lines.
    PaddedRows,
}

/// Whether an `m x n x k` product under a row-major output reads a left operand stored
/// transposed in faer's slower way (no copy of it and no column-major output), with the
/// right operand stored transposed when `b_trans`.
pub(crate) fn reads_left_in_place(m: usize, n: usize, k: usize, b_trans: bool) -> bool {
    let a_col = m > 1 && k > 1;
    let b_col = b_trans && k > 1 && n > 1;
    a_col && Transposed::choose(m, n, k, a_col, b_col, false) == Transposed::InPlace
}

/// Products below this many multiply-adds run as called (a copy costs more than it saves).
const REORDER_MIN_MADDS: usize = 1 << 18;

/// From this summed extent on, a product of two transposed operands computes its output
/// column-major, and one with few columns copies its left operand's rows (gemm bench,
/// Sapphire Rapids: 4096 x 64 x 64 ran in place at 0.93-0.96 of the plain rate, with its
/// output column-major at 0.58-0.69 and its rows copied at 0.72-0.86).
const REORDER_MIN_DEPTH: usize = 256;

/// From this many output columns on, a product of two transposed operands computes its
/// output column-major; fewer copy the left operand's rows (gemm bench, Sapphire Rapids,
/// 256 x 32 x 2048: column-major output 0.59-0.64, rows copied 0.68).
const COLUMN_OUTPUT_MIN_COLS: usize = 64;

/// From this many output columns on (and [`PACK_ROWS`] rows: a thin block ran 256 x 32 x 2048's
/// other orientation at 0.78), a transposed left operand is packed row-major rather than
/// read in place (gemm bench, EPYC: 512^3 and 1024^3 at 0.93-0.96 of the plain
/// rate packed, against 0.80 in place).
pub(crate) const PACK_LEFT_MIN_COLS: usize = 256;

impl Transposed {
    fn of<T>(a: faer::MatRef<'_, T>, b: faer::MatRef<'_, T>, c_col_major: bool) -> Self {
        let (m, k, n) = (a.nrows(), a.ncols(), b.ncols());
        let col_major =
            |r: isize, c: isize, rows: usize, cols: usize| rows > 1 && cols > 1 && r == 1 && c != 1;
        let a_col = col_major(a.row_stride(), a.col_stride(), m, k);
        let b_col = col_major(b.row_stride(), b.col_stride(), k, n);
        Self::choose(m, n, k, a_col, b_col, c_col_major)
    }

    fn choose(m: usize, n: usize, k: usize, a_col: bool, b_col: bool, c_col_major: bool) -> Self {
        if c_col_major
            || !a_col
            || n < 2
            || m.saturating_mul(n).saturating_mul(k) < REORDER_MIN_MADDS
        {
            Transposed::InPlace
        } else if b_col && k >= REORDER_MIN_DEPTH && n >= COLUMN_OUTPUT_MIN_COLS {
            Transposed::ColumnOutput
        } else if !b_col && n >= PACK_LEFT_MIN_COLS && m >= PACK_ROWS {
            Transposed::PackLeft
        } else if k >= REORDER_MIN_DEPTH && m >= PADDED_MIN_ROWS {
            Transposed::PaddedRows
        } else {
            Transposed::InPlace
        }
    }
}

/// [`tiled_gemm`] for the layouts [`Transposed`] reorders.
fn panels_reordered<T: faer::traits::ComplexField + Copy + bytemuck::Pod>(
    c: faer::MatMut<'_, T>,
    acc: faer::Accum,
    a: faer::MatRef<'_, T>,
    b: faer::MatRef<'_, T>,
    way: Transposed,
    side: usize,
) {
    match way {
        Transposed::ColumnOutput => column_output(c, acc, a, b),
        Transposed::PaddedRows => padded_rows(c, acc, a, b),
        Transposed::PackLeft => pack_left(c, acc, a, b, side),
        Transposed::InPlace => faer::linalg::matmul::matmul(
            c,
            acc,
            a,
            b,
            faer::traits::math_utils::one::<T>(),
            faer::Par::Seq,
        ),
    }
}

/// [`Transposed::PackLeft`]: per row block of `c` ([`PACK_ROWS`]) and panel of `k` (`side`),
/// the panel of `a` copied row-major once and multiplied by each column panel of `b` in turn
/// (so a word of `a` is copied once whatever `n`).
fn pack_left<T: faer::traits::ComplexField + Copy + bytemuck::Pod>(
    mut c: faer::MatMut<'_, T>,
    acc: faer::Accum,
    a: faer::MatRef<'_, T>,
    b: faer::MatRef<'_, T>,
    side: usize,
) {
    let (m, n, k) = (c.nrows(), c.ncols(), a.ncols());
    let rows = PACK_ROWS.min(m);
    let kc = side.min(k);
    with_scratch::<T, _>(rows * kc, |abuf| {
        for i0 in (0..m).step_by(rows) {
            let mm = rows.min(m - i0);
            for k0 in (0..k).step_by(side) {
                let kk = side.min(k - k0);
                let ap = pack_row_major(&mut abuf[..mm * kk], a.submatrix(i0, k0, mm, kk));
                // The first panel of k applies the caller's accumulation; the later ones add.
                let acc_k = if k0 == 0 { acc } else { faer::Accum::Add };
                for j0 in (0..n).step_by(side) {
                    let nn = side.min(n - j0);
                    faer::linalg::matmul::matmul(
                        c.as_mut().submatrix_mut(i0, j0, mm, nn),
                        acc_k,
                        ap,
                        b.submatrix(k0, j0, kk, nn),
                        faer::traits::math_utils::one::<T>(),
                        faer::Par::Seq,
                    );
                }
            }
        }
    });
}

/// Most columns of a block of `c` in [`Transposed::ColumnOutput`].
const COLUMN_BLOCK_COLS: usize = 512;

/// [`Transposed::ColumnOutput`]: blocks of `c` of at most [`COLUMN_BLOCK_COLS`] columns and an
/// eighth of the L2 cache (gemm bench, Sapphire Rapids, 512^3: 64 x 512 blocks at 0.97 of the
/// plain rate, 128 x 256 at 0.89, whole row blocks of 1024 out of cache at 0.64), each the
/// whole summed extent in one faer call into column-major scratch, then copied into `c`.
fn column_output<T: faer::traits::ComplexField + Copy + bytemuck::Pod>(
    mut c: faer::MatMut<'_, T>,
    acc: faer::Accum,
    a: faer::MatRef<'_, T>,
    b: faer::MatRef<'_, T>,
) {
    let (m, n) = (c.nrows(), c.ncols());
    let nb = COLUMN_BLOCK_COLS.min(n);
    let words = l2_bytes() / 8 / std::mem::size_of::<T>();
    // At least a few of faer's 48-row register blocks per call.
    let mb = (words / nb).max(48).min(m);
    with_scratch::<T, _>(mb * nb, |tbuf| {
        for j0 in (0..n).step_by(nb) {
            let nn = nb.min(n - j0);
            for i0 in (0..m).step_by(mb) {
                let mm = mb.min(m - i0);
                let t = faer::MatMut::from_column_major_slice_mut(&mut tbuf[..mm * nn], mm, nn);
                faer::linalg::matmul::matmul(
                    t,
                    faer::Accum::Replace,
                    a.subrows(i0, mm),
                    b.subcols(j0, nn),
                    faer::traits::math_utils::one::<T>(),
                    faer::Par::Seq,
                );
                let mut dst = c.as_mut().submatrix_mut(i0, j0, mm, nn);
                for i in 0..mm {
                    let row = dst
                        .as_mut()
                        .row_mut(i)
                        .try_as_row_major_mut()
                        .expect("a row-major output")
                        .as_slice_mut();
                    let col = tbuf[i..].iter().step_by(mm);
                    match acc {
                        faer::Accum::Replace => row.iter_mut().zip(col).for_each(|(d, &x)| *d = x),
                        faer::Accum::Add => row.iter_mut().zip(col).for_each(|(d, &x)| *d += x),
                    }
                }
            }
        }
    });
}

/// Fewer output rows than this (rows of the left operand's storage of at most 8 cache lines
/// for f64) are read by faer in place in one call: their panels do not crowd the L1 cache, and
/// chunks of the summed index only added calls (gemm bench, 32 x 128 x 65536 `ji,jk`: 0.67-0.84
/// of the plain rate in chunks against 0.90-0.97 in one call, load 7).
const PADDED_MIN_ROWS: usize = 64;

/// Rows of `a` (output rows) per block in [`Transposed::PaddedRows`].
const PADDED_ROWS: usize = 1024;

/// Summed extent per chunk in [`Transposed::PaddedRows`] when the chunk is copied (gemm
/// bench, Sapphire Rapids, 256 x 32 x 2048: chunks of 128 at 0.69 of the plain rate, 256 at
/// 0.62, 512 at 0.56).
const PADDED_DEPTH: usize = 128;

/// Summed extent per chunk in [`Transposed::PaddedRows`] when `a` is read where it is (a
/// Sapphire Rapids, 264 x 32 x 2048: 0.90 of the plain rate in chunks of 64, 0.83 of 128,
/// 0.62 in one call; 300 x 40 x 2000: 0.90, 0.84, 0.63).
const IN_PLACE_DEPTH: usize = 64;

/// Whether [`Transposed::PaddedRows`] copies a left operand whose summed index steps by
/// `stride_bytes`: when that stride is a whole number of cache lines with a power-of-two
/// factor above 8, so that the rows of a chunk fall into at most 8 of the L1 cache's 64 sets
/// (256 x 32 x 2048, 32 lines: 0.69 copied, 0.62-0.66 in place); at other strides the rows
/// spread over the sets and a chunked read in place saves the copy.
fn copies_rows(stride_bytes: usize) -> bool {
    stride_bytes.is_multiple_of(64 * 16)
}

/// [`Transposed::PaddedRows`]: per row block of `c` and chunk of the summed index, faer on
/// `a`'s chunk, read in place or, at strides [`copies_rows`] names, copied first column by
/// column (rows of its storage, contiguous) into 64-byte aligned scratch at a stride of an
/// odd number of cache lines.
fn padded_rows<T: faer::traits::ComplexField + Copy + bytemuck::Pod>(
    mut c: faer::MatMut<'_, T>,
    acc: faer::Accum,
    a: faer::MatRef<'_, T>,
    b: faer::MatRef<'_, T>,
) {
    let (m, k) = (c.nrows(), a.ncols());
    let size = std::mem::size_of::<T>();
    let copy = copies_rows(a.col_stride().unsigned_abs() * size);
    let rows = PADDED_ROWS.min(m);
    let kc = if copy { PADDED_DEPTH } else { IN_PLACE_DEPTH }.min(k);
    let line = (64 / size).max(1);
    let ld = line * (rows.div_ceil(line) | 1);
    let words = if copy { ld * kc + line } else { 0 };
    with_scratch::<T, _>(words, |buf| {
        let off = buf.as_ptr().align_offset(64).min(line).min(buf.len());
        let buf = &mut buf[off..];
        for i0 in (0..m).step_by(rows) {
            let mm = rows.min(m - i0);
            for k0 in (0..k).step_by(kc) {
                let kk = kc.min(k - k0);
                let ap = a.submatrix(i0, k0, mm, kk);
                let ap = if copy {
                    for (p, dst) in buf.chunks_mut(ld).take(kk).enumerate() {
                        let col = ap
                            .col(p)
                            .try_as_col_major()
                            .expect("a column-major operand");
                        dst[..mm].copy_from_slice(col.as_slice());
                    }
                    faer::MatRef::from_column_major_slice_with_stride(
                        &buf[..(kk - 1) * ld + mm],
                        mm,
                        kk,
                        ld,
                    )
                } else {
                    ap
                };
                // The first chunk applies the caller's accumulation; the later ones add.
                let acc_k = if k0 == 0 { acc } else { faer::Accum::Add };
                faer::linalg::matmul::matmul(
                    c.as_mut().subrows_mut(i0, mm),
                    acc_k,
                    ap,
                    b.subrows(k0, kk),
                    faer::traits::math_utils::one::<T>(),
                    faer::Par::Seq,
                );
            }
        }
    });
}

/// Rows of `c` per block in [`pack_left`]: a packed panel of `a` then holds
/// `PACK_ROWS x side` words, within the L2 cache beside `b`'s panel.
const PACK_ROWS: usize = 256;

/// Copies the column-major `src` into `buf` row-major and views it there: eight columns at a
/// time, so that reads run down eight columns and each row's eight writes share a cache line.
fn pack_row_major<'b, T: Copy>(buf: &'b mut [T], src: faer::MatRef<'_, T>) -> faer::MatRef<'b, T> {
    let (r, c) = (src.nrows(), src.ncols());
    const W: usize = 8;
    for j0 in (0..c).step_by(W) {
        let w = W.min(c - j0);
        let cols: Vec<&[T]> = (j0..j0 + w)
            .map(|j| {
                src.col(j)
                    .try_as_col_major()
                    .map(|col| col.as_slice())
                    .expect("a column-major operand")
            })
            .collect();
        for (i, row) in buf[..r * c].chunks_exact_mut(c).enumerate() {
            for (d, col) in row[j0..j0 + w].iter_mut().zip(&cols) {
                *d = col[i];
            }
        }
    }
    faer::MatRef::from_row_major_slice(&buf[..r * c], r, c)
}

thread_local! {
    /// Per thread, the words [`tiled_gemm`] copies operands and output blocks into, kept
    /// between calls so that repeated steps do not fault fresh pages in.
    static SCRATCH: std::cell::RefCell<Vec<u64>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Runs `f` on a scratch slice of `len` elements of `T` from this thread's buffer.
fn with_scratch<T: bytemuck::Pod, R>(len: usize, f: impl FnOnce(&mut [T]) -> R) -> R {
    let size = std::mem::size_of::<T>();
    let words = (len * size).div_ceil(8);
    let mut buf = SCRATCH.with(|s| std::mem::take(&mut *s.borrow_mut()));
    if buf.len() < words {
        buf.resize(words, 0);
    }
    let all: &mut [T] = bytemuck::cast_slice_mut(&mut buf[..]);
    let r = f(&mut all[..len]);
    SCRATCH.with(|s| *s.borrow_mut() = buf);
    r
}

/// The kernel of [`crate::atb`] for a left operand stored transposed, where it applies: f64
/// only (f32 and the complex types run through faer: the kernel is real f64 SIMD).
trait TransposedRows: Sized {
    /// Computes the product and returns `true`, or returns `false` without touching `c`.
    #[allow(clippy::too_many_arguments)]
    fn at_b(
        _m: usize,
        _n: usize,
        _k: usize,
        _a: &[Self],
        _b: &[Self],
        _c: &mut [Self],
        _accumulate: bool,
        _b_trans: bool,
        _threads: usize,
    ) -> bool {
        false
    }
}

impl TransposedRows for f32 {}
impl TransposedRows for Complex32 {}
impl TransposedRows for Complex64 {}

impl TransposedRows for f64 {
    fn at_b(
        m: usize,
        n: usize,
        k: usize,
        a: &[f64],
        b: &[f64],
        c: &mut [f64],
        accumulate: bool,
        b_trans: bool,
        threads: usize,
    ) -> bool {
        // With `b` stored transposed too, the kernel copies `b` into order block by block, a
        // pass over `b` that faer's own packing does anyway: worth it only while `b` is small
        // beside `a` (80 x 60 x 5000: 0.78 of the plain rate against faer's 0.85; 256 x 32 x
        // 2048: 0.89 against 0.59-0.71).
        if !crate::atb::applies(m, n, k) || (b_trans && 4 * n > m) {
            return false;
        }
        let op = crate::atb::AtB {
            m,
            n,
            k,
            a,
            lda: m,
            b,
            b_trans,
            c: &mut c[..m * n],
            accumulate,
        };
        at_b_split(op, threads)
    }
}

/// [`crate::atb::at_b`] on `threads` threads: the output rows cut in two at a whole number of
/// cache lines, the halves run as a rayon join.
fn at_b_split(op: crate::atb::AtB<'_>, threads: usize) -> bool {
    let mid = (op.m * (threads / 2) / threads.max(1)) / 8 * 8;
    if threads <= 1 || mid < 64 || op.m - mid < 64 {
        return crate::atb::at_b(op);
    }
    let t0 = threads / 2;
    let (c0, c1) = op.c.split_at_mut(mid * op.n);
    let first = crate::atb::AtB {
        m: mid,
        c: c0,
        ..op
    };
    let second = crate::atb::AtB {
        m: op.m - mid,
        a: &op.a[mid..],
        c: c1,
        ..op
    };
    let (r0, r1) = rayon::join(
        || at_b_split(first, t0),
        || at_b_split(second, threads - t0),
    );
    r0 && r1
}

macro_rules! impl_scalar {
    ($t:ty, $dtype:expr) => {
        impl Scalar for $t {
            const DTYPE: DType = $dtype;
            fn from_parts(re: f64, _im: f64) -> Self {
                re as $t
            }
            fn parts(self) -> (f64, f64) {
                (self as f64, 0.0)
            }
            fn from_i64(x: i64) -> Self {
                x as $t
            }
            fn from_u64(x: u64) -> Self {
                x as $t
            }
            fn magnitude(self) -> f64 {
                self.abs() as f64
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
                faer_gemm(m, n, k, a, b, c, accumulate, layout);
            }
        }
    };
}

impl_scalar!(f64, DType::F64);
impl_scalar!(f32, DType::F32);

macro_rules! impl_complex_scalar {
    ($t:ty, $part:ty, $dtype:expr) => {
        impl Scalar for $t {
            const DTYPE: DType = $dtype;
            fn from_parts(re: f64, im: f64) -> Self {
                <$t>::new(re as $part, im as $part)
            }
            fn parts(self) -> (f64, f64) {
                (self.re as f64, self.im as f64)
            }
            fn from_i64(x: i64) -> Self {
                <$t>::new(x as $part, 0.0)
            }
            fn from_u64(x: u64) -> Self {
                <$t>::new(x as $part, 0.0)
            }
            fn magnitude(self) -> f64 {
                (self.re as f64).hypot(self.im as f64)
            }
            fn extend_bytes(xs: &[Self], out: &mut Vec<u8>) {
                out.reserve(xs.len() * Self::BYTES);
                for x in xs {
                    out.extend_from_slice(&x.re.to_le_bytes());
                    out.extend_from_slice(&x.im.to_le_bytes());
                }
            }
            fn from_bytes(bytes: &[u8], out: &mut Vec<Self>) {
                const PART: usize = std::mem::size_of::<$part>();
                out.reserve(bytes.len() / Self::BYTES);
                let part = |c: &[u8]| {
                    let mut a = [0u8; PART];
                    a.copy_from_slice(c);
                    <$part>::from_le_bytes(a)
                };
                for c in bytes.chunks_exact(Self::BYTES) {
                    out.push(<$t>::new(part(&c[..PART]), part(&c[PART..])));
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
                faer_gemm(m, n, k, a, b, c, accumulate, layout);
            }
        }
    };
}

impl_complex_scalar!(Complex32, f32, DType::C64);
impl_complex_scalar!(Complex64, f64, DType::C128);

/// [`Scalar::gemm_layout`] of every type, split over the rank's threads: under
/// [`Gemm::Blas`] (see [`crate::gemm::current`]) the system CBLAS, which reads transposed
/// operands in place itself; else the transposed-rows kernel where it applies (f64), else
/// faer's GEMM.
#[allow(clippy::too_many_arguments)]
fn faer_gemm<T>(
    m: usize,
    n: usize,
    k: usize,
    a: &[T],
    b: &[T],
    c: &mut [T],
    accumulate: bool,
    layout: Layout,
) where
    T: TransposedRows + BlasGemm + faer::traits::ComplexField + Copy + Send + Sync + bytemuck::Pod,
{
    let threads = crate::threads::gemm_threads(m, n, k);
    let gemm = crate::gemm::current();
    if gemm == Gemm::Faer
        && layout.a_trans
        && T::at_b(m, n, k, a, b, c, accumulate, layout.b_trans, threads)
    {
        return;
    }
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
    split_gemm(c, acc, a, b, threads, gemm);
}

/// Makes faer's GEMM take its per-thread packing buffers (a few MiB, allocated by faer
/// without a way to refuse) on the calling thread now, once per thread, before the run's
/// blocks are allocated: a run at its memory limit then fails at a block's allocation, with
/// an error, and not inside faer with an abort.
pub(crate) fn warm_gemm() {
    thread_local! {
        static WARM: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    }
    if WARM.get() {
        return;
    }
    // Large enough for faer's packed kernel (smaller products skip the buffers).
    let n = 64;
    let a = vec![0.0f64; n * n];
    let mut c = vec![0.0f64; n * n];
    let am = faer::MatRef::from_row_major_slice(&a, n, n);
    let cm = faer::MatMut::from_row_major_slice_mut(&mut c, n, n);
    faer::linalg::matmul::matmul(cm, faer::Accum::Replace, am, am, 1.0, faer::Par::Seq);
    std::hint::black_box(&c);
    WARM.set(true);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every element type dispatches to the Scalar of that type, whose size it states.
    #[test]
    fn every_dtype_has_a_scalar() {
        for d in DType::ALL {
            let (dtype, size) = crate::with_dtype!(d, T => (T::DTYPE, std::mem::size_of::<T>()));
            assert_eq!(dtype, d);
            assert_eq!(size, d.bytes());
        }
        assert_eq!(<f32 as Scalar>::BYTES, 4);
        assert_eq!(<f64 as Scalar>::BYTES, 8);
    }

    #[test]
    fn integer_conversions_round_once() {
        // 2^24 + 1 is not an f32: rounded once to even, not through f64.
        assert_eq!(f32::from_i64((1 << 24) + 1), 16_777_216.0);
        assert_eq!(f32::from_u64(u64::MAX), 18_446_744_073_709_551_616.0);
        assert_eq!(f64::from_i64(-3), -3.0);
        assert_eq!((-2.5f32).magnitude(), 2.5);
        assert_eq!((-2.5f64).magnitude(), 2.5);
    }

    /// Complex GEMM in every storage of its operands, against a triple loop; parts and
    /// bytes round-trip.
    #[test]
    fn complex_gemm_and_parts() {
        let (m, n, k) = (37, 29, 300);
        let z = |x: usize, s: usize| {
            Complex64::new(((x * s) % 13) as f64 - 6.0, ((x * 3 + s) % 7) as f64 - 3.0)
        };
        let a: Vec<Complex64> = (0..m * k).map(|x| z(x, 7)).collect();
        let b: Vec<Complex64> = (0..k * n).map(|x| z(x, 5)).collect();
        for (a_trans, b_trans) in [(false, false), (true, false), (false, true), (true, true)] {
            let at = |i: usize, p: usize| if a_trans { a[p * m + i] } else { a[i * k + p] };
            let bt = |p: usize, j: usize| if b_trans { b[j * k + p] } else { b[p * n + j] };
            let mut c = vec![Complex64::new(1.0, -1.0); m * n];
            let layout = Layout { a_trans, b_trans };
            Complex64::gemm_layout(m, n, k, &a, &b, &mut c, true, layout);
            for (i, j) in [(0, 0), (m - 1, n - 1), (17, 3)] {
                let want = (0..k).fold(Complex64::new(1.0, -1.0), |s, p| s + at(i, p) * bt(p, j));
                assert_eq!(c[i * n + j], want, "({i}, {j}) with {layout:?}");
            }
        }
        let x = Complex32::from_parts(1.5, -2.25);
        assert_eq!(x.parts(), (1.5, -2.25));
        assert_eq!(Complex64::new(3.0, 4.0).magnitude(), 5.0);
        assert_eq!(Complex64::from_i64(-3), Complex64::new(-3.0, 0.0));
        let mut bytes = Vec::new();
        Complex32::extend_bytes(&[x, Complex32::new(0.5, 8.0)], &mut bytes);
        assert_eq!(bytes.len(), 16);
        let mut back = Vec::new();
        Complex32::from_bytes(&bytes, &mut back);
        assert_eq!(back, vec![x, Complex32::new(0.5, 8.0)]);
        assert_eq!(<Complex64 as Scalar>::BYTES, 16);
    }

    #[test]
    fn cache_sizes_parse() {
        assert_eq!(parse_cache_size("2048K"), Some(2 << 20));
        assert_eq!(parse_cache_size("1M"), Some(1 << 20));
        assert_eq!(parse_cache_size("512"), Some(512));
        assert_eq!(parse_cache_size("x"), None);
        assert_eq!(parse_cache_size(""), None);
    }

    /// The panelled GEMM (dimensions past the panel side and the row block, ragged edges,
    /// both storages of each operand, accumulation) against a plain triple loop, on shapes
    /// that take each way of reading a transposed left operand.
    #[test]
    fn tiled_gemm_matches_naive() {
        let side = panel_side(8);
        let many_cols = (PANEL_ROWS + 37, side + 29, 2 * side + 11);
        let deep = (PANEL_ROWS + 5, 40, REORDER_MIN_DEPTH + 3);
        let wide_deep = (130, COLUMN_BLOCK_COLS + 21, REORDER_MIN_DEPTH + 5);
        let short = (300, 40, REORDER_MIN_DEPTH - 1);
        let few_rows = (PADDED_MIN_ROWS - 1, 40, 4 * REORDER_MIN_DEPTH);
        let view = |(m, n, k): (usize, usize, usize), a_trans: bool, b_trans: bool| {
            let a = vec![0.0f64; m * k];
            let b = vec![0.0f64; k * n];
            let a = if a_trans {
                faer::MatRef::from_row_major_slice(&a, k, m).transpose()
            } else {
                faer::MatRef::from_row_major_slice(&a, m, k)
            };
            let b = if b_trans {
                faer::MatRef::from_row_major_slice(&b, n, k).transpose()
            } else {
                faer::MatRef::from_row_major_slice(&b, k, n)
            };
            Transposed::of(a, b, false)
        };
        assert_eq!(view(many_cols, true, false), Transposed::PackLeft);
        assert_eq!(view(many_cols, true, true), Transposed::ColumnOutput);
        assert_eq!(view(wide_deep, true, true), Transposed::ColumnOutput);
        assert_eq!(view(deep, true, true), Transposed::PaddedRows);
        assert_eq!(view(deep, true, false), Transposed::PaddedRows);
        assert_eq!(view(short, true, false), Transposed::InPlace);
        assert_eq!(view(few_rows, true, false), Transposed::InPlace);
        assert_eq!(view(deep, false, true), Transposed::InPlace);
        // Rows at 16 cache lines are copied, at 16.25 or 17 read in place.
        assert!(copies_rows(128 * 8) && copies_rows(1024 * 8));
        assert!(!copies_rows(130 * 8) && !copies_rows(136 * 8) && !copies_rows(264 * 8));
        let deep_copied = (PADDED_ROWS + 128, 9, REORDER_MIN_DEPTH + 3);
        assert_eq!(view(deep_copied, true, false), Transposed::PaddedRows);
        for shape in [many_cols, deep, deep_copied, wide_deep, short, few_rows] {
            check_against_naive(shape);
        }
    }

    fn check_against_naive((m, n, k): (usize, usize, usize)) {
        let side = panel_side(8);
        let a: Vec<f64> = (0..m * k).map(|x| ((x * 7) % 13) as f64 - 6.0).collect();
        let b: Vec<f64> = (0..k * n).map(|x| ((x * 5) % 11) as f64 - 5.0).collect();
        for (a_trans, b_trans) in [(false, false), (true, false), (false, true), (true, true)] {
            let at = |i: usize, p: usize| if a_trans { a[p * m + i] } else { a[i * k + p] };
            let bt = |p: usize, j: usize| if b_trans { b[j * k + p] } else { b[p * n + j] };
            let mut c = vec![1.0f64; m * n];
            let layout = Layout { a_trans, b_trans };
            f64::gemm_layout(m, n, k, &a, &b, &mut c, true, layout);
            for (i, j) in [
                (0, 0),
                (m - 1, n - 1),
                (PANEL_ROWS.min(m - 1), side.min(n - 1)),
                (17, n - 3),
                (m / 2, 1),
            ] {
                let want: f64 = 1.0 + (0..k).map(|p| at(i, p) * bt(p, j)).sum::<f64>();
                assert_eq!(c[i * n + j], want, "({i}, {j}) with {layout:?}");
            }
            let mut d = vec![9.0f64; m * n];
            f64::gemm_layout(m, n, k, &a, &b, &mut d, false, layout);
            assert!(c.iter().zip(&d).all(|(x, y)| x - 1.0 == *y), "{layout:?}");
        }
    }
}
