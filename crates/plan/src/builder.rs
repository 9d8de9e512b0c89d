//! The planner's pieces: canonical and reduced distributions, planned moves and their
//! emission, the running totals, phase windows. Shared by the planner and the overlap pass,
//! below both (the passes in order are in `driver`).

use crate::moves::MoveView;
use crate::rank_words::{MoveMemo, RankWords};
use crate::{
    Distribution, Grid, GridDim, Interval, PlanOptions, PlanStep, Tensor, TensorId, Volume, Window,
};
use deinsum_expr::Index;
use std::collections::BTreeMap;

/// How many of the best-modelled grids of a group are scheduled exactly before choosing.
pub(crate) const EXACT_CANDIDATES: usize = 24;
/// Exact evaluation is skipped for grids larger than this (the model ranks them alone).
pub(crate) const EXACT_MAX_GRID: usize = 1 << 14;

/// Canonical blocks are not cut below this many words on average (unless the tensor is
/// smaller): an all-gather out of tiny blocks costs one message per block and receiving rank.
/// Eight words, not more, so that a small factor (10 x 10 on 8 ranks) still spreads over
/// every rank.
pub const MIN_CANONICAL_BLOCK: u64 = 8;

/// The canonical distribution of an input tensor of `shape` on `procs` ranks: a block
/// distribution in C order on at most `P' = min(P, ceil(size / MIN_CANONICAL_BLOCK))` ranks,
/// in balanced blocks ([`crate::balanced_range`]: the first `n mod p` blocks one element
/// longer), so that every rank of its grid holds data. The first index is split over
/// `p_0 = min(P', n_0)` ranks; the second over `min(floor(P' / p_0), n_1)`, and so on while
/// ranks remain. When that C-order split uses fewer than `P'` ranks, the grid with the most
/// ranks (at most `P'`, each `p_k <= n_k`) is taken instead, the largest `p_0` first among
/// equals (`[3, 100]` on 8 ranks: 2 x 4, not 3 x 2), so every rank holds a block whenever
/// the extents allow. The grid has exactly `P'` ranks when `n_0 >= P'`. Grid dims are named by
/// the tensor's indices, in tensor order. `balanced` is set only when some extent is not a
/// multiple of its ranks (otherwise balanced and ceil-sized blocks coincide). A tensor
/// without indices lives on rank 0.
pub fn canonical_distribution(indices: &[Index], shape: &[usize], procs: usize) -> Distribution {
    if indices.is_empty() {
        return Distribution::on_root(0);
    }
    let size = shape.iter().fold(1u64, |a, &n| a.saturating_mul(n as u64));
    let by_size = usize::try_from(size.div_ceil(MIN_CANONICAL_BLOCK)).unwrap_or(usize::MAX);
    let rem = procs.max(1).min(by_size.max(1));
    let sizes = canonical_split(rem, shape);
    let balanced = shape.iter().zip(&sizes).any(|(&n, &p)| n % p != 0);
    let dims = indices
        .iter()
        .zip(sizes)
        .map(|(&c, p)| GridDim { index: c, size: p })
        .collect();
    Distribution {
        grid: Grid { dims },
        split: (0..indices.len()).map(|k| vec![k]).collect(),
        partial: Vec::new(),
        window: Vec::new(),
        balanced,
    }
}

/// Ranks per index when at most `rem` ranks split `shape`: the C-order split
/// ([`greedy_split`]) unless some grid with `p_k <= n_k` uses more ranks, then the one using
/// the most, the earliest indices split most among equals ([`most_ranks`]).
fn canonical_split(rem: usize, shape: &[usize]) -> Vec<usize> {
    let greedy = greedy_split(rem, shape);
    let used: usize = greedy.iter().product();
    if used == rem {
        return greedy;
    }
    let mut best = (used, greedy);
    let mut cur = Vec::with_capacity(shape.len());
    let mut budget = MAX_SPLIT_NODES;
    most_ranks(rem, shape, 1, &mut cur, &mut best, &mut budget);
    best.1
}

