//! A measured dense run on P ranks: what `deinsum run` does for an einsum without sparse
//! operands, as library calls the CLI maps its flags onto. One rank's work
//! ([`run_rank`]: execute, write `--output`, gather the output for a check and the reports),
//! the same on P in-process ranks ([`run_in_process`]), the node's memory check before
//! anything is allocated ([`preflight`]) and the serial check of the gathered output
//! ([`Gathered::check`]).

use crate::report::{Check, ReferenceError};
use deinsum_exec::preflight::PreflightError;
use deinsum_exec::{
    execute_measured, gather_reports, Communicator, ExecError, ExecOptions, InProcess, Inputs,
    RankFailure, RunReport, Scalar,
};
use deinsum_plan::Plan;
use std::path::Path;

/// Why a measured run failed.
#[derive(Debug, thiserror::Error)]
pub enum DenseRunError {
    /// The executor (or a collective) failed.
    #[error(transparent)]
    Exec(#[from] ExecError),
    /// The result could not be written to its `.npy` file.
    #[error(transparent)]
    Npy(#[from] deinsum_exec::npy::NpyError),
    /// The ranks on this node would not fit its available memory; `note` says whether the
    /// planner can meet the budget that would fit.
    #[error("{error}{note}")]
    Preflight {
        /// The refusal (boxed: it is large beside the other variants).
        error: Box<PreflightError>,
        /// What the planner says of the budget that would fit (empty when nothing to say).
        note: String,
    },
    /// Another rank's node refused the run ([`preflight_together`]).
    #[error("another rank's node cannot fit the run (see its message)")]
    PeerRefused,
}

/// What one rank does besides executing the plan.
#[derive(Clone, Debug, Default)]
pub struct RunTasks<'a> {
    /// The executor's options (repeats, warm-up runs, threads per rank).
    pub exec: ExecOptions,
    /// Gather the output on rank 0 (for a check against the serial reference).
    pub gather: bool,
    /// Write the result to this `.npy` file, each rank its own block.
    pub output: Option<&'a Path>,
}

/// What rank 0 knows at the end of a run.
#[derive(Debug)]
pub struct Outcome {
    /// Every rank's report, in rank order.
    pub reports: Vec<RunReport>,
    /// The gathered output (only when [`RunTasks::gather`]).
    pub gathered: Option<Gathered>,
}

/// A gathered output widened to double precision of its kind, as the check compares it.
#[derive(Debug)]
pub enum Gathered {
    /// A real run's output, as f64.
    Real(Vec<f64>),
    /// A complex run's output, as complex f64.
    Complex(Vec<deinsum_exec::scalar::Complex64>),
}

impl Gathered {
    /// `v` widened to double precision of its kind.
    pub fn of<T: Scalar>(v: &[T]) -> Self {
        if T::DTYPE.is_complex() {
            Gathered::Complex(v.iter().map(|x| x.to_c128()).collect())
        } else {
            Gathered::Real(v.iter().map(|x| x.to_f64()).collect())
        }
    }

