//! Structured redistributions: what a move between two block distributions is
//! ([`MoveKind`]), its exact words per rank in closed form, and each rank's explicit transfers
//! derived on demand ([`MoveView::transfers_of`]) instead of being stored in the plan.
//!
//! The source of a piece held by several replicas is chosen by a local, deterministic rule
//! ([`MoveView`]): a rank holding the piece copies it to itself; otherwise the replica with the
//! target's own replica coordinates (or `target mod replicas` for a target outside the source
//! grid) sends it. Sender and receiver evaluate the same rule, so both derive the same list
//! without anyone building the whole schedule.

use crate::{Block, Distribution, Grid, MoveKind, PlanStep, TensorId, Transfer, Volume};

/// A nonempty interval of one tensor index under a nested blocking, with the coordinates of
/// the grid dimensions that produced it (in split-list order; inline, as a partition has a
/// piece per block).
#[derive(Clone, Debug)]
pub(crate) struct Piece {
    pub(crate) start: usize,
    pub(crate) end: usize,
    pub(crate) coords: smallvec::SmallVec<[usize; 4]>,
}

/// The nonempty intervals of `[0, n)` blocked by the grid dimensions `dims` of `dist` (nested,
/// outermost first, in `dist`'s blocking), in increasing order.
pub(crate) fn partition(n: usize, dims: &[usize], dist: &Distribution) -> Vec<Piece> {
    let grid = &dist.grid;
    let mut cur = vec![Piece {
        start: 0,
        end: n,
        coords: smallvec::SmallVec::new(),
    }];
    for &g in dims {
        let p = grid.dims[g].size;
        let mut next = Vec::with_capacity(cur.len() * p.min(n.max(1)));
        for iv in &cur {
            for x in 0..p {
                let (s, e) = dist.cut((iv.start, iv.end), g, x);
                if s < e {
                    let mut coords = iv.coords.clone();
                    coords.push(x);
                    next.push(Piece {
                        start: s,
                        end: e,
                        coords,
                    });
                }
            }
        }
        cur = next;
    }
    cur.retain(|iv| iv.start < iv.end);
    cur
}

/// The intervals of `parts` that meet `[s, e)` (a contiguous run: `parts` is sorted and
/// disjoint).
fn meeting(parts: &[Piece], (s, e): (usize, usize)) -> &[Piece] {
    let lo = parts.partition_point(|iv| iv.end <= s);
    let hi = parts.partition_point(|iv| iv.start < e);
    &parts[lo..hi.max(lo)]
}

/// Whether `parts` (sorted, disjoint, nonempty) cover `[0, n)` without a gap.
fn tiles(parts: &[Piece], n: usize) -> bool {
    let mut at = 0;
    for p in parts {
        if p.start != at {
            return false;
        }
        at = p.end;
    }
    at == n
}

/// Length of the overlap of two half-open ranges.
fn overlap((a, b): (usize, usize), (c, d): (usize, usize)) -> u64 {
    b.min(d).saturating_sub(a.max(c)) as u64
}

/// Coordinate of `rank` along grid dimension `k` (row-major, last fastest).
pub fn coord(g: &Grid, rank: usize, k: usize) -> usize {
    let inner: usize = g.dims[k + 1..].iter().map(|d| d.size).product();
    (rank / inner) % g.dims[k].size
}

/// The ranges of the block `rank` holds in `dist` (`None` outside the grid), inline: the
/// rank's coordinates are taken once (one division per grid dim), then each index is cut.
pub(crate) fn ranges_of(
    dist: &Distribution,
    rank: usize,
    shape: &[usize],
) -> Option<crate::Ranges> {
    let g = &dist.grid;
    let mut coords = smallvec::SmallVec::<[usize; 8]>::from_elem(0, g.dims.len());
    let mut r = rank;
    for (k, d) in g.dims.iter().enumerate().rev() {
        coords[k] = r % d.size;
        r /= d.size;
    }
    if r > 0 {
        return None;
    }
    let ranges = shape.iter().enumerate();
    Some(
        ranges
            .map(|(v, &n)| dist.index_range(v, n, |g| coords[g]).into())
            .collect(),
    )
}

/// The blocks of one distribution's ranks, for sweeps over ranks in order: each index's
/// ranges tabled by the coordinates of the grid dims it is split over (cut on the fly when
/// that table would be large), the grid's coordinates stepped by [`Cuts::step`].
pub(crate) struct Cuts {
    /// Grid dim sizes.
    sizes: Vec<usize>,
    /// Per index: the grid dims it is split over and, when small enough, its range per
    /// mixed-radix number of their coordinates (first dim most significant).
    per_index: Vec<(Vec<usize>, Option<Vec<Range>>)>,
    /// Per index, the last grid dim that splits it: a step that changes only later dims
    /// leaves its range as it was ([`Cursor`] cuts it again only when one of its dims moved).
    index_last: Vec<Option<usize>>,
    shape: Vec<usize>,
    dist: Distribution,
}

/// A half-open range of one index.
type Range = (usize, usize);

/// Largest per-index table [`Cuts`] builds (entries); beyond, the ranges are cut per rank.
const MAX_CUT_TABLE: usize = 1 << 12;

/// Largest per-index table a [`Kernel`] builds (once per move, not per sweep).
const MAX_KERNEL_TABLE: usize = 1 << 16;

impl Cuts {
    pub(crate) fn new(dist: &Distribution, shape: &[usize]) -> Cuts {
        Self::capped(dist, shape, MAX_CUT_TABLE)
    }

    /// [`Self::new`] with per-index tables of up to `cap` entries.
    pub(crate) fn capped(dist: &Distribution, shape: &[usize], cap: usize) -> Cuts {
        let sizes: Vec<usize> = dist.grid.dims.iter().map(|d| d.size).collect();
        let per_index = shape
            .iter()
            .enumerate()
            .map(|(v, &n)| {
                let dims = dist.split[v].clone();
                let count = dims
                    .iter()
                    .try_fold(1usize, |a, &g| a.checked_mul(sizes[g]))
                    .filter(|&c| c <= cap);
                let table = count.map(|count| {
                    let mut coords = vec![0usize; sizes.len()];
                    (0..count)
                        .map(|mut x| {
                            for &g in dims.iter().rev() {
                                coords[g] = x % sizes[g];
                                x /= sizes[g];
                            }
                            dist.index_range(v, n, |g| coords[g]).into()
                        })
                        .collect()
                });
                (dims, table)
            })
            .collect();
        let index_last = dist.split.iter().map(|d| d.iter().copied().max()).collect();
        Cuts {
            sizes,
            per_index,
            index_last,
            shape: shape.to_vec(),
            dist: dist.clone(),
        }
    }

