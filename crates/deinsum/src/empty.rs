//! Einsums with an index of extent 0 (NumPy's empty arrays): the result is known without
//! planning a move (empty, or zeros where the empty index is summed), but `deinsum plan` and
//! the Python `compile` still give a plan. That plan is the one of the same einsum with every
//! empty extent made 1 (its path, grids and steps), carrying the real extents in its einsum and
//! tensor shapes, with every predicted figure zero: nothing moves and nothing is computed. The
//! executor returns the output of such a plan without running its steps
//! (`deinsum_exec::execute` and its kin).

use deinsum_expr::{ExprError, ParsedEinsum};
use deinsum_plan::choose::Choice;
use deinsum_plan::{Plan, PlanError, Prediction, Volume};

/// Whether some index of `einsum` has extent 0.
pub fn has_empty_extent(einsum: &ParsedEinsum) -> bool {
    einsum.extents().values().any(|&n| n == 0)
}

/// `einsum` with every extent 0 made 1 (the skeleton the planner plans); an error only where
/// the skeleton's operands would have more elements than fit in `usize`.
fn skeleton(einsum: &ParsedEinsum) -> Result<ParsedEinsum, ExprError> {
    let extents = einsum
        .extents()
        .iter()
        .map(|(&c, &n)| (c, n.max(1)))
        .collect();
    ParsedEinsum::restore(
        einsum.inputs().to_vec(),
        einsum.output().to_vec(),
        extents,
        einsum.implicit_output(),
        einsum.ellipsis().to_vec(),
    )
}

/// The skeleton's plan made the plan of `einsum`: its extents and tensor shapes, and no
/// predicted word, multiply-add or second.
fn emptied(mut plan: Plan, einsum: &ParsedEinsum) -> Plan {
    for t in &mut plan.tensors {
        t.shape = t.indices.iter().map(|c| einsum.extent(*c)).collect();
    }
    for g in &mut plan.groups {
        g.max_flops_per_rank = 0.0;
        g.bound_memory_independent = 0.0;
        g.bound_memory_dependent = 0.0;
        g.predicted_max_per_rank = 0;
    }
    for s in &mut plan.steps {
        use deinsum_plan::PlanStep;
        if let PlanStep::Redistribute { volume, .. } | PlanStep::ComputePhase { volume, .. } = s {
            *volume = Volume::default();
        }
    }
    let p = &plan.prediction;
    plan.prediction = Prediction {
        ratio: 1.0,
        step_seconds: vec![0.0; p.step_seconds.len()],
        machine: p.machine.clone(),
        ..Prediction::default()
    };
    plan.einsum = einsum.clone();
    plan
}

/// Plans `einsum`, which has an empty extent, with `build` (the planner the caller would call):
/// see the module's doc. `E`, the caller's error, takes an expression's and a plan's.
pub fn plan_empty<E: From<ExprError> + From<PlanError>>(
    einsum: &ParsedEinsum,
    build: impl FnOnce(&ParsedEinsum) -> Result<Plan, PlanError>,
) -> Result<Plan, E> {
    Ok(emptied(build(&skeleton(einsum)?)?, einsum))
}

/// [`plan_empty`] for `deinsum plan`'s choice among candidate paths: the kept candidate only,
/// with no predicted figure.
pub fn choose_empty<E: From<ExprError> + From<PlanError>>(
    einsum: &ParsedEinsum,
    choose: impl FnOnce(&ParsedEinsum) -> Result<Choice, PlanError>,
) -> Result<Choice, E> {
    let mut c = choose(&skeleton(einsum)?)?;
    let mut kept = c.candidates.swap_remove(c.chosen);
    kept.flops = 0.0;
    kept.seconds = 0.0;
    kept.words = 0;
    Ok(Choice {
        plan: emptied(c.plan, einsum),
        candidates: vec![kept],
        chosen: 0,
        runner_up: None,
        objective: c.objective,
    })
}
