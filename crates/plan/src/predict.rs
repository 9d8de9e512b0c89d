//! The plan's prediction from its moves' words and its memory peaks: one function serves the
//! planner's `finish` and the overlap pass, which recomputes it after rewriting steps.

use crate::fasthash::FastMap;
use crate::memory::{Peaks, Shapes};
use crate::moves::{Cursor, Cuts};
use crate::{GroupPlan, PerRank, PlanOptions, Prediction, Tensor, TensorId};

/// Sets every group's SOAP parallel bounds for `procs` ranks and budget `s_bound`; returns the
/// per-rank bound of the plan (the binding bound of each group, summed).
pub(crate) fn set_bounds(groups: &mut [GroupPlan], procs: usize, s_bound: f64) -> f64 {
    let mut bound_per_rank = 0.0;
    // Groups of the same statement up to renaming (a chain's or a network's repeated steps)
    // share one solve: it was a quarter of planning a 30-operand MPS on 2 ranks.
    let mut solved: FastMap<Vec<u64>, deinsum_soap::ParallelBound> = FastMap::default();
    for g in groups {
        let b = *solved
            .entry(statement_key(&g.group))
            .or_insert_with(|| deinsum_soap::parallel_bound(&g.group, procs, s_bound));
        g.bound_memory_independent = b.memory_independent;
        g.bound_memory_dependent = b.memory_dependent;
        bound_per_rank += b.binding();
    }
    bound_per_rank
}

/// A group's SOAP statement up to a renaming of its indices: each index as its first position
/// in the group's indices, with its extent (`u64::MAX` for an index outside them or without an
/// extent). Groups of equal keys solve the same program over their indices in the same order
/// (the names' own order reaches only the tile, which the parallel bound does not use), so
/// their bounds are equal to the bit.
fn statement_key(g: &deinsum_soap::FusedGroup) -> Vec<u64> {
    let idx = &g.indices;
    let pos = |c: &deinsum_expr::Index| {
        idx.iter()
            .position(|x| x == c)
            .map_or(u64::MAX, |p| p as u64)
    };
    let mut key = vec![idx.len() as u64];
    for c in idx {
        key.push(pos(c));
        key.push(g.extents.get(c).map_or(u64::MAX, |&n| n as u64));
    }
    for a in g.inputs.iter().chain(std::iter::once(&g.output)) {
        key.push(a.indices.len() as u64);
        key.extend(a.indices.iter().map(pos));
    }
    key
}

/// Max over ranks of the words of its blocks of every group's inputs and output, summed over
/// the groups (ranks outside a group's grid touch nothing of it).
pub(crate) fn touched(groups: &[GroupPlan], tensors: &[Tensor], procs: usize) -> u64 {
    touched_by_segments(groups, tensors, procs)
        .unwrap_or_else(|| touched_by_ranks(groups, tensors, procs))
}

/// [`touched`] by segments of ranks over which every block keeps its length (a block's
/// length changes only where a grid dim that splits an index of unequal cuts moves): the
/// maximum over ranks is the maximum over segments. `None` when the segments would be many.
fn touched_by_segments(groups: &[GroupPlan], tensors: &[Tensor], procs: usize) -> Option<u64> {
    let shapes = Shapes::new(tensors);
    // Per block: its distribution and shape, the ranks that hold it (a prefix) and the
    // ranks (aligned) over which its length stays the same.
    let mut held = Vec::new();
    let mut n = 0;
    for g in groups {
        let size = g.grid.size().min(procs);
        n = n.max(size);
        for (id, d) in g.inputs.iter().chain(std::iter::once(&g.output)) {
            let sh = shapes.of(*id);
            let run = Cuts::capped(d, &sh, crate::memory::UNIFORM_TABLE).length_run(&[])?;
            held.push((d, sh, size.min(d.grid.size()), run.max(1)));
        }
    }
    let segments: usize = held.iter().map(|h| h.2 / h.3 + 1).sum();
    if segments.saturating_mul(8) > n {
        return None;
    }
    let (mut lo, mut max) = (0, 0);
    while lo < n {
        let (mut hi, mut words) = (n, 0u64);
        for (d, sh, end, run) in &held {
            if lo < *end {
                hi = hi.min(*end).min((lo / run + 1) * run);
                words += crate::moves::block_len(d, lo, sh);
            }
        }
        max = max.max(words);
        lo = hi;
    }
    Some(max)
}

/// [`touched`] rank by rank.
fn touched_by_ranks(groups: &[GroupPlan], tensors: &[Tensor], procs: usize) -> u64 {
    let shapes = Shapes::new(tensors);
    let shape = |id: TensorId| shapes.of(id);
    let mut per_rank: Vec<u64> = Vec::new();
    for g in groups {
        let size = g.grid.size().min(procs);
        if per_rank.len() < size {
            per_rank.resize(size, 0);
        }
        for (id, d) in g.inputs.iter().chain(std::iter::once(&g.output)) {
            let sh = shape(*id);
            // Ranks past the distribution's grid hold nothing of it; a block's length is taken
            // again only when its ranges changed.
            let cuts = Cuts::new(d, &sh);
            let mut cursor = Cursor::new(&cuts, 0);
            let mut len = 0u64;
            for w in per_rank.iter_mut().take(size.min(d.grid.size())) {
                if cursor.sync() {
                    len = cursor
                        .ranges()
                        .iter()
                        .map(|&(lo, hi)| (hi - lo) as u64)
                        .product();
                }
                *w += len;
                cursor.advance();
            }
        }
    }
    per_rank.into_iter().max().unwrap_or(0)
}

