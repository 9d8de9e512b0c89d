//! The planning passes in order: the planner's stages over every group, its `finish`, then the
//! overlap post-pass; and the search for the least budget that plans. The top of the crate's
//! planning modules: nothing below it calls back up.

use crate::overlap;
use crate::planner::Planner;
use crate::rank_words::MoveMemo;
use crate::source;
use crate::time;
use crate::{Objective, Plan, PlanError, PlanOptions};
use deinsum_expr::Index;
use deinsum_expr::ParsedEinsum;
use deinsum_path::ContractionTree;
use deinsum_soap::Fusion;

/// Builds the plan from an already chosen tree and fusion (what [`crate::build`] does after
/// running the path optimizer and the SOAP analysis), one group at a time through the
/// planner's stages. The SOAP parallel bound of each group is taken for P ranks and the budget
/// S (without a budget, the plan's own peak memory per rank).
fn build_untimed(
    einsum: &ParsedEinsum,
    tree: &ContractionTree,
    path: Vec<Vec<usize>>,
    fusion: &Fusion,
    opts: &PlanOptions,
) -> Result<Plan, PlanError> {
    let memo = MoveMemo::default();
    with_least_budget(opts, |o| {
        build_once(einsum, tree, path.clone(), fusion, o, (&memo, false))
    })
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
    memo: (&MoveMemo, bool),
) -> Result<Plan, PlanError> {
    let Some(s) = opts.mem.or(opts.mem_total) else {
        return plan_groups(einsum, tree, path, fusion, opts, None, memo).map_err(|(_, e)| e);
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
        match plan_groups(einsum, tree, path.clone(), fusion, opts, tight, memo) {
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
    plan_groups(einsum, tree, path, fusion, opts, None, memo).map_err(|(_, e)| e)
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
    (memo, defer_memory): (&MoveMemo, bool),
) -> Result<Plan, (usize, PlanError)> {
    let n = fusion.groups.len();
    let mut planner = Planner::new(einsum, tree, opts, memo).map_err(|e| (0, e))?;
    planner.tight = tight;
    planner.defer_memory = defer_memory;
    for (gi, group) in fusion.groups.iter().enumerate() {
        planner
            .plan_group(gi, group, gi + 1 == n)
            .map_err(|e| (gi, e))?;
    }
    // The overlap post-pass: its one call site (a plan in, the same plan pipelined out).
    planner
        .finish(path)
        .map(|plan| overlap::apply_in(plan, opts, defer_memory))
        .map_err(|e| (n, e))
}

/// How many times the groups before one that found no room are planned again.
const RETIGHTEN: usize = 12;

/// The SOAP fast memory of the analysis: S, or an even share of the data.
pub fn analysis_memory(einsum: &ParsedEinsum, opts: &PlanOptions) -> f64 {
    let data: f64 = (0..einsum.num_inputs())
        .map(|k| einsum.input_indices(k))
        .chain(std::iter::once(einsum.output()))
        .map(|idx| {
            idx.iter()
                .map(|&c| einsum.extent(c) as f64)
                .product::<f64>()
        })
        .sum();
    match opts.mem {
        Some(s) => s as f64,
        None => (data / opts.procs.max(1) as f64).max(1.0),
    }
}

/// Fuses, bounds and plans one contraction tree (with `path`, its linear form).
pub fn plan_tree(
    einsum: &ParsedEinsum,
    tree: &ContractionTree,
    path: Vec<Vec<usize>>,
    opts: &PlanOptions,
) -> Result<Plan, PlanError> {
    plan_tree_in(einsum, tree, path, opts, (&MoveMemo::default(), false))
}

/// [`plan_tree`] sharing the per-rank words of moves with the other trees of a choice
/// (`memo.0`); with `memo.1` and no cap, the plan's memory prediction is left to the caller
/// ([`crate::predict::complete_memory`]): candidates are compared on seconds and words.
pub(crate) fn plan_tree_in(
    einsum: &ParsedEinsum,
    tree: &ContractionTree,
    path: Vec<Vec<usize>>,
    opts: &PlanOptions,
    memo: (&MoveMemo, bool),
) -> Result<Plan, PlanError> {
    if tree.has_multi_operand_step() {
        return Err(PlanError::MultiOperandStep {
            limit: opts.path.memory_limit.unwrap_or(0),
            path: format!("{path:?}"),
        });
    }
    let operands: Vec<Vec<Index>> = (0..einsum.num_inputs())
        .map(|k| einsum.input_indices(k).to_vec())
        .collect();
    source::check_sources(opts, &operands)?;
    let fusion = deinsum_soap::analyze(tree, analysis_memory(einsum, opts))?;
    // One pass: `build` searches the least budget around the whole choice.
    let planned = |o: &PlanOptions| {
        build_once(einsum, tree, path.clone(), &fusion, o, memo).map(|mut plan| {
            time::annotate(&mut plan, &o.machine);
            plan
        })
    };
    let free = planned(opts);
    if !opts.any_anywhere(operands.len()) || opts.tree_search == crate::TreeSearch::WhenItPays {
        // (A quick plan keeps the in-place start: re-planning from other starts is part of
        // the search it skips.)
        return free;
    }
    // An operand readable anywhere can also be read canonically: the planner places each
    // group greedily, so the in-place start can predict worse, and the better plan is kept
    // (with more freedom the prediction is never higher).
    // Planned again from where the free plan loads them, the later groups' greedy choices can
    // differ; that plan is a candidate too, so Anywhere is never predicted slower than the
    // same layouts given.
    let refined = free
        .as_ref()
        .ok()
        .map(|p| planned(&opts.anywhere_as_loaded(p, operands.len())));
    let fixed = planned(&opts.anywhere_as_canonical(operands.len()));
    let mut best = free;
    for other in refined.into_iter().chain(std::iter::once(fixed)) {
        best = match (best, other) {
            (Ok(a), Ok(b)) => Ok(if better(opts.objective, &b, &a) { b } else { a }),
            (Ok(a), Err(_)) => Ok(a),
            (Err(_), b) => b,
        };
    }
    best
}

/// True when plan `b` beats plan `a` under `objective` (strictly, so `a` wins a tie).
pub(crate) fn better(objective: Objective, b: &Plan, a: &Plan) -> bool {
    let key = |p: &Plan| match objective {
        Objective::Volume => (p.prediction.max_per_rank as f64, p.prediction.seconds),
        _ => (p.prediction.seconds, p.prediction.max_per_rank as f64),
    };
    key(b) < key(a)
}

/// Plans a tree with its fusion (`build_untimed`: grids, moves, predicted words and
/// memory), then predicts its seconds on `opts.machine` ([`time::annotate`]).
pub fn build_from(
    einsum: &ParsedEinsum,
    tree: &ContractionTree,
    path: Vec<Vec<usize>>,
    fusion: &deinsum_soap::Fusion,
    opts: &PlanOptions,
) -> Result<Plan, PlanError> {
    let mut plan = build_untimed(einsum, tree, path, fusion, opts)?;
    time::annotate(&mut plan, &opts.machine);
    Ok(plan)
}
