//! Overlap of communication with computation (double buffering), as a post-pass over a
//! finished plan.
//!
//! A pipelined group is a phased group ([`crate::GroupPlan::phases`]) whose phase steps carry
//! the next phase's windows in `prefetch`: phase 0's step fetches its own windows and
//! prefetches phase 1's, phase t prefetches phase t+1's while it computes, the last phase
//! fetches nothing. Two rewrites make such groups:
//!
//! - a group phased under the memory budget gets its prefetches (when the second buffer still
//!   fits the budget);
//! - a group computed whole, whose inputs holding a summed index arrive by a `redistribute`
//!   without `sum` that moves words, is computed in phases along that index: those inputs are
//!   not moved first but fetched window by window straight from the move's source
//!   distribution, which is where they rest ([`Phases::resting`]).
//!
//! Every window is a move with its exact per-rank words, so the prediction is recomputed
//! from the rewritten steps and stays what an executor measures, step by step.

use crate::builder::windowed;
use crate::memory::MemoryModel;
use crate::moves::MoveView;
use crate::predict::set_prediction;
use crate::{Distribution, Fetch, Phases, Plan, PlanOptions, PlanStep, TensorId, Volume};

/// How many phases a group computed whole is cut into, and when it is worth it.
///
/// The count is the largest `T <= max_chunks` such that every phase still walks at least
/// `min_phase_extent` of the busiest rank's block of the phased index and moves at least
/// `min_phase_words` words to the busiest rank; a group where `T` would be below 2 is left
/// whole. The reasons: after phase 0 each phase adds its partial result into the output block
/// (one pass over it), which stays a few percent of the phase's work only while the phase does
/// a few hundred multiply-adds per output element (and a GEMM whose inner dimension is that
/// long runs near its full rate); a message must be long enough for its latency to vanish
/// beside its words; and with T phases only the first phase's fetch is exposed, so beyond a
/// few phases the gain is small while the per-phase costs grow.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Chunking {
    /// Most phases for a group computed whole.
    pub max_chunks: usize,
    /// Fewest elements of the phased index per phase on the busiest rank.
    pub min_phase_extent: usize,
    /// Fewest words the busiest rank receives per phase.
    pub min_phase_words: u64,
}

impl Chunking {
    /// The rule of [`apply`]: at most 4 phases (3/4 of the move hidden), each at least 256
    /// long along the phased index and at least 32 Ki words (256 KiB of f64) to a rank.
    pub const DEFAULT: Chunking = Chunking {
        max_chunks: 4,
        min_phase_extent: 256,
        min_phase_words: 1 << 15,
    };
}

impl Default for Chunking {
    fn default() -> Self {
        Chunking::DEFAULT
    }
}

/// The plan with its communication overlapped where it pays ([`Chunking::DEFAULT`]); `plan`
/// itself unless `opts.overlap` and the machine can move words while its ranks compute
/// ([`crate::Machine::copies_hide`]).
pub fn apply(plan: Plan, opts: &PlanOptions) -> Plan {
    apply_in(plan, opts, false)
}

/// [`apply`]; with `defer_memory`, a rewritten plan's memory prediction is left for later
/// as the planner's `finish` left it ([`crate::predict::complete_memory`]).
pub(crate) fn apply_in(plan: Plan, opts: &PlanOptions, defer_memory: bool) -> Plan {
    if !opts.overlap || !opts.machine.copies_hide(opts.procs) {
        return plan;
    }
    pipeline_in(plan, opts, &Chunking::DEFAULT, defer_memory)
}

/// Pipelines every group of `plan` that can be: phased groups get prefetches, groups computed
/// whole whose inputs arrive by a move are cut by `rule`. A rewrite that would raise the peak
/// above the budget `opts.mem` (or, with buffers, `opts.mem_total`) is not made. When nothing is rewritten, `plan` comes back
/// unchanged, byte for byte.
pub fn pipeline(plan: Plan, opts: &PlanOptions, rule: &Chunking) -> Plan {
    pipeline_in(plan, opts, rule, false)
}

