//! The planner: a grid per fused group, the moves between groups, and the predictions.

use crate::grids;
use crate::memory::{tensor_shape, Memory};
use crate::moves::{block_len, MoveView};
use crate::{
    Distribution, Fetch, Grid, GridDim, GroupPlan, Phases, Plan, PlanError, PlanOptions, PlanStep,
    Prediction, Tensor, TensorId, TensorKind, Volume, Window, PLAN_VERSION,
};
use deinsum_expr::{Einsum, Index};
use deinsum_path::ContractionTree;
use deinsum_soap::Fusion;
use std::collections::BTreeMap;

/// How many of the best-modelled grids of a group are scheduled exactly before choosing.
const EXACT_CANDIDATES: usize = 24;
/// Exact evaluation is skipped for grids larger than this (the model ranks them alone).
const EXACT_MAX_GRID: usize = 1 << 14;

/// Canonical blocks are not cut below this many words (unless the tensor is smaller): an
/// all-gather out of tiny blocks costs one message per block and receiving rank.
pub const MIN_CANONICAL_BLOCK: u64 = 16;

/// The canonical distribution of an input tensor of `shape` on `procs` ranks: a block
/// distribution in C order on at most `P' = min(P, ceil(size / MIN_CANONICAL_BLOCK))` ranks.
/// The first index is split over `p_0 = min(P', n_0)` ranks rounded down to its number of
/// nonempty ceil-blocks (`ceil(n / ceil(n / p))`); when ranks remain, the second index is split
/// over `min(P' / p_0, n_1)` (same rounding), and so on. Grid dims are named by the tensor's indices, in tensor order. With
/// `n_0 >= P` and a large tensor this is the usual 1-D row-block distribution. A tensor
/// without indices lives on rank 0.
pub fn canonical_distribution(indices: &[Index], shape: &[usize], procs: usize) -> Distribution {
    if indices.is_empty() {
        return Distribution::on_root(0);
    }
    let size = shape.iter().fold(1u64, |a, &n| a.saturating_mul(n as u64));
    let by_size = usize::try_from(size.div_ceil(MIN_CANONICAL_BLOCK)).unwrap_or(usize::MAX);
    let rem = procs.max(1).min(by_size.max(1));
    let dims = indices
        .iter()
        .zip(greedy_split(rem, shape))
        .map(|(&c, p)| GridDim { index: c, size: p })
        .collect();
    Distribution {
        grid: Grid { dims },
        split: (0..indices.len()).map(|k| vec![k]).collect(),
        partial: Vec::new(),
        window: Vec::new(),
    }
}