    /// Ranks (aligned) over which the length of the block cut to `window` stays the same:
    /// the stride of the innermost grid dim (over more than one rank) that splits an index
    /// whose tabled ranges, narrowed, differ in length; the grid's size when none does.
    /// `None` when an index has no table.
    pub(crate) fn length_run(&self, window: &[crate::Window]) -> Option<usize> {
        let mut stride = vec![1usize; self.sizes.len() + 1];
        for k in (0..self.sizes.len()).rev() {
            stride[k] = stride[k + 1].saturating_mul(self.sizes[k]);
        }
        let mut run = stride[0].max(1);
        for (v, (dims, table)) in self.per_index.iter().enumerate() {
            let t = table.as_ref()?;
            let of = |r: &Range| crate::Window::narrow(window, v, (*r).into()).len();
            let first = t.first().map_or(0, of);
            if t.iter().all(|r| of(r) == first) {
                continue;
            }
            for &g in dims.iter().filter(|&&g| self.sizes[g] > 1) {
                run = run.min(stride[g + 1]);
            }
        }
        Some(run)
    }

    /// The coordinates of `rank` (taken modulo the grid's size: a rank past the grid's end
    /// holds nothing of it, whatever they are).
    pub(crate) fn start_at(&self, rank: usize) -> Vec<usize> {
        let mut coords = vec![0; self.sizes.len()];
        let mut r = rank;
        for (k, &n) in self.sizes.iter().enumerate().rev() {
            coords[k] = r % n.max(1);
            r /= n.max(1);
        }
        coords
    }

    /// The block at `coords`, into `out`.
    pub(crate) fn ranges_into(&self, coords: &[usize], out: &mut crate::Ranges) {
        out.clear();
        for v in 0..self.per_index.len() {
            out.push(self.range_of(v, coords));
        }
    }

    /// The range of index `v` at `coords`.
    fn range_of(&self, v: usize, coords: &[usize]) -> Range {
        let (dims, table) = &self.per_index[v];
        match table {
            Some(t) => t[dims.iter().fold(0, |a, &g| a * self.sizes[g] + coords[g])],
            None => self
                .dist
                .index_range(v, self.shape[v], |g| coords[g])
                .into(),
        }
    }

    /// The next rank's coordinates (row-major, last fastest; wraps past the grid's end);
    /// returns the outermost grid dim that changed (0 after wrapping).
    fn step_dim(&self, coords: &mut [usize]) -> usize {
        for k in (0..coords.len()).rev() {
            coords[k] += 1;
            if coords[k] < self.sizes[k] {
                return k;
            }
            coords[k] = 0;
        }
        0
    }
}

/// A walk over consecutive ranks of one distribution: its coordinates stepped as an odometer
/// and its block kept current by cutting again only the indices whose grid dims moved (per
/// rank, usually one table lookup instead of one per index).
pub(crate) struct Cursor<'c> {
    cuts: &'c Cuts,
    coords: Vec<usize>,
    ranges: crate::Ranges,
    /// Outermost grid dim moved since `ranges` were cut (`usize::MAX`: none; 0 with
    /// `fresh`: cut every index).
    moved: usize,
    /// `ranges` not cut yet.
    fresh: bool,
}

impl<'c> Cursor<'c> {
    /// The walk from `rank`.
    pub(crate) fn new(cuts: &'c Cuts, rank: usize) -> Cursor<'c> {
        Cursor {
            coords: cuts.start_at(rank),
            cuts,
            ranges: crate::Ranges::new(),
            moved: 0,
            fresh: true,
        }
    }

    /// Makes the block the current rank's; true when it differs from the block this walk
    /// last made current (always the first time).
    pub(crate) fn sync(&mut self) -> bool {
        let c = self.cuts;
        if self.fresh {
            c.ranges_into(&self.coords, &mut self.ranges);
            (self.fresh, self.moved) = (false, usize::MAX);
            return true;
        }
        if self.moved == usize::MAX {
            return false;
        }
        let mut changed = false;
        for v in 0..self.ranges.len() {
            if c.index_last[v].is_some_and(|g| g >= self.moved) {
                let r = c.range_of(v, &self.coords);
                changed |= r != self.ranges[v];
                self.ranges[v] = r;
            }
        }
        self.moved = usize::MAX;
        changed
    }

    /// The block made current by the last [`Self::sync`].
    pub(crate) fn ranges(&self) -> &[Range] {
        &self.ranges
    }

    /// Steps to the next rank.
    pub(crate) fn advance(&mut self) {
        let k = self.cuts.step_dim(&mut self.coords);
        self.moved = self.moved.min(k);
    }
}

/// Shortest run of ranks [`MoveView::runs`] takes: below it, a sweep rank by rank (whose
/// cursors cut only what moved) is the cheaper.
const MIN_RUN: usize = 4;

/// Ranks of `dist`'s grid that hold the same block, aligned: the stride of the innermost grid
/// dim (over more than one rank) that splits an index; the grid's size when none does.
fn block_run(dist: &Distribution) -> usize {
    let dims = &dist.grid.dims;
    let mut stride = 1;
    for k in (0..dims.len()).rev() {
        if dims[k].size > 1 && dist.split.iter().any(|s| s.contains(&k)) {
            return stride;
        }
        stride *= dims[k].size;
    }
    stride.max(1)
}

/// Number of elements of the block `rank` holds in `dist` (0 outside the grid), without
/// allocating for tensors of up to four indices.
pub fn block_len(dist: &Distribution, rank: usize, shape: &[usize]) -> u64 {
    ranges_of(dist, rank, shape).map_or(0, |r| r.iter().map(|&(lo, hi)| (hi - lo) as u64).product())
}

/// One redistribution (a tensor of `shape` from `from` to `to` on `procs` ranks, summing the
/// partial replicas of `from` when `sum`) with the geometry that per-rank queries share:
/// both partitions and the roles of the source grid's dims. Building it costs the size of the
/// two partitions (at most the number of blocks); every query is about one rank.
///
/// Without `sum`, every element of every nonempty target block is received exactly once, from
/// a rank whose `from` block holds it; a rank that already holds a piece copies it to itself (a
/// transfer with `src == dst`, not counted in the volume). With `sum`, every target element
/// receives exactly one contribution from every partial replica. One transfer per (src, dst)
/// pair, carrying the one box where the source block meets the target block. `to` may be a
/// phase window; `from` must not be (panics). Grids must fit in `procs` ranks.
#[derive(Clone, Debug)]
pub struct MoveView {
    shape: Vec<usize>,
    from: Distribution,
    to: Distribution,
    sum: bool,
    /// Source partition per tensor index.
    src_parts: Vec<Vec<Piece>>,
    /// Target partition per tensor index, cut to the target's windows (empty cuts dropped).
    dst_parts: Vec<Vec<Piece>>,
    /// Per index, whether its target pieces tile `[0, n)` (no window cuts it): the words of a
    /// source range that target blocks take are then its length, without a search.
    dst_tiles: Vec<bool>,
    /// Source grid dims whose coordinates pick a partial replica (only with `sum`).
    partial_dims: Vec<usize>,
    /// Source grid dims whose coordinates only pick a replica of the same data.
    replica_dims: Vec<usize>,
    replicas: usize,
    partial_count: usize,
    /// Target grid dims that split no index (the target's replicas).
    to_rep_dims: Vec<usize>,
    /// Number of target ranks per target block (the product of `to_rep_dims`).
    rep_to: u64,
    /// Whether each piece has one holder (closed-form sends).
    one_holder: bool,
    src_size: usize,
    dst_size: usize,
    /// Words each source rank sends to others, when senders are picked per rank (replicas):
    /// derived once from every target's receives, for sweeps over all ranks.
    sent_table: std::sync::OnceLock<Vec<u64>>,
    /// The tabled sweep of a one-holder move (`None` inside: its tables would be large).
    kernel: std::sync::OnceLock<Option<Kernel>>,
}

/// What a sweep's [`MoveView::words_with`] keeps from rank to rank.
#[derive(Default)]
struct SentMemo {
    /// Per index, the last source range seen and the words of it that target blocks take (a
    /// sweep meets the same ranges rank after rank).
    cover: Vec<(Range, u64)>,
    /// Take each rank's sends from the move's table (a sweep over all ranks) rather than
    /// deriving them for the one rank.
    table: bool,
}

impl SentMemo {
    /// The memo of a sweep over every rank.
    fn sweep() -> SentMemo {
        SentMemo {
            cover: Vec::new(),
            table: true,
        }
    }
}

impl MoveView {
    /// The view of moving a tensor of `shape` from `from` to `to` on `procs` ranks.
    pub fn new(
        shape: &[usize],
        from: &Distribution,
        to: &Distribution,
        sum: bool,
        procs: usize,
    ) -> MoveView {
        // Sources are partitioned by their grid splits alone: a phase buffer is never a source.
        assert!(
            from.window.is_empty(),
            "redistribute from a phase window (a planner bug)"
        );
        let fg = &from.grid;
        let nd = shape.len();
        let src_parts: Vec<Vec<Piece>> = (0..nd)
            .map(|v| partition(shape[v], &from.split[v], from))
            .collect();
        let dst_parts: Vec<Vec<Piece>> = (0..nd)
            .map(|v| {
                let mut p = partition(shape[v], &to.split[v], to);
                for iv in &mut p {
                    (iv.start, iv.end) = to.windowed(v, (iv.start, iv.end));
                }
                p.retain(|iv| iv.start < iv.end);
                p
            })
            .collect();
        let split_dims = |d: &Distribution| {
            let mut is = vec![false; d.grid.dims.len()];
            for dims in &d.split {
                for &g in dims {
                    is[g] = true;
                }
            }
            is
        };
        let is_split = split_dims(from);
        let partial_dims: Vec<usize> = if sum {
            let mut p: Vec<usize> = from
                .partial
                .iter()
                .copied()
                .filter(|&g| !is_split[g])
                .collect();
            p.sort_unstable();
            p.dedup();
            p
        } else {
            Vec::new()
        };
        let replica_dims: Vec<usize> = (0..fg.dims.len())
            .filter(|&g| !is_split[g] && !partial_dims.contains(&g))
            .collect();
        let to_split = split_dims(to);
        let to_rep_dims: Vec<usize> = (0..to.grid.dims.len()).filter(|&g| !to_split[g]).collect();
        let replicas: usize = replica_dims.iter().map(|&g| fg.dims[g].size).product();
        MoveView {
            rep_to: to_rep_dims
                .iter()
                .map(|&g| to.grid.dims[g].size as u64)
                .product(),
            one_holder: replicas <= 1 && to.grid.size() <= procs.max(1),
            replicas,
            to_rep_dims,
            shape: shape.to_vec(),
            partial_count: partial_dims.iter().map(|&g| fg.dims[g].size).product(),
            src_size: fg.size().min(procs.max(1)),
            dst_size: to.grid.size().min(procs.max(1)),
            from: from.clone(),
            to: to.clone(),
            sum,
            sent_table: std::sync::OnceLock::new(),
            kernel: std::sync::OnceLock::new(),
            src_parts,
            dst_tiles: dst_parts
                .iter()
                .zip(shape)
                .map(|(p, &n)| tiles(p, n))
                .collect(),
            dst_parts,
            partial_dims,
            replica_dims,
        }
    }

