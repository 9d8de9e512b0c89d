//! A one-holder move's per-rank words counted per class of coordinates. For a block length
//! `B` that both grids' mixed radices allow (every grid dim's stride divides `B` or is a
//! multiple of it, and a dim that straddles `B` is cut into whole parts), the coordinates of
//! rank `q·B + j` are those of `q·B` plus those of `j` in both grids, so each index's table
//! offsets are an outer part (one per block) plus an inner part (one table of `B` entries per
//! move). Indices split only by outer dims give one factor per block, those split only by
//! inner dims one per position in a block, and only the others ("mixed") are looked up per
//! rank. Blocks whose outer factors and mixed outer offsets agree have the same words rank
//! for rank, so a [`WordSink`] may replay the first one's.

/// A half-open range of one index.
type Range = (usize, usize);

/// Length of the overlap of two half-open ranges.
fn overlap((a, b): Range, (c, d): Range) -> u64 {
    b.min(d).saturating_sub(a.max(c)) as u64
}

/// One grid's blocks by table offset (built by the move module from its cuts).
#[derive(Clone, Debug)]
pub(super) struct Side {
    pub(super) sizes: Vec<usize>,
    /// Per grid dim, the indices it splits and the step of each one's table offset.
    pub(super) by_dim: Vec<Vec<(usize, usize)>>,
    /// Per index, its range per offset and what the move counts of it (the range's length on
    /// the target side; on the source side the words of it that target blocks take).
    pub(super) table: Vec<Vec<(Range, u64)>>,
}

/// What a block sweep needs of the move beside its tables.
pub(super) struct Counts {
    /// Partial replicas summed.
    pub(super) partial: u64,
    /// Target ranks per target block.
    pub(super) rep_to: u64,
    /// Ranks of each grid within P.
    pub(super) src_size: usize,
    pub(super) dst_size: usize,
}

/// Largest block (the inner tables hold one entry per rank of a block).
const MAX_BLOCK: usize = 1 << 10;
/// Smallest block worth the per-block set-up.
const MIN_BLOCK: usize = 4;

/// What a whole block's words depend on: whether it lies in each grid (bits 0 and 1), the
/// outer indices' products (source range length, words sent from it, target length, own)
/// and the mixed indices' outer table offsets.
pub(crate) type BlockKey = smallvec::SmallVec<[u64; 9]>;

/// Takes a sweep's words in rank order.
pub(crate) trait WordSink {
    /// The next `n` ranks each send `sent` and receive `received`.
    fn run(&mut self, n: usize, sent: u64, received: u64);
    /// At the start of a whole block: true when the sink has taken the block's ranks itself
    /// (from an earlier block with the same key) and the sweep skips them; otherwise the
    /// sweep gives them by [`Self::run`] and then calls [`Self::end_block`].
    fn begin_block(&mut self, key: &BlockKey) -> bool;
    /// The block of the last [`Self::begin_block`] that returned false has been given.
    fn end_block(&mut self);
}

/// A sink of `f(len, sent, received)` that never replays.
pub(crate) struct FnSink<F>(pub(crate) F);

impl<F: FnMut(usize, u64, u64)> WordSink for FnSink<F> {
    fn run(&mut self, n: usize, sent: u64, received: u64) {
        (self.0)(n, sent, received)
    }
    fn begin_block(&mut self, _: &BlockKey) -> bool {
        false
    }
    fn end_block(&mut self) {}
}

/// The block structure of a move's two [`Side`]s.
#[derive(Clone, Debug)]
pub(super) struct Blocks {
    /// Ranks per block.
    len: usize,
    /// Per position in a block, the inner indices' products (source range length, words
    /// sent from it, target length, own overlap).
    inner: Vec<[u64; 4]>,
    /// Per position in a block, each mixed index's inner (source, target) table offsets.
    inner_off: Vec<(usize, usize)>,
    /// Indices whose ranges depend on the outer coordinates alone (or on none).
    outer: Vec<usize>,
    /// Indices whose ranges depend on both.
    mixed: Vec<usize>,
}

