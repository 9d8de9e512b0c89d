//! The joint choice of path and plan: several candidate trees are planned in full and the one
//! with the least predicted time (or words, or FLOPs) is kept. The planner itself is not
//! touched: each candidate goes through [`crate::plan_tree`].

use crate::driver::plan_tree_in;
use crate::rank_words::MoveMemo;
pub use crate::Objective;
use crate::{Plan, PlanError, PlanOptions};
use deinsum_expr::ParsedEinsum;
use rayon::prelude::*;

/// TreeCandidate trees by FLOPs: at most this many...
pub const CHEAPEST: usize = 4;
/// ...within this factor of the cheapest.
pub const FLOPS_FACTOR: f64 = 4.0;

/// One planned candidate.
#[derive(Clone, Debug, PartialEq)]
pub struct TreeCandidate {
    /// Where the tree came from: `flops` (the path search), `cheapest` (k cheapest by FLOPs),
    /// `io` (least fused SOAP I/O).
    pub origin: &'static str,
    /// The tree in opt_einsum's linear format.
    pub path: Vec<Vec<usize>>,
    /// FLOPs of the path (opt_einsum's count).
    pub flops: f64,
    /// Predicted seconds of its plan.
    pub seconds: f64,
    /// Words received by the busiest rank over its plan.
    pub words: u64,
}

/// The chosen plan, every candidate planned, and the runner-up.
#[derive(Clone, Debug)]
pub struct Choice {
    /// The plan kept.
    pub plan: Plan,
    /// Every candidate that could be planned, in the order considered.
    pub candidates: Vec<TreeCandidate>,
    /// Position of the kept plan in `candidates`.
    pub chosen: usize,
    /// Position of the best other candidate under the objective, if any.
    pub runner_up: Option<usize>,
    /// The objective.
    pub objective: Objective,
}

impl Choice {
    /// The objective's figure of candidate `c` (seconds, words, or FLOPs).
    pub fn score(&self, c: usize) -> f64 {
        score(self.objective, &self.candidates[c])
    }
}

fn score(o: Objective, c: &TreeCandidate) -> f64 {
    match o {
        Objective::Time => c.seconds,
        Objective::Volume => c.words as f64,
        Objective::Flops => c.flops,
    }
}