    /// Words `rank` receives (its target block once per partial replica, minus what its own
    /// source block already holds).
    pub fn received_of(&self, rank: usize) -> u64 {
        self.words_of(rank).1
    }

    /// Words `rank` sends and receives, each block of the rank cut once.
    pub fn words_of(&self, rank: usize) -> (u64, u64) {
        let sb = if rank < self.src_size {
            ranges_of(&self.from, rank, &self.shape)
        } else {
            None
        };
        let tb = if rank < self.dst_size {
            ranges_of(&self.to, rank, &self.shape)
        } else {
            None
        };
        self.words_with(rank, sb.as_deref(), tb.as_deref(), &mut SentMemo::default())
    }

    /// [`Self::words_of`] given the rank's source and target blocks (`None` outside a grid)
    /// and what the sweep keeps from rank to rank.
    fn words_with(
        &self,
        rank: usize,
        sb: Option<&[(usize, usize)]>,
        tb: Option<&[(usize, usize)]>,
        memo: &mut SentMemo,
    ) -> (u64, u64) {
        let len = |b: &[(usize, usize)]| -> u64 {
            b.iter().map(|&(s, e)| e.saturating_sub(s) as u64).product()
        };
        let own = match (sb, tb) {
            (Some(a), Some(b)) => a.iter().zip(b).map(|(&x, &y)| overlap(x, y)).product(),
            _ => 0,
        };
        let received = match tb {
            Some(b) if len(b) > 0 => len(b) * self.partial_count as u64 - own,
            _ => 0,
        };
        let sent = match sb {
            Some(b) if len(b) > 0 => self.sent_from(rank, b, own, memo),
            _ => 0,
        };
        (sent, received)
    }

    /// Words sent and received by each rank of `0..n`, in order ([`Self::words_of`] of each,
    /// the blocks cut by one sweep instead of per-rank divisions).
    pub(crate) fn words_per_rank(&self, n: usize) -> Vec<(u64, u64)> {
        let mut out = Vec::with_capacity(n);
        self.words_each(n, |_, s, w| out.push((s, w)));
        out
    }

    /// Calls `f(rank, sent, received)` for each rank of `0..n` in order: [`Self::words_per_rank`]
    /// without holding the list (a rank's words are used once, by the running totals).
    pub(crate) fn words_each(&self, n: usize, f: impl FnMut(usize, u64, u64)) {
        self.words_in(0..n, f)
    }

    /// [`Self::words_each`] over the ranks of `ranks` (a part of a sweep over all of them).
    pub(crate) fn words_in(
        &self,
        ranks: std::ops::Range<usize>,
        mut f: impl FnMut(usize, u64, u64),
    ) {
        let (mut last, mut memo) = ((0, 0), SentMemo::sweep());
        self.sweep_range(ranks, |r, sb, tb, same| {
            // Equal blocks send and receive alike unless senders are picked per rank.
            if !(same && self.one_holder) {
                last = self.words_with(r, sb, tb, &mut memo);
            }
            f(r, last.0, last.1);
        });
    }

    /// Whether [`Self::runs_in`] sweeps this move by runs of ranks: its sends are closed form
    /// (a rank's words are its blocks') and both grids keep a block for [`MIN_RUN`] ranks or
    /// more.
    pub(crate) fn sweeps_by_runs(&self) -> bool {
        self.one_holder && block_run(&self.from).min(block_run(&self.to)) >= MIN_RUN
    }

