//! `c (+)= aᵀ b` in f64 for a left operand stored transposed (`a` is `k x m` row-major, the
//! `ji,jk->ik` and `ji,kj->ik` steps) and few output columns: the layout faer reads slowest
//! (0.6 of its plain rate on Sapphire Rapids, issue 12).
//!
//! Such a product is bound by streaming `a` from memory (a word of `a` serves only `n`
//! multiply-adds). Stored transposed, `a` is already what a micro-kernel reads: a row
//! `a[j, i0..]` is contiguous along the output rows. So the kernel reads `a` in place, in
//! blocks of [`KB`] rows of the summed index, each tile of `MV` vectors of output rows by `KT`
//! output columns accumulating over the block into the output held transposed in scratch;
//! the rows short of a tile are done a few at a time by all columns (broadcast words of `a`
//! times vectors of a row of `b`). What brings it near the plain rate is a software prefetch
//! spread over the micro-kernels' iterations, a cache line of the rows [`AHEAD`] rows on per
//! iteration: without it the strided reads left the hardware prefetchers behind (0.68-0.80 of
//! the plain rate on 256 x 32 x 2048 and 128 x 32 x 65536), and prefetching a block's rows in
//! one burst at its start changed nothing. Vectors are read at 64-byte aligned addresses where
//! the rows allow it (unaligned, every load split a cache line: 0.77 against 0.93). A right
//! operand stored transposed is copied into order block by block, eight by eight. SIMD and
//! the prefetch instruction through pulp (AVX-512 or AVX2), so no `unsafe` here.

use pulp::{Simd, WithSimd};

/// Rows of the summed index per block (256 x 32 x 2048, `a` out of cache: 32 rows 0.80, 64
/// 0.87, 128 0.89-0.90 of the plain rate; a tile reloads its accumulators once per block).
const KB: usize = 128;

/// Rows of `a` the prefetch runs ahead of the block being computed.
const AHEAD: usize = 128;

/// Columns up to which [`at_b`] takes a product (a tile covers `KT` columns per pass over its
/// rows of `a`; with more columns a word of `a` serves enough multiply-adds for faer's
/// panels).
const MAX_COLS: usize = 64;

/// Summed extent from which [`at_b`] takes a product (shorter, faer's own panels stay in cache).
const MIN_DEPTH: usize = 256;

thread_local! {
    /// Per thread, the output's transposed copy and the block of `b`, kept between calls so
    /// that repeated steps do not fault fresh pages in.
    static SCRATCH: std::cell::RefCell<Vec<f64>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Whether [`at_b`] takes an `m x n x k` product: few output columns, a long summed index and
/// several vectors of output rows, on a processor with AVX2 or AVX-512.
pub(crate) fn applies(m: usize, n: usize, k: usize) -> bool {
    (2..=MAX_COLS).contains(&n) && k >= MIN_DEPTH && m >= 64 && simd_level().is_some()
}

/// The SIMD level the kernel runs at here, if any.
#[derive(Clone, Copy)]
enum Level {
    #[cfg(target_arch = "x86_64")]
    V4(pulp::x86::V4),
    #[cfg(target_arch = "x86_64")]
    V3(pulp::x86::V3),
}

fn simd_level() -> Option<Level> {
    #[cfg(target_arch = "x86_64")]
    {
        if let Some(s) = pulp::x86::V4::try_new() {
            return Some(Level::V4(s));
        }
        if let Some(s) = pulp::x86::V3::try_new() {
            return Some(Level::V3(s));
        }
    }
    None
}

/// The operands of one product. `a[j * lda + i]` is element `(i, j)` of the left operand
/// (`i < m`, `j < k`); `b` holds the right operand row-major (`k x n`), or its transpose
/// (`n x k`) when `b_trans`; `c` is `m x n` row-major.
pub(crate) struct AtB<'a> {
    pub m: usize,
    pub n: usize,
    pub k: usize,
    pub a: &'a [f64],
    pub lda: usize,
    pub b: &'a [f64],
    pub b_trans: bool,
    pub c: &'a mut [f64],
    /// Add the product to `c` instead of replacing it.
    pub accumulate: bool,
}

/// Computes `op` and returns `true`, or returns `false` (and leaves `c` alone) on a processor
/// without AVX2.
pub(crate) fn at_b(op: AtB<'_>) -> bool {
    at_b_at(simd_level(), op)
}