/// Splits [`most_ranks`] tries at most (the best found so far stands beyond).
const MAX_SPLIT_NODES: usize = 1 << 16;

/// Depth-first over `p_k` from the largest down: the split of `shape[cur.len()..]` within
/// `rem` ranks whose product with `used` beats `best` (strictly: an earlier find has larger
/// leading splits). Stops once `best` uses every rank of the original budget.
fn most_ranks(
    rem: usize,
    shape: &[usize],
    used: usize,
    cur: &mut Vec<usize>,
    best: &mut (usize, Vec<usize>),
    budget: &mut usize,
) {
    let k = cur.len();
    if k == shape.len() {
        if used > best.0 {
            *best = (used, cur.clone());
        }
        return;
    }
    let rest: usize = shape[k..]
        .iter()
        .fold(1usize, |a, &n| a.saturating_mul(n.max(1)));
    for p in (1..=rem.min(shape[k]).max(1)).rev() {
        // The most this branch can reach: p, then what is left of the budget and extents.
        let reach = used
            .saturating_mul(p)
            .saturating_mul((rem / p).min(rest / shape[k].max(1)));
        // Every candidate split counts, pruned or not, so the search stays bounded.
        if *budget == 0 {
            return;
        }
        *budget -= 1;
        if reach <= best.0 {
            continue;
        }
        cur.push(p);
        most_ranks(rem / p, shape, used * p, cur, best, budget);
        cur.pop();
        if best.0 >= used * rem {
            return;
        }
    }
}

/// Ranks per index when `rem` ranks split `shape` in C order: each index over as many ranks as
/// remain, at most its extent (balanced blocks leave none of them empty).
fn greedy_split(mut rem: usize, shape: &[usize]) -> Vec<usize> {
    shape
        .iter()
        .map(|&n| {
            let p = rem.min(n).max(1);
            rem /= p;
            p
        })
        .collect()
}

/// `dist` with its partial sums reduced and scattered: each partial grid dim (of size > 1)
/// nests into the split of the tensor index with the largest block so far. A tensor without
/// indices is reduced onto rank 0.
pub fn reduced_distribution(dist: &Distribution, shape: &[usize]) -> Distribution {
    if !dist.is_partial() {
        return dist.clone();
    }
    if shape.is_empty() {
        return Distribution::on_root(0);
    }
    let mut split = dist.split.clone();
    // The longest block along each index (nested cuts: the longest block of the longest).
    let longest = |n: usize, p: usize| Interval::new(0, n).max_block_len(p);
    let mut blk: Vec<usize> = shape
        .iter()
        .zip(&split)
        .map(|(&n, dims)| {
            dims.iter()
                .fold(n, |b, &g| longest(b, dist.grid.dims[g].size))
        })
        .collect();
    for &g in &dist.partial {
        let p = dist.grid.dims[g].size;
        if p <= 1 {
            continue;
        }
        let v = (0..blk.len())
            .max_by_key(|&v| (blk[v], usize::MAX - v))
            .unwrap_or(0);
        split[v].push(g);
        blk[v] = longest(blk[v], p);
    }
    Distribution {
        grid: dist.grid.clone(),
        split,
        partial: Vec::new(),
        window: Vec::new(),
        balanced: dist.balanced,
    }
}

/// A planned Redistribute step, scored by the words each rank receives.
#[derive(Clone, Debug)]
pub(crate) struct Move {
    pub(crate) from: Distribution,
    pub(crate) to: Distribution,
    pub(crate) sum: bool,
    /// Words received per rank of the target grid.
    pub(crate) received: std::sync::Arc<RankWords>,
    pub(crate) shape: Vec<usize>,
}

impl Move {
    pub(crate) fn total(&self) -> u64 {
        self.received.total_received
    }

    pub(crate) fn max(&self) -> u64 {
        self.received.max_received
    }
}

/// The emitted moves' words per rank, kept per step (no dense per-rank vector per tree):
/// their sums over the steps are taken chunk by chunk when the plan is finished
/// ([`Totals::sums`]).
#[derive(Default)]
pub(crate) struct Totals {
    steps: Vec<StepWords>,
}