/// Per index, the grid dims of `side` (of size > 1) that split it.
fn dims_of(side: &Side, nd: usize) -> Vec<Vec<usize>> {
    let mut dims = vec![Vec::new(); nd];
    for (g, list) in side.by_dim.iter().enumerate() {
        if side.sizes[g] > 1 {
            list.iter().for_each(|&(v, _)| dims[v].push(g));
        }
    }
    dims
}

/// Products of each side's grid sizes from dim `k` on (`k = 0..=len`: the strides, then 1).
fn suffixes(side: &Side) -> Vec<usize> {
    let mut p = vec![1usize; side.sizes.len() + 1];
    for k in (0..side.sizes.len()).rev() {
        p[k] = p[k + 1].saturating_mul(side.sizes[k]);
    }
    p
}

/// The block lengths in `MIN_BLOCK..=MAX_BLOCK` that `side`'s radices allow: a dim's stride
/// times a divisor of its size (then every dim is wholly outer, wholly inner, or cut into
/// whole parts, and coordinates add).
fn allowed(side: &Side) -> Vec<usize> {
    let p = suffixes(side);
    let mut out = Vec::new();
    for k in 0..side.sizes.len() {
        for d in 1..=side.sizes[k].min(MAX_BLOCK) {
            let b = p[k + 1].saturating_mul(d);
            if side.sizes[k].is_multiple_of(d) && (MIN_BLOCK..=MAX_BLOCK).contains(&b) {
                out.push(b);
            }
        }
    }
    out
}

/// Per index, whether an outer dim and whether an inner dim of `side` splits it, under
/// blocks of `b` ranks.
fn roles(side: &Side, dims: &[Vec<usize>], b: usize) -> Vec<(bool, bool)> {
    let p = suffixes(side);
    dims.iter()
        .map(|ds| {
            let outer = ds.iter().any(|&g| p[g] > b);
            let inner = ds.iter().any(|&g| p[g + 1] < b);
            (outer, inner)
        })
        .collect()
}

/// Each index's table offset in `side` at `rank` (coordinates modulo the grid), into `out`.
fn offsets(side: &Side, rank: usize, out: &mut [usize]) {
    out.iter_mut().for_each(|o| *o = 0);
    let mut r = rank;
    for (g, &n) in side.sizes.iter().enumerate().rev() {
        let c = r % n.max(1);
        r /= n.max(1);
        side.by_dim[g].iter().for_each(|&(v, s)| out[v] += c * s);
    }
}

/// The products over the indices `vs` at table offsets `os` (source) and `od` (target).
fn products(
    k: (&Side, &Side),
    vs: impl Iterator<Item = usize>,
    os: &[usize],
    od: &[usize],
) -> [u64; 4] {
    let mut p = [1u64; 4];
    for v in vs {
        factor(k, v, os[v], od[v], &mut p);
    }
    p
}

/// Multiplies index `v`'s factors at table offsets `s` and `t` into `p`.
#[inline(always)]
fn factor((src, dst): (&Side, &Side), v: usize, s: usize, t: usize, p: &mut [u64; 4]) {
    let (s, c) = src.table[v][s];
    let (t, l) = dst.table[v][t];
    p[0] *= s.1.saturating_sub(s.0) as u64;
    p[1] *= c;
    p[2] *= l;
    p[3] *= overlap(s, t);
}