/// [`at_b`] at SIMD level `level`.
fn at_b_at(level: Option<Level>, op: AtB<'_>) -> bool {
    match level {
        #[cfg(target_arch = "x86_64")]
        Some(Level::V4(s)) => {
            let (fetch, tr) = (prefetcher(s.sse), Avx512(s));
            pulp::Simd::vectorize(s, Kernel { op, fetch, tr });
            true
        }
        #[cfg(target_arch = "x86_64")]
        Some(Level::V3(s)) => {
            let (fetch, tr) = (prefetcher(s.sse), Words);
            pulp::Simd::vectorize(s, Kernel { op, fetch, tr });
            true
        }
        None => false,
    }
}

/// A prefetch of the cache line holding an address into L2 (pulp's safe wrapper: a prefetch
/// never faults).
#[cfg(target_arch = "x86_64")]
fn prefetcher(sse: pulp::core_arch::x86::Sse) -> impl Fn(*const f64) + Copy {
    move |p: *const f64| sse._mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T1 }>(p.cast())
}

struct Kernel<'a, F, T> {
    op: AtB<'a>,
    fetch: F,
    tr: T,
}

impl<F: Fn(*const f64) + Copy, T: Transposer> WithSimd for Kernel<'_, F, T> {
    type Output = ();

    #[inline(always)]
    fn with_simd<S: Simd>(self, simd: S) {
        // Three vectors by eight columns with AVX-512's 32 registers (faer's own micro-kernel
        // shape), two by four with the 16 of AVX2; the edge rows six (three) at a time by
        // four vectors of columns.
        if S::F64_LANES >= 8 {
            run::<S, 3, 8, 6, F, T>(simd, self.op, self.fetch, self.tr)
        } else {
            run::<S, 2, 4, 3, F, T>(simd, self.op, self.fetch, self.tr)
        }
    }
}

/// How [`run`] covers output rows `0..m`: tiles of whole vectors from `lo` (the first row
/// whose words in `a` are 64-byte aligned, when every row of `a` starts at the same
/// alignment) to `hi`, and the rows before and after them (fewer than a vector's) by rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Cover {
    lo: usize,
    hi: usize,
}

impl Cover {
    fn new(m: usize, head: usize, tile: usize) -> Cover {
        let lo = if head < m { head } else { 0 };
        Cover {
            lo,
            hi: lo + (m - lo) / tile * tile,
        }
    }
}

/// A software prefetch cursor over words `0..m` of `a`'s rows (`lda` apart), a word every
/// eight: `per` cache lines per step, up to word `stop`. It only computes addresses (a prefetch never faults),
/// so it keeps a raw pointer and no bounds checks in the micro-kernels' loops.
struct Prefetch<F> {
    base: *const f64,
    lda: usize,
    m: usize,
    /// The next word to fetch, and the end of its row's part.
    pos: usize,
    lim: usize,
    stop: usize,
    per: usize,
    fetch: F,
}

impl<F: Fn(*const f64)> Prefetch<F> {
    #[inline(always)]
    fn step(&mut self) {
        for _ in 0..self.per {
            if self.pos >= self.stop {
                return;
            }
            (self.fetch)(self.base.wrapping_add(self.pos));
            self.pos += 8;
            if self.pos >= self.lim {
                self.pos = self.lim - self.m + self.lda;
                self.lim = self.pos + self.m;
            }
        }
    }

    /// Fetch up to row `row` (exclusive).
    fn until(&mut self, row: usize) {
        self.stop = row * self.lda;
    }
}

#[inline(always)]
fn run<
    S: Simd,
    const MV: usize,
    const KT: usize,
    const RH: usize,
    F: Fn(*const f64) + Copy,
    T: Transposer,