    /// Calls `f(rank, len, source block, target block)` for the runs of ranks of `ranks` that
    /// hold the same two blocks, in order (a block is `None` outside its grid): a grid's block
    /// changes only where the coordinate of a dim that splits an index does, at multiples of
    /// [`block_run`], so a run's blocks are cut once for all its ranks.
    fn runs(
        &self,
        ranks: std::ops::Range<usize>,
        mut f: impl FnMut(usize, usize, Option<&[Range]>, Option<&[Range]>),
    ) {
        let (from, to) = (
            Cuts::new(&self.from, &self.shape),
            Cuts::new(&self.to, &self.shape),
        );
        let (ms, md) = (block_run(&self.from), block_run(&self.to));
        let (mut sb, mut tb) = (crate::Ranges::new(), crate::Ranges::new());
        let mut r = ranks.start;
        while r < ranks.end {
            let (in_src, in_dst) = (r < self.src_size, r < self.dst_size);
            let mut next = ranks.end;
            if in_src {
                next = next.min(self.src_size).min((r / ms + 1) * ms);
                from.ranges_into(&from.start_at(r), &mut sb);
            }
            if in_dst {
                next = next.min(self.dst_size).min((r / md + 1) * md);
                to.ranges_into(&to.start_at(r), &mut tb);
            }
            f(
                r,
                next - r,
                in_src.then_some(&sb[..]),
                in_dst.then_some(&tb[..]),
            );
            r = next;
        }
    }

    /// Calls `f(len, sent, received)` for consecutive runs of the ranks of `ranks` (one
    /// rank each unless [`Self::sweeps_by_runs`]), in order: [`Self::words_in`] by runs.
    pub(crate) fn words_by_runs(
        &self,
        ranks: std::ops::Range<usize>,
        mut f: impl FnMut(usize, u64, u64),
    ) {
        if !self.sweeps_by_runs() {
            if self.one_holder {
                if let Some(k) = self.kernel.get_or_init(|| Kernel::new(self)) {
                    return match &k.blocks {
                        Some(b) => {
                            b.sweep(&k.src, &k.dst, self.counts(), ranks, &mut blocks::FnSink(f))
                        }
                        None => k.sweep(self, ranks, |s, w| f(1, s, w)),
                    };
                }
            }
            return self.words_in(ranks, |_, s, w| f(1, s, w));
        }
        let mut memo = SentMemo::sweep();
        self.runs(ranks, |r, len, sb, tb| {
            let (s, w) = self.words_with(r, sb, tb, &mut memo);
            f(len, s, w)
        });
    }

    /// [`Self::words_by_runs`] into `sink`, which may replay whole blocks of ranks that the
    /// sweep per class of coordinates finds alike ([`blocks::WordSink`]).
    pub(crate) fn words_into(&self, ranks: std::ops::Range<usize>, sink: &mut impl WordSink) {
        if !self.sweeps_by_runs() && self.one_holder {
            if let Some(k) = self.kernel.get_or_init(|| Kernel::new(self)) {
                if let Some(b) = &k.blocks {
                    return b.sweep(&k.src, &k.dst, self.counts(), ranks, sink);
                }
            }
        }
        self.words_by_runs(ranks, |n, s, w| sink.run(n, s, w))
    }

    /// Calls `f(len, received)` for consecutive runs of the ranks of `ranks` (within the
    /// target grid): [`Self::received_in`] by runs when [`Self::sweeps_by_runs`].
    pub(crate) fn received_by_runs(
        &self,
        ranks: std::ops::Range<usize>,
        mut f: impl FnMut(usize, u64),
    ) {
        if !self.sweeps_by_runs() {
            return self.received_in(ranks, |w| f(1, w));
        }
        self.runs(ranks, |_, len, sb, tb| f(len, self.received_with(sb, tb)));
    }

    /// What a block sweep needs of the move beside its tables.
    fn counts(&self) -> blocks::Counts {
        blocks::Counts {
            partial: self.partial_count as u64,
            rep_to: self.rep_to,
            src_size: self.src_size,
            dst_size: self.dst_size,
        }
    }

    /// Ranks that can send or receive anything (the larger of the two grids, at most P):
    /// every rank past them moves nothing.
    pub(crate) fn ranks(&self) -> usize {
        self.src_size.max(self.dst_size)
    }

    /// Words sent plus received by each rank of `ranks`, in order (what its message buffers
    /// hold during the move).
    pub(crate) fn buffer_words(&self, ranks: std::ops::Range<usize>) -> Vec<u64> {
        let mut out = Vec::with_capacity(ranks.len());
        let (mut last, mut memo) = (0, SentMemo::sweep());
        self.sweep_range(ranks, |r, sb, tb, same| {
            if !(same && self.one_holder) {
                let (s, w) = self.words_with(r, sb, tb, &mut memo);
                last = s + w;
            }
            out.push(last);
        });
        out
    }

    /// Words `rank` sends.
    pub fn sent_of(&self, rank: usize) -> u64 {
        self.words_of(rank).0
    }

    /// Words `rank` sends from its nonempty source block `sb`, `own` of which stay with it.
    /// With one holder per piece this is closed form: every target rank whose block meets
    /// `sb` takes that overlap from it, so the sum separates per index; with replicas it
    /// counts the rank's derived sends.
    fn sent_from(&self, rank: usize, sb: &[(usize, usize)], own: u64, memo: &mut SentMemo) -> u64 {
        if !self.one_holder && memo.table {
            return self.sent_table().get(rank).copied().unwrap_or(0);
        }
        if !self.one_holder {
            return self
                .sends(rank)
                .iter()
                .filter(|t| t.dst != rank)
                .map(|t| t.boxes.iter().map(Block::len).sum::<u64>())
                .sum();
        }
        let cover = &mut memo.cover;
        if cover.len() != sb.len() {
            // An empty range never matches a nonempty source block's: every entry is cut.
            cover.clear();
            cover.resize(sb.len(), ((0, 0), 0));
        }
        let mut words = 1u64;
        let tiled = sb.iter().zip(&self.dst_parts).zip(&self.dst_tiles);
        for (((&r, parts), &tiles), c) in tiled.zip(cover.iter_mut()) {
            if tiles {
                words *= r.1.saturating_sub(r.0) as u64;
                continue;
            }
            if c.0 != r {
                let w = meeting(parts, r)
                    .iter()
                    .map(|iv| overlap(r, (iv.start, iv.end)))
                    .sum::<u64>();
                *c = (r, w);
            }
            words *= c.1;
        }
        // A rank's own piece stays only when it also holds that target block (it is in
        // the target grid); `own` is 0 otherwise.
        words * self.rep_to - own
    }