/// The candidate trees: the path search's, the k cheapest by FLOPs within a factor, and the
/// tree of least fused SOAP I/O; each once.
fn candidate_trees(
    einsum: &ParsedEinsum,
    opts: &PlanOptions,
) -> Result<Vec<(&'static str, deinsum_path::PathInfo)>, PlanError> {
    let cheap = deinsum_path::candidates::cheapest(einsum, &opts.path, CHEAPEST, FLOPS_FACTOR)?;
    let mut out: Vec<(&'static str, deinsum_path::PathInfo)> = cheap
        .into_iter()
        .enumerate()
        .map(|(k, p)| (if k == 0 { "flops" } else { "cheapest" }, p))
        .collect();
    let s = crate::analysis_memory(einsum, opts);
    // An I/O tree that cannot be found (a memory limit no pairwise path meets) is no candidate.
    if let Ok((io, _)) = deinsum_soap::io_optimal(einsum, &opts.path, s) {
        if out.iter().all(|(_, p)| p.path != io.path) {
            out.push(("io", io));
        }
    }
    Ok(out)
}

/// [`choose`] with the least-budget search around it (as [`crate::build`]): when a cap is too
/// small, the error's figure is the least value of that cap that plans.
pub fn choose_within_budget(
    einsum: &ParsedEinsum,
    opts: &PlanOptions,
) -> Result<Choice, PlanError> {
    crate::driver::with_least_budget(opts, |o| choose(einsum, o))
}

/// Plans every candidate tree and keeps the least under `opts.objective` (the first on a tie,
/// so the path search's tree wins unless another is strictly better). A candidate the planner
/// refuses (over the memory budget) is skipped; when all are refused, the first one's error
/// is returned.
///
/// When some operand is [`crate::Source::Anywhere`], every tree is planned once more with
/// those operands given where the chosen plan loads them, and the better choice is kept: a
/// tree can do better from those layouts than from its own greedy start, and with it the
/// prediction for `Anywhere` is never above the one for the layouts it picks.
pub fn choose(einsum: &ParsedEinsum, opts: &PlanOptions) -> Result<Choice, PlanError> {
    // Both rounds plan the same trees from nearby starts: many moves recur.
    let memo = MoveMemo::default();
    let first = choose_trees(einsum, opts, &memo)?;
    let n = einsum.num_inputs();
    let mut chosen = if !opts.any_anywhere(n) {
        first
    } else {
        match choose_trees(einsum, &opts.anywhere_as_loaded(&first.plan, n), &memo) {
            Ok(again) if crate::driver::better(opts.objective, &again.plan, &first.plan) => again,
            _ => first,
        }
    };
    // Only the kept plan's memory is predicted (the candidates were planned without it).
    if crate::predict::memory_deferrable(opts) {
        crate::predict::complete_memory(&mut chosen.plan, opts, &memo);
    }
    Ok(chosen)
}

/// The path search's tree alone, planned once from the in-place start (no candidate trees,
/// no second round from the loaded layouts): [`crate::TreeSearch::WhenItPays`]'s first try.
pub(crate) fn first_tree(einsum: &ParsedEinsum, opts: &PlanOptions) -> Result<Plan, PlanError> {
    if opts.procs == 0 {
        return Err(PlanError::ZeroProcs);
    }
    let info = deinsum_path::optimize(einsum, &opts.path)?;
    let memo = MoveMemo::default();
    let mut plan = plan_tree_in(einsum, &info.tree, info.path.clone(), opts, (&memo, true))?;
    if crate::predict::memory_deferrable(opts) {
        crate::predict::complete_memory(&mut plan, opts, &memo);
    }
    Ok(plan)
}

/// [`choose`] over the candidate trees, each planned by [`crate::plan_tree`] (sharing `memo`).
fn choose_trees(
    einsum: &ParsedEinsum,
    opts: &PlanOptions,
    memo: &MoveMemo,
) -> Result<Choice, PlanError> {
    if opts.procs == 0 {
        return Err(PlanError::ZeroProcs);
    }
    let mut plans: Vec<Plan> = Vec::new();
    let mut candidates = Vec::new();
    let mut first_err = None;
    let trees = candidate_trees(einsum, opts)?;
    // The trees are planned independently, on all cores (results kept in the trees' order, so
    // the choice is the same as planning them one after another).
    let planned: Vec<Result<Plan, PlanError>> = deinsum_runtime::install(|| {
        trees
            .par_iter()
            .map(|(_, info)| {
                plan_tree_in(einsum, &info.tree, info.path.clone(), opts, (memo, true))
            })
            .collect()
    });
    for ((origin, info), planned) in trees.into_iter().zip(planned) {
        match planned {
            Ok(p) => {
                candidates.push(TreeCandidate {
                    origin,
                    path: info.path.clone(),
                    flops: info.flops.as_f64(),
                    seconds: p.prediction.seconds,
                    words: p.prediction.max_per_rank,
                });
                plans.push(p);
            }
            Err(e) => {
                first_err.get_or_insert(e);
            }
        }
    }
    let objective = opts.objective;
    let order = |a: &usize, b: &usize| {
        let (x, y) = (&candidates[*a], &candidates[*b]);
        score(objective, x)
            .total_cmp(&score(objective, y))
            .then(x.seconds.total_cmp(&y.seconds))
            .then(a.cmp(b))
    };
    let mut ranked: Vec<usize> = (0..candidates.len()).collect();
    // Under Flops the path search's tree is kept as it is; the others rank behind it.
    if objective == Objective::Flops {
        if ranked.len() > 1 {
            ranked[1..].sort_by(order);
        }
    } else {
        ranked.sort_by(order);
    }
    let Some(&chosen) = ranked.first() else {
        return Err(first_err.unwrap_or(PlanError::Inconsistent("no candidate tree".into())));
    };
    let runner_up = ranked.get(1).copied();
    let plan = plans.swap_remove(chosen);
    Ok(Choice {
        plan,
        candidates,
        chosen,
        runner_up,
        objective,
    })
}