>(
    simd: S,
    op: AtB<'_>,
    fetch: F,
    tr: T,
) {
    let AtB {
        m,
        n,
        k,
        a,
        lda,
        b,
        b_trans,
        c,
        accumulate,
    } = op;
    let lanes = S::F64_LANES;
    // Rows that start at the same alignment (a whole number of cache lines apart) get their
    // vectors read from aligned addresses (unaligned, every load split a cache line).
    let head = if (lda * 8).is_multiple_of(64) {
        a.as_ptr().align_offset(64)
    } else {
        0
    };
    let cover = Cover::new(m, head, lanes);
    let vecs = (cover.hi - cover.lo) / lanes;
    // The tiled rows' output transposed, column `x` at `ct[x * cs..]`, the columns an odd
    // number of vectors apart (at a power-of-two distance a tile's accumulators share a few
    // sets of the L1 cache); the edge rows' output row-major, a row `nv` vectors.
    let cs = vecs | 1;
    let nv = n.div_ceil(lanes);
    let bw = nv * lanes;
    let edge = m - (cover.hi - cover.lo);
    let (ct_len, cr_len, bb_len) = (n * cs * lanes, edge * bw, KB * bw);
    let mut store = SCRATCH.with(|s| std::mem::take(&mut *s.borrow_mut()));
    let words = ct_len + cr_len + bb_len;
    if store.len() < words {
        store.resize(words, 0.0);
    }
    let (ct, rest) = store[..words].split_at_mut(ct_len);
    let (cr, bblock) = rest.split_at_mut(cr_len);
    let ct: &mut [S::f64s] = bytemuck::cast_slice_mut(ct);
    let cr: &mut [S::f64s] = bytemuck::cast_slice_mut(cr);
    ct.fill(simd.splat_f64s(0.0));
    cr.fill(simd.splat_f64s(0.0));
    bblock.fill(0.0);
    let per = prefetch_per_step::<MV, KT, RH>(m, n, cover, vecs, nv);
    // A row's words `0..m` touch the lines from its first word's to its last's: every line
    // the cursor is to fetch holds one of words `0, 8, .., m + 6` (without the last, a row
    // not starting a line left its last line to a demand miss: 128 x 32 x 65536 at 0.80).
    let mut pf = Prefetch {
        base: a.as_ptr(),
        lda,
        m: m + 7,
        pos: 0,
        lim: m + 7,
        stop: 0,
        per: usize::MAX,
        fetch,
    };
    // Twice the lines per step during the first block, so that the cursor gets ahead (a
    // burst of the first rows' prefetches up front stalled the start: 0.89 against 0.90).
    pf.per = 2 * per;
    for j0 in (0..k).step_by(KB) {
        let rows = KB.min(k - j0);
        pf.until((j0 + AHEAD + KB).min(k));
        if j0 > 0 {
            pf.per = per;
        }
        let rhs = Rhs { b, b_trans, n, k };
        rhs.load_block(j0, rows, &mut bblock[..rows * bw], bw, fetch, tr);
        let bb = &bblock[..rows * bw];
        let blk = SumBlock {
            ab: &a[j0 * lda..],
            lda,
            rows,
            bb,
            bw,
        };
        blk.tiles::<S, MV, KT, F>(simd, cover, n, ct, cs, &mut pf);
        let bv: &[S::f64s] = bytemuck::cast_slice(bb);
        blk.edges::<S, RH, F>(simd, cover, m, bv, nv, cr, &mut pf);
    }
    let out = Out {
        ct: bytemuck::cast_slice(&*ct),
        cs: cs * lanes,
        edges: bytemuck::cast_slice(&*cr),
        bw,
        cover,
    };
    out.put(c, m, n, accumulate, tr);
    SCRATCH.with(|s| *s.borrow_mut() = store);
}

/// Lines the prefetch cursor fetches per step so that it covers a block's rows of `a` over the
/// block's micro-kernel calls ([`run`]'s pacing).
#[inline(always)]
fn prefetch_per_step<const MV: usize, const KT: usize, const RH: usize>(
    m: usize,
    n: usize,
    cover: Cover,
    vecs: usize,
    nv: usize,
) -> usize {
    // The prefetch steps per block (one every four rows of a tile's pass or an edge tile's
    // part), and the lines to fetch per block (a row not starting a line spans one more),
    // counted exactly: with the edge tiles counted as whole passes and rows one line longer
    // than counted, the cursor fell behind (128 x 32 x 65536 at 0.80 of the plain rate
    // against 1.0); fetching a quarter or half more per step changed nothing or lost.
    let passes = n.div_ceil(KT);
    let edge_tiles = |mut left: usize| {
        let mut t = 0;
        while left > 0 {
            left -= edge_height(left, RH);
            t += 1;
        }
        t
    };
    let calls = vecs.div_ceil(MV) * passes
        + (edge_tiles(cover.lo) + edge_tiles(m - cover.hi)) * nv.div_ceil(4);
    let steps = (calls * KB.div_ceil(4)).max(1);
    let lines = KB * (m + 7).div_ceil(8);
    lines.div_ceil(steps).max(1)
}

