//! The planner's pieces: canonical and reduced distributions, planned moves and their
//! emission, the running totals, and [`build_from`], which runs the stages of
//! [`crate::planner::Planner`] over every group.

use crate::memory::tensor_shape;
use crate::moves::{block_len, MoveView};
use crate::planner::Planner;
use crate::PerRank;
use crate::{
    Distribution, Grid, GridDim, GroupPlan, Interval, Plan, PlanError, PlanOptions, PlanStep,
    Tensor, TensorId, Volume, Window,
};
use deinsum_expr::{Index, ParsedEinsum};
use deinsum_path::ContractionTree;
use deinsum_soap::Fusion;
use std::collections::BTreeMap;

/// How many of the best-modelled grids of a group are scheduled exactly before choosing.
pub(crate) const EXACT_CANDIDATES: usize = 24;
/// Exact evaluation is skipped for grids larger than this (the model ranks them alone).
pub(crate) const EXACT_MAX_GRID: usize = 1 << 14;

/// Canonical blocks are not cut below this many words (unless the tensor is smaller): an
/// all-gather out of tiny blocks costs one message per block and receiving rank.
pub const MIN_CANONICAL_BLOCK: u64 = 16;

/// The canonical distribution of an input tensor of `shape` on `procs` ranks: a block
/// distribution in C order on at most `P' = min(P, ceil(size / MIN_CANONICAL_BLOCK))` ranks,
/// in balanced blocks ([`crate::balanced_range`]: the first `n mod p` blocks one element
/// longer), so that every rank of its grid holds data. The first index is split over
/// `p_0 = min(P', n_0)` ranks; the second over `min(floor(P' / p_0), n_1)`, and so on while
/// ranks remain. The grid has between `P'/2` (exclusive) and `P'` ranks, exactly `P'` when
/// `n_0 >= P'` (the usual 1-D row-block distribution). Grid dims are named by the tensor's
/// indices, in tensor order. `balanced` is set only when some extent is not a multiple of its
/// ranks (otherwise balanced and ceil-sized blocks coincide). A tensor without indices lives
/// on rank 0.
pub fn canonical_distribution(indices: &[Index], shape: &[usize], procs: usize) -> Distribution {
    if indices.is_empty() {
        return Distribution::on_root(0);
    }
    let size = shape.iter().fold(1u64, |a, &n| a.saturating_mul(n as u64));
    let by_size = usize::try_from(size.div_ceil(MIN_CANONICAL_BLOCK)).unwrap_or(usize::MAX);
    let rem = procs.max(1).min(by_size.max(1));
    let sizes = greedy_split(rem, shape);
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
    /// Words received per rank, sparse ascending.
    pub(crate) received: PerRank,
    pub(crate) shape: Vec<usize>,
}

impl Move {
    pub(crate) fn total(&self) -> u64 {
        self.received.values().sum()
    }

    pub(crate) fn max(&self) -> u64 {
        self.received.values().max().unwrap_or(0)
    }
}

/// Running per-rank totals of the emitted moves (dense, indexed by rank).
#[derive(Default)]
pub(crate) struct Totals {
    pub(crate) received: Vec<u64>,
    pub(crate) sent: Vec<u64>,
    /// Per step that moves: its index and the words sent plus received per rank (the
    /// step's message buffers), handed to the memory model.
    pub(crate) buffers: Vec<(usize, Vec<u64>)>,
}

impl Totals {
    /// The volume of `views` moved together in one step (per-rank lists when `per_rank`),
    /// added into the totals.
    pub(crate) fn tally(
        &mut self,
        step: usize,
        views: &[MoveView],
        n: usize,
        per_rank: bool,
    ) -> Volume {
        self.tally_each(step, views, n, per_rank).1
    }

    /// [`Self::tally`], with each view's own volume too (every rank's words taken once).
    pub(crate) fn tally_each(
        &mut self,
        step: usize,
        views: &[MoveView],
        n: usize,
        per_rank: bool,
    ) -> (Vec<Volume>, Volume) {
        if self.received.len() < n {
            self.received.resize(n, 0);
            self.sent.resize(n, 0);
        }
        let mut each = vec![Volume::default(); views.len()];
        let mut v = Volume::default();
        let mut bufs = vec![0u64; n];
        let words: Vec<Vec<(u64, u64)>> = views.iter().map(|m| m.words_per_rank(n)).collect();
        for (r, buf) in bufs.iter_mut().enumerate() {
            let (mut s, mut w) = (0, 0);
            for (mw, e) in words.iter().zip(&mut each) {
                let (ms, mw) = mw[r];
                e.add_rank(r, ms, mw, per_rank);
                (s, w) = (s + ms, w + mw);
            }
            self.sent[r] += s;
            self.received[r] += w;
            *buf = s + w;
            v.add_rank(r, s, w, per_rank);
        }
        self.buffers.push((step, bufs));
        (each, v)
    }
}