    /// Words each source rank sends to others with replicas (senders picked per rank): every
    /// target's receives taken once, each transfer's words added to its sender, O(P · pieces)
    /// for all ranks where asking each sender ([`Self::sends`]) costs O(P) per rank.
    fn sent_table(&self) -> &[u64] {
        self.sent_table.get_or_init(|| {
            if let Some(sent) = self.sent_from_whole() {
                return sent;
            }
            // The targets in a few contiguous parts on the pool (the sweep that asked waits
            // here with the others), each part's sends summed into its own table.
            let n = self.dst_size;
            let parts = (2 * rayon::current_num_threads()).clamp(1, n.div_ceil(1 << 14).max(1));
            let step = n.div_ceil(parts).max(1);
            let starts: Vec<usize> = (0..n).step_by(step).collect();
            let tables: Vec<Vec<u64>> =
                deinsum_runtime::map_in_order(&starts, starts.len() > 1, |&lo| {
                    self.sent_by(lo..(lo + step).min(n))
                });
            let mut tables = tables.into_iter();
            let mut sent = tables.next().unwrap_or_else(|| vec![0; self.src_size]);
            for t in tables {
                sent.iter_mut().zip(t).for_each(|(a, b)| *a += b);
            }
            sent
        })
    }

    /// [`Self::sent_table`] when every source rank holds the whole tensor (no grid dim of
    /// more than one rank splits an index, no partial sums): a target inside the source grid
    /// copies from itself, one past it takes its block from rank `d mod replicas` (the
    /// sender [`Self::pick`] names), so only the targets past the source grid are walked.
    fn sent_from_whole(&self) -> Option<Vec<u64>> {
        let fg = &self.from.grid;
        let whole = self.partial_count <= 1
            && self
                .from
                .split
                .iter()
                .flatten()
                .all(|&g| fg.dims[g].size == 1)
            && self.src_parts.iter().all(|p| p.len() == 1);
        if !whole {
            return None;
        }
        let mut sent = vec![0u64; self.src_size];
        for d in self.src_size..self.dst_size {
            if let Some(tb) = ranges_of(&self.to, d, &self.shape) {
                let words: u64 = tb
                    .iter()
                    .map(|&(s, e)| e.saturating_sub(s) as u64)
                    .product();
                if let Some(s) = sent.get_mut(d % self.replicas.max(1)) {
                    *s += words;
                }
            }
        }
        Some(sent)
    }

    /// Words each source rank sends to the targets of `targets` (others than itself), with
    /// replicas: what [`Self::receives`] lists for each target, counted without building the
    /// transfers (one box per sender and piece: its words are the overlaps' product).
    fn sent_by(&self, targets: std::ops::Range<usize>) -> Vec<u64> {
        let mut sent = vec![0u64; self.src_size];
        let nf = self.from.grid.dims.len();
        let mut coords = vec![0usize; nf];
        let mut lists: Vec<&[Piece]> = Vec::with_capacity(self.shape.len());
        // The targets' blocks by a cursor (no per-rank divisions); the pieces that meet a
        // block are looked up again only when it changed.
        let cuts = Cuts::new(&self.to, &self.shape);
        let mut cur = Cursor::new(&cuts, targets.start);
        let mut empty = true;
        let mut picker = Picker::new(self);
        for d in targets {
            if cur.sync() {
                let tb = cur.ranges();
                empty = tb.iter().any(|&(s, e)| s >= e);
                lists.clear();
                lists.extend(self.src_parts.iter().zip(tb).map(|(p, &r)| meeting(p, r)));
            }
            if !empty {
                self.sent_to(d, cur.ranges(), &lists, &mut picker, &mut coords, &mut sent);
            }
            cur.advance();
        }
        sent
    }

    /// Adds to `sent` the words each source rank sends target `d` (block `tb`, met by the
    /// source pieces of `lists`), itself excluded.
    fn sent_to(
        &self,
        d: usize,
        tb: &[Range],
        lists: &[&[Piece]],
        picker: &mut Picker,
        coords: &mut [usize],
        sent: &mut [u64],
    ) {
        picker.at(self, d);
        odometer(lists, |pos| {
            let mut words = 1u64;
            for (v, list) in lists.iter().enumerate() {
                let iv = &list[pos[v]];
                words *= overlap((iv.start, iv.end), tb[v]);
                for (k, &g) in self.from.split[v].iter().enumerate() {
                    coords[g] = iv.coords[k];
                }
            }
            for q in 0..self.partial_count {
                self.partial_coords(q, coords);
                let src = picker.pick(self, d, coords);
                if src != d {
                    if let Some(s) = sent.get_mut(src) {
                        *s += words;
                    }
                }
            }
        });
    }

    /// Words received per rank, sparse `(rank, words)` ascending (nonzero only): what the
    /// planner scores candidates by (it does not depend on the choice of senders).
    pub fn received(&self) -> crate::PerRank {
        let mut out = crate::PerRank::new();
        let mut last = 0;
        self.sweep(self.dst_size, |r, sb, tb, same| {
            if !same {
                last = self.received_with(sb, tb);
            }
            if last > 0 {
                out.push(r, last);
            }
        });
        out
    }

    /// Calls `f(received)` for each rank of `ranks` (within the target grid) in order: the
    /// words [`Self::received`] lists, for the planner's scoring, which adds the moves of a
    /// candidate rank by rank.
    pub(crate) fn received_in(&self, ranks: std::ops::Range<usize>, mut f: impl FnMut(u64)) {
        let mut last = 0;
        self.sweep_range(ranks, |_, sb, tb, same| {
            if !same {
                last = self.received_with(sb, tb);
            }
            f(last);
        });
    }

    /// Whether each piece has one holder, so a rank's sent words are closed form (with
    /// replicas they come from every target's receives).
    pub(crate) fn sends_in_closed_form(&self) -> bool {
        self.one_holder
    }

    /// Ranks of the target grid within P (every later rank receives nothing).
    pub(crate) fn dst_ranks(&self) -> usize {
        self.dst_size
    }

    /// What the move's words depend on: the shape, both distributions, whether partial sums
    /// are reduced, and the ranks of both grids within P.
    pub(crate) fn identity(&self) -> (&[usize], &Distribution, &Distribution, bool, usize, usize) {
        (
            &self.shape,
            &self.from,
            &self.to,
            self.sum,
            self.src_size,
            self.dst_size,
        )
    }

    /// Words a rank with source block `sb` and target block `tb` receives.
    fn received_with(&self, sb: Option<&[(usize, usize)]>, tb: Option<&[(usize, usize)]>) -> u64 {
        let Some(tb) = tb else { return 0 };
        let t_len: u64 = tb
            .iter()
            .map(|&(s, e)| e.saturating_sub(s) as u64)
            .product();
        if t_len == 0 {
            return 0;
        }
        let own = sb.map_or(0, |fb| {
            fb.iter()
                .zip(tb)
                .map(|(&a, &b)| overlap(a, b))
                .product::<u64>()
        });
        t_len * self.partial_count as u64 - own
    }

    /// Calls `f(rank, source block, target block, same)` for ranks `0..n` in order (a block
    /// is `None` outside its grid; `same`: both blocks are the previous rank's), each grid's
    /// coordinates stepped as an odometer and each index cut from a table ([`Cuts`]) only
    /// when a dim that splits it moved: the per-rank divisions of [`ranges_of`] are what
    /// planning spent most of its time in at thousands of ranks.
    fn sweep(&self, n: usize, f: impl FnMut(usize, Option<&[Range]>, Option<&[Range]>, bool)) {
        self.sweep_range(0..n, f)
    }