/// Fills `pr` from each rank's words `received` and `sent` over the plan's steps and the memory
/// `peaks` on `procs` ranks: the word totals, the peaks, every group's SOAP bound (for the budget S, or without
/// one the plan's own peak) and the ratio of `pr.touched_per_rank` to the bound. The planner's
/// `finish` and the overlap pass both predict through here, so their figures cannot drift.
pub(crate) fn set_prediction(
    pr: &mut Prediction,
    groups: &mut [GroupPlan],
    words: WordSums,
    peaks: Peaks,
    procs: usize,
    opts: &PlanOptions,
) {
    set_sums(pr, words);
    set_memory(pr, groups, peaks, procs, opts);
}

/// Every rank's words received and sent summed over a plan's moves: the maxima, the total
/// received and (when asked) the sparse per-rank lists, gathered chunk by chunk of ranks.
#[derive(Default)]
pub(crate) struct WordSums {
    max_received: u64,
    total: u64,
    max_sent: u64,
    received: PerRank,
    sent: PerRank,
}

impl WordSums {
    /// The sums of dense per-rank `received` and `sent`.
    pub(crate) fn of(received: &[u64], sent: &[u64], per_rank: bool) -> WordSums {
        let mut w = WordSums::default();
        w.add(0, received, sent, per_rank);
        w
    }

    /// Adds the ranks from `lo` on with these words (after every rank before `lo`).
    pub(crate) fn add(&mut self, lo: usize, received: &[u64], sent: &[u64], per_rank: bool) {
        self.max_received = self.max_received.max(max_of(received));
        self.total += received.iter().sum::<u64>();
        self.max_sent = self.max_sent.max(max_of(sent));
        if per_rank {
            let nonzero = |v: &[u64], out: &mut PerRank| {
                let ranks = v.iter().enumerate().filter(|&(_, &x)| x != 0);
                ranks.for_each(|(r, &x)| out.push(lo + r, x));
            };
            nonzero(received, &mut self.received);
            nonzero(sent, &mut self.sent);
        }
    }
}

/// The words part of [`set_prediction`]: totals and maxima of `received` and `sent` per rank.
pub(crate) fn set_words(
    pr: &mut Prediction,
    (received, sent): (&[u64], &[u64]),
    opts: &PlanOptions,
) {
    set_sums(pr, WordSums::of(received, sent, opts.per_rank));
}

/// [`set_words`] from the sums.
pub(crate) fn set_sums(pr: &mut Prediction, w: WordSums) {
    pr.max_per_rank = w.max_received;
    pr.total = w.total;
    pr.max_sent_per_rank = w.max_sent;
    pr.received = w.received;
    pr.sent = w.sent;
}

/// The memory part of [`set_prediction`]: the peaks, the groups' SOAP bounds and the ratio
/// of `pr.touched_per_rank` to the plan's bound.
pub(crate) fn set_memory(
    pr: &mut Prediction,
    groups: &mut [GroupPlan],
    peaks: Peaks,
    procs: usize,
    opts: &PlanOptions,
) {
    let s_bound = opts.mem.map_or((peaks.max as f64).max(1.0), |s| s as f64);
    let bound_per_rank = set_bounds(groups, procs, s_bound);
    pr.peak_memory = PerRank::from_dense(peaks.per_rank);
    pr.max_peak_memory = peaks.max;
    pr.peak_memory_with_buffers = PerRank::from_dense(peaks.per_rank_with_buffers);
    pr.max_peak_memory_with_buffers = peaks.max_with_buffers;
    pr.bound_per_rank = bound_per_rank;
    pr.ratio = if bound_per_rank > 0.0 {
        pr.touched_per_rank as f64 / bound_per_rank
    } else {
        f64::NAN
    };
}

/// Whether a plan under `opts` may leave its memory prediction for later: no cap asks for
/// the peaks while planning.
pub(crate) fn memory_deferrable(opts: &PlanOptions) -> bool {
    opts.mem.is_none() && opts.mem_total.is_none()
}

/// Completes the prediction of a plan whose memory part was deferred ([`crate::planner`]'s
/// `finish` without caps, for candidates compared on seconds and words alone): the words
/// each rank touches, the memory peaks over its steps (the message buffers derived from its
/// moves, from `memo`, as the planner counted them), the SOAP bounds and the ratio.
pub(crate) fn complete_memory(
    plan: &mut crate::Plan,
    opts: &PlanOptions,
    memo: &crate::rank_words::MoveMemo,
) {
    let procs = plan.procs;
    plan.prediction.touched_per_rank = touched(&plan.groups, &plan.tensors, procs);
    let mut memory = crate::memory::MemoryModel::new(
        &plan.steps,
        &plan.tensors,
        &plan.groups,
        &plan.tree,
        procs,
    );
    memory.buffers_from(memo);
    let peaks = memory.peaks(opts.per_rank);
    set_memory(&mut plan.prediction, &mut plan.groups, peaks, procs, opts);
}

/// The largest of `acc`, 0 when empty.
pub(crate) fn max_of(acc: &[u64]) -> u64 {
    acc.iter().copied().max().unwrap_or(0)
}