/// One step's words per rank: its one move's as the memo holds them, or several moves'
/// `(sent, received)` added up.
enum StepWords {
    One(std::sync::Arc<RankWords>),
    Many(Vec<(u64, u64)>),
}

/// Ranks [`Totals::sums`] adds up at once.
const SUM_CHUNK: usize = 1 << 14;

impl Totals {
    /// The volume of `views` moved together in one step (per-rank lists when `per_rank`),
    /// added into the totals.
    pub(crate) fn tally(
        &mut self,
        views: &[MoveView],
        n: usize,
        per_rank: bool,
        memo: &MoveMemo,
    ) -> Volume {
        self.tally_each(views, n, per_rank, memo).1
    }

    /// The maxima, total and (when `per_rank`) sparse lists of every rank's words received
    /// and sent summed over the steps.
    pub(crate) fn sums(&self, per_rank: bool) -> crate::predict::WordSums {
        let mut out = crate::predict::WordSums::default();
        let len = |s: &StepWords| match s {
            StepWords::One(w) => w.len(),
            StepWords::Many(v) => v.len(),
        };
        let n = self.steps.iter().map(len).max().unwrap_or(0);
        let (mut received, mut sent) = (vec![0u64; SUM_CHUNK], vec![0u64; SUM_CHUNK]);
        for lo in (0..n).step_by(SUM_CHUNK) {
            let hi = (lo + SUM_CHUNK).min(n);
            received.fill(0);
            sent.fill(0);
            for s in &self.steps {
                match s {
                    StepWords::One(w) => w.for_each_in(lo..hi, |r, s, x| {
                        sent[r - lo] += s;
                        received[r - lo] += x;
                    }),
                    StepWords::Many(v) => {
                        for (r, &(s, x)) in v.iter().enumerate().take(hi).skip(lo) {
                            sent[r - lo] += s;
                            received[r - lo] += x;
                        }
                    }
                }
            }
            out.add(lo, &received[..hi - lo], &sent[..hi - lo], per_rank);
        }
        out
    }

    /// [`Self::tally`], with each view's own volume too (every rank's words taken once, from
    /// `memo` when a tree planned before met the move; the memory model takes the step's
    /// message buffers from there too).
    pub(crate) fn tally_each(
        &mut self,
        views: &[MoveView],
        n: usize,
        per_rank: bool,
        memo: &MoveMemo,
    ) -> (Vec<Volume>, Volume) {
        // Ranks past every view's grids move nothing: their zero words change no total, no
        // maximum and no sparse list.
        let n = views.iter().map(MoveView::ranks).max().unwrap_or(0).min(n);
        let mut each = vec![Volume::default(); views.len()];
        let mut v = Volume::default();
        if let [view] = views {
            // One move (the usual step): its words go straight into the totals, its maxima
            // and total are the move's own.
            let words = memo.words(view);
            if per_rank {
                words.for_each(|r, s, w| v.add_rank(r, s, w, true));
            } else {
                v.max_per_rank = words.max_received;
                v.max_sent = words.max_sent;
                v.total = words.total_received;
            }
            self.steps.push(StepWords::One(words));
            each[0] = v.clone();
            return (each, v);
        }
        let mut words: Vec<Vec<(u64, u64)>> = Vec::with_capacity(views.len());
        for m in views {
            let mut dense = Vec::with_capacity(n);
            memo.words(m).for_each(|_, s, w| dense.push((s, w)));
            dense.resize(n, (0, 0));
            words.push(dense);
        }
        let mut sums = Vec::with_capacity(n);
        for r in 0..n {
            let (mut s, mut w) = (0, 0);
            for (mw, e) in words.iter().zip(&mut each) {
                let (ms, mw) = mw[r];
                e.add_rank(r, ms, mw, per_rank);
                (s, w) = (s + ms, w + mw);
            }
            sums.push((s, w));
            v.add_rank(r, s, w, per_rank);
        }
        self.steps.push(StepWords::Many(sums));
        (each, v)
    }
}