/// Adds sparse per-rank words into the dense accumulator `acc`.
pub(crate) fn add_received(acc: &mut Vec<u64>, received: &PerRank) {
    if let Some(r) = received.last_rank() {
        if acc.len() <= r {
            acc.resize(r + 1, 0);
        }
    }
    for (r, w) in received.iter() {
        acc[r] += w;
    }
}

pub(crate) fn max_of(acc: &[u64]) -> u64 {
    acc.iter().copied().max().unwrap_or(0)
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
) -> Vec<Move> {
    if from == to {
        return Vec::new();
    }
    // Candidates are compared on received words alone (independent of the senders).
    let mk = |f: &Distribution, t: &Distribution, sum: bool| Move {
        from: f.clone(),
        to: t.clone(),
        sum,
        received: MoveView::new(shape, f, t, sum, procs).received(),
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
    add_received(&mut acc, &a.received);
    add_received(&mut acc, &b.received);
    let two = (max_of(&acc), a.total() + b.total());
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
        _ => start_of(&tensors[node], opts, opts.procs).unwrap_or_else(|| target.clone()),
    }
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

/// Builds the plan from an already chosen tree and fusion (what [`crate::build`] does after
/// running the path optimizer and the SOAP analysis), one group at a time through the
/// planner's stages. The SOAP parallel bound of each group is taken for P ranks and the budget
/// S (without a budget, the plan's own peak memory per rank).
pub fn build_from(
    einsum: &ParsedEinsum,
    tree: &ContractionTree,
    path: Vec<Vec<usize>>,
    fusion: &Fusion,
    opts: &PlanOptions,
) -> Result<Plan, PlanError> {
    with_least_budget(opts, |o| build_once(einsum, tree, path.clone(), fusion, o))
}

/// Which per-rank cap a budget error is about.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Cap {
    /// `mem`: the tensor data.
    Data,
    /// `mem_total`: the data with message buffers.
    Total,
}

impl Cap {
    /// The cap an error says is too small, with the figure it needs.
    fn of(e: &PlanError) -> Option<(Cap, u64)> {
        match e {
            PlanError::MemoryTooSmall { needed, .. } => Some((Cap::Data, *needed)),
            PlanError::TotalMemoryTooSmall { needed, .. } => Some((Cap::Total, *needed)),
            _ => None,
        }
    }

    fn get(self, o: &PlanOptions) -> Option<u64> {
        match self {
            Cap::Data => o.mem,
            Cap::Total => o.mem_total,
        }
    }

    fn with(self, o: &PlanOptions, s: u64) -> PlanOptions {
        let mut o = o.clone();
        match self {
            Cap::Data => o.mem = Some(s),
            Cap::Total => o.mem_total = Some(s),
        }
        o
    }

    /// `e` (an error about this cap) with the figure `needed`.
    fn renamed(e: PlanError, figure: u64) -> PlanError {
        match e {
            PlanError::MemoryTooSmall { budget, detail, .. } => PlanError::MemoryTooSmall {
                budget,
                needed: figure,
                detail,
            },
            PlanError::TotalMemoryTooSmall { budget, detail, .. } => {
                PlanError::TotalMemoryTooSmall {
                    budget,
                    needed: figure,
                    detail,
                }
            }
            other => other,
        }
    }
}