/// Ranks per index when `rem` ranks split `shape` in C order: each index over as many ranks as
/// remain (at most its extent), rounded down to its number of nonempty ceil-blocks.
fn greedy_split(mut rem: usize, shape: &[usize]) -> Vec<usize> {
    shape
        .iter()
        .map(|&n| {
            let n = n.max(1);
            let p = n.div_ceil(n.div_ceil(rem.min(n).max(1)));
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
    let mut blk: Vec<usize> = shape
        .iter()
        .zip(&split)
        .map(|(&n, dims)| {
            dims.iter()
                .fold(n, |b, &g| b.div_ceil(dist.grid.dims[g].size.max(1)))
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
        blk[v] = blk[v].div_ceil(p);
    }
    Distribution {
        grid: dist.grid.clone(),
        split,
        partial: Vec::new(),
        window: Vec::new(),
    }
}

/// A planned Redistribute step, scored by the words each rank receives.
#[derive(Clone, Debug)]
struct Move {
    from: Distribution,
    to: Distribution,
    sum: bool,
    /// Words received per rank, sparse ascending.
    received: Vec<(usize, u64)>,
    shape: Vec<usize>,
}

impl Move {
    fn total(&self) -> u64 {
        self.received.iter().map(|&(_, w)| w).sum()
    }

    fn max(&self) -> u64 {
        self.received.iter().map(|&(_, w)| w).max().unwrap_or(0)
    }
}

/// Running per-rank totals of the emitted moves (dense, indexed by rank).
#[derive(Default)]
struct Totals {
    received: Vec<u64>,
    sent: Vec<u64>,
    /// Per step that moves: its index and the words sent plus received per rank (the
    /// step's message buffers), handed to the memory model.
    buffers: Vec<(usize, Vec<u64>)>,
}

impl Totals {
    /// The volume of `views` moved together in one step (per-rank lists when `per_rank`),
    /// added into the totals.
    fn tally(&mut self, step: usize, views: &[MoveView], n: usize, per_rank: bool) -> Volume {
        if self.received.len() < n {
            self.received.resize(n, 0);
            self.sent.resize(n, 0);
        }
        let mut v = Volume::default();
        let mut bufs = vec![0u64; n];
        for (r, buf) in bufs.iter_mut().enumerate() {
            let (s, w) = views.iter().fold((0, 0), |(s, w), m| {
                let (ms, mw) = m.words_of(r);
                (s + ms, w + mw)
            });
            self.sent[r] += s;
            self.received[r] += w;
            *buf = s + w;
            v.max_per_rank = v.max_per_rank.max(w);
            v.max_sent = v.max_sent.max(s);
            v.total += w;
            if per_rank && s > 0 {
                v.sent.push((r, s));
            }
            if per_rank && w > 0 {
                v.received.push((r, w));
            }
        }
        self.buffers.push((step, bufs));
        v
    }
}

/// Adds sparse per-rank words into the dense accumulator `acc`.
fn add_received(acc: &mut Vec<u64>, received: &[(usize, u64)]) {
    if let Some(&(r, _)) = received.last() {
        if acc.len() <= r {
            acc.resize(r + 1, 0);
        }
    }
    for &(r, w) in received {
        acc[r] += w;
    }
}

fn max_of(acc: &[u64]) -> u64 {
    acc.iter().copied().max().unwrap_or(0)
}

/// The moves that bring a tensor of `shape` from `from` to `to`: nothing when equal; one
/// Redistribute when `from` is complete; for partial sums, either one summing Redistribute
/// straight into `to` or a reduce-scatter followed by a gather, whichever moves fewer words
/// (busiest rank first, then total).
fn plan_move(shape: &[usize], from: &Distribution, to: &Distribution, procs: usize) -> Vec<Move> {
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

/// An exactly scheduled candidate: (busiest rank's words, total, candidate, input moves, output reduction).
type Scheduled = (u64, u64, usize, Vec<Vec<Move>>, Vec<Move>);

/// Where a tensor stands while planning.
#[derive(Clone, Debug)]
enum State {
    /// An input not loaded yet.
    Unloaded,
    /// Held in this distribution.
    At(Distribution),
}

/// A candidate grid of one group with its model figures.
#[derive(Clone, Debug)]
struct Candidate {
    sizes: Vec<usize>,
    model_comm: f64,
    memory: u64,
    work: u128,
    tile_dist: f64,
    /// `(v, T)`: walk group index `v` in `T` phases (only when the blocks exceed the budget).
    phases: Option<(usize, usize)>,
}

/// Number of replicas of a tensor over `idx` on a grid of `sizes` over `gidx`: the product of
/// the grid dims of the indices it lacks.
fn replicas_of(sizes: &[usize], gidx: &[Index], idx: &[Index]) -> usize {
    gidx.iter()
        .zip(sizes)
        .filter(|(c, _)| !idx.contains(c))
        .map(|(_, &p)| p)
        .product()
}

/// Position in `idx` of the phased index of `phases` (`None`: not phased or not held).
fn phased_dim(phases: Option<(usize, usize)>, gidx: &[Index], idx: &[Index]) -> Option<usize> {
    let (v, _) = phases?;
    idx.iter().position(|&c| c == gidx[v])
}

/// Where an input of a group on `grid` is held: its group distribution, and for an input
/// holding the phased index, with the grid dims it is replicated along (size > 1) nested into
/// that index's split, so no rank holds a replica (it rests there between phases).
fn resting_for(
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
    }
}

/// `whole` with part `part` of `parts` of tensor index `dim` (a phase buffer).
fn windowed(whole: &Distribution, dim: usize, parts: usize, part: usize) -> Distribution {
    let mut w = whole.clone();
    w.window.push(Window { dim, parts, part });
    w
}

/// The distribution a tensor is in before a group moves it to `target`.
fn current(
    state: &BTreeMap<TensorId, State>,
    tensors: &[Tensor],
    opts: &PlanOptions,
    node: TensorId,
    target: &Distribution,
) -> Distribution {
    match state.get(&node) {
        Some(State::At(d)) => d.clone(),
        _ if opts.inputs_in_place => target.clone(),
        _ => {
            let t = &tensors[node];
            canonical_distribution(&t.indices, &t.shape, opts.procs)
        }
    }
}

/// Extents of `idx` in `ext`.
fn shape_of(idx: &[Index], ext: &BTreeMap<Index, usize>) -> Vec<usize> {
    idx.iter()
        .map(|c| ext.get(c).copied().unwrap_or(1))
        .collect()
}

/// Builds the plan from an already chosen tree and fusion (what [`crate::build`] does after
/// running the path optimizer and the SOAP analysis). The SOAP parallel bound of each group is
/// taken for P ranks and the budget S (without a budget, the plan's own peak memory per rank).
pub fn build_from(
    einsum: &Einsum,
    tree: &ContractionTree,
    path: Vec<Vec<usize>>,
    fusion: &Fusion,
    opts: &PlanOptions,
) -> Result<Plan, PlanError> {
    let procs = opts.procs;
    if procs == 0 {
        return Err(PlanError::ZeroProcs);
    }
    let ext = &einsum.extents;
    let n_in = einsum.num_inputs();
    if tree.num_inputs != n_in || tree.steps.is_empty() {
        return Err(PlanError::Inconsistent(format!(
            "tree has {} inputs and {} steps for an einsum of {} inputs",
            tree.num_inputs,
            tree.steps.len(),
            n_in
        )));
    }
    // Every size the plan multiplies must fit in u64.
    for k in 0..n_in {
        let s = shape_of(einsum.input_indices(k), ext);
        s.iter()
            .try_fold(1u64, |a, &n| a.checked_mul(n as u64))
            .ok_or_else(|| PlanError::Overflow(format!("operand {k} has too many elements")))?;
    }
    let root = tree.root();
    let mut tensors: Vec<Tensor> = (0..n_in)
        .map(|k| Tensor {
            id: k,
            name: format!("T{k}"),
            indices: einsum.input_indices(k).to_vec(),
            shape: shape_of(einsum.input_indices(k), ext),
            kind: TensorKind::Input(k),
        })
        .collect();
    let mut state: BTreeMap<TensorId, State> = (0..n_in).map(|k| (k, State::Unloaded)).collect();
    let mut steps: Vec<PlanStep> = Vec::new();
    let mut groups: Vec<GroupPlan> = Vec::new();
    let mut totals = Totals::default();
    let mut idle_reasons: Vec<String> = Vec::new();

    for (gi, group) in fusion.groups.iter().enumerate() {
        let gidx = &group.indices;
        let gext = shape_of(gidx, ext);
        let out_node = group.output.node;
        let out_idx = group.output.indices.clone();
        if !tensors.iter().any(|t| t.id == out_node) {
            tensors.push(Tensor {
                id: out_node,
                name: if out_node == root {
                    "out".to_string()
                } else {
                    format!("t{out_node}")
                },
                indices: out_idx.clone(),
                shape: shape_of(&out_idx, ext),
                kind: if out_node == root {
                    TensorKind::Output
                } else {
                    TensorKind::Intermediate
                },
            });
        }
        for a in &group.inputs {
            if !state.contains_key(&a.node) {
                return Err(PlanError::Inconsistent(format!(
                    "group {gi} reads node {} before it is produced",
                    a.node
                )));
            }
        }
        let pos = |c: Index| gidx.iter().position(|&x| x == c);
        for a in group.inputs.iter().chain(std::iter::once(&group.output)) {
            if a.indices.iter().any(|&c| pos(c).is_none()) {
                return Err(PlanError::Inconsistent(format!(
                    "group {gi} accesses an index outside its iteration space"
                )));
            }
        }
        let summed: Vec<usize> = (0..gidx.len())
            .filter(|&v| !out_idx.contains(&gidx[v]))
            .collect();
        let inner_outputs: Vec<Vec<Index>> = group
            .steps
            .iter()
            .take(group.steps.len().saturating_sub(1))
            .map(|&s| tree.steps[s].output.clone())
            .collect();
        let make_grid = |sizes: &[usize]| Grid {
            dims: gidx
                .iter()
                .zip(sizes)
                .map(|(&c, &p)| GridDim { index: c, size: p })
                .collect(),
        };
        let dist_for = |grid: &Grid, idx: &[Index], partial: bool| Distribution {
            grid: grid.clone(),
            split: idx.iter().map(|&c| vec![pos(c).unwrap_or(0)]).collect(),
            partial: if partial {
                summed
                    .iter()
                    .copied()
                    .filter(|&v| grid.dims[v].size > 1)
                    .collect()
            } else {
                Vec::new()
            },
            window: Vec::new(),
        };
        // Model figures of every enumerated grid.
        let blk = |sizes: &[usize], idx: &[Index]| -> u64 {
            idx.iter()
                .map(|&c| {
                    let v = pos(c).unwrap_or(0);
                    gext[v].div_ceil(sizes[v]) as u64
                })
                .product()
        };
        let tile = &group.bound.tile;
        // Per grid dim, the log of the tile's count along it (what `tile_dist` compares to).
        let tile_ln: Vec<f64> = gidx
            .iter()
            .zip(&gext)
            .map(|(c, &n)| {
                let t = tile.get(c).copied().unwrap_or(n as f64).max(1.0);
                (n as f64 / t).max(1.0).ln()
            })
            .collect();
        let positions =
            |idx: &[Index]| -> Vec<usize> { idx.iter().map(|&c| pos(c).unwrap_or(0)).collect() };
        let out_pos = positions(&out_idx);
        let inner_pos: Vec<Vec<usize>> = inner_outputs.iter().map(|o| positions(o)).collect();
        let all = grids::enumerate(&gext, procs, opts.balance_tolerance);
        // Per input, once per group: where it is now, its shape, its target split positions.
        struct InputInfo {
            from: Option<Distribution>,
            shape: Vec<usize>,
            pos: Vec<usize>,
            partial_q: usize,
            partial_block: u64,
            /// Rank 0's block where the input is now.
            from_first: Option<crate::Ranges>,
            /// The candidate sizes on which the input already sits in the group's
            /// distribution (then it does not move).
            same_grid: Option<Vec<usize>>,
        }
        impl InputInfo {
            /// Rank `last`'s block where the input is now.
            fn block_of_last(&self, last: usize, from: &Distribution) -> Option<crate::Ranges> {
                crate::moves::ranges_of(from, last, &self.shape)
            }
        }
        let infos: Vec<InputInfo> = group
            .inputs
            .iter()
            .map(|a| {
                let shape = shape_of(&a.indices, ext);
                let pos: Vec<usize> = a.indices.iter().map(|&c| pos(c).unwrap_or(0)).collect();
                let from = match &state[&a.node] {
                    State::Unloaded if opts.inputs_in_place => None,
                    State::Unloaded => {
                        let t = &tensors[a.node];
                        Some(canonical_distribution(&t.indices, &t.shape, procs))
                    }
                    State::At(d) => Some(d.clone()),
                };
                let (partial_q, partial_block) = match &from {
                    Some(d) if d.is_partial() => (
                        d.partial.iter().map(|&g| d.grid.dims[g].size).product(),
                        block_len(d, 0, &shape),
                    ),
                    _ => (1, 0),
                };
                let from_first = from
                    .as_ref()
                    .and_then(|d| crate::moves::ranges_of(d, 0, &shape));
                // The input sits in the group's distribution on the grid of these sizes.
                let same_grid = from.as_ref().and_then(|f| {
                    let same = f.partial.is_empty()
                        && f.grid.dims.len() == gidx.len()
                        && f.grid.dims.iter().zip(gidx).all(|(d, &c)| d.index == c)
                        && f.split
                            .iter()
                            .zip(&pos)
                            .all(|(sp, &v)| sp.len() == 1 && sp[0] == v);
                    same.then(|| f.grid.dims.iter().map(|d| d.size).collect())
                });
                InputInfo {
                    from,
                    shape,
                    pos,
                    partial_q,
                    partial_block,
                    from_first,
                    same_grid,
                }
            })
            .collect();
        let mut cands: Vec<Candidate> = all
            .into_iter()
            .map(|sizes| {
                let mut comm = 0f64;
                let mut mem = 0u64;
                // Ceil block of every group index on this grid, and of a tensor over `at`.
                let bs: smallvec::SmallVec<[u64; 12]> = gext
                    .iter()
                    .zip(&sizes)
                    .map(|(&n, &p)| n.div_ceil(p) as u64)
                    .collect();
                let blk_at = |at: &[usize]| -> u64 { at.iter().map(|&v| bs[v]).product() };
                let size: usize = sizes.iter().product();
                let last = size.saturating_sub(1);
                for info in &infos {
                    let b = blk_at(&info.pos);
                    mem += b;
                    let Some(from) = &info.from else { continue };
                    if info.same_grid.as_deref() == Some(&sizes[..]) {
                        continue;
                    }
                    // What ranks 0 and size-1 lack of their target block (a sample of the
                    // grid): rank 0 is at coordinates 0, rank size-1 at sizes-1 everywhere.
                    let lack = [
                        (0usize, &info.from_first),
                        (last, &info.block_of_last(last, from)),
                    ]
                    .iter()
                    .map(|&(r, fb)| {
                        let mut t_len = 1u64;
                        let mut both = 1u64;
                        for (k, (&n, &v)) in info.shape.iter().zip(&info.pos).enumerate() {
                            let x = if r == 0 { 0 } else { sizes[v] - 1 };
                            let (ts, te) = crate::block_range(0, n, sizes[v], x);
                            t_len *= (te - ts) as u64;
                            if let Some(fb) = fb {
                                let (lo, hi) = fb[k];
                                both *= te.min(hi).saturating_sub(ts.max(lo)) as u64;
                            }
                        }
                        if fb.is_some() {
                            t_len - both
                        } else {
                            t_len
                        }
                    })
                    .max()
                    .unwrap_or(b);
                    comm += lack as f64;
                    if info.partial_q > 1 {
                        let q = info.partial_q;
                        comm += info.partial_block as f64 * (q - 1) as f64 / q as f64;
                    }
                }
                let ob = blk_at(&out_pos);
                mem += ob;
                let q: usize = summed.iter().map(|&v| sizes[v]).product();
                comm += ob as f64 * (q - 1) as f64 / q as f64;
                for o in &inner_pos {
                    mem += blk_at(o);
                }
                let work: u128 = gext
                    .iter()
                    .zip(&sizes)
                    .map(|(&n, &p)| n.div_ceil(p) as u128)
                    .product();
                let tile_dist = sizes
                    .iter()
                    .zip(&tile_ln)
                    .map(|(&p, &t)| ((p as f64).ln() - t).abs())
                    .sum();
                Candidate {
                    sizes,
                    model_comm: comm,
                    memory: mem,
                    work,
                    tile_dist,
                    phases: None,
                }
            })
            .collect();
        if cands.is_empty() {
            return Err(PlanError::Inconsistent(format!("group {gi} has no grid")));
        }
        let w_min = cands.iter().map(|c| c.work).min().unwrap_or(1);
        let limit = (w_min as f64) * (1.0 + opts.balance_tolerance.max(0.0));
        cands.retain(|c| (c.work as f64) <= limit * (1.0 + 1e-12));
        if let Some(s) = opts.mem {
            // A grid whose blocks exceed the budget may still fit when it walks a summed index
            // in phases: the inputs holding it rest without replicas and each phase fetches a
            // window (2.5D / SUMMA). The fewest phases that fit are taken.
            for c in cands.iter_mut().filter(|c| c.memory > s) {
                let bv = |v: usize| gext[v].div_ceil(c.sizes[v]);
                let Some(v) = summed
                    .iter()
                    .copied()
                    .filter(|&v| {
                        group.inputs.iter().any(|a| {
                            a.indices.contains(&gidx[v])
                                && replicas_of(&c.sizes, gidx, &a.indices) > 1
                        })
                    })
                    .max_by_key(|&v| (bv(v), usize::MAX - v))
                else {
                    continue;
                };
                let mem_at = |t: usize| -> u64 {
                    let b = bv(v) as u64;
                    let mut m = 0u64;
                    for a in &group.inputs {
                        let full = blk(&c.sizes, &a.indices);
                        if a.indices.contains(&gidx[v]) {
                            let rep = replicas_of(&c.sizes, gidx, &a.indices) as u64;
                            let others = full / b.max(1);
                            m += others * (b.div_ceil(rep) + b.div_ceil(t as u64));
                        } else {
                            m += full;
                        }
                    }
                    // The accumulated output block and the phase's partial result beside it.
                    m += 2 * blk(&c.sizes, &out_idx);
                    for o in &inner_outputs {
                        let full = blk(&c.sizes, o);
                        m += if o.contains(&gidx[v]) {
                            (full / b.max(1)) * b.div_ceil(t as u64)
                        } else {
                            full
                        };
                    }
                    m
                };
                let (mut lo, mut hi) = (2usize, bv(v).max(2));
                if mem_at(hi) > s {
                    continue;
                }
                while lo < hi {
                    let mid = lo + (hi - lo) / 2;
                    if mem_at(mid) <= s {
                        hi = mid;
                    } else {
                        lo = mid + 1;
                    }
                }
                c.memory = mem_at(lo);
                c.phases = Some((v, lo));
            }
            let min_mem = cands.iter().map(|c| c.memory).min().unwrap_or(0);
            cands.retain(|c| c.memory <= s);
            if cands.is_empty() {
                return Err(PlanError::MemoryTooSmall {
                    budget: s,
                    needed: min_mem,
                    detail: format!(" (group {gi}: {})", group.einsum_string()),
                });
            }
        }
        let considered = cands.len();
        let order = |a: &Candidate, b: &Candidate| {
            a.model_comm
                .total_cmp(&b.model_comm)
                .then(a.memory.cmp(&b.memory))
                .then(a.work.cmp(&b.work))
                .then(a.tile_dist.total_cmp(&b.tile_dist))
                .then(
                    b.sizes
                        .iter()
                        .product::<usize>()
                        .cmp(&a.sizes.iter().product::<usize>()),
                )
                .then(a.sizes.cmp(&b.sizes))
        };
        let best_full_p = cands
            .iter()
            .filter(|c| c.sizes.iter().product::<usize>() == procs)
            .min_by(|a, b| order(a, b))
            .cloned();
        // Only the best few are scheduled exactly: select them, then sort those (the order
        // is total, so this is the same prefix a full sort gives).
        if cands.len() > EXACT_CANDIDATES {
            cands.select_nth_unstable_by(EXACT_CANDIDATES, order);
            cands.truncate(EXACT_CANDIDATES);
        }
        cands.sort_by(order);

        // Exact schedules for the best few; the chosen one keeps its moves.
        let mut best: Option<Scheduled> = None;
        for (ci, c) in cands.iter().enumerate().take(EXACT_CANDIDATES) {
            let size: usize = c.sizes.iter().product();
            if ci > 0 && size > EXACT_MAX_GRID {
                continue;
            }
            let grid = make_grid(&c.sizes);
            let mut acc = Vec::new();
            let mut moves = Vec::new();
            let mut fetch_total = 0u64;
            for a in &group.inputs {
                let shape = shape_of(&a.indices, ext);
                let target = resting_for(&grid, gidx, &a.indices, c.phases);
                let from = current(&state, &tensors, opts, a.node, &target);
                let m = plan_move(&shape, &from, &target, procs);
                for mv in &m {
                    add_received(&mut acc, &mv.received);
                }
                if let (Some(k), Some((_, t))) = (phased_dim(c.phases, gidx, &a.indices), c.phases)
                {
                    let whole = dist_for(&grid, &a.indices, false);
                    for part in 0..t {
                        let w = windowed(&whole, k, t, part);
                        let v = MoveView::new(&shape, &target, &w, false, procs).received();
                        add_received(&mut acc, &v);
                        fetch_total += v.iter().map(|&(_, w)| w).sum::<u64>();
                    }
                }
                moves.push(m);
            }
            // The reduction of this group's output (scattered over its own grid).
            let od = dist_for(&grid, &out_idx, true);
            let oshape = shape_of(&out_idx, ext);
            let mut red = Vec::new();
            if od.is_partial() {
                let rd = reduced_distribution(&od, &oshape);
                red = plan_move(&oshape, &od, &rd, procs);
                for mv in &red {
                    add_received(&mut acc, &mv.received);
                }
            }
            let total: u64 = moves
                .iter()
                .flatten()
                .chain(red.iter())
                .map(Move::total)
                .sum::<u64>()
                + fetch_total;
            let key = (max_of(&acc), total);
            if best.as_ref().is_none_or(|b| key < (b.0, b.1)) {
                best = Some((key.0, key.1, ci, moves, red));
            }
            if size > EXACT_MAX_GRID {
                break;
            }
        }
        let (pred_max, _, chosen, moves, _red) =
            best.ok_or_else(|| PlanError::Inconsistent(format!("group {gi}: no grid scheduled")))?;
        let c = cands[chosen].clone();
        let grid = make_grid(&c.sizes);
        let used: usize = c.sizes.iter().product();
        if used < procs {
            let max_possible: u128 = gext.iter().map(|&n| n as u128).product();
            let why = if max_possible < procs as u128 {
                format!(
                    "the extents of group {gi} ({}) allow at most {} ranks",
                    group.einsum_string(),
                    max_possible
                )
            } else if let Some(f) = &best_full_p {
                format!(
                    "group {gi} ({}): the grid {:?} on {} ranks moves fewer words (model {:.0}) than the best {}-rank grid {:?} (model {:.0})",
                    group.einsum_string(),
                    c.sizes,
                    used,
                    c.model_comm,
                    procs,
                    f.sizes,
                    f.model_comm
                )
            } else {
                format!(
                    "group {gi} ({}): no grid of {} ranks balances the work within {:.0}% (or fits the memory budget); {:?} uses {}",
                    group.einsum_string(),
                    procs,
                    opts.balance_tolerance * 100.0,
                    c.sizes,
                    used
                )
            };
            idle_reasons.push(why);
        }
        // Emit: loads, moves, compute (or its phases), frees.
        let mut inputs = Vec::new();
        let mut resting: Vec<(TensorId, Distribution)> = Vec::new();
        for (a, m) in group.inputs.iter().zip(moves) {
            let whole = dist_for(&grid, &a.indices, false);
            let target = resting_for(&grid, gidx, &a.indices, c.phases);
            if let State::Unloaded = state[&a.node] {
                let d = current(&state, &tensors, opts, a.node, &target);
                steps.push(PlanStep::Load {
                    tensor: a.node,
                    dist: d,
                });
            }
            for mv in m {
                emit_move(a.node, mv, &mut totals, &mut steps, opts);
            }
            state.insert(a.node, State::At(target.clone()));
            if target != whole {
                resting.push((a.node, target));
            }
            inputs.push((a.node, whole));
        }
        let od = dist_for(&grid, &out_idx, true);
        match c.phases {
            None => steps.push(PlanStep::Compute { group: gi }),
            Some((_, t)) => {
                for part in 0..t {
                    let mut fetch = Vec::new();
                    let mut views = Vec::new();
                    for (a, (_, whole)) in group.inputs.iter().zip(&inputs) {
                        let Some(k) = phased_dim(c.phases, gidx, &a.indices) else {
                            continue;
                        };
                        let rest = resting_for(&grid, gidx, &a.indices, c.phases);
                        let w = windowed(whole, k, t, part);
                        let shape = shape_of(&a.indices, ext);
                        let view = MoveView::new(&shape, &rest, &w, false, procs);
                        let volume = view.volume(opts.per_rank);
                        let pattern = view.kind(volume.total);
                        views.push(view);
                        fetch.push(Fetch {
                            tensor: a.node,
                            pattern,
                            from: rest,
                            to: w,
                            volume,
                        });
                    }
                    steps.push(PlanStep::ComputePhase {
                        group: gi,
                        phase: part,
                        fetch,
                        volume: totals.tally(steps.len(), &views, procs, opts.per_rank),
                    });
                }
            }
        }
        for a in &group.inputs {
            steps.push(PlanStep::Free { tensor: a.node });
            state.remove(&a.node);
        }
        state.insert(out_node, State::At(od.clone()));
        let box_ceil: BTreeMap<Index, usize> = gidx
            .iter()
            .zip(&gext)
            .zip(&c.sizes)
            .map(|((&i, &n), &p)| (i, n.div_ceil(p)))
            .collect();
        let flops: f64 = group
            .steps
            .iter()
            .map(|&s| {
                tree.steps[s]
                    .indices()
                    .iter()
                    .map(|i| box_ceil.get(i).copied().unwrap_or(1) as f64)
                    .product::<f64>()
            })
            .sum();
        groups.push(GroupPlan {
            group: group.clone(),
            grid,
            inputs,
            output: (out_node, od),
            max_flops_per_rank: flops,
            bound_memory_independent: 0.0,
            bound_memory_dependent: 0.0,
            predicted_max_per_rank: pred_max,
            candidates_considered: considered,
            phases: c.phases.map(|(v, t)| Phases {
                index: gidx[v],
                count: t,
                resting,
            }),
        });
    }

    // The output: reduce its partial sums over the last grid (scattered).
    let out_id = root;
    let out_dist = match state.get(&out_id) {
        Some(State::At(d)) => d.clone(),
        _ => {
            return Err(PlanError::Inconsistent(
                "no group produces the einsum's output".into(),
            ))
        }
    };
    let oshape = shape_of(&tree.steps[tree.steps.len() - 1].output, ext);
    let final_dist = reduced_distribution(&out_dist, &oshape);
    for mv in plan_move(&oshape, &out_dist, &final_dist, procs) {
        emit_move(out_id, mv, &mut totals, &mut steps, opts);
    }

    let touched_per_rank = touched(&groups, &tensors, procs);
    let mut memory = Memory::new(&steps, &tensors, &groups, tree, procs);
    for (step, words) in std::mem::take(&mut totals.buffers) {
        memory.set_buffers(step, words);
    }
    let ranks_used = memory.ranks_used;
    let (mut peak, mut peak_buf) = (Vec::new(), Vec::new());
    let (mut max_peak, mut max_peak_buf) = (0u64, 0u64);
    for r in 0..memory.active {
        let (m, mb) = memory.of_rank(r);
        max_peak = max_peak.max(m);
        max_peak_buf = max_peak_buf.max(mb);
        if opts.per_rank {
            peak.push(m);
            peak_buf.push(mb);
        }
    }
    if let Some(s) = opts.mem {
        if max_peak > s {
            return Err(PlanError::MemoryTooSmall {
                budget: s,
                needed: max_peak,
                detail: " (peak over the plan's steps, including input blocks in their starting distribution and receive buffers)".into(),
            });
        }
    }
    // The SOAP bound for the budget S, or without one for the plan's own peak per rank.
    let s_bound = opts.mem.map_or((max_peak as f64).max(1.0), |s| s as f64);
    let mut bound_per_rank = 0.0;
    for g in &mut groups {
        let b = deinsum_soap::parallel_bound(&g.group, procs, s_bound);
        g.bound_memory_independent = b.memory_independent;
        g.bound_memory_dependent = b.memory_dependent;
        bound_per_rank += b.binding();
    }
    let ratio = if bound_per_rank > 0.0 {
        touched_per_rank as f64 / bound_per_rank
    } else {
        f64::NAN
    };
    let idle = if ranks_used < procs {
        Some(format!(
            "{} of {} ranks idle: {}",
            procs - ranks_used,
            procs,
            if idle_reasons.is_empty() {
                "no group needs them".to_string()
            } else {
                idle_reasons.join("; ")
            }
        ))
    } else {
        None
    };
    let expression = format!(
        "{}->{}",
        (0..n_in)
            .map(|k| einsum.input_indices(k).iter().collect::<String>())
            .collect::<Vec<_>>()
            .join(","),
        einsum.output.iter().collect::<String>()
    );
    Ok(Plan {
        version: PLAN_VERSION,
        expression,
        einsum: einsum.clone(),
        procs,
        mem: opts.mem,
        tree: tree.clone(),
        path,
        tensors,
        groups,
        steps,
        output: (out_id, final_dist),
        prediction: Prediction {
            max_per_rank: max_of(&totals.received),
            total: totals.received.iter().sum(),
            max_sent_per_rank: max_of(&totals.sent),
            received: per_rank(&totals.received, opts.per_rank),
            sent: per_rank(&totals.sent, opts.per_rank),
            peak_memory: crate::sparse(peak),
            max_peak_memory: max_peak,
            peak_memory_with_buffers: crate::sparse(peak_buf),
            max_peak_memory_with_buffers: max_peak_buf,
            touched_per_rank,
            bound_per_rank,
            ratio,
        },
        idle,
        ranks_used,
        inputs_in_place: opts.inputs_in_place,
    })
}

/// Max over ranks of the words of its blocks of every group's inputs and output, summed over
/// the groups (ranks outside a group's grid touch nothing of it).
fn touched(groups: &[GroupPlan], tensors: &[Tensor], procs: usize) -> u64 {
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
fn per_rank(dense: &[u64], wanted: bool) -> Vec<(usize, u64)> {
    if wanted {
        crate::sparse(dense.to_vec())
    } else {
        Vec::new()
    }
}

/// Emits one planned move of `tensor` as a Redistribute step, its volume counted into
/// `totals`.
fn emit_move(
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