/// The moves that bring a tensor of `shape` from `from` to `to`: nothing when equal; one
/// Redistribute when `from` is complete; for partial sums, either one summing Redistribute
/// straight into `to` or a reduce-scatter followed by a gather, whichever moves fewer words
/// (busiest rank first, then total).
pub(crate) fn plan_move(
    shape: &[usize],
    from: &Distribution,
    to: &Distribution,
    procs: usize,
    memo: &MoveMemo,
) -> Vec<Move> {
    if from == to {
        return Vec::new();
    }
    // Candidates are compared on received words alone (independent of the senders).
    let mk = |f: &Distribution, t: &Distribution, sum: bool| Move {
        from: f.clone(),
        to: t.clone(),
        sum,
        received: memo.received(&MoveView::new(shape, f, t, sum, procs)),
        shape: shape.to_vec(),
    };
    if !from.is_partial() {
        return vec![mk(from, to, false)];
    }
    let direct = mk(from, to, true);
    let rs = reduced_distribution(from, shape);
    if &rs == to {
        return vec![direct];
    }
    let a = mk(from, &rs, true);
    let b = mk(&rs, to, false);
    let mut acc = Vec::new();
    a.received.add_received_to(&mut acc);
    b.received.add_received_to(&mut acc);
    let two = (crate::predict::max_of(&acc), a.total() + b.total());
    let one = (direct.max(), direct.total());
    if two < one {
        vec![a, b]
    } else {
        vec![direct]
    }
}

/// Where a tensor stands while planning.
#[derive(Clone, Debug)]
pub(crate) enum State {
    /// An input not loaded yet.
    Unloaded,
    /// Held in this distribution.
    At(Distribution),
}

/// A candidate grid of one group with its model figures.
#[derive(Clone, Debug)]
pub(crate) struct Candidate {
    pub(crate) sizes: Vec<usize>,
    pub(crate) model_comm: f64,
    pub(crate) memory: u64,
    pub(crate) work: u128,
    pub(crate) tile_dist: f64,
    /// `(v, T)`: walk group index `v` in `T` phases (only when the blocks exceed the budget).
    pub(crate) phases: Option<(usize, usize)>,
}

/// Number of replicas of a tensor over `idx` on a grid of `sizes` over `gidx`: the product of
/// the grid dims of the indices it lacks.
pub(crate) fn replicas_of(sizes: &[usize], gidx: &[Index], idx: &[Index]) -> usize {
    gidx.iter()
        .zip(sizes)
        .filter(|(c, _)| !idx.contains(c))
        .map(|(_, &p)| p)
        .product()
}

/// Position in `idx` of the phased index of `phases` (`None`: not phased or not held).
pub(crate) fn phased_dim(
    phases: Option<(usize, usize)>,
    gidx: &[Index],
    idx: &[Index],
) -> Option<usize> {
    let (v, _) = phases?;
    idx.iter().position(|&c| c == gidx[v])
}

/// Where an input of a group on `grid` is held: its group distribution, and for an input
/// holding the phased index, with the grid dims it is replicated along (size > 1) nested into
/// that index's split, so no rank holds a replica (it rests there between phases).
pub(crate) fn resting_for(
    grid: &Grid,
    gidx: &[Index],
    idx: &[Index],
    phases: Option<(usize, usize)>,
) -> Distribution {
    let pos = |c: Index| gidx.iter().position(|&x| x == c).unwrap_or(0);
    let k = phased_dim(phases, gidx, idx);
    let split = idx
        .iter()
        .enumerate()
        .map(|(d, &c)| {
            let mut s = vec![pos(c)];
            if Some(d) == k {
                s.extend(
                    (0..gidx.len()).filter(|&u| !idx.contains(&gidx[u]) && grid.dims[u].size > 1),
                );
            }
            s
        })
        .collect();
    Distribution {
        grid: grid.clone(),
        split,
        partial: Vec::new(),
        window: Vec::new(),
        balanced: false,
    }
}