/// The right operand of a product: `k x n` row-major, or its transpose when `b_trans`.
#[derive(Clone, Copy)]
struct Rhs<'a> {
    b: &'a [f64],
    b_trans: bool,
    n: usize,
    k: usize,
}

impl Rhs<'_> {
    /// Puts rows `j0..j0 + rows` of `b` into `bb`, a row every `bw` words (padded to whole
    /// vectors).
    #[inline(always)]
    fn load_block<F: Fn(*const f64), T: Transposer>(
        self,
        j0: usize,
        rows: usize,
        bb: &mut [f64],
        bw: usize,
        fetch: F,
        tr: T,
    ) {
        let Rhs { b, b_trans, n, k } = self;
        if b_trans {
            // The next block's part of each row of the transpose (32 streams the hardware
            // prefetchers did not keep up with: the copy stalled on them), then this block's.
            let next = (j0 + KB).min(k)..(j0 + 2 * KB).min(k);
            for x in 0..n {
                for j in next.clone().step_by(8) {
                    fetch(&b[x * k + j]);
                }
            }
            tr.block(b, k, n, j0, rows, bb, bw);
        } else {
            for (dst, src) in bb.chunks_exact_mut(bw).zip(b[j0 * n..].chunks_exact(n)) {
                dst[..n].copy_from_slice(src);
            }
        }
    }
}

/// What [`run`] accumulated: the tiled rows' output transposed (column `x` at `ct[x * cs..]`)
/// and the edge rows' row-major (a row every `bw` words).
struct Out<'a> {
    ct: &'a [f64],
    cs: usize,
    edges: &'a [f64],
    bw: usize,
    cover: Cover,
}

impl Out<'_> {
    /// Writes (or with `accumulate` adds) the `m x n` product into `c`.
    #[inline(always)]
    fn put<T: Transposer>(&self, c: &mut [f64], m: usize, n: usize, accumulate: bool, tr: T) {
        let Out {
            ct,
            cs,
            edges,
            bw,
            cover,
        } = *self;
        let put = |out: &mut f64, y: f64| *out = if accumulate { *out + y } else { y };
        let main = cover.hi - cover.lo;
        if !accumulate && main > 0 {
            // The tiled rows' output is the transpose of `ct`'s columns: put in place eight by
            // eight (word by word, this gather was 2% of 256 x 32 x 2048's time).
            tr.block(ct, cs, n, 0, main, &mut c[cover.lo * n..], n);
        }
        for (i, row) in c.chunks_exact_mut(n).enumerate().take(m) {
            if !accumulate && (cover.lo..cover.hi).contains(&i) {
                continue;
            }
            if (cover.lo..cover.hi).contains(&i) {
                let lane = i - cover.lo;
                for (x, out) in row.iter_mut().enumerate() {
                    put(out, ct[x * cs + lane]);
                }
            } else {
                let e = if i < cover.lo {
                    i
                } else {
                    i - cover.hi + cover.lo
                };
                for (out, &y) in row.iter_mut().zip(&edges[e * bw..]) {
                    put(out, y);
                }
            }
        }
    }
}

/// Rows of the next edge tile when `left` edge rows remain and a tile takes at most `rh`: the
/// edge loop of [`run`] and its prefetch pacing both follow this one rule.
fn edge_height(left: usize, rh: usize) -> usize {
    if left >= rh {
        rh
    } else if left >= 4 && rh > 4 {
        4
    } else if left >= 2 {
        2
    } else {
        1
    }
}

/// Transposes 8 x 8 squares of words.
trait Transposer: Copy {
    /// The transpose of `sq` (a row per array).
    fn square(self, sq: [[f64; 8]; 8]) -> [[f64; 8]; 8];