impl Blocks {
    /// The block both grids allow with the fewest mixed indices (the largest on a
    /// tie), `None` without one.
    pub(super) fn new(src: &Side, dst: &Side) -> Option<Blocks> {
        let k = (src, dst);
        let nd = src.table.len();
        let (ds, dd) = (dims_of(k.0, nd), dims_of(k.1, nd));
        let theirs = allowed(k.1);
        let mut best: Option<(usize, usize)> = None;
        for b in allowed(k.0).into_iter().filter(|b| theirs.contains(b)) {
            let (rs, rd) = (roles(k.0, &ds, b), roles(k.1, &dd, b));
            let mixed = (0..nd)
                .filter(|&v| (rs[v].0 || rd[v].0) && (rs[v].1 || rd[v].1))
                .count();
            if best.is_none_or(|(m, l)| (mixed, std::cmp::Reverse(b)) < (m, std::cmp::Reverse(l))) {
                best = Some((mixed, b));
            }
        }
        // With every index mixed the rank-by-rank sweep is the cheaper.
        let (_, len) = best.filter(|&(m, _)| m < nd.max(1))?;
        let (rs, rd) = (roles(k.0, &ds, len), roles(k.1, &dd, len));
        let (mut inner, mut outer, mut mixed) = (Vec::new(), Vec::new(), Vec::new());
        for v in 0..nd {
            match (rs[v].0 || rd[v].0, rs[v].1 || rd[v].1) {
                (true, true) => mixed.push(v),
                (false, true) => inner.push(v),
                _ => outer.push(v),
            }
        }
        let (mut os, mut od) = (vec![0; nd], vec![0; nd]);
        let mut inner_off = Vec::with_capacity(len * mixed.len());
        let table = (0..len)
            .map(|j| {
                offsets(k.0, j, &mut os);
                offsets(k.1, j, &mut od);
                inner_off.extend(mixed.iter().map(|&v| (os[v], od[v])));
                products(k, inner.iter().copied(), &os, &od)
            })
            .collect();
        Some(Blocks {
            len,
            inner: table,
            inner_off,
            outer,
            mixed,
        })
    }
}

impl Blocks {
    /// Gives `sink` the words of each rank of `ranks` in order (the words the rank-by-rank
    /// tabled sweep gives), block by block: each rank's are its block's outer products
    /// times its position's inner ones and its mixed indices' factors, and a whole block may
    /// be replayed by the sink.
    pub(super) fn sweep(
        &self,
        src: &Side,
        dst: &Side,
        n: Counts,
        ranks: std::ops::Range<usize>,
        sink: &mut impl WordSink,
    ) {
        let (bl, k) = (self, (src, dst));
        let nd = src.table.len();
        let (partial, rep_to) = (n.partial, n.rep_to);
        let (ss, ds) = (n.src_size, n.dst_size);
        let (mut os, mut od) = (vec![0; nd], vec![0; nd]);
        let m = bl.mixed.len();
        let mut r = ranks.start;
        while r < ranks.end {
            let lo = r - r % bl.len;
            let (hi, end) = (lo + bl.len, (lo + bl.len).min(ranks.end));
            offsets(src, lo, &mut os);
            offsets(dst, lo, &mut od);
            let o = products(k, bl.outer.iter().copied(), &os, &od);
            let (in_s, in_d) = (lo < ss, lo < ds);
            // A whole block on the same side of both grids' ends is a function of its key.
            let whole = r == lo && end == hi && (hi <= ss || !in_s) && (hi <= ds || !in_d);
            if whole {
                let mut key: BlockKey = smallvec::smallvec![in_s as u64 | (in_d as u64) << 1];
                key.extend_from_slice(&o);
                bl.mixed
                    .iter()
                    .for_each(|&v| key.extend([os[v] as u64, od[v] as u64]));
                if sink.begin_block(&key) {
                    r = end;
                    continue;
                }
            }
            let mut run = (0usize, (0u64, 0u64));
            for x in r..end {
                let j = x - lo;
                let i = &bl.inner[j];
                let mut p = [o[0] * i[0], o[1] * i[1], o[2] * i[2], o[3] * i[3]];
                let offs = &bl.inner_off[j * m..(j + 1) * m];
                for (&v, &(a, b)) in bl.mixed.iter().zip(offs) {
                    factor(k, v, os[v] + a, od[v] + b, &mut p);
                }
                let (in_s, in_d) = (x < ss, x < ds);
                let own = if in_s && in_d { p[3] } else { 0 };
                let received = match in_d && p[2] > 0 {
                    true => p[2] * partial - own,
                    false => 0,
                };
                let sent = match in_s && p[0] > 0 {
                    true => p[1] * rep_to - own,
                    false => 0,
                };
                if run.1 != (sent, received) && run.0 > 0 {
                    sink.run(run.0, run.1 .0, run.1 .1);
                    run.0 = 0;
                }
                run = (run.0 + 1, (sent, received));
            }
            sink.run(run.0, run.1 .0, run.1 .1);
            if whole {
                sink.end_block();
            }
            r = end;
        }
    }
}
