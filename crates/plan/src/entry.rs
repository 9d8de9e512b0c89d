//! The crate's entry: [`build`] plans an einsum, along the path search's tree
//! ([`build_flops`]) or choosing among candidate trees ([`crate::choose`]), under the least
//! budget that plans. The top of the crate: nothing in it is called from below.

use crate::choose;
use crate::driver::{plan_tree, with_least_budget};
use crate::{Objective, Plan, PlanError, PlanOptions, TreeSearch, SEARCH_PAYS};
use deinsum_expr::ParsedEinsum;

/// Plans `einsum` for `opts.procs` ranks: finds the contraction tree
/// ([`deinsum_path::optimize`]), the fusion groups and their SOAP bounds
/// ([`deinsum_soap::analyze`]), then a grid per group, the moves between groups and the
/// predicted volumes and seconds ([`crate::build_from`]). The SOAP analysis uses the budget S when
/// given, else an even share of the data (`(inputs + output) / P` words, at least 1); the
/// per-rank bound beside the prediction uses S, or without a budget the plan's own peak memory
/// per rank. Under [`Objective::Flops`] the tree is the path search's; otherwise several
/// candidate trees are planned and the one with the least predicted time (or words) is kept
/// ([`choose`]).
pub fn build(einsum: &ParsedEinsum, opts: &PlanOptions) -> Result<Plan, PlanError> {
    // The SOAP fusion depends on the budget, so the least budget is searched over all of it
    // (the candidate paths included).
    with_least_budget(opts, |o| build_once(einsum, o))
}

/// [`build`] under `opts` as given (no search for the least budget).
fn build_once(einsum: &ParsedEinsum, opts: &PlanOptions) -> Result<Plan, PlanError> {
    match (opts.objective, opts.tree_search) {
        (Objective::Flops, _) => build_flops(einsum, opts),
        (Objective::Time, TreeSearch::WhenItPays) => match choose::first_tree(einsum, opts) {
            Ok(p) if p.prediction.seconds < SEARCH_PAYS => Ok(p),
            // Worth the search (or refused under a budget another tree may meet).
            _ => {
                let full = PlanOptions {
                    tree_search: TreeSearch::Full,
                    ..opts.clone()
                };
                choose::choose(einsum, &full).map(|c| c.plan)
            }
        },
        _ => choose::choose(einsum, opts).map(|c| c.plan),
    }
}

/// [`build`] along the path search's tree alone (the flops-optimal one by default), under
/// `opts` as given.
pub fn build_flops(einsum: &ParsedEinsum, opts: &PlanOptions) -> Result<Plan, PlanError> {
    if opts.procs == 0 {
        return Err(PlanError::ZeroProcs);
    }
    let info = deinsum_path::optimize(einsum, &opts.path)?;
    plan_tree(einsum, &info.tree, info.path.clone(), opts)
}