    /// This output against the serial reference of `plan` from the same `inputs` (the
    /// library's check policy: [`Check::against_reference`]).
    pub fn check<T: Scalar>(
        &self,
        plan: &Plan,
        inputs: &Inputs<T>,
    ) -> Result<Check, ReferenceError> {
        match self {
            Gathered::Real(v) => Check::against_reference(plan, inputs, v),
            Gathered::Complex(v) => Check::against_reference(plan, inputs, v),
        }
    }
}

/// The work of one rank, generic over the backend: rank 0 returns the outcome, the others
/// `None`.
pub fn run_rank<T: Scalar, C: Communicator>(
    plan: &Plan,
    comm: &C,
    inputs: &Inputs<T>,
    tasks: &RunTasks<'_>,
) -> Result<Option<Outcome>, DenseRunError> {
    let (t, rep) = execute_measured(plan, comm, inputs, &tasks.exec)?;
    if let Some(path) = tasks.output {
        let local: &[T] = t.local.as_ref().map_or(&[], |l| &l.data);
        deinsum_exec::npy::write_distributed(path, comm, &t.tensor.shape, &t.dist, local)?;
    }
    let g = if tasks.gather { t.gather(comm)? } else { None };
    let reports = gather_reports(comm, &rep)?;
    Ok(reports.map(|reports| Outcome {
        reports,
        gathered: g.map(|v| Gathered::of(&v)),
    }))
}

/// [`run_rank`] on the ranks of `world` (which has `plan.procs`); rank 0's outcome (`None`
/// only if it returned none).
pub fn run_in_process<T: Scalar>(
    world: &InProcess,
    plan: &Plan,
    inputs: &Inputs<T>,
    tasks: &RunTasks<'_>,
) -> Result<Option<Outcome>, RankFailure<DenseRunError>> {
    let outs = world.run(|comm| run_rank(plan, comm, inputs, tasks))?;
    Ok(outs.into_iter().flatten().next())
}

/// Refuses, before anything is allocated, a run of `T` whose `ranks_on_node` ranks would not
/// fit this node's available memory (with `holds_check`, also the serial reference of a
/// check). Passes when the available memory is unknown.
pub fn preflight<T: Scalar>(
    plan: &Plan,
    ranks_on_node: usize,
    holds_check: bool,
) -> Result<(), DenseRunError> {
    use deinsum_exec::preflight as pf;
    let Some(avail) = pf::available_memory() else {
        return Ok(());
    };
    let demand = pf::NodeDemand {
        dtype: T::DTYPE,
        ranks_on_node,
        extra_words: if holds_check { check_words(plan) } else { 0 },
    };
    let Err(error) = pf::check_memory(plan, demand, avail) else {
        return Ok(());
    };
    // Say whether the planner can meet the budget that would fit, rather than leave it a guess.
    let note = match &error {
        PreflightError::NotEnoughMemory {
            fit_mem: Some(w), ..
        } => {
            let mut o = crate::Options::procs(plan.procs);
            o.mem = Some(*w);
            // Where the run's plan starts its inputs, so the note speaks of the same plan.
            o.inputs_anywhere = plan.inputs_in_place;
            match crate::Einsum::compile_parsed(&plan.einsum, &o) {
                Ok(c) => format!(
                    " (the planner meets --mem {w}: peak {} words per rank with buffers)",
                    c.plan().prediction.max_peak_memory_with_buffers
                ),
                Err(err) => format!(" (but no plan meets --mem {w}: {err})"),
            }
        }
        _ => String::new(),
    };
    Err(DenseRunError::Preflight {
        error: Box::new(error),
        note,
    })
}

/// [`preflight`] on every rank of `comm`, all refusing together so that none waits on a
/// refused peer: this rank's own refusal, else [`DenseRunError::PeerRefused`] when another
/// rank refused.
pub fn preflight_together<T: Scalar, C: Communicator>(
    plan: &Plan,
    comm: &C,
    ranks_on_node: usize,
    holds_check: bool,
) -> Result<(), DenseRunError> {
    let verdict = preflight::<T>(plan, ranks_on_node, holds_check);
    let mut refused = [u64::from(verdict.is_err())];
    comm.all_reduce_max_u64(&mut refused)
        .map_err(ExecError::from)?;
    match verdict {
        Ok(()) if refused[0] > 0 => Err(DenseRunError::PeerRefused),
        other => other,
    }
}

/// Predicted seconds per step: those of `machine` when given (the plan's steps timed on it,
/// never a re-plan), else the plan's own.
pub fn predicted_seconds(plan: &Plan, machine: Option<&deinsum_plan::Machine>) -> Vec<f64> {
    match machine {
        Some(m) => deinsum_plan::time::TimeModel::new(m, plan.procs, plan.dtype).step_seconds(plan),
        None => plan.prediction.step_seconds.clone(),
    }
}

/// Words the serial check holds at once: every input whole and the output twice (gathered and
/// reference).
fn check_words(plan: &Plan) -> u128 {
    let size = |t: &deinsum_plan::Tensor| t.shape.iter().map(|&n| n as u128).product::<u128>();
    plan.tensors
        .iter()
        .map(|t| match t.kind {
            deinsum_plan::TensorKind::Input(_) => size(t),
            deinsum_plan::TensorKind::Output => 2 * size(t),
            deinsum_plan::TensorKind::Intermediate => 0,
        })
        .sum()
}