    /// Puts rows `j0..j0 + rows` of the `k x n` matrix whose transpose `bt` holds (`n x k`
    /// row-major) into `bb`, a row every `bw` words: eight by eight, each square read as eight
    /// runs of eight words and written as eight, the edges word by word.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn block(
        self,
        bt: &[f64],
        k: usize,
        n: usize,
        j0: usize,
        rows: usize,
        bb: &mut [f64],
        bw: usize,
    ) {
        const E: usize = 8;
        let (nx, nr) = (n / E * E, rows / E * E);
        for x0 in (0..nx).step_by(E) {
            for r0 in (0..nr).step_by(E) {
                let sq: [[f64; E]; E] = std::array::from_fn(|x| {
                    let mut row = [0.0; E];
                    row.copy_from_slice(&bt[(x0 + x) * k + j0 + r0..][..E]);
                    row
                });
                let tr = self.square(sq);
                for (dst, row) in bb[r0 * bw..].chunks_mut(bw).zip(&tr) {
                    dst[x0..x0 + E].copy_from_slice(row);
                }
            }
        }
        // The columns from `nx` and, below it, the rows from `nr`.
        for x in 0..n {
            let from = if x < nx { nr } else { 0 };
            for r in from..rows {
                bb[r * bw + x] = bt[x * k + j0 + r];
            }
        }
    }
}

/// Word by word (AVX2 machines).
#[derive(Clone, Copy)]
struct Words;

impl Transposer for Words {
    #[inline(always)]
    fn square(self, sq: [[f64; 8]; 8]) -> [[f64; 8]; 8] {
        std::array::from_fn(|r| std::array::from_fn(|x| sq[x][r]))
    }
}

/// In eight AVX-512 registers, by 24 shuffles (word by word, putting `b` in order cost a tenth
/// of `ji,kj`'s time at 256 x 32 x 2048).
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy)]
struct Avx512(pulp::x86::V4);

#[cfg(target_arch = "x86_64")]
impl Transposer for Avx512 {
    #[inline(always)]
    fn square(self, sq: [[f64; 8]; 8]) -> [[f64; 8]; 8] {
        use core::arch::x86_64::{__m512d, __m512i};
        let f = self.0.avx512f;
        let idx = |v: [i64; 8]| -> __m512i { bytemuck::cast(v) };
        // Pairs of words from two registers, then halves.
        let (lo2, hi2) = (
            idx([0, 1, 8, 9, 4, 5, 12, 13]),
            idx([2, 3, 10, 11, 6, 7, 14, 15]),
        );
        let (lo4, hi4) = (
            idx([0, 1, 2, 3, 8, 9, 10, 11]),
            idx([4, 5, 6, 7, 12, 13, 14, 15]),
        );
        let r: [__m512d; 8] = sq.map(bytemuck::cast);
        let t = [
            f._mm512_unpacklo_pd(r[0], r[1]),
            f._mm512_unpackhi_pd(r[0], r[1]),
            f._mm512_unpacklo_pd(r[2], r[3]),
            f._mm512_unpackhi_pd(r[2], r[3]),
            f._mm512_unpacklo_pd(r[4], r[5]),
            f._mm512_unpackhi_pd(r[4], r[5]),
            f._mm512_unpacklo_pd(r[6], r[7]),
            f._mm512_unpackhi_pd(r[6], r[7]),
        ];
        let p = |a, i, b| f._mm512_permutex2var_pd(a, i, b);
        // u[0]: words 0 and 4 of rows 0-3, u[1]: 1 and 5, u[2]: 2 and 6, u[3]: 3 and 7;
        // u[4..] the same of rows 4-7.
        let u = [
            p(t[0], lo2, t[2]),
            p(t[1], lo2, t[3]),
            p(t[0], hi2, t[2]),
            p(t[1], hi2, t[3]),
            p(t[4], lo2, t[6]),
            p(t[5], lo2, t[7]),
            p(t[4], hi2, t[6]),
            p(t[5], hi2, t[7]),
        ];
        // Row c of the result: word c of the eight rows.
        std::array::from_fn(|c| {
            bytemuck::cast(p(u[c % 4], if c < 4 { lo4 } else { hi4 }, u[c % 4 + 4]))
        })
    }
}

/// One row of a block for [`SumBlock::tile`]: `MV` vectors of `a` (from `arow`) times `W`
/// broadcast words of `b` (from `brow`), into the accumulators. A function (not a closure) so
/// that it inherits the SIMD level it is inlined into.
#[inline(always)]
fn mul_row<S: Simd, const MV: usize, const W: usize>(
    simd: S,
    acc: &mut [[S::f64s; MV]; W],
    arow: &[f64],
    brow: &[f64],
) {
    let lanes = S::F64_LANES;
    let seg = &arow[..MV * lanes];
    let av: [S::f64s; MV] = std::array::from_fn(|v| {
        bytemuck::pod_read_unaligned(bytemuck::cast_slice(&seg[v * lanes..][..lanes]))
    });
    for (col, &bx) in acc.iter_mut().zip(&brow[..W]) {
        let bv = simd.splat_f64s(bx);
        for (y, &x) in col.iter_mut().zip(&av) {
            *y = simd.mul_add_f64s(x, bv, *y);
        }
    }
}

