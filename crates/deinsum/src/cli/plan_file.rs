//! `deinsum run --plan FILE`: run a plan saved by `deinsum plan ... -o FILE` exactly as it
//! is. The file is checked (it parses, is of this schema version, is consistent with itself,
//! and is for the run's number of ranks) before any data moves.

use super::InputError;
use deinsum_plan::Plan;
use std::path::Path;

/// Reads and checks the plan file at `path`; every refusal names the file.
pub fn load(path: &Path) -> Result<Plan, InputError> {
    let name = path.display();
    if path.is_dir() {
        return Err(InputError(format!(
            "--plan {name}: is a directory, not a plan file"
        )));
    }
    let text = std::fs::read_to_string(path)
        .map_err(|e| InputError(format!("--plan {name}: cannot read it: {e}")))?;
    let plan = Plan::from_json(&text).map_err(|e| InputError(format!("--plan {name}: {e}")))?;
    validate(&plan).map_err(|why| InputError(format!("--plan {name}: not a valid plan: {why}")))?;
    Ok(plan)
}

/// The checks a plan must pass to be run: what the executor takes for granted.
fn validate(plan: &Plan) -> Result<(), String> {
    if plan.procs == 0 {
        return Err("it is for 0 ranks".into());
    }
    // The einsum it carries is its expression with its extents.
    let spec = deinsum_expr::ExtentSpec {
        shapes: Some(
            plan.einsum
                .inputs()
                .iter()
                .map(|o| o.shape(plan.einsum.extents()))
                .collect(),
        ),
        ..Default::default()
    };
    match deinsum_expr::parse(&plan.expression, &spec) {
        Ok(e) if e.inputs() == plan.einsum.inputs() && e.output() == plan.einsum.output() => {}
        Ok(_) => {
            return Err(format!(
                "its einsum does not match its expression {:?}",
                plan.expression
            ))
        }
        Err(e) => return Err(format!("its expression does not parse: {e}")),
    }
    for (k, g) in plan.groups.iter().enumerate() {
        if g.grid.size() > plan.procs {
            return Err(format!(
                "group {k}'s grid has {} ranks, more than the plan's {}",
                g.grid.size(),
                plan.procs
            ));
        }
    }
    if plan.tensor(plan.output.0).is_none() {
        return Err(format!(
            "its output tensor {} is not among its tensors",
            plan.output.0
        ));
    }
    if plan.steps.is_empty() {
        return Err("it has no steps".into());
    }
    Ok(())
}

/// Refuses a plan for another number of ranks than the run's (`what` says where that number
/// comes from: `--procs`, the MPI world).
pub fn check_procs(plan: &Plan, path: &Path, procs: usize, what: &str) -> Result<(), InputError> {
    if plan.procs != procs {
        return Err(InputError(format!(
            "--plan {}: the plan is for {} ranks but {what} has {procs}; plan again with \
             --procs {procs}",
            path.display(),
            plan.procs
        )));
    }
    Ok(())
}
