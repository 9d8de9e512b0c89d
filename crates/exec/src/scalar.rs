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
fn split_gemm<T: faer::traits::ComplexField + Copy + Send + Sync + From<f32> + bytemuck::Pod>(
    c: faer::MatMut<'_, T>,
    acc: faer::Accum,
    a: faer::MatRef<'_, T>,
    b: faer::MatRef<'_, T>,
    threads: usize,
) {
    let (m, n) = (c.nrows(), c.ncols());
    if threads <= 1 || (m < 2 && n < 2) {
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

/// Side of the square `k x n` panels of `b` that [`tiled_gemm`] hands to faer for elements of
/// `bytes` bytes: a panel fills about three quarters of the L2 cache (read once from sysfs;
/// 1 MiB when unknown), rounded down to a multiple of 32 and at least 128.
fn panel_side(bytes: usize) -> usize {
    static L2: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    let l2 = *L2.get_or_init(|| {
        std::fs::read_to_string("/sys/devices/system/cpu/cpu0/cache/index2/size")
            .ok()
            .and_then(|s| parse_cache_size(s.trim()))
            .unwrap_or(1 << 20)
    });
    let side = ((l2 * 3 / 4 / bytes.max(1)) as f64).sqrt() as usize;
    (side / 32 * 32).max(128)
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
fn tiled_gemm<T: faer::traits::ComplexField + Copy + From<f32> + bytemuck::Pod>(
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
        faer::linalg::matmul::matmul(c, acc, a, b, T::from(1.0f32), faer::Par::Seq);
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
                    T::from(1.0f32),
                    faer::Par::Seq,
                );
            }
        }
    }
}

/// How [`tiled_gemm`] runs a product whose left operand is column-major under a row-major
/// output, which faer reads at a lower rate than any other layout; faer's fast layouts are a
/// column-major output with a column-major right operand, or a row-major output with a
/// row-major left one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Transposed {
    /// Every other layout, and products too small for a copy to pay: faer as called.
    InPlace,
    /// Many output columns: panels of `a` copied row-major (a copied word serves `n`
    /// multiply-adds).
    PackLeft,
    /// Both operands column-major and a long summed index: each row block of `c` computed
    /// column-major in a scratch block (faer's fast layout) and written back, a copied word
    /// of `c` serving `k` multiply-adds.
    ColumnOutput,
}

/// Whether an `m x n x k` product under a row-major output reads a left operand stored
/// transposed in faer's slower way (no panel copy and no column-major output for it), with the
/// right operand stored transposed when `b_trans`.
pub(crate) fn reads_left_in_place(m: usize, n: usize, k: usize, b_trans: bool) -> bool {
    let a_col = m > 1 && k > 1;
    let b_col = b_trans && k > 1 && n > 1;
    a_col && Transposed::choose(m, n, k, a_col, b_col, false) == Transposed::InPlace
}

/// Products below this many multiply-adds run as called (a copy costs more than it saves).
const REORDER_MIN_MADDS: usize = 1 << 18;

/// From this summed extent on, a product of two transposed operands computes its output
/// column-major (gemm bench, EPYC: k = 64 lost to the write-back, k >= 1024 gained).
const COLUMN_OUTPUT_MIN_DEPTH: usize = 1024;

/// Up to this many output columns a product of two transposed operands computes its output
/// column-major; a wider one (1024^3: 0.83 of the plain rate) is better run the other way
/// round by the step (both operands then plain, the output permuted).
const COLUMN_OUTPUT_MAX_COLS: usize = 256;

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
        } else if b_col && k >= COLUMN_OUTPUT_MIN_DEPTH && n <= COLUMN_OUTPUT_MAX_COLS {
            Transposed::ColumnOutput
        } else if !b_col && n >= PACK_LEFT_MIN_COLS && m >= PACK_ROWS {
            Transposed::PackLeft
        } else {
            Transposed::InPlace
        }
    }
}