/// Runs `build` under `opts`; when a cap is too small, the error's figure is made the least
/// value of that cap that plans (the other held): searched by doubling from the figure the
/// planner saw, then bisecting between a cap that fails and one that plans (so the figure
/// plans and one word less does not). Feasibility is monotone in each cap, so this is exact.
pub(crate) fn with_least_budget<T>(
    opts: &PlanOptions,
    build: impl Fn(&PlanOptions) -> Result<T, PlanError>,
) -> Result<T, PlanError> {
    let first = build(opts);
    let Err(e) = &first else { return first };
    let Some((cap, needed)) = Cap::of(e) else {
        return first;
    };
    let Some(budget) = cap.get(opts) else {
        return first;
    };
    let plans = |s: u64| -> Result<bool, PlanError> {
        match build(&cap.with(opts, s)) {
            Ok(_) => Ok(true),
            Err(e) if Cap::of(&e).is_some() => Ok(false),
            Err(e) => Err(e),
        }
    };
    let (mut lo, mut hi) = (budget, needed.max(budget.saturating_add(1)));
    while !plans(hi)? {
        if hi == u64::MAX {
            return first;
        }
        lo = hi;
        hi = hi.saturating_mul(2);
    }
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if plans(mid)? {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    first.map_err(|e| Cap::renamed(e, hi))
}

/// One pass of the planner's stages under `opts` (its caps applied as given).
pub(crate) fn build_once(
    einsum: &ParsedEinsum,
    tree: &ContractionTree,
    path: Vec<Vec<usize>>,
    fusion: &Fusion,
    opts: &PlanOptions,
) -> Result<Plan, PlanError> {
    let Some(s) = opts.mem.or(opts.mem_total) else {
        return plan_groups(einsum, tree, path, fusion, opts, None).map_err(|(_, e)| e);
    };
    // Groups are chosen greedily; when a later group k finds no room under the budget, the
    // groups before it are planned again under a tighter budget `b`: cut by what k lacked,
    // the cut doubling while k still finds no room (a deficit of one word once stepped down
    // one word at a time and ran out of tries), and raised halfway back when the earlier
    // groups no longer fit (`floor` fails them).
    let (mut b, mut ok_b, mut floor) = (s, s, 0u64);
    let (mut k, mut cut) = (0, 0u64);
    for _ in 0..RETIGHTEN {
        let tight = (k > 0).then_some((k, b));
        match plan_groups(einsum, tree, path.clone(), fusion, opts, tight) {
            Ok(p) => return Ok(p),
            Err((gi, e)) => match Cap::of(&e) {
                Some((_, needed)) if gi > 0 && gi >= k => {
                    cut = if gi == k { cut.saturating_mul(2) } else { 0 };
                    (k, ok_b) = (gi, b);
                    cut = cut.max(needed.saturating_sub(s).max(1));
                    b = b.saturating_sub(cut).max(floor + 1);
                }
                Some(_) if gi < k => {
                    floor = b;
                    b = floor + (ok_b - floor) / 2;
                }
                _ => return Err(e),
            },
        }
        if b <= floor || b >= ok_b {
            break;
        }
    }
    plan_groups(einsum, tree, path, fusion, opts, None).map_err(|(_, e)| e)
}

/// The planner's stages over every group (those before `tight.0` under the budget
/// `tight.1`), then `finish`; an error carries the group it arose in.
fn plan_groups(
    einsum: &ParsedEinsum,
    tree: &ContractionTree,
    path: Vec<Vec<usize>>,
    fusion: &Fusion,
    opts: &PlanOptions,
    tight: Option<(usize, u64)>,
) -> Result<Plan, (usize, PlanError)> {
    let n = fusion.groups.len();
    let mut planner = Planner::new(einsum, tree, opts).map_err(|e| (0, e))?;
    planner.tight = tight;
    for (gi, group) in fusion.groups.iter().enumerate() {
        planner
            .plan_group(gi, group, gi + 1 == n)
            .map_err(|e| (gi, e))?;
    }
    // The overlap post-pass: its one call site (a plan in, the same plan pipelined out).
    planner
        .finish(path)
        .map(|plan| crate::overlap::apply(plan, opts))
        .map_err(|e| (n, e))
}

/// How many times the groups before one that found no room are planned again.
const RETIGHTEN: usize = 12;

/// Sets every group's SOAP parallel bounds for `procs` ranks and budget `s_bound`; returns the
/// per-rank bound of the plan (the binding bound of each group, summed).
pub(crate) fn set_bounds(groups: &mut [GroupPlan], procs: usize, s_bound: f64) -> f64 {
    let mut bound_per_rank = 0.0;
    for g in groups {
        let b = deinsum_soap::parallel_bound(&g.group, procs, s_bound);
        g.bound_memory_independent = b.memory_independent;
        g.bound_memory_dependent = b.memory_dependent;
        bound_per_rank += b.binding();
    }
    bound_per_rank
}

/// Max over ranks of the words of its blocks of every group's inputs and output, summed over
/// the groups (ranks outside a group's grid touch nothing of it).
pub(crate) fn touched(groups: &[GroupPlan], tensors: &[Tensor], procs: usize) -> u64 {
    let shape = |id: TensorId| tensor_shape(tensors, id);
    let mut per_rank: Vec<u64> = Vec::new();
    for g in groups {
        let size = g.grid.size().min(procs);
        if per_rank.len() < size {
            per_rank.resize(size, 0);
        }
        for (id, d) in g.inputs.iter().chain(std::iter::once(&g.output)) {
            let sh = shape(*id);
            for (r, w) in per_rank.iter_mut().enumerate().take(size) {
                *w += block_len(d, r, &sh);
            }
        }
    }
    per_rank.into_iter().max().unwrap_or(0)
}

/// Sparse per-rank words from dense counts, or nothing unless `wanted`.
pub(crate) fn per_rank(dense: &[u64], wanted: bool) -> PerRank {
    if wanted {
        PerRank::from_dense(dense.iter().copied())
    } else {
        PerRank::new()
    }
}

/// Emits one planned move of `tensor` as a Redistribute step, its volume counted into
/// `totals`.
pub(crate) fn emit_move(
    tensor: TensorId,
    mv: Move,
    totals: &mut Totals,
    steps: &mut Vec<PlanStep>,
    opts: &PlanOptions,
) {
    let view = MoveView::new(&mv.shape, &mv.from, &mv.to, mv.sum, opts.procs);
    let volume = totals.tally(
        steps.len(),
        std::slice::from_ref(&view),
        opts.procs,
        opts.per_rank,
    );
    steps.push(PlanStep::Redistribute {
        tensor,
        pattern: view.kind(volume.total),
        from: mv.from,
        to: mv.to,
        sum: mv.sum,
        volume,
    });
}