    /// [`Self::sweep`] over the ranks of `ranks`.
    fn sweep_range(
        &self,
        ranks: std::ops::Range<usize>,
        mut f: impl FnMut(usize, Option<&[Range]>, Option<&[Range]>, bool),
    ) {
        let (from, to) = (
            Cuts::new(&self.from, &self.shape),
            Cuts::new(&self.to, &self.shape),
        );
        let (mut fc, mut tc) = (
            Cursor::new(&from, ranks.start),
            Cursor::new(&to, ranks.start),
        );
        // Whether the previous rank was in each grid (leaving a grid changes a block too: it
        // becomes none).
        let (mut was_src, mut was_dst) = (false, false);
        let mut first = true;
        for r in ranks {
            let (in_src, in_dst) = (r < self.src_size, r < self.dst_size);
            let mut same = !first && in_src == was_src && in_dst == was_dst;
            if in_src {
                same &= !fc.sync();
            }
            if in_dst {
                same &= !tc.sync();
            }
            f(
                r,
                in_src.then_some(fc.ranges()),
                in_dst.then_some(tc.ranges()),
                same,
            );
            fc.advance();
            tc.advance();
            (was_src, was_dst, first) = (in_src, in_dst, false);
        }
    }

    /// The volume of the move over all ranks: max and total always, the sparse per-rank lists
    /// when `per_rank`. Costs O(P) rank queries.
    pub fn volume(&self, per_rank: bool) -> Volume {
        let n = self.src_size.max(self.dst_size);
        let mut v = Volume::default();
        let (mut last, mut memo) = ((0, 0), SentMemo::sweep());
        self.sweep(n, |r, sb, tb, same| {
            if !(same && self.one_holder) {
                last = self.words_with(r, sb, tb, &mut memo);
            }
            v.add_rank(r, last.0, last.1, per_rank);
        });
        v
    }

    /// Calls `f` with the sender [`Self::pick`]s for `d` of each partial block at the split
    /// coordinates already in `coords` (one per combination of the partial dims' coordinates).
    fn partial_senders(&self, d: usize, coords: &mut [usize], mut f: impl FnMut(usize)) {
        for q in 0..self.partial_count {
            self.partial_coords(q, coords);
            f(self.pick(d, coords));
        }
    }

    /// Writes the `q`-th combination of the partial dims' coordinates into `coords` (the last
    /// partial dim fastest).
    fn partial_coords(&self, q: usize, coords: &mut [usize]) {
        let fg = &self.from.grid;
        let mut r = q;
        for &g in self.partial_dims.iter().rev() {
            coords[g] = r % fg.dims[g].size;
            r /= fg.dims[g].size;
        }
    }

    /// The sender of the piece of the source cell at `coords` (split and partial dims set)
    /// to target `d`: `d` itself when it holds the piece, else the replica at `d`'s own replica
    /// coordinates (`d mod replicas` outside the source grid). Sets the replica dims of
    /// `coords` to the sender's.
    fn pick(&self, d: usize, coords: &mut [usize]) -> usize {
        let fg = &self.from.grid;
        if d < self.src_size {
            let holds = (0..coords.len())
                .filter(|g| !self.replica_dims.contains(g))
                .all(|g| coords[g] == coord(fg, d, g));
            if holds {
                for &g in &self.replica_dims {
                    coords[g] = coord(fg, d, g);
                }
                return d;
            }
            for &g in &self.replica_dims {
                coords[g] = coord(fg, d, g);
            }
        } else {
            let mut r = d % self.replicas.max(1);
            for &g in self.replica_dims.iter().rev() {
                coords[g] = r % fg.dims[g].size;
                r /= fg.dims[g].size;
            }
        }
        fg.rank_of(coords)
    }

    /// The transfers `d` receives (including its copy to itself), sorted by sender. Costs the
    /// number of pieces of its target block.
    pub fn receives(&self, d: usize) -> Vec<Transfer> {
        let mut out = Vec::new();
        if d >= self.dst_size {
            return out;
        }
        let Some(tb) = ranges_of(&self.to, d, &self.shape) else {
            return out;
        };
        if tb.iter().any(|&(s, e)| s >= e) {
            return out;
        }
        let fg = &self.from.grid;
        let lists: Vec<&[Piece]> = self
            .src_parts
            .iter()
            .zip(&tb)
            .map(|(p, &r)| meeting(p, r))
            .collect();
        let mut coords = vec![0usize; fg.dims.len()];
        odometer(&lists, |pos| {
            let mut ranges = crate::Ranges::with_capacity(lists.len());
            for (v, list) in lists.iter().enumerate() {
                let iv = &list[pos[v]];
                ranges.push((iv.start.max(tb[v].0), iv.end.min(tb[v].1)));
                for (k, &g) in self.from.split[v].iter().enumerate() {
                    coords[g] = iv.coords[k];
                }
            }
            self.partial_senders(d, &mut coords, |src| {
                out.push(Transfer {
                    src,
                    dst: d,
                    boxes: smallvec::smallvec![Block {
                        ranges: ranges.clone()
                    }],
                });
            });
        });
        out.sort_unstable_by_key(|t| t.src);
        out
    }

    /// The transfers `s` sends (including its copy to itself), sorted by receiver. Costs the
    /// number of target ranks whose block meets its source block (O(P) at worst).
    pub fn sends(&self, s: usize) -> Vec<Transfer> {
        let mut out = Vec::new();
        if s >= self.src_size {
            return out;
        }
        let Some(sb) = ranges_of(&self.from, s, &self.shape) else {
            return out;
        };
        if sb.iter().any(|&(a, b)| a >= b) {
            return out;
        }
        let fg = &self.from.grid;
        let tg = &self.to.grid;
        let own: Vec<usize> = (0..fg.dims.len()).map(|g| coord(fg, s, g)).collect();
        let lists: Vec<&[Piece]> = self
            .dst_parts
            .iter()
            .zip(&sb)
            .map(|(p, &r)| meeting(p, r))
            .collect();
        let reps: usize = self.to_rep_dims.iter().map(|&g| tg.dims[g].size).product();
        let mut tcoords = vec![0usize; tg.dims.len()];
        let mut coords = own.clone();
        odometer(&lists, |pos| {
            let mut ranges = crate::Ranges::with_capacity(lists.len());
            for (v, list) in lists.iter().enumerate() {
                let iv = &list[pos[v]];
                ranges.push((iv.start.max(sb[v].0), iv.end.min(sb[v].1)));
                for (k, &g) in self.to.split[v].iter().enumerate() {
                    tcoords[g] = iv.coords[k];
                }
            }
            for q in 0..reps {
                let mut r = q;
                for &g in self.to_rep_dims.iter().rev() {
                    tcoords[g] = r % tg.dims[g].size;
                    r /= tg.dims[g].size;
                }
                let d = tg.rank_of(&tcoords);
                if d >= self.dst_size {
                    continue;
                }
                coords.copy_from_slice(&own);
                if self.pick(d, &mut coords) == s {
                    out.push(Transfer {
                        src: s,
                        dst: d,
                        boxes: smallvec::smallvec![Block {
                            ranges: ranges.clone()
                        }],
                    });
                }
            }
        });
        out.sort_unstable_by_key(|t| t.dst);
        out
    }