/// [`pipeline`], the memory prediction deferred with `defer_memory` (as [`apply_in`]).
fn pipeline_in(plan: Plan, opts: &PlanOptions, rule: &Chunking, defer_memory: bool) -> Plan {
    let mut plan = plan;
    let mut changed = false;
    for gi in 0..plan.groups.len() {
        // Both caps hold: the data under `mem`, and data with buffers under `mem_total`.
        // (Without a cap nothing is counted: the peaks are a sweep over every rank.)
        let fits = |p: &Plan| {
            if opts.mem.is_none() && opts.mem_total.is_none() {
                return true;
            }
            let (data, with_buffers) = max_peaks(p);
            opts.mem.is_none_or(|s| data <= s) && opts.mem_total.is_none_or(|s| with_buffers <= s)
        };
        let rewritten = match plan.groups[gi].phases.as_ref().map(|ph| ph.count) {
            // The planner's phases with prefetches; when the second buffer breaks the budget,
            // twice as many phases, whose two windows take what one window took.
            Some(t) => with_prefetch(&plan, gi, opts)
                .filter(|p| fits(p))
                .or_else(|| recut(&plan, gi, 2 * t, opts).filter(|p| fits(p))),
            None => chunked(&plan, gi, opts, rule).filter(|p| fits(p)),
        };
        let Some(p) = rewritten else { continue };
        plan = p;
        changed = true;
    }
    if changed {
        refresh_prediction(&mut plan, opts, defer_memory);
    }
    plan
}

/// Whether group `gi` is pipelined: one of its phases prefetches the next one's windows.
pub fn is_pipelined(plan: &Plan, gi: usize) -> bool {
    plan.steps.iter().any(|s| {
        matches!(s, PlanStep::ComputePhase { group, prefetch, .. } if *group == gi && !prefetch.is_empty())
    })
}

/// Group `gi`, phased under the budget, with each phase prefetching the next one's windows
/// (`None` when it has fewer than two phases or already prefetches).
fn with_prefetch(plan: &Plan, gi: usize, opts: &PlanOptions) -> Option<Plan> {
    let idx: Vec<usize> = plan
        .steps
        .iter()
        .enumerate()
        .filter(|(_, s)| matches!(s, PlanStep::ComputePhase { group, .. } if *group == gi))
        .map(|(i, _)| i)
        .collect();
    if idx.len() < 2 || is_pipelined(plan, gi) {
        return None;
    }
    let mut p = plan.clone();
    for w in idx.windows(2) {
        let next = match &mut p.steps[w[1]] {
            PlanStep::ComputePhase { fetch, .. } => std::mem::take(fetch),
            _ => return None,
        };
        if let PlanStep::ComputePhase { prefetch, .. } = &mut p.steps[w[0]] {
            *prefetch = next;
        }
    }
    for &i in &idx {
        set_step_volume(&mut p, i, opts);
    }
    Some(p)
}

/// Group `gi`, phased under the budget, cut again into `t` pipelined phases (the same
/// inputs fetched from where they rest, each window part of `t`; `None` when `t` exceeds the
/// busiest rank's block of the phased index, or the group's phases are not one run of steps).
fn recut(plan: &Plan, gi: usize, t: usize, opts: &PlanOptions) -> Option<Plan> {
    let g = &plan.groups[gi];
    let ph = g.phases.as_ref()?;
    if t > g.busiest_range(&plan.einsum, ph.index, None).len() {
        return None;
    }
    let first = plan
        .steps
        .iter()
        .position(|s| matches!(s, PlanStep::ComputePhase { group, .. } if *group == gi))?;
    let end = first + ph.count;
    let template = match plan.steps.get(first)? {
        PlanStep::ComputePhase { fetch, .. } => fetch.clone(),
        _ => return None,
    };
    if !plan.steps[first..end]
        .iter()
        .all(|s| matches!(s, PlanStep::ComputePhase { group, .. } if *group == gi))
    {
        return None;
    }
    let windows = |part: usize| -> Vec<Fetch> {
        template
            .iter()
            .map(|f| {
                let mut to = f.to.clone();
                for w in &mut to.window {
                    (w.parts, w.part) = (t, part);
                }
                let shape = &plan
                    .tensor(f.tensor)
                    .map(|x| x.shape.clone())
                    .unwrap_or_default();
                fetch(f.tensor, shape, f.from.clone(), to, plan.procs, opts)
            })
            .collect()
    };
    let mut p = plan.clone();
    let phases = pipelined_phases(gi, t, windows);
    p.steps.splice(first..end, phases);
    if let Some(ph) = p.groups[gi].phases.as_mut() {
        ph.count = t;
    }
    for i in first..first + t {
        set_step_volume(&mut p, i, opts);
    }
    Some(p)
}