/// One block of the summed index: its `rows` rows of `a` (`lda` apart) and of `b` (padded to
/// `bw` words).
struct SumBlock<'a> {
    ab: &'a [f64],
    lda: usize,
    rows: usize,
    bb: &'a [f64],
    bw: usize,
}

impl SumBlock<'_> {
    /// The block's tiled rows (`cover.lo..cover.hi`, `vecs` vectors), `MV` vectors at a time,
    /// then the vectors short of a tile in one narrower tile.
    #[inline(always)]
    fn tiles<S: Simd, const MV: usize, const KT: usize, F: Fn(*const f64)>(
        &self,
        simd: S,
        cover: Cover,
        n: usize,
        ct: &mut [S::f64s],
        cs: usize,
        pf: &mut Prefetch<F>,
    ) {
        let lanes = S::F64_LANES;
        let vecs = (cover.hi - cover.lo) / lanes;
        for t in 0..vecs / MV {
            let i0 = cover.lo + t * MV * lanes;
            self.columns::<S, MV, KT, F>(simd, i0, n, &mut ct[t * MV..], cs, pf);
        }
        let v0 = vecs / MV * MV;
        let i0 = cover.lo + v0 * lanes;
        match vecs - v0 {
            0 => {}
            1 => self.columns::<S, 1, KT, F>(simd, i0, n, &mut ct[v0..], cs, pf),
            _ => self.columns::<S, 2, KT, F>(simd, i0, n, &mut ct[v0..], cs, pf),
        }
    }

    /// The block's edge rows: before the tiles (their place in `cr` from 0) and after them
    /// (from `cover.lo`), [`edge_height`] rows at a time.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn edges<S: Simd, const RH: usize, F: Fn(*const f64)>(
        &self,
        simd: S,
        cover: Cover,
        m: usize,
        bv: &[S::f64s],
        nv: usize,
        cr: &mut [S::f64s],
        pf: &mut Prefetch<F>,
    ) {
        for (lo, hi, at) in [(0, cover.lo, 0), (cover.hi, m, cover.lo)] {
            let mut i0 = lo;
            while i0 < hi {
                let out = &mut cr[(at + i0 - lo) * nv..];
                let h = edge_height(hi - i0, RH);
                if h == RH {
                    self.rows::<S, RH, F>(simd, i0, bv, nv, out, pf);
                } else if h == 4 {
                    self.rows::<S, 4, F>(simd, i0, bv, nv, out, pf);
                } else if h == 2 {
                    self.rows::<S, 2, F>(simd, i0, bv, nv, out, pf);
                } else {
                    self.rows::<S, 1, F>(simd, i0, bv, nv, out, pf);
                }
                i0 += h;
            }
        }
    }

    /// One tile's columns, `KT` at a time: the tile's `MV` vectors start at word `i0` of each
    /// row of `a`; column `x` of the tile is `ct[x * cs..][..MV]`.
    #[inline(always)]
    fn columns<S: Simd, const MV: usize, const KT: usize, F: Fn(*const f64)>(
        &self,
        simd: S,
        i0: usize,
        n: usize,
        ct: &mut [S::f64s],
        cs: usize,
        pf: &mut Prefetch<F>,
    ) {
        // Passes of `KT` columns (8 or 4), then of the largest of 4, 2, 1 that fits.
        let mut k0 = 0;
        while k0 < n {
            let rem = n - k0;
            let w = if rem >= KT {
                self.tile::<S, MV, KT, F>(simd, i0, k0, ct, cs, pf);
                KT
            } else if rem >= 4 {
                self.tile::<S, MV, 4, F>(simd, i0, k0, ct, cs, pf);
                4
            } else if rem >= 2 {
                self.tile::<S, MV, 2, F>(simd, i0, k0, ct, cs, pf);
                2
            } else {
                self.tile::<S, MV, 1, F>(simd, i0, k0, ct, cs, pf);
                1
            };
            k0 += w;
        }
    }

    /// Accumulates columns `k0..k0 + W` of the tile at `i0` over the block into `ct`: per row
    /// of the block, `MV` vectors of `a` times `W` broadcast words of `b`.
    #[inline(always)]
    fn tile<S: Simd, const MV: usize, const W: usize, F: Fn(*const f64)>(
        &self,
        simd: S,
        i0: usize,
        k0: usize,
        ct: &mut [S::f64s],
        cs: usize,
        pf: &mut Prefetch<F>,
    ) {
        let mut acc = [[simd.splat_f64s(0.0); MV]; W];
        for (x, col) in acc.iter_mut().enumerate() {
            col.copy_from_slice(&ct[(k0 + x) * cs..][..MV]);
        }
        // Four rows per prefetch step, so that the loop's own instructions (which share ports
        // with the multiply-adds) are few per row.
        let ab = &self.ab[i0..];
        let bb = &self.bb[k0..];
        let (lda, bw) = (self.lda, self.bw);
        let mut r = 0;
        while r + 4 <= self.rows {
            pf.step();
            let a4 = &ab[r * lda..];
            let b4 = &bb[r * bw..];
            mul_row::<S, MV, W>(simd, &mut acc, a4, b4);
            mul_row::<S, MV, W>(simd, &mut acc, &a4[lda..], &b4[bw..]);
            mul_row::<S, MV, W>(simd, &mut acc, &a4[2 * lda..], &b4[2 * bw..]);
            mul_row::<S, MV, W>(simd, &mut acc, &a4[3 * lda..], &b4[3 * bw..]);
            r += 4;
        }
        while r < self.rows {
            pf.step();
            mul_row::<S, MV, W>(simd, &mut acc, &ab[r * lda..], &bb[r * bw..]);
            r += 1;
        }
        for (x, col) in acc.iter().enumerate() {
            ct[(k0 + x) * cs..][..MV].copy_from_slice(col);
        }
    }

    /// Accumulates output rows `i0..i0 + H` (all columns, four vectors at a time) over the
    /// block into `out` (row-major, `nv` vectors a row).
    #[inline(always)]
    fn rows<S: Simd, const H: usize, F: Fn(*const f64)>(
        &self,
        simd: S,
        i0: usize,
        bv: &[S::f64s],
        nv: usize,
        out: &mut [S::f64s],
        pf: &mut Prefetch<F>,
    ) {
        let mut v0 = 0;
        while v0 < nv {
            let part = Part { i0, v0, nv };
            match nv - v0 {
                1 => self.rows_part::<S, H, 1, F>(simd, part, bv, out, pf),
                2 => self.rows_part::<S, H, 2, F>(simd, part, bv, out, pf),
                3 => self.rows_part::<S, H, 3, F>(simd, part, bv, out, pf),
                _ => self.rows_part::<S, H, 4, F>(simd, part, bv, out, pf),
            }
            v0 += 4;
        }
    }

    /// Rows `i0..i0 + H` by column vectors `v0..v0 + W`: per row of the block, `H` broadcast
    /// words of `a` times `W` vectors of the row of `b`.
    #[inline(always)]
    fn rows_part<S: Simd, const H: usize, const W: usize, F: Fn(*const f64)>(
        &self,
        simd: S,
        part: Part,
        bv: &[S::f64s],
        out: &mut [S::f64s],
        pf: &mut Prefetch<F>,
    ) {
        let Part { i0, v0, nv } = part;
        let mut acc = [[simd.splat_f64s(0.0); W]; H];
        for (h, row) in acc.iter_mut().enumerate() {
            row.copy_from_slice(&out[h * nv + v0..][..W]);
        }
        for (r, brow) in bv.chunks_exact(nv).take(self.rows).enumerate() {
            // At the tiles' pace: a step every four rows.
            if r % 4 == 0 {
                pf.step();
            }
            let bw: [S::f64s; W] = std::array::from_fn(|x| brow[v0 + x]);
            let seg = &self.ab[r * self.lda + i0..][..H];
            for (row, &x) in acc.iter_mut().zip(seg) {
                let xv = simd.splat_f64s(x);
                for (y, &bx) in row.iter_mut().zip(&bw) {
                    *y = simd.mul_add_f64s(xv, bx, *y);
                }
            }
        }
        for (h, row) in acc.iter().enumerate() {
            out[h * nv + v0..][..W].copy_from_slice(row);
        }
    }
}