/// [`tiled_gemm`] for the layouts [`Transposed`] reorders: per block of `c` (row blocks of
/// [`PACK_ROWS`], column panels of `side`), the panels of `k` in turn.
fn panels_reordered<T: faer::traits::ComplexField + Copy + From<f32> + bytemuck::Pod>(
    mut c: faer::MatMut<'_, T>,
    acc: faer::Accum,
    a: faer::MatRef<'_, T>,
    b: faer::MatRef<'_, T>,
    way: Transposed,
    side: usize,
) {
    let (m, n, k) = (c.nrows(), c.ncols(), a.ncols());
    // A column-major output block takes the whole summed extent in one call (both operands
    // are in faer's fast layout, so there is nothing to keep in cache but the block).
    let (rows, kside) = match way {
        Transposed::ColumnOutput => (PANEL_ROWS.min(m), k),
        _ => (PACK_ROWS.min(m), side),
    };
    let (kc, nc) = (kside.min(k), side.min(n));
    // Scratch for the packed left panel, or for the column-major output block.
    let (na, nt) = match way {
        Transposed::PackLeft => (rows * kc, 0),
        Transposed::ColumnOutput => (0, rows * nc),
        Transposed::InPlace => (0, 0),
    };
    with_scratch::<T, _>([na, nt], |[abuf, tbuf]| {
        for i0 in (0..m).step_by(rows) {
            let mm = rows.min(m - i0);
            for j0 in (0..n).step_by(side) {
                let nn = side.min(n - j0);
                for k0 in (0..k).step_by(kside) {
                    let kk = kside.min(k - k0);
                    let ap = a.submatrix(i0, k0, mm, kk);
                    let ap = if na > 0 {
                        pack_row_major(&mut abuf[..mm * kk], ap)
                    } else {
                        ap
                    };
                    // The first panel of k replaces the scratch block, or applies the caller's
                    // accumulation to `c`; the later ones add.
                    let (dst, acc_k) = if nt > 0 {
                        let t =
                            faer::MatMut::from_column_major_slice_mut(&mut tbuf[..mm * nn], mm, nn);
                        (t.as_dyn_stride_mut(), faer::Accum::Replace)
                    } else {
                        (c.as_mut().submatrix_mut(i0, j0, mm, nn), acc)
                    };
                    let acc_k = if k0 == 0 { acc_k } else { faer::Accum::Add };
                    let bp = b.submatrix(k0, j0, kk, nn);
                    faer::linalg::matmul::matmul(
                        dst,
                        acc_k,
                        ap,
                        bp,
                        T::from(1.0f32),
                        faer::Par::Seq,
                    );
                }
                if nt > 0 {
                    let t = faer::MatRef::from_column_major_slice(&tbuf[..mm * nn], mm, nn);
                    let mut dst = c.as_mut().submatrix_mut(i0, j0, mm, nn);
                    match acc {
                        faer::Accum::Replace => dst.copy_from(t),
                        faer::Accum::Add => dst += t,
                    }
                }
            }
        }
    });
}

/// Rows of `c` per block in [`panels_reordered`]: a packed panel of `a` then holds
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
    /// Per thread, the words [`tiled_gemm`] packs panels into, kept between calls so that
    /// repeated steps do not fault fresh pages in.
    static SCRATCH: std::cell::RefCell<Vec<u64>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Runs `f` on two scratch slices of the given lengths of `T` from this thread's buffer.
fn with_scratch<T: bytemuck::Pod, R>(lens: [usize; 2], f: impl FnOnce([&mut [T]; 2]) -> R) -> R {
    let size = std::mem::size_of::<T>();
    let words = ((lens[0] + lens[1]) * size).div_ceil(8);
    let mut buf = SCRATCH.with(|s| std::mem::take(&mut *s.borrow_mut()));
    if buf.len() < words {
        buf.resize(words, 0);
    }
    let all: &mut [T] = bytemuck::cast_slice_mut(&mut buf[..]);
    let (x, rest) = all.split_at_mut(lens[0]);
    let r = f([x, &mut rest[..lens[1]]]);
    SCRATCH.with(|s| *s.borrow_mut() = buf);
    r
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

#[cfg(test)]
mod tests {
    use super::*;

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
        let deep = (PANEL_ROWS + 5, 40, COLUMN_OUTPUT_MIN_DEPTH + 3);
        const { assert!(40 <= COLUMN_OUTPUT_MAX_COLS) };
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
        assert_eq!(view(deep, true, true), Transposed::ColumnOutput);
        assert_eq!(view(deep, true, false), Transposed::InPlace);
        assert_eq!(view(deep, false, true), Transposed::InPlace);
        check_against_naive(many_cols);
        check_against_naive(deep);
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