    /// Every transfer `rank` takes part in: what it receives (its copy to itself included),
    /// then what it sends to others.
    pub fn transfers_of(&self, rank: usize) -> Vec<Transfer> {
        let mut out = self.receives(rank);
        out.extend(self.sends(rank).into_iter().filter(|t| t.dst != rank));
        out
    }

    /// What the move is (see [`MoveKind`]); `total` is its total volume (0: [`MoveKind::Local`]).
    pub fn kind(&self, total: u64) -> MoveKind {
        if total == 0 {
            return MoveKind::Local;
        }
        classify(
            &self.from,
            &self.to,
            self.sum && !self.partial_dims.is_empty(),
        )
    }
}

/// [`MoveView::pick`] for one target at a time: the target's own source coordinates and the
/// replica coordinates its pieces come from are taken once per target, not per piece.
struct Picker {
    own: Vec<usize>,
    rep: Vec<usize>,
    in_src: bool,
    /// Source grid dims that are not replica dims (those a holder must match).
    held: Vec<usize>,
}

impl Picker {
    fn new(v: &MoveView) -> Picker {
        let nf = v.from.grid.dims.len();
        Picker {
            own: vec![0; nf],
            rep: vec![0; v.replica_dims.len()],
            in_src: false,
            held: (0..nf).filter(|g| !v.replica_dims.contains(g)).collect(),
        }
    }

    /// Takes target `d`'s coordinates.
    fn at(&mut self, v: &MoveView, d: usize) {
        let fg = &v.from.grid;
        self.in_src = d < v.src_size;
        if self.in_src {
            let mut r = d;
            for (g, dim) in fg.dims.iter().enumerate().rev() {
                self.own[g] = r % dim.size;
                r /= dim.size;
            }
            for (i, &g) in v.replica_dims.iter().enumerate() {
                self.rep[i] = self.own[g];
            }
        } else {
            let mut r = d % v.replicas.max(1);
            for (i, &g) in v.replica_dims.iter().enumerate().rev() {
                self.rep[i] = r % fg.dims[g].size;
                r /= fg.dims[g].size;
            }
        }
    }

    /// [`MoveView::pick`] for the target of the last [`Self::at`].
    #[inline]
    fn pick(&self, v: &MoveView, d: usize, coords: &mut [usize]) -> usize {
        let holds = self.in_src && self.held.iter().all(|&g| coords[g] == self.own[g]);
        for (&g, &c) in v.replica_dims.iter().zip(&self.rep) {
            coords[g] = c;
        }
        match holds {
            true => d,
            false => v.from.grid.rank_of(coords),
        }
    }
}

/// Calls `f(pos)` for every combination of one entry per list (last list fastest); nothing
/// when a list is empty.
fn odometer(lists: &[&[Piece]], mut f: impl FnMut(&[usize])) {
    if lists.iter().any(|l| l.is_empty()) {
        return;
    }
    let mut pos = vec![0usize; lists.len()];
    loop {
        f(&pos);
        let mut v = lists.len();
        loop {
            if v == 0 {
                return;
            }
            v -= 1;
            pos[v] += 1;
            if pos[v] < lists[v].len() {
                break;
            }
            pos[v] = 0;
        }
    }
}

/// The kind of a move that moves words (`sum`: partial sums are reduced on the way).
fn classify(from: &Distribution, to: &Distribution, sum: bool) -> MoveKind {
    if to.grid.size() == 1 {
        return if sum {
            MoveKind::Reduce
        } else {
            MoveKind::Gather
        };
    }
    if from.grid.size() == 1 && !sum && to.split.iter().all(Vec::is_empty) && to.window.is_empty() {
        return MoveKind::Broadcast;
    }
    // Same-grid kinds and permutations match blocks by coordinates: both sides must cut alike.
    if from.grid == to.grid && from.balanced == to.balanced {
        let prefix = from
            .split
            .iter()
            .zip(&to.split)
            .all(|(f, t)| t.len() <= f.len() && f[..t.len()] == t[..]);
        let extends = from
            .split
            .iter()
            .zip(&to.split)
            .all(|(f, t)| f.len() <= t.len() && t[..f.len()] == f[..]);
        if sum {
            let dims: Vec<usize> = from
                .partial
                .iter()
                .copied()
                .filter(|&g| from.grid.dims[g].size > 1)
                .collect();
            if from.split == to.split {
                return MoveKind::AllReduce { dims };
            }
            let added: Vec<usize> = from
                .split
                .iter()
                .zip(&to.split)
                .flat_map(|(f, t)| t.get(f.len()..).unwrap_or(&[]).to_vec())
                .collect();
            if extends && added.iter().all(|g| from.partial.contains(g)) {
                return MoveKind::ReduceScatter { dims };
            }
        } else if prefix {
            let dims = from
                .split
                .iter()
                .zip(&to.split)
                .flat_map(|(f, t)| f[t.len()..].to_vec())
                .collect();
            return MoveKind::AllGather { dims };
        }
    }
    // Whole on every rank of the same rank set, from blocks that are never partial: each
    // rank's block goes to all, an all-gather over the source's split dims (the grids differ,
    // so the same-grid test above does not see it).
    if !sum
        && from.grid.size() == to.grid.size()
        && from.partial.is_empty()
        && from.window.is_empty()
        && to
            .split
            .iter()
            .flatten()
            .all(|&g| to.grid.dims[g].size == 1)
        && to.window.is_empty()
        && to.partial.is_empty()
    {
        let mut dims: Vec<usize> = from
            .split
            .iter()
            .flatten()
            .copied()
            .filter(|&g| from.grid.dims[g].size > 1)
            .collect();
        dims.sort_unstable();
        return MoveKind::AllGather { dims };
    }
    let unreplicated = |d: &Distribution| {
        d.partial.is_empty()
            && d.window.is_empty()
            && d.grid
                .dims
                .iter()
                .enumerate()
                .all(|(g, gd)| gd.size == 1 || d.split.iter().any(|s| s.contains(&g)))
    };
    let sizes = |d: &Distribution| -> Vec<Vec<usize>> {
        d.split
            .iter()
            .map(|s| s.iter().map(|&g| d.grid.dims[g].size).collect())
            .collect()
    };
    if !sum
        && unreplicated(from)
        && unreplicated(to)
        && sizes(from) == sizes(to)
        && from.balanced == to.balanced
    {
        return MoveKind::Permute;
    }
    MoveKind::AllToAll
}

// The per-rank words of a one-holder move swept by table offsets: each index's block range
// looked up at an offset the grid's odometer step moves (no per-rank cut, no change test), and
// a source range's sent words tabled with it; `MoveView::words_by_runs` takes it for moves
// whose grids step a block every rank, where runs do not help.

impl Side {
    /// The side of `cuts`' distribution, `words` counting each tabled range of index `v`;
    /// `None` when an index has no table (too many blocks).
    fn new(cuts: &Cuts, words: impl Fn(usize, Range) -> u64) -> Option<Side> {
        let mut by_dim = vec![Vec::new(); cuts.sizes.len()];
        let mut table = Vec::with_capacity(cuts.per_index.len());
        for (v, (dims, t)) in cuts.per_index.iter().enumerate() {
            let t = t.as_ref()?;
            let mut step = 1;
            for &g in dims.iter().rev() {
                by_dim[g].push((v, step));
                step *= cuts.sizes[g];
            }
            table.push(t.iter().map(|&r| (r, words(v, r))).collect());
        }
        Some(Side {
            sizes: cuts.sizes.clone(),
            by_dim,
            table,
        })
    }