/// Where [`SumBlock::rows_part`] works: from output row `i0` and column vector `v0`, of `nv` a
/// row.
#[derive(Clone, Copy)]
struct Part {
    i0: usize,
    v0: usize,
    nv: usize,
}

// The levels tested are x86 ones (elsewhere the caller runs faer).
#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::*;

    /// `c` by the definition, for `a` with rows `lda` apart and `b` row-major `k x n`.
    fn reference(m: usize, n: usize, k: usize, a: &[f64], lda: usize, b: &[f64]) -> Vec<f64> {
        let mut c = vec![0.0; m * n];
        for i in 0..m {
            for x in 0..n {
                c[i * n + x] = (0..k).map(|j| a[j * lda + i] * b[j * n + x]).sum();
            }
        }
        c
    }

    /// Every SIMD level this machine has (AVX-512 machines run the AVX2 kernel too).
    fn levels() -> Vec<Option<Level>> {
        let mut v = vec![simd_level()];
        #[cfg(target_arch = "x86_64")]
        if let (Some(Level::V4(_)), Some(s)) = (simd_level(), pulp::x86::V3::try_new()) {
            v.push(Some(Level::V3(s)));
        }
        v
    }

    /// The `n x k` transpose of the row-major `k x n` matrix `b`.
    fn transposed(b: &[f64], k: usize, n: usize) -> Vec<f64> {
        (0..n * k).map(|y| b[(y % k) * n + y / k]).collect()
    }

    #[test]
    fn equals_the_plain_sum_for_every_remainder_and_alignment() {
        // Whole and partial tiles and vectors of rows, every column remainder, a partial
        // block of the summed index, rows longer than the product's (a thread's part), and
        // `a` starting at every alignment.
        let shapes = [
            (64, 32, 256, 64),
            (70, 7, 300, 70),
            (131, 13, 513, 131),
            (256, 32, 2048, 256),
            (100, 2, 260, 128),
            (96, 64, 384, 200),
            (65, 9, 257, 72),
        ];
        for &(m, n, k, lda) in &shapes {
            assert!(applies(m, n, k) || simd_level().is_none());
            let store: Vec<f64> = (0..lda * k + 8)
                .map(|x| ((x * 7 % 11) as f64) - 5.0)
                .collect();
            let b: Vec<f64> = (0..k * n).map(|x| ((x * 5 % 13) as f64) - 6.0).collect();
            let bt = transposed(&b, k, n);
            let cases = levels()
                .into_iter()
                .flat_map(|l| (0..8).flat_map(move |s| [(l, s, false), (l, s, true)]));
            for (level, shift, b_trans) in cases {
                let a = &store[shift..shift + lda * (k - 1) + m];
                let want = reference(m, n, k, a, lda, &b);
                let run = |c: &mut [f64], accumulate| {
                    at_b_at(
                        level,
                        AtB {
                            m,
                            n,
                            k,
                            a,
                            lda,
                            b: if b_trans { &bt } else { &b },
                            b_trans,
                            c,
                            accumulate,
                        },
                    )
                };
                let mut c = vec![f64::NAN; m * n];
                if !run(&mut c, false) {
                    return; // no AVX2 here: the caller runs faer instead
                }
                for (x, (g, w)) in c.iter().zip(&want).enumerate() {
                    assert!(
                        (g - w).abs() <= 1e-9 * w.abs().max(1.0),
                        "{m}x{n}x{k} lda {lda} shift {shift} b_trans {b_trans} v4 {} at {x}: {g} vs {w}", level.is_some_and(|l| matches!(l, Level::V4(_)))
                    );
                }
                // Accumulating adds the product to what is there.
                let mut c2 = vec![1.0; m * n];
                run(&mut c2, true);
                for (g, w) in c2.iter().zip(&want) {
                    assert!((g - (w + 1.0)).abs() <= 1e-9 * w.abs().max(1.0));
                }
            }
        }
    }

    #[test]
    fn the_cover_takes_whole_vectors_from_the_aligned_row() {
        for m in [8, 9, 24, 25, 64, 70, 131] {
            for head in 0..8 {
                let c = Cover::new(m, head, 8);
                assert!(c.lo <= c.hi && c.hi <= m);
                assert_eq!((c.hi - c.lo) % 8, 0);
                assert!(m - c.hi < 8, "m {m} head {head}: {c:?}");
                assert_eq!(c.lo, if head < m { head } else { 0 });
            }
        }
    }
}