/// The `t` phase steps of a pipelined group `gi`: phase 0 fetches `windows(0)`, phase k
/// prefetches `windows(k + 1)` (volumes to be set).
fn pipelined_phases(gi: usize, t: usize, windows: impl Fn(usize) -> Vec<Fetch>) -> Vec<PlanStep> {
    (0..t)
        .map(|part| PlanStep::ComputePhase {
            group: gi,
            phase: part,
            fetch: if part == 0 { windows(0) } else { Vec::new() },
            prefetch: if part + 1 < t {
                windows(part + 1)
            } else {
                Vec::new()
            },
            volume: Volume::default(),
        })
        .collect()
}

/// An input of a group computed whole that arrives by a move worth hiding: the step of its
/// last move and where that move starts.
struct Arrival {
    tensor: TensorId,
    step: usize,
    from: Distribution,
    words: u64,
}

/// The inputs of group `gi` (whose Compute is step `c`) that arrive by a `redistribute`
/// without `sum` into the group's distribution, moving words, with nothing else touching them
/// between that move and the compute.
fn arrivals(plan: &Plan, gi: usize, c: usize) -> Vec<Arrival> {
    let g = &plan.groups[gi];
    let mut out = Vec::new();
    for (tid, whole) in &g.inputs {
        let Some(r) = (0..c)
            .rev()
            .find(|&i| step_tensor(&plan.steps[i]) == Some(*tid))
        else {
            continue;
        };
        if let PlanStep::Redistribute {
            from,
            to,
            sum: false,
            volume,
            ..
        } = &plan.steps[r]
        {
            if to == whole && volume.total > 0 {
                out.push(Arrival {
                    tensor: *tid,
                    step: r,
                    from: from.clone(),
                    words: volume.max_per_rank,
                });
            }
        }
    }
    out
}

/// The tensor a load, move or free step is about.
fn step_tensor(s: &PlanStep) -> Option<TensorId> {
    match s {
        PlanStep::Load { tensor, .. }
        | PlanStep::Redistribute { tensor, .. }
        | PlanStep::Free { tensor } => Some(*tensor),
        _ => None,
    }
}

/// Group `gi`, computed whole, cut into phases along the summed index whose inputs' moves
/// carry the most words, each phase's windows in flight while the previous phase computes
/// (`None` when no input arrives by such a move or the rule gives fewer than two phases).
fn chunked(plan: &Plan, gi: usize, opts: &PlanOptions, rule: &Chunking) -> Option<Plan> {
    let c = plan
        .steps
        .iter()
        .position(|s| matches!(s, PlanStep::Compute { group } if *group == gi))?;
    let g = &plan.groups[gi];
    let arr = arrivals(plan, gi, c);
    let holds = |tid: TensorId, v: char| plan.tensor(tid).is_some_and(|t| t.indices.contains(&v));
    // The summed index whose arriving inputs move the most words (ties: the first).
    let (v, words) = g
        .group
        .indices
        .iter()
        .filter(|v| !g.group.output.indices.contains(v))
        .map(|&v| {
            let w: u64 = arr
                .iter()
                .filter(|a| holds(a.tensor, v))
                .map(|a| a.words)
                .sum();
            (v, w)
        })
        .fold(None, |best: Option<(char, u64)>, (v, w)| match best {
            Some((_, bw)) if bw >= w => best,
            _ if w > 0 => Some((v, w)),
            _ => best,
        })?;
    let bv = g.busiest_range(&plan.einsum, v, None).len();
    let t = rule
        .max_chunks
        .min(bv / rule.min_phase_extent.max(1))
        .min(usize::try_from(words / rule.min_phase_words.max(1)).unwrap_or(usize::MAX));
    if t < 2 {
        return None;
    }
    let moved: Vec<&Arrival> = arr.iter().filter(|a| holds(a.tensor, v)).collect();
    let mut p = plan.clone();
    let procs = plan.procs;
    // Every input holding the index is windowed: from its move's source when it arrives by
    // one, else from the group's distribution it already sits in (a local copy).
    let windows = |part: usize| -> Vec<Fetch> {
        g.inputs
            .iter()
            .filter_map(|(tid, whole)| {
                let tensor = plan.tensor(*tid)?;
                let k = tensor.indices.iter().position(|&c| c == v)?;
                let from = moved
                    .iter()
                    .find(|a| a.tensor == *tid)
                    .map_or_else(|| whole.clone(), |a| a.from.clone());
                let to = windowed(whole, k, t, part);
                Some(fetch(*tid, &tensor.shape, from, to, procs, opts))
            })
            .collect()
    };
    let phases = pipelined_phases(gi, t, windows);
    let dropped: Vec<usize> = moved.iter().map(|a| a.step).collect();
    let mut steps = Vec::with_capacity(plan.steps.len() + t);
    for (i, s) in plan.steps.iter().enumerate() {
        if i == c {
            steps.extend(phases.iter().cloned());
        } else if !dropped.contains(&i) {
            steps.push(s.clone());
        }
    }
    p.steps = steps;
    p.groups[gi].phases = Some(Phases {
        index: v,
        count: t,
        resting: moved.iter().map(|a| (a.tensor, a.from.clone())).collect(),
        overlap: true,
    });
    let first = c - dropped.iter().filter(|&&d| d < c).count();
    for i in first..first + t {
        set_step_volume(&mut p, i, opts);
    }
    Some(p)
}