    /// The coordinates and per-index offsets of `rank` (modulo the grid's size).
    fn start(&self, rank: usize) -> (Vec<usize>, Vec<usize>) {
        let mut coords = vec![0; self.sizes.len()];
        let mut r = rank;
        for (k, &n) in self.sizes.iter().enumerate().rev() {
            coords[k] = r % n.max(1);
            r /= n.max(1);
        }
        let mut off = vec![0; self.table.len()];
        for (g, list) in self.by_dim.iter().enumerate() {
            for &(v, step) in list {
                off[v] += coords[g] * step;
            }
        }
        (coords, off)
    }

    /// Steps `coords` (and the offsets) to the next rank (row-major, wrapping at the end).
    #[inline(always)]
    fn step(&self, coords: &mut [usize], off: &mut [usize]) {
        for k in (0..coords.len()).rev() {
            coords[k] += 1;
            if coords[k] < self.sizes[k] {
                self.by_dim[k].iter().for_each(|&(v, s)| off[v] += s);
                return;
            }
            coords[k] = 0;
            let back = self.sizes[k] - 1;
            self.by_dim[k].iter().for_each(|&(v, s)| off[v] -= back * s);
        }
    }
}

/// A one-holder move's two sides, tabled once for all its sweeps.
#[derive(Clone, Debug)]
struct Kernel {
    src: Side,
    dst: Side,
    /// The sweep per class of coordinates, when both grids allow blocks.
    blocks: Option<blocks::Blocks>,
}

impl Kernel {
    /// The kernel of `view` (one holder per piece), `None` when a block table would be large.
    fn new(view: &MoveView) -> Option<Kernel> {
        let (from, to) = (
            Cuts::capped(&view.from, &view.shape, MAX_KERNEL_TABLE),
            Cuts::capped(&view.to, &view.shape, MAX_KERNEL_TABLE),
        );
        // What a source range sends: its length where the target pieces tile the index, else
        // what the target pieces meeting it take (as `MoveView::sent_from` counts it).
        let src = Side::new(&from, |v, r| match view.dst_tiles[v] {
            true => r.1.saturating_sub(r.0) as u64,
            false => meeting(&view.dst_parts[v], r)
                .iter()
                .map(|iv| overlap(r, (iv.start, iv.end)))
                .sum(),
        })?;
        let dst = Side::new(&to, |_, r| r.1.saturating_sub(r.0) as u64)?;
        let mut k = Kernel {
            src,
            dst,
            blocks: None,
        };
        k.blocks = blocks::Blocks::new(&k.src, &k.dst);
        Some(k)
    }

    /// Calls `f(sent, received)` for each rank of `ranks` in order: the words
    /// `MoveView::words_with` gives a one-holder move's rank.
    fn sweep(&self, view: &MoveView, ranks: std::ops::Range<usize>, mut f: impl FnMut(u64, u64)) {
        let (mut sc, mut so) = self.src.start(ranks.start);
        let (mut tc, mut to_off) = self.dst.start(ranks.start);
        let (partial, rep_to) = (view.partial_count as u64, view.rep_to);
        let (st, dt) = (&self.src.table, &self.dst.table);
        for r in ranks {
            let (in_src, in_dst) = (r < view.src_size, r < view.dst_size);
            let (mut slen, mut cover, mut tlen, mut own) = (1u64, 1u64, 1u64, 1u64);
            let src = st.iter().zip(&so);
            for ((sv, &si), (dv, &di)) in src.zip(dt.iter().zip(&to_off)) {
                let (s, c) = sv[si];
                let (t, l) = dv[di];
                slen *= s.1.saturating_sub(s.0) as u64;
                cover *= c;
                tlen *= l;
                own *= overlap(s, t);
            }
            let own = if in_src && in_dst { own } else { 0 };
            let received = match in_dst && tlen > 0 {
                true => tlen * partial - own,
                false => 0,
            };
            let sent = match in_src && slen > 0 {
                true => cover * rep_to - own,
                false => 0,
            };
            f(sent, received);
            self.src.step(&mut sc, &mut so);
            self.dst.step(&mut tc, &mut to_off);
        }
    }
}

mod blocks;
use blocks::Side;
pub(crate) use blocks::{BlockKey, WordSink};

#[cfg(test)]
mod tests;

impl crate::Plan {
    /// The moves of step `step`: one for a Redistribute, one per fetch of a ComputePhase and
    /// then one per prefetch, none otherwise (or for a step out of range).
    pub fn step_moves(&self, step: usize) -> Vec<MoveView> {
        let shape = |id: TensorId| self.tensor(id).map(|t| t.shape.clone()).unwrap_or_default();
        match self.steps.get(step) {
            Some(PlanStep::Redistribute {
                tensor,
                from,
                to,
                sum,
                ..
            }) => vec![MoveView::new(&shape(*tensor), from, to, *sum, self.procs)],
            Some(PlanStep::ComputePhase {
                fetch, prefetch, ..
            }) => fetch
                .iter()
                .chain(prefetch)
                .map(|f| MoveView::new(&shape(f.tensor), &f.from, &f.to, false, self.procs))
                .collect(),
            _ => Vec::new(),
        }
    }

    /// `rank`'s transfers in step `step`, one list per move of the step ([`crate::Plan::step_moves`]):
    /// what it receives (its copy to itself included) and what it sends, derived in time
    /// proportional to its own pieces (O(P) at worst for a sender).
    pub fn step_transfers(&self, step: usize, rank: usize) -> Vec<Vec<Transfer>> {
        self.step_moves(step)
            .iter()
            .map(|m| m.transfers_of(rank))
            .collect()
    }

    /// `rank`'s transfers in every step that moves data: `(step, one list per move)`.
    pub fn transfers_of(&self, rank: usize) -> Vec<(usize, Vec<Vec<Transfer>>)> {
        (0..self.steps.len())
            .map(|s| (s, self.step_transfers(s, rank)))
            .filter(|(_, t)| !t.is_empty())
            .collect()
    }

    /// Words `rank` sends and receives in step `step` (closed form, O(1) per move).
    pub fn step_words(&self, step: usize, rank: usize) -> (u64, u64) {
        self.step_moves(step).iter().fold((0, 0), |(s, r), m| {
            let (ms, mr) = m.words_of(rank);
            (s + ms, r + mr)
        })
    }
}