/// `whole` with part `part` of `parts` of tensor index `dim` (a phase buffer).
pub(crate) fn windowed(
    whole: &Distribution,
    dim: usize,
    parts: usize,
    part: usize,
) -> Distribution {
    let mut w = whole.clone();
    w.window.push(Window { dim, parts, part });
    w
}

/// The distribution a tensor is in before a group moves it to `target`.
pub(crate) fn current(
    state: &BTreeMap<TensorId, State>,
    tensors: &[Tensor],
    opts: &PlanOptions,
    node: TensorId,
    target: &Distribution,
) -> Distribution {
    match state.get(&node) {
        Some(State::At(d)) => d.clone(),
        _ => match start_of(&tensors[node], opts, opts.procs) {
            // A given layout that cuts the target's blocks (other grid-dim names, as after a
            // relabel, or other dims of one rank) is the target: no local copy to it.
            Some(d) if given(&tensors[node], opts) && same_blocks_by_rule(&d, target) => {
                target.clone()
            }
            Some(d) => d,
            None => target.clone(),
        },
    }
}

/// True when input tensor `t` has a `Given` source.
fn given(t: &Tensor, opts: &PlanOptions) -> bool {
    matches!(t.kind, crate::TensorKind::Input(k) if matches!(opts.source(k), crate::Source::Given(_)))
}

/// `a` and `b` cut the same blocks by the same rule, whatever their grid dims are named and
/// wherever they have dims of one rank (which cut nothing).
fn same_blocks_by_rule(a: &Distribution, b: &Distribution) -> bool {
    a.window == b.window && a.balanced == b.balanced && squeezed(a) == squeezed(b)
}

/// `d`'s grid sizes, splits and partial dims without its dims of one rank (renumbered).
fn squeezed(d: &Distribution) -> (Vec<usize>, Vec<Vec<usize>>, Vec<usize>) {
    let mut new = vec![None; d.grid.dims.len()];
    let mut sizes = Vec::new();
    for (g, dim) in d.grid.dims.iter().enumerate() {
        if dim.size > 1 {
            new[g] = Some(sizes.len());
            sizes.push(dim.size);
        }
    }
    let map = |gs: &[usize]| -> Vec<usize> {
        gs.iter()
            .filter_map(|&g| new.get(g).copied().flatten())
            .collect()
    };
    let split = d.split.iter().map(|s| map(s)).collect();
    (sizes, split, map(&d.partial))
}

/// Where input tensor `t` starts by its source ([`PlanOptions::source`]): `None` when it can
/// be read where it is used (`Anywhere`; [`crate::plan_tree`] also plans it canonically).
pub(crate) fn start_of(t: &Tensor, opts: &PlanOptions, procs: usize) -> Option<Distribution> {
    let crate::TensorKind::Input(k) = t.kind else {
        return None;
    };
    match opts.source(k) {
        crate::Source::Anywhere => None,
        crate::Source::Canonical => Some(canonical_distribution(&t.indices, &t.shape, procs)),
        crate::Source::Given(d) => Some(crate::relabel(&d, &t.indices)),
    }
}

/// Extents of `idx` in `ext`.
pub(crate) fn shape_of(idx: &[Index], ext: &BTreeMap<Index, usize>) -> Vec<usize> {
    idx.iter()
        .map(|c| ext.get(c).copied().unwrap_or(1))
        .collect()
}

/// Emits one planned move of `tensor` as a Redistribute step, its volume counted into
/// `totals`.
pub(crate) fn emit_move(
    tensor: TensorId,
    mv: Move,
    totals: &mut Totals,
    steps: &mut Vec<PlanStep>,
    opts: &PlanOptions,
    memo: &MoveMemo,
) {
    let view = MoveView::new(&mv.shape, &mv.from, &mv.to, mv.sum, opts.procs);
    let volume = totals.tally(std::slice::from_ref(&view), opts.procs, opts.per_rank, memo);
    steps.push(PlanStep::Redistribute {
        tensor,
        pattern: view.kind(volume.total),
        from: mv.from,
        to: mv.to,
        sum: mv.sum,
        volume,
    });
}