/// The fetch of the window `to` of tensor `tid` (of `shape`) out of its blocks in `from`.
fn fetch(
    tid: TensorId,
    shape: &[usize],
    from: Distribution,
    to: Distribution,
    procs: usize,
    opts: &PlanOptions,
) -> Fetch {
    let view = MoveView::new(shape, &from, &to, false, procs);
    let volume = view.volume(opts.per_rank);
    Fetch {
        tensor: tid,
        pattern: view.kind(volume.total),
        from,
        to,
        volume,
    }
}

/// Sets the volume of step `i` to its moves' words together.
fn set_step_volume(plan: &mut Plan, i: usize, opts: &PlanOptions) {
    let words = words_per_rank(&plan.step_moves(i), plan.procs);
    let mut v = Volume::default();
    for (r, &(s, w)) in words.iter().enumerate() {
        v.add_rank(r, s, w, opts.per_rank);
    }
    if let PlanStep::ComputePhase { volume, .. } = &mut plan.steps[i] {
        *volume = v;
    }
}

/// Words each rank of `0..n` sends and receives over `views`.
fn words_per_rank(views: &[MoveView], n: usize) -> Vec<(u64, u64)> {
    let mut out = vec![(0, 0); n];
    for m in views {
        for (o, (s, w)) in out.iter_mut().zip(m.words_per_rank(n)) {
            *o = (o.0 + s, o.1 + w);
        }
    }
    out
}

/// The plan's memory model.
fn memory(plan: &Plan) -> MemoryModel {
    MemoryModel::new(
        &plan.steps,
        &plan.tensors,
        &plan.groups,
        &plan.tree,
        plan.procs,
    )
}

/// The largest predicted peak of tensor data over the ranks.
fn max_peaks(plan: &Plan) -> (u64, u64) {
    let p = memory(plan).peaks(false);
    (p.max, p.max_with_buffers)
}

/// Recomputes the plan's predicted words, peaks and bounds from its steps through the planner's
/// own prediction (the per-rank I/O is unchanged: the groups' distributions are).
fn refresh_prediction(plan: &mut Plan, opts: &PlanOptions, defer_memory: bool) {
    let procs = plan.procs;
    let (mut received, mut sent) = (vec![0u64; procs], vec![0u64; procs]);
    for i in 0..plan.steps.len() {
        let views = plan.step_moves(i);
        if views.is_empty() {
            continue;
        }
        for (r, (s, w)) in words_per_rank(&views, procs).into_iter().enumerate() {
            sent[r] += s;
            received[r] += w;
        }
    }
    let words = (&received[..], &sent[..]);
    if defer_memory && crate::predict::memory_deferrable(opts) {
        crate::predict::set_words(&mut plan.prediction, words, opts);
        return;
    }
    let peaks = memory(plan).peaks(opts.per_rank);
    set_prediction(
        &mut plan.prediction,
        &mut plan.groups,
        crate::predict::WordSums::of(&received, &sent, opts.per_rank),
        peaks,
        procs,
        opts,
    );
}
